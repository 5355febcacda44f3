//! A store whose writes stay in memory over an optional read-only base: what
//! `nodecycle validate --live` runs the first pass over (see [`crate::handlers::onboard`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::memory::MemoryStore;
use super::{BatchRead, Key, Store, TxWrite, Versioned};
use crate::port::PortError;

/// A store whose writes stay in memory over an optional read-only base (the state table):
/// reads see the base with this process's writes on top. Conditional writes behave as the
/// table's do (a stale version is a conflict); a single put is a transaction of one write.
pub struct Scratch {
    base: Option<Arc<dyn Store>>,
    written: MemoryStore,
}

impl Scratch {
    /// Over `base` (`None`: an empty table).
    pub fn new(base: Option<Arc<dyn Store>>) -> Self {
        Scratch {
            base,
            written: MemoryStore::new(),
        }
    }
}

#[async_trait]
impl Store for Scratch {
    async fn get(&self, pk: &str, sk: &str) -> Result<Option<Versioned<Value>>, PortError> {
        if let Some(v) = self.written.get(pk, sk).await? {
            return Ok(Some(v));
        }
        match &self.base {
            Some(b) => b.get(pk, sk).await,
            None => Ok(None),
        }
    }

    async fn batch_get(&self, keys: &[Key]) -> Result<BatchRead, PortError> {
        let mut read = self.written.batch_get(keys).await?;
        let missing: Vec<Key> = keys
            .iter()
            .filter(|k| !read.items.iter().any(|(found, _)| found == *k))
            .cloned()
            .collect();
        if let Some(b) = &self.base
            && !missing.is_empty()
        {
            let below = b.batch_get(&missing).await?;
            read.items.extend(below.items);
            read.unprocessed.extend(below.unprocessed);
        }
        Ok(read)
    }

    /// Checks every condition against the base with this process's writes on top, then
    /// keeps the writes (one process writes a scratch store: `validate --live`).
    async fn transact(&self, writes: &[TxWrite]) -> Result<(), PortError> {
        for w in writes {
            let (pk, sk, _) = w.condition();
            let current = self.get(pk, sk).await?.map(|v| v.version);
            w.check("scratch:transact", current)?;
        }
        for (pk, sk, doc, version, ttl) in writes.iter().filter_map(TxWrite::written) {
            self.written.insert(pk, sk, doc.clone(), version, ttl);
        }
        Ok(())
    }

    async fn query(
        &self,
        pk: &str,
        sk_prefix: &str,
    ) -> Result<Vec<(String, Versioned<Value>)>, PortError> {
        let mut out: BTreeMap<String, Versioned<Value>> = match &self.base {
            Some(b) => b.query(pk, sk_prefix).await?.into_iter().collect(),
            None => BTreeMap::new(),
        };
        out.extend(self.written.query(pk, sk_prefix).await?);
        Ok(out.into_iter().collect())
    }
}
