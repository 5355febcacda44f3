//! amiSelectorTerms resolution through the real adapters against moto server (Karpenter's
//! AMI selection): every term type, every alias family and variant, pinned vs latest, a
//! control-plane upgrade, the deprecated fallback, no match and SSM errors.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use nodecycle::ami::resolve::{ResolveError, Resolver};
use nodecycle::aws::ssm::Ssm;
use nodecycle_tests::{FakeCloud, ImageFixture};
use support::*;

const CREATED: &str = "2024-08-07T10:00:00Z";

async fn resolve_err(a: &Adapters, p: &nodecycle::policy::Policy) -> ResolveError {
    a.resolver()
        .resolve(p, now())
        .await
        .expect_err("must not resolve")
}

#[tokio::test]
async fn al2023_latest_and_pinned_for_every_arch_and_variant() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let pinned = publish_al2023(&cloud, "1.30", "v20240807", "2024-08-07T10:00:00Z");
    let latest = publish_al2023(&cloud, "1.30", "v20241109", "2024-11-09T10:00:00Z");
    let a = Adapters::new(&cloud).await;

    for (arch, variant) in [
        ("x86_64", "standard"),
        ("x86_64", "nvidia"),
        ("x86_64", "neuron"),
        ("arm64", "standard"),
        ("arm64", "nvidia"),
    ] {
        let p = pool(Some(arch), variant, "  - alias: al2023@latest\n");
        let r = a.resolver().resolve(&p, now()).await.unwrap();
        assert_eq!(
            r.desired.id,
            id_of(&latest, arch, variant),
            "latest {arch}/{variant}"
        );
        assert_eq!(r.kubernetes_version, "1.30");
        assert_eq!(
            r.candidates.len(),
            5,
            "every arch/variant image is a candidate"
        );
        assert_eq!(
            r.desired.source.parameter.as_deref(),
            Some(format!("/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/{arch}/{variant}/recommended/image_id").as_str())
        );

        let p = pool(Some(arch), variant, "  - alias: al2023@v20240807\n");
        let r = a.resolver().resolve(&p, now()).await.unwrap();
        assert_eq!(
            r.desired.id,
            id_of(&pinned, arch, variant),
            "pinned {arch}/{variant}"
        );
        assert_eq!(
            r.desired.variant.map(|v| v.to_string()).as_deref(),
            Some(variant)
        );
        assert_eq!(r.desired.source.value, "al2023@v20240807");
    }

    // arm64 has no neuron variant: nothing fits, and the error says what was matched.
    let err = resolve_err(
        &a,
        &pool(Some("arm64"), "neuron", "  - alias: al2023@latest\n"),
    )
    .await;
    assert!(
        matches!(err, ResolveError::NoMatch { matched: 5, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn al2_paths_gpu_variants_and_the_1_33_gate() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.29");
    let base = "/aws/service/eks/optimized-ami/1.29";
    let x86 = publish(
        &cloud,
        &format!("{base}/amazon-linux-2/amazon-eks-node-1.29-v20240807/image_id"),
        "amazon-eks-node-1.29-v20240807",
        "x86_64",
        CREATED,
    );
    let arm = publish(
        &cloud,
        &format!("{base}/amazon-linux-2-arm64/amazon-eks-arm64-node-1.29-v20240807/image_id"),
        "amazon-eks-arm64-node-1.29-v20240807",
        "arm64",
        CREATED,
    );
    let gpu = publish(
        &cloud,
        &format!("{base}/amazon-linux-2-gpu/amazon-eks-gpu-node-1.29-v20240807/image_id"),
        "amazon-eks-gpu-node-1.29-v20240807",
        "x86_64",
        CREATED,
    );
    cloud.put_parameter(&format!("{base}/amazon-linux-2/recommended/image_id"), &x86);
    let a = Adapters::new(&cloud).await;
    let term = "  - alias: al2@v20240807\n";
    assert_eq!(
        a.resolver()
            .resolve(&pool(Some("x86_64"), "standard", term), now())
            .await
            .unwrap()
            .desired
            .id,
        x86
    );
    assert_eq!(
        a.resolver()
            .resolve(&pool(Some("arm64"), "standard", term), now())
            .await
            .unwrap()
            .desired
            .id,
        arm
    );
    assert_eq!(
        a.resolver()
            .resolve(&pool(Some("x86_64"), "nvidia", term), now())
            .await
            .unwrap()
            .desired
            .id,
        gpu
    );
    assert_eq!(
        a.resolver()
            .resolve(&pool(Some("x86_64"), "neuron", term), now())
            .await
            .unwrap()
            .desired
            .id,
        gpu
    );
    // Only the x86 recommended parameter exists for @latest: arm64 finds nothing to fit.
    let latest = "  - alias: al2@latest\n";
    assert_eq!(
        a.resolver()
            .resolve(&pool(Some("x86_64"), "standard", latest), now())
            .await
            .unwrap()
            .desired
            .id,
        x86
    );
    assert!(matches!(
        resolve_err(&a, &pool(Some("arm64"), "standard", latest)).await,
        ResolveError::NoMatch { .. }
    ));

    cloud.set_cluster_version("prod", "1.33");
    let err = resolve_err(&a, &pool(Some("x86_64"), "standard", term)).await;
    assert!(
        err.to_string()
            .contains("AL2 aliases are not supported on Kubernetes 1.33"),
        "{err}"
    );
}

#[tokio::test]
async fn bottlerocket_strips_v_and_maps_variants() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let base = "/aws/service/bottlerocket";
    let x86 = publish(
        &cloud,
        &format!("{base}/aws-k8s-1.30/x86_64/1.20.3/image_id"),
        "bottlerocket-aws-k8s-1.30-x86_64-v1.20.3",
        "x86_64",
        CREATED,
    );
    let arm = publish(
        &cloud,
        &format!("{base}/aws-k8s-1.30/arm64/1.20.3/image_id"),
        "bottlerocket-aws-k8s-1.30-aarch64-v1.20.3",
        "arm64",
        CREATED,
    );
    let nv = publish(
        &cloud,
        &format!("{base}/aws-k8s-1.30-nvidia/x86_64/1.20.3/image_id"),
        "bottlerocket-aws-k8s-1.30-nvidia-x86_64-v1.20.3",
        "x86_64",
        CREATED,
    );
    let nv_arm = publish(
        &cloud,
        &format!("{base}/aws-k8s-1.30-nvidia/arm64/1.20.3/image_id"),
        "bottlerocket-aws-k8s-1.30-nvidia-aarch64-v1.20.3",
        "arm64",
        CREATED,
    );
    let latest = publish(
        &cloud,
        &format!("{base}/aws-k8s-1.30/x86_64/latest/image_id"),
        "bottlerocket-aws-k8s-1.30-x86_64-v1.21.0",
        "x86_64",
        "2024-09-01T00:00:00Z",
    );
    let a = Adapters::new(&cloud).await;
    for (written, arch, variant, want) in [
        ("v1.20.3", "x86_64", "standard", &x86),
        ("1.20.3", "x86_64", "standard", &x86),
        ("v1.20.3", "arm64", "standard", &arm),
        ("v1.20.3", "x86_64", "nvidia", &nv),
        ("v1.20.3", "arm64", "nvidia", &nv_arm),
        ("v1.20.3", "x86_64", "neuron", &x86),
        ("latest", "x86_64", "standard", &latest),
    ] {
        let p = pool(
            Some(arch),
            variant,
            &format!("  - alias: bottlerocket@{written}\n"),
        );
        assert_eq!(
            &a.resolver().resolve(&p, now()).await.unwrap().desired.id,
            want,
            "{written} {arch}/{variant}"
        );
    }
}

#[tokio::test]
async fn windows_latest_and_the_2025_gate() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.34");
    let p22 = "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.34/image_id";
    let w22 = publish(
        &cloud,
        p22,
        "Windows_Server-2022-English-Core-EKS_Optimized-1.34-2026.11.12",
        "x86_64",
        CREATED,
    );
    let a = Adapters::new(&cloud).await;
    let r = a
        .resolver()
        .resolve(
            &pool(
                Some("x86_64"),
                "standard",
                "  - alias: windows2022@latest\n",
            ),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, w22);
    assert_eq!(r.desired.source.parameter.as_deref(), Some(p22));

    let err = resolve_err(
        &a,
        &pool(
            Some("x86_64"),
            "standard",
            "  - alias: windows2025@latest\n",
        ),
    )
    .await;
    assert!(
        err.to_string()
            .contains("Windows Server 2025 needs Kubernetes 1.35"),
        "{err}"
    );
    cloud.set_cluster_version("prod", "1.35");
    let p25 = "/aws/service/ami-windows-latest/Windows_Server-2025-English-Core-EKS_Optimized-1.35/image_id";
    let w25 = publish(
        &cloud,
        p25,
        "Windows_Server-2025-English-Core-EKS_Optimized-1.35-2026.11.12",
        "x86_64",
        CREATED,
    );
    let r = Adapters::new(&cloud)
        .await
        .resolver()
        .resolve(
            &pool(
                Some("x86_64"),
                "standard",
                "  - alias: windows2025@latest\n",
            ),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, w25);
}

