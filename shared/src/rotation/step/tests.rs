//! Table tests of the step function: surge accounting by delta beside other writers.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::*;
use crate::fleet::{Group, Lifecycle, Member, NodeStatus};
use crate::rotation::{Rotation, RotationReason, Step, Surge, Undo, UnitRelease};

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
        suspended_processes: Vec::new(),
        do_not_repair: false,
        retained: Vec::new(),
    }
}

/// An in-service member launched `minutes` after t0 (negative: before), Ready or not; its pods
/// are not counted (so a Ready one may run workload).
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
            pods_counted: false,
            marks: Default::default(),
            joined: None,
            conditions: Vec::new(),
            opt_out: None,
        }),
    }
}

/// `m` with its pods counted: `pods` evictable ones.
pub(super) fn counted(mut m: Member, pods: u32) -> Member {
    if let Some(n) = m.node.as_mut() {
        n.pods_counted = true;
        n.evictable_pods = pods;
    }
    m
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

fn surging(id: &str, baseline: &[Member]) -> Rotation {
    Rotation {
        surge: Some(Surge {
            target_desired: 0,
            baseline: ids(baseline),
            base: None,
            read: None,
            above_max: false,
            release: None,
        }),
        ..rotation(id, Step::Surging)
    }
}

/// `r` created `minutes` after t0 (orders rotations).
fn created(r: Rotation, minutes: i64) -> Rotation {
    Rotation {
        created_at: t0() + TimeDelta::minutes(minutes),
        ..r
    }
}

struct Case<'a> {
    group: Group,
    members: &'a [Member],
    may_raise_max: bool,
    problem: Option<LaunchProblem>,
    terminate_first: bool,
}

impl<'a> Case<'a> {
    fn new(group: Group, members: &'a [Member]) -> Self {
        Case {
            group,
            members,
            may_raise_max: false,
            problem: None,
            terminate_first: false,
        }
    }

    fn run(&self, rotations: &[Rotation], now: DateTime<Utc>) -> StepPlan {
        let none = BTreeSet::new();
        let view = PoolView {
            group: &self.group,
            members: self.members,
            desired_ami: Some(NEW),
            quarantined: &none,
            may_raise_max: self.may_raise_max,
            launch_problem: self.problem.as_ref(),
            terminate_first: self.terminate_first,
        };
        let moving: BTreeSet<&str> = rotations
            .iter()
            .filter(|r| r.in_flight())
            .map(|r| r.instance_id.as_str())
            .collect();
        step_pool(&view, rotations, &moving, now, &settings())
    }
}

fn run(group: &Group, members: &[Member], rotations: &[Rotation], now: DateTime<Utc>) -> StepPlan {
    Case::new(group.clone(), members).run(rotations, now)
}

fn command<'a>(plan: &'a StepPlan, id: &str) -> &'a Command {
    &plan
        .commands
        .iter()
        .find(|(i, _)| i == id)
        .unwrap_or_else(|| panic!("no command for {id}: {plan:?}"))
        .1
}

fn terminate(id: &str) -> Undo {
    Undo::Terminate {
        instance_id: id.into(),
    }
}

fn now_undo(id: &str) -> Option<GiveBack> {
    Some(GiveBack::Now {
        undo: terminate(id),
    })
}

fn nothing() -> Option<GiveBack> {
    Some(GiveBack::Now {
        undo: Undo::Nothing,
    })
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

fn names(plan: &StepPlan) -> Vec<(String, &'static str)> {
    plan.commands
        .iter()
        .map(|(i, c)| (i.clone(), c.name()))
        .collect()
}

#[test]
fn pending_surges_one_unit_each_up_to_max_size_then_replaces_without_surge() {
    let members = old_members(6);
    let rotations: Vec<Rotation> = (0..3)
        .map(|i| created(rotation(&format!("i-old{i}"), Step::Pending), i))
        .collect();
    let plan = run(&group(6, 0, 8), &members, &rotations, t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Surge {
            baseline: ids(&members),
            read: 6,
            above_max: false,
        }
    );
    assert!(matches!(
        command(&plan, "i-old1"),
        Command::Surge {
            above_max: false,
            read: 6,
            ..
        }
    ));
    assert_eq!(command(&plan, "i-old2"), &Command::Cordon);
    // Cordons come before surges.
    assert_eq!(plan.commands.last().map(|(_, c)| c.name()), Some("surge"));
    assert_eq!(plan.commands.first().map(|(_, c)| c.name()), Some("cordon"));
    // One below MaxSize: one surge.
    let plan = run(&group(7, 0, 8), &members, &rotations[..2], t0());
    assert_eq!(
        names(&plan),
        vec![("i-old1".into(), "cordon"), ("i-old0".into(), "surge")]
    );
}

#[test]
fn at_max_size_the_policy_may_raise_it_by_one_per_surge() {
    let members = old_members(6);
    let rotations: Vec<Rotation> = (0..2)
        .map(|i| created(rotation(&format!("i-old{i}"), Step::Pending), i))
        .collect();
    let mut case = Case::new(group(6, 0, 6), &members);
    let plan = case.run(&rotations, t0());
    assert!(
        plan.commands.iter().all(|(_, c)| *c == Command::Cordon),
        "{plan:?}"
    );
    case.may_raise_max = true;
    let plan = case.run(&rotations, t0());
    for id in ["i-old0", "i-old1"] {
        assert!(
            matches!(
                command(&plan, id),
                Command::Surge {
                    above_max: true,
                    ..
                }
            ),
            "{plan:?}"
        );
    }
    // Room for one under MaxSize: the first surge fits, the second raises MaxSize.
    let case = Case {
        may_raise_max: true,
        ..Case::new(group(5, 0, 6), &members[..5])
    };
    let plan = case.run(&rotations, t0());
    assert!(matches!(
        command(&plan, "i-old0"),
        Command::Surge {
            above_max: false,
            ..
        }
    ));
    assert!(matches!(
        command(&plan, "i-old1"),
        Command::Surge {
            above_max: true,
            ..
        }
    ));
}

#[test]
fn surging_claims_distinct_ready_replacements_on_the_desired_ami() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-other", OLD, 0, true)); // launched since, on another AMI
    members.push(member("i-new2", NEW, 2, true));
    members.push(member("i-new1", NEW, 1, true));
    let rotations = vec![
        created(surging("i-old0", &base), 0),
        created(surging("i-old1", &base), 1),
    ];
    let plan = run(
        &group(8, 0, 10),
        &members,
        &rotations,
        t0() + TimeDelta::minutes(5),
    );
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
    let want: BTreeSet<String> = ["i-new1".into(), "i-new2".into()].into();
    assert_eq!(plan.protect, want, "claimed replacements are protected");
}

