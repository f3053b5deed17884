//! analyze/trajectory_judge: a model-judged summary of the failed train trials'
//! trajectories, through the host's metered `model` capability (one `chat` call).
//!
//! Input: the rollout/train summary (this call's `rollout` evidence) and the train
//! trajectories in the feedback bundle at `/feedback`. The first `max_trials` failed trials
//! are shown to the model, each as its task, status, reward, verifier output (last 600
//! characters) and an extract of its trajectory around the step where it went wrong (the
//! SDK's rule, `evolve_operator_sdk::trajectories`), every text clipped to `field_chars`.
//! Trials are added while the prompt stays within `max_prompt_chars` (a first trial longer
//! than that is clipped to it). The model is asked where each trial went wrong and for the
//! general lessons about the agent (not the tasks' answers).
//!
//! No failed trial: no model call, and the summary says so. A model error (budget
//! exhausted, timeout, refusal, …) is this operator's error, `analyze/trajectory_judge:
//! model: <kind>: <message>`: the stage fails rather than hand mutate an empty judgement.
//!
//! Summary: `{"judged": ["task#rep", …], "left_out": n, "culprits": [{"task", "step_id",
//! "rule"}], "verdict": "<the model's answer, at most max_answer_chars>", "usd",
//! "input_tokens", "output_tokens"}` (the call's cost as the host metered it).
//! `trajectory_judge.json` in `/scratch` keeps the request and the whole answer.

use std::path::Path;

use evolve_operator_sdk::config::{integer, number};
use evolve_operator_sdk::feedback::model_error;
use evolve_operator_sdk::model::{self, ChatRequest, ChatResponse, Message, ModelError, Role};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::trajectories::{
    Bundle, Case, StepExtract, Window, cases_of, clip, tail, verifier_text, write_artifact,
};

pub struct TrajectoryJudge;

/// The artifact this operator writes, relative to `/scratch`.
pub const JUDGEMENT: &str = "trajectory_judge.json";
/// Characters of verifier output shown per trial.
pub const OUTPUT_CHARS: usize = 600;

/// What the model is asked to do.
pub const SYSTEM: &str = "You review the trajectories of a command-line AI agent on train \
tasks it failed. For each trial you get the verifier's output and the agent's steps around \
the step where it went wrong (marked `<- went wrong`). For each trial, say in one or two \
sentences what went wrong and at which step. Then list at most three general lessons for \
improving the agent's prompts or settings; do not give any task's answer. Be brief.";

impl Operator for TrajectoryJudge {
    const NAME: &'static str = "trajectory_judge";
    const SUMMARY: &'static str = "A model-judged summary of the failed train trials' \
         trajectories: where each went wrong, and general lessons (metered).";

    fn config() -> SchemaBuilder {
        let int = |default: i64, min: f64, max: f64, what: &str| {
            integer()
                .default(json!(default))
                .minimum(min)
                .maximum(max)
                .description(what)
        };
        Schema::new()
            .field(
                "max_trials",
                int(4, 1.0, 32.0, "Most failed trials shown to the model"),
            )
            .field(
                "steps_before",
                int(
                    3,
                    0.0,
                    20.0,
                    "Steps shown before the step where a trial went wrong",
                ),
            )
            .field("steps_after", int(1, 0.0, 10.0, "Steps shown after it"))
            .field(
                "field_chars",
                int(
                    400,
                    80.0,
                    4000.0,
                    "Characters shown of each message, command and output",
                ),
            )
            .field(
                "max_prompt_chars",
                int(16000, 2000.0, 200_000.0, "Longest prompt, in characters"),
            )
            .field(
                "max_tokens",
                int(
                    600,
                    16.0,
                    8192.0,
                    "Upper bound on the model's answer, in tokens",
                ),
            )
            .field(
                "temperature",
                number()
                    .default(json!(0.0))
                    .minimum(0.0)
                    .maximum(2.0)
                    .description("Sampling temperature of the model call"),
            )
            .field(
                "max_answer_chars",
                int(
                    4000,
                    200.0,
                    20000.0,
                    "Longest verdict kept in the summary, in characters",
                ),
            )
    }
}

/// The configuration, typed.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
pub struct Config {
    pub max_trials: usize,
    pub steps_before: usize,
    pub steps_after: usize,
    pub field_chars: usize,
    pub max_prompt_chars: usize,
    pub max_tokens: u32,
    pub temperature: f64,
    pub max_answer_chars: usize,
}

fn step_text(s: &StepExtract) -> String {
    let mark = if s.culprit { "  <- went wrong" } else { "" };
    let mut out = format!("[step {} {}]{mark}\n", s.step_id, s.source);
    if !s.message.is_empty() {
        out.push_str(&format!("  message: {}\n", s.message));
    }
    for call in &s.tool_calls {
        out.push_str(&format!("  call: {call}\n"));
    }
    if !s.observation.is_empty() {
        out.push_str(&format!("  output: {}\n", s.observation));
    }
    out
}

