//! Rebalance recommendations, per the pool's `interruption.rebalance`.

use serde_json::json;

use super::{Action, InterruptionHandler, Outcome, internal};
use crate::clock::Clock;
use crate::handlers::HandlerError;
use crate::kube::{self as k, NodeEvent};
use crate::policy::{PoolRef, RebalanceAction};
use crate::rotation::{Rotation, RotationReason};
use crate::state::ClaimKey;

impl InterruptionHandler {
    /// Rebalance recommendation, per the pool's `interruption.rebalance`.
    pub(super) async fn rebalance(
        &self,
        policy: &PoolRef,
        instance_id: &str,
        clock: &Clock,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let key = ClaimKey::work(&pool, instance_id, "rebalance");
        self.claimed(
            &key,
            "RebalanceRecommendation",
            || clock.now(),
            |_| {
                Outcome::new(
                    instance_id,
                    Some(&pool),
                    Action::Skipped,
                    "rebalance recommendation for this instance already handled",
                )
            },
            || async {
                match policy.rebalance {
                    RebalanceAction::Ignore => Ok(Outcome::new(
                        instance_id,
                        Some(&pool),
                        Action::Recorded,
                        "interruption.rebalance is ignore: recorded only",
                    )),
                    RebalanceAction::Cordon => self.cordon_only(policy, instance_id).await,
                    RebalanceAction::Replace => {
                        let rotation = Rotation::new(
                            &pool,
                            instance_id,
                            RotationReason::Interrupted,
                            true,
                            clock.now(),
                        );
                        self.start_rotation(rotation, "interruption.rebalance is replace")
                            .await
                    }
                }
            },
        )
        .await
    }

    pub(super) async fn cordon_only(
        &self,
        policy: &PoolRef,
        instance_id: &str,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let kube = self.connect(policy).await?;
        let Some(node) = kube.find_node(instance_id).await.map_err(internal)? else {
            return Ok(Outcome::new(
                instance_id,
                Some(&pool),
                Action::Skipped,
                "interruption.rebalance is cordon, but no Kubernetes node has this instance",
            ));
        };
        let changed = kube
            .cordon(&node.name, "RebalanceRecommendation")
            .await
            .map_err(internal)?;
        if changed {
            let event = NodeEvent::normal(
                "Cordoned",
                format!(
                    "nodecycle cordoned the node and added taint {}=RebalanceRecommendation:NoSchedule: \
                     EC2 recommends rebalancing this instance (interruption.rebalance: cordon)",
                    k::DISRUPTED_TAINT_KEY
                ),
            );
            if let Err(e) = kube.record_event(&node, &event).await {
                tracing::warn!(node = %node.name, error = %e, "could not record the Event");
            }
        }
        Ok(Outcome::new(
            instance_id,
            Some(&pool),
            Action::Cordoned,
            "interruption.rebalance is cordon: no new pods land on it; the rotator counts it as disrupting",
        )
        .with(json!({"node": node.name, "changed": changed})))
    }
}
