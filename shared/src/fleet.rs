//! What the rotator observes about one pool (pure data, built by adapters): the group, its
//! instances joined with EC2 and the Kubernetes nodes (with the recorded rotations, the
//! planner's [`crate::plan::Snapshot`]).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub mod snapshot;

/// Auto Scaling lifecycle state of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Lifecycle {
    /// Launching (`Pending`, `Pending:Wait`, `Pending:Proceed`).
    Pending,
    /// `InService`.
    InService,
    /// Leaving (`Terminating*`, `Terminated`, `Detaching`, `Detached`, `EnteringStandby`, `Standby`).
    Leaving,
    /// Anything else (`Warmed:*`, unknown).
    Other(String),
}

/// The node conditions that say a node is healthy when `True`: `Ready`, those the EKS node
/// monitoring agent posts when it runs on the node, and nodecycle's own [`EC2_STATUS_CHECK`].
pub const HEALTH_CONDITIONS: [&str; 7] = [
    "Ready",
    "KernelReady",
    "NetworkingReady",
    "StorageReady",
    "ContainerRuntimeReady",
    "AcceleratedHardwareReady",
    EC2_STATUS_CHECK,
];

/// The condition nodecycle adds to a node whose instance EC2 reports impaired (an instance or
/// system status check failed, `DescribeInstanceStatus`): `False` since the check's
/// `ImpairedSince`. No kubelet posts it.
pub const EC2_STATUS_CHECK: &str = "EC2StatusCheck";

/// What EC2 says of a running instance that is in trouble (`DescribeInstanceStatus`): its
/// failed status checks and the events scheduled for it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InstanceStatus {
    /// `i-...`.
    pub instance_id: String,
    /// The impaired checks (`instance`, `system`, `attached EBS`), each with since when.
    pub impaired: Vec<(String, Option<DateTime<Utc>>)>,
    /// Events scheduled for it (not completed or cancelled).
    pub events: Vec<ScheduledEvent>,
}

/// An EC2 scheduled event (`DescribeInstanceStatus` `Events`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledEvent {
    /// `instance-reboot`, `system-reboot`, `system-maintenance`, `instance-retirement`,
    /// `instance-stop`.
    pub code: String,
    /// When it may start at the earliest (`NotBefore`).
    pub not_before: Option<DateTime<Utc>>,
}

impl InstanceStatus {
    /// The condition nodecycle adds for a failed status check, if one failed: `False` since
    /// the earliest `ImpairedSince` (without one, no transition time: failing since the node
    /// joined).
    pub fn condition(&self) -> Option<Condition> {
        if self.impaired.is_empty() {
            return None;
        }
        let since = self.impaired.iter().filter_map(|(_, t)| *t).min();
        let checks: Vec<&str> = self.impaired.iter().map(|(c, _)| c.as_str()).collect();
        Some(Condition {
            kind: EC2_STATUS_CHECK.to_string(),
            status: "False".to_string(),
            reason: Some(format!("{} status check impaired", checks.join(" and "))),
            since,
        })
    }
}

/// A node condition as the API reports it (only [`HEALTH_CONDITIONS`] are kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `type` (`Ready`, `KernelReady`, ...).
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// `reason`, when set.
    pub reason: Option<String>,
    /// `lastTransitionTime`, when set.
    pub since: Option<DateTime<Utc>>,
}

impl Condition {
    /// Whether it says the node is unhealthy: `Ready` not `True`, any other condition of
    /// [`HEALTH_CONDITIONS`] `False` (the node monitoring agent's `Unknown` is no verdict).
    pub fn is_bad(&self) -> bool {
        match self.kind.as_str() {
            "Ready" => self.status != "True",
            k if HEALTH_CONDITIONS.contains(&k) => self.status == "False",
            _ => false,
        }
    }
}

