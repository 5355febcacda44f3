//! A Lambda Runtime API emulator (the `2018-06-01` interface a custom runtime's bootstrap
//! talks to), so tests run the function binaries the way Lambda does: the process polls
//! `GET /runtime/invocation/next` (long poll), gets the event with the request id, deadline and
//! function ARN headers (and the client context when the invoker sent one), and posts `/response` or `/error` (`errorType`, `errorMessage`), or
//! `/runtime/init/error` when it cannot start. Plain HTTP/1.1 on loopback, one thread per
//! connection, `Connection: close` on every answer.

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
}

/// The emulator; serves until dropped (the listener thread ends with the process).
pub struct RuntimeApi {
    addr: String,
    shared: Arc<(Mutex<State>, Condvar)>,
    serial: Mutex<u64>,
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
        RuntimeApi {
            addr,
            shared,
            serial: Mutex::new(0),
        }
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
        let id = {
            let mut n = self.serial.lock().expect("serial");
            *n += 1;
            format!("00000000-0000-4000-8000-{:012}", *n)
        };
        let deadline_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
            + timeout.as_millis();
        let (lock, cvar) = &*self.shared;
        let mut state = lock.lock().expect("state");
        state.queue.push_back(Pending {
            id: id.clone(),
            body: serde_json::to_vec(event).expect("event"),
            deadline_ms,
            client_context: client_context.map(Value::to_string),
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

    /// `GET /runtime/invocation/next` requests received so far.
    pub fn next_requests(&self) -> u32 {
        self.shared.0.lock().expect("state").next_requests
    }

    /// The body of `POST /runtime/init/error`, if the function reported one.
    pub fn init_error(&self) -> Option<Value> {
        self.shared.0.lock().expect("state").init_error.clone()
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
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        let lower = header.to_ascii_lowercase();
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
