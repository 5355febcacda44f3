//! Plain node and pod values (no Kubernetes client types) and pod classification for a drain.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Annotation the kubelet puts on the API mirror of a static pod.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Priority classes whose pods are evicted last (after every other pod has left), as Karpenter
/// does, so cluster-critical add-ons keep running while the workload moves.
pub const CRITICAL_PRIORITY_CLASSES: [&str; 2] =
    ["system-cluster-critical", "system-node-critical"];

/// How long after its `deletionTimestamp` a terminating pod is considered stuck (its kubelet is
/// gone or a finalizer holds it): it no longer blocks the drain. Karpenter uses one minute; we
/// wait at least the pod's own grace period too (see [`classify`]).
pub const STUCK_TERMINATING_AFTER_SECONDS: i64 = 60;

/// The value of the `nodecycle.dev/disrupted` taint for `reason`: a valid label value (at most
/// 63 characters of `[A-Za-z0-9-_.]`, alphanumeric at both ends). Other characters become `-`;
/// an empty result becomes `Disrupted`.
pub fn taint_value(reason: &str) -> String {
    let mapped: String = reason
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        "Disrupted".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// The node of an instance, as read from the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (Events reference it).
    pub uid: String,
    /// `spec.providerID`, `aws:///<az>/<instance-id>`.
    pub provider_id: String,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// Value of the `nodecycle.dev/disrupted` taint, if the node carries it.
    pub disrupted_taint: Option<String>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// What Cluster Autoscaler and load balancers read on it, and which nodecycle set.
    pub marks: crate::fleet::NodeMarks,
    /// `metadata.creationTimestamp`: when it joined the cluster.
    pub created: Option<DateTime<Utc>>,
    /// Its [`crate::promotion::health::HEALTH_CONDITIONS`] as reported (release health).
    pub conditions: Vec<crate::promotion::health::Condition>,
}

/// Identity of one pod: namespace, name and uid (the uid guards against acting on a pod that was
/// replaced by a new one of the same name, as StatefulSets do).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl fmt::Display for PodRef {
    /// `namespace/name`, as kubectl prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a drain needs to know about one pod bound to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// Namespace, name, uid.
    pub pod: PodRef,
    /// `status.phase` (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`); empty if unset.
    pub phase: String,
    /// Kind of the controlling owner reference (`ownerReferences[controller=true].kind`).
    pub controller_kind: Option<String>,
    /// Whether the pod is the mirror of a static pod (annotation `kubernetes.io/config.mirror`,
    /// or owned by the Node).
    pub mirror: bool,
    /// `metadata.deletionTimestamp`: set once deletion was accepted (eviction or delete); the
    /// pod is leaving and is gone when the API no longer returns it.
    pub deletion_timestamp: Option<DateTime<Utc>>,
    /// `spec.terminationGracePeriodSeconds` (Kubernetes default 30 when unset).
    pub grace_period_seconds: Option<i64>,
    /// `spec.priorityClassName`.
    pub priority_class: Option<String>,
    /// Why it cannot start, when a container (or init container) waits with a start failure
    /// ([`crate::promotion::health::pod_failure`]): release health counts it.
    pub start_failure: Option<String>,
    /// Its opt-out from voluntary disruption ([`crate::fleet::OptOut::of`]), if any.
    pub opt_out: Option<crate::fleet::OptOut>,
}

impl PodInfo {
    /// Whether the pod runs a cluster-critical add-on (evicted after everything else).
    pub fn is_critical(&self) -> bool {
        self.priority_class
            .as_deref()
            .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c))
    }
}

/// Why a drain leaves a pod alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SkipReason {
    /// Owned by a DaemonSet: it would be recreated on the node at once, and it dies with it.
    DaemonSet,
    /// Mirror of a static pod: the API cannot evict it; it dies with the node.
    Mirror,
    /// `Succeeded` or `Failed`: nothing runs any more.
    Finished,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::DaemonSet => "DaemonSet pod",
            SkipReason::Mirror => "mirror (static) pod",
            SkipReason::Finished => "finished pod",
        })
    }
}

