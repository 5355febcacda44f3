//! What to do about one instance of an interruption event, decided without I/O: from the event,
//! the pool's policy and the claim the handler took on the work ([`claim_of`] says which), the
//! [`Action`] the handler performs. The handler gathers (verifies the event, finds the pool,
//! takes the claim), asks [`action_for`], performs the action and settles the claim.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::instance_events::{InstanceState, Interruption};
use crate::policy::{PoolRef, RebalanceAction};
use crate::rotation::{Rotation, RotationReason};

/// Where a claim stands (stored as `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ClaimStatus {
    /// Being worked on by the invocation that wrote it.
    Started,
    /// Done: a redelivery is skipped.
    Done,
    /// Failed: the next delivery takes it over.
    Failed,
}

/// The stored claim document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimDoc {
    /// Where it stands.
    pub status: ClaimStatus,
    /// When it was written.
    pub at: Option<DateTime<Utc>>,
    /// The kind of event that claimed it.
    #[serde(default)]
    pub what: String,
    /// The outcome's details once settled.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

/// Result of a conditional claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Ours, at this version.
    Ours(u64),
    /// Someone else's (or already done): its document, if readable.
    Taken(Option<ClaimDoc>),
}

/// The claim an event's work on one instance needs: (kind in the claim's key, what it is
/// recorded as). `None`: the work needs none (a rotation record is itself conditional).
pub fn claim_of(event: &Interruption) -> Option<(&'static str, &'static str)> {
    match event {
        Interruption::Rebalance { .. } => Some(("rebalance", "RebalanceRecommendation")),
        Interruption::StateChange { state, .. } if state.is_gone() => Some(("gone", "StateChange")),
        Interruption::InterruptionWarning { .. } | Interruption::StateChange { .. } => {
            Some(("drain", event.kind()))
        }
        Interruption::LifecycleTerminate(_) => Some(("lifecycle", "TerminateLifecycleAction")),
        Interruption::Maintenance { .. } | Interruption::Tick | Interruption::Ignored { .. } => {
            None
        }
    }
}

/// What the handler does about one instance.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing: another delivery did it or is doing it.
    Skip {
        /// Why, in words.
        reason: String,
    },
    /// Record the event only.
    Record {
        /// Why, in words.
        reason: &'static str,
    },
    /// Cordon the node (`interruption.rebalance: cordon`).
    Cordon,
    /// Cordon, taint and evict at once, without budgets, until the instance is due to die.
    Drain {
        /// The taint value and the reason given (`SpotInterruption`, ...).
        reason: &'static str,
    },
    /// Record a rotation for the rotator (unless one is in flight).
    Rotate {
        /// The record.
        rotation: Box<Rotation>,
        /// Why, in words.
        why: String,
    },
    /// The instance is gone: delete its Node object, close its rotation.
    Gone {
        /// Its state.
        state: InstanceState,
    },
    /// Drain (with lifecycle heartbeats), then complete the lifecycle action; hand a drain
    /// longer than the invocation to the rotator.
    HandOver,
    /// Not an event about one instance (a tick, an ignored event).
    None,
}

