//! The rotator: per cluster it takes a lease, builds each pool's snapshot (Auto Scaling group,
//! EC2, Kubernetes nodes, pool state, rotation records), asks the pure planner what to do, and
//! advances every in-flight rotation by one step:
//! `Pending -> Surging -> Cordoned -> Draining -> Terminating -> Done`, or `Failed` (halts the
//! pool). Every write is conditional on the record's version, so a crash at any point or two
//! rotators at once never repeat or lose a step.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::HandlerError;
use crate::ami::resolve::ParameterStore;
use crate::event::{Input, parse_input};
use crate::fleet::{Gates, GroupOps, Lifecycle, NodeStatus, Snapshot};
use crate::kube::{self as k, DrainState, NodeOps};
use crate::managed::{ManagedGroup, ManagedGroupOps};
use crate::plan::{self, Action};
use crate::policy::source::PolicySource;
use crate::policy::{self, NodeGroup, Policy};
use crate::port::{ErrorKind, PortError};
use crate::rotation::{Rotation, Step, Surge, rotation_sk};
use crate::state::{self, RecordedError, Store, Versioned};

mod managed;

/// Finished rotation records are kept this long (for `status`), then expire.
const DONE_RETENTION_DAYS: i64 = 7;

/// Connects to a cluster's Kubernetes API.
#[async_trait]
pub trait KubeConnector: Send + Sync {
    /// A client for `cluster` (may be cached across invocations).
    async fn connect(&self, cluster: &str) -> Result<Arc<dyn NodeOps>, String>;
}

/// [`KubeConnector`] over EKS (DescribeCluster + token), caching one client per cluster.
pub struct EksConnector {
    sdk: aws_config::SdkConfig,
    cache: Mutex<HashMap<String, Arc<dyn NodeOps>>>,
}

impl EksConnector {
    /// A connector using `sdk` for DescribeCluster and token signing.
    pub fn new(sdk: aws_config::SdkConfig) -> Self {
        Self {
            sdk,
            cache: Mutex::new(HashMap::new()),
        }
    }
}

#[async_trait]
impl KubeConnector for EksConnector {
    async fn connect(&self, cluster: &str) -> Result<Arc<dyn NodeOps>, String> {
        if let Some(c) = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(cluster)
        {
            return Ok(c.clone());
        }
        let kube = k::EksKube::connect(&self.sdk, cluster)
            .await
            .map_err(|e| e.to_string())?;
        let kube: Arc<dyn NodeOps> = Arc::new(kube);
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(cluster.to_string(), kube.clone());
        Ok(kube)
    }
}

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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            replacement_timeout: Duration::from_secs(15 * 60),
            drain_step: Duration::from_secs(20),
            lease: Duration::from_secs(5 * 60),
            reserve: Duration::from_secs(20),
            node_group_wave: Duration::from_secs(10 * 60),
        }
    }
}

impl Settings {
    /// Reads the overrides from the environment; a malformed value is an error naming it.
    pub fn from_env() -> Result<Self, HandlerError> {
        let mut s = Settings::default();
        for (var, field) in [
            ("NODECYCLE_REPLACEMENT_TIMEOUT", &mut s.replacement_timeout),
            ("NODECYCLE_DRAIN_STEP", &mut s.drain_step),
            ("NODECYCLE_LEASE", &mut s.lease),
            ("NODECYCLE_NODEGROUP_WAVE", &mut s.node_group_wave),
        ] {
            if let Ok(text) = std::env::var(var) {
                *field = crate::duration::parse(&text).map_err(|e| HandlerError {
                    error_type: "Configuration".into(),
                    message: format!("{var}: {e}"),
                })?;
            }
        }
        Ok(s)
    }
}

/// The handler and its ports.
#[derive(Clone)]
pub struct RotatorHandler {
    /// Policy documents.
    pub policies: Arc<dyn PolicySource>,
    /// Auto Scaling groups (self-managed pools, and the groups behind managed node groups).
    pub groups: Arc<dyn GroupOps>,
    /// EKS managed node groups.
    pub managed: Arc<dyn ManagedGroupOps>,
    /// SSM parameters (release versions of EKS-published AMIs).
    pub parameters: Arc<dyn ParameterStore>,
    /// The state table.
    pub store: Arc<dyn Store>,
    /// Kubernetes access per cluster.
    pub kube: Arc<dyn KubeConnector>,
    /// Tunables.
    pub settings: Settings,
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
    /// Launch template moved to this image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launch_template: Option<String>,
    /// Errors (the pass continues with other pools).
    pub errors: Vec<String>,
}

