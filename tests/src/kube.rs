//! The Kubernetes API server stand-in of one fake EKS cluster.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::fakecloud::{ACCESS_KEY_ID, Control, SECRET_ACCESS_KEY};
use crate::faults::{KubeFaults, SectionStats};
use crate::kube_client::KubeClient;
use crate::token::{TokenParams, eks_token};

/// A running stand-in (it lives as long as its [`crate::FakeCloud`]).
#[derive(Debug, Clone)]
pub struct KubeStandIn {
    /// EKS cluster name (what tokens must be signed for).
    pub cluster: String,
    /// Region of the cluster.
    pub region: String,
    /// `https://127.0.0.1:PORT`, also the EKS cluster's `endpoint`.
    pub endpoint: String,
    /// PEM file of the cluster CA.
    pub ca_file: PathBuf,
    /// Base64 of the CA PEM, as EKS returns `certificateAuthority.data`.
    pub ca_data: String,
    control: Control,
}

impl KubeStandIn {
    pub(crate) fn create(control: Control, cluster: &str, region: &str) -> KubeStandIn {
        Self::create_in(control, cluster, region, None)
    }

    /// [`Self::create`] for a cluster of `account` (default: the fake cloud's own), whose
    /// EKS cluster and nodes live in that account.
    pub(crate) fn create_in(
        control: Control,
        cluster: &str,
        region: &str,
        account: Option<&str>,
    ) -> KubeStandIn {
        let v = control.call(
            "create_kube",
            json!({ "cluster": cluster, "region": region, "account": account }),
        );
        let s = |k: &str| {
            v[k].as_str()
                .unwrap_or_else(|| panic!("create_kube answer lacks {k}: {v}"))
                .to_string()
        };
        KubeStandIn {
            cluster: cluster.to_string(),
            region: region.to_string(),
            endpoint: s("endpoint"),
            ca_file: PathBuf::from(s("caFile")),
            ca_data: s("caData"),
            control,
        }
    }

    fn call(&self, op: &str, mut args: Value) -> Value {
        args["cluster"] = json!(self.cluster);
        args["region"] = json!(self.region);
        self.control.call(op, args)
    }

