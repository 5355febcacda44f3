//! Cluster Autoscaler (CA) on the real control plane: the few steps of CA on AWS
//! (cluster-autoscaler/core/scaleup, core/scaledown, cloudprovider/aws) that nodecycle meets,
//! acting when the test asks, as the fake cloud's actor (tests/fakecloud/autoscaler.py) does on
//! the stand-in. Kubernetes side against the real API server (admin credentials: CA's own
//! identity); AWS side through the fake cloud's `ca_add_capacity` and `ca_terminate_instance`,
//! so the fake records CA's capacity changes and terminations as CA's, apart from nodecycle's.

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

impl<'a> RealClusterAutoscaler<'a> {
    /// CA for `group`'s nodes on `cp`.
    pub fn new(cp: &'a ControlPlane, cloud: &'a FakeCloud, group: &str) -> Self {
        RealClusterAutoscaler {
            cp,
            cloud,
            group: group.to_string(),
            client: cp.admin(),
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

    /// Adds CA's taint, conditional on the node's resourceVersion (KWOK and the node
    /// lifecycle controller write the node too): tried again on a conflict, at most 20 times.
    fn taint(&self, node: &str) {
        for _ in 0..20 {
            let n = self.node(node);
            let mut taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            taints.push(json!({
                "key": TO_BE_DELETED_TAINT, "value": now.to_string(), "effect": "NoSchedule",
            }));
            let r = self.client.patch(
                &format!("/api/v1/nodes/{node}"),
                "application/merge-patch+json",
                &json!({
                    "metadata": { "resourceVersion": n["metadata"]["resourceVersion"] },
                    "spec": { "taints": taints },
                }),
            );
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
