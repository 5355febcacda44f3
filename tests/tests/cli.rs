//! The `nodecycle` binary's stable interface: exit codes, stdout shapes, and `run` going through
//! the same handler as the Lambda, against moto server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Output};

use nodecycle_tests::FakeCloud;
use serde_json::Value;
use support::*;

pub(crate) fn bin() -> PathBuf {
    // target/<profile>/deps/cli-<hash> -> target/<profile>/nodecycle
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("nodecycle");
    assert!(
        path.exists(),
        "{} not built (cargo test --workspace builds it)",
        path.display()
    );
    path
}

pub(crate) fn repo(path: &str) -> String {
    nodecycle_tests::repo_path(path).display().to_string()
}

pub(crate) fn run(args: &[&str], cloud: Option<&FakeCloud>, extra_env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("AWS_PROFILE")
        .env("NODECYCLE_LOG", "warn");
    if let Some(c) = cloud {
        cmd.envs(c.env_vars());
    }
    cmd.envs(extra_env.iter().copied());
    cmd.output().unwrap()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `nodecycle validate --live FILE` against `cloud` with `env`: its exit code and the entry of
/// its one pool.
pub(crate) fn validate_live(
    cloud: &FakeCloud,
    file: &str,
    env: &[(&str, &str)],
) -> (Option<i32>, Value) {
    let out = run(&["validate", "--live", file], Some(cloud), env);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), v["pools"][0].clone())
}

pub(crate) fn temp_file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("nodecycle-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn validate_exit_codes_and_problem_lines() {
    let ok = repo("examples/prod-general.yaml");
    let out = run(&["validate", &ok], None, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // The wrapping weekend range is accepted with a portability warning.
    assert!(
        stdout(&out).contains("disruption.budgets[2].schedule: warning: "),
        "{}",
        stdout(&out)
    );

    let bad = temp_file(
        "bad.yaml",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: g }\namiSelectorTerms:\n  - alias: al2024@latest\npaused: yes\n",
    );
    let out = run(&["validate", &ok, &bad], None, &[]);
    assert_eq!(out.status.code(), Some(2));
    let lines: Vec<String> = stdout(&out)
        .lines()
        .filter(|l| l.starts_with(&bad))
        .map(str::to_string)
        .collect();
    assert_eq!(
        lines,
        vec![
            format!(
                "{bad}: amiSelectorTerms[0].alias: unknown family \"al2024\"; expected one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025"
            ),
            format!("{bad}: paused: expected a boolean (true or false), got \"yes\""),
        ]
    );
    let out = run(&["validate", "/nonexistent.yaml"], None, &[]);
    assert_eq!(out.status.code(), Some(2));
}

/// Warnings alone exit 0, and 1 with `--strict`; an error exits 2 either way.
#[test]
fn validate_strict_fails_on_warnings() {
    let base = "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: g }\namiSelectorTerms:\n  - alias: al2023@latest\n";
    let clean = temp_file("clean.yaml", base);
    let warned = temp_file("warned.yaml", &format!("{base}expireAfter: 5m\n"));
    let broken = temp_file("broken.yaml", &format!("{base}expireAfer: 24h\n"));
    let code = |args: &[&str]| run(args, None, &[]).status.code();
    assert_eq!(code(&["validate", &clean]), Some(0));
    assert_eq!(code(&["validate", "--strict", &clean]), Some(0));
    let out = run(&["validate", &warned], None, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains(&format!(
            "{warned}: expireAfter: warning: \"5m\" is shorter than 1h"
        )),
        "{}",
        stdout(&out)
    );
    assert_eq!(code(&["validate", "--strict", &warned]), Some(1));
    assert_eq!(code(&["validate", "--strict", &clean, &warned]), Some(1));
    let out = run(&["validate", "--strict", &warned, &broken], None, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains(&format!(
            "{broken}: expireAfer: unknown field; expected one of "
        )) && stdout(&out).contains("; did you mean expireAfter?"),
        "{}",
        stdout(&out)
    );
    // A byte order mark (Windows editors) is skipped.
    let bom = temp_file("bom.yaml", &format!("\u{feff}{base}"));
    assert_eq!(code(&["validate", "--strict", &bom]), Some(0));
}