    /// The CA PEM bytes.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ca_file).expect("stand-in CA file is readable")
    }

    /// A valid bearer token for this cluster, signed now with the test
    /// credentials (by `aws-sigv4`, independently of nodecycle's code).
    pub fn token(&self) -> String {
        self.token_at(SystemTime::now())
    }

    /// A token signed at `time` (e.g. 20 minutes ago: expired).
    pub fn token_at(&self, time: SystemTime) -> String {
        eks_token(&TokenParams {
            cluster: &self.cluster,
            region: &self.region,
            access_key: ACCESS_KEY_ID,
            secret_key: SECRET_ACCESS_KEY,
            session_token: None,
            time,
        })
    }

    /// A client authenticated with [`KubeStandIn::token`].
    pub fn client(&self) -> KubeClient {
        KubeClient::new(&self.endpoint, &self.ca_pem(), Some(self.token()))
    }

    /// A client with the given token, or none.
    pub fn client_with_token(&self, token: Option<String>) -> KubeClient {
        KubeClient::new(&self.endpoint, &self.ca_pem(), token)
    }

    /// Registers a Ready node.
    pub fn add_node(&self, name: &str, provider_id: &str) -> Value {
        self.add_node_with(NodeFixture::new(name).provider_id(provider_id))
    }

    /// Registers a node.
    pub fn add_node_with(&self, node: NodeFixture) -> Value {
        self.call("add_node", node.to_json())
    }

    /// Sets a node's Ready condition (`None`: Unknown, kubelet gone).
    pub fn set_node_ready(&self, name: &str, ready: Option<bool>) {
        self.call("set_node_ready", json!({ "name": name, "ready": ready }));
    }

    /// Deletes a node (and, like PodGC, the pods bound to it).
    pub fn delete_node(&self, name: &str) {
        self.call("delete_node", json!({ "name": name }));
    }

    /// Adds a pod with a status (the API's create would drop it).
    pub fn add_pod(&self, pod: PodFixture) -> Value {
        self.call("add_pod", pod.to_json())
    }

    /// Flips a pod's Ready condition (Running when ready).
    pub fn set_pod_ready(&self, namespace: &str, name: &str, ready: bool) -> Value {
        self.call(
            "set_pod_ready",
            json!({ "namespace": namespace, "name": name, "ready": ready }),
        )
    }

    /// Creates a policy/v1 PodDisruptionBudget.
    pub fn add_pdb(&self, pdb: PdbFixture) -> Value {
        self.call("add_pdb", pdb.to_json())
    }

    /// Registers the replica count of a workload controller (used as a
    /// PDB's expected pods for percentages and maxUnavailable).
    pub fn set_scale(&self, namespace: &str, kind: &str, name: &str, replicas: u32) {
        self.call(
            "set_scale",
            json!({ "namespace": namespace, "kind": kind, "name": name, "replicas": replicas }),
        );
    }

    /// Makes nodes follow moto's EC2 instances (see the README).
    pub fn sync_nodes(&self, sync: SyncNodes) -> Value {
        self.call("sync_nodes", sync.to_json())
    }

    /// Everything the stand-in holds, plus its request log.
    pub fn state(&self) -> KubeState {
        let v = self.call("kube_state", json!({}));
        serde_json::from_value(v).expect("kube_state shape")
    }

    /// The request log.
    pub fn requests(&self) -> Vec<KubeRequest> {
        let v = self.call("kube_requests", json!({}));
        serde_json::from_value(v["requests"].clone()).expect("kube_requests shape")
    }

    /// Fails or delays this stand-in's API calls (the `kube` section of the `faults` op,
    /// limited to this cluster; AWS faults are left as they are).
    pub fn faults(&self, faults: KubeFaults) {
        let faults = faults.clusters(&[self.cluster.as_str()]);
        self.control
            .call("faults", json!({ "kube": faults.into_json() }));
    }

    /// Turns the Kubernetes faults off.
    pub fn clear_faults(&self) {
        self.control.call("faults", json!({ "kube": null }));
    }

    /// Kubernetes calls seen and failed (operations named `cluster:verb resource`).
    pub fn fault_stats(&self) -> SectionStats {
        crate::faults::fault_stats(&self.control).kube
    }

    /// Polls `check` on the state until it returns `Some`, or panics after
    /// `timeout` with `what`. No timing assertions: the bound is generous.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&KubeState) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            let state = self.state();
            if let Some(t) = check(&state) {
                return t;
            }
            if Instant::now() > deadline {
                panic!("timed out after {timeout:?} waiting for {what}; state: {state:#?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `kube_state`: objects as the API returns them, and the request log.
#[derive(Debug, Clone, Deserialize)]
pub struct KubeState {
    /// Nodes.
    pub nodes: Vec<Value>,
    /// Pods (all namespaces).
    pub pods: Vec<Value>,
    /// PodDisruptionBudgets with live status.
    pub pdbs: Vec<Value>,
    /// core/v1 Events (also those created through events.k8s.io/v1).
    pub events: Vec<Value>,
    /// Every request, in order.
    pub requests: Vec<KubeRequest>,
    /// Current resourceVersion.
    #[serde(rename = "resourceVersion")]
    pub resource_version: String,
}

fn name_of(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

impl KubeState {
    /// `(node name, instance id of its providerID)` of every node, sorted by name.
    pub fn node_instances(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .nodes
            .iter()
            .map(|n| {
                let provider = n["spec"]["providerID"].as_str().unwrap_or_default();
                let id = provider.rsplit('/').next().unwrap_or_default();
                (name_of(n).to_string(), id.to_string())
            })
            .collect();
        out.sort();
        out
    }

    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&Value> {
        self.nodes.iter().find(|n| name_of(n) == name)
    }

    /// A pod by namespace and name.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Value> {
        self.pods
            .iter()
            .find(|p| name_of(p) == name && p["metadata"]["namespace"].as_str() == Some(namespace))
    }

    /// Pods bound to a node.
    pub fn pods_on(&self, node: &str) -> Vec<&Value> {
        self.pods
            .iter()
            .filter(|p| p["spec"]["nodeName"].as_str() == Some(node))
            .collect()
    }

    /// Events about an object (`involvedObject.name`).
    pub fn events_for(&self, name: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["involvedObject"]["name"].as_str() == Some(name))
            .collect()
    }

    /// Requests with this method whose path matches exactly.
    pub fn requests_to(&self, method: &str, path: &str) -> Vec<&KubeRequest> {
        self.requests
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .collect()
    }
}

/// One logged request.
#[derive(Debug, Clone, Deserialize)]
pub struct KubeRequest {
    /// HTTP method.
    pub method: String,
    /// Path without query.
    pub path: String,
    /// Raw query string.
    #[serde(default)]
    pub query: String,
    /// Status answered.
    pub status: u16,
    /// RFC 3339 time.
    pub time: String,
    /// Request body (JSON when it parsed).
    #[serde(default)]
    pub body: Option<Value>,
    /// Content-Type of the body.
    #[serde(default)]
    pub content_type: Option<String>,
    /// Why authentication failed, when it did.
    #[serde(default)]
    pub auth_error: Option<String>,
    /// Detail the real API server does not send (e.g. a JSON patch error).
    #[serde(default)]
    pub error_detail: Option<String>,
    /// The injected fault (`429`, `500`, `503`, `reset`, `reset_after`), if any; a `reset`
    /// has status 0 (no answer was sent).
    #[serde(default)]
    pub fault: Option<String>,
}

/// A node for [`KubeStandIn::add_node_with`].
#[derive(Debug, Clone)]
pub struct NodeFixture {
    name: String,
    provider_id: Option<String>,
    ready: bool,
    labels: Vec<(String, String)>,
    unschedulable: bool,
    ip: Option<String>,
    kubelet_version: Option<String>,
}

impl NodeFixture {
    /// A Ready node with a generated providerID.
    pub fn new(name: &str) -> NodeFixture {
        NodeFixture {
            name: name.to_string(),
            provider_id: None,
            ready: true,
            labels: Vec::new(),
            unschedulable: false,
            ip: None,
            kubelet_version: None,
        }
    }
    /// `status.nodeInfo.kubeletVersion` minor, e.g. `1.30` (default: the
    /// cluster's version).
    pub fn kubelet_version(mut self, v: &str) -> Self {
        self.kubelet_version = Some(v.to_string());
        self
    }
    /// `aws:///<az>/<instance-id>`.
    pub fn provider_id(mut self, id: &str) -> Self {
        self.provider_id = Some(id.to_string());
        self
    }
    /// Ready condition.
    pub fn ready(mut self, ready: bool) -> Self {
        self.ready = ready;
        self
    }
    /// A label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.push((k.to_string(), v.to_string()));
        self
    }
    /// Already cordoned.
    pub fn unschedulable(mut self) -> Self {
        self.unschedulable = true;
        self
    }
    /// InternalIP address.
    pub fn ip(mut self, ip: &str) -> Self {
        self.ip = Some(ip.to_string());
        self
    }
    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "provider_id": self.provider_id,
            "ready": self.ready,
            "labels": pairs(&self.labels),
            "unschedulable": self.unschedulable,
            "ip": self.ip,
            "kubelet_version": self.kubelet_version,
        })
    }
}

