//! Rollout status (pure): how far a pool's nodes are on its desired release, in the shape a
//! delivery pipeline gates on (the counts and conditions Karpenter's RFC for node rollout status
//! proposes: `nodes`, `upToDate`, `ready`, `upToDateAndReady`, `NodesUpToDate`), computed every
//! pass from what the pass observed ([`observe`]) and judged for `nodecycle wait` ([`judge`]).
//!
//! The rotator records each pool's status in its pool record and publishes it, when it changed,
//! as the SSM parameter [`parameter_name`] (a pipeline reads it with `ssm:GetParameter` only);
//! each condition that changes is announced (*Rollout Condition Changed*,
//! [`crate::announce::stage`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::fleet::{Gates, Lifecycle, Member};

/// Where the rotator publishes each pool's status: `<STATUS_PATH>/<cluster>/<pool name>`.
pub const STATUS_PATH: &str = "/nodecycle/status";

/// At most this many images are listed in [`Rollout::images`] (those with the most nodes):
/// the published document stays well within a Standard SSM parameter's 4 KB.
pub const IMAGES_LIMIT: usize = 6;

/// Condition messages are cut to this many characters.
pub const MESSAGE_LIMIT: usize = 300;

/// The SSM parameter holding `pool`'s status (`<cluster>/<name>`).
pub fn parameter_name(pool: &str) -> String {
    format!("{STATUS_PATH}/{pool}")
}

/// The SSM parameter path holding the status of every pool of `cluster`.
pub fn cluster_path(cluster: &str) -> String {
    format!("{STATUS_PATH}/{cluster}")
}

/// Node counts of a pool. Nodes are the group's instances launching or in service (leaving
/// ones are not counted); `desiredCapacity` is the group's desired capacity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// The group's desired capacity.
    pub desired_capacity: u32,
    /// Instances launching or in service.
    pub nodes: u32,
    /// Of those, running the desired AMI.
    pub up_to_date: u32,
    /// Of those, in service with a Ready node.
    pub ready: u32,
    /// Both.
    pub up_to_date_and_ready: u32,
}

/// The conditions, in the order they are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConditionType {
    /// Every node runs the desired AMI and is Ready, and the group has all it wants.
    NodesUpToDate,
    /// Nodes are being (or will be, once a window or budget allows) moved to the desired AMI.
    Progressing,
    /// A failure halted the pool: nothing starts until an operator resumes it.
    Halted,
    /// An operator paused the pool, or the deployment's stop switch is on.
    Paused,
}

/// A condition's status, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// Holds.
    True,
    /// Does not hold.
    False,
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// One condition: its status, why (a CamelCase reason and a message) and since when its status
/// holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Which.
    #[serde(rename = "type")]
    pub kind: ConditionType,
    /// `True` or `False`.
    pub status: ConditionStatus,
    /// Why, in one CamelCase word.
    pub reason: String,
    /// Why, for people (at most [`MESSAGE_LIMIT`] characters).
    pub message: String,
    /// When `status` last changed (a reason or message change keeps it).
    pub since: DateTime<Utc>,
}

/// The release a pool's nodes should run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    /// `ami-...`.
    pub ami: String,
    /// The image name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The EKS release version (`v20240807`), when the image is an alias's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
}

impl Release {
    /// Whether `wanted` names this release: its image id, its image name, its release version,
    /// or an alias pinned to it (`al2023@v20240807`).
    pub fn is(&self, wanted: &str) -> bool {
        let version = wanted.rsplit_once('@').map_or(wanted, |(_, v)| v);
        wanted == self.ami
            || self.name.as_deref() == Some(wanted)
            || self
                .release
                .as_deref()
                .is_some_and(|r| r == wanted || r == version)
    }
}

/// How many nodes run one image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageCount {
    /// `ami-...`, or `unknown`.
    pub ami: String,
    /// Nodes on it.
    pub nodes: u32,
}

/// A release the pool left because it was quarantined (its latest rollback, while the pool's
/// desired release has not moved since).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// The quarantined release (release version, else image id).
    pub release: String,
    /// Why it was quarantined.
    pub reason: String,
    /// When the pool rolled back.
    pub at: DateTime<Utc>,
}

/// A pool's rollout status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// The release the nodes should run; `None` while unresolved.
    pub desired: Option<Release>,
    /// The counts.
    #[serde(flatten)]
    pub counts: Counts,
    /// Nodes per image, most first (at most [`IMAGES_LIMIT`]).
    pub images: Vec<ImageCount>,
    /// `NodesUpToDate`, `Progressing`, `Halted`, `Paused`, in that order.
    pub conditions: Vec<Condition>,
    /// The release the pool last rolled back from, if it has not moved since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<Rejected>,
}

