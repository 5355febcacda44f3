//! The repository against the in-memory table: every typed operation's keys, versions, TTLs
//! and conditional-write refusals, and items as earlier versions wrote them.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use super::memory::MemoryStore;
use super::*;
use crate::managed::Phase;
use crate::promotion::{Cause, Release};
use crate::rotation::{RotationReason, Step};

fn t(minutes: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_790_000_000, 0).unwrap_or_default() + Duration::minutes(minutes)
}

fn repo() -> (Arc<MemoryStore>, Repository) {
    let mem = Arc::new(MemoryStore::new());
    (mem.clone(), Repository::new(mem))
}

fn same(_: &PoolRecord, after: PoolRecord) -> PoolRecord {
    after
}

fn rotation(instance: &str) -> Rotation {
    Rotation::new(
        "prod/general",
        instance,
        RotationReason::Drifted,
        false,
        t(0),
    )
}

fn quarantine(target: Target) -> Quarantine {
    Quarantine {
        target,
        reason: "bad".into(),
        by: "nodecycle".into(),
        at: t(1),
        cause: Cause::ReplacementNotReady {
            pool: "prod/general".into(),
            instance: "i-1".into(),
        },
        outbox: Vec::new(),
    }
}

fn by(at: i64) -> OperatorAction {
    OperatorAction {
        reason: "fixed".into(),
        at: t(at),
        by: Some("alice".into()),
    }
}

#[tokio::test]
async fn a_pool_record_is_created_updated_and_left_alone_when_unchanged() {
    let (mem, repo) = repo();
    assert_eq!(repo.pool("prod/general").await.unwrap(), None);
    let version = |mem: &MemoryStore| {
        mem.item("POOL#prod/general", "STATE")
            .map(|i| i.doc.version)
    };
    let (before, after) = repo
        .update_pool(
            "prod/general",
            |r| PoolRecord {
                kubernetes_version: Some("1.30".into()),
                ..r.clone()
            },
            same,
        )
        .await
        .unwrap();
    assert_eq!(before.pool, "prod/general", "a new record names its pool");
    assert_eq!(after.kubernetes_version.as_deref(), Some("1.30"));
    assert_eq!(version(&mem), Some(1));
    assert_eq!(
        repo.pool("prod/general").await.unwrap(),
        Some(after.clone())
    );
    // A change that changes nothing is not written.
    repo.update_pool("prod/general", PoolRecord::clone, same)
        .await
        .unwrap();
    assert_eq!(version(&mem), Some(1));
    // The stage hook sees the record before and its result is what is written.
    let (_, staged) = repo
        .update_pool(
            "prod/general",
            |r| PoolRecord {
                kubernetes_version: Some("1.31".into()),
                ..r.clone()
            },
            |b, mut a| {
                a.promotion_wait = b.kubernetes_version.clone();
                a
            },
        )
        .await
        .unwrap();
    assert_eq!(staged.promotion_wait.as_deref(), Some("1.30"));
    assert_eq!(version(&mem), Some(2));
    assert_eq!(mem.item("POOL#prod/general", "STATE").unwrap().ttl, None);
}

#[tokio::test]
async fn an_unreadable_pool_record_is_an_error_naming_the_pool() {
    let (mem, repo) = repo();
    mem.seed(
        "POOL#prod/general",
        "STATE",
        json!({"history": "not a list"}),
    );
    let e = repo.pool("prod/general").await.unwrap_err();
    assert!(e.to_string().contains("prod/general"), "{e}");
    let e = repo
        .update_pool("prod/general", PoolRecord::clone, same)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("prod/general"), "{e}");
}

#[tokio::test]
async fn a_pool_record_written_by_an_earlier_version_still_reads() {
    let (mem, repo) = repo();
    // Only the fields the first versions wrote (no ledger, releases, holds, outbox).
    mem.seed(
        "POOL#prod/general",
        "STATE",
        json!({
            "pool": "prod/general",
            "desired": null,
            "previousDesired": null,
            "desiredChangedAt": null,
            "resolvedAt": "2026-09-21T14:13:20Z",
            "kubernetesVersion": "1.29",
            "lastError": null
        }),
    );
    let r = repo.pool("prod/general").await.unwrap().unwrap();
    assert_eq!(r.kubernetes_version.as_deref(), Some("1.29"));
    assert!(r.history.is_empty() && r.outbox.is_empty() && r.halted.is_none());
}

