//! Bounded, model-readable feedback from a generation's rollout and analysis evidence,
//! shared by the model-driven mutate operators (`mutate/reflective`, `mutate/aevolve`):
//! a headline, the failure groups (or failed trials), each verifier output on one line,
//! everything cut to a character budget on whole lines; and the operator error text for
//! a failed model call.

use crate::model::ModelError;
use crate::prelude::*;
use crate::tasks::TasksError;

/// Characters of verifier output kept per failure line.
pub const OUTPUT_CHARS: usize = 300;

/// The last `n` characters of `s`.
pub fn tail(s: &str, n: usize) -> &str {
    let count = s.chars().count();
    if count <= n {
        return s;
    }
    let start = s.char_indices().nth(count - n).map_or(s.len(), |(i, _)| i);
    &s[start..]
}

/// The first `n` characters of `s`, with `…` when something was cut.
pub fn head(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Verifier output on one line: trimmed lines joined by ` | `, last [`OUTPUT_CHARS`].
pub fn one_line(output: &str) -> String {
    let joined = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    tail(&joined, OUTPUT_CHARS).to_string()
}

fn reward_text(v: Option<&Value>) -> String {
    match v.and_then(Value::as_f64) {
        Some(r) => format!("{r}"),
        None => "none".into(),
    }
}

fn trial_failed(t: &Value) -> bool {
    match t.get("passed").and_then(Value::as_bool) {
        Some(p) => !p,
        None => {
            t.get("status").and_then(Value::as_str) != Some("benchmark-complete")
                || !t
                    .get("reward")
                    .and_then(Value::as_f64)
                    .is_some_and(|r| r >= 1.0)
        }
    }
}

fn with_output(line: String, output: Option<&Value>) -> String {
    match output.and_then(Value::as_str).map(one_line) {
        Some(o) if !o.is_empty() => format!("{line}: {o}"),
        _ => line,
    }
}

fn trial_key(t: &Value) -> String {
    let task = t.get("task").and_then(Value::as_str).unwrap_or("?");
    match t.get("repetition").and_then(Value::as_u64) {
        Some(r) => format!("{task}#{r}"),
        None => task.to_string(),
    }
}

/// The feedback lines, before the character bound.
pub fn feedback_lines(rollout: Option<&Value>, analysis: Option<&Value>) -> Vec<String> {
    let mut lines = Vec::new();
    let trials = rollout
        .and_then(|r| r.get("trials"))
        .and_then(Value::as_array);
    if let Some(trials) = trials {
        let failed = trials.iter().filter(|t| trial_failed(t)).count();
        let mean = match rollout
            .and_then(|r| r.get("mean_reward"))
            .and_then(Value::as_f64)
        {
            Some(m) => format!("{m:.4}"),
            None => "none".into(),
        };
        lines.push(format!(
            "Train rollout: {} trials, {failed} failed, mean reward {mean}.",
            trials.len()
        ));
    }
    let groups = analysis
        .and_then(|a| a.get("groups"))
        .and_then(Value::as_array);
    if let Some(groups) = groups {
        match analysis
            .and_then(|a| a.get("failed_trials"))
            .and_then(Value::as_u64)
        {
            Some(n) => lines.push(format!("Failure patterns ({n} failed trials):")),
            None => lines.push("Failure patterns:".into()),
        }
        if groups.is_empty() {
            lines.push("(none: no train trial failed)".into());
        }
        for g in groups {
            let pattern = g.get("pattern").and_then(Value::as_str).unwrap_or("?");
            let count = g.get("count").and_then(Value::as_u64).unwrap_or(0);
            let tasks: Vec<&str> = g
                .get("tasks")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            lines.push(format!(
                "- {pattern} ({count} trials; tasks: {})",
                tasks.join(", ")
            ));
            for ex in g
                .get("examples")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let line = format!(
                    "  - {} (reward {})",
                    trial_key(ex),
                    reward_text(ex.get("reward"))
                );
                lines.push(with_output(line, ex.get("verifier_output")));
            }
        }
    } else if let Some(trials) = trials {
        let failed: Vec<&Value> = trials.iter().filter(|t| trial_failed(t)).collect();
        if failed.is_empty() {
            lines.push("No train trial failed.".into());
        } else {
            lines.push("Failed trials:".into());
        }
        for t in failed {
            let status = t.get("status").and_then(Value::as_str).unwrap_or("unknown");
            let line = format!(
                "- {}: {status}, reward {}",
                trial_key(t),
                reward_text(t.get("reward"))
            );
            lines.push(with_output(line, t.get("verifier_output")));
        }
    }
    match (analysis, groups) {
        (Some(a), None) => lines.push(format!("Analysis: {a}")),
        (None, None) if trials.is_none() => match rollout {
            Some(r) => lines.push(format!("Rollout: {r}")),
            None => lines.push("No train evidence is available for this generation.".into()),
        },
        _ => {}
    }
    lines
}

/// Join `lines` within `max_chars` characters: whole lines from the start, then a line
/// saying how many were left out (a first line longer than the budget is cut).
pub fn bound_lines(lines: &[String], max_chars: usize) -> String {
    let full = lines.join("\n");
    if full.chars().count() <= max_chars {
        return full;
    }
    const RESERVE: usize = 64;
    let budget = max_chars.saturating_sub(RESERVE);
    let mut out = String::new();
    let mut used = 0;
    let mut shown = 0;
    for line in lines {
        let len = line.chars().count() + usize::from(shown > 0);
        if used + len > budget {
            if shown == 0 {
                out = head(line, budget);
                shown = 1;
            }
            break;
        }
        if shown > 0 {
            out.push('\n');
        }
        out.push_str(line);
        used += len;
        shown += 1;
    }
    let omitted = lines.len() - shown;
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&format!(
        "[{omitted} more lines left out to fit max_feedback_chars]"
    ));
    out
}

/// The bounded feedback text for a rollout and analysis summary.
pub fn render_feedback(
    rollout: Option<&Value>,
    analysis: Option<&Value>,
    max_chars: usize,
) -> String {
    bound_lines(&feedback_lines(rollout, analysis), max_chars)
}

/// An evidence summary as JSON (a summary that is not JSON is kept as a string).
pub fn summary_json(e: &Evidence) -> Value {
    serde_json::from_str(&e.summary).unwrap_or_else(|_| Value::String(e.summary.clone()))
}

/// A model error as the operator's error message.
pub fn model_error(e: &ModelError) -> String {
    match e {
        ModelError::BudgetExhausted => {
            "model: budget-exhausted: the experiment's budget cannot pay for this call".into()
        }
        ModelError::Unavailable(m) => format!("model: unavailable: {m}"),
        ModelError::Refused(m) => format!("model: refused: {m}"),
        ModelError::Failed(m) => format!("model: failed: {m}"),
        ModelError::Timeout => "model: timeout: the call ran past its per-call timeout".into(),
        ModelError::InvalidRequest(m) => format!("model: invalid-request: {m}"),
    }
}

/// A `tasks` error as the operator's (or its model's) message.
pub fn tasks_error(e: &TasksError) -> String {
    match e {
        TasksError::UnknownTask(name) => format!("tasks: {name:?} is not a train task"),
        TasksError::InvalidRequest(m) => format!("tasks: invalid request: {m}"),
        TasksError::BudgetExhausted => "tasks: the experiment's budget is exhausted".into(),
        TasksError::Unavailable(m) => format!("tasks: unavailable: {m}"),
    }
}
