//! mutate/reflective: GEPA-style reflective mutation through the host's `model`.
//!
//! Each generation rewrites exactly one *component*, a file under the candidate's
//! `target/` named in `components`, chosen round-robin by generation number: component
//! `(generation − 1) mod len(components)`. The operator makes one `model.chat` call:
//!
//! * system message: the role (improve one component of an agent from evidence of its
//!   train failures, keep general lessons, keep the file's format) and the answer format;
//! * user message: the component's path and position, its current text in a fence
//!   longer than any backtick run inside it, the train feedback (below) and the request
//!   to answer with the complete new content in one fenced block.
//!
//! **Feedback**, bounded by `max_feedback_chars` characters, from the observation's
//! evidence summaries: a headline from a rollout/train summary (`Train rollout: N
//! trials, F failed, mean reward M`); then the analysis' failure `groups` when it has
//! them (analyze/failure_patterns: one line per pattern, one indented line per example),
//! else the rollout's failed `trials` (`passed: false`, or without `passed` a status
//! other than `benchmark-complete` or a reward missing or below 1), else `No train
//! trial failed.`; an analysis without `groups` (e.g. analyze/trajectory_only) is
//! appended as one compact JSON line; with neither trials nor analysis the rollout
//! summary is shown as compact JSON. Verifier output is put on one line (` | ` between
//! lines) and cut to its last 300 characters. When the text is too long, whole lines
//! are kept from the start and a final line says how many were left out.
//!
//! **Answer**: exactly one fenced block (a line starting with three or more backticks,
//! closed by a line of at least as many backticks and nothing else). No block, several
//! blocks, an unclosed block, an empty block, content identical to the current file
//! (trailing whitespace ignored) or, for a `.json` component, content that is not JSON
//! are the operator's errors and nothing is written. Otherwise the block's content,
//! with one final newline, replaces `/target/<path after target/>`. The text outside the
//! block, on one line and cut to 300 characters, is the `why` note.
//!
//! Model errors (`budget-exhausted`, `unavailable`, `refused`, `failed`, `timeout`,
//! `invalid-request`) are the operator's errors, `model: <kind>: <detail>`, so the
//! lifecycle archives the generation as `operator_failed`.
//!
//! Proposal: `changed` = `[component]`, notes `component: <path> (<i> of <n>,
//! round-robin)` and `why: <text>`, usage = the answer's tokens and metered USD.

use std::path::Path;

use evolve_operator_sdk::config::{array, integer, number, string};
use evolve_operator_sdk::model::{self, ChatRequest, ChatResponse, Message, ModelError, Role};
use evolve_operator_sdk::prelude::*;

pub struct Reflective;

/// Characters kept of the model's explanation in the `why` note.
pub const WHY_CHARS: usize = 300;

impl Operator for Reflective {
    const NAME: &'static str = "reflective";
    const SUMMARY: &'static str = "Reflect on train failures through the model and rewrite one \
         component file per generation, round-robin (GEPA).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "components",
                array(string()).required().minimum(1.0).description(
                    "Files the method evolves, relative to the workspace and under target/ \
                     (e.g. target/prompt.md, target/params.json); generation g rewrites \
                     component (g - 1) mod len",
                ),
            )
            .field(
                "max_feedback_chars",
                integer().default(json!(4000)).minimum(200.0).description(
                    "Longest train-failure feedback put into the prompt, in characters",
                ),
            )
            .field(
                "max_component_chars",
                integer().default(json!(20000)).minimum(1.0).description(
                    "Longest component the operator will send and have rewritten, in characters \
                     (a longer one is an error)",
                ),
            )
            .field(
                "max_tokens",
                integer()
                    .default(json!(2048))
                    .minimum(1.0)
                    .description("Upper bound on the model's answer, in tokens"),
            )
            .field(
                "temperature",
                number()
                    .default(json!(0.7))
                    .minimum(0.0)
                    .maximum(2.0)
                    .description("Sampling temperature of the model call"),
            )
            .refine(check_config)
    }
}

