//! Managed node groups end to end: the real ami-watcher and rotator handlers over the real SDK,
//! against moto with `tests/fakecloud/eks_updates.py` (UpdateNodegroupVersion, DescribeUpdate,
//! UpdateNodegroupConfig, and a real Auto Scaling group behind each node group) and
//! `eks_rollout.py` (the rolling update: surge, drain, replace, scale down, driven by the fake's
//! own time, never by DescribeUpdate), and the Kubernetes stand-in (nodes follow the group). The
//! rotator's clock is injected; tests wait for conditions, with a bound that only guards hangs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::handlers::Invocation;
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::handlers::ops::{OpsHandler, Origin};
use nodecycle::handlers::rotator::RotatorHandler;
use nodecycle::managed::{ManagedUpdate, Phase, UpdateTarget};
use nodecycle::state::Store;
use nodecycle::state::keys::UPDATE_SK;
use nodecycle_tests::{FakeCloud, ImageFixture, KubeStandIn};
use serde_json::{Value, json};
use support::*;

pub(crate) const BASE: &str =
    "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard";
pub(crate) const OLD_RELEASE: &str = "1.30.4-20241001";
pub(crate) const NEW_RELEASE: &str = "1.30.6-20241101";

struct Mng {
    cloud: FakeCloud,
    kube: KubeStandIn,
    adapters: Adapters,
    table: Arc<Table>,
    watcher: AmiWatcher,
    rotator: RotatorHandler,
    asg: String,
    old: String,
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// Publishes an AL2023 release the way EKS does: the image, the release's own parameter and
/// `recommended` (JSON carrying image_id, image_name and release_version together), each with its
/// `image_id` child; tells the
/// fake EKS which AMI the release launches.
pub(crate) fn publish_release(
    cloud: &FakeCloud,
    release: &str,
    date: &str,
    created: &str,
) -> String {
    let name = format!("amazon-eks-node-al2023-x86_64-standard-1.30-v{date}");
    let id = cloud.register_image(
        ImageFixture::new(&name)
            .architecture("x86_64")
            .owner("amazon")
            .created(created),
    );
    let doc = json!({"schema_version": "3.0.0", "image_id": id, "image_name": name, "release_version": release})
        .to_string();
    cloud.put_parameter(&format!("{BASE}/{name}/image_id"), &id);
    cloud.put_parameter(&format!("{BASE}/{name}"), &doc);
    cloud.put_parameter(&format!("{BASE}/recommended/image_id"), &id);
    cloud.put_parameter(&format!("{BASE}/recommended"), &doc);
    cloud.control(
        "map_release",
        json!({"releaseVersion": release, "image": id}),
    );
    id
}

const BUDGET_2_NIGHTLY_0: &str =
    "    - nodes: \"2\"\n    - nodes: \"0\"\n      schedule: \"0 0 * * *\"\n      duration: 1h\n";

/// A 1.30 cluster with managed node group `general` of `size` nodes on the old AL2023 release
/// and a pool policy with `terms` and `budgets`.
async fn mng(size: u32, budgets: &str, terms: &str) -> Mng {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let kube = cloud.create_kube("prod");
    let a = Adapters::new(&cloud).await;
    let old = publish_release(&cloud, OLD_RELEASE, "20241001", "2024-10-01T00:00:00Z");
    let mut args =
        json!({"cluster": "prod", "nodegroup": "general", "size": size, "max": size + 4});
    args["image"] = json!(old);
    args["releaseVersion"] = json!(OLD_RELEASE);
    let created = cloud.control("create_nodegroup", args);
    let asg = created["asg"].as_str().unwrap().to_string();
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!(
            "cluster: prod\nname: general\nnodeGroup: {{ managedNodeGroup: general }}\narchitecture: x86_64\namiSelectorTerms:\n{terms}disruption:\n  budgets:\n{budgets}terminationGracePeriod: 1m\n"
        ),
    );
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies, table.clone()).await;
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == size as usize).then_some(())
    });
    Mng {
        cloud,
        kube,
        adapters: a,
        table,
        watcher,
        rotator,
        asg,
        old,
    }
}

impl Mng {
    async fn pass(&self, now: DateTime<Utc>) -> Value {
        self.rotator
            .handle(
                &json!({}),
                Invocation::at(now, Instant::now() + Duration::from_secs(120)),
            )
            .await
            .unwrap()
    }

    fn calls(&self) -> Value {
        self.cloud.control(
            "nodegroup_calls",
            json!({"cluster": "prod", "nodegroup": "general"}),
        )
    }

