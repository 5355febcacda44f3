//! In-memory fakes of the ports (feature `test-support`, and unit tests): a deployment as plain
//! maps, shaped like [`crate::doctor::memory`], so the use cases run in milliseconds without
//! moto. Each fake behaves like the service it stands for (conditional writes as DynamoDB's,
//! DescribeImages filters as EC2's, lifecycle actions that stop being active once completed),
//! never like the code under test. The moto integration tests (`tests/`) stay the reference;
//! these are for unit tests of the handlers' use cases.
//!
//! - [`MemoryStore`]: the state table ([`crate::state::memory`], re-exported), with fault
//!   injection: a failing operation, a writer that wins the next race.
//! - [`Cloud`]: policies, SSM parameters, images, cluster versions, what node groups launch,
//!   EC2 instances, lifecycle actions, alarm states and the event bus, as one world.
//! - [`Groups`]: Auto Scaling groups (sizes and their bounds, instances, launch template
//!   versions, suspended processes) as Auto Scaling answers.
//! - [`ManagedGroups`]: EKS managed node groups (updates with their client tokens, one at a
//!   time) and the launch templates they name, as EKS and EC2 answer.
//! - [`Clusters`]: Kubernetes per cluster name over [`crate::kube::memory::MemoryCluster`].
//!
//! [`Cloud::watcher`], [`Cloud::interruption_handler`] and [`Cloud::rotator`] build those
//! functions' handlers over them (ops' use cases are tested through moto still).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::ami::instance_types::GroupTypes;
use crate::ami::resolve::{
    ClusterCatalog, GroupImage, ImageCatalog, ImageQuery, NodeGroupCatalog, ParameterStore,
};
use crate::ami::select::Image;
use crate::bus::{BusEvent, EventSink, Refused};
use crate::event::instance_events::LifecycleAction;
use crate::event::served::Served;
use crate::handlers::ami_watcher::AmiWatcher;
use crate::handlers::interruption::InterruptionHandler;
use crate::interruption::{InstanceInfo, InstanceLookup, LifecycleOps};
use crate::kube::memory::MemoryCluster;
use crate::kube::{KubeConnector, KubeError, NodeOps};
use crate::policy::NodeGroup;
use crate::policy::source::{PolicyDocument, PolicySource};
use crate::port::{ErrorKind, PortError};
use crate::promotion::{AlarmState, AlarmStates};
pub use crate::state::memory::MemoryStore;

#[cfg(test)]
mod tests;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An image and what DescribeImages filters on beside its id and name.
#[derive(Debug, Clone)]
pub struct StoredImage {
    /// The image.
    pub image: Image,
    /// Owner account (or `amazon`).
    pub owner: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// One lifecycle action as Auto Scaling holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LifecycleState {
    /// Still waiting for an answer (heartbeats and completion act on it).
    pub active: bool,
    /// Heartbeats recorded.
    pub heartbeats: u32,
    /// Completed with CONTINUE.
    pub completed: bool,
    /// Completed with ABANDON.
    pub abandoned: bool,
}

/// A deployment's AWS side as plain values. Change it between passes through [`Cloud::with`].
#[derive(Debug, Clone, Default)]
pub struct World {
    /// Policy documents by source.
    pub policies: BTreeMap<String, PolicyDocument>,
    /// SSM parameters.
    pub parameters: BTreeMap<String, String>,
    /// Their versions ([`World::put_parameter`] advances them; 1 when not set).
    pub parameter_versions: BTreeMap<String, i64>,
    /// AMIs.
    pub images: Vec<StoredImage>,
    /// Cluster -> Kubernetes `major.minor`.
    pub versions: BTreeMap<String, String>,
    /// Node group name (ASG or managed) -> the image it launches.
    pub group_images: BTreeMap<String, String>,
    /// Node group name -> its instance types.
    pub instance_types: BTreeMap<String, GroupTypes>,
    /// EC2 instances.
    pub instances: BTreeMap<String, InstanceInfo>,
    /// Spot request status codes by the instance they launched (`DescribeSpotInstanceRequests`
    /// by `instance-id`: `fulfilled`, `marked-for-termination`, ...); On-Demand instances have
    /// none.
    pub spot_requests: BTreeMap<String, String>,
    /// What `DescribeInstanceStatus` reports in trouble.
    pub troubled: Vec<crate::fleet::InstanceStatus>,
    /// Lifecycle actions by instance.
    pub lifecycle: BTreeMap<String, LifecycleState>,
    /// CloudWatch alarms.
    pub alarms: Vec<AlarmState>,
    /// Events put on the bus.
    pub events: Vec<BusEvent>,
    /// AWS calls by operation (`ec2:DescribeImages`, ...).
    pub calls: BTreeMap<String, u32>,
    /// Operations answering AccessDenied.
    pub denied: Vec<String>,
}

