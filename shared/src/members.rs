//! Members: which account serves a pool, and through which credentials. A cell (one nodecycle
//! stack in one region of the tooling account) serves its own account and region, its own
//! account in other regions (its own credentials, clients in the pool's region), and the member
//! accounts listed in [`crate::event::served::ACCOUNTS_ENV`] (credentials from `sts:AssumeRole`
//! on the member's spoke role, [`ROLE_ENV`], with the external id of [`EXTERNAL_ID_ENV`]).
//!
//! The pure part ([`serve`], [`MemberConfig`], the credentials policy constants) decides; the
//! [`Members`] port (feature `aws`, adapter `aws::members::AwsMembers`) hands out the ports of
//! a place, built once per member and reused.

use std::fmt;
use std::time::Duration;

use crate::event::served::Served;
use crate::policy::Place;
use crate::problem::quote;

/// Role ARN pattern of the members' spoke roles: `{account}` (and `{partition}`) are replaced.
pub const ROLE_ENV: &str = "NODECYCLE_MEMBER_ROLE";
/// External id the spoke roles' trust policies require (optional).
pub const EXTERNAL_ID_ENV: &str = "NODECYCLE_MEMBER_EXTERNAL_ID";
/// Default of [`ROLE_ENV`]: the role `deploy/spoke.yaml` creates.
pub const DEFAULT_ROLE: &str = "arn:{partition}:iam::{account}:role/nodecycle-spoke";

/// How long one assumed-role session lasts (`DurationSeconds`; the spoke role's maximum
/// session duration must be at least this).
pub const SESSION_LENGTH: Duration = Duration::from_secs(3600);
/// Credentials are refreshed this long before they expire (the SDK identity cache's buffer
/// time): a call never starts with credentials about to lapse.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(10 * 60);
/// Session name of the assumed roles (CloudTrail shows it in each member).
pub const SESSION_NAME: &str = "nodecycle";

/// How members' credentials are obtained (configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberConfig {
    /// Role ARN pattern with `{account}` (and optionally `{partition}`).
    pub role: String,
    /// `sts:ExternalId` to pass, if the spoke roles require one.
    pub external_id: Option<String>,
}

impl Default for MemberConfig {
    fn default() -> Self {
        MemberConfig {
            role: DEFAULT_ROLE.to_string(),
            external_id: None,
        }
    }
}

impl MemberConfig {
    /// From the values of [`ROLE_ENV`] and [`EXTERNAL_ID_ENV`] (empty = unset). `Err` names the
    /// variable and what is expected.
    pub fn parse(role: Option<&str>, external_id: Option<&str>) -> Result<MemberConfig, String> {
        let role = role.map(str::trim).filter(|r| !r.is_empty());
        let role = role.unwrap_or(DEFAULT_ROLE);
        let shaped = role.starts_with("arn:")
            && role.contains("{account}")
            && role.contains(":role/")
            && role.len() <= 512;
        if !shaped {
            return Err(format!(
                "{ROLE_ENV}: {} is not a role ARN pattern; expected e.g. {DEFAULT_ROLE} ({{account}} is replaced by each member's account id)",
                quote(role)
            ));
        }
        let external_id = external_id.map(str::trim).filter(|e| !e.is_empty());
        if let Some(e) = external_id {
            let ok = (2..=1224).contains(&e.len())
                && e.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+=,.@:/-_".contains(c));
            if !ok {
                return Err(format!(
                    "{EXTERNAL_ID_ENV}: not an external id; expected 2 to 1224 characters of letters, digits and +=,.@:/-_"
                ));
            }
        }
        Ok(MemberConfig {
            role: role.to_string(),
            external_id: external_id.map(str::to_string),
        })
    }

    /// The spoke role of `account` in the partition of `region`.
    pub fn role_arn(&self, account: &str, region: &str) -> String {
        self.role
            .replace("{account}", account)
            .replace("{partition}", partition_of(region))
    }
}

/// The function part of the spoke roles' names (`<prefix>-<function>-<region>`,
/// deploy/spoke.yaml), by the cell's stack output naming the function's own role.
pub const SPOKE_FUNCTIONS: [(&str, &str); 4] = [
    ("AmiWatcherRoleArn", "ami-watcher"),
    ("RotatorRoleArn", "rotator"),
    ("InterruptionHandlerRoleArn", "interruption"),
    ("OpsRoleArn", "ops"),
];

