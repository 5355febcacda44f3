//! The rotator's work queue ([`WorkQueue`]) over SQS: SendMessageBatch, ten items a call.

use async_trait::async_trait;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

use super::port_error;
use crate::dispatch::{WorkItem, WorkQueue};
use crate::port::{ErrorKind, PortError};

/// Environment variable naming the queue (its URL); set only where fan-out is enabled.
pub const QUEUE_URL_ENV: &str = "NODECYCLE_WORK_QUEUE_URL";

/// Entries SQS takes in one SendMessageBatch.
const BATCH: usize = 10;

/// An SQS queue by URL.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl SqsQueue {
    /// The queue at `url`, through `client`.
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }
}

#[async_trait]
impl WorkQueue for SqsQueue {
    async fn send(&self, items: &[WorkItem]) -> Result<(), PortError> {
        let mut refused = Vec::new();
        for chunk in items.chunks(BATCH) {
            let mut entries = Vec::with_capacity(chunk.len());
            for (i, item) in chunk.iter().enumerate() {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(item.body())
                    .build()
                    .map_err(|e| {
                        PortError::new("sqs:SendMessageBatch", ErrorKind::Invalid, e.to_string())
                    })?;
                entries.push(entry);
            }
            let out = self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| port_error("sqs:SendMessageBatch", e))?;
            // Each entry is either successful or failed, by its id (its index in the chunk).
            for failed in out.failed() {
                let place = failed
                    .id()
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| chunk.get(i))
                    .map_or_else(|| failed.id().to_string(), WorkItem::place);
                refused.push(format!(
                    "{place} ({}: {})",
                    failed.code(),
                    failed.message().unwrap_or("no message")
                ));
            }
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(PortError::new(
                "sqs:SendMessageBatch",
                ErrorKind::Transient,
                format!("not accepted: {}", refused.join("; ")),
            ))
        }
    }
}