impl World {
    /// Puts parameter `name` as SSM's `PutParameter` with overwrite does: the value, and the
    /// next version (1 for a new parameter).
    pub fn put_parameter(&mut self, name: &str, value: &str) {
        self.parameters.insert(name.to_string(), value.to_string());
        *self.parameter_versions.entry(name.to_string()).or_insert(0) += 1;
    }
}

/// The AWS side of a deployment, shared by the ports built over it.
#[derive(Debug, Default)]
pub struct Cloud {
    world: Mutex<World>,
}

impl Cloud {
    /// Over `world`.
    pub fn new(world: World) -> Arc<Self> {
        Arc::new(Cloud {
            world: Mutex::new(world),
        })
    }

    /// Changes the world (between passes) and returns what `change` returns.
    pub fn with<T>(&self, change: impl FnOnce(&mut World) -> T) -> T {
        change(&mut lock(&self.world))
    }

    /// A copy of the world now.
    pub fn world(&self) -> World {
        lock(&self.world).clone()
    }

    fn call(&self, op: &str) -> Result<MutexGuard<'_, World>, PortError> {
        let mut w = lock(&self.world);
        *w.calls.entry(op.to_string()).or_default() += 1;
        if w.denied.iter().any(|d| d == op) {
            return Err(PortError::new(
                op,
                ErrorKind::AccessDenied,
                "AccessDenied: not authorized",
            ));
        }
        Ok(w)
    }

    /// What every handler over this cloud holds: its policies, `store` as the state table,
    /// this cloud's bus, no members.
    pub fn cell(self: &Arc<Self>, store: Arc<MemoryStore>) -> crate::handlers::CellPorts {
        crate::handlers::CellPorts {
            policies: self.clone(),
            state: crate::state::Repository::new(store.clone()),
            announce: crate::announce::Announcer::new(store, self.clone()),
            members: Arc::new(crate::members::OwnOnly),
            status: self.clone(),
        }
    }

    /// The ami-watcher over this cloud and `store`.
    pub fn watcher(self: &Arc<Self>, store: Arc<MemoryStore>) -> AmiWatcher {
        AmiWatcher {
            cell: self.cell(store),
            ports: crate::handlers::ami_watcher::WatcherPorts {
                parameters: self.clone(),
                images: self.clone(),
                clusters: self.clone(),
                node_groups: self.clone(),
                alarms: self.clone(),
            },
            metrics: Arc::new(crate::metrics::NoMetrics),
            deprecation_horizon_days: crate::deprecation::DEFAULT_HORIZON_DAYS,
        }
    }

    /// The interruption handler over this cloud, `store` and `kube`, with `settings`; the
    /// deployment serves account 123456789012 in us-east-2.
    pub fn interruption_handler(
        self: &Arc<Self>,
        store: Arc<MemoryStore>,
        kube: Arc<Clusters>,
        settings: crate::handlers::interruption::Settings,
    ) -> InterruptionHandler {
        InterruptionHandler {
            cell: self.cell(store),
            ports: crate::handlers::interruption::InterruptionPorts {
                instances: self.clone(),
                lifecycle: self.clone(),
                kube,
            },
            deployment: Arc::new(Served {
                accounts: vec!["123456789012".into()],
                regions: vec!["us-east-2".into()],
            }),
            settings,
            metrics: Arc::new(crate::metrics::NoMetrics),
        }
    }
}

