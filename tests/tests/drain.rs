//! `nodecycle drain` end to end: nodecycle's EKS token, client and resumable drain against the
//! Kubernetes API stand-in, with moto's eks:DescribeCluster giving the endpoint and CA.

// Test code: helpers outside #[test] fns panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use chrono::Utc;
use nodecycle::kube::client::ClusterAccess;
use nodecycle::kube::{
    DrainState, EksKube, KubeOverrides, NodeOps, drain_command, drain_step, start_drain,
};
use nodecycle_tests::{FakeCloud, KubeStandIn, KubeState, NodeFixture, PdbFixture, PodFixture};
use serde_json::Value;

/// The cluster reached as DescribeCluster answers (moto: the Kubernetes stand-in).
const NO_OVERRIDES: KubeOverrides = KubeOverrides {
    endpoint: None,
    ca_file: None,
    insecure: false,
};

const INSTANCE: &str = "i-0123456789abcdef0";
const NODE: &str = "ip-10-0-1-10.us-east-2.compute.internal";
const WAIT: Duration = Duration::from_secs(60);

fn provider_id(instance: &str) -> String {
    format!("aws:///us-east-2a/{instance}")
}

fn cluster() -> (FakeCloud, KubeStandIn) {
    let cloud = FakeCloud::start();
    let kube = cloud.create_kube("prod");
    kube.add_node(NODE, &provider_id(INSTANCE));
    kube.add_node(
        "ip-10-0-2-20.us-east-2.compute.internal",
        &provider_id("i-0fedcba9876543210"),
    );
    (cloud, kube)
}

fn web_pod(name: &str, node: &str) -> PodFixture {
    PodFixture::new("default", name)
        .node(node)
        .owner("ReplicaSet", "web-5d8f")
        .label("app", "web")
        .grace_seconds(1)
}

/// Evictions (any answer) of one pod.
fn evictions(state: &KubeState, ns: &str, name: &str) -> Vec<u16> {
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}/eviction");
    state
        .requests_to("POST", &path)
        .iter()
        .map(|r| r.status)
        .collect()
}

fn deletions(state: &KubeState, ns: &str, name: &str) -> usize {
    state
        .requests_to("DELETE", &format!("/api/v1/namespaces/{ns}/pods/{name}"))
        .len()
}

