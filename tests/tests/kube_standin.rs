//! The Kubernetes API server stand-in, exercised over real HTTPS with a tiny
//! client (no nodecycle code): authentication, PDB-guarded evictions, graceful
//! deletion, DaemonSet and mirror pods, patches, selectors, events, and nodes
//! that follow moto's EC2 instances.

// Test code: helpers outside #[test] fns panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use nodecycle_tests::{
    FakeCloud, KubeClient, KubeStandIn, NodeFixture, PdbFixture, PodFixture, SyncNodes,
    TokenParams, eks_token,
};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn eviction(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": { "name": name, "namespace": ns },
    })
}

fn evict_path(ns: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{ns}/pods/{name}/eviction")
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn stand_in() -> (FakeCloud, KubeStandIn, KubeClient) {
    let cloud = FakeCloud::start();
    let kube = cloud.create_kube("prod");
    let client = kube.client();
    (cloud, kube, client)
}

fn b64url(s: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

#[test]
fn authentication_accepts_only_tokens_for_this_cluster() {
    let cloud = FakeCloud::start();
    let kube = cloud.create_kube("prod");
    cloud.create_kube("staging");
    let anon = kube.client_with_token(None);
    let with = |t: &str| kube.client_with_token(Some(t.to_string()));

    // A valid token works.
    let ok = kube.client().get("/api/v1/nodes");
    assert_eq!(ok.status, 200, "{}", ok.raw);
    assert_eq!(ok.body["kind"], "NodeList");

    // No credentials: anonymous, which RBAC forbids (EKS has anonymous auth
    // on) except for the public info paths.
    let r = anon.get("/api/v1/nodes");
    assert_eq!(r.status, 403, "{}", r.raw);
    assert_eq!(r.body["reason"], "Forbidden");
    assert_eq!(
        r.body["message"],
        "nodes is forbidden: User \"system:anonymous\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
    );
    assert_eq!(anon.get("/version").status, 200);

    let unauthorized = |client: KubeClient, what: &str| {
        let r = client.get("/api/v1/nodes");
        assert_eq!(r.status, 401, "{what}: {}", r.raw);
        assert_eq!(
            r.body,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Unauthorized", "reason": "Unauthorized", "code": 401}),
            "{what}"
        );
    };
    let good = kube.token();
    let url = nodecycle_tests::presigned_url(&TokenParams {
        cluster: "prod",
        region: "us-east-2",
        access_key: "testing",
        secret_key: "testing",
        session_token: None,
        time: SystemTime::now(),
    });
    unauthorized(
        with(&good.replace("k8s-aws-v1.", "k8s-aws-v2.")),
        "wrong prefix",
    );
    unauthorized(with("k8s-aws-v1.%%%not-base64%%%"), "bad base64");
    unauthorized(
        with(&format!("k8s-aws-v1.{}==", b64url(&url))),
        "padded base64",
    );
    unauthorized(
        with(&format!(
            "k8s-aws-v1.{}",
            b64url(&url.replace("sts.us-east-2.amazonaws.com", "sts.evil.example.com"))
        )),
        "wrong host",
    );
    unauthorized(
        with(&format!(
            "k8s-aws-v1.{}",
            b64url(&url.replace("X-Amz-Signature=", "X-Amz-Signature=0"))
        )),
        "tampered signature",
    );
    let staging = eks_token(&TokenParams {
        cluster: "staging",
        region: "us-east-2",
        access_key: "testing",
        secret_key: "testing",
        session_token: None,
        time: SystemTime::now(),
    });
    unauthorized(with(&staging), "token for another cluster");
    let expired = kube.token_at(SystemTime::now() - Duration::from_secs(20 * 60));
    unauthorized(with(&expired), "expired");
    let wrong_secret = eks_token(&TokenParams {
        cluster: "prod",
        region: "us-east-2",
        access_key: "testing",
        secret_key: "not-the-secret",
        session_token: None,
        time: SystemTime::now(),
    });
    unauthorized(with(&wrong_secret), "wrong secret");
    let mut basic = kube.client_with_token(None);
    basic = basic.with_token(Some(String::new()));
    unauthorized(basic, "empty bearer");

    // Session credentials sign the token too.
    let session = eks_token(&TokenParams {
        cluster: "prod",
        region: "us-east-2",
        access_key: "testing",
        secret_key: "testing",
        session_token: Some("FwoGZXIvYXdzEXAMPLE/+token=="),
        time: SystemTime::now(),
    });
    assert_eq!(with(&session).get("/api/v1/nodes").status, 200);
    // The staging stand-in accepts the staging token.
    let staging_kube = KubeClient::new(
        cloud.control("create_kube", json!({"cluster": "staging"}))["endpoint"]
            .as_str()
            .unwrap(),
        &std::fs::read(
            cloud.control("create_kube", json!({"cluster": "staging"}))["caFile"]
                .as_str()
                .unwrap(),
        )
        .unwrap(),
        Some(staging),
    );
    assert_eq!(staging_kube.get("/api/v1/pods").status, 200);

    // The reasons are logged for debugging (never sent to the client).
    let reasons: Vec<String> = kube
        .requests()
        .into_iter()
        .filter_map(|r| r.auth_error)
        .collect();
    assert!(reasons.iter().any(|r| r.contains("expired")), "{reasons:?}");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("signature does not match")),
        "{reasons:?}"
    );
}

