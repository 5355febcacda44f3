//! nodecycle against a real Kubernetes control plane (issue 44): kube-apiserver, the controller
//! manager's disruption, ReplicaSet and Deployment controllers, the scheduler, and KWOK nodes
//! (`nodecycle_tests::ControlPlane`). nodecycle connects with its own EKS token, signed with
//! the credentials of a function role assumed in the fake cloud: the harness's authentication
//! webhook validates it against the fake cloud's STS and maps the role to the group of its EKS
//! access entry, and deploy/rbac.yaml, applied to the API server, decides what that group may do.

// Test code: helpers outside #[test] fns panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use nodecycle::handlers::Invocation;
use nodecycle::kube::{KubeOverrides, drain_command};
use nodecycle_tests::{AccessEntry, ControlPlane, FakeCloud, ImageFixture, KubeClient, KwokNode};

use crate::support::Adapters;
use serde::Deserialize as _;
use serde_json::{Value, json};

const NS: &str = "shop";
/// The EKS cluster's name: nodecycle signs its tokens for it (`x-k8s-aws-id`), the webhook
/// accepts tokens for it only.
const CLUSTER: &str = "prod";
const REGION: &str = "us-east-2";

/// The objects of deploy/rbac.yaml, in file order.
fn rbac_objects() -> Vec<Value> {
    let text = std::fs::read_to_string(nodecycle_tests::repo_path("deploy/rbac.yaml")).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect()
}

/// A function's identity: the role, the Kubernetes user and group its access entry maps it to,
/// and the SDK configuration (its assumed-role credentials) nodecycle signs its EKS token with.
struct Function {
    user: String,
    group: String,
    credentials: Credentials,
    sdk: aws_config::SdkConfig,
}

/// A fake cloud (its STS checks the tokens), a control plane whose webhook trusts it for
/// [`CLUSTER`], deploy/rbac.yaml applied, and the role `nodecycle-rotator` with an access entry
/// in group `nodecycle-rotator`, in force (a SubjectAccessReview allows it to list pods; what
/// else the file grants or not, the tests find out by calling).
async fn cluster_with_rotator() -> (FakeCloud, ControlPlane, Function) {
    let cloud = FakeCloud::start();
    let cp = ControlPlane::start();
    cp.trust_sts(cloud.aws_url(), CLUSTER);
    for object in rbac_objects() {
        cp.apply(&object);
    }
    let rotator = function(&cloud, &cp, "nodecycle-rotator", "nodecycle-rotator").await;
    wait_rbac(&cp, &rotator, "list", "pods", true);
    (cloud, cp, rotator)
}

/// Role `name` in the fake cloud's account, an access entry mapping it to `group` (EKS's
/// default username), and a session `name` of it.
async fn function(cloud: &FakeCloud, cp: &ControlPlane, name: &str, group: &str) -> Function {
    let role_arn = cloud.control(
        "create_role",
        json!({ "account": nodecycle_tests::ACCOUNT_ID, "name": name }),
    )["arn"]
        .as_str()
        .unwrap()
        .to_string();
    cp.add_access_entry(AccessEntry::new(&role_arn, &[group]));
    let assumed = aws_sdk_sts::Client::new(&cloud.sdk_config().await)
        .assume_role()
        .role_arn(&role_arn)
        .role_session_name(name)
        .send()
        .await
        .unwrap();
    let c = assumed.credentials().unwrap();
    // No endpoint: the token names the real regional STS host, as in AWS; the Kubernetes
    // endpoint and CA come from the overrides, so no AWS call is made with it.
    let credentials = Credentials::new(
        c.access_key_id(),
        c.secret_access_key(),
        Some(c.session_token().to_string()),
        None,
        "assumed",
    );
    let sdk = aws_config::SdkConfig::builder()
        .region(aws_config::Region::new(REGION))
        .credentials_provider(SharedCredentialsProvider::new(credentials.clone()))
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    Function {
        user: format!(
            "arn:aws:sts::{}:assumed-role/{name}/{name}",
            nodecycle_tests::ACCOUNT_ID
        ),
        group: group.to_string(),
        credentials,
        sdk,
    }
}

/// Waits until RBAC (a SubjectAccessReview) answers `allowed` for `function` to `verb`
/// `resource` in [`NS`]: the authorizer sees new roles and bindings a moment after they are
/// written. Bounded by the control plane's wait.
fn wait_rbac(cp: &ControlPlane, function: &Function, verb: &str, resource: &str, allowed: bool) {
    cp.wait_for(
        &format!(
            "RBAC to answer {allowed} to {verb} {resource} for {}",
            function.group
        ),
        |p| {
            (p.can(&function.user, &[&function.group], verb, resource, Some(NS))
                .0
                == allowed)
                .then_some(())
        },
    );
}

/// An EKS token for `function`'s credentials signed for `cluster` at `at`.
fn token_of(function: &Function, cluster: &str, at: std::time::SystemTime) -> String {
    nodecycle::kube::token(&function.credentials, REGION, cluster, at)
        .unwrap()
        .expose()
        .to_string()
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
        deployment(app, replicas),
    );
}

/// A Deployment `app` of `replicas` pods spread over the schedulable nodes among `nodes` only
/// (required node affinity on `kubernetes.io/hostname`).
fn create_deployment_on(client: &KubeClient, app: &str, replicas: u32, nodes: &[String]) {
    let mut d = deployment(app, replicas);
    d["spec"]["template"]["spec"]["affinity"] = json!({ "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [{
            "matchExpressions": [
                { "key": "kubernetes.io/hostname", "operator": "In", "values": nodes },
            ],
        }] },
    } });
    create(
        client,
        &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        d,
    );
}

/// The Deployment of [`create_deployment`].
fn deployment(app: &str, replicas: u32) -> Value {
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
    })
}

/// 3 `web` replicas and a PDB allowing 1 of them to be unavailable.
fn deploy_web(client: &KubeClient) {
    create_namespace(client);
    create_pdb(client, "web", "web", json!({ "maxUnavailable": 1 }));
    create_deployment(client, "web", 3);
}

/// Runs `nodecycle drain` of `instance` as `function` (connecting with its EKS token, endpoint
/// and CA as overrides), printing its progress lines; returns them with the result.
async fn drain(
    cp: &ControlPlane,
    function: &Function,
    instance: &str,
    timeout: Duration,
) -> (
    Result<nodecycle::kube::DrainReport, nodecycle::kube::DrainCommandError>,
    Vec<String>,
) {
    let overrides = KubeOverrides {
        endpoint: Some(cp.endpoint.clone()),
        ca_file: Some(cp.ca_file.clone()),
        insecure: false,
    };
    let mut lines = Vec::new();
    let report = drain_command(
        &function.sdk,
        &overrides,
        CLUSTER,
        instance,
        None,
        timeout,
        &mut |l: &str| lines.push(l.to_string()),
    )
    .await;
    eprintln!("progress:\n{}", lines.join("\n"));
    (report, lines)
}

/// `nodecycle drain` of a node holding two of a Deployment's three pods, under a PDB with
/// `maxUnavailable: 1`: nodecycle evicts (never deletes) both, the ReplicaSet controller
/// replaces them and the scheduler places the replacements on the other node, and the PDB
/// status the disruption controller computes never shows more than one pod disrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_evicts_within_the_pdb_and_the_scheduler_moves_the_pods() {
    let (_cloud, cp, rotator) = cluster_with_rotator().await;
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
    let (report, _) = drain(
        &cp,
        &rotator,
        &drained.instance_id,
        Duration::from_secs(120),
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    let seen = watcher.join().expect("PDB watcher");
    let report = report.expect("the drain succeeds");
    assert!(report.done, "{report:?}");
    assert_eq!(report.evicted, 2, "{report:?}");
    assert_eq!(report.deleted, 0, "{report:?}");

    // nodecycle authenticated with its EKS token as the rotator's access entry maps it (not
    // system:masters), and evicted: no delete of a pod by it.
    let reviews = cp.token_reviews();
    assert!(
        reviews.iter().any(|r| r.outcome
            == Ok((rotator.user.clone(), vec!["nodecycle-rotator".to_string()]))),
        "nodecycle's EKS token authenticated as the rotator: {:?}",
        reviews.iter().map(|r| &r.outcome).collect::<Vec<_>>()
    );
    let audit = cp.audit();
    let by_nodecycle: Vec<_> = audit
        .iter()
        .filter(|e| e.user == rotator.user && e.resource == "pods")
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
    let (_cloud, cp, rotator) = cluster_with_rotator().await;
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

    let (report, lines) = drain(&cp, &rotator, &node.instance_id, Duration::from_secs(10)).await;
    let report = report.expect("the drain reports");
    assert!(!report.done, "{report:?}");
    assert_eq!(report.evicted, 0, "{report:?}");
    assert_eq!(report.deleted, 0, "{report:?}");
    assert_eq!(report.blocked_by, vec![format!("{NS}/db")], "{report:?}");
    // The 500 is no budget's refusal: the progress, the report's failures and a Warning Event
    // on the node say what the API server answered for the pod.
    let refusal = format!(
        "eviction of {NS}/{cache_pod} failed with HTTP 500: This pod has more than one \
         PodDisruptionBudget, which the eviction subresource does not support."
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&refusal) && l.contains(&format!("by {NS}/db"))),
        "a step names the 500 ({refusal}) next to db's budget: {lines:#?}"
    );
    assert_eq!(report.failures, vec![refusal.clone()], "{report:?}");
    let events = admin.get(&format!(
        "/api/v1/namespaces/{}/events?fieldSelector=involvedObject.name%3D{},reason%3DEvictionFailed",
        nodecycle::kube::EVENTS_NAMESPACE,
        node.name
    ));
    assert!(
        events.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["type"] == "Warning"
                && e["message"].as_str().is_some_and(|m| m.contains(&refusal))),
        "a Warning EvictionFailed Event on the node: {}",
        events.raw
    );

    let audit = cp.audit();
    let by_nodecycle: Vec<_> = audit
        .iter()
        .filter(|e| e.user == rotator.user && e.resource == "pods")
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

/// Label of the pods whose containers ignore SIGTERM ([`ControlPlane::pods_ignore_sigterm`]).
const IGNORES_SIGTERM: (&str, &str) = ("nodecycle-tests/sigterm", "ignored");

/// A pod of [`NS`] bound to `node` (not scheduled: as the kubelet's mirror pods and a Job's
/// pods already placed are), with `metadata` merged in.
fn bound_pod(name: &str, node: &str, metadata: Value, restart: &str) -> Value {
    let mut meta = json!({ "name": name });
    for (k, v) in metadata.as_object().into_iter().flatten() {
        meta[k] = v.clone();
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "containers": [{ "name": "c", "image": "registry.k8s.io/pause:3.10" }],
        },
    })
}

/// The pod `name` of [`NS`], or Null when the API server does not have it.
fn pod(client: &KubeClient, name: &str) -> Value {
    let r = client.get(&format!("/api/v1/namespaces/{NS}/pods/{name}"));
    if r.status == 404 {
        return Value::Null;
    }
    assert_eq!(r.status, 200, "{}", r.raw);
    r.body
}

/// The drain matrix of `nodecycle drain` on one node of the real API, as the stand-in tests
/// `drain::daemonset_mirror_and_finished_pods_are_skipped` and
/// `drain::a_long_grace_period_is_waited_for` run it: the node holds the 3 pods of `web` (PDB
/// `maxUnavailable: 1`), the 3 of `api` (PDB `minAvailable: 2`), the pod of `slow` whose
/// container ignores SIGTERM (grace period 6 s: the kubelet, KWOK here, confirms the deletion
/// only at its end), a pod of DaemonSet `agent` (the real DaemonSet controller's), the mirror
/// of a static pod (annotation `kubernetes.io/config.mirror`, owned by the Node), a Job's pod
/// that Succeeded and a pod that Failed (evicted by the kubelet earlier). Step by step, with
/// no deadline: nodecycle evicts the 7 pods of the Deployments, each exactly once with 201,
/// any other answer a budget's refusal (429), and deletes none; every PDB status the disruption
/// controller writes during the drain keeps `desiredHealthy` for both budgets; a step taken
/// while `slow`'s pod is still listed Terminating is not done; it never evicts or deletes the 4
/// others, which stay, the same pods, on the node, and the drain ends done with those 4 left
/// alone. The scheduler puts the 7 replacements on the other node, Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_moves_what_budgets_allow_waits_for_sigterm_and_leaves_daemon_mirror_and_finished_pods()
 {
    let (_cloud, cp, rotator) = cluster_with_rotator().await;
    cp.pods_ignore_sigterm(IGNORES_SIGTERM.0, IGNORES_SIGTERM.1);
    let admin = cp.admin();
    let a = KwokNode::new("i-0a1b2c3d4e5f60011", "us-east-2a");
    cp.add_node(&a);
    cp.wait_node_ready(&a.name);
    let a_uid = admin.get(&format!("/api/v1/nodes/{}", a.name)).body["metadata"]["uid"].clone();
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_pdb(&admin, "api", "api", json!({ "minAvailable": 2 }));
    // With node a the only node, the scheduler puts every replica there.
    create_deployment(&admin, "web", 3);
    create_deployment(&admin, "api", 3);
    let mut slow = deployment("slow", 1);
    slow["spec"]["template"]["metadata"]["labels"][IGNORES_SIGTERM.0] = json!(IGNORES_SIGTERM.1);
    slow["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(6);
    create(
        &admin,
        &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        slow,
    );
    create(
        &admin,
        &format!("/apis/apps/v1/namespaces/{NS}/daemonsets"),
        json!({
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": { "name": "agent" },
            "spec": {
                "selector": { "matchLabels": { "app": "agent" } },
                "template": {
                    "metadata": { "labels": { "app": "agent" } },
                    "spec": {
                        "automountServiceAccountToken": false,
                        "containers": [{ "name": "agent", "image": "registry.k8s.io/pause:3.10" }],
                    },
                },
            },
        }),
    );
    // The kubelet's mirror of a static pod: annotated, owned by the Node.
    create(
        &admin,
        &format!("/api/v1/namespaces/{NS}/pods"),
        bound_pod(
            "static-proxy",
            &a.name,
            json!({
                "annotations": { "kubernetes.io/config.mirror": "0f3c9a" },
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": a.name, "uid": a_uid,
                    "controller": true,
                }],
            }),
            "Always",
        ),
    );
    // A Job's pod, which KWOK completes (no Job controller runs: the Job only owns it).
    create(
        &admin,
        &format!("/apis/batch/v1/namespaces/{NS}/jobs"),
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": { "name": "report" },
            "spec": {
                "suspend": true,
                "template": { "spec": {
                    "restartPolicy": "Never",
                    "containers": [{ "name": "c", "image": "registry.k8s.io/pause:3.10" }],
                } },
            },
        }),
    );
    let job_uid = admin
        .get(&format!("/apis/batch/v1/namespaces/{NS}/jobs/report"))
        .body["metadata"]["uid"]
        .clone();
    create(
        &admin,
        &format!("/api/v1/namespaces/{NS}/pods"),
        bound_pod(
            "report-done",
            &a.name,
            json!({ "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "report", "uid": job_uid,
                "controller": true,
            }] }),
            "Never",
        ),
    );
    create(
        &admin,
        &format!("/api/v1/namespaces/{NS}/pods"),
        bound_pod("evicted-earlier", &a.name, json!({}), "Never"),
    );
    cp.wait_for("the pod evicted-earlier Running", |_| {
        (pod(&admin, "evicted-earlier")["status"]["phase"] == "Running").then_some(())
    });
    // What the kubelet writes of a pod it evicted under node pressure.
    let failed = admin.patch(
        &format!("/api/v1/namespaces/{NS}/pods/evicted-earlier/status"),
        "application/merge-patch+json",
        &json!({ "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
        } }),
    );
    assert_eq!(failed.status, 200, "{}", failed.raw);

    let on_a = |app: &str, n: usize| {
        let pods = pods_of(&admin, app);
        (pods.len() == n && pods.iter().all(|p| p.3 && p.1 == a.name)).then_some(pods)
    };
    let (moving, left_alone) = cp.wait_for(
        "7 Deployment pods and the agent Ready on node a, report-done Succeeded, \
         evicted-earlier Failed, the PDBs settled",
        |_| {
            let web = on_a("web", 3)?;
            let api = on_a("api", 3)?;
            let slow = on_a("slow", 1)?;
            let agent = on_a("agent", 1)?;
            let phase = |name: &str| pod(&admin, name)["status"]["phase"].clone();
            (phase("static-proxy") == "Running"
                && phase("report-done") == "Succeeded"
                && phase("evicted-earlier") == "Failed"
                && pdb_settled(&admin, "web", Some(1))
                && pdb_settled(&admin, "api", Some(1)))
            .then_some(())?;
            let moving: Vec<_> = [web, api, slow].concat();
            let uid = |name: &str| pod(&admin, name)["metadata"]["uid"].clone();
            let left_alone: Vec<(String, Value)> = [
                (agent[0].0.clone(), json!(agent[0].2)),
                ("static-proxy".to_string(), uid("static-proxy")),
                ("report-done".to_string(), uid("report-done")),
                ("evicted-earlier".to_string(), uid("evicted-earlier")),
            ]
            .into();
            Some((moving, left_alone))
        },
    );
    let b = KwokNode::new("i-0a1b2c3d4e5f60012", "us-east-2b");
    cp.add_node(&b);
    cp.wait_node_ready(&b.name);
    cp.wait_for("the agent on node b too", |_| {
        let agents = pods_of(&admin, "agent");
        (agents.len() == 2 && agents.iter().all(|p| p.3)).then_some(())
    });
    let slow_uid = moving
        .iter()
        .find(|p| p.0.starts_with("slow-"))
        .unwrap()
        .2
        .clone();

    let api = nodecycle::kube::EksKube::connect(
        &rotator.sdk,
        CLUSTER,
        &KubeOverrides {
            endpoint: Some(cp.endpoint.clone()),
            ca_file: Some(cp.ca_file.clone()),
            insecure: false,
        },
    )
    .await
    .expect("nodecycle connects with its EKS token");
    let statuses_before = (
        cp.pdb_statuses(NS, "web").len(),
        cp.pdb_statuses(NS, "api").len(),
    );
    let mut state =
        nodecycle::kube::start_drain(&api, &a.instance_id, "Drifted", None, chrono::Utc::now())
            .await
            .expect("the drain starts");
    let mut steps_while_terminating = 0;
    let mut last = None;
    for _ in 0..240 {
        let step = nodecycle::kube::drain_step(
            &api,
            &mut state,
            chrono::Utc::now(),
            Duration::from_secs(10),
        )
        .await
        .expect("a drain step");
        eprintln!("{}", nodecycle::kube::command::describe_step(&step));
        // Listed after the step, so listed by it too: the node is still busy with it.
        let terminating = pods_of(&admin, "slow").iter().any(|p| {
            p.2 == slow_uid && !pod(&admin, &p.0)["metadata"]["deletionTimestamp"].is_null()
        });
        if terminating {
            steps_while_terminating += 1;
            assert!(!step.done, "done while slow's pod is Terminating: {step:?}");
        }
        let done = step.done;
        last = Some(step);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let last = last.expect("steps were taken");
    eprintln!("steps while slow was Terminating: {steps_while_terminating}");
    assert!(last.done, "the drain ends done: {last:?}");
    assert_eq!(
        last.skipped, 4,
        "agent, mirror, Succeeded and Failed left alone: {last:?}"
    );
    assert_eq!(state.evicted.len(), 7, "{state:?}");
    assert!(state.deleted.is_empty(), "{state:?}");
    assert!(
        steps_while_terminating > 0,
        "a step saw slow's pod Terminating (grace period 6 s)"
    );

    // Every PDB status the disruption controller wrote during the drain kept the budgets.
    for (name, before) in [("web", statuses_before.0), ("api", statuses_before.1)] {
        let written = &cp.pdb_statuses(NS, name)[before..];
        assert!(
            !written.is_empty(),
            "{name}: statuses written during the drain"
        );
        assert!(
            written.iter().all(|s| within_budget(s, 2)),
            "{name}: fewer than 2 healthy: {written:#?}"
        );
    }
    let audit = cp.audit();
    let by_nodecycle: Vec<_> = audit
        .iter()
        .filter(|e| e.user == rotator.user && e.resource == "pods")
        .collect();
    let codes = |name: &str| -> Vec<u16> {
        by_nodecycle
            .iter()
            .filter(|e| e.subresource == "eviction" && e.name == name)
            .map(|e| e.code)
            .collect()
    };
    let mut refused = 0;
    for (name, ..) in &moving {
        let answers = codes(name);
        assert_eq!(
            answers.iter().filter(|c| **c == 201).count(),
            1,
            "{name} evicted once: {answers:?}"
        );
        assert!(
            answers.iter().all(|c| matches!(c, 201 | 429)),
            "{name}: {answers:?}"
        );
        refused += answers.iter().filter(|c| **c == 429).count();
    }
    eprintln!("evictions refused by the budgets: {refused}");
    for (name, _) in &left_alone {
        assert!(codes(name).is_empty(), "{name} not evicted");
    }
    assert!(
        !by_nodecycle
            .iter()
            .any(|e| e.verb == "delete" && e.subresource.is_empty()),
        "nodecycle deleted no pod: {by_nodecycle:#?}"
    );
    // The 4 left alone are still on node a, the same pods.
    for (name, uid) in &left_alone {
        let p = pod(&admin, name);
        assert_eq!(&p["metadata"]["uid"], uid, "{name} is the same pod: {p}");
        assert_eq!(p["spec"]["nodeName"], a.name.as_str(), "{name}");
        assert!(p["metadata"]["deletionTimestamp"].is_null(), "{name}: {p}");
    }
    // The scheduler placed the replacements on node b.
    cp.wait_for("web, api and slow Ready on node b", |_| {
        let all: Vec<_> = ["web", "api", "slow"]
            .iter()
            .flat_map(|app| pods_of(&admin, app))
            .collect();
        (all.len() == 7 && all.iter().all(|p| p.3 && p.1 == b.name)).then_some(all)
    });
}

