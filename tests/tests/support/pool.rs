//! A self-managed pool in the fake cloud for rotation tests: a 2-image AMI history (`golden-1`
//! running, `golden-2` published), an Auto Scaling group whose instances the Kubernetes
//! stand-in registers as nodes, the real ami-watcher and rotator handlers over real adapters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::handlers::Invocation;
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::handlers::rotator::RotatorHandler;
use nodecycle::rotation::Rotation;
use nodecycle::state::Store;
use nodecycle_tests::{FakeCloud, ImageFixture, KubeStandIn, SyncNodes};
use serde_json::json;

use super::Adapters;

pub struct Pool {
    pub cloud: FakeCloud,
    pub kube: KubeStandIn,
    pub adapters: Adapters,
    pub table: Arc<Table>,
    pub watcher: AmiWatcher,
    pub rotator: RotatorHandler,
    pub old: String,
    pub new: String,
}

pub fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// A fake cloud with cluster `prod` (1.30) and its Kubernetes stand-in, and the team's images
/// `golden-1` (older) and `golden-2`: `(cloud, kube, golden-1 id, golden-2 id)`.
pub fn golden_cloud() -> (FakeCloud, KubeStandIn, String, String) {
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
    (cloud, kube, old, new)
}

pub async fn pool(nodes: i32, budgets: &str, never_ready_new: bool) -> Pool {
    pool_with(
        nodes,
        nodes + 4,
        budgets,
        never_ready_new,
        "terminationGracePeriod: 1m\n",
    )
    .await
}

/// [`pool`] with the group's `MaxSize` and `extra` policy lines after the budgets (top-level
/// YAML, each line ending in a newline; [`pool`]'s are `terminationGracePeriod: 1m`).
pub async fn pool_with(
    nodes: i32,
    max: i32,
    budgets: &str,
    never_ready_new: bool,
    extra: &str,
) -> Pool {
    let (cloud, kube, old, new) = golden_cloud();
    let a = Adapters::new(&cloud).await;
    a.create_group("prod-general", &old, "m5.large", nodes, max, None)
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
            "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\narchitecture: x86_64\namiSelectorTerms:\n  - name: golden-*\n    owner: self\ndisruption:\n  budgets:\n{budgets}{extra}"
        ),
    );
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies, table.clone()).await;
    // Wait until every instance has a Ready node.
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
        old,
        new,
    }
}

impl Pool {
    pub async fn rotations(&self) -> Vec<Rotation> {
        self.table
            .query("POOL#prod/general", "ROT#")
            .await
            .unwrap()
            .into_iter()
            .map(|(_, v)| serde_json::from_value(v.value).unwrap())
            .collect()
    }

    pub async fn images(&self) -> Vec<String> {
        self.adapters.group_images("prod-general").await
    }

    pub async fn pass(&self, now: DateTime<Utc>) -> serde_json::Value {
        let report = self
            .rotator
            .handle(
                &json!({}),
                Invocation::at(now, Instant::now() + Duration::from_secs(120)),
            )
            .await
            .unwrap();
        // Let the stand-in register nodes for instances the pass launched.
        std::thread::sleep(Duration::from_millis(400));
        report
    }
}

impl Pool {
    /// The group's desired capacity.
    pub async fn desired_capacity(&self) -> i32 {
        self.adapters
            .clients
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names("prod-general")
            .send()
            .await
            .unwrap()
            .auto_scaling_groups()[0]
            .desired_capacity()
            .unwrap()
    }

    /// The group's suspended processes (`AZRebalance`, ...).
    pub async fn suspended_processes(&self) -> Vec<String> {
        self.adapters
            .clients
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names("prod-general")
            .send()
            .await
            .unwrap()
            .auto_scaling_groups()[0]
            .suspended_processes()
            .iter()
            .filter_map(|p| p.process_name().map(str::to_string))
            .collect()
    }
}
