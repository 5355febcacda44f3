//! Metrics in CloudWatch embedded metric format (EMF): the values each handler reports per pool
//! and pass, formatted as EMF JSON documents (pure), and the [`MetricSink`] the Lambda
//! functions print them through (one JSON line per document on stdout; logs go to stderr).
//!
//! Namespace [`NAMESPACE`]. Per pool and pass, with dimension sets `[["Pool"], []]` (so the
//! dimensionless aggregate exists for alarms):
//! - rotator: `PoolsHalted` (1 if the pool is halted, else 0), `RotationsStarted`,
//!   `RotationsFinished`, `RotationsFailed` (transitions recorded this pass), `DriftedNodes`
//!   (in-service nodes on another AMI than the desired one), `RepairSuspended` (1 while
//!   repair's circuit breaker holds the pool's repairs, else 0), `PoolBackingOff` (1 while the
//!   pool's failing passes back it off, else 0); `RetainedInstances` (instances of the pool's
//!   group left `Terminating:Retained` after the pass's cleanup, [`crate::retain`]; the
//!   dimensionless aggregate only: `status` and `doctor` say which); and `AllowedDisruptions` per
//!   budget reason, with dimension sets `[["Pool", "Reason"], ["Reason"]]`;
//! - ami-watcher: `ResolutionFailures` (1 if the pool's resolution failed or its policy is
//!   invalid, else 0);
//! - interruption handler: `InterruptionsHandled` (1 per instance acted on).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::fleet::Lifecycle;
use crate::plan::Snapshot;
use crate::plan::{self, Allowed, Drift};

/// The CloudWatch namespace.
pub const NAMESPACE: &str = "nodecycle";

/// One metric value (unit `Count`: every nodecycle metric counts something).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Metric name.
    pub name: &'static str,
    /// Value.
    pub value: f64,
}

/// One EMF document: dimension values, the dimension sets to aggregate by, and the samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    /// Dimension name and value, e.g. `("Pool", "prod/general")`.
    pub dimensions: Vec<(&'static str, String)>,
    /// Sets of dimension names (each a subset of `dimensions`); `[]` is the aggregate.
    pub dimension_sets: Vec<Vec<&'static str>>,
    /// The values.
    pub samples: Vec<Sample>,
}

/// What one rotator pass did to one pool, counted as it happens (the rotator's `PoolReport`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPass {
    /// The pool is halted (at the start of the pass, or by a failure in it).
    pub halted: bool,
    /// In-service nodes running another AMI than the desired one.
    pub drifted: u32,
    /// Rotations that left `Pending` this pass.
    pub started: u32,
    /// Rotations that reached `Done` this pass.
    pub finished: u32,
    /// Rotations that reached `Failed` this pass.
    pub failed: u32,
    /// Repair is suspended by its circuit breaker this pass.
    pub repair_suspended: bool,
    /// The pool is backing off ([`crate::backoff`]): left out of this pass, or failed in it.
    pub backing_off: bool,
    /// Instances of the pool's group Auto Scaling retained (`Terminating:Retained`,
    /// [`crate::retain`]) and still there after this pass's cleanup.
    pub retained: u32,
    /// The desired release's health while it is under watch
    /// ([`crate::promotion::health::under_watch`]); `None` otherwise (no metric then).
    pub health: Option<crate::promotion::health::Summary>,
}

impl PoolPass {
    /// Counts a rotation's move from `from` to `to`, and a halt with it.
    pub fn step(&mut self, from: crate::rotation::Step, to: crate::rotation::Step, halts: bool) {
        use crate::rotation::Step;
        match to {
            Step::Done => self.finished += 1,
            Step::Failed => self.failed += 1,
            Step::Surging | Step::Cordoned | Step::Draining | Step::Terminating
                if from == Step::Pending =>
            {
                self.started += 1
            }
            _ => {}
        }
        self.halted |= halts;
    }

    /// Sets what the pass observed: the halt gate and the drifted nodes of `snapshot` at `now`.
    pub fn observe(&mut self, snapshot: &Snapshot, now: DateTime<Utc>) {
        self.halted |= snapshot.gates.halted.is_some();
        self.drifted = drifted_nodes(snapshot, now);
    }
}

