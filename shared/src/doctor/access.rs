//! Each cluster the stack serves exists, and each function role that talks to Kubernetes has an
//! EKS access entry there mapping it to its function's Kubernetes group
//! ([`super::KUBERNETES_GROUPS`]).

use super::port::{AccessEntryFacts, ClusterFacts};
use super::{Check, CheckKind, LEGACY_KUBERNETES_GROUP, kubernetes_group};
use crate::port::PortError;

/// The `cluster` check.
pub fn cluster(name: &str, facts: Result<Option<ClusterFacts>, PortError>) -> Check {
    let missing = (
        "no such EKS cluster in this account and region",
        "fix the stack's ClusterNames (or --cluster), or check AWS_REGION",
    );
    Check::if_found(facts, CheckKind::Cluster, name, missing, |c| {
        if c.status != "ACTIVE" {
            Check::warn(
                CheckKind::Cluster,
                name,
                format!("the cluster is {}", c.status),
                "nodecycle works once it is ACTIVE",
            )
        } else {
            Check::ok(
                CheckKind::Cluster,
                name,
                format!(
                    "ACTIVE, authentication mode {}",
                    c.authentication_mode.as_deref().unwrap_or("unknown")
                ),
            )
        }
    })
}

/// (partition, account, role name) of an IAM role ARN; the path is ignored
/// (`arn:aws:iam::123456789012:role/service-role/x` names role `x`).
fn role_identity(arn: &str) -> Option<(&str, &str, &str)> {
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(partition), Some("iam"), Some(""), Some(account), Some(resource)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let path_and_name = resource.strip_prefix("role/")?;
    let name = path_and_name.rsplit('/').next()?;
    (!name.is_empty()).then_some((partition, account, name))
}

/// The listed principal ARN that is `role_arn` (exactly, or the same role with another path).
pub fn find<'a>(listed: &'a [String], role_arn: &str) -> Option<&'a str> {
    listed
        .iter()
        .find(|p| p.as_str() == role_arn)
        .or_else(|| {
            let want = role_identity(role_arn)?;
            listed.iter().find(|p| role_identity(p) == Some(want))
        })
        .map(String::as_str)
}

/// Whether an authentication mode has access entries (`API`, `API_AND_CONFIG_MAP`); unknown
/// modes are tried.
pub fn uses_access_entries(mode: Option<&str>) -> bool {
    mode != Some("CONFIG_MAP")
}

