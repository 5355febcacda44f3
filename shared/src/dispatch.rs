//! Fan-out of a rotator pass on AWS services: the scheduled invocation (the dispatcher) puts one
//! [`WorkItem`] per (account, region, cluster) on a queue, and each item is served by its own
//! worker invocation (the queue's Lambda event source, with a bounded maximum concurrency); the
//! per-cluster lease still guarantees one pass at a time per cluster.
//!
//! Pure core: [`work_items`] turns the pools' places and `now` into the items with their reasons,
//! [`WorkItem::parse`] reads an item back from a queue message (bounded, every field checked),
//! [`admit`] decides whether a received item is served, superseded or refused, and [`verdict`]
//! whether a served item is done or must be retried (and, after the queue's receive limit, is
//! dead-lettered). The queue is one narrow port ([`WorkQueue`]); [`MemoryQueue`] is its
//! in-memory fake and `aws::queue` its SQS adapter.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::served::Served;
use crate::port::PortError;
use crate::problem::quote;

/// Largest queue message body [`WorkItem::parse`] reads (an item is about 150 bytes).
pub const MAX_BODY: usize = 4096;
/// Pool names a [`WorkItem`]'s reason lists before it says "and N more".
const REASON_POOLS: usize = 5;
/// Version of the item format ([`WorkItem::version`]).
pub const VERSION: u32 = 1;

/// The cell: the account and region of this deployment, the place of every pool that names
/// neither.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// 12-digit account id.
    pub account: String,
    /// Region name.
    pub region: String,
}

/// Where one pool lives: its account and region (`None` = the cell's) and cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolPlace {
    /// Account of the pool's cluster; `None` = the cell's own.
    pub account: Option<String>,
    /// Region of the pool's cluster; `None` = the cell's own.
    pub region: Option<String>,
    /// EKS cluster name.
    pub cluster: String,
    /// The pool's identity (for the item's reason).
    pub pool: String,
}

/// One unit of a fanned-out pass: one rotator pass over the pools of one cluster of one account
/// and region. An item carries no pool state: the worker observes everything afresh (an item
/// served late or twice does what a pass at that time would do, no more).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkItem {
    /// Format version ([`VERSION`]).
    #[serde(rename = "v")]
    pub version: u32,
    /// 12-digit account id of the cluster.
    pub account: String,
    /// Region of the cluster.
    pub region: String,
    /// EKS cluster name.
    pub cluster: String,
    /// When the dispatcher made the item (the pass it belongs to).
    pub dispatched_at: DateTime<Utc>,
    /// Why the item exists (which pools it covers), for the logs.
    pub reason: String,
}

impl WorkItem {
    /// `<account>/<region>/<cluster>`: the item's place, unique within a pass.
    pub fn place(&self) -> String {
        format!("{}/{}/{}", self.account, self.region, self.cluster)
    }

    /// The queue message body (JSON).
    pub fn body(&self) -> String {
        // A struct of strings and a timestamp always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an item from a queue message body: at most [`MAX_BODY`] bytes, the fields of
    /// this version and no other, each checked. `Err` names the field, the value (shortened)
    /// and what was expected.
    pub fn parse(body: &str) -> Result<WorkItem, String> {
        if body.len() > MAX_BODY {
            return Err(format!(
                "(body): {} bytes; expected a work item of at most {MAX_BODY} bytes",
                body.len()
            ));
        }
        let value: Value = serde_json::from_str(body)
            .map_err(|e| format!("(body): not JSON ({e}); expected a work item"))?;
        let version = value.get("v").cloned().unwrap_or(Value::Null);
        if version != VERSION {
            return Err(format!(
                "v: {}; expected {VERSION} (an item of another nodecycle version)",
                quote(&version.to_string())
            ));
        }
        let item: WorkItem = serde_json::from_value(value)
            .map_err(|e| format!("(body): {e}; expected a work item"))?;
        let fields: [FieldCheck<'_>; 3] = [
            (
                "account",
                &item.account,
                is_account,
                "a 12-digit account id",
            ),
            (
                "region",
                &item.region,
                is_region,
                "a region name like us-east-1",
            ),
            (
                "cluster",
                &item.cluster,
                is_cluster,
                "an EKS cluster name (1 to 100 letters, digits, - and _)",
            ),
        ];
        for (field, v, valid, expected) in fields {
            if !valid(v) {
                return Err(format!("{field}: {}; expected {expected}", quote(v)));
            }
        }
        if item.reason.len() > 1024 {
            return Err("reason: longer than 1024 bytes".into());
        }
        Ok(item)
    }
}

/// A work item field to check: name, value, the check, and what it expects.
type FieldCheck<'a> = (&'a str, &'a str, fn(&str) -> bool, &'a str);

