//! The interruption handler's items: claims of events and work, lifecycle actions handed
//! over to the rotator (`LCA#`), the per-pool event log (`EVT#`).

use super::*;

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

impl Repository {
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