/// A pod's own opt-out from voluntary disruption (`karpenter.sh/do-not-disrupt`).
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// nodecycle's own name for the same opt-out.
pub const NODECYCLE_DO_NOT_DISRUPT: &str = "nodecycle.dev/do-not-disrupt";
/// Cluster Autoscaler's opt-out (`"false"`: never evicted for a scale-down).
pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// At most this many characters of an opt-out's value are kept (messages, `status`).
pub const OPT_OUT_VALUE_LIMIT: usize = 64;

/// A pod that keeps its node from voluntary disruption (drift, expiry, repair of a Ready node):
/// which pod, by which annotation and value, and until when (`None`: as long as it carries it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OptOut {
    /// `namespace/name`.
    pub pod: String,
    /// The annotation.
    pub annotation: String,
    /// Its value.
    pub value: String,
    /// When it stops holding (a duration counted from the pod's start); `None`: it holds while
    /// the pod carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

impl OptOut {
    /// The opt-out of pod `pod` (`namespace/name`) from its annotations (`annotation(key)`)
    /// and start time, the longest-holding one when it carries several:
    /// - `karpenter.sh/do-not-disrupt` or `nodecycle.dev/do-not-disrupt`: `"true"` holds;
    ///   a duration (`"30m"`, Karpenter v1.12) holds until that long after the pod started (as
    ///   long as it has not started); `"false"` does not; any other value holds (fail closed:
    ///   the owner meant to protect the pod), and [`OptOut::value`] shows it;
    /// - `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` holds.
    pub fn of<'a>(
        pod: &str,
        annotation: impl Fn(&str) -> Option<&'a str>,
        started: Option<DateTime<Utc>>,
    ) -> Option<OptOut> {
        // Annotation values may be long (256 KB in all): what is shown of one is bounded.
        let make = |key: &str, value: &str, until| OptOut {
            pod: pod.to_string(),
            annotation: key.to_string(),
            value: value.chars().take(OPT_OUT_VALUE_LIMIT).collect(),
            until,
        };
        let mut found: Vec<OptOut> = Vec::new();
        for key in [DO_NOT_DISRUPT, NODECYCLE_DO_NOT_DISRUPT] {
            let Some(value) = annotation(key) else {
                continue;
            };
            let v = value.trim();
            if v.eq_ignore_ascii_case("false") {
                continue;
            }
            let until = match crate::duration::parse(v) {
                Ok(d) => started.and_then(|s| {
                    chrono::Duration::from_std(d)
                        .ok()
                        .and_then(|d| s.checked_add_signed(d))
                }),
                Err(_) => None,
            };
            found.push(make(key, value, until));
        }
        if annotation(SAFE_TO_EVICT).is_some_and(|v| v.trim().eq_ignore_ascii_case("false")) {
            found.push(make(SAFE_TO_EVICT, "false", None));
        }
        found.into_iter().max_by_key(OptOut::reach)
    }

    /// Of `a` and `b`, the one that holds longer (as long as it is carried beats any instant).
    pub fn longer(a: Option<OptOut>, b: Option<&OptOut>) -> Option<OptOut> {
        match (a, b) {
            (Some(a), Some(b)) if b.reach() > a.reach() => Some(b.clone()),
            (Some(a), _) => Some(a),
            (None, b) => b.cloned(),
        }
    }

    fn reach(&self) -> (u8, DateTime<Utc>) {
        self.until.map_or((1, DateTime::<Utc>::MIN_UTC), |u| (0, u))
    }

    /// It still holds at `now`.
    pub fn holds(&self, now: DateTime<Utc>) -> bool {
        self.until.is_none_or(|u| now < u)
    }

    /// `pod ns/name has karpenter.sh/do-not-disrupt: "30m" (until T)`.
    pub fn describe(&self) -> String {
        let until = match self.until {
            Some(u) => format!(
                "until {}",
                u.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            None => "while it carries it".to_string(),
        };
        format!(
            "pod {} has {}: {:?} ({until})",
            self.pod, self.annotation, self.value
        )
    }
}