impl Cloud {
    /// The rotator over this cloud, `store`, `groups`, `managed` and `kube`, with `settings`,
    /// as [`crate::wiring`] builds it: this cloud's policies, parameters and instance types,
    /// no members, no metrics.
    pub fn rotator(
        self: &Arc<Self>,
        store: Arc<MemoryStore>,
        groups: Arc<Groups>,
        managed: Arc<ManagedGroups>,
        kube: Arc<Clusters>,
        settings: crate::handlers::rotator::Settings,
    ) -> crate::handlers::rotator::RotatorHandler {
        crate::handlers::rotator::RotatorHandler {
            cell: self.cell(store),
            ports: crate::handlers::rotator::RotatorPorts {
                groups,
                managed,
                parameters: self.clone(),
                node_groups: self.clone(),
                kube,
                instances: self.clone(),
            },
            settings,
            metrics: Arc::new(crate::metrics::NoMetrics),
        }
    }
}

#[async_trait]
impl PolicySource for Cloud {
    async fn all(&self) -> Result<Vec<PolicyDocument>, PortError> {
        Ok(self
            .call("ssm:GetParametersByPath")?
            .policies
            .values()
            .cloned()
            .collect())
    }

    async fn one(&self, source: &str) -> Result<Option<PolicyDocument>, PortError> {
        Ok(self.call("ssm:GetParameter")?.policies.get(source).cloned())
    }

    fn contains(&self, name: &str) -> bool {
        lock(&self.world).policies.contains_key(name)
    }
}

#[async_trait]
impl ParameterStore for Cloud {
    async fn get_parameters(
        &self,
        names: &[String],
    ) -> Result<std::collections::HashMap<String, crate::ami::resolve::Parameter>, PortError> {
        let w = self.call("ssm:GetParameters")?;
        Ok(names
            .iter()
            .filter_map(|n| {
                let value = w.parameters.get(n)?.clone();
                let version = w.parameter_versions.get(n).copied().unwrap_or(1);
                Some((n.clone(), crate::ami::resolve::Parameter { value, version }))
            })
            .collect())
    }
}

#[async_trait]
impl crate::rollout::StatusBoard for Cloud {
    async fn publish(&self, status: &crate::rollout::Rollout) -> Result<(), PortError> {
        let mut w = self.call("ssm:PutParameter")?;
        let doc = serde_json::to_string(status).unwrap_or_default();
        // As SSM refuses a Standard parameter's value over 4 KB.
        if doc.len() > 4096 {
            return Err(PortError::new(
                "ssm:PutParameter",
                ErrorKind::Invalid,
                "ValidationException: Standard tier parameters support a maximum parameter value of 4096 characters",
            ));
        }
        w.put_parameter(&crate::rollout::parameter_name(&status.pool), &doc);
        Ok(())
    }

    async fn read(&self, pool: &str) -> Result<Option<crate::rollout::Rollout>, PortError> {
        let w = self.call("ssm:GetParameter")?;
        Ok(w.parameters
            .get(&crate::rollout::parameter_name(pool))
            .and_then(|v| serde_json::from_str(v).ok()))
    }

    async fn read_cluster(&self, cluster: &str) -> Result<Vec<crate::rollout::Rollout>, PortError> {
        let w = self.call("ssm:GetParametersByPath")?;
        let prefix = format!("{}/", crate::rollout::cluster_path(cluster));
        Ok(w.parameters
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(_, v)| serde_json::from_str(v).ok())
            .collect())
    }
}

/// EC2's name filter: `*` any run, `?` any one character.
fn wildcard(pattern: &str, text: &str) -> bool {
    wildmatch::WildMatch::new(pattern).matches(text)
}

