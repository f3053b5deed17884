//! One stage call's model backend: budget check, bounded retries, metering, the log.
//!
//! The model gateway (`super::gateway`) meters the agent's calls with the same code: it
//! hands [`MeteredModel::forward`] the agent's own request body, prepared, where the
//! typed `chat` path hands it the operator's request; both reserve, send, retry, meter,
//! write the ledger and the log in [`MeteredModel::run`].

use super::budget::{Bill, BudgetPool, estimate_input_tokens, estimate_output_tokens};
use super::client::{Attempt, Completion, ModelClient};
use crate::sandbox::BoxFuture;
use crate::sandbox::ModelBackend;
use crate::sandbox::model::{
    ChatRequest, ChatResponse, Completion as Completed, CompletionRequest, ModelError, Role,
};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The log file a scope appends to, inside its `log_dir`.
pub const LOG_FILE: &str = "model.jsonl";

/// What one scope spent, as metered by the host.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Usage {
    /// `chat` calls the operator made (refused and failed ones included).
    pub calls: u64,
    /// Calls that returned an answer.
    pub succeeded: u64,
    /// Calls refused before any request because the budget could not pay for them.
    pub refused_by_budget: u64,
    /// HTTP requests sent (retries included).
    pub attempts: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Calls whose tokens were estimated because the provider reported no usage.
    pub estimated_calls: u64,
    /// Calls that timed out, charged at their worst case.
    pub timed_out_calls: u64,
    pub usd: f64,
    /// Log lines that could not be written.
    pub log_errors: u64,
}

#[derive(Default)]
struct State {
    usage: Usage,
    /// Spend-ledger ids of the calls that ended, whose charges `usage.usd` holds.
    billed: Vec<String>,
}

/// The [`ModelBackend`] of one stage call, made by [`ModelClient::scope`]; also the
/// meter of one trial's calls through the model gateway.
///
/// The lifecycle reads [`spent_usd`](Self::spent_usd) and [`usage`](Self::usage)
/// after the stage; nothing the operator reports about its own usage is used.
pub struct MeteredModel {
    pub(super) client: ModelClient,
    pool: Arc<BudgetPool>,
    /// `None`: no `model.jsonl` is written (a gateway given no log root).
    log_path: Option<PathBuf>,
    state: Mutex<State>,
    log: Mutex<()>,
}

impl ModelClient {
    /// A backend for one stage call: it refuses calls the remaining budget cannot pay
    /// for, meters what the provider reports, and appends every attempt to
    /// `<log_dir>/model.jsonl`.
    pub fn scope(&self, budget_left_usd: f64, log_dir: PathBuf) -> MeteredModel {
        MeteredModel::new(
            self.clone(),
            BudgetPool::new(budget_left_usd),
            Some(log_dir),
        )
    }
}

/// One request ready to send, as the typed `chat` path and the gateway's relay of the
/// agent's own body both hand it to the meter.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// The JSON object posted, `model` and the token cap already set.
    pub body: Value,
    /// The completion tokens the request may use (its cap).
    pub max_tokens: u32,
    /// The prompt's tokens, estimated.
    pub input_estimate: u64,
}

/// A call that was answered, metered.
pub(crate) struct Answer {
    pub completion: Completion,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The provider reported no usage: the tokens are estimates.
    pub estimated: bool,
    pub usd: f64,
}

/// How a metered call failed. Reasons are redacted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CallError {
    /// The worst case did not fit the budget; nothing was sent.
    BudgetExhausted,
    /// The host could not record the reservation; nothing was sent.
    Ledger(String),
    /// A 4xx other than 429: the provider will not take this request.
    Refused { status: u16, reason: String },
    /// Not worth retrying: an answer that is not a chat completion, an odd status.
    Failed { status: Option<u16>, reason: String },
    /// Every attempt met a 429, a 5xx, a connection error or a garbled answer.
    Exhausted {
        attempts: u32,
        status: Option<u16>,
        reason: String,
    },
    /// `timeout_s` passed; charged the worst case.
    Timeout { timeout_s: f64 },
}

