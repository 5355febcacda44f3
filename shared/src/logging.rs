//! Structured JSON logs: one line per event with named fields, to stderr (CloudWatch captures
//! it in Lambda; the CLI keeps stdout for its JSON result).
//!
//! Level: `AWS_LAMBDA_LOG_LEVEL` first (Lambda sets it from the function's LoggingConfig
//! `ApplicationLogLevel`, the template's `LogLevel`), then `NODECYCLE_LOG`, then `RUST_LOG`
//! (both take `target=level` directives separated by commas, e.g. `nodecycle=debug,warn`; span
//! and field filters are not supported), else `info`. A value that does not parse logs at
//! `info` and says so in the first log line.
//!
//! Whatever the directives say, nothing logs above DEBUG ([`MAX_LEVEL`]), and the targets that
//! log request signing, credentials or raw requests ([`SIGNING_TARGETS`]: at TRACE aws-sigv4
//! writes the EKS token presign's canonical request with the session token in clear, the SDK
//! runtime the whole request) log at INFO at most ([`capped`]). No credential part reaches a
//! log at any level (tested with a presign at the most verbose setting).

use tracing_subscriber::filter::{LevelFilter, Targets};

/// The most verbose level any target logs at.
pub const MAX_LEVEL: LevelFilter = LevelFilter::DEBUG;

/// Targets (and their submodules) that log signing inputs, credentials, or whole requests and
/// responses with their headers at DEBUG or TRACE; they log at INFO at most.
pub const SIGNING_TARGETS: &[&str] = &[
    "aws_sigv4",
    "aws_runtime",
    "aws_smithy_runtime",
    "aws_smithy_runtime_api",
    "aws_smithy_http_client",
    "aws_credential_types",
    "aws_config",
    "kube_client",
    "hyper",
    "hyper_util",
    "h2",
    "rustls",
];

/// The most verbose level on which `targets` enables `target`.
fn level_for(targets: &Targets, target: &str) -> LevelFilter {
    use tracing::Level;
    [
        Level::TRACE,
        Level::DEBUG,
        Level::INFO,
        Level::WARN,
        Level::ERROR,
    ]
    .into_iter()
    .find(|l| targets.would_enable(target, l))
    .map_or(LevelFilter::OFF, LevelFilter::from_level)
}

/// `targets` with every level at most [`MAX_LEVEL`] and every [`SIGNING_TARGETS`] target (and
/// any directive inside one) at most INFO; what is less verbose stays as it is.
pub fn capped(targets: &Targets) -> Targets {
    let cap = |target: &str, level: LevelFilter| {
        let sensitive = SIGNING_TARGETS
            .iter()
            .any(|s| target == *s || target.starts_with(&format!("{s}::")));
        level.min(if sensitive {
            LevelFilter::INFO
        } else {
            MAX_LEVEL
        })
    };
    let default = targets.default_level().unwrap_or(LevelFilter::OFF);
    let mut out = Targets::new().with_default(default.min(MAX_LEVEL));
    for (target, level) in targets.iter() {
        out = out.with_target(target, cap(target, level));
    }
    // A wider directive (the default, or `aws=trace`) must not reach into a signing target.
    for s in SIGNING_TARGETS {
        if !targets.iter().any(|(t, _)| t == *s) {
            out = out.with_target(*s, cap(s, level_for(targets, s)));
        }
    }
    out
}

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
pub fn targets(directives: &str) -> Result<Targets, String> {
    directives.parse().map_err(|e| {
        format!("log filter {directives:?} is not a list of target=level directives ({e}): logging at info")
    })
}

/// The JSON subscriber for `directives` (capped, [`capped`]) writing to `writer`, and why the
/// directives were refused when they were (it then logs at INFO).
pub fn subscriber<W>(
    directives: &str,
    writer: W,
) -> (impl tracing::Subscriber + Send + Sync, Option<String>)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;

    let (filter, problem) = match targets(directives) {
        Ok(t) => (capped(&t), None),
        Err(why) => (Targets::new().with_default(LevelFilter::INFO), Some(why)),
    };
    let json = tracing_subscriber::fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .with_ansi(false)
        .with_writer(writer);
    (
        tracing_subscriber::registry().with(json).with(filter),
        problem,
    )
}

