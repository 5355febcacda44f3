//! ops Lambda: wiring only. The handler is `nodecycle::handlers::ops`; its configuration is
//! `nodecycle::wiring::OpsConfig`. The audit's caller is the IAM identity a request's caller
//! proof verifies to (`nodecycle::wiring::serve_ops`).

use nodecycle::wiring::{OpsConfig, Runtime, serve_ops};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    nodecycle::wiring::init_logging();
    let config = OpsConfig::from_env()?;
    let runtime = Runtime::lambda().await;
    let name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_default();
    let callers = OpsConfig::callers(&runtime, &name)?;
    serve_ops(config.ops(&runtime), callers).await
}
