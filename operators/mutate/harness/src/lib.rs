//! mutate/harness: Agentic Harness Engineering (AHE). The model edits the candidate's
//! harness (text files under `target/`) through strict edit blocks, over up to
//! `max_turns` turns.
//!
//! Turn 1 shows the model the generation, the mutable surface, the train evidence
//! (analysis summary, rollout summary and the feedback bundle's `parent.json`, sharing
//! `evidence_chars` characters in that order) and the files under `/target` (contents
//! within `context_chars`). Each answer's blocks (format in [`edits`]) are applied at
//! once, in order, to `/target`; a block is refused, with a reason, when its path is not
//! a clean path under `target/`, is a `.wasm` file, a binary file or a symlink, is
//! framework-owned, or falls outside the observation's surface (`*` within a segment,
//! `**` across; `X/**` excludes also exclude `X`). The next turn starts with what each
//! block did and the format errors; when `trial_tasks` > 0 and a turn applied something,
//! the first `trial_tasks` train tasks are run once on the edited candidate through
//! `tasks` and the result is reported too (a `budget-exhausted` or `unavailable` trial is
//! reported and ends trials; any other `tasks` error is the operator's error). The loop
//! ends after `max_turns` turns, on an answer with a `DONE` line, or on an answer with
//! neither blocks nor format errors.
//!
//! The proposal lists the changed paths (first-change order), one note per turn (counts
//! and the first line of the model's commentary), one per trial, and the manifest's
//! name; usage sums the turns. `/scratch/changes.json` (kept in the generation's run
//! directory as `mutate/scratch/changes.json`) records every turn: blocks and their
//! outcomes, format errors, commentary, trial, usage. Every `model` error is the
//! operator's error (`model: the experiment's budget is exhausted`, …).

pub use evolve_operator_sdk::edits;

use std::path::Path;

use evolve_operator_sdk::config::integer;
use evolve_operator_sdk::config::number;
use evolve_operator_sdk::model::{self, ChatRequest, ChatResponse, Message, ModelError, Role};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::tasks::{self, RunRequest, TasksError, TrialReport};

use edits::{Outcome, Parsed, Policy};

pub struct Harness;

/// The change manifest, relative to `/scratch`.
pub const MANIFEST: &str = "changes.json";
/// Characters of verifier output per failed trial shown to the model.
pub const TRIAL_OUTPUT_CHARS: usize = 300;
/// Most files listed in the prompt.
pub const MAX_LISTED_FILES: usize = 500;

impl Operator for Harness {
    const NAME: &'static str = "harness";
    const SUMMARY: &'static str = "AHE: the model edits target/ through search/replace blocks over several turns, told each result.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "max_turns",
                integer()
                    .default(json!(3))
                    .minimum(1.0)
                    .maximum(10.0)
                    .description("Most model turns; each later turn is told what the previous one's edits did"),
            )
            .field(
                "trial_tasks",
                integer().default(json!(0)).minimum(0.0).maximum(50.0).description(
                    "When > 0, after a turn that applied edits, run this many train tasks (the first, \
                     once each) on the edited candidate and tell the model the result",
                ),
            )
            .field(
                "max_tokens",
                integer()
                    .default(json!(4096))
                    .minimum(1.0)
                    .description("max-tokens of each model call (the recipe's model.max_tokens caps it)"),
            )
            .field(
                "temperature",
                number()
                    .default(json!(0.2))
                    .minimum(0.0)
                    .maximum(2.0)
                    .description("Sampling temperature of each model call"),
            )
            .field(
                "context_chars",
                integer()
                    .default(json!(24000))
                    .minimum(0.0)
                    .description("Characters of target/ file contents shown in the first turn"),
            )
            .field(
                "evidence_chars",
                integer()
                    .default(json!(8000))
                    .minimum(0.0)
                    .description("Characters of evidence (analysis, rollout, parent) shown in the first turn"),
            )
    }
}

/// The host capabilities the operator uses; tests pass scripted ones.
pub trait Host {
    fn chat(&mut self, request: &ChatRequest) -> Result<ChatResponse, ModelError>;
    fn train_tasks(&mut self) -> Vec<String>;
    fn run(&mut self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError>;
}

/// The real capabilities, imported from the host.
pub struct Imports;

impl Host for Imports {
    fn chat(&mut self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        model::chat(request)
    }
    fn train_tasks(&mut self) -> Vec<String> {
        tasks::train_tasks()
    }
    fn run(&mut self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        tasks::run(request)
    }
}

/// A `model` error as the operator's error message.
pub fn model_error(e: &ModelError) -> String {
    match e {
        ModelError::BudgetExhausted => "model: the experiment's budget is exhausted".into(),
        ModelError::Unavailable(m) => format!("model: unavailable: {m}"),
        ModelError::Refused(m) => format!("model: the provider refused the request: {m}"),
        ModelError::Failed(m) => format!("model: the call failed: {m}"),
        ModelError::Timeout => "model: the call timed out".into(),
        ModelError::InvalidRequest(m) => format!("model: invalid request: {m}"),
    }
}

pub use evolve_operator_sdk::feedback::tasks_error;

/// The normalized configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub max_turns: u32,
    pub trial_tasks: usize,
    pub max_tokens: u32,
    pub temperature: f64,
    pub context_chars: usize,
    pub evidence_chars: usize,
}

