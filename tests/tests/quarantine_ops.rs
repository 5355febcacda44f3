//! Operator quarantine and the promotion views end to end: `quarantine`/`unquarantine` and
//! `promotion` through the real ops handler, `status`, the real ami-watcher and rotator over
//! moto (Auto Scaling, EC2, SSM, EKS, DynamoDB, CloudWatch) and a Kubernetes stand-in per
//! cluster, on an injected clock. Two stages: `test/general` follows `al2023@latest`,
//! `prod/general` (another cluster) promotes what test has proven for 10 minutes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::handlers::rotator::RotatorHandler;
use nodecycle::handlers::{HandlerError, Invocation};
use nodecycle::rotation::Rotation;
use nodecycle::state::{self, PoolRecord, Store};
use nodecycle_tests::{FakeCloud, KubeStandIn, SyncNodes};
use serde_json::{Value, json};
use support::*;

const R0: &str = "v20241101";
const R1: &str = "v20241109";
const SOAK_MINUTES: i64 = 10;

struct Stages {
    cloud: FakeCloud,
    _kubes: Vec<KubeStandIn>,
    adapters: Adapters,
    table: Arc<Table>,
    watcher: AmiWatcher,
    rotator: RotatorHandler,
    operator: Operator,
    /// The x86_64 standard image of R0, what both groups launch at the start.
    r0: String,
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn policy(cluster: &str, promotion: &str) -> String {
    format!(
        "cluster: {cluster}\nname: general\nnodeGroup: {{ autoScalingGroup: {cluster}-general }}\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\ndisruption:\n  budgets:\n    - nodes: \"1\"\nterminationGracePeriod: 1m\n{promotion}"
    )
}

async fn stages(nodes: i32) -> Stages {
    let cloud = FakeCloud::start();
    let r0 = id_of(
        &publish_al2023(&cloud, "1.30", R0, "2024-11-01T00:00:00Z"),
        "x86_64",
        "standard",
    );
    let adapters = Adapters::new(&cloud).await;
    let mut kubes = Vec::new();
    for cluster in ["test", "prod"] {
        cloud.create_cluster(cluster, "1.30");
        let kube = cloud.create_kube(cluster);
        let group = format!("{cluster}-general");
        adapters
            .create_group(&group, &r0, "m5.large", nodes, nodes + 2, Some(cluster))
            .await;
        kube.sync_nodes(SyncNodes {
            asg: Some(group),
            ..SyncNodes::default()
        });
        kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
            (s.nodes.len() == nodes as usize).then_some(())
        });
        kubes.push(kube);
    }
    cloud.put_parameter("/nodecycle/pools/test/general", &policy("test", ""));
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &policy(
            "prod",
            &format!("promotion:\n  from: test/general\n  soak: {SOAK_MINUTES}m\n"),
        ),
    );
    let table = adapters.table("nodecycle").await;
    let policies = adapters.policies();
    let watcher = adapters.watcher(policies.clone(), table.clone());
    let rotator = adapters.rotator(&cloud, policies, table.clone()).await;
    let ops = adapters.ops(rotator.clone());
    Stages {
        cloud,
        _kubes: kubes,
        adapters,
        table,
        watcher,
        rotator,
        operator: Operator::new(ops),
        r0,
    }
}

impl Stages {
    /// Publishes R1 as the latest AL2023 release; returns its x86_64 standard image.
    fn publish_r1(&self) -> String {
        id_of(
            &publish_al2023(&self.cloud, "1.30", R1, "2024-11-09T00:00:00Z"),
            "x86_64",
            "standard",
        )
    }

    /// One ami-watcher pass, then one rotator pass, at `now`.
    async fn tick(&self, now: DateTime<Utc>) -> Value {
        self.watcher.handle(&json!({}), now).await.unwrap();
        self.pass(now).await
    }

    /// One rotator pass at `now`.
    async fn pass(&self, now: DateTime<Utc>) -> Value {
        let report = self
            .rotator
            .handle(
                &json!({}),
                Invocation::at(now, Instant::now() + Duration::from_secs(120)),
            )
            .await
            .unwrap();
        // Let the stand-ins register nodes for instances the pass launched.
        std::thread::sleep(Duration::from_millis(400));
        report
    }

    async fn record(&self, pool: &str) -> PoolRecord {
        state::Repository::new(self.table.clone())
            .pool(pool)
            .await
            .unwrap()
            .unwrap_or_default()
    }

    async fn desired(&self, pool: &str) -> Option<String> {
        self.record(pool).await.desired.map(|a| a.id)
    }

    async fn images(&self, cluster: &str) -> Vec<String> {
        self.adapters
            .group_images(&format!("{cluster}-general"))
            .await
    }

