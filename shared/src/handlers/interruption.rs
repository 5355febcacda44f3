//! The interruption handler: EC2 Spot / Capacity Reservation interruption warnings, rebalance
//! recommendations, instance state changes, AWS Health scheduled changes and Auto Scaling
//! instance-terminate lifecycle actions, delivered by EventBridge (at least once).
//!
//! Every event is classified (pure, [`crate::event::interruption`]), deduplicated by event id
//! (conditional write with a TTL), mapped to a pool by the instance's tags and group (instances
//! of other clusters or unmanaged groups are ignored quietly), deduplicated again by
//! (instance, kind) so that a redelivery or a warning followed by its state change never drains
//! twice, acted on, and recorded under the pool's partition (`EVT#<time>#<instance>`, kept 7
//! days) for `status`.
//!
//! | event | action |
//! |---|---|
//! | Spot / Capacity Reservation interruption warning | cordon + taint, evict everything at once (PDBs honoured until 90 s after the event, then delete), keep stepping until the instance is due to die |
//! | rebalance recommendation | per `interruption.rebalance`: record (ignore), cordon, or a forced `Interrupted` rotation (replace) |
//! | state change stopping / stopped | the same drain as a warning |
//! | state change shutting-down / terminated | delete the Node object, close the instance's rotation (Done) |
//! | Health scheduled change (EC2) | a `Maintenance` rotation with the event's start as deadline (the rotator replaces it within budgets, forced 30 minutes before) |
//! | ASG instance-terminate lifecycle action | drain (heartbeats while draining), then CompleteLifecycleAction CONTINUE; at once when there is no node or it was drained already; a drain longer than the invocation is handed to the rotator and finished by the schedule tick |

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::HandlerError;
use crate::kube::{EksConnector, KubeConnector};
use crate::event::interruption::{
    ClassifiedEvent, InstanceState, Interruption, LifecycleAction, interruption_event,
};
use crate::interruption::{
    InstanceInfo, InstanceLookup, LifecycleOps, NotOurs, pool_of, pool_of_group,
};
use crate::kube::{self as k, DrainError, DrainState, NodeEvent, NodeOps};
use crate::policy::source::PolicySource;
use crate::policy::{self, Policy, RebalanceAction};
use crate::port::{ErrorKind, PortError};
use crate::rotation::{Release, Rotation, RotationReason, Step, rotation_sk};
use crate::state::{self, Store, Versioned};

/// Tunables (environment variables in the Lambda).
#[derive(Debug, Clone)]
pub struct Settings {
    /// After this long from the warning's event time, pods still blocked by a PDB are deleted so
    /// they reschedule before the instance dies (`NODECYCLE_FORCE_AFTER`, default 90s).
    pub force_after: Duration,
    /// How long after a warning the instance is expected to be gone: the handler stops stepping
    /// the drain then (default 2m).
    pub notice: Duration,
    /// Pause between drain steps while waiting for pods (default 2s).
    pub poll: Duration,
    /// Time one drain step may take (default 10s).
    pub drain_step: Duration,
    /// Lifecycle heartbeat interval while draining (`NODECYCLE_HEARTBEAT`, default 60s).
    pub heartbeat_every: Duration,
    /// Stop stepping when less than this is left of the invocation (default 10s).
    pub reserve: Duration,
    /// Records (events, claims) are kept this long (default 7 days).
    pub retention: chrono::Duration,
    /// A claim still `started` after this long belongs to a crashed invocation (default 10m).
    pub stale_claim: chrono::Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            force_after: Duration::from_secs(90),
            notice: Duration::from_secs(120),
            poll: Duration::from_secs(2),
            drain_step: Duration::from_secs(10),
            heartbeat_every: Duration::from_secs(60),
            reserve: Duration::from_secs(10),
            retention: chrono::Duration::days(7),
            stale_claim: chrono::Duration::minutes(10),
        }
    }
}

