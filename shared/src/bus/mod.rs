//! Events out (a leaf: these types depend on no record): the events nodecycle puts on the
//! account's default EventBridge bus, the rules of the outbox that makes an announcement
//! survive a crash between recording a transition and putting its event, and the
//! [`EventSink`] port. Which transition becomes which event is decided in one place,
//! [`crate::announce::stage`].
//!
//! Every event has source [`SOURCE`], a detail-type from [`Kind`] and a [`Detail`] whose
//! `eventId` is derived from the transition (kind, pool, instance, AMI, time of the
//! transition), so a consumer can drop a repeated delivery by `detail.eventId`.
//!
//! # Outbox
//! A transition's event is computed from the record before and after the write that makes it
//! ([`crate::announce::stage`]) and stored *in that write*, in the record's `outbox`.
//! Only the writer whose conditional write succeeded has it; a writer that lost the race
//! re-reads, finds no transition, and stages nothing. After the write the writer puts what it
//! staged and removes what the bus accepted from the outbox (a second conditional write).
//! Entries left behind (the writer died, the put failed, the answer to the write was lost) are
//! put by a later sweep once they are [`SETTLE`] old, and dropped, with an error log, once they
//! are [`MAX_AGE`] old. Result: **at least once** per transition, exactly once unless something
//! fails between the write and the removal; a repeat carries the same `eventId`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// `source` of every event nodecycle puts.
pub const SOURCE: &str = "nodecycle";

/// An outbox entry younger than this may still be being put by the writer that staged it: a
/// sweep leaves it alone.
pub const SETTLE: chrono::Duration = chrono::Duration::minutes(2);

/// An outbox entry older than this is dropped instead of put (logged as lost): a bus that
/// refuses events for a day (no permission, a deny policy) must not grow records forever.
pub const MAX_AGE: chrono::Duration = chrono::Duration::days(1);

/// At most this many entries are kept in one record's outbox (oldest dropped first).
pub const OUTBOX_LIMIT: usize = 16;

/// Text fields (errors, reasons) are cut to this many characters: an event is at most 256 KB
/// and consumers want the gist, the logs have the rest.
pub const TEXT_LIMIT: usize = 1024;

/// The detail-types. Adding one is one variant here and its name in [`Kind::detail_type`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// The AMI a pool's nodes should run changed (resolution, pin or unpin).
    DesiredAmiChanged,
    /// A rotation left `Pending`: its node is being replaced.
    RotationStarted,
    /// A rotation reached `Done`.
    RotationFinished,
    /// A rotation reached `Failed` (its pool is halted).
    RotationFailed,
    /// A rotation was cancelled by an operator.
    RotationCancelled,
    /// A pool stopped starting rotations: halted by a failure, or paused by an operator.
    PoolHalted,
    /// An operator resumed a halted or paused pool.
    PoolResumed,
    /// The interruption handler acted on an interruption event.
    InterruptionHandled,
    /// An image or a release was quarantined (automatically or by an operator).
    AmiQuarantined,
    /// A pool with `promotion` took a release proven upstream.
    AmiPromoted,
    /// Health evidence against a release (its nodes turned unhealthy, or pods failed to start
    /// on them more than on the previous release's): quarantined, rolled back, un-proven.
    ReleaseIndicted,
    /// A repair (a rotation with reason `Unhealthy`) reached `Done`: the unhealthy node was
    /// replaced (instead of *Rotation Finished*).
    NodeRepaired,
    /// Repair's circuit breaker opened: too much of a pool or of one of its zones is
    /// unhealthy, nothing is repaired until it recovers.
    RepairSuspended,
    /// A pool's passes keep failing: it backs off (left out of passes for a while, growing).
    PoolBackingOff,
    /// A condition of a pool's rollout status (`NodesUpToDate`, `Progressing`, `Halted`,
    /// `Paused`: the rollout module's status) changed status.
    RolloutConditionChanged,
    /// An AMI a pool uses (desired, pinned, or running on its nodes) is deprecated by EC2
    /// within the warning horizon (once per pool, AMI and horizon).
    AmiDeprecating,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 16] = [
        Kind::DesiredAmiChanged,
        Kind::RotationStarted,
        Kind::RotationFinished,
        Kind::RotationFailed,
        Kind::RotationCancelled,
        Kind::PoolHalted,
        Kind::PoolResumed,
        Kind::InterruptionHandled,
        Kind::AmiQuarantined,
        Kind::AmiPromoted,
        Kind::ReleaseIndicted,
        Kind::NodeRepaired,
        Kind::RepairSuspended,
        Kind::PoolBackingOff,
        Kind::RolloutConditionChanged,
        Kind::AmiDeprecating,
    ];

    /// The EventBridge `detail-type`.
    pub fn detail_type(self) -> &'static str {
        match self {
            Kind::DesiredAmiChanged => "Desired AMI Changed",
            Kind::RotationStarted => "Rotation Started",
            Kind::RotationFinished => "Rotation Finished",
            Kind::RotationFailed => "Rotation Failed",
            Kind::RotationCancelled => "Rotation Cancelled",
            Kind::PoolHalted => "Pool Halted",
            Kind::PoolResumed => "Pool Resumed",
            Kind::InterruptionHandled => "Interruption Handled",
            Kind::AmiQuarantined => "AMI Quarantined",
            Kind::AmiPromoted => "AMI Promoted",
            Kind::ReleaseIndicted => "Release Indicted",
            Kind::NodeRepaired => "Node Repaired",
            Kind::RepairSuspended => "Repair Suspended",
            Kind::PoolBackingOff => "Pool Backing Off",
            Kind::RolloutConditionChanged => "Rollout Condition Changed",
            Kind::AmiDeprecating => "AMI Deprecating",
        }
    }

    /// The kind of a `detail-type`.
    pub fn from_detail_type(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.detail_type() == text)
    }

    /// Lower-case, dash-separated detail-type: the first part of an `eventId`.
    pub fn slug(self) -> String {
        self.detail_type().to_ascii_lowercase().replace(' ', "-")
    }
}

