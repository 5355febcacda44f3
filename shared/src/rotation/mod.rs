//! The rotation of one node: a small state machine persisted in DynamoDB and advanced one step
//! per rotator pass: `Pending -> Surging -> Cordoned -> Draining -> Terminating -> Done`, or
//! `Failed` (a replacement launched on the desired AMI never became Ready: halts the pool), or
//! `Cancelled` (an operator aborted it: never halts). What each pass does to a rotation is
//! decided by the pure [`step`] function; the rotator's executor only performs its commands.
//!
//! # Surge accounting (shared with Cluster Autoscaler and other writers)
//! A surge adds one unit of desired capacity for the replacement, by delta: the executor reads
//! the group's desired capacity just before it sets that value plus one. nodecycle never sets
//! a lower desired capacity: the unit is given back exactly once, by terminating one chosen
//! instance through the group with a decrement: the old instance once drained (the normal
//! end), or, when the rotation ends otherwise (failed, cancelled, the old instance vanished),
//! an instance known to run no workload ([`crate::fleet::Member::podless`]) launched since the
//! surge, chosen by [`step`] and recorded on the rotation *before* it is terminated
//! ([`UnitRelease::Undoing`]), so a crash repeats the same undo instead of choosing another. What
//! other writers did meanwhile is kept: after a roll the group is at the size they last set.
//! See [`step`] for the level-triggered rules that repair a crash around the +1.

pub mod group;
pub mod marks;
pub mod step;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Why a node is being replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RotationReason {
    /// Runs an AMI other than the desired one (budgeted).
    Drifted,
    /// Older than `expireAfter` (budgeted until forced).
    Expired,
    /// Spot/capacity rebalance with `rebalance: replace` (no budget wait).
    Interrupted,
    /// Scheduled EC2 maintenance or retirement (budgeted until close to its deadline).
    Maintenance,
    /// Operator request (`ops rotate`).
    Manual,
    /// Node repair: a node condition bad for its duration (budgeted by a budget naming
    /// `Unhealthy`, else `repair.maxParallel`; see [`crate::repair`]).
    Unhealthy,
}

impl RotationReason {
    /// The budget reason this rotation waits for, if it is budgeted at all.
    pub fn budget_reason(self) -> Option<crate::budget::Reason> {
        match self {
            RotationReason::Drifted => Some(crate::budget::Reason::Drifted),
            RotationReason::Expired => Some(crate::budget::Reason::Expired),
            RotationReason::Unhealthy => Some(crate::budget::Reason::Unhealthy),
            RotationReason::Interrupted | RotationReason::Maintenance | RotationReason::Manual => {
                None
            }
        }
    }
}

/// Steps of a rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Step {
    /// Recorded, nothing done yet.
    Pending,
    /// Desired capacity raised by one; waiting for the replacement's node to be Ready.
    Surging,
    /// Node cordoned and tainted.
    Cordoned,
    /// Pods being evicted (resumable across passes).
    Draining,
    /// Instance being terminated.
    Terminating,
    /// Finished.
    Done,
    /// Aborted because its replacement never became Ready: the surge undone, the pool halted.
    Failed,
    /// Aborted by an operator (`ops cancel`): node uncordoned, surge undone; the pool is not
    /// halted.
    Cancelled,
}

impl Step {
    /// `Done`, `Failed` or `Cancelled`.
    pub fn is_finished(self) -> bool {
        matches!(self, Step::Done | Step::Failed | Step::Cancelled)
    }
}

