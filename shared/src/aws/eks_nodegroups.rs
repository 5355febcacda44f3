//! EKS managed node group adapter for [`ManagedGroupOps`].

use async_trait::async_trait;
use aws_sdk_eks::types::{LaunchTemplateSpecification, NodegroupUpdateConfig};

use super::template::{self, TemplateSpec};
use super::{eks, port_error};
use crate::managed::{
    ManagedGroup, ManagedGroupOps, TemplateRef, UpdateConfig, UpdateState, UpdateStatus,
    UpdateTarget,
};
use crate::port::{ErrorKind, PortError};

/// EKS and EC2 (launch templates) through the SDK.
#[derive(Clone, Debug)]
pub struct ManagedNodeGroups {
    eks: aws_sdk_eks::Client,
    ec2: aws_sdk_ec2::Client,
}

impl ManagedNodeGroups {
    /// Wraps the clients.
    pub fn new(eks: aws_sdk_eks::Client, ec2: aws_sdk_ec2::Client) -> Self {
        Self { eks, ec2 }
    }
}

fn non_negative(v: Option<i32>) -> Option<u32> {
    v.and_then(|n| u32::try_from(n).ok())
}

#[async_trait]
impl ManagedGroupOps for ManagedNodeGroups {
    async fn describe(&self, cluster: &str, name: &str) -> Result<ManagedGroup, PortError> {
        let ng = eks::describe_nodegroup(&self.eks, cluster, name)
            .await?
            .ok_or_else(|| {
                PortError::new(
                    "eks:DescribeNodegroup",
                    ErrorKind::NotFound,
                    format!("no node group {name} in cluster {cluster}"),
                )
            })?;
        Ok(ManagedGroup {
            name: name.to_string(),
            status: ng
                .status()
                .map(|s| s.as_str().to_string())
                .unwrap_or_default(),
            release_version: ng.release_version().map(str::to_string),
            ami_type: ng.ami_type().map(|t| t.as_str().to_string()),
            launch_template: ng.launch_template().map(eks::template_ref),
            update_config: UpdateConfig {
                max_unavailable: non_negative(ng.update_config().and_then(|c| c.max_unavailable())),
                max_unavailable_percentage: non_negative(
                    ng.update_config()
                        .and_then(|c| c.max_unavailable_percentage()),
                ),
                update_strategy: ng
                    .update_config()
                    .and_then(|c| c.update_strategy())
                    .and_then(|s| match s.as_str() {
                        "DEFAULT" => Some(crate::managed::UpdateStrategy::Default),
                        "MINIMAL" => Some(crate::managed::UpdateStrategy::Minimal),
                        _ => None,
                    }),
            },
            auto_scaling_group: eks::auto_scaling_group_of(&ng),
            auto_repair: ng
                .node_repair_config()
                .and_then(|c| c.enabled())
                .unwrap_or(false),
        })
    }

    async fn set_update_config(
        &self,
        cluster: &str,
        name: &str,
        config: UpdateConfig,
    ) -> Result<(), PortError> {
        if self.describe(cluster, name).await?.update_config == config {
            return Ok(());
        }
        let signed = |v: Option<u32>| {
            v.map(|n| {
                i32::try_from(n).map_err(|_| {
                    PortError::other(
                        "eks:UpdateNodegroupConfig",
                        format!("updateConfig value {n} out of range"),
                    )
                })
            })
            .transpose()
        };
        self.eks
            .update_nodegroup_config()
            .cluster_name(cluster)
            .nodegroup_name(name)
            .update_config(
                NodegroupUpdateConfig::builder()
                    .set_max_unavailable(signed(config.max_unavailable)?)
                    .set_max_unavailable_percentage(signed(config.max_unavailable_percentage)?)
                    .set_update_strategy(config.update_strategy.map(|s| s.as_str().into()))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| port_error("eks:UpdateNodegroupConfig", e))?;
        Ok(())
    }

    async fn start_update(
        &self,
        cluster: &str,
        name: &str,
        target: &UpdateTarget,
        token: &str,
    ) -> Result<String, PortError> {
        let mut call = self
            .eks
            .update_nodegroup_version()
            .cluster_name(cluster)
            .nodegroup_name(name)
            .force(false)
            .client_request_token(token);
        call = match target {
            UpdateTarget::ReleaseVersion { version } => call.release_version(version),
            UpdateTarget::LaunchTemplate { id, version } => call.launch_template(
                LaunchTemplateSpecification::builder()
                    .id(id)
                    .version(version)
                    .build(),
            ),
        };
        let out = call
            .send()
            .await
            .map_err(|e| port_error("eks:UpdateNodegroupVersion", e))?;
        out.update()
            .and_then(|u| u.id())
            .map(str::to_string)
            .ok_or_else(|| {
                PortError::other("eks:UpdateNodegroupVersion", "no update id in the response")
            })
    }

    async fn describe_update(
        &self,
        cluster: &str,
        name: &str,
        update_id: &str,
    ) -> Result<UpdateStatus, PortError> {
        let out = self
            .eks
            .describe_update()
            .name(cluster)
            .nodegroup_name(name)
            .update_id(update_id)
            .send()
            .await
            .map_err(|e| port_error("eks:DescribeUpdate", e))?;
        let u = out
            .update()
            .ok_or_else(|| PortError::other("eks:DescribeUpdate", "no update in the response"))?;
        let status = u.status().map(|s| s.as_str()).unwrap_or_default();
        let state = UpdateState::parse(status).ok_or_else(|| {
            PortError::other(
                "eks:DescribeUpdate",
                format!("update {update_id} has unknown status {status:?}"),
            )
        })?;
        let errors = u
            .errors()
            .iter()
            .map(|e| {
                let resources = if e.resource_ids().is_empty() {
                    String::new()
                } else {
                    format!(" ({})", e.resource_ids().join(", "))
                };
                format!(
                    "{}: {}{resources}",
                    e.error_code().map(|c| c.as_str()).unwrap_or("Unknown"),
                    e.error_message().unwrap_or("no message")
                )
            })
            .collect();
        Ok(UpdateStatus {
            id: update_id.to_string(),
            state,
            errors,
        })
    }

    async fn template_with_image(
        &self,
        t: &TemplateRef,
        image: &str,
    ) -> Result<(String, String), PortError> {
        let (v, _) =
            template::with_image(&self.ec2, &TemplateSpec::from(t), None, None, image).await?;
        Ok((v.template_id, v.number.to_string()))
    }

    async fn template_image(&self, t: &TemplateRef) -> Result<Option<String>, PortError> {
        Ok(template::describe(&self.ec2, &t.into()).await?.image)
    }
}
