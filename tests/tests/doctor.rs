//! `nodecycle doctor` against the fake cloud: a deployment built the way an operator builds one
//! (a CloudFormation stack with the contract's outputs, the table, tagged groups and launch
//! templates, access entries, deploy/rbac.yaml applied through the Kubernetes API, event rules)
//! passes; each fault seeded on its own fails the check that names it. Assertions are on
//! (status, check, subject) of the JSON report and the exit code, never on message text.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Output};

use nodecycle_tests::{FakeCloud, ImageFixture, KubeStandIn};
use serde::Deserialize as _;
use serde_json::{Value, json};

const CLUSTER: &str = "prod";
const STACK: &str = "nodecycle";
const TABLE: &str = "nodecycle-state";
const HOOK: &str = "nodecycle-drain";
const RULES: [&str; 2] = ["nodecycle-RotatorTick", "nodecycle-SpotWarnings"];
const ROLES: [(&str, &str); 3] = [
    ("RotatorRoleArn", "nodecycle-RotatorFunctionRole-A1"),
    (
        "InterruptionHandlerRoleArn",
        "nodecycle-InterruptionHandlerFunctionRole-B2",
    ),
    ("OpsRoleArn", "nodecycle-OpsFunctionRole-C3"),
];

fn role_arn(name: &str) -> String {
    format!("arn:aws:iam::{}:role/{name}", nodecycle_tests::ACCOUNT_ID)
}

/// One seeded fault (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    UntaggedGroup,
    UntaggedLaunchTemplate,
    NotOptedIn,
    LegacyGroup,
    MissingAccessEntry,
    MissingRbacBinding,
    InvalidPolicy,
    DisabledRule,
    ForeignHookName,
    KindMismatch,
    /// The group with the hook has no instance lifecycle policy (an abandoned hand-over would
    /// terminate the node with its pods).
    NoRetention,
    /// The cluster's endpoint is private-only and the stack's functions run outside any VPC.
    PrivateEndpoint,
}

fn bin() -> PathBuf {
    // target/<profile>/deps/doctor-<hash> -> target/<profile>/nodecycle
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join("nodecycle");
    assert!(
        path.exists(),
        "{} not built (cargo test --workspace builds it)",
        path.display()
    );
    path
}

fn doctor(cloud: &FakeCloud, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("doctor")
        .args(args)
        .env_remove("AWS_PROFILE")
        .env_remove("NODECYCLE_STACK")
        .env_remove("NODECYCLE_KUBE_ENDPOINT")
        .env_remove("NODECYCLE_KUBE_CA_FILE")
        .env_remove("NODECYCLE_KUBE_INSECURE")
        .env("NODECYCLE_LOG", "warn")
        .envs(cloud.env_vars())
        .output()
        .unwrap()
}

fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// (status, check, subject) of every line that is not ok.
fn problems(report: &Value) -> Vec<(String, String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "ok")
        .map(|c| {
            (
                c["status"].as_str().unwrap().to_owned(),
                c["check"].as_str().unwrap().to_owned(),
                c["subject"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn fail(check: &str, subject: &str) -> (String, String, String) {
    ("FAIL".into(), check.into(), subject.into())
}

/// The Kubernetes objects of deploy/rbac.yaml, applied through the API as `kubectl apply` would
/// create them (all of them, or all but the ClusterRoleBinding of `without_binding`).
fn apply_rbac(kube: &KubeStandIn, without_binding: Option<&str>) {
    let text = std::fs::read_to_string(nodecycle_tests::repo_path("deploy/rbac.yaml")).unwrap();
    let client = kube.client();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let obj = Value::deserialize(doc).unwrap();
        let name = obj["metadata"]["name"].as_str().unwrap();
        let path = match (
            obj["kind"].as_str().unwrap(),
            obj["metadata"]["namespace"].as_str(),
        ) {
            ("ClusterRole", _) => "clusterroles".to_owned(),
            ("ClusterRoleBinding", _) if without_binding == Some(name) => continue,
            ("ClusterRoleBinding", _) => "clusterrolebindings".to_owned(),
            ("Role", Some(ns)) => format!("namespaces/{ns}/roles"),
            ("RoleBinding", Some(ns)) => format!("namespaces/{ns}/rolebindings"),
            (kind, _) => panic!("deploy/rbac.yaml: unexpected {kind} {name}"),
        };
        let r = client.post(&format!("/apis/rbac.authorization.k8s.io/v1/{path}"), &obj);
        assert_eq!(r.status, 201, "{}", r.raw);
    }
}

/// The tags of a template: opted in for `cluster` as the docs say, or (`opted_in` false) with
/// the cluster tag only, or none (`cluster` `None`).
fn ec2_tags(cluster: Option<&str>, opted_in: bool) -> Vec<aws_sdk_ec2::types::TagSpecification> {
    cluster
        .map(|c| {
            if opted_in {
                return support::opted_in_template_tags(Some(c));
            }
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::LaunchTemplate)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("eks:cluster-name")
                        .value(c)
                        .build(),
                )
                .build()
        })
        .into_iter()
        .collect()
}

/// Builds a deployment with `fault` seeded; returns the cloud (kept alive by the caller).
async fn deployment(fault: Fault) -> FakeCloud {
    let cloud = FakeCloud::start();
    let config = cloud.sdk_config().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let autoscaling = aws_sdk_autoscaling::Client::new(&config);
    let eks = aws_sdk_eks::Client::new(&config);
    let events = aws_sdk_eventbridge::Client::new(&config);
    let cfn = aws_sdk_cloudformation::Client::new(&config);

    // The cluster, with access entries possible, and its Kubernetes API.
    let kube = cloud.create_kube(CLUSTER);
    cloud.control(
        "set_cluster",
        json!({"name": CLUSTER, "authentication_mode": "API_AND_CONFIG_MAP"}),
    );
    if fault == Fault::PrivateEndpoint {
        cloud.control(
            "set_cluster",
            json!({"name": CLUSTER, "endpoint_access": {
                "endpointPublicAccess": false, "endpointPrivateAccess": true}}),
        );
    }
    for (output, role) in ROLES {
        if fault == Fault::MissingAccessEntry && output == "OpsRoleArn" {
            continue;
        }
        // Each role mapped to its function's group (the single group of earlier releases with
        // Fault::LegacyGroup).
        let group = match fault {
            Fault::LegacyGroup => "nodecycle",
            _ => nodecycle::doctor::kubernetes_group(output).unwrap(),
        };
        eks.create_access_entry()
            .cluster_name(CLUSTER)
            .principal_arn(role_arn(role))
            .r#type("STANDARD")
            .kubernetes_groups(group)
            .send()
            .await
            .expect("CreateAccessEntry");
    }
    apply_rbac(
        &kube,
        (fault == Fault::MissingRbacBinding).then_some("nodecycle-interruption"),
    );

    // The state table as the template defines it.
    let adapters = support::Adapters::new(&cloud).await;
    adapters.table(TABLE).await;

    // prod/general: a self-managed group on a tagged launch template, with nodecycle's hook.
    let image = cloud.register_image(ImageFixture::new("golden-1"));
    let general_lt = ec2
        .create_launch_template()
        .launch_template_name("prod-general")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(&image)
                .build(),
        )
        .set_tag_specifications(Some(ec2_tags(
            (fault != Fault::UntaggedLaunchTemplate).then_some(CLUSTER),
            fault != Fault::NotOptedIn,
        )))
        .send()
        .await
        .expect("CreateLaunchTemplate");
    let general_lt = general_lt
        .launch_template()
        .unwrap()
        .launch_template_id()
        .unwrap()
        .to_owned();
    let mut group = autoscaling
        .create_auto_scaling_group()
        .auto_scaling_group_name("prod-general")
        .launch_template(
            aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                .launch_template_id(&general_lt)
                .version("$Latest")
                .build(),
        )
        .min_size(0)
        .max_size(3)
        .desired_capacity(0)
        .availability_zones("us-east-2a");
    if fault != Fault::UntaggedGroup {
        group = group.tags(
            aws_sdk_autoscaling::types::Tag::builder()
                .key("eks:cluster-name")
                .value(CLUSTER)
                .propagate_at_launch(true)
                .build(),
        );
    }
    group.send().await.expect("CreateAutoScalingGroup");
    autoscaling
        .put_lifecycle_hook()
        .auto_scaling_group_name("prod-general")
        .lifecycle_hook_name(if fault == Fault::ForeignHookName {
            "drain"
        } else {
            HOOK
        })
        .lifecycle_transition("autoscaling:EC2_INSTANCE_TERMINATING")
        .heartbeat_timeout(300)
        .default_result("ABANDON")
        .send()
        .await
        .expect("PutLifecycleHook");
    if fault != Fault::NoRetention {
        support::Adapters::new(&cloud)
            .await
            .retain_abandoned("prod-general")
            .await;
    }

    // prod/golden: a managed node group on the team's tagged launch template.
    let golden_lt = ec2
        .create_launch_template()
        .launch_template_name("golden")
        .launch_template_data(
            aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                .image_id(&image)
                .build(),
        )
        .set_tag_specifications(Some(ec2_tags(Some(CLUSTER), true)))
        .send()
        .await
        .expect("CreateLaunchTemplate");
    let golden_lt = golden_lt
        .launch_template()
        .unwrap()
        .launch_template_id()
        .unwrap()
        .to_owned();
    let ng = cloud.control(
        "create_nodegroup",
        json!({"cluster": CLUSTER, "nodegroup": "golden", "launchTemplate": {"id": golden_lt}, "size": 0}),
    );
    let golden_asg = ng["asg"].as_str().unwrap().to_owned();

    // Policies.
    let terms = "amiSelectorTerms:\n  - alias: al2023@latest\n";
    let general_group = if fault == Fault::KindMismatch {
        golden_asg.as_str()
    } else {
        "prod-general"
    };
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        &format!("cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: {general_group} }}\n{terms}"),
    );
    cloud.put_parameter(
        "/nodecycle/pools/prod/golden",
        &format!("cluster: prod\nname: golden\nnodeGroup: {{ managedNodeGroup: golden }}\n{terms}"),
    );
    if fault == Fault::InvalidPolicy {
        cloud.put_parameter(
            "/nodecycle/pools/prod/broken",
            "cluster: prod\nname: broken\nnodeGroup: { autoScalingGroup: prod-broken }\namiSelectorTerms:\n  - alias: al2024@latest\n",
        );
    }

    // The stack: the dead-letter queue and the rules as resources, the contract's outputs.
    let mut outputs = serde_json::Map::new();
    let mut out = |k: &str, v: Value| {
        outputs.insert(k.to_owned(), json!({ "Value": v }));
    };
    out("StateTableName", json!(TABLE));
    out("PolicyPrefix", json!("/nodecycle/pools/"));
    out("LifecycleHookName", json!(HOOK));
    out("ClusterNames", json!(CLUSTER));
    out("EventRuleNames", json!(RULES.join(",")));
    out(
        "AmiWatcherRoleArn",
        json!(role_arn("nodecycle-AmiWatcherFunctionRole-D4")),
    );
    for (output, role) in ROLES {
        out(output, json!(role_arn(role)));
    }
    for f in ["AmiWatcher", "Rotator", "InterruptionHandler", "Ops"] {
        out(
            &format!("{f}FunctionName"),
            json!(format!("nodecycle-{f}Function-X")),
        );
    }
    out("DeadLetterQueueUrl", json!({ "Ref": "DeadLetterQueue" }));
    out(
        "DeadLetterQueueArn",
        json!({ "Fn::GetAtt": ["DeadLetterQueue", "Arn"] }),
    );
    let template = json!({
        "Resources": {
            "DeadLetterQueue": { "Type": "AWS::SQS::Queue" },
            "RotatorTick": { "Type": "AWS::Events::Rule", "Properties": {
                "Name": RULES[0], "ScheduleExpression": "rate(1 minute)", "State": "ENABLED" } },
            "SpotWarnings": { "Type": "AWS::Events::Rule", "Properties": {
                "Name": RULES[1], "State": "ENABLED",
                "EventPattern": { "source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"] } } },
        },
        "Outputs": outputs,
    });
    cfn.create_stack()
        .stack_name(STACK)
        .template_body(template.to_string())
        .send()
        .await
        .expect("CreateStack");
    if fault == Fault::DisabledRule {
        events
            .disable_rule()
            .name(RULES[1])
            .send()
            .await
            .expect("DisableRule");
    }
    cloud
}

