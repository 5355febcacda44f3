//! State recorded in the DynamoDB table: the item model, the pure merge rules that make
//! concurrent writers safe, and the narrow [`Store`] port.
//!
//! Table: partition key `pk` (S), sort key `sk` (S), TTL attribute `ttl` (N, epoch seconds).
//! Every item also has `version` (N, bumped by each write; writes are conditional on it) and
//! `doc` (S, the item's JSON document).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ami::resolve::Ami;
use crate::port::PortError;

/// Environment variable naming the table.
pub const TABLE_ENV: &str = "NODECYCLE_TABLE";
/// Partition key attribute.
pub const PK: &str = "pk";
/// Sort key attribute.
pub const SK: &str = "sk";
/// TTL attribute (epoch seconds).
pub const TTL: &str = "ttl";
/// Optimistic-concurrency attribute.
pub const VERSION: &str = "version";
/// JSON document attribute.
pub const DOC: &str = "doc";
/// Entries kept in a pool's resolution history.
pub const HISTORY_LIMIT: usize = 100;

/// A stored document with the version it was read at.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    /// The document.
    pub value: T,
    /// Version to pass back to a conditional write.
    pub version: u64,
}

/// Key-value document storage with optimistic concurrency (the DynamoDB table).
#[async_trait]
pub trait Store: Send + Sync {
    /// Reads one item (strongly consistent).
    async fn get(
        &self,
        pk: &str,
        sk: &str,
    ) -> Result<Option<Versioned<serde_json::Value>>, PortError>;

    /// Writes one item if its current version is `expected` (`None` = the item must not exist).
    /// Returns the new version. A lost race is a [`crate::port::ErrorKind::Conflict`] error.
    async fn put(
        &self,
        pk: &str,
        sk: &str,
        doc: &serde_json::Value,
        expected: Option<u64>,
        ttl: Option<DateTime<Utc>>,
    ) -> Result<u64, PortError>;

    /// Waits before attempt `attempt` (1-based) of a conditional write that lost a race, so
    /// that contenders spread out; the default does not wait.
    async fn backoff(&self, _attempt: usize) {}

    /// Every item of partition `pk` whose sort key starts with `sk_prefix`, all pages.
    async fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> Result<Vec<(String, Versioned<serde_json::Value>)>, PortError>;
}

/// The error of a conditional write that kept losing to other writers for
/// [`WRITE_ATTEMPTS`] attempts.
pub fn too_many_conflicts() -> PortError {
    PortError::new(
        "state:write",
        crate::port::ErrorKind::Conflict,
        "too many conflicts",
    )
}

/// Partition key of a pool's items.
pub fn pool_pk(pool: &str) -> String {
    format!("POOL#{pool}")
}

/// Sort key of a pool's state record.
pub const POOL_STATE_SK: &str = "STATE";

/// One AMI the pool resolved to at some point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The AMI (with provenance).
    pub ami: Ami,
    /// First observation time.
    pub first_seen: DateTime<Utc>,
    /// Latest observation time.
    pub last_seen: DateTime<Utc>,
}

/// A recorded failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedError {
    /// What went wrong and what to fix.
    pub message: String,
    /// When it was observed.
    pub at: DateTime<Utc>,
}

