//! [`diagnose`]: reads the deployment through the ports, in order, and turns every fact (or
//! read error) into checks. Reads only; a failed read is a FAIL line, never an abort.

use super::endpoint::{self, FunctionNetwork};
use super::port::{
    ClusterAccessInfo, EventRules, GroupInfo, PolicyDocuments, RbacInfo, StackOutputs, TableInfo,
    TemplateFacts,
};
use super::{
    Check, CheckKind, Report, access, contract, groups, policies, rbac, rules, scope, table,
};
use crate::policy::{NodeGroup, Place, Policy};

/// Every read doctor makes, one port per capability.
#[derive(Clone, Copy)]
pub struct Ports<'a> {
    /// CloudFormation outputs.
    pub stack: &'a dyn StackOutputs,
    /// DynamoDB table description.
    pub table: &'a dyn TableInfo,
    /// Policy documents under the prefix.
    pub policies: &'a dyn PolicyDocuments,
    /// Auto Scaling groups, node groups, launch templates, hooks.
    pub groups: &'a dyn GroupInfo,
    /// Clusters and access entries.
    pub clusters: &'a dyn ClusterAccessInfo,
    /// ClusterRoles and ClusterRoleBindings.
    pub rbac: &'a dyn RbacInfo,
    /// The pods on retained instances' nodes.
    pub pods: &'a dyn crate::inventory::InstancePods,
    /// EventBridge rules.
    pub rules: &'a dyn EventRules,
    /// What node groups launch on (instance types and their architectures).
    pub node_types: &'a dyn crate::ami::resolve::NodeGroupCatalog,
    /// What the ami-watcher recorded ahead of time in the pools' records.
    pub findings: &'a dyn crate::inventory::PoolFindings,
}

/// What to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Stack name (or id).
    pub stack: String,
    /// Only these clusters (and their pools); empty: every cluster of `ClusterNames`.
    pub clusters: Vec<String>,
    /// Policy prefix when the stack does not say (no stack, missing output).
    pub fallback_prefix: String,
}

/// Runs every check. Order: stack, table, policies, per cluster (cluster, endpoint reachability,
/// access entries, RBAC),
/// per pool (group, launch template, lifecycle hook), event rules. Pools of other accounts and
/// regions are left out ([`diagnose_organisation`] checks them).
pub async fn diagnose(ports: Ports<'_>, options: &Options) -> Report {
    diagnose_organisation(ports, &super::members::NoSpokes, options).await
}