impl CallError {
    /// The text an operator (or the agent) is told.
    pub fn message(&self) -> String {
        match self {
            CallError::BudgetExhausted => {
                "the experiment's budget cannot pay for this call's worst case".into()
            }
            CallError::Ledger(why) | CallError::Failed { reason: why, .. } => why.clone(),
            CallError::Refused { reason, .. } => {
                format!("the provider refused the request ({reason})")
            }
            CallError::Exhausted {
                attempts, reason, ..
            } => format!("the provider kept failing after {attempts} attempts (last: {reason})"),
            CallError::Timeout { timeout_s } => {
                format!("the provider did not answer within timeout_s ({timeout_s} s)")
            }
        }
    }
}

impl From<CallError> for ModelError {
    fn from(e: CallError) -> ModelError {
        match e {
            CallError::BudgetExhausted => ModelError::BudgetExhausted,
            CallError::Timeout { .. } => ModelError::Timeout,
            CallError::Refused { .. } => ModelError::Refused(e.message()),
            _ => ModelError::Failed(e.message()),
        }
    }
}

impl MeteredModel {
    /// A meter drawing on `pool`, logging to `<log_dir>/model.jsonl` when given one.
    pub(crate) fn new(
        client: ModelClient,
        pool: Arc<BudgetPool>,
        log_dir: Option<PathBuf>,
    ) -> Self {
        MeteredModel {
            client,
            pool,
            log_path: log_dir.map(|d| d.join(LOG_FILE)),
            state: Mutex::new(State::default()),
            log: Mutex::new(()),
        }
    }

    /// USD metered in this scope so far.
    pub fn spent_usd(&self) -> f64 {
        self.lock().usage.usd
    }

    pub fn usage(&self) -> Usage {
        self.lock().usage.clone()
    }

    /// What this scope's ended calls were charged, with their ledger ids, read at once.
    pub fn bill(&self) -> Bill {
        let s = self.lock();
        Bill {
            usd: s.usage.usd,
            calls: s.billed.clone(),
        }
    }

    /// The budget this scope was given (its pool's, when it shares one).
    pub fn budget_usd(&self) -> f64 {
        self.pool.budget_usd()
    }

    /// The budget left after what was spent and what calls in flight may spend (by
    /// every meter of the pool).
    pub fn remaining_usd(&self) -> f64 {
        self.pool.remaining_usd()
    }

    /// The scope's `model.jsonl` (empty when it keeps no log).
    pub fn log_path(&self) -> &Path {
        self.log_path.as_deref().unwrap_or(Path::new(""))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn next_call(&self) -> u64 {
        let mut s = self.lock();
        s.usage.calls += 1;
        s.usage.calls
    }

    /// The typed path: the operator's [`ChatRequest`] checked and made an [`Outgoing`].
    async fn call(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let config = self.client.config();
        let call = self.next_call();
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| json!({"role": role_name(m.role), "content": m.content}))
            .collect();
        let mut body = json!({"model": config.model, "messages": messages});
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Err(why) = check_request(&request) {
            let line = LogLine {
                call,
                max_tokens: None,
                body: &body,
                client: &self.client,
                named: None,
            };
            return Err(self.refuse(&line, why));
        }
        let max_tokens = capped_max_tokens(request.max_tokens, config);
        body["max_tokens"] = json!(max_tokens);
        let out = Outgoing {
            body,
            max_tokens,
            input_estimate: estimate_input_tokens(&request),
        };
        let answer = self.run(call, out, &self.client, None).await?;
        Ok(ChatResponse {
            content: answer.completion.content,
            input_tokens: answer.input_tokens,
            output_tokens: answer.output_tokens,
            usd: answer.usd,
        })
    }

    /// Send a prepared request: the gateway's path into the same reservation, retries,
    /// metering, ledger and log as the typed one.
    pub(crate) async fn forward(&self, out: Outgoing) -> Result<Answer, CallError> {
        let call = self.next_call();
        self.run(call, out, &self.client, None).await
    }

