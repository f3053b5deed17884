//! What the model gateway adds to an agent's call: the same non-streaming chat call sent
//! straight to a scripted OpenAI-compatible upstream on 127.0.0.1 and through the
//! gateway forwarding to it, alternated; then [`CONCURRENT_CALLS`] calls at once through
//! [`CONCURRENT_TRIALS`] trials sharing one budget pool, which must all succeed and
//! whose charges must add up to what the pool spent.
//!
//! Nothing leaves 127.0.0.1: the upstream is an axum server in this process that
//! answers every request with one fixed completion carrying usage.

use super::stats::Stat;
use crate::model::gateway::BLOCK;
use crate::model::{Gateway, GatewayConfig, ModelClient, ModelConfig, Prices};
use axum::extract::State;
use axum::http::StatusCode;
use bytes::Bytes;
use evaluator_harbor::gateway::{ModelGateway, TrialAccess};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// Calls sent at once through the gateway.
pub const CONCURRENT_CALLS: usize = 200;
/// Trials those calls are spread over, all drawing on one budget pool.
pub const CONCURRENT_TRIALS: usize = 4;
/// The model the upstream claims to serve, the gateway's only allowed one.
const MODEL: &str = "bench-model";
/// The usage every scripted answer reports.
const USAGE: (u64, u64) = (10, 2);
/// A small model's list prices: every call costs something, so a call charged twice or
/// not at all shows in the sums.
const PRICES: Prices = Prices {
    input_per_mtok_usd: 0.15,
    output_per_mtok_usd: 0.60,
};
/// Far above the worst cases of all concurrent calls together: no call is refused.
const BUDGET_USD: f64 = 100.0;
/// Sums of the same charges added in another order differ in their last bits; one call
/// charged twice or not at all differs by its whole charge (2.7e-6 USD here).
const SPEND_TOLERANCE_USD: f64 = 1e-9;
/// Untimed calls each way first, so both paths are measured on warm pooled connections.
const WARMUP_CALLS: usize = 3;

/// The gateway's overhead, measured side by side in one run.
#[derive(Debug, Clone, Serialize)]
pub struct GatewayOverhead {
    /// A chat call sent straight to the upstream.
    pub direct: Stat,
    /// The same call through the gateway (token check, policy, metering, relay).
    pub through_gateway: Stat,
    /// `through_gateway` less `direct`, at the median.
    pub added_p50_ms: f64,
    /// `through_gateway` less `direct`, at the 95th percentile.
    pub added_p95_ms: f64,
    pub concurrent: Concurrent,
}

/// [`CONCURRENT_CALLS`] calls at once through the gateway.
#[derive(Debug, Clone, Serialize)]
pub struct Concurrent {
    pub calls: usize,
    pub trials: usize,
    /// Answered 200 with a completion (the bench fails unless all were).
    pub succeeded: usize,
    /// From the first call sent to the last answer read.
    pub wall_ms: f64,
    /// What the shared budget pool recorded as spent.
    pub spent_usd: f64,
    /// The sum of the charges the trials' logs give their calls.
    pub charged_usd: f64,
}

/// Measure with `n` calls each way for the latency (alternated) and one concurrent burst.
pub fn measure(rt: &Runtime, n: usize) -> Result<GatewayOverhead, String> {
    rt.block_on(async {
        let upstream = Upstream::start().await?;
        let client = http_client();
        let (direct, through_gateway) = latency(&client, &upstream, n.max(1)).await?;
        let concurrent = concurrent(&client, &upstream).await?;
        Ok(GatewayOverhead {
            added_p50_ms: through_gateway.median_ms - direct.median_ms,
            added_p95_ms: through_gateway.p95_ms - direct.p95_ms,
            direct,
            through_gateway,
            concurrent,
        })
    })
}

/// `n` timed calls each way, alternated so that the machine's drift touches both alike.
async fn latency(client: &HttpClient, up: &Upstream, n: usize) -> Result<(Stat, Stat), String> {
    let gateway = gateway(up)?;
    let access = open(&gateway, "latency")?;
    let direct_url = up.completions_url();
    let gateway_url = completions_url(access.port);
    for _ in 0..WARMUP_CALLS {
        chat(client, &direct_url, "sk-bench-upstream").await?;
        chat(client, &gateway_url, &access.token).await?;
    }
    let (mut direct, mut through) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        direct.push(timed(chat(client, &direct_url, "sk-bench-upstream")).await?);
        through.push(timed(chat(client, &gateway_url, &access.token)).await?);
    }
    gateway.close(&access).await;
    let stat = |v| Stat::of(v).ok_or("no latency samples");
    Ok((stat(direct)?, stat(through)?))
}

