//! What a deployment has, read-only: the ports `nodecycle doctor` reads a deployment through
//! (one narrow trait per capability: stack outputs, the table, groups, cluster access, event
//! rules, RBAC, policy documents) and the plain facts they return. A model module, so the
//! adapters (`crate::aws`, `crate::kube::rbac`) implement them without depending on doctor.
//! `Ok(None)` always means "does not exist"; errors are [`PortError`]s whose `operation` is
//! the IAM action (or Kubernetes request) that was refused or failed.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::managed::TemplateRef;
use crate::policy::source::PolicyDocument;
use crate::port::PortError;

/// The namespace nodecycle records its Events in (deploy/rbac.yaml allows `create events` there
/// only): a fact of the deployment that the Kubernetes adapter writes to and doctor checks.
pub const EVENTS_NAMESPACE: &str = "default";

/// CloudFormation: a stack's outputs.
#[async_trait]
pub trait StackOutputs: Send + Sync {
    /// Output key -> value of stack `stack`; `None` when the stack does not exist.
    async fn outputs(&self, stack: &str) -> Result<Option<BTreeMap<String, String>>, PortError>;
}

/// The state table as DynamoDB describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableFacts {
    /// `TableStatus` (`ACTIVE`, ...).
    pub status: String,
    /// Key schema in order: (attribute, `HASH`|`RANGE`).
    pub keys: Vec<(String, String)>,
    /// Attribute definitions: attribute -> `S`|`N`|`B`.
    pub attribute_types: BTreeMap<String, String>,
    /// `TimeToLiveStatus` (`ENABLED`, `ENABLING`, `DISABLED`, ...).
    pub ttl_status: String,
    /// TTL attribute, when set.
    pub ttl_attribute: Option<String>,
}

/// DynamoDB: describe a table and its TTL.
#[async_trait]
pub trait TableInfo: Send + Sync {
    /// The table's facts; `None` when it does not exist.
    async fn table(&self, name: &str) -> Result<Option<TableFacts>, PortError>;
}

/// An Auto Scaling group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AsgFacts {
    /// Group name.
    pub name: String,
    /// Tags (key -> value).
    pub tags: BTreeMap<String, String>,
    /// The launch template it launches (directly or through its mixed instances policy).
    pub launch_template: Option<TemplateRef>,
    /// Its launch configuration, if it uses one instead.
    pub launch_configuration: Option<String>,
    /// Its instance lifecycle policy's `RetentionTriggers.TerminateHookAbandon` (`retain` or
    /// `terminate`; `None`: no policy, Auto Scaling terminates).
    pub terminate_hook_abandon: Option<String>,
    /// Its instances in `Terminating:Retained` ([`crate::retain`]).
    pub retained: Vec<String>,
}

/// One lifecycle hook of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFacts {
    /// Hook name.
    pub name: String,
    /// e.g. `autoscaling:EC2_INSTANCE_TERMINATING`.
    pub transition: String,
    /// `DefaultResult` (`CONTINUE` or `ABANDON`), what a timeout does.
    pub default_result: String,
}

/// An EKS managed node group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagedFacts {
    /// Node group name.
    pub name: String,
    /// Its Auto Scaling group (`resources.autoScalingGroups[0]`).
    pub auto_scaling_group: Option<String>,
    /// The customer's launch template, when the group was created with one.
    pub launch_template: Option<TemplateRef>,
    /// EKS node auto repair is on (`nodeRepairConfig.enabled`).
    pub auto_repair: bool,
    /// The node group's own tags (key -> value; EKS copies none from the cluster).
    pub tags: BTreeMap<String, String>,
}

/// A launch template.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateFacts {
    /// `lt-...`.
    pub id: String,
    /// Template name.
    pub name: String,
    /// Tags (key -> value).
    pub tags: BTreeMap<String, String>,
}

