//! Property tests of the planner against an independent oracle of the counting rules.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use chrono::{DateTime, TimeDelta, Utc};
use proptest::prelude::*;

use super::Snapshot;
use super::tests::{NEW, OLD, at, policy, snapshot};
use super::*;
use crate::budget;
use crate::fleet::{Lifecycle, Member, NodeStatus};
use crate::policy::Policy;
use crate::rotation::{Rotation, RotationReason, Step};

const BUDGETS: [&str; 6] = [
    "",
    "disruption:\n  budgets:\n    - nodes: \"0\"\n",
    "disruption:\n  budgets:\n    - nodes: \"2\"\n",
    "disruption:\n  budgets:\n    - nodes: 30%\n",
    "disruption:\n  budgets:\n    - nodes: \"3\"\n    - nodes: \"0\"\n      schedule: \"0 9 * * *\"\n      duration: 8h\n      reasons: [Drifted]\n",
    "disruption:\n  budgets:\n    - nodes: 50%\n    - nodes: \"1\"\n      reasons: [Expired]\n    - nodes: \"0\"\n      schedule: \"*/30 * * * *\"\n      duration: 10m\n      timeZone: Asia/Kolkata\n",
];
const EXPIRY: [&str; 4] = [
    "expireAfter: Never\n",
    "expireAfter: 720h\n",
    "expireAfter: 720h\nterminationGracePeriod: 2h\n",
    "expireAfter: 100h\nterminationGracePeriod: 10h\n",
];

fn policies() -> &'static Vec<Policy> {
    static P: OnceLock<Vec<Policy>> = OnceLock::new();
    P.get_or_init(|| {
        let mut out = Vec::new();
        for b in BUDGETS {
            for e in EXPIRY {
                out.push(policy(&format!("{b}{e}")));
            }
        }
        out
    })
}

fn base() -> DateTime<Utc> {
    at("2026-12-01T00:00:00Z")
}

fn arb_node() -> impl Strategy<Value = Option<NodeStatus>> {
    prop_oneof![
        1 => Just(None),
        6 => (
            prop::bool::weighted(0.85),
            prop::bool::weighted(0.1),
            prop::option::weighted(0.1, Just("interruption".to_string())),
            0u32..4,
        )
            .prop_map(|(ready, unschedulable, disrupted, evictable_pods)| Some(NodeStatus {
                name: "n".to_string(),
                ready,
                unschedulable,
                disrupted,
                evictable_pods,
                pods_counted: false,
                marks: Default::default(),
                joined: None,
                conditions: Vec::new(),
                opt_out: None,
            })),
    ]
}

fn arb_lifecycle() -> impl Strategy<Value = Lifecycle> {
    prop_oneof![
        8 => Just(Lifecycle::InService),
        1 => Just(Lifecycle::Pending),
        1 => Just(Lifecycle::Leaving),
        1 => Just(Lifecycle::Other("Warmed:Running".to_string())),
    ]
}

fn arb_image() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => Just(Some(OLD.to_string())),
        4 => Just(Some(NEW.to_string())),
        1 => Just(None),
    ]
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Pending),
        Just(Step::Surging),
        Just(Step::Cordoned),
        Just(Step::Draining),
        Just(Step::Terminating),
        Just(Step::Done),
        Just(Step::Failed),
    ]
}

fn arb_reason() -> impl Strategy<Value = RotationReason> {
    prop_oneof![
        Just(RotationReason::Drifted),
        Just(RotationReason::Expired),
        Just(RotationReason::Interrupted),
        Just(RotationReason::Manual),
    ]
}

/// Raw rotation: (target index (>= members = not a member), step, reason, forced, foreign,
/// replacement index).
type RawRot = (usize, Step, RotationReason, bool, bool, Option<usize>);

