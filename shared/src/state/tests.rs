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
    // A cluster's in one batch read, each as `managed_update` reads it.
    let pools = ["prod/general", "prod/other", "prod/none"].map(String::from);
    let all = repo.managed_updates(&pools).await;
    let general = all["prod/general"].as_ref().unwrap().as_ref().unwrap();
    assert_eq!(
        (general.value.image.as_str(), general.version),
        ("ami-1", 1)
    );
    assert!(
        all["prod/other"]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("prod/other")
    );
    assert_eq!(all["prod/none"], Ok(None));
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

// --- batched reads of a cluster's pools, and the rotation index ---
//
// The in-memory table counts its calls by operation and runs a hook just before the next
// call of one ([`MemoryStore::before`]): another writer getting in between.

fn pool_doc(pool: &str, index: Option<&[&str]>) -> Value {
    let mut doc = json!({"pool": pool, "kubernetesVersion": "1.30"});
    if let Some(ids) = index {
        doc["rotationIndex"] = json!(ids);
    }
    doc
}

fn rotation_of(pool: &str, instance: &str) -> Rotation {
    Rotation::new(pool, instance, RotationReason::Drifted, false, t(0))
}

#[allow(clippy::unwrap_used, clippy::expect_used)]
fn index_of(mem: &MemoryStore, pool: &str) -> Option<Vec<String>> {
    let doc = mem
        .item(&keys::pool_pk(pool), keys::POOL_STATE_SK)?
        .doc
        .value;
    serde_json::from_value(doc.get("rotationIndex")?.clone()).ok()
}

/// A minute at which none of `pools` is due for its index check.
#[allow(clippy::unwrap_used, clippy::expect_used)]
fn quiet_minute(pools: &[String]) -> DateTime<Utc> {
    (0..INDEX_CHECK_EVERY)
        .map(t)
        .find(|now| !pools.iter().any(|p| index_check_due(p, *now)))
        .expect("a minute with no check due")
}

#[tokio::test]
async fn a_pass_reads_its_pools_records_in_batches_by_their_index() {
    let (w, repo) = repo();
    let pools: Vec<String> = (0..30).map(|i| format!("prod/p{i}")).collect();
    for p in &pools {
        w.seed(&keys::pool_pk(p), "STATE", pool_doc(p, Some(&[])));
    }
    let busy = &pools[7];
    w.seed(
        &keys::pool_pk(busy),
        "STATE",
        pool_doc(busy, Some(&["i-1", "i-2"])),
    );
    for id in ["i-1", "i-2"] {
        let r = serde_json::to_value(rotation_of(busy, id)).unwrap();
        w.insert(&keys::pool_pk(busy), &keys::rotation_sk(id), r, 3, None);
    }
    let now = quiet_minute(&pools);
    let read = repo.pool_partitions(&pools, true, now).await;
    assert_eq!(read.len(), 30, "every pool has an entry");
    let busy_read = read[busy].as_ref().unwrap();
    let ids: Vec<_> = busy_read
        .rotations
        .iter()
        .map(|v| (v.value.instance_id.as_str(), v.version))
        .collect();
    assert_eq!(ids, [("i-1", 3), ("i-2", 3)]);
    assert_eq!(busy_read.record.as_ref().map(|r| r.version), Some(1));
    assert!(read[&pools[0]].as_ref().unwrap().rotations.is_empty());
    // One batch of pool records, one of rotation records; no Query, no write.
    assert_eq!(
        (w.calls("batch_get"), w.calls("query"), w.calls("put")),
        (2, 0, 0)
    );

    // 250 pools: three batches of pool records (100 keys a call at most).
    let many: Vec<String> = (0..250).map(|i| format!("big/p{i}")).collect();
    for p in &many {
        w.seed(&keys::pool_pk(p), "STATE", pool_doc(p, Some(&[])));
    }
    let due = many.iter().filter(|p| index_check_due(p, now)).count() as u32;
    repo.pool_partitions(&many, true, now).await;
    assert_eq!(
        w.calls("batch_get"),
        2 + 3,
        "empty indexes: no rotation batch"
    );
    assert_eq!(
        w.calls("query"),
        due,
        "only the pools due for their hourly check are queried"
    );
}

