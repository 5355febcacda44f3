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

use crate::support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

const REGION: &str = "us-east-1";
const ACCOUNT: &str = "123456789012";

fn lint_python() -> PathBuf {
    support::lint_venv().join("bin/python")
}

/// Runs scripts/cfn/translate.py --resolve on template.yaml; Err(stderr) when refused.
fn try_deployed(params: &[(&str, &str)]) -> Result<Value, String> {
    try_resolved("template.yaml", params)
}

/// [`try_deployed`] for any template of the repository (`template`, relative path).
fn try_resolved(template: &str, params: &[(&str, &str)]) -> Result<Value, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Result<Value, String>>>> = OnceLock::new();
    let key = format!("{template} {params:?}");
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap().get(&key) {
        return hit.clone();
    }
    let mut cmd = Command::new(lint_python());
    cmd.arg(nodecycle_tests::repo_path("scripts/cfn/translate.py"))
        .arg("--resolve")
        .arg(nodecycle_tests::repo_path(template));
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

/// `*` (any run) and `?` (one character) as IAM matches resources and `StringLike`/`ArnLike`.
fn glob(pattern: &str, text: &str) -> bool {
    wildmatch::WildMatch::new(pattern).matches(text)
}

/// A request as IAM sees it: the action, the resource and the condition keys it carries (a key
/// absent from `context` is absent from the request).
struct Request<'a> {
    action: &'a str,
    resource: String,
    context: BTreeMap<&'a str, Vec<&'a str>>,
}

fn request<'a>(action: &'a str, resource: String, context: &[(&'a str, &'a str)]) -> Request<'a> {
    let mut map: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, v) in context {
        map.entry(k).or_default().push(v);
    }
    Request {
        action,
        resource,
        context: map,
    }
}

/// Whether a condition block holds for `context` (the operators the template uses:
/// StringEquals, StringLike, ArnLike, ArnEquals, Bool, Null, and ForAllValues:/ForAnyValue: over
/// multivalued keys). An operator it does not know fails the test.
fn holds(condition: &Value, context: &BTreeMap<&str, Vec<&str>>) -> bool {
    let Some(ops) = condition.as_object() else {
        return condition.is_null();
    };
    ops.iter().all(|(op, keys)| {
        keys.as_object().unwrap().iter().all(|(key, want)| {
            let want = strings(want);
            let have = context.get(key.as_str());
            let (set, base) = match op.split_once(':') {
                Some((set, base)) => (Some(set), base),
                None => (None, op.as_str()),
            };
            let matches = |v: &str| {
                want.iter().any(|w| match base {
                    "StringEquals" | "ArnEquals" | "Bool" => w == v,
                    "StringLike" | "ArnLike" => glob(w, v),
                    other => panic!("operator {other} not modelled"),
                })
            };
            match (set, base) {
                (None, "Null") => {
                    assert_eq!(want.len(), 1);
                    (want[0] == "true") == have.is_none()
                }
                (None, _) => have.is_some_and(|h| h.len() == 1 && matches(h[0])),
                (Some("ForAllValues"), _) => have.is_none_or(|h| h.iter().all(|v| matches(v))),
                (Some("ForAnyValue"), _) => have.is_some_and(|h| h.iter().any(|v| matches(v))),
                (Some(other), _) => panic!("set operator {other} not modelled"),
            }
        })
    })
}

/// Whether `function`'s role allows `req` (the template has Allow statements only).
fn allows(t: &Value, function: &str, req: &Request<'_>) -> bool {
    role_allows(t, &role_of(t, function), req)
}

/// Whether the role of logical id `role` allows `req`.
fn role_allows(t: &Value, role: &str, req: &Request<'_>) -> bool {
    grants(t).remove(role).unwrap_or_default().iter().any(|g| {
        g.action == req.action
            && glob(&g.resource, &req.resource)
            && holds(&g.condition, &req.context)
    })
}

fn launch_template() -> String {
    arn("ec2", "launch-template/lt-0123456789abcdef0")
}

fn group() -> String {
    arn(
        "autoscaling",
        "autoScalingGroup:1a2b3c4d-0000-0000-0000-000000000000:autoScalingGroupName/prod-general",
    )
}

const CLUSTER_TAG: &str = "aws:ResourceTag/eks:cluster-name";
const MANAGED_TAG: &str = "aws:ResourceTag/nodecycle.dev/managed";
const NODEGROUP_TAG: &str = "aws:ResourceTag/eks:nodegroup-name";

#[test]
fn launch_template_versions_only_on_opted_in_templates_never_on_ones_eks_created() {
    for params in [MINIMAL, FULL] {
        let t = deployed(params);
        for action in [
            "ec2:CreateLaunchTemplateVersion",
            "ec2:ModifyLaunchTemplate",
        ] {
            let on = |tags: &[(&'static str, &'static str)]| {
                allows(
                    &t,
                    "RotatorFunction",
                    &request(action, launch_template(), tags),
                )
            };
            // The owner's template of a cluster of the stack, opted in.
            assert!(
                on(&[(CLUSTER_TAG, "prod"), (MANAGED_TAG, "true")]),
                "{action}"
            );
            // The cluster tag alone, or an opt-in other than "true": no.
            assert!(!on(&[(CLUSTER_TAG, "prod")]), "{action}");
            assert!(
                !on(&[(CLUSTER_TAG, "prod"), (MANAGED_TAG, "false")]),
                "{action}"
            );
            // Opted in, but another cluster's, or no cluster tag.
            assert!(
                !on(&[(CLUSTER_TAG, "other"), (MANAGED_TAG, "true")]),
                "{action}"
            );
            assert!(!on(&[(MANAGED_TAG, "true")]), "{action}");
            // A template EKS created for a managed node group (tags copied from the owner's
            // template included): never.
            assert!(
                !on(&[
                    (CLUSTER_TAG, "prod"),
                    (MANAGED_TAG, "true"),
                    (NODEGROUP_TAG, "general")
                ]),
                "{action}"
            );
            for other in [
                "AmiWatcherFunction",
                "InterruptionHandlerFunction",
                "OpsFunction",
            ] {
                assert!(
                    !allows(
                        &t,
                        other,
                        &request(
                            action,
                            launch_template(),
                            &[(CLUSTER_TAG, "prod"), (MANAGED_TAG, "true")]
                        )
                    ),
                    "{other}: {action}"
                );
            }
        }
    }
}

#[test]
fn groups_are_updated_only_when_the_stack_enables_it() {
    let tagged = [(CLUSTER_TAG, "prod")];
    let opted_in = [(CLUSTER_TAG, "prod"), (MANAGED_TAG, "true")];
    let update = |t: &Value, tags: &[(&'static str, &'static str)]| {
        allows(
            t,
            "RotatorFunction",
            &request("autoscaling:UpdateAutoScalingGroup", group(), tags),
        )
    };
    let launch_through = |t: &Value, tags: &[(&'static str, &'static str)]| {
        allows(
            t,
            "RotatorFunction",
            &request("ec2:RunInstances", launch_template(), tags),
        )
    };
    // Default: no UpdateAutoScalingGroup, no RunInstances at all, no PassRole (even with node
    // roles given).
    for params in [
        MINIMAL,
        &[("Clusters", "prod"), ("NodeRoleArns", NODE_ROLES)][..],
    ] {
        let t = deployed(params);
        assert!(!update(&t, &tagged));
        assert!(!launch_through(&t, &opted_in));
        for f in FUNCTIONS {
            assert!(may(&t, f, "ec2:RunInstances").is_empty(), "{f}");
            assert!(may(&t, f, "iam:PassRole").is_empty(), "{f}");
            assert!(
                may(&t, f, "autoscaling:UpdateAutoScalingGroup").is_empty(),
                "{f}"
            );
        }
    }
    // Enabled: tagged groups of the stack's clusters only; the launch check through opted-in
    // templates only; the launch's other resources only through a template.
    let t = deployed(&[("Clusters", "prod"), ("AutoScalingGroupUpdates", "Enabled")]);
    assert!(update(&t, &tagged));
    assert!(!update(&t, &[(CLUSTER_TAG, "other")]));
    assert!(!update(&t, &[]));
    assert!(launch_through(&t, &opted_in));
    assert!(!launch_through(&t, &tagged));
    assert!(!launch_through(
        &t,
        &[
            (CLUSTER_TAG, "prod"),
            (MANAGED_TAG, "true"),
            (NODEGROUP_TAG, "g")
        ]
    ));
    let lt = launch_template();
    for kind in [
        "instance",
        "volume",
        "network-interface",
        "subnet",
        "security-group",
    ] {
        let resource = arn("ec2", &format!("{kind}/x-1"));
        assert!(
            allows(
                &t,
                "RotatorFunction",
                &request(
                    "ec2:RunInstances",
                    resource.clone(),
                    &[("ec2:LaunchTemplate", &lt)]
                )
            ),
            "{kind}"
        );
        assert!(
            !allows(
                &t,
                "RotatorFunction",
                &request("ec2:RunInstances", resource, &[])
            ),
            "{kind} without a template"
        );
    }
    let image = format!("arn:aws:ec2:{REGION}::image/ami-1");
    assert!(allows(
        &t,
        "RotatorFunction",
        &request("ec2:RunInstances", image, &[("ec2:LaunchTemplate", &lt)])
    ));
    let instance = arn("ec2", "instance/i-1");
    assert!(allows(
        &t,
        "RotatorFunction",
        &request(
            "ec2:CreateTags",
            instance.clone(),
            &[("ec2:CreateAction", "RunInstances")]
        )
    ));
    assert!(!allows(
        &t,
        "RotatorFunction",
        &request("ec2:CreateTags", instance, &[])
    ));
    for f in [
        "AmiWatcherFunction",
        "InterruptionHandlerFunction",
        "OpsFunction",
    ] {
        assert!(
            !allows(
                &t,
                f,
                &request("autoscaling:UpdateAutoScalingGroup", group(), &tagged)
            ),
            "{f}"
        );
    }
    // The environment tells the rotator (it refuses pinned groups itself when disabled).
    let env = |t: &Value| {
        t["Resources"]["RotatorFunction"]["Properties"]["Environment"]["Variables"]["NODECYCLE_AUTOSCALING_GROUP_UPDATES"].clone()
    };
    assert_eq!(env(&t), "Enabled");
    assert_eq!(env(&deployed(MINIMAL)), "Disabled");
    assert!(try_deployed(&[("Clusters", "prod"), ("AutoScalingGroupUpdates", "yes")]).is_err());
}

#[test]
fn group_changes_need_the_cluster_tag() {
    let t = deployed(&[
        ("Clusters", "prod,test-1"),
        ("AutoScalingGroupUpdates", "Enabled"),
    ]);
    let changes = |f: &str| -> BTreeSet<String> {
        grants_of(&t, f)
            .into_iter()
            .filter(|g| g.action.starts_with("autoscaling:") && !is_read_only(&g.action))
            .map(|g| g.action)
            .collect()
    };
    let expected = [
        (
            "RotatorFunction",
            vec![
                "autoscaling:ResumeProcesses",
                "autoscaling:SetDesiredCapacity",
                "autoscaling:SuspendProcesses",
                "autoscaling:TerminateInstanceInAutoScalingGroup",
                "autoscaling:UpdateAutoScalingGroup",
            ],
        ),
        (
            "OpsFunction",
            vec![
                "autoscaling:SetDesiredCapacity",
                "autoscaling:TerminateInstanceInAutoScalingGroup",
            ],
        ),
        (
            "InterruptionHandlerFunction",
            vec![
                "autoscaling:CompleteLifecycleAction",
                "autoscaling:RecordLifecycleActionHeartbeat",
            ],
        ),
        ("AmiWatcherFunction", vec![]),
    ];
    for (f, actions) in expected {
        assert_eq!(
            changes(f),
            actions.iter().map(|a| a.to_string()).collect(),
            "{f}"
        );
        for action in actions {
            for cluster in ["prod", "test-1"] {
                assert!(
                    allows(&t, f, &request(action, group(), &[(CLUSTER_TAG, cluster)])),
                    "{f}: {action} {cluster}"
                );
            }
            assert!(
                !allows(&t, f, &request(action, group(), &[(CLUSTER_TAG, "other")])),
                "{f}: {action}"
            );
            assert!(
                !allows(&t, f, &request(action, group(), &[])),
                "{f}: {action} untagged"
            );
        }
    }
}

/// The partition keys each role may read and write (`dynamodb:LeadingKeys`), and the item
/// actions: GetItem, PutItem, Query (the Store port's get/put/query), nothing else.
#[test]
fn each_role_reaches_only_the_partitions_its_code_uses() {
    let t = deployed(FULL);
    let table = "getatt:StateTable.Arn".to_string();
    let reach = |f: &str, action: &'static str, pk: &'static str| {
        allows(
            &t,
            f,
            &request(action, table.clone(), &[("dynamodb:LeadingKeys", pk)]),
        )
    };
    let pool = "POOL#prod/general";
    let cases: [(&str, &[&str], &[&str]); 4] = [
        (
            "AmiWatcherFunction",
            &[pool, "QUARANTINE"],
            &["LEASE#prod", "EVENT#e-1", "AUDIT", "DEPLOYMENT"],
        ),
        (
            "RotatorFunction",
            // DEPLOYMENT: the stop switch (read each pass).
            &[pool, "LEASE#prod", "QUARANTINE", "DEPLOYMENT"],
            &["EVENT#e-1"],
        ),
        (
            "InterruptionHandlerFunction",
            &[pool, "EVENT#e-1"],
            &["LEASE#prod", "QUARANTINE", "DEPLOYMENT", "AUDIT"],
        ),
        (
            "OpsFunction",
            // AUDIT: requests refused at parsing or naming no known pool.
            &[pool, "QUARANTINE", "AUDIT", "DEPLOYMENT"],
            &["LEASE#prod", "EVENT#e-1"],
        ),
    ];
    for (f, yes, no) in cases {
        for action in ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"] {
            for pk in yes {
                assert!(reach(f, action, pk), "{f}: {action} {pk}");
            }
            for pk in no
                .iter()
                .chain(&["QUARANTINEX", "AUDIT#x", "pool#prod/general", ""])
            {
                assert!(!reach(f, action, pk), "{f}: {action} {pk}");
            }
            // A request carrying no partition key (a Scan-like request) is refused.
            assert!(
                !allows(&t, f, &request(action, table.clone(), &[])),
                "{f}: {action}"
            );
        }
        for action in [
            "dynamodb:Scan",
            "dynamodb:DeleteItem",
            "dynamodb:UpdateItem",
            "dynamodb:BatchWriteItem",
        ] {
            assert!(!reach(f, action, pool), "{f}: {action}");
        }
    }
}

