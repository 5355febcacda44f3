//! Table tests of the planner: classification, ordering, budgets, gates, counting, JSON shape.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use super::Snapshot;
use super::*;
use crate::fleet::{Gates, Group, Lifecycle, Member, NodeStatus};
use crate::policy::Policy;
use crate::rotation::{Rotation, RotationReason, Step, Surge};

pub(crate) const OLD: &str = "ami-old";
pub(crate) const NEW: &str = "ami-new";

/// Saturday 2026-12-05 12:00 UTC.
pub(crate) fn now() -> DateTime<Utc> {
    at("2026-12-05T12:00:00Z")
}

pub(super) fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn hours(h: u64) -> Duration {
    Duration::from_secs(h * 3600)
}

/// A valid policy with `extra` appended (budgets, expireAfter, ...).
pub(crate) fn policy(extra: &str) -> Policy {
    let doc = format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\n\
         amiSelectorTerms:\n  - alias: al2023@latest\n{extra}"
    );
    let parsed = crate::policy::parse(&doc);
    parsed
        .policy
        .unwrap_or_else(|| panic!("invalid test policy {:?}:\n{doc}", parsed.problems))
}

fn budgets(nodes: &str) -> Policy {
    policy(&format!(
        "disruption:\n  budgets:\n    - nodes: \"{nodes}\"\nexpireAfter: Never\n"
    ))
}

/// An in-service Ready member running `image`, launched `age_h` hours before [`now`].
pub(crate) fn member(id: &str, image: &str, age_h: i64) -> Member {
    Member {
        instance_id: id.to_string(),
        availability_zone: "eu-west-1a".to_string(),
        image_id: Some(image.to_string()),
        launch_time: now() - TimeDelta::hours(age_h),
        lifecycle: Lifecycle::InService,
        node: Some(NodeStatus {
            name: format!("node-{id}"),
            ready: true,
            unschedulable: false,
            disrupted: None,
            evictable_pods: 3,
            pods_counted: false,
            marks: Default::default(),
            joined: None,
            conditions: Vec::new(),
            opt_out: None,
        }),
    }
}

fn pods(mut m: Member, n: u32) -> Member {
    if let Some(node) = &mut m.node {
        node.evictable_pods = n;
    }
    m
}

fn not_ready(mut m: Member) -> Member {
    if let Some(node) = &mut m.node {
        node.ready = false;
    }
    m
}

pub(crate) fn rotation(id: &str, reason: RotationReason, step: Step) -> Rotation {
    let mut r = Rotation::new(
        "prod/general",
        id,
        reason,
        false,
        now() - TimeDelta::minutes(5),
    );
    r.step = step;
    r
}

pub(crate) fn snapshot(policy: Policy, members: Vec<Member>, rotations: Vec<Rotation>) -> Snapshot {
    Snapshot {
        policy,
        gates: Gates {
            desired_ami: Some(NEW.to_string()),
            paused: None,
            halted: None,
            stopped: None,
        },
        group: Group {
            name: "prod-general".to_string(),
            min_size: 1,
            max_size: 20,
            desired_capacity: i32::try_from(members.len()).unwrap(),
            launch_template_image: Some(NEW.to_string()),
            suspended_processes: Vec::new(),
            do_not_repair: false,
            retained: Vec::new(),
        },
        members,
        rotations,
        adopted_at: None,
        repair: Default::default(),
    }
}

fn drifted(n: usize) -> Vec<Member> {
    (0..n)
        .map(|i| member(&format!("i-{i:02}"), OLD, 10 + i64::try_from(i).unwrap()))
        .collect()
}

pub(super) fn started(p: &Plan) -> Vec<(String, RotationReason, bool)> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::StartRotation {
                instance_id,
                reason,
                forced,
            } => Some((instance_id.clone(), *reason, *forced)),
            _ => None,
        })
        .collect()
}

fn started_ids(p: &Plan) -> Vec<String> {
    started(p).into_iter().map(|(id, _, _)| id).collect()
}

fn advanced(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Advance { instance_id, .. } => Some(instance_id.clone()),
            _ => None,
        })
        .collect()
}

fn messages(p: &Plan) -> Vec<String> {
    p.decisions.iter().map(|d| d.message.clone()).collect()
}

fn has_message(p: &Plan, needle: &str) -> bool {
    p.decisions.iter().any(|d| d.message.contains(needle))
}

// ---------------------------------------------------------------------------------------------
// Classification

/// (image, age hours, desired, expireAfter, terminationGracePeriod, expected need).
type ClassifyCase = (
    Option<&'static str>,
    i64,
    Option<&'static str>,
    Option<Duration>,
    Option<Duration>,
    Option<Need>,
);

#[test]
fn drift_and_expiry_classification() {
    let e = Some(hours(720));
    let g = Some(hours(2));
    let nd = Need {
        reason: RotationReason::Drifted,
        forced: false,
    };
    let ne = Need {
        reason: RotationReason::Expired,
        forced: false,
    };
    let nf = Need {
        reason: RotationReason::Expired,
        forced: true,
    };
    let cases: Vec<ClassifyCase> = vec![
        (Some(NEW), 10, Some(NEW), e, g, None),
        (Some(OLD), 10, Some(NEW), e, g, Some(nd)),
        (None, 10, Some(NEW), e, g, None),
        (Some(OLD), 10, None, e, g, None),
        (Some(NEW), 719, Some(NEW), e, g, None),
        (Some(NEW), 720, Some(NEW), e, g, Some(ne)),
        (Some(NEW), 721, Some(NEW), e, g, Some(ne)),
        (Some(NEW), 722, Some(NEW), e, g, Some(nf)),
        (Some(NEW), 5000, Some(NEW), e, None, Some(ne)),
        (Some(NEW), 5000, Some(NEW), None, g, None),
        (Some(OLD), 5000, Some(NEW), None, g, Some(nd)),
        (Some(OLD), 721, Some(NEW), e, g, Some(nd)),
        (Some(OLD), 725, Some(NEW), e, g, Some(nf)),
        (Some(OLD), 725, None, e, g, Some(nf)),
        (None, 725, Some(NEW), e, g, Some(nf)),
        (
            Some(NEW),
            0,
            Some(NEW),
            Some(Duration::ZERO),
            None,
            Some(ne),
        ),
    ];
    for (i, (image, age, desired, expire, grace, want)) in cases.into_iter().enumerate() {
        let mut m = member("i-1", "x", age);
        m.image_id = image.map(str::to_string);
        let a = assess(&m, desired, &exp(expire, grace), now());
        assert_eq!(a.need(), want, "case {i}: {a:?}");
        assert_eq!(a.age, hours(u64::try_from(age).unwrap()), "case {i}");
    }
}

/// The expiration rules of a pool adopted before any node launched (forced from launch).
fn exp(after: Option<Duration>, grace: Option<Duration>) -> Expiration {
    Expiration {
        after,
        grace,
        adopted: None,
    }
}

#[test]
fn expiry_states_and_future_launch_time() {
    let m = member("i-1", NEW, 725);
    let launch = m.launch_time;
    let a = assess(&m, Some(NEW), &exp(Some(hours(720)), Some(hours(2))), now());
    assert_eq!(
        a.expiry,
        Expiry::Forced {
            overdue: hours(3),
            forced_at: launch + TimeDelta::hours(722)
        }
    );
    let a = assess(&m, Some(NEW), &exp(Some(hours(720)), None), now());
    assert_eq!(
        a.expiry,
        Expiry::Expired {
            overdue: hours(5),
            forced_at: None
        }
    );
    let a = assess(&m, Some(NEW), &exp(Some(hours(800)), None), now());
    assert_eq!(
        a.expiry,
        Expiry::Fresh {
            remaining: hours(75)
        }
    );
    assert_eq!(
        assess(&m, Some(NEW), &exp(None, None), now()).expiry,
        Expiry::Never
    );
    // Clock skew: launched "in the future" is age zero, never expired.
    let future = member("i-2", NEW, -3);
    let a = assess(
        &future,
        Some(NEW),
        &exp(Some(Duration::from_secs(1)), None),
        now(),
    );
    assert_eq!(a.age, Duration::ZERO);
    assert_eq!(a.need(), None);
    // Overflowing expireAfter + grace: never forced.
    let a = assess(
        &m,
        Some(NEW),
        &exp(Some(hours(1)), Some(Duration::MAX)),
        now(),
    );
    assert_eq!(
        a.expiry,
        Expiry::Expired {
            overdue: hours(724),
            forced_at: None
        }
    );
}

