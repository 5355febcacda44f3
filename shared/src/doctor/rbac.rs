//! The cluster's RBAC grants each function's Kubernetes group (`nodecycle-rotator`,
//! `nodecycle-interruption`, `nodecycle-ops`) every rule deploy/rbac.yaml (embedded at compile
//! time) binds to it: cluster-wide through ClusterRoleBindings, and Events in namespace
//! [`EVENTS_NAMESPACE`] through a RoleBinding there (or a ClusterRoleBinding).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize as _;

use super::port::{BindingFacts, ClusterRoleFacts, PolicyRule, RbacFacts, SubjectFacts};
use super::{Check, CheckKind, KUBERNETES_GROUPS, LEGACY_KUBERNETES_GROUP};
use crate::port::PortError;

/// deploy/rbac.yaml as shipped.
pub const MANIFEST: &str = include_str!("../../../deploy/rbac.yaml");

pub use crate::inventory::EVENTS_NAMESPACE;

/// One permission: `verb` on `resource` (`pods/eviction` for a subresource) of `api_group`,
/// cluster-wide (`namespace` `None`) or in one namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// API group (`""` is core).
    pub api_group: String,
    /// Resource, with `/subresource`.
    pub resource: String,
    /// Verb.
    pub verb: String,
    /// The namespace the grant is needed in; `None`: every namespace / cluster-scoped.
    pub namespace: Option<String>,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.api_group.is_empty() {
            write!(f, "{} {}", self.verb, self.resource)?;
        } else {
            write!(f, "{} {}.{}", self.verb, self.resource, self.api_group)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => Ok(()),
        }
    }
}

/// The RBAC objects of `manifest` (multi-document YAML) as a cluster would serve them once
/// applied: ClusterRoles, Roles, ClusterRoleBindings and RoleBindings.
pub fn facts_from(manifest: &str) -> Result<RbacFacts, String> {
    let mut facts = RbacFacts::default();
    for doc in serde_norway::Deserializer::from_str(manifest) {
        let value = serde_json::Value::deserialize(doc).map_err(|e| e.to_string())?;
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let namespace = value["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let kind = value["kind"].as_str().unwrap_or_default();
        match kind {
            "ClusterRole" | "Role" => {
                let rules: Vec<PolicyRule> = serde_json::from_value(value["rules"].clone())
                    .map_err(|e| format!("{kind} {name}: {e}"))?;
                let role = ClusterRoleFacts {
                    name,
                    namespace,
                    rules,
                };
                if kind == "Role" {
                    facts.roles.push(role);
                } else {
                    facts.cluster_roles.push(role);
                }
            }
            "ClusterRoleBinding" | "RoleBinding" => {
                let binding = BindingFacts {
                    name,
                    namespace,
                    role_kind: value["roleRef"]["kind"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    role_name: value["roleRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    subjects: value["subjects"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|s| SubjectFacts {
                                    kind: s["kind"].as_str().unwrap_or_default().to_owned(),
                                    name: s["name"].as_str().unwrap_or_default().to_owned(),
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                };
                if kind == "RoleBinding" {
                    facts.role_bindings.push(binding);
                } else {
                    facts.bindings.push(binding);
                }
            }
            _ => {}
        }
    }
    Ok(facts)
}

/// What binds a group: its rules by the namespace they apply in (`None`: cluster-wide).
#[derive(Default)]
struct Bound<'a> {
    rules: BTreeMap<Option<String>, Vec<&'a PolicyRule>>,
    /// `binding -> role` (`<namespace>/<binding> -> role` for RoleBindings).
    bindings: Vec<String>,
    /// Bindings whose role does not exist.
    dangling: Vec<String>,
    /// Bound roles that allow every verb on every resource (cluster-admin-like).
    broad: Vec<String>,
}

fn allows_everything(role: &ClusterRoleFacts) -> bool {
    role.rules.iter().any(|r| {
        r.resource_names.is_empty()
            && [&r.verbs, &r.api_groups, &r.resources]
                .iter()
                .all(|l| l.iter().any(|x| x == "*"))
    })
}

fn bound_rules<'a>(facts: &'a RbacFacts, group: &str) -> Bound<'a> {
    let mut out = Bound::default();
    let binds = |b: &BindingFacts| {
        b.subjects
            .iter()
            .any(|s| s.kind == "Group" && s.name == group)
    };
    let mut add = |label: String, namespace: Option<String>, role: Option<&'a ClusterRoleFacts>| {
        let Some(role) = role else {
            out.dangling.push(label);
            return;
        };
        out.rules
            .entry(namespace)
            .or_default()
            .extend(role.rules.iter());
        if allows_everything(role) && !out.broad.contains(&role.name) {
            out.broad.push(role.name.clone());
        }
        out.bindings.push(label);
    };
    for b in facts.bindings.iter().filter(|b| binds(b)) {
        let role = facts
            .cluster_roles
            .iter()
            .find(|r| b.role_kind == "ClusterRole" && r.name == b.role_name);
        add(format!("{} -> {}", b.name, b.role_name), None, role);
    }
    for b in facts.role_bindings.iter().filter(|b| binds(b)) {
        let role = match b.role_kind.as_str() {
            "Role" => facts
                .roles
                .iter()
                .find(|r| r.namespace == b.namespace && r.name == b.role_name),
            _ => facts.cluster_roles.iter().find(|r| r.name == b.role_name),
        };
        add(
            format!("{}/{} -> {}", b.namespace, b.name, b.role_name),
            Some(b.namespace.clone()),
            role,
        );
    }
    out
}

