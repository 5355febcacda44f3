//! [`diagnose`] over an in-memory deployment: a healthy one passes, each fault seeded on its own
//! fails the check that names it (and only that one).

use std::collections::BTreeMap;

use super::contract::{self, KUBE_ROLES};
use super::memory::World;
use super::port::*;
use super::run::{Options, diagnose};
use super::{Check, CheckKind, Report, Status};
use crate::managed::TemplateRef;
use crate::tags::CLUSTER as CLUSTER_TAG;

const ROLE_PREFIX: &str = "arn:aws:iam::123456789012:role/";

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    // The in-memory ports never wait: one poll finishes them.
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// prod: self-managed pool `general` (ASG prod-general, template lt-general, our hook) and
/// managed pool `golden` (node group golden, custom template lt-golden).
fn healthy() -> World {
    let mut w = World::default();
    let mut outputs: BTreeMap<String, String> = contract::REQUIRED
        .iter()
        .map(|k| ((*k).to_owned(), String::new()))
        .collect();
    outputs.insert(contract::STATE_TABLE.into(), "state".into());
    outputs.insert(contract::POLICY_PREFIX.into(), "/nodecycle/pools/".into());
    outputs.insert(contract::LIFECYCLE_HOOK.into(), "nodecycle-drain".into());
    outputs.insert(contract::CLUSTER_NAMES.into(), "prod".into());
    outputs.insert(contract::EVENT_RULES.into(), "tick,spot".into());
    for role in KUBE_ROLES {
        outputs.insert(role.into(), format!("{ROLE_PREFIX}{role}"));
    }
    w.stacks.insert("nodecycle".into(), outputs);
    w.tables.insert(
        "state".into(),
        TableFacts {
            status: "ACTIVE".into(),
            keys: vec![("pk".into(), "HASH".into()), ("sk".into(), "RANGE".into())],
            attribute_types: tags(&[("pk", "S"), ("sk", "S")]),
            ttl_status: "ENABLED".into(),
            ttl_attribute: Some("ttl".into()),
        },
    );
    let terms = "amiSelectorTerms:\n  - alias: al2023@latest\n";
    w.parameters.insert(
        "/nodecycle/pools/prod/general".into(),
        format!(
            "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\n{terms}"
        ),
    );
    w.parameters.insert(
        "/nodecycle/pools/prod/golden".into(),
        format!("cluster: prod\nname: golden\nnodeGroup: {{ managedNodeGroup: golden }}\n{terms}"),
    );
    let lt = |id: &str| TemplateRef {
        id: Some(id.into()),
        name: None,
        version: Some("1".into()),
    };
    w.asgs.insert(
        "prod-general".into(),
        AsgFacts {
            name: "prod-general".into(),
            tags: tags(&[(CLUSTER_TAG, "prod")]),
            launch_template: Some(lt("lt-general")),
            launch_configuration: None,
            terminate_hook_abandon: Some("retain".into()),
            retained: Vec::new(),
        },
    );
    w.hooks.insert(
        "prod-general".into(),
        vec![HookFacts {
            name: "nodecycle-drain".into(),
            transition: super::groups::TERMINATING.into(),
            default_result: "ABANDON".into(),
        }],
    );
    w.asgs.insert(
        "eks-golden-1".into(),
        AsgFacts {
            name: "eks-golden-1".into(),
            tags: tags(&[(CLUSTER_TAG, "prod"), (crate::tags::NODEGROUP, "golden")]),
            launch_template: Some(lt("lt-eks")),
            launch_configuration: None,
            terminate_hook_abandon: None,
            retained: Vec::new(),
        },
    );
    w.node_groups.insert(
        ("prod".into(), "golden".into()),
        ManagedFacts {
            name: "golden".into(),
            auto_scaling_group: Some("eks-golden-1".into()),
            launch_template: Some(lt("lt-golden")),
            auto_repair: false,
            ..Default::default()
        },
    );
    for id in ["lt-general", "lt-golden"] {
        w.templates.insert(
            id.into(),
            TemplateFacts {
                id: id.into(),
                name: id.into(),
                tags: tags(&[(CLUSTER_TAG, "prod"), (crate::opt_in::MANAGED_TAG, "true")]),
            },
        );
    }
    w.clusters.insert(
        "prod".into(),
        ClusterFacts {
            status: "ACTIVE".into(),
            authentication_mode: Some("API_AND_CONFIG_MAP".into()),
            endpoint: None,
            ..Default::default()
        },
    );
    w.entries.insert(
        "prod".into(),
        KUBE_ROLES
            .iter()
            .map(|r| AccessEntryFacts {
                principal_arn: format!("{ROLE_PREFIX}{r}"),
                kubernetes_groups: vec![super::kubernetes_group(r).unwrap().into()],
                entry_type: "STANDARD".into(),
            })
            .collect(),
    );
    w.rbac.insert(
        "prod".into(),
        super::rbac::facts_from(super::rbac::MANIFEST).unwrap(),
    );
    w.rules.insert("tick".into(), "ENABLED".into());
    w.rules.insert("spot".into(), "ENABLED".into());
    w
}