    /// What `out` may cost at most: its input estimate and its token cap, priced.
    pub(crate) fn worst_case_usd(&self, out: &Outgoing) -> f64 {
        self.client
            .config()
            .prices
            .usd(out.input_estimate, u64::from(out.max_tokens))
    }

    /// Reserve the worst case (or refuse), record it in the ledger, send, settle; to
    /// `client` (the scope's own, or one of its named models, `named`).
    pub(super) async fn run(
        &self,
        call: u64,
        out: Outgoing,
        client: &ModelClient,
        named: Option<&str>,
    ) -> Result<Answer, CallError> {
        let worst_usd = client
            .config()
            .prices
            .usd(out.input_estimate, u64::from(out.max_tokens));
        let line = LogLine {
            call,
            max_tokens: Some(out.max_tokens),
            body: &out.body,
            client,
            named,
        };
        if let Err(remaining) = self.pool.reserve(worst_usd) {
            self.lock().usage.refused_by_budget += 1;
            self.write_log(
                &line,
                0,
                json!({
                    "outcome": "budget_exhausted",
                    "estimated_input_tokens": out.input_estimate,
                    "worst_case_usd": worst_usd,
                    "remaining_usd": remaining,
                }),
            );
            return Err(CallError::BudgetExhausted);
        }
        // Released when the call ends, also when its future is dropped mid-flight.
        let mut reservation = Reservation {
            scope: self,
            usd: worst_usd,
            ledger_id: None,
            settled: false,
        };
        // Durably, before anything is sent: a run killed during the call still pays.
        if let Some(ledger) = self.client.ledger().filter(|_| worst_usd > 0.0) {
            let dir = self.log_path().parent().unwrap_or(Path::new(""));
            match ledger.reserve(worst_usd, dir, named) {
                Ok(id) => reservation.ledger_id = Some(id),
                Err(e) => {
                    reservation.settle(0.0); // nothing was sent
                    // No path: the operator reads this text.
                    let why = format!(
                        "the host could not record the call's reservation ({e}): nothing was sent"
                    );
                    self.write_log(&line, 0, json!({"outcome": "failed", "error": why}));
                    return Err(CallError::Ledger(why));
                }
            }
        }
        let body = Bytes::from(serde_json::to_vec(&out.body).expect("a JSON value serializes"));
        let (result, charged) = self.send(&line, body, out.input_estimate, worst_usd).await;
        reservation.settle(charged);
        result
    }

