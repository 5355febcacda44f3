//! The step function of rotations (pure): from one pool's observed state (its members, group
//! and rotation records), the rotations the planner moves this pass, `now` and the settings, the
//! command the executor performs for each rotation. The executor decides nothing: it performs
//! each command, records the result, and stops at the first failed call of a rotation (the
//! next pass recomputes everything from what it then observes).
//!
//! Per rotation, by step:
//! - `Pending`: the instance left the group → [`Command::Finish`]; room under the group's
//!   `MaxSize` → [`Command::Surge`] (target `base + active surges + 1`); else
//!   [`Command::Cordon`] (replace without surge).
//! - `Surging`: the old instance left → `Finish` with the surge undone; a Ready instance on the
//!   desired AMI launched since the surge and claimed by no other rotation →
//!   [`Command::ClaimReplacement`]; past `replacement_timeout` → [`Command::Fail`] (halts the
//!   pool) with the surge undone; else [`Command::Wait`].
//! - `Cordoned` → [`Command::Cordon`]; `Draining` → [`Command::DrainStep`] (both: the old
//!   instance gone from the group entirely → `Finish`, surge undone).
//! - `Terminating`: the instance still in service → [`Command::Terminate`] (decrementing
//!   desired capacity when its surge is active); already leaving → `Finish` (the surge is
//!   undone unless this rotation's own terminate was recorded as under way).
//! - Finished with a surge unit still owed → [`Command::UndoSurge`].
//!
//! Undo targets ([`Undo`]) are chosen so that two rotations never undo with the same instance:
//! a recorded undo keeps its target; otherwise an instance launched since the surge, claimed
//! by no rotation and not leaving, not-Ready first, newest first; with none, desired capacity
//! is lowered to `base + remaining surges` (never below `MinSize`) if it is above that.
//!
//! Desired capacity: [`StepPlan::capacity`] is `base + surges active after the pass` (capped
//! at `MaxSize`); the executor raises desired capacity to it when below (repairing a surge whose
//! capacity call failed or never ran), after the pass's undos. It never lowers capacity
//! except by the targeted undos above, because lowering desired capacity lets Auto Scaling pick
//! which instance to terminate, undrained.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Release, Rotation, Step, Surge, Undo};
use crate::fleet::{Group, Lifecycle, Member};

/// Tunables the step function needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepSettings {
    /// A replacement not Ready this long after the surge fails the rotation.
    pub replacement_timeout: Duration,
}

/// What one pool looks like this pass.
#[derive(Debug, Clone, Copy)]
pub struct PoolView<'a> {
    /// The group (desired capacity, min and max size).
    pub group: &'a Group,
    /// Its instances joined with their nodes.
    pub members: &'a [Member],
    /// The AMI replacements must run; `None` = unresolved.
    pub desired_ami: Option<&'a str>,
    /// Quarantined image ids: a rotation towards one of them is cancelled.
    pub quarantined: &'a BTreeSet<String>,
}

/// Why a rotation finishes without terminating its instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FinishReason {
    /// The instance left the group (or is leaving) before nodecycle terminated it.
    InstanceLeft,
    /// Its terminate was recorded as under way and the instance is now leaving.
    Terminated,
}

/// Why a rotation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "failure", rename_all = "camelCase")]
pub enum Failure {
    /// No replacement became Ready on the desired AMI within the timeout.
    #[serde(rename_all = "camelCase")]
    ReplacementNotReady {
        /// The instance being replaced.
        instance_id: String,
        /// The timeout that passed.
        #[serde(serialize_with = "crate::duration::serialize")]
        timeout: Duration,
        /// The AMI the replacement was to run (the pool's desired AMI).
        image: Option<String>,
        /// Instances launched since the surge that never became Ready on it.
        fresh: Vec<String>,
    },
}

impl Failure {
    /// What failed, without what nodecycle does about it (the quarantine's reason).
    pub fn what(&self) -> String {
        match self {
            Failure::ReplacementNotReady {
                instance_id,
                timeout,
                image,
                fresh,
            } => format!(
                "replacement for {instance_id} not Ready within {} on {} (new instances: {})",
                crate::duration::format(*timeout),
                image.as_deref().unwrap_or("an unresolved AMI"),
                if fresh.is_empty() {
                    "none".to_string()
                } else {
                    fresh.join(", ")
                }
            ),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::ReplacementNotReady { .. } => {
                write!(f, "{}; surge undone, pool halted", self.what())
            }
        }
    }
}

