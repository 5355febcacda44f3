//! Auto Scaling instance-terminate lifecycle actions: drain (with heartbeats), then
//! CompleteLifecycleAction CONTINUE once every pod is gone; a drain longer than the invocation
//! is handed to the rotator, and the schedule tick completes the action once it is drained, or
//! abandons it once it is out of time ([`crate::retain::hand_over_answer`]): with the group's
//! retain policy the instance is then retained with its pods. Nothing here answers CONTINUE
//! for a node that still has pods.

use std::time::Instant;

use serde_json::{Value, json};

use super::rotations::Rotations;
use super::{Handled, Outcome, Settings, connect, internal};
use crate::clock::Clock;
use crate::event::instance_events::LifecycleAction;
use crate::handlers::HandlerError;
use crate::interruption::LifecycleOps;
use crate::kube::{self as k, DrainError, DrainState, KubeConnector};
use crate::policy::PoolRef;
use crate::retain::{HandOverAnswer, hand_over_answer};
use crate::rotation::{Rotation, RotationReason, Step};
use crate::state::{self, ClaimKey, Repository, Versioned};

/// A lifecycle action handed over to the rotator and still open ([`HandOver::open`]).
#[derive(Debug, Clone)]
pub(super) struct OpenAction {
    /// Its record's version.
    pub version: u64,
    /// The action.
    pub action: LifecycleAction,
    /// When the action started (the lifecycle event's time; for a record written before it
    /// was kept, the hand-over's).
    pub started: chrono::DateTime<chrono::Utc>,
}

/// The lifecycle hand-over: Auto Scaling lifecycle actions, the cluster's Kubernetes API, the
/// state table (claims read, open actions, the rotation a long drain is handed to).
pub(super) struct HandOver<'a> {
    /// Heartbeats and CompleteLifecycleAction.
    pub lifecycle: &'a dyn LifecycleOps,
    /// Kubernetes access per cluster.
    pub kube: &'a dyn KubeConnector,
    /// The state table.
    pub state: &'a Repository,
    /// The rotation records a drain is handed to.
    pub rotations: Rotations<'a>,
    /// Pacing, heartbeats, retention.
    pub settings: &'a Settings,
}

