//! Observe: one pool's snapshot, from what the pass read once for the pool's cluster
//! ([`ClusterView`]: the Kubernetes nodes by providerID, and every Auto Scaling group of the
//! cluster's pools with its instances and template image through the batched
//! [`crate::fleet::snapshot::GroupSnapshots`] port) and the pool's own records (its state record and
//! rotation records with their versions: read for all the cluster's pools in batches,
//! [`crate::state::Repository::pool_partitions`]).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::Planner;
use crate::fleet::snapshot::GroupRead;
use crate::fleet::{Gates, Member, NodeStatus};
use crate::kube::{self as k, NodeOps};
use crate::managed::ManagedGroup;
use crate::plan::{self, Snapshot};
use crate::policy::{NodeGroup, Policy};
use crate::port::{ErrorKind, PortError};
use crate::promotion::health::PodTally;
use crate::state::PoolRecord;

/// Above this many candidates in one pool, their pods are counted from one list of the
/// cluster's pods (shared by the cluster's pools this pass) instead of one list per node.
const PER_NODE_POD_LISTS: usize = 8;

/// What a pass reads once per cluster and shares between the cluster's pools: the nodes (one
/// paginated list), and the evictable pods per node (one paginated list of the cluster's pods,
/// read the first time a pool has many candidates).
pub(super) struct ClusterView {
    by_instance: HashMap<String, k::NodeInfo>,
    /// A pool of the cluster has a release under watch
    /// ([`crate::promotion::health::under_watch`]): the cluster's pods are listed this pass.
    watched: bool,
    /// The image of every instance in service in the cluster's pools' groups, as the batched
    /// read found them (release health compares a pool's release with the cluster's other
    /// nodes; an instance leaving, e.g. a Spot interruption, is no evidence).
    images: HashMap<String, String>,
    /// The cluster's groups as one batched read found them, each handed to the first round
    /// of its pool (a second round, after this pass's own writes, reads its group again).
    groups: std::sync::Mutex<HashMap<String, GroupRead>>,
    /// The managed node groups of the cluster's pools as `DescribeNodegroup` reported them
    /// (once a pass each), with the Auto Scaling group behind each; handed out like `groups`.
    managed: std::sync::Mutex<HashMap<String, ManagedRead>>,
    /// The state and rotation records of the cluster's pools, read in batches; handed out
    /// like `groups`.
    records: std::sync::Mutex<HashMap<String, Result<crate::state::PoolRead, PortError>>>,
    /// The managed node group update records of the cluster's managed pools, read in
    /// batches; handed out like `groups`.
    updates: std::sync::Mutex<HashMap<String, UpdateRead>>,
    /// The cluster's bound pods summed up per node, listed once a pass at most (when a
    /// pool has many candidates to order, or a release under watch).
    pods: tokio::sync::OnceCell<Result<HashMap<String, NodePods>, String>>,
    /// Pod start failures per node for release health (the pods, and the sandbox failures'
    /// Events), read once a pass at most; `None` when they could not be read.
    health: tokio::sync::OnceCell<Option<HashMap<String, PodTally>>>,
    /// Events the cluster's pools staged, put at the end of the cluster's pass
    /// ([`crate::announce::Announcer::flush`]).
    pub(super) events: crate::announce::Deferred,
    /// The running instances of the region EC2 reports in trouble (a failed status check, a
    /// scheduled event), by id: read once a pass when a pool of the cluster has repair on.
    troubled: HashMap<String, crate::fleet::InstanceStatus>,
    /// The deployment's stop switch as read with the nodes
    /// ([`crate::state::Repository::stop_gate`]: unreadable
    /// is stopped).
    stopped: Option<String>,
    /// The rollout statuses the cluster's pools found changed this pass, by pool, written once
    /// the pools are done ([`super::RotatorHandler::write_statuses`]).
    pub(super) due_statuses: std::sync::Mutex<BTreeMap<String, crate::rollout::Due>>,
}

