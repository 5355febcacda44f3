//! Scheduled-maintenance rotations (recorded by the interruption handler from AWS Health
//! scheduled changes): `Pending`, not forced, with a deadline. Until [`FORCE_BEFORE`] before
//! their deadline they wait for budget: not disrupting, not advanced, released like a budgeted
//! start (within the smaller of the `Drifted` and `Expired` allowances) when gates allow. From
//! then on they are forced: advanced every pass like any in-flight rotation, whatever the budgets.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{Action, Allowed, Decision, DecisionKind, instant};
use crate::rotation::{Rotation, RotationReason, Step};

/// A maintenance rotation is forced this long before its deadline.
pub const FORCE_BEFORE: chrono::TimeDelta = chrono::TimeDelta::minutes(30);

/// The rotation waits for budget at `now` (see the module documentation).
pub fn waits(r: &Rotation, now: DateTime<Utc>) -> bool {
    r.reason == RotationReason::Maintenance
        && r.step == Step::Pending
        && !r.forced
        && r.deadline.is_some_and(|d| d - now > FORCE_BEFORE)
}

/// Releases waiting maintenance rotations (earliest deadline first) while `allowed` leaves room
/// and no gate blocks; returns how many were released (they count as started).
pub(super) fn release(
    waiting: &BTreeMap<&str, &Rotation>,
    gate: Option<&str>,
    allowed: Allowed,
    actions: &mut Vec<Action>,
    decisions: &mut Vec<Decision>,
) -> u32 {
    let mut order: Vec<&Rotation> = waiting.values().copied().collect();
    order.sort_by_key(|r| (r.deadline, r.instance_id.as_str()));
    let room = allowed.drifted.min(allowed.expired);
    let mut released = 0;
    for r in order {
        let id = r.instance_id.as_str();
        let deadline = r.deadline.map(instant).unwrap_or_default();
        if let Some(gate) = gate {
            decisions.push(Decision::instance(
                DecisionKind::Wait,
                id,
                format!("{id}: Maintenance (deadline {deadline}) waits: {gate}"),
            ));
        } else if released < room {
            released += 1;
            decisions.push(Decision::instance(
                DecisionKind::Start,
                id,
                format!("starting {id}: Maintenance (deadline {deadline}), within budget"),
            ));
            actions.push(Action::Advance {
                instance_id: id.to_string(),
                step: r.step,
            });
        } else {
            decisions.push(Decision::instance(
                DecisionKind::Wait,
                id,
                format!(
                    "{id}: Maintenance (deadline {deadline}) waits for budget; forced from {}",
                    r.deadline
                        .map(|d| instant(d - FORCE_BEFORE))
                        .unwrap_or_default()
                ),
            ));
        }
    }
    released
}

#[cfg(test)]
mod tests {
    use super::super::plan;
    use super::super::tests::{NEW, OLD, at, member, now, policy, rotation, snapshot};
    use super::*;

    fn maintenance(id: &str, deadline: &str) -> Rotation {
        Rotation {
            deadline: Some(at(deadline)),
            ..rotation(id, RotationReason::Maintenance, Step::Pending)
        }
    }

    fn advanced(p: &super::super::Plan) -> Vec<String> {
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::Advance { instance_id, .. } => Some(instance_id.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn waits_for_budget_until_thirty_minutes_before_the_deadline() {
        // Budget 1 of 3; now = 2026-12-05T12:00Z.
        let pol = policy("disruption:\n  budgets:\n    - nodes: \"1\"\nexpireAfter: Never\n");
        let members = vec![
            member("i-a", NEW, 1),
            member("i-b", NEW, 1),
            member("i-c", NEW, 1),
        ];
        let far = maintenance("i-a", "2026-12-05T15:10:09Z");
        let farther = maintenance("i-b", "2026-12-06T15:10:09Z");
        // Both wait; budget 1: the earliest deadline starts, the other waits and is not disrupting.
        let p = plan(
            &snapshot(
                pol.clone(),
                members.clone(),
                vec![far.clone(), farther.clone()],
            ),
            now(),
        );
        assert_eq!(advanced(&p), vec!["i-a"]);
        assert_eq!(p.disrupting, 0);
        assert!(
            p.decisions
                .iter()
                .any(|d| d.message.contains("waits for budget"))
        );
        // Budget used by an in-flight drift rotation: nothing released...
        let busy = rotation("i-c", RotationReason::Drifted, Step::Draining);
        let p = plan(
            &snapshot(
                pol.clone(),
                members.clone(),
                vec![far.clone(), busy.clone()],
            ),
            now(),
        );
        assert_eq!(advanced(&p), vec!["i-c"]);
        // ...until 30 minutes before the deadline: forced.
        let p = plan(
            &snapshot(
                pol.clone(),
                members.clone(),
                vec![far.clone(), busy.clone()],
            ),
            at("2026-12-05T14:40:09Z"),
        );
        assert_eq!(advanced(&p), vec!["i-a", "i-c"]);
        // Paused: waits; forced ones still go.
        let mut s = snapshot(pol.clone(), members.clone(), vec![far.clone()]);
        s.gates.paused = Some("operator".into());
        assert!(advanced(&plan(&s, now())).is_empty());
        assert_eq!(advanced(&plan(&s, at("2026-12-05T15:00:00Z"))), vec!["i-a"]);
        // A waiting maintenance rotation's instance is not a drift candidate meanwhile.
        let members = vec![member("i-a", OLD, 1), member("i-b", NEW, 1)];
        let p = plan(
            &snapshot(
                pol,
                members,
                vec![maintenance("i-a", "2026-12-09T00:00:00Z")],
            ),
            now(),
        );
        assert!(p.candidates.is_empty(), "{:?}", p.candidates);
    }
}
