//! The harbor engine's settings as a workspace froze them (`evaluator/engine.json`'s
//! `harbor`): the recipe's `evaluator.harbor` block with every default resolved, and the
//! path by which the agent reaches its model. Part of the runtime fingerprint, so of
//! every evaluation's contract; a run whose recipe no longer gives the same is refused.

use super::EngineConfig;
use crate::recipe::{Recipe, harbor};
use evaluator_harbor::engine::harbor::HarborOptions;
use evaluator_harbor::engine::harbor::job_agent::ModelPath;
use serde::{Deserialize, Serialize};

/// `engine.json`'s `harbor`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarborContract {
    /// What `harbor run` is given. `environment`, `n_concurrent` and `max_retries` are
    /// always set: from the block, else from the evaluation protocol
    /// (`evaluator.n_concurrent`, `evaluator.max_retries`) and Harbor's `docker`.
    pub options: HarborOptions,
    /// How the agent reaches its model: `gateway`, `agent_env` or `none`
    /// ([`ModelPath::as_str`]).
    pub model_path: String,
}

impl HarborContract {
    /// The contract a recipe gives (`None` unless its engine is harbor). Its block must
    /// have passed the recipe check ([`harbor::parse`]); an invalid one is an error
    /// naming its first problem.
    pub fn from_recipe(r: &Recipe) -> Result<Option<HarborContract>, String> {
        let e = &r.evaluator;
        if e.engine != "harbor" {
            return Ok(None);
        }
        let mut options = match e.harbor.as_ref().filter(|b| !b.is_null()) {
            None => HarborOptions::default(),
            Some(block) => harbor::parse(block).map_err(|found| {
                found
                    .first()
                    .map(|v| v.to_string().trim_start_matches("- ").to_string())
                    .unwrap_or_default()
            })?,
        };
        // The protocol's keys are the defaults of the block's (docs/recipes.md).
        options.environment = Some(options.environment().to_string());
        options.n_concurrent.get_or_insert(e.n_concurrent);
        options.max_retries.get_or_insert(e.max_retries);
        let path = if e.model.is_none() && e.agent_env.is_empty() {
            ModelPath::None
        } else if options.is_local_docker() {
            if e.model.is_some() {
                ModelPath::Gateway
            } else {
                ModelPath::None
            }
        } else if !e.agent_env.is_empty() {
            ModelPath::AgentEnv
        } else {
            // A cloud environment with a gateway model only: the recipe check refuses it.
            return Err(
                "evaluator.harbor.environment: a cloud environment cannot reach the host's model gateway (evaluator.model); name the agent's model variables in evaluator.agent_env".into(),
            );
        };
        Ok(Some(HarborContract {
            options,
            model_path: path.as_str().to_string(),
        }))
    }

    /// The model path in force.
    pub fn model_path(&self) -> ModelPath {
        match self.model_path.as_str() {
            "gateway" => ModelPath::Gateway,
            "agent_env" => ModelPath::AgentEnv,
            _ => ModelPath::None,
        }
    }
}

impl EngineConfig {
    /// The frozen harbor settings must be what the recipe gives: a recipe changed after
    /// `init` (its block, the protocol keys that default it, or the model path) would
    /// evaluate under a contract other than the one every evaluation records.
    pub fn check_harbor(&self, r: &Recipe) -> Result<(), String> {
        let now = HarborContract::from_recipe(r)?;
        if now == self.harbor {
            return Ok(());
        }
        let what = match (&self.harbor, &now) {
            (Some(a), Some(b)) if a.model_path != b.model_path => format!(
                "the model path (`{}` frozen, `{}` now)",
                a.model_path, b.model_path
            ),
            (Some(a), Some(b)) => {
                let fa = serde_json::to_value(&a.options).unwrap_or_default();
                let fb = serde_json::to_value(&b.options).unwrap_or_default();
                let mut fields: Vec<&str> = HarborOptions::FLAGS
                    .iter()
                    .map(|(f, _)| *f)
                    .filter(|f| fa.get(f) != fb.get(f))
                    .collect();
                fields.dedup();
                format!("evaluator.harbor.{}", fields.join(", evaluator.harbor."))
            }
            _ => "whether the harbor engine is used".to_string(),
        };
        Err(format!(
            "the recipe's harbor settings differ from the ones frozen in {} at init: {what}",
            crate::layout::ENGINE_FILE
        ))
    }
}
