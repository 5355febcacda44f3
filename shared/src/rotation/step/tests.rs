//! Table tests of the step function.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::fleet::{Group, Lifecycle, Member, NodeStatus};
use crate::rotation::{Release, Rotation, RotationReason, Step, Surge, Undo};

pub(super) const OLD: &str = "ami-old";
pub(super) const NEW: &str = "ami-new";

pub(super) fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

fn settings() -> StepSettings {
    StepSettings {
        replacement_timeout: Duration::from_secs(20 * 60),
    }
}

pub(super) fn group(desired: i32, min: i32, max: i32) -> Group {
    Group {
        name: "g".into(),
        min_size: min,
        max_size: max,
        desired_capacity: desired,
        launch_template_image: Some(NEW.into()),
    }
}

/// An in-service member launched `minutes` after t0 (negative: before), Ready or not.
pub(super) fn member(id: &str, image: &str, minutes: i64, ready: bool) -> Member {
    Member {
        instance_id: id.into(),
        availability_zone: "us-east-2a".into(),
        image_id: Some(image.into()),
        launch_time: t0() + TimeDelta::minutes(minutes),
        lifecycle: Lifecycle::InService,
        node: Some(NodeStatus {
            name: format!("node-{id}"),
            ready,
            unschedulable: false,
            disrupted: None,
            evictable_pods: 1,
        }),
    }
}

fn old_members(n: usize) -> Vec<Member> {
    (0..n)
        .map(|i| member(&format!("i-old{i}"), OLD, -600, true))
        .collect()
}

fn ids(members: &[Member]) -> Vec<String> {
    members.iter().map(|m| m.instance_id.clone()).collect()
}

fn rotation(id: &str, step: Step) -> Rotation {
    Rotation::new("prod/general", id, RotationReason::Drifted, false, t0()).enter(step, t0())
}

fn surging(id: &str, baseline: &[Member], base: i32, target: i32) -> Rotation {
    Rotation {
        surge: Some(Surge {
            target_desired: target,
            baseline: ids(baseline),
            base: Some(base),
            release: None,
        }),
        ..rotation(id, Step::Surging)
    }
}

fn run(group: &Group, members: &[Member], rotations: &[Rotation], now: DateTime<Utc>) -> StepPlan {
    let view = PoolView {
        group,
        members,
        desired_ami: Some(NEW),
    };
    let moving: BTreeSet<&str> = rotations
        .iter()
        .filter(|r| r.in_flight())
        .map(|r| r.instance_id.as_str())
        .collect();
    step_pool(&view, rotations, &moving, now, &settings())
}

fn command<'a>(plan: &'a StepPlan, id: &str) -> &'a Command {
    &plan
        .commands
        .iter()
        .find(|(i, _)| i == id)
        .unwrap_or_else(|| panic!("no command for {id}: {plan:?}"))
        .1
}

fn terminated(plan: &StepPlan) -> Vec<String> {
    plan.commands
        .iter()
        .filter_map(|(_, c)| match c.undo() {
            Some(Undo::Terminate { instance_id }) => Some(instance_id.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn pending_surges_one_unit_each_up_to_max_size_then_replaces_without_surge() {
    let members = old_members(6);
    let g = group(6, 0, 8);
    let rotations: Vec<Rotation> = (0..3)
        .map(|i| rotation(&format!("i-old{i}"), Step::Pending))
        .collect();
    let plan = run(&g, &members, &rotations, t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Surge {
            target: 7,
            base: 6,
            baseline: ids(&members)
        }
    );
    assert!(matches!(
        command(&plan, "i-old1"),
        Command::Surge {
            target: 8,
            base: 6,
            ..
        }
    ));
    assert_eq!(command(&plan, "i-old2"), &Command::Cordon);
    assert_eq!(plan.capacity, Some(8));
    // Give-backs and cordons come before surges.
    assert_eq!(plan.commands.last().map(|(_, c)| c.name()), Some("surge"));
}

#[test]
fn surging_claims_distinct_ready_replacements_on_the_desired_ami() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    members.push(member("i-new2", NEW, 2, true));
    members.push(member("i-other", OLD, 3, true));
    let g = group(8, 0, 10);
    let rotations = vec![
        surging("i-old0", &base, 6, 7),
        surging("i-old1", &base, 6, 8),
    ];
    let plan = run(&g, &members, &rotations, t0() + TimeDelta::minutes(5));
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::ClaimReplacement {
            id: "i-new1".into()
        }
    );
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::ClaimReplacement {
            id: "i-new2".into()
        }
    );
    assert_eq!(plan.capacity, Some(8));
}

#[test]
fn surging_waits_for_a_replacement_until_the_timeout() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, false));
    let g = group(7, 0, 10);
    let rotations = vec![surging("i-old0", &base, 6, 7)];
    let plan = run(&g, &members, &rotations, t0() + TimeDelta::minutes(19));
    assert!(matches!(command(&plan, "i-old0"), Command::Wait { .. }));
    assert_eq!(plan.capacity, Some(7));
}