/// The EKS actions each function's code calls: describes, and the rotator's node group updates.
const EKS_ACTIONS: [(&str, &[&str]); 4] = [
    (
        "AmiWatcherFunction",
        &["eks:DescribeCluster", "eks:DescribeNodegroup"],
    ),
    (
        "RotatorFunction",
        &[
            "eks:DescribeCluster",
            "eks:DescribeNodegroup",
            "eks:DescribeUpdate",
            "eks:UpdateNodegroupVersion",
            "eks:UpdateNodegroupConfig",
        ],
    ),
    ("InterruptionHandlerFunction", &["eks:DescribeCluster"]),
    (
        "OpsFunction",
        &[
            "eks:DescribeCluster",
            "eks:DescribeNodegroup",
            "eks:DescribeUpdate",
        ],
    ),
];

/// eks:Describe* only on the stack's clusters and their node groups, only the describes each
/// function's code calls.
#[test]
fn clusters_are_described_only_when_they_are_the_stacks() {
    let t = deployed(&[("Clusters", "prod,test-1")]);
    let cluster = |c: &str| arn("eks", &format!("cluster/{c}"));
    let nodegroup = |c: &str| arn("eks", &format!("nodegroup/{c}/general/1a2b"));
    for (f, actions) in EKS_ACTIONS {
        let actions: Vec<&str> = actions
            .iter()
            .copied()
            .filter(|a| a.starts_with("eks:Describe"))
            .collect();
        let granted: BTreeSet<String> = grants_of(&t, f)
            .into_iter()
            .filter(|g| g.action.starts_with("eks:Describe"))
            .map(|g| g.action)
            .collect();
        assert_eq!(
            granted,
            actions.iter().map(|a| a.to_string()).collect(),
            "{f}"
        );
        for action in &actions {
            let resource = if *action == "eks:DescribeNodegroup" {
                nodegroup
            } else {
                cluster
            };
            for c in ["prod", "test-1"] {
                assert!(
                    allows(&t, f, &request(action, resource(c), &[])),
                    "{f}: {action} {c}"
                );
            }
            for c in ["staging", "prod-2", "test"] {
                assert!(
                    !allows(&t, f, &request(action, resource(c), &[])),
                    "{f}: {action} {c}"
                );
            }
        }
    }
}

