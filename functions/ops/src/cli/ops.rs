//! Operator subcommands: `nodecycle status|rotate|pin|unpin|pause|resume|cancel|quarantine|
//! unquarantine|promotion|stop|start`. Each builds
//! the ops function's JSON request and runs the same handler in-process (AWS configuration of
//! the environment, `NODECYCLE_TABLE`). Validation is the handler's: every problem is listed.

use serde_json::{Value, json};

/// `nodecycle status [POOL] [--account A] [--region R]`
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// `<cluster>/<name>` or `<account>/<region>/<cluster>/<name>`; every pool when omitted.
    #[arg(value_name = "POOL")]
    pool: Option<String>,
    /// Only the pools of this account (12 digits; the cell's own pools are its account's).
    #[arg(long, value_name = "ACCOUNT")]
    account: Option<String>,
    /// Only the pools of this region.
    #[arg(long, value_name = "REGION")]
    region: Option<String>,
}

/// `nodecycle rotate POOL (--instance I... | --all) --reason R`
#[derive(Debug, clap::Args)]
pub struct RotateArgs {
    /// `<cluster>/<name>`.
    #[arg(value_name = "POOL")]
    pool: String,
    /// Instance to rotate (repeat for several).
    #[arg(long = "instance", value_name = "INSTANCE_ID")]
    instances: Vec<String>,
    /// Every in-service instance of the pool.
    #[arg(long)]
    all: bool,
    /// Why (required; written to the audit record).
    #[arg(long)]
    reason: Option<String>,
    /// Do not wait for disruption budgets (still counted as disrupting).
    #[arg(long)]
    ignore_budgets: bool,
    /// With --ignore-budgets: at most this many rotations at once (default 1).
    #[arg(long, value_name = "N")]
    max_concurrent: Option<u32>,
}

/// `nodecycle pin POOL AMI --reason R`
#[derive(Debug, clap::Args)]
pub struct PinArgs {
    /// `<cluster>/<name>`.
    #[arg(value_name = "POOL")]
    pool: String,
    /// `ami-...` (must exist, be available and match the pool's architecture).
    #[arg(value_name = "AMI")]
    ami: String,
    /// Why (required).
    #[arg(long)]
    reason: Option<String>,
}

/// `nodecycle unpin|pause|resume POOL --reason R`
#[derive(Debug, clap::Args)]
pub struct PoolArgs {
    /// `<cluster>/<name>`.
    #[arg(value_name = "POOL")]
    pool: String,
    /// Why (required).
    #[arg(long)]
    reason: Option<String>,
}

/// `nodecycle cancel POOL INSTANCE --reason R`
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// `<cluster>/<name>`.
    #[arg(value_name = "POOL")]
    pool: String,
    /// The instance whose rotation to abort.
    #[arg(value_name = "INSTANCE_ID")]
    instance: String,
    /// Why (required).
    #[arg(long)]
    reason: Option<String>,
}

/// `nodecycle quarantine|unquarantine (--ami AMI | --release RELEASE) --reason R`
#[derive(Debug, clap::Args)]
pub struct QuarantineArgs {
    /// One image, `ami-...`.
    #[arg(long, value_name = "AMI")]
    ami: Option<String>,
    /// Every image of a release: `v20241109` (AL2023/AL2), `1.26.0` (Bottlerocket), or an image
    /// id for pools on other terms.
    #[arg(long, value_name = "RELEASE")]
    release: Option<String>,
    /// Why (required; written to the audit record and the quarantine entry).
    #[arg(long)]
    reason: Option<String>,
}

/// `nodecycle stop|start --reason R`
#[derive(Debug, clap::Args)]
pub struct ReasonArgs {
    /// Why (required; written to the audit record and shown by status).
    #[arg(long)]
    reason: Option<String>,
}

/// The request of `nodecycle stop|start`.
pub fn switch_request(action: &str, a: ReasonArgs) -> Value {
    with_reason(json!({"action": action}), a.reason)
}

/// `nodecycle promotion RELEASE`
#[derive(Debug, clap::Args)]
pub struct PromotionArgs {
    /// `v20241109`, `1.26.0`, or an image id.
    #[arg(value_name = "RELEASE")]
    release: String,
}

