//! Metrics in CloudWatch embedded metric format (EMF): the values each handler reports per pass,
//! formatted as EMF JSON documents (pure), and the [`MetricSink`] the Lambda functions print them
//! through (one JSON line per document on stdout; logs go to stderr).
//!
//! Namespace [`NAMESPACE`]. Every metric is a **cell** metric by default: one document per
//! invocation with dimension set `[[]]` (no dimension), its values summed (counts) or taken at
//! their maximum (percentages) over the pools of the invocation, so a cell emits the same
//! [`CELL_SERIES`] series whether it serves 5 pools or 5,000 (CloudWatch bills per series).
//! A pool whose policy says `metrics.perPool: true` adds documents of its own with the `Pool`
//! dimension (never the `[]` set again: the cell document already counts it).
//!
//! - rotator, per invocation ([`rotator_pass`]): `Pools` (pools of the pass), `PoolsUpToDate`
//!   (desired AMI known and no in-service node on another), `PoolsHalted`, `PoolsBudgetLimited`
//!   (drifted nodes wait while the `Drifted` allowance is 0), `RotationsInFlight` (rotation
//!   records not finished at the start of the pass), `RotationsStarted`, `RotationsFinished`,
//!   `RotationsFailed` (transitions this pass), `DriftedNodes`, `RepairSuspended` (pools whose
//!   repairs the circuit breaker holds), `PoolBackingOff` (pools backing off), `RetainedInstances`
//!   (instances left `Terminating:Retained`, [`crate::retain`]), `ReleasesQuarantined`
//!   (quarantine entries at the start of the pass), `Nodes`, `NodesUpToDate` and
//!   `NodesUpToDateAndReady` (the pools' rollout counts, [`crate::rollout::Counts`]);
//!   `AllowedDisruptions` summed per budget reason
//!   (dimension set `[["Reason"]]`, `Drifted` and `Expired`) when a pool planned; and while a
//!   release is under watch, `UnhealthyNodes` (sum) and `PodStartFailurePercentNew`/`Old`
//!   (maximum over the pools);
//! - ami-watcher, per run ([`watcher_pass`]): `ResolutionFailures` (pools whose resolution
//!   failed or whose policy is invalid), `DaysToDeprecation` (whole days to the nearest EC2
//!   deprecation of an AMI some pool uses, the fewest over the pools; [`crate::deprecation`]);
//! - interruption handler, per event acted on ([`interruption_pass`]): `InterruptionsHandled`
//!   (instances acted on).
//!
//! Per pool (`metrics.perPool: true`), dimension set `[["Pool"]]`: the rotator's `PoolsUpToDate`,
//! `PoolsHalted`, `PoolsBudgetLimited`, `RotationsInFlight`, `RotationsStarted`,
//! `RotationsFinished`, `RotationsFailed`, `DriftedNodes`, `RepairSuspended`, `PoolBackingOff`
//! (0 or 1 for the pool), `Nodes`, `NodesUpToDate`, `NodesUpToDateAndReady`, `ResolutionFailures` and `InterruptionsHandled`; `AllowedDisruptions`
//! with `[["Pool", "Reason"]]`; the release health with `[["Pool", "Release"]]`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::fleet::Lifecycle;
use crate::plan::Snapshot;
use crate::plan::{self, Allowed, Drift};

/// The CloudWatch namespace.
pub const NAMESPACE: &str = "nodecycle";

/// Every metric name the functions emit in [`NAMESPACE`], and no other: the template's alarms and
/// dashboard may name only these (tests/tests/template.rs), and the unit tests check that a
/// simulated day emits exactly these.
pub const EMITTED: [&str; 23] = [
    "Pools",
    "PoolsUpToDate",
    "PoolsHalted",
    "PoolsBudgetLimited",
    "RotationsInFlight",
    "RotationsStarted",
    "RotationsFinished",
    "RotationsFailed",
    "DriftedNodes",
    "RepairSuspended",
    "PoolBackingOff",
    "RetainedInstances",
    "ReleasesQuarantined",
    "Nodes",
    "NodesUpToDate",
    "NodesUpToDateAndReady",
    "AllowedDisruptions",
    "UnhealthyNodes",
    "PodStartFailurePercentNew",
    "PodStartFailurePercentOld",
    "ResolutionFailures",
    "DaysToDeprecation",
    "InterruptionsHandled",
];