/// [`CONCURRENT_CALLS`] calls spread over [`CONCURRENT_TRIALS`] trials of a fresh
/// gateway (its pool holds only these calls' spend), checked for success and spend.
async fn concurrent(client: &HttpClient, up: &Upstream) -> Result<Concurrent, String> {
    let gateway = gateway(up)?;
    let trials = (0..CONCURRENT_TRIALS)
        .map(|i| open(&gateway, &format!("concurrent-{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let forwarded_before = up.requests();
    let started = Instant::now();
    let calls: Vec<JoinHandle<Result<(u64, u64), String>>> = (0..CONCURRENT_CALLS)
        .map(|i| {
            let (client, access) = (client.clone(), trials[i % trials.len()].clone());
            tokio::spawn(async move {
                chat(&client, &completions_url(access.port), &access.token).await
            })
        })
        .collect();
    let mut answered_usd = 0.0;
    let mut failures = Vec::new();
    for call in calls {
        match call.await {
            Ok(Ok((prompt, completion))) => answered_usd += PRICES.usd(prompt, completion),
            Ok(Err(e)) => failures.push(e),
            Err(e) => failures.push(format!("the call's task ended: {e}")),
        }
    }
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    if let Some(first) = failures.first() {
        return Err(format!(
            "{} of {CONCURRENT_CALLS} concurrent calls through the gateway failed; the first: {first}",
            failures.len()
        ));
    }
    let forwarded = up.requests() - forwarded_before;
    if forwarded != CONCURRENT_CALLS as u64 {
        return Err(format!(
            "the gateway forwarded {forwarded} requests upstream for {CONCURRENT_CALLS} calls"
        ));
    }
    let charged_usd = charged(&gateway, &trials).await?;
    let spent_usd = gateway.spent_usd();
    check_spend(spent_usd, charged_usd, answered_usd)?;
    Ok(Concurrent {
        calls: CONCURRENT_CALLS,
        trials: trials.len(),
        succeeded: CONCURRENT_CALLS,
        wall_ms,
        spent_usd,
        charged_usd,
    })
}

/// Close every trial and add up the charges its log gives its calls, each of which must
/// have ended `ok`.
async fn charged(gateway: &Gateway, trials: &[TrialAccess]) -> Result<f64, String> {
    let mut usd = 0.0;
    let mut logged = 0;
    for access in trials {
        let log = gateway.close(access).await;
        if let Some(bad) = log.exchanges.iter().find(|e| e.outcome != "ok") {
            return Err(format!(
                "the gateway logged a concurrent call as `{}`: {}",
                bad.outcome,
                bad.error.as_deref().unwrap_or("no error given")
            ));
        }
        logged += log.exchanges.len();
        usd += log.exchanges.iter().map(|e| e.usd).sum::<f64>();
    }
    if logged != CONCURRENT_CALLS {
        return Err(format!(
            "the trials' logs hold {logged} calls, not {CONCURRENT_CALLS}"
        ));
    }
    Ok(usd)
}

/// The pool's spend must equal the sum of the logged charges, and those the prices of
/// the usage the answers reported.
fn check_spend(spent: f64, charged: f64, answered: f64) -> Result<(), String> {
    if (spent - charged).abs() > SPEND_TOLERANCE_USD {
        return Err(format!(
            "the budget pool spent ${spent:.9} but the calls were charged ${charged:.9} in all"
        ));
    }
    if (charged - answered).abs() > SPEND_TOLERANCE_USD {
        return Err(format!(
            "the calls were charged ${charged:.9} but the usage in their answers costs ${answered:.9}"
        ));
    }
    Ok(())
}

/// A gateway forwarding to `up`, with a pool of [`BUDGET_USD`] and no logs on disk.
pub(super) fn gateway(up: &Upstream) -> Result<Gateway, String> {
    let mut model = ModelConfig::new(up.endpoint(), MODEL);
    model.block = BLOCK;
    model.prices = PRICES;
    model.max_tokens = 16;
    model.timeout_s = 30.0;
    // A failed call fails the bench instead of being hidden by a retry.
    model.max_retries = 0;
    let config = GatewayConfig {
        model,
        allowed_models: vec![MODEL.into()],
    };
    let client = ModelClient::with_api_key(config.model.clone(), Some("sk-bench-upstream".into()))
        .map_err(|e| format!("cannot make the gateway's upstream client: {e}"))?;
    Gateway::new(client, config.policy(), BUDGET_USD, None)
        .map_err(|e| format!("cannot start the model gateway: {e}"))
}

/// A trial on a fresh loopback listener, bound as the engine binds one.
fn open(gateway: &Gateway, trial: &str) -> Result<TrialAccess, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("cannot bind a gateway listener on 127.0.0.1: {e}"))?;
    gateway.open(trial, listener)
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// The agent's side: pooled keep-alive connections, Nagle off as the gateway's own are.
fn http_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

fn completions_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/v1/chat/completions")
}

async fn timed<T>(call: impl Future<Output = Result<T, String>>) -> Result<Duration, String> {
    let started = Instant::now();
    call.await?;
    Ok(started.elapsed())
}

/// One non-streaming chat call; the usage its answer reports, as (prompt, completion).
async fn chat(client: &HttpClient, url: &str, token: &str) -> Result<(u64, u64), String> {
    let body = json!({"messages": [{"role": "user", "content": "ping"}], "max_tokens": 16});
    let request = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| format!("cannot build the request to {url}: {e}"))?;
    let response = client
        .request(request)
        .await
        .map_err(|e| format!("POST {url}: {e}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the answer of {url}: {e}"))?
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    if status != StatusCode::OK {
        return Err(format!("POST {url}: HTTP {status}: {text}"));
    }
    let answer: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("POST {url}: not JSON ({e}): {text}"))?;
    let count = |k: &str| answer["usage"][k].as_u64();
    match (count("prompt_tokens"), count("completion_tokens")) {
        (Some(p), Some(c)) if answer["choices"][0]["message"].is_object() => Ok((p, c)),
        _ => Err(format!("POST {url}: not a completion with usage: {text}")),
    }
}

