//! The `model` capability's HTTP side against a scripted OpenAI-compatible server on
//! 127.0.0.1: a test double for the paid API (no other network is used).

use evolve::model::{ModelClient, ModelConfig, Prices};
use evolve::sandbox::ModelBackend;
use evolve::sandbox::model::{ChatRequest, Message, ModelError, Role};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "sk-test-5f3c9a7e1b2d4c6a8e0f";

// ---------------------------------------------------------------------------------
// The scripted server.

/// One scripted answer; once the script runs out, every request gets `Ok`.
#[derive(Clone)]
enum Reply {
    /// 200 with a chat completion; `usage` as (prompt, completion) tokens, or none.
    Ok {
        content: &'static str,
        usage: Option<(u64, u64)>,
    },
    /// Any status with a JSON body, and an optional `Retry-After` value.
    Status {
        code: u16,
        body: Value,
        retry_after: Option<&'static str>,
    },
    /// Read the request, then say nothing for this long and close.
    Hang(Duration),
    /// An error whose body repeats the `Authorization` header it received.
    EchoAuth(u16),
}

fn ok(content: &'static str, usage: Option<(u64, u64)>) -> Reply {
    Reply::Ok { content, usage }
}

fn status(code: u16) -> Reply {
    Reply::Status {
        code,
        body: json!({"error": {"message": format!("scripted {code}")}}),
        retry_after: None,
    }
}

#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Server {
    port: u16,
    script: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Recorded>>>,
}

impl Server {
    fn start(script: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (script.clone(), seen.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (s, r) = (s.clone(), r.clone());
                std::thread::spawn(move || serve(stream, &s, &r));
            }
        });
        Server { port, script, seen }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn requests(&self) -> Vec<Recorded> {
        self.seen.lock().unwrap().clone()
    }

    fn script_left(&self) -> usize {
        self.script.lock().unwrap().len()
    }
}

fn serve(stream: TcpStream, script: &Mutex<VecDeque<Reply>>, seen: &Mutex<Vec<Recorded>>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let recorded = Recorded {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let auth = recorded.header("authorization").unwrap_or("").to_string();
    seen.lock().unwrap().push(recorded);
    let reply = script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(ok("default answer", Some((10, 2))));
    let (code, body, retry_after) = match reply {
        Reply::Ok { content, usage } => {
            let mut body = json!({
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": "stop"}],
            });
            if let Some((p, c)) = usage {
                body["usage"] =
                    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
            }
            (200, body, None)
        }
        Reply::Status {
            code,
            body,
            retry_after,
        } => (code, body, retry_after),
        Reply::Hang(d) => {
            std::thread::sleep(d);
            return;
        }
        Reply::EchoAuth(code) => (
            code,
            json!({"error": {"message": format!("Incorrect API key provided. You sent `Authorization: {auth}`")}}),
            None,
        ),
    };
    let body = body.to_string();
    let mut out = stream;
    let mut head = format!(
        "HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if let Some(r) = retry_after {
        head.push_str(&format!("retry-after: {r}\r\n"));
    }
    head.push_str("\r\n");
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(body.as_bytes());
    let _ = out.flush();
}

// ---------------------------------------------------------------------------------
// Helpers.

/// Short backoffs and timeouts so the suite stays fast.
fn config(endpoint: String) -> ModelConfig {
    let mut c = ModelConfig::new(endpoint, "test-model");
    c.backoff_s = 0.01;
    c.timeout_s = 5.0;
    c.retry_after_cap_s = 1.0;
    c
}

fn priced(mut c: ModelConfig, input: f64, output: f64) -> ModelConfig {
    c.prices = Prices {
        input_per_mtok_usd: input,
        output_per_mtok_usd: output,
    };
    c
}

fn request(text: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: "You are terse.".into(),
            },
            Message {
                role: Role::User,
                content: text.into(),
            },
        ],
        max_tokens: Some(100),
        temperature: Some(0.2),
    }
}

fn log_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("model.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each log line is JSON"))
        .collect()
}

