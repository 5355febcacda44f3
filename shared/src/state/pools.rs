//! Pool records and their rotations: reads of a pool's partition (one or in batches), the
//! pool record's conditional update, rotations with the pool's rotation index.

use super::*;

impl Repository {
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
}
