//! The step function of rotations (pure): from one pool's observed state (its members, group
//! and rotation records), the rotations the planner moves this pass, `now` and the settings, the
//! command the executor performs for each rotation. The executor decides nothing: it performs
//! each command, records the result, and stops at the first failed call of a rotation (the
//! next pass recomputes everything from what it then observes).
//!
//! Per rotation, by step:
//! - `Pending` or `Surging` of a `Drifted` rotation whose instance runs the desired AMI again
//!   (the desired AMI changed back before the node was cordoned) → `Finish` as no longer
//!   needed (recorded `Cancelled`), its surge given back: a change of course leaves the group at
//!   its own size.
//! - `Pending`: the instance left the group → [`Command::Finish`]; room under the group's
//!   `MaxSize` (or the policy allows raising it) → [`Command::Surge`] (record the surge, then
//!   +1 on a fresh read); else [`Command::Cordon`] (replace without surge: drain first, the
//!   group launches the replacement after the terminate).
//! - `Surging`: the old instance left → `Finish` with the surge given back. Otherwise the surge
//!   is matched with one unit of *supply* (see below): a Ready instance on the desired AMI →
//!   [`Command::ClaimReplacement`]; a launched instance on the desired AMI not Ready after
//!   `replacement_timeout` (counted from its launch, or from the surge when it launched
//!   before) → [`Command::Fail`] (halts the pool, quarantines the release) with the surge given
//!   back; a launch still to come → [`Command::Wait`] with why (the group's latest failed
//!   scaling activity, e.g. `InsufficientInstanceCapacity`); no supply at all →
//!   [`Command::Raise`] (+1 again) or, at `MaxSize` without permission to raise it,
//!   [`Command::DropSurge`] (go on without a surge). A launch that never comes never fails
//!   the rotation: only a replacement that launched on the desired AMI and did not become
//!   Ready counts against the release.
//! - `Cordoned` → [`Command::Cordon`]; `Draining` → [`Command::DrainStep`] (both: the old
//!   instance gone from the group entirely → `Finish`, surge given back).
//! - `Terminating`: the instance still in service → [`Command::Terminate`] (decrementing
//!   desired capacity when its surge is active, unless the group is at `MinSize`: Auto
//!   Scaling refuses that decrement, and the unit stays with the group); already leaving →
//!   `Finish` (the surge is given back unless this rotation's own terminate was recorded as
//!   under way).
//! - Finished with a surge unit still owed → [`Command::UndoSurge`] (or nothing while the
//!   unit's launch is still to come).
//!
//! # Capacity: by delta, level-triggered
//! The step function never computes an absolute desired capacity. `Surge` and `Raise` each
//! add one to the desired capacity the executor reads just before it sets it; a give-back
//! removes one only by terminating a chosen instance with a decrement. No absolute value from
//! an older read is ever written, so what Cluster Autoscaler or an operator set between passes
//! is kept.
//!
//! Each pass matches every active surge that has not claimed its replacement (oldest first)
//! with one unit of supply, from what it observes: an instance launched since the surge (not
//! in its baseline), not leaving, on the desired AMI (or an unknown image), not already some
//! rotation's replacement or undo target nor matched this pass; else one of the group's
//! *pending launches* (`desired capacity - instances not leaving`, each matched once). A surge
//! left without supply is raised by one. This one rule repairs every crash and every other
//! writer around the +1:
//! - crash (or failed call) after recording the surge, before the +1: no supply next pass →
//!   raised then;
//! - crash after the +1: its instance or pending launch is there → matched, not raised again;
//! - another writer took the unit (Cluster Autoscaler removed the empty surge node, an
//!   operator lowered desired capacity): no supply → raised again by one;
//! - another writer added capacity (a scale-up): the surge may match that capacity instead of
//!   raising, which leaves the group where the other writer wants it after the decrement.
//!
//! Undo targets ([`Undo`]) are chosen so that two rotations never undo with the same instance,
//! and never an instance that may run workload: a recorded undo keeps its target; otherwise
//! (own replacement first for a failure or a cancel) an instance launched since the surge,
//! claimed by no rotation, not leaving, known podless ([`Member::podless`]), not-Ready first,
//! newest first. With none: while a launch is pending the unit stays owed (given back when the
//! launch comes); else [`Undo::Nothing`] (another writer took the unit, or only instances with
//! workload hold it: left to the group's scale-down). At `MinSize` (another writer scaled the
//! group down) nothing is given back: a decrement would be refused, the unit is the group's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Rotation, Step, Surge, Undo, UnitRelease};
use crate::fleet::{Group, LaunchProblem, Lifecycle, Member};

