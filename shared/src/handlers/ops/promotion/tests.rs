use super::*;
use crate::ami::resolve::Ami;
use crate::promotion::{Cause, Proof};
use crate::state::ReleaseEvent;

fn t(min: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z")
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_default()
        + TimeDelta::minutes(min)
}

fn rel(s: &str) -> Release {
    Release(s.to_string())
}

fn period(r: &str, image: &str, since: i64, until: Option<i64>) -> SoakPeriod {
    SoakPeriod {
        release: rel(r),
        image: image.into(),
        since: t(since),
        until: until.map(t),
        nodes: None,
    }
}

fn quarantine(target: Target) -> Quarantine {
    Quarantine {
        target,
        reason: "bad".into(),
        by: "alice".into(),
        at: t(0),
        cause: Cause::Operator {
            request_id: "r".into(),
        },
        outbox: Vec::new(),
    }
}

fn states(list: &[Candidate]) -> Vec<(&str, SoakState)> {
    list.iter().map(|c| (c.release.as_str(), c.state)).collect()
}

const HOUR: TimeDelta = TimeDelta::hours(1);

#[test]
fn soak_progress_per_release_newest_first() {
    let ledger = vec![
        period("v1", "ami-1", 0, Some(120)),
        period("v3", "ami-3", 120, Some(150)),
        period("v2", "ami-2", 150, None),
    ];
    let none = Quarantined::default();
    let clean = Alarms::default();
    let gates = Gates {
        soak: HOUR,
        alarms: &clean,
        alarm_error: None,
        quarantined: &none,
    };
    let up = Upstream {
        ledger: &ledger,
        ..Upstream::default()
    };
    let list = candidates(&up, &gates, t(180));
    assert_eq!(
        states(&list),
        vec![
            ("v2", SoakState::Soaking),
            ("v3", SoakState::Ended),
            ("v1", SoakState::Proven)
        ]
    );
    assert_eq!(list[0].proven_at, Some(t(210)));
    assert_eq!(list[0].soak_remaining.as_deref(), Some("30m"));
    assert_eq!(list[2].proven_at, Some(t(60)));
    assert!(list[1].blocked_by[0].contains("30m"), "{:?}", list[1]);

    // An alarm state change at 170: v2's soak counts from there.
    let changed = Alarms {
        firing: vec![],
        last_change: Some(t(170)),
    };
    let list = candidates(
        &up,
        &Gates {
            alarms: &changed,
            ..gates.clone()
        },
        t(180),
    );
    assert_eq!(list[0].soak_from, t(170));
    assert_eq!(list[0].proven_at, Some(t(230)));

    // A firing alarm blocks every release; a halted upstream its open period only; a
    // quarantined release is blocked with the quarantine's reason.
    let firing = Alarms {
        firing: vec!["p99".into()],
        last_change: None,
    };
    let list = candidates(
        &up,
        &Gates {
            alarms: &firing,
            ..gates.clone()
        },
        t(300),
    );
    assert!(list.iter().all(|c| c.state == SoakState::Blocked));
    assert!(list[0].blocked_by[0].contains("p99"));
    let halted = Upstream {
        halted: Some("rotation failed"),
        ..up.clone()
    };
    let list = candidates(&halted, &gates, t(300));
    assert_eq!(
        states(&list),
        vec![
            ("v2", SoakState::Blocked),
            ("v3", SoakState::Ended),
            ("v1", SoakState::Proven)
        ]
    );
    let q = Quarantined(vec![quarantine(Target::Release(rel("v1")))]);
    let list = candidates(
        &up,
        &Gates {
            quarantined: &q,
            ..gates.clone()
        },
        t(300),
    );
    assert_eq!(list[2].state, SoakState::Blocked);
    assert!(list[2].blocked_by[0].contains("bad"));
}

