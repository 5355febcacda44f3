//! Smoke test of the fake cloud: fixtures seeded through the control endpoint
//! come back through the real AWS SDK (SSM, EC2, EKS) exactly as real AWS
//! would return them.

// Test code: helpers outside #[test] fns panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use aws_sdk_ec2::types::Filter;
use nodecycle_tests::{FakeCloud, ImageFixture};

const PARAM: &str = "/aws/service/eks/optimized-ami/1.30/amazon-linux-2/recommended/image_id";

fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

async fn image_names(
    req: aws_sdk_ec2::operation::describe_images::builders::DescribeImagesFluentBuilder,
) -> Vec<String> {
    let out = req.send().await.expect("DescribeImages");
    let mut names: Vec<String> = out
        .images()
        .iter()
        .map(|i| i.name().unwrap_or_default().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn ssm_parameter_under_aws_service_is_readable() {
    let cloud = FakeCloud::start();
    eprintln!("fake cloud ready in {:?}", cloud.startup_time());
    assert_eq!(cloud.put_parameter(PARAM, "ami-0aaaaaaaaaaaaaaa1"), 1);
    let ssm = aws_sdk_ssm::Client::new(&cloud.sdk_config().await);
    let got = ssm
        .get_parameter()
        .name(PARAM)
        .send()
        .await
        .expect("GetParameter");
    let p = got.parameter().expect("parameter");
    assert_eq!(p.value(), Some("ami-0aaaaaaaaaaaaaaa1"));
    assert_eq!(p.version(), 1);

    // Overwrite bumps the version, like a new AMI release.
    assert_eq!(cloud.put_parameter(PARAM, "ami-0aaaaaaaaaaaaaaa2"), 2);
    let got = ssm
        .get_parameter()
        .name(PARAM)
        .send()
        .await
        .expect("GetParameter");
    let p = got.parameter().expect("parameter");
    assert_eq!(p.value(), Some("ami-0aaaaaaaaaaaaaaa2"));
    assert_eq!(p.version(), 2);

    cloud.delete_parameter(PARAM);
    let err = ssm
        .get_parameter()
        .name(PARAM)
        .send()
        .await
        .expect_err("deleted");
    assert!(
        err.as_service_error()
            .is_some_and(|e| e.is_parameter_not_found()),
        "{err:?}"
    );
}

#[tokio::test]
async fn images_come_back_with_all_fields_and_filters_work() {
    let cloud = FakeCloud::start();
    let current = cloud.register_image(
        ImageFixture::new("amazon-eks-node-1.30-v20240601")
            .id("ami-0123456789abcdef0")
            .owner("amazon")
            .created("2024-06-01T10:20:30Z")
            .deprecated("2099-01-01T00:00:00Z")
            .tag("eks-version", "1.30"),
    );
    assert_eq!(current, "ami-0123456789abcdef0");
    let old = cloud.register_image(
        ImageFixture::new("amazon-eks-node-1.30-v20230101")
            .owner("amazon")
            .created("2023-01-01T00:00:00Z")
            .deprecated("2024-01-01T00:00:00Z"),
    );
    cloud.register_image(
        ImageFixture::new("amazon-eks-arm64-node-1.30-v20240601")
            .architecture("arm64")
            .owner("amazon")
            .created("2024-06-01T00:00:00Z"),
    );
    cloud.register_image(
        ImageFixture::new("custom-node-1.30")
            .owner("self")
            .created("2024-05-01T00:00:00Z")
            .tag("team", "platform"),
    );
    cloud.register_image(
        ImageFixture::new("custom-node-1.29-old")
            .created("2023-05-01T00:00:00Z")
            .deprecated("2024-01-01T00:00:00Z"),
    );

    let ec2 = aws_sdk_ec2::Client::new(&cloud.sdk_config().await);

    // Every field comes back as written.
    let out = ec2
        .describe_images()
        .image_ids(&current)
        .send()
        .await
        .expect("DescribeImages by id");
    let [img] = out.images() else {
        panic!("one image expected: {out:?}")
    };
    assert_eq!(img.image_id(), Some("ami-0123456789abcdef0"));
    assert_eq!(img.owner_id(), Some("137112412989"));
    assert_eq!(img.image_owner_alias(), Some("amazon"));
    assert_eq!(img.architecture().map(|a| a.as_str()), Some("x86_64"));
    assert_eq!(img.creation_date(), Some("2024-06-01T10:20:30.000Z"));
    assert_eq!(img.deprecation_time(), Some("2099-01-01T00:00:00.000Z"));
    assert_eq!(img.state().map(|s| s.as_str()), Some("available"));
    let tags: Vec<(&str, &str)> = img
        .tags()
        .iter()
        .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()))
        .collect();
    assert_eq!(tags, vec![("eks-version", "1.30")]);

    // Default query: the deprecated amazon image is hidden, our own deprecated
    // image is not (EC2 always shows the owner its deprecated images).
    assert_eq!(
        image_names(ec2.describe_images()).await,
        vec![
            "amazon-eks-arm64-node-1.30-v20240601",
            "amazon-eks-node-1.30-v20240601",
            "custom-node-1.29-old",
            "custom-node-1.30",
        ]
    );
    // IncludeDeprecated brings it back.
    assert_eq!(
        image_names(
            ec2.describe_images()
                .owners("amazon")
                .include_deprecated(true)
        )
        .await,
        vec![
            "amazon-eks-arm64-node-1.30-v20240601",
            "amazon-eks-node-1.30-v20230101",
            "amazon-eks-node-1.30-v20240601",
        ]
    );
    // So does asking for it by id, with its DeprecationTime.
    let out = ec2
        .describe_images()
        .image_ids(&old)
        .send()
        .await
        .expect("by id");
    assert_eq!(
        out.images()[0].deprecation_time(),
        Some("2024-01-01T00:00:00.000Z")
    );

    // Owners.
    assert_eq!(
        image_names(ec2.describe_images().owners("self")).await,
        vec!["custom-node-1.29-old", "custom-node-1.30"]
    );
    assert_eq!(
        image_names(ec2.describe_images().owners("137112412989")).await,
        vec![
            "amazon-eks-arm64-node-1.30-v20240601",
            "amazon-eks-node-1.30-v20240601"
        ]
    );
    // Name wildcard + architecture.
    assert_eq!(
        image_names(
            ec2.describe_images()
                .owners("amazon")
                .filters(filter("name", "amazon-eks-*node-1.30-v*"))
                .filters(filter("architecture", "arm64"))
        )
        .await,
        vec!["amazon-eks-arm64-node-1.30-v20240601"]
    );
    // Tags.
    assert_eq!(
        image_names(
            ec2.describe_images()
                .filters(filter("tag:team", "platform"))
        )
        .await,
        vec!["custom-node-1.30"]
    );
    assert_eq!(
        image_names(
            ec2.describe_images()
                .filters(filter("tag-key", "eks-version"))
        )
        .await,
        vec!["amazon-eks-node-1.30-v20240601"]
    );
    assert!(
        image_names(ec2.describe_images().filters(filter("tag:team", "other")))
            .await
            .is_empty()
    );
    // Filters also apply together with ImageIds (as in EC2).
    assert!(
        image_names(
            ec2.describe_images()
                .image_ids(&current)
                .filters(filter("architecture", "arm64"))
        )
        .await
        .is_empty()
    );
    // state filter
    assert_eq!(
        image_names(
            ec2.describe_images()
                .owners("self")
                .filters(filter("state", "available"))
        )
        .await
        .len(),
        2
    );
}