/// A Kubernetes node as the rotator needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// `metadata.name`.
    pub name: String,
    /// Ready condition is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// Value of the `nodecycle.dev/disrupted` taint, if present (someone is disrupting it).
    pub disrupted: Option<String>,
    /// Pods that would need eviction (not DaemonSet, not mirror, not finished).
    pub evictable_pods: u32,
    /// `evictable_pods` was counted this pass (candidates, and instances a surge may give
    /// back); otherwise it is 0 without meaning "no pods".
    #[serde(default)]
    pub pods_counted: bool,
    /// What Cluster Autoscaler and load balancers read on the node (taints, annotation,
    /// label), and which of them nodecycle set.
    #[serde(default)]
    pub marks: NodeMarks,
    /// When it joined (`metadata.creationTimestamp`), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<DateTime<Utc>>,
    /// Its [`HEALTH_CONDITIONS`] as reported (release health, repair).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// A pod on it opted out of voluntary disruption (the longest-holding one), when its pods
    /// were counted ([`Self::pods_counted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opt_out: Option<OptOut>,
}

impl NodeStatus {
    /// A Ready, schedulable node with one pod to evict and no marks (what the forecast and
    /// the property tests assume of a node in service).
    pub fn ready(name: String) -> NodeStatus {
        NodeStatus {
            name,
            ready: true,
            unschedulable: false,
            disrupted: None,
            evictable_pods: 1,
            pods_counted: false,
            marks: Default::default(),
            joined: None,
            conditions: Vec::new(),
            opt_out: None,
        }
    }
}

/// The node's marks shared with Cluster Autoscaler (CA) and load balancer controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeMarks {
    /// Carries CA's `ToBeDeletedByClusterAutoscaler` taint: CA is removing the node.
    pub autoscaler_deleting: bool,
    /// Annotated `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`.
    pub scale_down_disabled: bool,
    /// nodecycle set that annotation (its marker annotation is present): only then does
    /// nodecycle remove it.
    pub scale_down_disabled_by_nodecycle: bool,
    /// Labelled `node.kubernetes.io/exclude-from-external-load-balancers`.
    pub lb_excluded: bool,
    /// nodecycle set that label (its marker annotation is present).
    pub lb_excluded_by_nodecycle: bool,
    /// Annotated `nodecycle.dev/do-not-repair: "true"` ([`crate::repair::DO_NOT_REPAIR`]):
    /// never repaired.
    #[serde(default)]
    pub do_not_repair: bool,
    /// Carries nodecycle's `nodecycle.dev/replacing:PreferNoSchedule` taint
    /// ([`crate::rotation::marks::REPLACING_TAINT`]): the rollout replaces it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replacing: bool,
}

/// One instance of the group: as Auto Scaling and EC2 report it ([`GroupOps::describe`], with
/// `node: None`), then joined with its Kubernetes node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// `i-...`.
    pub instance_id: String,
    /// Availability zone.
    pub availability_zone: String,
    /// The AMI it runs (EC2 DescribeInstances), `None` if unknown.
    pub image_id: Option<String>,
    /// EC2 launch time.
    pub launch_time: DateTime<Utc>,
    /// Auto Scaling lifecycle.
    pub lifecycle: Lifecycle,
    /// Its Kubernetes node, matched by providerID; `None` = not registered.
    pub node: Option<NodeStatus>,
}

impl Member {
    /// Registered, Ready and in service: counts toward a budget's `total`.
    pub fn is_ready(&self) -> bool {
        self.lifecycle == Lifecycle::InService && self.node.as_ref().is_some_and(|n| n.ready)
    }

    /// Known to run no workload: never registered as a node, its evictable pods counted this
    /// pass and none found, or (not counted) its node not Ready. The only instances nodecycle
    /// terminates without draining them.
    pub fn podless(&self) -> bool {
        match &self.node {
            None => true,
            Some(n) if n.pods_counted => n.evictable_pods == 0,
            Some(n) => !n.ready,
        }
    }
}