/// Scenario 1 of the issue: Cluster Autoscaler scaled up by 2 after the surges (8 -> 10).
/// The surges claim their own launches (the earliest) and raise nothing.
#[test]
fn another_writers_scale_up_is_not_mistaken_for_a_missing_surge() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-s1", NEW, 1, true));
    members.push(member("i-s2", NEW, 1, false));
    members.push(member("i-ca1", NEW, 5, true));
    members.push(member("i-ca2", NEW, 5, true));
    let rotations = vec![
        created(surging("i-old0", &base), 0),
        created(surging("i-old1", &base), 1),
    ];
    let plan = run(
        &group(10, 0, 12),
        &members,
        &rotations,
        t0() + TimeDelta::minutes(6),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::ClaimReplacement { id: "i-s1".into() }
    );
    // The older ready ones claimed; none is raised.
    assert!(plan.commands.iter().all(|(_, c)| !c.raises()), "{plan:?}");
}

#[test]
fn a_launched_replacement_waits_from_its_launch_and_fails_only_after_the_timeout() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 10, false)); // launched 10 minutes after the surge
    let g = group(7, 0, 10);
    let r = surging("i-old0", &base);
    let plan = run(
        &g,
        &members,
        std::slice::from_ref(&r),
        t0() + TimeDelta::minutes(29),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Wait {
            why: WaitReason::Replacement {
                since: t0() + TimeDelta::minutes(10),
                instance: "i-new1".into()
            }
        }
    );
    assert!(plan.protect.contains("i-new1"), "a surge node is protected");
    let plan = run(
        &g,
        &members,
        std::slice::from_ref(&r),
        t0() + TimeDelta::minutes(30),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Fail {
            why: Failure::ReplacementNotReady {
                instance_id: "i-old0".into(),
                timeout: settings().replacement_timeout,
                image: Some(NEW.into()),
                fresh: vec!["i-new1".into()],
            },
            halt: true,
            quarantine: true,
            undo: now_undo("i-new1"),
        }
    );
    assert!(
        plan.protect.is_empty(),
        "a failed rotation protects nothing"
    );
    // Launched before the surge started (clocks): counts from the surge.
    let mut early = base.clone();
    early.push(member("i-new1", NEW, -5, false));
    let plan = run(
        &g,
        &early,
        std::slice::from_ref(&r),
        t0() + TimeDelta::minutes(20),
    );
    assert!(
        matches!(command(&plan, "i-old0"), Command::Fail { .. }),
        "{plan:?}"
    );
    let plan = run(
        &g,
        &early,
        std::slice::from_ref(&r),
        t0() + TimeDelta::minutes(19),
    );
    assert!(
        matches!(command(&plan, "i-old0"), Command::Wait { .. }),
        "{plan:?}"
    );
    // A launch time after the pass's clock counts from the surge.
    let mut future = base.clone();
    future.push(member("i-new1", NEW, 60, false));
    let plan = run(
        &g,
        &future,
        std::slice::from_ref(&r),
        t0() + TimeDelta::minutes(20),
    );
    assert!(
        matches!(command(&plan, "i-old0"), Command::Fail { .. }),
        "{plan:?}"
    );
    let plan = run(
        &g,
        &future,
        std::slice::from_ref(&r),
        t0() + TimeDelta::minutes(19),
    );
    assert!(
        matches!(command(&plan, "i-old0"), Command::Wait { .. }),
        "{plan:?}"
    );
}

#[test]
fn wait_start_is_the_later_of_surge_and_launch_unless_the_launch_is_in_the_future() {
    let (a, b, c) = (
        t0(),
        t0() + TimeDelta::minutes(5),
        t0() + TimeDelta::minutes(10),
    );
    assert_eq!(wait_start(a, b, c), b);
    assert_eq!(wait_start(b, a, c), b);
    assert_eq!(wait_start(a, c, b), a, "launch after now");
    assert_eq!(wait_start(a, c, c), c, "launch at now");
}

/// A launch that never comes (capacity, MaxSize, InsufficientInstanceCapacity) is not a bad
/// release: the surge waits with the group's reason, past any timeout, and never fails.
#[test]
fn a_pending_launch_waits_with_its_reason_and_never_fails() {
    let base = old_members(6);
    let case = Case {
        problem: Some(LaunchProblem {
            message: "Launching a new EC2 instance. Status Reason: InsufficientInstanceCapacity"
                .into(),
            at: None,
        }),
        ..Case::new(group(7, 0, 10), &base)
    };
    let plan = case.run(&[surging("i-old0", &base)], t0() + TimeDelta::hours(5));
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Wait {
            why: WaitReason::Launch {
                since: t0(),
                problem: case.problem.as_ref().map(|p| p.message.clone()),
            }
        }
    );
}

/// No instance and no pending launch: the +1 never happened (crash, failed call) or another
/// writer took it (CA removed the empty surge node): raised again by one per surge.
#[test]
fn a_surge_without_supply_is_raised_again_by_one() {
    let base = old_members(6);
    let a = created(surging("i-old0", &base), 0);
    let b = created(surging("i-old1", &base), 1);
    let rotations = [a, b];
    let plan = run(
        &group(6, 0, 10),
        &base,
        &rotations,
        t0() + TimeDelta::minutes(1),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Raise { above_max: false }
    );
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Raise { above_max: false }
    );
    // One pending launch: the older surge waits for it, the other is raised.
    let plan = run(
        &group(7, 0, 10),
        &base,
        &rotations,
        t0() + TimeDelta::minutes(1),
    );
    assert!(matches!(command(&plan, "i-old0"), Command::Wait { .. }));
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Raise { above_max: false }
    );
    // One launched: same.
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, false));
    let plan = run(
        &group(7, 0, 10),
        &members,
        &rotations,
        t0() + TimeDelta::minutes(1),
    );
    assert!(matches!(command(&plan, "i-old0"), Command::Wait { .. }));
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Raise { above_max: false }
    );
    // A leaving instance is not supply, and leaves no pending launch behind.
    let mut leaving = members.clone();
    leaving[6].lifecycle = Lifecycle::Leaving;
    let plan = run(
        &group(6, 0, 10),
        &leaving,
        &rotations,
        t0() + TimeDelta::minutes(1),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Raise { above_max: false }
    );
    // At MaxSize: raised above it with permission, else the surge is dropped.
    let plan = run(
        &group(6, 0, 7),
        &base,
        &rotations,
        t0() + TimeDelta::minutes(1),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Raise { above_max: false }
    );
    assert_eq!(command(&plan, "i-old1"), &Command::DropSurge);
    let case = Case {
        may_raise_max: true,
        ..Case::new(group(6, 0, 6), &base)
    };
    let plan = case.run(&rotations, t0() + TimeDelta::minutes(1));
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Raise { above_max: true }
    );
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Raise { above_max: true }
    );
}

