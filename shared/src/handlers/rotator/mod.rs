//! The rotator: per cluster it takes a lease, observes each pool (Auto Scaling group, EC2,
//! Kubernetes nodes, pool state, rotation records), asks the pure planner what to do and the
//! pure step function ([`crate::rotation::step`]) how each rotation moves, and performs those
//! commands: `Pending -> Surging -> Cordoned -> Draining -> Terminating -> Done`, or `Failed`
//! (halts the pool). Every write is conditional on the record's version, so a crash at any
//! point or two rotators at once never repeat or lose a step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::{HandlerError, Invocation};
use crate::clock::Clock;
use crate::event::{Input, Selection, parse_input};
use crate::fleet::GroupOps;
use crate::kube::NodeOps;
pub use crate::kube::{EksConnector, KubeConnector};
use crate::managed::{ManagedGroup, ManagedGroupOps};
use crate::plan::Snapshot;
use crate::plan::{self, Action};
use crate::policy::{self, Policy};
use crate::port::PortError;
use crate::rotation::step::StepSettings;
use crate::state;

mod execute;
mod health;
mod lease;
mod managed_pass;
mod observe;
#[cfg(test)]
mod pass_tests;
mod retained;
mod rollout;
mod statuses;

use execute::PoolCtx;
use observe::ClusterView;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Tunables (environment variables in the Lambda).
#[derive(Debug, Clone)]
pub struct Settings {
    /// A replacement not Ready within this long fails the rotation and halts the pool
    /// (`NODECYCLE_REPLACEMENT_TIMEOUT`, default 15m).
    pub replacement_timeout: Duration,
    /// Time one drain step may take (`NODECYCLE_DRAIN_STEP`, default 20s).
    pub drain_step: Duration,
    /// Lease length (`NODECYCLE_LEASE`, default 5m): a dead invocation blocks at most this long.
    pub lease: Duration,
    /// Stop starting steps when less than this is left of the invocation (default 20s).
    pub reserve: Duration,
    /// Expected time of one wave of a managed node group update (`NODECYCLE_NODEGROUP_WAVE`,
    /// default 10m): an update starts only if its waves fit the open Drifted window (or no
    /// window in the next days is longer).
    pub node_group_wave: Duration,
    /// Pools worked on at once across all clusters of a pass (`NODECYCLE_POOL_CONCURRENCY`,
    /// default 16, 1 to 256): a pass lasts about (pools / this) x one pool's calls, while the
    /// calls per second stay within what EC2, Auto Scaling and the API servers allow.
    pub pool_concurrency: usize,
    /// Rollout statuses written (SSM parameters) per cluster and pass at most
    /// (`NODECYCLE_STATUS_WRITES`, default [`DEFAULT_STATUS_WRITES`], 1 to 1,000): Parameter
    /// Store's throughput is the account's, shared with every other reader of parameters there,
    /// so a pass that changes hundreds of statuses writes them over several passes. A status not
    /// written keeps its pool record's old one, so the next pass finds the difference again.
    pub status_writes: usize,
}

/// Default of [`Settings::status_writes`].
pub const DEFAULT_STATUS_WRITES: usize = 50;
/// Largest accepted [`Settings::status_writes`].
pub const MAX_STATUS_WRITES: usize = 1000;

/// Default of [`Settings::pool_concurrency`].
pub const DEFAULT_POOL_CONCURRENCY: usize = 16;
/// Largest accepted [`Settings::pool_concurrency`].
pub const MAX_POOL_CONCURRENCY: usize = 256;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            replacement_timeout: Duration::from_secs(15 * 60),
            drain_step: Duration::from_secs(20),
            lease: Duration::from_secs(5 * 60),
            reserve: Duration::from_secs(20),
            node_group_wave: Duration::from_secs(10 * 60),
            pool_concurrency: DEFAULT_POOL_CONCURRENCY,
            status_writes: DEFAULT_STATUS_WRITES,
        }
    }
}

impl Settings {
    /// What the step function needs.
    pub fn step(&self) -> StepSettings {
        StepSettings {
            replacement_timeout: self.replacement_timeout,
        }
    }
}

/// One pool's visit in a pass: what every round of its pass works with.
#[derive(Clone)]
struct PoolVisit<'a> {
    /// The pool.
    policy: &'a Policy,
    /// Its cluster's nodes and pods.
    kube: Arc<dyn NodeOps>,
    /// What the pass read once of its cluster for all of the cluster's pools.
    view: &'a ClusterView,
    /// The pass's clock.
    clock: Clock,
    /// When the invocation must have stopped working.
    deadline: Instant,
}

/// The handler and its ports.
#[derive(Clone)]
pub struct RotatorHandler {
    /// Policies, the state table, the bus and the members.
    pub cell: super::CellPorts,
    /// The ports of the place it works at.
    pub ports: RotatorPorts,
    /// Tunables.
    pub settings: Settings,
    /// Where the per-pool metrics of each pass go (EMF on stdout in the Lambda).
    pub metrics: Arc<dyn crate::metrics::MetricSink>,
}

