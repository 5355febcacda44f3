//! Scale: rotator passes over many pools with 20 ms added to every AWS call and 10 ms to
//! every Kubernetes call in the fake cloud, and 2% of the AWS calls throttled. First a steady
//! pass (every pool current: nothing to do), then a moving pass (a new AMI: every launch
//! template moves and a rotation starts in every pool). Each pass must serve every pool within
//! the invocation (none deferred for lack of time, none failed, the throttles retried), and its
//! calls must grow with pools and pages, not with nodes: the AWS calls per pool of each pass
//! are printed and held to a ceiling (steady: at most one, the cluster's batched reads with
//! the pools' records among them; moving: six), with the calls per operation, the Kubernetes
//! calls, the pass time and the process's peak RSS.
//!
//! Default size 5 clusters x 40 pools x 3 nodes (200 pools: a wide margin under the timeout on a
//! slow CI machine). `NODECYCLE_SCALE=<clusters>x<pools>x<nodes>` runs another size (5x100x100:
//! 50,000 instances, seeded through the fake cloud's `seed_groups`; opt-in, minutes),
//! `NODECYCLE_SCALE_LATENCY_MS=<aws>,<kube>` other latencies; docs/development.md, *Scale*, has
//! the measured figures and the commands.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodecycle::handlers::Invocation;
use nodecycle::handlers::rotator::{EksConnector, RotatorHandler, Settings};
use nodecycle_tests::{
    AwsFault, AwsFaults, FakeCloud, Faults, GroupSeed, ImageFixture, KubeFaults,
};
use serde_json::json;
use support::Adapters;

/// The Lambda's timeout for the rotator (template.yaml).
const TIMEOUT: Duration = Duration::from_secs(120);

fn size() -> (usize, usize, usize) {
    let text = std::env::var("NODECYCLE_SCALE").unwrap_or_else(|_| "5x40x3".into());
    let parts: Vec<usize> = text.split('x').map(|p| p.trim().parse().unwrap()).collect();
    assert_eq!(
        parts.len(),
        3,
        "NODECYCLE_SCALE=<clusters>x<pools>x<nodes>, got {text}"
    );
    (parts[0], parts[1], parts[2])
}

/// A seeded fleet: `clusters` clusters of `pools` self-managed pools of `nodes` nodes each, on
/// golden-1, every pool resolved to golden-1 (current).
struct Fleet {
    cloud: FakeCloud,
    a: Arc<Adapters>,
    rotator: RotatorHandler,
    watcher: nodecycle::handlers::ami_watcher::AmiWatcher,
    _kubes: Vec<nodecycle_tests::KubeStandIn>,
}

