//! Spot / Capacity Reservation interruption warnings and instances stopping: cordon, taint and
//! evict at once, without budgets. What PDBs still hold is deleted at the deadline the pure
//! [`crate::interruption::deadline`] gives: never for a warning whose time is not believable and
//! whose interruption EC2 does not confirm.

use std::time::Instant;

use serde_json::json;

use super::{Handled, Outcome, Settings, internal};
use crate::clock::Clock;
use crate::event::instance_events::{ClassifiedEvent, Interruption};
use crate::handlers::HandlerError;
use crate::interruption::InstanceLookup;
use crate::interruption::deadline::{self, Confirmation};
use crate::kube::{self as k, DrainError, NodeOps};

/// The spot drain: the cluster's Kubernetes API, and EC2 to confirm an interruption whose
/// warning's time is not believable.
pub(super) struct SpotDrain<'a> {
    /// The instance's cluster.
    pub kube: &'a dyn NodeOps,
    /// EC2 instances (the Spot request's status).
    pub instances: &'a dyn InstanceLookup,
    /// Deadlines and pacing.
    pub settings: &'a Settings,
}

impl SpotDrain<'_> {
    /// Cordons, taints and evicts at once, deletes what PDBs still hold `force_after` the event
    /// (never when the event's time is not believable and EC2 does not confirm the
    /// interruption: [`deadline::deadlines`]), and steps until the instance is due to die or the
    /// pods are gone. `reason` is the taint value (`SpotInterruption`,
    /// `CapacityReservationInterruption`, `InstanceStopping`).
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
        let trusted = deadline::trusted_time(c.time, clock.now(), settings.max_event_age);
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
        // Asked only when the time is not believable, after the cordon: no delay before it.
        let confirmation = match &trusted {
            Ok(_) => None,
            Err(_) => Some(self.confirmation(&c.event, instance_id).await),
        };
        let deadlines = deadline::deadlines(
            &trusted,
            confirmation.as_ref(),
            clock.now(),
            settings.force_after,
            settings.notice,
        );
        let (force_at, gone_at) = (deadlines.force_at, deadlines.gone_at);
        state.deadline = force_at;
        if let Some(why) = &deadlines.why {
            tracing::warn!(pool, instance = instance_id, decision = "event time not trusted", reason = %why, force_at = ?force_at, "deadlines not the event's");
        }
        tracing::info!(pool, instance = instance_id, node = %state.node, decision = "cordoned", reason, force_at = ?force_at, "cordoned and tainted; evicting every pod now");
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
            "deadlines": deadlines.why,
        });
        // Why PDBs were (not) honoured throughout, when the deadlines are not the event's.
        let why = deadlines
            .why
            .as_deref()
            .map_or(String::new(), |w| format!(" ({w})"));
        Ok(if state.done {
            Outcome::new(
                instance_id,
                Some(pool),
                Handled::Drained,
                format!("{reason}: cordoned, tainted and drained without waiting for budgets{why}"),
            )
        } else {
            Outcome::new(
                instance_id,
                Some(pool),
                Handled::Draining,
                format!(
                    "{reason}: cordoned and tainted; pods still leaving when the instance is due to stop; its node is removed when it shuts down{why}"
                ),
            )
        }
        .with(details))
    }

    /// What EC2 says of the interruption: a stopping instance was checked against EC2 before
    /// (`verify::state_claim`); a Spot warning by its Spot request's status; a Capacity
    /// Reservation warning cannot be confirmed. Unreadable is unconfirmed (fail closed).
    async fn confirmation(&self, event: &Interruption, instance_id: &str) -> Confirmation {
        match event {
            Interruption::StateChange { .. } => {
                Confirmation::Confirmed("EC2 reports the instance stopping".into())
            }
            Interruption::InterruptionWarning { market: "spot", .. } => {
                match self.instances.spot_request_status(instance_id).await {
                    Ok(Some(code)) if deadline::spot_status_confirms(&code) => {
                        Confirmation::Confirmed(format!("EC2 confirms it (Spot request {code})"))
                    }
                    Ok(Some(code)) => Confirmation::Unconfirmed(format!(
                        "EC2 does not confirm it (Spot request {code})"
                    )),
                    Ok(None) => Confirmation::Unconfirmed(
                        "EC2 does not confirm it (no Spot request for the instance)".into(),
                    ),
                    Err(e) => Confirmation::Unconfirmed(format!(
                        "EC2 cannot confirm it (the Spot request could not be read: {e})"
                    )),
                }
            }
            _ => Confirmation::Unconfirmed(
                "EC2 cannot confirm a Capacity Reservation interruption".into(),
            ),
        }
    }
}
