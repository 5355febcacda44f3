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
use crate::kube::{self as k, DrainState, NodeOps};
use crate::plan::Snapshot;
use crate::plan::{self, Action};
use crate::policy::Policy;
use crate::port::ErrorKind;
use crate::port::PortError;
use crate::rotation::group::{self as holds, GroupCommand, GroupHolds, MaxRaise};
use crate::rotation::step::{self, Command, FinishReason, GiveBack, PoolView};
use crate::rotation::{Rotation, Step, Surge, Undo, UnitRelease};
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
    /// The version `record` was read at, while no write of this pass changed it (`None`
    /// then: writes read it again).
    pub record_version: Option<u64>,
    /// Where this pass's rotation writes leave their events for the end of the cluster's
    /// pass.
    pub events: &'a crate::announce::Deferred,
    /// A managed pool's update record as the cluster's batched read found it (taken by the
    /// managed pass; `None`: read it).
    pub managed_update: Option<super::observe::UpdateRead>,
    /// Quarantine in force.
    pub quarantined: crate::promotion::Quarantined,
    /// Set when this pass quarantined something (the pool is planned again).
    pub quarantined_now: bool,
    /// The group's latest unsuccessful scaling activity (read when a surge waits for a
    /// launch).
    pub launch_problem: Option<crate::fleet::LaunchProblem>,
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

mod capacity;
mod node;
mod record;

/// The rotation records the pass observed, by instance, with the versions it read them at.
fn observed_records(ctx: &PoolCtx<'_>) -> BTreeMap<String, Versioned<Rotation>> {
    ctx.snapshot
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
        .collect()
}

/// `records` and `moving` as they are once `starts` are recorded (each staged with its
/// events, at the version of the finished record it replaces, else new).
fn with_starts(
    records: &BTreeMap<String, Versioned<Rotation>>,
    moving: &BTreeSet<String>,
    starts: &[Rotation],
) -> (BTreeMap<String, Versioned<Rotation>>, BTreeSet<String>) {
    let mut planned = records.clone();
    let mut planned_moving = moving.clone();
    for r in starts {
        let old = records.get(&r.instance_id);
        let pending = crate::announce::stage::stage_rotation(old.map(|v| &v.value), r.clone());
        let version = old.map_or(0, |v| v.version);
        planned.insert(
            r.instance_id.clone(),
            Versioned {
                value: pending,
                version,
            },
        );
        planned_moving.insert(r.instance_id.clone());
    }
    (planned, planned_moving)
}

/// The pool record written with a pass's starts: the process holds `commands` take (recorded
/// before the calls) and the soak ledger this pass observes, staged with its events.
fn pool_record_with(
    ctx: &PoolCtx<'_>,
    record: &state::PoolRecord,
    commands: &[GroupCommand],
    now: DateTime<Utc>,
) -> state::PoolRecord {
    let mut next = record.clone();
    for c in commands {
        if let GroupCommand::Suspend { process } = c
            && !next.group_holds.suspended.contains(process)
        {
            next.group_holds.suspended.push(process.clone());
        }
    }
    let current = super::fully_on_release(&ctx.snapshot, record);
    let current = super::as_fully_on(&current);
    if let Some(ledger) = crate::promotion::ledger::observe(&record.ledger, current, now) {
        next.ledger = ledger;
    }
    crate::announce::stage::stage_pool(record, next, now)
}

/// What a saved step change means for the pass: the move from `from`, or `Lost` when another
/// writer changed the record first.
fn moved(from: Step, saved: Option<Versioned<Rotation>>) -> Result<Performed, PortError> {
    Ok(saved.map_or(Performed::Lost, |s| Performed::Step(from, s.value.step)))
}

