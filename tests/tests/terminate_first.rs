//! Terminate-first, end to end (fake cloud + Kubernetes stand-in, real SDK, the real rotator):
//! a group of 4 GPU nodes at `MaxSize` (no `surgeAboveMaxSize`) cannot surge, so each node is
//! cordoned and drained within its PDB, terminated with a relaunch, and the next starts only
//! once the relaunched instance is Ready on the new AMI; no human step, no capacity change. A
//! relaunch that fails for lack of capacity halts the pool with the reason and an event and
//! leaves the other nodes running on the old AMI.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use chrono::{TimeDelta, Utc};
use nodecycle::aws::autoscaling::AutoScaling;
use nodecycle::fleet::GroupOps;
use nodecycle::rotation::Step;
use nodecycle_tests::{ClusterAutoscaler, PdbFixture, PodFixture};
use serde_json::{Value, json};
use support::pool::{Pool, pool_with};

const GROUP: &str = "prod-general";
const QUEUE: &str = "nodecycle-events";

/// 4 nodes at MaxSize 4, budget 1, two `gpu` pods per node under a PDB `maxUnavailable: 1`
/// (three fit on a node); the watcher has resolved the new AMI.
async fn gpu_pool() -> (Pool, ClusterAutoscaler, chrono::DateTime<Utc>) {
    let p = pool_with(4, 4, "    - nodes: \"1\"\n", false, "").await;
    support::capture(&p.cloud, QUEUE).await;
    let workloads = ClusterAutoscaler::attach(&p.cloud, "prod", GROUP, 3);
    for (i, (node, _)) in p.kube.state().node_instances().iter().enumerate() {
        for n in [2 * i, 2 * i + 1] {
            p.kube.add_pod(
                PodFixture::new("default", &format!("gpu-{n}"))
                    .node(node)
                    .owner("ReplicaSet", "gpu")
                    .label("app", "gpu")
                    .grace_seconds(0),
            );
        }
    }
    p.kube.set_scale("default", "ReplicaSet", "gpu", 8);
    p.kube.add_pdb(
        PdbFixture::new("default", "gpu")
            .match_label("app", "gpu")
            .max_unavailable(1),
    );
    let now = Utc::now();
    p.watcher.handle(&json!({}), now).await.unwrap();
    (p, workloads, now)
}

/// `(desired capacity, MaxSize)` of the group.
async fn sizes(p: &Pool) -> (i32, i32) {
    let out = p
        .adapters
        .clients
        .autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(GROUP)
        .send()
        .await
        .unwrap();
    let g = &out.auto_scaling_groups()[0];
    (g.desired_capacity().unwrap(), g.max_size().unwrap())
}

