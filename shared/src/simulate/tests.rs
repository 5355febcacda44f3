//! Tests of the forecast: table tests of known rollouts, and properties checked minute by minute
//! against an oracle that rebuilds the fleet from the forecast and asks `budget::evaluate`
//! itself (budgets respected at each start, no start in a closed window, no wasted minute,
//! `done`), plus the event-driven forecast against a pass at every minute.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use chrono::{DateTime, TimeDelta, Utc};
use proptest::prelude::*;

use super::engine::{self, Stepping};
use super::*;
use crate::budget::{self, Reason};
use crate::policy;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn min(n: i64) -> TimeDelta {
    TimeDelta::minutes(n)
}

/// A valid self-managed (or, with `managed`, managed node group) policy with `extra` appended.
fn pol(name: &str, managed: bool, extra: &str) -> Policy {
    let group = if managed {
        format!("{{ managedNodeGroup: {name} }}")
    } else {
        format!("{{ autoScalingGroup: {name} }}")
    };
    let doc = format!(
        "cluster: prod\nname: {name}\nnodeGroup: {group}\namiSelectorTerms:\n  - alias: al2023@latest\n{extra}"
    );
    let parsed = policy::parse(&doc);
    parsed
        .policy
        .unwrap_or_else(|| panic!("invalid test policy {:?}:\n{doc}", parsed.problems))
}

fn settings(from: &str, days: u32, rotation: i64) -> Settings {
    Settings {
        from: at(from),
        days,
        rotation: min(rotation),
        failures: Vec::new(),
    }
}

fn run(start: PoolStart, s: &Settings) -> PoolForecast {
    engine::run(start, s, Stepping::Events)
}

/// Monday 2026-11-30 00:00 UTC.
const MONDAY: &str = "2026-11-30T00:00:00Z";

fn starts(f: &PoolForecast) -> Vec<(DateTime<Utc>, RotationReason)> {
    f.rotations.iter().map(|r| (r.start, r.reason)).collect()
}

#[test]
fn six_nodes_one_at_a_time_from_the_change() {
    let p = pol("a", false, "disruption:\n  budgets:\n    - nodes: \"1\"\n");
    let s = settings(MONDAY, 1, 10);
    let start = PoolStart::synthetic(p, 6, s.from, TimeDelta::zero(), at("2026-11-30T08:00:00Z"));
    let f = run(start, &s);
    let expected: Vec<_> = (0..6)
        .map(|i| {
            (
                at("2026-11-30T08:00:00Z") + min(10 * i),
                RotationReason::Drifted,
            )
        })
        .collect();
    assert_eq!(starts(&f), expected);
    assert!(f.rotations.iter().all(|r| r.end - r.start == min(10)));
    assert_eq!(f.done, Some(at("2026-11-30T09:00:00Z")));
    assert_eq!(f.max_in_flight, 1);
    // Nodes wait on the budget while one is in flight: one merged stretch.
    assert_eq!(f.blocked.len(), 1, "{:?}", f.blocked);
    let b = &f.blocked[0];
    assert_eq!(
        (b.from, b.to),
        (at("2026-11-30T08:00:00Z"), at("2026-11-30T08:50:00Z"))
    );
    assert_eq!(b.why, "disruption.budgets[0] (nodes \"1\"): 1 of 6 nodes");
    assert_eq!(b.kind, BlockKind::Full);
}

#[test]
fn percent_budget_rounds_up_and_runs_in_parallel() {
    // 15% of 20 = 3 at once: 20 nodes in 7 rounds of 10 minutes.
    let p = pol("a", false, "disruption:\n  budgets:\n    - nodes: 15%\n");
    let s = settings(MONDAY, 1, 10);
    let f = run(
        PoolStart::synthetic(p, 20, s.from, TimeDelta::zero(), s.from),
        &s,
    );
    assert_eq!(f.max_in_flight, 3);
    assert_eq!(f.rotations.len(), 20);
    assert_eq!(f.done, Some(s.from + min(70)));
}

#[test]
fn a_closed_window_holds_drift_until_it_opens_in_its_time_zone() {
    // Drift only between 09:00 and 17:00 in Kolkata (UTC+05:30): 03:30 to 11:30 UTC.
    let p = pol(
        "a",
        false,
        "disruption:\n  budgets:\n    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 17 * * *\"\n      duration: 16h\n      timeZone: Asia/Kolkata\n      reasons: [Drifted]\n",
    );
    let s = settings(MONDAY, 2, 30);
    let f = run(
        PoolStart::synthetic(p, 6, s.from, TimeDelta::zero(), s.from),
        &s,
    );
    let first = f.rotations.first().unwrap();
    assert_eq!(first.start, at("2026-11-30T03:30:00Z"));
    assert_eq!(f.done, Some(at("2026-11-30T05:00:00Z")));
    let closed = &f.blocked[0];
    assert_eq!(
        (closed.from, closed.to),
        (s.from, at("2026-11-30T03:30:00Z"))
    );
    assert_eq!(closed.kind, BlockKind::Closed);
    assert_eq!(
        closed.why,
        "disruption.budgets[1] (nodes \"0\", schedule \"0 17 * * *\", duration 16h, timeZone Asia/Kolkata, reasons [Drifted]): 0 of 6 nodes"
    );
    // The picture's shading: the Drifted window is closed from the start to 03:30 and again
    // from 11:30 UTC; Expired never.
    assert_eq!(f.closed[0].from, s.from);
    assert_eq!(f.closed[0].to, at("2026-11-30T03:30:00Z"));
    assert_eq!(f.closed[1].from, at("2026-11-30T11:30:00Z"));
    assert!(f.closed.iter().all(|c| c.reason == Reason::Drifted));
}

#[test]
fn a_rotation_started_before_a_window_closes_runs_into_it() {
    // Open until 10:00; rotations take 45 minutes; the one started at 09:45 ends at 10:30.
    let p = pol(
        "a",
        false,
        "disruption:\n  budgets:\n    - nodes: \"1\"\n    - nodes: \"0\"\n      schedule: \"0 10 * * *\"\n      duration: 23h\n",
    );
    let s = settings("2026-11-30T09:00:00Z", 1, 45);
    let f = run(
        PoolStart::synthetic(p, 3, s.from, TimeDelta::zero(), s.from),
        &s,
    );
    assert_eq!(
        starts(&f),
        vec![
            (at("2026-11-30T09:00:00Z"), RotationReason::Drifted),
            (at("2026-11-30T09:45:00Z"), RotationReason::Drifted),
        ]
    );
    assert_eq!(f.rotations[1].end, at("2026-11-30T10:30:00Z"));
    assert_eq!(f.done, None);
}

#[test]
fn expiry_rotations_appear_when_age_passes_expire_after() {
    // Nodes 719h old with expireAfter 720h: they expire an hour in; no AMI change this week.
    let p = pol(
        "a",
        false,
        "disruption:\n  budgets:\n    - nodes: \"2\"\nexpireAfter: 720h\n",
    );
    let s = settings(MONDAY, 1, 10);
    let later = s.to() + TimeDelta::days(1);
    let f = run(
        PoolStart::synthetic(p, 4, s.from, TimeDelta::hours(719), later),
        &s,
    );
    assert_eq!(
        starts(&f),
        vec![
            (s.from + min(60), RotationReason::Expired),
            (s.from + min(60), RotationReason::Expired),
            (s.from + min(70), RotationReason::Expired),
            (s.from + min(70), RotationReason::Expired),
        ]
    );
    assert_eq!(f.done, None, "the desired AMI never changes");
}

#[test]
fn forced_expiry_goes_through_a_closed_budget() {
    // Budget "0" always: nothing budgeted starts, but past expireAfter + grace it is forced.
    let p = pol(
        "a",
        false,
        "disruption:\n  budgets:\n    - nodes: \"0\"\nexpireAfter: 20h\nterminationGracePeriod: 2h\n",
    );
    // 19h old: forced 3h in (adopted before they launched: forced from launch); their
    // replacements would be forced only after the forecast.
    let s = settings(MONDAY, 1, 10);
    let mut start = PoolStart::synthetic(p, 2, s.from, TimeDelta::hours(19), s.from);
    start.snapshot.adopted_at = None;
    let f = run(start, &s);
    assert_eq!(f.rotations.len(), 2);
    assert!(
        f.rotations
            .iter()
            .all(|r| r.forced && r.reason == RotationReason::Expired)
    );
    assert!(
        f.rotations
            .iter()
            .all(|r| r.start == s.from + TimeDelta::hours(3))
    );
    // Their replacements run the new AMI: done when they end.
    assert_eq!(f.done, Some(s.from + TimeDelta::hours(3) + min(10)));
    assert_eq!(f.blocked[0].kind, BlockKind::Closed);
}