/// Tunables the step function needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepSettings {
    /// A replacement launched on the desired AMI and not Ready this long fails the rotation.
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
    /// A surge may raise the group's `MaxSize` by one (the policy allows it and the last
    /// attempt was not refused for lack of permission).
    pub may_raise_max: bool,
    /// The group's latest unsuccessful scaling activity (`DescribeScalingActivities`), shown
    /// as the reason a launch is still to come; a relaunch it reports out of capacity halts
    /// the pool.
    pub launch_problem: Option<&'a LaunchProblem>,
    /// Replace terminate-first ([`crate::plan::Replacement`]): no rotation surges, each drains
    /// first and waits for the group's relaunch.
    pub terminate_first: bool,
}

/// Why a rotation finishes without terminating its instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FinishReason {
    /// The instance left the group (or is leaving) before nodecycle terminated it.
    InstanceLeft,
    /// Its terminate was recorded as under way and the instance is now leaving.
    Terminated,
    /// The desired AMI changed back to the one the instance runs before its node was
    /// cordoned: the rotation is no longer needed (recorded `Cancelled`), its surge given back.
    NoLongerNeeded,
    /// Replaced terminate-first: the group relaunched `replacement`, Ready on the desired AMI
    /// (recorded as the rotation's replacement).
    #[serde(rename_all = "camelCase")]
    Relaunched {
        /// The relaunched instance.
        replacement: String,
    },
}

/// Why a rotation failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "failure", rename_all = "camelCase")]
pub enum Failure {
    /// A replacement launched on the desired AMI and did not become Ready within the timeout.
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
    /// Replaced terminate-first, and the group could not relaunch for lack of capacity: the
    /// pool halts (the release is not to blame: nothing is quarantined).
    #[serde(rename_all = "camelCase")]
    RelaunchFailed {
        /// The instance that was terminated.
        instance_id: String,
        /// The group's failed launch, as Auto Scaling gives it.
        problem: String,
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
            Failure::RelaunchFailed {
                instance_id,
                problem,
            } => format!(
                "the group could not relaunch a replacement for {instance_id} (terminated first) for lack of capacity: {problem}"
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
            Failure::RelaunchFailed { .. } => write!(
                f,
                "{}; pool halted, the launch template left on the desired AMI for the group's own retries",
                self.what()
            ),
        }
    }
}

/// Why a rotation does nothing this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "wait", rename_all = "camelCase")]
pub enum WaitReason {
    /// The surge's replacement launched and is not Ready yet.
    #[serde(rename_all = "camelCase")]
    Replacement {
        /// Its wait counts from then (its launch, or the surge when it launched before).
        since: DateTime<Utc>,
        /// The launched instance matched with the surge.
        instance: String,
    },
    /// The group still owes a launch for the surge (desired capacity above its instances).
    #[serde(rename_all = "camelCase")]
    Launch {
        /// Surging since.
        since: DateTime<Utc>,
        /// The group's latest unsuccessful scaling activity, if any.
        problem: Option<String>,
    },
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Replacement { instance, .. } => {
                write!(f, "replacement {instance} launched, not Ready yet")
            }
            WaitReason::Launch { problem, .. } => match problem {
                Some(p) => write!(f, "the replacement's launch has not come: {p}"),
                None => write!(f, "the replacement's launch is pending"),
            },
        }
    }
}

/// How a surge's unit is given back when its rotation ends without terminating its old
/// instance with a decrement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "giveBack", rename_all = "camelCase")]
pub enum GiveBack {
    /// Now, this way (recorded as [`UnitRelease::Undoing`] first).
    Now {
        /// How.
        undo: Undo,
    },
    /// The unit's launch is still to come: recorded as [`UnitRelease::Owed`], given back once the
    /// instance is there.
    Later,
}