/// Installs the global JSON subscriber once, to stderr, with `directives` (what
/// [`filter_from`] reads; the process environment's through `crate::wiring::init_logging`,
/// the one place that reads it); later calls are no-ops.
pub fn init(directives: &str) {
    use tracing_subscriber::util::SubscriberInitExt;

    let (subscriber, problem) = subscriber(directives, std::io::stderr);
    if subscriber.try_init().is_ok()
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
    fn no_target_logs_past_debug_and_signing_targets_past_info() {
        use tracing::Level;
        for directives in [
            "trace",
            "aws_sigv4=trace",
            "aws_sigv4::http_request=trace,info",
            "aws=trace,nodecycle=trace",
            "trace,aws_sigv4=trace,aws_smithy_runtime::client=trace",
            "kube_client=debug,hyper=trace",
        ] {
            let t = capped(&targets(directives).unwrap());
            for target in ["nodecycle::kube", "anything", "aws_sdk_eks"] {
                assert!(
                    !t.would_enable(target, &Level::TRACE),
                    "{directives}: {target}"
                );
            }
            for target in [
                "aws_sigv4",
                "aws_sigv4::http_request::sign",
                "aws_smithy_runtime::client::orchestrator",
                "kube_client::client",
                "hyper::proto",
            ] {
                assert!(
                    !t.would_enable(target, &Level::DEBUG),
                    "{directives}: {target}"
                );
            }
        }
        // What is less verbose than the caps stays as asked.
        let t = capped(&targets("nodecycle=debug,aws_sigv4=warn,error").unwrap());
        assert!(t.would_enable("nodecycle::plan", &Level::DEBUG));
        assert!(!t.would_enable("aws_sigv4", &Level::INFO));
        assert!(t.would_enable("aws_sigv4", &Level::WARN));
        assert!(!t.would_enable("aws_config", &Level::WARN));
        assert!(t.would_enable("aws_config", &Level::ERROR));
        // `aws_sigv4x` is not inside `aws_sigv4`.
        let t = capped(&targets("aws_sigv4x=debug").unwrap());
        assert!(t.would_enable("aws_sigv4x", &Level::DEBUG));
    }

    /// A writer that keeps what it is given.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    const SESSION_TOKEN: &str = "FakeSessionTokenForTheLogTest0123456789/abc+xyz==";

    /// Presigns an EKS token with [`SESSION_TOKEN`] under `subscriber`; returns what `out` got.
    fn presign_logged(
        subscriber: impl tracing::Subscriber + Send + Sync,
        out: &Captured,
    ) -> String {
        let credentials = aws_credential_types::Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            Some(SESSION_TOKEN.to_owned()),
            None,
            "test",
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "nodecycle::kube::token", "presigning");
            crate::kube::token::token(
                &credentials,
                "us-east-1",
                "prod",
                std::time::SystemTime::now(),
            )
            .unwrap();
        });
        out.text()
    }

    #[test]
    fn no_credential_part_reaches_a_log_at_the_most_verbose_setting() {
        let forms = [
            SESSION_TOKEN.to_owned(),
            // As the query string carries it.
            SESSION_TOKEN
                .replace('/', "%2F")
                .replace('+', "%2B")
                .replace('=', "%3D"),
            "FakeSessionTokenForTheLogTest".to_owned(),
            "wJalrXUtnFEMI".to_owned(),
        ];
        let lambda_trace = filter_from(env(&[("AWS_LAMBDA_LOG_LEVEL", "TRACE")]));
        for directives in ["trace", "trace,aws_sigv4=trace", lambda_trace.as_str()] {
            let out = Captured::default();
            let writer = out.clone();
            let (subscriber, problem) = subscriber(directives, move || writer.clone());
            assert_eq!(problem, None);
            let logged = presign_logged(subscriber, &out);
            assert!(
                logged.contains("presigning"),
                "{directives}: the capture works: {logged}"
            );
            for form in &forms {
                assert!(
                    !logged.contains(form.as_str()),
                    "{directives}: {form} logged:\n{logged}"
                );
            }
        }
        // Without the caps the same presign logs the session token (what this test guards).
        use tracing_subscriber::layer::SubscriberExt;
        let out = Captured::default();
        let writer = out.clone();
        let uncapped = tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(move || writer.clone()),
            )
            .with(targets("trace").unwrap());
        let logged = presign_logged(uncapped, &out);
        assert!(
            logged.contains(&forms[1]) || logged.contains(SESSION_TOKEN),
            "{logged}"
        );
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
