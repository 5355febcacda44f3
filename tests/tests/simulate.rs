//! `nodecycle simulate`: the JSON contract of a forecast from policy files, the committed picture
//! being what its README command regenerates, bad input, and `--live` forecasting from the
//! fake cloud's stored state without changing it.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use nodecycle::handlers::Invocation;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nodecycle_tests::{FakeCloud, ImageFixture, SyncNodes};
use serde_json::{Value, json};
use support::*;

fn bin() -> PathBuf {
    // target/<profile>/deps/simulate-<hash> -> target/<profile>/nodecycle
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("nodecycle");
    assert!(
        path.exists(),
        "{} not built (cargo build --bins builds it)",
        path.display()
    );
    path
}

/// Runs the binary in the repository root (so relative paths are the README's).
fn run(args: &[&str], cloud: Option<&FakeCloud>, extra_env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(nodecycle_tests::repo_path("."))
        .env_remove("AWS_PROFILE")
        .env("NODECYCLE_LOG", "warn");
    if let Some(c) = cloud {
        cmd.envs(c.env_vars());
    }
    cmd.envs(extra_env.iter().copied());
    cmd.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ok(o: &Output) -> Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        stdout(o),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&stdout(o)).unwrap()
}

fn temp_path(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("nodecycle-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).to_string_lossy().into_owned()
}

const EXAMPLES: [&str; 3] = [
    "examples/prod-general.yaml",
    "examples/prod-golden.yaml",
    "examples/test-general.yaml",
];

/// The command README gives for `docs/simulate.svg` (with the output path last).
const PICTURE_ARGS: [&str; 10] = [
    "simulate",
    "examples/prod-general.yaml",
    "examples/prod-golden.yaml",
    "examples/test-general.yaml",
    "--from",
    "2026-12-03T00:00:00Z",
    "--new-ami-at",
    "2026-12-04T16:30:00Z",
    "--age",
    "700h",
];

#[test]
fn the_committed_picture_is_what_its_readme_command_draws() {
    let out = temp_path("simulate.svg");
    let mut args = PICTURE_ARGS.to_vec();
    args.extend(["--svg", &out]);
    ok(&run(&args, None, &[]));
    let drawn = std::fs::read(&out).unwrap();
    let committed = std::fs::read(nodecycle_tests::repo_path("docs/simulate.svg")).unwrap();
    assert!(
        drawn == committed,
        "docs/simulate.svg is stale: regenerate it with `nodecycle {} --svg docs/simulate.svg` (see docs/development.md)",
        PICTURE_ARGS.join(" ")
    );
    let readme =
        std::fs::read_to_string(nodecycle_tests::repo_path("docs/development.md")).unwrap();
    assert!(
        readme.contains(&format!(
            "{} --svg docs/simulate.svg",
            PICTURE_ARGS.join(" ")
        )),
        "docs/development.md gives the command that regenerates docs/simulate.svg"
    );
}

#[test]
fn a_forecast_from_policy_files_prints_the_contract_and_draws_it() {
    let (svg, html) = (temp_path("contract.svg"), temp_path("contract.html"));
    let mut args = vec!["simulate"];
    args.extend(EXAMPLES);
    args.extend([
        "--from",
        "2026-12-01T00:00:00Z",
        "--days",
        "2",
        "--nodes",
        "4",
        "--nodes",
        "test/general=10",
        "--rotation",
        "15m",
        "--svg",
        &svg,
        "--html",
        &html,
    ]);
    let v = ok(&run(&args, None, &[]));
    assert_eq!(v["from"], "2026-12-01T00:00:00Z");
    assert_eq!(v["to"], "2026-12-03T00:00:00Z");
    let pools: Vec<&Value> = v["pools"].as_array().unwrap().iter().collect();
    let names: Vec<&str> = pools.iter().map(|p| p["pool"].as_str().unwrap()).collect();
    assert_eq!(names, ["prod/general", "prod/golden", "test/general"]);
    for p in &pools {
        let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "pool",
                "nodes",
                "rotations",
                "blocked",
                "done",
                "maxInFlight",
                "maxInFlightAt",
                "maxInFlightWhy",
                "notes"
            ]
        );
        // No --age: every pool (expireAfter defaults to 720h) says no node expires.
        assert!(
            p["notes"][0]
                .as_str()
                .is_some_and(|n| n.starts_with("--age is 0")),
            "{p}"
        );
        for r in p["rotations"].as_array().unwrap() {
            let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
            assert_eq!(
                keys,
                ["instance", "reason", "start", "end", "forced", "wave"]
            );
            // Only the managed node group's replacements are update waves.
            assert_eq!(r["wave"], p["pool"] == "prod/golden", "{r}");
        }
    }
    // test/general: 10 nodes, budget "2": 5 rounds of 15 minutes from the start.
    let test = pools[2];
    assert_eq!(test["nodes"], 10);
    assert_eq!(test["maxInFlight"], 2);
    assert_eq!(test["rotations"].as_array().unwrap().len(), 10);
    assert_eq!(test["done"], "2026-12-01T01:15:00Z");
    assert_eq!(test["rotations"][0]["reason"], "Drifted");
    // prod/golden, a managed node group with budget "1": four waves of one node.
    let golden = pools[1];
    assert_eq!(golden["nodes"], 4);
    assert_eq!(golden["maxInFlight"], 1);
    assert_eq!(golden["done"], "2026-12-01T01:00:00Z");
    // prod/general (Tuesday): drift waits for the weekday window (closed 17:00-09:00 UTC).
    let general = pools[0];
    assert_eq!(general["rotations"][0]["start"], "2026-12-01T09:00:00Z");
    let first_wait = &general["blocked"][0];
    assert_eq!(first_wait["from"], "2026-12-01T00:00:00Z");
    assert_eq!(first_wait["to"], "2026-12-01T09:00:00Z");
    assert_eq!(first_wait["reason"], "Drifted");
    assert!(
        first_wait["why"]
            .as_str()
            .unwrap()
            .starts_with("disruption.budgets[3] (nodes \"0\", schedule \"0 17 * * mon-fri\""),
        "{first_wait}"
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.contains("prod/golden") && svg.contains("<title>"));
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg "));
}

