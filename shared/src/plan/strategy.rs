//! The strategy of a pass: the order in which eligible candidates are taken and whether one
//! more may start, one pure seam the planner calls ([`StartStrategy::order`], [`StartStrategy::admits`]),
//! chosen by the policy (`disruption.order`). Forced candidates always come first and never
//! wait for a budget (their deadline has passed); only the order of the rest is a choice.

use std::cmp::Ordering;

use serde::Serialize;

use super::count::Eligible;
use crate::fleet::Group;
use crate::policy::{CandidateOrder, Policy, RolloutStrategy};
use crate::rotation::Rotation;

/// How a pool's nodes are replaced this pass (derived each pass from the policy and the group,
/// so a group that gains room surges again). Serializes as `{"strategy": "surge"}` or
/// `{"strategy": "terminateFirst", "why": ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "strategy", rename_all = "camelCase")]
pub enum Replacement {
    /// Surge first: the replacement launches and is Ready before the old node is drained.
    Surge,
    /// Terminate first: cordon and drain within budgets and PDBs, terminate with a relaunch,
    /// and confirm the relaunched instance Ready on the desired AMI before the rotation ends
    /// (so a budget of one replaces one node at a time); a relaunch out of capacity halts the
    /// pool ([`crate::rotation::step`]). A managed node group updates with EKS's `MINIMAL`
    /// strategy.
    TerminateFirst {
        /// Why.
        why: TerminateFirstWhy,
    },
}

/// Why a pool replaces terminate-first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum TerminateFirstWhy {
    /// `rollout.strategy: terminateFirst`.
    Policy,
    /// The group is at `MaxSize` (not counting nodecycle's own surges) and the policy does not
    /// allow raising it (`disruption.surgeAboveMaxSize`).
    #[serde(rename_all = "camelCase")]
    AtMaxSize {
        /// `MaxSize`.
        max_size: i32,
    },
}

impl std::fmt::Display for Replacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replacement::Surge => f.write_str("surge first"),
            Replacement::TerminateFirst { why } => match why {
                TerminateFirstWhy::Policy => {
                    f.write_str("terminate first (rollout.strategy: terminateFirst)")
                }
                TerminateFirstWhy::AtMaxSize { max_size } => write!(
                    f,
                    "terminate first: the group is at MaxSize {max_size} and disruption.surgeAboveMaxSize is not set"
                ),
            },
        }
    }
}

impl Replacement {
    /// The pool's strategy this pass: the policy's `terminateFirst` (a managed node group's
    /// update then uses EKS's `MINIMAL`), else, for a self-managed group, terminate-first
    /// when the group's desired capacity less the units of nodecycle's active surges
    /// (`rotations`) is at `MaxSize` and raising it is not allowed, else surge.
    pub fn of(policy: &Policy, group: &Group, rotations: &[Rotation]) -> Replacement {
        if policy.rollout == RolloutStrategy::TerminateFirst {
            return Replacement::TerminateFirst {
                why: TerminateFirstWhy::Policy,
            };
        }
        if matches!(
            policy.node_group,
            crate::policy::NodeGroup::ManagedNodeGroup(_)
        ) {
            // EKS raises a managed group's MaxSize for its own update (DEFAULT strategy).
            return Replacement::Surge;
        }
        let surges = rotations.iter().filter(|r| r.surge_active()).count();
        let own = group
            .desired_capacity
            .saturating_sub(i32::try_from(surges).unwrap_or(i32::MAX));
        if !policy.surge_above_max_size && own >= group.max_size {
            return Replacement::TerminateFirst {
                why: TerminateFirstWhy::AtMaxSize {
                    max_size: group.max_size,
                },
            };
        }
        Replacement::Surge
    }

    /// Terminate first.
    pub fn terminate_first(&self) -> bool {
        matches!(self, Replacement::TerminateFirst { .. })
    }
}

/// How a pool's candidates are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartStrategy {
    /// `disruption.order`.
    pub order: CandidateOrder,
}

impl StartStrategy {
    /// The pool's, from its policy.
    pub fn of(policy: &Policy) -> StartStrategy {
        StartStrategy {
            order: policy.candidate_order,
        }
    }