impl Settings {
    pub fn from_ctx(ctx: &Context) -> Result<Settings, String> {
        let int = |k: &str, d: i64| ctx.i64(k).unwrap_or(d);
        let usize_of = |k: &str, d: i64| {
            usize::try_from(int(k, d)).map_err(|_| format!("config.{k} must be an integer >= 0"))
        };
        let max_turns = u32::try_from(int("max_turns", 3))
            .ok()
            .filter(|n| (1..=10).contains(n))
            .ok_or("config.max_turns must be an integer in 1..=10")?;
        let max_tokens = u32::try_from(int("max_tokens", 4096))
            .ok()
            .filter(|n| *n >= 1)
            .ok_or("config.max_tokens must be an integer >= 1")?;
        let temperature = ctx.f64("temperature").unwrap_or(0.2);
        if !(0.0..=2.0).contains(&temperature) {
            return Err("config.temperature must be a number in 0..=2".into());
        }
        Ok(Settings {
            max_turns,
            trial_tasks: usize_of("trial_tasks", 0)?,
            max_tokens,
            temperature,
            context_chars: usize_of("context_chars", 24000)?,
            evidence_chars: usize_of("evidence_chars", 8000)?,
        })
    }
}

/// The system message.
pub fn system_prompt() -> String {
    format!(
        "You are a harness engineer. The candidate is an AI agent whose harness (the \
configuration, prompts, parameters and code under target/) you improve. It is scored on \
tasks you never see; the evidence you get comes from train tasks only, so make changes \
that generalize and never special-case a task.\n\n\
Work like a debugger: read the evidence, name the failure mechanism, decide which part of \
the harness is responsible, then make one coherent change to that part. Your edits are \
applied as soon as you answer. In the next turn you are told which edits were applied, \
which were refused and why, and (when trials are enabled) how a short train trial of the \
edited candidate went; use that turn to repair refused edits or refine the change.\n\n\
Begin every answer with a short diagnosis: the failure you target, the component you \
change and the effect you expect. Write the line {done} on its own once the change is \
complete.\n\n{format}",
        done = edits::DONE,
        format = edits::FORMAT
    )
}

/// The evidence section: analysis summary, rollout summary, then the parent as the
/// feedback bundle describes it, sharing `budget` characters in that order.
pub fn evidence_text(obs: &Observation, parent_json: Option<&str>, budget: usize) -> String {
    let mut parts: Vec<(&str, String)> = Vec::new();
    if let Some(a) = &obs.analysis {
        parts.push(("Analysis of the parent's results", a.summary.clone()));
    }
    if let Some(r) = &obs.rollout {
        parts.push(("Rollout of the parent", r.summary.clone()));
    }
    if let Some(p) = parent_json {
        parts.push(("The parent generation", p.trim().to_string()));
    }
    if parts.is_empty() {
        return "(no evidence was gathered for this generation)\n".into();
    }
    let mut left = budget;
    let mut out = String::new();
    for (title, text) in parts {
        let shown = edits::cut(&text, left);
        left = left.saturating_sub(text.chars().count().min(left));
        out.push_str(&format!("### {title}\n{shown}\n\n"));
    }
    out
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
        "include: {}\nexclude: {}",
        list(&obs.surface.includes),
        list(&obs.surface.excludes)
    )
}

/// The first user message.
pub fn first_prompt(
    ctx: &Context,
    obs: &Observation,
    evidence: &str,
    files: &str,
    max_turns: u32,
) -> String {
    let parent = ctx.parent.as_deref().unwrap_or("none");
    format!(
        "# Generation {} (parent {parent})\n\nYou have up to {max_turns} turn(s).\n\n\
## Mutable surface\n{}\n\n## Evidence\n{evidence}## The candidate (files under target/)\n{files}\n\
Diagnose, then make your change with edit blocks.",
        ctx.generation_id,
        surface_text(obs)
    )
}

