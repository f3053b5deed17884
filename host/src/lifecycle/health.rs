//! Whether the run's infrastructure works: the model endpoint probed before generation 1,
//! the note on trials that run without the sandbox, and stopping early once generations
//! fail alike for a cause outside the search (docs/lifecycle.md, "Stopping early").

use super::{Driver, Result, RunError, State};
use evolve_archive::Row;

impl Driver {
    /// Where bubblewrap is missing, a local run goes ahead only when its trials are all
    /// built-in code (`EngineConfig::refuse_uncontainable`): say that they run on the host.
    pub(super) fn note_framework_only_trials(&self) {
        let engine = &self.ws.engine;
        if engine.engine == "local"
            && !engine.unconfined_trials
            && evaluator_harbor::engine::contain::bubblewrap().is_err()
        {
            self.say(
                "note: bubblewrap is not installed, and this recipe's trials are the built-in seed's agent component and tasks (framework code only), so they run without the sandbox; an agent of your own needs it (Debian/Ubuntu: apt-get install bubblewrap)",
            );
        }
    }

    /// Ask the model provider once, before generation 1 spends anything, whether it is
    /// there (no model configured: nothing to ask).
    pub(super) async fn probe_model(&self) -> Result<()> {
        self.probe_agent_model().await?;
        let Some(client) = &self.model else {
            return Ok(());
        };
        self.say("checking the model endpoint");
        let Err(e) = client.probe().await else {
            return Ok(());
        };
        // A model configured only by the environment (EVOLVE_MODEL_ENDPOINT set for other
        // work) must not stop a recipe whose operators never call one.
        let callers = crate::model::stages_calling_model(
            self.stages.sandbox(),
            &self.ws.recipe,
            self.ws.root(),
        );
        if callers.is_empty() {
            self.say(format!(
                "note: {e}; no operator of this recipe calls the model, so the run goes on"
            ));
            return Ok(());
        }
        Err(RunError::new(format!(
            "{e}; {} call(s) it; no generation was run",
            callers.join(", ")
        ))
        .hint(
            "fix model.endpoint in the recipe (or EVOLVE_MODEL_ENDPOINT), start the server, or set the key; `evolve recipe check --check RECIPE` probes without running",
        ))
    }

    /// Ask the agent's model endpoint (`evaluator.model`) whether it is there: every
    /// trial's agent calls it, so a run whose endpoint is down stops before spending.
    async fn probe_agent_model(&self) -> Result<()> {
        let Some(agent) = &self.agent_model else {
            return Ok(());
        };
        let priced =
            (self.ws.engine.agent_model.as_ref()).is_some_and(|p| p.prices.usd(1, 1) > 0.0);
        let left = self.budget_left();
        if priced && left <= 0.0 {
            return Err(RunError::new(format!(
                "the agent's model calls are priced (evaluator.model.prices), but the budget has ${:.4} left: every trial would be refused its first call; no generation was run",
                left.max(0.0)
            ))
            .hint("raise experiment.budget_usd (it pays for the agent's calls and the operators')"));
        }
        self.say("checking the agent's model endpoint");
        agent.client().probe().await.map_err(|e| {
            RunError::new(format!("{e}; the agent under test calls it; no generation was run"))
                .hint("fix evaluator.model.endpoint in the recipe, start the server, or set the key its api_key_env names; `evolve recipe check --check RECIPE` probes without running")
        })
    }

    /// The infrastructure failure every fresh child of a generation ended with, if they
    /// all ended with one: every evaluation `infrastructure_failed`, or every child
    /// `operator_failed` while every model call of the generation failed at the provider
    /// (`before` is the client's health when the generation started).
    pub(super) fn infrastructure_failure(
        &self,
        state: &State,
        fresh: &[String],
        before: Option<&crate::model::Health>,
    ) -> Option<InfraFailure> {
        let rows: Vec<&Row> = fresh.iter().filter_map(|g| state.row(g)).collect();
        if rows.len() != fresh.len() || rows.is_empty() {
            return None;
        }
        let all = |status: &str| rows.iter().all(|r| r.status.as_deref() == Some(status));
        if all("infrastructure_failed") {
            let last = rows
                .last()
                .and_then(|r| r.reason.clone())
                .unwrap_or_default();
            return Some(InfraFailure {
                kind: "evaluation".into(),
                what: format!("every evaluation ended `infrastructure_failed` (the last: {last})"),
            });
        }
        let (Some(client), Some(before)) = (&self.model, before) else {
            return None;
        };
        let now = client.health();
        let failed_calls = now.provider_failures - before.provider_failures;
        if all("operator_failed") && now.answered == before.answered && failed_calls > 0 {
            let why = now.last_failure.unwrap_or_default();
            return Some(InfraFailure {
                kind: format!("model: {why}"),
                what: format!(
                    "every model call failed at the provider: {why} (model.endpoint `{}`)",
                    client.config().endpoint
                ),
            });
        }
        None
    }
}

/// A run stops once this many consecutive generations had every child end with the same
/// infrastructure failure (docs/lifecycle.md, "Stopping early"): the cause is outside
/// the search, so every remaining generation would fail alike and spend its budget.
pub const MAX_INFRA_FAILURES: u32 = 3;

/// An infrastructure failure that ended every child of a generation.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct InfraFailure {
    /// What two generations must share to count as the same failure.
    kind: String,
    /// The line the user reads.
    what: String,
}

/// Consecutive generations of this run that failed with the same [`InfraFailure`].
#[derive(Debug, Default)]
pub(super) struct FailureStreak {
    last: Option<InfraFailure>,
    count: u32,
}

impl FailureStreak {
    /// Count one generation's failure (`None`: it did not fail so); the run's error
    /// once [`MAX_INFRA_FAILURES`] in a row failed the same way.
    pub(super) fn push(&mut self, failure: Option<InfraFailure>) -> Option<RunError> {
        let Some(failure) = failure else {
            *self = FailureStreak::default();
            return None;
        };
        let same = self.last.as_ref().is_some_and(|l| l.kind == failure.kind);
        self.count = if same { self.count + 1 } else { 1 };
        let err = (self.count >= MAX_INFRA_FAILURES).then(|| {
            RunError::new(format!(
                "stopped early: the last {} generations all failed the same way: {}",
                self.count, failure.what
            ))
            .hint("every failure is archived (`evolve log`); fix the cause, then `evolve run` goes on from here")
        });
        self.last = Some(failure);
        err
    }
}