#[test]
fn bad_input_is_refused_with_exit_2() {
    // Invalid policies: every problem of every file, as `validate` prints them.
    let bad = temp_path("bad.yaml");
    std::fs::write(
        &bad,
        "cluster: prod\nname: x\nnodeGroup: { autoScalingGroup: g }\namiSelectorTerms:\n  - alias: al2024@latest\n",
    )
    .unwrap();
    let out = run(&["simulate", EXAMPLES[0], &bad], None, &[]);
    assert_eq!(out.status.code(), Some(2));
    let validate = run(&["validate", &bad], None, &[]);
    assert_eq!(stdout(&out), stdout(&validate));
    // An unknown pool in --nodes is named.
    let out = run(
        &["simulate", EXAMPLES[0], "--nodes", "prod/nope=3"],
        None,
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("\"prod/nope\""),
        "{v}"
    );
    // More than 31 days, a rotation that is not whole minutes, no policy.
    for args in [
        vec!["simulate", EXAMPLES[0], "--days", "32"],
        vec!["simulate", EXAMPLES[0], "--rotation", "90s"],
        vec!["simulate"],
        vec!["simulate", EXAMPLES[0], EXAMPLES[0]],
    ] {
        let out = run(&args, None, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stdout(&out));
    }
}

/// An Amazon-owned AL2023 release as EKS publishes it (image, `recommended` JSON) and known to
/// the fake EKS as launching it.
fn publish_release(cloud: &FakeCloud, release: &str, date: &str) -> String {
    let base = "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard";
    let name = format!("amazon-eks-node-al2023-x86_64-standard-1.30-v{date}");
    let id = cloud.register_image(
        ImageFixture::new(&name)
            .architecture("x86_64")
            .owner("amazon")
            .created(&format!(
                "{}-{}-{}T00:00:00Z",
                &date[..4],
                &date[4..6],
                &date[6..]
            )),
    );
    cloud.put_parameter(&format!("{base}/{name}/image_id"), &id);
    cloud.put_parameter(&format!("{base}/recommended/image_id"), &id);
    cloud.put_parameter(
        &format!("{base}/recommended"),
        &json!({"image_id": id, "image_name": name, "release_version": release}).to_string(),
    );
    cloud.control(
        "map_release",
        json!({"releaseVersion": release, "image": id}),
    );
    id
}

