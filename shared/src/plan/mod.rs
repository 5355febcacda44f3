//! The rotator's planner (pure): from a snapshot of one pool and `now`, what this pass does.
//!
//! [`plan`] decides, in this order:
//! 1. **Launch template**: update it when the desired AMI is known, differs from what the
//!    group's template launches (or that is unknown), and the pool is neither paused nor halted.
//! 2. **Advance**: every in-flight rotation of the pool advances one step (also while paused,
//!    halted or with an unresolved AMI: finishing started work is always safe to continue).
//! 3. **Start**: which drifted/expired nodes start a rotation, within the budgets.
//!
//! # Counting (Karpenter's disruption budgets)
//! - `total` = members that are `InService` with a Ready node ([`crate::fleet::Member::is_ready`]). Launching
//!   replacements (`Pending`) and unregistered instances do not count.
//! - `disrupting` = distinct instances that are
//!   - the subject of an in-flight rotation (whatever its step, even once the instance is gone),
//!   - or registered (node present), not `Pending`, and any of: NotReady; `Leaving` (being
//!     terminated, detached, put in standby); carrying the `nodecycle.dev/disrupted` taint
//!     without a rotation record (drained by someone else, e.g. the interruption handler);
//!     cordoned without a rotation record (being drained outside nodecycle).
//!
//!   Exception: a NotReady node that is the replacement of an in-flight rotation (recorded as
//!   its `replacement`, or absent from its surge baseline) is a launching replacement, not lost
//!   capacity: the rotation itself already counts.
//!
//!   Instances in service without a Kubernetes node are neither in `total` nor disrupting
//!   (as in Karpenter, which counts only initialized nodes); they are never candidates.
//!
//! # Starting
//! Candidates are `InService` members with a Ready node, no in-flight rotation, not cordoned
//! or disrupted by someone else, no stale `Done` rotation, and a [`Need`] (see [`assess()`]).
//! They are ordered: forced first, then nodes with no evictable pods, then oldest launch time,
//! then instance id. `allowed(R)` is computed once per reason from `total` and `disrupting`;
//! walking the candidates, a forced one always starts, and a budgeted one of reason `R` starts
//! while `started_so_far < allowed(R)`, where `started_so_far` counts every start of this pass
//! (forced ones included). So each budgeted start of reason `R` happens while
//! `disrupting + started_so_far < cap(R)`: as in Karpenter, a budget of one reason limits the
//! starts of that reason against every disruption, and starts of another reason with a larger
//! budget may follow it in the same pass (Drifted cap 1 and Expired cap 3 can end a pass with
//! one Drifted and two Expired starts).
//!
//! # Queued operator rotations
//! `ops rotate` records `Manual` rotations with a [`crate::rotation::Queue`]. While `Pending`
//! they are [waiting](crate::rotation::Rotation::waiting): not disrupting, never candidates,
//! not advanced. Before the candidates, they are released (see `release_queued`): with
//! `ignoreBudgets` up to `maxConcurrent` in flight per request, otherwise within the `Drifted`
//! allowance. Gates apply to them like to any start.
//!
//! Nothing starts, not even forced expiry, when the deployment is stopped (its in-flight
//! rotations then hold at their step too, but `Interrupted` ones: [`Gate::holds`]), the pool is
//! halted, paused (operator or
//! policy), the desired AMI is unresolved (fail closed: design principle "unknown AMI: rotate
//! nothing"), or the snapshot lists an instance twice. Forced expiry bypasses budgets only.
//!
//! # Executor contract
//! Actions are ordered `UpdateLaunchTemplate` (at most one), then `Advance` (by instance id),
//! then `Advance` at `Pending` releasing queued operator rotations (in release order), then
//! `StartRotation` (in start order). The executor must advance a
//! [waiting](crate::rotation::Rotation::waiting) rotation only when the plan releases it. If the template update fails, the executor must not
//! perform any other action of the plan (a replacement must never come up on the old AMI); the
//! next pass plans again.

pub mod assess;
mod classify;
mod count;
pub mod gates;
pub mod landing;
pub mod maintenance;
pub mod managed_update;
pub mod repair;
mod start;
mod strategy;

#[cfg(test)]
mod props;
#[cfg(test)]
mod props_waiting;
#[cfg(test)]
pub(crate) mod tests;

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