impl MemberConfig {
    /// The spoke role the function of stack output `output` acts as in `account` (at
    /// `region`'s partition): the role of [`MemberConfig::role_arn`] with its function part
    /// (`-<function>-`, [`SPOKE_FUNCTIONS`]) replaced by that function's. A pattern naming no
    /// function (one role for every function, as the default) is every function's role.
    pub fn function_role(&self, output: &str, account: &str, region: &str) -> String {
        let role = self.role_arn(account, region);
        let Some((_, function)) = SPOKE_FUNCTIONS.iter().find(|(o, _)| *o == output) else {
            return role;
        };
        let name_at = role.rfind('/').map_or(0, |i| i + 1);
        let (path, name) = role.split_at(name_at);
        let named = SPOKE_FUNCTIONS
            .iter()
            .filter_map(|(_, f)| name.rfind(&format!("-{f}-")).map(|i| (i, *f)))
            .max_by_key(|(i, _)| *i);
        match named {
            Some((i, f)) => format!(
                "{path}{}-{function}-{}",
                &name[..i],
                &name[i + f.len() + 2..]
            ),
            None => role,
        }
    }
}

/// The ARN partition of a region.
pub fn partition_of(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else if region.starts_with("eusc-") {
        "aws-eusc"
    } else {
        "aws"
    }
}

/// Who serves a place, as [`serve`] decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Serve {
    /// The cell's own account and region: the cell's own ports.
    Own,
    /// The cell's own account in another region: its own credentials, clients there.
    OwnAccount(Place),
    /// A member account: credentials from assuming `role`.
    Member {
        /// The place.
        place: Place,
        /// The spoke role assumed.
        role: String,
    },
}

/// Why a place is not served (or its ports cannot be had): the field of the policy it comes
/// from, the role (when one was tried) and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberError {
    /// The place asked for.
    pub place: Place,
    /// The policy field at fault (`account`).
    pub field: &'static str,
    /// The role that could not be assumed, if one was tried.
    pub role: Option<String>,
    /// What went wrong and what to do (the AWS error for a role).
    pub message: String,
}

impl fmt::Display for MemberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.role {
            Some(role) => write!(
                f,
                "{}: {} {}: cannot assume the spoke role {role}: {}; this member's pools are not worked on until it can be assumed",
                self.field, self.field, self.place, self.message
            ),
            None => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

impl std::error::Error for MemberError {}

/// Who serves `place` for a cell at `cell` serving `served` (its own account first): the cell
/// itself, its own account elsewhere, or a member of `served` through its spoke role. `Err` for
/// an account the cell does not serve (fail closed: nothing is called for the pool), and for a
/// region it does not serve.
pub fn serve(
    place: &Place,
    cell: &Place,
    served: &Served,
    config: &MemberConfig,
) -> Result<Serve, MemberError> {
    if place == cell {
        return Ok(Serve::Own);
    }
    let refuse = |field: &'static str, message: String| MemberError {
        place: place.clone(),
        field,
        role: None,
        message,
    };
    if !served.regions.contains(&place.region) {
        return Err(refuse(
            "region",
            format!(
                "region {} is not one this cell serves ({}); expected one of them (NODECYCLE_SERVED_REGIONS)",
                place.region,
                served.regions.join(", ")
            ),
        ));
    }
    if place.account == cell.account {
        return Ok(Serve::OwnAccount(place.clone()));
    }
    if !served.accounts.contains(&place.account) {
        let members: Vec<&str> = served
            .accounts
            .iter()
            .map(String::as_str)
            .filter(|a| *a != cell.account)
            .collect();
        return Err(refuse(
            "account",
            format!(
                "account {} is not a member this cell serves ({}); expected one of them (NODECYCLE_SERVED_ACCOUNTS lists the members)",
                place.account,
                if members.is_empty() {
                    "none".to_string()
                } else {
                    members.join(", ")
                }
            ),
        ));
    }
    Ok(Serve::Member {
        role: config.role_arn(&place.account, &place.region),
        place: place.clone(),
    })
}

/// The place a pool is at: its policy's, else the cell's.
pub fn effective(place: Option<&Place>, cell: &Place) -> Place {
    place.cloned().unwrap_or_else(|| cell.clone())
}

/// Whether a pool at `place` (`None`: the cell's own, at `cell` when known) is selected by an
/// operator's `account` and `region` filters (each `None`: any).
pub fn selected(
    place: Option<&Place>,
    cell: Option<&Place>,
    account: Option<&str>,
    region: Option<&str>,
) -> bool {
    let at = place.or(cell);
    let fits = |wanted: Option<&str>, got: Option<&str>| wanted.is_none() || wanted == got;
    fits(account, at.map(|p| p.account.as_str())) && fits(region, at.map(|p| p.region.as_str()))
}

/// No members: only pools that name no place (the cell's own) are served. The default of
/// handlers built without a [`Members`] adapter (tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnOnly;

#[cfg(test)]
mod tests {
    use super::*;

    fn place(a: &str, r: &str) -> Place {
        Place::new(a, r).unwrap()
    }

