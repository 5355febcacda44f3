//! `rollout`: whether pools' rollouts reached what a pipeline waits for, judged on the status
//! the rotator last recorded (the one it published: [`crate::rollout`]), as `nodecycle wait`
//! judges the published parameter.

use serde_json::{Value, json};

use crate::handlers::HandlerError;
use crate::policy::Policy;
use crate::rollout::{self, Want};

/// `{"verdict", "pools": [{"pool", "verdict", "message", "status"}]}` over `policies`.
pub(super) async fn check(
    state: &crate::state::Repository,
    policies: &[&Policy],
    want: &Want,
) -> Result<Value, HandlerError> {
    let mut pools = Vec::new();
    let mut verdicts = Vec::new();
    for policy in policies {
        let pool = policy.pool_id();
        let record = state
            .pool(&pool)
            .await
            .map_err(|e| HandlerError::internal(format!("cannot read pool {pool}: {e}")))?;
        let status = record.and_then(|r| r.rollout);
        let verdict = rollout::judge_published(&pool, status.as_ref(), want);
        pools.push(json!({
            "pool": pool,
            "verdict": verdict.name(),
            "message": verdict.message(),
            "status": status,
        }));
        verdicts.push(verdict);
    }
    Ok(json!({
        "verdict": rollout::overall(&verdicts),
        "pools": pools,
    }))
}
