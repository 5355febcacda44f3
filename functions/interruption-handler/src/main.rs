//! interruption-handler Lambda: wiring only. The handler is `nodecycle::handlers::interruption`;
//! its configuration is `nodecycle::wiring::InterruptionConfig`.

use nodecycle::wiring::{InterruptionConfig, Runtime, serve};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    nodecycle::wiring::init_logging();
    serve(InterruptionConfig::from_env()?.handler(&Runtime::lambda().await)).await
}