/// Adoption never stampedes: a node older than `expireAfter + terminationGracePeriod` when the
/// pool is adopted is expired (budgeted) at once and forced only a full
/// `expireAfter + terminationGracePeriod` after adoption; a node launched after adoption is
/// forced from its launch as before.
#[test]
fn forced_expiry_counts_from_adoption() {
    let old = member("i-old", NEW, 1000);
    let adopted = now() - TimeDelta::hours(1);
    let e = Expiration {
        after: Some(hours(720)),
        grace: Some(hours(2)),
        adopted: Some(adopted),
    };
    let deadline = adopted + TimeDelta::hours(722);
    let a = assess(&old, Some(NEW), &e, now());
    assert_eq!(
        a.expiry,
        Expiry::Expired {
            overdue: hours(280),
            forced_at: Some(deadline)
        }
    );
    assert_eq!(
        a.need(),
        Some(Need {
            reason: RotationReason::Expired,
            forced: false
        })
    );
    // Forced once the deadline from adoption passes, not a minute before.
    let before = deadline - TimeDelta::minutes(1);
    assert!(!assess(&old, Some(NEW), &e, before).need().unwrap().forced);
    assert_eq!(
        assess(&old, Some(NEW), &e, deadline).expiry,
        Expiry::Forced {
            overdue: Duration::ZERO,
            forced_at: deadline
        }
    );
    // Launched after adoption: the launch counts.
    let young = member("i-young", NEW, 0);
    let e_before = Expiration {
        adopted: Some(now() - TimeDelta::hours(5000)),
        ..e
    };
    assert_eq!(
        e_before.forced_at(young.launch_time),
        Some(young.launch_time + TimeDelta::hours(722))
    );
    // Without adoption recorded, the launch alone counts (forced at once).
    assert!(
        assess(&old, Some(NEW), &exp(e.after, e.grace), now())
            .need()
            .unwrap()
            .forced
    );
}

#[test]
fn drift_wins_over_budgeted_expiry_and_node_is_reported_once() {
    let p = policy(
        "disruption:\n  budgets:\n    - nodes: \"5\"\nexpireAfter: 720h\nterminationGracePeriod: 2h\n",
    );
    let s = snapshot(
        p,
        vec![
            member("i-a", OLD, 721),
            member("i-b", OLD, 800),
            member("i-c", NEW, 721),
        ],
        vec![],
    );
    let plan = plan(&s, now());
    let c: Vec<(String, RotationReason, bool)> = plan
        .candidates
        .iter()
        .map(|c| (c.instance_id.clone(), c.reason, c.forced))
        .collect();
    assert_eq!(
        c,
        vec![
            ("i-b".to_string(), RotationReason::Expired, true),
            ("i-a".to_string(), RotationReason::Drifted, false),
            ("i-c".to_string(), RotationReason::Expired, false),
        ]
    );
    assert_eq!(started(&plan).len(), 3);
    for id in ["i-a", "i-b", "i-c"] {
        let about: Vec<_> = plan
            .decisions
            .iter()
            .filter(|d| d.instance_id.as_deref() == Some(id))
            .collect();
        assert_eq!(about.len(), 1, "{id}: {about:?}");
    }
    assert!(has_message(
        &plan,
        "starting i-a: Drifted (runs ami-old, desired ami-new; also expired: age 721h >= 720h), 3 evictable pod(s)"
    ));
    assert!(has_message(
        &plan,
        "starting i-b: Expired, forced (78h past its deadline 2026-12-02T06:00:00Z: expireAfter+terminationGracePeriod 720h+2h from launch or adoption, whichever is later; age 800h; no budget wait)"
    ));
    assert!(has_message(
        &plan,
        "starting i-c: Expired (age 721h, 1h past expireAfter 720h; forced from 2026-12-05T13:00:00Z)"
    ));
}

// ---------------------------------------------------------------------------------------------
// Ordering

#[test]
fn candidates_order_no_pods_then_oldest_then_id() {
    let s = snapshot(
        budgets("100%"),
        vec![
            pods(member("i-e", OLD, 50), 4),
            pods(member("i-d", OLD, 10), 0),
            pods(member("i-c", OLD, 90), 1),
            pods(member("i-b", OLD, 10), 0),
            pods(member("i-a", OLD, 90), 1),
            pods(member("i-f", OLD, 5), 0),
        ],
        vec![],
    );
    let p = plan(&s, now());
    let order: Vec<&str> = p
        .candidates
        .iter()
        .map(|c| c.instance_id.as_str())
        .collect();
    assert_eq!(order, ["i-b", "i-d", "i-f", "i-a", "i-c", "i-e"]);
    assert_eq!(started_ids(&p), order);
}

#[test]
fn forced_candidates_come_first() {
    let p = policy(
        "disruption:\n  budgets:\n    - nodes: \"1\"\nexpireAfter: 100h\nterminationGracePeriod: 1h\n",
    );
    let s = snapshot(
        p,
        vec![
            pods(member("i-drift", OLD, 10), 0),
            pods(member("i-forced", NEW, 200), 9),
        ],
        vec![],
    );
    let p = plan(&s, now());
    assert_eq!(
        started(&p),
        vec![("i-forced".to_string(), RotationReason::Expired, true)]
    );
    assert_eq!(p.candidates[1].instance_id, "i-drift");
    // The forced start consumed the single Drifted slot.
    assert!(
        p.blocked
            .as_deref()
            .unwrap()
            .starts_with("Drifted budget 0 (disruption.budgets[0] nodes \"1\" allows 1 of 2; 0 disrupting, 1 started this pass)"),
        "{:?}",
        p.blocked
    );
}

// ---------------------------------------------------------------------------------------------
// Budgets

#[test]
fn budget_two_on_six_starts_two() {
    let p = plan(&snapshot(budgets("2"), drifted(6), vec![]), now());
    assert_eq!(p.total, 6);
    assert_eq!(p.disrupting, 0);
    assert_eq!(
        p.allowed,
        Allowed {
            drifted: 2,
            expired: 2,
            unhealthy: 1,
        }
    );
    assert_eq!(started_ids(&p), ["i-05", "i-04"]); // oldest first
    assert_eq!(p.candidates.len(), 6);
    assert_eq!(
        p.blocked.as_deref(),
        Some(
            "Drifted budget 0 (disruption.budgets[0] nodes \"2\" allows 2 of 6; 0 disrupting, 2 started this pass)"
        )
    );
}

#[test]
fn budget_two_with_one_in_flight_starts_one_more() {
    let rot = rotation("i-05", RotationReason::Drifted, Step::Draining);
    let p = plan(&snapshot(budgets("2"), drifted(6), vec![rot]), now());
    assert_eq!(p.total, 6);
    assert_eq!(p.disrupting, 1);
    assert_eq!(p.allowed.drifted, 1);
    assert_eq!(started_ids(&p), ["i-04"]);
    assert_eq!(advanced(&p), ["i-05"]);
    assert_eq!(
        p.actions[0],
        Action::Advance {
            instance_id: "i-05".to_string(),
            step: Step::Draining
        }
    );
    assert!(!p.candidates.iter().any(|c| c.instance_id == "i-05"));
}

#[test]
fn percent_budget_rounds_up() {
    // 19 nodes x 20% = 4.
    let p = plan(&snapshot(budgets("20%"), drifted(19), vec![]), now());
    assert_eq!(p.allowed.drifted, 4);
    assert_eq!(started(&p).len(), 4);
}

#[test]
fn zero_budget_window_blocks_until_it_ends() {
    let pol = policy(
        "disruption:\n  budgets:\n    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 1 * * sat\"\n      duration: 48h\n      reasons: [Drifted]\nexpireAfter: Never\n",
    );
    let p = plan(&snapshot(pol.clone(), drifted(6), vec![]), now());
    assert!(started(&p).is_empty());
    assert_eq!(
        p.allowed,
        Allowed {
            drifted: 0,
            expired: 2,
            unhealthy: 1,
        }
    );
    assert_eq!(
        p.blocked.as_deref(),
        Some(
            "Drifted budget 0 until 2026-12-07T01:00:00Z (disruption.budgets[1] nodes \"0\" allows 0 of 6; 0 disrupting)"
        )
    );
    assert!(has_message(
        &p,
        "not starting: Drifted budget 0 until 2026-12-07T01:00:00Z (disruption.budgets[1] nodes \"0\" allows 0 of 6; 0 disrupting); 6 Drifted candidate(s) wait"
    ));
    // Monday after the window: 2 start.
    let p = plan(
        &snapshot(pol, drifted(6), vec![]),
        at("2026-12-07T01:00:00Z"),
    );
    assert_eq!(started(&p).len(), 2);
}