/// `v` is one 12-digit account id (the served set's own check of configured accounts).
fn is_account(v: &str) -> bool {
    v.trim() == v
        && !v.contains(',')
        && Served::default()
            .with_extra(v, "")
            .is_ok_and(|s| s.accounts.len() == 1)
}

/// `v` is one region name (the served set's own check of configured regions).
fn is_region(v: &str) -> bool {
    v.len() <= 32
        && v.trim() == v
        && !v.contains(',')
        && Served::default()
            .with_extra("", v)
            .is_ok_and(|s| s.regions.len() == 1)
}

/// An EKS cluster name: 1 to 100 characters, a letter or digit first, then letters, digits,
/// `-` and `_` (what EKS accepts).
fn is_cluster(v: &str) -> bool {
    let mut bytes = v.bytes();
    v.len() <= 100
        && bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The items of a pass at `now`: one per (account, region, cluster) that at least one pool
/// names, in that order, each saying which pools it covers. A pool naming no account or region
/// is the cell's. Deterministic: the same places give the same items.
pub fn work_items(places: &[PoolPlace], cell: &Cell, now: DateTime<Utc>) -> Vec<WorkItem> {
    let mut by_place: BTreeMap<(String, String, String), Vec<&str>> = BTreeMap::new();
    for p in places {
        let account = p.account.clone().unwrap_or_else(|| cell.account.clone());
        let region = p.region.clone().unwrap_or_else(|| cell.region.clone());
        by_place
            .entry((account, region, p.cluster.clone()))
            .or_default()
            .push(&p.pool);
    }
    by_place
        .into_iter()
        .map(|((account, region, cluster), mut pools)| {
            pools.sort_unstable();
            pools.dedup();
            let listed = pools
                .iter()
                .take(REASON_POOLS)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            let more = pools.len().saturating_sub(REASON_POOLS);
            let reason = format!(
                "{} pool{} of cluster {cluster}: {listed}{}",
                pools.len(),
                if pools.len() == 1 { "" } else { "s" },
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            );
            WorkItem {
                version: VERSION,
                account,
                region,
                cluster,
                dispatched_at: now,
                reason,
            }
        })
        .collect()
}

/// The cell of a served set: its first account and first region (the deployment's own come
/// first: [`crate::aws::identity::OwnAccount`] lists them before the configured extra ones).
pub fn cell_of(served: &Served) -> Option<Cell> {
    Some(Cell {
        account: served.accounts.first()?.clone(),
        region: served.regions.first()?.clone(),
    })
}

/// The rotator's input for `item`: `{"clusters": [<cluster>]}` for a cluster of the cell's own
/// account and region; for another account or region the item's `account` and `region` too,
/// which a rotator without per-account ports refuses as an unknown field (the item then fails
/// loudly and is dead-lettered instead of being served with the cell's own credentials).
pub fn selection(item: &WorkItem, cell: &Cell) -> Value {
    if item.account == cell.account && item.region == cell.region {
        serde_json::json!({"clusters": [item.cluster]})
    } else {
        serde_json::json!({"clusters": [item.cluster], "account": item.account, "region": item.region})
    }
}

/// What a worker does with a received item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Run the cluster's pass.
    Serve,
    /// Drop it as done: a newer pass has its own item for this cluster.
    Superseded(String),
    /// Fail it (it is retried, then dead-lettered): the cell does not serve its account or
    /// region, or it cannot be read.
    Refuse(String),
}

