//! The pools' rollout statuses ([`crate::rollout`]): each pool's computed at the end of its round
//! from what the pass observed and, when it differs from the one its record holds, left due in
//! the cluster's view; once the cluster's pools are done, the pass writes the due ones, at most
//! [`super::Settings::status_writes`] ([`crate::rollout::to_write`]): each its SSM parameter,
//! then its pool record, whose write announces each condition that changed.

use chrono::{DateTime, Utc};
use futures::StreamExt;

use super::execute::PoolCtx;
use super::observe::ClusterView;
use super::{PoolReport, RotatorHandler};
use crate::rollout;
use crate::state;

/// Statuses written at once.
const WRITES_AT_ONCE: usize = 8;

impl RotatorHandler {
    /// Computes the pool's status and leaves it due in `view` when it changed (a second round
    /// of the pool replaces what its first left).
    pub(super) fn stage_rollout(
        &self,
        ctx: &PoolCtx<'_>,
        view: &ClusterView,
        report: &mut PoolReport,
        now: DateTime<Utc>,
    ) {
        let Some(record) = &ctx.record else { return };
        let status = status_of(ctx, record, report.blocked.as_deref(), now);
        report.metrics.rollout = Some(status.counts);
        let Ok(mut due) = view.due_statuses.lock() else {
            return;
        };
        if record.rollout.as_ref() == Some(&status) {
            due.remove(&status.pool);
        } else {
            let pool = status.pool.clone();
            due.insert(pool, rollout::Due::of(status, record.rollout.as_ref()));
        }
    }

    /// Writes the statuses `view`'s pools left due, at most [`super::Settings::status_writes`],
    /// [`WRITES_AT_ONCE`] at once. Best effort, each in its order: a failed put leaves the record
    /// as it was, so the next pass finds the difference and puts again; a put whose record write
    /// is lost is put again (same document) next pass; a status past the budget is written by a
    /// later pass.
    pub(super) async fn write_statuses(&self, view: &ClusterView, now: DateTime<Utc>) {
        let due: Vec<rollout::Due> = match view.due_statuses.lock() {
            Ok(mut d) => std::mem::take(&mut *d).into_values().collect(),
            Err(_) => return,
        };
        let turn = u64::try_from(now.timestamp() / 60).unwrap_or(0);
        let (written, deferred) = rollout::to_write(due, self.settings.status_writes, turn);
        for d in &deferred {
            tracing::info!(pool = %d.status.pool, decision = "status deferred", reason = %format!("this pass wrote its {} rollout statuses for the cluster (NODECYCLE_STATUS_WRITES: Parameter Store's throughput is the account's); a later pass writes it", self.settings.status_writes));
        }
        futures::stream::iter(written)
            .for_each_concurrent(WRITES_AT_ONCE, |d| async move {
                self.write_status(&d.status, now).await;
            })
            .await;
    }

    async fn write_status(&self, status: &rollout::Rollout, now: DateTime<Utc>) {
        let pool = &status.pool;
        if let Err(e) = self.cell.status.publish(status).await {
            tracing::warn!(pool = %pool, error = %e, parameter = %rollout::parameter_name(pool), "cannot publish the rollout status; next pass");
            return;
        }
        let result = self
            .cell
            .announce
            .update_pool(pool, now, |r| state::PoolRecord {
                rollout: Some(status.clone()),
                ..r.clone()
            })
            .await;
        let summary = status
            .conditions
            .iter()
            .map(|c| format!("{:?}={:?} ({})", c.kind, c.status, c.reason))
            .collect::<Vec<_>>()
            .join(", ");
        match result {
            Ok(_) => tracing::info!(
                pool = %pool,
                decision = "rollout status",
                nodes = status.counts.nodes,
                up_to_date = status.counts.up_to_date,
                up_to_date_and_ready = status.counts.up_to_date_and_ready,
                desired = status.counts.desired_capacity,
                reason = %summary,
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
