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

/// One rotation record to write: the record, the version it must be at (`None`: absent), its
/// expiry.
pub type RotationWrite = (Rotation, Option<u64>, Option<DateTime<Utc>>);

/// A pool's records as a pass reads them ([`Repository::pool_partitions`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolRead {
    /// The pool record with its version (`None`: never written).
    pub record: Option<Versioned<PoolRecord>>,
    /// Every rotation record of the pool with its version.
    pub rotations: Vec<Versioned<Rotation>>,
}

/// Key-value document storage with optimistic concurrency (the DynamoDB table): the raw port
/// behind [`Repository`]. Nothing else calls it.
#[async_trait]
pub trait Store: Send + Sync {
    /// Reads one item (strongly consistent).
    async fn get(&self, pk: &str, sk: &str) -> Result<Option<Versioned<Value>>, PortError>;

    /// Writes one item if its current version is `expected` (`None` = the item must not exist).
    /// Returns the new version. A lost race is a [`crate::port::ErrorKind::Conflict`] error.
    /// The default applies it as a [`Store::transact`] of that one [`TxWrite::Put`]; a store
    /// with a cheaper single write (the table's PutItem) writes it itself.
    async fn put(
        &self,
        pk: &str,
        sk: &str,
        doc: &Value,
        expected: Option<u64>,
        ttl: Option<DateTime<Utc>>,
    ) -> Result<u64, PortError> {
        let write = TxWrite::Put {
            pk: pk.to_string(),
            sk: sk.to_string(),
            doc: doc.clone(),
            expected,
            ttl,
        };
        self.transact(std::slice::from_ref(&write)).await?;
        Ok(next_version(expected))
    }

    /// Waits before attempt `attempt` (1-based) of a conditional write that lost a race, so
    /// that contenders spread out; the default does not wait.
    async fn backoff(&self, _attempt: usize) {}

    /// Every item of partition `pk` whose sort key starts with `sk_prefix`, all pages.
    async fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> Result<Vec<(String, Versioned<Value>)>, PortError>;

    /// Reads the items of up to [`BATCH_GET_LIMIT`] `keys` in one call (strongly consistent,
    /// DynamoDB's BatchGetItem): those found, and the keys the service left unprocessed (to
    /// ask again; [`Repository`] does, with [`Store::backoff`]). A key with no item is in
    /// neither.
    async fn batch_get(&self, keys: &[Key]) -> Result<BatchRead, PortError>;

    /// Applies every write of `writes` or none (DynamoDB's TransactWriteItems): each
    /// [`TxWrite::Put`] conditional on its version as [`Store::put`] is, each
    /// [`TxWrite::Check`] a condition only. One failed condition fails them all with a
    /// [`crate::port::ErrorKind::Conflict`] error. At most [`TRANSACT_LIMIT`] writes, each on
    /// another item.
    async fn transact(&self, writes: &[TxWrite]) -> Result<(), PortError>;
}

/// An item's key: (`pk`, `sk`).
pub type Key = (String, String);

/// Keys one [`Store::batch_get`] reads at most (DynamoDB's limit).
pub const BATCH_GET_LIMIT: usize = 100;

/// Writes one [`Store::transact`] applies at most (DynamoDB's limit).
pub const TRANSACT_LIMIT: usize = 100;

/// How many times [`Repository`] asks again for keys a batch read left unprocessed before
/// the read fails as throttled.
pub const BATCH_ATTEMPTS: usize = 8;

/// What one [`Store::batch_get`] answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchRead {
    /// The items found, by key.
    pub items: Vec<(Key, Versioned<Value>)>,
    /// Keys the service did not read this time (throttled or over its answer size).
    pub unprocessed: Vec<Key>,
}

/// `Ok` when the item at (`pk`, `sk`) is at `expected` (`None`: absent): `current`, as `op`
/// read it; else the [`crate::port::ErrorKind::Conflict`] of a lost race.
pub fn check_version(
    op: &str,
    pk: &str,
    sk: &str,
    current: Option<u64>,
    expected: Option<u64>,
) -> Result<(), PortError> {
    if current == expected {
        return Ok(());
    }
    Err(PortError::new(
        op,
        ErrorKind::Conflict,
        format!("{pk}/{sk} is at version {current:?}, not {expected:?}"),
    ))
}

