//! One deployment for an organisation: two cells of the tooling account (us-east-1 and
//! eu-west-1) share one state table (what a DynamoDB global table looks like to readers) and
//! serve two member accounts, test and prod, through their spoke roles (moto acts in the
//! account of an assumed role's credentials; the fake cloud records the account of every call
//! and refuses AssumeRole on a role that does not exist, as IAM does).
//!
//! - test's pool in us-east-1 follows `al2023@latest`; prod's pool in us-east-1 takes what
//!   test proved (soak 1h); prod's pool in eu-west-1 (served by the other cell) takes what prod
//!   us-east-1 proved (soak 1h): each on its own region's image of the release, each within its
//!   own budget.
//! - a release quarantined in test (an operator of the us-east-1 cell) never becomes desired in
//!   any prod pool, in either cell.
//! - a Spot warning from the prod account is drained through the prod account's role; the same
//!   event claiming an account the cell does not serve changes nothing.
//! - a member whose spoke role cannot be assumed reports it on its pool, and the others go on.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::sts::AssumeRoleProvider;
use aws_credential_types::provider::SharedCredentialsProvider;
use chrono::{DateTime, TimeDelta, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::aws::members::AwsMembers;
use nodecycle::event::served::Served;
use nodecycle::handlers::Invocation;
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::handlers::interruption::InterruptionHandler;
use nodecycle::handlers::ops::{OpsHandler, Origin};
use nodecycle::handlers::rotator::{RotatorHandler, Settings};
use nodecycle::members::MemberConfig;
use nodecycle::state::{PoolRecord, Store};
use nodecycle_tests::{FakeCloud, KubeStandIn, SyncNodes};
use serde_json::{Value, json};
use support::pool::at;

const TOOLING: &str = "123456789012";
const TEST: &str = "111111111111";
const PROD: &str = "222222222222";
/// Served, but its spoke role does not exist: cannot be assumed.
const BROKEN: &str = "333333333333";
/// Not served at all.
const STRANGER: &str = "444444444444";
const EAST: &str = "us-east-1";
const WEST: &str = "eu-west-1";
const EXTERNAL_ID: &str = "org-7f3a";

const OLD: &str = "v20240101";
const NEW: &str = "v20240601";
const BAD: &str = "v20240901";

const TEST_POOL: &str = "111111111111/us-east-1/test/general";
const PROD_EAST: &str = "222222222222/us-east-1/prod/general";
const PROD_WEST: &str = "222222222222/eu-west-1/prod-eu/general";
const BROKEN_POOL: &str = "333333333333/us-east-1/broken/general";

/// One member pool: its account, region, cluster, Auto Scaling group, size and budget.
struct Pool {
    id: &'static str,
    account: &'static str,
    region: &'static str,
    cluster: &'static str,
    group: &'static str,
    nodes: i32,
    budget: usize,
}

const POOLS: [Pool; 3] = [
    Pool {
        id: TEST_POOL,
        account: TEST,
        region: EAST,
        cluster: "test",
        group: "test-general",
        nodes: 4,
        budget: 2,
    },
    Pool {
        id: PROD_EAST,
        account: PROD,
        region: EAST,
        cluster: "prod",
        group: "prod-general",
        nodes: 3,
        budget: 1,
    },
    Pool {
        id: PROD_WEST,
        account: PROD,
        region: WEST,
        cluster: "prod-eu",
        group: "prod-eu-general",
        nodes: 2,
        budget: 1,
    },
];

/// The handlers of one cell.
struct Cell {
    /// The cell's ports (its members through the spoke roles).
    ports: nodecycle::ports::Ports,
    watcher: AmiWatcher,
    rotator: RotatorHandler,
    ops: OpsHandler,
    interruptions: InterruptionHandler,
}

struct Org {
    cloud: FakeCloud,
    table: Arc<Table>,
    east: Cell,
    west: Cell,
    kubes: BTreeMap<&'static str, KubeStandIn>,
    /// SDK configurations acting in (account, region), for the fixtures and the checks.
    configs: BTreeMap<(&'static str, &'static str), aws_config::SdkConfig>,
}

/// The cell's SDK configuration (the tooling account in `region`).
async fn tooling(cloud: &FakeCloud, region: &str) -> aws_config::SdkConfig {
    cloud
        .sdk_config()
        .await
        .to_builder()
        .region(aws_config::Region::new(region.to_string()))
        .build()
}

/// Credentials of `account` through its `fixtures` role (the test's own, not nodecycle's).
async fn acting_in(cloud: &FakeCloud, account: &str, region: &str) -> aws_config::SdkConfig {
    let base = tooling(cloud, region).await;
    let provider = AssumeRoleProvider::builder(format!("arn:aws:iam::{account}:role/fixtures"))
        .session_name("fixtures")
        .configure(&base)
        .build()
        .await;
    base.to_builder()
        .credentials_provider(SharedCredentialsProvider::new(provider))
        .build()
}

/// Publishes release `release` of AL2023 for Kubernetes 1.30 in `region` of `account` (the
/// image Amazon owns and the public parameter pointing at it); returns the image id. Each
/// region has its own image of a release (`id` given: the same image seen from another
/// account of the region).
fn publish(cloud: &FakeCloud, account: &str, region: &str, release: &str, id: &str) {
    let name = format!("amazon-eks-node-al2023-x86_64-standard-1.30-{release}");
    let created = format!("2024-{}-01T00:00:00Z", &release[5..7]);
    cloud.control(
        "register_image",
        json!({"account": account, "region": region, "id": id, "name": name,
               "architecture": "x86_64", "owner_id": "amazon", "creation_date": created}),
    );
    let base = "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard";
    for path in [
        format!("{base}/{name}/image_id"),
        format!("{base}/recommended/image_id"),
    ] {
        cloud.control(
            "put_parameter",
            json!({"account": account, "region": region, "name": path, "value": id}),
        );
    }
}

/// The image id of `release` in `region` (the same in every account of the region).
fn image(release: &str, region: &str) -> String {
    let r = &release[1..];
    let region_digit = if region == EAST { "e" } else { "f" };
    format!("ami-0{region_digit}{r}0000000")
}

/// A self-managed node group of `pool` (launch template and Auto Scaling group tagged with its
/// cluster) on `image`, in its account and region.
async fn create_group(config: &aws_config::SdkConfig, pool: &Pool, image: &str) {
    let ec2 = aws_sdk_ec2::Client::new(config);
    let autoscaling = aws_sdk_autoscaling::Client::new(config);
    let lt = aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
        .image_id(image)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .build();
    ec2.create_launch_template()
        .launch_template_name(pool.group)
        .launch_template_data(lt)
        .tag_specifications(support::opted_in_template_tags(Some(pool.cluster)))
        .send()
        .await
        .expect("CreateLaunchTemplate");
    autoscaling
        .create_auto_scaling_group()
        .auto_scaling_group_name(pool.group)
        .launch_template(
            aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                .launch_template_name(pool.group)
                .version("$Latest")
                .build(),
        )
        .min_size(0)
        .max_size(pool.nodes + 4)
        .desired_capacity(pool.nodes)
        .availability_zones(format!("{}a", pool.region))
        .tags(
            aws_sdk_autoscaling::types::Tag::builder()
                .key("eks:cluster-name")
                .value(pool.cluster)
                .propagate_at_launch(true)
                .build(),
        )
        .send()
        .await
        .expect("CreateAutoScalingGroup");
}

/// The policy of `pool` (its place named by the parameter path), promoting from `from`.
fn policy(pool: &Pool, from: Option<&str>) -> String {
    let promotion = from
        .map(|f| format!("promotion:\n  from: {f}\n  soak: 1h\n"))
        .unwrap_or_default();
    format!(
        "nodeGroup: {{ autoScalingGroup: {} }}\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\ndisruption:\n  budgets:\n    - nodes: \"{}\"\nterminationGracePeriod: 1m\n{promotion}",
        pool.group, pool.budget
    )
}

/// The handlers of the cell in `region`: the shared table, the members test, prod and broken
/// (their spoke role `nodecycle-spoke` with the organisation's external id).
async fn cell(cloud: &FakeCloud, region: &str, table: Arc<Table>) -> Cell {
    let base = tooling(cloud, region).await;
    let config = MemberConfig::parse(
        Some("arn:aws:iam::{account}:role/nodecycle-spoke"),
        Some(EXTERNAL_ID),
    );
    let common = nodecycle::wiring::Common {
        table: "nodecycle".into(),
        policy_prefix: "/nodecycle/pools/".into(),
        group_updates: true,
        served_accounts: String::new(),
        served_regions: String::new(),
        members: config.clone().unwrap_or_default(),
        kube: Default::default(),
    };
    let mut ports = common.adapters(&base);
    ports.store = table;
    ports.deployment = Arc::new(Served {
        accounts: [TOOLING, TEST, PROD, BROKEN].map(String::from).to_vec(),
        regions: vec![region.to_string()],
    });
    ports.members = Arc::new(AwsMembers::new(
        &base,
        ports.clone(),
        config,
        common.adapters_fn(),
    ));
    let settings = Settings {
        drain_step: Duration::from_secs(5),
        ..Settings::default()
    };
    let interruption = nodecycle::handlers::interruption::Settings {
        poll: Duration::from_millis(200),
        ..Default::default()
    };
    Cell {
        ports: ports.clone(),
        watcher: AmiWatcher::new(&ports),
        rotator: RotatorHandler::new(&ports, settings.clone()),
        ops: OpsHandler::new(&ports, settings),
        interruptions: InterruptionHandler::new(&ports, interruption),
    }
}

async fn org() -> Org {
    let cloud = FakeCloud::start();
    for account in [TEST, PROD] {
        for name in ["nodecycle-spoke", "fixtures"] {
            let external_id = (name == "nodecycle-spoke").then_some(EXTERNAL_ID);
            cloud.control(
                "create_role",
                json!({"account": account, "name": name, "external_id": external_id}),
            );
        }
    }
    let mut configs = BTreeMap::new();
    for pool in &POOLS {
        let config = acting_in(&cloud, pool.account, pool.region).await;
        configs.insert((pool.account, pool.region), config);
    }
    let mut kubes = BTreeMap::new();
    for pool in &POOLS {
        publish(
            &cloud,
            pool.account,
            pool.region,
            OLD,
            &image(OLD, pool.region),
        );
        let kube = cloud.create_kube_in(pool.cluster, pool.account, pool.region);
        create_group(
            &configs[&(pool.account, pool.region)],
            pool,
            &image(OLD, pool.region),
        )
        .await;
        kube.sync_nodes(SyncNodes {
            asg: Some(pool.group.into()),
            ..SyncNodes::default()
        });
        kubes.insert(pool.id, kube);
    }
    // The policies: each cell's own parameters in its region of the tooling account.
    cloud.control(
        "put_parameter",
        json!({"region": EAST, "name": format!("/nodecycle/pools/{TEST_POOL}"), "value": policy(&POOLS[0], None)}),
    );
    cloud.control(
        "put_parameter",
        json!({"region": EAST, "name": format!("/nodecycle/pools/{PROD_EAST}"), "value": policy(&POOLS[1], Some(TEST_POOL))}),
    );
    cloud.control(
        "put_parameter",
        json!({"region": WEST, "name": format!("/nodecycle/pools/{PROD_WEST}"), "value": policy(&POOLS[2], Some(PROD_EAST))}),
    );
    let broken = Pool {
        id: BROKEN_POOL,
        account: BROKEN,
        region: EAST,
        cluster: "broken",
        group: "broken-general",
        nodes: 1,
        budget: 1,
    };
    cloud.control(
        "put_parameter",
        json!({"region": EAST, "name": format!("/nodecycle/pools/{BROKEN_POOL}"), "value": policy(&broken, None)}),
    );
    // One table in us-east-1 for both cells (a global table's replicas read the same items).
    let east_config = tooling(&cloud, EAST).await;
    let table = Table::new(aws_sdk_dynamodb::Client::new(&east_config), "nodecycle");
    table.create_if_missing().await.unwrap();
    let table = Arc::new(table);
    let east = cell(&cloud, EAST, table.clone()).await;
    let west = cell(&cloud, WEST, table.clone()).await;
    for pool in &POOLS {
        kubes[pool.id].wait_for("initial nodes", Duration::from_secs(30), |s| {
            (s.nodes.len() == pool.nodes as usize).then_some(())
        });
    }
    // From here on every call is nodecycle's.
    cloud.control("aws_calls", json!({"reset": true}));
    Org {
        cloud,
        table,
        east,
        west,
        kubes,
        configs,
    }
}

impl Org {
    /// Both cells' watchers and rotators at `now`; the reports of the east cell's.
    async fn pass(&self, now: DateTime<Utc>) -> (Value, Value) {
        let watched = self.east.watcher.handle(&json!({}), now).await.unwrap();
        self.west.watcher.handle(&json!({}), now).await.unwrap();
        let deadline = || Instant::now() + Duration::from_secs(120);
        let rotated = self
            .east
            .rotator
            .handle(&json!({}), Invocation::at(now, deadline()))
            .await
            .unwrap();
        self.west
            .rotator
            .handle(&json!({}), Invocation::at(now, deadline()))
            .await
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        (watched, rotated)
    }

    async fn record(&self, pool: &str) -> PoolRecord {
        nodecycle::state::Repository::new(self.table.clone())
            .pool(pool)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no record of {pool}"))
    }

    async fn desired(&self, pool: &str) -> Option<String> {
        nodecycle::state::Repository::new(self.table.clone())
            .pool(pool)
            .await
            .unwrap()
            .and_then(|r| r.desired)
            .map(|a| a.id)
    }

    /// The images the instances of `pool`'s group run (read in its account).
    async fn images(&self, pool: &Pool) -> Vec<String> {
        let config = &self.configs[&(pool.account, pool.region)];
        support::Adapters::from_config(config)
            .group_images(pool.group)
            .await
    }

    async fn in_flight(&self, pool: &str) -> usize {
        support::rotations_of(&self.table, pool)
            .await
            .iter()
            .filter(|r| r.in_flight())
            .count()
    }

    /// Passes a minute apart until every node of `pool` runs `image` and its ledger has an open
    /// period of `release`; the most rotations in flight at once. Panics after `max` passes.
    async fn roll(
        &self,
        pool: &Pool,
        release: &str,
        image: &str,
        now: &mut DateTime<Utc>,
        max: usize,
    ) -> usize {
        let mut most = 0;
        for _ in 0..max {
            self.pass(*now).await;
            *now += TimeDelta::minutes(1);
            most = most.max(self.in_flight(pool.id).await);
            let images = self.images(pool).await;
            let on = images.len() == pool.nodes as usize && images.iter().all(|i| i == image);
            let open = nodecycle::state::Repository::new(self.table.clone())
                .pool(pool.id)
                .await
                .unwrap()
                .is_some_and(|r| {
                    r.ledger
                        .iter()
                        .any(|p| p.until.is_none() && p.release.as_str() == release)
                });
            if on && open {
                return most;
            }
        }
        panic!(
            "{} did not roll to {image}: {:?}, record {:?}",
            pool.id,
            self.images(pool).await,
            self.record(pool.id).await
        );
    }

    /// Publishes `release` in every pool's account and region (each region its own image).
    fn publish_all(&self, release: &str) {
        for pool in &POOLS {
            publish(
                &self.cloud,
                pool.account,
                pool.region,
                release,
                &image(release, pool.region),
            );
        }
    }

    fn calls(&self) -> Vec<Value> {
        self.cloud.control("aws_calls", json!({}))["calls"]
            .as_array()
            .unwrap()
            .clone()
    }
}

fn spot_warning(account: &str, region: &str, instance: &str, id: &str) -> Value {
    json!({
        "version": "0",
        "id": id,
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": account,
        "time": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": region,
        "resources": [format!("arn:aws:ec2:{region}:{account}:instance/{instance}")],
        "detail": {"instance-id": instance, "instance-action": "terminate"}
    })
}

#[tokio::test]
async fn a_release_proven_in_test_reaches_prod_in_both_regions_and_a_quarantine_holds_everywhere() {
    let org = org().await;
    let [test, prod_east, prod_west] = &POOLS;
    let mut now = at("2026-12-01T10:00:00Z");
    let (watched, rotated) = org.pass(now).await;
    for pool in &POOLS {
        assert_eq!(
            org.desired(pool.id).await,
            Some(image(OLD, pool.region)),
            "{}: {watched}",
            pool.id
        );
    }

    // The member whose spoke role cannot be assumed: its pool says so (field, role, AWS
    // error), in the watcher's and the rotator's report; the others went on.
    let broken = |report: &Value| {
        report["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pool"] == BROKEN_POOL)
            .cloned()
            .unwrap_or_else(|| panic!("{BROKEN_POOL} reported: {report}"))
    };
    let error = broken(&watched)["error"].as_str().unwrap().to_string();
    for wanted in [
        "account: account 333333333333/us-east-1",
        "arn:aws:iam::333333333333:role/nodecycle-spoke",
        "AccessDenied",
    ] {
        assert!(error.contains(wanted), "{wanted}: {error}");
    }
    assert_eq!(broken(&watched)["status"], "failed");
    let blocked = broken(&rotated)["blocked"].as_str().unwrap().to_string();
    assert!(blocked.contains("AccessDenied"), "{blocked}");
    assert!(
        org.record(BROKEN_POOL).await.last_error.is_some(),
        "the pool's status shows it"
    );

    // A new release: test takes it at once and rolls within its budget.
    org.publish_all(NEW);
    now += TimeDelta::minutes(5);
    let most = org.roll(test, NEW, &image(NEW, EAST), &mut now, 60).await;
    assert!(most <= test.budget, "test: {most} at once, budget 2");
    let proven_at = org.record(TEST_POOL).await.ledger.last().unwrap().since;
    // Prod waits for the soak (1h) in both regions.
    org.pass(proven_at + TimeDelta::minutes(30)).await;
    assert_eq!(org.desired(PROD_EAST).await, Some(image(OLD, EAST)));
    assert_eq!(org.desired(PROD_WEST).await, Some(image(OLD, WEST)));
    assert!(org.record(PROD_EAST).await.promotion_wait.is_some());

    // After the soak prod us-east-1 takes the release (its region's image) and rolls within
    // its budget; prod eu-west-1 still waits for prod us-east-1's soak.
    now = proven_at + TimeDelta::minutes(61);
    let most = org
        .roll(prod_east, NEW, &image(NEW, EAST), &mut now, 60)
        .await;
    assert_eq!(most, 1, "prod us-east-1: budget 1");
    assert_eq!(org.desired(PROD_WEST).await, Some(image(OLD, WEST)));
    let east_at = org.record(PROD_EAST).await.ledger.last().unwrap().since;
    assert!(east_at >= proven_at + TimeDelta::hours(1));

    // After prod us-east-1's soak, prod eu-west-1 (the other cell) takes the same release on
    // eu-west-1's image.
    now = east_at + TimeDelta::minutes(61);
    let most = org
        .roll(prod_west, NEW, &image(NEW, WEST), &mut now, 60)
        .await;
    assert_eq!(most, 1, "prod eu-west-1: budget 1");
    let west = org.record(PROD_WEST).await;
    assert_eq!(west.desired.as_ref().unwrap().id, image(NEW, WEST));
    assert_ne!(image(NEW, WEST), image(NEW, EAST));
    assert!(west.releases.iter().any(|e| e.release.as_str() == NEW));

    // A bad release: test takes it and runs it; an operator of the us-east-1 cell quarantines
    // it. Neither prod pool ever takes it, not even long after any soak.
    org.publish_all(BAD);
    now += TimeDelta::minutes(5);
    org.roll(test, BAD, &image(BAD, EAST), &mut now, 60).await;
    let answer = org
        .east
        .ops
        .handle(
            &json!({"action": "quarantine", "release": BAD, "reason": "kernel panics in test"}),
            &Origin {
                request_id: "q-1".into(),
                caller: Some(format!("arn:aws:iam::{TOOLING}:user/alice")),
            },
            now,
        )
        .await
        .unwrap();
    assert_eq!(answer["action"], "quarantine", "{answer}");
    for hours in [0, 2, 5] {
        let t = now + TimeDelta::hours(hours);
        org.pass(t).await;
        assert_eq!(
            org.desired(PROD_EAST).await,
            Some(image(NEW, EAST)),
            "at {t}"
        );
        assert_eq!(
            org.desired(PROD_WEST).await,
            Some(image(NEW, WEST)),
            "at {t}"
        );
    }
    for pool in [PROD_EAST, PROD_WEST] {
        let rec = org.record(pool).await;
        assert!(
            rec.history.iter().all(|h| !h.ami.name.contains(BAD)),
            "{pool} never recorded the bad release: {:?}",
            rec.history
        );
    }
    // Test rolls back off it (the quarantine is in force in its cell).
    assert_eq!(org.desired(TEST_POOL).await, Some(image(NEW, EAST)));

    // Every AWS call was made with the credentials of the account it is about: node groups,
    // instances, clusters and AMI parameters through the members' roles (never the tooling
    // account's, which has no pools), eu-west-1's through prod's; the table and the policies
    // are the tooling account's.
    let calls = org.calls();
    assert!(!calls.is_empty());
    let mut by: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for c in &calls {
        let key = (
            c["service"].as_str().unwrap().to_string(),
            c["region"].as_str().unwrap().to_string(),
            c["account"].as_str().unwrap().to_string(),
        );
        *by.entry(key).or_default() += 1;
        let (service, region, account) = (
            c["service"].as_str().unwrap(),
            c["region"].as_str().unwrap(),
            c["account"].as_str().unwrap(),
        );
        match service {
            "autoscaling" | "ec2" | "eks" => {
                assert!([TEST, PROD].contains(&account), "{c}");
                if region == WEST {
                    assert_eq!(account, PROD, "{c}");
                }
            }
            "dynamodb" | "sts" => assert_eq!(account, TOOLING, "{c}"),
            "ssm" => {
                // The cell reads its policies and publishes rollout statuses; members are
                // read for their AMI parameters.
                let cell =
                    c["operation"] == "GetParametersByPath" || c["operation"] == "PutParameter";
                assert_eq!(account == TOOLING, cell, "{c}");
            }
            _ => {}
        }
    }
    for (service, region, account) in [
        ("autoscaling", EAST, TEST),
        ("autoscaling", EAST, PROD),
        ("autoscaling", WEST, PROD),
        ("ec2", WEST, PROD),
        ("ssm", WEST, PROD),
    ] {
        assert!(
            by.contains_key(&(service.into(), region.into(), account.into())),
            "{service} {region} {account}: {by:?}"
        );
    }
    // The spoke roles' credentials are cached: far fewer AssumeRole calls than passes (the
    // broken member's role is tried again each pass, and refused each time).
    let assumed = calls
        .iter()
        .filter(|c| c["operation"] == "AssumeRole" && c["refused"] == false)
        .count();
    assert!(
        calls
            .iter()
            .filter(|c| c["refused"] == true)
            .all(|c| c["role"] == "arn:aws:iam::333333333333:role/nodecycle-spoke"),
        "only the broken member's role is refused"
    );
    let passes = calls
        .iter()
        .filter(|c| c["operation"] == "GetParametersByPath")
        .count();
    assert!(
        assumed < passes / 4,
        "{assumed} AssumeRole in {passes} listings"
    );
}