/// The Auto Scaling group (or managed node group's group) of a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    /// Group name.
    pub name: String,
    /// `MinSize`.
    pub min_size: i32,
    /// `MaxSize`.
    pub max_size: i32,
    /// `DesiredCapacity`.
    pub desired_capacity: i32,
    /// The AMI the group's current launch template version launches, if known.
    pub launch_template_image: Option<String>,
    /// Processes suspended on the group (`SuspendedProcesses`, e.g. `AZRebalance`).
    #[serde(default)]
    pub suspended_processes: Vec<String>,
    /// Tagged `nodecycle.dev/do-not-repair=true` ([`crate::repair::DO_NOT_REPAIR`]): none of
    /// its nodes is repaired.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub do_not_repair: bool,
    /// Instances Auto Scaling retained (`Terminating:Retained`, [`crate::retain`]): their
    /// terminate lifecycle action was abandoned and the group's instance lifecycle policy
    /// retains. They are members too, as [`Lifecycle::Leaving`]: no capacity, never rotated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retained: Vec<String>,
}

/// A group's latest scaling activity that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchProblem {
    /// The activity's description and status message, as Auto Scaling gives them.
    pub message: String,
    /// When the activity started (`None`: not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
}

impl LaunchProblem {
    /// The launch failed for lack of capacity: EC2's and Auto Scaling's capacity errors
    /// (`InsufficientInstanceCapacity`, `InsufficientCapacity`,
    /// `InsufficientReservedInstanceCapacity`, Auto Scaling's "We currently do not have
    /// sufficient m5.large capacity in the Availability Zone you requested", a full capacity
    /// reservation or Capacity Block: `ReservationCapacityExceeded`), in any case and spacing.
    /// Waiting does not bring such capacity soon.
    pub fn insufficient_capacity(&self) -> bool {
        let squashed: String = self
            .message
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase();
        (squashed.contains("sufficient") && squashed.contains("capacity"))
            || squashed.contains("reservationcapacityexceeded")
    }
}

impl fmt::Display for LaunchProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Pool-level state that gates rotation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gates {
    /// The AMI nodes should run; `None` = unresolved (rotate nothing).
    pub desired_ami: Option<String>,
    /// Operator pause (or policy `paused`), with its reason.
    pub paused: Option<String>,
    /// Halted after a failed rotation, with its reason.
    pub halted: Option<String>,
    /// The deployment's stop switch is on ([`crate::stop`]), with its message: every pool
    /// holds.
    #[serde(default)]
    pub stopped: Option<String>,
}

/// A group's sizes, read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// `DesiredCapacity`.
    pub desired: i32,
    /// `MinSize`.
    pub min: i32,
    /// `MaxSize`.
    pub max: i32,
}

