use super::*;
use crate::fleet::NodeStatus;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

const NEW: &str = "ami-new";
const OLD: &str = "ami-old";

fn release() -> Release {
    Release {
        ami: NEW.into(),
        name: Some("amazon-eks-node-al2023-x86_64-standard-1.30-v20240807".into()),
        release: Some("v20240807".into()),
    }
}

/// An instance on `image`, `lifecycle`, with a node Ready or not (`None`: not registered).
fn member(id: &str, image: &str, lifecycle: Lifecycle, ready: Option<bool>) -> Member {
    Member {
        instance_id: id.into(),
        availability_zone: "us-east-2a".into(),
        image_id: Some(image.into()),
        launch_time: at("2026-12-01T00:00:00Z"),
        lifecycle,
        node: ready.map(|r| NodeStatus {
            ready: r,
            ..NodeStatus::ready(format!("node-{id}"))
        }),
    }
}

fn facts<'a>(
    desired: Option<&'a Release>,
    group_desired: i32,
    members: &'a [Member],
    gates: &'a Gates,
    in_flight: usize,
) -> Facts<'a> {
    Facts {
        pool: "prod/general",
        desired,
        group_desired,
        members,
        gates,
        in_flight,
        blocked: None,
        rejected: None,
    }
}

fn statuses(r: &Rollout) -> Vec<(ConditionType, ConditionStatus, &str)> {
    r.conditions
        .iter()
        .map(|c| (c.kind, c.status, c.reason.as_str()))
        .collect()
}

use ConditionStatus::{False, True};
use ConditionType::{Halted, NodesUpToDate, Paused, Progressing};

#[test]
fn counts_follow_the_group_and_its_nodes() {
    let r = release();
    let members = [
        member("i-1", NEW, Lifecycle::InService, Some(true)),
        member("i-2", NEW, Lifecycle::Pending, Some(false)),
        member("i-3", OLD, Lifecycle::InService, Some(true)),
        member("i-4", OLD, Lifecycle::InService, None),
        member("i-5", OLD, Lifecycle::Leaving, Some(true)),
    ];
    let gates = Gates::default();
    let s = observe(
        &facts(Some(&r), 4, &members, &gates, 1),
        None,
        at("2026-12-05T00:00:00Z"),
    );
    assert_eq!(
        s.counts,
        Counts {
            desired_capacity: 4,
            nodes: 4,
            up_to_date: 2,
            ready: 2,
            up_to_date_and_ready: 1
        }
    );
    assert_eq!(
        s.images,
        vec![
            ImageCount {
                ami: NEW.into(),
                nodes: 2
            },
            ImageCount {
                ami: OLD.into(),
                nodes: 2
            }
        ]
    );
    assert_eq!(
        statuses(&s),
        vec![
            (NodesUpToDate, False, "NodesOutOfDate"),
            (Progressing, True, "Rotating"),
            (Halted, False, "NotHalted"),
            (Paused, False, "NotPaused"),
        ]
    );
}

#[test]
fn up_to_date_needs_every_node_new_and_ready_and_the_group_full() {
    let r = release();
    let gates = Gates::default();
    let now = at("2026-12-05T00:00:00Z");
    let all_new = [
        member("i-1", NEW, Lifecycle::InService, Some(true)),
        member("i-2", NEW, Lifecycle::InService, Some(true)),
        // An old instance leaving does not count.
        member("i-3", OLD, Lifecycle::Leaving, Some(true)),
    ];
    let cases: [(&str, i32, &[Member], usize, bool); 5] = [
        ("all new and Ready", 2, &all_new, 0, true),
        (
            "a rotation in flight but every node new",
            2,
            &all_new,
            1,
            true,
        ),
        (
            "the group wants one more (terminate-first relaunch owed)",
            3,
            &all_new,
            1,
            false,
        ),
        (
            "a new node not Ready",
            2,
            &[
                member("i-1", NEW, Lifecycle::InService, Some(true)),
                member("i-2", NEW, Lifecycle::InService, Some(false)),
            ],
            0,
            false,
        ),
        (
            "an old node",
            2,
            &[
                member("i-1", NEW, Lifecycle::InService, Some(true)),
                member("i-2", OLD, Lifecycle::InService, Some(true)),
            ],
            0,
            false,
        ),
    ];
    for (case, group, members, in_flight, want) in cases {
        let s = observe(
            &facts(Some(&r), group, members, &gates, in_flight),
            None,
            now,
        );
        assert_eq!(s.holds(NodesUpToDate), want, "{case}: {s:?}");
        assert_eq!(s.holds(Progressing), !want, "{case}: {s:?}");
    }
    let s = observe(&facts(None, 2, &all_new, &gates, 0), None, now);
    assert_eq!(
        statuses(&s)[..2],
        [
            (NodesUpToDate, False, "DesiredUnresolved"),
            (Progressing, False, "DesiredUnresolved")
        ]
    );
}

