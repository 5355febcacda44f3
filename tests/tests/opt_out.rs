//! Pod opt-outs from voluntary disruption, end to end (fake cloud + Kubernetes stand-in, real
//! SDK, the real rotator): a node running a pod annotated `karpenter.sh/do-not-disrupt: "30m"`
//! is skipped for drift until 30 minutes after the pod started, then rotated; a pod with
//! `safe-to-evict: "false"` holds its node the same way; the other nodes roll meanwhile.
//! Times: the stand-in stamps `startTime` with the wall clock, so passes run at wall-clock
//! based instants.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use chrono::{TimeDelta, Utc};
use nodecycle::rotation::RotationReason;
use nodecycle_tests::PodFixture;

/// Rotator passes a minute apart, from `from`, twelve of them.
async fn twelve_passes(p: &support::pool::Pool, from: chrono::DateTime<Utc>) {
    for minute in 0..12 {
        p.pass(from + TimeDelta::minutes(minute)).await;
    }
}

#[tokio::test]
async fn a_pod_opt_out_holds_its_node_for_drift_until_it_lapses() {
    let p = support::pool::pool(4, "    - nodes: \"4\"\n", false).await;
    let all = p.kube.state().node_instances();
    let (timed_node, timed) = all[0].clone();
    let (safe_node, safe) = all[1].clone();
    for (name, node, key, value) in [
        ("batch", &timed_node, "karpenter.sh/do-not-disrupt", "30m"),
        (
            "cache",
            &safe_node,
            "cluster-autoscaler.kubernetes.io/safe-to-evict",
            "false",
        ),
    ] {
        p.kube.add_pod(
            PodFixture::new("default", name)
                .node(node)
                .owner("ReplicaSet", &format!("{name}-5d8f"))
                .annotation(key, value)
                .grace_seconds(1),
        );
    }
    let started = Utc::now();
    p.watcher
        .handle(&serde_json::json!({}), started)
        .await
        .unwrap();
    // Ten minutes after the pods started: the two held nodes are skipped, the others roll.
    twelve_passes(&p, started + TimeDelta::minutes(10)).await;
    let rotated: Vec<String> = p
        .rotations()
        .await
        .iter()
        .filter(|r| r.reason == RotationReason::Drifted)
        .map(|r| r.instance_id.clone())
        .collect();
    assert!(
        !rotated.contains(&timed),
        "do-not-disrupt 30m held: {rotated:?}"
    );
    assert!(
        !rotated.contains(&safe),
        "safe-to-evict false held: {rotated:?}"
    );
    assert_eq!(rotated.len(), 2, "the other two rolled: {rotated:?}");
    let batch_evictions = p
        .kube
        .state()
        .requests_to("POST", "/api/v1/namespaces/default/pods/batch/eviction")
        .len();
    assert_eq!(batch_evictions, 0, "never evicted while it holds");

    // 31 minutes after the pod started: its node is rotated; safe-to-evict still holds.
    twelve_passes(&p, started + TimeDelta::minutes(31)).await;
    let rotated: Vec<String> = p
        .rotations()
        .await
        .iter()
        .map(|r| r.instance_id.clone())
        .collect();
    assert!(rotated.contains(&timed), "lapsed: rotated: {rotated:?}");
    assert!(!rotated.contains(&safe), "still held: {rotated:?}");
}
