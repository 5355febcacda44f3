//! Fault injection in the fake cloud (`faults`, `fault_stats` control ops; see
//! `tests/fakecloud/README.md`, *Faults*): fail or delay a fraction of the AWS calls (in each
//! service's real error shape, so the SDK classifies them as in AWS) and of the Kubernetes API
//! calls of the stand-ins.
//!
//! ```ignore
//! cloud.faults(
//!     Faults::new()
//!         .seed(7)
//!         .aws(AwsFaults::new(0.2).kinds(&[AwsFault::Throttle, AwsFault::Http503, AwsFault::Reset]))
//!         .kube(KubeFaults::new(0.2).delay_ms(10)),
//! );
//! // ... run the code under test ...
//! let stats = cloud.fault_stats();
//! assert!(stats.aws.failed > 0);
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::fakecloud::{Control, FakeCloud};

/// How an AWS call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AwsFault {
    /// The service's throttling error (`Throttling`, `RequestLimitExceeded`,
    /// `ThrottlingException`, `ProvisionedThroughputExceededException`, ...).
    Throttle,
    /// HTTP 500 in the service's shape (`InternalFailure`, `InternalError`, ...).
    Http500,
    /// HTTP 503 in the service's shape (`ServiceUnavailable`, `Unavailable`, ...).
    Http503,
    /// The connection drops without an answer; the call is not carried out.
    Reset,
    /// The call is carried out, then the connection drops without the answer.
    ResetAfter,
}

impl AwsFault {
    fn name(self) -> &'static str {
        match self {
            AwsFault::Throttle => "throttle",
            AwsFault::Http500 => "500",
            AwsFault::Http503 => "503",
            AwsFault::Reset => "reset",
            AwsFault::ResetAfter => "reset_after",
        }
    }
}

/// How a Kubernetes API call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeFault {
    /// 429 `TooManyRequests` Status with `Retry-After` (API Priority and Fairness).
    TooManyRequests,
    /// 500 `InternalError` Status.
    Http500,
    /// 503 `ServiceUnavailable` Status.
    Http503,
    /// The connection drops without an answer; the call is not carried out.
    Reset,
    /// The call is carried out, then the connection drops without the answer.
    ResetAfter,
}

impl KubeFault {
    fn name(self) -> &'static str {
        match self {
            KubeFault::TooManyRequests => "429",
            KubeFault::Http500 => "500",
            KubeFault::Http503 => "503",
            KubeFault::Reset => "reset",
            KubeFault::ResetAfter => "reset_after",
        }
    }
}

fn strings(items: &[&str]) -> Value {
    json!(items)
}

/// Faults for AWS calls: a fraction `rate` of the calls in scope fail with one of `kinds`.
#[derive(Debug, Clone)]
pub struct AwsFaults(Map<String, Value>);

impl AwsFaults {
    /// `rate` (0..=1) of the calls fail, with the default kinds (throttle, 500, 503, reset).
    pub fn new(rate: f64) -> Self {
        let mut m = Map::new();
        m.insert("rate".into(), json!(rate));
        AwsFaults(m)
    }

    /// The kinds to pick from (uniformly).
    pub fn kinds(mut self, kinds: &[AwsFault]) -> Self {
        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        self.0.insert("kinds".into(), json!(names));
        self
    }

    /// Every call in scope is held this long first (faulted or not).
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.0.insert("delayMs".into(), json!(ms));
        self
    }

    /// Only these services (signing names: `dynamodb`, `ec2`, `autoscaling`, `eks`, `ssm`).
    pub fn services(mut self, services: &[&str]) -> Self {
        self.0.insert("services".into(), strings(services));
        self
    }

    /// Only these operations (`Query`, or `dynamodb:Query`).
    pub fn operations(mut self, operations: &[&str]) -> Self {
        self.0.insert("operations".into(), strings(operations));
        self
    }

    /// No more faults once this many were injected.
    pub fn limit(mut self, n: u32) -> Self {
        self.0.insert("limit".into(), json!(n));
        self
    }
}

/// Faults for Kubernetes API calls of the stand-ins.
#[derive(Debug, Clone)]
pub struct KubeFaults(Map<String, Value>);

impl KubeFaults {
    /// `rate` (0..=1) of the calls fail, with the default kinds (429, 500, 503, reset).
    pub fn new(rate: f64) -> Self {
        let mut m = Map::new();
        m.insert("rate".into(), json!(rate));
        KubeFaults(m)
    }

    /// The kinds to pick from (uniformly).
    pub fn kinds(mut self, kinds: &[KubeFault]) -> Self {
        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        self.0.insert("kinds".into(), json!(names));
        self
    }

