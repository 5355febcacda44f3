//! A pool's node group: it exists as the kind `nodeGroup` says, carries `eks:cluster-name`
//! (the stack's IAM conditions require it on groups and launch templates), and a self-managed
//! group's terminate lifecycle hook is the one nodecycle answers.

use super::port::{AsgFacts, HookFacts, ManagedFacts, TemplateFacts};
use super::{Check, CheckKind};
use crate::managed::TemplateRef;
use crate::port::PortError;
use crate::tags::{CLUSTER as CLUSTER_TAG, NODEGROUP as NODEGROUP_TAG};

/// The lifecycle transition of terminate hooks.
pub const TERMINATING: &str = "autoscaling:EC2_INSTANCE_TERMINATING";

fn tag_problem(
    what: &str,
    tags: &std::collections::BTreeMap<String, String>,
    cluster: &str,
) -> Option<String> {
    match tags.get(CLUSTER_TAG) {
        Some(v) if v == cluster => None,
        Some(v) => Some(format!(
            "{what} is tagged {CLUSTER_TAG}={v}, not {cluster}: nodecycle may not change it"
        )),
        None => Some(format!(
            "{what} has no tag {CLUSTER_TAG}={cluster}: nodecycle may not change it"
        )),
    }
}

fn asg_tag_fix(group: &str, cluster: &str) -> String {
    format!(
        "aws autoscaling create-or-update-tags --tags ResourceId={group},ResourceType=auto-scaling-group,\
         Key={CLUSTER_TAG},Value={cluster},PropagateAtLaunch=true"
    )
}

/// The `group` check of a pool whose policy says `autoScalingGroup: name`.
pub fn self_managed(
    pool: &str,
    cluster: &str,
    name: &str,
    asg: Result<Option<AsgFacts>, PortError>,
) -> Check {
    let missing = (
        format!("Auto Scaling group {name} does not exist"),
        "fix nodeGroup.autoScalingGroup (for an EKS managed node group use \
         nodeGroup: { managedNodeGroup: <name> })",
    );
    Check::if_found(asg, CheckKind::Group, pool, missing, |asg| {
        if let Some(ng) = asg.tags.get(NODEGROUP_TAG) {
            return Check::fail(
                CheckKind::Group,
                pool,
                format!(
                    "Auto Scaling group {name} belongs to managed node group {ng} (EKS owns its \
                 launch template), but the policy says autoScalingGroup"
                ),
                format!("set nodeGroup: {{ managedNodeGroup: {ng} }} in the policy"),
            );
        }
        let mut problems = Vec::new();
        let mut fixes = Vec::new();
        if asg.launch_template.is_none() {
            problems.push(match &asg.launch_configuration {
                Some(lc) => format!(
                    "Auto Scaling group {name} launches from launch configuration {lc}; nodecycle \
                 rotates only groups with a launch template"
                ),
                None => format!("Auto Scaling group {name} names no launch template"),
            });
            fixes.push("move the group to a launch template".to_owned());
        }
        if let Some(p) = tag_problem(&format!("Auto Scaling group {name}"), &asg.tags, cluster) {
            problems.push(p);
            fixes.push(asg_tag_fix(name, cluster));
        }
        if problems.is_empty() {
            Check::ok(
                CheckKind::Group,
                pool,
                format!("Auto Scaling group {name}, tagged {CLUSTER_TAG}={cluster}"),
            )
        } else {
            Check::fail(
                CheckKind::Group,
                pool,
                problems.join("; "),
                fixes.join("; "),
            )
        }
    })
}

