//! Cluster Autoscaler (CA) on the real control plane: the few steps of CA on AWS
//! (cluster-autoscaler/core/scaleup, core/scaledown, cloudprovider/aws) that nodecycle meets,
//! acting when the test asks, as the fake cloud's actor (tests/fakecloud/autoscaler.py) does on
//! the stand-in. Kubernetes side against the real API server with CA's own identity, as its
//! Helm chart installs it: service account `cluster-autoscaler` of `kube-system` (a token from
//! the TokenRequest API), bound to the chart's ClusterRole ([`ca_cluster_role`]), so the audit
//! log tells CA's writes from nodecycle's and RBAC holds CA to what the chart grants; AWS side
//! through the fake cloud's `ca_add_capacity` and `ca_terminate_instance`, so the fake records
//! CA's capacity changes and terminations as CA's, apart from nodecycle's.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::autoscaler::CaAction;
use crate::controlplane::ControlPlane;
use crate::{FakeCloud, KubeClient};

/// The taint CA puts on a node it deletes (`deletetaint.ToBeDeletedTaint`).
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
/// A node CA must not remove.
pub const SCALE_DOWN_DISABLED_ANNOTATION: &str =
    "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// A pod CA must not evict when `"false"`.
pub const SAFE_TO_EVICT_ANNOTATION: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// Bound on how long [`RealClusterAutoscaler::finish`] evicts again and waits for the node's
/// pods to go (a hang guard: CA gives up a scale-down after `--max-graceful-termination-sec`).
const DRAIN_WAIT: Duration = Duration::from_secs(60);

/// Cluster Autoscaler for one Auto Scaling group whose nodes follow it on the real control
/// plane ([`ControlPlane::sync_group`]).
pub struct RealClusterAutoscaler<'a> {
    cp: &'a ControlPlane,
    cloud: &'a FakeCloud,
    group: String,
    client: KubeClient,
}

fn parse(what: &str, v: Value) -> CaAction {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}: {v}"))
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Whether a pod is a workload pod as CA counts them: not a DaemonSet's, not a mirror pod,
/// not finished.
fn workload(pod: &Value) -> bool {
    let daemon = pod["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["kind"] == "DaemonSet" && o["controller"] == true);
    let mirror = !pod["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_null();
    let finished = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    !daemon && !mirror && !finished
}

/// Whether `labels` satisfy a PDB's `matchLabels` (the selectors these tests write).
fn selects(selector: &Value, labels: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .is_some_and(|m| m.iter().all(|(k, v)| labels[k] == *v))
}

/// The workload pods (not DaemonSet, not mirror, not finished) bound to `node`, also those
/// being deleted.
pub fn workload_pods_on(client: &KubeClient, node: &str) -> Vec<Value> {
    let r = client.get(&format!(
        "/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"
    ));
    assert_eq!(r.status, 200, "{}", r.raw);
    r.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| workload(p))
        .cloned()
        .collect()
}

/// Namespace of CA's service account.
pub const CA_NAMESPACE: &str = "kube-system";
/// Name of CA's service account, ClusterRole and ClusterRoleBinding (the chart's fullname).
pub const CA_NAME: &str = "cluster-autoscaler";
/// The user CA's requests are made as: its service account.
pub const CA_USER: &str = "system:serviceaccount:kube-system:cluster-autoscaler";

/// The ClusterRole of CA's Helm chart (kubernetes/autoscaler,
/// charts/cluster-autoscaler/templates/clusterrole.yaml, cluster-scoped, no PSP, not
/// clusterapi): nodes watch/list/get/update (no patch, no delete), pods list, `pods/eviction`
/// create, PodDisruptionBudgets watch/list, and the reads its simulation needs.
pub fn ca_cluster_role() -> Value {
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| json!({ "apiGroups": groups, "resources": resources, "verbs": verbs });
    let read = ["watch", "list", "get"];
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": { "name": CA_NAME },
        "rules": [
            rule(&[""], &["events", "endpoints"], &["create", "patch"]),
            rule(&[""], &["pods/eviction"], &["create"]),
            rule(&[""], &["pods/status"], &["update"]),
            {
                "apiGroups": [""], "resources": ["endpoints"],
                "resourceNames": [CA_NAME], "verbs": ["get", "update"],
            },
            rule(&[""], &["nodes"], &["watch", "list", "get", "update"]),
            rule(
                &[""],
                &["namespaces", "pods", "services", "replicationcontrollers",
                  "persistentvolumeclaims", "persistentvolumes"],
                &read,
            ),
            rule(&["batch"], &["jobs", "cronjobs"], &read),
            rule(&["batch", "extensions"], &["jobs"], &["get", "list", "patch", "watch"]),
            rule(&["extensions"], &["replicasets", "daemonsets"], &read),
            rule(&["policy"], &["poddisruptionbudgets"], &["watch", "list"]),
            rule(&["apps"], &["daemonsets", "replicasets", "statefulsets"], &read),
            rule(
                &["storage.k8s.io"],
                &["storageclasses", "csinodes", "csidrivers", "csistoragecapacities"],
                &read,
            ),
            rule(&[""], &["configmaps"], &["list", "watch"]),
            rule(&["coordination.k8s.io"], &["leases"], &["create"]),
            {
                "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                "resourceNames": [CA_NAME], "verbs": ["get", "update"],
            },
        ],
    })
}