#[tokio::test]
async fn a_spot_warning_from_prod_drains_through_prods_role_and_one_from_a_stranger_changes_nothing()
 {
    let org = org().await;
    let now = at("2026-12-01T10:00:00Z");
    org.pass(now).await;
    let prod = &POOLS[1];
    let instances = support::Adapters::from_config(&org.configs[&(PROD, EAST)])
        .group_instances(prod.group)
        .await;
    let instance = instances[0].0.clone();
    let kube = &org.kubes[PROD_EAST];
    let cordoned = || support::stages::Stages::cordoned(kube);
    assert!(cordoned().is_empty());

    // Claiming an account the cell does not serve: refused, nothing written, nothing called.
    org.cloud.control("aws_calls", json!({"reset": true}));
    let out = org
        .east
        .interruptions
        .handle(
            &spot_warning(STRANGER, EAST, &instance, "e-1"),
            Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(out["decision"], "refused", "{out}");
    assert!(
        out["reason"].as_str().unwrap().contains("444444444444"),
        "{out}"
    );
    assert!(cordoned().is_empty());
    let calls = org.calls();
    assert!(
        calls
            .iter()
            .all(|c| c["service"] != "ec2" && c["service"] != "dynamodb"),
        "{calls:?}"
    );
    // The same warning from a region the cell does not serve: refused too.
    let out = org
        .east
        .interruptions
        .handle(
            &spot_warning(PROD, WEST, &instance, "e-2"),
            Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(out["decision"], "refused", "{out}");

    // From the prod account: drained through prod's role.
    let out = org
        .east
        .interruptions
        .handle(
            &spot_warning(PROD, EAST, &instance, "e-3"),
            Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let outcome = &out["outcomes"][0];
    assert_eq!(outcome["pool"], PROD_EAST, "{out}");
    assert!(
        ["drained", "draining"].contains(&outcome["action"].as_str().unwrap()),
        "{out}"
    );
    assert_eq!(cordoned().len(), 1, "{out}");
    let calls = org.calls();
    let ec2: Vec<&Value> = calls.iter().filter(|c| c["service"] == "ec2").collect();
    assert!(!ec2.is_empty());
    assert!(ec2.iter().all(|c| c["account"] == PROD), "{ec2:?}");
}

/// An Auto Scaling instance-terminate lifecycle action of `group` in `account`.
fn lifecycle_action(
    account: &str,
    region: &str,
    group: &str,
    instance: &str,
    token: &str,
) -> Value {
    json!({
        "version": "0",
        "id": format!("lca-{instance}"),
        "detail-type": "EC2 Instance-terminate Lifecycle Action",
        "source": "aws.autoscaling",
        "account": account,
        "time": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "region": region,
        "resources": [format!("arn:aws:autoscaling:{region}:{account}:autoScalingGroup:7f2b1c9e-3a4d-4b5c-8d6e-9f0a1b2c3d4e:autoScalingGroupName/{group}")],
        "detail": {
            "LifecycleActionToken": token,
            "AutoScalingGroupName": group,
            "LifecycleHookName": "nodecycle-drain",
            "EC2InstanceId": instance,
            "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
            "NotificationMetadata": ""
        }
    })
}

/// The node of `instance` in the stand-in.
fn node_of(kube: &KubeStandIn, instance: &str) -> String {
    kube.state()
        .nodes
        .iter()
        .find(|n| {
            n["spec"]["providerID"]
                .as_str()
                .is_some_and(|p| p.ends_with(instance))
        })
        .and_then(|n| n["metadata"]["name"].as_str())
        .unwrap_or_else(|| panic!("no node of {instance}"))
        .to_string()
}

/// A terminate lifecycle action of a prod pool whose drain outlasts the invocation is handed
/// to the rotator; the schedule tick then heartbeats it and, once drained, completes it, each
/// call through the prod account's role (the action waits in prod's group: the cell's own
/// credentials cannot answer it). A member whose role cannot be assumed is reported by the
/// tick and the others are served.
#[tokio::test]
async fn a_members_lifecycle_action_handed_over_is_answered_by_the_tick_through_its_role() {
    let org = org().await;
    let prod = &POOLS[1];
    let config = &org.configs[&(PROD, EAST)];
    aws_sdk_autoscaling::Client::new(config)
        .put_lifecycle_hook()
        .auto_scaling_group_name(prod.group)
        .lifecycle_hook_name("nodecycle-drain")
        .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
        .heartbeat_timeout(300)
        .send()
        .await
        .unwrap();
    let instance = support::Adapters::from_config(config)
        .group_instances(prod.group)
        .await[0]
        .0
        .clone();
    let kube = &org.kubes[PROD_EAST];
    let node = node_of(kube, &instance);
    kube.add_pod(
        nodecycle_tests::PodFixture::new("default", "web-a")
            .node(&node)
            .owner("ReplicaSet", "web-5d8f")
            .label("app", "web")
            .grace_seconds(1),
    );
    // The PDB holds the pod: the drain cannot finish in the invocation.
    kube.add_pdb(
        nodecycle_tests::PdbFixture::new("default", "web")
            .match_label("app", "web")
            .min_available(1),
    );
    let token = "11111111-2222-3333-4444-555555555555";
    org.cloud.control(
        "lifecycle_wait",
        json!({"account": PROD, "region": EAST, "group": prod.group, "hook": "nodecycle-drain",
               "instance": instance, "token": token}),
    );
    let out = org
        .east
        .interruptions
        .handle(
            &lifecycle_action(PROD, EAST, prod.group, &instance, token),
            Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(12)),
        )
        .await
        .unwrap();
    assert_eq!(out["outcomes"][0]["action"], "handedOver", "{out}");
    assert_eq!(out["outcomes"][0]["pool"], PROD_EAST, "{out}");

    // A hand-over open in the broken member (its spoke role cannot be assumed).
    let broken = json!({"status": "open", "since": Utc::now(), "action": {
        "group": "broken-general", "hook": "nodecycle-drain", "instanceId": "i-0broken",
        "token": token}});
    nodecycle::state::Repository::new(org.table.clone())
        .put_lifecycle_handover(
            BROKEN_POOL,
            "i-0broken",
            &broken,
            None,
            Utc::now() + TimeDelta::days(1),
        )
        .await
        .unwrap();
    // A tick while the rotator drains: a heartbeat, accepted in prod; the broken member's
    // action is reported unanswered (role, AWS error), and prod's is answered all the same.
    let tick = || async {
        org.east
            .interruptions
            .handle(
                &json!({}),
                Invocation::at(Utc::now(), Instant::now() + Duration::from_secs(60)),
            )
            .await
            .unwrap()
    };
    let out = tick().await;
    assert_eq!(out["outcomes"][0]["action"], "heartbeat", "{out}");
    assert_eq!(out["outcomes"][0]["pool"], PROD_EAST, "{out}");
    assert_eq!(
        out["unserved"][0]["place"], "333333333333/us-east-1",
        "{out}"
    );
    assert_eq!(out["unserved"][0]["pools"][0], BROKEN_POOL, "{out}");
    let error = out["unserved"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("arn:aws:iam::333333333333:role/nodecycle-spoke")
            && error.contains("AccessDenied"),
        "{error}"
    );
    let answers = || -> Vec<Value> {
        org.cloud
            .lifecycle_calls()
            .into_iter()
            .filter(|c| c["instance"] == instance.as_str())
            .collect()
    };
    let beats = answers();
    assert!(
        beats.len() >= 2
            && beats
                .iter()
                .all(|c| c["account"] == PROD && c.get("error").is_none()),
        "the hand-over's and the tick's heartbeats were accepted in prod: {beats:?}"
    );

    // The rotator finished the drain: the tick completes the action, with prod's credentials.
    let key = format!("POOL#{PROD_EAST}");
    let sk = format!("ROT#{instance}");
    let v = org.table.get(&key, &sk).await.unwrap().unwrap();
    let mut rotation = v.value.clone();
    rotation["drain"]["done"] = json!(true);
    rotation["step"] = json!("Done");
    org.table
        .put(&key, &sk, &rotation, Some(v.version), None)
        .await
        .unwrap();
    let out = tick().await;
    assert_eq!(out["outcomes"][0]["action"], "completed", "{out}");
    assert!(
        out["outcomes"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("active: true"),
        "the action was still waiting and is answered: {out}"
    );
    let answers = answers();
    assert!(!answers.is_empty());
    assert!(
        answers
            .iter()
            .all(|c| c["account"] == PROD && c.get("error").is_none()),
        "every heartbeat and the completion in prod, accepted: {answers:?}"
    );
    let completes: Vec<&Value> = answers
        .iter()
        .filter(|c| c["action"] == "CompleteLifecycleAction")
        .collect();
    assert_eq!(completes.len(), 1, "{answers:?}");
    assert_eq!(completes[0]["result"], "CONTINUE");
    // Closed: the next tick has nothing to answer.
    let out = tick().await;
    assert_eq!(out["outcomes"].as_array().unwrap().len(), 0, "{out}");
}

/// `nodecycle validate --live`'s first pass of a prod policy reads prod's group, cluster and
/// nodes through prod's role (the cell's own account has no such group), and writes nothing.
#[tokio::test]
async fn the_first_pass_of_a_members_policy_reads_through_its_role() {
    let org = org().await;
    let prod = &POOLS[1];
    let text = format!(
        "account: \"{PROD}\"\nregion: {EAST}\ncluster: prod\nname: general\n{}",
        policy(prod, None)
    );
    let doc =
        nodecycle::policy::source::PolicyDocument::file("prod-general.yaml".to_string(), text);
    let parsed = nodecycle::policy::parse_document(&doc);
    let p = parsed.policy.expect("a valid policy");
    let out = nodecycle::handlers::onboard::first_pass(
        &org.east.ports,
        Some(org.east.ports.store.clone()),
        doc,
        &p,
        Settings::default(),
        Utc::now(),
    )
    .await
    .expect("the first pass reads the member through its role");
    assert_eq!(out["pool"], PROD_EAST, "{out}");
    assert_eq!(out["firstPass"], true, "{out}");
    assert_eq!(
        out["watcher"]["desired"],
        image(OLD, EAST).as_str(),
        "{out}"
    );
    assert_eq!(
        out["problems"].as_array().unwrap().len(),
        0,
        "the group's instance types were read: {out}"
    );
    let calls = org.calls();
    let reads: Vec<&Value> = calls
        .iter()
        .filter(|c| ["autoscaling", "ec2", "eks"].contains(&c["service"].as_str().unwrap()))
        .collect();
    assert!(!reads.is_empty());
    assert!(reads.iter().all(|c| c["account"] == PROD), "{reads:?}");
    // Nothing written: the pool has no record.
    assert!(
        nodecycle::state::Repository::new(org.table.clone())
            .pool(PROD_EAST)
            .await
            .unwrap()
            .is_none()
    );
}

/// `nodecycle doctor` (the binary, the operator's credentials in the tooling account) checks
/// each member through its spoke role: prod's forwarding rules (one disabled) and the access
/// entry of the role the cell acts as in prod's cluster; test has no forwarding rules; the
/// broken member's role cannot be assumed. Every read of a member's rules and entries is made
/// with that member's credentials.
#[tokio::test]
async fn doctor_checks_each_members_forwarding_rules_and_access_entries_through_its_role() {
    let org = org().await;
    let prod = &org.configs[&(PROD, EAST)];
    // prod's cluster on access entries, with the spoke role's entry (one role for every
    // function here: the cell's pattern names no function).
    org.cloud.control(
        "set_cluster",
        json!({"account": PROD, "region": EAST, "name": "prod", "authentication_mode": "API_AND_CONFIG_MAP"}),
    );
    aws_sdk_eks::Client::new(prod)
        .create_access_entry()
        .cluster_name("prod")
        .principal_arn(format!("arn:aws:iam::{PROD}:role/nodecycle-spoke"))
        .r#type("STANDARD")
        .kubernetes_groups("nodecycle-rotator")
        .kubernetes_groups("nodecycle-interruption")
        .kubernetes_groups("nodecycle-ops")
        .send()
        .await
        .unwrap();
    // prod's spoke rules to the cell's bus in us-east-1; the lifecycle one disabled.
    let events = aws_sdk_eventbridge::Client::new(prod);
    let bus = format!("arn:aws:events:{EAST}:{TOOLING}:event-bus/default");
    let rules = [
        (
            "spoke-ForwardInterruptionWarnings-A",
            json!({"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning",
                "EC2 Capacity Reservation Instance Interruption Warning", "EC2 Instance Rebalance Recommendation"]}),
            true,
        ),
        (
            "spoke-ForwardInstanceStateChanges-A",
            json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]}),
            true,
        ),
        (
            "spoke-ForwardScheduledMaintenance-A",
            json!({"source": ["aws.health"], "detail-type": ["AWS Health Event"]}),
            true,
        ),
        (
            "spoke-ForwardTerminateLifecycleActions-A",
            json!({"source": ["aws.autoscaling"], "detail-type": ["EC2 Instance-terminate Lifecycle Action"]}),
            false,
        ),
    ];
    for (name, pattern, enabled) in &rules {
        let state = if *enabled {
            aws_sdk_eventbridge::types::RuleState::Enabled
        } else {
            aws_sdk_eventbridge::types::RuleState::Disabled
        };
        events
            .put_rule()
            .name(*name)
            .event_pattern(pattern.to_string())
            .state(state)
            .send()
            .await
            .unwrap();
        events
            .put_targets()
            .rule(*name)
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("CellBus")
                    .arn(&bus)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }
    org.cloud.control("aws_calls", json!({"reset": true}));

    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("nodecycle");
    assert!(
        bin.exists(),
        "{} not built (cargo build -p ops)",
        bin.display()
    );
    let out = std::process::Command::new(bin)
        .args(["doctor", "--json"])
        .env_remove("AWS_PROFILE")
        .env_remove("NODECYCLE_STACK")
        .env("NODECYCLE_LOG", "warn")
        .envs(org.cloud.env_vars())
        .env("AWS_REGION", EAST)
        .env(
            "NODECYCLE_SERVED_ACCOUNTS",
            format!("{TEST},{PROD},{BROKEN}"),
        )
        .env(
            "NODECYCLE_MEMBER_ROLE",
            "arn:aws:iam::{account}:role/nodecycle-spoke",
        )
        .env("NODECYCLE_MEMBER_EXTERNAL_ID", EXTERNAL_ID)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let line = |check: &str, subject: &str| -> Value {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == check && c["subject"] == subject)
            .cloned()
            .unwrap_or_else(|| panic!("no {check} {subject}: {report:#}"))
    };
    // prod: forwarded to the cell's bus, but the lifecycle rule is disabled.
    let spot = line(
        "forwarding",
        "222222222222/us-east-1: EC2 Spot Instance Interruption Warning",
    );
    assert_eq!(spot["status"], "ok", "{spot}");
    let lifecycle = line(
        "forwarding",
        "222222222222/us-east-1: EC2 Instance-terminate Lifecycle Action",
    );
    assert_eq!(lifecycle["status"], "FAIL", "{lifecycle}");
    let fix = lifecycle["fix"].as_str().unwrap();
    assert!(
        fix.contains("enable-rule --name spoke-ForwardTerminateLifecycleActions-A --region us-east-1 (in account 222222222222)"),
        "{lifecycle}"
    );
    // prod's cluster: the spoke role's entry maps each function's group.
    for output in ["RotatorRoleArn", "InterruptionHandlerRoleArn", "OpsRoleArn"] {
        let entry = line(
            "accessEntry",
            &format!("222222222222/us-east-1/prod/{output}"),
        );
        assert_eq!(entry["status"], "ok", "{entry}");
    }
    // test: no forwarding rule at all; its cluster has no access entries (aws-auth only).
    let health = line("forwarding", "111111111111/us-east-1: AWS Health Event");
    assert_eq!(health["status"], "FAIL", "{health}");
    assert!(
        health["fix"]
            .as_str()
            .unwrap()
            .contains("deploy the spoke (deploy/spoke.yaml, the StackSet of docs/organisation.md) to account 111111111111 in us-east-1"),
        "{health}"
    );
    let test_entry = line("accessEntry", "111111111111/us-east-1/test/RotatorRoleArn");
    assert_eq!(test_entry["status"], "warn", "{test_entry}");
    assert_eq!(line("spoke", "333333333333/us-east-1")["status"], "FAIL");
    // Every read of a member's rules and access entries with that member's credentials.
    let calls = org.calls();
    let member_reads: Vec<&Value> = calls
        .iter()
        .filter(|c| {
            [
                "ListRules",
                "ListTargetsByRule",
                "ListAccessEntries",
                "DescribeAccessEntry",
            ]
            .contains(&c["operation"].as_str().unwrap_or_default())
        })
        .collect();
    assert!(
        member_reads
            .iter()
            .any(|c| c["operation"] == "ListTargetsByRule" && c["account"] == PROD),
        "{member_reads:?}"
    );
    assert!(
        member_reads
            .iter()
            .all(|c| c["account"] == PROD || c["account"] == TEST),
        "{member_reads:?}"
    );
}