#[test]
fn until_skips_changes_that_do_not_lift_the_block() {
    // Frozen Sat 01:00 + 48h; a second freeze Mon 00:00 + 5h overlaps its end. From Saturday
    // noon the changes are Mon 00:00 (still 0), Mon 01:00 (still 0), Mon 05:00 (lifted).
    let pol = policy(
        "disruption:\n  budgets:\n    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 1 * * sat\"\n      duration: 48h\n    - nodes: \"0\"\n      schedule: \"0 0 * * mon\"\n      duration: 5h\nexpireAfter: Never\n",
    );
    let p = plan(&snapshot(pol.clone(), drifted(3), vec![]), now());
    assert!(started(&p).is_empty());
    assert_eq!(
        p.blocked.as_deref(),
        Some(
            "Drifted budget 0 until 2026-12-07T05:00:00Z (disruption.budgets[1] nodes \"0\" allows 0 of 3; 0 disrupting)"
        )
    );
    // With the steady budget used up by in-flight rotations, no window change lifts it.
    let rots = vec![
        rotation("i-00", RotationReason::Drifted, Step::Draining),
        rotation("i-01", RotationReason::Drifted, Step::Draining),
    ];
    let p = plan(&snapshot(pol, drifted(3), rots), now());
    assert_eq!(
        p.blocked.as_deref(),
        Some("Drifted budget 0 (disruption.budgets[1] nodes \"0\" allows 0 of 3; 2 disrupting)")
    );
}

#[test]
fn blocked_by_in_flight_without_schedule_has_no_until() {
    let rots = vec![
        rotation("i-05", RotationReason::Drifted, Step::Cordoned),
        rotation("i-04", RotationReason::Expired, Step::Surging),
    ];
    let p = plan(&snapshot(budgets("2"), drifted(6), rots), now());
    assert!(started(&p).is_empty());
    assert_eq!(
        p.blocked.as_deref(),
        Some("Drifted budget 0 (disruption.budgets[0] nodes \"2\" allows 2 of 6; 2 disrupting)")
    );
    assert_eq!(advanced(&p), ["i-04", "i-05"]);
}

#[test]
fn budget_for_one_reason_only() {
    // Expired is unrestricted (no budget applies), Drifted is frozen.
    let pol = policy(
        "disruption:\n  budgets:\n    - nodes: \"0\"\n      reasons: [Drifted]\nexpireAfter: 100h\n",
    );
    let s = snapshot(
        pol,
        vec![
            member("i-d", OLD, 10),
            member("i-e1", NEW, 150),
            member("i-e2", NEW, 120),
        ],
        vec![],
    );
    let p = plan(&s, now());
    assert_eq!(
        p.allowed,
        Allowed {
            drifted: 0,
            expired: 3,
            unhealthy: 1,
        }
    );
    assert_eq!(started_ids(&p), ["i-e1", "i-e2"]);
    assert_eq!(
        p.blocked.as_deref(),
        Some(
            "Drifted budget 0 (disruption.budgets[0] nodes \"0\" allows 0 of 3; 0 disrupting, 2 started this pass)"
        )
    );
}

#[test]
fn starts_of_any_reason_consume_every_reason() {
    // Drifted 3, Expired 1: Expired candidate first (no pods) uses 1 of everyone's budget.
    let pol = policy(
        "disruption:\n  budgets:\n    - nodes: \"3\"\n    - nodes: \"1\"\n      reasons: [Expired]\nexpireAfter: 100h\n",
    );
    let s = snapshot(
        pol,
        vec![
            pods(member("i-e1", NEW, 300), 0),
            pods(member("i-e2", NEW, 200), 0),
            member("i-d1", OLD, 50),
            member("i-d2", OLD, 40),
            member("i-d3", OLD, 30),
        ],
        vec![],
    );
    let p = plan(&s, now());
    assert_eq!(
        p.allowed,
        Allowed {
            drifted: 3,
            expired: 1,
            unhealthy: 1,
        }
    );
    assert_eq!(started_ids(&p), ["i-e1", "i-d1", "i-d2"]);
    let blocked = p.blocked.unwrap();
    assert!(blocked.starts_with("Drifted budget 0"), "{blocked}");
    assert!(blocked.contains("; Expired budget 0"), "{blocked}");
}

