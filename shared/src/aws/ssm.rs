//! SSM Parameter Store adapter: parameter reads and policy documents under a prefix.

use std::collections::HashMap;

use async_trait::async_trait;

use super::port_error;
use crate::ami::resolve::{Parameter, ParameterStore};
use crate::port::PortError;

/// Parameter Store through the SDK.
#[derive(Clone, Debug)]
pub struct Ssm {
    client: aws_sdk_ssm::Client,
}

/// One parameter found under a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredParameter {
    /// Full name.
    pub name: String,
    /// Value.
    pub value: String,
    /// Version number.
    pub version: i64,
}

/// A parameter as read, `None` without its name or value.
fn stored(p: &aws_sdk_ssm::types::Parameter) -> Option<StoredParameter> {
    Some(StoredParameter {
        name: p.name()?.to_string(),
        value: p.value()?.to_string(),
        version: p.version(),
    })
}

impl Ssm {
    /// Wraps a client.
    pub fn new(client: aws_sdk_ssm::Client) -> Self {
        Self { client }
    }

    /// A client of `config`'s region and credentials.
    pub fn from_config(config: &aws_config::SdkConfig) -> Self {
        Self::new(aws_sdk_ssm::Client::new(config))
    }

    /// Every parameter under `prefix` (recursive, all pages), sorted by name.
    pub async fn parameters_by_path(
        &self,
        prefix: &str,
    ) -> Result<Vec<StoredParameter>, PortError> {
        let pages = self
            .client
            .get_parameters_by_path()
            .path(prefix.trim_end_matches('/').to_string() + "/")
            .recursive(true)
            .with_decryption(true)
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| port_error("ssm:GetParametersByPath", e))?;
        let mut out: Vec<StoredParameter> = pages
            .iter()
            .flat_map(|page| page.parameters())
            .filter_map(stored)
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// One parameter; `Ok(None)` when it does not exist.
    pub async fn parameter(&self, name: &str) -> Result<Option<StoredParameter>, PortError> {
        match self
            .client
            .get_parameter()
            .name(name)
            .with_decryption(true)
            .send()
            .await
        {
            Ok(out) => Ok(out.parameter().and_then(stored)),
            Err(e) => {
                let e = port_error("ssm:GetParameter", e);
                if e.is_not_found() { Ok(None) } else { Err(e) }
            }
        }
    }

    /// Stores `value` as String parameter `name` (overwriting), and returns its new version.
    /// `advanced` asks for the Advanced tier; otherwise no tier is sent (a new parameter is
    /// Standard, an existing one keeps its tier: SSM refuses to move one back to Standard).
    pub async fn put_string(
        &self,
        name: &str,
        value: &str,
        advanced: bool,
    ) -> Result<i64, PortError> {
        let mut put = self
            .client
            .put_parameter()
            .name(name)
            .value(value)
            .r#type(aws_sdk_ssm::types::ParameterType::String)
            .overwrite(true);
        if advanced {
            put = put.tier(aws_sdk_ssm::types::ParameterTier::Advanced);
        }
        let out = put
            .send()
            .await
            .map_err(|e| port_error("ssm:PutParameter", e))?;
        Ok(out.version())
    }
}

#[async_trait]
impl ParameterStore for Ssm {
    async fn get_parameters(
        &self,
        names: &[String],
    ) -> Result<HashMap<String, Parameter>, PortError> {
        let mut out = HashMap::new();
        for chunk in names.chunks(10) {
            let resp = self
                .client
                .get_parameters()
                .set_names(Some(chunk.to_vec()))
                .with_decryption(true)
                .send()
                .await
                .map_err(|e| port_error("ssm:GetParameters", e))?;
            for p in resp.parameters() {
                let (Some(name), Some(value)) = (p.name(), p.value()) else {
                    continue;
                };
                // Callers may ask by ARN; SSM answers with the name. Map back to what was asked.
                let asked = chunk
                    .iter()
                    .find(|n| *n == name || p.arn().is_some_and(|arn| arn == n.as_str()))
                    .cloned()
                    .unwrap_or_else(|| name.to_string());
                out.insert(
                    asked,
                    Parameter {
                        value: value.to_string(),
                        version: p.version(),
                    },
                );
            }
        }
        Ok(out)
    }
}

/// Policy documents stored as SSM parameters under a prefix (one parameter per pool).
#[derive(Clone, Debug)]
pub struct SsmPolicies {
    ssm: Ssm,
    prefix: String,
}

impl SsmPolicies {
    /// Policies under `prefix` (normalised to end with `/`).
    pub fn new(ssm: Ssm, prefix: &str) -> Self {
        let prefix = format!("{}/", prefix.trim_end_matches('/'));
        Self { ssm, prefix }
    }
}

#[async_trait]
impl crate::policy::source::PolicySource for SsmPolicies {
    async fn all(&self) -> Result<Vec<crate::policy::source::PolicyDocument>, PortError> {
        Ok(self
            .ssm
            .parameters_by_path(&self.prefix)
            .await?
            .into_iter()
            .map(|p| {
                crate::policy::source::PolicyDocument::parameter(&self.prefix, p.name, p.value)
            })
            .collect())
    }

    async fn one(
        &self,
        source: &str,
    ) -> Result<Option<crate::policy::source::PolicyDocument>, PortError> {
        Ok(self.ssm.parameter(source).await?.map(|p| {
            crate::policy::source::PolicyDocument::parameter(&self.prefix, p.name, p.value)
        }))
    }

    fn contains(&self, name: &str) -> bool {
        name.starts_with(&self.prefix)
    }
}

/// A published status that does not parse: an error naming the parameter.
fn status_of(p: &StoredParameter) -> Result<crate::rollout::Rollout, PortError> {
    serde_json::from_str(&p.value).map_err(|e| {
        PortError::new(
            "ssm:GetParameter",
            crate::port::ErrorKind::Invalid,
            format!(
                "status parameter {} is not a nodecycle rollout status: {e}",
                p.name
            ),
        )
    })
}

#[async_trait]
impl crate::rollout::StatusBoard for Ssm {
    async fn publish(&self, status: &crate::rollout::Rollout) -> Result<(), PortError> {
        let doc = serde_json::to_string(status).map_err(|e| {
            PortError::new(
                "ssm:PutParameter",
                crate::port::ErrorKind::Invalid,
                format!("cannot encode the status of {}: {e}", status.pool),
            )
        })?;
        self.put_string(&crate::rollout::parameter_name(&status.pool), &doc, false)
            .await
            .map(|_| ())
    }

    async fn read(&self, pool: &str) -> Result<Option<crate::rollout::Rollout>, PortError> {
        match self
            .parameter(&crate::rollout::parameter_name(pool))
            .await?
        {
            None => Ok(None),
            Some(p) => status_of(&p).map(Some),
        }
    }

    async fn read_cluster(&self, cluster: &str) -> Result<Vec<crate::rollout::Rollout>, PortError> {
        self.parameters_by_path(&crate::rollout::cluster_path(cluster))
            .await?
            .iter()
            .map(status_of)
            .collect()
    }
}