#[tokio::test]
async fn pinned_alias_follows_a_control_plane_upgrade() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let on_130 = publish_al2023(&cloud, "1.30", "v20240807", CREATED);
    let on_131 = publish_al2023(&cloud, "1.31", "v20240807", CREATED);
    let a = Adapters::new(&cloud).await;
    let p = pool(Some("x86_64"), "standard", "  - alias: al2023@v20240807\n");
    assert_eq!(
        a.resolver().resolve(&p, now()).await.unwrap().desired.id,
        id_of(&on_130, "x86_64", "standard")
    );

    cloud.set_cluster_version("prod", "1.31");
    let r = a.resolver().resolve(&p, now()).await.unwrap();
    assert_eq!(r.kubernetes_version, "1.31");
    assert_eq!(r.desired.id, id_of(&on_131, "x86_64", "standard"));

    // The pinned release was never published for 1.32: fail, naming the parameters checked.
    cloud.set_cluster_version("prod", "1.32");
    let err = resolve_err(&a, &p).await;
    assert!(
        matches!(err, ResolveError::AliasNotPublished { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("amazon-eks-node-al2023-x86_64-standard-1.32-v20240807"),
        "{err}"
    );
}

#[tokio::test]
async fn name_terms_default_to_self_and_amazon_owners() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let own = cloud.register_image(
        ImageFixture::new("team-eks-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let amazon = cloud.register_image(
        ImageFixture::new("team-eks-2")
            .owner("amazon")
            .created("2024-02-01T00:00:00Z"),
    );
    let other = cloud.register_image(
        ImageFixture::new("team-eks-3")
            .owner("999999999999")
            .created("2024-03-01T00:00:00Z"),
    );
    let _unrelated = cloud.register_image(
        ImageFixture::new("other-ami")
            .owner("self")
            .created("2025-01-01T00:00:00Z"),
    );
    let a = Adapters::new(&cloud).await;

    let r = a
        .resolver()
        .resolve(
            &pool(Some("x86_64"), "standard", "  - name: team-eks-*\n"),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(
        r.desired.id, amazon,
        "a public image of another account is not discovered by default"
    );
    let ids: Vec<&str> = r.candidates.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, vec![amazon.as_str(), own.as_str()], "best first");
    assert_eq!(r.desired.source.field, "query");
    assert_eq!(r.desired.variant, None);

    let r = a
        .resolver()
        .resolve(
            &pool(
                Some("x86_64"),
                "standard",
                "  - name: team-eks-?\n    owner: \"999999999999\"\n",
            ),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, other);
    let r = a
        .resolver()
        .resolve(
            &pool(
                Some("x86_64"),
                "standard",
                "  - name: team-eks-1\n    owner: self\n",
            ),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, own);
}

#[tokio::test]
async fn tag_terms_with_values_and_wildcards() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let prod = cloud.register_image(
        ImageFixture::new("golden-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z")
            .tag("env", "prod")
            .tag("team", "platform"),
    );
    let test = cloud.register_image(
        ImageFixture::new("golden-2")
            .owner("self")
            .created("2024-02-01T00:00:00Z")
            .tag("env", "test"),
    );
    let _untagged = cloud.register_image(
        ImageFixture::new("golden-3")
            .owner("self")
            .created("2024-03-01T00:00:00Z"),
    );
    let a = Adapters::new(&cloud).await;
    let r = a
        .resolver()
        .resolve(
            &pool(Some("x86_64"), "standard", "  - tags:\n      env: prod\n"),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, prod);
    assert_eq!(r.candidates.len(), 1);
    let r = a
        .resolver()
        .resolve(
            &pool(Some("x86_64"), "standard", "  - tags:\n      env: \"*\"\n"),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(
        r.desired.id, test,
        "env present with any value; newest wins"
    );
    assert_eq!(r.candidates.len(), 2);
    let r = a
        .resolver()
        .resolve(
            &pool(
                Some("x86_64"),
                "standard",
                "  - tags:\n      env: \"*\"\n      team: platform\n",
            ),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, prod, "tags in one term are ANDed");
}

#[tokio::test]
async fn id_and_ssm_parameter_terms_are_ored_and_skips_are_quiet() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let pinned = cloud.register_image(
        ImageFixture::new("pinned")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let golden = cloud.register_image(
        ImageFixture::new("golden")
            .owner("self")
            .created("2024-05-01T00:00:00Z"),
    );
    cloud.put_parameter("/golden/eks/al2023/x86_64", &golden);
    cloud.put_parameter("/golden/not-an-ami", "latest-and-greatest");
    let a = Adapters::new(&cloud).await;
    let terms = format!(
        "  - id: {pinned}\n  - ssmParameter: /golden/eks/al2023/x86_64\n  - ssmParameter: /golden/missing\n  - ssmParameter: /golden/not-an-ami\n"
    );
    let r = a
        .resolver()
        .resolve(&pool(Some("x86_64"), "standard", &terms), now())
        .await
        .unwrap();
    assert_eq!(r.desired.id, golden);
    assert_eq!(r.desired.source.term, 1);
    assert_eq!(
        r.desired.source.parameter.as_deref(),
        Some("/golden/eks/al2023/x86_64")
    );
    assert_eq!(
        r.candidates
            .iter()
            .map(|c| c.id.clone())
            .collect::<Vec<_>>(),
        vec![golden.clone(), pinned.clone()]
    );
    assert_eq!(r.candidates[1].source.field, "id");

    // By ARN too.
    let arn = "arn:aws:ssm:us-east-2:123456789012:parameter/golden/eks/al2023/x86_64";
    let r = a
        .resolver()
        .resolve(
            &pool(
                Some("x86_64"),
                "standard",
                &format!("  - ssmParameter: {arn}\n"),
            ),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, golden);
}

#[tokio::test]
async fn deprecated_images_are_used_only_as_a_fallback() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let old = cloud.register_image(
        ImageFixture::new("base-1")
            .owner("self")
            .created("2024-01-01T00:00:00Z"),
    );
    let newer_deprecated = cloud.register_image(
        ImageFixture::new("base-2")
            .owner("self")
            .created("2024-06-01T00:00:00Z")
            .deprecated("2025-01-01T00:00:00Z"),
    );
    let a = Adapters::new(&cloud).await;
    let r = a
        .resolver()
        .resolve(
            &pool(Some("x86_64"), "standard", "  - name: base-*\n"),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, old);
    assert!(!r.desired.deprecated);
    assert_eq!(r.candidates[1].id, newer_deprecated);
    assert!(r.candidates[1].deprecated);

    let r = a
        .resolver()
        .resolve(
            &pool(Some("x86_64"), "standard", "  - name: base-2\n"),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(
        r.desired.id, newer_deprecated,
        "nothing else fits: the deprecated image is used"
    );
    assert!(r.desired.deprecated);
}

#[tokio::test]
async fn same_creation_date_prefers_the_greater_name() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let _a1 = cloud.register_image(ImageFixture::new("img-a").owner("self").created(CREATED));
    let b = cloud.register_image(ImageFixture::new("img-b").owner("self").created(CREATED));
    let a = Adapters::new(&cloud).await;
    let r = a
        .resolver()
        .resolve(
            &pool(Some("x86_64"), "standard", "  - name: img-*\n"),
            now(),
        )
        .await
        .unwrap();
    assert_eq!(r.desired.id, b);
}

