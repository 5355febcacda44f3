//! Property tests of the step function's surge accounting.

use std::collections::BTreeSet;

use chrono::TimeDelta;
use proptest::prelude::*;

use super::tests::{NEW, OLD, group, member, t0};
use super::*;
use crate::rotation::{Rotation, RotationReason, Step, Surge, Undo, UnitRelease};

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Pending),
        Just(Step::Surging),
        Just(Step::Cordoned),
        Just(Step::Draining),
        Just(Step::Terminating),
        Just(Step::Done),
        Just(Step::Failed),
        Just(Step::Cancelled),
    ]
}

fn arb_release() -> impl Strategy<Value = Option<UnitRelease>> {
    prop_oneof![
        4 => Just(None),
        1 => Just(Some(UnitRelease::Owed)),
        1 => Just(Some(UnitRelease::Given)),
    ]
}

type RawRot = (usize, Step, bool, Option<usize>, Option<UnitRelease>, i64);

fn arb_case() -> impl Strategy<Value = (Vec<Member>, Vec<Rotation>, Group, i64)> {
    (
        1usize..8,
        prop::collection::vec(
            (any::<bool>(), any::<bool>(), prop::bool::weighted(0.2)),
            0..6,
        ),
        prop::collection::vec(
            (
                0usize..8,
                arb_step(),
                any::<bool>(),
                prop::option::of(0usize..6),
                arb_release(),
                0i64..40,
            ),
            0..6,
        ),
        0i32..4,
        0i64..40,
    )
        .prop_map(|(n, raw_fresh, raw_rots, extra, minutes)| {
            let old: Vec<Member> = (0..n)
                .map(|i| member(&format!("i-old{i}"), OLD, -600, true))
                .collect();
            let fresh: Vec<Member> = raw_fresh
                .iter()
                .enumerate()
                .map(|(i, (ready, new_image, gone))| {
                    let mut m = member(
                        &format!("i-new{i}"),
                        if *new_image { NEW } else { OLD },
                        i64::try_from(i).unwrap_or(0),
                        *ready,
                    );
                    if *gone {
                        m.lifecycle = crate::fleet::Lifecycle::Leaving;
                    }
                    m
                })
                .collect();
            let mut seen = BTreeSet::new();
            let rotations: Vec<Rotation> = raw_rots
                .into_iter()
                .filter(|r: &RawRot| r.0 < n && seen.insert(r.0))
                .map(|(i, step, surged, rep, release, age)| {
                    let mut r = Rotation::new(
                        "prod/general",
                        &format!("i-old{i}"),
                        RotationReason::Drifted,
                        false,
                        t0() - TimeDelta::minutes(age),
                    )
                    .enter(step, t0() - TimeDelta::minutes(age));
                    if surged && step != Step::Pending {
                        r.surge = Some(Surge {
                            target_desired: 0,
                            baseline: old.iter().map(|m| m.instance_id.clone()).collect(),
                            base: None,
                            read: None,
                            above_max: false,
                            release: if step.is_finished() { release } else { None },
                        });
                    }
                    if matches!(
                        step,
                        Step::Cordoned | Step::Draining | Step::Terminating | Step::Done
                    ) {
                        r.replacement = rep
                            .filter(|k| *k < fresh.len())
                            .map(|k| format!("i-new{k}"));
                    }
                    r
                })
                .collect();
            let mut members = old;
            members.extend(fresh);
            let g = group(
                i32::try_from(n).unwrap_or(0) + extra,
                0,
                i32::try_from(n).unwrap_or(0) + 3,
            );
            (members, rotations, g, minutes)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn surge_accounting_never_shares_an_instance((members, rotations, g, minutes) in arb_case()) {
        let none = BTreeSet::new();
        let view = PoolView { group: &g, members: &members, desired_ami: Some(NEW), quarantined: &none, may_raise_max: false, launch_problem: None, terminate_first: false };
        let moving: BTreeSet<&str> = rotations.iter().filter(|r| r.in_flight()).map(|r| r.instance_id.as_str()).collect();
        let plan = step_pool(&view, &rotations, &moving, t0() + TimeDelta::minutes(minutes), &StepSettings { replacement_timeout: std::time::Duration::from_secs(20 * 60) });
        // One command per moving rotation; finished ones at most one, only when they owe
        // their surge (none while its launch is still to come).
        for r in &rotations {
            let n = plan.commands.iter().filter(|(i, _)| *i == r.instance_id).count();
            if r.in_flight() {
                prop_assert_eq!(n, 1, "{:?}", r);
            } else {
                prop_assert!(n <= usize::from(r.surge_owed()), "{:?}", r);
            }
        }
        // Capacity by delta: nothing ever lowers desired capacity except a terminate with a
        // decrement of an instance known to run no workload (or the drained old one).
        let mut raises = 0;
        for (id, c) in &plan.commands {
            let lowers = matches!(c.undo(), Some(Undo::LowerTo { .. }));
            prop_assert!(!lowers, "{:?}", c);
            if let Some(Undo::Terminate { instance_id }) = c.undo() {
                let m = members.iter().find(|m| m.instance_id == *instance_id);
                let recorded = rotations.iter().any(|r| r.instance_id == *id && matches!(r.surge.as_ref().and_then(|s| s.release.as_ref()), Some(UnitRelease::Undoing(_))));
                prop_assert!(recorded || m.is_some_and(Member::podless), "{} may run workload: {:?}", instance_id, plan);
            }
            raises += i32::from(c.raises());
        }
        prop_assert!(raises <= i32::try_from(rotations.len()).unwrap_or(0));
        // Replacements claimed and instances undone are all distinct, and none is another
        // rotation's replacement.
        let mut used = BTreeSet::new();
        for (id, c) in &plan.commands {
            let taken = match c {
                Command::ClaimReplacement { id } => Some(id.clone()),
                c => match c.undo() {
                    Some(Undo::Terminate { instance_id }) => Some(instance_id.clone()),
                    _ => None,
                },
            };
            if let Some(t) = taken {
                prop_assert!(used.insert(t.clone()), "{} used twice: {:?}", t, plan);
                let own = rotations.iter().find(|r| r.instance_id == *id).and_then(|r| r.replacement.clone());
                let others: Vec<&String> = rotations.iter()
                    .filter(|r| r.instance_id != *id)
                    .filter_map(|r| r.replacement.as_ref())
                    .collect();
                prop_assert!(!others.contains(&&t), "{} is another rotation's replacement", t);
                if matches!(c, Command::ClaimReplacement { .. }) {
                    prop_assert!(own.is_none());
                }
            }
        }
    }
}