/// The decision line of a step change of `r` by `command` to `to`.
fn log_move(r: &Rotation, command: &Command, to: Step, what: &str) {
    tracing::info!(pool = %r.pool, instance = %r.instance_id, command = command.name(), from = ?r.step, to = ?to, decision = what);
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
        let mut records = observed_records(ctx);
        let mut moving: BTreeSet<String> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Advance { instance_id, .. } => Some(instance_id.clone()),
                _ => None,
            })
            .collect();
        let swept = (self.cell.announce)
            .sweep_pool(&plan.pool, ctx.record.as_ref(), &mut records, now)
            .await;
        report.events_swept = swept.put;
        let starts = plan.rotations_to_start(now);
        let at_once = self
            .start_at_once(ctx, &plan.pool, &starts, &mut records, &mut moving, report)
            .await;
        let (group_commands, steps, surging) = match at_once {
            Some(done) => done,
            None => {
                self.start_one_by_one(&plan.pool, starts, &mut records, &mut moving, report)
                    .await;
                let (commands, steps) = self.step_plan(ctx, &records, &moving, now);
                (commands, steps, BTreeSet::new())
            }
        };
        // The group first: AZRebalance is suspended before any surge launches.
        for c in group_commands {
            if let Err(e) = self.group_command(ctx, &plan.pool, &c, now).await {
                tracing::warn!(pool = %plan.pool, command = %crate::log_field::json(&c), kind = ?e.kind, error = %e, "group command failed; retried next pass");
                report.errors.push(format!("group: {e}"));
            }
        }
        self.run_steps(
            ctx, &plan.pool, &steps, &records, &surging, deadline, report,
        )
        .await;
        let replacing = crate::plan::landing::replacing(&ctx.snapshot, now);
        self.apply_marks(ctx, &plan.pool, &steps, replacing.as_ref())
            .await;
        Ok(())
    }

    /// Starts `starts` one conditional write at a time (a finished record of the same
    /// instance is replaced): what the pass does when they cannot start in one write.
    async fn start_one_by_one(
        &self,
        pool: &str,
        starts: Vec<Rotation>,
        records: &mut BTreeMap<String, Versioned<Rotation>>,
        moving: &mut BTreeSet<String>,
        report: &mut PoolReport,
    ) {
        for rotation in starts {
            let old = records.get(&rotation.instance_id);
            let (before, expected) = (old.map(|v| v.value.clone()), old.map(|v| v.version));
            let instance = rotation.instance_id.clone();
            match self.put_rotation(before.as_ref(), rotation, expected).await {
                Ok(Some(v)) => {
                    tracing::info!(pool = %pool, instance = %instance, reason = ?v.value.reason, forced = v.value.forced, decision = "rotation started");
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
    }

    /// Performs the step plan's command of each rotation in turn, while the invocation has
    /// more than the reserve left (the rest continue next pass). A surge whose intent the
    /// pass's first write recorded (`surging`) only raises. Each step change is counted, listed
    /// and announced on the node; a failed command is reported and retried next pass.
    #[allow(clippy::too_many_arguments)]
    async fn run_steps(
        &self,
        ctx: &mut PoolCtx<'_>,
        pool: &str,
        steps: &step::StepPlan,
        records: &BTreeMap<String, Versioned<Rotation>>,
        surging: &BTreeSet<String>,
        deadline: Instant,
        report: &mut PoolReport,
    ) {
        for (instance, command) in &steps.commands {
            if deadline.saturating_duration_since(Instant::now()) < self.settings.reserve {
                report.errors.push(
                    "invocation time nearly used up; remaining steps continue next pass".into(),
                );
                return;
            }
            let Some(v) = records.get(instance).cloned() else {
                continue;
            };
            let rotation = v.value.clone();
            if let Command::Wait { why } = command {
                report.waiting.push(format!("{instance}: {why}"));
            }
            let performed = match command {
                // Its intent was recorded by the pass's first write: only the raise is left.
                Command::Surge { above_max, .. } if surging.contains(instance) => self
                    .raise(ctx, &v.value, *above_max)
                    .await
                    .map(|()| Performed::Step(Step::Pending, Step::Surging)),
                _ => self.perform(&mut *ctx, v, command).await,
            };
            match performed {
                Ok(Performed::Step(from, to)) if from != to => {
                    report.metrics.step(from, to, false);
                    report.steps.push(format!("{instance}: {from:?} -> {to:?}"));
                    node_event(ctx, &rotation, command, from, to).await;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(pool = %pool, instance = %instance, command = command.name(), kind = ?e.kind, error = %e, "step failed; retried next pass");
                    report
                        .errors
                        .push(format!("{instance} ({}): {e}", command.name()));
                }
            }
        }
    }

    /// The group commands and the step plan of `records` (`moving`: the instances the plan
    /// advances), from what the pass observed (pure).
    fn step_plan(
        &self,
        ctx: &PoolCtx<'_>,
        records: &BTreeMap<String, Versioned<Rotation>>,
        moving: &BTreeSet<String>,
        now: DateTime<Utc>,
    ) -> (Vec<GroupCommand>, step::StepPlan) {
        let rotations: Vec<Rotation> = records.values().map(|v| v.value.clone()).collect();
        let quarantined = ctx.quarantined_images();
        let group_holds = ctx
            .record
            .as_ref()
            .map(|r| r.group_holds.clone())
            .unwrap_or_default();
        let commands = holds::commands(&ctx.snapshot.group, &rotations, &group_holds, true);
        let view = PoolView {
            group: &ctx.snapshot.group,
            members: &ctx.snapshot.members,
            desired_ami: ctx.snapshot.gates.desired_ami.as_deref(),
            quarantined: &quarantined,
            may_raise_max: holds::may_raise_max(ctx.policy.surge_above_max_size, &group_holds, now),
            launch_problem: ctx.launch_problem.as_ref(),
            terminate_first: crate::plan::Replacement::of(
                ctx.policy,
                &ctx.snapshot.group,
                &rotations,
            )
            .terminate_first(),
        };
        let moving: BTreeSet<&str> = moving.iter().map(String::as_str).collect();
        let steps = step::step_pool(&view, &rotations, &moving, now, &self.settings.step());
        (commands, steps)
    }

    /// Starts `starts` with one write (one transaction): their records, each already at
    /// `Surging` with its surge's intent when its first step is a surge (else `Pending`),
    /// and the pool record from the version the pass read, with the process holds the group
    /// commands take (recorded before the calls), the new rotations in its index and the soak
    /// ledger this pass observes. Crash-safe as one write at a time is: each intent is recorded
    /// before its call. Their events wait in `ctx.events` for the end of the cluster's pass.
    /// Returns the group commands and step plan computed with them and the instances whose
    /// surge is recorded (only their raise is left); `None`, with nothing written, when the
    /// pool record changed since it was read (or is unknown, or the write would stage pool
    /// events): the caller starts them one write at a time, reading again.
    #[allow(clippy::type_complexity)]
    async fn start_at_once(
        &self,
        ctx: &mut PoolCtx<'_>,
        pool: &str,
        starts: &[Rotation],
        records: &mut BTreeMap<String, Versioned<Rotation>>,
        moving: &mut BTreeSet<String>,
        report: &mut PoolReport,
    ) -> Option<(Vec<GroupCommand>, step::StepPlan, BTreeSet<String>)> {
        let now = ctx.clock.now();
        if starts.is_empty() || starts.len() >= state::TRANSACT_LIMIT {
            return None;
        }
        let (Some(record), Some(version)) = (ctx.record.clone(), ctx.record_version) else {
            return None;
        };
        let (planned, planned_moving) = with_starts(records, moving, starts);
        let (commands, steps) = self.step_plan(ctx, &planned, &planned_moving, now);
        let next = pool_record_with(ctx, &record, &commands, now);
        if next.outbox != record.outbox {
            return None;
        }
        let mut surging = BTreeSet::new();
        let mut writes = Vec::with_capacity(starts.len());
        for r in starts {
            let id = &r.instance_id;
            let pending = planned.get(id)?.value.clone();
            let command = steps.commands.iter().find(|(i, _)| i == id).map(|(_, c)| c);
            let written = match command {
                Some(Command::Surge {
                    baseline,
                    read,
                    above_max,
                }) => {
                    surging.insert(id.clone());
                    let next = surging_record(&pending, baseline, *read, *above_max, now);
                    crate::announce::stage::stage_rotation(Some(&pending), next)
                }
                _ => pending,
            };
            let expected = records.get(id).map(|v| v.version);
            let ttl = crate::rotation::retention(&written);
            writes.push((written, expected, ttl));
        }
        match self
            .cell
            .state
            .put_pool_and_rotations(&next, version, &writes)
            .await
        {
            Ok(Some((stored, v))) => {
                ctx.record = Some(stored);
                ctx.record_version = Some(v);
            }
            Ok(None) => {
                tracing::info!(
                    pool,
                    decision = "one write at a time",
                    "the pool record changed since the pass read it; its rotations start one write at a time"
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(pool, error = %e, "cannot record the starts in one write; one write at a time");
                return None;
            }
        }
        for (written, expected, _) in writes {
            let id = written.instance_id.clone();
            let before = records
                .get(&id)
                .map(|v| v.value.outbox.clone())
                .unwrap_or_default();
            let staged: Vec<crate::bus::BusEvent> = crate::bus::staged(&before, &written.outbox)
                .into_iter()
                .cloned()
                .collect();
            tracing::info!(pool, instance = %id, reason = ?written.reason, forced = written.forced, step = ?written.step, decision = "rotation started");
            let stored = Versioned {
                value: written,
                version: expected.map_or(1, |v| v + 1),
            };
            ctx.events.push(stored.clone(), staged);
            report.started.push(id.clone());
            moving.insert(id.clone());
            records.insert(id, stored);
        }
        Some((commands, steps, surging))
    }

    /// Brings the nodes' marks (scale-down-disabled on surge and replacement nodes, the
    /// load balancer exclusion on draining ones: this pass's step plan; the rollout's
    /// `PreferNoSchedule` taint on the nodes it replaces: `replacing`, `None` to leave it) to
    /// what this pass wants. Best effort: a failed patch is logged and repeated next pass.
    async fn apply_marks(
        &self,
        ctx: &PoolCtx<'_>,
        pool: &str,
        steps: &step::StepPlan,
        replacing: Option<&BTreeSet<String>>,
    ) {
        let changes = crate::rotation::marks::changes(
            &ctx.snapshot.members,
            &steps.protect,
            &steps.draining,
            replacing,
        );
        for c in changes {
            let marked = if c.scale_down_disabled.is_some() || c.exclude_from_lb.is_some() {
                ctx.kube
                    .mark(&c.node, c.scale_down_disabled, c.exclude_from_lb)
                    .await
            } else {
                Ok(false)
            };
            let tainted = match c.replacing {
                Some(on) => ctx.kube.prefer_elsewhere(&c.node, on).await,
                None => Ok(false),
            };
            match marked.and(tainted) {
                Ok(_) => {
                    tracing::info!(pool, instance = %c.instance, node = %c.node, scale_down_disabled = c.scale_down_disabled, exclude_from_lb = c.exclude_from_lb, replacing = c.replacing, decision = "node marks", "protect surge and replacement nodes from Cluster Autoscaler while their rotation runs; take draining nodes out of load balancers; steer pods away from nodes the rollout replaces")
                }
                Err(e) => {
                    tracing::warn!(pool, instance = %c.instance, node = %c.node, error = %e, "cannot mark the node; next pass")
                }
            }
        }
    }

    /// Changes the pool's group holds in its state record (and `ctx.record`).
    async fn update_holds(
        &self,
        ctx: &mut PoolCtx<'_>,
        pool: &str,
        now: DateTime<Utc>,
        change: impl Fn(&mut GroupHolds) + Send + Sync,
    ) -> Result<(), PortError> {
        let saved = self
            .cell
            .announce
            .update_pool(pool, now, |r| {
                let mut next = r.clone();
                change(&mut next.group_holds);
                next
            })
            .await?;
        if let Some(record) = ctx.record.as_mut() {
            change(&mut record.group_holds);
        }
        let _ = saved;
        Ok(())
    }

    /// Performs one group command (suspend or resume a process, restore `MaxSize`), recording
    /// in the pool's record before taking and after releasing.
    async fn group_command(
        &self,
        ctx: &mut PoolCtx<'_>,
        pool: &str,
        command: &GroupCommand,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let group = ctx.snapshot.group.name.clone();
        match command {
            GroupCommand::Suspend { process } => {
                let recorded = ctx
                    .record
                    .as_ref()
                    .is_some_and(|r| r.group_holds.suspended.contains(process));
                if !recorded {
                    let p = process.clone();
                    self.update_holds(ctx, pool, now, move |h| {
                        if !h.suspended.contains(&p) {
                            h.suspended.push(p.clone());
                        }
                    })
                    .await?;
                }
                self.ports
                    .groups
                    .suspend_processes(&group, std::slice::from_ref(process))
                    .await?;
                tracing::info!(pool, group = %group, process = %process, decision = "process suspended", "nodecycle has rotations in flight; resumed when none is");
            }
            GroupCommand::Resume { process } => {
                self.ports
                    .groups
                    .resume_processes(&group, std::slice::from_ref(process))
                    .await?;
                let p = process.clone();
                self.update_holds(ctx, pool, now, move |h| h.suspended.retain(|s| *s != p))
                    .await?;
                tracing::info!(pool, group = %group, process = %process, decision = "process resumed", "no rotation in flight; nodecycle had suspended it");
            }
            GroupCommand::RestoreMaxSize { to } => {
                self.ports.groups.set_max_size(&group, *to).await?;
                self.update_holds(ctx, pool, now, |h| h.max_size = None)
                    .await?;
                tracing::info!(pool, group = %group, max_size = to, decision = "MaxSize restored", "no surge holds a unit any more");
            }
            GroupCommand::ForgetMaxSize { why } => {
                self.update_holds(ctx, pool, now, |h| h.max_size = None)
                    .await?;
                tracing::info!(pool, group = %group, decision = "MaxSize raise forgotten", reason = %why);
            }
        }
        Ok(())
    }

    /// Adds one unit of desired capacity to a fresh read of the group (the SDK has no atomic
    /// increment: read, then set at once). At `MaxSize`: with `above_max`, `MaxSize` is raised
    /// by one first (recorded in the pool's record before the call); without, nothing (the
    /// next pass goes on without a surge). Never lowers anything.
    async fn raise(
        &self,
        ctx: &mut PoolCtx<'_>,
        r: &Rotation,
        above_max: bool,
    ) -> Result<(), PortError> {
        let group = ctx.snapshot.group.name.clone();
        let now = ctx.clock.now();
        let s = self.ports.groups.sizes(&group).await?;
        if s.desired >= s.max {
            if !above_max {
                return Err(PortError::new(
                    "autoscaling:SetDesiredCapacity",
                    ErrorKind::Invalid,
                    format!(
                        "group {group} is at MaxSize {} (desired {}): not raised; the rotation goes on without a surge unless room comes",
                        s.max, s.desired
                    ),
                ));
            }
            let before = ctx.record.as_ref().and_then(|r| r.group_holds.max_size);
            let raised = MaxRaise {
                original: before.map_or(s.max, |b| b.original),
                raised_to: s.max + 1,
            };
            self.update_holds(ctx, &r.pool, now, move |h| h.max_size = Some(raised))
                .await?;
            if let Err(e) = self.ports.groups.set_max_size(&group, s.max + 1).await {
                if e.kind == ErrorKind::AccessDenied {
                    let message = format!(
                        "cannot raise MaxSize of {group} for a surge ({e}): deploy with AutoScalingGroupUpdates=Enabled to allow it; rotating without a surge meanwhile"
                    );
                    let m = message.clone();
                    self.update_holds(ctx, &r.pool, now, move |h| {
                        h.max_size = before;
                        h.max_size_denied = Some((now, m.clone()));
                    })
                    .await?;
                    tracing::warn!(pool = %r.pool, instance = %r.instance_id, decision = "no surge above MaxSize", reason = %message);
                    return Err(PortError::new(e.operation, e.kind, message));
                }
                return Err(e);
            }
            tracing::info!(pool = %r.pool, instance = %r.instance_id, group = %group, from = s.max, to = s.max + 1, decision = "MaxSize raised", "policy disruption.surgeAboveMaxSize; restored when no surge holds a unit");
        }
        self.ports
            .groups
            .set_desired_capacity(&group, s.desired + 1)
            .await?;
        tracing::info!(pool = %r.pool, instance = %r.instance_id, group = %group, read = s.desired, desired = s.desired + 1, decision = "capacity raised by one", "a surge for the replacement, on a fresh read");
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
        self.cell
            .announce
            .record_rotation(before, rotation, expected)
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
        v: Versioned<Rotation>,
        undo: &Undo,
    ) -> Result<Option<Versioned<Rotation>>, PortError> {
        let intent = UnitRelease::Undoing(undo.clone());
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
                self.ports
                    .groups
                    .terminate_instance(instance_id, true)
                    .await?;
            }
            // Never performed (see `Undo::LowerTo`): nodecycle never lowers desired capacity.
            Undo::LowerTo { .. } | Undo::Nothing => {}
        }
        tracing::info!(pool = %rotation.pool, instance = %rotation.instance_id, undo = %crate::log_field::json(undo), decision = "surge given back");
        let given = rotation.clone().with_release(UnitRelease::Given);
        self.save(&v, given).await
    }

    /// Performs one command for the rotation `v` and records the result, by command family:
    /// capacity (surge, raise, give back, terminate: [`capacity`]), the node (replacement,
    /// cordon, drain: [`node`]) and the record's end (finish, cancel, fail: [`record`]).
    /// Every command is matched by name: a new one makes the compiler name this site.
    async fn perform(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
    ) -> Result<Performed, PortError> {
        match command {
            Command::Wait { why } => {
                let r = &v.value;
                tracing::debug!(pool = %r.pool, instance = %r.instance_id, why = %crate::log_field::json(why), decision = "waiting");
                Ok(Performed::Idle)
            }
            Command::Surge {
                baseline,
                read,
                above_max,
            } => {
                self.surge(ctx, v, command, baseline, *read, *above_max)
                    .await
            }
            Command::Raise { above_max } => self.raise_again(ctx, &v.value, *above_max).await,
            Command::DropSurge => self.drop_surge(ctx, v, command).await,
            Command::UndoSurge { undo } => {
                let saved = self.give_back(v, undo).await?;
                Ok(saved.map_or(Performed::Lost, |_| Performed::Idle))
            }
            Command::Terminate {
                decrement,
                relaunch,
            } => self.terminate(ctx, v, command, *decrement, *relaunch).await,
            Command::ClaimReplacement { id } => self.claim_replacement(ctx, v, command, id).await,
            Command::Cordon => self.cordon(ctx, v, command).await,
            Command::DrainStep => self.drain_step(ctx, v, command).await,
            Command::Finish { why, undo } => self.finish(ctx, v, command, why, undo.as_ref()).await,
            Command::Cancel {
                image,
                uncordon,
                undo,
            } => {
                self.cancel(ctx, v, command, image, *uncordon, undo.as_ref())
                    .await
            }
            Command::Fail {
                why,
                halt,
                quarantine,
                undo,
            } => {
                let how = record::Failing {
                    why,
                    halt: *halt,
                    quarantine: *quarantine,
                    undo: undo.as_ref(),
                };
                self.fail(ctx, v, command, how).await
            }
        }
    }

    /// Ends the rotation `v` that may owe its surge back (`Finish`, `Cancel`, `Fail`): saves
    /// `ended` with its surge's release as `undo` says (given back now, or owed), then runs
    /// `after` (logs and clean-up, only once the end is recorded), then gives the surge back
    /// when `undo` says now. `Lost` when another writer changed the record first.
    async fn end(
        &self,
        v: &Versioned<Rotation>,
        ended: Rotation,
        undo: Option<&GiveBack>,
        after: impl std::future::Future<Output = Result<(), PortError>>,
    ) -> Result<Performed, PortError> {
        let (from, to) = (v.value.step, ended.step);
        let ended = match undo {
            Some(g) => with_give_back(ended, g),
            None => ended,
        };
        let Some(saved) = self.save(v, ended).await? else {
            return Ok(Performed::Lost);
        };
        after.await?;
        if let Some(u) = undo.and_then(GiveBack::now) {
            self.give_back(saved, u).await?;
        }
        Ok(Performed::Step(from, to))
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
        let new = self.cell.announce.put_quarantine(&q).await?;
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
        self.cell
            .announce
            .update_pool(pool, now, |r| state::PoolRecord {
                halted: r.halted.clone().or_else(|| Some(halt.clone())),
                ..r.clone()
            })
            .await?;
        tracing::error!(pool, decision = "halted", reason = %why);
        Ok(())
    }
}

/// `r` at `Surging` with the intent of its surge (`Command::Surge`'s `baseline`, `read` and
/// `above_max`), recorded before the capacity is raised.
fn surging_record(
    r: &Rotation,
    baseline: &[String],
    read: i32,
    above_max: bool,
    now: DateTime<Utc>,
) -> Rotation {
    Rotation {
        surge: Some(Surge {
            target_desired: 0,
            baseline: baseline.to_vec(),
            base: None,
            read: Some(read),
            above_max,
            release: None,
        }),
        ..r.enter(Step::Surging, now)
    }
}

/// `r` with its surge's give-back recorded: [`UnitRelease::Undoing`] now, or [`UnitRelease::Owed`]
/// while the unit's launch is still to come.
fn with_give_back(r: Rotation, g: &GiveBack) -> Rotation {
    match g {
        GiveBack::Now { undo } => r.with_release(UnitRelease::Undoing(undo.clone())),
        GiveBack::Later => r.with_release(UnitRelease::Owed),
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