/// Defect 1 of the rotation-core issue: two rotations time out in the same pass; each undoes
/// its surge with its own never-Ready instance.
#[test]
fn two_timeouts_in_one_pass_undo_two_distinct_instances() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-bad1", NEW, 1, false));
    members.push(member("i-bad2", NEW, 1, false));
    let rotations = vec![
        created(surging("i-old0", &base), 0),
        created(surging("i-old1", &base), 1),
    ];
    let plan = run(
        &group(8, 0, 10),
        &members,
        &rotations,
        t0() + TimeDelta::minutes(21),
    );
    for id in ["i-old0", "i-old1"] {
        assert!(
            matches!(
                command(&plan, id),
                Command::Fail {
                    halt: true,
                    undo: Some(GiveBack::Now {
                        undo: Undo::Terminate { .. }
                    }),
                    ..
                }
            ),
            "{plan:?}"
        );
    }
    let mut gone = terminated(&plan);
    gone.sort();
    assert_eq!(gone, vec!["i-bad1", "i-bad2"]);
}

/// A failing rotation gives back the bad instance matched with its own surge, not a newer
/// not-Ready instance another surge (or Cluster Autoscaler) launched, which the other
/// rotation, failing in the same pass, gives back.
#[test]
fn a_failure_gives_back_its_own_bad_instance_first() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-bad-own", NEW, 1, false));
    members.push(member("i-bad-other", NEW, 2, false));
    members.push(member("i-bad-ca", NEW, 3, false));
    let rotations = vec![
        created(surging("i-old0", &base), 0),
        created(surging("i-old1", &base), 1),
    ];
    let plan = run(
        &group(9, 0, 10),
        &members,
        &rotations,
        t0() + TimeDelta::minutes(23),
    );
    let undo_of = |id: &str| match command(&plan, id) {
        Command::Fail { undo, .. } => undo.clone(),
        c => panic!("{id}: {c:?}"),
    };
    assert_eq!(undo_of("i-old0"), now_undo("i-bad-own"), "{plan:?}");
    assert_eq!(undo_of("i-old1"), now_undo("i-bad-other"), "{plan:?}");
}

#[test]
fn a_recorded_undo_is_repeated_and_its_target_is_taken() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-bad1", NEW, 1, false));
    members.push(member("i-bad2", NEW, 2, false));
    // Crashed after recording Failed with its undo of i-bad2, before performing it.
    let failed = surging("i-old0", &base)
        .enter(Step::Failed, t0() + TimeDelta::minutes(20))
        .with_release(UnitRelease::Undoing(terminate("i-bad2")));
    let plan = run(
        &group(8, 0, 10),
        &members,
        &[failed, created(surging("i-old1", &base), 1)],
        t0() + TimeDelta::minutes(22),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: terminate("i-bad2")
        }
    );
    assert!(matches!(
        command(&plan, "i-old1"),
        Command::Fail { undo: Some(GiveBack::Now { undo: Undo::Terminate { instance_id } }), .. } if instance_id == "i-bad1"
    ));
}

#[test]
fn a_legacy_lower_to_record_is_settled_as_nothing_and_never_lowers() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-idle", NEW, 1, false));
    let legacy = surging("i-old0", &base)
        .enter(Step::Failed, t0())
        .with_release(UnitRelease::Undoing(Undo::LowerTo { desired: 6 }));
    let plan = run(&group(8, 0, 10), &members, &[legacy], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: Undo::Nothing
        }
    );
    // And the old record still reads.
    let json = serde_json::json!({"undo": "lowerTo", "desired": 6});
    let undo: Undo = serde_json::from_value(json).unwrap_or(Undo::Nothing);
    assert_eq!(undo, Undo::LowerTo { desired: 6 });
}

#[test]
fn terminating_in_service_decrements_only_with_an_active_surge() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    let with = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base).enter(Step::Terminating, t0())
    };
    let given = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old2", &base).enter(Step::Terminating, t0())
    }
    .with_release(UnitRelease::Given);
    let without = rotation("i-old1", Step::Terminating);
    let plan = run(&group(7, 0, 10), &members, &[with, without, given], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Terminate {
            decrement: true,
            relaunch: false,
        }
    );
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Terminate {
            decrement: false,
            relaunch: true,
        },
        "no surge: the group relaunches (terminate-first)"
    );
    assert_eq!(
        command(&plan, "i-old2"),
        &Command::Terminate {
            decrement: false,
            relaunch: false,
        }
    );
    let want: BTreeSet<String> = ["i-old0", "i-old1", "i-old2"].map(String::from).into();
    assert_eq!(plan.draining, want);
    assert!(
        plan.protect.is_empty(),
        "the rotation ends: its replacement is released"
    );
}

/// The old instance disappears mid-rotation (Spot reclaim); the unit is given back only with
/// an instance known to run no workload, never with the claimed replacement.
#[test]
fn old_instance_gone_mid_rotation_gives_the_surge_back_with_a_podless_instance() {
    let base = old_members(6);
    let mut members: Vec<Member> = base.iter().skip(1).cloned().collect(); // i-old0 is gone
    members.push(member("i-new1", NEW, 1, true)); // the claimed replacement
    members.push(member("i-asg", NEW, 30, false)); // launched by Auto Scaling for the lost one
    let g = group(7, 0, 10);
    for step in [Step::Draining, Step::Terminating, Step::Cordoned] {
        let r = Rotation {
            replacement: Some("i-new1".into()),
            ..surging("i-old0", &base).enter(step, t0())
        };
        let plan = run(&g, &members, &[r], t0() + TimeDelta::minutes(31));
        assert_eq!(
            command(&plan, "i-old0"),
            &Command::Finish {
                why: FinishReason::InstanceLeft,
                undo: now_undo("i-asg"),
            },
            "{step:?}"
        );
    }
    let closed = || {
        Rotation {
            replacement: Some("i-new1".into()),
            ..surging("i-old0", &base).enter(Step::Done, t0())
        }
        .with_release(UnitRelease::Owed)
    };
    let plan = run(&g, &members, &[closed()], t0() + TimeDelta::minutes(31));
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: terminate("i-asg")
        }
    );
    // i-asg Ready and running pods (or not counted): not a target; nothing else is.
    for busy in [
        member("i-asg", NEW, 30, true),
        counted(member("i-asg", NEW, 30, true), 2),
    ] {
        let mut with_pods = members.clone();
        with_pods.pop();
        with_pods.push(busy);
        let plan = run(&g, &with_pods, &[closed()], t0() + TimeDelta::minutes(31));
        assert_eq!(
            command(&plan, "i-old0"),
            &Command::UndoSurge {
                undo: Undo::Nothing
            },
            "{with_pods:?}"
        );
    }
    // Ready and counted podless: a target.
    let mut idle = members.clone();
    idle.pop();
    idle.push(counted(member("i-asg", NEW, 30, true), 0));
    let plan = run(&g, &idle, &[closed()], t0() + TimeDelta::minutes(31));
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: terminate("i-asg")
        }
    );
    // Before Auto Scaling launched anything: the launch is pending, the unit stays owed.
    let launching: Vec<Member> = members
        .iter()
        .filter(|m| m.instance_id != "i-asg")
        .cloned()
        .collect();
    let plan = run(&group(7, 0, 10), &launching, &[closed()], t0());
    assert!(
        plan.commands.is_empty(),
        "owed until the launch comes: {plan:?}"
    );
    let r = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base).enter(Step::Draining, t0())
    };
    let plan = run(&group(7, 0, 10), &launching, &[r], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Finish {
            why: FinishReason::InstanceLeft,
            undo: Some(GiveBack::Later),
        }
    );
    // Nothing pending (someone else took the unit): nothing to give back; never lowered.
    let plan = run(&group(6, 0, 10), &launching, &[closed()], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: Undo::Nothing
        }
    );
}

