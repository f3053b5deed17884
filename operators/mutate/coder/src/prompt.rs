//! What the coder tells the model: the system message and the first user message.

use std::path::Path;

use evolve_operator_sdk::edits;
use evolve_operator_sdk::feedback::{render_feedback, summary_json};
use evolve_operator_sdk::prelude::*;

use crate::{Settings, Toolbox};

/// Most files listed in the first message.
const LISTED_FILES: usize = 300;

pub fn system() -> String {
    "You are a coding agent improving an AI agent (the candidate) whose files you can read \
and edit through tools. The candidate is scored on tasks you never see; your evidence comes \
from train tasks only, so make changes that generalize and never special-case a task.\n\n\
Work like an engineer: read the evidence and the trajectories of failing train trials, find \
the mechanism behind the failures, make one coherent change to the part of the candidate \
responsible, and check it by running train tasks when that is allowed. Every path starts with \
its root (`target/...`). Edits outside the editable surface, to framework files or to .wasm \
components are refused with a reason. When the change is complete, call `finish` with notes \
saying what you changed and why."
        .into()
}

fn surface_text(obs: &Observation) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "Editable surface: includes {}; excludes {}.",
        list(&obs.surface.includes),
        list(&obs.surface.excludes)
    )
}

/// The first user message: the task, the surface, the train tasks, the evidence and the
/// candidate's files (names and sizes; the model reads what it needs).
pub fn first(
    ctx: &Context,
    obs: &Observation,
    toolbox: &Toolbox,
    settings: &Settings,
    root: &Path,
) -> String {
    let rollout = obs.rollout.as_ref().map(summary_json);
    let analysis = obs.analysis.as_ref().map(summary_json);
    let evidence = render_feedback(rollout.as_ref(), analysis.as_ref(), settings.evidence_chars);
    let mut files = Vec::new();
    for r in toolbox
        .readable()
        .iter()
        .filter(|r| r.as_str() != "feedback")
    {
        files.extend(edits::list_files(root, r, LISTED_FILES));
    }
    let listing: Vec<String> = files
        .iter()
        .take(LISTED_FILES)
        .map(|f| format!("{} ({} bytes)", f.path, f.size))
        .collect();
    let train = if toolbox.train().is_empty() {
        "none".to_string()
    } else {
        toolbox.train().join(", ")
    };
    let feedback = if toolbox.readable().iter().any(|r| r == "feedback") {
        "The parent's train feedback is under feedback/ (read-only): parent.json, rollout.json, \
analyze.json and trajectories/ when the rollout kept them."
    } else {
        "There is no feedback directory this generation."
    };
    format!(
        "Generation {gen}. Improve the candidate.\n\n{surface}\n\nTrain tasks: {train}\n\n\
    {feedback}\n\nEvidence from the parent's train trials:\n{evidence}\n\nThe candidate's files:\n{listing}\n\n\
    Limits: {turns} model calls, {runs} train run(s) of at most {per} task(s) each.",
        gen = ctx.generation,
        surface = surface_text(obs),
        listing = listing.join("\n"),
        turns = settings.max_turns,
        runs = settings.max_task_runs,
        per = settings.max_tasks_per_run,
    )
}