impl ClusterView {
    /// Lists the cluster's nodes and reads the stop switch (one GetItem per cluster and pass);
    /// the groups come later ([`Planner::cluster_view`]).
    pub(super) async fn read(
        kube: &dyn NodeOps,
        state: &crate::state::Repository,
    ) -> Result<ClusterView, PortError> {
        let nodes = kube.list_nodes().await?;
        let stopped = state.stop_gate().await;
        Ok(ClusterView {
            watched: false,
            images: HashMap::new(),
            groups: std::sync::Mutex::default(),
            managed: std::sync::Mutex::default(),
            records: std::sync::Mutex::default(),
            updates: std::sync::Mutex::default(),
            events: crate::announce::Deferred::default(),
            troubled: HashMap::new(),
            stopped,
            due_statuses: std::sync::Mutex::default(),
            by_instance: nodes
                .into_iter()
                .filter_map(|n| {
                    k::client::instance_of_provider_id(&n.provider_id)
                        .map(|i| (i.to_string(), n.clone()))
                })
                .collect(),
            pods: tokio::sync::OnceCell::new(),
            health: tokio::sync::OnceCell::new(),
        })
    }

    /// The pool's back-off as the batched read of its record found it (not taken: the pool's
    /// round still reads the record).
    pub(super) fn backoff_of(&self, pool: &str) -> Option<crate::backoff::Backoff> {
        self.records.lock().ok().and_then(|r| {
            r.get(pool)?
                .as_ref()
                .ok()?
                .record
                .as_ref()?
                .value
                .backoff
                .clone()
        })
    }

    /// The entry `key` of `entries`, removed (each is used once: later rounds read afresh).
    fn take<T>(&self, entries: &std::sync::Mutex<HashMap<String, T>>, key: &str) -> Option<T> {
        entries.lock().ok().and_then(|mut e| e.remove(key))
    }

    /// The cluster's nodes of the pools' instances, each with its instance's image.
    pub(super) fn nodes_with_images(&self) -> impl Iterator<Item = (&str, &str, &k::NodeInfo)> {
        self.by_instance.iter().filter_map(|(id, node)| {
            let image = self.images.get(id)?;
            Some((id.as_str(), image.as_str(), node))
        })
    }

    /// The cluster's bound pods per node, from one paginated list (the first caller's `now`
    /// classifies them).
    async fn cluster_pods(
        &self,
        kube: &dyn NodeOps,
        now: DateTime<Utc>,
    ) -> &Result<HashMap<String, NodePods>, String> {
        self.pods
            .get_or_init(|| async {
                let pods = kube.list_all_pods().await.map_err(|e| e.to_string())?;
                let mut by_node: HashMap<String, NodePods> = HashMap::new();
                for (node, pod) in pods {
                    by_node.entry(node).or_default().add(&pod, now);
                }
                Ok(by_node)
            })
            .await
    }

    /// Pod starts and start failures per node, for release health: the cluster's pods
    /// ([`Self::cluster_pods`]) and the pods whose sandbox could not be created (one more
    /// list, of Events). `None` when either cannot be read (logged): health then judges by the
    /// nodes alone this pass.
    pub(super) async fn pod_health(
        &self,
        kube: &dyn NodeOps,
        now: DateTime<Utc>,
    ) -> Option<&HashMap<String, PodTally>> {
        self.health
            .get_or_init(|| async {
                let pods = match self.cluster_pods(kube, now).await {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list the cluster's pods; release health judges by the nodes alone this pass");
                        return None;
                    }
                };
                let sandbox = match kube.sandbox_failures().await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list the pods' sandbox failures; release health judges by the nodes alone this pass");
                        return None;
                    }
                };
                Some(
                    pods.iter()
                        .map(|(node, p)| (node.clone(), p.tally(&sandbox)))
                        .collect(),
                )
            })
            .await
            .as_ref()
    }

    /// Evictable pods on each of `nodes` (an ordering hint: a node whose pods cannot be
    /// listed counts as busy, `u32::MAX`), and the longest-holding opt-out of its pods
    /// ([`crate::fleet::OptOut`]).
    async fn evictable(
        &self,
        kube: &dyn NodeOps,
        nodes: &[String],
        now: DateTime<Utc>,
    ) -> HashMap<String, (u32, Option<crate::fleet::OptOut>)> {
        let mut out = HashMap::new();
        // The cluster's pods, when this pass listed them already, answer for free.
        if nodes.len() <= PER_NODE_POD_LISTS && !self.watched && self.pods.get().is_none() {
            for node in nodes {
                let n = match kube.list_pods(node).await {
                    Ok(pods) => {
                        let mut sum = NodePods::default();
                        pods.iter().for_each(|p| sum.add(p, now));
                        (sum.evictable, sum.opt_out)
                    }
                    Err(e) => {
                        tracing::warn!(node = %node, error = %e, "cannot count the node's pods; ordering it as busy");
                        (u32::MAX, None)
                    }
                };
                out.insert(node.clone(), n);
            }
            return out;
        }
        let counts = self.cluster_pods(kube, now).await;
        for node in nodes {
            let n = match counts {
                Ok(c) => c
                    .get(node)
                    .map_or((0, None), |p| (p.evictable, p.opt_out.clone())),
                Err(e) => {
                    tracing::warn!(node = %node, error = %e, "cannot count the cluster's pods; ordering the node as busy");
                    (u32::MAX, None)
                }
            };
            out.insert(node.clone(), n);
        }
        out
    }
}