/// Everything `--live` could change: every table item, the Auto Scaling groups, the launch
/// template versions, the node group.
async fn stored_state(a: &Adapters) -> String {
    let items = a
        .clients
        .dynamodb
        .scan()
        .table_name("nodecycle")
        .send()
        .await
        .unwrap();
    let mut rows: Vec<String> = items
        .items()
        .iter()
        .map(|i| format!("{:?}", i.iter().collect::<BTreeMap<_, _>>()))
        .collect();
    rows.sort();
    let groups = a
        .clients
        .autoscaling
        .describe_auto_scaling_groups()
        .send()
        .await
        .unwrap();
    let templates = a
        .clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_name("prod-general")
        .send()
        .await
        .unwrap();
    let nodegroup = a
        .clients
        .eks
        .describe_nodegroup()
        .cluster_name("prod")
        .nodegroup_name("golden")
        .send()
        .await
        .unwrap();
    format!(
        "{rows:#?}\n{:#?}\n{:#?}\n{:#?}",
        groups.auto_scaling_groups(),
        templates.launch_template_versions(),
        nodegroup.nodegroup()
    )
}

#[tokio::test]
async fn live_forecasts_from_the_stored_state_without_writing() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let kube = cloud.create_kube("prod");
    let a = Adapters::new(&cloud).await;
    // prod/general: a self-managed group of 6 on golden-1; golden-2 is newer.
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
    a.create_group("prod-general", &old, "m5.large", 6, 10, Some("prod"))
        .await;
    // prod/golden: a managed node group of 3 on an older AL2023 release than the recommended.
    let old_release = publish_release(&cloud, "1.30.4-20241001", "20241001");
    cloud.control(
        "create_nodegroup",
        json!({"cluster": "prod", "nodegroup": "golden", "size": 3, "max": 6,
               "image": old_release, "releaseVersion": "1.30.4-20241001"}),
    );
    publish_release(&cloud, "1.30.6-20241101", "20241101");
    kube.sync_nodes(SyncNodes::default());
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"2\"\n",
    );
    cloud.put_parameter(
        "/nodecycle/pools/prod/golden",
        "cluster: prod\nname: golden\nnodeGroup: { managedNodeGroup: golden }\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\ndisruption:\n  budgets:\n    - nodes: \"1\"\n",
    );
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies, table.clone()).await;
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == 9).then_some(())
    });
    // Desired AMIs resolved; one rotator pass of prod/general now: two rotations in flight.
    let now = support::now();
    watcher.handle(&json!({}), now).await.unwrap();
    rotator
        .handle(
            &json!({"pools": ["prod/general"]}),
            Invocation::at(now, Instant::now() + Duration::from_secs(60)),
        )
        .await
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));

    let before = stored_state(&a).await;
    let mutations_before = kube.requests().iter().filter(|r| r.method != "GET").count();
    let env = [("NODECYCLE_TABLE", "nodecycle")];
    let v = ok(&run(
        &["simulate", "--live", "--days", "1"],
        Some(&cloud),
        &env,
    ));
    assert_eq!(
        stored_state(&a).await,
        before,
        "--live changed the stored state"
    );
    let mutations_after = kube.requests().iter().filter(|r| r.method != "GET").count();
    assert_eq!(
        mutations_after, mutations_before,
        "--live wrote to Kubernetes"
    );

    let pools = v["pools"].as_array().unwrap();
    let names: Vec<&str> = pools.iter().map(|p| p["pool"].as_str().unwrap()).collect();
    assert_eq!(names, ["prod/general", "prod/golden"]);
    // prod/general: the two rotations in flight continue, the other four follow, two at a time.
    let general = &pools[0];
    assert_eq!(general["nodes"], 6);
    let rotations = general["rotations"].as_array().unwrap();
    assert_eq!(rotations.len(), 6, "{general}");
    assert!(rotations.iter().all(|r| r["reason"] == "Drifted"));
    assert!(general["maxInFlight"].as_u64().unwrap() <= 2);
    assert!(general["done"].is_string(), "{general}");
    // prod/golden: the node group update rolls one node per wave.
    let golden = &pools[1];
    assert_eq!(golden["nodes"], 3);
    assert_eq!(golden["rotations"].as_array().unwrap().len(), 3, "{golden}");
    assert_eq!(golden["maxInFlight"], 1);
    assert!(golden["done"].is_string(), "{golden}");

    // One pool by name; an unknown pool is named (exit 2).
    let v = ok(&run(
        &["simulate", "--live", "prod/golden", "--days", "1"],
        Some(&cloud),
        &env,
    ));
    assert_eq!(v["pools"].as_array().unwrap().len(), 1);
    let out = run(&["simulate", "--live", "prod/nope"], Some(&cloud), &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).contains("prod/nope"), "{}", stdout(&out));
    assert_eq!(stored_state(&a).await, before);
    let _ = new;
}

