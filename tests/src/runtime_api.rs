//! A Lambda Runtime API emulator (the `2018-06-01` interface a custom runtime's bootstrap
//! talks to), so tests run the function binaries the way Lambda does: the process polls
//! `GET /runtime/invocation/next` (long poll), gets the event with the request id, deadline and
//! function ARN headers (and the client context when the invoker sent one), and posts `/response` or `/error` (`errorType`, `errorMessage`), or
//! `/runtime/init/error` when it cannot start. Plain HTTP/1.1 on loopback, one thread per
//! connection, `Connection: close` on every answer.
//!
//! It also serves Lambda's `Invoke` API for the function it runs
//! ([`RuntimeApi::serve_invoke`]): `POST /2015-03-31/functions/{name}/invocations` (a name or
//! ARN ending in it; any other is `404 ResourceNotFoundException`), the `X-Amz-Client-Context`
//! header (base64 of the JSON) delivered as the client context, answered with the function's
//! response (`200`), or its error with `X-Amz-Function-Error: Unhandled`, as Lambda answers a
//! synchronous invocation. Point an SDK at it with `AWS_ENDPOINT_URL_LAMBDA=http://<addr>`.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// What an invocation ended with, as Lambda records it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `POST /runtime/invocation/{id}/response`: the body.
    Response(Value),
    /// `POST /runtime/invocation/{id}/error`: the body (`errorType`, `errorMessage`).
    Error(Value),
}

struct Pending {
    id: String,
    body: Vec<u8>,
    deadline_ms: u128,
    client_context: Option<String>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Pending>,
    outcomes: HashMap<String, Outcome>,
    next_requests: u32,
    init_error: Option<Value>,
    serial: u64,
    /// The function names `Invoke` answers for ([`RuntimeApi::serve_invoke`]).
    functions: Vec<String>,
    /// `Invoke` calls received: (function, client context).
    invokes: Vec<(String, Option<Value>)>,
}

/// The emulator; serves until dropped (the listener thread ends with the process).
pub struct RuntimeApi {
    addr: String,
    shared: Arc<(Mutex<State>, Condvar)>,
}

impl RuntimeApi {
    /// Starts listening on a free loopback port.
    pub fn start() -> RuntimeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the runtime API");
        let addr = listener.local_addr().expect("local address").to_string();
        let shared: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let for_thread = shared.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = for_thread.clone();
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        RuntimeApi { addr, shared }
    }

    /// Answers Lambda's `Invoke` for `function` (the name the stack's `OpsFunctionName` gives)
    /// from now on, beside the names given before (an alias of the same process: the function
    /// itself still knows its own name from `AWS_LAMBDA_FUNCTION_NAME`).
    pub fn serve_invoke(&self, function: &str) {
        self.shared
            .0
            .lock()
            .expect("state")
            .functions
            .push(function.to_string());
    }

    /// `Invoke` calls received so far: the function named and the client context sent.
    pub fn invokes(&self) -> Vec<(String, Option<Value>)> {
        self.shared.0.lock().expect("state").invokes.clone()
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Queues `event` with `timeout` until its deadline and waits (at most `wait`) for the
    /// function's answer; `None` when none came.
    pub fn invoke(&self, event: &Value, timeout: Duration, wait: Duration) -> Option<Outcome> {
        self.invoke_with(event, None, timeout, wait)
    }

    /// [`RuntimeApi::invoke`] with the client context the invoker sent (Invoke's
    /// `ClientContext`, `{"custom": {...}, ...}`), delivered in the
    /// `Lambda-Runtime-Client-Context` header as Lambda delivers it.
    pub fn invoke_with(
        &self,
        event: &Value,
        client_context: Option<&Value>,
        timeout: Duration,
        wait: Duration,
    ) -> Option<Outcome> {
        enqueue_and_wait(
            &self.shared,
            serde_json::to_vec(event).expect("event"),
            client_context.map(Value::to_string),
            timeout,
            wait,
        )
    }

    /// `GET /runtime/invocation/next` requests received so far.
    pub fn next_requests(&self) -> u32 {
        self.shared.0.lock().expect("state").next_requests
    }

    /// The body of `POST /runtime/init/error`, if the function reported one.
    pub fn init_error(&self) -> Option<Value> {
        self.shared.0.lock().expect("state").init_error.clone()
    }
}

