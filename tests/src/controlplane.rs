//! A real Kubernetes control plane for one test (issue 44): etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and KWOK (simulated kubelets), built from the Go module
//! proxy by `scripts/controlplane.sh` (tests/controlplane/go.mod pins the releases).
//!
//! [`ControlPlane::start`] runs the five processes on free loopback ports with certificates made
//! for it (openssl), waits until the API server is ready and the controller manager works, and
//! [`Drop`] kills them and removes their files (and the processes die with the thread that
//! started them, should the test binary be killed before it drops the control plane). The API
//! server authorizes with RBAC and authenticates two ways:
//! - static tokens: [`ControlPlane::admin`] (group `system:masters`) for the test itself, and one
//!   per component;
//! - an authentication webhook served by the harness, which validates EKS tokens
//!   (`k8s-aws-v1.` + a presigned STS `GetCallerIdentity` URL) as aws-iam-authenticator does,
//!   replaying them to the fake cloud's STS ([`ControlPlane::trust_sts`]), and maps the caller's
//!   role to a Kubernetes user and groups as an EKS access entry does
//!   ([`ControlPlane::add_access_entry`]). Every other token gets 401.
//!
//! [`ControlPlane::apply`] creates or replaces objects (e.g. deploy/rbac.yaml's) as the admin,
//! and [`ControlPlane::can`] asks the API server's authorizer (a SubjectAccessReview).
//!
//! The binaries are found in [`ENV_BIN`] (`scripts/test.sh` sets it); without it, or without a
//! binary, [`ControlPlane::start`] panics: the tests fail, they do not skip.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::kube_client::KubeClient;

/// The directory holding kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok
/// (`scripts/controlplane.sh` prints it).
pub const ENV_BIN: &str = "NODECYCLE_CONTROLPLANE_BIN";

/// util-linux's setpriv, to set the parent-death signal of the processes (no unsafe code here).
const SETPRIV: &str = "/usr/bin/setpriv";

/// Bound on the start (API server ready, controllers running). A hang guard, not a timing
/// assertion: on 2 busy cores the control plane starts in seconds.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running control plane; dropping it stops every process and removes its directory.
pub struct ControlPlane {
    /// `https://127.0.0.1:PORT` of the API server.
    pub endpoint: String,
    /// PEM file of the CA that signed the API server's serving certificate.
    pub ca_file: PathBuf,
    admin_token: String,
    dir: PathBuf,
    processes: Mutex<Vec<(&'static str, Child)>>,
    webhook: Webhook,
    /// AMIs whose nodes' pods fail to create their containers
    /// ([`ControlPlane::fail_containers_on_image`]).
    failing_images: Mutex<Vec<String>>,
    /// AMIs whose nodes never become Ready ([`ControlPlane::never_ready_nodes_of_image`]).
    never_ready_images: Mutex<Vec<String>>,
    /// The thread creating KWOK's default stages, until joined ([`ControlPlane::default_stages`]).
    default_stages: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("endpoint", &self.endpoint)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// A KWOK node as EKS nodes look: named after the private DNS name, providerID
/// `aws:///<zone>/<instance>`, zone, region and instance-type labels. KWOK makes it Ready and
/// keeps its Lease fresh; pods the scheduler binds to it become Running and Ready.
#[derive(Debug, Clone)]
pub struct KwokNode {
    /// Node name, e.g. `ip-10-0-1-10.us-east-2.compute.internal`.
    pub name: String,
    /// EC2 instance id, e.g. `i-0123456789abcdef0`.
    pub instance_id: String,
    /// Availability zone, e.g. `us-east-2a` (the region is the zone without its last letter).
    pub zone: String,
    /// EC2 instance type, e.g. `m6i.large`.
    pub instance_type: String,
    /// Further labels (e.g. `eks.amazonaws.com/nodegroup`).
    pub labels: Vec<(String, String)>,
    /// Annotations (e.g. [`IMAGE_ANNOTATION`]).
    pub annotations: Vec<(String, String)>,
}

impl KwokNode {
    /// A node of `instance_id` in `zone`, type `m6i.large`, named from the instance id.
    pub fn new(instance_id: &str, zone: &str) -> KwokNode {
        let region = &zone[..zone.len() - 1];
        // A stable private address from the id's last hex digits, as EKS names nodes.
        let n = u32::from_str_radix(&instance_id[instance_id.len() - 4..], 16).unwrap_or(0);
        KwokNode {
            name: format!(
                "ip-10-0-{}-{}.{region}.compute.internal",
                (n >> 8) % 256,
                n % 256
            ),
            instance_id: instance_id.to_string(),
            zone: zone.to_string(),
            instance_type: "m6i.large".to_string(),
            labels: Vec::new(),
            annotations: Vec::new(),
        }
    }

    /// The `spec.providerID` EKS nodes carry.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.instance_id)
    }

    /// The Node object.
    pub fn to_json(&self) -> Value {
        let region = &self.zone[..self.zone.len() - 1];
        let mut labels = json!({
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": self.zone,
            "topology.kubernetes.io/region": region,
            "failure-domain.beta.kubernetes.io/zone": self.zone,
            "node.kubernetes.io/instance-type": self.instance_type,
            "type": "kwok",
        });
        for (k, v) in &self.labels {
            labels[k] = json!(v);
        }
        let mut annotations = json!({ "kwok.x-k8s.io/node": "fake" });
        for (k, v) in &self.annotations {
            annotations[k] = json!(v);
        }
        let resources = json!({ "cpu": "4", "memory": "16Gi", "pods": "110" });
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": annotations,
            },
            "spec": { "providerID": self.provider_id() },
            "status": { "capacity": resources, "allocatable": resources },
        })
    }
}

/// Annotation of a node [`ControlPlane::sync_group`] made: the AMI its instance runs (the
/// stand-in, tests/fakecloud/kube.py, sets the same).
pub const IMAGE_ANNOTATION: &str = "fakecloud/image-id";

/// Annotation of a node [`ControlPlane::sync_group`] made: the Auto Scaling group it follows.
pub const GROUP_ANNOTATION: &str = "fakecloud/asg";

/// Annotation the harness writes on existing nodes when it adds a stage that concerns them
/// (the time, in ns since the epoch), only so that KWOK matches its stages against them again.
pub const STAGES_TOUCHED_ANNOTATION: &str = "nodecycle-tests/stages-touched";

/// What one [`ControlPlane::sync_group`] changed, by node name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSync {
    /// Nodes created for instances that entered service (Ready when the call returned).
    pub added: Vec<String>,
    /// Nodes deleted because their instance left service (or already gone).
    pub removed: Vec<String>,
}

/// One request of the API server's audit log ([`ControlPlane::audit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// Who sent it: `admin`, an access entry's username, `kwok`, `system:kube-scheduler`...
    pub user: String,
    /// `create`, `update`, `patch`, `delete`...
    pub verb: String,
    /// `pods`, `nodes`...
    pub resource: String,
    /// `eviction`, `status`, `binding`... (empty for the resource itself).
    pub subresource: String,
    /// Namespace of the object (empty for cluster-scoped ones).
    pub namespace: String,
    /// Name of the object.
    pub name: String,
    /// HTTP status of the answer.
    pub code: u16,
    /// When the API server received it (RFC 3339, microseconds, UTC).
    pub received: String,
}

/// What the API server audits: writes of every kind, at metadata level, and the writes of
/// PodDisruptionBudget statuses with the objects written ([`ControlPlane::pdb_statuses`]);
/// reads and Lease renewals are left out (they are most of the traffic and no test asserts on
/// them).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  verbs: [get, list, watch]
- level: None
  resources:
  - group: coordination.k8s.io
    resources: [leases]
- level: RequestResponse
  resources:
  - group: policy
    resources: [poddisruptionbudgets/status]
- level: Metadata
";