use crate::rotation::{Rotation, RotationReason, Step};
pub use assess::{Assessment, Drift, Expiration, Expiry, Need, assess};
pub use gates::Gate;
pub use repair::{RepairFacts, RepairPlan};
pub(crate) use start::budget_message;
pub use strategy::{Replacement, StartStrategy, TerminateFirstWhy};

/// Everything the planner sees about one pool at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The pool's policy.
    pub policy: crate::policy::Policy,
    /// Desired AMI, pause and halt.
    pub gates: crate::fleet::Gates,
    /// The group.
    pub group: crate::fleet::Group,
    /// Its instances.
    pub members: Vec<crate::fleet::Member>,
    /// Rotations recorded for this pool (any step, including recently finished ones).
    pub rotations: Vec<Rotation>,
    /// When nodecycle adopted the pool ([`crate::state::PoolRecord::adopted`]): forced expiry
    /// counts from then for nodes launched before ([`Expiration`]). `None`: unknown.
    pub adopted_at: Option<DateTime<Utc>>,
    /// What repair needs beyond the members and rotations.
    pub repair: RepairFacts,
}

impl Snapshot {
    /// The pool's expiration rules ([`Expiration`]).
    pub fn expiration(&self) -> Expiration {
        Expiration::of(&self.policy, self.adopted_at)
    }
}

/// What one rotator pass does for one pool. Serializes (camelCase) as the `nodecycle plan`
/// output: `{"pool", "allowed": {"Drifted", "Expired"}, "total", "disrupting", "candidates",
/// "actions", "blocked", "decisions"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// Budget allowance per reason at the start of the pass (before this pass's starts).
    pub allowed: Allowed,
    /// Ready nodes of the pool (the budgets' `total`).
    pub total: u32,
    /// Nodes being disrupted at the start of the pass (the budgets' `disrupting`).
    pub disrupting: u32,
    /// Nodes that need replacing and could start now, in start order (started or not).
    pub candidates: Vec<Candidate>,
    /// What the executor does, in order (see the module's executor contract).
    pub actions: Vec<Action>,
    /// Why no (further) rotation starts while candidates remain; `None` when every candidate
    /// started or there is none. Always set while the desired AMI is unresolved (drift cannot
    /// be checked, so candidates may remain unseen).
    pub blocked: Option<String>,
    /// Every decision of the pass, once each, with its reason.
    pub decisions: Vec<Decision>,
    /// More nodes are forced at once than the `Expired` budget allows, if they are (see
    /// [`ForcedAtOnce`]). Computed whether or not a gate holds the starts: a paused pool says
    /// what resuming it would do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forced_at_once: Option<ForcedAtOnce>,
    /// The gate that keeps anything from starting, if any (its message is in `blocked`).
    #[serde(skip)]
    pub gate: Option<Gate>,
    /// The desired AMI the plan was made for (the target of the rotations it starts).
    #[serde(skip)]
    pub desired: Option<String>,
    /// Node repair this pass: suspended (and why), nodes held (and why), each failure
    /// domain's slow start; omitted when there is nothing to say.
    #[serde(skip_serializing_if = "RepairPlan::is_empty")]
    pub repair: RepairPlan,
    /// How nodes are replaced this pass (surge or terminate first, and why).
    pub replacement: Replacement,
}

/// Allowance per budgeted reason. Serializes as `{"Drifted": n, "Expired": n, "Unhealthy": n}`
/// (`Unhealthy`: repairs that may start, [`crate::repair::room`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Allowed {
    /// `allowed(Drifted)`.
    #[serde(rename = "Drifted")]
    pub drifted: u32,
    /// `allowed(Expired)`.
    #[serde(rename = "Expired")]
    pub expired: u32,
    /// Repairs that may start ([`crate::repair::room`]).
    #[serde(rename = "Unhealthy")]
    pub unhealthy: u32,
}

impl Allowed {
    /// The allowance for a budgeted reason; `None` for reasons that do not wait for budgets.
    pub fn get(&self, reason: RotationReason) -> Option<u32> {
        match reason {
            RotationReason::Drifted => Some(self.drifted),
            RotationReason::Expired => Some(self.expired),
            RotationReason::Unhealthy => Some(self.unhealthy),
            RotationReason::Interrupted | RotationReason::Maintenance | RotationReason::Manual => {
                None
            }
        }
    }
}