    async fn rotations(&self, pool: &str) -> Vec<Rotation> {
        self.table
            .query(&state::keys::pool_pk(pool), "ROT#")
            .await
            .unwrap()
            .into_iter()
            .map(|(_, v)| serde_json::from_value(v.value).unwrap())
            .collect()
    }

    /// Rotations of `pool` disrupting a node now (in flight, not waiting to start).
    async fn active(&self, pool: &str) -> usize {
        self.rotations(pool)
            .await
            .iter()
            .filter(|r| r.in_flight() && !r.waiting())
            .count()
    }

    async fn ops(&self, request: Value, now: DateTime<Utc>) -> Result<Value, HandlerError> {
        self.operator.request(request, now).await
    }

    async fn ok(&self, request: Value, now: DateTime<Utc>) -> Value {
        self.operator.ok(request, now).await
    }

    async fn status(&self, pool: &str, now: DateTime<Utc>) -> Value {
        self.ok(json!({"action": "status", "pool": pool}), now)
            .await
    }

    async fn quarantine_items(&self) -> Vec<(String, Value)> {
        self.table
            .query("QUARANTINE", "Q#")
            .await
            .unwrap()
            .into_iter()
            .map(|(sk, v)| (sk, v.value))
            .collect()
    }

    async fn audit(&self) -> Vec<Value> {
        self.table
            .query("QUARANTINE", "AUDIT#")
            .await
            .unwrap()
            .into_iter()
            .map(|(_, v)| v.value)
            .collect()
    }

    /// Ticks a minute apart until `done` (at most `max`), checking that no pool disrupts more
    /// nodes than its budget ("1") allows; returns the time of the tick that was done.
    async fn ticks_until<F>(&self, mut now: DateTime<Utc>, max: usize, done: F) -> DateTime<Utc>
    where
        F: AsyncFn(&Stages) -> bool,
    {
        for _ in 0..max {
            self.tick(now).await;
            for pool in ["test/general", "prod/general"] {
                let active = self.active(pool).await;
                assert!(active <= 1, "{pool}: budget 1 exceeded ({active})");
            }
            if done(self).await {
                return now;
            }
            now += chrono::Duration::minutes(1);
        }
        panic!(
            "not done after {max} ticks: test {:?} prod {:?}; test {:#?} prod {:#?}",
            self.images("test").await,
            self.images("prod").await,
            self.record("test/general").await,
            self.record("prod/general").await
        );
    }
}

fn all_on(images: &[String], ami: &str, n: usize) -> bool {
    images.len() == n && images.iter().all(|i| i == ami)
}

