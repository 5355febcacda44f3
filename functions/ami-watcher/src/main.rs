//! ami-watcher Lambda: wiring only. The handler is `nodecycle::handlers::ami_watcher`; its
//! configuration is `nodecycle::wiring::WatcherConfig`.

use lambda_runtime::{Diagnostic, Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    nodecycle::logging::init();
    let wiring = nodecycle::wiring::WatcherConfig::from_env()?;
    let mut watcher = wiring.watcher(&nodecycle::aws::load_config().await);
    // Metrics as CloudWatch embedded metric format lines on stdout (the CLI prints none).
    watcher.metrics = std::sync::Arc::new(nodecycle::metrics::EmfStdout);
    let watcher = &watcher;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        watcher
            .handle(&event.payload, chrono::Utc::now())
            .await
            .map_err(|e| Diagnostic {
                error_type: e.error_type,
                error_message: e.message,
            })
    }))
    .await
}
