//! Where a pool lives: the AWS account and region of its cluster (`account`, `region` in a
//! policy). A policy that names neither is the cell's own (the account and region nodecycle
//! runs in): its pool id stays `<cluster>/<name>`, so every policy written before accounts and
//! regions existed keeps its id and its table items. A policy outside the cell names both, and
//! its pool id is `<account>/<region>/<cluster>/<name>`: the same in every cell that reads the
//! shared table, whichever cell serves the pool (a half-named place would default differently in
//! cells of different regions, so it is refused).

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::fields::{self, quote};
use crate::problem::Problems;

/// An account and a region, both checked: 12 digits, and a region name of [`REGIONS`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Place {
    /// 12-digit account id.
    pub account: String,
    /// Region name, e.g. `eu-west-1`.
    pub region: String,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.account, self.region)
    }
}

/// The AWS regions a pool may name (commercial, GovCloud, China), as of 2026.
pub const REGIONS: [&str; 40] = [
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "cn-north-1",
    "cn-northwest-1",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "us-west-1",
    "us-west-2",
    "eusc-de-east-1",
    "ap-southeast-8",
];

/// True for a 12-digit account id.
pub fn is_account(text: &str) -> bool {
    text.len() == 12 && text.bytes().all(|b| b.is_ascii_digit())
}

/// True for a region of [`REGIONS`].
pub fn is_region(text: &str) -> bool {
    REGIONS.contains(&text)
}