/// [`diagnose`], then per member place the policies name: its spoke role can be assumed, and
/// through it its clusters (existence, RBAC) and its pools (group, launch template, lifecycle
/// hook, architecture), as the cell's own are checked.
pub async fn diagnose_organisation(
    ports: Ports<'_>,
    spokes: &dyn super::members::SpokeRoles,
    options: &Options,
) -> Report {
    let mut checks = Vec::new();
    let (stack_check, contract) =
        contract::read(&options.stack, ports.stack.outputs(&options.stack).await);
    checks.push(stack_check);

    if let Some(name) = &contract.table {
        checks.push(table::check(name, ports.table.table(name).await));
    }

    let prefix = contract
        .policy_prefix
        .clone()
        .unwrap_or_else(|| options.fallback_prefix.clone());
    let (policy_checks, valid) = policies::check(
        &prefix,
        ports.policies.under(&prefix).await,
        contract.clusters.as_deref(),
    );
    checks.extend(policy_checks);
    let (own, elsewhere): (Vec<_>, Vec<_>) =
        valid.into_iter().partition(|(_, p)| p.place.is_none());
    let valid = own;

    let clusters = clusters_to_check(options, contract.clusters.as_deref(), &valid, &mut checks);
    // The scope serves the stack's clusters (names IAM's limit, which no Rule can count).
    if let Some(served) = &contract.clusters {
        let in_vpc = !matches!(
            contract.network,
            None | Some(super::endpoint::FunctionNetwork::Outside)
        );
        checks.push(super::scope::check(
            &options.stack,
            &contract.scope,
            served.len(),
            in_vpc,
        ));
    }
    let cell = contract.scope.cell();
    for cluster in &clusters {
        let network = contract.network.as_ref();
        let roles = &contract.kube_roles;
        check_cluster(ports, cluster, roles, network, cell, &mut checks).await;
    }

    let hook_name = contract
        .hook_name
        .as_deref()
        .unwrap_or(crate::interruption::DEFAULT_LIFECYCLE_HOOK);
    for (_, policy) in valid.iter().filter(|(_, p)| clusters.contains(&p.cluster)) {
        check_pool(ports, policy, hook_name, cell, &mut checks).await;
    }
    // What the ami-watcher found ahead of time, from the pools' records (the cell's table).
    if let Some(table) = &contract.table {
        let now = chrono::Utc::now();
        for (_, policy) in valid.iter().filter(|(_, p)| clusters.contains(&p.cluster)) {
            let pool = policy.pool_id();
            let found = ports.findings.findings(table, &pool).await;
            checks.extend(super::release::check(&pool, found, now));
        }
    }

    for name in contract.event_rules.iter().flatten() {
        checks.push(rules::check(name, ports.rules.rule_state(name).await));
    }

    for place in super::members::places(&elsewhere) {
        let (role, assumed) = spokes.assume(&place).await;
        checks.push(super::members::spoke(&place, &role, &assumed));
        let Ok(member) = assumed else { continue };
        let member = member.ports();
        let expected = spokes.expected(&place).await;
        let pools: Vec<&Policy> = elsewhere
            .iter()
            .map(|(_, p)| p)
            .filter(|p| p.place.as_ref() == Some(&place))
            .filter(|p| options.clusters.is_empty() || options.clusters.contains(&p.cluster))
            .collect();
        let mut clusters: Vec<&str> = pools.iter().map(|p| p.cluster.as_str()).collect();
        clusters.sort_unstable();
        clusters.dedup();
        // The functions reach a member's clusters as the spoke roles they assume there: each
        // needs its access entry (the spoke stack's) with its function's group.
        let roles = expected
            .as_ref()
            .map(|e| e.kube_roles.as_slice())
            .unwrap_or_default();
        let mut in_member = Vec::new();
        for cluster in clusters {
            // The cell's functions reach a member's clusters from the cell's network.
            let network = contract.network.as_ref();
            check_cluster(member, cluster, roles, network, None, &mut in_member).await;
        }
        checks.extend(super::members::at_member(&place, in_member));
        for policy in pools {
            check_pool(member, policy, hook_name, None, &mut checks).await;
        }
        match &expected {
            Ok(e) => checks.extend(forwarding(member, &place, &role, &e.bus).await),
            Err(e) => checks.push(Check::fail(
                CheckKind::Forwarding,
                place.to_string(),
                format!("cannot tell the cell's bus (the cell's own account is unknown: {e})"),
                "check the credentials doctor runs with (sts:GetCallerIdentity) and AWS_REGION",
            )),
        }
    }
    Report { checks }
}

/// The `forwarding` checks of the member at `place` (read through its spoke role `role`):
/// its rules, the targets of those naming a forwarded class, against the cell's bus `bus`.
async fn forwarding(member: Ports<'_>, place: &Place, role: &str, bus: &str) -> Vec<Check> {
    let read = async {
        let rules = member.rules.rules().await?;
        let mut out = Vec::new();
        for rule in super::forwarding::candidates(&rules) {
            let targets = member.rules.targets(&rule.name).await?;
            out.push(super::forwarding::Forwarder {
                rule: rule.clone(),
                targets,
            });
        }
        Ok(out)
    };
    super::forwarding::check(place, role, bus, read.await)
}

/// `--cluster` names (each must be one the stack serves), else the stack's `ClusterNames`, else
/// (no stack) the clusters the valid policies name.
fn clusters_to_check(
    options: &Options,
    served: Option<&[String]>,
    valid: &[(String, Policy)],
    checks: &mut Vec<Check>,
) -> Vec<String> {
    if !options.clusters.is_empty() {
        let mut out = Vec::new();
        for c in &options.clusters {
            match served {
                Some(served) if !served.contains(c) => checks.push(Check::fail(
                    CheckKind::Cluster,
                    c,
                    format!(
                        "not in the stack's ClusterNames ({}): nodecycle's roles may not change \
                         its groups",
                        served.join(", ")
                    ),
                    format!("add {c} to the ClusterNames parameter and update the stack"),
                )),
                _ if out.contains(c) => {}
                _ => out.push(c.clone()),
            }
        }
        return out;
    }
    if let Some(served) = served {
        return served.to_vec();
    }
    let mut out: Vec<String> = valid.iter().map(|(_, p)| p.cluster.clone()).collect();
    out.sort();
    out.dedup();
    out
}

