//! `nodecycle drain --cluster <NAME> <INSTANCE_ID> [--grace <DURATION>] [--timeout <DURATION>]`

use std::time::Duration;

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// EKS cluster name.
    #[arg(long)]
    cluster: String,
    /// EC2 instance id of the node to drain (matched by spec.providerID).
    #[arg(value_name = "INSTANCE_ID")]
    instance: String,
    /// terminationGracePeriod: after this long from the start, remaining pods are deleted
    /// (PodDisruptionBudgets no longer waited for). Default: wait indefinitely.
    #[arg(long, value_parser = parse_duration)]
    grace: Option<Duration>,
    /// Give up (exit 1) if the drain is not done after this long.
    #[arg(long, value_parser = parse_duration, default_value = "15m")]
    timeout: Duration,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    nodecycle::duration::parse(s)
}

/// Cordons and drains; progress lines on stderr, the report JSON on stdout. Exit 0 when done,
/// 1 when the timeout ended it first (or the APIs failed), 2 on bad input or an unknown instance.
pub async fn run(args: Args) -> u8 {
    nodecycle::wiring::init_logging();
    let overrides = match nodecycle::wiring::kube_overrides(&nodecycle::wiring::process_env) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("nodecycle drain: {}: {}", e.error_type, e.message);
            return 2;
        }
    };
    let config = match super::target::sdk().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nodecycle drain: {e}");
            return 2;
        }
    };
    let mut progress = |line: &str| eprintln!("{line}");
    match nodecycle::kube::drain_command(
        &config,
        &overrides,
        &args.cluster,
        &args.instance,
        args.grace,
        args.timeout,
        &mut progress,
    )
    .await
    {
        Ok(report) => {
            let done = report.done;
            match serde_json::to_value(&report) {
                Ok(v) => println!("{v}"),
                Err(e) => eprintln!("nodecycle: cannot encode the report: {e}"),
            }
            if done { 0 } else { 1 }
        }
        Err(e) => {
            eprintln!("nodecycle drain: {e}");
            u8::try_from(e.exit_code()).unwrap_or(1)
        }
    }
}
