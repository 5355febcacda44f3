//! `nodecycle policy get|diff|apply` and `validate --prefix` against moto server: policies as
//! data, stored one SSM parameter per pool, written only when they change.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;

use nodecycle_tests::FakeCloud;
use serde_json::{Value, json};

use crate::cli::{repo, run, stdout, temp_file};

const PREFIX: &str = "/nodecycle/pools/";

fn json_out(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// The PutParameter calls the cloud recorded since the last count (and forgets them).
fn puts(cloud: &FakeCloud) -> usize {
    let calls = cloud.control("aws_calls", json!({"reset": true}))["calls"]
        .as_array()
        .unwrap()
        .clone();
    calls
        .iter()
        .filter(|c| c["operation"] == "PutParameter")
        .count()
}

fn changes(out: &Value) -> Vec<(String, String)> {
    out["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pool"].as_str().unwrap().to_string(),
                p["change"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn apply_writes_only_what_changed_and_diff_shows_it() {
    let cloud = FakeCloud::start();
    let examples = repo("examples");
    // A pool stored by other means, which no file holds: listed, never deleted.
    cloud.put_parameter(
        "/nodecycle/pools/prod/legacy",
        &std::fs::read_to_string(repo("examples/test-general.yaml"))
            .unwrap()
            .replace("cluster: test", "cluster: prod")
            .replace("name: general", "name: legacy"),
    );
    puts(&cloud);

    let out = run(&["policy", "diff", "-f", &examples], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let diff = json_out(&out);
    assert!(changes(&diff).iter().all(|(_, c)| c == "create"), "{diff}");
    assert_eq!(changes(&diff).len(), 4, "{diff}");
    assert_eq!(diff["notInFiles"][0]["pool"], "prod/legacy", "{diff}");
    assert_eq!(puts(&cloud), 0, "diff never writes");

    let out = run(&["policy", "apply", "-f", &examples], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let applied = json_out(&out);
    assert_eq!(applied["written"], 4, "{applied}");
    assert_eq!(puts(&cloud), 4);
    assert_eq!(
        applied["pools"][0]["parameter"], "/nodecycle/pools/prod/apps",
        "{applied}"
    );

    // The second run writes nothing.
    let out = run(&["policy", "apply", "-f", &examples], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(json_out(&out)["written"], 0, "{}", stdout(&out));
    assert_eq!(puts(&cloud), 0, "the second apply writes nothing");

    let out = run(&["policy", "diff", "-f", &examples], Some(&cloud), &[]);
    let diff = json_out(&out);
    assert!(
        changes(&diff).iter().all(|(_, c)| c == "unchanged"),
        "{diff}"
    );
    assert_eq!(diff["notInFiles"].as_array().unwrap().len(), 1, "{diff}");

    // An edit is an update with a unified diff.
    let edited = std::fs::read_to_string(repo("examples/prod-general.yaml"))
        .unwrap()
        .replace("expireAfter: 720h", "expireAfter: 336h");
    let file = temp_file("prod-general-edited.yaml", &edited);
    let out = run(&["policy", "diff", "-f", &file], Some(&cloud), &[]);
    let diff = json_out(&out);
    assert_eq!(diff["pools"][0]["change"], "update", "{diff}");
    if edited.contains("336h") {
        let d = diff["pools"][0]["diff"].as_str().unwrap();
        assert!(d.contains("+expireAfter: 336h"), "{d}");
    }

    // get prints what is stored; the stored form validates.
    let out = run(&["policy", "get", "prod/general"], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let got = json_out(&out);
    assert_eq!(
        got[0]["parameter"], "/nodecycle/pools/prod/general",
        "{got}"
    );
    assert_eq!(
        got[0]["text"].as_str().unwrap(),
        std::fs::read_to_string(repo("examples/prod-general.yaml")).unwrap()
    );
    let out = run(&["validate", "--prefix", PREFIX], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(
        run(&["policy", "get", "prod/nothing"], Some(&cloud), &[])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn oversized_and_invalid_policies_are_refused_before_anything_is_stored() {
    let cloud = FakeCloud::start();
    let base = std::fs::read_to_string(repo("examples/prod-general.yaml")).unwrap();
    let padding = format!("# {}\n", "x".repeat(100)).repeat(160);
    let big = temp_file("big.yaml", &format!("{base}{padding}"));
    assert!(std::fs::metadata(&big).unwrap().len() > 16_000);
    puts(&cloud);

    for tier in ["Standard", "Advanced"] {
        let out = run(
            &["policy", "apply", "-f", &big, "--tier", tier],
            Some(&cloud),
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
        let text = stdout(&out);
        assert!(
            text.contains("SSM Standard parameters hold 4,096 bytes, Advanced 8,192"),
            "{text}"
        );
    }
    // Between the tiers: --tier Advanced is the way out.
    let medium = temp_file(
        "medium.yaml",
        &format!("{base}{}", format!("# {}\n", "x".repeat(100)).repeat(40)),
    );
    let out = run(&["policy", "apply", "-f", &medium], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out).contains("use --tier Advanced"),
        "{}",
        stdout(&out)
    );
    let out = run(&["validate", &medium], None, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("(document): warning: the document is"),
        "{}",
        stdout(&out)
    );
    assert_eq!(run(&["validate", &big], None, &[]).status.code(), Some(2));

    // One invalid file among valid ones: nothing is written.
    let bad = temp_file(
        "bad-pool.yaml",
        "cluster: prod\nname: broken\npaused: yes\n",
    );
    let good = repo("examples/prod-apps.yaml");
    let out = run(
        &["policy", "apply", "-f", &good, "-f", &bad],
        Some(&cloud),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("{bad}: ")),
        "{}",
        stdout(&out)
    );
    assert_eq!(puts(&cloud), 0, "nothing is stored");
    let out = run(&["policy", "get"], Some(&cloud), &[]);
    assert_eq!(json_out(&out), json!([]), "{}", stdout(&out));

    // A cycle through the stored policies and the files: refused, nothing written.
    let test_general = std::fs::read_to_string(repo("examples/test-general.yaml")).unwrap();
    cloud.put_parameter(
        "/nodecycle/pools/test/general",
        &format!("{test_general}promotion:\n  from: prod/apps\n  soak: 24h\n"),
    );
    puts(&cloud);
    let out = run(&["policy", "apply", "-f", &good], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("{good}: promotion.from")),
        "{}",
        stdout(&out)
    );
    assert_eq!(puts(&cloud), 0, "nothing is stored");
    cloud.delete_parameter("/nodecycle/pools/test/general");

    // --tier Advanced stores the medium one.
    let out = run(
        &["policy", "apply", "-f", &medium, "--tier", "Advanced"],
        Some(&cloud),
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(puts(&cloud), 1);
}

/// Without a region or credentials, the message names what to set, with no SDK debug text.
#[test]
fn missing_configuration_names_what_to_set() {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("nodecycle");
    let base = |cmd: &mut Command| {
        cmd.args(["policy", "get"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("NODECYCLE_LOG", "warn");
    };
    let mut cmd = Command::new(&bin);
    base(&mut cmd);
    let out = cmd.output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("AWS_REGION") && text.contains("AWS_PROFILE"),
        "{text}"
    );

    let mut cmd = Command::new(&bin);
    base(&mut cmd);
    cmd.env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9");
    let out = cmd.output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("AWS_PROFILE"), "{text}");
    for debug in ["Some(", "DispatchFailure("] {
        assert!(!text.contains(debug), "{text}");
    }
}

/// `validate --prefix`: the stored form (cluster and name from the path), which the file
/// validator refuses, and the problems of a stored document named by its parameter.
#[test]
fn validate_prefix_checks_the_stored_form() {
    let cloud = FakeCloud::start();
    let stored_form = "nodeGroup: { autoScalingGroup: prod-general }\namiSelectorTerms:\n  - alias: al2023@latest\n";
    cloud.put_parameter("/nodecycle/pools/prod/general", stored_form);
    let file = temp_file("stored-form.yaml", stored_form);
    assert_eq!(run(&["validate", &file], None, &[]).status.code(), Some(2));
    let out = run(&["validate", "--prefix", PREFIX], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    cloud.put_parameter(
        "/nodecycle/pools/prod/broken",
        &format!("{stored_form}paused: yes\n"),
    );
    cloud.put_parameter(
        "/nodecycle/pools/prod/other",
        &format!("cluster: prod\nname: general\n{stored_form}"),
    );
    let out = run(&["validate", "--prefix", PREFIX], Some(&cloud), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("/nodecycle/pools/prod/broken: paused: expected a boolean"),
        "{text}"
    );
    assert!(
        text.contains("/nodecycle/pools/prod/other: name: "),
        "{text}"
    );
    // Only the pools given.
    let out = run(
        &["validate", "--prefix", "/nodecycle/pools", "prod/general"],
        Some(&cloud),
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = run(
        &["validate", "--prefix", PREFIX, "prod/missing"],
        Some(&cloud),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("/nodecycle/pools/prod/missing: no policy stored"),
        "{}",
        stdout(&out)
    );
}