/// `network`: where the functions run (`None`: no stack read, the endpoint is not judged);
/// `cell`: the cell tag the stack's permissions require (`None`: they name the clusters).
async fn check_cluster(
    ports: Ports<'_>,
    cluster: &str,
    roles: &[(String, String)],
    network: Option<&FunctionNetwork>,
    cell: Option<&str>,
    checks: &mut Vec<Check>,
) {
    let facts = ports.clusters.cluster(cluster).await;
    let (mode, endpoint) = match &facts {
        Ok(Some(f)) => (Some(f.authentication_mode.clone()), f.endpoint.clone()),
        _ => (None, None),
    };
    let cell_check = match (&facts, cell) {
        (Ok(Some(f)), Some(cell)) => {
            let arn = format!(
                "$(aws eks describe-cluster --name {cluster} --query cluster.arn --output text)"
            );
            let what = format!("cluster {cluster}");
            Some(scope::tagged(
                cluster,
                &what,
                &f.tags,
                cell,
                scope::eks_fix(&arn),
            ))
        }
        _ => None,
    };
    checks.push(access::cluster(cluster, facts));
    checks.extend(cell_check);
    if let Some(network) = network {
        checks.extend(endpoint::check(cluster, endpoint.as_ref(), network));
    }
    // Without the cluster there is nothing more to read about it.
    let Some(mode) = mode else { return };

    let listed = if access::uses_access_entries(mode.as_deref()) && !roles.is_empty() {
        Some(ports.clusters.access_entries(cluster).await)
    } else {
        None
    };
    for (output, arn) in roles {
        let entry = match &listed {
            None => Ok(None),
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(principals)) => match access::find(principals, arn) {
                None => Ok(None),
                Some(principal) => ports.clusters.access_entry(cluster, principal).await,
            },
        };
        checks.push(access::entry(cluster, output, arn, mode.as_deref(), entry));
    }
    checks.extend(rbac::check(cluster, ports.rbac.rbac(cluster).await));
}

/// A pool whose policy fixes `architecture`: it runs on the group's instance types (without
/// `architecture`, the pool takes the group's own, and the ami-watcher checks each new image).
async fn check_architecture(ports: Ports<'_>, policy: &Policy, checks: &mut Vec<Check>) {
    let Some(arch) = policy.architecture else {
        return;
    };
    let pool = policy.pool_id();
    let facts = ports
        .node_types
        .instance_types(&policy.cluster, &policy.node_group)
        .await;
    checks.push(match facts {
        Err(e) => Check::unreadable(CheckKind::Architecture, &pool, &e),
        Ok(facts) => {
            let problems = crate::ami::instance_types::check_policy(policy, &facts);
            let errors: Vec<String> = problems.errors().map(ToString::to_string).collect();
            if errors.is_empty() {
                Check::ok(
                    CheckKind::Architecture,
                    &pool,
                    format!("{arch} runs on the node group's instance types"),
                )
            } else {
                Check::fail(
                    CheckKind::Architecture,
                    &pool,
                    errors.join("; "),
                    "set the policy's architecture to what the group's instance types run (or remove it), or change the group's instance types; until then the pool is invalid and nothing is launched",
                )
            }
        }
    });
}