/// The `accessEntry` check of role `role_arn` (stack output `output`) in `cluster`, whose
/// authentication mode is `mode`; `entry` is the role's entry (`None`: not in the list).
pub fn entry(
    cluster: &str,
    output: &str,
    role_arn: &str,
    mode: Option<&str>,
    entry: Result<Option<AccessEntryFacts>, PortError>,
) -> Check {
    let subject = format!("{cluster}/{output}");
    let Some(group) = kubernetes_group(output) else {
        return Check::fail(
            CheckKind::AccessEntry,
            subject,
            format!("stack output {output} names no function that talks to Kubernetes"),
            "report this bug: doctor checks access entries of the rotator, interruption-handler and ops roles only",
        );
    };
    let create = format!(
        "aws eks create-access-entry --cluster-name {cluster} --principal-arn {role_arn} --type \
         STANDARD --kubernetes-groups {group}"
    );
    if !uses_access_entries(mode) {
        return Check::warn(
            CheckKind::AccessEntry,
            subject,
            format!(
                "cluster {cluster} authenticates with the aws-auth ConfigMap only (CONFIG_MAP): \
                 doctor cannot see whether {role_arn} is mapped to group {group}"
            ),
            format!(
                "aws eks update-cluster-config --name {cluster} --access-config \
                 authenticationMode=API_AND_CONFIG_MAP, then {create}; or make sure aws-auth \
                 mapRoles maps it to groups [{group}]"
            ),
        );
    }
    let e = match entry {
        Err(e) => return Check::unreadable(CheckKind::AccessEntry, subject, &e),
        Ok(None) => {
            return Check::fail(
                CheckKind::AccessEntry,
                subject,
                format!(
                    "{output} has no access entry in cluster {cluster}: its Kubernetes calls are refused"
                ),
                create,
            );
        }
        Ok(Some(e)) => e,
    };
    if e.entry_type != "STANDARD" {
        return Check::fail(
            CheckKind::AccessEntry,
            subject,
            format!(
                "the access entry of {role_arn} is of type {}, which cannot carry Kubernetes groups",
                e.entry_type
            ),
            format!(
                "aws eks delete-access-entry --cluster-name {cluster} --principal-arn {}, then \
                 {create}",
                e.principal_arn
            ),
        );
    }
    if !e.kubernetes_groups.iter().any(|g| g == group) {
        let groups = if e.kubernetes_groups.is_empty() {
            "no Kubernetes group".to_owned()
        } else {
            format!("groups [{}]", e.kubernetes_groups.join(", "))
        };
        return Check::fail(
            CheckKind::AccessEntry,
            subject,
            format!("the access entry of {role_arn} maps it to {groups}, not {group}"),
            format!(
                "update the stack (its access entries set the group), or aws eks \
                 update-access-entry --cluster-name {cluster} --principal-arn {} \
                 --kubernetes-groups {}",
                e.principal_arn,
                e.kubernetes_groups
                    .iter()
                    .map(String::as_str)
                    // The single group of earlier releases goes (deploy/rbac.yaml, Migration).
                    .filter(|g| *g != LEGACY_KUBERNETES_GROUP)
                    .chain([group])
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
    }
    Check::ok(
        CheckKind::AccessEntry,
        subject,
        format!("{role_arn}: STANDARD entry with group {group}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    const ROLE: &str = "arn:aws:iam::123456789012:role/nodecycle-RotatorRole-1";
    type Read<T> = Result<Option<T>, PortError>;

    #[test]
    fn role_matching() {
        let listed = vec![
            "arn:aws:iam::123456789012:role/other".to_owned(),
            "arn:aws:iam::123456789012:role/service/nodecycle-RotatorRole-1".to_owned(),
        ];
        assert_eq!(find(&listed, ROLE), Some(listed[1].as_str()));
        assert_eq!(find(&listed[..1], ROLE), None);
        let other_account =
            vec!["arn:aws:iam::210987654321:role/nodecycle-RotatorRole-1".to_owned()];
        assert_eq!(find(&other_account, ROLE), None);
        assert_eq!(role_identity("arn:aws:iam::1:user/x"), None);
        assert_eq!(role_identity("not an arn"), None);
    }

    #[test]
    fn entry_cases() {
        let e = |groups: &[&str], t: &str| AccessEntryFacts {
            principal_arn: ROLE.into(),
            kubernetes_groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            entry_type: t.into(),
        };
        let cases: Vec<(&str, Option<&str>, Read<AccessEntryFacts>, Status)> = vec![
            (
                "mapped",
                Some("API"),
                Ok(Some(e(&["nodecycle-rotator"], "STANDARD"))),
                Status::Ok,
            ),
            (
                "mapped with others",
                Some("API_AND_CONFIG_MAP"),
                Ok(Some(e(&["x", "nodecycle-rotator"], "STANDARD"))),
                Status::Ok,
            ),
            ("missing", Some("API"), Ok(None), Status::Fail),
            (
                "no group",
                Some("API"),
                Ok(Some(e(&[], "STANDARD"))),
                Status::Fail,
            ),
            (
                "wrong group",
                Some("API"),
                Ok(Some(e(&["ops"], "STANDARD"))),
                Status::Fail,
            ),
            (
                "another function's group",
                Some("API"),
                Ok(Some(e(&["nodecycle-ops"], "STANDARD"))),
                Status::Fail,
            ),
            (
                "the single group of earlier releases",
                Some("API"),
                Ok(Some(e(&["nodecycle"], "STANDARD"))),
                Status::Fail,
            ),
            (
                "wrong type",
                Some("API"),
                Ok(Some(e(&[], "EC2_LINUX"))),
                Status::Fail,
            ),
            ("aws-auth only", Some("CONFIG_MAP"), Ok(None), Status::Warn),
            (
                "mode unknown",
                None,
                Ok(Some(e(&["nodecycle-rotator"], "STANDARD"))),
                Status::Ok,
            ),
        ];
        for (what, mode, found, expected) in cases {
            let c = entry("prod", "RotatorRoleArn", ROLE, mode, found);
            assert_eq!(
                (c.status, c.check),
                (expected, CheckKind::AccessEntry),
                "{what}: {c}"
            );
            assert_eq!(c.subject, "prod/RotatorRoleArn");
        }
        // Migrating from the single group: the fix replaces it with the function's own group.
        let c = entry(
            "prod",
            "OpsRoleArn",
            ROLE,
            Some("API"),
            Ok(Some(e(&["x", "nodecycle"], "STANDARD"))),
        );
        assert!(
            c.fix.ends_with("--kubernetes-groups x nodecycle-ops"),
            "{c}"
        );
    }

    #[test]
    fn cluster_cases() {
        let f = |s: &str| ClusterFacts {
            status: s.into(),
            authentication_mode: Some("API".into()),
            endpoint: None,
            ..Default::default()
        };
        assert_eq!(cluster("c", Ok(Some(f("ACTIVE")))).status, Status::Ok);
        assert_eq!(cluster("c", Ok(Some(f("UPDATING")))).status, Status::Warn);
        assert_eq!(cluster("c", Ok(None)).status, Status::Fail);
    }
}