fn event_reasons(state: &KubeState, node: &str) -> Vec<String> {
    state
        .events_for(node)
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

async fn run_drain(
    cloud: &FakeCloud,
    instance: &str,
    grace: Option<Duration>,
    timeout: Duration,
) -> Result<nodecycle::kube::DrainReport, nodecycle::kube::DrainCommandError> {
    let sdk = cloud.sdk_config().await;
    let mut lines = Vec::new();
    let result = drain_command(
        &sdk,
        &NO_OVERRIDES,
        "prod",
        instance,
        grace,
        timeout,
        &mut |l: &str| lines.push(l.to_string()),
    )
    .await;
    eprintln!("progress:\n{}", lines.join("\n"));
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdb_blocks_then_allows_as_other_pods_become_ready() {
    let (cloud, kube) = cluster();
    kube.add_pod(web_pod("web-1", NODE));
    kube.add_pod(web_pod("web-2", NODE));
    kube.add_pdb(
        PdbFixture::new("default", "web-pdb")
            .match_label("app", "web")
            .min_available(1),
    );

    let sdk = cloud.sdk_config().await;
    let drain = tokio::spawn(async move {
        drain_command(
            &sdk,
            &NO_OVERRIDES,
            "prod",
            INSTANCE,
            None,
            Duration::from_secs(90),
            &mut |l: &str| eprintln!("{l}"),
        )
        .await
    });
    // One pod goes, the other is blocked by the budget...
    let k = kube.clone();
    tokio::task::spawn_blocking(move || {
        k.wait_for("an eviction refused with 429", WAIT, |s| {
            let all: Vec<u16> = evictions(s, "default", "web-1")
                .into_iter()
                .chain(evictions(s, "default", "web-2"))
                .collect();
            all.contains(&429).then_some(())
        })
    })
    .await
    .unwrap();
    let state = kube.state();
    let node = state.node(NODE).unwrap();
    assert_eq!(node["spec"]["unschedulable"], Value::Bool(true));
    assert!(
        node["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "nodecycle.dev/disrupted" && t["effect"] == "NoSchedule"),
        "{node}"
    );
    // ...until a replacement elsewhere becomes ready.
    kube.add_pod(web_pod("web-3", "ip-10-0-2-20.us-east-2.compute.internal").ready(false));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !drain.is_finished(),
        "a not-ready replacement must not unblock the budget"
    );
    kube.set_pod_ready("default", "web-3", true);

    let report = drain.await.unwrap().unwrap();
    assert!(report.done, "{report:?}");
    assert_eq!(report.evicted, 2);
    assert_eq!(report.deleted, 0);
    assert!(report.blocked_by.is_empty());
    let state = kube.state();
    assert!(state.pods_on(NODE).is_empty());
    for pod in ["web-1", "web-2"] {
        let answers = evictions(&state, "default", pod);
        assert_eq!(
            answers.iter().filter(|c| (200..300).contains(*c)).count(),
            1,
            "{pod}: {answers:?}"
        );
        assert_eq!(deletions(&state, "default", pod), 0);
    }
    let reasons = event_reasons(&state, NODE);
    for want in ["Cordoned", "Evicted", "EvictionBlocked", "Drained"] {
        assert!(
            reasons.iter().any(|r| r == want),
            "missing {want} in {reasons:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_mirror_and_finished_pods_are_skipped() {
    let (cloud, kube) = cluster();
    kube.add_pod(web_pod("web-1", NODE));
    kube.add_pod(
        PodFixture::new("kube-system", "kube-proxy-abcde")
            .node(NODE)
            .owner("DaemonSet", "kube-proxy"),
    );
    kube.add_pod(
        PodFixture::new("kube-system", "static-web-node")
            .node(NODE)
            .mirror(),
    );
    kube.add_pod(
        PodFixture::new("default", "job-xyz")
            .node(NODE)
            .owner("Job", "job")
            .phase("Succeeded"),
    );
    // What the kubelet leaves of a pod it evicted under node pressure (as on the real API:
    // controlplane::a_drain_moves_what_budgets_allow_...).
    kube.add_pod(
        PodFixture::new("default", "evicted-earlier")
            .node(NODE)
            .phase("Failed"),
    );

    let report = run_drain(&cloud, INSTANCE, None, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(report.done, "{report:?}");
    assert_eq!(
        (report.evicted, report.skipped, report.deleted),
        (1, 4, 0),
        "{report:?}"
    );
    let state = kube.state();
    assert!(evictions(&state, "kube-system", "kube-proxy-abcde").is_empty());
    assert!(evictions(&state, "kube-system", "static-web-node").is_empty());
    assert!(evictions(&state, "default", "job-xyz").is_empty());
    assert!(evictions(&state, "default", "evicted-earlier").is_empty());
    assert!(state.pod("kube-system", "static-web-node").is_some());
    let json = serde_json::to_value(&report).unwrap();
    for key in [
        "node",
        "evicted",
        "skipped",
        "deleted",
        "blockedBy",
        "failures",
        "done",
    ] {
        assert!(json.get(key).is_some(), "{key} missing in {json}");
    }
    assert_eq!(json["node"], NODE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_grace_period_is_waited_for() {
    let (cloud, kube) = cluster();
    kube.add_pod(
        PodFixture::new("default", "slow")
            .node(NODE)
            .owner("StatefulSet", "db")
            .grace_seconds(6),
    );
    let sdk = cloud.sdk_config().await;
    let api = EksKube::connect(&sdk, "prod", &NO_OVERRIDES).await.unwrap();
    let mut state = start_drain(&api, INSTANCE, "Drifted", None, Utc::now())
        .await
        .unwrap();
    let first = drain_step(&api, &mut state, Utc::now(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(first.evicted.len(), 1);
    let second = drain_step(&api, &mut state, Utc::now(), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(!second.done, "the pod is still terminating: {second:?}");
    assert_eq!(second.pods_remaining, 1);
    let pod = kube
        .state()
        .pod("default", "slow")
        .cloned()
        .expect("still there while terminating");
    assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod}");
    let started = Instant::now();
    loop {
        let p = drain_step(&api, &mut state, Utc::now(), Duration::from_secs(10))
            .await
            .unwrap();
        if p.done {
            break;
        }
        assert!(started.elapsed() < WAIT, "never finished: {p:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let s = kube.state();
    assert!(s.pod("default", "slow").is_none());
    assert_eq!(
        evictions(&s, "default", "slow").len(),
        1,
        "evicted once, then waited"
    );
    assert_eq!(deletions(&s, "default", "slow"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_reached_then_remaining_pods_are_deleted() {
    let (cloud, kube) = cluster();
    kube.add_pod(web_pod("web-1", NODE));
    kube.add_pdb(
        PdbFixture::new("default", "web-pdb")
            .match_label("app", "web")
            .min_available(1),
    );

    let report = run_drain(
        &cloud,
        INSTANCE,
        Some(Duration::from_secs(3)),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert!(report.done, "{report:?}");
    assert_eq!((report.evicted, report.deleted), (0, 1), "{report:?}");
    let state = kube.state();
    assert!(
        evictions(&state, "default", "web-1")
            .iter()
            .all(|c| *c == 429)
    );
    assert_eq!(deletions(&state, "default", "web-1"), 1);
    assert!(
        event_reasons(&state, NODE)
            .iter()
            .any(|r| r == "DrainDeadlineReached")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_while_blocked_reports_the_budget() {
    let (cloud, kube) = cluster();
    kube.add_pod(web_pod("web-1", NODE));
    kube.add_pdb(
        PdbFixture::new("default", "web-pdb")
            .match_label("app", "web")
            .min_available(1),
    );
    let report = run_drain(&cloud, INSTANCE, None, Duration::from_secs(3))
        .await
        .unwrap();
    assert!(!report.done);
    assert_eq!(report.blocked_by, vec!["default/web-pdb".to_string()]);
    assert!(kube.state().pod("default", "web-1").is_some());
}

/// A pod under two PodDisruptionBudgets: the API server answers its eviction 500 (as the real
/// one does: `controlplane::a_drain_blocked_by_budgets_retries_and_forces_nothing`); the drain
/// never deletes it and its report names the refusal in `failures`, not in `blockedBy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_under_two_pdbs_is_never_forced_and_named_in_the_report() {
    let (cloud, kube) = cluster();
    kube.add_pod(web_pod("web-1", NODE));
    for name in ["web-a", "web-b"] {
        kube.add_pdb(
            PdbFixture::new("default", name)
                .match_label("app", "web")
                .max_unavailable(1),
        );
    }
    let report = run_drain(&cloud, INSTANCE, None, Duration::from_secs(3))
        .await
        .unwrap();
    assert!(!report.done, "{report:?}");
    assert!(report.blocked_by.is_empty(), "{report:?}");
    assert_eq!(
        report.failures,
        vec![
            "eviction of default/web-1 failed with HTTP 500: This pod has more than one \
             PodDisruptionBudget, which the eviction subresource does not support."
                .to_string()
        ],
        "{report:?}"
    );
    let state = kube.state();
    assert!(
        evictions(&state, "default", "web-1")
            .iter()
            .all(|c| *c == 500)
    );
    assert_eq!(deletions(&state, "default", "web-1"), 0);
    assert!(state.pod("default", "web-1").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_instance_and_bad_input_are_exit_2() {
    let (cloud, kube) = cluster();
    let err = run_drain(&cloud, "i-0aaaaaaaaaaaaaaaa", None, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    assert!(err.to_string().contains("i-0aaaaaaaaaaaaaaaa"), "{err}");
    let err = run_drain(&cloud, "not-an-instance", None, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    let sdk = cloud.sdk_config().await;
    let err = drain_command(
        &sdk,
        &NO_OVERRIDES,
        "no-such-cluster",
        INSTANCE,
        None,
        Duration::from_secs(5),
        &mut |_: &str| {},
    )
    .await
    .unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    // Nothing was touched.
    let state = kube.state();
    assert!(
        state
            .nodes
            .iter()
            .all(|n| n["spec"]["unschedulable"] != Value::Bool(true))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_already_cordoned_node_is_drained_and_stays_cordoned_on_abort() {
    let cloud = FakeCloud::start();
    let kube = cloud.create_kube("prod");
    kube.add_node_with(
        NodeFixture::new(NODE)
            .provider_id(&provider_id(INSTANCE))
            .unschedulable(),
    );
    kube.add_pod(web_pod("web-1", NODE));
    let sdk = cloud.sdk_config().await;
    let api = EksKube::connect(&sdk, "prod", &NO_OVERRIDES).await.unwrap();
    let state = start_drain(&api, INSTANCE, "Drifted", None, Utc::now())
        .await
        .unwrap();
    assert!(state.was_unschedulable);
    let node = kube.state().node(NODE).cloned().unwrap();
    assert!(
        node["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "nodecycle.dev/disrupted")
    );
    nodecycle::kube::abort_drain(&api, &state).await.unwrap();
    let node = kube.state().node(NODE).cloned().unwrap();
    assert_eq!(node["spec"]["unschedulable"], Value::Bool(true), "{node}");
    assert!(
        node["spec"]["taints"]
            .as_array()
            .is_none_or(|t| { t.iter().all(|t| t["key"] != "nodecycle.dev/disrupted") })
    );

    // And the full command drains it.
    let report = run_drain(&cloud, INSTANCE, None, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(report.done && report.evicted == 1, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_resumes_across_invocations_without_repeating_evictions() {
    let (cloud, kube) = cluster();
    for i in 1..=3 {
        kube.add_pod(web_pod(&format!("web-{i}"), NODE).grace_seconds(2));
    }
    kube.add_pod(
        PodFixture::new("default", "api-1")
            .node(NODE)
            .owner("ReplicaSet", "api")
            .label("app", "api")
            .grace_seconds(2),
    );
    kube.add_pdb(
        PdbFixture::new("default", "web-pdb")
            .match_label("app", "web")
            .max_unavailable(1),
    );
    let sdk = cloud.sdk_config().await;

    // Every invocation: a new client, the state loaded from its stored JSON.
    let api = EksKube::connect(&sdk, "prod", &NO_OVERRIDES).await.unwrap();
    let state = start_drain(
        &api,
        INSTANCE,
        "Drifted",
        Some(Duration::from_secs(3600)),
        Utc::now(),
    )
    .await
    .unwrap();
    let mut stored = serde_json::to_string(&state).unwrap();
    let started = Instant::now();
    let mut steps = 0;
    loop {
        let api = EksKube::connect(&sdk, "prod", &NO_OVERRIDES).await.unwrap();
        let mut state: DrainState = serde_json::from_str(&stored).unwrap();
        let progress = drain_step(&api, &mut state, Utc::now(), Duration::from_secs(10))
            .await
            .unwrap();
        stored = serde_json::to_string(&state).unwrap();
        steps += 1;
        if progress.done {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "drain did not finish: {progress:?}"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    assert!(
        steps > 2,
        "expected a drain over several steps, took {steps}"
    );
    let s = kube.state();
    assert!(s.pods_on(NODE).is_empty());
    for pod in ["web-1", "web-2", "web-3", "api-1"] {
        let answers = evictions(&s, "default", pod);
        let accepted = answers.iter().filter(|c| (200..300).contains(*c)).count();
        assert_eq!(accepted, 1, "{pod} evicted once: {answers:?}");
        // Nothing after the accepted eviction.
        assert_eq!(
            answers.last().copied().map(|c| (200..300).contains(&c)),
            Some(true),
            "{pod}: {answers:?}"
        );
    }
    let state: DrainState = serde_json::from_str(&stored).unwrap();
    assert!(state.done);
    assert_eq!(state.evicted.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_is_refused_with_401() {
    let (cloud, kube) = cluster();
    let access = ClusterAccess::resolve(
        "prod",
        Some(&kube.endpoint),
        Some(&kube.ca_data),
        &KubeOverrides::default(),
        None,
    )
    .unwrap();
    // Wrong secret key.
    let sdk = cloud.sdk_config().await;
    let wrong = sdk
        .to_builder()
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(
                aws_credential_types::Credentials::new(
                    "testing",
                    "not-the-secret",
                    None,
                    None,
                    "wrong",
                ),
            ),
        )
        .build();
    let api = EksKube::new(&wrong, access.clone()).unwrap();
    let err = api.find_node(INSTANCE).await.unwrap_err();
    assert_eq!(err.code(), Some(401), "{err}");
    assert!(err.to_string().contains("access entry"), "{err}");
    // Right credentials, token for another cluster.
    let other = ClusterAccess {
        cluster: "staging".into(),
        ..access.clone()
    };
    let err = EksKube::new(&sdk, other)
        .unwrap()
        .get_node(NODE)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(401), "{err}");
    // The right one works.
    assert!(
        EksKube::new(&sdk, access)
            .unwrap()
            .find_node(INSTANCE)
            .await
            .unwrap()
            .is_some()
    );
    let state = kube.state();
    assert!(
        state
            .requests
            .iter()
            .any(|r| r.status == 401 && r.auth_error.is_some())
    );
    assert!(
        state
            .nodes
            .iter()
            .all(|n| n["spec"]["unschedulable"] != Value::Bool(true))
    );
}
