//! Shared fixtures for the AMI tests: public EKS AMIs published the way AWS publishes them
//! (an image owned by Amazon plus the SSM parameter pointing at it), policies, adapters.

#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod pool;
pub mod stages;

use std::sync::Arc;

use nodecycle::ami::resolve::Resolver;
use nodecycle::aws::{
    Clients, dynamodb::Table, ec2::Ec2, eks::Eks, nodegroup::NodeGroups, ssm::Ssm,
};
use nodecycle::handlers::Invocation;
use nodecycle::policy::{self, Policy};
use nodecycle_tests::{FakeCloud, ImageFixture};

/// Registers an Amazon-owned image and points `path` at it; returns the image id.
pub fn publish(cloud: &FakeCloud, path: &str, name: &str, arch: &str, created: &str) -> String {
    let id = cloud.register_image(
        ImageFixture::new(name)
            .architecture(arch)
            .owner("amazon")
            .created(created),
    );
    cloud.put_parameter(path, &id);
    id
}

/// Publishes AL2023 for every arch/variant pair under `k8s`, both as `recommended` and pinned
/// `release`; returns `(arch, variant, id)` triples.
pub fn publish_al2023(
    cloud: &FakeCloud,
    k8s: &str,
    release: &str,
    created: &str,
) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (arch, variant) in [
        ("x86_64", "standard"),
        ("x86_64", "nvidia"),
        ("x86_64", "neuron"),
        ("arm64", "standard"),
        ("arm64", "nvidia"),
    ] {
        let name = format!("amazon-eks-node-al2023-{arch}-{variant}-{k8s}-{release}");
        let base =
            format!("/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{arch}/{variant}");
        let id = publish(
            cloud,
            &format!("{base}/{name}/image_id"),
            &name,
            arch,
            created,
        );
        cloud.put_parameter(&format!("{base}/recommended/image_id"), &id);
        out.push((arch.to_string(), variant.to_string(), id));
    }
    out
}

/// The id published for `arch`/`variant` in [`publish_al2023`]'s result.
pub fn id_of(published: &[(String, String, String)], arch: &str, variant: &str) -> String {
    published
        .iter()
        .find(|(a, v, _)| a == arch && v == variant)
        .map(|(_, _, id)| id.clone())
        .unwrap()
}

/// Parses a policy that must be valid.
pub fn policy(yaml: &str) -> Policy {
    let parsed = policy::parse(yaml);
    parsed
        .policy
        .unwrap_or_else(|| panic!("invalid test policy: {:?}", parsed.problems))
}

/// A minimal policy around some terms (YAML list items, indented by two spaces).
pub fn pool(arch: Option<&str>, variant: &str, terms: &str) -> Policy {
    let arch = arch
        .map(|a| format!("architecture: {a}\n"))
        .unwrap_or_default();
    policy(&format!(
        "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\n{arch}variant: {variant}\namiSelectorTerms:\n{terms}"
    ))
}

/// Real adapters over the fake cloud.
pub struct Adapters {
    pub ssm: Ssm,
    pub ec2: Ec2,
    pub eks: Eks,
    pub groups: NodeGroups,
    pub clients: Clients,
    /// Shared by `groups` and the rotator's Auto Scaling adapter, as the Lambda's ports share it.
    pub seen: nodecycle::aws::autoscaling::SeenGroups,
}

impl Adapters {
    pub async fn new(cloud: &FakeCloud) -> Adapters {
        Adapters::from_config(&cloud.sdk_config().await)
    }

    /// The adapters over an SDK configuration of the caller's (e.g. the Lambda's retries).
    pub fn from_config(config: &aws_config::SdkConfig) -> Adapters {
        let clients = Clients::new(config);
        let seen = nodecycle::aws::autoscaling::SeenGroups::default();
        Adapters {
            ssm: Ssm::new(clients.ssm.clone()),
            ec2: Ec2::new(clients.ec2.clone()),
            eks: Eks::new(clients.eks.clone()),
            groups: NodeGroups::new(
                clients.autoscaling.clone(),
                clients.ec2.clone(),
                clients.eks.clone(),
            )
            .with_seen(seen.clone()),
            clients,
            seen,
        }
    }

