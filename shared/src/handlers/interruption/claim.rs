//! Claims: a conditional item per (instance, kind of work) or per event id, so a redelivered
//! event, or a warning followed by its state change, never does the same work twice. A claim
//! left `failed` or stale by an earlier invocation is taken over. Which claim an event's work
//! needs, and what a taken one means, is decided in [`crate::interruption::action`].

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::Settings;
use crate::interruption::{Claim, ClaimDoc, ClaimStatus};
use crate::port::{ErrorKind, PortError};
use crate::state::Store;

/// Taking and settling claims: the state table only.
pub(super) struct Claims<'a> {
    /// The state table.
    pub store: &'a dyn Store,
    /// Retention and staleness.
    pub settings: &'a Settings,
}

impl Claims<'_> {
    /// Claims `pk`/`sk` for this invocation: a new item, or one left `failed` or stale by an
    /// earlier invocation.
    pub(super) async fn claim(
        &self,
        pk: &str,
        sk: &str,
        what: &str,
        now: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let doc = json!(ClaimDoc {
            status: ClaimStatus::Started,
            at: Some(now),
            what: what.to_string(),
            details: Value::Null,
        });
        let ttl = Some(now + self.settings.retention);
        match self.store.put(pk, sk, &doc, None, ttl).await {
            Ok(v) => return Ok(Claim::Ours(v)),
            Err(e) if e.kind == ErrorKind::Conflict => {}
            Err(e) => return Err(e),
        }
        let Some(current) = self.store.get(pk, sk).await? else {
            // Expired between the two calls: try once more.
            return match self.store.put(pk, sk, &doc, None, ttl).await {
                Ok(v) => Ok(Claim::Ours(v)),
                Err(e) if e.kind == ErrorKind::Conflict => Ok(Claim::Taken(None)),
                Err(e) => Err(e),
            };
        };
        let existing: Option<ClaimDoc> = serde_json::from_value(current.value).ok();
        let stale = match &existing {
            Some(c) => match c.status {
                ClaimStatus::Failed => true,
                ClaimStatus::Started => c.at.is_none_or(|t| now - t > self.settings.stale_claim),
                ClaimStatus::Done => false,
            },
            // Unreadable: taken over rather than blocking the work for its retention.
            None => true,
        };
        if !stale {
            return Ok(Claim::Taken(existing));
        }
        match self
            .store
            .put(pk, sk, &doc, Some(current.version), ttl)
            .await
        {
            Ok(v) => Ok(Claim::Ours(v)),
            Err(e) if e.kind == ErrorKind::Conflict => Ok(Claim::Taken(existing)),
            Err(e) => Err(e),
        }
    }

    /// Marks a claim `done` or `failed` (best effort: a lost write only means a retry re-checks).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn settle(
        &self,
        (pk, sk): (&str, &str),
        version: u64,
        status: ClaimStatus,
        what: &str,
        details: Value,
        now: DateTime<Utc>,
    ) {
        let doc = json!(ClaimDoc {
            status,
            at: Some(now),
            what: what.to_string(),
            details,
        });
        if let Err(e) = self
            .store
            .put(
                pk,
                sk,
                &doc,
                Some(version),
                Some(now + self.settings.retention),
            )
            .await
        {
            tracing::warn!(pk, sk, error = %e, "could not settle claim");
        }
    }
}