#[tokio::test]
async fn describe_cluster_leads_to_the_stand_in() {
    let cloud = FakeCloud::start();
    let kube = cloud.create_kube("prod");
    let eks = aws_sdk_eks::Client::new(&cloud.sdk_config().await);
    let out = eks
        .describe_cluster()
        .name("prod")
        .send()
        .await
        .expect("DescribeCluster");
    let cluster = out.cluster().expect("cluster");
    assert_eq!(cluster.endpoint(), Some(kube.endpoint.as_str()));
    let ca_b64 = cluster
        .certificate_authority()
        .and_then(|c| c.data())
        .expect("CA data");
    let ca_pem = base64::engine::general_purpose::STANDARD
        .decode(ca_b64)
        .expect("CA data is base64");
    assert!(String::from_utf8_lossy(&ca_pem).starts_with("-----BEGIN CERTIFICATE-----"));
    let client = KubeClient::new(cluster.endpoint().unwrap(), &ca_pem, Some(kube.token()));
    let v = client.get("/version");
    assert_eq!(v.status, 200);
    assert_eq!(v.body["minor"], "30");

    // A control-plane upgrade shows in /version too.
    cloud.set_cluster_version("prod", "1.31");
    assert_eq!(
        client.get("/version").body["gitVersion"],
        "v1.31.0-eks-fakecloud"
    );

    // A client that does not trust the cluster CA cannot connect.
    let other_ca = cloud.create_kube("other").ca_pem();
    let untrusting = KubeClient::new(&kube.endpoint, &other_ca, Some(kube.token()));
    assert!(
        untrusting
            .try_request("GET", "/version", None, None)
            .is_err()
    );
}

