//! The node commands of the step function: claim the replacement, cordon and start the drain,
//! one drain step (evictions under the PodDisruptionBudgets, deletions after the deadline).

use super::*;

impl RotatorHandler {
    /// `ClaimReplacement`: the replacement `id` is Ready; the rotation records it.
    pub(super) async fn claim_replacement(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
        id: &str,
    ) -> Result<Performed, PortError> {
        let r = &v.value;
        let next = Rotation {
            replacement: Some(id.to_string()),
            ..r.enter(Step::Cordoned, ctx.clock.now())
        };
        log_move(r, command, Step::Cordoned, "replacement ready");
        moved(r.step, self.save(&v, next).await?)
    }

    /// `Cordon`: cordons the node and records the drain's state (`Draining`); a node that is
    /// already gone goes straight to `Terminating`. The drain honours PDBs until the policy's
    /// `terminationGracePeriod`; a repair's (`Unhealthy`) until `repair.drainTimeout` (or the
    /// grace period when shorter), then forces.
    pub(super) async fn cordon(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
    ) -> Result<Performed, PortError> {
        let r = &v.value;
        let now = ctx.clock.now();
        let reason = format!("{:?}", r.reason);
        let grace = match r.reason {
            crate::rotation::RotationReason::Unhealthy => Some(
                ctx.policy
                    .termination_grace_period
                    .map_or(ctx.policy.repair.drain_timeout, |g| {
                        g.min(ctx.policy.repair.drain_timeout)
                    }),
            ),
            _ => ctx.policy.termination_grace_period,
        };
        let next = match k::start_drain_known(
            ctx.kube.as_ref(),
            &r.instance_id,
            ctx.observed_node(&r.instance_id),
            &reason,
            grace,
            now,
        )
        .await
        {
            Ok(mut state) => {
                // Pods' opt-outs hold a voluntary drain, never an interruption's.
                state.honour_opt_outs = matches!(
                    r.reason,
                    crate::rotation::RotationReason::Drifted
                        | crate::rotation::RotationReason::Expired
                        | crate::rotation::RotationReason::Unhealthy
                        | crate::rotation::RotationReason::Manual
                );
                Rotation {
                    drain: Some(
                        serde_json::to_value(&state).map_err(|e| PortError::other("encode", e))?,
                    ),
                    ..r.enter(Step::Draining, now)
                }
            }
            Err(k::DrainError::NodeNotFound(_)) => r.enter(Step::Terminating, now),
            Err(e) => return Err(e.into()),
        };
        log_move(r, command, next.step, "cordoned");
        moved(r.step, self.save(&v, next).await?)
    }

    /// `DrainStep`: one step of the drain from its recorded state; `Terminating` once every
    /// pod that must leave is gone. The drain's state is saved whatever happened, with the
    /// error when the step failed.
    pub(super) async fn drain_step(
        &self,
        ctx: &mut PoolCtx<'_>,
        v: Versioned<Rotation>,
        command: &Command,
    ) -> Result<Performed, PortError> {
        let r = &v.value;
        let now = ctx.clock.now();
        let mut state: DrainState = r
            .drain
            .clone()
            .and_then(|d| serde_json::from_value(d).ok())
            .ok_or_else(|| PortError::other("rotation record", "Draining without a drain state"))?;
        let result =
            k::drain_step(ctx.kube.as_ref(), &mut state, now, self.settings.drain_step).await;
        let drain = Some(serde_json::to_value(&state).map_err(|e| PortError::other("encode", e))?);
        match result {
            Ok(p) if p.done => {
                log_move(r, command, Step::Terminating, "drained");
                let next = Rotation {
                    drain,
                    ..r.enter(Step::Terminating, now)
                };
                moved(r.step, self.save(&v, next).await?)
            }
            Ok(p) => {
                tracing::info!(pool = %r.pool, instance = %r.instance_id, remaining = p.pods_remaining, blocked_by = %crate::log_field::json(&p.blocked_by), deadline = %crate::log_field::json(&p.deadline), decision = "draining");
                moved(
                    r.step,
                    self.save(&v, Rotation { drain, ..r.clone() }).await?,
                )
            }
            Err(e) => {
                let kept = Rotation {
                    drain,
                    error: Some(e.to_string()),
                    ..r.clone()
                };
                self.save(&v, kept).await?;
                Err(e.into())
            }
        }
    }
}
