//! Leases (`LEASE#<name>`): who may run a pool's pass, until when.

use super::*;

impl Repository {
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
}
