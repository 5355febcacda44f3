//! [`RbacInfo`] over the Kubernetes API of EKS clusters: every ClusterRole and
//! ClusterRoleBinding, and the Roles and RoleBindings of the Events namespace
//! (`rbac.authorization.k8s.io/v1`), read with the caller's EKS token.

use ::kube::api::{Api, ListParams};
use async_trait::async_trait;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde::de::DeserializeOwned;

use super::client::EksKube;
use super::node_ops::KubeError;
use crate::inventory::{
    BindingFacts, ClusterRoleFacts, InstancePods, NodePods, PolicyRule, RbacFacts, RbacInfo,
    SubjectFacts,
};
use crate::port::{ErrorKind, PortError};

/// Page size of the list requests.
const PAGE: u32 = 500;

/// Reads RBAC objects of any cluster, connecting with [`EksKube::connect`] (DescribeCluster for
/// the endpoint and CA, or the `NODECYCLE_KUBE_*` overrides given).
#[derive(Clone, Debug)]
pub struct EksRbac {
    sdk: aws_config::SdkConfig,
    overrides: super::KubeOverrides,
}

impl EksRbac {
    /// Signs with `sdk`'s credentials and region; no overrides.
    pub fn new(sdk: aws_config::SdkConfig) -> Self {
        Self {
            sdk,
            overrides: super::KubeOverrides::default(),
        }
    }

    /// Reaches the API server as `overrides` say (the `NODECYCLE_KUBE_*` variables, parsed by
    /// `crate::wiring`).
    pub fn with_overrides(mut self, overrides: super::KubeOverrides) -> Self {
        self.overrides = overrides;
        self
    }
}

/// A Kubernetes (or access) error as a [`PortError`]; `operation` is `kubernetes:<request>`
/// for API answers and `eks:DescribeCluster` when the cluster could not be described.
pub fn port_error(e: KubeError) -> PortError {
    match e {
        KubeError::Api {
            operation,
            code,
            reason,
            message,
        } => PortError::new(
            format!("kubernetes:{operation}"),
            match code {
                401 | 403 => ErrorKind::AccessDenied,
                404 => ErrorKind::NotFound,
                429 | 500..=599 => ErrorKind::Transient,
                _ => ErrorKind::Other,
            },
            format!("HTTP {code} {reason}: {message}"),
        ),
        KubeError::NotFound { operation } => PortError::new(
            format!("kubernetes:{operation}"),
            ErrorKind::NotFound,
            "not found",
        ),
        KubeError::Transport { operation, message } => PortError::new(
            format!("kubernetes:{operation}"),
            ErrorKind::Transient,
            message,
        ),
        KubeError::ClusterNotFound(c) => PortError::new(
            "eks:DescribeCluster",
            ErrorKind::NotFound,
            format!("no EKS cluster {c}"),
        ),
        KubeError::Aws(m) => PortError::new("eks:DescribeCluster", ErrorKind::Other, m),
        KubeError::Config(m) => PortError::new("kubernetes:connect", ErrorKind::Other, m),
    }
}

async fn list_all<K>(api: &Api<K>, operation: &str) -> Result<Vec<K>, PortError>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = api.list(&params).await.map_err(|e| match e {
            ::kube::Error::Api(s) => port_error(KubeError::Api {
                operation: operation.to_owned(),
                code: s.code,
                reason: s.reason.clone(),
                message: s.message.clone(),
            }),
            other => port_error(KubeError::Transport {
                operation: operation.to_owned(),
                message: other.to_string(),
            }),
        })?;
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        out.extend(page.items);
        if token.is_none() {
            return Ok(out);
        }
    }
}

fn rule(r: k8s_openapi::api::rbac::v1::PolicyRule) -> PolicyRule {
    PolicyRule {
        api_groups: r.api_groups.unwrap_or_default(),
        resources: r.resources.unwrap_or_default(),
        verbs: r.verbs,
        resource_names: r.resource_names.unwrap_or_default(),
        non_resource_urls: r.non_resource_urls.unwrap_or_default(),
    }
}

