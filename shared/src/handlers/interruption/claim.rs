//! Claims: a conditional item per (instance, kind of work) or per event id, so a redelivered
//! event, or a warning followed by its state change, never does the same work twice. A claim
//! left `failed` or stale by an earlier invocation is taken over. [`InterruptionHandler::claimed`]
//! is the one claim -> act -> settle bracket every kind of work goes through.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{InterruptionHandler, Outcome};
use crate::handlers::HandlerError;
use crate::port::PortError;
use crate::state::ClaimKey;

/// Where a claim stands (stored as `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) enum ClaimStatus {
    /// Being worked on by the invocation that wrote it.
    Started,
    /// Done: a redelivery is skipped.
    Done,
    /// Failed: the next delivery takes it over.
    Failed,
}

/// The stored claim document.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ClaimDoc {
    pub status: ClaimStatus,
    pub at: Option<DateTime<Utc>>,
    /// The kind of event that claimed it.
    #[serde(default)]
    pub what: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

/// Result of a conditional claim.
pub(super) enum Claim {
    /// Ours, at this version.
    Ours(u64),
    /// Someone else's (or already done): its document, if readable.
    Taken(Option<ClaimDoc>),
}

impl InterruptionHandler {
    /// Claims `key` for `what`, runs `work` if the claim is ours and settles the claim
    /// `done` or `failed` by its result; when another delivery holds or finished it, returns
    /// `skipped(claim)` instead, without running `work`.
    pub(super) async fn claimed<W, F>(
        &self,
        key: &ClaimKey,
        what: &str,
        now: impl Fn() -> DateTime<Utc>,
        skipped: impl FnOnce(Option<&ClaimDoc>) -> Outcome,
        work: W,
    ) -> Result<Outcome, HandlerError>
    where
        W: FnOnce() -> F,
        F: Future<Output = Result<Outcome, HandlerError>>,
    {
        let version = match self
            .claim(key, what, now())
            .await
            .map_err(super::internal)?
        {
            Claim::Ours(v) => v,
            Claim::Taken(doc) => return Ok(skipped(doc.as_ref())),
        };
        let result = work().await;
        let (status, details) = match &result {
            Ok(o) => (ClaimStatus::Done, o.details.clone()),
            Err(_) => (ClaimStatus::Failed, Value::Null),
        };
        self.settle(key, version, status, what, details, now())
            .await;
        result
    }

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