    pub fn resolver(&self) -> Resolver<'_> {
        Resolver::new(&self.ssm, &self.ec2, &self.eks, &self.groups)
    }

    /// A self-managed node group: launch template `name` launching `image` as `instance_type`,
    /// and an Auto Scaling group `name` of `desired` instances (at most `max`) in us-east-2a,
    /// tagged `eks:cluster-name=<cluster>` when given.
    pub async fn create_group(
        &self,
        name: &str,
        image: &str,
        instance_type: &str,
        desired: i32,
        max: i32,
        cluster: Option<&str>,
    ) {
        self.create_group_in(name, image, instance_type, desired, max, cluster, None)
            .await;
    }

    /// A VPC with `vpc_cidr` and one subnet with `subnet_cidr` in us-east-2a: its id. The
    /// default subnet holds about 4,000 instances; large fleets get their own.
    pub async fn create_subnet(&self, vpc_cidr: &str, subnet_cidr: &str) -> String {
        let vpc = self
            .clients
            .ec2
            .create_vpc()
            .cidr_block(vpc_cidr)
            .send()
            .await
            .expect("CreateVpc");
        let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).expect("vpc id");
        let subnet = self
            .clients
            .ec2
            .create_subnet()
            .vpc_id(vpc_id)
            .cidr_block(subnet_cidr)
            .availability_zone("us-east-2a")
            .send()
            .await
            .expect("CreateSubnet");
        subnet
            .subnet()
            .and_then(|s| s.subnet_id())
            .expect("subnet id")
            .to_string()
    }

    /// [`Self::create_group`] launching into `subnet` (else the default subnet of us-east-2a).
    #[allow(clippy::too_many_arguments)]
    pub async fn create_group_in(
        &self,
        name: &str,
        image: &str,
        instance_type: &str,
        desired: i32,
        max: i32,
        cluster: Option<&str>,
        subnet: Option<&str>,
    ) {
        let lt = aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
            .image_id(image)
            .instance_type(aws_sdk_ec2::types::InstanceType::from(instance_type))
            .build();
        self.clients
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(lt)
            .tag_specifications(opted_in_template_tags(cluster))
            .send()
            .await
            .expect("CreateLaunchTemplate");
        let mut group = self
            .clients
            .autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .launch_template(
                aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                    .launch_template_name(name)
                    .version("$Latest")
                    .build(),
            )
            .min_size(0)
            .max_size(max)
            .desired_capacity(desired);
        group = match subnet {
            Some(subnet) => group.vpc_zone_identifier(subnet),
            None => group.availability_zones("us-east-2a"),
        };
        if let Some(cluster) = cluster {
            group = group.tags(
                aws_sdk_autoscaling::types::Tag::builder()
                    .key("eks:cluster-name")
                    .value(cluster)
                    .propagate_at_launch(true)
                    .build(),
            );
        }
        group.send().await.expect("CreateAutoScalingGroup");
    }

    /// Pool policies from SSM under `/nodecycle/pools/`.
    pub fn policies(&self) -> Arc<nodecycle::aws::ssm::SsmPolicies> {
        Arc::new(nodecycle::aws::ssm::SsmPolicies::new(
            self.ssm.clone(),
            "/nodecycle/pools/",
        ))
    }

    /// Transitions recorded in `table`, their events put on the fake cloud's default bus.
    pub fn announce(&self, table: Arc<Table>) -> nodecycle::announce::Announcer {
        nodecycle::announce::Announcer::new(
            table,
            Arc::new(nodecycle::aws::events_out::EventBridge::new(
                self.clients.events.clone(),
            )),
        )
    }

    /// What every handler over these adapters holds: policies from `policies`, state in
    /// `table`, events out through EventBridge, no members.
    pub fn cell(
        &self,
        policies: Arc<dyn nodecycle::policy::source::PolicySource>,
        table: Arc<Table>,
    ) -> nodecycle::handlers::CellPorts {
        nodecycle::handlers::CellPorts {
            policies,
            state: nodecycle::state::Repository::new(table.clone()),
            announce: self.announce(table),
            members: Arc::new(nodecycle::members::OwnOnly),
            status: Arc::new(Ssm::new(self.clients.ssm.clone())),
        }
    }

    /// The ami-watcher over these adapters: policies from `policies`, state in `table`.
    pub fn watcher(
        &self,
        policies: Arc<dyn nodecycle::policy::source::PolicySource>,
        table: Arc<Table>,
    ) -> nodecycle::handlers::ami_watcher::AmiWatcher {
        nodecycle::handlers::ami_watcher::AmiWatcher {
            cell: self.cell(policies, table),
            ports: nodecycle::handlers::ami_watcher::WatcherPorts {
                parameters: Arc::new(self.ssm.clone()),
                images: Arc::new(self.ec2.clone()),
                clusters: Arc::new(self.eks.clone()),
                node_groups: Arc::new(self.groups.clone()),
                alarms: Arc::new(nodecycle::aws::cloudwatch::CloudWatch::new(
                    self.clients.cloudwatch.clone(),
                )),
            },
            metrics: Arc::new(nodecycle::metrics::NoMetrics),
            deprecation_horizon_days: nodecycle::deprecation::DEFAULT_HORIZON_DAYS,
        }
    }

    /// The rotator over these adapters: policies from `policies`, state in `table`, Kubernetes
    /// through EKS (DescribeCluster + token) as in the Lambda, drain steps of 5 s.
    pub async fn rotator(
        &self,
        cloud: &FakeCloud,
        policies: Arc<dyn nodecycle::policy::source::PolicySource>,
        table: Arc<Table>,
    ) -> nodecycle::handlers::rotator::RotatorHandler {
        use nodecycle::aws::{autoscaling::AutoScaling, eks_nodegroups::ManagedNodeGroups};
        use nodecycle::handlers::rotator::{EksConnector, RotatorHandler, RotatorPorts, Settings};
        RotatorHandler {
            cell: self.cell(policies, table),
            ports: RotatorPorts {
                groups: Arc::new(
                    AutoScaling::new(self.clients.autoscaling.clone(), self.clients.ec2.clone())
                        .with_seen(self.seen.clone()),
                ),
                managed: Arc::new(ManagedNodeGroups::new(
                    self.clients.eks.clone(),
                    self.clients.ec2.clone(),
                )),
                parameters: Arc::new(Ssm::new(self.clients.ssm.clone())),
                node_groups: Arc::new(self.groups.clone()),
                kube: Arc::new(EksConnector::new(cloud.sdk_config().await)),
                instances: Arc::new(nodecycle::aws::instances::Ec2Instances::new(
                    self.clients.ec2.clone(),
                )),
            },
            settings: Settings {
                drain_step: std::time::Duration::from_secs(5),
                ..Settings::default()
            },
            metrics: Arc::new(nodecycle::metrics::NoMetrics),
        }
    }

    /// The ops handler over `rotator`'s ports, with DescribeImages and CloudWatch over these adapters.
    pub fn ops(
        &self,
        rotator: nodecycle::handlers::rotator::RotatorHandler,
    ) -> nodecycle::handlers::ops::OpsHandler {
        nodecycle::handlers::ops::OpsHandler {
            cell: rotator.cell,
            ports: nodecycle::handlers::ops::OpsPorts {
                groups: rotator.ports.groups,
                managed: rotator.ports.managed,
                kube: rotator.ports.kube,
                images: Arc::new(self.ec2.clone()),
                alarms: Arc::new(nodecycle::aws::cloudwatch::CloudWatch::new(
                    self.clients.cloudwatch.clone(),
                )),
            },
            node_group_wave: rotator.settings.node_group_wave,
        }
    }

    /// Gives group `asg` the instance lifecycle policy `TerminateHookAbandon: retain` (as
    /// docs/operations.md says): an abandoned terminate action leaves its instance
    /// `Terminating:Retained`.
    pub async fn retain_abandoned(&self, asg: &str) {
        use aws_sdk_autoscaling::types::{
            InstanceLifecyclePolicy, RetentionAction, RetentionTriggers,
        };
        let triggers = RetentionTriggers::builder()
            .terminate_hook_abandon(RetentionAction::Retain)
            .build();
        self.clients
            .autoscaling
            .update_auto_scaling_group()
            .auto_scaling_group_name(asg)
            .instance_lifecycle_policy(
                InstanceLifecyclePolicy::builder()
                    .retention_triggers(triggers)
                    .build(),
            )
            .send()
            .await
            .expect("UpdateAutoScalingGroup");
    }

    /// The instances of Auto Scaling group `asg` with the image each runs, by instance id.
    pub async fn group_instances(&self, asg: &str) -> Vec<(String, String)> {
        let out = self
            .clients
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(asg)
            .send()
            .await
            .unwrap();
        let ids: Vec<String> = out.auto_scaling_groups()[0]
            .instances()
            .iter()
            .map(|i| i.instance_id().unwrap().to_string())
            .collect();
        let out = self
            .clients
            .ec2
            .describe_instances()
            .set_instance_ids(Some(ids))
            .send()
            .await
            .unwrap();
        let mut v: Vec<(String, String)> = out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .map(|i| {
                (
                    i.instance_id().unwrap().to_string(),
                    i.image_id().unwrap().to_string(),
                )
            })
            .collect();
        v.sort();
        v
    }

    /// The images the instances of `asg` run, by instance id.
    pub async fn group_images(&self, asg: &str) -> Vec<String> {
        self.group_instances(asg)
            .await
            .into_iter()
            .map(|(_, image)| image)
            .collect()
    }

    /// A fresh state table.
    pub async fn table(&self, name: &str) -> Arc<Table> {
        let t = Table::new(self.clients.dynamodb.clone(), name);
        t.create_if_missing().await.expect("create table");
        Arc::new(t)
    }
}

