//! Rollout status a pipeline gates on (fake cloud + Kubernetes stand-in, real SDK, the real
//! rotator and the real `nodecycle` CLI): during a 6-node rollout the published status (the
//! SSM parameter `/nodecycle/status/prod/general`) moves through `Progressing` to
//! `NodesUpToDate` with counts that match the group at every pass, each condition change is
//! announced once, the parameter is not written while nothing changes, and `nodecycle wait`
//! started before the rollout exits 0 once the last node is replaced, 1 when the release it
//! waits for is quarantined, 2 on timeout.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use nodecycle::aws::ssm::Ssm;
use nodecycle::rollout::{ConditionType, Rollout, StatusBoard};
use nodecycle_tests::{FakeCloud, ImageFixture};
use serde_json::json;

use crate::support;
use support::pool::{Pool, pool};

const QUEUE: &str = "nodecycle-rollout";
const PARAMETER: &str = "/nodecycle/status/prod/general";
/// Upper bound on waiting for the CLI to exit: a hang guard, not a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// `nodecycle wait --pool prod/general --for up-to-date ARGS` against `cloud`, started (not
/// awaited).
fn spawn_wait(cloud: &FakeCloud, args: &[&str]) -> Child {
    Command::new(crate::cli::bin())
        .args(["wait", "--pool", "prod/general", "--for", "up-to-date"])
        .args(args)
        .envs(cloud.env_vars())
        .env_remove("AWS_PROFILE")
        .env("NODECYCLE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The exit code and standard error of `child` once it exits.
fn exit_of(child: Child) -> (Option<i32>, String) {
    let (code, stderr, _) = outcome_of(child);
    (code, stderr)
}

/// The exit code, standard error and standard output (JSON) of `child` once it exits.
fn outcome_of(mut child: Child) -> (Option<i32>, String, serde_json::Value) {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < HANG_GUARD,
            "nodecycle wait did not exit"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null),
    )
}

fn board(p: &Pool) -> Ssm {
    Ssm::new(p.adapters.clients.ssm.clone())
}

async fn published(p: &Pool) -> Option<Rollout> {
    board(p).read("prod/general").await.unwrap()
}

async fn version(p: &Pool) -> i64 {
    board(p)
        .parameter(PARAMETER)
        .await
        .unwrap()
        .unwrap()
        .version
}

/// `(desired capacity, instances launching or in service, of them on `image`)` of the group, read
/// through the SDK directly: an oracle apart from the adapter the rotator counts with.
async fn group_counts(p: &Pool, image: &str) -> (u32, u32, u32) {
    let out = p
        .adapters
        .clients
        .autoscaling
        .describe_auto_scaling_groups()
        .auto_scaling_group_names("prod-general")
        .send()
        .await
        .unwrap();
    let g = &out.auto_scaling_groups()[0];
    let ids: Vec<String> = g
        .instances()
        .iter()
        .filter(|i| {
            let state = i.lifecycle_state().map(|s| s.as_str()).unwrap_or_default();
            state == "InService" || state.starts_with("Pending")
        })
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    let images = p.adapters.group_instances("prod-general").await;
    let on = images
        .iter()
        .filter(|(id, img)| ids.contains(id) && img == image)
        .count();
    (
        u32::try_from(g.desired_capacity().unwrap()).unwrap(),
        u32::try_from(ids.len()).unwrap(),
        u32::try_from(on).unwrap(),
    )
}

