//! [`EksKube`]: the [`NodeOps`] implementation over the Kubernetes API of an EKS cluster, from
//! outside the cluster. Endpoint and CA come from eks:DescribeCluster (or the `NODECYCLE_KUBE_*`
//! overrides); requests carry an EKS token signed from the SDK's credentials, cached and
//! replaced before it gets 14 minutes old.

use super::DISRUPTED_TAINT_KEY;
use super::EVENT_COMPONENT;
use super::node_ops::{EvictOutcome, KubeError, NodeEvent, NodeOps};
use super::pods::{NodeInfo, PodInfo, PodRef, taint_value};
use super::token::{self, EksToken};
use ::kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use async_trait::async_trait;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::de::DeserializeOwned;
use serde_json::json;
use std::ops::ControlFlow;
use std::time::{Duration, SystemTime};

/// Page size of list requests.
const PAGE: u32 = 500;
/// Attempts of a read-modify-write on a node before giving up on conflicts.
const CONFLICT_ATTEMPTS: usize = 5;

mod access;
mod wire;

use access::describe_cluster;
pub use access::{
    ClusterAccess, ENV_CA_FILE, ENV_ENDPOINT, ENV_INSECURE, KubeOverrides, is_loopback,
    parse_pem_certificates,
};
pub use wire::{
    StatusBody, eviction_outcome, instance_of_provider_id, node_info, parse_status, pod_info,
};

/// Kubernetes access to one EKS cluster. Cheap to share by reference; the HTTP client and its
/// token are cached and rebuilt when the token ages past [`token::REFRESH_AFTER`].
pub struct EksKube {
    access: ClusterAccess,
    region: String,
    credentials: SharedCredentialsProvider,
    cached: tokio::sync::Mutex<Option<(::kube::Client, EksToken)>>,
}

