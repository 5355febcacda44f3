//! An in-memory [`NodeOps`] for tests: nodes, pods, scripted eviction answers, a request log and
//! recorded Events. Evicted or deleted pods get a deletion timestamp of `now + grace` and vanish
//! when [`MemoryCluster::advance`] passes it. Not a Kubernetes simulator: PDBs are scripted.

use super::node_ops::{EvictOutcome, KubeError, NodeEvent, NodeOps};
use super::pods::{NodeInfo, PodInfo, PodRef, taint_value};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Inner {
    now: Option<DateTime<Utc>>,
    nodes: Vec<NodeInfo>,
    /// (node name, pod)
    pods: Vec<(String, PodInfo)>,
    /// Pod uids with a `FailedCreatePodSandBox` Event.
    sandbox_failures: std::collections::BTreeSet<String>,
    evictions: HashMap<String, VecDeque<EvictOutcome>>,
    log: Vec<String>,
    events: Vec<(String, NodeEvent)>,
}

/// In-memory cluster. Cheap to clone nothing: share it by reference.
#[derive(Debug, Default)]
pub struct MemoryCluster {
    inner: Mutex<Inner>,
}

impl MemoryCluster {
    /// An empty cluster whose clock is `now`.
    pub fn new(now: DateTime<Utc>) -> Self {
        let cluster = MemoryCluster::default();
        cluster.lock().now = Some(now);
        cluster
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Adds a schedulable node for `instance_id` named `name` in `us-east-1a`.
    pub fn add_node(&self, name: &str, instance_id: &str) {
        self.lock().nodes.push(NodeInfo {
            name: name.to_owned(),
            uid: format!("uid-{name}"),
            provider_id: format!("aws:///us-east-1a/{instance_id}"),
            unschedulable: false,
            disrupted_taint: None,
            ready: true,
            marks: crate::fleet::NodeMarks::default(),
            created: None,
            conditions: Vec::new(),
        });
    }

    /// Replaces a node's record (e.g. to make it unschedulable).
    pub fn set_node(&self, node: NodeInfo) {
        let mut inner = self.lock();
        inner.nodes.retain(|n| n.name != node.name);
        inner.nodes.push(node);
    }

    /// The node named `name`, if present.
    pub fn node(&self, name: &str) -> Option<NodeInfo> {
        self.lock().nodes.iter().find(|n| n.name == name).cloned()
    }

    /// Binds a pod to a node.
    pub fn add_pod(&self, node: &str, pod: PodInfo) {
        self.lock().pods.push((node.to_owned(), pod));
    }

    /// Pods currently bound to `node`.
    pub fn pods(&self, node: &str) -> Vec<PodInfo> {
        self.lock()
            .pods
            .iter()
            .filter(|(n, _)| n == node)
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Scripts the next answers to evictions of the pod named `name` (then: accepted).
    pub fn script_evictions(&self, name: &str, outcomes: Vec<EvictOutcome>) {
        self.lock()
            .evictions
            .entry(name.to_owned())
            .or_default()
            .extend(outcomes);
    }

    /// Moves the clock to `now` and removes pods whose deletion timestamp has passed.
    pub fn advance(&self, now: DateTime<Utc>) {
        let mut inner = self.lock();
        inner.now = Some(now);
        inner
            .pods
            .retain(|(_, p)| p.deletion_timestamp.is_none_or(|d| d > now));
    }

    /// Requests made so far, e.g. `evict default/web-1`.
    pub fn log(&self) -> Vec<String> {
        self.lock().log.clone()
    }

    /// Events recorded so far as (node, event).
    pub fn events(&self) -> Vec<(String, NodeEvent)> {
        self.lock().events.clone()
    }

    fn terminate(inner: &mut Inner, pod: &PodRef) -> bool {
        let now = inner.now.unwrap_or_else(Utc::now);
        let Some((_, p)) = inner.pods.iter_mut().find(|(_, p)| p.pod.uid == pod.uid) else {
            return false;
        };
        if p.deletion_timestamp.is_none() {
            let grace = p.grace_period_seconds.unwrap_or(30);
            p.deletion_timestamp = Some(now + chrono::Duration::seconds(grace));
        }
        if p.grace_period_seconds == Some(0) {
            inner.pods.retain(|(_, p)| p.pod.uid != pod.uid);
        }
        true
    }
}

#[async_trait]
impl NodeOps for MemoryCluster {
    async fn find_node(&self, instance_id: &str) -> Result<Option<NodeInfo>, KubeError> {
        let mut inner = self.lock();
        inner.log.push(format!("find {instance_id}"));
        let suffix = format!("/{instance_id}");
        Ok(inner
            .nodes
            .iter()
            .find(|n| n.provider_id.starts_with("aws:///") && n.provider_id.ends_with(&suffix))
            .cloned())
    }

    async fn list_nodes(&self) -> Result<Vec<NodeInfo>, KubeError> {
        Ok(self.lock().nodes.clone())
    }

    async fn get_node(&self, name: &str) -> Result<Option<NodeInfo>, KubeError> {
        Ok(self.lock().nodes.iter().find(|n| n.name == name).cloned())
    }

    async fn cordon(&self, node: &str, reason: &str) -> Result<bool, KubeError> {
        let mut inner = self.lock();
        let Some(n) = inner.nodes.iter_mut().find(|n| n.name == node) else {
            return Err(KubeError::NotFound {
                operation: format!("cordon node {node}"),
            });
        };
        if n.unschedulable && n.disrupted_taint.is_some() {
            return Ok(false);
        }
        n.unschedulable = true;
        n.disrupted_taint.get_or_insert_with(|| taint_value(reason));
        inner.log.push(format!("cordon {node}"));
        Ok(true)
    }

    async fn mark(
        &self,
        node: &str,
        scale_down_disabled: Option<bool>,
        exclude_from_lb: Option<bool>,
    ) -> Result<bool, KubeError> {
        let mut inner = self.lock();
        let Some(n) = inner.nodes.iter_mut().find(|n| n.name == node) else {
            return Ok(false);
        };
        if let Some(set) = scale_down_disabled {
            n.marks.scale_down_disabled = set;
            n.marks.scale_down_disabled_by_nodecycle = set;
        }
        if let Some(set) = exclude_from_lb {
            n.marks.lb_excluded = set;
            n.marks.lb_excluded_by_nodecycle = set;
        }
        inner.log.push(format!(
            "mark {node} scale-down-disabled={scale_down_disabled:?} exclude-from-lb={exclude_from_lb:?}"
        ));
        Ok(true)
    }

    async fn prefer_elsewhere(&self, node: &str, on: bool) -> Result<bool, KubeError> {
        let mut inner = self.lock();
        let Some(n) = inner.nodes.iter_mut().find(|n| n.name == node) else {
            return Ok(false);
        };
        if n.marks.replacing == on || n.marks.autoscaler_deleting {
            return Ok(false);
        }
        n.marks.replacing = on;
        inner.log.push(format!("prefer-elsewhere {node} {on}"));
        Ok(true)
    }

    async fn undo_cordon(&self, node: &str, uncordon: bool) -> Result<bool, KubeError> {
        let mut inner = self.lock();
        let Some(n) = inner.nodes.iter_mut().find(|n| n.name == node) else {
            return Ok(false);
        };
        let changed = n.disrupted_taint.is_some() || (uncordon && n.unschedulable);
        n.disrupted_taint = None;
        if uncordon {
            n.unschedulable = false;
        }
        if changed {
            inner.log.push(format!("uncordon {node}"));
        }
        Ok(changed)
    }

    async fn list_pods(&self, node: &str) -> Result<Vec<PodInfo>, KubeError> {
        let mut inner = self.lock();
        inner.log.push(format!("list {node}"));
        Ok(inner
            .pods
            .iter()
            .filter(|(n, _)| n == node)
            .map(|(_, p)| p.clone())
            .collect())
    }

    async fn list_all_pods(&self) -> Result<Vec<(String, PodInfo)>, KubeError> {
        let mut inner = self.lock();
        inner.log.push("list all pods".to_string());
        Ok(inner
            .pods
            .iter()
            .filter(|(_, p)| !matches!(p.phase.as_str(), "Succeeded" | "Failed"))
            .cloned()
            .collect())
    }

    async fn sandbox_failures(&self) -> Result<std::collections::BTreeSet<String>, KubeError> {
        let mut inner = self.lock();
        inner.log.push("list sandbox failures".to_string());
        Ok(inner.sandbox_failures.clone())
    }

    async fn evict(&self, pod: &PodRef) -> Result<EvictOutcome, KubeError> {
        let mut inner = self.lock();
        inner.log.push(format!("evict {pod}"));
        if let Some(outcome) = inner
            .evictions
            .get_mut(&pod.name)
            .and_then(VecDeque::pop_front)
        {
            if outcome == EvictOutcome::Evicted {
                Self::terminate(&mut inner, pod);
            }
            return Ok(outcome);
        }
        Ok(if Self::terminate(&mut inner, pod) {
            EvictOutcome::Evicted
        } else {
            EvictOutcome::Gone
        })
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<bool, KubeError> {
        let mut inner = self.lock();
        inner.log.push(format!("delete {pod}"));
        Ok(Self::terminate(&mut inner, pod))
    }

    async fn delete_node(&self, node: &str) -> Result<bool, KubeError> {
        let mut inner = self.lock();
        inner.log.push(format!("delete node {node}"));
        let before = inner.nodes.len();
        inner.nodes.retain(|n| n.name != node);
        Ok(inner.nodes.len() != before)
    }

    async fn record_event(&self, node: &NodeInfo, event: &NodeEvent) -> Result<(), KubeError> {
        self.lock().events.push((node.name.clone(), event.clone()));
        Ok(())
    }
}
