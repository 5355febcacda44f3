//! template.yaml as CloudFormation deploys it: each role's permissions (action -> resources ->
//! conditions), access entries, event rules, invocation settings, alarms and outputs, read from
//! the translated template (AWS::LanguageExtensions + AWS::Serverless applied by
//! scripts/cfn/translate.py, every condition and intrinsic function evaluated for the parameter
//! values of each test). Also: the table the tests and the local run create has the deployed
//! keys and TTL, and every function is built from a workspace binary.
//!
//! Needs the template tools' venv (`scripts/lint-template.sh` installs it; scripts/test.sh runs
//! it first): `$NODECYCLE_LINT_VENV`, default `${NODECYCLE_VENV:-~/.cache/nodecycle/venv}-lint`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";

fn lint_python() -> PathBuf {
    let venv = std::env::var("NODECYCLE_LINT_VENV")
        .ok()
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let base = std::env::var("NODECYCLE_VENV")
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| {
                    format!("{}/.cache/nodecycle/venv", std::env::var("HOME").unwrap())
                });
            PathBuf::from(format!("{base}-lint"))
        });
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/lint-template.sh once (it installs aws-sam-translator there)",
        python.display()
    );
    python
}

/// Runs scripts/cfn/translate.py --resolve; Err(stderr) when the template is refused.
fn try_deployed(params: &[(&str, &str)]) -> Result<Value, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Result<Value, String>>>> = OnceLock::new();
    let key = format!("{params:?}");
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap().get(&key) {
        return hit.clone();
    }
    let mut cmd = Command::new(lint_python());
    cmd.arg(nodecycle_tests::repo_path("scripts/cfn/translate.py"))
        .arg("--resolve")
        .arg(nodecycle_tests::repo_path("template.yaml"));
    for (k, v) in params {
        cmd.arg("--param").arg(format!("{k}={v}"));
    }
    let out = cmd.output().expect("run scripts/cfn/translate.py");
    let result = if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    };
    cache.lock().unwrap().insert(key, result.clone());
    result
}

fn deployed(params: &[(&str, &str)]) -> Value {
    try_deployed(params).unwrap_or_else(|e| panic!("template refused for {params:?}: {e}"))
}

const MINIMAL: &[(&str, &str)] = &[("Clusters", "prod")];
const NODE_ROLES: &str =
    "arn:aws:iam::123456789012:role/prod-nodes,arn:aws:iam::123456789012:role/test-nodes";
const FULL: &[(&str, &str)] = &[
    ("Clusters", "prod,test-1"),
    ("PolicyPrefix", "/platform/nodecycle/"),
    ("AmiParameterPaths", "/golden/eks/,/team/ami/x86_64"),
    (
        "ParameterKmsKeyArn",
        "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    ),
    ("NodeRoleArns", NODE_ROLES),
    ("AlarmTopicArn", "arn:aws:sns:us-east-1:123456789012:alarms"),
    ("ReservedConcurrency", "3"),
    ("LifecycleHookName", "drain-first"),
    ("LogRetentionDays", "90"),
    ("LogLevel", "DEBUG"),
];

fn resources_of<'a>(t: &'a Value, kind: &str) -> Vec<(&'a str, &'a Value)> {
    t["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .map(|(k, r)| (k.as_str(), &r["Properties"]))
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
        Value::Null => vec![],
        other => panic!("expected a string or a list of strings, got {other}"),
    }
}

/// One permission: an allowed action on one resource under a condition block.
#[derive(Debug, Clone, PartialEq)]
struct Grant {
    action: String,
    resource: String,
    condition: Value,
}