    /// The retry loop; every attempt is logged. Charges the scope for what it meters
    /// and returns that charge with the outcome.
    async fn send(
        &self,
        line: &LogLine<'_>,
        body: Bytes,
        input_estimate: u64,
        worst_usd: f64,
    ) -> (Result<Answer, CallError>, f64) {
        let client = line.client;
        let config = client.config();
        let deadline = Instant::now() + Duration::from_secs_f64(config.timeout_s);
        let attempts = config.max_retries + 1;
        let (mut last_reason, mut last_status) = (String::new(), None);
        for attempt in 1..=attempts {
            let left = deadline.saturating_duration_since(Instant::now());
            let started = Instant::now();
            let outcome = if left.is_zero() {
                Attempt::Timeout
            } else {
                self.lock().usage.attempts += 1;
                client.attempt(body.clone(), left).await
            };
            let latency_ms = started.elapsed().as_millis() as u64;
            match outcome {
                Attempt::Ok { status, completion } => {
                    let answer = self.meter(completion, input_estimate, client);
                    self.write_log(
                        line,
                        attempt,
                        json!({
                            "outcome": "ok",
                            "status": status,
                            "latency_ms": latency_ms,
                            "input_tokens": answer.input_tokens,
                            "output_tokens": answer.output_tokens,
                            "usage_estimated": answer.estimated,
                            "usd": answer.usd,
                            "answer": answer.completion.content,
                            "tool_calls": answer.completion.message().get("tool_calls"),
                            "finish_reason": answer.completion.json["choices"][0].get("finish_reason"),
                        }),
                    );
                    self.client.note_call(None);
                    let usd = answer.usd;
                    return (Ok(answer), usd);
                }
                Attempt::Retry {
                    status,
                    reason,
                    retry_after,
                } => {
                    let last = attempt == attempts;
                    let delay = retry_after
                        .map(|d| d.min(Duration::from_secs_f64(config.retry_after_cap_s)))
                        .unwrap_or_else(|| {
                            Duration::from_secs_f64(config.backoff_s)
                                * 2u32.saturating_pow(attempt - 1)
                        });
                    self.write_log(
                        line,
                        attempt,
                        json!({
                            "outcome": if last { "failed" } else { "retry" },
                            "status": status,
                            "latency_ms": latency_ms,
                            "error": reason,
                            "retry_in_ms": (!last).then_some(delay.as_millis() as u64),
                        }),
                    );
                    (last_reason, last_status) = (reason, status);
                    if !last {
                        let left = deadline.saturating_duration_since(Instant::now());
                        tokio::time::sleep(delay.min(left)).await;
                    }
                }
                Attempt::Refused { status, reason } => {
                    // A refused key fails every call alike; another 4xx is this request's.
                    if matches!(status, 401 | 403) {
                        self.client.note_call(Some(&reason));
                    }
                    self.write_log(
                        line,
                        attempt,
                        json!({
                            "outcome": "refused",
                            "status": status,
                            "latency_ms": latency_ms,
                            "error": reason,
                        }),
                    );
                    return (Err(CallError::Refused { status, reason }), 0.0);
                }
                Attempt::Failed { status, reason } => {
                    self.write_log(
                        line,
                        attempt,
                        json!({
                            "outcome": "failed",
                            "status": status,
                            "latency_ms": latency_ms,
                            "error": reason,
                        }),
                    );
                    self.client.note_call(Some(&reason));
                    return (Err(CallError::Failed { status, reason }), 0.0);
                }
                Attempt::Timeout => {
                    // The provider may still bill for a request it went on serving:
                    // charge the worst case so the budget stays an upper bound.
                    {
                        let mut s = self.lock();
                        s.usage.timed_out_calls += 1;
                        s.usage.usd += worst_usd;
                    }
                    self.write_log(
                        line,
                        attempt,
                        json!({
                            "outcome": "timeout",
                            "latency_ms": latency_ms,
                            "timeout_s": config.timeout_s,
                            "usd": worst_usd,
                        }),
                    );
                    let err = CallError::Timeout {
                        timeout_s: config.timeout_s,
                    };
                    self.client.note_call(Some(&err.message()));
                    return (Err(err), worst_usd);
                }
            }
        }
        let err = CallError::Exhausted {
            attempts,
            status: last_status,
            reason: last_reason,
        };
        self.client.note_call(Some(&err.message()));
        (Err(err), 0.0)
    }

    /// Charge an answer: the provider's reported usage, else estimates.
    fn meter(&self, completion: Completion, input_estimate: u64, client: &ModelClient) -> Answer {
        let estimated = completion.usage.is_none();
        let (input_tokens, output_tokens) = completion
            .usage
            .unwrap_or_else(|| (input_estimate, estimate_output_tokens(&completion)));
        let usd = client.config().prices.usd(input_tokens, output_tokens);
        let mut s = self.lock();
        s.usage.succeeded += 1;
        s.usage.input_tokens += input_tokens;
        s.usage.output_tokens += output_tokens;
        s.usage.usd += usd;
        if estimated {
            s.usage.estimated_calls += 1;
        }
        Answer {
            completion,
            input_tokens,
            output_tokens,
            estimated,
            usd,
        }
    }

    /// Append one redacted JSON line; failures are counted in [`Usage::log_errors`].
    /// A request refused before anything was sent: logged as attempt 0, and the
    /// operator's `invalid-request` error.
    pub(super) fn refuse(&self, line: &LogLine<'_>, why: String) -> ModelError {
        self.write_log(line, 0, json!({"outcome": "invalid_request", "error": why}));
        ModelError::InvalidRequest(why)
    }