#[tokio::test]
async fn a_record_without_an_index_is_queried_and_gets_one() {
    let (w, repo) = repo();
    let pool = "prod/general".to_string();
    // As an earlier version wrote them: no index, two rotation records.
    w.seed("POOL#prod/general", "STATE", pool_doc(&pool, None));
    for id in ["i-1", "i-2"] {
        let r = serde_json::to_value(rotation_of(&pool, id)).unwrap();
        w.seed("POOL#prod/general", &keys::rotation_sk(id), r);
    }
    let now = quiet_minute(std::slice::from_ref(&pool));
    // A read-only pass (plan, status) queries and writes nothing.
    let read = repo
        .pool_partitions(std::slice::from_ref(&pool), false, now)
        .await;
    assert_eq!(read[&pool].as_ref().unwrap().rotations.len(), 2);
    assert_eq!((w.calls("query"), w.calls("put")), (1, 0));
    assert_eq!(index_of(&w, &pool), None);
    // A pass queries it and records the index, conditional on the version it read.
    let read = repo
        .pool_partitions(std::slice::from_ref(&pool), true, now)
        .await;
    let read = read[&pool].as_ref().unwrap();
    assert_eq!(read.rotations.len(), 2);
    assert_eq!(
        read.record.as_ref().map(|r| r.version),
        Some(2),
        "the version written"
    );
    assert_eq!(
        index_of(&w, &pool),
        Some(vec!["i-1".to_string(), "i-2".to_string()])
    );
    assert_eq!((w.calls("query"), w.calls("put")), (2, 1));
    // From then on: by key.
    let read = repo
        .pool_partitions(std::slice::from_ref(&pool), true, now)
        .await;
    assert_eq!(read[&pool].as_ref().unwrap().rotations.len(), 2);
    assert_eq!((w.calls("query"), w.calls("put")), (2, 1));
    // The hourly check queries it again, and finds the index right.
    let due = (0..INDEX_CHECK_EVERY)
        .map(t)
        .find(|n| index_check_due(&pool, *n))
        .unwrap();
    repo.pool_partitions(std::slice::from_ref(&pool), true, due)
        .await;
    assert_eq!((w.calls("query"), w.calls("put")), (3, 1));
}

#[tokio::test]
async fn an_index_naming_an_expired_record_is_pruned_unless_a_writer_got_in_first() {
    let (w, repo) = repo();
    let pool = "prod/general".to_string();
    w.seed(
        "POOL#prod/general",
        "STATE",
        pool_doc(&pool, Some(&["i-1", "i-9"])),
    );
    let r = serde_json::to_value(rotation_of(&pool, "i-1")).unwrap();
    w.seed("POOL#prod/general", "ROT#i-1", r);
    let now = quiet_minute(std::slice::from_ref(&pool));
    // Another writer creates i-9 again between the read and the pruning write: the write
    // loses, the index keeps i-9.
    let racer = repo.clone();
    w.before("put", move |_| {
        futures::executor::block_on(racer.put_rotation(
            &rotation_of("prod/general", "i-9"),
            None,
            None,
        ))
        .unwrap();
    });
    let read = repo
        .pool_partitions(std::slice::from_ref(&pool), true, now)
        .await;
    assert_eq!(read[&pool].as_ref().unwrap().rotations.len(), 1, "as read");
    assert_eq!(
        index_of(&w, &pool),
        Some(vec!["i-1".to_string(), "i-9".to_string()])
    );
    assert!(w.item("POOL#prod/general", "ROT#i-9").is_some());
    // Without a writer in between, an id without a record is dropped.
    w.seed(
        "POOL#prod/general",
        "STATE",
        pool_doc(&pool, Some(&["i-1", "i-7"])),
    );
    repo.pool_partitions(std::slice::from_ref(&pool), true, now)
        .await;
    assert_eq!(index_of(&w, &pool), Some(vec!["i-1".to_string()]));
}