/// How a surge's extra unit of desired capacity is given back when the rotation does not end
/// by terminating its old instance with a decrement.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "camelCase")]
pub enum Undo {
    /// Terminate this instance through the group, decrementing desired capacity (an instance
    /// that is already gone is success, without a decrement).
    #[serde(rename_all = "camelCase")]
    Terminate {
        /// The instance to remove (a replacement that is not needed, or never became Ready).
        instance_id: String,
    },
    /// Written by versions before capacity by delta: set desired capacity to this absolute
    /// value. Still read, never chosen nor performed: a record carrying it is settled as
    /// [`Undo::Nothing`] (lowering desired capacity lets Auto Scaling terminate an undrained
    /// instance of its choice, and the value may undo what another writer set since).
    #[serde(rename_all = "camelCase")]
    LowerTo {
        /// The desired capacity it would have set.
        desired: i32,
    },
    /// Nothing to give back: another writer already took the unit (its instance or its
    /// pending launch is gone), or only instances running workload could give it back (left
    /// to the group's scale-down, e.g. Cluster Autoscaler: nodecycle never terminates an
    /// undrained instance).
    Nothing,
}

/// Where the release of a surge's unit of capacity stands (not an AMI release:
/// [`crate::promotion::Release`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "release", rename_all = "camelCase")]
pub enum UnitRelease {
    /// The rotation ended (the instance left, an operator or the interruption handler closed
    /// it) and the unit is still to be given back; the rotator chooses how.
    Owed,
    /// Being given back this way: decided and recorded before acting, repeated until recorded
    /// as [`UnitRelease::Given`]. `Terminate` of the rotation's own instance is the normal end.
    Undoing(Undo),
    /// Given back.
    Given,
}

/// A surge: the instances that existed before it (so the replacement is an instance not in
/// this set), and what the group looked like when it was recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Surge {
    /// Written by versions before capacity by delta (an absolute target); read, never used.
    #[serde(default)]
    pub target_desired: i32,
    /// Instance ids in the group when the surge started.
    pub baseline: Vec<String>,
    /// Written by versions before capacity by delta (the desired capacity without surges,
    /// shared by concurrent surges); read, never used: no capacity is derived from an older
    /// value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<i32>,
    /// The group's desired capacity this pass observed when the surge was recorded (the
    /// intent; the +1 is applied to a fresh read just after). For the record only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<i32>,
    /// The surge raised the group's `MaxSize` by one (policy `disruption.surge:
    /// aboveMaxSize`); the pool's record holds what to restore.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub above_max: bool,
    /// Absent while the surge is active. Records written before this field existed have none
    /// and were settled by the code of their time: a finished rotation without it owes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<UnitRelease>,
}

impl Surge {
    /// The surge still holds its unit of capacity for a replacement.
    pub fn active(&self) -> bool {
        self.release.is_none()
    }

    /// The unit still has to be given back ([`UnitRelease::Owed`] or [`UnitRelease::Undoing`]).
    pub fn owed(&self) -> bool {
        matches!(
            self.release,
            Some(UnitRelease::Owed | UnitRelease::Undoing(_))
        )
    }
}

/// A terminate-first replacement: the group's instances just before the terminate (the
/// relaunched instance is one not among them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Relaunch {
    /// Instance ids in the group when the terminate was recorded.
    pub baseline: Vec<String>,
}

/// One node's rotation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rotation {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// The instance being replaced.
    pub instance_id: String,
    /// Why.
    pub reason: RotationReason,
    /// Current step.
    pub step: Step,
    /// Does not wait for budgets (forced expiry, interruption, emergency rotation).
    #[serde(default)]
    pub forced: bool,
    /// When the rotation was recorded.
    pub created_at: DateTime<Utc>,
    /// When the current step was entered.
    pub step_at: DateTime<Utc>,
    /// Set once a surge was started.
    #[serde(default)]
    pub surge: Option<Surge>,
    /// The replacement instance, once seen.
    #[serde(default)]
    pub replacement: Option<String>,
    /// Drain progress (the drain module's resumable state), once draining.
    #[serde(default)]
    pub drain: Option<serde_json::Value>,
    /// Deadline (scheduled maintenance start), if any.
    #[serde(default)]
    pub deadline: Option<DateTime<Utc>>,
    /// Why it failed, or the last transient error.
    #[serde(default)]
    pub error: Option<String>,
    /// Set for an operator's rotation (`ops rotate`): while the rotation is `Pending` it waits
    /// for the planner to release it (see [`Rotation::waiting`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<Queue>,
    /// The pool's desired AMI when the rotation started: what its replacement runs. A rotation
    /// towards an AMI that is quarantined meanwhile is cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// For a repair (`Unhealthy`): the failure domain it repairs in, which its outcome paces
    /// ([`crate::repair::slow_start`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<crate::repair::Domain>,
    /// Terminate-first: the group relaunches this rotation's replacement. Recorded before the
    /// terminate; the rotation stays `Terminating` until the relaunch is confirmed
    /// ([`step`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relaunch: Option<Relaunch>,
    /// Events of transitions of this record not yet put on the bus (see [`crate::bus`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<crate::bus::BusEvent>,
}

