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
use std::marker::PhantomData;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::fakecloud::{Control, FakeCloud};

/// A kind of fault of one section (AWS or Kubernetes).
pub trait FaultKind: Copy {
    /// The name the `faults` op takes.
    fn name(self) -> &'static str;
}

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
    /// The service's answer to a caller whose IAM policy does not allow the call
    /// (`AccessDenied`, `UnauthorizedOperation`, `AccessDeniedException`); never a default.
    AccessDenied,
    /// The connection drops without an answer; the call is not carried out.
    Reset,
    /// The call is carried out, then the connection drops without the answer.
    ResetAfter,
}

impl FaultKind for AwsFault {
    fn name(self) -> &'static str {
        match self {
            AwsFault::Throttle => "throttle",
            AwsFault::Http500 => "500",
            AwsFault::Http503 => "503",
            AwsFault::AccessDenied => "access_denied",
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

impl FaultKind for KubeFault {
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

/// The settings of one section: a fraction `rate` of the calls in scope fail with one of
/// `kinds`. [`AwsFaults`] and [`KubeFaults`] add their own filters.
#[derive(Debug, Clone)]
pub struct FaultSpec<K> {
    settings: Map<String, Value>,
    kind: PhantomData<K>,
}

/// Faults for AWS calls (default kinds: throttle, 500, 503, reset).
pub type AwsFaults = FaultSpec<AwsFault>;
/// Faults for the stand-ins' Kubernetes API calls (default kinds: 429, 500, 503, reset).
pub type KubeFaults = FaultSpec<KubeFault>;

impl<K: FaultKind> FaultSpec<K> {
    /// `rate` (0..=1) of the calls in scope fail, with the section's default kinds.
    pub fn new(rate: f64) -> Self {
        FaultSpec {
            settings: Map::new(),
            kind: PhantomData,
        }
        .set("rate", json!(rate))
    }

    fn set(mut self, key: &str, value: Value) -> Self {
        self.settings.insert(key.into(), value);
        self
    }

    /// The kinds to pick from (uniformly).
    pub fn kinds(self, kinds: &[K]) -> Self {
        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        self.set("kinds", json!(names))
    }

    /// Every call in scope is held this long first (faulted or not).
    pub fn delay_ms(self, ms: u64) -> Self {
        self.set("delayMs", json!(ms))
    }

    /// No more faults once this many were injected.
    pub fn limit(self, n: u32) -> Self {
        self.set("limit", json!(n))
    }

    pub(crate) fn into_json(self) -> Value {
        Value::Object(self.settings)
    }
}

impl FaultSpec<AwsFault> {
    /// Only these services (signing names: `dynamodb`, `ec2`, `autoscaling`, `eks`, `ssm`).
    pub fn services(self, services: &[&str]) -> Self {
        self.set("services", json!(services))
    }

    /// Only these operations (`Query`, or `dynamodb:Query`).
    pub fn operations(self, operations: &[&str]) -> Self {
        self.set("operations", json!(operations))
    }
}

impl FaultSpec<KubeFault> {
    /// Only the stand-ins of these clusters.
    pub fn clusters(self, clusters: &[&str]) -> Self {
        self.set("clusters", json!(clusters))
    }

    /// Only these verbs (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`).
    pub fn verbs(self, verbs: &[&str]) -> Self {
        self.set("verbs", json!(verbs))
    }

    /// Only these resources (`nodes`, `pods`, `pods/eviction`, `poddisruptionbudgets`, ...).
    pub fn resources(self, resources: &[&str]) -> Self {
        self.set("resources", json!(resources))
    }

    /// `Retry-After` of the 429 answers (default 1).
    pub fn retry_after_seconds(self, s: u32) -> Self {
        self.set("retryAfterSeconds", json!(s))
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
        self.0.insert("aws".into(), aws.into_json());
        self
    }

    /// Turns the AWS faults off.
    pub fn no_aws(mut self) -> Self {
        self.0.insert("aws".into(), Value::Null);
        self
    }

    /// Sets the Kubernetes faults (counters start again).
    pub fn kube(mut self, kube: KubeFaults) -> Self {
        self.0.insert("kube".into(), kube.into_json());
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