/// One node's bound pods, summed up.
#[derive(Debug, Default)]
struct NodePods {
    /// Pods a drain would evict.
    evictable: u32,
    /// Pods started there (not `Succeeded` or `Failed`, not being deleted), with their
    /// start failures.
    started: PodTally,
    /// Started pods still `Pending` without a reported failure (a sandbox failure shows
    /// only as an Event): their uids.
    pending: Vec<String>,
    /// The longest-holding opt-out of its pods that have not finished nor are leaving.
    opt_out: Option<crate::fleet::OptOut>,
}

impl NodePods {
    fn add(&mut self, pod: &k::PodInfo, now: DateTime<Utc>) {
        if matches!(k::classify(pod, now), k::PodClass::Evict { .. }) {
            self.evictable = self.evictable.saturating_add(1);
        }
        if matches!(pod.phase.as_str(), "Succeeded" | "Failed") || pod.deletion_timestamp.is_some()
        {
            return;
        }
        self.opt_out = crate::fleet::OptOut::longer(self.opt_out.take(), pod.opt_out.as_ref());
        self.started.starts = self.started.starts.saturating_add(1);
        match &pod.start_failure {
            Some(reason) => {
                let c = self.started.failures.entry(reason.clone()).or_default();
                *c = c.saturating_add(1);
            }
            None if pod.phase == "Pending" => self.pending.push(pod.pod.uid.clone()),
            None => {}
        }
    }

    /// The tally with the pending pods that have a sandbox failure Event counted.
    fn tally(&self, sandbox: &std::collections::BTreeSet<String>) -> PodTally {
        let mut out = self.started.clone();
        let n = self.pending.iter().filter(|u| sandbox.contains(*u)).count();
        if n > 0 {
            out.failures.insert(
                "FailedCreatePodSandBox".into(),
                u32::try_from(n).unwrap_or(u32::MAX),
            );
        }
        out
    }
}

/// A pool as one pass observed it.
pub(super) struct Observed {
    /// What the planner sees.
    pub snapshot: Snapshot,
    /// The managed node group, for a managed pool (as `DescribeNodegroup` reported it).
    pub managed: Option<ManagedGroup>,
    /// The version of each rotation record, by instance id (for conditional writes).
    pub versions: BTreeMap<String, u64>,
    /// The pool's state record as read.
    pub record: Option<crate::state::PoolRecord>,
    /// Its version (for a write that starts from it).
    pub record_version: Option<u64>,
    /// A managed pool's update record as the cluster's batched read found it (`None`: not
    /// read; the managed pass reads it).
    pub managed_update: Option<UpdateRead>,
    /// The group's latest unsuccessful scaling activity, read only while a surge waits for a
    /// launch (desired capacity above the instances).
    pub launch_problem: Option<crate::fleet::LaunchProblem>,
}

/// A managed node group with the Auto Scaling group behind it, or why it could not be read.
type ManagedRead = Result<(String, ManagedGroup), PortError>;

/// A managed pool's update record as a batched read found it (`Ok(None)`: none).
pub(super) type UpdateRead =
    Result<Option<crate::state::Versioned<crate::managed::ManagedUpdate>>, PortError>;

