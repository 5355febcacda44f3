//! EKS adapter: cluster version, and the describes of a cluster and of a managed node group
//! that the other adapters read through.

use async_trait::async_trait;

use super::port_error;
use crate::ami::resolve::ClusterCatalog;
use crate::managed::TemplateRef;
use crate::port::PortError;

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
        describe_cluster(&self.client, cluster)
            .await?
            .as_ref()
            .and_then(|c| c.version())
            .map(str::to_string)
            .ok_or_else(|| {
                PortError::other(
                    "eks:DescribeCluster",
                    format!("cluster {cluster} has no version in the response"),
                )
            })
    }
}

/// Cluster `name` (DescribeCluster), `None` when EKS answers without one; a cluster that does
/// not exist is the NotFound error.
pub(crate) async fn describe_cluster(
    client: &aws_sdk_eks::Client,
    name: &str,
) -> Result<Option<aws_sdk_eks::types::Cluster>, PortError> {
    let out = client
        .describe_cluster()
        .name(name)
        .send()
        .await
        .map_err(|e| port_error("eks:DescribeCluster", e))?;
    Ok(out.cluster().cloned())
}

/// Managed node group `name` of `cluster` (DescribeNodegroup), `None` when EKS answers without
/// one; a node group that does not exist is the NotFound error.
pub(crate) async fn describe_nodegroup(
    client: &aws_sdk_eks::Client,
    cluster: &str,
    name: &str,
) -> Result<Option<aws_sdk_eks::types::Nodegroup>, PortError> {
    let out = client
        .describe_nodegroup()
        .cluster_name(cluster)
        .nodegroup_name(name)
        .send()
        .await
        .map_err(|e| port_error("eks:DescribeNodegroup", e))?;
    Ok(out.nodegroup().cloned())
}

/// The launch template a managed node group names, as the model holds it.
pub(crate) fn template_ref(t: &aws_sdk_eks::types::LaunchTemplateSpecification) -> TemplateRef {
    TemplateRef {
        id: t.id().map(str::to_owned),
        name: t.name().map(str::to_owned),
        version: t.version().map(str::to_owned),
    }
}

/// The Auto Scaling group behind a managed node group, when EKS names it.
pub(crate) fn auto_scaling_group_of(ng: &aws_sdk_eks::types::Nodegroup) -> Option<String> {
    ng.resources()
        .and_then(|r| r.auto_scaling_groups().first())
        .and_then(|g| g.name())
        .map(str::to_owned)
}