    pub(super) fn write_log(&self, line: &LogLine<'_>, attempt: u32, outcome: Value) {
        let Some(log_path) = &self.log_path else {
            return;
        };
        let field = |key: &str| line.body.get(key).cloned().unwrap_or(Value::Null);
        let mut record = json!({
            "ts": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            "call": line.call,
            "attempt": attempt,
            "model": field("model"),
            "max_tokens": line.max_tokens,
            "temperature": field("temperature"),
            "messages": field("messages"),
        });
        if let Some(name) = line.named {
            record["named_model"] = json!(name);
        }
        for key in [
            "tools",
            "tool_choice",
            "reasoning_effort",
            "response_format",
        ] {
            if let Some(v) = line.body.get(key) {
                record[key] = v.clone();
            }
        }
        if let (Some(record), Value::Object(outcome)) = (record.as_object_mut(), outcome) {
            record.extend(outcome);
        }
        let mut record = self.client.redactor().redact_value(record);
        if !std::ptr::eq(line.client, &self.client) {
            // A named model's own endpoint and key.
            record = line.client.redactor().redact_value(record);
        }
        let mut text = serde_json::to_string(&record).expect("a JSON value serializes");
        text.push('\n');
        let _guard = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let written = (|| -> std::io::Result<()> {
            if let Some(dir) = log_path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log_path)?;
            file.write_all(text.as_bytes())
        })();
        if written.is_err() {
            self.lock().usage.log_errors += 1;
        }
    }
}

impl ModelBackend for MeteredModel {
    fn chat(&self, request: ChatRequest) -> BoxFuture<'_, Result<ChatResponse, ModelError>> {
        Box::pin(self.call(request))
    }
    fn complete(&self, request: CompletionRequest) -> BoxFuture<'_, Result<Completed, ModelError>> {
        Box::pin(self.call_complete(request))
    }
}

/// A call's worst case, held against the budget while it runs (and in the spend
/// ledger, when the client keeps one).
struct Reservation<'a> {
    scope: &'a MeteredModel,
    usd: f64,
    ledger_id: Option<String>,
    /// The call ended and was charged; otherwise its future was dropped mid-flight.
    settled: bool,
}

impl Reservation<'_> {
    /// The call ended, charged `usd` (already added to the scope's usage): the pool
    /// and the ledger learn it, once.
    fn settle(&mut self, usd: f64) {
        if self.settled {
            return;
        }
        self.settled = true;
        self.scope.pool.release(self.usd, usd);
        if let (Some(ledger), Some(id)) = (self.scope.client.ledger(), &self.ledger_id) {
            ledger.settle(id, usd);
            self.scope.lock().billed.push(id.clone());
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.settled {
            // Abandoned in flight (the stage was stopped, the trial closed): the
            // provider may still serve and bill the request, so it costs its worst
            // case, like a timeout.
            self.scope.lock().usage.usd += self.usd;
            self.settle(self.usd);
        }
    }
}

/// The parts of a log line every attempt of one call shares.
pub(super) struct LogLine<'a> {
    pub call: u64,
    pub max_tokens: Option<u32>,
    /// The request's JSON: its `model`, `messages`, `temperature`, `tools`,
    /// `tool_choice`, `reasoning_effort` and `response_format` are logged.
    pub body: &'a Value,
    /// The client the call goes to: the scope's own, or a named model's.
    pub client: &'a ModelClient,
    /// The recipe's named model, when the call names one.
    pub named: Option<&'a str>,
}

/// The `max_tokens` sent: the operator's ask, or the configured default, never above
/// the configured cap.
pub(super) fn capped_max_tokens(asked: Option<u32>, config: &super::ModelConfig) -> u32 {
    asked.unwrap_or(config.max_tokens).min(config.max_tokens)
}

fn check_request(request: &ChatRequest) -> Result<(), String> {
    if request.messages.is_empty() {
        return Err("messages must not be empty".into());
    }
    if request.max_tokens == Some(0) {
        return Err("max-tokens must be at least 1".into());
    }
    if let Some(t) = request.temperature
        && !(t.is_finite() && (0.0..=2.0).contains(&t))
    {
        return Err("temperature must be between 0 and 2".into());
    }
    Ok(())
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}
