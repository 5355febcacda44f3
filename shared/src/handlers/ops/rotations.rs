//! Operator rotations: `rotate` queues manual rotations (budgeted or emergency) for the rotator
//! to release; `cancel` ends one before it terminates (node uncordoned, surge given back through
//! the rotator's one surge undo).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{
    Origin, REPEAT_WINDOW_MINUTES, Target, fnv, instant, internal, invalid, invalid1,
    rotation_summary, rotations_by_instance,
};
use crate::announce::Announcer;
use crate::fleet::Lifecycle;
use crate::handlers::HandlerError;
use crate::handlers::rotator::{KubeConnector, Planner};
use crate::kube as k;
use crate::policy::{NodeGroup, Policy};
use crate::rotation::step;
use crate::rotation::{Queue, Rotation, Step, UnitRelease};
use crate::state;

/// `rotate`: queues manual rotations of a pool's instances (budgeted, or `ignoreBudgets` with
/// at most `maxConcurrent` at a time) for the rotator to release; an identical request within
/// [`REPEAT_WINDOW_MINUTES`] answers as the first did.
pub(super) struct Rotate<'a> {
    /// The pool's groups and the state table (the group's instances, its rotations).
    pub planner: Planner<'a>,
    /// Records the rotations with their events.
    pub announce: &'a Announcer,
}

impl Rotate<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run(
        &self,
        policy: &Policy,
        target: &Target,
        reason: &str,
        ignore_budgets: bool,
        max_concurrent: u32,
        origin: &Origin,
        now: DateTime<Utc>,
    ) -> Result<Value, HandlerError> {
        let pool = policy.pool_id();
        let targets = match target {
            Target::All => "all".to_string(),
            Target::Instances(ids) => ids.join(","),
        };
        let key = fnv(&format!(
            "{pool}|{targets}|{reason}|{ignore_budgets}|{max_concurrent}"
        ));
        let earlier = (self.planner.state)
            .rotate_request(&pool, key)
            .await
            .map_err(internal)?;
        if let Some(e) = &earlier {
            let at = e
                .value
                .get("at")
                .and_then(Value::as_str)
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc));
            if at.is_some_and(|t| now - t < chrono::Duration::minutes(REPEAT_WINDOW_MINUTES)) {
                let mut response = e.value.get("response").cloned().unwrap_or(Value::Null);
                if let Some(o) = response.as_object_mut() {
                    o.insert("repeated".into(), json!(true));
                }
                tracing::info!(pool = %pool, request_id = %origin.request_id, decision = "repeated", "identical rotate request already recorded; nothing more done");
                return Ok(response);
            }
        }
        let group = group_name(&self.planner, policy).await?;
        let (_, instances) = self
            .planner
            .groups
            .describe(&group)
            .await
            .map_err(|e| internal(format!("cannot describe group {group}: {e}")))?;
        let ids: Vec<String> = match target {
            Target::All => instances
                .iter()
                .filter(|i| i.lifecycle == Lifecycle::InService)
                .map(|i| i.instance_id.clone())
                .collect(),
            Target::Instances(ids) => {
                // The listed ids `keep` holds for, comma-separated.
                let listed = |keep: &dyn Fn(&str) -> bool| {
                    let kept: Vec<&str> = ids
                        .iter()
                        .map(String::as_str)
                        .filter(|id| keep(id))
                        .collect();
                    kept.join(", ")
                };
                let unknown = listed(&|id| !instances.iter().any(|i| i.instance_id == id));
                let leaving = listed(&|id| {
                    (instances.iter())
                        .any(|i| i.instance_id == id && i.lifecycle == Lifecycle::Leaving)
                });
                let mut problems = Vec::new();
                if !unknown.is_empty() {
                    problems.push(format!(
                        "instances: {unknown} not in pool {pool} (group {group})"
                    ));
                }
                if !leaving.is_empty() {
                    problems.push(format!(
                        "instances: {leaving} already leaving group {group}"
                    ));
                }
                if !problems.is_empty() {
                    return Err(invalid(problems));
                }
                ids.clone()
            }
        };
        let existing = rotations_by_instance(self.planner.state, &pool).await?;
        let queue = Queue {
            request_id: origin.request_id.clone(),
            ignore_budgets,
            max_concurrent,
            reason: reason.to_string(),
        };
        let mut queued = Vec::new();
        let mut kept = Vec::new();
        for id in &ids {
            if let Some(v) = existing.get(id).filter(|v| v.value.in_flight()) {
                kept.push(rotation_summary(&v.value));
                continue;
            }
            let rotation = Rotation::manual(&pool, id, queue.clone(), now);
            // Replaces a finished record (keeping its unput events), conditionally.
            let old = existing.get(id);
            match self
                .announce
                .record_rotation(old.map(|v| &v.value), rotation, old.map(|v| v.version))
                .await
            {
                Ok(Some(_)) => queued.push(id.clone()),
                Ok(None) => kept.push(json!({"instance": id, "step": "recorded concurrently"})),
                Err(e) => return Err(internal(format!("cannot record rotation of {id}: {e}"))),
            }
        }
        let response = json!({
            "action": "rotate",
            "pool": pool,
            "requestId": origin.request_id,
            "queued": queued,
            "kept": kept,
            "ignoreBudgets": ignore_budgets,
            "maxConcurrent": if ignore_budgets { Some(max_concurrent) } else { None },
            "repeated": false,
            "note": if ignore_budgets {
                format!("the rotator starts up to {max_concurrent} at a time on its next passes, without waiting for budgets")
            } else {
                "the rotator starts them on its next passes as the Drifted budget allows".to_string()
            },
        });
        let doc = json!({"at": instant(now), "requestId": origin.request_id, "response": response});
        let ttl =
            now + chrono::Duration::minutes(REPEAT_WINDOW_MINUTES) + chrono::Duration::days(1);
        if let Err(e) = (self.planner.state)
            .put_rotate_request(&pool, key, &doc, earlier.map(|e| e.version), ttl)
            .await
        {
            tracing::warn!(pool = %pool, error = %e, "cannot record the request for repeats; a repeat re-checks every instance");
        }
        Ok(response)
    }
}