impl Fleet {
    async fn seed(clusters: usize, pools: usize, nodes: usize) -> Fleet {
        let cloud = FakeCloud::start();
        // The SDK configuration the Lambda uses: its retries absorb the throttling.
        let config = cloud
            .sdk_config()
            .await
            .into_builder()
            .retry_config(
                aws_config::retry::RetryConfig::standard()
                    .with_max_attempts(nodecycle::aws::MAX_ATTEMPTS),
            )
            .build();
        let a = Arc::new(Adapters::from_config(&config));
        let old = cloud.register_image(
            ImageFixture::new("golden-1")
                .owner("self")
                .created("2024-01-01T00:00:00Z"),
        );

        let seeding = Instant::now();
        let mut kubes = Vec::new();
        let mut subnets = Vec::new();
        for c in 0..clusters {
            let cluster = format!("c{c}");
            cloud.create_cluster(&cluster, "1.30");
            kubes.push(cloud.create_kube(&cluster));
            // A VPC per cluster, as EKS clusters have: 32,000 addresses, so node names (from
            // private IPs) stay unique at 10,000 nodes a cluster.
            subnets.push(
                a.create_subnet(&format!("10.{c}.0.0/16"), &format!("10.{c}.0.0/17"))
                    .await,
            );
        }
        // The groups through the fake cloud's bulk op (moto makes them from the same requests the
        // SDK would send, in process), one call per cluster; each cluster's stand-in registers a
        // Node per instance once (no background sync: the pass, not the emulator, is measured).
        let desired = u32::try_from(nodes).unwrap();
        let mut seeded_in = 0.0;
        for (c, subnet) in subnets.iter().enumerate() {
            let cluster = format!("c{c}");
            let groups: Vec<GroupSeed> = (0..pools)
                .map(|p| {
                    GroupSeed::new(&format!("{cluster}-p{p}"), &old, desired)
                        .max(desired + 2)
                        .subnet(subnet)
                        .cluster(&cluster)
                        // Opted in: the rotator writes versions only of templates tagged so.
                        .template_tag("eks:cluster-name", &cluster)
                        .template_tag(
                            nodecycle::opt_in::MANAGED_TAG,
                            nodecycle::opt_in::MANAGED_VALUE,
                        )
                })
                .collect();
            let seeded = cloud.seed_groups(&groups, true);
            assert_eq!(seeded.instances, pools * nodes, "{cluster}: {seeded:?}");
            assert_eq!(
                seeded.nodes.get(&cluster).copied(),
                Some(pools * nodes),
                "{cluster}: every instance a node"
            );
            seeded_in += seeded.seconds;
        }
        for c in 0..clusters {
            for p in 0..pools {
                cloud.put_parameter(
                &format!("/nodecycle/pools/c{c}/p{p}"),
                &format!(
                    "cluster: c{c}\nname: p{p}\nnodeGroup: {{ autoScalingGroup: c{c}-p{p} }}\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"1\"\n"
                ),
            );
            }
        }
        let table = a.table("nodecycle").await;
        let policies = a.policies();
        // Every pool learns of golden-1, the image its nodes run (the watcher is not measured).
        let watcher = a.watcher(policies.clone(), table.clone());
        let resolved = watcher
            .handle(&json!({}), chrono::Utc::now())
            .await
            .unwrap();
        assert_eq!(
            resolved["pools"].as_array().unwrap().len(),
            clusters * pools
        );
        println!(
            "seeded {clusters} clusters x {pools} pools x {nodes} nodes in {:.1} s ({seeded_in:.1} s in seed_groups)",
            seeding.elapsed().as_secs_f64()
        );

        let mut rotator = RotatorHandler {
            settings: Settings::default(),
            ..a.rotator(&cloud, policies, table).await
        };
        rotator.ports.kube = Arc::new(EksConnector::new(config.clone()));
        Fleet {
            cloud,
            a,
            rotator,
            watcher,
            _kubes: kubes,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_and_moving_passes_serve_every_pool_in_time_with_calls_growing_with_pools_not_nodes()
{
    let (clusters, pools, nodes) = size();
    let Fleet {
        cloud,
        a,
        rotator,
        watcher,
        ..
    } = Fleet::seed(clusters, pools, nodes).await;
    let total_pools = (clusters * pools) as u64;
    let total_nodes = (clusters * pools * nodes) as u64;

    // Steady: every pool current. The first pass records that each pool runs one release (the
    // soak ledger: a write per pool, once per release); the next is what every minute costs.
    let (report, _) =
        measured_pass(&cloud, &rotator, "first steady", total_pools, total_nodes).await;
    every_pool(&report, clusters * pools);
    let (report, steady) =
        measured_pass(&cloud, &rotator, "steady", total_pools, total_nodes).await;
    for r in every_pool(&report, clusters * pools) {
        assert!(
            r["started"].as_array().unwrap().is_empty() && r["launchTemplate"].is_null(),
            "a current pool moved: {r}"
        );
    }

    // The ami-watcher's run (every 15 minutes) when nothing is new, counted for the cost (no
    // added latency: its calls, not its time, are what is used).
    cloud.faults(Faults::new().aws(AwsFaults::new(0.0)));
    let started = Instant::now();
    watcher
        .handle(&json!({}), chrono::Utc::now())
        .await
        .unwrap();
    let took = started.elapsed();
    let stats = cloud.fault_stats();
    cloud.clear_faults();
    let by_op: BTreeMap<&str, u64> = stats
        .aws
        .by_operation
        .iter()
        .map(|(op, s)| (op.as_str(), s.calls))
        .collect();
    println!(
        "steady ami-watcher run over {total_pools} pools: {:.1} s, {} AWS calls: {by_op:?}",
        took.as_secs_f64(),
        stats.aws.calls
    );

    // Moving: golden-2 comes; every template moves and one rotation starts per pool.
    cloud.register_image(
        ImageFixture::new("golden-2")
            .owner("self")
            .created("2024-06-01T00:00:00Z"),
    );
    watcher
        .handle(&json!({}), chrono::Utc::now())
        .await
        .unwrap();
    let (report, moving) =
        measured_pass(&cloud, &rotator, "moving", total_pools, total_nodes).await;
    for r in every_pool(&report, clusters * pools) {
        // Only its budget stops a pool: none was deferred for lack of time or left unread.
        let blocked = r["blocked"].as_str().unwrap_or("Drifted budget");
        assert!(
            blocked.starts_with("Drifted budget 0"),
            "a pool was not served: {r}"
        );
        assert_eq!(
            r["started"].as_array().unwrap().len(),
            1,
            "budget 1: one rotation per drifted pool: {r}"
        );
        assert!(r["launchTemplate"].is_string(), "template not moved: {r}");
    }

    item_sizes(&a).await;

    // Calls grow with pools and pages, not nodes. Steady: the pools' records in batches (100
    // a call; their rotation indexes name no rotation), a Query only for the quarantine and
    // the pools whose hourly index check falls in this minute, everything shared by the
    // cluster's pools: at most one call per pool.
    let queries = steady.by_op.get("dynamodb:Query").copied().unwrap_or(0);
    assert!(
        queries <= steady.index_checks + 1,
        "steady pass: {queries} Queries for {} pools due for their index check",
        steady.index_checks
    );
    // The Region's instance statuses: one read a pass for all its clusters, 1,000 a call.
    assert_eq!(
        steady.by_op.get("ec2:DescribeInstanceStatus").copied(),
        Some(((clusters * pools * nodes).div_ceil(1000)) as u64),
        "{:?}",
        steady.by_op
    );
    let ceiling = shared_ceiling(clusters, pools, nodes);
    assert!(
        steady.other_than_records() <= ceiling,
        "steady pass: {} AWS calls besides the pools' records, more than the {ceiling} the batched reads need: {:?}",
        steady.other_than_records(),
        steady.by_op
    );
    assert!(
        steady.per_pool() <= 1.0,
        "steady pass: {:.2} AWS calls per pool",
        steady.per_pool()
    );
    // Moving: per pool the template's new version (from the pass's read of it), one
    // transaction recording the rotation at Surging with its surge's intent and the pool
    // record (from the version the pass read) with the process hold, SuspendProcesses, the
    // capacity raise on a fresh read of the group: 5, all writes or the read a write depends
    // on; the events put 10 a call and their outboxes cleared in one transaction per cluster,
    // the records read in batches. Then the pool's rollout status, which a moving pass
    // changes: the SSM parameter, the pool record read and written with its conditions'
    // events, those events put and their outbox cleared: 6 more (docs/development.md).
    assert!(
        moving.per_pool() <= 12.0,
        "moving pass: {:.2} AWS calls per pool",
        moving.per_pool()
    );
    let writes = ["dynamodb:PutItem", "dynamodb:TransactWriteItems"]
        .iter()
        .map(|op| moving.by_op.get(*op).copied().unwrap_or(0))
        .sum::<u64>();
    // One write per pool for its rotation, two more for its changed rollout status (the
    // record with its events staged, then the outbox cleared once they were put).
    assert!(
        writes <= 3 * total_pools + 4 * clusters as u64,
        "moving pass: {writes} table writes for {total_pools} pools: {:?}",
        moving.by_op
    );
    // Release health: nothing in a steady pass (no release under watch); while one is (the
    // moving pass: every pool's desired AMI just changed), one list of the cluster's pods (the
    // evictable counts come from it too) and one of the sandbox failures' Events per cluster.
    assert_eq!(
        steady.most_per_cluster("list events"),
        0,
        "{:?}",
        steady.kube_by_op
    );
    assert_eq!(
        steady.most_per_cluster("list pods"),
        0,
        "{:?}",
        steady.kube_by_op
    );
    assert_eq!(
        moving.most_per_cluster("list events"),
        1,
        "{:?}",
        moving.kube_by_op
    );
    assert_eq!(
        moving.most_per_cluster("list pods"),
        1,
        "{:?}",
        moving.kube_by_op
    );
    // Nodes listed once per cluster; pods per candidate node for at most 8 candidates of a
    // pool, else once per cluster; plus the started rotation's node lookup and Event.
    for m in [&steady, &moving] {
        assert!(
            m.kube_calls <= total_pools * 11 + clusters as u64 * 50,
            "{} Kubernetes calls for {total_pools} pools: the nodes and pods must be listed per cluster, not per node",
            m.kube_calls
        );
    }
}

/// A group the batched read does not find (deleted behind nodecycle's back) is its own pool's
/// report; the other pools of the batch are served. The batched reads' first tries are
/// throttled: retried, they slow the pass, never fail it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_missing_from_the_batch_is_its_pools_report_and_throttled_batches_are_retried() {
    let f = Fleet::seed(1, 4, 1).await;
    f.cloud.register_image(
        ImageFixture::new("golden-2")
            .owner("self")
            .created("2024-06-01T00:00:00Z"),
    );
    f.watcher
        .handle(&json!({}), chrono::Utc::now())
        .await
        .unwrap();
    f.a.clients
        .autoscaling
        .delete_auto_scaling_group()
        .auto_scaling_group_name("c0-p1")
        .force_delete(true)
        .send()
        .await
        .unwrap();
    let batched = [
        "autoscaling:DescribeAutoScalingGroups",
        "ec2:DescribeInstances",
        "ec2:DescribeLaunchTemplateVersions",
    ];
    f.cloud.faults(
        Faults::new().seed(3).aws(
            AwsFaults::new(1.0)
                .kinds(&[AwsFault::Throttle])
                .operations(&batched)
                .limit(3),
        ),
    );
    let report = f
        .rotator
        .handle(
            &json!({}),
            Invocation {
                request_id: Some("missing-group"),
                ..Invocation::at(chrono::Utc::now(), Instant::now() + TIMEOUT)
            },
        )
        .await
        .unwrap();
    let stats = f.cloud.fault_stats();
    f.cloud.clear_faults();
    assert_eq!(
        stats.aws.failed, 3,
        "the batched reads were throttled: {stats:?}"
    );
    assert_eq!(report["clusters"]["c0"], "done", "{report}");
    let reports = report["pools"].as_array().unwrap();
    assert_eq!(reports.len(), 4, "{report}");
    for r in reports {
        let errors = r["errors"].as_array().unwrap();
        if r["pool"] == "c0/p1" {
            assert!(
                errors
                    .iter()
                    .any(|e| e.as_str().unwrap().contains("c0-p1 does not exist")),
                "the missing group is its pool's report: {r}"
            );
            assert!(r["started"].as_array().unwrap().is_empty(), "{r}");
        } else {
            assert!(
                errors.is_empty(),
                "another pool paid for the missing group: {r}"
            );
            assert_eq!(r["started"].as_array().unwrap().len(), 1, "not served: {r}");
        }
    }
}

/// One pass's counts.
struct Measured {
    pools: u64,
    /// AWS calls answered (retried throttles not counted).
    calls: u64,
    by_op: BTreeMap<String, u64>,
    kube_calls: u64,
    /// Kubernetes calls by `<cluster>:<verb> <resource>`.
    kube_by_op: BTreeMap<String, u64>,
    /// Pools whose partition the pass queries to check their rotation index
    /// ([`nodecycle::state::index_check_due`]).
    index_checks: u64,
}

impl Measured {
    /// The most calls of `<verb> <resource>` one cluster made.
    fn most_per_cluster(&self, op: &str) -> u64 {
        self.kube_by_op
            .iter()
            .filter(|(k, _)| k.split_once(':').is_some_and(|(_, o)| o == op))
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0)
    }

    fn per_pool(&self) -> f64 {
        self.calls as f64 / self.pools as f64
    }

    /// Calls that are not the pools' records: not their batched reads, not the Queries of
    /// the pools due for their index check.
    fn other_than_records(&self) -> u64 {
        let op = |name: &str| self.by_op.get(name).copied().unwrap_or(0);
        let queries = op("dynamodb:Query").min(self.index_checks);
        self.calls - queries - op("dynamodb:BatchGetItem")
    }
}

/// The calls a steady pass may make besides the pools' records (see
/// [`Measured::other_than_records`]), all shared: per cluster its
/// lease (taken and given back), the stop switch, its Kubernetes endpoint, its groups (100 a
/// call), their instances (1,000 a page), two listings of the Region's templates (200 a page);
/// per pass the policies (10 a page), the quarantine and the Region's instance statuses (1,000
/// a call, shared by the clusters of the place; repair).
fn shared_ceiling(clusters: usize, pools: usize, nodes: usize) -> u64 {
    let templates = (clusters * pools).div_ceil(200);
    // The Region's instance statuses (repair), 1,000 a call, read once a pass for every
    // cluster of the place.
    let statuses = (clusters * pools * nodes).div_ceil(1000);
    let per_cluster =
        2 + 2 + 1 + pools.div_ceil(100) + (pools * nodes).div_ceil(1000) + 2 * templates;
    (clusters * per_cluster + (clusters * pools).div_ceil(10) + 2 + statuses) as u64
}

/// The pass's reports, one per pool, none with an error.
fn every_pool(report: &serde_json::Value, pools: usize) -> Vec<serde_json::Value> {
    let reports = report["pools"].as_array().unwrap().clone();
    assert_eq!(reports.len(), pools, "every pool reported");
    for (cluster, status) in report["clusters"].as_object().unwrap() {
        assert_eq!(status, "done", "{cluster}");
    }
    for r in &reports {
        assert!(
            r["errors"].as_array().unwrap().is_empty(),
            "a pool failed: {r}"
        );
    }
    reports
}

/// Prints the size of the table's items by kind (sort key up to `#`), as DynamoDB counts an
/// item's size (attribute names and values), for the read and write units of a pass.
async fn item_sizes(a: &Adapters) {
    let mut sizes: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut pages = a
        .clients
        .dynamodb
        .scan()
        .table_name("nodecycle")
        .into_paginator()
        .items()
        .send();
    while let Some(item) = pages.next().await {
        let item = item.unwrap();
        let kind = item
            .get("sk")
            .and_then(|v| v.as_s().ok())
            .map(|sk| sk.split('#').next().unwrap_or("").to_string())
            .unwrap_or_default();
        let bytes: usize = item
            .iter()
            .map(|(name, value)| {
                name.len()
                    + match value {
                        aws_sdk_dynamodb::types::AttributeValue::S(s) => s.len(),
                        aws_sdk_dynamodb::types::AttributeValue::N(n) => n.len().div_ceil(2) + 1,
                        _ => 8,
                    }
            })
            .sum();
        let entry = sizes.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += bytes as u64;
    }
    for (kind, (count, bytes)) in sizes {
        println!(
            "items {kind}: {count}, {:.0} bytes on average",
            bytes as f64 / count as f64
        );
    }
}

/// Peak resident set of this process (the rotator runs in it), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU seconds (user + system) the process `pid` (this one for `None`) has used so far.
fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_string(),
        |p| format!("/proc/{p}/stat"),
    );
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// One pass under the added latency and throttling, measured and printed.
async fn measured_pass(
    cloud: &FakeCloud,
    rotator: &RotatorHandler,
    label: &str,
    total_pools: u64,
    total_nodes: u64,
) -> (serde_json::Value, Measured) {
    let (aws_ms, kube_ms) = match std::env::var("NODECYCLE_SCALE_LATENCY_MS") {
        Ok(t) => {
            let (a, k) = t.split_once(',').unwrap();
            (a.parse().unwrap(), k.parse().unwrap())
        }
        Err(_) => (20, 10),
    };
    cloud.faults(
        Faults::new()
            .seed(15)
            .aws(
                AwsFaults::new(0.02)
                    .kinds(&[AwsFault::Throttle])
                    .delay_ms(aws_ms),
            )
            .kube(KubeFaults::new(0.0).delay_ms(kube_ms)),
    );
    let cpu_before = (cpu_seconds(None), cpu_seconds(Some(cloud.pid())));
    let started = Instant::now();
    let now = chrono::Utc::now();
    let report = rotator
        .handle(
            &json!({}),
            Invocation {
                request_id: Some(&format!("scale-{label}")),
                ..Invocation::at(now, Instant::now() + TIMEOUT)
            },
        )
        .await
        .unwrap();
    let took = started.elapsed();
    let cpu = |after: Option<f64>, before: Option<f64>| {
        after.zip(before).map_or(f64::NAN, |(a, b)| a - b)
    };
    let (rust_cpu, cloud_cpu) = (
        cpu(cpu_seconds(None), cpu_before.0),
        cpu(cpu_seconds(Some(cloud.pid())), cpu_before.1),
    );
    let stats = cloud.fault_stats();
    cloud.clear_faults();
    let by_op: BTreeMap<String, u64> = stats
        .aws
        .by_operation
        .iter()
        .map(|(op, s)| (op.clone(), s.calls - s.failed))
        .collect();
    let kube_by_op: BTreeMap<&str, u64> = stats
        .kube
        .by_operation
        .iter()
        .map(|(op, s)| (op.as_str(), s.calls))
        .collect();
    let index_checks = report["pools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| nodecycle::state::index_check_due(r["pool"].as_str().unwrap(), now))
        .count() as u64;
    let m = Measured {
        pools: total_pools,
        calls: stats.aws.calls - stats.aws.failed,
        by_op,
        kube_calls: stats.kube.calls,
        kube_by_op: kube_by_op
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        index_checks,
    };
    println!(
        "{label} pass over {total_pools} pools / {total_nodes} nodes (+{aws_ms} ms per AWS call, +{kube_ms} ms per Kubernetes call): {:.1} s (timeout {} s), {} AWS calls = {:.2} per pool ({:.2} besides the pools' records; {} throttled and retried), {} Kubernetes calls, peak RSS {:.0} MiB; CPU {rust_cpu:.1} s in the test process (the rotator), {cloud_cpu:.1} s in the fake cloud",
        took.as_secs_f64(),
        TIMEOUT.as_secs(),
        m.calls,
        m.per_pool(),
        m.other_than_records() as f64 / total_pools as f64,
        stats.aws.failed,
        m.kube_calls,
        peak_rss_mib().unwrap_or(f64::NAN),
    );
    println!("{label}: AWS calls per operation: {:#?}", m.by_op);
    println!("{label}: Kubernetes calls per operation: {kube_by_op:#?}");
    (report, m)
}
