//! `nodecycle run <FUNCTION> --event <FILE>`

use nodecycle::handlers::{FUNCTIONS, HandlerError};

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Function to run.
    #[arg(value_name = "FUNCTION", value_parser = clap::builder::PossibleValuesParser::new(FUNCTIONS))]
    function: String,
    /// Event payload (JSON file), e.g. events/scheduled-tick.json.
    #[arg(long, value_name = "FILE")]
    event: String,
}

/// Prints the handler's JSON response; on a handler error prints
/// `{"errorType", "errorMessage"}` and exits 1; exit 2 on an unreadable event file.
pub async fn run(args: Args) -> u8 {
    nodecycle::logging::init();
    let payload: serde_json::Value = match std::fs::read_to_string(&args.event)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("not JSON: {e}")))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{}: {e}", args.event);
            return 2;
        }
    };
    let config = nodecycle::aws::load_config().await;
    let now = chrono::Utc::now();
    let result = match args.function.as_str() {
        "ami-watcher" => match nodecycle::handlers::ami_watcher::from_env(&config) {
            Ok(w) => w.handle(&payload, now).await,
            Err(e) => Err(e),
        },
        "rotator" => match nodecycle::handlers::rotator::from_env(&config) {
            Ok(r) => {
                let budget = std::time::Duration::from_secs(300);
                r.handle(&payload, now, std::time::Instant::now() + budget)
                    .await
            }
            Err(e) => Err(e),
        },
        "ops" => match nodecycle::handlers::ops::from_env(&config) {
            Ok(o) => {
                o.handle(&payload, &super::ops::local_invocation(), now)
                    .await
            }
            Err(e) => Err(e),
        },
        "interruption-handler" => match nodecycle::handlers::interruption::from_env(&config) {
            Ok(h) => {
                // The Lambda's timeout (template.yaml).
                let budget = std::time::Duration::from_secs(300);
                h.handle(&payload, now, std::time::Instant::now() + budget)
                    .await
            }
            Err(e) => Err(e),
        },
        other => Err(HandlerError::internal(format!("unknown function {other}"))),
    };
    match result {
        Ok(v) => {
            super::print_json(&v);
            0
        }
        Err(e) => {
            super::print_json(
                &serde_json::json!({"errorType": e.error_type, "errorMessage": e.message}),
            );
            1
        }
    }
}
