//! nodecycle against a real Kubernetes control plane (issue 44): kube-apiserver, the controller
//! manager's disruption, ReplicaSet and Deployment controllers, the scheduler, and KWOK nodes
//! (`nodecycle_tests::ControlPlane`). nodecycle connects with its own EKS token, which the
//! harness's authentication webhook accepts.

// Test code: helpers outside #[test] fns panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use nodecycle::kube::{KubeOverrides, drain_command};
use nodecycle_tests::{ControlPlane, KubeClient, KwokNode};
use serde_json::{Value, json};

const NS: &str = "shop";

/// The SDK configuration nodecycle signs its EKS token with (no AWS call is made: the endpoint
/// and CA come from the overrides).
fn sdk() -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .region(aws_config::Region::new("us-east-2"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "AKIDTESTCONTROLPLANE",
            "secret",
            None,
            None,
            "test",
        )))
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build()
}

fn create(client: &KubeClient, path: &str, body: Value) {
    let r = client.post(path, &body);
    assert_eq!(r.status, 201, "POST {path}: {}", r.raw);
}

/// The pods of `app`, with their node, uid and readiness (Ready and not being deleted).
fn pods_of(client: &KubeClient, app: &str) -> Vec<(String, String, String, bool)> {
    let r = client.get(&format!(
        "/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{app}"
    ));
    assert_eq!(r.status, 200, "{}", r.raw);
    r.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let ready = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&p["metadata"]["name"]),
                s(&p["spec"]["nodeName"]),
                s(&p["metadata"]["uid"]),
                ready && p["metadata"]["deletionTimestamp"].is_null(),
            )
        })
        .collect()
}

fn web_pods(client: &KubeClient) -> Vec<(String, String, String, bool)> {
    pods_of(client, "web")
}

fn pdb(client: &KubeClient, name: &str) -> Value {
    client
        .get(&format!(
            "/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/{name}"
        ))
        .body
}

fn pdb_status(client: &KubeClient) -> Value {
    pdb(client, "web")
}

/// Whether the disruption controller has computed the status of PDB `name`'s current spec,
/// with `allowed` disruptions when given.
fn pdb_settled(client: &KubeClient, name: &str, allowed: Option<i64>) -> bool {
    let p = pdb(client, name);
    p["status"]["observedGeneration"] == p["metadata"]["generation"]
        && allowed.is_none_or(|a| p["status"]["disruptionsAllowed"] == a)
}

fn create_namespace(client: &KubeClient) {
    create(
        client,
        "/api/v1/namespaces",
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NS } }),
    );
}

/// A PodDisruptionBudget `name` over the pods of `app`; `budget` is `{"maxUnavailable": 1}` or
/// `{"minAvailable": 2}`.
fn create_pdb(client: &KubeClient, name: &str, app: &str, budget: Value) {
    let mut spec = budget;
    spec["selector"] = json!({ "matchLabels": { "app": app } });
    create(
        client,
        &format!("/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"),
        json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": { "name": name },
            "spec": spec,
        }),
    );
}

/// A Deployment `app` of `replicas` pods spread over the schedulable nodes (a tainted, e.g.
/// cordoned, node does not count).
fn create_deployment(client: &KubeClient, app: &str, replicas: u32) {
    create(
        client,
        &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": { "name": app },
            "spec": {
                "replicas": replicas,
                "selector": { "matchLabels": { "app": app } },
                "template": {
                    "metadata": { "labels": { "app": app } },
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "automountServiceAccountToken": false,
                        "containers": [{ "name": app, "image": "registry.k8s.io/pause:3.10" }],
                        "topologySpreadConstraints": [{
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "DoNotSchedule",
                            "nodeTaintsPolicy": "Honor",
                            "labelSelector": { "matchLabels": { "app": app } },
                        }],
                    },
                },
            },
        }),
    );
}

/// 3 `web` replicas and a PDB allowing 1 of them to be unavailable.
fn deploy_web(client: &KubeClient) {
    create_namespace(client);
    create_pdb(client, "web", "web", json!({ "maxUnavailable": 1 }));
    create_deployment(client, "web", 3);
}

/// Runs `nodecycle drain` of `instance` (connecting with its EKS token, endpoint and CA as
/// overrides), printing its progress lines.
async fn drain(
    cp: &ControlPlane,
    instance: &str,
    timeout: Duration,
) -> Result<nodecycle::kube::DrainReport, nodecycle::kube::DrainCommandError> {
    let overrides = KubeOverrides {
        endpoint: Some(cp.endpoint.clone()),
        ca_file: Some(cp.ca_file.clone()),
        insecure: false,
    };
    let mut lines = Vec::new();
    let report = drain_command(
        &sdk(),
        &overrides,
        "prod",
        instance,
        None,
        timeout,
        &mut |l: &str| lines.push(l.to_string()),
    )
    .await;
    eprintln!("progress:\n{}", lines.join("\n"));
    report
}

