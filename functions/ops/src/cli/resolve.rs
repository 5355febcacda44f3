//! `nodecycle resolve <POLICY_FILE>`

use nodecycle::ami::resolve::Resolver;
use nodecycle::aws::{Clients, ec2::Ec2, eks::Eks, nodegroup::NodeGroups, ssm::Ssm};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy file (YAML or JSON).
    #[arg(value_name = "POLICY_FILE")]
    file: String,
}

/// Prints `{"pool", "kubernetesVersion", "desired", "candidates"}`; exit 1 with
/// `{"error": ...}` when nothing resolves, 2 on an invalid policy.
pub async fn run(args: Args) -> u8 {
    let policy = match super::load_policy(&args.file) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let config = match super::target::sdk().await {
        Ok(c) => c,
        Err(e) => {
            super::print_json(&serde_json::json!({ "error": e }));
            return 1;
        }
    };
    let c = Clients::new(&config);
    let (ssm, ec2, eks) = (
        Ssm::new(c.ssm.clone()),
        Ec2::new(c.ec2.clone()),
        Eks::new(c.eks.clone()),
    );
    let groups = NodeGroups::new(c.autoscaling.clone(), c.ec2.clone(), c.eks.clone());
    let resolver = Resolver::new(&ssm, &ec2, &eks, &groups);
    match resolver.resolve(&policy, chrono::Utc::now()).await {
        Ok(resolution) => {
            let value = serde_json::to_value(&resolution)
                .unwrap_or_else(|e| serde_json::json!({"error": e.to_string()}));
            super::output::print(
                &value,
                super::target::get().output_or(super::target::Output::Json),
                super::output::generic,
            );
            0
        }
        Err(e) => {
            super::print_json(&serde_json::json!({"error": e.to_string()}));
            1
        }
    }
}
