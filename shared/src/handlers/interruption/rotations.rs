//! Work recorded for the rotator: `Interrupted` and `Maintenance` rotations, and closing the
//! rotation of an instance that is gone (with its Node object).

use serde_json::json;

use super::{Handled, Outcome, internal};
use crate::clock::Clock;
use crate::event::instance_events::InstanceState;
use crate::handlers::HandlerError;
use crate::kube::{self as k, NodeOps};
use crate::rotation::{Rotation, Step, UnitRelease};
use crate::state::{self, Repository, Versioned};

/// Rotation records of the interruption handler: the state table, and the announcer that puts
/// each transition's event.
pub(super) struct Rotations<'a> {
    /// The state table.
    pub state: &'a Repository,
    /// Records transitions' events and puts them on the bus (same table as `store`).
    pub announce: &'a crate::announce::Announcer,
    /// How long a closed record is kept.
    pub retention: chrono::Duration,
}

impl Rotations<'_> {
    /// Records a `Pending` rotation unless one is in flight (a finished one is replaced).
    pub(super) async fn start(
        &self,
        rotation: Rotation,
        why: &str,
    ) -> Result<Outcome, HandlerError> {
        let outcome = |action: Handled, reason: String| {
            Outcome::new(&rotation.instance_id, Some(&rotation.pool), action, reason).with(json!({
                "reason": rotation.reason,
                "forced": rotation.forced,
                "deadline": rotation.deadline,
            }))
        };
        for _ in 0..state::WRITE_ATTEMPTS {
            let current = (self.state)
                .rotation(&rotation.pool, &rotation.instance_id)
                .await
                .map_err(internal)?;
            let (before, expected) = match current {
                None => (None, None),
                Some(v) => match v.value {
                    Some(r) if r.in_flight() => {
                        return Ok(outcome(
                            Handled::Skipped,
                            format!(
                                "a {:?} rotation of this instance is already in flight (step {:?})",
                                r.reason, r.step
                            ),
                        ));
                    }
                    Some(r) => (Some(r), Some(v.version)),
                    None => (None, Some(v.version)),
                },
            };
            // A finished record's unput events are kept.
            let written = (self.announce)
                .put_rotation(before.as_ref(), rotation.clone(), expected, None)
                .await
                .map_err(internal)?;
            match written {
                Some(_) => {
                    return Ok(outcome(
                        Handled::RotationRecorded,
                        format!(
                            "{why}: {:?} rotation recorded{}; the rotator replaces the node",
                            rotation.reason,
                            if rotation.forced {
                                ", forced (surge first, no budget wait)"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
                None => continue,
            }
        }
        Err(internal("rotation record: too many conflicting writers"))
    }

    /// Marks the instance's in-flight rotation Done; returns the step it was in.
    pub(super) async fn close(
        &self,
        pool: &str,
        instance_id: &str,
        clock: &Clock,
    ) -> Result<Option<Step>, HandlerError> {
        for _ in 0..state::WRITE_ATTEMPTS {
            let Some(Versioned {
                value: Some(r),
                version,
            }) = (self.state)
                .rotation(pool, instance_id)
                .await
                .map_err(internal)?
            else {
                return Ok(None);
            };
            if !r.in_flight() {
                return Ok(None);
            }
            let now = clock.now();
            // Its surge's unit is owed: the rotator gives it back (it chooses how).
            let done = if r.surge_active() {
                r.enter(Step::Done, now).with_release(UnitRelease::Owed)
            } else {
                r.enter(Step::Done, now)
            };
            let written = (self.announce)
                .put_rotation(Some(&r), done, Some(version), Some(now + self.retention))
                .await
                .map_err(internal)?;
            match written {
                Some(_) => return Ok(Some(r.step)),
                None => continue,
            }
        }
        Err(internal("rotation record: too many conflicting writers"))
    }
}

/// Shutting down / terminated: delete the Node object (the cluster's Kubernetes API) and close
/// the instance's rotation.
pub(super) async fn gone(
    kube: &dyn NodeOps,
    rotations: &Rotations<'_>,
    pool: &str,
    instance_id: &str,
    state_name: &InstanceState,
    clock: &Clock,
) -> Result<Outcome, HandlerError> {
    let node = kube.find_node(instance_id).await.map_err(internal)?;
    let deleted = match &node {
        Some(n) => k::delete_node(kube, &n.name, &format!("instance {state_name:?}"))
            .await
            .map_err(internal)?,
        None => false,
    };
    let closed = rotations.close(pool, instance_id, clock).await?;
    let action = if deleted {
        Handled::NodeDeleted
    } else {
        Handled::Recorded
    };
    let mut reason = match &node {
        Some(n) if deleted => format!("instance {state_name:?}: Node {} deleted", n.name),
        _ => format!("instance {state_name:?}: its Node object is already gone"),
    };
    if let Some(step) = closed {
        reason.push_str(&format!("; its rotation (was {step:?}) closed as Done"));
    }
    Ok(Outcome::new(instance_id, Some(pool), action, reason)
        .with(json!({"node": node.map(|n| n.name), "rotationClosed": closed.is_some()})))
}
