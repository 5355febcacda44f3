//! Planning for EKS managed node groups (pure).
//!
//! Drift is fixed by the node group itself: one `UpdateNodegroupVersion` replaces every node,
//! at most `maxUnavailable` at a time. [`plan_managed`] decides whether that update starts this
//! pass and how wide it runs; everything else (expired nodes, operator rotations) is the
//! node-by-node plan of [`plan()`] run against the group's Auto Scaling group, without its
//! launch template action (EKS owns that template) and without drift starts.
//!
//! Rules, in order:
//! 1. An update that is not finished (`Starting` or `InProgress`) continues; no node-level
//!    rotation starts meanwhile (both would replace nodes of the same group), in-flight ones
//!    still advance. EKS cannot pause an update: if the Drifted budget closes meanwhile the
//!    update runs on, and the plan says so.
//! 2. Gates (halted, paused, unresolved AMI, untrusted snapshot) start nothing.
//! 3. When nodes run another image than the desired AMI, or the group launches another image:
//!    - node-level rotations still in flight: wait for them;
//!    - `allowed(Drifted) == 0`: wait (the budget message says until when);
//!    - otherwise start an update to the desired AMI with `maxUnavailable = allowed(Drifted)`
//!      (at most [`MAX_UNAVAILABLE_LIMIT`]); no node-level rotation starts in the same pass.
//! 4. Otherwise the node-level plan stands (minus drift starts, which cannot happen here).

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Action, Decision, Plan, budget_message, plan};
use crate::fleet::{Lifecycle, Snapshot};
use crate::managed::{MAX_UNAVAILABLE_LIMIT, ManagedUpdate};
use crate::rotation::{RotationReason, Step};

/// What happens to the node group this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "update", rename_all = "camelCase")]
pub enum UpdateAction {
    /// No update is needed or allowed now.
    None,
    /// The recorded update is not finished: issue its start again if it is still `Starting`
    /// (same client request token), otherwise follow it.
    Continue,
    /// Start an update rolling out `image`.
    #[serde(rename_all = "camelCase")]
    Start {
        /// The desired AMI.
        image: String,
        /// `updateConfig.maxUnavailable` to run it with.
        max_unavailable: u32,
    },
}

/// A managed node group's plan: the node group update and the node-level plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedPlan {
    /// The node-level plan (budgets, candidates, actions, decisions), adjusted as above. Its
    /// `blocked` says why the update does not start, when it does not.
    #[serde(flatten)]
    pub plan: Plan,
    /// Nodes (in service) running an image other than the desired AMI.
    pub drifted: u32,
    /// The node group update decision.
    #[serde(flatten)]
    pub update: UpdateAction,
}

