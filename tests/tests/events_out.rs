//! Events out, end to end: a rollout in the fake cloud puts the documented events on the
//! account's default EventBridge bus, captured as a consumer would, by a rule (`source:
//! nodecycle`) with an SQS target. Each transition arrives exactly once, also when passes are
//! retried and run concurrently; an event whose put failed stays in its record's outbox and a
//! later pass puts it (once).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nodecycle::handlers::Invocation;
use nodecycle::rotation::Step;
use nodecycle::state::Store;
use nodecycle_tests::{AwsFault, AwsFaults, Faults};
use serde_json::{Value, json};
use support::pool::*;
use support::{capture, delivered};

const QUEUE: &str = "nodecycle-events";

fn by_type(events: &[Value]) -> BTreeMap<String, Vec<&Value>> {
    let mut out: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in events {
        out.entry(e["detail-type"].as_str().unwrap().to_string())
            .or_default()
            .push(e);
    }
    out
}

/// Every delivered event is nodecycle's, and no transition came twice.
fn assert_once(events: &[Value]) {
    let mut ids = BTreeMap::new();
    for e in events {
        assert_eq!(e["source"], "nodecycle", "{e}");
        let id = e["detail"]["eventId"].as_str().unwrap().to_string();
        if let Some(first) = ids.insert(id.clone(), e.clone()) {
            panic!("transition {id} delivered twice:\n{first}\n{e}");
        }
    }
}

/// A rotator pass run twice at once (the second finds the cluster leased or the work done),
/// then retried, as EventBridge may deliver a schedule late or twice.
async fn racing_passes(p: &Pool, now: chrono::DateTime<chrono::Utc>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let tick = json!({});
    let (a, b) = tokio::join!(
        p.rotator.handle(&tick, Invocation::at(now, deadline)),
        p.rotator.handle(&tick, Invocation::at(now, deadline))
    );
    a.unwrap();
    b.unwrap();
    p.pass(now).await;
}

/// Entries waiting in the outboxes of the pool's records and of the quarantine records.
async fn outboxes_left(p: &Pool) -> usize {
    let mut n = 0;
    for (pk, sk) in [
        ("POOL#prod/general", "STATE"),
        ("POOL#prod/general", "ROT#"),
        ("QUARANTINE", "Q#"),
    ] {
        n += p
            .table
            .query(pk, sk)
            .await
            .unwrap()
            .iter()
            .map(|(_, v)| v.value["outbox"].as_array().map_or(0, Vec::len))
            .sum::<usize>();
    }
    n
}

