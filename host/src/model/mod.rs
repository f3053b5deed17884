//! The host side of the `model` capability: OpenAI-compatible chat completions over
//! HTTP(S), metered against the experiment's budget and logged with secrets redacted.
//!
//! A [`ModelConfig`] comes from the recipe's `model:` block
//! ([`ModelConfig::from_recipe`]); one [`ModelClient`] per experiment holds the pooled
//! HTTP client, the endpoint and the key; each stage call gets its own
//! [`MeteredModel`] from [`ModelClient::scope`], with the budget left and the
//! directory its `model.jsonl` goes to. The lifecycle reads
//! [`MeteredModel::bill`] after the stage and archives it with the stage's event
//! ([`ledger`] charges what a killed run never archived). See `docs/model.md`.
//!
//! The agent under test reaches its own model (the recipe's `evaluator.model`) through
//! the [`gateway`], an OpenAI-compatible endpoint served by the host, metered by the same
//! code, budget and ledger.
//!
//! Error texts handed to the operator never carry the endpoint, the key or a header:
//! transport errors are reduced to their kind, and provider messages go through the
//! same redaction as the log.

mod budget;
mod client;
mod complete;
mod config;
pub mod gateway;
pub mod ledger;
mod meter;
mod named;
mod needs;
mod redact;

pub use budget::{Bill, BudgetPool, TOKENS_PER_MESSAGE, estimate_input_tokens, estimate_tokens};
pub use client::{Health, ModelClient, PROBE_TIMEOUT, ProbeCause, ProbeError};
pub use config::{
    DEFAULT_API_KEY_ENV, ENDPOINT_ENV, MODEL_ENV, ModelConfig, ModelConfigError, ModelConfigErrors,
    PRICE_KEYS, Prices, RECIPE_KEYS,
};
pub use gateway::{Gateway, GatewayConfig, GatewayPolicy};
pub use ledger::SpendLedger;
pub use meter::{LOG_FILE, MeteredModel, Usage};
pub use named::{named_models, named_models_with_env, valid_model_name};
pub use needs::{
    ModelCheck, check_init_model, check_recipe_model, note_missing_model, stages_calling_model,
};
