//! ops Lambda: wiring only. The handler is `nodecycle::handlers::ops`; its configuration is
//! `nodecycle::wiring::OpsConfig`.
//!
//! Lambda does not tell a function which IAM principal invoked it (CloudTrail data events do).
//! The audit record takes the caller from the invocation context when the client sets it:
//! `--client-context` with `{"custom": {"caller": "..."}}`, or a Cognito identity; the request
//! id is recorded too, to correlate with CloudTrail.

use lambda_runtime::{Context, Error, LambdaEvent, service_fn};
use nodecycle::handlers::ops::Invocation;
use nodecycle::wiring::{OpsConfig, Runtime};
use serde_json::Value;

fn caller_of(ctx: &Context) -> Option<String> {
    ctx.client_context
        .as_ref()
        .and_then(|c| c.custom.get("caller").cloned())
        .or_else(|| {
            ctx.identity
                .as_ref()
                .map(|i| format!("cognito:{}", i.identity_id))
        })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    nodecycle::logging::init();
    let ops = &OpsConfig::from_env()?.ops(&Runtime::lambda().await);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let inv = Invocation {
            request_id: event.context.request_id.clone(),
            caller: caller_of(&event.context),
        };
        ops.handle(&event.payload, &inv, chrono::Utc::now()).await
    }))
    .await
}
