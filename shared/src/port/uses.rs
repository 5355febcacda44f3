//! Which port methods each Lambda function's code can call: the contract its IAM role is checked
//! against. `tests/tests/template.rs` (`every_role_grants_what_its_code_calls_and_no_more`)
//! derives, from the adapters' source, the AWS operations each listed method can reach (the SDK
//! calls in the method and in the helpers it calls) and checks on the SAM-translated template
//! that the function's role grants each of them and no mutating action beyond them. It fails
//! when an adapter gains an SDK call its users' roles do not grant, when a role grants a
//! mutating action no listed method calls, and when an adapter method that reaches an SDK call
//! is listed nowhere (here or in [`NOT_IN_LAMBDAS`]).
//!
//! A function's entry point holds only the ports of its handler struct, so the port traits bound
//! what it can reach; within a trait, the methods listed are the ones the handler's code calls
//! (ops embeds the rotator's handler for `status` and `cancel` but never calls
//! `GroupOps::set_image` or a managed node group update).

/// A Lambda function (its logical id in template.yaml) and the port methods (`Trait::method`,
/// or `Trait::{a,b}` for several of one trait: see [`methods`]) its code can call. `KubeConnector::connect` stands for the EKS connection (endpoint and CA).
pub const FUNCTIONS: [(&str, &[&str]); 4] = [
    (
        "AmiWatcherFunction",
        &[
            "PolicySource::{all,one}",
            "ParameterStore::get_parameters",
            "ImageCatalog::describe_images",
            "ClusterCatalog::kubernetes_version",
            "NodeGroupCatalog::{current_image,instance_types}",
            "Store::{get,put,query}",
            "AlarmStates::states",
            "EventSink::put",
        ],
    ),
    (
        "RotatorFunction",
        &[
            "PolicySource::{all,one}",
            "ParameterStore::get_parameters",
            "NodeGroupCatalog::instance_types",
            "GroupOps::{describe,desired_capacity,sizes,launch_problem}",
            "GroupOps::{set_max_size,set_desired_capacity,terminate_instance}",
            "GroupOps::{suspend_processes,resume_processes,set_image}",
            "GroupSnapshots::{describe_groups,prefetch_template_tags}",
            "ManagedGroupOps::{describe,describe_update,template_image}",
            "ManagedGroupOps::{set_update_config,start_update,template_with_image}",
            "Store::{get,put,query,batch_get,transact}",
            "EventSink::put",
            // Rollout status, published on change (`/nodecycle/status/*`).
            "StatusBoard::publish",
            "KubeConnector::connect",
            // Failed status checks and scheduled events (repair).
            "InstanceLookup::troubled",
            // Fan-out (handlers::dispatch): the dispatcher's queue, the worker's served set.
            "WorkQueue::send",
            "Deployment::served",
        ],
    ),
    (
        "InterruptionHandlerFunction",
        &[
            "PolicySource::{all,one}",
            "InstanceLookup::{instance,spot_request_status}",
            "Deployment::served",
            "LifecycleOps::{heartbeat,complete_continue,complete_abandon}",
            "Store::{get,put,query,transact}",
            "EventSink::put",
            "KubeConnector::connect",
        ],
    ),
    (
        "OpsFunction",
        &[
            "PolicySource::{all,one}",
            "ImageCatalog::describe_images",
            "GroupOps::{describe,desired_capacity,set_desired_capacity,terminate_instance}",
            "GroupSnapshots::describe_groups",
            "ManagedGroupOps::{describe,describe_update,template_image}",
            "Store::{get,put,query,batch_get,transact}",
            "AlarmStates::states",
            "EventSink::put",
            "KubeConnector::connect",
        ],
    ),
];

/// Adapter methods that reach SDK calls but no Lambda function calls: `nodecycle doctor`'s ports
/// (the operator's credentials), the CLI's local table setup, `nodecycle policy apply`'s
/// parameter writes, and helpers reached only through the listed methods.
pub const NOT_IN_LAMBDAS: &[&str] = &[
    "StackOutputs::outputs",
    "EventRules::{rule_state,rules,targets}",
    "TableInfo::table",
    "GroupInfo::{auto_scaling_group,lifecycle_hooks,managed_node_group,launch_template}",
    "ClusterAccessInfo::{cluster,access_entries,access_entry}",
    "PolicyDocuments::under",
    "Table::create_if_missing",
    "Ssm::{parameters_by_path,parameter,put_string}",
    "PoolFindings::findings",
    // `nodecycle wait`, with the pipeline's read-only credentials.
    "StatusBoard::{read,read_cluster}",
];

/// The `Trait::method` names an entry of [`FUNCTIONS`] or [`NOT_IN_LAMBDAS`] stands for:
/// `Trait::method` itself, or `Trait::a` and `Trait::b` for `Trait::{a,b}`.
pub fn methods(entry: &str) -> Vec<String> {
    match entry.split_once("::{") {
        Some((port, rest)) => rest
            .trim_end_matches('}')
            .split(',')
            .map(|m| format!("{port}::{}", m.trim()))
            .collect(),
        None => vec![entry.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_stands_for_one_method_or_each_in_braces() {
        assert_eq!(methods("Store::get"), ["Store::get"]);
        assert_eq!(methods("Store::{get,put}"), ["Store::get", "Store::put"]);
        assert_eq!(methods("Store::{get}"), ["Store::get"]);
    }

    #[test]
    fn no_method_is_listed_twice_for_a_function() {
        for (function, entries) in FUNCTIONS {
            let all: Vec<String> = entries.iter().flat_map(|e| methods(e)).collect();
            let distinct: std::collections::BTreeSet<&String> = all.iter().collect();
            assert_eq!(distinct.len(), all.len(), "{function}: {all:?}");
            assert!(all.iter().all(|m| !m.contains(['{', '}', ','])), "{all:?}");
        }
    }
}