place_ports! {
    /// The rotator's ports of the place it works at (the cell's, or a pool's member's).
    ///
    /// * `groups`: Auto Scaling groups (self-managed pools, and the groups behind managed node
    ///   groups).
    /// * `managed`: EKS managed node groups.
    /// * `parameters`: SSM parameters (release versions of EKS-published AMIs).
    /// * `node_groups`: What node groups launch on (instance types, for the architecture check
    ///   before an image is written into a launch template or a node group update).
    /// * `kube`: Kubernetes access per cluster.
    /// * `instances`: EC2 instance statuses (failed status checks, scheduled events: repair).
    pub struct RotatorPorts { groups, managed, parameters, node_groups, kube, instances }
    for RotatorHandler
}

/// What happened to one pool in a pass.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolReport {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// Budget allowance at the start of the pass.
    pub allowed: Option<plan::Allowed>,
    /// Why nothing (more) started.
    pub blocked: Option<String>,
    /// Rotations started.
    pub started: Vec<String>,
    /// Steps taken: `instance: From -> To`.
    pub steps: Vec<String>,
    /// Rotations waiting this pass, with why (`instance: reason`), e.g. a surge whose launch
    /// has not come (the group's failed scaling activity).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
    /// How nodes are replaced, when not surge first (terminate first, and why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replacement: Option<plan::Replacement>,
    /// Launch template moved to this image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<String>,
    /// The desired AMI went back to this image (the one it rolled out is quarantined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<String>,
    /// Errors (the pass continues with other pools).
    pub errors: Vec<String>,
    /// Events a writer had left in this pool's outboxes, put by this pass's sweep.
    #[serde(skip_serializing_if = "is_zero")]
    pub events_swept: usize,
    /// The pass counted for metrics.
    #[serde(skip)]
    pub metrics: crate::metrics::PoolPass,
}

/// Which cluster's lease holder sweeps each quarantine entry's leftover events, among the
/// clusters of this pass: the cluster of the pool that caused it when a policy names that
/// cluster, else (an operator's, or a cluster no policy names any more) the first cluster of
/// `configured` by name. Ownership depends on the configured clusters only, never on the pass's
/// selection, so passes over different cluster groups (fan-out) never both put an event; an
/// entry whose owner is outside this pass is left to the pass that holds that cluster.
fn quarantine_sweeps(
    quarantined: &crate::promotion::Quarantined,
    configured: &BTreeSet<String>,
    in_pass: &BTreeSet<&String>,
) -> BTreeMap<String, crate::promotion::Quarantined> {
    let mut out: BTreeMap<String, crate::promotion::Quarantined> = BTreeMap::new();
    for q in quarantined.0.iter().filter(|q| !q.outbox.is_empty()) {
        let caused_in = q.cause.pool().map(crate::policy::place::scope_of);
        let owner = caused_in
            .and_then(|c| configured.get(c))
            .or_else(|| configured.first());
        if let Some(owner) = owner.filter(|o| in_pass.contains(o)) {
            out.entry(owner.clone()).or_default().0.push(q.clone());
        }
    }
    out
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The read-only half of a pass, over only the ports it reads: observes one pool (its group,
/// nodes, state and rotation records) and plans it. Each pass plans through it, and so do
/// `nodecycle plan` and `status`, which write nothing.
#[derive(Clone, Copy)]
pub struct Planner<'a> {
    /// Auto Scaling groups (and the groups behind managed node groups).
    pub groups: &'a dyn GroupOps,
    /// EKS managed node groups (`DescribeNodegroup`, `DescribeUpdate`).
    pub managed: &'a dyn ManagedGroupOps,
    /// The state table.
    pub state: &'a state::Repository,
    /// [`Settings::node_group_wave`].
    pub node_group_wave: Duration,
    /// EC2 instance statuses (`DescribeInstanceStatus`: failed status checks and scheduled
    /// events, for repair); `None`: not read (`nodecycle plan`, `status`).
    pub instances: Option<&'a dyn crate::interruption::InstanceLookup>,
}

impl Planner<'_> {
    /// What a pass would decide for one pool now, without acting or recording anything
    /// (`nodecycle plan`, `status`): the snapshot and its plan.
    pub async fn preview(
        &self,
        policy: &Policy,
        kube: &dyn NodeOps,
        now: DateTime<Utc>,
    ) -> Result<(Snapshot, Preview), String> {
        let observed = self.observe_alone(policy, kube, now).await?;
        let mut snapshot = observed.snapshot;
        let preview = match &observed.managed {
            None => Preview::Group(plan::plan(&snapshot, now)),
            Some(group) => {
                let (plan, update) = self
                    .plan_managed_pool(group, &mut snapshot, observed.managed_update, now)
                    .await
                    .map_err(|e| e.to_string())?;
                Preview::Managed {
                    plan: Box::new(plan),
                    record: update.map(|v| v.value),
                }
            }
        };
        Ok((snapshot, preview))
    }

    /// Builds the snapshot of one pool, and for a managed node group the node group as
    /// `DescribeNodegroup` reported it. Reads only.
    pub async fn snapshot(
        &self,
        policy: &Policy,
        kube: &dyn NodeOps,
        now: DateTime<Utc>,
    ) -> Result<(Snapshot, Option<ManagedGroup>), String> {
        let observed = self.observe_alone(policy, kube, now).await?;
        Ok((observed.snapshot, observed.managed))
    }

    /// One pool observed outside a pass (its own read of the cluster's nodes).
    async fn observe_alone(
        &self,
        policy: &Policy,
        kube: &dyn NodeOps,
        now: DateTime<Utc>,
    ) -> Result<observe::Observed, String> {
        let view = self
            .cluster_view(kube, std::slice::from_ref(policy), false, now)
            .await
            .map_err(|e| e.to_string())?;
        self.observe(policy, kube, &view, now)
            .await
            .map_err(|e| e.to_string())
    }
}

