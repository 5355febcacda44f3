//! CloudFormation adapter for [`StackOutputs`] (feature `doctor`).

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::port_error;
use crate::inventory::StackOutputs;
use crate::port::PortError;

/// CloudFormation through the SDK.
#[derive(Clone, Debug)]
pub struct Stacks {
    client: aws_sdk_cloudformation::Client,
}

impl Stacks {
    /// Wraps a client.
    pub fn new(client: aws_sdk_cloudformation::Client) -> Self {
        Self { client }
    }

    /// A client from the SDK configuration.
    pub fn from_config(config: &aws_config::SdkConfig) -> Self {
        Self::new(aws_sdk_cloudformation::Client::new(config))
    }
}

/// CloudFormation answers an unknown stack with `ValidationError: Stack with id X does not exist`.
fn is_missing_stack(e: &PortError) -> bool {
    e.message.starts_with("ValidationError") && e.message.contains("does not exist")
}

#[async_trait]
impl StackOutputs for Stacks {
    async fn outputs(&self, stack: &str) -> Result<Option<BTreeMap<String, String>>, PortError> {
        let out = match self.client.describe_stacks().stack_name(stack).send().await {
            Ok(out) => out,
            Err(e) => {
                let e = port_error("cloudformation:DescribeStacks", e);
                return if is_missing_stack(&e) {
                    Ok(None)
                } else {
                    Err(e)
                };
            }
        };
        Ok(out.stacks().first().map(|s| {
            s.outputs()
                .iter()
                .filter_map(|o| {
                    Some((
                        o.output_key()?.to_owned(),
                        o.output_value().unwrap_or_default().to_owned(),
                    ))
                })
                .collect()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::ErrorKind;

    #[test]
    fn missing_stack_is_recognised() {
        let e = PortError::new(
            "cloudformation:DescribeStacks",
            ErrorKind::Other,
            "ValidationError: Stack with id nodecycle does not exist",
        );
        assert!(is_missing_stack(&e));
        let e = PortError::new(
            "cloudformation:DescribeStacks",
            ErrorKind::Other,
            "ValidationError: 1 validation error",
        );
        assert!(!is_missing_stack(&e));
    }
}
