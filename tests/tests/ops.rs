//! The ops function end to end: requests through the real handler against moto (Auto Scaling,
//! EC2, SSM, DynamoDB) and the Kubernetes stand-in, with real rotator passes on an injected
//! clock (setup as in rotation.rs).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::handlers::rotator::RotatorHandler;
use nodecycle::handlers::{HandlerError, Invocation};
use nodecycle::rotation::{Rotation, Step};
use nodecycle::state::Store;
use nodecycle_tests::{FakeCloud, ImageFixture, KubeStandIn, PdbFixture, PodFixture, SyncNodes};
use serde_json::{Value, json};
use support::*;

struct Pool {
    cloud: FakeCloud,
    kube: KubeStandIn,
    adapters: Adapters,
    table: Arc<Table>,
    watcher: AmiWatcher,
    rotator: RotatorHandler,
    operator: Operator,
    old: String,
    new: String,
    arm: String,
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const ALWAYS_ZERO: &str = "    - nodes: \"0\"\n";

async fn pool(nodes: i32, budgets: &str, never_ready_new: bool, grace: &str) -> Pool {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let kube = cloud.create_kube("prod");
    let old = cloud.register_image(
        ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let new = cloud.register_image(
        ImageFixture::new("golden-2")
            .owner("self")
            .created("2024-06-01T00:00:00Z"),
    );
    let arm = cloud.register_image(
        ImageFixture::new("other-arm")
            .owner("self")
            .architecture("arm64")
            .created("2024-06-01T00:00:00Z"),
    );
    let a = Adapters::new(&cloud).await;
    a.create_group("prod-general", &old, "m5.large", nodes, nodes + 4, None)
        .await;
    kube.sync_nodes(SyncNodes {
        asg: Some("prod-general".into()),
        never_ready_images: if never_ready_new {
            vec![new.clone()]
        } else {
            vec![]
        },
        ..SyncNodes::default()
    });
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!(
            "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n{budgets}terminationGracePeriod: {grace}\n"
        ),
    );
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies, table.clone()).await;
    let ops = a.ops(rotator.clone());
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == nodes as usize).then_some(())
    });
    Pool {
        cloud,
        kube,
        adapters: a,
        table,
        watcher,
        rotator,
        operator: Operator::new(ops),
        old,
        new,
        arm,
    }
}

impl Pool {
    async fn rotations(&self) -> Vec<Rotation> {
        self.table
            .query("POOL#prod/general", "ROT#")
            .await
            .unwrap()
            .into_iter()
            .map(|(_, v)| serde_json::from_value(v.value).unwrap())
            .collect()
    }

    /// `(instance, image)` of the group's instances.
    async fn instances(&self) -> Vec<(String, String)> {
        self.adapters.group_instances("prod-general").await
    }

    async fn images(&self) -> Vec<String> {
        self.instances().await.into_iter().map(|(_, i)| i).collect()
    }

    async fn pass(&self, now: DateTime<Utc>) -> Value {
        let report = self
            .rotator
            .handle(
                &json!({}),
                Invocation::at(now, Instant::now() + Duration::from_secs(120)),
            )
            .await
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        report
    }

    async fn ops(&self, request: Value, now: DateTime<Utc>) -> Result<Value, HandlerError> {
        self.operator.request(request, now).await
    }

    async fn ok(&self, request: Value, now: DateTime<Utc>) -> Value {
        self.operator.ok(request, now).await
    }

    async fn status(&self, now: DateTime<Utc>) -> Value {
        let s = self
            .ok(json!({"action": "status", "pool": "prod/general"}), now)
            .await;
        s["pools"][0].clone()
    }

    /// Runs passes a minute apart until `done` (at most `max`), checking `each` after every pass.
    async fn passes_until(
        &self,
        mut now: DateTime<Utc>,
        max: usize,
        mut each: impl FnMut(&[Rotation]),
        done: impl Fn(&[Rotation], &[String]) -> bool,
    ) -> DateTime<Utc> {
        for _ in 0..max {
            self.pass(now).await;
            let rotations = self.rotations().await;
            each(&rotations);
            if done(&rotations, &self.images().await) {
                return now;
            }
            now += chrono::Duration::minutes(1);
        }
        panic!(
            "not done after {max} passes: {:#?} images {:?}",
            self.rotations().await,
            self.images().await
        );
    }
}