/// The budget reasons `AllowedDisruptions` is reported for (its `Reason` dimension values).
pub const REASONS: [&str; 2] = ["Drifted", "Expired"];

/// The most series a cell emits with default settings, whatever its pool count: one per name of
/// [`EMITTED`] and one more for `AllowedDisruptions`' second reason.
pub const CELL_SERIES: usize = EMITTED.len() + REASONS.len() - 1;

/// One metric value (unit `Count`: every nodecycle metric counts something).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// Metric name (one of [`EMITTED`]).
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
    /// The pool's policy says `metrics.perPool: true`: the pool has per-pool documents too.
    pub per_pool: bool,
    /// The pool is halted (at the start of the pass, or by a failure in it).
    pub halted: bool,
    /// The desired AMI is known and no in-service node runs another (set by [`Self::observe`];
    /// a pool the pass did not observe is not counted up to date).
    pub up_to_date: bool,
    /// In-service nodes running another AMI than the desired one.
    pub drifted: u32,
    /// Rotation records not finished at the start of the pass.
    pub in_flight: u32,
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
    /// The pool's rollout counts this pass ([`crate::rollout::Counts`]); `None` when the pass
    /// did not compute its status (not observed).
    pub rollout: Option<crate::rollout::Counts>,
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

    /// Sets what the pass observed of `snapshot` at `now`: the halt gate, the drifted nodes,
    /// whether the pool is up to date, and the rotations in flight.
    pub fn observe(&mut self, snapshot: &Snapshot, now: DateTime<Utc>) {
        self.halted |= snapshot.gates.halted.is_some();
        self.drifted = drifted_nodes(snapshot, now);
        self.up_to_date = snapshot.gates.desired_ami.is_some() && self.drifted == 0;
        let in_flight = snapshot.rotations.iter().filter(|r| r.in_flight()).count();
        self.in_flight = u32::try_from(in_flight).unwrap_or(u32::MAX);
    }

    /// Drifted nodes wait on the budgets: some are drifted and the `Drifted` allowance of the
    /// pass (`allowed`, when it planned) is 0.
    pub fn budget_limited(&self, allowed: Option<&Allowed>) -> bool {
        self.drifted > 0 && allowed.is_some_and(|a| a.drifted == 0)
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

fn percent(name: &'static str, rate: f64) -> Sample {
    Sample {
        name,
        value: (rate * 1000.0).round() / 10.0,
    }
}

/// A cell document: no dimension, dimension set `[[]]`.
fn cell(samples: Vec<Sample>) -> Record {
    Record {
        dimensions: Vec::new(),
        dimension_sets: vec![vec![]],
        samples,
    }
}

/// A per-pool document: dimension set `[["Pool"]]` only (the cell document is the aggregate).
fn pool_record(pool: &str, samples: Vec<Sample>) -> Record {
    Record {
        dimensions: vec![("Pool", pool.to_string())],
        dimension_sets: vec![vec!["Pool"]],
        samples,
    }
}

/// One pool of a rotator pass: its id, what the pass counted and the budget allowance at the
/// start of the pass (`None` when it did not plan).
#[derive(Debug, Clone, Copy)]
pub struct PoolMetrics<'a> {
    /// `<cluster>/<name>` (the pool id).
    pub pool: &'a str,
    /// What the pass counted.
    pub pass: &'a PoolPass,
    /// The allowance per reason, when the pass planned.
    pub allowed: Option<&'a Allowed>,
}

