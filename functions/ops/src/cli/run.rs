//! `nodecycle run <FUNCTION> --event <FILE>`

use nodecycle::handlers::dispatch::PassContext;
use nodecycle::handlers::{FUNCTIONS, HandlerError};
use nodecycle::wiring;

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
    let now = chrono::Utc::now();
    // The Lambda's timeout (template.yaml) for the functions that watch their deadline.
    let deadline = || std::time::Instant::now() + std::time::Duration::from_secs(300);
    let result = match args.function.as_str() {
        "ami-watcher" => match wiring::WatcherConfig::from_env() {
            Ok(c) => {
                c.watcher(&wiring::Runtime::local().await)
                    .handle(&payload, now)
                    .await
            }
            Err(e) => Err(e),
        },
        "rotator" => match wiring::RotatorConfig::from_env() {
            Ok(c) => {
                let runtime = wiring::Runtime::local().await;
                let rotator = c.rotator(&runtime);
                // As the Lambda routes it: an SQS event (the work queue's event source) is
                // served item by item, a scheduled event dispatches when a work queue is set.
                let routed = c
                    .fan_out(&runtime)
                    .route(
                        &rotator,
                        &payload,
                        PassContext {
                            now,
                            deadline: deadline(),
                            request_id: Some("local"),
                        },
                    )
                    .await;
                match routed {
                    Some(out) => out,
                    None => rotator.handle(&payload, now, deadline()).await,
                }
            }
            Err(e) => Err(e),
        },
        "ops" => match wiring::OpsConfig::from_env() {
            Ok(c) => {
                c.ops(&wiring::Runtime::local().await)
                    .handle(&payload, &super::ops::local_invocation(), now)
                    .await
            }
            Err(e) => Err(e),
        },
        "interruption-handler" => match wiring::InterruptionConfig::from_env() {
            Ok(c) => {
                c.handler(&wiring::Runtime::local().await)
                    .handle(&payload, now, deadline())
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