/// `nodecycle drain` of a node holding two of a Deployment's three pods, under a PDB with
/// `maxUnavailable: 1`: nodecycle evicts (never deletes) both, the ReplicaSet controller
/// replaces them and the scheduler places the replacements on the other node, and the PDB
/// status the disruption controller computes never shows more than one pod disrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_evicts_within_the_pdb_and_the_scheduler_moves_the_pods() {
    let cp = ControlPlane::start();
    let admin = cp.admin();
    let a = KwokNode::new("i-0a1b2c3d4e5f60001", "us-east-2a");
    let b = KwokNode::new("i-0a1b2c3d4e5f60002", "us-east-2b");
    for node in [&a, &b] {
        cp.add_node(node);
        cp.wait_node_ready(&node.name);
    }
    deploy_web(&admin);
    let before = cp.wait_for("3 web pods Ready and the PDB allowing 1 disruption", |_| {
        let pods = web_pods(&admin);
        let pdb = pdb_status(&admin);
        (pods.len() == 3
            && pods.iter().all(|p| p.3)
            && pdb["status"]["currentHealthy"] == 3
            && pdb["status"]["disruptionsAllowed"] == 1
            && pdb["status"]["observedGeneration"] == pdb["metadata"]["generation"])
            .then_some(pods)
    });
    // The spread puts 2 pods on one node and 1 on the other: drain the node with 2.
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &before {
        *per_node.entry(p.1.as_str()).or_default() += 1;
    }
    let (drained, kept) = if per_node.get(a.name.as_str()) == Some(&2) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    assert_eq!(
        per_node.get(drained.name.as_str()),
        Some(&2),
        "the spread: {before:?}"
    );
    let leaving: Vec<(String, String)> = before
        .iter()
        .filter(|p| p.1 == drained.name)
        .map(|p| (p.0.clone(), p.2.clone()))
        .collect();

    // Watch the PDB status as the disruption controller reports it, all through the drain.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, admin) = (stop.clone(), admin.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let s = pdb_status(&admin)["status"].clone();
                seen.push((
                    s["currentHealthy"].as_i64().unwrap_or(-1),
                    s["desiredHealthy"].as_i64().unwrap_or(-1),
                ));
                std::thread::sleep(Duration::from_millis(50));
            }
            seen
        })
    };
    let report = drain(&cp, &drained.instance_id, Duration::from_secs(120)).await;
    stop.store(true, Ordering::SeqCst);
    let seen = watcher.join().expect("PDB watcher");
    let report = report.expect("the drain succeeds");
    assert!(report.done, "{report:?}");
    assert_eq!(report.evicted, 2, "{report:?}");
    assert_eq!(report.deleted, 0, "{report:?}");

    // nodecycle authenticated with its EKS token, and evicted: no delete of a pod by it.
    assert!(
        cp.token_reviews().iter().any(|(_, accepted)| *accepted),
        "nodecycle's EKS token reached the webhook"
    );
    let audit = cp.audit();
    let by_nodecycle: Vec<_> = audit
        .iter()
        .filter(|e| e.user == ControlPlane::EKS_USER && e.resource == "pods")
        .collect();
    for (name, _) in &leaving {
        assert!(
            by_nodecycle.iter().any(|e| e.subresource == "eviction"
                && e.verb == "create"
                && e.name == *name
                && e.code == 201),
            "{name} was evicted: {by_nodecycle:#?}"
        );
    }
    assert!(
        !by_nodecycle
            .iter()
            .any(|e| e.verb == "delete" && e.subresource.is_empty()),
        "nodecycle deleted no pod: {by_nodecycle:#?}"
    );

    // The disruption controller never counted fewer healthy pods than the budget wants.
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|(healthy, desired)| *desired == 2 && healthy >= desired),
        "PDB (currentHealthy, desiredHealthy) as reported during the drain: {seen:?}"
    );

    // The node is cordoned and tainted; the replacements run on the other node.
    let node = admin.get(&format!("/api/v1/nodes/{}", drained.name)).body;
    assert_eq!(node["spec"]["unschedulable"], true, "{node}");
    assert!(
        node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == nodecycle::kube::DISRUPTED_TAINT_KEY),
        "{node}"
    );
    let after = cp.wait_for("3 web pods Ready on the kept node", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 3 && pods.iter().all(|p| p.3 && p.1 == kept.name)).then_some(pods)
    });
    for (name, uid) in &leaving {
        assert!(
            !after.iter().any(|p| p.2 == *uid),
            "{name} was replaced: {after:?}"
        );
    }
}

