//! ops Lambda: wiring only. The handler is `nodecycle::handlers::ops`; its configuration is
//! `nodecycle::wiring::OpsConfig`. The audit's caller is what the invocation's client context
//! says (`nodecycle::wiring::serve`).

use nodecycle::wiring::{OpsConfig, Runtime, serve};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    nodecycle::logging::init();
    serve(OpsConfig::from_env()?.ops(&Runtime::lambda().await)).await
}
