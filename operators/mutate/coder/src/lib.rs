//! mutate/coder: a coding agent that runs inside the mutate sandbox. The model works over
//! many turns through tools (list, read, search, write, edit, run train tasks, read a
//! train trajectory, finish), in OpenAI's tool-calling format through the host's metered
//! `model.complete`; the operator carries out each call against the stage's grants.
//!
//! Every tool call is checked here, in the guest, before it touches anything: a path must
//! be clean and relative, start with a granted root (`target/`, `operators/` when the
//! surface grants it, `feedback/` to read), and go through no symbolic link; a write must
//! also pass the surface, the framework-owned paths and the `.wasm` rule
//! ([`evolve_operator_sdk::edits::check_path`]); a task must be one `tasks.train-tasks`
//! listed. A refused call is an error message to the model, and nothing reaches the host.
//! (The host's own grants would stop the same calls again: this is the first wall, with
//! messages a model can act on.)
//!
//! The loop ends when the model calls `finish`, answers without a tool call, or reaches
//! one of the configured limits (turns, tokens, dollars); the edits made so far stand and
//! the proposal lists them. The whole conversation is written after every turn to
//! `/scratch/trajectory.json` as ATIF (the generation's run directory keeps it, and the
//! viewer shows it).

mod prompt;
pub mod tools;
pub mod trajectory;

use std::path::Path;

use evolve_operator_sdk::config::{integer, number, string};
use evolve_operator_sdk::conversation::Conversation;
use evolve_operator_sdk::feedback::model_error;
use evolve_operator_sdk::model::{self, Completion, CompletionRequest, ModelError};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::tasks::{self, RunRequest, TasksError, TrialReport};
use serde::Deserialize;

pub use tools::Toolbox;

pub struct Coder;

/// The trajectory file, relative to `/scratch`.
pub const TRAJECTORY: &str = "trajectory.json";

impl Operator for Coder {
    const NAME: &'static str = "coder";
    const SUMMARY: &'static str = "A coding agent in the sandbox: the model reads, searches, edits and runs train tasks through tools over many turns.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "max_turns",
                integer()
                    .default(json!(24))
                    .minimum(1.0)
                    .maximum(200.0)
                    .description("Most model calls; the agent stops after the last one"),
            )
            .field(
                "max_total_tokens",
                integer()
                    .default(json!(400_000))
                    .minimum(1000.0)
                    .description("Most input plus output tokens over the whole conversation"),
            )
            .field(
                "max_usd",
                number().default(json!(1.0)).minimum(0.0001).description(
                    "Most dollars over the whole conversation, as the host metered each call",
                ),
            )
            .field(
                "max_task_runs",
                integer()
                    .default(json!(4))
                    .minimum(0.0)
                    .maximum(50.0)
                    .description("Most `run_tasks` calls (0 disables the tool)"),
            )
            .field(
                "max_tasks_per_run",
                integer()
                    .default(json!(4))
                    .minimum(1.0)
                    .maximum(50.0)
                    .description("Most train tasks one `run_tasks` call may name"),
            )
            .field(
                "max_tokens",
                integer()
                    .default(json!(4096))
                    .minimum(1.0)
                    .description("max-tokens of each call (the recipe's model.max_tokens caps it)"),
            )
            .field(
                "temperature",
                number()
                    .default(json!(0.2))
                    .minimum(0.0)
                    .maximum(2.0)
                    .description("Sampling temperature of each call"),
            )
            .field(
                "tool_output_chars",
                integer()
                    .default(json!(12000))
                    .minimum(500.0)
                    .maximum(200_000.0)
                    .description("Most characters one tool result gives back to the model"),
            )
            .field(
                "evidence_chars",
                integer()
                    .default(json!(6000))
                    .minimum(0.0)
                    .description("Characters of train evidence in the first message"),
            )
            .field(
                "model",
                string().description(
                    "One of the recipe's named `models` (default: the `model:` block)",
                ),
            )
            .field(
                "reasoning_effort",
                string()
                    .choices([json!("low"), json!("medium"), json!("high"), json!("xhigh")])
                    .description("Passed through to the provider as `reasoning_effort`"),
            )
    }
}