/// Ready nodes that take pods (not cordoned).
fn schedulable(p: &Pool) -> usize {
    p.kube
        .state()
        .nodes
        .iter()
        .filter(|n| {
            n["spec"]["unschedulable"] != json!(true)
                && n["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
        .count()
}

#[tokio::test]
async fn a_group_at_max_size_rolls_terminate_first_one_node_at_a_time() {
    let (p, workloads, mut now) = gpu_pool().await;
    let first = p.pass(now).await;
    assert!(
        first.to_string().contains("terminateFirst"),
        "the pass says why it replaces terminate-first: {first}"
    );
    let mut done = false;
    for pass in 0..60 {
        if pass > 0 {
            p.pass(now).await;
        }
        workloads.workloads_step();
        let rotations = p.rotations().await;
        let in_flight = rotations.iter().filter(|r| r.in_flight()).count();
        assert!(in_flight <= 1, "one node at a time: {rotations:#?}");
        assert_eq!(sizes(&p).await, (4, 4), "no surge, no capacity change");
        assert!(
            schedulable(&p) >= 3,
            "at most one node out of service at pass {pass}"
        );
        now += TimeDelta::minutes(1);
        let images = p.images().await;
        if in_flight == 0 && images.len() == 4 && images.iter().all(|i| *i == p.new) {
            done = true;
            break;
        }
    }
    assert!(
        done,
        "the group rolled to the new AMI: {:?}",
        p.images().await
    );
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 4, "{rotations:#?}");
    for r in &rotations {
        assert_eq!(r.step, Step::Done, "{r:#?}");
        assert!(r.surge.is_none(), "never surged: {r:#?}");
        assert!(
            r.replacement.is_some(),
            "each relaunch was confirmed before the rotation ended: {r:#?}"
        );
    }
    let records = p.cloud.scaling_records(Some(GROUP));
    assert!(
        records.capacity.iter().all(|c| c.by != "api"),
        "nodecycle never changed the group's capacity: {:?}",
        records.capacity
    );
    for t in &records.terminations {
        assert!(t.pods.is_empty(), "terminated with pods on it: {t:?}");
        assert_eq!(
            t.decrement,
            Some(false),
            "terminated with a relaunch: {t:?}"
        );
    }
    assert_eq!(records.terminations.len(), 4, "{:?}", records.terminations);
    // No terminationGracePeriod: the PDB was honoured throughout, no pod was deleted.
    let deletes = p
        .kube
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/pods/"))
        .count();
    assert_eq!(deletes, 0, "pods are evicted, never deleted");
}

#[tokio::test]
async fn an_insufficient_capacity_relaunch_halts_the_pool_and_leaves_the_rest_running() {
    let (p, workloads, mut now) = gpu_pool().await;
    p.cloud.insufficient_capacity(GROUP, true);
    let mut halted = None;
    for _ in 0..30 {
        p.pass(now).await;
        workloads.workloads_step();
        now += TimeDelta::minutes(1);
        let record = nodecycle::state::Repository::new(p.table.clone())
            .pool("prod/general")
            .await
            .unwrap();
        if let Some(h) = record.and_then(|r| r.halted) {
            halted = Some(h);
            break;
        }
    }
    let Some(halted) = halted else {
        panic!(
            "the pool halted: {:#?}\n{:?}",
            p.rotations().await,
            p.cloud.scaling_records(Some(GROUP))
        )
    };
    assert!(
        halted.message.contains("lack of capacity")
            && halted.message.contains("do not have sufficient"),
        "the halt names the reason, as Auto Scaling gave it: {halted:?}"
    );
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 1, "{rotations:#?}");
    assert_eq!(rotations[0].step, Step::Failed, "{rotations:#?}");
    // Nothing more starts: the other three stay on the old AMI, in service and schedulable.
    for _ in 0..5 {
        p.pass(now).await;
        now += TimeDelta::minutes(1);
    }
    let images = p.images().await;
    assert_eq!(
        images.len(),
        3,
        "one short while capacity lacks: {images:?}"
    );
    assert!(images.iter().all(|i| *i == p.old), "{images:?}");
    assert_eq!(schedulable(&p), 3);
    assert_eq!(p.rotations().await.len(), 1, "no other node started");
    // The launch template stays on the new AMI: the group's own retries launch the release.
    let asg = AutoScaling::new(
        p.adapters.clients.autoscaling.clone(),
        p.adapters.clients.ec2.clone(),
    );
    let (group, _) = asg.describe(GROUP).await.unwrap();
    assert_eq!(group.launch_template_image.as_deref(), Some(p.new.as_str()));
    let events = support::delivered(&p.cloud, QUEUE);
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["detail-type"].as_str())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "Pool Halted").count(),
        1,
        "{kinds:?}"
    );
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["detail-type"] == "Rotation Failed")
        .collect();
    assert_eq!(failed.len(), 1, "{kinds:?}");
    assert!(
        failed[0]["detail"]["error"]
            .as_str()
            .unwrap()
            .contains("lack of capacity"),
        "{}",
        failed[0]
    );
    // Capacity comes back: the group relaunches on the new AMI by itself.
    p.cloud.insufficient_capacity(GROUP, false);
}
