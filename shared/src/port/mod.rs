//! Ports: the errors every port call shares ([`PortError`], [`ErrorKind`]) and [`uses`], what
//! each function's code calls. The bundle that carries one implementation of each port to a
//! function's handlers is `crate::ports::Ports`, a layer above the traits.
//!
//! Each trait is defined beside the values it speaks in (the planner's types for
//! `GroupOps`, the resolver's for `ImageCatalog`, ...), in the model layer, so that adapters
//! implement them and use cases call them without either depending on the other. The ports
//! nodecycle uses:
//!
//! | port | capability | AWS/Kubernetes calls (adapter) |
//! |---|---|---|
//! | [`crate::policy::source::PolicySource`] | pool policies | ssm:GetParametersByPath (`aws::ssm::SsmPolicies`) |
//! | [`crate::ami::resolve::ParameterStore`] | SSM parameters | ssm:GetParameters/GetParameter (`aws::ssm::Ssm`) |
//! | [`crate::ami::resolve::ImageCatalog`] | AMIs | ec2:DescribeImages (`aws::ec2::Ec2`) |
//! | [`crate::ami::resolve::ClusterCatalog`] | cluster versions | eks:DescribeCluster (`aws::eks::Eks`) |
//! | [`crate::ami::resolve::NodeGroupCatalog`] | what a node group launches | autoscaling/ec2/eks describes (`aws::nodegroup::NodeGroups`) |
//! | [`crate::fleet::GroupOps`] | Auto Scaling groups | describe, set desired capacity, terminate, launch template (`aws::autoscaling::AutoScaling`) |
//! | [`crate::managed::ManagedGroupOps`] | managed node groups | eks:DescribeNodegroup/UpdateNodegroup* (`aws::eks_nodegroups::ManagedNodeGroups`) |
//! | [`crate::state::Store`] | the state table | dynamodb:GetItem/PutItem/Query/BatchGetItem/TransactWriteItems (`aws::dynamodb::Table`) |
//! | [`crate::interruption::InstanceLookup`] | EC2 instances | ec2:DescribeInstances (`aws::instances::Ec2Instances`) |
//! | [`crate::interruption::LifecycleOps`] | lifecycle actions | autoscaling:CompleteLifecycleAction/RecordLifecycleActionHeartbeat (`aws::instances::LifecycleActions`) |
//! | [`crate::promotion::AlarmStates`] | promotion alarms | cloudwatch:DescribeAlarms (`aws::cloudwatch::CloudWatch`) |
//! | [`crate::event::served::Deployment`] | accounts and regions served | sts:GetCallerIdentity (`aws::identity::OwnAccount`) |
//! | [`crate::bus::EventSink`] | events out | events:PutEvents (`aws::events_out::EventBridge`) |
//! | `KubeConnector` / `NodeOps` (`crate::kube`) | a cluster's Kubernetes API | nodes, pods, evictions, events (`kube::EksConnector`) |
//! | [`crate::inventory`] | what `nodecycle doctor` reads | describes of the stack, table, groups, clusters, rules, RBAC |
//!
//! The adapters are chosen in `crate::wiring` (the functions' `main`s) and, for tests, in
//! `crate::fake` (feature `test-support`).

use std::fmt;

pub mod uses;

/// What kind of failure a port call had; decisions depend on the kind, never on SDK types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// The named thing does not exist.
    NotFound,
    /// A conditional write lost a race, or the resource is busy; re-read and retry.
    Conflict,
    /// The service throttled the call (after the SDK's own retries); retry later, slower.
    Throttled,
    /// A transient service or network failure (5xx, reset, timeout); retry later.
    Transient,
    /// Credentials or permissions.
    AccessDenied,
    /// The request was refused as invalid (validation errors, bad parameters).
    Invalid,
    /// Anything else (unexpected response).
    Other,
}

impl ErrorKind {
    /// Throttled or transient: the same call may succeed later.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Throttled | ErrorKind::Transient)
    }
}

/// A failed call through a port: which service and operation, what kind, and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PortError {
    /// e.g. `ssm:GetParameters`.
    pub operation: String,
    /// Classification used by callers.
    pub kind: ErrorKind,
    /// Human-readable detail (service error code and message); never contains secrets.
    pub message: String,
}

impl PortError {
    /// Builds an error.
    pub fn new(operation: impl Into<String>, kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            operation: operation.into(),
            kind,
            message: message.into(),
        }
    }

    /// True for [`ErrorKind::NotFound`].
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// An error of kind [`ErrorKind::Other`] for something that is not a service call (e.g. a
    /// record that cannot be encoded).
    pub fn other(operation: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self::new(operation, ErrorKind::Other, message.to_string())
    }
}

/// `err` and its sources as people read them: each level's `Display`, joined by `: `, a level
/// whose text the previous one already contains left out. Never `Debug` text (the AWS SDK's
/// `DisplayErrorContext` ends with the error's `Debug` form, e.g. `DispatchFailure(...)`).
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = e.source();
    }
    out
}

/// What to set when an AWS call failed for want of credentials: `Some(hint)` when `chain` (an
/// [`error_chain`]) says the SDK found none or could not load them.
pub fn credentials_hint(chain: &str) -> Option<&'static str> {
    let lower = chain.to_ascii_lowercase();
    (lower.contains("credentials") && !lower.contains("invalidclienttokenid")).then_some(
        "no usable AWS credentials: set AWS_PROFILE (a profile of ~/.aws/config), or \
         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)",
    )
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.operation, self.message)
    }
}
