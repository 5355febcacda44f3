//! Fake EKS managed node group rollouts (`tests/fakecloud/eks_rollout.py`): they advance with
//! the fake's own time, which tests can pause, move on and speed up; `DescribeUpdate` only
//! reads them.

use serde_json::{Map, Value, json};

use crate::fakecloud::FakeCloud;

/// Durations of the fake rollout in fake seconds (`set_eks_timing`); unset fields keep their
/// value. Defaults: wave 0.2 s (EKS waits 60 s after a drain), ready 0.1 s, ready timeout
/// 30 s, drain timeout 10 s (EKS: 15 minutes), tick 0.05 s.
#[derive(Debug, Clone, Default)]
pub struct EksTiming(Map<String, Value>);

impl EksTiming {
    /// Changes nothing until a field is set.
    pub fn new() -> Self {
        EksTiming::default()
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.0.insert(key.into(), value);
        self
    }

    /// Wait between a wave's drain and the termination of its instances.
    pub fn wave_seconds(self, s: f64) -> Self {
        self.set("waveSeconds", json!(s))
    }

    /// How long a new instance takes before it can count as Ready.
    pub fn ready_seconds(self, s: f64) -> Self {
        self.set("readySeconds", json!(s))
    }

    /// New nodes not Ready within this: the update fails with `NodeCreationFailure`.
    pub fn ready_timeout_seconds(self, s: f64) -> Self {
        self.set("readyTimeoutSeconds", json!(s))
    }

    /// Pods not evicted within this after a wave began: `PodEvictionFailure` (unless `force`).
    pub fn drain_timeout_seconds(self, s: f64) -> Self {
        self.set("drainTimeoutSeconds", json!(s))
    }

    /// Fake time stopped (`true`: no rollout moves until resumed or advanced) or running.
    pub fn paused(self, paused: bool) -> Self {
        self.set("paused", json!(paused))
    }
}

impl FakeCloud {
    /// Sets rollout durations and/or pauses fake EKS time; answers the settings in force.
    pub fn set_eks_timing(&self, timing: EksTiming) -> Value {
        self.control("set_eks_timing", Value::Object(timing.0))
    }

    /// Stops fake EKS time: node group updates stay where they are, whatever is called.
    pub fn pause_eks(&self) {
        self.set_eks_timing(EksTiming::new().paused(true));
    }

    /// Lets fake EKS time run with the wall clock again.
    pub fn resume_eks(&self) {
        self.set_eks_timing(EksTiming::new().paused(false));
    }

    /// Moves fake EKS time on by `seconds` (also while paused), stepping the rollouts on the
    /// way; answers the fake time now.
    pub fn advance_eks_time(&self, seconds: f64) -> f64 {
        self.control("advance_eks_time", json!({ "seconds": seconds }))["now"]
            .as_f64()
            .expect("advance_eks_time answers now")
    }

    /// `nodegroup_calls`: what was asked of the node group (`calls`), its `updates`, `waves`
    /// and rollout `timeline` (events `setup`, `scaleUp`, `nodesReady`, `drain`, `drained`,
    /// `terminate`, `scaleDown`, `Successful`, `Failed`), and the fake time `now`.
    pub fn nodegroup_calls(&self, cluster: &str, nodegroup: &str) -> Value {
        self.control(
            "nodegroup_calls",
            json!({ "cluster": cluster, "nodegroup": nodegroup }),
        )
    }
}