impl GiveBack {
    /// The undo performed now, if any.
    pub fn now(&self) -> Option<&Undo> {
        match self {
            GiveBack::Now { undo } => Some(undo),
            GiveBack::Later => None,
        }
    }
}

/// One thing the executor does for one rotation. Its name ([`Command::name`]) is its serialized
/// `command` tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, strum::IntoStaticStr)]
#[serde(tag = "command", rename_all = "camelCase")]
#[strum(serialize_all = "camelCase")]
pub enum Command {
    /// Record the surge (step `Surging`), then add one to the group's desired capacity as read
    /// just before (first one to its `MaxSize` with `above_max`).
    Surge {
        /// Instances in the group now (the replacement is an instance not among them).
        baseline: Vec<String>,
        /// The desired capacity this pass observed (recorded with the intent).
        read: i32,
        /// The group is at `MaxSize` and the policy allows raising it by one for the surge.
        above_max: bool,
    },
    /// The surge has no unit (never raised, or another writer took it): add one to the
    /// desired capacity as read just before (first one to `MaxSize` with `above_max`).
    Raise {
        /// Raise `MaxSize` by one first.
        above_max: bool,
    },
    /// The surge has no unit and the group is at `MaxSize`: record the surge as holding
    /// nothing and go on without it (step `Cordoned`: drain first, replacement after).
    DropSurge,
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
    /// record that intent first), delete its node; step `Done`, or, with `relaunch`, record
    /// the group's instances first ([`super::Relaunch`]) and stay `Terminating` until the
    /// relaunched replacement is confirmed.
    Terminate {
        /// Decrement desired capacity (the surge's unit goes with the old instance).
        decrement: bool,
        /// Terminate-first: no surge unit, the group relaunches the replacement.
        relaunch: bool,
    },
    /// Give back the surge's unit: record `undo` as [`UnitRelease::Undoing`], perform it, record
    /// [`UnitRelease::Given`].
    UndoSurge {
        /// How.
        undo: Undo,
    },
    /// Step `Done` without terminating; with `undo`, the surge is given back as for `UndoSurge`.
    Finish {
        /// Why.
        why: FinishReason,
        /// The surge's give-back, if the rotation holds one.
        undo: Option<GiveBack>,
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
        /// The surge's give-back, if the rotation holds one.
        undo: Option<GiveBack>,
    },
    /// Step `Cancelled` (the AMI it rolls out is quarantined): uncordon the node when
    /// `uncordon`, then give the surge back with `undo` (its own replacement first).
    Cancel {
        /// The quarantined image it was rolling out.
        image: String,
        /// The node was cordoned by this rotation.
        uncordon: bool,
        /// The surge's give-back, if the rotation holds one.
        undo: Option<GiveBack>,
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
        self.into()
    }

    /// The give-back this command records, if any.
    pub fn give_back(&self) -> Option<GiveBack> {
        match self {
            Command::UndoSurge { undo } => Some(GiveBack::Now { undo: undo.clone() }),
            Command::Finish { undo, .. }
            | Command::Fail { undo, .. }
            | Command::Cancel { undo, .. } => undo.clone(),
            _ => None,
        }
    }

    /// The undo this command performs now, if any.
    pub fn undo(&self) -> Option<&Undo> {
        match self {
            Command::UndoSurge { undo } => Some(undo),
            Command::Finish { undo, .. }
            | Command::Fail { undo, .. }
            | Command::Cancel { undo, .. } => undo.as_ref().and_then(GiveBack::now),
            _ => None,
        }
    }

    /// Adds one unit of desired capacity (`Surge`, `Raise`).
    pub fn raises(&self) -> bool {
        matches!(self, Command::Surge { .. } | Command::Raise { .. })
    }

    /// Ends the rotation this pass.
    fn ends(&self) -> bool {
        matches!(
            self,
            Command::Finish { .. }
                | Command::Fail { .. }
                | Command::Cancel { .. }
                | Command::Terminate { .. }
                | Command::UndoSurge { .. }
        )
    }
}

