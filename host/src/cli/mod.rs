//! The `evolve` command line.
//!
//! Exit codes: 0 success, 1 findings (a check that found problems), 2 usage or input
//! errors. Errors print as `evolve: <what> (<where>)`, with a hint where there is one.

mod operator;
mod recipe;
mod samples;
mod scaffold;

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
    after_help = "Examples:\n  evolve operator list\n  evolve operator run select/greedy\n  evolve operator check select/greedy --config '{}'\n  evolve tasks run ./tasks --agent oracle"
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