/// The report that opens the next turn.
pub fn turn_report(
    turn: u32,
    parsed: &Parsed,
    outcomes: &[Outcome],
    trial: Option<&str>,
    turns_left: u32,
) -> String {
    let mut out = format!("## Results of turn {turn}\n");
    if outcomes.is_empty() && parsed.errors.is_empty() {
        out.push_str("No edit blocks were found in your answer.\n");
    }
    for o in outcomes {
        out.push_str(&format!("- {}\n", o.line()));
    }
    for e in &parsed.errors {
        out.push_str(&format!("- format error: {e}\n"));
    }
    if let Some(t) = trial {
        out.push_str(&format!("\n## Train trial of the edited candidate\n{t}\n"));
    }
    out.push_str(&format!(
        "\n{turns_left} turn(s) left. Repair refused edits or refine the change with more \
blocks (files now hold your applied edits), or answer {} if the change is complete.",
        edits::DONE
    ));
    out
}

/// The last `n` characters of `s`.
fn tail(s: &str, n: usize) -> &str {
    let count = s.chars().count();
    if count <= n {
        return s;
    }
    let start = s.char_indices().nth(count - n).map_or(s.len(), |(i, _)| i);
    &s[start..]
}

fn status_text(s: TrialStatus) -> &'static str {
    match s {
        TrialStatus::BenchmarkComplete => "benchmark-complete",
        TrialStatus::CandidateInvalid => "candidate-invalid",
        TrialStatus::InfrastructureFailed => "infrastructure-failed",
        TrialStatus::Timeout => "timeout",
        TrialStatus::Cancelled => "cancelled",
    }
}

/// A trial's result for the model and for the manifest. A trial passes when it
/// completed with a reward of at least 1.
pub fn trial_text(reports: &[TrialReport]) -> (String, Value) {
    let passed = |t: &TrialReport| {
        t.status == TrialStatus::BenchmarkComplete && t.reward.is_some_and(|r| r >= 1.0)
    };
    let rewards: Vec<f64> = reports.iter().filter_map(|t| t.reward).collect();
    let mean = (!rewards.is_empty()).then(|| rewards.iter().sum::<f64>() / rewards.len() as f64);
    let n_passed = reports.iter().filter(|t| passed(t)).count();
    let mut text = format!(
        "{n_passed} of {} trial(s) passed; mean reward {}.\n",
        reports.len(),
        mean.map_or("n/a".to_string(), |m| format!("{m:.3}"))
    );
    let mut trials = Vec::new();
    for t in reports {
        let reward = t
            .reward
            .map_or("no reward".to_string(), |r| format!("reward {r:.3}"));
        text.push_str(&format!(
            "- {}: {}, {reward}",
            t.task,
            status_text(t.status)
        ));
        let out = tail(t.verifier_output.trim(), TRIAL_OUTPUT_CHARS);
        if !passed(t) && !out.is_empty() {
            text.push_str(&format!("; verifier output (tail): {out}"));
        }
        text.push('\n');
        trials.push(json!({"task": t.task, "repetition": t.repetition,
                           "status": status_text(t.status), "reward": t.reward,
                           "passed": passed(t)}));
    }
    let value = json!({"trials": trials, "passed": n_passed, "mean_reward": mean});
    (text.trim_end().to_string(), value)
}

/// Run the trial after a turn: `Ok(None)` when trials are over (the reason is in the
/// returned text), an error only for a request the host calls malformed.
fn trial(
    host: &mut dyn Host,
    n: usize,
    train: &mut Option<Vec<String>>,
) -> Result<(String, Value, bool), String> {
    let names = train.get_or_insert_with(|| host.train_tasks());
    let selected: Vec<String> = names.iter().take(n).cloned().collect();
    if selected.is_empty() {
        let msg = "no train tasks are available, so no trial was run";
        return Ok((msg.into(), json!({"error": msg}), false));
    }
    let request = RunRequest {
        tasks: selected,
        repetitions: 1,
    };
    match host.run(&request) {
        Ok(reports) => {
            let (text, value) = trial_text(&reports);
            Ok((text, value, true))
        }
        Err(e @ (TasksError::BudgetExhausted | TasksError::Unavailable(_))) => {
            let msg = format!(
                "the trial could not run ({}); no further trials",
                tasks_error(&e)
            );
            Ok((msg.clone(), json!({"error": msg}), false))
        }
        Err(e) => Err(tasks_error(&e)),
    }
}

fn first_line(s: &str, n: usize) -> String {
    edits::cut(
        s.lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim(),
        n,
    )
}