/// The commands of one pass for one pool.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepPlan {
    /// `(instance, command)` per rotation, in the order to perform them: give-backs first
    /// (undos, failures, terminations), then the rest, then surges.
    pub commands: Vec<(String, Command)>,
    /// Instances that serve an in-flight rotation after this pass (its claimed replacement,
    /// or the launched instance matched with its surge): protected from Cluster Autoscaler's
    /// scale-down until the rotation ends.
    pub protect: BTreeSet<String>,
    /// Old instances being drained or terminated after this pass (their nodes are excluded
    /// from external load balancers).
    pub draining: BTreeSet<String>,
}

/// A rotation's commands for one pass (see the module documentation). `rotations` are every
/// record of the pool (any step); `moving` the instances whose in-flight rotation the planner
/// advances or starts this pass (others only keep what they hold, and settle owed surges).
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
    // In-flight surges are matched with supply first, then finished rotations settle what is
    // left, then `Pending` rotations start their surges from the capacity the pass leaves.
    order.sort_by_key(|r| match (r.step, r.in_flight()) {
        (Step::Pending, _) => 2,
        (_, true) => 0,
        (_, false) => 1,
    });
    let mut give_backs = Vec::new();
    let mut middle = Vec::new();
    let mut surges = Vec::new();
    let mut plan = StepPlan::default();
    for r in order {
        let command = if r.in_flight() {
            if !moving.contains(r.instance_id.as_str()) {
                // Not advanced, but what it holds stays its own.
                if let Some(id) = hold(&mut ctx, r) {
                    plan.protect.insert(id);
                }
                if let Some(rep) = &r.replacement {
                    plan.protect.insert(rep.clone());
                }
                if matches!(r.step, Step::Cordoned | Step::Draining | Step::Terminating) {
                    plan.draining.insert(r.instance_id.clone());
                }
                continue;
            }
            step_one(&mut ctx, r, now, settings)
        } else {
            settle(&mut ctx, r)
        };
        let Some(command) = command else { continue };
        if r.in_flight()
            && (matches!(r.step, Step::Cordoned | Step::Draining | Step::Terminating)
                || matches!(command, Command::Cordon))
            && !matches!(
                command,
                Command::Finish { .. } | Command::Fail { .. } | Command::Cancel { .. }
            )
        {
            plan.draining.insert(r.instance_id.clone());
        }
        if r.in_flight() && !command.ends() {
            match &command {
                Command::ClaimReplacement { id } => {
                    plan.protect.insert(id.clone());
                }
                Command::Wait {
                    why: WaitReason::Replacement { instance, .. },
                } => {
                    plan.protect.insert(instance.clone());
                }
                _ => {}
            }
            if let Some(rep) = &r.replacement {
                plan.protect.insert(rep.clone());
            }
        }
        let entry = (r.instance_id.clone(), command);
        match &entry.1 {
            Command::Surge { .. } | Command::Raise { .. } => surges.push(entry),
            c if c.ends() => give_backs.push(entry),
            _ => middle.push(entry),
        }
    }
    give_backs.extend(middle);
    give_backs.extend(surges);
    plan.commands = give_backs;
    plan
}

/// Why a rotation cannot be cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelRefusal {
    /// It already finished at this step.
    Finished(Step),
    /// It is terminating its instance: too late.
    Terminating,
}

/// Whether an operator may cancel `rotation` now (ops `cancel`). A cancelled rotation that
/// holds a surge records it [`UnitRelease::Owed`]: the rotator's next pass gives it back, with the
/// pods of the group's instances counted (`ops` does not count them, so it never chooses an
/// instance to terminate).
pub fn cancel(rotation: &Rotation) -> Result<(), CancelRefusal> {
    match rotation.step {
        Step::Done | Step::Failed | Step::Cancelled => Err(CancelRefusal::Finished(rotation.step)),
        Step::Terminating => Err(CancelRefusal::Terminating),
        _ => Ok(()),
    }
}

