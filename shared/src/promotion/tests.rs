//! Table tests of promotion's pure parts: chain problems, image age, "fully on" and the alarm view.

use chrono::TimeDelta;

use super::*;

#[test]
fn chains_name_unknown_upstreams_and_cycles() {
    let from: BTreeMap<String, Option<String>> = [
        ("test/a", None),
        ("pre/a", Some("test/a")),
        ("prod/a", Some("pre/a")),
        ("prod/b", Some("test/zz")),
        ("x/1", Some("x/2")),
        ("x/2", Some("x/1")),
        ("self/s", Some("self/s")),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.map(str::to_string)))
    .collect();
    let problems = chain_problems(&from);
    let pools: Vec<&str> = problems.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        pools,
        vec!["prod/b", "self/s", "x/1", "x/2"],
        "{problems:?}"
    );
    assert!(
        matches!(&problems[0].1, ChainProblem::UnknownUpstream { upstream, .. } if upstream == "test/zz")
    );
    assert!(matches!(
        &problems[1].1,
        ChainProblem::ItsOwnUpstream { .. }
    ));
    assert_eq!(
        problems[2].1,
        ChainProblem::Cycle {
            path: vec!["x/1".into(), "x/2".into(), "x/1".into()]
        }
    );
    assert!(problems[2].1.to_string().contains("x/1 -> x/2 -> x/1"));
}

// ---------------------------------------------------------------------------------------------
// old_enough

fn ami_created(creation_date: &str) -> Ami {
    Ami {
        id: "ami-1".into(),
        name: "image".into(),
        architecture: crate::image::Architecture::X86_64,
        variant: None,
        creation_date: creation_date.into(),
        deprecated: false,
        source: crate::ami::select::Provenance {
            term: 0,
            field: "id".into(),
            value: "ami-1".into(),
            parameter: None,
        },
    }
}

#[test]
fn old_enough_counts_from_the_creation_date_and_fails_closed_on_an_unreadable_one() {
    let now = crate::plan::tests::now();
    let day = TimeDelta::days(1);
    let created = |age: TimeDelta| ami_created(&(now - age).to_rfc3339());
    let cases = [
        ("exactly minAge old", created(day), true),
        (
            "a second younger",
            created(day - TimeDelta::seconds(1)),
            false,
        ),
        ("older", created(TimeDelta::days(3)), true),
        ("created in the future", created(-day), false),
        ("unreadable date", ami_created("yesterday"), false),
        ("no date", ami_created(""), false),
    ];
    for (what, ami, want) in cases {
        assert_eq!(old_enough(&ami, day, now), want, "{what}");
    }
}

// ---------------------------------------------------------------------------------------------
// fully_on

use crate::plan::tests::{NEW, OLD, member, policy, rotation, snapshot};
use crate::rotation::{Queue, RotationReason, Step};

fn pool_policy() -> crate::policy::Policy {
    policy("")
}

#[test]
fn fully_on_needs_every_member_ready_on_the_desired_ami_enough_of_them_and_nothing_in_flight() {
    let two = || vec![member("i-1", NEW, 5), member("i-2", NEW, 6)];
    let in_flight = |step| rotation("i-1", RotationReason::Drifted, step);
    let other_pool = {
        let mut r = in_flight(Step::Draining);
        r.pool = "prod/other".into();
        r
    };
    let waiting = {
        let mut r = in_flight(Step::Pending);
        r.queued = Some(Queue {
            request_id: "req-1".into(),
            ignore_budgets: false,
            max_concurrent: 1,
            reason: "operator".into(),
        });
        r
    };
    let not_ready = {
        let mut m = member("i-2", NEW, 6);
        if let Some(n) = &mut m.node {
            n.ready = false;
        }
        m
    };
    type Edit = fn(&mut crate::plan::Snapshot);
    /// What the case is, the members, the rotations, an edit of the snapshot, fully on.
    type Case = (
        &'static str,
        Vec<crate::fleet::Member>,
        Vec<crate::rotation::Rotation>,
        Edit,
        bool,
    );
    let cases: Vec<Case> = vec![
        ("all on, as many as desired", two(), vec![], |_| {}, true),
        (
            "more than desired",
            two(),
            vec![],
            |s| s.group.desired_capacity = 1,
            true,
        ),
        (
            "fewer than desired",
            two(),
            vec![],
            |s| s.group.desired_capacity = 3,
            false,
        ),
        ("no members", vec![], vec![], |_| {}, false),
        (
            "desired unresolved",
            two(),
            vec![],
            |s| s.gates.desired_ami = None,
            false,
        ),
        (
            "halted",
            two(),
            vec![],
            |s| s.gates.halted = Some("failed".into()),
            false,
        ),
        (
            "one on another image",
            vec![member("i-1", NEW, 5), member("i-2", OLD, 6)],
            vec![],
            |_| {},
            false,
        ),
        (
            "one not Ready",
            vec![member("i-1", NEW, 5), not_ready],
            vec![],
            |_| {},
            false,
        ),
        (
            "own rotation in flight",
            two(),
            vec![in_flight(Step::Draining)],
            |_| {},
            false,
        ),
        (
            "own rotation finished",
            two(),
            vec![in_flight(Step::Done)],
            |_| {},
            true,
        ),
        (
            "own operator rotation still queued",
            two(),
            vec![waiting],
            |_| {},
            true,
        ),
        (
            "another pool's rotation in flight",
            two(),
            vec![other_pool],
            |_| {},
            true,
        ),
    ];
    for (what, members, rotations, edit, on) in cases {
        let mut s = snapshot(pool_policy(), members, rotations);
        edit(&mut s);
        assert_eq!(fully_on(&s), on.then_some(NEW), "{what}");
    }
}

// ---------------------------------------------------------------------------------------------
// alarms_view

#[test]
fn alarms_view_names_firing_and_missing_alarms_and_keeps_the_latest_change_of_the_others() {
    let t = |h| crate::plan::tests::now() - TimeDelta::hours(h);
    let state = |name: &str, firing, updated| AlarmState {
        name: name.into(),
        firing,
        updated,
    };
    let states = [
        state("errors", true, Some(t(1))),
        state("latency", false, Some(t(5))),
        state("saturation", false, Some(t(2))),
        state("unwanted", true, Some(t(0))),
    ];
    let wanted = [
        "errors".to_string(),
        "arn:aws:cloudwatch:eu-west-1:111122223333:alarm:latency".to_string(),
        "saturation".to_string(),
        "typo".to_string(),
    ];
    let view = alarms_view(&wanted, &states);
    assert_eq!(view.firing, vec!["errors", "typo (no such alarm)"]);
    assert_eq!(view.last_change, Some(t(2)));
    // Nothing wanted: nothing firing, no change, whatever the account holds.
    assert_eq!(alarms_view(&[], &states), Alarms::default());
    // Wanted alarms quiet: none firing, the latest change kept.
    let quiet = alarms_view(&wanted[1..3], &states);
    assert!(quiet.firing.is_empty(), "{quiet:?}");
    assert_eq!(quiet.last_change, Some(t(2)));
}