#[tokio::test]
async fn a_rollout_puts_each_transition_on_the_bus_exactly_once() {
    let p = pool(4, "    - nodes: \"2\"\n", false).await;
    capture(&p.cloud, QUEUE).await;
    let t0 = at("2026-12-01T10:00:00Z");
    // The watcher's schedule delivered twice: one change, one event.
    p.watcher.handle(&json!({}), t0).await.unwrap();
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let mut now = t0;
    for _ in 0..40 {
        racing_passes(&p, now).await;
        let rotations = p.rotations().await;
        let images = p.images().await;
        let published = nodecycle::state::Repository::new(p.table.clone())
            .pool("prod/general")
            .await
            .unwrap()
            .and_then(|r| r.rollout)
            .is_some_and(|s| s.holds(nodecycle::rollout::ConditionType::NodesUpToDate));
        if rotations.len() == 4
            && rotations.iter().all(|r| r.step == Step::Done)
            && images.iter().all(|i| *i == p.new)
            && published
        {
            break;
        }
        now += chrono::Duration::minutes(1);
    }
    let rotations = p.rotations().await;
    assert!(
        rotations.len() == 4 && rotations.iter().all(|r| r.step == Step::Done),
        "the rollout did not finish: {rotations:?}"
    );

    let events = delivered(&p.cloud, QUEUE);
    assert_once(&events);
    let kinds = by_type(&events);
    let count = |k: &str| kinds.get(k).map_or(0, Vec::len);
    assert_eq!(count("Desired AMI Changed"), 1, "{kinds:#?}");
    assert_eq!(count("Rotation Started"), 4, "{kinds:#?}");
    assert_eq!(count("Rotation Finished"), 4, "{kinds:#?}");
    // The rollout status: Progressing (the first status announces what holds), then
    // NodesUpToDate and Progressing no more.
    assert_eq!(count("Rollout Condition Changed"), 3, "{kinds:#?}");
    for k in ["Rotation Failed", "Pool Halted", "AMI Quarantined"] {
        assert_eq!(count(k), 0, "{k}: {kinds:#?}");
    }

    let changed = &kinds["Desired AMI Changed"][0]["detail"];
    assert_eq!(changed["pool"], "prod/general");
    assert_eq!(changed["cluster"], "prod");
    assert_eq!(changed["ami"], p.new.as_str());
    let mut started: Vec<&str> = kinds["Rotation Started"]
        .iter()
        .map(|e| e["detail"]["instance"].as_str().unwrap())
        .collect();
    let mut finished: Vec<&str> = kinds["Rotation Finished"]
        .iter()
        .map(|e| e["detail"]["instance"].as_str().unwrap())
        .collect();
    started.sort_unstable();
    finished.sort_unstable();
    let mut rotated: Vec<&str> = rotations.iter().map(|r| r.instance_id.as_str()).collect();
    rotated.sort_unstable();
    assert_eq!(started, rotated, "one start per rotated instance");
    assert_eq!(finished, rotated, "one finish per rotated instance");
    for e in &kinds["Rotation Finished"] {
        assert_eq!(e["detail"]["reason"], "Drifted", "{e}");
        assert!(e["detail"]["replacement"].is_string(), "{e}");
    }
    assert_eq!(
        outboxes_left(&p).await,
        0,
        "every put event left its outbox"
    );

    // Passes after the rollout announce nothing.
    racing_passes(&p, now + chrono::Duration::minutes(5)).await;
    p.watcher
        .handle(&json!({}), now + chrono::Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(delivered(&p.cloud, QUEUE), Vec::<Value>::new());
}

#[tokio::test]
async fn a_failed_rotation_halts_once_and_events_the_bus_refused_are_put_by_a_later_pass() {
    let p = pool(3, "    - nodes: \"1\"\n", true).await;
    capture(&p.cloud, QUEUE).await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let mut now = t0;
    for _ in 0..4 {
        racing_passes(&p, now).await;
        now += chrono::Duration::minutes(5);
    }
    // The rotation started before the bus went away.
    let first = delivered(&p.cloud, QUEUE);
    let started = by_type(&first);
    assert_eq!(
        started.get("Rotation Started").map_or(0, Vec::len),
        1,
        "{started:#?}"
    );

    // Now PutEvents fails (every attempt) while the replacement times out: the failure, the
    // halt and the quarantine are recorded, their events stay in the records' outboxes.
    p.cloud.faults(
        Faults::new().seed(7).aws(
            AwsFaults::new(1.0)
                .kinds(&[AwsFault::Http500])
                .operations(&["events:PutEvents"]),
        ),
    );
    for _ in 0..2 {
        racing_passes(&p, now).await;
        now += chrono::Duration::minutes(5);
    }
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .unwrap();
    assert!(record.halted.is_some(), "the pool halted");
    assert!(
        delivered(&p.cloud, QUEUE).is_empty(),
        "nothing reached the bus"
    );
    assert!(outboxes_left(&p).await > 0, "the events wait in the outbox");

    // The bus is back: the next pass sweeps them out, once.
    p.cloud.clear_faults();
    racing_passes(&p, now).await;
    racing_passes(&p, now + chrono::Duration::minutes(1)).await;
    let events: Vec<Value> = first
        .into_iter()
        .chain(delivered(&p.cloud, QUEUE))
        .collect();
    assert_once(&events);
    let kinds = by_type(&events);
    let count = |k: &str| kinds.get(k).map_or(0, Vec::len);
    assert_eq!(count("Rotation Started"), 1, "{kinds:#?}");
    assert_eq!(count("Rotation Failed"), 1, "{kinds:#?}");
    assert_eq!(count("Pool Halted"), 1, "{kinds:#?}");
    assert_eq!(count("Rotation Finished"), 0, "{kinds:#?}");
    let failed = &kinds["Rotation Failed"][0]["detail"];
    assert!(
        failed["error"].as_str().unwrap().contains("not Ready"),
        "{failed}"
    );
    let halted = &kinds["Pool Halted"][0]["detail"];
    assert_eq!(halted["cause"], "failure", "{halted}");
    assert_eq!(outboxes_left(&p).await, 0, "the sweep emptied the outboxes");
}