fn role(r: ClusterRole) -> ClusterRoleFacts {
    ClusterRoleFacts {
        name: r.metadata.name.unwrap_or_default(),
        namespace: String::new(),
        rules: r.rules.unwrap_or_default().into_iter().map(rule).collect(),
    }
}

fn binding(
    name: Option<String>,
    namespace: Option<String>,
    role_ref: k8s_openapi::api::rbac::v1::RoleRef,
    subjects: Option<Vec<k8s_openapi::api::rbac::v1::Subject>>,
) -> BindingFacts {
    BindingFacts {
        name: name.unwrap_or_default(),
        namespace: namespace.unwrap_or_default(),
        role_kind: role_ref.kind,
        role_name: role_ref.name,
        subjects: subjects
            .unwrap_or_default()
            .into_iter()
            .map(|s| SubjectFacts {
                kind: s.kind,
                name: s.name,
            })
            .collect(),
    }
}

#[async_trait]
impl RbacInfo for EksRbac {
    async fn rbac(&self, cluster: &str) -> Result<RbacFacts, PortError> {
        let kube = EksKube::connect(&self.sdk, cluster, &self.overrides)
            .await
            .map_err(port_error)?;
        let client = kube.client().await.map_err(port_error)?;
        let ns = super::EVENTS_NAMESPACE;
        let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
        let cluster_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        let roles: Api<Role> = Api::namespaced(client.clone(), ns);
        let role_bindings: Api<RoleBinding> = Api::namespaced(client, ns);
        let cluster_roles = list_all(
            &cluster_roles,
            "list clusterroles.rbac.authorization.k8s.io",
        )
        .await?;
        let cluster_bindings = list_all(
            &cluster_bindings,
            "list clusterrolebindings.rbac.authorization.k8s.io",
        )
        .await?;
        let roles = list_all(
            &roles,
            &format!("list roles.rbac.authorization.k8s.io in namespace {ns}"),
        )
        .await?;
        let role_bindings = list_all(
            &role_bindings,
            &format!("list rolebindings.rbac.authorization.k8s.io in namespace {ns}"),
        )
        .await?;
        Ok(RbacFacts {
            cluster_roles: cluster_roles.into_iter().map(role).collect(),
            bindings: cluster_bindings
                .into_iter()
                .map(|b| binding(b.metadata.name, None, b.role_ref, b.subjects))
                .collect(),
            roles: roles
                .into_iter()
                .map(|r| ClusterRoleFacts {
                    name: r.metadata.name.unwrap_or_default(),
                    namespace: r.metadata.namespace.unwrap_or_default(),
                    rules: r.rules.unwrap_or_default().into_iter().map(rule).collect(),
                })
                .collect(),
            role_bindings: role_bindings
                .into_iter()
                .map(|b| {
                    binding(
                        b.metadata.name,
                        b.metadata.namespace,
                        b.role_ref,
                        b.subjects,
                    )
                })
                .collect(),
        })
    }
}

#[async_trait]
impl InstancePods for EksRbac {
    async fn pods_of(
        &self,
        cluster: &str,
        instances: &[String],
    ) -> Result<std::collections::BTreeMap<String, NodePods>, PortError> {
        use super::node_ops::NodeOps;
        let mut out = std::collections::BTreeMap::new();
        if instances.is_empty() {
            return Ok(out);
        }
        let kube = EksKube::connect(&self.sdk, cluster, &self.overrides)
            .await
            .map_err(port_error)?;
        let now = chrono::Utc::now();
        for id in instances {
            let Some(node) = super::drain::node_of(&kube, id, None)
                .await
                .map_err(port_error)?
            else {
                continue;
            };
            let pods = kube.list_pods(&node.name).await.map_err(port_error)?;
            let pods = pods
                .iter()
                .filter(|p| matches!(super::classify(p, now), super::PodClass::Evict { .. }))
                .map(|p| format!("{}/{}", p.pod.namespace, p.pod.name))
                .collect();
            out.insert(
                id.clone(),
                NodePods {
                    node: node.name,
                    pods,
                },
            );
        }
        Ok(out)
    }
}
