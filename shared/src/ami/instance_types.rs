//! Whether an architecture runs on a node group's instance types (pure): an `arm64` image in a
//! group of `m5.large` instances never boots, so such a pool is `invalid` and nothing of it is
//! launched. The facts come from [`crate::ami::resolve::NodeGroupCatalog::instance_types`]
//! (launch template, mixed instances policy overrides, or the managed node group's
//! `instanceTypes`, with `ec2:DescribeInstanceTypes` for what each supports).

use serde::Serialize;

use super::Architecture;
use crate::policy::{NodeGroup, Policy};
use crate::problem::Problems;

/// The instance types a node group launches and the architectures each supports.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupTypes {
    /// Where the types were read, for messages (`launch template lt-0abc version 3`).
    pub source: String,
    /// Each type with the architectures EC2 lists for it (`x86_64`, `arm64`, `i386`, ...);
    /// `None` when EC2 did not describe the type.
    pub types: Vec<(String, Option<Vec<String>>)>,
    /// The group chooses types by attributes (`InstanceRequirements`): EC2 picks types that run
    /// the image, there is nothing to check.
    pub by_attributes: bool,
}

/// The problems of running images of `arch` on `facts`' types: an error for each type that does
/// not support it. The path is `architecture` when the policy sets it (`from_policy`), else the
/// node group's field (the architecture then came from the group's current image). No facts
/// (no types known, or types chosen by attributes) is no problem: there is nothing to check.
pub fn check(
    arch: Architecture,
    from_policy: bool,
    node_group: &NodeGroup,
    facts: &GroupTypes,
) -> Problems {
    let mut problems = Problems::new();
    if facts.by_attributes {
        return problems;
    }
    let path = if from_policy {
        "architecture".to_string()
    } else {
        match node_group {
            NodeGroup::AutoScalingGroup(_) => "nodeGroup.autoScalingGroup".to_string(),
            NodeGroup::ManagedNodeGroup(_) => "nodeGroup.managedNodeGroup".to_string(),
        }
    };
    let group = match node_group {
        NodeGroup::AutoScalingGroup(g) => format!("Auto Scaling group {g}"),
        NodeGroup::ManagedNodeGroup(g) => format!("managed node group {g}"),
    };
    let misfits: Vec<String> = facts
        .types
        .iter()
        .filter_map(|(t, archs)| {
            let archs = archs.as_ref()?;
            (!archs.iter().any(|a| a == arch.as_str()))
                .then(|| format!("{t} ({})", archs.join(", ")))
        })
        .collect();
    if misfits.is_empty() {
        return problems;
    }
    let supported: Vec<String> = Architecture::ALL
        .iter()
        .filter(|a| {
            facts.types.iter().all(|(_, archs)| {
                archs
                    .as_ref()
                    .is_none_or(|x| x.iter().any(|s| s == a.as_str()))
            })
        })
        .map(ToString::to_string)
        .collect();
    let expected = match (from_policy, supported.first()) {
        (true, Some(s)) => format!(
            "architecture: {s} (what the group's instance types run), or instance types that support {arch}"
        ),
        (false, Some(s)) => format!("an image for {s}, or instance types that support {arch}"),
        (_, None) => format!("instance types that all support {arch}"),
    };
    let source = if facts.source.is_empty() {
        String::new()
    } else {
        format!(" ({})", facts.source)
    };
    problems.error(
        path,
        format!(
            "{arch} images do not run on {} of {group}{source}; expected {expected}",
            misfits.join(", ")
        ),
    );
    problems
}

/// [`check`] for a policy as written: its `architecture` against the instance types of its
/// node group. A policy without `architecture` takes its group's own (nothing to check here;
/// each image the ami-watcher resolves is checked with [`check`]). This is what `nodecycle
/// doctor` and `nodecycle validate --live` run; the facts come from
/// [`crate::ami::resolve::NodeGroupCatalog::instance_types`].
pub fn check_policy(policy: &Policy, facts: &GroupTypes) -> Problems {
    match policy.architecture {
        Some(arch) => check(arch, true, &policy.node_group, facts),
        None => Problems::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(types: &[(&str, &[&str])]) -> GroupTypes {
        GroupTypes {
            source: "launch template lt-1 version 1".into(),
            types: types
                .iter()
                .map(|(t, a)| {
                    (
                        t.to_string(),
                        Some(a.iter().map(|s| s.to_string()).collect()),
                    )
                })
                .collect(),
            by_attributes: false,
        }
    }

    #[test]
    fn mismatches_name_the_field_and_the_types() {
        let asg = NodeGroup::AutoScalingGroup("prod-general".into());
        let x86 = facts(&[("m5.large", &["x86_64"])]);
        let p = check(Architecture::Arm64, true, &asg, &x86);
        let e: Vec<String> = p.errors().map(ToString::to_string).collect();
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("architecture: arm64 images do not run on m5.large (x86_64) of Auto Scaling group prod-general"), "{}", e[0]);
        assert!(e[0].contains("expected architecture: x86_64"), "{}", e[0]);
        assert!(!check(Architecture::X86_64, true, &asg, &x86).has_errors());
        // i386 types run x86_64 images too.
        let old = facts(&[("m3.medium", &["i386", "x86_64"])]);
        assert!(!check(Architecture::X86_64, true, &asg, &old).has_errors());
        // Mixed instances: every override may be launched.
        let mixed = facts(&[("m6g.large", &["arm64"]), ("m5.large", &["x86_64"])]);
        let p = check(Architecture::Arm64, false, &asg, &mixed);
        let e = p.errors().next().unwrap().to_string();
        assert!(
            e.starts_with("nodeGroup.autoScalingGroup: arm64 images do not run on m5.large"),
            "{e}"
        );
        assert!(
            e.contains("expected instance types that all support arm64"),
            "{e}"
        );
        let mng = NodeGroup::ManagedNodeGroup("spot".into());
        let p = check(
            Architecture::X86_64,
            false,
            &mng,
            &facts(&[("m6g.large", &["arm64"])]),
        );
        assert!(p.errors().next().unwrap().path == "nodeGroup.managedNodeGroup");
    }

    #[test]
    fn a_policy_is_checked_when_it_sets_its_architecture() {
        let x86 = facts(&[("m5.large", &["x86_64"])]);
        let policy = |arch: &str| {
            crate::policy::parse(&format!(
                "cluster: prod\nname: general\nnodeGroup: {{ autoScalingGroup: prod-general }}\n{arch}amiSelectorTerms: [{{ alias: bottlerocket@latest }}]\n"
            ))
            .policy
            .unwrap()
        };
        let p = check_policy(&policy("architecture: arm64\n"), &x86);
        assert_eq!(p.errors().next().unwrap().path, "architecture");
        assert!(!check_policy(&policy("architecture: x86_64\n"), &x86).has_errors());
        assert!(!check_policy(&policy(""), &x86).has_errors());
    }

    #[test]
    fn nothing_to_check() {
        let asg = NodeGroup::AutoScalingGroup("g".into());
        assert!(!check(Architecture::Arm64, true, &asg, &GroupTypes::default()).has_errors());
        let abis = GroupTypes {
            by_attributes: true,
            ..facts(&[("m5.large", &["x86_64"])])
        };
        assert!(!check(Architecture::Arm64, true, &asg, &abis).has_errors());
        let undescribed = GroupTypes {
            types: vec![("x9.huge".into(), None)],
            ..GroupTypes::default()
        };
        assert!(!check(Architecture::Arm64, true, &asg, &undescribed).has_errors());
    }
}