#[async_trait]
impl ImageCatalog for Cloud {
    async fn describe_images(&self, query: &ImageQuery) -> Result<Vec<Image>, PortError> {
        let w = self.call("ec2:DescribeImages")?;
        Ok(w.images
            .iter()
            .filter(|i| query.image_ids.is_empty() || query.image_ids.contains(&i.image.id))
            .filter(|i| query.owners.is_empty() || query.owners.contains(&i.owner))
            .filter(|i| {
                query
                    .name
                    .as_ref()
                    .is_none_or(|n| wildcard(n, &i.image.name))
            })
            .filter(|i| {
                query.tags.iter().all(|(k, v)| {
                    i.tags
                        .get(k)
                        .is_some_and(|have| v == "*" || wildcard(v, have))
                })
            })
            .map(|i| i.image.clone())
            .collect())
    }
}

#[async_trait]
impl ClusterCatalog for Cloud {
    async fn kubernetes_version(&self, cluster: &str) -> Result<String, PortError> {
        self.call("eks:DescribeCluster")?
            .versions
            .get(cluster)
            .cloned()
            .ok_or_else(|| {
                PortError::new(
                    "eks:DescribeCluster",
                    ErrorKind::NotFound,
                    format!("ResourceNotFoundException: No cluster found for name: {cluster}."),
                )
            })
    }
}

fn group_name(group: &NodeGroup) -> &str {
    match group {
        NodeGroup::AutoScalingGroup(g) | NodeGroup::ManagedNodeGroup(g) => g,
    }
}

#[async_trait]
impl NodeGroupCatalog for Cloud {
    async fn current_image(
        &self,
        _cluster: &str,
        group: &NodeGroup,
    ) -> Result<GroupImage, PortError> {
        Ok(
            match self
                .call("autoscaling:DescribeAutoScalingGroups")?
                .group_images
                .get(group_name(group))
            {
                Some(id) => GroupImage::Image(id.clone()),
                None => GroupImage::Unknown,
            },
        )
    }

    async fn instance_types(
        &self,
        _cluster: &str,
        group: &NodeGroup,
    ) -> Result<GroupTypes, PortError> {
        Ok(self
            .call("ec2:DescribeInstanceTypes")?
            .instance_types
            .get(group_name(group))
            .cloned()
            .unwrap_or_default())
    }
}

#[async_trait]
impl InstanceLookup for Cloud {
    async fn instance(&self, instance_id: &str) -> Result<Option<InstanceInfo>, PortError> {
        Ok(self
            .call("ec2:DescribeInstances")?
            .instances
            .get(instance_id)
            .cloned())
    }

    async fn troubled(&self) -> Result<Vec<crate::fleet::InstanceStatus>, PortError> {
        Ok(self.call("ec2:DescribeInstanceStatus")?.troubled.clone())
    }

    async fn spot_request_status(&self, instance_id: &str) -> Result<Option<String>, PortError> {
        Ok(self
            .call("ec2:DescribeSpotInstanceRequests")?
            .spot_requests
            .get(instance_id)
            .cloned())
    }
}

impl Cloud {
    fn lifecycle_call(
        &self,
        op: &str,
        instance_id: &str,
        f: impl FnOnce(&mut LifecycleState),
    ) -> Result<bool, PortError> {
        let mut w = self.call(op)?;
        match w.lifecycle.get_mut(instance_id) {
            Some(a) if a.active => {
                f(a);
                Ok(true)
            }
            // Auto Scaling: "No active Lifecycle Action found" (the adapter answers false).
            _ => Ok(false),
        }
    }
}

#[async_trait]
impl LifecycleOps for Cloud {
    async fn heartbeat(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        let instance_id = a.instance_id.as_str();
        self.lifecycle_call(
            "autoscaling:RecordLifecycleActionHeartbeat",
            instance_id,
            |a| a.heartbeats += 1,
        )
    }

    async fn complete_continue(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        let instance_id = a.instance_id.as_str();
        self.lifecycle_call("autoscaling:CompleteLifecycleAction", instance_id, |a| {
            a.active = false;
            a.completed = true;
        })
    }

