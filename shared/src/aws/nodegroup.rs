//! Node group adapter: what image a self-managed (Auto Scaling) or managed node group launches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::template::{self, TemplateSpec};
use super::{autoscaling, eks, port_error};
use crate::ami::Architecture;
use crate::ami::instance_types::GroupTypes;
use crate::ami::resolve::{GroupImage, NodeGroupCatalog};
use crate::policy::NodeGroup;
use crate::port::{ErrorKind, PortError};

/// Auto Scaling, EC2 and EKS through the SDK.
#[derive(Clone, Debug)]
pub struct NodeGroups {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
    eks: aws_sdk_eks::Client,
    /// What this pass's reads of the groups saw (shared with the rotator's
    /// [`super::autoscaling::AutoScaling`]).
    seen: super::autoscaling::SeenGroups,
    /// The architectures EC2 reported per instance type: fixed facts of a type, read once per
    /// process.
    architectures: Arc<Mutex<HashMap<String, Vec<String>>>>,
}

/// The instance type a launch template version names (`by attributes` when it has
/// `InstanceRequirements`), with where it was read.
fn template_types_of(v: &template::TemplateVersion) -> (String, Vec<String>, bool) {
    (
        format!("launch template {} version {}", v.template_id, v.number),
        v.instance_type.iter().cloned().collect(),
        v.by_attributes,
    )
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
            seen: super::autoscaling::SeenGroups::default(),
            architectures: Arc::default(),
        }
    }

    /// Reads a group from what `seen` holds of this pass's reads (the rotator's snapshot)
    /// before asking Auto Scaling and EC2 again.
    pub fn with_seen(mut self, seen: super::autoscaling::SeenGroups) -> Self {
        self.seen = seen;
        self
    }

    async fn launch_template_image(&self, spec: &TemplateSpec) -> Result<GroupImage, PortError> {
        match template::describe(&self.ec2, spec).await {
            Ok(v) => Ok(match v.image {
                Some(id) if id.starts_with("ami-") => GroupImage::Image(id),
                _ => GroupImage::Unknown,
            }),
            Err(e) if e.is_not_found() => Ok(GroupImage::Unknown),
            Err(e) => Err(e),
        }
    }

    async fn asg_image(&self, name: &str) -> Result<GroupImage, PortError> {
        let Some(group) = autoscaling::describe_group(&self.autoscaling, name).await? else {
            return Err(autoscaling::no_group(name));
        };
        if let Some(spec) = autoscaling::template_spec(&group) {
            return self.launch_template_image(&spec).await;
        }
        if let Some(lc) = group.launch_configuration_name()
            && let Some(id) = self
                .launch_configuration(lc)
                .await?
                .and_then(|c| c.image_id().map(str::to_string))
        {
            return Ok(GroupImage::Image(id));
        }
        Ok(GroupImage::Unknown)
    }

    /// Launch configuration `name`, `None` when it does not exist.
    async fn launch_configuration(
        &self,
        name: &str,
    ) -> Result<Option<aws_sdk_autoscaling::types::LaunchConfiguration>, PortError> {
        let out = self
            .autoscaling
            .describe_launch_configurations()
            .launch_configuration_names(name)
            .send()
            .await
            .map_err(|e| port_error("autoscaling:DescribeLaunchConfigurations", e))?;
        Ok(out.launch_configurations().first().cloned())
    }

    /// The instance type of a launch template version (`by attributes` when it has
    /// `InstanceRequirements`), with where it was read.
    async fn template_types(
        &self,
        spec: &TemplateSpec,
    ) -> Result<(String, Vec<String>, bool), PortError> {
        Ok(template_types_of(
            &template::describe(&self.ec2, spec).await?,
        ))
    }

    async fn asg_types(&self, name: &str) -> Result<(String, Vec<String>, bool), PortError> {
        let seen = self.seen.get(name);
        let group = match &seen {
            Some(s) => s.group.clone(),
            None => match autoscaling::describe_group(&self.autoscaling, name).await? {
                Some(g) => g,
                // A group that does not exist launches nothing: nothing to check.
                None => return Ok((String::new(), Vec::new(), false)),
            },
        };
        if let Some(lt) = group
            .mixed_instances_policy()
            .and_then(|m| m.launch_template())
        {
            let overrides = lt.overrides();
            let by_attributes = overrides
                .iter()
                .any(|o| o.instance_requirements().is_some());
            let types: Vec<String> = overrides
                .iter()
                .filter_map(|o| o.instance_type().map(str::to_string))
                .collect();
            if !types.is_empty() || by_attributes {
                return Ok((
                    "mixed instances policy overrides".to_string(),
                    types,
                    by_attributes,
                ));
            }
        }
        if let Some(v) = seen.and_then(|s| s.template) {
            return Ok(template_types_of(&v));
        }
        if let Some(spec) = autoscaling::template_spec(&group) {
            return self.template_types(&spec).await;
        }
        if let Some(lc) = group.launch_configuration_name() {
            let types = self
                .launch_configuration(lc)
                .await?
                .and_then(|c| c.instance_type().map(str::to_string))
                .into_iter()
                .collect();
            return Ok((format!("launch configuration {lc}"), types, false));
        }
        Ok((String::new(), Vec::new(), false))
    }

    async fn managed_types(
        &self,
        cluster: &str,
        name: &str,
    ) -> Result<(String, Vec<String>, bool), PortError> {
        let ng = match eks::describe_nodegroup(&self.eks, cluster, name).await {
            Ok(Some(ng)) => ng,
            // A node group that does not exist launches nothing: nothing to check.
            Ok(None) => return Ok((String::new(), Vec::new(), false)),
            Err(e) if e.kind == ErrorKind::NotFound => {
                return Ok((String::new(), Vec::new(), false));
            }
            Err(e) => return Err(e),
        };
        if !ng.instance_types().is_empty() {
            return Ok((
                "the managed node group's instanceTypes".to_string(),
                ng.instance_types().to_vec(),
                false,
            ));
        }
        match ng.launch_template() {
            Some(lt) => {
                self.template_types(&TemplateSpec::from(&eks::template_ref(lt)))
                    .await
            }
            None => Ok((String::new(), Vec::new(), false)),
        }
    }

    /// What EC2 says each of `types` supports (`None` for a type it does not describe).
    async fn architectures(
        &self,
        types: &[String],
    ) -> Result<Vec<(String, Option<Vec<String>>)>, PortError> {
        let mut known: HashMap<String, Vec<String>> = match self.architectures.lock() {
            Ok(cached) => types
                .iter()
                .filter_map(|t| cached.get(t).map(|a| (t.clone(), a.clone())))
                .collect(),
            Err(_) => HashMap::new(),
        };
        let unknown: Vec<String> = types
            .iter()
            .filter(|t| !known.contains_key(*t))
            .cloned()
            .collect();
        for chunk in unknown.chunks(100) {
            let wanted: Vec<aws_sdk_ec2::types::InstanceType> = chunk
                .iter()
                .map(|t| aws_sdk_ec2::types::InstanceType::from(t.as_str()))
                .collect();
            let mut pages = self
                .ec2
                .describe_instance_types()
                .set_instance_types(Some(wanted))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| port_error("ec2:DescribeInstanceTypes", e))?;
                for t in page.instance_types() {
                    let Some(name) = t.instance_type() else {
                        continue;
                    };
                    let archs: Vec<String> = t
                        .processor_info()
                        .map(|p| {
                            p.supported_architectures()
                                .iter()
                                .map(|a| a.as_str().to_string())
                                .collect()
                        })
                        .unwrap_or_default();
                    if let Ok(mut cached) = self.architectures.lock() {
                        cached.insert(name.as_str().to_string(), archs.clone());
                    }
                    known.insert(name.as_str().to_string(), archs);
                }
            }
        }
        Ok(types
            .iter()
            .map(|t| (t.clone(), known.get(t).cloned()))
            .collect())
    }

    async fn managed_image(&self, cluster: &str, name: &str) -> Result<GroupImage, PortError> {
        let Some(ng) = eks::describe_nodegroup(&self.eks, cluster, name).await? else {
            return Ok(GroupImage::Unknown);
        };
        if let Some(lt) = ng.launch_template() {
            let image = self
                .launch_template_image(&TemplateSpec::from(&eks::template_ref(lt)))
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

    async fn instance_types(
        &self,
        cluster: &str,
        group: &NodeGroup,
    ) -> Result<GroupTypes, PortError> {
        let (source, types, by_attributes) = match group {
            NodeGroup::AutoScalingGroup(name) => self.asg_types(name).await?,
            NodeGroup::ManagedNodeGroup(name) => self.managed_types(cluster, name).await?,
        };
        let mut types_unique = Vec::new();
        for t in types {
            if !types_unique.contains(&t) {
                types_unique.push(t);
            }
        }
        Ok(GroupTypes {
            source,
            types: self.architectures(&types_unique).await?,
            by_attributes,
        })
    }
}