fn expand(rules: &[&PolicyRule], namespace: &Option<String>, out: &mut Vec<Grant>) {
    for rule in rules {
        for g in &rule.api_groups {
            for r in &rule.resources {
                for v in &rule.verbs {
                    out.push(Grant {
                        api_group: g.clone(),
                        resource: r.clone(),
                        verb: v.clone(),
                        namespace: namespace.clone(),
                    });
                }
            }
        }
    }
}

/// Every grant `manifest` binds to `group`, expanded to one per verb and resource.
pub fn required_from(manifest: &str, group: &str) -> Result<Vec<Grant>, String> {
    let facts = facts_from(manifest)?;
    let bound = bound_rules(&facts, group);
    if !bound.dangling.is_empty() {
        return Err(format!(
            "binding(s) to roles the manifest lacks: {}",
            bound.dangling.join(", ")
        ));
    }
    let mut out = Vec::new();
    for (namespace, rules) in &bound.rules {
        expand(rules, namespace, &mut out);
    }
    if out.is_empty() {
        return Err(format!("no rule is bound to group {group}"));
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The grants the shipped deploy/rbac.yaml gives `group`.
pub fn required(group: &str) -> Result<Vec<Grant>, String> {
    required_from(MANIFEST, group)
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
    /// `binding -> role` pairs that bind the group (`<namespace>/<binding> -> role` for
    /// RoleBindings).
    pub bindings: Vec<String>,
    /// Required grants no bound rule allows.
    pub missing: Vec<Grant>,
    /// Bindings of the group to roles that do not exist.
    pub dangling: Vec<String>,
    /// Bound roles that allow every verb on every resource (cluster-admin-like).
    pub broad: Vec<String>,
}

/// Evaluates the group's bindings against `required`: a cluster-wide grant needs a rule bound by
/// a ClusterRoleBinding; a grant in a namespace, one bound there or cluster-wide.
pub fn evaluate(required: &[Grant], facts: &RbacFacts, group: &str) -> Evaluation {
    let bound = bound_rules(facts, group);
    let empty = Vec::new();
    let cluster_wide = bound.rules.get(&None).unwrap_or(&empty);
    let missing = required
        .iter()
        .filter(|g| {
            let local = g
                .namespace
                .as_ref()
                .and_then(|ns| bound.rules.get(&Some(ns.clone())))
                .unwrap_or(&empty);
            !cluster_wide.iter().chain(local).any(|r| allows(r, g))
        })
        .cloned()
        .collect();
    Evaluation {
        missing,
        bindings: bound.bindings,
        dangling: bound.dangling,
        broad: bound.broad,
    }
}

/// The `rbac` checks of `cluster`: one per function group (subject `<cluster>/<group>`), and a
/// warning while the group of earlier releases (`nodecycle`) is still bound.
pub fn check(cluster: &str, facts: Result<RbacFacts, PortError>) -> Vec<Check> {
    let facts = match facts {
        Ok(f) => f,
        Err(e) => {
            let mut c = Check::unreadable(CheckKind::Rbac, cluster, &e);
            if e.operation.starts_with("kubernetes:") {
                c.fix = format!(
                    "the operator needs Kubernetes access to cluster {cluster} (an access entry) \
                     with list on clusterroles, clusterrolebindings, and on roles and \
                     rolebindings of namespace {EVENTS_NAMESPACE} (rbac.authorization.k8s.io), \
                     e.g. access policy AmazonEKSAdminViewPolicy"
                );
            }
            return vec![c];
        }
    };
    let apply =
        format!("kubectl apply -f deploy/rbac.yaml (with the context of cluster {cluster})");
    let mut checks: Vec<Check> = KUBERNETES_GROUPS
        .iter()
        .map(|(_, group)| group_check(cluster, &facts, group, &apply))
        .collect();
    let legacy = bound_rules(&facts, LEGACY_KUBERNETES_GROUP).bindings;
    if !legacy.is_empty() {
        checks.push(Check::warn(
            CheckKind::Rbac,
            format!("{cluster}/{LEGACY_KUBERNETES_GROUP}"),
            format!(
                "group {LEGACY_KUBERNETES_GROUP} of earlier releases is still bound ({}): it \
                 allows more than any one function uses",
                legacy.join(", ")
            ),
            format!(
                "once every access entry maps to its function's group (the accessEntry checks \
                 pass): kubectl delete clusterrolebinding {LEGACY_KUBERNETES_GROUP} && kubectl \
                 delete clusterrole {LEGACY_KUBERNETES_GROUP} (with the context of cluster \
                 {cluster})"
            ),
        ));
    }
    checks
}

fn group_check(cluster: &str, facts: &RbacFacts, group: &str, apply: &str) -> Check {
    let subject = format!("{cluster}/{group}");
    let required = match required(group) {
        Ok(r) => r,
        Err(e) => {
            return Check::fail(
                CheckKind::Rbac,
                subject,
                format!("the embedded deploy/rbac.yaml does not give group {group} its rules: {e}"),
                "report this bug; the binary was built from a broken checkout",
            );
        }
    };
    let eval = evaluate(&required, facts, group);
    if eval.bindings.is_empty() {
        return Check::fail(
            CheckKind::Rbac,
            subject,
            format!(
                "no binding binds group {group}: every Kubernetes call of its function is forbidden"
            ),
            apply,
        );
    }
    if !eval.missing.is_empty() {
        let missing: Vec<String> = eval.missing.iter().map(ToString::to_string).collect();
        let mut detail = format!(
            "group {group} ({}) lacks {}",
            eval.bindings.join(", "),
            missing.join(", ")
        );
        if !eval.dangling.is_empty() {
            detail.push_str(&format!(
                "; binding(s) to missing roles: {}",
                eval.dangling.join(", ")
            ));
        }
        return Check::fail(CheckKind::Rbac, subject, detail, apply);
    }
    if !eval.broad.is_empty() {
        return Check::warn(
            CheckKind::Rbac,
            subject,
            format!(
                "group {group} is bound to {}, which allows everything",
                eval.broad.join(", ")
            ),
            format!(
                "bind it only to deploy/rbac.yaml's roles: delete the broad binding(s), then \
                 {apply}"
            ),
        );
    }
    Check::ok(
        CheckKind::Rbac,
        subject,
        format!(
            "group {group} has every rule deploy/rbac.yaml gives it ({})",
            eval.bindings.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let v = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
        PolicyRule {
            api_groups: v(groups),
            resources: v(resources),
            verbs: v(verbs),
            ..PolicyRule::default()
        }
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
            ..BindingFacts::default()
        }
    }

    fn shipped() -> RbacFacts {
        facts_from(MANIFEST).unwrap()
    }

    fn grant(resource: &str, verb: &str, namespace: Option<&str>) -> Grant {
        Grant {
            api_group: String::new(),
            resource: resource.into(),
            verb: verb.into(),
            namespace: namespace.map(str::to_owned),
        }
    }

    /// What each function's code calls (docs/iam-and-rbac.md): the manifest gives each group
    /// exactly that.
    #[test]
    fn the_shipped_manifest_gives_each_group_what_its_function_uses() {
        let drain: Vec<Grant> = [
            ("nodes", "get"),
            ("nodes", "list"),
            ("nodes", "patch"),
            ("nodes", "delete"),
            ("pods", "list"),
            ("pods", "delete"),
            ("pods/eviction", "create"),
        ]
        .iter()
        .map(|(r, v)| grant(r, v, None))
        .chain([grant("events", "create", Some("default"))])
        .collect();
        let ops: Vec<Grant> = [
            ("nodes", "get"),
            ("nodes", "list"),
            ("nodes", "patch"),
            ("pods", "list"),
        ]
        .iter()
        .map(|(r, v)| grant(r, v, None))
        .chain([grant("events", "create", Some("default"))])
        .collect();
        // The rotator also lists the sandbox failures' Events (release health).
        let rotator: Vec<Grant> = drain
            .iter()
            .cloned()
            .chain([grant("events", "list", None)])
            .collect();
        for (group, want) in [
            ("nodecycle-rotator", &rotator),
            ("nodecycle-interruption", &drain),
            ("nodecycle-ops", &ops),
        ] {
            let mut want = want.clone();
            want.sort();
            assert_eq!(required(group).unwrap(), want, "{group}");
        }
        assert!(required(LEGACY_KUBERNETES_GROUP).is_err());
        assert!(required_from("kind: ConfigMap\n", "nodecycle-ops").is_err());
        for (_, group) in KUBERNETES_GROUPS {
            assert!(required(group).is_ok(), "{group}");
        }
    }

    #[test]
    fn rule_matching() {
        let eviction = grant("pods/eviction", "create", None);
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
            !allows(&named, &grant("nodes", "patch", None)),
            "resourceNames limit it"
        );
    }

    fn statuses(f: RbacFacts) -> Vec<(String, Status)> {
        check("prod", Ok(f))
            .into_iter()
            .map(|c| {
                assert_eq!(c.check, CheckKind::Rbac);
                (c.subject, c.status)
            })
            .collect()
    }

    fn all(status: Status) -> Vec<(String, Status)> {
        KUBERNETES_GROUPS
            .iter()
            .map(|(_, g)| (format!("prod/{g}"), status))
            .collect()
    }

    #[test]
    fn rbac_cases() {
        use Status::{Fail, Ok as Pass, Warn};
        assert_eq!(statuses(shipped()), all(Pass), "as shipped");
        assert_eq!(statuses(RbacFacts::default()), all(Fail), "nothing applied");

        // One group's binding missing: that group fails, the others pass.
        let mut f = shipped();
        f.bindings.retain(|b| b.name != "nodecycle-ops");
        let mut want = all(Pass);
        want[2].1 = Fail;
        assert_eq!(statuses(f), want);

        // The Events RoleBinding missing: every group lacks create events in default.
        let mut f = shipped();
        f.role_bindings.clear();
        assert_eq!(statuses(f.clone()), all(Fail));
        let c = &check("prod", Ok(f))[0];
        assert!(
            c.detail.contains("create events in namespace default"),
            "{c}"
        );
        assert!(c.fix.starts_with("kubectl apply -f deploy/rbac.yaml"));

        // A RoleBinding in another namespace does not count.
        let mut f = shipped();
        for b in &mut f.role_bindings {
            b.namespace = "kube-system".into();
        }
        assert_eq!(statuses(f), all(Fail));

        // Events allowed cluster-wide (an older manifest's ClusterRole) satisfy the namespace.
        let mut f = shipped();
        f.role_bindings.clear();
        f.cluster_roles.push(ClusterRoleFacts {
            name: "events".into(),
            rules: vec![rule(&[""], &["events"], &["create"])],
            ..ClusterRoleFacts::default()
        });
        for (_, g) in KUBERNETES_GROUPS {
            f.bindings
                .push(binding(&format!("events-{g}"), "events", g));
        }
        assert_eq!(statuses(f), all(Pass));

        // A rule short: ops without patch nodes.
        let mut f = shipped();
        for r in &mut f.cluster_roles {
            if r.name == "nodecycle-ops" {
                r.rules[0].verbs.retain(|v| v != "patch");
            }
        }
        let c = check("prod", Ok(f)).remove(2);
        assert_eq!(c.status, Fail);
        assert!(c.detail.contains("lacks patch nodes"), "{c}");

        // A binding to a role that does not exist.
        let mut f = shipped();
        f.cluster_roles.retain(|r| r.name != "nodecycle-rotator");
        assert_eq!(check("prod", Ok(f))[0].status, Fail);

        // cluster-admin: works, warned.
        let mut f = shipped();
        f.cluster_roles.push(ClusterRoleFacts {
            name: "cluster-admin".into(),
            rules: vec![rule(&["*"], &["*"], &["*"])],
            ..ClusterRoleFacts::default()
        });
        f.bindings
            .push(binding("x", "cluster-admin", "nodecycle-rotator"));
        let mut want = all(Pass);
        want[0].1 = Warn;
        assert_eq!(statuses(f), want);

        // The single group of earlier releases still bound: one more warning, with the cleanup.
        let mut f = shipped();
        f.cluster_roles.push(ClusterRoleFacts {
            name: "nodecycle".into(),
            rules: vec![rule(&[""], &["nodes"], &["get", "list", "patch", "delete"])],
            ..ClusterRoleFacts::default()
        });
        f.bindings
            .push(binding("nodecycle", "nodecycle", "nodecycle"));
        let checks = check("prod", Ok(f));
        assert_eq!(checks.len(), 4);
        assert_eq!(
            (checks[3].subject.as_str(), checks[3].status),
            ("prod/nodecycle", Warn)
        );
        assert!(
            checks[3]
                .fix
                .contains("kubectl delete clusterrolebinding nodecycle"),
            "{}",
            checks[3]
        );
    }
}