    async fn complete_abandon(&self, a: &LifecycleAction) -> Result<bool, PortError> {
        let instance_id = a.instance_id.as_str();
        self.lifecycle_call("autoscaling:CompleteLifecycleAction", instance_id, |a| {
            a.active = false;
            a.abandoned = true;
        })
    }
}

#[async_trait]
impl AlarmStates for Cloud {
    async fn states(&self, names: &[String]) -> Result<Vec<AlarmState>, PortError> {
        Ok(self
            .call("cloudwatch:DescribeAlarms")?
            .alarms
            .iter()
            .filter(|a| names.contains(&a.name))
            .cloned()
            .collect())
    }
}

#[async_trait]
impl EventSink for Cloud {
    async fn put(&self, events: &[BusEvent]) -> Result<Vec<Refused>, PortError> {
        let mut w = self.call("events:PutEvents")?;
        w.events.extend(events.iter().cloned());
        Ok(Vec::new())
    }
}

/// One Auto Scaling group as the service holds it.
#[derive(Debug, Clone)]
pub struct StoredGroup {
    /// Name, sizes, the image its launch template launches, suspended processes.
    pub group: crate::fleet::Group,
    /// Its instances.
    pub instances: Vec<crate::fleet::Member>,
    /// Latest launch template version (the group launches `$Latest`).
    pub template_version: u32,
    /// Status message of the latest scaling activity, when it failed.
    pub failed_activity: Option<String>,
}

/// Auto Scaling groups in memory. Sizes are checked as Auto Scaling checks them (a desired
/// capacity outside MinSize..=MaxSize, a MaxSize below the desired capacity, a decrement below
/// MinSize are ValidationErrors); a terminated instance leaves the group at once.
#[derive(Debug, Default)]
pub struct Groups {
    groups: Mutex<BTreeMap<String, StoredGroup>>,
}

fn validation(op: &str, message: String) -> PortError {
    PortError::new(
        op,
        ErrorKind::Invalid,
        format!("ValidationError: {message}"),
    )
}

impl Groups {
    /// Adds (or replaces) a group.
    pub fn insert(&self, group: StoredGroup) {
        lock(&self.groups).insert(group.group.name.clone(), group);
    }

    /// The group now.
    pub fn get(&self, name: &str) -> Option<StoredGroup> {
        lock(&self.groups).get(name).cloned()
    }

    fn with<T>(
        &self,
        op: &str,
        name: &str,
        f: impl FnOnce(&mut StoredGroup) -> Result<T, PortError>,
    ) -> Result<T, PortError> {
        match lock(&self.groups).get_mut(name) {
            Some(g) => f(g),
            None => Err(validation(
                op,
                format!("AutoScalingGroup name not found - {name}"),
            )),
        }
    }
}

#[async_trait]
impl crate::fleet::snapshot::GroupSnapshots for Groups {
    /// Each group as [`crate::fleet::GroupOps::describe`] answers it (one entry a name; a
    /// group that does not exist is its `NotFound` entry, as a batch answer holds it).
    async fn describe_groups(
        &self,
        names: &[String],
    ) -> BTreeMap<String, crate::fleet::snapshot::GroupRead> {
        let mut out = BTreeMap::new();
        for name in names {
            if !out.contains_key(name) {
                let read = crate::fleet::GroupOps::describe(self, name).await;
                out.insert(name.clone(), read);
            }
        }
        out
    }
}

#[async_trait]
impl crate::fleet::GroupOps for Groups {
    async fn describe(
        &self,
        group: &str,
    ) -> Result<(crate::fleet::Group, Vec<crate::fleet::Member>), PortError> {
        // As Auto Scaling answers: the instances, never their Kubernetes nodes.
        self.with("autoscaling:DescribeAutoScalingGroups", group, |g| {
            let instances = g.instances.iter().map(|m| crate::fleet::Member {
                node: None,
                ..m.clone()
            });
            Ok((g.group.clone(), instances.collect()))
        })
    }

