//! Perform and record: the rotator's executor. It records the plan's starts, asks the pure step
//! function ([`crate::rotation::step`]) for one command per moving rotation, performs each
//! command and records its result with a write conditional on the record's version. It
//! decides nothing: a command whose record was changed by another writer is dropped (that
//! writer's view wins), a failed call leaves the record where it was for the next pass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};

use super::{PoolReport, RotatorHandler};
use crate::clock::Clock;
use crate::fleet::Snapshot;
use crate::kube::{self as k, DrainState, NodeOps};
use crate::plan::{self, Action};
use crate::policy::Policy;
use crate::port::PortError;
use crate::rotation::step::{self, Command, FinishReason, PoolView};
use crate::rotation::{Release, Rotation, Step, Surge, Undo};
use crate::state::{self, RecordedError, Versioned};

/// Everything one pool's pass needs.
pub(super) struct PoolCtx<'a> {
    pub policy: &'a Policy,
    pub kube: Arc<dyn NodeOps>,
    pub snapshot: Snapshot,
    /// Versions of the rotation records of the snapshot, by instance.
    pub versions: BTreeMap<String, u64>,
    pub clock: Clock,
    /// The pool's state record as read (its desired AMI's provenance names the release).
    pub record: Option<crate::state::PoolRecord>,
    /// Quarantine in force.
    pub quarantined: crate::promotion::Quarantined,
    /// Set when this pass quarantined something (the pool is planned again).
    pub quarantined_now: bool,
}

impl PoolCtx<'_> {
    /// The name of the node this pass observed for `instance_id`, if any (read by name
    /// instead of listing the cluster's nodes, see [`k::node_of`]).
    fn observed_node(&self, instance_id: &str) -> Option<&str> {
        self.snapshot
            .members
            .iter()
            .find(|m| m.instance_id == instance_id)
            .and_then(|m| m.node.as_ref())
            .map(|n| n.name.as_str())
    }

    /// Quarantined image ids among those this pool knows (its desired AMI and history).
    fn quarantined_images(&self) -> std::collections::BTreeSet<String> {
        let known: Vec<(String, crate::promotion::Release)> = self
            .record
            .iter()
            .flat_map(|r| r.desired.iter().chain(r.history.iter().map(|h| &h.ami)))
            .map(|a| (a.id.clone(), crate::promotion::release_of(a)))
            .collect();
        self.quarantined
            .images(known.iter().map(|(id, r)| (id.as_str(), r)))
    }
}

/// What performing a command did to its record.
enum Performed {
    /// The record moved from one step to another (or stayed, e.g. a drain step).
    Step(Step, Step),
    /// Another writer changed the record first: nothing done.
    Lost,
    /// Nothing to do (`Wait`).
    Idle,
}