/// The action for `event` on `instance_id` of pool `policy` at `now`, given the claim taken
/// on the work (`None` when [`claim_of`] names none).
pub fn action_for(
    event: &Interruption,
    policy: &PoolRef,
    instance_id: &str,
    claim: Option<&Claim>,
    now: DateTime<Utc>,
) -> Action {
    if let Some(Claim::Taken(doc)) = claim {
        let reason = match event {
            Interruption::Rebalance { .. } => {
                "rebalance recommendation for this instance already handled".to_string()
            }
            Interruption::StateChange { state, .. } if state.is_gone() => {
                "instance already handled as gone".to_string()
            }
            Interruption::LifecycleTerminate(_) => {
                "this lifecycle action is already being handled".to_string()
            }
            _ => format!(
                "already drained or draining ({} at {})",
                doc.as_ref().map_or("another event", |d| d.what.as_str()),
                doc.as_ref()
                    .and_then(|d| d.at)
                    .map_or("?".to_string(), |t| t.to_rfc3339())
            ),
        };
        return Action::Skip { reason };
    }
    let pool = policy.pool_id();
    match event {
        Interruption::Rebalance { .. } => match policy.rebalance {
            RebalanceAction::Ignore => Action::Record {
                reason: "interruption.rebalance is ignore: recorded only",
            },
            RebalanceAction::Cordon => Action::Cordon,
            RebalanceAction::Replace => Action::Rotate {
                rotation: Box::new(Rotation::new(
                    &pool,
                    instance_id,
                    RotationReason::Interrupted,
                    true,
                    now,
                )),
                why: "interruption.rebalance is replace".into(),
            },
        },
        Interruption::StateChange { state, .. } if state.is_gone() => Action::Gone {
            state: state.clone(),
        },
        Interruption::InterruptionWarning { market: "spot", .. } => Action::Drain {
            reason: "SpotInterruption",
        },
        Interruption::InterruptionWarning { .. } => Action::Drain {
            reason: "CapacityReservationInterruption",
        },
        Interruption::StateChange { .. } => Action::Drain {
            reason: "InstanceStopping",
        },
        Interruption::Maintenance {
            deadline,
            event_type_code,
            ..
        } => Action::Rotate {
            rotation: Box::new(Rotation {
                deadline: Some(*deadline),
                ..Rotation::new(&pool, instance_id, RotationReason::Maintenance, false, now)
            }),
            why: format!(
                "{event_type_code} starts {}",
                deadline.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
        },
        Interruption::LifecycleTerminate(_) => Action::HandOver,
        Interruption::Tick | Interruption::Ignored { .. } => Action::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::instance_events::LifecycleAction;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-01T12:00:00Z")
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_default()
    }

    fn policy(rebalance: &str) -> PoolRef {
        crate::policy::parse(&format!(
            "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\namiSelectorTerms: [{{ alias: al2023@latest }}]\n{rebalance}"
        ))
        .policy
        .map(|p| PoolRef::from(&p))
        .unwrap_or_else(|| panic!("test policy {rebalance:?} is invalid"))
    }

    const I: &str = "i-0123456789abcdef0";

    fn warning(market: &'static str) -> Interruption {
        Interruption::InterruptionWarning {
            instance_id: I.into(),
            instance_action: Some("terminate".into()),
            market,
        }
    }

    fn state(state: InstanceState) -> Interruption {
        Interruption::StateChange {
            instance_id: I.into(),
            state,
        }
    }

    fn lifecycle() -> Interruption {
        Interruption::LifecycleTerminate(LifecycleAction {
            group: "prod-general".into(),
            hook: "nodecycle-drain".into(),
            token: Some("t".into()),
            instance_id: I.into(),
        })
    }

    fn maintenance() -> Interruption {
        Interruption::Maintenance {
            instance_ids: vec![I.into()],
            deadline: now() + chrono::Duration::days(3),
            event_type_code: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".into(),
        }
    }

    /// (event, `interruption.rebalance` line, the claim's key kind, expected action).
    #[test]
    fn the_action_of_each_event_with_the_claim_ours() {
        let rotate = |reason: RotationReason, forced: bool| {
            move |a: &Action| {
                matches!(a, Action::Rotate { rotation, .. }
                    if rotation.reason == reason && rotation.forced == forced
                        && rotation.pool == "prod/general" && rotation.instance_id == I)
            }
        };
        type Row = (
            &'static str,
            Interruption,
            &'static str,
            Option<&'static str>,
            Box<dyn Fn(&Action) -> bool>,
        );
        let rows: Vec<Row> = vec![
            (
                "spot warning drains",
                warning("spot"),
                "",
                Some("drain"),
                Box::new(|a| {
                    *a == Action::Drain {
                        reason: "SpotInterruption",
                    }
                }),
            ),
            (
                "capacity reservation warning drains",
                warning("capacity-reservation"),
                "",
                Some("drain"),
                Box::new(|a| {
                    *a == Action::Drain {
                        reason: "CapacityReservationInterruption",
                    }
                }),
            ),
            (
                "stopping drains",
                state(InstanceState::Stopping),
                "",
                Some("drain"),
                Box::new(|a| {
                    *a == Action::Drain {
                        reason: "InstanceStopping",
                    }
                }),
            ),
            (
                "terminated is gone",
                state(InstanceState::Terminated),
                "",
                Some("gone"),
                Box::new(|a| {
                    *a == Action::Gone {
                        state: InstanceState::Terminated,
                    }
                }),
            ),
            (
                "rebalance by default records",
                Interruption::Rebalance {
                    instance_id: I.into(),
                },
                "",
                Some("rebalance"),
                Box::new(|a| matches!(a, Action::Record { .. })),
            ),
            (
                "rebalance: cordon",
                Interruption::Rebalance {
                    instance_id: I.into(),
                },
                "interruption: { rebalance: cordon }\n",
                Some("rebalance"),
                Box::new(|a| *a == Action::Cordon),
            ),
            (
                "rebalance: replace is a forced Interrupted rotation",
                Interruption::Rebalance {
                    instance_id: I.into(),
                },
                "interruption: { rebalance: replace }\n",
                Some("rebalance"),
                Box::new(rotate(RotationReason::Interrupted, true)),
            ),
            (
                "maintenance is an unforced Maintenance rotation due at its start",
                maintenance(),
                "",
                None,
                Box::new(move |a| {
                    rotate(RotationReason::Maintenance, false)(a)
                        && matches!(a, Action::Rotate { rotation, why }
                            if rotation.deadline == Some(now() + chrono::Duration::days(3))
                                && why.starts_with("AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED starts "))
                }),
            ),
            (
                "a lifecycle action is handed over",
                lifecycle(),
                "",
                Some("lifecycle"),
                Box::new(|a| *a == Action::HandOver),
            ),
            (
                "a tick is no instance's",
                Interruption::Tick,
                "",
                None,
                Box::new(|a| *a == Action::None),
            ),
        ];
        for (name, event, rebalance, kind, want) in rows {
            assert_eq!(claim_of(&event).map(|(k, _)| k), kind, "{name}");
            let claim = kind.map(|_| Claim::Ours(1));
            let got = action_for(&event, &policy(rebalance), I, claim.as_ref(), now());
            assert!(want(&got), "{name}: {got:?}");
        }
    }

    #[test]
    fn a_taken_claim_skips_saying_who_has_it() {
        let doc = ClaimDoc {
            status: ClaimStatus::Done,
            at: Some(now()),
            what: "SpotInterruptionWarning".into(),
            details: Value::Null,
        };
        let taken = Claim::Taken(Some(doc));
        let rows: Vec<(Interruption, &str)> = vec![
            (
                state(InstanceState::Stopped),
                "already drained or draining (SpotInterruptionWarning at 2026-12-01T12:00:00+00:00)",
            ),
            (
                Interruption::Rebalance {
                    instance_id: I.into(),
                },
                "rebalance recommendation for this instance already handled",
            ),
            (
                state(InstanceState::ShuttingDown),
                "instance already handled as gone",
            ),
            (
                lifecycle(),
                "this lifecycle action is already being handled",
            ),
        ];
        for (event, reason) in rows {
            let got = action_for(&event, &policy(""), I, Some(&taken), now());
            assert_eq!(
                got,
                Action::Skip {
                    reason: reason.into()
                },
                "{event:?}"
            );
        }
        // An unreadable claim document still skips.
        let got = action_for(
            &warning("spot"),
            &policy(""),
            I,
            Some(&Claim::Taken(None)),
            now(),
        );
        assert_eq!(
            got,
            Action::Skip {
                reason: "already drained or draining (another event at ?)".into()
            }
        );
    }
}
