//! The narrow port to the Kubernetes API: the node operations a drain and the rotator need.
//! Implemented over HTTP by [`crate::kube::EksKube`] and in memory by
//! [`crate::kube::memory::MemoryCluster`].

use super::pods::{NodeInfo, PodInfo, PodRef};
use async_trait::async_trait;
use std::fmt;

/// Node operations. Every method is idempotent: calling it again after success (or after a
/// partial failure) converges to the same state without error.
#[async_trait]
pub trait NodeOps: Send + Sync {
    /// The node whose `spec.providerID` is `aws:///<az>/<instance_id>` (never matched by name).
    /// `Ok(None)` when no node has that instance.
    async fn find_node(&self, instance_id: &str) -> Result<Option<NodeInfo>, KubeError>;

    /// Every node of the cluster (all pages).
    async fn list_nodes(&self) -> Result<Vec<NodeInfo>, KubeError>;

    /// The node named `name`, `Ok(None)` when it does not exist (any more).
    async fn get_node(&self, name: &str) -> Result<Option<NodeInfo>, KubeError>;

    /// Marks the node unschedulable and adds the taint `nodecycle.dev/disrupted=<reason>:NoSchedule`.
    /// Writes nothing when both are present already (an existing taint keeps its value).
    /// Returns whether anything changed. Fails with [`KubeError::NotFound`] if the node is gone.
    async fn cordon(&self, node: &str, reason: &str) -> Result<bool, KubeError>;

    /// Removes the `nodecycle.dev/disrupted` taint and, when `uncordon` is true, clears
    /// `spec.unschedulable` (pass false when the node was cordoned before nodecycle came).
    /// Returns whether anything changed; a missing node is `Ok(false)`.
    async fn undo_cordon(&self, node: &str, uncordon: bool) -> Result<bool, KubeError>;

    /// Sets (`Some(true)`) or removes (`Some(false)`) the marks nodecycle shares with Cluster
    /// Autoscaler and load balancers, each with nodecycle's marker annotation beside it (see
    /// [`crate::rotation::marks`]): `scale_down_disabled` the annotation
    /// `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`, `exclude_from_lb` the
    /// label `node.kubernetes.io/exclude-from-external-load-balancers`. One merge patch of the
    /// node's metadata; a missing node is `Ok(false)`.
    async fn mark(
        &self,
        node: &str,
        scale_down_disabled: Option<bool>,
        exclude_from_lb: Option<bool>,
    ) -> Result<bool, KubeError>;

    /// Adds (`true`) or removes (`false`) the taint
    /// `nodecycle.dev/replacing=rollout:PreferNoSchedule` ([`crate::rotation::marks`]), keeping
    /// every other taint (a read, then a patch preconditioned on what was read); a node that
    /// carries Cluster Autoscaler's `ToBeDeletedByClusterAutoscaler` taint is CA's and is left
    /// alone. Returns whether anything changed; a missing node is `Ok(false)`.
    async fn prefer_elsewhere(&self, node: &str, on: bool) -> Result<bool, KubeError>;

    /// Every pod bound to the node (field selector `spec.nodeName=<node>`), all namespaces.
    async fn list_pods(&self, node: &str) -> Result<Vec<PodInfo>, KubeError>;

    /// Every pod of the cluster bound to a node and not finished (`Succeeded` and `Failed`
    /// filtered out by the server), with its node's name (all namespaces, all pages): one list
    /// instead of one per node when many nodes' pods are wanted at once.
    async fn list_all_pods(&self) -> Result<Vec<(String, PodInfo)>, KubeError>;

    /// The uids of the pods the kubelet could not create a sandbox for: core/v1 Events with
    /// field selector `involvedObject.kind=Pod,reason=FailedCreatePodSandBox`, all namespaces,
    /// all pages (such a pod's status says only `ContainerCreating`).
    async fn sandbox_failures(&self) -> Result<std::collections::BTreeSet<String>, KubeError>;

    /// Asks the Eviction API (policy/v1) to evict the pod, with a uid precondition, so that
    /// PodDisruptionBudgets are honoured. API refusals are outcomes, not errors; only transport
    /// and authentication failures are `Err`.
    async fn evict(&self, pod: &PodRef) -> Result<EvictOutcome, KubeError>;

    /// Deletes the pod (its own grace period, uid precondition), bypassing PodDisruptionBudgets.
    /// Returns false when it was already gone (404, or uid mismatch 409).
    async fn delete_pod(&self, pod: &PodRef) -> Result<bool, KubeError>;

    /// Deletes the Node object. Returns false when it was already gone.
    async fn delete_node(&self, node: &str) -> Result<bool, KubeError>;

    /// Records a core/v1 Event about the node (visible in `kubectl describe node`).
    async fn record_event(&self, node: &NodeInfo, event: &NodeEvent) -> Result<(), KubeError>;
}

