//! Gates: pool-level states in which no rotation starts (strongest first). In-flight rotations
//! still advance, except under [`Gate::Stopped`] (see [`Gate::holds`]); the launch template
//! still moves unless the deployment is stopped or the pool is halted or paused.

use std::fmt;

use serde::Serialize;

use super::Snapshot;
use super::classify::Classified;
use crate::rotation::{Rotation, RotationReason};

/// Why nothing starts in a pool this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "gate", content = "reason", rename_all = "camelCase")]
pub enum Gate {
    /// The deployment's stop switch is on ([`crate::stop`]): nothing starts, the launch
    /// template stays, in-flight rotations hold at their step (but `Interrupted` ones).
    Stopped(String),
    /// Halted after a failed rotation or node group update.
    Halted(String),
    /// Paused by an operator or the policy.
    Paused(String),
    /// The snapshot lists these instances more than once: it is not trusted.
    Untrusted(Vec<String>),
    /// The desired AMI is unresolved: drift cannot be checked.
    Unresolved,
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gate::Stopped(r) => write!(f, "{r}"),
            Gate::Halted(r) => write!(f, "pool halted: {r}"),
            Gate::Paused(r) => write!(f, "pool paused: {r}"),
            Gate::Untrusted(ids) => write!(
                f,
                "snapshot lists instance(s) {} more than once: not trusting it",
                ids.join(", ")
            ),
            Gate::Unresolved => write!(
                f,
                "desired AMI unresolved: drift cannot be checked, nothing starts"
            ),
        }
    }
}

impl Gate {
    /// The pool's pause reason (operator pause, else `paused: true` in the policy).
    pub fn paused(snapshot: &Snapshot) -> Option<String> {
        snapshot.gates.paused.clone().or_else(|| {
            snapshot
                .policy
                .paused
                .then(|| "policy sets paused: true".to_string())
        })
    }

    /// Stopped, halted or paused: the launch template does not move either.
    pub fn freezes_template(&self) -> bool {
        matches!(self, Gate::Stopped(_) | Gate::Halted(_) | Gate::Paused(_))
    }

    /// Whether the in-flight rotation `r` stays at its step this pass: every rotation while
    /// the deployment is stopped, except `Interrupted` ones (a Spot reclaim, a terminate
    /// lifecycle hook or a rebalance `replace`: the instance goes whatever nodecycle does, so
    /// its drain goes on). Settling a finished rotation's surge is no step and never held.
    pub fn holds(&self, r: &Rotation) -> bool {
        matches!(self, Gate::Stopped(_)) && r.reason != RotationReason::Interrupted
    }
}

/// The strongest gate of the pool, if any.
pub(super) fn gate(snapshot: &Snapshot, c: &Classified<'_>) -> Option<Gate> {
    if let Some(reason) = &snapshot.gates.stopped {
        Some(Gate::Stopped(reason.clone()))
    } else if let Some(reason) = &snapshot.gates.halted {
        Some(Gate::Halted(reason.clone()))
    } else if let Some(reason) = Gate::paused(snapshot) {
        Some(Gate::Paused(reason))
    } else if !c.duplicates.is_empty() {
        Some(Gate::Untrusted(
            c.duplicates.iter().map(|s| (*s).to_string()).collect(),
        ))
    } else if snapshot.gates.desired_ami.is_none() {
        Some(Gate::Unresolved)
    } else {
        None
    }
}