#[test]
fn eviction_respects_the_pdb_until_another_pod_is_ready() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-0000000000000001a");
    kube.add_node("n2", "aws:///us-east-2b/i-0000000000000002b");
    for i in 0..2 {
        kube.add_pod(
            PodFixture::new("shop", &format!("web-{i}"))
                .node("n1")
                .label("app", "web")
                .owner("ReplicaSet", "web-7d9c")
                .grace_seconds(1),
        );
    }
    kube.add_pdb(
        PdbFixture::new("shop", "web")
            .match_label("app", "web")
            .min_available(2),
    );

    let r = client.post(&evict_path("shop", "web-0"), &eviction("shop", "web-0"));
    assert_eq!(r.status, 429, "{}", r.raw);
    assert_eq!(
        r.body,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "reason": "TooManyRequests",
            "details": {"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]},
            "code": 429
        })
    );
    let pdb = client.get("/apis/policy/v1/namespaces/shop/poddisruptionbudgets/web");
    assert_eq!(pdb.body["status"]["disruptionsAllowed"], 0);
    assert_eq!(pdb.body["status"]["expectedPods"], 2);

    // A replacement pod comes up on n2, not ready yet: still blocked.
    kube.add_pod(
        PodFixture::new("shop", "web-2")
            .node("n2")
            .label("app", "web")
            .owner("ReplicaSet", "web-7d9c")
            .ready(false),
    );
    let r = client.post(&evict_path("shop", "web-0"), &eviction("shop", "web-0"));
    assert_eq!(r.status, 429, "{}", r.raw);

    // Once it is ready, the eviction is accepted.
    kube.set_pod_ready("shop", "web-2", true);
    let r = client.post(&evict_path("shop", "web-0"), &eviction("shop", "web-0"));
    assert_eq!(r.status, 201, "{}", r.raw);
    assert_eq!(
        r.body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    );
    // The evicted pod is terminating, so the next eviction is refused again.
    let r = client.post(&evict_path("shop", "web-1"), &eviction("shop", "web-1"));
    assert_eq!(r.status, 429, "{}", r.raw);
    assert_eq!(
        r.body["details"]["causes"][0]["message"],
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    );
    // Evicting the already-terminating pod again is accepted.
    let r = client.post(&evict_path("shop", "web-0"), &eviction("shop", "web-0"));
    assert_eq!(r.status, 201, "{}", r.raw);
    kube.wait_for("web-0 to go", WAIT, |s| {
        s.pod("shop", "web-0").is_none().then_some(())
    });

    // Missing pod: 404.
    let r = client.post(&evict_path("shop", "nope"), &eviction("shop", "nope"));
    assert_eq!(r.status, 404);
    assert_eq!(r.body["reason"], "NotFound");
    assert_eq!(r.body["message"], "pods \"nope\" not found");
    assert_eq!(r.body["details"], json!({"name": "nope", "kind": "pods"}));

    // A Pending pod may always be evicted.
    kube.add_pod(
        PodFixture::new("shop", "web-pending")
            .label("app", "web")
            .owner("ReplicaSet", "web-7d9c"),
    );
    let r = client.post(
        &evict_path("shop", "web-pending"),
        &eviction("shop", "web-pending"),
    );
    assert_eq!(r.status, 201, "{}", r.raw);

    // Two PDBs on one pod: 500.
    kube.add_pdb(
        PdbFixture::new("shop", "web-too")
            .match_expression("app", "In", &["web", "api"])
            .max_unavailable(1),
    );
    let r = client.post(&evict_path("shop", "web-2"), &eviction("shop", "web-2"));
    assert_eq!(r.status, 500, "{}", r.raw);
    assert_eq!(
        r.body["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
}

#[test]
fn pdb_percentages_round_up_like_the_disruption_controller() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    for i in 0..3 {
        kube.add_pod(
            PodFixture::new("default", &format!("api-{i}"))
                .node("n1")
                .label("app", "api")
                .owner("ReplicaSet", "api-rs"),
        );
    }
    kube.set_scale("default", "ReplicaSet", "api-rs", 3);
    kube.add_pdb(
        PdbFixture::new("default", "min")
            .match_label("app", "api")
            .min_available("50%"),
    );
    let st = &client
        .get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/min")
        .body["status"];
    // ceil(3 * 50%) = 2 must stay: 1 disruption allowed.
    assert_eq!(
        (
            st["desiredHealthy"].as_i64(),
            st["disruptionsAllowed"].as_i64()
        ),
        (Some(2), Some(1))
    );
    client.delete(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/min",
        None,
    );
    kube.add_pdb(
        PdbFixture::new("default", "max")
            .match_label("app", "api")
            .max_unavailable("50%"),
    );
    let st = &client
        .get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/max")
        .body["status"];
    // ceil(3 * 50%) = 2 may be unavailable: 1 must stay, 2 disruptions allowed.
    assert_eq!(
        (
            st["desiredHealthy"].as_i64(),
            st["disruptionsAllowed"].as_i64()
        ),
        (Some(1), Some(2))
    );
    let list = client.get("/apis/policy/v1/namespaces/default/poddisruptionbudgets");
    assert_eq!(list.body["kind"], "PodDisruptionBudgetList");
    assert_eq!(names(&list.body), vec!["max"]);
}

