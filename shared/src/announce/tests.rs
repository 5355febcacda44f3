//! Table tests: which transitions become which events, their ids, and the outbox rules.

use chrono::{DateTime, TimeDelta, Utc};

use super::stage::*;
use crate::bus::*;
use crate::rotation::{Rotation, RotationReason, Step};
use crate::state::record::tests::ami;
use crate::state::{OperatorAction, Pin, PoolRecord, RecordedError};

fn t(minutes: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
        + TimeDelta::minutes(minutes)
}

fn rot(step: Step, at: i64) -> Rotation {
    Rotation::new("prod/general", "i-1", RotationReason::Drifted, false, t(0)).enter(step, t(at))
}

fn kind_of(before: Option<Step>, after: Step) -> Option<Kind> {
    let before = before.map(|s| rot(s, 0));
    rotation_transition(before.as_ref(), &rot(after, 1)).map(|e| e.kind)
}

#[test]
fn rotation_transitions_table() {
    use Kind::*;
    use Step::*;
    let table: &[(Option<Step>, Step, Option<Kind>)] = &[
        // A new record is not news; leaving Pending is.
        (None, Pending, None),
        (Some(Pending), Surging, Some(RotationStarted)),
        (Some(Pending), Draining, Some(RotationStarted)),
        (Some(Pending), Terminating, Some(RotationStarted)),
        // A new record that starts past Pending (the interruption handler's hand-over), or
        // replaces a finished one, starts too.
        (None, Draining, Some(RotationStarted)),
        (Some(Done), Draining, Some(RotationStarted)),
        (Some(Done), Pending, None),
        // Moving on once started is not.
        (Some(Surging), Cordoned, None),
        (Some(Cordoned), Draining, None),
        (Some(Draining), Draining, None),
        (Some(Draining), Terminating, None),
        // Ends, from any unfinished step.
        (Some(Terminating), Done, Some(RotationFinished)),
        (Some(Pending), Done, Some(RotationFinished)),
        (Some(Surging), Failed, Some(RotationFailed)),
        (Some(Draining), Cancelled, Some(RotationCancelled)),
        // Writes after the end (the surge given back) are not.
        (Some(Done), Done, None),
        (Some(Failed), Failed, None),
        (Some(Cancelled), Cancelled, None),
    ];
    for (before, after, want) in table {
        assert_eq!(kind_of(*before, *after), *want, "{before:?} -> {after:?}");
    }
}

#[test]
fn a_rotation_event_carries_the_transition_and_a_derived_id() {
    let before = rot(Step::Surging, 0);
    let mut after = Rotation {
        error: Some("replacement for i-1 not Ready within 15m".into()),
        replacement: Some("i-2".into()),
        ..before.enter(Step::Failed, t(20))
    };
    after.error = Some("x".repeat(5000));
    let e = rotation_transition(Some(&before), &after).unwrap();
    assert_eq!(e.kind.detail_type(), "Rotation Failed");
    assert_eq!(
        e.id(),
        "rotation-failed:prod/general:i-1:Failed:2026-12-01T10:20:00.000Z"
    );
    let d = &e.detail;
    assert_eq!(
        (d.pool.as_str(), d.cluster.as_str(), d.instance.as_deref()),
        ("prod/general", "prod", Some("i-1"))
    );
    assert_eq!(
        (d.from_step.as_deref(), d.step.as_deref()),
        (Some("Surging"), Some("Failed"))
    );
    assert_eq!(d.reason.as_deref(), Some("Drifted"));
    assert_eq!(d.replacement.as_deref(), Some("i-2"));
    assert_eq!(d.at, t(20));
    assert_eq!(d.error.as_ref().unwrap().chars().count(), TEXT_LIMIT);
    // The same transition computed again (a retried pass) is the same event.
    assert_eq!(rotation_transition(Some(&before), &after), Some(e.clone()));
    // The JSON detail is camelCase and leaves out what does not apply.
    let json: serde_json::Value = serde_json::from_str(&e.detail_json()).unwrap();
    assert_eq!(json["eventId"], e.id());
    assert_eq!(json["fromStep"], "Surging");
    assert!(json.get("ami").is_none());
    // A finished rotation's event has no error even if the record kept one.
    let done = Rotation {
        error: Some("transient".into()),
        ..before.enter(Step::Done, t(21))
    };
    assert_eq!(
        rotation_transition(Some(&before), &done)
            .unwrap()
            .detail
            .error,
        None
    );
}

fn record() -> PoolRecord {
    PoolRecord {
        pool: "prod/general".into(),
        desired: Some(ami("ami-a")),
        ..PoolRecord::default()
    }
}

fn by(reason: &str, at: i64) -> OperatorAction {
    OperatorAction {
        reason: reason.into(),
        at: t(at),
        by: Some("alice".into()),
    }
}

