//! Structured JSON logs: one line per event with named fields, to stderr (CloudWatch captures
//! it in Lambda; the CLI keeps stdout for its JSON result).
//!
//! Level: `AWS_LAMBDA_LOG_LEVEL` first (Lambda sets it from the function's LoggingConfig
//! `ApplicationLogLevel`, the template's `LogLevel`), then `NODECYCLE_LOG`, then `RUST_LOG`
//! (both take `target=level` directives separated by commas, e.g. `nodecycle=debug,warn`; span
//! and field filters are not supported), else `info`. A value that does not parse logs at
//! `info` and says so in the first log line.

/// Lambda's application log levels as `tracing` filters (`FATAL` has no `tracing` level of its
/// own: `error`). `None` for anything else.
fn lambda_level(level: &str) -> Option<&'static str> {
    match level.trim().to_ascii_uppercase().as_str() {
        "TRACE" => Some("trace"),
        "DEBUG" => Some("debug"),
        "INFO" => Some("info"),
        "WARN" => Some("warn"),
        "ERROR" | "FATAL" => Some("error"),
        _ => None,
    }
}

/// The filter directives for the environment seen through `var`: a recognised
/// `AWS_LAMBDA_LOG_LEVEL`, else a non-empty `NODECYCLE_LOG`, else a non-empty `RUST_LOG`, else
/// `info`.
pub fn filter_from(var: impl Fn(&str) -> Option<String>) -> String {
    if let Some(level) = var("AWS_LAMBDA_LOG_LEVEL")
        .as_deref()
        .and_then(lambda_level)
    {
        return level.to_string();
    }
    ["NODECYCLE_LOG", "RUST_LOG"]
        .into_iter()
        .filter_map(&var)
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "info".to_string())
}

/// The per-target levels of `directives`, or why they do not parse.
pub fn targets(directives: &str) -> Result<tracing_subscriber::filter::Targets, String> {
    directives.parse().map_err(|e| {
        format!("log filter {directives:?} is not a list of target=level directives ({e}): logging at info")
    })
}

/// Installs the global JSON subscriber once, with the level of [`filter_from`] the process
/// environment; later calls are no-ops.
pub fn init() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let directives = filter_from(|name| std::env::var(name).ok());
    let (filter, problem) = match targets(&directives) {
        Ok(t) => (t, None),
        Err(why) => (
            tracing_subscriber::filter::Targets::new()
                .with_default(tracing_subscriber::filter::LevelFilter::INFO),
            Some(why),
        ),
    };
    let json = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::io::stderr);
    if tracing_subscriber::registry()
        .with(json)
        .with(filter)
        .try_init()
        .is_ok()
        && let Some(why) = problem
    {
        tracing::warn!(problem = %why, "logging");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn lambda_application_log_level_wins() {
        for (lambda, expected) in [
            ("TRACE", "trace"),
            ("DEBUG", "debug"),
            ("INFO", "info"),
            ("WARN", "warn"),
            ("ERROR", "error"),
            ("FATAL", "error"),
        ] {
            let f = filter_from(env(&[
                ("AWS_LAMBDA_LOG_LEVEL", lambda),
                ("NODECYCLE_LOG", "trace"),
                ("RUST_LOG", "trace"),
            ]));
            assert_eq!(f, expected, "{lambda}");
        }
    }

    #[test]
    fn unknown_lambda_level_falls_back_to_nodecycle_log_then_rust_log() {
        let f = filter_from(env(&[
            ("AWS_LAMBDA_LOG_LEVEL", "VERBOSE"),
            ("NODECYCLE_LOG", "nodecycle=debug,warn"),
        ]));
        assert_eq!(f, "nodecycle=debug,warn");
        let f = filter_from(env(&[("NODECYCLE_LOG", ""), ("RUST_LOG", "warn")]));
        assert_eq!(f, "warn");
        assert_eq!(filter_from(env(&[])), "info");
    }

    #[test]
    fn directives_parse_into_per_target_levels_and_bad_ones_say_why() {
        use tracing::Level;
        let t = targets("nodecycle=debug,warn").expect("valid");
        assert!(t.would_enable("nodecycle::plan", &Level::DEBUG));
        assert!(!t.would_enable("aws_smithy_runtime", &Level::INFO));
        assert!(t.would_enable("aws_smithy_runtime", &Level::WARN));
        let t = targets("info").expect("valid");
        assert!(t.would_enable("anything", &Level::INFO));
        assert!(!t.would_enable("anything", &Level::DEBUG));
        let why = targets("nodecycle=loud").expect_err("not a level");
        assert!(why.contains("nodecycle=loud"), "{why}");
    }

    #[test]
    fn every_mapped_level_is_a_valid_filter() {
        for level in ["TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"] {
            let f = filter_from(env(&[("AWS_LAMBDA_LOG_LEVEL", level)]));
            assert!(
                f.parse::<tracing_subscriber::filter::LevelFilter>().is_ok(),
                "{f}"
            );
        }
    }
}
