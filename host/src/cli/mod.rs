//! The `evolve` command line.
//!
//! Exit codes: 0 success, 1 findings (a check that found problems), 2 usage or input
//! errors, 130 / 143 / 129 a run stopped by SIGINT (Ctrl-C) / SIGTERM / SIGHUP. Errors print as `evolve: <what> (<where>)`, with
//! a hint where there is one; with `--json` they are also printed on stdout as
//! `{"ok": false, "error": {...}}`. The command reference is docs/cli.md.

mod bundle;
mod diff;
mod gc;
mod keys;
mod operator;
mod progress;
mod recipe;
mod scaffold;
pub(crate) mod verify;
mod workspace;

use crate::command::{CliError, CliResult, print_json};
use clap::{Args, CommandFactory, Parser, Subcommand};

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
    #[command(
        subcommand,
        after_help = "Examples:\n  evolve operator list\n  evolve operator describe gate/hillclimb\n  evolve operator new select my_picker && evolve operator build operators/select/my_picker"
    )]
    Operator(operator::OperatorCommand),
    /// Check recipes and print their JSON Schema.
    #[command(
        subcommand,
        after_help = "Examples:\n  evolve recipe list\n  evolve recipe check recipes/local_demo.yaml\n  evolve recipe schema > recipe.schema.json"
    )]
    Recipe(recipe::RecipeCommand),
    /// Run or check Harbor-format task sets directly, outside any workspace.
    #[command(
        subcommand,
        after_help = "Examples:\n  evolve tasks check ./tasks\n  evolve tasks run ./tasks --engine local --agent oracle --json"
    )]
    Tasks(evaluator_harbor::cli::TasksCommand),
    /// The offline default experiment in one command: init (first time) and run.
    #[command(
        after_help = "Examples:\n  evolve demo                  # creates ./evolve-demo and runs it\n  evolve demo my-demo --json   # the run summary as JSON"
    )]
    Demo(workspace::DemoArgs),
    /// Create a workspace from a recipe: target, frozen operators and evaluator, keys; tags gen/0.
    #[command(
        after_help = "Examples:\n  evolve init ws --recipe recipes/local_demo.yaml\n  evolve init ws --recipe hill_climb --seed ./my_agent --tasks ./my_tasks\n  evolve init ws --recipe gepa --seed https://example.org/team/seed.git@v1"
    )]
    Init(workspace::InitArgs),
    /// Run (or resume) the evolution in a workspace.
    #[command(
        after_help = "Progress goes to stderr: a status line on a terminal, plain lines otherwise.\nCtrl-C ends the current stage as `cancelled` (exit 130); `evolve run` again resumes.\n\nExamples:\n  evolve run ws\n  evolve run ws --max-generations 3 --quiet\n  evolve run ws --dry-run          # the pre-flight estimate only"
    )]
    Run(workspace::RunArgs),
    /// Experiment, generations by status, champion, budget.
    #[command(after_help = "Examples:\n  evolve status ws\n  evolve status ws --json")]
    Status(workspace::DirArgs),
    /// One row per generation: id, parent, status, score, verdict, changed paths.
    #[command(
        after_help = "Examples:\n  evolve log ws\n  evolve log ws --json | jq '.[] | select(.champion)'"
    )]
    Log(workspace::DirArgs),
    /// Everything about one generation, including operator logs.
    #[command(after_help = "Examples:\n  evolve show 3 -w ws\n  evolve show 2-1 -w ws --json")]
    Show(workspace::GenArgs),
    /// What changed in target/ and operators/ between two generations.
    Diff(diff::DiffArgs),
    /// Write a generation's files (as its certified archive row names them) into a new directory.
    #[command(
        after_help = "The workspace keeps generations only as commits; this is how to look at one,\nor take the champion away.\n\nExamples:\n  evolve checkout champion ./best -w ws\n  evolve checkout 0 ./seed -w ws --json"
    )]
    Checkout(workspace::CheckoutArgs),
    /// Recompute everything from the evidence: chain, signatures, stamps, tags, evaluator tree, champion.
    #[command(
        after_help = "Exit status: 0 verified, 1 findings (tampering or damage), 2 usage errors.\n\nExamples:\n  evolve verify ws\n  evolve verify --bundle ./evidence      # an `evolve export`, with the public key only\n  evolve verify ws --json"
    )]
    Verify(verify::VerifyArgs),
    /// Write a self-contained evidence bundle that `evolve verify --bundle` checks.
    #[command(
        after_help = "The bundle holds the archive, the receipts, the public key, a git bundle of every\ngen/* tag and a manifest of SHA-256 digests; never the private key.\n\nExamples:\n  evolve export ./evidence -w ws\n  evolve verify --bundle ./evidence"
    )]
    Export(ExportArgs),
    /// Remove clean stale child worktrees, preserve edited ones, repair archive crash states.
    #[command(after_help = "Examples:\n  evolve repair ws\n  evolve repair ws --json")]
    Repair(workspace::DirArgs),
    /// A new evaluation attempt for a generation whose evaluation failed.
    #[command(
        after_help = "Examples:\n  evolve retry 3 -w ws\n  evolve retry 0 -w ws --json     # the seed's evaluation"
    )]
    Retry(workspace::GenArgs),
    /// Free disk space: drop reproducible run data of finished generations, keep what verify and export need.
    Gc(gc::GcArgs),
    /// List the private signing keys and remove those of deleted workspaces.
    #[command(
        subcommand,
        after_help = "Examples:\n  evolve keys list\n  evolve keys prune --dry-run"
    )]
    Keys(keys::KeysCommand),
    /// Print a shell completion script.
    #[command(
        after_help = "Examples:\n  evolve completions bash > ~/.local/share/bash-completion/completions/evolve\n  evolve completions zsh > \"${fpath[1]}/_evolve\"\n  evolve completions fish > ~/.config/fish/completions/evolve.fish"
    )]
    Completions(CompletionsArgs),
    /// Measure the framework's own overhead against RSIHub's Table 5 (build with --release).
    Bench(crate::bench::BenchArgs),
    /// A read-only local web viewer: status, lineage tree, scores, generations, diffs.
    View(crate::viewer::ViewArgs),
    /// The integrity campaign: kills, tampering and hostile operators on real workspaces.
    #[command(
        after_help = "Examples:\n  evolve selftest --list\n  evolve selftest --trials 5 --seed 42 --json"
    )]
    Selftest(crate::selftest::SelftestArgs),
}

