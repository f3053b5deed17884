//! One stage call's model backend: budget check, bounded retries, metering, the log.

use super::client::{Attempt, ModelClient};
use crate::sandbox::BoxFuture;
use crate::sandbox::ModelBackend;
use crate::sandbox::model::{ChatRequest, ChatResponse, ModelError, Role};
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The log file a scope appends to, inside its `log_dir`.
pub const LOG_FILE: &str = "model.jsonl";
/// Tokens counted per message for role and framing in the input estimate.
pub const TOKENS_PER_MESSAGE: u64 = 4;

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
    /// Worst cases of calls in flight, held against the budget until they end.
    reserved_usd: f64,
    /// Spend-ledger ids of the calls that ended, whose charges `usage.usd` holds.
    billed: Vec<String>,
}

/// What a scope's ended calls were charged, and their spend-ledger ids. The archive
/// event whose `cost_usd` includes `usd` lists `calls` under
/// [`MODEL_CALLS_KEY`](super::ledger::MODEL_CALLS_KEY), so the ledger never charges them
/// again (`super::ledger`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bill {
    pub usd: f64,
    pub calls: Vec<String>,
}

impl Bill {
    pub fn add(&mut self, other: Bill) {
        self.usd += other.usd;
        self.calls.extend(other.calls);
    }

    /// The calls an archive event lists (`None` when there are none, as for a free
    /// model: the key is left out). The event's `cost_usd` may include more than `usd`.
    pub fn listed_calls(&self) -> Option<Vec<String>> {
        (!self.calls.is_empty()).then(|| self.calls.clone())
    }
}

/// The [`ModelBackend`] of one stage call, made by [`ModelClient::scope`].
///
/// The lifecycle reads [`spent_usd`](Self::spent_usd) and [`usage`](Self::usage)
/// after the stage; nothing the operator reports about its own usage is used.
pub struct MeteredModel {
    client: ModelClient,
    budget_left_usd: f64,
    log_path: PathBuf,
    state: Mutex<State>,
    log: Mutex<()>,
}

impl ModelClient {
    /// A backend for one stage call: it refuses calls the remaining budget cannot pay
    /// for, meters what the provider reports, and appends every attempt to
    /// `<log_dir>/model.jsonl`.
    pub fn scope(&self, budget_left_usd: f64, log_dir: PathBuf) -> MeteredModel {
        MeteredModel::new(self.clone(), budget_left_usd, log_dir)
    }
}