async fn diagnose(fault: Fault) -> (Output, Value) {
    let cloud = deployment(fault).await;
    let out = doctor(&cloud, &["--json"]);
    let v = report(&out);
    (out, v)
}

#[tokio::test]
async fn a_healthy_deployment_passes() {
    let cloud = deployment(Fault::None).await;
    let out = doctor(&cloud, &["--json"]);
    let v = report(&out);
    assert_eq!(problems(&v), vec![], "{v:#}");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(v["failed"], 0);
    let checks: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    for kind in [
        "stack",
        "table",
        "policy",
        "cluster",
        "accessEntry",
        "rbac",
        "group",
        "launchTemplate",
        "lifecycleHook",
        "eventRule",
    ] {
        assert!(checks.contains(&kind), "no {kind} check: {checks:?}");
    }
    assert_eq!(checks.iter().filter(|c| **c == "accessEntry").count(), 3);
    assert_eq!(checks.iter().filter(|c| **c == "eventRule").count(), 2);

    // The line form: one line per check, each starting with its status.
    let out = doctor(&cloud, &["--stack", STACK, "--cluster", CLUSTER]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), checks.len(), "{text}");
    assert!(text.lines().all(|l| l.starts_with("ok ")), "{text}");
}

#[tokio::test]
async fn untagged_group() {
    let (out, v) = diagnose(Fault::UntaggedGroup).await;
    assert_eq!(problems(&v), vec![fail("group", "prod/general")], "{v:#}");
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn untagged_launch_template() {
    let (out, v) = diagnose(Fault::UntaggedLaunchTemplate).await;
    assert_eq!(
        problems(&v),
        vec![fail("launchTemplate", "prod/general")],
        "{v:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn missing_access_entry() {
    let (out, v) = diagnose(Fault::MissingAccessEntry).await;
    let subject = format!("{CLUSTER}/{}", ROLES[2].0);
    assert_eq!(problems(&v), vec![fail("accessEntry", &subject)], "{v:#}");
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn missing_rbac_binding() {
    let (out, v) = diagnose(Fault::MissingRbacBinding).await;
    assert_eq!(
        problems(&v),
        vec![fail("rbac", &format!("{CLUSTER}/nodecycle-interruption"))],
        "{v:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

/// A template with the cluster tag but not the opt-in: nodecycle may not version it.
#[tokio::test]
async fn launch_template_not_opted_in() {
    let (out, v) = diagnose(Fault::NotOptedIn).await;
    assert_eq!(
        problems(&v),
        vec![fail("launchTemplate", "prod/general")],
        "{v:#}"
    );
    let line = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "launchTemplate" && c["subject"] == "prod/general")
        .unwrap();
    assert!(
        line["detail"]
            .as_str()
            .unwrap()
            .contains("lacks tag nodecycle.dev/managed=true"),
        "{line}"
    );
    assert_eq!(out.status.code(), Some(1));
}

/// A cluster still on the single group of earlier releases: every access entry fails, naming
/// the function's own group.
#[tokio::test]
async fn access_entries_on_the_single_group_of_earlier_releases() {
    let (out, v) = diagnose(Fault::LegacyGroup).await;
    let expected: Vec<_> = ROLES
        .iter()
        .map(|(output, _)| fail("accessEntry", &format!("{CLUSTER}/{output}")))
        .collect();
    assert_eq!(problems(&v), expected, "{v:#}");
    let fixes: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] == "accessEntry")
        .map(|c| c["fix"].as_str().unwrap())
        .collect();
    assert!(
        fixes[0].ends_with("--kubernetes-groups nodecycle-rotator"),
        "{fixes:?}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn invalid_policy() {
    let (out, v) = diagnose(Fault::InvalidPolicy).await;
    assert_eq!(
        problems(&v),
        vec![fail("policy", "/nodecycle/pools/prod/broken")],
        "{v:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn disabled_rule() {
    let (out, v) = diagnose(Fault::DisabledRule).await;
    assert_eq!(problems(&v), vec![fail("eventRule", RULES[1])], "{v:#}");
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn foreign_hook_name() {
    let (out, v) = diagnose(Fault::ForeignHookName).await;
    assert_eq!(
        problems(&v),
        vec![fail("lifecycleHook", "prod/general")],
        "{v:#}"
    );
    assert_eq!(out.status.code(), Some(1));
}

/// A group with nodecycle's hook that does not retain is a warn (not a failure: exit 0).
#[tokio::test]
async fn a_group_that_does_not_retain() {
    let (out, v) = diagnose(Fault::NoRetention).await;
    assert_eq!(
        problems(&v),
        vec![("warn".into(), "retention".into(), "prod/general".into())],
        "{v:#}"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[tokio::test]
async fn a_managed_node_groups_asg_named_as_self_managed() {
    let (out, v) = diagnose(Fault::KindMismatch).await;
    // Only the group check fails: its launch template and hooks are EKS's, not checked.
    assert_eq!(problems(&v), vec![fail("group", "prod/general")], "{v:#}");
    assert_eq!(out.status.code(), Some(1));
}

#[tokio::test]
async fn bad_arguments_exit_2_and_a_missing_stack_fails() {
    let cloud = FakeCloud::start();
    for args in [
        vec!["--cluster", "prod/x"],
        vec!["--stack", "1-not-a-stack"],
        vec!["--no-such-flag"],
        vec!["--cluster"],
    ] {
        let out = doctor(&cloud, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    // Nothing deployed: the stack check fails (and the exit code says so), nothing crashes.
    let out = doctor(&cloud, &["--json", "--stack", "absent"]);
    assert_eq!(out.status.code(), Some(1));
    let v = report(&out);
    assert_eq!(v["checks"][0]["check"], "stack");
    assert_eq!(v["checks"][0]["status"], "FAIL");
}

/// A private-only endpoint with the functions outside any VPC (the stack's `FunctionSubnetIds`
/// empty or absent): the `endpoint` check fails and names the VPC settings to set; the
/// healthy deployment's public endpoint passes it.
#[tokio::test]
async fn a_private_only_endpoint_without_vpc_settings_fails() {
    let (out, v) = diagnose(Fault::PrivateEndpoint).await;
    assert!(problems(&v).contains(&fail("endpoint", CLUSTER)), "{v:#}");
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    let detail = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "endpoint")
        .map(|c| c.to_string())
        .unwrap_or_default();
    assert!(detail.contains("VpcSubnetIds"), "{detail}");
}