fn pairs(v: &[(String, String)]) -> Value {
    Value::Object(v.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
}

/// A pod for [`KubeStandIn::add_pod`].
#[derive(Debug, Clone)]
pub struct PodFixture {
    namespace: String,
    name: String,
    node: Option<String>,
    labels: Vec<(String, String)>,
    owner: Option<(String, String)>,
    grace_seconds: Option<u32>,
    ready: Option<bool>,
    phase: Option<String>,
    mirror: bool,
    waiting: Option<String>,
    annotations: Vec<(String, String)>,
}

impl PodFixture {
    /// A pod; Running and Ready when bound to a node, else Pending.
    pub fn new(namespace: &str, name: &str) -> PodFixture {
        PodFixture {
            namespace: namespace.to_string(),
            name: name.to_string(),
            node: None,
            annotations: Vec::new(),
            labels: Vec::new(),
            owner: None,
            grace_seconds: None,
            ready: None,
            phase: None,
            mirror: false,
            waiting: None,
        }
    }
    /// Its container waits with this reason (`CreateContainerError`, `ErrImagePull`,
    /// `CrashLoopBackOff`, ...), as the kubelet reports a container that cannot start: not
    /// Ready, `Pending` (`Running` for `CrashLoopBackOff`: it started before).
    pub fn waiting(mut self, reason: &str) -> Self {
        self.waiting = Some(reason.to_string());
        self
    }
    /// Bound to this node (`spec.nodeName`).
    pub fn node(mut self, node: &str) -> Self {
        self.node = Some(node.to_string());
        self
    }
    /// A label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.push((k.to_string(), v.to_string()));
        self
    }
    /// Controller owner (`ReplicaSet`, `DaemonSet`, `StatefulSet`, ...).
    pub fn owner(mut self, kind: &str, name: &str) -> Self {
        self.owner = Some((kind.to_string(), name.to_string()));
        self
    }
    /// `spec.terminationGracePeriodSeconds` (default 30).
    pub fn grace_seconds(mut self, s: u32) -> Self {
        self.grace_seconds = Some(s);
        self
    }
    /// Ready condition.
    pub fn ready(mut self, ready: bool) -> Self {
        self.ready = Some(ready);
        self
    }
    /// `status.phase`.
    pub fn phase(mut self, phase: &str) -> Self {
        self.phase = Some(phase.to_string());
        self
    }
    /// `metadata.annotations[k] = v`.
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.annotations.push((k.to_string(), v.to_string()));
        self
    }
    /// A mirror pod of a static pod (annotation `kubernetes.io/config.mirror`).
    pub fn mirror(mut self) -> Self {
        self.mirror = true;
        self
    }
    fn to_json(&self) -> Value {
        let mut v = json!({
            "namespace": self.namespace,
            "name": self.name,
            "labels": pairs(&self.labels),
            "mirror": self.mirror,
        });
        if !self.annotations.is_empty() {
            v["annotations"] = pairs(&self.annotations);
        }
        if let Some(n) = &self.node {
            v["node"] = json!(n);
        }
        if let Some((k, n)) = &self.owner {
            v["owner_kind"] = json!(k);
            v["owner_name"] = json!(n);
        }
        if let Some(g) = self.grace_seconds {
            v["grace_seconds"] = json!(g);
        }
        if let Some(r) = self.ready {
            v["ready"] = json!(r);
        }
        if let Some(p) = &self.phase {
            v["phase"] = json!(p);
        }
        if let Some(w) = &self.waiting {
            v["waiting_reason"] = json!(w);
        }
        v
    }
}