#[test]
fn deleted_pod_goes_only_after_its_grace_period() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    kube.add_pod(
        PodFixture::new("default", "slow")
            .node("n1")
            .grace_seconds(30),
    );
    let r = client.delete(
        "/api/v1/namespaces/default/pods/slow",
        Some(&json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 2})),
    );
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(r.body["kind"], "Pod");
    assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 2);
    assert!(r.body["metadata"]["deletionTimestamp"].is_string());
    // Still there right after, terminating.
    let g = client.get("/api/v1/namespaces/default/pods/slow");
    assert_eq!(g.status, 200);
    assert!(g.body["metadata"]["deletionTimestamp"].is_string());
    kube.wait_for("pod to disappear", WAIT, |s| {
        s.pod("default", "slow").is_none().then_some(())
    });
    let g = client.get("/api/v1/namespaces/default/pods/slow");
    assert_eq!(g.status, 404);
    assert_eq!(g.body["message"], "pods \"slow\" not found");

    // The query parameter works too, and default is the pod's own period.
    kube.add_pod(PodFixture::new("default", "q").node("n1"));
    let r = client.delete(
        "/api/v1/namespaces/default/pods/q?gracePeriodSeconds=1",
        None,
    );
    assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 1);
    kube.add_pod(PodFixture::new("default", "d").node("n1").grace_seconds(45));
    let r = client.delete("/api/v1/namespaces/default/pods/d", None);
    assert_eq!(r.body["metadata"]["deletionGracePeriodSeconds"], 45);
    kube.wait_for("pod q to disappear", WAIT, |s| {
        s.pod("default", "q").is_none().then_some(())
    });
}

