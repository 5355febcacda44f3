//! Drift and expiry of one instance (pure): does it need replacing, why, and is it forced.
//!
//! - **Drifted**: the instance's image id is known and differs from the pool's desired AMI
//!   (Karpenter's drift on the AMI). An unknown image or an unresolved desired AMI is never drift
//!   (fail closed: nothing is rotated on a guess).
//! - **Expired**: age (from the EC2 launch time) `>= expireAfter`, as Karpenter's expiration
//!   controller (`!now.Before(launch + expireAfter)`). `expireAfter: Never` never expires.
//! - **Forced**: age `>= expireAfter + terminationGracePeriod`. Without a
//!   `terminationGracePeriod` (wait indefinitely) expiry stays budgeted forever.
//! - Drift wins over expiry (one reason per node, `Drifted`, budgeted) unless the node is past
//!   the forced-expiry line, where the reason is `Expired` and the rotation is forced.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::fleet::Member;
use crate::rotation::RotationReason;

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
    },
    /// Older than `expireAfter + terminationGracePeriod` (by `overdue`): forced, no budget wait.
    Forced {
        /// `age - (expireAfter + terminationGracePeriod)`.
        overdue: Duration,
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

/// Assesses `member` at `now` against the desired AMI (`None` = unresolved), `expire_after`
/// (`None` = Never) and `termination_grace_period` (`None` = unset: expiry is never forced).
/// Sums that overflow are treated as never reached.
pub fn assess(
    member: &Member,
    desired_ami: Option<&str>,
    expire_after: Option<Duration>,
    termination_grace_period: Option<Duration>,
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
    let expiry = match expire_after {
        None => Expiry::Never,
        Some(limit) if age < limit => Expiry::Fresh {
            remaining: limit - age,
        },
        Some(limit) => {
            let forced_at = termination_grace_period.and_then(|g| limit.checked_add(g));
            match forced_at {
                Some(line) if age >= line => Expiry::Forced {
                    overdue: age - line,
                },
                _ => Expiry::Expired {
                    overdue: age - limit,
                },
            }
        }
    };
    Assessment { age, drift, expiry }
}
