//! Auto Scaling adapter for [`GroupOps`]: self-managed node groups.

use async_trait::async_trait;
use aws_sdk_autoscaling::types::{
    LaunchTemplate, LaunchTemplateSpecification, MixedInstancesPolicy,
};
use chrono::{DateTime, Utc};

use super::port_error;
use super::template::{self, TemplateSpec};
use crate::fleet::snapshot::{self, GroupRead, GroupSnapshots};
use crate::fleet::{Group, GroupOps, LaunchProblem, Lifecycle, Member, Sizes};
use crate::port::{ErrorKind, PortError};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Auto Scaling and EC2 through the SDK.
#[derive(Clone, Debug)]
pub struct AutoScaling {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: aws_sdk_ec2::Client,
    group_updates: bool,
    /// What the latest read of each group saw.
    seen: SeenGroups,
}

/// What the latest read of each group saw (its description, its template version and that
/// template's tags), so that the template write and the architecture check that follow it in
/// the same pass do not read them again, and what nodecycle wrote (the version it created) is
/// not read back. An entry serves for `SEEN_FOR` (two minutes) at most: every pass reads its
/// groups first, so nothing goes from an older pass's read. Shared by the adapters of one
/// deployment ([`AutoScaling::with_seen`], [`super::nodegroup::NodeGroups::with_seen`]).
#[derive(Debug, Clone, Default)]
pub struct SeenGroups(Arc<Mutex<HashMap<String, Seen>>>);

/// One group as a read saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    at: Instant,
    pub(crate) group: aws_sdk_autoscaling::types::AutoScalingGroup,
    pub(crate) template: Option<template::TemplateVersion>,
    /// The template's tags (the opt-in), when the read included them.
    pub(crate) template_tags: Option<BTreeMap<String, String>>,
}

/// How long a read serves what follows it: one invocation (the rotator's timeout).
const SEEN_FOR: Duration = Duration::from_secs(120);

impl SeenGroups {
    /// Remembers what a read of group `name` saw.
    pub(crate) fn saw(
        &self,
        name: &str,
        group: &aws_sdk_autoscaling::types::AutoScalingGroup,
        template: Option<&template::TemplateVersion>,
        template_tags: Option<BTreeMap<String, String>>,
    ) {
        if let Ok(mut seen) = self.0.lock() {
            seen.insert(
                name.to_string(),
                Seen {
                    at: Instant::now(),
                    group: group.clone(),
                    template: template.cloned(),
                    template_tags,
                },
            );
        }
    }

    /// What the latest read of group `name` saw, if it is recent ([`SEEN_FOR`]).
    pub(crate) fn get(&self, name: &str) -> Option<Seen> {
        let seen = self.0.lock().ok()?;
        seen.get(name)
            .filter(|s| s.at.elapsed() < SEEN_FOR)
            .cloned()
    }

