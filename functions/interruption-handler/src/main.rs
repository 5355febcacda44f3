//! interruption-handler Lambda: wiring only. The handler is `nodecycle::handlers::interruption`;
//! its configuration is `nodecycle::wiring::InterruptionConfig`.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodecycle::handlers::deadline_from_epoch_ms;
use nodecycle::wiring::{InterruptionConfig, Runtime};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    nodecycle::logging::init();
    let handler = &InterruptionConfig::from_env()?.handler(&Runtime::lambda().await);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline = deadline_from_epoch_ms(event.context.deadline);
        handler
            .handle(&event.payload, chrono::Utc::now(), deadline)
            .await
    }))
    .await
}
