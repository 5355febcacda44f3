//! `nodecycle run <FUNCTION> --event <FILE>`

use nodecycle::handlers::{Function, HandlerError, Invocation};
use nodecycle::wiring::{InterruptionConfig, OpsConfig, RotatorConfig, Runtime, WatcherConfig};

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
/// `{"errorType", "errorMessage"}` and exits 1; exit 2 on an unreadable event file. The rotator
/// is routed as its Lambda routes it: an SQS event (fan-out work items) goes to the worker
/// (`{"batchItemFailures", "items"}`), a scheduled event to the dispatcher when
/// `NODECYCLE_WORK_QUEUE_URL` is set.
pub async fn run(args: Args) -> u8 {
    nodecycle::wiring::init_logging();
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
    // As Lambda invokes it, with the functions' timeout (template.yaml) as the deadline and
    // the CLI's request id and caller (as `nodecycle ops` records them).
    let origin = super::ops::local_origin();
    let inv = Invocation {
        request_id: Some(&origin.request_id),
        caller: origin.caller.as_deref(),
        ..Invocation::at(
            chrono::Utc::now(),
            std::time::Instant::now() + std::time::Duration::from_secs(300),
        )
    };
    let result = match function(&args.function).await {
        Ok(f) => f.invoke(&payload, inv).await,
        Err(e) => Err(e),
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

/// The functions [`function`] builds, by the names template.yaml deploys them under.
const FUNCTIONS: [&str; 4] = ["ami-watcher", "rotator", "ops", "interruption-handler"];

/// Function `name` (one of [`FUNCTIONS`]) as its `main` builds it, its configuration read from
/// the environment (the SDK's only once that is valid).
async fn function(name: &str) -> Result<Box<dyn Function>, HandlerError> {
    let local = Runtime::local;
    Ok(match name {
        "ami-watcher" => Box::new(WatcherConfig::from_env()?.watcher(&local().await)),
        "rotator" => Box::new(RotatorConfig::from_env()?.function(&local().await)),
        "ops" => Box::new(OpsConfig::from_env()?.ops(&local().await)),
        "interruption-handler" => Box::new(InterruptionConfig::from_env()?.handler(&local().await)),
        other => return Err(HandlerError::internal(format!("unknown function {other}"))),
    })
}