    /// Forgets what was seen of group `name` (it changed in a way not recorded).
    pub(crate) fn forget(&self, name: &str) {
        if let Ok(mut seen) = self.0.lock() {
            seen.remove(name);
        }
    }
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

/// Auto Scaling group `name` (DescribeAutoScalingGroups), `None` when it does not exist. The
/// one describe of a single group: the rotator's, the watcher's and doctor's adapters read
/// through it.
pub(crate) async fn describe_group(
    client: &aws_sdk_autoscaling::Client,
    name: &str,
) -> Result<Option<aws_sdk_autoscaling::types::AutoScalingGroup>, PortError> {
    let out = client
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(name)
        .send()
        .await
        .map_err(|e| port_error("autoscaling:DescribeAutoScalingGroups", e))?;
    Ok(out
        .auto_scaling_groups()
        .iter()
        .find(|g| g.auto_scaling_group_name() == Some(name))
        .cloned())
}

/// The not-found error of group `name`.
pub(crate) fn no_group(name: &str) -> PortError {
    PortError::new(
        "autoscaling:DescribeAutoScalingGroups",
        ErrorKind::NotFound,
        format!("Auto Scaling group {name} does not exist"),
    )
}

/// The launch template a group launches from: its own, or its mixed instances policy's.
pub(crate) fn launch_template_of(
    group: &aws_sdk_autoscaling::types::AutoScalingGroup,
) -> Option<&LaunchTemplateSpecification> {
    group.launch_template().or_else(|| {
        group
            .mixed_instances_policy()
            .and_then(|m| m.launch_template())
            .and_then(|t| t.launch_template_specification())
    })
}

/// The launch template version a group launches ([`launch_template_of`]; no version is
/// `$Default`).
pub(crate) fn template_spec(
    group: &aws_sdk_autoscaling::types::AutoScalingGroup,
) -> Option<TemplateSpec> {
    let spec = launch_template_of(group)?;
    Some(TemplateSpec {
        id: spec.launch_template_id().map(str::to_string),
        name: spec.launch_template_name().map(str::to_string),
        version: spec.version().unwrap_or("$Default").to_string(),
    })
}

/// The instances of `g` Auto Scaling retained (`Terminating:Retained`, [`crate::retain`]).
pub(crate) fn retained_of(g: &aws_sdk_autoscaling::types::AutoScalingGroup) -> Vec<String> {
    g.instances()
        .iter()
        .filter(|i| i.lifecycle_state().map(|s| s.as_str()) == Some(crate::retain::RETAINED))
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect()
}

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
            seen: SeenGroups::default(),
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
        describe_group(&self.autoscaling, name)
            .await?
            .ok_or_else(|| no_group(name))
    }

    /// Shares `seen` with other adapters (the architecture check's [`super::nodegroup::NodeGroups`]).
    pub fn with_seen(mut self, seen: SeenGroups) -> Self {
        self.seen = seen;
        self
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

    async fn launch_problem(&self, group: &str) -> Result<Option<LaunchProblem>, PortError> {
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
                let message = match a.status_message() {
                    Some(m) => format!("{what}: {m}"),
                    None => format!(
                        "{what}: {}",
                        a.status_code().map_or("no status", |c| c.as_str())
                    ),
                };
                LaunchProblem {
                    message,
                    at: a
                        .start_time()
                        .and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
                }
            })
        }))
    }

    async fn describe(&self, name: &str) -> Result<(Group, Vec<Member>), PortError> {
        let g = self.group(name).await?;
        let version = match template_spec(&g) {
            Some(t) => Some(template::describe(&self.ec2, &t).await?),
            None => None,
        };
        self.seen.saw(name, &g, version.as_ref(), None);
        let launch_template_image = version.and_then(|v| v.image);
        let ids: Vec<String> = g
            .instances()
            .iter()
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect();
        let facts = self.instance_facts(&ids).await?;
        Ok(Self::read_of(name, &g, launch_template_image, &facts))
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
        // The group and its template as this pass read them, else read now.
        let (g, seen, tags) = match self.seen.get(group) {
            Some(s) => (s.group, s.template, s.template_tags),
            None => (self.group(group).await?, None, None),
        };
        let t = template_spec(&g).ok_or_else(|| {
            PortError::other(
                "autoscaling:DescribeAutoScalingGroups",
                format!("group {group} uses no launch template; nodecycle rotates only groups with launch templates"),
            )
        })?;
        let pinned = !matches!(t.version.as_str(), "$Latest" | "$Default");
        if pinned && !self.group_updates {
            // Refused before any write: a new version the group is never pointed at would be
            // created again on every pass.
            let current = match &seen {
                Some(v) => v.clone(),
                None => template::describe(&self.ec2, &t).await?,
            };
            if current.image.as_deref() != Some(image) {
                let what = format!(
                    "group {group} launches pinned version {} of launch template {}: pointing it \
                     at a new version",
                    t.version, current.template_id
                );
                return Err(updates_not_enabled(&what, false, PINNED_OTHERWISE));
            }
        }
        let (version, created) =
            template::with_image(&self.ec2, &t, seen, tags.as_ref(), image).await?;
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
                self.seen.forget(group);
                self.point_group_at(&g, &version.template_id, &number)
                    .await?;
                return Ok(number);
            }
            _ => {}
        }
        // What nodecycle wrote is what the group launches now: not read back.
        self.seen.saw(group, &g, Some(&version), tags);
        Ok(number)
    }
}