/// Why a rotation does nothing this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "wait", rename_all = "camelCase")]
pub enum WaitReason {
    /// The surge's replacement is not Ready yet.
    #[serde(rename_all = "camelCase")]
    Replacement {
        /// Surging since.
        since: DateTime<Utc>,
        /// Instances launched since the surge, not Ready on the desired AMI yet.
        fresh: Vec<String>,
    },
}

/// One thing the executor does for one rotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "command", rename_all = "camelCase")]
pub enum Command {
    /// Record the surge (step `Surging`), then raise desired capacity to `target` (through
    /// [`StepPlan::capacity`]).
    Surge {
        /// Desired capacity with this surge.
        target: i32,
        /// Desired capacity without surges.
        base: i32,
        /// Instances in the group now (the replacement is an instance not among them).
        baseline: Vec<String>,
    },
    /// Record `id` as the replacement; step `Cordoned`.
    ClaimReplacement {
        /// The replacement instance.
        id: String,
    },
    /// Cordon and taint the node, start its drain (step `Draining`; `Terminating` when it has
    /// no node).
    Cordon,
    /// One drain step (step `Terminating` when done).
    DrainStep,
    /// Terminate the instance through its group (with a decrement when its surge is active:
    /// record that intent first), delete its node; step `Done`.
    Terminate {
        /// Decrement desired capacity (the surge's unit goes with the old instance).
        decrement: bool,
    },
    /// Give back the surge's unit: record `undo` as [`Release::Undoing`], perform it, record
    /// [`Release::Given`].
    UndoSurge {
        /// How.
        undo: Undo,
    },
    /// Step `Done` without terminating; with `undo`, the surge is given back as for `UndoSurge`.
    Finish {
        /// Why.
        why: FinishReason,
        /// The surge's undo, if the rotation holds one.
        undo: Option<Undo>,
    },
    /// Step `Failed`, halt the pool when `halt`, quarantine the release of the image the
    /// replacement never became Ready on when `quarantine`, then give the surge back with `undo`.
    Fail {
        /// Why.
        why: Failure,
        /// Halt the pool.
        halt: bool,
        /// Quarantine the release the rotation was rolling out.
        quarantine: bool,
        /// The surge's undo, if the rotation holds one.
        undo: Option<Undo>,
    },
    /// Step `Cancelled` (the AMI it rolls out is quarantined): uncordon the node when
    /// `uncordon`, then give the surge back with `undo` (its own replacement first).
    Cancel {
        /// The quarantined image it was rolling out.
        image: String,
        /// The node was cordoned by this rotation.
        uncordon: bool,
        /// The surge's undo, if the rotation holds one.
        undo: Option<Undo>,
    },
    /// Nothing this pass.
    Wait {
        /// Why.
        why: WaitReason,
    },
}

impl Command {
    /// The command's name, for logs and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Surge { .. } => "surge",
            Command::ClaimReplacement { .. } => "claimReplacement",
            Command::Cordon => "cordon",
            Command::DrainStep => "drainStep",
            Command::Terminate { .. } => "terminate",
            Command::UndoSurge { .. } => "undoSurge",
            Command::Finish { .. } => "finish",
            Command::Fail { .. } => "fail",
            Command::Cancel { .. } => "cancel",
            Command::Wait { .. } => "wait",
        }
    }

    /// The undo this command performs, if any.
    pub fn undo(&self) -> Option<&Undo> {
        match self {
            Command::UndoSurge { undo } => Some(undo),
            Command::Finish { undo, .. }
            | Command::Fail { undo, .. }
            | Command::Cancel { undo, .. } => undo.as_ref(),
            _ => None,
        }
    }
}

/// The commands of one pass for one pool.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepPlan {
    /// `(instance, command)` per rotation, in the order to perform them: give-backs first
    /// (undos, failures, terminations), then the rest, then surges.
    pub commands: Vec<(String, Command)>,
    /// Desired capacity the group must have at least once the commands are performed
    /// (`base + surges active after the pass`, capped at `MaxSize`); `None` when no surge is
    /// active after the pass.
    pub capacity: Option<i32>,
}