fn check_config(c: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let mut v = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let components = c.get("components").and_then(Value::as_array);
    for (i, p) in components.into_iter().flatten().enumerate() {
        let Some(p) = p.as_str() else { continue };
        match target_rel(p) {
            Err(_) => v.push(Violation::new(
                format!("components[{i}]"),
                "must be a file path under target/, e.g. target/prompt.md",
            )),
            Ok(rel) if seen.contains(&rel) => v.push(Violation::new(
                format!("components[{i}]"),
                "repeats an earlier component",
            )),
            Ok(rel) => seen.push(rel),
        }
    }
    if v.is_empty() { Ok(()) } else { Err(v) }
}

/// `target/a/b` or `/target/a/b` → `target/a/b`; anything else (outside `target/`,
/// `.`/`..`/empty segments, backslashes) is refused.
pub fn target_rel(path: &str) -> Result<String, String> {
    let rel = path.strip_prefix('/').unwrap_or(path);
    let mut parts = rel.split('/');
    let ok = parts.next() == Some("target")
        && rel.len() > "target/".len()
        && parts.all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\\'));
    if ok {
        Ok(rel.to_string())
    } else {
        Err(format!(
            "component {path:?} is not a file under target/ (e.g. target/prompt.md)"
        ))
    }
}

/// The component generation `generation` rewrites, out of `n` (> 0).
pub fn component_index(generation: u32, n: usize) -> usize {
    generation.saturating_sub(1) as usize % n.max(1)
}

// Feedback: evolve_operator_sdk::feedback (shared with mutate/aevolve).
pub use evolve_operator_sdk::feedback::*;

// ---------------------------------------------------------------------------------
// Prompt

/// A backtick fence longer than any backtick run in `text` (at least three).
pub fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

pub const SYSTEM_PROMPT: &str = "You improve an AI agent by revising one of its component \
files at a time. You are shown the component's current content and evidence of how the agent \
did on training tasks. Work out what in this component most likely caused the failures and \
write a revision that should fix them without breaking what already works. State general \
lessons, never answers to particular tasks. Keep the file's format valid: a JSON file must \
stay valid JSON, and template placeholders such as {{ instruction }} must be kept.\n\n\
Answer with one or two sentences explaining the change, followed by the complete new content \
of the file in exactly one fenced code block. Put nothing else in a fenced block.";

/// The user message for one component.
pub fn user_prompt(
    path: &str,
    index: usize,
    count: usize,
    generation: u32,
    current: &str,
    feedback: &str,
) -> String {
    let fence = fence_for(current);
    let body = current.strip_suffix('\n').unwrap_or(current);
    format!(
        "Generation {generation}. Component to revise: {path} (component {} of {count}).\n\n\
         Current content of {path}:\n{fence}\n{body}\n{fence}\n\n\
         Feedback from the train tasks:\n{feedback}\n\n\
         Revise {path} to address these failures. Answer with a short explanation, then the \
         complete new content of {path} in a single fenced code block.",
        index + 1
    )
}

/// The chat request for one component.
pub fn build_request(user: String, max_tokens: u32, temperature: f64) -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: SYSTEM_PROMPT.into(),
            },
            Message {
                role: Role::User,
                content: user,
            },
        ],
        max_tokens: Some(max_tokens),
        temperature: Some(temperature),
    }
}

// ---------------------------------------------------------------------------------
// Answer

/// A fenced block and the text around it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub content: String,
    /// The text outside the block, on one line and cut to [`WHY_CHARS`].
    pub why: String,
}

