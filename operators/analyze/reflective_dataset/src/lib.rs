//! analyze/reflective_dataset: GEPA's reflective dataset, per-component feedback records
//! (inputs, generated outputs, feedback, score) built from the train trials' trajectories.
//! Deterministic; no model.
//!
//! Input: the rollout/train summary (this call's `rollout` evidence) and the train
//! trajectories in the feedback bundle at `/feedback` (`evolve_operator_sdk::trajectories`).
//! One record per trial (all trials, GEPA's default; only the failed ones with
//! `only_failed`), the first `max_records` in summary order:
//!
//! ```json
//! {"Inputs": {"task_id": "task#0", "instruction": "…"},
//!  "Generated Outputs": {"agent_messages": […], "tool_calls": […], "tool_results": […]},
//!  "Feedback": {"outcome": "passed|failed", "status", "natural_language_feedback": "…",
//!               "verifier_output": "…", "culprit": {"step_id", "rule", …} | null},
//!  "Scores (Higher is Better)": {"reward": 0.25}}
//! ```
//!
//! The generated outputs are the `steps_per_record` agent-side steps up to the step where
//! a failed trial went wrong (the SDK's rule), else the last ones; every text is clipped to
//! `field_chars`. `natural_language_feedback` says, in one paragraph, the outcome, the
//! verifier's last line and the step where the trial went wrong (its command and the
//! failure its output shows). As in GEPA, the same records serve every component:
//! `reflective_dataset.json` in `/scratch` maps each of `components` to them.
//!
//! Summary: `{"components", "records", "outcomes": {"passed", "failed"}, "feedback":
//! [{"task", "reward", "feedback"}], "truncated"}`: the natural-language feedback of each
//! record, failed trials first, cut from the end to fit `max_chars` characters of JSON.

use std::path::Path;

use evolve_operator_sdk::config::{array, boolean, integer, string};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::trajectories::{
    Bundle, Case, Rule, Window, cases_of, clip, verifier_text, write_artifact,
};

pub struct ReflectiveDataset;

/// The artifact this operator writes, relative to `/scratch`.
pub const DATASET: &str = "reflective_dataset.json";
/// Characters of verifier output kept per record.
pub const OUTPUT_CHARS: usize = 600;

impl Operator for ReflectiveDataset {
    const NAME: &'static str = "reflective_dataset";
    const SUMMARY: &'static str = "GEPA's reflective dataset: per-component feedback records \
         (inputs, outputs, feedback) built from the train trajectories.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "components",
                array(string())
                    .required()
                    .minimum(1.0)
                    .maximum(32.0)
                    .description(
                        "The components the records are for, as checkout-relative paths \
                         (e.g. target/prompts/system.md); every component gets the same records",
                    ),
            )
            .field(
                "max_records",
                integer()
                    .default(json!(32))
                    .minimum(1.0)
                    .maximum(256.0)
                    .description("Most records, in summary order"),
            )
            .field(
                "only_failed",
                boolean()
                    .default(json!(false))
                    .description("Records for failed trials only (GEPA: every trial)"),
            )
            .field(
                "steps_per_record",
                integer()
                    .default(json!(6))
                    .minimum(1.0)
                    .maximum(50.0)
                    .description("Agent steps kept as a record's generated outputs"),
            )
            .field(
                "field_chars",
                integer()
                    .default(json!(1000))
                    .minimum(80.0)
                    .maximum(16000.0)
                    .description("Characters kept of each text in a record"),
            )
            .field(
                "max_chars",
                integer()
                    .default(json!(6000))
                    .minimum(1000.0)
                    .maximum(200_000.0)
                    .description("Longest summary, in characters of JSON"),
            )
            .refine(check_components)
    }
}

/// A component is a plain checkout-relative path: not absolute, no `.`/`..`/empty segment.
fn check_components(c: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let mut v = Vec::new();
    let list = c.get("components").and_then(Value::as_array);
    for (i, p) in list.into_iter().flatten().enumerate() {
        let Some(p) = p.as_str() else { continue };
        let p = p.trim_end_matches('/');
        let plain = !p.starts_with('/')
            && !p.is_empty()
            && p.split('/').all(|s| !s.is_empty() && s != "." && s != "..");
        if !plain {
            v.push(Violation::new(
                format!("components[{i}]"),
                "must be a checkout-relative path without `.` or `..`, e.g. target/prompts/system.md",
            ));
        }
    }
    if v.is_empty() { Ok(()) } else { Err(v) }
}

/// The configuration, typed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Config {
    pub components: Vec<String>,
    pub max_records: usize,
    pub only_failed: bool,
    pub steps_per_record: usize,
    pub field_chars: usize,
    pub max_chars: usize,
}

/// The verifier output's last non-empty line.
fn last_line(output: &str) -> Option<&str> {
    output.lines().map(str::trim).rfind(|l| !l.is_empty())
}

fn reward_text(r: Option<f64>) -> String {
    r.map_or("none".into(), |r| format!("{r}"))
}