/// `--failures` through the binary: the new release failing on 3 nodes 2h after they join
/// indicts it in test (6 nodes, budget "4"), prod/apps (promotion from test) never takes it;
/// malformed or meaningless failures are refused with exit 2, naming what is expected.
#[test]
fn failures_indict_the_release_in_the_forecast_and_bad_ones_are_refused() {
    let test = temp_path("test-general.yaml");
    std::fs::write(
        &test,
        std::fs::read_to_string(nodecycle_tests::repo_path("examples/test-general.yaml"))
            .unwrap()
            .replace("nodes: \"2\"", "nodes: \"4\""),
    )
    .unwrap();
    let prod = "examples/prod-apps.yaml";
    let args = [
        "simulate",
        test.as_str(),
        prod,
        "--nodes",
        "6",
        "--from",
        "2026-12-03T00:00:00Z",
        "--failures",
        "new:3@2h",
    ];
    let v = ok(&run(&args, None, &[]));
    let pools = v["pools"].as_array().unwrap();
    let pool = |id: &str| pools.iter().find(|p| p["pool"] == id).unwrap();
    let indicted = &pool("test/general")["indicted"];
    assert_eq!(indicted["ami"], "ami-new", "{v}");
    assert_eq!(indicted["by"], "test/general");
    assert_eq!(indicted["rolledBackTo"], "ami-current");
    assert!(
        indicted["why"].as_str().unwrap().contains("3 of"),
        "{indicted}"
    );
    assert!(
        pool("prod/apps")["promotion"]["desiredAt"].is_null(),
        "prod never takes it: {}",
        pool("prod/apps")
    );
    // Without --failures the same forecast indicts nothing.
    let clean = ok(&run(&args[..args.len() - 2], None, &[]));
    assert!(
        clean["pools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p.get("indicted").is_none_or(Value::is_null)),
        "{clean}"
    );
    for bad in ["new", "new:0@2h", "new:x@2h", "new:3@soon", "new:3"] {
        let out = run(&["simulate", test.as_str(), "--failures", bad], None, &[]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stdout(&out));
        let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
        assert!(
            text.contains("<AMI|new>:<NODES>@<AFTER>") || text.contains("failures"),
            "{bad}: {text}"
        );
    }
}
