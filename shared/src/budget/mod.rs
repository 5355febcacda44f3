//! Disruption budgets: how many more nodes may be disrupted now, which budget limits it, and when
//! the answer next changes. Pure: time is passed in.
//!
//! Semantics (Karpenter's disruption budgets): a budget without schedule is always
//! active; one with `schedule` + `duration` is active for `now` in `[H, H + duration)` for some
//! cron hit H read in the budget's `timeZone` (default UTC). For a reason, the allowance is the
//! minimum `nodes` value over active budgets that apply to it, minus the nodes already
//! disrupting; with no such budget nothing restricts it.

mod parse;
pub mod schedule;
mod window;

#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::{Deserialize, Serialize, Serializer};

pub use parse::{BUDGET_FIELDS, parse_budgets};
pub use schedule::Schedule;
pub use window::Window;

/// How far ahead [`next_change`], [`evaluate`] and [`outlook`] look for the next change.
pub const HORIZON_DAYS: i64 = 366;

/// Why a node is disrupted; budgets may apply to some reasons only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Reason {
    /// The node's image differs from the pool's desired AMI.
    Drifted,
    /// The node is older than `expireAfter`.
    Expired,
    /// The node is unhealthy (repair, as in Karpenter v1.15). Accepted in budgets now; node
    /// repair, which produces it, is not applied yet ([`crate::repair`]). A node not Ready does
    /// not count as disrupting against this reason's budget ([`crate::repair::allowed`]).
    Unhealthy,
    /// Accepted for Karpenter compatibility; never produced by nodecycle.
    Underutilized,
    /// Accepted for Karpenter compatibility; never produced by nodecycle.
    Empty,
}

impl Reason {
    /// Every reason, in the order messages list them.
    pub const ALL: [Reason; 5] = [
        Reason::Drifted,
        Reason::Expired,
        Reason::Unhealthy,
        Reason::Underutilized,
        Reason::Empty,
    ];

    /// The name as written in policies (`Drifted`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Reason::Drifted => "Drifted",
            Reason::Expired => "Expired",
            Reason::Unhealthy => "Unhealthy",
            Reason::Underutilized => "Underutilized",
            Reason::Empty => "Empty",
        }
    }

    /// Whether nodecycle ever disrupts a node for this reason (Drifted, Expired, Unhealthy:
    /// repair). Karpenter's consolidation reasons (Underutilized, Empty) are accepted in
    /// budgets and never apply.
    pub fn applied_by_nodecycle(self) -> bool {
        matches!(self, Reason::Drifted | Reason::Expired | Reason::Unhealthy)
    }

    /// Parses an exact (case-sensitive) reason name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Reason {
    type Err = String;

    /// Like [`Reason::parse`], with a message listing the accepted names on error.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reason::parse(s).ok_or_else(|| {
            format!("unknown reason {s:?}; expected one of Drifted, Expired, Unhealthy, Underutilized, Empty")
        })
    }
}

/// A budget's `nodes`: a count, or a percentage of the pool rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nodes {
    /// At most this many nodes.
    Count(u32),
    /// At most ceil(total x percent / 100) nodes; 0 to 100.
    Percent(u32),
}

impl Nodes {
    /// The number of nodes this allows for a pool of `total` (percent rounds up: 19 x 20% = 4).
    pub fn value(self, total: u32) -> u32 {
        match self {
            Nodes::Count(n) => n,
            Nodes::Percent(p) => {
                let scaled = u64::from(total) * u64::from(p);
                u32::try_from(scaled.div_ceil(100)).unwrap_or(u32::MAX)
            }
        }
    }
}

impl fmt::Display for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Nodes::Count(n) => write!(f, "{n}"),
            Nodes::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A validated budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// How many nodes may be disrupting at once while the budget is active.
    pub nodes: Nodes,
    /// When the budget is active; `None` = always.
    pub window: Option<Window>,
    /// Reasons this budget applies to; `None` = every reason. Never an empty list.
    pub reasons: Option<Vec<Reason>>,
}

