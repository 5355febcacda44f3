//! What nodecycle tells Cluster Autoscaler (CA), load balancer controllers and the scheduler on
//! nodes (pure): surge and replacement nodes carry `cluster-autoscaler.kubernetes.io/
//! scale-down-disabled: "true"` while their rotation runs, old nodes being drained carry the
//! label `node.kubernetes.io/exclude-from-external-load-balancers`, and nodes the rollout will
//! replace carry the taint `nodecycle.dev/replacing=rollout:PreferNoSchedule`
//! ([`REPLACING_TAINT`], the set from [`crate::plan::landing`]) so that pods evicted meanwhile
//! land on nodes of the desired release and move once. Each mark nodecycle sets is itself
//! marked by an annotation of nodecycle's (the taint's key is nodecycle's own), and only such
//! marks are removed: a user's own `scale-down-disabled` or exclusion label stays. Recomputed
//! each pass from the step plan ([`super::step::StepPlan::protect`] and `draining`) and the
//! landing set, so a mark a crash left on a node that no rotation holds any more is removed
//! on the next pass.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::fleet::Member;

/// CA's annotation: CA never removes a node that carries it with value `"true"`.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// nodecycle's annotation beside [`SCALE_DOWN_DISABLED`] when nodecycle set it.
pub const SCALE_DOWN_DISABLED_BY: &str = "nodecycle.dev/set-scale-down-disabled";
/// The well-known label service controllers and the AWS Load Balancer Controller read: the
/// node is taken out of external load balancers' targets.
pub const EXCLUDE_FROM_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// nodecycle's annotation beside [`EXCLUDE_FROM_LB`] when nodecycle set it.
pub const EXCLUDE_FROM_LB_BY: &str = "nodecycle.dev/set-exclude-from-external-load-balancers";
/// The taint CA puts on a node it is removing (value: a Unix time, effect `NoSchedule`).
pub const AUTOSCALER_DELETING_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
/// nodecycle's taint on nodes the rollout will replace (value `rollout`, effect
/// `PreferNoSchedule`: the scheduler places pods elsewhere when it can, and nothing is
/// evicted for it).
pub const REPLACING_TAINT: &str = "nodecycle.dev/replacing";
/// At most this many [`REPLACING_TAINT`] changes per pool and pass (each a read and a patch):
/// a rollout of a large pool taints its nodes over a few passes instead of one long one.
pub const REPLACING_CHANGES_PER_PASS: usize = 100;

/// One node's marks to change: `Some(true)` set (with nodecycle's marker), `Some(false)`
/// remove (nodecycle's own only), `None` leave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MarkChange {
    /// The instance.
    pub instance: String,
    /// Its node.
    pub node: String,
    /// `scale-down-disabled`.
    pub scale_down_disabled: Option<bool>,
    /// `exclude-from-external-load-balancers`.
    pub exclude_from_lb: Option<bool>,
    /// The [`REPLACING_TAINT`].
    pub replacing: Option<bool>,
}