impl std::fmt::Debug for EksKube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EksKube")
            .field("cluster", &self.access.cluster)
            .field("endpoint", &self.access.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl EksKube {
    /// Resolves endpoint and CA (eks:DescribeCluster unless `overrides` make it unnecessary)
    /// and prepares the client. No Kubernetes request is made yet.
    pub async fn connect(
        sdk: &aws_config::SdkConfig,
        cluster: &str,
        overrides: &KubeOverrides,
    ) -> Result<Self, KubeError> {
        let override_ca = match &overrides.ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|e| {
                KubeError::Config(format!("cannot read {ENV_CA_FILE}={}: {e}", path.display()))
            })?),
            None => None,
        };
        let (endpoint, ca_data) = if overrides.needs_describe() {
            describe_cluster(sdk, cluster).await?
        } else {
            (None, None)
        };
        let access = ClusterAccess::resolve(
            cluster,
            endpoint.as_deref(),
            ca_data.as_deref(),
            overrides,
            override_ca.as_deref(),
        )?;
        tracing::info!(
            cluster,
            endpoint = %access.endpoint,
            endpoint_override = overrides.endpoint.is_some(),
            ca_override = overrides.ca_file.is_some(),
            insecure = access.insecure,
            "kubernetes access resolved"
        );
        Self::new(sdk, access)
    }

    /// Uses `access` as given, signing tokens with the SDK's credentials and region.
    pub fn new(sdk: &aws_config::SdkConfig, access: ClusterAccess) -> Result<Self, KubeError> {
        let region = sdk.region().map(|r| r.as_ref().to_owned()).ok_or_else(|| {
            KubeError::Config("no AWS region configured; set AWS_REGION".to_owned())
        })?;
        let credentials = sdk
            .credentials_provider()
            .ok_or_else(|| KubeError::Aws("no AWS credentials provider configured".to_owned()))?;
        Ok(EksKube {
            access,
            region,
            credentials,
            cached: tokio::sync::Mutex::new(None),
        })
    }

    /// The resolved access (endpoint, CA).
    pub fn access(&self) -> &ClusterAccess {
        &self.access
    }

    /// A client whose token is fresh, rebuilding it when needed.
    pub(crate) async fn client(&self) -> Result<::kube::Client, KubeError> {
        let mut cached = self.cached.lock().await;
        let now = SystemTime::now();
        if let Some((client, token)) = cached.as_ref()
            && token.is_fresh(now)
        {
            return Ok(client.clone());
        }
        let credentials =
            self.credentials.provide_credentials().await.map_err(|e| {
                KubeError::Aws(format!("no AWS credentials for the EKS token: {e}"))
            })?;
        let token = token::token(&credentials, &self.region, &self.access.cluster, now)?;
        let client = build_client(&self.access, &token)?;
        tracing::debug!(cluster = %self.access.cluster, "signed a new EKS token");
        *cached = Some((client.clone(), token));
        Ok(client)
    }

    async fn nodes(&self) -> Result<Api<Node>, KubeError> {
        Ok(Api::all(self.client().await?))
    }

    /// Sends a request and returns the HTTP status and body, whatever the status.
    async fn raw(
        &self,
        operation: &str,
        request: http::Request<Vec<u8>>,
    ) -> Result<(u16, Vec<u8>), KubeError> {
        let client = self.client().await?;
        let response = client
            .send(request.map(::kube::client::Body::from))
            .await
            .map_err(|e| transport(operation, &e))?;
        let code = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| KubeError::Transport {
                operation: operation.to_owned(),
                message: e.to_string(),
            })?
            .to_bytes()
            .to_vec();
        if code == 401 {
            return Err(api_error(operation, code, &body));
        }
        Ok((code, body))
    }

    /// Read-modify-write of a node's `spec` (taints, unschedulable) with the resourceVersion as
    /// precondition, retried on conflicts. `change` returns the new spec fields, or `None` when
    /// nothing needs to change. Returns whether a patch was written.
    async fn modify_node(
        &self,
        name: &str,
        operation: &str,
        change: impl Fn(&Node) -> Option<serde_json::Value> + Send + Sync,
    ) -> Result<bool, KubeError> {
        let nodes = self.nodes().await?;
        for attempt in 1..=CONFLICT_ATTEMPTS {
            let Some(node) = retrying(operation, || async {
                nodes
                    .get_opt(name)
                    .await
                    .map_err(|e| map_error(operation, e))
            })
            .await?
            else {
                return Err(KubeError::NotFound {
                    operation: operation.to_owned(),
                });
            };
            let Some(spec) = change(&node) else {
                return Ok(false);
            };
            let patch = json!({
                "metadata": { "resourceVersion": node.metadata.resource_version },
                "spec": spec,
            });
            // The patch carries the resourceVersion read: repeating it is safe (a repeat after
            // it landed conflicts, and the next read sees nothing left to change).
            let patched = retrying(operation, || async {
                match nodes
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(::kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(e) => Err(map_error(operation, e)),
                }
            })
            .await?;
            if patched {
                return Ok(true);
            }
            tracing::debug!(node = name, attempt, "node changed meanwhile; retrying");
        }
        Err(KubeError::Api {
            operation: operation.to_owned(),
            code: 409,
            reason: "Conflict".to_owned(),
            message: format!("node kept changing during {CONFLICT_ATTEMPTS} attempts; retry later"),
        })
    }
}

/// The metadata merge patch of [`NodeOps::mark`]; `None` when nothing changes.
fn mark_patch(
    scale_down_disabled: Option<bool>,
    exclude_from_lb: Option<bool>,
) -> Option<serde_json::Value> {
    use crate::rotation::marks as m;
    let mut labels = serde_json::Map::new();
    let mut annotations = serde_json::Map::new();
    if let Some(set) = scale_down_disabled {
        annotations.insert(m::SCALE_DOWN_DISABLED.into(), json!(set.then_some("true")));
        annotations.insert(
            m::SCALE_DOWN_DISABLED_BY.into(),
            json!(set.then_some("nodecycle")),
        );
    }
    if let Some(set) = exclude_from_lb {
        labels.insert(m::EXCLUDE_FROM_LB.into(), json!(set.then_some("true")));
        annotations.insert(
            m::EXCLUDE_FROM_LB_BY.into(),
            json!(set.then_some("nodecycle")),
        );
    }
    if annotations.is_empty() {
        return None;
    }
    let mut metadata = json!({ "annotations": annotations });
    if !labels.is_empty() {
        metadata["labels"] = serde_json::Value::Object(labels);
    }
    Some(json!({ "metadata": metadata }))
}