fn arb_snapshot() -> impl Strategy<Value = (Snapshot, DateTime<Utc>)> {
    let members = prop::collection::vec(
        (arb_image(), 0i64..1000, arb_lifecycle(), arb_node()),
        0..40,
    );
    let rots = prop::collection::vec(
        (
            0usize..50,
            arb_step(),
            arb_reason(),
            any::<bool>(),
            prop::bool::weighted(0.05),
            prop::option::weighted(0.2, 0usize..50),
        ),
        0..8,
    );
    let gates = (
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        prop::option::of(prop_oneof![Just(OLD), Just(NEW)]),
    );
    (
        0..policies().len(),
        members,
        rots,
        gates,
        0i64..(14 * 24 * 60),
    )
        .prop_map(
            |(pi, raw_members, raw_rots, (desired, paused, halted, template), minutes)| {
                let now = base() + TimeDelta::minutes(minutes);
                let members: Vec<Member> = raw_members
                    .into_iter()
                    .enumerate()
                    .map(|(i, (image_id, age, lifecycle, node))| Member {
                        instance_id: format!("i-{i:03}"),
                        availability_zone: "a".to_string(),
                        image_id,
                        launch_time: now - TimeDelta::hours(age),
                        lifecycle,
                        node,
                    })
                    .collect();
                let mut seen = BTreeSet::new();
                let rotations: Vec<Rotation> = raw_rots
                    .into_iter()
                    .filter(|r: &RawRot| seen.insert(r.0))
                    .map(|(target, step, reason, forced, foreign, replacement)| {
                        let pool = if foreign {
                            "prod/other"
                        } else {
                            "prod/general"
                        };
                        let mut r = Rotation::new(
                            pool,
                            &format!("i-{target:03}"),
                            reason,
                            forced,
                            now - TimeDelta::minutes(3),
                        );
                        r.step = step;
                        r.replacement = replacement.map(|i| format!("i-{i:03}"));
                        r
                    })
                    .collect();
                let mut s = snapshot(policies()[pi].clone(), members, rotations);
                s.gates.desired_ami = desired.then(|| NEW.to_string());
                s.gates.paused = paused.then(|| "p".to_string());
                s.gates.halted = halted.then(|| "h".to_string());
                s.group.launch_template_image = template.map(str::to_string);
                (s, now)
            },
        )
}

/// Independent statement of the counting rules: (total, disrupting).
fn oracle_counts(s: &Snapshot) -> (u32, u32) {
    let own_in_flight: Vec<&Rotation> = s
        .rotations
        .iter()
        .filter(|r| r.in_flight() && r.pool == "prod/general")
        .collect();
    let replacements: BTreeSet<&str> = own_in_flight
        .iter()
        .filter_map(|r| r.replacement.as_deref())
        .collect();
    let mut disrupting: BTreeSet<&str> = s
        .rotations
        .iter()
        .filter(|r| r.in_flight())
        .map(|r| r.instance_id.as_str())
        .collect();
    let mut total = 0;
    for m in &s.members {
        let ready = m.lifecycle == Lifecycle::InService && m.node.as_ref().is_some_and(|n| n.ready);
        if ready {
            total += 1;
        }
        if m.lifecycle == Lifecycle::Pending {
            continue;
        }
        if let Some(n) = &m.node {
            let lost = !n.ready && !replacements.contains(m.instance_id.as_str());
            if lost || n.unschedulable || n.disrupted.is_some() || m.lifecycle == Lifecycle::Leaving
            {
                disrupting.insert(m.instance_id.as_str());
            }
        }
    }
    (total, u32::try_from(disrupting.len()).unwrap())
}

fn gated(s: &Snapshot) -> bool {
    s.gates.paused.is_some()
        || s.gates.halted.is_some()
        || s.policy.paused
        || s.gates.desired_ami.is_none()
}