/// A member pool's promotion alarms are read in its own account, through its spoke role: prod
/// us-east-1 waits for `prod-canary`, which is quiet in prod (the tooling account has an alarm
/// of that name in ALARM: read there, the promotion would never happen). The watcher and the
/// ops status read it in prod only.
#[tokio::test]
async fn a_members_promotion_alarms_are_read_in_its_own_account() {
    let org = org().await;
    let [test, _, _] = &POOLS;
    let with_alarm = format!(
        "{}  alarms: [prod-canary]\n",
        policy(&POOLS[1], Some(TEST_POOL))
    );
    org.cloud.control(
        "put_parameter",
        json!({"region": EAST, "name": format!("/nodecycle/pools/{PROD_EAST}"), "value": with_alarm}),
    );
    let alarm = |config: &aws_config::SdkConfig, state: aws_sdk_cloudwatch::types::StateValue| {
        let cw = aws_sdk_cloudwatch::Client::new(config);
        async move {
            cw.put_metric_alarm()
                .alarm_name("prod-canary")
                .namespace("Canary")
                .metric_name("Errors")
                .statistic(aws_sdk_cloudwatch::types::Statistic::Sum)
                .period(60)
                .evaluation_periods(1)
                .threshold(1.0)
                .comparison_operator(
                    aws_sdk_cloudwatch::types::ComparisonOperator::GreaterThanOrEqualToThreshold,
                )
                .send()
                .await
                .unwrap();
            cw.set_alarm_state()
                .alarm_name("prod-canary")
                .state_value(state)
                .state_reason("test")
                .send()
                .await
                .unwrap();
        }
    };
    use aws_sdk_cloudwatch::types::StateValue;
    alarm(&org.configs[&(PROD, EAST)], StateValue::Ok).await;
    alarm(&tooling(&org.cloud, EAST).await, StateValue::Alarm).await;
    org.cloud.control("aws_calls", json!({"reset": true}));

    // Simulated time after the alarms' last change (their timestamps are the wall clock's).
    let mut now = Utc::now() + TimeDelta::minutes(5);
    org.pass(now).await;
    org.publish_all(NEW);
    now += TimeDelta::minutes(5);
    org.roll(test, NEW, &image(NEW, EAST), &mut now, 60).await;
    let proven_at = org.record(TEST_POOL).await.ledger.last().unwrap().since;
    org.pass(proven_at + TimeDelta::minutes(61)).await;
    let record = org.record(PROD_EAST).await;
    assert_eq!(
        record.desired.as_ref().map(|a| a.id.clone()),
        Some(image(NEW, EAST)),
        "prod's alarm is quiet in prod: promoted ({:?})",
        record.promotion_wait
    );
    // The operator's view reads it in prod too.
    let status = org
        .east
        .ops
        .handle(
            &json!({"action": "status", "pool": PROD_EAST}),
            &Origin {
                request_id: "s-1".into(),
                caller: Some(format!("arn:aws:iam::{TOOLING}:user/alice")),
            },
            proven_at + TimeDelta::minutes(62),
        )
        .await
        .unwrap();
    assert!(!status.is_null());
    let reads: Vec<Value> = org
        .calls()
        .into_iter()
        .filter(|c| c["service"] == "monitoring")
        .collect();
    assert!(!reads.is_empty());
    assert!(
        reads
            .iter()
            .all(|c| c["account"] == PROD && c["region"] == EAST),
        "every alarm read in prod us-east-1: {reads:?}"
    );
}
