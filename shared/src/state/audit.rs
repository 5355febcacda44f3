//! Ops audit records (`AUDIT#`) and `rotate` requests kept for repeats (`REQ#rotate#`).

use super::*;

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

impl Repository {
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
}
