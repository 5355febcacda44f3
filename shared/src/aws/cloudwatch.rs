//! [`AlarmStates`] over CloudWatch `DescribeAlarms`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::port_error;
use crate::port::PortError;
use crate::promotion::{AlarmState, AlarmStates};

/// CloudWatch alarm reads.
#[derive(Clone, Debug)]
pub struct CloudWatch {
    client: aws_sdk_cloudwatch::Client,
}

impl CloudWatch {
    /// Over `client`.
    pub fn new(client: aws_sdk_cloudwatch::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl AlarmStates for CloudWatch {
    async fn states(&self, names: &[String]) -> Result<Vec<AlarmState>, PortError> {
        let mut out = Vec::new();
        // DescribeAlarms takes at most 100 names per call.
        for chunk in names.chunks(100) {
            let pages = self
                .client
                .describe_alarms()
                .set_alarm_names(Some(chunk.to_vec()))
                .into_paginator()
                .send()
                .try_collect()
                .await
                .map_err(|e| port_error("cloudwatch:DescribeAlarms", e))?;
            for page in &pages {
                out.extend(page.metric_alarms().iter().map(|a| {
                    alarm_state(a.alarm_name(), a.state_value(), a.state_updated_timestamp())
                }));
                out.extend(page.composite_alarms().iter().map(|a| {
                    alarm_state(a.alarm_name(), a.state_value(), a.state_updated_timestamp())
                }));
            }
        }
        Ok(out)
    }
}

/// One alarm (metric or composite: the SDK has a type for each, with the same fields) as the
/// port reports it: firing when its state is `ALARM`, `updated` when CloudWatch says when its
/// state last changed.
fn alarm_state(
    name: Option<&str>,
    state: Option<&aws_sdk_cloudwatch::types::StateValue>,
    updated: Option<&aws_sdk_cloudwatch::primitives::DateTime>,
) -> AlarmState {
    AlarmState {
        name: name.unwrap_or_default().to_string(),
        firing: state.is_some_and(|s| s.as_str() == "ALARM"),
        updated: updated.and_then(|t| DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos())),
    }
}