/// More nodes would start at once than the budgets allow: more than one candidate is past its
/// forced-expiry deadline (forced ones start without budget), and more than the `Expired`
/// budgets allow at this instant with nothing else disrupting. Happens when the deadlines
/// passed while nothing could start (a pause, a halt, an unresolved AMI) or when many nodes
/// launched together reach it together. One forced node, or forced nodes within what the
/// budget allows, is forced expiry working as designed, not reported. Serializes as
/// `{"forced", "nodes", "allowed", "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ForcedAtOnce {
    /// Candidates forced now.
    pub forced: u32,
    /// Ready nodes of the pool (the budgets' `total`).
    pub nodes: u32,
    /// What the `Expired` budgets allow at once now, nothing else disrupting.
    pub allowed: u32,
    /// "N of M nodes are forced at once", why, and what to do.
    pub message: String,
}

impl ForcedAtOnce {
    /// `Some` when `forced` exceeds `allowed`; `held` names the gate that holds them now.
    fn check(
        forced: &[(&str, DateTime<Utc>)],
        nodes: u32,
        allowed: u32,
        held: Option<&Gate>,
    ) -> Option<ForcedAtOnce> {
        let n = u32::try_from(forced.len()).unwrap_or(u32::MAX);
        if n <= allowed.max(1) {
            return None;
        }
        let earliest = forced.iter().map(|(_, t)| *t).min()?;
        let when = match held {
            Some(g) => format!("they all start as soon as this lifts: {g}"),
            None => "they all start this pass".to_string(),
        };
        Some(ForcedAtOnce {
            forced: n,
            nodes,
            allowed,
            message: format!(
                "{n} of {nodes} nodes are forced at once: past their forced-expiry deadline \
                 (expireAfter + terminationGracePeriod from launch or adoption, the earliest \
                 {}), they start without budget while the Expired budgets allow {allowed} at once; \
                 {when}. To spread them out, raise or remove terminationGracePeriod before they \
                 start (they are then replaced within the budgets), or rotate them in batches \
                 with `nodecycle rotate`",
                instant(earliest)
            ),
        })
    }
}

/// A node that needs replacing and is eligible to start. Serializes as
/// `{"instance", "reason", "forced", "image", "age", "evictablePods"}`, `age` Go-style (`725h3m`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// `i-...`.
    #[serde(rename = "instance")]
    pub instance_id: String,
    /// `Drifted` or `Expired`.
    pub reason: RotationReason,
    /// Past `expireAfter + terminationGracePeriod`: starts without budget.
    pub forced: bool,
    /// The AMI it runs, if known.
    pub image: Option<String>,
    /// Age since EC2 launch.
    #[serde(serialize_with = "serialize_duration")]
    pub age: Duration,
    /// Pods that would need eviction.
    pub evictable_pods: u32,
}

/// One thing the executor does. Serializes as an object tagged by `action`:
/// `{"action":"updateLaunchTemplate","image"}`, `{"action":"advance","instance","step"}`,
/// `{"action":"startRotation","instance","reason","forced"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "camelCase")]
pub enum Action {
    /// Make the group's launch template launch `image` (a new template version as default).
    /// Comes first; when it fails the executor performs no other action of the plan.
    UpdateLaunchTemplate {
        /// The desired AMI.
        image: String,
    },
    /// Perform one step of the in-flight rotation of `instance_id`, currently at `step`.
    Advance {
        /// The instance being replaced.
        #[serde(rename = "instance")]
        instance_id: String,
        /// The step the rotation is in now.
        step: Step,
    },
    /// Record a new `Pending` rotation of `instance_id` (see [`Plan::rotations_to_start`]).
    StartRotation {
        /// The instance to replace.
        #[serde(rename = "instance")]
        instance_id: String,
        /// Why.
        reason: RotationReason,
        /// Started without budget (forced expiry).
        forced: bool,
    },
}

/// What a decision is about (callers select decisions by kind, never by their message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DecisionKind {
    /// The launch template moves to the desired AMI.
    LaunchTemplate,
    /// An in-flight rotation advances one step.
    Advance,
    /// A rotation starts, or a waiting one is released.
    Start,
    /// Something that could start waits (budget, maxConcurrent, a node group update).
    Wait,
    /// A pool gate keeps anything from starting.
    Gate,
    /// A node needs replacing but is not a candidate (not registered, not Ready, busy elsewhere).
    Skip,
    /// Something unexpected in the snapshot worth a look.
    Anomaly,
    /// The managed node group update (start, continue, or why not).
    NodeGroupUpdate,
}

