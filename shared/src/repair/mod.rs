//! Node repair (pure): which unhealthy nodes of a pool are replaced now, with reason
//! `Unhealthy`, and with what restraint. Nodes break (a kubelet that stops posting status, a
//! full disk, a GPU with double-bit errors), and so do the signals about them: a component
//! that marks healthy nodes unhealthy must not cost the pool its nodes (kubernetes-sigs/karpenter
//! #2811). So, from the facts of one pass ([`Node`]), the policy's `repair:`
//! ([`RepairPolicy`]), the pool's slow-start state per failure domain ([`SlowStart`]) and
//! `now`, [`plan`] answers with the repairs to start, each with its reason, or why none:
//!
//! - **Due.** A node is repaired when one of its conditions has been bad for at least the
//!   policy's duration for it (`Ready` not `True`; the node monitoring agent's `False`).
//! - **Circuit breaker.** No repair while more than `repair.maxUnhealthy` of the pool, or of
//!   one of its zones, is unhealthy (any condition bad, due or not; two nodes at least: one
//!   node is never an outage): that is an outage or a bad signal, not a node.
//! - **Opt-out.** A node annotated `nodecycle.dev/do-not-repair=true` is never repaired.
//! - **Evidence first.** A node of a release under watch (the pool took it within
//!   `health.window`) is not repaired onto the same image: its failure is evidence against
//!   the release, which release health judges ([`crate::promotion::health`]).
//! - **Slow start** per failure domain (zone, condition, image): at most `width` repairs of
//!   the domain in flight, the width doubling after each repair whose replacement stayed
//!   healthy ([`SlowStart::settle`]) and back to 1 after a failed one, with a cooldown after
//!   each round.
//! - **Parallelism.** At most `allowed` repairs in flight in the pool (a budget naming
//!   `Unhealthy`, else `repair.maxParallel`).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::fleet::Condition;
use crate::policy::RepairPolicy;

/// How long a round of repairs in one domain is followed by a pause before the next round.
pub const COOLDOWN: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// The widest a domain's slow start grows.
pub const MAX_WIDTH: u32 = 64;

/// How long a repair's replacement stays healthy, after the repair finished, before the repair
/// counts as a success (the domain's width doubles).
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(5 * 60);

/// The annotation (on a node) or tag (on a pool's group) that keeps nodecycle from repairing.
pub const DO_NOT_REPAIR: &str = "nodecycle.dev/do-not-repair";

/// One node of the pool as a pass sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `i-...`.
    pub instance_id: String,
    /// Its Availability Zone.
    pub zone: String,
    /// The image its instance runs (`None`: unknown).
    pub image: Option<String>,
    /// When it joined (the Node's `creationTimestamp`).
    pub joined: DateTime<Utc>,
    /// Its node conditions ([`crate::promotion::health::HEALTH_CONDITIONS`]).
    pub conditions: Vec<Condition>,
    /// Annotated (or its pool tagged) `nodecycle.dev/do-not-repair=true`.
    pub do_not_repair: bool,
    /// A pod on it opted out of voluntary disruption and still holds
    /// ([`crate::fleet::OptOut`]): a Ready node is not repaired meanwhile (a node not Ready is:
    /// its pods are not running anyway).
    pub opt_out: Option<crate::fleet::OptOut>,
    /// A rotation or repair of it is in flight already.
    pub in_flight: bool,
}

/// A failure domain: repairs in one are paced together.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Domain {
    /// Availability Zone.
    pub zone: String,
    /// The condition that made the nodes unhealthy.
    pub condition: String,
    /// The image they ran (`-` when unknown).
    pub image: String,
}

/// A domain's slow start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlowStart {
    /// Repairs of the domain that may be in flight at once.
    pub width: u32,
    /// Repairs of the domain in flight now.
    pub in_flight: u32,
    /// When the last round filled its width (the next starts [`COOLDOWN`] later).
    pub round_at: Option<DateTime<Utc>>,
}

impl Default for SlowStart {
    fn default() -> Self {
        SlowStart {
            width: 1,
            in_flight: 0,
            round_at: None,
        }
    }
}

impl SlowStart {
    /// The state once one repair of the domain settled: its replacement stayed healthy
    /// (`healthy`: the width doubles, up to [`MAX_WIDTH`]) or did not (back to 1).
    pub fn settle(self, healthy: bool) -> SlowStart {
        SlowStart {
            width: self.grown(healthy),
            in_flight: self.in_flight.saturating_sub(1),
            ..self
        }
    }

    /// The width after a repair settled: doubled (up to [`MAX_WIDTH`]) when healthy, else 1.
    fn grown(self, healthy: bool) -> u32 {
        if healthy {
            self.width.saturating_mul(2).min(MAX_WIDTH)
        } else {
            1
        }
    }
}