/// A policy/v1 PodDisruptionBudget for [`KubeStandIn::add_pdb`].
#[derive(Debug, Clone)]
pub struct PdbFixture {
    namespace: String,
    name: String,
    selector: Value,
    min_available: Option<Value>,
    max_unavailable: Option<Value>,
    unhealthy_pod_eviction_policy: Option<String>,
}

impl PdbFixture {
    /// A PDB with an empty selector (matches nothing until labels are added).
    pub fn new(namespace: &str, name: &str) -> PdbFixture {
        PdbFixture {
            namespace: namespace.to_string(),
            name: name.to_string(),
            selector: json!({}),
            min_available: None,
            max_unavailable: None,
            unhealthy_pod_eviction_policy: None,
        }
    }
    /// `selector.matchLabels[k] = v`.
    pub fn match_label(mut self, k: &str, v: &str) -> Self {
        self.selector["matchLabels"][k] = json!(v);
        self
    }
    /// A `selector.matchExpressions` entry (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    pub fn match_expression(mut self, key: &str, operator: &str, values: &[&str]) -> Self {
        let e = json!({ "key": key, "operator": operator, "values": values });
        match self.selector["matchExpressions"].as_array_mut() {
            Some(a) => a.push(e),
            None => self.selector["matchExpressions"] = json!([e]),
        }
        self
    }
    /// `minAvailable`: an integer or a percentage string like `"50%"`.
    pub fn min_available(mut self, v: impl Into<Value>) -> Self {
        self.min_available = Some(v.into());
        self
    }
    /// `maxUnavailable`: an integer or a percentage string.
    pub fn max_unavailable(mut self, v: impl Into<Value>) -> Self {
        self.max_unavailable = Some(v.into());
        self
    }
    /// `IfHealthyBudget` (the default) or `AlwaysAllow`.
    pub fn unhealthy_pod_eviction_policy(mut self, policy: &str) -> Self {
        self.unhealthy_pod_eviction_policy = Some(policy.to_string());
        self
    }
    fn to_json(&self) -> Value {
        json!({
            "namespace": self.namespace,
            "name": self.name,
            "unhealthy_pod_eviction_policy": self.unhealthy_pod_eviction_policy,
            "selector": self.selector,
            "min_available": self.min_available,
            "max_unavailable": self.max_unavailable,
        })
    }
}

/// Arguments of [`KubeStandIn::sync_nodes`].
#[derive(Debug, Clone)]
pub struct SyncNodes {
    /// Follow this Auto Scaling group's instances instead of instances
    /// tagged `eks:cluster-name=<cluster>`.
    pub asg: Option<String>,
    /// Whether new nodes become Ready (default true).
    pub ready: bool,
    /// Instances launched from these AMIs register but never become Ready.
    pub never_ready_images: Vec<String>,
    /// The kubelets of these instances stop posting status: their nodes' Ready turns
    /// `Unknown` (reason `NodeStatusUnknown`), as the node lifecycle controller reports it.
    pub stalled_instances: Vec<String>,
    /// Extra labels on every synced node.
    pub labels: Vec<(String, String)>,
    /// Register a node only this long after its instance is first seen.
    pub register_delay_seconds: Option<f64>,
    /// Kubelet version per AMI id (`"1.30"`); default: the minor in the
    /// AMI's name (`amazon-eks-node-1.30-v...`), else the cluster version.
    pub kubelet_versions: Vec<(String, String)>,
}

impl Default for SyncNodes {
    fn default() -> Self {
        SyncNodes {
            asg: None,
            ready: true,
            never_ready_images: Vec::new(),
            stalled_instances: Vec::new(),
            labels: Vec::new(),
            register_delay_seconds: None,
            kubelet_versions: Vec::new(),
        }
    }
}

impl SyncNodes {
    fn to_json(&self) -> Value {
        json!({
            "asg": self.asg,
            "ready": self.ready,
            "never_ready_images": self.never_ready_images,
            "stalled_instances": self.stalled_instances,
            "labels": pairs(&self.labels),
            "register_delay_seconds": self.register_delay_seconds,
            "kubelet_versions": pairs(&self.kubelet_versions),
        })
    }
}