/// The authentication webhook validates an EKS token as aws-iam-authenticator does and maps
/// the caller as an EKS access entry does: the rotator's token for this cluster authenticates
/// as the entry's username and group (and RBAC then lets it list nodes); a token signed for
/// another cluster (STS refuses the signature over `x-k8s-aws-id`), one signed 16 minutes
/// ago, one naming a host that is not STS, one of a role without an access entry, and one of
/// the static test credentials get 401, each for its own reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_validates_eks_tokens_and_maps_access_entries() {
    let (cloud, cp, rotator) = cluster_with_rotator().await;
    // A role with credentials but no access entry.
    let unmapped = {
        let role_arn = cloud.control(
            "create_role",
            json!({ "account": nodecycle_tests::ACCOUNT_ID, "name": "unmapped" }),
        )["arn"]
            .as_str()
            .unwrap()
            .to_string();
        let c = aws_sdk_sts::Client::new(&cloud.sdk_config().await)
            .assume_role()
            .role_arn(&role_arn)
            .role_session_name("unmapped")
            .send()
            .await
            .unwrap();
        let c = c.credentials().unwrap();
        Credentials::new(
            c.access_key_id(),
            c.secret_access_key(),
            Some(c.session_token().to_string()),
            None,
            "assumed",
        )
    };
    let now = std::time::SystemTime::now();
    let as_token = |token: &str| cp.admin().with_token(Some(token.to_string()));
    let review_of = |token: &str| {
        cp.token_reviews()
            .into_iter()
            .rev()
            .find(|r| r.token == token)
            .unwrap_or_else(|| panic!("the webhook reviewed {token}"))
            .outcome
    };

    let good = token_of(&rotator, CLUSTER, now);
    let r = as_token(&good).get("/api/v1/nodes");
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(
        review_of(&good),
        Ok((rotator.user.clone(), vec!["nodecycle-rotator".to_string()]))
    );

    let other_cluster = token_of(&rotator, "staging", now);
    let expired = token_of(&rotator, CLUSTER, now - Duration::from_secs(16 * 60));
    let not_sts = {
        let url = nodecycle::kube::presigned_url(&rotator.credentials, REGION, CLUSTER, now)
            .unwrap()
            .replace("sts.us-east-2.amazonaws.com", "sts.us-east-2.example.com");
        format!(
            "k8s-aws-v1.{}",
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, url)
        )
    };
    let no_entry = nodecycle::kube::token(&unmapped, REGION, CLUSTER, now)
        .unwrap()
        .expose()
        .to_string();
    let static_keys = nodecycle::kube::token(
        &Credentials::new(
            nodecycle_tests::ACCESS_KEY_ID,
            nodecycle_tests::SECRET_ACCESS_KEY,
            None,
            None,
            "static",
        ),
        REGION,
        CLUSTER,
        now,
    )
    .unwrap()
    .expose()
    .to_string();
    for (token, why) in [
        (&other_cluster, "SignatureDoesNotMatch"),
        (&expired, "token expired"),
        (&not_sts, "unexpected STS host"),
        (
            &no_entry,
            "no access entry for arn:aws:iam::123456789012:role/unmapped",
        ),
        (&static_keys, "no access entry for arn:aws:"),
    ] {
        let r = as_token(token).get("/api/v1/nodes");
        assert_eq!(r.status, 401, "{why}: {}", r.raw);
        let outcome = review_of(token);
        assert!(
            outcome.as_ref().is_err_and(|e| e.contains(why)),
            "refused because {why}: {outcome:?}"
        );
    }
}

/// The rotator's ClusterRole of deploy/rbac.yaml without its `pods/eviction` rule (a modified
/// copy, applied in this test only): nodecycle still finds, cordons and taints the node, but
/// every eviction gets 403 Forbidden from RBAC, which its progress shows with the API server's
/// message; it deletes nothing, evicts nothing, and reports the drain not done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_eviction_rule_the_rotator_cannot_drain() {
    let (_cloud, cp, rotator) = cluster_with_rotator().await;
    let admin = cp.admin();
    let node = KwokNode::new("i-0a1b2c3d4e5f60004", "us-east-2a");
    cp.add_node(&node);
    cp.wait_node_ready(&node.name);
    create_namespace(&admin);
    create_deployment(&admin, "web", 2);
    let before = cp.wait_for("2 web pods Ready", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 2 && pods.iter().all(|p| p.3)).then_some(pods)
    });

    let mut role = rbac_objects()
        .into_iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "nodecycle-rotator")
        .expect("deploy/rbac.yaml has the rotator's ClusterRole");
    let rules = role["rules"].as_array_mut().unwrap();
    let n = rules.len();
    rules.retain(|r| {
        !r["resources"]
            .as_array()
            .unwrap()
            .contains(&json!("pods/eviction"))
    });
    assert_eq!(rules.len(), n - 1, "one rule granted pods/eviction: {role}");
    cp.apply(&role);
    wait_rbac(&cp, &rotator, "create", "pods/eviction", false);

    let (report, lines) = drain(&cp, &rotator, &node.instance_id, Duration::from_secs(8)).await;
    let report = report.expect("the drain reports");
    assert!(!report.done, "{report:?}");
    assert_eq!(report.evicted, 0, "{report:?}");
    assert_eq!(report.deleted, 0, "{report:?}");
    let refused = format!(
        "failed with HTTP 403: pods \"{}\" is forbidden: User \"{}\" cannot create resource \
         \"pods/eviction\" in API group \"\" in the namespace \"{NS}\"",
        before[0].0, rotator.user
    );
    assert!(
        lines.iter().any(|l| l.contains(&refused)),
        "the progress shows RBAC's refusal ({refused}): {lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&refused) && l.contains("apply deploy/rbac.yaml")),
        "the refusal says what to fix: {lines:#?}"
    );

    // The API server refused each eviction with 403; the cordon went through.
    let audit = cp.audit();
    for (name, ..) in &before {
        let codes: Vec<u16> = audit
            .iter()
            .filter(|e| e.user == rotator.user && e.subresource == "eviction" && e.name == *name)
            .map(|e| e.code)
            .collect();
        assert!(
            !codes.is_empty() && codes.iter().all(|c| *c == 403),
            "{name}: every eviction refused with 403: {codes:?}"
        );
    }
    assert!(
        !audit
            .iter()
            .any(|e| e.user == rotator.user && e.resource == "pods" && e.verb == "delete"),
        "nodecycle deleted no pod"
    );
    let n = admin.get(&format!("/api/v1/nodes/{}", node.name)).body;
    assert_eq!(n["spec"]["unschedulable"], true, "{n}");
    let after = web_pods(&admin);
    assert_eq!(
        after.iter().map(|p| &p.2).collect::<Vec<_>>(),
        before.iter().map(|p| &p.2).collect::<Vec<_>>(),
        "the same pods, still there: {after:?}"
    );
}

/// deploy/rbac.yaml as RBAC enforces it: every verb on every resource a ClusterRole grants is
/// allowed for the group of the same name (a SubjectAccessReview each), the Role lets every
/// function's group write Events in `default`; and the ops function, connecting with its own
/// EKS token, may list pods but is refused (403) eviction and deletion of a pod and deletion
/// of a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_group_gets_its_rules_and_ops_is_refused_eviction_and_deletion() {
    let (cloud, cp, _rotator) = cluster_with_rotator().await;
    let ops = function(&cloud, &cp, "nodecycle-ops", "nodecycle-ops").await;
    let objects = rbac_objects();
    let mut checked = 0;
    for role in objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
    {
        let name = role["metadata"]["name"].as_str().unwrap();
        let namespace = role["metadata"]["namespace"].as_str();
        let groups: Vec<&str> = if role["kind"] == "ClusterRole" {
            vec![name]
        } else {
            vec![
                "nodecycle-rotator",
                "nodecycle-interruption",
                "nodecycle-ops",
            ]
        };
        for rule in role["rules"].as_array().unwrap() {
            assert_eq!(rule["apiGroups"], json!([""]), "{name}: core group only");
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    let (resource, verb) = (resource.as_str().unwrap(), verb.as_str().unwrap());
                    for group in &groups {
                        let user = format!("someone-in-{group}");
                        let (allowed, reason) =
                            cp.wait_for(&format!("{group} allowed to {verb} {resource}"), |p| {
                                let answer = p.can(&user, &[group], verb, resource, namespace);
                                answer.0.then_some(answer)
                            });
                        assert!(allowed, "{group} {verb} {resource}: {reason}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked >= 20, "{checked} grants checked");

    // ops: what its ClusterRole does not grant, RBAC refuses.
    let ops_groups = [ops.group.as_str()];
    for (verb, resource) in [
        ("create", "pods/eviction"),
        ("delete", "pods"),
        ("delete", "nodes"),
    ] {
        let (allowed, _) = cp.can(&ops.user, &ops_groups, verb, resource, Some(NS));
        assert!(!allowed, "ops may not {verb} {resource}");
    }

    // And with its own token, against a real pod.
    let admin = cp.admin();
    create_namespace(&admin);
    create(
        &admin,
        &format!("/api/v1/namespaces/{NS}/pods"),
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": "kept" },
            "spec": { "containers": [{ "name": "c", "image": "registry.k8s.io/pause:3.10" }] },
        }),
    );
    let client = admin.with_token(Some(token_of(&ops, CLUSTER, std::time::SystemTime::now())));
    let listed = client.get(&format!("/api/v1/namespaces/{NS}/pods"));
    assert_eq!(listed.status, 200, "ops lists pods: {}", listed.raw);
    let evicted = client.post(
        &format!("/api/v1/namespaces/{NS}/pods/kept/eviction"),
        &json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": { "name": "kept", "namespace": NS },
        }),
    );
    assert_eq!(evicted.status, 403, "{}", evicted.raw);
    assert_eq!(evicted.body["reason"], "Forbidden", "{}", evicted.raw);
    let deleted = client.delete(&format!("/api/v1/namespaces/{NS}/pods/kept"), None);
    assert_eq!(deleted.status, 403, "{}", deleted.raw);
    assert!(
        deleted.body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!(
                "User \"{}\" cannot delete resource \"pods\"",
                ops.user
            ))),
        "{}",
        deleted.raw
    );
    let kept = admin.get(&format!("/api/v1/namespaces/{NS}/pods/kept"));
    assert_eq!(kept.status, 200, "the pod is still there: {}", kept.raw);
    assert!(
        kept.body["metadata"]["deletionTimestamp"].is_null(),
        "{}",
        kept.raw
    );
}

/// nodecycle's errors when its credentials do not fit the cluster: a role whose access entry
/// maps it to a group deploy/rbac.yaml does not bind gets 403 on its first call (finding the
/// node) and a drain error naming RBAC and the groups; a role without an access entry gets 401
/// and an error naming the access entry. Neither touches the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_fail_the_drain_with_a_clear_error() {
    let (cloud, cp, _rotator) = cluster_with_rotator().await;
    let node = KwokNode::new("i-0a1b2c3d4e5f60005", "us-east-2b");
    cp.add_node(&node);
    let unbound = function(&cloud, &cp, "nodecycle-unbound", "nodecycle").await;
    let (result, _) = drain(&cp, &unbound, &node.instance_id, Duration::from_secs(5)).await;
    let error = result.expect_err("a drain without RBAC fails").to_string();
    eprintln!("without RBAC: {error}");
    assert!(
        error.contains("403")
            && error.contains("is forbidden")
            && error.contains("RBAC: apply deploy/rbac.yaml")
            && error.contains("`nodecycle-rotator`"),
        "{error}"
    );

    let unmapped = function(&cloud, &cp, "nodecycle-unmapped", "nodecycle-rotator").await;
    let entries_before = cp.token_reviews().len();
    cp.remove_access_entry(&format!(
        "arn:aws:iam::{}:role/nodecycle-unmapped",
        nodecycle_tests::ACCOUNT_ID
    ));
    let (result, _) = drain(&cp, &unmapped, &node.instance_id, Duration::from_secs(5)).await;
    let error = result
        .expect_err("a drain without an access entry fails")
        .to_string();
    eprintln!("without an access entry: {error}");
    assert!(
        error.contains("401") && error.contains("EKS access entry"),
        "{error}"
    );
    assert!(
        cp.token_reviews()[entries_before..].iter().any(|r| r
            .outcome
            .as_ref()
            .is_err_and(|e| e.contains("no access entry for"))),
        "the webhook refused the token for want of an access entry"
    );

    let n = cp.admin().get(&format!("/api/v1/nodes/{}", node.name)).body;
    assert!(n["spec"]["unschedulable"].is_null(), "not cordoned: {n}");
}

/// The self-managed group of the rollout tests and its pool's policy parameter.
const GROUP: &str = "prod-general";

/// Bound on the rotator passes of a rollout: a hang guard (the rollout of 6 nodes two at a
/// time takes 19-21 passes here), not a performance assertion.
const MAX_PASSES: i64 = 40;

/// The number of pods of `app` Ready and not being deleted; None when the API server does not
/// answer (e.g. the control plane is gone because the test failed).
fn ready_pods(client: &KubeClient, app: &str) -> Option<usize> {
    let path = format!("/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{app}");
    let r = client.try_request("GET", &path, None, None).ok()?;
    let pods = r.body["items"].as_array()?;
    Some(
        pods.iter()
            .filter(|p| {
                p["metadata"]["deletionTimestamp"].is_null()
                    && p["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count(),
    )
}

/// Counts [`ready_pods`] of `app` over and over in a thread (a sample every few hundred ms on
/// 2 busy cores) until the returned flag is set or the API server stops answering; the
/// thread's result is every count.
fn sample_ready_pods(
    client: &KubeClient,
    app: &'static str,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<Vec<usize>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, client) = (stop.clone(), client.clone());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let Some(ready) = ready_pods(&client, app) else {
                    break;
                };
                seen.push(ready);
                std::thread::sleep(Duration::from_millis(50));
            }
            seen
        })
    };
    (stop, sampler)
}

/// Whether a PDB status (as [`ControlPlane::pdb_statuses`] gives it) counts at least
/// `desiredHealthy` healthy pods, `desiredHealthy` being `desired`.
fn within_budget(status: &Value, desired: i64) -> bool {
    status["desiredHealthy"] == desired
        && status["currentHealthy"]
            .as_i64()
            .is_some_and(|healthy| healthy >= desired)
}