/// CA's identity on `cp`, as its Helm chart installs it: service account [`CA_NAME`] of
/// [`CA_NAMESPACE`], the ClusterRole [`ca_cluster_role`] and a ClusterRoleBinding of it to the
/// service account; a client with a token of the service account from the TokenRequest API
/// (an hour, as a projected token), once RBAC allows it to evict.
pub fn install_identity(cp: &ControlPlane) -> KubeClient {
    cp.apply(&json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": CA_NAME, "namespace": CA_NAMESPACE },
    }));
    cp.apply(&ca_cluster_role());
    cp.apply(&json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": CA_NAME },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CA_NAME,
        },
        "subjects": [{ "kind": "ServiceAccount", "name": CA_NAME, "namespace": CA_NAMESPACE }],
    }));
    let r = cp.admin().post(
        &format!("/api/v1/namespaces/{CA_NAMESPACE}/serviceaccounts/{CA_NAME}/token"),
        &json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": { "expirationSeconds": 3600 },
        }),
    );
    assert_eq!(r.status, 201, "TokenRequest for CA: {}", r.raw);
    let token = s(&r.body["status"]["token"]);
    let groups = [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ];
    cp.wait_for("RBAC to let Cluster Autoscaler evict", |p| {
        p.can(CA_USER, &groups, "create", "pods/eviction", None)
            .0
            .then_some(())
    });
    cp.admin().with_token(Some(token))
}

impl<'a> RealClusterAutoscaler<'a> {
    /// CA for `group`'s nodes on `cp`.
    /// Installs CA's identity on `cp` first ([`install_identity`]; again is harmless).
    pub fn new(cp: &'a ControlPlane, cloud: &'a FakeCloud, group: &str) -> Self {
        RealClusterAutoscaler {
            cp,
            cloud,
            group: group.to_string(),
            client: install_identity(cp),
        }
    }

