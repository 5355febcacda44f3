//! A pool's identity, `<cluster>/<name>` or `<account>/<region>/<cluster>/<name>`
//! ([`super::place`]), with every part valid: the key of every record nodecycle writes for the
//! pool, so nothing is written under a name that is not one.

use std::fmt;

use super::fields::{self, eks_name};
use crate::problem::Problems;

/// Longest EKS cluster name.
pub const MAX_CLUSTER: usize = 100;
/// Longest pool name (a Kubernetes label value).
pub const MAX_NAME: usize = 63;

/// `<cluster>/<name>`: the cluster an EKS cluster name (1-100 characters, letters, digits, `-`
/// and `_`, a letter or digit first), the name a pool name (the same characters, 1-63). Neither
/// holds `/`, `#`, `.`, spaces or control characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolId {
    /// The cluster's account and region; `None` = the cell's own.
    pub place: Option<super::Place>,
    /// EKS cluster name.
    pub cluster: String,
    /// Pool name.
    pub name: String,
}

impl PoolId {
    /// Checks both names; the error lists every broken rule, naming `cluster` and `name`.
    pub fn new(cluster: &str, name: &str) -> Result<PoolId, String> {
        let mut problems = Problems::new();
        let cluster = check(cluster, "cluster", true, &mut problems);
        let name = check(name, "name", false, &mut problems);
        match (cluster, name) {
            (Some(cluster), Some(name)) => Ok(PoolId {
                place: None,
                cluster,
                name,
            }),
            _ => Err(problems
                .errors()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")),
        }
    }

    /// Parses `<cluster>/<name>` or `<account>/<region>/<cluster>/<name>`.
    pub fn parse(text: &str) -> Result<PoolId, String> {
        let parts: Vec<&str> = text.splitn(5, '/').collect();
        match parts.as_slice() {
            [account, region, cluster, name] if super::place::is_account(account) => {
                let place = super::Place::new(account, region);
                let id = PoolId::new(cluster, name);
                match (place, id) {
                    (Ok(place), Ok(id)) => Ok(PoolId {
                        place: Some(place),
                        ..id
                    }),
                    (Err(a), Err(b)) => Err(format!("{a}; {b}")),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
            _ => match text.split_once('/') {
                Some((cluster, name)) => PoolId::new(cluster, name),
                None => Err(format!("{} is not <cluster>/<name>", fields::quote(text))),
            },
        }
    }
}

/// The rule of `cluster` (`is_cluster`) or of a pool `name`; pushes its problems at `path`.
pub(super) fn check(
    text: &str,
    path: &str,
    is_cluster: bool,
    problems: &mut Problems,
) -> Option<String> {
    let rule = if is_cluster {
        eks_name("the EKS cluster name", MAX_CLUSTER)
    } else {
        eks_name("the pool name", MAX_NAME)
    };
    fields::name(
        &serde_json::Value::String(text.to_string()),
        path,
        &rule,
        problems,
    )
}

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&super::place::pool_id(
            self.place.as_ref(),
            &self.cluster,
            &self.name,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert_eq!(
            PoolId::parse("prod/general").map(|p| p.to_string()),
            Ok("prod/general".into())
        );
        for bad in [
            "prod#x/..",
            "prod/gen/eral",
            "prod",
            "/general",
            "prod/",
            "prod/gen eral",
            "prod/-x",
            "prod/a.b",
            "1/eu-west-1/prod/general",
            "111122223333/mars-1/prod/general",
            "111122223333/eu-west-1/prod/a.b",
            "111122223333/eu-west-1/prod",
            "111122223333/eu-west-1/prod/general/x",
        ] {
            assert!(PoolId::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            PoolId::parse("111122223333/eu-west-1/prod/general").map(|p| p.to_string()),
            Ok("111122223333/eu-west-1/prod/general".into())
        );
        let long = format!("prod/{}", "a".repeat(300));
        let e = PoolId::parse(&long).unwrap_err();
        assert!(e.contains("name: too long (300 characters)"), "{e}");
        // A message quotes at most a prefix of what it was given.
        assert!(e.len() < 400, "{}", e.len());
        let e = PoolId::parse(&format!("{}x", "#".repeat(1 << 20))).unwrap_err();
        assert!(e.len() < 400, "{}", e.len());
    }
}
