//! The rotator under failing AWS and Kubernetes calls (fault injection in the fake cloud): a
//! pass whose calls fail gives its lease back, and a rollout converges with a fraction of all
//! calls failing, within its budget, draining every node it terminates, rotating none twice.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;

use nodecycle::rotation::Step;
use nodecycle_tests::{AwsFault, AwsFaults, Faults, KubeFaults, PodFixture};
use serde_json::json;
use support::pool::*;

/// The lease's own write lands but its answer is lost (the connection drops after DynamoDB
/// carried it out; the SDK's retry then conflicts with it). The pass still owns the lease and
/// gives it back: the next pass, a minute later, works on the cluster.
#[tokio::test]
async fn a_lost_answer_to_the_lease_write_does_not_stall_the_cluster() {
    let p = pool(2, "    - nodes: \"1\"\n", false).await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    // The first PutItem of the pass is the lease's.
    p.cloud.faults(
        Faults::new().seed(1).aws(
            AwsFaults::new(1.0)
                .kinds(&[AwsFault::ResetAfter])
                .operations(&["dynamodb:PutItem"])
                .limit(1),
        ),
    );
    p.pass(t0).await;
    p.cloud.clear_faults();
    let report = p.pass(t0 + chrono::Duration::minutes(1)).await;
    assert_eq!(
        report["clusters"]["prod"], "done",
        "the cluster stalled behind a lease nobody holds: {report}"
    );
}

/// 6 nodes, budget "2", 20% of every AWS and Kubernetes call failing (throttling, 500, 503,
/// connection resets, before or after the call is carried out): the rollout converges.
#[tokio::test]
async fn a_rollout_converges_with_a_fifth_of_all_calls_failing() {
    let p = pool(6, "    - nodes: \"2\"\n", false).await;
    let t0 = at("2026-12-01T10:00:00Z");
    // One pod per node, evictable (a ReplicaSet's).
    let nodes: Vec<String> = p
        .kube
        .state()
        .nodes
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    for (i, node) in nodes.iter().enumerate() {
        p.kube.add_pod(
            PodFixture::new("default", &format!("web-{i}"))
                .node(node)
                .owner("ReplicaSet", "web")
                .label("app", "web")
                .grace_seconds(1),
        );
    }
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let mut now = t0;
    let (mut calls, mut failed, mut passes) = (0u64, 0u64, 0u32);
    let mut max_in_flight = 0;
    for pass in 0..90u64 {
        p.cloud.faults(
            Faults::new()
                .seed(pass)
                .aws(AwsFaults::new(0.2).kinds(&[
                    AwsFault::Throttle,
                    AwsFault::Http500,
                    AwsFault::Http503,
                    AwsFault::Reset,
                    AwsFault::ResetAfter,
                ]))
                .kube(KubeFaults::new(0.2)),
        );
        let report = p.pass(now).await;
        let stats = p.cloud.fault_stats();
        p.cloud.clear_faults();
        calls += stats.aws.calls + stats.kube.calls;
        failed += stats.aws.failed + stats.kube.failed;
        passes += 1;
        assert_ne!(
            report["clusters"]["prod"]
                .as_str()
                .map(|s| s.starts_with("lease held")),
            Some(true),
            "a previous pass kept its lease: {report}"
        );
        let rotations = p.rotations().await;
        let in_flight = rotations.iter().filter(|r| r.in_flight()).count();
        max_in_flight = max_in_flight.max(in_flight);
        assert!(in_flight <= 2, "budget 2 exceeded: {rotations:?}");
        let images = p.images().await;
        eprintln!(
            "pass {pass}: {in_flight} in flight, {} of {} instances new, errors {}",
            images.iter().filter(|i| **i == p.new).count(),
            images.len(),
            report["pools"][0]["errors"]
        );
        if in_flight == 0
            && images.len() == 6
            && images.iter().all(|i| *i == p.new)
            && p.desired_capacity().await == 6
        {
            break;
        }
        now += chrono::Duration::minutes(1);
    }
    eprintln!(
        "fault-injected rollout: {passes} passes, {calls} AWS + Kubernetes calls, {failed} failed"
    );
    assert!(failed > 0, "faults were injected");
    let images = p.images().await;
    assert_eq!(images.len(), 6, "group at its size: {images:?}");
    assert!(images.iter().all(|i| *i == p.new), "{images:?}");
    assert_eq!(p.desired_capacity().await, 6, "no surge left");
    let rotations = p.rotations().await;
    let instances: BTreeSet<&str> = rotations.iter().map(|r| r.instance_id.as_str()).collect();
    assert_eq!(instances.len(), 6, "each node rotated once: {rotations:?}");
    assert!(
        rotations.iter().all(|r| r.step == Step::Done),
        "{rotations:?}"
    );
    assert_eq!(max_in_flight, 2, "the budget was used");
    // Every node was drained before it went: each pod left by an eviction the API carried out,
    // or was deleted once terminationGracePeriod (1m) had passed with its evictions failing.
    let state = p.kube.state();
    for i in 0..nodes.len() {
        let pod = format!("/api/v1/namespaces/default/pods/web-{i}");
        let carried_out = |method: &str, path: &str| {
            state
                .requests_to(method, path)
                .iter()
                .any(|r| (200..300).contains(&r.status))
        };
        let drained =
            carried_out("POST", &format!("{pod}/eviction")) || carried_out("DELETE", &pod);
        let log: Vec<_> = state
            .requests
            .iter()
            .filter(|r| r.path.starts_with(&pod))
            .map(|r| (r.method.as_str(), r.status))
            .collect();
        assert!(drained, "web-{i} left undrained: {log:?}");
        assert!(state.pod("default", &format!("web-{i}")).is_none());
    }
}