/// A rotation's commands for one pass (see the module documentation). `rotations` are every
/// record of the pool (any step); `moving` the instances whose in-flight rotation the planner
/// advances or starts this pass (others only settle owed surges).
pub fn step_pool(
    view: &PoolView<'_>,
    rotations: &[Rotation],
    moving: &BTreeSet<&str>,
    now: DateTime<Utc>,
    settings: &StepSettings,
) -> StepPlan {
    let mut ctx = Ctx::new(view, rotations);
    let mut order: Vec<&Rotation> = rotations.iter().collect();
    order.sort_by(|a, b| {
        (a.created_at, a.instance_id.as_str()).cmp(&(b.created_at, b.instance_id.as_str()))
    });
    // Rotations still at `Pending` come last: their surges are counted from the capacity the
    // pass leaves once every give-back of the pass is decided.
    order.sort_by_key(|r| r.step == Step::Pending);
    let mut give_backs = Vec::new();
    let mut middle = Vec::new();
    let mut surges = Vec::new();
    for r in order {
        let command = if r.in_flight() {
            if !moving.contains(r.instance_id.as_str()) {
                continue;
            }
            step_one(&mut ctx, r, now, settings)
        } else {
            settle(&mut ctx, r)
        };
        let Some(command) = command else { continue };
        let entry = (r.instance_id.clone(), command);
        match &entry.1 {
            Command::Surge { .. } => surges.push(entry),
            Command::UndoSurge { .. }
            | Command::Finish { .. }
            | Command::Fail { .. }
            | Command::Cancel { .. }
            | Command::Terminate { .. } => give_backs.push(entry),
            _ => middle.push(entry),
        }
    }
    let capacity = ctx
        .base
        .filter(|_| ctx.active > 0)
        .map(|b| (b + ctx.active).min(view.group.max_size));
    give_backs.extend(middle);
    give_backs.extend(surges);
    StepPlan {
        commands: give_backs,
        capacity,
    }
}

/// What to do to cancel `rotation` (ops `cancel`), and the undo of its surge (its own
/// replacement goes first); `Err` says why it cannot be cancelled.
pub fn cancel(
    view: &PoolView<'_>,
    rotations: &[Rotation],
    rotation: &Rotation,
) -> Result<Option<Undo>, CancelRefusal> {
    match rotation.step {
        Step::Done | Step::Failed | Step::Cancelled => {
            return Err(CancelRefusal::Finished(rotation.step));
        }
        Step::Terminating => return Err(CancelRefusal::Terminating),
        _ => {}
    }
    let mut ctx = Ctx::new(view, rotations);
    Ok(rotation
        .surge
        .as_ref()
        .filter(|s| s.active())
        .map(|s| ctx.choose_undo(rotation, s, true)))
}

/// Why a rotation cannot be cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRefusal {
    /// It already finished at this step.
    Finished(Step),
    /// It is terminating its instance: too late.
    Terminating,
}

/// The pass so far: capacity accounting and instances already taken.
struct Ctx<'a> {
    view: &'a PoolView<'a>,
    /// Desired capacity without surges (from the active surges' records).
    base: Option<i32>,
    /// Surges holding a unit after the commands decided so far.
    active: i32,
    /// Desired capacity once the undos decided so far are performed.
    desired: i32,
    /// Instances that are some rotation's replacement or undo target (recorded or chosen).
    taken: BTreeSet<String>,
    members: BTreeMap<&'a str, &'a Member>,
}

impl<'a> Ctx<'a> {
    fn new(view: &'a PoolView<'a>, rotations: &[Rotation]) -> Self {
        let mut base = None;
        let mut active = 0;
        let mut taken = BTreeSet::new();
        let mut sorted: Vec<&Rotation> = rotations.iter().collect();
        sorted.sort_by(|a, b| {
            (a.created_at, a.instance_id.as_str()).cmp(&(b.created_at, b.instance_id.as_str()))
        });
        for r in sorted {
            // A replacement stays whatever its rotation's step: it serves (or is being undone
            // by its own rotation's recorded undo).
            if let Some(rep) = &r.replacement {
                taken.insert(rep.clone());
            }
            if let Some(s) = &r.surge {
                if let Some(Release::Undoing(Undo::Terminate { instance_id })) = &s.release
                    && instance_id != &r.instance_id
                {
                    taken.insert(instance_id.clone());
                }
                if r.surge_active() {
                    active += 1;
                    base = base.or(s.base);
                }
            }
        }
        Ctx {
            view,
            base,
            active,
            desired: view.group.desired_capacity,
            taken,
            members: view
                .members
                .iter()
                .map(|m| (m.instance_id.as_str(), m))
                .collect(),
        }
    }