/// A pool's state record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PoolRecord {
    /// `<cluster>/<name>`.
    pub pool: String,
    /// The AMI the pool should run.
    pub desired: Option<Ami>,
    /// The desired AMI before the last change.
    pub previous_desired: Option<Ami>,
    /// When `desired` last changed.
    pub desired_changed_at: Option<DateTime<Utc>>,
    /// Observation time of the resolution `desired` came from.
    pub resolved_at: Option<DateTime<Utc>>,
    /// Cluster version at that resolution.
    pub kubernetes_version: Option<String>,
    /// Every AMI the pool resolved to, oldest first, at most [`HISTORY_LIMIT`].
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// The latest failure not yet superseded by a later success.
    pub last_error: Option<RecordedError>,
    /// Set when a rotation failed (e.g. a replacement never became Ready): no new rotation
    /// starts until an operator resumes the pool.
    #[serde(default)]
    pub halted: Option<RecordedError>,
    /// Operator override of the desired AMI (`ops pin`) until unpinned; the watcher keeps
    /// recording what the terms resolve to in `desired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<Pin>,
    /// Operator pause (`ops pause`): no voluntary rotation starts until `ops resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<OperatorAction>,
    /// The periods this pool ran one release on all its nodes, healthy (the rotator records
    /// them; downstream pools read them to know what is proven).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ledger: Vec<crate::promotion::SoakPeriod>,
    /// How the desired AMI moved through promotion and rollback, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub releases: Vec<ReleaseEvent>,
    /// What nodecycle holds on the pool's group while it rotates (a process it suspended,
    /// `MaxSize` it raised), recorded before the call; see [`crate::rotation::group`].
    #[serde(
        default,
        skip_serializing_if = "crate::rotation::group::GroupHolds::is_empty"
    )]
    pub group_holds: crate::rotation::group::GroupHolds,
    /// Why a pool with `promotion` keeps its desired AMI (what it waits for), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion_wait: Option<String>,
    /// Events of transitions of this record not yet put on the bus (see [`crate::bus`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<crate::bus::BusEvent>,
}

/// Release events kept per pool.
pub const RELEASE_EVENTS_LIMIT: usize = 50;

/// A release reaching a pool, or leaving it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseEvent {
    /// The release.
    pub release: crate::promotion::Release,
    /// The image the pool got.
    pub image: String,
    /// When.
    pub at: DateTime<Utc>,
    /// How.
    #[serde(flatten)]
    pub how: ReleaseHow,
}

/// How a release reached (or left) a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "camelCase")]
pub enum ReleaseHow {
    /// Promoted: proven in the upstream pool.
    #[serde(rename_all = "camelCase")]
    Promoted {
        /// The upstream pool.
        from: String,
        /// When its soak completed.
        proven_at: DateTime<Utc>,
    },
    /// Rolled back to it: the desired release was quarantined.
    #[serde(rename_all = "camelCase")]
    RolledBack {
        /// The quarantined release the pool left.
        from_release: crate::promotion::Release,
        /// The quarantine's reason.
        reason: String,
    },
}

impl PoolRecord {
    /// Appends a release event (keeping the last [`RELEASE_EVENTS_LIMIT`]).
    pub fn push_release(&mut self, event: ReleaseEvent) {
        self.releases.push(event);
        if self.releases.len() > RELEASE_EVENTS_LIMIT {
            let excess = self.releases.len() - RELEASE_EVENTS_LIMIT;
            self.releases.drain(..excess);
        }
    }

    /// Moves the desired AMI back to `target` because the current one is quarantined (`why`):
    /// the quarantined AMI becomes `previous_desired`, a pin on it is dropped, a halt caused by
    /// it is lifted (`lift_halt`), and the rollback is recorded.
    pub fn roll_back(
        &self,
        target: &Ami,
        why: &str,
        lift_halt: bool,
        now: DateTime<Utc>,
    ) -> PoolRecord {
        let mut next = self.clone();
        let from = self.desired.clone();
        if let Some(f) = &from {
            next.push_release(ReleaseEvent {
                release: crate::promotion::release_of(target),
                image: target.id.clone(),
                at: now,
                how: ReleaseHow::RolledBack {
                    from_release: crate::promotion::release_of(f),
                    reason: why.to_string(),
                },
            });
        }
        next.previous_desired = from;
        next.desired = Some(target.clone());
        next.desired_changed_at = Some(now);
        next.resolved_at = next.resolved_at.max(Some(now));
        if next
            .pin
            .as_ref()
            .is_some_and(|p| Some(p.ami.as_str()) != Some(target.id.as_str()))
        {
            next.pin = None;
        }
        if lift_halt {
            next.halted = None;
        }
        next
    }
}

impl PoolRecord {
    /// The AMI id nodes should run: the pin, else what the terms resolved to.
    pub fn effective_desired(&self) -> Option<&str> {
        self.pin
            .as_ref()
            .map(|p| p.ami.as_str())
            .or(self.desired.as_ref().map(|a| a.id.as_str()))
    }
}

