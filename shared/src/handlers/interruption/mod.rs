//! The interruption handler: EC2 Spot / Capacity Reservation interruption warnings, rebalance
//! recommendations, instance state changes, AWS Health scheduled changes and Auto Scaling
//! instance-terminate lifecycle actions, delivered by EventBridge (at least once).
//!
//! Every event is classified (pure, [`crate::event::instance_events`]), deduplicated by event id
//! (conditional write with a TTL), mapped to a pool by the instance's tags and group (instances
//! of other clusters or unmanaged groups are ignored quietly), deduplicated again by
//! (instance, kind) so that a redelivery or a warning followed by its state change never drains
//! twice, acted on, and recorded under the pool's partition (`EVT#<time>#<instance>`, kept 7
//! days) for `status`.
//!
//! What is done is decided by the pure [`crate::interruption::action_for`] from the event, the
//! pool's policy and the claim; each action is a use case taking only the ports it uses: the
//! spot drain (`spot_drain::SpotDrain`, Kubernetes), cordon (`rebalance::cordon_only`,
//! Kubernetes), rotation records (`rotations::Rotations`, the table), the instance gone
//! (`rotations::gone`, Kubernetes and the table), the lifecycle hand-over
//! (`lifecycle::HandOver`, Auto Scaling, Kubernetes and the table); claims are
//! `claim::Claims` (the table).
//!
//! | event | action |
//! |---|---|
//! | Spot / Capacity Reservation interruption warning | cordon + taint, evict everything at once (PDBs honoured until 90 s after the event, then delete; throughout when the event's time is not believable and EC2 does not confirm the interruption), keep stepping until the instance is due to die |
//! | rebalance recommendation | per `interruption.rebalance`: record (ignore), cordon, or a forced `Interrupted` rotation (replace) |
//! | state change stopping / stopped | the same drain as a warning |
//! | state change shutting-down / terminated | delete the Node object, close the instance's rotation (Done) |
//! | Health scheduled change (EC2) | a `Maintenance` rotation with the event's start as deadline (the rotator replaces it within budgets, forced 30 minutes before) |
//! | ASG instance-terminate lifecycle action | drain (heartbeats while draining), then CompleteLifecycleAction CONTINUE once every pod is gone; at once when there is no node or it was drained already; a drain longer than the invocation is handed to the rotator and finished by the schedule tick: CONTINUE once drained, ABANDON once out of time ([`crate::retain`]: the group's retain policy keeps the instance with its pods) |

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Function, HandlerError, Invocation};
use crate::clock::Clock;
use crate::event::instance_events::{ClassifiedEvent, Interruption, interruption_event};
use crate::event::verify;
use crate::interruption::{
    Claim, ClaimStatus, InstanceInfo, NotOurs, action_for, claim_of, pool_of, pool_of_group,
};
use crate::kube::{KubeConnector, NodeOps};
use crate::policy::{self, PoolRef};
use crate::port::{ErrorKind, PortError};
use crate::state::{self, ClaimKey};

mod claim;
mod lifecycle;
mod rebalance;
mod rotations;
mod spot_drain;

use claim::Claims;
use lifecycle::HandOver;
use rotations::Rotations;
use spot_drain::SpotDrain;

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
    /// The lifecycle hook whose actions are answered (`NODECYCLE_LIFECYCLE_HOOK`, the stack's
    /// `LifecycleHookName`, default `nodecycle-drain`): another tool's hook is never completed.
    pub lifecycle_hook: String,
    /// The oldest an event can be when it is delivered (`NODECYCLE_MAX_EVENT_AGE`, default
    /// [`crate::interruption::deadline::MAX_EVENT_AGE`], 4m: the interruption rules retry for
    /// 120 s, the function's asynchronous queue keeps an event 120 s more). A warning whose time
    /// is older (or in the future) is drained with PDBs honoured throughout unless EC2 confirms
    /// the interruption ([`crate::interruption::deadline`]).
    pub max_event_age: Duration,
    /// How long after its start a handed-over terminate lifecycle action whose drain has not
    /// finished is abandoned (CompleteLifecycleAction ABANDON: retained with its pods where the
    /// group's policy retains), before Auto Scaling's global timeout would apply the hook's
    /// default result. Default [`crate::retain::hand_over_limit`] of the hook's heartbeat
    /// timeout (`NODECYCLE_HOOK_HEARTBEAT_TIMEOUT`, the stack's `InterruptionHeartbeatTimeout`,
    /// default 300 s: 7 h 30 min).
    pub hand_over_limit: Duration,
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
            lifecycle_hook: crate::interruption::DEFAULT_LIFECYCLE_HOOK.to_string(),
            max_event_age: crate::interruption::deadline::MAX_EVENT_AGE,
            hand_over_limit: crate::retain::hand_over_limit(Duration::from_secs(300)),
        }
    }
}