    async fn set_max_size(&self, group: &str, max: i32) -> Result<(), PortError> {
        let op = "autoscaling:UpdateAutoScalingGroup";
        self.with(op, group, |g| {
            if max < g.group.min_size || max < g.group.desired_capacity {
                return Err(validation(
                    op,
                    format!("Desired capacity:{} must be between the specified min size:{} and max size:{max}", g.group.desired_capacity, g.group.min_size),
                ));
            }
            g.group.max_size = max;
            Ok(())
        })
    }

    async fn suspend_processes(&self, group: &str, processes: &[String]) -> Result<(), PortError> {
        self.with("autoscaling:SuspendProcesses", group, |g| {
            for p in processes {
                if !g.group.suspended_processes.contains(p) {
                    g.group.suspended_processes.push(p.clone());
                }
            }
            Ok(())
        })
    }

    async fn resume_processes(&self, group: &str, processes: &[String]) -> Result<(), PortError> {
        self.with("autoscaling:ResumeProcesses", group, |g| {
            g.group
                .suspended_processes
                .retain(|p| !processes.contains(p));
            Ok(())
        })
    }

    async fn launch_problem(
        &self,
        group: &str,
    ) -> Result<Option<crate::fleet::LaunchProblem>, PortError> {
        self.with("autoscaling:DescribeScalingActivities", group, |g| {
            Ok(g.failed_activity
                .clone()
                .map(|message| crate::fleet::LaunchProblem { message, at: None }))
        })
    }

    async fn set_desired_capacity(&self, group: &str, desired: i32) -> Result<(), PortError> {
        let op = "autoscaling:SetDesiredCapacity";
        self.with(op, group, |g| {
            if desired > g.group.max_size {
                return Err(validation(op, format!("New SetDesiredCapacity value {desired} is above max value {} for the AutoScalingGroup.", g.group.max_size)));
            }
            if desired < g.group.min_size {
                return Err(validation(op, format!("New SetDesiredCapacity value {desired} is below min value {} for the AutoScalingGroup.", g.group.min_size)));
            }
            g.group.desired_capacity = desired;
            Ok(())
        })
    }

    async fn terminate_instance(
        &self,
        instance_id: &str,
        decrement: bool,
    ) -> Result<(), PortError> {
        let op = "autoscaling:TerminateInstanceInAutoScalingGroup";
        let mut groups = lock(&self.groups);
        // Already gone (terminated, or no longer in any group): success, as the adapter says.
        let Some(g) = groups
            .values_mut()
            .find(|g| g.instances.iter().any(|i| i.instance_id == instance_id))
        else {
            return Ok(());
        };
        if decrement {
            if g.group.desired_capacity - 1 < g.group.min_size {
                return Err(validation(
                    op,
                    format!(
                        "Currently, desiredSize equals minSize ({}). Terminating instance without replacement will violate group's min size constraint. Either set shouldDecrementDesiredCapacity flag to false or lower group's min size.",
                        g.group.min_size
                    ),
                ));
            }
            g.group.desired_capacity -= 1;
        }
        g.instances.retain(|i| i.instance_id != instance_id);
        Ok(())
    }

    async fn set_image(&self, group: &str, image: &str) -> Result<String, PortError> {
        self.with("ec2:CreateLaunchTemplateVersion", group, |g| {
            if g.group.launch_template_image.as_deref() != Some(image) {
                g.template_version += 1;
                g.group.launch_template_image = Some(image.to_string());
            }
            Ok(g.template_version.to_string())
        })
    }
}

/// One managed node group and its updates as EKS holds them.
#[derive(Debug, Clone)]
pub struct StoredNodeGroup {
    /// What DescribeNodegroup answers.
    pub group: crate::managed::ManagedGroup,
    /// Its updates: (client request token, target, status), oldest first.
    pub updates: Vec<(
        String,
        crate::managed::UpdateTarget,
        crate::managed::UpdateStatus,
    )>,
}