/// A pool's plan as [`Planner::preview`] gives it. Serializes as the plan's JSON; a
/// managed node group's adds `drifted`, `update` (`none`, `continue`, `start` with `image` and
/// `maxUnavailable`) and `nodeGroupUpdate` (the recorded update, or null).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Preview {
    /// A self-managed Auto Scaling group.
    Group(plan::Plan),
    /// A managed node group.
    Managed {
        /// The plan.
        #[serde(flatten)]
        plan: Box<plan::managed_update::ManagedPlan>,
        /// The pool's update record (as `DescribeUpdate` reports it now).
        #[serde(rename = "nodeGroupUpdate")]
        record: Option<crate::managed::ManagedUpdate>,
    },
}

impl Preview {
    /// The node-level plan.
    pub fn plan(&self) -> &plan::Plan {
        match self {
            Preview::Group(p) => p,
            Preview::Managed { plan, .. } => &plan.plan,
        }
    }
}

/// The release (and image) every node of the pool runs, when they all run one the record
/// knows (what the soak ledger records).
pub(super) fn fully_on_release(
    snapshot: &Snapshot,
    record: &state::PoolRecord,
) -> Option<(crate::promotion::Release, String, u32)> {
    crate::promotion::fully_on(snapshot).and_then(|image| {
        let ami = record
            .desired
            .iter()
            .chain(record.history.iter().map(|h| &h.ami))
            .find(|a| a.id == image)?;
        let nodes = u32::try_from(snapshot.members.len()).unwrap_or(u32::MAX);
        Some((crate::promotion::release_of(ami), image.to_string(), nodes))
    })
}

/// [`fully_on_release`]'s answer as the ledger takes it.
pub(super) fn as_fully_on(
    current: &Option<(crate::promotion::Release, String, u32)>,
) -> Option<crate::promotion::ledger::FullyOn<'_>> {
    current.as_ref().map(
        |(release, image, nodes)| crate::promotion::ledger::FullyOn {
            release,
            image,
            nodes: *nodes,
        },
    )
}

fn log_decisions(plan: &plan::Plan) {
    for d in &plan.decisions {
        tracing::info!(pool = %plan.pool, instance = d.instance_id.as_deref(), decision = %d.message);
    }
}

fn internal(e: impl std::fmt::Display) -> HandlerError {
    HandlerError::internal(e.to_string())
}