#[test]
fn trace_is_no_log_level() {
    let err = try_deployed(&[("Clusters", "prod"), ("LogLevel", "TRACE")]).unwrap_err();
    assert!(err.contains("LogLevel"), "{err}");
    for level in ["DEBUG", "INFO", "WARN", "ERROR"] {
        deployed(&[("Clusters", "prod"), ("LogLevel", level)]);
    }
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
    let with = deployed(&[
        ("Clusters", "prod"),
        ("NodeRoleArns", NODE_ROLES),
        ("AutoScalingGroupUpdates", "Enabled"),
    ]);
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

/// The one SSM write of any function: the rotator's rollout status, under its own path.
#[test]
fn parameter_reads_are_scoped_to_the_prefix_the_named_paths_and_public_parameters() {
    let public = format!("arn:aws:ssm:{REGION}::parameter/aws/service/*");
    let policies = arn("ssm", "parameter/platform/nodecycle/*");
    let status = arn("ssm", "parameter/nodecycle/status/*");
    let t = deployed(FULL);
    let mut watcher_reads = BTreeSet::new();
    for f in FUNCTIONS {
        for g in grants_of(&t, f)
            .into_iter()
            .filter(|g| g.action.starts_with("ssm:"))
        {
            if g.action == "ssm:PutParameter" {
                assert_eq!(
                    (f, g.resource.as_str(), &g.condition),
                    ("RotatorFunction", status.as_str(), &Value::Null),
                    "only the rotator writes, only rollout statuses: {g:?}"
                );
                continue;
            }
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
        assert!(e.get("AccessPolicies").is_none(), "no access policy: {e}");
        entries.insert((
            e["ClusterName"].as_str().unwrap().to_string(),
            e["PrincipalArn"].as_str().unwrap().to_string(),
            e["KubernetesGroups"].to_string(),
        ));
    }
    // One Kubernetes group per function (deploy/rbac.yaml binds each to what it uses).
    let mut expected = BTreeSet::new();
    for cluster in ["prod", "test-1", "edge_2"] {
        for (f, group) in [
            ("RotatorFunction", "nodecycle-rotator"),
            ("InterruptionHandlerFunction", "nodecycle-interruption"),
            ("OpsFunction", "nodecycle-ops"),
        ] {
            expected.insert((
                cluster.to_string(),
                format!("getatt:{}.Arn", role_of(&t, f)),
                json!([group]).to_string(),
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

/// The oldest an interruption warning can be when the handler gets it, as the code counts it
/// (`nodecycle::interruption::deadline`: an older one is a replay whose PDB-held pods are never
/// deleted unless EC2 confirms it), is what the stack configures: the warnings rule's retries,
/// then the function's asynchronous queue.
#[test]
fn the_oldest_believable_warning_is_what_the_rule_and_the_function_keep() {
    use nodecycle::interruption::deadline::{
        INVOKE_MAX_EVENT_AGE, MAX_EVENT_AGE, RULE_MAX_EVENT_AGE,
    };
    let t = deployed(MINIMAL);
    let warnings: Vec<&Value> = rules(&t)
        .into_values()
        .filter(|r| {
            pattern(r)["detail-type"].as_array().is_some_and(|d| {
                d.iter()
                    .any(|x| x == "EC2 Spot Instance Interruption Warning")
            })
        })
        .collect();
    assert_eq!(warnings.len(), 1, "one rule delivers Spot warnings");
    let target = &warnings[0]["Targets"][0];
    assert_eq!(target["Arn"], "getatt:InterruptionHandlerFunction.Arn");
    assert_eq!(
        target["RetryPolicy"]["MaximumEventAgeInSeconds"],
        RULE_MAX_EVENT_AGE.as_secs()
    );
    let invoke = resources_of(&t, "AWS::Lambda::EventInvokeConfig")
        .into_iter()
        .map(|(_, p)| p)
        .find(|p| p["FunctionName"] == "ref:InterruptionHandlerFunction")
        .unwrap();
    assert_eq!(
        invoke["MaximumEventAgeInSeconds"],
        INVOKE_MAX_EVENT_AGE.as_secs()
    );
    assert_eq!(MAX_EVENT_AGE, RULE_MAX_EVENT_AGE + INVOKE_MAX_EVENT_AGE);
    assert_eq!(
        nodecycle::handlers::interruption::Settings::default().max_event_age,
        MAX_EVENT_AGE
    );
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
    // Without the parameter, the template's default is the hook the code assumes (the
    // handler's setting and doctor's expectation).
    let default = nodecycle::interruption::DEFAULT_LIFECYCLE_HOOK;
    for (params, hook) in [(MINIMAL, default), (FULL, "drain-first")] {
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
        "FunctionSubnetIds",
        "DeadLetterQueueUrl",
        "DeadLetterQueueArn",
        "PermissionScope",
        "CellTag",
    ]);
    assert_eq!(names, contract);
    assert_eq!(t["Outputs"]["PermissionScope"], "ClusterNames");
    assert_eq!(t["Outputs"]["CellTag"], "nodecycle");
    for needed in nodecycle::doctor::contract::REQUIRED {
        assert!(names.contains(needed), "doctor reads output {needed}");
    }
    assert!(names.contains(nodecycle::doctor::endpoint::FUNCTION_SUBNETS));
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
        "nodecycle/RetainedInstances ".to_string(),
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

/// Every metric the dashboard draws: (namespace, name, dimensions as name=value).
fn dashboard_metrics(t: &Value) -> Vec<(String, String, Vec<String>)> {
    let dashboards = resources_of(t, "AWS::CloudWatch::Dashboard");
    assert_eq!(dashboards.len(), 1, "one dashboard");
    let body: Value = serde_json::from_str(dashboards[0].1["DashboardBody"].as_str().unwrap())
        .expect("the dashboard body is JSON");
    let mut out = Vec::new();
    for w in body["widgets"].as_array().unwrap() {
        let Some(metrics) = w["properties"]["metrics"].as_array() else {
            continue;
        };
        assert_eq!(w["properties"]["region"], REGION, "{w}");
        for m in metrics {
            // [namespace, name, (dimension name, value)..., {options}]: no "." shorthand.
            let parts: Vec<&str> = m
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert!(parts.len() >= 2 && parts.len().is_multiple_of(2), "{m}");
            assert!(!parts.contains(&"."), "{m}: spelled out, not the shorthand");
            let dims = parts[2..]
                .chunks(2)
                .map(|d| format!("{}={}", d[0], d[1]))
                .collect();
            out.push((parts[0].to_string(), parts[1].to_string(), dims));
        }
    }
    out
}

/// The dashboard and the alarms name only metrics the functions emit (the list the metrics
/// module emits from, `nodecycle::metrics::EMITTED`), the cell's (no dimension: a `Pool`
/// series exists only for pools with `metrics.perPool: true`); the dashboard draws what an
/// operator asks first, and every function's errors and durations. Dashboard=Disabled: none.
#[test]
fn the_dashboard_and_alarms_draw_only_metrics_the_functions_emit() {
    let emitted: BTreeSet<&str> = nodecycle::metrics::EMITTED.iter().copied().collect();
    let t = deployed(MINIMAL);
    let drawn = dashboard_metrics(&t);
    let mut ours = BTreeSet::new();
    for (namespace, name, dims) in &drawn {
        match namespace.as_str() {
            nodecycle::metrics::NAMESPACE => {
                assert!(emitted.contains(name.as_str()), "{name} is not emitted");
                assert!(
                    dims.is_empty(),
                    "{name} {dims:?}: cell metrics have no dimension"
                );
                ours.insert(name.as_str());
            }
            "AWS/Lambda" => {
                assert!(["Errors", "Duration"].contains(&name.as_str()), "{name}");
                let function = dims[0].strip_prefix("FunctionName=ref:").unwrap();
                assert!(FUNCTIONS.contains(&function), "{dims:?}");
            }
            other => panic!("unexpected namespace {other}"),
        }
    }
    for wanted in [
        "Pools",
        "PoolsUpToDate",
        "RotationsInFlight",
        "PoolsHalted",
        "ReleasesQuarantined",
        "PoolsBudgetLimited",
        "InterruptionsHandled",
    ] {
        assert!(ours.contains(wanted), "the dashboard lacks {wanted}");
    }
    for name in ["Errors", "Duration"] {
        let of: BTreeSet<String> = drawn
            .iter()
            .filter(|(n, m, _)| n == "AWS/Lambda" && m == name)
            .map(|(_, _, d)| d[0].clone())
            .collect();
        let all: BTreeSet<String> = FUNCTIONS
            .iter()
            .map(|f| format!("FunctionName=ref:{f}"))
            .collect();
        assert_eq!(of, all, "{name} of every function");
    }
    let dashboard = resources_of(&t, "AWS::CloudWatch::Dashboard")[0].1;
    assert_eq!(
        dashboard["DashboardName"],
        format!("nodecycle-{REGION}"),
        "global to the account: the region in the name"
    );
    for (alarm, a) in resources_of(&t, "AWS::CloudWatch::Alarm") {
        if a["Namespace"] == nodecycle::metrics::NAMESPACE {
            let name = a["MetricName"].as_str().unwrap();
            assert!(emitted.contains(name), "{alarm}: {name} is not emitted");
            assert!(
                a.get("Dimensions").is_none(),
                "{alarm}: cell metrics have none"
            );
        }
    }
    let t = deployed(&[("Clusters", "prod"), ("Dashboard", "Disabled")]);
    assert!(resources_of(&t, "AWS::CloudWatch::Dashboard").is_empty());
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

/// An adapter source file as the operation scan reads it.
struct Source {
    /// The text as written.
    text: String,
    /// The same text (same byte offsets) with comments and the contents of string and char
    /// literals blanked, so braces, calls and `fn` inside them do not count.
    code: Vec<u8>,
}

impl Source {
    fn read(rel: &str) -> Source {
        let text = std::fs::read_to_string(nodecycle_tests::repo_path(rel)).unwrap();
        let b = text.as_bytes();
        let mut code = b.to_vec();
        let mut i = 0;
        let blank = |code: &mut Vec<u8>, from: usize, to: usize| {
            for c in &mut code[from..to] {
                if *c != b'\n' {
                    *c = b' ';
                }
            }
        };
        while i < b.len() {
            match b[i] {
                b'/' if b.get(i + 1) == Some(&b'/') => {
                    let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
                    blank(&mut code, i, end);
                    i = end;
                }
                b'/' if b.get(i + 1) == Some(&b'*') => {
                    let end = text[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
                    blank(&mut code, i, end);
                    i = end;
                }
                b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                    && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
                {
                    let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                    if b.get(i + 1 + hashes) != Some(&b'"') {
                        i += 1;
                        continue;
                    }
                    let close = format!("\"{}", "#".repeat(hashes));
                    let start = i + 2 + hashes;
                    let end = text[start..].find(&close).map_or(b.len(), |n| start + n);
                    blank(&mut code, start, end);
                    i = end + close.len();
                }
                b'"' => {
                    let mut j = i + 1;
                    while j < b.len() && b[j] != b'"' {
                        j += if b[j] == b'\\' { 2 } else { 1 };
                    }
                    blank(&mut code, i + 1, j.min(b.len()));
                    i = j + 1;
                }
                b'\'' => {
                    // A char literal ('x', '\n', '\''), not a lifetime ('a).
                    let len = if b.get(i + 1) == Some(&b'\\') {
                        b[i + 2..].iter().position(|c| *c == b'\'').map(|n| n + 3)
                    } else {
                        let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                        (b.get(i + 1 + ch) == Some(&b'\'')).then_some(ch + 2)
                    };
                    match len {
                        Some(n) => {
                            blank(&mut code, i + 1, i + n - 1);
                            i += n;
                        }
                        None => i += 1,
                    }
                }
                _ => i += 1,
            }
        }
        Source { text, code }
    }

    /// The offset just past the brace that closes the one at `open`.
    fn close(&self, open: usize) -> usize {
        let mut depth = 0;
        for (i, c) in self.code.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
        }
        panic!("unbalanced braces");
    }

    fn code_str(&self) -> &str {
        std::str::from_utf8(&self.code).unwrap()
    }
}

fn ident_before(code: &[u8], end: usize) -> (usize, String) {
    let mut start = end;
    while start > 0 && (code[start - 1].is_ascii_alphanumeric() || code[start - 1] == b'_') {
        start -= 1;
    }
    (
        start,
        String::from_utf8_lossy(&code[start..end]).into_owned(),
    )
}

fn skip_space_back(code: &[u8], mut i: usize) -> usize {
    while i > 0 && code[i - 1].is_ascii_whitespace() {
        i -= 1;
    }
    i
}

/// `describe_auto_scaling_groups` -> `DescribeAutoScalingGroups`.
fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// One function of an adapter file: its key (`Trait::method` in a trait impl, `Type::name` in
/// an inherent impl, `name` at module level), whether it is `pub`, the SDK operations its body
/// calls, and the names it calls.
#[derive(Debug)]
struct AdapterFn {
    key: String,
    public: bool,
    ops: BTreeSet<String>,
    calls: BTreeSet<String>,
}

/// The SDK operation (`service:Operation`) of the `.send()` at `send` in `s`, found from the
/// chain's first builder call and checked against the operation its error is labelled with.
fn operation_at(s: &Source, send: usize, body_end: usize, body_start: usize) -> String {
    let code = &s.code;
    let mut i = skip_space_back(code, send);
    let mut builder = None;
    loop {
        // `.name(...)` going backwards.
        if i == 0 || code[i - 1] != b')' {
            break;
        }
        let mut depth = 0;
        let mut j = i;
        while j > 0 {
            j -= 1;
            match code[j] {
                b')' => depth += 1,
                b'(' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        let (start, name) = ident_before(code, skip_space_back(code, j));
        let dot = skip_space_back(code, start);
        if dot == 0 || code[dot - 1] != b'.' {
            break;
        }
        builder = Some(name);
        i = skip_space_back(code, dot - 1);
    }
    // The chain started on a variable (`req.send()`, `call.send()`): its `let` names the builder.
    if builder.is_none() || builder.as_deref() == Some("into_paginator") {
        let (_, var) = ident_before(code, i);
        let text = s.code_str();
        let let_at = [format!("let mut {var} ="), format!("let {var} =")]
            .iter()
            .filter_map(|p| {
                text[body_start..send]
                    .rfind(p.as_str())
                    .map(|n| body_start + n)
            })
            .max()
            .unwrap_or_else(|| panic!("SDK call at {send}: no builder for {var}"));
        let after = &text[let_at..send];
        let mut k = 0;
        while let Some(n) = after[k..].find('(') {
            let (_, name) = ident_before(after.as_bytes(), k + n);
            let before = skip_space_back(after.as_bytes(), k + n - name.len());
            if before > 0 && after.as_bytes()[before - 1] == b'.' && !name.is_empty() {
                builder = Some(name);
                break;
            }
            k += n + 1;
        }
    }
    let builder = builder.unwrap_or_else(|| panic!("SDK call at {send}: no builder"));
    let op = pascal(&builder);
    // The label: the first `"<service>:<Operation>` string after the call.
    let needle = format!(":{op}");
    let mut from = send;
    loop {
        let n = s.text[from..body_end].find(&needle).unwrap_or_else(|| {
            panic!(
                "{builder}(): no \"<service>:{op}\" label for its errors in {:?}",
                &s.text[send.min(body_end)..body_end]
            )
        });
        let at = from + n;
        let (start, service) = ident_before(s.text.as_bytes(), at);
        if start > 0
            && s.text.as_bytes()[start - 1] == b'"'
            && !service.is_empty()
            && service
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return format!("{service}:{op}");
        }
        from = at + 1;
    }
}

fn scan(rel: &str) -> Vec<AdapterFn> {
    let s = Source::read(rel);
    let code = s.code_str();
    // Test modules are not adapters.
    let tests = code
        .find("mod tests {")
        .map(|n| (n, s.close(n + "mod tests ".len())));
    // impl blocks: (start, end, key prefix, trait?).
    let mut impls = Vec::new();
    let mut k = 0;
    while let Some(n) = code[k..].find("impl") {
        let at = k + n;
        k = at + 4;
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        if (at > 0 && word(s.code[at - 1])) || s.code.get(at + 4).is_some_and(|c| word(*c)) {
            continue;
        }
        let Some(open) = code[at..].find('{').map(|n| at + n) else {
            break;
        };
        // `impl<T> Trait for Type` / `impl Type`, generics dropped.
        let mut header = code[at + 4..open].trim();
        if header.starts_with('<') {
            header = header.split_once('>').map_or(header, |(_, h)| h.trim());
        }
        let last = |p: &str| {
            p.split("::")
                .last()
                .unwrap()
                .split('<')
                .next()
                .unwrap()
                .trim()
                .to_string()
        };
        let (prefix, is_trait) = match header.split_once(" for ") {
            Some((t, _)) => (last(t), true),
            None => (last(header), false),
        };
        impls.push((open, s.close(open), prefix, is_trait));
    }
    let mut out = Vec::new();
    let mut k = 0;
    while let Some(n) = code[k..].find("fn ") {
        let at = k + n;
        k = at + 3;
        if at > 0 && (s.code[at - 1].is_ascii_alphanumeric() || s.code[at - 1] == b'_') {
            continue;
        }
        if tests.is_some_and(|(a, b)| at > a && at < b) {
            continue;
        }
        let name_end = code[at + 3..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map(|n| at + 3 + n)
            .unwrap();
        let name = code[at + 3..name_end].to_string();
        // The body (a declaration without one, `fn x();`, has none).
        let (Some(open), semi) = (code[name_end..].find('{'), code[name_end..].find(';')) else {
            continue;
        };
        if semi.is_some_and(|s| s < open) {
            continue;
        }
        let open = name_end + open;
        let end = s.close(open);
        let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let public = code[line_start..at].trim_start().starts_with("pub ");
        let enclosing = impls
            .iter()
            .filter(|(a, b, _, _)| at > *a && at < *b)
            .min_by_key(|(a, b, _, _)| b - a);
        let (key, public) = match enclosing {
            Some((_, _, prefix, true)) => (format!("{prefix}::{name}"), true),
            Some((_, _, prefix, false)) => (format!("{prefix}::{name}"), public),
            None => (name.clone(), false),
        };
        let mut ops = BTreeSet::new();
        let mut calls = BTreeSet::new();
        let body = &code[open..end];
        let mut j = 0;
        while let Some(m) = body[j..].find(".send()") {
            let send = open + j + m;
            ops.insert(operation_at(&s, send, end, open));
            j += m + 1;
        }
        let mut j = 0;
        while let Some(m) = body[j..].find('(') {
            let (start, called) = ident_before(body.as_bytes(), j + m);
            if !called.is_empty() {
                // `module::f(` keeps its module (`super::eks::f`, `eks::f`: `eks::f`).
                let module = body[..start]
                    .strip_suffix("::")
                    .map(|before| ident_before(before.as_bytes(), before.len()).1)
                    .filter(|m| !m.is_empty());
                let method = skip_space_back(body.as_bytes(), start)
                    .checked_sub(1)
                    .is_some_and(|d| body.as_bytes()[d] == b'.');
                calls.insert(match module {
                    Some(m) => format!("{m}::{called}"),
                    // `x.f(`: a method, never an imported function.
                    None if method => format!(".{called}"),
                    None => called,
                });
            }
            j += m + 1;
        }
        out.push(AdapterFn {
            key,
            public,
            ops,
            calls,
        });
        k = end;
    }
    out
}

/// Every adapter function's transitive SDK operations, by key. A call resolves to the functions
/// of that name in the same file, or, written `module::f` (`super::eks::f`), to module-level
/// function `f` of `shared/src/aws/<module>.rs`: the describe helpers that several adapters
/// share. A bare call to a name the file does not define but another adapter file does (an
/// imported helper) fails the scan, so no SDK call hides behind a `use`.
fn adapter_operations() -> BTreeMap<String, BTreeSet<String>> {
    let files: BTreeMap<String, Vec<AdapterFn>> =
        std::fs::read_dir(nodecycle_tests::repo_path("shared/src/aws"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter_map(|f| f.strip_suffix(".rs").map(str::to_owned))
            .map(|m| {
                let fns = scan(&format!("shared/src/aws/{m}.rs"));
                (m, fns)
            })
            .collect();
    // Module-level functions that reach an SDK call, by name: what a bare call must not name
    // from another file.
    let reaches_sdk = |module: &str, name: &str| -> bool {
        let mut seen = BTreeSet::new();
        let mut todo = vec![(module.to_string(), name.to_string())];
        while let Some((m, n)) = todo.pop() {
            if !seen.insert((m.clone(), n.clone())) {
                continue;
            }
            for f in files[&m].iter().filter(|f| f.key == n) {
                if !f.ops.is_empty() {
                    return true;
                }
                for c in &f.calls {
                    match c.split_once("::") {
                        Some((cm, cn)) if files.contains_key(cm) => {
                            todo.push((cm.to_string(), cn.to_string()))
                        }
                        _ => todo.push((m.clone(), c.trim_start_matches('.').to_string())),
                    }
                }
            }
        }
        false
    };
    let resolve = |module: &str, start: &AdapterFn| -> BTreeSet<String> {
        let mut ops = BTreeSet::new();
        let mut seen = BTreeSet::new();
        let mut todo = vec![(module.to_string(), start)];
        while let Some((m, f)) = todo.pop() {
            if !seen.insert((m.clone(), f.key.clone())) {
                continue;
            }
            ops.extend(f.ops.iter().cloned());
            for c in &f.calls {
                // `m::f` of another crate module of the same name (`crate::members::f`) is
                // not found there and is checked as a bare call below.
                if let Some((cm, cn)) = c.split_once("::")
                    && let Some(found) = files
                        .get(cm)
                        .map(|fs| fs.iter().filter(|g| g.key == cn).collect::<Vec<_>>())
                    && !found.is_empty()
                {
                    todo.extend(found.into_iter().map(|g| (cm.to_string(), g)));
                    continue;
                }
                let method = c.starts_with('.');
                let name = c.trim_start_matches('.').rsplit("::").next().unwrap_or(c);
                let local: Vec<_> = files[&m]
                    .iter()
                    .filter(|g| g.key.rsplit("::").next() == Some(name))
                    .collect();
                if local.is_empty() && !method {
                    for other in files.keys().filter(|o| **o != m) {
                        assert!(
                            !reaches_sdk(other, name),
                            "aws/{m}.rs calls {name}() of aws/{other}.rs bare: write \
                             {other}::{name}() so the scan follows it"
                        );
                    }
                }
                todo.extend(local.into_iter().map(|g| (m.clone(), g)));
            }
        }
        ops
    };
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, fns) in &files {
        for f in fns.iter().filter(|f| f.public) {
            let ops = resolve(module, f);
            if !ops.is_empty() {
                out.entry(f.key.clone()).or_default().extend(ops);
            }
        }
    }
    // The EKS connection of the Kubernetes client (endpoint and CA).
    let kube: BTreeSet<String> = scan("shared/src/kube/client/access.rs")
        .into_iter()
        .flat_map(|f| f.ops)
        .collect();
    out.insert("KubeConnector::connect".into(), kube);
    out
}

/// The IAM action that authorizes an SDK operation, where they differ.
fn iam_action(op: &str) -> &str {
    match op {
        "sqs:SendMessageBatch" => "sqs:SendMessage",
        // Its puts are authorized as PutItem (granted for Store::put), its checks as this.
        "dynamodb:TransactWriteItems" => "dynamodb:ConditionCheckItem",
        other => other,
    }
}

/// Grants that no SDK call of the code makes but that AWS checks on the function's behalf, each
/// with the call it serves.
const GRANTS_WITHOUT_A_CALL: [(&str, &str); 9] = [
    (
        "logs:CreateLogStream",
        "the Lambda runtime writes the function's log",
    ),
    (
        "logs:PutLogEvents",
        "the Lambda runtime writes the function's log",
    ),
    (
        "sqs:SendMessage",
        "Lambda's OnFailure destination sends with the role",
    ),
    (
        "kms:Decrypt",
        "SSM decrypts SecureString parameters for the caller",
    ),
    (
        "iam:PassRole",
        "Auto Scaling checks it on UpdateAutoScalingGroup",
    ),
    (
        "ec2:RunInstances",
        "Auto Scaling checks it on UpdateAutoScalingGroup",
    ),
    (
        "ec2:CreateTags",
        "Auto Scaling checks it on UpdateAutoScalingGroup",
    ),
    (
        "sqs:ReceiveMessage",
        "Lambda's SQS event source (FanOut) polls with the role",
    ),
    (
        "sqs:DeleteMessage",
        "Lambda's SQS event source (FanOut) deletes served items with the role",
    ),
];

/// Operations AWS lets every principal call without a grant (an explicit deny aside).
const NEEDS_NO_GRANT: &[&str] = &["sts:GetCallerIdentity"];

#[test]
fn every_role_grants_what_its_code_calls_and_no_more() {
    let adapters = adapter_operations();
    // The scan sees the calls (a broken scan must not pass by seeing nothing).
    assert!(adapters["GroupOps::set_image"].contains("ec2:CreateLaunchTemplateVersion"));
    assert!(adapters["GroupOps::set_image"].contains("autoscaling:UpdateAutoScalingGroup"));
    assert!(adapters["GroupOps::set_image"].contains("ec2:DescribeLaunchTemplates"));
    assert!(adapters["Store::query"].contains("dynamodb:Query"));
    assert!(adapters["KubeConnector::connect"].contains("eks:DescribeCluster"));
    // ... and follows the describe helpers other adapter files share (`eks::describe_cluster`).
    assert!(adapters["ClusterCatalog::kubernetes_version"].contains("eks:DescribeCluster"));
    assert!(adapters["GroupInfo::managed_node_group"].contains("eks:DescribeNodegroup"));
    assert!(
        adapters["GroupInfo::auto_scaling_group"].contains("autoscaling:DescribeAutoScalingGroups")
    );

    // Every adapter method that reaches an SDK call is someone's, or no Lambda's.
    use nodecycle::port::uses::{FUNCTIONS as USES, NOT_IN_LAMBDAS, methods};
    let listed: BTreeSet<String> = USES
        .iter()
        .flat_map(|(_, m)| m.iter())
        .chain(NOT_IN_LAMBDAS.iter())
        .flat_map(|entry| methods(entry))
        .collect();
    for key in adapters.keys() {
        assert!(
            listed.contains(key),
            "{key} calls AWS ({:?}) but nodecycle::port::uses lists it nowhere",
            adapters[key]
        );
    }

    let widened = [
        ("Clusters", "prod,test-1"),
        ("AutoScalingGroupUpdates", "Enabled"),
        ("FanOut", "Enabled"),
        ("NodeRoleArns", NODE_ROLES),
        (
            "ParameterKmsKeyArn",
            "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        ),
    ];
    for params in [MINIMAL, &widened[..]] {
        let t = deployed(params);
        let updates = params.contains(&("AutoScalingGroupUpdates", "Enabled"));
        let fan_out = params.contains(&("FanOut", "Enabled"));
        for (function, entries) in USES {
            let mut calls = BTreeSet::new();
            for m in entries.iter().flat_map(|entry| methods(entry)) {
                // A listed method must exist and call AWS (no stale entries).
                let ops = adapters.get(&m).unwrap_or_else(|| {
                    panic!("{function}: {m} is listed but no adapter method of that name calls AWS")
                });
                calls.extend(ops.iter().map(|op| iam_action(op).to_string()));
            }
            let granted: BTreeSet<String> = grants_of(&t, function)
                .into_iter()
                .map(|g| g.action)
                .collect();
            for op in &calls {
                if NEEDS_NO_GRANT.contains(&op.as_str()) {
                    assert!(!granted.contains(op.as_str()), "{function} is granted {op}");
                    continue;
                }
                // Without AutoScalingGroupUpdates the rotator refuses a pinned group itself
                // before the call (tests/tests/launch_template.rs).
                if op == "autoscaling:UpdateAutoScalingGroup" && !updates {
                    assert!(!granted.contains(op.as_str()), "{function}");
                    continue;
                }
                // Without FanOut there is no work queue: the dispatcher is never called (the
                // dead-letter queue's sqs:SendMessage stays).
                if op.starts_with("sqs:") && !fan_out {
                    continue;
                }
                assert!(
                    granted.contains(op.as_str()),
                    "{function} calls {op}; its role does not grant it ({params:?})"
                );
            }
            for action in &granted {
                if is_read_only(action) || calls.contains(action) {
                    continue;
                }
                let (_, why) = GRANTS_WITHOUT_A_CALL
                    .iter()
                    .find(|(a, _)| a == action)
                    .unwrap_or_else(|| {
                        panic!("{function} may {action}, which its code never calls")
                    });
                if why.contains("UpdateAutoScalingGroup") {
                    assert!(
                        calls.contains("autoscaling:UpdateAutoScalingGroup") && updates,
                        "{function}: {action}"
                    );
                }
                if why.contains("FanOut") {
                    assert!(
                        fan_out && function == "RotatorFunction",
                        "{function}: {action}"
                    );
                }
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

// ------------------------------------------------------------------------------------------------
// An organisation (docs/organisation.md): the cell's fan-out and bus policy, and the spoke.

const FAN_OUT: &[(&str, &str)] = &[
    ("Clusters", "prod"),
    ("FanOut", "Enabled"),
    ("WorkerConcurrency", "7"),
    ("WorkItemReceives", "4"),
];

#[test]
fn fan_out_puts_work_items_on_a_queue_served_with_bounded_concurrency() {
    let t = deployed(FAN_OUT);
    let r = &t["Resources"];
    let mappings = resources_of(&t, "AWS::Lambda::EventSourceMapping");
    assert_eq!(mappings.len(), 1, "{mappings:?}");
    let (_, m) = mappings[0];
    assert_eq!(m["EventSourceArn"], "getatt:WorkQueue.Arn");
    assert_eq!(m["FunctionName"], "ref:RotatorFunction");
    assert_eq!(
        m["FunctionResponseTypes"],
        json!(["ReportBatchItemFailures"])
    );
    assert_eq!(m["ScalingConfig"]["MaximumConcurrency"], "7");
    assert_eq!(m["BatchSize"], 1);
    // A failed item is received again, then dead-lettered after WorkItemReceives receives.
    let queue = &r["WorkQueue"]["Properties"];
    assert_eq!(
        queue["RedrivePolicy"],
        json!({"deadLetterTargetArn": "getatt:WorkDeadLetterQueue.Arn", "maxReceiveCount": "4"})
    );
    // Lambda wants the visibility timeout at least the function's timeout (six times advised).
    let timeout = r["RotatorFunction"]["Properties"]["Timeout"]
        .as_i64()
        .unwrap();
    assert!(queue["VisibilityTimeout"].as_i64().unwrap() >= 6 * timeout);
    let alarmed: Vec<&Value> = resources_of(&t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .filter(|(_, a)| a["Namespace"] == "AWS/SQS")
        .map(|(_, a)| &a["Dimensions"][0]["Value"])
        .collect();
    assert!(
        alarmed.contains(&&json!("getatt:WorkDeadLetterQueue.QueueName")),
        "{alarmed:?}"
    );
    // The schedule dispatches: the rotator is told the queue.
    let env = &r["RotatorFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        env[nodecycle::aws::queue::QUEUE_URL_ENV],
        "ref:WorkQueue",
        "{env}"
    );
    // Only the rotator reaches the queue: it may send (dispatch) and Lambda may receive and
    // delete for it, on the work queue only.
    let rotator: BTreeSet<String> = may(&t, "RotatorFunction", "sqs:ReceiveMessage")
        .into_iter()
        .chain(may(&t, "RotatorFunction", "sqs:DeleteMessage"))
        .map(|g| g.resource)
        .collect();
    assert_eq!(
        rotator,
        BTreeSet::from(["getatt:WorkQueue.Arn".to_string()])
    );
    let sends: BTreeSet<String> = may(&t, "RotatorFunction", "sqs:SendMessage")
        .into_iter()
        .map(|g| g.resource)
        .collect();
    assert_eq!(
        sends,
        BTreeSet::from([
            "getatt:WorkQueue.Arn".to_string(),
            "getatt:DeadLetterQueue.Arn".to_string()
        ])
    );
    for f in FUNCTIONS.into_iter().filter(|f| *f != "RotatorFunction") {
        for g in grants_of(&t, f) {
            assert!(
                !g.action.starts_with("sqs:") || g.resource == "getatt:DeadLetterQueue.Arn",
                "{f}: {g:?}"
            );
        }
    }

    // Disabled (the default): no queue, no event source, the schedule runs the pass itself.
    let t = deployed(MINIMAL);
    assert!(resources_of(&t, "AWS::Lambda::EventSourceMapping").is_empty());
    assert!(t["Resources"].get("WorkQueue").is_none());
    let env = &t["Resources"]["RotatorFunction"]["Properties"]["Environment"]["Variables"];
    assert!(
        env.get(nodecycle::aws::queue::QUEUE_URL_ENV).is_none(),
        "{env}"
    );
    assert!(may(&t, "RotatorFunction", "sqs:ReceiveMessage").is_empty());
}

/// The default bus's resource policy statements (principal, action, resource, condition).
fn bus_statements(t: &Value) -> Vec<Value> {
    resources_of(t, "AWS::Events::EventBusPolicy")
        .into_iter()
        .map(|(_, p)| p["Statement"].clone())
        .collect()
}

#[test]
fn the_cells_bus_admits_forwarded_events_of_the_served_accounts_or_the_organisation_only() {
    let bus = arn("events", "event-bus/default");
    let sources = json!(["aws.ec2", "aws.autoscaling", "aws.health", "aws.ssm"]);
    // A single-account deployment admits no other account.
    assert!(bus_statements(&deployed(MINIMAL)).is_empty());

    let t = deployed(&[
        ("Clusters", "prod"),
        ("ServedAccounts", "222222222222,333333333333"),
    ]);
    let s = bus_statements(&t);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["Effect"], "Allow");
    assert_eq!(
        s[0]["Principal"],
        json!({"AWS": ["222222222222", "333333333333"]})
    );
    assert_eq!(s[0]["Action"], "events:PutEvents");
    assert_eq!(s[0]["Resource"], bus);
    assert_eq!(
        s[0]["Condition"],
        json!({"StringEquals": {"events:source": sources}})
    );
    // The functions act on those accounts' events (and their own account's).
    for f in FUNCTIONS {
        assert_eq!(
            t["Resources"][f]["Properties"]["Environment"]["Variables"]
                [nodecycle::event::served::ACCOUNTS_ENV],
            "222222222222,333333333333",
            "{f}"
        );
    }

    let t = deployed(&[("Clusters", "prod"), ("OrganizationId", "o-abcdefghij")]);
    let s = bus_statements(&t);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["Principal"], "*");
    assert_eq!(
        s[0]["Condition"],
        json!({"StringEquals": {"aws:PrincipalOrgID": "o-abcdefghij", "events:source": sources}}),
        "any principal, but only of the organisation"
    );
    assert!(try_deployed(&[("Clusters", "prod"), ("ServedAccounts", "12345")]).is_err());
    assert!(try_deployed(&[("Clusters", "prod"), ("OrganizationId", "abc")]).is_err());
}

const CELL: &str = "111111111111";

fn cell_role(function: &str) -> String {
    format!("arn:aws:iam::{CELL}:role/nodecycle-{function}Role-ABC")
}

/// The spoke's parameters for clusters prod and test-1, the given overrides on top.
fn spoke(overrides: &[(&str, &str)]) -> Result<Value, String> {
    let roles: Vec<(String, String)> = [
        ("AmiWatcherRoleArns", "AmiWatcherFunction"),
        ("RotatorRoleArns", "RotatorFunction"),
        ("InterruptionHandlerRoleArns", "InterruptionHandlerFunction"),
        ("OpsRoleArns", "OpsFunction"),
    ]
    .iter()
    .map(|(p, f)| (p.to_string(), cell_role(f)))
    .collect();
    let mut params: Vec<(&str, &str)> = vec![
        ("CellAccountId", CELL),
        ("ExternalId", "nodecycle-cell-7"),
        ("Cluster1", "prod"),
        ("Cluster2", "test-1"),
    ];
    params.extend(roles.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    for (k, v) in overrides {
        params.retain(|(p, _)| p != k);
        params.push((k, v));
    }
    try_resolved("deploy/spoke.yaml", &params)
}

/// The spoke role of each cell function.
const SPOKE_ROLES: [(&str, &str); 4] = [
    ("AmiWatcherFunction", "AmiWatcherRole"),
    ("RotatorFunction", "RotatorRole"),
    ("InterruptionHandlerFunction", "InterruptionHandlerRole"),
    ("OpsFunction", "OpsRole"),
];

#[test]
fn spoke_roles_are_assumed_only_by_their_cell_functions_with_the_external_id_or_organisation() {
    let trust = |t: &Value, role: &str| {
        t["Resources"][role]["Properties"]["AssumeRolePolicyDocument"]["Statement"].clone()
    };
    let t = spoke(&[]).unwrap();
    for (f, role) in SPOKE_ROLES {
        let s = trust(&t, role);
        assert_eq!(s.as_array().unwrap().len(), 1, "{role}: {s}");
        assert_eq!(s[0]["Action"], "sts:AssumeRole");
        assert_eq!(s[0]["Principal"], json!({"AWS": [cell_role(f)]}), "{role}");
        assert_eq!(
            s[0]["Condition"],
            json!({"StringEquals": {"sts:ExternalId": "nodecycle-cell-7"}}),
            "{role}"
        );
    }
    let t = spoke(&[("ExternalId", ""), ("OrganizationId", "o-abcdefghij")]).unwrap();
    for (_, role) in SPOKE_ROLES {
        assert_eq!(
            trust(&t, role)[0]["Condition"],
            json!({"StringEquals": {"aws:PrincipalOrgID": "o-abcdefghij"}}),
            "{role}"
        );
    }
    let t = spoke(&[("OrganizationId", "o-abcdefghij")]).unwrap();
    assert_eq!(
        trust(&t, "RotatorRole")[0]["Condition"],
        json!({"StringEquals": {"sts:ExternalId": "nodecycle-cell-7", "aws:PrincipalOrgID": "o-abcdefghij"}})
    );
    // Neither: refused before anything is created.
    let err = spoke(&[("ExternalId", "")]).unwrap_err();
    assert!(err.contains("ExternalId or OrganizationId"), "{err}");
    // Role names the cell can compute: <prefix>-<function>-<region>.
    let t = spoke(&[]).unwrap();
    assert_eq!(
        t["Resources"]["RotatorRole"]["Properties"]["RoleName"],
        format!("nodecycle-rotator-{REGION}")
    );
}

/// Requests a member account's resources see from nodecycle: every spoke role must decide each
/// as the cell's role of the same function does for its own account (the same actions, the same
/// cluster and opt-in tags), for the clusters prod and test-1.
fn member_requests() -> Vec<Request<'static>> {
    let nodegroup = |c: &str| arn("eks", &format!("nodegroup/{c}/general/0a1b"));
    let cluster = |c: &str| arn("eks", &format!("cluster/{c}"));
    let public = format!(
        "arn:aws:ssm:{REGION}::parameter/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
    );
    let mut out = vec![
        request("ec2:DescribeInstances", "*".into(), &[]),
        request("ec2:DescribeInstanceStatus", "*".into(), &[]),
        request("ec2:DescribeSpotInstanceRequests", "*".into(), &[]),
        request("ec2:DescribeImages", "*".into(), &[]),
        request("ec2:DescribeInstanceTypes", "*".into(), &[]),
        request("autoscaling:DescribeAutoScalingGroups", "*".into(), &[]),
        request("autoscaling:DescribeScalingActivities", "*".into(), &[]),
        request("ssm:GetParameters", public.clone(), &[]),
        request("ssm:GetParameter", public, &[]),
        request(
            "cloudwatch:DescribeAlarms",
            arn("cloudwatch", "alarm:prod-errors"),
            &[],
        ),
    ];
    for c in ["prod", "test-1", "other"] {
        for action in [
            "autoscaling:SetDesiredCapacity",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
            "autoscaling:SuspendProcesses",
            "autoscaling:CompleteLifecycleAction",
            "autoscaling:UpdateAutoScalingGroup",
        ] {
            out.push(request(action, group(), &[(CLUSTER_TAG, c)]));
        }
        out.push(request(
            "ec2:CreateLaunchTemplateVersion",
            launch_template(),
            &[(CLUSTER_TAG, c), (MANAGED_TAG, "true")],
        ));
        out.push(request(
            "ec2:CreateLaunchTemplateVersion",
            launch_template(),
            &[
                (CLUSTER_TAG, c),
                (MANAGED_TAG, "true"),
                (NODEGROUP_TAG, "general"),
            ],
        ));
        out.push(request("eks:DescribeCluster", cluster(c), &[]));
        out.push(request("eks:DescribeUpdate", cluster(c), &[]));
        out.push(request("eks:DescribeNodegroup", nodegroup(c), &[]));
        out.push(request("eks:UpdateNodegroupVersion", nodegroup(c), &[]));
        out.push(request("eks:UpdateNodegroupConfig", nodegroup(c), &[]));
    }
    for c in ["prod", "other"] {
        out.push(request(
            "autoscaling:SetDesiredCapacity",
            group(),
            &[(CLUSTER_TAG, c)],
        ));
    }
    out.push(request("autoscaling:SetDesiredCapacity", group(), &[]));
    out
}

#[test]
fn spoke_roles_allow_in_the_member_what_the_cell_roles_allow_in_their_own_account() {
    for (updates, cell_params) in [
        ("Disabled", vec![("Clusters", "prod,test-1")]),
        (
            "Enabled",
            vec![
                ("Clusters", "prod,test-1"),
                ("AutoScalingGroupUpdates", "Enabled"),
            ],
        ),
    ] {
        let cell = deployed(&cell_params);
        let member = spoke(&[("AutoScalingGroupUpdates", updates)]).unwrap();
        for (f, role) in SPOKE_ROLES {
            for req in member_requests() {
                assert_eq!(
                    role_allows(&member, role, &req),
                    allows(&cell, f, &req),
                    "{role} vs {f} ({updates}): {} on {} with {:?}",
                    req.action,
                    req.resource,
                    req.context
                );
            }
        }
    }
    // The cell's own resources stay the cell's: no spoke role reaches a table, a log group, a
    // queue, an event bus, a policy parameter or a key.
    let member = spoke(&[("AmiParameterPath", "/golden/eks/")]).unwrap();
    for (role, gs) in grants(&member) {
        for g in gs {
            let service = g.action.split(':').next().unwrap();
            if role == "ForwardRole" {
                assert_eq!(g.action, "events:PutEvents", "{g:?}");
                assert_eq!(
                    g.resource,
                    format!("arn:aws:events:{REGION}:{CELL}:event-bus/default")
                );
                continue;
            }
            // The ops role reads this account's rules for doctor (its forwarding rules).
            let reads_rules = role == "OpsRole"
                && ["events:ListRules", "events:ListTargetsByRule"].contains(&g.action.as_str());
            assert!(
                reads_rules || !["dynamodb", "logs", "sqs", "events", "kms"].contains(&service),
                "{role}: {g:?}"
            );
            assert!(!g.action.contains('*'), "{role}: {g:?}");
            if !is_read_only(&g.action) {
                assert!(
                    g.resource != "*" && !g.resource.ends_with(":*"),
                    "{role}: {g:?}"
                );
            }
            if service == "ssm" {
                assert!(
                    g.resource.contains("::parameter/aws/service/")
                        || g.resource == arn("ssm", "parameter/golden/eks/*"),
                    "{role}: {g:?}"
                );
            }
        }
    }
    // Without clusters (an account the StackSet reached before its overrides) a spoke role may
    // change nothing.
    let empty = spoke(&[("Cluster1", ""), ("Cluster2", "")]).unwrap();
    for (role, gs) in grants(&empty) {
        for g in gs.iter().filter(|g| !is_read_only(&g.action)) {
            assert_eq!(role, "ForwardRole", "{g:?}");
        }
    }
}

/// `nodecycle doctor` reads a member through the ops spoke role: the member's rules and their
/// targets (its forwarding rules), and the access entries of the named clusters only; no other
/// spoke role may read them.
#[test]
fn the_ops_spoke_role_reads_the_members_rules_and_the_access_entries_of_its_clusters() {
    let t = spoke(&[]).unwrap();
    let entry = |c: &str| {
        arn(
            "eks",
            &format!("access-entry/{c}/role/{ACCOUNT}/nodecycle-rotator-us-east-1/0a1b"),
        )
    };
    let reads = [
        request("events:ListRules", "*".into(), &[]),
        request(
            "events:ListTargetsByRule",
            arn(
                "events",
                "rule/StackSet-nodecycle-spoke-ForwardInterruptionWarnings-1",
            ),
            &[],
        ),
        request("eks:ListAccessEntries", arn("eks", "cluster/prod"), &[]),
        request("eks:ListAccessEntries", arn("eks", "cluster/test-1"), &[]),
        request("eks:DescribeAccessEntry", entry("prod"), &[]),
        request("eks:DescribeAccessEntry", entry("test-1"), &[]),
    ];
    for (_, role) in SPOKE_ROLES {
        for req in &reads {
            assert_eq!(
                role_allows(&t, role, req),
                role == "OpsRole",
                "{role}: {} on {}",
                req.action,
                req.resource
            );
        }
    }
    // Only the named clusters' entries, only this account's rules; nothing that changes them.
    for req in [
        request("eks:ListAccessEntries", arn("eks", "cluster/other"), &[]),
        request("eks:DescribeAccessEntry", entry("other"), &[]),
        request(
            "events:ListTargetsByRule",
            format!("arn:aws:events:{REGION}:{CELL}:rule/nodecycle-tick"),
            &[],
        ),
        request("eks:CreateAccessEntry", arn("eks", "cluster/prod"), &[]),
        request("eks:UpdateAccessEntry", entry("prod"), &[]),
        request("events:EnableRule", arn("events", "rule/x"), &[]),
        request("events:PutTargets", arn("events", "rule/x"), &[]),
    ] {
        assert!(
            !role_allows(&t, "OpsRole", &req),
            "{} on {}",
            req.action,
            req.resource
        );
    }
}

/// A member's SecureString AMI parameters under a customer key: only the ami-watcher spoke role
/// (the one that reads them) may decrypt, only with that key and only through SSM of the
/// region; without the key, or without parameters, no spoke role may use KMS at all.
#[test]
fn spokes_decrypt_secure_string_ami_parameters_only_with_the_key_given_and_only_through_ssm() {
    const KEY: &str = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let kms_grants = |t: &Value| -> Vec<(String, Grant)> {
        grants(t)
            .into_iter()
            .flat_map(|(role, gs)| gs.into_iter().map(move |g| (role.clone(), g)))
            .filter(|(_, g)| g.action.starts_with("kms:"))
            .collect()
    };
    for overrides in [
        vec![],
        vec![("AmiParameterPath", "/golden/eks/")],
        vec![("AmiParameterKmsKeyArn", KEY)],
    ] {
        let t = spoke(&overrides).unwrap();
        assert!(kms_grants(&t).is_empty(), "{overrides:?}");
    }
    let t = spoke(&[
        ("AmiParameterPath", "/golden/eks/"),
        ("AmiParameterKmsKeyArn", KEY),
    ])
    .unwrap();
    let kms = kms_grants(&t);
    assert_eq!(kms.len(), 1, "{kms:?}");
    assert_eq!(kms[0].0, "AmiWatcherRole");
    assert_eq!(kms[0].1.action, "kms:Decrypt");
    assert_eq!(kms[0].1.resource, KEY);
    let via = format!("ssm.{REGION}.amazonaws.com");
    for (_, role) in SPOKE_ROLES {
        let through_ssm = request("kms:Decrypt", KEY.into(), &[("kms:ViaService", &via)]);
        assert_eq!(
            role_allows(&t, role, &through_ssm),
            role == "AmiWatcherRole",
            "{role}"
        );
        // Not directly, not through another service or region, not with another key.
        for req in [
            request("kms:Decrypt", KEY.into(), &[]),
            request(
                "kms:Decrypt",
                KEY.into(),
                &[("kms:ViaService", "ssm.eu-west-1.amazonaws.com")],
            ),
            request(
                "kms:Decrypt",
                KEY.into(),
                &[("kms:ViaService", "s3.us-east-1.amazonaws.com")],
            ),
            request(
                "kms:Decrypt",
                arn("kms", "key/other"),
                &[("kms:ViaService", &via)],
            ),
        ] {
            assert!(
                !role_allows(&t, role, &req),
                "{role}: {} with {:?}",
                req.resource,
                req.context
            );
        }
    }
}

#[test]
fn spokes_forward_the_event_classes_the_cells_rules_match_to_the_cells_bus() {
    let cell = deployed(&[("Clusters", "prod"), ("LifecycleHookName", "drain-first")]);
    let member = spoke(&[
        ("LifecycleHookName", "drain-first"),
        ("AmiParameterPath", "/golden/eks/"),
    ])
    .unwrap();
    let forwarded: BTreeMap<&str, &Value> = rules(&member);
    let pairs = [
        (
            "InterruptionHandlerFunctionInterruptionWarnings",
            "ForwardInterruptionWarnings",
        ),
        (
            "InterruptionHandlerFunctionInstanceStateChanges",
            "ForwardInstanceStateChanges",
        ),
        (
            "InterruptionHandlerFunctionScheduledMaintenance",
            "ForwardScheduledMaintenance",
        ),
        (
            "InterruptionHandlerFunctionTerminateLifecycleActions",
            "ForwardTerminateLifecycleActions",
        ),
    ];
    let cell_rules = rules(&cell);
    for (c, m) in pairs {
        assert_eq!(pattern(forwarded[m]), pattern(cell_rules[c]), "{m}");
    }
    let changes = pattern(forwarded["ForwardAmiParameterChanges"]);
    assert_eq!(changes["source"], json!(["aws.ssm"]));
    assert_eq!(
        changes["detail"]["name"],
        json!([{"prefix": "/golden/eks/"}])
    );
    assert_eq!(forwarded.len(), pairs.len() + 1);
    for (name, rule) in &forwarded {
        assert_eq!(rule["State"], "ENABLED", "{name}");
        let target = &rule["Targets"][0];
        assert_eq!(
            target["Arn"],
            format!("arn:aws:events:{REGION}:{CELL}:event-bus/default"),
            "{name}: the cell's bus in the same region"
        );
        assert_eq!(target["RoleArn"], "getatt:ForwardRole.Arn", "{name}");
        assert_eq!(
            target["DeadLetterConfig"]["Arn"], "getatt:ForwardDeadLetterQueue.Arn",
            "{name}"
        );
    }
    let listed = member["Outputs"]["ForwardRuleNames"].as_str().unwrap();
    assert_eq!(listed.split(',').count(), forwarded.len(), "{listed}");
    // The forwarding role is the events service's, of this account only.
    let trust = &member["Resources"]["ForwardRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        [0];
    assert_eq!(
        trust["Principal"],
        json!({"Service": "events.amazonaws.com"})
    );
    assert_eq!(
        trust["Condition"],
        json!({"StringEquals": {"aws:SourceAccount": ACCOUNT}})
    );
    let bus = spoke(&[("CellBusName", "nodecycle")]).unwrap();
    assert_eq!(
        rules(&bus)["ForwardInterruptionWarnings"]["Targets"][0]["Arn"],
        format!("arn:aws:events:{REGION}:{CELL}:event-bus/nodecycle")
    );
}

#[test]
fn spokes_give_the_assumed_roles_access_entries_like_the_cells() {
    let cell = deployed(&[("Clusters", "prod,test-1")]);
    let member = spoke(&[]).unwrap();
    let entries = |t: &Value| -> BTreeSet<(String, String, String)> {
        resources_of(t, "AWS::EKS::AccessEntry")
            .into_iter()
            .map(|(_, e)| {
                assert_eq!(e["Type"], "STANDARD");
                assert!(e.get("AccessPolicies").is_none(), "no access policy: {e}");
                let principal = e["PrincipalArn"].as_str().unwrap();
                let role = principal
                    .strip_prefix("getatt:")
                    .and_then(|r| r.strip_suffix(".Arn"))
                    .unwrap();
                // The cell's FunctionRole and the spoke's Role of the same function.
                let function = role
                    .trim_end_matches("FunctionRole")
                    .trim_end_matches("Role")
                    .to_string();
                (
                    e["ClusterName"].as_str().unwrap().to_string(),
                    function,
                    e["KubernetesGroups"].to_string(),
                )
            })
            .collect()
    };
    assert_eq!(entries(&member), entries(&cell));
    assert_eq!(entries(&member).len(), 6);
    assert!(
        resources_of(
            &spoke(&[("CreateAccessEntries", "false")]).unwrap(),
            "AWS::EKS::AccessEntry"
        )
        .is_empty()
    );
    let one = spoke(&[("Cluster2", ""), ("Cluster4", "edge_2")]).unwrap();
    let clusters: BTreeSet<String> = entries(&one).into_iter().map(|(c, _, _)| c).collect();
    assert_eq!(
        clusters,
        BTreeSet::from(["prod".to_string(), "edge_2".to_string()])
    );
    assert!(spoke(&[("Cluster3", "not a name")]).is_err());
}

#[test]
fn each_cell_function_assumes_the_spoke_role_the_spoke_creates_for_it() {
    let cell = deployed(&[
        ("Clusters", "prod"),
        ("MemberRoleNamePrefix", "platform"),
        ("MemberExternalId", "nodecycle-cell-7"),
    ]);
    let member = spoke(&[("RoleNamePrefix", "platform")]).unwrap();
    for (f, role) in SPOKE_ROLES {
        let env = &cell["Resources"][f]["Properties"]["Environment"]["Variables"];
        let pattern = env["NODECYCLE_MEMBER_ROLE"].as_str().unwrap();
        let name = member["Resources"][role]["Properties"]["RoleName"]
            .as_str()
            .unwrap();
        assert_eq!(
            pattern.replace("{account}", ACCOUNT),
            format!("arn:aws:iam::{ACCOUNT}:role/{name}"),
            "{f}"
        );
        assert_eq!(
            env["NODECYCLE_MEMBER_EXTERNAL_ID"], "nodecycle-cell-7",
            "{f}"
        );
        // The spoke trusts it with that external id.
        assert_eq!(
            member["Resources"][role]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Condition"]
                ["StringEquals"]["sts:ExternalId"],
            "nodecycle-cell-7"
        );
    }
}

/// What is wrong with the console's parameter groups (`Metadata: AWS::CloudFormation::Interface`)
/// of a template: a parameter in no group or in more than one, a group or label naming a
/// parameter the template does not have.
fn parameter_group_problems(template: &serde_norway::Value) -> Vec<String> {
    let names = |v: &serde_norway::Value| -> Vec<String> {
        v.as_mapping()
            .map(|m| {
                m.keys()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let params: BTreeSet<String> = names(&template["Parameters"]).into_iter().collect();
    let interface = &template["Metadata"]["AWS::CloudFormation::Interface"];
    let mut groups_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut problems = Vec::new();
    for group in interface["ParameterGroups"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        let label = group["Label"]["default"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if label.is_empty() {
            problems.push(format!("a parameter group without a label: {group:?}"));
        }
        for p in group["Parameters"].as_sequence().into_iter().flatten() {
            let p = p.as_str().unwrap_or_default().to_string();
            if !params.contains(&p) {
                problems.push(format!(
                    "group {label:?} names {p:?}, which is no parameter"
                ));
            }
            groups_of.entry(p).or_default().push(label.clone());
        }
    }
    for p in &params {
        match groups_of.get(p).map(Vec::len) {
            Some(1) => {}
            None => problems.push(format!("{p} is in no parameter group")),
            Some(_) => problems.push(format!("{p} is in groups {:?}", groups_of[p])),
        }
    }
    for p in names(&interface["ParameterLabels"]) {
        if !params.contains(&p) {
            problems.push(format!(
                "ParameterLabels names {p:?}, which is no parameter"
            ));
        }
    }
    problems
}

fn template_source() -> serde_norway::Value {
    let text = std::fs::read_to_string(nodecycle_tests::repo_path("template.yaml")).unwrap();
    serde_norway::from_str(&text).unwrap()
}

#[test]
fn every_parameter_is_in_exactly_one_console_group() {
    let t = template_source();
    assert!(
        t["Parameters"].as_mapping().unwrap().len() > 20,
        "template.yaml's parameters not read"
    );
    let problems = parameter_group_problems(&t);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The check notices a parameter left out, one listed twice and one that does not exist.
#[test]
fn console_group_check_finds_what_is_wrong() {
    let mut t = template_source();
    let groups = t["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
        .as_sequence_mut()
        .unwrap();
    let first = groups[0]["Parameters"].as_sequence_mut().unwrap();
    let left_out = first.remove(0);
    let twice = first[0].clone();
    first.push("NoSuchParameter".into());
    groups[1]["Parameters"]
        .as_sequence_mut()
        .unwrap()
        .push(twice.clone());
    let problems = parameter_group_problems(&t);
    let left_out = left_out.as_str().unwrap();
    let twice = twice.as_str().unwrap();
    assert!(
        problems.len() == 3
            && problems
                .iter()
                .any(|p| p == &format!("{left_out} is in no parameter group"))
            && problems
                .iter()
                .any(|p| p.starts_with(&format!("{twice} is in groups")))
            && problems
                .iter()
                .any(|p| p.contains("\"NoSuchParameter\", which is no parameter")),
        "{problems:?}"
    );
}

// ------------------------------------------------------------------------------------------------
// Private clusters: the functions that reach Kubernetes in a VPC, VPC endpoints.

const SUBNETS: &str = "subnet-0123456789abcdef0,subnet-0fedcba9876543210";
const SECURITY_GROUPS: &str = "sg-0123456789abcdef0,sg-0fedcba9876543210";
const IN_VPC: &[(&str, &str)] = &[
    ("Clusters", "prod,test-1"),
    ("VpcSubnetIds", SUBNETS),
    ("VpcSecurityGroupIds", SECURITY_GROUPS),
];
const KUBE_FUNCTIONS: [&str; 3] = [
    "RotatorFunction",
    "InterruptionHandlerFunction",
    "OpsFunction",
];
/// What Lambda does with a function's role in a VPC (AWSLambdaVPCAccessExecutionRole's actions).
const NETWORK_INTERFACE_ACTIONS: [&str; 6] = [
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
];

fn with(
    base: &[(&'static str, &'static str)],
    more: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    base.iter().chain(more).copied().collect()
}

fn endpoints(t: &Value) -> BTreeMap<String, Value> {
    resources_of(t, "AWS::EC2::VPCEndpoint")
        .into_iter()
        .map(|(k, p)| (k.to_string(), p.clone()))
        .collect()
}

#[test]
fn without_vpc_settings_no_function_is_in_a_vpc_and_nothing_of_a_vpc_exists() {
    for params in [MINIMAL, FULL] {
        let t = deployed(params);
        for f in FUNCTIONS {
            assert!(
                t["Resources"][f]["Properties"].get("VpcConfig").is_none(),
                "{f}"
            );
            for a in NETWORK_INTERFACE_ACTIONS {
                assert!(may(&t, f, a).is_empty(), "{f} may {a} outside a VPC");
            }
        }
        for kind in [
            "AWS::EC2::VPCEndpoint",
            "AWS::EC2::SecurityGroup",
            "AWS::EC2::SecurityGroupIngress",
        ] {
            assert!(resources_of(&t, kind).is_empty(), "{kind}");
        }
        assert_eq!(t["Outputs"]["FunctionSubnetIds"], "");
    }
    // VpcEndpoints=Create is refused without the VPC it creates them in.
    let err = try_deployed(&[("Clusters", "prod"), ("VpcEndpoints", "Create")]).unwrap_err();
    assert!(err.contains("VpcSubnetIds"), "{err}");
}

#[test]
fn the_functions_that_reach_kubernetes_run_in_the_given_subnets_with_their_network_interfaces() {
    let t = deployed(IN_VPC);
    let subnets: Vec<&str> = SUBNETS.split(',').collect();
    let groups: Vec<&str> = SECURITY_GROUPS.split(',').collect();
    for f in KUBE_FUNCTIONS {
        let vpc = &t["Resources"][f]["Properties"]["VpcConfig"];
        assert_eq!(vpc["SubnetIds"], json!(subnets), "{f}");
        assert_eq!(vpc["SecurityGroupIds"], json!(groups), "{f}");
        // Lambda creates, describes and deletes the function's interfaces with its role: inline in
        // the role, so the function never exists before the permission does.
        for a in NETWORK_INTERFACE_ACTIONS {
            let gs = may(&t, f, a);
            assert!(!gs.is_empty(), "{f} may not {a}");
            if !is_read_only(a) {
                for g in gs {
                    assert!(
                        g.resource.starts_with(&arn("ec2", "")),
                        "{f}: {a} on {} (this account and region only)",
                        g.resource
                    );
                }
            }
        }
        let role = role_of(&t, f);
        let inline: Vec<&str> = t["Resources"][role.as_str()]["Properties"]["Policies"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["PolicyName"].as_str().unwrap())
            .collect();
        assert!(
            inline.contains(&"vpc-network-interfaces"),
            "{role}: {inline:?}"
        );
    }
    // The ami-watcher calls AWS APIs only: outside the VPC, no interface permissions.
    assert!(
        t["Resources"]["AmiWatcherFunction"]["Properties"]
            .get("VpcConfig")
            .is_none()
    );
    for a in NETWORK_INTERFACE_ACTIONS {
        assert!(
            may(&t, "AmiWatcherFunction", a).is_empty(),
            "ami-watcher may {a}"
        );
    }
    assert_eq!(t["Outputs"]["FunctionSubnetIds"], SUBNETS);
    // No endpoint unless asked.
    assert!(endpoints(&t).is_empty());

    // Subnets and security groups go together.
    for (k, v) in [
        ("VpcSubnetIds", SUBNETS),
        ("VpcSecurityGroupIds", SECURITY_GROUPS),
    ] {
        let err = try_deployed(&[("Clusters", "prod"), (k, v)]).unwrap_err();
        assert!(
            err.contains("VpcSubnetIds") || err.contains("VpcSecurityGroupIds"),
            "{err}"
        );
    }
    assert!(try_deployed(&[("Clusters", "prod"), ("VpcSubnetIds", "subnet-x")]).is_err());
}

#[test]
fn vpc_endpoints_are_created_only_when_asked_in_the_functions_subnets_admitting_their_groups() {
    let create = with(
        IN_VPC,
        &[
            ("VpcEndpoints", "Create"),
            ("VpcId", "vpc-0123456789abcdef0"),
        ],
    );
    // VpcId is required to create them.
    let err = try_deployed(&with(IN_VPC, &[("VpcEndpoints", "Create")])).unwrap_err();
    assert!(err.contains("VpcId"), "{err}");

    let t = deployed(&create);
    let eps = endpoints(&t);
    let services = |eps: &BTreeMap<String, Value>| -> BTreeSet<String> {
        eps.values()
            .map(|p| {
                p["ServiceName"]
                    .as_str()
                    .unwrap()
                    .rsplit('.')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    // The default: every AWS API the functions in the VPC call (docs/operations.md); no
    // DynamoDB gateway without route tables.
    assert_eq!(
        services(&eps),
        BTreeSet::from(
            [
                "sts",
                "eks",
                "ec2",
                "autoscaling",
                "ssm",
                "events",
                "monitoring",
                "sqs"
            ]
            .map(String::from)
        )
    );
    let sg = resources_of(&t, "AWS::EC2::SecurityGroup");
    assert_eq!(sg.len(), 1);
    let (sg_id, sg) = sg[0];
    assert_eq!(sg["VpcId"], "vpc-0123456789abcdef0");
    let ingress = sg["SecurityGroupIngress"].as_array().unwrap();
    assert_eq!(ingress.len(), 1);
    assert_eq!(ingress[0]["FromPort"], 443);
    assert_eq!(ingress[0]["ToPort"], 443);
    // Every function interface carries every given group: the first admits them all.
    assert_eq!(ingress[0]["SourceSecurityGroupId"], "sg-0123456789abcdef0");
    for (name, p) in &eps {
        assert_eq!(p["VpcEndpointType"], "Interface", "{name}");
        assert_eq!(p["PrivateDnsEnabled"], true, "{name}");
        assert_eq!(p["VpcId"], "vpc-0123456789abcdef0", "{name}");
        assert_eq!(
            p["SubnetIds"],
            json!(SUBNETS.split(',').collect::<Vec<_>>()),
            "{name}"
        );
        assert_eq!(
            p["SecurityGroupIds"],
            json!([format!("ref:{sg_id}")]),
            "{name}"
        );
        assert_eq!(
            p["ServiceName"].as_str().unwrap(),
            format!(
                "com.amazonaws.{REGION}.{}",
                name.strip_prefix("VpcEndpoint").unwrap()
            )
        );
    }

    // A chosen list, and DynamoDB's gateway endpoint on the route tables given.
    let t = deployed(&with(
        &create,
        &[
            ("VpcEndpointServices", "sts,eks"),
            ("VpcRouteTableIds", "rtb-0123456789abcdef0"),
        ],
    ));
    let eps = endpoints(&t);
    assert_eq!(
        services(&eps),
        BTreeSet::from(["sts", "eks", "dynamodb"].map(String::from))
    );
    let ddb = &eps["VpcEndpointdynamodb"];
    assert_eq!(ddb["VpcEndpointType"], "Gateway");
    assert_eq!(ddb["RouteTableIds"], json!(["rtb-0123456789abcdef0"]));
    assert!(try_deployed(&with(&create, &[("VpcEndpointServices", "s3")])).is_err());
}

/// A large cell in a VPC: 100 clusters named in `Clusters`, the VPC settings and endpoints on,
/// translates (the per-cluster permissions and access entries all there). CloudFormation would
/// refuse it (more than 500 resources, the rotator's policies past IAM's cap):
/// [`a_hundred_cell_clusters_in_a_vpc_translate_and_lint`] is the deployable shape.
#[test]
fn a_hundred_clusters_in_a_vpc_translate() {
    let clusters: Vec<String> = (0..100).map(|i| format!("cluster-{i:03}")).collect();
    let list = clusters.join(",");
    let params: Vec<(&str, &str)> = vec![
        ("Clusters", list.as_str()),
        ("VpcSubnetIds", SUBNETS),
        ("VpcSecurityGroupIds", SECURITY_GROUPS),
        ("VpcEndpoints", "Create"),
        ("VpcId", "vpc-0123456789abcdef0"),
        ("VpcRouteTableIds", "rtb-0123456789abcdef0"),
        ("FanOut", "Enabled"),
    ];
    let t = deployed(&params);
    assert_eq!(resources_of(&t, "AWS::EKS::AccessEntry").len(), 300);
    assert_eq!(endpoints(&t).len(), 9);
    for f in KUBE_FUNCTIONS {
        assert!(
            t["Resources"][f]["Properties"]["VpcConfig"].is_object(),
            "{f}"
        );
    }
    let described: BTreeSet<String> = may(&t, "RotatorFunction", "eks:DescribeCluster")
        .into_iter()
        .map(|g| g.resource)
        .collect();
    assert_eq!(described.len(), 100);
}

/// IAM caps the inline policies of one role at 10,240 characters together (whitespace not
/// counted).
const INLINE_POLICY_LIMIT: usize = 10_240;

/// Each role's inline policies in the resolved template `t`, in IAM's count: the policy
/// documents' JSON without whitespace, the role's own `Policies` and every
/// `AWS::IAM::RolePolicy` naming it.
fn inline_policy_sizes(t: &Value) -> BTreeMap<String, usize> {
    let chars = |doc: &Value| {
        serde_json::to_string(doc)
            .unwrap()
            .chars()
            .filter(|c| !c.is_whitespace())
            .count()
    };
    let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
    for (id, role) in resources_of(t, "AWS::IAM::Role") {
        let own: usize = role["Policies"]
            .as_array()
            .map(|ps| ps.iter().map(|p| chars(&p["PolicyDocument"])).sum())
            .unwrap_or(0);
        sizes.insert(id.to_string(), own);
    }
    for (_, p) in resources_of(t, "AWS::IAM::RolePolicy") {
        // The resolved template names the role `ref:<logical id>`.
        let role = p["RoleName"].as_str().unwrap_or_default();
        let id = role.strip_prefix("ref:").unwrap_or(role).to_string();
        *sizes.entry(id).or_default() += chars(&p["PolicyDocument"]);
    }
    sizes
}

/// The most clusters of 20-character names a stack serves with `Clusters` (docs/iam-and-rbac.md):
/// beyond, the rotator role's inline policies pass IAM's cap and the deploy fails. `CellClusters`
/// has no such limit.
const CLUSTERS_THAT_FIT: usize = 8;
/// [`CLUSTERS_THAT_FIT`] with the functions in a VPC (their network interface policy counts too).
const CLUSTERS_THAT_FIT_IN_A_VPC: usize = 7;

/// `n` cluster names of 20 characters.
fn cluster_names(n: usize) -> String {
    (0..n)
        .map(|i| format!("platform-prod-eu-{i:03}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Each role's inline policy sizes for `n` clusters given as `list_param`, with
/// `AutoScalingGroupUpdates=Enabled` and node roles to pass (their policies count too), the
/// functions in a VPC or not.
fn sizes_for(list_param: &str, n: usize, vpc: bool) -> BTreeMap<String, usize> {
    let list = cluster_names(n);
    let mut params = vec![
        (list_param, list.as_str()),
        ("AutoScalingGroupUpdates", "Enabled"),
        ("NodeRoleArns", NODE_ROLES),
    ];
    if vpc {
        params.extend([
            ("VpcSubnetIds", SUBNETS),
            ("VpcSecurityGroupIds", SECURITY_GROUPS),
        ]);
    }
    let sizes = inline_policy_sizes(&deployed(&params));
    eprintln!("{n} clusters ({list_param}, in a VPC: {vpc}): {sizes:?}");
    sizes
}

/// Issue 47, part 3: every role's inline policies for 1, [`CLUSTERS_THAT_FIT`], 10 and 100
/// clusters of 20-character names. Named in `Clusters`, up to [`CLUSTERS_THAT_FIT`]
/// ([`CLUSTERS_THAT_FIT_IN_A_VPC`] in a VPC) every role fits IAM's cap; the rotator's grows with
/// each cluster (its per-cluster describe and node group policies, and the cluster list in its
/// Auto Scaling conditions) and passes the cap beyond. As `CellClusters`, every role's policies
/// are the same size for 1, 10 and 100 clusters, within the cap, in a VPC or not. Prints the
/// figures docs/iam-and-rbac.md quotes.
#[test]
fn inline_policies_of_each_role_for_1_10_and_100_clusters() {
    for (vpc, fit) in [
        (false, CLUSTERS_THAT_FIT),
        (true, CLUSTERS_THAT_FIT_IN_A_VPC),
    ] {
        let mut rotator = BTreeMap::new();
        for n in [1usize, fit, 10, 100] {
            let sizes = sizes_for("Clusters", n, vpc);
            rotator.insert(n, sizes.get("RotatorFunctionRole").copied().unwrap_or(0));
            if n <= fit {
                for (role, size) in &sizes {
                    assert!(
                        *size <= INLINE_POLICY_LIMIT,
                        "{n} clusters (VPC {vpc}): {role}'s inline policies are {size} characters (IAM allows {INLINE_POLICY_LIMIT})"
                    );
                }
            }
        }
        let grows = (rotator[&100] - rotator[&10]) / 90;
        eprintln!("rotator (Clusters, VPC {vpc}): {rotator:?}; {grows} characters a cluster");
        assert!(
            rotator[&fit] + grows > INLINE_POLICY_LIMIT,
            "one more cluster than {fit} would fit (VPC {vpc}): raise the constant (and docs/iam-and-rbac.md): {rotator:?}"
        );

        // CellClusters: one size whatever the number, every role within the cap.
        let cell: BTreeMap<usize, BTreeMap<String, usize>> = [1usize, 10, 100]
            .into_iter()
            .map(|n| (n, sizes_for("CellClusters", n, vpc)))
            .collect();
        assert_eq!(
            cell[&1], cell[&10],
            "CellClusters (VPC {vpc}): 1 and 10 clusters differ"
        );
        assert_eq!(
            cell[&1], cell[&100],
            "CellClusters (VPC {vpc}): 1 and 100 clusters differ"
        );
        assert_eq!(cell[&1].len(), 4, "{:?}", cell[&1]);
        for (role, size) in &cell[&100] {
            assert!(
                *size <= INLINE_POLICY_LIMIT,
                "CellClusters (VPC {vpc}): {role}'s inline policies are {size} characters (IAM allows {INLINE_POLICY_LIMIT})"
            );
        }
    }
}

/// CloudFormation's quota of resources a template declares (a resource whose condition is false
/// counts too).
const TEMPLATE_RESOURCE_LIMIT: usize = 500;

/// Issue 47, part 3: a cell of 100 clusters (`CellClusters`), the VPC settings and endpoints
/// on, translates, declares at most [`TEMPLATE_RESOURCE_LIMIT`] resources (its access entries and
/// no policy per cluster) and passes cfn-lint (current and 1.51) as CloudFormation sees it; the
/// same 100 clusters as `Clusters` do not (cfn-lint names the resource quota).
#[test]
fn a_hundred_cell_clusters_in_a_vpc_translate_and_lint() {
    let list = cluster_names(100);
    let params = |list_param: &'static str| -> Vec<(&'static str, String)> {
        vec![
            (list_param, list.clone()),
            ("VpcSubnetIds", SUBNETS.to_string()),
            ("VpcSecurityGroupIds", SECURITY_GROUPS.to_string()),
            ("VpcEndpoints", "Create".to_string()),
            ("VpcId", "vpc-0123456789abcdef0".to_string()),
            ("VpcRouteTableIds", "rtb-0123456789abcdef0".to_string()),
            ("FanOut", "Enabled".to_string()),
            ("AutoScalingGroupUpdates", "Enabled".to_string()),
            ("NodeRoleArns", NODE_ROLES.to_string()),
        ]
    };
    let dir = std::env::temp_dir().join(format!("nodecycle-cells-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let translate = |list_param: &'static str| -> (PathBuf, Value) {
        let out = dir.join(format!("{list_param}.json"));
        let mut cmd = Command::new(lint_python());
        cmd.arg(nodecycle_tests::repo_path("scripts/cfn/translate.py"))
            .arg("--out")
            .arg(&out)
            .arg(nodecycle_tests::repo_path("template.yaml"));
        for (k, v) in params(list_param) {
            cmd.arg("--param").arg(format!("{k}={v}"));
        }
        let run = cmd.output().expect("run scripts/cfn/translate.py");
        assert!(run.status.success(), "{run:?}");
        let t: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        (out, t)
    };
    let lint = |file: &PathBuf, venv: PathBuf| {
        Command::new(venv.join("bin/cfn-lint"))
            .arg(file)
            .output()
            .expect("run cfn-lint")
    };
    let lint_151 = {
        let mut v = support::lint_venv().into_os_string();
        v.push("-cfn-lint-1.51");
        PathBuf::from(v)
    };

    let (file, t) = translate("CellClusters");
    let declared = t["Resources"].as_object().unwrap().len();
    assert!(declared <= TEMPLATE_RESOURCE_LIMIT, "{declared} resources");
    for venv in [support::lint_venv(), lint_151] {
        if !venv.join("bin/cfn-lint").exists() {
            eprintln!("no {venv:?}: scripts/lint-template.sh installs it");
            continue;
        }
        let out = lint(&file, venv.clone());
        assert!(
            out.status.success(),
            "cfn-lint ({venv:?}) {file:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // As deployed: an access entry per cluster and function, no policy per cluster.
    let resolved: Vec<(&str, String)> = params("CellClusters")
        .iter()
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    let resolved: Vec<(&str, &str)> = resolved.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let d = deployed(&resolved);
    assert_eq!(resources_of(&d, "AWS::EKS::AccessEntry").len(), 300);
    for (id, _) in resources_of(&d, "AWS::IAM::RolePolicy") {
        assert!(!id.contains("platformprodeu"), "a policy per cluster: {id}");
    }
    for f in KUBE_FUNCTIONS {
        assert!(
            d["Resources"][f]["Properties"]["VpcConfig"].is_object(),
            "{f}"
        );
    }

    // The same clusters named in the permissions: more resources than CloudFormation takes.
    let (file, t) = translate("Clusters");
    assert!(t["Resources"].as_object().unwrap().len() > TEMPLATE_RESOURCE_LIMIT);
    let out = lint(&file, support::lint_venv());
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("more than 500"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The cell's tag as the requests of the cell tests carry it (the stack is `nodecycle` in
/// scripts/cfn/cfn.py).
const CELL_TAG: &str = "aws:ResourceTag/nodecycle.dev/cell";
const CELL_CLUSTERS: &[(&str, &str)] = &[
    ("CellClusters", "prod,test-1,edge_2"),
    ("AutoScalingGroupUpdates", "Enabled"),
];

/// CellClusters: every permission the cluster names scope (Auto Scaling groups, launch templates,
/// clusters and node groups) is scoped by the cell's tag instead, keeping every other guard: a
/// group or template of some cluster (eks:cluster-name present), templates opted in and never
/// EKS's own, the same functions for the same actions.
#[test]
fn cell_clusters_are_trusted_by_the_cell_tag_with_every_other_guard() {
    let t = deployed(CELL_CLUSTERS);
    let named = deployed(&[
        ("Clusters", "prod,test-1,edge_2"),
        ("AutoScalingGroupUpdates", "Enabled"),
    ]);
    let on = |t: &Value,
              f: &str,
              action: &'static str,
              resource: String,
              tags: &[(&'static str, &'static str)]| {
        allows(t, f, &request(action, resource, tags))
    };
    // Group actions: the function of each, on a group of some cluster tagged with this cell.
    let group_actions: [(&str, &str); 9] = [
        ("RotatorFunction", "autoscaling:SetDesiredCapacity"),
        (
            "RotatorFunction",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
        ),
        ("RotatorFunction", "autoscaling:SuspendProcesses"),
        ("RotatorFunction", "autoscaling:ResumeProcesses"),
        ("RotatorFunction", "autoscaling:UpdateAutoScalingGroup"),
        ("OpsFunction", "autoscaling:SetDesiredCapacity"),
        (
            "OpsFunction",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
        ),
        (
            "InterruptionHandlerFunction",
            "autoscaling:CompleteLifecycleAction",
        ),
        (
            "InterruptionHandlerFunction",
            "autoscaling:RecordLifecycleActionHeartbeat",
        ),
    ];
    for (f, action) in group_actions {
        let mine = [(CELL_TAG, "nodecycle"), (CLUSTER_TAG, "any-cluster")];
        assert!(on(&t, f, action, group(), &mine), "{f}: {action}");
        // Another cell's, no cell tag, or no cluster tag: no.
        assert!(
            !on(
                &t,
                f,
                action,
                group(),
                &[(CELL_TAG, "other"), (CLUSTER_TAG, "prod")]
            ),
            "{f}: {action}"
        );
        assert!(
            !on(&t, f, action, group(), &[(CLUSTER_TAG, "prod")]),
            "{f}: {action}"
        );
        assert!(
            !on(&t, f, action, group(), &[(CELL_TAG, "nodecycle")]),
            "{f}: {action}"
        );
        // The named scope is unchanged: the cluster names, not the cell tag.
        assert!(
            on(&named, f, action, group(), &[(CLUSTER_TAG, "prod")]),
            "{f}: {action}"
        );
        assert!(!on(&named, f, action, group(), &mine), "{f}: {action}");
    }
    // Launch templates: the cell's, of some cluster, opted in, never EKS's own.
    for action in [
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",
        "ec2:RunInstances",
    ] {
        let lt = |tags: &[(&'static str, &'static str)]| {
            on(&t, "RotatorFunction", action, launch_template(), tags)
        };
        assert!(
            lt(&[
                (CELL_TAG, "nodecycle"),
                (CLUSTER_TAG, "c"),
                (MANAGED_TAG, "true")
            ]),
            "{action}"
        );
        assert!(
            !lt(&[(CELL_TAG, "nodecycle"), (CLUSTER_TAG, "c")]),
            "{action}"
        );
        assert!(
            !lt(&[(CELL_TAG, "nodecycle"), (MANAGED_TAG, "true")]),
            "{action}"
        );
        assert!(
            !lt(&[
                (CELL_TAG, "other"),
                (CLUSTER_TAG, "c"),
                (MANAGED_TAG, "true")
            ]),
            "{action}"
        );
        assert!(
            !lt(&[(CLUSTER_TAG, "prod"), (MANAGED_TAG, "true")]),
            "{action}"
        );
        assert!(
            !lt(&[
                (CELL_TAG, "nodecycle"),
                (CLUSTER_TAG, "c"),
                (MANAGED_TAG, "true"),
                (NODEGROUP_TAG, "g")
            ]),
            "{action}"
        );
        for other in [
            "AmiWatcherFunction",
            "InterruptionHandlerFunction",
            "OpsFunction",
        ] {
            assert!(
                !on(
                    &t,
                    other,
                    action,
                    launch_template(),
                    &[
                        (CELL_TAG, "nodecycle"),
                        (CLUSTER_TAG, "c"),
                        (MANAGED_TAG, "true")
                    ]
                ),
                "{other}: {action}"
            );
        }
    }
    // EKS: the describes each function's code calls and the rotator's node group updates, on
    // any cluster and node group of this region and account tagged with this cell, no other.
    let cluster = |c: &str| arn("eks", &format!("cluster/{c}"));
    let nodegroup = |c: &str| arn("eks", &format!("nodegroup/{c}/general/1a2b"));
    for (f, actions) in EKS_ACTIONS {
        let granted: BTreeSet<String> = grants_of(&t, f)
            .into_iter()
            .filter(|g| g.action.starts_with("eks:"))
            .map(|g| g.action)
            .collect();
        assert_eq!(
            granted,
            actions.iter().map(|a| a.to_string()).collect(),
            "{f}"
        );
        for action in actions {
            let resource = if action.contains("Nodegroup") {
                nodegroup
            } else {
                cluster
            };
            for c in ["prod", "not-in-the-list"] {
                assert!(
                    on(&t, f, action, resource(c), &[(CELL_TAG, "nodecycle")]),
                    "{f}: {action} {c}"
                );
                assert!(!on(&t, f, action, resource(c), &[]), "{f}: {action} {c}");
                assert!(
                    !on(&t, f, action, resource(c), &[(CELL_TAG, "other")]),
                    "{f}: {action} {c}"
                );
            }
            let elsewhere = format!("arn:aws:eks:eu-west-1:{ACCOUNT}:cluster/prod");
            assert!(
                !on(&t, f, action, elsewhere, &[(CELL_TAG, "nodecycle")]),
                "{f}: {action}"
            );
        }
    }
}

#[test]
fn clusters_or_cell_clusters_not_both() {
    let err = try_deployed(&[("Clusters", "prod"), ("CellClusters", "test")]).unwrap_err();
    assert!(err.contains("not both"), "{err}");
    for cells in ["prod,,test", "prod,not a name"] {
        let err = try_deployed(&[("CellClusters", cells)]).unwrap_err();
        assert!(err.contains("CellClusters"), "{cells:?}: {err}");
    }
    let t = deployed(&[("CellClusters", "prod,test-1,edge_2")]);
    assert_eq!(t["Outputs"]["PermissionScope"], "CellTag");
    assert_eq!(t["Outputs"]["CellTag"], "nodecycle");
    assert_eq!(t["Outputs"]["ClusterNames"], "prod,test-1,edge_2");
}

/// CellClusters: an access entry for each function that talks to Kubernetes in each cluster,
/// as with Clusters (one Kubernetes group per function, no access policy).
#[test]
fn cell_clusters_get_the_access_entries_of_named_ones() {
    let entries = |t: &Value| -> BTreeSet<(String, String, String)> {
        resources_of(t, "AWS::EKS::AccessEntry")
            .into_iter()
            .map(|(_, e)| {
                assert_eq!(e["Type"], "STANDARD");
                assert!(e.get("AccessPolicies").is_none(), "{e}");
                (
                    e["ClusterName"].as_str().unwrap().to_string(),
                    e["PrincipalArn"].as_str().unwrap().to_string(),
                    e["KubernetesGroups"].to_string(),
                )
            })
            .collect()
    };
    let cell = deployed(&[("CellClusters", "prod,test-1,edge_2")]);
    let named = deployed(&[("Clusters", "prod,test-1,edge_2")]);
    assert_eq!(entries(&cell).len(), 9);
    assert_eq!(entries(&cell), entries(&named));
    let off = deployed(&[("CellClusters", "prod"), ("CreateAccessEntries", "false")]);
    assert!(resources_of(&off, "AWS::EKS::AccessEntry").is_empty());
}

/// `member_requests` as a cell-tag scoped deployment sees them: each request once with this
/// cell's tag, once with another cell's, once without.
fn member_requests_with_cell_tags() -> Vec<Request<'static>> {
    let mut out = Vec::new();
    for req in member_requests() {
        for cell in [Some("nodecycle"), Some("other"), None] {
            let mut context = req.context.clone();
            if let Some(cell) = cell {
                context.insert(CELL_TAG, vec![cell]);
            }
            out.push(Request {
                action: req.action,
                resource: req.resource.clone(),
                context,
            });
        }
    }
    out
}

/// A spoke given CellTag (a cell of CellClusters): no fixed cluster slot in any permission (the
/// slots only create access entries), the same decisions in the member as the cell's roles make
/// in the cell's account, by the cell tag.
#[test]
fn a_cell_tag_spoke_allows_in_the_member_what_the_cell_allows_by_the_cell_tag() {
    let no_role_arns = [
        ("AmiWatcherRoleArns", ""),
        ("RotatorRoleArns", ""),
        ("InterruptionHandlerRoleArns", ""),
        ("OpsRoleArns", ""),
    ];
    for updates in ["Disabled", "Enabled"] {
        let cell = deployed(&[
            ("CellClusters", "prod,test-1"),
            ("AutoScalingGroupUpdates", updates),
        ]);
        // No slot at all, or a slot for an access entry: the same permissions.
        for slots in [vec![("Cluster1", ""), ("Cluster2", "")], vec![]] {
            let mut params = vec![
                ("CellTag", "nodecycle"),
                ("AutoScalingGroupUpdates", updates),
            ];
            params.extend(no_role_arns);
            params.extend(slots.iter().copied());
            let member = spoke(&params).unwrap();
            for (f, role) in SPOKE_ROLES {
                for req in member_requests_with_cell_tags() {
                    assert_eq!(
                        role_allows(&member, role, &req),
                        allows(&cell, f, &req),
                        "{role} vs {f} ({updates}, {slots:?}): {} on {} with {:?}",
                        req.action,
                        req.resource,
                        req.context
                    );
                }
            }
        }
    }
    // The ops role reads the access entries (doctor) of the cell's clusters only.
    let mut params = vec![("CellTag", "nodecycle")];
    params.extend(no_role_arns);
    let member = spoke(&params).unwrap();
    let entry = arn(
        "eks",
        "access-entry/prod/role/111111111111/nodecycle-rotator/0a1b",
    );
    let describe = |tags: &[(&'static str, &'static str)]| {
        role_allows(
            &member,
            "OpsRole",
            &request("eks:DescribeAccessEntry", entry.clone(), tags),
        )
    };
    assert!(describe(&[(CELL_TAG, "nodecycle")]));
    assert!(!describe(&[(CELL_TAG, "other")]));
    assert!(!describe(&[]));
    // Its own access entries carry the tag.
    for (_, e) in resources_of(&member, "AWS::EKS::AccessEntry") {
        assert_eq!(
            e["Tags"],
            json!([{"Key": "nodecycle.dev/cell", "Value": "nodecycle"}]),
            "{e}"
        );
    }
}

/// A spoke given CellTag trusts the cell's function roles by their tags (which the cell puts on
/// them and which survive a role's replacement, unlike its ARN), in the cell's account only,
/// each spoke role only the function of its name, with the external id or organisation kept.
#[test]
fn a_cell_tag_spoke_trusts_the_cells_roles_by_their_tags() {
    let cell = deployed(&[("CellClusters", "prod")]);
    let functions = [
        ("AmiWatcherFunction", "AmiWatcherRole", "ami-watcher"),
        ("RotatorFunction", "RotatorRole", "rotator"),
        (
            "InterruptionHandlerFunction",
            "InterruptionHandlerRole",
            "interruption",
        ),
        ("OpsFunction", "OpsRole", "ops"),
    ];
    for (f, _, function) in functions {
        let tags = &cell["Resources"][role_of(&cell, f)]["Properties"]["Tags"];
        assert_eq!(
            tags,
            &json!([
                {"Key": "nodecycle.dev/cell", "Value": "nodecycle"},
                {"Key": "nodecycle.dev/function", "Value": function}
            ]),
            "{f}"
        );
    }
    let mut params = vec![("CellTag", "nodecycle"), ("OrganizationId", "o-abcdefghij")];
    params.extend([
        ("AmiWatcherRoleArns", ""),
        ("RotatorRoleArns", ""),
        ("InterruptionHandlerRoleArns", ""),
        ("OpsRoleArns", ""),
    ]);
    let member = spoke(&params).unwrap();
    for (_, role, function) in functions {
        let s = &member["Resources"][role]["Properties"]["AssumeRolePolicyDocument"]["Statement"];
        assert_eq!(s.as_array().unwrap().len(), 1, "{role}: {s}");
        assert_eq!(
            s[0]["Principal"],
            json!({"AWS": format!("arn:aws:iam::{CELL}:root")}),
            "{role}"
        );
        assert_eq!(
            s[0]["Condition"],
            json!({"StringEquals": {
                "sts:ExternalId": "nodecycle-cell-7",
                "aws:PrincipalOrgID": "o-abcdefghij",
                "aws:PrincipalTag/nodecycle.dev/cell": "nodecycle",
                "aws:PrincipalTag/nodecycle.dev/function": function,
            }}),
            "{role}"
        );
    }
    // Without CellTag the role ARNs are required, as before.
    let err = spoke(&[("RotatorRoleArns", "")]).unwrap_err();
    assert!(
        err.contains("RotatorRoleArns is required without CellTag"),
        "{err}"
    );
}

/// The template resolved as stack `stack` (scripts/cfn/translate.py --stack).
fn deployed_as(stack: &str, params: &[(&str, &str)]) -> Value {
    let mut cmd = Command::new(lint_python());
    cmd.arg(nodecycle_tests::repo_path("scripts/cfn/translate.py"))
        .args(["--resolve", "--stack", stack])
        .arg(nodecycle_tests::repo_path("template.yaml"));
    for (k, v) in params {
        cmd.arg("--param").arg(format!("{k}={v}"));
    }
    let out = cmd.output().expect("run scripts/cfn/translate.py");
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Two stacks in one region (docs/organisation.md): every name the template gives a resource
/// carries the stack's name, so a second stack collides with none (the rest are
/// CloudFormation's generated names, no rule has a fixed name); the cell tag each trusts and
/// puts on its roles is its own name.
#[test]
fn two_stacks_in_a_region_share_no_resource_name() {
    const NAMES: [&str; 7] = [
        "LogGroupName",
        "AlarmName",
        "DashboardName",
        "TableName",
        "QueueName",
        "RoleName",
        "FunctionName",
    ];
    for params in [FULL, CELL_CLUSTERS, FAN_OUT] {
        let mut names: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for stack in ["cell-a", "cell-b"] {
            let t = deployed_as(stack, params);
            for (id, r) in t["Resources"].as_object().unwrap() {
                let props = &r["Properties"];
                for key in NAMES {
                    let Some(name) = props[key].as_str() else {
                        continue;
                    };
                    // A reference to another resource of the stack names nothing new.
                    if name.starts_with("ref:") || name.starts_with("getatt:") {
                        continue;
                    }
                    assert!(name.contains(stack), "{stack}: {id}.{key} = {name:?}");
                    names.entry(stack).or_default().insert(name.to_string());
                }
                if r["Type"] == "AWS::Events::Rule" {
                    assert!(props.get("Name").is_none(), "{id}: a fixed rule name");
                }
                if r["Type"] == "AWS::IAM::Role" {
                    assert_eq!(props["Tags"][0]["Value"], stack, "{id}");
                }
            }
            assert_eq!(t["Outputs"]["CellTag"], stack);
        }
        assert!(names["cell-a"].len() >= 4, "{names:?}");
        assert!(names["cell-a"].is_disjoint(&names["cell-b"]), "{names:?}");
    }
    // CellClusters: each stack's grants name its own tag value.
    let t = deployed_as("cell-b", CELL_CLUSTERS);
    let req = |cell: &'static str| {
        request(
            "eks:DescribeCluster",
            arn("eks", "cluster/prod"),
            &[(CELL_TAG, cell)],
        )
    };
    assert!(allows(&t, "RotatorFunction", &req("cell-b")));
    assert!(!allows(&t, "RotatorFunction", &req("nodecycle")));
}
