//! The stack contract: which outputs a nodecycle stack has (template.yaml and the CDK app emit
//! the same names) and what doctor reads from them.

use std::collections::BTreeMap;

use super::{Check, CheckKind};
use crate::port::PortError;

/// Output: the state table's name.
pub const STATE_TABLE: &str = "StateTableName";
/// Output: the policy SSM prefix.
pub const POLICY_PREFIX: &str = "PolicyPrefix";
/// Output: the terminate lifecycle hook name nodecycle answers.
pub const LIFECYCLE_HOOK: &str = "LifecycleHookName";
/// Output: comma-separated cluster names.
pub const CLUSTER_NAMES: &str = "ClusterNames";
/// Output: comma-separated names of every EventBridge rule of the stack.
pub const EVENT_RULES: &str = "EventRuleNames";
/// Outputs: the roles of the functions that talk to Kubernetes (each needs an access entry with
/// group `nodecycle` in every cluster).
pub const KUBE_ROLES: [&str; 3] = ["RotatorRoleArn", "InterruptionHandlerRoleArn", "OpsRoleArn"];
/// Every output doctor needs.
pub const REQUIRED: [&str; 8] = [
    STATE_TABLE,
    POLICY_PREFIX,
    LIFECYCLE_HOOK,
    CLUSTER_NAMES,
    EVENT_RULES,
    KUBE_ROLES[0],
    KUBE_ROLES[1],
    KUBE_ROLES[2],
];

/// What doctor takes from the stack; `None` where the output is missing (already reported).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contract {
    /// [`STATE_TABLE`].
    pub table: Option<String>,
    /// [`POLICY_PREFIX`].
    pub policy_prefix: Option<String>,
    /// [`LIFECYCLE_HOOK`].
    pub hook_name: Option<String>,
    /// [`CLUSTER_NAMES`], split and trimmed.
    pub clusters: Option<Vec<String>>,
    /// [`EVENT_RULES`], split and trimmed.
    pub event_rules: Option<Vec<String>>,
    /// (output name, role ARN) for each of [`KUBE_ROLES`] present.
    pub kube_roles: Vec<(String, String)>,
    /// Where the functions that reach Kubernetes run (optional output
    /// [`super::endpoint::FUNCTION_SUBNETS`]; missing: outside any VPC).
    pub network: Option<super::endpoint::FunctionNetwork>,
    /// How the permissions scope the clusters (optional outputs [`super::scope::PERMISSION_SCOPE`]
    /// and [`super::scope::CELL_TAG`]; missing: by name).
    pub scope: super::scope::Scope,
}

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Checks the stack read (`Ok(None)`: no such stack) and extracts the [`Contract`]: one `stack`
/// check, FAIL naming every missing output.
pub fn read(
    stack: &str,
    outputs: Result<Option<BTreeMap<String, String>>, PortError>,
) -> (Check, Contract) {
    let outputs = match outputs {
        Ok(Some(o)) => o,
        Ok(None) => {
            return (
                Check::fail(
                    CheckKind::Stack,
                    stack,
                    "no such CloudFormation stack in this account and region",
                    "deploy it (sam deploy --guided, see docs/getting-started.md), or name yours with \
                     --stack / NODECYCLE_STACK and check AWS_REGION",
                ),
                Contract::default(),
            );
        }
        Err(e) => {
            return (
                Check::unreadable(CheckKind::Stack, stack, &e),
                Contract::default(),
            );
        }
    };
    let get = |k: &str| {
        outputs
            .get(k)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let contract = Contract {
        table: get(STATE_TABLE),
        policy_prefix: get(POLICY_PREFIX),
        hook_name: get(LIFECYCLE_HOOK),
        clusters: get(CLUSTER_NAMES).map(|v| list(&v)),
        event_rules: get(EVENT_RULES).map(|v| list(&v)),
        kube_roles: KUBE_ROLES
            .iter()
            .filter_map(|k| get(k).map(|v| ((*k).to_owned(), v)))
            .collect(),
        network: Some(super::endpoint::FunctionNetwork::from_output(
            outputs
                .get(super::endpoint::FUNCTION_SUBNETS)
                .map(String::as_str),
        )),
        scope: super::scope::Scope::from_outputs(&outputs, stack),
    };
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|k| get(k).is_none())
        .collect();
    let check = if missing.is_empty() {
        Check::ok(
            CheckKind::Stack,
            stack,
            format!(
                "every output of the contract is present ({})",
                REQUIRED.len()
            ),
        )
    } else {
        Check::fail(
            CheckKind::Stack,
            stack,
            format!(
                "missing output(s) {}: the checks that need them are skipped",
                missing.join(", ")
            ),
            "update the stack with this version's template.yaml (or CDK app), which emits them",
        )
    };
    (check, contract)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Status;
    use crate::port::ErrorKind;

    fn full() -> BTreeMap<String, String> {
        REQUIRED
            .iter()
            .map(|k| {
                let v = match *k {
                    CLUSTER_NAMES => " prod, staging ,".to_owned(),
                    EVENT_RULES => "a,b".to_owned(),
                    other => format!("value-of-{other}"),
                };
                ((*k).to_owned(), v)
            })
            .collect()
    }

    #[test]
    fn complete_stack() {
        let (check, c) = read("nodecycle", Ok(Some(full())));
        assert_eq!(check.status, Status::Ok);
        assert_eq!(c.clusters.unwrap(), vec!["prod", "staging"]);
        assert_eq!(c.event_rules.unwrap(), vec!["a", "b"]);
        assert_eq!(c.table.as_deref(), Some("value-of-StateTableName"));
        assert_eq!(c.kube_roles.len(), 3);
    }

    #[test]
    fn missing_outputs_fail_and_are_none() {
        let mut o = full();
        o.remove(EVENT_RULES);
        o.insert(STATE_TABLE.into(), "  ".into());
        let (check, c) = read("s", Ok(Some(o)));
        assert_eq!(check.status, Status::Fail);
        assert!(check.detail.contains(EVENT_RULES) && check.detail.contains(STATE_TABLE));
        assert_eq!(c.event_rules, None);
        assert_eq!(c.table, None);
        assert!(c.policy_prefix.is_some());
    }

    #[test]
    fn no_stack_and_unreadable() {
        let (check, c) = read("s", Ok(None));
        assert_eq!(check.status, Status::Fail);
        assert_eq!(c, Contract::default());
        let e = PortError::new(
            "cloudformation:DescribeStacks",
            ErrorKind::AccessDenied,
            "x",
        );
        let (check, _) = read("s", Err(e));
        assert_eq!(check.status, Status::Fail);
        assert!(check.fix.contains("cloudformation:DescribeStacks"));
    }
}