fn options() -> Options {
    Options {
        stack: "nodecycle".into(),
        clusters: Vec::new(),
        fallback_prefix: "/nodecycle/pools/".into(),
    }
}

fn run(w: &World, o: &Options) -> Report {
    block_on(diagnose(w.ports(), o))
}

/// (check, subject) of every non-ok line.
fn problems(r: &Report) -> Vec<(Status, CheckKind, String)> {
    r.checks
        .iter()
        .filter(|c| c.status != Status::Ok)
        .map(|c| (c.status, c.check, c.subject.clone()))
        .collect()
}

/// A self-managed group with nodecycle's hook that does not retain is a warn; an instance
/// it retains is a warn naming the instance, its node and its pods.
#[test]
fn retention_and_retained_instances_are_reported() {
    let mut w = healthy();
    let g = w.asgs.get_mut("prod-general").unwrap();
    g.terminate_hook_abandon = None;
    g.retained = vec!["i-0retained".into()];
    w.pods.insert(
        "i-0retained".into(),
        crate::inventory::NodePods {
            node: "ip-10-0-1-9".into(),
            pods: vec!["default/db-0".into()],
        },
    );
    let r = run(&w, &options());
    let retention: Vec<&Check> = r
        .checks
        .iter()
        .filter(|c| c.check == CheckKind::Retention)
        .collect();
    assert_eq!(retention.len(), 2, "{retention:#?}");
    assert!(retention.iter().all(|c| c.status == Status::Warn));
    assert!(
        retention
            .iter()
            .any(|c| c.fix.contains("TerminateHookAbandon=retain"))
    );
    let found = retention
        .iter()
        .find(|c| c.detail.contains("i-0retained"))
        .unwrap();
    assert!(found.detail.contains("default/db-0"), "{found}");
}

#[test]
fn a_healthy_deployment_passes_every_check() {
    let r = run(&healthy(), &options());
    assert_eq!(problems(&r), vec![], "{:#?}", r.checks);
    let kinds: Vec<CheckKind> = r.checks.iter().map(|c| c.check).collect();
    use CheckKind::*;
    assert_eq!(
        kinds,
        vec![
            Stack,
            Table,
            Policy,
            Policy,
            Scope,
            Cluster,
            AccessEntry,
            AccessEntry,
            AccessEntry,
            Rbac,
            Rbac,
            Rbac,
            Group,
            LaunchTemplate,
            Retention,
            LifecycleHook,
            Group,
            LaunchTemplate,
            Release,
            Release,
            EventRule,
            EventRule,
        ]
    );
    assert_eq!(r.exit_code(), 0);
}