/// Why a pool stopped ([`Kind::PoolHalted`] `cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HaltCause {
    /// A rotation or node group update failed: nodecycle halted the pool.
    Failure,
    /// An operator paused the pool (`ops pause`).
    Operator,
}

/// An event's `detail`. Common to every kind: `eventId`, `at`, and `pool`, `cluster` (absent
/// only for a quarantine no pool caused); the other fields are set where they apply (see
/// docs/reference.md, *Events out*) and omitted otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    /// Derived from the transition; the same for a repeated put of the same transition.
    pub event_id: String,
    /// `<cluster>/<name>`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pool: String,
    /// The EKS cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    /// When the transition was recorded.
    pub at: DateTime<Utc>,
    /// The instance (rotations, interruptions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Rotations: `Drifted`, `Expired`, `Interrupted`, `Maintenance` or `Manual`; halts and
    /// resumes: the recorded reason; interruptions: what was done and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Rotations: started without waiting for a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forced: Option<bool>,
    /// Rotations: the step entered (`Surging`, `Cordoned`, ..., as the rotation record names
    /// it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Rotations: the step left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<String>,
    /// Rotations: the replacement instance, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// Desired AMI Changed: the AMI nodes must run now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami: Option<String>,
    /// Desired AMI Changed: its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_name: Option<String>,
    /// Desired AMI Changed: the AMI nodes had to run before (absent for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_ami: Option<String>,
    /// Desired AMI Changed: what the amiSelectorTerms resolve to (differs from `ami` while pinned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_ami: Option<String>,
    /// Desired AMI Changed: `ami` is an operator's pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<bool>,
    /// Pool Halted: a failure or an operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<HaltCause>,
    /// The operator, when known (pause, pin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Rotation Failed / Cancelled: the recorded error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Interruption Handled: what the handler did (`drained`, `rotationRecorded`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Interruption Handled: the kind of event (`SpotInterruption`, `LifecycleTerminate`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption: Option<String>,
    /// Interruption Handled: the id of the EventBridge event that was handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_event_id: Option<String>,
    /// AMI Quarantined / Promoted: the release (EKS release version, else the image id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Repairs (`Unhealthy` rotations): the node condition that was bad for its duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// AMI Promoted: the upstream pool it was proven in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// AMI Promoted: when its soak completed upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proven_at: Option<DateTime<Utc>>,
    /// Release Indicted: the evidence (`cause` `Unhealthy` or `WorkloadFailures`, `message`,
    /// `nodes` with their failing conditions, failure `reason`, tallies `new` and `old` as
    /// `{count, of}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<serde_json::Value>,
    /// Rollout Condition Changed: the condition (`type`, `status`, `reason`, `message`,
    /// `since`) and the pool's counts (`desired`, `nodes`, `upToDate`, `ready`,
    /// `upToDateAndReady`) and desired release (`release`: `ami`, `name`, `release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<serde_json::Value>,
    /// AMI Deprecating: its EC2 deprecation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecates_at: Option<DateTime<Utc>>,
    /// AMI Deprecating: how the pool uses it (`desired`, `pinned`, `running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<Vec<String>>,
    /// AMI Deprecating: the warning horizon, in days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon_days: Option<i64>,
}

/// One event to put: its kind (detail-type) and detail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BusEvent {
    /// The detail-type.
    pub kind: Kind,
    /// The detail.
    pub detail: Detail,
}

impl BusEvent {
    /// `detail.eventId`.
    pub fn id(&self) -> &str {
        &self.detail.event_id
    }

    /// The detail as the JSON text PutEvents takes.
    pub fn detail_json(&self) -> String {
        serde_json::to_string(&self.detail).unwrap_or_else(|_| "{}".to_string())
    }
}

/// `t` as an `eventId` part (RFC 3339, milliseconds, `Z`).
pub fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `text` cut to [`TEXT_LIMIT`] characters (an ellipsis marks the cut).
pub fn clip(text: &str) -> String {
    crate::problem::clip(text, TEXT_LIMIT)
}

