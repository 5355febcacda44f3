//! The rotator's planner (pure): from a snapshot of one pool and `now`, what this pass does.
//!
//! [`plan`] decides, in this order:
//! 1. **Launch template**: update it when the desired AMI is known, differs from what the
//!    group's template launches (or that is unknown), and the pool is neither paused nor halted.
//! 2. **Advance**: every in-flight rotation of the pool advances one step (also while paused,
//!    halted or with an unresolved AMI: finishing started work is always safe to continue).
//! 3. **Start**: which drifted/expired nodes start a rotation, within the budgets.
//!
//! # Counting (semantics.md section 3)
//! - `total` = members that are `InService` with a Ready node ([`Member::is_ready`]). Launching
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
//! (forced ones included). So after this pass, for every reason with a budgeted start,
//! `disrupting + started <= cap(R)`.
//!
//! # Queued operator rotations
//! `ops rotate` records `Manual` rotations with a [`crate::rotation::Queue`]. While `Pending`
//! they are [waiting](crate::rotation::Rotation::waiting): not disrupting, never candidates,
//! not advanced. Before the candidates, they are released (see `release_queued`): with
//! `ignoreBudgets` up to `maxConcurrent` in flight per request, otherwise within the `Drifted`
//! allowance. Gates apply to them like to any start.
//!
//! Nothing starts, not even forced expiry, when the pool is halted, paused (operator or
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
pub mod maintenance;
pub mod managed;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

use crate::budget::{self, Budget};
use crate::fleet::{Lifecycle, Member, Snapshot};
use crate::rotation::{Rotation, RotationReason, Step};
pub use assess::{Assessment, Drift, Expiry, Need, assess};

/// How many budget changes ahead [`plan`] looks for the instant a blocking budget lifts.
const LIFT_LOOKAHEAD: usize = 16;

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
}

/// Allowance per budgeted reason. Serializes as `{"Drifted": n, "Expired": n}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Allowed {
    /// `allowed(Drifted)`.
    #[serde(rename = "Drifted")]
    pub drifted: u32,
    /// `allowed(Expired)`.
    #[serde(rename = "Expired")]
    pub expired: u32,
}

impl Allowed {
    /// The allowance for a budgeted reason; `None` for reasons that do not wait for budgets.
    pub fn get(&self, reason: RotationReason) -> Option<u32> {
        match reason {
            RotationReason::Drifted => Some(self.drifted),
            RotationReason::Expired => Some(self.expired),
            _ => None,
        }
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

/// One decision of the pass, about one instance or the whole pool (`instance` null).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The instance it is about; `None` for the pool.
    #[serde(rename = "instance")]
    pub instance_id: Option<String>,
    /// A sentence saying what and why.
    pub message: String,
}

impl Decision {
    fn pool(message: String) -> Decision {
        Decision {
            instance_id: None,
            message,
        }
    }