#[test]
fn each_fault_fails_its_own_check() {
    type Seed = fn(&mut World);
    type Problem = (Status, CheckKind, String);
    let rotator = "prod/RotatorRoleArn".to_owned();
    let cases: Vec<(&str, Seed, Vec<Problem>)> = vec![
        (
            "untagged group",
            |w| {
                w.asgs.get_mut("prod-general").unwrap().tags.clear();
            },
            vec![(Status::Fail, CheckKind::Group, "prod/general".into())],
        ),
        (
            "launch template not opted in",
            |w| {
                w.templates
                    .get_mut("lt-general")
                    .unwrap()
                    .tags
                    .remove(crate::opt_in::MANAGED_TAG);
            },
            vec![(
                Status::Fail,
                CheckKind::LaunchTemplate,
                "prod/general".into(),
            )],
        ),
        (
            "untagged launch template",
            |w| {
                w.templates.get_mut("lt-golden").unwrap().tags.clear();
            },
            vec![(
                Status::Fail,
                CheckKind::LaunchTemplate,
                "prod/golden".into(),
            )],
        ),
        (
            "missing access entry",
            |w| {
                w.entries.get_mut("prod").unwrap().remove(0);
            },
            vec![(Status::Fail, CheckKind::AccessEntry, rotator.clone())],
        ),
        (
            "missing RBAC binding",
            |w| {
                w.rbac
                    .get_mut("prod")
                    .unwrap()
                    .bindings
                    .retain(|b| b.name != "nodecycle-interruption");
            },
            vec![(
                Status::Fail,
                CheckKind::Rbac,
                "prod/nodecycle-interruption".into(),
            )],
        ),
        (
            "invalid policy",
            |w| {
                w.parameters.insert(
                    "/nodecycle/pools/prod/bad".into(),
                    "cluster: prod\nname: bad\n".into(),
                );
            },
            vec![(
                Status::Fail,
                CheckKind::Policy,
                "/nodecycle/pools/prod/bad".into(),
            )],
        ),
        (
            "an architecture the group's instance types do not run",
            |w| {
                w.parameters.insert(
                    "/nodecycle/pools/prod/general".into(),
                    "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: arm64\namiSelectorTerms:\n  - alias: al2023@latest\n".into(),
                );
                w.instance_types.insert(
                    "prod-general".into(),
                    crate::ami::instance_types::GroupTypes {
                        source: "launch template lt-general version 1".into(),
                        types: vec![("m5.large".into(), Some(vec!["x86_64".into()]))],
                        by_attributes: false,
                    },
                );
            },
            vec![(Status::Fail, CheckKind::Architecture, "prod/general".into())],
        ),
        (
            "disabled rule",
            |w| {
                w.rules.insert("spot".into(), "DISABLED".into());
            },
            vec![(Status::Fail, CheckKind::EventRule, "spot".into())],
        ),
        (
            "foreign hook name",
            |w| {
                w.hooks.get_mut("prod-general").unwrap()[0].name = "drain".into();
            },
            vec![(
                Status::Fail,
                CheckKind::LifecycleHook,
                "prod/general".into(),
            )],
        ),
        (
            "kind mismatch: a managed node group's ASG named as autoScalingGroup",
            |w| {
                w.parameters.insert(
                    "/nodecycle/pools/prod/general".into(),
                    "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: eks-golden-1 }\namiSelectorTerms:\n  - alias: al2023@latest\n".into(),
                );
            },
            vec![(Status::Fail, CheckKind::Group, "prod/general".into())],
        ),
        (
            "kind mismatch: managedNodeGroup names a self-managed group",
            |w| {
                w.parameters.insert(
                    "/nodecycle/pools/prod/golden".into(),
                    "cluster: prod\nname: golden\nnodeGroup: { managedNodeGroup: prod-general }\namiSelectorTerms:\n  - alias: al2023@latest\n".into(),
                );
            },
            vec![(Status::Fail, CheckKind::Group, "prod/golden".into())],
        ),
        (
            "TTL off",
            |w| {
                w.tables.get_mut("state").unwrap().ttl_status = "DISABLED".into();
            },
            vec![(Status::Fail, CheckKind::Table, "state".into())],
        ),
        (
            "group of an access entry wrong",
            |w| {
                w.entries.get_mut("prod").unwrap()[2].kubernetes_groups = vec!["ops".into()];
            },
            vec![(
                Status::Fail,
                CheckKind::AccessEntry,
                "prod/OpsRoleArn".into(),
            )],
        ),
    ];
    for (what, seed, expected) in cases {
        let mut w = healthy();
        seed(&mut w);
        let r = run(&w, &options());
        assert_eq!(problems(&r), expected, "{what}: {:#?}", r.checks);
        assert_eq!(r.exit_code(), 1, "{what}");
    }
}

