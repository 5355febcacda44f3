//! The rotator's fan-out entry points ([`crate::dispatch`]): the scheduled invocation becomes the
//! dispatcher when a work queue is configured ([`crate::aws::queue::QUEUE_URL_ENV`]), and an SQS
//! event (the queue's event source) is served item by item, each item a rotator pass over one
//! cluster under that cluster's lease, with a failed item reported alone
//! (`ReportBatchItemFailures`). Every other invocation is the rotator's as before
//! ([`FanOut::route`] answers `None`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{Function, HandlerError, Invocation};
use crate::dispatch::{self, Admission, Verdict, WorkItem, WorkQueue};
use crate::event::served::Deployment;
use crate::event::{Input, parse_input};
use crate::handlers::rotator::RotatorHandler;
use crate::policy::source::PolicySource;

/// Environment variable: how old a work item may be on its first receive
/// ([`dispatch::admit`]); default [`DEFAULT_MAX_AGE`].
pub const MAX_AGE_ENV: &str = "NODECYCLE_WORK_ITEM_MAX_AGE";
/// Default of [`MAX_AGE_ENV`]: five passes of the one-minute schedule.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(5 * 60);
/// An item is not started with less than this left of the invocation (it is retried instead).
const RESERVE: Duration = Duration::from_secs(20);
/// Records one invocation serves at most (the event source's batch size is 1; a larger batch
/// beyond this fails whole and is redelivered).
const MAX_RECORDS: usize = 100;

/// One rotator pass over a selection (the rotator's custom input), as the worker runs it.
#[async_trait]
pub trait ClusterPass: Send + Sync {
    /// The pass's answer (`{"clusters": {<cluster>: <status>}, "pools": [...]}`).
    async fn pass(&self, selection: &Value, at: Invocation<'_>) -> Result<Value, HandlerError>;
}

#[async_trait]
impl ClusterPass for RotatorHandler {
    async fn pass(&self, selection: &Value, at: Invocation<'_>) -> Result<Value, HandlerError> {
        self.handle(selection, at).await
    }
}

/// The rotator function as Lambda runs it: [`FanOut::route`] first (an SQS event is served, a
/// schedule dispatched when a work queue is set), else the rotator's own pass.
#[derive(Clone)]
pub struct RotatorFunction {
    /// The pass.
    pub rotator: RotatorHandler,
    /// The dispatcher and the worker.
    pub fan_out: FanOut,
}

#[async_trait]
impl Function for RotatorFunction {
    async fn invoke(&self, payload: &Value, inv: Invocation<'_>) -> Result<Value, HandlerError> {
        if let Some(out) = self.fan_out.route(&self.rotator, payload, inv).await {
            return out;
        }
        self.rotator.handle(payload, inv).await
    }
}

/// A rotator stand-in for tests of the fan-out: keeps each selection it is given, answers each
/// cluster `done` (or its `status`), and fails the passes of `fail`: clusters, or places
/// (`<account>/<region>/<cluster>`) of selections that name their account and region.
#[cfg(any(test, feature = "test-support"))]
#[derive(Debug, Default)]
pub struct StandInPass {
    /// Each selection given, in order.
    pub seen: std::sync::Mutex<Vec<Value>>,
    /// (cluster, answer) for clusters answered other than `done`.
    pub status: Vec<(String, String)>,
    /// Clusters or places whose pass fails.
    pub fail: Vec<String>,
}

#[cfg(any(test, feature = "test-support"))]
impl StandInPass {
    /// The place of a selection: its account and region, `cell`'s where it names none.
    fn place(selection: &Value, cell: &dispatch::Cell) -> String {
        format!(
            "{}/{}/{}",
            selection["account"].as_str().unwrap_or(&cell.account),
            selection["region"].as_str().unwrap_or(&cell.region),
            selection["clusters"][0].as_str().unwrap_or_default()
        )
    }

    /// How many passes each place was given (`cell`: where selections without an account run).
    pub fn served(&self, cell: &dispatch::Cell) -> std::collections::BTreeMap<String, usize> {
        let mut out = std::collections::BTreeMap::new();
        for s in self.seen.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            *out.entry(Self::place(s, cell)).or_default() += 1;
        }
        out
    }
}

