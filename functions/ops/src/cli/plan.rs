//! `nodecycle plan <POLICY_FILE> [--at <INSTANT>]`

use chrono::{DateTime, Utc};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy file (YAML or JSON) of the pool.
    #[arg(value_name = "POLICY_FILE")]
    file: String,
    /// Plan as if it were this instant (now, RFC 3339, or without offset: UTC); default now.
    /// Observed state is today's.
    #[arg(long, value_parser = super::budget::parse_instant)]
    at: Option<DateTime<Utc>>,
}

/// Prints the planner's decisions for the pool's current state:
/// `{"pool", "allowed", "candidates", "actions", "blocked", ...}`, plus for a managed node group
/// `drifted`, `update` and `nodeGroupUpdate`, and `promotionWait`: why a pool with promotion
/// keeps its desired AMI (what it waits for, as the ami-watcher last recorded it), `null` when it
/// does not wait; `warnings`: what the ami-watcher found ahead of time (AMIs deprecating within
/// the horizon, a pinned release without builds for the next Kubernetes minor), also printed on
/// standard error. Exit 1 with `{"error"}` when the state cannot be read, 2 on an invalid policy.
/// Changes nothing.
pub async fn run(args: Args) -> u8 {
    let policy = match super::load_policy(&args.file) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let fail = |e: String| {
        super::print_json(&serde_json::json!({"error": e}));
        1
    };
    let runtime = match super::target::runtime().await {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let wiring = match nodecycle::wiring::RotatorConfig::from_lookup(&super::target::env) {
        Ok(c) => c,
        Err(e) => return fail(e.message),
    };
    let rotator = wiring.rotator(&runtime);
    // The pool's account and region: its member's ports.
    let rotator = match rotator.at(policy.place.as_ref()).await {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    let kube = match rotator.ports.kube.connect(&policy.cluster).await {
        Ok(k) => k,
        Err(e) => return fail(format!("cluster {} unreachable: {e}", policy.cluster)),
    };
    let at = args.at.unwrap_or_else(Utc::now);
    let plan = match rotator.planner().preview(&policy, kube.as_ref(), at).await {
        Ok((_, plan)) => plan,
        Err(e) => return fail(e),
    };
    let record = match rotator.cell.state.pool(&policy.pool_id()).await {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot read the pool's state: {e}")),
    };
    match serde_json::to_value(&plan) {
        Ok(mut v) => {
            if let Some(o) = v.as_object_mut() {
                let warnings = record
                    .as_ref()
                    .and_then(|r| r.findings.as_ref())
                    .map(|f| f.warnings(at))
                    .unwrap_or_default();
                for w in &warnings {
                    eprintln!("warning: {}: {w}", policy.pool_id());
                }
                o.insert("warnings".into(), serde_json::json!(warnings));
                o.insert(
                    "promotionWait".into(),
                    serde_json::json!(record.and_then(|r| r.promotion_wait)),
                );
            }
            super::output::print(
                &v,
                super::target::get().output_or(super::target::Output::Json),
                super::output::generic,
            );
            0
        }
        Err(e) => fail(e.to_string()),
    }
}