fn cluster_of(pool: &str) -> String {
    // `cluster/name` or `account/region/cluster/name`.
    crate::policy::place::cluster_of(pool).to_string()
}

/// The event `kind` of `pool` at `at`, id `<kind slug>:<pool>:<parts...>:<at>`, every other
/// detail field unset.
pub fn event(kind: Kind, pool: &str, at: DateTime<Utc>, parts: &[&str]) -> BusEvent {
    let mut id = format!("{}:{pool}", kind.slug());
    for p in parts {
        id.push(':');
        id.push_str(p);
    }
    id.push(':');
    id.push_str(&stamp(at));
    BusEvent {
        kind,
        detail: Detail {
            event_id: id,
            pool: pool.to_string(),
            cluster: cluster_of(pool),
            at,
            ..Detail::default()
        },
    }
}

/// The *Interruption Handled* event: the handler did `action` (`drained`, ...) about
/// `instance` of `pool` for the event `source_event_id` of kind `interruption`, at `at`. Id
/// `interruption-handled:<pool>:<instance>:<action>:<source event id, else at>`.
pub fn interruption_handled(
    pool: &str,
    instance: &str,
    action: &str,
    reason: &str,
    interruption: &str,
    source_event_id: Option<&str>,
    at: DateTime<Utc>,
) -> BusEvent {
    let source = source_event_id.map_or_else(|| stamp(at), str::to_string);
    let mut e = event(Kind::InterruptionHandled, pool, at, &[instance, action]);
    // The source event's id makes a redelivery of the same event the same event.
    e.detail.event_id = format!(
        "{}:{pool}:{instance}:{action}:{source}",
        Kind::InterruptionHandled.slug()
    );
    let d = &mut e.detail;
    d.instance = Some(instance.to_string());
    d.action = Some(action.to_string());
    d.reason = Some(clip(reason));
    d.interruption = Some(interruption.to_string());
    d.source_event_id = source_event_id.map(str::to_string);
    e
}

/// `outbox` with `new` appended unless an entry has its id, at most [`OUTBOX_LIMIT`] long.
pub fn append(mut outbox: Vec<BusEvent>, new: impl IntoIterator<Item = BusEvent>) -> Vec<BusEvent> {
    for e in new {
        if !outbox.iter().any(|o| o.id() == e.id()) {
            outbox.push(e);
        }
    }
    if outbox.len() > OUTBOX_LIMIT {
        let excess = outbox.len() - OUTBOX_LIMIT;
        outbox.drain(..excess);
    }
    outbox
}

/// The entries of `after`'s outbox that `before`'s did not have: what the write staged.
pub fn staged<'a>(before: &[BusEvent], after: &'a [BusEvent]) -> Vec<&'a BusEvent> {
    after
        .iter()
        .filter(|e| !before.iter().any(|b| b.id() == e.id()))
        .collect()
}

/// What a sweep at `now` does with an outbox: entries to put (older than [`SETTLE`]) and
/// entries to drop (older than [`MAX_AGE`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Sweep<'a> {
    /// Put these.
    pub due: Vec<&'a BusEvent>,
    /// Drop these unput (log them as lost).
    pub expired: Vec<&'a BusEvent>,
}

/// Sorts `outbox` for a sweep at `now`.
pub fn sweep(outbox: &[BusEvent], now: DateTime<Utc>) -> Sweep<'_> {
    let mut s = Sweep::default();
    for e in outbox {
        let age = now - e.detail.at;
        if age >= MAX_AGE {
            s.expired.push(e);
        } else if age >= SETTLE {
            s.due.push(e);
        }
    }
    s
}

/// An event the bus refused (PutEvents answers per entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// `detail.eventId` of the refused event.
    pub event_id: String,
    /// The bus's error code and message.
    pub error: String,
}

/// The event bus (PutEvents on the account's default EventBridge bus).
#[async_trait::async_trait]
pub trait EventSink: Send + Sync {
    /// Puts at most [`PUT_LIMIT`] events in one call, source [`SOURCE`], each with its
    /// detail-type, detail and `detail.at` as the event time. `Ok` lists the entries the bus
    /// refused (the others were accepted); `Err` when the call itself failed (none accepted).
    async fn put(&self, events: &[BusEvent]) -> Result<Vec<Refused>, crate::port::PortError>;
}

/// A sink that accepts and forgets every event (tests of code that announces nothing of
/// interest; never used by a deployed function).
#[derive(Debug, Clone, Copy, Default)]
pub struct Discard;

#[async_trait::async_trait]
impl EventSink for Discard {
    async fn put(&self, _: &[BusEvent]) -> Result<Vec<Refused>, crate::port::PortError> {
        Ok(Vec::new())
    }
}

/// PutEvents takes at most this many entries per call.
pub const PUT_LIMIT: usize = 10;

/// `outbox` without the entries whose id is in `ids`.
pub fn without(outbox: &[BusEvent], ids: &[String]) -> Vec<BusEvent> {
    outbox
        .iter()
        .filter(|e| !ids.iter().any(|i| i == e.id()))
        .cloned()
        .collect()
}
