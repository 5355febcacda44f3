//! Auto Scaling adapter for [`GroupOps`]: self-managed node groups.

use async_trait::async_trait;
use aws_sdk_autoscaling::types::{
    LaunchTemplate, LaunchTemplateSpecification, MixedInstancesPolicy,
};
use chrono::{DateTime, Utc};

use super::port_error;
use super::template::{self, TemplateSpec};
use crate::fleet::{Group, GroupInstance, GroupOps, Lifecycle, Sizes};
use crate::port::{ErrorKind, PortError};

/// Auto Scaling and EC2 through the SDK.
#[derive(Clone, Debug)]
pub struct AutoScaling {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
    group_updates: bool,
}

/// Environment variable (the stack parameter `AutoScalingGroupUpdates`, `Enabled` or
/// `Disabled`) saying whether the role may call autoscaling:UpdateAutoScalingGroup.
pub const GROUP_UPDATES_ENV: &str = "NODECYCLE_AUTOSCALING_GROUP_UPDATES";

/// The stack parameter that grants autoscaling:UpdateAutoScalingGroup.
pub const GROUP_UPDATES_PARAMETER: &str = "AutoScalingGroupUpdates";

/// The refusal of `what` (an UpdateAutoScalingGroup) that the stack does not allow (`denied`: IAM
/// said so; else nodecycle refused before asking), naming the parameter that allows it and
/// `otherwise`, the way to do without.
fn updates_not_enabled(what: &str, denied: bool, otherwise: &str) -> PortError {
    PortError::new(
        "autoscaling:UpdateAutoScalingGroup",
        ErrorKind::AccessDenied,
        format!(
            "{what} needs autoscaling:UpdateAutoScalingGroup, {}: deploy the stack with \
             {GROUP_UPDATES_PARAMETER}=Enabled, or {otherwise}",
            if denied {
                "which the rotator's role was denied"
            } else {
                "which the stack does not grant"
            }
        ),
    )
}

/// How a group on a pinned launch template version does without group updates.
const PINNED_OTHERWISE: &str = "point the group at $Latest or $Default (with the parameter, NodeRoleArns names the template's instance profile role)";
/// How a policy with `disruption.surgeAboveMaxSize` does without group updates.
const MAX_SIZE_OTHERWISE: &str =
    "leave disruption.surgeAboveMaxSize unset (a group at MaxSize then rotates without a surge)";

fn lifecycle(state: &str) -> Lifecycle {
    match state {
        "InService" => Lifecycle::InService,
        s if s.starts_with("Pending") => Lifecycle::Pending,
        s if s.starts_with("Terminat") || s.starts_with("Detach") || s.contains("Standby") => {
            Lifecycle::Leaving
        }
        other => Lifecycle::Other(other.to_string()),
    }
}

impl AutoScaling {
    /// Wraps the clients.
    /// Wraps the clients, with group updates enabled (see [`AutoScaling::with_group_updates`]).
    pub fn new(autoscaling: aws_sdk_autoscaling::Client, ec2: aws_sdk_ec2::Client) -> Self {
        Self {
            autoscaling,
            ec2,
            group_updates: true,
        }
    }

    /// Whether the role may call autoscaling:UpdateAutoScalingGroup (stack parameter
    /// `AutoScalingGroupUpdates`). When not, a group on a pinned launch template version is
    /// refused before any write, with what to change.
    pub fn with_group_updates(mut self, enabled: bool) -> Self {
        self.group_updates = enabled;
        self
    }

    async fn group(
        &self,
        name: &str,
    ) -> Result<aws_sdk_autoscaling::types::AutoScalingGroup, PortError> {
        let out = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(name)
            .send()
            .await
            .map_err(|e| port_error("autoscaling:DescribeAutoScalingGroups", e))?;
        out.auto_scaling_groups().first().cloned().ok_or_else(|| {
            PortError::new(
                "autoscaling:DescribeAutoScalingGroups",
                ErrorKind::NotFound,
                format!("Auto Scaling group {name} does not exist"),
            )
        })
    }

    fn template_of(group: &aws_sdk_autoscaling::types::AutoScalingGroup) -> Option<TemplateSpec> {
        let spec = group.launch_template().or_else(|| {
            group
                .mixed_instances_policy()
                .and_then(|m| m.launch_template())
                .and_then(|t| t.launch_template_specification())
        })?;
        Some(TemplateSpec {
            id: spec.launch_template_id().map(str::to_string),
            name: spec.launch_template_name().map(str::to_string),
            version: spec.version().unwrap_or("$Default").to_string(),
        })
    }
}

