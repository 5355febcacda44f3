//! `stop` / `start`: the deployment's stop switch ([`crate::stop`]). One request holds every
//! pool at its next step boundary; one request lets them go on. Neither touches a pool's own
//! pause, so `start` brings back exactly the pools that were not paused before `stop`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Origin, internal};
use crate::handlers::HandlerError;
use crate::policy::Policy;
use crate::state::Repository;
use crate::stop::StopSwitch;

/// Flips the switch in `store` to `stopped` and answers `{"action", "requestId", "changed",
/// "stopped" (the switch in force after the request, or null), "before", "pools": [{"pool",
/// "paused"}], "holds" | "resumes": [pools], "staysPaused": [pools]}`.
pub(super) async fn stop_switch(
    store: &Repository,
    policies: &BTreeMap<String, Policy>,
    stopped: bool,
    reason: &str,
    origin: &Origin,
    now: DateTime<Utc>,
) -> Result<Value, HandlerError> {
    let switch = StopSwitch {
        stopped,
        reason: reason.to_string(),
        by: origin.caller.clone(),
        at: Some(now),
        request_id: Some(origin.request_id.clone()),
    };
    let (before, changed) = store.set_stop_switch(&switch).await.map_err(internal)?;
    let in_force = if stopped {
        if changed {
            Some(switch)
        } else {
            before.clone()
        }
    } else {
        None
    };
    // Each pool's own pause, as the switch leaves it (never changed by it).
    let mut pools = Vec::new();
    let (mut free, mut paused) = (Vec::new(), Vec::new());
    for (id, policy) in policies {
        let record = store.pool(id).await.map_err(internal)?;
        let own = match record.and_then(|r| r.paused) {
            Some(p) => json!({"by": "operator", "reason": p.reason, "caller": p.by}),
            None if policy.paused => {
                json!({"by": "policy", "reason": "policy sets paused: true"})
            }
            None => Value::Null,
        };
        if own.is_null() {
            free.push(id.clone());
        } else {
            paused.push(id.clone());
        }
        pools.push(json!({"pool": id, "paused": own}));
    }
    let mut out = json!({
        "action": if stopped { "stop" } else { "start" },
        "requestId": origin.request_id,
        "changed": changed,
        "stopped": in_force,
        "before": before,
        "pools": pools,
        "staysPaused": paused,
    });
    if let Some(o) = out.as_object_mut() {
        o.insert(
            (if stopped { "holds" } else { "resumes" }).into(),
            json!(free),
        );
    }
    Ok(out)
}

/// The switch for `status`: the one in force, or null; unreadable is said in `problems`.
pub(super) async fn status_of(store: &Repository, problems: &mut Vec<String>) -> Value {
    match store.stop_switch().await {
        Ok(s) => json!(s),
        Err(e) => {
            problems.push(format!(
                "cannot read the stop switch: {e}; the rotator holds every pool until it can"
            ));
            Value::Null
        }
    }
}