impl RotatorHandler {
    /// Carries out a node-level plan's rotation actions (starts, releases, one command per
    /// moving rotation, capacity repair); the launch template action is the caller's.
    pub(super) async fn execute(
        &self,
        plan: &plan::Plan,
        ctx: &mut PoolCtx<'_>,
        deadline: Instant,
        report: &mut PoolReport,
    ) -> Result<(), PortError> {
        let now = ctx.clock.start();
        let mut records: BTreeMap<String, Versioned<Rotation>> = ctx
            .snapshot
            .rotations
            .iter()
            .filter_map(|r| {
                ctx.versions.get(&r.instance_id).map(|v| {
                    (
                        r.instance_id.clone(),
                        Versioned {
                            value: r.clone(),
                            version: *v,
                        },
                    )
                })
            })
            .collect();
        let mut moving: BTreeSet<String> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Advance { instance_id, .. } => Some(instance_id.clone()),
                _ => None,
            })
            .collect();
        let swept = (self.announce)
            .sweep_pool(&plan.pool, ctx.record.as_ref(), &mut records, now)
            .await;
        report.events_swept = swept.put;
        for rotation in plan.rotations_to_start(now) {
            // A finished record of the same instance is replaced, conditionally.
            let old = records.get(&rotation.instance_id);
            let (before, expected) = (old.map(|v| v.value.clone()), old.map(|v| v.version));
            let instance = rotation.instance_id.clone();
            match self.put_rotation(before.as_ref(), rotation, expected).await {
                Ok(Some(v)) => {
                    tracing::info!(pool = %plan.pool, instance = %instance, reason = ?v.value.reason, forced = v.value.forced, decision = "rotation started");
                    report.started.push(instance.clone());
                    moving.insert(instance.clone());
                    records.insert(instance, v);
                }
                Ok(None) => {}
                Err(e) => report
                    .errors
                    .push(format!("cannot record rotation of {instance}: {e}")),
            }
        }
        let rotations: Vec<Rotation> = records.values().map(|v| v.value.clone()).collect();
        let quarantined = ctx.quarantined_images();
        let view = PoolView {
            group: &ctx.snapshot.group,
            members: &ctx.snapshot.members,
            desired_ami: ctx.snapshot.gates.desired_ami.as_deref(),
            quarantined: &quarantined,
        };
        let moving: BTreeSet<&str> = moving.iter().map(String::as_str).collect();
        let steps = step::step_pool(&view, &rotations, &moving, now, &self.settings.step());
        let mut unrecorded_surges = 0;
        let mut stopped = false;
        for (instance, command) in &steps.commands {
            let surge = matches!(command, Command::Surge { .. });
            if stopped || deadline.saturating_duration_since(Instant::now()) < self.settings.reserve
            {
                if !stopped {
                    report.errors.push(
                        "invocation time nearly used up; remaining steps continue next pass".into(),
                    );
                    stopped = true;
                }
                unrecorded_surges += i32::from(surge);
                continue;
            }
            let Some(v) = records.get(instance).cloned() else {
                continue;
            };
            let rotation = v.value.clone();
            match self.perform(&mut *ctx, v, command).await {
                Ok(Performed::Step(from, to)) if from != to => {
                    report.metrics.step(from, to, false);
                    report.steps.push(format!("{instance}: {from:?} -> {to:?}"));
                    node_event(ctx, &rotation, command, from, to).await;
                }
                Ok(Performed::Lost) => unrecorded_surges += i32::from(surge),
                Ok(_) => {}
                Err(e) => {
                    unrecorded_surges += i32::from(surge);
                    tracing::warn!(pool = %plan.pool, instance = %instance, command = command.name(), kind = ?e.kind, error = %e, "step failed; retried next pass");
                    report
                        .errors
                        .push(format!("{instance} ({}): {e}", command.name()));
                }
            }
        }
        if let Some(capacity) = steps.capacity {
            self.ensure_capacity(
                &ctx.snapshot.group.name,
                capacity - unrecorded_surges,
                &plan.pool,
            )
            .await?;
        }
        Ok(())
    }

    /// Raises the group's desired capacity to `want` if it is below (read fresh: this pass's
    /// terminations may have lowered it). Never lowers it.
    async fn ensure_capacity(&self, group: &str, want: i32, pool: &str) -> Result<(), PortError> {
        let desired = self.groups.desired_capacity(group).await?;
        if desired < want {
            tracing::info!(
                pool,
                group,
                desired,
                want,
                decision = "capacity raised",
                "desired capacity set to base + active surges"
            );
            self.groups.set_desired_capacity(group, want).await?;
        }
        Ok(())
    }

    /// Writes `rotation` over `before` conditionally (`expected` = the version read, `None` =
    /// must not exist), its transition's event staged and put ([`crate::announce`]).
    /// `Ok(None)` when another writer won; else the record as stored.
    pub(crate) async fn put_rotation(
        &self,
        before: Option<&Rotation>,
        rotation: Rotation,
        expected: Option<u64>,
    ) -> Result<Option<Versioned<Rotation>>, PortError> {
        let ttl = crate::rotation::retention(&rotation);
        self.announce
            .put_rotation(before, rotation, expected, ttl)
            .await
    }

    /// [`Self::put_rotation`] over `v`, returning the new record.
    async fn save(
        &self,
        v: &Versioned<Rotation>,
        next: Rotation,
    ) -> Result<Option<Versioned<Rotation>>, PortError> {
        self.put_rotation(Some(&v.value), next, Some(v.version))
            .await
    }

    /// Gives back the surge unit of `v` with `undo`: records the intent (unless recorded), performs
    /// it, records it given. The one surge undo, shared by the rotator and `ops cancel`. `Ok(None)`
    /// when another writer changed the record first.
    pub(crate) async fn give_back(
        &self,
        group: &str,
        v: Versioned<Rotation>,
        undo: &Undo,
    ) -> Result<Option<Versioned<Rotation>>, PortError> {
        let intent = Release::Undoing(undo.clone());
        let v = if v.value.surge.as_ref().and_then(|s| s.release.as_ref()) == Some(&intent) {
            v
        } else {
            let next = v.value.clone().with_release(intent);
            match self.save(&v, next).await? {
                Some(v) => v,
                None => return Ok(None),
            }
        };
        let rotation = &v.value;
        match undo {
            Undo::Terminate { instance_id } => {
                self.groups.terminate_instance(instance_id, true).await?;
            }
            Undo::LowerTo { desired } => self.groups.set_desired_capacity(group, *desired).await?,
            Undo::Nothing => {}
        }
        tracing::info!(pool = %rotation.pool, instance = %rotation.instance_id, undo = ?undo, decision = "surge given back");
        let given = rotation.clone().with_release(Release::Given);
        self.save(&v, given).await
    }

    /// Performs one command for the rotation `v` and records the result.
    async fn perform(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
    ) -> Result<Performed, PortError> {
        let now = ctx.clock.now();
        let r = &v.value.clone();
        let from = r.step;
        let group = &ctx.snapshot.group.name.clone();
        let moved = |saved: Option<Versioned<Rotation>>| {
            Ok(saved.map_or(Performed::Lost, |s| Performed::Step(from, s.value.step)))
        };
        let log = |to: Step, what: &str| {
            tracing::info!(pool = %r.pool, instance = %r.instance_id, command = command.name(), from = ?from, to = ?to, decision = what);
        };
        match command {
            Command::Wait { why } => {
                tracing::debug!(pool = %r.pool, instance = %r.instance_id, why = ?why, decision = "waiting");
                Ok(Performed::Idle)
            }
            Command::Surge {
                target,
                base,
                baseline,
            } => {
                // Only the intent: the capacity call comes once every command of the pass is
                // performed (see `execute`), so a crash here is repaired next pass.
                let next = Rotation {
                    surge: Some(Surge {
                        target_desired: *target,
                        baseline: baseline.clone(),
                        base: Some(*base),
                        release: None,
                    }),
                    ..r.enter(Step::Surging, now)
                };
                log(Step::Surging, "surge");
                moved(self.save(&v, next).await?)
            }
            Command::ClaimReplacement { id } => {
                let next = Rotation {
                    replacement: Some(id.clone()),
                    ..r.enter(Step::Cordoned, now)
                };
                log(Step::Cordoned, "replacement ready");
                moved(self.save(&v, next).await?)
            }
            Command::Cordon => {
                let reason = format!("{:?}", r.reason);
                let next = match k::start_drain_known(
                    ctx.kube.as_ref(),
                    &r.instance_id,
                    ctx.observed_node(&r.instance_id),
                    &reason,
                    ctx.policy.termination_grace_period,
                    now,
                )
                .await
                {
                    Ok(state) => Rotation {
                        drain: Some(
                            serde_json::to_value(&state)
                                .map_err(|e| PortError::other("encode", e))?,
                        ),
                        ..r.enter(Step::Draining, now)
                    },
                    Err(k::DrainError::NodeNotFound(_)) => r.enter(Step::Terminating, now),
                    Err(e) => return Err(e.into()),
                };
                log(next.step, "cordoned");
                moved(self.save(&v, next).await?)
            }
            Command::DrainStep => {
                let mut state: DrainState = r
                    .drain
                    .clone()
                    .and_then(|d| serde_json::from_value(d).ok())
                    .ok_or_else(|| {
                        PortError::other("rotation record", "Draining without a drain state")
                    })?;
                let result =
                    k::drain_step(ctx.kube.as_ref(), &mut state, now, self.settings.drain_step)
                        .await;
                let drain =
                    Some(serde_json::to_value(&state).map_err(|e| PortError::other("encode", e))?);
                match result {
                    Ok(p) if p.done => {
                        log(Step::Terminating, "drained");
                        moved(
                            self.save(
                                &v,
                                Rotation {
                                    drain,
                                    ..r.enter(Step::Terminating, now)
                                },
                            )
                            .await?,
                        )
                    }
                    Ok(p) => {
                        tracing::info!(pool = %r.pool, instance = %r.instance_id, remaining = p.pods_remaining, blocked_by = ?p.blocked_by, deadline = ?p.deadline, decision = "draining");
                        moved(self.save(&v, Rotation { drain, ..r.clone() }).await?)
                    }
                    Err(e) => {
                        let kept = Rotation {
                            drain,
                            error: Some(e.to_string()),
                            ..r.clone()
                        };
                        self.save(&v, kept).await?;
                        Err(e.into())
                    }
                }
            }
            Command::Terminate { decrement } => {
                // With a decrement, record first that this terminate gives the surge back: if
                // the instance is gone next pass, that was us, not a loss to undo.
                let v = if *decrement && r.surge_active() {
                    let intent = r.clone().with_release(Release::Undoing(Undo::Terminate {
                        instance_id: r.instance_id.clone(),
                    }));
                    match self.save(&v, intent).await? {
                        Some(v) => v,
                        None => return Ok(Performed::Lost),
                    }
                } else {
                    v
                };
                self.groups
                    .terminate_instance(&r.instance_id, *decrement)
                    .await?;
                self.delete_node(ctx, r).await;
                let done = r.enter(Step::Done, now).with_release(Release::Given);
                log(Step::Done, "terminated");
                moved(self.save(&v, done).await?)
            }
            Command::UndoSurge { undo } => {
                let saved = self.give_back(group, v, undo).await?;
                Ok(saved.map_or(Performed::Lost, |_| Performed::Idle))
            }
            Command::Finish { why, undo } => {
                if from == Step::Terminating {
                    self.delete_node(ctx, r).await;
                }
                let done = r.enter(Step::Done, now);
                let done = match (why, undo) {
                    (_, Some(u)) => done.with_release(Release::Undoing(u.clone())),
                    (FinishReason::Terminated, None) => done.with_release(Release::Given),
                    (FinishReason::InstanceLeft, None) => done,
                };
                log(Step::Done, "finished");
                let Some(saved) = self.save(&v, done).await? else {
                    return Ok(Performed::Lost);
                };
                if let Some(u) = undo {
                    self.give_back(group, saved, u).await?;
                }
                Ok(Performed::Step(from, Step::Done))
            }
            Command::Cancel {
                image,
                uncordon,
                undo,
            } => {
                let mut cancelled = Rotation {
                    error: Some(format!(
                        "cancelled: {image}, the AMI it rolled out, is quarantined"
                    )),
                    ..r.enter(Step::Cancelled, now)
                };
                if let Some(u) = undo {
                    cancelled = cancelled.with_release(Release::Undoing(u.clone()));
                }
                let Some(saved) = self.save(&v, cancelled).await? else {
                    return Ok(Performed::Lost);
                };
                log(
                    Step::Cancelled,
                    "rotation cancelled: its AMI is quarantined",
                );
                if *uncordon {
                    let drain: Option<DrainState> =
                        r.drain.clone().and_then(|d| serde_json::from_value(d).ok());
                    match drain {
                        Some(state) => k::abort_drain(ctx.kube.as_ref(), &state).await?,
                        None => {
                            let known = ctx.observed_node(&r.instance_id);
                            if let Some(node) =
                                k::node_of(ctx.kube.as_ref(), &r.instance_id, known).await?
                            {
                                ctx.kube.undo_cordon(&node.name, true).await?;
                            }
                        }
                    }
                }
                if let Some(u) = undo {
                    self.give_back(group, saved, u).await?;
                }
                Ok(Performed::Step(from, Step::Cancelled))
            }
            Command::Fail {
                why,
                halt,
                quarantine,
                undo,
            } => {
                let message = why.to_string();
                // Halt and quarantine first: if recording the failure is lost, the next pass
                // fails it again (both are idempotent).
                if *halt {
                    self.halt(&r.pool, &message, now).await?;
                }
                if *quarantine {
                    self.quarantine_failed(ctx, r, &why.what(), now).await?;
                }
                let mut failed = Rotation {
                    error: Some(message),
                    ..r.enter(Step::Failed, now)
                };
                if let Some(u) = undo {
                    failed = failed.with_release(Release::Undoing(u.clone()));
                }
                let Some(saved) = self.save(&v, failed).await? else {
                    return Ok(Performed::Lost);
                };
                tracing::error!(pool = %r.pool, instance = %r.instance_id, decision = "rotation failed", reason = %why, halt);
                if let Some(u) = undo {
                    self.give_back(group, saved, u).await?;
                }
                Ok(Performed::Step(from, Step::Failed))
            }
        }
    }

    /// Deletes the node of the rotation's instance (best effort: the node controller removes
    /// it anyway once the instance is gone).
    async fn delete_node(&self, ctx: &PoolCtx<'_>, r: &Rotation) {
        let node = ctx
            .snapshot
            .members
            .iter()
            .find(|m| m.instance_id == r.instance_id)
            .and_then(|m| m.node.as_ref());
        if let Some(node) = node
            && let Err(e) =
                k::delete_node(ctx.kube.as_ref(), &node.name, &format!("{:?}", r.reason)).await
        {
            tracing::warn!(pool = %r.pool, node = %node.name, error = %e, "could not delete the node object; the node controller removes it");
        }
    }

    /// Quarantines the release of the pool's desired AMI after a rotation to it failed (its
    /// replacement never became Ready): no pool will take it again, and this pool rolls back.
    /// Quarantines what the failed rotation rolled out: its target (the pool's desired AMI when
    /// it started; today's when the record predates targets). A pinned image is quarantined as
    /// that image only; an AMI the pool resolved, as its whole release.
    async fn quarantine_failed(
        &self,
        ctx: &mut PoolCtx<'_>,
        r: &Rotation,
        why: &str,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let Some(id) = r
            .target
            .clone()
            .or_else(|| ctx.snapshot.gates.desired_ami.clone())
        else {
            return Ok(());
        };
        let pinned = ctx
            .record
            .as_ref()
            .and_then(|rec| rec.pin.as_ref())
            .is_some_and(|p| p.ami == id);
        let resolved = ctx.record.as_ref().and_then(|rec| {
            rec.desired
                .iter()
                .chain(rec.previous_desired.iter())
                .chain(rec.history.iter().map(|h| &h.ami))
                .find(|a| a.id == id)
                .cloned()
        });
        let target = match resolved {
            Some(ami) if !pinned => {
                crate::promotion::Target::Release(crate::promotion::release_of(&ami))
            }
            _ => crate::promotion::Target::Ami(id),
        };
        self.record_quarantine(ctx, target, r, why, now).await
    }

    async fn record_quarantine(
        &self,
        ctx: &mut PoolCtx<'_>,
        target: crate::promotion::Target,
        r: &Rotation,
        why: &str,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let q = crate::promotion::Quarantine {
            target: target.clone(),
            reason: why.to_string(),
            by: "nodecycle".to_string(),
            at: now,
            cause: crate::promotion::Cause::ReplacementNotReady {
                pool: r.pool.clone(),
                instance: r.instance_id.clone(),
            },
            outbox: Vec::new(),
        };
        let new = self.announce.put_quarantine(&q).await?;
        if new {
            tracing::error!(pool = %r.pool, target = %target, decision = "quarantined", reason = %why, "no pool takes it again; this pool rolls back");
        }
        ctx.quarantined.0.push(q);
        ctx.quarantined_now = true;
        Ok(())
    }

    /// Records the pool as halted with `why`.
    pub(super) async fn halt(
        &self,
        pool: &str,
        why: &str,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let halt = RecordedError {
            message: why.to_string(),
            at: now,
        };
        self.announce
            .update_pool(pool, now, |r| state::PoolRecord {
                halted: r.halted.clone().or_else(|| Some(halt.clone())),
                ..r.clone()
            })
            .await?;
        tracing::error!(pool, decision = "halted", reason = %why);
        Ok(())
    }
}

