//! The state table as one typed repository: the records ([`record`], pure), the only place key
//! formats live ([`keys`]), the raw key-value port ([`Store`]) and [`Repository`], the only
//! caller of that port. Conditional writes, versions and TTLs are decided here; callers ask
//! for records and typed changes.
//!
//! Table: partition key `pk` (S), sort key `sk` (S), TTL attribute `ttl` (N, epoch seconds).
//! Every item also has `version` (N, bumped by each write; writes are conditional on it) and
//! `doc` (S, the item's JSON document). Items written by earlier versions read as they are:
//! the key formats and attribute names are those of [`keys`] and the records' serde names.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::bus::BusEvent;
use crate::managed::ManagedUpdate;
use crate::port::{ErrorKind, PortError};
use crate::promotion::{Quarantine, Quarantined, Target};
use crate::rotation::Rotation;
use crate::stop::StopSwitch;

pub mod keys;
pub mod memory;
pub mod record;
mod scratch;
#[cfg(all(test, feature = "aws"))]
mod tests;

pub use record::*;
pub use scratch::Scratch;

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

/// How many times a conditional write is retried after losing a race.
pub const WRITE_ATTEMPTS: usize = 8;

/// A stored document with the version it was read at.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    /// The document.
    pub value: T,
    /// Version to pass back to a conditional write.
    pub version: u64,
}

/// Key-value document storage with optimistic concurrency (the DynamoDB table): the raw port
/// behind [`Repository`]. Nothing else calls it.
#[async_trait]
pub trait Store: Send + Sync {
    /// Reads one item (strongly consistent).
    async fn get(&self, pk: &str, sk: &str) -> Result<Option<Versioned<Value>>, PortError>;

    /// Writes one item if its current version is `expected` (`None` = the item must not exist).
    /// Returns the new version. A lost race is a [`crate::port::ErrorKind::Conflict`] error.
    async fn put(
        &self,
        pk: &str,
        sk: &str,
        doc: &Value,
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
    ) -> Result<Vec<(String, Versioned<Value>)>, PortError>;
}

/// The error of a conditional write that kept losing to other writers for
/// [`WRITE_ATTEMPTS`] attempts.
pub fn too_many_conflicts() -> PortError {
    PortError::new("state:write", ErrorKind::Conflict, "too many conflicts")
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Value, PortError> {
    serde_json::to_value(value)
        .map_err(|e| PortError::new("state:encode", ErrorKind::Other, e.to_string()))
}

fn decode_error(what: &str, e: impl std::fmt::Display) -> PortError {
    PortError::new("state:decode", ErrorKind::Other, format!("{what}: {e}"))
}

/// `Ok(None)` for a conditional write that lost its race.
fn won(result: Result<u64, PortError>) -> Result<Option<u64>, PortError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind == ErrorKind::Conflict => Ok(None),
        Err(e) => Err(e),
    }
}

fn lifted(doc: &Value) -> bool {
    doc.get("liftedAt").is_some_and(|l| !l.is_null())
}

/// Where an ops audit record goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditScope<'a> {
    /// A request that names no pool nodecycle manages (refused at parsing, or an unknown
    /// pool): never a partition named after hostile input.
    Unscoped,
    /// `quarantine` / `unquarantine`: next to the quarantine records.
    Quarantine,
    /// `stop` / `start`: next to the stop switch.
    Deployment,
    /// A request about this pool: under its partition.
    Pool(&'a str),
}

impl AuditScope<'_> {
    /// The partition its records go to (for logs).
    pub fn partition(self) -> String {
        match self {
            AuditScope::Unscoped => keys::AUDIT_PK.to_string(),
            AuditScope::Quarantine => keys::QUARANTINE_PK.to_string(),
            AuditScope::Deployment => keys::DEPLOYMENT_PK.to_string(),
            AuditScope::Pool(pool) => keys::pool_pk(pool),
        }
    }
}

/// An audit record written by [`Repository::audit_start`], to add the outcome to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pk: String,
    sk: String,
    version: u64,
}

impl AuditRecord {
    /// Its partition (for logs).
    pub fn partition(&self) -> &str {
        &self.pk
    }
}