/// The `group` check of a pool whose policy says `managedNodeGroup: name`. `backing` is the
/// read of the node group's Auto Scaling group (`None` when the node group names none or does
/// not exist); `asg_named_so` whether an Auto Scaling group called `name` exists (a kind
/// mix-up).
pub fn managed(
    pool: &str,
    cluster: &str,
    name: &str,
    node_group: Result<Option<ManagedFacts>, PortError>,
    backing: Option<Result<Option<AsgFacts>, PortError>>,
    asg_named_so: bool,
) -> Check {
    let ng = match node_group {
        Ok(Some(ng)) => ng,
        Ok(None) => {
            let (detail, fix) = if asg_named_so {
                (
                    format!(
                        "cluster {cluster} has no managed node group {name}; {name} is a \
                         self-managed Auto Scaling group"
                    ),
                    format!("set nodeGroup: {{ autoScalingGroup: {name} }} in the policy"),
                )
            } else {
                (
                    format!("cluster {cluster} has no managed node group {name}"),
                    "fix nodeGroup.managedNodeGroup (aws eks list-nodegroups --cluster-name \
                     <cluster>)"
                        .to_owned(),
                )
            };
            return Check::fail(CheckKind::Group, pool, detail, fix);
        }
        Err(e) => return Check::unreadable(CheckKind::Group, pool, &e),
    };
    let Some(asg_name) = ng.auto_scaling_group.as_deref() else {
        return Check::warn(
            CheckKind::Group,
            pool,
            format!("managed node group {name} has no Auto Scaling group yet"),
            "wait until the node group is ACTIVE, then run doctor again",
        );
    };
    match backing {
        None => Check::warn(
            CheckKind::Group,
            pool,
            format!("managed node group {name}: its Auto Scaling group was not read"),
            "run doctor again",
        ),
        Some(Err(e)) => Check::unreadable(CheckKind::Group, pool, &e),
        Some(Ok(None)) => Check::fail(
            CheckKind::Group,
            pool,
            format!(
                "managed node group {name} names Auto Scaling group {asg_name}, which does not exist"
            ),
            "check the node group's health (aws eks describe-nodegroup) and repair or recreate it",
        ),
        Some(Ok(Some(asg))) => {
            match tag_problem(
                &format!("Auto Scaling group {asg_name} of managed node group {name}"),
                &asg.tags,
                cluster,
            ) {
                Some(p) => Check::fail(CheckKind::Group, pool, p, asg_tag_fix(asg_name, cluster)),
                None => Check::ok(
                    CheckKind::Group,
                    pool,
                    format!(
                        "managed node group {name} (Auto Scaling group {asg_name}, tagged \
                         {CLUSTER_TAG}={cluster}); {}",
                        if ng.auto_repair {
                            "EKS node auto repair on: EKS repairs its nodes, nodecycle does not"
                        } else {
                            "EKS node auto repair off: nodecycle repairs its nodes (policy repair:)"
                        }
                    ),
                ),
            }
        }
    }
}

/// How a template reference reads in messages.
pub fn template_label(t: &TemplateRef) -> String {
    match (&t.id, &t.name) {
        (Some(id), Some(name)) => format!("{name} ({id})"),
        (Some(id), None) => id.clone(),
        (None, Some(name)) => name.clone(),
        (None, None) => "(unnamed)".to_owned(),
    }
}

/// The `launchTemplate` check: the template nodecycle creates versions of for this pool (a
/// self-managed group's, or a managed node group's custom one) is tagged for `cluster` and
/// opted in (`nodecycle.dev/managed=true`, [`crate::opt_in`]), and EKS did not create it.
pub fn launch_template(
    pool: &str,
    cluster: &str,
    template: &TemplateRef,
    facts: Result<Option<TemplateFacts>, PortError>,
) -> Check {
    let label = template_label(template);
    let missing = (
        format!("launch template {label} does not exist"),
        "point the group at an existing launch template",
    );
    Check::if_found(
        facts,
        CheckKind::LaunchTemplate,
        pool,
        missing,
        |t| match tag_problem(
            &format!("launch template {} ({})", t.name, t.id),
            &t.tags,
            cluster,
        ) {
            Some(p) => Check::fail(
                CheckKind::LaunchTemplate,
                pool,
                p,
                format!(
                    "aws ec2 create-tags --resources {} --tags Key={CLUSTER_TAG},Value={cluster}",
                    t.id
                ),
            ),
            None => match crate::opt_in::refusal(&t.id, &t.tags) {
                Some(p) => Check::fail(
                    CheckKind::LaunchTemplate,
                    pool,
                    p,
                    if t.tags.contains_key(NODEGROUP_TAG) {
                        "create a launch template of your own for the node group (eks update-nodegroup-version \
                     --launch-template), tagged as the docs say (docs/iam-and-rbac.md)"
                        .to_owned()
                    } else {
                        format!(
                            "aws ec2 create-tags --resources {} --tags Key={},Value={}",
                            t.id,
                            crate::opt_in::MANAGED_TAG,
                            crate::opt_in::MANAGED_VALUE
                        )
                    },
                ),
                None => Check::ok(
                    CheckKind::LaunchTemplate,
                    pool,
                    format!(
                        "launch template {} ({}), tagged {CLUSTER_TAG}={cluster} and {}={}",
                        t.name,
                        t.id,
                        crate::opt_in::MANAGED_TAG,
                        crate::opt_in::MANAGED_VALUE
                    ),
                ),
            },
        },
    )
}

