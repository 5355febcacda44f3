//! Interruption handling, the pure part: what an instance is (from its EC2 tags), which pool it
//! belongs to, what to do about it ([`action::action_for`]), and the narrow ports the handler
//! uses for EC2 instance lookup and Auto Scaling lifecycle actions. The handler is
//! `crate::handlers::interruption`.

use async_trait::async_trait;

use crate::policy::{NodeGroup, PoolRef};
use crate::port::PortError;
use crate::tags;

pub mod action;
pub mod deadline;

/// The event vocabulary the ports speak in (defined with the events, `crate::event`).
pub use crate::event::instance_events::{InstanceInfo, LifecycleAction};
pub use action::{Action, Claim, ClaimDoc, ClaimStatus, action_for, claim_of};

/// The terminate lifecycle hook's name when the deployment does not name one (the template's
/// `LifecycleHookName` default): the hook the handler answers and `nodecycle doctor` expects.
pub const DEFAULT_LIFECYCLE_HOOK: &str = "nodecycle-drain";

/// Looks up EC2 instances.
#[async_trait]
pub trait InstanceLookup: Send + Sync {
    /// The instance, `Ok(None)` when EC2 does not know it (any more).
    async fn instance(&self, instance_id: &str) -> Result<Option<InstanceInfo>, PortError>;

    /// The running instances of the region in trouble: a failed status check or an event
    /// scheduled (`DescribeInstanceStatus` over every running instance, 1,000 a call; the
    /// others are left out).
    async fn troubled(&self) -> Result<Vec<crate::fleet::InstanceStatus>, PortError>;

    /// The status code of the instance's Spot request (`DescribeSpotInstanceRequests` filtered
    /// by `instance-id`; `marked-for-termination` once EC2 gave the interruption notice, see
    /// [`deadline::spot_status_confirms`]), `Ok(None)` when it has none (not a Spot instance).
    async fn spot_request_status(&self, instance_id: &str) -> Result<Option<String>, PortError>;
}

/// Answers Auto Scaling lifecycle actions.
#[async_trait]
pub trait LifecycleOps: Send + Sync {
    /// RecordLifecycleActionHeartbeat. `Ok(false)` when the action is not active any more.
    async fn heartbeat(&self, action: &LifecycleAction) -> Result<bool, PortError>;
    /// CompleteLifecycleAction with result CONTINUE. `Ok(false)` when the action is not active
    /// any more (already completed, or timed out).
    async fn complete_continue(&self, action: &LifecycleAction) -> Result<bool, PortError>;
    /// CompleteLifecycleAction with result ABANDON: with the group's instance lifecycle policy
    /// retaining (`TerminateHookAbandon: retain`, [`crate::retain`]) the instance is kept in
    /// `Terminating:Retained`, else it terminates. `Ok(false)` when the action is not active
    /// any more.
    async fn complete_abandon(&self, action: &LifecycleAction) -> Result<bool, PortError>;
}

/// Why an instance is not handled (quietly: one debug line, never an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotOurs(pub String);

/// The pool of an instance: the policy whose cluster matches the instance's cluster tag and whose
/// node group matches its Auto Scaling group (self-managed) or `eks:nodegroup-name` (managed).
pub fn pool_of<'a>(info: &InstanceInfo, policies: &'a [PoolRef]) -> Result<&'a PoolRef, NotOurs> {
    let id = &info.instance_id;
    let cluster = info.cluster();
    let mut candidates = policies
        .iter()
        .filter(|p| cluster.is_none_or(|c| c == p.cluster));
    let found = candidates.find(|p| match &p.node_group {
        NodeGroup::AutoScalingGroup(g) => info.group() == Some(g.as_str()),
        NodeGroup::ManagedNodeGroup(g) => info.nodegroup() == Some(g.as_str()),
    });
    match (found, cluster) {
        (Some(p), _) => Ok(p),
        (None, None) => Err(NotOurs(format!(
            "{id} has no cluster tag ({} or {}<name>) and no managed group",
            tags::CLUSTER,
            tags::KUBERNETES_CLUSTER_PREFIX
        ))),
        (None, Some(c)) if !policies.iter().any(|p| p.cluster == c) => Err(NotOurs(format!(
            "{id} belongs to cluster {c}, which no pool policy manages"
        ))),
        (None, Some(c)) => Err(NotOurs(format!(
            "{id} of cluster {c} is in group {}, which no pool policy manages",
            info.group().or(info.nodegroup()).unwrap_or("(none)")
        ))),
    }
}