/// Answer of the Eviction API for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictOutcome {
    /// Accepted (HTTP 200/201): the pod is now terminating.
    Evicted,
    /// The pod does not exist any more (404), or was replaced by another of the same name
    /// (409 on the uid precondition).
    Gone,
    /// HTTP 429: a PodDisruptionBudget does not allow the disruption now; retry later.
    Blocked {
        /// Name of the blocking budget (from the Status cause `DisruptionBudget`), if stated.
        pdb: Option<String>,
        /// The API server's message.
        message: String,
    },
    /// Any other refusal (e.g. 500 when several budgets select the pod, 403 by RBAC).
    Rejected {
        /// HTTP status code.
        code: u16,
        /// The API server's message.
        message: String,
    },
}

/// `type` of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Progress as planned.
    Normal,
    /// Something a reader should look at (blocked, deadline, failure).
    Warning,
}

impl EventType {
    /// The API value, `Normal` or `Warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One Event on a node: a short UpperCamelCase reason and a sentence for `kubectl describe node`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    /// Normal or Warning.
    pub event_type: EventType,
    /// UpperCamelCase reason, e.g. `Cordoned`, `EvictionBlocked`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl NodeEvent {
    /// A `Normal` event.
    pub fn normal(reason: &str, message: impl Into<String>) -> Self {
        NodeEvent {
            event_type: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A `Warning` event.
    pub fn warning(reason: &str, message: impl Into<String>) -> Self {
        NodeEvent {
            event_type: EventType::Warning,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// A failed Kubernetes or EKS access. The message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    /// The API server answered with an error status.
    #[error("Kubernetes API {operation}: HTTP {code} {reason}: {message}{}", hint(*code))]
    Api {
        /// What was attempted, e.g. `patch node ip-10-0-0-1`.
        operation: String,
        /// HTTP status code.
        code: u16,
        /// Status reason (`Forbidden`, `Conflict`, ...).
        reason: String,
        /// Status message.
        message: String,
    },
    /// The object does not exist.
    #[error("Kubernetes API {operation}: not found")]
    NotFound {
        /// What was attempted.
        operation: String,
    },
    /// No answer (connection, TLS, timeout, undecodable body).
    #[error("Kubernetes API {operation} failed: {message}")]
    Transport {
        /// What was attempted.
        operation: String,
        /// Cause.
        message: String,
    },
    /// The EKS cluster does not exist in this account and region.
    #[error("EKS cluster {0:?} not found (eks:DescribeCluster); check the name and the region")]
    ClusterNotFound(String),
    /// Endpoint, CA or override settings are unusable.
    #[error("Kubernetes access configuration: {0}")]
    Config(String),
    /// AWS credentials or eks:DescribeCluster failed.
    #[error("AWS: {0}")]
    Aws(String),
}

/// What to fix for an API error with `code` (401: the access entry; 403: RBAC), appended to its
/// message; empty for other codes.
pub(super) fn hint(code: u16) -> &'static str {
    match code {
        401 => {
            " (the API server rejected the EKS token: give the function's role an EKS access entry \
             with its Kubernetes group, `nodecycle-rotator`, `nodecycle-interruption` or \
             `nodecycle-ops`, and check that the token is signed for this cluster and region)"
        }
        403 => {
            " (RBAC: apply deploy/rbac.yaml, which binds each function's group \
             (`nodecycle-rotator`, `nodecycle-interruption`, `nodecycle-ops`) to its ClusterRole)"
        }
        _ => "",
    }
}

impl KubeError {
    /// What kind of failure this is (callers decide on the kind, never on the message).
    pub fn kind(&self) -> crate::port::ErrorKind {
        use crate::port::ErrorKind;
        match self {
            KubeError::Api { code, .. } => match code {
                404 | 410 => ErrorKind::NotFound,
                409 => ErrorKind::Conflict,
                429 => ErrorKind::Throttled,
                401 | 403 => ErrorKind::AccessDenied,
                400 | 422 => ErrorKind::Invalid,
                500..=599 => ErrorKind::Transient,
                _ => ErrorKind::Other,
            },
            KubeError::NotFound { .. } | KubeError::ClusterNotFound(_) => ErrorKind::NotFound,
            KubeError::Transport { .. } => ErrorKind::Transient,
            KubeError::Config(_) => ErrorKind::Invalid,
            KubeError::Aws(_) => ErrorKind::Other,
        }
    }

    /// HTTP status code of an API error, if any.
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeError::Api { code, .. } => Some(*code),
            KubeError::NotFound { .. } => Some(404),
            _ => None,
        }
    }
}

/// Formats up to `max` items and "and N more".
pub(crate) fn list_some<T: fmt::Display>(items: &[T], max: usize) -> String {
    let mut out: Vec<String> = items.iter().take(max).map(ToString::to_string).collect();
    if items.len() > max {
        out.push(format!("and {} more", items.len() - max));
    }
    out.join(", ")
}

/// `1 pod`, `2 pods`.
pub(crate) fn n_pods(n: usize) -> String {
    if n == 1 {
        "1 pod".to_owned()
    } else {
        format!("{n} pods")
    }
}

impl From<KubeError> for crate::port::PortError {
    fn from(e: KubeError) -> Self {
        crate::port::PortError::new("kubernetes", e.kind(), e.to_string())
    }
}