impl Planner<'_> {
    /// What a pass reads once for a cluster whose pools are `policies`: the nodes and the stop
    /// switch ([`ClusterView::read`]), the managed node groups (one `DescribeNodegroup` each, at
    /// once), then every Auto Scaling group in batches ([`crate::fleet::snapshot::GroupSnapshots`]).
    /// and the pools' records ([`crate::state::Repository::pool_partitions`]). `writing`: the
    /// pass may write launch templates (their tags are read in batches too) and the pools'
    /// rotation indexes.
    pub(super) async fn cluster_view(
        &self,
        kube: &dyn NodeOps,
        policies: &[Policy],
        writing: bool,
        now: DateTime<Utc>,
    ) -> Result<ClusterView, PortError> {
        let view = ClusterView::read(kube, self.state).await?;
        let pools: Vec<String> = policies.iter().map(Policy::pool_id).collect();
        let records = self.state.pool_partitions(&pools, writing, now).await;
        // A release under watch in any pool lists the cluster's pods this pass anyway: the
        // evictable counts then come from that list too.
        let watched = policies.iter().any(|p| {
            records
                .get(&p.pool_id())
                .and_then(|r| r.as_ref().ok())
                .and_then(|r| r.record.as_ref())
                .is_some_and(|r| {
                    crate::promotion::health::under_watch(
                        r.value.previous_desired.is_some(),
                        r.value.desired_changed_at,
                        p.health.window,
                        now,
                    )
                })
        });
        let managed_pools: Vec<String> = policies
            .iter()
            .filter(|p| matches!(p.node_group, NodeGroup::ManagedNodeGroup(_)))
            .map(Policy::pool_id)
            .collect();
        let updates = if managed_pools.is_empty() {
            std::collections::BTreeMap::new()
        } else {
            self.state.managed_updates(&managed_pools).await
        };
        let mut names = Vec::new();
        let mut described = Vec::new();
        for policy in policies {
            match &policy.node_group {
                NodeGroup::AutoScalingGroup(g) => names.push(g.clone()),
                NodeGroup::ManagedNodeGroup(name) => described.push(async move {
                    (
                        name.clone(),
                        self.managed_group(&policy.cluster, name).await,
                    )
                }),
            }
        }
        let mut managed = HashMap::new();
        for (name, read) in futures::future::join_all(described).await {
            if let Ok((asg, _)) = &read {
                names.push(asg.clone());
            }
            managed.insert(name, read);
        }
        let troubled = match self.instances {
            Some(ec2) if policies.iter().any(|p| p.repair.enabled) => match ec2.troubled().await {
                Ok(list) => list
                    .into_iter()
                    .map(|s| (s.instance_id.clone(), s))
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read EC2 instance statuses: failed status checks and scheduled events are not seen this pass");
                    HashMap::new()
                }
            },
            _ => HashMap::new(),
        };
        let groups = self.groups.describe_groups(&names).await;
        if writing {
            self.groups.prefetch_template_tags(&names).await;
        }
        let images = groups
            .values()
            .filter_map(|g| g.as_ref().ok())
            .flat_map(|(_, members)| members)
            .filter(|m| m.lifecycle == crate::fleet::Lifecycle::InService)
            .filter_map(|m| Some((m.instance_id.clone(), m.image_id.clone()?)))
            .collect();
        Ok(ClusterView {
            watched,
            images,
            groups: std::sync::Mutex::new(groups.into_iter().collect()),
            managed: std::sync::Mutex::new(managed),
            records: std::sync::Mutex::new(records.into_iter().collect()),
            updates: std::sync::Mutex::new(updates.into_iter().collect()),
            troubled,
            ..view
        })
    }

    /// Managed node group `name` and the Auto Scaling group behind it.
    pub(crate) async fn managed_group(
        &self,
        cluster: &str,
        name: &str,
    ) -> Result<(String, ManagedGroup), PortError> {
        let group = self.managed.describe(cluster, name).await?;
        match &group.auto_scaling_group {
            Some(asg) => Ok((asg.clone(), group)),
            None => Err(PortError::new(
                "eks:DescribeNodegroup",
                ErrorKind::NotFound,
                format!(
                    "managed node group {name} reports no Auto Scaling group (status {}): nothing to rotate yet",
                    group.status
                ),
            )),
        }
    }

    /// Builds the snapshot of one pool, with the cluster's nodes and pods from `view`.
    pub(super) async fn observe(
        &self,
        policy: &Policy,
        kube: &dyn NodeOps,
        view: &ClusterView,
        now: DateTime<Utc>,
    ) -> Result<Observed, PortError> {
        let (group_name, managed) = match &policy.node_group {
            NodeGroup::AutoScalingGroup(g) => (g.clone(), None),
            NodeGroup::ManagedNodeGroup(name) => {
                let seen = view.take(&view.managed, name);
                let (asg, group) = match seen {
                    Some(read) => read?,
                    None => self.managed_group(&policy.cluster, name).await?,
                };
                (asg, Some(group))
            }
        };
        let pool = policy.pool_id();
        let managed_update = view.take(&view.updates, &pool);
        let read = match view.take(&view.records, &pool) {
            Some(read) => read?,
            None => self.state.pool_partition(&pool).await?,
        };
        let record_version = read.record.as_ref().map(|v| v.version);
        let record = read.record.map(|v| v.value);
        let records = read.rotations;
        let (group, instances) = match view.take(&view.groups, &group_name) {
            Some(read) => read?,
            None => self.groups.describe(&group_name).await?,
        };
        let mut members = with_nodes(instances, view);
        let adopted_at = record.as_ref().and_then(PoolRecord::adopted);
        let expiration = plan::Expiration::of(policy, adopted_at);
        let desired = record
            .as_ref()
            .and_then(|r| r.desired.as_ref())
            .map(|a| a.id.clone());
        let (desired_ami, expiry) = (desired.as_deref(), &expiration);
        let need = pods_to_count(&members, &records, &group, desired_ami, expiry, now);
        let counts = view.evictable(kube, &need, now).await;
        for node in members.iter_mut().filter_map(|m| m.node.as_mut()) {
            if let Some((n, opt_out)) = counts.get(&node.name) {
                node.evictable_pods = *n;
                node.pods_counted = *n != u32::MAX;
                node.opt_out = opt_out.clone();
            }
        }
        let staying = members
            .iter()
            .filter(|m| m.lifecycle != crate::fleet::Lifecycle::Leaving)
            .count();
        let launching = usize::try_from(group.desired_capacity).unwrap_or(0) > staying;
        // A surge or a terminate-first relaunch waits for a launch: why it has not come.
        let launch_problem = if launching && waits_for_launch(&records) && managed.is_none() {
            match self.groups.launch_problem(&group_name).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(pool = %pool, error = %e, "cannot read the group's scaling activities; the surge's wait shows no reason");
                    None
                }
            }
        } else {
            None
        };
        let versions = records
            .iter()
            .map(|v| (v.value.instance_id.clone(), v.version))
            .collect();
        let gates = gates_of(record.as_ref(), policy, view);
        let repair = repair_facts(
            &group,
            record.as_ref(),
            policy,
            managed.as_ref(),
            &members,
            view,
            now,
        );
        Ok(Observed {
            snapshot: Snapshot {
                policy: policy.clone(),
                gates,
                group,
                members,
                rotations: records.into_iter().map(|v| v.value).collect(),
                adopted_at,
                repair,
            },
            managed,
            versions,
            record,
            record_version,
            managed_update,
            launch_problem,
        })
    }
}