impl Rollout {
    /// The condition of `kind`.
    pub fn condition(&self, kind: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    /// Whether the condition of `kind` is `True`.
    pub fn holds(&self, kind: ConditionType) -> bool {
        self.condition(kind)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }

    /// The conditions of `self` whose status differs from `before`'s (all of them when there
    /// was none before, but then only those that hold: a pool's first status announces what
    /// is true of it, not every negative).
    pub fn changed_since<'a>(&'a self, before: Option<&Rollout>) -> Vec<&'a Condition> {
        self.conditions
            .iter()
            .filter(|c| match before.and_then(|b| b.condition(c.kind)) {
                Some(old) => old.status != c.status,
                None => before.is_some() || c.status == ConditionStatus::True,
            })
            .collect()
    }
}

/// What a pass observed of a pool, for [`observe`].
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// `<cluster>/<name>`.
    pub pool: &'a str,
    /// The release the nodes should run.
    pub desired: Option<&'a Release>,
    /// The group's desired capacity.
    pub group_desired: i32,
    /// The group's instances, joined with their nodes.
    pub members: &'a [Member],
    /// Pause, halt, stop switch.
    pub gates: &'a Gates,
    /// Rotations in flight.
    pub in_flight: usize,
    /// Why nothing more starts this pass, if something holds it (the plan's `blocked`).
    pub blocked: Option<&'a str>,
    /// The release the pool last rolled back from.
    pub rejected: Option<&'a Rejected>,
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The counts and images of `facts`.
fn count(facts: &Facts<'_>) -> (Counts, Vec<ImageCount>) {
    let desired = facts.desired.map(|d| d.ami.as_str());
    let nodes: Vec<&Member> = facts
        .members
        .iter()
        .filter(|m| matches!(m.lifecycle, Lifecycle::Pending | Lifecycle::InService))
        .collect();
    let current = |m: &&&Member| desired.is_some() && m.image_id.as_deref() == desired;
    let counts = Counts {
        desired_capacity: u32::try_from(facts.group_desired.max(0)).unwrap_or(0),
        nodes: to_u32(nodes.len()),
        up_to_date: to_u32(nodes.iter().filter(current).count()),
        ready: to_u32(nodes.iter().filter(|m| m.is_ready()).count()),
        up_to_date_and_ready: to_u32(
            nodes
                .iter()
                .filter(current)
                .filter(|m| m.is_ready())
                .count(),
        ),
    };
    let mut per: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
    for m in &nodes {
        *per.entry(m.image_id.as_deref().unwrap_or("unknown"))
            .or_default() += 1;
    }
    let mut images: Vec<ImageCount> = per
        .into_iter()
        .map(|(ami, nodes)| ImageCount {
            ami: ami.to_string(),
            nodes,
        })
        .collect();
    images.sort_by(|a, b| b.nodes.cmp(&a.nodes).then_with(|| a.ami.cmp(&b.ami)));
    images.truncate(IMAGES_LIMIT);
    (counts, images)
}

/// Whether every node counted is on the desired release and Ready, and the group has all the
/// nodes it wants.
fn up_to_date(c: &Counts, desired: Option<&Release>) -> bool {
    desired.is_some()
        && c.up_to_date_and_ready == c.nodes
        && c.up_to_date_and_ready >= c.desired_capacity
}

