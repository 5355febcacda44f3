//! What the API's answers mean: Status bodies, eviction outcomes, and the node and pod values
//! the rest of nodecycle sees (pure conversions).

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::kube::DISRUPTED_TAINT_KEY;
use crate::kube::node_ops::EvictOutcome;
use crate::kube::pods::{MIRROR_POD_ANNOTATION, NodeInfo, PodInfo, PodRef};
use crate::promotion::health::{Condition, HEALTH_CONDITIONS, pod_failure};

/// The parts of a `metav1.Status` body a drain needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatusBody {
    /// `reason`, e.g. `TooManyRequests`.
    pub reason: String,
    /// `message` (or the raw body when it is not a Status).
    pub message: String,
    /// Name of the PodDisruptionBudget from a `DisruptionBudget` cause.
    pub pdb: Option<String>,
}

/// Parses a Status body; a non-JSON body becomes the message (trimmed, at most 300 chars).
pub fn parse_status(body: &[u8]) -> StatusBody {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        let text = String::from_utf8_lossy(body);
        return StatusBody {
            message: text.trim().chars().take(300).collect(),
            ..StatusBody::default()
        };
    };
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let causes = value["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let pdb = causes
        .iter()
        .filter(|c| c["reason"] == "DisruptionBudget" || c["type"] == "DisruptionBudget")
        .find_map(|c| pdb_name_from_cause(c["message"].as_str().unwrap_or_default()));
    StatusBody {
        reason: text(&value["reason"]),
        message: text(&value["message"]),
        pdb,
    }
}

/// `The disruption budget <name> needs 2 healthy pods and has 2 currently` (or `… is still being
/// processed by the server.`) → `<name>`.
fn pdb_name_from_cause(message: &str) -> Option<String> {
    let rest = message.strip_prefix("The disruption budget ")?;
    let name = rest.split_whitespace().next()?;
    (!name.is_empty()).then(|| name.to_owned())
}

/// Classifies the answer of the Eviction API.
pub fn eviction_outcome(code: u16, body: &[u8]) -> EvictOutcome {
    match code {
        200..=299 => EvictOutcome::Evicted,
        404 | 409 => EvictOutcome::Gone,
        429 => {
            let status = parse_status(body);
            EvictOutcome::Blocked {
                pdb: status.pdb,
                message: status.message,
            }
        }
        _ => EvictOutcome::Rejected {
            code,
            message: parse_status(body).message,
        },
    }
}

/// The instance id of an AWS providerID `aws:///<az>/<instance-id>`.
pub fn instance_of_provider_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    let id = rest.rsplit('/').next()?;
    id.starts_with("i-").then_some(id)
}

fn to_chrono(time: &Time) -> Option<DateTime<Utc>> {
    let nanos = u32::try_from(time.0.subsec_nanosecond()).unwrap_or(0);
    DateTime::from_timestamp(time.0.as_second(), nanos)
}

/// The drain's view of a Node.
pub fn node_info(node: &Node) -> NodeInfo {
    use crate::rotation::marks as m;
    let spec = node.spec.as_ref();
    let annotation = |k: &str| {
        node.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    let label = |k: &str| node.metadata.labels.as_ref().and_then(|l| l.get(k));
    let marks = crate::fleet::NodeMarks {
        autoscaler_deleting: spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == m::AUTOSCALER_DELETING_TAINT)),
        scale_down_disabled: annotation(m::SCALE_DOWN_DISABLED) == Some("true"),
        scale_down_disabled_by_nodecycle: annotation(m::SCALE_DOWN_DISABLED_BY).is_some(),
        lb_excluded: label(m::EXCLUDE_FROM_LB).is_some(),
        lb_excluded_by_nodecycle: annotation(m::EXCLUDE_FROM_LB_BY).is_some(),
        do_not_repair: annotation(crate::repair::DO_NOT_REPAIR) == Some("true"),
        replacing: spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == m::REPLACING_TAINT)),
    };
    NodeInfo {
        marks,
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        provider_id: spec.and_then(|s| s.provider_id.clone()).unwrap_or_default(),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        disrupted_taint: spec
            .and_then(|s| s.taints.as_ref())
            .and_then(|taints| taints.iter().find(|t| t.key == DISRUPTED_TAINT_KEY))
            .map(|t| t.value.clone().unwrap_or_default()),
        ready: node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        created: node
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(to_chrono),
        conditions: node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .filter(|c| HEALTH_CONDITIONS.contains(&c.type_.as_str()))
                    .map(|c| Condition {
                        kind: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        since: c.last_transition_time.as_ref().and_then(to_chrono),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The first start failure ([`pod_failure`]) a container or init container of `pod` waits
/// with, if any.
fn start_failure(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        .find_map(pod_failure)
        .map(str::to_owned)
}

/// The drain's view of a Pod.
pub fn pod_info(pod: &Pod) -> PodInfo {
    let meta = &pod.metadata;
    let owners = meta.owner_references.as_deref().unwrap_or_default();
    let controller = owners.iter().find(|o| o.controller == Some(true));
    let mirror = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
        || controller.is_some_and(|o| o.kind == "Node");
    PodInfo {
        pod: PodRef {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
        },
        phase: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
        controller_kind: controller.map(|o| o.kind.clone()),
        mirror,
        deletion_timestamp: meta.deletion_timestamp.as_ref().and_then(to_chrono),
        grace_period_seconds: pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds),
        priority_class: pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.clone()),
        start_failure: start_failure(pod),
        opt_out: crate::fleet::OptOut::of(
            &format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            ),
            |k| {
                meta.annotations
                    .as_ref()
                    .and_then(|a| a.get(k))
                    .map(String::as_str)
            },
            pod.status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .and_then(to_chrono),
        ),
    }
}