/// Finished rotation records are kept this long (for `status`), then expire.
pub const DONE_RETENTION_DAYS: i64 = 7;

/// When `rotation`'s record expires: [`DONE_RETENTION_DAYS`] after it finished; never while
/// in flight.
pub fn retention(rotation: &Rotation) -> Option<DateTime<Utc>> {
    rotation
        .step
        .is_finished()
        .then(|| rotation.step_at + chrono::Duration::days(DONE_RETENTION_DAYS))
}

/// How a queued (operator) rotation is released by the planner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Queue {
    /// The `ops rotate` request that queued it.
    pub request_id: String,
    /// Starts without waiting for budgets (still counted as disrupting once started).
    pub ignore_budgets: bool,
    /// With `ignore_budgets`: at most this many rotations of the request are past `Pending`.
    pub max_concurrent: u32,
    /// The operator's reason.
    #[serde(default)]
    pub reason: String,
}

impl Rotation {
    /// A new `Pending` rotation.
    pub fn new(
        pool: &str,
        instance_id: &str,
        reason: RotationReason,
        forced: bool,
        now: DateTime<Utc>,
    ) -> Self {
        Rotation {
            pool: pool.to_string(),
            instance_id: instance_id.to_string(),
            reason,
            step: Step::Pending,
            forced,
            created_at: now,
            step_at: now,
            surge: None,
            replacement: None,
            drain: None,
            deadline: None,
            error: None,
            queued: None,
            target: None,
            repair: None,
            relaunch: None,
            outbox: Vec::new(),
        }
    }

    /// A `Pending` operator rotation waiting for the planner to release it.
    pub fn manual(pool: &str, instance_id: &str, queue: Queue, now: DateTime<Utc>) -> Self {
        Rotation {
            forced: queue.ignore_budgets,
            queued: Some(queue),
            ..Rotation::new(pool, instance_id, RotationReason::Manual, false, now)
        }
    }

    /// In flight: recorded and not finished. In-flight rotations count as disrupting, except
    /// [waiting](Rotation::waiting) ones.
    pub fn in_flight(&self) -> bool {
        !self.step.is_finished()
    }

    /// A queued operator rotation the planner has not released yet (still `Pending`): not
    /// disrupting, not advanced until released.
    pub fn waiting(&self) -> bool {
        self.queued.is_some() && self.step == Step::Pending
    }

    /// In flight with a surge that still holds its unit of capacity.
    pub fn surge_active(&self) -> bool {
        self.in_flight() && self.surge.as_ref().is_some_and(Surge::active)
    }

    /// The unit of capacity of this rotation's surge still has to be given back.
    pub fn surge_owed(&self) -> bool {
        self.surge.as_ref().is_some_and(Surge::owed)
    }

    /// This rotation at `step`, entered at `now`, with no error.
    pub fn enter(&self, step: Step, now: DateTime<Utc>) -> Rotation {
        Rotation {
            step,
            step_at: now,
            error: None,
            ..self.clone()
        }
    }

    /// This rotation with its surge's release set to `release` (no-op without a surge).
    pub fn with_release(mut self, release: UnitRelease) -> Rotation {
        if let Some(s) = self.surge.as_mut() {
            s.release = Some(release);
        }
        self
    }
}

#[cfg(test)]
mod tests;
