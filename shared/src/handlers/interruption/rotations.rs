//! Work recorded for the rotator: `Interrupted` and `Maintenance` rotations, and closing the
//! rotation of an instance that is gone (with its Node object).

use chrono::{DateTime, Utc};
use serde_json::json;

use super::{Action, InterruptionHandler, Outcome, internal};
use crate::clock::Clock;
use crate::event::interruption::InstanceState;
use crate::handlers::HandlerError;
use crate::kube as k;
use crate::policy::PoolRef;
use crate::rotation::{Release, Rotation, RotationReason, Step};
use crate::state::{self, ClaimKey, Versioned};

impl InterruptionHandler {
    /// Records a `Pending` rotation unless one is in flight (a finished one is replaced).
    pub(super) async fn start_rotation(
        &self,
        rotation: Rotation,
        why: &str,
    ) -> Result<Outcome, HandlerError> {
        let outcome = |action: Action, reason: String| {
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
                            Action::Skipped,
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
                        Action::RotationRecorded,
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

    /// Health scheduled change: a `Maintenance` rotation with the change's start as deadline.
    pub(super) async fn maintenance(
        &self,
        policy: &PoolRef,
        instance_id: &str,
        start: DateTime<Utc>,
        code: &str,
        clock: &Clock,
    ) -> Result<Outcome, HandlerError> {
        let rotation = Rotation {
            deadline: Some(start),
            ..Rotation::new(
                &policy.pool_id(),
                instance_id,
                RotationReason::Maintenance,
                false,
                clock.now(),
            )
        };
        self.start_rotation(
            rotation,
            &format!(
                "{code} starts {}",
                start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        )
        .await
    }

    /// Shutting down / terminated: delete the Node object and close the instance's rotation.
    pub(super) async fn gone(
        &self,
        policy: &PoolRef,
        instance_id: &str,
        state_name: &InstanceState,
        clock: &Clock,
    ) -> Result<Outcome, HandlerError> {
        let pool = policy.pool_id();
        let key = ClaimKey::work(&pool, instance_id, "gone");
        self.claimed(
            &key,
            "StateChange",
            || clock.now(),
            |_| {
                Outcome::new(
                    instance_id,
                    Some(&pool),
                    Action::Skipped,
                    "instance already handled as gone",
                )
            },
            || async {
                let kube = self.connect(policy).await?;
                let node = kube.find_node(instance_id).await.map_err(internal)?;
                let deleted = match &node {
                    Some(n) => {
                        k::delete_node(kube.as_ref(), &n.name, &format!("instance {state_name:?}"))
                            .await
                            .map_err(internal)?
                    }
                    None => false,
                };
                let closed = self.close_rotation(&pool, instance_id, clock).await?;
                let action = if deleted {
                    Action::NodeDeleted
                } else {
                    Action::Recorded
                };
                let mut reason = match &node {
                    Some(n) if deleted => {
                        format!("instance {state_name:?}: Node {} deleted", n.name)
                    }
                    _ => format!("instance {state_name:?}: its Node object is already gone"),
                };
                if let Some(step) = closed {
                    reason.push_str(&format!("; its rotation (was {step:?}) closed as Done"));
                }
                Ok(Outcome::new(instance_id, Some(&pool), action, reason).with(
                    json!({"node": node.map(|n| n.name), "rotationClosed": closed.is_some()}),
                ))
            },
        )
        .await
    }

    /// Marks the instance's in-flight rotation Done; returns the step it was in.
    pub(super) async fn close_rotation(
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
                r.enter(Step::Done, now).with_release(Release::Owed)
            } else {
                r.enter(Step::Done, now)
            };
            let written = (self.announce)
                .put_rotation(
                    Some(&r),
                    done,
                    Some(version),
                    Some(now + self.settings.retention),
                )
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
