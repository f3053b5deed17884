//! The model gateway: the host's OpenAI-compatible endpoint for the agent under test.
//!
//! One [`Gateway`] per evaluation serves every trial's listener (created by the engine
//! inside the trial's network namespace, [`ModelGateway::open`]). Each trial gets a
//! random bearer token, worthless on any other listener, and its own usage and exchange
//! log, returned by [`ModelGateway::close`]. Every call goes through the operators' own
//! metering code ([`MeteredModel`]): the same client, the same worst-case reservation
//! before sending, retries, spend ledger and redaction. All trials draw on one
//! [`BudgetPool`], so concurrent trials cannot together overshoot the budget.
//!
//! The upstream endpoint and key never reach the agent or a log: error texts are
//! redacted, answers relayed with the key and endpoint removed. See `docs/model.md`.

mod config;
pub(crate) mod request;
mod server;
mod stream;

pub use config::{BLOCK, GATEWAY_KEYS, GatewayConfig, GatewayPolicy, endpoint_digest};
pub use server::MAX_REQUEST_BYTES;

use super::budget::BudgetPool;
use super::meter::MeteredModel;
use super::{ModelClient, ModelConfigError};
use evaluator_harbor::engine::BoxFuture;
use evaluator_harbor::gateway::{Exchange, ModelGateway, TrialAccess, TrialModelLog, TrialUsage};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::task::{JoinHandle, JoinSet};

/// The host's model gateway for one evaluation.
pub struct Gateway {
    shared: Arc<Shared>,
    trials: Mutex<HashMap<u64, Open>>,
    next_id: AtomicU64,
}

/// What every trial's server reads.
pub(crate) struct Shared {
    client: ModelClient,
    policy: GatewayPolicy,
    pool: Arc<BudgetPool>,
    log_root: Option<PathBuf>,
}

/// A trial being served.
struct Open {
    trial: Arc<Trial>,
    accept: JoinHandle<()>,
    log_dir: Option<PathBuf>,
}

/// One trial's token, meter and log.
pub(crate) struct Trial {
    token: String,
    meter: MeteredModel,
    log: Mutex<Log>,
    /// The tasks serving the trial's connections, aborted together at close.
    connections: Mutex<JoinSet<()>>,
}

#[derive(Default)]
struct Log {
    calls: u64,
    exchanges: Vec<Exchange>,
    budget_exhausted: bool,
}

impl Gateway {
    /// A gateway forwarding to `client` (made from the recipe's `evaluator.model`, e.g.
    /// by [`GatewayConfig::client`]) under `policy` (frozen in the evaluation contract),
    /// with `budget_left_usd` for every trial of the evaluation together. Each trial's
    /// `model.jsonl` goes to `<log_root>/<trial>-<id>/` when a root is given. Refused when
    /// `client` is not the upstream `policy` was frozen for.
    pub fn new(
        client: ModelClient,
        policy: GatewayPolicy,
        budget_left_usd: f64,
        log_root: Option<PathBuf>,
    ) -> Result<Gateway, ModelConfigError> {
        Gateway::drawing_on(client, policy, BudgetPool::new(budget_left_usd), log_root)
    }

    /// [`Gateway::new`] drawing on `pool`, which other gateways (evaluations running at
    /// the same time) may share: together they never reserve more than it holds.
    pub fn drawing_on(
        client: ModelClient,
        policy: GatewayPolicy,
        pool: Arc<BudgetPool>,
        log_root: Option<PathBuf>,
    ) -> Result<Gateway, ModelConfigError> {
        policy.check_client(&client)?;
        Ok(Gateway {
            shared: Arc::new(Shared {
                client,
                policy,
                pool,
                log_root,
            }),
            trials: Mutex::default(),
            next_id: AtomicU64::new(1),
        })
    }

    pub fn policy(&self) -> &GatewayPolicy {
        &self.shared.policy
    }

    /// What the evaluation's calls were charged so far (closed and open trials).
    pub fn spent_usd(&self) -> f64 {
        self.shared.pool.spent_usd()
    }

    /// The budget left, less the worst cases of calls in flight.
    pub fn remaining_usd(&self) -> f64 {
        self.shared.pool.remaining_usd()
    }

