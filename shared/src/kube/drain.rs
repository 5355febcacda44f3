//! Resumable, PDB-respecting drain.
//!
//! A drain is a [`DrainState`] (small, serde, stored by the caller between Lambda invocations)
//! advanced by [`drain_step`]: one bounded pass that reads the node's pods, asks the pure
//! [`plan_step`] what to do, does it within a time budget and reports [`DrainProgress`].
//! Work is never repeated: pods already evicted are terminating (and remembered by uid), so a
//! later step only waits for them; PDB-blocked evictions are retried on later steps; after the
//! deadline (`terminationGracePeriod` from the start) the remaining pods are deleted.

use super::DISRUPTED_TAINT_KEY;
use super::node_ops::{EvictOutcome, KubeError, NodeEvent, NodeOps, list_some, n_pods};
use super::pods::{NodeInfo, PodClass, PodInfo, PodRef, SkipReason, classify};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What a drain needs to continue in a later invocation. Store it after every call to
/// [`start_drain`] / [`drain_step`], also when the step returned an error (it is updated in place
/// with whatever was done before the error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainState {
    /// EC2 instance id of the node.
    pub instance_id: String,
    /// Node name, resolved once from the providerID.
    pub node: String,
    /// Node uid: a node re-registered under the same name is another node and is not drained.
    pub node_uid: String,
    /// Why the node is disrupted (taint value, Event text), e.g. `Drifted`.
    pub reason: String,
    /// When the drain started.
    pub started_at: DateTime<Utc>,
    /// `started_at + terminationGracePeriod`; `None` waits for PDBs indefinitely.
    pub deadline: Option<DateTime<Utc>>,
    /// The node was already unschedulable (by someone else) before the drain: aborting the
    /// drain leaves it cordoned.
    pub was_unschedulable: bool,
    /// Uids of pods whose eviction was accepted.
    #[serde(default)]
    pub evicted: BTreeSet<String>,
    /// Uids of pods deleted after the deadline.
    #[serde(default)]
    pub deleted: BTreeSet<String>,
    /// PodDisruptionBudgets (`namespace/name`) that blocked the previous step (to record an
    /// Event only when this changes).
    #[serde(default)]
    pub blocked_by: Vec<String>,
    /// The deadline Event was recorded.
    #[serde(default)]
    pub deadline_reported: bool,
    /// Number of steps done so far.
    #[serde(default)]
    pub steps: u32,
    /// Every pod that needed to leave is gone (or the node is gone).
    #[serde(default)]
    pub done: bool,
    /// A voluntary disruption (drift, expiry, repair, an operator's rotation): a pod whose
    /// opt-out still holds ([`crate::fleet::OptOut`]) is not evicted, as a pod its
    /// PodDisruptionBudget blocks, until the deadline. Interruptions leave it `false`.
    #[serde(default)]
    pub honour_opt_outs: bool,
}

impl DrainState {
    /// A fresh state for `node` (no I/O); [`start_drain`] also cordons and records the Event.
    pub fn new(
        instance_id: &str,
        node: &NodeInfo,
        reason: &str,
        grace: Option<Duration>,
        now: DateTime<Utc>,
    ) -> Self {
        let deadline = grace
            .and_then(|g| chrono::Duration::from_std(g).ok())
            .map(|g| now + g);
        DrainState {
            instance_id: instance_id.to_owned(),
            node: node.name.clone(),
            node_uid: node.uid.clone(),
            reason: reason.to_owned(),
            started_at: now,
            deadline,
            was_unschedulable: node.unschedulable && node.disrupted_taint.is_none(),
            evicted: BTreeSet::new(),
            deleted: BTreeSet::new(),
            blocked_by: Vec::new(),
            deadline_reported: false,
            steps: 0,
            done: false,
            honour_opt_outs: false,
        }
    }

    /// Whether the deadline has passed at `now`.
    pub fn deadline_passed(&self, now: DateTime<Utc>) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }
}

/// The pure decision for one step: what to do with each pod on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// Pods to evict now.
    pub evict: Vec<PodRef>,
    /// Pods to delete now (the deadline has passed).
    pub delete: Vec<PodRef>,
    /// Pods already leaving (terminating, or evicted by an earlier step): wait for them.
    pub leaving: Vec<PodRef>,
    /// Cluster-critical pods held back until every other pod has left.
    pub held: Vec<PodRef>,
    /// Pods whose opt-out still holds (a voluntary drain): waited for as PDB-blocked pods are,
    /// deleted at the deadline.
    pub opted_out: Vec<PodRef>,
    /// Pods stuck terminating (more than a minute past their deletion timestamp): not waited for.
    pub stuck: Vec<PodRef>,
    /// Pods left alone, with the reason.
    pub skipped: Vec<(PodRef, SkipReason)>,
    /// The deadline has passed.
    pub deadline_passed: bool,
}

impl StepPlan {
    /// Nothing to evict, delete or wait for: the drain is complete.
    pub fn done(&self) -> bool {
        self.evict.is_empty()
            && self.delete.is_empty()
            && self.leaving.is_empty()
            && self.held.is_empty()
            && self.opted_out.is_empty()
    }

    /// Pods that still have to leave the node.
    pub fn remaining(&self) -> usize {
        self.evict.len()
            + self.delete.len()
            + self.leaving.len()
            + self.held.len()
            + self.opted_out.len()
    }
}