/// Auto Scaling, EKS node groups and EC2 launch templates (reads only).
#[async_trait]
pub trait GroupInfo: Send + Sync {
    /// An Auto Scaling group by name.
    async fn auto_scaling_group(&self, name: &str) -> Result<Option<AsgFacts>, PortError>;
    /// A group's lifecycle hooks.
    async fn lifecycle_hooks(&self, group: &str) -> Result<Vec<HookFacts>, PortError>;
    /// A managed node group of `cluster`.
    async fn managed_node_group(
        &self,
        cluster: &str,
        name: &str,
    ) -> Result<Option<ManagedFacts>, PortError>;
    /// A launch template by id (preferred) or name.
    async fn launch_template(
        &self,
        template: &TemplateRef,
    ) -> Result<Option<TemplateFacts>, PortError>;
}

/// An EKS cluster as far as access is concerned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// `ACTIVE`, `CREATING`, ...
    pub status: String,
    /// `accessConfig.authenticationMode`: `CONFIG_MAP`, `API`, `API_AND_CONFIG_MAP`.
    pub authentication_mode: Option<String>,
    /// `resourcesVpcConfig`: how the Kubernetes API endpoint is reached; `None` when EKS reports
    /// neither a public nor a private endpoint (an emulator, not a real cluster).
    pub endpoint: Option<EndpointAccess>,
    /// The cluster's tags (key -> value).
    pub tags: BTreeMap<String, String>,
}

/// A cluster's Kubernetes API endpoint access (`resourcesVpcConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointAccess {
    /// `endpointPublicAccess`.
    pub public: bool,
    /// `endpointPrivateAccess`.
    pub private: bool,
    /// `publicAccessCidrs` (EKS reports `0.0.0.0/0` when unrestricted).
    pub public_cidrs: Vec<String>,
}

/// One EKS access entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessEntryFacts {
    /// The IAM principal it maps.
    pub principal_arn: String,
    /// Kubernetes groups it maps the principal to.
    pub kubernetes_groups: Vec<String>,
    /// `STANDARD`, `EC2_LINUX`, ...
    pub entry_type: String,
}

/// EKS: clusters and their access entries.
#[async_trait]
pub trait ClusterAccessInfo: Send + Sync {
    /// A cluster by name.
    async fn cluster(&self, name: &str) -> Result<Option<ClusterFacts>, PortError>;
    /// The principal ARNs of every access entry of `cluster`.
    async fn access_entries(&self, cluster: &str) -> Result<Vec<String>, PortError>;
    /// One access entry (by the principal ARN as listed).
    async fn access_entry(
        &self,
        cluster: &str,
        principal_arn: &str,
    ) -> Result<Option<AccessEntryFacts>, PortError>;
}

/// One rule of the default bus, as `ListRules` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleFacts {
    /// The rule's name.
    pub name: String,
    /// `ENABLED`, `DISABLED`, ...
    pub state: String,
    /// Its event pattern (JSON text), `None` for a scheduled rule.
    pub pattern: Option<String>,
}

/// EventBridge: rules of the default bus, their states and targets.
#[async_trait]
pub trait EventRules: Send + Sync {
    /// `State` of rule `name` on the default bus (`ENABLED`, `DISABLED`, ...); `None` when it
    /// does not exist.
    async fn rule_state(&self, name: &str) -> Result<Option<String>, PortError>;
    /// Every rule of the default bus (`events:ListRules`, every page, at most
    /// [`MAX_RULES`]).
    async fn rules(&self) -> Result<Vec<RuleFacts>, PortError>;
    /// The target ARNs of rule `name` on the default bus (`events:ListTargetsByRule`, at most
    /// five per rule); empty when it does not exist.
    async fn targets(&self, name: &str) -> Result<Vec<String>, PortError>;
}

/// The most rules [`EventRules::rules`] reads (EventBridge's default quota is 300 a bus).
pub const MAX_RULES: usize = 2000;

