//! An in-memory [`Store`] that behaves as the table does (conditional writes on versions,
//! sort-key prefix queries in key order, at most [`BATCH_GET_LIMIT`] keys a batch read),
//! recording each item's TTL so tests can check it, counting its calls by operation, and
//! with the table's faults on a test's demand: a hook just before the next call of an
//! operation, another writer winning the next write of an item, an operation that fails.
//! Tests use it as the table; [`super::Scratch`] keeps its writes in one.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{
    BATCH_GET_LIMIT, BatchRead, Key, Store, TxWrite, Versioned, check_version, next_version,
};
use crate::port::{ErrorKind, PortError};

/// One stored item.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The document and its version.
    pub doc: Versioned<Value>,
    /// When the table would expire it.
    pub ttl: Option<DateTime<Utc>>,
}

/// What [`MemoryStore::before`] runs on the table, once.
type Hook = Box<dyn FnOnce(&MemoryStore) + Send>;

/// The calls of a [`MemoryStore`] by operation, and the faults a test asked for.
#[derive(Default)]
struct Watch {
    calls: BTreeMap<&'static str, u32>,
    /// The hook that runs before the next call of an operation.
    before: Option<(&'static str, Hook)>,
    /// Operations that fail, with the error kind.
    failing: BTreeMap<&'static str, ErrorKind>,
    /// Items another writer rewrites just before this store's next write of them.
    racing: Vec<Key>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("calls", &self.calls)
            .field("before", &self.before.as_ref().map(|(op, _)| op))
            .field("failing", &self.failing)
            .field("racing", &self.racing)
            .finish()
    }
}

/// The table in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    items: Mutex<BTreeMap<(String, String), Item>>,
    /// Batch reads still to answer only their first key (the rest unprocessed).
    unprocessed: Mutex<usize>,
    watch: Mutex<Watch>,
}

impl MemoryStore {
    /// An empty table.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    /// Every item, by (`pk`, `sk`).
    pub fn items(&self) -> BTreeMap<(String, String), Item> {
        self.items.lock().map(|i| i.clone()).unwrap_or_default()
    }

    /// Every item of partition `pk` (all sort keys, in key order), for assertions.
    pub fn partition(&self, pk: &str) -> Vec<(String, Value)> {
        self.items()
            .into_iter()
            .filter(|((p, _), _)| p == pk)
            .map(|((_, sk), i)| (sk, i.doc.value))
            .collect()
    }

    /// The item at (`pk`, `sk`).
    pub fn item(&self, pk: &str, sk: &str) -> Option<Item> {
        self.items().get(&(pk.to_string(), sk.to_string())).cloned()
    }

    /// Stores `doc` at (`pk`, `sk`) at version 1 whatever is there: an item as an earlier
    /// version of nodecycle (or an operator) wrote it.
    pub fn seed(&self, pk: &str, sk: &str, doc: Value) {
        self.insert(pk, sk, doc, 1, None);
    }

    /// Stores `doc` at (`pk`, `sk`) at `version` whatever is there (no condition).
    pub fn insert(&self, pk: &str, sk: &str, doc: Value, version: u64, ttl: Option<DateTime<Utc>>) {
        if let Ok(mut items) = self.items.lock() {
            Self::store(&mut items, pk, sk, doc, version, ttl);
        }
    }

    /// The next `n` batch reads answer only their first key and leave the others
    /// unprocessed, as DynamoDB does when it throttles part of a batch.
    pub fn leave_unprocessed(&self, n: usize) {
        if let Ok(mut u) = self.unprocessed.lock() {
            *u = n;
        }
    }