impl ControlPlane {
    /// Starts a control plane and waits until it works: the API server answers `/readyz` and
    /// the controller manager has created the `default` ServiceAccount. KWOK's default stages
    /// (tests/controlplane/kwok-stages.yaml) are created as Stage objects meanwhile, and
    /// [`Self::add_node`] waits for them (tests add their own with
    /// [`Self::stall_nodes_of_image`] and [`Self::fail_containers_on_image`]). Panics (with
    /// the processes' logs) when a binary is missing, a process exits, or [`START_TIMEOUT`]
    /// passes.
    pub fn start() -> ControlPlane {
        let bin = bin_dir();
        let started = Instant::now();
        // A port picked free can be taken by another process before ours binds it: then the
        // start is tried again with other ports.
        let mut attempt = 1;
        let mut plane = loop {
            match Self::start_api_server(&bin) {
                Ok(plane) => break plane,
                Err(e) if attempt < 3 && e.contains("address already in use") => {
                    eprintln!(
                        "control plane: a port was taken, starting again ({})",
                        e.lines().next().unwrap_or_default()
                    );
                    attempt += 1;
                }
                Err(e) => panic!("{e}"),
            }
        };
        let s = |p: &Path| p.display().to_string();
        let kubeconfig_of = |user: &str| {
            s(&plane
                .dir
                .join(format!("{}.kubeconfig", user.replace(':', "-"))))
        };
        plane.install_stage_crd();
        let stages = plane.install_default_stages();
        let controllers = [
            "disruption-controller",
            "replicaset-controller",
            "deployment-controller",
            "daemonset-controller",
            "node-lifecycle-controller",
            "taint-eviction-controller",
            "garbage-collector-controller",
            "pod-garbage-collector-controller",
            "serviceaccount-controller",
            "namespace-controller",
        ];
        let (kcm, scheduler, kwok) = (
            kubeconfig_of("system:kube-controller-manager"),
            kubeconfig_of("system:kube-scheduler"),
            kubeconfig_of("kwok"),
        );
        plane.spawn(
            &bin,
            "kube-controller-manager",
            &[
                format!("--kubeconfig={kcm}"),
                format!("--controllers={}", controllers.join(",")),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--use-service-account-credentials=false".into(),
                "--profiling=false".into(),
            ],
        );
        plane.spawn(
            &bin,
            "kube-scheduler",
            &[
                format!("--kubeconfig={scheduler}"),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
                "--profiling=false".into(),
            ],
        );
        plane.spawn(
            &bin,
            "kwok",
            &[
                format!("--kubeconfig={kwok}"),
                // Stages are Stage objects (KWOK's CRD), so tests can add some while it runs.
                "--enable-crds=Stage".into(),
                "--manage-all-nodes=true".into(),
                "--node-lease-duration-seconds=40".into(),
                "--cidr=10.244.0.0/16".into(),
                "--node-ip=10.0.0.1".into(),
            ],
        );
        plane.wait_for(
            "the controller manager to create the default ServiceAccount",
            |p| {
                (p.admin()
                    .get("/api/v1/namespaces/default/serviceaccounts/default")
                    .status
                    == 200)
                    .then_some(())
            },
        );
        *plane.default_stages_lock() = Some(stages);
        eprintln!(
            "control plane {} ready in {:.1} s ({})",
            plane.endpoint,
            started.elapsed().as_secs_f64(),
            plane.dir.display()
        );
        plane
    }

    /// Certificates, tokens and kubeconfigs, then etcd and the API server, until `/readyz`
    /// answers 200. Err (with the logs) when a process exits or [`START_TIMEOUT`] passes.
    fn start_api_server(bin: &Path) -> Result<ControlPlane, String> {
        let dir = unique_dir();
        std::fs::create_dir_all(&dir).expect("control plane directory");
        let certs = Certs::make(&dir);
        let webhook = Webhook::start();

        let [etcd_port, etcd_peer, api_port] = free_ports();
        let endpoint = format!("https://127.0.0.1:{api_port}");
        let admin_token = random_token();
        let tokens = [
            ("admin", "system:masters"),
            ("system:kube-controller-manager", "system:masters"),
            ("system:kube-scheduler", "system:masters"),
            ("kwok", "system:masters"),
        ]
        .iter()
        .enumerate()
        .map(|(i, (user, group))| {
            let token = if i == 0 {
                admin_token.clone()
            } else {
                random_token()
            };
            (user.to_string(), group.to_string(), token)
        })
        .collect::<Vec<_>>();
        let csv: String = tokens
            .iter()
            .map(|(user, group, token)| format!("{token},{user},{user},\"{group}\"\n"))
            .collect();
        write(&dir.join("tokens.csv"), &csv);
        write(&dir.join("audit-policy.yaml"), AUDIT_POLICY);
        write(
            &dir.join("webhook.kubeconfig"),
            &kubeconfig(
                &format!("http://127.0.0.1:{}/authenticate", webhook.port),
                None,
                "",
            ),
        );
        for (user, _, token) in &tokens[1..] {
            write(
                &dir.join(format!("{}.kubeconfig", user.replace(':', "-"))),
                &kubeconfig(&endpoint, Some(&certs.ca_crt), token.as_str()),
            );
        }

        let mut plane = ControlPlane {
            endpoint: endpoint.clone(),
            ca_file: certs.ca_crt.clone(),
            admin_token,
            dir: dir.clone(),
            processes: Mutex::new(Vec::new()),
            webhook,
            failing_images: Mutex::new(Vec::new()),
            never_ready_images: Mutex::new(Vec::new()),
            default_stages: Mutex::new(None),
        };
        let s = |p: &Path| p.display().to_string();
        plane.spawn(
            bin,
            "etcd",
            &[
                "--name=default".into(),
                format!("--data-dir={}", s(&dir.join("etcd"))),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer}"),
                // Throwaway data: no fsync, no snapshots worth keeping.
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        );
        plane.spawn(
            bin,
            "kube-apiserver",
            &[
                format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", s(&dir.join("apiserver"))),
                format!("--tls-cert-file={}", s(&certs.serving_crt)),
                format!("--tls-private-key-file={}", s(&certs.serving_key)),
                format!("--token-auth-file={}", s(&dir.join("tokens.csv"))),
                format!(
                    "--authentication-token-webhook-config-file={}",
                    s(&dir.join("webhook.kubeconfig"))
                ),
                "--authentication-token-webhook-version=v1".into(),
                "--authorization-mode=RBAC".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", s(&certs.sa_pub)),
                format!("--service-account-signing-key-file={}", s(&certs.sa_key)),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                format!("--audit-policy-file={}", s(&dir.join("audit-policy.yaml"))),
                format!("--audit-log-path={}", s(&dir.join("audit.log"))),
                "--audit-log-format=json".into(),
                "--audit-log-mode=blocking".into(),
                "--enable-priority-and-fairness=false".into(),
                "--profiling=false".into(),
            ],
        );
        plane.wait_ready()?;
        Ok(plane)
    }