/// Defect 1 of the rotation-core issue: two rotations time out in the same pass; each undoes
/// its surge with its own never-Ready instance, and no surge is left.
#[test]
fn two_timeouts_in_one_pass_undo_two_distinct_instances() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-bad1", NEW, 1, false));
    members.push(member("i-bad2", NEW, 1, false));
    let g = group(8, 0, 10);
    let rotations = vec![
        surging("i-old0", &base, 6, 7),
        surging("i-old1", &base, 6, 8),
    ];
    let plan = run(&g, &members, &rotations, t0() + TimeDelta::minutes(20));
    for id in ["i-old0", "i-old1"] {
        assert!(
            matches!(
                command(&plan, id),
                Command::Fail {
                    halt: true,
                    undo: Some(Undo::Terminate { .. }),
                    ..
                }
            ),
            "{plan:?}"
        );
    }
    let mut gone = terminated(&plan);
    gone.sort();
    assert_eq!(gone, vec!["i-bad1", "i-bad2"]);
    assert_eq!(plan.capacity, None, "no surge is active after the pass");
}

#[test]
fn a_timeout_with_no_instance_launched_lowers_capacity_to_the_remaining_surges() {
    let base = old_members(6);
    let g = group(8, 0, 10);
    // Two surges recorded, nothing launched yet; one times out, one is younger.
    let old = surging("i-old0", &base, 6, 7);
    let young = Rotation {
        step_at: t0() + TimeDelta::minutes(10),
        ..surging("i-old1", &base, 6, 8)
    };
    let plan = run(&g, &base, &[old, young], t0() + TimeDelta::minutes(20));
    assert!(
        matches!(
            command(&plan, "i-old0"),
            Command::Fail {
                undo: Some(Undo::LowerTo { desired: 7 }),
                ..
            }
        ),
        "{plan:?}"
    );
    assert!(matches!(command(&plan, "i-old1"), Command::Wait { .. }));
    assert_eq!(plan.capacity, Some(7));
}

#[test]
fn a_timeout_whose_capacity_was_never_raised_gives_nothing_back() {
    let base = old_members(6);
    let g = group(6, 0, 10); // the surge was recorded, the capacity call never ran
    let plan = run(
        &g,
        &base,
        &[surging("i-old0", &base, 6, 7)],
        t0() + TimeDelta::minutes(20),
    );
    assert!(matches!(
        command(&plan, "i-old0"),
        Command::Fail {
            undo: Some(Undo::Nothing),
            ..
        }
    ));
}