#[test]
fn the_undo_target_is_not_ready_first_then_newest_then_by_id() {
    let base = old_members(2);
    let owed = || {
        surging("i-old0", &base)
            .enter(Step::Failed, t0())
            .with_release(UnitRelease::Owed)
    };
    let pick = |fresh: Vec<Member>| {
        let mut members = base.clone();
        members.extend(fresh);
        let plan = run(&group(4, 0, 10), &members, &[owed()], t0());
        terminated(&plan)
    };
    let idle = |id: &str, minutes: i64| counted(member(id, NEW, minutes, true), 0);
    assert_eq!(
        pick(vec![idle("i-a", 5), member("i-b", NEW, 1, false)]),
        vec!["i-b"],
        "not Ready first"
    );
    assert_eq!(
        pick(vec![idle("i-a", 1), idle("i-b", 5)]),
        vec!["i-b"],
        "newest"
    );
    assert_eq!(
        pick(vec![idle("i-b", 5), idle("i-a", 5)]),
        vec!["i-a"],
        "by id"
    );
    assert_eq!(
        pick(vec![member("i-own", NEW, 5, false), idle("i-a", 5)])
            .first()
            .map(String::as_str),
        Some("i-own")
    );
    // Its own old instance and a leaving instance are never targets.
    let mut members = base.clone();
    members.push(Member {
        lifecycle: Lifecycle::Leaving,
        ..member("i-gone", NEW, 5, false)
    });
    let plan = run(&group(2, 0, 10), &members, &[owed()], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: Undo::Nothing
        }
    );
}

#[test]
fn own_terminate_recorded_then_instance_leaving_finishes_without_undo() {
    let base = old_members(6);
    let mut members = base.clone();
    members[0].lifecycle = Lifecycle::Leaving;
    let r = surging("i-old0", &base)
        .enter(Step::Terminating, t0())
        .with_release(UnitRelease::Undoing(terminate("i-old0")));
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
        &Command::Terminate {
            decrement: true,
            relaunch: false,
        }
    );
}

#[test]
fn settled_and_legacy_finished_rotations_get_no_command() {
    let base = old_members(6);
    let given = surging("i-old0", &base)
        .enter(Step::Done, t0())
        .with_release(UnitRelease::Given);
    let legacy = surging("i-old1", &base).enter(Step::Failed, t0());
    let plan = run(&group(6, 0, 10), &base, &[given, legacy], t0());
    assert!(plan.commands.is_empty(), "{plan:?}");
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

/// A rotation the planner does not advance keeps what it holds: its launched instance is
/// neither claimed by another surge nor chosen as an undo target, and stays protected.
#[test]
fn rotations_the_plan_does_not_move_get_no_command_but_keep_their_instance() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    let held = created(surging("i-old0", &base), 0);
    let moving_one = created(surging("i-old1", &base), 1);
    let g = group(7, 0, 10);
    let none = BTreeSet::new();
    let view = PoolView {
        group: &g,
        members: &members,
        desired_ami: Some(NEW),
        quarantined: &none,
        may_raise_max: false,
        launch_problem: None,
        terminate_first: false,
    };
    let moving: BTreeSet<&str> = ["i-old1"].into();
    let plan = step_pool(&view, &[held, moving_one], &moving, t0(), &settings());
    assert_eq!(names(&plan), vec![("i-old1".into(), "raise")]);
    assert!(plan.protect.contains("i-new1"));
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
fn cancel_is_refused_only_when_terminating_or_finished() {
    for step in [Step::Pending, Step::Surging, Step::Cordoned, Step::Draining] {
        assert_eq!(cancel(&rotation("i-1", step)), Ok(()), "{step:?}");
    }
    assert_eq!(
        cancel(&rotation("i-1", Step::Terminating)),
        Err(CancelRefusal::Terminating)
    );
    for step in [Step::Done, Step::Failed, Step::Cancelled] {
        assert_eq!(
            cancel(&rotation("i-1", step)),
            Err(CancelRefusal::Finished(step))
        );
    }
}

/// A terminate with a decrement in the same pass makes room under MaxSize for a new surge.
#[test]
fn a_new_surge_counts_from_the_capacity_after_this_pass_give_backs() {
    let base = old_members(4);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    let a = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base).enter(Step::Terminating, t0())
    }
    .with_release(UnitRelease::Undoing(terminate("i-old0")));
    let c = created(rotation("i-old1", Step::Pending), 5);
    let plan = run(&group(5, 0, 5), &members, &[c.clone(), a.clone()], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Terminate {
            decrement: true,
            relaunch: false,
        }
    );
    assert!(
        matches!(
            command(&plan, "i-old1"),
            Command::Surge {
                above_max: false,
                ..
            }
        ),
        "{plan:?}"
    );
    // Already leaving: no decrement to come, no room.
    let mut leaving = members.clone();
    leaving[0].lifecycle = Lifecycle::Leaving;
    let plan = run(&group(5, 0, 5), &leaving, &[c.clone(), a], t0());
    assert_eq!(command(&plan, "i-old1"), &Command::Cordon);
    // A recorded undo of another instance still in the group also makes room.
    let mut with_bad = base.clone();
    with_bad.push(member("i-bad", NEW, 1, false));
    let failed = surging("i-old2", &base)
        .enter(Step::Failed, t0())
        .with_release(UnitRelease::Undoing(terminate("i-bad")));
    let plan = run(
        &group(5, 0, 5),
        &with_bad,
        &[c.clone(), failed.clone()],
        t0(),
    );
    assert!(
        matches!(command(&plan, "i-old1"), Command::Surge { .. }),
        "{plan:?}"
    );
    // ... but not once it left.
    with_bad[4].lifecycle = Lifecycle::Leaving;
    let plan = run(&group(5, 0, 5), &with_bad, &[c.clone(), failed], t0());
    assert_eq!(command(&plan, "i-old1"), &Command::Cordon);
    // A chosen undo makes room too (a failed rotation's own bad instance).
    let mut bad = base.clone();
    bad.push(member("i-bad", NEW, 1, false));
    let timing_out = surging("i-old2", &base);
    let plan = run(
        &group(5, 0, 5),
        &bad,
        &[c, timing_out],
        t0() + TimeDelta::minutes(21),
    );
    assert!(matches!(command(&plan, "i-old2"), Command::Fail { .. }));
    assert!(
        matches!(command(&plan, "i-old1"), Command::Surge { .. }),
        "{plan:?}"
    );
}