/// Every Allow of each IAM role (its inline policies, and the RolePolicy/Policy resources
/// attached to it), by role logical id. Deny statements, NotAction and NotResource are refused:
/// the template uses none.
fn grants(t: &Value) -> BTreeMap<String, Vec<Grant>> {
    let mut out: BTreeMap<String, Vec<Grant>> = BTreeMap::new();
    let mut add = |role: &str, doc: &Value| {
        for st in doc["Statement"].as_array().unwrap() {
            assert_eq!(st["Effect"], "Allow", "{st}");
            assert!(st.get("NotAction").is_none() && st.get("NotResource").is_none());
            for action in strings(&st["Action"]) {
                for resource in strings(&st["Resource"]) {
                    out.entry(role.to_string()).or_default().push(Grant {
                        action: action.clone(),
                        resource,
                        condition: st.get("Condition").cloned().unwrap_or(Value::Null),
                    });
                }
            }
        }
    };
    for (name, role) in resources_of(t, "AWS::IAM::Role") {
        assert!(
            role.get("ManagedPolicyArns").is_none(),
            "{name}: managed policies hide what the role may do"
        );
        for p in role["Policies"].as_array().unwrap() {
            add(name, &p["PolicyDocument"]);
        }
    }
    for (_, p) in resources_of(t, "AWS::IAM::RolePolicy") {
        let role = p["RoleName"]
            .as_str()
            .unwrap()
            .strip_prefix("ref:")
            .unwrap();
        add(role, &p["PolicyDocument"]);
    }
    for (_, p) in resources_of(t, "AWS::IAM::Policy") {
        for role in strings(&p["Roles"]) {
            add(role.strip_prefix("ref:").unwrap(), &p["PolicyDocument"]);
        }
    }
    out
}

fn role_of(t: &Value, function: &str) -> String {
    let arn = t["Resources"][function]["Properties"]["Role"]
        .as_str()
        .unwrap();
    arn.strip_prefix("getatt:")
        .and_then(|r| r.strip_suffix(".Arn"))
        .unwrap()
        .to_string()
}

const FUNCTIONS: [&str; 4] = [
    "AmiWatcherFunction",
    "RotatorFunction",
    "InterruptionHandlerFunction",
    "OpsFunction",
];

fn grants_of(t: &Value, function: &str) -> Vec<Grant> {
    grants(t).remove(&role_of(t, function)).unwrap_or_default()
}

fn may(t: &Value, function: &str, action: &str) -> Vec<Grant> {
    grants_of(t, function)
        .into_iter()
        .filter(|g| g.action == action)
        .collect()
}

fn is_read_only(action: &str) -> bool {
    let verb = action.split(':').nth(1).unwrap();
    ["Describe", "Get", "List", "Query"]
        .iter()
        .any(|p| verb.starts_with(p))
}

fn arn(service: &str, rest: &str) -> String {
    format!("arn:aws:{service}:{REGION}:{ACCOUNT}:{rest}")
}

fn tag_condition(clusters: &[&str]) -> Value {
    json!({"StringEquals": {"aws:ResourceTag/eks:cluster-name": clusters}})
}

#[test]
fn table_definition_matches_the_code() {
    let t = deployed(MINIMAL);
    let table = &t["Resources"]["StateTable"];
    let props = &table["Properties"];
    assert_eq!(props["BillingMode"], "PAY_PER_REQUEST");
    let keys: Vec<(&str, &str)> = props["KeySchema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["AttributeName"].as_str().unwrap(),
                k["KeyType"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            (nodecycle::state::PK, "HASH"),
            (nodecycle::state::SK, "RANGE")
        ]
    );
    for a in props["AttributeDefinitions"].as_array().unwrap() {
        assert_eq!(a["AttributeType"], "S");
    }
    assert_eq!(
        props["TimeToLiveSpecification"],
        json!({"AttributeName": nodecycle::state::TTL, "Enabled": true})
    );
    // Production data: kept when the stack goes or the table is replaced, and undeletable by
    // accident.
    assert_eq!(props["DeletionProtectionEnabled"], true);
    assert_eq!(table["DeletionPolicy"], "Retain");
    assert_eq!(table["UpdateReplacePolicy"], "Retain");
    let queue = &t["Resources"]["DeadLetterQueue"];
    assert_eq!(queue["DeletionPolicy"], "Retain");
    assert_eq!(queue["UpdateReplacePolicy"], "Retain");
}

