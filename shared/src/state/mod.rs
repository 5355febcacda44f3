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

mod audit;
mod interruption;
pub mod keys;
mod leases;
mod managed_updates;
pub mod memory;
mod parameters;
mod pools;
mod quarantine;
pub mod record;
mod scratch;
mod stop_switch;
#[cfg(all(test, feature = "aws"))]
mod tests;

pub use audit::{AuditRecord, AuditScope};
pub use interruption::ClaimKey;
pub use parameters::SeenParameter;
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
}