/// Parse the model's answer: exactly one fenced block with non-empty content.
pub fn parse_answer(answer: &str) -> Result<Answer, String> {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    let mut outside: Vec<&str> = Vec::new();
    let mut open: Option<(usize, usize)> = None; // (fence length, line number)
    for (n, line) in answer.lines().enumerate() {
        let trimmed = line.trim_start();
        let ticks = trimmed.chars().take_while(|&c| c == '`').count();
        match open {
            None if ticks >= 3 => {
                open = Some((ticks, n + 1));
                blocks.push(Vec::new());
            }
            None => outside.push(line),
            Some((len, _)) if ticks >= len && trimmed.trim_end().len() == ticks => open = None,
            Some(_) => blocks.last_mut().expect("an open block").push(line),
        }
    }
    if let Some((_, n)) = open {
        return Err(format!(
            "the model's answer has a fenced block opened on line {n} that is never closed"
        ));
    }
    let block = match blocks.len() {
        0 => return Err("the model's answer has no fenced block with the new content".into()),
        1 => blocks.pop().expect("one block"),
        n => {
            return Err(format!(
                "the model's answer has {n} fenced blocks; expected exactly one with the complete file"
            ));
        }
    };
    let content = block.join("\n");
    if content.trim().is_empty() {
        return Err("the model's fenced block is empty".into());
    }
    let why = outside
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Answer {
        content: format!("{}\n", content.trim_end_matches(['\n', '\r'])),
        why: head(&why, WHY_CHARS),
    })
}

/// Check the new content of `path` against its current content.
pub fn check_new_content(path: &str, current: &str, new: &str) -> Result<(), String> {
    if new.trim_end() == current.trim_end() {
        return Err(format!("the model's answer leaves {path} unchanged"));
    }
    if path.ends_with(".json")
        && let Err(e) = evolve_operator_sdk::serde_json::from_str::<Value>(new)
    {
        return Err(format!("the model's new {path} is not valid JSON: {e}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// The operator

fn config_usize(ctx: &Context, key: &str, default: usize) -> usize {
    ctx.i64(key)
        .and_then(|v| usize::try_from(v).ok())
        .unwrap_or(default)
}

/// One reflective mutation with `/` of the guest file system at `root` and `chat`
/// standing in for the host's `model.chat`.
pub fn reflect(
    ctx: &Context,
    observation: &Observation,
    root: &Path,
    chat: &mut dyn FnMut(&ChatRequest) -> Result<ChatResponse, ModelError>,
) -> Result<Proposal, String> {
    let components: Vec<&str> = ctx
        .config
        .get("components")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if components.is_empty() {
        return Err("config.components must name at least one file under target/".into());
    }
    let index = component_index(ctx.generation, components.len());
    let path = target_rel(components[index])?;
    let max_feedback = config_usize(ctx, "max_feedback_chars", 4000);
    let max_component = config_usize(ctx, "max_component_chars", 20000);
    let max_tokens = ctx
        .i64("max_tokens")
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(2048);
    let temperature = ctx.f64("temperature").unwrap_or(0.7);

    let file = root.join(&path);
    let current = std::fs::read_to_string(&file).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("component {path} does not exist"),
        _ => format!("cannot read component {path}: {e}"),
    })?;
    let chars = current.chars().count();
    if chars > max_component {
        return Err(format!(
            "component {path} has {chars} characters, more than max_component_chars ({max_component})"
        ));
    }
    let rollout = observation.rollout.as_ref().map(summary_json);
    let analysis = observation.analysis.as_ref().map(summary_json);
    let feedback = render_feedback(rollout.as_ref(), analysis.as_ref(), max_feedback);
    let user = user_prompt(
        &path,
        index,
        components.len(),
        ctx.generation,
        &current,
        &feedback,
    );
    let request = build_request(user, max_tokens, temperature);
    let response = chat(&request).map_err(|e| model_error(&e))?;
    let answer = parse_answer(&response.content)?;
    check_new_content(&path, &current, &answer.content)?;
    std::fs::write(&file, &answer.content).map_err(|e| format!("cannot write {path}: {e}"))?;
    let why = if answer.why.is_empty() {
        "(the model gave no explanation)".to_string()
    } else {
        answer.why
    };
    Ok(Proposal {
        changed: vec![path.clone()],
        notes: vec![
            format!(
                "component: {path} ({} of {}, round-robin)",
                index + 1,
                components.len()
            ),
            format!("why: {why}"),
        ],
        usage: Usage::from(&response),
    })
}

impl Mutate for Reflective {
    fn mutate(ctx: &Context, observation: &Observation) -> Result<Proposal, String> {
        reflect(ctx, observation, Path::new("/"), &mut |r| model::chat(r))
    }
}

evolve_operator_sdk::export!(mutate: Reflective);

#[cfg(test)]
mod tests;