/// Rotations towards an AMI that is quarantined meanwhile stop: the node is uncordoned, the
/// surge given back with the rotation's own replacement when it runs no workload.
#[test]
fn rotations_towards_a_quarantined_ami_are_cancelled() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(counted(member("i-new1", NEW, 1, true), 0));
    members.push(member("i-new2", NEW, 2, false));
    members.push(counted(member("i-busy", NEW, 3, true), 3));
    let g = group(9, 0, 10);
    let target = |r: Rotation| Rotation {
        target: Some(NEW.into()),
        ..r
    };
    let draining = target(created(
        Rotation {
            replacement: Some("i-new1".into()),
            ..surging("i-old0", &base).enter(Step::Draining, t0())
        },
        0,
    ));
    let waiting = target(created(surging("i-old1", &base), 1));
    let terminating = target(rotation("i-old2", Step::Terminating));
    let busy = target(created(
        Rotation {
            replacement: Some("i-busy".into()),
            ..surging("i-old3", &base).enter(Step::Draining, t0())
        },
        3,
    ));
    let quarantined: BTreeSet<String> = [NEW.to_string()].into();
    let view = PoolView {
        group: &g,
        members: &members,
        desired_ami: Some(OLD),
        quarantined: &quarantined,
        may_raise_max: false,
        launch_problem: None,
        terminate_first: false,
    };
    let rotations = [draining, waiting, terminating, busy];
    let moving: BTreeSet<&str> = rotations.iter().map(|r| r.instance_id.as_str()).collect();
    let plan = step_pool(&view, &rotations, &moving, t0(), &settings());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Cancel {
            image: NEW.into(),
            uncordon: true,
            undo: now_undo("i-new1"),
        }
    );
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Cancel {
            image: NEW.into(),
            uncordon: false,
            undo: now_undo("i-new2"),
        }
    );
    assert!(matches!(
        command(&plan, "i-old2"),
        Command::Terminate { .. }
    ));
    // Its replacement runs workload: never terminated undrained.
    assert_eq!(
        command(&plan, "i-old3"),
        &Command::Cancel {
            image: NEW.into(),
            uncordon: true,
            undo: nothing(),
        }
    );
}

#[test]
fn command_names_and_give_backs() {
    let cases = [
        (Command::Raise { above_max: false }, "raise", true),
        (Command::DropSurge, "dropSurge", false),
        (Command::Cordon, "cordon", false),
        (Command::DrainStep, "drainStep", false),
        (
            Command::Terminate {
                decrement: true,
                relaunch: false,
            },
            "terminate",
            false,
        ),
        (
            Command::UndoSurge {
                undo: Undo::Nothing,
            },
            "undoSurge",
            false,
        ),
        (
            Command::ClaimReplacement { id: "i".into() },
            "claimReplacement",
            false,
        ),
    ];
    for (c, name, raises) in cases {
        assert_eq!(c.name(), name);
        assert_eq!(c.raises(), raises, "{name}");
    }
    let finish = Command::Finish {
        why: FinishReason::InstanceLeft,
        undo: Some(GiveBack::Later),
    };
    assert_eq!(finish.give_back(), Some(GiveBack::Later));
    assert_eq!(finish.undo(), None);
    let undo = Command::UndoSurge {
        undo: terminate("i"),
    };
    assert_eq!(undo.undo(), Some(&terminate("i")));
    assert_eq!(undo.give_back(), now_undo("i"));
    assert_eq!(Command::Cordon.give_back(), None);
}

/// At MinSize (Cluster Autoscaler scaled the group down to it while a surge was active) a
/// terminate goes without a decrement and nothing is given back: Auto Scaling refuses a
/// decrement below MinSize, which would leave the rotation retrying forever.
#[test]
fn at_min_size_nothing_is_decremented() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    members.push(counted(member("i-spare", NEW, 2, true), 0));
    let terminating = Rotation {
        replacement: Some("i-new1".into()),
        ..surging("i-old0", &base).enter(Step::Terminating, t0())
    };
    let owed = surging("i-old1", &base)
        .enter(Step::Done, t0())
        .with_release(UnitRelease::Owed);
    let recorded = surging("i-old2", &base)
        .enter(Step::Failed, t0())
        .with_release(UnitRelease::Undoing(terminate("i-spare")));
    let rotations = [terminating, owed, recorded];
    let at_min = run(&group(8, 8, 10), &members, &rotations, t0());
    assert_eq!(
        command(&at_min, "i-old0"),
        &Command::Terminate {
            decrement: false,
            relaunch: false,
        },
        "{at_min:?}"
    );
    for id in ["i-old1", "i-old2"] {
        assert_eq!(
            command(&at_min, id),
            &Command::UndoSurge {
                undo: Undo::Nothing
            },
            "{id}: {at_min:?}"
        );
    }
    // One above MinSize: one decrement, the first in order (the in-flight terminate); the
    // give-backs after it find the group at MinSize.
    let above = run(&group(9, 8, 10), &members, &rotations, t0());
    assert_eq!(
        command(&above, "i-old0"),
        &Command::Terminate {
            decrement: true,
            relaunch: false,
        }
    );
    assert!(terminated(&above).is_empty(), "{above:?}");
    // Two above: the recorded undo is repeated too (the owed unit, with no spare left, waits
    // for the launch desired capacity still owes).
    let two = run(&group(10, 8, 10), &members, &rotations, t0());
    assert_eq!(
        command(&two, "i-old0"),
        &Command::Terminate {
            decrement: true,
            relaunch: false,
        }
    );
    assert_eq!(terminated(&two), vec!["i-spare".to_string()], "{two:?}");
}

/// A give-back with a fresh podless instance (not the rotation's own) makes room for a
/// surge of the same pass at MaxSize; two owed units share one pending launch: the first
/// waits for it, the second has nothing to give back.
#[test]
fn give_backs_count_in_the_capacity_of_the_same_pass() {
    let base = old_members(4);
    let mut members = base.clone();
    members.push(counted(member("i-spare", NEW, 1, true), 0));
    let owed = surging("i-old0", &base)
        .enter(Step::Done, t0())
        .with_release(UnitRelease::Owed);
    let pending = created(rotation("i-old1", Step::Pending), 5);
    let plan = run(
        &group(5, 0, 5),
        &members,
        &[owed.clone(), pending.clone()],
        t0(),
    );
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::UndoSurge {
            undo: terminate("i-spare")
        }
    );
    assert!(
        matches!(
            command(&plan, "i-old1"),
            Command::Surge {
                above_max: false,
                ..
            }
        ),
        "the give-back made room: {plan:?}"
    );
    // Two owed units, one pending launch (desired 5, 4 instances).
    let owed2 = created(
        surging("i-old2", &base)
            .enter(Step::Done, t0())
            .with_release(UnitRelease::Owed),
        1,
    );
    let plan = run(&group(5, 0, 6), &base, &[owed, owed2], t0());
    assert!(
        plan.commands.iter().all(|(id, _)| id != "i-old0"),
        "the first waits for the pending launch: {plan:?}"
    );
    assert_eq!(
        command(&plan, "i-old2"),
        &Command::UndoSurge {
            undo: Undo::Nothing
        }
    );
}