/// What a drain does with one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodClass {
    /// Left alone; does not block the drain.
    Skip(SkipReason),
    /// Already terminating (deletion accepted); wait until the API no longer returns it.
    Leaving,
    /// Terminating for more than a minute past its deletion timestamp: its kubelet is not
    /// confirming the deletion. It no longer blocks the drain.
    Stuck,
    /// Must be evicted; `critical` pods go after all others.
    Evict {
        /// Runs a cluster-critical priority class.
        critical: bool,
    },
}

/// Classifies one pod for a drain at time `now`.
///
/// Order matters and follows `kubectl drain` and Karpenter: mirror pods and DaemonSet pods are
/// skipped whatever their state; finished pods need nothing; pods with a deletion timestamp are
/// leaving, and stuck once `now` is more than max([`STUCK_TERMINATING_AFTER_SECONDS`], the pod's
/// grace period) past the deletion timestamp (the API server sets it to the time the pod should
/// be gone; the extra grace tolerates servers that stamp the time of the request instead);
/// everything else is evicted.
pub fn classify(pod: &PodInfo, now: DateTime<Utc>) -> PodClass {
    if pod.mirror {
        return PodClass::Skip(SkipReason::Mirror);
    }
    if pod.controller_kind.as_deref() == Some("DaemonSet") {
        return PodClass::Skip(SkipReason::DaemonSet);
    }
    if matches!(pod.phase.as_str(), "Succeeded" | "Failed") {
        return PodClass::Skip(SkipReason::Finished);
    }
    if let Some(deleted_at) = pod.deletion_timestamp {
        let grace = pod
            .grace_period_seconds
            .unwrap_or(30)
            .max(STUCK_TERMINATING_AFTER_SECONDS);
        let stuck_at = deleted_at + chrono::Duration::seconds(grace);
        return if now > stuck_at {
            PodClass::Stuck
        } else {
            PodClass::Leaving
        };
    }
    PodClass::Evict {
        critical: pod.is_critical(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).single().unwrap()
    }

    fn pod(name: &str) -> PodInfo {
        PodInfo {
            pod: PodRef {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            phase: "Running".into(),
            controller_kind: Some("ReplicaSet".into()),
            mirror: false,
            deletion_timestamp: None,
            grace_period_seconds: Some(30),
            priority_class: None,
            start_failure: None,
            opt_out: None,
        }
    }

    #[test]
    fn classification_table() {
        let now = t(1000);
        let cases: Vec<(&str, PodInfo, PodClass)> = vec![
            (
                "replicaset pod",
                pod("a"),
                PodClass::Evict { critical: false },
            ),
            (
                "bare pod",
                PodInfo {
                    controller_kind: None,
                    ..pod("a")
                },
                PodClass::Evict { critical: false },
            ),
            (
                "statefulset pod",
                PodInfo {
                    controller_kind: Some("StatefulSet".into()),
                    ..pod("a")
                },
                PodClass::Evict { critical: false },
            ),
            (
                "pending pod",
                PodInfo {
                    phase: "Pending".into(),
                    ..pod("a")
                },
                PodClass::Evict { critical: false },
            ),
            (
                "unknown phase",
                PodInfo {
                    phase: String::new(),
                    ..pod("a")
                },
                PodClass::Evict { critical: false },
            ),
            (
                "critical pod",
                PodInfo {
                    priority_class: Some("system-cluster-critical".into()),
                    ..pod("a")
                },
                PodClass::Evict { critical: true },
            ),
            (
                "node-critical pod",
                PodInfo {
                    priority_class: Some("system-node-critical".into()),
                    ..pod("a")
                },
                PodClass::Evict { critical: true },
            ),
            (
                "other priority class",
                PodInfo {
                    priority_class: Some("high".into()),
                    ..pod("a")
                },
                PodClass::Evict { critical: false },
            ),
            (
                "daemonset pod",
                PodInfo {
                    controller_kind: Some("DaemonSet".into()),
                    ..pod("a")
                },
                PodClass::Skip(SkipReason::DaemonSet),
            ),
            (
                "terminating daemonset pod",
                PodInfo {
                    controller_kind: Some("DaemonSet".into()),
                    deletion_timestamp: Some(t(0)),
                    ..pod("a")
                },
                PodClass::Skip(SkipReason::DaemonSet),
            ),
            (
                "mirror pod",
                PodInfo {
                    mirror: true,
                    controller_kind: None,
                    ..pod("a")
                },
                PodClass::Skip(SkipReason::Mirror),
            ),
            (
                "mirror pod even if finished",
                PodInfo {
                    mirror: true,
                    phase: "Succeeded".into(),
                    ..pod("a")
                },
                PodClass::Skip(SkipReason::Mirror),
            ),
            (
                "succeeded pod",
                PodInfo {
                    phase: "Succeeded".into(),
                    ..pod("a")
                },
                PodClass::Skip(SkipReason::Finished),
            ),
            (
                "failed pod",
                PodInfo {
                    phase: "Failed".into(),
                    ..pod("a")
                },
                PodClass::Skip(SkipReason::Finished),
            ),
            (
                "finished and terminating",
                PodInfo {
                    phase: "Failed".into(),
                    deletion_timestamp: Some(t(900)),
                    ..pod("a")
                },
                PodClass::Skip(SkipReason::Finished),
            ),
            (
                "terminating, deadline in the future",
                PodInfo {
                    deletion_timestamp: Some(t(1030)),
                    ..pod("a")
                },
                PodClass::Leaving,
            ),
            (
                "terminating, deadline just past",
                PodInfo {
                    deletion_timestamp: Some(t(990)),
                    ..pod("a")
                },
                PodClass::Leaving,
            ),
            (
                "terminating, exactly one minute past",
                PodInfo {
                    deletion_timestamp: Some(t(940)),
                    ..pod("a")
                },
                PodClass::Leaving,
            ),
            (
                "terminating, more than a minute past",
                PodInfo {
                    deletion_timestamp: Some(t(939)),
                    ..pod("a")
                },
                PodClass::Stuck,
            ),
            (
                "long grace: not stuck one minute past the deletion timestamp",
                PodInfo {
                    deletion_timestamp: Some(t(800)),
                    grace_period_seconds: Some(600),
                    ..pod("a")
                },
                PodClass::Leaving,
            ),
            (
                "long grace: stuck once its grace has passed again",
                PodInfo {
                    deletion_timestamp: Some(t(399)),
                    grace_period_seconds: Some(600),
                    ..pod("a")
                },
                PodClass::Stuck,
            ),
            (
                "critical and terminating",
                PodInfo {
                    priority_class: Some("system-node-critical".into()),
                    deletion_timestamp: Some(t(1000)),
                    ..pod("a")
                },
                PodClass::Leaving,
            ),
        ];
        for (name, p, want) in cases {
            assert_eq!(classify(&p, now), want, "{name}");
        }
    }

    #[test]
    fn taint_values_are_label_values() {
        for (reason, want) in [
            ("Drifted", "Drifted"),
            ("SpotInterruption", "SpotInterruption"),
            ("manual rotation!", "manual-rotation"),
            ("", "Disrupted"),
            ("--", "Disrupted"),
            ("a.b_c-d", "a.b_c-d"),
        ] {
            assert_eq!(taint_value(reason), want, "{reason:?}");
        }
        assert_eq!(taint_value(&"x".repeat(100)).len(), 63);
    }

    #[test]
    fn pod_ref_displays_like_kubectl() {
        assert_eq!(pod("web-1").pod.to_string(), "default/web-1");
    }
}
