//! The deployment's stop switch: one item of the state table that, while it says `stopped`,
//! holds every pool of the deployment (see [`crate::plan::Gate::Stopped`]): no rotation or node
//! group update starts, launch templates do not move, and in-flight rotations stay at the step
//! they are in, except `Interrupted` ones (the instance is going away anyway). The interruption
//! handler does not read it: Spot and lifecycle-hook drains go on.
//!
//! The switch never touches a pool's own pause (`ops pause`, `paused: true`): `start` restores
//! exactly the pools that were not paused before `stop`.
//!
//! Item: `pk = DEPLOYMENT`, `sk = STOP`, `doc` = `{"stopped": true, "reason", "by", "at",
//! "requestId"}`. An operator without the CLI can write it with `aws dynamodb put-item` (see
//! docs/operations.md); a present item whose `doc` lacks `stopped` counts as stopped (whoever
//! wrote it meant to stop), and an item that cannot be read stops the rotator too (fail closed).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::port::{ErrorKind, PortError};
use crate::state::{Store, WRITE_ATTEMPTS, too_many_conflicts};

/// Partition of the deployment-wide items (the stop switch and its audit records).
pub const DEPLOYMENT_PK: &str = "DEPLOYMENT";
/// Sort key of the stop switch.
pub const STOP_SK: &str = "STOP";

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

/// Reads the switch: `Ok(None)` when absent or set to not stopped; an item whose `doc` is no
/// switch counts as stopped, with that said in its reason.
pub async fn load(store: &dyn Store) -> Result<Option<StopSwitch>, PortError> {
    let Some(item) = store.get(DEPLOYMENT_PK, STOP_SK).await? else {
        return Ok(None);
    };
    let switch = serde_json::from_value::<StopSwitch>(item.value.clone()).unwrap_or_else(|e| {
        StopSwitch {
            stopped: true,
            reason: format!("the stop item's doc is not a stop switch ({e}): stopped until `nodecycle start` rewrites it"),
            by: None,
            at: None,
            request_id: None,
        }
    });
    Ok(switch.stopped.then_some(switch))
}

/// [`load`] as the gate's message; a switch that cannot be read is a stop too (fail closed).
pub async fn gate(store: &dyn Store) -> Option<String> {
    match load(store).await {
        Ok(s) => s.map(|s| s.message()),
        Err(e) => {
            tracing::error!(error = %e, decision = "stopped", "cannot read the stop switch; holding every pool");
            Some(format!(
                "cannot read the stop switch ({DEPLOYMENT_PK}/{STOP_SK}): {e}; holding every pool"
            ))
        }
    }
}

/// Sets the switch to `switch` (conditional write, re-read on a lost race). Returns the switch
/// before (`None`: absent or not stopped) and whether the write changed anything: flipping to
/// the state it is already in keeps the first record (who stopped, and why).
pub async fn set(
    store: &dyn Store,
    switch: &StopSwitch,
) -> Result<(Option<StopSwitch>, bool), PortError> {
    let mut last = None;
    for attempt in 0..WRITE_ATTEMPTS {
        if attempt > 0 {
            store.backoff(attempt).await;
        }
        let current = store.get(DEPLOYMENT_PK, STOP_SK).await?;
        let before = current
            .as_ref()
            .and_then(|v| serde_json::from_value::<StopSwitch>(v.value.clone()).ok());
        let was_stopped = match (&current, &before) {
            (None, _) => false,
            (Some(_), Some(b)) => b.stopped,
            (Some(_), None) => true,
        };
        let before = before.filter(|b| b.stopped);
        if current.is_some() && was_stopped == switch.stopped {
            return Ok((before, false));
        }
        if current.is_none() && !switch.stopped {
            return Ok((None, false));
        }
        let doc = serde_json::to_value(switch)
            .map_err(|e| PortError::new("stop:encode", ErrorKind::Other, e.to_string()))?;
        match store
            .put(
                DEPLOYMENT_PK,
                STOP_SK,
                &doc,
                current.map(|v| v.version),
                None,
            )
            .await
        {
            Ok(_) => return Ok((before, true)),
            Err(e) if e.kind == ErrorKind::Conflict => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(too_many_conflicts))
}