/// A 6-node self-managed pool on the real control plane, ready for a rollout: the group
/// [`GROUP`] of 6 instances of `golden-1` (max 10) whose KWOK nodes follow it
/// ([`ControlPlane::sync_group`]), `golden-1` the pool's desired AMI (an ami-watcher pass an
/// hour before: what a rollback goes back to), then `golden-2` published, the pool's policy (images `golden-*`
/// of the account, budget 2 nodes, no `terminationGracePeriod`: a drain blocked by a PDB
/// waits, it is never forced), and the real ami-watcher and rotator handlers over the fake
/// cloud, the rotator reaching the API server with the rotator role's own EKS token (endpoint
/// and CA as overrides, as `NODECYCLE_KUBE_*` give them).
struct RealPool {
    cloud: FakeCloud,
    cp: ControlPlane,
    rotator: Function,
    adapters: Adapters,
    table: Arc<nodecycle::aws::dynamodb::Table>,
    watcher: nodecycle::handlers::ami_watcher::AmiWatcher,
    handler: nodecycle::handlers::rotator::RotatorHandler,
    old: String,
    new: String,
}

async fn real_pool() -> RealPool {
    real_pool_with("").await
}

/// [`real_pool`] with `extra` policy lines (top-level YAML, each ending in a newline).
async fn real_pool_with(extra: &str) -> RealPool {
    let (cloud, cp, rotator) = cluster_with_rotator().await;
    cloud.create_cluster(CLUSTER, "1.36");
    let old = cloud.register_image(
        ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let adapters = Adapters::new(&cloud).await;
    adapters
        .create_group(GROUP, &old, "m5.large", 6, 10, None)
        .await;
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!(
            "cluster: {CLUSTER}\nname: general\nnodeGroup: {{ autoScalingGroup: {GROUP} }}\n\
             architecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\n\
             disruption:\n  budgets:\n    - nodes: \"2\"\n{extra}"
        ),
    );
    let table = adapters.table("nodecycle").await;
    let policies = adapters.policies();
    let watcher = adapters.watcher(policies.clone(), table.clone());
    let mut handler = adapters.rotator(&cloud, policies, table.clone()).await;
    handler.ports.kube = Arc::new(
        nodecycle::kube::EksConnector::new(rotator.sdk.clone()).with_overrides(KubeOverrides {
            endpoint: Some(cp.endpoint.clone()),
            ca_file: Some(cp.ca_file.clone()),
            insecure: false,
        }),
    );
    let joined = cp.sync_group(&cloud, GROUP);
    assert_eq!(joined.added.len(), 6, "{joined:?}");
    // The pool's desired AMI is the one it runs (what a rollback goes back to), before the
    // new one is published.
    let report = watcher
        .handle(&json!({}), chrono::Utc::now() - chrono::Duration::hours(1))
        .await
        .unwrap();
    assert_eq!(report["pools"][0]["desired"], old.as_str(), "{report}");
    let new = cloud.register_image(
        ImageFixture::new("golden-2")
            .owner("self")
            .created("2024-06-01T00:00:00Z"),
    );
    RealPool {
        cloud,
        cp,
        rotator,
        adapters,
        table,
        watcher,
        handler,
        old,
        new,
    }
}

/// What one rotator pass of [`RealPool::passes_until`] left: its number (1 for the first), its
/// report, the pool's rotations and the images of the group's instances after it.
struct PassOutcome {
    pass: i64,
    report: Value,
    rotations: Vec<nodecycle::rotation::Rotation>,
    images: Vec<String>,
}

impl RealPool {
    /// The group's desired capacity.
    async fn desired_capacity(&self) -> Option<i32> {
        self.adapters
            .clients
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(GROUP)
            .send()
            .await
            .unwrap()
            .auto_scaling_groups()[0]
            .desired_capacity()
    }

    /// The ami-watcher's pass at `at`: it resolves the pool's terms to the new AMI (asserted).
    async fn publish(&self, at: chrono::DateTime<chrono::Utc>) {
        let report = self.watcher.handle(&json!({}), at).await.unwrap();
        assert_eq!(report["pools"][0]["desired"], self.new.as_str(), "{report}");
    }

    /// Rotator passes ([`Self::pass`]) a simulated minute apart, the first at `t0`, until
    /// `done` holds of what a pass left (it may assert as well), at most [`MAX_PASSES`];
    /// returns what each pass left. Panics, naming `what`, when `done` never held.
    async fn passes_until(
        &self,
        t0: chrono::DateTime<chrono::Utc>,
        what: &str,
        mut done: impl FnMut(&PassOutcome) -> bool,
    ) -> Vec<PassOutcome> {
        let mut outcomes = Vec::new();
        for pass in 0..MAX_PASSES {
            let report = self.pass(t0 + chrono::Duration::minutes(pass)).await;
            let outcome = PassOutcome {
                pass: pass + 1,
                report,
                rotations: self.rotations().await,
                images: self.adapters.group_images(GROUP).await,
            };
            let finished = done(&outcome);
            outcomes.push(outcome);
            if finished {
                return outcomes;
            }
        }
        let last = outcomes
            .last()
            .map(|o| (&o.report, &o.images, &o.rotations));
        panic!("{what}: not within {MAX_PASSES} passes; the last left {last:#?}");
    }

    /// Whether a pass left the rollout done: the group's 6 instances on the new AMI, no
    /// rotation in flight.
    fn rolled_out(&self, o: &PassOutcome) -> bool {
        o.images.len() == 6
            && o.images.iter().all(|i| *i == self.new)
            && o.rotations.iter().all(|r| !r.in_flight())
    }

    /// The pool's state record.
    async fn record(&self) -> nodecycle::state::PoolRecord {
        nodecycle::state::Repository::new(self.table.clone())
            .pool("prod/general")
            .await
            .unwrap()
            .expect("the pool has a state record")
    }

    /// The quarantine entry of the new AMI's release (a self-published image is its own
    /// release), as the state table holds it.
    async fn new_quarantined(&self) -> Option<nodecycle::promotion::Quarantine> {
        let release =
            nodecycle::promotion::Target::Release(nodecycle::promotion::Release(self.new.clone()));
        nodecycle::state::Repository::new(self.table.clone())
            .quarantine()
            .await
            .unwrap()
            .0
            .into_iter()
            .find(|q| q.target == release)
    }

    /// The rotator pass after those of `passes` (a simulated minute after the last, from
    /// `t0`): it must quarantine the new AMI's release, by pool `prod/general`'s observation
    /// (panics naming `after` otherwise); the entry and the pass's report.
    async fn next_pass_quarantines(
        &self,
        t0: chrono::DateTime<chrono::Utc>,
        passes: &[PassOutcome],
        after: &str,
    ) -> (nodecycle::promotion::Quarantine, Value) {
        let at = t0 + chrono::Duration::minutes(i64::try_from(passes.len()).unwrap());
        let report = self.pass(at).await;
        let q = self
            .new_quarantined()
            .await
            .unwrap_or_else(|| panic!("quarantined in the first pass after {after}: {report}"));
        assert_eq!(q.cause.pool(), Some("prod/general"), "{q:?}");
        (q, report)
    }

    /// One rotator pass at `now` (a deadline two minutes away, as the Lambda's), then the
    /// nodes brought in line with the group. Asserts that no instance left the group (by
    /// nodecycle or anyone else since the last sync) while a workload pod not being deleted was
    /// bound to its node.
    async fn pass(&self, now: chrono::DateTime<chrono::Utc>) -> Value {
        let report = self
            .handler
            .handle(
                &json!({}),
                Invocation::at(now, std::time::Instant::now() + Duration::from_secs(120)),
            )
            .await
            .unwrap();
        self.assert_no_undrained_termination(&report);
        self.cp.sync_group(&self.cloud, GROUP);
        report
    }

    /// The nodes of instances no longer in service in the group hold no workload pod that is
    /// not being deleted (the real control plane's counterpart of the fake cloud's
    /// `scaling_records` pods).
    fn assert_no_undrained_termination(&self, report: &Value) {
        let listed = self
            .cloud
            .control("group_instances", json!({ "group": GROUP }));
        let in_service: BTreeSet<&str> = listed["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["lifecycleState"] == "InService")
            .filter_map(|i| i["id"].as_str())
            .collect();
        let admin = self.cp.admin();
        for (name, instance, ..) in self.nodes() {
            if in_service.contains(instance.as_str()) {
                continue;
            }
            let live: Vec<String> = nodecycle_tests::workload_pods_on(&admin, &name)
                .iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .map(|p| {
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect();
            assert!(
                live.is_empty(),
                "instance {instance} left the group with workload pods on node {name}: \
                 {live:?}\n{report}"
            );
        }
    }

    async fn rotations(&self) -> Vec<nodecycle::rotation::Rotation> {
        crate::support::rotations_of(&self.table, "prod/general").await
    }

    /// The nodes: (name, instance of its providerID, AMI annotation, cordoned or tainted by
    /// nodecycle).
    fn nodes(&self) -> Vec<(String, String, String, bool)> {
        let r = self.cp.admin().get("/api/v1/nodes");
        assert_eq!(r.status, 200, "{}", r.raw);
        r.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                let marked = n["spec"]["unschedulable"] == true
                    || n["spec"]["taints"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|t| t["key"] == nodecycle::kube::DISRUPTED_TAINT_KEY);
                (
                    s(&n["metadata"]["name"]),
                    s(&n["spec"]["providerID"])
                        .rsplit('/')
                        .next()
                        .unwrap()
                        .to_string(),
                    s(&n["metadata"]["annotations"][nodecycle_tests::IMAGE_ANNOTATION]),
                    marked,
                )
            })
            .collect()
    }
}

/// The rollout of a 6-node self-managed group to a new AMI with a budget of 2 nodes, on the
/// real control plane, driven by the real rotator pass as the stand-in rollout
/// (`rotation::a_new_ami_rolls_through_the_pool_within_budget`) drives it: a Deployment of 12
/// pods spread by the scheduler over the nodes, under a PDB with `maxUnavailable: 1`. The
/// nodes follow the group (a node joins when a replacement is launched and leaves when its
/// instance is terminated). At every pass, every PDB status the disruption controller wrote
/// since the last pass (from the audit log: all of them, not a sample) counts at least
/// `desiredHealthy` (11) healthy pods, and at most 2 rotations are in flight; the pods, listed
/// over and over in between, never show more than one pod not Ready. At the end, within
/// [`MAX_PASSES`]: every instance runs the new AMI, the group is back at 6 instances and
/// desired capacity, every rotation is Done with a replacement, the 6 nodes are those of the
/// instances, none cordoned or tainted by nodecycle, the 12 pods run Ready on them, and
/// nodecycle moved every pod by eviction, deleting none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_ami_rolls_through_six_nodes_within_budget_and_pdb() {
    let p = real_pool().await;
    let admin = p.cp.admin();
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_deployment(&admin, "web", 12);
    let before =
        p.cp.wait_for("12 web pods Ready, 2 a node, the PDB computed", |_| {
            let pods = web_pods(&admin);
            let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
            for pod in &pods {
                *per_node.entry(pod.1.as_str()).or_default() += 1;
            }
            (pods.len() == 12
                && pods.iter().all(|p| p.3)
                && per_node.len() == 6
                && pdb_settled(&admin, "web", Some(1))
                && pdb(&admin, "web")["status"]["currentHealthy"] == 12)
                .then_some(pods)
        });

    let t0 = chrono::Utc::now();
    p.publish(t0).await;

    // From here on, every PDB status the disruption controller writes must keep 11 healthy.
    let before_rollout = p.cp.pdb_statuses(NS, "web").len();
    let mut statuses_checked = before_rollout;
    let (stop, sampler) = sample_ready_pods(&admin, "web");
    let mut max_in_flight = 0;
    let outcomes = p
        .passes_until(t0, "the rollout", |o| {
            let statuses = p.cp.pdb_statuses(NS, "web");
            let written = &statuses[statuses_checked..];
            assert!(
                written.iter().all(|s| within_budget(s, 11)),
                "pass {}: the disruption controller reported fewer than 11 healthy web pods: \
                 {written:#?}\n{}",
                o.pass,
                o.report
            );
            statuses_checked = statuses.len();
            let in_flight = o.rotations.iter().filter(|r| r.in_flight()).count();
            max_in_flight = max_in_flight.max(in_flight);
            assert!(
                in_flight <= 2,
                "pass {}: budget 2 exceeded: {:?}",
                o.pass,
                o.rotations
            );
            p.rolled_out(o)
        })
        .await;
    let passes = outcomes.len();
    stop.store(true, Ordering::SeqCst);
    let ready = sampler.join().expect("Ready pods sampler");
    let statuses = p.cp.pdb_statuses(NS, "web");
    let during = &statuses[before_rollout..];
    eprintln!(
        "rollout: {passes} passes; {} PDB statuses written, fewest healthy {:?}; {} samples of \
         Ready pods, fewest {:?}",
        during.len(),
        during
            .iter()
            .filter_map(|s| s["currentHealthy"].as_i64())
            .min(),
        ready.len(),
        ready.iter().min()
    );
    assert!(
        ready.len() > 5 && ready.iter().all(|n| *n >= 11),
        "more than one web pod was not Ready at once: {ready:?}"
    );
    assert_eq!(max_in_flight, 2, "the budget was used");

    // Every instance on the new AMI, the group at its size, every rotation done.
    let instances = p.adapters.group_instances(GROUP).await;
    assert_eq!(instances.len(), 6, "group back at its size: {instances:?}");
    assert!(
        instances.iter().all(|(_, image)| *image == p.new),
        "every instance on the new AMI (old {}): {instances:?}",
        p.old
    );
    let desired = p.desired_capacity().await;
    assert_eq!(desired, Some(6));
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 6, "{rotations:?}");
    assert!(
        rotations
            .iter()
            .all(|r| r.step == nodecycle::rotation::Step::Done && r.replacement.is_some()),
        "{rotations:?}"
    );

    // The nodes are the group's instances, on the new AMI, none left cordoned.
    let nodes = p.nodes();
    let mut node_instances: Vec<&str> = nodes.iter().map(|n| n.1.as_str()).collect();
    node_instances.sort_unstable();
    let group_instances: Vec<&str> = instances.iter().map(|i| i.0.as_str()).collect();
    assert_eq!(node_instances, group_instances, "{nodes:?}");
    assert!(
        nodes.iter().all(|n| n.2 == p.new && !n.3),
        "every node on the new AMI, none cordoned or tainted: {nodes:?}"
    );

    // The pods run on the new nodes; nodecycle evicted every one it moved and deleted none.
    let after = p.cp.wait_for("12 web pods Ready on the new nodes", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 12
            && pods
                .iter()
                .all(|pod| pod.3 && nodes.iter().any(|n| n.0 == pod.1)))
        .then_some(pods)
    });
    let audit = p.cp.audit();
    let by_nodecycle: Vec<_> = audit
        .iter()
        .filter(|e| e.user == p.rotator.user && e.resource == "pods")
        .collect();
    for (name, ..) in &before {
        assert!(
            by_nodecycle
                .iter()
                .any(|e| e.subresource == "eviction" && e.name == *name && e.code == 201),
            "{name} was evicted: {by_nodecycle:#?}"
        );
        assert!(!after.iter().any(|a| a.0 == *name), "{name} was replaced");
    }
    assert!(
        !by_nodecycle
            .iter()
            .any(|e| e.verb == "delete" && e.subresource.is_empty()),
        "nodecycle deleted no pod: {by_nodecycle:#?}"
    );
    let mut answers: BTreeMap<u16, usize> = BTreeMap::new();
    for e in by_nodecycle.iter().filter(|e| e.subresource == "eviction") {
        *answers.entry(e.code).or_default() += 1;
    }
    eprintln!("eviction answers by HTTP status: {answers:?}");
    // Pods move once: the real scheduler avoided the old nodes the rollout had tainted
    // PreferNoSchedule, so each of the 12 pods was evicted once (at most 1.05 moves a pod).
    let moves = answers.get(&201).copied().unwrap_or(0);
    eprintln!(
        "pod moves: {moves} for {} pods ({:.3} a pod)",
        before.len(),
        moves as f64 / before.len() as f64
    );
    assert!(
        moves as f64 <= 1.05 * before.len() as f64,
        "{moves} evictions for {} pods: some moved twice",
        before.len()
    );
}

/// Terminate-first on the real API (issue 46): `rollout.strategy: terminateFirst` on the 6-node
/// group with 12 `web` pods under a PDB `maxUnavailable: 1`. No surge ever: the desired capacity
/// stays 6; each node is drained through the real Eviction API (the disruption controller's PDB
/// statuses keep 11 healthy), terminated with a relaunch, and its rotation ends only with the
/// relaunched instance Ready on the new AMI (recorded as its replacement); the scheduler puts
/// the pods back; every instance ends on the new AMI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_first_rolls_the_real_nodes_without_a_surge_within_the_pdb() {
    let p = real_pool_with("rollout:\n  strategy: terminateFirst\n").await;
    let admin = p.cp.admin();
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_deployment(&admin, "web", 12);
    p.cp.wait_for("12 web pods Ready, the PDB computed", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 12 && pods.iter().all(|p| p.3) && pdb_settled(&admin, "web", Some(1)))
            .then_some(())
    });
    let t0 = chrono::Utc::now();
    p.publish(t0).await;
    let mut statuses_checked = p.cp.pdb_statuses(NS, "web").len();
    let outcomes = p
        .passes_until(t0, "the terminate-first rollout", |o| {
            let statuses = p.cp.pdb_statuses(NS, "web");
            let written = &statuses[statuses_checked..];
            assert!(
                written.iter().all(|s| within_budget(s, 11)),
                "pass {}: fewer than 11 healthy web pods: {written:#?}",
                o.pass
            );
            statuses_checked = statuses.len();
            assert!(
                o.rotations.iter().all(|r| r.surge.is_none()),
                "pass {}: terminate first never surges: {:?}",
                o.pass,
                o.rotations
            );
            p.rolled_out(o)
        })
        .await;
    let desired = p.desired_capacity().await;
    assert_eq!(desired, Some(6), "the group never grew");
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 6, "{rotations:?}");
    assert!(
        rotations
            .iter()
            .all(|r| r.step == nodecycle::rotation::Step::Done && r.replacement.is_some()),
        "every rotation ended with its relaunch confirmed: {rotations:?}"
    );
    eprintln!("terminate-first rollout: {} passes", outcomes.len());
    p.cp.wait_for("12 web pods Ready again", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 12 && pods.iter().all(|p| p.3)).then_some(())
    });
}

/// Delay past a node's creation at which the #2681 test stalls the nodes of the new AMI
/// ([`ControlPlane::stall_nodes_of_image`], set once the rollout is done): every node of the
/// release was Ready, and carried the rollout, first; one younger than this stalls when it
/// reaches it.
const STALL_AFTER: Duration = Duration::from_secs(5);