fn kinds(before: &PoolRecord, after: &PoolRecord) -> Vec<Kind> {
    pool_transitions(before, after, t(30))
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[test]
fn pool_transitions_table() {
    use Kind::*;
    let base = record();
    let halted = PoolRecord {
        halted: Some(RecordedError {
            message: "replacement not Ready".into(),
            at: t(5),
        }),
        ..base.clone()
    };
    let paused = PoolRecord {
        paused: Some(by("CVE window", 6)),
        ..base.clone()
    };
    let both = PoolRecord {
        paused: Some(by("CVE window", 6)),
        ..halted.clone()
    };
    let new_ami = PoolRecord {
        desired: Some(ami("ami-b")),
        previous_desired: Some(ami("ami-a")),
        ..base.clone()
    };
    let pinned = PoolRecord {
        pin: Some(Pin {
            ami: "ami-p".into(),
            name: Some("golden-p".into()),
            by: by("hotfix", 7),
        }),
        ..base.clone()
    };
    let pinned_new_resolution = PoolRecord {
        desired: Some(ami("ami-b")),
        ..pinned.clone()
    };
    let empty = PoolRecord::default();
    let suspended = PoolRecord {
        repair_suspended: Some(RecordedError {
            message: "3 of 6 nodes of the pool are unhealthy".into(),
            at: t(8),
        }),
        ..base.clone()
    };
    let backing = PoolRecord {
        backoff: Some(crate::backoff::after_failure(
            None,
            "prod/general",
            "gone",
            t(9),
        )),
        ..base.clone()
    };
    let backing_longer = PoolRecord {
        backoff: Some(crate::backoff::after_failure(
            backing.backoff.as_ref(),
            "prod/general",
            "gone",
            t(10),
        )),
        ..base.clone()
    };
    let table: Vec<(&str, &PoolRecord, &PoolRecord, Vec<Kind>)> = vec![
        ("repair suspended", &base, &suspended, vec![RepairSuspended]),
        ("repair still suspended", &suspended, &suspended, vec![]),
        ("repair resumed", &suspended, &base, vec![]),
        ("backing off", &base, &backing, vec![PoolBackingOff]),
        ("backing off longer", &backing, &backing_longer, vec![]),
        ("back-off lifted", &backing, &base, vec![]),
        ("nothing changed", &base, &base, vec![]),
        ("halted", &base, &halted, vec![PoolHalted]),
        ("halted again", &halted, &halted, vec![]),
        ("paused", &base, &paused, vec![PoolHalted]),
        ("paused while halted", &halted, &both, vec![PoolHalted]),
        ("resumed from a halt", &halted, &base, vec![PoolResumed]),
        ("resumed from a pause", &paused, &base, vec![PoolResumed]),
        ("resumed from both", &both, &base, vec![PoolResumed]),
        ("new AMI resolved", &base, &new_ami, vec![DesiredAmiChanged]),
        ("first AMI resolved", &empty, &base, vec![DesiredAmiChanged]),
        ("pinned", &base, &pinned, vec![DesiredAmiChanged]),
        ("unpinned", &pinned, &base, vec![DesiredAmiChanged]),
        // While pinned, a new resolution does not change what nodes run.
        (
            "resolved while pinned",
            &pinned,
            &pinned_new_resolution,
            vec![],
        ),
        // Unpinning to an AMI other than the pin announces the resolved one.
        (
            "unpinned to another",
            &pinned_new_resolution,
            &new_ami,
            vec![DesiredAmiChanged],
        ),
    ];
    for (what, before, after, want) in table {
        assert_eq!(kinds(before, after), want, "{what}");
    }
}

#[test]
fn pool_events_carry_cause_reason_and_amis() {
    let base = record();
    let halted = PoolRecord {
        halted: Some(RecordedError {
            message: "replacement not Ready".into(),
            at: t(5),
        }),
        ..base.clone()
    };
    let e = &pool_transitions(&base, &halted, t(30))[0];
    assert_eq!(e.id(), "pool-halted:prod/general:2026-12-01T10:05:00.000Z");
    assert_eq!(e.detail.cause, Some(HaltCause::Failure));
    assert_eq!(e.detail.reason.as_deref(), Some("replacement not Ready"));
    assert_eq!(e.detail.at, t(5));
    let resumed = &pool_transitions(&halted, &base, t(30))[0];
    assert_eq!(
        resumed.id(),
        "pool-resumed:prod/general:2026-12-01T10:05:00.000Z",
        "named after the halt it lifts"
    );
    assert_eq!(resumed.detail.at, t(30));
    let paused = PoolRecord {
        paused: Some(by("CVE window", 6)),
        ..base.clone()
    };
    let e = &pool_transitions(&base, &paused, t(30))[0];
    assert_eq!(e.detail.cause, Some(HaltCause::Operator));
    assert_eq!(e.detail.by.as_deref(), Some("alice"));
    assert_ne!(
        e.id(),
        pool_transitions(&base, &halted, t(30))[0].id(),
        "a pause and a halt are different events"
    );
    let new_ami = PoolRecord {
        desired: Some(ami("ami-b")),
        ..base.clone()
    };
    let d = pool_transitions(&base, &new_ami, t(30))[0].detail.clone();
    assert_eq!(d.ami.as_deref(), Some("ami-b"));
    assert_eq!(d.ami_name.as_deref(), Some("name-ami-b"));
    assert_eq!(d.previous_ami.as_deref(), Some("ami-a"));
    assert_eq!(d.resolved_ami.as_deref(), Some("ami-b"));
    assert_eq!(d.pinned, Some(false));
}

#[test]
fn staging_keeps_the_stored_outbox_and_adds_the_transition_once() {
    let pending = rot(Step::Pending, 0);
    let surging = stage_rotation(Some(&pending), rot(Step::Surging, 1));
    assert_eq!(surging.outbox.len(), 1);
    // The next write keeps the unput entry and adds its own.
    let failed = stage_rotation(Some(&surging), surging.enter(Step::Failed, t(2)));
    let ids: Vec<&str> = failed.outbox.iter().map(BusEvent::id).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    // A write that is no transition adds nothing.
    let again = stage_rotation(Some(&failed), failed.clone());
    assert_eq!(again.outbox, failed.outbox);
    // A new record replacing a finished one inherits its unput entries.
    let fresh = stage_rotation(Some(&failed), rot(Step::Pending, 3));
    assert_eq!(fresh.outbox, failed.outbox);
    // What the write staged: the difference.
    let new = staged(&surging.outbox, &failed.outbox);
    assert_eq!(new.len(), 1);
    assert_eq!(new[0].kind, Kind::RotationFailed);
    // The outbox is bounded.
    let mut r = rot(Step::Pending, 0);
    for i in 0..(OUTBOX_LIMIT as i64 + 5) {
        let started = stage_rotation(Some(&r), r.enter(Step::Surging, t(i)));
        r = stage_rotation(Some(&started), started.enter(Step::Done, t(i)));
        r = stage_rotation(Some(&r), r.enter(Step::Pending, t(i)));
    }
    assert_eq!(r.outbox.len(), OUTBOX_LIMIT);
    assert_eq!(
        r.outbox.last().map(|e| e.kind),
        Some(Kind::RotationFinished),
        "the newest are kept"
    );
}

#[test]
fn staging_a_pool_record_adds_its_events() {
    let base = record();
    let halted = stage_pool(
        &base,
        PoolRecord {
            halted: Some(RecordedError {
                message: "boom".into(),
                at: t(5),
            }),
            ..base.clone()
        },
        t(5),
    );
    assert_eq!(halted.outbox.len(), 1);
    // Halting an already halted pool is no change at all (not written).
    let again = stage_pool(&halted, halted.clone(), t(6));
    assert_eq!(again, halted);
    let cleared = PoolRecord {
        outbox: without(&halted.outbox, &[halted.outbox[0].id().to_string()]),
        ..halted.clone()
    };
    assert!(cleared.outbox.is_empty());
}

#[test]
fn a_sweep_puts_settled_entries_and_drops_stale_ones() {
    let mut r = rot(Step::Pending, 0);
    for at in [0, 100, 24 * 60 + 1] {
        let started = stage_rotation(Some(&r), r.enter(Step::Surging, t(-at)));
        r = stage_rotation(Some(&started), started.enter(Step::Pending, t(-at)));
    }
    // Entries at now, now - 100 min, now - 1 day 1 min.
    let s = sweep(&r.outbox, t(0));
    assert_eq!(s.due.len(), 1, "the 100-minute-old one");
    assert_eq!(s.due[0].detail.at, t(-100));
    assert_eq!(s.expired.len(), 1);
    assert_eq!(s.expired[0].detail.at, t(-(24 * 60 + 1)));
    // Just staged: its writer is putting it.
    assert!(
        sweep(&r.outbox, t(1))
            .due
            .iter()
            .all(|e| e.detail.at != t(0))
    );
    assert_eq!(
        sweep(&r.outbox, t(2)).due.len(),
        2,
        "settled after two minutes"
    );
}

#[test]
fn interruption_events_are_named_after_the_event_they_handled() {
    let a = interruption_handled(
        "prod/general",
        "i-1",
        "drained",
        "Spot interruption warning: drained",
        "SpotInterruption",
        Some("evt-1"),
        t(0),
    );
    let b = interruption_handled(
        "prod/general",
        "i-1",
        "drained",
        "Spot interruption warning: drained",
        "SpotInterruption",
        Some("evt-1"),
        t(1),
    );
    assert_eq!(
        a.id(),
        b.id(),
        "a redelivery handled later is the same event"
    );
    assert_eq!(
        a.id(),
        "interruption-handled:prod/general:i-1:drained:evt-1"
    );
    assert_eq!(a.kind.detail_type(), "Interruption Handled");
    assert_eq!(a.detail.source_event_id.as_deref(), Some("evt-1"));
}

#[test]
fn detail_types_round_trip_and_are_distinct() {
    let mut seen = std::collections::BTreeSet::new();
    for k in Kind::ALL {
        assert_eq!(Kind::from_detail_type(k.detail_type()), Some(k));
        assert!(seen.insert(k.detail_type()));
    }
    assert_eq!(Kind::from_detail_type("Scheduled Event"), None);
}

#[test]
fn outbox_entries_survive_the_record_encoding() {
    let pending = rot(Step::Pending, 0);
    let surging = stage_rotation(Some(&pending), rot(Step::Surging, 1));
    let json = serde_json::to_value(&surging).unwrap();
    let back: Rotation = serde_json::from_value(json).unwrap();
    assert_eq!(back.outbox, surging.outbox);
    // Records without an outbox (written before it existed, or cleared) have none.
    let json = serde_json::to_value(&pending).unwrap();
    assert!(json.get("outbox").is_none());
}

fn promoted(release: &str, image: &str, at: i64) -> crate::state::ReleaseEvent {
    crate::state::ReleaseEvent {
        release: crate::promotion::Release(release.into()),
        image: image.into(),
        at: t(at),
        how: crate::state::ReleaseHow::Promoted {
            from: "test/general".into(),
            proven_at: t(at - 5),
        },
    }
}

#[test]
fn a_promotion_is_announced_once_with_its_upstream() {
    let before = record();
    let mut after = PoolRecord {
        desired: Some(ami("ami-b")),
        ..record()
    };
    after.push_release(promoted("v20241109", "ami-b", 10));
    let events = pool_transitions(&before, &after, t(10));
    let kinds: Vec<Kind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, vec![Kind::DesiredAmiChanged, Kind::AmiPromoted]);
    let d = &events[1].detail;
    assert_eq!(d.release.as_deref(), Some("v20241109"));
    assert_eq!(d.upstream.as_deref(), Some("test/general"));
    assert_eq!(d.ami.as_deref(), Some("ami-b"));
    assert_eq!(d.proven_at, Some(t(5)));
    // The next write carries the same release history: nothing new.
    let later = PoolRecord {
        last_error: None,
        ..after.clone()
    };
    assert!(pool_transitions(&after, &later, t(11)).is_empty());
    // A rollback entry is not a promotion.
    let mut back = after.clone();
    back.push_release(crate::state::ReleaseEvent {
        how: crate::state::ReleaseHow::RolledBack {
            from_release: crate::promotion::Release("v20241109".into()),
            reason: "bad".into(),
        },
        ..promoted("v20241101", "ami-a", 20)
    });
    back.desired = Some(ami("ami-a"));
    let kinds: Vec<Kind> = pool_transitions(&after, &back, t(20))
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, vec![Kind::DesiredAmiChanged]);
}

