//! The cluster's RBAC grants the Kubernetes group `nodecycle` every rule of deploy/rbac.yaml
//! (embedded at compile time), through ClusterRoleBindings to ClusterRoles.

use std::fmt;

use serde::Deserialize as _;

use super::port::{PolicyRule, RbacFacts};
use super::{Check, CheckKind, KUBERNETES_GROUP};
use crate::port::PortError;

/// deploy/rbac.yaml as shipped.
pub const MANIFEST: &str = include_str!("../../../deploy/rbac.yaml");

/// One permission: `verb` on `resource` (`pods/eviction` for a subresource) of `api_group`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// API group (`""` is core).
    pub api_group: String,
    /// Resource, with `/subresource`.
    pub resource: String,
    /// Verb.
    pub verb: String,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.api_group.is_empty() {
            write!(f, "{} {}", self.verb, self.resource)
        } else {
            write!(f, "{} {}.{}", self.verb, self.resource, self.api_group)
        }
    }
}

/// Every grant of the ClusterRole in `manifest` (multi-document YAML), expanded to triples.
pub fn required_from(manifest: &str) -> Result<Vec<Grant>, String> {
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(manifest) {
        let value = serde_json::Value::deserialize(doc).map_err(|e| e.to_string())?;
        if value["kind"] != "ClusterRole" {
            continue;
        }
        let rules: Vec<PolicyRule> =
            serde_json::from_value(value["rules"].clone()).map_err(|e| e.to_string())?;
        for rule in rules {
            for g in &rule.api_groups {
                for r in &rule.resources {
                    for v in &rule.verbs {
                        out.push(Grant {
                            api_group: g.clone(),
                            resource: r.clone(),
                            verb: v.clone(),
                        });
                    }
                }
            }
        }
    }
    if out.is_empty() {
        return Err("no ClusterRole rule found".to_owned());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The grants of the shipped deploy/rbac.yaml.
pub fn required() -> Result<Vec<Grant>, String> {
    required_from(MANIFEST)
}

/// Whether `rule` allows `grant` on every object (Kubernetes' RuleAllows: `*` wildcards,
/// `*/<subresource>`; a rule limited by `resourceNames` does not count).
pub fn allows(rule: &PolicyRule, grant: &Grant) -> bool {
    let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
    let subresource = grant.resource.split_once('/').map(|(_, s)| s);
    rule.resource_names.is_empty()
        && any(&rule.verbs, &grant.verb)
        && any(&rule.api_groups, &grant.api_group)
        && rule.resources.iter().any(|r| {
            r == "*"
                || *r == grant.resource
                || subresource.is_some_and(|s| r.strip_prefix("*/") == Some(s))
        })
}

/// What the bindings of `group` amount to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// `binding -> role` pairs that bind the group.
    pub bindings: Vec<String>,
    /// Required grants no bound rule allows.
    pub missing: Vec<Grant>,
    /// Bindings of the group to ClusterRoles that do not exist.
    pub dangling: Vec<String>,
    /// Bound roles that allow every verb on every resource (cluster-admin-like).
    pub broad: Vec<String>,
}

/// Evaluates the group's ClusterRoleBindings against `required`.
pub fn evaluate(required: &[Grant], facts: &RbacFacts, group: &str) -> Evaluation {
    let mut eval = Evaluation::default();
    let mut rules: Vec<&PolicyRule> = Vec::new();
    for b in &facts.bindings {
        if !b
            .subjects
            .iter()
            .any(|s| s.kind == "Group" && s.name == group)
        {
            continue;
        }
        eval.bindings.push(format!("{} -> {}", b.name, b.role_name));
        match facts
            .cluster_roles
            .iter()
            .find(|r| b.role_kind == "ClusterRole" && r.name == b.role_name)
        {
            None => eval.dangling.push(format!("{} -> {}", b.name, b.role_name)),
            Some(role) => {
                if role.rules.iter().any(|r| {
                    r.resource_names.is_empty()
                        && [&r.verbs, &r.api_groups, &r.resources]
                            .iter()
                            .all(|l| l.iter().any(|x| x == "*"))
                }) && !eval.broad.contains(&role.name)
                {
                    eval.broad.push(role.name.clone());
                }
                rules.extend(role.rules.iter());
            }
        }
    }
    eval.missing = required
        .iter()
        .filter(|g| !rules.iter().any(|r| allows(r, g)))
        .cloned()
        .collect();
    eval
}

/// The `rbac` check of `cluster`.
pub fn check(cluster: &str, facts: Result<RbacFacts, PortError>) -> Check {
    let facts = match facts {
        Ok(f) => f,
        Err(e) => {
            let mut c = Check::unreadable(CheckKind::Rbac, cluster, &e);
            if e.operation.starts_with("kubernetes:") {
                c.fix = format!(
                    "the operator needs Kubernetes access to cluster {cluster} (an access entry) \
                     with list on clusterroles and clusterrolebindings (rbac.authorization.k8s.io), \
                     e.g. access policy AmazonEKSAdminViewPolicy"
                );
            }
            return c;
        }
    };
    let required = match required() {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                CheckKind::Rbac,
                cluster,
                format!("the embedded deploy/rbac.yaml does not parse: {e}"),
                "report this bug; the binary was built from a broken checkout",
            );
        }
    };
    let eval = evaluate(&required, &facts, KUBERNETES_GROUP);
    let apply =
        format!("kubectl apply -f deploy/rbac.yaml (with the context of cluster {cluster})");
    if eval.bindings.is_empty() {
        return Check::fail(
            CheckKind::Rbac,
            cluster,
            format!(
                "no ClusterRoleBinding binds group {KUBERNETES_GROUP}: every Kubernetes call of \
                 nodecycle is forbidden"
            ),
            apply,
        );
    }
    if !eval.missing.is_empty() {
        let missing: Vec<String> = eval.missing.iter().map(ToString::to_string).collect();
        let mut detail = format!(
            "group {KUBERNETES_GROUP} ({}) lacks {}",
            eval.bindings.join(", "),
            missing.join(", ")
        );
        if !eval.dangling.is_empty() {
            detail.push_str(&format!(
                "; binding(s) to missing ClusterRoles: {}",
                eval.dangling.join(", ")
            ));
        }
        return Check::fail(CheckKind::Rbac, cluster, detail, apply);
    }
    if !eval.broad.is_empty() {
        return Check::warn(
            CheckKind::Rbac,
            cluster,
            format!(
                "group {KUBERNETES_GROUP} is bound to {}, which allows everything",
                eval.broad.join(", ")
            ),
            format!(
                "bind it only to deploy/rbac.yaml's ClusterRole: delete the broad binding(s), \
                 then {apply}"
            ),
        );
    }
    Check::ok(
        CheckKind::Rbac,
        cluster,
        format!(
            "group {KUBERNETES_GROUP} has every rule of deploy/rbac.yaml ({})",
            eval.bindings.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;
    use crate::doctor::port::{BindingFacts, ClusterRoleFacts, SubjectFacts};

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let v = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
        PolicyRule {
            api_groups: v(groups),
            resources: v(resources),
            verbs: v(verbs),
            ..PolicyRule::default()
        }
    }

    fn manifest_rules() -> Vec<PolicyRule> {
        let mut rules = Vec::new();
        for doc in serde_norway::Deserializer::from_str(MANIFEST) {
            let v = serde_json::Value::deserialize(doc).unwrap();
            if v["kind"] == "ClusterRole" {
                rules = serde_json::from_value(v["rules"].clone()).unwrap();
            }
        }
        rules
    }

    fn binding(name: &str, role: &str, group: &str) -> BindingFacts {
        BindingFacts {
            name: name.into(),
            role_kind: "ClusterRole".into(),
            role_name: role.into(),
            subjects: vec![SubjectFacts {
                kind: "Group".into(),
                name: group.into(),
            }],
        }
    }

    fn facts(roles: Vec<(&str, Vec<PolicyRule>)>, bindings: Vec<BindingFacts>) -> RbacFacts {
        RbacFacts {
            cluster_roles: roles
                .into_iter()
                .map(|(n, rules)| ClusterRoleFacts {
                    name: n.into(),
                    rules,
                })
                .collect(),
            bindings,
        }
    }

    #[test]
    fn the_shipped_manifest_parses() {
        let r = required().unwrap();
        let has = |verb: &str, resource: &str| {
            r.iter()
                .any(|g| g.api_group.is_empty() && g.resource == resource && g.verb == verb)
        };
        assert!(has("create", "pods/eviction"));
        assert!(has("patch", "nodes"));
        assert!(has("create", "events"));
        assert!(required_from("kind: ConfigMap\n").is_err());
    }

    #[test]
    fn rule_matching() {
        let g = |group: &str, res: &str, verb: &str| Grant {
            api_group: group.into(),
            resource: res.into(),
            verb: verb.into(),
        };
        let eviction = g("", "pods/eviction", "create");
        assert!(allows(
            &rule(&[""], &["pods/eviction"], &["create"]),
            &eviction
        ));
        assert!(allows(&rule(&["*"], &["*"], &["*"]), &eviction));
        assert!(allows(
            &rule(&[""], &["*/eviction"], &["create"]),
            &eviction
        ));
        assert!(
            !allows(&rule(&[""], &["pods"], &["create"]), &eviction),
            "pods is not pods/eviction"
        );
        assert!(!allows(
            &rule(&["apps"], &["pods/eviction"], &["create"]),
            &eviction
        ));
        assert!(!allows(
            &rule(&[""], &["pods/eviction"], &["get"]),
            &eviction
        ));
        let mut named = rule(&[""], &["nodes"], &["patch"]);
        named.resource_names = vec!["node-1".into()];
        assert!(
            !allows(&named, &g("", "nodes", "patch")),
            "resourceNames limit it"
        );
    }

    #[test]
    fn rbac_cases() {
        let cases: Vec<(&str, RbacFacts, Status)> = vec![
            (
                "as shipped",
                facts(
                    vec![("nodecycle", manifest_rules())],
                    vec![binding("nodecycle", "nodecycle", "nodecycle")],
                ),
                Status::Ok,
            ),
            (
                "no binding",
                facts(vec![("nodecycle", manifest_rules())], vec![]),
                Status::Fail,
            ),
            (
                "bound to another group",
                facts(
                    vec![("nodecycle", manifest_rules())],
                    vec![binding("nodecycle", "nodecycle", "ops")],
                ),
                Status::Fail,
            ),
            (
                "role missing",
                facts(vec![], vec![binding("nodecycle", "nodecycle", "nodecycle")]),
                Status::Fail,
            ),
            (
                "a rule short",
                facts(
                    vec![("nodecycle", manifest_rules()[..3].to_vec())],
                    vec![binding("nodecycle", "nodecycle", "nodecycle")],
                ),
                Status::Fail,
            ),
            (
                "split over two roles",
                facts(
                    vec![
                        ("a", manifest_rules()[..2].to_vec()),
                        ("b", manifest_rules()[2..].to_vec()),
                    ],
                    vec![
                        binding("a", "a", "nodecycle"),
                        binding("b", "b", "nodecycle"),
                    ],
                ),
                Status::Ok,
            ),
            (
                "cluster-admin",
                facts(
                    vec![("cluster-admin", vec![rule(&["*"], &["*"], &["*"])])],
                    vec![binding("x", "cluster-admin", "nodecycle")],
                ),
                Status::Warn,
            ),
        ];
        for (what, f, expected) in cases {
            let c = check("prod", Ok(f));
            assert_eq!(
                (c.status, c.check),
                (expected, CheckKind::Rbac),
                "{what}: {c}"
            );
        }
        let f = facts(
            vec![("nodecycle", manifest_rules()[..3].to_vec())],
            vec![binding("nodecycle", "nodecycle", "nodecycle")],
        );
        let c = check("prod", Ok(f));
        assert!(c.detail.contains("create events"), "{c}");
        assert!(c.fix.starts_with("kubectl apply -f deploy/rbac.yaml"));
    }
}
