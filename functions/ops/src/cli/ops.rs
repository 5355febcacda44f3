//! Operator subcommands: `nodecycle status|rotate|pin|unpin|pause|resume|cancel|quarantine|
//! unquarantine|promotion|stop|start`. Each builds
//! the ops function's JSON request and runs the same handler in-process (AWS configuration of
//! the environment, `NODECYCLE_TABLE`). Validation is the handler's: every problem is listed.

use serde_json::{Value, json};

/// `nodecycle status [POOL] [--account A] [--pool-region R]`
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// `<cluster>/<name>` or `<account>/<region>/<cluster>/<name>`; every pool when omitted.
    #[arg(value_name = "POOL")]
    pool: Option<String>,
    /// Only the pools of this account (12 digits; the cell's own pools are its account's).
    #[arg(long, value_name = "ACCOUNT")]
    account: Option<String>,
    /// Only the pools of this region (a deployment serving several; `--region` is the
    /// deployment's own).
    #[arg(long = "pool-region", id = "pool_region", value_name = "REGION")]
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
    #[arg(long, required = true)]
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
    #[arg(long, required = true)]
    reason: Option<String>,
}

/// `nodecycle unpin|pause|resume POOL --reason R`
#[derive(Debug, clap::Args)]
pub struct PoolArgs {
    /// `<cluster>/<name>`.
    #[arg(value_name = "POOL")]
    pool: String,
    /// Why (required).
    #[arg(long, required = true)]
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
    #[arg(long, required = true)]
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
    #[arg(long, required = true)]
    reason: Option<String>,
}

/// `nodecycle stop|start --reason R`
#[derive(Debug, clap::Args)]
pub struct ReasonArgs {
    /// Why (required; written to the audit record and shown by status).
    #[arg(long, required = true)]
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

/// Who runs the CLI in-process (`--local`), for the audit record: `local:$USER`, as the shell
/// says (self-asserted, not an authenticated identity: the DynamoDB writes themselves are in
/// CloudTrail under the operator's credentials). Through the deployed function the caller is
/// the IAM identity STS verifies ([`nodecycle::aws::caller`]).
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

/// Where an operator command runs: the deployed ops function, or this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Invoke the function the stack's `OpsFunctionName` output names.
    Function(String),
    /// Run the handler in-process with the operator's credentials.
    Local,
}

/// The route for the process's target: `--local`, or no stack but `NODECYCLE_TABLE` set (the
/// in-process path of earlier versions), runs here; a stack invokes its ops function. The
/// error says how to select a deployment.
pub fn route(target: &super::target::Target) -> Result<Route, String> {
    let table_set = std::env::var(nodecycle::state::TABLE_ENV).is_ok_and(|t| !t.trim().is_empty());
    if target.local || (target.stack.is_none() && table_set) {
        return Ok(Route::Local);
    }
    match &target.outputs {
        Some(outputs) => outputs
            .get("OpsFunctionName")
            .filter(|f| !f.is_empty())
            .map(|f| Route::Function(f.clone()))
            .ok_or_else(|| {
                format!(
                    "stack {:?} has no OpsFunctionName output: is it a nodecycle stack? (--local runs in-process)",
                    target.stack.as_deref().unwrap_or_default()
                )
            }),
        None => Err("no deployment selected: run `nodecycle config use NAME --stack STACK --region REGION` once (or pass --stack STACK --region REGION); --local runs the ops code in this process with NODECYCLE_TABLE and your own credentials".into()),
    }
}