/// Decides the next step from the pods currently bound to the node, the drain state and `now`.
///
/// - Skipped (DaemonSet, mirror, finished) and stuck pods never block.
/// - Terminating pods, and pods whose eviction an earlier step got accepted, are waited for.
/// - Before the deadline: evict every other pod, cluster-critical ones only once no other pod
///   is left to leave; in a voluntary drain ([`DrainState::honour_opt_outs`]) a pod whose
///   opt-out still holds is waited for instead, like a pod its budget blocks.
/// - From the deadline on: delete every pod that is not terminating yet (including pods whose
///   accepted eviction never showed up as a deletion), each once.
pub fn plan_step(pods: &[PodInfo], state: &DrainState, now: DateTime<Utc>) -> StepPlan {
    let deadline_passed = state.deadline_passed(now);
    let mut plan = StepPlan {
        deadline_passed,
        ..StepPlan::default()
    };
    let mut critical = Vec::new();
    let mut others_leaving = false;
    for pod in pods {
        let uid = &pod.pod.uid;
        match classify(pod, now) {
            PodClass::Skip(reason) => plan.skipped.push((pod.pod.clone(), reason)),
            PodClass::Stuck => plan.stuck.push(pod.pod.clone()),
            PodClass::Leaving => {
                others_leaving |= !pod.is_critical();
                plan.leaving.push(pod.pod.clone());
            }
            PodClass::Evict {
                critical: is_critical,
            } => {
                let already_deleted = state.deleted.contains(uid);
                let already_evicted = state.evicted.contains(uid);
                if already_deleted || (already_evicted && !deadline_passed) {
                    others_leaving |= !is_critical;
                    plan.leaving.push(pod.pod.clone());
                } else if deadline_passed {
                    plan.delete.push(pod.pod.clone());
                } else if state.honour_opt_outs
                    && pod.opt_out.as_ref().is_some_and(|o| o.holds(now))
                {
                    plan.opted_out.push(pod.pod.clone());
                } else if is_critical {
                    critical.push(pod.pod.clone());
                } else {
                    plan.evict.push(pod.pod.clone());
                }
            }
        }
    }
    if plan.evict.is_empty() && !others_leaving {
        plan.evict = critical;
    } else {
        plan.held = critical;
    }
    plan
}

/// A pod whose eviction a PodDisruptionBudget refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedPod {
    /// The pod.
    pub pod: PodRef,
    /// `namespace/name` of the budget, when the API server named it.
    pub pdb: Option<String>,
    /// The API server's message.
    pub message: String,
}

/// A pod whose eviction or deletion failed for another reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFailure {
    /// The pod.
    pub pod: PodRef,
    /// What failed, with the API server's message.
    pub message: String,
}

/// What one [`drain_step`] saw and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainProgress {
    /// Node name.
    pub node: String,
    /// The drain is complete (nothing left to leave, or the node is gone).
    pub done: bool,
    /// The Node object no longer exists (or was replaced by another with the same name).
    pub node_gone: bool,
    /// Pods that still had to leave at the start of this step (evictable, terminating, held).
    pub pods_remaining: usize,
    /// Pods left alone (DaemonSet, mirror, finished).
    pub skipped: usize,
    /// Pods stuck terminating, not waited for.
    pub stuck: usize,
    /// Evictions accepted in this step.
    pub evicted: Vec<PodRef>,
    /// Deletions done in this step (after the deadline).
    pub deleted: Vec<PodRef>,
    /// Evictions refused by a PodDisruptionBudget in this step.
    pub blocked: Vec<BlockedPod>,
    /// Distinct blocking budgets, `namespace/name`, sorted.
    pub blocked_by: Vec<String>,
    /// Other per-pod failures in this step.
    pub failed: Vec<PodFailure>,
    /// Pods not acted on because the time budget ran out (next step).
    pub deferred: usize,
    /// The drain deadline, if any.
    pub deadline: Option<DateTime<Utc>>,
    /// The deadline has passed (remaining pods are deleted).
    pub deadline_passed: bool,
}

/// Why a drain could not start or step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DrainError {
    /// No node has `spec.providerID` ending in this instance id.
    #[error(
        "no Kubernetes node has spec.providerID aws:///<az>/{0}; is the instance part of this \
         cluster and registered?"
    )]
    NodeNotFound(String),
    /// The API failed; the step can be retried (the state holds what was done).
    #[error(transparent)]
    Kube(#[from] KubeError),
}

impl From<DrainError> for crate::port::PortError {
    fn from(e: DrainError) -> Self {
        match e {
            DrainError::NodeNotFound(_) => crate::port::PortError::new(
                "kubernetes",
                crate::port::ErrorKind::NotFound,
                e.to_string(),
            ),
            DrainError::Kube(k) => k.into(),
        }
    }
}

/// The node of `instance_id`: the node named `known` (one GET) when it still has that
/// instance's providerID, else found by providerID (a list of the cluster's nodes). `known` is
/// the name a pass observed; a node gone or renamed since is looked for again.
pub async fn node_of<A: NodeOps + ?Sized>(
    api: &A,
    instance_id: &str,
    known: Option<&str>,
) -> Result<Option<NodeInfo>, KubeError> {
    if let Some(name) = known
        && let Some(node) = api.get_node(name).await?
        && super::client::instance_of_provider_id(&node.provider_id) == Some(instance_id)
    {
        return Ok(Some(node));
    }
    api.find_node(instance_id).await
}