/// One decision of the pass, about one instance or the whole pool (`instance` null).
/// Serializes as `{"instance", "kind", "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The instance it is about; `None` for the pool.
    #[serde(rename = "instance")]
    pub instance_id: Option<String>,
    /// What it is about.
    pub kind: DecisionKind,
    /// A sentence saying what and why.
    pub message: String,
    /// For a pool-level `Wait`: the reason whose candidates wait for its budget (not
    /// serialized). Lets [`managed_update::plan_managed`] drop the node-level Drifted waits, which a
    /// managed node group never has: its drift is the node group update's.
    #[serde(skip)]
    pub waits_for: Option<RotationReason>,
}

impl Decision {
    pub(crate) fn pool(kind: DecisionKind, message: String) -> Decision {
        Decision {
            instance_id: None,
            kind,
            message,
            waits_for: None,
        }
    }

    pub(crate) fn instance(kind: DecisionKind, id: &str, message: String) -> Decision {
        Decision {
            instance_id: Some(id.to_string()),
            kind,
            message,
            waits_for: None,
        }
    }

    /// A pool-level `Wait`: candidates of `reason` wait for its budget.
    pub(crate) fn budget_wait(reason: RotationReason, message: String) -> Decision {
        Decision {
            waits_for: Some(reason),
            ..Decision::pool(DecisionKind::Wait, message)
        }
    }
}

impl Plan {
    /// The `Pending` rotation records to create for the `StartRotation` actions, in order.
    pub fn rotations_to_start(&self, now: DateTime<Utc>) -> Vec<Rotation> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::StartRotation {
                    instance_id,
                    reason,
                    forced,
                } => Some(Rotation {
                    target: self.desired.clone(),
                    repair: self.repair.started.get(instance_id).cloned(),
                    deadline: self.repair.deadlines.get(instance_id).copied(),
                    ..Rotation::new(&self.pool, instance_id, *reason, *forced, now)
                }),
                _ => None,
            })
            .collect()
    }
}

fn serialize_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::duration::format(*d))
}

fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn fmt_duration(d: Duration) -> String {
    crate::duration::format(d)
}