impl MeteredModel {
    pub(crate) fn new(client: ModelClient, budget_left_usd: f64, log_dir: PathBuf) -> Self {
        let budget_left_usd = if budget_left_usd.is_nan() {
            0.0
        } else {
            budget_left_usd.max(0.0)
        };
        MeteredModel {
            client,
            budget_left_usd,
            log_path: log_dir.join(LOG_FILE),
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

    /// The budget this scope was given.
    pub fn budget_usd(&self) -> f64 {
        self.budget_left_usd
    }

    /// The budget left after what was spent and what calls in flight may spend.
    pub fn remaining_usd(&self) -> f64 {
        let s = self.lock();
        self.budget_left_usd - s.usage.usd - s.reserved_usd
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn call(&self, request: ChatRequest) -> Result<ChatResponse, ModelError> {
        let config = self.client.config();
        let call = {
            let mut s = self.lock();
            s.usage.calls += 1;
            s.usage.calls
        };
        let messages: Vec<Value> = request
            .messages
            .iter()
            .map(|m| json!({"role": role_name(m.role), "content": m.content}))
            .collect();
        let mut line = LogLine {
            call,
            model: &config.model,
            messages: &messages,
            max_tokens: None,
            temperature: request.temperature,
        };

        if let Err(why) = check_request(&request) {
            let err = ModelError::InvalidRequest(why.clone());
            self.write_log(
                &line,
                0,
                json!({"outcome": "invalid_request", "error": why}),
            );
            return Err(err);
        }
        let max_tokens = request
            .max_tokens
            .unwrap_or(config.max_tokens)
            .min(config.max_tokens);
        line.max_tokens = Some(max_tokens);
        let input_estimate = estimate_input_tokens(&request);
        let worst_usd = config.prices.usd(input_estimate, u64::from(max_tokens));

        // Reserve the worst case, or refuse.
        {
            let mut s = self.lock();
            let remaining = self.budget_left_usd - s.usage.usd - s.reserved_usd;
            if worst_usd > 0.0 && worst_usd > remaining {
                s.usage.refused_by_budget += 1;
                drop(s);
                self.write_log(
                    &line,
                    0,
                    json!({
                        "outcome": "budget_exhausted",
                        "estimated_input_tokens": input_estimate,
                        "worst_case_usd": worst_usd,
                        "remaining_usd": remaining,
                    }),
                );
                return Err(ModelError::BudgetExhausted);
            }
            s.reserved_usd += worst_usd;
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
            let dir = self.log_path.parent().unwrap_or(Path::new(""));
            match ledger.reserve(worst_usd, dir) {
                Ok(id) => reservation.ledger_id = Some(id),
                Err(e) => {
                    reservation.settled = true; // nothing was sent
                    // No path: the operator reads this text.
                    let why = format!(
                        "the host could not record the call's reservation ({e}): nothing was sent"
                    );
                    self.write_log(&line, 0, json!({"outcome": "failed", "error": why}));
                    return Err(ModelError::Failed(why));
                }
            }
        }
        let (result, charged) = self
            .send(&line, &request, max_tokens, input_estimate, worst_usd)
            .await;
        reservation.settle(charged);
        result
    }

    /// The retry loop; every attempt is logged. Charges the scope for what it meters
    /// and returns that charge with the outcome.
    async fn send(
        &self,
        line: &LogLine<'_>,
        request: &ChatRequest,
        max_tokens: u32,
        input_estimate: u64,
        worst_usd: f64,
    ) -> (Result<ChatResponse, ModelError>, f64) {
        let config = self.client.config();
        let mut body = json!({
            "model": config.model,
            "messages": line.messages,
            "max_tokens": max_tokens,
        });
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        let body = Bytes::from(serde_json::to_vec(&body).expect("a JSON value serializes"));
        let deadline = Instant::now() + Duration::from_secs_f64(config.timeout_s);
        let attempts = config.max_retries + 1;
        let mut last_reason = String::new();
        for attempt in 1..=attempts {
            let left = deadline.saturating_duration_since(Instant::now());
            let started = Instant::now();
            let outcome = if left.is_zero() {
                Attempt::Timeout
            } else {
                self.lock().usage.attempts += 1;
                self.client.attempt(body.clone(), left).await
            };
            let latency_ms = started.elapsed().as_millis() as u64;
            match outcome {
                Attempt::Ok {
                    status,
                    content,
                    usage,
                } => {
                    let estimated = usage.is_none();
                    let (input_tokens, output_tokens) =
                        usage.unwrap_or((input_estimate, estimate_tokens(&content)));
                    let usd = config.prices.usd(input_tokens, output_tokens);
                    {
                        let mut s = self.lock();
                        s.usage.succeeded += 1;
                        s.usage.input_tokens += input_tokens;
                        s.usage.output_tokens += output_tokens;
                        s.usage.usd += usd;
                        if estimated {
                            s.usage.estimated_calls += 1;
                        }
                    }
                    self.write_log(
                        line,
                        attempt,
                        json!({
                            "outcome": "ok",
                            "status": status,
                            "latency_ms": latency_ms,
                            "input_tokens": input_tokens,
                            "output_tokens": output_tokens,
                            "usage_estimated": estimated,
                            "usd": usd,
                            "answer": content,
                        }),
                    );
                    self.client.note_call(None);
                    let answer = ChatResponse {
                        content,
                        input_tokens,
                        output_tokens,
                        usd,
                    };
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
                    last_reason = reason;
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
                    let err =
                        ModelError::Refused(format!("the provider refused the request ({reason})"));
                    return (Err(err), 0.0);
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
                    return (Err(ModelError::Failed(reason)), 0.0);
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
                    self.client.note_call(Some(&format!(
                        "the provider did not answer within timeout_s ({} s)",
                        config.timeout_s
                    )));
                    return (Err(ModelError::Timeout), worst_usd);
                }
            }
        }
        let why =
            format!("the provider kept failing after {attempts} attempts (last: {last_reason})");
        self.client.note_call(Some(&why));
        (Err(ModelError::Failed(why)), 0.0)
    }

    /// Append one redacted JSON line; failures are counted in [`Usage::log_errors`].
    fn write_log(&self, line: &LogLine<'_>, attempt: u32, outcome: Value) {
        let mut record = json!({
            "ts": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            "call": line.call,
            "attempt": attempt,
            "model": line.model,
            "max_tokens": line.max_tokens,
            "temperature": line.temperature,
            "messages": line.messages,
        });
        if let (Some(record), Value::Object(outcome)) = (record.as_object_mut(), outcome) {
            record.extend(outcome);
        }
        let record = self.client.redactor().redact_value(record);
        let mut text = serde_json::to_string(&record).expect("a JSON value serializes");
        text.push('\n');
        let _guard = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let written = (|| -> std::io::Result<()> {
            if let Some(dir) = self.log_path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log_path)?;
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
    /// The call ended, charged `usd` (already added to the scope's usage).
    fn settle(&mut self, usd: f64) {
        self.settled = true;
        if let (Some(ledger), Some(id)) = (self.scope.client.ledger(), &self.ledger_id) {
            ledger.settle(id, usd);
            self.scope.lock().billed.push(id.clone());
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.settled {
            // Abandoned in flight (the stage was stopped): the provider may still serve
            // and bill the request, so it costs its worst case, like a timeout.
            self.scope.lock().usage.usd += self.usd;
            self.settle(self.usd);
        }
        let mut s = self.scope.lock();
        s.reserved_usd -= self.usd;
        if s.reserved_usd < 1e-12 {
            s.reserved_usd = 0.0;
        }
    }
}

/// The parts of a log line every attempt of one call shares.
struct LogLine<'a> {
    call: u64,
    model: &'a str,
    messages: &'a [Value],
    max_tokens: Option<u32>,
    temperature: Option<f64>,
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

/// Tokens in `text`, estimated as one per four characters, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// The prompt's tokens, estimated: [`estimate_tokens`] of each message plus
/// [`TOKENS_PER_MESSAGE`] for its role and framing.
pub fn estimate_input_tokens(request: &ChatRequest) -> u64 {
    request
        .messages
        .iter()
        .map(|m| estimate_tokens(&m.content) + TOKENS_PER_MESSAGE)
        .sum()
}