/// Promotion chains across the files given: a cycle fails validation naming the pools, an
/// upstream outside the files is a warning; the examples form a valid chain.
#[test]
fn validate_checks_promotion_chains_across_files() {
    let examples = [
        repo("examples/test-general.yaml"),
        repo("examples/prod-apps.yaml"),
    ];
    let out = run(&["validate", &examples[0], &examples[1]], None, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(!stdout(&out).contains("promotion.from"), "{}", stdout(&out));

    let out = run(&["validate", &examples[1]], None, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("promotion.from: warning: upstream pool test/general"),
        "{}",
        stdout(&out)
    );

    let pool = |cluster: &str, from: &str| {
        temp_file(
            &format!("{cluster}.yaml"),
            &format!(
                "cluster: {cluster}\nname: general\nnodeGroup: {{ autoScalingGroup: g }}\namiSelectorTerms:\n  - alias: al2023@latest\npromotion:\n  from: {from}/general\n  soak: 1h\n"
            ),
        )
    };
    let a = pool("a", "b");
    let b = pool("b", "a");
    let out = run(&["validate", &a, &b], None, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("a/general -> b/general -> a/general"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test]
async fn resolve_prints_the_stable_json_shape() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let published = publish_al2023(&cloud, "1.30", "v20240807", "2024-08-07T10:00:00Z");
    let policy = temp_file(
        "pinned.yaml",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: arm64\namiSelectorTerms:\n  - alias: al2023@v20240807\n",
    );
    let out = run(&["resolve", &policy], Some(&cloud), &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["pool"], "prod/general");
    assert_eq!(v["kubernetesVersion"], "1.30");
    let desired = &v["desired"];
    assert_eq!(
        desired["id"],
        id_of(&published, "arm64", "standard").as_str()
    );
    assert_eq!(
        desired["name"],
        "amazon-eks-node-al2023-arm64-standard-1.30-v20240807"
    );
    assert_eq!(desired["architecture"], "arm64");
    assert_eq!(desired["variant"], "standard");
    assert_eq!(desired["deprecated"], false);
    assert!(
        desired["creationDate"]
            .as_str()
            .unwrap()
            .starts_with("2024-08-07T10:00:00")
    );
    assert_eq!(desired["source"]["term"], 0);
    assert_eq!(
        desired["source"]["parameter"],
        "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.30-v20240807/image_id"
    );
    let keys: Vec<&String> = desired.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "id",
            "name",
            "architecture",
            "variant",
            "creationDate",
            "deprecated",
            "source"
        ]
    );
    assert_eq!(v["candidates"].as_array().unwrap().len(), 5);

    let none = temp_file(
        "none.yaml",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: arm64\namiSelectorTerms:\n  - name: does-not-exist-*\n",
    );
    let out = run(&["resolve", &none], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("no AMI matches arm64/standard"),
        "{v}"
    );

    let invalid = temp_file("invalid.yaml", "cluster: prod\n");
    assert_eq!(
        run(&["resolve", &invalid], Some(&cloud), &[]).status.code(),
        Some(2)
    );
}

#[test]
fn budget_prints_the_allowance() {
    let policy = repo("examples/prod-general.yaml");
    // Saturday 10:00 UTC = Saturday 18:00 in Shanghai: inside the weekend "0" window (budget 2).
    let out = run(
        &[
            "budget",
            &policy,
            "--at",
            "2026-12-05T10:00:00Z",
            "--nodes",
            "19",
        ],
        None,
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"reason": "Drifted", "total": 19, "disrupting": 0, "allowed": 0, "limitedBy": "disruption.budgets[2]", "nextChange": "2026-12-07T01:00:00Z", "nextWindowEdge": "2026-12-07T01:00:00Z"})
    );
    // Friday 20:00 UTC, inside the weekday-evening "0" window: the weekend "0" window opens on
    // Saturday at 01:00 UTC and the evening one ends at 09:00 UTC, neither a change (still 0);
    // the weekend ends on Monday at 01:00 UTC, which is.
    let out = run(
        &[
            "budget",
            &policy,
            "--at",
            "2026-12-04T20:00:00Z",
            "--nodes",
            "19",
        ],
        None,
        &[],
    );
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (&v["allowed"], &v["nextWindowEdge"], &v["nextChange"]),
        (
            &serde_json::json!(0),
            &serde_json::json!("2026-12-05T01:00:00Z"),
            &serde_json::json!("2026-12-07T01:00:00Z")
        ),
        "{v}"
    );
    // Wednesday 10:00 UTC: 15% of 19 rounds up to 3, the "3" budget ties; one already disrupting.
    let out = run(
        &[
            "budget",
            &policy,
            "--at",
            "2026-12-02T10:00:00Z",
            "--nodes",
            "19",
            "--disrupting",
            "1",
            "--reason",
            "Expired",
        ],
        None,
        &[],
    );
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["allowed"], 2);
    // The budget is named as `status` names it: its field path.
    assert_eq!(v["limitedBy"], "disruption.budgets[0]");
    assert_eq!(v["reason"], "Expired");
    assert_eq!(
        run(
            &["budget", &policy, "--at", "yesterday", "--nodes", "3"],
            None,
            &[]
        )
        .status
        .code(),
        Some(2)
    );
}

