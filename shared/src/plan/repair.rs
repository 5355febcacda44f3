//! Repair in the plan: the pool's members as [`crate::repair`] sees them, the outcome of its
//! earlier repairs (their rotation records, level-triggered: nothing else is stored), and the
//! repairs that start this pass with reason `Unhealthy`.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::Snapshot;
use super::classify::Classified;
use crate::fleet::{Lifecycle, Member};
use crate::repair::{self, Domain, Outcome, OutcomeState};
use crate::rotation::{Rotation, RotationReason, Step};

/// What the pool knows about repair beyond its members and rotations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RepairFacts {
    /// The images of the pool's release under watch (it took it within `health.window`): its
    /// unhealthy nodes are evidence against it, not nodes to repair onto it.
    pub watched_images: Vec<String>,
    /// The pool's group is tagged `nodecycle.dev/do-not-repair=true`.
    pub pool_do_not_repair: bool,
    /// Someone else repairs the pool's nodes (EKS node auto repair on a managed node group),
    /// with why: nodecycle repairs none.
    pub left_to: Option<String>,
    /// Members with an EC2 scheduled event (`DescribeInstanceStatus`), the earliest each: a
    /// `Maintenance` rotation is recorded for one that has none, as the interruption handler
    /// does when EventBridge delivers the event (it may not have).
    pub scheduled: BTreeMap<String, crate::fleet::ScheduledEvent>,
}

/// The repair part of a pass's plan. Serializes (camelCase) as `{"suspended", "leftTo",
/// "held": [{"instance", "why"}], "slowStart": [{"zone", "condition", "image", "width",
/// "inFlight", "roundAt"}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairPlan {
    /// Why no repair starts at all (the circuit breaker), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended: Option<String>,
    /// Someone else repairs the pool's nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_to: Option<String>,
    /// Unhealthy nodes not repaired this pass, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<Held>,
    /// Each failure domain's slow start after this pass's starts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slow_start: Vec<DomainPace>,
    /// The domain of each repair this pass starts (recorded on its rotation).
    #[serde(skip)]
    pub started: BTreeMap<String, Domain>,
    /// The deadline (the event's `NotBefore`) of each `Maintenance` rotation this pass records
    /// for a scheduled event.
    #[serde(skip)]
    pub deadlines: BTreeMap<String, DateTime<Utc>>,
}

impl RepairPlan {
    /// Nothing to report (repair off, or no unhealthy node and no repair recorded).
    pub fn is_empty(&self) -> bool {
        self.suspended.is_none()
            && self.left_to.is_none()
            && self.held.is_empty()
            && self.slow_start.is_empty()
    }
}

/// An unhealthy node not repaired this pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Held {
    /// `i-...`.
    pub instance: String,
    /// Why.
    pub why: String,
}

/// A failure domain's slow start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainPace {
    /// The domain.
    #[serde(flatten)]
    pub domain: Domain,
    /// Its pace.
    #[serde(flatten)]
    pub pace: repair::SlowStart,
}

/// The pool's members as repair sees them: in service and registered, launching replacements
/// aside; a member some rotation (or another component: the interruption handler, Cluster
/// Autoscaler, an operator's cordon) is disrupting is `in_flight`.
pub(super) fn nodes(snapshot: &Snapshot, c: &Classified<'_>) -> Vec<repair::Node> {
    c.members
        .iter()
        .filter(|m| m.lifecycle == Lifecycle::InService)
        .filter(|m| !c.replacements.contains(m.instance_id.as_str()))
        .filter_map(|m| {
            let n = m.node.as_ref()?;
            let id = m.instance_id.as_str();
            let busy = c.in_flight.contains_key(id)
                || c.foreign.contains(id)
                || c.queued.contains_key(id)
                || n.disrupted.is_some()
                || n.unschedulable
                || n.marks.autoscaler_deleting;
            Some(repair::Node {
                instance_id: m.instance_id.clone(),
                zone: m.availability_zone.clone(),
                image: m.image_id.clone(),
                joined: n.joined.unwrap_or(m.launch_time),
                conditions: n.conditions.clone(),
                // A node not Ready runs no pod: its opt-outs hold nothing.
                opt_out: n.opt_out.clone().filter(|_| n.ready),
                do_not_repair: n.marks.do_not_repair || snapshot.repair.pool_do_not_repair,
                in_flight: busy,
            })
        })
        .collect()
}

