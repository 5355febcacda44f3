//! Managed node group updates (`MNGUPDATE`), one per pool.

use super::*;

impl Repository {
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
}