impl RotatorHandler {
    /// The read-only half of this rotator's pass (see [`Planner`]).
    pub fn planner(&self) -> Planner<'_> {
        Planner {
            groups: self.ports.groups.as_ref(),
            managed: self.ports.managed.as_ref(),
            state: &self.cell.state,
            node_group_wave: self.settings.node_group_wave,
            instances: Some(self.ports.instances.as_ref()),
        }
    }

    /// The cluster leases of this rotator's passes.
    fn leases(&self) -> lease::Leases<'_> {
        lease::Leases {
            state: &self.cell.state,
            length: self.settings.lease,
        }
    }

    /// One pass at the invocation's `now`; stops starting steps when its `deadline` is near.
    /// Its request id is the lease holder (`None`: a random id), so each invocation holds a
    /// cluster's lease under its own name.
    pub async fn handle(
        &self,
        payload: &Value,
        inv: Invocation<'_>,
    ) -> Result<Value, HandlerError> {
        let Invocation {
            now,
            deadline,
            request_id,
            ..
        } = inv;
        let selection = match parse_input(payload)? {
            Input::Envelope(e) if e.detail_type == "Scheduled Event" => Selection::default(),
            Input::Envelope(e) => {
                tracing::info!(event = %e.detail_type, decision = "ignored", "not a schedule; nothing to do");
                return Ok(json!({"trigger": "ignored", "pools": []}));
            }
            Input::Custom(v) => crate::event::rotator_selection(&v)?,
        };
        let clock = Clock::starting_at(now);
        let docs = self.cell.documents().await?;
        let (by_cluster, configured) = by_scope(docs, &selection);
        // Fail closed: without the quarantine no pool may move (a quarantined AMI could come
        // back).
        let quarantined =
            self.cell.state.quarantine().await.map_err(|e| {
                internal(format!("cannot read the quarantine: {e}; rotating nothing"))
            })?;
        let holder: Arc<str> = lease::holder(request_id).into();
        let quarantined = Arc::new(quarantined);
        let permits = Arc::new(Semaphore::new(self.settings.pool_concurrency.max(1)));
        // Clusters at once, each under its lease; their pools at once, at most
        // `pool_concurrency` pools of the pass at a time.
        let mut tasks = JoinSet::new();
        let mut names = BTreeMap::new();
        let mut sweeps = quarantine_sweeps(&quarantined, &configured, &by_cluster.keys().collect());
        let mut unserved = Vec::new();
        // One read of the instance statuses per place a pass, whichever cluster asks first.
        let mut statuses: BTreeMap<
            Option<crate::policy::Place>,
            Arc<dyn crate::interruption::InstanceLookup>,
        > = BTreeMap::new();
        for (cluster, policies) in by_cluster {
            // Every AWS and Kubernetes call for a pool through its member's ports.
            let place = policies.first().and_then(|p| p.place.clone());
            let mut this = match self.at(place.as_ref()).await {
                Ok(this) => this,
                Err(e) => {
                    unserved.push((cluster, policies, e));
                    continue;
                }
            };
            let inner = this.ports.instances.clone();
            this.ports.instances = statuses
                .entry(place)
                .or_insert_with(|| Arc::new(statuses::PassStatuses::new(inner)))
                .clone();
            let (holder, permits, quarantined) =
                (holder.clone(), permits.clone(), quarantined.clone());
            let sweep = sweeps.remove(&cluster).unwrap_or_default();
            let name = cluster.clone();
            let task = tasks.spawn(async move {
                this.cluster_pass(
                    &cluster,
                    policies,
                    &holder,
                    clock,
                    deadline,
                    (&quarantined, sweep),
                    &permits,
                )
                .await
            });
            names.insert(task.id(), name);
        }
        let (mut clusters, mut by_name) = unserved_reports(unserved);
        while let Some(joined) = tasks.join_next_with_id().await {
            match joined {
                Ok((id, (status, pools))) => {
                    let cluster = names.get(&id).cloned().unwrap_or_default();
                    clusters.insert(cluster.clone(), status);
                    by_name.insert(cluster, pools);
                }
                Err(e) => {
                    let cluster = names.get(&e.id()).cloned().unwrap_or_default();
                    tracing::error!(cluster = %cluster, error = %e, "cluster pass failed");
                    clusters.insert(cluster, format!("failed: {e}"));
                }
            }
        }
        // Reports in a fixed order: clusters by name, pools in policy order.
        let reports: Vec<PoolReport> = by_name.into_values().flatten().collect();
        self.emit_metrics(&reports, quarantined.0.len(), now);
        Ok(json!({"trigger": "schedule", "clusters": clusters, "pools": reports}))
    }

    /// Emits the pass's metrics ([`crate::metrics::rotator_pass`]): the cell's over `reports`,
    /// with `quarantined` entries at the start of the pass, and those of per-pool pools.
    fn emit_metrics(&self, reports: &[PoolReport], quarantined: usize, now: DateTime<Utc>) {
        let pools: Vec<crate::metrics::PoolMetrics<'_>> = reports
            .iter()
            .map(|r| crate::metrics::PoolMetrics {
                pool: &r.pool,
                pass: &r.metrics,
                allowed: r.allowed.as_ref(),
            })
            .collect();
        self.metrics
            .emit(&crate::metrics::rotator_pass(&pools, quarantined), now);
    }

    /// One cluster's part of a pass: its lease, Kubernetes connection and node list (under one
    /// of the pass's permits), then its pools (each under a permit of its own), then the lease
    /// given back. The cluster's status and its pools' reports in policy order.
    #[allow(clippy::too_many_arguments)]
    async fn cluster_pass(
        &self,
        cluster: &str,
        policies: Vec<Policy>,
        holder: &str,
        clock: Clock,
        deadline: Instant,
        (quarantined, sweep): (
            &Arc<crate::promotion::Quarantined>,
            crate::promotion::Quarantined,
        ),
        permits: &Arc<Semaphore>,
    ) -> (String, Vec<PoolReport>) {
        let now = clock.start();
        let (held, view) = {
            // Given back before the pools start: they need permits of their own.
            let _permit = permits.acquire().await;
            let held = match self.leases().lease(cluster, holder, now, deadline).await {
                Ok(held) => held,
                Err(why) => {
                    tracing::info!(cluster = %cluster, decision = "skipped", reason = %why, "cluster not worked on this pass");
                    return (why, Vec::new());
                }
            };
            // Under the cluster's lease, so two passes never put the same leftover event.
            self.cell.announce.sweep_quarantine(&sweep, now).await;
            (held, self.connect_and_list(cluster, &policies, now).await)
        };
        let reports = match view {
            Err(why) => policies
                .iter()
                .map(|p| {
                    let report = PoolReport {
                        pool: p.pool_id(),
                        blocked: Some(why.clone()),
                        ..PoolReport::default()
                    };
                    tracing::error!(pool = %report.pool, decision = "blocked", reason = report.blocked.as_deref());
                    report
                })
                .collect(),
            Ok((kube, view)) => {
                let pass = PoolsPass {
                    kube,
                    view,
                    clock,
                    deadline,
                    quarantined: quarantined.clone(),
                    permits: permits.clone(),
                };
                self.pools_pass(policies, pass).await
            }
        };
        self.leases().release(&held, clock.now()).await;
        ("done".into(), reports)
    }

    /// The cluster's Kubernetes connection and its view (nodes, the pods to count), or why
    /// the cluster is not worked on this pass.
    async fn connect_and_list(
        &self,
        cluster: &str,
        policies: &[Policy],
        now: DateTime<Utc>,
    ) -> Result<(Arc<dyn NodeOps>, Arc<ClusterView>), String> {
        let name = policies.first().map_or(cluster, |p| p.cluster.as_str());
        let kube = self
            .ports
            .kube
            .connect(name)
            .await
            .map_err(|e| format!("cluster {cluster} unreachable: {e}; rotating nothing"))?;
        match self
            .planner()
            .cluster_view(kube.as_ref(), policies, true, now)
            .await
        {
            Ok(view) => Ok((kube, Arc::new(view))),
            Err(e) => Err(format!(
                "cannot list the nodes of cluster {cluster}: {e}; rotating nothing"
            )),
        }
    }

    /// The cluster's pools at once, each under a permit of its own, then their events put
    /// (10 a call, outboxes cleared at once): their reports in policy order, a pool whose task
    /// panicked with the failure.
    async fn pools_pass(&self, policies: Vec<Policy>, pass: PoolsPass) -> Vec<PoolReport> {
        let ids: Vec<String> = policies.iter().map(Policy::pool_id).collect();
        let mut tasks = JoinSet::new();
        for (i, policy) in policies.into_iter().enumerate() {
            let (this, pass) = (self.clone(), pass.clone());
            tasks.spawn(async move {
                let _permit = pass.permits.acquire_owned().await;
                let visit = PoolVisit {
                    policy: &policy,
                    kube: pass.kube,
                    view: &pass.view,
                    clock: pass.clock,
                    deadline: pass.deadline,
                };
                (i, this.visit_pool(visit, &pass.quarantined).await)
            });
        }
        let mut done: BTreeMap<usize, PoolReport> = BTreeMap::new();
        let mut failures = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, report)) => {
                    done.insert(i, report);
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        self.write_statuses(&pass.view, pass.clock.now()).await;
        self.cell.announce.flush(&pass.view.events).await;
        let mut failures = failures.into_iter();
        ids.into_iter()
            .enumerate()
            .map(|(i, pool)| {
                done.remove(&i).unwrap_or_else(|| {
                    let why = failures.next().unwrap_or_default();
                    tracing::error!(pool = %pool, error = %why, "pool pass failed");
                    PoolReport {
                        pool,
                        errors: vec![format!("pool pass failed: {why}")],
                        ..PoolReport::default()
                    }
                })
            })
            .collect()
    }

    /// One pool's part of a pass, unless too little of the invocation is left to start it.
    async fn visit_pool(
        &self,
        visit: PoolVisit<'_>,
        quarantined: &crate::promotion::Quarantined,
    ) -> PoolReport {
        let mut report = PoolReport {
            pool: visit.policy.pool_id(),
            ..PoolReport::default()
        };
        report.metrics.per_pool = visit.policy.metrics_per_pool;
        if visit.deadline.saturating_duration_since(Instant::now()) < self.settings.reserve {
            report.blocked =
                Some("invocation time nearly used up; the pool is worked on next pass".into());
            tracing::warn!(pool = %report.pool, decision = "deferred", reason = report.blocked.as_deref());
            return report;
        }
        let now = visit.clock.start();
        let backoff = visit.view.backoff_of(&report.pool);
        if let Some(b) = backoff.as_ref().filter(|b| b.holds(now)) {
            let why = format!(
                "backing off until {} after {} failed pass(es) in a row since {}: {}",
                b.until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                b.failures,
                b.since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                b.reason
            );
            tracing::warn!(pool = %report.pool, decision = "backing off", reason = %why);
            report.blocked = Some(why);
            report.metrics.backing_off = true;
            return report;
        }
        match self.pool_pass(&visit, quarantined, &mut report).await {
            Err(e) => {
                tracing::error!(pool = %report.pool, kind = ?e.kind, error = %e, "pool pass failed");
                report.errors.push(e.to_string());
                report.metrics.backing_off = true;
                self.back_off(&report.pool, &e.to_string(), now).await;
            }
            Ok(()) if backoff.is_some() => self.back_off_lifted(&report.pool, now).await,
            Ok(()) => {}
        }
        report
    }

    /// Records one more failed pass of `pool` ([`crate::backoff::after_failure`] on a fresh
    /// read of its record). Best effort: a lost write only means the pool is tried next pass.
    async fn back_off(&self, pool: &str, reason: &str, now: DateTime<Utc>) {
        let result = self
            .cell
            .announce
            .update_pool(pool, now, |r| state::PoolRecord {
                backoff: Some(crate::backoff::after_failure(
                    r.backoff.as_ref(),
                    pool,
                    reason,
                    now,
                )),
                ..r.clone()
            })
            .await;
        match result {
            Ok((_, after)) => {
                if let Some(b) = after.backoff {
                    tracing::warn!(pool, decision = "back off", failures = b.failures, until = %b.until, reason = %b.reason, "left out of passes until then; other pools go on");
                }
            }
            Err(e) => {
                tracing::warn!(pool, error = %e, "cannot record the back-off; the pool is tried next pass")
            }
        }
    }

    /// Clears `pool`'s back-off after a successful pass.
    async fn back_off_lifted(&self, pool: &str, now: DateTime<Utc>) {
        let result = self
            .cell
            .announce
            .update_pool(pool, now, |r| state::PoolRecord {
                backoff: None,
                ..r.clone()
            })
            .await;
        match result {
            Ok(_) => tracing::info!(
                pool,
                decision = "back-off lifted",
                reason = "a pass succeeded"
            ),
            Err(e) => {
                tracing::warn!(pool, error = %e, "cannot clear the back-off; cleared after the next successful pass")
            }
        }
    }

    /// One pool's pass; planned again (once) when it quarantined the AMI it rolled out, so the
    /// rollback (launch template, cancels, replacements) starts in the same pass.
    async fn pool_pass(
        &self,
        visit: &PoolVisit<'_>,
        quarantined: &crate::promotion::Quarantined,
        report: &mut PoolReport,
    ) -> Result<(), PortError> {
        let mut quarantined = quarantined.clone();
        for _ in 0..2 {
            match self.pool_round(visit, quarantined, report).await? {
                Some(now_quarantined) => quarantined = now_quarantined,
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Observe, roll back from a quarantined AMI, plan, perform, record the soak ledger.
    /// `Some(quarantine)` when the round quarantined something (plan again).
    async fn pool_round(
        &self,
        visit: &PoolVisit<'_>,
        mut quarantined: crate::promotion::Quarantined,
        report: &mut PoolReport,
    ) -> Result<Option<crate::promotion::Quarantined>, PortError> {
        let PoolVisit {
            policy,
            kube,
            view,
            clock,
            deadline,
        } = visit.clone();
        let now = clock.start();
        let mut observed = self
            .planner()
            .observe(policy, kube.as_ref(), view, now)
            .await?;
        if let Some(q) = self
            .judge_release(visit, &observed, &quarantined, &mut report.metrics, now)
            .await
        {
            quarantined.0.push(q);
        }
        if let Some(rollback) = observed
            .record
            .as_ref()
            .and_then(|r| r.rollback(&quarantined))
        {
            self.roll_back(policy, rollback, now, report).await?;
            observed = self
                .planner()
                .observe(policy, kube.as_ref(), view, now)
                .await?;
        }
        let mut ctx = PoolCtx {
            policy,
            kube,
            snapshot: observed.snapshot,
            versions: observed.versions,
            clock,
            record: observed.record,
            record_version: observed.record_version,
            managed_update: observed.managed_update,
            events: &view.events,
            quarantined,
            quarantined_now: false,
            launch_problem: observed.launch_problem.clone(),
        };
        report.metrics.observe(&ctx.snapshot, now);
        if let Some(group) = &observed.managed {
            // A managed node group has no rotation records: only its state record is swept
            // (a self-managed group's are swept by the executor, with its rotation records).
            let swept = (self.cell.announce)
                .sweep_pool(&report.pool, ctx.record.as_ref(), &mut BTreeMap::new(), now)
                .await;
            report.events_swept = swept.put;
            self.managed_pass(policy, group, &mut ctx, deadline, report)
                .await?;
        } else {
            self.group_pass(&mut ctx, deadline, report).await?;
        }
        self.record_ledger(&ctx, now).await;
        self.stage_rollout(&ctx, view, report, now);
        Ok(ctx.quarantined_now.then_some(ctx.quarantined))
    }

    /// Applies a rollback decision to the pool record.
    async fn roll_back(
        &self,
        policy: &Policy,
        rollback: crate::promotion::Rollback,
        now: DateTime<Utc>,
        report: &mut PoolReport,
    ) -> Result<(), PortError> {
        use crate::promotion::Rollback;
        let pool = policy.pool_id();
        match rollback {
            Rollback::To {
                target,
                reason,
                lift_halt,
            } => {
                self.cell
                    .announce
                    .update_pool(&pool, now, |r| {
                        r.roll_back(&target, &reason, lift_halt, now)
                    })
                    .await?;
                tracing::warn!(pool = %pool, target = %target.id, lift_halt, decision = "rolled back", reason = %reason, "desired AMI quarantined: back to the previous one");
                report.rolled_back = Some(target.id.clone());
            }
            Rollback::Unpin { reason } => {
                self.cell
                    .announce
                    .update_pool(&pool, now, |r| state::PoolRecord {
                        pin: None,
                        ..r.clone()
                    })
                    .await?;
                tracing::warn!(pool = %pool, decision = "unpinned", reason = %reason);
            }
            Rollback::Nowhere { reason } => {
                self.halt(&pool, &reason, now).await?;
            }
        }
        Ok(())
    }

    /// Records whether the pool runs one release on all its nodes (the soak ledger downstream
    /// pools read); a write only when a period starts or ends. Best effort: a lost write is
    /// recorded next pass (a soak period then starts a pass late, never early).
    async fn record_ledger(&self, ctx: &PoolCtx<'_>, now: DateTime<Utc>) {
        let Some(record) = &ctx.record else { return };
        let current = fully_on_release(&ctx.snapshot, record);
        let current = as_fully_on(&current);
        if crate::promotion::ledger::observe(&record.ledger, current, now).is_none() {
            return;
        }
        let pool = ctx.policy.pool_id();
        let result = self
            .cell
            .announce
            .update_pool(&pool, now, |r| {
                match crate::promotion::ledger::observe(&r.ledger, current, now) {
                    Some(ledger) => state::PoolRecord {
                        ledger,
                        ..r.clone()
                    },
                    None => r.clone(),
                }
            })
            .await;
        match result {
            Ok(_) => {
                tracing::info!(pool = %pool, fully_on = current.map(|c| c.release.to_string()).as_deref(), decision = "soak ledger")
            }
            Err(e) => {
                tracing::warn!(pool = %pool, error = %e, "cannot record the soak ledger; next pass")
            }
        }
    }

    /// Records whether repair's circuit breaker holds the pool (`repairSuspended` on its
    /// record: set once when it opens, announced as *Repair Suspended*; cleared when it
    /// closes), and the metric. A write only when that changes; best effort (a lost write is
    /// made next pass).
    async fn record_repair_breaker(
        &self,
        ctx: &PoolCtx<'_>,
        repair: &plan::RepairPlan,
        now: DateTime<Utc>,
        report: &mut PoolReport,
    ) {
        report.metrics.repair_suspended = repair.suspended.is_some();
        let Some(record) = &ctx.record else { return };
        if record.repair_suspended.is_some() == repair.suspended.is_some() {
            return;
        }
        let pool = ctx.policy.pool_id();
        let suspended = repair.suspended.as_ref().map(|why| state::RecordedError {
            message: why.clone(),
            at: now,
        });
        let result = self
            .cell
            .announce
            .update_pool(&pool, now, |r| state::PoolRecord {
                repair_suspended: match (&r.repair_suspended, &suspended) {
                    (Some(kept), Some(_)) => Some(kept.clone()),
                    (_, s) => s.clone(),
                },
                ..r.clone()
            })
            .await;
        match (result, &repair.suspended) {
            (Ok(_), Some(why)) => {
                tracing::error!(pool = %pool, decision = "repair suspended", reason = %why)
            }
            (Ok(_), None) => {
                tracing::info!(pool = %pool, decision = "repair resumed", reason = "the pool's unhealthy share is back under repair.maxUnhealthy")
            }
            (Err(e), _) => {
                tracing::warn!(pool = %pool, error = %e, "cannot record repair's circuit breaker; next pass")
            }
        }
    }

    /// A self-managed group's plan and its execution.
    async fn group_pass(
        &self,
        ctx: &mut PoolCtx<'_>,
        deadline: Instant,
        report: &mut PoolReport,
    ) -> Result<(), PortError> {
        let now = ctx.clock.start();
        self.clean_up_retained(&ctx.snapshot, report, now).await;
        let plan = plan::plan(&ctx.snapshot, now);
        log_decisions(&plan);
        self.record_repair_breaker(ctx, &plan.repair, now, report)
            .await;
        report.allowed = Some(plan.allowed);
        report.blocked = plan.blocked.clone();
        report.replacement = plan
            .replacement
            .terminate_first()
            .then(|| plan.replacement.clone());
        for action in &plan.actions {
            if let Action::UpdateLaunchTemplate { image } = action {
                if let Some(why) = self
                    .image_misfit(ctx.policy, ctx.record.as_ref(), image)
                    .await
                {
                    // Nothing launches the image: no template write, no surge this pass.
                    tracing::error!(pool = %plan.pool, image = %image, decision = "blocked", reason = %why);
                    report.blocked = Some(why);
                    return Ok(());
                }
                let group = &ctx.snapshot.group.name;
                match self.ports.groups.set_image(group, image).await {
                    Ok(version) => {
                        tracing::info!(pool = %plan.pool, group = %group, image = %image, version = %version, decision = "launch template updated", "new instances launch the desired AMI");
                        report.launch_template = Some(image.clone());
                    }
                    Err(e) => {
                        // A replacement must never come up on the old AMI: nothing else this pass.
                        return Err(PortError::new(
                            e.operation.clone(),
                            e.kind,
                            format!(
                                "cannot point {group} at {image}: {}; nothing else done this pass",
                                e.message
                            ),
                        ));
                    }
                }
            }
        }
        self.execute(&plan, ctx, deadline, report).await
    }
}

impl RotatorHandler {
    /// Why `image` may not be written for the pool's node group, if it may not: its
    /// architecture does not run on the group's instance types. The architecture is the
    /// record's for an image it knows (desired, previous, history), else the pool's (the
    /// policy's `architecture`, else the desired AMI's: what `pin` checked a pinned image
    /// against); with none known, the image is not written. Instance types that cannot be read
    /// stop the write too (fail closed).
    pub(super) async fn image_misfit(
        &self,
        policy: &Policy,
        record: Option<&state::PoolRecord>,
        image: &str,
    ) -> Option<String> {
        let known = record.and_then(|r| {
            r.desired
                .iter()
                .chain(r.previous_desired.iter())
                .chain(r.history.iter().map(|h| &h.ami))
                .find(|a| a.id == image)
                .map(|a| a.architecture)
        });
        let pool_arch = || {
            policy.architecture.or_else(|| {
                record
                    .and_then(|r| r.desired.as_ref())
                    .map(|a| a.architecture)
            })
        };
        let Some(arch) = known.or_else(pool_arch) else {
            return Some(format!(
                "{image} is not written into the node group: its architecture is unknown (not resolved for the pool, no architecture in the policy)"
            ));
        };
        let facts = match self
            .ports
            .node_groups
            .instance_types(&policy.cluster, &policy.node_group)
            .await
        {
            Ok(f) => f,
            Err(e) => {
                return Some(format!(
                    "cannot read the node group's instance types to check {image} ({arch}) against them: {e}; nothing launched this pass"
                ));
            }
        };
        let problems = crate::ami::instance_types::check(
            arch,
            policy.architecture.is_some(),
            &policy.node_group,
            &facts,
        );
        let errors: Vec<String> = problems.errors().map(ToString::to_string).collect();
        (!errors.is_empty()).then(|| {
            format!(
                "{image} is not written into the node group: {}; the pool is invalid until fixed",
                errors.join("; ")
            )
        })
    }

    /// The rotator over `ports`.
    pub fn new(ports: &crate::ports::Ports, settings: Settings) -> Self {
        use super::PlacePorts;
        RotatorHandler {
            cell: super::CellPorts::new(ports),
            ports: RotatorPorts::of(ports),
            settings,
            metrics: ports.metrics.clone(),
        }
    }
}

/// What every pool of one cluster's pass shares.
#[derive(Clone)]
struct PoolsPass {
    kube: Arc<dyn NodeOps>,
    view: Arc<ClusterView>,
    clock: Clock,
    deadline: Instant,
    quarantined: Arc<crate::promotion::Quarantined>,
    permits: Arc<Semaphore>,
}

/// The valid policies the pass selects, by lease scope (the cluster, with its account and
/// region when named), and every scope a valid policy names (selected or not: the quarantine
/// sweep needs them). The first document of a pool wins (the ami-watcher reports the second);
/// an invalid one is skipped (the ami-watcher reports why).
fn by_scope(
    docs: Vec<crate::policy::source::PolicyDocument>,
    selection: &Selection,
) -> (BTreeMap<String, Vec<Policy>>, BTreeSet<String>) {
    let mut by_cluster: BTreeMap<String, Vec<Policy>> = BTreeMap::new();
    let mut configured = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for doc in docs {
        match policy::parse_document(&doc).policy {
            Some(p) if !seen.insert(p.pool_id()) => {
                tracing::warn!(source = %doc.source, pool = %p.pool_id(), decision = "skipped", "pool defined twice; the ami-watcher reports why")
            }
            Some(p) if selection.includes_at(&p.cluster, &p.pool_id(), p.place.as_ref()) => {
                let scope = crate::policy::place::scope_of(&p.pool_id()).to_string();
                configured.insert(scope.clone());
                by_cluster.entry(scope).or_default().push(p)
            }
            Some(p) => {
                configured.insert(crate::policy::place::scope_of(&p.pool_id()).to_string());
            }
            None => {
                tracing::warn!(source = %doc.source, decision = "skipped", "invalid policy; the ami-watcher reports why")
            }
        }
    }
    (by_cluster, configured)
}

/// The clusters' statuses and pools' reports of the members whose ports cannot be had: each
/// pool says why (the others go on).
#[allow(clippy::type_complexity)]
fn unserved_reports(
    unserved: Vec<(String, Vec<Policy>, crate::members::MemberError)>,
) -> (BTreeMap<String, String>, BTreeMap<String, Vec<PoolReport>>) {
    let mut clusters = BTreeMap::new();
    let mut by_name = BTreeMap::new();
    for (cluster, policies, e) in unserved {
        tracing::error!(cluster = %cluster, error = %e, decision = "blocked", "member not served");
        clusters.insert(cluster.clone(), format!("failed: {e}"));
        let reports = policies
            .iter()
            .map(|p| PoolReport {
                pool: p.pool_id(),
                blocked: Some(e.to_string()),
                errors: vec![e.to_string()],
                ..PoolReport::default()
            })
            .collect();
        by_name.insert(cluster, reports);
    }
    (clusters, by_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promotion::{Cause, Quarantine, Quarantined, Release, Target};

    fn entry(cause: Cause, waiting: bool) -> Quarantine {
        let q = Quarantine {
            target: Target::Release(Release("v1".into())),
            reason: "bad".into(),
            by: "nodecycle".into(),
            at: chrono::DateTime::UNIX_EPOCH,
            cause,
            outbox: Vec::new(),
        };
        let event = crate::announce::stage::quarantined(&q);
        Quarantine {
            outbox: if waiting { vec![event] } else { Vec::new() },
            ..q
        }
    }

    #[test]
    fn each_waiting_quarantine_event_is_swept_by_exactly_one_cluster() {
        let pool = |p: &str| Cause::ReplacementNotReady {
            pool: p.into(),
            instance: "i-1".into(),
        };
        let operator = Cause::Operator {
            request_id: "r".into(),
        };
        let q = Quarantined(vec![
            entry(pool("prod/general"), true),
            entry(pool("gone/general"), true),
            entry(operator, true),
            entry(pool("test/general"), false),
        ]);
        let configured: BTreeSet<String> = ["prod".to_string(), "test".to_string()].into();
        let (prod, test) = ("prod".to_string(), "test".to_string());
        let count = |sweeps: &BTreeMap<String, Quarantined>, c: &str| {
            sweeps.get(c).map_or(0, |q| q.0.len())
        };
        // One pass over both: its own cluster for a pool's; the first configured cluster for
        // the operator's and for a cluster no policy names; nothing for an entry with nothing
        // waiting.
        let both = quarantine_sweeps(&q, &configured, &[&prod, &test].into());
        assert_eq!((count(&both, "prod"), count(&both, "test")), (3, 0));
        // Fan-out: one pass per cluster. Each entry is swept by exactly one of them, the same
        // one as above.
        let only_prod = quarantine_sweeps(&q, &configured, &[&prod].into());
        let only_test = quarantine_sweeps(&q, &configured, &[&test].into());
        assert_eq!(count(&only_prod, "prod"), 3);
        assert_eq!(count(&only_test, "test"), 0);
    }
}
