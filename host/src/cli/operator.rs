//! `evolve operator …`: the operator author's tools.

use super::scaffold;
use crate::builtin;
use crate::command::{CliError, CliResult, print_json, runtime};
use crate::display;
use crate::samples;
use crate::sandbox::{
    self, Capabilities, GrantRequest, Grants, Limits, LoadedOperator, Sandbox, SandboxConfig,
    StageInput, StageOutput, parse_world, stage_name, types::Stage,
};
use clap::Subcommand;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Subcommand)]
pub enum OperatorCommand {
    /// List the operators built into this binary.
    #[command(after_help = "Examples:\n  evolve operator list\n  evolve operator list --json")]
    List {
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Show an operator's summary and configuration schema.
    #[command(
        after_help = "Examples:\n  evolve operator describe select/greedy\n  evolve operator describe ./my_op.wasm --json"
    )]
    Describe {
        /// `stage/name` of a built-in operator, or the path of a component file.
        operator: String,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Normalize a configuration with the operator's own schema, or list every violation.
    #[command(
        after_help = "Examples:\n  evolve operator check select/greedy --config '{}'\n  evolve operator check gate/hillclimb --config @gate.json --json\n\nExit status: 0 valid, 1 violations, 2 usage errors."
    )]
    Check {
        /// `stage/name` of a built-in operator, or the path of a component file.
        operator: String,
        /// The configuration as JSON text, or `@FILE` to read it from a file.
        #[arg(long, default_value = "{}")]
        config: String,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Run an operator once on sample input (a small archive and candidate) and print its result.
    #[command(
        after_help = "Examples:\n  evolve operator run select/greedy\n  evolve operator run ./target/wasm32-wasip2/release/my_op.wasm --config '{\"k\": 2}'"
    )]
    Run {
        /// `stage/name` of a built-in operator, or the path of a component file.
        operator: String,
        /// The configuration as JSON text, or `@FILE`.
        #[arg(long, default_value = "{}")]
        config: String,
        /// Seconds before the call is stopped.
        #[arg(long, default_value_t = 30.0)]
        timeout: f64,
        /// Memory cap in MiB.
        #[arg(long, default_value_t = 256)]
        memory_mib: usize,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Scaffold a new operator crate that compiles and passes its test.
    #[command(
        after_help = "Examples:\n  evolve operator new select my_picker\n  evolve operator new gate strict --dir ./strict_gate --json\n\nInside this repository the crate goes to operators/<stage>/<name>/ and is built\nand embedded with the others; elsewhere it becomes a standalone crate in ./<name>/."
    )]
    New {
        /// The lifecycle stage: select, rollout, analyze, mutate, validate, novelty, gate, record or reflect.
        stage: String,
        /// The operator's name: [a-z0-9_]+.
        name: String,
        /// Where to create the crate (default: see above).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Build an operator crate for wasm32-wasip2 and check the component against its stage's world.
    #[command(
        after_help = "Examples:\n  evolve operator build operators/select/my_picker\n  evolve operator build        # every crate under operators/ in this repository"
    )]
    Build {
        /// The crate's directory (default: every operator in this repository).
        path: Option<PathBuf>,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: OperatorCommand) -> CliResult {
    match cmd {
        OperatorCommand::List { json } => list(json),
        OperatorCommand::Describe { operator, json } => describe(&operator, json),
        OperatorCommand::Check {
            operator,
            config,
            json,
        } => check(&operator, &config, json),
        OperatorCommand::Run {
            operator,
            config,
            timeout,
            memory_mib,
            json,
        } => run_sample(&operator, &config, timeout, memory_mib, json),
        OperatorCommand::New {
            stage,
            name,
            dir,
            json,
        } => scaffold::new_operator(&stage, &name, dir, json),
        OperatorCommand::Build { path, json } => build(path.as_deref(), json),
    }
}

/// A sandbox with the user's on-disk compile cache when one can be used.
fn sandbox() -> Result<Arc<Sandbox>, CliError> {
    let cache_dir = sandbox::default_cache_dir();
    Sandbox::new(SandboxConfig {
        cache_dir: cache_dir.clone(),
        fuel: false,
    })
    .or_else(|e| {
        eprintln!("evolve: note: compiling without the on-disk cache ({e:#})");
        Sandbox::new(SandboxConfig::default())
    })
    .map_err(|e| CliError::usage(format!("cannot create the WebAssembly engine: {e:#}")))
}

