//! Drift and expiry of one instance (pure): does it need replacing, why, and is it forced.
//!
//! - **Drifted**: the instance's image id is known and differs from the pool's desired AMI
//!   (Karpenter's drift on the AMI). An unknown image or an unresolved desired AMI is never drift
//!   (fail closed: nothing is rotated on a guess).
//! - **Expired**: age (from the EC2 launch time) `>= expireAfter`, as Karpenter's expiration
//!   controller (`!now.Before(launch + expireAfter)`). `expireAfter: Never` never expires.
//! - **Forced**: `now >= max(launch, adopted) + expireAfter + terminationGracePeriod`, where
//!   `adopted` is when nodecycle first resolved the pool's AMI ([`Expiration::adopted`]): the
//!   forced deadline counts from when nodecycle could first act on the node. Nodes already old
//!   when a pool is adopted are `Expired` at once but replaced within the budgets, oldest
//!   first, and forced only a full `expireAfter + terminationGracePeriod` after adoption
//!   (Karpenter never adopts existing nodes, so this is nodecycle's own rule: adoption never
//!   stampedes). Without a `terminationGracePeriod` (wait indefinitely) expiry stays budgeted
//!   forever.
//! - Drift wins over expiry (one reason per node, `Drifted`, budgeted) unless the node is past
//!   the forced-expiry line, where the reason is `Expired` and the rotation is forced.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::fleet::Member;
use crate::rotation::RotationReason;

/// When a pool's nodes expire and when their expiry is forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Expiration {
    /// `expireAfter` (`None` = Never).
    pub after: Option<Duration>,
    /// `terminationGracePeriod` (`None` = unset: expiry is never forced).
    pub grace: Option<Duration>,
    /// When nodecycle adopted the pool (its first resolved AMI,
    /// [`crate::state::PoolRecord::adopted_at`]); `None` = unknown, the forced deadline then
    /// counts from the launch alone.
    pub adopted: Option<DateTime<Utc>>,
}

impl Expiration {
    /// The policy's `expireAfter` and `terminationGracePeriod`, for a pool adopted at `adopted`.
    pub fn of(policy: &crate::policy::Policy, adopted: Option<DateTime<Utc>>) -> Expiration {
        Expiration {
            after: policy.expire_after,
            grace: policy.termination_grace_period,
            adopted,
        }
    }

    /// When a node launched at `launch` is forced: `max(launch, adopted) + expireAfter +
    /// terminationGracePeriod`; `None` when it never is (no `expireAfter`, no
    /// `terminationGracePeriod`, or a sum past the calendar).
    pub fn forced_at(&self, launch: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let line = self.after?.checked_add(self.grace?)?;
        let from = self.adopted.map_or(launch, |a| a.max(launch));
        from.checked_add_signed(chrono::TimeDelta::from_std(line).ok()?)
    }
}

/// Drift state of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// Runs the desired AMI.
    Current,
    /// Runs `image`, the pool wants `desired`.
    Drifted {
        /// The AMI the instance runs.
        image: String,
        /// The pool's desired AMI.
        desired: String,
    },
    /// The instance's image is unknown: not treated as drift.
    ImageUnknown,
    /// The pool's desired AMI is unresolved: drift cannot be decided.
    DesiredUnresolved,
}

/// Expiry state of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// `expireAfter: Never`.
    Never,
    /// Younger than `expireAfter`; expires in `remaining`.
    Fresh {
        /// Time left until `expireAfter`.
        remaining: Duration,
    },
    /// Older than `expireAfter` (by `overdue`), not yet forced (budgeted).
    Expired {
        /// `age - expireAfter`.
        overdue: Duration,
        /// When it is forced ([`Expiration::forced_at`]); `None` = never.
        forced_at: Option<DateTime<Utc>>,
    },
    /// Past its forced deadline (by `overdue`): forced, no budget wait.
    Forced {
        /// `now - forced_at`.
        overdue: Duration,
        /// When it was forced ([`Expiration::forced_at`]).
        forced_at: DateTime<Utc>,
    },
}

/// Why a node needs replacing: the rotation reason and whether it skips budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Need {
    /// `Drifted` or `Expired`.
    pub reason: RotationReason,
    /// Past the forced-expiry line: starts without waiting for a budget.
    pub forced: bool,
}

/// Drift, expiry and age of one instance at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    /// `now - launch_time`, zero when the launch time is in the future (clock skew).
    pub age: Duration,
    /// Drift state.
    pub drift: Drift,
    /// Expiry state.
    pub expiry: Expiry,
}

impl Assessment {
    /// The single reason to replace the node, if any: forced expiry first, then drift, then
    /// budgeted expiry.
    pub fn need(&self) -> Option<Need> {
        match (&self.drift, self.expiry) {
            (_, Expiry::Forced { .. }) => Some(Need {
                reason: RotationReason::Expired,
                forced: true,
            }),
            (Drift::Drifted { .. }, _) => Some(Need {
                reason: RotationReason::Drifted,
                forced: false,
            }),
            (_, Expiry::Expired { .. }) => Some(Need {
                reason: RotationReason::Expired,
                forced: false,
            }),
            _ => None,
        }
    }
}

/// Assesses `member` at `now` against the desired AMI (`None` = unresolved) and the pool's
/// [`Expiration`]. Sums that overflow are treated as never reached.
pub fn assess(
    member: &Member,
    desired_ami: Option<&str>,
    expiration: &Expiration,
    now: DateTime<Utc>,
) -> Assessment {
    let age = (now - member.launch_time)
        .to_std()
        .unwrap_or(Duration::ZERO);
    let drift = match (desired_ami, member.image_id.as_deref()) {
        (None, _) => Drift::DesiredUnresolved,
        (Some(_), None) => Drift::ImageUnknown,
        (Some(desired), Some(image)) if image == desired => Drift::Current,
        (Some(desired), Some(image)) => Drift::Drifted {
            image: image.to_string(),
            desired: desired.to_string(),
        },
    };
    let expiry = match expiration.after {
        None => Expiry::Never,
        Some(limit) if age < limit => Expiry::Fresh {
            remaining: limit - age,
        },
        Some(limit) => match expiration.forced_at(member.launch_time) {
            Some(forced_at) if now >= forced_at => Expiry::Forced {
                overdue: (now - forced_at).to_std().unwrap_or(Duration::ZERO),
                forced_at,
            },
            forced_at => Expiry::Expired {
                overdue: age - limit,
                forced_at,
            },
        },
    };
    Assessment { age, drift, expiry }
}