#[async_trait]
impl GroupOps for AutoScaling {
    async fn desired_capacity(&self, group: &str) -> Result<i32, PortError> {
        Ok(self
            .group(group)
            .await?
            .desired_capacity()
            .unwrap_or_default())
    }

    async fn sizes(&self, group: &str) -> Result<Sizes, PortError> {
        let g = self.group(group).await?;
        Ok(Sizes {
            desired: g.desired_capacity().unwrap_or_default(),
            min: g.min_size().unwrap_or_default(),
            max: g.max_size().unwrap_or_default(),
        })
    }

    async fn set_max_size(&self, group: &str, max: i32) -> Result<(), PortError> {
        let what = format!("setting the MaxSize of group {group} to {max} for a surge");
        if !self.group_updates {
            // Refused before asking: the stack grants no group updates.
            return Err(updates_not_enabled(&what, false, MAX_SIZE_OTHERWISE));
        }
        self.autoscaling
            .update_auto_scaling_group()
            .auto_scaling_group_name(group)
            .max_size(max)
            .send()
            .await
            .map_err(
                |e| match port_error("autoscaling:UpdateAutoScalingGroup", e) {
                    e if e.kind == ErrorKind::AccessDenied => {
                        updates_not_enabled(&what, true, MAX_SIZE_OTHERWISE)
                    }
                    e => e,
                },
            )?;
        Ok(())
    }

    async fn suspend_processes(&self, group: &str, processes: &[String]) -> Result<(), PortError> {
        self.autoscaling
            .suspend_processes()
            .auto_scaling_group_name(group)
            .set_scaling_processes(Some(processes.to_vec()))
            .send()
            .await
            .map_err(|e| port_error("autoscaling:SuspendProcesses", e))?;
        Ok(())
    }

    async fn resume_processes(&self, group: &str, processes: &[String]) -> Result<(), PortError> {
        self.autoscaling
            .resume_processes()
            .auto_scaling_group_name(group)
            .set_scaling_processes(Some(processes.to_vec()))
            .send()
            .await
            .map_err(|e| port_error("autoscaling:ResumeProcesses", e))?;
        Ok(())
    }

    async fn launch_problem(&self, group: &str) -> Result<Option<String>, PortError> {
        use aws_sdk_autoscaling::types::ScalingActivityStatusCode as Code;
        let out = self
            .autoscaling
            .describe_scaling_activities()
            .auto_scaling_group_name(group)
            .max_records(1)
            .send()
            .await
            .map_err(|e| port_error("autoscaling:DescribeScalingActivities", e))?;
        Ok(out.activities().first().and_then(|a| {
            matches!(a.status_code(), Some(Code::Failed | Code::Cancelled)).then(|| {
                let what = a.description().unwrap_or("scaling activity");
                match a.status_message() {
                    Some(m) => format!("{what}: {m}"),
                    None => format!("{what}: {:?}", a.status_code()),
                }
            })
        }))
    }

