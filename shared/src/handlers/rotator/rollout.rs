//! The pool's rollout status ([`crate::rollout`]) at the end of its pass: computed from what
//! the pass observed, published (the SSM status parameter) and recorded (the pool record, whose
//! write announces each condition that changed) only when it differs from the recorded one.

use chrono::{DateTime, Utc};

use super::execute::PoolCtx;
use super::{PoolReport, RotatorHandler};
use crate::rollout;
use crate::state;

impl RotatorHandler {
    /// Publishes and records the pool's status when it changed. Best effort, in that order: a
    /// failed put leaves the record as it was, so the next pass finds the difference and puts
    /// again; a put whose record write is lost is put again (same document) next pass.
    pub(super) async fn record_rollout(
        &self,
        ctx: &PoolCtx<'_>,
        report: &mut PoolReport,
        now: DateTime<Utc>,
    ) {
        let Some(record) = &ctx.record else { return };
        let status = status_of(ctx, record, report.blocked.as_deref(), now);
        report.metrics.rollout = Some(status.counts);
        if record.rollout.as_ref() == Some(&status) {
            return;
        }
        let pool = ctx.policy.pool_id();
        let summary = |s: &rollout::Rollout| {
            s.conditions
                .iter()
                .map(|c| format!("{:?}={:?} ({})", c.kind, c.status, c.reason))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if let Err(e) = self.cell.status.publish(&status).await {
            tracing::warn!(pool = %pool, error = %e, parameter = %rollout::parameter_name(&pool), "cannot publish the rollout status; next pass");
            return;
        }
        let result = self
            .cell
            .announce
            .update_pool(&pool, now, |r| state::PoolRecord {
                rollout: Some(status.clone()),
                ..r.clone()
            })
            .await;
        match result {
            Ok(_) => tracing::info!(
                pool = %pool,
                decision = "rollout status",
                nodes = status.counts.nodes,
                up_to_date = status.counts.up_to_date,
                up_to_date_and_ready = status.counts.up_to_date_and_ready,
                desired = status.counts.desired_capacity,
                reason = %summary(&status),
                "published"
            ),
            Err(e) => {
                tracing::warn!(pool = %pool, error = %e, "cannot record the rollout status; next pass")
            }
        }
    }
}

/// The status of `ctx`'s pool from its snapshot and `record`, with `blocked` as what holds it.
pub(super) fn status_of(
    ctx: &PoolCtx<'_>,
    record: &state::PoolRecord,
    blocked: Option<&str>,
    now: DateTime<Utc>,
) -> rollout::Rollout {
    let desired = record.desired_release();
    let rejected = record.rejected();
    let s = &ctx.snapshot;
    let facts = rollout::Facts {
        pool: &s.policy.pool_id(),
        desired: desired.as_ref(),
        group_desired: s.group.desired_capacity,
        members: &s.members,
        gates: &s.gates,
        in_flight: s.rotations.iter().filter(|r| r.in_flight()).count(),
        blocked,
        rejected: rejected.as_ref(),
    };
    rollout::observe(&facts, record.rollout.as_ref(), now)
}