impl Budget {
    /// The budget used when `budgets` is absent: `nodes: 10%`, always, every reason.
    pub fn default_budget() -> Budget {
        Budget {
            nodes: Nodes::Percent(10),
            window: None,
            reasons: None,
        }
    }

    /// True when the budget restricts `reason` (when active).
    pub fn applies_to(&self, reason: Reason) -> bool {
        self.reasons.as_ref().is_none_or(|rs| rs.contains(&reason))
    }
}

/// True when `budget` is active at `now`: always without a schedule, else when `now` is in
/// `[H, H + duration)` for a hit H of the schedule read in the budget's time zone.
pub fn is_active(budget: &Budget, now: DateTime<Utc>) -> bool {
    budget.window.as_ref().is_none_or(|w| w.is_active(now))
}

/// The first instant after `now` at which `budget` becomes active or inactive, if within
/// [`HORIZON_DAYS`] days; always `None` for a budget without schedule.
pub fn next_change(budget: &Budget, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let horizon = now + TimeDelta::days(HORIZON_DAYS);
    budget
        .window
        .as_ref()
        .and_then(|w| w.next_change(now, horizon))
}

/// A stretch of time in which a reason may disrupt at least one node of an undisturbed pool.
/// A span that starts before the end of the period asked about is followed to its end, even
/// past the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// When it opens (or the `from` it was asked from, if already open then).
    pub start: DateTime<Utc>,
    /// When it closes; `None` = never (no budget change ahead closes it).
    pub end: Option<DateTime<Utc>>,
}

impl Span {
    /// Its length; `None` = unbounded.
    pub fn length(&self) -> Option<TimeDelta> {
        self.end.map(|e| e - self.start)
    }
}

/// The spans in `[from, until]` during which `reason` allows at least one disruption in a pool
/// of `total` nodes with nothing disrupted (the budgets' cap is above 0), in order. Walks the
/// budgets' changes (at most 512), so cost grows with the number of window edges in the period.
pub fn open_spans(
    budgets: &[Budget],
    reason: Reason,
    total: u32,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut open: Option<DateTime<Utc>> = None;
    let mut t = from;
    for _ in 0..512 {
        let a = evaluate(budgets, reason, total, 0, t);
        match (a.allowed > 0, open) {
            (true, None) => open = Some(t),
            (false, Some(start)) => {
                spans.push(Span {
                    start,
                    end: Some(t),
                });
                open = None;
            }
            _ => {}
        }
        match a.next_window_edge {
            // Past `until`, follow an open span to its end only.
            Some(next) if next <= until || open.is_some() => t = next,
            _ => break,
        }
    }
    if let Some(start) = open {
        spans.push(Span { start, end: None });
    }
    spans
}

/// The allowance for one reason. Serializes as
/// `{"reason","total","disrupting","allowed","limitedBy","nextWindowEdge"}` with `limitedBy`
/// the budget's field path (`"disruption.budgets[1]"`) or null, `nextWindowEdge` in RFC 3339
/// UTC, seconds precision, `Z` suffix (or null). When `allowed` itself changes next is
/// [`Outlook::next_change`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Allowance {
    /// The reason asked about.
    pub reason: Reason,
    /// Nodes in the pool (registered and ready).
    pub total: u32,
    /// Nodes currently being disrupted, for any reason.
    pub disrupting: u32,
    /// How many more nodes may start being disrupted now.
    pub allowed: u32,
    /// Index (document order) of the active budget giving the minimum, lowest index on ties;
    /// `None` when no active budget applies to the reason. Serialized as its field path,
    /// `"disruption.budgets[i]"` (as `status` and `validate` name a budget), or null.
    #[serde(serialize_with = "serialize_budget_path")]
    pub limited_by: Option<usize>,
    /// Next instant at which a budget applying to the reason becomes active or inactive (a
    /// window edge), if within [`HORIZON_DAYS`] days; `allowed` may stay the same there.
    #[serde(serialize_with = "serialize_instant")]
    pub next_window_edge: Option<DateTime<Utc>>,
}

/// Most window edges [`outlook`] evaluates looking for a change of `allowed`.
pub const OUTLOOK_MAX_EDGES: usize = 512;

