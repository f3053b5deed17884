//! The shared HTTP side: one pooled client, the endpoint and the key; one attempt of a
//! chat completion request, classified for the retry loop in [`super::meter`].

use super::config::{ModelConfig, ModelConfigError, endpoint_parts};
use super::ledger::SpendLedger;
use super::redact::{Redactor, truncate};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER, USER_AGENT};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Largest response body read from the provider.
pub(crate) const MAX_BODY_BYTES: usize = 16 << 20;

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The pooled HTTP(S) client: rustls with the bundled Mozilla roots, HTTP/1.
fn new_http(block: &str) -> Result<HttpClient, ModelConfigError> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    // A request is written as headers and body: without this, Nagle's algorithm can
    // hold the body back for a delayed ACK (tens of ms on a local server).
    tcp.set_nodelay(true);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| ModelConfigError::new(format!("{block}.endpoint"), format!("TLS setup: {e}")))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}
/// Longest provider message passed on in an error text.
const MAX_MESSAGE_CHARS: usize = 300;

/// The experiment's connection to its model provider, shared by every stage call;
/// [`scope`](Self::scope) makes the metered backend one call gets.
#[derive(Clone)]
pub struct ModelClient {
    inner: Arc<Inner>,
    /// The recipe's named models (`models:`), each a client sharing this one's pool and
    /// ledger ([`with_models`](Self::with_models)).
    pub(super) named: Arc<std::collections::BTreeMap<String, ModelClient>>,
}

struct Inner {
    config: ModelConfig,
    url: hyper::Uri,
    authorization: Option<HeaderValue>,
    http: HttpClient,
    redactor: Redactor,
    /// How calls through every scope have ended, for the run's early stop.
    health: std::sync::Mutex<Health>,
    /// Where reservations of calls in flight are written, when the lifecycle keeps one;
    /// shared with the clients made by [`ModelClient::sharing`].
    ledger: Arc<std::sync::OnceLock<SpendLedger>>,
}

/// How the experiment's model calls have ended so far (every scope counted): the
/// lifecycle compares two of these to tell a generation whose every call failed at the
/// provider (docs/lifecycle.md, "Stopping early").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// Calls that got an answer.
    pub answered: u64,
    /// Calls that ended with the provider unreachable, failing, timing out or refusing
    /// the key: failures of the infrastructure, not of the request.
    pub provider_failures: u64,
    /// The last such failure, as the operator was told it.
    pub last_failure: Option<String>,
}

impl fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelClient")
            .field("model", &self.inner.config.model)
            .field("api_key_env", &self.inner.config.api_key_env)
            .field("has_key", &self.inner.authorization.is_some())
            .finish_non_exhaustive()
    }
}

impl ModelClient {
    /// A client using the key in the variable `config.api_key_env` names (none when
    /// it is unset or empty: fine for local servers).
    pub fn new(config: ModelConfig) -> Result<Self, ModelConfigError> {
        let key = std::env::var(&config.api_key_env).ok();
        Self::with_api_key(config, key)
    }

    /// A client with an explicit key (`None`: send no `Authorization` header).
    pub fn with_api_key(
        config: ModelConfig,
        api_key: Option<String>,
    ) -> Result<Self, ModelConfigError> {
        Self::build(config, api_key, None)
    }

    /// A client for another endpoint (the agent's model, `evaluator.model`) with the key
    /// in its own `api_key_env`, sharing this one's connection pool and spend ledger, so
    /// the operators' calls and the agent's are written to one ledger.
    pub fn sharing(&self, config: ModelConfig) -> Result<Self, ModelConfigError> {
        let key = std::env::var(&config.api_key_env).ok();
        self.sharing_with_api_key(config, key)
    }

    /// [`sharing`](Self::sharing) with an explicit key.
    pub fn sharing_with_api_key(
        &self,
        config: ModelConfig,
        api_key: Option<String>,
    ) -> Result<Self, ModelConfigError> {
        let shared = (self.inner.http.clone(), self.inner.ledger.clone());
        Self::build(config, api_key, Some(shared))
    }

