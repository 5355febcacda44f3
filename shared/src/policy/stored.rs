//! Policies as data: which SSM parameter a policy file is stored as, whether storing it would
//! create, update or leave that parameter, and whether it fits in an SSM parameter at all.
//!
//! A file names its pool (`cluster`, `name`, and `account`/`region` for a member's pool); its
//! parameter is `<prefix><pool id>` ([`parameter_name`]), the path that owns that pool
//! ([`super::source::owner_of`]). [`plan`] compares the files with the parameters stored under the
//! prefix; it never proposes a deletion: a parameter no file maps to is listed, not removed.

use std::collections::BTreeMap;
use std::fmt;

use super::PoolId;

/// Largest value of an SSM Standard parameter, in bytes (the default tier, no charge).
pub const SSM_STANDARD_BYTES: usize = 4 * 1024;
/// Largest value of an SSM Advanced parameter, in bytes (charged per parameter and month).
/// Independent of [`super::limits::MAX_BYTES`] (32 KB), the parser's bound on hostile input,
/// which a local file with comments may approach; a stored policy never can.
pub const SSM_ADVANCED_BYTES: usize = 8 * 1024;

/// The SSM parameter tier a policy is stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tier {
    /// 4 KB values ([`SSM_STANDARD_BYTES`]).
    #[default]
    Standard,
    /// 8 KB values ([`SSM_ADVANCED_BYTES`]).
    Advanced,
}

impl Tier {
    /// The largest value the tier holds, in bytes.
    pub fn max_bytes(self) -> usize {
        match self {
            Tier::Standard => SSM_STANDARD_BYTES,
            Tier::Advanced => SSM_ADVANCED_BYTES,
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tier::Standard => "Standard",
            Tier::Advanced => "Advanced",
        })
    }
}

impl std::str::FromStr for Tier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Standard" | "standard" => Ok(Tier::Standard),
            "Advanced" | "advanced" => Ok(Tier::Advanced),
            other => Err(format!(
                "unknown tier {}; expected Standard or Advanced",
                crate::problem::quote(other)
            )),
        }
    }
}

/// `16384` as `16,384`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `Err(message)` when a document of `len` bytes does not fit a parameter of `tier`; the
/// message names the tiers and what to do. `what` names the document (`the policy prod/general`).
pub fn fits(what: &str, len: usize, tier: Tier) -> Result<(), String> {
    if len <= tier.max_bytes() {
        return Ok(());
    }
    let size = thousands(len);
    let (standard, advanced) = (thousands(SSM_STANDARD_BYTES), thousands(SSM_ADVANCED_BYTES));
    Err(if len <= SSM_ADVANCED_BYTES {
        format!(
            "{what} is {size} bytes; SSM Standard parameters hold {standard} bytes, Advanced {advanced}: split the policy or use --tier Advanced"
        )
    } else {
        format!(
            "{what} is {size} bytes; SSM Standard parameters hold {standard} bytes, Advanced {advanced} (the most any parameter holds): split the policy"
        )
    })
}

/// What `nodecycle validate` says of a file's size: `Ok(None)` when it fits a Standard
/// parameter, `Ok(Some(warning))` when only an Advanced one, `Err(error)` when none.
pub fn size_problem(len: usize) -> Result<Option<String>, String> {
    let size = thousands(len);
    let (standard, advanced) = (thousands(SSM_STANDARD_BYTES), thousands(SSM_ADVANCED_BYTES));
    if len <= SSM_STANDARD_BYTES {
        Ok(None)
    } else if len <= SSM_ADVANCED_BYTES {
        Ok(Some(format!(
            "the document is {size} bytes; SSM Standard parameters hold {standard} bytes: store it with --tier Advanced (up to {advanced} bytes) or split the policy"
        )))
    } else {
        Err(format!(
            "the document is {size} bytes; SSM Standard parameters hold {standard} bytes, Advanced {advanced}: split the policy"
        ))
    }
}