/// What an interruption handler claim is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimKey {
    /// `kind` work (`drain`, `rebalance`, `gone`, `lifecycle`) on `instance` of `pool`.
    Work {
        /// `<cluster>/<name>`.
        pool: String,
        /// `i-...`.
        instance: String,
        /// The kind of work.
        kind: String,
    },
    /// One EventBridge event id (deduplication of redeliveries).
    Event {
        /// The event's `id`.
        id: String,
    },
}

impl ClaimKey {
    /// [`ClaimKey::Work`].
    pub fn work(pool: &str, instance: &str, kind: &str) -> ClaimKey {
        ClaimKey::Work {
            pool: pool.to_string(),
            instance: instance.to_string(),
            kind: kind.to_string(),
        }
    }

    /// [`ClaimKey::Event`].
    pub fn event(id: &str) -> ClaimKey {
        ClaimKey::Event { id: id.to_string() }
    }

    fn keys(&self) -> (String, String) {
        match self {
            ClaimKey::Work {
                pool,
                instance,
                kind,
            } => (keys::pool_pk(pool), keys::claim_sk(instance, kind)),
            ClaimKey::Event { id } => (keys::event_claim_pk(id), keys::EVENT_CLAIM_SK.into()),
        }
    }
}

impl std::fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (pk, sk) = self.keys();
        write!(f, "{pk}/{sk}")
    }
}

/// The typed operations on the state table, over the raw [`Store`]. Cheap to clone.
#[derive(Clone)]
pub struct Repository {
    store: Arc<dyn Store>,
}

impl std::fmt::Debug for Repository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Repository")
    }
}

impl Repository {
    /// Over `store`.
    pub fn new(store: Arc<dyn Store>) -> Repository {
        Repository { store }
    }

    /// The raw port (for adapters that layer over it, e.g. [`Scratch`]).
    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    // --- pool records ---