    fn member(&self, id: &str) -> Option<&'a Member> {
        self.members.get(id).copied()
    }

    /// The surge of `r` stops holding a unit this pass.
    fn release(&mut self, r: &Rotation) {
        if r.surge_active() {
            self.active -= 1;
        }
    }

    /// How to give back the unit of `r`'s surge (see the module documentation). With
    /// `own_first`, the rotation's own replacement is the first choice (cancel, failure).
    fn choose_undo(&mut self, r: &Rotation, surge: &Surge, own_first: bool) -> Undo {
        if let Some(Release::Undoing(u)) = &surge.release {
            match u {
                Undo::Terminate { instance_id } => {
                    if self
                        .member(instance_id)
                        .is_some_and(|m| m.lifecycle != Lifecycle::Leaving)
                    {
                        self.desired -= 1;
                    }
                }
                Undo::LowerTo { desired } => self.desired = self.desired.min(*desired),
                Undo::Nothing => {}
            }
            return u.clone();
        }
        if own_first
            && let Some(rep) = &r.replacement
            && self
                .member(rep)
                .is_some_and(|m| m.lifecycle != Lifecycle::Leaving)
        {
            self.desired -= 1;
            return Undo::Terminate {
                instance_id: rep.clone(),
            };
        }
        let mut fresh: Vec<&Member> = self
            .view
            .members
            .iter()
            .filter(|m| {
                !surge.baseline.contains(&m.instance_id)
                    && m.instance_id != r.instance_id
                    && !self.taken.contains(&m.instance_id)
                    && m.lifecycle != Lifecycle::Leaving
            })
            .collect();
        fresh.sort_by(|a, b| {
            (
                a.is_ready(),
                std::cmp::Reverse(a.launch_time),
                &a.instance_id,
            )
                .cmp(&(
                    b.is_ready(),
                    std::cmp::Reverse(b.launch_time),
                    &b.instance_id,
                ))
        });
        if let Some(m) = fresh.first() {
            self.taken.insert(m.instance_id.clone());
            self.desired -= 1;
            return Undo::Terminate {
                instance_id: m.instance_id.clone(),
            };
        }
        // No instance came up for this surge: lower capacity to what the remaining surges need.
        let base = surge.base.or(self.base).unwrap_or(self.desired);
        let floor = (base + self.active).max(self.view.group.min_size);
        if self.desired > floor {
            self.desired -= 1;
            Undo::LowerTo {
                desired: self.desired.max(floor),
            }
        } else {
            Undo::Nothing
        }
    }
}

/// A finished rotation that still owes its surge's unit.
fn settle(ctx: &mut Ctx<'_>, r: &Rotation) -> Option<Command> {
    let surge = r.surge.as_ref().filter(|s| s.owed())?;
    Some(Command::UndoSurge {
        undo: ctx.choose_undo(r, surge, r.step != Step::Done),
    })
}

/// The undo of `r`'s surge when it ends now without terminating with a decrement.
fn undo_on_end(ctx: &mut Ctx<'_>, r: &Rotation, own_first: bool) -> Option<Undo> {
    let surge = r.surge.as_ref().filter(|s| s.active() || s.owed())?;
    ctx.release(r);
    Some(ctx.choose_undo(r, surge, own_first))
}

