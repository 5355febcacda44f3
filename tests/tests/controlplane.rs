//! nodecycle against a real Kubernetes control plane (issue 44): kube-apiserver, the controller
//! manager's disruption, ReplicaSet and Deployment controllers, the scheduler, and KWOK nodes
//! (`nodecycle_tests::ControlPlane`). nodecycle connects with its own EKS token, signed with
//! the credentials of a function role assumed in the fake cloud: the harness's authentication
//! webhook validates it against the fake cloud's STS and maps the role to the group of its EKS
//! access entry, and deploy/rbac.yaml, applied to the API server, decides what that group may do.

// Test code: helpers outside #[test] fns panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use nodecycle::kube::{KubeOverrides, drain_command};
use nodecycle_tests::{AccessEntry, ControlPlane, FakeCloud, KubeClient, KwokNode};
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

    let report = drain(&cp, &rotator, &node.instance_id, Duration::from_secs(10))
        .await
        .0
        .expect("the drain reports");
    assert!(!report.done, "{report:?}");
    assert_eq!(report.evicted, 0, "{report:?}");
    assert_eq!(report.deleted, 0, "{report:?}");
    assert_eq!(report.blocked_by, vec![format!("{NS}/db")], "{report:?}");

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