#[test]
fn a_recorded_undo_is_repeated_and_its_target_is_taken() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-bad1", NEW, 1, false));
    members.push(member("i-bad2", NEW, 2, false));
    let g = group(8, 0, 10);
    // A crashed after recording Failed with its undo of i-bad2 (the newest), before performing it.
    let failed = surging("i-old0", &base, 6, 7)
        .enter(Step::Failed, t0() + TimeDelta::minutes(20))
        .with_release(Release::Undoing(Undo::Terminate {
            instance_id: "i-bad2".into(),
        }));
    let plan = run(
        &g,
        &members,
        &[failed, surging("i-old1", &base, 6, 8)],
        t0() + TimeDelta::minutes(21),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: Undo::Terminate {
                instance_id: "i-bad2".into()
            }
        }
    );
    assert!(matches!(
        command(&plan, "i-old1"),
        Command::Fail { undo: Some(Undo::Terminate { instance_id }), .. } if instance_id == "i-bad1"
    ));
}

#[test]
fn terminating_in_service_decrements_only_with_an_active_surge() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    let g = group(7, 0, 10);
    let with = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base, 6, 7).enter(Step::Terminating, t0())
    };
    let without = rotation("i-old1", Step::Terminating);
    let plan = run(&g, &members, &[with, without], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Terminate { decrement: true }
    );
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Terminate { decrement: false }
    );
    assert_eq!(plan.capacity, None);
}

/// Defect 2: the old instance disappears mid-rotation (Spot reclaim); the surge's unit is
/// given back with the instance Auto Scaling launched in its place, never with the claimed
/// replacement.
#[test]
fn old_instance_gone_mid_rotation_gives_the_surge_back() {
    let base = old_members(6);
    let mut members: Vec<Member> = base.iter().skip(1).cloned().collect(); // i-old0 is gone
    members.push(member("i-new1", NEW, 1, true)); // the claimed replacement
    members.push(member("i-asg", NEW, 30, false)); // launched by Auto Scaling for the lost one
    let g = group(7, 0, 10);
    for step in [Step::Draining, Step::Terminating, Step::Cordoned] {
        let r = Rotation {
            replacement: Some("i-new1".into()),
            ..surging("i-old0", &base, 6, 7).enter(step, t0())
        };
        let plan = run(&g, &members, &[r], t0() + TimeDelta::minutes(31));
        assert_eq!(
            command(&plan, "i-old0"),
            &Command::Finish {
                why: FinishReason::InstanceLeft,
                undo: Some(Undo::Terminate {
                    instance_id: "i-asg".into()
                })
            },
            "{step:?}"
        );
    }
    // Closed as Done by the interruption handler with the unit owed: same undo.
    let closed = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base, 6, 7).enter(Step::Done, t0())
    }
    .with_release(Release::Owed);
    let plan = run(&g, &members, &[closed], t0() + TimeDelta::minutes(31));
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: Undo::Terminate {
                instance_id: "i-asg".into()
            }
        }
    );
    // Before Auto Scaling launched anything: capacity goes back to the base.
    let members: Vec<Member> = members
        .into_iter()
        .filter(|m| m.instance_id != "i-asg")
        .collect();
    let closed = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base, 6, 7).enter(Step::Done, t0())
    }
    .with_release(Release::Owed);
    let plan = run(&g, &members, &[closed], t0() + TimeDelta::minutes(31));
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: Undo::LowerTo { desired: 6 }
        }
    );
}

#[test]
fn own_terminate_recorded_then_instance_leaving_finishes_without_undo() {
    let base = old_members(6);
    let mut members = base.clone();
    members[0].lifecycle = Lifecycle::Leaving;
    let r = surging("i-old0", &base, 6, 7)
        .enter(Step::Terminating, t0())
        .with_release(Release::Undoing(Undo::Terminate {
            instance_id: "i-old0".into(),
        }));
    let plan = run(&group(6, 0, 10), &members, std::slice::from_ref(&r), t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Finish {
            why: FinishReason::Terminated,
            undo: None
        }
    );
    // Still in service: the terminate (with its decrement) is repeated.
    let plan = run(&group(7, 0, 10), &base, &[r], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Terminate { decrement: true }
    );
}