/// Some rotation of `records` waits for the group to launch: a surge holding its unit, or a
/// terminate-first rotation whose relaunch is due.
fn waits_for_launch(records: &[crate::state::Versioned<crate::rotation::Rotation>]) -> bool {
    records.iter().any(|v| {
        (v.value.step == crate::rotation::Step::Surging && v.value.surge_active())
            || v.value.step == crate::rotation::Step::Terminating
    })
}

/// What repair needs of the pool beyond its members: the images of its release under watch
/// (not a pinned pool's), whether EKS repairs it (a managed node group with node auto repair),
/// and the EC2 events scheduled for its instances.
fn repair_facts(
    group: &crate::fleet::Group,
    record: Option<&PoolRecord>,
    policy: &Policy,
    managed: Option<&ManagedGroup>,
    members: &[Member],
    view: &ClusterView,
    now: DateTime<Utc>,
) -> plan::RepairFacts {
    plan::RepairFacts {
        watched_images: record
            .filter(|r| r.pin.is_none())
            .filter(|r| {
                crate::promotion::health::under_watch(
                    r.previous_desired.is_some(),
                    r.desired_changed_at,
                    policy.health.window,
                    now,
                )
            })
            .and_then(|r| r.desired.as_ref())
            .map(|a| vec![a.id.clone()])
            .unwrap_or_default(),
        pool_do_not_repair: group.do_not_repair,
        scheduled: members
            .iter()
            .filter_map(|m| {
                let s = view.troubled.get(&m.instance_id)?;
                let e = s.events.iter().min_by_key(|e| e.not_before)?;
                Some((m.instance_id.clone(), e.clone()))
            })
            .collect(),
        left_to: managed
            .filter(|g| g.auto_repair)
            .map(|_| {
                "EKS node auto repair is on for the node group (nodeRepairConfig.enabled): EKS repairs its nodes, nodecycle does not".to_string()
            }),
    }
}

