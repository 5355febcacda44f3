//! Node group adapter: what image a self-managed (Auto Scaling) or managed node group launches.

use async_trait::async_trait;

use super::port_error;
use super::template::{self, TemplateSpec};
use crate::ami::Architecture;
use crate::ami::resolve::{GroupImage, NodeGroupCatalog};
use crate::policy::NodeGroup;
use crate::port::{ErrorKind, PortError};

/// Auto Scaling, EC2 and EKS through the SDK.
#[derive(Clone, Debug)]
pub struct NodeGroups {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
    eks: aws_sdk_eks::Client,
}

impl NodeGroups {
    /// Wraps the clients.
    pub fn new(
        autoscaling: aws_sdk_autoscaling::Client,
        ec2: aws_sdk_ec2::Client,
        eks: aws_sdk_eks::Client,
    ) -> Self {
        Self {
            autoscaling,
            ec2,
            eks,
        }
    }

    async fn launch_template_image(
        &self,
        id: Option<&str>,
        name: Option<&str>,
        version: Option<&str>,
    ) -> Result<GroupImage, PortError> {
        let spec = TemplateSpec {
            id: id.map(str::to_string),
            name: name.map(str::to_string),
            version: version.unwrap_or("$Default").to_string(),
        };
        match template::describe(&self.ec2, &spec).await {
            Ok(v) => Ok(match v.image {
                Some(id) if id.starts_with("ami-") => GroupImage::Image(id),
                _ => GroupImage::Unknown,
            }),
            Err(e) if e.is_not_found() => Ok(GroupImage::Unknown),
            Err(e) => Err(e),
        }
    }

    async fn asg_image(&self, name: &str) -> Result<GroupImage, PortError> {
        let out = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(name)
            .send()
            .await
            .map_err(|e| port_error("autoscaling:DescribeAutoScalingGroups", e))?;
        let Some(group) = out.auto_scaling_groups().first() else {
            return Err(PortError::new(
                "autoscaling:DescribeAutoScalingGroups",
                ErrorKind::NotFound,
                format!("Auto Scaling group {name} does not exist"),
            ));
        };
        let spec = group.launch_template().cloned().or_else(|| {
            group
                .mixed_instances_policy()
                .and_then(|m| m.launch_template())
                .and_then(|t| t.launch_template_specification())
                .cloned()
        });
        if let Some(spec) = spec {
            return self
                .launch_template_image(
                    spec.launch_template_id(),
                    spec.launch_template_name(),
                    spec.version(),
                )
                .await;
        }
        if let Some(lc) = group.launch_configuration_name() {
            let out = self
                .autoscaling
                .describe_launch_configurations()
                .launch_configuration_names(lc)
                .send()
                .await
                .map_err(|e| port_error("autoscaling:DescribeLaunchConfigurations", e))?;
            if let Some(id) = out
                .launch_configurations()
                .first()
                .and_then(|c| c.image_id())
            {
                return Ok(GroupImage::Image(id.to_string()));
            }
        }
        Ok(GroupImage::Unknown)
    }

    async fn managed_image(&self, cluster: &str, name: &str) -> Result<GroupImage, PortError> {
        let out = self
            .eks
            .describe_nodegroup()
            .cluster_name(cluster)
            .nodegroup_name(name)
            .send()
            .await
            .map_err(|e| port_error("eks:DescribeNodegroup", e))?;
        let Some(ng) = out.nodegroup() else {
            return Ok(GroupImage::Unknown);
        };
        if let Some(lt) = ng.launch_template() {
            let image = self
                .launch_template_image(lt.id(), lt.name(), lt.version())
                .await?;
            if image != GroupImage::Unknown {
                return Ok(image);
            }
        }
        Ok(match ng.ami_type().map(|t| t.as_str()) {
            Some(t) if t.contains("ARM_64") => GroupImage::Architecture(Architecture::Arm64),
            Some(t) if t.contains("x86_64") => GroupImage::Architecture(Architecture::X86_64),
            _ => GroupImage::Unknown,
        })
    }
}

#[async_trait]
impl NodeGroupCatalog for NodeGroups {
    async fn current_image(
        &self,
        cluster: &str,
        group: &NodeGroup,
    ) -> Result<GroupImage, PortError> {
        match group {
            NodeGroup::AutoScalingGroup(name) => self.asg_image(name).await,
            NodeGroup::ManagedNodeGroup(name) => self.managed_image(cluster, name).await,
        }
    }
}