/// `cell`: the cell tag the stack's permissions require on the group, its Auto Scaling group and
/// launch template (`None`: they name the clusters).
async fn check_pool(
    ports: Ports<'_>,
    policy: &Policy,
    hook_name: &str,
    cell: Option<&str>,
    checks: &mut Vec<Check>,
) {
    check_architecture(ports, policy, checks).await;
    let pool = policy.pool_id();
    let cluster = policy.cluster.as_str();
    match &policy.node_group {
        NodeGroup::AutoScalingGroup(name) => {
            let asg = ports.groups.auto_scaling_group(name).await;
            // A managed node group's own group gets no template or hook checks: the policy's
            // kind is wrong, and that is the one thing to fix.
            let found = asg
                .as_ref()
                .ok()
                .and_then(Option::as_ref)
                .filter(|a| !a.tags.contains_key(crate::tags::NODEGROUP))
                .cloned();
            checks.push(groups::self_managed(&pool, cluster, name, asg));
            let Some(asg) = found else { return };
            if let Some(cell) = cell {
                let what = format!("Auto Scaling group {name}");
                checks.push(scope::tagged(
                    &pool,
                    &what,
                    &asg.tags,
                    cell,
                    scope::asg_fix(name),
                ));
            }
            if let Some(t) = &asg.launch_template {
                let facts = ports.groups.launch_template(t).await;
                checks.extend(cell.and_then(|cell| template_cell_tag(&pool, &facts, cell)));
                checks.push(groups::launch_template(&pool, cluster, t, facts));
            }
            let hooks = ports.groups.lifecycle_hooks(name).await;
            if let Ok(h) = &hooks {
                checks.extend(groups::retention(&pool, hook_name, &asg, h));
            }
            checks.push(groups::hooks(&pool, name, hook_name, hooks));
            if !asg.retained.is_empty() {
                let pods = ports.pods.pods_of(cluster, &asg.retained).await;
                checks.extend(groups::retained(&pool, name, &asg.retained, pods));
            }
        }
        NodeGroup::ManagedNodeGroup(name) => {
            let ng = ports.groups.managed_node_group(cluster, name).await;
            let found = ng.as_ref().ok().and_then(Option::as_ref).cloned();
            let asg_named_so = match &found {
                None if ng.is_ok() => ports
                    .groups
                    .auto_scaling_group(name)
                    .await
                    .is_ok_and(|a| a.is_some()),
                _ => false,
            };
            let backing = match found.as_ref().and_then(|n| n.auto_scaling_group.as_deref()) {
                Some(asg) => Some(ports.groups.auto_scaling_group(asg).await),
                None => None,
            };
            if let (Some(cell), Some(ng)) = (cell, &found) {
                let arn = format!(
                    "$(aws eks describe-nodegroup --cluster-name {cluster} --nodegroup-name {name} \
                     --query nodegroup.nodegroupArn --output text)"
                );
                let what = format!("managed node group {name}");
                checks.push(scope::tagged(
                    &pool,
                    &what,
                    &ng.tags,
                    cell,
                    scope::eks_fix(&arn),
                ));
                if let Some(Ok(Some(asg))) = &backing {
                    let what = format!(
                        "Auto Scaling group {} of managed node group {name}",
                        asg.name
                    );
                    let fix = scope::asg_fix(&asg.name);
                    checks.push(scope::tagged(&pool, &what, &asg.tags, cell, fix));
                }
            }
            checks.push(groups::managed(
                &pool,
                cluster,
                name,
                ng,
                backing,
                asg_named_so,
            ));
            let Some(ng) = found else { return };
            let template = match &ng.launch_template {
                Some(t) => {
                    let facts = ports.groups.launch_template(t).await;
                    checks.extend(cell.and_then(|cell| template_cell_tag(&pool, &facts, cell)));
                    groups::launch_template(&pool, cluster, t, facts)
                }
                None => groups::no_custom_template(&pool, name),
            };
            checks.push(template);
        }
    }
}

/// The `cellTag` check of a launch template read (`None` when it was not found or not read: the
/// `launchTemplate` check reports that).
fn template_cell_tag(
    pool: &str,
    facts: &Result<Option<TemplateFacts>, crate::port::PortError>,
    cell: &str,
) -> Option<Check> {
    let Ok(Some(t)) = facts else { return None };
    let what = format!("launch template {} ({})", t.name, t.id);
    Some(scope::tagged(
        pool,
        &what,
        &t.tags,
        cell,
        scope::template_fix(&t.id),
    ))
}