/// The pool whose self-managed group is `group` (lifecycle actions name the group).
pub fn pool_of_group<'a>(group: &str, policies: &'a [PoolRef]) -> Option<&'a PoolRef> {
    policies
        .iter()
        .find(|p| matches!(&p.node_group, NodeGroup::AutoScalingGroup(g) if g == group))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(cluster: &str, group: &str) -> PoolRef {
        let node_group = match group.strip_prefix("mng:") {
            Some(g) => format!("{{ managedNodeGroup: {g} }}"),
            None => format!("{{ autoScalingGroup: {group} }}"),
        };
        crate::policy::parse(&format!(
            "cluster: {cluster}\nname: {}\nnodeGroup: {node_group}\namiSelectorTerms:\n  - alias: al2023@latest\n",
            group.replace(':', "-")
        ))
        .policy
        .map(|p| PoolRef::from(&p))
        .unwrap()
    }

    fn info(tags: &[(&str, &str)]) -> InstanceInfo {
        InstanceInfo {
            instance_id: "i-0123456789abcdef0".into(),
            state: "running".into(),
            availability_zone: "us-east-2a".into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn pools_by_cluster_and_group() {
        let policies = vec![
            policy("prod", "prod-general"),
            policy("prod", "mng:spot"),
            policy("staging", "staging-general"),
        ];
        type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Result<&'a str, &'a str>);
        let cases: Vec<Case<'_>> = vec![
            (
                "asg + eks tag",
                vec![
                    (tags::AUTO_SCALING_GROUP, "prod-general"),
                    (tags::CLUSTER, "prod"),
                ],
                Ok("prod/prod-general"),
            ),
            (
                "asg + kubernetes.io tag",
                vec![
                    (tags::AUTO_SCALING_GROUP, "prod-general"),
                    ("kubernetes.io/cluster/prod", "owned"),
                ],
                Ok("prod/prod-general"),
            ),
            (
                "managed node group",
                vec![
                    (tags::AUTO_SCALING_GROUP, "eks-spot-1234"),
                    (tags::CLUSTER, "prod"),
                    (tags::NODEGROUP, "spot"),
                ],
                Ok("prod/mng-spot"),
            ),
            (
                "asg without cluster tag still matches its group",
                vec![(tags::AUTO_SCALING_GROUP, "staging-general")],
                Ok("staging/staging-general"),
            ),
            (
                "other cluster",
                vec![
                    (tags::AUTO_SCALING_GROUP, "prod-general"),
                    (tags::CLUSTER, "dev"),
                ],
                Err("cluster dev"),
            ),
            (
                "cluster tag disagrees with the group's pool",
                vec![
                    (tags::AUTO_SCALING_GROUP, "prod-general"),
                    (tags::CLUSTER, "staging"),
                ],
                Err("group prod-general"),
            ),
            (
                "unmanaged group",
                vec![
                    (tags::AUTO_SCALING_GROUP, "prod-gpu"),
                    (tags::CLUSTER, "prod"),
                ],
                Err("group prod-gpu"),
            ),
            ("no tags", vec![], Err("no cluster tag")),
            (
                "kubernetes.io tag with another value is not a cluster",
                vec![("kubernetes.io/cluster/prod", "x")],
                Err("no cluster tag"),
            ),
        ];
        for (name, tags, want) in cases {
            let got = pool_of(&info(&tags), &policies);
            match (got, want) {
                (Ok(p), Ok(w)) => assert_eq!(p.pool_id(), w, "{name}"),
                (Err(NotOurs(m)), Err(w)) => assert!(m.contains(w), "{name}: {m}"),
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
        assert_eq!(
            pool_of_group("prod-general", &policies).map(PoolRef::pool_id),
            Some("prod/prod-general".into())
        );
        assert!(pool_of_group("spot", &policies).is_none());
    }
}