/// The pool's status from what a pass observed, at `now`. A condition whose status is the same
/// as in `previous` keeps its `since`.
pub fn observe(facts: &Facts<'_>, previous: Option<&Rollout>, now: DateTime<Utc>) -> Rollout {
    let (counts, images) = count(facts);
    let desired = facts.desired;
    let name = desired.map_or_else(String::new, |d| match &d.name {
        Some(n) => format!("{} ({n})", d.ami),
        None => d.ami.clone(),
    });
    let done = up_to_date(&counts, desired);
    let progress = format!(
        "{} of {} nodes run {name}, {} of them Ready; the group wants {}",
        counts.up_to_date, counts.nodes, counts.up_to_date_and_ready, counts.desired_capacity
    );
    let nodes_up_to_date = match desired {
        None => (
            false,
            "DesiredUnresolved",
            "the desired AMI is not resolved yet".to_string(),
        ),
        Some(_) if done => (
            true,
            "AllNodesUpToDate",
            format!("all {} nodes run {name} and are Ready", counts.nodes),
        ),
        Some(_) => (false, "NodesOutOfDate", progress.clone()),
    };
    let halted = facts.gates.halted.as_deref();
    let paused = facts
        .gates
        .stopped
        .as_deref()
        .map(|m| ("Stopped", m))
        .or(facts.gates.paused.as_deref().map(|m| ("Paused", m)));
    let progressing = if done {
        (
            false,
            "Complete",
            format!("the rollout of {name} is complete"),
        )
    } else if let Some(why) = halted {
        (false, "Halted", why.to_string())
    } else if let Some((reason, why)) = paused {
        (false, reason, why.to_string())
    } else if desired.is_none() {
        (false, "DesiredUnresolved", nodes_up_to_date.2.clone())
    } else if facts.in_flight > 0 {
        (
            true,
            "Rotating",
            format!("{} rotation(s) in flight; {progress}", facts.in_flight),
        )
    } else {
        let why = facts
            .blocked
            .map_or_else(|| "rotations start next pass".to_string(), str::to_string);
        (true, "Waiting", format!("{progress}; {why}"))
    };
    let halted = match halted {
        Some(why) => (true, "Halted", why.to_string()),
        None => (false, "NotHalted", String::new()),
    };
    let paused = match paused {
        Some((reason, why)) => (true, reason, why.to_string()),
        None => (false, "NotPaused", String::new()),
    };
    let conditions = [
        (ConditionType::NodesUpToDate, nodes_up_to_date),
        (ConditionType::Progressing, progressing),
        (ConditionType::Halted, halted),
        (ConditionType::Paused, paused),
    ]
    .into_iter()
    .map(|(kind, (holds, reason, message))| {
        let status = ConditionStatus::from(holds);
        let since = previous
            .and_then(|p| p.condition(kind))
            .filter(|c| c.status == status)
            .map_or(now, |c| c.since);
        Condition {
            kind,
            status,
            reason: reason.to_string(),
            message: crate::problem::clip(&message, MESSAGE_LIMIT),
            since,
        }
    })
    .collect();
    Rollout {
        pool: facts.pool.to_string(),
        desired: desired.cloned(),
        counts,
        images,
        conditions,
        rejected: facts.rejected.cloned(),
    }
}

/// How many nodes must be up to date and Ready for `nodecycle wait` (`--min-ready`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinReady {
    /// All of them: `NodesUpToDate`.
    All,
    /// This share (1 to 100) of the larger of the nodes and the group's desired capacity.
    Percent(u32),
    /// At least this many.
    Count(u32),
}

impl std::str::FromStr for MinReady {
    type Err = String;

    /// `90%` or `5`; `100%` is [`MinReady::All`].
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            match p.trim().parse::<u32>() {
                Ok(100) => Ok(MinReady::All),
                Ok(p) if (1..100).contains(&p) => Ok(MinReady::Percent(p)),
                _ => Err(format!(
                    "min-ready {s:?}: expected a percentage from 1% to 100%, or a node count"
                )),
            }
        } else {
            s.parse::<u32>().map(MinReady::Count).map_err(|_| {
                format!("min-ready {s:?}: expected a percentage (90%) or a node count (5)")
            })
        }
    }
}

/// What `nodecycle wait` waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    /// The release the pool must be on (image id, name, release version or pinned alias);
    /// `None`: whatever it should run now.
    pub release: Option<String>,
    /// How many nodes.
    pub min_ready: MinReady,
}

/// What a status says to a waiting pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Reached (exit 0).
    Reached(String),
    /// Not yet (keep waiting).
    Waiting(String),
    /// Will not be reached without a person: the pool halted, or the release was quarantined
    /// (exit 1).
    Failed(String),
}

impl Verdict {
    /// `reached`, `waiting` or `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Reached(_) => "reached",
            Verdict::Waiting(_) => "waiting",
            Verdict::Failed(_) => "failed",
        }
    }

    /// Why.
    pub fn message(&self) -> &str {
        match self {
            Verdict::Reached(m) | Verdict::Waiting(m) | Verdict::Failed(m) => m,
        }
    }
}

/// The verdict on several pools: failed when one failed, else waiting when one waits (or there
/// is none: nothing to wait on is not a rollout reached), else reached.
pub fn overall(verdicts: &[Verdict]) -> &'static str {
    if verdicts.iter().any(|v| matches!(v, Verdict::Failed(_))) {
        "failed"
    } else if verdicts.is_empty() || verdicts.iter().any(|v| matches!(v, Verdict::Waiting(_))) {
        "waiting"
    } else {
        "reached"
    }
}

/// The verdict on a pool whose status may not be published yet.
pub fn judge_published(pool: &str, status: Option<&Rollout>, want: &Want) -> Verdict {
    match status {
        Some(s) => judge(s, want),
        None => Verdict::Waiting(format!(
            "{pool}: no rollout status published yet (the rotator publishes it on its first pass over the pool)"
        )),
    }
}

