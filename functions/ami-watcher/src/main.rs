//! ami-watcher Lambda: wiring only. The handler is `nodecycle::handlers::ami_watcher`; its
//! configuration is `nodecycle::wiring::WatcherConfig`.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use nodecycle::wiring::{Runtime, WatcherConfig};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    nodecycle::logging::init();
    let watcher = &WatcherConfig::from_env()?.watcher(&Runtime::lambda().await);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        watcher.handle(&event.payload, chrono::Utc::now()).await
    }))
    .await
}
