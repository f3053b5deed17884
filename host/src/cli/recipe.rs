//! `evolve recipe list|show|check|schema`.

use crate::command::{CliError, CliResult, print_json, runtime};
use crate::recipe;
use crate::sandbox::{self, Sandbox, SandboxConfig};
use clap::Subcommand;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum RecipeCommand {
    /// The built-in recipes (usable by name with `evolve init --recipe NAME`).
    #[command(after_help = "Examples:\n  evolve recipe list\n  evolve recipe list --json")]
    List {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print a built-in recipe's YAML (a starting point for your own).
    #[command(
        after_help = "Examples:\n  evolve recipe show hill_climb > my_recipe.yaml\n  evolve recipe show gepa --json"
    )]
    Show {
        /// A built-in recipe's name (`evolve recipe list`).
        name: String,
        /// Print `{"name": ..., "summary": ..., "yaml": ...}`.
        #[arg(long)]
        json: bool,
    },
    /// Check a recipe and report every problem at once (its shape, each operator and
    /// each operator's configuration, normalized by the operator itself, its surface,
    /// and the target and task set it names), as `evolve init` checks it.
    #[command(
        after_help = "Examples:\n  evolve recipe check recipes/local_demo.yaml\n  evolve recipe check gepa\n  evolve recipe check my_recipe.yaml --json\n\nExit status: 0 valid, 1 problems found, 2 usage errors."
    )]
    Check {
        /// A recipe file, or the name of a built-in recipe (`evolve recipe list`).
        path: PathBuf,
        /// Print the normalized recipe (or the problems) as JSON.
        #[arg(long)]
        json: bool,
        /// Also ask the model endpoint once whether it answers (and takes the key), and
        /// count a model the operators call but the recipe does not configure as a problem.
        #[arg(long)]
        check: bool,
    },
    /// Print a JSON Schema for recipe files, for editors.
    #[command(
        after_help = "Examples:\n  evolve recipe schema > recipe.schema.json\n  evolve recipe schema --json    # the same: the schema is JSON"
    )]
    Schema {
        /// Accepted for uniformity: the output is JSON either way.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: RecipeCommand) -> CliResult {
    match cmd {
        RecipeCommand::Schema { json: _ } => {
            print_json(&recipe::json_schema());
            Ok(ExitCode::SUCCESS)
        }
        RecipeCommand::Check {
            path,
            json,
            check: probe,
        } => check(&path, json, probe),
        RecipeCommand::List { json } => {
            if json {
                print_json(&json!(
                    recipe::BUILTIN
                        .iter()
                        .map(|r| json!({"name": r.name, "summary": r.summary}))
                        .collect::<Vec<_>>()
                ));
            } else {
                for r in recipe::BUILTIN {
                    println!("{:<14} {}", r.name, r.summary);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RecipeCommand::Show { name, json } => match recipe::builtin(&name) {
            Some(r) if json => {
                print_json(&json!({"name": r.name, "summary": r.summary, "yaml": r.text}));
                Ok(ExitCode::SUCCESS)
            }
            Some(r) => {
                print!("{}", r.text);
                Ok(ExitCode::SUCCESS)
            }
            None => Err(
                CliError::usage(format!("no built-in recipe named `{name}`"))
                    .hint("`evolve recipe list` names them"),
            ),
        },
    }
}

/// The recipe text and the directory its relative paths are taken from, for `spec`: a
/// file, else a built-in recipe's name, exactly as `evolve init --recipe` resolves it (a
/// built-in recipe's paths are taken from the current directory).
fn source(spec: &Path) -> Result<(String, PathBuf), CliError> {
    if spec.is_file() {
        let text = std::fs::read_to_string(spec).map_err(|e| {
            CliError::usage(format!("cannot read the recipe: {e}")).at(spec.display().to_string())
        })?;
        return Ok((text, spec.parent().map(PathBuf::from).unwrap_or_default()));
    }
    if let Some(r) = spec.to_str().and_then(recipe::builtin) {
        return Ok((
            r.text.to_string(),
            std::env::current_dir().unwrap_or_default(),
        ));
    }
    let known: Vec<&str> = recipe::BUILTIN.iter().map(|r| r.name).collect();
    let why = match std::fs::metadata(spec) {
        Ok(_) => "is not a file".to_string(),
        Err(e) => format!("cannot be read ({e})"),
    };
    Err(CliError::usage(format!(
        "{} {why}, and is no built-in recipe",
        spec.display()
    ))
    .hint(format!("built-in recipes: {}", known.join(", "))))
}

fn check(path: &Path, json_out: bool, probe: bool) -> CliResult {
    let (text, base) = source(path)?;
    let sb = Sandbox::new(SandboxConfig {
        cache_dir: sandbox::default_cache_dir(),
        fuel: false,
    })
    .or_else(|_| Sandbox::new(SandboxConfig::default()))
    .map_err(|e| CliError::usage(format!("cannot create the WebAssembly engine: {e:#}")))?;
    let mut checked = runtime()?.block_on(recipe::check(&sb, &text, &base));
    if let Some(r) = &checked.recipe {
        let model = runtime()?.block_on(crate::model::check_recipe_model(&sb, r, &base, probe));
        model.report(&mut checked.violations);
    }
    if checked.violations.is_empty() {
        // A Harbor registry dataset is fetched by `init`, never by a check.
        let fetched = checked
            .recipe
            .as_ref()
            .map(|r| r.evaluator.dataset.clone())
            .filter(|d| recipe::harbor::is_registry_name(d, &base));
        if json_out {
            print_json(&json!({
                "valid": true, "recipe": checked.normalized,
                "dataset_fetched_at_init": fetched,
            }));
        } else {
            println!("ok: {} is a valid recipe", path.display());
            if let Some(name) = fetched {
                println!(
                    "note: evaluator.dataset `{}` is a Harbor registry dataset: `evolve init` fetches it with `harbor download` (this check did not download it, so its tasks are not checked yet)",
                    crate::display::text(&name)
                );
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if json_out {
        let list: Vec<_> = checked
            .violations
            .iter()
            .map(|v| json!({"path": v.path, "message": v.message}))
            .collect();
        print_json(&json!({"valid": false, "violations": list}));
    } else {
        eprintln!(
            "evolve: {} has {} problem(s):",
            path.display(),
            checked.violations.len()
        );
        // A violation quotes the recipe's own text (a YAML error adds its line, under it).
        for v in &checked.violations {
            for line in crate::display::lines(&recipe::render(v)) {
                eprintln!("{line}");
            }
        }
    }
    Ok(ExitCode::from(1))
}
