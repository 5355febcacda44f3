//! `nodecycle doctor` per member: the spoke role of each place the policies name can be assumed,
//! and through it the member's clusters (existence, the access entries of the spoke roles the
//! cell's functions act as, RBAC), its pools (groups, launch templates, lifecycle hooks,
//! architecture) and its forwarding rules ([`super::forwarding`]) are checked. The port ([`SpokeRoles`])
//! hands out the doctor's reads in a member's account and region; the checks are pure.

use async_trait::async_trait;

use super::run::Ports;
use super::{Check, CheckKind};
use crate::policy::{Place, Policy};
use crate::port::PortError;

/// The doctor's reads in one member's account and region (the spoke role's credentials).
pub trait MemberReads: Send + Sync {
    /// The ports over the member's credentials.
    fn ports(&self) -> Ports<'_>;
}

/// What the cell needs of a member's spoke at a place: where its forwarding rules must send,
/// and which roles need access entries in its clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The cell's bus in the place's region ([`super::forwarding::cell_bus`]).
    pub bus: String,
    /// (stack output of a cell function that talks to Kubernetes, the spoke role it acts as
    /// in the member): each needs an access entry with its function's group in every member
    /// cluster.
    pub kube_roles: Vec<(String, String)>,
}

/// [`Expected`] of `place` for the cell of account `cell_account`, whose functions assume the
/// spoke roles of `config`.
pub fn expected(
    place: &Place,
    cell_account: &str,
    config: &crate::members::MemberConfig,
) -> Expected {
    Expected {
        bus: super::forwarding::cell_bus(place, cell_account),
        kube_roles: super::contract::KUBE_ROLES
            .iter()
            .map(|output| {
                (
                    (*output).to_string(),
                    config.function_role(output, &place.account, &place.region),
                )
            })
            .collect(),
    }
}

/// Assumes members' spoke roles.
#[async_trait]
pub trait SpokeRoles: Send + Sync {
    /// The spoke role of `place` and, when it can be assumed, the reads through it (else the
    /// error of `sts:AssumeRole`).
    async fn assume(&self, place: &Place) -> (String, Result<Box<dyn MemberReads>, PortError>);
    /// What the cell needs of the spoke at `place` ([`expected`]); `Err` when the cell's own
    /// account cannot be told.
    async fn expected(&self, place: &Place) -> Result<Expected, PortError>;
}

/// No members: every place's role is refused (doctor of a cell without members).
pub struct NoSpokes;

#[async_trait]
impl SpokeRoles for NoSpokes {
    async fn assume(&self, place: &Place) -> (String, Result<Box<dyn MemberReads>, PortError>) {
        (
            String::new(),
            Err(PortError::new(
                "sts:AssumeRole",
                crate::port::ErrorKind::Other,
                format!("{place}: this deployment has no members"),
            )),
        )
    }

    async fn expected(&self, place: &Place) -> Result<Expected, PortError> {
        Err(PortError::other(
            "configuration",
            format!("{place}: this deployment has no members"),
        ))
    }
}

/// The distinct places of the member pools among `valid` (sorted).
pub fn places(valid: &[(String, Policy)]) -> Vec<Place> {
    let mut out: Vec<Place> = valid.iter().filter_map(|(_, p)| p.place.clone()).collect();
    out.sort();
    out.dedup();
    out
}

/// The checks of a member's clusters (`cluster`, `accessEntry`, `rbac`) as seen at `place`:
/// each subject names the member (`<account>/<region>/<subject>`), and a missing or wrong
/// access entry's fix says where to make it (the member account, the spoke's cluster slots).
pub fn at_member(place: &Place, checks: Vec<Check>) -> Vec<Check> {
    checks
        .into_iter()
        .map(|mut c| {
            if c.check == CheckKind::AccessEntry && c.status == super::Status::Fail {
                let cluster = c.subject.split('/').next().unwrap_or_default().to_string();
                c.fix = format!(
                    "give {cluster} to the spoke stack instance of account {} in {} (a ClusterN parameter: it creates the entries of its roles), or in that account: {} --region {}",
                    place.account, place.region, c.fix, place.region
                );
            }
            c.subject = format!("{place}/{}", c.subject);
            c
        })
        .collect()
}

/// The `spoke` check of `place`'s role `role`.
pub fn spoke<T>(place: &Place, role: &str, assumed: &Result<T, PortError>) -> Check {
    match assumed {
        Ok(_) => Check::ok(
            CheckKind::Spoke,
            place.to_string(),
            format!("the spoke role {role} can be assumed"),
        ),
        Err(e) => Check::fail(
            CheckKind::Spoke,
            place.to_string(),
            format!(
                "cannot assume the spoke role {role}: {e}; the member's pools are not worked on"
            ),
            format!(
                "deploy the spoke stack (deploy/spoke.yaml) in account {}, trusting this cell's function roles with the configured external id, or fix NODECYCLE_MEMBER_ROLE / NODECYCLE_MEMBER_EXTERNAL_ID",
                place.account
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    #[test]
    fn a_spoke_role_is_ok_or_a_failure_saying_what_to_deploy() {
        let place = Place::new("222222222222", "eu-west-1").unwrap();
        let role = "arn:aws:iam::222222222222:role/nodecycle-spoke";
        let ok = spoke(&place, role, &Ok::<(), PortError>(()));
        assert_eq!((ok.status, ok.check), (Status::Ok, CheckKind::Spoke));
        let denied = PortError::new(
            "sts:AssumeRole",
            crate::port::ErrorKind::AccessDenied,
            "AccessDenied: not authorized",
        );
        let bad = spoke(&place, role, &Err::<(), _>(denied));
        assert_eq!(bad.status, Status::Fail);
        assert!(
            bad.detail.contains(role) && bad.detail.contains("AccessDenied"),
            "{bad:?}"
        );
        assert!(bad.fix.contains("account 222222222222"), "{bad:?}");
        assert_eq!(bad.subject, "222222222222/eu-west-1");
    }
}