#[test]
fn forced_starts_with_zero_budget_and_counts_for_others() {
    let pol = policy(
        "disruption:\n  budgets:\n    - nodes: \"0\"\nexpireAfter: 100h\nterminationGracePeriod: 1h\n",
    );
    let s = snapshot(
        pol,
        vec![
            member("i-f1", NEW, 300),
            member("i-f2", NEW, 102),
            member("i-d", OLD, 1),
        ],
        vec![],
    );
    let p = plan(&s, now());
    assert_eq!(
        p.allowed,
        Allowed {
            unhealthy: 1,
            ..Allowed::default()
        }
    );
    assert_eq!(
        started(&p),
        vec![
            ("i-f1".to_string(), RotationReason::Expired, true),
            ("i-f2".to_string(), RotationReason::Expired, true),
        ]
    );
    assert!(
        p.blocked
            .as_deref()
            .unwrap()
            .starts_with("Drifted budget 0")
    );
    let rs = p.rotations_to_start(now());
    assert_eq!(rs.len(), 2);
    assert!(
        rs.iter()
            .all(|r| r.forced && r.step == Step::Pending && r.pool == "prod/general")
    );
    // Each records what its replacement runs: the desired AMI of the pass.
    assert!(
        rs.iter().all(|r| r.target.as_deref() == Some(NEW)),
        "{rs:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Counting

#[test]
fn not_ready_nodes_count_as_disrupting_and_not_in_total() {
    let mut members = drifted(6);
    members.push(not_ready(member("i-nr", NEW, 5)));
    let p = plan(&snapshot(budgets("2"), members, vec![]), now());
    assert_eq!((p.total, p.disrupting), (6, 1));
    assert_eq!(started(&p).len(), 1);
}

#[test]
fn not_ready_drifted_node_is_not_a_candidate() {
    let members = vec![not_ready(member("i-nr", OLD, 5)), member("i-ok", OLD, 1)];
    let p = plan(&snapshot(budgets("5"), members, vec![]), now());
    assert_eq!(started_ids(&p), ["i-ok"]);
    assert!(has_message(
        &p,
        "i-nr: Drifted (runs ami-old, desired ami-new), but its node is not Ready: counted as disrupting, not a candidate"
    ));
}

#[test]
fn node_disrupted_by_another_component_counts() {
    let mut members = drifted(6);
    if let Some(n) = &mut members[0].node {
        n.disrupted = Some("spot-interruption".to_string());
        n.unschedulable = true;
    }
    let p = plan(&snapshot(budgets("2"), members, vec![]), now());
    assert_eq!((p.total, p.disrupting), (6, 1));
    assert_eq!(started_ids(&p), ["i-05"]);
    assert!(!p.candidates.iter().any(|c| c.instance_id == "i-00"));
    assert!(has_message(
        &p,
        "another component is disrupting it (taint nodecycle.dev/disrupted=spot-interruption)"
    ));
}

#[test]
fn externally_cordoned_node_counts_and_is_left_alone() {
    let mut members = drifted(4);
    if let Some(n) = &mut members[3].node {
        n.unschedulable = true;
    }
    let p = plan(&snapshot(budgets("2"), members, vec![]), now());
    assert_eq!(p.disrupting, 1);
    assert_eq!(started_ids(&p), ["i-02"]);
    assert!(has_message(&p, "cordoned outside nodecycle"));
}

#[test]
fn node_cluster_autoscaler_is_removing_counts_and_is_left_alone() {
    // Cluster Autoscaler taints a node ToBeDeletedByClusterAutoscaler without cordoning it.
    let mut members = drifted(4);
    if let Some(n) = &mut members[3].node {
        n.marks.autoscaler_deleting = true;
    }
    let p = plan(&snapshot(budgets("2"), members, vec![]), now());
    assert_eq!(p.disrupting, 1);
    assert_eq!(started_ids(&p), ["i-02"]);
    assert!(!p.candidates.iter().any(|c| c.instance_id == "i-03"));
    assert!(has_message(&p, "Cluster Autoscaler is removing it"));
}

#[test]
fn each_instance_counts_once() {
    // In flight, NotReady, cordoned and tainted all at once: one disrupting node.
    let mut members = drifted(4);
    if let Some(n) = &mut members[0].node {
        n.ready = false;
        n.unschedulable = true;
        n.disrupted = Some("nodecycle".to_string());
    }
    let rot = rotation("i-00", RotationReason::Drifted, Step::Draining);
    let p = plan(&snapshot(budgets("2"), members, vec![rot]), now());
    assert_eq!((p.total, p.disrupting), (3, 1));
    assert_eq!(started(&p).len(), 1);
}

#[test]
fn leaving_and_gone_instances() {
    let mut leaving = member("i-leaving", OLD, 5);
    leaving.lifecycle = Lifecycle::Leaving;
    let mut gone_node = member("i-gone", OLD, 5);
    gone_node.lifecycle = Lifecycle::Leaving;
    gone_node.node = None;
    let mut members = drifted(4);
    members.push(leaving);
    members.push(gone_node);
    // A rotation whose instance already left the group still counts until Done.
    let rot = rotation("i-terminated", RotationReason::Drifted, Step::Terminating);
    let p = plan(&snapshot(budgets("3"), members, vec![rot]), now());
    assert_eq!((p.total, p.disrupting), (4, 2));
    assert_eq!(started(&p).len(), 1);
    assert_eq!(advanced(&p), ["i-terminated"]);
    assert!(
        !p.candidates
            .iter()
            .any(|c| c.instance_id.starts_with("i-l"))
    );
}

#[test]
fn launching_replacements_count_nowhere() {
    let mut launching = member("i-new1", NEW, 0);
    launching.lifecycle = Lifecycle::Pending;
    launching.node = None;
    // In service, registered, not yet Ready: the recorded replacement of an in-flight rotation.
    let replacement = not_ready(member("i-new2", NEW, 0));
    // In service, not registered yet.
    let mut unregistered = member("i-new3", NEW, 0);
    unregistered.node = None;
    let mut members = drifted(6);
    members.extend([launching, replacement, unregistered]);
    let mut rot = rotation("i-05", RotationReason::Drifted, Step::Surging);
    rot.replacement = Some("i-new2".to_string());
    let p = plan(&snapshot(budgets("2"), members, vec![rot]), now());
    assert_eq!((p.total, p.disrupting), (6, 1));
    assert_eq!(started_ids(&p), ["i-04"]);
}

#[test]
fn surge_baseline_identifies_unrecorded_replacement() {
    let mut members = drifted(6);
    let replacement = not_ready(member("i-new", NEW, 0));
    members.push(replacement);
    let mut rot = rotation("i-05", RotationReason::Drifted, Step::Surging);
    rot.surge = Some(Surge {
        target_desired: 7,
        baseline: (0..6).map(|i| format!("i-{i:02}")).collect(),
        base: Some(6),
        read: None,
        above_max: false,
        release: None,
    });
    let p = plan(&snapshot(budgets("3"), members.clone(), vec![rot]), now());
    assert_eq!((p.total, p.disrupting), (6, 1));
    // Without the rotation the same NotReady node is lost capacity.
    let p = plan(&snapshot(budgets("3"), members, vec![]), now());
    assert_eq!((p.total, p.disrupting), (6, 1));
    assert_eq!(started(&p).len(), 2);
}

#[test]
fn unregistered_drifted_instance_is_reported() {
    let mut m = member("i-x", OLD, 5);
    m.node = None;
    let p = plan(&snapshot(budgets("2"), vec![m], vec![]), now());
    assert!(started(&p).is_empty());
    assert_eq!((p.total, p.disrupting), (0, 0));
    assert!(has_message(&p, "not registered as a Kubernetes node"));
    assert_eq!(p.blocked, None);
}

// ---------------------------------------------------------------------------------------------
// Gates

#[test]
fn paused_halted_unresolved_start_nothing_but_advance() {
    let pol = policy(
        "disruption:\n  budgets:\n    - nodes: \"5\"\nexpireAfter: 100h\nterminationGracePeriod: 1h\n",
    );
    let mut members = drifted(4);
    members.push(member("i-forced", NEW, 500));
    let rot = rotation("i-00", RotationReason::Drifted, Step::Draining);
    let base = snapshot(pol, members, vec![rot]);

    let mut paused = base.clone();
    paused.gates.paused = Some("ops: incident 42".to_string());
    let mut policy_paused = base.clone();
    policy_paused.policy.paused = true;
    let mut halted = base.clone();
    halted.gates.halted = Some("rotation of i-09 failed: drain timed out".to_string());
    let mut unresolved = base.clone();
    unresolved.gates.desired_ami = None;

    let cases = [
        (paused, "pool paused: ops: incident 42"),
        (policy_paused, "pool paused: policy sets paused: true"),
        (
            halted,
            "pool halted: rotation of i-09 failed: drain timed out",
        ),
        (
            unresolved,
            "desired AMI unresolved: drift cannot be checked, nothing starts",
        ),
    ];
    for (s, why) in cases {
        let p = plan(&s, now());
        assert!(started(&p).is_empty(), "{why}");
        assert_eq!(advanced(&p), ["i-00"], "{why}");
        assert_eq!(p.blocked.as_deref(), Some(why));
        assert!(
            p.candidates
                .iter()
                .any(|c| c.instance_id == "i-forced" && c.forced),
            "{why}: forced candidate still listed"
        );
        assert!(has_message(&p, &format!("not starting: {why}")), "{why}");
    }
    // Unresolved: no drift is seen, only expiry.
    let mut unresolved = base;
    unresolved.gates.desired_ami = None;
    let p = plan(&unresolved, now());
    assert_eq!(p.candidates.len(), 1);
}

#[test]
fn gate_without_candidates_is_not_blocked_except_unresolved() {
    let mut s = snapshot(budgets("2"), vec![member("i-a", NEW, 1)], vec![]);
    s.gates.paused = Some("weekend".to_string());
    let p = plan(&s, now());
    assert_eq!(p.blocked, None);
    assert!(has_message(&p, "not starting: pool paused: weekend"));
    s.gates.paused = None;
    s.gates.desired_ami = None;
    let p = plan(&s, now());
    assert!(p.blocked.is_some());
}

#[test]
fn duplicate_instances_fail_closed() {
    let mut members = drifted(3);
    members.push(member("i-00", OLD, 10));
    let p = plan(&snapshot(budgets("5"), members, vec![]), now());
    assert!(started(&p).is_empty());
    assert_eq!(
        p.blocked.as_deref(),
        Some("snapshot lists instance(s) i-00 more than once: not trusting it")
    );
}

// ---------------------------------------------------------------------------------------------
// Launch template

/// (template image, desired AMI, paused, halted, expected update).
type TemplateCase = (
    Option<&'static str>,
    Option<&'static str>,
    bool,
    bool,
    Option<&'static str>,
);

#[test]
fn launch_template_update_planned_exactly_when_needed() {
    let cases: [TemplateCase; 8] = [
        (Some(NEW), Some(NEW), false, false, None),
        (Some(OLD), Some(NEW), false, false, Some(NEW)),
        (None, Some(NEW), false, false, Some(NEW)),
        (Some(OLD), None, false, false, None),
        (None, None, false, false, None),
        (Some(OLD), Some(NEW), true, false, None),
        (Some(OLD), Some(NEW), false, true, None),
        (Some(OLD), Some(NEW), true, true, None),
    ];
    for (i, (template, desired, paused, halted, want)) in cases.into_iter().enumerate() {
        let rot = rotation("i-00", RotationReason::Drifted, Step::Pending);
        let mut s = snapshot(budgets("2"), drifted(4), vec![rot]);
        s.group.launch_template_image = template.map(str::to_string);
        s.gates.desired_ami = desired.map(str::to_string);
        s.gates.paused = paused.then(|| "p".to_string());
        s.gates.halted = halted.then(|| "h".to_string());
        let p = plan(&s, now());
        let updates: Vec<&Action> = p
            .actions
            .iter()
            .filter(|a| matches!(a, Action::UpdateLaunchTemplate { .. }))
            .collect();
        match want {
            Some(image) => {
                assert_eq!(updates.len(), 1, "case {i}");
                assert_eq!(
                    p.actions[0],
                    Action::UpdateLaunchTemplate {
                        image: image.to_string()
                    },
                    "case {i}: the update comes first"
                );
                assert_eq!(started(&p).len(), 1, "case {i}: starts follow the update");
                assert!(matches!(
                    p.actions.last(),
                    Some(Action::StartRotation { .. })
                ));
            }
            None => assert!(updates.is_empty(), "case {i}"),
        }
    }
}

#[test]
fn template_update_without_candidates() {
    let mut s = snapshot(budgets("2"), vec![member("i-a", NEW, 1)], vec![]);
    s.group.launch_template_image = Some(OLD.to_string());
    let p = plan(&s, now());
    assert_eq!(
        p.actions,
        vec![Action::UpdateLaunchTemplate {
            image: NEW.to_string()
        }]
    );
    assert_eq!(
        messages(&p),
        ["updating the launch template of prod-general: it launches ami-old, desired ami-new"]
    );
}

#[test]
fn the_template_moves_under_every_gate_but_stopped_halted_paused() {
    // (gate set on the snapshot, does the launch template move).
    let cases: [(&str, bool); 5] = [
        ("none", true),
        ("stopped", false),
        ("halted", false),
        ("paused", false),
        ("untrusted", true),
    ];
    for (gate, moves) in cases {
        let mut members = vec![member("i-a", NEW, 1), member("i-b", OLD, 2)];
        let mut s = snapshot(budgets("2"), vec![], vec![]);
        match gate {
            "stopped" => s.gates.stopped = Some("stop switch on".to_string()),
            "halted" => s.gates.halted = Some("h".to_string()),
            "paused" => s.gates.paused = Some("p".to_string()),
            "untrusted" => members.push(member("i-b", OLD, 2)),
            _ => {}
        }
        s.members = members;
        s.group.launch_template_image = Some(OLD.to_string());
        let p = plan(&s, now());
        let updated = p
            .actions
            .iter()
            .any(|a| matches!(a, Action::UpdateLaunchTemplate { image } if image == NEW));
        assert_eq!(updated, moves, "gate {gate}: {:?}", p.actions);
        if gate != "none" {
            assert!(started(&p).is_empty(), "gate {gate}: nothing starts");
        }
    }
    let frozen = |g: Gate| g.freezes_template();
    assert!(frozen(Gate::Stopped("s".into())));
    assert!(frozen(Gate::Halted("h".into())));
    assert!(frozen(Gate::Paused("p".into())));
    assert!(!frozen(Gate::Untrusted(vec!["i-b".into()])));
    assert!(!frozen(Gate::Unresolved));
}

// ---------------------------------------------------------------------------------------------
// Rotation records

#[test]
fn stale_done_rotation_blocks_restart_failed_does_not() {
    let mut done = rotation("i-00", RotationReason::Drifted, Step::Done);
    done.step_at = at("2026-12-05T11:00:00Z");
    let failed = rotation("i-01", RotationReason::Drifted, Step::Failed);
    let p = plan(
        &snapshot(budgets("5"), drifted(2), vec![done, failed]),
        now(),
    );
    assert_eq!(started_ids(&p), ["i-01"]);
    assert!(advanced(&p).is_empty());
    assert!(has_message(
        &p,
        "i-00: Drifted (runs ami-old, desired ami-new), but its Drifted rotation finished (Done) at 2026-12-05T11:00:00Z and it is still in service: not starting it again (check the executor)"
    ));
}

#[test]
fn in_flight_rotation_of_a_current_node_still_advances() {
    let rot = rotation("i-a", RotationReason::Manual, Step::Pending);
    let p = plan(
        &snapshot(budgets("2"), vec![member("i-a", NEW, 1)], vec![rot]),
        now(),
    );
    assert_eq!(advanced(&p), ["i-a"]);
    assert_eq!(p.disrupting, 1);
    assert!(has_message(
        &p,
        "advancing i-a: Manual rotation at step Pending"
    ));
}

#[test]
fn foreign_rotation_counts_but_is_not_advanced() {
    let mut rot = rotation("i-00", RotationReason::Drifted, Step::Draining);
    rot.pool = "prod/other".to_string();
    let p = plan(&snapshot(budgets("2"), drifted(4), vec![rot]), now());
    assert!(advanced(&p).is_empty());
    assert_eq!(p.disrupting, 1);
    assert_eq!(started(&p).len(), 1);
    assert!(!started_ids(&p).contains(&"i-00".to_string()));
}

// ---------------------------------------------------------------------------------------------
// JSON

#[test]
fn serializes_to_the_cli_shape() {
    let pol = policy(
        "disruption:\n  budgets:\n    - nodes: \"1\"\nexpireAfter: 720h\nterminationGracePeriod: 2h\n",
    );
    let mut members = vec![
        pods(member("i-0abc", OLD, 30), 0),
        member("i-0def", NEW, 725),
    ];
    members[1].launch_time -= TimeDelta::minutes(30);
    let rot = rotation("i-0fly", RotationReason::Drifted, Step::Draining);
    let mut s = snapshot(pol, members, vec![rot]);
    s.group.launch_template_image = Some(OLD.to_string());
    let p = plan(&s, now());
    let v = serde_json::to_value(&p).unwrap();
    let expected = json!({
        "pool": "prod/general",
        "allowed": {"Drifted": 0, "Expired": 0, "Unhealthy": 1},
        "total": 2,
        "disrupting": 1,
        "candidates": [
            {"instance": "i-0def", "reason": "Expired", "forced": true, "image": "ami-new", "age": "725h30m", "evictablePods": 3},
            {"instance": "i-0abc", "reason": "Drifted", "forced": false, "image": "ami-old", "age": "30h", "evictablePods": 0}
        ],
        "actions": [
            {"action": "updateLaunchTemplate", "image": "ami-new"},
            {"action": "advance", "instance": "i-0fly", "step": "Draining"},
            {"action": "startRotation", "instance": "i-0def", "reason": "Expired", "forced": true}
        ],
        "blocked": "Drifted budget 0 (disruption.budgets[0] nodes \"1\" allows 1 of 2; 1 disrupting, 1 started this pass)",
        "decisions": [
            {"instance": null, "kind": "launchTemplate", "message": "updating the launch template of prod-general: it launches ami-old, desired ami-new"},
            {"instance": "i-0fly", "kind": "advance", "message": "advancing i-0fly: Drifted rotation at step Draining"},
            {"instance": "i-0def", "kind": "start", "message": "starting i-0def: Expired, forced (3h30m past its deadline 2026-12-05T08:30:00Z: expireAfter+terminationGracePeriod 720h+2h from launch or adoption, whichever is later; age 725h30m; no budget wait), 3 evictable pod(s)"},
            {"instance": null, "kind": "wait", "message": "not starting: Drifted budget 0 (disruption.budgets[0] nodes \"1\" allows 1 of 2; 1 disrupting, 1 started this pass); 1 Drifted candidate(s) wait"}
        ],
        "replacement": {"strategy": "surge"}
    });
    assert_eq!(v, expected, "{}", serde_json::to_string_pretty(&v).unwrap());
}

#[test]
fn empty_pool() {
    let p = plan(&snapshot(budgets("2"), vec![], vec![]), now());
    assert_eq!((p.total, p.disrupting), (0, 0));
    assert_eq!(
        p.allowed,
        Allowed {
            drifted: 2,
            expired: 2,
            unhealthy: 1,
        }
    ); // a count is not capped by total
    assert!(p.actions.is_empty() && p.candidates.is_empty() && p.decisions.is_empty());
    assert_eq!(p.blocked, None);
}

// ---- Queued operator rotations (`ops rotate`) ----

fn queued(id: &str, request: &str, ignore_budgets: bool, max: u32, age_min: i64) -> Rotation {
    let queue = crate::rotation::Queue {
        request_id: request.to_string(),
        ignore_budgets,
        max_concurrent: max,
        reason: "CVE-2026-0001".to_string(),
    };
    Rotation::manual(
        "prod/general",
        id,
        queue,
        now() - TimeDelta::minutes(age_min),
    )
}

fn released(p: &Plan) -> Vec<String> {
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

fn current(n: usize) -> Vec<Member> {
    (0..n)
        .map(|i| member(&format!("i-{i:02}"), NEW, 10))
        .collect()
}

#[test]
fn queued_manual_rotations_table() {
    struct Case {
        name: &'static str,
        budget: &'static str,
        members: Vec<Member>,
        rotations: Vec<Rotation>,
        gates: fn(&mut Gates),
        released: &'static [&'static str],
        started: &'static [&'static str],
        disrupting: u32,
        blocked: Option<&'static str>,
    }
    fn open(_: &mut Gates) {}
    fn paused(g: &mut Gates) {
        g.paused = Some("operator: CVE triage".into());
    }
    fn halted(g: &mut Gates) {
        g.halted = Some("replacement never Ready".into());
    }
    fn unresolved(g: &mut Gates) {
        g.desired_ami = None;
    }
    let five_queued = |ignore: bool, max: u32| -> Vec<Rotation> {
        (0..5)
            .map(|i| queued(&format!("i-{i:02}"), "req-1", ignore, max, 5))
            .collect()
    };
    let mut surging = queued("i-00", "req-1", true, 2, 5);
    surging.step = Step::Surging;
    let cases = vec![
        Case {
            name: "ignoreBudgets in a 0 window: maxConcurrent bounds the releases",
            budget: "0",
            members: current(5),
            rotations: five_queued(true, 2),
            gates: open,
            released: &["i-00", "i-01"],
            started: &[],
            disrupting: 0,
            blocked: Some("3 Manual rotation(s) of request req-1 wait for maxConcurrent 2"),
        },
        Case {
            name: "rotations of the request already past Pending count toward maxConcurrent",
            budget: "0",
            members: current(5),
            rotations: {
                let mut r = five_queued(true, 2);
                r[0] = surging.clone();
                r
            },
            gates: open,
            released: &["i-01"],
            started: &[],
            disrupting: 1,
            blocked: Some("3 Manual rotation(s) of request req-1 wait for maxConcurrent 2"),
        },
        Case {
            name: "without ignoreBudgets they start like Drifted within the budget",
            budget: "2",
            members: current(5),
            rotations: five_queued(false, 1),
            gates: open,
            released: &["i-00", "i-01"],
            started: &[],
            disrupting: 0,
            blocked: Some("Drifted budget 0"),
        },
        Case {
            name: "without ignoreBudgets nothing starts in a 0 window",
            budget: "0",
            members: current(5),
            rotations: five_queued(false, 1),
            gates: open,
            released: &[],
            started: &[],
            disrupting: 0,
            blocked: Some("5 queued Manual rotation(s) wait"),
        },
        Case {
            name: "manual releases use the budget before drift candidates",
            budget: "2",
            members: drifted(4),
            rotations: vec![queued("i-03", "req-1", false, 1, 5)],
            gates: open,
            released: &["i-03"],
            started: &["i-02"],
            disrupting: 0,
            blocked: Some("Drifted budget 0"),
        },
        Case {
            name: "ignoreBudgets releases count as disrupting for later budgeted starts",
            budget: "2",
            members: drifted(4),
            rotations: vec![
                queued("i-02", "req-1", true, 5, 5),
                queued("i-03", "req-1", true, 5, 5),
            ],
            gates: open,
            released: &["i-02", "i-03"],
            started: &[],
            disrupting: 0,
            blocked: Some("Drifted budget 0"),
        },
        Case {
            name: "paused: nothing is released",
            budget: "10",
            members: current(3),
            rotations: vec![queued("i-00", "req-1", true, 2, 5)],
            gates: paused,
            released: &[],
            started: &[],
            disrupting: 0,
            blocked: Some("pool paused: operator: CVE triage"),
        },
        Case {
            name: "halted: nothing is released",
            budget: "10",
            members: current(3),
            rotations: vec![queued("i-00", "req-1", true, 2, 5)],
            gates: halted,
            released: &[],
            started: &[],
            disrupting: 0,
            blocked: Some("pool halted"),
        },
        Case {
            name: "desired AMI unresolved: nothing is released",
            budget: "10",
            members: current(3),
            rotations: vec![queued("i-00", "req-1", true, 2, 5)],
            gates: unresolved,
            released: &[],
            started: &[],
            disrupting: 0,
            blocked: Some("desired AMI unresolved"),
        },
        Case {
            name: "an instance that left the group is released to be finished, even at 0",
            budget: "0",
            members: current(2),
            rotations: vec![queued("i-09", "req-1", false, 1, 5)],
            gates: open,
            released: &["i-09"],
            started: &[],
            disrupting: 0,
            blocked: None,
        },
        Case {
            name: "oldest request first",
            budget: "0",
            members: current(3),
            rotations: vec![
                queued("i-00", "req-new", true, 1, 1),
                queued("i-02", "req-old", true, 1, 9),
                queued("i-01", "req-old", true, 1, 9),
            ],
            gates: open,
            released: &["i-01", "i-00"],
            started: &[],
            disrupting: 0,
            blocked: Some("1 Manual rotation(s) of request req-old wait for maxConcurrent 1"),
        },
    ];
    for c in cases {
        let mut s = snapshot(budgets(c.budget), c.members, c.rotations);
        (c.gates)(&mut s.gates);
        let p = plan(&s, now());
        assert_eq!(released(&p), c.released, "{}: {:#?}", c.name, p.decisions);
        assert_eq!(started_ids(&p), c.started, "{}: {:#?}", c.name, p.decisions);
        assert_eq!(p.disrupting, c.disrupting, "{}", c.name);
        match c.blocked {
            Some(b) => assert!(
                p.blocked.as_deref().is_some_and(|x| x.contains(b)),
                "{}: blocked {:?}, expected it to contain {b:?}",
                c.name,
                p.blocked
            ),
            None => assert_eq!(p.blocked, None, "{}", c.name),
        }
    }
}

#[test]
fn a_queued_rotation_is_not_a_drift_candidate_and_not_advanced_while_waiting() {
    let s = snapshot(
        budgets("0"),
        drifted(2),
        vec![queued("i-00", "req-1", false, 1, 5)],
    );
    let p = plan(&s, now());
    assert!(advanced(&p).is_empty(), "{:?}", p.actions);
    assert_eq!(
        p.candidates
            .iter()
            .map(|c| c.instance_id.as_str())
            .collect::<Vec<_>>(),
        vec!["i-01"]
    );
}

#[test]
fn a_queued_rotation_serializes_without_queue_fields_when_absent() {
    let r = Rotation::new(
        "prod/general",
        "i-00",
        RotationReason::Drifted,
        false,
        now(),
    );
    let v = serde_json::to_value(&r).unwrap();
    assert!(v.get("queued").is_none());
    let q = queued("i-00", "req-1", true, 2, 0);
    let v = serde_json::to_value(&q).unwrap();
    assert_eq!(
        v["queued"],
        json!({"requestId": "req-1", "ignoreBudgets": true, "maxConcurrent": 2, "reason": "CVE-2026-0001"})
    );
    assert_eq!(v["reason"], "Manual");
    assert_eq!(v["forced"], true);
}

/// The deployment's stop switch: nothing starts (forced expiry and queued operator rotations
/// included), the launch template stays, every in-flight rotation holds at its step except an
/// `Interrupted` one, whose drain goes on; the pool's own pause is not what holds it.
#[test]
fn a_stopped_deployment_holds_everything_but_interruptions() {
    let p = policy(
        "disruption:\n  budgets:\n    - nodes: \"5\"\nexpireAfter: 24h\nterminationGracePeriod: 1h\n",
    );
    let members = vec![
        member("i-drift", OLD, 2),
        member("i-forced", NEW, 48),
        member("i-draining", OLD, 3),
        member("i-spot", OLD, 3),
        member("i-fresh", NEW, 1),
    ];
    let rotations = vec![
        rotation("i-draining", RotationReason::Drifted, Step::Draining),
        rotation("i-spot", RotationReason::Interrupted, Step::Draining),
    ];
    let mut s = snapshot(p, members, rotations);
    s.group.launch_template_image = Some(OLD.to_string());
    // Running: the template moves, both rotations advance, the drifted and the forced start.
    let running = plan(&s, now());
    assert!(matches!(
        running.actions.first(),
        Some(Action::UpdateLaunchTemplate { .. })
    ));
    assert_eq!(advanced(&running), ["i-draining", "i-spot"]);
    assert_eq!(started_ids(&running), ["i-forced", "i-drift"]);

    s.gates.stopped = Some("deployment stopped by oncall: incident 42".into());
    let stopped = plan(&s, now());
    assert_eq!(
        stopped.gate,
        Some(Gate::Stopped(
            "deployment stopped by oncall: incident 42".into()
        ))
    );
    assert!(
        !stopped
            .actions
            .iter()
            .any(|a| matches!(a, Action::UpdateLaunchTemplate { .. })),
        "{:?}",
        stopped.actions
    );
    assert_eq!(
        advanced(&stopped),
        ["i-spot"],
        "only the interruption moves"
    );
    assert!(started_ids(&stopped).is_empty());
    assert_eq!(
        stopped.blocked.as_deref(),
        Some("deployment stopped by oncall: incident 42")
    );
    assert!(has_message(&stopped, "holding i-draining"));
    assert!(!has_message(&stopped, "holding i-spot"));
    // The switch is the strongest gate: a paused or halted pool shows the stop.
    s.gates.paused = Some("by ops".into());
    s.gates.halted = Some("rotation failed".into());
    assert!(matches!(plan(&s, now()).gate, Some(Gate::Stopped(_))));
}

/// The adoption case: six nodes aged 1,000 hours, `expireAfter: 720h`,
/// `terminationGracePeriod: 2h`, a 20% budget (2 of 6). Adopted now: they are Expired, not
/// forced, and only the budget's two start, oldest first. Adopted long ago (the deadline passed
/// during a pause): all six are forced, the plan says "6 of 6 nodes are forced at once", also
/// while paused (what resuming would do), and nothing says so when the budget covers them.
#[test]
fn adoption_never_stampedes_and_forced_at_once_is_said() {
    let pol = policy(
        "disruption:\n  budgets:\n    - nodes: \"20%\"\nexpireAfter: 720h\nterminationGracePeriod: 2h\n",
    );
    let members: Vec<Member> = (0..6)
        .map(|i| member(&format!("i-{i}"), NEW, 1000 + i))
        .collect();
    let mut s = snapshot(pol, members, Vec::new());

    s.adopted_at = Some(now());
    let p = plan(&s, now());
    let starts = started(&p);
    assert_eq!(
        starts,
        vec![
            ("i-5".to_string(), RotationReason::Expired, false),
            ("i-4".to_string(), RotationReason::Expired, false),
        ],
        "{p:#?}"
    );
    assert_eq!(p.forced_at_once, None);

    // Adopted 800 hours ago: 800 >= 722, every deadline has passed.
    s.adopted_at = Some(now() - TimeDelta::hours(800));
    let p = plan(&s, now());
    assert_eq!(started(&p).len(), 6, "{p:#?}");
    let f = p.forced_at_once.clone().expect("forced at once");
    assert_eq!((f.forced, f.nodes, f.allowed), (6, 6, 2));
    assert!(
        f.message.contains("6 of 6 nodes are forced at once"),
        "{}",
        f.message
    );
    assert!(
        p.decisions
            .iter()
            .any(|d| d.kind == DecisionKind::Anomaly && d.message == f.message)
    );

    // Paused: nothing starts, the plan still says what resuming would do.
    s.gates.paused = Some("ops: look first".to_string());
    let p = plan(&s, now());
    assert!(started(&p).is_empty());
    let f = p.forced_at_once.expect("said while paused");
    assert!(f.message.contains("look first"), "{}", f.message);

    // A budget as large as the pool: forced nodes all fit, nothing to say.
    let mut wide = s.clone();
    wide.gates.paused = None;
    wide.policy = policy(
        "disruption:\n  budgets:\n    - nodes: \"100%\"\nexpireAfter: 720h\nterminationGracePeriod: 2h\n",
    );
    assert_eq!(plan(&wide, now()).forced_at_once, None);
}

// Repair in the plan.

/// `m` with its Ready condition `status` since `minutes` before [`now`].
fn ready_since(mut m: Member, status: &str, minutes: i64) -> Member {
    if let Some(node) = &mut m.node {
        node.ready = status == "True";
        node.conditions = vec![crate::fleet::Condition {
            kind: "Ready".into(),
            status: status.into(),
            reason: None,
            since: Some(now() - TimeDelta::minutes(minutes)),
        }];
    }
    m
}

/// Six healthy nodes on the desired AMI, those in `bad` NotReady for `minutes`.
fn six_with_not_ready(bad: &[usize], minutes: i64) -> Vec<Member> {
    (0..6)
        .map(|i| {
            let m = member(&format!("i-{i:02}"), NEW, 10);
            if bad.contains(&i) {
                ready_since(m, "False", minutes)
            } else {
                ready_since(m, "True", 600)
            }
        })
        .collect()
}

fn repair_starts(p: &Plan) -> Vec<String> {
    started(p)
        .into_iter()
        .filter(|(_, r, _)| *r == RotationReason::Unhealthy)
        .map(|(i, _, _)| i)
        .collect()
}

#[test]
fn a_node_not_ready_for_its_duration_is_repaired_with_its_domain_recorded() {
    let s = snapshot(policy(""), six_with_not_ready(&[2], 31), vec![]);
    let p = plan(&s, now());
    assert_eq!(repair_starts(&p), ["i-02"]);
    assert_eq!(p.allowed.unhealthy, 1);
    let r = p.rotations_to_start(now());
    let domain = r[0].repair.clone().expect("domain recorded");
    assert_eq!(
        (
            domain.zone.as_str(),
            domain.condition.as_str(),
            domain.image.as_str()
        ),
        ("eu-west-1a", "Ready", NEW)
    );
    // Not yet at 29 minutes; never with repair off.
    let early = snapshot(policy(""), six_with_not_ready(&[2], 29), vec![]);
    assert!(repair_starts(&plan(&early, now())).is_empty());
    let off = snapshot(
        policy("repair:\n  enabled: false\n"),
        six_with_not_ready(&[2], 31),
        vec![],
    );
    assert!(repair_starts(&plan(&off, now())).is_empty());
    assert!(plan(&off, now()).repair.is_empty());
}

#[test]
fn half_a_pool_not_ready_suspends_repair_and_says_so() {
    let s = snapshot(policy(""), six_with_not_ready(&[0, 1, 2], 40), vec![]);
    let p = plan(&s, now());
    assert!(repair_starts(&p).is_empty());
    let why = p.repair.suspended.as_deref().expect("suspended");
    assert!(why.contains("3 of 6"), "{why}");
    assert!(
        p.decisions
            .iter()
            .any(|d| d.kind == DecisionKind::Wait && d.message.contains("not repairing"))
    );
    // Serialized for `nodecycle plan`.
    let json = serde_json::to_value(&p).unwrap();
    assert!(json["repair"]["suspended"].is_string());
}

#[test]
fn a_gate_holds_repairs_and_one_in_flight_holds_the_next() {
    let mut s = snapshot(policy(""), six_with_not_ready(&[2], 31), vec![]);
    s.gates.paused = Some("by ops".into());
    assert!(repair_starts(&plan(&s, now())).is_empty());

    // One repair in flight (maxParallel 1): the other due node waits.
    let mut r = rotation("i-02", RotationReason::Unhealthy, Step::Draining);
    r.repair = Some(crate::repair::Domain {
        zone: "eu-west-1a".into(),
        condition: "Ready".into(),
        image: NEW.into(),
    });
    let members = six_with_not_ready(&[2], 31)
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            if i == 4 {
                ready_since(m, "False", 35)
            } else {
                m
            }
        })
        .collect();
    let half = policy("repair:\n  maxUnhealthy: \"50%\"\n");
    let p = plan(&snapshot(half, members, vec![r]), now());
    assert!(repair_starts(&p).is_empty(), "{:?}", p.decisions);
    assert_eq!(p.allowed.unhealthy, 0);
    assert!(p.repair.held.iter().any(|h| h.instance == "i-04"));
}