#[derive(Args)]
struct ExportArgs {
    /// The directory to create (must not exist, or be empty).
    out: std::path::PathBuf,
    /// The workspace (default: the current directory).
    #[arg(long, short, default_value = ".")]
    workspace: std::path::PathBuf,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
    /// Print `{"shell": ..., "script": ...}` instead of the bare script.
    #[arg(long)]
    json: bool,
}

pub fn main() -> ExitCode {
    let json = std::env::args().any(|a| a == "--json");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `evolve` alone (or `evolve operator`): the user asked what there is, as
            // `cargo` alone does; the help goes to stdout and is no error.
            print!("{}", e.render());
            return ExitCode::SUCCESS;
        }
        Err(e) => return report(&usage_error(&e), json),
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
        Command::Verify(a) => verify::verify_cmd(a),
        Command::Diff(a) => diff::diff_cmd(a),
        Command::Checkout(a) => workspace::checkout_cmd(a),
        Command::Export(a) => export_cmd(a),
        Command::Completions(a) => completions_cmd(a),
        Command::Keys(cmd) => keys::run(cmd),
        Command::Gc(a) => gc::gc_cmd(a),
        Command::Repair(a) => workspace::repair_cmd(a),
        Command::Retry(a) => workspace::retry_cmd(a),
        Command::Bench(a) => crate::bench::run(a),
        Command::View(a) => crate::viewer::view_cmd(a),
        Command::Selftest(a) => crate::selftest::selftest_cmd(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => report(&e, json),
    }
}

/// Print `e` (`evolve: <what> (<where>)` and its hint on stderr; with `--json`, also as
/// JSON on stdout) and return its exit code.
fn report(e: &CliError, json: bool) -> ExitCode {
    let named = name_a_full_disk(e);
    let e = named.as_ref().unwrap_or(e);
    eprintln!("{e}");
    if json {
        print_json(&serde_json::json!({"ok": false, "error": {
            "what": e.what, "where": e.place, "hint": e.hint, "exit_code": e.code,
            "details": e.details,
        }}));
    }
    ExitCode::from(e.code)
}

/// An error that quotes ENOSPC or EDQUOT anywhere (they surface from the archive, git, the
/// engine and the file system, often inside another message) gets the disk-full hint
/// instead of whatever its site guessed: no retry, repair or second run helps until the
/// user frees space.
fn name_a_full_disk(e: &CliError) -> Option<CliError> {
    const CODES: [&str; 2] = ["(os error 28)", "(os error 122)"];
    let quoted = |s: &str| CODES.iter().any(|c| s.contains(c));
    let hint = evaluator_harbor::error::DISK_FULL_HINT;
    if !quoted(&e.what) || e.hint.as_deref() == Some(hint) {
        return None;
    }
    Some(CliError {
        hint: Some(hint.to_string()),
        details: e.details.clone(),
        what: e.what.clone(),
        place: e.place.clone(),
        code: e.code,
    })
}

