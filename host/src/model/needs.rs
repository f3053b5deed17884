//! Whether a recipe's operators call a model, and whether the model it configures is
//! there: what `evolve recipe check`, `init` and `run --dry-run` say about the model
//! (and check, with `--check`), for the operators' `model:` block and the agent's
//! `evaluator.model`.

use super::{GatewayConfig, ModelClient, ModelConfig};
use crate::recipe::{Recipe, resolve_operator};
use crate::sandbox::{Capability, Sandbox, granted_capabilities, parse_stage};
use serde_json::Value;
use std::path::Path;

/// What a recipe needs of the model and what was found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ModelCheck {
    /// `operators.STAGE (OPERATOR)` of every binding whose component imports `model`.
    pub callers: Vec<String>,
    /// Problems, as (recipe field, message): the `model:` block's (all of them), a model
    /// needed but not configured (with `--check`), a probe that failed.
    pub problems: Vec<(String, String)>,
    /// Lines worth saying that are not problems.
    pub notes: Vec<String>,
}

impl ModelCheck {
    /// Add the problems to a recipe check's `violations` and print the notes on stderr.
    pub fn report(&self, violations: &mut Vec<evolve_config_schema::Violation>) {
        violations.extend(
            self.problems
                .iter()
                .map(|(field, message)| evolve_config_schema::Violation::new(field, message)),
        );
        for note in &self.notes {
            eprintln!("note: {}", crate::display::text(note));
        }
    }
}

/// The bindings of `recipe` (operator paths relative to `base`) whose component imports
/// the `model` capability. A binding that cannot be loaded is left out: the recipe check
/// reports it.
pub fn stages_calling_model(sb: &Sandbox, recipe: &Recipe, base: &Path) -> Vec<String> {
    recipe
        .operators
        .iter()
        .filter_map(|(stage_text, binding)| {
            let stage = parse_stage(stage_text)?;
            if !granted_capabilities(stage).contains(&Capability::Model) {
                return None;
            }
            let op = resolve_operator(sb, stage, &binding.operator, base).ok()?;
            op.imported_capabilities()
                .contains(&Capability::Model)
                .then(|| format!("operators.{stage_text} ({})", binding.operator))
        })
        .collect()
}

/// Check `recipe`'s model: its configuration (every problem at once), whether an
/// operator calls a model that is not configured, and with `probe` whether the endpoint
/// answers ([`ModelClient::probe`]). Never prints the key.
pub async fn check_recipe_model(
    sb: &Sandbox,
    recipe: &Recipe,
    base: &Path,
    probe: bool,
) -> ModelCheck {
    let mut check = check_operators_model(sb, recipe, base, probe).await;
    check_named_models(recipe, probe, &mut check);
    check_agent_model(recipe, probe, &mut check).await;
    check
}

/// The recipe's `models:` map: every entry's problems, naming `models.<name>.<field>`
/// (an unset endpoint only without `probe`, as for `model:`, a note).
fn check_named_models(recipe: &Recipe, probe: bool, check: &mut ModelCheck) {
    let Some(models) = recipe.models.as_ref().filter(|m| !m.is_null()) else {
        return;
    };
    let base = recipe.model.clone().unwrap_or(Value::Null);
    match super::named_models(models, &base) {
        Err(errors) => {
            for e in errors.0 {
                if e.unset && !probe {
                    let note = format!("{}: {}; `evolve run` needs it", e.field, e.message);
                    check.notes.push(note);
                } else {
                    check.problems.push((e.field, e.message));
                }
            }
        }
        Ok(named) if !named.is_empty() => {
            let has_default = ModelConfig::from_recipe(&base).is_ok_and(|c| c.is_some());
            if !has_default && !check.problems.iter().any(|(f, _)| f.starts_with("model")) {
                check.problems.push((
                    "models".into(),
                    "named models inherit from the `model:` block (or EVOLVE_MODEL_ENDPOINT and EVOLVE_MODEL), and none is configured".into(),
                ));
            }
        }
        Ok(_) => {}
    }
}

