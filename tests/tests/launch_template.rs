//! The Auto Scaling adapter's `set_image` against moto: what it changes depends on how the group
//! names its launch template (`$Latest`, `$Default`, a pinned version, a mixed instances policy),
//! and repeating it changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

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
