//! Claims: a conditional item per (instance, kind of work) or per event id, so a redelivered
//! event, or a warning followed by its state change, never does the same work twice. A claim
//! left `failed` or stale by an earlier invocation is taken over. Which claim an event's work
//! needs, and what a taken one means, is decided in [`crate::interruption::action`].

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::Settings;
use crate::interruption::{Claim, ClaimDoc, ClaimStatus};
use crate::port::PortError;
use crate::state::{ClaimKey, Repository};

/// Taking and settling claims: the state table only.
pub(super) struct Claims<'a> {
    /// The state table.
    pub state: &'a Repository,
    /// Retention and staleness.
    pub settings: &'a Settings,
}

impl Claims<'_> {
    /// Claims `key` for this invocation: a new item, or one left `failed` or stale by an
    /// earlier invocation.
    pub(super) async fn claim(
        &self,
        key: &ClaimKey,
        what: &str,
        now: DateTime<Utc>,
    ) -> Result<Claim, PortError> {
        let doc = json!(ClaimDoc {
            status: ClaimStatus::Started,
            at: Some(now),
            what: what.to_string(),
            details: Value::Null,
        });
        let ttl = now + self.settings.retention;
        if let Some(v) = self.state.put_claim(key, &doc, None, ttl).await? {
            return Ok(Claim::Ours(v));
        }
        let Some(current) = self.state.claim(key).await? else {
            // Expired between the two calls: try once more.
            return Ok(match self.state.put_claim(key, &doc, None, ttl).await? {
                Some(v) => Claim::Ours(v),
                None => Claim::Taken(None),
            });
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
        Ok(
            match self
                .state
                .put_claim(key, &doc, Some(current.version), ttl)
                .await?
            {
                Some(v) => Claim::Ours(v),
                None => Claim::Taken(existing),
            },
        )
    }

    /// Marks a claim `done` or `failed` (best effort: a lost write only means a retry re-checks).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn settle(
        &self,
        key: &ClaimKey,
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
        let ttl = now + self.settings.retention;
        if let Err(e) = self.state.put_claim(key, &doc, Some(version), ttl).await {
            tracing::warn!(claim = %key, error = %e, "could not settle claim");
        }
    }
}