#[tokio::test]
async fn rotations_are_conditional_and_unreadable_ones_are_skipped_but_replaceable() {
    let (mem, repo) = repo();
    let r = rotation("i-1");
    assert_eq!(repo.put_rotation(&r, None, None).await.unwrap(), Some(1));
    // A second creation loses: the record exists.
    assert_eq!(repo.put_rotation(&r, None, None).await.unwrap(), None);
    // A stale version loses too.
    let done = r.enter(Step::Done, t(5));
    let ttl = crate::rotation::retention(&done);
    assert_eq!(repo.put_rotation(&done, Some(7), ttl).await.unwrap(), None);
    assert_eq!(
        repo.put_rotation(&done, Some(1), ttl).await.unwrap(),
        Some(2)
    );
    let item = mem.item("POOL#prod/general", "ROT#i-1").unwrap();
    assert_eq!(item.ttl, Some(t(5) + Duration::days(7)));
    mem.seed("POOL#prod/general", "ROT#i-2", json!({"step": 3}));
    let all = repo.rotations("prod/general").await.unwrap();
    assert_eq!(all.len(), 1, "the unreadable record is skipped");
    assert_eq!((all[0].value.step, all[0].version), (Step::Done, 2));
    let unreadable = repo.rotation("prod/general", "i-2").await.unwrap().unwrap();
    assert_eq!((unreadable.value, unreadable.version), (None, 1));
    assert_eq!(repo.rotation("prod/general", "i-9").await.unwrap(), None);
    let r2 = rotation("i-2");
    assert_eq!(
        repo.put_rotation(&r2, Some(1), None).await.unwrap(),
        Some(2)
    );
}

#[tokio::test]
async fn a_managed_update_is_replaced_only_over_its_version() {
    let (mem, repo) = repo();
    let update = ManagedUpdate {
        pool: "prod/general".into(),
        image: "ami-1".into(),
        target: None,
        max_unavailable: 1,
        token: "tok".into(),
        update_id: None,
        phase: Phase::Starting,
        started_at: t(0),
        phase_at: t(0),
        errors: Vec::new(),
        original_config: None,
        config_restored: false,
    };
    assert_eq!(repo.managed_update("prod/general").await.unwrap(), None);
    assert_eq!(
        repo.put_managed_update(&update, None).await.unwrap(),
        Some(1)
    );
    assert_eq!(repo.put_managed_update(&update, None).await.unwrap(), None);
    let read = repo.managed_update("prod/general").await.unwrap().unwrap();
    assert_eq!((read.value, read.version), (update, 1));
    assert!(mem.item("POOL#prod/general", "MNGUPDATE").is_some());
    mem.seed("POOL#prod/other", "MNGUPDATE", json!({"pool": 1}));
    let e = repo.managed_update("prod/other").await.unwrap_err();
    assert!(e.to_string().contains("prod/other"), "{e}");
}

