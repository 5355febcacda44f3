//! `nodecycle doctor` per member: the spoke role of each place the policies name can be assumed,
//! and through it the member's clusters (existence, RBAC) and pools (groups, launch templates,
//! lifecycle hooks, architecture) are checked as the cell's own are. The port ([`SpokeRoles`])
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

/// Assumes members' spoke roles.
#[async_trait]
pub trait SpokeRoles: Send + Sync {
    /// The spoke role of `place` and, when it can be assumed, the reads through it (else the
    /// error of `sts:AssumeRole`).
    async fn assume(&self, place: &Place) -> (String, Result<Box<dyn MemberReads>, PortError>);
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
}

/// The distinct places of the member pools among `valid` (sorted).
pub fn places(valid: &[(String, Policy)]) -> Vec<Place> {
    let mut out: Vec<Place> = valid.iter().filter_map(|(_, p)| p.place.clone()).collect();
    out.sort();
    out.dedup();
    out
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