/// The prefix with exactly one trailing `/` (`/nodecycle/pools` -> `/nodecycle/pools/`).
pub fn normalize_prefix(prefix: &str) -> String {
    format!("{}/", prefix.trim_end_matches('/'))
}

/// The parameter holding `pool`'s policy under `prefix`: `<prefix><pool id>`, the one path whose
/// owner is `pool` ([`super::source::owner_of`]).
pub fn parameter_name(prefix: &str, pool: &PoolId) -> String {
    format!("{}{pool}", normalize_prefix(prefix))
}

/// What storing a file would do to its parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// No parameter yet.
    Create,
    /// The stored text differs.
    Update,
    /// The stored text is the file's.
    Unchanged,
}

impl Change {
    /// `create`, `update`, `unchanged`.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Create => "create",
            Change::Update => "update",
            Change::Unchanged => "unchanged",
        }
    }
}

/// [`Change`] of storing `text` where `stored` is (`None`: nothing stored). Texts are compared
/// exactly: a comment or a blank line is a change (it is what the parameter holds).
pub fn classify(stored: Option<&str>, text: &str) -> Change {
    match stored {
        None => Change::Create,
        Some(s) if s == text => Change::Unchanged,
        Some(_) => Change::Update,
    }
}

/// One valid policy file to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePolicy {
    /// The file's path.
    pub path: String,
    /// The pool it names.
    pub pool: PoolId,
    /// Its text, stored as is.
    pub text: String,
}

/// One parameter as stored: name, value, version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Full parameter name.
    pub name: String,
    /// Value.
    pub text: String,
    /// Version number.
    pub version: i64,
}

/// One file's step of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The file.
    pub file: FilePolicy,
    /// Its parameter ([`parameter_name`]).
    pub parameter: String,
    /// What storing it does.
    pub change: Change,
    /// The stored text and version, when a parameter exists.
    pub stored: Option<Stored>,
}

/// Files against what is stored under a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// One step per file, by parameter name.
    pub steps: Vec<Step>,
    /// Parameters under the prefix that no file maps to (never deleted), by name.
    pub not_in_files: Vec<Stored>,
}