/// One paragraph of feedback for a trial (see the module documentation).
pub fn natural_language_feedback(case: &Case, field_chars: usize) -> String {
    let t = &case.trial;
    let status = t.status.as_deref().unwrap_or("unknown status");
    if !t.failed() {
        return format!("Passed ({status}, reward {}).", reward_text(t.reward));
    }
    let mut out = format!("Failed ({status}, reward {}).", reward_text(t.reward));
    if let Some(line) = last_line(verifier_text(&t.verifier_output)) {
        out.push_str(&format!(" The verifier says: {}.", clip(line, 200)));
    }
    match (case.culprit.as_ref(), case.culprit_step()) {
        (Some(c), Some(step)) => {
            let action = clip(step.action().trim(), 160);
            out.push_str(&format!(
                " It went wrong at step {} (`{action}`)",
                c.step_id
            ));
            if let Some(f) = &c.failure {
                out.push_str(&format!(", whose output shows {f}"));
            }
            if c.rule == Rule::VerifierPointer {
                out.push_str(&format!(
                    "; the verifier points there ({})",
                    c.clues.join(", ")
                ));
            }
            out.push('.');
        }
        _ => {
            if let Some(note) = &case.note {
                out.push_str(&format!(" No trajectory: {note}."));
            }
        }
    }
    clip(&out, field_chars.max(200))
}

/// GEPA's record of one trial.
pub fn record(case: &Case, cfg: &Config) -> Value {
    let t = &case.trial;
    let w = Window {
        before: cfg.steps_per_record.saturating_sub(1),
        after: 0,
        field_chars: cfg.field_chars,
    };
    let steps = case.extract(w);
    let agent = steps.iter().filter(|s| s.source == "agent");
    let instruction = case
        .trajectory
        .as_ref()
        .and_then(|t| t.instruction())
        .map(|i| clip(i, cfg.field_chars));
    json!({
        "Inputs": {"task_id": t.key(), "instruction": instruction},
        "Generated Outputs": {
            "agent_messages": agent.clone().map(|s| &s.message).filter(|m| !m.is_empty()).collect::<Vec<_>>(),
            "tool_calls": agent.clone().flat_map(|s| &s.tool_calls).collect::<Vec<_>>(),
            "tool_results": agent.map(|s| &s.observation).filter(|o| !o.is_empty()).collect::<Vec<_>>(),
        },
        "Feedback": {
            "outcome": if t.failed() { "failed" } else { "passed" },
            "status": t.status,
            "natural_language_feedback": natural_language_feedback(case, cfg.field_chars),
            "verifier_output": clip(verifier_text(&t.verifier_output), OUTPUT_CHARS),
            "culprit": case.culprit,
        },
        "Scores (Higher is Better)": {"reward": t.reward.unwrap_or(0.0)},
    })
}

/// The cases that get a record: failed ones only with `only_failed`, at most
/// `max_records`, in summary order.
fn chosen<'a>(all: &'a [Case], cfg: &Config) -> Vec<&'a Case> {
    all.iter()
        .filter(|c| !cfg.only_failed || c.trial.failed())
        .take(cfg.max_records)
        .collect()
}

/// The bounded summary (see the module documentation).
pub fn bounded_summary(chosen: &[&Case], cfg: &Config) -> Value {
    let failed = chosen.iter().filter(|c| c.trial.failed()).count();
    let mut ordered: Vec<&Case> = chosen.to_vec();
    ordered.sort_by_key(|c| !c.trial.failed());
    let mut feedback: Vec<Value> = ordered
        .iter()
        .map(|c| {
            json!({"task": c.trial.key(), "reward": c.trial.reward,
                   "feedback": natural_language_feedback(c, cfg.field_chars)})
        })
        .collect();
    let mut truncated = false;
    loop {
        let summary = json!({
            "components": cfg.components,
            "records": chosen.len(),
            "outcomes": {"passed": chosen.len() - failed, "failed": failed},
            "feedback": feedback,
            "truncated": truncated,
        });
        if summary.to_string().chars().count() <= cfg.max_chars || feedback.pop().is_none() {
            return summary;
        }
        truncated = true;
    }
}

/// The whole operator with `/feedback` and `/scratch` passed in.
pub fn analyze_with(
    ctx: &Context,
    rollout: &Evidence,
    feedback: Option<&Bundle>,
    scratch: &Path,
) -> Result<Evidence, String> {
    let cfg: Config = ctx.config_as()?;
    let all = cases_of(&rollout.summary, feedback)?;
    let chosen = chosen(&all, &cfg);
    let records: Vec<Value> = chosen.iter().map(|c| record(c, &cfg)).collect();
    let dataset: Map<String, Value> = cfg
        .components
        .iter()
        .map(|c| (c.clone(), Value::Array(records.clone())))
        .collect();
    write_artifact(scratch, DATASET, &Value::Object(dataset))?;
    Ok(Evidence {
        summary: bounded_summary(&chosen, &cfg).to_string(),
        artifacts: vec![DATASET.into()],
    })
}

impl Analyze for ReflectiveDataset {
    fn analyze(ctx: &Context, rollout: &Evidence) -> Result<Evidence, String> {
        let bundle = Bundle::granted();
        analyze_with(ctx, rollout, bundle.as_ref(), Path::new("/scratch"))
    }
}

evolve_operator_sdk::export!(analyze: ReflectiveDataset);

#[cfg(test)]
mod tests;