#[test]
fn functions_are_built_from_workspace_binaries_for_arm64() {
    let t = deployed(MINIMAL);
    let functions = resources_of(&t, "AWS::Lambda::Function");
    assert_eq!(functions.len(), 4, "{functions:?}");
    for (name, props) in functions {
        assert_eq!(props["Runtime"], "provided.al2023", "{name}");
        assert_eq!(props["Architectures"], json!(["arm64"]), "{name}");
        assert_eq!(props["Handler"], "bootstrap", "{name}");
        let meta = &t["Resources"][name]["Metadata"];
        assert_eq!(meta["BuildMethod"], "rust-cargolambda", "{name}");
        let binary = meta["BuildProperties"]["Binary"].as_str().unwrap();
        let manifest = nodecycle_tests::repo_path(&format!("functions/{binary}/Cargo.toml"));
        assert!(manifest.exists(), "{name} builds {binary}: no such crate");
    }
}

#[test]
fn functions_get_the_environment_the_code_reads() {
    let t = deployed(FULL);
    for f in FUNCTIONS {
        let env = &t["Resources"][f]["Properties"]["Environment"]["Variables"];
        assert_eq!(env[nodecycle::state::TABLE_ENV], "ref:StateTable", "{f}");
        assert_eq!(
            env[nodecycle::policy::source::PREFIX_ENV],
            "/platform/nodecycle/",
            "{f}"
        );
        let logging = &t["Resources"][f]["Properties"]["LoggingConfig"];
        // Lambda turns ApplicationLogLevel into AWS_LAMBDA_LOG_LEVEL, which logging::init reads.
        assert_eq!(logging["LogFormat"], "JSON", "{f}");
        assert_eq!(logging["ApplicationLogLevel"], "DEBUG", "{f}");
    }
    for f in ["RotatorFunction", "OpsFunction"] {
        let env = &t["Resources"][f]["Properties"]["Environment"]["Variables"];
        assert!(env["NODECYCLE_REPLACEMENT_TIMEOUT"].is_string(), "{f}");
        assert!(env["NODECYCLE_NODEGROUP_WAVE"].is_string(), "{f}");
    }
}

#[test]
fn no_role_may_mutate_with_a_wildcard_resource_or_action() {
    for params in [MINIMAL, FULL] {
        let t = deployed(params);
        let all = grants(&t);
        assert_eq!(all.len(), 4, "{:?}", all.keys());
        for (role, gs) in all {
            for g in gs {
                assert!(
                    !g.action.contains('*'),
                    "{role}: wildcard action {}",
                    g.action
                );
                if !is_read_only(&g.action) {
                    assert!(
                        g.resource != "*" && !g.resource.ends_with(":*"),
                        "{role}: {} on {}",
                        g.action,
                        g.resource
                    );
                }
            }
        }
    }
}