/// A command-line error from clap, in the `evolve: <what> (<where>)` form.
fn usage_error(e: &clap::Error) -> CliError {
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).skip_while(|l| l.is_empty());
    let mut what = lines
        .next()
        .unwrap_or("invalid command line")
        .trim_start_matches("error: ")
        .to_string();
    // "the following required arguments were not provided:" lists them on the lines
    // below: they are the point of the message.
    if what.ends_with(':') {
        let listed: Vec<&str> = lines.take_while(|l| !l.is_empty()).collect();
        what = format!("{what} {}", listed.join(", "));
    }
    let usage = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
        .map(|u| match example_for(u) {
            Some(x) => format!("{u}; for example `{x}`"),
            None => u.to_string(),
        });
    let tip = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("tip: "))
        .map(str::to_string);
    let hint = match (tip, usage) {
        (Some(t), Some(u)) => format!("{t}; usage: {u}"),
        (Some(t), None) => t,
        (None, Some(u)) => format!("usage: {u} (see --help)"),
        (None, None) => "see `evolve --help`".into(),
    };
    CliError::usage(what).at("command line").hint(hint)
}

/// The first example in the `--help` of the command a usage line names
/// (`evolve show [OPTIONS] <GENID>` → `evolve show 3 -w ws`).
fn example_for(usage: &str) -> Option<String> {
    let mut cmd = Cli::command();
    let path = usage
        .split_whitespace()
        .skip(1)
        .take_while(|w| !w.starts_with(['[', '<', '-']));
    for name in path {
        cmd = cmd.find_subcommand(name)?.clone();
    }
    let help = cmd.get_after_help()?.to_string();
    let example = help
        .lines()
        .skip_while(|l| !l.starts_with("Examples:"))
        .nth(1)?;
    // Drop a trailing `# comment`.
    let example = example.split("  #").next().unwrap_or(example).trim();
    (!example.is_empty()).then(|| example.to_string())
}

fn export_cmd(a: ExportArgs) -> CliResult {
    let ws = crate::workspace::Workspace::open(&a.workspace)?;
    let done = bundle::export(&ws, &a.out)?;
    if a.json {
        print_json(&serde_json::json!({
            "ok": true, "bundle": done.dir, "tags": done.tags, "files": done.files,
        }));
    } else {
        let dir = done.dir.display().to_string();
        println!(
            "exported {} ({} gen/* tag(s); {})",
            crate::display::text(&dir),
            done.tags,
            done.files.join(", ")
        );
        println!(
            "check it anywhere: evolve verify --bundle {}",
            crate::display::text(&dir)
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn completions_cmd(a: CompletionsArgs) -> CliResult {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "evolve", &mut script);
    if a.json {
        print_json(&serde_json::json!({
            "shell": a.shell.to_string(), "script": String::from_utf8_lossy(&script),
        }));
    } else {
        use std::io::Write;
        let _ = std::io::stdout().write_all(&script);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command, with its path (`evolve operator list`).
    fn all_commands() -> Vec<(String, clap::Command)> {
        fn walk(prefix: &str, cmd: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
            for sub in cmd.get_subcommands() {
                let path = format!("{prefix} {}", sub.get_name());
                out.push((path.clone(), sub.clone()));
                walk(&path, sub, out);
            }
        }
        let mut out = Vec::new();
        walk("evolve", &Cli::command(), &mut out);
        out
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_has_examples_in_its_help() {
        let missing: Vec<String> = all_commands()
            .into_iter()
            .filter(|(_, c)| {
                !c.get_after_help()
                    .is_some_and(|h| h.to_string().contains("Example"))
            })
            .map(|(p, _)| p)
            .collect();
        assert!(missing.is_empty(), "no Examples: in --help of {missing:?}");
    }

    #[test]
    fn every_option_and_argument_has_help_text() {
        let missing: Vec<String> = all_commands()
            .into_iter()
            .flat_map(|(path, c)| {
                c.get_arguments()
                    .filter(|a| a.get_help().is_none() && !a.is_hide_set())
                    .map(|a| format!("{path} {}", a.get_id()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    #[test]
    fn every_command_takes_json() {
        let missing: Vec<String> = all_commands()
            .into_iter()
            .filter(|(_, c)| !c.has_subcommands())
            .filter(|(_, c)| !c.get_arguments().any(|a| a.get_long() == Some("json")))
            .map(|(p, _)| p)
            .collect();
        assert!(missing.is_empty(), "no --json on {missing:?}");
    }

    #[test]
    fn a_clap_error_reads_as_an_evolve_error() {
        let e = Cli::try_parse_from(["evolve", "frobnicate"]).err().unwrap();
        let text = usage_error(&e).to_string();
        assert!(
            text.starts_with("evolve: unrecognized subcommand"),
            "{text}"
        );
        assert!(text.contains("(command line)"), "{text}");
        assert!(text.contains("hint: "), "{text}");
    }

    #[test]
    fn a_missing_argument_is_named_with_an_example() {
        let e = Cli::try_parse_from(["evolve", "show"]).err().unwrap();
        let err = usage_error(&e);
        assert_eq!(
            err.what,
            "the following required arguments were not provided: <GENID>"
        );
        let hint = err.hint.unwrap();
        assert!(hint.contains("for example `evolve show 3 -w ws`"), "{hint}");
        assert_eq!(
            example_for("evolve operator describe [OPTIONS] <OPERATOR>").as_deref(),
            Some("evolve operator describe select/greedy"),
        );
    }
}
