//! The model gateway (`evolve::model::gateway`) served for real: a hyper server on a
//! listener the test binds, called over HTTP by the test as an agent would, forwarding
//! to the scripted upstream on 127.0.0.1 (`support/upstream.rs`), the only test double.

use crate::upstream::{Reply, Upstream, answer, status};
use evaluator_harbor::gateway::{ModelGateway, TrialAccess, TrialModelLog};
use evolve::model::gateway::MAX_REQUEST_BYTES;
use evolve::model::{Gateway, GatewayConfig, ModelClient, ModelConfig, SpendLedger, ledger};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The upstream key: it must never reach the agent, a response or a file.
const CANARY: &str = "sk-canary-7d1e0c5b9a3f4e2d8c6b";
/// $1000 per million tokens each way: a request of one 4-character message (5 prompt
/// tokens estimated) with the 100-token cap has a worst case of $0.105.
const WORST: f64 = 0.105;

struct Setup {
    up: Upstream,
    gateway: Arc<Gateway>,
    dir: tempfile::TempDir,
    ledger: PathBuf,
}

impl Setup {
    fn new(script: Vec<Reply>, budget_usd: f64) -> Setup {
        Self::with(script, budget_usd, |_| {})
    }

    /// A gateway on a fresh upstream; `tweak` edits the `evaluator.model` block first.
    fn with(script: Vec<Reply>, budget_usd: f64, tweak: impl FnOnce(&mut Value)) -> Setup {
        let up = Upstream::start(script);
        let mut block = json!({
            "endpoint": up.endpoint(), "model": "agent-small",
            "allowed_models": ["agent-small", "agent-big"],
            "api_key_env": "EVOLVE_GATEWAY_TEST_KEY",
            "prices": {"input_per_mtok_usd": 1000, "output_per_mtok_usd": 1000},
            "max_tokens": 100, "timeout_s": 5, "max_retries": 3,
        });
        tweak(&mut block);
        let mut config = GatewayConfig::from_recipe(&block).unwrap().unwrap();
        config.model.backoff_s = 0.01;
        // The agent's client shares the operators' pool and ledger, as in a run; the
        // ledger is kept after the gateway's client was made, as the lifecycle does.
        let operators =
            ModelClient::with_api_key(ModelConfig::new("http://127.0.0.1:9/v1", "op"), None)
                .unwrap();
        let client = operators
            .sharing_with_api_key(config.model.clone(), Some(CANARY.into()))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("state").join(ledger::LEDGER_FILE);
        operators.keep_ledger(SpendLedger::new(&ledger));
        let root = dir.path().join("trials");
        let gateway = Gateway::new(client, config.policy(), budget_usd, Some(root)).unwrap();
        Setup {
            up,
            gateway: Arc::new(gateway),
            dir,
            ledger,
        }
    }

    fn open(&self, trial: &str) -> TrialAccess {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        self.gateway.open(trial, listener).unwrap()
    }

    async fn close(&self, access: &TrialAccess) -> TrialModelLog {
        self.gateway.close(access).await
    }
}

/// An HTTP answer as the agent reads it.
#[derive(Debug)]
struct Got {
    status: u16,
    headers: String,
    body: String,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The error's (type, code), asserting the OpenAI shape.
    fn error(&self) -> (String, String) {
        let e = &self.json()["error"];
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            self.body
        );
        (
            e["type"].as_str().unwrap().into(),
            e["code"].as_str().unwrap().into(),
        )
    }

    fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

/// One request on a fresh connection.
async fn send(port: u16, method: &str, path: &str, token: Option<&str>, body: &str) -> Got {
    raw(port, method, path, token, body, body.len())
        .await
        .unwrap()
}

/// [`send`] declaring `length` as the body's size (a body over the cap need not be sent).
async fn raw(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
    length: usize,
) -> std::io::Result<Got> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{auth}content-type: application/json\r\n\
         content-length: {length}\r\nconnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8(buf).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    let status = status.ok_or_else(|| std::io::Error::other(format!("no status in {text:?}")))?;
    Ok(Got {
        status,
        headers: head.to_string(),
        body: body.to_string(),
    })
}