#[test]
fn a_paused_pool_waits_the_whole_forecast() {
    let p = pol("a", false, "paused: true\n");
    let s = settings(MONDAY, 3, 10);
    let f = run(
        PoolStart::synthetic(p, 3, s.from, TimeDelta::zero(), s.from),
        &s,
    );
    assert!(f.rotations.is_empty());
    assert_eq!(f.done, None);
    assert_eq!(f.blocked.len(), 1);
    assert_eq!((f.blocked[0].from, f.blocked[0].to), (s.from, s.to()));
    assert!(f.blocked[0].why.contains("paused"), "{}", f.blocked[0].why);
    assert_eq!(f.blocked[0].kind, BlockKind::Gate);
}

#[test]
fn a_managed_node_group_rolls_in_waves_of_max_unavailable() {
    // Budget 2 of 5 nodes: one update, waves of 2, 2, 1, each taking the rotation time.
    let p = pol(
        "golden",
        true,
        "disruption:\n  budgets:\n    - nodes: \"2\"\n",
    );
    let s = settings(MONDAY, 1, 10);
    let f = run(
        PoolStart::synthetic(p, 5, s.from, TimeDelta::zero(), s.from),
        &s,
    );
    let waves: Vec<DateTime<Utc>> = f.rotations.iter().map(|r| r.start).collect();
    assert_eq!(
        waves,
        vec![
            s.from,
            s.from,
            s.from + min(10),
            s.from + min(10),
            s.from + min(20)
        ]
    );
    assert!(
        f.rotations
            .iter()
            .all(|r| r.wave && r.reason == RotationReason::Drifted)
    );
    assert_eq!(f.max_in_flight, 2);
    assert_eq!(f.done, Some(s.from + min(30)));
}

#[test]
fn a_managed_update_waits_for_a_window_it_fits_in() {
    // Drift allowed 09:00-09:20 and 13:00-14:00 UTC (closed otherwise); 4 nodes, 1 at a time,
    // 10-minute waves: 40 minutes do not fit the first window, so the update waits for 13:00.
    let p = pol(
        "golden",
        true,
        "disruption:\n  budgets:\n    - nodes: \"1\"\n    - nodes: \"0\"\n      schedule: \"20 9 * * *\"\n      duration: 3h40m\n      reasons: [Drifted]\n    - nodes: \"0\"\n      schedule: \"0 14 * * *\"\n      duration: 19h\n      reasons: [Drifted]\n",
    );
    let s = settings("2026-11-30T09:00:00Z", 1, 10);
    let f = run(
        PoolStart::synthetic(p, 4, s.from, TimeDelta::zero(), s.from),
        &s,
    );
    assert_eq!(
        f.rotations.first().unwrap().start,
        at("2026-11-30T13:00:00Z")
    );
    assert_eq!(f.done, Some(at("2026-11-30T13:40:00Z")));
    let wait = f
        .blocked
        .iter()
        .find(|b| b.from == s.from)
        .expect("a wait from the start");
    assert_eq!(wait.kind, BlockKind::Gate);
    assert!(
        wait.why
            .contains("waiting for the window opening at 2026-11-30T13:00:00Z"),
        "{}",
        wait.why
    );
}

#[test]
fn the_examples_forecast_is_deterministic_and_serializes_to_the_contract() {
    let policies = [
        pol(
            "general",
            false,
            "disruption:\n  budgets:\n    - nodes: 15%\n    - nodes: \"0\"\n      schedule: \"0 9 * * sat-sun\"\n      duration: 24h\n      timeZone: Asia/Shanghai\n",
        ),
        pol(
            "golden",
            true,
            "disruption:\n  budgets:\n    - nodes: \"1\"\n",
        ),
    ];
    let s = settings(MONDAY, 7, 10);
    let pools = || {
        policies
            .iter()
            .map(|p| PoolStart::synthetic(p.clone(), 6, s.from, TimeDelta::hours(700), s.from))
            .collect::<Vec<_>>()
    };
    let a = simulate(pools(), &s);
    let b = simulate(pools(), &s);
    assert_eq!(a, b);
    assert_eq!(picture::svg(&a), picture::svg(&b));
    assert_eq!(picture::html(&a), picture::html(&b));
    let v = serde_json::to_value(&a).unwrap();
    let keys =
        |o: &serde_json::Value| -> Vec<String> { o.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&v), ["from", "to", "pools"]);
    assert_eq!(v["from"], "2026-11-30T00:00:00Z");
    assert_eq!(v["to"], "2026-12-07T00:00:00Z");
    assert_eq!(
        keys(&v["pools"][0]),
        [
            "pool",
            "nodes",
            "rotations",
            "blocked",
            "done",
            "maxInFlight",
            "maxInFlightAt",
            "maxInFlightWhy"
        ]
    );
    assert_eq!(
        keys(&v["pools"][0]["rotations"][0]),
        ["instance", "reason", "start", "end", "forced", "wave"]
    );
    assert_eq!(
        keys(&v["pools"][0]["blocked"][0]),
        ["from", "to", "reason", "why"]
    );
    // Every scheduled budget is in Shanghai time: so is the axis.
    assert_eq!(a.time_zone, chrono_tz::Tz::Asia__Shanghai);
}

#[test]
fn a_live_rotation_in_flight_finishes_with_its_surged_replacement() {
    use crate::rotation::{Rotation, Step, Surge};
    // Live state: i-a is being replaced (surged 3 minutes ago, replacement i-r already Ready on
    // the desired AMI); i-b and i-c still run the old one. Budget 1.
    let s = settings("2026-11-30T10:00:00Z", 1, 10);
    let p = pol("a", false, "disruption:\n  budgets:\n    - nodes: \"1\"\n");
    let mut start = PoolStart::synthetic(p, 0, s.from, TimeDelta::zero(), s.from);
    let launched = s.from - TimeDelta::hours(5);
    start.snapshot.members = ["i-a", "i-b", "i-c"]
        .iter()
        .map(|id| ready_member(id, CURRENT_AMI, launched))
        .chain([ready_member("i-r", NEW_AMI, s.from - min(2))])
        .collect();
    let mut r = Rotation::new(
        "prod/a",
        "i-a",
        RotationReason::Drifted,
        false,
        s.from - min(3),
    );
    r.step = Step::Surging;
    r.surge = Some(Surge {
        target_desired: 4,
        baseline: vec!["i-a".into(), "i-b".into(), "i-c".into()],
        base: Some(3),
        read: None,
        above_max: false,
        release: None,
    });
    start.snapshot.rotations = vec![r];
    start.snapshot.gates.desired_ami = Some(NEW_AMI.into());
    start.snapshot.group.launch_template_image = Some(NEW_AMI.into());
    start.desired_change = None;
    let f = run(start, &s);
    assert_eq!(
        f.nodes, 3,
        "the surged replacement is not a node of its own"
    );
    let spans: Vec<(&str, DateTime<Utc>, DateTime<Utc>)> = f
        .rotations
        .iter()
        .map(|r| (r.instance.as_str(), r.start, r.end))
        .collect();
    assert_eq!(
        spans,
        vec![
            ("i-a", s.from - min(3), s.from + min(7)),
            ("i-b", s.from + min(7), s.from + min(17)),
            ("i-c", s.from + min(17), s.from + min(27)),
        ]
    );
    assert_eq!(f.rotations[0].replacement.as_deref(), Some("i-r"));
    assert_eq!(f.done, Some(s.from + min(27)));
    assert_eq!(f.max_in_flight, 1);
}

// ---- Properties -------------------------------------------------------------------------