/// The Kubernetes Event a rotation's step leaves on the old node (`kubectl describe node` tells
/// the story: started, terminating, failed, cancelled); the drain's own events (cordon,
/// evictions, drained) come from the drain. Best effort: a node already gone, or an API error,
/// only logs.
async fn node_event(ctx: &PoolCtx<'_>, r: &Rotation, command: &Command, from: Step, to: Step) {
    let image = ctx
        .snapshot
        .members
        .iter()
        .find(|m| m.instance_id == r.instance_id)
        .and_then(|m| m.image_id.clone())
        .unwrap_or_else(|| "an unknown AMI".into());
    let target = r.target.as_deref().unwrap_or("the desired AMI");
    let event = match to {
        Step::Surging | Step::Cordoned | Step::Draining if from == Step::Pending => {
            k::NodeEvent::normal(
                "RotationStarted",
                format!(
                    "nodecycle replaces this node ({:?}) in pool {}: {image} -> {target}",
                    r.reason, r.pool
                ),
            )
        }
        Step::Terminating => k::NodeEvent::normal(
            "RotationTerminating",
            format!(
                "nodecycle terminates this node's instance {} (drained)",
                r.instance_id
            ),
        ),
        Step::Failed => k::NodeEvent::warning(
            "RotationFailed",
            match command {
                Command::Fail { why, .. } => why.to_string(),
                _ => "the rotation failed".into(),
            },
        ),
        Step::Cancelled => k::NodeEvent::normal(
            "RotationCancelled",
            format!("the rotation towards {target} was cancelled; the node stays"),
        ),
        _ => return,
    };
    let known = ctx.observed_node(&r.instance_id);
    match k::node_of(ctx.kube.as_ref(), &r.instance_id, known).await {
        Ok(Some(node)) => {
            if let Err(e) = ctx.kube.record_event(&node, &event).await {
                tracing::warn!(pool = %r.pool, instance = %r.instance_id, error = %e, "cannot record the node event");
            }
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(pool = %r.pool, instance = %r.instance_id, error = %e, "cannot find the node for its event")
        }
    }
}