#[test]
fn auto_scaling_and_launch_template_changes_need_the_cluster_tag() {
    let t = deployed(FULL);
    let clusters = ["prod", "test-1"];
    for f in FUNCTIONS {
        for g in grants_of(&t, f) {
            let service = g.action.split(':').next().unwrap();
            if is_read_only(&g.action) || !["autoscaling", "ec2"].contains(&service) {
                continue;
            }
            let launch_template = g.resource.contains(":launch-template/");
            if service == "autoscaling" || launch_template {
                assert_eq!(g.condition, tag_condition(&clusters), "{f}: {g:?}");
                if service == "autoscaling" {
                    assert_eq!(
                        g.resource,
                        arn("autoscaling", "autoScalingGroup:*:autoScalingGroupName/*"),
                        "{f}"
                    );
                }
            } else if g.action == "ec2:RunInstances" {
                // The other resources of the launch check: only through a launch template
                // (which itself must carry the tag).
                assert_eq!(
                    g.condition,
                    json!({"ArnLike": {"ec2:LaunchTemplate": arn("ec2", "launch-template/*")}}),
                    "{f}: {g:?}"
                );
            } else {
                assert_eq!(g.action, "ec2:CreateTags", "{f}: {g:?}");
                assert_eq!(
                    g.condition,
                    json!({"StringEquals": {"ec2:CreateAction": "RunInstances"}}),
                    "{f}"
                );
            }
        }
    }
    // Who may change what.
    let changes = |f: &str| -> BTreeSet<String> {
        grants_of(&t, f)
            .into_iter()
            .filter(|g| !is_read_only(&g.action))
            .filter(|g| g.action.starts_with("autoscaling:") || g.action.starts_with("ec2:"))
            .map(|g| g.action)
            .collect()
    };
    assert_eq!(
        changes("RotatorFunction"),
        [
            "autoscaling:SetDesiredCapacity",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
            "autoscaling:UpdateAutoScalingGroup",
            "ec2:CreateLaunchTemplateVersion",
            "ec2:CreateTags",
            "ec2:ModifyLaunchTemplate",
            "ec2:RunInstances",
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(
        changes("OpsFunction"),
        [
            "autoscaling:SetDesiredCapacity",
            "autoscaling:TerminateInstanceInAutoScalingGroup"
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(
        changes("InterruptionHandlerFunction"),
        [
            "autoscaling:CompleteLifecycleAction",
            "autoscaling:RecordLifecycleActionHeartbeat"
        ]
        .map(String::from)
        .into()
    );
    assert!(changes("AmiWatcherFunction").is_empty());
}

#[test]
fn a_pinned_template_version_can_be_launched_through_tagged_templates() {
    // Auto Scaling checks the caller's ec2:RunInstances on every resource of the launch when a
    // group is pointed at a template version.
    let t = deployed(MINIMAL);
    let run: BTreeSet<String> = may(&t, "RotatorFunction", "ec2:RunInstances")
        .into_iter()
        .map(|g| g.resource)
        .collect();
    for kind in [
        "instance",
        "volume",
        "network-interface",
        "subnet",
        "security-group",
        "launch-template",
    ] {
        assert!(run.contains(&arn("ec2", &format!("{kind}/*"))), "{kind}");
    }
    assert!(run.contains(&format!("arn:aws:ec2:{REGION}::image/*")));
}

#[test]
fn node_groups_may_be_updated_only_in_the_named_clusters() {
    for (clusters, expected) in [
        ("prod", vec!["prod"]),
        ("prod,test-1,edge_2", vec!["edge_2", "prod", "test-1"]),
    ] {
        let t = deployed(&[("Clusters", clusters)]);
        for action in ["eks:UpdateNodegroupVersion", "eks:UpdateNodegroupConfig"] {
            let rotator: BTreeSet<String> = may(&t, "RotatorFunction", action)
                .into_iter()
                .map(|g| {
                    assert_eq!(g.condition, Value::Null);
                    g.resource
                })
                .collect();
            let want: BTreeSet<String> = expected
                .iter()
                .map(|c| arn("eks", &format!("nodegroup/{c}/*/*")))
                .collect();
            assert_eq!(rotator, want, "{clusters}: {action}");
            for other in [
                "AmiWatcherFunction",
                "InterruptionHandlerFunction",
                "OpsFunction",
            ] {
                assert!(may(&t, other, action).is_empty(), "{other}: {action}");
            }
        }
    }
}

#[test]
fn pass_role_only_for_the_node_roles_given() {
    let without = deployed(MINIMAL);
    for f in FUNCTIONS {
        assert!(may(&without, f, "iam:PassRole").is_empty(), "{f}");
    }
    let with = deployed(&[("Clusters", "prod"), ("NodeRoleArns", NODE_ROLES)]);
    let pass = may(&with, "RotatorFunction", "iam:PassRole");
    let roles: Vec<&str> = pass.iter().map(|g| g.resource.as_str()).collect();
    assert_eq!(roles, NODE_ROLES.split(',').collect::<Vec<_>>());
    for g in &pass {
        assert_eq!(
            g.condition,
            json!({"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}})
        );
    }
    for f in [
        "AmiWatcherFunction",
        "InterruptionHandlerFunction",
        "OpsFunction",
    ] {
        assert!(may(&with, f, "iam:PassRole").is_empty(), "{f}");
    }
}

#[test]
fn parameter_reads_are_scoped_to_the_prefix_the_named_paths_and_public_parameters() {
    let public = format!("arn:aws:ssm:{REGION}::parameter/aws/service/*");
    let policies = arn("ssm", "parameter/platform/nodecycle/*");
    let t = deployed(FULL);
    let mut watcher_reads = BTreeSet::new();
    for f in FUNCTIONS {
        for g in grants_of(&t, f)
            .into_iter()
            .filter(|g| g.action.starts_with("ssm:"))
        {
            assert!(is_read_only(&g.action), "{f}: {g:?}");
            assert_ne!(g.resource, arn("ssm", "parameter/*"), "{f}");
            if g.action == "ssm:GetParametersByPath" {
                assert_eq!(g.resource, policies, "{f}");
            }
            if f == "AmiWatcherFunction" {
                watcher_reads.insert(g.resource);
            } else {
                assert!(g.resource == policies || g.resource == public, "{f}: {g:?}");
            }
        }
    }
    assert_eq!(
        watcher_reads,
        BTreeSet::from([
            policies.clone(),
            public.clone(),
            arn("ssm", "parameter/golden/eks/*"),
            arn("ssm", "parameter/team/ami/x86_64*"),
        ])
    );
    // Without AMI paths, the watcher reads only the policies and the public parameters.
    let minimal = deployed(MINIMAL);
    let reads: BTreeSet<String> = grants_of(&minimal, "AmiWatcherFunction")
        .into_iter()
        .filter(|g| g.action.starts_with("ssm:"))
        .map(|g| g.resource)
        .collect();
    assert_eq!(
        reads,
        BTreeSet::from([arn("ssm", "parameter/nodecycle/pools/*"), public])
    );
}

#[test]
fn secure_strings_are_decrypted_only_with_the_key_given_and_only_through_ssm() {
    let minimal = deployed(MINIMAL);
    for f in FUNCTIONS {
        assert!(
            grants_of(&minimal, f)
                .iter()
                .all(|g| !g.action.starts_with("kms:")),
            "{f}"
        );
    }
    let t = deployed(FULL);
    for f in FUNCTIONS {
        let kms: Vec<Grant> = grants_of(&t, f)
            .into_iter()
            .filter(|g| g.action.starts_with("kms:"))
            .collect();
        assert_eq!(kms.len(), 1, "{f}: {kms:?}");
        assert_eq!(kms[0].action, "kms:Decrypt");
        assert_eq!(
            kms[0].resource,
            arn("kms", "key/1234abcd-12ab-34cd-56ef-1234567890ab")
        );
        assert_eq!(
            kms[0].condition,
            json!({"StringEquals": {"kms:ViaService": format!("ssm.{REGION}.amazonaws.com")}})
        );
    }
}

#[test]
fn each_role_writes_only_its_own_log_group_and_the_dead_letter_queue() {
    let t = deployed(FULL);
    for f in FUNCTIONS {
        let group = t["Resources"][f]["Properties"]["LoggingConfig"]["LogGroup"]
            .as_str()
            .unwrap()
            .strip_prefix("ref:")
            .unwrap()
            .to_string();
        assert_eq!(
            t["Resources"][&group]["Properties"]["RetentionInDays"], "90",
            "{f}"
        );
        let logs: BTreeSet<String> = grants_of(&t, f)
            .into_iter()
            .filter(|g| g.action.starts_with("logs:"))
            .map(|g| format!("{} {}", g.action, g.resource))
            .collect();
        assert_eq!(
            logs,
            BTreeSet::from([
                format!("logs:CreateLogStream getatt:{group}.Arn"),
                format!("logs:PutLogEvents getatt:{group}.Arn"),
            ]),
            "{f}"
        );
        let sqs: Vec<String> = grants_of(&t, f)
            .into_iter()
            .filter(|g| g.action.starts_with("sqs:"))
            .map(|g| format!("{} {}", g.action, g.resource))
            .collect();
        assert_eq!(sqs, ["sqs:SendMessage getatt:DeadLetterQueue.Arn"], "{f}");
    }
}

#[test]
fn failed_asynchronous_invocations_go_to_the_dead_letter_queue() {
    let t = deployed(MINIMAL);
    let configs: BTreeMap<String, &Value> = resources_of(&t, "AWS::Lambda::EventInvokeConfig")
        .into_iter()
        .map(|(_, p)| {
            (
                p["FunctionName"]
                    .as_str()
                    .unwrap()
                    .strip_prefix("ref:")
                    .unwrap()
                    .to_string(),
                p,
            )
        })
        .collect();
    let expected = [
        ("AmiWatcherFunction", 2, 900),
        // The next tick, a minute later, supersedes a failed pass.
        ("RotatorFunction", 0, 60),
        // An interruption warning is useless once the instance is gone.
        ("InterruptionHandlerFunction", 2, 120),
        ("OpsFunction", 0, 300),
    ];
    assert_eq!(configs.len(), expected.len());
    for (f, retries, age) in expected {
        let c = configs[f];
        assert_eq!(c["MaximumRetryAttempts"], retries, "{f}");
        assert_eq!(c["MaximumEventAgeInSeconds"], age, "{f}");
        assert_eq!(
            c["DestinationConfig"]["OnFailure"]["Destination"], "getatt:DeadLetterQueue.Arn",
            "{f}"
        );
    }
}

#[test]
fn every_function_that_talks_to_kubernetes_has_an_access_entry_in_every_cluster() {
    let t = deployed(&[("Clusters", "prod,test-1,edge_2")]);
    let mut entries = BTreeSet::new();
    for (_, e) in resources_of(&t, "AWS::EKS::AccessEntry") {
        assert_eq!(e["Type"], "STANDARD");
        assert_eq!(e["KubernetesGroups"], json!(["nodecycle"]));
        assert!(e.get("AccessPolicies").is_none(), "no access policy: {e}");
        entries.insert((
            e["ClusterName"].as_str().unwrap().to_string(),
            e["PrincipalArn"].as_str().unwrap().to_string(),
        ));
    }
    let mut expected = BTreeSet::new();
    for cluster in ["prod", "test-1", "edge_2"] {
        for f in [
            "RotatorFunction",
            "InterruptionHandlerFunction",
            "OpsFunction",
        ] {
            expected.insert((
                cluster.to_string(),
                format!("getatt:{}.Arn", role_of(&t, f)),
            ));
        }
    }
    assert_eq!(entries, expected);

    let off = deployed(&[("Clusters", "prod"), ("CreateAccessEntries", "false")]);
    assert!(resources_of(&off, "AWS::EKS::AccessEntry").is_empty());
}

#[test]
fn the_cluster_list_is_required_and_each_name_checked() {
    for clusters in ["", "prod,,test", "prod,not a name"] {
        let err = try_deployed(&[("Clusters", clusters)]).unwrap_err();
        assert!(err.contains("Clusters"), "{clusters:?}: {err}");
    }
}

fn rules(t: &Value) -> BTreeMap<&str, &Value> {
    resources_of(t, "AWS::Events::Rule").into_iter().collect()
}

/// The rule's pattern as data (a rule built as a JSON string is parsed).
fn pattern(rule: &Value) -> Value {
    match &rule["EventPattern"] {
        Value::String(s) => serde_json::from_str(s).unwrap(),
        other => other.clone(),
    }
}

#[test]
fn parameter_changes_wake_the_watcher_only_for_watched_parameters() {
    let t = deployed(MINIMAL);
    let rule = rules(&t)["AmiWatcherParameterChangeRule"];
    assert_eq!(
        pattern(rule),
        json!({"source": ["aws.ssm"], "detail-type": ["Parameter Store Change"],
               "detail": {"name": [{"prefix": "/nodecycle/pools/"}]}})
    );
    let t = deployed(FULL);
    let rule = rules(&t)["AmiWatcherParameterChangeRule"];
    assert_eq!(
        pattern(rule)["detail"]["name"],
        json!([{"prefix": "/platform/nodecycle/"}, {"prefix": "/golden/eks/"},
               {"prefix": "/team/ami/x86_64"}])
    );
    assert_eq!(rule["Targets"][0]["Arn"], "getatt:AmiWatcherFunction.Arn");
}

#[test]
fn only_the_configured_lifecycle_hook_reaches_the_interruption_handler() {
    for (params, hook) in [(MINIMAL, "nodecycle-drain"), (FULL, "drain-first")] {
        let t = deployed(params);
        let lifecycle: Vec<Value> = rules(&t)
            .values()
            .map(|r| pattern(r))
            .filter(|p| p["source"] == json!(["aws.autoscaling"]))
            .collect();
        assert_eq!(lifecycle.len(), 1);
        assert_eq!(lifecycle[0]["detail"]["LifecycleHookName"], json!([hook]));
        assert_eq!(t["Outputs"]["LifecycleHookName"], hook);
    }
}

#[test]
fn every_rule_is_listed_in_the_outputs_and_targets_a_function() {
    let t = deployed(MINIMAL);
    let listed: BTreeSet<String> = t["Outputs"]["EventRuleNames"]
        .as_str()
        .unwrap()
        .split(',')
        .map(|r| r.strip_prefix("ref:").unwrap().to_string())
        .collect();
    let all: BTreeSet<String> = rules(&t).keys().map(|k| k.to_string()).collect();
    assert_eq!(listed, all);
    for (name, rule) in rules(&t) {
        let target = rule["Targets"][0]["Arn"].as_str().unwrap();
        let function = target
            .strip_prefix("getatt:")
            .and_then(|x| x.strip_suffix(".Arn"))
            .unwrap();
        assert!(FUNCTIONS.contains(&function), "{name}: {target}");
    }
}

#[test]
fn outputs_follow_the_stack_contract() {
    let t = deployed(FULL);
    let names: BTreeSet<&str> = t["Outputs"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let contract = BTreeSet::from([
        "StateTableName",
        "PolicyPrefix",
        "LifecycleHookName",
        "ClusterNames",
        "AmiWatcherRoleArn",
        "RotatorRoleArn",
        "InterruptionHandlerRoleArn",
        "OpsRoleArn",
        "AmiWatcherFunctionName",
        "RotatorFunctionName",
        "InterruptionHandlerFunctionName",
        "OpsFunctionName",
        "EventRuleNames",
        "DeadLetterQueueUrl",
        "DeadLetterQueueArn",
    ]);
    assert_eq!(names, contract);
    for needed in nodecycle::doctor::contract::REQUIRED {
        assert!(names.contains(needed), "doctor reads output {needed}");
    }
    assert_eq!(t["Outputs"]["ClusterNames"], "prod,test-1");
    assert_eq!(t["Outputs"]["PolicyPrefix"], "/platform/nodecycle/");
    for f in FUNCTIONS {
        let short = f.strip_suffix("Function").unwrap();
        assert_eq!(
            t["Outputs"][format!("{short}RoleArn")],
            format!("getatt:{}.Arn", role_of(&t, f))
        );
        assert_eq!(
            t["Outputs"][format!("{short}FunctionName")],
            format!("ref:{f}")
        );
    }
}

#[test]
fn alarms_notify_the_topic_only_when_one_is_given() {
    let watched = |t: &Value| -> BTreeSet<String> {
        resources_of(t, "AWS::CloudWatch::Alarm")
            .into_iter()
            .map(|(_, a)| {
                let dim = a["Dimensions"][0]["Value"].as_str().unwrap_or("");
                format!(
                    "{}/{} {dim}",
                    a["Namespace"].as_str().unwrap(),
                    a["MetricName"].as_str().unwrap()
                )
            })
            .collect()
    };
    let t = deployed(MINIMAL);
    let mut expected = BTreeSet::from([
        "AWS/SQS/ApproximateNumberOfMessagesVisible getatt:DeadLetterQueue.QueueName".to_string(),
        "nodecycle/PoolsHalted ".to_string(),
        "nodecycle/ResolutionFailures ".to_string(),
    ]);
    for f in FUNCTIONS {
        expected.insert(format!("AWS/Lambda/Errors ref:{f}"));
        expected.insert(format!("AWS/Lambda/Throttles ref:{f}"));
    }
    assert_eq!(watched(&t), expected);
    for (name, a) in resources_of(&t, "AWS::CloudWatch::Alarm") {
        assert!(a.get("AlarmActions").is_none(), "{name}");
        assert!(a.get("OKActions").is_none(), "{name}");
    }
    let t = deployed(FULL);
    for (name, a) in resources_of(&t, "AWS::CloudWatch::Alarm") {
        let topic = json!(["arn:aws:sns:us-east-1:123456789012:alarms"]);
        assert_eq!(a["AlarmActions"], topic, "{name}");
        assert_eq!(a["OKActions"], topic, "{name}");
    }
    // A halted pool alarms at once.
    let halted = resources_of(&t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .find(|(_, a)| a["MetricName"] == "PoolsHalted")
        .unwrap()
        .1;
    assert_eq!(halted["Statistic"], "Maximum");
    assert_eq!(halted["Threshold"], 1);
    assert_eq!(
        halted["ComparisonOperator"],
        "GreaterThanOrEqualToThreshold"
    );
}

#[test]
fn concurrency_is_reserved_only_when_asked_and_never_for_interruptions() {
    let t = deployed(MINIMAL);
    for f in FUNCTIONS {
        assert!(
            t["Resources"][f]["Properties"]
                .get("ReservedConcurrentExecutions")
                .is_none(),
            "{f}"
        );
    }
    let t = deployed(FULL);
    for f in ["AmiWatcherFunction", "RotatorFunction", "OpsFunction"] {
        assert_eq!(
            t["Resources"][f]["Properties"]["ReservedConcurrentExecutions"], "3",
            "{f}"
        );
    }
    assert!(
        t["Resources"]["InterruptionHandlerFunction"]["Properties"]
            .get("ReservedConcurrentExecutions")
            .is_none()
    );
}

/// The ami-watcher (promotion) and ops (`status`) read the promotion alarms pool policies name
/// (this account's alarms only); nothing else reads alarms and no function changes one.
#[test]
fn only_the_watcher_and_ops_read_alarms_and_nothing_changes_them() {
    let t = deployed(FULL);
    for f in ["AmiWatcherFunction", "OpsFunction"] {
        let reads = may(&t, f, "cloudwatch:DescribeAlarms");
        assert_eq!(reads.len(), 1, "{f}: {reads:?}");
        assert_eq!(reads[0].resource, arn("cloudwatch", "alarm:*"));
    }
    for f in FUNCTIONS {
        for g in grants_of(&t, f) {
            if g.action.starts_with("cloudwatch:") {
                assert!(
                    matches!(f, "AmiWatcherFunction" | "OpsFunction")
                        && g.action == "cloudwatch:DescribeAlarms",
                    "{f}: {g:?}"
                );
            }
        }
    }
}

#[test]
fn every_function_may_put_events_on_the_default_bus_only_as_nodecycle() {
    for params in [MINIMAL, FULL] {
        let t = deployed(params);
        for f in FUNCTIONS {
            let puts = may(&t, f, "events:PutEvents");
            assert_eq!(puts.len(), 1, "{f}: {puts:?}");
            assert_eq!(puts[0].resource, arn("events", "event-bus/default"), "{f}");
            assert_eq!(
                puts[0].condition,
                json!({"StringEquals": {"events:source": "nodecycle"}}),
                "{f}: only events with source nodecycle"
            );
            for g in grants_of(&t, f) {
                assert!(
                    !g.action.starts_with("events:") || g.action == "events:PutEvents",
                    "{f}: {g:?}"
                );
            }
        }
    }
}

#[test]
fn images_are_checked_against_instance_types_and_lifecycle_actions_against_the_hook() {
    let t = deployed(FULL);
    // The architecture check before an image becomes desired or is written into a group.
    for f in ["AmiWatcherFunction", "RotatorFunction"] {
        let reads = may(&t, f, "ec2:DescribeInstanceTypes");
        assert_eq!(reads.len(), 1, "{f}: {reads:?}");
    }
    // Only the stack's hook is answered: the handler is told its name.
    let env =
        &t["Resources"]["InterruptionHandlerFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(env["NODECYCLE_LIFECYCLE_HOOK"], "drain-first", "{env}");
}