fn with_reason(mut v: Value, reason: Option<String>) -> Value {
    if let (Some(o), Some(r)) = (v.as_object_mut(), reason) {
        o.insert("reason".into(), json!(r));
    }
    v
}

/// The request of `nodecycle status`.
pub fn status_request(a: StatusArgs) -> Value {
    let mut v = match a.pool {
        Some(p) => json!({"action": "status", "pool": p}),
        None => json!({"action": "status"}),
    };
    if let Some(o) = v.as_object_mut() {
        if let Some(account) = a.account {
            o.insert("account".into(), json!(account));
        }
        if let Some(region) = a.region {
            o.insert("region".into(), json!(region));
        }
    }
    v
}

/// The request of `nodecycle rotate`.
pub fn rotate_request(a: RotateArgs) -> Value {
    let mut v = json!({"action": "rotate", "pool": a.pool});
    if let Some(o) = v.as_object_mut() {
        if !a.instances.is_empty() {
            o.insert("instances".into(), json!(a.instances));
        }
        if a.all {
            o.insert("all".into(), json!(true));
        }
        if a.ignore_budgets {
            o.insert("ignoreBudgets".into(), json!(true));
        }
        if let Some(n) = a.max_concurrent {
            o.insert("maxConcurrent".into(), json!(n));
        }
    }
    with_reason(v, a.reason)
}

/// The request of `nodecycle pin`.
pub fn pin_request(a: PinArgs) -> Value {
    with_reason(
        json!({"action": "pin", "pool": a.pool, "ami": a.ami}),
        a.reason,
    )
}

/// The request of `nodecycle unpin|pause|resume`.
pub fn pool_request(action: &str, a: PoolArgs) -> Value {
    with_reason(json!({"action": action, "pool": a.pool}), a.reason)
}

/// The request of `nodecycle cancel`.
pub fn cancel_request(a: CancelArgs) -> Value {
    with_reason(
        json!({"action": "cancel", "pool": a.pool, "instance": a.instance}),
        a.reason,
    )
}

/// The request of `nodecycle quarantine|unquarantine`.
pub fn quarantine_request(action: &str, a: QuarantineArgs) -> Value {
    let mut v = json!({"action": action});
    if let Some(o) = v.as_object_mut() {
        if let Some(ami) = a.ami {
            o.insert("ami".into(), json!(ami));
        }
        if let Some(release) = a.release {
            o.insert("release".into(), json!(release));
        }
    }
    with_reason(v, a.reason)
}

/// The request of `nodecycle promotion`.
pub fn promotion_request(a: PromotionArgs) -> Value {
    json!({"action": "promotion", "release": a.release})
}

/// Who runs the CLI, for the audit record: `local:$USER`, as the shell says (self-asserted,
/// not an authenticated identity: the DynamoDB writes themselves are in CloudTrail under the
/// operator's credentials).
pub fn local_origin() -> nodecycle::handlers::ops::Origin {
    let now = chrono::Utc::now();
    nodecycle::handlers::ops::Origin {
        request_id: format!("cli-{}-{}", now.format("%Y%m%dT%H%M%S"), std::process::id()),
        caller: Some(format!(
            "local:{}",
            std::env::var("USER").unwrap_or_else(|_| "unknown".into())
        )),
    }
}

/// Runs one request through the ops handler: prints the response (exit 0), or
/// `{"errorType", "errorMessage"}` (exit 2 for `InvalidRequest`, 1 otherwise).
pub async fn run(request: Value) -> u8 {
    nodecycle::logging::init();
    let result = match nodecycle::wiring::OpsConfig::from_env() {
        Ok(c) => {
            let h = c.ops(&nodecycle::wiring::Runtime::local().await);
            h.handle(&request, &local_origin(), chrono::Utc::now())
                .await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(v) => {
            super::print_json(&v);
            0
        }
        Err(e) => {
            super::print_json(&json!({"errorType": e.error_type, "errorMessage": e.message}));
            if e.error_type == "InvalidRequest" {
                2
            } else {
                1
            }
        }
    }
}