/// `cancel`: ends one rotation before it terminates (recorded first, then the node uncordoned;
/// the surge is given back by the rotator's next pass).
pub(super) struct Cancel<'a> {
    /// The pool's groups and the state table.
    pub planner: Planner<'a>,
    /// Records the cancellation with its events.
    pub announce: &'a Announcer,
    /// The cluster, to uncordon the node.
    pub kube: &'a dyn KubeConnector,
}

impl Cancel<'_> {
    pub(super) async fn run(
        &self,
        policy: &Policy,
        instance: &str,
        reason: &str,
        origin: &Origin,
        now: DateTime<Utc>,
    ) -> Result<Value, HandlerError> {
        let pool = policy.pool_id();
        let group = group_name(&self.planner, policy).await?;
        let why = format!(
            "cancelled by {}: {reason}",
            origin.caller.as_deref().unwrap_or("an operator")
        );
        // Record the cancellation first (conditional write): from then on the rotator leaves the
        // rotation alone, and the surge's undo is recorded before it is performed.
        let mut claimed = None;
        for _ in 0..state::WRITE_ATTEMPTS {
            let records = self
                .planner
                .state
                .rotations(&pool)
                .await
                .map_err(internal)?;
            let Some(v) = records
                .iter()
                .find(|v| v.value.instance_id == instance)
                .cloned()
            else {
                return Err(invalid1(format!(
                    "instance: no rotation of {instance} in pool {pool}"
                )));
            };
            if v.value.step == Step::Cancelled {
                return Ok(json!({
                    "action": "cancel", "pool": pool, "requestId": origin.request_id,
                    "instance": instance, "changed": false,
                    "rotation": rotation_summary(&v.value),
                }));
            }
            match step::cancel(&v.value) {
                Ok(()) => {}
                Err(step::CancelRefusal::Terminating) => {
                    return Err(invalid1(format!(
                        "instance: the rotation of {instance} is Terminating: too late to cancel"
                    )));
                }
                Err(step::CancelRefusal::Finished(step)) => {
                    return Err(invalid1(format!(
                        "instance: the rotation of {instance} already finished ({step:?} at {}): nothing to cancel",
                        instant(v.value.step_at)
                    )));
                }
            };
            // The surge's unit is owed: the rotator's next pass gives it back by terminating
            // an instance it knows runs no workload (ops does not count pods).
            let undo = v.value.surge_active();
            let mut cancelled = Rotation {
                error: Some(why.clone()),
                ..v.value.enter(Step::Cancelled, now)
            };
            if undo {
                cancelled = cancelled.with_release(UnitRelease::Owed);
            }
            if let Some(saved) = self
                .announce
                .record_rotation(Some(&v.value), cancelled, Some(v.version))
                .await
                .map_err(internal)?
            {
                claimed = Some((v.value, saved, undo));
                break;
            }
        }
        let Some((rot, cancelled, undo)) = claimed else {
            return Err(internal(format!(
                "the rotation of {instance} kept changing; try again"
            )));
        };
        let mut undone = Vec::new();
        let mut problems = Vec::new();
        // Kubernetes: make the node schedulable again.
        if matches!(rot.step, Step::Cordoned | Step::Draining) {
            match self.kube.connect(&policy.cluster).await {
                Err(e) => problems.push(format!(
                    "cluster {} unreachable ({e}): uncordon the node of {instance} by hand",
                    policy.cluster
                )),
                Ok(kube) => {
                    let drain: Option<k::DrainState> = rot
                        .drain
                        .clone()
                        .and_then(|d| serde_json::from_value(d).ok());
                    let result = match drain {
                        Some(state) => k::abort_drain(kube.as_ref(), &state).await.map(|()| {
                            format!("drain of node {} aborted, node uncordoned", state.node)
                        }),
                        None => match kube.find_node(instance).await {
                            Ok(Some(n)) if n.disrupted_taint.is_some() => kube
                                .undo_cordon(&n.name, true)
                                .await
                                .map(|_| format!("node {} uncordoned", n.name)),
                            Ok(_) => Ok("node was not cordoned".to_string()),
                            Err(e) => Err(e),
                        },
                    };
                    match result {
                        Ok(s) => undone.push(s),
                        Err(e) => problems.push(format!(
                            "cannot uncordon the node of {instance}: {e}; uncordon it by hand"
                        )),
                    }
                }
            }
        }
        // Auto Scaling: the rotator's next pass gives the surge back.
        if undo {
            undone.push(format!(
                "surge of group {group} owed: the rotator's next pass gives it back (a podless instance terminated with a decrement)"
            ));
        }
        let _ = &cancelled;
        Ok(json!({
            "action": "cancel",
            "pool": pool,
            "requestId": origin.request_id,
            "instance": instance,
            "changed": true,
            "cancelledAt": format!("{:?}", rot.step),
            "undone": undone,
            "problems": problems,
            "note": "the pool is not halted; if the node is still drifted or expired the rotator may pick it again: pause the pool to prevent that",
        }))
    }
}

/// The Auto Scaling group whose instances the pool's rotations replace (for a managed node
/// group, the group EKS created for it).
async fn group_name(planner: &Planner<'_>, policy: &Policy) -> Result<String, HandlerError> {
    match &policy.node_group {
        NodeGroup::AutoScalingGroup(g) => Ok(g.clone()),
        NodeGroup::ManagedNodeGroup(name) => planner
            .managed_group(&policy.cluster, name)
            .await
            .map(|(asg, _)| asg)
            .map_err(internal),
    }
}