/// The handler and its ports.
#[derive(Clone)]
pub struct InterruptionHandler {
    /// Policies, the state table, the bus and the members (routed by the envelope's account
    /// and region).
    pub cell: super::CellPorts,
    /// The ports of the place whose events it serves.
    pub ports: InterruptionPorts,
    /// The accounts and regions whose events are acted on.
    pub deployment: Arc<dyn crate::event::served::Deployment>,
    /// Tunables.
    pub settings: Settings,
    /// Where `InterruptionsHandled` per pool goes (EMF on stdout in the Lambda).
    pub metrics: Arc<dyn crate::metrics::MetricSink>,
}

place_ports! {
    /// The interruption handler's ports of the place whose events it serves (the cell's, or a
    /// member's).
    ///
    /// * `instances`: EC2 instances.
    /// * `lifecycle`: Auto Scaling lifecycle actions.
    /// * `kube`: Kubernetes access per cluster.
    pub struct InterruptionPorts { instances, lifecycle, kube }
    for InterruptionHandler
}

/// What was done about one instance.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The instance.
    pub instance: String,
    /// `<cluster>/<name>`, `None` when the instance is not ours.
    pub pool: Option<String>,
    /// What was done.
    pub action: Handled,
    /// Why.
    pub reason: String,
    /// Counters and ids (evicted/deleted pods, node, rotation step).
    #[serde(skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

/// What the handler did about an instance (reported as `action`). Serializes camelCase
/// (`rotationRecorded`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Handled {
    /// Cordoned, tainted and drained.
    Drained,
    /// Cordoned and tainted; pods still leaving when the instance stops.
    Draining,
    /// Cordoned only (`interruption.rebalance: cordon`).
    Cordoned,
    /// A rotation recorded for the rotator.
    RotationRecorded,
    /// The Node object deleted (instance gone).
    NodeDeleted,
    /// The lifecycle action completed (CONTINUE).
    Completed,
    /// Recorded only.
    Recorded,
    /// Already handled (or being handled) by another delivery.
    Skipped,
    /// Not ours: another cluster, an unmanaged group, unknown to EC2.
    Ignored,
    /// The drain continues in the rotator; the tick completes the lifecycle action.
    HandedOver,
    /// A lifecycle action heartbeat while the rotator drains.
    Heartbeat,
    /// The lifecycle action timed out or was completed elsewhere while draining.
    Abandoned,
    /// The lifecycle action was out of time with its drain unfinished: completed ABANDON, so
    /// that a group whose instance lifecycle policy retains keeps the instance
    /// (`Terminating:Retained`) with its pods ([`crate::retain`]).
    Retain,
}

impl std::fmt::Display for Handled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match serde_json::to_value(self) {
            Ok(Value::String(s)) => f.write_str(&s),
            _ => write!(f, "{self:?}"),
        }
    }
}

impl Outcome {
    pub(super) fn new(
        instance: &str,
        pool: Option<&str>,
        action: Handled,
        reason: impl Into<String>,
    ) -> Self {
        Outcome {
            instance: instance.to_string(),
            pool: pool.map(str::to_string),
            action,
            reason: reason.into(),
            details: Value::Null,
        }
    }

