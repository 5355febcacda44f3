//! The rotator's cleanup of retained instances (`Terminating:Retained`, [`crate::retain`]):
//! each pass over a self-managed group, every instance Auto Scaling retained is terminated
//! (TerminateInstanceInAutoScalingGroup, no decrement: a retained instance does not count
//! toward desired capacity) once [`crate::retain::cleanup`] says its node has no evictable pod
//! left or is gone, audited under the pool's partition and logged one line with the reason.
//! One with pods, or whose pods could not be counted, is kept and logged. Nothing is done while
//! the deployment's stop switch is on.

use chrono::{DateTime, Utc};
use serde_json::json;

use super::{PoolReport, RotatorHandler};
use crate::plan::Snapshot;
use crate::retain::{Cleanup, cleanup};
use crate::state::AuditScope;

/// Audit records of the rotator's cleanups are kept this long (as ops requests').
const AUDIT_RETENTION_DAYS: i64 = 90;

impl RotatorHandler {
    /// Terminates the retained instances of `snapshot`'s group whose nodes are empty, and
    /// counts those left in `report` (the `RetainedInstances` metric). A terminate that fails
    /// is reported in `report.errors` and tried again next pass.
    pub(super) async fn clean_up_retained(
        &self,
        snapshot: &Snapshot,
        report: &mut PoolReport,
        now: DateTime<Utc>,
    ) {
        let pool = report.pool.clone();
        let retained = snapshot
            .members
            .iter()
            .filter(|m| snapshot.group.retained.contains(&m.instance_id));
        let mut left = 0u32;
        for m in retained {
            let why = match cleanup(m) {
                Cleanup::Keep { why } => {
                    tracing::warn!(pool = %pool, instance = %m.instance_id, decision = "retained", reason = %why, "instance kept retained");
                    left += 1;
                    continue;
                }
                Cleanup::Terminate { .. } if snapshot.gates.stopped.is_some() => {
                    tracing::info!(pool = %pool, instance = %m.instance_id, decision = "retained", reason = "the deployment is stopped", "instance kept retained");
                    left += 1;
                    continue;
                }
                Cleanup::Terminate { why } => why,
            };
            let doc = json!({
                "request": {"op": "terminateRetained", "pool": pool, "instance": m.instance_id},
                "by": "rotator",
                "reason": why,
                "at": now,
            });
            let ttl = now + chrono::Duration::days(AUDIT_RETENTION_DAYS);
            let request = format!("retained-{}", m.instance_id);
            if let Err(e) = (self.cell.state)
                .audit_start(AuditScope::Pool(&pool), &request, &doc, now, ttl)
                .await
            {
                // Nothing unaudited: tried again next pass.
                tracing::error!(pool = %pool, instance = %m.instance_id, error = %e, decision = "retained", "cannot write the audit record; the retained instance is not terminated this pass");
                report.errors.push(format!("{}: {e}", m.instance_id));
                left += 1;
                continue;
            }
            match self
                .ports
                .groups
                .terminate_instance(&m.instance_id, false)
                .await
            {
                Ok(()) => {
                    tracing::info!(pool = %pool, instance = %m.instance_id, decision = "terminated retained", reason = %why, "retained instance terminated");
                    report
                        .steps
                        .push(format!("{}: Retained -> Terminated", m.instance_id));
                }
                Err(e) => {
                    tracing::error!(pool = %pool, instance = %m.instance_id, error = %e, "cannot terminate the retained instance; tried again next pass");
                    report.errors.push(format!("{}: {e}", m.instance_id));
                    left += 1;
                }
            }
        }
        report.metrics.retained = left;
    }
}
