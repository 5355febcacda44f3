//! Every policy under the prefix is valid (the same parsing and messages as `nodecycle
//! validate`), names a cluster the stack serves, and no two pools share a name or a node group.

use std::collections::BTreeMap;

use super::{Check, CheckKind};
use crate::policy::source::PolicyDocument;
use crate::policy::{NodeGroup, Policy};
use crate::port::PortError;

/// Checks every document under `prefix`; returns the checks and the valid policies (with their
/// source) whose pools can be checked further. `served` is the stack's `ClusterNames` when known.
pub fn check(
    prefix: &str,
    documents: Result<Vec<PolicyDocument>, PortError>,
    served: Option<&[String]>,
) -> (Vec<Check>, Vec<(String, Policy)>) {
    let documents = match documents {
        Ok(d) => d,
        Err(e) => {
            return (
                vec![Check::unreadable(CheckKind::Policy, prefix, &e)],
                Vec::new(),
            );
        }
    };
    if documents.is_empty() {
        return (
            vec![Check::warn(
                CheckKind::Policy,
                prefix,
                "no policy under the prefix: nodecycle manages no pool",
                format!(
                    "aws ssm put-parameter --type String --name {prefix}<cluster>/<pool> --value \
                     file://policy.yaml (see examples/)"
                ),
            )],
            Vec::new(),
        );
    }
    let mut checks = Vec::new();
    let mut valid = Vec::new();
    let mut pools: BTreeMap<String, String> = BTreeMap::new();
    let mut groups: BTreeMap<(String, String), String> = BTreeMap::new();
    for doc in documents {
        let parsed = crate::policy::parse_document(&doc);
        let source = doc.source;
        let Some(policy) = parsed.policy else {
            let problems: Vec<String> = parsed.problems.0.iter().map(ToString::to_string).collect();
            checks.push(Check::fail(
                CheckKind::Policy,
                &source,
                problems.join("; "),
                format!(
                    "fix the document (nodecycle validate <file> prints the same problems), then \
                     aws ssm put-parameter --overwrite --type String --name {source} --value \
                     file://<file>; until then the pool keeps its last desired AMI"
                ),
            ));
            continue;
        };
        let id = policy.pool_id();
        if let Some(first) = pools.get(&id) {
            checks.push(Check::fail(
                CheckKind::Policy,
                &source,
                format!("pool {id} is also defined by {first}"),
                "give each pool its own cluster/name, or delete one of the parameters",
            ));
            continue;
        }
        // A node group is one of a cluster of one account and region.
        let group_key = (
            crate::policy::place::scope_of(&id).to_string(),
            describe(&policy.node_group),
        );
        if let Some(other) = groups.get(&group_key) {
            checks.push(Check::fail(
                CheckKind::Policy,
                &source,
                format!(
                    "pool {id} manages {} of cluster {}, which pool {other} manages too: they \
                     would rotate the same nodes against each other",
                    describe(&policy.node_group),
                    policy.cluster
                ),
                "one pool per node group: delete or change one of the policies",
            ));
            continue;
        }
        // A member's clusters are its spoke stack's to scope, not the cell's ClusterNames.
        if let Some(served) = served
            && policy.place.is_none()
            && !served.iter().any(|c| c == &policy.cluster)
        {
            checks.push(Check::fail(
                CheckKind::Policy,
                &source,
                format!(
                    "pool {id} is in cluster {}, which is not in the stack's ClusterNames ({}): \
                     the functions may not change its groups",
                    policy.cluster,
                    served.join(", ")
                ),
                format!(
                    "add {} to the ClusterNames parameter (redeploy), or delete the policy",
                    policy.cluster
                ),
            ));
            continue;
        }
        pools.insert(id.clone(), source.clone());
        groups.insert(group_key, id.clone());
        let warnings: Vec<String> = parsed
            .problems
            .warnings()
            .map(ToString::to_string)
            .collect();
        checks.push(if warnings.is_empty() {
            Check::ok(CheckKind::Policy, &source, format!("valid: pool {id}"))
        } else {
            Check::warn(
                CheckKind::Policy,
                &source,
                format!("valid: pool {id}; {}", warnings.join("; ")),
                "nothing is required; the warnings say what may not behave as in Karpenter",
            )
        });
        valid.push((source, policy));
    }
    (checks, valid)
}

/// `Auto Scaling group X` / `managed node group X`.
pub fn describe(group: &NodeGroup) -> String {
    match group {
        NodeGroup::AutoScalingGroup(n) => format!("Auto Scaling group {n}"),
        NodeGroup::ManagedNodeGroup(n) => format!("managed node group {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    fn doc(source: &str, text: &str) -> PolicyDocument {
        PolicyDocument::file(source, text)
    }

    fn policy(cluster: &str, name: &str, group: &str) -> String {
        format!(
            "cluster: {cluster}\nname: {name}\nnodeGroup: {{ autoScalingGroup: {group} }}\n\
             amiSelectorTerms:\n  - alias: al2023@latest\n"
        )
    }

    fn statuses(docs: Vec<PolicyDocument>, served: Option<&[String]>) -> (Vec<Status>, usize) {
        let (checks, valid) = check("/p/", Ok(docs), served);
        assert!(checks.iter().all(|c| c.check == CheckKind::Policy));
        (checks.iter().map(|c| c.status).collect(), valid.len())
    }

    #[test]
    fn policy_cases() {
        let served = vec!["prod".to_owned()];
        let served = Some(served.as_slice());
        let (s, n) = statuses(vec![doc("/p/a", &policy("prod", "a", "g1"))], served);
        assert_eq!((s, n), (vec![Status::Ok], 1));

        let bad = "cluster: prod\nname: b\nnodeGroup: { autoScalingGroup: g }\namiSelectorTerms:\n  - alias: al2024@latest\n";
        let (checks, valid) = check("/p/", Ok(vec![doc("/p/b", bad)]), served);
        assert_eq!(checks[0].status, Status::Fail);
        assert!(checks[0].detail.starts_with("amiSelectorTerms[0].alias: "));
        assert!(valid.is_empty());

        let (s, n) = statuses(
            vec![
                doc("/p/a", &policy("prod", "a", "g1")),
                doc("/p/a2", &policy("prod", "a", "g2")),
            ],
            served,
        );
        assert_eq!(
            (s, n),
            (vec![Status::Ok, Status::Fail], 1),
            "duplicate pool"
        );

        let (s, n) = statuses(
            vec![
                doc("/p/a", &policy("prod", "a", "g1")),
                doc("/p/b", &policy("prod", "b", "g1")),
            ],
            served,
        );
        assert_eq!((s, n), (vec![Status::Ok, Status::Fail], 1), "shared group");

        let (s, n) = statuses(vec![doc("/p/x", &policy("other", "a", "g1"))], served);
        assert_eq!((s, n), (vec![Status::Fail], 0), "unserved cluster");
        let (s, n) = statuses(vec![doc("/p/x", &policy("other", "a", "g1"))], None);
        assert_eq!((s, n), (vec![Status::Ok], 1), "ClusterNames unknown");

        let (s, _) = statuses(Vec::new(), served);
        assert_eq!(s, vec![Status::Warn], "nothing under the prefix");
    }
}