/// Members the oracle considers eligible to start, with their need.
fn oracle_eligible(s: &Snapshot, now: DateTime<Utc>) -> Vec<(String, Need)> {
    s.members
        .iter()
        .filter(|m| {
            m.lifecycle == Lifecycle::InService
                && m.node
                    .as_ref()
                    .is_some_and(|n| n.ready && !n.unschedulable && n.disrupted.is_none())
                && !s.rotations.iter().any(|r| {
                    r.instance_id == m.instance_id
                        && (r.in_flight() || (r.step == Step::Done && r.pool == "prod/general"))
                })
        })
        .filter_map(|m| {
            assess(m, s.gates.desired_ami.as_deref(), &s.expiration(), now)
                .need()
                .map(|n| (m.instance_id.clone(), n))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn budgets_are_never_exceeded((s, now) in arb_snapshot()) {
        let p = plan(&s, now);
        let (total, disrupting) = oracle_counts(&s);
        prop_assert_eq!((p.total, p.disrupting), (total, disrupting));
        for (k, a) in p.actions.iter().filter(|a| matches!(a, Action::StartRotation { .. })).enumerate() {
            let Action::StartRotation { reason, forced, .. } = a else { continue };
            if *forced {
                continue;
            }
            let r = reason.budget_reason().unwrap();
            let allowed = budget::evaluate(&s.policy.budgets, r, total, disrupting, now).allowed;
            prop_assert_eq!(p.allowed.get(*reason), Some(allowed));
            // k starts precede this one: in flight + started so far + this one <= cap.
            prop_assert!(u32::try_from(k).unwrap() < allowed, "start #{} of {:?} with allowed {}", k, reason, allowed);
        }
    }

    #[test]
    fn forced_always_start_unless_gated((s, now) in arb_snapshot()) {
        let p = plan(&s, now);
        let starts: BTreeSet<String> = super::tests::started(&p).into_iter().map(|(id, _, _)| id).collect();
        let eligible = oracle_eligible(&s, now);
        if gated(&s) {
            prop_assert!(starts.is_empty());
            prop_assert!(p.blocked.is_some() || eligible.is_empty());
        } else {
            for (id, need) in &eligible {
                if need.forced {
                    prop_assert!(starts.contains(id), "forced {} not started", id);
                }
            }
            let all: BTreeSet<&String> = eligible.iter().map(|(id, _)| id).collect();
            prop_assert_eq!(p.blocked.is_none(), starts.len() == all.len());
        }
        // Every start is an eligible candidate with the same reason.
        for (id, reason, forced) in super::tests::started(&p) {
            let found = eligible.iter().find(|(e, _)| *e == id);
            prop_assert!(found.is_some(), "{} started but not eligible", id);
            if let Some((_, need)) = found {
                prop_assert_eq!((need.reason, need.forced), (reason, forced));
            }
        }
    }

    #[test]
    fn no_instance_started_twice_or_while_in_flight((s, now) in arb_snapshot()) {
        let p = plan(&s, now);
        let mut seen = BTreeSet::new();
        for (id, _, _) in super::tests::started(&p) {
            prop_assert!(seen.insert(id.clone()), "{} started twice", id);
            prop_assert!(!s.rotations.iter().any(|r| r.instance_id == id && r.in_flight()), "{} in flight", id);
        }
        // Exactly the pool's in-flight rotations advance, once each, in id order.
        let mut expected: Vec<String> = s.rotations.iter()
            .filter(|r| r.in_flight() && r.pool == "prod/general")
            .map(|r| r.instance_id.clone())
            .collect();
        expected.sort();
        let advanced: Vec<String> = p.actions.iter().filter_map(|a| match a {
            Action::Advance { instance_id, .. } => Some(instance_id.clone()),
            _ => None,
        }).collect();
        prop_assert_eq!(advanced, expected);
    }

    #[test]
    fn template_update_iff_needed((s, now) in arb_snapshot()) {
        let p = plan(&s, now);
        let want = s.gates.halted.is_none()
            && s.gates.paused.is_none()
            && !s.policy.paused
            && s.gates.desired_ami.is_some()
            && s.group.launch_template_image != s.gates.desired_ami;
        let updates = p.actions.iter().filter(|a| matches!(a, Action::UpdateLaunchTemplate { .. })).count();
        prop_assert_eq!(updates, usize::from(want));
        if want {
            let first_is_update = matches!(p.actions[0], Action::UpdateLaunchTemplate { .. });
            prop_assert!(first_is_update);
        }
    }

    #[test]
    fn plan_is_deterministic_and_order_independent((s, now) in arb_snapshot(), k in 0usize..40) {
        let p = plan(&s, now);
        prop_assert_eq!(&p, &plan(&s, now));
        let mut shuffled = s.clone();
        shuffled.members.reverse();
        let n = shuffled.members.len();
        if n > 0 {
            shuffled.members.rotate_left(k % n);
        }
        shuffled.rotations.reverse();
        prop_assert_eq!(&p, &plan(&shuffled, now));
        // And it serializes.
        prop_assert!(serde_json::to_string(&p).is_ok());
    }
}
