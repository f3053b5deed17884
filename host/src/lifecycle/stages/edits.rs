//! The guardrail on a candidate's edits of its own operators (surface `operators/**`).
//!
//! Every stage after the child's commit (gate, record) and every later generation that
//! descends from it (select from the champion, rollout/analyze/mutate from the fork,
//! validate/novelty on the tree) loads its operator from the candidate's tree. A child
//! that writes garbage into `operators/select.wasm` and then scores higher would become
//! the champion, and no later generation could select a parent. So before a mutated
//! tree is committed, every file it changed that some stage loads is held to the same
//! contract check the recipe check applies to a binding, with the same code: the
//! component is loaded for its stage (`Sandbox::load_from_checkout`: header, compile,
//! world, link) and must describe itself as that stage; a script operator's script must
//! be readable the way the run reads it and must compile and define the stage's
//! function. Deleting a stage's component or script is a defect too: the stage could
//! not load. The binding's configuration is not held against a replacement: it is
//! frozen in `recipe.yaml`, which no candidate can edit, so a candidate that swaps in
//! another operator could never make its schema match; what the new operator does with
//! the configuration is its behaviour, judged by its results like any other.

use super::Stages;
use crate::layout;
use crate::sandbox::types::Stage;
use crate::sandbox::{LoadError, LoadErrorKind, LoadedOperator, StageInput, parse_stage};
use crate::scripts;
use evolve_snapshot::{Change, ChangeKind};
use serde_json::Value;
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// How long one check call (describe, normalize-config, a script's sample run) may take:
/// the recipe check's limit.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// A file under `operators/` the candidate changed that its stage could not use.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorDefect {
    /// The workspace path (`operators/select.wasm`, `operators/select/policy.rhai`).
    pub path: String,
    pub stage: Stage,
    pub problem: Problem,
}

/// What is wrong with it.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// The candidate deleted the file the stage loads.
    Deleted,
    /// The component does not load for the stage (unreadable, not wasm, wrong world).
    Load(LoadErrorKind),
    /// It loads, but `describe` fails or names another stage.
    Describe(String),
    /// The binding's script cannot be read, or does not compile or define the stage's
    /// function.
    Script(String),
}

impl fmt::Display for OperatorDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = crate::sandbox::stage_name(self.stage);
        let what = if self.path.ends_with(".wasm") {
            "component"
        } else {
            "script"
        };
        write!(f, "{} (the {stage} stage's {what}) ", self.path)?;
        match &self.problem {
            Problem::Deleted => write!(f, "was deleted; the {stage} stage loads it"),
            Problem::Load(LoadErrorKind::Unreadable(why)) => write!(f, "cannot be read: {why}"),
            Problem::Load(LoadErrorKind::Contract(e)) => write!(f, "{e}"),
            Problem::Describe(why) => write!(f, "fails describe: {why}"),
            Problem::Script(why) => write!(f, "cannot run: {why}"),
        }
    }
}

impl std::error::Error for OperatorDefect {}

/// The stage whose component lives at workspace path `path`, if one does.
fn component_stage(path: &str) -> Option<Stage> {
    let name = path
        .strip_prefix(layout::OPERATORS_DIR)?
        .strip_prefix('/')?
        .strip_suffix(".wasm")?;
    parse_stage(name).filter(|s| layout::component_path(crate::sandbox::stage_name(*s)) == path)
}

impl Stages {
    /// Check every file in `changes` that a stage loads from `checkout` (the mutated
    /// tree): each defect found, in the order of `changes`. Stages a driver rebound load
    /// a host-frozen component instead, but their checkout file is checked all the same:
    /// a later revision may bind the stage to gen/0's operator again.
    pub async fn check_operator_edits(
        &self,
        checkout: &Path,
        changes: &[Change],
    ) -> Vec<OperatorDefect> {
        let mut defects = Vec::new();
        for change in changes {
            if let Some(stage) = component_stage(&change.path)
                && let Err(problem) = self.check_component(stage, checkout, change).await
            {
                defects.push(OperatorDefect {
                    path: change.path.clone(),
                    stage,
                    problem,
                });
            }
            for stage in crate::sandbox::ALL_STAGES {
                let Some(binding) = self.binding(stage) else {
                    continue;
                };
                let is_script = binding.operator == scripts::SCRIPT_OPERATOR
                    && binding.config.get("source").and_then(Value::as_str)
                        == Some(change.path.as_str());
                if !is_script {
                    continue;
                }
                if let Err(problem) = self.check_script(stage, checkout, change).await {
                    defects.push(OperatorDefect {
                        path: change.path.clone(),
                        stage,
                        problem,
                    });
                }
            }
        }
        defects
    }

    fn load(&self, stage: Stage, checkout: &Path, rel: &str) -> Result<LoadedOperator, Problem> {
        self.sandbox
            .load_from_checkout(stage, checkout, rel)
            .map_err(|LoadError { kind, .. }| Problem::Load(kind))
    }

    async fn check_component(
        &self,
        stage: Stage,
        checkout: &Path,
        change: &Change,
    ) -> Result<(), Problem> {
        if change.kind == ChangeKind::Deleted {
            return Err(Problem::Deleted);
        }
        let op = self.load(stage, checkout, &change.path)?;
        let report = self
            .sandbox
            .call_bare(&op, StageInput::Describe, CHECK_TIMEOUT)
            .await
            .map_err(|e| Problem::Describe(format!("no scratch directory: {e}")))?;
        match report.outcome {
            Ok(_) => Ok(()),
            Err(f) => Err(Problem::Describe(format!("{f} ({})", f.kind()))),
        }
    }

    /// The script of `stage`'s script binding at `change.path`, read as the run reads it
    /// and compiled by the stage's component of the same tree (the one that will run it)
    /// on the stage's sample input, as the recipe check compiles a recipe's script.
    async fn check_script(
        &self,
        stage: Stage,
        checkout: &Path,
        change: &Change,
    ) -> Result<(), Problem> {
        if change.kind == ChangeKind::Deleted {
            return Err(Problem::Deleted);
        }
        let binding = self.binding(stage);
        let source = binding
            .as_ref()
            .map_or(Ok(None), |b| {
                scripts::read(&b.operator, &b.config, checkout)
            })
            .map_err(Problem::Script)?;
        let rel = layout::component_path(crate::sandbox::stage_name(stage));
        // A broken component is reported for its own path; the script cannot be judged.
        let Ok(op) = self.load(stage, checkout, &rel) else {
            return Ok(());
        };
        let config = binding
            .map(|b| Value::Object(b.config).to_string())
            .unwrap_or_else(|| "{}".into());
        let mut input = crate::samples::input(stage, &config);
        scripts::attach(&mut input, source);
        let report = self
            .sandbox
            .call_bare(&op, input, CHECK_TIMEOUT)
            .await
            .map_err(|e| Problem::Script(format!("no scratch directory: {e}")))?;
        match report.outcome {
            Err(crate::sandbox::OperatorFailure::Reported(m)) if scripts::is_script_defect(&m) => {
                Err(Problem::Script(m))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stage_component_path_names_a_stage() {
        assert_eq!(
            component_stage("operators/select.wasm"),
            Some(Stage::Select)
        );
        assert_eq!(component_stage("operators/gate.wasm"), Some(Stage::Gate));
        for other in [
            "operators/driver.wasm",
            "operators/select/select.wasm",
            "operators/select.wasm.bak",
            "operators/manifest.json",
            "target/select.wasm",
            "operatorsselect.wasm",
        ] {
            assert_eq!(component_stage(other), None, "{other}");
        }
    }
}