/// Who did something to a pool, when and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorAction {
    /// The operator's reason.
    pub reason: String,
    /// When.
    pub at: DateTime<Utc>,
    /// Caller identity, when known.
    #[serde(default)]
    pub by: Option<String>,
}

/// A pinned AMI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pin {
    /// `ami-...`.
    pub ami: String,
    /// Its name (from DescribeImages at pin time).
    #[serde(default)]
    pub name: Option<String>,
    /// Who, when, why.
    #[serde(flatten)]
    pub by: OperatorAction,
}

/// One watcher observation of a pool.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// The terms resolved.
    Resolved {
        /// When the resolution started.
        at: DateTime<Utc>,
        /// Cluster version.
        kubernetes_version: String,
        /// The chosen AMI.
        desired: Ami,
    },
    /// Resolution failed; the pool keeps its desired AMI.
    Failed {
        /// When the resolution started.
        at: DateTime<Utc>,
        /// Why.
        message: String,
    },
}

impl PoolRecord {
    /// Applies an observation. Order-independent for the outcome that matters: `desired` is
    /// always the AMI of the newest successful observation, whatever order writers land in,
    /// history keeps every AMI ever observed (earliest first-seen), and an error is cleared only
    /// by a success observed after it. Stale observations never move `desired` backwards.
    pub fn apply(&self, obs: &Observation) -> PoolRecord {
        let mut next = self.clone();
        match obs {
            Observation::Resolved {
                at,
                kubernetes_version,
                desired,
            } => {
                match next.history.iter_mut().find(|h| h.ami.id == desired.id) {
                    Some(h) => {
                        h.first_seen = h.first_seen.min(*at);
                        h.last_seen = h.last_seen.max(*at);
                    }
                    None => next.history.push(HistoryEntry {
                        ami: desired.clone(),
                        first_seen: *at,
                        last_seen: *at,
                    }),
                }
                next.history.sort_by(|a, b| {
                    a.first_seen
                        .cmp(&b.first_seen)
                        .then(a.ami.id.cmp(&b.ami.id))
                });
                if next.history.len() > HISTORY_LIMIT {
                    let excess = next.history.len() - HISTORY_LIMIT;
                    next.history.drain(..excess);
                }
                let newer = self.resolved_at.is_none_or(|r| *at >= r);
                if newer {
                    if self.desired.as_ref().map(|d| &d.id) != Some(&desired.id) {
                        next.previous_desired = self.desired.clone();
                        next.desired_changed_at = Some(*at);
                    }
                    next.desired = Some(desired.clone());
                    next.resolved_at = Some(*at);
                    next.kubernetes_version = Some(kubernetes_version.clone());
                }
                if next.last_error.as_ref().is_some_and(|e| *at >= e.at) {
                    next.last_error = None;
                }
            }
            Observation::Failed { at, message } => {
                let newer_than_error = self.last_error.as_ref().is_none_or(|e| *at >= e.at);
                let newer_than_success = self.resolved_at.is_none_or(|r| *at >= r);
                if newer_than_error && newer_than_success {
                    next.last_error = Some(RecordedError {
                        message: message.clone(),
                        at: *at,
                    });
                }
            }
        }
        next
    }
}

/// How many times a conditional write is retried after losing a race.
pub const WRITE_ATTEMPTS: usize = 8;

