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

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_config::sts::AssumeRoleProvider;
use aws_credential_types::provider::SharedCredentialsProvider;
use chrono::{DateTime, TimeDelta, Utc};
use nodecycle::aws::dynamodb::Table;
use nodecycle::aws::members::AwsMembers;
use nodecycle::event::served::Served;
use nodecycle::handlers::ami_watcher::AmiWatcher;
use nodecycle::handlers::interruption::InterruptionHandler;
use nodecycle::handlers::ops::{Invocation, OpsHandler};
use nodecycle::handlers::rotator::{RotatorHandler, Settings};
use nodecycle::members::MemberConfig;
use nodecycle::state::PoolRecord;
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
            .handle(&json!({}), now, deadline())
            .await
            .unwrap();
        self.west
            .rotator
            .handle(&json!({}), now, deadline())
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
    for pool in &POOLS {
        publish(
            &org.cloud,
            pool.account,
            pool.region,
            NEW,
            &image(NEW, pool.region),
        );
    }
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
    for pool in &POOLS {
        publish(
            &org.cloud,
            pool.account,
            pool.region,
            BAD,
            &image(BAD, pool.region),
        );
    }
    now += TimeDelta::minutes(5);
    org.roll(test, BAD, &image(BAD, EAST), &mut now, 60).await;
    let answer = org
        .east
        .ops
        .handle(
            &json!({"action": "quarantine", "release": BAD, "reason": "kernel panics in test"}),
            &Invocation {
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
                let policies = c["operation"] == "GetParametersByPath";
                assert_eq!(account == TOOLING, policies, "{c}");
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
            Utc::now(),
            Instant::now() + Duration::from_secs(60),
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
            Utc::now(),
            Instant::now() + Duration::from_secs(60),
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
            Utc::now(),
            Instant::now() + Duration::from_secs(60),
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