#[tokio::test]
async fn cluster_version_follows_set_cluster_version() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.29");
    let eks = aws_sdk_eks::Client::new(&cloud.sdk_config().await);
    let version = |out: aws_sdk_eks::operation::describe_cluster::DescribeClusterOutput| {
        out.cluster().and_then(|c| c.version()).map(str::to_string)
    };
    let out = eks
        .describe_cluster()
        .name("prod")
        .send()
        .await
        .expect("DescribeCluster");
    assert_eq!(
        out.cluster().and_then(|c| c.status()).map(|s| s.as_str()),
        Some("ACTIVE")
    );
    assert_eq!(version(out), Some("1.29".to_string()));

    cloud.set_cluster_version("prod", "1.30");
    let out = eks
        .describe_cluster()
        .name("prod")
        .send()
        .await
        .expect("DescribeCluster");
    assert_eq!(version(out), Some("1.30".to_string()));

    // The real CreateCluster API works too.
    eks.create_cluster()
        .name("via-api")
        .version("1.31")
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
        .send()
        .await
        .expect("CreateCluster");
    cloud.set_cluster_version("via-api", "1.32");
    let out = eks
        .describe_cluster()
        .name("via-api")
        .send()
        .await
        .expect("DescribeCluster");
    assert_eq!(version(out), Some("1.32".to_string()));
}