/// The `launchTemplate` line of a managed node group without a launch template of its own
/// (EKS's template, versioned by EKS through releaseVersion): nothing to tag.
pub fn no_custom_template(pool: &str, name: &str) -> Check {
    Check::ok(
        CheckKind::LaunchTemplate,
        pool,
        format!(
            "managed node group {name} has no launch template of its own (updates go by \
             releaseVersion): nothing to tag"
        ),
    )
}

/// The `lifecycleHook` check of a self-managed group: a terminate hook is optional, but one
/// that is not named `configured` is never answered by nodecycle (its EventBridge rule is
/// filtered to that name), so every termination waits for the heartbeat timeout.
pub fn hooks(
    pool: &str,
    group: &str,
    configured: &str,
    hooks: Result<Vec<HookFacts>, PortError>,
) -> Check {
    let hooks = match hooks {
        Ok(h) => h,
        Err(e) => return Check::unreadable(CheckKind::LifecycleHook, pool, &e),
    };
    let terminating: Vec<&str> = hooks
        .iter()
        .filter(|h| h.transition == TERMINATING)
        .map(|h| h.name.as_str())
        .collect();
    let ours = terminating.contains(&configured);
    let foreign: Vec<&str> = terminating
        .iter()
        .copied()
        .filter(|n| *n != configured)
        .collect();
    match (ours, foreign.is_empty()) {
        (false, true) => Check::ok(
            CheckKind::LifecycleHook,
            pool,
            format!(
                "Auto Scaling group {group} has no terminate lifecycle hook (optional: with \
                 {configured}, scale-ins wait for the drain)"
            ),
        ),
        (true, true) => Check::ok(
            CheckKind::LifecycleHook,
            pool,
            format!("Auto Scaling group {group} has terminate hook {configured}"),
        ),
        (true, false) => Check::warn(
            CheckKind::LifecycleHook,
            pool,
            format!(
                "Auto Scaling group {group} has terminate hook {configured} and also {}, which \
                 nodecycle does not answer",
                foreign.join(", ")
            ),
            "make sure another tool answers those hooks, or delete them",
        ),
        (false, false) => Check::fail(
            CheckKind::LifecycleHook,
            pool,
            format!(
                "Auto Scaling group {group} has terminate hook(s) {}, but nodecycle answers only \
                 {configured} (LifecycleHookName): every termination waits out the heartbeat \
                 timeout undrained",
                foreign.join(", ")
            ),
            format!(
                "rename it: aws autoscaling delete-lifecycle-hook --auto-scaling-group-name \
                 {group} --lifecycle-hook-name {}, then put-lifecycle-hook \
                 --lifecycle-hook-name {configured} (docs/concepts.md, Lifecycle hook); or, if nodecycle \
                 should answer {}, deploy the stack with that hook name",
                foreign[0], foreign[0]
            ),
        ),
    }
}

/// The `retention` check of a self-managed group `asg` with `hooks`: only when nodecycle's
/// terminate hook `configured` is on the group (the policy takes effect only with a terminate
/// hook). ok when the group's instance lifecycle policy retains and the hook's default result
/// is `ABANDON`; a warn for each that does not (an abandoned, or timed-out, hand-over would
/// terminate the node with its pods), with the command that fixes it.
pub fn retention(
    pool: &str,
    configured: &str,
    asg: &AsgFacts,
    hooks: &[HookFacts],
) -> Option<Check> {
    let hook = hooks
        .iter()
        .find(|h| h.transition == TERMINATING && h.name == configured)?;
    let group = &asg.name;
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    if !crate::retain::policy_retains(asg.terminate_hook_abandon.as_deref()) {
        problems.push(format!(
            "Auto Scaling group {group}'s instance lifecycle policy does not retain ({}): a              hand-over whose drain does not finish is abandoned and the node terminated with              its pods",
            match &asg.terminate_hook_abandon {
                Some(v) => format!("TerminateHookAbandon: {v}"),
                None => "none".to_owned(),
            }
        ));
        fixes.push(crate::retain::policy_fix(group));
    }
    if hook.default_result != "ABANDON" {
        problems.push(format!(
            "terminate hook {configured}'s default result is {}: a timed-out action terminates              the node whatever is on it",
            if hook.default_result.is_empty() { "unset" } else { &hook.default_result }
        ));
        fixes.push(format!(
            "aws autoscaling put-lifecycle-hook --auto-scaling-group-name {group}              --lifecycle-hook-name {configured} --lifecycle-transition {TERMINATING}              --default-result ABANDON (keep its heartbeat timeout)"
        ));
    }
    Some(if problems.is_empty() {
        Check::ok(
            CheckKind::Retention,
            pool,
            format!(
                "Auto Scaling group {group} retains an instance whose drain did not finish                  (TerminateHookAbandon: retain, {configured} default ABANDON)"
            ),
        )
    } else {
        Check::warn(
            CheckKind::Retention,
            pool,
            problems.join("; "),
            fixes.join("; "),
        )
    })
}