/// What a surge is matched with this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Supply<'a> {
    /// A Ready instance on the desired AMI.
    Ready(&'a Member),
    /// A launched instance, not Ready yet.
    Launched(&'a Member),
    /// One of the group's pending launches.
    Pending,
    /// Nothing: the surge has no unit.
    None,
}

/// The pass so far: capacity accounting and instances already taken.
struct Ctx<'a> {
    view: &'a PoolView<'a>,
    /// Desired capacity once the commands decided so far are performed (+1 per raise, -1 per
    /// terminate with a decrement of an instance still in the group).
    desired: i32,
    /// The group's pending launches not matched yet with a surge or an owed unit.
    pending: i32,
    /// Instances that are some rotation's replacement, undo target or match (recorded or
    /// chosen this pass).
    taken: BTreeSet<String>,
    members: BTreeMap<&'a str, &'a Member>,
}

impl<'a> Ctx<'a> {
    fn new(view: &'a PoolView<'a>, rotations: &[Rotation]) -> Self {
        let mut taken = BTreeSet::new();
        for r in rotations {
            // A replacement stays whatever its rotation's step: it serves (or is being undone
            // by its own rotation's recorded undo).
            if let Some(rep) = &r.replacement {
                taken.insert(rep.clone());
            }
            if let Some(UnitRelease::Undoing(Undo::Terminate { instance_id })) =
                r.surge.as_ref().and_then(|s| s.release.as_ref())
                && instance_id != &r.instance_id
            {
                taken.insert(instance_id.clone());
            }
        }
        let staying = view
            .members
            .iter()
            .filter(|m| m.lifecycle != Lifecycle::Leaving)
            .count();
        let staying = i32::try_from(staying).unwrap_or(i32::MAX);
        Ctx {
            view,
            desired: view.group.desired_capacity,
            pending: (view.group.desired_capacity - staying).max(0),
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

    /// In the group and not leaving.
    fn staying(&self, id: &str) -> bool {
        self.member(id)
            .is_some_and(|m| m.lifecycle != Lifecycle::Leaving)
    }

    /// Matches the surge of `r` (active, no replacement claimed) with one unit of supply (see
    /// the module documentation); a launched instance is taken, a pending launch counted.
    fn supply(&mut self, surge: &Surge) -> Supply<'a> {
        let desired = self.view.desired_ami;
        let mut fresh: Vec<&'a Member> = self
            .view
            .members
            .iter()
            .filter(|m| {
                !surge.baseline.contains(&m.instance_id)
                    && !self.taken.contains(&m.instance_id)
                    && m.lifecycle != Lifecycle::Leaving
                    && m.image_id.as_deref().is_none_or(|i| Some(i) == desired)
            })
            .collect();
        fresh.sort_by(|a, b| (a.launch_time, &a.instance_id).cmp(&(b.launch_time, &b.instance_id)));
        let claimable =
            |m: &Member| m.is_ready() && desired.is_some() && m.image_id.as_deref() == desired;
        if let Some(m) = fresh
            .iter()
            .find(|m| claimable(m))
            .or_else(|| fresh.first())
        {
            self.taken.insert(m.instance_id.clone());
            return if claimable(m) {
                Supply::Ready(m)
            } else {
                Supply::Launched(m)
            };
        }
        if self.pending > 0 {
            self.pending -= 1;
            return Supply::Pending;
        }
        Supply::None
    }

    /// Room for one more unit of desired capacity: `Some(false)` under `MaxSize`,
    /// `Some(true)` by raising `MaxSize` (allowed), `None` without. Counts the unit. (Each
    /// raise above `MaxSize` lifts it to the desired capacity it makes, so past `MaxSize`
    /// every further unit is a raise too: `MaxSize` itself needs no counting.)
    fn room(&mut self) -> Option<bool> {
        if self.desired < self.view.group.max_size {
            self.desired += 1;
            Some(false)
        } else if self.view.may_raise_max {
            self.desired += 1;
            Some(true)
        } else {
            None
        }
    }

    /// A terminate with a decrement keeps the group at or above `MinSize` (Auto Scaling
    /// refuses it otherwise).
    fn may_decrement(&self) -> bool {
        self.desired > self.view.group.min_size
    }

    /// How to give back the unit of `r`'s surge (see the module documentation). `own`: the
    /// rotation's own instance, the first choice when it is known podless (its claimed
    /// replacement on a cancel, the launched instance matched with its surge on a failure).
    fn choose_undo(&mut self, r: &Rotation, surge: &Surge, own: Option<&str>) -> GiveBack {
        match &surge.release {
            Some(UnitRelease::Undoing(Undo::Terminate { instance_id })) => {
                if self.staying(instance_id) {
                    if !self.may_decrement() {
                        // Refused at MinSize: the unit is the group's now.
                        return GiveBack::Now {
                            undo: Undo::Nothing,
                        };
                    }
                    self.desired -= 1;
                }
                return GiveBack::Now {
                    undo: Undo::Terminate {
                        instance_id: instance_id.clone(),
                    },
                };
            }
            // A legacy absolute target is never performed: settled as nothing to give back.
            Some(UnitRelease::Undoing(Undo::LowerTo { .. } | Undo::Nothing)) => {
                return GiveBack::Now {
                    undo: Undo::Nothing,
                };
            }
            _ => {}
        }
        if !self.may_decrement() {
            // At MinSize (another writer scaled down): the unit is the group's now.
            return GiveBack::Now {
                undo: Undo::Nothing,
            };
        }
        if let Some(rep) = own
            && let Some(m) = self.member(rep)
            && m.lifecycle != Lifecycle::Leaving
            && m.podless()
        {
            self.taken.insert(rep.to_string());
            self.desired -= 1;
            return GiveBack::Now {
                undo: Undo::Terminate {
                    instance_id: rep.to_string(),
                },
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
                    && m.podless()
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
            return GiveBack::Now {
                undo: Undo::Terminate {
                    instance_id: m.instance_id.clone(),
                },
            };
        }
        if self.pending > 0 {
            // Its launch is still to come: given back once the instance is there.
            self.pending -= 1;
            return GiveBack::Later;
        }
        GiveBack::Now {
            undo: Undo::Nothing,
        }
    }
}

/// Keeps what the in-flight rotation `r`, not advanced this pass, holds: its surge's match.
/// The matched launched instance, if any.
fn hold(ctx: &mut Ctx<'_>, r: &Rotation) -> Option<String> {
    let surge = r.surge.as_ref().filter(|s| s.active())?;
    if r.step != Step::Surging || r.replacement.is_some() {
        return None;
    }
    match ctx.supply(surge) {
        Supply::Ready(m) | Supply::Launched(m) => Some(m.instance_id.clone()),
        Supply::Pending | Supply::None => None,
    }
}

/// A finished rotation that still owes its surge's unit.
fn settle(ctx: &mut Ctx<'_>, r: &Rotation) -> Option<Command> {
    let surge = r.surge.as_ref().filter(|s| s.owed())?;
    let own = r.replacement.as_deref().filter(|_| r.step != Step::Done);
    match ctx.choose_undo(r, surge, own) {
        GiveBack::Now { undo } => Some(Command::UndoSurge { undo }),
        GiveBack::Later => None,
    }
}

/// The give-back of `r`'s surge when it ends now without terminating with a decrement.
fn undo_on_end(ctx: &mut Ctx<'_>, r: &Rotation, own: Option<&str>) -> Option<GiveBack> {
    let surge = r.surge.as_ref().filter(|s| s.active() || s.owed())?;
    Some(ctx.choose_undo(r, surge, own))
}

/// When the wait of a replacement launched at `launched` counts from: its launch, or the
/// surge's start (`surging_since`) when it launched before; a launch time after `now` (clocks
/// apart) counts from the surge's start.
fn wait_start(
    surging_since: DateTime<Utc>,
    launched: DateTime<Utc>,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    if launched > now {
        surging_since
    } else {
        surging_since.max(launched)
    }
}

/// Whether `r`, terminating without a decrement, waits for the group to relaunch its replacement: a voluntary
/// rotation (not `Interrupted`: the instance went whatever nodecycle did) that holds no surge
/// unit (none started, or dropped at `MaxSize`) and has no replacement.
fn awaits_relaunch(r: &Rotation) -> bool {
    r.reason != super::RotationReason::Interrupted
        && r.replacement.is_none()
        && r.surge
            .as_ref()
            .is_none_or(|s| matches!(s.release, Some(UnitRelease::Given)))
}

/// Terminate-first, after the terminate (the instance is leaving or gone): the replacement the
/// group relaunches is confirmed before the rotation ends, so the next node of a budget of one
/// starts only once capacity is back. Matched like a surge's supply, among instances not in
/// the relaunch's `baseline` (the group just before the terminate, which `step_at` dates): Ready on the desired AMI → `Finish` (relaunched);
/// launched on it and not Ready after `replacement_timeout` → `Fail` (halt, quarantine);
/// launched → wait; a launch still owed → wait, or `Fail` (halt, no quarantine) when the
/// group's newest activity (newer than the terminate's own) failed for lack of capacity; nothing owed (another writer
/// took the unit) → `Finish` as left.
fn relaunch(
    ctx: &mut Ctx<'_>,
    r: &Rotation,
    baseline: &[String],
    now: DateTime<Utc>,
    settings: &StepSettings,
) -> Command {
    let desired = ctx.view.desired_ami;
    let since = r.step_at;
    let mut fresh: Vec<&Member> = ctx
        .view
        .members
        .iter()
        .filter(|m| {
            !baseline.contains(&m.instance_id)
                && m.instance_id != r.instance_id
                && !ctx.taken.contains(&m.instance_id)
                && m.lifecycle != Lifecycle::Leaving
                && m.image_id.as_deref().is_none_or(|i| Some(i) == desired)
        })
        .collect();
    fresh.sort_by(|a, b| {
        (!a.is_ready(), a.launch_time, &a.instance_id).cmp(&(
            !b.is_ready(),
            b.launch_time,
            &b.instance_id,
        ))
    });
    let on_desired = |m: &Member| desired.is_some() && m.image_id.as_deref() == desired;
    if let Some(m) = fresh.first() {
        ctx.taken.insert(m.instance_id.clone());
        if m.is_ready() && on_desired(m) {
            return Command::Finish {
                why: FinishReason::Relaunched {
                    replacement: m.instance_id.clone(),
                },
                undo: None,
            };
        }
        let waited_from = wait_start(since, m.launch_time, now);
        if on_desired(m)
            && (now - waited_from).to_std().unwrap_or_default() >= settings.replacement_timeout
        {
            return Command::Fail {
                why: Failure::ReplacementNotReady {
                    instance_id: r.instance_id.clone(),
                    timeout: settings.replacement_timeout,
                    image: desired.map(str::to_string),
                    fresh: vec![m.instance_id.clone()],
                },
                halt: true,
                quarantine: true,
                undo: None,
            };
        }
        return Command::Wait {
            why: WaitReason::Replacement {
                since: waited_from,
                instance: m.instance_id.clone(),
            },
        };
    }
    if ctx.pending > 0 {
        ctx.pending -= 1;
        // The group's newest activity: the terminate itself is an activity, so a failure
        // newer than it is a launch tried since (clocks are not compared).
        let problem = ctx.view.launch_problem;
        if let Some(p) = problem.filter(|p| p.insufficient_capacity()) {
            return Command::Fail {
                why: Failure::RelaunchFailed {
                    instance_id: r.instance_id.clone(),
                    problem: p.message.clone(),
                },
                halt: true,
                quarantine: false,
                undo: None,
            };
        }
        return Command::Wait {
            why: WaitReason::Launch {
                since,
                problem: problem.map(|p| p.message.clone()),
            },
        };
    }
    Command::Finish {
        why: FinishReason::InstanceLeft,
        undo: None,
    }
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
        undo: undo_on_end(ctx, r, None),
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
            undo: undo_on_end(ctx, r, r.replacement.as_deref()),
        });
    }
    // A change of course: the desired AMI is again the one the instance runs, and its node
    // is not cordoned yet. The rotation ends here and gives its surge back (the unit launched
    // for the previous desired AMI), so the group returns to its own size.
    if !leaving
        && r.reason == super::RotationReason::Drifted
        && matches!(r.step, Step::Pending | Step::Surging)
        && let (Some(m), Some(desired)) = (member, ctx.view.desired_ami)
        && m.image_id.as_deref() == Some(desired)
    {
        return Some(Command::Finish {
            why: FinishReason::NoLongerNeeded,
            undo: undo_on_end(ctx, r, None),
        });
    }
    Some(match r.step {
        Step::Pending if leaving => left(ctx),
        Step::Pending if ctx.view.terminate_first => Command::Cordon,
        Step::Pending => match ctx.room() {
            Some(above_max) => Command::Surge {
                baseline: ctx
                    .view
                    .members
                    .iter()
                    .map(|m| m.instance_id.clone())
                    .collect(),
                read: ctx.view.group.desired_capacity,
                above_max,
            },
            None => Command::Cordon,
        },
        Step::Surging if leaving => left(ctx),
        Step::Surging => {
            let Some(surge) = r.surge.as_ref().filter(|s| s.active()) else {
                // A Surging record without an active surge cannot know its replacement: go on
                // without one (the old node is drained and terminated without a decrement).
                return Some(Command::Cordon);
            };
            let desired = ctx.view.desired_ami;
            match ctx.supply(surge) {
                Supply::Ready(m) => Command::ClaimReplacement {
                    id: m.instance_id.clone(),
                },
                Supply::Launched(m) => {
                    let since = wait_start(r.step_at, m.launch_time, now);
                    let on_desired = desired.is_some() && m.image_id.as_deref() == desired;
                    if on_desired
                        && (now - since).to_std().unwrap_or_default()
                            >= settings.replacement_timeout
                    {
                        // Its own bad instance is the first to give back.
                        ctx.taken.remove(&m.instance_id);
                        let fresh = ctx
                            .view
                            .members
                            .iter()
                            .filter(|f| {
                                !surge.baseline.contains(&f.instance_id)
                                    && !f.is_ready()
                                    && f.image_id.as_deref() == desired
                            })
                            .map(|f| f.instance_id.clone())
                            .collect();
                        Command::Fail {
                            why: Failure::ReplacementNotReady {
                                instance_id: r.instance_id.clone(),
                                timeout: settings.replacement_timeout,
                                image: desired.map(str::to_string),
                                fresh,
                            },
                            halt: true,
                            quarantine: true,
                            undo: undo_on_end(ctx, r, Some(m.instance_id.as_str())),
                        }
                    } else {
                        Command::Wait {
                            why: WaitReason::Replacement {
                                since,
                                instance: m.instance_id.clone(),
                            },
                        }
                    }
                }
                Supply::Pending => Command::Wait {
                    why: WaitReason::Launch {
                        since: r.step_at,
                        problem: ctx.view.launch_problem.map(|p| p.message.clone()),
                    },
                },
                Supply::None => match ctx.room() {
                    Some(above_max) => Command::Raise { above_max },
                    None => Command::DropSurge,
                },
            }
        }
        Step::Cordoned | Step::Draining if member.is_none() => left(ctx),
        Step::Cordoned => Command::Cordon,
        Step::Draining => Command::DrainStep,
        Step::Terminating if !leaving => {
            // At MinSize the terminate goes without a decrement (the group launches a
            // replacement from the desired AMI): the surge's unit stays with the group.
            let decrement = (r.surge_active()
                || matches!(
                    r.surge.as_ref().and_then(|s| s.release.as_ref()),
                    Some(UnitRelease::Undoing(Undo::Terminate { instance_id })) if *instance_id == r.instance_id
                ))
                && ctx.may_decrement();
            if decrement {
                ctx.desired -= 1;
            }
            Command::Terminate {
                decrement,
                relaunch: !decrement && awaits_relaunch(r),
            }
        }
        Step::Terminating => {
            let own_terminate = matches!(
                r.surge.as_ref().and_then(|s| s.release.as_ref()),
                Some(UnitRelease::Undoing(Undo::Terminate { instance_id })) if *instance_id == r.instance_id
            );
            if own_terminate {
                Command::Finish {
                    why: FinishReason::Terminated,
                    undo: None,
                }
            } else if let Some(baseline) = r.relaunch.as_ref().map(|l| &l.baseline) {
                relaunch(ctx, r, baseline, now, settings)
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
