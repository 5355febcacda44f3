//! Two stages of a tiered rollout in the fake cloud: pool `test/general` (cluster `test`,
//! Kubernetes 1.30) follows `al2023@latest`; pool `prod/general` (cluster `prod`, Kubernetes
//! 1.29) has the same terms and `promotion.from: test/general`. Each pool is an Auto Scaling
//! group whose instances the cluster's Kubernetes stand-in registers as nodes; the real
//! ami-watcher and rotator run over real adapters with one state table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::handlers::Invocation;
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::handlers::rotator::RotatorHandler;
use nodecycle::rotation::Rotation;
use nodecycle::state::PoolRecord;
use nodecycle_tests::{FakeCloud, KubeStandIn, SyncNodes};
use serde_json::{Value, json};

use super::{Adapters, id_of, publish_al2023};

/// First release (both pools run it at the start) and the new one.
pub const OLD: &str = "v20240101";
pub const NEW: &str = "v20240601";

pub struct Stages {
    pub cloud: FakeCloud,
    pub test_kube: KubeStandIn,
    pub prod_kube: KubeStandIn,
    pub adapters: Adapters,
    pub table: Arc<Table>,
    pub watcher: AmiWatcher,
    pub rotator: RotatorHandler,
    /// Image ids of [`OLD`] for the test (1.30) and prod (1.29) pools.
    pub test_old: String,
    pub prod_old: String,
}

/// What a stage's pool is set up with.
pub struct Stage<'a> {
    pub nodes: i32,
    /// Budget `nodes` value.
    pub budget: &'a str,
}

/// The extra `promotion` fields of the prod pool (YAML, indented by four spaces), e.g.
/// `"    soak: 1h\n"`.
pub async fn stages(test: Stage<'_>, prod: Stage<'_>, promotion: &str) -> Stages {
    let cloud = FakeCloud::start();
    cloud.create_cluster("test", "1.30");
    cloud.create_cluster("prod", "1.29");
    let test_kube = cloud.create_kube("test");
    let prod_kube = cloud.create_kube("prod");
    let test_old = id_of(
        &publish_al2023(&cloud, "1.30", OLD, "2024-01-01T00:00:00Z"),
        "x86_64",
        "standard",
    );
    let prod_old = id_of(
        &publish_al2023(&cloud, "1.29", OLD, "2024-01-01T00:00:00Z"),
        "x86_64",
        "standard",
    );
    let a = Adapters::new(&cloud).await;
    a.create_group(
        "test-general",
        &test_old,
        "m5.large",
        test.nodes,
        test.nodes + 4,
        None,
    )
    .await;
    a.create_group(
        "prod-general",
        &prod_old,
        "m5.large",
        prod.nodes,
        prod.nodes + 4,
        None,
    )
    .await;
    for (kube, asg) in [(&test_kube, "test-general"), (&prod_kube, "prod-general")] {
        kube.sync_nodes(SyncNodes {
            asg: Some(asg.into()),
            ..SyncNodes::default()
        });
    }
    // Per-pool metrics, so the tests can tell the stages' metrics apart.
    let body = |stage: &Stage<'_>| {
        format!(
            "nodeGroup: {{ autoScalingGroup: CLUSTER-general }}\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\ndisruption:\n  budgets:\n    - nodes: \"{}\"\nterminationGracePeriod: 1m\nmetrics:\n  perPool: true\n",
            stage.budget
        )
    };
    cloud.put_parameter(
        "/nodecycle/pools/test/general",
        &format!("cluster: test\nname: general\n{}", body(&test)).replace("CLUSTER", "test"),
    );
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!(
            "cluster: prod\nname: general\n{}promotion:\n    from: test/general\n{promotion}",
            body(&prod)
        )
        .replace("CLUSTER", "prod"),
    );
    let table = a.table("nodecycle").await;
    let policies = a.policies();
    let watcher = a.watcher(policies.clone(), table.clone());
    let rotator = a.rotator(&cloud, policies, table.clone()).await;
    for (kube, n) in [(&test_kube, test.nodes), (&prod_kube, prod.nodes)] {
        kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
            (s.nodes.len() == n as usize).then_some(())
        });
    }
    Stages {
        cloud,
        test_kube,
        prod_kube,
        adapters: a,
        table,
        watcher,
        rotator,
        test_old,
        prod_old,
    }
}