async fn chat(a: &TrialAccess, body: Value) -> Got {
    send(
        a.port,
        "POST",
        "/v1/chat/completions",
        Some(&a.token),
        &body.to_string(),
    )
    .await
}

fn hello() -> Value {
    json!({"messages": [{"role": "user", "content": "abcd"}]})
}

fn close_to(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Every file under `dir`, as text.
fn files_text(dir: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.push_str(&files_text(&path));
        } else {
            out.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    out
}

/// The ledger's calls, by id.
fn ledger_calls(s: &Setup) -> Vec<ledger::Call> {
    ledger::calls(&s.ledger).unwrap()
}

// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_forwards_the_agents_body_with_model_and_cap_set() {
    let calls = json!([{"id": "call_1", "type": "function",
                        "function": {"name": "run", "arguments": "{\"cmd\":\"ls\"}"}}]);
    let s = Setup::new(
        vec![Reply::Ok {
            content: None,
            tool_calls: Some(calls.clone()),
            usage: Some((40, 7)),
        }],
        10.0,
    );
    let a = s.open("task-a__1");
    let tools = json!([{"type": "function", "function": {"name": "run",
                        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]);
    let messages = json!([
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": null, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
    ]);
    let got = chat(
        &a,
        json!({"messages": messages, "tools": tools, "tool_choice": "auto", "temperature": 0.1,
               "response_format": {"type": "text"}, "reasoning_effort": "low",
               "max_tokens": 100000}),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
    let answer = got.json();
    assert_eq!(answer["choices"][0]["message"]["tool_calls"], calls);
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(answer["usage"]["prompt_tokens"], 40);

    // What upstream received: the agent's body, the default model, the capped tokens,
    // the host's key (not the trial's token).
    let seen = s.up.seen();
    assert_eq!(seen.len(), 1);
    let body = &seen[0].body;
    assert_eq!(body["model"], "agent-small");
    assert_eq!(
        body["max_tokens"], 100,
        "lowered to evaluator.model.max_tokens"
    );
    assert_eq!((&body["messages"], &body["tools"]), (&messages, &tools));
    assert_eq!(
        (&body["tool_choice"], &body["reasoning_effort"]),
        (&json!("auto"), &json!("low"))
    );
    assert_eq!(body["response_format"], json!({"type": "text"}));
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    assert_eq!(seen[0].path, "/v1/chat/completions");

    let log = s.close(&a).await;
    assert_eq!(log.usage.calls, 1);
    assert_eq!(
        (log.usage.prompt_tokens, log.usage.completion_tokens),
        (40, 7)
    );
    assert!(
        close_to(log.usage.usd, 47.0 * 1000.0 / 1e6),
        "{:?}",
        log.usage
    );
    assert!(!log.budget_exhausted);
    let ex = &log.exchanges[0];
    assert_eq!(
        (ex.outcome.as_str(), ex.model.as_str()),
        ("ok", "agent-small")
    );
    assert_eq!(ex.messages, messages);
    assert_eq!(ex.tools.as_ref(), Some(&tools));
    assert_eq!(ex.answer.as_ref().unwrap()["tool_calls"], calls);
    // One ledger call, reserved at the worst case and settled at the charge.
    assert_eq!(log.usage.ledger_ids.len(), 1);
    let ledger = ledger_calls(&s);
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].id, log.usage.ledger_ids[0]);
    assert!(ledger[0].reserved_usd >= log.usage.usd, "{ledger:?}");
    assert!(close_to(ledger[0].settled_usd.unwrap(), log.usage.usd));
    assert!(ledger[0].log.contains("task-a__1-"), "{ledger:?}");
    // The trial's model.jsonl, one line for the one attempt, in the directory the
    // ledger names.
    let model_log = std::fs::read_to_string(Path::new(&ledger[0].log).join("model.jsonl")).unwrap();
    assert_eq!(model_log.lines().count(), 1, "{model_log}");
    assert!(model_log.contains("\"tools\""), "{model_log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_relays_the_answer_as_openai_chunks() {
    let s = Setup::new(vec![answer("Hello, agent.", (12, 4))], 10.0);
    let a = s.open("stream");
    let mut body = hello();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let got = chat(&a, body).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(
        got.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    let events: Vec<&str> = got.body.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.last(), Some(&"data: [DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello, agent.");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .collect();
    assert!(finish.contains(&&json!("stop")), "{chunks:?}");
    assert_eq!(chunks.last().unwrap()["usage"]["total_tokens"], 16);
    // Upstream was asked for one answer, not a stream.
    let seen = s.up.seen();
    assert!(seen[0].body.get("stream").is_none() && seen[0].body.get("stream_options").is_none());
    let log = s.close(&a).await;
    assert_eq!(log.exchanges[0].outcome, "ok");
    assert_eq!(
        log.exchanges[0].answer.as_ref().unwrap()["content"],
        "Hello, agent."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_are_listed_and_every_route_wants_the_trials_own_token() {
    let s = Setup::new(vec![], 10.0);
    let (a, b) = (s.open("a"), s.open("b"));
    assert_ne!(a.token, b.token);
    assert_eq!(
        a.env()
            .iter()
            .find(|(k, _)| k == "OPENAI_BASE_URL")
            .unwrap()
            .1,
        format!("http://127.0.0.1:{}/v1", a.port)
    );
    let got = send(a.port, "GET", "/v1/models", Some(&a.token), "").await;
    assert_eq!(got.status, 200, "{}", got.body);
    let list = got.json();
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["agent-small", "agent-big"]);
    assert_eq!(got.json()["object"], "list");
    let got = send(a.port, "GET", "/v1/models/agent-big", Some(&a.token), "").await;
    assert_eq!((got.status, &got.json()["id"]), (200, &json!("agent-big")));

    for token in [None, Some("sk-wrong"), Some(b.token.as_str())] {
        for (method, path) in [("GET", "/v1/models"), ("POST", "/v1/chat/completions")] {
            let got = send(a.port, method, path, token, &hello().to_string()).await;
            assert_eq!(
                got.status, 401,
                "{method} {path} with {token:?}: {}",
                got.body
            );
            assert_eq!(
                got.error(),
                ("invalid_request_error".into(), "invalid_api_key".into())
            );
        }
    }
    let got = send(a.port, "POST", "/v1/completions", Some(&a.token), "{}").await;
    assert_eq!(got.status, 404, "{}", got.body);
    assert!(
        got.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/chat/completions")
    );
    let got = send(a.port, "GET", "/v1/chat/completions", Some(&a.token), "").await;
    assert_eq!(got.status, 405, "{}", got.body);
    assert!(
        s.up.seen().is_empty(),
        "nothing unauthorized reached upstream"
    );
    let log = s.close(&a).await;
    assert_eq!(log.usage.calls, 3, "the three unauthorized chat requests");
    assert!(log.exchanges.iter().all(|e| e.outcome == "unauthorized"));
    // A closed trial's listener is gone; the other trial is still served.
    assert!(
        raw(a.port, "GET", "/v1/models", Some(&a.token), "", 0)
            .await
            .is_err()
    );
    assert_eq!(
        send(b.port, "GET", "/v1/models", Some(&b.token), "")
            .await
            .status,
        200
    );
    s.close(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_model_is_refused_naming_the_allowed_ones() {
    let s = Setup::new(vec![], 10.0);
    let a = s.open("policy");
    let mut body = hello();
    body["model"] = json!("gpt-expensive");
    let got = chat(&a, body.clone()).await;
    assert_eq!(got.status, 403, "{}", got.body);
    assert_eq!(
        got.error(),
        ("invalid_request_error".into(), "model_not_allowed".into())
    );
    let message = got.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("gpt-expensive") && message.contains("agent-small, agent-big"),
        "{message}"
    );
    assert!(s.up.seen().is_empty());
    body["model"] = json!("agent-big");
    assert_eq!(chat(&a, body).await.status, 200);
    assert_eq!(s.up.seen()[0].body["model"], "agent-big");
    let log = s.close(&a).await;
    let outcomes: Vec<&str> = log.exchanges.iter().map(|e| e.outcome.as_str()).collect();
    assert_eq!(outcomes, ["model_not_allowed", "ok"]);
    assert_eq!(log.exchanges[0].model, "gpt-expensive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_400_and_a_huge_body_413() {
    let s = Setup::new(vec![], 10.0);
    let a = s.open("bad");
    let cases = [
        ("{not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        ("{\"messages\": []}", "must not be empty"),
        ("{\"model\": \"agent-small\"}", "messages is required"),
        (
            "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": -3}",
            "max_tokens",
        ),
    ];
    for (body, expected) in cases {
        let got = send(a.port, "POST", "/v1/chat/completions", Some(&a.token), body).await;
        assert_eq!(got.status, 400, "{body}: {}", got.body);
        assert_eq!(got.error().0, "invalid_request_error");
        let message = got.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(message.contains(expected), "{body}: {message}");
        assert_eq!(got.header("x-should-retry").as_deref(), Some("false"));
    }
    // A body over the cap is refused from its declared length, before it is read.
    let got = raw(
        a.port,
        "POST",
        "/v1/chat/completions",
        Some(&a.token),
        "",
        MAX_REQUEST_BYTES + 1,
    )
    .await
    .unwrap();
    assert_eq!(got.status, 413, "{}", got.body);
    assert_eq!(got.error().1, "request_too_large");
    assert!(s.up.seen().is_empty());
    let log = s.close(&a).await;
    assert_eq!(log.exchanges.len(), 6);
    assert!(log.exchanges.iter().all(|e| e.outcome == "invalid_request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_trials_never_overshoot_the_budget_and_get_a_typed_429() {
    // Room for five worst cases, not six. Upstream holds every answer until the test
    // lets go, so all twenty requests are in flight together, and reports usage equal
    // to the worst case, so five answers spend $0.525 of $0.5775.
    let held = || Reply::Gated(Box::new(answer("ok", (5, 100))));
    let s = Setup::new((0..20).map(|_| held()).collect(), 5.5 * WORST);
    let trials: Vec<TrialAccess> = (0..4).map(|i| s.open(&format!("t{i}"))).collect();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let a = trials[i % 4].clone();
        tasks.push(tokio::spawn(async move { chat(&a, hello()).await }));
    }
    // Five reach upstream and wait there; the fifteen others are refused meanwhile.
    s.up.wait_for(5);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        s.up.seen().len(),
        5,
        "only what the budget can pay for is forwarded"
    );
    s.up.open_gate();
    let mut ok = 0;
    let mut refused = 0;
    for t in tasks {
        let got = t.await.unwrap();
        match got.status {
            200 => ok += 1,
            429 => {
                refused += 1;
                assert_eq!(
                    got.error(),
                    ("budget_exhausted".into(), "budget_exhausted".into())
                );
                assert!(got.body.contains("budget-exhausted"), "{}", got.body);
                assert_eq!(got.header("x-should-retry").as_deref(), Some("false"));
            }
            other => panic!("HTTP {other}: {}", got.body),
        }
    }
    assert_eq!((ok, refused), (5, 15));
    assert!(
        s.gateway.spent_usd() <= 5.5 * WORST + 1e-12,
        "{}",
        s.gateway.spent_usd()
    );
    assert!(close_to(s.gateway.spent_usd(), 5.0 * WORST));
    let mut logs = Vec::new();
    for a in &trials {
        logs.push(s.close(a).await);
    }
    let total: f64 = logs.iter().map(|l| l.usage.usd).sum();
    assert!(close_to(total, 5.0 * WORST), "{total}");
    let refusals: u64 = logs.iter().map(|l| l.usage.refused_by_budget).sum();
    assert_eq!(refusals, 15);
    for log in &logs {
        assert_eq!(log.budget_exhausted, log.usage.refused_by_budget > 0);
        let exhausted = log
            .exchanges
            .iter()
            .filter(|e| e.outcome == "budget_exhausted")
            .count();
        assert_eq!(exhausted as u64, log.usage.refused_by_budget);
    }
    // Every forwarded call was reserved and settled in the ledger; refused ones never
    // reached it.
    let ledger = ledger_calls(&s);
    assert_eq!(ledger.len(), 5);
    let ids: Vec<&String> = logs.iter().flat_map(|l| &l.usage.ledger_ids).collect();
    assert_eq!(ids.len(), 5);
    for call in &ledger {
        assert!(ids.contains(&&call.id), "{call:?}");
        assert!(close_to(call.reserved_usd, WORST) && close_to(call.settled_usd.unwrap(), WORST));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_faults_are_retried_then_a_typed_error() {
    let big = Reply::Huge(17 << 20);
    let s = Setup::with(
        vec![
            // Retried to success: 429, 500, garbage, an answer too large.
            status(429),
            status(500),
            Reply::Garbage,
            big.clone(),
            answer("recovered", (5, 1)),
        ],
        10.0,
        |b| b["max_retries"] = json!(4),
    );
    let a = s.open("faults");
    let got = chat(&a, hello()).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.json()["choices"][0]["message"]["content"], "recovered");
    assert_eq!(s.up.seen().len(), 5);

    // Retries run out: a 502 saying what upstream kept doing.
    s.up.push((0..5).map(|_| status(503)).collect());
    let got = chat(&a, hello()).await;
    assert_eq!(got.status, 502, "{}", got.body);
    assert_eq!(
        got.error(),
        ("upstream_error".into(), "upstream_unavailable".into())
    );
    let message = got.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("after 5 attempts") && message.contains("HTTP 503"),
        "{message}"
    );
    s.up.push((0..5).map(|_| status(429)).collect());
    assert_eq!(chat(&a, hello()).await.error().1, "upstream_rate_limited");
    s.up.push((0..5).map(|_| Reply::Garbage).collect());
    assert_eq!(chat(&a, hello()).await.error().1, "upstream_unavailable");
    assert_eq!(s.up.seen().len(), 20);

    // A request the provider refuses is the agent's: 400 with its (redacted) reason.
    s.up.push(vec![Reply::Status(
        400,
        json!({"error": {"message": "tools[0] is invalid"}}),
    )]);
    let got = chat(&a, hello()).await;
    assert_eq!(got.status, 400, "{}", got.body);
    assert_eq!(got.error().1, "upstream_refused");
    assert!(got.body.contains("tools[0] is invalid"), "{}", got.body);
    // JSON that is not a completion is not retried.
    s.up.push(vec![Reply::Status(200, json!({"nothing": "here"}))]);
    assert_eq!(chat(&a, hello()).await.error().1, "upstream_bad_answer");
    assert_eq!(s.up.seen().len(), 22);
    let log = s.close(&a).await;
    let outcomes: Vec<&str> = log.exchanges.iter().map(|e| e.outcome.as_str()).collect();
    assert_eq!(
        outcomes,
        ["ok", "failed", "failed", "failed", "refused", "failed"]
    );
    assert!(
        log.exchanges[1]
            .error
            .as_ref()
            .unwrap()
            .contains("HTTP 503")
    );
    assert!(
        close_to(log.usage.usd, 6.0 * 1000.0 / 1e6),
        "only the answer is charged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upstream_is_a_504_charged_its_worst_case() {
    let slow = Reply::Slow(Duration::from_secs(3), Box::new(answer("late", (5, 1))));
    let s = Setup::with(vec![slow], 10.0, |b| b["timeout_s"] = json!(0.5));
    let a = s.open("slow");
    let got = chat(&a, hello()).await;
    assert_eq!(got.status, 504, "{}", got.body);
    assert_eq!(
        got.error(),
        ("upstream_error".into(), "upstream_timeout".into())
    );
    let log = s.close(&a).await;
    assert_eq!(log.exchanges[0].outcome, "timeout");
    assert!(close_to(log.exchanges[0].usd, WORST) && close_to(log.usage.usd, WORST));
    let ledger = ledger_calls(&s);
    assert!(
        close_to(ledger[0].settled_usd.unwrap(), WORST),
        "{ledger:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_trial_aborts_its_request_in_flight_at_the_worst_case() {
    let s = Setup::new(vec![Reply::Gated(Box::new(answer("never", (5, 1))))], 10.0);
    let a = s.open("killed");
    let pending = {
        let a = a.clone();
        tokio::spawn(async move {
            let body = hello().to_string();
            raw(
                a.port,
                "POST",
                "/v1/chat/completions",
                Some(&a.token),
                &body,
                body.len(),
            )
            .await
        })
    };
    s.up.wait_for(1);
    let open = ledger_calls(&s);
    assert_eq!(
        (open.len(), open[0].settled_usd),
        (1, None),
        "reserved before it was sent"
    );
    let log = s.close(&a).await;
    assert!(
        pending.await.unwrap().is_err(),
        "the agent's connection is dropped"
    );
    assert_eq!(log.exchanges.len(), 1);
    assert_eq!(log.exchanges[0].outcome, "failed");
    assert!(
        log.exchanges[0]
            .error
            .as_ref()
            .unwrap()
            .contains("in flight")
    );
    assert!(close_to(log.usage.usd, WORST), "{:?}", log.usage);
    assert!(close_to(ledger_calls(&s)[0].settled_usd.unwrap(), WORST));
    assert_eq!(log.usage.ledger_ids, [open[0].id.clone()]);
    assert!(
        close_to(s.gateway.remaining_usd(), 10.0 - WORST),
        "the reservation is released"
    );
    s.up.open_gate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_and_the_endpoint_reach_no_response_and_no_log() {
    let s = Setup::new(vec![], 10.0);
    let endpoint = s.up.endpoint();
    let authority = format!("127.0.0.1:{}", s.up.port);
    s.up.push(vec![
        // The provider echoes the key in a refusal, in failures that are retried, and
        // (a misbehaving proxy) in an answer that also names the endpoint.
        Reply::EchoAuth(400),
        Reply::EchoAuth(401),
        Reply::EchoAuth(500),
        Reply::EchoAuth(500),
        Reply::EchoAuth(500),
        Reply::EchoAuth(500),
        Reply::Ok {
            content: Some(format!("your key is {CANARY}, served from {endpoint}")),
            tool_calls: None,
            usage: Some((5, 9)),
        },
    ]);
    let a = s.open("canary");
    let mut bodies = String::new();
    for expected in [400, 502, 502, 200] {
        let mut body = hello();
        if expected == 200 {
            body["stream"] = json!(true);
        }
        let got = chat(&a, body).await;
        assert_eq!(got.status, expected, "{}", got.body);
        bodies.push_str(&got.headers);
        bodies.push_str(&got.body);
    }
    assert!(bodies.contains("Incorrect API key provided"), "{bodies}");
    assert!(bodies.contains("your key is"), "{bodies}");
    let log = s.close(&a).await;
    let log_text = serde_json::to_string(&log.exchanges).unwrap();
    let model_log = s.dir.path().join("trials/canary-1/model.jsonl");
    assert!(
        model_log.is_file() && s.ledger.is_file(),
        "the logs exist to be searched"
    );
    let files = files_text(s.dir.path());
    for (what, text) in [
        ("a response", &bodies),
        ("the exchange log", &log_text),
        ("a file", &files),
    ] {
        assert!(!text.contains(CANARY), "the key is in {what}");
        assert!(
            !text.contains(&CANARY[..12]),
            "part of the key is in {what}"
        );
        assert!(!text.contains(&authority), "the endpoint is in {what}");
    }
}
