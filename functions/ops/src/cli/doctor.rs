//! `nodecycle doctor [--stack NAME] [--cluster NAME]... [--json]`

use nodecycle::aws::{
    Clients, cloudformation::Stacks, event_rules::Rules, inventory::Inventory, ssm::Ssm,
};
use nodecycle::doctor::{self, Status, run::Options, run::Ports};
use nodecycle::kube::rbac::EksRbac;

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Check only this cluster and its pools (repeatable). Default: every cluster in the
    /// stack's ClusterNames.
    #[arg(long = "cluster", value_name = "NAME")]
    clusters: Vec<String>,
    /// Print `{"checks": [{"status", "check", "subject", "detail", "fix"}], "failed": n}`.
    #[arg(long)]
    json: bool,
}

/// A CloudFormation stack name (letter first, letters, digits, `-`, at most 128) or a stack ARN.
fn valid_stack(s: &str) -> bool {
    if s.starts_with("arn:") {
        return s.contains(":cloudformation:") && s.contains(":stack/");
    }
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// An EKS cluster name (alphanumeric first, then alphanumerics, `-`, `_`; at most 100).
fn valid_cluster(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.len() <= 100
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Runs every check with the environment's AWS credentials and region and prints one line per
/// check (`ok|warn|FAIL  <check> <subject>: <detail>  <fix>`) or the JSON report. Exit 0 when
/// nothing failed, 1 when something did, 2 for bad arguments (or no region).
pub async fn run(args: Args) -> u8 {
    // The stack: --stack, $NODECYCLE_STACK or the context's (the global options), else `nodecycle`.
    let stack = super::target::get()
        .stack
        .clone()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| doctor::DEFAULT_STACK.to_owned());
    if !valid_stack(&stack) {
        eprintln!(
            "nodecycle doctor: {stack:?} is not a CloudFormation stack name (a letter, then \
             letters, digits and -) or stack ARN"
        );
        return 2;
    }
    if let Some(bad) = args.clusters.iter().find(|c| !valid_cluster(c)) {
        eprintln!(
            "nodecycle doctor: --cluster {bad:?} is not an EKS cluster name (letters, digits, - \
             and _, at most 100)"
        );
        return 2;
    }
    nodecycle::wiring::init_logging();
    let config = match super::target::sdk().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nodecycle doctor: {e}");
            return 2;
        }
    };
    let clients = Clients::new(&config);
    let inventory = Inventory::new(clients.clone());
    let ssm = Ssm::new(clients.ssm.clone());
    let stacks = Stacks::from_config(&config);
    let rules = Rules::from_config(&config);
    let kube = match nodecycle::wiring::kube_overrides(&nodecycle::wiring::process_env) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("nodecycle doctor: {}: {}", e.error_type, e.message);
            return 2;
        }
    };
    let rbac = EksRbac::new(config.clone()).with_overrides(kube);
    let node_types = nodecycle::aws::nodegroup::NodeGroups::new(
        clients.autoscaling.clone(),
        clients.ec2.clone(),
        clients.eks.clone(),
    );
    let ports = Ports {
        stack: &stacks,
        table: &inventory,
        policies: &ssm,
        groups: &inventory,
        clusters: &inventory,
        rbac: &rbac,
        pods: &rbac,
        rules: &rules,
        node_types: &node_types,
        findings: &inventory,
    };
    let options = Options {
        stack,
        clusters: args.clusters,
        fallback_prefix: super::target::env(nodecycle::policy::source::PREFIX_ENV)
            .filter(|p| !p.trim().is_empty())
            .unwrap_or_else(|| nodecycle::policy::source::DEFAULT_PREFIX.to_owned()),
    };
    // Members through their spoke roles (NODECYCLE_SERVED_ACCOUNTS, NODECYCLE_MEMBER_ROLE).
    let common = match nodecycle::wiring::Common::without_table(&super::target::env) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nodecycle doctor: {}", e.message);
            return 2;
        }
    };
    let cell = common.ports(&config);
    let spokes = nodecycle::doctor::spokes::Spokes(nodecycle::aws::members::AwsMembers::new(
        &config,
        cell,
        Ok(common.members.clone()),
        common.adapters_fn(),
    ));
    let report = doctor::run::diagnose_organisation(ports, &spokes, &options).await;
    if args.json {
        super::print_json(&report.to_json());
    } else {
        for check in &report.checks {
            println!("{check}");
        }
    }
    eprintln!(
        "nodecycle doctor: {} checks, {} failed, {} warnings",
        report.checks.len(),
        report.failed(),
        report.count(Status::Warn)
    );
    report.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_stack("nodecycle"));
        assert!(valid_stack("nodecycle-prod-2"));
        assert!(valid_stack(
            "arn:aws:cloudformation:us-east-2:123456789012:stack/nodecycle/1f2e"
        ));
        assert!(!valid_stack("1stack"));
        assert!(!valid_stack("my_stack"));
        assert!(!valid_stack(""));
        assert!(valid_cluster("prod"));
        assert!(valid_cluster("prod_eu-1"));
        assert!(!valid_cluster("-prod"));
        assert!(!valid_cluster("prod/x"));
    }
}