#[test]
fn a_drifted_node_that_is_unhealthy_is_repaired_not_rotated_twice() {
    let mut members = six_with_not_ready(&[], 0);
    members[3] = member("i-03", OLD, 10);
    if let Some(n) = &mut members[3].node {
        n.conditions = vec![crate::fleet::Condition {
            kind: "KernelReady".into(),
            status: "False".into(),
            reason: Some("KernelBug".into()),
            since: Some(now() - TimeDelta::hours(1)),
        }];
    }
    let p = plan(&snapshot(budgets("3"), members, vec![]), now());
    let starts: Vec<_> = started(&p)
        .into_iter()
        .filter(|(i, _, _)| i == "i-03")
        .collect();
    assert_eq!(
        starts,
        [("i-03".to_string(), RotationReason::Unhealthy, false)]
    );
}

#[test]
fn a_repair_whose_replacement_stayed_healthy_widens_its_domain() {
    // i-02 was repaired by i-09, done 10 minutes ago and healthy since: width 2, so two
    // NotReady nodes of that domain start together (maxParallel 2, breaker 100%).
    let domain = crate::repair::Domain {
        zone: "eu-west-1a".into(),
        condition: "Ready".into(),
        image: NEW.into(),
    };
    let mut done = rotation("i-02", RotationReason::Unhealthy, Step::Done);
    done.created_at = now() - TimeDelta::minutes(40);
    done.step_at = now() - TimeDelta::minutes(10);
    done.replacement = Some("i-09".into());
    done.repair = Some(domain.clone());
    let mut members = six_with_not_ready(&[0, 1], 31);
    members.push(ready_since(member("i-09", NEW, 1), "True", 20));
    let loose = "repair:\n  maxParallel: 2\n  maxUnhealthy: \"100%\"\n";
    let p = plan(
        &snapshot(policy(loose), members.clone(), vec![done.clone()]),
        now(),
    );
    assert_eq!(repair_starts(&p), ["i-00", "i-01"]);
    // Its replacement unhealthy now: the repair failed, width 1.
    let last = members.len() - 1;
    members[last] = ready_since(member("i-09", NEW, 1), "False", 2);
    let p = plan(&snapshot(policy(loose), members, vec![done]), now());
    assert_eq!(repair_starts(&p).len(), 1, "{:?}", p.repair);
}