#[tokio::test]
async fn a_lease_has_one_holder_until_it_expires_or_is_released() {
    let (mem, repo) = repo();
    let ttl = Duration::minutes(5);
    assert_eq!(
        repo.acquire_lease("cluster/prod", "a", t(0), ttl)
            .await
            .unwrap(),
        Ok(())
    );
    let item = mem.item("LEASE#cluster/prod", "LEASE").unwrap();
    assert_eq!(item.ttl, Some(t(5) + Duration::days(1)));
    // Ours again: fine; someone else's before it expires: refused with its holder.
    assert_eq!(
        repo.acquire_lease("cluster/prod", "a", t(1), ttl)
            .await
            .unwrap(),
        Ok(())
    );
    let held = repo
        .acquire_lease("cluster/prod", "b", t(2), ttl)
        .await
        .unwrap();
    assert_eq!(held.map_err(|l| l.holder), Err("a".to_string()));
    // Released by another holder: nothing; by its holder: free at once.
    repo.release_lease("cluster/prod", "b", t(2)).await.unwrap();
    assert!(
        repo.acquire_lease("cluster/prod", "b", t(2), ttl)
            .await
            .unwrap()
            .is_err()
    );
    repo.release_lease("cluster/prod", "a", t(2)).await.unwrap();
    assert_eq!(
        repo.acquire_lease("cluster/prod", "b", t(2), ttl)
            .await
            .unwrap(),
        Ok(())
    );
    // Expired: taken over.
    assert_eq!(
        repo.acquire_lease("cluster/prod", "c", t(8), ttl)
            .await
            .unwrap(),
        Ok(())
    );
}