/// An [`Allowance`] and when its `allowed` changes next: what `nodecycle budget` and the ops
/// `status` show. Serializes as the allowance's fields and `nextChange` (RFC 3339 UTC, or null).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outlook {
    /// The allowance now.
    #[serde(flatten)]
    pub allowance: Allowance,
    /// The first window edge after `now` at which `allowed` differs from now's, the pool's
    /// counts (`total`, `disrupting`) unchanged; `None` when none comes within
    /// [`HORIZON_DAYS`] days of `now` or within [`OUTLOOK_MAX_EDGES`] edges.
    #[serde(serialize_with = "serialize_instant")]
    pub next_change: Option<DateTime<Utc>>,
}

/// [`evaluate`] at `now`, and when `allowed` changes next ([`Outlook::next_change`]): walks the
/// window edges from `now`, skipping those where `allowed` stays the same (a window opening
/// beside a smaller always-active budget, one window closing as another opens with the same
/// value).
pub fn outlook(
    budgets: &[Budget],
    reason: Reason,
    total: u32,
    disrupting: u32,
    now: DateTime<Utc>,
) -> Outlook {
    let allowance = evaluate(budgets, reason, total, disrupting, now);
    let horizon = now + TimeDelta::days(HORIZON_DAYS);
    let mut edge = allowance.next_window_edge;
    let mut next_change = None;
    for _ in 0..OUTLOOK_MAX_EDGES {
        let Some(t) = edge.filter(|t| *t <= horizon) else {
            break;
        };
        let later = evaluate(budgets, reason, total, disrupting, t);
        if later.allowed != allowance.allowed {
            next_change = Some(t);
            break;
        }
        edge = later.next_window_edge;
    }
    Outlook {
        allowance,
        next_change,
    }
}

/// The field path of budget `i` of a policy: `disruption.budgets[i]`.
pub fn budget_path(i: usize) -> String {
    format!("disruption.budgets[{i}]")
}

fn serialize_budget_path<S: Serializer>(i: &Option<usize>, s: S) -> Result<S::Ok, S::Error> {
    match i {
        Some(i) => s.serialize_str(&budget_path(*i)),
        None => s.serialize_none(),
    }
}

fn serialize_instant<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Secs, true)),
        None => s.serialize_none(),
    }
}

/// How many more nodes may be disrupted for `reason` at `now`, given `total` nodes of which
/// `disrupting` are already being disrupted.
///
/// `allowed = max(0, m - disrupting)` where `m` is the minimum `nodes` value (computed against
/// `total`) over the budgets that apply to `reason` and are active at `now`; with no such
/// budget, `m = total`. `limited_by` is the index of the budget giving `m` (lowest on ties).
/// `next_window_edge` is the earliest instant after `now` (within [`HORIZON_DAYS`] days) at
/// which a budget applying to `reason` becomes active or inactive ([`outlook`]: when `allowed`
/// changes).
pub fn evaluate(
    budgets: &[Budget],
    reason: Reason,
    total: u32,
    disrupting: u32,
    now: DateTime<Utc>,
) -> Allowance {
    let horizon = now + TimeDelta::days(HORIZON_DAYS);
    let mut limit: Option<(u32, usize)> = None;
    let mut change: Option<DateTime<Utc>> = None;
    for (i, budget) in budgets.iter().enumerate() {
        if !budget.applies_to(reason) {
            continue;
        }
        if let Some(window) = &budget.window {
            if let Some(c) = window.next_change(now, horizon) {
                change = Some(change.map_or(c, |old| old.min(c)));
            }
            if !window.is_active(now) {
                continue;
            }
        }
        let value = budget.nodes.value(total);
        if limit.is_none_or(|(min, _)| value < min) {
            limit = Some((value, i));
        }
    }
    let cap = limit.map_or(total, |(v, _)| v);
    Allowance {
        reason,
        total,
        disrupting,
        allowed: cap.saturating_sub(disrupting),
        limited_by: limit.map(|(_, i)| i),
        next_window_edge: change,
    }
}