/// A false-positive flood: half of a 20-node pool (three zones) reports `KernelReady` False
/// (the breaker opened wide to let the slow start show), simulated minute by minute; a repair
/// takes 8 minutes and its replacement is healthy. Returns, per start, its minute, zone and
/// whether a repair had proven healthy by then (its replacement healthy 5 minutes after).
fn flood(extra: &str) -> Vec<(i64, String, bool)> {
    let zones = ["eu-west-1a", "eu-west-1b", "eu-west-1c"];
    let mut members: Vec<Member> = (0..20)
        .map(|i| {
            let mut m = ready_since(member(&format!("i-{i:02}"), NEW, 10), "True", 600);
            m.availability_zone = zones[i % 3].to_string();
            if i % 2 == 0
                && let Some(n) = &mut m.node
            {
                n.conditions = vec![crate::fleet::Condition {
                    kind: "KernelReady".into(),
                    status: "False".into(),
                    reason: Some("Flood".into()),
                    since: Some(now() - TimeDelta::hours(1)),
                }];
            }
            m
        })
        .collect();
    let pol = policy(&format!("repair:\n  maxUnhealthy: \"100%\"\n{extra}"));
    let mut rotations: Vec<Rotation> = Vec::new();
    let mut starts = Vec::new();
    let mut next_id = 100;
    for minute in 0..240 {
        let t = now() + TimeDelta::minutes(minute);
        for r in rotations.iter_mut().filter(|r| r.in_flight()) {
            if t - r.created_at >= TimeDelta::minutes(8) {
                let id = format!("i-{next_id}");
                next_id += 1;
                let zone = members
                    .iter()
                    .find(|m| m.instance_id == r.instance_id)
                    .map(|m| m.availability_zone.clone())
                    .unwrap_or_default();
                members.retain(|m| m.instance_id != r.instance_id);
                let mut fresh = ready_since(member(&id, NEW, 0), "True", 0);
                fresh.availability_zone = zone;
                members.push(fresh);
                r.step = Step::Done;
                r.step_at = t;
                r.replacement = Some(id);
            }
        }
        let proven = rotations
            .iter()
            .any(|r| r.step == Step::Done && t - r.step_at >= TimeDelta::minutes(5));
        let mut s = snapshot(pol.clone(), members.clone(), rotations.clone());
        s.group.desired_capacity = i32::try_from(members.len()).unwrap();
        for r in plan(&s, t).rotations_to_start(t) {
            let zone = r
                .repair
                .as_ref()
                .map(|d| d.zone.clone())
                .unwrap_or_default();
            starts.push((minute, zone, proven));
            rotations.push(r);
        }
    }
    starts
}