/// Queues one invocation and waits (at most `wait`) for its outcome.
fn enqueue_and_wait(
    shared: &(Mutex<State>, Condvar),
    body: Vec<u8>,
    client_context: Option<String>,
    timeout: Duration,
    wait: Duration,
) -> Option<Outcome> {
    let deadline_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        + timeout.as_millis();
    let (lock, cvar) = shared;
    let mut state = lock.lock().expect("state");
    state.serial += 1;
    let id = format!("00000000-0000-4000-8000-{:012}", state.serial);
    state.queue.push_back(Pending {
        id: id.clone(),
        body,
        deadline_ms,
        client_context,
    });
    cvar.notify_all();
    let until = Instant::now() + wait;
    loop {
        if let Some(o) = state.outcomes.remove(&id) {
            return Some(o);
        }
        let left = until.checked_duration_since(Instant::now())?;
        state = cvar.wait_timeout(state, left).expect("wait").0;
    }
}

fn serve(stream: TcpStream, shared: &(Mutex<State>, Condvar)) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = stream;
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut length = 0usize;
    let mut chunked = false;
    let mut client_context_b64: Option<String> = None;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
        if lower.starts_with("x-amz-client-context:") {
            client_context_b64 = header.split_once(':').map(|(_, v)| v.trim().to_string());
        }
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let body = if chunked {
        read_chunked(&mut reader)
    } else {
        let mut b = vec![0; length];
        let _ = reader.read_exact(&mut b);
        b
    };
    let (lock, cvar) = shared;
    let reply = |w: &mut TcpStream, status: &str, headers: &[(String, String)], body: &[u8]| {
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let _ = w.write_all(head.as_bytes());
        let _ = w.write_all(body);
        let _ = w.flush();
    };
    let accepted = br#"{"status":"OK"}"#;
    if let Some(rest) = path.strip_prefix("/2015-03-31/functions/") {
        invoke(
            rest,
            &method,
            body,
            client_context_b64,
            shared,
            &mut writer,
            &reply,
        );
        return;
    }
    let prefix = "/2018-06-01/runtime/";
    let Some(route) = path.strip_prefix(prefix) else {
        reply(&mut writer, "404 Not Found", &[], b"{}");
        return;
    };
    match (method.as_str(), route) {
        ("GET", "invocation/next") => {
            let mut state = lock.lock().expect("state");
            state.next_requests += 1;
            cvar.notify_all();
            let next = loop {
                if let Some(p) = state.queue.pop_front() {
                    break p;
                }
                state = cvar.wait(state).expect("wait");
            };
            drop(state);
            let mut headers = vec![
                ("Lambda-Runtime-Aws-Request-Id".to_string(), next.id.clone()),
                (
                    "Lambda-Runtime-Deadline-Ms".to_string(),
                    next.deadline_ms.to_string(),
                ),
                (
                    "Lambda-Runtime-Invoked-Function-Arn".to_string(),
                    "arn:aws:lambda:us-east-2:123456789012:function:nodecycle-test".to_string(),
                ),
                (
                    "Lambda-Runtime-Trace-Id".to_string(),
                    "Root=1-00000000-000000000000000000000000;Sampled=0".to_string(),
                ),
            ];
            if let Some(c) = &next.client_context {
                headers.push(("Lambda-Runtime-Client-Context".to_string(), c.clone()));
            }
            reply(&mut writer, "200 OK", &headers, &next.body);
        }
        ("POST", "init/error") => {
            let mut state = lock.lock().expect("state");
            state.init_error = Some(serde_json::from_slice(&body).unwrap_or(Value::Null));
            cvar.notify_all();
            reply(&mut writer, "202 Accepted", &[], accepted);
        }
        ("POST", r) => {
            let mut it = r.split('/');
            let (kind, id, what) = (it.next(), it.next(), it.next());
            match (kind, id, what) {
                (Some("invocation"), Some(id), Some(what @ ("response" | "error"))) => {
                    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let outcome = if what == "response" {
                        Outcome::Response(value)
                    } else {
                        Outcome::Error(value)
                    };
                    let mut state = lock.lock().expect("state");
                    state.outcomes.insert(id.to_string(), outcome);
                    cvar.notify_all();
                    reply(&mut writer, "202 Accepted", &[], accepted);
                }
                _ => reply(&mut writer, "404 Not Found", &[], b"{}"),
            }
        }
        _ => reply(&mut writer, "404 Not Found", &[], b"{}"),
    }
}