const BUDGETS: [&str; 8] = [
    "",
    "disruption:\n  budgets:\n    - nodes: \"0\"\n",
    "disruption:\n  budgets:\n    - nodes: \"2\"\n",
    "disruption:\n  budgets:\n    - nodes: 30%\n",
    "disruption:\n  budgets:\n    - nodes: 15%\n    - nodes: \"3\"\n    - nodes: \"0\"\n      schedule: \"0 9 * * sat-sun\"\n      duration: 24h\n      timeZone: Asia/Shanghai\n    - nodes: \"0\"\n      schedule: \"0 17 * * mon-fri\"\n      duration: 16h\n      reasons: [Drifted]\n",
    "disruption:\n  budgets:\n    - nodes: 50%\n    - nodes: \"1\"\n      reasons: [Expired]\n    - nodes: \"0\"\n      schedule: \"*/30 * * * *\"\n      duration: 10m\n      timeZone: Asia/Kolkata\n",
    "disruption:\n  budgets:\n    - nodes: 25%\n    - nodes: \"0\"\n      schedule: \"30 9 * * *\"\n      duration: 23h30m\n      reasons: [Drifted]\n",
    "disruption:\n  budgets:\n    - nodes: \"3\"\n      reasons: [Drifted]\n    - nodes: 10%\n      reasons: [Expired]\n    - nodes: \"0\"\n      schedule: \"0 22 * * *\"\n      duration: 10h\n      timeZone: America/New_York\n",
];
const EXPIRY: [&str; 4] = [
    "expireAfter: Never\n",
    "expireAfter: 720h\nterminationGracePeriod: 2h\n",
    "expireAfter: 30h\nterminationGracePeriod: 3h\n",
    "expireAfter: 20h\n",
];

fn policies(managed: bool) -> &'static [Policy] {
    static SELF: OnceLock<Vec<Policy>> = OnceLock::new();
    static MANAGED: OnceLock<Vec<Policy>> = OnceLock::new();
    let cell = if managed { &MANAGED } else { &SELF };
    cell.get_or_init(|| {
        let mut out = Vec::new();
        for (i, b) in BUDGETS.iter().enumerate() {
            for (j, e) in EXPIRY.iter().enumerate() {
                out.push(pol(&format!("p{i}{j}"), managed, &format!("{b}{e}")));
            }
        }
        out
    })
}