/// The normalized configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Settings {
    pub max_turns: u32,
    pub max_total_tokens: u64,
    pub max_usd: f64,
    pub max_task_runs: u32,
    pub max_tasks_per_run: usize,
    pub max_tokens: u32,
    pub temperature: f64,
    pub tool_output_chars: usize,
    pub evidence_chars: usize,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub reasoning_effort: Option<String>,
}

/// The host capabilities the operator uses; tests pass scripted ones.
pub trait Host {
    fn complete(&mut self, request: &CompletionRequest) -> Result<Completion, ModelError>;
    fn train_tasks(&mut self) -> Vec<String>;
    fn run(&mut self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError>;
}

/// The real capabilities, imported from the host.
pub struct Imports;

impl Host for Imports {
    fn complete(&mut self, request: &CompletionRequest) -> Result<Completion, ModelError> {
        model::complete(request)
    }
    fn train_tasks(&mut self) -> Vec<String> {
        tasks::train_tasks()
    }
    fn run(&mut self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        tasks::run(request)
    }
}

/// Why the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Finished(String),
    NoToolCall,
    Limit(String),
}

impl Ending {
    fn note(&self) -> String {
        match self {
            Ending::Finished(notes) => format!("finished: {}", notes.trim()),
            Ending::NoToolCall => "ended: the model answered without calling a tool".into(),
            Ending::Limit(which) => format!("stopped at a limit: {which}"),
        }
    }
}

/// The limit the conversation has reached before the next call, if one.
fn limit_reached(chat: &Conversation, s: &Settings) -> Option<String> {
    let spent = chat.spent();
    if chat.calls() >= s.max_turns {
        return Some(format!("max_turns ({})", s.max_turns));
    }
    if spent.input_tokens + spent.output_tokens >= s.max_total_tokens {
        return Some(format!("max_total_tokens ({})", s.max_total_tokens));
    }
    if spent.usd >= s.max_usd {
        return Some(format!("max_usd ({})", s.max_usd));
    }
    None
}

/// The whole operator, with the guest's `/` at `root` and the host capabilities in `host`.
pub fn coder_with(
    ctx: &Context,
    obs: &Observation,
    root: &Path,
    host: &mut dyn Host,
) -> Result<Proposal, String> {
    let settings: Settings = ctx.config_as()?;
    if obs.surface.includes.is_empty() {
        return Err("the surface includes nothing, so there is nothing to edit".into());
    }
    let train = host.train_tasks();
    let mut toolbox = Toolbox::new(root, obs, &settings, train);
    let mut chat = Conversation::new(prompt::system())
        .max_tokens(settings.max_tokens)
        .temperature(settings.temperature);
    chat.model = settings.model.clone();
    chat.reasoning_effort = settings.reasoning_effort.clone();
    chat.tools = toolbox.definitions();
    chat.user(prompt::first(ctx, obs, &toolbox, &settings, root));
    let mut log = trajectory::Log::new(&chat, settings.model.as_deref());
    let ending = loop {
        if let Some(limit) = limit_reached(&chat, &settings) {
            break Ending::Limit(limit);
        }
        let reply = chat
            .send_with(|r| host.complete(r))
            .map_err(|e| model_error(&e))?;
        let mut results = Vec::new();
        for call in &reply.tool_calls {
            let outcome = toolbox.call(call, host);
            chat.tool_result(&call.id, outcome.content.clone());
            results.push((call.id.clone(), outcome));
        }
        log.turn(&reply, &results);
        log.write(root, TRAJECTORY, &chat);
        if let Some(notes) = toolbox.finished() {
            break Ending::Finished(notes.to_string());
        }
        if reply.tool_calls.is_empty() {
            break Ending::NoToolCall;
        }
    };
    log.end(&ending.note());
    log.write(root, TRAJECTORY, &chat);
    let mut notes = vec![ending.note()];
    notes.extend(toolbox.summary_notes(chat.calls()));
    notes.push(format!("trajectory: /scratch/{TRAJECTORY}"));
    Ok(Proposal {
        changed: toolbox.changed().to_vec(),
        notes,
        usage: chat.spent(),
    })
}

impl Mutate for Coder {
    fn mutate(ctx: &Context, observation: &Observation) -> Result<Proposal, String> {
        coder_with(ctx, observation, Path::new("/"), &mut Imports)
    }
}

evolve_operator_sdk::export!(mutate: Coder);

#[cfg(test)]
mod tests;