/// The group's instances with their Nodes as the cluster view has them (pods not counted yet),
/// a failed EC2 status check added to its node's conditions
/// ([`crate::fleet::EC2_STATUS_CHECK`]).
fn with_nodes(instances: Vec<Member>, view: &ClusterView) -> Vec<Member> {
    instances
        .into_iter()
        .map(|i| {
            let ec2 = view
                .troubled
                .get(&i.instance_id)
                .and_then(crate::fleet::InstanceStatus::condition);
            let node = view.by_instance.get(&i.instance_id).map(|n| NodeStatus {
                name: n.name.clone(),
                ready: n.ready,
                unschedulable: n.unschedulable,
                disrupted: n.disrupted_taint.clone(),
                evictable_pods: 0,
                pods_counted: false,
                marks: n.marks,
                joined: n.created,
                conditions: n.conditions.iter().cloned().chain(ec2.clone()).collect(),
                opt_out: None,
            });
            Member { node, ..i }
        })
        .collect()
}

/// The Nodes whose evictable pods are counted: those of candidates (the counts order them,
/// empty nodes first), of instances a surge may give back (launched since a surge that
/// holds or owes a unit: only a podless one is ever terminated), and of the instances `group`
/// retains (one goes only once its node is counted empty, [`crate::retain::cleanup`]).
fn pods_to_count(
    members: &[Member],
    records: &[crate::state::Versioned<crate::rotation::Rotation>],
    group: &crate::fleet::Group,
    desired: Option<&str>,
    expiration: &plan::Expiration,
    now: DateTime<Utc>,
) -> Vec<String> {
    let surged: Vec<&crate::rotation::Surge> = records
        .iter()
        .filter(|v| v.value.surge_active() || v.value.surge_owed())
        .filter_map(|v| v.value.surge.as_ref())
        .collect();
    let fresh = |m: &Member| surged.iter().any(|s| !s.baseline.contains(&m.instance_id));
    members
        .iter()
        .filter(|m| {
            fresh(m)
                || group.retained.contains(&m.instance_id)
                || plan::assess(m, desired, expiration, now).need().is_some()
                // A Ready repair candidate: its pods' opt-outs hold its repair (a node not
                // Ready runs no pod, and its pods are not counted: it stays podless).
                || m.node
                    .as_ref()
                    .is_some_and(|n| n.ready && n.conditions.iter().any(|c| c.is_bad()))
        })
        .filter_map(|m| m.node.as_ref().map(|n| n.name.clone()))
        .collect()
}

/// What holds the pool, from its record and policy and the deployment's stop switch: the
/// desired AMI (an operator's pin wins over what the terms resolve to), paused (by whom,
/// when, why), halted, stopped.
fn gates_of(record: Option<&PoolRecord>, policy: &Policy, view: &ClusterView) -> Gates {
    Gates {
        // An operator's pin wins over what the terms resolve to.
        desired_ami: record
            .as_ref()
            .and_then(|r| r.effective_desired())
            .map(str::to_string),
        paused: record
            .as_ref()
            .and_then(|r| r.paused.as_ref())
            .map(|p| {
                format!(
                    "by {} at {}: {}",
                    p.by.as_deref().unwrap_or("an operator"),
                    p.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    p.reason
                )
            })
            .or_else(|| {
                policy
                    .paused
                    .then(|| "policy sets paused: true".to_string())
            }),
        halted: record
            .as_ref()
            .and_then(|r| r.halted.as_ref())
            .map(|h| h.message.clone()),
        stopped: view.stopped.clone(),
    }
}