/// The changes that bring each registered member's marks to what this pass wants: protected
/// (`protect`) members carry `scale-down-disabled`, draining (`draining`) ones the exclusion
/// label, the rollout's `replacing` ones the [`REPLACING_TAINT`] (`None`: leave that taint as
/// it is, e.g. while the desired AMI is unknown, and on a node Cluster Autoscaler is removing);
/// nodecycle's marks on any other member go.
/// Taint changes beyond [`REPLACING_CHANGES_PER_PASS`] wait for a later pass (by instance
/// id, so every pass makes progress on the same ones).
pub fn changes(
    members: &[Member],
    protect: &BTreeSet<String>,
    draining: &BTreeSet<String>,
    replacing: Option<&BTreeSet<String>>,
) -> Vec<MarkChange> {
    let want = |set: bool, present: bool, ours: bool| match (set, present, ours) {
        (true, false, _) => Some(true),
        (false, true, true) => Some(false),
        _ => None,
    };
    let mut ordered: Vec<&Member> = members.iter().collect();
    ordered.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    let mut taints = 0;
    ordered
        .into_iter()
        .filter_map(|m| {
            let n = m.node.as_ref()?;
            // A node Cluster Autoscaler is removing is CA's: nodecycle writes nothing on it.
            let mut replacing = replacing
                .filter(|_| !n.marks.autoscaler_deleting)
                .map(|r| r.contains(&m.instance_id))
                .and_then(|on| (on != n.marks.replacing).then_some(on));
            if replacing.is_some() {
                taints += 1;
                if taints > REPLACING_CHANGES_PER_PASS {
                    replacing = None;
                }
            }
            let c = MarkChange {
                instance: m.instance_id.clone(),
                node: n.name.clone(),
                scale_down_disabled: want(
                    protect.contains(&m.instance_id),
                    n.marks.scale_down_disabled,
                    n.marks.scale_down_disabled_by_nodecycle,
                ),
                exclude_from_lb: want(
                    draining.contains(&m.instance_id),
                    n.marks.lb_excluded,
                    n.marks.lb_excluded_by_nodecycle,
                ),
                replacing,
            };
            (c.scale_down_disabled.is_some()
                || c.exclude_from_lb.is_some()
                || c.replacing.is_some())
            .then_some(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{Lifecycle, NodeMarks, NodeStatus};

    fn member(id: &str, marks: NodeMarks) -> Member {
        Member {
            instance_id: id.into(),
            availability_zone: "us-east-2a".into(),
            image_id: None,
            launch_time: chrono::DateTime::UNIX_EPOCH,
            lifecycle: Lifecycle::InService,
            node: Some(NodeStatus {
                name: format!("node-{id}"),
                ready: true,
                unschedulable: false,
                disrupted: None,
                evictable_pods: 0,
                pods_counted: false,
                marks,
                joined: None,
                conditions: Vec::new(),
                opt_out: None,
            }),
        }
    }

    #[test]
    fn sets_what_is_wanted_and_removes_only_its_own_marks() {
        let ours = NodeMarks {
            scale_down_disabled: true,
            scale_down_disabled_by_nodecycle: true,
            lb_excluded: true,
            lb_excluded_by_nodecycle: true,
            ..NodeMarks::default()
        };
        let users = NodeMarks {
            scale_down_disabled: true,
            lb_excluded: true,
            ..NodeMarks::default()
        };
        let members = vec![
            member("i-new", NodeMarks::default()),
            member("i-stale", ours),
            member("i-user", users),
            member("i-kept", ours),
            member("i-old", NodeMarks::default()),
        ];
        let protect: BTreeSet<String> = ["i-new".to_string(), "i-kept".to_string()].into();
        let draining: BTreeSet<String> = ["i-old".to_string(), "i-kept".to_string()].into();
        let got = changes(&members, &protect, &draining, None);
        let by = |id: &str| got.iter().find(|c| c.instance == id).cloned();
        assert_eq!(
            by("i-new").map(|c| (c.scale_down_disabled, c.exclude_from_lb)),
            Some((Some(true), None))
        );
        assert_eq!(
            by("i-stale").map(|c| (c.scale_down_disabled, c.exclude_from_lb)),
            Some((Some(false), Some(false)))
        );
        assert_eq!(by("i-user"), None, "a user's own marks stay");
        assert_eq!(by("i-kept"), None, "already as wanted");
        assert_eq!(
            by("i-old").map(|c| (c.scale_down_disabled, c.exclude_from_lb)),
            Some((None, Some(true)))
        );
    }

    /// The rollout's taint goes on the nodes it will replace and off the others (the key is
    /// nodecycle's own); `None` leaves it; changes beyond the per-pass bound wait.
    #[test]
    fn the_replacing_taint_follows_the_landing_set_within_a_bound() {
        let tainted = NodeMarks {
            replacing: true,
            ..NodeMarks::default()
        };
        let members = vec![
            member("i-a", NodeMarks::default()),
            member("i-b", tainted),
            member("i-c", tainted),
        ];
        let none = BTreeSet::new();
        let want: BTreeSet<String> = ["i-a".to_string(), "i-b".to_string()].into();
        let got = changes(&members, &none, &none, Some(&want));
        let by = |id: &str| got.iter().find(|c| c.instance == id).map(|c| c.replacing);
        assert_eq!(by("i-a"), Some(Some(true)));
        assert_eq!(by("i-b"), None, "already tainted");
        assert_eq!(by("i-c"), Some(Some(false)), "no longer to replace");
        assert!(
            changes(&members, &none, &none, None).is_empty(),
            "left alone"
        );
        let ca = vec![member(
            "i-ca",
            NodeMarks {
                autoscaler_deleting: true,
                ..NodeMarks::default()
            },
        )];
        let ca_set: BTreeSet<String> = ["i-ca".to_string()].into();
        assert!(
            changes(&ca, &none, &none, Some(&ca_set)).is_empty(),
            "a node CA is removing is left to CA"
        );

        let many: Vec<Member> = (0..REPLACING_CHANGES_PER_PASS + 5)
            .map(|i| member(&format!("i-{i:04}"), NodeMarks::default()))
            .collect();
        let all: BTreeSet<String> = many.iter().map(|m| m.instance_id.clone()).collect();
        let got = changes(&many, &none, &none, Some(&all));
        assert_eq!(got.len(), REPLACING_CHANGES_PER_PASS);
        assert_eq!(got[0].instance, "i-0000", "the same ones first every pass");
    }
}