/// The #2681 pattern on the real API: the 6-node self-managed group rolls onto the new AMI
/// with the real ami-watcher and rotator (no pass indicts it), then the kubelets of the
/// release's nodes stop posting status ([`STALL_AFTER`] past each node's creation: the API
/// server reports their Ready condition `Unknown`, reason `NodeStatusUnknown`). The first
/// rotator pass after the API server reports all 6 stalled quarantines the release with cause
/// `Unhealthy` in pool `prod/general`: the evidence names the 6 stalled instances (the
/// group's), each failing `Ready`, 6 of 6 nodes; and the pool's desired AMI is back to the old
/// one in the same pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_a_new_ami_that_stall_after_the_rollout_quarantine_it_unhealthy() {
    let p = real_pool().await;
    let t0 = chrono::Utc::now();
    p.publish(t0).await;
    let outcomes = p.passes_until(t0, "the rollout", |o| p.rolled_out(o)).await;
    assert!(p.new_quarantined().await.is_none(), "healthy, not indicted");
    assert_eq!(p.record().await.desired.map(|a| a.id), Some(p.new.clone()));
    let stalled: BTreeSet<String> = p
        .nodes()
        .into_iter()
        .filter(|n| n.2 == p.new)
        .map(|n| n.1)
        .collect();
    let group: BTreeSet<String> = p
        .adapters
        .group_instances(GROUP)
        .await
        .into_iter()
        .map(|i| i.0)
        .collect();
    assert_eq!(stalled, group, "the group's 6 instances have their nodes");

    p.cp.stall_nodes_of_image(&p.new, STALL_AFTER);
    let admin = p.cp.admin();
    p.cp.wait_for("the 6 nodes of the new AMI Ready Unknown", |_| {
        let listed = admin.get("/api/v1/nodes").body;
        let unknown = listed["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| {
                n["metadata"]["annotations"][nodecycle_tests::IMAGE_ANNOTATION] == p.new.as_str()
            })
            .filter(|n| {
                let ready = condition(n, "Ready");
                ready["status"] == "Unknown" && ready["reason"] == "NodeStatusUnknown"
            })
            .count();
        (unknown == 6).then_some(())
    });

    let (q, report) = p.next_pass_quarantines(t0, &outcomes, "the stall").await;
    let nodecycle::promotion::Cause::Unhealthy { evidence, .. } = &q.cause else {
        panic!("cause Unhealthy: {q:?}");
    };
    let named: BTreeSet<String> = evidence
        .nodes
        .iter()
        .map(|n| n.instance_id.clone())
        .collect();
    assert_eq!(
        named, stalled,
        "the stalled instances are the evidence: {q:?}"
    );
    assert!(
        evidence.nodes.iter().all(|n| n.failing == ["Ready"]),
        "{evidence:?}"
    );
    assert_eq!(
        (evidence.new.count, evidence.new.of),
        (6, 6),
        "{evidence:?}"
    );
    assert_eq!(evidence.release, p.new);
    assert_eq!(
        p.record().await.desired.map(|a| a.id),
        Some(p.old.clone()),
        "the pool's desired AMI is back to the old one: {report}"
    );
}

/// Pods of the #2682 test: on the nodes of the new AMI, and on those of the old one for the
/// baseline; 20 each, the fewest pod starts the judge compares (`health.minSamples`).
const PODS_EACH: usize = 20;

/// The #2682 pattern on the real API: containers cannot be created on the nodes of the new AMI
/// ([`ControlPlane::fail_containers_on_image`]). The real rotator rolls the 6-node group until
/// 2 nodes of the new AMI run, next to old ones; then Deployment `broken` puts 20 pods on the
/// new nodes (node affinity), which the API server reports `CreateContainerError`, and
/// Deployment `baseline` 20 pods, Ready, on old nodes not cordoned. The next rotator pass
/// quarantines the release with cause `WorkloadFailures`, reason `CreateContainerError`, 20
/// failures of 20 starts against 0 of 20 on the old release, and the pool's desired AMI is
/// back to the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_failing_on_the_nodes_of_a_new_ami_quarantine_it_for_workload_failures() {
    let p = real_pool().await;
    p.cp.fail_containers_on_image(&p.new);
    let t0 = chrono::Utc::now();
    p.publish(t0).await;
    let outcomes = p
        .passes_until(t0, "2 nodes of the new AMI", |_| {
            p.nodes().iter().filter(|n| n.2 == p.new).count() >= 2
        })
        .await;
    assert!(
        p.new_quarantined().await.is_none(),
        "no pods, nothing against it"
    );
    let nodes = p.nodes();
    let names = |image: &str| -> Vec<String> {
        nodes
            .iter()
            .filter(|n| n.2 == image && !n.3)
            .map(|n| n.0.clone())
            .collect()
    };
    let (new_nodes, old_nodes) = (names(&p.new), names(&p.old));
    assert!(!old_nodes.is_empty(), "old nodes left: {nodes:?}");

    let admin = p.cp.admin();
    create_namespace(&admin);
    create_deployment_on(
        &admin,
        "broken",
        u32::try_from(PODS_EACH).unwrap(),
        &new_nodes,
    );
    create_deployment_on(
        &admin,
        "baseline",
        u32::try_from(PODS_EACH).unwrap(),
        &old_nodes,
    );
    let list = |app: &str| {
        admin
            .get(&format!(
                "/api/v1/namespaces/{NS}/pods?labelSelector=app%3D{app}"
            ))
            .body["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let on = |pod: &Value, nodes: &[String]| {
        pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| nodes.iter().any(|m| m == n))
    };
    p.cp.wait_for(
        "20 broken pods CreateContainerError on the new nodes, 20 baseline pods Ready on old ones",
        |_| {
            let failing = list("broken")
                .iter()
                .filter(|pod| on(pod, &new_nodes))
                .filter(|pod| {
                    pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                        == "CreateContainerError"
                })
                .count();
            let running = list("baseline")
                .iter()
                .filter(|pod| on(pod, &old_nodes) && condition(pod, "Ready")["status"] == "True")
                .count();
            (failing == PODS_EACH && running == PODS_EACH).then_some(())
        },
    );

    let (q, report) = p.next_pass_quarantines(t0, &outcomes, "the failures").await;
    let nodecycle::promotion::Cause::WorkloadFailures { evidence, .. } = &q.cause else {
        panic!("cause WorkloadFailures: {q:?}");
    };
    assert_eq!(
        evidence.reason.as_deref(),
        Some("CreateContainerError"),
        "{evidence:?}"
    );
    let n = u32::try_from(PODS_EACH).unwrap();
    assert_eq!(
        (evidence.new.count, evidence.new.of),
        (n, n),
        "{evidence:?}"
    );
    assert_eq!(
        evidence.old.map(|o| (o.count, o.of)),
        Some((0, n)),
        "{evidence:?}"
    );
    assert_eq!(
        p.record().await.desired.map(|a| a.id),
        Some(p.old.clone()),
        "the pool's desired AMI is back to the old one: {report}"
    );
}

/// Condition `kind` of `object` (a Node or a Pod), or Null.
fn condition(object: &Value, kind: &str) -> Value {
    object["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or(Value::Null)
}

fn timestamp(v: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{v} is not an RFC 3339 time: {e}"))
        .to_utc()
}

/// The release-health stage of a stalled kubelet (`ControlPlane::stall_nodes_of_image`): the
/// node of the stalled AMI is Ready first, then, not before 4 s past its creation, its Ready
/// condition (and the pressure conditions) turns `Unknown` with reason `NodeStatusUnknown`, as
/// the node lifecycle controller writes it, and stays so; the real node lifecycle controller
/// taints it unreachable; the node of another AMI stays Ready and untainted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_kubelet_turns_the_nodes_of_an_image_not_ready() {
    let cp = ControlPlane::start();
    let admin = cp.admin();
    let stall_after = Duration::from_secs(4);
    cp.stall_nodes_of_image("ami-0bad", stall_after);
    let mut stalled = KwokNode::new("i-0a1b2c3d4e5f60001", "us-east-2a");
    let mut healthy = KwokNode::new("i-0a1b2c3d4e5f60002", "us-east-2b");
    stalled.annotations = vec![(nodecycle_tests::IMAGE_ANNOTATION.into(), "ami-0bad".into())];
    healthy.annotations = vec![(nodecycle_tests::IMAGE_ANNOTATION.into(), "ami-0good".into())];
    cp.add_node(&stalled);
    cp.add_node(&healthy);
    let node = |name: &str| admin.get(&format!("/api/v1/nodes/{name}")).body;

    let mut seen_ready = false;
    let unknown = cp.wait_for("the stalled node's Ready condition Unknown", |_| {
        let n = node(&stalled.name);
        let ready = condition(&n, "Ready");
        seen_ready |= ready["status"] == "True";
        (ready["status"] == "Unknown").then_some(n)
    });
    assert!(seen_ready, "the node was Ready before it stalled");
    let created = timestamp(&unknown["metadata"]["creationTimestamp"]);
    let ready = condition(&unknown, "Ready");
    assert_eq!(ready["reason"], "NodeStatusUnknown", "{ready}");
    assert_eq!(
        ready["message"],
        nodecycle_tests::NODE_STATUS_UNKNOWN_MESSAGE,
        "{ready}"
    );
    let stalled_at = timestamp(&ready["lastTransitionTime"]);
    assert!(
        stalled_at >= created + chrono::Duration::seconds(4),
        "stalled at {stalled_at}, created {created}"
    );
    assert!(
        timestamp(&ready["lastHeartbeatTime"]) <= stalled_at,
        "the last heartbeat is before the stall: {ready}"
    );
    for kind in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = condition(&unknown, kind);
        assert_eq!(
            (&c["status"], &c["reason"]),
            (&json!("Unknown"), &json!("NodeStatusUnknown")),
            "{kind}: {c}"
        );
    }

    // The real node lifecycle controller's answer to a Ready condition Unknown.
    let tainted = cp.wait_for("the node lifecycle controller's unreachable taints", |_| {
        let n = node(&stalled.name);
        let effects: Vec<String> = n["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["key"] == "node.kubernetes.io/unreachable")
            .filter_map(|t| t["effect"].as_str().map(str::to_string))
            .collect();
        (effects.contains(&"NoSchedule".to_string()) && effects.contains(&"NoExecute".to_string()))
            .then_some(n)
    });
    // Still stalled, the transition unchanged: KWOK's stages did not make it Ready again.
    assert_eq!(
        condition(&tainted, "Ready"),
        ready,
        "still the same Unknown condition"
    );

    let other = node(&healthy.name);
    let other_ready = condition(&other, "Ready");
    assert_eq!(other_ready["status"], "True", "{other_ready}");
    assert_eq!(other_ready["reason"], "KubeletReady", "{other_ready}");
    assert!(
        other["spec"]["taints"]
            .as_array()
            .is_none_or(|t| t.is_empty()),
        "{}",
        other["spec"]["taints"]
    );
}

/// The release-health stage of a broken image (`ControlPlane::fail_containers_on_image`): of a
/// Deployment spread over a node of the broken AMI and a node of another, the pods on the
/// first report what the kubelet reports for a container it cannot create (phase Pending,
/// `waiting.reason: CreateContainerError`, not Ready) and keep doing so; those on the other run
/// Ready; the Deployment controller counts the first unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_on_the_nodes_of_a_broken_image_report_create_container_error() {
    let cp = ControlPlane::start();
    let admin = cp.admin();
    // Before the nodes exist: add_node puts a node of the AMI under the stage.
    cp.fail_containers_on_image("ami-0bad");
    let mut broken = KwokNode::new("i-0a1b2c3d4e5f60001", "us-east-2a");
    let mut healthy = KwokNode::new("i-0a1b2c3d4e5f60002", "us-east-2b");
    broken.annotations = vec![(nodecycle_tests::IMAGE_ANNOTATION.into(), "ami-0bad".into())];
    healthy.annotations = vec![(nodecycle_tests::IMAGE_ANNOTATION.into(), "ami-0good".into())];
    for node in [&broken, &healthy] {
        cp.add_node(node);
        cp.wait_node_ready(&node.name);
    }
    create_namespace(&admin);
    create_deployment(&admin, "web", 4);

    let list = || {
        admin
            .get(&format!(
                "/api/v1/namespaces/{NS}/pods?labelSelector=app%3Dweb"
            ))
            .body["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let waiting =
        |p: &Value| p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].clone();
    let pods = cp.wait_for(
        "2 pods failing on the broken node, 2 Ready on the other",
        |_| {
            let pods = list();
            let failing = pods
                .iter()
                .filter(|p| p["spec"]["nodeName"] == broken.name.as_str())
                .filter(|p| waiting(p) == "CreateContainerError")
                .count();
            let running = pods
                .iter()
                .filter(|p| p["spec"]["nodeName"] == healthy.name.as_str())
                .filter(|p| condition(p, "Ready")["status"] == "True")
                .count();
            (pods.len() == 4 && failing == 2 && running == 2).then_some(pods)
        },
    );
    for p in pods
        .iter()
        .filter(|p| p["spec"]["nodeName"] == broken.name.as_str())
    {
        let name = &p["metadata"]["name"];
        assert_eq!(p["status"]["phase"], "Pending", "{name}");
        let status = &p["status"]["containerStatuses"][0];
        assert_eq!(status["name"], "web", "{name}: {status}");
        assert_eq!(status["ready"], false, "{name}: {status}");
        assert_eq!(status["restartCount"], 0, "{name}: {status}");
        assert!(status["state"]["running"].is_null(), "{name}: {status}");
        assert_eq!(
            status["state"]["waiting"]["message"],
            nodecycle_tests::CREATE_CONTAINER_ERROR_MESSAGE,
            "{name}: {status}"
        );
        let ready = condition(p, "Ready");
        assert_eq!(
            (&ready["status"], &ready["reason"]),
            (&json!("False"), &json!("ContainersNotReady")),
            "{name}: {ready}"
        );
    }
    for p in pods
        .iter()
        .filter(|p| p["spec"]["nodeName"] == healthy.name.as_str())
    {
        assert_eq!(p["status"]["phase"], "Running", "{}", p["metadata"]["name"]);
        assert!(waiting(p).is_null(), "{}", p["status"]);
    }
    // The Deployment controller reads the same statuses: 2 available, 2 not.
    cp.wait_for(
        "the Deployment to count 2 pods available and 2 unavailable",
        |_| {
            let d = admin
                .get(&format!("/apis/apps/v1/namespaces/{NS}/deployments/web"))
                .body;
            (d["status"]["availableReplicas"] == 2 && d["status"]["unavailableReplicas"] == 2)
                .then_some(())
        },
    );
    // Still failing, unchanged (KWOK's pod-ready stage did not start them).
    let again = list();
    for p in pods
        .iter()
        .filter(|p| p["spec"]["nodeName"] == broken.name.as_str())
    {
        let now = again
            .iter()
            .find(|q| q["metadata"]["uid"] == p["metadata"]["uid"])
            .expect("the failing pod is still there");
        assert_eq!(now["status"], p["status"], "{}", p["metadata"]["name"]);
    }
}

/// The interruption handler's port to Kubernetes for `function`: its EKS token, the real API
/// server as endpoint and CA (as [`real_pool`] connects the rotator).
fn real_kube(cp: &ControlPlane, function: &Function) -> Arc<nodecycle::kube::EksConnector> {
    Arc::new(
        nodecycle::kube::EksConnector::new(function.sdk.clone()).with_overrides(KubeOverrides {
            endpoint: Some(cp.endpoint.clone()),
            ca_file: Some(cp.ca_file.clone()),
            insecure: false,
        }),
    )
}