/// Judges `status` against `want`.
pub fn judge(status: &Rollout, want: &Want) -> Verdict {
    let pool = &status.pool;
    if let (Some(r), Some(w)) = (&status.rejected, &want.release) {
        let left = Release {
            ami: r.release.clone(),
            name: None,
            release: Some(r.release.clone()),
        };
        if left.is(w) {
            return Verdict::Failed(format!(
                "{pool}: release {} was quarantined ({}) and the pool rolled back at {}",
                r.release,
                r.reason,
                r.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ));
        }
    }
    if let Some(h) = status
        .condition(ConditionType::Halted)
        .filter(|c| c.status == ConditionStatus::True)
    {
        return Verdict::Failed(format!(
            "{pool}: halted since {}: {}",
            h.since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            h.message
        ));
    }
    let c = &status.counts;
    let Some(desired) = &status.desired else {
        return Verdict::Waiting(format!("{pool}: the desired AMI is not resolved yet"));
    };
    if let Some(w) = want.release.as_deref().filter(|w| !desired.is(w)) {
        return Verdict::Waiting(format!(
            "{pool}: it should run {}, not {w} (yet)",
            desired.release.as_deref().unwrap_or(&desired.ami)
        ));
    }
    let enough = match want.min_ready {
        MinReady::All => status.holds(ConditionType::NodesUpToDate),
        MinReady::Percent(p) => {
            u64::from(c.up_to_date_and_ready) * 100
                >= u64::from(p) * u64::from(c.nodes.max(c.desired_capacity))
        }
        MinReady::Count(n) => c.up_to_date_and_ready >= n,
    };
    let counts = format!(
        "{} of {} nodes up to date and Ready (group wants {})",
        c.up_to_date_and_ready, c.nodes, c.desired_capacity
    );
    if enough {
        return Verdict::Reached(format!("{pool}: {} reached: {counts}", desired.ami));
    }
    let why = status
        .condition(ConditionType::Progressing)
        .map(|p| format!("{}: {}", p.reason, p.message))
        .unwrap_or_default();
    Verdict::Waiting(format!("{pool}: {counts}; {why}"))
}

/// A status a pass found changed, due to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The new status.
    pub status: Rollout,
    /// A condition changed status (or the pool has none published yet): what pipelines gate
    /// on, so written before count-only changes.
    pub conditions_changed: bool,
}

impl Due {
    /// `status`, due against `before` (the status last written).
    pub fn of(status: Rollout, before: Option<&Rollout>) -> Due {
        let conditions_changed = before.is_none() || !status.changed_since(before).is_empty();
        Due {
            status,
            conditions_changed,
        }
    }
}

/// Which of `due` a pass writes, given it may write `budget`: those whose conditions changed
/// first, then the others; within each, pools in name order starting at an offset that moves
/// by `budget` from one `turn` to the next (a pass numbers its turn by its minute), so that when
/// more pools of a kind are due every pass than the budget allows, each is written within
/// `ceil(due / budget)` turns. Count-only changes wait while condition changes take the whole
/// budget (a condition changes once, then holds). Returns `(written, deferred)`.
pub fn to_write(mut due: Vec<Due>, budget: usize, turn: u64) -> (Vec<Due>, Vec<Due>) {
    due.sort_by(|a, b| a.status.pool.cmp(&b.status.pool));
    let (mut first, mut rest): (Vec<Due>, Vec<Due>) =
        due.into_iter().partition(|d| d.conditions_changed);
    let rotate = |v: &mut Vec<Due>| {
        if !v.is_empty() {
            let len = v.len() as u64;
            let by = turn.wrapping_mul(budget as u64) % len;
            v.rotate_left(usize::try_from(by).unwrap_or(0));
        }
    };
    rotate(&mut first);
    rotate(&mut rest);
    first.append(&mut rest);
    let deferred = first.split_off(budget.min(first.len()));
    (first, deferred)
}

/// Where the rotator publishes statuses and `nodecycle wait` reads them (SSM parameters under
/// [`STATUS_PATH`] in the cell's account and region).
#[async_trait::async_trait]
pub trait StatusBoard: Send + Sync {
    /// Writes `status` as `pool`'s parameter (a String parameter, overwritten).
    async fn publish(&self, status: &Rollout) -> Result<(), crate::port::PortError>;
    /// The status of `pool`, `None` when it was never published.
    async fn read(&self, pool: &str) -> Result<Option<Rollout>, crate::port::PortError>;
    /// Every published status of `cluster`'s pools.
    async fn read_cluster(&self, cluster: &str) -> Result<Vec<Rollout>, crate::port::PortError>;
}

#[cfg(test)]
mod tests;
