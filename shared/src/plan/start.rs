//! Start: which waiting work is released and which candidates start this pass, within the
//! budgets, and why the rest waits.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::Snapshot;
use super::classify::Classified;
use super::count::Counts;
use super::gates::Gate;
use super::{Action, Allowed, Decision, DecisionKind, describe_need, instant, maintenance};
use crate::budget::{self, Budget};
use crate::fleet::{Lifecycle, Member};
use crate::rotation::{Rotation, RotationReason};

/// How many budget changes ahead [`budget_message`] looks for the instant a blocking budget lifts.
const LIFT_LOOKAHEAD: usize = 16;

/// Plans the starts of the pass after the repairs ([`super::repair::start`], already in
/// `actions`); returns why something waits (`blocked`), if it does.
pub(super) fn start(
    snapshot: &Snapshot,
    c: &Classified<'_>,
    counts: &Counts<'_>,
    gate: Option<&Gate>,
    now: DateTime<Utc>,
    actions: &mut Vec<Action>,
    decisions: &mut Vec<Decision>,
) -> Option<String> {
    let policy = &snapshot.policy;
    let budgets = &policy.budgets;
    if let Some(gate) = gate {
        let why = gate.to_string();
        // Bookkeeping only, no disruption: a queued rotation whose instance left is finished.
        for (id, r) in &c.queued {
            if !present(&c.members, id) {
                decisions.push(Decision::instance(
                    DecisionKind::Advance,
                    id,
                    format!("{id}: queued manual rotation, but the instance left the group: finishing it"),
                ));
                actions.push(Action::Advance {
                    instance_id: (*id).to_string(),
                    step: r.step,
                });
            }
        }
        maintenance::release(
            &counts.maintenance_waiting,
            Some(&why),
            counts.allowed,
            actions,
            decisions,
        );
        let forced = counts.pending.iter().filter(|p| p.need.forced).count();
        let waiting = if counts.pending.is_empty() {
            String::new()
        } else {
            format!(
                "; {} candidate(s) wait ({forced} forced)",
                counts.pending.len()
            )
        };
        let manual = if c.queued.is_empty() {
            String::new()
        } else {
            format!("; {} queued manual rotation(s) wait", c.queued.len())
        };
        decisions.push(Decision::pool(
            DecisionKind::Gate,
            format!("not starting: {why}{waiting}{manual}"),
        ));
        let unresolved = matches!(gate, Gate::Unresolved);
        return (!counts.pending.is_empty() || !c.queued.is_empty() || unresolved).then_some(why);
    }
    // A repair of a node that is not Ready adds no disruption: the node counts already.
    let repairs: Vec<String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::StartRotation {
                instance_id,
                reason: RotationReason::Unhealthy,
                ..
            } => Some(instance_id.clone()),
            _ => None,
        })
        .collect();
    let mut started = u32::try_from(
        repairs
            .iter()
            .filter(|id| {
                c.members
                    .iter()
                    .any(|m| m.instance_id == **id && m.is_ready())
            })
            .count(),
    )
    .unwrap_or(u32::MAX);
    started += maintenance::release(
        &counts.maintenance_waiting,
        None,
        counts.allowed,
        actions,
        decisions,
    );
    let mut parts = Vec::new();
    release_queued(
        &QueueCtx {
            queued: &c.queued,
            in_flight: &c.in_flight,
            members: &c.members,
            budgets,
            total: counts.total,
            disrupting: counts.disrupting,
            allowed: counts.allowed,
            now,
        },
        &mut started,
        actions,
        decisions,
        &mut parts,
    );
    let mut waiting: BTreeMap<RotationReason, usize> = BTreeMap::new();
    let strategy = super::StartStrategy::of(policy);
    for p in &counts.pending {
        let id = p.member.instance_id.as_str();
        if repairs.iter().any(|r| r == id) {
            continue;
        }
        let reason = p.need.reason;
        if !strategy.admits(p.need.forced, started, counts.allowed.get(reason)) {
            *waiting.entry(reason).or_default() += 1;
            continue;
        }
        started += 1;
        decisions.push(Decision::instance(
            DecisionKind::Start,
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
        let why = budget_message(budgets, r, counts.total, counts.disrupting, started, now);
        decisions.push(Decision::budget_wait(
            reason,
            format!("not starting: {why}; {count} {reason:?} candidate(s) wait"),
        ));
        parts.push(why);
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The instance is in the group and not leaving it.
fn present(members: &[&Member], id: &str) -> bool {
    members
        .iter()
        .any(|m| m.instance_id == id && m.lifecycle != Lifecycle::Leaving)
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
        let release = |decisions: &mut Vec<Decision>,
                       actions: &mut Vec<Action>,
                       kind: DecisionKind,
                       why: String| {
            decisions.push(Decision::instance(kind, id, why));
            actions.push(Action::Advance {
                instance_id: id.to_string(),
                step: r.step,
            });
        };
        if !present(ctx.members, id) {
            release(
                decisions,
                actions,
                DecisionKind::Advance,
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
                DecisionKind::Start,
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
                DecisionKind::Start,
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
        decisions.push(Decision::pool(
            DecisionKind::Wait,
            format!("not starting: {why}"),
        ));
        blocked.push(why);
    }
    for ((request, max), count) in over_limit {
        let why =
            format!("{count} Manual rotation(s) of request {request} wait for maxConcurrent {max}");
        decisions.push(Decision::pool(
            DecisionKind::Wait,
            format!("not starting: {why}"),
        ));
        blocked.push(why);
    }
}

/// Why budgeted reason `reason` allows no further start: remaining allowance, when it lifts
/// (if a budget change within [`LIFT_LOOKAHEAD`] changes lifts it with the same counts), and
/// which budget limits it.
pub(crate) fn budget_message(
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
            "disruption.budgets[{i}] nodes \"{}\" allows {} of {total}",
            b.nodes,
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
    let mut at = a.next_window_edge.filter(|_| steady_cap > used);
    for _ in 0..LIFT_LOOKAHEAD {
        let Some(t) = at else { break };
        let later = budget::evaluate(budgets, reason, total, used, t);
        if later.allowed > 0 {
            lift = Some(t);
            break;
        }
        at = later.next_window_edge;
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
