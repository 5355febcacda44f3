//! Hostile and mistaken input against a seeded fleet (moto + the Kubernetes stand-in): each
//! input is refused naming what is wrong, and a snapshot of the table, the groups and their
//! instances, the launch templates, SSM and the cluster taken before it equals the one taken
//! after; one hostile policy among good ones leaves the good pool working (resolve, rotate,
//! a Spot drain).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::aws::instances::{Ec2Instances, LifecycleActions};
use nodecycle::handlers::Invocation;
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::handlers::interruption::{InterruptionHandler, InterruptionPorts, Settings};
use nodecycle::handlers::rotator::{EksConnector, RotatorHandler};
use nodecycle::state::Store;
use nodecycle_tests::{
    AwsFault, AwsFaults, FakeCloud, Faults, ImageFixture, KubeStandIn, PdbFixture, PodFixture,
    SyncNodes,
};
use serde_json::{Value, json};
use support::pool::at;
use support::*;

const POLICY: &str = "/nodecycle/pools/prod/general";

fn good_policy(arch: &str, images: &str) -> String {
    format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\narchitecture: {arch}\namiSelectorTerms:\n  - name: \"{images}\"\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"1\"\nterminationGracePeriod: 1m\n"
    )
}

struct Fleet {
    cloud: FakeCloud,
    kube: KubeStandIn,
    a: Adapters,
    table: Arc<Table>,
    watcher: AmiWatcher,
    rotator: RotatorHandler,
    ops: Operator,
    handler: InterruptionHandler,
    /// The good pool's instances and node names.
    nodes: Vec<(String, String)>,
    old: String,
}