/// Resolve `stage/name` (built-in) or a component path.
fn load(sb: &Sandbox, spec: &str) -> Result<LoadedOperator, CliError> {
    let as_path = Path::new(spec);
    if spec.ends_with(".wasm") || as_path.is_file() {
        return sb.load_file_any_stage(as_path).map_err(|e| CliError {
            code: 1,
            ..CliError::usage(e.to_string())
        });
    }
    let Some((stage_text, name)) = spec.split_once('/') else {
        return Err(CliError::usage(format!(
            "`{spec}` is neither stage/name nor a component file"
        ))
        .hint("list the built-in operators with `evolve operator list`"));
    };
    let stage = parse_world(stage_text).ok_or_else(|| {
        CliError::usage(format!("unknown stage `{stage_text}`")).hint(
            "stages: select, rollout, analyze, mutate, validate, novelty, gate, record, reflect (and driver)",
        )
    })?;
    let op = builtin::find(stage_text, name).ok_or_else(|| {
        CliError::usage(format!("no built-in operator `{spec}`")).hint("see `evolve operator list`")
    })?;
    sb.load_builtin(stage, op, format!("builtin:{spec}"))
        .map_err(|e| CliError {
            code: 1,
            ..CliError::usage(e.to_string())
        })
}

fn meta_call(
    sb: &Sandbox,
    op: &LoadedOperator,
    input: StageInput,
) -> Result<StageOutput, CliError> {
    let report = runtime()?
        .block_on(sb.call_bare(op, input, Duration::from_secs(10)))
        .map_err(|e| CliError::usage(format!("cannot create a scratch directory: {e}")))?;
    report.outcome.map_err(|f| CliError {
        code: 1,
        ..CliError::usage(f.to_string()).at(op.origin.clone())
    })
}

fn describe_json(sb: &Sandbox, op: &LoadedOperator) -> Result<Value, CliError> {
    let mut v = meta_call(sb, op, StageInput::Describe)?.to_json();
    v["sha256"] = json!(sandbox::hex(&op.digest));
    v["origin"] = json!(op.origin);
    Ok(v)
}

