//! Spot / Capacity Reservation interruption warnings and instances stopping: cordon, taint and
//! evict at once, without budgets.

use std::time::Instant;

use serde_json::json;

use super::{Handled, Outcome, Settings, chrono_of, internal};
use crate::clock::Clock;
use crate::event::instance_events::ClassifiedEvent;
use crate::handlers::HandlerError;
use crate::kube::{self as k, DrainError, NodeOps};

/// The spot drain: the cluster's Kubernetes API only.
pub(super) struct SpotDrain<'a> {
    /// The instance's cluster.
    pub kube: &'a dyn NodeOps,
    /// Deadlines and pacing.
    pub settings: &'a Settings,
}

impl SpotDrain<'_> {
    /// Cordons, taints and evicts at once, deletes what PDBs still hold `force_after` the event,
    /// and steps until the instance is due to die or the pods are gone. `reason` is the taint
    /// value (`SpotInterruption`, `CapacityReservationInterruption`, `InstanceStopping`).
    pub(super) async fn run(
        &self,
        c: &ClassifiedEvent,
        pool: &str,
        instance_id: &str,
        reason: &str,
        clock: &Clock,
        deadline: Instant,
    ) -> Result<Outcome, HandlerError> {
        let (kube, settings) = (self.kube, self.settings);
        let (event_time, untrusted) = crate::event::instance_events::deadline_base(
            c.time,
            clock.now(),
            chrono_of(settings.max_event_age),
        );
        if let Some(why) = &untrusted {
            tracing::warn!(pool, instance = instance_id, decision = "event time not trusted", reason = %why, "deadlines count from now: PDBs are honoured as for a fresh warning");
        }
        let force_at = event_time + chrono_of(settings.force_after);
        let gone_at = event_time + chrono_of(settings.notice);
        let mut state = match k::start_drain(kube, instance_id, reason, None, clock.now()).await {
            Ok(s) => s,
            Err(DrainError::NodeNotFound(_)) => {
                return Ok(Outcome::new(
                    instance_id,
                    Some(pool),
                    Handled::Skipped,
                    "no Kubernetes node has this instance (not registered, or already removed)",
                ));
            }
            Err(e) => return Err(internal(e)),
        };
        state.deadline = Some(force_at);
        tracing::info!(pool, instance = instance_id, node = %state.node, decision = "cordoned", reason, force_at = %force_at, "cordoned and tainted; evicting every pod now");
        let remaining = loop {
            let progress = k::drain_step(kube, &mut state, clock.now(), settings.drain_step)
                .await
                .map_err(internal)?;
            let out_of_time = Instant::now() + settings.poll + settings.reserve >= deadline;
            if progress.done || clock.now() >= gone_at || out_of_time {
                break progress.pods_remaining;
            }
            tokio::time::sleep(settings.poll).await;
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
                Handled::Drained,
                format!("{reason}: cordoned, tainted and drained without waiting for budgets"),
            )
        } else {
            Outcome::new(
                instance_id,
                Some(pool),
                Handled::Draining,
                format!(
                    "{reason}: cordoned and tainted; pods still leaving when the instance is due to stop; its node is removed when it shuts down"
                ),
            )
        }
        .with(details))
    }
}