/// Attempts of a Kubernetes call that failed transiently (429 from API priority and fairness,
/// 5xx, connection errors) before its error is returned. Evictions are not retried here: their
/// 429 is a PodDisruptionBudget's answer, and the next drain step asks again.
const TRANSIENT_ATTEMPTS: u32 = 3;

/// Runs `call` until it succeeds, fails for a reason that is not transient, or
/// [`TRANSIENT_ATTEMPTS`] are used (waiting 100 ms, then 200 ms, between attempts). Only for
/// calls that are safe to repeat (reads, preconditioned patches, deletes).
async fn retrying<T, F, Fut>(operation: &str, mut call: F) -> Result<T, KubeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, KubeError>>,
{
    let mut wait = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e) if e.kind().is_retryable() && attempt < TRANSIENT_ATTEMPTS => {
                tracing::debug!(operation, attempt, error = %e, "transient Kubernetes error; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Lists `api` with `params`, [`PAGE`] objects a page (each page read with [`retrying`]), and
/// hands each page to `each` until it breaks with an answer (`Some`) or the list ends (`None`).
async fn by_page<K, B>(
    api: &Api<K>,
    params: ListParams,
    operation: &str,
    mut each: impl FnMut(&[K]) -> ControlFlow<B>,
) -> Result<Option<B>, KubeError>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut params = params.limit(PAGE);
    loop {
        let page = retrying(operation, || async {
            api.list(&params).await.map_err(|e| map_error(operation, e))
        })
        .await?;
        if let ControlFlow::Break(answer) = each(&page.items) {
            return Ok(Some(answer));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(None),
        }
    }
}

/// Every object of the list ([`by_page`]) that `keep` maps to a value, in order.
async fn list_all<K, T>(
    api: &Api<K>,
    params: ListParams,
    operation: &str,
    mut keep: impl FnMut(&K) -> Option<T>,
) -> Result<Vec<T>, KubeError>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    by_page(api, params, operation, |page| {
        out.extend(page.iter().filter_map(&mut keep));
        ControlFlow::<std::convert::Infallible>::Continue(())
    })
    .await?;
    Ok(out)
}

fn build_client(access: &ClusterAccess, token: &EksToken) -> Result<::kube::Client, KubeError> {
    let config_error = |e: &dyn std::fmt::Display| {
        KubeError::Config(format!("Kubernetes client for {}: {e}", access.endpoint))
    };
    let mut config = ::kube::Config::new(access.endpoint.clone());
    config.root_cert = (!access.ca.is_empty()).then(|| access.ca.clone());
    config.accept_invalid_certs = access.insecure;
    // 429 is an answer (a PodDisruptionBudget blocks), never retried behind our back.
    config.default_retry = false;
    config.connect_timeout = Some(Duration::from_secs(5));
    config.read_timeout = Some(Duration::from_secs(30));
    config.reset_reader_on_write = true;
    config.write_timeout = Some(Duration::from_secs(30));
    let mut bearer = http::HeaderValue::from_str(&format!("Bearer {}", token.expose()))
        .map_err(|e| config_error(&e))?;
    bearer.set_sensitive(true);
    config.headers.push((http::header::AUTHORIZATION, bearer));
    // One crypto provider for the process: aws-lc-rs, shared with the AWS SDK (no ring).
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    ::kube::Client::try_from(config).map_err(|e| config_error(&e))
}

/// `builder` with a JSON `body` (content type and accept JSON); a request that cannot be built
/// is a transport error of `operation`.
fn json_request(
    builder: http::request::Builder,
    body: &serde_json::Value,
    operation: &str,
) -> Result<http::Request<Vec<u8>>, KubeError> {
    builder
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(body.to_string().into_bytes())
        .map_err(|e| KubeError::Transport {
            operation: operation.to_string(),
            message: e.to_string(),
        })
}

