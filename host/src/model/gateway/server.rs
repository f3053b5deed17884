//! One trial's listener, served: `GET /v1/models`, `GET /v1/models/{id}` and
//! `POST /v1/chat/completions` (non-streaming and streaming), every request carrying the
//! trial's bearer token, every error OpenAI-shaped (`{"error": {"message", "type",
//! "code", "param"}}`) and redacted.

use super::request::{self, Rejection};
use super::stream;
use super::{Shared, Trial};
use crate::model::meter::{Answer, CallError};
use bytes::Bytes;
use evaluator_harbor::gateway::Exchange;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request body taken from the agent (a long history with images fits).
pub const MAX_REQUEST_BYTES: usize = 16 << 20;
/// A connection that has not sent a request's headers within this is closed.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Accept connections on the trial's listener until the task is aborted
/// ([`super::Gateway`]'s `close`); each connection is a task in the trial's set, so that
/// closing the trial can abort them all.
pub(super) async fn accept_loop(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    trial: Arc<Trial>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of descriptors, or a connection reset before it was taken: the
            // listener itself is fine, so wait a moment rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // Small requests and answers: Nagle's delay would dominate the added latency.
        let _ = stream.set_nodelay(true);
        let service = {
            let (shared, trial) = (shared.clone(), trial.clone());
            hyper::service::service_fn(move |req| {
                let (shared, trial) = (shared.clone(), trial.clone());
                async move { Ok::<_, Infallible>(handle(&shared, &trial, req).await) }
            })
        };
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let mut set = trial.connections();
        while set.try_join_next().is_some() {}
        set.spawn(async move {
            let _ = conn.await;
        });
    }
}

async fn handle(shared: &Shared, trial: &Trial, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    match (path.as_str(), method) {
        ("/v1/chat/completions", Method::POST) => chat(shared, trial, req).await,
        ("/v1/models", Method::GET) => match authorize(&req, trial) {
            Ok(()) => models(shared),
            Err(e) => e.response(),
        },
        (p, Method::GET) if p.starts_with("/v1/models/") => match authorize(&req, trial) {
            Ok(()) => model(shared, &p["/v1/models/".len()..]),
            Err(e) => e.response(),
        },
        ("/v1/chat/completions" | "/v1/models", m) => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            format!("{m} {path} is not served: use POST /v1/chat/completions or GET /v1/models"),
        )
        .response(),
        (_, m) => ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "unknown_url",
            format!(
                "unknown path {m} {}: the model gateway serves POST /v1/chat/completions and GET /v1/models",
                crate::model::redact::truncate(&path, 200)
            ),
        )
        .response(),
    }
}

fn models(shared: &Shared) -> Response<Full<Bytes>> {
    let data: Vec<Value> = shared
        .policy
        .allowed_models
        .iter()
        .map(|m| model_object(m))
        .collect();
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

fn model(shared: &Shared, id: &str) -> Response<Full<Bytes>> {
    if shared.policy.allowed_models.iter().any(|m| m == id) {
        json_response(StatusCode::OK, &model_object(id))
    } else {
        not_allowed(shared, id).response()
    }
}

fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 0, "owned_by": "evolve-gateway"})
}

/// A chat completion: authorize, read, check, meter and forward, answer; every request
/// leaves one [`Exchange`] in the trial's log.
async fn chat(shared: &Shared, trial: &Trial, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let mut exchange = Pending::new(trial);
    if let Err(e) = authorize(&req, trial) {
        return exchange.refuse("unauthorized", e);
    }
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(e) => return exchange.refuse("invalid_request", e),
    };
    let prepared = match request::prepare(&body, &shared.policy) {
        Ok(p) => p,
        Err(Rejection::Invalid { message, param }) => {
            let mut e = ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_request",
                message,
            );
            e.param = param;
            return exchange.refuse("invalid_request", e);
        }
        Err(Rejection::ModelNotAllowed { asked }) => {
            exchange.model = asked.clone();
            return exchange.refuse("model_not_allowed", not_allowed(shared, &asked));
        }
    };
    exchange.model = prepared.model.clone();
    exchange.messages = prepared.outgoing.body["messages"].clone();
    exchange.tools = prepared.outgoing.body.get("tools").cloned();
    exchange.in_flight_usd = Some(trial.meter.worst_case_usd(&prepared.outgoing));
    match trial.meter.forward(prepared.outgoing).await {
        Ok(answer) => {
            let redactor = shared.client.redactor();
            let relayed = redactor.redact_value_secrets(answer.completion.json.clone());
            let response = match prepared.stream {
                Some(s) => {
                    let usage = (answer.input_tokens, answer.output_tokens);
                    let text = stream::events(&relayed, s.include_usage, usage);
                    respond(StatusCode::OK, "text/event-stream", Bytes::from(text))
                }
                None => json_response(StatusCode::OK, &relayed),
            };
            exchange.answered(&answer, relayed["choices"][0]["message"].clone());
            response
        }
        Err(e) => {
            let outcome = match e {
                CallError::BudgetExhausted => "budget_exhausted",
                CallError::Refused { .. } => "refused",
                CallError::Timeout { .. } => "timeout",
                _ => "failed",
            };
            let charged = matches!(e, CallError::Timeout { .. });
            let api = upstream_error(shared, &e);
            exchange.failed(outcome, api, charged)
        }
    }
}