/// Runs one request through the ops handler, where [`route`] says: prints the response (exit
/// 0), or the error (`{"errorType", "errorMessage"}` with `-o json`; exit 2 for
/// `InvalidRequest`, 1 otherwise). `table` renders the answer for people.
pub async fn run(request: Value, table: fn(&Value) -> String) -> u8 {
    nodecycle::wiring::init_logging();
    let target = super::target::get();
    let result = match route(target) {
        Err(message) => Err(nodecycle::handlers::HandlerError {
            error_type: "Configuration".into(),
            message,
        }),
        Ok(Route::Local) => match nodecycle::wiring::OpsConfig::from_lookup(&super::target::env) {
            Ok(c) => match super::target::runtime().await {
                Ok(runtime) => {
                    c.ops(&runtime)
                        .handle(&request, &local_origin(), chrono::Utc::now())
                        .await
                }
                Err(message) => Err(nodecycle::handlers::HandlerError {
                    error_type: "Configuration".into(),
                    message,
                }),
            },
            Err(e) => Err(e),
        },
        Ok(Route::Function(name)) => invoke(&name, request).await,
    };
    let output = target.output_or(super::target::Output::Table);
    match result {
        Ok(v) => {
            super::output::print(&v, output, table);
            0
        }
        Err(e) => {
            let v = json!({"errorType": e.error_type, "errorMessage": e.message});
            if output == super::target::Output::Table {
                eprintln!("{}", super::output::generic(&v));
            } else {
                super::output::print(&v, output, super::output::generic);
            }
            if e.error_type == "InvalidRequest" {
                2
            } else {
                1
            }
        }
    }
}

/// Invokes the deployed ops function `name` with `request` and a caller proof
/// ([`nodecycle::aws::caller::proof`]) signed with the operator's credentials: the function's
/// answer, or its error (`errorType`, `errorMessage`), or why it could not be invoked, saying
/// what to fix.
async fn invoke(
    name: &str,
    mut request: Value,
) -> Result<Value, nodecycle::handlers::HandlerError> {
    use nodecycle::handlers::HandlerError;
    let failed = |error_type: &str, message: String| HandlerError {
        error_type: error_type.into(),
        message,
    };
    let sdk = super::target::sdk()
        .await
        .map_err(|m| failed("Configuration", m))?;
    let proof = nodecycle::aws::caller::proof(&sdk, name)
        .await
        .map_err(|m| failed("Configuration", m))?;
    if let Some(o) = request.as_object_mut() {
        o.insert(nodecycle::aws::caller::PROOF_FIELD.into(), json!(proof));
    }
    let client = aws_sdk_lambda::Client::new(&sdk);
    let out = client
        .invoke()
        .function_name(name)
        .payload(aws_sdk_lambda::primitives::Blob::new(request.to_string()))
        .send()
        .await
        .map_err(|e| {
            use aws_sdk_lambda::error::ProvideErrorMetadata as _;
            let chain = nodecycle::port::error_chain(&e);
            let message = match e.code() {
                Some("AccessDeniedException") => format!(
                    "you may not invoke {name}: your identity needs lambda:InvokeFunction on it ({})",
                    e.message().unwrap_or_default()
                ),
                Some("ResourceNotFoundException") => format!(
                    "the ops function {name} does not exist in {}: is the stack deployed there?",
                    sdk.region().map(ToString::to_string).unwrap_or_default()
                ),
                Some(code) => format!("lambda:Invoke {name} failed: {code}: {}", e.message().unwrap_or_default()),
                None => match nodecycle::port::credentials_hint(&chain) {
                    Some(hint) => format!("{hint} ({chain})"),
                    None => format!("cannot invoke {name}: {chain}; check the region and your network (AWS_ENDPOINT_URL if you set one)"),
                },
            };
            failed("Invoke", message)
        })?;
    let body: Value = out
        .payload()
        .map(|p| serde_json::from_slice(p.as_ref()))
        .transpose()
        .map_err(|e| {
            failed(
                "Invoke",
                format!("{name} answered with something that is not JSON: {e}"),
            )
        })?
        .unwrap_or(Value::Null);
    if out.function_error().is_some() {
        return Err(HandlerError {
            error_type: body["errorType"]
                .as_str()
                .unwrap_or("Unhandled")
                .to_string(),
            message: body["errorMessage"]
                .as_str()
                .map_or_else(|| body.to_string(), str::to_string),
        });
    }
    Ok(body)
}
