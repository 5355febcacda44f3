//! In-memory ports: a deployment as plain maps, for tests of [`super::run::diagnose`] and of
//! code built on it.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::port::{
    AccessEntryFacts, AsgFacts, ClusterAccessInfo, ClusterFacts, EventRules, GroupInfo, HookFacts,
    ManagedFacts, PolicyDocuments, RbacFacts, RbacInfo, RuleFacts, StackOutputs, TableFacts,
    TableInfo, TemplateFacts,
};
use super::run::Ports;
use crate::managed::TemplateRef;
use crate::policy::source::PolicyDocument;
use crate::port::PortError;

/// Everything a deployment can show doctor, as plain maps.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// Stack name -> outputs.
    pub stacks: BTreeMap<String, BTreeMap<String, String>>,
    /// Table name -> facts.
    pub tables: BTreeMap<String, TableFacts>,
    /// Parameter name -> policy text.
    pub parameters: BTreeMap<String, String>,
    /// ASG name -> facts.
    pub asgs: BTreeMap<String, AsgFacts>,
    /// ASG name -> hooks.
    pub hooks: BTreeMap<String, Vec<HookFacts>>,
    /// (cluster, node group) -> facts.
    pub node_groups: BTreeMap<(String, String), ManagedFacts>,
    /// Template id -> facts.
    pub templates: BTreeMap<String, TemplateFacts>,
    /// Cluster -> facts.
    pub clusters: BTreeMap<String, ClusterFacts>,
    /// Cluster -> entries.
    pub entries: BTreeMap<String, Vec<AccessEntryFacts>>,
    /// Cluster -> RBAC.
    pub rbac: BTreeMap<String, RbacFacts>,
    /// Instance -> its node and evictable pods.
    pub pods: BTreeMap<String, crate::inventory::NodePods>,
    /// Rule name -> state.
    pub rules: BTreeMap<String, String>,
    /// Rules with event patterns and targets (`ListRules`, `ListTargetsByRule`): a member's
    /// forwarding rules.
    pub listed_rules: Vec<(RuleFacts, Vec<String>)>,
    /// The cell this world is seen from (`<account>/<region>`; default
    /// `123456789012/us-east-1`).
    pub cell: Option<crate::policy::Place>,
    /// Node group name (ASG or managed) -> its instance types.
    pub instance_types: BTreeMap<String, crate::ami::instance_types::GroupTypes>,
    /// Operations that answer AccessDenied.
    pub denied: Vec<String>,
    /// Member place (`<account>/<region>`) -> what its spoke role shows; a place missing here
    /// has a spoke role that cannot be assumed.
    pub members: BTreeMap<String, World>,
    /// Pool -> what the ami-watcher recorded ahead of time (any table).
    pub findings: BTreeMap<String, crate::deprecation::Findings>,
}

#[async_trait]
impl crate::inventory::PoolFindings for World {
    async fn findings(
        &self,
        _table: &str,
        pool: &str,
    ) -> Result<Option<crate::deprecation::Findings>, PortError> {
        Ok(self.findings.get(pool).cloned())
    }
}

impl super::members::MemberReads for World {
    fn ports(&self) -> Ports<'_> {
        World::ports(self)
    }
}

#[async_trait]
impl super::members::SpokeRoles for World {
    async fn assume(
        &self,
        place: &crate::policy::Place,
    ) -> (
        String,
        Result<Box<dyn super::members::MemberReads>, PortError>,
    ) {
        let role = format!("arn:aws:iam::{}:role/nodecycle-spoke", place.account);
        match self.members.get(&place.to_string()) {
            Some(w) => (role, Ok(Box::new(w.clone()))),
            None => (
                role.clone(),
                Err(PortError::new(
                    "sts:AssumeRole",
                    crate::port::ErrorKind::AccessDenied,
                    format!("AccessDenied: not authorized to perform sts:AssumeRole on {role}"),
                )),
            ),
        }
    }

    /// One spoke role for every function (the default pattern), the cell's account
    /// [`World::cell`]'s.
    async fn expected(
        &self,
        place: &crate::policy::Place,
    ) -> Result<super::members::Expected, PortError> {
        let cell = self
            .cell
            .as_ref()
            .map_or("123456789012", |c| c.account.as_str());
        Ok(super::members::expected(
            place,
            cell,
            &crate::members::MemberConfig::default(),
        ))
    }
}

impl World {
    fn deny(&self, op: &str) -> Result<(), PortError> {
        if self.denied.iter().any(|d| d == op) {
            Err(PortError::new(
                op,
                crate::port::ErrorKind::AccessDenied,
                "AccessDenied: not authorized",
            ))
        } else {
            Ok(())
        }
    }

    /// `map[key]`, as the port whose IAM action is `op` reads it (AccessDenied when denied).
    fn lookup<T: Clone>(
        &self,
        op: &str,
        map: &BTreeMap<String, T>,
        key: &str,
    ) -> Result<Option<T>, PortError> {
        self.deny(op)?;
        Ok(map.get(key).cloned())
    }

    /// The ports, all over this world.
    pub fn ports(&self) -> Ports<'_> {
        Ports {
            stack: self,
            table: self,
            policies: self,
            groups: self,
            clusters: self,
            rbac: self,
            pods: self,
            rules: self,
            node_types: self,
            findings: self,
        }
    }
}