#[test]
fn unreadable_things_are_fail_lines_naming_the_permission() {
    let mut w = healthy();
    w.denied = vec!["events:DescribeRule".into(), "eks:ListAccessEntries".into()];
    let r = run(&w, &options());
    let failed: Vec<&super::Check> = r
        .checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .collect();
    assert_eq!(failed.len(), 2 + 3, "{:#?}", r.checks);
    assert!(failed.iter().any(|c| c.fix.contains("events:DescribeRule")));
    assert!(
        failed
            .iter()
            .any(|c| c.fix.contains("eks:ListAccessEntries"))
    );
}

#[test]
fn no_stack_still_checks_policies_and_their_clusters() {
    let mut w = healthy();
    w.stacks.clear();
    let r = run(&w, &options());
    assert_eq!(r.checks[0].check, CheckKind::Stack);
    assert_eq!(r.checks[0].status, Status::Fail);
    assert_eq!(r.failed(), 1, "{:#?}", r.checks);
    assert!(r.checks.iter().any(|c| c.check == CheckKind::Rbac));
    assert!(r.checks.iter().any(|c| c.check == CheckKind::Group));
    assert!(!r.checks.iter().any(|c| c.check == CheckKind::Table));
}

#[test]
fn cluster_selection() {
    let w = healthy();
    let mut o = options();
    o.clusters = vec!["staging".into()];
    let r = run(&w, &o);
    assert_eq!(
        problems(&r),
        vec![(Status::Fail, CheckKind::Cluster, "staging".into())],
        "a cluster the stack does not serve"
    );
    assert!(!r.checks.iter().any(|c| c.check == CheckKind::Group));

    o.clusters = vec!["prod".into(), "prod".into()];
    let r = run(&w, &o);
    assert_eq!(problems(&r), vec![]);
    assert_eq!(
        r.checks
            .iter()
            .filter(|c| c.check == CheckKind::Rbac)
            .count(),
        3,
        "one per function group, for the cluster once"
    );
}

#[test]
fn an_aws_auth_cluster_is_a_warning_not_a_failure() {
    let mut w = healthy();
    w.clusters.get_mut("prod").unwrap().authentication_mode = Some("CONFIG_MAP".into());
    w.denied = vec!["eks:ListAccessEntries".into()];
    let r = run(&w, &options());
    assert_eq!(r.failed(), 0, "{:#?}", r.checks);
    assert_eq!(r.count(Status::Warn), 3);
}