fn error_text(e: &ModelError) -> String {
    format!("{e:?} {e}")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

// ---------------------------------------------------------------------------------
// Protocol.

#[tokio::test]
async fn sends_an_openai_chat_request_with_the_bearer_key() {
    let server = Server::start(vec![ok("hello there", Some((21, 3)))]);
    let dir = tempfile::tempdir().unwrap();
    let client = ModelClient::with_api_key(
        priced(config(server.endpoint()), 2.0, 10.0),
        Some(KEY.into()),
    )
    .unwrap();
    let scope = client.scope(1.0, dir.path().to_path_buf());
    let answer = scope.chat(request("Say hello")).await.unwrap();
    assert_eq!(answer.content, "hello there");
    assert_eq!((answer.input_tokens, answer.output_tokens), (21, 3));
    assert!(close(answer.usd, (21.0 * 2.0 + 3.0 * 10.0) / 1e6));

    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say hello"},
            ],
            "max_tokens": 100,
            "temperature": 0.2,
        })
    );
}

#[tokio::test]
async fn no_key_sends_no_authorization_and_defaults_max_tokens() {
    let server = Server::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(format!("{}/", server.endpoint()));
    c.max_tokens = 512;
    let client = ModelClient::with_api_key(c, None).unwrap();
    assert!(!client.has_api_key());
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let mut req = request("hi");
    req.max_tokens = None;
    req.temperature = None;
    scope.chat(req).await.unwrap();
    let mut req = request("hi");
    req.max_tokens = Some(100_000);
    scope.chat(req).await.unwrap();

    let seen = server.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("authorization"), None);
    assert_eq!(seen[0].body["max_tokens"], 512, "the cap is the default");
    assert!(seen[0].body.get("temperature").is_none());
    assert_eq!(
        seen[1].body["max_tokens"], 512,
        "larger requests are capped"
    );
}

// ---------------------------------------------------------------------------------
// Retries, refusal, timeout.