#[test]
fn daemonset_and_mirror_pods_come_back() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    let ds = kube.add_pod(
        PodFixture::new("kube-system", "aws-node-x7k2p")
            .node("n1")
            .owner("DaemonSet", "aws-node")
            .grace_seconds(1),
    );
    let r = client.post(
        &evict_path("kube-system", "aws-node-x7k2p"),
        &eviction("kube-system", "aws-node-x7k2p"),
    );
    assert_eq!(r.status, 201, "{}", r.raw);
    let new = kube.wait_for("a new aws-node pod", WAIT, |s| {
        s.pods_on("n1")
            .into_iter()
            .find(|p| {
                let name = p["metadata"]["name"].as_str().unwrap();
                name.starts_with("aws-node-") && name != "aws-node-x7k2p"
            })
            .cloned()
    });
    assert_ne!(new["metadata"]["uid"], ds["metadata"]["uid"]);
    assert_eq!(new["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
    assert_eq!(new["status"]["phase"], "Running");

    let mirror = kube.add_pod(
        PodFixture::new("kube-system", "kube-proxy-n1")
            .node("n1")
            .mirror(),
    );
    let r = client.delete("/api/v1/namespaces/kube-system/pods/kube-proxy-n1", None);
    assert_eq!(r.status, 200);
    let g = client.get("/api/v1/namespaces/kube-system/pods/kube-proxy-n1");
    assert_eq!(g.status, 200, "the kubelet recreates its mirror pod");
    assert_ne!(g.body["metadata"]["uid"], mirror["metadata"]["uid"]);
    assert!(g.body["metadata"]["deletionTimestamp"].is_null());
}

#[test]
fn cordon_by_merge_patch_and_concurrency_checks() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node_with(
        NodeFixture::new("n1")
            .provider_id("aws:///us-east-2a/i-0abc")
            .label("pool", "a"),
    );
    let r = client.patch(
        "/api/v1/nodes/n1",
        "application/merge-patch+json",
        &json!({"spec": {"unschedulable": true}}),
    );
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(
        r.body["spec"],
        json!({"providerID": "aws:///us-east-2a/i-0abc", "unschedulable": true})
    );
    let rv = r.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let state = kube.state();
    let patches = state.requests_to("PATCH", "/api/v1/nodes/n1");
    assert_eq!(patches.len(), 1);
    assert_eq!(
        patches[0].body,
        Some(json!({"spec": {"unschedulable": true}}))
    );
    assert_eq!(
        patches[0].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(patches[0].status, 200);

    // Field selector on spec.unschedulable.
    let l = client.get("/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue");
    assert_eq!(names(&l.body), vec!["n1"]);
    assert!(
        l.body["items"][0].get("kind").is_none(),
        "list items carry no kind"
    );
    let l = client.get("/api/v1/nodes?labelSelector=pool%20in%20(a,b)");
    assert_eq!(names(&l.body), vec!["n1"]);

    // JSON patch with a failing test op: 422, nothing changed.
    let r = client.patch(
        "/api/v1/nodes/n1",
        "application/json-patch+json",
        &json!([{"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
                {"op": "replace", "path": "/spec/unschedulable", "value": false}]),
    );
    assert_eq!(r.status, 422, "{}", r.raw);
    assert_eq!(r.body["reason"], "Invalid");
    assert_eq!(
        r.body["message"],
        "the server rejected our request due to an error in our request"
    );
    let logged = kube.requests().last().and_then(|q| q.error_detail.clone());
    assert!(logged.is_some_and(|d| d.contains("test failed")));
    let r = client.patch(
        "/api/v1/nodes/n1",
        "application/json-patch+json",
        &json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                {"op": "add", "path": "/metadata/labels/drained", "value": "yes"}]),
    );
    assert_eq!(r.status, 200, "{}", r.raw);
    assert_eq!(r.body["metadata"]["labels"]["drained"], "yes");

    // Strategic merge patch on taints (replaced as a whole).
    let r = client.patch(
        "/api/v1/nodes/n1",
        "application/strategic-merge-patch+json",
        &json!({"spec": {"taints": [{"key": "nodecycle/draining", "effect": "NoSchedule"}]}}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body["spec"]["taints"][0]["key"], "nodecycle/draining");

    // PUT with a stale resourceVersion: 409.
    let mut stale = client.get("/api/v1/nodes/n1").body;
    stale["metadata"]["resourceVersion"] = json!(rv);
    let r = client.put("/api/v1/nodes/n1", &stale);
    assert_eq!(r.status, 409, "{}", r.raw);
    assert_eq!(r.body["reason"], "Conflict");
    assert_eq!(
        r.body["message"],
        "Operation cannot be fulfilled on nodes \"n1\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let fresh = client.get("/api/v1/nodes/n1").body;
    let r = client.put("/api/v1/nodes/n1", &fresh);
    assert_eq!(r.status, 200);

    let r = client.patch("/api/v1/nodes/n1", "application/json", &json!({}));
    assert_eq!(r.status, 415);
    let r = client.delete("/api/v1/nodes/n1", None);
    assert_eq!(r.status, 200);
    assert_eq!(r.body["status"], "Success");
    assert_eq!(client.get("/api/v1/nodes/n1").status, 404);
}

#[test]
fn pod_field_selectors() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    kube.add_node("n2", "aws:///us-east-2b/i-2");
    kube.add_pod(PodFixture::new("a", "p1").node("n1"));
    kube.add_pod(PodFixture::new("b", "p2").node("n1").phase("Succeeded"));
    kube.add_pod(PodFixture::new("a", "p3").node("n2"));
    kube.add_pod(PodFixture::new("a", "p4"));

    let l = client.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1");
    assert_eq!(l.body["kind"], "PodList");
    assert_eq!(names(&l.body), vec!["p1", "p2"]);
    let l = client.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1,status.phase!%3DSucceeded");
    assert_eq!(names(&l.body), vec!["p1"]);
    let l = client.get("/api/v1/namespaces/a/pods?fieldSelector=spec.nodeName%3D%3Dn2");
    assert_eq!(names(&l.body), vec!["p3"]);
    let l = client.get("/api/v1/namespaces/a/pods?fieldSelector=spec.nodeName%3D");
    assert_eq!(names(&l.body), vec!["p4"]);
    let l = client.get("/api/v1/pods?fieldSelector=status.phase%3DPending");
    assert_eq!(names(&l.body), vec!["p4"]);
    let r = client.get("/api/v1/pods?fieldSelector=spec.nodeNameX%3Dn1");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["message"],
        "field label not supported: spec.nodeNameX"
    );
    // Pagination.
    let l = client.get("/api/v1/pods?limit=3");
    assert_eq!(names(&l.body).len(), 3);
    let cont = l.body["metadata"]["continue"].as_str().unwrap().to_string();
    let l = client.get(&format!("/api/v1/pods?limit=3&continue={cont}"));
    assert_eq!(names(&l.body), vec!["p2"]);
}

