//! Property tests of the planner for the work that waits before it starts: queued operator
//! rotations, scheduled-maintenance rotations, and managed node group plans.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use proptest::prelude::*;

use super::Snapshot;
use super::managed_update::{NodeGroupState, UpdateAction, plan_managed};
use super::tests::{NEW, OLD, at, policy, snapshot};
use super::*;
use crate::fleet::{Lifecycle, Member, NodeStatus};
use crate::managed::{ManagedUpdate, Phase};
use crate::rotation::{Queue, Rotation, RotationReason, Step};

const BUDGETS: [&str; 4] = [
    "disruption:\n  budgets:\n    - nodes: \"0\"\n",
    "disruption:\n  budgets:\n    - nodes: \"2\"\n",
    "disruption:\n  budgets:\n    - nodes: 40%\n",
    "disruption:\n  budgets:\n    - nodes: \"3\"\n    - nodes: \"1\"\n      reasons: [Expired]\n",
];

fn now() -> DateTime<Utc> {
    at("2026-12-05T12:00:00Z")
}

/// What a waiting rotation is.
#[derive(Debug, Clone)]
enum Kind {
    /// Queued operator rotation of request `r<n>`.
    Queued {
        request: u8,
        ignore_budgets: bool,
        max_concurrent: u32,
    },
    /// Maintenance rotation with its deadline this many minutes from now.
    Maintenance { deadline_min: i64 },
    /// An in-flight drift rotation past Pending.
    Busy,
}

fn arb_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        // One request has one setting: r0 budgeted, r1 and r2 ignoring budgets (1 and 2 at once).
        (0u8..3).prop_map(|request| Kind::Queued {
            request,
            ignore_budgets: request > 0,
            max_concurrent: u32::from(request.max(1)),
        }),
        (-10i64..4000).prop_map(|deadline_min| Kind::Maintenance { deadline_min }),
        Just(Kind::Busy),
    ]
}

/// A pool of Ready members (some drifted, some gone from the group) with waiting work.
fn arb_pool() -> impl Strategy<Value = Snapshot> {
    (
        0..BUDGETS.len(),
        prop::collection::vec((any::<bool>(), prop::bool::weighted(0.1)), 1..12),
        prop::collection::vec((0usize..12, arb_kind()), 0..8),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(bi, raw_members, raw_work, paused)| {
            let members: Vec<Member> = raw_members
                .iter()
                .enumerate()
                .map(|(i, (drifted, leaving))| Member {
                    instance_id: format!("i-{i:02}"),
                    availability_zone: "a".into(),
                    image_id: Some(if *drifted { OLD } else { NEW }.into()),
                    launch_time: now() - TimeDelta::hours(5),
                    lifecycle: if *leaving {
                        Lifecycle::Leaving
                    } else {
                        Lifecycle::InService
                    },
                    node: Some(NodeStatus::ready(format!("n-{i}"))),
                })
                .collect();
            let mut seen = BTreeSet::new();
            let rotations = raw_work
                .into_iter()
                .filter(|(i, _)| seen.insert(*i))
                .map(|(i, kind)| {
                    let id = format!("i-{i:02}");
                    let created = now() - TimeDelta::minutes(10 + i64::try_from(i).unwrap_or(0));
                    match kind {
                        Kind::Queued {
                            request,
                            ignore_budgets,
                            max_concurrent,
                        } => Rotation::manual(
                            "prod/general",
                            &id,
                            Queue {
                                request_id: format!("r{request}"),
                                ignore_budgets,
                                max_concurrent,
                                reason: "test".into(),
                            },
                            created,
                        ),
                        Kind::Maintenance { deadline_min } => Rotation {
                            deadline: Some(now() + TimeDelta::minutes(deadline_min)),
                            ..Rotation::new(
                                "prod/general",
                                &id,
                                RotationReason::Maintenance,
                                false,
                                created,
                            )
                        },
                        Kind::Busy => Rotation::new(
                            "prod/general",
                            &id,
                            RotationReason::Drifted,
                            false,
                            created,
                        )
                        .enter(Step::Draining, created),
                    }
                })
                .collect();
            let mut s = snapshot(
                policy(&format!("{}expireAfter: Never\n", BUDGETS[bi])),
                members,
                rotations,
            );
            s.gates.paused = paused.then(|| "operator".to_string());
            s
        })
}

fn advanced_at_pending(p: &Plan) -> BTreeSet<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Advance {
                instance_id,
                step: Step::Pending,
            } => Some(instance_id.clone()),
            _ => None,
        })
        .collect()
}

fn present(s: &Snapshot, id: &str) -> bool {
    s.members
        .iter()
        .any(|m| m.instance_id == id && m.lifecycle != Lifecycle::Leaving)
}