/// events/spot-interruption-warning.json for `instance`, sent at `sent`.
fn spot_warning(instance: &str, sent: chrono::DateTime<chrono::Utc>) -> Value {
    let path = nodecycle_tests::repo_path("events/spot-interruption-warning.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let sample: Value = serde_json::from_str(&text).unwrap();
    let sample_id = sample["detail"]["instance-id"].as_str().unwrap();
    let mut v: Value = serde_json::from_str(&text.replace(sample_id, instance)).unwrap();
    v["time"] = json!(sent.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    v
}

/// A Spot interruption warning for the instance of a real node, handled by the interruption
/// handler with its own role's EKS token, as the stand-in test
/// `interruption::spot_warning_cordons_evicts_then_deletes_what_pdbs_hold_after_90s` does it:
/// the node holds 2 of the 4 pods of `web` (PDB `maxUnavailable: 1`) and the single pod of `db`
/// (PDB `minAvailable: 1`); the warning was sent 80 s before. The handler cordons and taints the
/// node before its first eviction; evicts both `web` pods (the second once the disruption
/// controller allows it again), deleting neither, and every `web` PDB status keeps
/// `desiredHealthy`; `db`'s eviction is refused (429) until 90 s after the warning, then its
/// pod is deleted, once; the node ends empty and the other node untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_warning_drains_the_real_node_within_the_pdbs_then_deletes_what_they_hold() {
    use nodecycle::handlers::interruption::{InterruptionHandler, InterruptionPorts, Settings};
    let (cloud, cp, _rotator) = cluster_with_rotator().await;
    let interruption = function(
        &cloud,
        &cp,
        "nodecycle-interruption",
        "nodecycle-interruption",
    )
    .await;
    wait_rbac(&cp, &interruption, "create", "pods/eviction", true);
    cloud.create_cluster(CLUSTER, "1.36");
    let image = cloud.register_image(
        ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let adapters = Adapters::new(&cloud).await;
    adapters
        .create_group(GROUP, &image, "m5.large", 2, 4, Some(CLUSTER))
        .await;
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!(
            "cluster: {CLUSTER}\nname: general\nnodeGroup: {{ autoScalingGroup: {GROUP} }}\n\
             amiSelectorTerms:\n  - name: golden-*\n    owner: self\n\
             terminationGracePeriod: 1h\ninterruption: {{ rebalance: ignore }}\n"
        ),
    );
    let joined = cp.sync_group(&cloud, GROUP);
    assert_eq!(joined.added.len(), 2, "{joined:?}");
    let table = adapters.table("nodecycle").await;
    let handler = InterruptionHandler {
        cell: adapters.cell(adapters.policies(), table.clone()),
        ports: InterruptionPorts {
            instances: Arc::new(nodecycle::aws::instances::Ec2Instances::new(
                adapters.clients.ec2.clone(),
            )),
            lifecycle: Arc::new(nodecycle::aws::instances::LifecycleActions::new(
                adapters.clients.autoscaling.clone(),
            )),
            kube: real_kube(&cp, &interruption),
        },
        deployment: Arc::new(nodecycle::aws::identity::OwnAccount::new(
            &cloud.sdk_config().await,
        )),
        settings: Settings {
            poll: Duration::from_millis(200),
            heartbeat_every: Duration::from_millis(400),
            ..Settings::default()
        },
        metrics: Arc::new(nodecycle::metrics::NoMetrics),
    };

    let admin = cp.admin();
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_pdb(&admin, "db", "db", json!({ "minAvailable": 1 }));
    create_deployment(&admin, "web", 4);
    create_deployment(&admin, "db", 1);
    let (web, db) = cp.wait_for("4 web pods and 1 db pod Ready, both PDBs settled", |_| {
        let (web, db) = (pods_of(&admin, "web"), pods_of(&admin, "db"));
        (web.len() == 4
            && web.iter().all(|p| p.3)
            && db.len() == 1
            && db[0].3
            && pdb_settled(&admin, "web", Some(1))
            && pdb_settled(&admin, "db", Some(0)))
        .then_some((web, db))
    });
    // The node of db's pod: the spread put 2 web pods there too.
    let node = db[0].1.clone();
    let leaving: Vec<String> = web
        .iter()
        .filter(|p| p.1 == node)
        .map(|p| p.0.clone())
        .collect();
    assert_eq!(leaving.len(), 2, "the spread: {web:?}");
    let other = joined.added.iter().find(|n| **n != node).unwrap().clone();
    let node_obj = admin.get(&format!("/api/v1/nodes/{node}")).body;
    let instance = node_obj["spec"]["providerID"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();

    let statuses_before = cp.pdb_statuses(NS, "web").len();
    let sent = chrono::Utc::now() - chrono::Duration::seconds(80);
    let out = handler
        .handle(
            &spot_warning(&instance, sent),
            Invocation::at(
                chrono::Utc::now(),
                std::time::Instant::now() + Duration::from_secs(170),
            ),
        )
        .await
        .unwrap();
    assert_eq!(out["kind"], "SpotInterruptionWarning", "{out}");
    assert_eq!(out["outcomes"][0]["action"], "drained", "{out}");
    assert_eq!(out["outcomes"][0]["pool"], "prod/general", "{out}");

    let drained = admin.get(&format!("/api/v1/nodes/{node}")).body;
    assert_eq!(drained["spec"]["unschedulable"], true, "cordoned");
    let taint = drained["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["key"] == nodecycle::kube::DISRUPTED_TAINT_KEY)
        .cloned();
    assert_eq!(
        taint.as_ref().map(|t| &t["value"]),
        Some(&json!("SpotInterruption")),
        "{taint:?}"
    );

    let by_handler: Vec<nodecycle_tests::AuditEvent> = cp
        .audit()
        .into_iter()
        .filter(|e| e.user == interruption.user)
        .collect();
    let cordon = by_handler
        .iter()
        .position(|e| e.resource == "nodes" && e.verb == "patch" && e.name == node)
        .expect("the handler patched the node");
    let first_eviction = by_handler
        .iter()
        .position(|e| e.subresource == "eviction")
        .expect("the handler evicted");
    assert!(cordon < first_eviction, "cordoned before evicting");
    let evicted = |name: &str, code: u16| {
        by_handler
            .iter()
            .filter(|e| e.subresource == "eviction" && e.name == name && e.code == code)
            .count()
    };
    let deleted: Vec<&nodecycle_tests::AuditEvent> = by_handler
        .iter()
        .filter(|e| e.resource == "pods" && e.subresource.is_empty() && e.verb == "delete")
        .collect();
    for pod in &leaving {
        assert_eq!(evicted(pod, 201), 1, "{pod} evicted once");
        assert!(deleted.iter().all(|d| d.name != *pod), "{pod} not deleted");
    }
    let db_pod = &db[0].0;
    assert_eq!(
        evicted(db_pod, 201),
        0,
        "db's PDB never allowed an eviction"
    );
    assert!(
        evicted(db_pod, 429) >= 1,
        "db's eviction refused and retried"
    );
    assert_eq!(deleted.len(), 1, "only db's pod deleted: {deleted:?}");
    assert_eq!(&deleted[0].name, db_pod);
    let deleted_at = chrono::DateTime::parse_from_rfc3339(&deleted[0].received)
        .unwrap()
        .to_utc();
    assert!(
        deleted_at >= sent + chrono::Duration::seconds(89),
        "db's pod deleted at {deleted_at}, warning sent at {sent}: PDB honoured until 90 s"
    );
    assert!(
        by_handler
            .iter()
            .all(|e| e.resource != "nodes" || e.name == node),
        "the other node untouched"
    );
    // What the disruption controller computed for web throughout the drain.
    for status in &cp.pdb_statuses(NS, "web")[statuses_before..] {
        assert!(within_budget(status, 3), "web PDB status {status}");
    }
    // The node ends empty: the replacements run on the other node.
    let left: Vec<_> = [pods_of(&admin, "web"), pods_of(&admin, "db")]
        .concat()
        .into_iter()
        .filter(|p| p.1 == node)
        .collect();
    assert!(left.is_empty(), "pods left on {node}: {left:?}");
    cp.wait_for("web's 4 pods Ready on the other node", |_| {
        let web = pods_of(&admin, "web");
        (web.iter().filter(|p| p.3 && p.1 == other).count() == 4).then_some(())
    });
}

/// Whether a node is schedulable for a pod that tolerates nothing: Ready, not cordoned, no
/// NoSchedule or NoExecute taint.
fn schedulable(node: &Value) -> bool {
    condition(node, "Ready")["status"] == "True"
        && node["spec"]["unschedulable"] != true
        && !node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["effect"] == "NoSchedule" || t["effect"] == "NoExecute")
}

/// CPU a `burst` pod requests: one fits on a KWOK node (4 CPUs), two do not.
const BURST_CPU: &str = "3";

/// nodecycle's capacity changes in the fake cloud's records: +1 on a fresh read
/// (SetDesiredCapacity) or -1 with the terminate of a chosen instance, never another; and how
/// many surges it made.
fn assert_nodecycle_never_lowered(records: &nodecycle_tests::ScalingRecords) -> usize {
    let mut surges = 0;
    for c in records.capacity.iter().filter(|c| c.by == "api") {
        match c.op.as_str() {
            "SetDesiredCapacity" => {
                assert_eq!(c.to, c.from + 1, "a surge adds one: {c:?}");
                surges += 1;
            }
            "TerminateInstanceInAutoScalingGroup" => {
                assert_eq!(c.to, c.from - 1, "a give-back removes one: {c:?}")
            }
            _ => panic!("unexpected capacity change by nodecycle: {c:?}"),
        }
    }
    surges
}

/// Stand-in scenario (a) of tests/tests/autoscaler.rs (`ca_scales_up_after_the_first_surge`)
/// on the real API, with Cluster Autoscaler's scale-up caused as it is in a cluster: after the
/// rotator's first pass (2 surges: desired 8), Deployment `burst` asks for two pods more than
/// the schedulable nodes can take (each requests 3 of a node's 4 CPUs), the scheduler reports
/// 2 `Unschedulable`, and CA adds the 2 nodes they need (8 -> 10), recorded as CA's; they join
/// and the pods run. The rollout (budget 2; `web`'s 12 pods under `maxUnavailable: 1`) goes on
/// to every instance on the new AMI, the group at 8 (CA's 10 less nodecycle's 2 surges given
/// back, as on the stand-in): nodecycle's capacity changes are only +1 surges (6) and -1
/// give-backs with its own terminations, so CA's scale-up stands; every PDB status the
/// disruption controller wrote kept 11 healthy; no instance left the group with a workload pod
/// not being deleted on its node; nodecycle deleted no pod. The 2 `burst` pods the give-backs
/// leave without a node are Unschedulable again and CA's next scale-up brings the group back to
/// 10, where they run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_autoscaler_scales_up_for_unschedulable_pods_and_nodecycle_keeps_it() {
    let p = real_pool().await;
    let admin = p.cp.admin();
    let ca = nodecycle_tests::RealClusterAutoscaler::new(&p.cp, &p.cloud, GROUP);
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_deployment(&admin, "web", 12);
    p.cp.wait_for("12 web pods Ready, the PDB computed", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 12 && pods.iter().all(|p| p.3) && pdb_settled(&admin, "web", Some(1)))
            .then_some(())
    });
    let t0 = chrono::Utc::now();
    p.publish(t0).await;
    let statuses_before = p.cp.pdb_statuses(NS, "web").len();
    p.pass(t0).await;
    assert_eq!(
        p.adapters.group_instances(GROUP).await.len(),
        8,
        "two surges"
    );

    let schedulable_nodes = || {
        admin.get("/api/v1/nodes").body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| schedulable(n))
            .count()
    };
    let room = schedulable_nodes();
    let mut burst = deployment("burst", u32::try_from(room + 2).unwrap());
    burst["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({ "requests": { "cpu": BURST_CPU } });
    create(
        &admin,
        &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        burst,
    );
    p.cp.wait_for("2 burst pods Unschedulable, the others Ready", |_| {
        let pods = pods_of(&admin, "burst");
        (pods.len() == room + 2
            && pods.iter().filter(|p| p.3).count() == room
            && ca.unschedulable_pods().len() == 2)
            .then_some(())
    });
    let up = ca.scale_up(1);
    assert_eq!(up.action, "scaleUp", "{up:?}");
    assert_eq!((up.from, up.to), (Some(8), Some(10)), "{up:?}");
    p.cp.wait_for("every burst pod Ready on CA's nodes", |_| {
        let pods = pods_of(&admin, "burst");
        (pods.len() == room + 2 && pods.iter().all(|p| p.3)).then_some(())
    });

    let mut statuses_checked = statuses_before;
    let outcomes = p
        .passes_until(t0 + chrono::Duration::minutes(1), "the rollout", |o| {
            let statuses = p.cp.pdb_statuses(NS, "web");
            let written = &statuses[statuses_checked..];
            assert!(
                written.iter().all(|s| within_budget(s, 11)),
                "pass {}: fewer than 11 healthy web pods: {written:#?}",
                o.pass
            );
            statuses_checked = statuses.len();
            let in_flight = o.rotations.iter().filter(|r| r.in_flight()).count();
            assert!(in_flight <= 2, "pass {}: budget 2 exceeded", o.pass);
            !o.images.is_empty()
                && o.images.iter().all(|i| *i == p.new)
                && o.rotations.iter().all(|r| !r.in_flight())
        })
        .await;
    eprintln!(
        "rollout beside CA: {} passes after the first",
        outcomes.len()
    );
    assert_roll_end(&p, 8).await;

    let instances = p.adapters.group_instances(GROUP).await;
    assert_eq!(
        instances.len(),
        8,
        "CA's 10 less nodecycle's 2 surges given back: {instances:?}"
    );
    let records = p.cloud.scaling_records(Some(GROUP));
    assert_eq!(
        assert_nodecycle_never_lowered(&records),
        6,
        "one surge per node"
    );
    let by_ca: Vec<_> = records
        .capacity
        .iter()
        .filter(|c| c.by == "cluster-autoscaler")
        .collect();
    assert_eq!(by_ca.len(), 1, "{by_ca:?}");
    assert_eq!((by_ca[0].from, by_ca[0].to), (8, 10), "{by_ca:?}");
    assert!(
        records.terminations.iter().all(|t| t.by == "api"),
        "only nodecycle terminated: {:?}",
        records.terminations
    );
    let audit = p.cp.audit();
    assert!(
        !audit.iter().any(|e| e.user == p.rotator.user
            && e.resource == "pods"
            && e.verb == "delete"
            && e.subresource.is_empty()),
        "nodecycle deleted no pod"
    );

    // What the give-backs left without a node, CA adds again.
    p.cp.wait_for("2 burst pods Unschedulable again", |_| {
        (ca.unschedulable_pods().len() == 2).then_some(())
    });
    let again = ca.scale_up(1);
    assert_eq!((again.from, again.to), (Some(8), Some(10)), "{again:?}");
    p.cp.wait_for("every burst pod Ready", |_| {
        let pods = pods_of(&admin, "burst");
        (pods.len() == room + 2 && pods.iter().all(|p| p.3)).then_some(())
    });
}

/// Stand-in scenario (d) of tests/tests/autoscaler.rs
/// (`ca_drains_a_node_while_a_rotation_slot_is_free`) on the real API: during the rollout,
/// once a rotation slot is free, Cluster Autoscaler finds an old node nobody rotates unneeded
/// (`web`'s PDB, `maxUnavailable: 2` as on the stand-in, allows moving its 2 pods), taints it `ToBeDeletedByClusterAutoscaler` and evicts its pods.
/// The next rotator pass does not pick that node: no rotation for its instance, no nodecycle
/// taint or cordon on it and no eviction by nodecycle of a pod on it (the audit log). CA ends its
/// scale-down (TerminateInstanceInAutoScalingGroup with a decrement, recorded as CA's), and the
/// rollout ends with the 5 other instances replaced, the group at 5 (CA's scale-down kept:
/// nodecycle's capacity changes are only its 5 surges and 5 give-backs); every PDB status the
/// disruption controller wrote, through CA's evictions and nodecycle's, kept 10 healthy; no
/// instance left the group with a workload pod not being deleted on its node; the audit log
/// shows CA (its service account) and nodecycle as two writers that never evicted the same pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_autoscaler_drains_an_old_node_and_nodecycle_leaves_it_to_it() {
    let p = real_pool().await;
    let admin = p.cp.admin();
    let ca = nodecycle_tests::RealClusterAutoscaler::new(&p.cp, &p.cloud, GROUP);
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 2 }));
    create_deployment(&admin, "web", 12);
    p.cp.wait_for("12 web pods Ready, the PDB computed", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 12 && pods.iter().all(|p| p.3) && pdb_settled(&admin, "web", Some(2)))
            .then_some(())
    });
    let t0 = chrono::Utc::now();
    p.publish(t0).await;
    let statuses_before = p.cp.pdb_statuses(NS, "web").len();

    // Passes until a slot is free and CA finds an old node nobody rotates unneeded.
    let mut victim = None;
    let mut tried = Vec::new();
    for pass in 0..MAX_PASSES {
        p.pass(t0 + chrono::Duration::minutes(pass)).await;
        let rotations = p.rotations().await;
        if rotations.iter().filter(|r| r.in_flight()).count() >= 2 {
            continue;
        }
        let rotated: BTreeSet<String> = rotations.iter().map(|r| r.instance_id.clone()).collect();
        for (name, instance, image, marked) in p.nodes() {
            if image != p.old || marked || rotated.contains(&instance) {
                continue;
            }
            let down = ca.scale_down(&name, true);
            tried.push(down.clone());
            if down.action == "draining" {
                victim = Some((name, instance, pass));
                break;
            }
        }
        if victim.is_some() {
            break;
        }
    }
    let (name, instance, pass) =
        victim.unwrap_or_else(|| panic!("CA never found an old node unneeded: {tried:#?}"));
    let tainted_at = p.cp.audit().len();
    let pods_there: BTreeSet<String> = nodecycle_tests::workload_pods_on(&admin, &name)
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();

    // A pass while CA drains it: the free slot goes to another node.
    p.pass(t0 + chrono::Duration::minutes(pass + 1)).await;
    assert!(
        p.rotations()
            .await
            .iter()
            .all(|r| r.instance_id != instance),
        "nodecycle picked the node CA is deleting"
    );
    let done = ca.finish(&name);
    assert_eq!(done.action, "scaleDown", "{done:?}");
    let outcomes = p
        .passes_until(
            t0 + chrono::Duration::minutes(pass + 2),
            "the rollout",
            |o| {
                !o.images.is_empty()
                    && o.images.iter().all(|i| *i == p.new)
                    && o.rotations.iter().all(|r| !r.in_flight())
            },
        )
        .await;
    eprintln!(
        "CA scaled down {name} after pass {}; the rollout took {} more",
        pass + 1,
        outcomes.len() + 1
    );
    assert_roll_end(&p, 5).await;
    assert!(
        p.rotations()
            .await
            .iter()
            .all(|r| r.instance_id != instance),
        "CA's node was never rotated"
    );
    let audit = p.cp.audit();
    let touched: Vec<_> = audit[tainted_at..]
        .iter()
        .filter(|e| e.user == p.rotator.user)
        .filter(|e| {
            (e.resource == "nodes" && e.name == name)
                || (e.resource == "pods" && pods_there.contains(&e.name))
        })
        .collect();
    assert!(
        touched.is_empty(),
        "nodecycle touched CA's node or its pods: {touched:#?}"
    );
    for s in &p.cp.pdb_statuses(NS, "web")[statuses_before..] {
        assert!(within_budget(s, 10), "web PDB status {s}");
    }
    let instances = p.adapters.group_instances(GROUP).await;
    assert_eq!(instances.len(), 5, "CA's scale-down kept: {instances:?}");
    let records = p.cloud.scaling_records(Some(GROUP));
    assert_eq!(
        assert_nodecycle_never_lowered(&records),
        5,
        "one surge per rotated node, none for CA's"
    );
    let by_ca: Vec<_> = records
        .terminations
        .iter()
        .filter(|t| t.by == "cluster-autoscaler")
        .collect();
    assert_eq!(by_ca.len(), 1, "{by_ca:?}");
    assert_eq!(by_ca[0].instance, instance);
    assert_eq!(by_ca[0].decrement, Some(true), "{by_ca:?}");
    assert_ca_and_nodecycle_write_apart(&p, &[name]);
}

/// Hang guard of the managed node group update on the real API (fake EKS timing: a few
/// seconds); not a timing assertion.
const MANAGED_HANG_GUARD: Duration = Duration::from_secs(180);