/// What EC2 says of an instance: its image and launch time.
type InstanceFacts = std::collections::HashMap<String, (Option<String>, DateTime<Utc>)>;

impl AutoScaling {
    /// Image and launch time of the instances DescribeInstances answers for `ids` or `filters`
    /// (`per_page` a page), in pages.
    async fn facts_of(
        &self,
        ids: Option<Vec<String>>,
        filters: Option<Vec<aws_sdk_ec2::types::Filter>>,
        per_page: Option<i32>,
    ) -> Result<InstanceFacts, PortError> {
        let reservations = self
            .ec2
            .describe_instances()
            .set_instance_ids(ids)
            .set_filters(filters)
            .set_max_results(per_page)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| port_error("ec2:DescribeInstances", e))?;
        let mut facts = InstanceFacts::new();
        for i in reservations.iter().flat_map(|r| r.instances()) {
            let Some(id) = i.instance_id() else { continue };
            let launched = i
                .launch_time()
                .and_then(|t| DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos()))
                .unwrap_or_default();
            facts.insert(id.to_string(), (i.image_id().map(str::to_string), launched));
        }
        Ok(facts)
    }
}

/// Instances per DescribeInstances page of a tag filter (the API's limit).
const INSTANCES_PER_PAGE: i32 = 1000;

impl AutoScaling {
    /// The group `name` as read, its template's image and its instances joined with `facts`.
    fn read_of(
        name: &str,
        g: &aws_sdk_autoscaling::types::AutoScalingGroup,
        launch_template_image: Option<String>,
        facts: &InstanceFacts,
    ) -> (Group, Vec<Member>) {
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
            do_not_repair: g.tags().iter().any(|t| {
                t.key() == Some(crate::repair::DO_NOT_REPAIR) && t.value() == Some("true")
            }),
            retained: retained_of(g),
        };
        let instances = g
            .instances()
            .iter()
            .filter_map(|i| {
                let id = i.instance_id()?.to_string();
                let (image_id, launch_time) = facts
                    .get(&id)
                    .cloned()
                    .unwrap_or((None, DateTime::<Utc>::default()));
                Some(Member {
                    availability_zone: i.availability_zone().unwrap_or_default().to_string(),
                    lifecycle: lifecycle(i.lifecycle_state().map(|s| s.as_str()).unwrap_or("")),
                    instance_id: id,
                    image_id,
                    launch_time,
                    node: None,
                })
            })
            .collect();
        (group, instances)
    }

    /// Image and launch time of the instances `ids`, 100 ids a call.
    async fn instance_facts(&self, ids: &[String]) -> Result<InstanceFacts, PortError> {
        let mut facts = InstanceFacts::new();
        for chunk in ids.chunks(100) {
            facts.extend(self.facts_of(Some(chunk.to_vec()), None, None).await?);
        }
        Ok(facts)
    }

    /// Image and launch time of every instance of the groups `names` (tag
    /// `aws:autoscaling:groupName`, which Auto Scaling puts on what it launches), in pages of
    /// [`INSTANCES_PER_PAGE`].
    async fn facts_of_groups(&self, names: &[String]) -> Result<InstanceFacts, PortError> {
        let filter = aws_sdk_ec2::types::Filter::builder()
            .name(format!("tag:{}", crate::tags::AUTO_SCALING_GROUP))
            .set_values(Some(names.to_vec()))
            .build();
        // Terminated instances keep their tags for a while; none of them is in a group.
        let live = aws_sdk_ec2::types::Filter::builder()
            .name("instance-state-name")
            .set_values(Some(
                ["pending", "running", "shutting-down", "stopping", "stopped"]
                    .map(String::from)
                    .to_vec(),
            ))
            .build();
        self.facts_of(None, Some(vec![filter, live]), Some(INSTANCES_PER_PAGE))
            .await
    }

    /// One batch of [`GroupSnapshots::describe_groups`]: at most
    /// [`crate::fleet::snapshot::GROUPS_PER_CALL`] names.
    async fn describe_batch(
        &self,
        names: &[String],
    ) -> Result<Vec<aws_sdk_autoscaling::types::AutoScalingGroup>, PortError> {
        self.autoscaling
            .describe_auto_scaling_groups()
            .set_auto_scaling_group_names(Some(names.to_vec()))
            .max_records(100)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| port_error("autoscaling:DescribeAutoScalingGroups", e))
    }
}