fn active(rotations: &[Rotation]) -> usize {
    rotations
        .iter()
        .filter(|r| r.in_flight() && !r.waiting())
        .count()
}

#[tokio::test]
async fn emergency_rotation_of_every_node_in_a_zero_window_is_bounded_by_max_concurrent() {
    let p = pool(4, ALWAYS_ZERO, false, "1m").await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    // Budget "0": the drift rollout is blocked.
    let report = p.pass(t0).await;
    assert!(p.rotations().await.is_empty(), "{report}");

    let r = p
        .ok(
            json!({"action": "rotate", "pool": "prod/general", "all": true,
                   "reason": "CVE-2026-1234 in golden-1", "ignoreBudgets": true, "maxConcurrent": 2}),
            t0,
        )
        .await;
    assert_eq!(r["queued"].as_array().unwrap().len(), 4, "{r}");
    assert_eq!(r["repeated"], false);
    let status = p.status(t0).await;
    assert_eq!(status["rotations"].as_array().unwrap().len(), 4);
    assert_eq!(status["rotations"][0]["waiting"], true, "{status}");

    let mut max_active = 0;
    p.passes_until(
        t0 + chrono::Duration::minutes(1),
        40,
        |r| {
            let a = active(r);
            assert!(a <= 2, "maxConcurrent 2 exceeded: {r:#?}");
            max_active = max_active.max(a);
        },
        |r, images| {
            r.iter().all(|r| r.step == Step::Done)
                && images.len() == 4
                && images.iter().all(|i| *i == p.new)
        },
    )
    .await;
    assert_eq!(max_active, 2, "maxConcurrent was used");
    let rotations = p.rotations().await;
    assert_eq!(rotations.len(), 4);
    assert!(
        rotations
            .iter()
            .all(|r| r.reason == nodecycle::rotation::RotationReason::Manual)
    );
    // Audited, with caller and outcome.
    let audit = p.table.query("POOL#prod/general", "AUDIT#").await.unwrap();
    assert_eq!(audit.len(), 1);
    let doc = &audit[0].1.value;
    assert_eq!(doc["caller"], "arn:aws:iam::123456789012:user/alice");
    assert_eq!(doc["request"]["reason"], "CVE-2026-1234 in golden-1");
    assert_eq!(doc["outcome"]["ok"], true);
    let _ = (&p.cloud, &p.old, &p.arm);
}

#[tokio::test]
async fn pin_to_an_older_ami_then_rotate_back() {
    let p = pool(2, "    - nodes: \"1\"\n", false, "1m").await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let now = p
        .passes_until(
            t0,
            30,
            |_| {},
            |r, images| {
                r.iter().all(|r| !r.in_flight())
                    && images.len() == 2
                    && images.iter().all(|i| *i == p.new)
            },
        )
        .await;

    // golden-2 is bad: pin golden-1, the rotator rolls back within the budget.
    let now = now + chrono::Duration::minutes(1);
    let r = p
        .ok(
            json!({"action": "pin", "pool": "prod/general", "ami": p.old, "reason": "golden-2 breaks DNS"}),
            now,
        )
        .await;
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(r["desired"], p.old.as_str());
    assert_eq!(r["resolved"], p.new.as_str());
    // The watcher keeps recording what the terms resolve to; the pin wins.
    p.watcher.handle(&json!({}), now).await.unwrap();
    let s = p.status(now).await;
    assert_eq!(s["desired"]["ami"], p.old.as_str(), "{s}");
    assert_eq!(s["desired"]["source"], "pin");
    assert_eq!(s["desired"]["resolved"]["ami"], p.new.as_str());
    assert_eq!(s["desired"]["pin"]["reason"], "golden-2 breaks DNS");
    let now = p
        .passes_until(
            now,
            30,
            |r| assert!(active(r) <= 1, "budget 1 exceeded"),
            |r, images| {
                r.iter().all(|r| !r.in_flight())
                    && images.len() == 2
                    && images.iter().all(|i| *i == p.old)
            },
        )
        .await;

    // Unpin: back to what the terms resolve to.
    let now = now + chrono::Duration::minutes(1);
    let r = p
        .ok(json!({"action": "unpin", "pool": "prod/general", "reason": "fixed in golden-2 config"}), now)
        .await;
    assert_eq!(r["desired"], p.new.as_str(), "{r}");
    p.passes_until(
        now,
        30,
        |_| {},
        |r, images| {
            r.iter().all(|r| !r.in_flight())
                && images.len() == 2
                && images.iter().all(|i| *i == p.new)
        },
    )
    .await;

    // Pins are validated: existence/availability and architecture.
    let e = p
        .ops(json!({"action": "pin", "pool": "prod/general", "ami": "ami-0123456789abcdef0", "reason": "x"}), now)
        .await
        .unwrap_err();
    assert_eq!(e.error_type, "InvalidRequest");
    assert_eq!(
        e.message,
        "ami: ami-0123456789abcdef0 does not exist or is not available (DescribeImages, state=available)"
    );
    let e = p
        .ops(
            json!({"action": "pin", "pool": "prod/general", "ami": p.arm, "reason": "x"}),
            now,
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "ami: {} (other-arm) is arm64, pool prod/general runs x86_64",
            p.arm
        )
    );
}