    /// How many times [`Store`] operation `op` (`get`, `put`, `query`, `batch_get`,
    /// `transact`) was called so far.
    pub fn calls(&self, op: &str) -> u32 {
        self.watch
            .lock()
            .map(|w| w.calls.get(op).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Runs `hook` on the table once, just before the next call of [`Store`] operation `op`
    /// (after counting it): another writer getting in between a read and a write. It replaces
    /// a hook not run yet.
    pub fn before(&self, op: &'static str, hook: impl FnOnce(&MemoryStore) + Send + 'static) {
        if let Ok(mut w) = self.watch.lock() {
            w.before = Some((op, Box::new(hook)));
        }
    }

    /// Every call of `op` fails with `kind` (the table throttling, refusing) until
    /// [`Self::heal`].
    pub fn fail(&self, op: &'static str, kind: ErrorKind) {
        if let Ok(mut w) = self.watch.lock() {
            w.failing.insert(op, kind);
        }
    }

    /// No call fails any more.
    pub fn heal(&self) {
        if let Ok(mut w) = self.watch.lock() {
            w.failing.clear();
        }
    }

    /// Another writer rewrites `pk`/`sk` (the same document at the next version) just before
    /// this store's next write of it, by put or in a transaction: that write, if conditional
    /// on the version it read, loses.
    pub fn race_next_write(&self, pk: &str, sk: &str) {
        if let Ok(mut w) = self.watch.lock() {
            w.racing.push((pk.to_string(), sk.to_string()));
        }
    }

    /// Counts a call of `op`, runs the hook waiting for it (no lock held), then fails it if a
    /// test asked so.
    fn enter(&self, op: &'static str) -> Result<(), PortError> {
        let mut failing = None;
        let hook = self.watch.lock().ok().and_then(|mut w| {
            *w.calls.entry(op).or_default() += 1;
            failing = w.failing.get(op).copied();
            match w.before.take() {
                Some((o, h)) if o == op => Some(h),
                other => {
                    w.before = other;
                    None
                }
            }
        });
        if let Some(h) = hook {
            h(self);
        }
        match failing {
            Some(kind) => Err(PortError::new(
                format!("memory:{op}"),
                kind,
                "injected failure",
            )),
            None => Ok(()),
        }
    }

    /// Another writer's rewrite of `pk`/`sk` if [`Self::race_next_write`] asked for one: the
    /// same document at the next version (`doc` at version 1 for an item not there yet).
    fn race(&self, items: &mut BTreeMap<Key, Item>, pk: &str, sk: &str, doc: &Value) {
        let key = (pk.to_string(), sk.to_string());
        let raced = self.watch.lock().is_ok_and(|mut w| {
            let at = w.racing.iter().position(|k| *k == key);
            at.map(|i| w.racing.remove(i)).is_some()
        });
        if raced {
            let (value, version, ttl) = match items.get(&key) {
                Some(i) => (i.doc.value.clone(), i.doc.version + 1, i.ttl),
                None => (doc.clone(), 1, None),
            };
            Self::store(items, pk, sk, value, version, ttl);
        }
    }

    fn version(items: &BTreeMap<(String, String), Item>, pk: &str, sk: &str) -> Option<u64> {
        items
            .get(&(pk.to_string(), sk.to_string()))
            .map(|i| i.doc.version)
    }

    fn store(
        items: &mut BTreeMap<(String, String), Item>,
        pk: &str,
        sk: &str,
        value: Value,
        version: u64,
        ttl: Option<DateTime<Utc>>,
    ) {
        let doc = Versioned { value, version };
        items.insert((pk.to_string(), sk.to_string()), Item { doc, ttl });
    }

    /// Applies `writes` all or none, each conditional on its version (`op` names the call in
    /// a conflict).
    fn apply(&self, op: &str, writes: &[TxWrite]) -> Result<(), PortError> {
        let mut items = self.items.lock().map_err(Self::poisoned)?;
        for (pk, sk, doc, ..) in writes.iter().filter_map(TxWrite::written) {
            self.race(&mut items, pk, sk, doc);
        }
        for w in writes {
            let (pk, sk, _) = w.condition();
            w.check(op, Self::version(&items, pk, sk))?;
        }
        for (pk, sk, doc, version, ttl) in writes.iter().filter_map(TxWrite::written) {
            Self::store(&mut items, pk, sk, doc.clone(), version, ttl);
        }
        Ok(())
    }

    fn poisoned(e: impl std::fmt::Display) -> PortError {
        PortError::new("memory", ErrorKind::Other, e.to_string())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, pk: &str, sk: &str) -> Result<Option<Versioned<Value>>, PortError> {
        self.enter("get")?;
        Ok(self.item(pk, sk).map(|i| i.doc))
    }

    async fn put(
        &self,
        pk: &str,
        sk: &str,
        doc: &Value,
        expected: Option<u64>,
        ttl: Option<DateTime<Utc>>,
    ) -> Result<u64, PortError> {
        self.enter("put")?;
        let mut items = self.items.lock().map_err(Self::poisoned)?;
        self.race(&mut items, pk, sk, doc);
        check_version(
            "memory:put",
            pk,
            sk,
            Self::version(&items, pk, sk),
            expected,
        )?;
        let version = next_version(expected);
        Self::store(&mut items, pk, sk, doc.clone(), version, ttl);
        Ok(version)
    }

    async fn batch_get(&self, keys: &[Key]) -> Result<BatchRead, PortError> {
        self.enter("batch_get")?;
        if keys.len() > BATCH_GET_LIMIT {
            return Err(PortError::new(
                "memory:batch_get",
                ErrorKind::Invalid,
                format!("{} keys, more than {BATCH_GET_LIMIT}", keys.len()),
            ));
        }
        let partial = {
            let mut u = self.unprocessed.lock().map_err(Self::poisoned)?;
            let partial = *u > 0 && keys.len() > 1;
            if partial {
                *u -= 1;
            }
            partial
        };
        let (read, unprocessed) = if partial {
            keys.split_at(1)
        } else {
            (keys, &[][..])
        };
        let items = self.items.lock().map_err(Self::poisoned)?;
        Ok(BatchRead {
            items: read
                .iter()
                .filter_map(|k| items.get(k).map(|i| (k.clone(), i.doc.clone())))
                .collect(),
            unprocessed: unprocessed.to_vec(),
        })
    }

    async fn transact(&self, writes: &[TxWrite]) -> Result<(), PortError> {
        self.enter("transact")?;
        self.apply("memory:transact", writes)
    }

    async fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> Result<Vec<(String, Versioned<Value>)>, PortError> {
        self.enter("query")?;
        Ok(self
            .items()
            .into_iter()
            .filter(|((p, s), _)| p == pk && s.starts_with(sk_prefix))
            .map(|((_, s), i)| (s, i.doc))
            .collect())
    }
}
