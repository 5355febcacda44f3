//! Release health end to end (fake cloud + Kubernetes stand-in): a release is judged by what
//! its nodes and pods do after Ready, compared with the release before it. The bad releases of
//! 2026: nodes whose kubelet stalls hours after Ready (awslabs/amazon-eks-ami #2681), nodes
//! Ready on which some images cannot start (#2682). Pool `test/general` follows
//! `al2023@latest`; `prod/general` (another cluster) takes only releases proven in test.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use nodecycle::promotion::{Cause, Release, Target};
use nodecycle_tests::{KubeStandIn, PodFixture, SyncNodes};
use support::pool::at;
use support::stages::*;

/// The first watcher and rotator pass (every pool on [`OLD`]), then [`NEW`] published:
/// five minutes later, and the new (test, prod) images.
async fn first_pass_then_publish(s: &Stages) -> (DateTime<Utc>, String, String) {
    let now = at("2026-12-01T10:00:00Z");
    s.watch(now).await;
    s.pass(now).await;
    let (new, prod_new) = s.publish_new();
    (now + minutes(5), new, prod_new)
}

/// Names of the nodes of `kube` whose instance runs `image`, sorted.
fn nodes_on(kube: &KubeStandIn, image: &str) -> Vec<String> {
    let mut out: Vec<String> = kube
        .state()
        .nodes
        .iter()
        .filter(|n| n["metadata"]["annotations"]["fakecloud/image-id"] == image)
        .map(|n| {
            n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    out.sort();
    out
}

/// The instance id of node `node` of `kube` (from its providerID).
fn instance_of(kube: &KubeStandIn, node: &str) -> String {
    let state = kube.state();
    let n = state
        .nodes
        .iter()
        .find(|n| n["metadata"]["name"] == node)
        .expect("node");
    let provider = n["spec"]["providerID"].as_str().unwrap_or_default();
    provider.rsplit('/').next().unwrap_or_default().to_string()
}

/// The quarantine entry of release [`NEW`], if any.
async fn new_quarantined(s: &Stages) -> Option<nodecycle::promotion::Quarantine> {
    s.quarantined()
        .await
        .0
        .into_iter()
        .find(|q| q.target == Target::Release(Release(NEW.into())))
}

/// Rolls the test pool (of `n` nodes) onto `new` entirely.
async fn roll_test(s: &Stages, now: &mut DateTime<Utc>, new: &str, n: usize) {
    let on_new = until(s, now, 60, async |s: &Stages| {
        let images = s.images("test-general").await;
        images.len() == n
            && images.iter().all(|i| i == new)
            && s.rotations("test/general")
                .await
                .iter()
                .all(|r| !r.in_flight())
    })
    .await;
    assert!(
        on_new,
        "test rolled to {new}: {:?}",
        s.images("test-general").await
    );
}

/// The #2681 pattern. Test rolls onto v2; two hours after, the kubelets of 3 of its 6 nodes
/// stop posting status. Within one pass v2 is quarantined `Unhealthy` with those nodes as the
/// evidence, test's desired AMI and launch template go back to v1 and its Ready nodes roll back
/// within its budget (the stalled ones are no drain candidates: repair's), and prod (soak 24h)
/// never takes v2.
#[tokio::test]
async fn nodes_that_stall_hours_after_ready_indict_the_release_and_prod_never_takes_it() {
    let mut s = stages(
        Stage {
            nodes: 6,
            budget: "4",
        },
        Stage {
            nodes: 3,
            budget: "1",
        },
        "    soak: 24h\n",
    )
    .await;
    let metrics = std::sync::Arc::new(support::CapturedMetrics::default());
    s.rotator.metrics = metrics.clone();
    let (mut now, new, prod_new) = first_pass_then_publish(&s).await;
    roll_test(&s, &mut now, &new, 6).await;

    // Two hours on v2, healthy: nothing against it.
    now += TimeDelta::hours(2);
    s.watch(now).await;
    s.pass(now).await;
    assert!(new_quarantined(&s).await.is_none());

    let v2_nodes = nodes_on(&s.test_kube, &new);
    let stalled: Vec<String> = v2_nodes
        .iter()
        .take(3)
        .map(|n| instance_of(&s.test_kube, n))
        .collect();
    s.test_kube.sync_nodes(SyncNodes {
        asg: Some("test-general".into()),
        stalled_instances: stalled.clone(),
        ..SyncNodes::default()
    });
    s.test_kube
        .wait_for("three nodes stalled", Duration::from_secs(30), |k| {
            let unknown = k
                .nodes
                .iter()
                .filter(|n| {
                    n["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "Unknown")
                    })
                })
                .count();
            (unknown == 3).then_some(())
        });

    // One pass: quarantined with the evidence, rolled back in the same pass.
    now += minutes(1);
    s.watch(now).await;
    s.pass(now).await;
    let q = new_quarantined(&s)
        .await
        .expect("v2 quarantined within one pass");
    let Cause::Unhealthy { pool, evidence } = &q.cause else {
        panic!("cause Unhealthy: {q:?}");
    };
    assert_eq!(pool, "test/general");
    let mut named: Vec<String> = evidence
        .nodes
        .iter()
        .map(|n| n.instance_id.clone())
        .collect();
    named.sort();
    let mut want = stalled.clone();
    want.sort();
    assert_eq!(named, want, "the stalled nodes are the evidence");
    assert!(evidence.nodes.iter().all(|n| n.failing == ["Ready"]));
    assert_eq!((evidence.new.count, evidence.new.of), (3, 6));
    let rec = s.record("test/general").await;
    assert_eq!(rec.desired.as_ref().unwrap().id, s.test_old);
    // The release under watch showed its unhealthy nodes in the pass that indicted it.
    let most = metrics
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|d| d["Pool"] == "test/general" && d["Release"] == NEW)
        .filter_map(|d| d["UnhealthyNodes"].as_f64())
        .fold(0.0, f64::max);
    assert_eq!(most, 3.0);
    assert_eq!(
        s.group("test-general").await.1,
        s.test_old,
        "launch template back"
    );

    // Test's Ready nodes roll back within the budget; no surge is left.
    let settled = until(&s, &mut now, 40, async |s: &Stages| {
        let instances = s.adapters.group_instances("test-general").await;
        instances
            .iter()
            .all(|(id, image)| *image == s.test_old || stalled.contains(id))
            && s.group("test-general").await.0 == 6
            && s.rotations("test/general")
                .await
                .iter()
                .all(|r| !r.in_flight())
    })
    .await;
    assert!(
        settled,
        "every Ready node back on {}: {:?}, capacity {:?}",
        s.test_old,
        s.adapters.group_instances("test-general").await,
        s.group("test-general").await
    );

    // Long after the soak, prod never took v2.
    for later in [24, 30, 48] {
        s.watch(now + TimeDelta::hours(later)).await;
        s.pass(now + TimeDelta::hours(later)).await;
    }
    let prod = s.record("prod/general").await;
    assert_eq!(prod.desired.as_ref().unwrap().id, s.prod_old);
    assert!(
        prod.history.iter().all(|h| h.ami.id != prod_new)
            && prod.releases.iter().all(|e| e.release.as_str() != NEW),
        "{prod:?}"
    );
}