#[async_trait]
impl crate::ami::resolve::NodeGroupCatalog for World {
    async fn current_image(
        &self,
        _cluster: &str,
        _group: &crate::policy::NodeGroup,
    ) -> Result<crate::ami::resolve::GroupImage, PortError> {
        Ok(crate::ami::resolve::GroupImage::Unknown)
    }

    async fn instance_types(
        &self,
        _cluster: &str,
        group: &crate::policy::NodeGroup,
    ) -> Result<crate::ami::instance_types::GroupTypes, PortError> {
        self.deny("ec2:DescribeInstanceTypes")?;
        let name = match group {
            crate::policy::NodeGroup::AutoScalingGroup(n)
            | crate::policy::NodeGroup::ManagedNodeGroup(n) => n,
        };
        Ok(self.instance_types.get(name).cloned().unwrap_or_default())
    }
}

#[async_trait]
impl StackOutputs for World {
    async fn outputs(&self, stack: &str) -> Result<Option<BTreeMap<String, String>>, PortError> {
        self.lookup("cloudformation:DescribeStacks", &self.stacks, stack)
    }
}

#[async_trait]
impl TableInfo for World {
    async fn table(&self, name: &str) -> Result<Option<TableFacts>, PortError> {
        self.lookup("dynamodb:DescribeTable", &self.tables, name)
    }
}

#[async_trait]
impl PolicyDocuments for World {
    async fn under(&self, prefix: &str) -> Result<Vec<PolicyDocument>, PortError> {
        self.deny("ssm:GetParametersByPath")?;
        Ok(self
            .parameters
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| PolicyDocument::parameter(prefix, k.clone(), v.clone()))
            .collect())
    }
}

#[async_trait]
impl crate::inventory::InstancePods for World {
    async fn pods_of(
        &self,
        _cluster: &str,
        instances: &[String],
    ) -> Result<BTreeMap<String, crate::inventory::NodePods>, PortError> {
        self.deny("kubernetes:list pods")?;
        Ok(instances
            .iter()
            .filter_map(|i| Some((i.clone(), self.pods.get(i)?.clone())))
            .collect())
    }
}

#[async_trait]
impl GroupInfo for World {
    async fn auto_scaling_group(&self, name: &str) -> Result<Option<AsgFacts>, PortError> {
        self.lookup("autoscaling:DescribeAutoScalingGroups", &self.asgs, name)
    }
    async fn lifecycle_hooks(&self, group: &str) -> Result<Vec<HookFacts>, PortError> {
        self.lookup("autoscaling:DescribeLifecycleHooks", &self.hooks, group)
            .map(Option::unwrap_or_default)
    }
    async fn managed_node_group(
        &self,
        cluster: &str,
        name: &str,
    ) -> Result<Option<ManagedFacts>, PortError> {
        self.deny("eks:DescribeNodegroup")?;
        Ok(self
            .node_groups
            .get(&(cluster.to_owned(), name.to_owned()))
            .cloned())
    }
    async fn launch_template(
        &self,
        template: &TemplateRef,
    ) -> Result<Option<TemplateFacts>, PortError> {
        self.deny("ec2:DescribeLaunchTemplates")?;
        Ok(self
            .templates
            .values()
            .find(|t| {
                template.id.as_deref() == Some(t.id.as_str())
                    || (template.id.is_none() && template.name.as_deref() == Some(t.name.as_str()))
            })
            .cloned())
    }
}

#[async_trait]
impl ClusterAccessInfo for World {
    async fn cluster(&self, name: &str) -> Result<Option<ClusterFacts>, PortError> {
        self.lookup("eks:DescribeCluster", &self.clusters, name)
    }
    async fn access_entries(&self, cluster: &str) -> Result<Vec<String>, PortError> {
        self.deny("eks:ListAccessEntries")?;
        Ok(self
            .entries
            .get(cluster)
            .map(|e| e.iter().map(|e| e.principal_arn.clone()).collect())
            .unwrap_or_default())
    }
    async fn access_entry(
        &self,
        cluster: &str,
        principal_arn: &str,
    ) -> Result<Option<AccessEntryFacts>, PortError> {
        self.deny("eks:DescribeAccessEntry")?;
        Ok(self
            .entries
            .get(cluster)
            .and_then(|e| e.iter().find(|e| e.principal_arn == principal_arn))
            .cloned())
    }
}

#[async_trait]
impl RbacInfo for World {
    async fn rbac(&self, cluster: &str) -> Result<RbacFacts, PortError> {
        self.lookup("kubernetes:list clusterrolebindings", &self.rbac, cluster)
            .map(Option::unwrap_or_default)
    }
}

#[async_trait]
impl EventRules for World {
    async fn rule_state(&self, name: &str) -> Result<Option<String>, PortError> {
        self.lookup("events:DescribeRule", &self.rules, name)
    }

    async fn rules(&self) -> Result<Vec<RuleFacts>, PortError> {
        self.deny("events:ListRules")?;
        Ok(self.listed_rules.iter().map(|(r, _)| r.clone()).collect())
    }

    async fn targets(&self, name: &str) -> Result<Vec<String>, PortError> {
        self.deny("events:ListTargetsByRule")?;
        Ok(self
            .listed_rules
            .iter()
            .find(|(r, _)| r.name == name)
            .map(|(_, t)| t.clone())
            .unwrap_or_default())
    }
}
