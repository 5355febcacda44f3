//! The stop switch end to end: `stop` and `start` through the real ops handler, real rotator
//! passes and the real interruption handler, against moto (Auto Scaling, EC2, SSM, DynamoDB)
//! and the Kubernetes stand-in. One request holds every pool; a Spot drain still goes through;
//! `start` lets exactly the pools that were not paused before go on.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::aws::instances::Ec2Instances;
use nodecycle::aws::ssm::{Ssm, SsmPolicies};
use nodecycle::handlers::Invocation;
use nodecycle::handlers::interruption::{InterruptionHandler, InterruptionPorts, Settings};
use nodecycle::handlers::rotator::{EksConnector, RotatorHandler};
use nodecycle::rotation::Rotation;
use nodecycle::state::Store;
use nodecycle_tests::{FakeCloud, KubeStandIn, SyncNodes};
use serde_json::{Value, json};
use support::*;

const POLICY: &str = "amiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n    - nodes: \"2\"\nterminationGracePeriod: 1h\n";

struct Deployment {
    cloud: FakeCloud,
    kube: KubeStandIn,
    adapters: Adapters,
    table: Arc<Table>,
    rotator: RotatorHandler,
    operator: Operator,
    interruptions: InterruptionHandler,
}

/// Two drifted pools of 3 nodes in cluster prod (`prod/a`, `prod/b`: golden-1 running,
/// golden-2 published and resolved by a watcher pass).
async fn deployment() -> Deployment {
    let (cloud, kube, old, _) = pool::golden_cloud();
    let a = Adapters::new(&cloud).await;
    for group in ["prod-a", "prod-b"] {
        a.create_group(group, &old, "m5.large", 3, 7, Some("prod"))
            .await;
        cloud.put_parameter(
            &format!("/nodecycle/pools/prod/{}", &group[5..]),
            &format!(
                "cluster: prod\nname: {}\nnodeGroup: {{ autoScalingGroup: {group} }}\narchitecture: x86_64\n{POLICY}",
                &group[5..]
            ),
        );
    }
    kube.sync_nodes(SyncNodes::default());
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies, table.clone()).await;
    let operator = Operator::new(a.ops(rotator.clone()));
    let interruptions = InterruptionHandler {
        cell: a.cell(
            Arc::new(SsmPolicies::new(
                Ssm::new(a.clients.ssm.clone()),
                "/nodecycle/pools/",
            )),
            table.clone(),
        ),
        ports: InterruptionPorts {
            instances: Arc::new(Ec2Instances::new(a.clients.ec2.clone())),
            lifecycle: Arc::new(nodecycle::aws::instances::LifecycleActions::new(
                a.clients.autoscaling.clone(),
            )),
            kube: Arc::new(EksConnector::new(cloud.sdk_config().await)),
        },
        deployment: Arc::new(nodecycle::aws::identity::OwnAccount::new(
            &cloud.sdk_config().await,
        )),
        settings: Settings {
            poll: Duration::from_millis(200),
            ..Settings::default()
        },
        metrics: Arc::new(nodecycle::metrics::NoMetrics),
    };
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == 6).then_some(())
    });
    watcher.handle(&json!({}), now()).await.unwrap();
    Deployment {
        cloud,
        kube,
        adapters: a,
        table,
        rotator,
        operator,
        interruptions,
    }
}

impl Deployment {
    async fn rotations(&self, pool: &str) -> Vec<Rotation> {
        rotations_of(&self.table, pool).await
    }

