//! Warnings before an AMI bites (fake cloud, real SDK, the real ami-watcher, ops handler,
//! `nodecycle plan` and doctor's checks): a pinned AMI EC2 deprecates in 20 days is reported by
//! `status` and doctor and announced once (*AMI Deprecating*); a pool pinned to
//! `al2023@v20240807` on a cluster whose next minor has no build of that release is warned about
//! by doctor and `plan`, naming the nearest published release, until that build exists.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;

use chrono::{TimeDelta, Utc};
use nodecycle::doctor::{Check, CheckKind, Status};
use nodecycle_tests::{FakeCloud, ImageFixture, SyncNodes};
use serde_json::json;

use crate::support;
use support::pool::pool;
use support::{Adapters, id_of, publish_al2023};

const QUEUE: &str = "nodecycle-ahead";

/// Doctor's `release` checks of every pool, over `adapters` and the state table `table` (the
/// stack output naming it; the rest of the deployment is not what is looked at here).
async fn release_checks(cloud: &FakeCloud, adapters: &Adapters, table: &str) -> Vec<Check> {
    let stack = nodecycle::doctor::memory::World {
        stacks: BTreeMap::from([(
            "nodecycle".to_string(),
            BTreeMap::from([("StateTableName".to_string(), table.to_string())]),
        )]),
        ..nodecycle::doctor::memory::World::default()
    };
    support::doctor_checks(cloud, adapters, &stack)
        .await
        .into_iter()
        .filter(|c| c.check == CheckKind::Release)
        .collect()
}

#[tokio::test]
async fn a_pinned_ami_deprecating_in_20_days_is_reported_and_announced_once() {
    let p = pool(3, "    - nodes: \"1\"\n", false).await;
    support::capture(&p.cloud, QUEUE).await;
    let mut now = Utc::now();
    let deprecates = now + TimeDelta::days(20) + TimeDelta::hours(1);
    let pinned = p.cloud.register_image(
        ImageFixture::new("golden-pinned")
            .owner("self")
            .created("2024-07-01T00:00:00Z")
            .deprecated(&deprecates.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
    );
    p.watcher.handle(&json!({}), now).await.unwrap();
    let ops = support::Operator::new(p.adapters.ops(p.rotator.clone()));
    ops.ok(
        json!({"action": "pin", "pool": "prod/general", "ami": pinned, "reason": "the CVE fix is only in this build"}),
        now,
    )
    .await;
    let mut reports = Vec::new();
    for _ in 0..3 {
        now += TimeDelta::minutes(15);
        reports.push(p.watcher.handle(&json!({}), now).await.unwrap());
    }
    assert_eq!(
        reports[2]["pools"][0]["daysToDeprecation"], 20,
        "the DaysToDeprecation figure: {:#}",
        reports[2]
    );

    // status
    let status = ops
        .ok(json!({"action": "status", "pool": "prod/general"}), now)
        .await;
    let pool = &status["pools"][0];
    let deprecating = pool["findings"]["deprecating"].as_array().unwrap();
    assert_eq!(deprecating.len(), 1, "{pool:#}");
    assert_eq!(deprecating[0]["ami"], pinned.as_str());
    assert!(
        deprecating[0]["uses"]
            .as_array()
            .unwrap()
            .contains(&json!("pinned")),
        "{pool:#}"
    );
    let warnings = pool["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains(&pinned)),
        "{warnings:?}"
    );

    // doctor
    let checks = release_checks(&p.cloud, &p.adapters, "nodecycle").await;
    let warned: Vec<&Check> = checks
        .iter()
        .filter(|c| c.status == Status::Warn && c.subject == "prod/general")
        .collect();
    assert_eq!(warned.len(), 1, "{checks:#?}");
    assert!(warned[0].detail.contains(&pinned), "{checks:#?}");

    // One event for the AMI at this horizon, whatever the runs since.
    let events: Vec<serde_json::Value> = support::delivered(&p.cloud, QUEUE)
        .into_iter()
        .filter(|e| e["detail-type"] == "AMI Deprecating")
        .collect();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["detail"]["ami"], pinned.as_str());
    assert_eq!(events[0]["detail"]["horizonDays"], 30);
}

#[tokio::test]
async fn a_release_without_a_build_for_the_next_minor_is_warned_with_the_nearest() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let kube = cloud.create_kube("prod");
    let published = publish_al2023(&cloud, "1.30", "v20240807", "2024-08-07T00:00:00Z");
    publish_al2023(&cloud, "1.31", "v20241109", "2024-11-09T00:00:00Z");
    let a = Adapters::new(&cloud).await;
    let image = id_of(&published, "x86_64", "standard");
    a.create_group("prod-general", &image, "m5.large", 2, 4, Some("prod"))
        .await;
    kube.sync_nodes(SyncNodes {
        asg: Some("prod-general".into()),
        ..SyncNodes::default()
    });
    let policy = "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@v20240807\ndisruption:\n  budgets:\n    - nodes: \"1\"\n";
    cloud.put_parameter("/nodecycle/pools/prod/general", policy);
    let table = a.table("ahead").await;
    let watcher = a.watcher(a.policies(), table);
    watcher.handle(&json!({}), Utc::now()).await.unwrap();

    let checks = release_checks(&cloud, &a, "ahead").await;
    let warned: Vec<&Check> = checks.iter().filter(|c| c.status == Status::Warn).collect();
    assert_eq!(warned.len(), 1, "{checks:#?}");
    assert!(
        warned[0].detail.contains("1.31") && warned[0].fix.contains("al2023@v20241109"),
        "{checks:#?}"
    );

    // plan says it too.
    let file = crate::cli::temp_file("ahead-plan.yaml", policy);
    let out = crate::cli::run(
        &["plan", &file],
        Some(&cloud),
        &[("NODECYCLE_TABLE", "ahead")],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings = plan["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{plan:#}");
    assert!(
        warnings[0].as_str().unwrap().contains("al2023@v20241109"),
        "{warnings:?}"
    );

    // Once the release is built for 1.31, nothing is left to warn about.
    let name = "amazon-eks-node-al2023-x86_64-standard-1.31-v20240807";
    support::publish(
        &cloud,
        &format!(
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/{name}/image_id"
        ),
        name,
        "x86_64",
        "2024-08-07T00:00:00Z",
    );
    watcher
        .handle(&json!({}), Utc::now() + TimeDelta::minutes(15))
        .await
        .unwrap();
    let checks = release_checks(&cloud, &a, "ahead").await;
    assert!(checks.iter().all(|c| c.status == Status::Ok), "{checks:#?}");
}