    /// Every call in scope is held this long first (faulted or not).
    pub fn delay_ms(mut self, ms: u64) -> Self {
        self.0.insert("delayMs".into(), json!(ms));
        self
    }

    /// Only the stand-ins of these clusters.
    pub fn clusters(mut self, clusters: &[&str]) -> Self {
        self.0.insert("clusters".into(), strings(clusters));
        self
    }

    /// Only these verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`).
    pub fn verbs(mut self, verbs: &[&str]) -> Self {
        self.0.insert("verbs".into(), strings(verbs));
        self
    }

    /// Only these resources (`nodes`, `pods`, `pods/eviction`, `poddisruptionbudgets`, ...).
    pub fn resources(mut self, resources: &[&str]) -> Self {
        self.0.insert("resources".into(), strings(resources));
        self
    }

    /// No more faults once this many were injected.
    pub fn limit(mut self, n: u32) -> Self {
        self.0.insert("limit".into(), json!(n));
        self
    }

    pub(crate) fn into_json(self) -> Value {
        Value::Object(self.0)
    }

    /// `Retry-After` of the 429 answers (default 1).
    pub fn retry_after_seconds(mut self, s: u32) -> Self {
        self.0.insert("retryAfterSeconds".into(), json!(s));
        self
    }
}

/// The arguments of one `faults` op: sections left out keep their settings.
#[derive(Debug, Clone, Default)]
pub struct Faults(Map<String, Value>);

impl Faults {
    /// Changes nothing until a section is set.
    pub fn new() -> Self {
        Faults::default()
    }

    /// The seed the decisions derive from (default 0): same seed, same faults.
    pub fn seed(mut self, seed: u64) -> Self {
        self.0.insert("seed".into(), json!(seed));
        self
    }

    /// Sets the AWS faults (counters start again).
    pub fn aws(mut self, aws: AwsFaults) -> Self {
        self.0.insert("aws".into(), Value::Object(aws.0));
        self
    }

    /// Turns the AWS faults off.
    pub fn no_aws(mut self) -> Self {
        self.0.insert("aws".into(), Value::Null);
        self
    }

    /// Sets the Kubernetes faults (counters start again).
    pub fn kube(mut self, kube: KubeFaults) -> Self {
        self.0.insert("kube".into(), Value::Object(kube.0));
        self
    }

    /// Turns the Kubernetes faults off.
    pub fn no_kube(mut self) -> Self {
        self.0.insert("kube".into(), Value::Null);
        self
    }
}

/// `fault_stats`: what the fake saw and failed, since each section was last set.
#[derive(Debug, Clone, Deserialize)]
pub struct FaultStats {
    /// AWS calls (operations named `service:Operation`).
    pub aws: SectionStats,
    /// Kubernetes API calls (operations named `cluster:verb resource`).
    pub kube: SectionStats,
}

/// Counters of one section.
#[derive(Debug, Clone, Deserialize)]
pub struct SectionStats {
    /// Calls seen.
    pub calls: u64,
    /// Calls the filters selected.
    #[serde(rename = "inScope")]
    pub in_scope: u64,
    /// Calls failed.
    pub failed: u64,
    /// Failed calls per kind (`throttle`, `500`, `503`, `reset`, `reset_after`, `429`).
    #[serde(rename = "byKind")]
    pub by_kind: BTreeMap<String, u64>,
    /// Per operation.
    #[serde(rename = "byOperation")]
    pub by_operation: BTreeMap<String, OperationStats>,
}

/// Counters of one operation.
#[derive(Debug, Clone, Deserialize)]
pub struct OperationStats {
    /// Calls seen.
    pub calls: u64,
    /// Calls failed.
    pub failed: u64,
    /// Failed calls per kind.
    #[serde(rename = "byKind")]
    pub by_kind: BTreeMap<String, u64>,
}

pub(crate) fn fault_stats(control: &Control) -> FaultStats {
    serde_json::from_value(control.call("fault_stats", json!({}))).expect("fault_stats shape")
}

impl FakeCloud {
    /// Sets (or, with `no_aws`/`no_kube`, clears) fault injection; answers the settings now
    /// in force.
    pub fn faults(&self, faults: Faults) -> Value {
        self.control("faults", Value::Object(faults.0))
    }

    /// Turns every fault off.
    pub fn clear_faults(&self) {
        self.faults(Faults::new().no_aws().no_kube());
    }

    /// Calls seen and failed.
    pub fn fault_stats(&self) -> FaultStats {
        fault_stats(&self.control_handle())
    }
}
