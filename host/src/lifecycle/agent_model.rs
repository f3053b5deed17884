//! The agent under test's model (the recipe's `evaluator.model`): the client the host's
//! model gateway forwards to, checked when a run opens against the policy `init` froze,
//! and the budget pool that the gateways of evaluations running at the same time share,
//! so that concurrent children cannot together spend more than is left (docs/model.md).

use super::{Result, RunError};
use crate::model::{BudgetPool, Gateway, GatewayConfig, GatewayPolicy, ModelClient, SpendLedger};
use crate::workspace::Workspace;
use evaluator_harbor::gateway::ModelGateway;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The agent's upstream, for one run.
pub(crate) struct AgentModel {
    client: ModelClient,
    policy: GatewayPolicy,
    /// The pool the gateways alive now draw on (`None` before the first). A gateway holds
    /// it; once none does, the next one gets a new pool of what the archive has left.
    pool: Mutex<Option<Arc<BudgetPool>>>,
}

/// What one evaluation's (or one stage call's) trials may spend on the agent's model.
pub(crate) struct AgentBudget<'a> {
    pub model: &'a AgentModel,
    /// The experiment's budget less what the archive and the calls in flight have spent.
    pub left_usd: f64,
}

impl AgentModel {
    /// The agent's model of the workspace, when `init` froze a policy for one. Its client
    /// shares the operators' connection pool and spend ledger (`operators`), or keeps the
    /// run's ledger itself (`ledger`). Refused when the recipe's block no longer matches
    /// the frozen policy.
    pub(super) fn open(
        ws: &Workspace,
        operators: Option<&ModelClient>,
        ledger: impl FnOnce() -> SpendLedger,
    ) -> Result<Option<AgentModel>> {
        let Some(policy) = ws.engine.agent_model.clone() else {
            return Ok(None);
        };
        let block = ws.recipe.evaluator.model.clone().unwrap_or(Value::Null);
        let config = GatewayConfig::from_recipe(&block)
            .map_err(|e| RunError::new(format!("recipe {e}")))?
            .ok_or_else(|| {
                RunError::new(
                    "the workspace's engine file freezes a policy for the agent's model, but its recipe has no evaluator.model",
                )
            })?;
        let client = config
            .client(operators)
            .map_err(|e| RunError::new(format!("recipe {e}")))?;
        if operators.is_none() {
            client.keep_ledger(ledger());
        }
        policy
            .check_client(&client)
            .map_err(|e| RunError::new(format!("recipe {e}")))?;
        Ok(Some(AgentModel {
            client,
            policy,
            pool: Mutex::default(),
        }))
    }

    pub(crate) fn client(&self) -> &ModelClient {
        &self.client
    }

    /// A gateway for one evaluation's trials, logging each trial's calls under
    /// `log_root`. It draws on the pool of the gateways alive now, or on a new one of
    /// `left_usd` when there are none.
    pub(crate) fn gateway(
        &self,
        left_usd: f64,
        log_root: PathBuf,
    ) -> std::result::Result<Arc<dyn ModelGateway>, String> {
        let pool = {
            let mut slot = self.pool.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some(p) if Arc::strong_count(p) > 1 => p.clone(),
                _ => slot.insert(BudgetPool::new(left_usd)).clone(),
            }
        };
        let gateway = Gateway::drawing_on(
            self.client.clone(),
            self.policy.clone(),
            pool,
            Some(log_root),
        )
        .map_err(|e| format!("the agent's model gateway: {e}"))?;
        Ok(Arc::new(gateway))
    }
}