/// Auto Scaling group operations (self-managed pools); many groups at once through
/// [`crate::fleet::snapshot::GroupSnapshots`].
#[async_trait::async_trait]
pub trait GroupOps: crate::fleet::snapshot::GroupSnapshots + Send + Sync {
    /// The group and its instances (joined with EC2 for image and launch time; `node` is
    /// `None`: the caller joins them with Kubernetes).
    async fn describe(&self, group: &str) -> Result<(Group, Vec<Member>), crate::port::PortError>;
    /// The group's desired capacity now (a fresh read; only the group, not its instances).
    async fn desired_capacity(&self, group: &str) -> Result<i32, crate::port::PortError> {
        Ok(self.sizes(group).await?.desired)
    }
    /// The group's sizes now (a fresh read; only the group, not its instances).
    async fn sizes(&self, group: &str) -> Result<Sizes, crate::port::PortError> {
        let g = self.describe(group).await?.0;
        Ok(Sizes {
            desired: g.desired_capacity,
            min: g.min_size,
            max: g.max_size,
        })
    }
    /// Sets `MaxSize` only (UpdateAutoScalingGroup); everything else of the group stays.
    async fn set_max_size(&self, group: &str, max: i32) -> Result<(), crate::port::PortError>;
    /// Suspends these scaling processes (SuspendProcesses; idempotent).
    async fn suspend_processes(
        &self,
        group: &str,
        processes: &[String],
    ) -> Result<(), crate::port::PortError>;
    /// Resumes these scaling processes (ResumeProcesses; idempotent).
    async fn resume_processes(
        &self,
        group: &str,
        processes: &[String],
    ) -> Result<(), crate::port::PortError>;
    /// Why the group's latest scaling activity did not succeed (DescribeScalingActivities:
    /// the newest activity, when it failed or was cancelled, with its status message and
    /// start time); `None` when it succeeded or is in progress.
    async fn launch_problem(
        &self,
        group: &str,
    ) -> Result<Option<LaunchProblem>, crate::port::PortError>;
    /// Sets the desired capacity to a value (only ever a fresh read plus one: nodecycle never
    /// lowers desired capacity).
    async fn set_desired_capacity(
        &self,
        group: &str,
        desired: i32,
    ) -> Result<(), crate::port::PortError>;
    /// Terminates an instance through the group, decrementing desired capacity when asked.
    /// An instance that is already gone is success.
    async fn terminate_instance(
        &self,
        instance_id: &str,
        decrement: bool,
    ) -> Result<(), crate::port::PortError>;
    /// Makes every new instance of the group launch `image`: a new launch template version from
    /// the one the group uses, with only the image changed (none when it already launches
    /// `image`). A group on `$Latest` needs nothing more; on `$Default` the new version becomes
    /// the template's default; on a pinned version the group (or its mixed instances policy,
    /// overrides kept) is pointed at it. Returns the version number now in use.
    async fn set_image(&self, group: &str, image: &str) -> Result<String, crate::port::PortError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_opt_out_is_read_from_its_annotations_the_longest_winning() {
        let t = |m: i64| {
            DateTime::parse_from_rfc3339("2026-12-05T12:00:00Z")
                .map(|d| d.with_timezone(&Utc))
                .unwrap_or_default()
                + chrono::Duration::minutes(m)
        };
        let of = |pairs: &[(&'static str, &'static str)], started: Option<DateTime<Utc>>| {
            OptOut::of(
                "ns/p",
                |k| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v),
                started,
            )
        };
        // (annotations, started) -> (annotation, until) of the opt-out, if any.
        type Case<'a> = (
            Vec<(&'a str, &'a str)>,
            Option<DateTime<Utc>>,
            Option<(&'a str, Option<DateTime<Utc>>)>,
        );
        let cases: Vec<Case<'_>> = vec![
            (vec![], Some(t(0)), None),
            (
                vec![(DO_NOT_DISRUPT, "true")],
                Some(t(0)),
                Some((DO_NOT_DISRUPT, None)),
            ),
            (vec![(DO_NOT_DISRUPT, "false")], Some(t(0)), None),
            (
                vec![(DO_NOT_DISRUPT, "30m")],
                Some(t(0)),
                Some((DO_NOT_DISRUPT, Some(t(30)))),
            ),
            // Not started yet: a duration holds as long as it has not.
            (
                vec![(DO_NOT_DISRUPT, "30m")],
                None,
                Some((DO_NOT_DISRUPT, None)),
            ),
            // An unreadable value holds (fail closed).
            (
                vec![(DO_NOT_DISRUPT, "soon")],
                Some(t(0)),
                Some((DO_NOT_DISRUPT, None)),
            ),
            (
                vec![(SAFE_TO_EVICT, "false")],
                Some(t(0)),
                Some((SAFE_TO_EVICT, None)),
            ),
            (vec![(SAFE_TO_EVICT, "true")], Some(t(0)), None),
            (
                vec![(NODECYCLE_DO_NOT_DISRUPT, "1h")],
                Some(t(0)),
                Some((NODECYCLE_DO_NOT_DISRUPT, Some(t(60)))),
            ),
            // The longest wins: "as long as carried" beats any instant.
            (
                vec![(DO_NOT_DISRUPT, "30m"), (NODECYCLE_DO_NOT_DISRUPT, "1h")],
                Some(t(0)),
                Some((NODECYCLE_DO_NOT_DISRUPT, Some(t(60)))),
            ),
            (
                vec![(DO_NOT_DISRUPT, "30m"), (SAFE_TO_EVICT, "false")],
                Some(t(0)),
                Some((SAFE_TO_EVICT, None)),
            ),
        ];
        for (pairs, started, want) in cases {
            let got = of(&pairs, started);
            assert_eq!(
                got.as_ref().map(|o| (o.annotation.as_str(), o.until)),
                want,
                "{pairs:?}"
            );
        }
        let o = of(&[(DO_NOT_DISRUPT, "30m")], Some(t(0))).unwrap();
        assert!(o.holds(t(29)) && !o.holds(t(30)));
        assert_eq!(OptOut::longer(None, Some(&o)), Some(o.clone()));
    }

    /// A member serializes as one flat camelCase object: the instance's fields, then its node.
    #[test]
    fn member_serialized_shape() {
        let member = Member {
            instance_id: "i-1".into(),
            availability_zone: "eu-west-1a".into(),
            image_id: Some("ami-1".into()),
            launch_time: "2026-01-02T03:04:05Z".parse().unwrap(),
            lifecycle: Lifecycle::Other("Warmed:Pending".into()),
            node: Some(NodeStatus::ready("n-1".into())),
        };
        let json = serde_json::json!({
            "instanceId": "i-1",
            "availabilityZone": "eu-west-1a",
            "imageId": "ami-1",
            "launchTime": "2026-01-02T03:04:05Z",
            "lifecycle": {"Other": "Warmed:Pending"},
            "node": {
                "name": "n-1",
                "ready": true,
                "unschedulable": false,
                "disrupted": null,
                "evictablePods": 1,
                "podsCounted": false,
                "marks": {
                    "autoscalerDeleting": false,
                    "scaleDownDisabled": false,
                    "scaleDownDisabledByNodecycle": false,
                    "lbExcluded": false,
                    "lbExcludedByNodecycle": false,
                    "doNotRepair": false
                }
            }
        });
        let serialized = serde_json::to_value(&member).unwrap();
        assert_eq!(serialized, json);
        assert_eq!(
            serde_json::to_string(&member).unwrap(),
            serde_json::to_string(&json).unwrap(),
            "same key order"
        );
        assert_eq!(serde_json::from_value::<Member>(json).unwrap(), member);
        let unregistered = serde_json::json!({
            "instanceId": "i-2",
            "availabilityZone": "eu-west-1b",
            "imageId": null,
            "launchTime": "2026-01-02T03:04:05Z",
            "lifecycle": "InService",
            "node": null
        });
        let back: Member = serde_json::from_value(unregistered.clone()).unwrap();
        assert!(back.podless());
        assert_eq!(serde_json::to_value(&back).unwrap(), unregistered);
    }

    #[test]
    fn a_launch_out_of_capacity_is_told_from_other_failures() {
        let cases = [
            (
                "Launching a new EC2 instance.  Status Reason: We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested (us-east-2a). Launching EC2 instance failed.",
                true,
            ),
            (
                "Launching a new EC2 instance. Status Reason: InsufficientInstanceCapacity",
                true,
            ),
            ("Status Reason: Insufficient capacity.", true),
            (
                "Launching a new EC2 instance. Status Reason: ReservationCapacityExceeded",
                true,
            ),
            (
                "Launching a new EC2 instance. Status Reason: The image id '[ami-1]' does not exist. Launching EC2 instance failed.",
                false,
            ),
            (
                "Launching a new EC2 instance. Status Reason: You are not authorized to perform this operation.",
                false,
            ),
            ("scaling activity: Cancelled", false),
        ];
        for (message, want) in cases {
            let p = LaunchProblem {
                message: message.into(),
                at: None,
            };
            assert_eq!(p.insufficient_capacity(), want, "{message}");
        }
    }
}
