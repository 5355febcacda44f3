//! `nodecycle budget <POLICY_FILE> [--at <INSTANT>] --nodes <N> [--disrupting <M>] [--reason <R>]`

use chrono::{DateTime, Utc};
use nodecycle::budget::{self, Reason};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Policy file (YAML or JSON).
    #[arg(value_name = "POLICY_FILE")]
    file: String,
    /// Instant to evaluate at: `now` (the default), RFC 3339 (2026-12-05T10:00:00+01:00), or a
    /// date and time without an offset, taken as UTC (2026-12-05T10:00, 2026-12-05 10:00:00).
    #[arg(long, value_parser = parse_instant)]
    at: Option<DateTime<Utc>>,
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

/// An instant as the CLI takes it (`--at`, `--from`, `--new-ami-at`): `now`, RFC 3339 with its
/// offset, or a date and time without one (`T` or a space between them, seconds optional),
/// which is UTC. The error shows the forms.
pub fn parse_instant(s: &str) -> Result<DateTime<Utc>, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("now") {
        return Ok(Utc::now());
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    for form in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, form) {
            return Ok(t.and_utc());
        }
    }
    Err(format!(
        "{s:?} is not an instant; expected now, RFC 3339 such as 2026-12-05T10:00:00Z or \
         2026-12-05T11:00:00+01:00, or 2026-12-05T10:00 (no offset: UTC)"
    ))
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
        args.at.unwrap_or_else(Utc::now),
    );
    match serde_json::to_value(&allowance) {
        Ok(v) => {
            match super::target::get().output_or(super::target::Output::Json) {
                super::target::Output::Json => println!("{v}"),
                other => super::output::print(&v, other, super::output::generic),
            }
            0
        }
        Err(e) => {
            eprintln!("nodecycle: cannot encode the result: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_take_now_an_offset_or_utc() {
        let utc = |s: &str| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .ok()
        };
        for (given, want) in [
            ("2026-12-05T10:00:00Z", "2026-12-05T10:00:00Z"),
            ("2026-12-05T11:00:00+01:00", "2026-12-05T10:00:00Z"),
            ("2026-12-05T10:00", "2026-12-05T10:00:00Z"),
            ("2026-12-05 10:00:30", "2026-12-05T10:00:30Z"),
        ] {
            assert_eq!(parse_instant(given).ok(), utc(want), "{given}");
        }
        let before = Utc::now();
        let now = parse_instant("now").unwrap_or_default();
        assert!(now >= before && now <= Utc::now());
        let e = parse_instant("yesterday").err().unwrap_or_default();
        assert!(
            e.contains("\"yesterday\"") && e.contains("no offset: UTC"),
            "{e}"
        );
    }
}
