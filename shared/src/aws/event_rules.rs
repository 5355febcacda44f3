//! EventBridge adapter for [`EventRules`] (feature `doctor`).

use async_trait::async_trait;

use super::port_error;
use crate::inventory::EventRules;
use crate::port::PortError;

/// EventBridge through the SDK.
#[derive(Clone, Debug)]
pub struct Rules {
    client: aws_sdk_eventbridge::Client,
}

impl Rules {
    /// Wraps a client.
    pub fn new(client: aws_sdk_eventbridge::Client) -> Self {
        Self { client }
    }

    /// A client from the SDK configuration.
    pub fn from_config(config: &aws_config::SdkConfig) -> Self {
        Self::new(aws_sdk_eventbridge::Client::new(config))
    }
}

#[async_trait]
impl EventRules for Rules {
    async fn rule_state(&self, name: &str) -> Result<Option<String>, PortError> {
        match self.client.describe_rule().name(name).send().await {
            Ok(out) => Ok(Some(
                out.state()
                    .map(|s| s.as_str().to_owned())
                    .unwrap_or_default(),
            )),
            Err(e) => {
                let e = port_error("events:DescribeRule", e);
                if e.is_not_found() { Ok(None) } else { Err(e) }
            }
        }
    }
}
