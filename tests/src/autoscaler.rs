//! The fake cloud's Cluster Autoscaler actor (`tests/fakecloud/autoscaler.py`) and the Auto
//! Scaling records beside it (`tests/fakecloud/asg_fidelity.py`): CA acts only when the test
//! calls it, between rotator passes.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::fakecloud::{Control, FakeCloud};

/// Cluster Autoscaler for one Auto Scaling group whose nodes are in one cluster's stand-in.
#[derive(Debug, Clone)]
pub struct ClusterAutoscaler {
    control: Control,
    group: String,
    cluster: String,
}

/// One thing the actor did (or declined to do), as `ca_log` and every op answer it.
#[derive(Debug, Clone, Deserialize)]
pub struct CaAction {
    /// `scaleUp`, `noScaleUp`, `taint`, `draining`, `scaleDown`, `noScaleDown`,
    /// `scaleDownAborted`.
    pub action: String,
    /// The node acted on.
    #[serde(default)]
    pub node: Option<String>,
    /// Its instance.
    #[serde(default)]
    pub instance: Option<String>,
    /// Desired capacity before.
    #[serde(default)]
    pub from: Option<i32>,
    /// Desired capacity after.
    #[serde(default)]
    pub to: Option<i32>,
    /// Pods still on the node (draining).
    #[serde(default)]
    pub remaining: Vec<String>,
    /// Why.
    pub reason: String,
}

/// A change of a group's desired capacity, with who made it.
#[derive(Debug, Clone, Deserialize)]
pub struct CapacityChange {
    /// The group.
    pub group: String,
    /// `SetDesiredCapacity`, `TerminateInstanceInAutoScalingGroup`, `UpdateAutoScalingGroup`.
    pub op: String,
    /// Before.
    pub from: i32,
    /// After.
    pub to: i32,
    /// `api` (an AWS call: nodecycle in these tests) or `cluster-autoscaler`.
    pub by: String,
}

/// An instance terminated, with the workload pods bound to its node at that moment.
#[derive(Debug, Clone, Deserialize)]
pub struct Termination {
    /// The instance.
    pub instance: String,
    /// Its group, if it was in one.
    pub group: Option<String>,
    /// Its AMI.
    pub image: Option<String>,
    /// Its node in the stand-in.
    pub node: Option<String>,
    /// Workload pods (not DaemonSet, not mirror, not finished) bound to the node then.
    pub pods: Vec<String>,
    /// The operation that terminated it (`TerminateInstanceInAutoScalingGroup`,
    /// `SetDesiredCapacity` for a scale-in, `TerminateInstances`).
    pub op: String,
    /// With a decrement (`TerminateInstanceInAutoScalingGroup`).
    pub decrement: Option<bool>,
    /// `api` or `cluster-autoscaler`.
    pub by: String,
}

/// Every capacity change and termination the fake cloud saw.
#[derive(Debug, Clone, Deserialize)]
pub struct ScalingRecords {
    /// Desired capacity changes, in order.
    pub capacity: Vec<CapacityChange>,
    /// Instance terminations, in order.
    pub terminations: Vec<Termination>,
}

/// What one round of the workload controllers did.
#[derive(Debug, Clone, Deserialize)]
pub struct WorkloadsStep {
    /// Pods the ReplicaSet controller created.
    pub created: Vec<String>,
    /// Pods the scheduler bound.
    pub bound: Vec<String>,
    /// Pods left Pending (fit nowhere).
    pub pending: Vec<String>,
}

fn parse<T: for<'de> Deserialize<'de>>(what: &str, v: Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}: {v}"))
}

impl ClusterAutoscaler {
    /// Attaches CA to `group`, whose nodes are in `cluster`'s stand-in; `pods_per_node`
    /// workload pods fit on a node (CA's simulation and the scheduler of
    /// [`Self::workloads_step`]).
    pub fn attach(cloud: &FakeCloud, cluster: &str, group: &str, pods_per_node: u32) -> Self {
        Self::attach_scoring(cloud, cluster, group, pods_per_node, "LeastAllocated")
    }

    /// [`Self::attach`] with the scheduler's NodeResourcesFit `scoring`: `LeastAllocated`
    /// (kube-scheduler's default: fewest pods first) or `MostAllocated` (bin packing).
    pub fn attach_scoring(
        cloud: &FakeCloud,
        cluster: &str,
        group: &str,
        pods_per_node: u32,
        scoring: &str,
    ) -> Self {
        let control = cloud.control_handle();
        control.call(
            "ca_attach",
            json!({ "cluster": cluster, "group": group, "podsPerNode": pods_per_node,
                    "scoring": scoring }),
        );
        ClusterAutoscaler {
            control,
            group: group.to_string(),
            cluster: cluster.to_string(),
        }
    }

    /// Scale up by `by` nodes (`None`: what the Pending pods need), within MaxSize.
    pub fn scale_up(&self, by: Option<i32>) -> CaAction {
        let mut args = json!({ "group": self.group });
        if let Some(by) = by {
            args["by"] = json!(by);
        }
        parse("ca_scale_up", self.control.call("ca_scale_up", args))
    }

    /// Scale down `node` (`None`: the first unneeded node): taint, evict, terminate with a
    /// decrement once empty; with `hold`, stop after the evictions ([`Self::finish`]).
    pub fn scale_down(&self, node: Option<&str>, hold: bool) -> CaAction {
        let mut args = json!({ "group": self.group, "hold": hold });
        if let Some(n) = node {
            args["node"] = json!(n);
        }
        parse("ca_scale_down", self.control.call("ca_scale_down", args))
    }

    /// Goes on with a scale-down of `node`: evicts what is left, terminates once empty
    /// (`abort`: gives up and removes CA's taint when pods are left).
    pub fn finish(&self, node: &str, abort: bool) -> CaAction {
        parse(
            "ca_finish",
            self.control.call(
                "ca_finish",
                json!({ "group": self.group, "node": node, "abort": abort }),
            ),
        )
    }

    /// One round of the ReplicaSet controller and the scheduler in the cluster's stand-in.
    pub fn workloads_step(&self) -> WorkloadsStep {
        parse(
            "workloads_step",
            self.control
                .call("workloads_step", json!({ "cluster": self.cluster })),
        )
    }

    /// What the actor did so far.
    pub fn log(&self) -> Vec<CaAction> {
        parse(
            "ca_log",
            self.control.call("ca_log", json!({}))["log"].clone(),
        )
    }

    /// The group's capacity changes and terminations so far.
    pub fn records(&self) -> ScalingRecords {
        parse(
            "scaling_records",
            self.control
                .call("scaling_records", json!({ "group": self.group })),
        )
    }
}

impl FakeCloud {
    /// While `enabled`, the group's launches fail with InsufficientInstanceCapacity (a
    /// `Failed` scaling activity each try); turned off, the group launches what it owes.
    pub fn insufficient_capacity(&self, group: &str, enabled: bool) -> Value {
        self.control(
            "insufficient_capacity",
            json!({ "group": group, "enabled": enabled }),
        )
    }

    /// Every capacity change and termination of `group` (all groups: `None`).
    pub fn scaling_records(&self, group: Option<&str>) -> ScalingRecords {
        let args = match group {
            Some(g) => json!({ "group": g }),
            None => json!({}),
        };
        parse("scaling_records", self.control("scaling_records", args))
    }
}