/// With the defaults (but the breaker): one replacement at a time; with `maxParallel: 20`, one
/// per failure domain (zone) until one proved healthy, then wider.
/// Either way the flood is worked off once replacements prove healthy.
#[test]
fn a_false_positive_flood_costs_one_replacement_at_a_time_until_replacements_prove_healthy() {
    let one = flood("");
    assert_eq!(one.len(), 10, "{one:?}");
    // One at a time (a repair takes 8 minutes), so at most one per cooldown.
    for w in one.windows(2) {
        assert!(w[1].0 - w[0].0 >= 8, "one at a time: {one:?}");
    }
    let wide = flood("  maxParallel: 20\n");
    assert_eq!(wide.len(), 10, "{wide:?}");
    let unproven: Vec<&(i64, String, bool)> = wide.iter().filter(|(_, _, p)| !p).collect();
    let mut zones: Vec<&str> = unproven.iter().map(|(_, z, _)| z.as_str()).collect();
    zones.sort();
    zones.dedup();
    assert_eq!(
        zones.len(),
        unproven.len(),
        "one per domain before proof: {wide:?}"
    );
    assert!(
        wide.last().map(|l| l.0) < one.last().map(|l| l.0),
        "wider once proven: {wide:?} {one:?}"
    );
}

/// `m` with a pod `default/batch` annotated `key: value`, started `started_min` minutes before
/// [`now`], as the pass counted its pods.
fn opted_out(mut m: Member, key: &str, value: &str, started_min: i64) -> Member {
    let started = now() - TimeDelta::minutes(started_min);
    if let Some(n) = &mut m.node {
        n.pods_counted = true;
        n.opt_out = crate::fleet::OptOut::of(
            "default/batch",
            |k| (k == key).then_some(value),
            Some(started),
        );
    }
    m
}

