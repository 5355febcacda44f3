//! EventBridge adapter for [`EventRules`] (feature `doctor`).

use async_trait::async_trait;

use super::port_error;
use crate::inventory::{EventRules, MAX_RULES, RuleFacts};
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

    async fn rules(&self) -> Result<Vec<RuleFacts>, PortError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        // ListRules has no SDK paginator: NextToken by hand, bounded.
        loop {
            let page = self
                .client
                .list_rules()
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| port_error("events:ListRules", e))?;
            out.extend(page.rules().iter().map(|r| RuleFacts {
                name: r.name().unwrap_or_default().to_owned(),
                state: r.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                pattern: r.event_pattern().map(str::to_owned),
            }));
            token = page.next_token().map(str::to_owned);
            if out.len() >= MAX_RULES {
                out.truncate(MAX_RULES);
                break;
            }
            if token.is_none() {
                break;
            }
        }
        Ok(out)
    }

    async fn targets(&self, name: &str) -> Result<Vec<String>, PortError> {
        match self.client.list_targets_by_rule().rule(name).send().await {
            Ok(out) => Ok(out.targets().iter().map(|t| t.arn().to_owned()).collect()),
            Err(e) => {
                let e = port_error("events:ListTargetsByRule", e);
                if e.is_not_found() {
                    Ok(Vec::new())
                } else {
                    Err(e)
                }
            }
        }
    }
}