/// The version a conditional write over `expected` (`None`: absent) gives the item: one
/// more, 1 for a new item.
pub fn next_version(expected: Option<u64>) -> u64 {
    expected.map_or(1, |v| v + 1)
}

/// A put of a transaction as written ([`TxWrite::written`]): `pk`, `sk`, document, new
/// version, expiry.
pub type Written<'a> = (&'a str, &'a str, &'a Value, u64, Option<DateTime<Utc>>);

/// One write of a [`Store::transact`].
#[derive(Debug, Clone, PartialEq)]
pub enum TxWrite {
    /// Writes `doc` at (`pk`, `sk`) if the item is at version `expected` (`None`: it must
    /// not exist), expiring at `ttl`; the new version is `expected + 1` (1 for a new item).
    Put {
        /// Partition key.
        pk: String,
        /// Sort key.
        sk: String,
        /// The document.
        doc: Value,
        /// The version the item must be at (`None`: absent).
        expected: Option<u64>,
        /// When the table expires it.
        ttl: Option<DateTime<Utc>>,
    },
    /// Writes nothing: only requires the item at (`pk`, `sk`) to be at version `expected`
    /// (`None`: absent).
    Check {
        /// Partition key.
        pk: String,
        /// Sort key.
        sk: String,
        /// The version the item must be at (`None`: absent).
        expected: Option<u64>,
    },
}

impl TxWrite {
    /// The item it is about and the version it requires.
    pub fn condition(&self) -> (&str, &str, Option<u64>) {
        match self {
            TxWrite::Put {
                pk, sk, expected, ..
            }
            | TxWrite::Check { pk, sk, expected } => (pk, sk, *expected),
        }
    }

    /// `Ok` when the item is at the version it requires (`current`, as `op` read it); else the
    /// [`crate::port::ErrorKind::Conflict`] that fails the transaction.
    pub fn check(&self, op: &str, current: Option<u64>) -> Result<(), PortError> {
        let (pk, sk, expected) = self.condition();
        check_version(op, pk, sk, current, expected)
    }

    /// A put's item as written: key, document, new version, expiry (`None` for a check).
    pub fn written(&self) -> Option<Written<'_>> {
        match self {
            TxWrite::Put {
                pk,
                sk,
                doc,
                expected,
                ttl,
            } => Some((pk, sk, doc, next_version(*expected), *ttl)),
            TxWrite::Check { .. } => None,
        }
    }
}