#[tokio::test]
async fn retries_429_and_honours_retry_after() {
    let server = Server::start(vec![
        Reply::Status {
            code: 429,
            body: json!({"error": {"message": "slow down"}}),
            retry_after: Some("0.3"),
        },
        ok("after the wait", Some((5, 5))),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let client = ModelClient::with_api_key(config(server.endpoint()), None).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let started = Instant::now();
    let answer = scope.chat(request("x")).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "Retry-After honoured"
    );
    assert_eq!(answer.content, "after the wait");
    assert_eq!(server.requests().len(), 2);
    assert_eq!(scope.usage().attempts, 2);
    let log = log_lines(dir.path());
    assert_eq!(log.len(), 2);
    assert_eq!(log[0]["outcome"], "retry");
    assert_eq!(log[0]["status"], 429);
    assert_eq!(log[0]["retry_in_ms"], 300);
    assert_eq!(log[1]["outcome"], "ok");
    assert_eq!(log[1]["attempt"], 2);
}

#[tokio::test]
async fn retry_after_is_capped() {
    let server = Server::start(vec![
        Reply::Status {
            code: 503,
            body: json!({}),
            retry_after: Some("3600"),
        },
        ok("ok", Some((1, 1))),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(server.endpoint());
    c.retry_after_cap_s = 0.05;
    let client = ModelClient::with_api_key(c, None).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let started = Instant::now();
    scope.chat(request("x")).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_a_bounded_number_of_times() {
    let server = Server::start(vec![status(500); 10]);
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(server.endpoint());
    c.max_retries = 3;
    let client = ModelClient::with_api_key(c, None).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let err = scope.chat(request("x")).await.unwrap_err();
    let ModelError::Failed(msg) = &err else {
        panic!("expected Failed, got {err:?}")
    };
    assert!(
        msg.contains("4 attempts") && msg.contains("HTTP 500"),
        "{msg}"
    );
    assert_eq!(server.requests().len(), 4, "one attempt and three retries");
    assert_eq!(server.script_left(), 6);
    let log = log_lines(dir.path());
    let outcomes: Vec<&str> = log.iter().map(|l| l["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["retry", "retry", "retry", "failed"]);
    assert_eq!(scope.spent_usd(), 0.0);
}

#[tokio::test]
async fn server_errors_then_success() {
    let server = Server::start(vec![status(502), status(500), ok("third time", None)]);
    let dir = tempfile::tempdir().unwrap();
    let client = ModelClient::with_api_key(config(server.endpoint()), None).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let answer = scope.chat(request("x")).await.unwrap();
    assert_eq!(answer.content, "third time");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn connection_errors_are_retried_then_fail() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(format!("http://127.0.0.1:{port}/v1"));
    c.max_retries = 2;
    let client = ModelClient::with_api_key(c, Some(KEY.into())).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let err = scope.chat(request("x")).await.unwrap_err();
    let ModelError::Failed(msg) = &err else {
        panic!("expected Failed, got {err:?}")
    };
    assert!(
        msg.contains("3 attempts") && msg.contains("connect"),
        "{msg}"
    );
    assert!(
        !msg.contains("127.0.0.1") && !msg.contains(&port.to_string()),
        "{msg}"
    );
    assert_eq!(scope.usage().attempts, 3);
}

#[tokio::test]
async fn https_endpoints_go_through_tls() {
    // A plain-HTTP server behind an https:// endpoint: the rustls handshake fails, so
    // the TLS path (ring provider, webpki roots) really ran, and the error stays vague.
    let server = Server::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(format!("https://127.0.0.1:{}/v1", server.port));
    c.max_retries = 1;
    let client = ModelClient::with_api_key(c, Some(KEY.into())).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let err = scope.chat(request("x")).await.unwrap_err();
    let ModelError::Failed(msg) = &err else {
        panic!("expected Failed, got {err:?}")
    };
    assert!(msg.contains("2 attempts"), "{msg}");
    assert!(!msg.contains("127.0.0.1") && !msg.contains(KEY), "{msg}");
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.header("authorization").is_none()),
        "nothing readable reached the server"
    );
}

#[tokio::test]
async fn other_client_errors_are_refused_without_retry() {
    let server = Server::start(vec![Reply::Status {
        code: 400,
        body: json!({"error": {"message": "maximum context length exceeded"}}),
        retry_after: None,
    }]);
    let dir = tempfile::tempdir().unwrap();
    let client = ModelClient::with_api_key(config(server.endpoint()), None).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let err = scope.chat(request("x")).await.unwrap_err();
    let ModelError::Refused(msg) = &err else {
        panic!("expected Refused, got {err:?}")
    };
    assert!(
        msg.contains("HTTP 400") && msg.contains("maximum context length"),
        "{msg}"
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(log_lines(dir.path())[0]["outcome"], "refused");
}

#[tokio::test]
async fn a_hung_provider_times_out_and_is_charged_the_worst_case() {
    let server = Server::start(vec![Reply::Hang(Duration::from_secs(5))]);
    let dir = tempfile::tempdir().unwrap();
    let mut c = priced(config(server.endpoint()), 1.0, 1.0);
    c.timeout_s = 0.3;
    let client = ModelClient::with_api_key(c, None).unwrap();
    let scope = client.scope(1.0, dir.path().to_path_buf());
    let started = Instant::now();
    let err = scope.chat(request("abcd")).await.unwrap_err();
    assert!(matches!(err, ModelError::Timeout), "{err:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(server.requests().len(), 1, "a timeout is not retried");
    // Input estimate: "You are terse." (14 chars: 4) + "abcd" (1), plus 4 per message.
    let worst = (4 + 1 + 2 * 4 + 100) as f64 / 1e6;
    assert!(close(scope.spent_usd(), worst), "{}", scope.spent_usd());
    assert_eq!(scope.usage().timed_out_calls, 1);
    assert_eq!(log_lines(dir.path())[0]["outcome"], "timeout");
}

#[tokio::test]
async fn malformed_requests_never_reach_the_provider() {
    let server = Server::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let client = ModelClient::with_api_key(config(server.endpoint()), None).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let empty = ChatRequest {
        messages: vec![],
        max_tokens: None,
        temperature: None,
    };
    assert!(matches!(
        scope.chat(empty).await,
        Err(ModelError::InvalidRequest(_))
    ));
    let mut zero = request("x");
    zero.max_tokens = Some(0);
    assert!(matches!(
        scope.chat(zero).await,
        Err(ModelError::InvalidRequest(_))
    ));
    let mut hot = request("x");
    hot.temperature = Some(f64::NAN);
    assert!(matches!(
        scope.chat(hot).await,
        Err(ModelError::InvalidRequest(_))
    ));
    assert!(server.requests().is_empty());
    assert_eq!(log_lines(dir.path())[0]["outcome"], "invalid_request");
}

// ---------------------------------------------------------------------------------
// Metering and budget.

#[tokio::test]
async fn metering_uses_reported_usage_and_falls_back_to_an_estimate() {
    let server = Server::start(vec![ok("twelve chars", None), ok("x", Some((1000, 500)))]);
    let dir = tempfile::tempdir().unwrap();
    let client =
        ModelClient::with_api_key(priced(config(server.endpoint()), 3.0, 15.0), None).unwrap();
    let scope = client.scope(10.0, dir.path().to_path_buf());
    // No usage: input estimated (4 + 2 + 2*4 = 14 tokens), output "twelve chars" = 3.
    let a = scope.chat(request("12345678")).await.unwrap();
    assert_eq!((a.input_tokens, a.output_tokens), (14, 3));
    assert!(close(a.usd, (14.0 * 3.0 + 3.0 * 15.0) / 1e6));
    let b = scope.chat(request("y")).await.unwrap();
    assert!(close(b.usd, (1000.0 * 3.0 + 500.0 * 15.0) / 1e6));

    let usage = scope.usage();
    assert_eq!(usage.calls, 2);
    assert_eq!(usage.succeeded, 2);
    assert_eq!(usage.estimated_calls, 1);
    assert_eq!((usage.input_tokens, usage.output_tokens), (1014, 503));
    assert!(close(scope.spent_usd(), a.usd + b.usd));
    assert!(close(usage.usd, scope.spent_usd()));
    let log = log_lines(dir.path());
    assert_eq!(log[0]["usage_estimated"], true);
    assert_eq!(log[1]["usage_estimated"], false);
}

#[tokio::test]
async fn zero_budget_with_prices_refuses_every_call() {
    let server = Server::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let client =
        ModelClient::with_api_key(priced(config(server.endpoint()), 0.0, 1.0), None).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    for _ in 0..3 {
        let mut r = request("x");
        r.max_tokens = Some(1);
        assert!(matches!(
            scope.chat(r).await,
            Err(ModelError::BudgetExhausted)
        ));
    }
    assert!(server.requests().is_empty(), "no request is sent");
    assert_eq!(scope.usage().refused_by_budget, 3);
    assert_eq!(scope.spent_usd(), 0.0);
    assert_eq!(log_lines(dir.path())[0]["outcome"], "budget_exhausted");
}

#[tokio::test]
async fn zero_prices_are_never_refused_for_budget() {
    let server = Server::start(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let client = ModelClient::with_api_key(config(server.endpoint()), None).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    for _ in 0..3 {
        scope.chat(request("x")).await.unwrap();
    }
    assert_eq!(server.requests().len(), 3);
    assert_eq!(scope.spent_usd(), 0.0);
}

#[tokio::test]
async fn the_budget_pays_for_the_worst_case_or_the_call_is_refused() {
    // $1 per million tokens either way; each call's worst case is 13 input (estimate)
    // + 100 output = 113 micro-USD, and the provider reports 13 + 50 = 63.
    let server = Server::start(vec![
        ok("a", Some((13, 50))),
        ok("b", Some((13, 50))),
        ok("c", Some((20, 40))),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let client =
        ModelClient::with_api_key(priced(config(server.endpoint()), 1.0, 1.0), None).unwrap();
    let scope = client.scope(180e-6, dir.path().to_path_buf());
    scope.chat(request("abcd")).await.unwrap(); // 180 - 63 = 117 left >= 113
    scope.chat(request("abcd")).await.unwrap(); // 117 - 63 = 54 left < 113
    assert!(matches!(
        scope.chat(request("abcd")).await,
        Err(ModelError::BudgetExhausted)
    ));
    // A smaller max_tokens fits what is left: 13 + 40 = 53 <= 54.
    let mut small = request("abcd");
    small.max_tokens = Some(40);
    scope.chat(small).await.unwrap();
    assert_eq!(server.requests().len(), 3);
    // The provider counted more input than estimated: 63 + 63 + 60 = 186 > 180.
    assert!(close(scope.spent_usd(), 186e-6), "{}", scope.spent_usd());
    assert!(
        scope.remaining_usd() < 0.0,
        "reported usage may exceed the estimate"
    );
    assert!(matches!(
        scope.chat(request("abcd")).await,
        Err(ModelError::BudgetExhausted)
    ));
}

// ---------------------------------------------------------------------------------
// Log and redaction.

#[tokio::test]
async fn every_attempt_is_logged_as_one_json_line() {
    let server = Server::start(vec![status(500), ok("the answer", Some((7, 2)))]);
    let dir = tempfile::tempdir().unwrap();
    let client = ModelClient::with_api_key(
        priced(config(server.endpoint()), 1.0, 2.0),
        Some(KEY.into()),
    )
    .unwrap();
    let log_dir = dir.path().join("gen-3").join("mutate");
    let scope = client.scope(1.0, log_dir.clone());
    scope.chat(request("question?")).await.unwrap();
    assert_eq!(scope.log_path(), log_dir.join("model.jsonl"));
    let log = log_lines(&log_dir);
    assert_eq!(log.len(), 2);
    for (i, line) in log.iter().enumerate() {
        assert_eq!(line["call"], 1);
        assert_eq!(line["attempt"], i + 1);
        assert_eq!(line["model"], "test-model");
        assert_eq!(line["max_tokens"], 100);
        assert_eq!(line["temperature"], 0.2);
        assert_eq!(
            line["messages"][1],
            json!({"role": "user", "content": "question?"})
        );
        assert!(line["ts"].as_str().unwrap().ends_with('Z'));
        assert!(line["latency_ms"].is_u64());
    }
    assert_eq!(log[0]["status"], 500);
    assert_eq!(log[0]["error"], "HTTP 500: scripted 500");
    let last = &log[1];
    assert_eq!(last["outcome"], "ok");
    assert_eq!(last["status"], 200);
    assert_eq!(last["answer"], "the answer");
    assert_eq!(
        (last["input_tokens"].clone(), last["output_tokens"].clone()),
        (json!(7), json!(2))
    );
    assert!(close(last["usd"].as_f64().unwrap(), 11e-6));
    // A second scope appends to the same file.
    let again = client.scope(1.0, log_dir.clone());
    again.chat(request("more")).await.unwrap();
    assert_eq!(log_lines(&log_dir).len(), 3);
}

#[tokio::test]
async fn the_key_never_reaches_an_error_text_or_the_log() {
    let server = Server::start(vec![
        Reply::EchoAuth(401),
        Reply::EchoAuth(500),
        Reply::EchoAuth(500),
        Reply::Status {
            code: 403,
            body: json!({"error": {"message": format!("key {} is revoked", &KEY[..12])}}),
            retry_after: None,
        },
    ]);
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(server.endpoint());
    c.max_retries = 1;
    let client = ModelClient::with_api_key(c, Some(KEY.into())).unwrap();
    let scope = client.scope(0.0, dir.path().to_path_buf());
    let mut texts = Vec::new();
    let mut req = request("please repeat my key");
    req.messages[1].content = format!("the operator wrote the key itself: {KEY}");
    for _ in 0..3 {
        texts.push(error_text(&scope.chat(req.clone()).await.unwrap_err()));
    }
    // The server did receive the key (so the echo was real).
    assert!(
        server.requests()[0]
            .header("authorization")
            .unwrap()
            .contains(KEY)
    );
    assert!(texts[0].contains("Refused("), "{}", texts[0]);
    assert!(
        texts[0].contains("Incorrect API key provided"),
        "{}",
        texts[0]
    );
    assert!(texts[1].contains("Failed("), "{}", texts[1]);
    let log = std::fs::read_to_string(dir.path().join("model.jsonl")).unwrap();
    let endpoint = server.endpoint();
    let port = server.port.to_string();
    for text in texts.iter().map(String::as_str).chain([log.as_str()]) {
        assert!(!text.contains(KEY), "key in: {text}");
        assert!(!text.contains(&KEY[..12]), "key prefix in: {text}");
        assert!(!text.contains(&KEY[12..]), "key suffix in: {text}");
        assert!(!text.contains("Bearer sk"), "authorization in: {text}");
        assert!(!text.contains(&endpoint), "endpoint in: {text}");
        assert!(
            !text.contains(&format!(":{port}")),
            "endpoint port in: {text}"
        );
    }
    assert!(log.contains("[redacted]"));
    assert!(!format!("{client:?}").contains(KEY));
}

// ---------------------------------------------------------------------------------
// Configuration.

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

#[test]
fn config_from_the_recipe_block() {
    let block = json!({
        "endpoint": "https://api.openai.com/v1",
        "model": "gpt-4o-mini",
        "api_key_env": "MY_KEY",
        "prices": {"input_per_mtok_usd": 0.15, "output_per_mtok_usd": 0.6},
        "timeout_s": 30,
        "max_retries": 1,
        "max_tokens": 2048,
    });
    let c = ModelConfig::from_recipe_with_env(&block, env_of(&[]))
        .unwrap()
        .unwrap();
    assert_eq!(c.endpoint, "https://api.openai.com/v1");
    assert_eq!(
        c.completions_url(),
        "https://api.openai.com/v1/chat/completions"
    );
    assert_eq!(c.model, "gpt-4o-mini");
    assert_eq!(c.api_key_env, "MY_KEY");
    assert_eq!(c.prices.input_per_mtok_usd, 0.15);
    assert_eq!(c.prices.output_per_mtok_usd, 0.6);
    assert_eq!((c.timeout_s, c.max_retries, c.max_tokens), (30.0, 1, 2048));

    let minimal = json!({"endpoint": "http://127.0.0.1:11434/v1", "model": "qwen2.5:0.5b"});
    let c = ModelConfig::from_recipe_with_env(&minimal, env_of(&[]))
        .unwrap()
        .unwrap();
    assert_eq!(c.api_key_env, "OPENAI_API_KEY");
    assert!(c.prices.is_zero());
    assert_eq!((c.timeout_s, c.max_retries, c.max_tokens), (120.0, 3, 4096));
}

#[test]
fn config_falls_back_to_the_environment() {
    let env = env_of(&[
        ("EVOLVE_MODEL_ENDPOINT", "http://localhost:8000/v1"),
        ("EVOLVE_MODEL", "served-model"),
    ]);
    let c = ModelConfig::from_recipe_with_env(&Value::Null, &env)
        .unwrap()
        .unwrap();
    assert_eq!(
        (c.endpoint.as_str(), c.model.as_str()),
        ("http://localhost:8000/v1", "served-model")
    );
    // The recipe wins over the environment.
    let c = ModelConfig::from_recipe_with_env(&json!({"model": "mine"}), &env)
        .unwrap()
        .unwrap();
    assert_eq!(
        (c.endpoint.as_str(), c.model.as_str()),
        ("http://localhost:8000/v1", "mine")
    );
    // Nothing anywhere: no model.
    assert_eq!(
        ModelConfig::from_recipe_with_env(&Value::Null, env_of(&[])),
        Ok(None)
    );
}

#[test]
fn config_errors_name_the_field() {
    let field = |block: Value| {
        ModelConfig::from_recipe_with_env(&block, env_of(&[]))
            .unwrap_err()
            .0[0]
            .field
            .clone()
    };
    assert_eq!(field(json!({"model": "m"})), "model.endpoint");
    assert_eq!(
        field(json!({"endpoint": "http://127.0.0.1/v1"})),
        "model.model"
    );
    let base = |extra: Value| {
        let mut b = json!({"endpoint": "https://x.example/v1", "model": "m"});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b
    };
    assert_eq!(
        field(base(json!({"prices": {"input": 1}}))),
        "model.prices.input"
    );
    assert_eq!(
        field(base(json!({"prices": {"output_per_mtok_usd": -1}}))),
        "model.prices.output_per_mtok_usd"
    );
    assert_eq!(field(base(json!({"temperature": 1}))), "model.temperature");
    assert_eq!(
        field(base(json!({"endpoint": "ftp://x/v1"}))),
        "model.endpoint"
    );
    assert_eq!(
        field(base(json!({"endpoint": "https://u:p@x/v1"}))),
        "model.endpoint"
    );
    assert_eq!(
        field(base(json!({"api_key_env": "sk-abc"}))),
        "model.api_key_env"
    );
    assert_eq!(field(base(json!({"timeout_s": 0}))), "model.timeout_s");
    assert_eq!(field(base(json!({"max_retries": 99}))), "model.max_retries");
    let err =
        ModelConfig::from_recipe_with_env(&base(json!({"prices": {"input": 1}})), env_of(&[]))
            .unwrap_err();
    assert!(err.to_string().contains("input_per_mtok_usd"), "{err}");
}

#[test]
fn a_key_is_not_sent_over_plain_http_beyond_this_machine() {
    let err = ModelClient::with_api_key(
        ModelConfig::new("http://gpu-box.lan:8000/v1", "m"),
        Some(KEY.into()),
    )
    .unwrap_err();
    assert_eq!(err.field, "model.endpoint");
    assert!(!err.to_string().contains(KEY));
    // Without a key, or to loopback, or over https, it is fine.
    ModelClient::with_api_key(ModelConfig::new("http://gpu-box.lan:8000/v1", "m"), None).unwrap();
    ModelClient::with_api_key(
        ModelConfig::new("http://[::1]:8000/v1", "m"),
        Some(KEY.into()),
    )
    .unwrap();
    ModelClient::with_api_key(
        ModelConfig::new("https://api.openai.com/v1", "m"),
        Some(KEY.into()),
    )
    .unwrap();
}

#[test]
fn every_missing_or_invalid_setting_is_reported_at_once() {
    // Both unset: one answer names both, not the first only.
    let err = ModelConfig::from_recipe_with_env(&json!({}), env_of(&[])).unwrap_err();
    assert_eq!(err.fields(), ["model.endpoint", "model.model"], "{err}");
    assert!(
        err.to_string().contains("EVOLVE_MODEL_ENDPOINT")
            && err.to_string().contains("EVOLVE_MODEL"),
        "{err}"
    );
    let err = ModelConfig::from_recipe_with_env(
        &json!({"endpoint": "ftp://x/v1", "model": 3, "timeout_s": 0, "max_tokens": 0,
                "prices": {"input": 1, "output_per_mtok_usd": -1}, "colour": "red"}),
        env_of(&[]),
    )
    .unwrap_err();
    let mut fields = err.fields();
    fields.sort();
    assert_eq!(
        fields,
        [
            "model.colour",
            "model.endpoint",
            "model.max_tokens",
            "model.model",
            "model.prices.input",
            "model.prices.output_per_mtok_usd",
            "model.timeout_s",
        ],
        "{err}"
    );
}

// ---------------------------------------------------------------------------------
// The endpoint probe.

#[tokio::test]
async fn the_probe_tells_a_dead_endpoint_from_a_live_one_and_a_refused_key() {
    // Nothing listens: unreachable, naming the endpoint.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead = format!("http://127.0.0.1:{port}/v1");
    let client = ModelClient::with_api_key(config(dead.clone()), Some(KEY.into())).unwrap();
    let err = client.probe().await.unwrap_err();
    assert!(
        matches!(err.cause, evolve::model::ProbeCause::Unreachable(_)),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("model.endpoint") && text.contains(&dead),
        "{text}"
    );
    assert!(text.contains("connection refused"), "{text}");
    assert!(!text.contains(KEY) && !format!("{err:?}").contains(KEY));

    // Any HTTP answer proves it alive, even a 404 from a server without `/models`.
    let server = Server::start(vec![status(404)]);
    let client = ModelClient::with_api_key(config(server.endpoint()), None).unwrap();
    client.probe().await.unwrap();
    let seen = server.requests();
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("GET", "/v1/models")
    );

    // 401 with a key: the key is wrong; without one: the variable is named.
    let server = Server::start(vec![Reply::EchoAuth(401), status(403)]);
    let client = ModelClient::with_api_key(config(server.endpoint()), Some(KEY.into())).unwrap();
    let err = client.probe().await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("refused the key in OPENAI_API_KEY"), "{text}");
    assert!(
        !text.contains(KEY) && !format!("{err:?}").contains(KEY),
        "{text}"
    );
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let client = ModelClient::with_api_key(config(server.endpoint()), None).unwrap();
    let text = client.probe().await.unwrap_err().to_string();
    assert!(
        text.contains("wants a key") && text.contains("OPENAI_API_KEY is not set"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------
// The spend ledger.

#[tokio::test]
async fn a_call_in_flight_is_reserved_in_the_ledger_before_it_is_sent() {
    use evolve::model::ledger;
    let server = Server::start(vec![Reply::Hang(Duration::from_millis(800))]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state").join(ledger::LEDGER_FILE);
    let mut c = priced(config(server.endpoint()), 1.0, 1.0);
    c.timeout_s = 0.5;
    let client = ModelClient::with_api_key(c, None).unwrap();
    client.keep_ledger(evolve::model::SpendLedger::new(&path));
    let scope = Arc::new(client.scope(1.0, dir.path().join("gen-1/mutate/model")));
    let worst = (4 + 1 + 2 * 4 + 100) as f64 / 1e6;
    let call = {
        let scope = scope.clone();
        tokio::spawn(async move { scope.chat(request("abcd")).await })
    };
    // While the provider holds the request, the ledger holds its worst case: a run
    // killed now leaves exactly this behind.
    let started = Instant::now();
    while server.requests().is_empty() && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let open = ledger::calls(&path).unwrap();
    assert_eq!(open.len(), 1, "{open:?}");
    assert!(close(open[0].reserved_usd, worst), "{open:?}");
    assert_eq!(open[0].settled_usd, None, "{open:?}");
    assert!(open[0].log.ends_with("gen-1/mutate/model"), "{open:?}");
    assert!(
        scope.bill().calls.is_empty(),
        "nothing to bill while in flight"
    );
    // Once the call ends (here: timed out, charged its worst case) it is settled, and
    // the scope's bill lists it for the event that archives the stage's cost.
    assert!(call.await.unwrap().is_err());
    let ended = ledger::calls(&path).unwrap();
    assert!(close(ended[0].settled_usd.unwrap(), worst), "{ended:?}");
    let bill = scope.bill();
    assert_eq!(bill.calls, [open[0].id.clone()]);
    assert!(close(bill.usd, worst), "{bill:?}");
    // A free model writes nothing.
    let free = ModelClient::with_api_key(config(server.endpoint()), None).unwrap();
    let free_path = dir.path().join("free.jsonl");
    free.keep_ledger(evolve::model::SpendLedger::new(&free_path));
    free.scope(1.0, dir.path().join("free"))
        .chat(request("x"))
        .await
        .unwrap();
    assert!(!free_path.exists());
}