/// Plans one rotator pass for the pool of `snapshot` at `now`. Pure and deterministic: the
/// result does not depend on the order of `snapshot.members` or `snapshot.rotations` (as long
/// as instance ids are unique). See the module documentation for the rules.
pub fn plan(snapshot: &Snapshot, now: DateTime<Utc>) -> Plan {
    let pool = snapshot.policy.pool_id();
    let desired = snapshot.gates.desired_ami.as_deref();
    let mut decisions = Vec::new();
    let c = classify::classify(snapshot, &pool, &mut decisions);
    let counts = count::count(snapshot, &c, now, &mut decisions);
    let gate = gates::gate(snapshot, &c);
    let mut actions = Vec::new();

    // 1. Launch template.
    if let Some(d) = desired
        && !gate.as_ref().is_some_and(Gate::freezes_template)
        && snapshot.group.launch_template_image.as_deref() != Some(d)
    {
        let launches = snapshot
            .group
            .launch_template_image
            .as_deref()
            .unwrap_or("an unknown image");
        decisions.push(Decision::pool(
            DecisionKind::LaunchTemplate,
            format!(
                "updating the launch template of {}: it launches {launches}, desired {d}",
                snapshot.group.name
            ),
        ));
        actions.push(Action::UpdateLaunchTemplate {
            image: d.to_string(),
        });
    }

    // 2. Advance every in-flight rotation (waiting maintenance rotations only when released).
    for (id, r) in &c.in_flight {
        if counts.maintenance_waiting.contains_key(id) {
            continue;
        }
        if let Some(g) = gate.as_ref().filter(|g| g.holds(r)) {
            decisions.push(Decision::instance(
                DecisionKind::Gate,
                id,
                format!(
                    "holding {id}: {:?} rotation stays at step {:?} ({g})",
                    r.reason, r.step
                ),
            ));
            continue;
        }
        let forced = if r.forced { ", forced" } else { "" };
        decisions.push(Decision::instance(
            DecisionKind::Advance,
            id,
            format!(
                "advancing {id}: {:?}{forced} rotation at step {:?}",
                r.reason, r.step
            ),
        ));
        actions.push(Action::Advance {
            instance_id: (*id).to_string(),
            step: r.step,
        });
    }

    // 3. Start: repairs first, then the rest.
    let (repairs, mut repair_plan) = repair::plan(snapshot, &c, counts.allowed.unhealthy, now);
    if gate.is_some() {
        repair_plan.started.clear();
    }
    repair::maintenance(
        snapshot,
        &c,
        gate.as_ref(),
        now,
        &mut repair_plan,
        &mut actions,
        &mut decisions,
    );
    repair::start(
        &repairs,
        &repair_plan,
        gate.as_ref(),
        &mut actions,
        &mut decisions,
    );
    let blocked = start::start(
        snapshot,
        &c,
        &counts,
        gate.as_ref(),
        now,
        &mut actions,
        &mut decisions,
    );

    let forced: Vec<(&str, DateTime<Utc>)> = counts
        .pending
        .iter()
        .filter_map(|p| match p.assessment.expiry {
            Expiry::Forced { forced_at, .. } if p.need.forced => {
                Some((p.member.instance_id.as_str(), forced_at))
            }
            _ => None,
        })
        .collect();
    // The budgets are evaluated again only when several nodes are forced (rare).
    let forced_at_once = (forced.len() > 1)
        .then(|| {
            let at_once = crate::budget::evaluate(
                &snapshot.policy.budgets,
                crate::budget::Reason::Expired,
                counts.total,
                0,
                now,
            )
            .allowed;
            ForcedAtOnce::check(&forced, counts.total, at_once, gate.as_ref())
        })
        .flatten();
    if let Some(f) = &forced_at_once {
        decisions.push(Decision::pool(DecisionKind::Anomaly, f.message.clone()));
    }
    Plan {
        pool,
        allowed: counts.allowed,
        total: counts.total,
        disrupting: counts.disrupting,
        candidates: counts
            .pending
            .iter()
            .map(|p| Candidate {
                instance_id: p.member.instance_id.clone(),
                reason: p.need.reason,
                forced: p.need.forced,
                image: p.member.image_id.clone(),
                age: p.assessment.age,
                evictable_pods: p.evictable_pods,
            })
            .collect(),
        actions,
        blocked,
        decisions,
        forced_at_once,
        gate,
        desired: desired.map(str::to_string),
        repair: repair_plan,
        replacement: Replacement::of(&snapshot.policy, &snapshot.group, &snapshot.rotations),
    }
}

/// `i-x: Drifted (runs ami-old, desired ami-new)` and the like.
fn describe_need(id: &str, need: Need, a: &Assessment, policy: &crate::policy::Policy) -> String {
    let expire = policy.expire_after.map(fmt_duration).unwrap_or_default();
    let grace = policy
        .termination_grace_period
        .map(fmt_duration)
        .unwrap_or_default();
    let age = fmt_duration(a.age);
    match (need.reason, &a.drift, a.expiry) {
        (RotationReason::Expired, _, Expiry::Forced { overdue, forced_at }) => format!(
            "{id}: Expired, forced ({} past its deadline {}: expireAfter+terminationGracePeriod \
             {expire}+{grace} from launch or adoption, whichever is later; age {age}; no budget \
             wait)",
            fmt_duration(overdue),
            instant(forced_at)
        ),
        (RotationReason::Drifted, Drift::Drifted { image, desired }, expiry) => {
            let also = match expiry {
                Expiry::Expired { .. } => format!("; also expired: age {age} >= {expire}"),
                _ => String::new(),
            };
            format!("{id}: Drifted (runs {image}, desired {desired}{also})")
        }
        (_, _, Expiry::Expired { overdue, forced_at }) => {
            let forced = forced_at
                .map(|t| format!("; forced from {}", instant(t)))
                .unwrap_or_default();
            format!(
                "{id}: Expired (age {age}, {} past expireAfter {expire}{forced})",
                fmt_duration(overdue)
            )
        }
        (reason, _, _) => format!("{id}: {reason:?}"),
    }
}