/// Writes one answer: status line, extra headers, body.
type Reply<'a> = dyn Fn(&mut TcpStream, &str, &[(String, String)], &[u8]) + 'a;

/// Lambda's synchronous `Invoke` of the function the emulator runs.
fn invoke(
    rest: &str,
    method: &str,
    body: Vec<u8>,
    client_context_b64: Option<String>,
    shared: &(Mutex<State>, Condvar),
    writer: &mut TcpStream,
    reply: &Reply<'_>,
) {
    use base64::Engine as _;
    let name = rest
        .split(['/', '?'])
        .next()
        .map(|n| n.replace("%3A", ":"))
        .unwrap_or_default();
    let served = shared.0.lock().expect("state").functions.clone();
    let known = served
        .iter()
        .any(|f| name == *f || name.ends_with(&format!(":function:{f}")));
    if method != "POST" || !rest.contains("/invocations") || !known {
        let error =
            serde_json::json!({"Type": "User", "Message": format!("Function not found: {name}")});
        reply(
            writer,
            "404 Not Found",
            &[(
                "x-amzn-ErrorType".into(),
                "ResourceNotFoundException".into(),
            )],
            error.to_string().as_bytes(),
        );
        return;
    }
    let client_context = client_context_b64.and_then(|b| {
        let bytes = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
        serde_json::from_slice::<Value>(&bytes).ok()
    });
    shared
        .0
        .lock()
        .expect("state")
        .invokes
        .push((name, client_context.clone()));
    let outcome = enqueue_and_wait(
        shared,
        body,
        client_context.as_ref().map(Value::to_string),
        Duration::from_secs(300),
        Duration::from_secs(120),
    );
    let executed = ("X-Amz-Executed-Version".to_string(), "$LATEST".to_string());
    match outcome {
        Some(Outcome::Response(v)) => {
            reply(writer, "200 OK", &[executed], v.to_string().as_bytes());
        }
        Some(Outcome::Error(v)) => reply(
            writer,
            "200 OK",
            &[
                executed,
                ("X-Amz-Function-Error".into(), "Unhandled".into()),
            ],
            v.to_string().as_bytes(),
        ),
        None => {
            let error =
                serde_json::json!({"Type": "Service", "Message": "the function did not answer"});
            reply(
                writer,
                "500 Internal Server Error",
                &[("x-amzn-ErrorType".into(), "ServiceException".into())],
                error.to_string().as_bytes(),
            );
        }
    }
}

fn read_chunked(reader: &mut impl BufRead) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let mut size = String::new();
        if reader.read_line(&mut size).is_err() {
            break;
        }
        let n =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if n == 0 {
            let mut end = String::new();
            let _ = reader.read_line(&mut end);
            break;
        }
        let mut chunk = vec![0; n];
        if reader.read_exact(&mut chunk).is_err() {
            break;
        }
        out.extend_from_slice(&chunk);
        let mut crlf = [0u8; 2];
        let _ = reader.read_exact(&mut crlf);
    }
    out
}