/// Every rotation record of `pool` in `table`.
pub async fn rotations_of(
    table: &nodecycle::aws::dynamodb::Table,
    pool: &str,
) -> Vec<nodecycle::rotation::Rotation> {
    use nodecycle::state::Store;
    table
        .query(&format!("POOL#{pool}"), "ROT#")
        .await
        .unwrap()
        .into_iter()
        .map(|(_, v)| serde_json::from_value(v.value).unwrap())
        .collect()
}

pub fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// A metric sink that keeps every EMF document a handler emits.
#[derive(Default)]
pub struct CapturedMetrics(pub std::sync::Mutex<Vec<serde_json::Value>>);

impl nodecycle::metrics::MetricSink for CapturedMetrics {
    fn emit(&self, records: &[nodecycle::metrics::Record], at: chrono::DateTime<chrono::Utc>) {
        let mut docs = self.0.lock().unwrap();
        docs.extend(records.iter().map(|r| nodecycle::metrics::emf(r, at)));
    }
}

impl CapturedMetrics {
    /// The sum of metric `name` over the documents of `pool` (dimension `Pool`, which only a
    /// pool with `metrics.perPool: true` has), without a `Reason` dimension.
    pub fn sum(&self, pool: &str, name: &str) -> f64 {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|d| d["Pool"] == pool && d.get("Reason").is_none())
            .filter_map(|d| d[name].as_f64())
            .sum()
    }

    /// The sum of the cell metric `name` (no dimension) over the documents.
    pub fn cell_sum(&self, name: &str) -> f64 {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|d| d.get("Pool").is_none() && d.get("Reason").is_none())
            .filter_map(|d| d[name].as_f64())
            .sum()
    }
}