#[tokio::test]
async fn pause_during_a_rollout_stops_new_starts_but_in_flight_drains_finish() {
    let p = pool(4, "    - nodes: \"1\"\n", false, "1m").await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    p.pass(t0).await;
    let started = p.rotations().await;
    assert_eq!(active(&started), 1, "{started:#?}");

    let now = t0 + chrono::Duration::minutes(1);
    let r = p
        .ok(json!({"action": "pause", "pool": "prod/general", "reason": "investigating pod crashloops"}), now)
        .await;
    assert_eq!(r["changed"], true);
    let mut now = now;
    for _ in 0..8 {
        p.pass(now).await;
        now += chrono::Duration::minutes(1);
    }
    let rotations = p.rotations().await;
    assert_eq!(
        rotations.len(),
        1,
        "nothing new started while paused: {rotations:#?}"
    );
    assert_eq!(
        rotations[0].step,
        Step::Done,
        "the in-flight rotation finished"
    );
    let s = p.status(now).await;
    assert_eq!(s["paused"]["reason"], "investigating pod crashloops", "{s}");
    assert_eq!(
        s["paused"]["caller"],
        "arn:aws:iam::123456789012:user/alice"
    );
    assert!(
        s["blocked"].as_str().unwrap().contains("pool paused"),
        "{s}"
    );
    assert_eq!(s["nodes"]["drifted"], 3, "{s}");
    assert_eq!(s["finished24h"].as_array().unwrap().len(), 1);

    let r = p
        .ok(
            json!({"action": "resume", "pool": "prod/general", "reason": "crashloops unrelated"}),
            now,
        )
        .await;
    assert_eq!(r["changed"], true);
    p.pass(now).await;
    assert_eq!(active(&p.rotations().await), 1, "the rollout continues");
}

#[tokio::test]
async fn resume_after_a_halt() {
    let p = pool(3, "    - nodes: \"1\"\n", true, "1m").await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let mut now = t0;
    for _ in 0..5 {
        p.pass(now).await;
        now += chrono::Duration::minutes(5);
    }
    let s = p.status(now).await;
    assert!(
        s["halted"]["message"]
            .as_str()
            .unwrap()
            .contains("not Ready within 15m"),
        "{s}"
    );
    assert!(
        s["blocked"].as_str().unwrap().contains("pool halted"),
        "{s}"
    );
    // The failed image is quarantined and the pool has nothing earlier to go back to: resume
    // alone would halt again; the operator lifts the quarantine first.
    let q = p
        .ok(
            json!({"action": "unquarantine", "ami": p.new, "reason": "node role fixed"}),
            now,
        )
        .await;
    assert_eq!(q["changed"], true, "{q}");
    let r = p
        .ok(
            json!({"action": "resume", "pool": "prod/general", "reason": "node role fixed"}),
            now,
        )
        .await;
    assert_eq!(r["changed"], true, "{r}");
    assert!(r["resumed"]["halted"]["message"].is_string(), "{r}");
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .unwrap();
    assert!(record.halted.is_none());
    let report = p.pass(now).await;
    assert!(
        report["pools"][0]["started"].as_array().unwrap().len() == 1,
        "a rotation starts again after resume: {report}"
    );
    // A second resume changes nothing.
    let r = p
        .ok(
            json!({"action": "resume", "pool": "prod/general", "reason": "node role fixed"}),
            now,
        )
        .await;
    assert_eq!(r["changed"], false);
}

