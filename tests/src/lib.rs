//! Test support for nodecycle: a local fake cloud.
//!
//! [`FakeCloud`] starts `tests/fakecloud/server.py`: moto (a real AWS emulator)
//! spoken to over HTTP by the real AWS SDK, plus a control endpoint that seeds
//! fixtures moto cannot create by itself (SSM parameters under `/aws/service`,
//! AMIs with owner/architecture/deprecation, EKS cluster versions) and runs
//! Kubernetes API server stand-ins ([`KubeStandIn`]) for fake EKS clusters.
//! Each `FakeCloud` is its own server process, so tests run in parallel
//! without sharing state. See `tests/fakecloud/README.md` for the control API.
//!
//! [`ControlPlane`] is the real thing beside the stand-in (issue 44): etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and KWOK nodes, one per test.

// This crate is test support: a failure here is a broken test setup, and a
// panic with a clear message is the right way to report it.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod autoscaler;
mod controlplane;
mod controlplane_ca;
pub mod docs;
mod eks;
mod fakecloud;
mod faults;
mod http;
mod kube;
mod kube_client;
mod lifecycle;
mod runtime_api;
mod token;

pub use autoscaler::{
    CaAction, CapacityChange, ClusterAutoscaler, ScalingRecords, Termination, WorkloadsStep,
};
pub use controlplane::{
    AccessEntry, AuditEvent, CREATE_CONTAINER_ERROR_MESSAGE, ControlPlane,
    ENV_BIN as CONTROLPLANE_BIN_ENV, GROUP_ANNOTATION, IMAGE_ANNOTATION, KwokNode,
    NODE_NOT_READY_MESSAGE, NODE_STATUS_UNKNOWN_MESSAGE, NodeSync, TokenReview,
};
pub use controlplane_ca::{
    CA_NAME, CA_NAMESPACE, CA_USER, RealClusterAutoscaler, SAFE_TO_EVICT_ANNOTATION,
    SCALE_DOWN_DISABLED_ANNOTATION, TO_BE_DELETED_TAINT, ca_cluster_role, install_identity,
    workload_pods_on,
};
pub use eks::EksTiming;
pub use fakecloud::{
    ACCESS_KEY_ID, ACCOUNT_ID, Control, DEFAULT_REGION, FakeCloud, GroupSeed, ImageFixture,
    SECRET_ACCESS_KEY, SeededGroups,
};
pub use faults::{
    AwsFault, AwsFaults, FaultKind, FaultSpec, FaultStats, Faults, KubeFault, KubeFaults,
    OperationStats, SectionStats,
};
pub use kube::{
    KubeRequest, KubeStandIn, KubeState, NodeFixture, PdbFixture, PodFixture, SyncNodes,
};
pub use kube_client::{KubeClient, KubeResponse};
pub use runtime_api::{Outcome, RuntimeApi};

/// `rel` inside the repository checkout, located at run time: `cargo test` sets
/// `CARGO_MANIFEST_DIR` (this crate's directory) for every test binary. The
/// compile-time value is only a fallback: a build cache shared between checkouts
/// can hand out binaries compiled in another checkout, whose baked-in path no
/// longer exists.
pub fn repo_path(rel: &str) -> std::path::PathBuf {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.join("..").join(rel)
}
pub use token::{TokenParams, eks_token, presigned_url};
