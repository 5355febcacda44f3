//! Why nodes that need a rotation wait after a pass: the gate, or the budget limiting their
//! reason (`limitedBy` of [`crate::budget::evaluate`] with the rotations in flight after the
//! pass), named so that consecutive minutes with the same cause read the same.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::BlockKind;
use crate::budget::{self, Budget, Reason};
use crate::plan::Snapshot;
use crate::plan::managed_update::UpdateAction;
use crate::plan::{Gate, Plan, maintenance};
use crate::rotation::RotationReason;

/// Rotations of `reason` wait because of `why`; `gate` names the gate of a
/// [`BlockKind::Gate`] wait in a few words (see [`super::Blocked::gate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Wait {
    pub reason: RotationReason,
    pub why: String,
    pub kind: BlockKind,
    pub gate: Option<String>,
}

/// A gate's name as the picture writes it on its band: which gate, and for a pause by whom
/// and why (`paused by alice at 2026-12-01T09:00:00Z: CVE triage`, `paused: policy sets
/// paused: true`), for a halt its message.
pub(super) fn gate_name(gate: &Gate) -> String {
    match gate {
        Gate::Stopped(_) => "deployment stopped".into(),
        Gate::Halted(why) => format!("halted: {why}"),
        Gate::Paused(why) if why.starts_with("by ") => format!("paused {why}"),
        Gate::Paused(why) => format!("paused: {why}"),
        Gate::Untrusted(_) => "snapshot not trusted (duplicate instances)".into(),
        Gate::Unresolved => "desired AMI unresolved".into(),
    }
}

/// What the managed plan decided, beside the node-level plan.
pub(super) struct ManagedView<'a> {
    pub update: &'a UpdateAction,
    pub drifted: u32,
    /// The node group is `ACTIVE`.
    pub active: bool,
    /// Node-level rotations in flight before the pass.
    pub node_level_in_flight: usize,
}

/// What waits after the pass that produced `plan` (already applied: `snap` includes its starts)
/// and started or released `started`. One entry per waiting reason, in reason order.
pub(super) fn waits(
    snap: &Snapshot,
    plan: &Plan,
    started: &BTreeSet<String>,
    managed: Option<ManagedView<'_>>,
    now: DateTime<Utc>,
) -> Vec<Wait> {
    let mut out: BTreeMap<RotationReason, (String, BlockKind, Option<String>)> = BTreeMap::new();
    // The plan's gate, named; else `name`.
    let gate_or = |name: &str| {
        (
            plan.blocked
                .clone()
                .unwrap_or_else(|| "the planner starts nothing".into()),
            BlockKind::Gate,
            Some(
                plan.gate
                    .as_ref()
                    .map_or_else(|| name.to_string(), gate_name),
            ),
        )
    };
    let named = |why: String, name: &str| (why, BlockKind::Gate, Some(name.to_string()));
    let budgets = &snap.policy.budgets;
    let used = plan.disrupting + u32::try_from(started.len()).unwrap_or(u32::MAX);
    let budget_wait = |r: Reason, used: u32| limited(budgets, r, plan.total, used, now);

    // Candidates not started, by reason; queued/maintenance records still waiting.
    let mut candidates: BTreeSet<RotationReason> = plan
        .candidates
        .iter()
        .filter(|c| !started.contains(&c.instance_id))
        .map(|c| c.reason)
        .collect();
    let records: Vec<_> = snap
        .rotations
        .iter()
        .filter(|r| r.waiting() || maintenance::waits(r, now))
        .collect();
    let desired = snap.gates.desired_ami.as_deref();
    let gated = plan.gate.is_some()
        || snap.gates.halted.is_some()
        || snap.gates.paused.is_some()
        || snap.policy.paused
        || desired.is_none();
    if desired.is_none() {
        candidates.insert(RotationReason::Drifted);
    }

    if let Some(m) = &managed {
        let launches = snap.group.launch_template_image.as_deref();
        let launches_other = matches!((desired, launches), (Some(d), Some(l)) if d != l);
        let drift_pending = m.drifted > 0 || launches_other;
        // Drifted nodes are the update's, never node-level candidates.
        candidates.remove(&RotationReason::Drifted);
        let inactive = !m.active && *m.update == UpdateAction::None;
        if gated || inactive {
            let wait = gate_or("node group not ACTIVE");
            if drift_pending || desired.is_none() {
                out.insert(RotationReason::Drifted, wait.clone());
            }
            for r in candidates.iter().chain(records.iter().map(|r| &r.reason)) {
                out.insert(*r, wait.clone());
            }
            return collect(out);
        }
        match m.update {
            UpdateAction::Continue | UpdateAction::Start { .. } => {
                let why = match (m.update, &plan.blocked) {
                    (UpdateAction::Continue, Some(b)) => b.clone(),
                    _ => "the node group update starts: node-level rotations wait".into(),
                };
                for r in candidates.iter().chain(records.iter().map(|r| &r.reason)) {
                    out.insert(*r, named(why.clone(), "node group update in progress"));
                }
                return collect(out);
            }
            UpdateAction::None => {}
        }
        if drift_pending {
            let wait = if m.node_level_in_flight == 0 && plan.allowed.drifted == 0 {
                budget_wait(Reason::Drifted, plan.disrupting)
            } else if plan
                .blocked
                .as_deref()
                .is_some_and(|b| b.contains("window"))
            {
                gate_or("window wait: the node group update waits for a window it fits in")
            } else {
                gate_or("the node group update waits")
            };
            out.insert(RotationReason::Drifted, wait);
        }
        if launches_other {
            let why = format!(
                "the node group launches {}, not the desired {}: node-level rotations wait for its update",
                launches.unwrap_or_default(),
                desired.unwrap_or_default()
            );
            for r in candidates.iter().chain(records.iter().map(|r| &r.reason)) {
                out.insert(*r, named(why.clone(), "waiting for the node group update"));
            }
            return collect(out);
        }
    } else if gated {
        for r in candidates.iter().chain(records.iter().map(|r| &r.reason)) {
            out.insert(*r, gate_or("the planner starts nothing"));
        }
        return collect(out);
    }

    for r in &candidates {
        if let Some(b) = r.budget_reason() {
            out.insert(*r, budget_wait(b, used));
        }
    }
    for r in records {
        let wait = match (&r.queued, r.reason) {
            (Some(q), _) if q.ignore_budgets => named(
                format!(
                    "request {}: at most maxConcurrent {} at once",
                    q.request_id, q.max_concurrent
                ),
                &format!(
                    "request {} maxConcurrent {}",
                    q.request_id, q.max_concurrent
                ),
            ),
            (Some(_), _) => budget_wait(Reason::Drifted, used),
            // Maintenance waits within the smaller of the two allowances.
            (None, _) => {
                let d = budget::evaluate(budgets, Reason::Drifted, plan.total, used, now);
                let e = budget::evaluate(budgets, Reason::Expired, plan.total, used, now);
                budget_wait(
                    if e.allowed < d.allowed {
                        Reason::Expired
                    } else {
                        Reason::Drifted
                    },
                    used,
                )
            }
        };
        out.insert(r.reason, wait);
    }
    collect(out)
}