    /// Reads the pool record (`None` if the pool was never resolved).
    pub async fn pool(&self, pool: &str) -> Result<Option<PoolRecord>, PortError> {
        match self
            .store
            .get(&keys::pool_pk(pool), keys::POOL_STATE_SK)
            .await?
        {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.value)
                .map(Some)
                .map_err(|e| decode_error(&format!("pool record {pool}"), e)),
        }
    }

    /// Reads the pool record, applies `change`, passes the result through `stage` (which adds
    /// the transition's events to the outbox: [`crate::announce::stage`]) and writes it back
    /// conditionally, re-reading on a lost race. Returns the record before and after (as
    /// written). A record that `change` leaves equal is not written.
    pub async fn update_pool(
        &self,
        pool: &str,
        change: impl Fn(&PoolRecord) -> PoolRecord + Send + Sync,
        stage: impl Fn(&PoolRecord, PoolRecord) -> PoolRecord + Send + Sync,
    ) -> Result<(PoolRecord, PoolRecord), PortError> {
        let pk = keys::pool_pk(pool);
        let mut last = None;
        for attempt in 0..WRITE_ATTEMPTS {
            if attempt > 0 {
                self.store.backoff(attempt).await;
            }
            let (before, expected) = match self.store.get(&pk, keys::POOL_STATE_SK).await? {
                Some(v) => {
                    let rec: PoolRecord = serde_json::from_value(v.value)
                        .map_err(|e| decode_error(&format!("pool record {pool}"), e))?;
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
            let after = stage(&before, after);
            let doc = encode(&after)?;
            match self
                .store
                .put(&pk, keys::POOL_STATE_SK, &doc, expected, None)
                .await
            {
                Ok(_) => return Ok((before, after)),
                Err(e) if e.kind == ErrorKind::Conflict => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(too_many_conflicts))
    }

    // --- rotations ---

    /// Every rotation record of `pool` (unreadable ones are logged and skipped).
    pub async fn rotations(&self, pool: &str) -> Result<Vec<Versioned<Rotation>>, PortError> {
        let items = self
            .store
            .query(&keys::pool_pk(pool), keys::ROTATION_PREFIX)
            .await?;
        let mut out = Vec::new();
        for (sk, v) in items {
            match serde_json::from_value::<Rotation>(v.value) {
                Ok(r) => out.push(Versioned {
                    value: r,
                    version: v.version,
                }),
                Err(e) => {
                    tracing::error!(pool, sk = %sk, error = %e, "unreadable rotation record ignored")
                }
            }
        }
        Ok(out)
    }

    /// The pool record and every rotation record of `pool` in one Query of its partition (what
    /// a pass observes): an unreadable pool record fails, unreadable rotation records are
    /// logged and skipped (as [`Repository::pool`] and [`Repository::rotations`] do); other
    /// items are not returned.
    pub async fn pool_partition(
        &self,
        pool: &str,
    ) -> Result<(Option<PoolRecord>, Vec<Versioned<Rotation>>), PortError> {
        let mut record = None;
        let mut rotations = Vec::new();
        for (sk, v) in self.store.query(&keys::pool_pk(pool), "").await? {
            if sk == keys::POOL_STATE_SK {
                record = Some(
                    serde_json::from_value(v.value)
                        .map_err(|e| decode_error(&format!("pool record {pool}"), e))?,
                );
            } else if sk.starts_with(keys::ROTATION_PREFIX) {
                match serde_json::from_value::<Rotation>(v.value) {
                    Ok(r) => rotations.push(Versioned {
                        value: r,
                        version: v.version,
                    }),
                    Err(e) => {
                        tracing::error!(pool, sk = %sk, error = %e, "unreadable rotation record ignored")
                    }
                }
            }
        }
        Ok((record, rotations))
    }

    /// The rotation record of `instance` in `pool`: `None` when there is none; a record that
    /// cannot be read is there (its version, to replace it) with no value.
    pub async fn rotation(
        &self,
        pool: &str,
        instance: &str,
    ) -> Result<Option<Versioned<Option<Rotation>>>, PortError> {
        Ok(self
            .store
            .get(&keys::pool_pk(pool), &keys::rotation_sk(instance))
            .await?
            .map(|v| Versioned {
                value: serde_json::from_value(v.value).ok(),
                version: v.version,
            }))
    }

    /// Writes `rotation` as it is (its outbox included), conditionally on `expected` (`None`:
    /// the record must not exist), expiring at `ttl`; `Ok(None)` when another writer won.
    pub async fn put_rotation(
        &self,
        rotation: &Rotation,
        expected: Option<u64>,
        ttl: Option<DateTime<Utc>>,
    ) -> Result<Option<u64>, PortError> {
        let doc = encode(rotation)?;
        won(self
            .store
            .put(
                &keys::pool_pk(&rotation.pool),
                &keys::rotation_sk(&rotation.instance_id),
                &doc,
                expected,
                ttl,
            )
            .await)
    }

    // --- managed node group updates ---

    /// The pool's managed node group update record.
    pub async fn managed_update(
        &self,
        pool: &str,
    ) -> Result<Option<Versioned<ManagedUpdate>>, PortError> {
        let Some(v) = self
            .store
            .get(&keys::pool_pk(pool), keys::UPDATE_SK)
            .await?
        else {
            return Ok(None);
        };
        let value = serde_json::from_value(v.value).map_err(|e| {
            decode_error(&format!("unreadable node group update record of {pool}"), e)
        })?;
        Ok(Some(Versioned {
            value,
            version: v.version,
        }))
    }

    /// Writes `update` over `expected` (`None`: there must be none); `Ok(None)` when another
    /// writer won.
    pub async fn put_managed_update(
        &self,
        update: &ManagedUpdate,
        expected: Option<u64>,
    ) -> Result<Option<u64>, PortError> {
        let doc = encode(update)?;
        won(self
            .store
            .put(
                &keys::pool_pk(&update.pool),
                keys::UPDATE_SK,
                &doc,
                expected,
                None,
            )
            .await)
    }

    // --- leases ---

    /// Takes the lease `name` for `holder` until `now + ttl` if it is free, expired or already
    /// ours. Returns the current holder when someone else has it. The item expires a day after
    /// the lease.
    pub async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        now: DateTime<Utc>,
        ttl: chrono::Duration,
    ) -> Result<Result<(), Lease>, PortError> {
        let pk = keys::lease_pk(name);
        let current = self.store.get(&pk, keys::LEASE_SK).await?;
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
        let doc = encode(&Lease {
            holder: holder.to_string(),
            expires: now + ttl,
        })?;
        let expiry = Some(now + ttl + chrono::Duration::days(1));
        match self
            .store
            .put(&pk, keys::LEASE_SK, &doc, expected, expiry)
            .await
        {
            Ok(_) => Ok(Ok(())),
            Err(e) if e.kind == ErrorKind::Conflict => {
                // Someone wrote it first, or our own write landed and its answer was lost (the
                // SDK's retry then conflicts with it): the record says which.
                let now_held = self
                    .store
                    .get(&pk, keys::LEASE_SK)
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
        &self,
        name: &str,
        holder: &str,
        now: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let pk = keys::lease_pk(name);
        if let Some(v) = self.store.get(&pk, keys::LEASE_SK).await? {
            let ours = serde_json::from_value::<Lease>(v.value).is_ok_and(|l| l.holder == holder);
            if ours {
                let doc = encode(&Lease {
                    holder: holder.to_string(),
                    expires: now,
                })?;
                // Losing this race only means someone else took an expired lease: fine. Any
                // other failure is the caller's to retry: a lease left held stalls the cluster.
                let result = self
                    .store
                    .put(
                        &pk,
                        keys::LEASE_SK,
                        &doc,
                        Some(v.version),
                        Some(now + chrono::Duration::days(1)),
                    )
                    .await;
                won(result)?;
            }
        }
        Ok(())
    }

    // --- quarantine ---

    /// Every quarantine in force (lifted entries are kept for the audit, not returned).
    pub async fn quarantine(&self) -> Result<Quarantined, PortError> {
        let items = self
            .store
            .query(keys::QUARANTINE_PK, keys::QUARANTINE_PREFIX)
            .await?;
        let mut out = Vec::new();
        for (sk, v) in items {
            if lifted(&v.value) {
                continue;
            }
            match serde_json::from_value::<Quarantine>(v.value) {
                Ok(q) => out.push(q),
                Err(e) => {
                    tracing::error!(sk = %sk, error = %e, "unreadable quarantine item ignored")
                }
            }
        }
        Ok(Quarantined(out))
    }

    /// Records quarantine `q` (with the outbox it carries) unless its target is quarantined
    /// already: `Ok(false)` then (the first entry, with its reason, stays). A lifted entry of
    /// the same target is replaced.
    pub async fn put_quarantine(&self, q: &Quarantine) -> Result<bool, PortError> {
        let sk = keys::quarantine_sk(&q.target);
        let doc = encode(q)?;
        for _ in 0..WRITE_ATTEMPTS {
            let current = self.store.get(keys::QUARANTINE_PK, &sk).await?;
            let expected = match &current {
                None => None,
                Some(v) if lifted(&v.value) => Some(v.version),
                Some(_) => return Ok(false),
            };
            if won(self
                .store
                .put(keys::QUARANTINE_PK, &sk, &doc, expected, None)
                .await)?
            .is_some()
            {
                return Ok(true);
            }
        }
        Err(too_many_conflicts())
    }

    /// Lifts the quarantine of `target` (kept as an audit record with who/when/why);
    /// `Ok(false)` when it was not quarantined.
    pub async fn lift_quarantine(
        &self,
        target: &Target,
        by: &OperatorAction,
    ) -> Result<bool, PortError> {
        let sk = keys::quarantine_sk(target);
        for _ in 0..WRITE_ATTEMPTS {
            let Some(v) = self.store.get(keys::QUARANTINE_PK, &sk).await? else {
                return Ok(false);
            };
            if lifted(&v.value) {
                return Ok(false);
            }
            let mut doc = v.value.clone();
            doc["liftedAt"] = serde_json::json!(by.at);
            doc["liftedBy"] = serde_json::json!(by.by);
            doc["liftReason"] = serde_json::json!(by.reason);
            if won(self
                .store
                .put(keys::QUARANTINE_PK, &sk, &doc, Some(v.version), None)
                .await)?
            .is_some()
            {
                return Ok(true);
            }
        }
        Err(too_many_conflicts())
    }

    /// Removes the events `ids` (put on the bus) from the outbox of `target`'s quarantine
    /// item, re-reading on a lost race; the item's other fields are kept as they are.
    pub async fn remove_quarantine_events(
        &self,
        target: &Target,
        ids: &[String],
    ) -> Result<(), PortError> {
        if ids.is_empty() {
            return Ok(());
        }
        let sk = keys::quarantine_sk(target);
        for _ in 0..WRITE_ATTEMPTS {
            let Some(v) = self.store.get(keys::QUARANTINE_PK, &sk).await? else {
                return Ok(());
            };
            let outbox: Vec<BusEvent> = v
                .value
                .get("outbox")
                .and_then(|o| serde_json::from_value(o.clone()).ok())
                .unwrap_or_default();
            let kept = crate::bus::without(&outbox, ids);
            if kept.len() == outbox.len() {
                return Ok(());
            }
            let mut doc = v.value.clone();
            if let Some(map) = doc.as_object_mut() {
                if kept.is_empty() {
                    map.remove("outbox");
                } else {
                    map.insert("outbox".into(), encode(&kept)?);
                }
            }
            if won(self
                .store
                .put(keys::QUARANTINE_PK, &sk, &doc, Some(v.version), None)
                .await)?
            .is_some()
            {
                return Ok(());
            }
        }
        Err(too_many_conflicts())
    }

    // --- the stop switch ---

    /// Reads the switch: `Ok(None)` when absent or set to not stopped; an item whose `doc` is
    /// no switch counts as stopped, with that said in its reason.
    pub async fn stop_switch(&self) -> Result<Option<StopSwitch>, PortError> {
        let Some(item) = self.store.get(keys::DEPLOYMENT_PK, keys::STOP_SK).await? else {
            return Ok(None);
        };
        let switch = serde_json::from_value::<StopSwitch>(item.value.clone())
            .unwrap_or_else(|e| StopSwitch::unreadable(&e.to_string()));
        Ok(switch.stopped.then_some(switch))
    }

    /// [`Repository::stop_switch`] as the gate's message; a switch that cannot be read is a
    /// stop too (fail closed).
    pub async fn stop_gate(&self) -> Option<String> {
        match self.stop_switch().await {
            Ok(s) => s.map(|s| s.message()),
            Err(e) => {
                tracing::error!(error = %e, decision = "stopped", "cannot read the stop switch; holding every pool");
                Some(format!(
                    "cannot read the stop switch ({}/{}): {e}; holding every pool",
                    keys::DEPLOYMENT_PK,
                    keys::STOP_SK
                ))
            }
        }
    }

    /// Sets the switch to `switch` (conditional write, re-read on a lost race). Returns the
    /// switch before (`None`: absent or not stopped) and whether the write changed anything:
    /// flipping to the state it is already in keeps the first record (who stopped, and why).
    pub async fn set_stop_switch(
        &self,
        switch: &StopSwitch,
    ) -> Result<(Option<StopSwitch>, bool), PortError> {
        let mut last = None;
        for attempt in 0..WRITE_ATTEMPTS {
            if attempt > 0 {
                self.store.backoff(attempt).await;
            }
            let current = self.store.get(keys::DEPLOYMENT_PK, keys::STOP_SK).await?;
            let before = current
                .as_ref()
                .and_then(|v| serde_json::from_value::<StopSwitch>(v.value.clone()).ok());
            let was_stopped = match (&current, &before) {
                (None, _) => false,
                (Some(_), Some(b)) => b.stopped,
                (Some(_), None) => true,
            };
            let before = before.filter(|b| b.stopped);
            if current.is_some() && was_stopped == switch.stopped {
                return Ok((before, false));
            }
            if current.is_none() && !switch.stopped {
                return Ok((None, false));
            }
            let doc = encode(switch)?;
            match self
                .store
                .put(
                    keys::DEPLOYMENT_PK,
                    keys::STOP_SK,
                    &doc,
                    current.map(|v| v.version),
                    None,
                )
                .await
            {
                Ok(_) => return Ok((before, true)),
                Err(e) if e.kind == ErrorKind::Conflict => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(too_many_conflicts))
    }

    // --- ops audit and requests ---

    /// Writes the audit record of request `request_id` received at `now` (a new item, expiring
    /// at `ttl`) under `scope`.
    pub async fn audit_start(
        &self,
        scope: AuditScope<'_>,
        request_id: &str,
        doc: &Value,
        now: DateTime<Utc>,
        ttl: DateTime<Utc>,
    ) -> Result<AuditRecord, PortError> {
        let pk = scope.partition();
        let sk = keys::audit_sk(now, request_id);
        let version = self.store.put(&pk, &sk, doc, None, Some(ttl)).await?;
        Ok(AuditRecord { pk, sk, version })
    }

    /// Replaces the audit record `audit` (as written by [`Repository::audit_start`]) with
    /// `doc`, conditionally on that write.
    pub async fn audit_finish(
        &self,
        audit: &AuditRecord,
        doc: &Value,
        ttl: DateTime<Utc>,
    ) -> Result<(), PortError> {
        self.store
            .put(&audit.pk, &audit.sk, doc, Some(audit.version), Some(ttl))
            .await
            .map(|_| ())
    }

    /// The record of an earlier `ops rotate` request of `pool` whose parameters hash to
    /// `hash`.
    pub async fn rotate_request(
        &self,
        pool: &str,
        hash: u64,
    ) -> Result<Option<Versioned<Value>>, PortError> {
        self.store
            .get(&keys::pool_pk(pool), &keys::rotate_request_sk(hash))
            .await
    }

    /// Records an `ops rotate` request (over the `expected` version of the earlier one).
    pub async fn put_rotate_request(
        &self,
        pool: &str,
        hash: u64,
        doc: &Value,
        expected: Option<u64>,
        ttl: DateTime<Utc>,
    ) -> Result<u64, PortError> {
        self.store
            .put(
                &keys::pool_pk(pool),
                &keys::rotate_request_sk(hash),
                doc,
                expected,
                Some(ttl),
            )
            .await
    }

    // --- interruption handler: claims, lifecycle hand-over, event log ---

    /// The claim item `key`.
    pub async fn claim(&self, key: &ClaimKey) -> Result<Option<Versioned<Value>>, PortError> {
        let (pk, sk) = key.keys();
        self.store.get(&pk, &sk).await
    }

    /// Writes claim `key` over `expected` (`None`: it must not exist), expiring at `ttl`;
    /// `Ok(None)` when another writer won.
    pub async fn put_claim(
        &self,
        key: &ClaimKey,
        doc: &Value,
        expected: Option<u64>,
        ttl: DateTime<Utc>,
    ) -> Result<Option<u64>, PortError> {
        let (pk, sk) = key.keys();
        won(self.store.put(&pk, &sk, doc, expected, Some(ttl)).await)
    }

    /// Every lifecycle action of `pool` handed over to the rotator, with its version.
    pub async fn lifecycle_handovers(
        &self,
        pool: &str,
    ) -> Result<Vec<Versioned<Value>>, PortError> {
        Ok(self
            .store
            .query(&keys::pool_pk(pool), keys::LIFECYCLE_PREFIX)
            .await?
            .into_iter()
            .map(|(_, v)| v)
            .collect())
    }

    /// Writes the lifecycle hand-over record of `instance` over `expected` (`None`: it must
    /// not exist), expiring at `ttl`; `Ok(None)` when another writer won.
    pub async fn put_lifecycle_handover(
        &self,
        pool: &str,
        instance: &str,
        doc: &Value,
        expected: Option<u64>,
        ttl: DateTime<Utc>,
    ) -> Result<Option<u64>, PortError> {
        won(self
            .store
            .put(
                &keys::pool_pk(pool),
                &keys::lifecycle_sk(instance),
                doc,
                expected,
                Some(ttl),
            )
            .await)
    }

    /// Appends an entry to `pool`'s interruption event log about `instance` at `time`: a new
    /// item, or, when one already has that second, a second item suffixed with `tail`.
    pub async fn log_event(
        &self,
        pool: &str,
        time: DateTime<Utc>,
        instance: &str,
        tail: &str,
        doc: &Value,
        ttl: DateTime<Utc>,
    ) -> Result<(), PortError> {
        let pk = keys::pool_pk(pool);
        let sk = keys::event_sk(time, instance);
        match self.store.put(&pk, &sk, doc, None, Some(ttl)).await {
            Err(e) if e.kind == ErrorKind::Conflict => self
                .store
                .put(&pk, &format!("{sk}#{tail}"), doc, None, Some(ttl))
                .await
                .map(|_| ()),
            other => other.map(|_| ()),
        }
    }

    /// `pool`'s interruption event log: `(id, entry)`, oldest first.
    pub async fn event_log(&self, pool: &str) -> Result<Vec<(String, Value)>, PortError> {
        Ok(self
            .store
            .query(&keys::pool_pk(pool), keys::EVENT_LOG_PREFIX)
            .await?
            .into_iter()
            .map(|(sk, v)| (sk, v.value))
            .collect())
    }
}