/// Whether a received item is served: refused when `served` does not list its account and
/// region; superseded when it is older than `max_age` on its first receive (the queue fell
/// behind: the next pass's item covers the cluster, and serving both only repeats work). A
/// redelivered item (`receive_count` > 1) is served whatever its age, so an item that keeps
/// failing reaches the dead-letter queue instead of being dropped as stale.
pub fn admit(
    item: &WorkItem,
    receive_count: u32,
    served: &Served,
    max_age: Duration,
    now: DateTime<Utc>,
) -> Admission {
    if let Err(why) = served.check(Some(&item.account), Some(&item.region)) {
        return Admission::Refuse(format!("work item {}: {why}", item.place()));
    }
    let age = now.signed_duration_since(item.dispatched_at);
    let max = chrono::Duration::from_std(max_age).unwrap_or(chrono::Duration::MAX);
    if receive_count <= 1 && age > max {
        return Admission::Superseded(format!(
            "work item {} dispatched {}s ago (more than {}s): the next pass's item covers the cluster",
            item.place(),
            age.num_seconds(),
            max.num_seconds()
        ));
    }
    Admission::Serve
}

/// The outcome of serving an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Delete the message (why, for the log).
    Done(String),
    /// Leave the message: the queue delivers it again after its visibility timeout, and moves
    /// it to the dead-letter queue after its receive limit.
    Retry(String),
}

/// Whether the pass run for `item` is done. `pass` is the rotator's answer: `Err` (it could not
/// run: policies or quarantine unreadable) is retried; so is a cluster whose pass failed (its
/// status starts with `failed`) or whose lease could not be taken or read. A lease another
/// invocation holds is done (that pass is serving the cluster); so is a cluster no policy
/// names any more (nothing to do). Pool-level errors are the pools' reports (status, metrics,
/// alarms), not a reason to repeat the whole cluster.
pub fn verdict(item: &WorkItem, pass: Result<&Value, &str>) -> Verdict {
    let place = item.place();
    let answer = match pass {
        Err(e) => return Verdict::Retry(format!("pass for {place} failed: {e}")),
        Ok(answer) => answer,
    };
    match answer
        .get("clusters")
        .and_then(|c| c.get(&item.cluster))
        .and_then(Value::as_str)
    {
        None => Verdict::Done(format!(
            "no pool of cluster {} any more; nothing to do",
            item.cluster
        )),
        Some("done") => Verdict::Done(format!("pass for {place} done")),
        Some(s) if s.starts_with("lease held by") => {
            Verdict::Done(format!("{place}: {s}; that pass serves the cluster"))
        }
        Some(s) => Verdict::Retry(format!("pass for {place}: {}", crate::problem::shorten(s))),
    }
}

/// The work queue: the dispatcher's one capability.
#[async_trait]
pub trait WorkQueue: Send + Sync {
    /// Puts every item on the queue. `Err` names the items that were not accepted (those
    /// before them may have been: a repeated send only repeats an idempotent pass).
    async fn send(&self, items: &[WorkItem]) -> Result<(), PortError>;
}

/// An in-memory queue (tests, `nodecycle run`): keeps what was sent, in order.
#[derive(Debug, Default)]
pub struct MemoryQueue {
    sent: Mutex<Vec<WorkItem>>,
    refuse: Vec<String>,
}

impl MemoryQueue {
    /// A queue that refuses the items of these places (`<account>/<region>/<cluster>`).
    pub fn refusing(places: &[&str]) -> Self {
        MemoryQueue {
            sent: Mutex::default(),
            refuse: places.iter().map(|p| p.to_string()).collect(),
        }
    }

    /// Items sent so far, taken out of the queue.
    pub fn take(&self) -> Vec<WorkItem> {
        std::mem::take(&mut *self.sent.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[async_trait]
impl WorkQueue for MemoryQueue {
    async fn send(&self, items: &[WorkItem]) -> Result<(), PortError> {
        let mut refused = Vec::new();
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        for item in items {
            if self.refuse.contains(&item.place()) {
                refused.push(item.place());
            } else {
                sent.push(item.clone());
            }
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(PortError::other(
                "sqs:SendMessageBatch",
                format!("not accepted: {}", refused.join(", ")),
            ))
        }
    }
}

#[cfg(test)]
mod tests;