/// A pool's plan as [`RotatorHandler::preview`] gives it. Serializes as the plan's JSON; a
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
        plan: Box<plan::managed::ManagedPlan>,
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

/// Everything one pool's pass needs.
struct PoolCtx<'a> {
    policy: &'a Policy,
    group_name: String,
    kube: Arc<dyn NodeOps>,
    snapshot: Snapshot,
    desired_capacity: i32,
    now: DateTime<Utc>,
    /// Replacement instances already taken by a rotation.
    claimed: std::collections::HashSet<String>,
    /// Rotations whose surge is in effect (desired capacity includes them).
    active_surges: i32,
    /// Desired capacity without surges, once any surge is active.
    base: Option<i32>,
}

impl<'a> PoolCtx<'a> {
    fn new(
        policy: &'a Policy,
        kube: Arc<dyn NodeOps>,
        snapshot: Snapshot,
        now: DateTime<Utc>,
    ) -> Self {
        PoolCtx {
            policy,
            group_name: snapshot.group.name.clone(),
            desired_capacity: snapshot.group.desired_capacity,
            kube,
            claimed: snapshot
                .rotations
                .iter()
                .filter(|r| r.in_flight())
                .filter_map(|r| r.replacement.clone())
                .collect(),
            snapshot,
            now,
            active_surges: 0,
            base: None,
        }
    }
}

fn log_decisions(plan: &plan::Plan) {
    for d in &plan.decisions {
        tracing::info!(pool = %plan.pool, instance = ?d.instance_id, decision = %d.message);
    }
}

fn internal(e: impl std::fmt::Display) -> HandlerError {
    HandlerError::internal(e.to_string())
}

impl RotatorHandler {
    /// One pass at `now`; stops starting steps when `deadline` is near.
    pub async fn handle(
        &self,
        payload: &Value,
        now: DateTime<Utc>,
        deadline: Instant,
    ) -> Result<Value, HandlerError> {
        let only: Option<Vec<String>> = match parse_input(payload)? {
            Input::Envelope(e) if e.detail_type == "Scheduled Event" => None,
            Input::Envelope(e) => {
                tracing::info!(event = %e.detail_type, decision = "ignored", "not a schedule; nothing to do");
                return Ok(json!({"trigger": "ignored", "pools": []}));
            }
            Input::Custom(v) => match crate::event::watcher_trigger(&v)? {
                crate::event::WatcherTrigger::Pass { only } => only,
                _ => None,
            },
        };
        let docs = self
            .policies
            .all()
            .await
            .map_err(|e| internal(format!("cannot list policies: {e}")))?;
        let mut by_cluster: BTreeMap<String, Vec<Policy>> = BTreeMap::new();
        for doc in docs {
            match policy::parse(&doc.text).policy {
                Some(p) if only.as_ref().is_none_or(|o| o.contains(&p.pool_id())) => {
                    by_cluster.entry(p.cluster.clone()).or_default().push(p)
                }
                Some(_) => {}
                None => {
                    tracing::warn!(source = %doc.source, decision = "skipped", "invalid policy; the ami-watcher reports why")
                }
            }
        }
        let holder = format!(
            "rotator-{}-{}",
            std::process::id(),
            now.timestamp_nanos_opt().unwrap_or_default()
        );
        let mut reports = Vec::new();
        let mut clusters = BTreeMap::new();
        for (cluster, policies) in by_cluster {
            let ttl = chrono::Duration::from_std(self.settings.lease)
                .unwrap_or(chrono::Duration::minutes(5));
            if let Err(lease) = state::acquire_lease(
                self.store.as_ref(),
                &format!("cluster/{cluster}"),
                &holder,
                now,
                ttl,
            )
            .await
            .map_err(internal)?
            {
                let why = format!(
                    "lease held by {} until {}",
                    lease.holder,
                    lease.expires.to_rfc3339()
                );
                tracing::info!(cluster = %cluster, decision = "skipped", reason = %why, "another rotator is working on this cluster");
                clusters.insert(cluster, why);
                continue;
            }
            let kube = self.kube.connect(&cluster).await;
            for policy in &policies {
                let mut report = PoolReport {
                    pool: policy.pool_id(),
                    ..PoolReport::default()
                };
                match &kube {
                    Err(e) => {
                        report.blocked = Some(format!(
                            "cluster {cluster} unreachable: {e}; rotating nothing"
                        ));
                        tracing::error!(pool = %report.pool, decision = "blocked", reason = ?report.blocked);
                    }
                    Ok(kube) => {
                        if let Err(e) = self
                            .pool_pass(policy, kube.clone(), now, deadline, &mut report)
                            .await
                        {
                            tracing::error!(pool = %report.pool, error = %e, "pool pass failed");
                            report.errors.push(e);
                        }
                    }
                }
                reports.push(report);
            }
            let _ = state::release_lease(
                self.store.as_ref(),
                &format!("cluster/{cluster}"),
                &holder,
                now,
            )
            .await;
            clusters.insert(cluster, "done".into());
        }
        Ok(json!({"trigger": "schedule", "clusters": clusters, "pools": reports}))
    }

