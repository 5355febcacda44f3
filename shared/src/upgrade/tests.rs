use super::*;

#[test]
fn the_next_minor_follows_the_version() {
    for (v, want) in [
        ("1.30", Some("1.31")),
        ("1.9", Some("1.10")),
        ("1.31.2", Some("1.32")),
        ("1.30-eks", Some("1.31")),
        ("2.0", None),
        ("x", None),
        ("1.", None),
    ] {
        assert_eq!(next_minor(v).as_deref(), want, "{v}");
    }
}

#[test]
fn a_missing_build_warns_only_where_releases_exist() {
    let mut n = NextMinor {
        pinned: "al2023@v20240807".into(),
        current: "1.30".into(),
        next: "1.31".into(),
        missing: vec!["x86_64/standard".into()],
        nearest: Some("v20241109".into()),
    };
    assert!(n.warns());
    assert!(
        n.message().contains("the nearest is v20241109"),
        "{}",
        n.message()
    );
    let findings = crate::deprecation::Findings {
        next_minor: Some(n.clone()),
        ..crate::deprecation::Findings::default()
    };
    assert_eq!(findings.warnings(chrono::Utc::now()).len(), 1);
    n.nearest = None;
    assert!(!n.warns(), "a minor with no releases yet is not a warning");
    n.nearest = Some("v20241109".into());
    n.missing.clear();
    assert!(!n.warns());
}

#[test]
fn a_pinned_release_is_read_from_an_eks_image_name() {
    let cases = [
        (
            "amazon-eks-node-al2023-x86_64-standard-1.30-v20240807",
            Some("al2023@v20240807"),
        ),
        ("amazon-eks-node-1.29-v20240807", Some("al2@v20240807")),
        (
            "amazon-eks-arm64-node-1.29-v20240807",
            Some("al2@v20240807"),
        ),
        (
            "bottlerocket-aws-k8s-1.30-x86_64-v1.26.0-7e0d2d5c",
            Some("bottlerocket@1.26.0"),
        ),
        ("golden-2", None),
        ("amazon-eks-node-al2023-x86_64-standard-1.30", None),
    ];
    for (name, want) in cases {
        let got = pinned_release(name).map(|a| a.to_string());
        assert_eq!(got.as_deref(), want, "{name}");
    }
}

#[test]
fn the_builds_a_pool_needs_are_those_of_its_architecture_and_variant() {
    let alias = Alias::parse("al2023@v20240807").unwrap_or_else(|e| panic!("{e}"));
    let got = builds(&alias, "1.31", Architecture::X86_64, Variant::Standard);
    assert_eq!(
        got,
        Ok(vec![
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.31-v20240807/image_id".to_string()
        ])
    );
    let arm = builds(&alias, "1.31", Architecture::Arm64, Variant::Nvidia).unwrap_or_default();
    assert_eq!(arm.len(), 1);
    assert!(arm[0].contains("/arm64/nvidia/"), "{arm:?}");
    let al2 = Alias::parse("al2@v20240807").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        builds(&al2, "1.33", Architecture::X86_64, Variant::Standard).is_err(),
        "AL2 ends at 1.32"
    );
    let arm = builds(&al2, "1.31", Architecture::Arm64, Variant::Standard).unwrap_or_default();
    assert_eq!(arm.len(), 1);
    assert!(arm[0].contains("amazon-linux-2-arm64/"), "{arm:?}");
}