/// In-service members of `snapshot` whose AMI is known and differs from the desired one.
pub fn drifted_nodes(snapshot: &Snapshot, now: DateTime<Utc>) -> u32 {
    let desired = snapshot.gates.desired_ami.as_deref();
    let n = snapshot
        .members
        .iter()
        .filter(|m| m.lifecycle == Lifecycle::InService)
        .filter(|m| {
            matches!(
                plan::assess(m, desired, &plan::Expiration::default(), now).drift,
                Drift::Drifted { .. }
            )
        })
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn count(name: &'static str, value: u32) -> Sample {
    Sample {
        name,
        value: f64::from(value),
    }
}

/// The rotator's documents for one pool and pass: the pool's counters, and the budget
/// allowance per reason (when the pass planned).
pub fn rotator_pool(pool: &str, pass: &PoolPass, allowed: Option<&Allowed>) -> Vec<Record> {
    let mut out = vec![Record {
        dimensions: vec![("Pool", pool.to_string())],
        dimension_sets: vec![vec!["Pool"], vec![]],
        samples: vec![
            count("PoolsHalted", u32::from(pass.halted)),
            count("RotationsStarted", pass.started),
            count("RotationsFinished", pass.finished),
            count("RotationsFailed", pass.failed),
            count("DriftedNodes", pass.drifted),
            count("RepairSuspended", u32::from(pass.repair_suspended)),
            count("PoolBackingOff", u32::from(pass.backing_off)),
        ],
    }];
    if let Some(h) = &pass.health {
        let mut samples = vec![count("UnhealthyNodes", h.unhealthy_nodes)];
        for (name, rate) in [
            ("PodStartFailurePercentNew", h.failure_rate_new),
            ("PodStartFailurePercentOld", h.failure_rate_old),
        ] {
            if let Some(r) = rate {
                samples.push(Sample {
                    name,
                    value: (r * 1000.0).round() / 10.0,
                });
            }
        }
        out.push(Record {
            dimensions: vec![("Pool", pool.to_string()), ("Release", h.release.clone())],
            dimension_sets: vec![vec!["Pool", "Release"]],
            samples,
        });
    }
    if let Some(a) = allowed {
        for (reason, n) in [("Drifted", a.drifted), ("Expired", a.expired)] {
            out.push(Record {
                dimensions: vec![("Pool", pool.to_string()), ("Reason", reason.to_string())],
                dimension_sets: vec![vec!["Pool", "Reason"], vec!["Reason"]],
                samples: vec![count("AllowedDisruptions", n)],
            });
        }
    }
    // Aggregate only (no per-pool series: `status` and `doctor` name the pool and instance).
    out.push(Record {
        dimensions: Vec::new(),
        dimension_sets: vec![vec![]],
        samples: vec![count("RetainedInstances", pass.retained)],
    });
    out
}

/// The ami-watcher's document for one pool: `ResolutionFailures` 1 or 0.
pub fn watcher_pool(pool: &str, failed: bool) -> Record {
    Record {
        dimensions: vec![("Pool", pool.to_string())],
        dimension_sets: vec![vec!["Pool"], vec![]],
        samples: vec![count("ResolutionFailures", u32::from(failed))],
    }
}

/// The interruption handler's document for one pool: `InterruptionsHandled` = `handled`.
pub fn interruption_pool(pool: &str, handled: u32) -> Record {
    Record {
        dimensions: vec![("Pool", pool.to_string())],
        dimension_sets: vec![vec!["Pool"], vec![]],
        samples: vec![count("InterruptionsHandled", handled)],
    }
}

/// `record` as an EMF document with timestamp `at`: `_aws.CloudWatchMetrics` names the
/// namespace, dimension sets and metrics; the dimension and metric values are root members.
pub fn emf(record: &Record, at: DateTime<Utc>) -> Value {
    let metrics: Vec<Value> = record
        .samples
        .iter()
        .map(|s| json!({"Name": s.name, "Unit": "Count"}))
        .collect();
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": at.timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": record.dimension_sets,
                "Metrics": metrics,
            }],
        }),
    );
    for (name, value) in &record.dimensions {
        root.insert((*name).to_string(), Value::String(value.clone()));
    }
    for s in &record.samples {
        root.insert(s.name.to_string(), json!(s.value));
    }
    Value::Object(root)
}

/// Where metric documents go.
pub trait MetricSink: Send + Sync {
    /// Emits `records` observed at `at`. Never fails (metrics are best effort).
    fn emit(&self, records: &[Record], at: DateTime<Utc>);
}

/// Drops everything: the `nodecycle` CLI (its stdout is the handler's JSON) and tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl MetricSink for NoMetrics {
    fn emit(&self, _: &[Record], _: DateTime<Utc>) {}
}

/// One EMF JSON line per document on stdout, which Lambda sends to the function's log group,
/// where CloudWatch extracts the metrics. Chosen in each function's `main.rs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmfStdout;