/// The trial's token, from `Authorization: Bearer …`, compared in constant time.
fn authorize(req: &Request<Incoming>, trial: &Trial) -> Result<(), ApiError> {
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let ok = given.is_some_and(|g| {
        let (a, b) = (g.as_bytes(), trial.token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    });
    if ok {
        return Ok(());
    }
    let what = if given.is_some() {
        "the bearer token is not this trial's"
    } else {
        "no bearer token: send `Authorization: Bearer $OPENAI_API_KEY`"
    };
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "invalid_request_error",
        "invalid_api_key",
        format!("{what} (the gateway accepts only the OPENAI_API_KEY it gave this trial)"),
    ))
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!(
                "the request body is larger than the gateway's limit of {} MiB",
                MAX_REQUEST_BYTES >> 20
            ),
        )
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_REQUEST_BYTES as u64) {
        return Err(too_large());
    }
    match Limited::new(req.into_body(), MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(body) => Ok(body.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(_) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_request",
            "the request body could not be read (the connection broke off)",
        )),
    }
}

fn not_allowed(shared: &Shared, asked: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "invalid_request_error",
        "model_not_allowed",
        format!(
            "model `{}` is not allowed in this evaluation; allowed: {}",
            crate::model::redact::truncate(asked, 100),
            shared.policy.allowed_models.join(", ")
        ),
    )
}

/// The agent's view of a call the meter could not complete.
fn upstream_error(shared: &Shared, e: &CallError) -> ApiError {
    let message = shared.client.redactor().redact(&e.message());
    let (status, kind, code) = match e {
        CallError::BudgetExhausted => {
            let message = "the evaluation's model budget cannot pay for this request's worst \
                           case (its prompt estimate plus its max_tokens, at the evaluation's \
                           prices): this trial is budget-exhausted";
            return ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "budget_exhausted",
                "budget_exhausted",
                message,
            );
        }
        CallError::Ledger(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "ledger_unavailable",
        ),
        CallError::Refused {
            status: 401 | 403, ..
        } => (StatusCode::BAD_GATEWAY, "upstream_error", "upstream_auth"),
        CallError::Refused { .. } => (
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "upstream_refused",
        ),
        CallError::Failed { .. } => (
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_bad_answer",
        ),
        CallError::Exhausted {
            status: Some(429), ..
        } => (
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_rate_limited",
        ),
        CallError::Exhausted { .. } => (
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_unavailable",
        ),
        CallError::Timeout { .. } => (
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "upstream_timeout",
        ),
    };
    ApiError::new(status, kind, code, message)
}

/// An OpenAI-shaped error.
pub(super) struct ApiError {
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    message: String,
    param: Option<String>,
}

impl ApiError {
    fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            kind,
            code,
            message: message.into(),
            param: None,
        }
    }

    fn response(&self) -> Response<Full<Bytes>> {
        let body = json!({"error": {"message": self.message, "type": self.kind,
                                    "code": self.code, "param": self.param}});
        let mut r = json_response(self.status, &body);
        // The gateway already retried upstream, and a refusal will not change: tell
        // OpenAI's SDKs (which honour this header) not to retry on their own.
        r.headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
        r
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).expect("a JSON value serializes");
    respond(status, "application/json", Bytes::from(bytes))
}

fn respond(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// The exchange of one chat request, pushed to the trial's log when it ends, or when
/// its future is dropped (the trial closed with the request in flight).
struct Pending<'a> {
    trial: &'a Trial,
    ts: String,
    started: Instant,
    model: String,
    messages: Value,
    tools: Option<Value>,
    /// Set once the request went to the meter: what it is charged if abandoned.
    in_flight_usd: Option<f64>,
    done: bool,
}

impl<'a> Pending<'a> {
    fn new(trial: &'a Trial) -> Self {
        trial.count_call();
        Pending {
            trial,
            ts: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            started: Instant::now(),
            model: String::new(),
            messages: Value::Null,
            tools: None,
            in_flight_usd: None,
            done: false,
        }
    }

    fn finish(
        &mut self,
        outcome: &str,
        error: Option<String>,
        answer: Option<Value>,
        tokens: (u64, u64),
        usd: f64,
    ) {
        self.done = true;
        self.trial.push(Exchange {
            ts: std::mem::take(&mut self.ts),
            model: std::mem::take(&mut self.model),
            messages: std::mem::take(&mut self.messages),
            tools: self.tools.take(),
            answer,
            outcome: outcome.into(),
            error,
            prompt_tokens: tokens.0,
            completion_tokens: tokens.1,
            usd,
            latency_ms: self.started.elapsed().as_millis() as u64,
        });
    }

    /// Refused before anything was sent.
    fn refuse(mut self, outcome: &str, e: ApiError) -> Response<Full<Bytes>> {
        self.finish(outcome, Some(e.message.clone()), None, (0, 0), 0.0);
        e.response()
    }

    fn answered(mut self, answer: &Answer, message: Value) {
        let tokens = (answer.input_tokens, answer.output_tokens);
        self.finish("ok", None, Some(message), tokens, answer.usd);
    }

    /// The meter failed it; `charged`: at its worst case (a timeout).
    fn failed(mut self, outcome: &str, e: ApiError, charged: bool) -> Response<Full<Bytes>> {
        if outcome == "budget_exhausted" {
            self.trial.note_budget_exhausted();
        }
        let usd = if charged {
            self.in_flight_usd.unwrap_or(0.0)
        } else {
            0.0
        };
        self.finish(outcome, Some(e.message.clone()), None, (0, 0), usd);
        e.response()
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            let usd = self.in_flight_usd.unwrap_or(0.0);
            let why = "the trial ended while the request was in flight (charged its worst case)";
            self.finish("failed", Some(why.into()), None, (0, 0), usd);
        }
    }
}