    async fn describe(&self, name: &str) -> Result<(Group, Vec<GroupInstance>), PortError> {
        let g = self.group(name).await?;
        let launch_template_image = match Self::template_of(&g) {
            Some(t) => template::describe(&self.ec2, &t).await?.image,
            None => None,
        };
        let group = Group {
            name: name.to_string(),
            min_size: g.min_size().unwrap_or_default(),
            max_size: g.max_size().unwrap_or_default(),
            desired_capacity: g.desired_capacity().unwrap_or_default(),
            launch_template_image,
            suspended_processes: g
                .suspended_processes()
                .iter()
                .filter_map(|p| p.process_name().map(str::to_string))
                .collect(),
        };
        let ids: Vec<String> = g
            .instances()
            .iter()
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        let mut ec2_info = std::collections::HashMap::new();
        for chunk in ids.chunks(100) {
            let mut pages = self
                .ec2
                .describe_instances()
                .set_instance_ids(Some(chunk.to_vec()))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| port_error("ec2:DescribeInstances", e))?;
                for r in page.reservations() {
                    for i in r.instances() {
                        let Some(id) = i.instance_id() else { continue };
                        let launched = i
                            .launch_time()
                            .and_then(|t| {
                                DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos())
                            })
                            .unwrap_or_default();
                        ec2_info
                            .insert(id.to_string(), (i.image_id().map(str::to_string), launched));
                    }
                }
            }
        }
        let instances = g
            .instances()
            .iter()
            .filter_map(|i| {
                let id = i.instance_id()?.to_string();
                let (image_id, launch_time) = ec2_info
                    .get(&id)
                    .cloned()
                    .unwrap_or((None, DateTime::<Utc>::default()));
                Some(GroupInstance {
                    availability_zone: i.availability_zone().unwrap_or_default().to_string(),
                    lifecycle: lifecycle(i.lifecycle_state().map(|s| s.as_str()).unwrap_or("")),
                    instance_id: id,
                    image_id,
                    launch_time,
                })
            })
            .collect();
        Ok((group, instances))
    }

    async fn set_desired_capacity(&self, group: &str, desired: i32) -> Result<(), PortError> {
        self.autoscaling
            .set_desired_capacity()
            .auto_scaling_group_name(group)
            .desired_capacity(desired)
            .honor_cooldown(false)
            .send()
            .await
            .map_err(|e| port_error("autoscaling:SetDesiredCapacity", e))?;
        Ok(())
    }

    async fn terminate_instance(
        &self,
        instance_id: &str,
        decrement: bool,
    ) -> Result<(), PortError> {
        match self
            .autoscaling
            .terminate_instance_in_auto_scaling_group()
            .instance_id(instance_id)
            .should_decrement_desired_capacity(decrement)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = port_error("autoscaling:TerminateInstanceInAutoScalingGroup", e);
                // Already gone (terminated, or no longer in the group): nothing to do.
                let gone = e.is_not_found()
                    || e.message.contains("not found")
                    || e.message.contains("Instance Id not found");
                if gone { Ok(()) } else { Err(e) }
            }
        }
    }

    async fn set_image(&self, group: &str, image: &str) -> Result<String, PortError> {
        let g = self.group(group).await?;
        let t = Self::template_of(&g).ok_or_else(|| {
            PortError::new(
                "autoscaling:DescribeAutoScalingGroups",
                ErrorKind::Other,
                format!("group {group} uses no launch template; nodecycle rotates only groups with launch templates"),
            )
        })?;
        let pinned = !matches!(t.version.as_str(), "$Latest" | "$Default");
        if pinned && !self.group_updates {
            // Refused before any write: a new version the group is never pointed at would be
            // created again on every pass.
            let current = template::describe(&self.ec2, &t).await?;
            if current.image.as_deref() != Some(image) {
                let what = format!(
                    "group {group} launches pinned version {} of launch template {}: pointing it \
                     at a new version",
                    t.version, current.template_id
                );
                return Err(updates_not_enabled(&what, false, PINNED_OTHERWISE));
            }
        }
        let (version, created) = template::with_image(&self.ec2, &t, image).await?;
        let number = version.number.to_string();
        match t.version.as_str() {
            // The group launches the newest version: the new one is already in use.
            "$Latest" => {}
            // The group follows the default version: move the default, leave the group alone.
            "$Default" if created => {
                template::make_default(&self.ec2, &version.template_id, &number).await?;
            }
            "$Default" => {}
            // A pinned version: point the group (or its mixed instances policy) at the new one.
            pinned if pinned != number => {
                self.point_group_at(&g, &version.template_id, &number)
                    .await?;
            }
            _ => {}
        }
        Ok(number)
    }
}

impl AutoScaling {
    /// Points `g` at version `number` of template `template_id`, keeping a mixed instances
    /// policy's overrides and instances distribution as they are.
    async fn point_group_at(
        &self,
        g: &aws_sdk_autoscaling::types::AutoScalingGroup,
        template_id: &str,
        number: &str,
    ) -> Result<(), PortError> {
        let spec = LaunchTemplateSpecification::builder()
            .launch_template_id(template_id)
            .version(number)
            .build();
        let mut call = self
            .autoscaling
            .update_auto_scaling_group()
            .auto_scaling_group_name(g.auto_scaling_group_name().unwrap_or_default());
        call = match g.mixed_instances_policy() {
            Some(mip) if g.launch_template().is_none() => {
                let overrides = mip
                    .launch_template()
                    .map(|lt| lt.overrides().to_vec())
                    .filter(|o| !o.is_empty());
                call.mixed_instances_policy(
                    MixedInstancesPolicy::builder()
                        .launch_template(
                            LaunchTemplate::builder()
                                .launch_template_specification(spec)
                                .set_overrides(overrides)
                                .build(),
                        )
                        .set_instances_distribution(mip.instances_distribution().cloned())
                        .build(),
                )
            }
            _ => call.launch_template(spec),
        };
        let name = g.auto_scaling_group_name().unwrap_or_default();
        call.send().await.map_err(|e| {
            let e = port_error("autoscaling:UpdateAutoScalingGroup", e);
            if e.kind == ErrorKind::AccessDenied {
                updates_not_enabled(
                    &format!("pointing group {name} at version {number} of {template_id}"),
                    true,
                    PINNED_OTHERWISE,
                )
            } else {
                e
            }
        })?;
        Ok(())
    }
}
