//! Kubernetes access from outside the cluster (feature `kube`).
//!
//! Layers, from pure to I/O:
//! - [`pods`]: plain node/pod values and their classification for a drain (no I/O).
//! - [`drain`]: the resumable drain: a serializable [`DrainState`], the pure decision
//!   [`plan_step`] of what to do next from (pods, state, now), and the thin I/O step
//!   [`drain_step`] generic over [`NodeOps`].
//! - [`node_ops`]: the narrow async trait [`NodeOps`] (the only thing the drain and the planner see).
//! - [`token`](mod@token): the EKS bearer token (SigV4 query-presigned STS GetCallerIdentity).
//! - [`client`]: [`EksKube`], the `kube`-based [`NodeOps`] with endpoint and CA from
//!   eks:DescribeCluster, local overrides and token refresh.
//! - [`connect`]: [`KubeConnector`], a client per cluster name ([`EksConnector`] over EKS).
//! - [`command`]: [`drain_command`], the library side of `nodecycle drain`.
//! - [`memory`]: an in-memory [`NodeOps`] for tests of code built on this module (feature
//!   `test-support` or unit tests; not linked into the Lambda functions).
//! - [`rbac`]: `nodecycle doctor`'s read of ClusterRoles and ClusterRoleBindings.

pub mod client;
pub mod command;
pub mod connect;
pub mod drain;
#[cfg(any(test, feature = "test-support"))]
pub mod memory;
pub mod node_ops;
pub mod pods;
pub mod rbac;
pub mod token;

pub use client::{ClusterAccess, EksKube, KubeOverrides};
pub use command::{DrainCommandError, DrainReport, drain_command};
pub use connect::{EksConnector, KubeConnector};
pub use drain::{
    BlockedPod, DrainError, DrainProgress, DrainState, PodFailure, StepPlan, abort_drain,
    delete_node, drain_step, node_of, plan_step, start_drain, start_drain_known,
};
pub use node_ops::{EventType, EvictOutcome, KubeError, NodeEvent, NodeOps};
pub use pods::{NodeInfo, PodClass, PodInfo, PodRef, SkipReason, classify, taint_value};
pub use token::{EksToken, presigned_url, token};

/// Key of the taint nodecycle puts on a node it disrupts (`<key>=<reason>:NoSchedule`).
pub const DISRUPTED_TAINT_KEY: &str = "nodecycle.dev/disrupted";

pub use crate::inventory::EVENTS_NAMESPACE;

/// `source.component` / `reportingComponent` of the Events nodecycle records.
pub const EVENT_COMPONENT: &str = "nodecycle";