/// Reads the pool record, applies `change`, stages the events of the transition in the
/// record's outbox ([`crate::bus::stage_pool`] at `now`) and writes it back conditionally,
/// re-reading on a lost race. Returns the record before and after (as written). A record that
/// `change` leaves equal is not written. Putting the staged events is the caller's
/// ([`crate::announce::Announcer::update_pool`]); left in the outbox, a sweep puts them.
pub async fn update_pool(
    store: &dyn Store,
    pool: &str,
    now: DateTime<Utc>,
    change: impl Fn(&PoolRecord) -> PoolRecord + Send + Sync,
) -> Result<(PoolRecord, PoolRecord), PortError> {
    use crate::port::ErrorKind;
    let pk = pool_pk(pool);
    let mut last = None;
    for attempt in 0..WRITE_ATTEMPTS {
        if attempt > 0 {
            store.backoff(attempt).await;
        }
        let current = store.get(&pk, POOL_STATE_SK).await?;
        let (before, expected) = match current {
            Some(v) => {
                let rec: PoolRecord = serde_json::from_value(v.value).map_err(|e| {
                    PortError::new(
                        "state:decode",
                        ErrorKind::Other,
                        format!("pool record {pool}: {e}"),
                    )
                })?;
                (rec, Some(v.version))
            }
            None => (
                PoolRecord {
                    pool: pool.to_string(),
                    ..PoolRecord::default()
                },
                None,
            ),
        };
        let after = change(&before);
        if expected.is_some() && after == before {
            return Ok((before, after));
        }
        let after = crate::bus::stage_pool(&before, after, now);
        let doc = serde_json::to_value(&after)
            .map_err(|e| PortError::new("state:encode", ErrorKind::Other, e.to_string()))?;
        match store.put(&pk, POOL_STATE_SK, &doc, expected, None).await {
            Ok(_) => return Ok((before, after)),
            Err(e) if e.kind == ErrorKind::Conflict => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(too_many_conflicts))
}

/// Reads the pool record (`None` if the pool was never resolved).
pub async fn load_pool(store: &dyn Store, pool: &str) -> Result<Option<PoolRecord>, PortError> {
    match store.get(&pool_pk(pool), POOL_STATE_SK).await? {
        None => Ok(None),
        Some(v) => serde_json::from_value(v.value).map(Some).map_err(|e| {
            PortError::new(
                "state:decode",
                crate::port::ErrorKind::Other,
                format!("pool record {pool}: {e}"),
            )
        }),
    }
}

/// A lease: one holder at a time until it expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// Who holds it (invocation id).
    pub holder: String,
    /// When it lapses if not released.
    pub expires: DateTime<Utc>,
}

/// Takes the lease `name` for `holder` until `now + ttl` if it is free, expired or already
/// ours. Returns the current holder when someone else has it.
pub async fn acquire_lease(
    store: &dyn Store,
    name: &str,
    holder: &str,
    now: DateTime<Utc>,
    ttl: chrono::Duration,
) -> Result<Result<(), Lease>, PortError> {
    let pk = format!("LEASE#{name}");
    let current = store.get(&pk, "LEASE").await?;
    let expected = match &current {
        Some(v) => {
            let lease: Option<Lease> = serde_json::from_value(v.value.clone()).ok();
            if let Some(l) = lease.filter(|l| l.holder != holder && l.expires > now) {
                return Ok(Err(l));
            }
            Some(v.version)
        }
        None => None,
    };
    let lease = Lease {
        holder: holder.to_string(),
        expires: now + ttl,
    };
    let doc = serde_json::to_value(&lease).map_err(|e| {
        PortError::new("state:encode", crate::port::ErrorKind::Other, e.to_string())
    })?;
    match store
        .put(
            &pk,
            "LEASE",
            &doc,
            expected,
            Some(now + ttl + chrono::Duration::days(1)),
        )
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(e) if e.kind == crate::port::ErrorKind::Conflict => {
            // Someone wrote it first, or our own write landed and its answer was lost (the
            // SDK's retry then conflicts with it): the record says which.
            let now_held = store
                .get(&pk, "LEASE")
                .await?
                .and_then(|v| serde_json::from_value::<Lease>(v.value).ok());
            match now_held {
                Some(l) if l.holder == holder => Ok(Ok(())),
                Some(l) => Ok(Err(l)),
                None => Ok(Err(Lease {
                    holder: "another invocation".into(),
                    expires: now + ttl,
                })),
            }
        }
        Err(e) => Err(e),
    }
}

