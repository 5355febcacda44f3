//! Read-only adapters for `nodecycle doctor` over the SDK clients every function already links:
//! the state table (DynamoDB), node groups, launch templates and lifecycle hooks (Auto Scaling,
//! EKS, EC2), EKS clusters and access entries, and policy documents (SSM).

use async_trait::async_trait;

use super::ssm::Ssm;
use super::{autoscaling, eks, port_error, template};
use crate::inventory::{
    AccessEntryFacts, AsgFacts, ClusterAccessInfo, ClusterFacts, EndpointAccess, GroupInfo,
    HookFacts, ManagedFacts, PolicyDocuments, TableFacts, TableInfo, TemplateFacts,
};
use crate::managed::TemplateRef;
use crate::policy::source::PolicyDocument;
use crate::port::PortError;

/// An EKS resource's tags (cluster, node group) as doctor's facts hold them.
fn tags_of(
    tags: Option<&std::collections::HashMap<String, String>>,
) -> std::collections::BTreeMap<String, String> {
    tags.map(|t| t.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// The read-only view of a deployment, over the shared clients.
#[derive(Clone, Debug)]
pub struct Inventory {
    clients: super::Clients,
}

impl Inventory {
    /// Wraps the clients.
    pub fn new(clients: super::Clients) -> Self {
        Self { clients }
    }
}

/// `Ok(None)` for a not-found error, the error otherwise.
fn absent<T>(e: PortError) -> Result<Option<T>, PortError> {
    if e.is_not_found() { Ok(None) } else { Err(e) }
}

/// Owned `(name, value)` pairs, collected as the facts hold them.
fn owned<'a, C: FromIterator<(String, String)>>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> C {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[async_trait]
impl TableInfo for Inventory {
    async fn table(&self, name: &str) -> Result<Option<TableFacts>, PortError> {
        let db = &self.clients.dynamodb;
        let described = match db.describe_table().table_name(name).send().await {
            Ok(out) => out,
            Err(e) => return absent(port_error("dynamodb:DescribeTable", e)),
        };
        let Some(t) = described.table() else {
            return Ok(None);
        };
        let ttl = db
            .describe_time_to_live()
            .table_name(name)
            .send()
            .await
            .map_err(|e| port_error("dynamodb:DescribeTimeToLive", e))?;
        let ttl = ttl.time_to_live_description();
        Ok(Some(TableFacts {
            status: t
                .table_status()
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            keys: owned(
                t.key_schema()
                    .iter()
                    .map(|k| (k.attribute_name(), k.key_type().as_str())),
            ),
            attribute_types: owned(
                t.attribute_definitions()
                    .iter()
                    .map(|a| (a.attribute_name(), a.attribute_type().as_str())),
            ),
            ttl_status: ttl
                .and_then(|d| d.time_to_live_status())
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            ttl_attribute: ttl.and_then(|d| d.attribute_name()).map(str::to_owned),
        }))
    }
}

#[async_trait]
impl GroupInfo for Inventory {
    async fn auto_scaling_group(&self, name: &str) -> Result<Option<AsgFacts>, PortError> {
        let Some(g) = autoscaling::describe_group(&self.clients.autoscaling, name).await? else {
            return Ok(None);
        };
        let spec = autoscaling::launch_template_of(&g);
        Ok(Some(AsgFacts {
            name: name.to_owned(),
            tags: owned(
                g.tags()
                    .iter()
                    .filter_map(|t| Some((t.key()?, t.value().unwrap_or_default()))),
            ),
            launch_template: spec.map(|s| TemplateRef {
                id: s.launch_template_id().map(str::to_owned),
                name: s.launch_template_name().map(str::to_owned),
                version: s.version().map(str::to_owned),
            }),
            launch_configuration: g.launch_configuration_name().map(str::to_owned),
            terminate_hook_abandon: g
                .instance_lifecycle_policy()
                .and_then(|p| p.retention_triggers())
                .and_then(|t| t.terminate_hook_abandon())
                .map(|a| a.as_str().to_owned()),
            retained: autoscaling::retained_of(&g),
        }))
    }

    async fn lifecycle_hooks(&self, group: &str) -> Result<Vec<HookFacts>, PortError> {
        let out = self
            .clients
            .autoscaling
            .describe_lifecycle_hooks()
            .auto_scaling_group_name(group)
            .send()
            .await
            .map_err(|e| port_error("autoscaling:DescribeLifecycleHooks", e))?;
        Ok(out
            .lifecycle_hooks()
            .iter()
            .map(|h| HookFacts {
                name: h.lifecycle_hook_name().unwrap_or_default().to_owned(),
                transition: h.lifecycle_transition().unwrap_or_default().to_owned(),
                default_result: h.default_result().unwrap_or_default().to_owned(),
            })
            .collect())
    }

    async fn managed_node_group(
        &self,
        cluster: &str,
        name: &str,
    ) -> Result<Option<ManagedFacts>, PortError> {
        let ng = match eks::describe_nodegroup(&self.clients.eks, cluster, name).await {
            Ok(ng) => ng,
            Err(e) => return absent(e),
        };
        Ok(ng.map(|ng| ManagedFacts {
            name: name.to_owned(),
            auto_scaling_group: eks::auto_scaling_group_of(&ng),
            launch_template: ng.launch_template().map(eks::template_ref),
            auto_repair: ng
                .node_repair_config()
                .and_then(|c| c.enabled())
                .unwrap_or(false),
            tags: tags_of(ng.tags()),
        }))
    }

    async fn launch_template(
        &self,
        template: &TemplateRef,
    ) -> Result<Option<TemplateFacts>, PortError> {
        if template.id.is_none() && template.name.is_none() {
            return Ok(None);
        }
        let (id, name) = (template.id.as_deref(), template.name.as_deref());
        let found = match template::describe_template(&self.clients.ec2, id, name).await {
            Ok(found) => found,
            Err(e) => return absent(e),
        };
        Ok(found.map(|t| TemplateFacts {
            id: t.launch_template_id().unwrap_or_default().to_owned(),
            name: t.launch_template_name().unwrap_or_default().to_owned(),
            tags: owned(
                t.tags()
                    .iter()
                    .filter_map(|t| Some((t.key()?, t.value().unwrap_or_default()))),
            ),
        }))
    }
}

#[async_trait]
impl ClusterAccessInfo for Inventory {
    async fn cluster(&self, name: &str) -> Result<Option<ClusterFacts>, PortError> {
        let cluster = match eks::describe_cluster(&self.clients.eks, name).await {
            Ok(c) => c,
            Err(e) => return absent(e),
        };
        Ok(cluster.map(|c| ClusterFacts {
            status: c
                .status()
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            authentication_mode: c
                .access_config()
                .and_then(|a| a.authentication_mode())
                .map(|m| m.as_str().to_owned()),
            endpoint: c
                .resources_vpc_config()
                .map(|v| EndpointAccess {
                    public: v.endpoint_public_access(),
                    private: v.endpoint_private_access(),
                    public_cidrs: v.public_access_cidrs().to_vec(),
                })
                .filter(|e| e.public || e.private),
            tags: tags_of(c.tags()),
        }))
    }

    async fn access_entries(&self, cluster: &str) -> Result<Vec<String>, PortError> {
        self.clients
            .eks
            .list_access_entries()
            .cluster_name(cluster)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| port_error("eks:ListAccessEntries", e))
    }

    async fn access_entry(
        &self,
        cluster: &str,
        principal_arn: &str,
    ) -> Result<Option<AccessEntryFacts>, PortError> {
        let out = match self
            .clients
            .eks
            .describe_access_entry()
            .cluster_name(cluster)
            .principal_arn(principal_arn)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => return absent(port_error("eks:DescribeAccessEntry", e)),
        };
        Ok(out.access_entry().map(|e| AccessEntryFacts {
            principal_arn: e.principal_arn().unwrap_or(principal_arn).to_owned(),
            kubernetes_groups: e.kubernetes_groups().to_vec(),
            entry_type: e.r#type().unwrap_or("STANDARD").to_owned(),
        }))
    }
}

#[async_trait]
impl PolicyDocuments for Ssm {
    async fn under(&self, prefix: &str) -> Result<Vec<PolicyDocument>, PortError> {
        Ok(self
            .parameters_by_path(prefix)
            .await?
            .into_iter()
            .map(|p| PolicyDocument::parameter(prefix, p.name, p.value))
            .collect())
    }
}

#[async_trait]
impl crate::inventory::PoolFindings for Inventory {
    async fn findings(
        &self,
        table: &str,
        pool: &str,
    ) -> Result<Option<crate::deprecation::Findings>, PortError> {
        let store = super::dynamodb::Table::new(self.clients.dynamodb.clone(), table);
        let record = crate::state::Repository::new(std::sync::Arc::new(store))
            .pool(pool)
            .await?;
        Ok(record.and_then(|r| r.findings))
    }
}
