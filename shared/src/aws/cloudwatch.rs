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
            let mut pages = self
                .client
                .describe_alarms()
                .set_alarm_names(Some(chunk.to_vec()))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| port_error("cloudwatch:DescribeAlarms", e))?;
                for a in page.metric_alarms() {
                    out.push(AlarmState {
                        name: a.alarm_name().unwrap_or_default().to_string(),
                        firing: a.state_value().is_some_and(|s| s.as_str() == "ALARM"),
                        updated: a.state_updated_timestamp().and_then(|t| {
                            DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos())
                        }),
                    });
                }
                for a in page.composite_alarms() {
                    out.push(AlarmState {
                        name: a.alarm_name().unwrap_or_default().to_string(),
                        firing: a.state_value().is_some_and(|s| s.as_str() == "ALARM"),
                        updated: a.state_updated_timestamp().and_then(|t| {
                            DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos())
                        }),
                    });
                }
            }
        }
        Ok(out)
    }
}