/// Cluster `prod` with pool prod/general: Auto Scaling group `prod-general` of `nodes`
/// m5.large instances on golden-1 (x86_64), each a Ready node; its policy at [`POLICY`] with
/// `policy`. The watcher has resolved the pool when `resolve`.
async fn fleet(nodes: i32, policy: &str, resolve: bool) -> Fleet {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let kube = cloud.create_kube("prod");
    let old = cloud.register_image(
        ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let a = Adapters::new(&cloud).await;
    a.create_group(
        "prod-general",
        &old,
        "m5.large",
        nodes,
        nodes + 4,
        Some("prod"),
    )
    .await;
    kube.sync_nodes(SyncNodes {
        asg: Some("prod-general".into()),
        ..SyncNodes::default()
    });
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == nodes as usize).then_some(())
    });
    let mut nodes: Vec<(String, String)> = kube
        .state()
        .nodes
        .iter()
        .map(|n| {
            let provider = n["spec"]["providerID"].as_str().unwrap();
            (
                provider.rsplit('/').next().unwrap().to_string(),
                n["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    nodes.sort();
    cloud.put_parameter(POLICY, policy);
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies.clone(), table.clone()).await;
    let ops = Operator::new(a.ops(a.rotator(&cloud, policies.clone(), table.clone()).await));
    let config = cloud.sdk_config().await;
    let handler = InterruptionHandler {
        cell: a.cell(policies, table.clone()),
        ports: InterruptionPorts {
            instances: Arc::new(Ec2Instances::new(a.clients.ec2.clone())),
            lifecycle: Arc::new(LifecycleActions::new(a.clients.autoscaling.clone())),
            kube: Arc::new(EksConnector::new(config.clone())),
        },
        deployment: Arc::new(nodecycle::aws::identity::OwnAccount::new(&config)),
        settings: Settings {
            poll: Duration::from_millis(200),
            heartbeat_every: Duration::from_millis(400),
            reserve: Duration::from_secs(2),
            ..Settings::default()
        },
        metrics: Arc::new(nodecycle::metrics::NoMetrics),
    };
    if resolve {
        let report = watcher.handle(&json!({}), t0()).await.unwrap();
        assert_eq!(report["pools"][0]["desired"], old.as_str(), "{report}");
    }
    Fleet {
        cloud,
        kube,
        a,
        table,
        watcher,
        rotator,
        ops,
        handler,
        nodes,
        old,
    }
}

fn t0() -> DateTime<Utc> {
    at("2026-12-01T10:00:00Z")
}

/// Everything nodecycle could change, in a comparable form.
#[derive(Debug, PartialEq)]
struct Snapshot {
    /// (pk, sk) -> (version, doc); leases (coordination of passes, given back after each) and
    /// audit records (written on purpose for every request) are left out.
    table: BTreeMap<(String, String), (String, String)>,
    /// Each group: sizes, launch template, instances with their state and image.
    groups: Vec<String>,
    /// Each launch template: default and latest version, each version's image.
    templates: Vec<String>,
    /// Every parameter: value and version.
    parameters: BTreeMap<String, (String, i64)>,
    /// The cluster's resourceVersion moves with every write.
    kube_version: String,
    nodes: Vec<String>,
    pods: Vec<String>,
}

impl Fleet {
    async fn snapshot(&self) -> Snapshot {
        let c = &self.a.clients;
        let mut table = BTreeMap::new();
        let mut start = None;
        loop {
            let out = c
                .dynamodb
                .scan()
                .table_name(self.table.name())
                .set_exclusive_start_key(start)
                .send()
                .await
                .unwrap();
            for item in out.items() {
                let s = |k: &str| {
                    item.get(k)
                        .map(|v| match v {
                            aws_sdk_dynamodb::types::AttributeValue::S(s) => s.clone(),
                            aws_sdk_dynamodb::types::AttributeValue::N(n) => n.clone(),
                            other => format!("{other:?}"),
                        })
                        .unwrap_or_default()
                };
                let (pk, sk) = (s("pk"), s("sk"));
                if pk.starts_with("LEASE#") || sk.starts_with("AUDIT#") {
                    continue;
                }
                table.insert((pk, sk), (s("version"), s("doc")));
            }
            match out.last_evaluated_key() {
                Some(k) => start = Some(k.clone()),
                None => break,
            }
        }
        let out = c
            .autoscaling
            .describe_auto_scaling_groups()
            .send()
            .await
            .unwrap();
        let mut groups: Vec<String> = out
            .auto_scaling_groups()
            .iter()
            .map(|g| {
                let mut instances: Vec<String> = g
                    .instances()
                    .iter()
                    .map(|i| {
                        format!(
                            "{} {:?} {:?}",
                            i.instance_id().unwrap(),
                            i.lifecycle_state(),
                            i.health_status()
                        )
                    })
                    .collect();
                instances.sort();
                format!(
                    "{} min {:?} max {:?} desired {:?} lt {:?} mixed {:?} suspended {:?} instances {instances:?}",
                    g.auto_scaling_group_name().unwrap(),
                    g.min_size(),
                    g.max_size(),
                    g.desired_capacity(),
                    g.launch_template(),
                    g.mixed_instances_policy(),
                    g.suspended_processes(),
                )
            })
            .collect();
        let out = c.ec2.describe_instances().send().await.unwrap();
        for i in out.reservations().iter().flat_map(|r| r.instances()) {
            groups.push(format!(
                "instance {} {:?} {:?}",
                i.instance_id().unwrap(),
                i.state().and_then(|s| s.name()),
                i.image_id()
            ));
        }
        groups.sort();
        let mut templates = Vec::new();
        let out = c.ec2.describe_launch_templates().send().await.unwrap();
        for t in out.launch_templates() {
            let id = t.launch_template_id().unwrap();
            let versions = c
                .ec2
                .describe_launch_template_versions()
                .launch_template_id(id)
                .send()
                .await
                .unwrap();
            let images: Vec<String> = versions
                .launch_template_versions()
                .iter()
                .map(|v| {
                    format!(
                        "{:?}:{:?}",
                        v.version_number(),
                        v.launch_template_data().and_then(|d| d.image_id())
                    )
                })
                .collect();
            templates.push(format!(
                "{id} default {:?} latest {:?} {images:?}",
                t.default_version_number(),
                t.latest_version_number()
            ));
        }
        templates.sort();
        let mut parameters = BTreeMap::new();
        let mut token = None;
        loop {
            let out = c
                .ssm
                .get_parameters_by_path()
                .path("/")
                .recursive(true)
                .set_next_token(token)
                .send()
                .await
                .unwrap();
            for p in out.parameters() {
                parameters.insert(
                    p.name().unwrap().to_string(),
                    (p.value().unwrap_or_default().to_string(), p.version()),
                );
            }
            match out.next_token() {
                Some(t) => token = Some(t.to_string()),
                None => break,
            }
        }
        let k = self.kube.state();
        let mut nodes: Vec<String> = k
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "{} {} {}",
                    n["metadata"], n["spec"], n["status"]["conditions"]
                )
            })
            .collect();
        nodes.sort();
        let mut pods: Vec<String> = k
            .pods
            .iter()
            .map(|p| format!("{} {}", p["metadata"], p["spec"]["nodeName"]))
            .collect();
        pods.sort();
        Snapshot {
            table,
            groups,
            templates,
            parameters,
            kube_version: k.resource_version,
            nodes,
            pods,
        }
    }

    async fn pass(&self, now: DateTime<Utc>) -> Value {
        rotator_pass(&self.rotator, now).await
    }

    /// The handler's answer to `event`, with `seconds` of invocation left.
    async fn interrupt(
        &self,
        event: &Value,
        seconds: u64,
    ) -> Result<Value, nodecycle::handlers::HandlerError> {
        self.handler
            .handle(
                event,
                Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(seconds)),
            )
            .await
    }

    async fn record(&self) -> nodecycle::state::PoolRecord {
        nodecycle::state::Repository::new(self.table.clone())
            .pool("prod/general")
            .await
            .unwrap()
            .unwrap()
    }
}