#[test]
fn control_errors_carry_the_server_message() {
    let cloud = FakeCloud::start();
    let err = cloud
        .try_control(
            "register_image",
            serde_json::json!({ "architecture": "x86_64" }),
        )
        .expect_err("name is required");
    assert!(err.contains("name"), "{err}");
    let err = cloud
        .try_control("no_such_op", serde_json::json!({}))
        .expect_err("unknown op");
    assert!(err.contains("unknown op"), "{err}");
    let err = cloud
        .try_control(
            "set_cluster",
            serde_json::json!({ "name": "missing", "version": "1.30" }),
        )
        .expect_err("no such cluster");
    assert!(err.contains("no EKS cluster"), "{err}");
}

#[test]
fn env_vars_point_at_moto() {
    let cloud = FakeCloud::start();
    let env = cloud.env_vars();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("AWS_ENDPOINT_URL"), Some(cloud.aws_url()));
    assert_eq!(get("AWS_REGION"), Some("us-east-2"));
    assert_eq!(get("AWS_ACCESS_KEY_ID"), Some("testing"));
    assert_eq!(get("AWS_SECRET_ACCESS_KEY"), Some("testing"));
}

/// The AWS error code of a failed call.
fn code(e: &impl aws_sdk_eks::error::ProvideErrorMetadata) -> String {
    e.code().unwrap_or_default().to_string()
}

#[tokio::test]
async fn eks_access_entries_answer_like_eks() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let eks = aws_sdk_eks::Client::new(&cloud.sdk_config().await);
    let role = "arn:aws:iam::123456789012:role/service/nodecycle-rotator";

    // The API's default authentication mode is CONFIG_MAP: no access entries there.
    let described = eks.describe_cluster().name("prod").send().await.unwrap();
    let mode = described
        .cluster()
        .and_then(|c| c.access_config())
        .and_then(|a| a.authentication_mode())
        .map(|m| m.as_str().to_owned());
    assert_eq!(mode.as_deref(), Some("CONFIG_MAP"));
    let err = eks
        .list_access_entries()
        .cluster_name("prod")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidRequestException");

    cloud.control(
        "set_cluster",
        serde_json::json!({"name": "prod", "authentication_mode": "API_AND_CONFIG_MAP"}),
    );
    let create = || {
        eks.create_access_entry()
            .cluster_name("prod")
            .principal_arn(role)
            .kubernetes_groups("nodecycle")
            .send()
    };
    let created = create().await.expect("CreateAccessEntry");
    let entry = created.access_entry().unwrap();
    assert_eq!(entry.r#type(), Some("STANDARD"));
    assert_eq!(
        entry.username(),
        Some("arn:aws:sts::123456789012:assumed-role/nodecycle-rotator/{{SessionName}}")
    );
    assert_eq!(code(&create().await.unwrap_err()), "ResourceInUseException");
    let err = eks
        .create_access_entry()
        .cluster_name("prod")
        .principal_arn("arn:aws:iam::123456789012:role/admins")
        .kubernetes_groups("system:masters")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "InvalidParameterException");

    let listed = eks
        .list_access_entries()
        .cluster_name("prod")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.access_entries(), [role]);
    // The principal ARN travels percent-encoded in the path, `/` of the role path included.
    let got = eks
        .describe_access_entry()
        .cluster_name("prod")
        .principal_arn(role)
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.access_entry().unwrap().kubernetes_groups(),
        ["nodecycle"]
    );
    let err = eks
        .describe_access_entry()
        .cluster_name("prod")
        .principal_arn("arn:aws:iam::123456789012:role/absent")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "ResourceNotFoundException");
    let err = eks
        .list_access_entries()
        .cluster_name("absent")
        .send()
        .await
        .unwrap_err();
    assert_eq!(code(&err), "ResourceNotFoundException");
    eks.delete_access_entry()
        .cluster_name("prod")
        .principal_arn(role)
        .send()
        .await
        .expect("DeleteAccessEntry");
    let listed = eks
        .list_access_entries()
        .cluster_name("prod")
        .send()
        .await
        .unwrap();
    assert!(listed.access_entries().is_empty());
}