/// Starts a drain: finds the node of `instance_id` by providerID, cordons and taints it
/// (idempotent) and records a `Cordoned` Event. `grace` is the `terminationGracePeriod`
/// (`None` = wait for PDBs indefinitely).
pub async fn start_drain<A: NodeOps + ?Sized>(
    api: &A,
    instance_id: &str,
    reason: &str,
    grace: Option<Duration>,
    now: DateTime<Utc>,
) -> Result<DrainState, DrainError> {
    start_drain_known(api, instance_id, None, reason, grace, now).await
}

/// [`start_drain`] with the node name a pass observed for the instance (`known`, see
/// [`node_of`]): one GET instead of a list of the cluster's nodes.
pub async fn start_drain_known<A: NodeOps + ?Sized>(
    api: &A,
    instance_id: &str,
    known: Option<&str>,
    reason: &str,
    grace: Option<Duration>,
    now: DateTime<Utc>,
) -> Result<DrainState, DrainError> {
    let node = node_of(api, instance_id, known)
        .await?
        .ok_or_else(|| DrainError::NodeNotFound(instance_id.to_owned()))?;
    let state = DrainState::new(instance_id, &node, reason, grace, now);
    let changed = api.cordon(&node.name, reason).await?;
    let deadline = match state.deadline {
        Some(d) => format!(
            "pods still blocked at {} are deleted",
            d.format("%Y-%m-%dT%H:%M:%SZ")
        ),
        None => "no deadline: PodDisruptionBudgets are waited for indefinitely".to_owned(),
    };
    let event = if changed {
        NodeEvent::normal(
            "Cordoned",
            format!(
                "nodecycle cordoned the node and added taint {DISRUPTED_TAINT_KEY}={reason}:NoSchedule \
                 to drain it ({reason}); {deadline}"
            ),
        )
    } else {
        NodeEvent::normal(
            "DrainStarted",
            format!("nodecycle is draining the already cordoned node ({reason}); {deadline}"),
        )
    };
    tracing::info!(
        node = %node.name,
        instance_id,
        reason,
        cordon_changed = changed,
        was_unschedulable = state.was_unschedulable,
        deadline = ?state.deadline,
        "drain started"
    );
    record(api, &node, &event).await;
    Ok(state)
}