/// The stand-in test `managed::a_new_release_rolls_through_the_node_group_within_budget` on
/// the real API: managed node group `general` (4 nodes, AL2023 release 1.30.4) of cluster
/// `prod`, whose KWOK nodes follow its Auto Scaling group; the fake EKS's rollout reads
/// readiness, cordons and drains through the real API server as EKS does
/// ([`ControlPlane::serve_eks_rollouts`]). A new release comes out; the real rotator (its own
/// EKS token) starts one node group version update with `maxUnavailable` 2 (the budget) and
/// follows it until EKS reports it Successful. EKS evicted (201, never deleted) every pod of
/// `web` (8 pods, PDB `maxUnavailable: 1`) from the old nodes, the replacements run Ready on
/// the new nodes, every PDB status the disruption controller wrote during the update kept 7
/// healthy, no wave terminated more than 2 instances, no instance left the group with a
/// workload pod not being deleted on its node, and nodecycle itself evicted or deleted no pod
/// (EKS drains a managed node group). At the end the 4 instances run the new release's AMI
/// and the nodes are theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_node_group_update_drains_the_real_nodes_within_the_pdb() {
    use crate::managed::{NEW_RELEASE, OLD_RELEASE, publish_release};
    use nodecycle::state::Store as _;
    let (cloud, cp, rotator) = cluster_with_rotator().await;
    cloud.create_cluster(CLUSTER, "1.30");
    cp.serve_eks_rollouts(&cloud, CLUSTER);
    // Room for a busy machine: the failure paths (NodeCreationFailure, PodEvictionFailure)
    // are not under test.
    cloud.control(
        "set_eks_timing",
        json!({ "readyTimeoutSeconds": 120, "drainTimeoutSeconds": 120 }),
    );
    let adapters = Adapters::new(&cloud).await;
    let old = publish_release(&cloud, OLD_RELEASE, "20241001", "2024-10-01T00:00:00Z");
    let created = cloud.control(
        "create_nodegroup",
        json!({
            "cluster": CLUSTER, "nodegroup": "general", "size": 4, "max": 8,
            "image": old, "releaseVersion": OLD_RELEASE,
        }),
    );
    let asg = created["asg"].as_str().unwrap().to_string();
    let joined = cp.sync_group(&cloud, &asg);
    assert_eq!(joined.added.len(), 4, "{joined:?}");
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!(
            "cluster: {CLUSTER}\nname: general\nnodeGroup: {{ managedNodeGroup: general }}\n\
             architecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\n\
             disruption:\n  budgets:\n    - nodes: \"2\"\nterminationGracePeriod: 1m\n"
        ),
    );
    let table = adapters.table("nodecycle").await;
    let policies = adapters.policies();
    let watcher = adapters.watcher(policies.clone(), table.clone());
    let mut handler = adapters.rotator(&cloud, policies, table.clone()).await;
    handler.ports.kube = real_kube(&cp, &rotator);

    let admin = cp.admin();
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_deployment(&admin, "web", 8);
    let before = cp.wait_for("8 web pods Ready, the PDB computed", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 8 && pods.iter().all(|p| p.3) && pdb_settled(&admin, "web", Some(1)))
            .then_some(pods)
    });
    let t0 = chrono::Utc::now();
    watcher.handle(&json!({}), t0).await.unwrap();
    let new = publish_release(&cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    let report = watcher.handle(&json!({}), t0).await.unwrap();
    assert_eq!(report["pools"][0]["desired"], new.as_str(), "{report}");

    let statuses_before = cp.pdb_statuses(NS, "web").len();
    let update = || async {
        table
            .get("POOL#prod/general", nodecycle::state::keys::UPDATE_SK)
            .await
            .unwrap()
            .map(|v| serde_json::from_value::<nodecycle::managed::ManagedUpdate>(v.value).unwrap())
    };
    let started = std::time::Instant::now();
    let mut now = t0;
    let mut passes = 0;
    loop {
        let report = handler
            .handle(
                &json!({}),
                Invocation::at(now, std::time::Instant::now() + Duration::from_secs(120)),
            )
            .await
            .unwrap();
        passes += 1;
        assert!(
            report["pools"][0]["errors"]
                .as_array()
                .is_none_or(|e| e.is_empty()),
            "{report}"
        );
        // Before the nodes follow the group: the instances gone left no pod behind.
        let listed = cloud.control("group_instances", json!({ "group": asg }));
        for n in admin.get("/api/v1/nodes").body["items"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let instance = n["spec"]["providerID"]
                .as_str()
                .unwrap_or_default()
                .rsplit('/')
                .next()
                .unwrap_or_default();
            let in_service = listed["instances"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|i| i["id"] == instance && i["lifecycleState"] == "InService");
            if in_service {
                continue;
            }
            let name = n["metadata"]["name"].as_str().unwrap_or_default();
            let live: Vec<_> = nodecycle_tests::workload_pods_on(&admin, name)
                .into_iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .map(|p| p["metadata"]["name"].clone())
                .collect();
            assert!(
                live.is_empty(),
                "{instance} left the group with pods on {name}: {live:?}"
            );
        }
        cp.sync_group(&cloud, &asg);
        if update().await.is_some_and(|u| u.phase.is_finished()) {
            break;
        }
        assert!(
            started.elapsed() < MANAGED_HANG_GUARD,
            "the node group update did not end: {:?}\n{}",
            update().await,
            cloud.control(
                "nodegroup_calls",
                json!({ "cluster": CLUSTER, "nodegroup": "general" })
            )
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        now += chrono::Duration::minutes(1);
    }
    let calls = cloud.control(
        "nodegroup_calls",
        json!({ "cluster": CLUSTER, "nodegroup": "general" }),
    );
    let u = update().await.unwrap();
    eprintln!(
        "managed update on the real API: {passes} passes, {:.1} s, timeline {}",
        started.elapsed().as_secs_f64(),
        calls["timeline"]
    );
    assert_eq!(
        u.phase,
        nodecycle::managed::Phase::Successful,
        "{u:?}\n{calls}"
    );
    assert_eq!(u.max_unavailable, 2, "{u:?}");
    let waves = calls["waves"].as_array().unwrap();
    assert!(
        waves.len() >= 2
            && waves
                .iter()
                .all(|w| w["terminated"].as_array().unwrap().len() <= 2),
        "4 nodes, 2 at a time: {calls}"
    );
    let instances = adapters.group_instances(&asg).await;
    assert_eq!(instances.len(), 4, "{instances:?}");
    assert!(
        instances.iter().all(|(_, image)| *image == new),
        "{instances:?}"
    );
    let nodes: BTreeSet<String> = admin.get("/api/v1/nodes").body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            n["spec"]["providerID"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    let group: BTreeSet<String> = instances.iter().map(|i| i.0.clone()).collect();
    assert_eq!(nodes, group, "the nodes are the group's instances");

    for s in &cp.pdb_statuses(NS, "web")[statuses_before..] {
        assert!(within_budget(s, 7), "web PDB status {s}");
    }
    let audit = cp.audit();
    for (name, ..) in &before {
        assert!(
            audit.iter().any(|e| e.user == "admin"
                && e.subresource == "eviction"
                && e.name == *name
                && e.code == 201),
            "EKS evicted {name}"
        );
    }
    assert!(
        !audit.iter().any(|e| e.resource == "pods"
            && e.subresource.is_empty()
            && e.verb == "delete"
            && (e.user == "admin" || e.user == rotator.user)),
        "no pod deleted by EKS or nodecycle"
    );
    assert!(
        !audit
            .iter()
            .any(|e| e.user == rotator.user && e.subresource == "eviction"),
        "nodecycle evicted nothing: EKS drains a managed node group"
    );
    cp.wait_for("8 web pods Ready on the new nodes", |_| {
        let pods = web_pods(&admin);
        let on_new = pods.iter().all(|p| {
            p.3 && admin.get(&format!("/api/v1/nodes/{}", p.1)).body["metadata"]["annotations"]
                [nodecycle_tests::IMAGE_ANNOTATION]
                == new.as_str()
        });
        (pods.len() == 8 && on_new).then_some(())
    });
}

/// The lifecycle port of the interruption handler, delegating to the real adapter (the fake
/// cloud's Auto Scaling) and recording, at each call, the workload pods not being deleted and
/// the pods still listed on the node of the instance (the real API server's answer), as the
/// stand-in test's `RecordingLifecycle` does.
struct PodsAtLifecycleCalls {
    inner: nodecycle::aws::instances::LifecycleActions,
    admin: nodecycle_tests::KubeClient,
    node: String,
    /// (call, pods still bound to the node).
    calls: std::sync::Mutex<Vec<(&'static str, usize)>>,
}

impl PodsAtLifecycleCalls {
    fn record(&self, call: &'static str) {
        let left = nodecycle_tests::workload_pods_on(&self.admin, &self.node).len();
        self.calls.lock().unwrap().push((call, left));
    }
}

#[async_trait::async_trait]
impl nodecycle::interruption::LifecycleOps for PodsAtLifecycleCalls {
    async fn heartbeat(
        &self,
        a: &nodecycle::interruption::LifecycleAction,
    ) -> Result<bool, nodecycle::port::PortError> {
        self.record("heartbeat");
        self.inner.heartbeat(a).await
    }

    async fn complete_continue(
        &self,
        a: &nodecycle::interruption::LifecycleAction,
    ) -> Result<bool, nodecycle::port::PortError> {
        self.record("complete");
        self.inner.complete_continue(a).await
    }

    async fn complete_abandon(
        &self,
        a: &nodecycle::interruption::LifecycleAction,
    ) -> Result<bool, nodecycle::port::PortError> {
        self.record("abandon");
        self.inner.complete_abandon(a).await
    }
}

/// The stand-in test
/// `interruption::lifecycle_hook_completes_only_after_the_pods_are_gone_with_heartbeats_meanwhile`
/// on the real API: group `prod-general` has a terminating lifecycle hook `nodecycle-drain` and
/// a scale-in holds one of its instances in `Terminating:Wait`; its node holds 2 of the 4 pods
/// of `web` (PDB `maxUnavailable: 1`) and the pod of `slow`, whose container ignores SIGTERM
/// (grace period 3 s: the node is busy until then). The interruption handler, with its own
/// role's EKS token, handles the EventBridge event: it taints the node `Terminating`, evicts the
/// 3 pods (201, each once; deletes none) within the budget (every `web` PDB status keeps 3
/// healthy), sends lifecycle heartbeats while pods are still on the node, and completes the
/// action (CONTINUE, with the event's token, accepted by Auto Scaling) once, last, when no pod
/// is left on the node; the instance then leaves the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminate_lifecycle_hook_completes_after_the_real_node_is_drained() {
    use nodecycle::handlers::interruption::{InterruptionHandler, InterruptionPorts, Settings};
    const HOOK: &str = "nodecycle-drain";
    let (cloud, cp, _rotator) = cluster_with_rotator().await;
    cp.pods_ignore_sigterm(IGNORES_SIGTERM.0, IGNORES_SIGTERM.1);
    let interruption = function(
        &cloud,
        &cp,
        "nodecycle-interruption",
        "nodecycle-interruption",
    )
    .await;
    wait_rbac(&cp, &interruption, "create", "pods/eviction", true);
    cloud.create_cluster(CLUSTER, "1.36");
    let image = cloud.register_image(
        ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let adapters = Adapters::new(&cloud).await;
    adapters
        .create_group(GROUP, &image, "m5.large", 2, 4, Some(CLUSTER))
        .await;
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!(
            "cluster: {CLUSTER}\nname: general\nnodeGroup: {{ autoScalingGroup: {GROUP} }}\n\
             amiSelectorTerms:\n  - name: golden-*\n    owner: self\n\
             terminationGracePeriod: 1h\ninterruption: {{ rebalance: ignore }}\n"
        ),
    );
    let joined = cp.sync_group(&cloud, GROUP);
    assert_eq!(joined.added.len(), 2, "{joined:?}");

    let admin = cp.admin();
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_deployment(&admin, "web", 4);
    let mut slow = deployment("slow", 1);
    slow["spec"]["template"]["metadata"]["labels"][IGNORES_SIGTERM.0] = json!(IGNORES_SIGTERM.1);
    slow["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(3);
    create(
        &admin,
        &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        slow,
    );
    let (web, slow) = cp.wait_for("4 web pods and the slow pod Ready, the PDB settled", |_| {
        let (web, slow) = (pods_of(&admin, "web"), pods_of(&admin, "slow"));
        (web.len() == 4
            && web.iter().all(|p| p.3)
            && slow.len() == 1
            && slow[0].3
            && pdb_settled(&admin, "web", Some(1)))
        .then_some((web, slow))
    });
    let node = slow[0].1.clone();
    let leaving: Vec<String> = web
        .iter()
        .filter(|p| p.1 == node)
        .map(|p| p.0.clone())
        .chain([slow[0].0.clone()])
        .collect();
    assert_eq!(leaving.len(), 3, "the spread: {web:?}");
    let instance = admin.get(&format!("/api/v1/nodes/{node}")).body["spec"]["providerID"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();

    adapters
        .clients
        .autoscaling
        .put_lifecycle_hook()
        .auto_scaling_group_name(GROUP)
        .lifecycle_hook_name(HOOK)
        .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
        .heartbeat_timeout(300)
        .send()
        .await
        .unwrap();
    let token = cloud.lifecycle_wait(GROUP, HOOK, &instance, None);

    let table = adapters.table("nodecycle").await;
    let lifecycle = Arc::new(PodsAtLifecycleCalls {
        inner: nodecycle::aws::instances::LifecycleActions::new(
            adapters.clients.autoscaling.clone(),
        ),
        admin: admin.clone(),
        node: node.clone(),
        calls: std::sync::Mutex::new(Vec::new()),
    });
    let handler = InterruptionHandler {
        cell: adapters.cell(adapters.policies(), table.clone()),
        ports: InterruptionPorts {
            instances: Arc::new(nodecycle::aws::instances::Ec2Instances::new(
                adapters.clients.ec2.clone(),
            )),
            lifecycle: lifecycle.clone(),
            kube: real_kube(&cp, &interruption),
        },
        deployment: Arc::new(nodecycle::aws::identity::OwnAccount::new(
            &cloud.sdk_config().await,
        )),
        settings: Settings {
            poll: Duration::from_millis(200),
            heartbeat_every: Duration::from_millis(400),
            ..Settings::default()
        },
        metrics: Arc::new(nodecycle::metrics::NoMetrics),
    };

    let event = {
        let path = nodecycle_tests::repo_path("events/asg-terminate-lifecycle-action.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let sample: Value = serde_json::from_str(&text).unwrap();
        let mut v: Value = serde_json::from_str(&text.replace(
            sample["detail"]["EC2InstanceId"].as_str().unwrap(),
            &instance,
        ))
        .unwrap();
        v["detail"]["LifecycleActionToken"] = json!(token);
        v["time"] = json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        v
    };
    let statuses_before = cp.pdb_statuses(NS, "web").len();
    let out = handler
        .handle(
            &event,
            Invocation::at(
                chrono::Utc::now(),
                std::time::Instant::now() + Duration::from_secs(170),
            ),
        )
        .await
        .unwrap();
    assert_eq!(out["kind"], "TerminateLifecycleAction", "{out}");
    assert_eq!(out["outcomes"][0]["action"], "completed", "{out}");

    let calls = lifecycle.calls.lock().unwrap().clone();
    eprintln!("lifecycle calls (call, pods on the node): {calls:?}");
    let (last, before_last) = calls.split_last().expect("lifecycle calls");
    assert_eq!(
        *last,
        ("complete", 0),
        "completed last, the node empty: {calls:?}"
    );
    assert!(
        !before_last.is_empty() && before_last.iter().all(|c| c.0 == "heartbeat"),
        "heartbeats while draining, then one complete: {calls:?}"
    );
    assert!(
        before_last[0].1 > 0,
        "the first heartbeat while pods were on the node: {calls:?}"
    );
    let recorded = cloud.lifecycle_calls();
    let completes: Vec<&Value> = recorded
        .iter()
        .filter(|c| c["action"] == "CompleteLifecycleAction")
        .collect();
    assert_eq!(completes.len(), 1, "{recorded:?}");
    assert!(
        completes[0].get("error").is_none(),
        "accepted: {recorded:?}"
    );
    assert_eq!(
        (
            &completes[0]["instance"],
            &completes[0]["result"],
            &completes[0]["token"]
        ),
        (&json!(instance), &json!("CONTINUE"), &json!(token)),
        "{recorded:?}"
    );

    let tainted = admin.get(&format!("/api/v1/nodes/{node}")).body;
    let taint = tainted["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["key"] == nodecycle::kube::DISRUPTED_TAINT_KEY)
        .map(|t| t["value"].clone());
    assert_eq!(taint, Some(json!("Terminating")), "{tainted}");
    let audit = cp.audit();
    for pod in &leaving {
        let codes: Vec<u16> = audit
            .iter()
            .filter(|e| {
                e.user == interruption.user && e.subresource == "eviction" && e.name == *pod
            })
            .map(|e| e.code)
            .collect();
        assert_eq!(
            codes.iter().filter(|c| **c == 201).count(),
            1,
            "{pod} evicted once: {codes:?}"
        );
    }
    assert!(
        !audit.iter().any(|e| e.user == interruption.user
            && e.resource == "pods"
            && e.subresource.is_empty()
            && e.verb == "delete"),
        "the handler deleted no pod"
    );
    for s in &cp.pdb_statuses(NS, "web")[statuses_before..] {
        assert!(within_budget(s, 3), "web PDB status {s}");
    }
    let left = adapters.group_instances(GROUP).await;
    assert!(
        left.iter().all(|(id, _)| *id != instance),
        "the termination went on: {left:?}"
    );
}

/// The stand-in test `interruption::lifecycle_drain_longer_than_the_invocation_is_handed_to_the_rotator`
/// on the real API, carried to its end by the real rotator: a scale-in holds an instance in
/// `Terminating:Wait` (terminating hook `nodecycle-drain`); its node holds 2 of `web`'s 4 pods
/// (`maxUnavailable: 1`) and `db`'s single pod (`minAvailable: 1`, no healthy room). The
/// interruption handler, given 12 s, evicts the `web` pods, cannot move `db` (429) and hands
/// the drain over: a forced `Interrupted` rotation in `Draining` with the drain state, and a
/// heartbeat; the schedule tick only heartbeats while the rotator has not drained it. Once
/// `db` has a second replica Ready elsewhere, the real rotator pass (its own role's EKS token)
/// continues the same drain and evicts `db`'s pod (201, nodecycle's only eviction of it; no pod
/// deleted by either function); the next tick completes the lifecycle action (CONTINUE, the
/// event's token, once, accepted) with the node empty, and every `web` and `db` PDB status
/// kept its `desiredHealthy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifecycle_drain_handed_to_the_rotator_is_finished_on_the_real_api() {
    use nodecycle::handlers::interruption::{InterruptionHandler, InterruptionPorts, Settings};
    const HOOK: &str = "nodecycle-drain";
    let (cloud, cp, rotator) = cluster_with_rotator().await;
    let interruption = function(
        &cloud,
        &cp,
        "nodecycle-interruption",
        "nodecycle-interruption",
    )
    .await;
    wait_rbac(&cp, &interruption, "create", "pods/eviction", true);
    cloud.create_cluster(CLUSTER, "1.36");
    let image = cloud.register_image(
        ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let adapters = Adapters::new(&cloud).await;
    adapters
        .create_group(GROUP, &image, "m5.large", 2, 4, Some(CLUSTER))
        .await;
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!(
            "cluster: {CLUSTER}\nname: general\nnodeGroup: {{ autoScalingGroup: {GROUP} }}\n\
             amiSelectorTerms:\n  - name: golden-*\n    owner: self\n\
             terminationGracePeriod: 1h\ninterruption: {{ rebalance: ignore }}\n"
        ),
    );
    let joined = cp.sync_group(&cloud, GROUP);
    assert_eq!(joined.added.len(), 2, "{joined:?}");
    let admin = cp.admin();
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_pdb(&admin, "db", "db", json!({ "minAvailable": 1 }));
    create_deployment(&admin, "web", 4);
    create_deployment(&admin, "db", 1);
    let (web, db) = cp.wait_for("4 web pods and the db pod Ready, the PDBs settled", |_| {
        let (web, db) = (pods_of(&admin, "web"), pods_of(&admin, "db"));
        (web.len() == 4
            && web.iter().all(|p| p.3)
            && db.len() == 1
            && db[0].3
            && pdb_settled(&admin, "web", Some(1))
            && pdb_settled(&admin, "db", Some(0)))
        .then_some((web, db))
    });
    let node = db[0].1.clone();
    assert_eq!(web.iter().filter(|p| p.1 == node).count(), 2, "{web:?}");
    let instance = admin.get(&format!("/api/v1/nodes/{node}")).body["spec"]["providerID"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    adapters
        .clients
        .autoscaling
        .put_lifecycle_hook()
        .auto_scaling_group_name(GROUP)
        .lifecycle_hook_name(HOOK)
        .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
        .heartbeat_timeout(300)
        .send()
        .await
        .unwrap();
    let token = cloud.lifecycle_wait(GROUP, HOOK, &instance, None);

    let table = adapters.table("nodecycle").await;
    let lifecycle = Arc::new(PodsAtLifecycleCalls {
        inner: nodecycle::aws::instances::LifecycleActions::new(
            adapters.clients.autoscaling.clone(),
        ),
        admin: admin.clone(),
        node: node.clone(),
        calls: std::sync::Mutex::new(Vec::new()),
    });
    let handler = InterruptionHandler {
        cell: adapters.cell(adapters.policies(), table.clone()),
        ports: InterruptionPorts {
            instances: Arc::new(nodecycle::aws::instances::Ec2Instances::new(
                adapters.clients.ec2.clone(),
            )),
            lifecycle: lifecycle.clone(),
            kube: real_kube(&cp, &interruption),
        },
        deployment: Arc::new(nodecycle::aws::identity::OwnAccount::new(
            &cloud.sdk_config().await,
        )),
        settings: Settings {
            poll: Duration::from_millis(200),
            heartbeat_every: Duration::from_millis(400),
            ..Settings::default()
        },
        metrics: Arc::new(nodecycle::metrics::NoMetrics),
    };
    let mut rotator_handler = adapters
        .rotator(&cloud, adapters.policies(), table.clone())
        .await;
    rotator_handler.ports.kube = real_kube(&cp, &rotator);

    let event = {
        let path = nodecycle_tests::repo_path("events/asg-terminate-lifecycle-action.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let sample: Value = serde_json::from_str(&text).unwrap();
        let mut v: Value = serde_json::from_str(&text.replace(
            sample["detail"]["EC2InstanceId"].as_str().unwrap(),
            &instance,
        ))
        .unwrap();
        v["detail"]["LifecycleActionToken"] = json!(token);
        v["time"] = json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        v
    };
    let statuses_before = (
        cp.pdb_statuses(NS, "web").len(),
        cp.pdb_statuses(NS, "db").len(),
    );
    let out = handler
        .handle(
            &event,
            Invocation::at(
                chrono::Utc::now(),
                std::time::Instant::now() + Duration::from_secs(12),
            ),
        )
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "handedOver", "{out}");
    let rotation = || async {
        crate::support::rotations_of(&table, "prod/general")
            .await
            .into_iter()
            .find(|r| r.instance_id == instance)
    };
    let r = rotation().await.expect("the drain was handed over");
    assert_eq!(
        (r.step, r.forced, r.reason),
        (
            nodecycle::rotation::Step::Draining,
            true,
            nodecycle::rotation::RotationReason::Interrupted
        ),
        "{r:?}"
    );
    assert!(r.drain.is_some(), "{r:?}");
    let tick = || async {
        handler
            .handle(
                &json!({}),
                Invocation::at(
                    chrono::Utc::now(),
                    std::time::Instant::now() + Duration::from_secs(60),
                ),
            )
            .await
            .unwrap()
    };
    let out = tick().await;
    assert_eq!(out["outcomes"][0]["action"], "heartbeat", "{out}");
    assert!(
        lifecycle
            .calls
            .lock()
            .unwrap()
            .iter()
            .all(|c| c.0 == "heartbeat"),
        "not completed while db's pod is on the node"
    );

    // db gets a second replica, Ready on the other node: its budget allows one disruption.
    let scaled = admin.patch(
        &format!("/apis/apps/v1/namespaces/{NS}/deployments/db"),
        "application/merge-patch+json",
        &json!({ "spec": { "replicas": 2 } }),
    );
    assert_eq!(scaled.status, 200, "{}", scaled.raw);
    cp.wait_for("db's PDB allowing a disruption", |_| {
        pdb_settled(&admin, "db", Some(1)).then_some(())
    });
    let started = std::time::Instant::now();
    let mut now = chrono::Utc::now();
    loop {
        rotator_handler
            .handle(
                &json!({}),
                Invocation::at(now, std::time::Instant::now() + Duration::from_secs(120)),
            )
            .await
            .unwrap();
        let r = rotation().await;
        if r.as_ref()
            .is_none_or(|r| r.step != nodecycle::rotation::Step::Draining)
        {
            eprintln!("the rotator's drain ended: {r:?}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the rotator never finished the drain: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        now += chrono::Duration::minutes(1);
    }
    let out = tick().await;
    assert_eq!(out["outcomes"][0]["action"], "completed", "{out}");

    let calls = lifecycle.calls.lock().unwrap().clone();
    eprintln!("lifecycle calls (call, pods on the node): {calls:?}");
    assert_eq!(
        calls.last(),
        Some(&("complete", 0)),
        "completed last, the node empty: {calls:?}"
    );
    assert_eq!(calls.iter().filter(|c| c.0 == "complete").count(), 1);
    let completes: Vec<Value> = cloud
        .lifecycle_calls()
        .into_iter()
        .filter(|c| c["action"] == "CompleteLifecycleAction")
        .collect();
    assert_eq!(completes.len(), 1, "{completes:?}");
    assert!(completes[0].get("error").is_none(), "{completes:?}");
    assert_eq!(
        (
            &completes[0]["instance"],
            &completes[0]["result"],
            &completes[0]["token"]
        ),
        (&json!(instance), &json!("CONTINUE"), &json!(token)),
    );

    let audit = cp.audit();
    let evictions = |user: &str, pod: &str, code: u16| {
        audit
            .iter()
            .filter(|e| {
                e.user == user && e.subresource == "eviction" && e.name == pod && e.code == code
            })
            .count()
    };
    let db_pod = &db[0].0;
    assert!(
        evictions(&interruption.user, db_pod, 429) >= 1,
        "the handler's evictions of db were refused"
    );
    assert_eq!(evictions(&interruption.user, db_pod, 201), 0);
    assert_eq!(
        evictions(&rotator.user, db_pod, 201),
        1,
        "the rotator evicted db's pod"
    );
    for p in web.iter().filter(|p| p.1 == node) {
        assert_eq!(
            evictions(&interruption.user, &p.0, 201) + evictions(&rotator.user, &p.0, 201),
            1,
            "{} evicted once",
            p.0
        );
    }
    assert!(
        !audit.iter().any(|e| e.resource == "pods"
            && e.subresource.is_empty()
            && e.verb == "delete"
            && (e.user == interruption.user || e.user == rotator.user)),
        "no pod deleted by nodecycle"
    );
    for s in &cp.pdb_statuses(NS, "web")[statuses_before.0..] {
        assert!(within_budget(s, 3), "web PDB status {s}");
    }
    // db's budget: 1 healthy wanted, whatever its replicas.
    for s in &cp.pdb_statuses(NS, "db")[statuses_before.1..] {
        assert!(
            s["currentHealthy"].as_i64() >= s["desiredHealthy"].as_i64(),
            "db PDB status {s}"
        );
    }
    assert!(
        nodecycle_tests::workload_pods_on(&admin, &node).is_empty(),
        "the node is empty"
    );
}

/// Stand-in scenario (c) of tests/tests/autoscaler.rs
/// (`ca_removes_an_empty_surge_node_before_it_is_claimed`) on the real API: after the first
/// pass, Cluster Autoscaler finds a surge node of the new AMI empty (no workload pod: the
/// scheduler put nothing there yet), taints it, and terminates it with a decrement (8 -> 7). The
/// next rotator pass raises the lost surge again (one unit on a fresh read, desired back to 8)
/// and the rollout ends with every instance on the new AMI and the group at 6: nodecycle's
/// capacity changes are 7 surges (6 and the one raised again) and 6 give-backs, never a lower
/// SetDesiredCapacity; every `web` PDB status kept 11 healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_autoscaler_removes_an_empty_surge_node_and_nodecycle_raises_it_again() {
    let p = real_pool().await;
    let admin = p.cp.admin();
    let ca = nodecycle_tests::RealClusterAutoscaler::new(&p.cp, &p.cloud, GROUP);
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 1 }));
    create_deployment(&admin, "web", 12);
    p.cp.wait_for("12 web pods Ready, the PDB computed", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 12 && pods.iter().all(|p| p.3) && pdb_settled(&admin, "web", Some(1)))
            .then_some(())
    });
    let t0 = chrono::Utc::now();
    p.publish(t0).await;
    let statuses_before = p.cp.pdb_statuses(NS, "web").len();
    p.pass(t0).await;
    let surge = p
        .nodes()
        .into_iter()
        .find(|n| n.2 == p.new)
        .expect("a surge node registered");
    assert!(
        ca.workload_pods_on(&surge.0).is_empty(),
        "the surge node is empty"
    );
    let down = ca.scale_down(&surge.0, false);
    assert_eq!(down.action, "scaleDown", "{down:?}");
    assert_eq!((down.from, down.to), (Some(8), Some(7)), "{down:?}");

    p.pass(t0 + chrono::Duration::minutes(1)).await;
    let desired = p
        .cloud
        .control("group_instances", json!({ "group": GROUP }))["desired"]
        .clone();
    assert_eq!(desired, 8, "the surge that lost its unit raised again");
    p.passes_until(t0 + chrono::Duration::minutes(2), "the rollout", |o| {
        p.rolled_out(o)
    })
    .await;
    assert_roll_end(&p, 6).await;
    let records = p.cloud.scaling_records(Some(GROUP));
    assert_eq!(
        assert_nodecycle_never_lowered(&records),
        7,
        "6 surges and one raised again"
    );
    assert_eq!(
        records
            .terminations
            .iter()
            .filter(|t| t.by == "cluster-autoscaler")
            .map(|t| t.instance.as_str())
            .collect::<Vec<_>>(),
        vec![surge.1.as_str()],
        "CA terminated the surge node only"
    );
    for s in &p.cp.pdb_statuses(NS, "web")[statuses_before..] {
        assert!(within_budget(s, 11), "web PDB status {s}");
    }
}

/// Stand-in scenario (f) of tests/tests/autoscaler.rs
/// (`surge_nodes_are_protected_and_az_rebalance_is_resumed`, its Kubernetes side) on the real
/// API: at every pass of the rollout, the node of each in-flight rotation's replacement carries
/// `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"` as the API server stores it,
/// no other node does, and Cluster Autoscaler, asked every pass to remove a protected node,
/// refuses ("scale-down disabled"); at the end no node keeps the annotation and the group is at
/// 6 on the new AMI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surge_nodes_are_protected_from_cluster_autoscaler_while_their_rotation_runs() {
    let p = real_pool().await;
    let admin = p.cp.admin();
    let ca = nodecycle_tests::RealClusterAutoscaler::new(&p.cp, &p.cloud, GROUP);
    let t0 = chrono::Utc::now();
    p.publish(t0).await;
    let annotated = || -> BTreeMap<String, (String, bool)> {
        admin.get("/api/v1/nodes").body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                let instance = n["spec"]["providerID"]
                    .as_str()
                    .unwrap_or_default()
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let name = n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let marked = n["metadata"]["annotations"]
                    [nodecycle_tests::SCALE_DOWN_DISABLED_ANNOTATION]
                    == "true";
                (instance, (name, marked))
            })
            .collect()
    };
    let mut protected_seen = 0;
    let mut refused = 0;
    p.passes_until(t0, "the rollout", |o| {
        let serving: Vec<String> = o
            .rotations
            .iter()
            .filter(|r| r.in_flight())
            .filter_map(|r| r.replacement.clone())
            .collect();
        let nodes = annotated();
        for (instance, (name, marked)) in &nodes {
            if serving.contains(instance) {
                assert!(*marked, "pass {}: replacement {name} unprotected", o.pass);
                protected_seen += 1;
            } else {
                assert!(
                    !*marked,
                    "pass {}: {name} keeps scale-down-disabled with no rotation on it",
                    o.pass
                );
            }
        }
        if let Some((name, _)) = serving.iter().find_map(|i| nodes.get(i)) {
            let down = ca.scale_down(name, false);
            assert_eq!(down.action, "noScaleDown", "pass {}: {down:?}", o.pass);
            assert!(down.reason.contains("scale-down disabled"), "{down:?}");
            refused += 1;
        }
        p.rolled_out(o)
    })
    .await;
    assert!(
        protected_seen > 0 && refused > 0,
        "replacements seen protected ({protected_seen}) and CA refused ({refused})"
    );
    assert!(
        annotated().values().all(|(_, marked)| !marked),
        "no scale-down-disabled left"
    );
    assert!(
        p.cloud
            .scaling_records(Some(GROUP))
            .terminations
            .iter()
            .all(|t| t.by == "api"),
        "CA removed nothing"
    );
    assert_roll_end(&p, 6).await;
}

