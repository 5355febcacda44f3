//! Ports: one narrow trait per AWS or Kubernetes capability, the errors they share, and the
//! [`Ports`] value that carries one implementation of each to every handler.
//!
//! Each trait is defined beside the values it speaks in (the planner's types for
//! [`GroupOps`], the resolver's for [`ImageCatalog`], ...) and re-exported here, so this module
//! is the one place that lists every capability nodecycle uses:
//!
//! | port | capability | AWS/Kubernetes calls (adapter) |
//! |---|---|---|
//! | [`PolicySource`] | pool policies | ssm:GetParametersByPath (`aws::ssm::SsmPolicies`) |
//! | [`ParameterStore`] | SSM parameters | ssm:GetParameters/GetParameter (`aws::ssm::Ssm`) |
//! | [`ImageCatalog`] | AMIs | ec2:DescribeImages (`aws::ec2::Ec2`) |
//! | [`ClusterCatalog`] | cluster versions | eks:DescribeCluster (`aws::eks::Eks`) |
//! | [`NodeGroupCatalog`] | what a node group launches | autoscaling/ec2/eks describes (`aws::nodegroup::NodeGroups`) |
//! | [`GroupOps`] | Auto Scaling groups | describe, set desired capacity, terminate, launch template (`aws::autoscaling::AutoScaling`) |
//! | [`ManagedGroupOps`] | managed node groups | eks:DescribeNodegroup/UpdateNodegroup* (`aws::managed::ManagedNodeGroups`) |
//! | [`Store`] | the state table | dynamodb:GetItem/PutItem/Query (`aws::dynamodb::Table`) |
//! | [`InstanceLookup`] | EC2 instances | ec2:DescribeInstances (`aws::interruption::Ec2Instances`) |
//! | [`LifecycleOps`] | lifecycle actions | autoscaling:CompleteLifecycleAction/RecordLifecycleActionHeartbeat (`aws::interruption::LifecycleActions`) |
//! | [`crate::promotion::AlarmStates`] | promotion alarms | cloudwatch:DescribeAlarms (`aws::cloudwatch::CloudWatch`) |
//! | [`KubeConnector`] / [`NodeOps`] | a cluster's Kubernetes API | nodes, pods, evictions, events (`kube::EksConnector`) |

use std::fmt;

pub use crate::ami::resolve::{ClusterCatalog, ImageCatalog, NodeGroupCatalog, ParameterStore};
pub use crate::fleet::GroupOps;
pub use crate::interruption::{InstanceLookup, LifecycleOps};
#[cfg(feature = "kube")]
pub use crate::kube::{KubeConnector, NodeOps};
pub use crate::managed::ManagedGroupOps;
pub use crate::policy::source::PolicySource;
pub use crate::state::Store;

pub mod uses;

#[cfg(feature = "aws")]
mod ports;
#[cfg(feature = "aws")]
pub use ports::Ports;

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

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.operation, self.message)
    }
}
