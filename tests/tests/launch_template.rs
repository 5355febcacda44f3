//! The Auto Scaling adapter's `set_image` against moto: what it changes depends on how the group
//! names its launch template (`$Latest`, `$Default`, a pinned version, a mixed instances policy),
//! and repeating it changes nothing. It writes only templates their owner opted in
//! (`nodecycle.dev/managed=true`, never one EKS created), and points a pinned group at a new
//! version only when the stack allows UpdateAutoScalingGroup; refusals change nothing and say
//! what to do.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use aws_sdk_autoscaling::types::{
    InstancesDistribution, LaunchTemplate, LaunchTemplateOverrides, LaunchTemplateSpecification,
    MixedInstancesPolicy,
};
use nodecycle::aws::autoscaling::AutoScaling;
use nodecycle::fleet::GroupOps;
use nodecycle_tests::{FakeCloud, ImageFixture};
use support::*;

struct Fixture {
    _cloud: FakeCloud,
    a: Adapters,
    asg: AutoScaling,
    old: String,
    new: String,
}

async fn fixture() -> Fixture {
    let cloud = FakeCloud::start();
    let old = cloud.register_image(ImageFixture::new("golden-1").owner("self"));
    let new = cloud.register_image(ImageFixture::new("golden-2").owner("self"));
    let a = Adapters::new(&cloud).await;
    let asg = AutoScaling::new(a.clients.autoscaling.clone(), a.clients.ec2.clone());
    Fixture {
        _cloud: cloud,
        a,
        asg,
        old,
        new,
    }
}

impl Fixture {
    async fn template(&self, name: &str) -> String {
        self.template_tagged(name, support::opted_in_template_tags(Some("prod")))
            .await
    }

    async fn template_tagged(
        &self,
        name: &str,
        tags: aws_sdk_ec2::types::TagSpecification,
    ) -> String {
        let data = aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
            .image_id(&self.old)
            .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
            .build();
        self.a
            .clients
            .ec2
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(data)
            .tag_specifications(tags)
            .send()
            .await
            .unwrap()
            .launch_template()
            .unwrap()
            .launch_template_id()
            .unwrap()
            .to_string()
    }

    fn spec(id: &str, version: &str) -> LaunchTemplateSpecification {
        LaunchTemplateSpecification::builder()
            .launch_template_id(id)
            .version(version)
            .build()
    }

    async fn group(
        &self,
        name: &str,
        spec: Option<LaunchTemplateSpecification>,
        mip: Option<MixedInstancesPolicy>,
    ) {
        self.a
            .clients
            .autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .set_launch_template(spec)
            .set_mixed_instances_policy(mip)
            .min_size(0)
            .max_size(4)
            .desired_capacity(1)
            .availability_zones("us-east-2a")
            .send()
            .await
            .unwrap();
    }

    async fn describe(&self, name: &str) -> aws_sdk_autoscaling::types::AutoScalingGroup {
        self.a
            .clients
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(name)
            .send()
            .await
            .unwrap()
            .auto_scaling_groups()[0]
            .clone()
    }

    /// (version count, default version number) of template `id`.
    async fn versions(&self, id: &str) -> (usize, i64) {
        let out = self
            .a
            .clients
            .ec2
            .describe_launch_template_versions()
            .launch_template_id(id)
            .send()
            .await
            .unwrap();
        let versions = out.launch_template_versions();
        let default = versions
            .iter()
            .find(|v| v.default_version() == Some(true))
            .and_then(|v| v.version_number())
            .unwrap();
        (versions.len(), default)
    }

    /// The image the group launches, as the rotator sees it.
    async fn launches(&self, name: &str) -> Option<String> {
        self.asg
            .describe(name)
            .await
            .unwrap()
            .0
            .launch_template_image
    }
}

#[tokio::test]
async fn latest_gets_a_new_version_and_the_group_is_left_alone() {
    let f = fixture().await;
    let id = f.template("lt-latest").await;
    f.group("g-latest", Some(Fixture::spec(&id, "$Latest")), None)
        .await;
    assert_eq!(f.asg.set_image("g-latest", &f.new).await.unwrap(), "2");
    let g = f.describe("g-latest").await;
    assert_eq!(g.launch_template().unwrap().version(), Some("$Latest"));
    assert_eq!(
        f.launches("g-latest").await.as_deref(),
        Some(f.new.as_str())
    );
    // Repeating it creates nothing.
    assert_eq!(f.asg.set_image("g-latest", &f.new).await.unwrap(), "2");
    assert_eq!(f.versions(&id).await.0, 2);
}

