//! The public feedback projection an agent driver receives after a generation.
//!
//! Built from the certified state only, through the same conversion every operator's
//! archive view goes through (`view::row_view`): primary-split scores, statuses and
//! verdicts, never a sealed-anchor result, private task names redacted in every text.
//! Besides the rows it carries which operators were bound in each generation and how
//! each stage fared, derived from the archived statuses.

use super::RecipeHistory;
use crate::lifecycle::State;
use crate::lifecycle::view::{Redactor, row_view};
use crate::sandbox::types::{
    BindingOutcome, DriverFeedback, GenerationFeedback, GenerationStatus, Stage, StageOutcome,
};
use crate::sandbox::{ALL_STAGES, stage_name};
use evolve_archive::Row;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// Archive facts the fold does not keep: which record calls failed, which reflect calls
/// produced a playbook result.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    pub record_failed: BTreeSet<String>,
    pub reflected: BTreeSet<String>,
}

/// The feedback after generation `after`: every row up to it, as operators may see it.
pub(crate) fn project(
    state: &State,
    history: &RecipeHistory,
    marks: &Marks,
    redactor: &Redactor,
    after: u32,
) -> DriverFeedback {
    let generations = state
        .rows
        .iter()
        .filter(|r| generation_of(r).is_some_and(|g| g <= after))
        .map(|r| generation_feedback(r, state, history, marks, redactor))
        .collect();
    let active = history.active();
    DriverFeedback {
        generation: after,
        generations,
        champion: state.champion.as_ref().map(|c| c.genid.clone()),
        active_bindings: canonical_text(&active.recipe["operators"]),
        active_recipe_sha256: active.sha256.clone(),
    }
}

fn generation_of(row: &Row) -> Option<u32> {
    evolve_archive::event::genid_generation(&row.genid).and_then(|g| u32::try_from(g).ok())
}

fn generation_feedback(
    row: &Row,
    state: &State,
    history: &RecipeHistory,
    marks: &Marks,
    redactor: &Redactor,
) -> GenerationFeedback {
    let view = row_view(row, state.eligible(&row.genid), redactor);
    let recipe = history.in_force(view.generation);
    // Only an early stop's reason is shown: it comes from a status event written before
    // any evaluation, so it can never describe an evaluation's tasks.
    let early = early_stop(view.status);
    GenerationFeedback {
        generation_id: view.generation_id,
        parent: view.parent,
        generation: view.generation,
        status: view.status,
        score: view.score,
        verdict: view.verdict,
        failure_stage: row.failure_stage.clone().filter(|_| early),
        reason: row
            .reason
            .as_deref()
            .filter(|_| early)
            .map(|r| redactor.redact(r)),
        recipe_sha256: recipe.sha256.clone(),
        bindings: if row.genid == "0" {
            // The seed was not produced by any stage.
            Vec::new()
        } else {
            binding_outcomes(row, recipe.recipe["operators"].as_object(), marks)
        },
    }
}

fn early_stop(status: GenerationStatus) -> bool {
    matches!(
        status,
        GenerationStatus::NoProposal
            | GenerationStatus::InvalidProposal
            | GenerationStatus::RejectedValidation
            | GenerationStatus::RejectedDuplicate
            | GenerationStatus::OperatorFailed
            | GenerationStatus::BudgetExhausted
    )
}

/// Each bound stage, in lifecycle order, with how it fared: the stages before the one
/// that stopped the generation ran, that one failed, the rest were not reached. The
/// surface check belongs to mutate (its proposal broke the surface).
fn binding_outcomes(
    row: &Row,
    operators: Option<&Map<String, Value>>,
    marks: &Marks,
) -> Vec<BindingOutcome> {
    let stopped_at = row
        .failure_stage
        .as_deref()
        .map(|s| if s == "surface" { "mutate" } else { s })
        .and_then(|s| ALL_STAGES.iter().position(|st| stage_name(*st) == s));
    ALL_STAGES
        .iter()
        .enumerate()
        .filter_map(|(i, stage)| {
            let binding = operators?.get(stage_name(*stage))?;
            let outcome = match stopped_at {
                Some(k) if i < k => StageOutcome::Ok,
                Some(k) if i == k => StageOutcome::Failed,
                Some(_) => StageOutcome::NotReached,
                None => outcome_without_stop(*stage, row, marks),
            };
            Some(BindingOutcome {
                stage: *stage,
                operator: binding["operator"].as_str().unwrap_or("").to_string(),
                outcome,
            })
        })
        .collect()
}

/// How `stage` fared in a generation that no stage stopped.
fn outcome_without_stop(stage: Stage, row: &Row, marks: &Marks) -> StageOutcome {
    let reached = |yes: bool| {
        if yes {
            StageOutcome::Ok
        } else {
            StageOutcome::NotReached
        }
    };
    match stage {
        Stage::Gate => reached(row.verdict.is_some()),
        Stage::Record if marks.record_failed.contains(&row.genid) => StageOutcome::Failed,
        Stage::Record => reached(row.recorded),
        Stage::Reflect if marks.reflected.contains(&row.genid) => StageOutcome::Ok,
        // Reflect runs right after record; no archived result means it failed.
        Stage::Reflect if row.recorded => StageOutcome::Failed,
        Stage::Reflect => StageOutcome::NotReached,
        // Select through novelty ran once the generation was committed.
        _ => reached(row.generated),
    }
}

/// Canonical JSON text (RFC 8785), as every JSON string the host sends.
pub(crate) fn canonical_text(v: &Value) -> String {
    String::from_utf8(evolve_archive::canonical_bytes(v)).unwrap_or_else(|_| "{}".into())
}

/// The feedback as JSON, for the driver's run directory (`input.json`).
pub(crate) fn to_json(f: &DriverFeedback) -> Value {
    let generations: Vec<Value> = f
        .generations
        .iter()
        .map(|g| {
            json!({
                "generation_id": g.generation_id, "parent": g.parent, "generation": g.generation,
                "status": format!("{:?}", g.status), "score": g.score,
                "verdict": g.verdict.map(|v| format!("{v:?}").to_lowercase()),
                "failure_stage": g.failure_stage, "reason": g.reason, "recipe_sha256": g.recipe_sha256,
                "bindings": g.bindings.iter().map(|b| json!({
                    "stage": stage_name(b.stage), "operator": b.operator,
                    "outcome": format!("{:?}", b.outcome),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "generation": f.generation,
        "generations": generations,
        "champion": f.champion,
        "active_bindings": serde_json::from_str::<Value>(&f.active_bindings).unwrap_or(Value::Null),
        "active_recipe_sha256": f.active_recipe_sha256,
    })
}