    fn instance(id: &str, message: String) -> Decision {
        Decision {
            instance_id: Some(id.to_string()),
            message,
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
                } => Some(Rotation::new(
                    &self.pool,
                    instance_id,
                    *reason,
                    *forced,
                    now,
                )),
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

/// A candidate with its ordering key.
struct Eligible<'a> {
    member: &'a Member,
    need: Need,
    assessment: Assessment,
    evictable_pods: u32,
}

/// Plans one rotator pass for the pool of `snapshot` at `now`. Pure and deterministic: the
/// result does not depend on the order of `snapshot.members` or `snapshot.rotations` (as long
/// as instance ids are unique). See the module documentation for the rules.
pub fn plan(snapshot: &Snapshot, now: DateTime<Utc>) -> Plan {
    let policy = &snapshot.policy;
    let gates = &snapshot.gates;
    let pool = policy.pool_id();
    let desired = gates.desired_ami.as_deref();
    let mut decisions = Vec::new();

    // Rotations, oldest first per instance so the latest record wins below.
    let mut rotations: Vec<&Rotation> = snapshot.rotations.iter().collect();
    rotations.sort_by(|a, b| {
        (
            a.instance_id.as_str(),
            a.created_at,
            a.step_at,
            a.pool.as_str(),
        )
            .cmp(&(
                b.instance_id.as_str(),
                b.created_at,
                b.step_at,
                b.pool.as_str(),
            ))
    });
    let mut in_flight: BTreeMap<&str, &Rotation> = BTreeMap::new();
    let mut foreign: BTreeSet<&str> = BTreeSet::new();
    let mut finished: BTreeMap<&str, &Rotation> = BTreeMap::new();
    let mut queued: BTreeMap<&str, &Rotation> = BTreeMap::new();
    for r in rotations {
        let id = r.instance_id.as_str();
        if r.waiting() {
            // Queued operator rotations are not disrupting until released (below).
            if r.pool == pool {
                queued.insert(id, r);
            }
            continue;
        }
        if r.pool != pool {
            if r.in_flight() && foreign.insert(id) {
                decisions.push(Decision::instance(
                    id,
                    format!(
                        "{id} has an in-flight rotation recorded for pool {} in this pool's \
                         snapshot: counted as disrupting and not started, but not advanced here",
                        r.pool
                    ),
                ));
            }
        } else if r.in_flight() {
            if in_flight.insert(id, r).is_some() {
                decisions.push(Decision::instance(
                    id,
                    format!("{id} has several in-flight rotation records: advancing the latest"),
                ));
            }
        } else {
            finished.insert(id, r);
        }
    }

    // Launching replacements of in-flight rotations.
    let mut replacements: BTreeSet<&str> = BTreeSet::new();
    for r in in_flight.values() {
        if let Some(rep) = &r.replacement {
            replacements.insert(rep.as_str());
        } else if let Some(surge) = &r.surge {
            for m in &snapshot.members {
                if !surge.baseline.contains(&m.instance_id) {
                    replacements.insert(m.instance_id.as_str());
                }
            }
        }
    }

    let mut members: Vec<&Member> = snapshot.members.iter().collect();
    members.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    let mut duplicates: Vec<&str> = members
        .windows(2)
        .filter(|w| w[0].instance_id == w[1].instance_id)
        .map(|w| w[0].instance_id.as_str())
        .collect();
    duplicates.dedup();

    let mut total: u32 = 0;
    let mut disrupting: BTreeSet<&str> = in_flight.keys().copied().collect();
    // Maintenance rotations waiting for budget are not disrupting yet (see `maintenance`).
    let maintenance_waiting: BTreeMap<&str, &Rotation> = in_flight
        .iter()
        .filter(|(_, r)| maintenance::waits(r, now))
        .map(|(id, r)| (*id, *r))
        .collect();
    disrupting.retain(|id| !maintenance_waiting.contains_key(id));
    disrupting.extend(foreign.iter().copied());
    let mut pending: Vec<Eligible<'_>> = Vec::new();

    for m in &members {
        let id = m.instance_id.as_str();
        let busy = in_flight.contains_key(id) || foreign.contains(id) || queued.contains_key(id);
        if m.is_ready() {
            total += 1;
        }
        if m.lifecycle != Lifecycle::Pending
            && let Some(n) = &m.node
        {
            let external =
                n.disrupted.is_some() || n.unschedulable || m.lifecycle == Lifecycle::Leaving;
            let not_ready = !n.ready && !replacements.contains(id);
            if external || not_ready {
                disrupting.insert(id);
            }
        }
        if m.lifecycle != Lifecycle::InService || busy {
            continue;
        }
        let a = assess(
            m,
            desired,
            policy.expire_after,
            policy.termination_grace_period,
            now,
        );
        let Some(need) = a.need() else {
            if a.drift == Drift::ImageUnknown && m.is_ready() {
                decisions.push(Decision::instance(
                    id,
                    format!("{id} runs an unknown image: drift not checked"),
                ));
            }
            continue;
        };
        let what = describe_need(id, need, &a, policy);
        let skip = match &m.node {
            None => Some(format!(
                "{what}, but it is not registered as a Kubernetes node: not a candidate"
            )),
            Some(n) if !n.ready => Some(format!(
                "{what}, but its node is not Ready: counted as disrupting, not a candidate"
            )),
            Some(n) if n.disrupted.is_some() => Some(format!(
                "{what}, but another component is disrupting it (taint nodecycle.dev/disrupted={}): \
                 counted as disrupting, not started",
                n.disrupted.as_deref().unwrap_or_default()
            )),
            Some(n) if n.unschedulable => Some(format!(
                "{what}, but it was cordoned outside nodecycle: counted as disrupting, not \
                 started until uncordoned"
            )),
            Some(_) => finished.get(id).filter(|r| r.step == Step::Done).map(|r| {
                format!(
                    "{what}, but its {:?} rotation finished (Done) at {} and it is still in \
                         service: not starting it again (check the executor)",
                    r.reason,
                    instant(r.step_at)
                )
            }),
        };
        if let Some(message) = skip {
            decisions.push(Decision::instance(id, message));
            continue;
        }
        pending.push(Eligible {
            member: m,
            need,
            evictable_pods: m.node.as_ref().map_or(0, |n| n.evictable_pods),
            assessment: a,
        });
    }

    pending.sort_by(|a, b| {
        (
            !a.need.forced,
            a.evictable_pods > 0,
            a.member.launch_time,
            a.member.instance_id.as_str(),
        )
            .cmp(&(
                !b.need.forced,
                b.evictable_pods > 0,
                b.member.launch_time,
                b.member.instance_id.as_str(),
            ))
    });

    let disrupting_count = u32::try_from(disrupting.len()).unwrap_or(u32::MAX);
    let budgets = &policy.budgets;
    let allowed = Allowed {
        drifted: budget::evaluate(
            budgets,
            budget::Reason::Drifted,
            total,
            disrupting_count,
            now,
        )
        .allowed,
        expired: budget::evaluate(
            budgets,
            budget::Reason::Expired,
            total,
            disrupting_count,
            now,
        )
        .allowed,
    };

    let mut actions = Vec::new();

    // Pool gates, strongest first.
    let paused = gates.paused.clone().or_else(|| {
        policy
            .paused
            .then(|| "policy sets paused: true".to_string())
    });
    let gate = if let Some(reason) = &gates.halted {
        Some(format!("pool halted: {reason}"))
    } else if let Some(reason) = &paused {
        Some(format!("pool paused: {reason}"))
    } else if !duplicates.is_empty() {
        Some(format!(
            "snapshot lists instance(s) {} more than once: not trusting it",
            duplicates.join(", ")
        ))
    } else if desired.is_none() {
        Some("desired AMI unresolved: drift cannot be checked, nothing starts".to_string())
    } else {
        None
    };

    // 1. Launch template.
    if let Some(d) = desired
        && gates.halted.is_none()
        && paused.is_none()
        && snapshot.group.launch_template_image.as_deref() != Some(d)
    {
        let launches = snapshot
            .group
            .launch_template_image
            .as_deref()
            .unwrap_or("an unknown image");
        decisions.push(Decision::pool(format!(
            "updating the launch template of {}: it launches {launches}, desired {d}",
            snapshot.group.name
        )));
        actions.push(Action::UpdateLaunchTemplate {
            image: d.to_string(),
        });
    }

    // 2. Advance every in-flight rotation.
    for (id, r) in &in_flight {
        if maintenance_waiting.contains_key(id) {
            continue;
        }
        let forced = if r.forced { ", forced" } else { "" };
        decisions.push(Decision::instance(
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

    // 3. Start.
    let mut blocked = None;
    if let Some(gate) = gate {
        maintenance::release(
            &maintenance_waiting,
            Some(&gate),
            allowed,
            &mut actions,
            &mut decisions,
        );
        let forced = pending.iter().filter(|p| p.need.forced).count();
        let waiting = if pending.is_empty() {
            String::new()
        } else {
            format!("; {} candidate(s) wait ({forced} forced)", pending.len())
        };
        let manual = if queued.is_empty() {
            String::new()
        } else {
            format!("; {} queued manual rotation(s) wait", queued.len())
        };
        decisions.push(Decision::pool(format!(
            "not starting: {gate}{waiting}{manual}"
        )));
        if !pending.is_empty() || !queued.is_empty() || desired.is_none() {
            blocked = Some(gate);
        }
    } else {
        let mut started: u32 = maintenance::release(
            &maintenance_waiting,
            None,
            allowed,
            &mut actions,
            &mut decisions,
        );
        let mut parts = Vec::new();
        release_queued(
            &QueueCtx {
                queued: &queued,
                in_flight: &in_flight,
                members: &members,
                budgets,
                total,
                disrupting: disrupting_count,
                allowed,
                now,
            },
            &mut started,
            &mut actions,
            &mut decisions,
            &mut parts,
        );
        let mut waiting: BTreeMap<RotationReason, usize> = BTreeMap::new();
        for p in &pending {
            let id = p.member.instance_id.as_str();
            let reason = p.need.reason;
            let budgeted = !p.need.forced;
            if budgeted && started >= allowed.get(reason).unwrap_or(0) {
                *waiting.entry(reason).or_default() += 1;
                continue;
            }
            started += 1;
            decisions.push(Decision::instance(
                id,
                format!(
                    "starting {}, {} evictable pod(s)",
                    describe_need(id, p.need, &p.assessment, policy),
                    p.evictable_pods
                ),
            ));
            actions.push(Action::StartRotation {
                instance_id: id.to_string(),
                reason,
                forced: p.need.forced,
            });
        }
        for (reason, count) in waiting {
            let Some(r) = reason.budget_reason() else {
                continue;
            };
            let why = budget_message(budgets, r, total, disrupting_count, started, now);
            decisions.push(Decision::pool(format!(
                "not starting: {why}; {count} {reason:?} candidate(s) wait"
            )));
            parts.push(why);
        }
        if !parts.is_empty() {
            blocked = Some(parts.join("; "));
        }
    }

    Plan {
        pool,
        allowed,
        total,
        disrupting: disrupting_count,
        candidates: pending
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
    }
}

/// What [`release_queued`] needs from the pass.
struct QueueCtx<'a> {
    queued: &'a BTreeMap<&'a str, &'a Rotation>,
    in_flight: &'a BTreeMap<&'a str, &'a Rotation>,
    members: &'a [&'a Member],
    budgets: &'a [Budget],
    total: u32,
    disrupting: u32,
    allowed: Allowed,
    now: DateTime<Utc>,
}

/// Releases queued operator rotations (oldest request first, then by instance id) by planning
/// their first step (`Advance` at `Pending`):
/// - a rotation whose instance left the group is released at once (the executor finishes it);
/// - with `ignoreBudgets`, while fewer than `maxConcurrent` rotations of its request are in
///   flight past the queue (budgets are not consulted, but the start counts as disrupting);
/// - otherwise like a budgeted `Drifted` start: while `started < allowed(Drifted)`.
///
/// Every release increments `started`, so later budgeted starts of the pass see less room.
fn release_queued(
    ctx: &QueueCtx<'_>,
    started: &mut u32,
    actions: &mut Vec<Action>,
    decisions: &mut Vec<Decision>,
    blocked: &mut Vec<String>,
) {
    let mut active: BTreeMap<&str, u32> = BTreeMap::new();
    for r in ctx.in_flight.values() {
        if let Some(q) = &r.queued {
            *active.entry(q.request_id.as_str()).or_default() += 1;
        }
    }
    let mut order: Vec<&Rotation> = ctx.queued.values().copied().collect();
    order.sort_by(|a, b| {
        (a.created_at, a.instance_id.as_str()).cmp(&(b.created_at, b.instance_id.as_str()))
    });
    let mut over_budget = 0usize;
    let mut over_limit: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    for r in order {
        let Some(q) = &r.queued else { continue };
        let id = r.instance_id.as_str();
        let release = |decisions: &mut Vec<Decision>, actions: &mut Vec<Action>, why: String| {
            decisions.push(Decision::instance(id, why));
            actions.push(Action::Advance {
                instance_id: id.to_string(),
                step: r.step,
            });
        };
        let present = ctx
            .members
            .iter()
            .any(|m| m.instance_id == id && m.lifecycle != Lifecycle::Leaving);
        if !present {
            release(
                decisions,
                actions,
                format!(
                    "{id}: queued manual rotation, but the instance left the group: finishing it"
                ),
            );
            continue;
        }
        if q.ignore_budgets {
            let n = active.entry(q.request_id.as_str()).or_default();
            if *n >= q.max_concurrent {
                *over_limit
                    .entry((q.request_id.as_str(), q.max_concurrent))
                    .or_default() += 1;
                continue;
            }
            *n += 1;
            *started += 1;
            release(
                decisions,
                actions,
                format!(
                    "starting {id}: Manual ({}), ignoring budgets, {} of maxConcurrent {} of request {}",
                    q.reason, n, q.max_concurrent, q.request_id
                ),
            );
        } else if *started < ctx.allowed.drifted {
            *started += 1;
            release(
                decisions,
                actions,
                format!(
                    "starting {id}: Manual ({}), within the Drifted budget (request {})",
                    q.reason, q.request_id
                ),
            );
        } else {
            over_budget += 1;
        }
    }
    if over_budget > 0 {
        let why = budget_message(
            ctx.budgets,
            budget::Reason::Drifted,
            ctx.total,
            ctx.disrupting,
            *started,
            ctx.now,
        );
        let why = format!("{why}; {over_budget} queued Manual rotation(s) wait");
        decisions.push(Decision::pool(format!("not starting: {why}")));
        blocked.push(why);
    }
    for ((request, max), count) in over_limit {
        let why =
            format!("{count} Manual rotation(s) of request {request} wait for maxConcurrent {max}");
        decisions.push(Decision::pool(format!("not starting: {why}")));
        blocked.push(why);
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
        (RotationReason::Expired, _, Expiry::Forced { overdue }) => format!(
            "{id}: Expired, forced ({} past expireAfter+terminationGracePeriod {expire}+{grace}, \
             age {age}; no budget wait)",
            fmt_duration(overdue)
        ),
        (RotationReason::Drifted, Drift::Drifted { image, desired }, expiry) => {
            let also = match expiry {
                Expiry::Expired { .. } => format!("; also expired: age {age} >= {expire}"),
                _ => String::new(),
            };
            format!("{id}: Drifted (runs {image}, desired {desired}{also})")
        }
        (_, _, Expiry::Expired { overdue }) => format!(
            "{id}: Expired (age {age}, {} past expireAfter {expire})",
            fmt_duration(overdue)
        ),
        (reason, _, _) => format!("{id}: {reason:?}"),
    }
}

/// Why budgeted reason `reason` allows no further start: remaining allowance, when it lifts
/// (if a budget change within [`LIFT_LOOKAHEAD`] changes lifts it with the same counts), and
/// which budget limits it.
fn budget_message(
    budgets: &[Budget],
    reason: budget::Reason,
    total: u32,
    disrupting: u32,
    started: u32,
    now: DateTime<Utc>,
) -> String {
    let used = disrupting.saturating_add(started);
    let a = budget::evaluate(budgets, reason, total, used, now);
    let limit = match a.limited_by.and_then(|i| budgets.get(i).map(|b| (i, b))) {
        Some((i, b)) => format!(
            "disruption.budgets[{i}] nodes {} allows {} of {total}",
            quote_nodes(b),
            b.nodes.value(total)
        ),
        None => format!("no active budget applies: all {total} nodes"),
    };
    // Budgets without schedule always apply: if they alone leave no room, no change lifts it.
    let steady_cap = budgets
        .iter()
        .filter(|b| b.window.is_none() && b.applies_to(reason))
        .map(|b| b.nodes.value(total))
        .min()
        .unwrap_or(total);
    let mut lift = None;
    let mut at = a.next_change.filter(|_| steady_cap > used);
    for _ in 0..LIFT_LOOKAHEAD {
        let Some(t) = at else { break };
        let later = budget::evaluate(budgets, reason, total, used, t);
        if later.allowed > 0 {
            lift = Some(t);
            break;
        }
        at = later.next_change;
    }
    let until = lift
        .map(|t| format!(" until {}", instant(t)))
        .unwrap_or_default();
    let started = if started > 0 {
        format!(", {started} started this pass")
    } else {
        String::new()
    };
    format!(
        "{reason} budget {}{until} ({limit}; {disrupting} disrupting{started})",
        a.allowed
    )
}

fn quote_nodes(b: &Budget) -> String {
    format!("\"{}\"", b.nodes)
}