/// 12 `web` pods Ready (PDB `maxUnavailable: 2`, as on the stand-in) in [`NS`], the PDB
/// computed; the new AMI published at `t0` and the statuses written so far counted.
async fn roll_beside_ca(p: &RealPool, t0: chrono::DateTime<chrono::Utc>) -> usize {
    let admin = p.cp.admin();
    create_namespace(&admin);
    create_pdb(&admin, "web", "web", json!({ "maxUnavailable": 2 }));
    create_deployment(&admin, "web", 12);
    p.cp.wait_for("12 web pods Ready, the PDB computed", |_| {
        let pods = web_pods(&admin);
        (pods.len() == 12 && pods.iter().all(|p| p.3) && pdb_settled(&admin, "web", Some(2)))
            .then_some(())
    });
    p.publish(t0).await;
    p.cp.pdb_statuses(NS, "web").len()
}

/// The old nodes no rotation holds and nodecycle has not marked: (name, instance).
async fn unrotated_old_nodes(p: &RealPool) -> Vec<(String, String)> {
    let rotated: BTreeSet<String> = p
        .rotations()
        .await
        .iter()
        .map(|r| r.instance_id.clone())
        .collect();
    p.nodes()
        .into_iter()
        .filter(|(_, instance, image, marked)| {
            *image == p.old && !marked && !rotated.contains(instance)
        })
        .map(|(name, instance, ..)| (name, instance))
        .collect()
}

/// CA removes (taint, evictions, terminate with decrement) the first of `candidates` it finds
/// unneeded; (node, instance, its action). Panics with every answer when it removes none.
fn ca_removes_one(
    ca: &nodecycle_tests::RealClusterAutoscaler<'_>,
    candidates: Vec<(String, String)>,
) -> (String, String, nodecycle_tests::CaAction) {
    let mut tried = Vec::new();
    for (name, instance) in candidates {
        let down = ca.scale_down(&name, false);
        if down.action == "scaleDown" {
            return (name, instance, down);
        }
        tried.push(down);
    }
    panic!("CA found no old node to remove: {tried:#?}");
}