fn update(phase: Phase) -> ManagedUpdate {
    let mut u = ManagedUpdate::starting("prod/general", NEW, 2, now() - TimeDelta::minutes(3));
    u.phase = phase;
    u.update_id = (phase != Phase::Starting).then(|| "u-1".to_string());
    u
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn queued_and_maintenance_releases_stay_within_their_limits(s in arb_pool()) {
        let p = plan(&s, now());
        let released = advanced_at_pending(&p);
        let by_id: BTreeMap<&str, &Rotation> =
            s.rotations.iter().map(|r| (r.instance_id.as_str(), r)).collect();
        let gated = s.gates.paused.is_some();
        // Queued: an instance that left is always finished; otherwise nothing while gated,
        // and at most maxConcurrent in flight per request when budgets are ignored.
        let mut per_request: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
        let mut budgeted = 0u32;
        for r in s.rotations.iter().filter(|r| r.waiting()) {
            let id = r.instance_id.as_str();
            let Some(q) = &r.queued else { continue };
            if !present(&s, id) {
                prop_assert!(released.contains(id), "{} left the group but is not finished", id);
                continue;
            }
            if released.contains(id) {
                prop_assert!(!gated, "{} released while paused", id);
                if q.ignore_budgets {
                    per_request.entry(q.request_id.as_str()).or_insert((0, q.max_concurrent)).0 += 1;
                } else {
                    budgeted += 1;
                }
            }
        }
        for (req, (n, max)) in per_request {
            prop_assert!(n <= max, "request {} released {} > maxConcurrent {}", req, n, max);
        }
        // Maintenance waiting for budget (deadline more than 30 minutes away): released
        // within the smaller allowance, never while gated; the others are advanced always.
        let mut maintenance = 0u32;
        for r in s.rotations.iter().filter(|r| r.reason == RotationReason::Maintenance) {
            let id = r.instance_id.as_str();
            if maintenance::waits(r, now()) {
                if released.contains(id) {
                    prop_assert!(!gated);
                    maintenance += 1;
                }
            } else {
                prop_assert!(released.contains(id), "forced maintenance {} not advanced", id);
            }
        }
        prop_assert!(maintenance <= p.allowed.drifted.min(p.allowed.expired));
        prop_assert!(maintenance + budgeted <= p.allowed.drifted.max(p.allowed.expired));
        // Nothing waiting is advanced unless released (Advance at Pending of a waiting one is a release).
        for id in &released {
            prop_assert!(by_id.contains_key(id.as_str()));
        }
        // Every start or release decision has its action; no action without a decision.
        let acted: BTreeSet<&str> = p.actions.iter().filter_map(|a| match a {
            Action::StartRotation { instance_id, .. } | Action::Advance { instance_id, .. } => Some(instance_id.as_str()),
            Action::UpdateLaunchTemplate { .. } => None,
        }).collect();
        for d in p.decisions.iter().filter(|d| d.kind == DecisionKind::Start) {
            let id = d.instance_id.as_deref().unwrap_or_default();
            prop_assert!(acted.contains(id), "start decision without action: {:?}", d);
        }
    }

    #[test]
    fn a_managed_group_never_starts_node_level_work_beside_its_update(
        s in arb_pool(),
        phase in prop_oneof![Just(None), Just(Some(Phase::Starting)), Just(Some(Phase::InProgress)), Just(Some(Phase::Successful))],
        status in prop_oneof![Just("ACTIVE"), Just("UPDATING"), Just("DEGRADED")],
        launches_old in any::<bool>(),
    ) {
        let mut s = s;
        if launches_old {
            s.group.launch_template_image = Some(OLD.into());
        }
        let u = phase.map(update);
        let group = NodeGroupState {
            update: u.as_ref(),
            status,
            wave: std::time::Duration::from_secs(600),
        };
        let m = plan_managed(&s, &group, now());
        let running = u.as_ref().is_some_and(|u| !u.phase.is_finished());
        let blocked_group = running || (status != "ACTIVE") || launches_old;
        let template = m.plan.actions.iter().any(|a| matches!(a, Action::UpdateLaunchTemplate { .. }));
        prop_assert!(!template, "EKS owns the template");
        if blocked_group || m.update != UpdateAction::None {
            for a in &m.plan.actions {
                // Finishing a rotation whose instance already left disrupts nothing.
                let node_level_start = match a {
                    Action::StartRotation { .. } => true,
                    Action::Advance { instance_id, step: Step::Pending } => present(&s, instance_id),
                    _ => false,
                };
                prop_assert!(!node_level_start, "{:?} beside the node group update ({:?}, {}, launches old {})", a, phase, status, launches_old);
            }
        }
        if let UpdateAction::Start { max_unavailable, .. } = &m.update {
            prop_assert!(!running);
            prop_assert!(*max_unavailable >= 1 && *max_unavailable <= m.plan.allowed.drifted.min(100));
        }
        let acted: BTreeSet<&str> = m.plan.actions.iter().filter_map(|a| match a {
            Action::StartRotation { instance_id, .. } | Action::Advance { instance_id, .. } => Some(instance_id.as_str()),
            Action::UpdateLaunchTemplate { .. } => None,
        }).collect();
        for d in m.plan.decisions.iter().filter(|d| d.kind == DecisionKind::Start) {
            let id = d.instance_id.as_deref().unwrap_or_default();
            prop_assert!(acted.contains(id), "start decision without action: {:?}", d);
        }
    }
}