/// EKS managed node groups and EC2 launch templates in memory: an update while another is in
/// progress, or a config change during one, is ResourceInUseException (a conflict); repeating
/// an update with its client request token returns that update; a launch template version is
/// immutable (a new image is a new version).
#[derive(Debug, Default)]
pub struct ManagedGroups {
    groups: Mutex<BTreeMap<(String, String), StoredNodeGroup>>,
    /// Template id -> the image of each version (version n at index n - 1).
    templates: Mutex<BTreeMap<String, Vec<Option<String>>>>,
}

impl ManagedGroups {
    /// Adds (or replaces) node group `group` of `cluster`.
    pub fn insert(&self, cluster: &str, group: crate::managed::ManagedGroup) {
        lock(&self.groups).insert(
            (cluster.to_string(), group.name.clone()),
            StoredNodeGroup {
                group,
                updates: Vec::new(),
            },
        );
    }

    /// Adds launch template `id` whose versions launch `images`.
    pub fn insert_template(&self, id: &str, images: Vec<Option<String>>) {
        lock(&self.templates).insert(id.to_string(), images);
    }

    /// The node group now.
    pub fn get(&self, cluster: &str, name: &str) -> Option<StoredNodeGroup> {
        lock(&self.groups)
            .get(&(cluster.to_string(), name.to_string()))
            .cloned()
    }

    /// Ends the group's update in progress with `state` (EKS finishing it), moving the group to
    /// its target on success.
    pub fn finish(&self, cluster: &str, name: &str, state: crate::managed::UpdateState) {
        use crate::managed::{UpdateState, UpdateTarget};
        let mut groups = lock(&self.groups);
        let Some(g) = groups.get_mut(&(cluster.to_string(), name.to_string())) else {
            return;
        };
        let Some((_, target, status)) = g
            .updates
            .iter_mut()
            .find(|(_, _, s)| s.state == UpdateState::InProgress)
        else {
            return;
        };
        status.state = state;
        g.group.status = "ACTIVE".into();
        if state == UpdateState::Successful {
            match target {
                UpdateTarget::ReleaseVersion { version } => {
                    g.group.release_version = Some(version.clone());
                }
                UpdateTarget::LaunchTemplate { version, .. } => {
                    if let Some(t) = g.group.launch_template.as_mut() {
                        t.version = Some(version.clone());
                    }
                }
            }
        }
    }

    fn with<T>(
        &self,
        op: &str,
        cluster: &str,
        name: &str,
        f: impl FnOnce(&mut StoredNodeGroup) -> Result<T, PortError>,
    ) -> Result<T, PortError> {
        match lock(&self.groups).get_mut(&(cluster.to_string(), name.to_string())) {
            Some(g) => f(g),
            None => Err(PortError::new(
                op,
                ErrorKind::NotFound,
                format!("ResourceNotFoundException: No node group found for name: {name}."),
            )),
        }
    }
}

fn in_use(op: &str, name: &str) -> PortError {
    PortError::new(
        op,
        ErrorKind::Conflict,
        format!("ResourceInUseException: Nodegroup {name} is currently being updated"),
    )
}

fn updating(g: &StoredNodeGroup) -> bool {
    g.updates
        .iter()
        .any(|(_, _, s)| s.state == crate::managed::UpdateState::InProgress)
}

#[async_trait]
impl crate::managed::ManagedGroupOps for ManagedGroups {
    async fn describe(
        &self,
        cluster: &str,
        name: &str,
    ) -> Result<crate::managed::ManagedGroup, PortError> {
        self.with("eks:DescribeNodegroup", cluster, name, |g| {
            Ok(g.group.clone())
        })
    }

    async fn set_update_config(
        &self,
        cluster: &str,
        name: &str,
        config: crate::managed::UpdateConfig,
    ) -> Result<(), PortError> {
        let op = "eks:UpdateNodegroupConfig";
        self.with(op, cluster, name, |g| {
            if g.group.update_config == config {
                return Ok(());
            }
            if updating(g) {
                return Err(in_use(op, name));
            }
            g.group.update_config = config;
            Ok(())
        })
    }

