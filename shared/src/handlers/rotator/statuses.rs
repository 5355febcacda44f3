//! One read of the EC2 instance statuses per place and pass: every cluster of a pass in the
//! same account and region shares it (`DescribeInstanceStatus` lists the Region's running
//! instances, 1,000 a call, whichever cluster asks).

use std::sync::Arc;

use async_trait::async_trait;

use crate::fleet::InstanceStatus;
use crate::interruption::{InstanceInfo, InstanceLookup};
use crate::port::PortError;

/// [`InstanceLookup`] over `inner` whose [`InstanceLookup::troubled`] reads once and answers
/// every later caller (of the same pass) with that read, failure included.
pub(super) struct PassStatuses {
    inner: Arc<dyn InstanceLookup>,
    read: tokio::sync::OnceCell<Result<Vec<InstanceStatus>, PortError>>,
}

impl PassStatuses {
    /// A pass's memo over `inner`.
    pub(super) fn new(inner: Arc<dyn InstanceLookup>) -> Self {
        PassStatuses {
            inner,
            read: tokio::sync::OnceCell::new(),
        }
    }
}

#[async_trait]
impl InstanceLookup for PassStatuses {
    async fn instance(&self, instance_id: &str) -> Result<Option<InstanceInfo>, PortError> {
        self.inner.instance(instance_id).await
    }

    async fn spot_request_status(&self, instance_id: &str) -> Result<Option<String>, PortError> {
        self.inner.spot_request_status(instance_id).await
    }

    async fn troubled(&self) -> Result<Vec<InstanceStatus>, PortError> {
        self.read
            .get_or_init(|| self.inner.troubled())
            .await
            .clone()
    }
}