/// Operator requests through the ops handler as alice, each invocation with its own request id.
pub struct Operator {
    handler: nodecycle::handlers::ops::OpsHandler,
    invocations: std::sync::atomic::AtomicU32,
}

impl Operator {
    pub fn new(handler: nodecycle::handlers::ops::OpsHandler) -> Operator {
        Operator {
            handler,
            invocations: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The handler's answer to `request` at `now`.
    pub async fn request(
        &self,
        request: serde_json::Value,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<serde_json::Value, nodecycle::handlers::HandlerError> {
        let n = self
            .invocations
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let inv = nodecycle::handlers::ops::Origin {
            request_id: format!("req-{n}"),
            caller: Some("arn:aws:iam::123456789012:user/alice".into()),
        };
        self.handler.handle(&request, &inv, now).await
    }

    /// [`Self::request`] that must succeed.
    pub async fn ok(
        &self,
        request: serde_json::Value,
        now: chrono::DateTime<chrono::Utc>,
    ) -> serde_json::Value {
        match self.request(request.clone(), now).await {
            Ok(v) => v,
            Err(e) => panic!("{request} failed: {e}"),
        }
    }
}

/// A rule on the default bus sending every `nodecycle` event to SQS queue `queue` (created),
/// read back with [`delivered`]: what a consumer of the events would see.
pub async fn capture(cloud: &FakeCloud, queue: &str) {
    let arn = cloud.control("sqs_create_queue", serde_json::json!({"name": queue}))["arn"]
        .as_str()
        .unwrap()
        .to_string();
    let events = aws_sdk_eventbridge::Client::new(&cloud.sdk_config().await);
    let rule = format!("nodecycle-to-{queue}");
    events
        .put_rule()
        .name(&rule)
        .event_pattern(r#"{"source":["nodecycle"]}"#)
        .send()
        .await
        .unwrap();
    events
        .put_targets()
        .rule(&rule)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("queue")
                .arn(arn)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
}

/// The events delivered to `queue` since the last call (EventBridge envelopes).
pub fn delivered(cloud: &FakeCloud, queue: &str) -> Vec<serde_json::Value> {
    cloud.control("sqs_drain", serde_json::json!({"name": queue}))["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_json::from_str(m.as_str().unwrap()).unwrap())
        .collect()
}

/// The tags of a launch template its owner opted in for nodecycle to version
/// (`nodecycle.dev/managed=true`, [`nodecycle::opt_in`]), with the cluster tag the stack's IAM
/// conditions require when `cluster` is given: what every fixture template carries, as the
/// docs tell users to tag theirs.
pub fn opted_in_template_tags(cluster: Option<&str>) -> aws_sdk_ec2::types::TagSpecification {
    let tag = |k: &str, v: &str| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build();
    let mut spec = aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(aws_sdk_ec2::types::ResourceType::LaunchTemplate)
        .tags(tag(
            nodecycle::opt_in::MANAGED_TAG,
            nodecycle::opt_in::MANAGED_VALUE,
        ));
    if let Some(c) = cluster {
        spec = spec.tags(tag("eks:cluster-name", c));
    }
    spec.build()
}

/// A rotator pass over every pool at `now` (two minutes to run), then time for the stand-in to
/// register nodes for the instances it launched.
pub async fn rotator_pass(
    rotator: &nodecycle::handlers::rotator::RotatorHandler,
    now: chrono::DateTime<chrono::Utc>,
) -> serde_json::Value {
    let report = rotator
        .handle(
            &serde_json::json!({}),
            Invocation::at(
                now,
                std::time::Instant::now() + std::time::Duration::from_secs(120),
            ),
        )
        .await
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    report
}

/// The template tools' venv (cfn-lint, aws-sam-translator, the SAM CLI): `$NODECYCLE_LINT_VENV`,
/// default `${NODECYCLE_VENV:-~/.cache/nodecycle/venv}-lint`. Panics, naming the script that
/// installs it, when it is missing (scripts/test.sh runs scripts/lint-template.sh first).
pub fn lint_venv() -> std::path::PathBuf {
    let venv = std::env::var("NODECYCLE_LINT_VENV")
        .ok()
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let base = std::env::var("NODECYCLE_VENV")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| {
                    format!("{}/.cache/nodecycle/venv", std::env::var("HOME").unwrap())
                });
            std::path::PathBuf::from(format!("{base}-lint"))
        });
    assert!(
        venv.join("bin/python").exists(),
        "{} is missing: run scripts/lint-template.sh once (it installs aws-sam-translator and the SAM CLI there)",
        venv.display()
    );
    venv
}

/// `nodecycle doctor`'s checks run in process over `adapters` (with the Kubernetes access the
/// functions have), the stack's outputs and rules read from `stack` (a memory world: an
/// empty one has neither), for cluster `prod`.
pub async fn doctor_checks(
    cloud: &FakeCloud,
    adapters: &Adapters,
    stack: &nodecycle::doctor::memory::World,
) -> Vec<nodecycle::doctor::Check> {
    use nodecycle::doctor::run::{Options, Ports, diagnose};
    let inventory = nodecycle::aws::inventory::Inventory::new(adapters.clients.clone());
    let rbac = nodecycle::kube::rbac::EksRbac::new(cloud.sdk_config().await);
    let ports = Ports {
        stack,
        table: &inventory,
        policies: &adapters.ssm,
        groups: &inventory,
        clusters: &inventory,
        rbac: &rbac,
        pods: &rbac,
        rules: stack,
        node_types: &adapters.groups,
        findings: &inventory,
    };
    let options = Options {
        stack: "nodecycle".into(),
        clusters: vec!["prod".into()],
        fallback_prefix: "/nodecycle/pools/".into(),
    };
    diagnose(ports, &options).await.checks
}
