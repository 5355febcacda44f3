//! rotator Lambda: wiring only. The handler is `nodecycle::handlers::rotator`; its
//! configuration is `nodecycle::wiring::RotatorConfig`.

use lambda_runtime::{Diagnostic, Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    nodecycle::logging::init();
    let wiring = nodecycle::wiring::RotatorConfig::from_env()?;
    let sdk = nodecycle::aws::load_config().await;
    let mut rotator = wiring.rotator(&sdk);
    // Metrics as CloudWatch embedded metric format lines on stdout (the CLI prints none).
    rotator.metrics = std::sync::Arc::new(nodecycle::metrics::EmfStdout);
    let rotator = &rotator;
    // Fan-out: SQS work items are served, and the schedule dispatches when a queue is set.
    let fan_out = &wiring.fan_out(&sdk);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = nodecycle::handlers::deadline_from_epoch_ms(event.context.deadline);
        let at = nodecycle::handlers::dispatch::PassContext {
            now: chrono::Utc::now(),
            deadline,
            request_id: Some(event.context.request_id.as_str()),
        };
        if let Some(out) = fan_out.route(rotator, &event.payload, at).await {
            return out.map_err(|e| Diagnostic {
                error_type: e.error_type,
                error_message: e.message,
            });
        }
        rotator
            .handle_invocation(
                &event.payload,
                chrono::Utc::now(),
                deadline,
                Some(&event.context.request_id),
            )
            .await
            .map_err(|e| Diagnostic {
                error_type: e.error_type,
                error_message: e.message,
            })
    }))
    .await
}
