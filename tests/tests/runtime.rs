//! The four function binaries run as Lambda runs them: started under the Runtime API emulator
//! (`nodecycle_tests::RuntimeApi`) with the environment template.yaml gives each (read from the
//! template, so the two cannot drift), invoked with the events their rules deliver (`events/`)
//! against the fake cloud. Each answers as `nodecycle run` does, reports a bad event as an error
//! invocation (`errorType`, `errorMessage`), records the caller a client context names, and serves the next invocation in the same process;
//! the rotator starts no step when the deadline leaves too little time, and the next invocation
//! does the work.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::support;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nodecycle_tests::{FakeCloud, Outcome, RuntimeApi, SyncNodes};
use serde_json::{Value, json};
use support::*;

const TABLE: &str = "nodecycle-runtime";
/// Upper bound on waiting for an answer: a hang guard, not a timing assertion.
const WAIT: Duration = Duration::from_secs(120);

fn target_dir() -> PathBuf {
    // target/<profile>/deps/runtime-<hash> -> target/<profile>
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A `!Ref` in the template as the stack would resolve it here: the table we created, else the
/// parameter's default.
fn resolve(template: &serde_norway::Value, v: &serde_norway::Value) -> String {
    match v {
        serde_norway::Value::String(s) => s.clone(),
        serde_norway::Value::Number(n) => n.to_string(),
        serde_norway::Value::Tagged(t) if t.tag == "Ref" => {
            let name = t.value.as_str().unwrap();
            if name == "StateTable" {
                return TABLE.to_string();
            }
            let default = &template["Parameters"][name]["Default"];
            match default {
                serde_norway::Value::String(s) => s.clone(),
                serde_norway::Value::Number(n) => n.to_string(),
                other => panic!("parameter {name} has no usable default: {other:?}"),
            }
        }
        // `!Sub "<text>"`: pseudo parameters as in the test region, parameters at their defaults.
        serde_norway::Value::Tagged(t) if t.tag == "Sub" => {
            let mut text = t.value.as_str().unwrap().to_string();
            while let Some(start) = text.find("${") {
                let end = start + text[start..].find('}').unwrap();
                let name = text[start + 2..end].to_string();
                let value = match name.as_str() {
                    "AWS::Partition" => "aws".to_string(),
                    "AWS::Region" => nodecycle_tests::DEFAULT_REGION.to_string(),
                    _ => resolve(template, &template["Parameters"][name.as_str()]["Default"]),
                };
                text.replace_range(start..=end, &value);
            }
            text
        }
        // `!Join [",", !Ref <list parameter>]`: the default as given (comma-separated).
        serde_norway::Value::Tagged(t) if t.tag == "Join" => {
            let list = &t.value[1];
            match list {
                serde_norway::Value::Tagged(r) if r.tag == "Ref" => resolve(template, list),
                other => panic!("unsupported !Join of {other:?}"),
            }
        }
        other => panic!("unsupported environment value {other:?}"),
    }
}

/// An environment variable's value, or `None` for `!If [<condition>, <value>, !Ref AWS::NoValue]`
/// whose condition (`!Equals [!Ref <parameter>, <literal>]`) is false for the defaults.
fn variable(template: &serde_norway::Value, v: &serde_norway::Value) -> Option<String> {
    let serde_norway::Value::Tagged(t) = v else {
        return Some(resolve(template, v));
    };
    if t.tag != "If" {
        return Some(resolve(template, v));
    }
    let name = t.value[0].as_str().unwrap();
    let serde_norway::Value::Tagged(cond) = &template["Conditions"][name] else {
        panic!("condition {name}: expected !Equals [!Ref <parameter>, <literal>]");
    };
    assert_eq!(cond.tag, "Equals", "condition {name}");
    let holds = resolve(template, &cond.value[0]) == resolve(template, &cond.value[1]);
    if holds {
        Some(resolve(template, &t.value[1]))
    } else {
        None
    }
}

/// (binary, environment) of function resource `function` as template.yaml declares it: the
/// Globals' variables, the function's own, the memory size and log level Lambda sets.
fn function_env(function: &str) -> (String, Vec<(String, String)>) {
    let text = std::fs::read_to_string(nodecycle_tests::repo_path("template.yaml")).unwrap();
    let t: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let f = &t["Resources"][function];
    let binary = f["Metadata"]["BuildProperties"]["Binary"]
        .as_str()
        .unwrap()
        .to_string();
    let mut env = Vec::new();
    for vars in [
        &t["Globals"]["Function"]["Environment"]["Variables"],
        &f["Properties"]["Environment"]["Variables"],
    ] {
        if let Some(map) = vars.as_mapping() {
            for (k, v) in map {
                if let Some(v) = variable(&t, v) {
                    env.push((k.as_str().unwrap().to_string(), v));
                }
            }
        }
    }
    let memory = f["Properties"]
        .get("MemorySize")
        .unwrap_or(&t["Globals"]["Function"]["MemorySize"]);
    env.push((
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(),
        resolve(&t, memory),
    ));
    env.push((
        "AWS_LAMBDA_LOG_LEVEL".into(),
        resolve(
            &t,
            &t["Globals"]["Function"]["LoggingConfig"]["ApplicationLogLevel"],
        ),
    ));
    (binary, env)
}

/// A function process under the emulator; killed on drop. Its stdout (EMF lines) is kept.
struct Function {
    api: RuntimeApi,
    child: Child,
    stdout: Arc<Mutex<String>>,
}

impl Function {
    fn start(cloud: &FakeCloud, function: &str) -> Function {
        let (binary, env) = function_env(function);
        let api = RuntimeApi::start();
        let path = target_dir().join(&binary);
        assert!(path.exists(), "{} not built", path.display());
        let mut child = Command::new(&path)
            .envs(cloud.env_vars())
            .envs(env)
            .env("AWS_LAMBDA_RUNTIME_API", api.addr())
            .env("AWS_LAMBDA_FUNCTION_NAME", format!("nodecycle-{binary}"))
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{binary}"))
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/30/[$LATEST]0")
            .env_remove("AWS_PROFILE")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stdout.take().unwrap();
        let sink = stdout.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Function { api, child, stdout }
    }

    fn invoke(&self, event: &Value, timeout: Duration) -> Outcome {
        self.api
            .invoke(event, timeout, WAIT)
            .unwrap_or_else(|| panic!("no answer within {WAIT:?} to {event}"))
    }

    fn response(&self, event: &Value) -> Value {
        match self.invoke(event, Duration::from_secs(300)) {
            Outcome::Response(v) => v,
            Outcome::Error(e) => panic!("error invocation for {event}: {e}"),
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// EMF documents printed so far.
    fn metrics(&self) -> Vec<Value> {
        self.stdout
            .lock()
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|d| d.get("_aws").is_some())
            .collect()
    }
}

impl Drop for Function {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn event(name: &str) -> Value {
    let text =
        std::fs::read_to_string(nodecycle_tests::repo_path(&format!("events/{name}"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `nodecycle run <function> --event <file>` against the same cloud and table.
fn run_cli(cloud: &FakeCloud, function: &str, event: &Value) -> Value {
    let out = run_nodecycle(&target_dir().join("nodecycle"), cloud, function, event, &[]);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `<bin> run <function> --event <file>` (the `nodecycle` CLI of this version or another)
/// against `cloud`, with the environment template.yaml gives the function and `extra`
/// variables over it.
pub(crate) fn run_nodecycle(
    bin: &std::path::Path,
    cloud: &FakeCloud,
    function: &str,
    event: &Value,
    extra: &[(&str, &str)],
) -> std::process::Output {
    // One file per call: the tests of this binary run concurrently in one process.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let file = std::env::temp_dir().join(format!(
        "nodecycle-runtime-{}-{}-{function}.json",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, event.to_string()).unwrap();
    let (_, env) = function_env(match function {
        "ami-watcher" => "AmiWatcherFunction",
        "rotator" => "RotatorFunction",
        "interruption-handler" => "InterruptionHandlerFunction",
        _ => "OpsFunction",
    });
    let out = Command::new(bin)
        .args(["run", function, "--event", file.to_str().unwrap()])
        .envs(cloud.env_vars())
        .envs(env)
        .env("NODECYCLE_LOG", "error")
        .envs(extra.iter().copied())
        .env_remove("AWS_LAMBDA_LOG_LEVEL")
        .env_remove("AWS_PROFILE")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    out
}

/// A cluster with one self-managed pool of 3 nodes on AL2023 v20240807: the adapters, the
/// image and the cluster's Kubernetes stand-in.
async fn world(cloud: &FakeCloud) -> (Adapters, String, nodecycle_tests::KubeStandIn) {
    cloud.create_cluster("prod", "1.30");
    let kube = cloud.create_kube("prod");
    let published = publish_al2023(cloud, "1.30", "v20240807", "2024-08-07T00:00:00Z");
    let old = id_of(&published, "x86_64", "standard");
    let a = Adapters::new(cloud).await;
    a.create_group("prod-general", &old, "m5.large", 3, 6, Some("prod"))
        .await;
    kube.sync_nodes(SyncNodes {
        asg: Some("prod-general".into()),
        ..SyncNodes::default()
    });
    cloud.put_parameter(
        "/nodecycle/pools/prod/general",
        "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\narchitecture: x86_64\namiSelectorTerms:\n  - alias: al2023@latest\ndisruption:\n  budgets:\n    - nodes: \"1\"\nterminationGracePeriod: 1m\n",
    );
    a.table(TABLE).await;
    kube.wait_for("initial nodes", Duration::from_secs(30), |s| {
        (s.nodes.len() == 3).then_some(())
    });
    (a, old, kube)
}

/// Each function answers the event its rule delivers exactly as `nodecycle run` does, and
/// prints its metrics as EMF.
#[tokio::test]
async fn each_function_answers_its_events_as_nodecycle_run_does() {
    let cloud = FakeCloud::start();
    let (_a, old, _kube) = world(&cloud).await;

    let watcher = Function::start(&cloud, "AmiWatcherFunction");
    let got = watcher.response(&event("scheduled-tick.json"));
    assert_eq!(got["trigger"], "schedule", "{got}");
    assert_eq!(got["pools"][0]["desired"], old.as_str(), "{got}");
    let cli = run_cli(&cloud, "ami-watcher", &event("scheduled-tick.json"));
    assert_eq!(
        (
            &cli["trigger"],
            &cli["pools"][0]["pool"],
            &cli["pools"][0]["desired"]
        ),
        (
            &got["trigger"],
            &got["pools"][0]["pool"],
            &got["pools"][0]["desired"]
        )
    );
    assert!(
        watcher
            .metrics()
            .iter()
            .any(|d| d["ResolutionFailures"] == 0.0 && d.get("Pool").is_none()),
        "EMF: {:?}",
        watcher.metrics()
    );

    let rotator = Function::start(&cloud, "RotatorFunction");
    let got = rotator.response(&event("scheduled-tick.json"));
    assert_eq!(got["clusters"]["prod"], "done", "{got}");
    let cli = run_cli(&cloud, "rotator", &event("scheduled-tick.json"));
    assert_eq!(cli["clusters"], got["clusters"]);
    assert_eq!(cli["pools"][0]["pool"], got["pools"][0]["pool"]);
    assert_eq!(cli["pools"][0]["allowed"], got["pools"][0]["allowed"]);
    assert!(
        rotator
            .metrics()
            .iter()
            .any(|d| d["PoolsHalted"] == 0.0 && d["Pools"] == 1.0 && d.get("Pool").is_none())
    );

    // The same warning twice under different event ids (the second would be a duplicate).
    let handler = Function::start(&cloud, "InterruptionHandlerFunction");
    let mut warning = event("spot-interruption-warning.json");
    let got = handler.response(&warning);
    warning["id"] = json!("7f1d3a2b-0000-4000-8000-000000000002");
    let cli = run_cli(&cloud, "interruption-handler", &warning);
    assert_eq!(cli["kind"], got["kind"], "{cli} vs {got}");
    let actions = |v: &Value| -> Vec<Value> {
        v["outcomes"]
            .as_array()
            .map(|o| o.iter().map(|x| x["action"].clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(actions(&cli), actions(&got), "{cli} vs {got}");

    let ops = Function::start(&cloud, "OpsFunction");
    let request = json!({"action": "status", "pool": "prod/general"});
    let got = ops.response(&request);
    let cli = run_cli(&cloud, "ops", &request);
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(keys(&cli), keys(&got), "{cli} vs {got}");
    assert!(ops.metrics().is_empty(), "ops prints no metrics");
}

/// The ops function records who asked as the invocation's client context names them (the
/// CLI's `--client-context`), beside Lambda's request id.
#[tokio::test]
async fn the_ops_function_records_the_caller_its_client_context_names() {
    let cloud = FakeCloud::start();
    let _world = world(&cloud).await;
    let ops = Function::start(&cloud, "OpsFunction");
    let pause = json!({"action": "pause", "pool": "prod/general", "reason": "change freeze"});
    let context = json!({"custom": {"caller": "arn:aws:iam::123456789012:user/alice"}});
    let got = match ops
        .api
        .invoke_with(&pause, Some(&context), Duration::from_secs(300), WAIT)
    {
        Some(Outcome::Response(v)) => v,
        other => panic!("pause: {other:?}"),
    };
    assert_eq!(got["changed"], true, "{got}");
    assert!(
        got["requestId"]
            .as_str()
            .is_some_and(|id| id.starts_with("00000000-0000-4000-8000-")),
        "the request id is Lambda's: {got}"
    );
    let status = ops.response(&json!({"action": "status", "pool": "prod/general"}));
    // Claimed, not proven: marked as such.
    assert_eq!(
        status["pools"][0]["paused"]["caller"], "unverified:arn:aws:iam::123456789012:user/alice",
        "{status}"
    );
}

/// Stack `name` as a deployment's stack shows itself to the CLI: its outputs (table, policy
/// prefix, ops function).
async fn stack(cloud: &FakeCloud, name: &str, ops_function: &str) {
    let config = cloud.sdk_config().await;
    let outputs = json!({
        "StateTableName": {"Value": TABLE},
        "PolicyPrefix": {"Value": "/nodecycle/pools/"},
        "OpsFunctionName": {"Value": ops_function},
    });
    let template = json!({
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": outputs,
    });
    aws_sdk_cloudformation::Client::new(&config)
        .create_stack()
        .stack_name(name)
        .template_body(template.to_string())
        .send()
        .await
        .unwrap();
}

/// A home directory as an operator's laptop has it: `~/.aws` with the credentials of role
/// `operator` assumed as session `alice`, and the endpoints of the fake cloud (moto for every
/// service, the Runtime API emulator for Lambda) in the profile, so the CLI needs no
/// environment variable.
async fn operator_home(cloud: &FakeCloud, lambda: &str) -> PathBuf {
    let arn = cloud.control(
        "create_role",
        json!({"account": "123456789012", "name": "operator"}),
    )["arn"]
        .as_str()
        .unwrap()
        .to_string();
    let config = cloud.sdk_config().await;
    let assumed = aws_sdk_sts::Client::new(&config)
        .assume_role()
        .role_arn(&arn)
        .role_session_name("alice")
        .send()
        .await
        .unwrap();
    let c = assumed.credentials().unwrap();
    static HOMES: AtomicUsize = AtomicUsize::new(0);
    let home = std::env::temp_dir().join(format!(
        "nodecycle-home-{}-{}",
        std::process::id(),
        HOMES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\naws_session_token = {}\n",
            c.access_key_id(),
            c.secret_access_key(),
            c.session_token()
        ),
    )
    .unwrap();
    std::fs::write(
        home.join(".aws/config"),
        format!(
            "[default]\nendpoint_url = {}\nservices = fake\n\n[services fake]\nlambda =\n  endpoint_url = http://{lambda}\n",
            cloud.aws_url()
        ),
    )
    .unwrap();
    home
}

/// `nodecycle ARGS` with only `HOME` (and `PATH`) set: what the CLI reads is the config file
/// and `~/.aws`. Exit code, stdout, stderr; no message carries Rust debug text.
fn operator(home: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(target_dir().join("nodecycle"))
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    for debug in ["DispatchFailure(", "Some(", "ConnectorError {"] {
        assert!(
            !stdout.contains(debug) && !stderr.contains(debug),
            "{args:?} printed Rust debug text {debug}: {stdout}{stderr}"
        );
    }
    (out.status.code(), stdout, stderr)
}

/// With a context and no environment variable, `status` prints a table, `pause` goes through
/// the deployed ops function (`lambda:Invoke`, the request carrying a caller proof), and the
/// audit record names the IAM identity STS verified: the operator's assumed role session. A
/// proof signed for another function is refused and nothing changes.
#[tokio::test]
async fn the_cli_invokes_the_ops_function_which_audits_the_callers_iam_identity() {
    let cloud = FakeCloud::start();
    let (a, _, _kube) = world(&cloud).await;
    let ops = Function::start(&cloud, "OpsFunction");
    ops.api.serve_invoke("nodecycle-ops");
    ops.api.serve_invoke("alias-of-ops");
    stack(&cloud, "nodecycle", "nodecycle-ops").await;
    stack(&cloud, "aliased", "alias-of-ops").await;
    let home = operator_home(&cloud, ops.api.addr()).await;
    let assumed = "arn:aws:sts::123456789012:assumed-role/operator/alice";

    let (code, out, err) = operator(
        &home,
        &[
            "config",
            "use",
            "prod",
            "--stack",
            "nodecycle",
            "--region",
            "us-east-2",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = operator(
        &home,
        &["pause", "prod/general", "--reason", "change freeze"],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("changed: yes"), "a table, not JSON: {out}");
    assert_eq!(ops.api.invokes().len(), 1, "through the function");

    let (code, out, err) = operator(&home, &["status"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let header = out.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("POOL") && header.contains("STATE"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("prod/general"))
        .unwrap_or_default();
    assert!(
        row.contains(&format!("paused by {assumed}: change freeze")),
        "{out}"
    );
    assert!(
        serde_json::from_str::<Value>(&out).is_err(),
        "a table: {out}"
    );

    // The audit record of the pause names the verified identity, and holds no proof.
    use nodecycle::state::Store as _;
    let audit = a
        .table(TABLE)
        .await
        .query("POOL#prod/general", "AUDIT#")
        .await
        .unwrap();
    let pause: Vec<&Value> = audit
        .iter()
        .map(|(_, v)| &v.value)
        .filter(|v| v.to_string().contains("change freeze"))
        .collect();
    assert_eq!(pause.len(), 1, "{audit:?}");
    assert!(pause[0].to_string().contains(assumed), "{}", pause[0]);
    assert!(
        !pause[0].to_string().contains("nodecycle-caller-v1."),
        "{}",
        pause[0]
    );

    // JSON for scripts is the function's answer, unchanged.
    let (code, out, _) = operator(&home, &["status", "prod/general", "-o", "json"]);
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["pools"][0]["paused"]["caller"], assumed, "{v}");

    // A proof for another function name does not verify there: refused, nothing done.
    let (code, out, err) = operator(
        &home,
        &[
            "resume",
            "prod/general",
            "--reason",
            "go",
            "--stack",
            "aliased",
            "--region",
            "us-east-2",
        ],
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("Unauthenticated") && err.contains("SignatureDoesNotMatch"),
        "{err}"
    );
    let (_, out, _) = operator(&home, &["status", "prod/general", "-o", "json"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["pools"][0]["paused"]["caller"], assumed,
        "still paused: {v}"
    );

    // A forged proof is refused before the handler sees the request.
    let forged = json!({"action": "resume", "pool": "prod/general", "reason": "go",
                        "callerProof": "nodecycle-caller-v1.aHR0cHM6Ly9ldmlsLmV4YW1wbGUv"});
    match ops.invoke(&forged, Duration::from_secs(300)) {
        Outcome::Error(e) => {
            assert_eq!(e["errorType"], "Unauthenticated", "{e}");
            assert!(
                e["errorMessage"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("STS endpoint"),
                "{e}"
            );
        }
        other => panic!("forged proof served: {other:?}"),
    }
}

/// What the CLI says when it cannot act: each message names what to set, none carries Rust
/// debug text.
#[tokio::test]
async fn cli_errors_say_what_to_set() {
    let cloud = FakeCloud::start();
    let empty = std::env::temp_dir().join(format!("nodecycle-empty-home-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    // No deployment selected.
    let (code, _, err) = operator(&empty, &["status"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("nodecycle config use"), "{err}");
    // A stack but no region.
    let (code, _, err) = operator(&empty, &["status", "--stack", "nodecycle"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--region") && err.contains("AWS_REGION"),
        "{err}"
    );
    // An unknown context.
    let (code, _, err) = operator(&empty, &["status", "--context", "prod"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("config use prod"), "{err}");
    // No credentials anywhere (the endpoint is reachable).
    let home = std::env::temp_dir().join(format!("nodecycle-nocreds-home-{}", std::process::id()));
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/config"),
        format!("[default]\nendpoint_url = {}\n", cloud.aws_url()),
    )
    .unwrap();
    let (code, _, err) = operator(
        &home,
        &["status", "--stack", "nodecycle", "--region", "us-east-2"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("AWS_PROFILE") && err.contains("AWS_ACCESS_KEY_ID"),
        "{err}"
    );
    // A stack that does not exist there.
    let with_creds = operator_home(&cloud, "127.0.0.1:9").await;
    let (code, _, err) = operator(
        &with_creds,
        &["status", "--stack", "absent", "--region", "us-east-2"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("\"absent\" does not exist in us-east-2"),
        "{err}"
    );
    // plan without a region says so (it said "cluster ... unreachable").
    let policy = std::env::temp_dir().join(format!("nodecycle-plan-{}.yaml", std::process::id()));
    std::fs::write(&policy, "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: g }\namiSelectorTerms:\n  - alias: al2023@latest\n").unwrap();
    let (code, out, err) = operator(&with_creds, &["plan", policy.to_str().unwrap(), "--local"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("no AWS region") && out.contains("--region"),
        "{out}{err}"
    );
}

/// A bad event is an error invocation as Lambda records it, and the same process serves the
/// next one (warm).
#[tokio::test]
async fn a_bad_event_is_an_error_invocation_and_the_process_serves_on() {
    let cloud = FakeCloud::start();
    let _world = world(&cloud).await;
    let cases = [
        (
            "AmiWatcherFunction",
            json!({"detail-type": "Parameter Store Change", "source": "aws.ssm", "detail": {"operation": "Update"}}),
            event("scheduled-tick.json"),
        ),
        (
            "RotatorFunction",
            json!({"clusters": "prod"}),
            event("scheduled-tick.json"),
        ),
        (
            "InterruptionHandlerFunction",
            json!({"detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2", "detail": {}}),
            event("instance-state-change.json"),
        ),
        (
            "OpsFunction",
            json!({"action": "explode"}),
            json!({"action": "status"}),
        ),
    ];
    for (function, bad, good) in cases {
        let mut f = Function::start(&cloud, function);
        match f.invoke(&bad, Duration::from_secs(60)) {
            Outcome::Error(e) => {
                assert!(
                    e["errorType"].as_str().is_some_and(|t| !t.is_empty())
                        && e["errorMessage"].as_str().is_some_and(|m| !m.is_empty()),
                    "{function}: {e}"
                );
                // The handler's error as it is: its type and message, as `nodecycle run`
                // prints them (the function's binary name is its `nodecycle run` name).
                let (binary, _) = function_env(function);
                let cli = run_cli(&cloud, &binary, &bad);
                assert_eq!(
                    (&e["errorType"], &e["errorMessage"]),
                    (&cli["errorType"], &cli["errorMessage"]),
                    "{function}"
                );
            }
            Outcome::Response(v) => panic!("{function}: {bad} answered {v}"),
        }
        let warm = f.response(&good);
        assert!(warm.is_object(), "{function}: {warm}");
        assert!(f.alive(), "{function} exited after an error invocation");
        assert!(f.api.next_requests() >= 2, "{function}");
        assert!(f.api.init_error().is_none(), "{function}");
    }
}

/// The rotator honours the deadline Lambda gives: with less time left than its reserve it
/// starts no step (nothing launched), and the next invocation does the work.
#[tokio::test]
async fn the_rotator_starts_no_step_without_time_and_the_next_invocation_does() {
    let cloud = FakeCloud::start();
    let (a, _, _kube) = world(&cloud).await;
    let watcher = Function::start(&cloud, "AmiWatcherFunction");
    watcher.response(&event("scheduled-tick.json"));
    publish_al2023(&cloud, "1.30", "v20241109", "2024-11-09T00:00:00Z");
    watcher.response(&event("scheduled-tick.json"));
    let capacity = |a: &Adapters| {
        let c = a.clients.autoscaling.clone();
        async move {
            c.describe_auto_scaling_groups()
                .auto_scaling_group_names("prod-general")
                .send()
                .await
                .unwrap()
                .auto_scaling_groups()[0]
                .desired_capacity()
                .unwrap()
        }
    };
    let rotator = Function::start(&cloud, "RotatorFunction");
    // 5 s left: under the rotator's 20 s reserve.
    let short = match rotator.invoke(&event("scheduled-tick.json"), Duration::from_secs(5)) {
        Outcome::Response(v) => v,
        Outcome::Error(e) => panic!("{e}"),
    };
    assert_eq!(capacity(&a).await, 3, "no surge launched: {short}");
    assert!(
        short["pools"][0]["steps"]
            .as_array()
            .is_none_or(|s| s.is_empty()),
        "{short}"
    );
    let full = rotator.response(&event("scheduled-tick.json"));
    assert!(
        !full["pools"][0]["steps"].as_array().unwrap().is_empty() || capacity(&a).await == 4,
        "the next invocation works: {full}"
    );
    assert_eq!(capacity(&a).await, 4, "{full}");
}
