//! The ami-watcher handler driven by the sample events in `events/`, against moto server:
//! scheduled passes, policy and AMI parameter changes, invalid policies, failures that keep the
//! last desired AMI, concurrent watchers, unknown and malformed events.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;

use chrono::{Duration, Utc};
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::state::{self, PoolRecord, Store};
use nodecycle_tests::{FakeCloud, ImageFixture};
use serde_json::{Value, json};
use support::*;

fn event(name: &str) -> Value {
    let path = nodecycle_tests::repo_path(&format!("events/{name}"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

const ALIAS_POOL: &str = "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\n";
const GOLDEN_POOL: &str = "cluster: prod\nname: golden\nnodeGroup: { autoScalingGroup: prod-golden }\narchitecture: x86_64\namiSelectorTerms:\n  - ssmParameter: /golden/eks/al2023/x86_64\n";
const INVALID_POOL: &str = "cluster: prod\nname: broken\nnodeGroup: { autoScalingGroup: prod-broken }\namiSelectorTerms:\n  - alias: al2024@latest\n";

struct World {
    cloud: FakeCloud,
    watcher: AmiWatcher,
    table: Arc<nodecycle::aws::dynamodb::Table>,
}

async fn world() -> World {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let a = Adapters::new(&cloud).await;
    let table = a.table("nodecycle").await;
    let watcher = a.watcher(a.policies(), table.clone());
    World {
        cloud,
        watcher,
        table,
    }
}

impl World {
    async fn record(&self, pool: &str) -> PoolRecord {
        let v = self
            .table
            .get(&state::keys::pool_pk(pool), state::keys::POOL_STATE_SK)
            .await
            .unwrap()
            .expect("record exists");
        serde_json::from_value(v.value).unwrap()
    }

    fn status<'a>(&self, report: &'a Value, pool: &str) -> &'a str {
        report["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pool"] == pool)
            .map(|p| p["status"].as_str().unwrap())
            .unwrap_or("absent")
    }
}

fn golden(cloud: &FakeCloud, name: &str, created: &str) -> String {
    let id = cloud.register_image(ImageFixture::new(name).owner("self").created(created));
    cloud.put_parameter("/golden/eks/al2023/x86_64", &id);
    id
}

#[tokio::test]
async fn scheduled_pass_resolves_every_pool_and_records_history() {
    let w = world().await;
    let v1 = publish_al2023(&w.cloud, "1.30", "v20240807", "2024-08-07T00:00:00Z");
    let g1 = golden(&w.cloud, "golden-1", "2024-08-01T00:00:00Z");
    w.cloud
        .put_parameter("/nodecycle/pools/prod/general", ALIAS_POOL);
    w.cloud
        .put_parameter("/nodecycle/pools/prod/golden", GOLDEN_POOL);
    w.cloud
        .put_parameter("/nodecycle/pools/prod/broken", INVALID_POOL);
    let t0 = Utc::now();

    let report = w
        .watcher
        .handle(&event("scheduled-tick.json"), t0)
        .await
        .unwrap();
    assert_eq!(report["trigger"], "schedule");
    assert_eq!(w.status(&report, "prod/general"), "changed");
    assert_eq!(w.status(&report, "prod/golden"), "changed");
    assert_eq!(w.status(&report, "prod/broken"), "invalid");
    let broken = report["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == "prod/broken")
        .unwrap();
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .contains("amiSelectorTerms[0].alias: unknown family \"al2024\""),
        "{broken}"
    );

    let rec = w.record("prod/general").await;
    assert_eq!(
        rec.desired.as_ref().unwrap().id,
        id_of(&v1, "x86_64", "standard")
    );
    assert_eq!(rec.kubernetes_version.as_deref(), Some("1.30"));
    assert!(rec.previous_desired.is_none());
    assert_eq!(w.record("prod/golden").await.desired.unwrap().id, g1);
    // An invalid document creates no record (its error is in the report; status lists it).
    assert!(
        w.table
            .get(
                &state::keys::pool_pk("prod/broken"),
                state::keys::POOL_STATE_SK
            )
            .await
            .unwrap()
            .is_none()
    );

    // Same AMIs next pass: unchanged.
    let report = w
        .watcher
        .handle(&event("scheduled-tick.json"), t0 + Duration::minutes(15))
        .await
        .unwrap();
    assert_eq!(w.status(&report, "prod/general"), "unchanged");

    // A new release is published: the pool moves, keeping the previous AMI and the history.
    let v2 = publish_al2023(&w.cloud, "1.30", "v20241109", "2024-11-09T00:00:00Z");
    let report = w
        .watcher
        .handle(&event("scheduled-tick.json"), t0 + Duration::minutes(30))
        .await
        .unwrap();
    assert_eq!(w.status(&report, "prod/general"), "changed");
    let rec = w.record("prod/general").await;
    assert_eq!(
        rec.desired.as_ref().unwrap().id,
        id_of(&v2, "x86_64", "standard")
    );
    assert_eq!(
        rec.previous_desired.as_ref().unwrap().id,
        id_of(&v1, "x86_64", "standard")
    );
    assert_eq!(rec.desired_changed_at, Some(t0 + Duration::minutes(30)));
    assert_eq!(rec.history.len(), 2);
    assert_eq!(rec.history[0].first_seen, t0);
    assert_eq!(rec.history[0].last_seen, t0 + Duration::minutes(15));
}