/// A cancelled rotation's owed unit goes with its own podless replacement first, even when a
/// not-Ready podless instance would sort first; a done rotation's replacement serves and is
/// never its undo target.
#[test]
fn settling_prefers_the_own_replacement_only_for_unfinished_work() {
    let base = old_members(4);
    let mut members = base.clone();
    members.push(counted(member("i-rep", NEW, 1, true), 0));
    members.push(member("i-other", NEW, 2, false));
    let cancelled = Rotation {
        replacement: Some("i-rep".into()),
        ..surging("i-old0", &base).enter(Step::Cancelled, t0())
    }
    .with_release(UnitRelease::Owed);
    let plan = run(&group(6, 0, 8), &members, &[cancelled], t0());
    assert_eq!(terminated(&plan), vec!["i-rep".to_string()], "{plan:?}");
    let done = Rotation {
        replacement: Some("i-rep".into()),
        ..surging("i-old0", &base).enter(Step::Done, t0())
    }
    .with_release(UnitRelease::Owed);
    let plan = run(&group(6, 0, 8), &members, &[done], t0());
    assert_eq!(terminated(&plan), vec!["i-other".to_string()], "{plan:?}");
}

/// A rotation the plan does not move, past `Surging` with an active surge but no claimed
/// replacement (a record no step writes; legacy), holds no launched instance: the instance
/// stays free for the surge that launched it.
#[test]
fn only_an_unclaimed_surging_rotation_holds_a_launched_instance() {
    let base = old_members(4);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, false));
    let odd = surging("i-old0", &base).enter(Step::Draining, t0());
    let waiting = created(surging("i-old1", &base), 1);
    let none = BTreeSet::new();
    let view = PoolView {
        group: &group(6, 0, 8),
        members: &members,
        desired_ami: Some(NEW),
        quarantined: &none,
        may_raise_max: false,
        launch_problem: None,
        terminate_first: false,
    };
    let moving: BTreeSet<&str> = ["i-old1"].into();
    let plan = step_pool(&view, &[odd, waiting], &moving, t0(), &settings());
    assert!(
        matches!(
            command(&plan, "i-old1"),
            Command::Wait {
                why: WaitReason::Replacement { instance, .. }
            } if instance == "i-new1"
        ),
        "{plan:?}"
    );
}

#[test]
fn entering_a_step_clears_the_error() {
    let r = Rotation {
        error: Some("drain blocked".into()),
        ..rotation("i-old0", Step::Draining)
    };
    let next = r.enter(Step::Terminating, t0() + TimeDelta::minutes(1));
    assert_eq!(next.error, None);
    assert_eq!(next.step, Step::Terminating);
    assert_eq!(next.step_at, t0() + TimeDelta::minutes(1));
}

/// A raise above MaxSize counts in the pass's capacity: a decrement after it in the same pass
/// brings the group back to MaxSize only, so a new surge still needs a raise above it.
#[test]
fn a_raise_above_max_size_counts_for_later_surges_of_the_pass() {
    let base = old_members(4);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 1, true));
    let raising = created(surging("i-old0", &base), 0);
    let terminating = created(
        Rotation {
            replacement: Some("i-new1".into()),
            ..surging("i-old1", &base).enter(Step::Terminating, t0())
        },
        1,
    );
    let pending = created(rotation("i-old2", Step::Pending), 2);
    let mut case = Case::new(group(5, 0, 5), &members);
    case.may_raise_max = true;
    // i-new1 is the terminating rotation's replacement: the surging one has no supply.
    let plan = case.run(&[raising, terminating, pending], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Raise { above_max: true },
        "{plan:?}"
    );
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Terminate {
            decrement: true,
            relaunch: false,
        }
    );
    assert!(
        matches!(
            command(&plan, "i-old2"),
            Command::Surge {
                above_max: true,
                ..
            }
        ),
        "{plan:?}"
    );
}

/// Only old instances being cordoned, drained or terminated are `draining` (their nodes leave
/// external load balancers); a surge, a wait for a replacement, an end or a give-back is not.
#[test]
fn draining_is_the_old_instances_on_their_way_out_only() {
    let base = old_members(6);
    let mut members = base.clone();
    members.push(counted(member("i-new1", NEW, 1, false), 0));
    let gone = |r: Rotation| Rotation {
        instance_id: "i-gone".into(),
        ..r
    };
    // (rotation of i-old0 unless renamed, group (desired, max), command, draining).
    let cases: Vec<(Rotation, (i32, i32), &str, bool)> = vec![
        (rotation("i-old0", Step::Pending), (7, 10), "surge", false),
        (rotation("i-old0", Step::Pending), (7, 7), "cordon", true),
        (surging("i-old0", &base), (8, 10), "wait", false),
        (surging("i-old0", &members), (8, 10), "wait", false),
        (rotation("i-old0", Step::Cordoned), (7, 10), "cordon", true),
        (
            rotation("i-old0", Step::Draining),
            (7, 10),
            "drainStep",
            true,
        ),
        (
            gone(rotation("i-old0", Step::Draining)),
            (7, 10),
            "finish",
            false,
        ),
        (
            rotation("i-old0", Step::Terminating),
            (7, 10),
            "terminate",
            true,
        ),
        (
            surging("i-old0", &base)
                .enter(Step::Done, t0())
                .with_release(UnitRelease::Owed),
            (7, 10),
            "undoSurge",
            false,
        ),
    ];
    for (i, (r, (desired, max), name, draining)) in cases.into_iter().enumerate() {
        let id = r.instance_id.clone();
        let plan = run(&group(desired, 0, max), &members, &[r], t0());
        assert_eq!(command(&plan, &id).name(), name, "case {i}: {plan:?}");
        assert_eq!(
            plan.draining.contains(&id),
            draining,
            "case {i} ({name}): {plan:?}"
        );
        assert!(
            plan.draining.iter().all(|d| *d == id),
            "case {i}: only the rotation's own instance"
        );
    }
}