#[test]
fn settled_and_legacy_finished_rotations_get_no_command() {
    let base = old_members(6);
    let given = surging("i-old0", &base, 6, 7)
        .enter(Step::Done, t0())
        .with_release(Release::Given);
    let legacy = surging("i-old1", &base, 6, 7).enter(Step::Failed, t0());
    let plan = run(&group(6, 0, 10), &base, &[given, legacy], t0());
    assert!(plan.commands.is_empty(), "{plan:?}");
}

#[test]
fn capacity_is_repaired_up_to_base_plus_active_surges() {
    let base = old_members(6);
    let g = group(6, 0, 10); // two surges recorded, capacity calls lost
    let a = surging("i-old0", &base, 6, 7);
    let b = surging("i-old1", &base, 6, 8);
    let plan = run(&g, &base, &[a, b], t0() + TimeDelta::minutes(1));
    assert_eq!(plan.capacity, Some(8));
}

#[test]
fn pending_whose_instance_left_finishes() {
    let base = old_members(6);
    let members: Vec<Member> = base.iter().skip(1).cloned().collect();
    let plan = run(
        &group(5, 0, 10),
        &members,
        &[rotation("i-old0", Step::Pending)],
        t0(),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Finish {
            why: FinishReason::InstanceLeft,
            undo: None
        }
    );
}

#[test]
fn rotations_the_plan_does_not_move_get_no_command() {
    let base = old_members(6);
    let view = PoolView {
        group: &group(6, 0, 10),
        members: &base,
        desired_ami: Some(NEW),
    };
    let plan = step_pool(
        &view,
        &[rotation("i-old0", Step::Pending)],
        &BTreeSet::new(),
        t0(),
        &settings(),
    );
    assert!(plan.commands.is_empty());
}

#[test]
fn cancel_gives_back_its_own_replacement_first() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    members.push(member("i-new2", NEW, 2, false));
    let g = group(7, 0, 10);
    let r = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base, 6, 7).enter(Step::Draining, t0())
    };
    let view = PoolView {
        group: &g,
        members: &members,
        desired_ami: Some(NEW),
    };
    assert_eq!(
        cancel(&view, std::slice::from_ref(&r), &r),
        Ok(Some(Undo::Terminate {
            instance_id: "i-new1".into()
        }))
    );
    // Without a claimed replacement: the newest not-Ready instance since the surge.
    let r = surging("i-old0", &base, 6, 7);
    assert_eq!(
        cancel(&view, std::slice::from_ref(&r), &r),
        Ok(Some(Undo::Terminate {
            instance_id: "i-new2".into()
        }))
    );
    let r = rotation("i-old0", Step::Terminating);
    assert_eq!(
        cancel(&view, std::slice::from_ref(&r), &r),
        Err(CancelRefusal::Terminating)
    );
    let r = rotation("i-old0", Step::Cancelled);
    assert_eq!(
        cancel(&view, std::slice::from_ref(&r), &r),
        Err(CancelRefusal::Finished(Step::Cancelled))
    );
}

/// A terminate recorded as under way (its call failed) is repeated in the same pass as a new
/// surge: the new surge counts from the capacity after that terminate.
#[test]
fn a_new_surge_counts_from_the_capacity_after_this_pass_give_backs() {
    let base = old_members(4);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    // Base 4, A surged to 5 and is terminating (its decrement still to come).
    let a = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base, 4, 5).enter(Step::Terminating, t0())
    }
    .with_release(Release::Undoing(Undo::Terminate {
        instance_id: "i-old0".into(),
    }));
    let c = Rotation {
        created_at: t0() + TimeDelta::minutes(5),
        ..rotation("i-old1", Step::Pending)
    };
    let plan = run(
        &group(5, 0, 10),
        &members,
        &[c, a],
        t0() + TimeDelta::minutes(5),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Terminate { decrement: true }
    );
    assert!(
        matches!(
            command(&plan, "i-old1"),
            Command::Surge {
                base: 4,
                target: 5,
                ..
            }
        ),
        "{plan:?}"
    );
    assert_eq!(plan.capacity, Some(5));
}