/// Plans one pass for a managed node group pool. `snapshot.group` is its Auto Scaling group,
/// with `launch_template_image` = the AMI the node group launches now (`None` = unknown);
/// `update` is the pool's update record as last observed (after `DescribeUpdate`).
pub fn plan_managed(
    snapshot: &Snapshot,
    update: Option<&ManagedUpdate>,
    now: DateTime<Utc>,
) -> ManagedPlan {
    let mut base = plan(snapshot, now);
    let desired = snapshot.gates.desired_ami.as_deref();
    let drifted = desired.map_or(0, |d| {
        snapshot
            .members
            .iter()
            .filter(|m| m.lifecycle == Lifecycle::InService)
            .filter(|m| m.image_id.as_deref().is_some_and(|i| i != d))
            .count()
    });
    let drifted = u32::try_from(drifted).unwrap_or(u32::MAX);
    let launches_other = match (desired, snapshot.group.launch_template_image.as_deref()) {
        (Some(d), Some(l)) => l != d,
        _ => false,
    };

    // EKS owns the group's launch template; drift is the update's job.
    base.actions.retain(|a| match a {
        Action::UpdateLaunchTemplate { .. } => false,
        Action::StartRotation { reason, .. } => *reason != RotationReason::Drifted,
        Action::Advance { .. } => true,
    });
    base.decisions
        .retain(|d| !d.message.starts_with("updating the launch template"));
    let drift_starts_dropped = base
        .candidates
        .iter()
        .any(|c| c.reason == RotationReason::Drifted);
    if drift_starts_dropped {
        base.decisions.push(Decision::pool(
            "drifted nodes are replaced by the node group update, not node by node".into(),
        ));
    }

    let gate = &snapshot.gates;
    let gated = gate.halted.is_some()
        || gate.paused.is_some()
        || snapshot.policy.paused
        || desired.is_none()
        || base
            .decisions
            .iter()
            .any(|d| d.message.starts_with("not starting: snapshot lists"));

    let running = update.filter(|u| !u.phase.is_finished());
    let action = if let Some(u) = running {
        drop_starts(&mut base, snapshot);
        let id = u.update_id.as_deref().unwrap_or("(starting)");
        let why = format!(
            "managed node group update {id} to {} in progress (maxUnavailable {}); node-level rotations wait",
            u.image, u.max_unavailable
        );
        if base.allowed.drifted == 0 && drifted > 0 {
            base.decisions.push(Decision::pool(format!(
                "Drifted budget is now 0, but EKS cannot pause update {id}: it runs to completion"
            )));
        }
        base.decisions.push(Decision::pool(why.clone()));
        base.blocked = Some(why);
        UpdateAction::Continue
    } else if gated || (drifted == 0 && !launches_other) {
        UpdateAction::None
    } else if let Some(d) = desired {
        let in_flight = snapshot
            .rotations
            .iter()
            .filter(|r| r.pool == base.pool && r.in_flight() && !r.waiting())
            .count();
        let what = format!(
            "{drifted} node(s) drifted{}",
            if launches_other {
                format!(
                    ", the node group launches {}",
                    snapshot
                        .group
                        .launch_template_image
                        .as_deref()
                        .unwrap_or("?")
                )
            } else {
                String::new()
            }
        );
        if in_flight > 0 {
            let why = format!(
                "{what}: the node group update waits for {in_flight} node-level rotation(s) in flight"
            );
            drop_starts(&mut base, snapshot);
            base.decisions
                .push(Decision::pool(format!("not starting: {why}")));
            base.blocked = Some(why);
            UpdateAction::None
        } else if base.allowed.drifted == 0 {
            let why = budget_message(
                &snapshot.policy.budgets,
                crate::budget::Reason::Drifted,
                base.total,
                base.disrupting,
                0,
                now,
            );
            base.decisions.push(Decision::pool(format!(
                "not starting the node group update: {why}; {what}"
            )));
            base.blocked = Some(why);
            UpdateAction::None
        } else {
            let max_unavailable = base.allowed.drifted.min(MAX_UNAVAILABLE_LIMIT);
            drop_starts(&mut base, snapshot);
            base.decisions.push(Decision::pool(format!(
                "starting the node group update to {d}: {what}; maxUnavailable {max_unavailable} (Drifted budget allows {})",
                base.allowed.drifted
            )));
            base.blocked = None;
            UpdateAction::Start {
                image: d.to_string(),
                max_unavailable,
            }
        }
    } else {
        UpdateAction::None
    };
    ManagedPlan {
        plan: base,
        drifted,
        update: action,
    }
}

/// Removes every start of the node-level plan: new rotations and releases of queued operator
/// rotations (in-flight rotations keep advancing).
fn drop_starts(plan: &mut Plan, snapshot: &Snapshot) {
    let queued: std::collections::BTreeSet<&str> = snapshot
        .rotations
        .iter()
        .filter(|r| r.waiting())
        .map(|r| r.instance_id.as_str())
        .collect();
    plan.actions.retain(|a| match a {
        Action::StartRotation { .. } | Action::UpdateLaunchTemplate { .. } => false,
        Action::Advance { instance_id, step } => {
            *step != Step::Pending || !queued.contains(instance_id.as_str())
        }
    });
}