/// One RBAC rule (`rbac.authorization.k8s.io/v1` PolicyRule).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyRule {
    /// API groups (`""` is core, `*` any).
    pub api_groups: Vec<String>,
    /// Resources (`pods/eviction` for a subresource, `*` any, `*/eviction` any's subresource).
    pub resources: Vec<String>,
    /// Verbs (`*` any).
    pub verbs: Vec<String>,
    /// When not empty, the rule applies to these object names only.
    pub resource_names: Vec<String>,
    /// Non-resource URLs (irrelevant to nodecycle).
    #[serde(rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

/// A ClusterRole (rules as served: aggregated roles already filled in), or a Role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterRoleFacts {
    /// Name.
    pub name: String,
    /// A Role's namespace (empty for a ClusterRole).
    pub namespace: String,
    /// Rules.
    pub rules: Vec<PolicyRule>,
}

/// A subject of a binding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubjectFacts {
    /// `User`, `Group`, `ServiceAccount`.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// A ClusterRoleBinding, or a RoleBinding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindingFacts {
    /// Name.
    pub name: String,
    /// A RoleBinding's namespace (empty for a ClusterRoleBinding).
    pub namespace: String,
    /// `roleRef.kind` (always `ClusterRole` for a ClusterRoleBinding; `Role` or `ClusterRole`
    /// for a RoleBinding).
    pub role_kind: String,
    /// `roleRef.name`.
    pub role_name: String,
    /// Subjects.
    pub subjects: Vec<SubjectFacts>,
}

/// A cluster's cluster-wide RBAC objects, and those of the Events namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RbacFacts {
    /// Every ClusterRole.
    pub cluster_roles: Vec<ClusterRoleFacts>,
    /// Every ClusterRoleBinding.
    pub bindings: Vec<BindingFacts>,
    /// The Roles of namespace [`EVENTS_NAMESPACE`].
    pub roles: Vec<ClusterRoleFacts>,
    /// The RoleBindings of namespace [`EVENTS_NAMESPACE`].
    pub role_bindings: Vec<BindingFacts>,
}

/// Kubernetes: read a cluster's ClusterRoles and ClusterRoleBindings, and the Roles and
/// RoleBindings of the namespace nodecycle writes Events in.
#[async_trait]
pub trait RbacInfo: Send + Sync {
    /// Everything cluster-scoped RBAC has in `cluster`, and the Events namespace's.
    async fn rbac(&self, cluster: &str) -> Result<RbacFacts, PortError>;
}

/// A retained instance's node and the pods a drain would still evict from it (`namespace/name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePods {
    /// Node name.
    pub node: String,
    /// `namespace/name` of each evictable pod (not DaemonSet, not mirror, not finished).
    pub pods: Vec<String>,
}

/// The pods on the nodes of instances, read from the Kubernetes API (`nodecycle doctor`'s
/// report of retained instances).
#[async_trait]
pub trait InstancePods: Send + Sync {
    /// For each of `instances` of `cluster` that has a Kubernetes node (by providerID): its
    /// node and evictable pods. Instances without a node are left out.
    async fn pods_of(
        &self,
        cluster: &str,
        instances: &[String],
    ) -> Result<BTreeMap<String, NodePods>, PortError>;
}

/// Policy documents under an SSM prefix.
#[async_trait]
pub trait PolicyDocuments: Send + Sync {
    /// Every document under `prefix` (recursive), sorted by source.
    async fn under(&self, prefix: &str) -> Result<Vec<PolicyDocument>, PortError>;
}

/// What the ami-watcher recorded ahead of time about a pool (its pool record in the state
/// table): `nodecycle doctor`'s `release` check.
#[async_trait::async_trait]
pub trait PoolFindings: Send + Sync {
    /// The findings recorded for `pool` in table `table`; `None` when the pool has no record,
    /// or none yet.
    async fn findings(
        &self,
        table: &str,
        pool: &str,
    ) -> Result<Option<crate::deprecation::Findings>, PortError>;
}