#[test]
fn events_recorded_through_both_apis() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    let r = client.post(
        "/api/v1/namespaces/default/events",
        &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "n1.cordon"},
                "involvedObject": {"kind": "Node", "name": "n1", "apiVersion": "v1"},
                "reason": "Cordoned", "message": "nodecycle cordoned the node", "type": "Normal",
                "source": {"component": "nodecycle"}}),
    );
    assert_eq!(r.status, 201, "{}", r.raw);
    let r = client.post(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "n1.drain"},
                "regarding": {"kind": "Node", "name": "n1", "apiVersion": "v1"},
                "reason": "Draining", "note": "evicting 3 pods", "type": "Normal", "action": "Drain",
                "reportingController": "nodecycle.io/ops", "reportingInstance": "ops-1",
                "eventTime": "2024-06-01T00:00:00.000000Z"}),
    );
    assert_eq!(r.status, 201, "{}", r.raw);
    // events.k8s.io/v1 enforces its required fields.
    let r = client.post(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "bad"},
                "regarding": {"kind": "Node", "name": "n1"}, "reason": "X", "type": "Normal"}),
    );
    assert_eq!(r.status, 422, "{}", r.raw);

    let l = client.get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dn1");
    assert_eq!(names(&l.body), vec!["n1.cordon", "n1.drain"]);
    let l = client.get("/apis/events.k8s.io/v1/events?fieldSelector=regarding.name%3Dn1");
    assert_eq!(l.body["apiVersion"], "events.k8s.io/v1");
    assert_eq!(l.body["items"][0]["note"], "nodecycle cordoned the node");
    assert_eq!(
        l.body["items"][1]["reportingController"],
        "nodecycle.io/ops"
    );
    let state = kube.state();
    let reasons: Vec<&str> = state
        .events
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, vec!["Cordoned", "Draining"]);
    assert_eq!(kube.state().events_for("n1").len(), 2);
}