/// What a read-modify-write of one item does with the item as read.
enum Rewrite<T> {
    /// Writes nothing: the answer is `T`.
    Keep(T),
    /// Writes the document over the version (`None`: absent); the answer, once written, is
    /// `T`.
    Write(Value, Option<u64>, T),
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

fn decode_pool(pool: &str, v: Versioned<Value>) -> Result<Versioned<PoolRecord>, PortError> {
    Ok(Versioned {
        value: serde_json::from_value(v.value)
            .map_err(|e| decode_error(&format!("pool record {pool}"), e))?,
        version: v.version,
    })
}

fn decode_update(pool: &str, v: Versioned<Value>) -> Result<Versioned<ManagedUpdate>, PortError> {
    let value = serde_json::from_value(v.value)
        .map_err(|e| decode_error(&format!("unreadable node group update record of {pool}"), e))?;
    Ok(Versioned {
        value,
        version: v.version,
    })
}

/// A rotation record as read (`None`, logged: unreadable).
fn decode_rotation(pool: &str, sk: &str, v: Versioned<Value>) -> Option<Versioned<Rotation>> {
    match serde_json::from_value::<Rotation>(v.value) {
        Ok(r) => Some(Versioned {
            value: r,
            version: v.version,
        }),
        Err(e) => {
            tracing::error!(pool, sk = %sk, error = %e, "unreadable rotation record ignored");
            None
        }
    }
}

/// The write of pool record `state` (as read) that goes with creating the rotation record of
/// `instance`: the record at its next version with `instance` in its index when it has one
/// (its document otherwise as it is, fields this version does not know kept); for a pool with
/// no record, a check that it still has none.
fn indexed_state(pk: &str, state: Option<Versioned<Value>>, instance: &str) -> TxWrite {
    let Some(v) = state else {
        return TxWrite::Check {
            pk: pk.to_string(),
            sk: keys::POOL_STATE_SK.to_string(),
            expected: None,
        };
    };
    let mut doc = v.value;
    if let Some(Value::Array(ids)) = doc.get_mut("rotationIndex") {
        let id = Value::String(instance.to_string());
        if !ids.contains(&id) {
            ids.push(id);
            ids.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
        }
    }
    TxWrite::Put {
        pk: pk.to_string(),
        sk: keys::POOL_STATE_SK.to_string(),
        doc,
        expected: Some(v.version),
        ttl: None,
    }
}

/// Passes between two checks of a pool's rotation index against its partition.
pub const INDEX_CHECK_EVERY: i64 = 60;

/// Whether the pass at `now` queries `pool`'s partition although its record has a rotation
/// index: once every [`INDEX_CHECK_EVERY`] minutes per pool (spread over the hour by the
/// pool's name), so that a rotation record some writer created without indexing it (an
/// earlier version during an upgrade, a hand edit) is found within the hour.
pub fn index_check_due(pool: &str, now: DateTime<Utc>) -> bool {
    // FNV-1a: stable across processes and versions (std's hasher is neither).
    let hash = pool.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let offset = i64::try_from(hash % 60).unwrap_or(0);
    (now.timestamp() / 60 + offset).rem_euclid(INDEX_CHECK_EVERY) == 0
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
    /// a pass observes when it reads one pool alone): an unreadable pool record fails,
    /// unreadable rotation records are logged and skipped (as [`Repository::pool`] and
    /// [`Repository::rotations`] do); other items are not returned.
    pub async fn pool_partition(&self, pool: &str) -> Result<PoolRead, PortError> {
        let mut read = PoolRead::default();
        for (sk, v) in self.store.query(&keys::pool_pk(pool), "").await? {
            if sk == keys::POOL_STATE_SK {
                read.record = Some(decode_pool(pool, v)?);
            } else if sk.starts_with(keys::ROTATION_PREFIX) {
                read.rotations.extend(decode_rotation(pool, &sk, v));
            }
        }
        Ok(read)
    }

    /// Items of `keys` in batches of [`BATCH_GET_LIMIT`] (strongly consistent), asking again
    /// for what a batch left unprocessed (after [`Store::backoff`], at most
    /// [`BATCH_ATTEMPTS`] times; then the read fails as throttled).
    pub async fn batch_get(
        &self,
        keys: &[Key],
    ) -> Result<std::collections::BTreeMap<Key, Versioned<Value>>, PortError> {
        let mut wanted: Vec<Key> = keys.to_vec();
        wanted.sort();
        wanted.dedup();
        let mut out = std::collections::BTreeMap::new();
        for batch in wanted.chunks(BATCH_GET_LIMIT) {
            let mut left = batch.to_vec();
            let mut attempt = 0;
            while !left.is_empty() {
                if attempt == BATCH_ATTEMPTS {
                    return Err(PortError::new(
                        "state:batch_get",
                        ErrorKind::Throttled,
                        format!(
                            "{} keys still unprocessed after {BATCH_ATTEMPTS} attempts",
                            left.len()
                        ),
                    ));
                }
                if attempt > 0 {
                    self.store.backoff(attempt).await;
                }
                attempt += 1;
                let read = self.store.batch_get(&left).await?;
                out.extend(read.items);
                left = read.unprocessed;
            }
        }
        Ok(out)
    }

    /// What a pass observes of `pools` (one cluster's), read in batches: every pool record
    /// with its version (BatchGetItem, 100 a call), then the rotation records its index names
    /// (the same way). A pool whose record has no index (written before it, or by an earlier
    /// version), or has no record, or whose turn of the hourly check it is
    /// ([`index_check_due`]), is queried instead (one Query of its partition, as
    /// [`Repository::pool_partition`]), after its record was read: what the Query finds is
    /// then every rotation record created up to that version. With `maintain` the index is
    /// set to what was found (a record without one gets it; an id whose record expired is
    /// dropped) by a write conditional on the version read: a writer that created a rotation
    /// since bumped it, so the write loses and the index stays as that writer left it. Every
    /// pool of `pools` has an entry.
    pub async fn pool_partitions(
        &self,
        pools: &[String],
        maintain: bool,
        now: DateTime<Utc>,
    ) -> std::collections::BTreeMap<String, Result<PoolRead, PortError>> {
        use std::collections::{BTreeMap, BTreeSet};
        let mut out: BTreeMap<String, Result<PoolRead, PortError>> = BTreeMap::new();
        let state_key = |p: &str| (keys::pool_pk(p), keys::POOL_STATE_SK.to_string());
        let state_keys: Vec<Key> = pools.iter().map(|p| state_key(p)).collect();
        let states = self.batch_get(&state_keys).await.map_err(|e| {
            tracing::warn!(error = %e, pools = pools.len(), "cannot read the pool records in batches; reading each pool's partition");
        });
        // Per pool: its record as the batch read it, and the rotation ids to read by key
        // (`None`: query the partition).
        type Wanted = (Option<Versioned<PoolRecord>>, Option<BTreeSet<String>>);
        let mut wanted: BTreeMap<String, Wanted> = BTreeMap::new();
        for pool in pools {
            let Ok(states) = &states else {
                wanted.insert(pool.clone(), (None, None));
                continue;
            };
            let record = match states
                .get(&state_key(pool))
                .cloned()
                .map(|v| decode_pool(pool, v))
            {
                None => None,
                Some(Ok(r)) => Some(r),
                Some(Err(e)) => {
                    out.insert(pool.clone(), Err(e));
                    continue;
                }
            };
            let by_key = record
                .as_ref()
                .and_then(|r| r.value.rotation_index.clone())
                .filter(|_| !index_check_due(pool, now));
            wanted.insert(pool.clone(), (record, by_key));
        }
        let rotation_keys: Vec<Key> = wanted
            .iter()
            .flat_map(|(pool, (_, ids))| {
                ids.iter()
                    .flatten()
                    .map(|id| (keys::pool_pk(pool), keys::rotation_sk(id)))
            })
            .collect();
        let mut by_key = match self.batch_get(&rotation_keys).await {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, keys = rotation_keys.len(), "cannot read the rotation records in batches; reading each pool's partition");
                None
            }
        };
        // Each fix: the pool, its record as read, the index it should have.
        let mut fixes: Vec<(String, Versioned<PoolRecord>, BTreeSet<String>)> = Vec::new();
        let queried: Vec<(String, Option<Versioned<PoolRecord>>)> = wanted
            .iter()
            .filter(|(_, (_, ids))| ids.is_none() || by_key.is_none())
            .map(|(pool, (record, _))| (pool.clone(), record.clone()))
            .collect();
        let answers =
            futures::future::join_all(queried.into_iter().map(|(pool, record)| async move {
                let read = self.pool_partition(&pool).await;
                (pool, record, read)
            }))
            .await;
        for (pool, record, read) in answers {
            wanted.remove(&pool);
            if let (Ok(q), Some(r)) = (&read, record) {
                // Read after `r`: every rotation record created up to its version.
                let found: BTreeSet<String> = q
                    .rotations
                    .iter()
                    .map(|v| v.value.instance_id.clone())
                    .collect();
                if r.value.rotation_index.as_ref() != Some(&found) {
                    fixes.push((pool.clone(), r, found));
                }
            }
            out.insert(pool, read);
        }
        for (pool, (record, ids)) in wanted {
            let mut read = PoolRead {
                record,
                rotations: Vec::new(),
            };
            let mut absent = BTreeSet::new();
            for id in ids.iter().flatten() {
                let key = (keys::pool_pk(&pool), keys::rotation_sk(id));
                match by_key.as_mut().and_then(|r| r.remove(&key)) {
                    Some(v) => read.rotations.extend(decode_rotation(&pool, &key.1, v)),
                    None => {
                        absent.insert(id.clone());
                    }
                }
            }
            if let (Some(r), Some(ids)) = (&read.record, &ids)
                && !absent.is_empty()
            {
                fixes.push((
                    pool.clone(),
                    r.clone(),
                    ids.difference(&absent).cloned().collect(),
                ));
            }
            out.insert(pool, Ok(read));
        }
        if maintain {
            for (pool, record, index) in fixes {
                if let Some(version) = self.set_rotation_index(&pool, &record, index.clone()).await
                    && let Some(Ok(read)) = out.get_mut(&pool)
                {
                    read.record = Some(Versioned {
                        value: PoolRecord {
                            rotation_index: Some(index),
                            ..record.value
                        },
                        version,
                    });
                }
            }
        }
        out
    }

    /// Writes `index` as the rotation index of `pool`'s record `record` (as read), conditional
    /// on its version; the new version, `None` when another writer changed the record first
    /// (its index stays as that writer left it) or the write failed (logged; next pass).
    async fn set_rotation_index(
        &self,
        pool: &str,
        record: &Versioned<PoolRecord>,
        index: std::collections::BTreeSet<String>,
    ) -> Option<u64> {
        let next = PoolRecord {
            rotation_index: Some(index),
            ..record.value.clone()
        };
        let doc = encode(&next).ok()?;
        let result = self
            .store
            .put(
                &keys::pool_pk(pool),
                keys::POOL_STATE_SK,
                &doc,
                Some(record.version),
                None,
            )
            .await;
        match won(result) {
            Ok(Some(v)) => {
                tracing::info!(pool, rotations = %crate::log_field::json(&next.rotation_index), decision = "rotation index recorded", "the pass reads these rotation records by key");
                Some(v)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(pool, error = %e, "cannot record the rotation index; the pool's partition is queried again next pass");
                None
            }
        }
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
    ///
    /// A new record (`expected` `None`) is written in one transaction with the pool record,
    /// which gets the rotation's id in its index ([`PoolRecord::rotation_index`]) and a new
    /// version either way (so a pass that read the record before, and found no such
    /// rotation, cannot then record an index without it); a pool with no record only has its
    /// absence checked. A pool record changed by another writer meanwhile is read again.
    pub async fn put_rotation(
        &self,
        rotation: &Rotation,
        expected: Option<u64>,
        ttl: Option<DateTime<Utc>>,
    ) -> Result<Option<u64>, PortError> {
        let doc = encode(rotation)?;
        let pk = keys::pool_pk(&rotation.pool);
        let sk = keys::rotation_sk(&rotation.instance_id);
        if expected.is_some() {
            return won(self.store.put(&pk, &sk, &doc, expected, ttl).await);
        }
        let mut last = None;
        for attempt in 0..WRITE_ATTEMPTS {
            if attempt > 0 {
                self.store.backoff(attempt).await;
            }
            let state = self.store.get(&pk, keys::POOL_STATE_SK).await?;
            let indexed = indexed_state(&pk, state, &rotation.instance_id);
            let writes = [
                TxWrite::Put {
                    pk: pk.clone(),
                    sk: sk.clone(),
                    doc: doc.clone(),
                    expected: None,
                    ttl,
                },
                indexed,
            ];
            match self.store.transact(&writes).await {
                Ok(()) => return Ok(Some(1)),
                Err(e) if e.kind == ErrorKind::Conflict => {
                    // The rotation's own condition lost (another writer created it), or only
                    // the pool record's (read it again).
                    if self.store.get(&pk, &sk).await?.is_some() {
                        return Ok(None);
                    }
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(too_many_conflicts))
    }

    /// Writes `record` (read at `version`) and the rotation records `rotations` (each
    /// `(rotation, expected, ttl)`, `expected` as in [`Repository::put_rotation`]) in one
    /// transaction: all or none. The pool record gets the new rotations' ids in its index
    /// (when it has one). `Ok(None)` when a condition failed (another writer changed one of
    /// them since it was read: read again); else the pool record's new version. At most
    /// [`TRANSACT_LIMIT`] - 1 rotations.
    pub async fn put_pool_and_rotations(
        &self,
        record: &PoolRecord,
        version: u64,
        rotations: &[RotationWrite],
    ) -> Result<Option<(PoolRecord, u64)>, PortError> {
        if rotations.len() >= TRANSACT_LIMIT {
            return Err(PortError::new(
                "state:transact",
                ErrorKind::Invalid,
                format!("{} rotation records in one transaction", rotations.len()),
            ));
        }
        let pk = keys::pool_pk(&record.pool);
        let mut record = record.clone();
        if let Some(ix) = record.rotation_index.as_mut() {
            ix.extend(rotations.iter().map(|(r, _, _)| r.instance_id.clone()));
        }
        let mut writes = Vec::with_capacity(rotations.len() + 1);
        for (r, expected, ttl) in rotations {
            if r.pool != record.pool {
                return Err(PortError::new(
                    "state:transact",
                    ErrorKind::Invalid,
                    format!("rotation of {} written with pool {}", r.pool, record.pool),
                ));
            }
            writes.push(TxWrite::Put {
                pk: pk.clone(),
                sk: keys::rotation_sk(&r.instance_id),
                doc: encode(r)?,
                expected: *expected,
                ttl: *ttl,
            });
        }
        writes.push(TxWrite::Put {
            pk,
            sk: keys::POOL_STATE_SK.to_string(),
            doc: encode(&record)?,
            expected: Some(version),
            ttl: None,
        });
        match self.store.transact(&writes).await {
            Ok(()) => Ok(Some((record, version + 1))),
            Err(e) if e.kind == ErrorKind::Conflict => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replaces rotation records that exist (each `(rotation, expected, ttl)`, conditional on
    /// its version), up to [`TRANSACT_LIMIT`] in one transaction; when a transaction loses a
    /// race, its records one at a time. The new version of each record written (`None`: lost
    /// to another writer, or failed: logged).
    pub async fn replace_rotations(
        &self,
        rotations: &[(Rotation, u64, Option<DateTime<Utc>>)],
    ) -> Vec<Option<u64>> {
        let mut out = Vec::with_capacity(rotations.len());
        for chunk in rotations.chunks(TRANSACT_LIMIT) {
            let writes: Result<Vec<TxWrite>, PortError> = chunk
                .iter()
                .map(|(r, expected, ttl)| {
                    Ok(TxWrite::Put {
                        pk: keys::pool_pk(&r.pool),
                        sk: keys::rotation_sk(&r.instance_id),
                        doc: encode(r)?,
                        expected: Some(*expected),
                        ttl: *ttl,
                    })
                })
                .collect();
            let together = match writes {
                Ok(w) if w.len() > 1 => self.store.transact(&w).await,
                _ => Err(PortError::new(
                    "state:transact",
                    ErrorKind::Conflict,
                    "one at a time",
                )),
            };
            if together.is_ok() {
                out.extend(chunk.iter().map(|(_, v, _)| Some(v + 1)));
                continue;
            }
            for (r, expected, ttl) in chunk {
                match self.put_rotation(r, Some(*expected), *ttl).await {
                    Ok(v) => out.push(v),
                    Err(e) => {
                        tracing::warn!(pool = %r.pool, instance = %r.instance_id, error = %e, "cannot replace the rotation record");
                        out.push(None);
                    }
                }
            }
        }
        out
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
        decode_update(pool, v).map(Some)
    }

    /// The managed node group update records of `pools`, read in batches
    /// ([`Repository::batch_get`]): each pool's as [`Repository::managed_update`] reads it.
    /// Every pool has an entry; a batch that fails is the error of its pools.
    pub async fn managed_updates(
        &self,
        pools: &[String],
    ) -> std::collections::BTreeMap<String, Result<Option<Versioned<ManagedUpdate>>, PortError>>
    {
        let key = |p: &str| (keys::pool_pk(p), keys::UPDATE_SK.to_string());
        let wanted: Vec<Key> = pools.iter().map(|p| key(p)).collect();
        match self.batch_get(&wanted).await {
            Ok(mut read) => pools
                .iter()
                .map(|p| {
                    let update = read
                        .remove(&key(p))
                        .map(|v| decode_update(p, v))
                        .transpose();
                    (p.clone(), update)
                })
                .collect(),
            Err(e) => pools.iter().map(|p| (p.clone(), Err(e.clone()))).collect(),
        }
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
        let doc = encode(q)?;
        self.rewrite_quarantine(&q.target, |current| {
            Ok(match current {
                None => Rewrite::Write(doc.clone(), None, true),
                Some(v) if lifted(&v.value) => Rewrite::Write(doc.clone(), Some(v.version), true),
                Some(_) => Rewrite::Keep(false),
            })
        })
        .await
    }

    /// Lifts the quarantine of `target` (kept as an audit record with who/when/why);
    /// `Ok(false)` when it was not quarantined.
    pub async fn lift_quarantine(
        &self,
        target: &Target,
        by: &OperatorAction,
    ) -> Result<bool, PortError> {
        self.rewrite_quarantine(target, |current| {
            let Some(v) = current.filter(|v| !lifted(&v.value)) else {
                return Ok(Rewrite::Keep(false));
            };
            let mut doc = v.value;
            doc["liftedAt"] = serde_json::json!(by.at);
            doc["liftedBy"] = serde_json::json!(by.by);
            doc["liftReason"] = serde_json::json!(by.reason);
            Ok(Rewrite::Write(doc, Some(v.version), true))
        })
        .await
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
        self.rewrite_quarantine(target, |current| {
            let Some(v) = current else {
                return Ok(Rewrite::Keep(()));
            };
            let outbox: Vec<BusEvent> = v
                .value
                .get("outbox")
                .and_then(|o| serde_json::from_value(o.clone()).ok())
                .unwrap_or_default();
            let kept = crate::bus::without(&outbox, ids);
            if kept.len() == outbox.len() {
                return Ok(Rewrite::Keep(()));
            }
            let mut doc = v.value;
            if let Some(map) = doc.as_object_mut() {
                if kept.is_empty() {
                    map.remove("outbox");
                } else {
                    map.insert("outbox".into(), encode(&kept)?);
                }
            }
            Ok(Rewrite::Write(doc, Some(v.version), ()))
        })
        .await
    }

    /// Reads `target`'s quarantine item, lets `decide` say what to do with it (as read,
    /// `None`: absent) and writes what it says conditionally on that read, reading again on
    /// a lost race, at most [`WRITE_ATTEMPTS`] times.
    async fn rewrite_quarantine<T>(
        &self,
        target: &Target,
        decide: impl Fn(Option<Versioned<Value>>) -> Result<Rewrite<T>, PortError> + Send + Sync,
    ) -> Result<T, PortError>
    where
        T: Send,
    {
        let sk = keys::quarantine_sk(target);
        for _ in 0..WRITE_ATTEMPTS {
            let current = self.store.get(keys::QUARANTINE_PK, &sk).await?;
            let (doc, expected, then) = match decide(current)? {
                Rewrite::Keep(out) => return Ok(out),
                Rewrite::Write(doc, expected, then) => (doc, expected, then),
            };
            if won(self
                .store
                .put(keys::QUARANTINE_PK, &sk, &doc, expected, None)
                .await)?
            .is_some()
            {
                return Ok(then);
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
        let (pk, sk) = (keys::pool_pk(pool), keys::rotate_request_sk(hash));
        self.store.put(&pk, &sk, doc, expected, Some(ttl)).await
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
        let (pk, sk) = (keys::pool_pk(pool), keys::lifecycle_sk(instance));
        won(self.store.put(&pk, &sk, doc, expected, Some(ttl)).await)
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