    async fn pass(&self, now: DateTime<Utc>) -> Value {
        self.rotator
            .handle(
                &json!({"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}),
                Invocation::at(now, Instant::now() + Duration::from_secs(110)),
            )
            .await
            .unwrap()
    }

    /// The launch template image of `group` (what scale-outs launch).
    async fn launches(&self, group: &str) -> String {
        let (g, _) =
            nodecycle::fleet::GroupOps::describe(self.rotator.ports.groups.as_ref(), group)
                .await
                .unwrap();
        g.launch_template_image.unwrap_or_default()
    }

    /// A Spot interruption warning for `instance` (the sample event, this instance, now).
    fn spot_warning(&self, instance: &str) -> Value {
        let path = nodecycle_tests::repo_path("events/spot-interruption-warning.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        v["detail"]["instance-id"] = json!(instance);
        v["time"] = json!(Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        v["id"] = json!("evt-stop-1");
        v
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stop_holds_every_pool_in_one_request_spot_drains_go_on_and_start_restores_the_unpaused() {
    let d = deployment().await;
    let t0 = now();
    let old_image = d.launches("prod-a").await;
    // prod/b is paused of its own before the incident.
    d.operator
        .ok(
            json!({"action": "pause", "pool": "prod/b", "reason": "team b freeze"}),
            t0,
        )
        .await;

    // One request stops the deployment; the response says which pools it holds.
    let stopped = d
        .operator
        .ok(
            json!({"action": "stop", "reason": "incident 42: hold every node"}),
            t0,
        )
        .await;
    assert_eq!(stopped["changed"], true, "{stopped}");
    assert_eq!(stopped["holds"], json!(["prod/a"]), "{stopped}");
    assert_eq!(stopped["staysPaused"], json!(["prod/b"]), "{stopped}");
    assert_eq!(
        stopped["stopped"]["by"],
        "arn:aws:iam::123456789012:user/alice"
    );
    // Repeating it changes nothing and keeps the first record.
    let again = d
        .operator
        .ok(json!({"action": "stop", "reason": "again"}), t0)
        .await;
    assert_eq!(again["changed"], false);
    assert_eq!(again["stopped"]["reason"], "incident 42: hold every node");
    // Audited under the deployment's partition.
    let audits = d.table.query("DEPLOYMENT", "AUDIT#").await.unwrap();
    assert_eq!(audits.len(), 2, "{audits:?}");

    // Rotator passes: nothing starts in either pool, no launch template moves.
    for m in 0..3 {
        let report = d.pass(t0 + TimeDelta::minutes(m)).await;
        for pool in report["pools"].as_array().unwrap() {
            assert!(
                pool["blocked"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("deployment stopped by arn:aws:iam::123456789012:user/alice"),
                "{pool}"
            );
        }
    }
    assert!(d.rotations("prod/a").await.is_empty());
    assert!(d.rotations("prod/b").await.is_empty());
    assert_eq!(d.launches("prod-a").await, old_image);
    let status = d.operator.ok(json!({"action": "status"}), t0).await;
    assert_eq!(status["stopped"]["reason"], "incident 42: hold every node");

    // A Spot warning still drains its node at once.
    let (victim, _) = d.adapters.group_instances("prod-a").await[0].clone();
    let out = d
        .interruptions
        .handle(
            &d.spot_warning(&victim),
            Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(170)),
        )
        .await
        .unwrap();
    let node = d
        .kube
        .state()
        .nodes
        .iter()
        .find(|n| {
            n["spec"]["providerID"]
                .as_str()
                .is_some_and(|p| p.ends_with(&victim))
        })
        .cloned()
        .unwrap();
    assert_eq!(node["spec"]["unschedulable"], true, "{out}");
    let handled = d.table.query("POOL#prod/a", "EVT#").await.unwrap();
    assert_eq!(handled.len(), 1, "{out}");

    // One request starts again: prod/a goes on (budget 2, the Spot-drained node takes one),
    // prod/b stays paused (its own pause untouched).
    let started = d
        .operator
        .ok(json!({"action": "start", "reason": "incident 42 over"}), t0)
        .await;
    assert_eq!(started["changed"], true, "{started}");
    assert_eq!(started["resumes"], json!(["prod/a"]), "{started}");
    assert_eq!(started["staysPaused"], json!(["prod/b"]), "{started}");
    assert_eq!(started["stopped"], Value::Null);
    let t1 = t0 + TimeDelta::minutes(5);
    d.pass(t1).await;
    d.pass(t1 + TimeDelta::minutes(1)).await;
    assert!(
        !d.rotations("prod/a").await.is_empty(),
        "prod/a rotates again"
    );
    assert_ne!(d.launches("prod-a").await, old_image);
    assert!(
        d.rotations("prod/b").await.is_empty(),
        "prod/b stays paused"
    );
    let b = d
        .operator
        .ok(json!({"action": "status", "pool": "prod/b"}), t1)
        .await;
    assert_eq!(b["pools"][0]["paused"]["reason"], "team b freeze", "{b}");
    assert_eq!(b["stopped"], Value::Null);
    drop(d.cloud);
}