    pub(super) fn with(mut self, details: Value) -> Self {
        self.details = details;
        self
    }
}

pub(super) fn internal(e: impl std::fmt::Display) -> HandlerError {
    HandlerError::internal(e.to_string())
}

/// The answer to an event refused before it acted (one log line with why; nothing changed).
fn refused(c: &ClassifiedEvent, why: String) -> Value {
    let kind = c.event.kind();
    tracing::warn!(event_id = c.id.as_deref().unwrap_or(""), kind, decision = "refused", reason = %why, "event refused; nothing changed");
    json!({"event": c.id, "kind": kind, "decision": "refused", "reason": why})
}

fn log_outcome(c: &ClassifiedEvent, o: &Outcome) {
    if o.action == Handled::Ignored {
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

#[async_trait::async_trait]
impl Function for InterruptionHandler {
    async fn invoke(&self, payload: &Value, inv: Invocation<'_>) -> Result<Value, HandlerError> {
        self.handle(payload, inv).await
    }
}

impl InterruptionHandler {
    /// Handles one payload at the invocation's `now`; stops stepping drains when its
    /// `deadline` is near.
    pub async fn handle(
        &self,
        payload: &Value,
        inv: Invocation<'_>,
    ) -> Result<Value, HandlerError> {
        let Invocation { now, deadline, .. } = inv;
        let c = interruption_event(payload)?;
        let clock = Clock::starting_at(now);
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
            Interruption::Tick => {
                let policies = self.load_policies().await.map_err(internal)?;
                return self.tick(&policies, &clock).await;
            }
            _ => {}
        }

        // Verified before anything is written: who the event is about, and what EC2 says of
        // the instance (a state change: its state; a lifecycle action: its group), whose hook
        // a lifecycle action is.
        let place = match self.verify(&c).await {
            Ok(place) => place,
            Err(why) => return Ok(refused(&c, why)),
        };
        // Routed by the envelope: every call about the event through its account's ports,
        // and only pools of that account and region can own its instance.
        let this = match self.at(place.as_ref()).await {
            Ok(this) => this,
            Err(e) => return Ok(refused(&c, e.to_string())),
        };
        this.handle_verified(&c, place, &clock, deadline).await
    }

    /// Schedule tick: the lifecycle actions handed to the rotator (read from the cell's
    /// table), heartbeaten or completed place by place, each through its place's ports
    /// ([`Self::at`]): a member's action is answered with the member's credentials, and only
    /// places with an open action are reached. A place whose ports cannot be had (a spoke role
    /// that cannot be assumed) is reported under `unserved` with its pools, and the other
    /// places go on; a call that fails fails the tick (the schedule repeats it) after every
    /// place was served.
    async fn tick(&self, policies: &[PoolRef], clock: &Clock) -> Result<Value, HandlerError> {
        let cell = self.cell.members.cell().await.ok();
        let hand_over = self.hand_over();
        let mut by_place: BTreeMap<Option<crate::policy::Place>, Vec<(String, _)>> =
            BTreeMap::new();
        for p in policies {
            let pool = p.pool_id();
            let open = hand_over.open(&pool).await?;
            // The cell's own place however it is named.
            let place = p.place.clone().filter(|place| Some(place) != cell.as_ref());
            for action in open {
                by_place
                    .entry(place.clone())
                    .or_default()
                    .push((pool.clone(), action));
            }
        }
        let mut outcomes = Vec::new();
        let mut unserved = Vec::new();
        let mut failed: Option<HandlerError> = None;
        for (place, open) in &by_place {
            let this = match self.at(place.as_ref()).await {
                Ok(this) => this,
                Err(e) => {
                    let mut pools: Vec<&str> = open.iter().map(|(p, _)| p.as_str()).collect();
                    pools.dedup();
                    tracing::error!(place = %e.place, pools = %crate::log_field::json(&pools), decision = "unserved", reason = %e, "lifecycle actions of this member not answered this tick");
                    unserved.push(json!({"place": e.place.to_string(), "pools": pools, "error": e.to_string()}));
                    continue;
                }
            };
            let hand_over = this.hand_over();
            for (pool, open) in open {
                match hand_over.answer(pool, open, clock).await {
                    Ok(o) => outcomes.push(o),
                    Err(e) => {
                        tracing::error!(pool = %pool, instance = %open.action.instance_id, error = %e.message, "lifecycle action not answered this tick");
                        failed.get_or_insert(e);
                    }
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let mut out = json!({"kind": "Tick", "outcomes": outcomes});
        if !unserved.is_empty() {
            out["unserved"] = json!(unserved);
        }
        Ok(out)
    }

    /// [`Self::handle`] for an event whose account and region are served (`place`: `None` for
    /// the cell's own), by the handler with that place's ports.
    async fn handle_verified(
        &self,
        c: &ClassifiedEvent,
        place: Option<crate::policy::Place>,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Value, HandlerError> {
        let (c, clock) = (c, *clock);
        let kind = c.event.kind();
        let cell = self.cell.members.cell().await.ok();
        let at_place = |p: &PoolRef| match &place {
            None => p.place.is_none() || p.place == cell,
            Some(place) => p.place.as_ref() == Some(place),
        };
        let first_instance = match &c.event {
            Interruption::InterruptionWarning { instance_id, .. }
            | Interruption::Rebalance { instance_id }
            | Interruption::StateChange { instance_id, .. } => Some(instance_id.clone()),
            _ => None,
        };
        let known = match &c.event {
            Interruption::StateChange { instance_id, state } => {
                let info = self
                    .ports
                    .instances
                    .instance(instance_id)
                    .await
                    .map_err(internal)?;
                if let Err(why) = verify::state_claim(state, info.as_ref()) {
                    return Ok(refused(c, why));
                }
                Some(info)
            }
            Interruption::LifecycleTerminate(a) => {
                let info = self
                    .ports
                    .instances
                    .instance(&a.instance_id)
                    .await
                    .map_err(internal)?;
                let hook = &self.settings.lifecycle_hook;
                if let Err(why) = verify::lifecycle_claim(a, hook, info.as_ref()) {
                    return Ok(refused(c, why));
                }
                None
            }
            _ => None,
        };
        // Deduplicate by event id, concurrently with loading what locating the instance needs.
        let event_key = c.id.as_deref().map(ClaimKey::event);
        let claim = async {
            match &event_key {
                Some(key) => self.claims().claim(key, kind, clock.now()).await.map(Some),
                None => Ok(None),
            }
        };
        let lookup = async {
            match (&known, &first_instance) {
                (Some(info), _) => Ok(Some(info.clone())),
                (None, Some(id)) => self.ports.instances.instance(id).await.map(Some),
                (None, None) => Ok(None),
            }
        };
        let (claim, policies, info) = tokio::join!(claim, self.load_policies(), lookup);
        let policies =
            policies.map(|all| all.into_iter().filter(|p| at_place(p)).collect::<Vec<_>>());
        // Pools with `metrics.perPool: true`.
        let per_pool: BTreeSet<String> = policies
            .as_ref()
            .map(|all| {
                all.iter()
                    .filter(|p| p.metrics_per_pool)
                    .map(PoolRef::pool_id)
                    .collect()
            })
            .unwrap_or_default();
        let version = match claim.map_err(internal)? {
            Some(Claim::Taken(doc)) => {
                tracing::info!(event_id = c.id.as_deref().unwrap_or(""), kind, decision = "duplicate", status = %crate::log_field::json(&doc.map(|d| d.status)), "event already handled or being handled");
                return Ok(json!({"event": c.id, "kind": kind, "decision": "duplicate"}));
            }
            Some(Claim::Ours(v)) => Some(v),
            None => None,
        };
        let result = match (policies, info) {
            (Err(e), _) | (_, Err(e)) => Err(internal(e)),
            (Ok(policies), Ok(info)) => self.dispatch(c, &policies, info, &clock, deadline).await,
        };
        if let (Some(key), Some(v)) = (&event_key, version) {
            let status = if result.is_ok() {
                ClaimStatus::Done
            } else {
                ClaimStatus::Failed
            };
            self.claims()
                .settle(key, v, status, kind, Value::Null, clock.now())
                .await;
        }
        let outcomes = result?;
        for o in &outcomes {
            log_outcome(c, o);
            if let Some(pool) = &o.pool {
                self.record(c, pool, o, &clock).await;
            }
        }
        let mut handled: BTreeMap<&str, u32> = BTreeMap::new();
        let mut events: BTreeMap<&str, Vec<crate::bus::BusEvent>> = BTreeMap::new();
        for o in &outcomes {
            if let Some(pool) = o.pool.as_deref()
                && !matches!(o.action, Handled::Skipped | Handled::Ignored)
            {
                *handled.entry(pool).or_default() += 1;
                events
                    .entry(pool)
                    .or_default()
                    .push(crate::bus::interruption_handled(
                        pool,
                        &o.instance,
                        &o.action.to_string(),
                        &o.reason,
                        kind,
                        c.id.as_deref(),
                        clock.now(),
                    ));
            }
        }
        // Only the delivery that won the event's claim gets here: one event per handling.
        for (pool, events) in events {
            self.announce_handled(pool, events, clock.now()).await;
        }
        let handled: Vec<(&str, u32, bool)> = handled
            .into_iter()
            .map(|(pool, n)| (pool, n, per_pool.contains(pool)))
            .collect();
        self.metrics
            .emit(&crate::metrics::interruption_pass(&handled), clock.now());
        Ok(json!({"event": c.id, "kind": kind, "outcomes": outcomes}))
    }

    /// Checks that an event is about an account and region this deployment serves, and which:
    /// `None` for the cell's own, else the member's place. `Err(why)` refuses it.
    async fn verify(&self, c: &ClassifiedEvent) -> Result<Option<crate::policy::Place>, String> {
        if matches!(c.event, Interruption::Tick | Interruption::Ignored { .. }) {
            return Ok(None);
        }
        let served = self.deployment.served().await.map_err(|e| {
            format!("cannot tell which accounts are served ({e}); acting on nothing")
        })?;
        served.route(c.account.as_deref(), c.region.as_deref())
    }

    /// The pools of every document: only what locating an instance's pool and reacting needs
    /// is read ([`policy::locate`]), so a mistake elsewhere in a policy never stops a drain.
    pub(super) async fn load_policies(&self) -> Result<Vec<PoolRef>, PortError> {
        let docs = self.cell.policies.all().await?;
        let mut out: Vec<PoolRef> = Vec::new();
        for doc in docs {
            match policy::locate(&doc) {
                Ok(p) if out.iter().any(|o| o.pool_id() == p.pool_id()) => {
                    tracing::warn!(source = %doc.source, pool = %p.pool_id(), decision = "skipped", "pool defined twice; the ami-watcher reports why")
                }
                Ok(p) => out.push(p),
                Err(problems) => {
                    let first = problems.errors().next().map(ToString::to_string);
                    tracing::warn!(source = %doc.source, decision = "skipped", problem = first.as_deref(), "policy names no pool; the ami-watcher reports why")
                }
            }
        }
        Ok(out)
    }

    pub(super) async fn dispatch(
        &self,
        c: &ClassifiedEvent,
        policies: &[PoolRef],
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
                let o = self.act_on(c, policy, instance_id, clock, deadline).await?;
                Ok(vec![o])
            }
            Interruption::Maintenance { instance_ids, .. } => {
                let mut out = Vec::new();
                for id in instance_ids {
                    let info = self.ports.instances.instance(id).await.map_err(internal)?;
                    match self.ours(id, info.as_ref(), policies) {
                        Ok(p) => out.push(self.act_on(c, p, id, clock, deadline).await?),
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
                    return Ok(vec![Outcome::new(
                        &a.instance_id,
                        None,
                        Handled::Ignored,
                        why,
                    )]);
                };
                Ok(vec![
                    self.act_on(c, policy, &a.instance_id, clock, deadline)
                        .await?,
                ])
            }
            Interruption::Tick | Interruption::Ignored { .. } => Ok(Vec::new()),
        }
    }

    /// The pool of the instance, or an `ignored` outcome (one debug line, never an error).
    pub(super) fn ours<'a>(
        &self,
        instance_id: &str,
        info: Option<&InstanceInfo>,
        policies: &'a [PoolRef],
    ) -> Result<&'a PoolRef, Box<Outcome>> {
        let why = match info {
            None => format!("{instance_id} is not known to EC2 in this account and region"),
            Some(info) => match pool_of(info, policies) {
                Ok(p) => return Ok(p),
                Err(NotOurs(why)) => why,
            },
        };
        tracing::debug!(instance = instance_id, decision = "ignored", reason = %why, "not ours");
        Err(Box::new(Outcome::new(
            instance_id,
            None,
            Handled::Ignored,
            why,
        )))
    }

    /// Stages `events` (*Interruption Handled*) in pool `pool`'s record outbox, then puts them
    /// and removes them ([`crate::announce::Announcer::update_pool`]): a put the bus refuses is
    /// left for the rotator's sweep. A pool nodecycle never resolved has no record to hold
    /// them: they are put at once (a refused put is logged). An event already in the outbox
    /// (a retried handling) is not staged twice.
    async fn announce_handled(
        &self,
        pool: &str,
        events: Vec<crate::bus::BusEvent>,
        now: DateTime<Utc>,
    ) {
        match self.cell.state.pool(pool).await {
            Ok(Some(_)) => {}
            Ok(None) => return self.cell.announce.put_now(&events).await,
            Err(e) => {
                tracing::warn!(pool, error = %e, "cannot read the pool record to stage the event; putting it at once");
                return self.cell.announce.put_now(&events).await;
            }
        }
        let stage = |rec: &state::PoolRecord| {
            let mut next = rec.clone();
            for e in &events {
                if !next.outbox.iter().any(|b| b.id() == e.id()) {
                    next.outbox.push(e.clone());
                }
            }
            next
        };
        if let Err(e) = self.cell.announce.update_pool(pool, now, stage).await {
            tracing::warn!(pool, error = %e, "cannot stage the event in the pool record; putting it at once");
            self.cell.announce.put_now(&events).await;
        }
    }

    /// Writes the event record `EVT#<time>#<instance>` (best effort).
    pub(super) async fn record(&self, c: &ClassifiedEvent, pool: &str, o: &Outcome, clock: &Clock) {
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
        let ttl = now + self.settings.retention;
        // Another event for the instance in the same second goes under this tail.
        let tail = c.id.as_deref().unwrap_or(c.event.kind());
        let result = (self.cell.state)
            .log_event(pool, time, &o.instance, tail, &doc, ttl)
            .await;
        if let Err(e) = result
            && e.kind != ErrorKind::Conflict
        {
            tracing::warn!(pool, instance = %o.instance, error = %e, "could not write the event record");
        }
    }

    /// Takes the claim the event's work on `instance_id` needs, asks [`action_for`] what to
    /// do, does it through the use case that does it, and settles the claim by the result.
    async fn act_on(
        &self,
        c: &ClassifiedEvent,
        policy: &PoolRef,
        instance_id: &str,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let key =
            claim_of(&c.event).map(|(kind, what)| (ClaimKey::work(&pool, instance_id, kind), what));
        let claim = match &key {
            Some((claim_key, what)) => Some(
                self.claims()
                    .claim(claim_key, what, clock.now())
                    .await
                    .map_err(internal)?,
            ),
            None => None,
        };
        let action = action_for(&c.event, policy, instance_id, claim.as_ref(), clock.now());
        let result = self
            .perform(c, policy, instance_id, action, clock, deadline)
            .await;
        if let (Some((claim_key, what)), Some(Claim::Ours(version))) = (&key, &claim) {
            let (status, details) = match &result {
                Ok(o) => (ClaimStatus::Done, o.details.clone()),
                Err(_) => (ClaimStatus::Failed, Value::Null),
            };
            self.claims()
                .settle(claim_key, *version, status, what, details, clock.now())
                .await;
        }
        result
    }

    /// Performs `action` (decided by [`action_for`]) on `instance_id` of pool `policy`.
    async fn perform(
        &self,
        c: &ClassifiedEvent,
        policy: &PoolRef,
        instance_id: &str,
        action: crate::interruption::Action,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        use crate::interruption::Action as Do;
        let pool = policy.pool_id();
        match action {
            Do::Skip { reason } => Ok(Outcome::new(
                instance_id,
                Some(&pool),
                Handled::Skipped,
                reason,
            )),
            Do::Record { reason } => Ok(Outcome::new(
                instance_id,
                Some(&pool),
                Handled::Recorded,
                reason,
            )),
            Do::Cordon => {
                let kube = connect(self.ports.kube.as_ref(), policy).await?;
                rebalance::cordon_only(kube.as_ref(), &pool, instance_id).await
            }
            Do::Drain { reason } => {
                let kube = connect(self.ports.kube.as_ref(), policy).await?;
                SpotDrain {
                    kube: kube.as_ref(),
                    instances: self.ports.instances.as_ref(),
                    settings: &self.settings,
                }
                .run(c, &pool, instance_id, reason, clock, deadline)
                .await
            }
            Do::Rotate { rotation, why } => self.rotations().start(*rotation, &why).await,
            Do::Gone { state } => {
                let kube = connect(self.ports.kube.as_ref(), policy).await?;
                rotations::gone(
                    kube.as_ref(),
                    &self.rotations(),
                    &pool,
                    instance_id,
                    &state,
                    clock,
                )
                .await
            }
            Do::HandOver => match &c.event {
                Interruption::LifecycleTerminate(a) => {
                    // The action started when the event says (never later than now).
                    let started = c.time.map_or(clock.now(), |t| t.min(clock.now()));
                    self.hand_over()
                        .run(policy, a, started, clock, deadline)
                        .await
                }
                _ => Err(internal("a hand-over without a lifecycle action")),
            },
            Do::None => Err(internal(format!(
                "{} names no instance work",
                c.event.kind()
            ))),
        }
    }

    fn claims(&self) -> Claims<'_> {
        Claims {
            state: &self.cell.state,
            settings: &self.settings,
        }
    }

    fn rotations(&self) -> Rotations<'_> {
        Rotations {
            state: &self.cell.state,
            announce: &self.cell.announce,
            retention: self.settings.retention,
        }
    }

    fn hand_over(&self) -> HandOver<'_> {
        HandOver {
            lifecycle: self.ports.lifecycle.as_ref(),
            kube: self.ports.kube.as_ref(),
            state: &self.cell.state,
            rotations: self.rotations(),
            settings: &self.settings,
        }
    }
}

/// A client of the pool's cluster (an unreachable cluster fails the event: it is retried).
pub(super) async fn connect(
    kube: &dyn KubeConnector,
    policy: &PoolRef,
) -> Result<Arc<dyn NodeOps>, HandlerError> {
    kube.connect(&policy.cluster).await.map_err(|e| {
        internal(format!(
            "cluster {} unreachable: {e}; the event is retried",
            policy.cluster
        ))
    })
}

impl InterruptionHandler {
    /// The handler over `ports`.
    pub fn new(ports: &crate::ports::Ports, settings: Settings) -> Self {
        use super::PlacePorts;
        InterruptionHandler {
            cell: super::CellPorts::new(ports),
            ports: InterruptionPorts::of(ports),
            deployment: ports.deployment.clone(),
            settings,
            metrics: ports.metrics.clone(),
        }
    }
}
