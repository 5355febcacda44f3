//! The deployment's stop switch: one item of the state table that, while it says `stopped`,
//! holds every pool of the deployment (see [`crate::plan::Gate::Stopped`]): no rotation or node
//! group update starts, launch templates do not move, and in-flight rotations stay at the step
//! they are in, except `Interrupted` ones (the instance is going away anyway). The interruption
//! handler does not read it: Spot and lifecycle-hook drains go on.
//!
//! The switch never touches a pool's own pause (`ops pause`, `paused: true`): `start` restores
//! exactly the pools that were not paused before `stop`.
//!
//! Read and written by [`crate::state::Repository::stop_switch`] and
//! [`crate::state::Repository::set_stop_switch`]. Item: `pk = DEPLOYMENT`, `sk = STOP`, `doc` = `{"stopped": true, "reason", "by", "at",
//! "requestId"}`. An operator without the CLI can write it with `aws dynamodb put-item` (see
//! docs/operations.md); a present item whose `doc` lacks `stopped` counts as stopped (whoever
//! wrote it meant to stop), and an item that cannot be read stops the rotator too (fail closed).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

fn stopped_default() -> bool {
    true
}

/// The switch as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopSwitch {
    /// Every pool is held while true.
    #[serde(default = "stopped_default")]
    pub stopped: bool,
    /// Why (the operator's reason).
    #[serde(default)]
    pub reason: String,
    /// Who (the audit caller), when known.
    #[serde(default)]
    pub by: Option<String>,
    /// When it was last flipped.
    #[serde(default)]
    pub at: Option<DateTime<Utc>>,
    /// The ops request that flipped it.
    #[serde(default)]
    pub request_id: Option<String>,
}

impl StopSwitch {
    /// What a present item whose `doc` is no switch (`error`) counts as: stopped, saying so.
    pub fn unreadable(error: &str) -> StopSwitch {
        StopSwitch {
            stopped: true,
            reason: format!(
                "the stop item's doc is not a stop switch ({error}): stopped until `nodecycle start` rewrites it"
            ),
            by: None,
            at: None,
            request_id: None,
        }
    }

    /// The gate's message: `deployment stopped by <who> at <when>: <reason>`.
    pub fn message(&self) -> String {
        let at = self
            .at
            .map(|t| format!(" at {}", t.to_rfc3339_opts(SecondsFormat::Secs, true)))
            .unwrap_or_default();
        let reason = if self.reason.is_empty() {
            "no reason given".to_string()
        } else {
            self.reason.clone()
        };
        format!(
            "deployment stopped by {}{at}: {reason}; `nodecycle start` resumes",
            self.by.as_deref().unwrap_or("an operator")
        )
    }
}