#[tokio::test]
async fn run_ami_watcher_uses_the_lambda_handler() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let published = publish_al2023(&cloud, "1.30", "v20240807", "2024-08-07T10:00:00Z");
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\n",
    );
    Adapters::new(&cloud).await.table("cli-state").await;
    let env = [("NODECYCLE_TABLE", "cli-state"), ("NODECYCLE_LOG", "info")];
    let out = run(
        &[
            "run",
            "ami-watcher",
            "--event",
            &repo("events/scheduled-tick.json"),
        ],
        Some(&cloud),
        &env,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["pools"][0]["pool"], "prod/general");
    assert_eq!(
        v["pools"][0]["desired"],
        id_of(&published, "x86_64", "standard").as_str()
    );
    // Logs are structured JSON on stderr, one decision per line.
    let decision = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["pool"] == "prod/general" && l.get("decision").is_some())
        .expect("a JSON decision line for the pool");
    assert_eq!(decision["decision"], "changed");

    // A malformed event is an InvalidEvent error, exit 1.
    let bad = temp_file(
        "bad-event.json",
        r#"{"detail-type": "Parameter Store Change", "source": "aws.ssm", "detail": {}}"#,
    );
    let out = run(&["run", "ami-watcher", "--event", &bad], Some(&cloud), &env);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["errorType"], "InvalidEvent");
}

#[test]
fn drain_cordons_and_drains_through_the_binary() {
    use nodecycle_tests::PodFixture;
    let cloud = FakeCloud::start();
    let kube = cloud.create_kube("prod");
    kube.add_node(
        "ip-10-0-1-10.us-east-2.compute.internal",
        "aws:///us-east-2a/i-0123456789abcdef0",
    );
    kube.add_pod(
        PodFixture::new("default", "web-1")
            .node("ip-10-0-1-10.us-east-2.compute.internal")
            .owner("ReplicaSet", "web-5d8f")
            .grace_seconds(1),
    );
    kube.add_pod(
        PodFixture::new("kube-system", "aws-node-x")
            .node("ip-10-0-1-10.us-east-2.compute.internal")
            .owner("DaemonSet", "aws-node"),
    );
    let out = run(
        &[
            "drain",
            "--cluster",
            "prod",
            "i-0123456789abcdef0",
            "--timeout",
            "2m",
        ],
        Some(&cloud),
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(v["node"], "ip-10-0-1-10.us-east-2.compute.internal");
    assert_eq!(v["evicted"], 1);
    assert_eq!(v["skipped"], 1);
    assert_eq!(v["done"], true);
    assert!(
        !String::from_utf8_lossy(&out.stderr).is_empty(),
        "progress lines go to stderr"
    );
    let node = kube.state();
    assert_eq!(
        node.node("ip-10-0-1-10.us-east-2.compute.internal")
            .unwrap()["spec"]["unschedulable"],
        true
    );

    let out = run(
        &["drain", "--cluster", "prod", "i-0aaaaaaaaaaaaaaaa"],
        Some(&cloud),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "unknown instance");
    let out = run(
        &["drain", "--cluster", "prod", "not-an-instance"],
        Some(&cloud),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "bad argument");
    let out = run(
        &[
            "drain",
            "--cluster",
            "prod",
            "i-0123456789abcdef0",
            "--grace",
            "soon",
        ],
        Some(&cloud),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "bad duration");
}

/// `validate --live`: what the first pass would do for a policy not stored yet, from the live
/// group, with or without the state table, and nothing written anywhere.
#[tokio::test]
async fn validate_live_previews_the_first_pass_and_writes_nothing() {
    use nodecycle::state::Store;
    use nodecycle_tests::SyncNodes;
    let (cloud, kube, old, new) = pool::golden_cloud();
    let a = Adapters::new(&cloud).await;
    a.create_group("prod-general", &old, "m5.large", 3, 6, Some("prod"))
        .await;
    kube.sync_nodes(SyncNodes::default());
    kube.wait_for("nodes", std::time::Duration::from_secs(30), |s| {
        (s.nodes.len() == 3).then_some(())
    });
    let table = a.table("cli-live").await;
    let text = |paused: bool| {
        format!(
            "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"1\"\npaused: {paused}\n"
        )
    };
    let live = |file: &str, env: &[(&str, &str)]| validate_live(&cloud, file, env);

    // Unpaused, without the table: the terms resolve to golden-2, every node is drifted, the
    // first pass moves the launch template and starts one rotation (budget "1").
    let (code, p) = live(&temp_file("live.yaml", &text(false)), &[]);
    assert_eq!(code, Some(0), "{p}");
    assert_eq!(
        (p["firstPass"].clone(), p["table"].clone()),
        (true.into(), false.into())
    );
    assert_eq!(p["watcher"]["status"], "changed", "{p}");
    assert_eq!(p["desired"]["ami"], new.as_str());
    assert_eq!(p["plan"]["candidates"].as_array().unwrap().len(), 3, "{p}");
    let actions: Vec<&str> = p["plan"]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["updateLaunchTemplate", "startRotation"], "{p}");
    assert!(
        p["plan"]["blocked"]
            .as_str()
            .unwrap()
            .contains("Drifted budget"),
        "{p}"
    );

    // Paused, with the table: the same candidates, nothing starts, the pause says why.
    let (code, p) = live(
        &temp_file("live-paused.yaml", &text(true)),
        &[("NODECYCLE_TABLE", "cli-live")],
    );
    assert_eq!(code, Some(0), "{p}");
    assert_eq!(p["table"], true);
    assert_eq!(p["plan"]["candidates"].as_array().unwrap().len(), 3, "{p}");
    assert_eq!(p["plan"]["actions"], serde_json::json!([]), "{p}");
    assert_eq!(
        p["plan"]["blocked"],
        "pool paused: policy sets paused: true"
    );

    // An arm64 policy for the x86_64 m5.large group: the architecture check says so, the
    // watcher would not take the image, nothing would start, and validate exits 1.
    let arm = text(false).replace("architecture: x86_64", "architecture: arm64");
    let (code, p) = live(&temp_file("live-arm.yaml", &arm), &[]);
    assert_eq!(code, Some(1), "{p}");
    let problems = p["problems"].as_array().unwrap();
    assert!(
        problems
            .iter()
            .any(|m| m.as_str().unwrap().starts_with("architecture")
                && m.as_str().unwrap().contains("m5.large")),
        "{p}"
    );
    assert_eq!(p["plan"]["actions"], serde_json::json!([]), "{p}");

    // Nothing was written: no state, no policy, the group still launches golden-1.
    for prefix in ["STATE", "ROT#", "AUDIT#"] {
        let items = table.query("POOL#prod/general", prefix).await.unwrap();
        assert!(items.is_empty(), "{prefix}: {items:?}");
    }
    let stored = nodecycle::policy::source::PolicySource::all(a.policies().as_ref())
        .await
        .unwrap();
    assert!(stored.is_empty(), "{stored:?}");
    assert_eq!(a.group_images("prod-general").await, vec![old.clone(); 3]);
    let (group, _) = nodecycle::fleet::GroupOps::describe(
        &nodecycle::aws::autoscaling::AutoScaling::new(
            a.clients.autoscaling.clone(),
            a.clients.ec2.clone(),
        ),
        "prod-general",
    )
    .await
    .unwrap();
    assert_eq!(group.launch_template_image.as_deref(), Some(old.as_str()));
}