#[tokio::test]
async fn parameter_change_resolves_only_the_pools_using_it() {
    let w = world().await;
    publish_al2023(&w.cloud, "1.30", "v20240807", "2024-08-07T00:00:00Z");
    golden(&w.cloud, "golden-1", "2024-08-01T00:00:00Z");
    w.cloud
        .put_parameter("/nodecycle/pools/prod/general", ALIAS_POOL);
    w.cloud
        .put_parameter("/nodecycle/pools/prod/golden", GOLDEN_POOL);
    let t0 = Utc::now();
    w.watcher
        .handle(&event("scheduled-tick.json"), t0)
        .await
        .unwrap();

    let g2 = golden(&w.cloud, "golden-2", "2024-09-01T00:00:00Z");
    let report = w
        .watcher
        .handle(
            &event("parameter-store-change.json"),
            t0 + Duration::minutes(1),
        )
        .await
        .unwrap();
    let pools = report["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 1, "{report}");
    assert_eq!(pools[0]["pool"], "prod/golden");
    assert_eq!(pools[0]["status"], "changed");
    assert_eq!(pools[0]["desired"], g2.as_str());
    assert_eq!(w.record("prod/golden").await.desired.unwrap().id, g2);

    // Delivered twice (at-least-once): nothing changes the second time.
    let report = w
        .watcher
        .handle(
            &event("parameter-store-change.json"),
            t0 + Duration::minutes(2),
        )
        .await
        .unwrap();
    assert_eq!(report["pools"][0]["status"], "unchanged");
}

#[tokio::test]
async fn policy_parameter_change_reloads_that_pool_and_other_parameters_are_a_no_op() {
    let w = world().await;
    publish_al2023(&w.cloud, "1.30", "v20240807", "2024-08-07T00:00:00Z");
    w.cloud
        .put_parameter("/nodecycle/pools/prod/general", ALIAS_POOL);
    w.cloud
        .put_parameter("/nodecycle/pools/prod/golden", GOLDEN_POOL);
    let mut e = event("parameter-store-change.json");
    e["detail"]["name"] = json!("/nodecycle/pools/prod/general");
    let report = w.watcher.handle(&e, Utc::now()).await.unwrap();
    let pools = report["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 1, "{report}");
    assert_eq!(pools[0]["pool"], "prod/general");
    assert_eq!(pools[0]["source"], "/nodecycle/pools/prod/general");

    let mut e = event("parameter-store-change.json");
    e["detail"]["name"] = json!("/something/else");
    let report = w.watcher.handle(&e, Utc::now()).await.unwrap();
    assert_eq!(report["pools"], json!([]));
}

#[tokio::test]
async fn a_failing_pool_keeps_its_desired_ami_and_does_not_block_others() {
    let w = world().await;
    let v1 = publish_al2023(&w.cloud, "1.30", "v20240807", "2024-08-07T00:00:00Z");
    golden(&w.cloud, "golden-1", "2024-08-01T00:00:00Z");
    w.cloud
        .put_parameter("/nodecycle/pools/prod/general", ALIAS_POOL);
    w.cloud
        .put_parameter("/nodecycle/pools/prod/golden", GOLDEN_POOL);
    let t0 = Utc::now();
    w.watcher
        .handle(&event("scheduled-tick.json"), t0)
        .await
        .unwrap();
    let golden_id = w.record("prod/golden").await.desired.unwrap().id;

    // The golden parameter disappears: the term is skipped, nothing matches, the pool keeps
    // its AMI and records why; the alias pool proceeds.
    w.cloud.delete_parameter("/golden/eks/al2023/x86_64");
    let report = w
        .watcher
        .handle(&event("scheduled-tick.json"), t0 + Duration::minutes(15))
        .await
        .unwrap();
    assert_eq!(w.status(&report, "prod/golden"), "failed");
    assert_eq!(w.status(&report, "prod/general"), "unchanged");
    let rec = w.record("prod/golden").await;
    assert_eq!(rec.desired.unwrap().id, golden_id);
    assert!(
        rec.last_error
            .as_ref()
            .unwrap()
            .message
            .starts_with("no AMI matches x86_64/standard"),
        "{:?}",
        rec.last_error
    );

    // A policy that becomes invalid also keeps the AMI.
    w.cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &ALIAS_POOL.replace("al2023@latest", "al2023@"),
    );
    let report = w
        .watcher
        .handle(&event("scheduled-tick.json"), t0 + Duration::minutes(30))
        .await
        .unwrap();
    assert_eq!(w.status(&report, "prod/general"), "invalid");
    let rec = w.record("prod/general").await;
    assert_eq!(rec.desired.unwrap().id, id_of(&v1, "x86_64", "standard"));
    assert!(rec.last_error.is_some());

    // Recovery clears the error.
    w.cloud
        .put_parameter("/nodecycle/pools/prod/general", ALIAS_POOL);
    w.watcher
        .handle(&event("scheduled-tick.json"), t0 + Duration::minutes(45))
        .await
        .unwrap();
    assert!(w.record("prod/general").await.last_error.is_none());
}

#[tokio::test]
async fn concurrent_watchers_never_move_a_pool_backwards() {
    let w = world().await;
    let v1 = publish_al2023(&w.cloud, "1.30", "v20240807", "2024-08-07T00:00:00Z");
    w.cloud
        .put_parameter("/nodecycle/pools/prod/general", ALIAS_POOL);
    let t0 = Utc::now();
    w.watcher
        .handle(&event("scheduled-tick.json"), t0)
        .await
        .unwrap();
    let v2 = publish_al2023(&w.cloud, "1.30", "v20241109", "2024-11-09T00:00:00Z");
    // Eight invocations at once, the newest observation at t0+8m; they race on the record.
    let mut tasks = Vec::new();
    for i in 1..=8 {
        let watcher = w.watcher.clone();
        tasks.push(tokio::spawn(async move {
            watcher
                .handle(&json!({}), t0 + Duration::minutes(i))
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // A late delivery of an old observation that still saw v1 cannot undo v2.
    w.cloud.put_parameter("/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id", &id_of(&v1, "x86_64", "standard"));
    w.watcher
        .handle(&json!({}), t0 + Duration::seconds(30))
        .await
        .unwrap();
    let rec = w.record("prod/general").await;
    assert_eq!(
        rec.desired.as_ref().unwrap().id,
        id_of(&v2, "x86_64", "standard")
    );
    assert_eq!(rec.resolved_at, Some(t0 + Duration::minutes(8)));
    assert_eq!(rec.history.len(), 2, "no history lost: {:?}", rec.history);
}

#[tokio::test]
async fn unknown_and_malformed_events() {
    let w = world().await;
    for name in [
        "spot-interruption-warning.json",
        "instance-state-change.json",
        "health-scheduled-change.json",
    ] {
        let report = w.watcher.handle(&event(name), Utc::now()).await.unwrap();
        assert_eq!(report["trigger"], "ignored", "{name}");
    }
    let mut e = event("parameter-store-change.json");
    e["detail"] = json!({"operation": "Update"});
    let err = w.watcher.handle(&e, Utc::now()).await.unwrap_err();
    assert_eq!(err.error_type, "InvalidEvent");
    assert!(err.message.starts_with("detail.name:"), "{}", err.message);
    let err = w
        .watcher
        .handle(&json!({"pool": "prod/general"}), Utc::now())
        .await
        .unwrap_err();
    assert_eq!(err.error_type, "InvalidEvent");
}

#[tokio::test]
async fn custom_input_resolves_only_the_named_pools() {
    let w = world().await;
    publish_al2023(&w.cloud, "1.30", "v20240807", "2024-08-07T00:00:00Z");
    golden(&w.cloud, "golden-1", "2024-08-01T00:00:00Z");
    w.cloud
        .put_parameter("/nodecycle/pools/prod/general", ALIAS_POOL);
    w.cloud
        .put_parameter("/nodecycle/pools/prod/golden", GOLDEN_POOL);
    let report = w
        .watcher
        .handle(&json!({"pools": ["prod/golden"]}), Utc::now())
        .await
        .unwrap();
    let pools = report["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0]["pool"], "prod/golden");
}