    async fn start_update(
        &self,
        cluster: &str,
        name: &str,
        target: &crate::managed::UpdateTarget,
        token: &str,
    ) -> Result<String, PortError> {
        let op = "eks:UpdateNodegroupVersion";
        self.with(op, cluster, name, |g| {
            if let Some((_, _, s)) = g.updates.iter().find(|(t, _, _)| t == token) {
                return Ok(s.id.clone());
            }
            if updating(g) {
                return Err(in_use(op, name));
            }
            let id = format!("update-{}-{}", name, g.updates.len() + 1);
            g.updates.push((
                token.to_string(),
                target.clone(),
                crate::managed::UpdateStatus {
                    id: id.clone(),
                    state: crate::managed::UpdateState::InProgress,
                    errors: Vec::new(),
                },
            ));
            g.group.status = "UPDATING".into();
            Ok(id)
        })
    }

    async fn describe_update(
        &self,
        cluster: &str,
        name: &str,
        update_id: &str,
    ) -> Result<crate::managed::UpdateStatus, PortError> {
        let op = "eks:DescribeUpdate";
        self.with(op, cluster, name, |g| {
            g.updates
                .iter()
                .find(|(_, _, s)| s.id == update_id)
                .map(|(_, _, s)| s.clone())
                .ok_or_else(|| {
                    PortError::new(
                        op,
                        ErrorKind::NotFound,
                        format!("ResourceNotFoundException: No update found for ID: {update_id}"),
                    )
                })
        })
    }

    async fn template_with_image(
        &self,
        template: &crate::managed::TemplateRef,
        image: &str,
    ) -> Result<(String, String), PortError> {
        let op = "ec2:CreateLaunchTemplateVersion";
        let id = template.id.clone().unwrap_or_default();
        let mut templates = lock(&self.templates);
        let Some(versions) = templates.get_mut(&id) else {
            return Err(PortError::new(
                op,
                ErrorKind::NotFound,
                format!("InvalidLaunchTemplateId.NotFound: {id}"),
            ));
        };
        let current = template
            .version
            .as_deref()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(versions.len());
        if current >= 1 && versions.get(current - 1).and_then(Option::as_deref) == Some(image) {
            return Ok((id, current.to_string()));
        }
        versions.push(Some(image.to_string()));
        Ok((id, versions.len().to_string()))
    }

    async fn template_image(
        &self,
        template: &crate::managed::TemplateRef,
    ) -> Result<Option<String>, PortError> {
        let id = template.id.clone().unwrap_or_default();
        let templates = lock(&self.templates);
        let versions = templates.get(&id).ok_or_else(|| {
            PortError::new(
                "ec2:DescribeLaunchTemplateVersions",
                ErrorKind::NotFound,
                format!("InvalidLaunchTemplateId.NotFound: {id}"),
            )
        })?;
        let n = template
            .version
            .as_deref()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(versions.len());
        Ok(n.checked_sub(1)
            .and_then(|i| versions.get(i))
            .cloned()
            .flatten())
    }
}

/// Kubernetes per cluster name, in memory.
#[derive(Default)]
pub struct Clusters {
    clusters: Mutex<BTreeMap<String, Arc<MemoryCluster>>>,
}

impl Clusters {
    /// Cluster `name` (created empty at `now` on first use).
    pub fn cluster(&self, name: &str, now: DateTime<Utc>) -> Arc<MemoryCluster> {
        lock(&self.clusters)
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(MemoryCluster::new(now)))
            .clone()
    }
}

#[async_trait]
impl KubeConnector for Clusters {
    async fn connect(&self, cluster: &str) -> Result<Arc<dyn NodeOps>, KubeError> {
        match lock(&self.clusters).get(cluster) {
            Some(c) => Ok(c.clone() as Arc<dyn NodeOps>),
            None => Err(KubeError::ClusterNotFound(cluster.to_string())),
        }
    }
}

/// A lifecycle action of `instance_id` in `group`, active.
pub fn lifecycle_action(group: &str, instance_id: &str) -> LifecycleAction {
    LifecycleAction {
        group: group.into(),
        hook: "nodecycle-drain".into(),
        token: Some("token-1".into()),
        instance_id: instance_id.into(),
    }
}