fn collect(out: BTreeMap<RotationReason, (String, BlockKind, Option<String>)>) -> Vec<Wait> {
    out.into_iter()
        .map(|(reason, (why, kind, gate))| Wait {
            reason,
            why,
            kind,
            gate,
        })
        .collect()
}

/// The budget limiting `reason` with `used` nodes disrupting out of `total`.
fn limited(
    budgets: &[Budget],
    reason: Reason,
    total: u32,
    used: u32,
    now: DateTime<Utc>,
) -> (String, BlockKind, Option<String>) {
    let a = budget::evaluate(budgets, reason, total, used, now);
    match a.limited_by.and_then(|i| budgets.get(i).map(|b| (i, b))) {
        Some((i, b)) => {
            let cap = b.nodes.value(total);
            let kind = if cap == 0 {
                BlockKind::Closed
            } else {
                BlockKind::Full
            };
            (
                format!("{}: {cap} of {total} nodes", describe(i, b)),
                kind,
                None,
            )
        }
        None => (
            format!("no budget applies: all {total} nodes are being disrupted"),
            BlockKind::Full,
            None,
        ),
    }
}

/// `disruption.budgets[2] (nodes "0", schedule "0 9 * * sat-sun", duration 24h, timeZone
/// Asia/Shanghai, reasons [Drifted])`, each part only when set.
pub(super) fn describe(index: usize, b: &Budget) -> String {
    let mut parts = vec![format!("nodes \"{}\"", b.nodes)];
    if let Some(w) = &b.window {
        parts.push(format!("schedule \"{}\"", w.schedule));
        parts.push(format!(
            "duration {}",
            crate::duration::format(w.duration.to_std().unwrap_or_default())
        ));
        if w.time_zone != chrono_tz::Tz::UTC {
            parts.push(format!("timeZone {}", w.time_zone));
        }
    }
    if let Some(rs) = &b.reasons {
        let names: Vec<&str> = rs.iter().map(|r| r.name()).collect();
        parts.push(format!("reasons [{}]", names.join(", ")));
    }
    format!("disruption.budgets[{index}] ({})", parts.join(", "))
}