    /// Pods the scheduler could not place: Pending, unbound, `PodScheduled` False with reason
    /// `Unschedulable`, not being deleted (what CA's scale-up looks for).
    pub fn unschedulable_pods(&self) -> Vec<String> {
        let r = self
            .client
            .get("/api/v1/pods?fieldSelector=spec.nodeName%3D");
        assert_eq!(r.status, 200, "{}", r.raw);
        r.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["status"]["phase"] == "Pending" && p["metadata"]["deletionTimestamp"].is_null()
            })
            .filter(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| {
                        c["type"] == "PodScheduled"
                            && c["status"] == "False"
                            && c["reason"] == "Unschedulable"
                    })
            })
            .map(|p| {
                format!(
                    "{}/{}",
                    s(&p["metadata"]["namespace"]),
                    s(&p["metadata"]["name"])
                )
            })
            .collect()
    }

    /// Scale-up: the nodes the unschedulable pods need (`pods_per_node` of them fit on a new
    /// node) added to the desired capacity read now, capped at MaxSize; the new nodes join.
    pub fn scale_up(&self, pods_per_node: usize) -> CaAction {
        let pending = self.unschedulable_pods();
        let by = pending.len().div_ceil(pods_per_node.max(1));
        let action = parse(
            "ca_add_capacity",
            self.cloud.control(
                "ca_add_capacity",
                json!({
                    "group": self.group,
                    "by": by,
                    "reason": format!("{} unschedulable pods", pending.len()),
                }),
            ),
        );
        self.cp.sync_group(self.cloud, &self.group);
        action
    }

    /// The node `name`, or Null.
    fn node(&self, name: &str) -> Value {
        let r = self.client.get(&format!("/api/v1/nodes/{name}"));
        if r.status == 404 {
            return Value::Null;
        }
        assert_eq!(r.status, 200, "{}", r.raw);
        r.body
    }

    /// The workload pods bound to `node` (also those being deleted).
    pub fn workload_pods_on(&self, node: &str) -> Vec<Value> {
        workload_pods_on(&self.client, node)
    }

    /// Why CA keeps `node` (None: unneeded, it may remove it): annotated scale-down-disabled,
    /// already being deleted by CA, the group at MinSize, or a workload pod on it that cannot
    /// move (no controller, `safe-to-evict: "false"`, or its PodDisruptionBudget allows no more
    /// disruptions, counting the node's other pods under it).
    pub fn why_needed(&self, node: &str) -> Option<String> {
        let n = self.node(node);
        if n.is_null() {
            return Some("no such node".into());
        }
        if n["metadata"]["annotations"][SCALE_DOWN_DISABLED_ANNOTATION] == "true" {
            return Some("scale-down disabled by annotation".into());
        }
        let tainted = n["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["key"] == TO_BE_DELETED_TAINT);
        if tainted {
            return Some("already being deleted".into());
        }
        let group = self.group_sizes();
        if group.0 <= group.1 {
            return Some(format!("group at MinSize {}", group.1));
        }
        let pdbs = self.client.get("/apis/policy/v1/poddisruptionbudgets");
        assert_eq!(pdbs.status, 200, "{}", pdbs.raw);
        let mut left: Vec<(String, String, i64)> = Vec::new();
        for pod in self.workload_pods_on(node) {
            if !pod["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let ns = s(&pod["metadata"]["namespace"]);
            let name = format!("{ns}/{}", s(&pod["metadata"]["name"]));
            if pod["metadata"]["annotations"][SAFE_TO_EVICT_ANNOTATION] == "false" {
                return Some(format!("pod {name} is not safe to evict"));
            }
            let replicated = pod["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["controller"] == true);
            if !replicated {
                return Some(format!("pod {name} is not replicated"));
            }
            for pdb in pdbs.body["items"].as_array().into_iter().flatten() {
                if pdb["metadata"]["namespace"] != ns.as_str()
                    || !selects(&pdb["spec"]["selector"], &pod["metadata"]["labels"])
                {
                    continue;
                }
                let key = (ns.clone(), s(&pdb["metadata"]["name"]));
                let i = match left.iter().position(|l| l.0 == key.0 && l.1 == key.1) {
                    Some(i) => i,
                    None => {
                        let allowed = pdb["status"]["disruptionsAllowed"].as_i64().unwrap_or(0);
                        left.push((key.0, key.1, allowed));
                        left.len() - 1
                    }
                };
                if left[i].2 < 1 {
                    return Some(format!(
                        "pod {name}: PodDisruptionBudget {} allows no disruption",
                        left[i].1
                    ));
                }
                left[i].2 -= 1;
            }
        }
        None
    }

    /// (desired, min) of the group.
    fn group_sizes(&self) -> (i64, i64) {
        let records = self
            .cloud
            .control("group_instances", json!({ "group": self.group }));
        (
            records["desired"].as_i64().expect("desired"),
            records["min"].as_i64().expect("min"),
        )
    }

    /// The instance of `node` (its providerID's last part).
    fn instance_of(node: &Value) -> String {
        s(&node["spec"]["providerID"])
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// Scale-down of `node` when unneeded ([`Self::why_needed`]): taints it
    /// [`TO_BE_DELETED_TAINT`]`=<unix time>:NoSchedule`, evicts its workload pods (the
    /// Eviction API: PDBs apply) and, with `hold` false, goes on as [`Self::finish`]. With
    /// `hold`, stops after the first evictions (`draining`).
    pub fn scale_down(&self, node: &str, hold: bool) -> CaAction {
        if let Some(why) = self.why_needed(node) {
            return CaAction {
                action: "noScaleDown".into(),
                node: Some(node.into()),
                instance: None,
                from: None,
                to: None,
                remaining: Vec::new(),
                reason: why,
            };
        }
        self.taint(node);
        self.evict_all(node);
        if hold {
            return CaAction {
                action: "draining".into(),
                node: Some(node.into()),
                instance: Some(Self::instance_of(&self.node(node))),
                from: None,
                to: None,
                remaining: self.remaining(node),
                reason: "held by the test".into(),
            };
        }
        self.finish(node)
    }

    /// Adds CA's taint as CA does (`taints.AddToBeDeletedTaint`): an update (PUT) of the node
    /// as just read, so conditional on its resourceVersion (KWOK and the node lifecycle
    /// controller write the node too): tried again on a conflict, at most 20 times. The chart
    /// grants `update` on nodes, not `patch`.
    fn taint(&self, node: &str) {
        for _ in 0..20 {
            let mut n = self.node(node);
            let mut taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            taints.push(json!({
                "key": TO_BE_DELETED_TAINT, "value": now.to_string(), "effect": "NoSchedule",
            }));
            n["spec"]["taints"] = json!(taints);
            let r = self.client.put(&format!("/api/v1/nodes/{node}"), &n);
            if r.status == 409 {
                continue;
            }
            assert_eq!(r.status, 200, "tainting {node}: {}", r.raw);
            return;
        }
        panic!("tainting {node}: a conflict each of 20 times");
    }

    fn evict_all(&self, node: &str) {
        for pod in self.workload_pods_on(node) {
            if !pod["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let (ns, name) = (
                s(&pod["metadata"]["namespace"]),
                s(&pod["metadata"]["name"]),
            );
            let r = self.client.post(
                &format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"),
                &json!({
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": { "name": name, "namespace": ns },
                }),
            );
            assert!(
                matches!(r.status, 200 | 201 | 404 | 429),
                "CA's eviction of {ns}/{name}: {}",
                r.raw
            );
        }
    }

    fn remaining(&self, node: &str) -> Vec<String> {
        self.workload_pods_on(node)
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    s(&p["metadata"]["namespace"]),
                    s(&p["metadata"]["name"])
                )
            })
            .collect()
    }

    /// A started scale-down goes on: evicts the node's workload pods again (every second, for
    /// at most [`DRAIN_WAIT`]) until none is bound to it, then
    /// TerminateInstanceInAutoScalingGroup with a decrement; the node goes with its instance.
    /// `draining` with the pods left when they did not go in time.
    pub fn finish(&self, node: &str) -> CaAction {
        let n = self.node(node);
        assert!(
            !n.is_null(),
            "CA's node {node} is gone before its scale-down ended"
        );
        let instance = Self::instance_of(&n);
        let started = Instant::now();
        loop {
            self.evict_all(node);
            let left = self.remaining(node);
            if left.is_empty() {
                break;
            }
            if started.elapsed() > DRAIN_WAIT {
                return CaAction {
                    action: "draining".into(),
                    node: Some(node.into()),
                    instance: Some(instance),
                    from: None,
                    to: None,
                    remaining: left,
                    reason: "waiting for pods to go".into(),
                };
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        let mut action = parse(
            "ca_terminate_instance",
            self.cloud.control(
                "ca_terminate_instance",
                json!({ "group": self.group, "instance": instance }),
            ),
        );
        action.node = Some(node.into());
        self.cp.sync_group(self.cloud, &self.group);
        action
    }
}