#[cfg(any(test, feature = "test-support"))]
#[async_trait]
impl ClusterPass for StandInPass {
    async fn pass(&self, selection: &Value, _at: Invocation<'_>) -> Result<Value, HandlerError> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(selection.clone());
        let cluster = selection["clusters"][0].as_str().unwrap_or_default();
        let unknown = dispatch::Cell {
            account: String::new(),
            region: String::new(),
        };
        let place = Self::place(selection, &unknown);
        if self.fail.iter().any(|f| f == cluster || *f == place) {
            return Err(HandlerError::internal("cannot read the quarantine"));
        }
        let status = self
            .status
            .iter()
            .find(|(c, _)| c == cluster)
            .map_or("done", |(_, s)| s.as_str());
        Ok(json!({"trigger": "schedule", "clusters": {cluster: status}, "pools": []}))
    }
}

/// The dispatcher and the worker, and their ports.
#[derive(Clone)]
pub struct FanOut {
    /// Pool policies (the dispatcher reads where the pools are).
    pub policies: Arc<dyn PolicySource>,
    /// The served accounts and regions; the first of each is the cell's own.
    pub deployment: Arc<dyn Deployment>,
    /// The work queue; `None` = no fan-out (the schedule runs the whole pass itself).
    pub queue: Option<Arc<dyn WorkQueue>>,
    /// [`MAX_AGE_ENV`].
    pub max_age: Duration,
}

impl FanOut {
    /// Routes one invocation: an SQS event is served ([`FanOut::serve`]); a scheduled event is
    /// dispatched when a queue is configured ([`FanOut::dispatch`]); anything else is `None`
    /// (the rotator's own input).
    pub async fn route(
        &self,
        pass: &dyn ClusterPass,
        payload: &Value,
        at: Invocation<'_>,
    ) -> Option<Result<Value, HandlerError>> {
        if payload.get("Records").is_some() {
            return Some(self.serve(pass, payload, at).await);
        }
        let scheduled = matches!(parse_input(payload), Ok(Input::Envelope(e)) if e.detail_type == "Scheduled Event");
        if scheduled && self.queue.is_some() {
            return Some(self.dispatch(at.now).await);
        }
        None
    }

    /// The dispatcher: one work item per (account, region, cluster) of the valid policies, put
    /// on the queue. Fails (the next schedule repeats it) when the policies, the served set or
    /// the queue cannot be reached; items sent before a failure are harmless (a repeated item
    /// repeats an idempotent pass, or finds the lease held).
    pub async fn dispatch(&self, now: DateTime<Utc>) -> Result<Value, HandlerError> {
        let Some(queue) = &self.queue else {
            return Err(HandlerError {
                error_type: "Configuration".into(),
                message: format!(
                    "{} is not set: no work queue to dispatch to",
                    crate::aws::queue::QUEUE_URL_ENV
                ),
            });
        };
        let served = self.served().await?;
        let cell = dispatch::cell_of(&served).ok_or_else(|| {
            HandlerError::internal(
                "the deployment serves no account or region; dispatching nothing",
            )
        })?;
        let docs = self
            .policies
            .all()
            .await
            .map_err(|e| HandlerError::internal(format!("cannot list policies: {e}")))?;
        let mut places = Vec::new();
        let mut invalid = 0usize;
        for doc in &docs {
            match crate::policy::parse_document(doc).policy {
                Some(p) => places.push(dispatch::PoolPlace {
                    // A pool that names no account and region is the cell's.
                    account: p.place.as_ref().map(|place| place.account.clone()),
                    region: p.place.as_ref().map(|place| place.region.clone()),
                    pool: p.pool_id(),
                    cluster: p.cluster,
                }),
                None => {
                    invalid += 1;
                    tracing::warn!(source = %doc.source, decision = "skipped", "invalid policy; the ami-watcher reports why");
                }
            }
        }
        let items = dispatch::work_items(&places, &cell, now);
        queue.send(&items).await.map_err(|e| {
            HandlerError::internal(format!(
                "cannot put the pass's {} work items on the queue: {e}",
                items.len()
            ))
        })?;
        for item in &items {
            tracing::info!(item = %item.place(), decision = "dispatched", reason = %item.reason);
        }
        Ok(json!({
            "trigger": "dispatch",
            "items": items.iter().map(|i| json!({"place": i.place(), "reason": i.reason})).collect::<Vec<_>>(),
            "invalidPolicies": invalid,
        }))
    }

