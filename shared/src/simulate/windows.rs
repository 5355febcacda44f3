//! Budget windows over the forecast: the instants where a budget changes (the engine's events)
//! and the stretches where a reason may disrupt no node (the picture's shading).

use chrono::{DateTime, Utc};

use super::Closed;
use crate::budget::{self, Reason};
use crate::plan::Snapshot;

/// Every instant in `(from, to]` at which a budget applying to Drifted or Expired becomes
/// active or inactive, in order.
pub(super) fn budget_changes(
    budgets: &[budget::Budget],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    for reason in [Reason::Drifted, Reason::Expired] {
        out.extend(changes(budgets, reason, from, to));
    }
    out.sort();
    out.dedup();
    out
}

fn changes(
    budgets: &[budget::Budget],
    reason: Reason,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut t = from;
    while let Some(c) = budget::evaluate(budgets, reason, 0, 0, t).next_window_edge {
        if c > to {
            break;
        }
        out.push(c);
        t = c;
    }
    out
}

/// The stretches of `[from, to)` in which Drifted or Expired may disrupt no node of a pool of
/// `total` nodes, merged per reason and limiting budget.
pub(super) fn closed_windows(
    snap: &Snapshot,
    total: u32,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<Closed> {
    let budgets = &snap.policy.budgets;
    let mut out: Vec<Closed> = Vec::new();
    for reason in [Reason::Drifted, Reason::Expired] {
        let mut edges = vec![from];
        edges.extend(changes(budgets, reason, from, to));
        edges.push(to);
        for pair in edges.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a >= b {
                continue;
            }
            let e = budget::evaluate(budgets, reason, total, 0, a);
            if e.allowed > 0 {
                continue;
            }
            match out.last_mut() {
                Some(c) if c.reason == reason && c.to == a && c.budget == e.limited_by => {
                    c.to = b;
                }
                _ => out.push(Closed {
                    from: a,
                    to: b,
                    reason,
                    budget: e.limited_by,
                }),
            }
        }
    }
    out
}