/// Whatever the ledger, the release the watcher would take (best_proven) is shown as proven.
#[test]
fn the_release_the_watcher_takes_is_shown_proven() {
    let ledgers = [
        vec![
            period("v1", "ami-1", 0, Some(120)),
            period("v2", "ami-2", 120, Some(130)),
            period("v1", "ami-1", 130, None),
        ],
        vec![
            period("v1", "ami-1", 0, Some(100)),
            period("v2", "ami-2", 100, Some(200)),
            period("v1", "ami-1", 200, Some(210)),
            period("v3", "ami-3", 210, None),
        ],
        vec![period("v1", "ami-1", 0, None)],
        vec![],
    ];
    let quarantines = [
        Quarantined::default(),
        Quarantined(vec![quarantine(Target::Ami("ami-2".into()))]),
        Quarantined(vec![quarantine(Target::Release(rel("v1")))]),
    ];
    let alarm_sets = [
        Alarms::default(),
        Alarms {
            firing: vec![],
            last_change: Some(t(90)),
        },
    ];
    for ledger in &ledgers {
        for q in &quarantines {
            for alarms in &alarm_sets {
                for halted in [None, Some("halted")] {
                    for now in [50, 150, 250, 400] {
                        let up = Upstream {
                            ledger,
                            halted,
                            ..Upstream::default()
                        };
                        let gates = Gates {
                            soak: HOUR,
                            alarms,
                            alarm_error: None,
                            quarantined: q,
                        };
                        let list = candidates(&up, &gates, t(now));
                        let proof = promotion::ledger::best_proven(
                            ledger,
                            HOUR,
                            None,
                            alarms,
                            q,
                            halted.is_some(),
                            t(now),
                        );
                        if let Proof::Proven { release, .. } = &proof {
                            assert!(
                                list.iter()
                                    .any(|c| c.release == *release && c.state == SoakState::Proven),
                                "{proof:?} not shown proven in {list:?}"
                            );
                        } else {
                            let proven: Vec<_> = list
                                .iter()
                                .filter(|c| c.state == SoakState::Proven)
                                .collect();
                            assert!(proven.is_empty(), "{proof:?} but {proven:?}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn chains_in_order_from_their_first_pool() {
    let from: BTreeMap<String, Option<String>> = [
        ("prod/a", Some("pre/a")),
        ("pre/a", Some("test/a")),
        ("test/a", None),
        ("prod/b", Some("test/a")),
        ("solo/x", None),
        ("lost/y", Some("gone/z")),
        ("cyc/1", Some("cyc/2")),
        ("cyc/2", Some("cyc/1")),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.map(str::to_string)))
    .collect();
    let order = chain_order(&from);
    let order: Vec<(&str, usize)> = order.iter().map(|(p, d)| (p.as_str(), *d)).collect();
    assert_eq!(
        order,
        vec![
            ("lost/y", 0),
            ("solo/x", 0),
            ("test/a", 0),
            ("pre/a", 1),
            ("prod/a", 2),
            ("prod/b", 1),
            ("cyc/1", 0),
            ("cyc/2", 0),
        ]
    );
}

fn ami(id: &str, version: &str) -> Ami {
    crate::handlers::ops::quarantine::tests::ami(id, version)
}

fn history(amis: &[&Ami]) -> Vec<crate::state::HistoryEntry> {
    amis.iter()
        .map(|a| crate::state::HistoryEntry {
            ami: (*a).clone(),
            first_seen: t(0),
            last_seen: t(0),
        })
        .collect()
}

#[test]
fn a_pool_stage_says_where_the_release_is() {
    let old = ami("ami-00000001", "v20241101");
    let new = ami("ami-00000002", "v20241109");
    let r = rel("v20241109");
    let soaking = Candidate {
        release: r.clone(),
        image: new.id.clone(),
        upstream_on_since: t(0),
        until: None,
        soak_from: t(0),
        state: SoakState::Soaking,
        proven_at: Some(t(60)),
        soak_remaining: Some("30m".into()),
        blocked_by: vec![],
        failed_rotations: 0,
    };
    // Not reached yet; the upstream soaks it.
    let waiting = PoolRecord {
        desired: Some(old.clone()),
        history: history(&[&old]),
        promotion_wait: Some("release v20241109 soaking".into()),
        ..PoolRecord::default()
    };
    let v = stage(Some(&waiting), &r, Some(&soaking));
    assert_eq!(v["state"], "soakingUpstream");
    assert_eq!(v["wait"], "release v20241109 soaking");
    assert_eq!(v["upstream"]["soakRemaining"], "30m");
    assert_eq!(stage(None, &r, None)["state"], "notReached");

    // Promoted, rolling out, then running.
    let mut promoted = PoolRecord {
        desired: Some(new.clone()),
        previous_desired: Some(old.clone()),
        desired_changed_at: Some(t(61)),
        history: history(&[&old, &new]),
        ..PoolRecord::default()
    };
    promoted.push_release(ReleaseEvent {
        release: r.clone(),
        image: new.id.clone(),
        at: t(61),
        how: ReleaseHow::Promoted {
            from: "test/a".into(),
            proven_at: t(60),
        },
    });
    let v = stage(Some(&promoted), &r, None);
    assert_eq!(v["state"], "rollingOut");
    assert_eq!(v["desiredSince"], "2026-12-01T01:01:00Z");
    assert_eq!(v["promoted"][0]["from"], "test/a");
    promoted.ledger = vec![period("v20241109", &new.id, 70, None)];
    assert_eq!(stage(Some(&promoted), &r, None)["state"], "running");

    // Rolled back: the quarantined release left the pool.
    let back = promoted.roll_back(&old, "v20241109 is quarantined: bad", false, t(80));
    let v = stage(Some(&back), &r, None);
    assert_eq!(v["state"], "rolledBack");
    assert_eq!(v["rolledBack"][0]["to"], old.id.as_str());
    assert_eq!(v["desired"], false);
    // The old release's stage in the same pool: desired again.
    assert_eq!(
        stage(Some(&back), &rel("v20241101"), None)["state"],
        "rollingOut"
    );
}

#[test]
fn quarantine_entries_concerning_a_release() {
    let q = Quarantined(vec![
        quarantine(Target::Release(rel("v20241109"))),
        quarantine(Target::Ami("ami-00000002".into())),
        quarantine(Target::Ami("ami-00000009".into())),
        quarantine(Target::Release(rel("v20241101"))),
    ]);
    let images: BTreeSet<String> = ["ami-00000002".to_string()].into_iter().collect();
    let got = concerning(&q, &rel("v20241109"), &images);
    assert_eq!(got.len(), 2);
}