/// An AL2023 version without its `v` is refused at validation with the alias to write.
#[test]
fn validate_refuses_an_amazon_linux_version_without_v() {
    let file = temp_file(
        "no-v.yaml",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: g }\namiSelectorTerms:\n  - alias: al2023@20240807\n",
    );
    let out = run(&["validate", &file], None, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains("amiSelectorTerms[0].alias: invalid al2023 version \"20240807\"")
            && stdout(&out).contains("did you mean \"al2023@v20240807\"?"),
        "{}",
        stdout(&out)
    );
}

/// `nodecycle run rotator` routes an SQS event as the Lambda's event source delivers it: each
/// record a fan-out work item served by the worker, a record that is no work item reported
/// alone for retry (`batchItemFailures`), not the rotator's own input.
#[tokio::test]
async fn run_rotator_serves_sqs_work_items_as_the_lambda_does() {
    let cloud = FakeCloud::start();
    Adapters::new(&cloud).await.table("cli-state").await;
    let item = serde_json::json!({
        "v": 1, "account": "123456789012", "region": "us-east-2", "cluster": "prod",
        "dispatchedAt": chrono::Utc::now().to_rfc3339(), "reason": "pools prod/general"
    });
    let record = |id: &str, body: String| {
        serde_json::json!({
            "messageId": id, "receiptHandle": "r", "body": body,
            "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
            "md5OfBody": "", "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-2:123456789012:nodecycle-work",
            "awsRegion": "us-east-2"
        })
    };
    let event = temp_file(
        "sqs-work-items.json",
        &serde_json::json!({"Records": [
            record("m-1", item.to_string()),
            record("m-2", "{\"not\": \"a work item\"}".into()),
        ]})
        .to_string(),
    );
    let env = [("NODECYCLE_TABLE", "cli-state")];
    let out = run(&["run", "rotator", "--event", &event], Some(&cloud), &env);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        v["batchItemFailures"],
        serde_json::json!([{"itemIdentifier": "m-2"}]),
        "{v}"
    );
    assert_eq!(v["items"][0]["messageId"], "m-1", "{v}");
    assert_eq!(v["items"][0]["done"], true, "{v}");
    assert_eq!(v["items"][1]["done"], false, "{v}");
    assert!(
        v["items"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("not a work item"),
        "{v}"
    );
}