/// The #2681 pattern once prod already runs v2 (proven in test after a 1h soak): the stall in
/// test quarantines v2, and prod rolls back to its previous AMI within its own budget.
#[tokio::test]
async fn a_release_indicted_after_promotion_rolls_prod_back_too() {
    let s = stages(
        Stage {
            nodes: 6,
            budget: "4",
        },
        Stage {
            nodes: 3,
            budget: "1",
        },
        "    soak: 1h\n",
    )
    .await;
    let (mut now, new, prod_new) = first_pass_then_publish(&s).await;
    roll_test(&s, &mut now, &new, 6).await;
    let soaking = until_soaking_in_test(&s, &mut now, NEW).await;
    assert!(soaking, "test's soak on v2 started");
    now += TimeDelta::hours(1) + minutes(1);
    let prod_on_new = until(&s, &mut now, 60, async |s: &Stages| {
        let images = s.images("prod-general").await;
        images.len() == 3 && images.iter().all(|i| *i == prod_new)
    })
    .await;
    assert!(
        prod_on_new,
        "prod took v2: {:?}, {:?}, quarantined {:?}, test ledger {:?}",
        s.images("prod-general").await,
        s.record("prod/general").await.promotion_wait,
        s.quarantined().await,
        s.record("test/general").await.ledger
    );

    let stalled: Vec<String> = nodes_on(&s.test_kube, &new)
        .iter()
        .take(3)
        .map(|n| instance_of(&s.test_kube, n))
        .collect();
    s.test_kube.sync_nodes(SyncNodes {
        asg: Some("test-general".into()),
        stalled_instances: stalled,
        ..SyncNodes::default()
    });
    std::thread::sleep(Duration::from_millis(600));
    let prod_back = until(&s, &mut now, 40, async |s: &Stages| {
        let images = s.images("prod-general").await;
        images.len() == 3 && images.iter().all(|i| *i == s.prod_old)
    })
    .await;
    assert!(
        prod_back,
        "prod back on {}: {:?}",
        s.prod_old,
        s.images("prod-general").await
    );
    assert!(matches!(
        new_quarantined(&s).await.map(|q| q.cause),
        Some(Cause::Unhealthy { .. })
    ));
    assert_eq!(
        s.record("prod/general").await.desired.unwrap().id,
        s.prod_old
    );
}