impl Place {
    /// Checks both; the error says which is wrong and what is expected.
    pub fn new(account: &str, region: &str) -> Result<Place, String> {
        let mut problems = Problems::new();
        let place = check_account(account, "account", &mut problems).zip(check_region(
            region,
            "region",
            &mut problems,
        ));
        match place {
            Some((account, region)) => Ok(Place { account, region }),
            None => Err(problems
                .errors()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")),
        }
    }
}

fn check_account(text: &str, path: &str, problems: &mut Problems) -> Option<String> {
    if is_account(text) {
        Some(text.to_string())
    } else {
        problems.error(
            path,
            format!(
                "invalid account {}; expected a 12-digit AWS account id (quoted in YAML, e.g. account: \"111122223333\")",
                quote(text)
            ),
        );
        None
    }
}

fn check_region(text: &str, path: &str, problems: &mut Problems) -> Option<String> {
    if is_region(text) {
        Some(text.to_string())
    } else {
        let hint = if is_region(&text.trim().to_ascii_lowercase()) {
            format!(" (did you mean {}?)", text.trim().to_ascii_lowercase())
        } else {
            String::new()
        };
        problems.error(
            path,
            format!(
                "unknown region {}{hint}; expected an AWS region name such as us-east-1 or eu-west-1",
                quote(text)
            ),
        );
        None
    }
}

/// The place a document names: `Ok(None)` when it names neither `account` nor `region` (the
/// cell's own), `Ok(Some)` when it names both validly; `Err(())` after pushing the problems
/// (a wrong type, an invalid value, one named without the other).
pub(super) fn validate(
    account: Option<&Value>,
    region: Option<&Value>,
    problems: &mut Problems,
) -> Result<Option<Place>, ()> {
    let before = problems.errors().count();
    let account = account.and_then(|v| {
        let text = fields::free_text(v, "account", "a 12-digit account id as a string", problems)?;
        check_account(text, "account", problems)
    });
    let region = region.and_then(|v| {
        let text = fields::string(v, "region", "a region name such as eu-west-1", problems)?;
        check_region(text, "region", problems)
    });
    if problems.errors().count() != before {
        return Err(());
    }
    match (account, region) {
        (None, None) => Ok(None),
        (Some(account), Some(region)) => Ok(Some(Place { account, region })),
        (Some(account), None) => {
            problems.error(
                "account",
                format!(
                    "account {account} is named without region; expected both account and region (a pool outside the cell names both, so that its id is the same in every cell), e.g. region: us-east-1"
                ),
            );
            Err(())
        }
        (None, Some(region)) => {
            problems.error(
                "region",
                format!(
                    "region {region} is named without account; expected both account and region (a pool outside the cell names both, so that its id is the same in every cell), e.g. account: \"111122223333\""
                ),
            );
            Err(())
        }
    }
}

/// A pool id: `<cluster>/<name>` (the cell's own) or `<account>/<region>/<cluster>/<name>`.
pub fn pool_id(place: Option<&Place>, cluster: &str, name: &str) -> String {
    match place {
        None => format!("{cluster}/{name}"),
        Some(p) => format!("{}/{}/{cluster}/{name}", p.account, p.region),
    }
}

/// The scope of a pool id: everything but its name (`<cluster>` or
/// `<account>/<region>/<cluster>`): what one rotator lease covers.
pub fn scope_of(pool: &str) -> &str {
    pool.rsplit_once('/').map_or(pool, |(scope, _)| scope)
}

/// The cluster name of a pool id of either form.
pub fn cluster_of(pool: &str) -> &str {
    let scope = scope_of(pool);
    scope.rsplit_once('/').map_or(scope, |(_, cluster)| cluster)
}

/// The place of a pool id: `Some` for `<account>/<region>/<cluster>/<name>` with a valid
/// account and region, `None` for `<cluster>/<name>` (or anything else).
pub fn place_of(pool: &str) -> Option<Place> {
    let parts: Vec<&str> = pool.split('/').collect();
    match parts.as_slice() {
        [account, region, _, _] => Place::new(account, region).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(account: Option<Value>, region: Option<Value>) -> (Result<Option<Place>, ()>, String) {
        let mut problems = Problems::new();
        let r = validate(account.as_ref(), region.as_ref(), &mut problems);
        let text = problems
            .errors()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        (r, text)
    }

    #[test]
    fn a_place_is_both_or_neither_and_both_are_checked() {
        assert_eq!(run(None, None), (Ok(None), String::new()));
        let (r, _) = run(Some(json!("111122223333")), Some(json!("eu-west-1")));
        assert_eq!(
            r,
            Ok(Some(Place::new("111122223333", "eu-west-1").unwrap()))
        );
        let cases = [
            (
                Some(json!("1111")),
                Some(json!("eu-west-1")),
                "account: invalid account \"1111\"",
            ),
            (
                Some(json!(111122223333_u64)),
                Some(json!("eu-west-1")),
                "quote it",
            ),
            (
                Some(json!("111122223333")),
                Some(json!("eu-west-9")),
                "region: unknown region \"eu-west-9\"",
            ),
            (
                Some(json!("111122223333")),
                Some(json!("EU-WEST-1")),
                "did you mean eu-west-1?",
            ),
            (
                Some(json!("111122223333")),
                None,
                "account: account 111122223333 is named without region",
            ),
            (
                None,
                Some(json!("eu-west-1")),
                "region: region eu-west-1 is named without account",
            ),
            (
                Some(json!("111122223333")),
                Some(json!(["eu-west-1"])),
                "region: expected a region name",
            ),
        ];
        for (account, region, wanted) in cases {
            let (r, text) = run(account.clone(), region.clone());
            assert_eq!(r, Err(()), "{account:?} {region:?}");
            assert!(text.contains(wanted), "{text}");
        }
        // A message quotes at most a prefix of what it was given.
        let (_, text) = run(
            Some(json!("9".repeat(1 << 16))),
            Some(json!("x".repeat(1 << 16))),
        );
        assert!(text.len() < 600, "{}", text.len());
    }

    const DOC: &str = "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\namiSelectorTerms:\n  - alias: al2023@latest\n";

    #[test]
    fn a_policy_names_its_place_or_is_the_cells() {
        let own = crate::policy::parse(DOC).policy.unwrap();
        assert_eq!(
            (own.place.as_ref(), own.pool_id().as_str()),
            (None, "prod/general")
        );
        let there = crate::policy::parse(&format!(
            "{DOC}account: \"111122223333\"\nregion: eu-west-1\npromotion: {{ from: 111122223333/us-east-1/prod/general, soak: 24h }}\n"
        ));
        let p = there
            .policy
            .unwrap_or_else(|| panic!("{:?}", there.problems));
        assert_eq!(p.pool_id(), "111122223333/eu-west-1/prod/general");
        assert_eq!(there.pool.map(|p| p.to_string()), Some(p.pool_id()));
        assert_eq!(
            p.promotion.and_then(|x| x.from).as_deref(),
            Some("111122223333/us-east-1/prod/general")
        );
        let located = crate::policy::locate(&crate::policy::source::PolicyDocument::file(
            "f",
            format!("{DOC}account: \"111122223333\"\nregion: eu-west-1\n"),
        ))
        .unwrap();
        assert_eq!(located.pool_id(), "111122223333/eu-west-1/prod/general");
        // Invalid: half a place, a bad account, an upstream in an unknown region.
        for (extra, wanted) in [
            (
                "region: eu-west-1\n",
                "region: region eu-west-1 is named without account",
            ),
            (
                "account: \"12\"\nregion: eu-west-1\n",
                "account: invalid account \"12\"",
            ),
            (
                "promotion: { from: 111122223333/mars-1/prod/general, soak: 1h }\n",
                "promotion.from: invalid pool",
            ),
        ] {
            let parsed = crate::policy::parse(&format!("{DOC}{extra}"));
            assert!(parsed.policy.is_none(), "{extra}");
            let text = parsed.problems.error_summary();
            assert!(text.contains(wanted), "{text}");
        }
    }

    #[test]
    fn a_parameter_path_may_name_the_place() {
        use crate::policy::source::PolicyDocument;
        let doc = |name: &str, text: &str| {
            crate::policy::parse_document(&PolicyDocument::parameter(
                "/nodecycle/pools/",
                name,
                text,
            ))
        };
        let body = "nodeGroup: { autoScalingGroup: prod-general }\namiSelectorTerms:\n  - alias: al2023@latest\n";
        let p = doc("/nodecycle/pools/111122223333/eu-west-1/prod/general", body)
            .policy
            .unwrap();
        assert_eq!(p.pool_id(), "111122223333/eu-west-1/prod/general");
        let other = doc(
            "/nodecycle/pools/111122223333/eu-west-1/prod/general",
            &format!("{body}account: \"222233334444\"\nregion: eu-west-1\n"),
        );
        assert!(other.policy.is_none());
        assert!(
            other
                .problems
                .error_summary()
                .contains("its parameter path is that of pool 111122223333/eu-west-1/prod/general"),
            "{}",
            other.problems.error_summary()
        );
    }

    #[test]
    fn pool_ids_of_both_forms() {
        let p = Place::new("111122223333", "eu-west-1").unwrap();
        let own = pool_id(None, "prod", "general");
        let there = pool_id(Some(&p), "prod", "general");
        assert_eq!(own, "prod/general");
        assert_eq!(there, "111122223333/eu-west-1/prod/general");
        assert_eq!((scope_of(&own), cluster_of(&own)), ("prod", "prod"));
        assert_eq!(
            (scope_of(&there), cluster_of(&there)),
            ("111122223333/eu-west-1/prod", "prod")
        );
        assert_eq!(place_of(&there), Some(p));
        assert_eq!(place_of(&own), None);
        assert_eq!(place_of("1/eu-west-1/prod/general"), None);
    }
}