fn list(json_out: bool) -> CliResult {
    let sb = sandbox()?;
    let mut rows = Vec::new();
    for op in builtin::EMBEDDED {
        let spec = format!("{}/{}", op.stage, op.name);
        let loaded = load(&sb, &spec)?;
        rows.push(describe_json(&sb, &loaded)?);
    }
    if json_out {
        print_json(&Value::Array(rows));
    } else {
        let width = rows.iter().map(|r| spec_of(r).len()).max().unwrap_or(0);
        for r in &rows {
            println!(
                "{:width$}  {}",
                spec_of(r),
                display::text(r["summary"].as_str().unwrap_or(""))
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `stage/name`, as the component describes itself (escaped: a component file names
/// itself, and so does its summary, its schema and its messages).
fn spec_of(r: &Value) -> String {
    format!(
        "{}/{}",
        display::text(r["stage"].as_str().unwrap_or("?")),
        display::text(r["name"].as_str().unwrap_or("?"))
    )
}

fn describe(spec: &str, json_out: bool) -> CliResult {
    let sb = sandbox()?;
    let op = load(&sb, spec)?;
    let v = describe_json(&sb, &op)?;
    if json_out {
        print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}  {}",
        spec_of(&v),
        display::text(v["summary"].as_str().unwrap_or(""))
    );
    println!("sha256: {}", v["sha256"].as_str().unwrap_or(""));
    println!("imports: {}", capability_list(op.stage));
    println!("configuration:");
    print_schema(&v["config_schema"]);
    Ok(ExitCode::SUCCESS)
}

fn capability_list(stage: Stage) -> String {
    let caps = sandbox::granted_capabilities(stage);
    if caps.is_empty() {
        return "no host capabilities".into();
    }
    let names: Vec<&str> = caps.iter().map(|c| c.name()).collect();
    names.join(", ")
}

fn print_schema(schema: &Value) {
    let props = schema["properties"].as_object();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match props {
        Some(p) if !p.is_empty() => {
            for (name, field) in p {
                let ty = field["type"].as_str().unwrap_or("json");
                let mut line = format!("  {name}: {ty}");
                if required.contains(&name.as_str()) {
                    line.push_str(" (required)");
                }
                if let Some(d) = field.get("default") {
                    line.push_str(&format!(" = {d}"));
                }
                if let Some(desc) = field["description"].as_str() {
                    line.push_str(&format!(" — {desc}"));
                }
                println!("{}", display::text(&line));
            }
        }
        _ => println!("  (none)"),
    }
}

fn read_config(text: &str) -> Result<String, CliError> {
    match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            CliError::usage(format!("cannot read the configuration file: {e}")).at(path.to_string())
        }),
        None => Ok(text.to_string()),
    }
}

/// Normalize `raw` with the operator; violations are findings (exit 1).
fn normalize(
    sb: &Sandbox,
    op: &LoadedOperator,
    raw: &str,
) -> Result<Result<String, Value>, CliError> {
    match meta_call(sb, op, StageInput::NormalizeConfig(raw.to_string()))? {
        StageOutput::NormalizedConfig(Ok(map)) => Ok(Ok(Value::Object(map).to_string())),
        other => Ok(Err(other.to_json())),
    }
}

fn check(spec: &str, config: &str, json_out: bool) -> CliResult {
    let sb = sandbox()?;
    let op = load(&sb, spec)?;
    let raw = read_config(config)?;
    match normalize(&sb, &op, &raw)? {
        Ok(normalized) => {
            let v: Value = serde_json::from_str(&normalized).unwrap_or(Value::Null);
            if json_out {
                print_json(&json!({"valid": true, "config": v}));
            } else {
                print_json(&v);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(violations) => {
            if json_out {
                print_json(&json!({"valid": false, "violations": violations["violations"]}));
            } else {
                eprintln!("evolve: the configuration of {spec} has violations:");
                for v in violations["violations"].as_array().into_iter().flatten() {
                    let path = v["path"]
                        .as_str()
                        .filter(|p| !p.is_empty())
                        .unwrap_or("(config)");
                    eprintln!(
                        "- {}: {}",
                        display::text(path),
                        display::text(v["message"].as_str().unwrap_or(""))
                    );
                }
            }
            Ok(ExitCode::from(1))
        }
    }
}

fn run_sample(
    spec: &str,
    config: &str,
    timeout: f64,
    memory_mib: usize,
    json_out: bool,
) -> CliResult {
    if !(timeout.is_finite() && timeout > 0.0) {
        return Err(CliError::usage(
            "--timeout must be a positive number of seconds",
        ));
    }
    let sb = sandbox()?;
    let op = load(&sb, spec)?;
    let raw = read_config(config)?;
    let script_component = is_script_component(&sb, &op)?;
    if script_component {
        require_source(spec, op.stage, &raw)?;
    }
    let config = match normalize(&sb, &op, &raw)? {
        Ok(c) => c,
        Err(_) => {
            return Err(CliError {
                code: 1,
                ..CliError::usage("the configuration has violations")
            }
            .hint(format!("see `evolve operator check {spec} --config …`")));
        }
    };
    let work = tempfile::tempdir()
        .map_err(|e| CliError::usage(format!("cannot create a work directory: {e}")))?;
    let checkout = work.path().join("candidate");
    let scratch = work.path().join("scratch");
    for dir in [
        checkout.join("target"),
        checkout.join("operators"),
        scratch.clone(),
    ] {
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::usage(format!("cannot prepare the sample: {e}")))?;
    }
    for (name, text) in samples::TARGET_FILES {
        std::fs::write(checkout.join("target").join(name), text)
            .map_err(|e| CliError::usage(format!("cannot prepare the sample: {e}")))?;
    }
    let mut input = samples::input(op.stage, &config);
    if script_component {
        crate::scripts::attach(&mut input, Some(sample_script(&config)?));
    }
    let grants = Grants::for_stage(
        op.stage,
        &GrantRequest {
            checkout: &checkout,
            operators_in_surface: false,
            scratch: &scratch,
            feedback: None,
        },
    );
    let limits = Limits {
        timeout: Duration::from_secs_f64(timeout),
        memory_bytes: memory_mib << 20,
        ..Limits::default()
    };
    let report =
        runtime()?.block_on(sb.call(&op, &grants, &limits, Capabilities::default(), input));
    let stderr = String::from_utf8_lossy(&report.stderr.bytes).to_string();
    match report.outcome {
        Ok(out) => {
            if json_out {
                print_json(&json!({
                    "operator": spec, "stage": stage_name(op.stage), "sha256": sandbox::hex(&op.digest),
                    "elapsed_ms": report.elapsed.as_secs_f64() * 1e3, "result": out.to_json(), "stderr": stderr,
                }));
            } else {
                eprintln!(
                    "ran {} ({} stage) on the sample input in {:.1} ms",
                    display::text(&op.origin),
                    stage_name(op.stage),
                    report.elapsed.as_secs_f64() * 1e3
                );
                print_json(&out.to_json());
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(failure) => {
            if !stderr.trim().is_empty() {
                for line in display::lines(stderr.trim_end()) {
                    eprintln!("{line}");
                }
            }
            Err(CliError {
                code: 1,
                ..CliError::usage(format!("{} [{}]", failure, failure.kind())).at(op.origin)
            })
        }
    }
}

/// Whether `op` is a script operator (it describes itself as `<stage>/script`).
fn is_script_component(sb: &Sandbox, op: &LoadedOperator) -> Result<bool, CliError> {
    Ok(match meta_call(sb, op, StageInput::Describe)? {
        StageOutput::Description(d) => d.name == crate::scripts::SCRIPT_OPERATOR,
        _ => false,
    })
}

/// A script operator runs the script its configuration names: say so precisely when the
/// configuration names none.
fn require_source(spec: &str, stage: Stage, raw: &str) -> Result<(), CliError> {
    let named = serde_json::from_str::<Value>(raw)
        .ok()
        .is_some_and(|v| v.get("source").is_some());
    if named {
        return Ok(());
    }
    let stage = stage_name(stage);
    Err(CliError::usage(format!(
        "{spec} runs the Rhai script its configuration names, and this configuration names none"
    ))
    .hint(format!(
        "pass --config '{{\"source\": \"operators/{stage}/my.rhai\"}}' (read relative to the current directory; see docs/scripts.md)"
    )))
}

/// The script the normalized `config` names, read relative to the current directory.
fn sample_script(config: &str) -> Result<crate::sandbox::types::ScriptSource, CliError> {
    let config: Value = serde_json::from_str(config).unwrap_or_default();
    let source = config["source"].as_str().unwrap_or_default();
    crate::scripts::from_file(Path::new("."), source).map_err(|e| {
        CliError::usage(format!("cannot read the script config.source names: {e}"))
            .at(source.to_string())
            .hint("config.source is read relative to the current directory")
    })
}

fn build(path: Option<&Path>, json_out: bool) -> CliResult {
    let manifests: Vec<PathBuf> = match path {
        Some(p) => vec![p.join("Cargo.toml")],
        None => scaffold::repository_operator_manifests()?,
    };
    let sb = sandbox()?;
    let mut results = Vec::new();
    for manifest in &manifests {
        let wasm = scaffold::cargo_build_component(manifest)?;
        let op = load(&sb, &wasm.display().to_string())?;
        let mut v = describe_json(&sb, &op)?;
        // An operator must accept an empty configuration or name what it requires.
        if let Ok(Err(violations)) = normalize(&sb, &op, "{}") {
            v["empty_config_violations"] = violations["violations"].clone();
        }
        v["component"] = json!(wasm.display().to_string());
        if !json_out {
            eprintln!(
                "built {} -> {} ({} world ok)",
                manifest.display(),
                wasm.display(),
                stage_name(op.stage)
            );
        }
        results.push(v);
    }
    if json_out {
        print_json(&Value::Array(results));
    }
    Ok(ExitCode::SUCCESS)
}
