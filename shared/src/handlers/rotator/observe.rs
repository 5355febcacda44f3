//! Observe: one pool's snapshot through the ports (Auto Scaling group + EC2, Kubernetes nodes
//! by providerID, pool state, rotation records with their versions).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::RotatorHandler;
use crate::fleet::{Gates, Member, NodeStatus, Snapshot};
use crate::kube::{self as k, NodeOps};
use crate::managed::ManagedGroup;
use crate::plan;
use crate::policy::{NodeGroup, Policy};
use crate::port::{ErrorKind, PortError};
use crate::rotation::Rotation;
use crate::state::{self, Versioned};

/// A pool as one pass observed it.
pub(super) struct Observed {
    /// What the planner sees.
    pub snapshot: Snapshot,
    /// The managed node group, for a managed pool (as `DescribeNodegroup` reported it).
    pub managed: Option<ManagedGroup>,
    /// The version of each rotation record, by instance id (for conditional writes).
    pub versions: BTreeMap<String, u64>,
}

impl RotatorHandler {
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

    /// Every rotation record of `pool` (unreadable ones are logged and skipped).
    pub(crate) async fn rotations(
        &self,
        pool: &str,
    ) -> Result<Vec<Versioned<Rotation>>, PortError> {
        let items = self.store.query(&state::pool_pk(pool), "ROT#").await?;
        let mut out = Vec::new();
        for (sk, v) in items {
            match serde_json::from_value::<Rotation>(v.value) {
                Ok(r) => out.push(Versioned {
                    value: r,
                    version: v.version,
                }),
                Err(e) => {
                    tracing::error!(pool, sk = %sk, error = %e, "unreadable rotation record ignored")
                }
            }
        }
        Ok(out)
    }

    /// Builds the snapshot of one pool.
    pub(super) async fn observe(
        &self,
        policy: &Policy,
        kube: &dyn NodeOps,
        now: DateTime<Utc>,
    ) -> Result<Observed, PortError> {
        let (group_name, managed) = match &policy.node_group {
            NodeGroup::AutoScalingGroup(g) => (g.clone(), None),
            NodeGroup::ManagedNodeGroup(name) => {
                let (asg, group) = self.managed_group(&policy.cluster, name).await?;
                (asg, Some(group))
            }
        };
        let pool = policy.pool_id();
        let record = state::load_pool(self.store.as_ref(), &pool).await?;
        let (group, instances) = self.groups.describe(&group_name).await?;
        let nodes = kube.list_nodes().await?;
        let by_instance: HashMap<String, &k::NodeInfo> = nodes
            .iter()
            .filter_map(|n| {
                k::client::instance_of_provider_id(&n.provider_id).map(|i| (i.to_string(), n))
            })
            .collect();
        let mut members: Vec<Member> = instances
            .into_iter()
            .map(|i| {
                let node = by_instance.get(&i.instance_id).map(|n| NodeStatus {
                    name: n.name.clone(),
                    ready: n.ready,
                    unschedulable: n.unschedulable,
                    disrupted: n.disrupted_taint.clone(),
                    evictable_pods: 0,
                });
                i.with_node(node)
            })
            .collect();
        let desired = record
            .as_ref()
            .and_then(|r| r.desired.as_ref())
            .map(|a| a.id.clone());
        // Evictable pod counts order the candidates (empty nodes first); only candidates need them.
        for m in members.iter_mut() {
            let need = plan::assess(
                m,
                desired.as_deref(),
                policy.expire_after,
                policy.termination_grace_period,
                now,
            )
            .need();
            let Some(node) = m.node.as_mut() else {
                continue;
            };
            if need.is_none() {
                continue;
            }
            // Only an ordering hint (empty nodes first): when the pods cannot be listed the node
            // counts as busy rather than failing the pool's pass.
            node.evictable_pods = match kube.list_pods(&node.name).await {
                Ok(pods) => u32::try_from(
                    pods.iter()
                        .filter(|p| matches!(k::classify(p, now), k::PodClass::Evict { .. }))
                        .count(),
                )
                .unwrap_or(u32::MAX),
                Err(e) => {
                    tracing::warn!(node = %node.name, error = %e, "cannot count the node's pods; ordering it as busy");
                    u32::MAX
                }
            };
        }
        let records = self.rotations(&pool).await?;
        let versions = records
            .iter()
            .map(|v| (v.value.instance_id.clone(), v.version))
            .collect();
        let gates = Gates {
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
                .or_else(|| policy.paused.then(|| "policy has paused: true".to_string())),
            halted: record
                .as_ref()
                .and_then(|r| r.halted.as_ref())
                .map(|h| h.message.clone()),
        };
        Ok(Observed {
            snapshot: Snapshot {
                policy: policy.clone(),
                gates,
                group,
                members,
                rotations: records.into_iter().map(|v| v.value).collect(),
            },
            managed,
            versions,
        })
    }
}