#[test]
fn halts_pauses_and_the_stop_switch_stop_progress() {
    let r = release();
    let members = [member("i-1", OLD, Lifecycle::InService, Some(true))];
    let now = at("2026-12-05T00:00:00Z");
    let halted = Gates {
        halted: Some("replacement i-9 not Ready within 15m".into()),
        paused: Some("change freeze".into()),
        ..Gates::default()
    };
    let s = observe(&facts(Some(&r), 1, &members, &halted, 0), None, now);
    assert_eq!(
        statuses(&s)[1..],
        [
            (Progressing, False, "Halted"),
            (Halted, True, "Halted"),
            (Paused, True, "Paused")
        ]
    );
    let stopped = Gates {
        stopped: Some("incident 42".into()),
        paused: Some("change freeze".into()),
        ..Gates::default()
    };
    let s = observe(&facts(Some(&r), 1, &members, &stopped, 0), None, now);
    assert_eq!(
        s.condition(Paused).map(|c| c.message.as_str()),
        Some("incident 42")
    );
    assert_eq!(statuses(&s)[1], (Progressing, False, "Stopped"));
}

#[test]
fn since_is_kept_while_the_status_holds_and_moves_when_it_changes() {
    let r = release();
    let gates = Gates::default();
    let (t0, t1, t2) = (
        at("2026-12-05T00:00:00Z"),
        at("2026-12-05T00:01:00Z"),
        at("2026-12-05T00:02:00Z"),
    );
    let before = [
        member("i-1", OLD, Lifecycle::InService, Some(true)),
        member("i-2", OLD, Lifecycle::InService, Some(true)),
    ];
    let middle = [
        member("i-1", NEW, Lifecycle::InService, Some(true)),
        member("i-2", OLD, Lifecycle::InService, Some(true)),
    ];
    let after = [
        member("i-1", NEW, Lifecycle::InService, Some(true)),
        member("i-3", NEW, Lifecycle::InService, Some(true)),
    ];
    let s0 = observe(&facts(Some(&r), 2, &before, &gates, 1), None, t0);
    let s1 = observe(&facts(Some(&r), 2, &middle, &gates, 1), Some(&s0), t1);
    assert!(s1.conditions.iter().all(|c| c.since == t0), "{s1:?}");
    assert!(s1.changed_since(Some(&s0)).is_empty());
    assert_ne!(s0, s1, "the counts moved: a new status to publish");
    let s2 = observe(&facts(Some(&r), 2, &after, &gates, 0), Some(&s1), t2);
    let changed: Vec<(ConditionType, ConditionStatus)> = s2
        .changed_since(Some(&s1))
        .iter()
        .map(|c| (c.kind, c.status))
        .collect();
    assert_eq!(changed, [(NodesUpToDate, True), (Progressing, False)]);
    assert_eq!(s2.condition(NodesUpToDate).map(|c| c.since), Some(t2));
    assert_eq!(s2.condition(Halted).map(|c| c.since), Some(t0));
    // The same observation again: the same status, nothing to publish or announce.
    let s3 = observe(
        &facts(Some(&r), 2, &after, &gates, 0),
        Some(&s2),
        at("2026-12-05T05:00:00Z"),
    );
    assert_eq!(s3, s2);
    // A pool's first status announces only what holds.
    let first: Vec<ConditionType> = s2.changed_since(None).iter().map(|c| c.kind).collect();
    assert_eq!(first, [NodesUpToDate]);
}