    /// What a pass would decide for one pool now, without acting or recording anything
    /// (`nodecycle plan`, `status`): the snapshot and its plan.
    pub async fn preview(
        &self,
        policy: &Policy,
        kube: &dyn NodeOps,
        now: DateTime<Utc>,
    ) -> Result<(Snapshot, Preview), String> {
        let (mut snapshot, managed) = self.snapshot(policy, kube, now).await?;
        let preview = match &managed {
            None => Preview::Group(plan::plan(&snapshot, now)),
            Some(group) => {
                let (plan, update) = self
                    .plan_managed_pool(group, &mut snapshot, now, false)
                    .await?;
                Preview::Managed {
                    plan: Box::new(plan),
                    record: update.map(|v| v.value),
                }
            }
        };
        Ok((snapshot, preview))
    }

    /// Builds the snapshot of one pool, and for a managed node group the node group as
    /// `DescribeNodegroup` reported it.
    pub async fn snapshot(
        &self,
        policy: &Policy,
        kube: &dyn NodeOps,
        now: DateTime<Utc>,
    ) -> Result<(Snapshot, Option<ManagedGroup>), String> {
        let (group_name, managed) = match &policy.node_group {
            NodeGroup::AutoScalingGroup(g) => (g.clone(), None),
            NodeGroup::ManagedNodeGroup(name) => {
                let (asg, group) = self.managed_group(&policy.cluster, name).await?;
                (asg, Some(group))
            }
        };
        let pool = policy.pool_id();
        let record = state::load_pool(self.store.as_ref(), &pool)
            .await
            .map_err(|e| e.to_string())?;
        let (group, instances) = self
            .groups
            .describe(&group_name)
            .await
            .map_err(|e| e.to_string())?;
        let nodes = kube
            .list_nodes()
            .await
            .map_err(|e| format!("cannot list nodes: {e}"))?;
        let by_instance: HashMap<String, &k::NodeInfo> = nodes
            .iter()
            .filter_map(|n| {
                k::client::instance_of_provider_id(&n.provider_id).map(|i| (i.to_string(), n))
            })
            .collect();
        let mut members: Vec<crate::fleet::Member> = instances
            .into_iter()
            .map(|i| {
                let node = by_instance.get(&i.instance_id).map(|n| NodeStatus {
                    name: n.name.clone(),
                    ready: n.ready,
                    unschedulable: n.unschedulable,
                    disrupted: n.disrupted_taint.clone(),
                    evictable_pods: 0,
                });
                i.with_node(node)
            })
            .collect();
        let desired = record
            .as_ref()
            .and_then(|r| r.desired.as_ref())
            .map(|a| a.id.clone());
        // Evictable pod counts order the candidates (empty nodes first); only candidates need them.
        for m in members.iter_mut() {
            let need = plan::assess(
                m,
                desired.as_deref(),
                policy.expire_after,
                policy.termination_grace_period,
                now,
            )
            .need();
            let Some(node) = m.node.as_mut() else {
                continue;
            };
            if need.is_none() {
                continue;
            }
            let pods = kube
                .list_pods(&node.name)
                .await
                .map_err(|e| format!("cannot list pods of {}: {e}", node.name))?;
            node.evictable_pods = u32::try_from(
                pods.iter()
                    .filter(|p| matches!(k::classify(p, now), k::PodClass::Evict { .. }))
                    .count(),
            )
            .unwrap_or(u32::MAX);
        }
        let rotations = self
            .rotations(&pool)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|r| r.value)
            .collect();
        let gates = Gates {
            // An operator's pin wins over what the terms resolve to.
            desired_ami: record
                .as_ref()
                .and_then(|r| r.effective_desired())
                .map(str::to_string),
            paused: record
                .as_ref()
                .and_then(|r| r.paused.as_ref())
                .map(|p| {
                    format!(
                        "by {} at {}: {}",
                        p.by.as_deref().unwrap_or("an operator"),
                        p.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        p.reason
                    )
                })
                .or_else(|| policy.paused.then(|| "policy has paused: true".to_string())),
            halted: record
                .as_ref()
                .and_then(|r| r.halted.as_ref())
                .map(|h| h.message.clone()),
        };
        let snapshot = Snapshot {
            policy: policy.clone(),
            gates,
            group,
            members,
            rotations,
        };
        Ok((snapshot, managed))
    }

    async fn rotations(&self, pool: &str) -> Result<Vec<Versioned<Rotation>>, PortError> {
        let items = self.store.query(&state::pool_pk(pool), "ROT#").await?;
        let mut out = Vec::new();
        for (sk, v) in items {
            match serde_json::from_value::<Rotation>(v.value) {
                Ok(r) => out.push(Versioned {
                    value: r,
                    version: v.version,
                }),
                Err(e) => {
                    tracing::error!(pool, sk = %sk, error = %e, "unreadable rotation record ignored")
                }
            }
        }
        Ok(out)
    }

    async fn pool_pass(
        &self,
        policy: &Policy,
        kube: Arc<dyn NodeOps>,
        now: DateTime<Utc>,
        deadline: Instant,
        report: &mut PoolReport,
    ) -> Result<(), String> {
        let (snapshot, managed) = self.snapshot(policy, kube.as_ref(), now).await?;
        if let Some(group) = &managed {
            return self
                .managed_pass(policy, group, kube, snapshot, now, deadline, report)
                .await;
        }
        let plan = plan::plan(&snapshot, now);
        log_decisions(&plan);
        report.allowed = Some(plan.allowed);
        report.blocked = plan.blocked.clone();
        let mut ctx = PoolCtx::new(policy, kube, snapshot, now);
        for action in &plan.actions {
            if let Action::UpdateLaunchTemplate { image } = action {
                match self.groups.set_image(&ctx.group_name, image).await {
                    Ok(version) => {
                        tracing::info!(pool = %plan.pool, group = %ctx.group_name, image = %image, version = %version, decision = "launch template updated", "new instances launch the desired AMI");
                        report.launch_template = Some(image.clone());
                    }
                    Err(e) => {
                        return Err(format!(
                            "cannot point {} at {image}: {e}; nothing else done this pass",
                            ctx.group_name
                        ));
                    }
                }
            }
        }
        self.execute(&plan, &mut ctx, deadline, report).await
    }

    /// Carries out a node-level plan's rotation actions (starts, releases, one step of every
    /// in-flight rotation); the launch template action is the caller's.
    async fn execute(
        &self,
        plan: &plan::Plan,
        ctx: &mut PoolCtx<'_>,
        deadline: Instant,
        report: &mut PoolReport,
    ) -> Result<(), String> {
        let now = ctx.now;
        let pk = state::pool_pk(&plan.pool);
        // A finished (Failed, cancelled) record of the same instance is replaced, conditionally.
        let finished: HashMap<String, u64> = if plan.rotations_to_start(now).is_empty() {
            HashMap::new()
        } else {
            self.rotations(&plan.pool)
                .await
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|v| !v.value.in_flight())
                .map(|v| (v.value.instance_id, v.version))
                .collect()
        };
        for rotation in plan.rotations_to_start(now) {
            let doc = serde_json::to_value(&rotation).map_err(|e| e.to_string())?;
            let expected = finished.get(&rotation.instance_id).copied();
            match self
                .store
                .put(
                    &pk,
                    &rotation_sk(&rotation.instance_id),
                    &doc,
                    expected,
                    None,
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(pool = %plan.pool, instance = %rotation.instance_id, reason = ?rotation.reason, forced = rotation.forced, decision = "rotation started");
                    report.started.push(rotation.instance_id.clone());
                }
                Err(e) if e.kind == ErrorKind::Conflict => {}
                Err(e) => report.errors.push(format!(
                    "cannot record rotation of {}: {e}",
                    rotation.instance_id
                )),
            }
        }
        // Queued operator rotations move only when this plan releases them.
        let released: std::collections::HashSet<&str> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Advance { instance_id, .. } => Some(instance_id.as_str()),
                _ => None,
            })
            .collect();
        let current = self
            .rotations(&plan.pool)
            .await
            .map_err(|e| e.to_string())?;
        self.reconcile_capacity(ctx, &current).await?;
        // Advance every in-flight rotation of this pool (including those just started).
        for versioned in current {
            // Maintenance rotations waiting for budget, too, move only when released.
            let waiting =
                versioned.value.waiting() || plan::maintenance::waits(&versioned.value, now);
            if !versioned.value.in_flight()
                || (waiting && !released.contains(versioned.value.instance_id.as_str()))
            {
                continue;
            }
            if deadline.saturating_duration_since(Instant::now()) < self.settings.reserve {
                report.errors.push(
                    "invocation time nearly used up; remaining steps continue next pass".into(),
                );
                break;
            }
            let from = versioned.value.step;
            let instance = versioned.value.instance_id.clone();
            match self.advance(ctx, versioned).await {
                Ok(Some(to)) if to != from => {
                    report.steps.push(format!("{instance}: {from:?} -> {to:?}"))
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(pool = %plan.pool, instance = %instance, step = ?from, error = %e, "step failed; retried next pass");
                    report.errors.push(format!("{instance} ({from:?}): {e}"));
                }
            }
        }
        Ok(())
    }

    /// Keeps desired capacity at `base + active surges`: repairs a surge that was recorded but
    /// whose capacity call failed or never ran (crash), without ever surging twice.
    async fn reconcile_capacity(
        &self,
        ctx: &mut PoolCtx<'_>,
        rotations: &[Versioned<Rotation>],
    ) -> Result<(), String> {
        let mut base = None;
        let mut active = 0;
        for r in rotations.iter().map(|v| &v.value).filter(|r| r.in_flight()) {
            let Some(surge) = &r.surge else { continue };
            let in_group = ctx
                .snapshot
                .members
                .iter()
                .any(|m| m.instance_id == r.instance_id && m.lifecycle != Lifecycle::Leaving);
            let counts = match r.step {
                Step::Surging | Step::Cordoned | Step::Draining => true,
                Step::Terminating => in_group,
                _ => false,
            };
            if counts {
                active += 1;
                base = base.or(surge.base);
            }
        }
        ctx.active_surges = active;
        ctx.base = base;
        if let Some(base) = base {
            let want = (base + active).min(ctx.snapshot.group.max_size);
            if ctx.desired_capacity < want {
                tracing::warn!(group = %ctx.group_name, desired = ctx.desired_capacity, want, active_surges = active, decision = "capacity repaired", "desired capacity below base + active surges (a surge call failed or was interrupted)");
                self.groups
                    .set_desired_capacity(&ctx.group_name, want)
                    .await
                    .map_err(|e| e.to_string())?;
                ctx.desired_capacity = want;
            }
        }
        Ok(())
    }

    /// Writes `next` over the record read at `version`. `Ok(false)` when another writer won.
    async fn save(&self, rotation: &Rotation, version: u64) -> Result<bool, String> {
        let doc = serde_json::to_value(rotation).map_err(|e| e.to_string())?;
        let ttl = rotation
            .step
            .is_finished()
            .then(|| rotation.step_at + chrono::Duration::days(DONE_RETENTION_DAYS));
        match self
            .store
            .put(
                &state::pool_pk(&rotation.pool),
                &rotation_sk(&rotation.instance_id),
                &doc,
                Some(version),
                ttl,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind == ErrorKind::Conflict => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    fn enter(rotation: &Rotation, step: Step, now: DateTime<Utc>) -> Rotation {
        Rotation {
            step,
            step_at: now,
            error: None,
            ..rotation.clone()
        }
    }

    /// Performs one step of a rotation; returns the step it is in afterwards (`None` if another
    /// writer got there first).
    async fn advance(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
    ) -> Result<Option<Step>, String> {
        let rot = v.value;
        let now = ctx.now;
        let member = ctx
            .snapshot
            .members
            .iter()
            .find(|m| m.instance_id == rot.instance_id)
            .cloned();
        let next = match rot.step {
            Step::Pending => {
                let gone = member
                    .as_ref()
                    .is_none_or(|m| m.lifecycle == Lifecycle::Leaving);
                if gone {
                    Self::enter(&rot, Step::Done, now)
                } else if ctx.base.unwrap_or(ctx.desired_capacity) + ctx.active_surges
                    < ctx.snapshot.group.max_size
                {
                    let base = ctx.base.unwrap_or(ctx.desired_capacity);
                    let target = base + ctx.active_surges + 1;
                    let baseline = ctx
                        .snapshot
                        .members
                        .iter()
                        .map(|m| m.instance_id.clone())
                        .collect();
                    let next = Rotation {
                        surge: Some(Surge {
                            target_desired: target,
                            baseline,
                            base: Some(base),
                        }),
                        ..Self::enter(&rot, Step::Surging, now)
                    };
                    // Record the intent first: if the call below fails or the process dies, the
                    // next pass raises capacity to base + active surges.
                    if !self.save(&next, v.version).await? {
                        return Ok(None);
                    }
                    ctx.base = Some(base);
                    ctx.active_surges += 1;
                    self.groups
                        .set_desired_capacity(&ctx.group_name, target)
                        .await
                        .map_err(|e| e.to_string())?;
                    ctx.desired_capacity = target;
                    tracing::info!(pool = %rot.pool, instance = %rot.instance_id, desired = target, decision = "surge", "desired capacity raised by one for the replacement");
                    return Ok(Some(Step::Surging));
                } else {
                    tracing::info!(pool = %rot.pool, instance = %rot.instance_id, decision = "no surge", "group at max size; replacing without surge");
                    Self::enter(&rot, Step::Cordoned, now)
                }
            }
            Step::Surging => {
                let surge = rot.surge.clone().ok_or("Surging without a surge record")?;
                let desired_ami = ctx.snapshot.gates.desired_ami.clone();
                let claimed = &ctx.claimed;
                let fresh: Vec<&crate::fleet::Member> = ctx
                    .snapshot
                    .members
                    .iter()
                    .filter(|m| {
                        !surge.baseline.contains(&m.instance_id)
                            && !claimed.contains(&m.instance_id)
                    })
                    .collect();
                let ready = fresh
                    .iter()
                    .find(|m| m.is_ready() && m.image_id == desired_ami);
                if let Some(r) = ready {
                    tracing::info!(pool = %rot.pool, instance = %rot.instance_id, replacement = %r.instance_id, decision = "replacement ready");
                    ctx.claimed.insert(r.instance_id.clone());
                    Rotation {
                        replacement: Some(r.instance_id.clone()),
                        ..Self::enter(&rot, Step::Cordoned, now)
                    }
                } else if (now - rot.step_at).to_std().unwrap_or_default()
                    >= self.settings.replacement_timeout
                {
                    // Undo the surge and halt: a new AMI whose nodes never join must not roll further.
                    let why = format!(
                        "replacement for {} not Ready within {} (new instances: {}); surge undone, pool halted",
                        rot.instance_id,
                        crate::duration::format(self.settings.replacement_timeout),
                        if fresh.is_empty() {
                            "none".to_string()
                        } else {
                            fresh
                                .iter()
                                .map(|m| m.instance_id.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    );
                    let failed = Rotation {
                        error: Some(why.clone()),
                        ..Self::enter(&rot, Step::Failed, now)
                    };
                    if !self.save(&failed, v.version).await? {
                        return Ok(None);
                    }
                    let first_fresh = fresh.first().map(|m| m.instance_id.clone());
                    ctx.active_surges -= 1;
                    match first_fresh {
                        Some(id) => {
                            self.groups
                                .terminate_instance(&id, true)
                                .await
                                .map_err(|e| e.to_string())?;
                            ctx.desired_capacity -= 1;
                        }
                        None => {
                            let back = (ctx.desired_capacity - 1).max(ctx.snapshot.group.min_size);
                            self.groups
                                .set_desired_capacity(&ctx.group_name, back)
                                .await
                                .map_err(|e| e.to_string())?;
                            ctx.desired_capacity = back;
                        }
                    }
                    let halt = RecordedError {
                        message: why.clone(),
                        at: now,
                    };
                    state::update_pool(self.store.as_ref(), &rot.pool, |r| state::PoolRecord {
                        halted: Some(halt.clone()),
                        ..r.clone()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                    tracing::error!(pool = %rot.pool, instance = %rot.instance_id, decision = "halted", reason = %why);
                    return Ok(Some(Step::Failed));
                } else {
                    return Ok(Some(Step::Surging));
                }
            }
            Step::Cordoned => {
                let reason = format!("{:?}", rot.reason);
                match k::start_drain(
                    ctx.kube.as_ref(),
                    &rot.instance_id,
                    &reason,
                    ctx.policy.termination_grace_period,
                    now,
                )
                .await
                {
                    Ok(state) => Rotation {
                        drain: Some(serde_json::to_value(&state).map_err(|e| e.to_string())?),
                        ..Self::enter(&rot, Step::Draining, now)
                    },
                    Err(k::DrainError::NodeNotFound(_)) => {
                        Self::enter(&rot, Step::Terminating, now)
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            Step::Draining => {
                let mut state: DrainState = serde_json::from_value(
                    rot.drain.clone().ok_or("Draining without drain state")?,
                )
                .map_err(|e| e.to_string())?;
                let result =
                    k::drain_step(ctx.kube.as_ref(), &mut state, now, self.settings.drain_step)
                        .await;
                let drain = Some(serde_json::to_value(&state).map_err(|e| e.to_string())?);
                match result {
                    Ok(p) if p.done => Rotation {
                        drain,
                        ..Self::enter(&rot, Step::Terminating, now)
                    },
                    Ok(p) => {
                        tracing::info!(pool = %rot.pool, instance = %rot.instance_id, remaining = p.pods_remaining, blocked_by = ?p.blocked_by, deadline = ?p.deadline, "draining");
                        Rotation {
                            drain,
                            ..rot.clone()
                        }
                    }
                    Err(e) => {
                        let kept = Rotation {
                            drain,
                            error: Some(e.to_string()),
                            ..rot.clone()
                        };
                        self.save(&kept, v.version).await?;
                        return Err(e.to_string());
                    }
                }
            }
            Step::Terminating => {
                let in_group = member
                    .as_ref()
                    .is_some_and(|m| m.lifecycle != Lifecycle::Leaving);
                if in_group {
                    self.groups
                        .terminate_instance(&rot.instance_id, rot.surge.is_some())
                        .await
                        .map_err(|e| e.to_string())?;
                    if rot.surge.is_some() {
                        ctx.desired_capacity -= 1;
                        ctx.active_surges -= 1;
                    }
                }
                if let Some(node) = member.as_ref().and_then(|m| m.node.as_ref()) {
                    let _ =
                        k::delete_node(ctx.kube.as_ref(), &node.name, &format!("{:?}", rot.reason))
                            .await;
                }
                tracing::info!(pool = %rot.pool, instance = %rot.instance_id, replacement = ?rot.replacement, decision = "terminated", "rotation done");
                Self::enter(&rot, Step::Done, now)
            }
            Step::Done | Step::Failed => return Ok(Some(rot.step)),
        };
        let step = next.step;
        if self.save(&next, v.version).await? {
            Ok(Some(step))
        } else {
            Ok(None)
        }
    }
}

/// Builds the rotator from the environment (`NODECYCLE_TABLE`, `NODECYCLE_POLICY_PREFIX`, tunables).
pub fn from_env(config: &aws_config::SdkConfig) -> Result<RotatorHandler, HandlerError> {
    use crate::aws::{
        Clients,
        autoscaling::AutoScaling,
        dynamodb::Table,
        managed::ManagedNodeGroups,
        ssm::{Ssm, SsmPolicies},
    };
    let (table, prefix) = super::table_and_prefix_from_env()?;
    let c = Clients::new(config);
    Ok(RotatorHandler {
        policies: Arc::new(SsmPolicies::new(Ssm::new(c.ssm.clone()), &prefix)),
        groups: Arc::new(AutoScaling::new(c.autoscaling.clone(), c.ec2.clone())),
        managed: Arc::new(ManagedNodeGroups::new(c.eks.clone(), c.ec2.clone())),
        parameters: Arc::new(Ssm::new(c.ssm.clone())),
        store: Arc::new(Table::new(c.dynamodb.clone(), table)),
        kube: Arc::new(EksConnector::new(config.clone())),
        settings: Settings::from_env()?,
    })
}