fn step_one(
    ctx: &mut Ctx<'_>,
    r: &Rotation,
    now: DateTime<Utc>,
    settings: &StepSettings,
) -> Option<Command> {
    let member = ctx.member(&r.instance_id);
    let leaving = member.is_none_or(|m| m.lifecycle == Lifecycle::Leaving);
    let left = |ctx: &mut Ctx<'_>| Command::Finish {
        why: FinishReason::InstanceLeft,
        undo: undo_on_end(ctx, r, false),
    };
    // A rotation towards a quarantined AMI stops before it terminates anything.
    let towards = r.target.as_deref().or_else(|| {
        r.replacement
            .as_deref()
            .and_then(|rep| ctx.member(rep))
            .and_then(|m| m.image_id.as_deref())
    });
    if let Some(image) = towards.filter(|i| ctx.view.quarantined.contains(*i))
        && matches!(
            r.step,
            Step::Pending | Step::Surging | Step::Cordoned | Step::Draining
        )
    {
        return Some(Command::Cancel {
            image: image.to_string(),
            uncordon: matches!(r.step, Step::Cordoned | Step::Draining) && member.is_some(),
            undo: undo_on_end(ctx, r, true),
        });
    }
    Some(match r.step {
        Step::Pending if leaving => left(ctx),
        Step::Pending => {
            let base = ctx.base.unwrap_or(ctx.desired);
            if base + ctx.active < ctx.view.group.max_size {
                ctx.base = Some(base);
                ctx.active += 1;
                Command::Surge {
                    target: base + ctx.active,
                    base,
                    baseline: ctx
                        .view
                        .members
                        .iter()
                        .map(|m| m.instance_id.clone())
                        .collect(),
                }
            } else {
                Command::Cordon
            }
        }
        Step::Surging if leaving => left(ctx),
        Step::Surging => {
            let Some(surge) = &r.surge else {
                // A Surging record without its surge cannot know its replacement: go on
                // without one (the old node is drained and terminated without a decrement).
                return Some(Command::Cordon);
            };
            let desired = ctx.view.desired_ami;
            let fresh: Vec<&Member> = ctx
                .view
                .members
                .iter()
                .filter(|m| {
                    !surge.baseline.contains(&m.instance_id) && !ctx.taken.contains(&m.instance_id)
                })
                .collect();
            let ready = fresh
                .iter()
                .filter(|m| m.is_ready() && desired.is_some() && m.image_id.as_deref() == desired)
                .min_by(|a, b| {
                    (a.launch_time, &a.instance_id).cmp(&(b.launch_time, &b.instance_id))
                });
            let fresh_ids: Vec<String> = fresh.iter().map(|m| m.instance_id.clone()).collect();
            if let Some(rep) = ready {
                ctx.taken.insert(rep.instance_id.clone());
                Command::ClaimReplacement {
                    id: rep.instance_id.clone(),
                }
            } else if (now - r.step_at).to_std().unwrap_or_default() >= settings.replacement_timeout
            {
                Command::Fail {
                    why: Failure::ReplacementNotReady {
                        instance_id: r.instance_id.clone(),
                        timeout: settings.replacement_timeout,
                        image: desired.map(str::to_string),
                        fresh: fresh_ids,
                    },
                    halt: true,
                    quarantine: desired.is_some(),
                    undo: undo_on_end(ctx, r, true),
                }
            } else {
                Command::Wait {
                    why: WaitReason::Replacement {
                        since: r.step_at,
                        fresh: fresh_ids,
                    },
                }
            }
        }
        Step::Cordoned | Step::Draining if member.is_none() => left(ctx),
        Step::Cordoned => Command::Cordon,
        Step::Draining => Command::DrainStep,
        Step::Terminating if !leaving => {
            let decrement = r.surge_active()
                || matches!(
                    r.surge.as_ref().and_then(|s| s.release.as_ref()),
                    Some(Release::Undoing(Undo::Terminate { instance_id })) if *instance_id == r.instance_id
                );
            ctx.release(r);
            if decrement {
                ctx.desired -= 1;
            }
            Command::Terminate { decrement }
        }
        Step::Terminating => {
            let own_terminate = matches!(
                r.surge.as_ref().and_then(|s| s.release.as_ref()),
                Some(Release::Undoing(Undo::Terminate { instance_id })) if *instance_id == r.instance_id
            );
            if own_terminate {
                Command::Finish {
                    why: FinishReason::Terminated,
                    undo: None,
                }
            } else {
                left(ctx)
            }
        }
        Step::Done | Step::Failed | Step::Cancelled => return settle(ctx, r),
    })
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