#[tokio::test]
async fn the_published_status_follows_a_six_node_rollout_and_wait_exits_0_at_its_end() {
    let p = pool(6, "    - nodes: \"2\"\n", false).await;
    support::capture(&p.cloud, QUEUE).await;
    let wait = spawn_wait(&p.cloud, &["--timeout", "10m", "--interval", "1s"]);
    let mut now = Utc::now();
    p.watcher.handle(&json!({}), now).await.unwrap();
    let mut seen: Vec<(bool, bool)> = Vec::new();
    let mut wait = Some(wait);
    for pass in 0..60 {
        // The group as the pass will see it.
        let (desired, nodes, up_to_date) = group_counts(&p, &p.new).await;
        p.pass(now).await;
        now += TimeDelta::minutes(1);
        let status = published(&p).await.expect("published after the first pass");
        let c = status.counts;
        assert_eq!(
            (c.desired_capacity, c.nodes, c.up_to_date),
            (desired, nodes, up_to_date),
            "pass {pass}: the counts match the group as the pass saw it: {status:#?}"
        );
        assert!(c.up_to_date_and_ready <= c.up_to_date && c.ready <= c.nodes);
        let done = status.holds(ConditionType::NodesUpToDate);
        let progressing = status.holds(ConditionType::Progressing);
        assert_ne!(done, progressing, "pass {pass}: {status:#?}");
        if seen.last() != Some(&(done, progressing)) {
            seen.push((done, progressing));
        }
        if !done {
            // Nothing up to date was ever published: the wait cannot have ended.
            let child = wait.as_mut().unwrap();
            if child.try_wait().unwrap().is_some() {
                let (code, stderr) = exit_of(wait.take().unwrap());
                panic!(
                    "pass {pass}: nodecycle wait exited ({code:?}) before the rollout ended: {stderr}"
                );
            }
        } else {
            assert_eq!(c.up_to_date_and_ready, 6, "{status:#?}");
            assert_eq!(
                status.desired.as_ref().map(|d| d.ami.as_str()),
                Some(p.new.as_str())
            );
            break;
        }
    }
    assert_eq!(
        seen,
        [(false, true), (true, false)],
        "Progressing, then NodesUpToDate"
    );
    let (code, stderr, answer) = outcome_of(wait.take().unwrap());
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("reached"), "{stderr}");
    // Standard output has the last read, as the ops request `rollout` answers it.
    assert_eq!(answer["verdict"], "reached", "{answer:#}");
    assert_eq!(answer["pools"][0]["pool"], "prod/general", "{answer:#}");
    assert_eq!(
        answer["pools"][0]["status"]["upToDateAndReady"], 6,
        "{answer:#}"
    );

    // Each condition change was announced once.
    let events = support::delivered(&p.cloud, QUEUE);
    let mut changes: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["detail-type"] == "Rollout Condition Changed")
        .map(|e| {
            (
                e["detail"]["condition"].as_str().unwrap().to_string(),
                e["detail"]["rollout"]["status"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    changes.sort();
    assert_eq!(
        changes,
        [
            ("NodesUpToDate".to_string(), "True".to_string()),
            ("Progressing".to_string(), "False".to_string()),
            ("Progressing".to_string(), "True".to_string()),
        ],
        "{events:#?}"
    );

    // 50 steady passes write nothing: the parameter keeps its version.
    let before = version(&p).await;
    for _ in 0..50 {
        support::rotator_pass(&p.rotator, now).await;
        now += TimeDelta::minutes(1);
    }
    assert_eq!(
        version(&p).await,
        before,
        "no PutParameter while nothing changed"
    );
    assert!(
        support::delivered(&p.cloud, QUEUE)
            .iter()
            .all(|e| e["detail-type"] != "Rollout Condition Changed")
    );
    // A pipeline for the release by its image id is done too; one for another times out.
    let (code, _) = exit_of(spawn_wait(
        &p.cloud,
        &["--release", &p.new, "--timeout", "30s"],
    ));
    assert_eq!(code, Some(0));
    let (code, stderr) = exit_of(spawn_wait(
        &p.cloud,
        &["--release", &p.old, "--timeout", "1s", "--interval", "1s"],
    ));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("timed out"), "{stderr}");
}

#[tokio::test]
async fn wait_exits_1_with_the_reason_when_its_release_is_quarantined() {
    let p = pool(3, "    - nodes: \"1\"\n", false).await;
    let mut now = Utc::now();
    // The pool resolves golden-2 first, then golden-3: the release to roll out, with golden-2
    // to go back to.
    p.watcher.handle(&json!({}), now).await.unwrap();
    let newest = p.cloud.register_image(
        ImageFixture::new("golden-3")
            .owner("self")
            .created("2024-09-01T00:00:00Z"),
    );
    now += TimeDelta::minutes(1);
    p.watcher.handle(&json!({}), now).await.unwrap();
    let wait = spawn_wait(
        &p.cloud,
        &["--release", &newest, "--timeout", "10m", "--interval", "1s"],
    );
    p.pass(now).await;
    now += TimeDelta::minutes(1);
    let status = published(&p).await.unwrap();
    assert!(status.holds(ConditionType::Progressing), "{status:#?}");
    let ops = support::Operator::new(p.adapters.ops(p.rotator.clone()));
    ops.ok(
        json!({"action": "quarantine", "ami": newest, "reason": "pods crash on the new kernel"}),
        now,
    )
    .await;
    let report = p.pass(now).await;
    let status = published(&p).await.unwrap();
    assert_eq!(
        status.desired.as_ref().map(|d| d.ami.as_str()),
        Some(p.new.as_str()),
        "rolled back: {status:#?}\n{report:#}"
    );
    assert_eq!(
        status.rejected.as_ref().map(|r| r.release.as_str()),
        Some(newest.as_str()),
        "{status:#?}"
    );
    let (code, stderr) = exit_of(wait);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("quarantined") && stderr.contains("pods crash on the new kernel"),
        "{stderr}"
    );
    // The ops action says the same, from the state table.
    let answer = ops
        .ok(
            json!({"action": "rollout", "pool": "prod/general", "release": newest}),
            now,
        )
        .await;
    assert_eq!(answer["verdict"], "failed", "{answer}");
}

/// Parameter Store's throughput is the account's: a pass writes at most
/// `Settings::status_writes` statuses per cluster, and the rest on the passes after it.
#[tokio::test]
async fn a_pass_writes_at_most_its_budget_of_statuses_and_the_next_pass_the_rest() {
    use nodecycle_tests::SyncNodes;
    let (cloud, kube, old, _new) = support::pool::golden_cloud();
    let a = support::Adapters::new(&cloud).await;
    for name in ["a", "b", "c"] {
        a.create_group(
            &format!("prod-{name}"),
            &old,
            "m5.large",
            1,
            3,
            Some("prod"),
        )
        .await;
        cloud.put_parameter(
            &format!("/nodecycle/pools/prod/{name}"),
            &format!(
                "cluster: prod\nname: {name}\nnodeGroup: {{ autoScalingGroup: prod-{name} }}\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"1\"\n"
            ),
        );
    }
    kube.sync_nodes(SyncNodes::default());
    kube.wait_for("nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == 3).then_some(())
    });
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let mut rotator = a.rotator(&cloud, policies, table).await;
    rotator.settings.status_writes = 2;
    let now = Utc::now();
    watcher.handle(&json!({}), now).await.unwrap();
    let ssm = Ssm::new(a.clients.ssm.clone());
    let published = || async {
        ssm.read_cluster("prod")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.pool)
            .collect::<Vec<String>>()
    };
    support::rotator_pass(&rotator, now).await;
    assert_eq!(
        published().await.len(),
        2,
        "the budget: {:?}",
        published().await
    );
    support::rotator_pass(&rotator, now + TimeDelta::minutes(1)).await;
    let mut all = published().await;
    all.sort();
    assert_eq!(all, ["prod/a", "prod/b", "prod/c"]);
}