    /// Successful calls of `op`, in order, with their request bodies.
    fn bodies(&self, op: &str) -> Vec<Value> {
        self.calls()["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["op"] == op && c["status"] == 200)
            .map(|c| c["body"].clone())
            .collect()
    }

    async fn update(&self) -> Option<ManagedUpdate> {
        self.table
            .get("POOL#prod/general", UPDATE_SK)
            .await
            .unwrap()
            .map(|v| serde_json::from_value(v.value).unwrap())
    }

    async fn images(&self) -> Vec<String> {
        self.adapters.group_images(&self.asg).await
    }

    /// Rotator passes (the injected clock moving a minute each) until the recorded node group
    /// update has ended, while the fake EKS rolls it out in its own time; answers the clock.
    /// `check` sees every pass's report. Panics after `HANG_GUARD` (not a timing assertion).
    async fn pass_until_update_ends(
        &self,
        mut now: DateTime<Utc>,
        check: impl Fn(&Value),
    ) -> DateTime<Utc> {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let report = self.pass(now).await;
            check(&report);
            if self.update().await.is_some_and(|u| u.phase.is_finished()) {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "the node group update did not end within {HANG_GUARD:?}: {:?}\n{}",
                self.update().await,
                self.calls()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            now += chrono::Duration::minutes(1);
        }
    }

    async fn halted(&self) -> Option<String> {
        nodecycle::state::Repository::new(self.table.clone())
            .pool("prod/general")
            .await
            .unwrap()
            .and_then(|r| r.halted)
            .map(|h| h.message)
    }
}

const ALIAS: &str = "  - alias: al2023@latest\n";

/// The operator API over the group's rotator.
fn ops_handler(p: &Mng) -> OpsHandler {
    p.adapters.ops(p.rotator.clone())
}

/// An operator invocation by alice with `request_id`.
fn invocation(request_id: &str) -> Origin {
    Origin {
        request_id: request_id.into(),
        caller: Some("arn:aws:iam::123456789012:user/alice".into()),
    }
}

/// Bound on waiting for the fake EKS to finish a rollout: a hang guard, not a timing assertion
/// (a rollout takes about a second with the fake's default timing).
const HANG_GUARD: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_new_release_rolls_through_the_node_group_within_budget() {
    let p = mng(5, BUDGET_2_NIGHTLY_0, ALIAS).await;
    let t0 = at("2026-12-01T00:10:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let new = publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    let report = p.watcher.handle(&json!({}), t0).await.unwrap();
    assert_eq!(report["pools"][0]["desired"], new.as_str(), "{report}");

    // Ten minutes before the window: 5 nodes at 2 = 3 waves of 10m would run into it, and EKS
    // cannot pause an update: wait for the window after it.
    let report = p.pass(at("2026-11-30T23:50:00Z")).await;
    let blocked = report["pools"][0]["blocked"].as_str().unwrap_or_default();
    assert!(
        blocked.contains("EKS cannot pause")
            && blocked.contains("waiting for the window opening at 2026-12-01T01:00:00Z"),
        "{report}"
    );
    assert!(p.update().await.is_none());

    // Inside the nightly "0" window: no update starts, and the plan says until when.
    let report = p.pass(t0).await;
    let blocked = report["pools"][0]["blocked"].as_str().unwrap_or_default();
    assert!(blocked.contains("until 2026-12-01T01:00:00Z"), "{report}");
    assert!(p.bodies("UpdateNodegroupVersion").is_empty());
    assert!(p.update().await.is_none());

    // After the window: one update, maxUnavailable = the Drifted allowance (2), then followed
    // until EKS reports it ended.
    let now = p
        .pass_until_update_ends(at("2026-12-01T01:05:00Z"), |report| {
            assert!(
                report["pools"][0]["errors"]
                    .as_array()
                    .is_none_or(|e| e.is_empty()),
                "{report}"
            );
        })
        .await;
    let update = p.update().await.unwrap();
    assert_eq!(update.phase, Phase::Successful, "{update:?}");
    assert_eq!(update.max_unavailable, 2);
    assert_eq!(
        update.target,
        Some(UpdateTarget::ReleaseVersion {
            version: NEW_RELEASE.into()
        })
    );
    let images = p.images().await;
    assert_eq!(images.len(), 5, "{images:?}");
    assert!(images.iter().all(|i| *i == new), "{images:?}");

    // The calls, in order: the config (maxUnavailable 2) before the one version update ...
    let calls = p.calls();
    let ops: Vec<&str> = calls["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["op"] != "DescribeUpdate")
        .map(|c| c["op"].as_str().unwrap())
        .collect();
    // ... and, once it ended, the group's own updateConfig (maxUnavailable 1) put back.
    assert_eq!(
        ops,
        [
            "UpdateNodegroupConfig",
            "UpdateNodegroupVersion",
            "UpdateNodegroupConfig"
        ],
        "{calls}"
    );
    let configs = p.bodies("UpdateNodegroupConfig");
    assert_eq!(configs[0]["updateConfig"]["maxUnavailable"], 2);
    assert_eq!(configs[1]["updateConfig"]["maxUnavailable"], 1);
    let group = p
        .adapters
        .clients
        .eks
        .describe_nodegroup()
        .cluster_name("prod")
        .nodegroup_name("general")
        .send()
        .await
        .unwrap();
    let config = group.nodegroup().unwrap().update_config().unwrap();
    assert_eq!(config.max_unavailable(), Some(1));
    assert!(p.update().await.unwrap().config_restored);
    let version = &p.bodies("UpdateNodegroupVersion")[0];
    assert_eq!(version["releaseVersion"], NEW_RELEASE);
    assert_ne!(version["force"], true, "PDBs must be respected: {version}");
    let waves = calls["waves"].as_array().unwrap();
    assert!(waves.len() >= 3, "5 nodes, 2 at a time: {calls}");
    assert!(
        waves
            .iter()
            .all(|w| w["terminated"].as_array().unwrap().len() <= 2),
        "{calls}"
    );

    // Converged: later passes change nothing.
    let before = p.calls()["calls"].as_array().unwrap().len();
    p.pass(now + chrono::Duration::minutes(1)).await;
    p.pass(now + chrono::Duration::minutes(2)).await;
    assert_eq!(p.calls()["calls"].as_array().unwrap().len(), before);
    assert_eq!(p.kube.state().nodes.len(), 5);
    let _ = &p.old;
}

#[tokio::test]
async fn a_failed_update_halts_the_pool() {
    let p = mng(3, "    - nodes: \"1\"\n", ALIAS).await;
    // Fake EKS time stopped: the update is still running when the failure is armed.
    p.cloud.pause_eks();
    let t0 = at("2026-12-01T10:00:00Z");
    publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    p.pass(t0).await;
    let started = p.update().await.unwrap();
    assert_eq!(started.phase, Phase::InProgress);
    assert_eq!(started.max_unavailable, 1);
    p.cloud.control(
        "fail_update",
        json!({"cluster": "prod", "nodegroup": "general"}),
    );
    // The failure lands at the rollout's next step.
    p.cloud.advance_eks_time(0.1);
    p.pass(t0 + chrono::Duration::minutes(1)).await;
    let failed = p.update().await.unwrap();
    assert_eq!(failed.phase, Phase::Failed);
    let halted = p.halted().await.expect("pool halted");
    assert!(
        halted.contains("PodEvictionFailure")
            && halted.contains(failed.update_id.as_deref().unwrap()),
        "{halted}"
    );
    // Halted: no further update, whatever the budget says.
    for i in 2..5 {
        let report = p.pass(t0 + chrono::Duration::minutes(i)).await;
        assert!(
            report["pools"][0]["blocked"]
                .as_str()
                .unwrap_or_default()
                .contains("halted"),
            "{report}"
        );
    }
    assert_eq!(p.bodies("UpdateNodegroupVersion").len(), 1);
}

#[tokio::test]
async fn a_custom_launch_template_group_moves_to_a_new_template_version() {
    let cloud_images = |cloud: &FakeCloud, name: &str, created: &str| {
        cloud.register_image(ImageFixture::new(name).owner("self").created(created))
    };
    let p = mng_custom().await;
    let t0 = at("2026-12-01T10:00:00Z");
    let new = cloud_images(&p.cloud, "golden-2", "2024-06-01T00:00:00Z");
    let report = p.watcher.handle(&json!({}), t0).await.unwrap();
    assert_eq!(report["pools"][0]["desired"], new.as_str(), "{report}");
    p.pass_until_update_ends(t0, |_| {}).await;
    let update = p.update().await.unwrap();
    assert_eq!(update.phase, Phase::Successful, "{update:?}");
    let Some(UpdateTarget::LaunchTemplate { id, version }) = update.target else {
        panic!("expected a launch template target: {update:?}");
    };
    assert_eq!(version, "2");
    // Version 2 of the customer's template launches the new AMI; version 1 is untouched.
    let out = p
        .adapters
        .clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(&id)
        .versions("1")
        .versions("2")
        .send()
        .await
        .unwrap();
    let images: Vec<(i64, String)> = out
        .launch_template_versions()
        .iter()
        .map(|v| {
            (
                v.version_number().unwrap(),
                v.launch_template_data()
                    .and_then(|d| d.image_id())
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert!(images.contains(&(1, p.old.clone())), "{images:?}");
    assert!(images.contains(&(2, new.clone())), "{images:?}");
    let body = &p.bodies("UpdateNodegroupVersion")[0];
    assert_eq!(body["launchTemplate"]["version"], "2", "{body}");
    assert!(
        body.get("releaseVersion").is_none_or(Value::is_null),
        "{body}"
    );
    let images = p.images().await;
    assert!(images.iter().all(|i| *i == new), "{images:?}");
}

/// A group on customer template `custom-general` (golden-1), terms `name: golden-*`.
async fn mng_custom() -> Mng {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let kube = cloud.create_kube("prod");
    let a = Adapters::new(&cloud).await;
    let old = cloud.register_image(
        ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let lt = aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
        .image_id(&old)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .build();
    a.clients
        .ec2
        .create_launch_template()
        .launch_template_name("custom-general")
        .launch_template_data(lt)
        .tag_specifications(support::opted_in_template_tags(Some("prod")))
        .send()
        .await
        .unwrap();
    let created = cloud.control(
        "create_nodegroup",
        json!({"cluster": "prod", "nodegroup": "general", "size": 3, "max": 6,
               "launchTemplate": {"name": "custom-general", "version": "1"}}),
    );
    let asg = created["asg"].as_str().unwrap().to_string();
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        "cluster: prod\nname: general\nnodeGroup: { managedNodeGroup: general }\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"1\"\n",
    );
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies, table.clone()).await;
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == 3).then_some(())
    });
    Mng {
        cloud,
        kube,
        adapters: a,
        table,
        watcher,
        rotator,
        asg,
        old,
    }
}

#[tokio::test]
async fn an_ami_that_is_not_an_eks_release_fails_closed_on_an_ami_type_group() {
    // Terms select a private image: an AMI-type group cannot run it (no release version).
    let p = mng(
        2,
        "    - nodes: \"1\"\n",
        "  - name: golden-*\n    owner: self\n",
    )
    .await;
    let golden = p.cloud.register_image(
        ImageFixture::new("golden-9")
            .owner("self")
            .created("2024-06-01T00:00:00Z"),
    );
    let t0 = at("2026-12-01T10:00:00Z");
    let report = p.watcher.handle(&json!({}), t0).await.unwrap();
    assert_eq!(report["pools"][0]["desired"], golden.as_str(), "{report}");
    p.pass(t0).await;
    let update = p.update().await.unwrap();
    assert_eq!(update.phase, Phase::Failed);
    let halted = p.halted().await.expect("halted");
    assert!(
        halted.contains("not from an EKS-published parameter")
            && halted.contains("launch template"),
        "{halted}"
    );
    assert!(p.bodies("UpdateNodegroupVersion").is_empty());
    assert!(p.images().await.iter().all(|i| *i == p.old));
}

#[tokio::test]
async fn a_start_repeated_after_a_crash_reuses_the_same_update() {
    let p = mng(3, "    - nodes: \"1\"\n", ALIAS).await;
    // Fake EKS time stopped: the update is still running when the passes look at it.
    p.cloud.pause_eks();
    let t0 = at("2026-12-01T10:00:00Z");
    let new = publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    // A rotator recorded its intent and called UpdateNodegroupVersion, then died before
    // recording the update id.
    let mut intent = ManagedUpdate::starting("prod/general", &new, 1, t0);
    intent.target = Some(UpdateTarget::ReleaseVersion {
        version: NEW_RELEASE.into(),
    });
    p.table
        .put(
            "POOL#prod/general",
            UPDATE_SK,
            &serde_json::to_value(&intent).unwrap(),
            None,
            None,
        )
        .await
        .unwrap();
    let first = p
        .adapters
        .clients
        .eks
        .update_nodegroup_version()
        .cluster_name("prod")
        .nodegroup_name("general")
        .release_version(NEW_RELEASE)
        .client_request_token(&intent.token)
        .send()
        .await
        .unwrap();
    let first_id = first.update().unwrap().id().unwrap().to_string();
    // Two rotators now run at once; the pass picks the update up with the same token.
    let (a, b) = tokio::join!(
        p.pass(t0 + chrono::Duration::minutes(1)),
        p.pass(t0 + chrono::Duration::minutes(1))
    );
    let update = p.update().await.unwrap();
    assert_eq!(
        update.update_id.as_deref(),
        Some(first_id.as_str()),
        "{a}\n{b}"
    );
    assert_eq!(update.phase, Phase::InProgress);
    let calls = p.calls();
    assert_eq!(
        calls["updates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| u["type"] == "VersionUpdate")
            .count(),
        1,
        "{calls}"
    );
}

#[tokio::test]
async fn status_plan_and_operator_rotation_on_a_managed_node_group() {
    let p = mng(3, "    - nodes: \"1\"\n", ALIAS).await;
    // Surges on the group behind the node group must get nodes too.
    p.kube.sync_nodes(nodecycle_tests::SyncNodes {
        asg: Some(p.asg.clone()),
        ..Default::default()
    });
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let ops = ops_handler(&p);
    let inv = invocation("req-1");
    let status = ops
        .handle(
            &json!({"action": "status", "pool": "prod/general"}),
            &inv,
            t0,
        )
        .await
        .unwrap();
    let pool = &status["pools"][0];
    assert_eq!(pool["nodes"]["instances"], 3, "{status}");
    assert_eq!(pool["nodes"]["drifted"], 0, "{status}");
    assert_eq!(pool["nodes"]["group"]["name"], p.asg.as_str(), "{status}");
    assert!(pool["nodeGroupUpdate"].is_null(), "{status}");

    // A new release: the preview (nodecycle plan) says it would start, and records nothing.
    publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let policy = support::policy(
        "cluster: prod\nname: general\nnodeGroup: { managedNodeGroup: general }\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\ndisruption:\n  budgets:\n    - nodes: \"1\"\n",
    );
    let kube = p.rotator.ports.kube.connect("prod").await.unwrap();
    let (_, preview) = p
        .rotator
        .planner()
        .preview(&policy, kube.as_ref(), t0)
        .await
        .unwrap();
    let v = serde_json::to_value(&preview).unwrap();
    assert_eq!(v["update"], "start", "{v}");
    assert_eq!(v["maxUnavailable"], 1, "{v}");
    assert_eq!(v["drifted"], 3, "{v}");
    // What `nodecycle plan` prints: the update start is the pass's first action.
    assert_eq!(v["actions"][0]["action"], "startNodeGroupUpdate", "{v}");
    assert_eq!(v["actions"][0]["maxUnavailable"], 1, "{v}");
    assert!(p.update().await.is_none());
    assert!(p.bodies("UpdateNodegroupVersion").is_empty());

    // Hold the release with a pin to the old AMI, then an operator replaces one node by hand
    // (node by node, through the node group's Auto Scaling group).
    let inv2 = invocation("req-2");
    ops.handle(
        &json!({"action": "pin", "pool": "prod/general", "ami": p.old, "reason": "hold the release"}),
        &inv2,
        t0,
    )
    .await
    .unwrap();
    let before = p.images().await;
    assert_eq!(before.len(), 3);
    let ids: Vec<String> = p
        .adapters
        .group_instances(&p.asg)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let inv3 = invocation("req-3");
    let r = ops
        .handle(
            &json!({"action": "rotate", "pool": "prod/general", "instances": [ids[0]], "reason": "bad disk", "ignoreBudgets": true, "maxConcurrent": 1}),
            &inv3,
            t0,
        )
        .await
        .unwrap();
    assert_eq!(r["queued"].as_array().unwrap().len(), 1, "{r}");
    let mut now = t0;
    let mut done = false;
    for _ in 0..30 {
        now += chrono::Duration::minutes(1);
        p.pass(now).await;
        std::thread::sleep(Duration::from_millis(300));
        let rotations = p.table.query("POOL#prod/general", "ROT#").await.unwrap();
        if rotations.iter().all(|(_, v)| v.value["step"] == "Done") {
            done = true;
            break;
        }
    }
    assert!(done, "the operator rotation finished");
    let after: Vec<String> = p
        .adapters
        .group_instances(&p.asg)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(after.len(), 3, "group back at its size: {after:?}");
    assert!(!after.contains(&ids[0]), "{after:?}");
    // Pinned: the release did not start meanwhile, and the replacement runs the pinned AMI.
    assert!(p.bodies("UpdateNodegroupVersion").is_empty());
    assert!(p.images().await.iter().all(|i| *i == p.old));
}

/// Successful DescribeUpdate calls so far.
fn described(calls: &Value) -> usize {
    calls["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["op"] == "DescribeUpdate" && c["status"] == 200)
        .count()
}

fn timeline(calls: &Value) -> Vec<String> {
    calls["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn status_and_plan_read_a_running_update_without_moving_it_while_fake_time_does() {
    let p = mng(5, "    - nodes: \"2\"\n", ALIAS).await;
    p.cloud.pause_eks();
    let t0 = at("2026-12-01T10:00:00Z");
    let new = publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    p.pass(t0).await;
    assert_eq!(p.update().await.unwrap().phase, Phase::InProgress);
    let instances = p.adapters.group_instances(&p.asg).await;
    let before = described(&p.calls());

    // Read-only views while fake EKS time stands still: `status` and the plan preview (what
    // `nodecycle plan` shows) follow the update with DescribeUpdate, and it stays where it is.
    let ops = ops_handler(&p);
    let inv = invocation("req-status");
    let policy = support::policy(&format!(
        "cluster: prod\nname: general\nnodeGroup: {{ managedNodeGroup: general }}\narchitecture: x86_64\namiSelectorTerms:\n{ALIAS}disruption:\n  budgets:\n    - nodes: \"2\"\n"
    ));
    let kube = p.rotator.ports.kube.connect("prod").await.unwrap();
    for i in 0..5 {
        let now = t0 + chrono::Duration::minutes(i);
        let status = ops
            .handle(
                &json!({"action": "status", "pool": "prod/general"}),
                &inv,
                now,
            )
            .await
            .unwrap();
        assert_eq!(
            status["pools"][0]["nodeGroupUpdate"]["phase"], "InProgress",
            "{status}"
        );
        let (_, preview) = p
            .rotator
            .planner()
            .preview(&policy, kube.as_ref(), now)
            .await
            .unwrap();
        let v = serde_json::to_value(&preview).unwrap();
        assert_eq!(v["nodeGroupUpdate"]["phase"], "InProgress", "{v}");
    }
    let calls = p.calls();
    assert!(
        described(&calls) >= before + 10,
        "status and plan asked EKS: {calls}"
    );
    assert!(timeline(&calls).is_empty(), "{calls}");
    assert!(calls["waves"].as_array().unwrap().is_empty(), "{calls}");
    assert_eq!(p.adapters.group_instances(&p.asg).await, instances);

    // Fake time moves it without any call: the surge comes first.
    p.cloud.advance_eks_time(0.05);
    let calls = p.calls();
    assert_eq!(timeline(&calls)[..2], ["setup", "scaleUp"], "{calls}");
    assert!(calls["waves"].as_array().unwrap().is_empty(), "{calls}");
    assert_eq!(p.adapters.group_instances(&p.asg).await.len(), 7);

    // Time running again, the rotator sees it through.
    p.cloud.resume_eks();
    p.pass_until_update_ends(t0 + chrono::Duration::minutes(10), |_| {})
        .await;
    assert_eq!(p.update().await.unwrap().phase, Phase::Successful);
    let images = p.images().await;
    assert_eq!(images.len(), 5, "{images:?}");
    assert!(images.iter().all(|i| *i == new), "{images:?}");
}

#[tokio::test]
async fn an_update_eks_no_longer_knows_halts_instead_of_waiting_forever() {
    let p = mng(2, "    - nodes: \"1\"\n", ALIAS).await;
    let t0 = at("2026-12-01T10:00:00Z");
    let new = publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let mut lost = ManagedUpdate::starting("prod/general", &new, 1, t0);
    lost.update_id = Some("00000000-0000-0000-0000-000000000000".into());
    lost.phase = Phase::InProgress;
    p.table
        .put(
            "POOL#prod/general",
            UPDATE_SK,
            &serde_json::to_value(&lost).unwrap(),
            None,
            None,
        )
        .await
        .unwrap();
    p.pass(t0).await;
    assert_eq!(p.update().await.unwrap().phase, Phase::Cancelled);
    let halted = p.halted().await.expect("halted");
    assert!(halted.contains("no longer reports"), "{halted}");
    assert!(p.bodies("UpdateNodegroupVersion").is_empty());
}

#[tokio::test]
async fn an_update_started_outside_nodecycle_blocks_every_start() {
    let p = mng(3, "    - nodes: \"1\"\n", ALIAS).await;
    // Fake EKS time stopped: the console's update is still running when the pass looks.
    p.cloud.pause_eks();
    let t0 = at("2026-12-01T10:00:00Z");
    publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    // Someone clicks "Update now" in the console.
    p.adapters
        .clients
        .eks
        .update_nodegroup_version()
        .cluster_name("prod")
        .nodegroup_name("general")
        .release_version(NEW_RELEASE)
        .send()
        .await
        .unwrap();
    let report = p.pass(t0).await;
    let blocked = report["pools"][0]["blocked"].as_str().unwrap_or_default();
    assert!(blocked.contains("UPDATING, not ACTIVE"), "{report}");
    assert!(
        p.update().await.is_none(),
        "nodecycle recorded no update of its own"
    );
    assert_eq!(p.bodies("UpdateNodegroupVersion").len(), 1);
    assert!(p.bodies("UpdateNodegroupConfig").is_empty());
}

#[tokio::test]
async fn a_start_that_never_reached_eks_is_replaced_when_a_newer_ami_arrives() {
    let p = mng(2, "    - nodes: \"1\"\n", ALIAS).await;
    // Fake EKS time stopped: the new update is still running when the pass records it.
    p.cloud.pause_eks();
    let t0 = at("2026-12-01T10:00:00Z");
    // A start recorded for an intermediate AMI that EKS never got (no update id).
    let stale = ManagedUpdate::starting("prod/general", "ami-0123456789abcdef0", 1, t0);
    p.table
        .put(
            "POOL#prod/general",
            UPDATE_SK,
            &serde_json::to_value(&stale).unwrap(),
            None,
            None,
        )
        .await
        .unwrap();
    let new = publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    p.pass(t0 + chrono::Duration::minutes(1)).await;
    let update = p.update().await.unwrap();
    assert_eq!(update.image, new, "{update:?}");
    assert_eq!(update.phase, Phase::InProgress);
    let bodies = p.bodies("UpdateNodegroupVersion");
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["releaseVersion"], NEW_RELEASE);
    assert_ne!(bodies[0]["clientRequestToken"], stale.token.as_str());
}

/// A release quarantined after it reached a managed node group: the rotator rolls the group
/// back with a node group update to the previous release, and the watcher keeps it there
/// although `@latest` still points at the quarantined release.
#[tokio::test]
async fn a_quarantined_release_is_rolled_back_by_a_node_group_update() {
    use nodecycle::promotion::{Cause, Quarantine, Release, Target};
    let p = mng(3, "    - nodes: \"1\"\n", ALIAS).await;
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let new = publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let now = p.pass_until_update_ends(t0, |_| {}).await;
    assert!(p.images().await.iter().all(|i| *i == new));

    let q = Quarantine {
        target: Target::Release(Release("v20241101".into())),
        reason: "CVE in the kernel of this release".into(),
        by: "alice".into(),
        at: now,
        cause: Cause::Operator {
            request_id: "r-1".into(),
        },
        outbox: Vec::new(),
    };
    // As the rotator records it: its event staged in the outbox.
    let q = nodecycle::promotion::Quarantine {
        outbox: vec![nodecycle::announce::stage::quarantined(&q)],
        ..q
    };
    nodecycle::state::Repository::new(p.table.clone())
        .put_quarantine(&q)
        .await
        .unwrap();
    let now = now + chrono::Duration::minutes(1);
    p.watcher.handle(&json!({}), now).await.unwrap();
    let report = p.pass(now).await;
    let rec = nodecycle::state::Repository::new(p.table.clone())
        .pool("prod/general")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.desired.unwrap().id, p.old, "{report}");
    let now = p
        .pass_until_update_ends(now + chrono::Duration::minutes(1), |_| {})
        .await;
    let update = p.update().await.unwrap();
    assert_eq!(update.phase, Phase::Successful, "{update:?}");
    assert_eq!(
        update.target,
        Some(UpdateTarget::ReleaseVersion {
            version: OLD_RELEASE.into()
        })
    );
    let versions = p.bodies("UpdateNodegroupVersion");
    assert_eq!(versions.last().unwrap()["releaseVersion"], OLD_RELEASE);
    let images = p.images().await;
    assert!(
        images.len() == 3 && images.iter().all(|i| *i == p.old),
        "{images:?}"
    );
    // Later passes keep it there.
    p.watcher
        .handle(&json!({}), now + chrono::Duration::minutes(5))
        .await
        .unwrap();
    p.pass(now + chrono::Duration::minutes(5)).await;
    assert_eq!(p.bodies("UpdateNodegroupVersion").len(), versions.len());
}

/// A node group update beside Cluster Autoscaler: CA scales the node group's Auto Scaling
/// group up while the update runs; EKS then skips its scale-down (the fake does as EKS does),
/// and nodecycle never sets the node group's scalingConfig nor the group's capacity, so CA's
/// size stays.
#[tokio::test]
async fn a_managed_update_beside_cluster_autoscaler_keeps_its_scale_up() {
    let p = mng(3, "    - nodes: \"1\"\n", ALIAS).await;
    p.cloud.pause_eks();
    let t0 = at("2026-12-01T10:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    let new = publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    p.pass(t0).await;
    assert_eq!(p.update().await.unwrap().phase, Phase::InProgress);
    // EKS's setup and surge (+2), then CA adds 2 for pending pods.
    p.cloud.advance_eks_time(0.01);
    let ca = nodecycle_tests::ClusterAutoscaler::attach(&p.cloud, "prod", &p.asg, 4);
    let up = ca.scale_up(Some(2));
    assert_eq!(up.action, "scaleUp", "{up:?}");
    let ca_size = up.to.unwrap();
    p.cloud.resume_eks();
    let now = p
        .pass_until_update_ends(t0 + chrono::Duration::minutes(1), |_| {})
        .await;
    assert_eq!(
        p.update().await.unwrap().phase,
        Phase::Successful,
        "{:?} {}",
        p.update().await,
        p.calls()
    );
    for i in 1..4 {
        p.pass(now + chrono::Duration::minutes(i)).await;
    }
    let images = p.images().await;
    assert!(images.iter().all(|i| *i == new), "{images:?}");
    assert_eq!(images.len() as i32, ca_size, "CA's size kept: {images:?}");
    // nodecycle's EKS calls never carry a scalingConfig; nobody but CA and EKS's own rollout
    // changed the group's capacity, and nothing went below CA's size after its scale-up.
    for body in p.bodies("UpdateNodegroupConfig") {
        assert!(body.get("scalingConfig").is_none(), "{body}");
    }
    let records = ca.records();
    assert!(
        records
            .capacity
            .iter()
            .all(|c| c.by == "cluster-autoscaler" || c.by == "eks"),
        "{:?}",
        records.capacity
    );
    let after: Vec<_> = records
        .capacity
        .iter()
        .skip_while(|c| c.by != "cluster-autoscaler")
        .collect();
    assert!(after.iter().all(|c| c.to >= ca_size), "{after:?}");
    let timeline = timeline(&p.calls());
    assert!(
        timeline.contains(&"scaleDownSkipped".to_string()),
        "{timeline:?}"
    );
}

/// `rollout.strategy: terminateFirst` on a managed node group: the update runs with EKS's
/// MINIMAL strategy (old nodes go before new ones launch: no scale up, the group never grows),
/// and the group's own strategy is put back after.
#[tokio::test]
async fn terminate_first_updates_a_managed_node_group_with_the_minimal_strategy() {
    let p = mng(
        3,
        "    - nodes: \"1\"\nrollout:\n  strategy: terminateFirst\n",
        ALIAS,
    )
    .await;
    let t0 = at("2026-12-01T02:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    // Status says how the group's nodes are replaced.
    let status = ops_handler(&p)
        .handle(
            &json!({"action": "status", "pool": "prod/general"}),
            &invocation("req-1"),
            t0,
        )
        .await
        .unwrap();
    let replacement = &status["pools"][0]["replacement"];
    assert_eq!(replacement["strategy"], "terminateFirst", "{status}");
    assert!(
        replacement["message"].as_str().unwrap().contains("MINIMAL"),
        "{status}"
    );
    let new = publish_release(&p.cloud, NEW_RELEASE, "20241101", "2024-11-01T00:00:00Z");
    p.watcher.handle(&json!({}), t0).await.unwrap();
    p.pass_until_update_ends(t0, |_| {}).await;
    let update = p.update().await.unwrap();
    assert_eq!(update.phase, Phase::Successful, "{update:?}");
    let images = p.images().await;
    assert_eq!(images.len(), 3, "{images:?}");
    assert!(images.iter().all(|i| *i == new), "{images:?}");
    let configs = p.bodies("UpdateNodegroupConfig");
    assert_eq!(configs[0]["updateConfig"]["updateStrategy"], "MINIMAL");
    assert_eq!(
        configs.last().unwrap()["updateConfig"]["updateStrategy"],
        "DEFAULT",
        "the group's own strategy is put back: {configs:?}"
    );
    let calls = p.calls();
    let events = timeline(&calls);
    assert!(events.iter().any(|e| e == "scaleUpSkipped"), "{events:?}");
    assert!(!events.iter().any(|e| e == "scaleUp"), "{events:?}");
    let grew = p
        .cloud
        .scaling_records(Some(&p.asg))
        .capacity
        .iter()
        .any(|c| c.to > 3);
    assert!(!grew, "terminate first: the group never grows: {calls}");
}