#[test]
fn a_quarantine_event_names_its_target_cause_and_pool() {
    use crate::promotion::{Cause, Quarantine, Release, Target};
    let auto = Quarantine {
        target: Target::Release(Release("v20241201".into())),
        reason: "replacement never Ready".into(),
        by: "nodecycle".into(),
        at: t(3),
        cause: Cause::ReplacementNotReady {
            pool: "test/general".into(),
            instance: "i-9".into(),
        },
        outbox: Vec::new(),
    };
    let e = quarantined(&auto);
    assert_eq!(e.kind.detail_type(), "AMI Quarantined");
    assert_eq!(e.detail.pool, "test/general");
    assert_eq!(e.detail.cluster, "test");
    assert_eq!(e.detail.release.as_deref(), Some("v20241201"));
    assert_eq!(e.detail.instance.as_deref(), Some("i-9"));
    assert_eq!(quarantined(&auto).id(), e.id(), "derived, stable id");
    let manual = Quarantine {
        target: Target::Ami("ami-bad".into()),
        by: "alice".into(),
        cause: Cause::Operator {
            request_id: "r-1".into(),
        },
        ..auto.clone()
    };
    let m = quarantined(&manual);
    assert_eq!(m.detail.ami.as_deref(), Some("ami-bad"));
    assert_eq!(m.detail.by.as_deref(), Some("alice"));
    let json = serde_json::to_value(&m.detail).unwrap();
    assert!(json.get("pool").is_none() && json.get("cluster").is_none());
    assert_ne!(m.id(), e.id());
}