/// The recipe's `evaluator.model` (the agent's model, behind the gateway): every problem
/// of the block, and with `probe` whether its endpoint answers.
async fn check_agent_model(recipe: &Recipe, probe: bool, check: &mut ModelCheck) {
    let block = recipe.evaluator.model.clone().unwrap_or(Value::Null);
    let config = match GatewayConfig::from_recipe(&block) {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(errors) => {
            check
                .problems
                .extend(errors.0.into_iter().map(|e| (e.field, e.message)));
            return;
        }
    };
    if probe {
        probe_into(config.model, check).await;
    }
}

/// Probe the endpoint of `config`, adding a note that it answered or the problem.
async fn probe_into(config: ModelConfig, check: &mut ModelCheck) {
    let field = format!("{}.endpoint", config.block);
    let endpoint = config.endpoint.clone();
    match ModelClient::new(config) {
        Err(e) => check.problems.push((e.field, e.message)),
        Ok(client) => match client.probe().await {
            Ok(()) => check.notes.push(format!("{field} `{endpoint}` answered")),
            Err(e) => check.problems.push((field, probe_message(&e))),
        },
    }
}

/// The operators' `model:` block, and whether an operator calls a model none configures.
async fn check_operators_model(
    sb: &Sandbox,
    recipe: &Recipe,
    base: &Path,
    probe: bool,
) -> ModelCheck {
    let mut check = ModelCheck {
        callers: stages_calling_model(sb, recipe, base),
        ..ModelCheck::default()
    };
    let block = recipe.model.clone().unwrap_or(Value::Null);
    let config = match ModelConfig::from_recipe(&block) {
        Ok(c) => c,
        Err(errors) => {
            // A recipe may leave the endpoint and model to the environment of the run
            // (the shipped recipes do): only `--check`, which is about this machine now,
            // counts their absence as a problem.
            for e in errors.0 {
                if e.unset && !probe {
                    check
                        .notes
                        .push(format!("{}: {}; `evolve run` needs it", e.field, e.message));
                } else {
                    check.problems.push((e.field, e.message));
                }
            }
            return check;
        }
    };
    let Some(config) = config else {
        if !check.callers.is_empty() {
            let what = format!(
                "{} call{} a model, but none is configured: set model.endpoint and model.model in the recipe (or {} and {}); see docs/model.md",
                check.callers.join(", "),
                if check.callers.len() == 1 { "s" } else { "" },
                super::ENDPOINT_ENV,
                super::MODEL_ENV,
            );
            if probe {
                check.problems.push(("model".into(), what));
            } else {
                check.notes.push(what);
            }
        }
        return check;
    };
    if probe {
        probe_into(config, &mut check).await;
    }
    check
}

/// The probe's error without its leading `<block>.endpoint` (the violation names the
/// field).
fn probe_message(e: &super::ProbeError) -> String {
    let text = e.to_string();
    text.strip_prefix(&format!("{}.endpoint ", e.block))
        .map(str::to_string)
        .unwrap_or(text)
}

/// `evolve init`'s model check, before anything is created: with `probe`, every problem
/// (as one text) refuses the init; without, they and the notes are printed on stderr.
/// A recipe that does not parse is left to init, which reports it.
pub async fn check_init_model(
    sb: &Sandbox,
    recipe_text: &str,
    base: &Path,
    probe: bool,
) -> Result<(), String> {
    let Some(recipe) = crate::recipe::check_shape(recipe_text).recipe else {
        return Ok(());
    };
    let check = check_recipe_model(sb, &recipe, base, probe).await;
    let problems: Vec<String> = check
        .problems
        .iter()
        .map(|(field, message)| format!("{field}: {message}"))
        .collect();
    if probe && !problems.is_empty() {
        return Err(problems.join("; "));
    }
    for line in problems.iter().chain(&check.notes) {
        eprintln!("note: {}", crate::display::text(line));
    }
    Ok(())
}

/// `evolve run --dry-run`'s note that an operator calls a model none configures.
pub fn note_missing_model(sb: &Sandbox, recipe: &Recipe, base: &Path) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let check = rt.block_on(check_recipe_model(sb, recipe, base, false));
    for (field, message) in &check.problems {
        println!("  note: {field}: {}", crate::display::text(message));
    }
    for note in &check.notes {
        println!("  note: {}", crate::display::text(note));
    }
}