/// How one recorded repair turned out: in flight (unsettled); failed; cancelled (neutral);
/// done with its replacement healthy for [`repair::SETTLE`] since (healthy), unhealthy now
/// (failed), not yet settled, or unknown or gone (neutral).
fn outcome(r: &Rotation, members: &[Member], now: DateTime<Utc>) -> Option<Outcome> {
    let domain = r.repair.clone()?;
    let state = match r.step {
        Step::Failed => OutcomeState::Failed(r.step_at),
        Step::Cancelled => OutcomeState::Neutral,
        Step::Done => {
            let settle = Duration::from_std(repair::SETTLE).unwrap_or(Duration::MAX);
            let replacement = r
                .replacement
                .as_deref()
                .and_then(|id| members.iter().find(|m| m.instance_id == id));
            match replacement.map(|m| (m.lifecycle.clone(), m.node.as_ref())) {
                None | Some((Lifecycle::Leaving, _)) => OutcomeState::Neutral,
                Some((_, None)) => OutcomeState::Unsettled,
                Some((_, Some(n))) if n.conditions.iter().any(|c| c.is_bad()) || !n.ready => {
                    OutcomeState::Failed(now)
                }
                Some(_) if now - r.step_at >= settle => OutcomeState::Healthy(r.step_at + settle),
                Some(_) => OutcomeState::Unsettled,
            }
        }
        _ => OutcomeState::Unsettled,
    };
    Some(Outcome {
        domain,
        started: r.created_at,
        state,
    })
}