#[tokio::test]
async fn nodes_follow_ec2_instances() {
    let cloud = FakeCloud::start();
    let kube = cloud.create_kube("prod");
    let ec2 = aws_sdk_ec2::Client::new(&cloud.sdk_config().await);
    let good = cloud
        .register_image(nodecycle_tests::ImageFixture::new("good").created("2024-01-01T00:00:00Z"));
    let bad = cloud
        .register_image(nodecycle_tests::ImageFixture::new("bad").created("2024-01-01T00:00:00Z"));
    kube.sync_nodes(SyncNodes {
        never_ready_images: vec![bad.clone()],
        ..SyncNodes::default()
    });
    let run = |image: String| {
        let ec2 = ec2.clone();
        async move {
            let out = ec2
                .run_instances()
                .image_id(image)
                .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
                .min_count(1)
                .max_count(1)
                .tag_specifications(
                    aws_sdk_ec2::types::TagSpecification::builder()
                        .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
                        .tags(
                            aws_sdk_ec2::types::Tag::builder()
                                .key("eks:cluster-name")
                                .value("prod")
                                .build(),
                        )
                        .build(),
                )
                .send()
                .await
                .expect("RunInstances");
            out.instances()[0].instance_id().unwrap().to_string()
        }
    };
    let i_good = run(good).await;
    let i_bad = run(bad).await;
    let find = |s: &nodecycle_tests::KubeState, id: &str| {
        s.nodes
            .iter()
            .find(|n| {
                n["spec"]["providerID"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(id))
            })
            .cloned()
    };
    let node = kube.wait_for("node of the good instance", WAIT, |s| find(s, &i_good));
    let ready = |n: &Value| {
        n["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    assert!(ready(&node));
    assert_eq!(
        node["metadata"]["labels"]["node.kubernetes.io/instance-type"],
        "m5.large"
    );
    assert!(
        node["spec"]["providerID"]
            .as_str()
            .unwrap()
            .starts_with("aws:///us-east-2")
    );
    let bad_node = kube.wait_for("node of the bad instance", WAIT, |s| find(s, &i_bad));
    assert!(!ready(&bad_node));

    ec2.terminate_instances()
        .instance_ids(&i_good)
        .send()
        .await
        .expect("TerminateInstances");
    kube.wait_for("node removal", WAIT, |s| {
        find(s, &i_good).is_none().then_some(())
    });
}

#[test]
fn watch_streams_every_change() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    let list = client.get("/api/v1/nodes");
    let rv = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let watcher = {
        let client = client.clone();
        std::thread::spawn(move || {
            client.get(&format!(
                "/api/v1/nodes?watch=true&resourceVersion={rv}&timeoutSeconds=3"
            ))
        })
    };
    // Changes after the list's resourceVersion are replayed even if they
    // happen before the watch request arrives.
    client.patch(
        "/api/v1/nodes/n1",
        "application/merge-patch+json",
        &json!({"spec": {"unschedulable": true}}),
    );
    kube.add_node("n2", "aws:///us-east-2b/i-2");
    kube.delete_node("n1");
    let resp = watcher.join().expect("watch thread");
    assert_eq!(resp.status, 200);
    let events: Vec<(String, String)> = resp
        .raw
        .lines()
        .map(|l| {
            let e: Value = serde_json::from_str(l).expect("watch event JSON");
            (
                e["type"].as_str().unwrap().to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [("MODIFIED", "n1"), ("ADDED", "n2"), ("DELETED", "n1")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(events, expected);
}

#[test]
fn python_made_tokens_verify_too() {
    // Two independent signers (aws-sigv4 here, hashlib in the stand-in's
    // own kube_token helper) both produce tokens the stand-in accepts.
    let (cloud, kube, _client) = stand_in();
    let token = cloud.control("kube_token", json!({"cluster": "prod"}))["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        kube.client_with_token(Some(token))
            .get("/api/v1/pods")
            .status,
        200
    );
}

#[test]
fn pods_on_a_not_ready_node_stay_terminating_until_the_node_goes() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    kube.add_pod(
        PodFixture::new("default", "stuck")
            .node("n1")
            .grace_seconds(1),
    );
    kube.set_node_ready("n1", None);
    let r = client.post(
        &evict_path("default", "stuck"),
        &eviction("default", "stuck"),
    );
    assert_eq!(r.status, 201, "{}", r.raw);
    // No kubelet to finish the termination: it stays, terminating.
    std::thread::sleep(Duration::from_millis(1500));
    let g = client.get("/api/v1/namespaces/default/pods/stuck");
    assert_eq!(g.status, 200);
    assert!(g.body["metadata"]["deletionTimestamp"].is_string());
    // Deleting the node lets the pod garbage collector remove it.
    assert_eq!(client.delete("/api/v1/nodes/n1", None).status, 200);
    kube.wait_for("pod GC", WAIT, |s| {
        s.pod("default", "stuck").is_none().then_some(())
    });
}

#[test]
fn pods_created_through_the_api_start_on_ready_nodes() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    let r = client.post(
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "job-", "labels": {"app": "job"}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
                "status": {"phase": "Succeeded"}}),
    );
    assert_eq!(r.status, 201, "{}", r.raw);
    let name = r.body["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("job-") && name.len() == 9, "{name}");
    assert_eq!(
        r.body["status"]["phase"], "Running",
        "status in a create is ignored"
    );
    assert!(r.body["metadata"]["uid"].is_string());
    let r = client.post(
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    );
    assert_eq!(r.body["status"]["phase"], "Pending");
    let again = client.post(
        "/api/v1/namespaces/default/pods",
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pending"},
                "spec": {"containers": []}}),
    );
    assert_eq!(again.status, 409);
    assert_eq!(again.body["reason"], "AlreadyExists");
    let l = client.get("/api/v1/namespaces/default/pods?labelSelector=app%3Djob");
    assert_eq!(names(&l.body), vec![name]);
}