/// One failed trial as the model sees it.
pub fn case_text(case: &Case, w: Window) -> String {
    let t = &case.trial;
    let reward = t.reward.map_or("none".into(), |r| format!("{r}"));
    let mut out = format!(
        "## Trial {} ({}, reward {reward})\nVerifier output:\n{}\n",
        t.key(),
        t.status.as_deref().unwrap_or("unknown status"),
        clip(
            tail(verifier_text(&t.verifier_output), OUTPUT_CHARS),
            w.field_chars
        ),
    );
    match (&case.culprit, &case.note) {
        (Some(c), _) => out.push_str(&format!(
            "Where it went wrong (by rule {}): step {}\n",
            c.rule.name(),
            c.step_id
        )),
        (None, Some(note)) => out.push_str(&format!("No trajectory: {note}\n")),
        (None, None) => {}
    }
    for s in case.extract(w) {
        out.push_str(&step_text(&s));
    }
    out
}

/// The prompt's user message: the failed trials that fit `max_prompt_chars`, and how
/// many were shown.
pub fn user_prompt(failed: &[&Case], cfg: &Config) -> (String, usize) {
    let w = Window {
        before: cfg.steps_before,
        after: cfg.steps_after,
        field_chars: cfg.field_chars,
    };
    let head = "The failed train trials:\n\n";
    let mut out = head.to_string();
    let mut shown = 0;
    for case in failed.iter().take(cfg.max_trials) {
        let text = case_text(case, w);
        let fits = out.chars().count() + text.chars().count() < cfg.max_prompt_chars;
        if !fits && shown > 0 {
            break;
        }
        let room = cfg.max_prompt_chars.saturating_sub(head.len() + 1);
        out.push_str(&clip(&text, room));
        out.push('\n');
        shown += 1;
    }
    (out, shown)
}

/// The whole operator with `/feedback`, `/scratch` and the host's `model.chat` passed in.
pub fn judge_with(
    ctx: &Context,
    rollout: &Evidence,
    feedback: Option<&Bundle>,
    scratch: &Path,
    chat: &mut dyn FnMut(&ChatRequest) -> Result<ChatResponse, ModelError>,
) -> Result<Evidence, String> {
    let cfg: Config = ctx.config_as()?;
    let all = cases_of(&rollout.summary, feedback)?;
    let failed: Vec<&Case> = all.iter().filter(|c| c.trial.failed()).collect();
    if failed.is_empty() {
        let summary = json!({"judged": [], "left_out": 0, "culprits": [], "verdict": null,
                             "note": "no failed train trial to judge: the model was not called",
                             "usd": 0.0, "input_tokens": 0, "output_tokens": 0});
        return Ok(Evidence {
            summary: summary.to_string(),
            artifacts: vec![],
        });
    }
    let (user, shown) = user_prompt(&failed, &cfg);
    let request = ChatRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: SYSTEM.into(),
            },
            Message {
                role: Role::User,
                content: user.clone(),
            },
        ],
        max_tokens: Some(cfg.max_tokens),
        temperature: Some(cfg.temperature),
    };
    let response =
        chat(&request).map_err(|e| format!("analyze/trajectory_judge: {}", model_error(&e)))?;
    let judged = &failed[..shown];
    let record = json!({
        "request": {"system": SYSTEM, "user": user, "max_tokens": cfg.max_tokens,
                    "temperature": cfg.temperature},
        "response": {"content": response.content, "input_tokens": response.input_tokens,
                     "output_tokens": response.output_tokens, "usd": response.usd},
    });
    write_artifact(scratch, JUDGEMENT, &record)?;
    let summary = json!({
        "judged": judged.iter().map(|c| c.trial.key()).collect::<Vec<_>>(),
        "left_out": failed.len() - shown,
        "culprits": judged.iter().filter_map(|c| c.culprit.as_ref().map(|k| json!({
            "task": c.trial.key(), "step_id": k.step_id, "rule": k.rule}))).collect::<Vec<_>>(),
        "verdict": clip(response.content.trim(), cfg.max_answer_chars),
        "usd": response.usd,
        "input_tokens": response.input_tokens,
        "output_tokens": response.output_tokens,
    });
    Ok(Evidence {
        summary: summary.to_string(),
        artifacts: vec![JUDGEMENT.into()],
    })
}

impl Analyze for TrajectoryJudge {
    fn analyze(ctx: &Context, rollout: &Evidence) -> Result<Evidence, String> {
        let bundle = Bundle::granted();
        judge_with(
            ctx,
            rollout,
            bundle.as_ref(),
            Path::new("/scratch"),
            &mut |r| model::chat(r),
        )
    }
}

evolve_operator_sdk::export!(analyze: TrajectoryJudge);

#[cfg(test)]
mod tests;
