//! rotator Lambda: wiring only. The function is `nodecycle::handlers::dispatch::RotatorFunction`
//! (an SQS event is served item by item, a schedule dispatched when a work queue is set, else
//! the rotator's pass); its configuration is `nodecycle::wiring::RotatorConfig`.

use nodecycle::wiring::{RotatorConfig, Runtime, serve};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    nodecycle::wiring::init_logging();
    serve(RotatorConfig::from_env()?.function(&Runtime::lambda().await)).await
}