/// The rotator's documents for one invocation: the cell document over `pools` (always, `Pools`
/// 0 when there are none), `AllowedDisruptions` per reason when a pool planned, the cell's
/// release health when a release is under watch in some pool, then the per-pool documents of
/// the pools with [`PoolPass::per_pool`]. `quarantined`: quarantine entries at the start of the
/// pass.
pub fn rotator_pass(pools: &[PoolMetrics<'_>], quarantined: usize) -> Vec<Record> {
    let sum = |f: &dyn Fn(&PoolMetrics<'_>) -> u32| {
        pools.iter().fold(0u32, |n, p| n.saturating_add(f(p)))
    };
    let flag = |f: fn(&PoolPass) -> bool| sum(&|p| u32::from(f(p.pass)));
    let mut out = vec![cell(vec![
        count("Pools", u32::try_from(pools.len()).unwrap_or(u32::MAX)),
        count("PoolsUpToDate", flag(|p| p.up_to_date)),
        count("PoolsHalted", flag(|p| p.halted)),
        count(
            "PoolsBudgetLimited",
            sum(&|p| u32::from(p.pass.budget_limited(p.allowed))),
        ),
        count("RotationsInFlight", sum(&|p| p.pass.in_flight)),
        count("RotationsStarted", sum(&|p| p.pass.started)),
        count("RotationsFinished", sum(&|p| p.pass.finished)),
        count("RotationsFailed", sum(&|p| p.pass.failed)),
        count("DriftedNodes", sum(&|p| p.pass.drifted)),
        count("RepairSuspended", flag(|p| p.repair_suspended)),
        count("PoolBackingOff", flag(|p| p.backing_off)),
        count("RetainedInstances", sum(&|p| p.pass.retained)),
        count(
            "ReleasesQuarantined",
            u32::try_from(quarantined).unwrap_or(u32::MAX),
        ),
        count("Nodes", sum(&|p| p.pass.rollout.map_or(0, |r| r.nodes))),
        count(
            "NodesUpToDate",
            sum(&|p| p.pass.rollout.map_or(0, |r| r.up_to_date)),
        ),
        count(
            "NodesUpToDateAndReady",
            sum(&|p| p.pass.rollout.map_or(0, |r| r.up_to_date_and_ready)),
        ),
    ])];
    if pools.iter().any(|p| p.allowed.is_some()) {
        for (reason, of) in reasons() {
            out.push(Record {
                dimensions: vec![("Reason", reason.to_string())],
                dimension_sets: vec![vec!["Reason"]],
                samples: vec![count(
                    "AllowedDisruptions",
                    sum(&|p| p.allowed.map(of).unwrap_or(0)),
                )],
            });
        }
    }
    let watched: Vec<&crate::promotion::health::Summary> = pools
        .iter()
        .filter_map(|p| p.pass.health.as_ref())
        .collect();
    if !watched.is_empty() {
        let unhealthy = watched
            .iter()
            .fold(0u32, |n, h| n.saturating_add(h.unhealthy_nodes));
        out.push(cell(health_samples(
            unhealthy,
            watched
                .iter()
                .filter_map(|h| h.failure_rate_new)
                .reduce(f64::max),
            watched
                .iter()
                .filter_map(|h| h.failure_rate_old)
                .reduce(f64::max),
        )));
    }
    for p in pools.iter().filter(|p| p.pass.per_pool) {
        out.extend(rotator_pool(p.pool, p.pass, p.allowed));
    }
    out
}

/// A budget reason and how to read its allowance.
type ReasonOf = (&'static str, fn(&Allowed) -> u32);

fn reasons() -> [ReasonOf; 2] {
    [(REASONS[0], |a| a.drifted), (REASONS[1], |a| a.expired)]
}

fn health_samples(unhealthy: u32, new: Option<f64>, old: Option<f64>) -> Vec<Sample> {
    let mut samples = vec![count("UnhealthyNodes", unhealthy)];
    for (name, rate) in [
        ("PodStartFailurePercentNew", new),
        ("PodStartFailurePercentOld", old),
    ] {
        if let Some(r) = rate {
            samples.push(percent(name, r));
        }
    }
    samples
}

/// The per-pool documents of one pool (`metrics.perPool: true`) and pass: the pool's counters,
/// the budget allowance per reason (when the pass planned) and the release health (while under
/// watch). `RetainedInstances` stays a cell metric (`status` and `doctor` name the instances).
pub fn rotator_pool(pool: &str, pass: &PoolPass, allowed: Option<&Allowed>) -> Vec<Record> {
    let mut out = vec![pool_record(
        pool,
        vec![
            count("PoolsUpToDate", u32::from(pass.up_to_date)),
            count("PoolsHalted", u32::from(pass.halted)),
            count(
                "PoolsBudgetLimited",
                u32::from(pass.budget_limited(allowed)),
            ),
            count("RotationsInFlight", pass.in_flight),
            count("RotationsStarted", pass.started),
            count("RotationsFinished", pass.finished),
            count("RotationsFailed", pass.failed),
            count("DriftedNodes", pass.drifted),
            count("RepairSuspended", u32::from(pass.repair_suspended)),
            count("PoolBackingOff", u32::from(pass.backing_off)),
            count("Nodes", pass.rollout.map_or(0, |r| r.nodes)),
            count("NodesUpToDate", pass.rollout.map_or(0, |r| r.up_to_date)),
            count(
                "NodesUpToDateAndReady",
                pass.rollout.map_or(0, |r| r.up_to_date_and_ready),
            ),
        ],
    )];
    if let Some(h) = &pass.health {
        out.push(Record {
            dimensions: vec![("Pool", pool.to_string()), ("Release", h.release.clone())],
            dimension_sets: vec![vec!["Pool", "Release"]],
            samples: health_samples(h.unhealthy_nodes, h.failure_rate_new, h.failure_rate_old),
        });
    }
    if let Some(a) = allowed {
        for (reason, of) in reasons() {
            out.push(Record {
                dimensions: vec![("Pool", pool.to_string()), ("Reason", reason.to_string())],
                dimension_sets: vec![vec!["Pool", "Reason"]],
                samples: vec![count("AllowedDisruptions", of(a))],
            });
        }
    }
    out
}

/// One pool of an ami-watcher run: its id, whether its resolution failed (or its policy is
/// invalid) and whether it has per-pool metrics.
#[derive(Debug, Clone, Copy)]
pub struct WatchedPool<'a> {
    /// The pool id.
    pub pool: &'a str,
    /// Resolution failed, or the policy is invalid.
    pub failed: bool,
    /// `metrics.perPool: true` (false when the policy is invalid).
    pub per_pool: bool,
    /// Whole days to the nearest EC2 deprecation of an AMI the pool uses (negative once past),
    /// when one has a deprecation time.
    pub days_to_deprecation: Option<i64>,
}

/// The ami-watcher's documents for one run: the cell's `ResolutionFailures` (the failed pools;
/// always, 0 when none failed) and `DaysToDeprecation` (the fewest days over the pools, when
/// some pool's AMIs have a deprecation time), then `ResolutionFailures` 1 or 0 and
/// `DaysToDeprecation` of each per-pool pool.
pub fn watcher_pass(pools: &[WatchedPool<'_>]) -> Vec<Record> {
    let failed = pools.iter().filter(|p| p.failed).count();
    let days = |d: i64| Sample {
        name: "DaysToDeprecation",
        // Exact for any number of days a calendar holds.
        value: d.clamp(-1_000_000, 1_000_000) as f64,
    };
    let mut samples = vec![count(
        "ResolutionFailures",
        u32::try_from(failed).unwrap_or(u32::MAX),
    )];
    samples.extend(
        pools
            .iter()
            .filter_map(|p| p.days_to_deprecation)
            .min()
            .map(days),
    );
    let mut out = vec![cell(samples)];
    out.extend(pools.iter().filter(|p| p.per_pool).map(|p| {
        let mut samples = vec![count("ResolutionFailures", u32::from(p.failed))];
        samples.extend(p.days_to_deprecation.map(days));
        pool_record(p.pool, samples)
    }));
    out
}

/// The interruption handler's documents for one event: nothing when no instance was acted on;
/// else the cell's `InterruptionsHandled` (the sum of `handled`), then that of each pool with
/// per-pool metrics. `handled`: pool id, instances acted on, `metrics.perPool`.
pub fn interruption_pass(handled: &[(&str, u32, bool)]) -> Vec<Record> {
    if handled.is_empty() {
        return Vec::new();
    }
    let total = handled.iter().fold(0u32, |n, h| n.saturating_add(h.1));
    let mut out = vec![cell(vec![count("InterruptionsHandled", total)])];
    out.extend(
        handled
            .iter()
            .filter(|h| h.2)
            .map(|(pool, n, _)| pool_record(pool, vec![count("InterruptionsHandled", *n)])),
    );
    out
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
    use std::collections::{BTreeMap, BTreeSet};

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

    /// The series of EMF documents as CloudWatch makes them: per directive, dimension set and
    /// metric, the metric name with the set's dimension values.
    fn series(docs: &[Value]) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for doc in docs {
            for d in doc["_aws"]["CloudWatchMetrics"].as_array().unwrap() {
                for set in d["Dimensions"].as_array().unwrap() {
                    let dims: Vec<String> = set
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|n| {
                            let n = n.as_str().unwrap();
                            format!("{n}={}", doc[n].as_str().unwrap())
                        })
                        .collect();
                    for m in d["Metrics"].as_array().unwrap() {
                        let name = m["Name"].as_str().unwrap();
                        out.insert(format!("{name} {}", dims.join(",")));
                    }
                }
            }
        }
        out
    }

    fn to_docs(records: &[Record]) -> Vec<Value> {
        records.iter().map(|r| emf(r, at())).collect()
    }

    fn sample(records: &[Record], name: &str) -> Option<f64> {
        records
            .iter()
            .filter(|r| r.dimensions.is_empty())
            .flat_map(|r| &r.samples)
            .find(|s| s.name == name)
            .map(|s| s.value)
    }

    fn pass() -> PoolPass {
        PoolPass {
            per_pool: false,
            halted: true,
            up_to_date: false,
            drifted: 4,
            in_flight: 2,
            started: 2,
            finished: 1,
            failed: 1,
            repair_suspended: false,
            backing_off: false,
            retained: 2,
            health: None,
            rollout: Some(crate::rollout::Counts {
                desired_capacity: 6,
                nodes: 7,
                up_to_date: 3,
                ready: 6,
                up_to_date_and_ready: 2,
            }),
        }
    }

    #[test]
    fn a_rotator_pass_is_one_cell_document_and_one_per_budget_reason() {
        let (a, b) = (pass(), PoolPass::default());
        let allowed = Allowed {
            drifted: 0,
            expired: 1,
            unhealthy: 1,
        };
        let pools = [
            PoolMetrics {
                pool: "prod/general",
                pass: &a,
                allowed: Some(&allowed),
            },
            PoolMetrics {
                pool: "prod/gpu",
                pass: &b,
                allowed: None,
            },
        ];
        let records = rotator_pass(&pools, 1);
        assert_eq!(records.len(), 3);
        let docs = to_docs(&records);
        for d in &docs {
            assert_valid_emf(d);
            assert!(d.get("Pool").is_none(), "no pool dimension by default: {d}");
        }
        let cell = &docs[0];
        assert_eq!(cell["Pools"], 2.0);
        assert_eq!(cell["PoolsUpToDate"], 0.0);
        assert_eq!(cell["PoolsHalted"], 1.0);
        assert_eq!(cell["PoolsBudgetLimited"], 1.0);
        assert_eq!(cell["RotationsInFlight"], 2.0);
        assert_eq!(cell["RotationsStarted"], 2.0);
        assert_eq!(cell["DriftedNodes"], 4.0);
        assert_eq!(cell["RetainedInstances"], 2.0);
        assert_eq!(cell["ReleasesQuarantined"], 1.0);
        assert_eq!(
            cell["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "nodecycle"
        );
        assert_eq!(
            cell["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([[]])
        );
        assert_eq!(cell["_aws"]["Timestamp"], 1_790_000_000_000_i64);
        assert_eq!(
            (
                docs[1]["Reason"].as_str(),
                docs[1]["AllowedDisruptions"].as_f64()
            ),
            (Some("Drifted"), Some(0.0))
        );
        assert_eq!(
            docs[1]["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            json!([["Reason"]])
        );
        assert_eq!(docs[2]["AllowedDisruptions"], 1.0);
    }

    #[test]
    fn a_per_pool_pool_adds_its_own_documents_without_the_aggregate_set() {
        let a = PoolPass {
            per_pool: true,
            ..pass()
        };
        let allowed = Allowed::default();
        let pools = [PoolMetrics {
            pool: "prod/general",
            pass: &a,
            allowed: Some(&allowed),
        }];
        let records = rotator_pass(&pools, 0);
        let docs = to_docs(&records);
        let own: Vec<&Value> = docs.iter().filter(|d| d.get("Pool").is_some()).collect();
        assert_eq!(own.len(), 3, "{docs:?}");
        for d in &own {
            assert_valid_emf(d);
            for set in d["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
                .as_array()
                .unwrap()
            {
                assert!(set.as_array().unwrap().contains(&json!("Pool")), "{d}");
            }
        }
        assert_eq!(own[0]["PoolsHalted"], 1.0);
        assert_eq!(own[0]["RotationsFailed"], 1.0);
        assert_eq!(own[1]["Reason"], "Drifted");
        // The cell still counts it once.
        assert_eq!(sample(&records, "PoolsHalted"), Some(1.0));
    }

    #[test]
    fn a_pass_that_did_not_plan_reports_no_allowance() {
        let b = PoolPass::default();
        let records = rotator_pass(
            &[PoolMetrics {
                pool: "prod/general",
                pass: &b,
                allowed: None,
            }],
            0,
        );
        assert_eq!(records.len(), 1);
        let doc = emf(&records[0], at());
        assert_valid_emf(&doc);
        assert_eq!(doc["PoolsHalted"], 0.0);
        // No pool at all: still the cell document, zero pools.
        assert_eq!(sample(&rotator_pass(&[], 0), "Pools"), Some(0.0));
    }

    #[test]
    fn watcher_and_interruption_documents() {
        let pools = [
            WatchedPool {
                pool: "prod/general",
                failed: true,
                per_pool: false,
                days_to_deprecation: Some(40),
            },
            WatchedPool {
                pool: "prod/gpu",
                failed: true,
                per_pool: true,
                days_to_deprecation: Some(-3),
            },
            WatchedPool {
                pool: "prod/spot",
                failed: false,
                per_pool: false,
                days_to_deprecation: None,
            },
        ];
        let records = watcher_pass(&pools);
        assert_eq!(records.len(), 2);
        let docs = to_docs(&records);
        docs.iter().for_each(assert_valid_emf);
        assert_eq!(docs[0]["ResolutionFailures"], 2.0);
        assert_eq!(
            docs[0]["DaysToDeprecation"], -3.0,
            "the nearest over the pools"
        );
        assert_eq!(docs[1]["Pool"], "prod/gpu");
        assert_eq!(docs[1]["DaysToDeprecation"], -3.0);
        // No AMI with a deprecation time: no DaysToDeprecation at all.
        let none = [WatchedPool {
            days_to_deprecation: None,
            ..pools[0]
        }];
        assert_eq!(sample(&watcher_pass(&none), "DaysToDeprecation"), None);
        assert_eq!(sample(&watcher_pass(&[]), "ResolutionFailures"), Some(0.0));
        assert!(interruption_pass(&[]).is_empty());
        let records = interruption_pass(&[("prod/spot", 2, false), ("prod/gpu", 1, true)]);
        let docs = to_docs(&records);
        docs.iter().for_each(assert_valid_emf);
        assert_eq!(docs[0]["InterruptionsHandled"], 3.0);
        assert!(docs[0].get("Pool").is_none());
        assert_eq!(
            (
                docs[1]["Pool"].as_str(),
                docs[1]["InterruptionsHandled"].as_f64()
            ),
            (Some("prod/gpu"), Some(1.0))
        );
        assert_eq!(docs.len(), 2);
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
                started: 2,
                finished: 1,
                failed: 1,
                ..PoolPass::default()
            }
        );
    }

    #[test]
    fn a_release_under_watch_has_its_health_in_the_cell_and_per_pool() {
        let watched = |rate: f64, per_pool: bool| PoolPass {
            per_pool,
            health: Some(crate::promotion::health::Summary {
                release: "v20241109".into(),
                unhealthy_nodes: 3,
                failure_rate_new: Some(rate),
                failure_rate_old: None,
            }),
            ..PoolPass::default()
        };
        let (a, b) = (watched(0.4, false), watched(0.1, true));
        let pools = [
            PoolMetrics {
                pool: "prod/general",
                pass: &a,
                allowed: None,
            },
            PoolMetrics {
                pool: "prod/gpu",
                pass: &b,
                allowed: None,
            },
        ];
        let records = rotator_pass(&pools, 0);
        assert_eq!(sample(&records, "UnhealthyNodes"), Some(6.0));
        assert_eq!(sample(&records, "PodStartFailurePercentNew"), Some(40.0));
        assert_eq!(sample(&records, "PodStartFailurePercentOld"), None);
        let docs = to_docs(&records);
        docs.iter().for_each(assert_valid_emf);
        let own = docs.iter().find(|d| d.get("Release").is_some()).unwrap();
        assert_eq!(own["Pool"], "prod/gpu");
        assert_eq!(own["Release"], "v20241109");
        assert_eq!(own["PodStartFailurePercentNew"], 10.0);
        // Not under watch: no health document.
        let c = PoolPass::default();
        let records = rotator_pass(
            &[PoolMetrics {
                pool: "prod/general",
                pass: &c,
                allowed: None,
            }],
            0,
        );
        assert_eq!(sample(&records, "UnhealthyNodes"), None);
    }

    /// What a simulated day emits: `pools` pools, the first `per_pool` of them with
    /// `metrics.perPool: true`; the rotator every minute, the ami-watcher every 15 minutes, 20
    /// interruptions. During the day a release rolls out (every pool drifted for a while, some
    /// waiting on budgets, rotations started, finished and one failed, a pool halted), two
    /// releases are watched (the second quarantined), a pool has retained instances, one its
    /// repairs suspended, one backs off, one fails to resolve. The EMF documents, in order.
    fn day(pools: usize, per_pool: usize) -> Vec<Value> {
        let names: Vec<String> = (0..pools)
            .map(|i| format!("c{}/pool-{i}", i / 100))
            .collect();
        let mut out = Vec::new();
        let watch = |release: &str, rate: f64| crate::promotion::health::Summary {
            release: release.into(),
            unhealthy_nodes: 1,
            failure_rate_new: Some(rate),
            failure_rate_old: Some(0.01),
        };
        for minute in 0..24 * 60 {
            let hour = minute / 60;
            let passes: Vec<(PoolPass, Option<Allowed>)> = (0..pools)
                .map(|i| {
                    let rolling = hour >= 2 && hour < 3 + i % 10;
                    let backing_off = i == 5 && hour == 14;
                    let pass = PoolPass {
                        per_pool: i < per_pool,
                        halted: i == 7 && (5..7).contains(&hour),
                        up_to_date: !rolling,
                        drifted: if rolling { 3 } else { 0 },
                        in_flight: u32::from(rolling),
                        started: u32::from(rolling && minute % 10 == 0),
                        finished: u32::from(rolling && minute % 10 == 5),
                        failed: u32::from(i == 7 && minute == 5 * 60),
                        repair_suspended: i == 4 && hour == 13,
                        backing_off,
                        retained: u32::from(i == 3 && hour == 12),
                        health: match hour {
                            2..=4 if i < 10 => Some(watch("v1", 0.02)),
                            8..=9 if i < 3 => Some(watch("v2", 0.5)),
                            _ => None,
                        },
                        rollout: Some(crate::rollout::Counts {
                            desired_capacity: 6,
                            nodes: 6,
                            up_to_date: if rolling { 3 } else { 6 },
                            ready: 6,
                            up_to_date_and_ready: if rolling { 3 } else { 6 },
                        }),
                    };
                    let allowed = (!backing_off).then_some(Allowed {
                        drifted: u32::from(i % 3 != 0),
                        expired: 1,
                        unhealthy: 1,
                    });
                    (pass, allowed)
                })
                .collect();
            let metrics: Vec<PoolMetrics<'_>> = passes
                .iter()
                .zip(&names)
                .map(|((pass, allowed), pool)| PoolMetrics {
                    pool,
                    pass,
                    allowed: allowed.as_ref(),
                })
                .collect();
            out.extend(to_docs(&rotator_pass(&metrics, usize::from(hour >= 10))));
            if minute % 15 == 0 {
                let watched: Vec<WatchedPool<'_>> = names
                    .iter()
                    .enumerate()
                    .map(|(i, pool)| WatchedPool {
                        pool,
                        failed: i == 6 && hour == 15,
                        per_pool: i < per_pool,
                        // Public EKS AMIs deprecate two years after they are built.
                        days_to_deprecation: Some(700 - i64::try_from(i).unwrap_or(0)),
                    })
                    .collect();
                out.extend(to_docs(&watcher_pass(&watched)));
            }
            if minute % 72 == 0 {
                let i = minute / 72 % pools;
                out.extend(to_docs(&interruption_pass(&[(&names[i], 1, i < per_pool)])));
            }
        }
        out
    }

    /// Series a pool with `metrics.perPool: true` adds: 13 rotator counters, `AllowedDisruptions`
    /// for 2 reasons, `ResolutionFailures`, `DaysToDeprecation`, `InterruptionsHandled` once it had one, and 3 per
    /// release watched in it.
    fn per_pool_series(interrupted: bool, releases: usize) -> usize {
        13 + 2 + 2 + usize::from(interrupted) + 3 * releases
    }

    #[test]
    fn a_simulated_day_emits_a_few_cell_series_whatever_the_pool_count() {
        for pools in [50, 500] {
            let docs = day(pools, 0);
            docs.iter().for_each(assert_valid_emf);
            let series = series(&docs);
            let bytes: usize = docs.iter().map(|d| d.to_string().len() + 1).sum();
            eprintln!(
                "{pools} pools, defaults: {} series, {} EMF documents, {bytes} bytes a day",
                series.len(),
                docs.len()
            );
            assert_eq!(series.len(), CELL_SERIES, "{series:#?}");
            assert!(series.len() <= 30);
            // Exactly the names of EMITTED, none other.
            let names: BTreeSet<&str> = series.iter().filter_map(|s| s.split(' ').next()).collect();
            assert_eq!(names, EMITTED.iter().copied().collect::<BTreeSet<_>>());
        }
    }

    #[test]
    fn per_pool_pools_add_their_own_series() {
        let docs = day(50, 5);
        let series = series(&docs);
        let mut by_pool: BTreeMap<String, usize> = BTreeMap::new();
        for s in &series {
            if let Some(pool) = s.split("Pool=").nth(1) {
                let pool = pool.split(',').next().unwrap_or_default().to_string();
                *by_pool.entry(pool).or_default() += 1;
            }
        }
        eprintln!(
            "50 pools, 5 with perPool: {} series ({by_pool:?})",
            series.len()
        );
        // Pools 0 to 4 were each interrupted and watched v1; 0 to 2 watched v2 as well.
        let expected: BTreeMap<String, usize> = (0..5)
            .map(|i| {
                let releases = if i < 3 { 2 } else { 1 };
                (format!("c0/pool-{i}"), per_pool_series(true, releases))
            })
            .collect();
        assert_eq!(by_pool, expected);
        assert_eq!(series.len(), CELL_SERIES + expected.values().sum::<usize>());
    }
}