/// A pod's opt-out keeps its drifted node from starting (no budget used) until it lapses;
/// `safe-to-evict: "false"` alike; forced expiry replaces it anyway; the decision names the
/// pod and until when.
#[test]
fn a_pod_opt_out_holds_its_node_until_it_lapses_and_forced_expiry_does_not_wait() {
    let pol = budgets("2");
    let members = |m: Member| vec![m, member("i-02", OLD, 20)];
    // do-not-disrupt "30m", the pod started 10 minutes ago: skipped, the other node starts.
    let held = opted_out(
        member("i-01", OLD, 30),
        "karpenter.sh/do-not-disrupt",
        "30m",
        10,
    );
    let p = plan(&snapshot(pol.clone(), members(held), vec![]), now());
    assert_eq!(started_ids(&p), ["i-02"]);
    let why = p
        .decisions
        .iter()
        .find(|d| d.instance_id.as_deref() == Some("i-01"))
        .map(|d| d.message.clone())
        .unwrap_or_default();
    assert!(
        why.contains("pod default/batch has karpenter.sh/do-not-disrupt: \"30m\" (until 2026-12-05T12:20:00Z)"),
        "{why}"
    );
    assert_eq!(p.disrupting, 0, "a held node is not disrupting");
    // 31 minutes after it started: it lapsed.
    let lapsed = opted_out(
        member("i-01", OLD, 30),
        "karpenter.sh/do-not-disrupt",
        "30m",
        31,
    );
    let p = plan(&snapshot(pol.clone(), members(lapsed), vec![]), now());
    assert_eq!(started_ids(&p).len(), 2);
    // safe-to-evict "false" and "true" hold as long as the pod carries them.
    for (key, value) in [
        ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"),
        ("karpenter.sh/do-not-disrupt", "true"),
        ("nodecycle.dev/do-not-disrupt", "true"),
    ] {
        let held = opted_out(member("i-01", OLD, 30), key, value, 600);
        let p = plan(&snapshot(pol.clone(), members(held), vec![]), now());
        assert_eq!(started_ids(&p), ["i-02"], "{key}: {value}");
    }
    // Forced expiry does not wait for it.
    let forced = policy("expireAfter: 720h\nterminationGracePeriod: 1h\n");
    let old = opted_out(
        member("i-01", NEW, 800),
        "karpenter.sh/do-not-disrupt",
        "true",
        600,
    );
    let p = plan(&snapshot(forced, vec![old], vec![]), now());
    assert_eq!(
        started(&p),
        [("i-01".to_string(), RotationReason::Expired, true)]
    );
}