#[tokio::test]
async fn cancel_mid_drain_leaves_the_node_schedulable_and_undoes_the_surge() {
    let p = pool(2, "    - nodes: \"1\"\n", false, "1h").await;
    let (victim, _) = p.instances().await[0].clone();
    let node = p
        .kube
        .state()
        .nodes
        .iter()
        .find(|n| n["spec"]["providerID"].as_str().unwrap().ends_with(&victim))
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .unwrap();
    // A pod whose PodDisruptionBudget never allows eviction keeps the drain going.
    p.kube.add_pod(
        PodFixture::new("default", "db-0")
            .node(&node)
            .owner("StatefulSet", "db")
            .label("app", "db"),
    );
    p.kube.add_pdb(
        PdbFixture::new("default", "db-pdb")
            .match_label("app", "db")
            .min_available(1),
    );
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let r = p
        .ok(json!({"action": "rotate", "pool": "prod/general", "instances": [victim], "reason": "bad disk"}), t0)
        .await;
    assert_eq!(r["queued"][0], victim.as_str(), "{r}");
    // Pending -> Surging -> Cordoned -> Draining (blocked by the PDB).
    let mut now = t0;
    for _ in 0..12 {
        p.pass(now).await;
        let r = p.rotations().await;
        if r.iter()
            .any(|r| r.instance_id == victim && r.step == Step::Draining)
        {
            break;
        }
        now += chrono::Duration::minutes(1);
    }
    now += chrono::Duration::minutes(1);
    p.pass(now).await;
    let rot = p
        .rotations()
        .await
        .into_iter()
        .find(|r| r.instance_id == victim)
        .unwrap();
    assert_eq!(rot.step, Step::Draining, "{rot:#?}");
    assert_eq!(
        p.kube.state().node(&node).unwrap()["spec"]["unschedulable"],
        true
    );
    assert_eq!(p.instances().await.len(), 3, "surged");

    let r = p
        .ok(json!({"action": "cancel", "pool": "prod/general", "instance": victim, "reason": "db cannot move"}), now)
        .await;
    assert_eq!(r["changed"], true, "{r}");
    assert_eq!(r["problems"], json!([]), "{r}");
    let state = p.kube.state();
    let n = state.node(&node).unwrap();
    assert_ne!(
        n["spec"]["unschedulable"], true,
        "node schedulable again: {n}"
    );
    let taints = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
    assert!(
        taints.iter().all(|t| t["key"] != "nodecycle.dev/disrupted"),
        "{taints:?}"
    );
    assert!(state.pod("default", "db-0").is_some(), "the pod stayed");
    let rot = p
        .rotations()
        .await
        .into_iter()
        .find(|r| r.instance_id == victim)
        .unwrap();
    assert_eq!(rot.step, Step::Cancelled, "a cancel is not a failure");
    assert!(
        rot.error
            .as_deref()
            .is_some_and(|e| e.contains("arn:aws:iam::123456789012:user/alice")),
        "who cancelled is recorded: {rot:?}"
    );
    // The surge is owed: the rotator's next pass gives it back with an instance it counted
    // podless (ops does not count pods).
    assert!(rot.surge_owed(), "the surge is owed: {rot:?}");
    let replacement = rot.replacement.clone().expect("a claimed replacement");
    p.pass(now + chrono::Duration::minutes(1)).await;
    std::thread::sleep(Duration::from_millis(500));
    let instances = p.instances().await;
    assert!(
        instances.iter().all(|(i, _)| *i != replacement),
        "surge undone with its podless replacement: {instances:?}"
    );
    assert!(
        instances.iter().any(|(i, _)| *i == victim),
        "the old node stays"
    );
    let record = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .unwrap();
    assert!(record.halted.is_none(), "cancel does not halt the pool");

    // Cancelling again is a no-op; a finished rotation cannot be cancelled twice.
    let r = p
        .ok(json!({"action": "cancel", "pool": "prod/general", "instance": victim, "reason": "db cannot move"}), now)
        .await;
    assert_eq!(r["changed"], false, "{r}");
}