    /// Sorts `pending` into start order: forced first; then, for
    /// [`CandidateOrder::EmptiestFirst`] (the default), nodes without evictable pods before
    /// the others; then the oldest launch first; ties by instance id (a total order, so every
    /// pass takes the same candidates from the same facts).
    pub(super) fn order(&self, pending: &mut [Eligible<'_>]) {
        pending.sort_by(|a, b| self.compare(a, b));
    }

    fn compare(&self, a: &Eligible<'_>, b: &Eligible<'_>) -> Ordering {
        let forced = (!a.need.forced).cmp(&!b.need.forced);
        let pods = match self.order {
            CandidateOrder::EmptiestFirst => (a.evictable_pods > 0).cmp(&(b.evictable_pods > 0)),
            CandidateOrder::OldestFirst => Ordering::Equal,
        };
        forced
            .then(pods)
            .then(a.member.launch_time.cmp(&b.member.launch_time))
            .then(a.member.instance_id.cmp(&b.member.instance_id))
    }

    /// Whether one more candidate may start when `started` rotations count against the
    /// budget of its reason, which allows `allowed` (`None`: a reason no budget limits): a
    /// forced candidate always, a budgeted one while `started < allowed`.
    pub fn admits(&self, forced: bool, started: u32, allowed: Option<u32>) -> bool {
        forced || started < allowed.unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::member;
    use crate::plan::{Assessment, Drift, Expiry, Need};
    use crate::rotation::RotationReason;

    /// Candidate `id`, `age_h` hours old, with `pods` evictable pods, forced or not.
    fn eligible(m: &crate::fleet::Member, pods: u32, forced: bool) -> Eligible<'_> {
        Eligible {
            member: m,
            need: Need {
                reason: RotationReason::Drifted,
                forced,
            },
            assessment: Assessment {
                age: std::time::Duration::ZERO,
                drift: Drift::Current,
                expiry: Expiry::Never,
            },
            evictable_pods: pods,
        }
    }

    #[test]
    fn candidates_are_taken_in_the_order_the_policy_chooses() {
        let (old, mid, new, twin) = (
            member("i-old", "ami-1", 30),
            member("i-mid", "ami-1", 20),
            member("i-new", "ami-1", 10),
            member("i-twin", "ami-1", 20),
        );
        // (candidate, evictable pods, forced)
        let pool = [
            (&new, 0, false),
            (&old, 5, false),
            (&mid, 2, false),
            (&twin, 0, true),
        ];
        let cases = [
            // Forced first; then empty nodes; then the oldest; ties by id.
            (
                CandidateOrder::EmptiestFirst,
                vec!["i-twin", "i-new", "i-old", "i-mid"],
            ),
            // Forced first; then the oldest, whatever runs on it.
            (
                CandidateOrder::OldestFirst,
                vec!["i-twin", "i-old", "i-mid", "i-new"],
            ),
        ];
        for (order, want) in cases {
            let mut pending: Vec<Eligible<'_>> = pool
                .iter()
                .map(|(m, pods, forced)| eligible(m, *pods, *forced))
                .collect();
            StartStrategy { order }.order(&mut pending);
            let got: Vec<&str> = pending
                .iter()
                .map(|e| e.member.instance_id.as_str())
                .collect();
            assert_eq!(got, want, "{order:?}");
        }
    }

    /// Terminate-first when the policy says so, or when the group (less nodecycle's own
    /// surges) is at `MaxSize` and raising it is not allowed; surge otherwise.
    #[test]
    fn a_pool_that_cannot_surge_replaces_terminate_first() {
        use crate::plan::tests::policy;
        use crate::rotation::{Rotation, Step, Surge};
        let group = |desired, max| crate::fleet::Group {
            name: "g".into(),
            min_size: 0,
            max_size: max,
            desired_capacity: desired,
            launch_template_image: None,
            suspended_processes: Vec::new(),
            do_not_repair: false,
            retained: Vec::new(),
        };
        let now = chrono::Utc::now();
        let surging = Rotation {
            surge: Some(Surge {
                target_desired: 0,
                baseline: Vec::new(),
                base: None,
                read: None,
                above_max: false,
                release: None,
            }),
            ..Rotation::new("prod/general", "i-1", RotationReason::Drifted, false, now)
                .enter(Step::Surging, now)
        };
        let auto = policy("");
        let explicit = policy("rollout:\n  strategy: terminateFirst\n");
        let above = policy("disruption:\n  surgeAboveMaxSize: true\n");
        let at_max = Replacement::TerminateFirst {
            why: TerminateFirstWhy::AtMaxSize { max_size: 4 },
        };
        // (what, policy, desired, max, rotations) -> want
        let cases = [
            ("room", &auto, 3, 4, vec![], Replacement::Surge),
            ("at MaxSize", &auto, 4, 4, vec![], at_max.clone()),
            (
                "our own surge fills it",
                &auto,
                4,
                4,
                vec![surging.clone()],
                Replacement::Surge,
            ),
            (
                "may raise MaxSize",
                &above,
                4,
                4,
                vec![],
                Replacement::Surge,
            ),
            (
                "the policy's choice",
                &explicit,
                1,
                10,
                vec![],
                Replacement::TerminateFirst {
                    why: TerminateFirstWhy::Policy,
                },
            ),
        ];
        for (what, p, desired, max, rotations, want) in cases {
            let got = Replacement::of(p, &group(desired, max), &rotations);
            assert_eq!(got, want, "{what}");
            assert_eq!(got.terminate_first(), want != Replacement::Surge, "{what}");
        }
    }

    #[test]
    fn equal_candidates_are_ordered_by_instance_id() {
        let (a, b) = (member("i-a", "ami-1", 5), member("i-b", "ami-1", 5));
        for order in [CandidateOrder::EmptiestFirst, CandidateOrder::OldestFirst] {
            let mut pending = vec![eligible(&b, 1, false), eligible(&a, 1, false)];
            StartStrategy { order }.order(&mut pending);
            assert_eq!(pending[0].member.instance_id, "i-a", "{order:?}");
        }
    }

    #[test]
    fn forced_candidates_never_wait_and_budgeted_ones_wait_at_the_allowance() {
        let s = StartStrategy {
            order: CandidateOrder::default(),
        };
        // (forced, started, allowed) -> admitted
        let cases = [
            ((true, 5, Some(0)), true),
            ((true, 0, None), true),
            ((false, 0, Some(1)), true),
            ((false, 1, Some(1)), false),
            ((false, 0, Some(0)), false),
            ((false, 0, None), false),
        ];
        for ((forced, started, allowed), want) in cases {
            assert_eq!(
                s.admits(forced, started, allowed),
                want,
                "{forced} {started} {allowed:?}"
            );
        }
    }
}