/// The failure names what went wrong (the quarantine's reason) and its display what nodecycle
/// did about it; a wait says what it waits for.
#[test]
fn failures_and_waits_say_what_and_why() {
    let failure = |image: Option<&str>, fresh: &[&str]| Failure::ReplacementNotReady {
        instance_id: "i-old0".into(),
        timeout: Duration::from_secs(20 * 60),
        image: image.map(str::to_string),
        fresh: fresh.iter().map(|s| s.to_string()).collect(),
    };
    let f = failure(Some(NEW), &["i-new1", "i-new2"]);
    let what = f.what();
    for part in ["i-old0", "20m", NEW, "i-new1, i-new2"] {
        assert!(what.contains(part), "{what:?} names {part}");
    }
    let shown = f.to_string();
    assert!(shown.starts_with(&what), "{shown:?}");
    assert!(
        shown.contains("surge undone") && shown.contains("pool halted"),
        "{shown:?}"
    );
    let unresolved = failure(None, &[]).what();
    assert!(
        unresolved.contains("an unresolved AMI") && unresolved.contains("none"),
        "{unresolved:?}"
    );
    let waits = [
        (
            WaitReason::Replacement {
                since: t0(),
                instance: "i-new1".into(),
            },
            vec!["i-new1", "not Ready"],
        ),
        (
            WaitReason::Launch {
                since: t0(),
                problem: Some("InsufficientInstanceCapacity".into()),
            },
            vec!["launch", "InsufficientInstanceCapacity"],
        ),
        (
            WaitReason::Launch {
                since: t0(),
                problem: None,
            },
            vec!["launch", "pending"],
        ),
    ];
    for (w, parts) in waits {
        let shown = w.to_string();
        for part in parts {
            assert!(shown.contains(part), "{shown:?} names {part}");
        }
    }
}

/// Only a replacement known to run the desired AMI counts against the release: one whose image
/// is not known yet (EC2 has not said) waits past the timeout, it does not fail the rotation.
#[test]
fn a_replacement_of_unknown_image_never_fails_the_rotation() {
    let base = old_members(6);
    let mut members = base.clone();
    let mut unknown = member("i-new1", NEW, 1, false);
    unknown.image_id = None;
    members.push(unknown);
    let r = surging("i-old0", &base);
    for minutes in [19, 21, 600] {
        let plan = run(
            &group(7, 0, 10),
            &members,
            std::slice::from_ref(&r),
            t0() + TimeDelta::minutes(minutes),
        );
        assert_eq!(
            command(&plan, "i-old0"),
            &Command::Wait {
                why: WaitReason::Replacement {
                    since: t0() + TimeDelta::minutes(1),
                    instance: "i-new1".into()
                }
            },
            "{minutes} minutes after the surge"
        );
    }
}

/// A failure lists the instances launched since the surge that never became Ready on the
/// desired AMI: not the group's instances from before the surge, even those on that AMI.
#[test]
fn a_failure_lists_only_the_new_instances_that_never_became_ready() {
    let mut base = old_members(5);
    base.push(member("i-current", NEW, -600, true));
    let mut not_ready_before = member("i-stuck", NEW, -300, false);
    not_ready_before.node = None;
    base.push(not_ready_before);
    let mut members = base.clone();
    members.push(member("i-new1", NEW, 10, false));
    let r = surging("i-old0", &base);
    let plan = run(
        &group(8, 0, 10),
        &members,
        std::slice::from_ref(&r),
        t0() + TimeDelta::minutes(30),
    );
    match command(&plan, "i-old0") {
        Command::Fail {
            why: Failure::ReplacementNotReady { fresh, .. },
            ..
        } => assert_eq!(fresh, &["i-new1".to_string()]),
        other => panic!("not a failure: {other:?}"),
    }
}

/// A surging rotation whose old instance left (gone, or leaving) finishes and gives its surge
/// back, whatever its replacement's state.
#[test]
fn surging_whose_instance_left_finishes_with_its_give_back() {
    let base = old_members(6);
    for leaving in [false, true] {
        let mut members: Vec<Member> = base.clone();
        if leaving {
            members[0].lifecycle = Lifecycle::Leaving;
        } else {
            members.remove(0);
        }
        members.push(counted(member("i-new1", NEW, 1, false), 0));
        let r = surging("i-old0", &base);
        let plan = run(&group(7, 0, 10), &members, &[r], t0());
        match command(&plan, "i-old0") {
            Command::Finish {
                why: FinishReason::InstanceLeft,
                undo: Some(_),
            } => {}
            other => panic!("leaving {leaving}: {other:?}"),
        }
    }
}

/// Give-backs and ends come first, then the other steps, then surges, whatever the order the
/// rotations were created in.
#[test]
fn commands_are_ordered_ends_first_surges_last() {
    let members = old_members(6);
    let rotations = [
        created(rotation("i-old0", Step::Draining), 0),
        created(rotation("i-old1", Step::Terminating), 1),
        created(rotation("i-old2", Step::Pending), 2),
    ];
    let plan = run(&group(6, 0, 10), &members, &rotations, t0());
    assert_eq!(
        names(&plan),
        [
            ("i-old1".to_string(), "terminate"),
            ("i-old0".to_string(), "drainStep"),
            ("i-old2".to_string(), "surge"),
        ]
    );
}

/// A command's name (logs, reports) is its serialized `command` tag, one per variant.
#[test]
fn command_names_are_their_serialized_tags() {
    let cases = [
        (
            Command::Surge {
                baseline: vec![],
                read: 1,
                above_max: false,
            },
            "surge",
        ),
        (Command::Raise { above_max: true }, "raise"),
        (Command::DropSurge, "dropSurge"),
        (
            Command::ClaimReplacement { id: "i-1".into() },
            "claimReplacement",
        ),
        (Command::Cordon, "cordon"),
        (Command::DrainStep, "drainStep"),
        (
            Command::Terminate {
                decrement: true,
                relaunch: false,
            },
            "terminate",
        ),
        (
            Command::UndoSurge {
                undo: terminate("i-1"),
            },
            "undoSurge",
        ),
        (
            Command::Finish {
                why: FinishReason::Terminated,
                undo: None,
            },
            "finish",
        ),
        (
            Command::Fail {
                why: Failure::ReplacementNotReady {
                    instance_id: "i-1".into(),
                    timeout: Duration::from_secs(60),
                    image: None,
                    fresh: vec![],
                },
                halt: true,
                quarantine: false,
                undo: nothing(),
            },
            "fail",
        ),
        (
            Command::Cancel {
                image: NEW.into(),
                uncordon: false,
                undo: None,
            },
            "cancel",
        ),
        (
            Command::Wait {
                why: WaitReason::Launch {
                    since: t0(),
                    problem: None,
                },
            },
            "wait",
        ),
    ];
    for (command, name) in cases {
        assert_eq!(command.name(), name, "{command:?}");
        let tag = serde_json::to_value(&command).expect("serializes")["command"].clone();
        assert_eq!(tag, name, "{command:?}");
    }
}

/// Terminate-first (set or derived): a `Pending` rotation drains first even with room under
/// `MaxSize`; without it, room means a surge.
#[test]
fn terminate_first_drains_first_even_with_room() {
    let members = old_members(4);
    let pending = rotation("i-old0", Step::Pending);
    for (terminate_first, want) in [(true, "cordon"), (false, "surge")] {
        let case = Case {
            terminate_first,
            ..Case::new(group(4, 0, 10), &members)
        };
        let plan = case.run(std::slice::from_ref(&pending), t0());
        assert_eq!(
            names(&plan),
            vec![("i-old0".into(), want)],
            "{terminate_first}"
        );
    }
}