impl Settings {
    /// Reads the overrides from the environment; a malformed value is an error naming it.
    pub fn from_env() -> Result<Self, HandlerError> {
        let mut s = Settings::default();
        for (var, field) in [
            ("NODECYCLE_FORCE_AFTER", &mut s.force_after),
            ("NODECYCLE_HEARTBEAT", &mut s.heartbeat_every),
            ("NODECYCLE_DRAIN_POLL", &mut s.poll),
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
pub struct InterruptionHandler {
    /// Policy documents.
    pub policies: Arc<dyn PolicySource>,
    /// EC2 instances.
    pub instances: Arc<dyn InstanceLookup>,
    /// Auto Scaling lifecycle actions.
    pub lifecycle: Arc<dyn LifecycleOps>,
    /// The state table.
    pub store: Arc<dyn Store>,
    /// Kubernetes access per cluster.
    pub kube: Arc<dyn KubeConnector>,
    /// Tunables.
    pub settings: Settings,
}

/// What was done about one instance.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The instance.
    pub instance: String,
    /// `<cluster>/<name>`, `None` when the instance is not ours.
    pub pool: Option<String>,
    /// `drained`, `draining`, `cordoned`, `rotationRecorded`, `nodeDeleted`, `completed`,
    /// `recorded`, `skipped`, `ignored`, ...
    pub action: String,
    /// Why.
    pub reason: String,
    /// Counters and ids (evicted/deleted pods, node, rotation step).
    #[serde(skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

impl Outcome {
    fn new(instance: &str, pool: Option<&str>, action: &str, reason: impl Into<String>) -> Self {
        Outcome {
            instance: instance.to_string(),
            pool: pool.map(str::to_string),
            action: action.to_string(),
            reason: reason.into(),
            details: Value::Null,
        }
    }

    fn with(mut self, details: Value) -> Self {
        self.details = details;
        self
    }
}

/// Wall clock for one invocation: the injected `now` plus the time elapsed since.
#[derive(Debug, Clone, Copy)]
struct Clock {
    wall: DateTime<Utc>,
    started: Instant,
}

impl Clock {
    fn new(now: DateTime<Utc>) -> Self {
        Clock {
            wall: now,
            started: Instant::now(),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        self.wall + chrono::Duration::from_std(self.started.elapsed()).unwrap_or_default()
    }
}

/// Result of a conditional claim.
enum Claim {
    /// Ours, at this version.
    Ours(u64),
    /// Someone else's (or already done): its document.
    Taken(Value),
}

fn internal(e: impl std::fmt::Display) -> HandlerError {
    HandlerError::internal(e.to_string())
}

fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// Sort key of the claim of `kind` work on `instance` (pool partition).
fn claim_sk(instance: &str, kind: &str) -> String {
    format!("CLAIM#{instance}#{kind}")
}

/// Sort key of an open lifecycle action handed to the rotator (pool partition).
fn lifecycle_sk(instance: &str) -> String {
    format!("LCA#{instance}")
}

/// Sort key of an event record (pool partition).
pub fn event_sk(time: DateTime<Utc>, instance: &str) -> String {
    format!(
        "EVT#{}#{instance}",
        time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
}

fn log_outcome(c: &ClassifiedEvent, o: &Outcome) {
    if o.action == "ignored" {
        // Not ours: already one debug line where it was decided.
        return;
    }
    tracing::info!(
        event_id = c.id.as_deref().unwrap_or(""),
        kind = c.event.kind(),
        instance = %o.instance,
        pool = o.pool.as_deref().unwrap_or(""),
        decision = %o.action,
        reason = %o.reason,
        "interruption decision"
    );
}

impl InterruptionHandler {
    /// Handles one payload at `now`; stops stepping drains when `deadline` is near.
    pub async fn handle(
        &self,
        payload: &Value,
        now: DateTime<Utc>,
        deadline: Instant,
    ) -> Result<Value, HandlerError> {
        let c = interruption_event(payload)?;
        let clock = Clock::new(now);
        let kind = c.event.kind();
        match &c.event {
            Interruption::Ignored { what } => {
                tracing::info!(event_id = c.id.as_deref().unwrap_or(""), kind, decision = "ignored", reason = %what, "not an interruption event; nothing to do");
                return Ok(
                    json!({"event": c.id, "kind": kind, "decision": "ignored", "reason": what}),
                );
            }
            Interruption::StateChange { state, instance_id }
                if !state.is_gone() && !state.is_stopping() =>
            {
                tracing::info!(event_id = c.id.as_deref().unwrap_or(""), kind, instance = %instance_id, decision = "ignored", reason = ?state, "state needs no action");
                return Ok(
                    json!({"event": c.id, "kind": kind, "decision": "ignored", "reason": format!("state {state:?} needs no action")}),
                );
            }
            Interruption::Tick => return self.tick(&clock).await,
            _ => {}
        }

        // Deduplicate by event id, concurrently with loading what locating the instance needs.
        let event_key = c.id.as_ref().map(|id| format!("EVENT#{id}"));
        let claim = async {
            match &event_key {
                Some(pk) => self.claim(pk, "EVENT", kind, clock.now()).await.map(Some),
                None => Ok(None),
            }
        };
        let first_instance = match &c.event {
            Interruption::InterruptionWarning { instance_id, .. }
            | Interruption::Rebalance { instance_id }
            | Interruption::StateChange { instance_id, .. } => Some(instance_id.clone()),
            _ => None,
        };
        let lookup = async {
            match &first_instance {
                Some(id) => self.instances.instance(id).await.map(Some),
                None => Ok(None),
            }
        };
        let (claim, policies, info) = tokio::join!(claim, self.load_policies(), lookup);
        let version = match claim.map_err(internal)? {
            Some(Claim::Taken(doc)) => {
                tracing::info!(event_id = c.id.as_deref().unwrap_or(""), kind, decision = "duplicate", status = %doc["status"], "event already handled or being handled");
                return Ok(json!({"event": c.id, "kind": kind, "decision": "duplicate"}));
            }
            Some(Claim::Ours(v)) => Some(v),
            None => None,
        };
        let result = match (policies, info) {
            (Err(e), _) | (_, Err(e)) => Err(internal(e)),
            (Ok(policies), Ok(info)) => self.dispatch(&c, &policies, info, &clock, deadline).await,
        };
        if let (Some(pk), Some(v)) = (&event_key, version) {
            let status = if result.is_ok() { "done" } else { "failed" };
            self.settle(pk, "EVENT", v, status, kind, Value::Null, clock.now())
                .await;
        }
        let outcomes = result?;
        for o in &outcomes {
            log_outcome(&c, o);
            if let Some(pool) = &o.pool {
                self.record(&c, pool, o, &clock).await;
            }
        }
        Ok(json!({"event": c.id, "kind": kind, "outcomes": outcomes}))
    }

    async fn load_policies(&self) -> Result<Vec<Policy>, PortError> {
        let docs = self.policies.all().await?;
        let mut out = Vec::new();
        for doc in docs {
            match policy::parse(&doc.text).policy {
                Some(p) => out.push(p),
                None => {
                    tracing::warn!(source = %doc.source, decision = "skipped", "invalid policy; the ami-watcher reports why")
                }
            }
        }
        Ok(out)
    }

    async fn dispatch(
        &self,
        c: &ClassifiedEvent,
        policies: &[Policy],
        info: Option<Option<InstanceInfo>>,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Vec<Outcome>, HandlerError> {
        match &c.event {
            Interruption::InterruptionWarning { instance_id, .. }
            | Interruption::Rebalance { instance_id }
            | Interruption::StateChange { instance_id, .. } => {
                let info = info.flatten();
                let policy = match self.ours(instance_id, info.as_ref(), policies) {
                    Ok(p) => p,
                    Err(o) => return Ok(vec![*o]),
                };
                let o = match &c.event {
                    Interruption::Rebalance { .. } => {
                        self.rebalance(policy, instance_id, clock).await?
                    }
                    Interruption::StateChange { state, .. } if state.is_gone() => {
                        self.gone(policy, instance_id, state, clock).await?
                    }
                    _ => {
                        self.drain_now(c, policy, instance_id, clock, deadline)
                            .await?
                    }
                };
                Ok(vec![o])
            }
            Interruption::Maintenance {
                instance_ids,
                deadline: start,
                event_type_code,
            } => {
                let mut out = Vec::new();
                for id in instance_ids {
                    let info = self.instances.instance(id).await.map_err(internal)?;
                    match self.ours(id, info.as_ref(), policies) {
                        Ok(p) => out.push(
                            self.maintenance(p, id, *start, event_type_code, clock)
                                .await?,
                        ),
                        Err(o) => out.push(*o),
                    }
                }
                Ok(out)
            }
            Interruption::LifecycleTerminate(a) => {
                let Some(policy) = pool_of_group(&a.group, policies) else {
                    let why = format!(
                        "{} is in group {}, which no pool policy manages",
                        a.instance_id, a.group
                    );
                    tracing::debug!(instance = %a.instance_id, decision = "ignored", reason = %why);
                    return Ok(vec![Outcome::new(&a.instance_id, None, "ignored", why)]);
                };
                Ok(vec![
                    self.lifecycle_action(policy, a, clock, deadline).await?,
                ])
            }
            Interruption::Tick | Interruption::Ignored { .. } => Ok(Vec::new()),
        }
    }

    /// The pool of the instance, or an `ignored` outcome (one debug line, never an error).
    fn ours<'a>(
        &self,
        instance_id: &str,
        info: Option<&InstanceInfo>,
        policies: &'a [Policy],
    ) -> Result<&'a Policy, Box<Outcome>> {
        let why = match info {
            None => format!("{instance_id} is not known to EC2 in this account and region"),
            Some(info) => match pool_of(info, policies) {
                Ok(p) => return Ok(p),
                Err(NotOurs(why)) => why,
            },
        };
        tracing::debug!(instance = instance_id, decision = "ignored", reason = %why, "not ours");
        Err(Box::new(Outcome::new(instance_id, None, "ignored", why)))
    }

    /// Claims `pk`/`sk` for this invocation: a new item, or one left `failed` or stale by an
    /// earlier invocation.
    /// [`Self::claim`] for one instance: the version when ours, else the `skipped` outcome saying
    /// `handled` (another delivery holds or finished it).
    #[allow(clippy::too_many_arguments)]
    async fn claim_or_skip(
        &self,
        pk: &str,
        sk: &str,
        what: &str,
        instance_id: &str,
        pool: &str,
        handled: &str,
        now: DateTime<Utc>,
    ) -> Result<Result<u64, Outcome>, HandlerError> {
        Ok(
            match self.claim(pk, sk, what, now).await.map_err(internal)? {
                Claim::Ours(v) => Ok(v),
                Claim::Taken(_) => Err(Outcome::new(instance_id, Some(pool), "skipped", handled)),
            },
        )
    }

    async fn claim(
        &self,
        pk: &str,
        sk: &str,
        what: &str,
        now: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let doc = json!({"status": "started", "at": now, "what": what});
        let ttl = Some(now + self.settings.retention);
        match self.store.put(pk, sk, &doc, None, ttl).await {
            Ok(v) => return Ok(Claim::Ours(v)),
            Err(e) if e.kind == ErrorKind::Conflict => {}
            Err(e) => return Err(e),
        }
        let Some(current) = self.store.get(pk, sk).await? else {
            // Expired between the two calls: try once more.
            return match self.store.put(pk, sk, &doc, None, ttl).await {
                Ok(v) => Ok(Claim::Ours(v)),
                Err(e) if e.kind == ErrorKind::Conflict => Ok(Claim::Taken(Value::Null)),
                Err(e) => Err(e),
            };
        };
        let status = current.value["status"].as_str().unwrap_or("");
        let at = current.value["at"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc));
        let stale = status == "failed"
            || (status == "started" && at.is_none_or(|t| now - t > self.settings.stale_claim));
        if !stale {
            return Ok(Claim::Taken(current.value));
        }
        match self
            .store
            .put(pk, sk, &doc, Some(current.version), ttl)
            .await
        {
            Ok(v) => Ok(Claim::Ours(v)),
            Err(e) if e.kind == ErrorKind::Conflict => Ok(Claim::Taken(current.value)),
            Err(e) => Err(e),
        }
    }

    /// Marks a claim `done` or `failed` (best effort: a lost write only means a retry re-checks).
    #[allow(clippy::too_many_arguments)]
    async fn settle(
        &self,
        pk: &str,
        sk: &str,
        version: u64,
        status: &str,
        what: &str,
        details: Value,
        now: DateTime<Utc>,
    ) {
        let doc = json!({"status": status, "at": now, "what": what, "details": details});
        if let Err(e) = self
            .store
            .put(
                pk,
                sk,
                &doc,
                Some(version),
                Some(now + self.settings.retention),
            )
            .await
        {
            tracing::warn!(pk, sk, error = %e, "could not settle claim");
        }
    }

    /// Writes the event record `EVT#<time>#<instance>` (best effort).
    async fn record(&self, c: &ClassifiedEvent, pool: &str, o: &Outcome, clock: &Clock) {
        let now = clock.now();
        let time = c.time.unwrap_or(now);
        let doc = json!({
            "eventId": c.id,
            "kind": c.event.kind(),
            "instance": o.instance,
            "pool": pool,
            "action": o.action,
            "reason": o.reason,
            "details": o.details,
            "eventTime": time,
            "handledAt": now,
        });
        let pk = state::pool_pk(pool);
        let ttl = Some(now + self.settings.retention);
        let sk = event_sk(time, &o.instance);
        let result = match self.store.put(&pk, &sk, &doc, None, ttl).await {
            Err(e) if e.kind == ErrorKind::Conflict => {
                // Another event for the instance in the same second.
                let tail = c.id.as_deref().unwrap_or(c.event.kind());
                self.store
                    .put(&pk, &format!("{sk}#{tail}"), &doc, None, ttl)
                    .await
            }
            other => other,
        };
        if let Err(e) = result
            && e.kind != ErrorKind::Conflict
        {
            tracing::warn!(pool, instance = %o.instance, error = %e, "could not write the event record");
        }
    }

    async fn connect(&self, policy: &Policy) -> Result<Arc<dyn NodeOps>, HandlerError> {
        self.kube.connect(&policy.cluster).await.map_err(|e| {
            internal(format!(
                "cluster {} unreachable: {e}; the event is retried",
                policy.cluster
            ))
        })
    }

    /// Spot / Capacity Reservation warning, or the instance stopping: cordon, taint and evict
    /// at once, delete what PDBs still hold `force_after` the event, step until the instance is
    /// due to die or the pods are gone.
    async fn drain_now(
        &self,
        c: &ClassifiedEvent,
        policy: &Policy,
        instance_id: &str,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let pk = state::pool_pk(&pool);
        let sk = claim_sk(instance_id, "drain");
        let kind = c.event.kind();
        let (claim, kube) = tokio::join!(
            self.claim(&pk, &sk, kind, clock.now()),
            self.connect(policy)
        );
        let version = match claim.map_err(internal)? {
            Claim::Ours(v) => v,
            Claim::Taken(doc) => {
                return Ok(Outcome::new(
                    instance_id,
                    Some(&pool),
                    "skipped",
                    format!(
                        "already drained or draining ({} at {})",
                        doc["what"].as_str().unwrap_or("another event"),
                        doc["at"].as_str().unwrap_or("?")
                    ),
                ));
            }
        };
        let kube = match kube {
            Ok(k) => k,
            Err(e) => {
                self.settle(&pk, &sk, version, "failed", kind, Value::Null, clock.now())
                    .await;
                return Err(e);
            }
        };
        let result = self
            .drain_until_gone(c, kube.as_ref(), &pool, instance_id, clock, deadline)
            .await;
        let (status, details) = match &result {
            Ok(o) => ("done", o.details.clone()),
            Err(_) => ("failed", Value::Null),
        };
        self.settle(&pk, &sk, version, status, kind, details, clock.now())
            .await;
        result
    }

    async fn drain_until_gone(
        &self,
        c: &ClassifiedEvent,
        kube: &dyn NodeOps,
        pool: &str,
        instance_id: &str,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        let reason = match &c.event {
            Interruption::InterruptionWarning { market: "spot", .. } => "SpotInterruption",
            Interruption::InterruptionWarning { .. } => "CapacityReservationInterruption",
            _ => "InstanceStopping",
        };
        let event_time = c.time.unwrap_or(clock.now()).min(clock.now());
        let force_at = event_time + chrono_of(self.settings.force_after);
        let gone_at = event_time + chrono_of(self.settings.notice);
        let mut state = match k::start_drain(kube, instance_id, reason, None, clock.now()).await {
            Ok(s) => s,
            Err(DrainError::NodeNotFound(_)) => {
                return Ok(Outcome::new(
                    instance_id,
                    Some(pool),
                    "skipped",
                    "no Kubernetes node has this instance (not registered, or already removed)",
                ));
            }
            Err(e) => return Err(internal(e)),
        };
        state.deadline = Some(force_at);
        tracing::info!(pool, instance = instance_id, node = %state.node, decision = "cordoned", reason, force_at = %force_at, "cordoned and tainted; evicting every pod now");
        let remaining = loop {
            let progress = k::drain_step(kube, &mut state, clock.now(), self.settings.drain_step)
                .await
                .map_err(internal)?;
            let out_of_time =
                Instant::now() + self.settings.poll + self.settings.reserve >= deadline;
            if progress.done || clock.now() >= gone_at || out_of_time {
                break progress.pods_remaining;
            }
            tokio::time::sleep(self.settings.poll).await;
        };
        let details = json!({
            "node": state.node,
            "evicted": state.evicted.len(),
            "deleted": state.deleted.len(),
            "steps": state.steps,
            "forceAt": force_at,
            "remaining": remaining,
        });
        Ok(if state.done {
            Outcome::new(
                instance_id,
                Some(pool),
                "drained",
                format!("{reason}: cordoned, tainted and drained without waiting for budgets"),
            )
        } else {
            Outcome::new(
                instance_id,
                Some(pool),
                "draining",
                format!(
                    "{reason}: cordoned and tainted; pods still leaving when the instance is due to stop; its node is removed when it shuts down"
                ),
            )
        }
        .with(details))
    }

    /// Rebalance recommendation, per the pool's `interruption.rebalance`.
    async fn rebalance(
        &self,
        policy: &Policy,
        instance_id: &str,
        clock: &Clock,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let pk = state::pool_pk(&pool);
        let sk = claim_sk(instance_id, "rebalance");
        let version = match self
            .claim_or_skip(
                &pk,
                &sk,
                "RebalanceRecommendation",
                instance_id,
                &pool,
                "rebalance recommendation for this instance already handled",
                clock.now(),
            )
            .await?
        {
            Ok(v) => v,
            Err(skipped) => return Ok(skipped),
        };
        let result = match policy.rebalance {
            RebalanceAction::Ignore => Ok(Outcome::new(
                instance_id,
                Some(&pool),
                "recorded",
                "interruption.rebalance is ignore: recorded only",
            )),
            RebalanceAction::Cordon => self.cordon_only(policy, instance_id).await,
            RebalanceAction::Replace => {
                let rotation = Rotation::new(
                    &pool,
                    instance_id,
                    RotationReason::Interrupted,
                    true,
                    clock.now(),
                );
                self.start_rotation(rotation, "interruption.rebalance is replace")
                    .await
            }
        };
        let status = if result.is_ok() { "done" } else { "failed" };
        self.settle(
            &pk,
            &sk,
            version,
            status,
            "RebalanceRecommendation",
            Value::Null,
            clock.now(),
        )
        .await;
        result
    }

    async fn cordon_only(
        &self,
        policy: &Policy,
        instance_id: &str,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let kube = self.connect(policy).await?;
        let Some(node) = kube.find_node(instance_id).await.map_err(internal)? else {
            return Ok(Outcome::new(
                instance_id,
                Some(&pool),
                "skipped",
                "interruption.rebalance is cordon, but no Kubernetes node has this instance",
            ));
        };
        let changed = kube
            .cordon(&node.name, "RebalanceRecommendation")
            .await
            .map_err(internal)?;
        if changed {
            let event = NodeEvent::normal(
                "Cordoned",
                format!(
                    "nodecycle cordoned the node and added taint {}=RebalanceRecommendation:NoSchedule: \
                     EC2 recommends rebalancing this instance (interruption.rebalance: cordon)",
                    k::DISRUPTED_TAINT_KEY
                ),
            );
            if let Err(e) = kube.record_event(&node, &event).await {
                tracing::warn!(node = %node.name, error = %e, "could not record the Event");
            }
        }
        Ok(Outcome::new(
            instance_id,
            Some(&pool),
            "cordoned",
            "interruption.rebalance is cordon: no new pods land on it; the rotator counts it as disrupting",
        )
        .with(json!({"node": node.name, "changed": changed})))
    }

    /// Records a `Pending` rotation unless one is in flight (a finished one is replaced).
    async fn start_rotation(&self, rotation: Rotation, why: &str) -> Result<Outcome, HandlerError> {
        let pk = state::pool_pk(&rotation.pool);
        let sk = rotation_sk(&rotation.instance_id);
        let doc = serde_json::to_value(&rotation).map_err(internal)?;
        let outcome = |action: &str, reason: String| {
            Outcome::new(&rotation.instance_id, Some(&rotation.pool), action, reason).with(json!({
                "reason": rotation.reason,
                "forced": rotation.forced,
                "deadline": rotation.deadline,
            }))
        };
        for _ in 0..state::WRITE_ATTEMPTS {
            let expected = match self.store.get(&pk, &sk).await.map_err(internal)? {
                None => None,
                Some(v) => match serde_json::from_value::<Rotation>(v.value) {
                    Ok(r) if r.in_flight() => {
                        return Ok(outcome(
                            "skipped",
                            format!(
                                "a {:?} rotation of this instance is already in flight (step {:?})",
                                r.reason, r.step
                            ),
                        ));
                    }
                    _ => Some(v.version),
                },
            };
            match self.store.put(&pk, &sk, &doc, expected, None).await {
                Ok(_) => {
                    return Ok(outcome(
                        "rotationRecorded",
                        format!(
                            "{why}: {:?} rotation recorded{}; the rotator replaces the node",
                            rotation.reason,
                            if rotation.forced {
                                ", forced (surge first, no budget wait)"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
                Err(e) if e.kind == ErrorKind::Conflict => continue,
                Err(e) => return Err(internal(e)),
            }
        }
        Err(internal("rotation record: too many conflicting writers"))
    }

    /// Health scheduled change: a `Maintenance` rotation with the change's start as deadline.
    async fn maintenance(
        &self,
        policy: &Policy,
        instance_id: &str,
        start: DateTime<Utc>,
        code: &str,
        clock: &Clock,
    ) -> Result<Outcome, HandlerError> {
        let rotation = Rotation {
            deadline: Some(start),
            ..Rotation::new(
                &policy.pool_id(),
                instance_id,
                RotationReason::Maintenance,
                false,
                clock.now(),
            )
        };
        self.start_rotation(
            rotation,
            &format!(
                "{code} starts {}",
                start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        )
        .await
    }

    /// Shutting down / terminated: delete the Node object and close the instance's rotation.
    async fn gone(
        &self,
        policy: &Policy,
        instance_id: &str,
        state_name: &InstanceState,
        clock: &Clock,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let pk = state::pool_pk(&pool);
        let sk = claim_sk(instance_id, "gone");
        let version = match self
            .claim_or_skip(
                &pk,
                &sk,
                "StateChange",
                instance_id,
                &pool,
                "instance already handled as gone",
                clock.now(),
            )
            .await?
        {
            Ok(v) => v,
            Err(skipped) => return Ok(skipped),
        };
        let result = async {
            let kube = self.connect(policy).await?;
            let node = kube.find_node(instance_id).await.map_err(internal)?;
            let deleted = match &node {
                Some(n) => {
                    k::delete_node(kube.as_ref(), &n.name, &format!("instance {state_name:?}"))
                        .await
                        .map_err(internal)?
                }
                None => false,
            };
            let closed = self.close_rotation(&pool, instance_id, clock).await?;
            Ok::<_, HandlerError>((node.map(|n| n.name), deleted, closed))
        }
        .await;
        let status = if result.is_ok() { "done" } else { "failed" };
        self.settle(
            &pk,
            &sk,
            version,
            status,
            "StateChange",
            Value::Null,
            clock.now(),
        )
        .await;
        let (node, deleted, closed) = result?;
        let action = if deleted { "nodeDeleted" } else { "recorded" };
        let mut reason = match &node {
            Some(n) if deleted => format!("instance {state_name:?}: Node {n} deleted"),
            _ => format!("instance {state_name:?}: its Node object is already gone"),
        };
        if let Some(step) = closed {
            reason.push_str(&format!("; its rotation (was {step:?}) closed as Done"));
        }
        Ok(Outcome::new(instance_id, Some(&pool), action, reason)
            .with(json!({"node": node, "rotationClosed": closed.is_some()})))
    }

    /// Marks the instance's in-flight rotation Done; returns the step it was in.
    async fn close_rotation(
        &self,
        pool: &str,
        instance_id: &str,
        clock: &Clock,
    ) -> Result<Option<Step>, HandlerError> {
        let pk = state::pool_pk(pool);
        let sk = rotation_sk(instance_id);
        for _ in 0..state::WRITE_ATTEMPTS {
            let Some(Versioned { value, version }) =
                self.store.get(&pk, &sk).await.map_err(internal)?
            else {
                return Ok(None);
            };
            let Ok(r) = serde_json::from_value::<Rotation>(value) else {
                return Ok(None);
            };
            if !r.in_flight() {
                return Ok(None);
            }
            let now = clock.now();
            // Its surge's unit is owed: the rotator gives it back (it chooses how).
            let done = if r.surge_active() {
                r.enter(Step::Done, now).with_release(Release::Owed)
            } else {
                r.enter(Step::Done, now)
            };
            let doc = serde_json::to_value(&done).map_err(internal)?;
            match self
                .store
                .put(
                    &pk,
                    &sk,
                    &doc,
                    Some(version),
                    Some(now + self.settings.retention),
                )
                .await
            {
                Ok(_) => return Ok(Some(r.step)),
                Err(e) if e.kind == ErrorKind::Conflict => continue,
                Err(e) => return Err(internal(e)),
            }
        }
        Err(internal("rotation record: too many conflicting writers"))
    }

    /// Why the instance needs no drain before its lifecycle action completes, if it does not.
    async fn already_drained(
        &self,
        pool: &str,
        instance_id: &str,
    ) -> Result<Option<String>, HandlerError> {
        let pk = state::pool_pk(pool);
        if let Some(v) = self
            .store
            .get(&pk, &claim_sk(instance_id, "drain"))
            .await
            .map_err(internal)?
            && v.value["status"] == "done"
        {
            return Ok(Some(format!(
                "already drained ({})",
                v.value["what"].as_str().unwrap_or("interruption")
            )));
        }
        if let Some(v) = self
            .store
            .get(&pk, &rotation_sk(instance_id))
            .await
            .map_err(internal)?
            && let Ok(r) = serde_json::from_value::<Rotation>(v.value)
        {
            let drained = r
                .drain
                .as_ref()
                .and_then(|d| serde_json::from_value::<DrainState>(d.clone()).ok())
                .is_some_and(|d| d.done);
            // Drained = its drain finished (or it is terminating, which only follows a finished
            // drain or a node that was not there). A rotation closed as Done because its
            // instance left before any drain did not drain it.
            if r.step == Step::Terminating || drained {
                return Ok(Some(format!(
                    "already drained by its {:?} rotation (step {:?})",
                    r.reason, r.step
                )));
            }
        }
        Ok(None)
    }

    /// Auto Scaling instance-terminate lifecycle action.
    async fn lifecycle_action(
        &self,
        policy: &Policy,
        a: &LifecycleAction,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let pk = state::pool_pk(&pool);
        let sk = claim_sk(&a.instance_id, "lifecycle");
        let id = a.instance_id.as_str();
        let version = match self
            .claim_or_skip(
                &pk,
                &sk,
                "TerminateLifecycleAction",
                id,
                &pool,
                "this lifecycle action is already being handled",
                clock.now(),
            )
            .await?
        {
            Ok(v) => v,
            Err(skipped) => return Ok(skipped),
        };
        let result = self.lifecycle_drain(policy, a, clock, deadline).await;
        let status = if result.is_ok() { "done" } else { "failed" };
        let details = result
            .as_ref()
            .map(|o| o.details.clone())
            .unwrap_or_default();
        self.settle(
            &pk,
            &sk,
            version,
            status,
            "TerminateLifecycleAction",
            details,
            clock.now(),
        )
        .await;
        result
    }

    async fn complete(&self, a: &LifecycleAction) -> Result<bool, HandlerError> {
        self.lifecycle
            .complete_continue(&a.group, &a.hook, a.token.as_deref(), &a.instance_id)
            .await
            .map_err(internal)
    }

    async fn lifecycle_drain(
        &self,
        policy: &Policy,
        a: &LifecycleAction,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let id = a.instance_id.as_str();
        let completed = |reason: String, active: bool, details: Value| {
            let reason = if active {
                format!("{reason}; CompleteLifecycleAction CONTINUE")
            } else {
                format!("{reason}; the lifecycle action was no longer active")
            };
            Outcome::new(id, Some(&pool), "completed", reason).with(details)
        };
        if let Some(why) = self.already_drained(&pool, id).await? {
            let active = self.complete(a).await?;
            return Ok(completed(why, active, Value::Null));
        }
        let kube = self.connect(policy).await?;
        let mut state = match k::start_drain(
            kube.as_ref(),
            id,
            "Terminating",
            policy.termination_grace_period,
            clock.now(),
        )
        .await
        {
            Ok(s) => s,
            Err(DrainError::NodeNotFound(_)) => {
                let active = self.complete(a).await?;
                return Ok(completed(
                    "no Kubernetes node has this instance".into(),
                    active,
                    Value::Null,
                ));
            }
            Err(e) => return Err(internal(e)),
        };
        let mut last_beat = Instant::now();
        let mut heartbeats = 0u32;
        loop {
            let p = k::drain_step(
                kube.as_ref(),
                &mut state,
                clock.now(),
                self.settings.drain_step,
            )
            .await
            .map_err(internal)?;
            let details = json!({
                "node": state.node,
                "evicted": state.evicted.len(),
                "deleted": state.deleted.len(),
                "steps": state.steps,
                "heartbeats": heartbeats,
            });
            if p.done || p.deadline_passed {
                let why = if p.done {
                    "drained: every pod is gone".to_string()
                } else {
                    "terminationGracePeriod passed: remaining pods deleted".to_string()
                };
                let active = self.complete(a).await?;
                return Ok(completed(why, active, details));
            }
            if Instant::now() + self.settings.poll + self.settings.reserve >= deadline {
                return self.hand_over(policy, a, state, clock, details).await;
            }
            if last_beat.elapsed() >= self.settings.heartbeat_every {
                let active = self
                    .lifecycle
                    .heartbeat(&a.group, &a.hook, a.token.as_deref(), id)
                    .await
                    .map_err(internal)?;
                heartbeats += 1;
                last_beat = Instant::now();
                tracing::info!(pool = %pool, instance = id, remaining = p.pods_remaining, active, decision = "heartbeat", "draining; lifecycle action heartbeat sent");
                if !active {
                    return Ok(Outcome::new(
                        id,
                        Some(&pool),
                        "abandoned",
                        "the lifecycle action timed out or was completed elsewhere while draining",
                    )
                    .with(details));
                }
            }
            tokio::time::sleep(self.settings.poll).await;
        }
    }

    /// Records `ours` (a `Draining` rotation carrying this drain) for its instance, conditionally:
    /// a rotation already draining or terminating the instance keeps it (it finishes the drain);
    /// any other record (finished, or in flight before its drain: `Pending`, `Surging`,
    /// `Cordoned`) is replaced, keeping its surge and replacement so their capacity is
    /// accounted for. Never swallowed by a stale record.
    async fn take_over(&self, pk: &str, ours: Rotation) -> Result<(), HandlerError> {
        let sk = rotation_sk(&ours.instance_id);
        for _ in 0..state::WRITE_ATTEMPTS {
            let current = self.store.get(pk, &sk).await.map_err(internal)?;
            let (expected, next) = match &current {
                None => (None, ours.clone()),
                Some(v) => match serde_json::from_value::<Rotation>(v.value.clone()) {
                    Ok(r)
                        if r.in_flight()
                            && matches!(r.step, Step::Draining | Step::Terminating) =>
                    {
                        tracing::info!(instance = %r.instance_id, step = ?r.step, decision = "kept", "a rotation already drains this instance; it completes the drain");
                        return Ok(());
                    }
                    Ok(r) if r.in_flight() => (
                        Some(v.version),
                        Rotation {
                            surge: r.surge.clone(),
                            replacement: r.replacement.clone(),
                            ..ours.clone()
                        },
                    ),
                    _ => (Some(v.version), ours.clone()),
                },
            };
            let doc = serde_json::to_value(&next).map_err(internal)?;
            match self.store.put(pk, &sk, &doc, expected, None).await {
                Ok(_) => return Ok(()),
                Err(e) if e.kind == ErrorKind::Conflict => continue,
                Err(e) => return Err(internal(e)),
            }
        }
        Err(internal("rotation record: too many conflicting writers"))
    }

    /// The invocation is nearly over and the drain is not: record a forced `Interrupted`
    /// rotation in `Draining` with the drain state (the rotator continues it) and an open
    /// lifecycle record that the schedule tick completes once the rotation is past draining.
    async fn hand_over(
        &self,
        policy: &Policy,
        a: &LifecycleAction,
        drain: DrainState,
        clock: &Clock,
        details: Value,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let now = clock.now();
        let rotation = Rotation {
            step: Step::Draining,
            drain: Some(serde_json::to_value(&drain).map_err(internal)?),
            ..Rotation::new(
                &pool,
                &a.instance_id,
                RotationReason::Interrupted,
                true,
                now,
            )
        };
        let pk = state::pool_pk(&pool);
        self.take_over(&pk, rotation).await?;
        let open = json!({"status": "open", "action": a, "since": now});
        match self
            .store
            .put(
                &pk,
                &lifecycle_sk(&a.instance_id),
                &open,
                None,
                Some(now + self.settings.retention),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind == ErrorKind::Conflict => {}
            Err(e) => return Err(internal(e)),
        }
        self.lifecycle
            .heartbeat(&a.group, &a.hook, a.token.as_deref(), &a.instance_id)
            .await
            .map_err(internal)?;
        Ok(Outcome::new(
            &a.instance_id,
            Some(&pool),
            "handedOver",
            "drain longer than this invocation: the rotator continues it; the schedule tick completes the lifecycle action once it is drained",
        )
        .with(details))
    }

    /// Schedule tick: heartbeat or complete the lifecycle actions handed to the rotator.
    async fn tick(&self, clock: &Clock) -> Result<Value, HandlerError> {
        let policies = self.load_policies().await.map_err(internal)?;
        let mut outcomes = Vec::new();
        for policy in &policies {
            let pool = policy.pool_id();
            let pk = state::pool_pk(&pool);
            let open = self.store.query(&pk, "LCA#").await.map_err(internal)?;
            for (sk, v) in open {
                if v.value["status"] != "open" {
                    continue;
                }
                let Ok(a) = serde_json::from_value::<LifecycleAction>(v.value["action"].clone())
                else {
                    continue;
                };
                let (o, finished) = match self.already_drained(&pool, &a.instance_id).await? {
                    Some(why) => {
                        let active = self.complete(&a).await?;
                        (
                            Outcome::new(
                                &a.instance_id,
                                Some(&pool),
                                "completed",
                                format!(
                                    "{why}; CompleteLifecycleAction CONTINUE (active: {active})"
                                ),
                            ),
                            true,
                        )
                    }
                    None => {
                        let active = self
                            .lifecycle
                            .heartbeat(&a.group, &a.hook, a.token.as_deref(), &a.instance_id)
                            .await
                            .map_err(internal)?;
                        (
                            Outcome::new(
                                &a.instance_id,
                                Some(&pool),
                                "heartbeat",
                                "the rotator is still draining",
                            ),
                            !active,
                        )
                    }
                };
                if finished {
                    let doc = json!({"status": "done", "action": a, "at": clock.now()});
                    let _ = self
                        .store
                        .put(
                            &pk,
                            &sk,
                            &doc,
                            Some(v.version),
                            Some(clock.now() + self.settings.retention),
                        )
                        .await;
                }
                tracing::info!(pool = %pool, instance = %o.instance, decision = %o.action, reason = %o.reason, "lifecycle action continued");
                outcomes.push(o);
            }
        }
        Ok(json!({"kind": "Tick", "outcomes": outcomes}))
    }
}

/// Builds the handler from the environment (`NODECYCLE_TABLE`, `NODECYCLE_POLICY_PREFIX`, tunables).
pub fn from_env(config: &aws_config::SdkConfig) -> Result<InterruptionHandler, HandlerError> {
    use crate::aws::{
        dynamodb::Table,
        interruption::{Ec2Instances, LifecycleActions},
        ssm::{Ssm, SsmPolicies},
    };
    let (table, prefix) = super::table_and_prefix_from_env()?;
    Ok(InterruptionHandler {
        policies: Arc::new(SsmPolicies::new(
            Ssm::new(aws_sdk_ssm::Client::new(config)),
            &prefix,
        )),
        instances: Arc::new(Ec2Instances::new(aws_sdk_ec2::Client::new(config))),
        lifecycle: Arc::new(LifecycleActions::new(aws_sdk_autoscaling::Client::new(
            config,
        ))),
        store: Arc::new(Table::new(aws_sdk_dynamodb::Client::new(config), table)),
        kube: Arc::new(EksConnector::new(config.clone())),
        settings: Settings::from_env()?,
    })
}
