//! A small real model gateway for the engine tests: it serves OpenAI-style chat completions
//! on the listener an engine hands it (inside the trial's network namespace), checks the
//! trial's token, answers from a script, meters, and logs every exchange. It stands in for
//! the host's gateway (whose own tests live with the host), speaking just enough HTTP/1.1
//! for a stdlib client: one request per connection, `Content-Length` bodies.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use evaluator_harbor::engine::BoxFuture;
use evaluator_harbor::gateway::{Exchange, ModelGateway, TrialAccess, TrialModelLog};

/// Turns a request body into the assistant message to answer.
pub type Script = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// Tokens and price every answered call is metered at.
pub const PROMPT_TOKENS: u64 = 11;
pub const COMPLETION_TOKENS: u64 = 7;
pub const USD_PER_CALL: f64 = 0.25;

struct Shared {
    script: Script,
    /// Calls answered before the budget "runs out" and every later one gets a 429.
    budget_calls: Option<u64>,
    answered: AtomicU64,
}

struct Served {
    token: String,
    task: tokio::task::JoinHandle<()>,
    log: Arc<Mutex<TrialModelLog>>,
}

pub struct TestGateway {
    shared: Arc<Shared>,
    next: AtomicU64,
    served: Mutex<HashMap<u64, Served>>,
    /// Every trial opened, with its port: (trial, port).
    pub opened: Mutex<Vec<(String, u16)>>,
    /// How many were closed.
    pub closed: AtomicU64,
}

impl TestGateway {
    pub fn new(script: Script, budget_calls: Option<u64>) -> Arc<TestGateway> {
        Arc::new(TestGateway {
            shared: Arc::new(Shared {
                script,
                budget_calls,
                answered: AtomicU64::new(0),
            }),
            next: AtomicU64::new(1),
            served: Mutex::new(HashMap::new()),
            opened: Mutex::new(Vec::new()),
            closed: AtomicU64::new(0),
        })
    }

    /// How many trials are still being served.
    pub fn open_now(&self) -> usize {
        self.served.lock().unwrap().len()
    }
}

impl ModelGateway for TestGateway {
    fn open(&self, trial: &str, listener: std::net::TcpListener) -> Result<TrialAccess, String> {
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let token = format!("trial-token-{id}-{}", crate::common::token());
        let log = Arc::new(Mutex::new(TrialModelLog::default()));
        let (shared, t, l) = (self.shared.clone(), token.clone(), log.clone());
        let task = tokio::spawn(async move {
            // Dropping the set (when this task is aborted) aborts every connection.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                conns.spawn(serve(stream, shared.clone(), t.clone(), l.clone()));
            }
        });
        self.served.lock().unwrap().insert(
            id,
            Served {
                token: token.clone(),
                task,
                log,
            },
        );
        self.opened.lock().unwrap().push((trial.to_string(), port));
        Ok(TrialAccess { id, token, port })
    }

    fn close(&self, access: &TrialAccess) -> BoxFuture<'_, TrialModelLog> {
        let served = self.served.lock().unwrap().remove(&access.id);
        let token = access.token.clone();
        Box::pin(async move {
            let Some(s) = served else {
                return TrialModelLog::default();
            };
            assert_eq!(s.token, token, "closed with another trial's access");
            s.task.abort();
            let _ = s.task.await;
            self.closed.fetch_add(1, Ordering::Relaxed);
            s.log.lock().unwrap().clone()
        })
    }
}

struct Request {
    method: String,
    path: String,
    auth: Option<String>,
    body: Vec<u8>,
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 << 10 {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let mut len = 0usize;
    let mut auth = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().ok()?,
                "authorization" => auth = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    if len > 4 << 20 {
        return None;
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    Some(Request {
        method,
        path,
        auth,
        body,
    })
}

async fn respond(stream: &mut tokio::net::TcpStream, status: &str, body: &Value) {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    shared: Arc<Shared>,
    token: String,
    log: Arc<Mutex<TrialModelLog>>,
) {
    let Some(req) = read_request(&mut stream).await else {
        return;
    };
    if req.auth.as_deref() != Some(&format!("Bearer {token}")) {
        respond(
            &mut stream,
            "401 Unauthorized",
            &json!({"error": {"type": "unauthorized", "message": "unknown token"}}),
        )
        .await;
        return;
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/v1/models") => {
            respond(
                &mut stream,
                "200 OK",
                &json!({"object": "list", "data": [{"id": "test-model", "object": "model"}]}),
            )
            .await;
        }
        ("POST", "/v1/chat/completions") => {
            let (status, body) = complete(&req.body, &shared, &log);
            respond(&mut stream, status, &body).await;
        }
        _ => {
            respond(
                &mut stream,
                "404 Not Found",
                &json!({"error": {"message": "no such route"}}),
            )
            .await
        }
    }
}

fn complete(body: &[u8], shared: &Shared, log: &Mutex<TrialModelLog>) -> (&'static str, Value) {
    let started = std::time::Instant::now();
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return (
            "400 Bad Request",
            json!({"error": {"type": "invalid_request", "message": "body is not JSON"}}),
        );
    };
    let model = request["model"].as_str().unwrap_or("").to_string();
    let mut ex = Exchange {
        ts: rfc3339_now(),
        model: model.clone(),
        messages: request["messages"].clone(),
        tools: request.get("tools").cloned(),
        answer: None,
        outcome: "ok".into(),
        error: None,
        prompt_tokens: 0,
        completion_tokens: 0,
        usd: 0.0,
        latency_ms: 0,
    };
    let mut log = log.lock().unwrap();
    log.usage.calls += 1;
    let n = shared.answered.fetch_add(1, Ordering::SeqCst);
    if shared.budget_calls.is_some_and(|b| n >= b) {
        ex.outcome = "budget_exhausted".into();
        ex.error = Some("the experiment's budget is spent".into());
        log.usage.refused_by_budget += 1;
        log.budget_exhausted = true;
        log.exchanges.push(ex);
        return (
            "429 Too Many Requests",
            json!({"error": {"type": "budget_exhausted", "message": "the experiment's budget is spent"}}),
        );
    }
    let answer = (shared.script)(&request);
    ex.answer = Some(answer.clone());
    ex.prompt_tokens = PROMPT_TOKENS;
    ex.completion_tokens = COMPLETION_TOKENS;
    ex.usd = USD_PER_CALL;
    ex.latency_ms = started.elapsed().as_millis() as u64;
    log.usage.prompt_tokens += PROMPT_TOKENS;
    log.usage.completion_tokens += COMPLETION_TOKENS;
    log.usage.usd += USD_PER_CALL;
    log.usage.ledger_ids.push(format!("ledger-{n}"));
    log.exchanges.push(ex);
    (
        "200 OK",
        json!({
            "id": format!("chatcmpl-{n}"),
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": answer, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                      "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS},
        }),
    )
}

/// Now as RFC 3339 UTC (days-to-civil, Howard Hinnant's algorithm).
fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The script the Python test agent expects: first a `write_file` tool call, then, once
/// the tool's result is back, a final message.
pub fn write_answer_script(answer: &'static str) -> Script {
    Arc::new(move |req: &Value| {
        let last = req["messages"]
            .as_array()
            .and_then(|m| m.last())
            .cloned()
            .unwrap_or(Value::Null);
        if last["role"] == "tool" {
            json!({"role": "assistant", "content": "The answer is written.",
                   "reasoning_content": "the tool succeeded"})
        } else {
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call-write-1", "type": "function",
                "function": {"name": "write_file",
                             "arguments": json!({"path": "/app/answer.txt", "content": answer}).to_string()}
            }]})
        }
    })
}
