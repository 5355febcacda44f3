//! interruption-handler Lambda: wiring only. The handler is `nodecycle::handlers::interruption`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_runtime::{Diagnostic, Error, LambdaEvent, service_fn};
use serde_json::Value;

/// The invocation's deadline as an `Instant` (Lambda gives epoch milliseconds).
fn deadline_of(ctx: &lambda_runtime::Context) -> Instant {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let left = u128::from(ctx.deadline).saturating_sub(now_ms);
    Instant::now() + Duration::from_millis(u64::try_from(left).unwrap_or(0))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    nodecycle::logging::init();
    let config = nodecycle::aws::load_config().await;
    let handler = nodecycle::handlers::interruption::from_env(&config)?;
    let handler = &handler;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = deadline_of(&event.context);
        handler
            .handle(&event.payload, chrono::Utc::now(), deadline)
            .await
            .map_err(|e| Diagnostic {
                error_type: e.error_type,
                error_message: e.message,
            })
    }))
    .await
}
