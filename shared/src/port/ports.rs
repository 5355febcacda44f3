//! [`Ports`]: one implementation of every port, built once per process from the SDK clients and
//! shared by every handler of the process.

use std::sync::Arc;

#[cfg(feature = "kube")]
use super::KubeConnector;
use super::{
    ClusterCatalog, GroupOps, ImageCatalog, InstanceLookup, LifecycleOps, ManagedGroupOps,
    NodeGroupCatalog, ParameterStore, PolicySource, Store,
};
use crate::aws::{
    Clients,
    autoscaling::AutoScaling,
    dynamodb::Table,
    ec2::Ec2,
    eks::Eks,
    interruption::{Ec2Instances, LifecycleActions},
    managed::ManagedNodeGroups,
    nodegroup::NodeGroups,
    ssm::{Ssm, SsmPolicies},
};
use crate::handlers::HandlerError;
#[cfg(feature = "kube")]
use crate::kube::EksConnector;

/// Every capability a handler may use. Cloning is cheap (shared adapters).
#[derive(Clone)]
pub struct Ports {
    /// Pool policies.
    pub policies: Arc<dyn PolicySource>,
    /// SSM parameters (aliases, `ssmParameter` terms, EKS release versions).
    pub parameters: Arc<dyn ParameterStore>,
    /// AMIs.
    pub images: Arc<dyn ImageCatalog>,
    /// Cluster versions.
    pub clusters: Arc<dyn ClusterCatalog>,
    /// What node groups launch.
    pub node_groups: Arc<dyn NodeGroupCatalog>,
    /// Auto Scaling groups.
    pub groups: Arc<dyn GroupOps>,
    /// Managed node groups.
    pub managed: Arc<dyn ManagedGroupOps>,
    /// The state table.
    pub store: Arc<dyn Store>,
    /// EC2 instances.
    pub instances: Arc<dyn InstanceLookup>,
    /// Lifecycle actions.
    pub lifecycle: Arc<dyn LifecycleOps>,
    /// The accounts and regions whose events are acted on (the deployment's own).
    pub deployment: Arc<dyn crate::event::served::Deployment>,
    /// CloudWatch alarm states (promotion alarms).
    pub alarms: Arc<dyn crate::promotion::AlarmStates>,
    /// The account's default event bus (events out).
    pub events: Arc<dyn crate::bus::EventSink>,
    /// Where handlers put their metrics ([`crate::metrics::NoMetrics`] unless a Lambda's
    /// `main.rs` chooses [`crate::metrics::EmfStdout`]).
    pub metrics: Arc<dyn crate::metrics::MetricSink>,
    /// Kubernetes API per cluster (feature `kube`: the ami-watcher does without).
    #[cfg(feature = "kube")]
    pub kube: Arc<dyn KubeConnector>,
}

impl Ports {
    /// The AWS and Kubernetes adapters over `config`, with the state table `table` and the
    /// policies under `prefix`.
    pub fn from_sdk(config: &aws_config::SdkConfig, table: &str, prefix: &str) -> Ports {
        Ports::build(config, table, prefix, true)
    }

    /// [`Ports::from_sdk`], with autoscaling:UpdateAutoScalingGroup allowed or not.
    fn build(
        config: &aws_config::SdkConfig,
        table: &str,
        prefix: &str,
        group_updates: bool,
    ) -> Ports {
        let c = Clients::new(config);
        let ssm = Ssm::new(c.ssm.clone());
        // The rotator's reads of its groups serve its architecture checks too.
        let seen = crate::aws::autoscaling::SeenGroups::default();
        Ports {
            policies: Arc::new(SsmPolicies::new(ssm.clone(), prefix)),
            parameters: Arc::new(ssm),
            images: Arc::new(Ec2::new(c.ec2.clone())),
            clusters: Arc::new(Eks::new(c.eks.clone())),
            node_groups: Arc::new(
                NodeGroups::new(c.autoscaling.clone(), c.ec2.clone(), c.eks.clone())
                    .with_seen(seen.clone()),
            ),
            groups: Arc::new(
                AutoScaling::new(c.autoscaling.clone(), c.ec2.clone())
                    .with_seen(seen)
                    .with_group_updates(group_updates),
            ),
            managed: Arc::new(ManagedNodeGroups::new(c.eks.clone(), c.ec2.clone())),
            store: Arc::new(Table::new(c.dynamodb.clone(), table)),
            instances: Arc::new(Ec2Instances::new(c.ec2.clone())),
            lifecycle: Arc::new(LifecycleActions::new(c.autoscaling.clone())),
            deployment: Arc::new(crate::aws::identity::OwnAccount::new(config)),
            alarms: Arc::new(crate::aws::cloudwatch::CloudWatch::new(
                c.cloudwatch.clone(),
            )),
            events: Arc::new(crate::aws::bus::EventBridge::new(c.events.clone())),
            metrics: Arc::new(crate::metrics::NoMetrics),
            #[cfg(feature = "kube")]
            kube: Arc::new(EksConnector::new(config.clone())),
        }
    }

    /// [`Ports::from_sdk`] with the table from `NODECYCLE_TABLE`, the prefix from
    /// `NODECYCLE_POLICY_PREFIX`, and group updates as
    /// [`crate::aws::autoscaling::GROUP_UPDATES_ENV`] says (disabled unless `Enabled`, as the
    /// stack's default).
    pub fn from_env(config: &aws_config::SdkConfig) -> Result<Ports, HandlerError> {
        let (table, prefix) = crate::handlers::table_and_prefix_from_env()?;
        Ok(Ports::build(
            config,
            &table,
            &prefix,
            crate::aws::autoscaling::group_updates_from_env(),
        ))
    }
}