#[tokio::test]
async fn no_match_is_an_error_never_an_empty_answer() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let _x86 = cloud.register_image(ImageFixture::new("only-x86").owner("self").created(CREATED));
    let a = Adapters::new(&cloud).await;
    let err = resolve_err(
        &a,
        &pool(Some("x86_64"), "standard", "  - name: nothing-*\n"),
    )
    .await;
    assert!(
        matches!(err, ResolveError::NoMatch { matched: 0, .. }),
        "{err}"
    );
    let err = resolve_err(&a, &pool(Some("arm64"), "standard", "  - name: only-*\n")).await;
    assert!(err.to_string().contains("architectures: x86_64"), "{err}");
    let err = resolve_err(
        &a,
        &pool(Some("x86_64"), "standard", "  - alias: al2023@latest\n"),
    )
    .await;
    assert!(
        matches!(err, ResolveError::AliasNotPublished { .. }),
        "{err}"
    );
    // Unknown cluster.
    let p = support::policy(
        "cluster: nope\nname: x\nnodeGroup: { autoScalingGroup: g }\narchitecture: x86_64\namiSelectorTerms:\n  - name: only-*\n",
    );
    assert!(matches!(
        resolve_err(&a, &p).await,
        ResolveError::Cluster { .. }
    ));
}