/// Members not Ready that no rotation is replacing (nor launching as a replacement): they do
/// not count against a budget naming `Unhealthy` (Karpenter v1.15).
pub(super) fn not_ready(c: &Classified<'_>) -> u32 {
    let n = c
        .members
        .iter()
        .filter(|m| m.lifecycle != Lifecycle::Pending)
        .filter(|m| m.node.as_ref().is_some_and(|n| !n.ready))
        .filter(|m| {
            let id = m.instance_id.as_str();
            !c.replacements.contains(id) && !c.in_flight.contains_key(id)
        })
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Repairs in flight in the pool.
pub(super) fn in_flight(c: &Classified<'_>) -> u32 {
    let n = c
        .in_flight
        .values()
        .filter(|r| r.reason == RotationReason::Unhealthy)
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The repairs of the pass (`room`: how many may start, [`repair::room`]) and what the plan
/// reports of them.
pub(super) fn plan(
    snapshot: &Snapshot,
    c: &Classified<'_>,
    room: u32,
    now: DateTime<Utc>,
) -> (Vec<repair::Repair>, RepairPlan) {
    let policy = &snapshot.policy.repair;
    if !policy.enabled {
        return (Vec::new(), RepairPlan::default());
    }
    if let Some(why) = &snapshot.repair.left_to {
        return (
            Vec::new(),
            RepairPlan {
                left_to: Some(why.clone()),
                ..RepairPlan::default()
            },
        );
    }
    let outcomes: Vec<Outcome> = snapshot
        .rotations
        .iter()
        .filter(|r| r.pool == snapshot.policy.pool_id() && r.reason == RotationReason::Unhealthy)
        .filter_map(|r| outcome(r, &snapshot.members, now))
        .collect();
    let paced = repair::slow_start(&outcomes);
    let p = repair::plan(
        &nodes(snapshot, c),
        policy,
        &paced,
        &snapshot.repair.watched_images,
        room,
        now,
    );
    let report = RepairPlan {
        suspended: p.suspended.clone(),
        left_to: None,
        held: p
            .held
            .iter()
            .map(|(instance, why)| Held {
                instance: instance.clone(),
                why: why.clone(),
            })
            .collect(),
        slow_start: p
            .slow_start
            .iter()
            .map(|(domain, pace)| DomainPace {
                domain: domain.clone(),
                pace: *pace,
            })
            .collect(),
        started: p
            .repairs
            .iter()
            .map(|r| (r.instance_id.clone(), r.domain.clone()))
            .collect(),
        deadlines: BTreeMap::new(),
    };
    (p.repairs, report)
}

/// Records a `Maintenance` rotation (deadline: the event's `NotBefore`, else now) for each
/// member in service with a scheduled event and no rotation (in flight, queued, for another
/// pool, or a finished `Maintenance` one): what the interruption handler records when
/// EventBridge delivers the event. Not while a gate holds the pool.
pub(super) fn maintenance(
    snapshot: &Snapshot,
    c: &Classified<'_>,
    gate: Option<&super::Gate>,
    now: DateTime<Utc>,
    plan: &mut RepairPlan,
    actions: &mut Vec<super::Action>,
    decisions: &mut Vec<super::Decision>,
) {
    use super::{Action, Decision, DecisionKind};
    if gate.is_some() {
        return;
    }
    for m in &c.members {
        let id = m.instance_id.as_str();
        let Some(event) = snapshot.repair.scheduled.get(id) else {
            continue;
        };
        let recorded = c.in_flight.contains_key(id)
            || c.foreign.contains(id)
            || c.queued.contains_key(id)
            || c.finished
                .get(id)
                .is_some_and(|r| r.reason == RotationReason::Maintenance);
        if m.lifecycle != Lifecycle::InService || recorded {
            continue;
        }
        let deadline = event.not_before.unwrap_or(now);
        decisions.push(Decision::instance(
            DecisionKind::Start,
            id,
            format!(
                "recording {id}: Maintenance ({} scheduled from {}; seen by DescribeInstanceStatus)",
                event.code,
                super::instant(deadline)
            ),
        ));
        actions.push(Action::StartRotation {
            instance_id: id.to_string(),
            reason: RotationReason::Maintenance,
            forced: false,
        });
        plan.deadlines.insert(id.to_string(), deadline);
    }
}

/// Puts the repairs of the pass first among the starts (none while a gate holds the pool), with
/// a decision each, and the decisions about the rest: suspended (the pool), held (each node),
/// held by a gate.
pub(super) fn start(
    repairs: &[repair::Repair],
    plan: &RepairPlan,
    gate: Option<&super::Gate>,
    actions: &mut Vec<super::Action>,
    decisions: &mut Vec<super::Decision>,
) {
    use super::{Action, Decision, DecisionKind};
    if let Some(why) = plan.suspended.as_ref().or(plan.left_to.as_ref()) {
        decisions.push(Decision::pool(
            DecisionKind::Wait,
            format!("not repairing: {why}"),
        ));
    }
    for h in &plan.held {
        decisions.push(Decision::instance(
            DecisionKind::Wait,
            &h.instance,
            format!("{}: unhealthy, not repaired: {}", h.instance, h.why),
        ));
    }
    if let Some(g) = gate {
        if !repairs.is_empty() {
            decisions.push(Decision::pool(
                DecisionKind::Gate,
                format!("not repairing: {g}"),
            ));
        }
        return;
    }
    for r in repairs {
        let id = r.instance_id.as_str();
        decisions.push(Decision::instance(
            DecisionKind::Start,
            id,
            format!(
                "starting {id}: Unhealthy ({} bad since {}, at least its repair duration; domain {}/{}/{})",
                r.condition,
                super::instant(r.since),
                r.domain.zone,
                r.domain.condition,
                r.domain.image
            ),
        ));
        actions.push(Action::StartRotation {
            instance_id: id.to_string(),
            reason: RotationReason::Unhealthy,
            forced: false,
        });
    }
}
