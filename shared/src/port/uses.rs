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

/// A Lambda function (its logical id in template.yaml) and the port methods (`Trait::method`)
/// its code can call. `KubeConnector::connect` stands for the EKS connection (endpoint and CA).
pub const FUNCTIONS: [(&str, &[&str]); 4] = [
    (
        "AmiWatcherFunction",
        &[
            "PolicySource::all",
            "PolicySource::one",
            "ParameterStore::get_parameters",
            "ImageCatalog::describe_images",
            "ClusterCatalog::kubernetes_version",
            "NodeGroupCatalog::current_image",
            "NodeGroupCatalog::instance_types",
            "Store::get",
            "Store::put",
            "Store::query",
            "AlarmStates::states",
            "EventSink::put",
        ],
    ),
    (
        "RotatorFunction",
        &[
            "PolicySource::all",
            "PolicySource::one",
            "ParameterStore::get_parameters",
            "NodeGroupCatalog::instance_types",
            "GroupOps::describe",
            "GroupSnapshots::describe_groups",
            "GroupSnapshots::prefetch_template_tags",
            "GroupOps::desired_capacity",
            "GroupOps::sizes",
            "GroupOps::set_max_size",
            "GroupOps::suspend_processes",
            "GroupOps::resume_processes",
            "GroupOps::launch_problem",
            "GroupOps::set_desired_capacity",
            "GroupOps::terminate_instance",
            "GroupOps::set_image",
            "ManagedGroupOps::describe",
            "ManagedGroupOps::set_update_config",
            "ManagedGroupOps::start_update",
            "ManagedGroupOps::describe_update",
            "ManagedGroupOps::template_with_image",
            "ManagedGroupOps::template_image",
            "Store::get",
            "Store::put",
            "Store::query",
            "Store::batch_get",
            "Store::transact",
            "EventSink::put",
            "KubeConnector::connect",
            // Fan-out (handlers::dispatch): the dispatcher's queue, the worker's served set.
            "WorkQueue::send",
            "Deployment::served",
        ],
    ),
    (
        "InterruptionHandlerFunction",
        &[
            "PolicySource::all",
            "PolicySource::one",
            "InstanceLookup::instance",
            "Deployment::served",
            "LifecycleOps::heartbeat",
            "LifecycleOps::complete_continue",
            "Store::get",
            "Store::put",
            "Store::query",
            "Store::transact",
            "EventSink::put",
            "KubeConnector::connect",
        ],
    ),
    (
        "OpsFunction",
        &[
            "PolicySource::all",
            "PolicySource::one",
            "ImageCatalog::describe_images",
            "GroupOps::describe",
            "GroupSnapshots::describe_groups",
            "GroupOps::desired_capacity",
            "GroupOps::set_desired_capacity",
            "GroupOps::terminate_instance",
            "ManagedGroupOps::describe",
            "ManagedGroupOps::describe_update",
            "ManagedGroupOps::template_image",
            "Store::get",
            "Store::put",
            "Store::query",
            "Store::batch_get",
            "Store::transact",
            "AlarmStates::states",
            "EventSink::put",
            "KubeConnector::connect",
        ],
    ),
];

/// Adapter methods that reach SDK calls but no Lambda function calls: `nodecycle doctor`'s ports
/// (the operator's credentials), the CLI's local table setup, and helpers reached only through
/// the listed methods.
pub const NOT_IN_LAMBDAS: &[&str] = &[
    "StackOutputs::outputs",
    "EventRules::rule_state",
    "EventRules::rules",
    "EventRules::targets",
    "TableInfo::table",
    "GroupInfo::auto_scaling_group",
    "GroupInfo::lifecycle_hooks",
    "GroupInfo::managed_node_group",
    "GroupInfo::launch_template",
    "ClusterAccessInfo::cluster",
    "ClusterAccessInfo::access_entries",
    "ClusterAccessInfo::access_entry",
    "PolicyDocuments::under",
    "Table::create_if_missing",
    "Ssm::parameters_by_path",
    "Ssm::parameter",
];