    /// The worker: each record of an SQS event admitted ([`dispatch::admit`]), served through
    /// `pass` and judged ([`dispatch::verdict`]), in order. The answer lists the records to
    /// retry as `batchItemFailures` (what Lambda's SQS event source reads with
    /// `ReportBatchItemFailures`) and each record's verdict under `items`.
    pub async fn serve(
        &self,
        pass: &dyn ClusterPass,
        payload: &Value,
        at: Invocation<'_>,
    ) -> Result<Value, HandlerError> {
        let event: SqsEvent = serde_json::from_value(payload.clone()).map_err(|e| {
            HandlerError::from(crate::event::InvalidEvent::new(
                "Records",
                format!("not an SQS event: {e}"),
            ))
        })?;
        if event.records.len() > MAX_RECORDS {
            return Err(crate::event::InvalidEvent::new(
                "Records",
                format!(
                    "{} records; expected at most {MAX_RECORDS} (the event source's batch size is 1)",
                    event.records.len()
                ),
            )
            .into());
        }
        let served = self.served().await?;
        let cell = dispatch::cell_of(&served).ok_or_else(|| {
            HandlerError::internal("the deployment serves no account or region; serving nothing")
        })?;
        let mut failures = Vec::new();
        let mut items = Vec::new();
        for record in &event.records {
            let id = record.message_id.clone().unwrap_or_default();
            let verdict = self.serve_one(pass, record, &served, &cell, at).await;
            let (done, reason) = match &verdict {
                Verdict::Done(r) => (true, r),
                Verdict::Retry(r) => (false, r),
            };
            if done {
                tracing::info!(message = %id, decision = "done", reason = %reason);
            } else {
                // An empty id makes Lambda retry the whole batch, which is right: the record
                // cannot be named.
                tracing::error!(message = %id, decision = "retry", reason = %reason);
                failures.push(json!({"itemIdentifier": id}));
            }
            items.push(json!({"messageId": id, "done": done, "reason": reason}));
        }
        Ok(json!({"batchItemFailures": failures, "items": items}))
    }

    async fn serve_one(
        &self,
        pass: &dyn ClusterPass,
        record: &aws_lambda_events::event::sqs::SqsMessage,
        served: &crate::event::served::Served,
        cell: &dispatch::Cell,
        at: Invocation<'_>,
    ) -> Verdict {
        if record.event_source.as_deref() != Some("aws:sqs") {
            return Verdict::Retry(format!(
                "eventSource {}; expected aws:sqs",
                crate::problem::quote(record.event_source.as_deref().unwrap_or("(none)"))
            ));
        }
        let item = match WorkItem::parse(record.body.as_deref().unwrap_or_default()) {
            Ok(item) => item,
            Err(why) => return Verdict::Retry(format!("not a work item: {why}")),
        };
        let receives = record
            .attributes
            .get("ApproximateReceiveCount")
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(1);
        match dispatch::admit(&item, receives, served, self.max_age, at.now) {
            Admission::Refuse(why) => return Verdict::Retry(why),
            Admission::Superseded(why) => return Verdict::Done(why),
            Admission::Serve => {}
        }
        if at.deadline.saturating_duration_since(Instant::now()) < RESERVE {
            return Verdict::Retry(format!(
                "work item {}: invocation time nearly used up; served on redelivery",
                item.place()
            ));
        }
        tracing::info!(item = %item.place(), receives, reason = %item.reason, "serving work item");
        let answer = pass.pass(&dispatch::selection(&item, cell), at).await;
        dispatch::verdict(&item, answer.as_ref().map_err(|e| e.message.as_str()))
    }

    async fn served(&self) -> Result<crate::event::served::Served, HandlerError> {
        self.deployment.served().await.map_err(|e| {
            HandlerError::internal(format!("cannot tell which accounts this cell serves: {e}"))
        })
    }
}

#[cfg(test)]
mod tests;
