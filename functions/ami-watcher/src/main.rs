//! ami-watcher Lambda: wiring only. The handler is `nodecycle::handlers::ami_watcher`; its
//! configuration is `nodecycle::wiring::WatcherConfig`.

use nodecycle::wiring::{Runtime, WatcherConfig, serve};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    nodecycle::wiring::init_logging();
    serve(WatcherConfig::from_env()?.watcher(&Runtime::lambda().await)).await
}
