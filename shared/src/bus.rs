//! Events out (pure): which recorded transitions nodecycle announces on the account's default
//! EventBridge bus, the event each becomes, and the outbox that makes the announcement survive
//! a crash between recording a transition and putting its event.
//!
//! Every event has source [`SOURCE`], a detail-type from [`Kind`] and a [`Detail`] whose
//! `eventId` is derived from the transition (kind, pool, instance, AMI, time of the
//! transition), so a consumer can drop a repeated delivery by `detail.eventId`.
//!
//! # Outbox
//! A transition's event is computed from the record before and after the write that makes it
//! ([`stage_rotation`], [`stage_pool`]) and stored *in that write*, in the record's `outbox`.
//! Only the writer whose conditional write succeeded has it; a writer that lost the race
//! re-reads, finds no transition, and stages nothing. After the write the writer puts what it
//! staged and removes what the bus accepted from the outbox (a second conditional write).
//! Entries left behind (the writer died, the put failed, the answer to the write was lost) are
//! put by a later sweep once they are [`SETTLE`] old, and dropped, with an error log, once they
//! are [`MAX_AGE`] old. Result: **at least once** per transition, exactly once unless something
//! fails between the write and the removal; a repeat carries the same `eventId`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::promotion::{Cause, Quarantine, Target};
use crate::rotation::{Rotation, Step};
use crate::state::{PoolRecord, ReleaseHow};

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
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 10] = [
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
        }
    }

    /// The kind of a `detail-type`.
    pub fn from_detail_type(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.detail_type() == text)
    }

    /// Lower-case, dash-separated detail-type: the first part of an `eventId`.
    fn slug(self) -> String {
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
    /// Rotations: the step entered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<Step>,
    /// Rotations: the step left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_step: Option<Step>,
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
    /// AMI Promoted: the upstream pool it was proven in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// AMI Promoted: when its soak completed upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proven_at: Option<DateTime<Utc>>,
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

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn clip(text: &str) -> String {
    if text.chars().count() <= TEXT_LIMIT {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(TEXT_LIMIT - 1).collect();
        s.push('…');
        s
    }
}

fn cluster_of(pool: &str) -> String {
    // `cluster/name` or `account/region/cluster/name`.
    crate::policy::place::cluster_of(pool).to_string()
}

fn event(kind: Kind, pool: &str, at: DateTime<Utc>, parts: &[&str]) -> BusEvent {
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

/// The event of a rotation record's write from `before` (`None`: the record is new) to
/// `after`, if the write is a transition worth announcing: leaving `Pending` (or a new record
/// that starts past it) is *started*; entering `Done`, `Failed` or `Cancelled` from an
/// unfinished step is *finished*, *failed*, *cancelled*. Anything else (a drain step, a
/// surge given back, a new `Pending` record) is none. The id is
/// `<kind>:<pool>:<instance>:<step>:<step time>`.
pub fn rotation_transition(before: Option<&Rotation>, after: &Rotation) -> Option<BusEvent> {
    let started_before = before.is_some_and(|b| b.in_flight() && b.step != Step::Pending);
    let kind = match after.step {
        Step::Done | Step::Failed | Step::Cancelled if before.is_some_and(|b| b.in_flight()) => {
            match after.step {
                Step::Done => Kind::RotationFinished,
                Step::Failed => Kind::RotationFailed,
                _ => Kind::RotationCancelled,
            }
        }
        Step::Surging | Step::Cordoned | Step::Draining | Step::Terminating if !started_before => {
            Kind::RotationStarted
        }
        _ => return None,
    };
    let step = format!("{:?}", after.step);
    let mut e = event(
        kind,
        &after.pool,
        after.step_at,
        &[&after.instance_id, &step],
    );
    let d = &mut e.detail;
    d.instance = Some(after.instance_id.clone());
    d.reason = Some(format!("{:?}", after.reason));
    d.forced = Some(after.forced);
    d.step = Some(after.step);
    d.from_step = before.filter(|b| b.in_flight()).map(|b| b.step);
    d.replacement = after.replacement.clone();
    if matches!(kind, Kind::RotationFailed | Kind::RotationCancelled) {
        d.error = after.error.as_deref().map(clip);
    }
    Some(e)
}

fn stopped(r: &PoolRecord) -> bool {
    r.halted.is_some() || r.paused.is_some()
}

/// The events of a pool record's write from `before` to `after` at `now`:
/// - *Pool Halted* (`cause: failure`) when `halted` is set, (`cause: operator`) when `paused`
///   is set; id `pool-halted:<pool>:<time of the halt or pause>`;
/// - *Pool Resumed* when neither is set any more; id from the time of what was lifted;
/// - *Desired AMI Changed* when the effective desired AMI (the pin, else the resolved AMI)
///   changes to another AMI; id `desired-ami-changed:<pool>:<ami>:<now>`.
pub fn pool_transitions(
    before: &PoolRecord,
    after: &PoolRecord,
    now: DateTime<Utc>,
) -> Vec<BusEvent> {
    let pool = if after.pool.is_empty() {
        before.pool.as_str()
    } else {
        after.pool.as_str()
    };
    let mut out = Vec::new();
    if let (None, Some(h)) = (&before.halted, &after.halted) {
        let mut e = event(Kind::PoolHalted, pool, h.at, &[]);
        e.detail.cause = Some(HaltCause::Failure);
        e.detail.reason = Some(clip(&h.message));
        out.push(e);
    }
    if let (None, Some(p)) = (&before.paused, &after.paused) {
        let mut e = event(Kind::PoolHalted, pool, p.at, &["paused"]);
        e.detail.cause = Some(HaltCause::Operator);
        e.detail.reason = Some(clip(&p.reason));
        e.detail.by = p.by.clone();
        out.push(e);
    }
    if stopped(before) && !stopped(after) {
        let lifted = before
            .halted
            .as_ref()
            .map(|h| (h.at, h.message.as_str()))
            .or(before.paused.as_ref().map(|p| (p.at, p.reason.as_str())));
        if let Some((lifted_at, why)) = lifted {
            let mut e = event(Kind::PoolResumed, pool, lifted_at, &[]);
            e.detail.at = now;
            e.detail.reason = Some(clip(why));
            e.detail.cause = Some(if before.halted.is_some() {
                HaltCause::Failure
            } else {
                HaltCause::Operator
            });
            out.push(e);
        }
    }
    let (was, is) = (before.effective_desired(), after.effective_desired());
    if let Some(ami) = is.filter(|a| Some(*a) != was) {
        let mut e = event(Kind::DesiredAmiChanged, pool, now, &[ami]);
        let d = &mut e.detail;
        d.ami = Some(ami.to_string());
        d.ami_name = match &after.pin {
            Some(p) => p.name.clone(),
            None => after.desired.as_ref().map(|a| a.name.clone()),
        };
        d.previous_ami = was.map(str::to_string);
        d.resolved_ami = after.desired.as_ref().map(|a| a.id.clone());
        d.pinned = Some(after.pin.is_some());
        d.by = after.pin.as_ref().and_then(|p| p.by.by.clone());
        out.push(e);
    }
    let promoted = after
        .releases
        .iter()
        .filter(|r| !before.releases.contains(r))
        .filter_map(|r| match &r.how {
            ReleaseHow::Promoted { from, proven_at } => Some((r, from, proven_at)),
            ReleaseHow::RolledBack { .. } => None,
        });
    for (r, from, proven_at) in promoted {
        let release = r.release.to_string();
        let mut e = event(Kind::AmiPromoted, pool, r.at, &[&release, &r.image]);
        let d = &mut e.detail;
        d.ami = Some(r.image.clone());
        d.release = Some(release);
        d.upstream = Some(from.clone());
        d.proven_at = Some(*proven_at);
        out.push(e);
    }
    out
}

/// The *AMI Quarantined* event of quarantine entry `q` (recorded by the write that created
/// it). Id `ami-quarantined:<pool or ->:<target sort key>:<time of the quarantine>`.
pub fn quarantined(q: &Quarantine) -> BusEvent {
    let pool = match &q.cause {
        Cause::ReplacementNotReady { pool, .. } | Cause::Alarm { pool, .. } => pool.as_str(),
        Cause::Operator { .. } => "",
    };
    let sk = q.target.sk();
    let mut e = event(Kind::AmiQuarantined, pool, q.at, &[&sk]);
    if pool.is_empty() {
        e.detail.event_id = format!("{}:-:{sk}:{}", Kind::AmiQuarantined.slug(), stamp(q.at));
    }
    let d = &mut e.detail;
    match &q.target {
        Target::Ami(id) => d.ami = Some(id.clone()),
        Target::Release(r) => d.release = Some(r.to_string()),
    }
    d.reason = Some(clip(&q.reason));
    d.by = Some(q.by.clone());
    match &q.cause {
        Cause::ReplacementNotReady { instance, .. } => d.instance = Some(instance.clone()),
        Cause::Alarm { alarm, .. } => d.error = Some(format!("alarm {alarm} in ALARM")),
        Cause::Operator { request_id } => d.source_event_id = Some(request_id.clone()),
    }
    e
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
fn append(mut outbox: Vec<BusEvent>, new: impl IntoIterator<Item = BusEvent>) -> Vec<BusEvent> {
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

/// `after`, ready to be written over `before`: its outbox is the stored one (`before`'s,
/// which a new record replacing a finished one inherits) plus the event of this transition.
pub fn stage_rotation(before: Option<&Rotation>, mut after: Rotation) -> Rotation {
    let stored = before.map(|b| b.outbox.clone()).unwrap_or_default();
    after.outbox = append(stored, rotation_transition(before, &after));
    after
}

/// `after`, ready to be written over `before` at `now`: `after`'s outbox (the change derives
/// it from `before`'s, and may remove entries already put) plus the events of this write
/// ([`pool_transitions`]).
pub fn stage_pool(before: &PoolRecord, mut after: PoolRecord, now: DateTime<Utc>) -> PoolRecord {
    let new = pool_transitions(before, &after, now);
    after.outbox = append(std::mem::take(&mut after.outbox), new);
    after
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

#[cfg(test)]
mod tests;