impl HandOver<'_> {
    /// Why the instance needs no drain before its lifecycle action completes, if it does not.
    pub(super) async fn already_drained(
        &self,
        pool: &str,
        instance_id: &str,
    ) -> Result<Option<String>, HandlerError> {
        if let Some(v) = (self.state)
            .claim(&ClaimKey::work(pool, instance_id, "drain"))
            .await
            .map_err(internal)?
            && v.value["status"] == "done"
        {
            return Ok(Some(format!(
                "already drained ({})",
                v.value["what"].as_str().unwrap_or("interruption")
            )));
        }
        if let Some(Versioned { value: Some(r), .. }) = (self.state)
            .rotation(pool, instance_id)
            .await
            .map_err(internal)?
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

    pub(super) async fn complete(&self, a: &LifecycleAction) -> Result<bool, HandlerError> {
        self.lifecycle.complete_continue(a).await.map_err(internal)
    }

    /// Auto Scaling instance-terminate lifecycle action that started at `started`: drain
    /// (heartbeats while draining), then CompleteLifecycleAction CONTINUE once every pod is
    /// gone (past terminationGracePeriod the remaining pods are deleted, and the drain waits
    /// for them to go); at once when there is no node or it was drained already; a drain
    /// longer than the invocation is handed over.
    pub(super) async fn run(
        &self,
        policy: &PoolRef,
        a: &LifecycleAction,
        started: chrono::DateTime<chrono::Utc>,
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
            Outcome::new(id, Some(&pool), Handled::Completed, reason).with(details)
        };
        if let Some(why) = self.already_drained(&pool, id).await? {
            let active = self.complete(a).await?;
            return Ok(completed(why, active, Value::Null));
        }
        let kube = connect(self.kube, policy).await?;
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
            // Past terminationGracePeriod the remaining pods were deleted: still only CONTINUE
            // once they are gone.
            if p.done {
                let why = if p.deadline_passed {
                    "drained: terminationGracePeriod passed, the remaining pods were deleted and are gone"
                } else {
                    "drained: every pod is gone"
                };
                let active = self.complete(a).await?;
                return Ok(completed(why.to_string(), active, details));
            }
            if Instant::now() + self.settings.poll + self.settings.reserve >= deadline {
                return self
                    .hand_over(policy, a, started, state, clock, details)
                    .await;
            }
            if last_beat.elapsed() >= self.settings.heartbeat_every {
                let active = self.lifecycle.heartbeat(a).await.map_err(internal)?;
                heartbeats += 1;
                last_beat = Instant::now();
                tracing::info!(pool = %pool, instance = id, remaining = p.pods_remaining, active, decision = "heartbeat", "draining; lifecycle action heartbeat sent");
                if !active {
                    return Ok(Outcome::new(
                        id,
                        Some(&pool),
                        Handled::Abandoned,
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
    pub(super) async fn take_over(&self, ours: Rotation) -> Result<(), HandlerError> {
        let rotations = &self.rotations;
        for _ in 0..state::WRITE_ATTEMPTS {
            let current = (self.state)
                .rotation(&ours.pool, &ours.instance_id)
                .await
                .map_err(internal)?;
            let before: Option<Rotation> = current.as_ref().and_then(|v| v.value.clone());
            let (expected, next) = match &current {
                None => (None, ours.clone()),
                Some(v) => match &v.value {
                    Some(r)
                        if r.in_flight()
                            && matches!(r.step, Step::Draining | Step::Terminating) =>
                    {
                        tracing::info!(instance = %r.instance_id, step = ?r.step, decision = "kept", "a rotation already drains this instance; it completes the drain");
                        return Ok(());
                    }
                    Some(r) if r.in_flight() => (
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
            // Its Rotation Started event when this starts it; a replaced record's unput events
            // are kept.
            let written = (rotations.announce)
                .put_rotation(before.as_ref(), next, expected, None)
                .await
                .map_err(internal)?;
            if written.is_some() {
                return Ok(());
            }
        }
        Err(internal("rotation record: too many conflicting writers"))
    }

    /// The invocation is nearly over and the drain is not: record a forced `Interrupted`
    /// rotation in `Draining` with the drain state (the rotator continues it) and an open
    /// lifecycle record (with `started`, the action's start) that the schedule tick completes
    /// once the rotation is past draining, or abandons once the action is out of time.
    pub(super) async fn hand_over(
        &self,
        policy: &PoolRef,
        a: &LifecycleAction,
        started: chrono::DateTime<chrono::Utc>,
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
        self.take_over(rotation).await?;
        let open =
            json!({"status": "open", "action": a, "since": now, "started": started.min(now)});
        // Already open (a retried hand-over): kept.
        (self.state)
            .put_lifecycle_handover(
                &pool,
                &a.instance_id,
                &open,
                None,
                now + self.settings.retention,
            )
            .await
            .map_err(internal)?;
        self.lifecycle.heartbeat(a).await.map_err(internal)?;
        Ok(Outcome::new(
            &a.instance_id,
            Some(&pool),
            Handled::HandedOver,
            "drain longer than this invocation: the rotator continues it; the schedule tick completes the lifecycle action once it is drained, or abandons it once out of time",
        )
        .with(details))
    }

    /// The lifecycle actions of `pool` handed to the rotator and still open (the cell's
    /// table: no call to the pool's account).
    pub(super) async fn open(&self, pool: &str) -> Result<Vec<OpenAction>, HandlerError> {
        let open = (self.state)
            .lifecycle_handovers(pool)
            .await
            .map_err(internal)?;
        let time = |v: &Value| serde_json::from_value::<chrono::DateTime<chrono::Utc>>(v.clone());
        Ok(open
            .into_iter()
            .filter(|v| v.value["status"] == "open")
            .filter_map(|v| {
                let action =
                    serde_json::from_value::<LifecycleAction>(v.value["action"].clone()).ok()?;
                let started = time(&v.value["started"])
                    .or_else(|_| time(&v.value["since"]))
                    .ok()?;
                Some(OpenAction {
                    version: v.version,
                    action,
                    started,
                })
            })
            .collect())
    }

    /// Schedule tick for one open action of `pool` (from [`Self::open`]), decided by
    /// [`hand_over_answer`]: CONTINUE once the rotator drained the instance, ABANDON once the
    /// action is out of time (`Settings::hand_over_limit` after it started) and the drain is
    /// not finished, else a heartbeat; through [`Self::lifecycle`], which must be the pool's
    /// place's. An action that is over is closed (its record `done`, or `abandoned`).
    pub(super) async fn answer(
        &self,
        pool: &str,
        open: &OpenAction,
        clock: &Clock,
    ) -> Result<Outcome, HandlerError> {
        let a = &open.action;
        let drained = self.already_drained(pool, &a.instance_id).await?;
        let decided = hand_over_answer(
            drained.is_some(),
            open.started,
            clock.now(),
            self.settings.hand_over_limit,
        );
        let (o, status) = match (decided, drained) {
            (HandOverAnswer::Continue, why) => {
                let why = why.unwrap_or_default();
                let active = self.complete(a).await?;
                (
                    Outcome::new(
                        &a.instance_id,
                        Some(pool),
                        Handled::Completed,
                        format!("{why}; CompleteLifecycleAction CONTINUE (active: {active})"),
                    ),
                    Some("done"),
                )
            }
            (HandOverAnswer::Abandon, _) => {
                let active = self.lifecycle.complete_abandon(a).await.map_err(internal)?;
                let limit = crate::duration::format(self.settings.hand_over_limit);
                (
                    Outcome::new(
                        &a.instance_id,
                        Some(pool),
                        Handled::Retain,
                        format!(
                            "the drain did not finish within {limit} of the lifecycle action's start: CompleteLifecycleAction ABANDON (active: {active}); with the group's retain policy the instance stays Terminating:Retained with its pods, and the rotator terminates it once they are gone"
                        ),
                    ),
                    Some("abandoned"),
                )
            }
            (HandOverAnswer::Heartbeat, _) => {
                let active = self.lifecycle.heartbeat(a).await.map_err(internal)?;
                (
                    Outcome::new(
                        &a.instance_id,
                        Some(pool),
                        Handled::Heartbeat,
                        "the rotator is still draining",
                    ),
                    (!active).then_some("done"),
                )
            }
        };
        if let Some(status) = status {
            let doc =
                json!({"status": status, "action": a, "at": clock.now(), "started": open.started});
            let _ = (self.state)
                .put_lifecycle_handover(
                    pool,
                    &a.instance_id,
                    &doc,
                    Some(open.version),
                    clock.now() + self.settings.retention,
                )
                .await;
        }
        tracing::info!(pool = %pool, instance = %o.instance, decision = %o.action, reason = %o.reason, "lifecycle action answered");
        Ok(o)
    }
}
