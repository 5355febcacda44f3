//! EKS adapter: cluster version.

use async_trait::async_trait;

use super::port_error;
use crate::ami::resolve::ClusterCatalog;
use crate::port::{ErrorKind, PortError};

/// EKS through the SDK.
#[derive(Clone, Debug)]
pub struct Eks {
    client: aws_sdk_eks::Client,
}

impl Eks {
    /// Wraps a client.
    pub fn new(client: aws_sdk_eks::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl ClusterCatalog for Eks {
    async fn kubernetes_version(&self, cluster: &str) -> Result<String, PortError> {
        let out = self
            .client
            .describe_cluster()
            .name(cluster)
            .send()
            .await
            .map_err(|e| port_error("eks:DescribeCluster", e))?;
        out.cluster()
            .and_then(|c| c.version())
            .map(str::to_string)
            .ok_or_else(|| {
                PortError::new(
                    "eks:DescribeCluster",
                    ErrorKind::Other,
                    format!("cluster {cluster} has no version in the response"),
                )
            })
    }
}