#[async_trait]
impl GroupSnapshots for AutoScaling {
    async fn describe_groups(&self, names: &[String]) -> BTreeMap<String, GroupRead> {
        let mut failed: BTreeMap<String, PortError> = BTreeMap::new();
        let mut read = Vec::new();
        for batch in snapshot::batches(names) {
            match self.describe_batch(&batch).await {
                Ok(groups) => read.push((batch, groups)),
                Err(e) => failed.extend(batch.into_iter().map(|n| (n, e.clone()))),
            }
        }
        // The templates of every group read, in one go.
        let specs: Vec<TemplateSpec> = read
            .iter()
            .flat_map(|(_, groups)| groups.iter().filter_map(template_spec))
            .collect();
        let versions = template::describe_many(&self.ec2, &specs).await;
        let mut found = BTreeMap::new();
        for (batch, groups) in read {
            // The instances of the batch's groups by tag; any the tag listing missed (a
            // launch whose tags are not there yet) by id.
            let mut facts = match self.facts_of_groups(&batch).await {
                Ok(f) => f,
                Err(e) => {
                    failed.extend(batch.into_iter().map(|n| (n, e.clone())));
                    continue;
                }
            };
            let untagged: Vec<String> = groups
                .iter()
                .flat_map(|g| g.instances().iter().filter_map(|i| i.instance_id()))
                .filter(|id| !facts.contains_key(*id))
                .map(str::to_string)
                .collect();
            if !untagged.is_empty() {
                match self.instance_facts(&untagged).await {
                    Ok(more) => facts.extend(more),
                    Err(e) => {
                        failed.extend(batch.into_iter().map(|n| (n, e.clone())));
                        continue;
                    }
                }
            }
            for g in &groups {
                let Some(name) = g.auto_scaling_group_name() else {
                    continue;
                };
                let image = match template_spec(g).map(|t| versions.get(&t).cloned()) {
                    None => {
                        self.seen.saw(name, g, None, None);
                        Ok(None)
                    }
                    Some(Some(Ok(v))) => {
                        self.seen.saw(name, g, Some(&v), None);
                        Ok(v.image)
                    }
                    Some(Some(Err(e))) => Err(e),
                    Some(None) => Err(PortError::other(
                        "ec2:DescribeLaunchTemplateVersions",
                        format!("the launch template of group {name} was not read"),
                    )),
                };
                match image {
                    Ok(image) => {
                        found.insert(name.to_string(), Self::read_of(name, g, image, &facts));
                    }
                    Err(e) => {
                        failed.insert(name.to_string(), e);
                    }
                }
            }
        }
        snapshot::assemble(names, found, &failed)
    }

    async fn prefetch_template_tags(&self, names: &[String]) {
        // The templates of the groups as the pass read them, 200 a call, when there are enough
        // for a batch to pay; unread tags are read by the write that needs them.
        let ids: Vec<String> = names
            .iter()
            .filter_map(|n| self.seen.get(n)?.template.map(|t| t.template_id))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if ids.len() < template::LIST_FROM {
            return;
        }
        let tags = template::tags_of(&self.ec2, &ids).await;
        for name in names {
            if let Some(s) = self.seen.get(name)
                && let Some(t) = s.template.as_ref()
                && let Some(found) = tags.get(&t.template_id)
            {
                self.seen.saw(name, &s.group, Some(t), Some(found.clone()));
            }
        }
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