    #[test]
    fn who_serves_a_place() {
        let cell = place("000000000001", "us-east-1");
        let served = Served {
            accounts: vec!["000000000001".into(), "111111111111".into()],
            regions: vec!["us-east-1".into(), "eu-west-1".into()],
        };
        let config = MemberConfig::default();
        assert_eq!(serve(&cell, &cell, &served, &config), Ok(Serve::Own));
        let own_eu = place("000000000001", "eu-west-1");
        assert_eq!(
            serve(&own_eu, &cell, &served, &config),
            Ok(Serve::OwnAccount(own_eu.clone()))
        );
        let member = place("111111111111", "eu-west-1");
        assert_eq!(
            serve(&member, &cell, &served, &config),
            Ok(Serve::Member {
                place: member.clone(),
                role: "arn:aws:iam::111111111111:role/nodecycle-spoke".into()
            })
        );
        let e = serve(&place("222222222222", "us-east-1"), &cell, &served, &config).unwrap_err();
        assert_eq!(e.field, "account");
        assert!(e.message.contains("222222222222 is not a member"), "{e}");
        assert!(e.message.contains("(111111111111)"), "{e}");
        let e = serve(
            &place("111111111111", "ap-south-1"),
            &cell,
            &served,
            &config,
        )
        .unwrap_err();
        assert_eq!(e.field, "region");
        assert!(
            e.to_string().starts_with("region: region ap-south-1"),
            "{e}"
        );
    }

    #[test]
    fn operators_select_pools_by_account_and_region() {
        let cell = place("000000000001", "us-east-1");
        let prod_eu = place("111111111111", "eu-west-1");
        let own = |a, r| selected(None, Some(&cell), a, r);
        let eu = |a, r| selected(Some(&prod_eu), Some(&cell), a, r);
        assert!(own(None, None) && eu(None, None));
        assert!(own(Some("000000000001"), Some("us-east-1")));
        assert!(!own(Some("111111111111"), None));
        assert!(eu(Some("111111111111"), None) && eu(None, Some("eu-west-1")));
        assert!(!eu(None, Some("us-east-1")));
        // The cell's own pools when the cell is unknown: only without filters.
        assert!(selected(None, None, None, None));
        assert!(!selected(None, None, Some("000000000001"), None));
    }

    #[test]
    fn role_patterns_and_external_ids_are_checked() {
        let c = MemberConfig::parse(None, None).unwrap();
        assert_eq!(c, MemberConfig::default());
        assert_eq!(
            c.role_arn("111111111111", "cn-north-1"),
            "arn:aws-cn:iam::111111111111:role/nodecycle-spoke"
        );
        let c = MemberConfig::parse(
            Some("arn:aws:iam::{account}:role/org/spoke"),
            Some(" ext-123 "),
        )
        .unwrap();
        assert_eq!(c.external_id.as_deref(), Some("ext-123"));
        assert_eq!(
            c.role_arn("111111111111", "us-east-1"),
            "arn:aws:iam::111111111111:role/org/spoke"
        );
        for bad in [
            "spoke",
            "arn:aws:iam::111111111111:role/spoke",
            "arn:aws:s3:::{account}",
        ] {
            let e = MemberConfig::parse(Some(bad), None).unwrap_err();
            assert!(e.starts_with("NODECYCLE_MEMBER_ROLE:"), "{e}");
        }
        assert!(MemberConfig::parse(None, Some("a b")).is_err());
        // Each function's spoke role, from the function's own pattern (the template's) or one
        // role for all.
        let ops = MemberConfig::parse(Some("arn:aws:iam::{account}:role/team-ops-us-east-1"), None)
            .unwrap();
        assert_eq!(
            ops.function_role("RotatorRoleArn", "111111111111", "us-east-1"),
            "arn:aws:iam::111111111111:role/team-rotator-us-east-1"
        );
        assert_eq!(
            ops.function_role("InterruptionHandlerRoleArn", "111111111111", "us-east-1"),
            "arn:aws:iam::111111111111:role/team-interruption-us-east-1"
        );
        assert_eq!(
            ops.function_role("OpsRoleArn", "111111111111", "us-east-1"),
            "arn:aws:iam::111111111111:role/team-ops-us-east-1"
        );
        let watcher = MemberConfig::parse(
            Some("arn:aws:iam::{account}:role/path/nc-ami-watcher-eu-west-1"),
            None,
        )
        .unwrap();
        assert_eq!(
            watcher.function_role("OpsRoleArn", "111111111111", "eu-west-1"),
            "arn:aws:iam::111111111111:role/path/nc-ops-eu-west-1"
        );
        assert_eq!(
            MemberConfig::default().function_role("RotatorRoleArn", "111111111111", "us-east-1"),
            "arn:aws:iam::111111111111:role/nodecycle-spoke"
        );
        // The refresh comes well before a session ends.
        assert!(REFRESH_BEFORE * 3 < SESSION_LENGTH);
    }
}
