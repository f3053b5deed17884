//! The engine's side of the model gateway: how a trial's agent reaches its model.
//!
//! The host serves an OpenAI-compatible endpoint for every evaluation (the
//! [`ModelGateway`], implemented in the host's `model` layer). An engine that runs an agent
//! under a gateway creates a TCP listener on `127.0.0.1` *inside the trial's own network
//! namespace* (the only address that namespace can reach), hands it to
//! [`ModelGateway::open`], passes [`TrialAccess::env`] to the agent, and after the agent
//! phase calls [`ModelGateway::close`], which stops serving that listener and returns every
//! exchange and what it cost. The trial's token is worthless anywhere but on that listener.
//!
//! Nothing here holds the provider's endpoint or key: those stay in the host.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::engine::BoxFuture;

/// The variables an agent reads to find its model (OpenAI's SDK and LiteLLM read these).
pub const BASE_URL_ENV: &str = "OPENAI_BASE_URL";
/// The older spelling some clients read.
pub const API_BASE_ENV: &str = "OPENAI_API_BASE";
/// The per-trial token, sent as `Authorization: Bearer <token>`.
pub const API_KEY_ENV: &str = "OPENAI_API_KEY";

/// What a trial's agent is given to reach the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialAccess {
    /// Identifies the trial to [`ModelGateway::close`].
    pub id: u64,
    /// The bearer token this trial's requests must carry.
    pub token: String,
    /// The port the listener is bound to on the trial's own `127.0.0.1`.
    pub port: u16,
}

impl TrialAccess {
    /// `OPENAI_BASE_URL`, `OPENAI_API_BASE` and `OPENAI_API_KEY` for the agent.
    pub fn env(&self) -> Vec<(String, String)> {
        self.env_at("127.0.0.1")
    }

    /// The same variables for a listener bound on `host` instead of the trial's own
    /// `127.0.0.1` (the harbor engine binds the host side of Docker's bridge, which
    /// Harbor's containers reach).
    pub fn env_at(&self, host: &str) -> Vec<(String, String)> {
        let url = format!("http://{host}:{}/v1", self.port);
        vec![
            (BASE_URL_ENV.into(), url.clone()),
            (API_BASE_ENV.into(), url),
            (API_KEY_ENV.into(), self.token.clone()),
        ]
    }
}

/// What a trial's agent spent through the gateway, metered by the host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialUsage {
    /// Requests the agent made (refused ones included).
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub usd: f64,
    /// Calls refused because the experiment's budget could not pay for them.
    pub refused_by_budget: u64,
    /// The spend-ledger ids of the calls whose charge `usd` holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ledger_ids: Vec<String>,
}

/// One request the agent made and how it ended, as the gateway logged it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// RFC 3339 time the request arrived.
    pub ts: String,
    /// The model the agent asked for.
    pub model: String,
    /// The request's `messages` (and `tools`, when given), as the agent sent them.
    pub messages: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<serde_json::Value>,
    /// The assistant message answered (`content`, `tool_calls`, `reasoning_content`), when
    /// there was one.
    pub answer: Option<serde_json::Value>,
    /// `ok`, `budget_exhausted`, `refused`, `failed`, `timeout`, `invalid_request`,
    /// `unauthorized` or `model_not_allowed`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub usd: f64,
    pub latency_ms: u64,
}

/// Everything the gateway saw of one trial.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialModelLog {
    pub usage: TrialUsage,
    pub exchanges: Vec<Exchange>,
    /// At least one request was refused because the budget ran out: the trial is
    /// budget-exhausted, not a failure of the candidate.
    pub budget_exhausted: bool,
}

/// The host's model gateway for one evaluation.
pub trait ModelGateway: Send + Sync {
    /// Serve `listener` (bound inside the trial's network namespace) for trial `trial`
    /// until [`close`](Self::close). Must be called inside a tokio runtime.
    fn open(&self, trial: &str, listener: std::net::TcpListener) -> Result<TrialAccess, String>;
    /// Stop serving the trial's listener (requests in flight are dropped and charged at
    /// their worst case) and return its log.
    fn close(&self, access: &TrialAccess) -> BoxFuture<'_, TrialModelLog>;
}

/// Per-evaluation settings every trial of it shares.
#[derive(Clone)]
pub struct TrialSettings {
    /// The model gateway, when the recipe declares an `evaluator.model`.
    pub gateway: Option<Arc<dyn ModelGateway>>,
    /// Host variables passed to the agent (`evaluator.agent_env`): names and values, read
    /// from the host's environment at evaluation time and never stored.
    pub agent_env: Vec<(String, String)>,
    /// The same for the verifier (`evaluator.verifier_env`).
    pub verifier_env: Vec<(String, String)>,
    /// Multiplies every task's `[agent].timeout_sec`.
    pub agent_timeout_multiplier: f64,
    /// Multiplies every task's `[verifier].timeout_sec`.
    pub verifier_timeout_multiplier: f64,
}

impl Default for TrialSettings {
    fn default() -> Self {
        TrialSettings {
            gateway: None,
            agent_env: Vec::new(),
            verifier_env: Vec::new(),
            agent_timeout_multiplier: 1.0,
            verifier_timeout_multiplier: 1.0,
        }
    }
}

impl std::fmt::Debug for TrialSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values of passed-through variables may be secrets: names only.
        let names = |v: &[(String, String)]| v.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        f.debug_struct("TrialSettings")
            .field("gateway", &self.gateway.is_some())
            .field("agent_env", &names(&self.agent_env))
            .field("verifier_env", &names(&self.verifier_env))
            .field("agent_timeout_multiplier", &self.agent_timeout_multiplier)
            .field(
                "verifier_timeout_multiplier",
                &self.verifier_timeout_multiplier,
            )
            .finish()
    }
}
