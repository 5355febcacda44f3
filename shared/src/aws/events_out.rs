//! Events out: [`EventSink`] over EventBridge PutEvents on the account's default bus.

use async_trait::async_trait;
use aws_sdk_eventbridge::primitives::DateTime as SdkTime;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;

use super::port_error;
use crate::bus::{BusEvent, EventSink, PUT_LIMIT, Refused, SOURCE};
use crate::port::{ErrorKind, PortError};

/// PutEvents through the SDK, on the default event bus (no `EventBusName`).
#[derive(Clone, Debug)]
pub struct EventBridge {
    client: aws_sdk_eventbridge::Client,
}

impl EventBridge {
    /// Wraps a client.
    pub fn new(client: aws_sdk_eventbridge::Client) -> Self {
        Self { client }
    }
}

fn entry(e: &BusEvent) -> PutEventsRequestEntry {
    PutEventsRequestEntry::builder()
        .source(SOURCE)
        .detail_type(e.kind.detail_type())
        .detail(e.detail_json())
        .time(SdkTime::from_millis(e.detail.at.timestamp_millis()))
        .build()
}

#[async_trait]
impl EventSink for EventBridge {
    async fn put(&self, events: &[BusEvent]) -> Result<Vec<Refused>, PortError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        if events.len() > PUT_LIMIT {
            return Err(PortError::new(
                "events:PutEvents",
                ErrorKind::Invalid,
                format!(
                    "{} entries in one call; PutEvents takes at most {PUT_LIMIT}",
                    events.len()
                ),
            ));
        }
        let out = self
            .client
            .put_events()
            .set_entries(Some(events.iter().map(entry).collect()))
            .send()
            .await
            .map_err(|e| port_error("events:PutEvents", e))?;
        // The answer lists one result per entry, in order; an entry with an error code was
        // refused.
        let answers = out.entries();
        let mut refused = Vec::new();
        for (i, e) in events.iter().enumerate() {
            let error = match answers.get(i) {
                Some(a) if a.error_code().is_none() => continue,
                Some(a) => format!(
                    "{}: {}",
                    a.error_code().unwrap_or("Unknown"),
                    a.error_message().unwrap_or("no message")
                ),
                None => "no result for this entry in the PutEvents answer".to_string(),
            };
            refused.push(Refused {
                event_id: e.id().to_string(),
                error,
            });
        }
        Ok(refused)
    }
}