/// Performs one bounded step of the drain started by [`start_drain`]: re-cordons if someone
/// uncordoned the node, lists its pods, evicts (or, past the deadline, deletes) what
/// [`plan_step`] says, stops issuing requests once `budget` is used up, records Events and
/// returns the progress. `now` is the wall-clock time of the step. Does nothing once
/// `state.done`. The state is updated in place, also on error.
pub async fn drain_step<A: NodeOps + ?Sized>(
    api: &A,
    state: &mut DrainState,
    now: DateTime<Utc>,
    budget: Duration,
) -> Result<DrainProgress, DrainError> {
    let started = Instant::now();
    let mut progress = DrainProgress {
        node: state.node.clone(),
        done: state.done,
        node_gone: false,
        pods_remaining: 0,
        skipped: 0,
        stuck: 0,
        evicted: Vec::new(),
        deleted: Vec::new(),
        blocked: Vec::new(),
        blocked_by: Vec::new(),
        failed: Vec::new(),
        deferred: 0,
        deadline: state.deadline,
        deadline_passed: state.deadline_passed(now),
    };
    if state.done {
        return Ok(progress);
    }
    state.steps += 1;

    let node = match api.get_node(&state.node).await? {
        Some(node) if node.uid == state.node_uid => node,
        other => {
            tracing::info!(
                node = %state.node,
                replaced = other.is_some(),
                "node object gone; drain complete"
            );
            state.done = true;
            progress.done = true;
            progress.node_gone = true;
            return Ok(progress);
        }
    };
    if !node.unschedulable || node.disrupted_taint.is_none() {
        tracing::warn!(node = %node.name, "node was uncordoned or untainted during the drain; cordoning again");
        if api.cordon(&node.name, &state.reason).await? {
            let event = NodeEvent::warning(
                "Cordoned",
                format!(
                    "nodecycle cordoned the node again (someone made it schedulable during the drain) \
                     and set taint {DISRUPTED_TAINT_KEY}={}:NoSchedule",
                    state.reason
                ),
            );
            record(api, &node, &event).await;
        }
    }

    let pods = api.list_pods(&node.name).await?;
    let plan = plan_step(&pods, state, now);
    progress.pods_remaining = plan.remaining();
    progress.skipped = plan.skipped.len();
    progress.stuck = plan.stuck.len();
    tracing::info!(
        node = %node.name,
        step = state.steps,
        evict = plan.evict.len(),
        delete = plan.delete.len(),
        leaving = plan.leaving.len(),
        held = plan.held.len(),
        opted_out = plan.opted_out.len(),
        stuck = plan.stuck.len(),
        skipped = plan.skipped.len(),
        deadline_passed = plan.deadline_passed,
        "drain step planned"
    );

    if plan.done() {
        state.done = true;
        progress.done = true;
        let event = NodeEvent::normal(
            "Drained",
            format!(
                "nodecycle drained the node ({}): {} evicted, {} deleted after the deadline, \
                 {} left alone (DaemonSet, mirror or finished){}",
                state.reason,
                n_pods(state.evicted.len()),
                n_pods(state.deleted.len()),
                n_pods(plan.skipped.len()),
                if plan.stuck.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} stuck terminating not waited for",
                        n_pods(plan.stuck.len())
                    )
                }
            ),
        );
        tracing::info!(node = %node.name, evicted = state.evicted.len(), deleted = state.deleted.len(), "drain complete");
        record(api, &node, &event).await;
        return Ok(progress);
    }

    if plan.deadline_passed && !plan.delete.is_empty() && !state.deadline_reported {
        let event = NodeEvent::warning(
            "DrainDeadlineReached",
            format!(
                "terminationGracePeriod ended{}; nodecycle deletes the {} still on the node, \
                 bypassing PodDisruptionBudgets: {}",
                state
                    .deadline
                    .map(|d| format!(" at {}", d.format("%Y-%m-%dT%H:%M:%SZ")))
                    .unwrap_or_default(),
                n_pods(plan.delete.len()),
                list_some(&plan.delete, 5)
            ),
        );
        tracing::warn!(node = %node.name, pods = plan.delete.len(), "drain deadline reached; deleting remaining pods");
        record(api, &node, &event).await;
        state.deadline_reported = true;
    }

    let over_budget = |started: Instant| started.elapsed() >= budget;
    for pod in &plan.delete {
        if over_budget(started) {
            progress.deferred += 1;
            continue;
        }
        let deleted = api.delete_pod(pod).await?;
        tracing::info!(node = %node.name, pod = %pod, existed = deleted, "pod deleted after deadline");
        state.deleted.insert(pod.uid.clone());
        if deleted {
            progress.deleted.push(pod.clone());
        }
    }
    for pod in &plan.evict {
        if over_budget(started) {
            progress.deferred += 1;
            continue;
        }
        match api.evict(pod).await? {
            EvictOutcome::Evicted => {
                tracing::info!(node = %node.name, pod = %pod, "pod evicted");
                state.evicted.insert(pod.uid.clone());
                progress.evicted.push(pod.clone());
            }
            EvictOutcome::Gone => {
                tracing::info!(node = %node.name, pod = %pod, "pod already gone");
            }
            EvictOutcome::Blocked { pdb, message } => {
                let pdb = pdb.map(|name| format!("{}/{name}", pod.namespace));
                tracing::info!(node = %node.name, pod = %pod, pdb = pdb.as_deref().unwrap_or("-"), %message, "eviction blocked; retrying on a later step");
                progress.blocked.push(BlockedPod {
                    pod: pod.clone(),
                    pdb,
                    message,
                });
            }
            EvictOutcome::Rejected { code, message } => {
                tracing::warn!(node = %node.name, pod = %pod, code, %message, "eviction rejected");
                progress.failed.push(PodFailure {
                    pod: pod.clone(),
                    message: format!(
                        "eviction of {pod} failed with HTTP {code}: {message}{}",
                        super::node_ops::hint(code)
                    ),
                });
            }
        }
    }

    let mut blocked_by: Vec<String> = progress
        .blocked
        .iter()
        .filter_map(|b| b.pdb.clone())
        .collect();
    blocked_by.sort();
    blocked_by.dedup();
    if !progress.evicted.is_empty() {
        let event = NodeEvent::normal(
            "Evicted",
            format!(
                "nodecycle evicted {} ({}): {}",
                n_pods(progress.evicted.len()),
                state.reason,
                list_some(&progress.evicted, 5)
            ),
        );
        record(api, &node, &event).await;
    }
    if !progress.blocked.is_empty() && blocked_by != state.blocked_by {
        let blocked: Vec<&PodRef> = progress.blocked.iter().map(|b| &b.pod).collect();
        let by = if blocked_by.is_empty() {
            "the API server (HTTP 429)".to_owned()
        } else {
            format!("PodDisruptionBudget {}", blocked_by.join(", "))
        };
        let deadline = match state.deadline {
            Some(d) => format!(
                "; pods still blocked at {} are deleted",
                d.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            None => String::new(),
        };
        let event = NodeEvent::warning(
            "EvictionBlocked",
            format!(
                "eviction of {} blocked by {by}: {}; nodecycle retries{deadline}",
                n_pods(blocked.len()),
                list_some(&blocked, 5)
            ),
        );
        record(api, &node, &event).await;
    }
    if !progress.failed.is_empty() {
        let messages: Vec<&str> = progress.failed.iter().map(|f| f.message.as_str()).collect();
        let event = NodeEvent::warning("EvictionFailed", list_some(&messages, 3));
        record(api, &node, &event).await;
    }
    state.blocked_by = blocked_by.clone();
    progress.blocked_by = blocked_by;
    Ok(progress)
}

/// Ends an aborted drain: removes the taint and, unless the node was unschedulable before the
/// drain started, uncordons it; records an `Uncordoned` Event. A missing node is fine.
pub async fn abort_drain<A: NodeOps + ?Sized>(
    api: &A,
    state: &DrainState,
) -> Result<(), KubeError> {
    let Some(node) = api
        .get_node(&state.node)
        .await?
        .filter(|n| n.uid == state.node_uid)
    else {
        return Ok(());
    };
    let uncordon = !state.was_unschedulable;
    if api.undo_cordon(&node.name, uncordon).await? {
        let message = if uncordon {
            format!(
                "nodecycle aborted the drain ({}): removed taint {DISRUPTED_TAINT_KEY} and uncordoned the node",
                state.reason
            )
        } else {
            format!(
                "nodecycle aborted the drain ({}): removed taint {DISRUPTED_TAINT_KEY}; the node stays \
                 cordoned as it was before",
                state.reason
            )
        };
        tracing::info!(node = %node.name, uncordon, "drain aborted");
        record(api, &node, &NodeEvent::normal("Uncordoned", message)).await;
    }
    Ok(())
}

