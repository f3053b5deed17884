//! analyze/trace_browser: bounded extracts of the failed train trials' trajectories, and
//! the step where each one went wrong, as evidence. Deterministic; no model.
//!
//! Input: the rollout/train summary (this call's `rollout` evidence) and the train
//! feedback bundle the host grants analyze at `/feedback` (its `trajectories/`). Each
//! failed trial is joined to its trajectory and given its *culprit*, the step where it
//! went wrong, by the SDK's rule (`evolve_operator_sdk::trajectories`): the agent step a
//! verifier message points at (a path, file name or backquoted text of the verifier
//! output found in the step's command or output), else the last step whose output shows
//! a failure, else the last tool call.
//!
//! Summary: `{"trials", "failed", "with_trajectory", "traces": [{"task", "repetition",
//! "status", "reward", "passed", "verifier_output", "trajectory", "note", "steps",
//! "culprit": {"step_id", "rule", "clues", "failure"}, "extract": [steps]}], "truncated"}`,
//! the failed trials in summary order. `extract` holds `steps_before` steps before the
//! culprit, the culprit, and `steps_after` after it (the last steps when there is no
//! culprit), each text clipped to `field_chars`. Budget: the first `max_trials` failed
//! trials; then, while the summary's JSON is longer than `max_chars`, `field_chars` is
//! halved (down to 80) and, once at 80, the last trace is dropped. `truncated` says whether
//! anything was left out. `trace_browser.json` in `/scratch` holds every failed trial's
//! trace at the configured `field_chars`, without the `max_trials` and `max_chars` cuts.

use std::path::Path;

use evolve_operator_sdk::config::integer;
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::trajectories::{Bundle, Case, Window, cases_of, write_artifact};

pub struct TraceBrowser;

/// The artifact this operator writes, relative to `/scratch`.
pub const TRACES: &str = "trace_browser.json";
/// Characters of verifier output kept per trace.
pub const OUTPUT_CHARS: usize = 300;
/// The least `field_chars` the budget shrinks to.
pub const MIN_FIELD_CHARS: usize = 80;

impl Operator for TraceBrowser {
    const NAME: &'static str = "trace_browser";
    const SUMMARY: &'static str = "Bounded extracts of the failed train trials' trajectories, \
         and the step where each went wrong.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "max_trials",
                integer()
                    .default(json!(8))
                    .minimum(1.0)
                    .maximum(64.0)
                    .description("Most failed trials traced in the summary, in summary order"),
            )
            .field(
                "steps_before",
                integer()
                    .default(json!(3))
                    .minimum(0.0)
                    .maximum(20.0)
                    .description("Steps kept before the step where a trial went wrong"),
            )
            .field(
                "steps_after",
                integer()
                    .default(json!(1))
                    .minimum(0.0)
                    .maximum(10.0)
                    .description("Steps kept after it"),
            )
            .field(
                "field_chars",
                integer()
                    .default(json!(500))
                    .minimum(MIN_FIELD_CHARS as f64)
                    .maximum(8000.0)
                    .description("Characters kept of each message, command and output"),
            )
            .field(
                "max_chars",
                integer()
                    .default(json!(8000))
                    .minimum(1000.0)
                    .maximum(200_000.0)
                    .description("Longest summary, in characters of JSON"),
            )
    }
}

/// The configuration, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct Config {
    pub max_trials: usize,
    pub steps_before: usize,
    pub steps_after: usize,
    pub field_chars: usize,
    pub max_chars: usize,
}

impl Config {
    fn window(&self, field_chars: usize) -> Window {
        Window {
            before: self.steps_before,
            after: self.steps_after,
            field_chars,
        }
    }
}

fn render(all: &[Case], failed: &[&Case], window: Window, truncated: bool) -> Value {
    json!({
        "trials": all.len(),
        "failed": all.iter().filter(|c| c.trial.failed()).count(),
        "with_trajectory": all.iter().filter(|c| c.trajectory.is_some()).count(),
        "traces": failed.iter().map(|c| c.evidence(window, OUTPUT_CHARS)).collect::<Vec<_>>(),
        "truncated": truncated,
    })
}

/// The bounded summary (see the module documentation).
pub fn bounded_summary(all: &[Case], cfg: &Config) -> Value {
    let failed: Vec<&Case> = all.iter().filter(|c| c.trial.failed()).collect();
    let mut n = failed.len().min(cfg.max_trials);
    let mut chars = cfg.field_chars;
    loop {
        let truncated = n < failed.len() || chars < cfg.field_chars;
        let summary = render(all, &failed[..n], cfg.window(chars), truncated);
        if summary.to_string().chars().count() <= cfg.max_chars {
            return summary;
        }
        if chars > MIN_FIELD_CHARS {
            chars = (chars / 2).max(MIN_FIELD_CHARS);
        } else if n > 0 {
            n -= 1;
        } else {
            return summary;
        }
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
    let failed: Vec<&Case> = all.iter().filter(|c| c.trial.failed()).collect();
    let full = render(&all, &failed, cfg.window(cfg.field_chars), false);
    write_artifact(scratch, TRACES, &full)?;
    Ok(Evidence {
        summary: bounded_summary(&all, &cfg).to_string(),
        artifacts: vec![TRACES.into()],
    })
}

impl Analyze for TraceBrowser {
    fn analyze(ctx: &Context, rollout: &Evidence) -> Result<Evidence, String> {
        let bundle = Bundle::granted();
        analyze_with(ctx, rollout, bundle.as_ref(), Path::new("/scratch"))
    }
}

evolve_operator_sdk::export!(analyze: TraceBrowser);

#[cfg(test)]
mod tests;