impl Stages {
    /// Publishes [`NEW`] for both Kubernetes versions (the `recommended` parameters move);
    /// returns its (test, prod) image ids.
    pub fn publish_new(&self) -> (String, String) {
        let t = publish_al2023(&self.cloud, "1.30", NEW, "2024-06-01T00:00:00Z");
        let p = publish_al2023(&self.cloud, "1.29", NEW, "2024-06-01T00:00:00Z");
        (
            id_of(&t, "x86_64", "standard"),
            id_of(&p, "x86_64", "standard"),
        )
    }

    /// Instances of `image` never become Ready in cluster `test`.
    pub fn never_ready_in_test(&self, image: &str) {
        self.test_kube.sync_nodes(SyncNodes {
            asg: Some("test-general".into()),
            never_ready_images: vec![image.to_string()],
            ..SyncNodes::default()
        });
    }

    pub async fn watch(&self, now: DateTime<Utc>) -> Value {
        self.watcher.handle(&json!({}), now).await.unwrap()
    }

    /// One rotator pass at `now`, then a moment for the stand-ins to register launched nodes.
    pub async fn pass(&self, now: DateTime<Utc>) -> Value {
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

    pub async fn record(&self, pool: &str) -> PoolRecord {
        nodecycle::state::Repository::new(self.table.clone())
            .pool(pool)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no record of {pool}"))
    }

    /// The live quarantine list.
    pub async fn quarantined(&self) -> nodecycle::promotion::Quarantined {
        nodecycle::state::Repository::new(self.table.clone())
            .quarantine()
            .await
            .unwrap()
    }

    pub async fn rotations(&self, pool: &str) -> Vec<Rotation> {
        super::rotations_of(&self.table, pool).await
    }

    /// The images the instances of `asg` run.
    pub async fn images(&self, asg: &str) -> Vec<String> {
        self.adapters.group_images(asg).await
    }

    /// (desired capacity, image the group's launch template version launches).
    pub async fn group(&self, asg: &str) -> (i32, String) {
        let c = &self.adapters.clients;
        let out = c
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(asg)
            .send()
            .await
            .unwrap();
        let g = &out.auto_scaling_groups()[0];
        let lt = g.launch_template().unwrap();
        let mut q = c.ec2.describe_launch_template_versions();
        q = match lt.launch_template_id() {
            Some(id) => q.launch_template_id(id),
            None => q.launch_template_name(lt.launch_template_name().unwrap()),
        };
        let versions = q
            .versions(lt.version().unwrap_or("$Default"))
            .send()
            .await
            .unwrap();
        let image = versions.launch_template_versions()[0]
            .launch_template_data()
            .unwrap()
            .image_id()
            .unwrap()
            .to_string();
        (g.desired_capacity().unwrap(), image)
    }

    /// Names of the nodes of `kube` marked unschedulable.
    pub fn cordoned(kube: &KubeStandIn) -> Vec<String> {
        kube.state()
            .nodes
            .iter()
            .filter(|n| n["spec"]["unschedulable"].as_bool() == Some(true))
            .map(|n| {
                n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }
}

/// `n` minutes.
pub fn minutes(n: i64) -> TimeDelta {
    TimeDelta::minutes(n)
}

/// Runs watcher + rotator passes a minute apart from `*now` until `done` holds (at most `max`
/// passes); returns whether it did.
pub async fn until<F>(s: &Stages, now: &mut DateTime<Utc>, max: usize, mut done: F) -> bool
where
    F: AsyncFnMut(&Stages) -> bool,
{
    for _ in 0..max {
        s.watch(*now).await;
        s.pass(*now).await;
        *now += minutes(1);
        if done(s).await {
            return true;
        }
    }
    false
}

/// Passes until the test pool's soak ledger has an open period on `release` (at most 30);
/// whether it did.
pub async fn until_soaking_in_test(s: &Stages, now: &mut DateTime<Utc>, release: &str) -> bool {
    until(s, now, 30, async |s: &Stages| {
        s.record("test/general")
            .await
            .ledger
            .iter()
            .any(|p| p.until.is_none() && p.release.as_str() == release)
    })
    .await
}