#[tokio::test]
async fn operator_quarantine_is_recorded_audited_idempotent_and_lifted() {
    let s = stages(2).await;
    let t0 = at("2026-12-01T10:00:00Z");
    s.tick(t0).await;
    let r1 = s.publish_r1();
    let t1 = t0 + chrono::Duration::minutes(1);
    s.watcher.handle(&json!({}), t1).await.unwrap();
    assert_eq!(
        s.desired("test/general").await.as_deref(),
        Some(r1.as_str())
    );
    assert_eq!(
        s.desired("prod/general").await.as_deref(),
        Some(s.r0.as_str())
    );

    // Status before: prod waits for test, whose R0 soaks; R1 is no candidate yet (test does
    // not run it); nothing is quarantined.
    let status = s.ok(json!({"action": "status"}), t1).await;
    assert_eq!(status["quarantine"], json!([]), "{status:#}");
    let prod = status["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pool"] == "prod/general")
        .unwrap();
    assert_eq!(prod["promotion"]["from"], "test/general", "{prod:#}");
    assert_eq!(prod["promotion"]["soak"], "10m");
    let candidates = prod["promotion"]["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 1, "{prod:#}");
    assert_eq!(candidates[0]["release"], R0);
    assert_eq!(candidates[0]["state"], "soaking");
    assert_eq!(candidates[0]["upstreamOnSince"], "2026-12-01T10:00:00Z");
    assert_eq!(candidates[0]["provenAt"], "2026-12-01T10:10:00Z");
    assert_eq!(prod["promotion"]["next"]["state"], "soaking");
    assert!(
        prod["promotionWait"]
            .as_str()
            .is_some_and(|w| w.contains("test/general")),
        "{prod:#}"
    );

    // Quarantine R1: recorded with who/why/when, audited under QUARANTINE; test desires it
    // and rolls back to R0 on the next rotator pass.
    let first = s
        .ok(
            json!({"action": "quarantine", "release": R1, "reason": "kubelet crash loop"}),
            t1,
        )
        .await;
    assert_eq!(first["changed"], true, "{first:#}");
    assert_eq!(first["quarantine"]["target"], json!({"release": R1}));
    assert_eq!(first["quarantine"]["cause"], "operator");
    assert_eq!(
        first["quarantine"]["by"],
        "arn:aws:iam::123456789012:user/alice"
    );
    let affected = first["affected"].as_array().unwrap();
    assert_eq!(affected.len(), 1, "{first:#}");
    assert_eq!(affected[0]["pool"], "test/general");
    assert_eq!(affected[0]["then"], "rollBack");
    assert_eq!(affected[0]["to"], s.r0.as_str());
    let items = s.quarantine_items().await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].0, format!("Q#REL#{R1}"));
    assert_eq!(items[0].1["reason"], "kubelet crash loop");
    assert_eq!(items[0].1["at"], "2026-12-01T10:01:00Z");
    assert_eq!(items[0].1["requestId"], "req-1");

    // Repeated later (another reason): the entry in force is returned unchanged.
    let t2 = t1 + chrono::Duration::minutes(5);
    let again = s
        .ok(
            json!({"action": "quarantine", "release": R1, "reason": "still bad"}),
            t2,
        )
        .await;
    assert_eq!(again["changed"], false, "{again:#}");
    assert_eq!(again["quarantine"], first["quarantine"]);
    assert_eq!(
        s.quarantine_items().await[0].1["at"],
        "2026-12-01T10:01:00Z"
    );

    // An invalid request is refused with every problem.
    let err = s
        .ops(
            json!({"action": "quarantine", "ami": "ami-1", "release": R1}),
            t2,
        )
        .await
        .unwrap_err();
    assert_eq!(err.error_type, "InvalidRequest");
    assert!(
        err.message
            .contains("ami, release: give one of them, not both")
    );
    assert!(err.message.contains("reason: required"));

    // Status lists the quarantine; the journey of R1 shows it and where it stands.
    let status = s.status("test/general", t2).await;
    let list = status["quarantine"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["reason"], "kubelet crash loop");
    let journey = s
        .ok(json!({"action": "promotion", "release": R1}), t2)
        .await;
    assert_eq!(journey["quarantined"].as_array().unwrap().len(), 1);
    let pools: Vec<&str> = journey["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pool"].as_str().unwrap())
        .collect();
    assert_eq!(pools, vec!["test/general", "prod/general"], "chain order");
    assert_eq!(journey["pools"][0]["state"], "rollingOut");
    assert_eq!(journey["pools"][1]["state"], "notReached");
    assert_eq!(journey["pools"][1]["from"], "test/general");
    assert_eq!(journey["pools"][1]["depth"], 1);

    // The next rotator pass rolls test back: desired R0 again, and the history says why.
    s.pass(t2).await;
    assert_eq!(
        s.desired("test/general").await.as_deref(),
        Some(s.r0.as_str())
    );
    let status = s.status("test/general", t2).await;
    let releases = status["pools"][0]["releases"].as_array().unwrap();
    let last = releases.last().unwrap();
    assert_eq!(last["how"], "rolledBack", "{releases:?}");
    assert_eq!(last["fromRelease"], R1);
    assert_eq!(last["release"], R0);

    // Unquarantine lifts it (kept as a record with who/why), once.
    let t3 = t2 + chrono::Duration::minutes(1);
    let lifted = s
        .ok(
            json!({"action": "unquarantine", "release": R1, "reason": "fixed upstream"}),
            t3,
        )
        .await;
    assert_eq!(lifted["changed"], true, "{lifted:#}");
    assert_eq!(lifted["lifted"][0]["reason"], "kubelet crash loop");
    assert_eq!(lifted["rolledBackFrom"], json!(["test/general"]));
    let item = &s.quarantine_items().await[0].1;
    assert_eq!(item["liftReason"], "fixed upstream");
    assert_eq!(item["liftedBy"], "arn:aws:iam::123456789012:user/alice");
    assert!(
        state::Repository::new(s.table.clone())
            .quarantine()
            .await
            .unwrap()
            .0
            .is_empty()
    );
    let noop = s
        .ok(
            json!({"action": "unquarantine", "release": R1, "reason": "again"}),
            t3,
        )
        .await;
    assert_eq!(noop["changed"], false, "{noop:#}");
    assert!(noop["next"].as_str().unwrap().contains("not quarantined"));

    // An image and the release that is that image id are one target.
    s.ok(
        json!({"action": "quarantine", "ami": r1, "reason": "image only"}),
        t3,
    )
    .await;
    let same = s
        .ok(
            json!({"action": "quarantine", "release": r1, "reason": "as release"}),
            t3,
        )
        .await;
    assert_eq!(same["changed"], false, "{same:#}");
    assert_eq!(same["quarantine"]["reason"], "image only");

    // Every mutating request is audited under QUARANTINE (repeats and no-ops included, not
    // the unparsable one), with its outcome.
    let audit = s.audit().await;
    assert_eq!(audit.len(), 6, "{audit:#?}");
    assert!(audit.iter().all(|a| a["outcome"]["ok"] == true));
    assert_eq!(audit[0]["request"]["reason"], "kubelet crash loop");
    assert_eq!(audit[0]["caller"], "arn:aws:iam::123456789012:user/alice");
    // Nothing was audited under the pools for these.
    let pool_audit = s
        .table
        .query(&state::keys::pool_pk("test/general"), "AUDIT#")
        .await
        .unwrap();
    assert!(pool_audit.is_empty());
}