/// Every whole minute in `[from, to]`.
fn minutes(from: DateTime<Utc>, to: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> {
    (0..=(to - from).num_minutes()).map(move |m| from + min(m))
}

fn cap(budgets: &[budget::Budget], r: RotationReason, total: u32, t: DateTime<Utc>) -> u32 {
    let reason = r.budget_reason().expect("budgeted reason");
    budget::evaluate(budgets, reason, total, 0, t).allowed
}

/// Rebuilds a self-managed pool's fleet minute by minute from the forecast and checks it
/// against the budgets (evaluated here, independently of the simulation).
fn check_self_managed(start: &PoolStart, f: &PoolForecast, s: &Settings) {
    let policy = &start.snapshot.policy;
    let budgets = &policy.budgets;
    let total = f.nodes;
    let (from, to) = (s.from, s.to());
    let (change, new_ami) = start.desired_change.clone().unwrap();
    let desired = |t: DateTime<Utc>| {
        if t >= change {
            new_ami.as_str()
        } else {
            CURRENT_AMI
        }
    };
    let expire = policy.expire_after.map(|e| TimeDelta::from_std(e).unwrap());
    let grace = policy
        .termination_grace_period
        .map(|g| TimeDelta::from_std(g).unwrap());
    let mut nodes: BTreeMap<String, (String, DateTime<Utc>)> = start
        .snapshot
        .members
        .iter()
        .map(|m| {
            (
                m.instance_id.clone(),
                (m.image_id.clone().unwrap(), m.launch_time),
            )
        })
        .collect();
    let mut done = None;
    for t in minutes(from, to) {
        for r in f.rotations.iter().filter(|r| r.end == t) {
            assert!(
                nodes.remove(&r.instance).is_some(),
                "{} rotated twice",
                r.instance
            );
            let rep = r.replacement.clone().expect("a replacement once done");
            nodes.insert(rep, (desired(r.start).to_string(), r.start));
        }
        let all = t >= change && nodes.values().all(|(image, _)| image == new_ami.as_str());
        if !all {
            done = None;
        } else if done.is_none() {
            done = Some(t);
        }
        if t == to {
            break;
        }
        let before = f
            .rotations
            .iter()
            .filter(|r| r.start < t && r.end > t)
            .count() as u32;
        let starting: Vec<&RotationSpan> = f.rotations.iter().filter(|r| r.start == t).collect();
        let after = before + starting.len() as u32;
        let busy: BTreeSet<&str> = f
            .rotations
            .iter()
            .filter(|r| r.start <= t && r.end > t)
            .map(|r| r.instance.as_str())
            .collect();
        let forced_now = starting.iter().filter(|r| r.forced).count() as u32;
        let mut budgeted: BTreeMap<RotationReason, u32> = BTreeMap::new();
        for r in &starting {
            assert!(
                nodes.contains_key(&r.instance),
                "{} started but is no node",
                r.instance
            );
            assert!(!policy.paused, "a paused pool starts nothing");
            if !r.forced {
                *budgeted.entry(r.reason).or_default() += 1;
            }
        }
        // Every budgeted start within its reason's allowance (counting every rotation in
        // flight, forced ones first); never in a closed window.
        for (reason, n) in &budgeted {
            let c = cap(budgets, *reason, total, t);
            assert!(c > 0, "{reason:?} started at {t} in a closed window");
            assert!(
                before + forced_now + n <= c,
                "{reason:?} at {t}: {before} in flight + {forced_now} forced + {n} started > {c}"
            );
        }
        if let Some(max_cap) = budgeted.keys().map(|r| cap(budgets, *r, total, t)).max() {
            assert!(after <= max_cap, "at {t}: {after} in flight > {max_cap}");
        }
        // No wasted minute: whatever still needs a rotation after the pass waits because the
        // budget of its reason is used up (or the pool is paused); forced ones never wait.
        for (id, (image, launch)) in &nodes {
            if busy.contains(id.as_str()) || policy.paused {
                continue;
            }
            let age = t - *launch;
            // Forced from launch or adoption, whichever is later (adoption never stampedes).
            let since = t - start
                .snapshot
                .adopted_at
                .map_or(*launch, |a| a.max(*launch));
            let forced = matches!((expire, grace), (Some(e), Some(g)) if since >= e + g);
            assert!(!forced, "{id} past its forced-expiry line waits at {t}");
            let reason = if image != desired(t) {
                RotationReason::Drifted
            } else if expire.is_some_and(|e| age >= e) {
                RotationReason::Expired
            } else {
                continue;
            };
            let c = cap(budgets, reason, total, t);
            assert!(
                after >= c,
                "{id} ({reason:?}) waits at {t} with {after} in flight of {c} allowed"
            );
        }
    }
    assert_eq!(f.done, done, "done");
    // Blocked stretches: within the forecast, ordered, and merged.
    for b in &f.blocked {
        assert!(from <= b.from && b.from < b.to && b.to <= to, "{b:?}");
    }
    for pair in f.blocked.windows(2) {
        assert!(pair[0].from <= pair[1].from);
    }
    for (i, a) in f.blocked.iter().enumerate() {
        let touching = f.blocked[i + 1..]
            .iter()
            .any(|b| b.reason == a.reason && b.from == a.to && b.why == a.why);
        assert!(!touching, "not merged: {a:?}");
    }
}

/// The event-driven forecast equals a pass at every minute.
fn check_no_skipped_change(start: &PoolStart, s: &Settings) -> PoolForecast {
    let events = engine::run(start.clone(), s, Stepping::Events);
    let every = engine::run(start.clone(), s, Stepping::EveryMinute);
    assert_eq!(events.rotations, every.rotations);
    assert_eq!(events.done, every.done);
    assert_eq!(events.max_in_flight, every.max_in_flight);
    assert_eq!(events.blocked, every.blocked);
    events
}

fn scenario() -> impl Strategy<Value = (usize, u32, i64, i64, i64, u32, i64)> {
    (
        0..BUDGETS.len() * EXPIRY.len(),
        1u32..24,
        0i64..740,
        0i64..(36 * 60),
        0i64..(24 * 60),
        1u32..3,
        prop_oneof![Just(10i64), Just(1), Just(7), Just(45), Just(120)],
    )
}

fn build(
    (policy, nodes, age_h, change_min, from_min, days, rotation): (
        usize,
        u32,
        i64,
        i64,
        i64,
        u32,
        i64,
    ),
    managed: bool,
) -> (PoolStart, Settings) {
    let s = Settings {
        from: at("2026-12-03T00:00:00Z") + min(from_min),
        days,
        rotation: min(rotation),
        failures: Vec::new(),
    };
    let start = PoolStart::synthetic(
        policies(managed)[policy].clone(),
        nodes,
        s.from,
        TimeDelta::hours(age_h),
        s.from + min(change_min),
    );
    (start, s)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn self_managed_forecasts_respect_budgets_and_waste_no_minute(sc in scenario()) {
        let (start, s) = build(sc, false);
        let f = run(start.clone(), &s);
        check_self_managed(&start, &f, &s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn skipping_minutes_changes_nothing_self_managed(sc in scenario()) {
        let (start, s) = build((sc.0, sc.1, sc.2, sc.3, sc.4, 1, sc.6), false);
        check_no_skipped_change(&start, &s);
    }

    #[test]
    fn skipping_minutes_changes_nothing_managed(sc in scenario()) {
        let (start, s) = build((sc.0, sc.1, sc.2, sc.3, sc.4, 1, sc.6), true);
        let f = check_no_skipped_change(&start, &s);
        // A wave is never wider than the Drifted allowance when the update started.
        let first = f.rotations.iter().find(|r| r.wave);
        if let Some(first) = first {
            let width = f.rotations.iter().filter(|r| r.wave && r.start == first.start).count() as u32;
            let c = cap(&start.snapshot.policy.budgets, RotationReason::Drifted, f.nodes, first.start);
            prop_assert!(width <= c.max(1));
            prop_assert!(c > 0, "update started in a closed Drifted window");
        }
    }
}

#[test]
fn skipping_minutes_changes_nothing_on_the_tricky_policies() {
    // Every budget set with expiry inside the day, self-managed and managed, one day each.
    for managed in [false, true] {
        for b in 0..BUDGETS.len() {
            let sc = (b * EXPIRY.len() + 2, 7, 25, 90, 0, 1, 10);
            let (start, s) = build(sc, managed);
            let f = check_no_skipped_change(&start, &s);
            if !managed {
                check_self_managed(&start, &f, &s);
            }
        }
    }
}

/// A chain test -> prod (soak 2h): prod's desired AMI changes at test's done plus the soak,
/// and none of its rotations starts earlier; an upstream outside the simulation proves nothing;
/// minAge alone delays the change by minAge.
#[test]
fn promotion_follows_the_upstream_done_plus_soak() {
    let s = settings(MONDAY, 2, 10);
    let from = at(MONDAY);
    let test = pol(
        "test",
        false,
        "disruption:\n  budgets:\n    - nodes: \"2\"\n",
    );
    let prod = pol(
        "prod",
        false,
        "promotion:\n  from: prod/test\n  soak: 2h\ndisruption:\n  budgets:\n    - nodes: \"1\"\n",
    );
    let orphan = pol(
        "orphan",
        false,
        "promotion:\n  from: prod/elsewhere\n  soak: 2h\n",
    );
    let aged = pol("aged", false, "promotion:\n  minAge: 3h\n");
    let start = |p: &Policy| PoolStart::synthetic(p.clone(), 4, from, TimeDelta::zero(), from);
    // prod listed before its upstream: the order of the output is the order given.
    let f = simulate(
        vec![start(&prod), start(&test), start(&orphan), start(&aged)],
        &s,
    );
    let pools: Vec<&str> = f.pools.iter().map(|p| p.pool.as_str()).collect();
    assert_eq!(
        pools,
        ["prod/prod", "prod/test", "prod/orphan", "prod/aged"]
    );
    let (prod, test, orphan, aged) = (&f.pools[0], &f.pools[1], &f.pools[2], &f.pools[3]);
    let test_done = test.done.expect("test is done");
    assert!(test.promotion.is_none());
    let promo = prod.promotion.as_ref().expect("prod has a promotion note");
    assert_eq!(promo.upstream_done, Some(test_done));
    assert_eq!(promo.desired_at, Some(test_done + TimeDelta::hours(2)));
    assert!(!prod.rotations.is_empty());
    assert!(
        prod.rotations
            .iter()
            .all(|r| r.start >= test_done + TimeDelta::hours(2)),
        "{:?}",
        prod.rotations
    );
    assert!(
        prod.done
            .is_some_and(|d| d > test_done + TimeDelta::hours(2))
    );
    assert_eq!(orphan.promotion.as_ref().unwrap().desired_at, None);
    assert!(orphan.rotations.is_empty() && orphan.done.is_none());
    assert_eq!(
        aged.promotion.as_ref().unwrap().desired_at,
        Some(from + TimeDelta::hours(3))
    );
    assert!(
        aged.rotations
            .iter()
            .all(|r| r.start >= from + TimeDelta::hours(3))
    );
}

/// A promotion cycle never changes the desired AMI of its pools (and does not hang).
#[test]
fn a_promotion_cycle_changes_nothing() {
    let s = settings(MONDAY, 1, 10);
    let from = at(MONDAY);
    let a = pol("a", false, "promotion:\n  from: prod/b\n  soak: 1h\n");
    let b = pol("b", false, "promotion:\n  from: prod/a\n  soak: 1h\n");
    let start = |p: &Policy| PoolStart::synthetic(p.clone(), 2, from, TimeDelta::zero(), from);
    let f = simulate(vec![start(&a), start(&b)], &s);
    assert_eq!(f.pools.len(), 2);
    assert!(
        f.pools
            .iter()
            .all(|p| p.rotations.is_empty() && p.done.is_none())
    );
}

/// Forced rotations carry `forced` in the JSON, and a `maxInFlight` above the budget says why.
#[test]
fn forced_rotations_say_so_and_max_in_flight_gives_its_reason() {
    let s = settings(MONDAY, 1, 10);
    let p = pol(
        "forced",
        false,
        "disruption:\n  budgets:\n    - nodes: \"1\"\nexpireAfter: 24h\nterminationGracePeriod: 1h\n",
    );
    // Three nodes 30 hours old, the pool adopted before they launched: past expireAfter +
    // terminationGracePeriod, all forced at once.
    let mut start =
        PoolStart::synthetic(p, 3, s.from, TimeDelta::hours(30), DateTime::<Utc>::MAX_UTC);
    start.snapshot.adopted_at = None;
    let f = run(start, &s);
    assert_eq!(f.max_in_flight, 3);
    let v = serde_json::to_value(&f).unwrap();
    let rotations = v["rotations"].as_array().unwrap();
    assert_eq!(rotations.len(), 3);
    assert!(
        rotations.iter().all(|r| r["forced"] == true),
        "{rotations:?}"
    );
    assert_eq!(v["maxInFlightAt"], "2026-11-30T00:00:00Z");
    let why = v["maxInFlightWhy"].as_str().unwrap();
    assert!(why.starts_with("3 forced"), "{why}");
    // Within budget: one Drifted at a time, said as such.
    let p = pol(
        "budgeted",
        false,
        "disruption:\n  budgets:\n    - nodes: \"1\"\n",
    );
    let f = run(
        PoolStart::synthetic(p, 3, s.from, TimeDelta::zero(), s.from),
        &s,
    );
    assert_eq!(f.max_in_flight, 1);
    assert!(f.rotations.iter().all(|r| !r.forced));
    assert_eq!(
        f.max_in_flight_why.as_deref(),
        Some("1 Drifted within its budget")
    );
}

/// The picture reads at 900 px: that wide, every bar at least `MIN_BAR_W`, no two bars of a
/// lane touching, shadings never stacked on one another, and every class drawn in the legend.
#[test]
fn the_picture_is_readable_at_900_pixels() {
    let s = settings(MONDAY, 7, 10);
    let policies = [
        pol(
            "a",
            false,
            "disruption:\n  budgets:\n    - nodes: \"1\"\n    - nodes: \"0\"\n      schedule: \"0 17 * * *\"\n      duration: 16h\n      reasons: [Drifted]\n    - nodes: \"0\"\n      schedule: \"0 20 * * *\"\n      duration: 4h\n      reasons: [Expired]\nexpireAfter: 100h\n",
        ),
        pol("b", true, "disruption:\n  budgets:\n    - nodes: \"2\"\n"),
    ];
    let pools = policies
        .iter()
        .map(|p| {
            PoolStart::synthetic(
                p.clone(),
                6,
                s.from,
                TimeDelta::hours(90),
                s.from + min(300),
            )
        })
        .collect();
    let f = simulate(pools, &s);
    let svg = picture::svg(&f);
    assert!(svg.contains("width=\"900\""), "{}", &svg[..200]);
    let attr = |el: &str, name: &str| -> Option<f64> {
        let start = el.find(&format!(" {name}=\""))? + name.len() + 3;
        el[start..].split('"').next()?.parse().ok()
    };
    let class = |el: &str| -> Option<String> {
        let start = el.find(" class=\"")? + 8;
        el[start..].split('"').next().map(str::to_string)
    };
    let rects: Vec<&str> = svg
        .split("<rect")
        .skip(1)
        .map(|r| r.split('>').next().unwrap_or_default())
        .collect();
    let legend: BTreeSet<&str> = picture::LEGEND.iter().map(|(c, _)| *c).collect();
    let mut bars: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
    let mut shades: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rects {
        let Some(c) = class(r) else { continue };
        if c == "rowa" || c == "rowb" {
            continue;
        }
        assert!(
            legend.contains(c.as_str()),
            "class {c} drawn but not in the legend"
        );
        let (x, w, y) = (
            attr(r, "x").unwrap(),
            attr(r, "width").unwrap(),
            attr(r, "y").unwrap(),
        );
        match c.as_str() {
            "Drifted" | "Expired" | "forced" | "wave" | "other" => {
                assert!(w >= picture::MIN_BAR_W - 1e-9, "bar {w} px wide: {r}");
                bars.entry((y.to_bits(), 0)).or_default().push((x, x + w));
            }
            "cd" | "ce" | "cb" => shades.entry(y.to_bits()).or_default().push((x, x + w)),
            _ => {}
        }
    }
    assert!(!bars.is_empty());
    for spans in bars.values_mut().chain(shades.values_mut()) {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in spans.windows(2) {
            // Coordinates are printed to 0.1 px.
            assert!(
                pair[0].1 <= pair[1].0 + 0.11,
                "overlap in one lane: {pair:?}"
            );
        }
    }
    // Both reasons closed at once somewhere: drawn as its own shading.
    assert!(svg.contains("class=\"cb\""));
    // Every time written carries its offset; the hour labels are 11 px.
    assert!(svg.contains(" UTC"));
    assert!(!svg.contains("font-size=\"9\""));
    let html = picture::html(&f);
    assert!(html.contains("the JSON of <code>nodecycle simulate</code> is in UTC"));
    assert!(html.contains("self-managed node group"));
}

/// The issue's `simulate --nodes 40 --age 1000h` on a 20% budget with a weekday freeze: a
/// synthetic pool is adopted at `--from`, so its old nodes are replaced within the budget (at
/// most 8 in flight, none forced) instead of all 40 forced at once.
#[test]
fn adopted_old_nodes_are_replaced_within_the_budget() {
    let s = settings(MONDAY, 7, 10);
    let p = pol(
        "adopted",
        false,
        "disruption:\n  budgets:\n    - nodes: \"20%\"\n    - nodes: \"0\"\n      schedule: \"0 9 * * mon-fri\"\n      duration: 8h\nexpireAfter: 720h\nterminationGracePeriod: 2h\n",
    );
    let start = PoolStart::synthetic(
        p,
        40,
        s.from,
        TimeDelta::hours(1000),
        DateTime::<Utc>::MAX_UTC,
    );
    let f = run(start.clone(), &s);
    assert!(f.max_in_flight <= 8, "maxInFlight {}", f.max_in_flight);
    assert!(f.rotations.iter().all(|r| !r.forced), "{:?}", f.rotations);
    assert_eq!(
        f.rotations.len(),
        40,
        "every old node replaced within the week"
    );
    check_self_managed(&start, &f, &s);
    // Adopted before the nodes launched (adoption unknown), the same pool forces all 40.
    let mut unknown = start;
    unknown.snapshot.adopted_at = None;
    let f = run(unknown, &s);
    assert_eq!(f.max_in_flight, 40);
}

/// A live start (no desired change given): `nodes` Ready nodes on [`CURRENT_AMI`], the desired
/// AMI `desired`, as `simulate --live` builds it.
fn live_start(p: &Policy, nodes: u32, from: DateTime<Utc>, desired: &str) -> PoolStart {
    let mut start = PoolStart::synthetic(p.clone(), nodes, from, TimeDelta::zero(), from);
    start.desired_change = None;
    start.snapshot.gates.desired_ami = Some(desired.to_string());
    start
}

/// `--live`: prod (on its desired AMI, promoting from test with soak 2h) is not done while
/// test rolls a new AMI: it waits for test's done plus the soak, then rotates to it.
#[test]
fn a_live_pool_waits_for_its_upstream_soak_then_rotates() {
    let s = settings(MONDAY, 2, 10);
    let from = at(MONDAY);
    let test = pol(
        "test",
        false,
        "disruption:\n  budgets:\n    - nodes: \"1\"\n",
    );
    let prod = pol(
        "prod",
        false,
        "promotion:\n  from: prod/test\n  soak: 2h\ndisruption:\n  budgets:\n    - nodes: \"2\"\n",
    );
    let f = simulate(
        vec![
            live_start(&prod, 4, from, CURRENT_AMI),
            live_start(&test, 3, from, NEW_AMI),
        ],
        &s,
    );
    let (prod_f, test_f) = (&f.pools[0], &f.pools[1]);
    let test_done = test_f.done.expect("test is done");
    assert!(test_done > from);
    let promo = prod_f
        .promotion
        .as_ref()
        .expect("prod's promotion forecast");
    assert_eq!(promo.from.as_deref(), Some("prod/test"));
    assert_eq!(promo.upstream_done, Some(test_done));
    assert_eq!(promo.desired_at, Some(test_done + TimeDelta::hours(2)));
    assert_eq!(promo.waits_from, Some(from));
    assert_eq!(prod_f.rotations.len(), 4, "{:?}", prod_f.rotations);
    assert!(
        prod_f
            .rotations
            .iter()
            .all(|r| r.start >= test_done + TimeDelta::hours(2))
    );
    assert!(
        prod_f
            .done
            .is_some_and(|d| d > test_done + TimeDelta::hours(2))
    );
    let v = serde_json::to_value(prod_f).unwrap();
    assert_eq!(
        v["promotion"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["from", "upstreamDone", "desiredAt"]
    );

    // The upstream done at the start, soaking for 90m already: the change comes in 30m.
    let mut soaked = live_start(&test, 3, from, NEW_AMI);
    for m in &mut soaked.snapshot.members {
        m.image_id = Some(NEW_AMI.into());
    }
    soaked.release.soaking_since = Some(from - min(90));
    let f = simulate(vec![live_start(&prod, 4, from, CURRENT_AMI), soaked], &s);
    let promo = f.pools[0].promotion.as_ref().unwrap();
    assert_eq!(promo.upstream_done, Some(from));
    assert_eq!(promo.desired_at, Some(from + min(30)));
    assert!(
        f.pools[0]
            .rotations
            .iter()
            .all(|r| r.start >= from + min(30))
    );

    // Other images of one release (another region): nothing to promote, done from the start.
    let mut up = live_start(&test, 3, from, "ami-west");
    up.release.release = Some("1.30.6-20241101".into());
    let mut down = live_start(&prod, 4, from, CURRENT_AMI);
    down.release.release = Some("1.30.6-20241101".into());
    let f = simulate(vec![down, up], &s);
    assert!(f.pools[0].promotion.is_none());
    assert!(f.pools[0].rotations.is_empty());
    assert_eq!(f.pools[0].done, Some(from));

    // The upstream paused all along: never proven, the pool waits to the end (not done).
    let paused = pol("test", false, "paused: true\n");
    let f = simulate(
        vec![
            live_start(&prod, 4, from, CURRENT_AMI),
            live_start(&paused, 3, from, NEW_AMI),
        ],
        &s,
    );
    let promo = f.pools[0].promotion.as_ref().unwrap();
    assert_eq!((promo.upstream_done, promo.desired_at), (None, None));
    assert!(f.pools[0].rotations.is_empty() && f.pools[0].done.is_none());
}

/// What a pool record says of its release: the desired AMI's release and its open soak
/// period on that AMI; nothing of a pin's release, no soak on another image.
#[test]
fn release_state_reads_the_pool_record() {
    use crate::promotion::{Release, SoakPeriod};
    use crate::state::{OperatorAction, Pin, PoolRecord};
    let from = at(MONDAY);
    let ami = |id: &str| crate::ami::resolve::Ami {
        id: id.into(),
        name: "amazon-eks-node-al2023-x86_64-standard-1.30-v20241101".into(),
        architecture: crate::image::Architecture::X86_64,
        variant: None,
        creation_date: "2024-11-01T00:00:00Z".into(),
        deprecated: false,
        source: crate::ami::select::Provenance {
            term: 0,
            field: "alias".into(),
            value: "al2023@latest".into(),
            parameter: None,
        },
    };
    let period = |image: &str, until: Option<DateTime<Utc>>| SoakPeriod {
        nodes: None,
        release: Release("v".into()),
        image: image.into(),
        since: from - min(90),
        until,
    };
    let mut record = PoolRecord {
        desired: Some(ami("ami-west")),
        ledger: vec![
            period("ami-old", Some(from - min(100))),
            period("ami-west", None),
        ],
        ..PoolRecord::default()
    };
    let state = record.release_state();
    assert_eq!(state.release.as_deref(), Some("v20241101"));
    assert_eq!(state.soaking_since, Some(from - min(90)));
    // The open period is on another image than the pool runs: no soak under way.
    record.ledger = vec![period("ami-old", None)];
    assert_eq!(record.release_state().soaking_since, None);
    // Pinned: the pin's image runs, its release is not known.
    record.pin = Some(Pin {
        ami: "ami-old".into(),
        name: None,
        by: OperatorAction {
            reason: "r".into(),
            at: from,
            by: None,
        },
    });
    let pinned = record.release_state();
    assert_eq!(pinned.release, None);
    assert_eq!(pinned.soaking_since, Some(from - min(90)));
}

/// An attribute of an SVG element's opening tag (`el`: what follows the tag name).
fn svg_attr(el: &str, name: &str) -> Option<f64> {
    let start = el.find(&format!(" {name}=\""))? + name.len() + 3;
    el[start..].split('"').next()?.parse().ok()
}

/// Every `<text>` of an SVG: its attributes (the opening tag), its own text (before any
/// `<title>`, unescaped), its title.
fn svg_texts(svg: &str) -> Vec<(String, String, String)> {
    svg.split("<text")
        .skip(1)
        .map(|t| {
            let (attrs, rest) = t.split_once('>').unwrap_or_default();
            let own = rest.split('<').next().unwrap_or_default();
            let title = rest
                .split_once("<title>")
                .map(|(_, x)| x.split('<').next().unwrap_or_default())
                .unwrap_or_default();
            let unescape = |s: &str| s.replace("&amp;", "&").replace("&quot;", "\"");
            (attrs.to_string(), unescape(own), unescape(title))
        })
        .collect()
}

/// Each band (`<g>` with a `<rect>`): its class, x range, label and title.
fn svg_bands(svg: &str) -> Vec<(String, f64, f64, String, String)> {
    svg.split("<g><rect")
        .skip(1)
        .map(|g| {
            let g = g.split("</g>").next().unwrap_or_default();
            let attrs = g.split('>').next().unwrap_or_default();
            let class = attrs
                .split(" class=\"")
                .nth(1)
                .and_then(|c| c.split('"').next())
                .unwrap_or_default()
                .to_string();
            let (x, w) = (
                svg_attr(attrs, "x").unwrap(),
                svg_attr(attrs, "width").unwrap(),
            );
            let (_, label, _) = svg_texts(g).into_iter().next().unwrap_or_default();
            // The band's own title (its label has none).
            let title = g
                .split("<title>")
                .nth(1)
                .and_then(|t| t.split('<').next())
                .unwrap_or_default()
                .to_string();
            (class, x, x + w, label, title)
        })
        .collect()
}

/// The chart's x range, from the axis line along its top.
fn chart_x(svg: &str) -> (f64, f64) {
    svg.split("<line class=\"day\"")
        .skip(1)
        .map(|l| l.split('>').next().unwrap_or_default())
        .find(|l| svg_attr(l, "y1") == svg_attr(l, "y2"))
        .map(|l| (svg_attr(l, "x1").unwrap(), svg_attr(l, "x2").unwrap()))
        .expect("the axis line")
}

/// Where the picture draws instant `t` (to the 0.1 px it prints).
fn x_of(f: &Forecast, svg: &str, t: DateTime<Utc>) -> f64 {
    let (left, right) = chart_x(svg);
    let span = (f.to - f.from).num_seconds() as f64;
    left + (right - left) * (t.clamp(f.from, f.to) - f.from).num_seconds() as f64 / span
}

/// A pool waiting for its upstream's soak carries a band named after it, over the wait the
/// forecast gives (from the new AMI to the promoted change); one whose upstream is never done
/// says so to the end, and why it is not done.
#[test]
fn a_promotion_wait_is_a_band_named_after_the_upstream_soak() {
    let s = settings(MONDAY, 3, 10);
    let from = at(MONDAY);
    let new_ami_at = from + TimeDelta::hours(2);
    let test = pol(
        "test",
        false,
        "disruption:\n  budgets:\n    - nodes: \"1\"\n",
    );
    let prod = pol(
        "prod",
        false,
        "promotion:\n  from: prod/test\n  soak: 24h\n",
    );
    let orphan = pol(
        "orphan",
        false,
        "promotion:\n  from: prod/elsewhere\n  soak: 2h\n",
    );
    let start =
        |p: &Policy| PoolStart::synthetic(p.clone(), 4, from, TimeDelta::zero(), new_ami_at);
    let f = simulate(vec![start(&test), start(&prod), start(&orphan)], &s);
    let promo = f.pools[1].promotion.as_ref().unwrap();
    let desired_at = promo
        .desired_at
        .expect("prod is promoted within the forecast");
    let svg = picture::svg(&f);
    let bands = svg_bands(&svg);
    let band = bands
        .iter()
        .find(|b| b.3.contains("waiting for prod/test soak"))
        .unwrap_or_else(|| panic!("no band names the wait: {bands:?}"));
    assert_eq!(band.0, "promo");
    assert!(
        (band.1 - x_of(&f, &svg, new_ami_at)).abs() <= 0.11,
        "{band:?}"
    );
    assert!(
        (band.2 - x_of(&f, &svg, desired_at)).abs() <= 0.11,
        "{band:?}"
    );
    assert!(band.4.contains("soak 24h"), "{band:?}");
    assert!(
        band.3.contains("until") || band.3.ends_with('…'),
        "{band:?}"
    );
    // The orphan's upstream is not simulated: it waits to the end, and says so.
    let orphan_band = bands
        .iter()
        .find(|b| b.3.contains("waiting for prod/elsewhere"))
        .unwrap_or_else(|| panic!("{bands:?}"));
    assert!((orphan_band.2 - x_of(&f, &svg, f.to)).abs() <= 0.11);
    let texts = svg_texts(&svg);
    assert!(
        texts.iter().any(|(a, t, title)| a.contains("class=\"why\"")
            && t.contains("waiting for prod/elsewhere")
            && title.contains("nothing proves the release")),
        "{texts:?}"
    );
    // The HTML's table lists the wait.
    assert!(picture::html(&f).contains("waiting for prod/test to run the new release"));
}

/// A gate's band says which gate: paused (by whom, why), halted; a pool held all week says why
/// in its row, with the full reason in the title; a pool held by a closed budget names it.
#[test]
fn gate_bands_are_named_and_a_held_pool_says_why() {
    let s = settings(MONDAY, 7, 10);
    let from = at(MONDAY);
    let start = |p: Policy| PoolStart::synthetic(p, 3, from, TimeDelta::zero(), from);
    let mut paused = start(pol("paused", false, ""));
    paused.snapshot.gates.paused = Some("by alice at 2026-11-29T10:00:00Z: CVE triage".into());
    let mut halted = start(pol("halted", false, ""));
    halted.snapshot.gates.halted = Some("replacement i-1 never Ready".into());
    let closed = start(pol(
        "closed",
        false,
        "disruption:\n  budgets:\n    - nodes: \"0\"\n",
    ));
    let f = simulate(vec![paused, halted, closed], &s);
    let svg = picture::svg(&f);
    let bands = svg_bands(&svg);
    let gate_labels: Vec<&str> = bands
        .iter()
        .filter(|b| b.0 == "gate")
        .map(|b| b.3.as_str())
        .collect();
    assert_eq!(gate_labels.len(), 2, "{bands:?}");
    assert!(
        gate_labels[0].starts_with("paused by alice") && gate_labels[0].contains("CVE triage"),
        "{gate_labels:?}"
    );
    assert!(
        gate_labels[1].starts_with("halted: replacement i-1"),
        "{gate_labels:?}"
    );
    let why: Vec<(String, String)> = svg_texts(&svg)
        .into_iter()
        .filter(|(a, _, _)| a.contains("class=\"why\""))
        .map(|(_, t, title)| (t, title))
        .collect();
    assert_eq!(why.len(), 3, "{why:?}");
    assert!(why[0].0.contains("paused by alice"), "{why:?}");
    assert!(why[1].0.contains("halted"), "{why:?}");
    assert!(
        why[2].0.contains("disruption.budgets[0]") && why[2].1.contains("0 of 3 nodes"),
        "{why:?}"
    );
    // The reasons lie in the chart, under their pool's row label.
    let (left, _) = chart_x(&svg);
    assert!(
        svg_texts(&svg)
            .iter()
            .filter(|(a, _, _)| a.contains("class=\"why\""))
            .all(|(a, _, _)| svg_attr(a, "x").unwrap() >= left)
    );
}

/// A pool name too long for the label column wraps: every line of it stays clear of the chart
/// (taking 7 px a bold character), the lines give the whole name, and the row is tall enough.
#[test]
fn a_long_pool_name_wraps_clear_of_the_chart() {
    let s = settings(MONDAY, 7, 10);
    let from = at(MONDAY);
    let long = "general-purpose-arm64-workers-for-the-batch-jobs";
    let f = simulate(
        vec![
            PoolStart::synthetic(pol(long, false, ""), 3, from, TimeDelta::zero(), from),
            PoolStart::synthetic(pol("next", false, ""), 3, from, TimeDelta::zero(), from),
        ],
        &s,
    );
    let svg = picture::svg(&f);
    let (left, _) = chart_x(&svg);
    let row_y = |class: &str| {
        svg.split(&format!("<rect class=\"{class}\""))
            .nth(1)
            .and_then(|r| svg_attr(r.split('>').next().unwrap_or_default(), "y"))
            .unwrap()
    };
    let (first_row, second_row) = (row_y("rowa"), row_y("rowb"));
    let texts = svg_texts(&svg);
    // The label column's texts (not the header above the rows).
    let labels: Vec<&(String, String, String)> = texts
        .iter()
        .filter(|(a, _, _)| svg_attr(a, "x").is_some_and(|x| x < left))
        .filter(|(a, _, _)| svg_attr(a, "y").is_some_and(|y| y > first_row))
        .filter(|(a, _, _)| {
            ["p", "s", "nd"]
                .iter()
                .any(|c| a.contains(&format!("class=\"{c}\"")))
        })
        .collect();
    for (a, t, _) in &labels {
        let x = svg_attr(a, "x").unwrap();
        let right = x + 7.0 * t.chars().count() as f64;
        assert!(
            right <= left,
            "{t:?} ends at {right} px, the chart starts at {left}"
        );
    }
    let name_lines: Vec<&str> = labels
        .iter()
        .filter(|(a, _, title)| {
            a.contains("class=\"p\"") && title.starts_with("prod/general-purpose")
        })
        .map(|(_, t, _)| t.as_str())
        .collect();
    assert!(name_lines.len() >= 3, "{name_lines:?}");
    assert_eq!(name_lines.concat(), format!("prod/{long}"));
    // Every label line of the first pool lies above the second row.
    let next_label = labels
        .iter()
        .find(|(_, t, _)| t == "prod/next")
        .map(|(a, _, _)| svg_attr(a, "y").unwrap())
        .unwrap();
    assert!(next_label > second_row);
    for (a, _, title) in &labels {
        if title.contains(long) {
            assert!(svg_attr(a, "y").unwrap() < second_row, "{a}");
        }
    }
}

/// A failing new AMI (`--failures new:3@2h`) in test, prod promoting from test with `soak`.
fn failing_chain(soak: &str, s: &Settings) -> Forecast {
    let from = s.from;
    let test = pol(
        "test",
        false,
        "disruption:\n  budgets:\n    - nodes: \"4\"\n",
    );
    let prod = pol(
        "prod",
        false,
        &format!(
            "promotion:\n  from: prod/test\n  soak: {soak}\ndisruption:\n  budgets:\n    - nodes: \"1\"\n"
        ),
    );
    let start = |p: &Policy, n| PoolStart::synthetic(p.clone(), n, from, TimeDelta::zero(), from);
    simulate(vec![start(&test, 6), start(&prod, 3)], s)
}

fn with_failure(mut s: Settings, nodes: u32, after: i64) -> Settings {
    s.failures = vec![Failure {
        ami: NEW_AMI.into(),
        nodes,
        after: min(after),
    }];
    s
}

/// The #2681 pattern: 3 of test's 6 new nodes turn unhealthy 2h after joining. Test is indicted
/// at the minute the third does, goes back to the old AMI and rolls its Ready new nodes back
/// (Drifted, within its budget; the unhealthy ones count as disrupting and stay); prod (soak
/// 24h) never takes the release.
#[test]
fn a_failing_release_is_indicted_rolled_back_and_never_promoted() {
    let s = with_failure(settings(MONDAY, 2, 10), 3, 120);
    let from = s.from;
    let f = failing_chain("24h", &s);
    let (test, prod) = (&f.pools[0], &f.pools[1]);
    // Budget 4 of 6: 4 rotations at 00:00, 2 at 00:10; the first 3 to join did at 00:10.
    let joined = from + min(10);
    let i = test.indicted.as_ref().expect("test indicted");
    assert_eq!(i.at, joined + TimeDelta::hours(2));
    assert_eq!(i.ami, NEW_AMI);
    assert_eq!(i.by, "prod/test");
    assert_eq!(i.rolled_back_to.as_deref(), Some(CURRENT_AMI));
    assert!(
        i.why
            .starts_with("3 of 6 nodes on ami-new turned unhealthy"),
        "{}",
        i.why
    );
    assert_eq!(
        i.label,
        "indicted: 3 nodes unhealthy after 2h; rolled back to ami-current"
    );
    assert_eq!(i.unhealthy_left, 3);
    assert_eq!(i.done_before, Some(from + min(20)));
    // The rollback: the 3 Ready nodes on ami-new, Drifted, from the indictment, at most
    // 4 - 3 unhealthy = 1 at a time.
    let back: Vec<&RotationSpan> = test.rotations.iter().filter(|r| r.start >= i.at).collect();
    assert_eq!(back.len(), 3, "{back:?}");
    assert!(
        back.iter()
            .all(|r| r.reason == RotationReason::Drifted && !r.forced)
    );
    for pair in back.windows(2) {
        assert!(pair[1].start >= pair[0].end, "one at a time: {back:?}");
    }
    assert_eq!(back[0].start, i.at);
    assert_eq!(test.done, None, "the unhealthy nodes stay on ami-new");
    // Prod never takes it, and says why.
    assert!(prod.rotations.is_empty(), "{:?}", prod.rotations);
    let promo = prod.promotion.as_ref().unwrap();
    assert_eq!(promo.desired_at, None);
    assert_eq!(promo.indicted, Some((i.at, NEW_AMI.to_string())));
    assert!(prod.indicted.is_none());
    let v = serde_json::to_value(test).unwrap();
    assert_eq!(
        v["indicted"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["ami", "at", "by", "why", "rolledBackTo", "unhealthyLeft"]
    );
    assert_eq!(v["indicted"]["at"], "2026-11-30T02:10:00Z");
}

/// Prod took the release before the indictment (soak 1h): it rolls back at the minute test
/// indicts it, to its own previous AMI, within its own budget (1 at a time).
#[test]
fn a_pool_that_took_the_release_rolls_back_when_another_indicts_it() {
    let s = with_failure(settings(MONDAY, 2, 10), 3, 120);
    let f = failing_chain("1h", &s);
    let (test, prod) = (&f.pools[0], &f.pools[1]);
    let t = test.indicted.as_ref().unwrap();
    let p = prod.indicted.as_ref().expect("prod rolled back too");
    assert_eq!((p.at, p.by.as_str()), (t.at, "prod/test"));
    assert_eq!(p.rolled_back_to.as_deref(), Some(CURRENT_AMI));
    assert_eq!(p.label, "indicted in prod/test; rolled back to ami-current");
    let took = prod.promotion.as_ref().unwrap().desired_at.unwrap();
    assert!(took < t.at);
    let back: Vec<&RotationSpan> = prod.rotations.iter().filter(|r| r.start >= p.at).collect();
    assert_eq!(back.len(), 3, "every prod node back: {:?}", prod.rotations);
    for pair in back.windows(2) {
        assert!(pair[1].start >= pair[0].end, "budget 1: {back:?}");
    }
    // Prod's own new nodes were healthy when it rolled back: done on ami-current.
    assert_eq!(p.unhealthy_left, 0);
    assert_eq!(prod.done, Some(back[2].end));
}

/// No failure (or one that never indicts) leaves the forecast as before.
#[test]
fn no_failure_forecasts_as_before() {
    let s = settings(MONDAY, 2, 10);
    let base = failing_chain("1h", &s);
    assert!(base.pools.iter().all(|p| p.indicted.is_none()));
    // One unhealthy node of 6 is not enough (3, or all when fewer): nothing changes.
    let one = failing_chain("1h", &with_failure(s.clone(), 1, 120));
    assert_eq!(one, base);
    // Another AMI failing: nothing changes.
    let mut other = with_failure(s, 3, 120);
    other.failures[0].ami = "ami-other".into();
    assert_eq!(failing_chain("1h", &other), base);
}

/// A pool whose desired AMI does not change in the forecast has nothing to go back to: it is
/// halted. Failures are checked: the message names the field, the value and what is expected.
#[test]
fn failures_halt_without_a_previous_ami_and_are_checked() {
    let s = with_failure(settings(MONDAY, 1, 10), 2, 30);
    let p = pol(
        "a",
        false,
        "disruption:\n  budgets:\n    - nodes: \"2\"\nexpireAfter: 24h\n",
    );
    // Nodes on ami-new from the start; 2 expire and are replaced at 00:10 .. 00:20 onto it.
    let mut start = PoolStart::synthetic(p, 2, s.from, TimeDelta::hours(24), s.from);
    start.desired_change = None;
    start.snapshot.gates.desired_ami = Some(NEW_AMI.into());
    start.snapshot.group.launch_template_image = Some(NEW_AMI.into());
    for m in &mut start.snapshot.members {
        m.image_id = Some(NEW_AMI.into());
    }
    let f = simulate(vec![start], &s);
    let i = f.pools[0].indicted.as_ref().expect("indicted");
    assert_eq!(i.rolled_back_to, None);
    assert!(
        i.label.ends_with("halted (nothing to go back to)"),
        "{}",
        i.label
    );
    assert!(f.pools[0].rotations.iter().all(|r| r.start < i.at));

    let bad = |f: Failure| {
        Settings {
            failures: vec![f],
            ..settings(MONDAY, 1, 10)
        }
        .check()
        .unwrap_err()
    };
    let f = |ami: &str, nodes, after| Failure {
        ami: ami.into(),
        nodes,
        after: min(after),
    };
    assert_eq!(
        bad(f(NEW_AMI, 0, 10)),
        "failures[0].nodes: 0 is out of range; expected at least 1 node"
    );
    assert!(bad(f(NEW_AMI, 1, -10)).starts_with("failures[0].after: -600s is negative"));
    assert!(bad(f(" ", 1, 10)).starts_with("failures[0].ami: \" \" is empty"));
    let twice = Settings {
        failures: vec![f(NEW_AMI, 1, 10), f(NEW_AMI, 2, 10)],
        ..settings(MONDAY, 1, 10)
    };
    assert_eq!(
        twice.check().unwrap_err(),
        "failures[1].ami: ami-new is also failures[0]; expected each AMI once"
    );
}

/// The picture marks the indictment on the pool's row (a red line at its minute, named) and
/// draws the rollback rotations as such; prod's promotion band says it never comes.
#[test]
fn the_picture_marks_the_indictment_and_the_rollback() {
    let s = with_failure(settings(MONDAY, 2, 10), 3, 120);
    let f = failing_chain("24h", &s);
    let svg = picture::svg(&f);
    let i = f.pools[0].indicted.as_ref().unwrap();
    let line = svg
        .split("<line class=\"indicted\"")
        .nth(1)
        .and_then(|l| l.split('>').next())
        .expect("an indictment line");
    assert!((svg_attr(line, "x1").unwrap() - x_of(&f, &svg, i.at)).abs() <= 0.11);
    assert!(
        svg_texts(&svg)
            .iter()
            .any(|(a, t, _)| a.contains("ind")
                && t.starts_with("indicted: 3 nodes unhealthy after 2h")),
        "{svg}"
    );
    assert_eq!(
        svg.matches("class=\"rollback\"").count(),
        3 + 1,
        "3 bars and the legend"
    );
    let bands = svg_bands(&svg);
    assert!(
        bands
            .iter()
            .any(|b| b.0 == "promo" && b.3.starts_with("never: ami-new indicted")),
        "{bands:?}"
    );
    assert!(picture::html(&f).contains("indicted: 3 nodes unhealthy after 2h; rolled back"));
}

/// A node that fails long after joining (`--failures new:1@30h`, past `health.window` 24h) is
/// no evidence against its release but a node to repair: the forecast shows its repair, reason
/// `Unhealthy`, starting once `repair.conditions.Ready` (30m) has passed, and the picture draws
/// it in its own colour. Nodes of a release under watch are held instead (the failing release
/// of the other tests is indicted, not repaired onto).
#[test]
fn a_node_failing_after_the_window_is_repaired_in_the_forecast() {
    let s = with_failure(settings(MONDAY, 3, 10), 1, 30 * 60);
    let from = s.from;
    let p = pol(
        "test",
        false,
        "disruption:\n  budgets:\n    - nodes: \"2\"\n",
    );
    let f = simulate(
        vec![PoolStart::synthetic(p, 6, from, TimeDelta::zero(), from)],
        &s,
    );
    let pool = &f.pools[0];
    assert!(pool.indicted.is_none(), "no evidence after the window");
    let repairs: Vec<&RotationSpan> = pool
        .rotations
        .iter()
        .filter(|r| r.reason == RotationReason::Unhealthy)
        .collect();
    assert_eq!(repairs.len(), 1, "{:?}", pool.rotations);
    // The first node to join did at 00:10 (rotation 10 minutes), failed 30h later, repaired
    // 30 minutes after that.
    assert_eq!(
        repairs[0].start,
        from + min(10) + TimeDelta::hours(30) + min(30)
    );
    let svg = super::picture::svg(&f);
    assert!(svg.contains("class=\"Unhealthy\""), "drawn as a repair");
}
