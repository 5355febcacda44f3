//! Spot / Capacity Reservation interruption warnings and instances stopping: cordon, taint and
//! evict at once, without budgets.

use std::time::Instant;

use serde_json::json;

use super::{Action, InterruptionHandler, Outcome, chrono_of, internal};
use crate::clock::Clock;
use crate::event::interruption::{ClassifiedEvent, Interruption};
use crate::handlers::HandlerError;
use crate::kube::{self as k, DrainError, NodeOps};
use crate::policy::PoolRef;
use crate::state::ClaimKey;

impl InterruptionHandler {
    /// Spot / Capacity Reservation warning, or the instance stopping: cordon, taint and evict
    /// at once, delete what PDBs still hold `force_after` the event, step until the instance is
    /// due to die or the pods are gone.
    pub(super) async fn drain_now(
        &self,
        c: &ClassifiedEvent,
        policy: &PoolRef,
        instance_id: &str,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let key = ClaimKey::work(&pool, instance_id, "drain");
        self.claimed(
            &key,
            c.event.kind(),
            || clock.now(),
            |doc| {
                Outcome::new(
                    instance_id,
                    Some(&pool),
                    Action::Skipped,
                    format!(
                        "already drained or draining ({} at {})",
                        doc.map_or("another event", |d| d.what.as_str()),
                        doc.and_then(|d| d.at)
                            .map_or("?".to_string(), |t| t.to_rfc3339())
                    ),
                )
            },
            || async {
                let kube = self.connect(policy).await?;
                self.drain_until_gone(c, kube.as_ref(), &pool, instance_id, clock, deadline)
                    .await
            },
        )
        .await
    }

    pub(super) async fn drain_until_gone(
        &self,
        c: &ClassifiedEvent,
        kube: &dyn NodeOps,
        pool: &str,
        instance_id: &str,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        let reason = match &c.event {
            Interruption::InterruptionWarning { market: "spot", .. } => "SpotInterruption",
            Interruption::InterruptionWarning { .. } => "CapacityReservationInterruption",
            _ => "InstanceStopping",
        };
        let (event_time, untrusted) = crate::event::interruption::deadline_base(
            c.time,
            clock.now(),
            chrono_of(self.settings.max_event_age),
        );
        if let Some(why) = &untrusted {
            tracing::warn!(pool, instance = instance_id, decision = "event time not trusted", reason = %why, "deadlines count from now: PDBs are honoured as for a fresh warning");
        }
        let force_at = event_time + chrono_of(self.settings.force_after);
        let gone_at = event_time + chrono_of(self.settings.notice);
        let mut state = match k::start_drain(kube, instance_id, reason, None, clock.now()).await {
            Ok(s) => s,
            Err(DrainError::NodeNotFound(_)) => {
                return Ok(Outcome::new(
                    instance_id,
                    Some(pool),
                    Action::Skipped,
                    "no Kubernetes node has this instance (not registered, or already removed)",
                ));
            }
            Err(e) => return Err(internal(e)),
        };
        state.deadline = Some(force_at);
        tracing::info!(pool, instance = instance_id, node = %state.node, decision = "cordoned", reason, force_at = %force_at, "cordoned and tainted; evicting every pod now");
        let remaining = loop {
            let progress = k::drain_step(kube, &mut state, clock.now(), self.settings.drain_step)
                .await
                .map_err(internal)?;
            let out_of_time =
                Instant::now() + self.settings.poll + self.settings.reserve >= deadline;
            if progress.done || clock.now() >= gone_at || out_of_time {
                break progress.pods_remaining;
            }
            tokio::time::sleep(self.settings.poll).await;
        };
        let details = json!({
            "node": state.node,
            "evicted": state.evicted.len(),
            "deleted": state.deleted.len(),
            "steps": state.steps,
            "forceAt": force_at,
            "remaining": remaining,
        });
        Ok(if state.done {
            Outcome::new(
                instance_id,
                Some(pool),
                Action::Drained,
                format!("{reason}: cordoned, tainted and drained without waiting for budgets"),
            )
        } else {
            Outcome::new(
                instance_id,
                Some(pool),
                Action::Draining,
                format!(
                    "{reason}: cordoned and tainted; pods still leaving when the instance is due to stop; its node is removed when it shuts down"
                ),
            )
        }
        .with(details))
    }
}