#[test]
fn images_are_bounded_and_the_document_fits_a_standard_parameter() {
    let r = release();
    let gates = Gates {
        halted: Some("x".repeat(5000)),
        ..Gates::default()
    };
    let members: Vec<Member> = (0..200)
        .map(|i| {
            member(
                &format!("i-{i:05}"),
                &format!("ami-{:017}", i % 40),
                Lifecycle::InService,
                Some(true),
            )
        })
        .collect();
    let mut f = facts(Some(&r), 200, &members, &gates, 3);
    let long = "y".repeat(5000);
    f.blocked = Some(&long);
    let rejected = Rejected {
        release: "v20240701".into(),
        reason: "z".repeat(1000),
        at: at("2026-12-04T00:00:00Z"),
    };
    f.rejected = Some(&rejected);
    let s = observe(&f, None, at("2026-12-05T00:00:00Z"));
    assert_eq!(s.images.len(), IMAGES_LIMIT);
    let doc = serde_json::to_string(&s).unwrap_or_default();
    assert!(doc.len() < 4096, "{} bytes", doc.len());
    let back: Rollout = serde_json::from_str(&doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
    assert_eq!(back, s);
}

#[test]
fn a_release_is_named_by_id_name_version_or_pinned_alias() {
    let r = release();
    for yes in [
        NEW,
        "amazon-eks-node-al2023-x86_64-standard-1.30-v20240807",
        "v20240807",
        "al2023@v20240807",
    ] {
        assert!(r.is(yes), "{yes}");
    }
    for no in [OLD, "v20240808", "al2023@v20240701", "al2023", ""] {
        assert!(!r.is(no), "{no}");
    }
}

#[test]
fn min_ready_parses_a_share_or_a_count_and_refuses_the_rest() {
    let cases = [
        ("100%", Ok(MinReady::All)),
        ("90%", Ok(MinReady::Percent(90))),
        (" 1% ", Ok(MinReady::Percent(1))),
        ("5", Ok(MinReady::Count(5))),
    ];
    for (text, want) in cases {
        assert_eq!(text.parse::<MinReady>(), want, "{text}");
    }
    for bad in ["0%", "101%", "-1", "ninety", "90 %%", ""] {
        assert!(bad.parse::<MinReady>().is_err(), "{bad}");
    }
}

fn status_with(counts: (u32, u32, u32), gates: &Gates, rejected: Option<Rejected>) -> Rollout {
    let (desired, new_ready, old) = counts;
    let r = release();
    let mut members: Vec<Member> = (0..new_ready)
        .map(|i| member(&format!("i-n{i}"), NEW, Lifecycle::InService, Some(true)))
        .collect();
    members.extend(
        (0..old).map(|i| member(&format!("i-o{i}"), OLD, Lifecycle::InService, Some(true))),
    );
    let mut f = facts(
        Some(&r),
        i32::try_from(desired).unwrap_or(0),
        &members,
        gates,
        0,
    );
    f.rejected = rejected.as_ref();
    observe(&f, None, at("2026-12-05T00:00:00Z"))
}

fn verdict_kind(v: &Verdict) -> &'static str {
    match v {
        Verdict::Reached(_) => "reached",
        Verdict::Waiting(_) => "waiting",
        Verdict::Failed(_) => "failed",
    }
}