impl MetricSink for EmfStdout {
    fn emit(&self, records: &[Record], at: DateTime<Utc>) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for r in records {
            // One write per line: a line is one CloudWatch log event.
            let _ = writeln!(out, "{}", emf(r, at));
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000, 0).unwrap_or_default()
    }

    /// Checks the document against the EMF specification's rules (what CloudWatch rejects).
    fn assert_valid_emf(doc: &Value) {
        let aws = &doc["_aws"];
        assert!(aws["Timestamp"].is_i64(), "{doc}");
        let directives = aws["CloudWatchMetrics"].as_array().unwrap();
        assert!(!directives.is_empty());
        for d in directives {
            assert!(d["Namespace"].as_str().is_some_and(|n| !n.is_empty()));
            for set in d["Dimensions"].as_array().unwrap() {
                let set = set.as_array().unwrap();
                assert!(set.len() <= 30);
                for name in set {
                    let name = name.as_str().unwrap();
                    assert!(
                        doc[name].is_string(),
                        "dimension {name} must be a string member of the root: {doc}"
                    );
                }
            }
            let metrics = d["Metrics"].as_array().unwrap();
            assert!(!metrics.is_empty() && metrics.len() <= 100);
            for m in metrics {
                let name = m["Name"].as_str().unwrap();
                assert!(doc[name].is_number(), "metric {name} needs a value: {doc}");
                assert_eq!(m["Unit"], "Count");
            }
        }
    }

    #[test]
    fn a_rotator_pass_is_one_pool_document_and_one_per_budget_reason() {
        let pass = PoolPass {
            halted: true,
            drifted: 4,
            started: 2,
            finished: 1,
            failed: 1,
            repair_suspended: false,
            backing_off: false,
            retained: 2,
            health: None,
        };
        let allowed = Allowed {
            drifted: 3,
            expired: 0,
            unhealthy: 1,
        };
        let records = rotator_pool("prod/general", &pass, Some(&allowed));
        assert_eq!(records.len(), 4);
        let docs: Vec<Value> = records.iter().map(|r| emf(r, at())).collect();
        for d in &docs {
            assert_valid_emf(d);
        }
        let pool = &docs[0];
        assert_eq!(pool["Pool"], "prod/general");
        assert_eq!(pool["PoolsHalted"], 1.0);
        assert_eq!(pool["RotationsStarted"], 2.0);
        assert_eq!(pool["RotationsFinished"], 1.0);
        assert_eq!(pool["RotationsFailed"], 1.0);
        assert_eq!(pool["DriftedNodes"], 4.0);
        assert_eq!(
            pool["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "nodecycle"
        );
        assert_eq!(
            pool["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Pool"], []])
        );
        assert_eq!(pool["_aws"]["Timestamp"], 1_790_000_000_000_i64);
        let drifted = &docs[1];
        assert_eq!(
            (
                drifted["Reason"].as_str(),
                drifted["AllowedDisruptions"].as_f64()
            ),
            (Some("Drifted"), Some(3.0))
        );
        assert_eq!(
            drifted["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Pool", "Reason"], ["Reason"]])
        );
        assert_eq!(docs[2]["Reason"], "Expired");
        assert_eq!(docs[2]["AllowedDisruptions"], 0.0);
        // Retained instances: the aggregate only, no per-pool series.
        assert_eq!(docs[3]["RetainedInstances"], 2.0);
        assert!(docs[3].get("Pool").is_none());
        assert_eq!(
            docs[3]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([[]])
        );
    }

    #[test]
    fn a_pass_that_did_not_plan_reports_no_allowance() {
        let records = rotator_pool("prod/general", &PoolPass::default(), None);
        assert_eq!(records.len(), 2);
        let doc = emf(&records[0], at());
        assert_valid_emf(&doc);
        assert_eq!(doc["PoolsHalted"], 0.0);
    }

    #[test]
    fn watcher_and_interruption_documents() {
        let doc = emf(&watcher_pool("prod/general", true), at());
        assert_valid_emf(&doc);
        assert_eq!(doc["ResolutionFailures"], 1.0);
        let doc = emf(&watcher_pool("prod/general", false), at());
        assert_eq!(doc["ResolutionFailures"], 0.0);
        let doc = emf(&interruption_pool("prod/spot", 2), at());
        assert_valid_emf(&doc);
        assert_eq!(doc["InterruptionsHandled"], 2.0);
        assert_eq!(doc["Pool"], "prod/spot");
    }

    #[test]
    fn counting_steps() {
        use crate::rotation::Step::*;
        let mut p = PoolPass::default();
        p.step(Pending, Surging, false);
        p.step(Pending, Draining, false);
        p.step(Surging, Cordoned, false);
        p.step(Terminating, Done, false);
        p.step(Surging, Failed, true);
        p.step(Draining, Cancelled, false);
        assert_eq!(
            p,
            PoolPass {
                halted: true,
                drifted: 0,
                started: 2,
                finished: 1,
                failed: 1,
                repair_suspended: false,
                backing_off: false,
                retained: 0,
                health: None,
            }
        );
    }

    #[test]
    fn a_release_under_watch_has_its_health_document() {
        let pass = PoolPass {
            health: Some(crate::promotion::health::Summary {
                release: "v20241109".into(),
                unhealthy_nodes: 3,
                failure_rate_new: Some(0.4),
                failure_rate_old: None,
            }),
            ..PoolPass::default()
        };
        let records = rotator_pool("prod/general", &pass, None);
        assert_eq!(records.len(), 3);
        let doc = emf(&records[1], at());
        assert_valid_emf(&doc);
        assert_eq!(doc["Release"], "v20241109");
        assert_eq!(doc["UnhealthyNodes"], 3.0);
        assert_eq!(doc["PodStartFailurePercentNew"], 40.0);
        assert!(doc.get("PodStartFailurePercentOld").is_none(), "{doc}");
        // Not under watch: no health document.
        assert_eq!(
            rotator_pool("prod/general", &PoolPass::default(), None).len(),
            2
        );
    }
}
