//! interruption-handler Lambda: wiring only. The handler is `nodecycle::handlers::interruption`;
//! its configuration is `nodecycle::wiring::InterruptionConfig`.

use lambda_runtime::{Diagnostic, Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    nodecycle::logging::init();
    let wiring = nodecycle::wiring::InterruptionConfig::from_env()?;
    let mut handler = wiring.handler(&nodecycle::aws::load_config().await);
    // Metrics as CloudWatch embedded metric format lines on stdout (the CLI prints none).
    handler.metrics = std::sync::Arc::new(nodecycle::metrics::EmfStdout);
    let handler = &handler;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = nodecycle::handlers::deadline_from_epoch_ms(event.context.deadline);
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