/// What a member at `place` shows its spoke role: the cell's healthy cluster and groups, the
/// access entries of the spoke role (one role for every function, [`World`]'s pattern) and the
/// spoke's forwarding rules to the cell's bus in the place's region.
fn member(place: &str) -> World {
    let (account, region) = place.split_once('/').unwrap();
    let mut w = healthy();
    let role = format!("arn:aws:iam::{account}:role/nodecycle-spoke");
    w.entries.insert(
        "prod".into(),
        vec![AccessEntryFacts {
            principal_arn: role,
            kubernetes_groups: super::KUBERNETES_GROUPS
                .iter()
                .map(|(_, g)| (*g).to_owned())
                .collect(),
            entry_type: "STANDARD".into(),
        }],
    );
    let bus = format!("arn:aws:events:{region}:123456789012:event-bus/default");
    let rule = |name: &str, source: &str, types: &[&str]| {
        (
            RuleFacts {
                name: name.into(),
                state: "ENABLED".into(),
                pattern: Some(
                    serde_json::json!({"source": [source], "detail-type": types}).to_string(),
                ),
            },
            vec![bus.clone()],
        )
    };
    w.listed_rules = vec![
        rule(
            "spoke-ForwardInterruptionWarnings-A",
            "aws.ec2",
            &[
                "EC2 Spot Instance Interruption Warning",
                "EC2 Capacity Reservation Instance Interruption Warning",
                "EC2 Instance Rebalance Recommendation",
            ],
        ),
        rule(
            "spoke-ForwardInstanceStateChanges-A",
            "aws.ec2",
            &["EC2 Instance State-change Notification"],
        ),
        rule(
            "spoke-ForwardScheduledMaintenance-A",
            "aws.health",
            &["AWS Health Event"],
        ),
        rule(
            "spoke-ForwardTerminateLifecycleActions-A",
            "aws.autoscaling",
            &["EC2 Instance-terminate Lifecycle Action"],
        ),
        // Another tool's rule: not read further.
        (
            RuleFacts {
                name: "backup".into(),
                state: "ENABLED".into(),
                pattern: Some(r#"{"source":["aws.backup"]}"#.into()),
            },
            vec![],
        ),
    ];
    w
}

/// A member pool: checked through its spoke role (its cluster's access entries for the spoke
/// roles and RBAC, its group, template and hook, its forwarding rules in the member's world),
/// and a member whose role cannot be assumed is one FAIL line.
#[test]
fn member_pools_are_checked_through_their_spoke_roles() {
    let mut w = healthy();
    let member_doc = |group: &str| {
        format!(
            "nodeGroup: {{ autoScalingGroup: {group} }}\namiSelectorTerms:\n  - alias: al2023@latest\n"
        )
    };
    w.parameters.insert(
        "/nodecycle/pools/222222222222/eu-west-1/prod/general".into(),
        member_doc("prod-general"),
    );
    w.parameters.insert(
        "/nodecycle/pools/333333333333/us-east-1/x/general".into(),
        member_doc("x-general"),
    );
    let mut prod = member("222222222222/eu-west-1");
    prod.asgs.remove("prod-general");
    w.members
        .insert("222222222222/eu-west-1".into(), prod.clone());
    let r = block_on(super::run::diagnose_organisation(w.ports(), &w, &options()));
    assert_eq!(
        problems(&r),
        vec![
            (
                Status::Fail,
                CheckKind::Group,
                "222222222222/eu-west-1/prod/general".into()
            ),
            (
                Status::Fail,
                CheckKind::Spoke,
                "333333333333/us-east-1".into()
            ),
        ],
        "{:#?}",
        r.checks
    );
    let count = |kind: CheckKind| {
        r.checks
            .iter()
            .filter(|c| {
                c.check == kind
                    && c.status == Status::Ok
                    && c.subject.starts_with("222222222222/eu-west-1")
            })
            .count()
    };
    assert_eq!(count(CheckKind::Spoke), 1, "{:#?}", r.checks);
    assert_eq!(count(CheckKind::AccessEntry), 3, "{:#?}", r.checks);
    assert_eq!(count(CheckKind::Forwarding), 6, "{:#?}", r.checks);
    assert_eq!(count(CheckKind::Cluster), 1, "{:#?}", r.checks);
    // With the member's group back, only the unassumable member fails.
    w.members.insert(
        "222222222222/eu-west-1".into(),
        member("222222222222/eu-west-1"),
    );
    let r = block_on(super::run::diagnose_organisation(w.ports(), &w, &options()));
    assert_eq!(r.failed(), 1, "{:#?}", r.checks);
}

/// A member's forwarding rules and access entries: a disabled rule, a rule to another region's
/// bus, a missing access entry and one with the wrong group each fail the line that names the
/// member and the rule or cluster, with what to fix there.
#[test]
fn a_members_rules_and_access_entries_are_checked_where_they_are() {
    let mut w = healthy();
    w.parameters.insert(
        "/nodecycle/pools/222222222222/eu-west-1/prod/general".into(),
        "nodeGroup: { autoScalingGroup: prod-general }\namiSelectorTerms:\n  - alias: al2023@latest\n".into(),
    );
    let place = "222222222222/eu-west-1";
    let mut prod = member(place);
    // The lifecycle rule is disabled; the state-change rule goes to us-east-1's bus.
    prod.listed_rules[3].0.state = "DISABLED".into();
    prod.listed_rules[1].1 = vec!["arn:aws:events:us-east-1:123456789012:event-bus/default".into()];
    // The entry maps the spoke role to the rotator's group only.
    prod.entries.get_mut("prod").unwrap()[0].kubernetes_groups = vec!["nodecycle-rotator".into()];
    w.members.insert(place.into(), prod);
    let r = block_on(super::run::diagnose_organisation(w.ports(), &w, &options()));
    let failed: Vec<&super::Check> = r
        .checks
        .iter()
        .filter(|c| c.status == Status::Fail)
        .collect();
    let subjects: Vec<(CheckKind, &str)> = failed
        .iter()
        .map(|c| (c.check, c.subject.as_str()))
        .collect();
    assert_eq!(
        subjects,
        vec![
            (
                CheckKind::AccessEntry,
                "222222222222/eu-west-1/prod/InterruptionHandlerRoleArn"
            ),
            (
                CheckKind::AccessEntry,
                "222222222222/eu-west-1/prod/OpsRoleArn"
            ),
            (
                CheckKind::Forwarding,
                "222222222222/eu-west-1: EC2 Instance State-change Notification"
            ),
            (
                CheckKind::Forwarding,
                "222222222222/eu-west-1: EC2 Instance-terminate Lifecycle Action"
            ),
        ],
        "{:#?}",
        r.checks
    );
    assert!(
        failed[0]
            .detail
            .contains("arn:aws:iam::222222222222:role/nodecycle-spoke"),
        "{:?}",
        failed[0]
    );
    assert!(
        failed[0].fix.contains("account 222222222222 in eu-west-1"),
        "{:?}",
        failed[0]
    );
    assert!(
        failed[0]
            .fix
            .contains("--kubernetes-groups nodecycle-rotator nodecycle-interruption"),
        "{:?}",
        failed[0]
    );
    assert!(
        failed[2]
            .detail
            .contains("spoke-ForwardInstanceStateChanges-A"),
        "{:?}",
        failed[2]
    );
    assert!(
        failed[2].detail.contains("us-east-1:123456789012"),
        "{:?}",
        failed[2]
    );
    assert!(
        failed[3]
            .fix
            .contains("enable-rule --name spoke-ForwardTerminateLifecycleActions-A"),
        "{:?}",
        failed[3]
    );

    // No entry at all in the member's cluster: create it there.
    let mut prod = member(place);
    prod.entries.remove("prod");
    w.members.insert(place.into(), prod);
    let r = block_on(super::run::diagnose_organisation(w.ports(), &w, &options()));
    let entries: Vec<&super::Check> = r
        .checks
        .iter()
        .filter(|c| c.check == CheckKind::AccessEntry && c.subject.starts_with(place))
        .collect();
    assert_eq!(entries.len(), 3);
    assert!(entries.iter().all(|c| c.status == Status::Fail));
    assert!(entries[0].fix.contains("aws eks create-access-entry --cluster-name prod --principal-arn arn:aws:iam::222222222222:role/nodecycle-spoke"), "{:?}", entries[0]);

    // The rules unreadable through the spoke role: one line naming the permission.
    let mut prod = member(place);
    prod.denied = vec!["events:ListRules".into()];
    w.members.insert(place.into(), prod);
    let r = block_on(super::run::diagnose_organisation(w.ports(), &w, &options()));
    let forwarding: Vec<&super::Check> = r
        .checks
        .iter()
        .filter(|c| c.check == CheckKind::Forwarding)
        .collect();
    assert_eq!(forwarding.len(), 1);
    assert_eq!(forwarding[0].status, Status::Fail);
    assert!(
        forwarding[0].fix.contains("events:ListRules"),
        "{:?}",
        forwarding[0]
    );
}

/// [`healthy`] deployed with `CellClusters`: the stack says `PermissionScope=CellTag`, and every
/// cluster, node group, Auto Scaling group and launch template nodecycle reaches is tagged
/// `nodecycle.dev/cell=nodecycle`.
fn healthy_cell() -> World {
    let mut w = healthy();
    let outputs = w.stacks.get_mut("nodecycle").unwrap();
    outputs.insert(super::scope::PERMISSION_SCOPE.into(), "CellTag".into());
    outputs.insert(super::scope::CELL_TAG.into(), "nodecycle".into());
    let cell = (crate::tags::CELL.to_owned(), "nodecycle".to_owned());
    for asg in w.asgs.values_mut() {
        asg.tags.extend([cell.clone()]);
    }
    for t in w.templates.values_mut() {
        t.tags.extend([cell.clone()]);
    }
    for ng in w.node_groups.values_mut() {
        ng.tags.extend([cell.clone()]);
    }
    for c in w.clusters.values_mut() {
        c.tags.extend([cell.clone()]);
    }
    w
}

/// The `scope` check: a healthy stack naming one cluster passes; nine names warn, naming IAM's
/// limit and CellClusters; with CellClusters, every reached resource's cell tag is checked
/// and a missing or foreign one fails that resource's `cellTag` line only, with its command.
#[test]
fn the_scope_and_the_cell_tags_are_checked() {
    let r = run(&healthy(), &options());
    let scope: Vec<&Check> = r
        .checks
        .iter()
        .filter(|c| c.check == CheckKind::Scope)
        .collect();
    assert_eq!(scope.len(), 1, "{scope:#?}");
    assert_eq!(scope[0].status, Status::Ok, "{}", scope[0]);
    // Named clusters: no cell tag checked.
    assert!(!r.checks.iter().any(|c| c.check == CheckKind::CellTag));

    let mut w = healthy();
    let names: Vec<String> = (0..9).map(|i| format!("c{i}")).collect();
    w.stacks
        .get_mut("nodecycle")
        .unwrap()
        .insert(contract::CLUSTER_NAMES.into(), names.join(","));
    let r = run(
        &w,
        &Options {
            clusters: vec!["prod".into()],
            ..options()
        },
    );
    let c = r
        .checks
        .iter()
        .find(|c| c.check == CheckKind::Scope)
        .unwrap();
    assert_eq!(c.status, Status::Warn, "{c}");
    assert!(c.detail.contains("names 9 clusters; IAM's 10,240"), "{c}");
    assert!(c.fix.contains("CellClusters"), "{c}");

    let r = run(&healthy_cell(), &options());
    assert_eq!(problems(&r), vec![], "{:#?}", r.checks);
    let tagged: Vec<String> = r
        .checks
        .iter()
        .filter(|c| c.check == CheckKind::CellTag)
        .map(|c| c.detail.clone())
        .collect();
    // The cluster; the self-managed group and its template; the node group, its group and
    // its custom template.
    assert_eq!(tagged.len(), 6, "{tagged:#?}");
    for what in [
        "cluster prod",
        "Auto Scaling group prod-general",
        "launch template lt-general",
        "managed node group golden",
        "Auto Scaling group eks-golden-1 of managed node group golden",
        "launch template lt-golden",
    ] {
        assert!(
            tagged.iter().any(|d| d.starts_with(what)),
            "{what}: {tagged:#?}"
        );
    }

    // Each resource untagged (or another cell's) on its own: its line fails, nothing else.
    type Seed = fn(&mut World);
    let faults: [(Seed, &str, &str); 5] = [
        (
            |w| {
                w.clusters.get_mut("prod").unwrap().tags.clear();
            },
            "prod",
            "aws eks tag-resource",
        ),
        (
            |w| {
                let t = &mut w.asgs.get_mut("prod-general").unwrap().tags;
                t.insert(crate::tags::CELL.into(), "other".into());
            },
            "prod/general",
            "ResourceId=prod-general",
        ),
        (
            |w| {
                let t = &mut w.templates.get_mut("lt-general").unwrap().tags;
                t.remove(crate::tags::CELL);
            },
            "prod/general",
            "--resources lt-general",
        ),
        (
            |w| {
                let ng = w.node_groups.get_mut(&("prod".into(), "golden".into()));
                ng.unwrap().tags.clear();
            },
            "prod/golden",
            "--nodegroup-name golden",
        ),
        (
            |w| {
                let t = &mut w.asgs.get_mut("eks-golden-1").unwrap().tags;
                t.remove(crate::tags::CELL);
            },
            "prod/golden",
            "ResourceId=eks-golden-1",
        ),
    ];
    for (seed, subject, fix) in faults {
        let mut w = healthy_cell();
        seed(&mut w);
        let r = run(&w, &options());
        assert_eq!(
            problems(&r),
            vec![(Status::Fail, CheckKind::CellTag, subject.to_owned())],
            "{subject}: {:#?}",
            r.checks
        );
        let c = r.checks.iter().find(|c| c.status == Status::Fail).unwrap();
        assert!(c.fix.contains(fix), "{c}");
        assert!(c.fix.contains("nodecycle.dev/cell"), "{c}");
    }
}