#[test]
fn judge_reaches_waits_or_fails() {
    let open = Gates::default();
    let halted = Gates {
        halted: Some("replacement i-9 not Ready within 15m".into()),
        ..Gates::default()
    };
    let rejected = Some(Rejected {
        release: "v20240901".into(),
        reason: "3 of 4 new nodes NotReady".into(),
        at: at("2026-12-04T00:00:00Z"),
    });
    let want = |release: Option<&str>, min: MinReady| Want {
        release: release.map(str::to_string),
        min_ready: min,
    };
    let cases = [
        (
            "all up to date",
            status_with((6, 6, 0), &open, None),
            want(None, MinReady::All),
            "reached",
        ),
        (
            "the release named by its alias",
            status_with((6, 6, 0), &open, None),
            want(Some("al2023@v20240807"), MinReady::All),
            "reached",
        ),
        (
            "one old node left",
            status_with((6, 5, 1), &open, None),
            want(None, MinReady::All),
            "waiting",
        ),
        (
            "90% of 6 is 5.4: 5 is not enough",
            status_with((6, 5, 1), &open, None),
            want(None, MinReady::Percent(90)),
            "waiting",
        ),
        (
            "80% of 6 is 4.8: 5 is enough",
            status_with((6, 5, 1), &open, None),
            want(None, MinReady::Percent(80)),
            "reached",
        ),
        (
            "a count",
            status_with((6, 3, 3), &open, None),
            want(None, MinReady::Count(3)),
            "reached",
        ),
        (
            "another release wanted",
            status_with((6, 6, 0), &open, None),
            want(Some("v20240901"), MinReady::All),
            "waiting",
        ),
        (
            "halted",
            status_with((6, 3, 3), &halted, None),
            want(None, MinReady::All),
            "failed",
        ),
        (
            "the wanted release was quarantined",
            status_with((6, 6, 0), &open, rejected.clone()),
            want(Some("al2023@v20240901"), MinReady::All),
            "failed",
        ),
        (
            "another release was quarantined",
            status_with((6, 6, 0), &open, rejected),
            want(None, MinReady::All),
            "reached",
        ),
    ];
    for (case, status, want, expected) in cases {
        let v = judge(&status, &want);
        assert_eq!(verdict_kind(&v), expected, "{case}: {v:?}");
    }
    let v = judge(
        &status_with((6, 3, 3), &halted, None),
        &want(None, MinReady::All),
    );
    assert!(
        matches!(&v, Verdict::Failed(m) if m.contains("not Ready within 15m")),
        "{v:?}"
    );
}

#[test]
fn the_parameter_of_a_pool_is_under_the_status_path() {
    assert_eq!(
        parameter_name("prod/general"),
        "/nodecycle/status/prod/general"
    );
    assert_eq!(cluster_path("prod"), "/nodecycle/status/prod");
}

fn due(pool: &str, conditions_changed: bool) -> Due {
    let r = release();
    let gates = Gates::default();
    let mut status = observe(
        &facts(Some(&r), 1, &[], &gates, 0),
        None,
        at("2026-12-05T00:00:00Z"),
    );
    status.pool = pool.to_string();
    Due {
        status,
        conditions_changed,
    }
}

fn pools(d: &[Due]) -> Vec<&str> {
    d.iter().map(|d| d.status.pool.as_str()).collect()
}

#[test]
fn a_pass_writes_condition_changes_first_and_at_most_its_budget() {
    let all = vec![
        due("c/count-1", false),
        due("c/flip-1", true),
        due("c/count-2", false),
        due("c/flip-2", true),
    ];
    let (written, deferred) = to_write(all.clone(), 3, 0);
    assert_eq!(pools(&written), ["c/flip-1", "c/flip-2", "c/count-1"]);
    assert_eq!(pools(&deferred), ["c/count-2"]);
    let (written, deferred) = to_write(all.clone(), 10, 7);
    assert_eq!(written.len(), 4);
    assert!(deferred.is_empty());
    let (written, deferred) = to_write(Vec::new(), 3, 1);
    assert!(written.is_empty() && deferred.is_empty());
}

#[test]
fn pools_due_every_pass_are_each_written_within_due_over_budget_turns() {
    for (n, budget) in [(7usize, 2usize), (10, 3), (5, 5), (9, 1), (100, 50)] {
        for changed in [true, false] {
            let all: Vec<Due> = (0..n)
                .map(|i| due(&format!("c/p{i:03}"), changed))
                .collect();
            for start in [0u64, 1, 29_000_000] {
                let mut seen = std::collections::BTreeSet::new();
                for turn in 0..n.div_ceil(budget) as u64 {
                    let (written, _) = to_write(all.clone(), budget, start + turn);
                    assert!(written.len() <= budget);
                    seen.extend(written.into_iter().map(|d| d.status.pool));
                }
                assert_eq!(seen.len(), n, "n {n}, budget {budget}, start {start}");
            }
        }
    }
}