/// Adds `n` pods of a ReplicaSet to `node`, the first `failing` of them waiting with `reason`.
fn add_pods(kube: &KubeStandIn, node: &str, tag: &str, n: usize, failing: usize, reason: &str) {
    for i in 0..n {
        let mut pod = PodFixture::new(
            "default",
            &format!(
                "{tag}-{i}-{}",
                &node[..node.find('.').unwrap_or(node.len())]
            ),
        )
        .node(node)
        .owner("ReplicaSet", &format!("{tag}-rs"))
        .grace_seconds(1);
        if i < failing {
            pod = pod.waiting(reason);
        }
        kube.add_pod(pod);
    }
}

/// The #2682 pattern, mid-rollout (budget 1 of 6): pods of one image fail
/// `CreateContainerError` on v2 nodes only. With 18 starts on v2 nothing is judged; once 20
/// are counted v2 is quarantined `WorkloadFailures`, compared with the v1 nodes' starts.
#[tokio::test]
async fn pods_failing_on_the_new_release_only_indict_it_once_enough_starts_are_counted() {
    let mut s = stages(
        Stage {
            nodes: 6,
            budget: "1",
        },
        Stage {
            nodes: 3,
            budget: "1",
        },
        "    soak: 24h\n",
    )
    .await;
    let metrics = std::sync::Arc::new(support::CapturedMetrics::default());
    s.rotator.metrics = metrics.clone();
    let (mut now, new, _) = first_pass_then_publish(&s).await;
    let two_on_new = until(&s, &mut now, 40, async |s: &Stages| {
        nodes_on(&s.test_kube, &new).len() >= 2
    })
    .await;
    assert!(two_on_new);
    let v2 = nodes_on(&s.test_kube, &new);
    let v1 = nodes_on(&s.test_kube, &s.test_old);
    for node in v2.iter().take(2) {
        add_pods(&s.test_kube, node, "web", 9, 4, "CreateContainerError");
    }
    for node in &v1 {
        add_pods(&s.test_kube, node, "api", 6, 0, "");
    }
    s.watch(now).await;
    s.pass(now).await;
    now += minutes(1);
    assert!(new_quarantined(&s).await.is_none(), "18 starts are too few");

    for node in v2.iter().take(2) {
        add_pods(&s.test_kube, node, "late", 1, 0, "");
    }
    s.watch(now).await;
    s.pass(now).await;
    let q = new_quarantined(&s).await.expect("indicted at 20 starts");
    let Cause::WorkloadFailures { pool, evidence } = &q.cause else {
        panic!("cause WorkloadFailures: {q:?}");
    };
    assert_eq!(pool, "test/general");
    assert_eq!(evidence.reason.as_deref(), Some("CreateContainerError"));
    assert!(
        evidence.new.of >= 20 && evidence.new.count == 8,
        "{evidence:?}"
    );
    assert_eq!(evidence.old.map(|o| o.count), Some(0), "{evidence:?}");
    assert_eq!(
        s.record("test/general").await.desired.unwrap().id,
        s.test_old,
        "rolled back"
    );
    // The pass before showed 8 failures of 18 starts on v2 (44.4%), none on v1.
    let docs = metrics.0.lock().unwrap().clone();
    let watched: Vec<&serde_json::Value> = docs
        .iter()
        .filter(|d| d["Pool"] == "test/general" && d["Release"] == NEW)
        .collect();
    assert!(
        watched.iter().any(
            |d| d["PodStartFailurePercentNew"] == 44.4 && d["PodStartFailurePercentOld"] == 0.0
        ),
        "{watched:?}"
    );
}

