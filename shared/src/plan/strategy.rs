//! The strategy of a pass: the order in which eligible candidates are taken and whether one
//! more may start, one pure seam the planner calls ([`StartStrategy::order`], [`StartStrategy::admits`]),
//! chosen by the policy (`disruption.order`). Forced candidates always come first and never
//! wait for a budget (their deadline has passed); only the order of the rest is a choice.

use std::cmp::Ordering;

use super::count::Eligible;
use crate::policy::{CandidateOrder, Policy};

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
