//! The `evolve` command line.
//!
//! Exit codes: 0 success, 1 findings (a check that found problems), 2 usage or input
//! errors. Errors print as `evolve: <what> (<where>)`, with a hint where there is one.

mod operator;
mod recipe;
mod samples;
mod scaffold;
mod workspace;

use clap::{Parser, Subcommand};
use std::fmt;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "evolve",
    version,
    about = "Agent-evolution research with WebAssembly-sandboxed operators",
    long_about = "evolve runs agent-evolution recipes whose operators are WebAssembly \
                  components, each run with only the directories and capabilities its \
                  lifecycle stage is granted.",
    after_help = "Examples:\n  evolve demo                                  # the offline default experiment\n  evolve init ws --recipe recipes/local_demo.yaml\n  evolve run ws && evolve log ws && evolve verify ws\n  evolve operator list\n  evolve tasks run ./tasks --agent oracle"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect, check, run, scaffold and build operators.
    #[command(subcommand)]
    Operator(operator::OperatorCommand),
    /// Check recipes and print their JSON Schema.
    #[command(subcommand)]
    Recipe(recipe::RecipeCommand),
    /// Run or check Harbor-format task sets directly, outside any workspace.
    #[command(
        subcommand,
        after_help = "Examples:\n  evolve tasks check ./tasks\n  evolve tasks run ./tasks --engine local --agent oracle --json"
    )]
    Tasks(evaluator_harbor::cli::TasksCommand),
    /// The offline default experiment in one command: init (first time) and run.
    Demo(workspace::DemoArgs),
    /// Create a workspace from a recipe: target, frozen operators and evaluator, keys; tags gen/0.
    Init(workspace::InitArgs),
    /// Run (or resume) the evolution in a workspace.
    Run(workspace::RunArgs),
    /// Experiment, generations by status, champion, budget.
    Status(workspace::DirArgs),
    /// One row per generation: id, parent, status, score, verdict, changed paths.
    Log(workspace::DirArgs),
    /// Everything about one generation, including operator logs.
    Show(workspace::GenArgs),
    /// Recompute everything from the evidence: chain, signatures, stamps, tags, evaluator tree, champion.
    Verify(workspace::DirArgs),
    /// Remove clean stale child worktrees, preserve edited ones, repair archive crash states.
    Repair(workspace::DirArgs),
    /// A new evaluation attempt for a generation whose evaluation failed.
    Retry(workspace::GenArgs),
}

/// An error for the user: what went wrong, where, and what to do about it.
#[derive(Debug)]
pub struct CliError {
    pub what: String,
    pub place: Option<String>,
    pub hint: Option<String>,
    pub code: u8,
}

impl CliError {
    pub fn usage(what: impl Into<String>) -> Self {
        CliError {
            what: what.into(),
            place: None,
            hint: None,
            code: 2,
        }
    }
    pub fn at(mut self, place: impl Into<String>) -> Self {
        self.place = Some(place.into());
        self
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "evolve: {}", self.what)?;
        if let Some(place) = &self.place {
            write!(f, " ({place})")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

pub type CliResult = Result<ExitCode, CliError>;

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Operator(cmd) => operator::run(cmd),
        Command::Recipe(cmd) => recipe::run(cmd),
        Command::Tasks(cmd) => Ok(ExitCode::from(u8::try_from(cmd.execute()).unwrap_or(1))),
        Command::Demo(a) => workspace::demo_cmd(a),
        Command::Init(a) => workspace::init_cmd(a),
        Command::Run(a) => workspace::run_cmd(a),
        Command::Status(a) => workspace::status_cmd(a),
        Command::Log(a) => workspace::log_cmd(a),
        Command::Show(a) => workspace::show_cmd(a),
        Command::Verify(a) => workspace::verify_cmd(a),
        Command::Repair(a) => workspace::repair_cmd(a),
        Command::Retry(a) => workspace::retry_cmd(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.code)
        }
    }
}

/// A current-thread runtime for commands that call operators.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::usage(format!("cannot start the async runtime: {e}")))
}

/// Print a JSON value, pretty.
pub(crate) fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}