/// Deletes the Node object after its instance is terminated (or before, for a drained node),
/// recording a `NodeDeleted` Event first. Idempotent: a missing node is `Ok(false)`.
pub async fn delete_node<A: NodeOps + ?Sized>(
    api: &A,
    node_name: &str,
    reason: &str,
) -> Result<bool, KubeError> {
    let Some(node) = api.get_node(node_name).await? else {
        return Ok(false);
    };
    let event = NodeEvent::normal(
        "NodeDeleted",
        format!("nodecycle deletes the Node object ({reason}); its instance is terminated"),
    );
    record(api, &node, &event).await;
    let deleted = api.delete_node(node_name).await?;
    tracing::info!(node = node_name, deleted, "node object deleted");
    Ok(deleted)
}

/// Records an Event; a failure is logged, never fatal (Events are best effort).
async fn record<A: NodeOps + ?Sized>(api: &A, node: &NodeInfo, event: &NodeEvent) {
    if let Err(error) = api.record_event(node, event).await {
        tracing::warn!(node = %node.name, reason = %event.reason, %error, "could not record event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::memory::MemoryCluster;
    use chrono::TimeZone;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).single().unwrap()
    }

    fn pod(name: &str) -> PodInfo {
        PodInfo {
            pod: PodRef {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            phase: "Running".into(),
            controller_kind: Some("ReplicaSet".into()),
            mirror: false,
            deletion_timestamp: None,
            grace_period_seconds: Some(30),
            priority_class: None,
            start_failure: None,
            opt_out: None,
        }
    }

    fn critical(name: &str) -> PodInfo {
        PodInfo {
            priority_class: Some("system-cluster-critical".into()),
            ..pod(name)
        }
    }

    fn daemon(name: &str) -> PodInfo {
        PodInfo {
            controller_kind: Some("DaemonSet".into()),
            ..pod(name)
        }
    }

    fn terminating(name: &str, at: i64) -> PodInfo {
        PodInfo {
            deletion_timestamp: Some(t(at)),
            ..pod(name)
        }
    }

    fn node() -> NodeInfo {
        NodeInfo {
            name: "n1".into(),
            uid: "uid-n1".into(),
            provider_id: "aws:///us-east-1a/i-0123456789abcdef0".into(),
            unschedulable: false,
            disrupted_taint: None,
            ready: true,
            marks: Default::default(),
            created: None,
            conditions: Vec::new(),
        }
    }

    fn state(grace: Option<u64>) -> DrainState {
        DrainState::new(
            "i-0123456789abcdef0",
            &node(),
            "Drifted",
            grace.map(Duration::from_secs),
            t(0),
        )
    }

    fn names(pods: &[PodRef]) -> Vec<&str> {
        pods.iter().map(|p| p.name.as_str()).collect()
    }

    struct Case {
        name: &'static str,
        pods: Vec<PodInfo>,
        state: DrainState,
        now: i64,
        evict: Vec<&'static str>,
        delete: Vec<&'static str>,
        leaving: Vec<&'static str>,
        held: Vec<&'static str>,
        done: bool,
    }

    /// In a voluntary drain a pod whose opt-out holds waits like a PDB-blocked pod and is
    /// deleted at the deadline; an interruption's drain evicts it at once; a lapsed one is
    /// evicted.
    #[test]
    fn a_voluntary_drain_waits_for_an_opted_out_pod_until_the_deadline() {
        let opt_out = |until: Option<i64>| {
            Some(crate::fleet::OptOut {
                pod: "default/batch".into(),
                annotation: crate::fleet::DO_NOT_DISRUPT.into(),
                value: "true".into(),
                until: until.map(t),
            })
        };
        let pods = vec![
            PodInfo {
                opt_out: opt_out(None),
                ..pod("batch")
            },
            pod("web"),
        ];
        let names = |v: &[PodRef]| v.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        let mut voluntary = state(Some(600));
        voluntary.honour_opt_outs = true;
        let p = plan_step(&pods, &voluntary, t(10));
        assert_eq!(names(&p.evict), ["web"]);
        assert_eq!(names(&p.opted_out), ["batch"]);
        assert!(!p.done());
        let p = plan_step(&pods, &voluntary, t(700));
        assert_eq!(
            names(&p.delete),
            ["batch", "web"],
            "the deadline still bounds it"
        );
        let p = plan_step(&pods, &state(Some(600)), t(10));
        assert_eq!(
            names(&p.evict),
            ["batch", "web"],
            "an interruption is never held"
        );
        let lapsed = vec![PodInfo {
            opt_out: opt_out(Some(5)),
            ..pod("batch")
        }];
        let p = plan_step(&lapsed, &voluntary, t(10));
        assert_eq!(names(&p.evict), ["batch"]);
    }

    #[test]
    fn plan_step_table() {
        let evicted_a = {
            let mut s = state(Some(600));
            s.evicted.insert("uid-a".into());
            s
        };
        let deleted_a = {
            let mut s = state(Some(600));
            s.deleted.insert("uid-a".into());
            s
        };
        let cases = vec![
            Case {
                name: "empty node is drained",
                pods: vec![],
                state: state(None),
                now: 10,
                evict: vec![],
                delete: vec![],
                leaving: vec![],
                held: vec![],
                done: true,
            },
            Case {
                name: "only skipped pods: drained",
                pods: vec![
                    daemon("ds"),
                    PodInfo {
                        mirror: true,
                        ..pod("static")
                    },
                    PodInfo {
                        phase: "Succeeded".into(),
                        ..pod("job")
                    },
                ],
                state: state(None),
                now: 10,
                evict: vec![],
                delete: vec![],
                leaving: vec![],
                held: vec![],
                done: true,
            },
            Case {
                name: "workload pods are evicted, daemonset skipped",
                pods: vec![pod("a"), daemon("ds"), pod("b")],
                state: state(None),
                now: 10,
                evict: vec!["a", "b"],
                delete: vec![],
                leaving: vec![],
                held: vec![],
                done: false,
            },
            Case {
                name: "terminating pods are waited for, not evicted again",
                pods: vec![terminating("a", 30), pod("b")],
                state: state(None),
                now: 10,
                evict: vec!["b"],
                delete: vec![],
                leaving: vec!["a"],
                held: vec![],
                done: false,
            },
            Case {
                name: "pod evicted earlier without deletion timestamp yet is not evicted again",
                pods: vec![pod("a")],
                state: evicted_a.clone(),
                now: 10,
                evict: vec![],
                delete: vec![],
                leaving: vec!["a"],
                held: vec![],
                done: false,
            },
            Case {
                name: "stuck terminating pod does not block",
                pods: vec![terminating("a", 0)],
                state: state(None),
                now: 61,
                evict: vec![],
                delete: vec![],
                leaving: vec![],
                held: vec![],
                done: true,
            },
            Case {
                name: "critical pods wait for the others",
                pods: vec![critical("dns"), pod("a")],
                state: state(None),
                now: 10,
                evict: vec!["a"],
                delete: vec![],
                leaving: vec![],
                held: vec!["dns"],
                done: false,
            },
            Case {
                name: "critical pods wait while others are still terminating",
                pods: vec![critical("dns"), terminating("a", 30)],
                state: state(None),
                now: 10,
                evict: vec![],
                delete: vec![],
                leaving: vec!["a"],
                held: vec!["dns"],
                done: false,
            },
            Case {
                name: "critical pods go once the others are gone",
                pods: vec![critical("dns"), daemon("ds")],
                state: state(None),
                now: 10,
                evict: vec!["dns"],
                delete: vec![],
                leaving: vec![],
                held: vec![],
                done: false,
            },
            Case {
                name: "before the deadline nothing is deleted",
                pods: vec![pod("a")],
                state: state(Some(600)),
                now: 599,
                evict: vec!["a"],
                delete: vec![],
                leaving: vec![],
                held: vec![],
                done: false,
            },
            Case {
                name: "at the deadline remaining pods are deleted, critical included",
                pods: vec![
                    pod("a"),
                    critical("dns"),
                    terminating("c", 620),
                    daemon("ds"),
                ],
                state: state(Some(600)),
                now: 600,
                evict: vec![],
                delete: vec!["a", "dns"],
                leaving: vec!["c"],
                held: vec![],
                done: false,
            },
            Case {
                name: "after the deadline an accepted eviction that never showed is deleted",
                pods: vec![pod("a")],
                state: evicted_a,
                now: 700,
                evict: vec![],
                delete: vec!["a"],
                leaving: vec![],
                held: vec![],
                done: false,
            },
            Case {
                name: "a pod deleted by an earlier step is not deleted again",
                pods: vec![pod("a")],
                state: deleted_a,
                now: 700,
                evict: vec![],
                delete: vec![],
                leaving: vec!["a"],
                held: vec![],
                done: false,
            },
            Case {
                name: "no deadline: wait forever",
                pods: vec![pod("a")],
                state: state(None),
                now: 10_000_000,
                evict: vec!["a"],
                delete: vec![],
                leaving: vec![],
                held: vec![],
                done: false,
            },
        ];
        for c in cases {
            let plan = plan_step(&c.pods, &c.state, t(c.now));
            assert_eq!(names(&plan.evict), c.evict, "{}: evict", c.name);
            assert_eq!(names(&plan.delete), c.delete, "{}: delete", c.name);
            assert_eq!(names(&plan.leaving), c.leaving, "{}: leaving", c.name);
            assert_eq!(names(&plan.held), c.held, "{}: held", c.name);
            assert_eq!(plan.done(), c.done, "{}: done", c.name);
        }
    }

    #[test]
    fn state_round_trips_through_json() {
        let mut s = state(Some(7200));
        s.evicted.insert("u1".into());
        s.blocked_by.push("default/web".into());
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"nodeUid\""), "{json}");
        let back: DrainState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        // Older records without the optional fields still load.
        let minimal = r#"{"instanceId":"i-1","node":"n","nodeUid":"u","reason":"Drifted",
            "startedAt":"2024-01-01T00:00:00Z","deadline":null,"wasUnschedulable":false}"#;
        let loaded: DrainState = serde_json::from_str(minimal).unwrap();
        assert!(loaded.evicted.is_empty() && !loaded.done);
    }

    const BUDGET: Duration = Duration::from_secs(30);

    fn cluster_with(pods: Vec<PodInfo>) -> MemoryCluster {
        let c = MemoryCluster::new(t(0));
        c.add_node("n1", "i-0123456789abcdef0");
        for p in pods {
            c.add_pod("n1", p);
        }
        c
    }

    fn count(log: &[String], prefix: &str) -> usize {
        log.iter().filter(|l| l.starts_with(prefix)).count()
    }

    #[tokio::test]
    async fn the_observed_node_is_read_by_name_and_a_stale_name_is_looked_up_again() {
        let c = MemoryCluster::new(t(0));
        c.add_node("n1", "i-0123456789abcdef0");
        c.add_node("n2", "i-0fedcba9876543210");
        let finds = |c: &MemoryCluster| count(&c.log(), "find ");
        // Known and still that instance's node: no list of the cluster's nodes.
        let n = node_of(&c, "i-0123456789abcdef0", Some("n1"))
            .await
            .unwrap();
        assert_eq!(n.map(|n| n.name).as_deref(), Some("n1"));
        assert_eq!(finds(&c), 0);
        // A name that now belongs to another instance, or to no node: found by providerID.
        let n = node_of(&c, "i-0123456789abcdef0", Some("n2"))
            .await
            .unwrap();
        assert_eq!(n.map(|n| n.name).as_deref(), Some("n1"));
        let n = node_of(&c, "i-0123456789abcdef0", Some("gone"))
            .await
            .unwrap();
        assert_eq!(n.map(|n| n.name).as_deref(), Some("n1"));
        assert_eq!(finds(&c), 2);
        // Nothing known: found by providerID; no node: none.
        assert!(
            node_of(&c, "i-0aaaaaaaaaaaaaaa0", None)
                .await
                .unwrap()
                .is_none()
        );
        let s = start_drain_known(&c, "i-0fedcba9876543210", Some("n2"), "Drifted", None, t(0))
            .await
            .unwrap();
        assert_eq!(s.node, "n2");
        assert_eq!(finds(&c), 3, "the drain started from the known name");
    }

    #[tokio::test]
    async fn drain_across_steps_blocked_then_allowed_without_repeats() {
        let c = cluster_with(vec![pod("a"), pod("b"), daemon("ds")]);
        c.script_evictions(
            "b",
            vec![
                EvictOutcome::Blocked {
                    pdb: Some("web".into()),
                    message: "Cannot evict pod as it would violate the pod's disruption budget."
                        .into(),
                },
                EvictOutcome::Blocked {
                    pdb: Some("web".into()),
                    message: "still".into(),
                },
            ],
        );
        let mut s = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(0))
            .await
            .unwrap();
        let n = c.node("n1").unwrap();
        assert!(n.unschedulable);
        assert_eq!(n.disrupted_taint.as_deref(), Some("Drifted"));

        let p1 = drain_step(&c, &mut s, t(1), BUDGET).await.unwrap();
        assert_eq!(names(&p1.evicted), vec!["a"]);
        assert_eq!(p1.blocked_by, vec!["default/web"]);
        assert_eq!(p1.pods_remaining, 2);
        assert_eq!(p1.skipped, 1);
        assert!(!p1.done);

        // Persist and reload between invocations.
        let mut s: DrainState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        let p2 = drain_step(&c, &mut s, t(2), BUDGET).await.unwrap();
        assert!(p2.evicted.is_empty());
        assert_eq!(p2.blocked.len(), 1);

        c.advance(t(40)); // a is gone; b's PDB now allows
        let p3 = drain_step(&c, &mut s, t(40), BUDGET).await.unwrap();
        assert_eq!(names(&p3.evicted), vec!["b"]);
        assert!(p3.blocked_by.is_empty());
        assert!(!p3.done);

        c.advance(t(80));
        let p4 = drain_step(&c, &mut s, t(80), BUDGET).await.unwrap();
        assert!(p4.done);
        assert_eq!(s.evicted.len(), 2);

        let log = c.log();
        assert_eq!(count(&log, "evict default/a"), 1, "{log:?}");
        assert_eq!(count(&log, "evict default/b"), 3, "{log:?}");
        assert_eq!(count(&log, "evict default/ds"), 0, "{log:?}");
        assert_eq!(count(&log, "delete"), 0, "{log:?}");

        // A finished drain does nothing more.
        let before = c.log().len();
        assert!(drain_step(&c, &mut s, t(90), BUDGET).await.unwrap().done);
        assert_eq!(c.log().len(), before);

        let reasons: Vec<String> = c.events().into_iter().map(|(_, e)| e.reason).collect();
        assert_eq!(
            reasons,
            vec![
                "Cordoned",
                "Evicted",
                "EvictionBlocked",
                "Evicted",
                "Drained"
            ]
        );
    }

    #[tokio::test]
    async fn deadline_forces_deletion_once() {
        let c = cluster_with(vec![pod("a")]);
        let blocked = EvictOutcome::Blocked {
            pdb: Some("web".into()),
            message: "no".into(),
        };
        c.script_evictions("a", vec![blocked.clone(), blocked]);
        let mut s = start_drain(
            &c,
            "i-0123456789abcdef0",
            "Expired",
            Some(Duration::from_secs(60)),
            t(0),
        )
        .await
        .unwrap();
        assert_eq!(s.deadline, Some(t(60)));
        let p = drain_step(&c, &mut s, t(30), BUDGET).await.unwrap();
        assert_eq!(p.blocked.len(), 1);
        assert!(!p.deadline_passed);
        let p = drain_step(&c, &mut s, t(61), BUDGET).await.unwrap();
        assert!(p.deadline_passed);
        assert_eq!(names(&p.deleted), vec!["a"]);
        let p = drain_step(&c, &mut s, t(62), BUDGET).await.unwrap();
        assert!(!p.done, "pod terminating for its grace period");
        assert!(p.deleted.is_empty());
        c.advance(t(100));
        let p = drain_step(&c, &mut s, t(100), BUDGET).await.unwrap();
        assert!(p.done);
        assert_eq!(count(&c.log(), "delete default/a"), 1);
        assert!(
            c.events()
                .iter()
                .any(|(_, e)| e.reason == "DrainDeadlineReached")
        );
    }

    #[tokio::test]
    async fn node_not_found_and_node_gone() {
        let c = cluster_with(vec![]);
        let err = start_drain(&c, "i-0fffffffffffffff0", "Drifted", None, t(0))
            .await
            .unwrap_err();
        assert!(matches!(err, DrainError::NodeNotFound(_)), "{err}");

        let mut s = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(0))
            .await
            .unwrap();
        c.delete_node("n1").await.unwrap();
        let p = drain_step(&c, &mut s, t(1), BUDGET).await.unwrap();
        assert!(p.done && p.node_gone);
    }

    #[tokio::test]
    async fn already_cordoned_node_is_drained_and_stays_cordoned_on_abort() {
        let c = cluster_with(vec![pod("a")]);
        c.set_node(NodeInfo {
            unschedulable: true,
            ..c.node("n1").unwrap()
        });
        let s = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(0))
            .await
            .unwrap();
        assert!(s.was_unschedulable);
        assert_eq!(
            c.events()[0].1.reason,
            "Cordoned",
            "taint added even though already unschedulable"
        );
        abort_drain(&c, &s).await.unwrap();
        let n = c.node("n1").unwrap();
        assert!(n.unschedulable, "was cordoned before: stays cordoned");
        assert_eq!(n.disrupted_taint, None);

        // Cordoning twice writes once.
        let c = cluster_with(vec![]);
        let s = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(0))
            .await
            .unwrap();
        let s2 = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(5))
            .await
            .unwrap();
        assert_eq!(count(&c.log(), "cordon"), 1);
        assert!(
            !s2.was_unschedulable,
            "our own taint: the second start still owns the cordon"
        );
        abort_drain(&c, &s).await.unwrap();
        let n = c.node("n1").unwrap();
        assert!(!n.unschedulable && n.disrupted_taint.is_none());
        let reasons: Vec<String> = c.events().into_iter().map(|(_, e)| e.reason).collect();
        assert_eq!(reasons, vec!["Cordoned", "DrainStarted", "Uncordoned"]);
    }

    #[tokio::test]
    async fn recordons_a_node_uncordoned_during_the_drain() {
        let c = cluster_with(vec![pod("a")]);
        let mut s = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(0))
            .await
            .unwrap();
        c.undo_cordon("n1", true).await.unwrap();
        drain_step(&c, &mut s, t(1), BUDGET).await.unwrap();
        let n = c.node("n1").unwrap();
        assert!(n.unschedulable && n.disrupted_taint.is_some());
    }

    #[tokio::test]
    async fn rejected_and_gone_evictions() {
        let c = cluster_with(vec![pod("a"), pod("b")]);
        c.script_evictions(
            "a",
            vec![EvictOutcome::Rejected {
                code: 500,
                message: "more than one PodDisruptionBudget".into(),
            }],
        );
        c.script_evictions("b", vec![EvictOutcome::Gone]);
        let mut s = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(0))
            .await
            .unwrap();
        let p = drain_step(&c, &mut s, t(1), BUDGET).await.unwrap();
        assert_eq!(p.failed.len(), 1);
        assert!(
            p.failed[0].message.contains("default/a"),
            "{}",
            p.failed[0].message
        );
        assert!(p.evicted.is_empty());
        assert!(c.events().iter().any(|(_, e)| e.reason == "EvictionFailed"));
    }

    #[tokio::test]
    async fn zero_budget_defers_everything() {
        let c = cluster_with(vec![pod("a"), pod("b")]);
        let mut s = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(0))
            .await
            .unwrap();
        let p = drain_step(&c, &mut s, t(1), Duration::ZERO).await.unwrap();
        assert_eq!(p.deferred, 2);
        assert_eq!(count(&c.log(), "evict"), 0);
    }

    #[tokio::test]
    async fn node_replaced_under_the_same_name_is_not_drained() {
        let c = cluster_with(vec![pod("a")]);
        let mut s = start_drain(&c, "i-0123456789abcdef0", "Drifted", None, t(0))
            .await
            .unwrap();
        c.set_node(NodeInfo {
            uid: "other".into(),
            ..c.node("n1").unwrap()
        });
        let p = drain_step(&c, &mut s, t(1), BUDGET).await.unwrap();
        assert!(p.done && p.node_gone);
        assert_eq!(count(&c.log(), "evict"), 0);
    }

    #[tokio::test]
    async fn delete_node_is_idempotent() {
        let c = cluster_with(vec![]);
        assert!(delete_node(&c, "n1", "instance terminated").await.unwrap());
        assert!(!delete_node(&c, "n1", "instance terminated").await.unwrap());
    }
}
