//! [`Ports`]: one implementation of every port, built once per process (by `crate::wiring` from
//! the SDK clients, by `crate::fake` in tests) and shared by every handler of the process. A
//! layer of its own, above the traits (model) and the state table's repository, below the
//! adapters and the use cases: it names capabilities, never an implementation.

use std::sync::Arc;

use crate::ami::resolve::{ClusterCatalog, ImageCatalog, NodeGroupCatalog, ParameterStore};
use crate::fleet::GroupOps;
use crate::interruption::{InstanceLookup, LifecycleOps};
#[cfg(feature = "kube")]
use crate::kube::KubeConnector;
use crate::managed::ManagedGroupOps;
use crate::policy::source::PolicySource;
use crate::state::Store;

/// Declares [`Ports`] and, beside it, [`port_type`]: each field's type under the field's name,
/// so a handler's place ports (`place_ports!` in `crate::handlers`) name a port once, by name,
/// and its type and documentation stay here.
macro_rules! ports {
    (
        $(#[$meta:meta])*
        pub struct Ports {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        pub struct Ports {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        /// The type of each [`Ports`] field, named as the field (what `place_ports!` declares a
        /// handler's place ports with).
        #[allow(non_camel_case_types)]
        pub mod port_type {
            #[allow(unused_imports)]
            use super::*;
            $($(#[$field_meta])* pub type $field = $ty;)*
        }
    };
}

ports! {
    /// Every capability a handler may use. Cloning is cheap (shared adapters).
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
        /// Where handlers put their metrics (the wiring's `Runtime`: CloudWatch embedded
        /// metric format in a Lambda function, none in the CLI).
        pub metrics: Arc<dyn crate::metrics::MetricSink>,
        /// The ports of pools in other accounts and regions ([`crate::members`]).
        pub members: Arc<dyn Members>,
        /// Where pools' rollout statuses are published ([`crate::rollout`]).
        pub status: Arc<dyn crate::rollout::StatusBoard>,
        /// Kubernetes API per cluster (feature `kube`: the ami-watcher does without).
        #[cfg(feature = "kube")]
        pub kube: Arc<dyn KubeConnector>,
    }
}

impl Ports {
    /// The state table's repository over [`Ports::store`].
    pub fn repository(&self) -> crate::state::Repository {
        crate::state::Repository::new(self.store.clone())
    }

    /// The announcer over the same table ([`Ports::store`]) and [`Ports::events`]: what a
    /// handler records as a transition goes on the bus from there.
    pub fn announcer(&self) -> crate::announce::Announcer {
        crate::announce::Announcer::new(self.store.clone(), self.events.clone())
    }
}

/// Hands out the ports of a place.
#[async_trait::async_trait]
pub trait Members: Send + Sync {
    /// The cell's own account and region.
    async fn cell(&self) -> Result<crate::policy::Place, crate::port::PortError>;
    /// The ports for pools at `place`: `Ok(None)` for the cell's own place (use the cell's
    /// ports), `Ok(Some)` for another served place (built once and reused), `Err` when the
    /// place is not served or its spoke role cannot be assumed.
    async fn ports(
        &self,
        place: &crate::policy::Place,
    ) -> Result<Option<Ports>, crate::members::MemberError>;
}

/// `this` handler for pools at `place`: `this` itself for `None` or the cell's own place,
/// else `with(ports)` over the place's member's ports (the handler swaps in the ports that
/// reach the member and keeps the cell's table, bus and metrics). `Err` as
/// [`Members::ports`]: the place is not served or its spoke role cannot be assumed.
pub async fn at<T: Clone>(
    members: &dyn Members,
    place: Option<&crate::policy::Place>,
    this: &T,
    with: impl FnOnce(Ports) -> T,
) -> Result<T, crate::members::MemberError> {
    let Some(place) = place else {
        return Ok(this.clone());
    };
    Ok(match members.ports(place).await? {
        None => this.clone(),
        Some(ports) => with(ports),
    })
}

#[async_trait::async_trait]
impl Members for crate::members::OwnOnly {
    async fn cell(&self) -> Result<crate::policy::Place, crate::port::PortError> {
        Err(crate::port::PortError::new(
            "configuration",
            crate::port::ErrorKind::Other,
            "this deployment has no members",
        ))
    }

    async fn ports(
        &self,
        place: &crate::policy::Place,
    ) -> Result<Option<Ports>, crate::members::MemberError> {
        Err(crate::members::MemberError {
            place: place.clone(),
            field: "account",
            role: None,
            message: format!(
                "{place} is not served: this deployment serves only pools that name no account and region"
            ),
        })
    }
}
