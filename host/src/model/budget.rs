//! What calls may cost and who pays: the budget pool several meters share, the bill of
//! a scope's ended calls, and the token estimates behind a call's worst case.

use super::client::Completion;
use crate::sandbox::model::ChatRequest;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Tokens counted per message for role and framing in the input estimate.
pub const TOKENS_PER_MESSAGE: u64 = 4;

/// A budget that several meters draw on at once: what was spent, and the worst cases of
/// calls in flight, held until they end. A stage's meter has one of its own; the model
/// gateway gives every trial of one evaluation the same one, so concurrent trials can
/// never together reserve more than is left.
#[derive(Debug)]
pub struct BudgetPool {
    budget_usd: f64,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    spent_usd: f64,
    reserved_usd: f64,
}

impl BudgetPool {
    /// A pool of `budget_usd` (NaN or below 0: nothing).
    pub fn new(budget_usd: f64) -> Arc<BudgetPool> {
        let budget_usd = if budget_usd.is_nan() {
            0.0
        } else {
            budget_usd.max(0.0)
        };
        Arc::new(BudgetPool {
            budget_usd,
            state: Mutex::default(),
        })
    }

    pub fn budget_usd(&self) -> f64 {
        self.budget_usd
    }

    /// What the calls that ended were charged.
    pub fn spent_usd(&self) -> f64 {
        self.lock().spent_usd
    }

    /// The budget less what was spent and what calls in flight may spend.
    pub fn remaining_usd(&self) -> f64 {
        let s = self.lock();
        self.budget_usd - s.spent_usd - s.reserved_usd
    }

    /// Hold `usd` for a call about to be sent, or say what is left when it does not fit.
    /// A free call (0) always fits.
    pub(crate) fn reserve(&self, usd: f64) -> Result<(), f64> {
        let mut s = self.lock();
        let remaining = self.budget_usd - s.spent_usd - s.reserved_usd;
        if usd > 0.0 && usd > remaining {
            return Err(remaining);
        }
        s.reserved_usd += usd;
        Ok(())
    }

    /// A call that held `reserved` ended and was charged `charged`.
    pub(crate) fn release(&self, reserved: f64, charged: f64) {
        let mut s = self.lock();
        s.spent_usd += charged;
        s.reserved_usd -= reserved;
        if s.reserved_usd < 1e-12 {
            s.reserved_usd = 0.0;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
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

/// Tokens in `text`, estimated as one per four characters, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// An answer's tokens when the provider reported none: its content, reasoning and tool
/// calls (their JSON), estimated.
pub(crate) fn estimate_output_tokens(completion: &Completion) -> u64 {
    let message = completion.message();
    let mut tokens = estimate_tokens(&completion.content);
    if let Some(Value::String(r)) = message.get("reasoning_content") {
        tokens += estimate_tokens(r);
    }
    if let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) {
        tokens += estimate_tokens(&calls.to_string());
    }
    tokens
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