/// Gives the lease back (expires it now) if `holder` still has it.
pub async fn release_lease(
    store: &dyn Store,
    name: &str,
    holder: &str,
    now: DateTime<Utc>,
) -> Result<(), PortError> {
    let pk = format!("LEASE#{name}");
    if let Some(v) = store.get(&pk, "LEASE").await? {
        let ours = serde_json::from_value::<Lease>(v.value).is_ok_and(|l| l.holder == holder);
        if ours {
            let doc = serde_json::to_value(Lease {
                holder: holder.to_string(),
                expires: now,
            })
            .map_err(|e| {
                PortError::new("state:encode", crate::port::ErrorKind::Other, e.to_string())
            })?;
            // Losing this race only means someone else took an expired lease: fine. Any other
            // failure is the caller's to retry: a lease left held stalls the cluster.
            match store
                .put(
                    &pk,
                    "LEASE",
                    &doc,
                    Some(v.version),
                    Some(now + chrono::Duration::days(1)),
                )
                .await
            {
                Err(e) if e.kind != crate::port::ErrorKind::Conflict => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Every quarantine in force (lifted entries are kept for the audit, not returned).
pub async fn load_quarantine(
    store: &dyn Store,
) -> Result<crate::promotion::Quarantined, PortError> {
    let items = store
        .query(crate::promotion::quarantine::QUARANTINE_PK, "Q#")
        .await?;
    let mut out = Vec::new();
    for (sk, v) in items {
        if v.value.get("liftedAt").is_some_and(|l| !l.is_null()) {
            continue;
        }
        match serde_json::from_value::<crate::promotion::Quarantine>(v.value) {
            Ok(q) => out.push(q),
            Err(e) => tracing::error!(sk = %sk, error = %e, "unreadable quarantine item ignored"),
        }
    }
    Ok(crate::promotion::Quarantined(out))
}

/// Records a quarantine with its *AMI Quarantined* event staged in the record's outbox:
/// `Ok(Some(event))` with the event it staged, `Ok(None)` when the target was already
/// quarantined (the first entry, with its reason, stays; nothing staged).
pub async fn put_quarantine(
    store: &dyn Store,
    q: &crate::promotion::Quarantine,
) -> Result<Option<crate::bus::BusEvent>, PortError> {
    use crate::port::ErrorKind;
    let pk = crate::promotion::quarantine::QUARANTINE_PK;
    let sk = q.target.sk();
    let event = crate::bus::quarantined(q);
    let staged = crate::promotion::Quarantine {
        outbox: vec![event.clone()],
        ..q.clone()
    };
    let doc = serde_json::to_value(&staged)
        .map_err(|e| PortError::new("state:encode", ErrorKind::Other, e.to_string()))?;
    for _ in 0..WRITE_ATTEMPTS {
        let current = store.get(pk, &sk).await?;
        let expected = match &current {
            None => None,
            Some(v) if v.value.get("liftedAt").is_some_and(|l| !l.is_null()) => Some(v.version),
            Some(_) => return Ok(None),
        };
        match store.put(pk, &sk, &doc, expected, None).await {
            Ok(_) => return Ok(Some(event)),
            Err(e) if e.kind == ErrorKind::Conflict => continue,
            Err(e) => return Err(e),
        }
    }
    Err(too_many_conflicts())
}

/// Lifts the quarantine of `target` (kept as an audit record with who/when/why); `Ok(false)`
/// when it was not quarantined.
pub async fn lift_quarantine(
    store: &dyn Store,
    target: &crate::promotion::Target,
    by: &OperatorAction,
) -> Result<bool, PortError> {
    use crate::port::ErrorKind;
    let pk = crate::promotion::quarantine::QUARANTINE_PK;
    let sk = target.sk();
    for _ in 0..WRITE_ATTEMPTS {
        let Some(v) = store.get(pk, &sk).await? else {
            return Ok(false);
        };
        if v.value.get("liftedAt").is_some_and(|l| !l.is_null()) {
            return Ok(false);
        }
        let mut doc = v.value.clone();
        doc["liftedAt"] = serde_json::json!(by.at);
        doc["liftedBy"] = serde_json::json!(by.by);
        doc["liftReason"] = serde_json::json!(by.reason);
        match store.put(pk, &sk, &doc, Some(v.version), None).await {
            Ok(_) => return Ok(true),
            Err(e) if e.kind == ErrorKind::Conflict => continue,
            Err(e) => return Err(e),
        }
    }
    Err(too_many_conflicts())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ami::Architecture;
    use crate::ami::select::Provenance;
    use proptest::prelude::*;

    /// A test image `id` named `name-<id>` (x86_64), chosen by an `id` term.
    pub(crate) fn ami(id: &str) -> Ami {
        Ami {
            id: id.into(),
            name: format!("name-{id}"),
            architecture: Architecture::X86_64,
            variant: None,
            creation_date: "2026-01-01T00:00:00Z".into(),
            deprecated: false,
            source: Provenance {
                term: 0,
                field: "id".into(),
                value: id.into(),
                parameter: None,
            },
        }
    }

    fn t(minute: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + i64::from(minute) * 60, 0).unwrap()
    }

    fn ok(minute: u32, id: &str) -> Observation {
        Observation::Resolved {
            at: t(minute),
            kubernetes_version: "1.30".into(),
            desired: ami(id),
        }
    }

    #[test]
    fn a_change_records_previous_and_time() {
        let r = PoolRecord::default()
            .apply(&ok(1, "ami-a"))
            .apply(&ok(2, "ami-b"));
        assert_eq!(r.desired.unwrap().id, "ami-b");
        assert_eq!(r.previous_desired.unwrap().id, "ami-a");
        assert_eq!(r.desired_changed_at, Some(t(2)));
        assert_eq!(r.history.len(), 2);
    }

    #[test]
    fn a_stale_observation_never_moves_desired_backwards() {
        let r = PoolRecord::default()
            .apply(&ok(5, "ami-new"))
            .apply(&ok(3, "ami-old"));
        assert_eq!(r.desired.as_ref().unwrap().id, "ami-new");
        assert!(r.previous_desired.is_none());
        assert_eq!(
            r.history[0].ami.id, "ami-old",
            "history keeps the stale AMI, oldest first"
        );
    }

    #[test]
    fn failure_keeps_desired_and_a_later_success_clears_it() {
        let failed = Observation::Failed {
            at: t(2),
            message: "boom".into(),
        };
        let r = PoolRecord::default().apply(&ok(1, "ami-a")).apply(&failed);
        assert_eq!(r.desired.as_ref().unwrap().id, "ami-a");
        assert_eq!(r.last_error.as_ref().unwrap().message, "boom");
        let r = r.apply(&ok(3, "ami-a"));
        assert!(r.last_error.is_none());
        assert_eq!(r.previous_desired, None, "same AMI is not a change");
    }

    #[test]
    fn a_stale_success_does_not_clear_a_newer_error() {
        let failed = Observation::Failed {
            at: t(5),
            message: "boom".into(),
        };
        let r = PoolRecord::default().apply(&failed).apply(&ok(4, "ami-a"));
        assert!(r.last_error.is_some());
    }

    proptest! {
        #[test]
        fn desired_is_the_newest_success_in_any_order(
            obs in proptest::collection::vec((0u32..50, 0u8..4), 1..12),
            seed in any::<u64>()
        ) {
            // Distinct times so "newest" is well defined.
            let mut seen = std::collections::HashSet::new();
            let obs: Vec<_> = obs.into_iter().filter(|(m, _)| seen.insert(*m)).collect();
            let newest = obs.iter().max_by_key(|(m, _)| *m).map(|(_, i)| format!("ami-{i}"));
            let mut shuffled = obs.clone();
            // Deterministic shuffle from the seed.
            let mut s = seed;
            for i in (1..shuffled.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                shuffled.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut r = PoolRecord::default();
            for (m, i) in &shuffled {
                r = r.apply(&ok(*m, &format!("ami-{i}")));
            }
            prop_assert_eq!(r.desired.map(|d| d.id), newest);
            let mut ids: Vec<String> = obs.iter().map(|(_, i)| format!("ami-{i}")).collect();
            ids.sort();
            ids.dedup();
            prop_assert_eq!(r.history.len(), ids.len());
        }
    }
}