/// The end every stand-in Cluster Autoscaler scenario that rolls through asserts
/// (tests/tests/autoscaler.rs, `Roll::assert_end`), on the real API: every instance on the new
/// AMI, `size` instances and desired capacity, nodecycle's capacity changes only +1 surges and
/// -1 give-backs, no quarantine, every rotation Done, the pool not halted, no node keeping
/// scale-down-disabled. (No undrained termination: every [`RealPool::pass`] asserts it.)
async fn assert_roll_end(p: &RealPool, size: usize) -> nodecycle_tests::ScalingRecords {
    let images = p.adapters.group_images(GROUP).await;
    assert!(
        images.iter().all(|i| *i == p.new),
        "every node on the new AMI: {images:?}"
    );
    assert_eq!(images.len(), size, "the group at CA's size: {images:?}");
    assert_eq!(
        p.cloud
            .control("group_instances", json!({ "group": GROUP }))["desired"],
        size,
        "desired capacity at CA's size"
    );
    let records = p.cloud.scaling_records(Some(GROUP));
    assert_nodecycle_never_lowered(&records);
    let quarantine = nodecycle::state::Repository::new(p.table.clone())
        .quarantine()
        .await
        .unwrap();
    assert!(
        quarantine.0.is_empty(),
        "nothing quarantined: {quarantine:?}"
    );
    let rotations = p.rotations().await;
    assert!(
        rotations
            .iter()
            .all(|r| r.step == nodecycle::rotation::Step::Done),
        "every rotation done: {rotations:?}"
    );
    let record = p.record().await;
    assert!(record.halted.is_none(), "not halted: {:?}", record.halted);
    let marked: Vec<String> = p.cp.admin().get("/api/v1/nodes").body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            n["metadata"]["annotations"][nodecycle_tests::SCALE_DOWN_DISABLED_ANNOTATION] == "true"
        })
        .map(|n| {
            n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(marked.is_empty(), "scale-down-disabled left on {marked:?}");
    records
}

/// Cluster Autoscaler and nodecycle as two writers in the audit log: CA, as its service
/// account ([`nodecycle_tests::CA_USER`]), updated (tainted) exactly `ca_nodes` and evicted
/// pods (201), and wrote nothing else; nodecycle, as the rotator's access entry user, evicted
/// pods too, never one CA evicted, and wrote none of `ca_nodes` once CA had written it (before,
/// the rollout's `PreferNoSchedule` taint may go on an old node); nobody else evicted a pod.
fn assert_ca_and_nodecycle_write_apart(p: &RealPool, ca_nodes: &[String]) {
    let audit = p.cp.audit();
    let by_ca: Vec<_> = audit
        .iter()
        .filter(|e| e.user == nodecycle_tests::CA_USER)
        .collect();
    let strays: Vec<_> = by_ca
        .iter()
        .filter(|e| {
            let taint = e.verb == "update" && e.resource == "nodes" && e.subresource.is_empty();
            let eviction =
                e.verb == "create" && e.resource == "pods" && e.subresource == "eviction";
            !(taint || eviction)
        })
        .collect();
    assert!(strays.is_empty(), "CA wrote something else: {strays:#?}");
    let tainted: BTreeSet<&str> = by_ca
        .iter()
        .filter(|e| e.resource == "nodes" && e.code == 200)
        .map(|e| e.name.as_str())
        .collect();
    let expected: BTreeSet<&str> = ca_nodes.iter().map(String::as_str).collect();
    assert_eq!(tainted, expected, "the nodes CA tainted");
    // nodecycle may have tainted an old node PreferNoSchedule (the rollout replaces it) before
    // CA chose it; once CA wrote it, the node is CA's and nodecycle writes nothing on it.
    let when = |e: &nodecycle_tests::AuditEvent| {
        chrono::DateTime::parse_from_rfc3339(&e.received).expect("audit time")
    };
    let nodecycle_on_ca_nodes: Vec<_> = audit
        .iter()
        .filter(|e| e.user == p.rotator.user && e.resource == "nodes")
        .filter(|e| expected.contains(e.name.as_str()))
        .filter(|e| {
            by_ca
                .iter()
                .filter(|c| c.resource == "nodes" && c.name == e.name)
                .any(|c| when(c) <= when(e))
        })
        .collect();
    assert!(
        nodecycle_on_ca_nodes.is_empty(),
        "nodecycle wrote CA's nodes after CA took them: {nodecycle_on_ca_nodes:#?}"
    );
    let evictions: Vec<_> = audit
        .iter()
        .filter(|e| e.verb == "create" && e.resource == "pods" && e.subresource == "eviction")
        .collect();
    let others: Vec<_> = evictions
        .iter()
        .filter(|e| e.user != nodecycle_tests::CA_USER && e.user != p.rotator.user)
        .collect();
    assert!(
        others.is_empty(),
        "evictions by a third writer: {others:#?}"
    );
    let evicted_by = |user: &str| -> BTreeSet<&str> {
        evictions
            .iter()
            .filter(|e| e.user == user && e.code == 201)
            .map(|e| e.name.as_str())
            .collect()
    };
    let (ca, nodecycle) = (
        evicted_by(nodecycle_tests::CA_USER),
        evicted_by(&p.rotator.user),
    );
    assert!(
        !ca.is_empty() && !nodecycle.is_empty(),
        "both evicted: CA {ca:?}, nodecycle {nodecycle:?}"
    );
    assert!(
        ca.is_disjoint(&nodecycle),
        "a pod evicted by both: CA {ca:?}, nodecycle {nodecycle:?}"
    );
}

/// Stand-in scenario (b) of tests/tests/autoscaler.rs (`ca_removes_an_old_node_nobody_rotates`)
/// on the real API: after the first pass (2 surges: desired 8), Cluster Autoscaler finds an old
/// node nobody rotates unneeded (`web`'s PDB, `maxUnavailable: 2`, allows moving its pods),
/// taints it, evicts its pods through the Eviction API and terminates its instance with a
/// decrement (8 -> 7), recorded as CA's. nodecycle keeps that scale-down: the rollout ends with
/// every instance on the new AMI and the group at 5 (CA's 7 less nodecycle's 2), the removed
/// instance never rotated, nodecycle's capacity changes only its 5 surges and 5 give-backs, its
/// terminations the 5 old instances left and nothing else; every PDB status the disruption
/// controller wrote, through CA's evictions and nodecycle's, kept 10 healthy; no instance left
/// the group with a workload pod not being deleted on its node. CA acts as its service account
/// with its Helm chart's ClusterRole (update nodes, not patch or delete them; evict pods, not
/// delete them), and the audit log shows two writers: CA tainted only its node and evicted
/// its pods, nodecycle evicted others and never wrote CA's node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_autoscaler_removes_an_old_node_nobody_rotates_and_nodecycle_keeps_it() {
    let p = real_pool().await;
    let ca = nodecycle_tests::RealClusterAutoscaler::new(&p.cp, &p.cloud, GROUP);
    // CA's service account may do what the chart grants, no more.
    let groups = [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
    ];
    for (verb, resource, allowed) in [
        ("update", "nodes", true),
        ("patch", "nodes", false),
        ("delete", "nodes", false),
        ("create", "pods/eviction", true),
        ("delete", "pods", false),
        ("list", "pods", true),
    ] {
        assert_eq!(
            p.cp.can(nodecycle_tests::CA_USER, &groups, verb, resource, None)
                .0,
            allowed,
            "CA may {verb} {resource}: {allowed}"
        );
    }
    let t0 = chrono::Utc::now();
    let statuses_before = roll_beside_ca(&p, t0).await;
    p.pass(t0).await;
    assert_eq!(
        p.cloud
            .control("group_instances", json!({ "group": GROUP }))["desired"],
        8,
        "two surges"
    );
    let (name, instance, down) = ca_removes_one(&ca, unrotated_old_nodes(&p).await);
    assert_eq!((down.from, down.to), (Some(8), Some(7)), "{down:?}");
    p.cp.sync_group(&p.cloud, GROUP);

    let outcomes = p
        .passes_until(t0 + chrono::Duration::minutes(1), "the rollout", |o| {
            !o.images.is_empty()
                && o.images.iter().all(|i| *i == p.new)
                && o.rotations.iter().all(|r| !r.in_flight())
        })
        .await;
    eprintln!(
        "CA removed {name} after the first pass; the rollout took {} more",
        outcomes.len()
    );
    assert_roll_end(&p, 5).await;
    let instances = p.adapters.group_instances(GROUP).await;
    assert_eq!(
        instances.len(),
        5,
        "CA's 7 less nodecycle's 2: {instances:?}"
    );
    assert_eq!(
        p.cloud
            .control("group_instances", json!({ "group": GROUP }))["desired"],
        5
    );
    assert!(
        p.rotations()
            .await
            .iter()
            .all(|r| r.instance_id != instance),
        "CA's node was not rotated"
    );
    let records = p.cloud.scaling_records(Some(GROUP));
    assert_eq!(
        assert_nodecycle_never_lowered(&records),
        5,
        "one surge per rotated node"
    );
    let by_nodecycle: Vec<_> = records
        .terminations
        .iter()
        .filter(|t| t.by == "api")
        .collect();
    assert_eq!(
        by_nodecycle.len(),
        5,
        "nodecycle terminated the 5 old instances left, nothing else: {by_nodecycle:?}"
    );
    assert!(
        by_nodecycle.iter().all(|t| t.instance != instance),
        "{by_nodecycle:?}"
    );
    let by_ca: Vec<_> = records
        .terminations
        .iter()
        .filter(|t| t.by == "cluster-autoscaler")
        .collect();
    assert_eq!(by_ca.len(), 1, "{by_ca:?}");
    assert_eq!(
        (by_ca[0].instance.as_str(), by_ca[0].decrement),
        (instance.as_str(), Some(true))
    );
    for s in &p.cp.pdb_statuses(NS, "web")[statuses_before..] {
        assert!(within_budget(s, 10), "web PDB status {s}");
    }
    assert_ca_and_nodecycle_write_apart(&p, &[name]);
}

/// Stand-in `ca_scales_the_group_down_to_min_size_mid_roll` of tests/tests/autoscaler.rs on the
/// real API: the group's MinSize is 5; after the first pass (2 surges: desired 8) Cluster
/// Autoscaler removes three old nodes nobody rotates, one at a time (taint, evictions within
/// `web`'s PDB, terminate with a decrement: 8 -> 5, CA's), and then refuses any further node
/// ("group at MinSize"). The terminates nodecycle then makes go without a decrement (Auto
/// Scaling refuses one below MinSize) and the rollout ends with every instance on the new AMI
/// and the group at 5, its MinSize and CA's size; nodecycle never lowered desired capacity
/// otherwise; every PDB status kept 10 healthy; no instance left the group with a workload pod
/// not being deleted on its node; the audit log shows CA (its service account) tainting only
/// its three nodes and nodecycle never writing them, and no pod evicted by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_autoscaler_scales_the_group_to_min_size_mid_roll_and_the_roll_ends_there() {
    let p = real_pool().await;
    let ca = nodecycle_tests::RealClusterAutoscaler::new(&p.cp, &p.cloud, GROUP);
    p.adapters
        .clients
        .autoscaling
        .update_auto_scaling_group()
        .auto_scaling_group_name(GROUP)
        .min_size(5)
        .send()
        .await
        .unwrap();
    let t0 = chrono::Utc::now();
    let statuses_before = roll_beside_ca(&p, t0).await;
    p.pass(t0).await;
    let desired = || {
        p.cloud
            .control("group_instances", json!({ "group": GROUP }))["desired"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(desired(), 8, "two surges");
    let mut removed = Vec::new();
    for _ in 0..3 {
        let (name, instance, down) = ca_removes_one(&ca, unrotated_old_nodes(&p).await);
        assert_eq!(down.to, down.from.map(|f| f - 1), "{down:?}");
        p.cp.sync_group(&p.cloud, GROUP);
        removed.push((name, instance));
    }
    assert_eq!(desired(), 5, "CA at MinSize");
    let any = p.nodes().remove(0).0;
    let more = ca.scale_down(&any, false);
    assert_eq!(more.action, "noScaleDown", "{more:?}");
    assert!(more.reason.contains("MinSize"), "{more:?}");

    let outcomes = p
        .passes_until(t0 + chrono::Duration::minutes(1), "the rollout", |o| {
            !o.images.is_empty()
                && o.images.iter().all(|i| *i == p.new)
                && o.rotations.iter().all(|r| !r.in_flight())
        })
        .await;
    eprintln!(
        "CA removed {removed:?} after the first pass; the rollout took {} more",
        outcomes.len()
    );
    assert_roll_end(&p, 5).await;
    let instances = p.adapters.group_instances(GROUP).await;
    assert_eq!(instances.len(), 5, "at MinSize: {instances:?}");
    assert_eq!(desired(), 5);
    let records = p.cloud.scaling_records(Some(GROUP));
    assert_nodecycle_never_lowered(&records);
    assert!(
        records
            .terminations
            .iter()
            .any(|t| t.by == "api" && t.decrement == Some(false)),
        "a terminate at MinSize went without a decrement: {:?}",
        records.terminations
    );
    let rotated: BTreeSet<String> = p
        .rotations()
        .await
        .iter()
        .map(|r| r.instance_id.clone())
        .collect();
    assert!(
        removed.iter().all(|(_, i)| !rotated.contains(i)),
        "CA's nodes were not rotated"
    );
    for s in &p.cp.pdb_statuses(NS, "web")[statuses_before..] {
        assert!(within_budget(s, 10), "web PDB status {s}");
    }
    let ca_nodes: Vec<String> = removed.into_iter().map(|(n, _)| n).collect();
    assert_ca_and_nodecycle_write_apart(&p, &ca_nodes);
}

/// Stand-in scenario (e) of tests/tests/autoscaler.rs (`a_bad_ami_still_quarantines_beside_ca`)
/// on the real API: the new AMI is bad, its instances boot but their nodes never become Ready
/// (they register `Ready` `False`, `KubeletNotReady`: [`ControlPlane::never_ready_nodes_of_image`];
/// the node lifecycle controller taints them not-ready). After the first pass (2 surges on it:
/// desired 8), Deployment `burst` asks for one pod more than the schedulable nodes can take, the
/// scheduler reports it `Unschedulable`, and Cluster Autoscaler adds a node for it (8 -> 9,
/// CA's), which launches on the bad AMI too and never becomes Ready either. The rotation fails,
/// the release is quarantined and the pool's desired AMI is the old one again; every capacity
/// change after CA's keeps desired capacity at or above CA's 7 (its 9 less nodecycle's 2), and
/// the group ends there with CA's instance the only one on the bad AMI. CA then removes that
/// NotReady node (nothing runs on it), and the passes after leave the group at 6, every
/// instance on the old AMI. nodecycle's capacity changes are only +1 surges and -1 give-backs;
/// no instance left the group with a workload pod not being deleted on its node; every `web`
/// PDB status kept 10 healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_ami_still_quarantines_and_rolls_back_beside_cluster_autoscaler() {
    let p = real_pool().await;
    let admin = p.cp.admin();
    let ca = nodecycle_tests::RealClusterAutoscaler::new(&p.cp, &p.cloud, GROUP);
    p.cp.never_ready_nodes_of_image(&p.new);
    let t0 = chrono::Utc::now();
    let statuses_before = roll_beside_ca(&p, t0).await;
    p.pass(t0).await;
    let desired = || {
        p.cloud
            .control("group_instances", json!({ "group": GROUP }))["desired"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(desired(), 8, "two surges");
    let surges: Vec<Value> = admin.get("/api/v1/nodes").body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| {
            n["metadata"]["annotations"][nodecycle_tests::IMAGE_ANNOTATION] == p.new.as_str()
        })
        .cloned()
        .collect();
    assert_eq!(surges.len(), 2, "two surge nodes registered");
    for n in &surges {
        let name = n["metadata"]["name"].as_str().unwrap();
        p.cp.wait_for(&format!("{name} tainted not-ready"), |_| {
            admin.get(&format!("/api/v1/nodes/{name}")).body["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["key"] == "node.kubernetes.io/not-ready" && t["effect"] == "NoSchedule")
                .then_some(())
        });
        let ready = condition(n, "Ready");
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("False"), Some("KubeletNotReady")),
            "{n}"
        );
    }

    let schedulable_nodes = admin.get("/api/v1/nodes").body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| schedulable(n))
        .count();
    assert_eq!(schedulable_nodes, 6, "the surge nodes are not schedulable");
    let mut burst = deployment("burst", u32::try_from(schedulable_nodes + 1).unwrap());
    burst["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({ "requests": { "cpu": BURST_CPU } });
    create(
        &admin,
        &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        burst,
    );
    p.cp.wait_for("1 burst pod Unschedulable, the others Ready", |_| {
        let pods = pods_of(&admin, "burst");
        (pods.len() == schedulable_nodes + 1
            && pods.iter().filter(|p| p.3).count() == schedulable_nodes
            && ca.unschedulable_pods().len() == 1)
            .then_some(())
    });
    let up = ca.scale_up(1);
    assert_eq!(up.action, "scaleUp", "{up:?}");
    assert_eq!((up.from, up.to), (Some(8), Some(9)), "{up:?}");
    let ca_size: i32 = 7;

    let outcomes = p
        .passes_until(
            t0 + chrono::Duration::minutes(1),
            "the rotation failing",
            |o| o.rotations.iter().all(|r| !r.in_flight()),
        )
        .await;
    let rotations = p.rotations().await;
    assert!(
        rotations
            .iter()
            .any(|r| r.step == nodecycle::rotation::Step::Failed),
        "a rotation failed: {rotations:?}"
    );
    let quarantine = p.new_quarantined().await;
    assert!(quarantine.is_some(), "the release is quarantined");
    let record = p.record().await;
    assert_eq!(
        record.desired.as_ref().map(|a| a.id.as_str()),
        Some(p.old.as_str()),
        "rolled back"
    );
    let records = p.cloud.scaling_records(Some(GROUP));
    assert_nodecycle_never_lowered(&records);
    let after_ca: Vec<_> = records
        .capacity
        .iter()
        .skip_while(|c| c.by != "cluster-autoscaler")
        .collect();
    assert!(
        after_ca.iter().all(|c| c.to >= ca_size),
        "desired capacity went below CA's {ca_size}: {after_ca:#?}"
    );
    assert_eq!(desired(), i64::from(ca_size), "CA's size");
    let images = p.adapters.group_images(GROUP).await;
    assert_eq!(images.len(), ca_size as usize, "{images:?}");
    assert_eq!(
        images.iter().filter(|i| **i == p.new).count(),
        1,
        "CA's instance is the one left on the bad AMI: {images:?}"
    );
    eprintln!(
        "quarantined after {} passes: {:?}",
        outcomes.len() + 1,
        quarantine.map(|q| q.cause)
    );

    // CA removes its NotReady node on the bad AMI (nothing runs there).
    let bad = p
        .nodes()
        .into_iter()
        .find(|n| n.2 == p.new)
        .expect("CA's node on the bad AMI");
    let down = ca.scale_down(&bad.0, false);
    assert_eq!(down.action, "scaleDown", "{down:?}");
    assert_eq!((down.from, down.to), (Some(7), Some(6)), "{down:?}");
    p.cp.sync_group(&p.cloud, GROUP);
    let start = outcomes.len() as i64 + 1;
    for i in 0..5 {
        p.pass(t0 + chrono::Duration::minutes(start + i)).await;
    }
    let images = p.adapters.group_images(GROUP).await;
    assert!(
        images.iter().all(|i| *i == p.old),
        "all on the old AMI: {images:?}"
    );
    assert_eq!(images.len(), 6, "{images:?}");
    assert_eq!(desired(), 6);
    let records = p.cloud.scaling_records(Some(GROUP));
    assert_nodecycle_never_lowered(&records);
    for s in &p.cp.pdb_statuses(NS, "web")[statuses_before..] {
        assert!(within_budget(s, 10), "web PDB status {s}");
    }
}
