//! Scale: one rotator pass over many pools with 20 ms added to every AWS call and 10 ms to
//! every Kubernetes call in the fake cloud, and 2% of the AWS calls throttled. The pass must
//! serve every pool within the invocation (none deferred for lack of time, none failed, the
//! throttles retried), and its calls must grow with pools and pages, not with nodes. Prints
//! the pass time and the call counts per operation.
//!
//! Default size 5 clusters x 40 pools x 3 nodes (200 pools: a wide margin under the timeout on a
//! slow CI machine; moto serves about 100 calls a second on 2 cores, whatever the latency).
//! `NODECYCLE_SCALE=<clusters>x<pools>x<nodes>` runs another size (5x100x100: 50,000 instances,
//! seeded through the fake cloud's `seed_groups`), `NODECYCLE_SCALE_LATENCY_MS=<aws>,<kube>` other
//! latencies; docs/development.md, *Scale*, has the measured figures and where the limit of one
//! invocation lies.

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pass_serves_every_pool_in_time_with_calls_growing_with_pools_not_nodes() {
    let (clusters, pools, nodes) = size();
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
    cloud.register_image(
        ImageFixture::new("golden-2")
            .owner("self")
            .created("2024-06-01T00:00:00Z"),
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
    // Every pool learns of golden-2 (the watcher is not what is measured here).
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

    let rotator = RotatorHandler {
        kube: Arc::new(EksConnector::new(config.clone())),
        settings: Settings::default(),
        ..a.rotator(&cloud, policies, table).await
    };
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
    let started = Instant::now();
    let report = rotator
        .handle_invocation(
            &json!({}),
            chrono::Utc::now(),
            Instant::now() + TIMEOUT,
            Some("scale-test"),
        )
        .await
        .unwrap();
    let took = started.elapsed();
    let stats = cloud.fault_stats();
    cloud.clear_faults();

    let total_pools = (clusters * pools) as u64;
    let total_nodes = (clusters * pools * nodes) as u64;
    let by_op: BTreeMap<&str, u64> = stats
        .aws
        .by_operation
        .iter()
        .map(|(op, s)| (op.as_str(), s.calls))
        .collect();
    let kube_by_op: BTreeMap<&str, u64> = stats
        .kube
        .by_operation
        .iter()
        .map(|(op, s)| (op.as_str(), s.calls))
        .collect();
    println!(
        "pass over {total_pools} pools / {total_nodes} nodes: {:.1} s (timeout {} s), {} AWS calls ({} throttled), {} Kubernetes calls",
        took.as_secs_f64(),
        TIMEOUT.as_secs(),
        stats.aws.calls,
        stats.aws.failed,
        stats.kube.calls
    );
    println!("AWS calls per operation: {by_op:#?}");
    println!("Kubernetes calls per operation: {kube_by_op:#?}");
    let reports = report["pools"].as_array().unwrap();
    // Served: no error and only its budget stopped it (not deferred for lack of time).
    let served = reports
        .iter()
        .filter(|r| {
            r["errors"].as_array().is_none_or(|e| e.is_empty())
                && r["blocked"]
                    .as_str()
                    .is_some_and(|b| b.starts_with("Drifted budget 0"))
        })
        .count();
    println!("pools served: {served} of {total_pools}");
    assert_eq!(reports.len(), clusters * pools, "every pool reported");
    for (cluster, status) in report["clusters"].as_object().unwrap() {
        assert_eq!(status, "done", "{cluster}");
    }
    for r in reports {
        assert!(
            r["errors"].as_array().unwrap().is_empty(),
            "a pool failed: {r}"
        );
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
    }

    // Calls grow with pools and pages, not nodes: a constant per pool (observe, plan, one
    // start with its surge, records) plus the retried throttles.
    let per_pool = (stats.aws.calls - stats.aws.failed) as f64 / total_pools as f64;
    // 22: observe, plan, one start with its surge, records, plus the Cluster Autoscaler work's
    // SuspendProcesses and the architecture check's DescribeInstanceTypes (one each a pool).
    assert!(
        per_pool <= 22.0,
        "{per_pool:.1} AWS calls per pool: more than observe + one start need"
    );
    // Nodes listed once per cluster; pods per candidate node for at most 8 candidates of a
    // pool, else once per cluster; plus the started rotation's node lookup and Event.
    assert!(
        stats.kube.calls <= total_pools * 11 + clusters as u64 * 50,
        "{} Kubernetes calls for {total_pools} pools: the nodes and pods must be listed per cluster, not per node",
        stats.kube.calls
    );
}