#[tokio::test]
async fn a_quarantine_keeps_its_first_entry_and_a_lifted_one_is_kept_for_the_audit() {
    let (mem, repo) = repo();
    let target = Target::Release(Release("v1".into()));
    let event = crate::bus::event(crate::bus::Kind::AmiQuarantined, "prod/general", t(1), &[]);
    let q = Quarantine {
        outbox: vec![event.clone()],
        ..quarantine(target.clone())
    };
    assert!(repo.put_quarantine(&q).await.unwrap());
    let second = Quarantine {
        reason: "other".into(),
        ..q.clone()
    };
    assert!(
        !repo.put_quarantine(&second).await.unwrap(),
        "the first entry stays"
    );
    let all = repo.quarantine().await.unwrap();
    assert_eq!(all.0.len(), 1);
    assert_eq!(all.0[0].reason, "bad");
    assert!(mem.item("QUARANTINE", "Q#REL#v1").is_some());
    // Its event leaves the outbox once put.
    repo.remove_quarantine_events(&target, &[event.id().to_string()])
        .await
        .unwrap();
    let doc = mem.item("QUARANTINE", "Q#REL#v1").unwrap().doc.value;
    assert!(doc.get("outbox").is_none());
    // Lifted: no longer in force, kept with who/when/why; lifting again says it was not.
    assert!(repo.lift_quarantine(&target, &by(3)).await.unwrap());
    assert!(!repo.lift_quarantine(&target, &by(4)).await.unwrap());
    assert!(repo.quarantine().await.unwrap().0.is_empty());
    let doc = mem.item("QUARANTINE", "Q#REL#v1").unwrap().doc.value;
    assert_eq!(doc["liftedBy"], "alice");
    // A lifted target can be quarantined again.
    assert!(repo.put_quarantine(&second).await.unwrap());
    assert_eq!(repo.quarantine().await.unwrap().0[0].reason, "other");
    assert!(
        !repo
            .lift_quarantine(&Target::Ami("ami-none".into()), &by(5))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_stop_switch_flips_once_and_a_foreign_item_stops() {
    let (mem, repo) = repo();
    assert_eq!(repo.stop_switch().await.unwrap(), None);
    assert_eq!(repo.stop_gate().await, None);
    let on = StopSwitch {
        stopped: true,
        reason: "incident".into(),
        by: Some("alice".into()),
        at: Some(t(0)),
        request_id: Some("r1".into()),
    };
    // Starting what was never stopped writes nothing.
    let off = StopSwitch {
        stopped: false,
        ..on.clone()
    };
    assert_eq!(repo.set_stop_switch(&off).await.unwrap(), (None, false));
    assert!(mem.item("DEPLOYMENT", "STOP").is_none());
    assert_eq!(repo.set_stop_switch(&on).await.unwrap(), (None, true));
    // Stopping again keeps the first record.
    let again = StopSwitch {
        reason: "again".into(),
        ..on.clone()
    };
    assert_eq!(
        repo.set_stop_switch(&again).await.unwrap(),
        (Some(on.clone()), false)
    );
    assert!(repo.stop_gate().await.unwrap().contains("incident"));
    assert_eq!(repo.set_stop_switch(&off).await.unwrap(), (Some(on), true));
    assert_eq!(repo.stop_switch().await.unwrap(), None);
    // An operator's hand-written item without `stopped` counts as stopped.
    mem.seed("DEPLOYMENT", "STOP", json!({"reason": "by hand"}));
    assert_eq!(repo.stop_switch().await.unwrap().unwrap().reason, "by hand");
    mem.seed("DEPLOYMENT", "STOP", json!("garbage"));
    assert!(repo.stop_switch().await.unwrap().unwrap().stopped);
}

#[tokio::test]
async fn audit_records_go_to_their_scope_and_expire() {
    let (mem, repo) = repo();
    let ttl = t(0) + Duration::days(400);
    for (scope, pk) in [
        (AuditScope::Unscoped, "AUDIT"),
        (AuditScope::Quarantine, "QUARANTINE"),
        (AuditScope::Deployment, "DEPLOYMENT"),
        (AuditScope::Pool("prod/general"), "POOL#prod/general"),
    ] {
        let audit = repo
            .audit_start(scope, "req-1", &json!({"started": true}), t(0), ttl)
            .await
            .unwrap();
        assert_eq!(audit.partition(), pk);
        let sk = "AUDIT#2026-09-21T14:13:20.000Z#req-1";
        assert_eq!(mem.item(pk, sk).unwrap().ttl, Some(ttl));
        // The same request id at the same instant is refused (never overwritten).
        assert!(
            repo.audit_start(scope, "req-1", &json!({}), t(0), ttl)
                .await
                .is_err()
        );
        repo.audit_finish(&audit, &json!({"ok": true}), ttl)
            .await
            .unwrap();
        assert_eq!(mem.item(pk, sk).unwrap().doc.value["ok"], true);
        // Finishing twice conflicts: the record moved on from the version started.
        assert!(repo.audit_finish(&audit, &json!({}), ttl).await.is_err());
    }
}

#[tokio::test]
async fn a_rotate_request_is_recorded_for_repeats() {
    let (mem, repo) = repo();
    assert_eq!(
        repo.rotate_request("prod/general", 0xabc).await.unwrap(),
        None
    );
    let v = repo
        .put_rotate_request("prod/general", 0xabc, &json!({"at": "x"}), None, t(61))
        .await
        .unwrap();
    let item = mem
        .item("POOL#prod/general", "REQ#rotate#0000000000000abc")
        .unwrap();
    assert_eq!((item.doc.version, item.ttl), (v, Some(t(61))));
    assert!(
        repo.put_rotate_request("prod/general", 0xabc, &json!({}), None, t(61))
            .await
            .is_err()
    );
    let earlier = repo.rotate_request("prod/general", 0xabc).await.unwrap();
    assert_eq!(earlier.map(|e| e.value["at"].clone()), Some(json!("x")));
}

#[tokio::test]
async fn claims_are_conditional_per_work_and_per_event() {
    let (mem, repo) = repo();
    let work = ClaimKey::work("prod/general", "i-1", "drain");
    let event = ClaimKey::event("evt-1");
    assert_eq!(work.to_string(), "POOL#prod/general/CLAIM#i-1#drain");
    for key in [&work, &event] {
        assert_eq!(repo.claim(key).await.unwrap(), None);
        let v = repo
            .put_claim(key, &json!({"status": "started"}), None, t(10))
            .await
            .unwrap();
        assert_eq!(v, Some(1));
        assert_eq!(
            repo.put_claim(key, &json!({}), None, t(10)).await.unwrap(),
            None,
            "taken"
        );
        assert_eq!(
            repo.put_claim(key, &json!({"status": "done"}), Some(1), t(11))
                .await
                .unwrap(),
            Some(2)
        );
        assert_eq!(
            repo.claim(key).await.unwrap().unwrap().value["status"],
            "done"
        );
    }
    assert_eq!(
        mem.item("POOL#prod/general", "CLAIM#i-1#drain")
            .unwrap()
            .ttl,
        Some(t(11))
    );
    assert!(mem.item("EVENT#evt-1", "EVENT").is_some());
}

#[tokio::test]
async fn lifecycle_hand_overs_and_the_event_log_are_per_pool() {
    let (mem, repo) = repo();
    let open = json!({"status": "open"});
    assert_eq!(
        repo.put_lifecycle_handover("prod/general", "i-1", &open, None, t(5))
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        repo.put_lifecycle_handover("prod/general", "i-1", &open, None, t(5))
            .await
            .unwrap(),
        None,
        "already open"
    );
    let all = repo.lifecycle_handovers("prod/general").await.unwrap();
    assert_eq!(all.len(), 1);
    assert!(
        repo.lifecycle_handovers("prod/other")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(mem.item("POOL#prod/general", "LCA#i-1").is_some());
    // Two entries for one instance in one second: the second gets the tail.
    for _ in 0..2 {
        repo.log_event(
            "prod/general",
            t(0),
            "i-1",
            "evt-1",
            &json!({"a": 1}),
            t(60),
        )
        .await
        .unwrap();
    }
    let log = repo.event_log("prod/general").await.unwrap();
    let ids: Vec<&str> = log.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        ids,
        vec![
            "EVT#2026-09-21T14:13:20Z#i-1",
            "EVT#2026-09-21T14:13:20Z#i-1#evt-1"
        ]
    );
    assert!(
        repo.log_event("prod/general", t(0), "i-1", "evt-1", &json!({}), t(60))
            .await
            .is_err(),
        "a third in the same second with the same tail conflicts"
    );
}

#[test]
fn key_formats_are_those_of_the_items_in_users_tables() {
    assert_eq!(keys::pool_pk("prod/general"), "POOL#prod/general");
    assert_eq!(keys::rotation_sk("i-1"), "ROT#i-1");
    assert_eq!(keys::lease_pk("cluster/prod"), "LEASE#cluster/prod");
    assert_eq!(
        keys::quarantine_sk(&Target::Ami("ami-1".into())),
        "Q#AMI#ami-1"
    );
    assert_eq!(
        keys::quarantine_sk(&Target::Release(Release("v1".into()))),
        "Q#REL#v1"
    );
    assert_eq!(keys::claim_sk("i-1", "gone"), "CLAIM#i-1#gone");
    assert_eq!(keys::event_claim_pk("e"), "EVENT#e");
    assert_eq!(keys::lifecycle_sk("i-1"), "LCA#i-1");
    assert_eq!(keys::rotate_request_sk(1), "REQ#rotate#0000000000000001");
    assert_eq!(
        (
            keys::POOL_STATE_SK,
            keys::UPDATE_SK,
            keys::LEASE_SK,
            keys::STOP_SK
        ),
        ("STATE", "MNGUPDATE", "LEASE", "STOP")
    );
}

#[tokio::test]
async fn scratch_writes_stay_in_memory_over_the_table_and_stay_conditional() {
    let (mem, _) = repo();
    mem.seed(
        "POOL#prod/general",
        "STATE",
        json!({"pool": "prod/general"}),
    );
    let scratch = Arc::new(Scratch::new(Some(mem.clone())));
    let repo = Repository::new(scratch.clone());
    // Reads come from the table; a write over the table's version lands in memory only.
    let (_, after) = repo
        .update_pool(
            "prod/general",
            |r| PoolRecord {
                kubernetes_version: Some("1.31".into()),
                ..r.clone()
            },
            same,
        )
        .await
        .unwrap();
    assert_eq!(repo.pool("prod/general").await.unwrap(), Some(after));
    assert_eq!(
        mem.item("POOL#prod/general", "STATE").unwrap().doc.version,
        1
    );
    let err = scratch
        .put("POOL#prod/general", "STATE", &json!({}), Some(1), None)
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Conflict, "the scratch copy is at 2");
    let r = rotation("i-1");
    repo.put_rotation(&r, None, None).await.unwrap();
    assert_eq!(repo.rotations("prod/general").await.unwrap().len(), 1);
    assert!(mem.item("POOL#prod/general", "ROT#i-1").is_none());
}