/// The scripted upstream: one axum server on 127.0.0.1 that answers every chat request
/// with a completion whose content [`Scripted::answer`] picks, counting the requests;
/// stopped when dropped.
pub(super) struct Upstream {
    port: u16,
    state: Arc<Scripted>,
    server: JoinHandle<()>,
}

/// What the scripted upstream answers, and how many requests it has seen.
struct Scripted {
    requests: AtomicU64,
    /// The assistant's message (`{"role": "assistant", "content": …, "tool_calls": …}`)
    /// for a chat request.
    answer: Box<dyn Fn(&Value) -> Value + Send + Sync>,
}

impl Upstream {
    /// An upstream that answers every request with `pong`.
    async fn start() -> Result<Upstream, String> {
        Upstream::answering(|_| "pong".into()).await
    }

    /// An upstream whose answer to each chat request is `answer(request)`.
    pub(super) async fn answering(answer: fn(&Value) -> String) -> Result<Upstream, String> {
        Upstream::answering_messages(
            move |request| json!({"role": "assistant", "content": answer(request)}),
        )
        .await
    }

    /// An upstream whose assistant message for each chat request is `answer(request)`
    /// (tool calls included; `finish_reason` says `tool_calls` when it has any).
    pub(super) async fn answering_messages(
        answer: impl Fn(&Value) -> Value + Send + Sync + 'static,
    ) -> Result<Upstream, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("cannot bind the scripted upstream on 127.0.0.1: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("the scripted upstream's address: {e}"))?
            .port();
        let state = Arc::new(Scripted {
            requests: AtomicU64::new(0),
            answer: Box::new(answer),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(completion))
            .with_state(state.clone());
        let server = tokio::spawn(async move {
            // An accept error ends the server; the next call then fails with a clear
            // connection error, which fails the bench.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Upstream {
            port,
            state,
            server,
        })
    }

    pub(super) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn completions_url(&self) -> String {
        completions_url(self.port)
    }

    pub(super) fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The upstream's one answer; the body is read whole (so the connection stays usable)
/// and must be a chat request.
async fn completion(
    State(state): State<Arc<Scripted>>,
    body: Bytes,
) -> (StatusCode, axum::Json<Value>) {
    state.requests.fetch_add(1, Ordering::Relaxed);
    let request = serde_json::from_slice::<Value>(&body).unwrap_or_default();
    if !request["messages"].is_array() {
        let error =
            json!({"error": {"message": "not a chat request", "type": "invalid_request_error"}});
        return (StatusCode::BAD_REQUEST, axum::Json(error));
    }
    let (prompt, completion) = USAGE;
    let message = (state.answer)(&request);
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    let answer = json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1_700_000_000u64,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    });
    (StatusCode::OK, axum::Json(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spend_that_does_not_add_up_is_an_error() {
        let one = PRICES.usd(USAGE.0, USAGE.1);
        let all = 200.0 * one;
        assert!(check_spend(all, all, all).is_ok());
        // Sums in another order: equal to the last bits, accepted.
        assert!(check_spend(all + 1e-15, all, all - 1e-15).is_ok());
        let pool = check_spend(all + one, all, all).unwrap_err();
        assert!(pool.contains("budget pool spent"), "{pool}");
        let answers = check_spend(all, all, all - one).unwrap_err();
        assert!(answers.contains("usage in their answers"), "{answers}");
    }
}
