//! Structured JSON logs: one line per event with named fields, to stderr (CloudWatch captures
//! it in Lambda; the CLI keeps stdout for its JSON result). Level from `RUST_LOG` or
//! `NODECYCLE_LOG` (default `info`).

/// Installs the global JSON subscriber once; later calls are no-ops.
pub fn init() {
    let filter = std::env::var("NODECYCLE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .try_init();
}