/// A sample event from `events/` about `instance`, sent at `time`, with a fresh id.
fn event(file: &str, instance: &str, time: DateTime<Utc>) -> Value {
    let text =
        std::fs::read_to_string(nodecycle_tests::repo_path(&format!("events/{file}"))).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let sample = v["detail"]["instance-id"]
        .as_str()
        .or(v["detail"]["EC2InstanceId"].as_str())
        .unwrap()
        .to_string();
    let mut v: Value = serde_json::from_str(&text.replace(&sample, instance)).unwrap();
    v["time"] = json!(time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    v["id"] = json!(format!(
        "evt-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    v
}

/// The report's documents: a valid header, then `x: &a [1 x a]`, `y: &b [*a x b]`,
/// `z: [*b x c]`.
fn laughs(a: usize, b: usize, c: usize) -> String {
    let list = |item: &str, n: usize| vec![item; n].join(",");
    format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\namiSelectorTerms: [{{ alias: al2023@latest }}]\nx: &a [{}]\ny: &b [{}]\nz: [{}]\n",
        list("1", a),
        list("*a", b),
        list("*b", c)
    )
}

/// The invalid documents `status` lists, by source.
fn invalid(status: &Value) -> BTreeMap<String, Value> {
    status["invalid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["source"].as_str().unwrap().to_string(), i.clone()))
        .collect()
}

#[tokio::test]
async fn hostile_policies_change_nothing_and_the_good_pool_keeps_working() {
    let f = fleet(2, &good_policy("x86_64", "golden-*"), true).await;
    // Converged: the pool runs its desired AMI, a pass changes nothing.
    f.pass(t0()).await;
    // Another team's image, which no hostile document may make prod/general's.
    let evil = f.cloud.register_image(
        ImageFixture::new("evil-1")
            .owner("self")
            .created("2025-01-01T00:00:00Z"),
    );
    let other_pool = good_policy("x86_64", "evil-*");
    let hostile: Vec<(&str, String)> = vec![
        // 1.5 KB that expanded to 3,000,000 values (525 MB), and the 3.5 KB variant that
        // aborted every function.
        ("/nodecycle/pools/prod/laughs", laughs(300, 200, 50)),
        ("/nodecycle/pools/prod/laughs-big", laughs(700, 450, 200)),
        // Another team's prefix naming prod/general (changed its desired AMI, on a scheduled
        // pass won over the real one).
        ("/nodecycle/pools/test/general", other_pool.clone()),
        ("/nodecycle/pools/aaa/x", other_pool.clone()),
        // Names that are no pool names (wrote POOL#prod#x/.. STATE), a 300-character name.
        (
            "/nodecycle/pools/prod/dots",
            other_pool.replace(
                "cluster: prod\nname: general",
                "cluster: \"prod#x\"\nname: \"..\"",
            ),
        ),
        (
            "/nodecycle/pools/prod/long",
            other_pool.replace("name: general", &format!("name: {}", "a".repeat(300))),
        ),
        // A path that names no pool.
        ("/nodecycle/pools/prod", other_pool.clone()),
        // Deep nesting.
        (
            "/nodecycle/pools/prod/deep",
            format!("{}{}", "[".repeat(2000), "]".repeat(2000)),
        ),
    ];
    for (name, text) in &hostile {
        f.cloud.put_parameter(name, text);
    }
    let before = f.snapshot().await;

    // Every function reads every policy: a scheduled watcher pass, a change event of each
    // hostile parameter, a rotator pass, status, an interruption tick.
    let report = f.watcher.handle(&json!({}), t0()).await.unwrap();
    let outcome = |r: &Value, source: &str| -> Value {
        r["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["source"] == source)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(outcome(&report, POLICY)["status"], "unchanged", "{report}");
    assert_eq!(outcome(&report, POLICY)["desired"], f.old.as_str());
    for (name, _) in &hostile {
        assert_eq!(
            outcome(&report, name)["status"],
            "invalid",
            "{name}: {report}"
        );
        let mut change: Value = serde_json::from_str(
            &std::fs::read_to_string(nodecycle_tests::repo_path(
                "events/parameter-store-change.json",
            ))
            .unwrap(),
        )
        .unwrap();
        change["detail"]["name"] = json!(name);
        let r = f.watcher.handle(&change, t0()).await.unwrap();
        assert_eq!(outcome(&r, name)["status"], "invalid", "{name}: {r}");
    }
    let report = f.pass(t0() + chrono::Duration::minutes(1)).await;
    assert_eq!(report["pools"].as_array().unwrap().len(), 1, "{report}");
    let status = f.ops.ok(json!({"action": "status"}), t0()).await;
    let tick = f.interrupt(&json!({}), 30).await.unwrap();
    assert!(tick.is_object());

    let after = f.snapshot().await;
    assert_eq!(before, after, "a hostile policy changed something");
    assert_eq!(f.record().await.desired.unwrap().id, f.old);

    // Status names each hostile document and what is wrong, at its field, quoting at most a
    // prefix of what it holds.
    let listed = invalid(&status);
    assert_eq!(listed.len(), hostile.len(), "{status}");
    let problems = |source: &str| listed[source]["problems"].as_str().unwrap().to_string();
    for source in [
        "/nodecycle/pools/prod/laughs",
        "/nodecycle/pools/prod/laughs-big",
    ] {
        let p = problems(source);
        assert!(
            p.starts_with("y[") && p.contains("more than 10000 values"),
            "{source}: {p}"
        );
    }
    assert!(
        problems("/nodecycle/pools/test/general").starts_with(
            "cluster: \"prod\" names pool prod/general, but its parameter path is that of pool test/general"
        ),
        "{status}"
    );
    assert_eq!(
        listed["/nodecycle/pools/test/general"]["pool"],
        "test/general"
    );
    let p = problems("/nodecycle/pools/aaa/x");
    assert!(
        p.contains("cluster: \"prod\" names pool") && p.contains("name: \"general\" names pool"),
        "{p}"
    );
    let p = problems("/nodecycle/pools/prod/dots");
    assert!(
        p.contains("cluster: \"prod#x\"") && p.contains("name: \"..\""),
        "{p}"
    );
    let p = problems("/nodecycle/pools/prod/long");
    assert!(p.starts_with("name: too long (300 characters)"), "{p}");
    assert!(p.len() < 1000, "{p}");
    assert_eq!(listed["/nodecycle/pools/prod"]["pool"], Value::Null);
    assert!(problems("/nodecycle/pools/prod").contains("names no pool"));
    let p = problems("/nodecycle/pools/prod/deep");
    assert!(
        p.contains("nested more than") || p.contains("recursion limit exceeded"),
        "{p}"
    );
    assert_eq!(status["pools"][0]["pool"], "prod/general");
    // The status of a pool whose document is invalid says so (not "unknown pool").
    let one = f
        .ops
        .ok(json!({"action": "status", "pool": "test/general"}), t0())
        .await;
    assert_eq!(one["pools"], json!([]));
    assert_eq!(one["invalid"][0]["source"], "/nodecycle/pools/test/general");

    // The good pool keeps working with the hostile documents in place: a new image is
    // resolved, rolled out, and a Spot warning drains its node.
    let new = f.cloud.register_image(
        ImageFixture::new("golden-2")
            .owner("self")
            .created("2024-06-01T00:00:00Z"),
    );
    let t1 = t0() + chrono::Duration::minutes(10);
    let report = f.watcher.handle(&json!({}), t1).await.unwrap();
    assert_eq!(
        outcome(&report, POLICY)["desired"],
        new.as_str(),
        "{report}"
    );
    let mut now = t1;
    for _ in 0..40 {
        f.pass(now).await;
        let images = f.a.group_images("prod-general").await;
        if images.len() == 2 && images.iter().all(|i| *i == new) {
            break;
        }
        now += chrono::Duration::minutes(1);
    }
    let images = f.a.group_images("prod-general").await;
    assert!(images.iter().all(|i| *i == new), "rolled out: {images:?}");
    assert_ne!(new, evil);
    f.kube
        .wait_for("nodes of the new instances", Duration::from_secs(30), |s| {
            (s.nodes.len() == 2).then_some(())
        });
    let (instance, node) =
        f.a.group_instances("prod-general")
            .await
            .into_iter()
            .map(|(id, _)| {
                let node = f
                    .kube
                    .state()
                    .nodes
                    .iter()
                    .find(|n| n["spec"]["providerID"].as_str().unwrap().ends_with(&id))
                    .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
                    .unwrap();
                (id, node)
            })
            .next()
            .unwrap();
    let out = f
        .interrupt(
            &event("spot-interruption-warning.json", &instance, Utc::now()),
            60,
        )
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "drained", "{out}");
    assert_eq!(
        f.kube.state().node(&node).unwrap()["spec"]["unschedulable"],
        true
    );
}

#[tokio::test]
async fn events_are_verified_before_they_act() {
    let f = fleet(2, &good_policy("x86_64", "golden-*"), true).await;
    let (instance, node) = f.nodes[0].clone();
    // A pod whose PDB allows no disruption at all, and a web pod.
    f.kube.add_pod(
        PodFixture::new("default", "db-0")
            .node(&node)
            .owner("StatefulSet", "db")
            .label("app", "db")
            .grace_seconds(1),
    );
    f.kube.add_pdb(
        PdbFixture::new("default", "db")
            .match_label("app", "db")
            .min_available("100%"),
    );
    f.kube.add_pod(
        PodFixture::new("default", "web-0")
            .node(&node)
            .owner("ReplicaSet", "web-5d8f")
            .label("app", "web")
            .grace_seconds(1),
    );
    // A group no policy manages.
    f.a.create_group("prod-batch", &f.old, "m5.large", 1, 2, Some("prod"))
        .await;
    let batch = f.a.group_instances("prod-batch").await[0].0.clone();
    let before = f.snapshot().await;
    let kube_writes = || {
        f.kube
            .state()
            .requests
            .iter()
            .filter(|r| r.method != "GET")
            .count()
    };
    let writes_before = kube_writes();

    let now = Utc::now();
    let warning = event("spot-interruption-warning.json", &instance, now);
    let mut cases: Vec<(&str, Value, &str)> = Vec::new();
    let mut foreign = warning.clone();
    foreign["account"] = json!("999999999999");
    cases.push(("another account", foreign, "account \"999999999999\""));
    let mut elsewhere = warning.clone();
    elsewhere["region"] = json!("eu-west-1");
    cases.push(("another region", elsewhere, "region \"eu-west-1\""));
    let mut no_account = warning.clone();
    no_account.as_object_mut().unwrap().remove("account");
    cases.push(("no account", no_account, "no account"));
    let mut other_hook = event("asg-terminate-lifecycle-action.json", &instance, now);
    other_hook["detail"]["LifecycleHookName"] = json!("backup-snapshot-hook");
    cases.push((
        "another tool's hook",
        other_hook,
        "\"backup-snapshot-hook\" is not nodecycle's",
    ));
    let mut not_a_member = event("asg-terminate-lifecycle-action.json", &batch, now);
    not_a_member["detail"]["AutoScalingGroupName"] = json!("prod-general");
    cases.push((
        "an instance of another group",
        not_a_member,
        "is in group \"prod-batch\", not in \"prod-general\"",
    ));
    let mut terminated = event("instance-state-change.json", &instance, now);
    terminated["detail"]["state"] = json!("terminated");
    cases.push((
        "terminated while EC2 says running",
        terminated,
        "EC2 reports it \"running\"",
    ));
    let mut stopping = event("instance-state-change.json", &instance, now);
    stopping["detail"]["state"] = json!("stopping");
    cases.push((
        "stopping while EC2 says running",
        stopping,
        "EC2 reports it \"running\"",
    ));
    for (what, ev, why) in &cases {
        let out = f.interrupt(ev, 30).await.unwrap();
        assert_eq!(out["decision"], "refused", "{what}: {out}");
        assert!(
            out["reason"].as_str().unwrap().contains(why),
            "{what}: {out}"
        );
    }
    // A 4 KB event id is an invalid event naming the field, not an internal error.
    let mut long_id = warning.clone();
    long_id["id"] = json!("e".repeat(4096));
    let e = f.interrupt(&long_id, 30).await.unwrap_err();
    assert_eq!(e.error_type, "InvalidEvent", "{e:?}");
    assert!(e.message.starts_with("id: 4096 characters long"), "{e:?}");
    assert!(e.message.len() < 300, "{e:?}");

    assert_eq!(
        before,
        f.snapshot().await,
        "a refused event changed something"
    );
    assert_eq!(kube_writes(), writes_before);
    let calls = f.cloud.control("lifecycle_actions", json!({}));
    assert_eq!(calls["calls"], json!([]), "no lifecycle action answered");

    // A Spot warning whose time claims it came long ago, for an instance EC2 does not say is
    // interrupted: PDBs are honoured throughout (it used to delete every pod at once).
    let ancient = event(
        "spot-interruption-warning.json",
        &instance,
        at("1970-01-01T00:00:00Z"),
    );
    let out = f.interrupt(&ancient, 8).await.unwrap();
    let s = f.kube.state();
    assert_eq!(
        s.node(&node).unwrap()["spec"]["unschedulable"],
        true,
        "{out}"
    );
    assert!(
        s.requests_to("DELETE", "/api/v1/namespaces/default/pods/db-0")
            .is_empty(),
        "the PDB-held pod was deleted: {out}"
    );
    assert!(s.pod("default", "db-0").is_some(), "{out}");
    assert!(s.pod("default", "web-0").is_none(), "web-0 evicted: {out}");
}

#[tokio::test]
async fn an_architecture_its_group_cannot_run_is_invalid_and_nothing_is_launched() {
    let f = fleet(2, &good_policy("arm64", "golden-arm-*"), false).await;
    let arm = f.cloud.register_image(
        ImageFixture::new("golden-arm-1")
            .architecture("arm64")
            .owner("self")
            .created("2024-06-01T00:00:00Z"),
    );
    let before = f.snapshot().await;
    let report = f.watcher.handle(&json!({}), t0()).await.unwrap();
    let pool = &report["pools"][0];
    assert_eq!(pool["status"], "invalid", "{report}");
    let error = pool["error"].as_str().unwrap();
    assert!(
        error.contains("architecture: arm64 images do not run on m5.large (x86_64) of Auto Scaling group prod-general"),
        "{error}"
    );
    assert!(error.contains("expected architecture: x86_64"), "{error}");
    // The image did not become desired; the error is the pool's, shown by status.
    let record = f.record().await;
    assert!(record.desired.is_none());
    assert!(
        record
            .last_error
            .unwrap()
            .message
            .contains("do not run on m5.large")
    );
    let status = f
        .ops
        .ok(json!({"action": "status", "pool": "prod/general"}), t0())
        .await;
    assert!(
        status["pools"][0]["lastError"]["message"]
            .as_str()
            .unwrap()
            .contains("arm64 images do not run on m5.large"),
        "{status}"
    );
    // Nothing launched: no template version, no surge.
    f.pass(t0()).await;
    let after = f.snapshot().await;
    assert_eq!(before.groups, after.groups);
    assert_eq!(before.templates, after.templates);
    assert_eq!(before.kube_version, after.kube_version);

    // Pinned by an operator (pin checks the image against the policy's architecture only):
    // the rotator still never writes it into the group's template.
    f.ops
        .ok(
            json!({"action": "pin", "pool": "prod/general", "ami": arm, "reason": "try arm"}),
            t0(),
        )
        .await;
    let report = f.pass(t0() + chrono::Duration::minutes(1)).await;
    let blocked = report["pools"][0]["blocked"].as_str().unwrap_or_default();
    assert!(
        blocked.contains(&format!("{arm} is not written into the node group"))
            && blocked.contains("do not run on m5.large"),
        "{report}"
    );
    let after = f.snapshot().await;
    assert_eq!(before.groups, after.groups);
    assert_eq!(before.templates, after.templates);
    assert_eq!(before.kube_version, after.kube_version);
}

#[tokio::test]
async fn hostile_requests_are_refused_naming_the_field_audited_and_change_nothing() {
    let f = fleet(1, &good_policy("x86_64", "golden-*"), true).await;
    let before = f.snapshot().await;
    let big = |n: usize| "r".repeat(n);
    let cases = vec![
        (
            json!({"action": "pause", "pool": "prod/general", "reason": big(300 * 1024)}),
            "reason: 307200 bytes; expected at most 1024",
        ),
        (
            json!({"action": "pause", "pool": "prod/general", "reason": big(1024 * 1024)}),
            "reason: 1048576 bytes; expected at most 1024",
        ),
        (
            json!({"action": "quarantine", "release": "v20241109", "reason": big(300 * 1024)}),
            "reason: 307200 bytes",
        ),
        (
            json!({"action": "pause", "pool": format!("prod/{}", big(1024 * 1024)), "reason": "x"}),
            "pool: expected \"<cluster>/<name>\"",
        ),
        (
            json!({"action": "pause", "pool": "prod/nope", "reason": "x"}),
            "pool: unknown \"prod/nope\"",
        ),
    ];
    for (request, expected) in &cases {
        let e = f.ops.request(request.clone(), t0()).await.unwrap_err();
        assert_eq!(e.error_type, "InvalidRequest", "{e:?}");
        assert!(
            e.message.contains(expected),
            "{}",
            &e.message[..e.message.len().min(500)]
        );
        assert!(
            e.message.len() < 2048,
            "quotes a prefix only: {}",
            e.message.len()
        );
    }
    assert_eq!(
        before,
        f.snapshot().await,
        "a refused request changed something"
    );
    // Each refusal is audited under AUDIT (refused at parsing, or an unknown pool), the request
    // bounded; nothing is quarantined.
    let audits = f.table.query("AUDIT", "AUDIT#").await.unwrap();
    assert_eq!(audits.len(), cases.len(), "{audits:?}");
    for (_, v) in &audits {
        assert_eq!(v.value["outcome"]["ok"], false, "{}", v.value);
        assert_eq!(v.value["outcome"]["errorType"], "InvalidRequest");
        assert!(v.value.to_string().len() < 70 * 1024);
    }
    assert!(
        audits
            .iter()
            .any(|(_, v)| v.value["request"]["truncated"] == true)
    );
    assert!(f.table.query("QUARANTINE", "Q#").await.unwrap().is_empty());

    // When the audit record cannot be written, the request is refused and nothing is done.
    f.cloud.faults(
        Faults::new().seed(1).aws(
            AwsFaults::new(1.0)
                .operations(&["PutItem"])
                .kinds(&[AwsFault::Http500]),
        ),
    );
    let e = f
        .ops
        .request(
            json!({"action": "pause", "pool": "prod/general", "reason": "maintenance"}),
            t0(),
        )
        .await
        .unwrap_err();
    f.cloud.clear_faults();
    assert!(e.message.contains("cannot write the audit record"), "{e:?}");
    assert!(f.record().await.paused.is_none());
    assert_eq!(before, f.snapshot().await);
    // And with the table writable, the same request works and is audited first.
    let out = f
        .ops
        .ok(
            json!({"action": "pause", "pool": "prod/general", "reason": "maintenance"}),
            t0(),
        )
        .await;
    assert_eq!(out["changed"], true, "{out}");
    let audits = f.table.query("POOL#prod/general", "AUDIT#").await.unwrap();
    assert_eq!(audits.len(), 1);
    assert_eq!(audits[0].1.value["outcome"]["ok"], true);
}