    /// Where an open trial's `model.jsonl` is written, if anywhere.
    pub fn log_dir(&self, access: &TrialAccess) -> Option<PathBuf> {
        self.lock().get(&access.id).and_then(|o| o.log_dir.clone())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Open>> {
        self.trials.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn open_trial(
        &self,
        trial: &str,
        listener: std::net::TcpListener,
    ) -> Result<TrialAccess, String> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err("the model gateway must be opened inside a tokio runtime".into());
        }
        let what = |e: std::io::Error| format!("the trial's gateway listener: {e}");
        let port = listener.local_addr().map_err(what)?.port();
        listener.set_nonblocking(true).map_err(what)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(what)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let token = new_token()?;
        let log_dir = (self.shared.log_root.as_ref()).map(|r| r.join(dir_name(trial, id)));
        let meter = MeteredModel::new(
            self.shared.client.clone(),
            self.shared.pool.clone(),
            log_dir.clone(),
        );
        let state = Arc::new(Trial {
            token: token.clone(),
            meter,
            log: Mutex::default(),
            connections: Mutex::default(),
        });
        let accept = tokio::spawn(server::accept_loop(
            listener,
            self.shared.clone(),
            state.clone(),
        ));
        self.lock().insert(
            id,
            Open {
                trial: state,
                accept,
                log_dir,
            },
        );
        Ok(TrialAccess { id, token, port })
    }

    async fn close_trial(&self, access: &TrialAccess) -> TrialModelLog {
        let open = {
            let mut trials = self.lock();
            match trials.get(&access.id) {
                Some(o) if o.trial.token == access.token => trials.remove(&access.id),
                _ => None,
            }
        };
        let Some(open) = open else {
            return TrialModelLog::default();
        };
        open.accept.abort();
        let _ = open.accept.await;
        // Dropping a request's future releases its reservation, charging its worst
        // case (the meter's rule for a call abandoned in flight); waiting for every
        // task makes sure that happened before the log is read.
        let mut connections = std::mem::take(&mut *open.trial.connections());
        connections.abort_all();
        while connections.join_next().await.is_some() {}
        open.trial.take_log()
    }
}

impl ModelGateway for Gateway {
    fn open(&self, trial: &str, listener: std::net::TcpListener) -> Result<TrialAccess, String> {
        self.open_trial(trial, listener)
    }

    fn close(&self, access: &TrialAccess) -> BoxFuture<'_, TrialModelLog> {
        let access = access.clone();
        Box::pin(async move { self.close_trial(&access).await })
    }
}

impl Drop for Gateway {
    /// Trials never closed stop being served (their tasks hold the trial, which holds
    /// their handles: only aborting them ends the loop).
    fn drop(&mut self) {
        for (_, open) in self.lock().drain() {
            open.accept.abort();
            open.trial.connections().abort_all();
        }
    }
}

impl Trial {
    fn connections(&self) -> MutexGuard<'_, JoinSet<()>> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count_call(&self) {
        self.log().calls += 1;
    }

    fn push(&self, exchange: Exchange) {
        self.log().exchanges.push(exchange);
    }

    fn note_budget_exhausted(&self) {
        self.log().budget_exhausted = true;
    }

    /// The trial's log, its usage read from the meter.
    fn take_log(&self) -> TrialModelLog {
        let usage = self.meter.usage();
        let bill = self.meter.bill();
        let mut log = self.log();
        TrialModelLog {
            usage: TrialUsage {
                calls: log.calls,
                prompt_tokens: usage.input_tokens,
                completion_tokens: usage.output_tokens,
                usd: bill.usd,
                refused_by_budget: usage.refused_by_budget,
                ledger_ids: bill.calls,
            },
            exchanges: std::mem::take(&mut log.exchanges),
            budget_exhausted: log.budget_exhausted,
        }
    }
}

/// 32 bytes from the OS's random source, as hex: a token nobody can guess, and worth
/// nothing but on its trial's listener.
fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("the OS random source failed making a trial token: {e}"))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("evolve-trial-{hex}"))
}

/// `<trial>-<id>`, the trial's name reduced to `[A-Za-z0-9._-]` (at most 100 of them),
/// so a name cannot climb out of the log root.
fn dir_name(trial: &str, id: u64) -> String {
    let safe: String = trial
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    format!("{}-{id}", safe.trim_start_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_directories_stay_under_the_root_and_tokens_differ() {
        assert_eq!(dir_name("task-a__1", 3), "task-a__1-3");
        assert_eq!(dir_name("../../etc", 1), "_.._etc-1");
        assert_eq!(dir_name("..", 2), "-2");
        assert_eq!(dir_name(&"x".repeat(300), 9).len(), 102);
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), "evolve-trial-".len() + 64);
    }
}