/// The judged case: a release promoted to prod after its soak, quarantined there by
/// an operator: prod (and test) roll back to the previous AMI within the budget, the launch
/// template at once; once lifted, the release is promoted again after a new soak.
#[tokio::test]
async fn manual_quarantine_rolls_prod_back_and_unquarantine_promotes_again() {
    let s = stages(2).await;
    let t0 = at("2026-12-01T10:00:00Z");
    s.tick(t0).await;
    let r0 = s.r0.clone();
    let r1 = s.publish_r1();

    // Test rolls to R1; prod takes it no earlier than the soak after test's last node became
    // Ready on it.
    let mut now = t0 + chrono::Duration::minutes(1);
    let mut test_on_r1: Option<DateTime<Utc>> = None;
    for _ in 0..60 {
        s.tick(now).await;
        if test_on_r1.is_none() && all_on(&s.images("test").await, &r1, 2) {
            let ledger = s.record("test/general").await.ledger;
            test_on_r1 = ledger
                .iter()
                .find(|p| p.release.as_str() == R1 && p.until.is_none())
                .map(|p| p.since);
        }
        let prod = s.desired("prod/general").await;
        if prod.as_deref() == Some(r1.as_str()) {
            let since = test_on_r1.expect("prod took R1 before test ran it");
            assert!(
                now >= since + chrono::Duration::minutes(SOAK_MINUTES),
                "promoted at {now}, test on R1 since {since}"
            );
            break;
        }
        for pool in ["test/general", "prod/general"] {
            assert!(s.active(pool).await <= 1, "{pool}: budget exceeded");
        }
        now += chrono::Duration::minutes(1);
    }
    assert_eq!(
        s.desired("prod/general").await.as_deref(),
        Some(r1.as_str())
    );
    let promoted = s.record("prod/general").await.releases;
    assert!(
        promoted
            .iter()
            .any(|e| e.release.as_str() == R1 && e.image == r1),
        "{promoted:?}"
    );
    now = s
        .ticks_until(now, 40, async |s| {
            all_on(&s.images("prod").await, &r1, 2) && s.active("prod/general").await == 0
        })
        .await;

    // The operator quarantines R1: both pools desire it and roll back.
    now += chrono::Duration::minutes(1);
    let q = s
        .ok(
            json!({"action": "quarantine", "release": R1, "reason": "p99 latency regression in prod"}),
            now,
        )
        .await;
    let mut affected: Vec<(&str, &str)> = q["affected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["pool"].as_str().unwrap(), a["to"].as_str().unwrap()))
        .collect();
    affected.sort();
    assert_eq!(
        affected,
        vec![("prod/general", r0.as_str()), ("test/general", r0.as_str())],
        "{q:#}"
    );

    // The next rotator pass: desired and launch template back on R0 in both pools.
    let report = s.pass(now).await;
    for pool in ["test/general", "prod/general"] {
        assert_eq!(
            s.desired(pool).await.as_deref(),
            Some(r0.as_str()),
            "{report:#}"
        );
        let st = s.status(pool, now).await;
        assert_eq!(
            st["pools"][0]["nodes"]["group"]["launchTemplateImage"],
            r0.as_str(),
            "{pool}: {st:#}"
        );
    }
    now += chrono::Duration::minutes(1);
    now = s
        .ticks_until(now, 40, async |s| {
            all_on(&s.images("prod").await, &r0, 2)
                && all_on(&s.images("test").await, &r0, 2)
                && s.active("prod/general").await == 0
                && s.active("test/general").await == 0
        })
        .await;
    // Nodes left cordoned: none.
    for kube in &s._kubes {
        let cordoned: Vec<Value> = kube
            .state()
            .nodes
            .into_iter()
            .filter(|n| n["spec"]["unschedulable"] == true)
            .collect();
        assert!(cordoned.is_empty(), "{cordoned:#?}");
    }

    // Status shows the quarantine, prod's history, and R1 blocked as a candidate.
    let st = s.status("prod/general", now).await;
    assert_eq!(
        st["quarantine"][0]["reason"],
        "p99 latency regression in prod"
    );
    let pool = &st["pools"][0];
    let last = pool["releases"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["how"], "rolledBack", "{pool:#}");
    assert_eq!(last["fromRelease"], R1);
    let r1_candidate = pool["promotion"]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["release"] == R1)
        .cloned()
        .unwrap_or_else(|| panic!("{pool:#}"));
    assert_eq!(r1_candidate["state"], "blocked");
    assert!(
        r1_candidate["blockedBy"][0]
            .as_str()
            .unwrap()
            .contains("quarantined"),
        "{r1_candidate:#}"
    );

    // Lifted: test follows @latest to R1 again; prod promotes it after a new clean soak.
    let lifted = s
        .ok(
            json!({"action": "unquarantine", "release": R1, "reason": "false alarm: load test"}),
            now,
        )
        .await;
    assert_eq!(lifted["changed"], true);
    now += chrono::Duration::minutes(1);
    now = s
        .ticks_until(now, 80, async |s| {
            all_on(&s.images("prod").await, &r1, 2) && s.active("prod/general").await == 0
        })
        .await;
    // The soak ledger records a pool fully on a release from the pass after its last rotation.
    now += chrono::Duration::minutes(1);
    s.tick(now).await;
    // (how, release promoted, or release rolled back from)
    let hows: Vec<(String, String)> = s
        .record("prod/general")
        .await
        .releases
        .iter()
        .map(|e| {
            let v = serde_json::to_value(e).unwrap();
            let release = v.get("fromRelease").unwrap_or(&v["release"]);
            (
                v["how"].as_str().unwrap().to_string(),
                release.as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [("promoted", R1), ("rolledBack", R1), ("promoted", R1)]
        .iter()
        .map(|(h, r)| (h.to_string(), r.to_string()))
        .collect();
    assert!(hows.ends_with(&want), "prod's promotion history: {hows:?}");

    // The journey of R1: test then prod, both running it, prod promoted twice, rolled back once.
    let j = s
        .ok(json!({"action": "promotion", "release": R1}), now)
        .await;
    assert_eq!(j["quarantined"], json!([]));
    let prod = &j["pools"][1];
    assert_eq!(prod["pool"], "prod/general");
    assert_eq!(prod["state"], "running", "{j:#}");
    assert_eq!(prod["promoted"].as_array().unwrap().len(), 2);
    assert_eq!(prod["rolledBack"].as_array().unwrap().len(), 1);
    assert_eq!(prod["upstream"]["state"], "proven");
}

fn bin() -> PathBuf {
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/nodecycle
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("nodecycle");
    assert!(
        path.exists(),
        "{} not built (cargo build --workspace --bins)",
        path.display()
    );
    path
}

fn cli(args: &[&str], cloud: &FakeCloud) -> (Option<i32>, Value) {
    let out: Output = Command::new(bin())
        .args(args)
        .args(["-o", "json"])
        .env_remove("AWS_PROFILE")
        .env("NODECYCLE_LOG", "warn")
        .env("NODECYCLE_TABLE", "nodecycle")
        .envs(cloud.env_vars())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), v)
}

#[tokio::test]
async fn the_cli_quarantines_lifts_and_shows_a_journey() {
    let s = stages(1).await;
    s.tick(at("2026-12-01T10:00:00Z")).await;

    let (code, v) = cli(
        &["quarantine", "--release", R1, "--reason", "bad kernel"],
        &s.cloud,
    );
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["changed"], true);
    assert!(
        v["quarantine"]["by"]
            .as_str()
            .unwrap()
            .starts_with("local:")
    );

    // Without --reason the command line is refused before anything is asked.
    let out = Command::new(bin())
        .args(["quarantine", "--release", R1])
        .env("NODECYCLE_TABLE", "nodecycle")
        .envs(s.cloud.env_vars())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--reason"));

    let (code, v) = cli(&["promotion", R1], &s.cloud);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["quarantined"][0]["reason"], "bad kernel");
    assert_eq!(v["pools"].as_array().unwrap().len(), 2);

    let (code, v) = cli(
        &["unquarantine", "--release", R1, "--reason", "patched"],
        &s.cloud,
    );
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["changed"], true);
    assert_eq!(
        s.audit().await.len(),
        2,
        "the refused one never reached the handler"
    );
}
