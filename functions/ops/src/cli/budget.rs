//! `nodecycle budget <POLICY_FILE> --at <RFC3339> --nodes <N> [--disrupting <M>] [--reason <R>]`

use chrono::{DateTime, Utc};
use nodecycle::budget::{self, Reason};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy file (YAML or JSON).
    #[arg(value_name = "POLICY_FILE")]
    file: String,
    /// Instant to evaluate at (RFC 3339, e.g. 2026-12-05T10:00:00Z).
    #[arg(long, value_parser = parse_instant)]
    at: DateTime<Utc>,
    /// Ready nodes in the pool.
    #[arg(long)]
    nodes: u32,
    /// Nodes already being disrupted.
    #[arg(long, default_value_t = 0)]
    disrupting: u32,
    /// Disruption reason: Drifted, Expired, Underutilized or Empty.
    #[arg(long, default_value = "Drifted", value_parser = parse_reason)]
    reason: Reason,
}

pub fn parse_instant(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{e}; expected RFC 3339 such as 2026-12-05T10:00:00Z"))
}

fn parse_reason(s: &str) -> Result<Reason, String> {
    s.parse::<Reason>().map_err(|e| e.to_string())
}

/// Prints `{"reason", "total", "disrupting", "allowed", "limitedBy", "nextChange",
/// "nextWindowEdge"}`: `nextChange` is when `allowed` changes next (the counts unchanged),
/// `nextWindowEdge` when a budget window next opens or closes ([`budget::Outlook`]).
pub fn run(args: Args) -> u8 {
    let policy = match super::load_policy(&args.file) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let allowance = budget::outlook(
        &policy.budgets,
        args.reason,
        args.nodes,
        args.disrupting,
        args.at,
    );
    match serde_json::to_value(&allowance) {
        Ok(v) => {
            println!("{v}");
            0
        }
        Err(e) => {
            eprintln!("nodecycle: cannot encode the result: {e}");
            1
        }
    }
}