/// A repair to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The node's instance.
    pub instance_id: String,
    /// The condition that is due.
    pub condition: String,
    /// Bad since.
    pub since: DateTime<Utc>,
    /// Its failure domain.
    pub domain: Domain,
}

/// What a pass does about the pool's unhealthy nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Repairs to start now, oldest failure first.
    pub repairs: Vec<Repair>,
    /// Why no repair starts at all (the circuit breaker), if so.
    pub suspended: Option<String>,
    /// Unhealthy nodes not repaired this pass, each with why.
    pub held: Vec<(String, String)>,
    /// The slow-start state after the repairs started.
    pub slow_start: BTreeMap<Domain, SlowStart>,
}

/// The conditions of a node that are bad now, each with since when: `Ready` not `True`, a
/// node monitoring agent condition `False` (since its transition; without one, since the
/// node joined).
pub fn failing(node: &Node) -> Vec<(String, DateTime<Utc>)> {
    node.conditions
        .iter()
        .filter(|c| c.is_bad())
        .map(|c| (c.kind.clone(), c.since.unwrap_or(node.joined)))
        .collect()
}

/// The condition of `node` that has been bad for at least its duration in `policy`, the
/// longest-failing first, if any.
pub fn due(
    node: &Node,
    policy: &RepairPolicy,
    now: DateTime<Utc>,
) -> Option<(String, DateTime<Utc>)> {
    failing(node)
        .into_iter()
        .filter(|(kind, since)| {
            policy
                .conditions
                .get(kind)
                .is_some_and(|d| Duration::from_std(*d).is_ok_and(|d| now - *since >= d))
        })
        .min_by_key(|(_, since)| *since)
}

/// The repairs of one pass (see the module's rules). `watched_images`: the images of the
/// pool's release under watch; `room`: repairs that may start now in the pool ([`room`]).
pub fn plan(
    nodes: &[Node],
    policy: &RepairPolicy,
    slow_start: &BTreeMap<Domain, SlowStart>,
    watched_images: &[String],
    room: u32,
    now: DateTime<Utc>,
) -> Plan {
    let allowed = room;
    let mut out = Plan {
        slow_start: slow_start.clone(),
        ..Plan::default()
    };
    if !policy.enabled || nodes.is_empty() {
        return out;
    }
    if let Some(why) = breaker(nodes, policy.max_unhealthy_percent) {
        out.suspended = Some(why);
        return out;
    }
    let mut due_nodes: Vec<(&Node, String, DateTime<Utc>)> = nodes
        .iter()
        .filter(|n| !n.in_flight)
        .filter_map(|n| due(n, policy, now).map(|(c, s)| (n, c, s)))
        .collect();
    due_nodes.sort_by(|a, b| {
        a.2.cmp(&b.2)
            .then_with(|| a.0.instance_id.cmp(&b.0.instance_id))
    });
    let mut room = room;
    let cooldown = Duration::from_std(COOLDOWN).unwrap_or(Duration::MAX);
    for (node, condition, since) in due_nodes {
        let id = node.instance_id.clone();
        if node.do_not_repair {
            out.held
                .push((id, "nodecycle.dev/do-not-repair=true".into()));
            continue;
        }
        if let Some(o) = node.opt_out.as_ref().filter(|o| o.holds(now)) {
            out.held.push((id, o.describe()));
            continue;
        }
        if let Some(image) = node.image.as_ref().filter(|i| watched_images.contains(i)) {
            out.held.push((
                id,
                format!("its release ({image}) is under watch: the failure is evidence against it, not a node to repair onto it"),
            ));
            continue;
        }
        let domain = Domain {
            zone: node.zone.clone(),
            condition: condition.clone(),
            image: node.image.clone().unwrap_or_else(|| "-".into()),
        };
        let state = out.slow_start.entry(domain.clone()).or_default();
        if state.in_flight >= state.width {
            out.held.push((
                id,
                format!(
                    "slow start: {} of {} repairs in flight in {}/{}/{}",
                    state.in_flight, state.width, domain.zone, domain.condition, domain.image
                ),
            ));
            continue;
        }
        if let Some(at) = state.round_at.filter(|at| now - *at < cooldown)
            && state.in_flight == 0
        {
            out.held.push((
                id,
                format!(
                    "slow start: cooling down until {}",
                    (at + cooldown).to_rfc3339()
                ),
            ));
            continue;
        }
        if room == 0 {
            out.held.push((
                id,
                format!(
                    "{allowed} repair(s) could start this pass, all started (repair.maxParallel, or a budget naming Unhealthy)"
                ),
            ));
            continue;
        }
        room -= 1;
        state.in_flight += 1;
        if state.in_flight >= state.width {
            state.round_at = Some(now);
        }
        out.repairs.push(Repair {
            instance_id: id,
            condition,
            since,
            domain,
        });
    }
    out
}