/// The whole operator, with the guest's `/` at `root` and the host capabilities in `host`.
pub fn harness_with(
    ctx: &Context,
    obs: &Observation,
    root: &Path,
    host: &mut dyn Host,
) -> Result<Proposal, String> {
    let settings = Settings::from_ctx(ctx)?;
    if obs.surface.includes.is_empty() {
        return Err("the surface includes nothing, so there is nothing to edit".into());
    }
    let policy = Policy {
        roots: vec!["target".into()],
        includes: obs.surface.includes.clone(),
        excludes: obs.surface.excludes.clone(),
        max_files: None,
    };
    let parent_json = obs.feedback_dir.as_deref().and_then(|d| {
        std::fs::read_to_string(root.join(d.trim_start_matches('/')).join("parent.json")).ok()
    });
    let evidence = evidence_text(obs, parent_json.as_deref(), settings.evidence_chars);
    let files = edits::files_context(
        &edits::list_files(root, "target", MAX_LISTED_FILES),
        &policy,
        settings.context_chars,
    );
    let mut messages = vec![
        Message {
            role: Role::System,
            content: system_prompt(),
        },
        Message {
            role: Role::User,
            content: first_prompt(ctx, obs, &evidence, &files, settings.max_turns),
        },
    ];
    let mut usage = Usage {
        input_tokens: 0,
        output_tokens: 0,
        usd: 0.0,
    };
    let mut changed: Vec<String> = Vec::new();
    let mut notes = Vec::new();
    let mut turns = Vec::new();
    let (mut applied, mut refused) = (0usize, 0usize);
    let mut trials_on = settings.trial_tasks > 0;
    let mut train = None;
    for turn in 1..=settings.max_turns {
        let request = ChatRequest {
            messages: messages.clone(),
            max_tokens: Some(settings.max_tokens),
            temperature: Some(settings.temperature),
        };
        let answer = host.chat(&request).map_err(|e| model_error(&e))?;
        usage.input_tokens += answer.input_tokens;
        usage.output_tokens += answer.output_tokens;
        usage.usd += answer.usd;
        let parsed = edits::parse(&answer.content);
        let outcomes = edits::apply(&parsed.blocks, root, &policy, &mut changed);
        let ok = outcomes.iter().filter(|o| o.applied).count();
        applied += ok;
        refused += outcomes.len() - ok;
        let mut note = format!(
            "turn {turn}: {ok} edit(s) applied, {} refused, {} format error(s)",
            outcomes.len() - ok,
            parsed.errors.len()
        );
        let said = first_line(&parsed.commentary, 160);
        if !said.is_empty() {
            note.push_str(&format!("; {said}"));
        }
        notes.push(note);
        let more = turn < settings.max_turns
            && !parsed.done
            && (!parsed.blocks.is_empty() || !parsed.errors.is_empty());
        let mut trial_value = Value::Null;
        let mut trial_report = None;
        if more && trials_on && ok > 0 {
            let (text, value, go_on) = trial(host, settings.trial_tasks, &mut train)?;
            notes.push(format!(
                "trial after turn {turn}: {}",
                first_line(&text, 160)
            ));
            trials_on = go_on;
            trial_value = value;
            trial_report = Some(text);
        }
        turns.push(json!({
            "turn": turn,
            "blocks": outcomes.iter().map(Outcome::to_json).collect::<Vec<_>>(),
            "format_errors": parsed.errors,
            "done": parsed.done,
            "commentary": edits::cut(&parsed.commentary, 2000),
            "trial": trial_value,
            "usage": {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens,
                      "usd": answer.usd},
        }));
        if !more {
            break;
        }
        messages.push(Message {
            role: Role::Assistant,
            content: answer.content,
        });
        messages.push(Message {
            role: Role::User,
            content: turn_report(
                turn,
                &parsed,
                &outcomes,
                trial_report.as_deref(),
                settings.max_turns - turn,
            ),
        });
    }
    let manifest = json!({
        "operator": "mutate/harness",
        "generation_id": ctx.generation_id,
        "parent": ctx.parent,
        "files": changed,
        "blocks_applied": applied,
        "blocks_refused": refused,
        "turns": turns,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                  "usd": usage.usd},
    });
    let path = root.join("scratch").join(MANIFEST);
    let mut text = evolve_operator_sdk::serde_json::to_string_pretty(&manifest)
        .map_err(|e| format!("cannot serialize {MANIFEST}: {e}"))?;
    text.push('\n');
    std::fs::write(&path, text).map_err(|e| format!("cannot write /scratch/{MANIFEST}: {e}"))?;
    notes.push(format!("change manifest: /scratch/{MANIFEST}"));
    Ok(Proposal {
        changed,
        notes,
        usage,
    })
}

impl Mutate for Harness {
    fn mutate(ctx: &Context, observation: &Observation) -> Result<Proposal, String> {
        harness_with(ctx, observation, Path::new("/"), &mut Imports)
    }
}

evolve_operator_sdk::export!(mutate: Harness);

#[cfg(test)]
mod tests;