/// A JSON request of `method` on pod `pod`, or on its subresource `sub` (`/eviction`; empty for
/// the pod itself).
fn pod_request(
    method: http::Method,
    pod: &PodRef,
    sub: &str,
    body: &serde_json::Value,
    operation: &str,
) -> Result<http::Request<Vec<u8>>, KubeError> {
    let uri = format!(
        "/api/v1/namespaces/{}/pods/{}{sub}",
        pod.namespace, pod.name
    );
    json_request(
        http::Request::builder().method(method).uri(uri),
        body,
        operation,
    )
}

fn transport(operation: &str, e: &::kube::Error) -> KubeError {
    KubeError::Transport {
        operation: operation.to_owned(),
        message: e.to_string(),
    }
}

fn map_error(operation: &str, e: ::kube::Error) -> KubeError {
    match e {
        ::kube::Error::Api(status) if status.code == 404 => KubeError::NotFound {
            operation: operation.to_owned(),
        },
        ::kube::Error::Api(status) => KubeError::Api {
            operation: operation.to_owned(),
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
        other => transport(operation, &other),
    }
}

/// A Status body (or whatever the server sent) as a [`KubeError::Api`].
fn api_error(operation: &str, code: u16, body: &[u8]) -> KubeError {
    let status = parse_status(body);
    KubeError::Api {
        operation: operation.to_owned(),
        code,
        reason: status.reason,
        message: status.message,
    }
}

#[async_trait]
impl NodeOps for EksKube {
    async fn find_node(&self, instance_id: &str) -> Result<Option<NodeInfo>, KubeError> {
        let nodes = self.nodes().await?;
        let operation = format!("list nodes (looking for instance {instance_id})");
        let find = |page: &[Node]| match page
            .iter()
            .map(node_info)
            .find(|n| instance_of_provider_id(&n.provider_id) == Some(instance_id))
        {
            Some(found) => ControlFlow::Break(found),
            None => ControlFlow::Continue(()),
        };
        by_page(&nodes, ListParams::default(), &operation, find).await
    }

    async fn list_nodes(&self) -> Result<Vec<NodeInfo>, KubeError> {
        let nodes = self.nodes().await?;
        list_all(&nodes, ListParams::default(), "list nodes", |n| {
            Some(node_info(n))
        })
        .await
    }

    async fn get_node(&self, name: &str) -> Result<Option<NodeInfo>, KubeError> {
        let operation = format!("get node {name}");
        let nodes = self.nodes().await?;
        let node = retrying(&operation, || async {
            nodes
                .get_opt(name)
                .await
                .map_err(|e| map_error(&operation, e))
        })
        .await?;
        Ok(node.as_ref().map(node_info))
    }

    async fn cordon(&self, node: &str, reason: &str) -> Result<bool, KubeError> {
        let value = taint_value(reason);
        self.modify_node(node, &format!("cordon node {node}"), |current| {
            let spec = current.spec.clone().unwrap_or_default();
            let mut taints = spec.taints.unwrap_or_default();
            let has_taint = taints.iter().any(|t| t.key == DISRUPTED_TAINT_KEY);
            if spec.unschedulable == Some(true) && has_taint {
                return None;
            }
            if !has_taint {
                taints.push(k8s_openapi::api::core::v1::Taint {
                    key: DISRUPTED_TAINT_KEY.to_owned(),
                    value: Some(value.clone()),
                    effect: "NoSchedule".to_owned(),
                    time_added: None,
                });
            }
            Some(json!({ "unschedulable": true, "taints": taints }))
        })
        .await
    }

    async fn undo_cordon(&self, node: &str, uncordon: bool) -> Result<bool, KubeError> {
        let result = self
            .modify_node(node, &format!("uncordon node {node}"), |current| {
                let spec = current.spec.clone().unwrap_or_default();
                let taints = spec.taints.unwrap_or_default();
                let kept: Vec<_> = taints
                    .iter()
                    .filter(|t| t.key != DISRUPTED_TAINT_KEY)
                    .cloned()
                    .collect();
                let unschedulable = spec.unschedulable == Some(true);
                if kept.len() == taints.len() && !(uncordon && unschedulable) {
                    return None;
                }
                let mut patch = json!({ "taints": kept });
                if uncordon {
                    patch["unschedulable"] = json!(false);
                }
                Some(patch)
            })
            .await;
        match result {
            Err(KubeError::NotFound { .. }) => Ok(false),
            other => other,
        }
    }

    async fn prefer_elsewhere(&self, node: &str, on: bool) -> Result<bool, KubeError> {
        use crate::rotation::marks::{AUTOSCALER_DELETING_TAINT, REPLACING_TAINT};
        let result = self
            .modify_node(
                node,
                &format!("taint node {node} {REPLACING_TAINT}"),
                |current| {
                    let spec = current.spec.clone().unwrap_or_default();
                    let mut taints = spec.taints.unwrap_or_default();
                    let has = taints.iter().any(|t| t.key == REPLACING_TAINT);
                    // Cluster Autoscaler took the node since the pass read it: it is CA's now.
                    let ca = taints.iter().any(|t| t.key == AUTOSCALER_DELETING_TAINT);
                    if has == on || ca {
                        return None;
                    }
                    if on {
                        taints.push(k8s_openapi::api::core::v1::Taint {
                            key: REPLACING_TAINT.to_owned(),
                            value: Some("rollout".to_owned()),
                            effect: "PreferNoSchedule".to_owned(),
                            time_added: None,
                        });
                    } else {
                        taints.retain(|t| t.key != REPLACING_TAINT);
                    }
                    Some(json!({ "taints": taints }))
                },
            )
            .await;
        match result {
            Err(KubeError::NotFound { .. }) => Ok(false),
            other => other,
        }
    }

    async fn mark(
        &self,
        node: &str,
        scale_down_disabled: Option<bool>,
        exclude_from_lb: Option<bool>,
    ) -> Result<bool, KubeError> {
        let Some(patch) = mark_patch(scale_down_disabled, exclude_from_lb) else {
            return Ok(false);
        };
        let operation = format!("mark node {node}");
        let nodes = self.nodes().await?;
        // A merge patch of named keys only: repeating it is harmless, other keys stay.
        retrying(&operation, || async {
            match nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => Ok(true),
                Err(::kube::Error::Api(status)) if status.code == 404 => Ok(false),
                Err(e) => Err(map_error(&operation, e)),
            }
        })
        .await
    }

    async fn list_pods(&self, node: &str) -> Result<Vec<PodInfo>, KubeError> {
        let pods: Api<Pod> = Api::all(self.client().await?);
        let operation = format!("list pods on node {node}");
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        list_all(&pods, params, &operation, |p| Some(pod_info(p))).await
    }

    async fn list_all_pods(&self) -> Result<Vec<(String, PodInfo)>, KubeError> {
        let pods: Api<Pod> = Api::all(self.client().await?);
        // Bound pods only: pending pods on no node do not weigh on any node's disruption.
        // Finished pods neither (a drain skips them, release health counts no start of
        // theirs): filtered out by the API server, fewer pages in a large cluster.
        let params = ListParams::default()
            .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed");
        list_all(&pods, params, "list pods of the cluster", |p| {
            let node = p.spec.as_ref()?.node_name.clone()?;
            Some((node, pod_info(p)))
        })
        .await
    }

    async fn sandbox_failures(&self) -> Result<std::collections::BTreeSet<String>, KubeError> {
        let events: Api<Event> = Api::all(self.client().await?);
        let params =
            ListParams::default().fields("involvedObject.kind=Pod,reason=FailedCreatePodSandBox");
        let uids = list_all(&events, params, "list pod sandbox failures", |e| {
            e.involved_object.uid.clone()
        })
        .await?;
        Ok(uids.into_iter().collect())
    }

    async fn evict(&self, pod: &PodRef) -> Result<EvictOutcome, KubeError> {
        let operation = format!("evict pod {pod}");
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": { "name": pod.name, "namespace": pod.namespace },
            "deleteOptions": { "preconditions": { "uid": pod.uid } },
        });
        let request = pod_request(http::Method::POST, pod, "/eviction", &body, &operation)?;
        let (code, body) = self.raw(&operation, request).await?;
        Ok(eviction_outcome(code, &body))
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<bool, KubeError> {
        let operation = format!("delete pod {pod}");
        let body = json!({
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": { "uid": pod.uid },
        });
        // Preconditioned on the pod's uid: repeating it is safe.
        retrying(&operation, || async {
            let request = pod_request(http::Method::DELETE, pod, "", &body, &operation)?;
            let (code, body) = self.raw(&operation, request).await?;
            match code {
                200..=299 => Ok(true),
                404 | 409 => Ok(false),
                _ => Err(api_error(&operation, code, &body)),
            }
        })
        .await
    }

    async fn delete_node(&self, node: &str) -> Result<bool, KubeError> {
        let operation = format!("delete node {node}");
        let nodes = self.nodes().await?;
        retrying(&operation, || async {
            match nodes.delete(node, &DeleteParams::default()).await {
                Ok(_) => Ok(true),
                Err(e) => match map_error(&operation, e) {
                    KubeError::NotFound { .. } => Ok(false),
                    other => Err(other),
                },
            }
        })
        .await
    }

    async fn record_event(&self, node: &NodeInfo, event: &NodeEvent) -> Result<(), KubeError> {
        let events: Api<Event> = Api::namespaced(self.client().await?, super::EVENTS_NAMESPACE);
        let now = k8s_openapi::jiff::Timestamp::now();
        let name = format!("{}.{:x}", node.name, now.as_nanosecond());
        let object = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(super::EVENTS_NAMESPACE.to_owned()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Node".to_owned()),
                name: Some(node.name.clone()),
                uid: Some(node.uid.clone()),
                ..ObjectReference::default()
            },
            reason: Some(event.reason.clone()),
            message: Some(event.message.chars().take(1024).collect()),
            type_: Some(event.event_type.as_str().to_owned()),
            source: Some(EventSource {
                component: Some(EVENT_COMPONENT.to_owned()),
                host: None,
            }),
            reporting_component: Some(EVENT_COMPONENT.to_owned()),
            reporting_instance: Some(EVENT_COMPONENT.to_owned()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            ..Event::default()
        };
        let operation = format!("create event {} on node {}", event.reason, node.name);
        events
            .create(&PostParams::default(), &object)
            .await
            .map(|_| ())
            .map_err(|e| map_error(&operation, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn overrides_from_lookup() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(
            KubeOverrides::from_lookup(env(&[])).unwrap(),
            KubeOverrides::default()
        );
        let o = KubeOverrides::from_lookup(env(&[
            (ENV_ENDPOINT, "https://127.0.0.1:6443"),
            (ENV_INSECURE, "TRUE"),
            (ENV_CA_FILE, ""),
        ]))
        .unwrap();
        assert_eq!(o.endpoint.as_deref(), Some("https://127.0.0.1:6443"));
        assert!(o.insecure);
        assert_eq!(o.ca_file, None);
        assert!(!o.needs_describe());
        let err = KubeOverrides::from_lookup(env(&[(ENV_INSECURE, "maybe")])).unwrap_err();
        assert!(err.to_string().contains("NODECYCLE_KUBE_INSECURE"), "{err}");
        let https_only = KubeOverrides {
            endpoint: Some("https://x".into()),
            ..Default::default()
        };
        assert!(https_only.needs_describe());
        let http_proxy = KubeOverrides {
            endpoint: Some("http://127.0.0.1:8001".into()),
            ..Default::default()
        };
        assert!(!http_proxy.needs_describe());
    }

    #[test]
    fn loopback_hosts() {
        for host in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.1.2.3",
            "[::1]",
            "::1",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "10.0.0.1",
            "example.com",
            "localhost.example.com",
            "[::2]",
            "0.0.0.0",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBgDCCASWgAwIBAgIUCoSNUspAqcl53aHNUhf8rUSkPBkwCgYIKoZIzj0EAwIw\nFTETMBEGA1UEAwwKa3ViZXJuZXRlczAeFw0yNjExMjkxNTI3NDJaFw0zNjExMjYx\nNTI3NDJaMBUxEzARBgNVBAMMCmt1YmVybmV0ZXMwWTATBgcqhkjOPQIBBggqhkjO\nPQMBBwNCAARJosI0RdmGMCzan8WsUc2E83srMEx458qiT/Hw1MngU0T4uth+lVku\nrd/1nBoFRJvCdosbJUQH7NIDtaOK3eKEo1MwUTAdBgNVHQ4EFgQUao/viLldf+20\nwhs/P0ibDDhqioYwHwYDVR0jBBgwFoAUao/viLldf+20whs/P0ibDDhqioYwDwYD\nVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNJADBGAiEA6d2Ppq21+O01bHh+JvOI\naYuzvozhT3v3oAs90fvFMggCIQDNFjA3aOUtpp2Wrh9KQxQq136b1ATPxcoPkpSJ\nFv7ndA==\n-----END CERTIFICATE-----\n";

    #[test]
    fn resolve_access() {
        let none = KubeOverrides::default();
        let ca_data = base64::engine::general_purpose::STANDARD.encode(PEM);
        let a = ClusterAccess::resolve(
            "prod",
            Some("https://ABC.gr7.us-east-1.eks.amazonaws.com"),
            Some(&ca_data),
            &none,
            None,
        )
        .unwrap();
        assert_eq!(a.ca.len(), 1);
        assert!(!a.insecure);
        assert_eq!(
            a.endpoint.host(),
            Some("ABC.gr7.us-east-1.eks.amazonaws.com")
        );

        // Endpoint override wins; CA from the file wins.
        let o = KubeOverrides {
            endpoint: Some("https://127.0.0.1:9443".into()),
            ..none.clone()
        };
        let a = ClusterAccess::resolve("prod", Some("https://x"), None, &o, Some(PEM.as_bytes()))
            .unwrap();
        assert_eq!(a.endpoint.port_u16(), Some(9443));
        assert_eq!(a.ca.len(), 1);

        // Insecure: loopback only.
        let o = KubeOverrides {
            endpoint: Some("https://[::1]:6443".into()),
            insecure: true,
            ..none.clone()
        };
        assert!(
            ClusterAccess::resolve("prod", None, None, &o, None)
                .unwrap()
                .insecure
        );
        let o = KubeOverrides {
            endpoint: Some("https://10.0.0.5:6443".into()),
            insecure: true,
            ..none.clone()
        };
        let err = ClusterAccess::resolve("prod", None, None, &o, None).unwrap_err();
        assert!(err.to_string().contains("loopback"), "{err}");
        let o = KubeOverrides {
            insecure: true,
            ..none.clone()
        };
        let err = ClusterAccess::resolve(
            "prod",
            Some("https://abc.eks.amazonaws.com"),
            Some(&ca_data),
            &o,
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");

        // Plain http: loopback only.
        let o = KubeOverrides {
            endpoint: Some("http://127.0.0.1:8001".into()),
            ..none.clone()
        };
        assert!(ClusterAccess::resolve("prod", None, None, &o, None).is_ok());
        let o = KubeOverrides {
            endpoint: Some("http://proxy.internal:8001".into()),
            ..none.clone()
        };
        assert!(ClusterAccess::resolve("prod", None, None, &o, None).is_err());

        // Missing pieces and garbage.
        assert!(ClusterAccess::resolve("prod", None, Some(&ca_data), &none, None).is_err());
        assert!(ClusterAccess::resolve("prod", Some("https://x"), None, &none, None).is_err());
        assert!(
            ClusterAccess::resolve("prod", Some("https://x"), Some("%%%"), &none, None).is_err()
        );
        let not_pem = base64::engine::general_purpose::STANDARD.encode("hello");
        assert!(
            ClusterAccess::resolve("prod", Some("https://x"), Some(&not_pem), &none, None).is_err()
        );
        assert!(
            ClusterAccess::resolve("prod", Some("ftp://x"), Some(&ca_data), &none, None).is_err()
        );
        assert!(
            ClusterAccess::resolve("prod", Some("not a url"), Some(&ca_data), &none, None).is_err()
        );
    }

    #[test]
    fn eviction_answers() {
        let pdb_body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"Cannot evict pod as it would violate the pod's disruption budget.",
            "reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget",
            "message":"The disruption budget web-pdb needs 2 healthy pods and has 2 currently"}]},"code":429}"#;
        assert_eq!(
            eviction_outcome(429, pdb_body),
            EvictOutcome::Blocked {
                pdb: Some("web-pdb".into()),
                message: "Cannot evict pod as it would violate the pod's disruption budget.".into()
            }
        );
        let processing = br#"{"kind":"Status","status":"Failure","reason":"TooManyRequests","message":"Cannot evict pod as it would violate the pod's disruption budget.","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget db is still being processed by the server."}]},"code":429}"#;
        assert!(
            matches!(eviction_outcome(429, processing), EvictOutcome::Blocked { pdb: Some(p), .. } if p == "db")
        );
        let throttled = br#"{"kind":"Status","status":"Failure","reason":"TooManyRequests","message":"Too many requests, please try again later.","code":429}"#;
        assert!(matches!(
            eviction_outcome(429, throttled),
            EvictOutcome::Blocked { pdb: None, .. }
        ));
        assert_eq!(eviction_outcome(201, b"{}"), EvictOutcome::Evicted);
        assert_eq!(eviction_outcome(200, b""), EvictOutcome::Evicted);
        assert_eq!(eviction_outcome(404, b"{}"), EvictOutcome::Gone);
        assert_eq!(eviction_outcome(409, b"{}"), EvictOutcome::Gone);
        let multi = br#"{"kind":"Status","status":"Failure","message":"This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.","reason":"InternalError","code":500}"#;
        assert_eq!(
            eviction_outcome(500, multi),
            EvictOutcome::Rejected {
                code: 500,
                message: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into()
            }
        );
        assert_eq!(
            eviction_outcome(502, b"<html>bad gateway</html>"),
            EvictOutcome::Rejected {
                code: 502,
                message: "<html>bad gateway</html>".into()
            }
        );
    }

    #[test]
    fn provider_ids() {
        assert_eq!(
            instance_of_provider_id("aws:///us-east-1a/i-0abc"),
            Some("i-0abc")
        );
        assert_eq!(instance_of_provider_id("aws:///i-0abc"), Some("i-0abc"));
        assert_eq!(instance_of_provider_id("gce://p/z/i-0abc"), None);
        assert_eq!(
            instance_of_provider_id("aws:///us-east-1a/fargate-ip-10"),
            None
        );
        assert_eq!(instance_of_provider_id(""), None);
    }

    #[test]
    fn pod_conversion() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "kube-proxy-x", "namespace": "kube-system", "uid": "u1",
                "deletionTimestamp": "2024-01-02T03:04:05Z",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "kube-proxy", "uid": "d", "controller": true}
                ]
            },
            "spec": {"containers": [], "terminationGracePeriodSeconds": 5, "priorityClassName": "system-node-critical"},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let info = pod_info(&pod);
        assert_eq!(
            info.pod,
            PodRef {
                namespace: "kube-system".into(),
                name: "kube-proxy-x".into(),
                uid: "u1".into()
            }
        );
        assert_eq!(info.controller_kind.as_deref(), Some("DaemonSet"));
        assert!(!info.mirror);
        assert_eq!(
            info.deletion_timestamp.map(|t| t.timestamp()),
            Some(1_704_164_645)
        );
        assert_eq!(info.grace_period_seconds, Some(5));
        assert!(info.is_critical());

        let mirror: Pod = serde_json::from_value(json!({
            "metadata": {"name": "etcd", "namespace": "kube-system", "uid": "u2",
                "annotations": {"kubernetes.io/config.mirror": "abc"}},
            "spec": {"containers": []}
        }))
        .unwrap();
        let info = pod_info(&mirror);
        assert!(info.mirror);
        assert_eq!(info.phase, "");
    }

    #[test]
    fn node_conversion() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "ip-10-0-0-1.ec2.internal", "uid": "n1"},
            "spec": {"providerID": "aws:///us-east-1a/i-0abc", "unschedulable": true,
                "taints": [{"key": "nodecycle.dev/disrupted", "value": "Drifted", "effect": "NoSchedule"}]}
        }))
        .unwrap();
        let info = node_info(&node);
        assert_eq!(info.provider_id, "aws:///us-east-1a/i-0abc");
        assert!(info.unschedulable);
        assert_eq!(info.disrupted_taint.as_deref(), Some("Drifted"));
    }
}