#[tokio::test]
async fn default_moves_the_templates_default_version() {
    let f = fixture().await;
    let id = f.template("lt-default").await;
    f.group("g-default", Some(Fixture::spec(&id, "$Default")), None)
        .await;
    assert_eq!(f.asg.set_image("g-default", &f.new).await.unwrap(), "2");
    assert_eq!(f.versions(&id).await, (2, 2));
    let g = f.describe("g-default").await;
    assert_eq!(g.launch_template().unwrap().version(), Some("$Default"));
    assert_eq!(
        f.launches("g-default").await.as_deref(),
        Some(f.new.as_str())
    );
    assert_eq!(f.asg.set_image("g-default", &f.new).await.unwrap(), "2");
    assert_eq!(f.versions(&id).await, (2, 2));
}

#[tokio::test]
async fn a_pinned_mixed_instances_policy_is_repointed_keeping_its_overrides() {
    let f = fixture().await;
    let id = f.template("lt-mixed").await;
    let overrides = vec![
        LaunchTemplateOverrides::builder()
            .instance_type("m5.large")
            .build(),
        LaunchTemplateOverrides::builder()
            .instance_type("m6i.large")
            .build(),
    ];
    let mip = MixedInstancesPolicy::builder()
        .launch_template(
            LaunchTemplate::builder()
                .launch_template_specification(Fixture::spec(&id, "1"))
                .set_overrides(Some(overrides))
                .build(),
        )
        .instances_distribution(
            InstancesDistribution::builder()
                .on_demand_base_capacity(0)
                .on_demand_percentage_above_base_capacity(0)
                .build(),
        )
        .build();
    f.group("g-mixed", None, Some(mip)).await;
    assert_eq!(f.asg.set_image("g-mixed", &f.new).await.unwrap(), "2");
    let g = f.describe("g-mixed").await;
    assert!(
        g.launch_template().is_none(),
        "not turned into a plain launch template group"
    );
    let lt = g
        .mixed_instances_policy()
        .unwrap()
        .launch_template()
        .unwrap();
    assert_eq!(
        lt.launch_template_specification().unwrap().version(),
        Some("2")
    );
    let types: Vec<&str> = lt
        .overrides()
        .iter()
        .filter_map(|o| o.instance_type())
        .collect();
    assert_eq!(types, ["m5.large", "m6i.large"]);
    assert_eq!(f.launches("g-mixed").await.as_deref(), Some(f.new.as_str()));
    // The default version is not touched for a pinned group.
    assert_eq!(f.versions(&id).await, (2, 1));
}

#[tokio::test]
async fn a_pinned_plain_group_is_repointed() {
    let f = fixture().await;
    let id = f.template("lt-pinned").await;
    f.group("g-pinned", Some(Fixture::spec(&id, "1")), None)
        .await;
    assert_eq!(f.asg.set_image("g-pinned", &f.new).await.unwrap(), "2");
    let g = f.describe("g-pinned").await;
    assert_eq!(g.launch_template().unwrap().version(), Some("2"));
    assert_eq!(f.asg.set_image("g-pinned", &f.new).await.unwrap(), "2");
    assert_eq!(f.versions(&id).await.0, 2);
    let _ = &f.old;
}

fn launch_template_tags(pairs: &[(&str, &str)]) -> aws_sdk_ec2::types::TagSpecification {
    let mut spec = aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(aws_sdk_ec2::types::ResourceType::LaunchTemplate);
    for (k, v) in pairs {
        spec = spec.tags(aws_sdk_ec2::types::Tag::builder().key(*k).value(*v).build());
    }
    spec.build()
}