/// After a terminate without a surge, the rotation ends only once the group's relaunch is
/// confirmed Ready on the desired AMI; a relaunch out of capacity halts the pool without
/// blaming the release; another writer taking the unit ends it as left.
#[test]
fn a_terminate_first_rotation_ends_once_its_relaunch_is_ready() {
    let leaving = |id: &str| Member {
        lifecycle: Lifecycle::Leaving,
        ..member(id, OLD, -600, true)
    };
    let others: Vec<Member> = (1..4)
        .map(|i| member(&format!("i-old{i}"), OLD, -600, true))
        .collect();
    let with = |extra: Vec<Member>| -> Vec<Member> {
        let mut m = others.clone();
        m.extend(extra);
        m
    };
    let ice = |minutes: i64| {
        LaunchProblem {
        message: "Launching a new EC2 instance. Status Reason: We currently do not have sufficient capacity. Launching EC2 instance failed. InsufficientInstanceCapacity".into(),
        at: Some(t0() + TimeDelta::minutes(minutes)),
    }
    };
    let baseline: Vec<String> = (0..4).map(|i| format!("i-old{i}")).collect();
    let term = Rotation {
        relaunch: Some(crate::rotation::Relaunch {
            baseline: baseline.clone(),
        }),
        ..rotation("i-old0", Step::Terminating)
    };
    let before = Rotation {
        relaunch: Some(crate::rotation::Relaunch {
            baseline: [baseline.clone(), vec!["i-new".into()]].concat(),
        }),
        ..term.clone()
    };
    let spot = Rotation {
        reason: RotationReason::Interrupted,
        relaunch: None,
        ..term.clone()
    };
    let dropped = Rotation {
        surge: Some(Surge {
            release: Some(UnitRelease::Given),
            ..surging("i-old0", &others)
                .surge
                .unwrap_or_else(|| unreachable!())
        }),
        ..term.clone()
    };
    let relaunched = |id: &str| Command::Finish {
        why: FinishReason::Relaunched {
            replacement: id.into(),
        },
        undo: None,
    };
    let left = Command::Finish {
        why: FinishReason::InstanceLeft,
        undo: None,
    };
    let halted_for_capacity = Command::Fail {
        why: Failure::RelaunchFailed {
            instance_id: "i-old0".into(),
            problem: ice(1).message,
        },
        halt: true,
        quarantine: false,
        undo: None,
    };
    // (what, desired capacity, members, problem, rotation, minutes after t0, want)
    type Row<'a> = (
        &'a str,
        i32,
        Vec<Member>,
        Option<LaunchProblem>,
        &'a Rotation,
        i64,
        Command,
    );
    let cases: Vec<Row<'_>> = vec![
        (
            "launch owed",
            4,
            with(vec![leaving("i-old0")]),
            None,
            &term,
            5,
            Command::Wait {
                why: WaitReason::Launch {
                    since: t0(),
                    problem: None,
                },
            },
        ),
        (
            "out of capacity since the terminate",
            4,
            with(vec![]),
            Some(ice(1)),
            &term,
            5,
            halted_for_capacity,
        ),
        (
            "launched, not Ready yet",
            4,
            with(vec![member("i-new", NEW, 2, false)]),
            None,
            &term,
            5,
            Command::Wait {
                why: WaitReason::Replacement {
                    since: t0() + TimeDelta::minutes(2),
                    instance: "i-new".into(),
                },
            },
        ),
        (
            "launched and never Ready: the release is blamed",
            4,
            with(vec![member("i-new", NEW, 2, false)]),
            None,
            &term,
            30,
            Command::Fail {
                why: Failure::ReplacementNotReady {
                    instance_id: "i-old0".into(),
                    timeout: settings().replacement_timeout,
                    image: Some(NEW.into()),
                    fresh: vec!["i-new".into()],
                },
                halt: true,
                quarantine: true,
                undo: None,
            },
        ),
        (
            "Ready on the desired AMI",
            4,
            with(vec![member("i-new", NEW, 2, true)]),
            None,
            &term,
            5,
            relaunched("i-new"),
        ),
        (
            "a surge dropped at MaxSize waits for the relaunch too",
            4,
            with(vec![member("i-new", NEW, 2, true)]),
            None,
            &dropped,
            5,
            relaunched("i-new"),
        ),
        (
            "an instance from before the terminate is no relaunch",
            4,
            with(vec![member("i-new", NEW, -1, true)]),
            None,
            &before,
            5,
            left.clone(),
        ),
        (
            "another writer took the unit (desired lowered)",
            3,
            with(vec![]),
            None,
            &term,
            5,
            left.clone(),
        ),
        (
            "no relaunch recorded (an interruption) never waits",
            4,
            with(vec![]),
            Some(ice(1)),
            &spot,
            5,
            left.clone(),
        ),
    ];
    for (what, desired, members, problem, r, minutes, want) in cases {
        let case = Case {
            problem,
            ..Case::new(group(desired, 0, 4), &members)
        };
        let plan = case.run(std::slice::from_ref(r), t0() + TimeDelta::minutes(minutes));
        assert_eq!(command(&plan, "i-old0"), &want, "{what}");
    }
}

/// Two relaunches waiting, one instance Ready: one ends, the other keeps waiting for its own.
#[test]
fn one_relaunch_serves_one_rotation() {
    let members = vec![
        member("i-old2", OLD, -600, true),
        member("i-new", NEW, 2, true),
    ];
    let relaunching = |id: &str, minutes| Rotation {
        relaunch: Some(crate::rotation::Relaunch {
            baseline: vec!["i-old0".into(), "i-old1".into(), "i-old2".into()],
        }),
        ..created(rotation(id, Step::Terminating), minutes)
    };
    let (a, b) = (relaunching("i-old0", 0), relaunching("i-old1", 1));
    let plan = run(
        &group(3, 0, 3),
        &members,
        &[a, b],
        t0() + TimeDelta::minutes(5),
    );
    assert_eq!(
        names(&plan),
        vec![("i-old0".into(), "finish"), ("i-old1".into(), "wait")]
    );
}

/// A terminate without a surge unit records the relaunch (terminate-first); with a surge, or
/// for an interruption, it does not.
#[test]
fn only_a_voluntary_terminate_without_a_surge_unit_waits_for_a_relaunch() {
    let base = old_members(4);
    let spot = Rotation {
        reason: RotationReason::Interrupted,
        ..rotation("i-old1", Step::Terminating)
    };
    let plain = rotation("i-old0", Step::Terminating);
    let plan = run(&group(4, 0, 4), &base, &[plain, spot], t0());
    assert_eq!(
        command(&plan, "i-old0"),
        &Command::Terminate {
            decrement: false,
            relaunch: true
        }
    );
    assert_eq!(
        command(&plan, "i-old1"),
        &Command::Terminate {
            decrement: false,
            relaunch: false
        }
    );
}