#[tokio::test]
async fn creating_a_rotation_indexes_it_in_one_transaction_and_retries_a_lost_race() {
    let (w, repo) = repo();
    let pool = "prod/general";
    w.seed("POOL#prod/general", "STATE", pool_doc(pool, Some(&["i-0"])));
    // Another writer changes the pool record between our read and our transaction.
    w.before("transact", |mem| {
        let mut doc = mem.item("POOL#prod/general", "STATE").unwrap().doc;
        doc.value["kubernetesVersion"] = json!("1.31");
        mem.insert(
            "POOL#prod/general",
            "STATE",
            doc.value,
            doc.version + 1,
            None,
        );
    });
    assert_eq!(
        repo.put_rotation(&rotation_of(pool, "i-1"), None, None)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        w.calls("transact"),
        2,
        "the lost transaction was tried again"
    );
    let state = w.item("POOL#prod/general", "STATE").unwrap().doc;
    assert_eq!(state.version, 3, "the other writer's version, then ours");
    assert_eq!(
        state.value["kubernetesVersion"], "1.31",
        "the other writer's change kept"
    );
    assert_eq!(
        index_of(&w, pool),
        Some(vec!["i-0".to_string(), "i-1".to_string()])
    );
    // A rotation that exists already: another writer won, nothing written.
    assert_eq!(
        repo.put_rotation(&rotation_of(pool, "i-1"), None, None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(w.item("POOL#prod/general", "STATE").unwrap().doc.version, 3);
    // A record without an index is written (a new version) and stays without one.
    w.seed("POOL#prod/other", "STATE", pool_doc("prod/other", None));
    repo.put_rotation(&rotation_of("prod/other", "i-2"), None, None)
        .await
        .unwrap();
    assert_eq!(w.item("POOL#prod/other", "STATE").unwrap().doc.version, 2);
    assert_eq!(index_of(&w, "prod/other"), None);
    // A pool with no record: only its absence is checked, no record is made up.
    repo.put_rotation(&rotation_of("prod/new", "i-3"), None, None)
        .await
        .unwrap();
    assert!(w.item("POOL#prod/new", "STATE").is_none());
    assert!(w.item("POOL#prod/new", "ROT#i-3").is_some());
}

#[tokio::test]
async fn unprocessed_keys_are_asked_again_and_a_batch_that_never_ends_falls_back_to_queries() {
    let (w, repo) = repo();
    let pools: Vec<String> = (0..20).map(|i| format!("prod/p{i}")).collect();
    for p in &pools {
        w.seed(&keys::pool_pk(p), "STATE", pool_doc(p, Some(&[])));
    }
    let now = quiet_minute(&pools[..5]);
    let due = pools.iter().filter(|p| index_check_due(p, now)).count() as u32;
    // Three answers each leave all but one key unprocessed: asked again until all are read.
    w.leave_unprocessed(3);
    let read = repo.pool_partitions(&pools, true, now).await;
    assert!(
        read.values().all(|r| r.as_ref().unwrap().record.is_some()),
        "{read:?}"
    );
    assert_eq!(w.calls("batch_get"), 4);
    assert_eq!(w.calls("query"), due);
    // A batch still unprocessed after every attempt: each pool is queried instead.
    w.leave_unprocessed(BATCH_ATTEMPTS);
    let read = repo.pool_partitions(&pools, true, now).await;
    assert!(
        read.values().all(|r| r.as_ref().unwrap().record.is_some()),
        "{read:?}"
    );
    assert_eq!(w.calls("batch_get"), 4 + BATCH_ATTEMPTS as u32);
    assert_eq!(w.calls("query"), due + 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_index_never_misses_a_rotation_whatever_the_writers_interleaving() {
    let mem = Arc::new(MemoryStore::new());
    let repo = Repository::new(mem.clone());
    let pool = "prod/general".to_string();
    // An earlier version's record (no index) and rotation.
    mem.seed("POOL#prod/general", "STATE", pool_doc(&pool, None));
    let r = serde_json::to_value(rotation_of(&pool, "i-legacy")).unwrap();
    mem.seed("POOL#prod/general", "ROT#i-legacy", r);
    let now = quiet_minute(std::slice::from_ref(&pool));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..12 {
        let repo = repo.clone();
        tasks.spawn(async move {
            // Creators, and writers of other fields of the pool record.
            let _ = repo
                .put_rotation(&rotation_of("prod/general", &format!("i-{i}")), None, None)
                .await;
            let _ = repo
                .update_pool(
                    "prod/general",
                    |r| PoolRecord {
                        promotion_wait: Some(format!("{i}")),
                        ..r.clone()
                    },
                    same,
                )
                .await;
        });
    }
    for _ in 0..6 {
        let (repo, pool) = (repo.clone(), pool.clone());
        tasks.spawn(async move {
            // Passes that record and prune the index.
            for _ in 0..10 {
                repo.pool_partitions(std::slice::from_ref(&pool), true, now)
                    .await;
                tokio::task::yield_now().await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let stored: std::collections::BTreeSet<String> = mem
        .items()
        .keys()
        .filter(|(pk, _)| pk == "POOL#prod/general")
        .filter_map(|(_, sk)| sk.strip_prefix("ROT#").map(str::to_string))
        .collect();
    assert!(stored.len() > 1, "{stored:?}");
    if index_of(&mem, &pool).is_none() {
        // Every pass lost its race to record one: the next records it.
        repo.pool_partitions(std::slice::from_ref(&pool), true, now)
            .await;
    }
    let index: std::collections::BTreeSet<String> =
        index_of(&mem, &pool).unwrap().into_iter().collect();
    assert!(
        index.is_superset(&stored),
        "index {index:?} misses some of {stored:?}"
    );
    // Every pass now reads them all by key.
    let read = repo
        .pool_partitions(std::slice::from_ref(&pool), true, now)
        .await;
    assert_eq!(read[&pool].as_ref().unwrap().rotations.len(), stored.len());
}

#[tokio::test]
async fn a_pool_record_and_its_new_rotations_are_written_together_or_not_at_all() {
    let (w, repo) = repo();
    let pool = "prod/general";
    w.seed("POOL#prod/general", "STATE", pool_doc(pool, Some(&["i-0"])));
    let old = serde_json::to_value(rotation_of(pool, "i-0").enter(Step::Done, t(1))).unwrap();
    w.insert("POOL#prod/general", "ROT#i-0", old, 4, None);
    let record = repo.pool(pool).await.unwrap().unwrap();
    let held = PoolRecord {
        promotion_wait: Some("held".into()),
        ..record.clone()
    };
    let surging = rotation_of(pool, "i-1").enter(Step::Surging, t(2));
    let again = rotation_of(pool, "i-0");
    // A stale version of the finished record it replaces: nothing written.
    let stale = [
        (surging.clone(), None, None),
        (again.clone(), Some(3), None),
    ];
    assert_eq!(
        repo.put_pool_and_rotations(&held, 1, &stale).await.unwrap(),
        None
    );
    assert!(w.item("POOL#prod/general", "ROT#i-1").is_none());
    assert_eq!(w.item("POOL#prod/general", "STATE").unwrap().doc.version, 1);
    // From the versions read: one transaction, the new ids indexed.
    let fresh = [(surging, None, None), (again, Some(4), None)];
    let (stored, version) = repo
        .put_pool_and_rotations(&held, 1, &fresh)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(version, 2);
    assert_eq!(w.calls("transact"), 2);
    assert_eq!(
        w.item("POOL#prod/general", "ROT#i-1").unwrap().doc.version,
        1
    );
    assert_eq!(
        w.item("POOL#prod/general", "ROT#i-0").unwrap().doc.version,
        5
    );
    assert_eq!(stored.promotion_wait.as_deref(), Some("held"));
    assert_eq!(
        index_of(&w, pool),
        Some(vec!["i-0".to_string(), "i-1".to_string()])
    );
    // The pool record moved on since: nothing written, the caller reads again.
    assert_eq!(
        repo.put_pool_and_rotations(&held, 1, &[(rotation_of(pool, "i-2"), None, None)])
            .await
            .unwrap(),
        None
    );
    assert!(w.item("POOL#prod/general", "ROT#i-2").is_none());
}

#[tokio::test]
async fn deferred_events_are_put_and_their_outboxes_cleared_in_one_transaction() {
    let (w, repo) = repo();
    let announcer = crate::announce::Announcer::new(w.clone(), Arc::new(crate::bus::Discard));
    let deferred = crate::announce::Deferred::default();
    let mut written = Vec::new();
    for id in ["i-1", "i-2", "i-3"] {
        let pending = rotation_of("prod/general", id);
        let started = crate::announce::stage::stage_rotation(
            Some(&pending),
            pending.enter(Step::Surging, t(1)),
        );
        assert_eq!(started.outbox.len(), 1, "Rotation Started staged");
        repo.put_rotation(&started, None, None).await.unwrap();
        written.push(Versioned {
            value: started.clone(),
            version: 1,
        });
        deferred.push(
            Versioned {
                value: started.clone(),
                version: 1,
            },
            started.outbox.clone(),
        );
    }
    // Another writer moves i-3 on before the flush: its entry stays for the sweep.
    let moved = Rotation {
        error: Some("other writer".into()),
        ..written[2].value.clone()
    };
    repo.put_rotation(&moved, Some(1), None).await.unwrap();
    let transactions = w.calls("transact");
    assert_eq!(announcer.flush(&deferred).await, 3, "every event put");
    assert!(deferred.is_empty());
    let outbox = |id: &str| {
        let doc = w
            .item("POOL#prod/general", &format!("ROT#{id}"))
            .unwrap()
            .doc;
        serde_json::from_value::<Rotation>(doc.value)
            .unwrap()
            .outbox
            .len()
    };
    assert_eq!((outbox("i-1"), outbox("i-2"), outbox("i-3")), (0, 0, 1));
    // One transaction lost to the other writer; then one write at a time.
    assert_eq!(w.calls("transact"), transactions + 1);
}

#[tokio::test]
async fn a_parameter_version_is_recorded_only_when_newer() {
    let (_, repo) = repo();
    let seen = |version: i64, value: &str| SeenParameter {
        version,
        value: value.into(),
        at: t(0),
    };
    let name = "/aws/service/eks/x/recommended/image_id";
    // First sight: recorded, nothing replaced.
    assert_eq!(
        repo.see_parameter(name, &seen(7, "ami-2")).await.unwrap(),
        None
    );
    // A stale read (lower version) and a repeat change nothing.
    for stale in [seen(6, "ami-1"), seen(7, "ami-2")] {
        assert_eq!(repo.see_parameter(name, &stale).await.unwrap(), None);
    }
    assert_eq!(
        repo.seen_parameters().await.unwrap()[name],
        seen(7, "ami-2")
    );
    // A newer version replaces it and answers with what it replaced.
    assert_eq!(
        repo.see_parameter(name, &seen(8, "ami-1")).await.unwrap(),
        Some(seen(7, "ami-2"))
    );
    assert_eq!(repo.seen_parameters().await.unwrap()[name].version, 8);
}
