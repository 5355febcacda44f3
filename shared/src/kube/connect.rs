//! Connecting to a cluster's Kubernetes API by cluster name: the port the handlers use, and its
//! EKS implementation (DescribeCluster + token), caching one client per cluster per process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{EksKube, KubeError, KubeOverrides, NodeOps};

/// Connects to a cluster's Kubernetes API.
#[async_trait]
pub trait KubeConnector: Send + Sync {
    /// A client for `cluster` (may be cached across invocations).
    async fn connect(&self, cluster: &str) -> Result<Arc<dyn NodeOps>, KubeError>;
}

/// [`KubeConnector`] over EKS (DescribeCluster + token), caching one client per cluster.
pub struct EksConnector {
    sdk: aws_config::SdkConfig,
    overrides: KubeOverrides,
    cache: Mutex<HashMap<String, Arc<dyn NodeOps>>>,
}

impl EksConnector {
    /// A connector using `sdk` for DescribeCluster and token signing; no overrides.
    pub fn new(sdk: aws_config::SdkConfig) -> Self {
        Self {
            sdk,
            overrides: KubeOverrides::default(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Reaches the API servers as `overrides` say (the `NODECYCLE_KUBE_*` variables, parsed by
    /// `crate::wiring`).
    pub fn with_overrides(mut self, overrides: KubeOverrides) -> Self {
        self.overrides = overrides;
        self
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<dyn NodeOps>>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl KubeConnector for EksConnector {
    async fn connect(&self, cluster: &str) -> Result<Arc<dyn NodeOps>, KubeError> {
        if let Some(c) = self.cache().get(cluster) {
            return Ok(c.clone());
        }
        let kube: Arc<dyn NodeOps> =
            Arc::new(EksKube::connect(&self.sdk, cluster, &self.overrides).await?);
        self.cache().insert(cluster.to_string(), kube.clone());
        Ok(kube)
    }
}
