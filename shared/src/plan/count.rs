//! Count: the budgets' `total` and `disrupting`, the maintenance rotations still waiting for
//! budget, the eligible candidates in start order, and `allowed` per reason (see the module
//! documentation of [`super`] for the rules).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::Snapshot;
use super::classify::Classified;
use super::{
    Allowed, Assessment, Decision, DecisionKind, Drift, Need, assess, describe_need, instant,
    maintenance,
};
use crate::budget;
use crate::fleet::{Lifecycle, Member};
use crate::rotation::{Rotation, Step};

/// A candidate with its ordering key.
pub(super) struct Eligible<'a> {
    pub member: &'a Member,
    pub need: Need,
    pub assessment: Assessment,
    pub evictable_pods: u32,
}

/// What the budgets see this pass.
pub(super) struct Counts<'a> {
    /// Ready members in service.
    pub total: u32,
    /// Distinct disrupted instances.
    pub disrupting: u32,
    /// In-flight maintenance rotations still waiting for budget (not disrupting).
    pub maintenance_waiting: BTreeMap<&'a str, &'a Rotation>,
    /// Eligible candidates, in start order.
    pub pending: Vec<Eligible<'a>>,
    /// Allowance per budgeted reason.
    pub allowed: Allowed,
}

/// Counts the pool (adding a decision for each member that needs replacing but cannot start).
pub(super) fn count<'a>(
    snapshot: &'a Snapshot,
    c: &Classified<'a>,
    now: DateTime<Utc>,
    decisions: &mut Vec<Decision>,
) -> Counts<'a> {
    let policy = &snapshot.policy;
    let desired = snapshot.gates.desired_ami.as_deref();
    let mut total: u32 = 0;
    let mut disrupting: BTreeSet<&str> = c.in_flight.keys().copied().collect();
    // Maintenance rotations waiting for budget are not disrupting yet (see `maintenance`).
    let maintenance_waiting: BTreeMap<&str, &Rotation> = c
        .in_flight
        .iter()
        .filter(|(_, r)| maintenance::waits(r, now))
        .map(|(id, r)| (*id, *r))
        .collect();
    disrupting.retain(|id| !maintenance_waiting.contains_key(id));
    disrupting.extend(c.foreign.iter().copied());
    let mut pending: Vec<Eligible<'_>> = Vec::new();

    for m in &c.members {
        let id = m.instance_id.as_str();
        let busy =
            c.in_flight.contains_key(id) || c.foreign.contains(id) || c.queued.contains_key(id);
        if m.is_ready() {
            total += 1;
        }
        if m.lifecycle != Lifecycle::Pending
            && let Some(n) = &m.node
        {
            let external = n.disrupted.is_some()
                || n.unschedulable
                || n.marks.autoscaler_deleting
                || m.lifecycle == Lifecycle::Leaving;
            let not_ready = !n.ready && !c.replacements.contains(id);
            if external || not_ready {
                disrupting.insert(id);
            }
        }
        if m.lifecycle != Lifecycle::InService || busy {
            continue;
        }
        let a = assess(m, desired, &snapshot.expiration(), now);
        let Some(need) = a.need() else {
            if a.drift == Drift::ImageUnknown && m.is_ready() {
                decisions.push(Decision::instance(
                    DecisionKind::Skip,
                    id,
                    format!("{id} runs an unknown image: drift not checked"),
                ));
            }
            continue;
        };
        let what = describe_need(id, need, &a, policy);
        let skip = match &m.node {
            None => Some((
                DecisionKind::Skip,
                format!("{what}, but it is not registered as a Kubernetes node: not a candidate"),
            )),
            Some(n) if !n.ready => Some((
                DecisionKind::Skip,
                format!(
                    "{what}, but its node is not Ready: counted as disrupting, not a candidate"
                ),
            )),
            Some(n) if n.disrupted.is_some() => Some((
                DecisionKind::Skip,
                format!(
                    "{what}, but another component is disrupting it (taint \
                     nodecycle.dev/disrupted={}): counted as disrupting, not started",
                    n.disrupted.as_deref().unwrap_or_default()
                ),
            )),
            Some(n) if n.marks.autoscaler_deleting => Some((
                DecisionKind::Skip,
                format!(
                    "{what}, but Cluster Autoscaler is removing it (taint \
                     ToBeDeletedByClusterAutoscaler): counted as disrupting, not started"
                ),
            )),
            Some(n) if n.unschedulable => Some((
                DecisionKind::Skip,
                format!(
                    "{what}, but it was cordoned outside nodecycle: counted as disrupting, not \
                     started until uncordoned"
                ),
            )),
            Some(n) if !need.forced && n.opt_out.as_ref().is_some_and(|o| o.holds(now)) => {
                Some((
                    DecisionKind::Skip,
                    format!(
                        "{what}, but {}: not started, and it consumes no budget (forced expiry \
                         still replaces it)",
                        n.opt_out
                            .as_ref()
                            .map(crate::fleet::OptOut::describe)
                            .unwrap_or_default()
                    ),
                ))
            }
            Some(_) => c.finished.get(id).filter(|r| r.step == Step::Done).map(|r| {
                (
                    DecisionKind::Anomaly,
                    format!(
                        "{what}, but its {:?} rotation finished (Done) at {} and it is still in \
                         service: not starting it again (check the executor)",
                        r.reason,
                        instant(r.step_at)
                    ),
                )
            }),
        };
        if let Some((kind, message)) = skip {
            decisions.push(Decision::instance(kind, id, message));
            continue;
        }
        pending.push(Eligible {
            member: m,
            need,
            evictable_pods: m.node.as_ref().map_or(0, |n| n.evictable_pods),
            assessment: a,
        });
    }

    super::StartStrategy::of(policy).order(&mut pending);

    let disrupting = u32::try_from(disrupting.len()).unwrap_or(u32::MAX);
    let allowed_for =
        |reason| budget::evaluate(&policy.budgets, reason, total, disrupting, now).allowed;
    let repairs = crate::repair::room(
        &policy.budgets,
        &policy.repair,
        total,
        disrupting,
        super::repair::not_ready(c),
        super::repair::in_flight(c),
        now,
    );
    Counts {
        total,
        disrupting,
        maintenance_waiting,
        pending,
        allowed: Allowed {
            drifted: allowed_for(budget::Reason::Drifted),
            expired: allowed_for(budget::Reason::Expired),
            unhealthy: repairs,
        },
    }
}