/// `ErrImagePull` on v1 and v2 nodes alike (a registry outage) indicts nothing: the rollout
/// goes on to the end.
#[tokio::test]
async fn pod_failures_on_old_and_new_alike_indict_nothing_and_the_rollout_goes_on() {
    let s = stages(
        Stage {
            nodes: 6,
            budget: "1",
        },
        Stage {
            nodes: 3,
            budget: "1",
        },
        "    soak: 24h\n",
    )
    .await;
    let mut now = at("2026-12-01T10:00:00Z");
    s.watch(now).await;
    s.pass(now).await;
    for node in &nodes_on(&s.test_kube, &s.test_old) {
        add_pods(&s.test_kube, node, "api", 10, 3, "ImagePullBackOff");
    }
    let (new, _) = s.publish_new();
    now += minutes(5);
    let two_on_new = until(&s, &mut now, 40, async |s: &Stages| {
        nodes_on(&s.test_kube, &new).len() >= 2
    })
    .await;
    assert!(two_on_new);
    for node in nodes_on(&s.test_kube, &new).iter().take(2) {
        add_pods(&s.test_kube, node, "web", 10, 3, "ErrImagePull");
    }
    let rolled = until(&s, &mut now, 90, async |s: &Stages| {
        let images = s.images("test-general").await;
        images.len() == 6 && images.iter().all(|i| *i == new)
    })
    .await;
    assert!(
        rolled,
        "the rollout went on: {:?}, {:#?}, {:?}",
        s.images("test-general").await,
        s.rotations("test/general").await,
        new_quarantined(&s).await
    );
    assert!(new_quarantined(&s).await.is_none());
}

/// Withdrawal: after test proved v2 and prod rolled onto it, the vendor moves the public
/// parameters back to v1 (a higher parameter version). The next watcher pass quarantines v2
/// `Withdrawn`, and both pools go back to v1 at their budgets.
#[tokio::test]
async fn a_release_withdrawn_by_its_publisher_is_quarantined_and_every_pool_leaves_it() {
    let s = stages(
        Stage {
            nodes: 4,
            budget: "2",
        },
        Stage {
            nodes: 3,
            budget: "1",
        },
        "    soak: 1h\n",
    )
    .await;
    let (mut now, new, prod_new) = first_pass_then_publish(&s).await;
    roll_test(&s, &mut now, &new, 4).await;
    let soaking = until_soaking_in_test(&s, &mut now, NEW).await;
    assert!(soaking);
    now += TimeDelta::hours(1) + minutes(1);
    let prod_on_new = until(&s, &mut now, 60, async |s: &Stages| {
        let images = s.images("prod-general").await;
        images.len() == 3 && images.iter().all(|i| *i == prod_new)
    })
    .await;
    assert!(prod_on_new, "prod took v2");
    assert!(new_quarantined(&s).await.is_none());

    // The publisher withdraws v2: the recommended parameters name v1 again.
    for (k8s, old) in [("1.30", &s.test_old), ("1.29", &s.prod_old)] {
        s.cloud.put_parameter(
            &format!(
                "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/standard/recommended/image_id"
            ),
            old,
        );
    }
    s.watch(now).await;
    let q = new_quarantined(&s).await.expect("v2 quarantined");
    let Cause::Withdrawn { image, back_to, .. } = &q.cause else {
        panic!("cause Withdrawn: {q:?}");
    };
    assert!(
        [&new, &prod_new].contains(&image) && [&s.test_old, &s.prod_old].contains(&back_to),
        "{q:?}"
    );
    let back = until(&s, &mut now, 60, async |s: &Stages| {
        let test = s.images("test-general").await;
        let prod = s.images("prod-general").await;
        test.len() == 4
            && test.iter().all(|i| *i == s.test_old)
            && prod.len() == 3
            && prod.iter().all(|i| *i == s.prod_old)
    })
    .await;
    assert!(
        back,
        "both pools back on v1: test {:?}, prod {:?}",
        s.images("test-general").await,
        s.images("prod-general").await
    );
    assert_eq!(
        s.record("prod/general").await.desired.unwrap().id,
        s.prod_old
    );
}