/// Repairs that may start now in the pool, by Karpenter v1.15's arithmetic: with a budget
/// naming the reason `Unhealthy` in its `reasons`, that reason's allowance, where a node not
/// Ready and not being rotated (`not_ready` of the `disrupting`) does not count as disrupting
/// (it does against the other reasons); with none naming it, `repair.maxParallel` less the
/// repairs in flight (`in_flight`).
pub fn room(
    budgets: &[crate::budget::Budget],
    policy: &RepairPolicy,
    total: u32,
    disrupting: u32,
    not_ready: u32,
    in_flight: u32,
    now: DateTime<Utc>,
) -> u32 {
    if !names_unhealthy(budgets) {
        return policy.max_parallel.saturating_sub(in_flight);
    }
    crate::budget::evaluate(
        budgets,
        crate::budget::Reason::Unhealthy,
        total,
        disrupting.saturating_sub(not_ready),
        now,
    )
    .allowed
}

/// A budget names the reason `Unhealthy`: repairs are budgeted by it, not by
/// `repair.maxParallel`.
pub fn names_unhealthy(budgets: &[crate::budget::Budget]) -> bool {
    budgets.iter().any(|b| {
        b.reasons
            .as_ref()
            .is_some_and(|r| r.contains(&crate::budget::Reason::Unhealthy))
    })
}

/// How one repair of a domain turned out, as a pass observes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The domain it repaired in.
    pub domain: Domain,
    /// When it started.
    pub started: DateTime<Utc>,
    /// Where it stands.
    pub state: OutcomeState,
}

/// Where one repair stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeState {
    /// In flight, or finished with its replacement not healthy for [`SETTLE`] yet: it holds a
    /// place in the domain's width.
    Unsettled,
    /// Its replacement stayed healthy for [`SETTLE`] (at this instant): the width doubles.
    Healthy(DateTime<Utc>),
    /// It failed, or its replacement turned unhealthy (at this instant): the width is 1 again.
    Failed(DateTime<Utc>),
    /// Says nothing (cancelled by an operator, its replacement unknown or gone).
    Neutral,
}

/// Each domain's slow start from the pool's repairs (level-triggered: recomputed every pass
/// from the rotation records, nothing stored apart): width 1, doubled by each healthy
/// settlement and back to 1 by each failed one, in the order they settled; in flight, the
/// unsettled ones; the round started at the latest repair's start.
pub fn slow_start(outcomes: &[Outcome]) -> BTreeMap<Domain, SlowStart> {
    let mut settled: Vec<(&Domain, DateTime<Utc>, bool)> = outcomes
        .iter()
        .filter_map(|o| match o.state {
            OutcomeState::Healthy(at) => Some((&o.domain, at, true)),
            OutcomeState::Failed(at) => Some((&o.domain, at, false)),
            _ => None,
        })
        .collect();
    settled.sort_by_key(|(_, at, _)| *at);
    let mut out: BTreeMap<Domain, SlowStart> = BTreeMap::new();
    for o in outcomes {
        let s = out.entry(o.domain.clone()).or_default();
        s.round_at = s.round_at.max(Some(o.started));
        if o.state == OutcomeState::Unsettled {
            s.in_flight += 1;
        }
    }
    for (domain, _, healthy) in settled {
        if let Some(s) = out.get_mut(domain) {
            s.width = s.grown(healthy);
        }
    }
    out
}

/// Why repairs are suspended, if more than `max_percent` of the pool, or of one zone, is
/// unhealthy now (and more than one node: one node is never an outage).
fn breaker(nodes: &[Node], max_percent: u32) -> Option<String> {
    let over = |bad: usize, all: usize| bad >= 2 && bad * 100 > max_percent as usize * all;
    let bad = |n: &&Node| !failing(n).is_empty();
    let unhealthy = nodes.iter().filter(bad).count();
    if over(unhealthy, nodes.len()) {
        return Some(format!(
            "{unhealthy} of {} nodes of the pool are unhealthy (more than repair.maxUnhealthy {max_percent}%): an outage or a bad signal, not a node; repairing none",
            nodes.len()
        ));
    }
    let mut zones: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for n in nodes {
        let z = zones.entry(n.zone.as_str()).or_default();
        z.1 += 1;
        if bad(&n) {
            z.0 += 1;
        }
    }
    zones.into_iter().find(|(_, (b, a))| over(*b, *a)).map(|(zone, (b, a))| {
        format!(
            "{b} of {a} nodes in zone {zone} are unhealthy (more than repair.maxUnhealthy {max_percent}%): an outage or a bad signal, not a node; repairing none"
        )
    })
}

#[cfg(test)]
mod tests;