#[tokio::test]
async fn ssm_errors_other_than_not_found_fail_the_resolution() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    publish_al2023(&cloud, "1.30", "v20240807", CREATED);
    let a = Adapters::new(&cloud).await;
    // SSM unreachable (a closed port): the real SDK fails to dispatch.
    let dead = aws_sdk_ssm::config::Builder::from(&cloud.sdk_config().await)
        .endpoint_url("http://127.0.0.1:9")
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    let ssm = Ssm::new(aws_sdk_ssm::Client::from_conf(dead));
    let resolver = Resolver::new(&ssm, &a.ec2, &a.eks, &a.groups);
    for terms in [
        "  - alias: al2023@latest\n",
        "  - ssmParameter: /golden/x\n",
    ] {
        let err = resolver
            .resolve(&pool(Some("x86_64"), "standard", terms), now())
            .await
            .unwrap_err();
        assert!(matches!(err, ResolveError::Parameters(_)), "{err}");
    }
}

#[tokio::test]
async fn architecture_comes_from_the_groups_launch_template() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    let published = publish_al2023(&cloud, "1.30", "v20240807", CREATED);
    let a = Adapters::new(&cloud).await;
    let arm = id_of(&published, "arm64", "standard");
    a.create_group("prod-general", &arm, "m7g.large", 0, 3, None)
        .await;
    let r = a
        .resolver()
        .resolve(&pool(None, "standard", "  - alias: al2023@latest\n"), now())
        .await
        .unwrap();
    assert_eq!(r.desired.id, arm);

    let missing = support::policy(
        "cluster: prod\nname: other\nnodeGroup: { autoScalingGroup: missing }\namiSelectorTerms:\n  - alias: al2023@latest\n",
    );
    let err = resolve_err(&a, &missing).await;
    assert!(
        err.to_string()
            .starts_with("architecture: not set in the policy"),
        "{err}"
    );

    // Without a group to ask, terms that only match one architecture settle it.
    let only_x86 = support::policy(
        "cluster: prod\nname: other\nnodeGroup: { autoScalingGroup: missing }\namiSelectorTerms:\n  - name: amazon-eks-node-al2023-x86_64-standard-*\n",
    );
    let r = a.resolver().resolve(&only_x86, now()).await.unwrap();
    assert_eq!(r.desired.id, id_of(&published, "x86_64", "standard"));
    assert_eq!(r.desired.architecture, nodecycle::ami::Architecture::X86_64);
}

#[tokio::test]
async fn one_pass_costs_one_call_per_distinct_alias_not_per_pool() {
    let cloud = FakeCloud::start();
    cloud.create_cluster("prod", "1.30");
    publish_al2023(&cloud, "1.30", "v20240807", CREATED);
    let a = Adapters::new(&cloud).await;
    let resolver = a.resolver();
    for i in 0..20 {
        let p = support::policy(&format!(
            "cluster: prod\nname: pool{i}\nnodeGroup: {{ autoScalingGroup: g{i} }}\narchitecture: {}\namiSelectorTerms:\n  - alias: al2023@latest\n",
            if i % 2 == 0 { "x86_64" } else { "arm64" }
        ));
        resolver.resolve(&p, now()).await.unwrap();
    }
    let calls = resolver.calls();
    assert_eq!(calls.get("eks:DescribeCluster"), Some(&1));
    assert_eq!(calls.get("ssm:GetParameters"), Some(&1));
    assert_eq!(calls.get("ec2:DescribeImages"), Some(&1));
}