    fn build(
        config: ModelConfig,
        api_key: Option<String>,
        shared: Option<(HttpClient, Arc<std::sync::OnceLock<SpendLedger>>)>,
    ) -> Result<Self, ModelConfigError> {
        config.validate()?;
        let block = config.block;
        let parts = endpoint_parts(&config.endpoint, block)?;
        let key = api_key
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty());
        if key.is_some() && !parts.https && !parts.is_loopback() {
            return Err(ModelConfigError::new(
                format!("{block}.endpoint"),
                format!(
                    "is plain http to a host other than this machine, and the key in {} would \
                     cross the network unencrypted: use https, or unset the key (or point \
                     `api_key_env` at an unset variable) for a server that needs none",
                    config.api_key_env
                ),
            ));
        }
        let authorization = match &key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    ModelConfigError::new(
                        format!("{block}.api_key_env"),
                        format!("{} holds characters a key cannot have", config.api_key_env),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let url: hyper::Uri = config
            .completions_url()
            .parse()
            .map_err(|_| ModelConfigError::new(format!("{block}.endpoint"), "is not a URL"))?;
        let (http, ledger) = match shared {
            Some(shared) => shared,
            None => (new_http(block)?, Default::default()),
        };
        let endpoint = config.endpoint.trim_end_matches('/').to_string();
        let redactor = Redactor::new(
            key.as_deref(),
            vec![
                config.completions_url(),
                endpoint,
                parts.authority.clone(),
                parts.host.clone(),
            ],
        );
        Ok(ModelClient {
            inner: Arc::new(Inner {
                config,
                url,
                authorization,
                http,
                redactor,
                health: Default::default(),
                ledger,
            }),
            named: Default::default(),
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.inner.config
    }

    /// Whether requests carry an `Authorization` header.
    pub fn has_api_key(&self) -> bool {
        self.inner.authorization.is_some()
    }

    pub(crate) fn redactor(&self) -> &Redactor {
        &self.inner.redactor
    }

    /// How the calls of every scope have ended so far.
    pub fn health(&self) -> Health {
        self.inner
            .health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Count a call's end: answered (`None`) or failed at the provider (`Some(why)`).
    pub(crate) fn note_call(&self, failure: Option<&str>) {
        let mut h = self.inner.health.lock().unwrap_or_else(|p| p.into_inner());
        match failure {
            None => h.answered += 1,
            Some(why) => {
                h.provider_failures += 1;
                h.last_failure = Some(why.to_string());
            }
        }
    }

    /// Write every scope's reservations to `ledger` from now on (once; later calls are
    /// ignored). See [`SpendLedger`].
    pub fn keep_ledger(&self, ledger: SpendLedger) {
        let _ = self.inner.ledger.set(ledger);
    }

    pub(crate) fn ledger(&self) -> Option<&SpendLedger> {
        self.inner.ledger.get()
    }

    /// Ask the provider once whether it is there: `GET <endpoint>/models`, which
    /// OpenAI, vLLM, Ollama and llama.cpp's server all answer without spending a token.
    /// Any HTTP answer proves the endpoint reachable, except 401 and 403, which say
    /// the key is missing or wrong. Bounded by `timeout_s` and [`PROBE_TIMEOUT`].
    pub async fn probe(&self) -> Result<(), ProbeError> {
        let config = &self.inner.config;
        let url = format!("{}/models", config.endpoint.trim_end_matches('/'));
        let fail = |cause: ProbeCause| ProbeError {
            block: config.block,
            endpoint: config.endpoint.clone(),
            api_key_env: config.api_key_env.clone(),
            cause,
        };
        let uri: hyper::Uri = url.parse().map_err(|_| fail(ProbeCause::NotAUrl))?;
        let mut request = hyper::Request::get(uri)
            .header(USER_AGENT, concat!("evolve/", env!("CARGO_PKG_VERSION")));
        if let Some(auth) = &self.inner.authorization {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let request = request
            .body(Full::new(Bytes::new()))
            .map_err(|_| fail(ProbeCause::NotAUrl))?;
        let limit = Duration::from_secs_f64(config.timeout_s.min(PROBE_TIMEOUT.as_secs_f64()));
        let response = match tokio::time::timeout(limit, self.inner.http.request(request)).await {
            Err(_) => return Err(fail(ProbeCause::NoAnswer(limit))),
            Ok(Err(e)) => return Err(fail(ProbeCause::Unreachable(connect_cause(&e)))),
            Ok(Ok(r)) => r,
        };
        match response.status().as_u16() {
            status @ (401 | 403) => Err(fail(ProbeCause::KeyRefused {
                status,
                key_sent: self.has_api_key(),
            })),
            _ => Ok(()),
        }
    }

    /// Send `body` once, waiting at most `limit` for the whole answer.
    pub(crate) async fn attempt(&self, body: Bytes, limit: Duration) -> Attempt {
        match tokio::time::timeout(limit, self.attempt_inner(body)).await {
            Ok(outcome) => outcome,
            Err(_) => Attempt::Timeout,
        }
    }

    async fn attempt_inner(&self, body: Bytes) -> Attempt {
        let mut request = hyper::Request::post(self.inner.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("evolve/", env!("CARGO_PKG_VERSION")));
        if let Some(auth) = &self.inner.authorization {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let request = match request.body(Full::new(body)) {
            Ok(r) => r,
            Err(_) => {
                return Attempt::Failed {
                    status: None,
                    reason: "the host could not build the request".into(),
                };
            }
        };
        let response = match self.inner.http.request(request).await {
            Ok(r) => r,
            // The error's own text can name the URL: say only what kind it was.
            Err(e) if e.is_connect() => {
                return Attempt::Retry {
                    status: None,
                    reason: "could not connect to the provider".into(),
                    retry_after: None,
                };
            }
            Err(_) => {
                return Attempt::Retry {
                    status: None,
                    reason: "the connection to the provider failed".into(),
                    retry_after: None,
                };
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        let body = match Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return Attempt::Retry {
                    status: Some(status),
                    reason: "the provider's answer was cut off or too large".into(),
                    retry_after: None,
                };
            }
        };
        let json: Option<Value> = serde_json::from_slice(&body).ok();
        match status {
            // Bytes that are not JSON at all are a transport fault (a proxy's garbled or
            // truncated answer), worth another attempt; JSON of the wrong shape is not.
            200..=299 if json.is_none() => Attempt::Retry {
                status: Some(status),
                reason: "the provider's answer is not JSON".into(),
                retry_after: None,
            },
            200..=299 => match json.and_then(Completion::parse) {
                Some(completion) => Attempt::Ok { status, completion },
                None => Attempt::Failed {
                    status: Some(status),
                    reason: "the provider's answer is not a chat completion".into(),
                },
            },
            429 | 500..=599 => Attempt::Retry {
                status: Some(status),
                reason: self.describe(status, json.as_ref(), &body),
                retry_after,
            },
            400..=499 => Attempt::Refused {
                status,
                reason: self.describe(status, json.as_ref(), &body),
            },
            _ => Attempt::Failed {
                status: Some(status),
                reason: format!("unexpected HTTP {status} from the provider"),
            },
        }
    }

    /// "HTTP 400: <the provider's message>", redacted and bounded.
    fn describe(&self, status: u16, json: Option<&Value>, body: &[u8]) -> String {
        let message = json
            .and_then(|j| {
                let e = j.get("error")?;
                e.get("message")
                    .and_then(Value::as_str)
                    .or_else(|| e.as_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
        let message = self.inner.redactor.redact(message.trim());
        let message = truncate(&message, MAX_MESSAGE_CHARS);
        if message.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {message}")
        }
    }
}

/// Longest a probe waits for the provider's answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why [`ModelClient::probe`] found the endpoint unusable. Its text names the endpoint
/// (not secret to the host) and the key's variable, never the key.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeError {
    /// The recipe block of the endpoint (`model` or `evaluator.model`).
    pub block: &'static str,
    pub endpoint: String,
    pub api_key_env: String,
    pub cause: ProbeCause,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ProbeCause {
    /// No HTTP answer at all (refused, no route, DNS, TLS): the reason's kind.
    Unreachable(String),
    /// Connected, but nothing answered within the limit.
    NoAnswer(Duration),
    /// 401 or 403: the provider wants a (different) key.
    KeyRefused {
        status: u16,
        key_sent: bool,
    },
    NotAUrl,
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = format!("{}.endpoint `{}`", self.block, self.endpoint);
        match &self.cause {
            ProbeCause::Unreachable(why) => {
                write!(f, "{at}: the model provider is unreachable: {why}")
            }
            ProbeCause::NoAnswer(limit) => write!(
                f,
                "{at}: the model provider did not answer within {:.0} s",
                limit.as_secs_f64()
            ),
            ProbeCause::KeyRefused {
                status,
                key_sent: true,
            } => write!(
                f,
                "{at} refused the key in {} (HTTP {status}): the key is wrong or lacks access",
                self.api_key_env
            ),
            ProbeCause::KeyRefused {
                status,
                key_sent: false,
            } => write!(
                f,
                "{at} wants a key (HTTP {status}), and {} is not set ({}.api_key_env names the variable)",
                self.api_key_env, self.block
            ),
            ProbeCause::NotAUrl => write!(f, "{at}: is not a URL"),
        }
    }
}

impl std::error::Error for ProbeError {}

/// What kind of connection failure `e` was, without its text (which can name the URL).
fn connect_cause(e: &hyper_util::client::legacy::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return match io.kind() {
                ConnectionRefused => "connection refused (nothing listens there)".into(),
                TimedOut => "the connection timed out".into(),
                HostUnreachable | NetworkUnreachable => "no route to the host".into(),
                _ if s.to_string().contains("dns") => "the host name does not resolve".into(),
                _ => "could not connect (network or TLS failure)".into(),
            };
        }
        source = s.source();
    }
    "could not connect (DNS, network or TLS failure)".into()
}

/// An OpenAI chat completion as the provider sent it.
pub(crate) struct Completion {
    /// The whole answer (the gateway relays it to the agent).
    pub json: Value,
    /// The first choice's `content` (empty when null or absent).
    pub content: String,
    /// (prompt, completion) tokens, when the provider reported them.
    pub usage: Option<(u64, u64)>,
}

impl Completion {
    /// `json` if its first choice has a `message` object whose `content` is text or null.
    fn parse(json: Value) -> Option<Completion> {
        let message = json.get("choices")?.get(0)?.get("message")?.as_object()?;
        let content = match message.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(_) => return None,
        };
        let usage = json.get("usage").and_then(|u| {
            Some((
                u.get("prompt_tokens")?.as_u64()?,
                u.get("completion_tokens")?.as_u64()?,
            ))
        });
        Some(Completion {
            json,
            content,
            usage,
        })
    }

    /// The first choice's message (an object, checked by `parse`).
    pub fn message(&self) -> &Value {
        &self.json["choices"][0]["message"]
    }
}

/// What one HTTP attempt came to. Reasons are already redacted.
pub(crate) enum Attempt {
    Ok {
        status: u16,
        completion: Completion,
    },
    /// 429, 5xx, a connection error, an answer cut off, too large or not JSON: worth
    /// another attempt.
    Retry {
        status: Option<u16>,
        reason: String,
        retry_after: Option<Duration>,
    },
    /// Another 4xx: the provider will not take this request.
    Refused {
        status: u16,
        reason: String,
    },
    /// Not worth retrying (a malformed answer, an unexpected status).
    Failed {
        status: Option<u16>,
        reason: String,
    },
    Timeout,
}