/// Maps each file to its parameter and classifies it against `stored` (the parameters under
/// `prefix`). `Err` with one message per parameter that several files map to (nothing may be
/// stored then: which file wins would be an accident of order).
pub fn plan(
    prefix: &str,
    files: Vec<FilePolicy>,
    stored: Vec<Stored>,
) -> Result<Plan, Vec<String>> {
    let mut by_parameter: BTreeMap<String, Vec<FilePolicy>> = BTreeMap::new();
    for f in files {
        by_parameter
            .entry(parameter_name(prefix, &f.pool))
            .or_default()
            .push(f);
    }
    let clashes: Vec<String> = by_parameter
        .iter()
        .filter(|(_, fs)| fs.len() > 1)
        .map(|(parameter, fs)| {
            let paths: Vec<&str> = fs.iter().map(|f| f.path.as_str()).collect();
            format!(
                "{} all define pool {} (parameter {parameter}); expected one file per pool",
                paths.join(", "),
                fs[0].pool
            )
        })
        .collect();
    if !clashes.is_empty() {
        return Err(clashes);
    }
    let mut stored: BTreeMap<String, Stored> =
        stored.into_iter().map(|s| (s.name.clone(), s)).collect();
    let steps = by_parameter
        .into_iter()
        .filter_map(|(parameter, mut fs)| {
            let file = fs.pop()?;
            let current = stored.remove(&parameter);
            Some(Step {
                change: classify(current.as_ref().map(|s| s.text.as_str()), &file.text),
                file,
                parameter,
                stored: current,
            })
        })
        .collect();
    Ok(Plan {
        steps,
        not_in_files: stored.into_values().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, pool: &str, text: &str) -> FilePolicy {
        FilePolicy {
            path: path.into(),
            pool: PoolId::parse(pool).unwrap(),
            text: text.into(),
        }
    }

    fn stored(name: &str, text: &str) -> Stored {
        Stored {
            name: name.into(),
            text: text.into(),
            version: 1,
        }
    }

    #[test]
    fn files_map_to_the_parameter_that_owns_their_pool() {
        let pool = PoolId::parse("prod/general").unwrap();
        for prefix in [
            "/nodecycle/pools",
            "/nodecycle/pools/",
            "/nodecycle/pools//",
        ] {
            assert_eq!(
                parameter_name(prefix, &pool),
                "/nodecycle/pools/prod/general"
            );
        }
        let member = PoolId::parse("111122223333/eu-west-1/prod/general").unwrap();
        let name = parameter_name("/p", &member);
        assert_eq!(name, "/p/111122223333/eu-west-1/prod/general");
        // The path owns exactly the pool the file names.
        for id in [pool, member] {
            let name = parameter_name("/nodecycle/pools", &id);
            assert_eq!(
                super::super::source::owner_of("/nodecycle/pools/", &name),
                super::super::source::Owner::Path(id)
            );
        }
    }

    #[test]
    fn plan_classifies_and_lists_what_no_file_holds() {
        let files = vec![
            file("b.yaml", "prod/b", "b: 2\n"),
            file("a.yaml", "prod/a", "a: 1\n"),
            file("c.yaml", "prod/c", "c: 3\n"),
        ];
        let current = vec![
            stored("/p/prod/a", "a: 1\n"),
            stored("/p/prod/b", "b: 1\n"),
            stored("/p/prod/z", "z: 1\n"),
        ];
        let plan = plan("/p", files, current).unwrap();
        let got: Vec<(&str, Change)> = plan
            .steps
            .iter()
            .map(|s| (s.parameter.as_str(), s.change))
            .collect();
        assert_eq!(
            got,
            vec![
                ("/p/prod/a", Change::Unchanged),
                ("/p/prod/b", Change::Update),
                ("/p/prod/c", Change::Create),
            ]
        );
        assert_eq!(plan.steps[1].stored.as_ref().unwrap().text, "b: 1\n");
        assert_eq!(plan.not_in_files, vec![stored("/p/prod/z", "z: 1\n")]);
        assert_eq!(classify(Some("x\n"), "x"), Change::Update);
    }

    #[test]
    fn two_files_for_one_pool_are_refused() {
        let files = vec![
            file("a.yaml", "prod/a", "a: 1\n"),
            file("copy.yaml", "prod/a", "a: 2\n"),
        ];
        let e = plan("/p", files, vec![]).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(
            e[0].contains("a.yaml, copy.yaml") && e[0].contains("/p/prod/a"),
            "{e:?}"
        );
    }

    #[test]
    fn sizes_against_the_tiers() {
        assert_eq!(thousands(16_384), "16,384");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(
            fits("the policy p", SSM_STANDARD_BYTES, Tier::Standard),
            Ok(())
        );
        assert_eq!(
            fits("the policy p", 16_384, Tier::Standard).unwrap_err(),
            "the policy p is 16,384 bytes; SSM Standard parameters hold 4,096 bytes, Advanced 8,192 (the most any parameter holds): split the policy"
        );
        assert_eq!(
            fits("the policy p", 5_000, Tier::Standard).unwrap_err(),
            "the policy p is 5,000 bytes; SSM Standard parameters hold 4,096 bytes, Advanced 8,192: split the policy or use --tier Advanced"
        );
        assert_eq!(fits("p", 5_000, Tier::Advanced), Ok(()));
        assert!(fits("p", 8_193, Tier::Advanced).is_err());
        assert_eq!(size_problem(4_096), Ok(None));
        assert!(
            size_problem(4_097)
                .unwrap()
                .unwrap()
                .contains("--tier Advanced")
        );
        assert!(size_problem(8_193).unwrap_err().contains("Advanced 8,192"));
        assert_eq!("advanced".parse::<Tier>(), Ok(Tier::Advanced));
        assert!("Premium".parse::<Tier>().is_err());
    }
}
