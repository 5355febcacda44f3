//! Rebalance recommendations with `interruption.rebalance: cordon`: cordon and taint the node,
//! so no new pods land on it (the other settings are a record or a rotation, see
//! [`crate::interruption::action_for`]).

use serde_json::json;

use super::{Handled, Outcome, internal};
use crate::handlers::HandlerError;
use crate::kube::{self as k, NodeEvent, NodeOps};

/// Cordons the instance's node (the cluster's Kubernetes API only).
pub(super) async fn cordon_only(
    kube: &dyn NodeOps,
    pool: &str,
    instance_id: &str,
) -> Result<Outcome, HandlerError> {
    let Some(node) = kube.find_node(instance_id).await.map_err(internal)? else {
        return Ok(Outcome::new(
            instance_id,
            Some(pool),
            Handled::Skipped,
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
        Some(pool),
        Handled::Cordoned,
        "interruption.rebalance is cordon: no new pods land on it; the rotator counts it as disrupting",
    )
    .with(json!({"node": node.name, "changed": changed})))
}
