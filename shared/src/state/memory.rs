//! An in-memory [`Store`] that behaves as the table does (conditional writes on versions,
//! sort-key prefix queries in key order), recording each item's TTL so tests can check it.
//! Tests use it as the table; [`super::Scratch`] keeps its writes in one.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{BatchRead, Key, Store, TxWrite, Versioned};
use crate::port::{ErrorKind, PortError};

/// One stored item.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The document and its version.
    pub doc: Versioned<Value>,
    /// When the table would expire it.
    pub ttl: Option<DateTime<Utc>>,
}

/// The table in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    items: Mutex<BTreeMap<(String, String), Item>>,
    /// Batch reads still to answer only their first key (the rest unprocessed).
    unprocessed: Mutex<usize>,
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
            items.insert(
                (pk.to_string(), sk.to_string()),
                Item {
                    doc: Versioned {
                        value: doc,
                        version,
                    },
                    ttl,
                },
            );
        }
    }

    /// The next `n` batch reads answer only their first key and leave the others
    /// unprocessed, as DynamoDB does when it throttles part of a batch.
    pub fn leave_unprocessed(&self, n: usize) {
        if let Ok(mut u) = self.unprocessed.lock() {
            *u = n;
        }
    }

    fn poisoned(e: impl std::fmt::Display) -> PortError {
        PortError::new("memory", ErrorKind::Other, e.to_string())
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, pk: &str, sk: &str) -> Result<Option<Versioned<Value>>, PortError> {
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
        let mut items = self.items.lock().map_err(Self::poisoned)?;
        let key = (pk.to_string(), sk.to_string());
        let current = items.get(&key).map(|i| i.doc.version);
        if current != expected {
            return Err(PortError::new(
                "memory:put",
                ErrorKind::Conflict,
                format!("{pk}/{sk} is at version {current:?}, not {expected:?}"),
            ));
        }
        let version = current.map_or(1, |v| v + 1);
        items.insert(
            key,
            Item {
                doc: Versioned {
                    value: doc.clone(),
                    version,
                },
                ttl,
            },
        );
        Ok(version)
    }

    async fn batch_get(&self, keys: &[Key]) -> Result<BatchRead, PortError> {
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
        let mut items = self.items.lock().map_err(Self::poisoned)?;
        for w in writes {
            let (pk, sk, _) = w.condition();
            let current = items
                .get(&(pk.to_string(), sk.to_string()))
                .map(|i| i.doc.version);
            w.check("memory:transact", current)?;
        }
        for (pk, sk, doc, version, ttl) in writes.iter().filter_map(TxWrite::written) {
            let doc = Versioned {
                value: doc.clone(),
                version,
            };
            items.insert((pk.to_string(), sk.to_string()), Item { doc, ttl });
        }
        Ok(())
    }

    async fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> Result<Vec<(String, Versioned<Value>)>, PortError> {
        Ok(self
            .items()
            .into_iter()
            .filter(|((p, s), _)| p == pk && s.starts_with(sk_prefix))
            .map(|((_, s), i)| (s, i.doc))
            .collect())
    }
}