/// A drain the real API server refuses, and nodecycle neither forces nor misreads: `db`'s PDB
/// (`minAvailable` = its replicas) has no healthy budget, so its evictions get 429 naming the
/// budget; the `cache` pod is under two PDBs, so its eviction gets 500. With no deadline,
/// nodecycle keeps retrying until its timeout, deletes nothing, and reports the drain not done,
/// blocked by `db`'s PDB. The answers are the ones the stand-in (tests/fakecloud/kube.py) gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_blocked_by_budgets_retries_and_forces_nothing() {
    let cp = ControlPlane::start();
    let admin = cp.admin();
    let node = KwokNode::new("i-0a1b2c3d4e5f60003", "us-east-2c");
    cp.add_node(&node);
    cp.wait_node_ready(&node.name);
    create_namespace(&admin);
    create_pdb(&admin, "db", "db", json!({ "minAvailable": 2 }));
    create_pdb(&admin, "cache-a", "cache", json!({ "maxUnavailable": 1 }));
    create_pdb(&admin, "cache-b", "cache", json!({ "maxUnavailable": 1 }));
    create_deployment(&admin, "db", 2);
    create_deployment(&admin, "cache", 1);
    let before = cp.wait_for("3 pods Ready and the PDBs computed", |_| {
        let pods: Vec<_> = pods_of(&admin, "db")
            .into_iter()
            .chain(pods_of(&admin, "cache"))
            .collect();
        (pods.len() == 3
            && pods.iter().all(|p| p.3)
            && pdb_settled(&admin, "db", Some(0))
            // A pod under two PDBs updates only one of them ("matches multiple
            // PodDisruptionBudgets. Chose cache-a arbitrarily"): the other may keep the
            // disruptionsAllowed it had before the pod was Ready. The eviction is refused
            // whatever they say.
            && pdb_settled(&admin, "cache-a", None)
            && pdb_settled(&admin, "cache-b", None))
        .then_some(pods)
    });

    // What the real API server answers, next to what the stand-in answers.
    let cache_pod = &pods_of(&admin, "cache")[0].0;
    let direct = admin.post(
        &format!("/api/v1/namespaces/{NS}/pods/{cache_pod}/eviction"),
        &json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": { "name": cache_pod, "namespace": NS },
            "dryRun": ["All"],
        }),
    );
    assert_eq!(direct.status, 500, "{}", direct.raw);
    assert_eq!(
        direct.body["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not \
         support.",
        "the stand-in's message for a pod under two PDBs is the API server's: {}",
        direct.raw
    );

    let report = drain(&cp, &node.instance_id, Duration::from_secs(10))
        .await
        .expect("the drain reports");
    assert!(!report.done, "{report:?}");
    assert_eq!(report.evicted, 0, "{report:?}");
    assert_eq!(report.deleted, 0, "{report:?}");
    assert_eq!(report.blocked_by, vec![format!("{NS}/db")], "{report:?}");

    let audit = cp.audit();
    let by_nodecycle: Vec<_> = audit
        .iter()
        .filter(|e| e.user == ControlPlane::EKS_USER && e.resource == "pods")
        .collect();
    let evictions = |name: &str| -> Vec<u16> {
        by_nodecycle
            .iter()
            .filter(|e| e.subresource == "eviction" && e.name == name)
            .map(|e| e.code)
            .collect()
    };
    for (name, ..) in &before {
        let codes = evictions(name);
        let refusal = if name == cache_pod { 500 } else { 429 };
        assert!(
            !codes.is_empty() && codes.iter().all(|c| *c == refusal),
            "{name}: every eviction refused with {refusal}: {codes:?}"
        );
    }
    assert!(
        !by_nodecycle.iter().any(|e| e.verb == "delete"),
        "nodecycle deleted no pod: {by_nodecycle:#?}"
    );
    // Every pod is still there, the same pod, Ready on the cordoned node.
    let after: Vec<_> = pods_of(&admin, "db")
        .into_iter()
        .chain(pods_of(&admin, "cache"))
        .collect();
    let uids = |pods: &[(String, String, String, bool)]| {
        let mut u: Vec<String> = pods.iter().map(|p| p.2.clone()).collect();
        u.sort();
        u
    };
    assert_eq!(uids(&after), uids(&before), "{after:?}");
    assert!(after.iter().all(|p| p.3 && p.1 == node.name), "{after:?}");
}