#[tokio::test]
async fn repeated_identical_requests_do_not_double_the_work() {
    let p = pool(3, ALWAYS_ZERO, false, "1m").await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let ids: Vec<String> = p.instances().await.into_iter().map(|(i, _)| i).collect();
    let rotate = json!({"action": "rotate", "pool": "prod/general", "instances": [ids[0], ids[1]], "reason": "CVE"});
    let first = p.ok(rotate.clone(), t0).await;
    assert_eq!(first["queued"].as_array().unwrap().len(), 2);
    let second = p
        .ok(rotate.clone(), t0 + chrono::Duration::seconds(30))
        .await;
    assert_eq!(second["repeated"], true, "{second}");
    assert_eq!(second["requestId"], first["requestId"]);
    assert_eq!(second["queued"], first["queued"]);
    // A different request over the same instances keeps the queued rotations.
    let other = p
        .ok(json!({"action": "rotate", "pool": "prod/general", "instances": [ids[0], ids[2]], "reason": "CVE, again"}), t0)
        .await;
    assert_eq!(other["queued"], json!([ids[2]]), "{other}");
    assert_eq!(other["kept"][0]["instance"], ids[0].as_str());
    assert_eq!(p.rotations().await.len(), 3);

    for (req, _) in [
        (
            json!({"action": "pause", "pool": "prod/general", "reason": "a"}),
            (),
        ),
        (
            json!({"action": "pin", "pool": "prod/general", "ami": p.old, "reason": "b"}),
            (),
        ),
    ] {
        let a = p.ok(req.clone(), t0).await;
        assert_eq!(a["changed"], true, "{a}");
        let b = p.ok(req.clone(), t0 + chrono::Duration::minutes(1)).await;
        assert_eq!(b["changed"], false, "{b}");
    }
    // The first pause (time, reason) is kept.
    let s = p.status(t0).await;
    assert_eq!(s["paused"]["at"], "2026-12-01T10:00:00Z", "{s}");
    // Every mutating request is audited, repeats included.
    let audit = p.table.query("POOL#prod/general", "AUDIT#").await.unwrap();
    assert_eq!(audit.len(), 7);
}

#[tokio::test]
async fn invalid_requests_name_every_problem_and_unknown_things() {
    let p = pool(2, ALWAYS_ZERO, false, "1m").await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let ids: Vec<String> = p.instances().await.into_iter().map(|(i, _)| i).collect();
    let cases: Vec<(Value, String)> = vec![
        (json!("status"), "request: expected a JSON object with an \"action\" (status, rotate, pin, unpin, pause, resume, cancel, quarantine, unquarantine, promotion, rollout, stop, start)".into()),
        (
            json!({"action": "rotate", "pool": "prod/general", "instances": [], "ignoreBudget": true}),
            "instances: empty; list instance ids or use \"all\": true; reason: required; say why (it is written to the audit record); ignoreBudget: not a field of rotate (fields: action, pool, instances, all, reason, ignoreBudgets, maxConcurrent)".into(),
        ),
        (json!({"action": "status", "pool": "prod/missing"}), "pool: unknown \"prod/missing\" (known: prod/general)".into()),
        (json!({"action": "pause", "pool": "prod/missing", "reason": "x"}), "pool: unknown \"prod/missing\" (known: prod/general)".into()),
        (
            json!({"action": "rotate", "pool": "prod/general", "instances": [ids[0], "i-00000000000000000"], "reason": "x"}),
            "instances: i-00000000000000000 not in pool prod/general (group prod-general)".into(),
        ),
        (
            json!({"action": "cancel", "pool": "prod/general", "instance": ids[1], "reason": "x"}),
            format!("instance: no rotation of {} in pool prod/general", ids[1]),
        ),
    ];
    for (req, want) in cases {
        let e = p.ops(req.clone(), t0).await.unwrap_err();
        assert_eq!(e.error_type, "InvalidRequest", "{req}");
        assert_eq!(e.message, want, "{req}");
    }
    assert!(
        p.rotations().await.is_empty(),
        "nothing was queued by a refused request"
    );
    // Refused requests on a known pool are audited too, with their error.
    let audit = p.table.query("POOL#prod/general", "AUDIT#").await.unwrap();
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0].1.value["outcome"]["ok"], false);
}