    /// PEM of the CA to trust for [`Self::endpoint`].
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ca_file).expect("CA file is readable")
    }

    /// A client with the admin token (group `system:masters`).
    pub fn admin(&self) -> KubeClient {
        KubeClient::new(
            &self.endpoint,
            &self.ca_pem(),
            Some(self.admin_token.clone()),
        )
    }

    /// Makes the fake EKS's managed node group updates of `cluster` (which has no stand-in)
    /// read node readiness, cordon and drain through this API server, as EKS does, with the
    /// admin token (EKS's own identity; the audit log shows it as `admin`). The nodes follow
    /// the node group's Auto Scaling group by [`Self::sync_group`].
    pub fn serve_eks_rollouts(&self, cloud: &crate::FakeCloud, cluster: &str) {
        cloud.control(
            "eks_kube_api",
            json!({
                "cluster": cluster,
                "endpoint": self.endpoint,
                "token": self.admin_token,
                "caFile": self.ca_file.display().to_string(),
            }),
        );
    }

    /// Creates `node` (KWOK then makes it Ready). Panics unless the API server created it.
    /// A node whose [`IMAGE_ANNOTATION`] is an AMI given to [`Self::fail_containers_on_image`]
    /// is added to that stage's nodes before it exists, so no pod starts on it.
    pub fn add_node(&self, node: &KwokNode) -> Value {
        self.default_stages();
        if let Some((_, ami)) = node.annotations.iter().find(|(k, _)| k == IMAGE_ANNOTATION)
            && self.failing_images().iter().any(|a| a == ami)
        {
            self.apply_container_error_stage(ami, Some(&node.name));
        }
        let r = self.admin().post("/api/v1/nodes", &node.to_json());
        assert_eq!(r.status, 201, "creating node {}: {}", node.name, r.raw);
        r.body
    }

    /// Waits until `node` reports Ready (KWOK's node stages ran) and the node lifecycle
    /// controller has lifted its `not-ready` taint, so pods can be scheduled onto it.
    pub fn wait_node_ready(&self, name: &str) {
        self.default_stages();
        self.wait_for(&format!("node {name} Ready and untainted"), |p| {
            let node = p.admin().get(&format!("/api/v1/nodes/{name}")).body;
            let ready = node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            let tainted = node["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| {
                    t["key"]
                        .as_str()
                        .is_some_and(|k| k.starts_with("node.kubernetes.io/"))
                });
            (ready && !tainted).then_some(())
        });
    }

    /// Brings the KWOK nodes in line with Auto Scaling group `group` of `cloud` as it is now,
    /// as EKS does for a self-managed group: a node joins when the fake cloud launches an
    /// instance and leaves when the instance leaves service. Level-based, not a watch: call it
    /// after anything that may launch or terminate instances (e.g. between rotator passes);
    /// what happened in between is seen only as the state it left.
    ///
    /// - Every instance of the group that is `InService` and that EC2 runs (`pending` or
    ///   `running`) and has no node gets one, as its kubelet would register it: named after
    ///   its private DNS name (`ip-10-0-1-10.us-east-2.compute.internal`), providerID
    ///   `aws:///<zone>/<instance>`, labels `kubernetes.io/hostname`,
    ///   `topology.kubernetes.io/zone` and `region`, `node.kubernetes.io/instance-type` (the
    ///   instance's), and the annotations [`IMAGE_ANNOTATION`] (its AMI, as the stand-in sets
    ///   it) and [`GROUP_ANNOTATION`] (`group`). The call returns once each such node is Ready
    ///   and untainted ([`Self::wait_node_ready`]), so the scheduler can use it, or, for an AMI
    ///   of [`Self::never_ready_nodes_of_image`], once it reports NotReady.
    /// - Every node annotated with `group` whose instance is no longer `InService` in it
    ///   (terminating, terminated, detached) is deleted, as the cloud node-lifecycle
    ///   controller deletes the node of a terminated instance; a node someone else (e.g.
    ///   nodecycle) deleted first is simply gone.
    ///
    /// Nodes without the annotation (e.g. made with [`Self::add_node`]) are left alone.
    /// Panics when the group does not exist or the API server refuses a change.
    pub fn sync_group(&self, cloud: &crate::FakeCloud, group: &str) -> NodeSync {
        let instances = cloud.control("group_instances", json!({ "group": group }))["instances"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let in_service: Vec<&Value> = instances
            .iter()
            .filter(|i| {
                i["lifecycleState"] == "InService"
                    && (i["state"] == "pending" || i["state"] == "running")
            })
            .collect();
        let admin = self.admin();
        let listed = admin.get("/api/v1/nodes");
        assert_eq!(listed.status, 200, "listing nodes: {}", listed.raw);
        // The nodes following `group`: instance id -> node name.
        let following: Vec<(String, String)> = listed.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["metadata"]["annotations"][GROUP_ANNOTATION] == group)
            .map(|n| {
                let provider = n["spec"]["providerID"].as_str().unwrap_or_default();
                (
                    provider.rsplit('/').next().unwrap_or_default().to_string(),
                    n["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
            .collect();
        let mut sync = NodeSync::default();
        let mut added: Vec<(String, String)> = Vec::new();
        for (instance, name) in &following {
            if in_service.iter().any(|i| i["id"] == instance.as_str()) {
                continue;
            }
            let r = admin.delete(&format!("/api/v1/nodes/{name}"), None);
            assert!(
                r.status == 200 || r.status == 404,
                "deleting node {name}: {}",
                r.raw
            );
            sync.removed.push(name.clone());
        }
        for instance in in_service {
            let id = instance["id"].as_str().unwrap_or_default();
            if following.iter().any(|(i, _)| i == id) {
                continue;
            }
            let s = |k: &str| instance[k].as_str().unwrap_or_default().to_string();
            let zone = s("zone");
            let mut node = KwokNode::new(id, &zone);
            if let Some(ip) = instance["privateIp"].as_str() {
                node.name = format!(
                    "ip-{}.{}.compute.internal",
                    ip.replace('.', "-"),
                    &zone[..zone.len() - 1]
                );
            }
            node.instance_type = s("instanceType");
            node.annotations = vec![
                (IMAGE_ANNOTATION.to_string(), s("imageId")),
                (GROUP_ANNOTATION.to_string(), group.to_string()),
            ];
            self.add_node(&node);
            added.push((node.name.clone(), s("imageId")));
            sync.added.push(node.name);
        }
        let never: Vec<String> = self.never_ready_images().clone();
        for (name, ami) in &added {
            if never.contains(ami) {
                self.wait_node_not_ready(name);
            } else {
                self.wait_node_ready(name);
            }
        }
        sync
    }

    /// Waits until `node` reports Ready `False` with reason `KubeletNotReady`
    /// ([`Self::never_ready_nodes_of_image`]).
    pub fn wait_node_not_ready(&self, name: &str) {
        self.default_stages();
        self.wait_for(&format!("node {name} registered NotReady"), |p| {
            let node = p.admin().get(&format!("/api/v1/nodes/{name}")).body;
            node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "Ready"
                        && c["status"] == "False"
                        && c["reason"] == "KubeletNotReady"
                })
                .then_some(())
        });
    }

    /// The tokens the authentication webhook was asked about, with its answer, oldest first
    /// (the API server caches an answer for a while, so a token is reviewed once per period).
    pub fn token_reviews(&self) -> Vec<TokenReview> {
        self.webhook.reviews.lock().expect("reviews lock").clone()
    }

    /// Creates `object` (any kind whose REST path is `/apis/<group>/<version>/[namespaces/<ns>/]
    /// <kind in lower case>s`, or `/api/v1/...` for the core group) as the admin, or replaces
    /// the existing object of that name. Panics unless the API server accepted it.
    pub fn apply(&self, object: &Value) {
        let api_version = object["apiVersion"].as_str().expect("apiVersion");
        let kind = object["kind"].as_str().expect("kind").to_ascii_lowercase();
        let name = object["metadata"]["name"].as_str().expect("metadata.name");
        let prefix = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        let collection = match object["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{prefix}/namespaces/{ns}/{kind}s"),
            None => format!("{prefix}/{kind}s"),
        };
        let admin = self.admin();
        let created = admin.post(&collection, object);
        if created.status == 201 {
            return;
        }
        assert_eq!(
            created.status, 409,
            "creating {collection}/{name}: {}",
            created.raw
        );
        let path = format!("{collection}/{name}");
        let current = admin.get(&path);
        assert_eq!(current.status, 200, "reading {path}: {}", current.raw);
        let mut object = object.clone();
        object["metadata"]["resourceVersion"] = current.body["metadata"]["resourceVersion"].clone();
        let replaced = admin.put(&path, &object);
        assert_eq!(replaced.status, 200, "replacing {path}: {}", replaced.raw);
    }

    /// Whether the API server's authorizer (RBAC) allows `user` in `groups` to `verb`
    /// `resource` (`pods`, or `pods/eviction` for a subresource) of the core group in
    /// `namespace` (None: cluster-wide), asked with a SubjectAccessReview. (allowed, reason).
    pub fn can(
        &self,
        user: &str,
        groups: &[&str],
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> (bool, String) {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let mut attributes = json!({ "group": "", "verb": verb, "resource": resource });
        if !subresource.is_empty() {
            attributes["subresource"] = json!(subresource);
        }
        if let Some(ns) = namespace {
            attributes["namespace"] = json!(ns);
        }
        let r = self.admin().post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": { "user": user, "groups": groups, "resourceAttributes": attributes },
            }),
        );
        assert_eq!(r.status, 201, "SubjectAccessReview: {}", r.raw);
        let status = &r.body["status"];
        (
            status["allowed"] == true,
            status["reason"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// The API server's audit log so far: every request that is not a read (get, list, watch)
    /// or a Lease renewal, in the order the API server answered them.
    pub fn audit(&self) -> Vec<AuditEvent> {
        let log = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["stage"] == "ResponseComplete")
            .map(|e| {
                let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                let o = &e["objectRef"];
                AuditEvent {
                    user: s(&e["user"]["username"]),
                    verb: s(&e["verb"]),
                    resource: s(&o["resource"]),
                    subresource: s(&o["subresource"]),
                    namespace: s(&o["namespace"]),
                    name: s(&o["name"]),
                    code: e["responseStatus"]["code"]
                        .as_u64()
                        .and_then(|c| u16::try_from(c).ok())
                        .unwrap_or(0),
                    received: s(&e["requestReceivedTimestamp"]),
                }
            })
            .collect()
    }

    /// Every status of PodDisruptionBudget `namespace/name` written through the API so far,
    /// oldest first, as the API server stored it (the audit log's response to each successful
    /// write of `poddisruptionbudgets/status`): every status the disruption controller
    /// computed, not a sample. (The eviction subresource's own decrement of
    /// `disruptionsAllowed` is written inside the API server and is not among them.)
    pub fn pdb_statuses(&self, namespace: &str, name: &str) -> Vec<Value> {
        let log = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| {
                let o = &e["objectRef"];
                e["stage"] == "ResponseComplete"
                    && o["resource"] == "poddisruptionbudgets"
                    && o["subresource"] == "status"
                    && o["namespace"] == namespace
                    && o["name"] == name
                    && e["responseStatus"]["code"] == 200
            })
            .map(|e| e["responseObject"]["status"].clone())
            .collect()
    }

    /// Polls `check` every 200 ms until it returns `Some`, or panics after [`START_TIMEOUT`]
    /// with `what` and the logs. Panics as well when a process of the control plane exited.
    /// A hang guard, not a timing assertion.
    pub fn wait_for<T>(&self, what: &str, mut check: impl FnMut(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(t) = check(self) {
                return t;
            }
            if let Some(exited) = self.exited() {
                panic!("{exited} while waiting for {what}\n{}", self.logs());
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {START_TIMEOUT:?} waiting for {what}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The last lines of every process's log (for failure messages).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        let names: Vec<&str> = self.processes().iter().map(|(n, _)| *n).collect();
        for name in names {
            let log =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(30)..];
            out.push_str(&format!("--- {name}.log (last {} lines)\n", tail.len()));
            for l in tail {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    fn spawn(&mut self, bin: &Path, name: &'static str, args: &[String]) {
        let exe = bin.join(name);
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log file");
        // Under setpriv (util-linux), when there, the process gets SIGKILL once the thread that
        // started it ends: a test binary killed on a timeout leaves no API server behind. So a
        // ControlPlane lives at most as long as the thread that called `start`.
        let mut command = if Path::new(SETPRIV).is_file() {
            let mut c = Command::new(SETPRIV);
            c.args(["--pdeathsig", "KILL", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            // Its own process group: a Ctrl-C of the test run does not reach it twice, and
            // Drop ends exactly the processes started here.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {}: {e}; build the control plane with scripts/controlplane.sh \
                     and set {ENV_BIN} to the directory it prints",
                    exe.display()
                )
            });
        self.processes().push((name, child));
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(exited) = self.exited() {
                return Err(format!("{exited}\n{}", self.logs()));
            }
            if let Ok(r) = self.admin().try_request("GET", "/readyz", None, None)
                && r.status == 200
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the API server was not ready within {START_TIMEOUT:?}\n{}",
                    self.logs()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn processes(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, Child)>> {
        self.processes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Which processes have exited, if any (`etcd exited (exit status: 1)`).
    fn exited(&self) -> Option<String> {
        let exited: Vec<String> = self
            .processes()
            .iter_mut()
            .filter_map(|(name, child)| {
                child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map(|status| format!("{name} exited ({status})"))
            })
            .collect();
        (!exited.is_empty()).then(|| exited.join(", "))
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Reverse order: the clients before the API server, the API server before etcd.
        for (_, child) in self.processes().iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.webhook.stop.store(true, Ordering::SeqCst);
        if std::env::var_os("NODECYCLE_CONTROLPLANE_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// [`ENV_BIN`], checked to hold every binary.
fn bin_dir() -> PathBuf {
    let dir = std::env::var_os(ENV_BIN)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "{ENV_BIN} is not set: the real-control-plane tests need the binaries \
             scripts/controlplane.sh builds; run scripts/test.sh, or \
             `export {ENV_BIN}=$(scripts/controlplane.sh)`"
            )
        });
    for b in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ] {
        assert!(
            dir.join(b).is_file(),
            "{ENV_BIN}={} has no {b}; run scripts/controlplane.sh",
            dir.display()
        );
    }
    dir
}

fn unique_dir() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "nodecycle-cp-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ))
}

/// `N` distinct loopback ports free now (the OS picks them, all bound at once so that none is
/// handed out twice; the short race until the processes bind them is accepted in tests).
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    std::array::from_fn(|i| {
        listeners[i]
            .local_addr()
            .expect("a bound loopback port")
            .port()
    })
}

fn random_token() -> String {
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write(path: &Path, content: &str) {
    std::fs::write(path, content).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// A kubeconfig for `server` (trusting `ca`, when https) with bearer `token` (none when empty).
fn kubeconfig(server: &str, ca: Option<&Path>, token: &str) -> String {
    let ca = ca
        .map(|p| format!("    certificate-authority: {}\n", p.display()))
        .unwrap_or_default();
    let user = if token.is_empty() {
        "  user: {}\n".to_string()
    } else {
        format!("  user:\n    token: {token}\n")
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{ca}\
         users:\n- name: u\n{user}contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
         current-context: c\n"
    )
}

/// The certificates and keys of one control plane, made with the openssl CLI: a CA, the API
/// server's serving certificate for 127.0.0.1 and localhost, and the service-account key pair.
struct Certs {
    ca_crt: PathBuf,
    serving_crt: PathBuf,
    serving_key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
}

impl Certs {
    fn make(dir: &Path) -> Certs {
        let p = |n: &str| dir.join(n).display().to_string();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        openssl(&[
            &["req", "-x509", "-nodes", "-days", "2"],
            &ec[..],
            &[
                "-keyout",
                &p("ca.key"),
                "-out",
                &p("ca.crt"),
                "-subj",
                "/CN=nodecycle-test-ca",
            ],
        ]);
        openssl(&[
            &["req", "-x509", "-nodes", "-days", "2"],
            &ec[..],
            &[
                "-CA",
                &p("ca.crt"),
                "-CAkey",
                &p("ca.key"),
                "-keyout",
                &p("apiserver.key"),
                "-out",
                &p("apiserver.crt"),
                "-subj",
                "/CN=kube-apiserver",
                "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,\
                 DNS:kubernetes.default.svc",
                "-addext",
                "basicConstraints=critical,CA:FALSE",
                "-addext",
                "extendedKeyUsage=serverAuth",
            ],
        ]);
        openssl(&[&[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-out",
            &p("sa.key"),
        ]]);
        openssl(&[&["pkey", "-in", &p("sa.key"), "-pubout", "-out", &p("sa.pub")]]);
        Certs {
            ca_crt: dir.join("ca.crt"),
            serving_crt: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
        }
    }
}

fn openssl(parts: &[&[&str]]) {
    let args: Vec<&str> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    let out = Command::new("openssl")
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (needed for the test certificates): {e}"));
    assert!(
        out.status.success(),
        "openssl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An EKS access entry of type `STANDARD` as the webhook applies it: who an IAM role (or user)
/// is in Kubernetes ([`ControlPlane::add_access_entry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessEntry {
    /// `arn:aws:iam::<account>:role/<name>` (a path before the name is ignored, as EKS does)
    /// or `arn:aws:iam::<account>:user/<name>`.
    pub principal_arn: String,
    /// The Kubernetes username; `{{SessionName}}` (the role session name, `@` as `-`),
    /// `{{SessionNameRaw}}` and `{{AccountID}}` are filled in per request.
    pub username: String,
    /// The Kubernetes groups (the API server adds `system:authenticated`).
    pub groups: Vec<String>,
}

impl AccessEntry {
    /// The entry EKS creates for `principal_arn` with `groups` and no username: a role's
    /// username is `arn:aws:sts::<account>:assumed-role/<name>/{{SessionName}}`, a user's is
    /// its ARN.
    pub fn new(principal_arn: &str, groups: &[&str]) -> AccessEntry {
        let username = match role_of(principal_arn) {
            Some((account, name)) => {
                format!("arn:aws:sts::{account}:assumed-role/{name}/{{{{SessionName}}}}")
            }
            None => principal_arn.to_string(),
        };
        AccessEntry {
            principal_arn: principal_arn.to_string(),
            username,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }
}

/// (account, name) of a role ARN `arn:aws:iam::<account>:role/[path/]<name>`.
fn role_of(arn: &str) -> Option<(&str, &str)> {
    let rest = arn.strip_prefix("arn:aws:iam::")?;
    let (account, path) = rest.split_once(":role/")?;
    Some((account, path.rsplit('/').next()?))
}

/// One TokenReview the webhook answered ([`ControlPlane::token_reviews`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenReview {
    /// The bearer token the API server asked about.
    pub token: String,
    /// Ok((username, groups)) when authenticated, else why not (the webhook's `error`).
    pub outcome: Result<(String, Vec<String>), String>,
}

impl TokenReview {
    /// Whether the token was accepted.
    pub fn accepted(&self) -> bool {
        self.outcome.is_ok()
    }
}

/// What the webhook checks tokens against: the fake cloud's STS, the cluster's name, the
/// access entries.
#[derive(Debug, Default)]
struct AuthConfig {
    sts_url: Option<String>,
    cluster: String,
    entries: Vec<AccessEntry>,
}

impl ControlPlane {
    /// Makes the authentication webhook validate EKS tokens for cluster `cluster` by replaying
    /// them to `sts_url` (a fake cloud's [`crate::FakeCloud::aws_url`]). Until this is called
    /// every EKS token is refused.
    pub fn trust_sts(&self, sts_url: &str, cluster: &str) {
        let mut config = self.webhook.config.lock().expect("webhook config lock");
        config.sts_url = Some(sts_url.trim_end_matches('/').to_string());
        config.cluster = cluster.to_string();
    }

    /// Adds (or replaces, for the same principal) an access entry: from now on a token signed
    /// by that principal authenticates as `entry.username` in `entry.groups`. Tokens of
    /// principals without an entry get 401.
    pub fn add_access_entry(&self, entry: AccessEntry) {
        let mut config = self.webhook.config.lock().expect("webhook config lock");
        config
            .entries
            .retain(|e| e.principal_arn != entry.principal_arn);
        config.entries.push(entry);
    }
}

impl ControlPlane {
    /// Removes the access entry of `principal_arn`, if any: its tokens get 401 from then on
    /// (once the API server's cache of earlier answers has expired; a new token is asked
    /// about at once).
    pub fn remove_access_entry(&self, principal_arn: &str) {
        let mut config = self.webhook.config.lock().expect("webhook config lock");
        config.entries.retain(|e| e.principal_arn != principal_arn);
    }
}

/// The name of KWOK's Stage CRD (`kwok.x-k8s.io/v1alpha1`, cluster-scoped).
const STAGE_CRD: &str = "stages.kwok.x-k8s.io";

/// Weight of the stages tests add: KWOK picks among the stages matching an object at random in
/// proportion to their weights, and the default stages have none, so these always win.
const TEST_STAGE_WEIGHT: i64 = 1000;

/// The message of the NodeStatusUnknown conditions [`ControlPlane::stall_nodes_of_image`]
/// writes: the node lifecycle controller's for a kubelet that stopped posting status.
pub const NODE_STATUS_UNKNOWN_MESSAGE: &str = "Kubelet stopped posting node status.";

/// The message of the Ready condition of the nodes [`ControlPlane::never_ready_nodes_of_image`]
/// holds NotReady: the kubelet's when the container runtime's network is not ready (no CNI).
pub const NODE_NOT_READY_MESSAGE: &str = "container runtime network not ready: \
     NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni \
     plugin not initialized";

/// The message of the containers [`ControlPlane::fail_containers_on_image`] holds back, as
/// containerd's CRI reports a container it cannot create.
pub const CREATE_CONTAINER_ERROR_MESSAGE: &str =
    "failed to create containerd container: image runtime of this AMI is broken (test stage)";

impl ControlPlane {
    /// Installs KWOK's Stage CRD (a schema-less definition of `kwok.x-k8s.io/v1alpha1`
    /// `Stage`, written here), before KWOK starts with `--enable-crds=Stage`: KWOK then
    /// follows the Stage objects as they are created, replaced or deleted.
    fn install_stage_crd(&self) {
        self.apply(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": { "name": STAGE_CRD },
            "spec": {
                "group": "kwok.x-k8s.io",
                "scope": "Cluster",
                "names": {
                    "plural": "stages",
                    "singular": "stage",
                    "kind": "Stage",
                    "listKind": "StageList",
                },
                "versions": [{
                    "name": "v1alpha1",
                    "served": true,
                    "storage": true,
                    "subresources": { "status": {} },
                    "schema": { "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                    } },
                }],
            },
        }));
        self.wait_for("the Stage CRD to be served", |p| {
            (p.admin().get("/apis/kwok.x-k8s.io/v1alpha1/stages").status == 200).then_some(())
        });
    }

    /// Creates the default stages of tests/controlplane/kwok-stages.yaml as Stage objects, in
    /// a thread: the API server holds the first write of a new CRD's objects for 2 s (on
    /// purpose, for HA API servers), which the test's own setup then hides. Whatever adds a
    /// node or a stage first waits for it ([`Self::default_stages`]).
    fn install_default_stages(&self) -> std::thread::JoinHandle<()> {
        let admin = self.admin();
        std::thread::spawn(move || {
            let path = crate::repo_path("tests/controlplane/kwok-stages.yaml");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            for document in serde_norway::Deserializer::from_str(&text) {
                let stage: Value = serde::Deserialize::deserialize(document)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                if stage.is_null() {
                    continue;
                }
                let r = admin.post("/apis/kwok.x-k8s.io/v1alpha1/stages", &stage);
                assert_eq!(
                    r.status, 201,
                    "creating stage {}: {}",
                    stage["metadata"]["name"], r.raw
                );
            }
        })
    }

    /// Makes every node whose [`IMAGE_ANNOTATION`] is `ami` (those [`Self::sync_group`] adds
    /// later as well) turn NotReady as the node lifecycle controller reports a node whose
    /// kubelet stalled: at `after` past its `metadata.creationTimestamp` (at once if that is
    /// past; the node is first Ready, as KWOK makes it), its `Ready`, `MemoryPressure`,
    /// `DiskPressure` and `PIDPressure` conditions become `Unknown` with reason
    /// `NodeStatusUnknown`, message [`NODE_STATUS_UNKNOWN_MESSAGE`], `lastTransitionTime` the
    /// moment of the change and `lastHeartbeatTime` kept; and they stay so (KWOK's own stages
    /// no longer make it Ready). The real node lifecycle controller then taints it
    /// `node.kubernetes.io/unreachable` (NoSchedule and NoExecute). The nodes of `ami` that
    /// exist already get [`STAGES_TOUCHED_ANNOTATION`], so that KWOK sees them again.
    ///
    /// Two KWOK stages do it (`nodecycle-stall-<ami>` and `nodecycle-stalled-<ami>`). KWOK
    /// still renews the node's Lease, so the controller sees a kubelet that reports Unknown
    /// rather than one gone silent: it does not mark the pods already on the node not Ready
    /// (it does so when it turns Ready into Unknown itself; a pod updated later is marked),
    /// and their eviction after the NoExecute taint's toleration (300 s by default) is the
    /// taint eviction controller's.
    pub fn stall_nodes_of_image(&self, ami: &str, after: Duration) {
        self.default_stages();
        let ready_status = r#".status.conditions.[] | select( .type == "Ready" ) | .status"#;
        let ready_reason = r#".status.conditions.[] | select( .type == "Ready" ) | .reason"#;
        let template = format!(
            r#"{{{{ $now := Now }}}}
conditions:
{{{{ range .status.conditions }}}}
{{{{ if or (eq .type "Ready") (eq .type "MemoryPressure") (eq .type "DiskPressure") (eq .type "PIDPressure") }}}}
- type: {{{{ .type | Quote }}}}
  status: "Unknown"
  reason: "NodeStatusUnknown"
  message: {message:?}
  lastHeartbeatTime: {{{{ .lastHeartbeatTime | Quote }}}}
  lastTransitionTime: {{{{ $now | Quote }}}}
{{{{ end }}}}
{{{{ end }}}}
"#,
            message = NODE_STATUS_UNKNOWN_MESSAGE
        );
        let node_ref = json!({ "apiGroup": "v1", "kind": "Node" });
        self.apply(&json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": { "name": stage_name("nodecycle-stall", ami) },
            "spec": {
                "resourceRef": node_ref,
                "selector": {
                    "matchAnnotations": { IMAGE_ANNOTATION: ami },
                    "matchExpressions": [
                        { "key": ".status.phase", "operator": "In", "values": ["Running"] },
                        { "key": ready_status, "operator": "In", "values": ["True"] },
                    ],
                },
                "weight": TEST_STAGE_WEIGHT,
                // A time is a delay until then: the same deadline whatever changes the node.
                "delay": { "durationFrom": { "jq": { "expression": format!(
                    ".metadata.creationTimestamp | fromdate + {} | todate",
                    after.as_secs()
                ) } } },
                "next": { "statusTemplate": template },
            },
        }));
        // Holds the node there: it matches instead of KWOK's node-initialize (which would make
        // any node that is not Ready Ready again) and changes nothing.
        self.apply(&json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": { "name": stage_name("nodecycle-stalled", ami) },
            "spec": {
                "resourceRef": node_ref,
                "selector": {
                    "matchAnnotations": { IMAGE_ANNOTATION: ami },
                    "matchExpressions": [
                        { "key": ready_reason, "operator": "In", "values": ["NodeStatusUnknown"] },
                    ],
                },
                "weight": TEST_STAGE_WEIGHT,
                "next": {},
            },
        }));
        self.touch_nodes_of_image(ami);
    }

    /// Makes every node whose [`IMAGE_ANNOTATION`] is `ami` (those [`Self::sync_group`] adds
    /// later as well) register and stay NotReady, as the kubelet of an instance that boots but
    /// never gets ready (e.g. its CNI never starts) reports itself: `Ready` `False` with reason
    /// `KubeletNotReady` and message [`NODE_NOT_READY_MESSAGE`], the pressure conditions
    /// `False`, phase Running. The real node lifecycle controller then taints it
    /// `node.kubernetes.io/not-ready` (NoSchedule), so no pod is scheduled there. Call it before
    /// the nodes of `ami` are created: a node that was Ready first is a stalled one
    /// ([`Self::stall_nodes_of_image`]).
    ///
    /// Two KWOK stages do it (`nodecycle-never-ready-<ami>`, for a node without a `Ready`
    /// condition, and `nodecycle-not-ready-<ami>`, holding it after: they match instead of
    /// KWOK's node-initialize, which would make the node Ready).
    pub fn never_ready_nodes_of_image(&self, ami: &str) {
        self.default_stages();
        {
            let mut images = self.never_ready_images();
            if !images.iter().any(|a| a == ami) {
                images.push(ami.to_string());
            }
        }
        let ready_status = r#".status.conditions.[] | select( .type == "Ready" ) | .status"#;
        let template = format!(
            r#"{{{{ $now := Now }}}}
conditions:
- type: "MemoryPressure"
  status: "False"
  reason: "KubeletHasSufficientMemory"
  message: "kubelet has sufficient memory available"
  lastHeartbeatTime: {{{{ $now | Quote }}}}
  lastTransitionTime: {{{{ $now | Quote }}}}
- type: "DiskPressure"
  status: "False"
  reason: "KubeletHasNoDiskPressure"
  message: "kubelet has no disk pressure"
  lastHeartbeatTime: {{{{ $now | Quote }}}}
  lastTransitionTime: {{{{ $now | Quote }}}}
- type: "PIDPressure"
  status: "False"
  reason: "KubeletHasSufficientPID"
  message: "kubelet has sufficient PID available"
  lastHeartbeatTime: {{{{ $now | Quote }}}}
  lastTransitionTime: {{{{ $now | Quote }}}}
- type: "Ready"
  status: "False"
  reason: "KubeletNotReady"
  message: {message:?}
  lastHeartbeatTime: {{{{ $now | Quote }}}}
  lastTransitionTime: {{{{ $now | Quote }}}}
phase: Running
"#,
            message = NODE_NOT_READY_MESSAGE
        );
        let node_ref = json!({ "apiGroup": "v1", "kind": "Node" });
        self.apply(&json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": { "name": stage_name("nodecycle-never-ready", ami) },
            "spec": {
                "resourceRef": node_ref,
                "selector": {
                    "matchAnnotations": { IMAGE_ANNOTATION: ami },
                    "matchExpressions": [
                        { "key": ready_status, "operator": "DoesNotExist" },
                    ],
                },
                "weight": TEST_STAGE_WEIGHT,
                "next": { "statusTemplate": template },
            },
        }));
        self.apply(&json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": { "name": stage_name("nodecycle-not-ready", ami) },
            "spec": {
                "resourceRef": node_ref,
                "selector": {
                    "matchAnnotations": { IMAGE_ANNOTATION: ami },
                    "matchExpressions": [
                        { "key": ready_status, "operator": "Exists" },
                    ],
                },
                "weight": TEST_STAGE_WEIGHT,
                "next": {},
            },
        }));
    }

    /// Annotates every node of `ami` that exists ([`STAGES_TOUCHED_ANNOTATION`]): KWOK matches
    /// its stages against a node when the node changes, not when a stage is created, so a node
    /// already settled would not meet a stage added after it.
    fn touch_nodes_of_image(&self, ami: &str) {
        let admin = self.admin();
        let listed = admin.get("/api/v1/nodes");
        assert_eq!(listed.status, 200, "listing nodes: {}", listed.raw);
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos().to_string())
            .unwrap_or_default();
        for name in listed.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["metadata"]["annotations"][IMAGE_ANNOTATION] == ami)
            .filter_map(|n| n["metadata"]["name"].as_str())
        {
            let r = admin.patch(
                &format!("/api/v1/nodes/{name}"),
                "application/merge-patch+json",
                &json!({ "metadata": { "annotations": { STAGES_TOUCHED_ANNOTATION: stamp } } }),
            );
            assert_eq!(r.status, 200, "touching node {name}: {}", r.raw);
        }
    }

    /// Makes the pods scheduled onto nodes whose [`IMAGE_ANNOTATION`] is `ami` (nodes
    /// [`Self::sync_group`] or [`Self::add_node`] add later as well) fail to start, as the
    /// kubelet reports a container the runtime cannot create: `status.phase` `Pending`, every
    /// container in `containerStatuses` not ready, not started, 0 restarts, `state.waiting`
    /// with reason `CreateContainerError` and message [`CREATE_CONTAINER_ERROR_MESSAGE`];
    /// conditions `PodReadyToStartContainers` and `Initialized` True, `ContainersReady` and
    /// `Ready` False with reason `ContainersNotReady`; a host and pod IP and a `startTime`.
    /// It stays so (a Deployment's pods there never become available).
    ///
    /// A KWOK stage (`nodecycle-create-container-error-<ami>`) does it for the pods still
    /// Pending on those nodes, by node name (a pod stage cannot read its node): pods already
    /// running there when this is called keep running, as containers already created would.
    pub fn fail_containers_on_image(&self, ami: &str) {
        self.default_stages();
        {
            let mut images = self.failing_images();
            if !images.iter().any(|a| a == ami) {
                images.push(ami.to_string());
            }
        }
        self.apply_container_error_stage(ami, None);
    }

    /// Creates or replaces the stage of [`Self::fail_containers_on_image`] for `ami`, for the
    /// nodes annotated with it now and `also` (a node about to be created); none: no stage.
    fn apply_container_error_stage(&self, ami: &str, also: Option<&str>) {
        let listed = self.admin().get("/api/v1/nodes");
        assert_eq!(listed.status, 200, "listing nodes: {}", listed.raw);
        let mut nodes: Vec<String> = listed.body["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["metadata"]["annotations"][IMAGE_ANNOTATION] == ami)
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        nodes.extend(also.map(str::to_string));
        nodes.sort();
        nodes.dedup();
        if nodes.is_empty() {
            return;
        }
        let template = format!(
            r#"{{{{ $now := Now }}}}
{{{{ $started := or .status.startTime $now }}}}
conditions:
- type: PodReadyToStartContainers
  status: "True"
  lastTransitionTime: {{{{ $started | Quote }}}}
- type: Initialized
  status: "True"
  lastTransitionTime: {{{{ $started | Quote }}}}
- type: ContainersReady
  status: "False"
  reason: ContainersNotReady
  message: "containers with unready status: [{{{{ range $i, $c := .spec.containers }}}}{{{{ if $i }}}} {{{{ end }}}}{{{{ $c.name }}}}{{{{ end }}}}]"
  lastTransitionTime: {{{{ $started | Quote }}}}
- type: Ready
  status: "False"
  reason: ContainersNotReady
  message: "containers with unready status: [{{{{ range $i, $c := .spec.containers }}}}{{{{ if $i }}}} {{{{ end }}}}{{{{ $c.name }}}}{{{{ end }}}}]"
  lastTransitionTime: {{{{ $started | Quote }}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- name: {{{{ .name | Quote }}}}
  image: {{{{ .image | Quote }}}}
  imageID: ""
  ready: false
  started: false
  restartCount: 0
  state:
    waiting:
      reason: CreateContainerError
      message: {message:?}
{{{{ end }}}}
{{{{ with NodeIPsWith .spec.nodeName }}}}
hostIP: {{{{ index . 0 | Quote }}}}
{{{{ end }}}}
{{{{ $podIP := or .status.podIP "" }}}}
{{{{ if not $podIP }}}}
{{{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}}}
{{{{ $podIP = index . 0 }}}}
{{{{ end }}}}
{{{{ end }}}}
{{{{ with $podIP }}}}
podIP: {{{{ . | Quote }}}}
podIPs:
- ip: {{{{ . | Quote }}}}
{{{{ end }}}}
phase: Pending
startTime: {{{{ $started | Quote }}}}
"#,
            message = CREATE_CONTAINER_ERROR_MESSAGE
        );
        self.apply(&json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": { "name": stage_name("nodecycle-create-container-error", ami) },
            "spec": {
                "resourceRef": { "apiGroup": "v1", "kind": "Pod" },
                "selector": { "matchExpressions": [
                    { "key": ".metadata.deletionTimestamp", "operator": "DoesNotExist" },
                    { "key": ".status.phase", "operator": "In", "values": ["Pending"] },
                    { "key": ".spec.nodeName", "operator": "In", "values": nodes },
                ] },
                "weight": TEST_STAGE_WEIGHT,
                // The same status each time it matches again (times and pod IP from the
                // first), so KWOK has nothing to patch and stops.
                "next": { "statusTemplate": template },
            },
        }));
    }

    /// Makes the pods labelled `key=value` go, once deleted, only at their `deletionTimestamp`
    /// (the end of their grace period), as the kubelet kills a container that ignores SIGTERM
    /// when the grace period ends and only then confirms the deletion; until then the API server
    /// lists them Terminating. KWOK's default `pod-delete` stage removes a deleted pod at once.
    pub fn pods_ignore_sigterm(&self, key: &str, value: &str) {
        self.default_stages();
        let mut labels = serde_json::Map::new();
        labels.insert(key.to_string(), json!(value));
        self.apply(&json!({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": { "name": stage_name("nodecycle-ignore-sigterm", value) },
            "spec": {
                "resourceRef": { "apiGroup": "v1", "kind": "Pod" },
                "selector": {
                    "matchLabels": labels,
                    "matchExpressions": [
                        { "key": ".metadata.deletionTimestamp", "operator": "Exists" },
                    ],
                },
                "weight": TEST_STAGE_WEIGHT,
                // The delay runs until the time the expression gives: the deletion timestamp,
                // which the API server set to the time of the deletion plus the grace period.
                "delay": { "durationFrom": { "expressionFrom": ".metadata.deletionTimestamp" } },
                "next": { "delete": true },
            },
        }));
    }

    /// Waits until KWOK's default stages exist (the thread of [`Self::install_default_stages`]
    /// ended); panics, with the logs, when creating them failed.
    fn default_stages(&self) {
        let handle = self.default_stages_lock().take();
        if let Some(handle) = handle
            && handle.join().is_err()
        {
            panic!("creating KWOK's default stages failed\n{}", self.logs());
        }
    }

    fn default_stages_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, Option<std::thread::JoinHandle<()>>> {
        self.default_stages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn never_ready_images(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.never_ready_images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn failing_images(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.failing_images
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `<prefix>-<ami>` as an object name (lower case, `-` for anything else).
fn stage_name(prefix: &str, ami: &str) -> String {
    let ami: String = ami
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{prefix}-{ami}")
}

/// The API server's token authentication webhook (plain HTTP on loopback, one request per
/// connection), answering TokenReviews in a background thread until stopped. It validates an
/// EKS token as aws-iam-authenticator does ([`authenticate`]).
struct Webhook {
    port: u16,
    stop: Arc<AtomicBool>,
    reviews: Arc<Mutex<Vec<TokenReview>>>,
    config: Arc<Mutex<AuthConfig>>,
}

impl Webhook {
    fn start() -> Webhook {
        let listener = TcpListener::bind("127.0.0.1:0").expect("webhook port");
        listener.set_nonblocking(true).expect("non-blocking accept");
        let port = listener.local_addr().expect("webhook address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let config = Arc::new(Mutex::new(AuthConfig::default()));
        let (stop2, reviews2, config2) = (stop.clone(), reviews.clone(), config.clone());
        std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let _ = serve_review(conn, &reviews2, &config2);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Webhook {
            port,
            stop,
            reviews,
            config,
        }
    }
}

fn serve_review(
    conn: TcpStream,
    reviews: &Mutex<Vec<TokenReview>>,
    config: &Mutex<AuthConfig>,
) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let (sts_url, cluster, entries) = {
        let c = config.lock().expect("webhook config lock");
        (c.sts_url.clone(), c.cluster.clone(), c.entries.clone())
    };
    let outcome = match sts_url {
        None => Err("the webhook trusts no STS (ControlPlane::trust_sts)".to_string()),
        Some(sts) => authenticate(token, &cluster, &sts, &entries, SystemTime::now()),
    };
    let status = match &outcome {
        Ok(user) => json!({ "authenticated": true, "user": user }),
        Err(e) => json!({ "authenticated": false, "error": e }),
    };
    reviews.lock().expect("reviews lock").push(TokenReview {
        token: token.to_string(),
        outcome: outcome.map(|u| {
            let groups = u["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_str().map(str::to_string))
                .collect();
            (
                u["username"].as_str().unwrap_or_default().to_string(),
                groups,
            )
        }),
    });
    let answer = serde_json::to_vec(&json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "status": status,
    }))
    .expect("JSON");
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        answer.len()
    )?;
    conn.write_all(&answer)?;
    conn.flush()
}

/// How long after its `X-Amz-Date` a token is accepted (aws-iam-authenticator's
/// `presignedURLExpiration`).
const TOKEN_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// The query parameters aws-iam-authenticator allows in the presigned URL (lower case).
const ALLOWED_PARAMS: [&str; 9] = [
    "action",
    "version",
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-date",
    "x-amz-expires",
    "x-amz-security-token",
    "x-amz-signature",
    "x-amz-signedheaders",
];

/// The TokenReview `user` for `token`, or why it is refused, as aws-iam-authenticator (EKS)
/// decides:
/// 1. the token is `k8s-aws-v1.` + base64url of `https://<STS host>/?<query>`, the host
///    `sts.amazonaws.com` or `sts.<region>.amazonaws.com[.cn]`, the query only the
///    allowlisted parameters, each once, `Action=GetCallerIdentity`, `x-k8s-aws-id` among
///    `X-Amz-SignedHeaders`, `X-Amz-Date` at most [`TOKEN_MAX_AGE`] before `now`;
/// 2. the URL is replayed to `sts_url` with the original `Host` header (the signature covers
///    it) and `x-k8s-aws-id: <cluster>`: STS checks the signature, so a token signed for
///    another cluster, tampered with, or signed with unknown keys is refused there;
/// 3. STS's caller ARN, an assumed-role session normalized to its role ARN, is looked up in
///    `entries`: none, refused; else the entry's username (placeholders filled) and groups.
fn authenticate(
    token: &str,
    cluster: &str,
    sts_url: &str,
    entries: &[AccessEntry],
    now: SystemTime,
) -> Result<Value, String> {
    let encoded = token
        .strip_prefix("k8s-aws-v1.")
        .ok_or("not an EKS token (no k8s-aws-v1. prefix)")?;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded.trim_end_matches('='))
        .map_err(|e| format!("token is not base64url: {e}"))?;
    let url = String::from_utf8(url).map_err(|_| "token is not a UTF-8 URL")?;
    let rest = url
        .strip_prefix("https://")
        .ok_or("presigned URL is not https")?;
    let (host, query) = rest
        .split_once("/?")
        .ok_or("presigned URL has no query on path /")?;
    if !is_sts_host(host) {
        return Err(format!("unexpected STS host {host:?}"));
    }
    let mut params: Vec<(String, String)> = Vec::new();
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (percent_decode(k)?, percent_decode(v)?);
        if !ALLOWED_PARAMS.contains(&k.to_ascii_lowercase().as_str()) {
            return Err(format!("non-allowlisted query parameter {k:?}"));
        }
        if params.iter().any(|(p, _)| p.eq_ignore_ascii_case(&k)) {
            return Err(format!("duplicate query parameter {k:?}"));
        }
        params.push((k, v));
    }
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if param("Action") != Some("GetCallerIdentity") {
        return Err("Action is not GetCallerIdentity".into());
    }
    let signed = param("X-Amz-SignedHeaders").ok_or("missing X-Amz-SignedHeaders")?;
    if !signed
        .split(';')
        .any(|h| h.eq_ignore_ascii_case("x-k8s-aws-id"))
    {
        return Err(format!(
            "x-k8s-aws-id is not a signed header (X-Amz-SignedHeaders={signed})"
        ));
    }
    let date = param("X-Amz-Date").ok_or("missing X-Amz-Date")?;
    let signed_at = amz_date(date).ok_or_else(|| format!("malformed X-Amz-Date {date:?}"))?;
    let now_secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if signed_at + TOKEN_MAX_AGE.as_secs() < now_secs {
        return Err(format!(
            "token expired: signed at {date}, more than {} minutes ago",
            TOKEN_MAX_AGE.as_secs() / 60
        ));
    }

    let answer = crate::http::get_with_headers(
        &format!("{sts_url}/?{query}"),
        &[
            ("Host", host),
            ("x-k8s-aws-id", cluster),
            ("Accept", "application/json"),
        ],
    )
    .map_err(|e| format!("STS at {sts_url} did not answer: {e}"))?;
    let body: Value = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
    if answer.status != 200 {
        return Err(format!(
            "STS refused the token ({}): {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        ));
    }
    let result = &body["GetCallerIdentityResponse"]["GetCallerIdentityResult"];
    let field = |k: &str| result[k].as_str().unwrap_or_default().to_string();
    let (arn, account, user_id) = (field("Arn"), field("Account"), field("UserId"));
    // arn:aws:sts::<account>:assumed-role/<role>/<session> -> arn:aws:iam::<account>:role/<role>
    let (canonical, session) = match arn
        .strip_prefix("arn:aws:sts::")
        .and_then(|r| r.split_once(":assumed-role/"))
        .and_then(|(acct, r)| r.split_once('/').map(|(role, s)| (acct, role, s)))
    {
        Some((acct, role, s)) => (format!("arn:aws:iam::{acct}:role/{role}"), s.to_string()),
        None => (arn.clone(), String::new()),
    };
    let entry = entries
        .iter()
        .find(|e| match (role_of(&e.principal_arn), role_of(&canonical)) {
            (Some(a), Some(b)) => a == b,
            _ => e.principal_arn == canonical,
        })
        .ok_or_else(|| format!("no access entry for {canonical} (caller {arn})"))?;
    let username = entry
        .username
        .replace("{{SessionNameRaw}}", &session)
        .replace("{{SessionName}}", &session.replace('@', "-"))
        .replace("{{AccountID}}", &account);
    let principal_id = user_id.split(':').next().unwrap_or_default().to_string();
    Ok(json!({
        "username": username,
        "uid": format!("aws-iam-authenticator:{account}:{principal_id}"),
        "groups": entry.groups,
        "extra": {
            "arn": [arn],
            "canonicalArn": [canonical],
            "sessionName": [session],
            "principalId": [principal_id],
            "accountId": [account],
        },
    }))
}

/// Whether `host` is an STS endpoint: `sts.amazonaws.com` or `sts.<region>.amazonaws.com`
/// (`.amazonaws.com.cn` in China).
fn is_sts_host(host: &str) -> bool {
    let Some(rest) = host.strip_prefix("sts") else {
        return false;
    };
    let Some(middle) = rest
        .strip_suffix(".amazonaws.com")
        .or_else(|| rest.strip_suffix(".amazonaws.com.cn"))
    else {
        return false;
    };
    middle.is_empty()
        || middle.strip_prefix('.').is_some_and(|region| {
            !region.is_empty()
                && region
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

/// `s` with its `%XX` escapes decoded (`+` stays `+`, as in a SigV4 query).
fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8"))
}

/// Seconds since the epoch of a SigV4 date `YYYYMMDDTHHMMSSZ`.
fn amz_date(date: &str) -> Option<u64> {
    if date.len() != 16 || &date[8..9] != "T" || !date.ends_with('Z') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| date.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (hh, mm, ss) = (n(9..11)?, n(11..13)?, n(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amz_dates() {
        assert_eq!(amz_date("19700101T000000Z"), Some(0));
        assert_eq!(amz_date("20240102T030405Z"), Some(1_704_164_645));
        assert_eq!(amz_date("20240229T235959Z"), Some(1_709_251_199));
        assert_eq!(amz_date("2024-01-02T03:04:05Z"), None);
    }

    #[test]
    fn sts_hosts() {
        assert!(is_sts_host("sts.amazonaws.com"));
        assert!(is_sts_host("sts.us-east-2.amazonaws.com"));
        assert!(is_sts_host("sts.cn-north-1.amazonaws.com.cn"));
        assert!(!is_sts_host("sts.us-east-2.amazonaws.com.evil.example"));
        assert!(!is_sts_host("evil.example"));
        assert!(!is_sts_host("sts..amazonaws.com"));
        assert!(!is_sts_host("127.0.0.1:4566"));
    }

    #[test]
    fn default_usernames() {
        let role = AccessEntry::new("arn:aws:iam::123456789012:role/path/rotator", &["g"]);
        assert_eq!(
            role.username,
            "arn:aws:sts::123456789012:assumed-role/rotator/{{SessionName}}"
        );
        let user = AccessEntry::new("arn:aws:iam::123456789012:user/alice", &[]);
        assert_eq!(user.username, "arn:aws:iam::123456789012:user/alice");
    }

    #[test]
    fn refusals_before_sts() {
        let now = SystemTime::now();
        let token = |url: &str| {
            format!(
                "k8s-aws-v1.{}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url)
            )
        };
        // Nothing listens on port 9: a token that passes the local checks fails at STS.
        let check = |t: &str| authenticate(t, "prod", "http://127.0.0.1:9", &[], now);
        assert!(check("Bearer abc").unwrap_err().contains("prefix"));
        let good_query = "Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Date=20240102T030405Z\
                          &X-Amz-SignedHeaders=host%3Bx-k8s-aws-id&X-Amz-Signature=00";
        let e = check(&token(&format!("https://evil.example/?{good_query}"))).unwrap_err();
        assert!(e.contains("unexpected STS host"), "{e}");
        let e = check(&token(
            "https://sts.us-east-2.amazonaws.com/?Action=GetCallerIdentity\
             &X-Amz-Date=20240102T030405Z&X-Amz-SignedHeaders=host",
        ))
        .unwrap_err();
        assert!(e.contains("x-k8s-aws-id is not a signed header"), "{e}");
        let e = check(&token(&format!(
            "https://sts.us-east-2.amazonaws.com/?{good_query}"
        )))
        .unwrap_err();
        assert!(e.contains("token expired"), "{e}");
        let e = check(&token(&format!(
            "https://sts.us-east-2.amazonaws.com/?{good_query}&Extra=1"
        )))
        .unwrap_err();
        assert!(e.contains("non-allowlisted"), "{e}");
    }
}
