//! rotator Lambda: wiring only. The handler is `nodecycle::handlers::rotator`; its
//! configuration is `nodecycle::wiring::RotatorConfig`.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodecycle::handlers::{deadline_from_epoch_ms, dispatch::PassContext};
use nodecycle::wiring::{RotatorConfig, Runtime};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    nodecycle::logging::init();
    let wiring = RotatorConfig::from_env()?;
    let runtime = Runtime::lambda().await;
    let rotator = &wiring.rotator(&runtime);
    // Fan-out: SQS work items are served, and the schedule dispatches when a queue is set.
    let fan_out = &wiring.fan_out(&runtime);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = deadline_from_epoch_ms(event.context.deadline);
        let request_id = event.context.request_id.as_str();
        let at = PassContext {
            now: chrono::Utc::now(),
            deadline,
            request_id: Some(request_id),
        };
        if let Some(out) = fan_out.route(rotator, &event.payload, at).await {
            return out;
        }
        rotator
            .handle_invocation(&event.payload, at.now, deadline, Some(request_id))
            .await
    }))
    .await
}
