//! Where policy documents come from: SSM parameters under a prefix (see
//! [`crate::aws::ssm::Ssm`]) or files, and which pool each may define.
//!
//! A parameter path owns its pool: the document at `<prefix><cluster>/<name>` is the policy of
//! pool `<cluster>/<name>` and of no other, so whoever may write one team's part of the prefix
//! (an IAM condition on the parameter path) cannot define another team's pools. A file (the
//! local CLI) names its pool itself.

use async_trait::async_trait;

use super::PoolId;
use crate::port::{ErrorKind, PortError};

/// Default SSM prefix holding one policy parameter per pool.
pub const DEFAULT_PREFIX: &str = "/nodecycle/pools/";
/// Environment variable overriding [`DEFAULT_PREFIX`].
pub const PREFIX_ENV: &str = "NODECYCLE_POLICY_PREFIX";

/// One policy document and where it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDocument {
    /// Parameter name or file path.
    pub source: String,
    /// YAML or JSON text.
    pub text: String,
    /// Which pool the document may define.
    pub owner: Owner,
}

impl PolicyDocument {
    /// A document that names its own pool (a file, a test).
    pub fn file(source: impl Into<String>, text: impl Into<String>) -> Self {
        PolicyDocument {
            source: source.into(),
            text: text.into(),
            owner: Owner::Document,
        }
    }

    /// Parameter `name` under `prefix`, owning the pool its path names ([`owner_of`]).
    pub fn parameter(prefix: &str, name: impl Into<String>, text: impl Into<String>) -> Self {
        let source = name.into();
        PolicyDocument {
            owner: owner_of(prefix, &source),
            source,
            text: text.into(),
        }
    }
}

/// Which pool a document may define.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The document names its pool (`cluster`, `name`): files given to the local CLI.
    Document,
    /// The parameter's path names the pool: the document may leave out `cluster` and `name`,
    /// and naming any other pool makes it invalid.
    Path(PoolId),
    /// A parameter under the prefix whose path names no pool: why (it defines nothing).
    NoPool(String),
}

/// The owner of parameter `name` under `prefix` (`/nodecycle/pools/`): `<prefix><cluster>/<name>`
/// with a valid cluster and pool name is [`Owner::Path`]; anything else (another depth, an
/// invalid name, outside the prefix) is [`Owner::NoPool`].
pub fn owner_of(prefix: &str, name: &str) -> Owner {
    let prefix = format!("{}/", prefix.trim_end_matches('/'));
    let expected = format!("expected {prefix}<cluster>/<name>, e.g. {prefix}prod/general");
    let Some(rest) = name.strip_prefix(&prefix) else {
        return Owner::NoPool(format!(
            "the parameter {} is not under the policy prefix; {expected}",
            crate::problem::quote(name)
        ));
    };
    match PoolId::parse(rest) {
        Ok(id) => Owner::Path(id),
        Err(why) => Owner::NoPool(format!(
            "the parameter path names no pool ({why}); {expected}"
        )),
    }
}

/// Reads policy documents.
#[async_trait]
pub trait PolicySource: Send + Sync {
    /// Every document, sorted by source.
    async fn all(&self) -> Result<Vec<PolicyDocument>, PortError>;
    /// One document by source; `Ok(None)` if it does not exist.
    async fn one(&self, source: &str) -> Result<Option<PolicyDocument>, PortError>;
    /// True when `name` (e.g. a changed parameter) is one of this source's documents.
    fn contains(&self, name: &str) -> bool;
}

/// Policy documents in local files.
#[derive(Debug, Clone)]
pub struct Files(pub Vec<String>);

#[async_trait]
impl PolicySource for Files {
    async fn all(&self) -> Result<Vec<PolicyDocument>, PortError> {
        let mut out = Vec::new();
        for path in &self.0 {
            if let Some(doc) = self.one(path).await? {
                out.push(doc);
            } else {
                return Err(PortError::new(
                    "read",
                    ErrorKind::NotFound,
                    format!("{path}: no such file"),
                ));
            }
        }
        Ok(out)
    }

    async fn one(&self, source: &str) -> Result<Option<PolicyDocument>, PortError> {
        match std::fs::read_to_string(source) {
            Ok(text) => Ok(Some(PolicyDocument::file(source, text))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(PortError::new(
                "read",
                ErrorKind::Other,
                format!("{source}: {e}"),
            )),
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|p| p == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_path_owns_its_pool() {
        let pool = |c: &str, n: &str| Owner::Path(PoolId::new(c, n).unwrap());
        assert_eq!(
            owner_of("/nodecycle/pools/", "/nodecycle/pools/prod/general"),
            pool("prod", "general")
        );
        assert_eq!(
            owner_of("/nodecycle/pools", "/nodecycle/pools/prod/general"),
            pool("prod", "general")
        );
        for other in [
            "/nodecycle/pools/prod",
            "/nodecycle/pools/prod/general/x",
            "/nodecycle/pools/prod/gen.eral",
            "/nodecycle/poolsx/prod/general",
            "/other/prod/general",
        ] {
            assert!(
                matches!(owner_of("/nodecycle/pools/", other), Owner::NoPool(_)),
                "{other}"
            );
        }
    }
}