#[tokio::test]
async fn a_template_not_opted_in_is_never_written() {
    let f = fixture().await;
    for (name, tags) in [
        // The cluster tag alone (what earlier releases asked for).
        ("lt-cluster-only", vec![("eks:cluster-name", "prod")]),
        (
            "lt-not-true",
            vec![
                ("eks:cluster-name", "prod"),
                ("nodecycle.dev/managed", "yes"),
            ],
        ),
        // A template EKS created for a managed node group, the owner's tags copied into it.
        (
            "lt-eks",
            vec![
                ("eks:cluster-name", "prod"),
                ("nodecycle.dev/managed", "true"),
                ("eks:nodegroup-name", "golden"),
            ],
        ),
    ] {
        let id = f.template_tagged(name, launch_template_tags(&tags)).await;
        for version in ["$Latest", "$Default", "1"] {
            let group = format!("g-{name}-{}", version.trim_start_matches('$'));
            f.group(&group, Some(Fixture::spec(&id, version)), None)
                .await;
            let e = f.asg.set_image(&group, &f.new).await.unwrap_err();
            assert_eq!(e.kind, nodecycle::port::ErrorKind::AccessDenied, "{e}");
            if name == "lt-eks" {
                assert!(
                    e.message
                        .contains("created by EKS for managed node group golden"),
                    "{e}"
                );
            } else {
                assert_eq!(
                    e.message,
                    format!(
                        "launch template {id} lacks tag nodecycle.dev/managed=true; add it to let \
                         nodecycle write versions"
                    )
                );
            }
            // Nothing written: no version, the default and the group as they were.
            assert_eq!(f.versions(&id).await, (1, 1), "{name} {version}");
            let g = f.describe(&group).await;
            assert_eq!(g.launch_template().unwrap().version(), Some(version));
        }
    }
    // The owner opts in: the same template is versioned.
    let id = f
        .template_tagged(
            "lt-opted-in",
            launch_template_tags(&[("nodecycle.dev/managed", "true")]),
        )
        .await;
    f.group("g-opted-in", Some(Fixture::spec(&id, "$Latest")), None)
        .await;
    assert_eq!(f.asg.set_image("g-opted-in", &f.new).await.unwrap(), "2");
}

#[tokio::test]
async fn a_pinned_group_without_group_updates_is_refused_before_any_write() {
    let f = fixture().await;
    let asg = f.asg.clone().with_group_updates(false);
    let id = f.template("lt-pinned-off").await;
    f.group("g-pinned-off", Some(Fixture::spec(&id, "1")), None)
        .await;
    let e = asg.set_image("g-pinned-off", &f.new).await.unwrap_err();
    assert_eq!(e.kind, nodecycle::port::ErrorKind::AccessDenied, "{e}");
    assert_eq!(e.operation, "autoscaling:UpdateAutoScalingGroup");
    assert!(e.message.contains("AutoScalingGroupUpdates=Enabled"), "{e}");
    assert!(e.message.contains("pinned version 1"), "{e}");
    // No version a group is never pointed at (it would be created again every pass).
    assert_eq!(f.versions(&id).await, (1, 1));
    assert_eq!(
        f.describe("g-pinned-off")
            .await
            .launch_template()
            .unwrap()
            .version(),
        Some("1")
    );
    // $Latest and $Default need no group update: they work with updates disabled.
    let latest = f.template("lt-latest-off").await;
    f.group(
        "g-latest-off",
        Some(Fixture::spec(&latest, "$Latest")),
        None,
    )
    .await;
    assert_eq!(asg.set_image("g-latest-off", &f.new).await.unwrap(), "2");
    // A pinned group whose version already launches the image needs nothing either.
    assert_eq!(f.asg.set_image("g-pinned-off", &f.new).await.unwrap(), "2");
    assert_eq!(asg.set_image("g-pinned-off", &f.new).await.unwrap(), "2");
}

#[tokio::test]
async fn a_denied_group_update_names_the_parameter() {
    let f = fixture().await;
    let id = f.template("lt-denied").await;
    f.group("g-denied", Some(Fixture::spec(&id, "1")), None)
        .await;
    // The role lacks the grant (the stack deployed with AutoScalingGroupUpdates=Disabled while
    // the function was told Enabled, or a boundary denies it).
    f._cloud.faults(
        nodecycle_tests::Faults::new().aws(
            nodecycle_tests::AwsFaults::new(1.0)
                .kinds(&[nodecycle_tests::AwsFault::AccessDenied])
                .operations(&["autoscaling:UpdateAutoScalingGroup"]),
        ),
    );
    let e = f.asg.set_image("g-denied", &f.new).await.unwrap_err();
    assert_eq!(e.kind, nodecycle::port::ErrorKind::AccessDenied, "{e}");
    assert_eq!(e.operation, "autoscaling:UpdateAutoScalingGroup");
    assert!(
        e.message
            .starts_with(&format!("pointing group g-denied at version 2 of {id}")),
        "{e}"
    );
    assert!(
        e.message.contains("which the rotator's role was denied"),
        "{e}"
    );
    assert!(e.message.contains("AutoScalingGroupUpdates=Enabled"), "{e}");
}