#[test]
fn unready_pods_and_the_unhealthy_pod_eviction_policy() {
    let (_cloud, kube, client) = stand_in();
    kube.add_node("n1", "aws:///us-east-2a/i-1");
    for (ns, policy) in [("a", None), ("b", Some("AlwaysAllow"))] {
        kube.add_pod(
            PodFixture::new(ns, "ok")
                .node("n1")
                .label("app", "x")
                .owner("ReplicaSet", "x"),
        );
        kube.add_pod(
            PodFixture::new(ns, "crashing")
                .node("n1")
                .label("app", "x")
                .owner("ReplicaSet", "x")
                .ready(false),
        );
        let mut pdb = PdbFixture::new(ns, "x")
            .match_label("app", "x")
            .min_available(2);
        if let Some(p) = policy {
            pdb = pdb.unhealthy_pod_eviction_policy(p);
        }
        kube.add_pdb(pdb);
    }
    // IfHealthyBudget (default): the app is below budget (1 of 2 healthy), so
    // even the unready pod is protected.
    let r = client.post(&evict_path("a", "crashing"), &eviction("a", "crashing"));
    assert_eq!(r.status, 429, "{}", r.raw);
    assert_eq!(
        r.body["details"]["causes"][0]["message"],
        "The disruption budget x needs 2 healthy pods and has 1 currently"
    );
    // AlwaysAllow: unready pods may always go.
    let r = client.post(&evict_path("b", "crashing"), &eviction("b", "crashing"));
    assert_eq!(r.status, 201, "{}", r.raw);
    let pod = client.get("/api/v1/namespaces/b/pods/crashing").body;
    let cond = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
        .cloned()
        .expect("DisruptionTarget condition");
    assert_eq!(cond["reason"], "EvictionByEvictionAPI");
    // The ready pod is still guarded.
    let r = client.post(&evict_path("b", "ok"), &eviction("b", "ok"));
    assert_eq!(r.status, 429, "{}", r.raw);
}

#[test]
fn rbac_objects_are_validated_and_served_like_the_apiserver() {
    let (_cloud, _kube, client) = stand_in();
    let roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
    let bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let rule = |verbs: Value| json!({"apiGroups": [""], "resources": ["nodes"], "verbs": verbs});

    // Names are path segments (system:... is valid); rules need verbs, groups and resources.
    let r = client.post(
        roles,
        &json!({"metadata": {"name": "system:reader", "labels": {"agg": "yes"}}, "rules": [rule(json!(["get"]))]}),
    );
    assert_eq!(r.status, 201, "{}", r.raw);
    let r = client.post(
        roles,
        &json!({"metadata": {"name": "bad"}, "rules": [{"resources": ["nodes"], "verbs": []}]}),
    );
    assert_eq!(
        (r.status, r.body["reason"].as_str()),
        (422, Some("Invalid"))
    );
    let fields: Vec<&str> = r.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["rules[0].verbs", "rules[0].apiGroups"]);

    // An aggregated role reads with the rules of the roles its selectors match.
    let r = client.post(
        roles,
        &json!({"metadata": {"name": "aggregate"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]}}),
    );
    assert_eq!(r.status, 201, "{}", r.raw);
    let r = client.get(&format!("{roles}/aggregate"));
    assert_eq!(r.body["rules"], json!([rule(json!(["get"]))]));

    // A binding's roleRef must be a named ClusterRole and never changes; Group subjects need the
    // RBAC API group.
    let binding = |role: &str, kind: &str, subject_group: &str| {
        json!({
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"kind": "Group", "name": "nodecycle", "apiGroup": subject_group}],
        })
    };
    let r = client.post(bindings, &binding("system:reader", "Role", ""));
    assert_eq!(r.status, 422, "{}", r.raw);
    let r = client.post(
        bindings,
        &binding("system:reader", "ClusterRole", "rbac.authorization.k8s.io"),
    );
    assert_eq!(r.status, 201, "{}", r.raw);
    let r = client.patch(
        &format!("{bindings}/b"),
        "application/merge-patch+json",
        &json!({"roleRef": {"name": "aggregate"}}),
    );
    assert_eq!(r.status, 422, "roleRef is immutable: {}", r.raw);
    let r = client.get(bindings);
    assert_eq!(r.body["kind"], "ClusterRoleBindingList");
    assert_eq!(names(&r.body), ["b"]);
    assert!(r.body["items"][0].get("kind").is_none());
    assert_eq!(
        client.get(&format!("{roles}/absent")).status,
        404,
        "unknown roles are NotFound"
    );
}