/// The `retention` finding of the instances Auto Scaling retains in group `group`
/// (`Terminating:Retained`), with the pods still on their nodes as `pods` read them: `None`
/// when none is retained; a warn naming each instance, its node and pods otherwise (the
/// rotator terminates each once its node is empty).
pub fn retained(
    pool: &str,
    group: &str,
    retained: &[String],
    pods: Result<std::collections::BTreeMap<String, crate::inventory::NodePods>, PortError>,
) -> Option<Check> {
    if retained.is_empty() {
        return None;
    }
    let pods = match pods {
        Ok(p) => p,
        Err(e) => return Some(Check::unreadable(CheckKind::Retention, pool, &e)),
    };
    let each: Vec<String> = retained
        .iter()
        .map(|id| match pods.get(id) {
            None => format!("{id} (no node)"),
            Some(n) if n.pods.is_empty() => format!("{id} (node {}, no pods)", n.node),
            Some(n) => format!("{id} (node {}, pods {})", n.node, n.pods.join(", ")),
        })
        .collect();
    Some(Check::warn(
        CheckKind::Retention,
        pool,
        format!(
            "Auto Scaling group {group} retains {} instance(s) whose drain did not finish              (Terminating:Retained): {}",
            retained.len(),
            each.join("; ")
        ),
        "let the pods leave (relax the PodDisruptionBudget that blocks them, or delete them):          the rotator then terminates the instance; `nodecycle status` shows them",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;
    use crate::port::ErrorKind;

    type Read<T> = Result<Option<T>, PortError>;

    fn tags(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn lt() -> TemplateRef {
        TemplateRef {
            id: Some("lt-1".into()),
            name: Some("prod-general".into()),
            version: Some("$Latest".into()),
        }
    }

    fn asg(t: &[(&str, &str)]) -> AsgFacts {
        AsgFacts {
            name: "g".into(),
            tags: tags(t),
            launch_template: Some(lt()),
            launch_configuration: None,
            terminate_hook_abandon: None,
            retained: Vec::new(),
        }
    }

    #[test]
    fn self_managed_cases() {
        let cases: Vec<(&str, Read<AsgFacts>, Status)> = vec![
            (
                "tagged",
                Ok(Some(asg(&[(CLUSTER_TAG, "prod")]))),
                Status::Ok,
            ),
            ("untagged", Ok(Some(asg(&[]))), Status::Fail),
            (
                "other cluster",
                Ok(Some(asg(&[(CLUSTER_TAG, "staging")]))),
                Status::Fail,
            ),
            ("missing", Ok(None), Status::Fail),
            (
                "a managed node group's group",
                Ok(Some(asg(&[
                    (CLUSTER_TAG, "prod"),
                    (NODEGROUP_TAG, "golden"),
                ]))),
                Status::Fail,
            ),
            (
                "launch configuration",
                Ok(Some(AsgFacts {
                    launch_template: None,
                    launch_configuration: Some("lc".into()),
                    ..asg(&[(CLUSTER_TAG, "prod")])
                })),
                Status::Fail,
            ),
            (
                "unreadable",
                Err(PortError::new(
                    "autoscaling:DescribeAutoScalingGroups",
                    ErrorKind::AccessDenied,
                    "x",
                )),
                Status::Fail,
            ),
        ];
        for (what, facts, expected) in cases {
            let c = self_managed("prod/general", "prod", "g", facts);
            assert_eq!(
                (c.status, c.check),
                (expected, CheckKind::Group),
                "{what}: {c}"
            );
        }
        let c = self_managed(
            "p",
            "prod",
            "g",
            Ok(Some(asg(&[
                (CLUSTER_TAG, "prod"),
                (NODEGROUP_TAG, "golden"),
            ]))),
        );
        assert!(c.fix.contains("managedNodeGroup: golden"), "{c}");
    }

    #[test]
    fn managed_cases() {
        let ng = || ManagedFacts {
            name: "golden".into(),
            auto_scaling_group: Some("eks-golden-1".into()),
            launch_template: None,
            auto_repair: false,
            ..Default::default()
        };
        let ok_asg = || Some(Ok(Some(asg(&[(CLUSTER_TAG, "prod")]))));
        type Case = (
            &'static str,
            Read<ManagedFacts>,
            Option<Read<AsgFacts>>,
            bool,
            Status,
        );
        let cases: Vec<Case> = vec![
            ("healthy", Ok(Some(ng())), ok_asg(), false, Status::Ok),
            ("missing", Ok(None), None, false, Status::Fail),
            (
                "missing, an ASG of that name",
                Ok(None),
                None,
                true,
                Status::Fail,
            ),
            (
                "untagged ASG",
                Ok(Some(ng())),
                Some(Ok(Some(asg(&[])))),
                false,
                Status::Fail,
            ),
            (
                "ASG gone",
                Ok(Some(ng())),
                Some(Ok(None)),
                false,
                Status::Fail,
            ),
            (
                "no ASG yet",
                Ok(Some(ManagedFacts {
                    auto_scaling_group: None,
                    ..ng()
                })),
                None,
                false,
                Status::Warn,
            ),
        ];
        for (what, n, b, named, expected) in cases {
            let c = managed("prod/golden", "prod", "golden", n, b, named);
            assert_eq!(
                (c.status, c.check),
                (expected, CheckKind::Group),
                "{what}: {c}"
            );
        }
        let c = managed("p", "prod", "g", Ok(None), None, true);
        assert!(c.fix.contains("autoScalingGroup: g"), "{c}");
        // EKS's repair configuration is reported: who repairs the group's nodes.
        for (auto, says) in [
            (true, "EKS repairs its nodes"),
            (false, "nodecycle repairs"),
        ] {
            let n = Ok(Some(ManagedFacts {
                auto_repair: auto,
                ..ng()
            }));
            let c = managed("prod/golden", "prod", "golden", n, ok_asg(), false);
            assert!(c.detail.contains(says), "{c}");
        }
    }

    #[test]
    fn launch_template_cases() {
        let t = |pairs: &[(&str, &str)]| TemplateFacts {
            id: "lt-1".into(),
            name: "n".into(),
            tags: tags(pairs),
        };
        let managed = (crate::opt_in::MANAGED_TAG, "true");
        assert_eq!(
            launch_template(
                "p",
                "prod",
                &lt(),
                Ok(Some(t(&[(CLUSTER_TAG, "prod"), managed])))
            )
            .status,
            Status::Ok
        );
        // The cluster tag alone: nodecycle may not write it (nor may its role).
        let c = launch_template("p", "prod", &lt(), Ok(Some(t(&[(CLUSTER_TAG, "prod")]))));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.detail.contains("lacks tag nodecycle.dev/managed=true"),
            "{c}"
        );
        assert_eq!(
            c.fix,
            "aws ec2 create-tags --resources lt-1 --tags Key=nodecycle.dev/managed,Value=true"
        );
        // A template EKS created for a managed node group: never.
        let c = launch_template(
            "p",
            "prod",
            &lt(),
            Ok(Some(t(&[
                (CLUSTER_TAG, "prod"),
                managed,
                ("eks:nodegroup-name", "golden"),
            ]))),
        );
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("created by EKS"), "{c}");
        let c = launch_template("p", "prod", &lt(), Ok(Some(t(&[("team", "x")]))));
        assert_eq!(
            (c.status, c.check),
            (Status::Fail, CheckKind::LaunchTemplate)
        );
        assert!(c.fix.starts_with("aws ec2 create-tags --resources lt-1"));
        assert_eq!(
            launch_template("p", "prod", &lt(), Ok(Some(t(&[(CLUSTER_TAG, "dev")])))).status,
            Status::Fail
        );
        assert_eq!(
            launch_template("p", "prod", &lt(), Ok(None)).status,
            Status::Fail
        );
    }

    #[test]
    fn hook_cases() {
        let h = |name: &str, transition: &str| HookFacts {
            name: name.into(),
            transition: transition.into(),
            default_result: "ABANDON".into(),
        };
        let launch = "autoscaling:EC2_INSTANCE_LAUNCHING";
        let cases: Vec<(&str, Vec<HookFacts>, Status)> = vec![
            ("none", vec![], Status::Ok),
            ("ours", vec![h("nodecycle-drain", TERMINATING)], Status::Ok),
            ("a launch hook only", vec![h("warmup", launch)], Status::Ok),
            ("foreign only", vec![h("drain", TERMINATING)], Status::Fail),
            (
                "ours and another",
                vec![h("nodecycle-drain", TERMINATING), h("other", TERMINATING)],
                Status::Warn,
            ),
            (
                "our name on launch",
                vec![h("nodecycle-drain", launch), h("x", TERMINATING)],
                Status::Fail,
            ),
        ];
        for (what, hs, expected) in cases {
            let c = hooks("p", "g", "nodecycle-drain", Ok(hs));
            assert_eq!(
                (c.status, c.check),
                (expected, CheckKind::LifecycleHook),
                "{what}: {c}"
            );
        }
    }

    #[test]
    fn retention_is_checked_only_with_our_hook_and_warns_what_would_kill_a_node() {
        let hook = |name: &str, default: &str| HookFacts {
            name: name.into(),
            transition: TERMINATING.into(),
            default_result: default.into(),
        };
        let with = |v: Option<&str>| AsgFacts {
            terminate_hook_abandon: v.map(str::to_owned),
            ..asg(&[(CLUSTER_TAG, "prod")])
        };
        let cases: Vec<(&str, AsgFacts, Vec<HookFacts>, Option<Status>)> = vec![
            ("no hook", with(None), vec![], None),
            (
                "another tool's hook",
                with(None),
                vec![hook("other", "CONTINUE")],
                None,
            ),
            (
                "retains",
                with(Some("retain")),
                vec![hook("nodecycle-drain", "ABANDON")],
                Some(Status::Ok),
            ),
            (
                "no policy",
                with(None),
                vec![hook("nodecycle-drain", "ABANDON")],
                Some(Status::Warn),
            ),
            (
                "terminate",
                with(Some("terminate")),
                vec![hook("nodecycle-drain", "ABANDON")],
                Some(Status::Warn),
            ),
            (
                "default continue",
                with(Some("retain")),
                vec![hook("nodecycle-drain", "CONTINUE")],
                Some(Status::Warn),
            ),
        ];
        for (what, a, hooks, expected) in cases {
            let c = retention("prod/general", "nodecycle-drain", &a, &hooks);
            assert_eq!(c.as_ref().map(|c| c.status), expected, "{what}: {c:?}");
            if let Some(c) = c.filter(|c| c.status == Status::Warn) {
                assert_eq!(c.check, CheckKind::Retention);
                assert!(!c.fix.is_empty(), "{what}: {c}");
            }
        }
    }

    #[test]
    fn retained_instances_are_named_with_their_pods() {
        use crate::inventory::NodePods;
        assert!(retained("p", "g", &[], Ok(Default::default())).is_none());
        let ids = vec!["i-1".to_owned(), "i-2".to_owned()];
        let pods = [(
            "i-1".to_owned(),
            NodePods {
                node: "n1".into(),
                pods: vec!["default/web-a".into()],
            },
        )]
        .into();
        let c = retained("p", "g", &ids, Ok(pods)).unwrap();
        assert_eq!((c.status, c.check), (Status::Warn, CheckKind::Retention));
        for part in ["i-1", "n1", "default/web-a", "i-2"] {
            assert!(c.detail.contains(part), "{part}: {c}");
        }
        let unreadable = retained(
            "p",
            "g",
            &ids,
            Err(PortError::new(
                "kubernetes:list pods",
                ErrorKind::AccessDenied,
                "x",
            )),
        )
        .unwrap();
        assert_eq!(unreadable.status, Status::Fail);
    }
}
