//! The workspace commands: `demo`, `init`, `run`, `status`, `log`, `show`, `repair`,
//! `retry` (`verify` is in `verify.rs`, `diff` in `diff.rs`). Each takes `--json`.

use crate::command::{CliError, CliResult, print_json, runtime};
use crate::display;
use crate::lifecycle::progress::Progress;
use crate::lifecycle::{self, Driver, RunOptions, State};
use crate::sandbox::{self, Sandbox, SandboxConfig};
use crate::workspace::evidence::{self, Evidence};
use crate::workspace::{Workspace, WorkspaceError, init};
use clap::Args;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

impl From<WorkspaceError> for CliError {
    fn from(e: WorkspaceError) -> CliError {
        CliError {
            what: e.what,
            place: None,
            hint: e.hint,
            code: 2,
            details: e.details,
        }
    }
}

impl From<lifecycle::RunError> for CliError {
    fn from(e: lifecycle::RunError) -> CliError {
        CliError {
            code: 2,
            hint: e.hint,
            ..CliError::usage(e.what)
        }
    }
}

/// The commands that take the workspace as their first argument (`evolve run WS`), and
/// those that take it as `-w WS` after a generation id (`evolve retry 3 -w WS`).
const WORKSPACE_FIRST: [&str; 6] = ["run", "repair", "status", "log", "verify", "view"];
const WORKSPACE_FLAG: [&str; 5] = ["show", "retry", "diff", "checkout", "export"];

/// The workspace as the user named it, ready to paste into a command line.
fn ws_word(dir: &Path) -> String {
    display::shell(&dir.to_string_lossy()).into_owned()
}

/// `text` with every `` `evolve <command> …` `` that works on a workspace completed with
/// `dir`, as the user spelled it: the lifecycle and the workspace code write their hints
/// without a workspace (they only see its absolute path), so a hint would otherwise send
/// the user to run `evolve repair` in whatever directory they are in. The default `.`,
/// and a command that already names a workspace, are left as they are.
pub(crate) fn name_workspace(text: &str, dir: &Path) -> String {
    if dir == Path::new(".") {
        return text.to_string();
    }
    let ws = ws_word(dir);
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            // Odd parts are inside backticks: the commands.
            if i % 2 == 1 {
                with_workspace(part, &ws)
            } else {
                part.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// One command, `evolve <sub> …`, with `ws` added where `<sub>` takes it.
fn with_workspace(command: &str, ws: &str) -> String {
    let words: Vec<&str> = command.split(' ').collect();
    let (Some(&"evolve"), Some(sub)) = (words.first(), words.get(1)) else {
        return command.to_string();
    };
    let rest = &words[2..];
    let named = rest
        .iter()
        .any(|w| matches!(*w, "-w" | "--workspace" | "--bundle"));
    if WORKSPACE_FIRST.contains(sub) && !named && rest.first().is_none_or(|w| w.starts_with('-')) {
        let mut out = vec!["evolve", *sub, ws];
        out.extend_from_slice(rest);
        out.join(" ")
    } else if WORKSPACE_FLAG.contains(sub) && !named {
        format!("{command} -w {ws}")
    } else {
        command.to_string()
    }
}

impl CliError {
    /// This error with its commands completed with the workspace `dir` ([`name_workspace`]).
    pub(crate) fn in_workspace(mut self, dir: &Path) -> CliError {
        self.what = name_workspace(&self.what, dir);
        self.hint = self.hint.map(|h| name_workspace(&h, dir));
        self
    }
}

/// Run a workspace command; its error names the workspace in the commands it suggests.
fn within<A>(dir: PathBuf, args: A, command: fn(A) -> CliResult) -> CliResult {
    command(args).map_err(|e| e.in_workspace(&dir))
}

#[derive(Args)]
pub struct InitArgs {
    /// The new workspace directory (must not exist, or be empty).
    pub dir: PathBuf,
    /// A recipe file, or the name of a built-in recipe (`evolve recipe list`).
    #[arg(long)]
    pub recipe: String,
    /// Replace the recipe's target: a built-in seed name, a directory (a target, or a
    /// seed: seed.toml, target/, tasks/), or GIT_URL[@REV], cloned now and pinned to its
    /// commit. A seed's tasks/ also replace the task set, unless --tasks is given.
    #[arg(long, value_name = "NAME|PATH|GIT_URL[@REV]")]
    pub seed: Option<String>,
    /// Replace the recipe's task set: a built-in task set name, a directory of Harbor tasks, or
    /// a Harbor registry dataset (NAME@VERSION, org/name@ref), fetched with `harbor download`.
    #[arg(long)]
    pub tasks: Option<String>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// First ask the model endpoint once whether it answers (and takes the key); refuse
    /// to create the workspace if not, or if an operator calls a model none configures.
    #[arg(long)]
    pub check: bool,
}

#[derive(Args)]
pub struct RunArgs {
    /// The workspace (default: the current directory).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Run up to generation N: a total for the workspace, not N more (generations already
    /// finished are not run again). Default: the recipe's `experiment.max_generations`;
    /// not saved for later runs.
    #[arg(long, value_name = "N")]
    pub max_generations: Option<u32>,
    /// Children per generation for this run (default: the recipe's
    /// `experiment.children_per_gen`).
    #[arg(long, value_name = "K")]
    pub children_per_gen: Option<u32>,
    /// Print the pre-flight estimate (trials and cost) and exit without running.
    #[arg(long)]
    pub dry_run: bool,
    /// Print only the summary.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print the summary (or the estimate) as JSON on stdout, and no progress.
    #[arg(long)]
    pub json: bool,
    /// An agent driver that revises the recipe between generations: a built-in driver
    /// (`stall_swap`) or a component file (docs/driver.md).
    #[arg(long)]
    pub driver: Option<String>,
    /// The driver's configuration as JSON text.
    #[arg(long, default_value = "{}", requires = "driver")]
    pub driver_config: String,
}

#[derive(Args)]
pub struct DirArgs {
    /// The workspace (default: the current directory).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct GenArgs {
    /// A generation id, e.g. `3` or `3-1`.
    pub genid: String,
    /// The workspace (default: the current directory).
    #[arg(long, short, default_value = ".")]
    pub workspace: PathBuf,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct CheckoutArgs {
    /// A generation id (e.g. `3` or `3-1`), or `champion`.
    pub genid: String,
    /// The directory to write (must not exist, or be empty).
    pub dest: PathBuf,
    /// The workspace (default: the current directory).
    #[arg(long, short, default_value = ".")]
    pub workspace: PathBuf,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A sandbox with the user's compile cache; fuel metering when a binding asks for it.
pub(crate) fn sandbox_for(fuel: bool) -> Result<Arc<Sandbox>, CliError> {
    Sandbox::new(SandboxConfig {
        cache_dir: sandbox::default_cache_dir(),
        fuel,
    })
    .or_else(|_| {
        Sandbox::new(SandboxConfig {
            cache_dir: None,
            fuel,
        })
    })
    .map_err(|e| CliError::usage(format!("cannot create the WebAssembly engine: {e:#}")))
}

/// The recipe text and base directory for `--recipe`: a file, or a built-in recipe.
fn recipe_source(spec: &str) -> Result<(String, PathBuf), CliError> {
    let path = Path::new(spec);
    if path.is_file() {
        let text = std::fs::read_to_string(path).map_err(|e| {
            CliError::usage(format!("cannot read the recipe: {e}")).at(spec.to_string())
        })?;
        return Ok((text, path.parent().map(PathBuf::from).unwrap_or_default()));
    }
    if let Some(r) = crate::recipe::builtin(spec) {
        return Ok((
            r.text.to_string(),
            std::env::current_dir().unwrap_or_default(),
        ));
    }
    let known: Vec<&str> = crate::recipe::BUILTIN.iter().map(|r| r.name).collect();
    Err(
        CliError::usage(format!("no recipe file or built-in recipe named `{spec}`"))
            .hint(format!("built-in recipes: {}", known.join(", "))),
    )
}

fn initialize(a: &InitArgs) -> Result<init::Initialized, CliError> {
    let (text, base) = recipe_source(&a.recipe)?;
    let sb = sandbox_for(false)?;
    runtime()?
        .block_on(crate::model::check_init_model(&sb, &text, &base, a.check))
        .map_err(|what| CliError {
            code: 1,
            ..CliError::usage(what).hint("nothing was created; see docs/model.md")
        })?;
    let req = init::InitRequest {
        dir: a.dir.clone(),
        recipe_text: text,
        recipe_base: base,
        seed: a.seed.clone(),
        tasks: a.tasks.clone(),
    };
    Ok(runtime()?.block_on(init::init(&sb, &req))?)
}

pub fn init_cmd(a: InitArgs) -> CliResult {
    within(a.dir.clone(), a, init_new)
}

fn init_new(a: InitArgs) -> CliResult {
    print_init(&a, &initialize(&a)?, true)
}

fn print_init(a: &InitArgs, done: &init::Initialized, next: bool) -> CliResult {
    if a.json {
        print_json(&json!({
            "workspace": done.root, "experiment": done.experiment_id, "commit": done.commit,
            "key": done.key_path, "tasks": {"train": done.tasks[0], "gate": done.tasks[1], "sealed": done.tasks[2]},
        }));
    } else {
        println!(
            "initialized {} (experiment {})",
            display::text(&done.root.display().to_string()),
            display::text(&done.experiment_id)
        );
        println!("  gen/0 = {}", done.commit);
        println!(
            "  tasks: {} train, {} gate, {} sealed",
            done.tasks[0], done.tasks[1], done.tasks[2]
        );
        println!(
            "  signing key: {} (keep it private; gen/0 holds the public key, keys/archive.pub)",
            done.key_path.display()
        );
        if next {
            println!("next: evolve run {}", display::text(&ws_word(&a.dir)));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_cmd(a: RunArgs) -> CliResult {
    within(a.dir.clone(), a, run)
}

fn run(a: RunArgs) -> CliResult {
    let ws = Workspace::open(&a.dir)?;
    if a.dry_run {
        return dry_run(&ws, &a);
    }
    let fuel = ws.recipe.operators.values().any(|b| b.fuel.is_some());
    let sb = sandbox_for(fuel)?;
    let rt = runtime()?;
    // The status line and narrative on stderr, unless the output is for a program.
    let renderer = (!a.quiet && !a.json).then(|| Arc::new(super::progress::Renderer::new()));
    let opts = RunOptions {
        max_generations: a.max_generations,
        children_per_gen: a.children_per_gen,
        verbose: !a.quiet && !a.json,
        progress: renderer
            .clone()
            .map(|r| Progress::new(r))
            .unwrap_or_default(),
    };
    let watch = super::progress::watch(&rt, sb.cancel_token())?;
    let summary = rt.block_on(async {
        let mut driver = Driver::open(ws, sb.clone(), opts.verbose).await?;
        if let Some(spec) = &a.driver {
            let agent = lifecycle::agent_driver::AgentDriver::load(sb, spec, &a.driver_config);
            driver.set_agent(agent.await?);
        }
        driver.run(&opts).await
    });
    if let Some(r) = &renderer {
        r.finish();
    }
    let summary = summary.map_err(|e| {
        let again = format!("evolve run {}", ws_word(&a.dir));
        stopped_error(e, watch.stopped_by(), &a.dir, &again)
    })?;
    if a.json {
        print_json(&serde_json::to_value(&summary).unwrap_or(Value::Null));
    } else {
        let s = lifecycle::fmt_score;
        println!(
            "run {}: {} generation(s)",
            summary.status, summary.generations
        );
        println!(
            "  gate score: gen 0 {} -> champion {} ({})",
            s(summary.genesis_score),
            s(summary.champion_score),
            summary
                .champion
                .as_deref()
                .map(|c| format!("gen {}", display::text(c)))
                .unwrap_or_else(|| "none".into())
        );
        println!(
            "  sealed anchor: before {} -> after {}",
            s(summary.anchor_before),
            s(summary.anchor_after)
        );
        println!(
            "  spent ${:.4} of ${:.4}",
            summary.spent_usd, summary.budget_usd
        );
        if let Some(acc) = &summary.acceptance {
            println!(
                "  sealed acceptance: gen 0 {} -> gen {} {}",
                s(acc["baseline"]["score"].as_f64()),
                display::text(acc["champion"]["genid"].as_str().unwrap_or("?")),
                s(acc["champion"]["score"].as_f64())
            );
        }
        if summary.status == lifecycle::RunStatus::BudgetExhausted {
            println!(
                "  the budget is spent: the run stopped before a generation it could not pay for"
            );
        }
    }
    Ok(if summary.status == lifecycle::RunStatus::Complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A run (or retry) stopped by a signal says how to resume and exits as the shell reports
/// that signal (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP); `again` is the command
/// that resumes it.
fn stopped_error(
    e: lifecycle::RunError,
    stopped_by: Option<evaluator_harbor::signals::Stop>,
    dir: &Path,
    again: &str,
) -> CliError {
    let Some(stop) = stopped_by else {
        return e.into();
    };
    CliError {
        code: stop.exit_code(),
        ..CliError::usage(e.what).at(dir.display().to_string())
    }
    .hint(format!(
        "nothing is half-written; `{again}` resumes where it stopped"
    ))
}

/// What a run with these arguments would still do, from the workspace's archive: the
/// generations up to the limit that are not finished, and the framework's own
/// evaluations (genesis, anchors) not yet certified.
struct Plan {
    /// The last generation the run goes to (`--max-generations`, else the recipe's).
    limit: u32,
    /// The highest generation the archive has a row for.
    existing: u64,
    /// Generations in `1..=limit` with a child not finished (never started or
    /// interrupted): each is run, or resumed, whole in the estimate.
    to_run: u64,
    children: u64,
    /// Genesis and sealed-anchor trials still to run.
    framework_trials: u64,
}

fn plan(ws: &Workspace, a: &RunArgs, state: &State) -> Plan {
    let r = &ws.recipe;
    let limit = a.max_generations.unwrap_or(r.experiment.max_generations);
    let children = a
        .children_per_gen
        .unwrap_or(r.experiment.children_per_gen)
        .max(1);
    let unfinished = |g: u32| {
        (0..children).any(|i| {
            let genid = lifecycle::genid(g, i, children);
            lifecycle::child::next_step(state, &genid) != lifecycle::child::Next::Done
        })
    };
    let to_run = (1..=limit).filter(|g| unfinished(*g)).count() as u64;
    let existing = state
        .rows
        .iter()
        .filter_map(|r| evolve_archive::event::genid_generation(&r.genid))
        .max()
        .unwrap_or(0);
    let reps = ws.task_set.repetitions as u64;
    let gate = ws.tasks_per_evaluation() as u64;
    let sealed = ws.task_set.split.sealed.len() as u64 * reps;
    let anchored = |genid: &str| {
        state.row(genid).is_some_and(|row| {
            row.anchors
                .iter()
                .any(|x| x.outcome() == Some("benchmark_complete"))
        })
    };
    let row0 = state.row("0");
    let genesis = if row0.is_some_and(|r| r.evaluation.is_some()) {
        0
    } else {
        gate * reps
    };
    let gen0_anchor = if anchored("0") { 0 } else { sealed };
    // The champion's final anchor: after new generations (a new champion may need one),
    // or when the current champion has none yet.
    let unanchored_champion = state.champion.as_ref().is_some_and(|c| !anchored(&c.genid));
    let final_anchor = if r.evaluator.anchor.final_ && (to_run > 0 || unanchored_champion) {
        sealed
    } else {
        0
    };
    Plan {
        limit,
        existing,
        to_run,
        children: u64::from(children),
        framework_trials: genesis + gen0_anchor + final_anchor,
    }
}

fn dry_run(ws: &Workspace, a: &RunArgs) -> CliResult {
    let r = &ws.recipe;
    if let Ok(sb) = sandbox_for(false) {
        crate::model::note_missing_model(&sb, r, ws.root());
    }
    let state = read_state(ws);
    let p = plan(ws, a, &state);
    let kids = p.children;
    let reps = ws.task_set.repetitions as u64;
    let gate = ws.tasks_per_evaluation() as u64;
    let trials = p.to_run * kids * gate * reps;
    let per_trial = state
        .row("0")
        .and_then(|r| r.evaluation.as_ref())
        .and_then(|e| {
            let t = e.stamp.get("trials").and_then(Value::as_u64)?;
            (t > 0).then(|| e.cost_usd() / t as f64)
        });
    let estimate = per_trial.map(|c| c * (trials + p.framework_trials) as f64);
    let agent = ws.engine.agent_model.as_ref();
    // The most one answer's completion can cost: the policy caps its tokens.
    let answer_cap = agent.map(|m| m.prices.usd(0, u64::from(m.max_tokens)));
    if a.json {
        print_json(&json!({
            "generations": p.to_run, "max_generations": p.limit, "generations_in_workspace": p.existing,
            "limit_reached": p.to_run == 0,
            "children_per_gen": kids, "tasks_per_evaluation": gate, "repetitions": reps,
            "candidate_trials": trials, "genesis_and_anchor_trials": p.framework_trials,
            "cost_per_trial_usd": per_trial, "estimated_cost_usd": estimate,
            "spent_usd": state.spent(), "budget_usd": r.experiment.budget_usd,
            "agent_model": agent.map(|m| json!({
                "models": m.allowed_models, "max_tokens": m.max_tokens,
                "input_per_mtok_usd": m.prices.input_per_mtok_usd,
                "output_per_mtok_usd": m.prices.output_per_mtok_usd,
                "max_completion_usd_per_call": answer_cap,
                "included_in_cost_per_trial": true,
            })),
            "harbor": ws.engine.harbor.as_ref().map(harbor_json),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "pre-flight estimate for {}:",
        display::text(&ws.root().display().to_string())
    );
    if p.to_run == 0 {
        println!(
            "  0 more generations: the workspace has {} and runs up to gen {} ({}); \
             `evolve run {} --max-generations N` runs up to gen N (a total, not N more)",
            p.existing,
            p.limit,
            if a.max_generations.is_some() {
                "--max-generations"
            } else {
                "the recipe's max_generations"
            },
            display::text(&ws_word(&a.dir))
        );
    } else {
        println!(
            "  {} generation(s) to run (the workspace has {}; up to gen {}) × {kids} child(ren) × {gate} task(s) × {reps} repetition(s) = {trials} candidate trial(s)",
            p.to_run, p.existing, p.limit
        );
    }
    println!(
        "  plus {} genesis and sealed-anchor trial(s)",
        p.framework_trials
    );
    match (per_trial, estimate) {
        (Some(p), Some(e)) => {
            println!("  measured cost per trial ${p:.6} (gen/0): estimated ${e:.4} in evaluations")
        }
        _ => println!("  cost per trial: not measured yet (gen/0 has not been evaluated)"),
    }
    if let (Some(m), Some(cap)) = (agent, answer_cap) {
        println!(
            "  the agent's model calls go through the host's gateway, charged to the budget and part of the cost per trial: {} (allowed: {}), at most {} completion tokens per answer (${cap:.6}) plus its prompt at ${}/Mtok",
            display::text(m.default_model()),
            display::text(&m.allowed_models.join(", ")),
            m.max_tokens,
            m.prices.input_per_mtok_usd
        );
    }
    if let Some(h) = &ws.engine.harbor {
        print_harbor(h);
    }
    println!(
        "  spent so far ${:.4}; budget ${:.4}",
        state.spent(),
        r.experiment.budget_usd
    );
    Ok(ExitCode::SUCCESS)
}

/// The frozen harbor settings for `--json`: a kwarg mapping as the list of its keys (its
/// values may be secrets).
fn harbor_json(h: &crate::workspace::harbor::HarborContract) -> Value {
    let mut options = serde_json::to_value(&h.options).unwrap_or_default();
    for key in ["environment_kwargs", "agent_kwargs"] {
        if let Some(m) = options.get(key).and_then(Value::as_object) {
            let keys: Vec<&String> = m.keys().collect();
            options[key] = json!(keys);
        }
    }
    json!({"options": options, "model_path": h.model_path})
}

/// The frozen harbor settings, one line per field set, with the flag each becomes. A
/// kwarg's value is not shown (it may be a secret): its key is.
fn print_harbor(h: &crate::workspace::harbor::HarborContract) {
    use evaluator_harbor::engine::harbor::HarborOptions;
    let o = &h.options;
    let path = match h.model_path.as_str() {
        "gateway" => "gateway (the host's model gateway, metered by the host)",
        "agent_env" => {
            "agent_env (host variables passed with --ae; the agent holds the key and Harbor reports its spend)"
        }
        _ => "none (the evaluation has no agent model)",
    };
    println!("  harbor run settings (frozen at init), model path: {path}");
    let keys = |m: &std::collections::BTreeMap<String, String>| {
        m.keys().cloned().collect::<Vec<_>>().join(", ")
    };
    let fields: Vec<(&str, Option<String>)> = vec![
        ("environment", o.environment.clone()),
        ("n_concurrent", o.n_concurrent.map(|n| n.to_string())),
        ("max_retries", o.max_retries.map(|n| n.to_string())),
        (
            "timeout_multiplier",
            o.timeout_multiplier.map(|m| m.to_string()),
        ),
        (
            "agent_setup_timeout_multiplier",
            o.agent_setup_timeout_multiplier.map(|m| m.to_string()),
        ),
        (
            "environment_build_timeout_multiplier",
            o.environment_build_timeout_multiplier
                .map(|m| m.to_string()),
        ),
        ("model", o.model.clone()),
        (
            "environment_kwargs",
            (!o.environment_kwargs.is_empty())
                .then(|| format!("keys {}", keys(&o.environment_kwargs))),
        ),
        (
            "agent_kwargs",
            (!o.agent_kwargs.is_empty()).then(|| format!("keys {}", keys(&o.agent_kwargs))),
        ),
        (
            "extra_args",
            (!o.extra_args.is_empty()).then(|| o.extra_args.join(" ")),
        ),
    ];
    for (field, value) in fields {
        if let Some(v) = value {
            println!(
                "    {field} ({}): {}",
                HarborOptions::flag_of(field),
                display::text(&v)
            );
        }
    }
}

/// The certified state, read without the lock or the secret key (the full audit).
fn read_state(ws: &Workspace) -> State {
    let report = audit(ws);
    let spent = report.rows.iter().map(|r| r.cost_usd).sum();
    lifecycle::State {
        rows: report.rows,
        eligibility: report.eligibility,
        champion: report.champion,
        spent,
        selections: Default::default(),
        playbook: Vec::new(),
    }
}

fn audit(ws: &Workspace) -> evolve_archive::Report {
    Evidence::of_workspace(ws).audit()
}

pub fn status_cmd(a: DirArgs) -> CliResult {
    within(a.dir.clone(), a, status)
}

fn status(a: DirArgs) -> CliResult {
    let ws = Workspace::open(&a.dir)?;
    let report = audit(&ws);
    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for r in &report.rows {
        *counts.entry(r.display_status()).or_default() += 1;
    }
    let spent: f64 = report.rows.iter().map(|r| r.cost_usd).sum();
    let generations = report
        .rows
        .iter()
        .filter_map(|r| evolve_archive::event::genid_generation(&r.genid))
        .max()
        .unwrap_or(0);
    let limit = ws.recipe.experiment.max_generations;
    if a.json {
        print_json(&json!({
            "experiment": ws.experiment_id, "workspace": ws.root(), "generations": generations,
            "max_generations": limit, "limit_reached": u64::from(limit) <= generations,
            "by_status": counts, "champion": report.champion, "spent_usd": spent,
            "budget_usd": ws.recipe.experiment.budget_usd, "integrity": report.verdict(), "findings": report.findings.len(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "experiment {} ({})",
        display::text(&ws.experiment_id),
        display::text(&ws.root().display().to_string())
    );
    println!(
        "  generations: {}",
        display::text(&generations_text(generations, limit, &a.dir))
    );
    let list: Vec<String> = counts
        .iter()
        .map(|(k, v)| format!("{} {v}", display::text(k)))
        .collect();
    println!("  by status: {}", list.join(", "));
    match &report.champion {
        Some(c) => println!(
            "  champion: gen {} (score {:.4})",
            display::text(&c.genid),
            c.score
        ),
        None => println!("  champion: none yet"),
    }
    println!(
        "  spent ${spent:.4} of ${:.4}",
        ws.recipe.experiment.budget_usd
    );
    if !report.ok() {
        println!(
            "  integrity: {} finding(s); run `evolve verify`",
            report.findings.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How far the workspace is, against the recipe's `max_generations` (`limit`): what
/// `evolve run` without `--max-generations` will do, and how to go further once it does
/// nothing more.
fn generations_text(generations: u64, limit: u32, dir: &Path) -> String {
    let ws = ws_word(dir);
    if generations < u64::from(limit) {
        format!("{generations} of {limit} (`evolve run {ws}` continues up to gen {limit})")
    } else {
        format!(
            "{generations}; the recipe's limit (max_generations {limit}) is reached: \
             `evolve run {ws} --max-generations N` runs up to gen N"
        )
    }
}

/// Number of changed paths per genid, from generation events.
fn changes_by_genid(events: &[evolve_archive::Event]) -> std::collections::HashMap<String, usize> {
    events
        .iter()
        .filter(|e| e.event_type == evolve_archive::types::GENERATION)
        .filter_map(|e| {
            let n = e
                .body
                .get("changes")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Some((e.genid.clone()?, n))
        })
        .collect()
}

pub fn log_cmd(a: DirArgs) -> CliResult {
    within(a.dir.clone(), a, log)
}

fn log(a: DirArgs) -> CliResult {
    let ws = Workspace::open(&a.dir)?;
    let report = audit(&ws);
    let events = evidence::events(&ws);
    let changes = changes_by_genid(&events);
    let recipes = lifecycle::agent_driver::recipe_digests(&ws, &events);
    let rows: Vec<Value> = report
        .rows
        .iter()
        .map(|r| {
            json!({
                "genid": r.genid, "parent": r.parent, "status": r.display_status(), "score": r.score(),
                "verdict": r.verdict, "changed_paths": changes.get(&r.genid).copied().unwrap_or(0),
                "eligible": report.eligibility.iter().any(|e| e.genid == r.genid && e.eligible),
                "champion": report.champion.as_ref().is_some_and(|c| c.genid == r.genid),
                "recipe_sha256": evolve_archive::event::genid_generation(&r.genid).and_then(|g| recipes.get(&g)),
            })
        })
        .collect();
    if a.json {
        print_json(&Value::Array(rows));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<8} {:<8} {:<22} {:>8} {:<8} {:>7}",
        "gen", "parent", "status", "score", "verdict", "changed"
    );
    for r in &rows {
        // Every column but the numbers is archive text an operator could have chosen.
        let s =
            |k: &str| display::text(r.get(k).and_then(Value::as_str).unwrap_or("-")).into_owned();
        let score = r
            .get("score")
            .and_then(Value::as_f64)
            .map_or("-".into(), |v| format!("{v:.4}"));
        let mark = if r["champion"] == json!(true) {
            " *"
        } else {
            ""
        };
        println!(
            "{:<8} {:<8} {:<22} {:>8} {:<8} {:>7}{mark}",
            s("genid"),
            s("parent"),
            s("status"),
            score,
            s("verdict"),
            r["changed_paths"]
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn show_cmd(a: GenArgs) -> CliResult {
    within(a.workspace.clone(), a, show)
}

fn show(a: GenArgs) -> CliResult {
    let ws = Workspace::open(&a.workspace)?;
    let report = audit(&ws);
    let row = report
        .rows
        .iter()
        .find(|r| r.genid == a.genid)
        .ok_or_else(|| {
            CliError::usage(format!("generation `{}` is not in the archive", a.genid))
                .hint("`evolve log` lists the generations")
        })?;
    let reasons = report
        .eligibility
        .iter()
        .find(|e| e.genid == a.genid)
        .map(|e| e.reasons.iter().map(|r| r.to_string()).collect::<Vec<_>>())
        .unwrap_or_default();
    let all = evidence::events(&ws);
    let recipe = evolve_archive::event::genid_generation(&a.genid)
        .and_then(|g| lifecycle::agent_driver::recipe_digests(&ws, &all).remove(&g));
    let events: Vec<Value> = all
        .iter()
        .filter(|e| e.genid.as_deref() == Some(a.genid.as_str()))
        .map(evolve_archive::Event::to_value)
        .collect();
    let run_dir = ws.paths.run_dir(&a.genid);
    let mut logs = serde_json::Map::new();
    for stage in crate::sandbox::ALL_STAGES {
        let name = crate::sandbox::stage_name(stage);
        let dir = run_dir.join(name);
        if !dir.is_dir() {
            continue;
        }
        let read = |f: &str| {
            std::fs::read(dir.join(f))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default()
        };
        let result: Value = serde_json::from_str(&read("result.json")).unwrap_or(Value::Null);
        logs.insert(name.into(), json!({"dir": dir, "result": result, "stdout": read("operator.stdout.log"), "stderr": read("operator.stderr.log")}));
    }
    if a.json {
        print_json(
            &json!({"row": row, "eligible": reasons.is_empty(), "ineligible_because": reasons, "events": events, "stages": logs, "tag": ws.tag_commit(&a.genid), "recipe_sha256": recipe}),
        );
        return Ok(ExitCode::SUCCESS);
    }
    // Everything below but the numbers and the digests is text an operator, a script or
    // the candidate tree chose (reasons, verdicts, annotations, events, logs): each piece
    // is escaped, so none can print a line of its own or reorder the ones around it.
    let t = |s: &str| display::text(s).into_owned();
    println!(
        "generation {} (parent {})",
        t(&row.genid),
        t(row.parent.as_deref().unwrap_or("-"))
    );
    println!(
        "  status: {}  score: {}  verdict: {}",
        t(&row.display_status()),
        lifecycle::fmt_score(row.score()),
        t(row.verdict.as_deref().unwrap_or("-"))
    );
    if let Some(reason) = &row.reason {
        println!("  reason: {}", t(reason));
    }
    println!(
        "  tag gen/{}: {}",
        t(&row.genid),
        ws.tag_commit(&row.genid).unwrap_or_else(|| "(none)".into())
    );
    if let Some(sha) = &recipe {
        println!("  recipe: {sha}");
    }
    if reasons.is_empty() {
        println!("  eligible as a parent");
    } else {
        let reasons: Vec<String> = reasons.iter().map(|r| t(r)).collect();
        println!("  not an eligible parent: {}", reasons.join("; "));
    }
    for a in &row.anchors {
        println!(
            "  sealed anchor: {} score {}",
            t(a.outcome().unwrap_or("-")),
            lifecycle::fmt_score(a.score())
        );
    }
    if !row.annotations.is_empty() {
        // serde_json escapes C0 controls but leaves DEL, C1 and bidi controls raw.
        let annotations = Value::Object(row.annotations.clone()).to_string();
        println!("  annotations: {}", t(&annotations));
    }
    println!("  events:");
    for e in &events {
        println!(
            "    #{} {} {}",
            e["seq"],
            t(e["type"].as_str().unwrap_or("?")),
            summarize_body(&e["body"])
        );
    }
    for (stage, l) in &logs {
        println!("  {stage}: {}", t(&l["result"].to_string()));
        let err = l["stderr"].as_str().unwrap_or("").trim();
        if !err.is_empty() {
            // The last five lines, each escaped on its own: a carriage return or an
            // escape sequence in one cannot overwrite another.
            let last: Vec<_> = display::lines(err).collect();
            let last = &last[last.len().saturating_sub(5)..];
            println!("    stderr: {}", last.join("\n            "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn summarize_body(body: &Value) -> String {
    let Some(m) = body.as_object() else {
        return String::new();
    };
    let mut parts = Vec::new();
    for k in [
        "status",
        "outcome",
        "purpose",
        "score",
        "verdict",
        "parent",
        "reason",
        "failure_stage",
    ] {
        if let Some(v) = m.get(k).filter(|v| !v.is_null()) {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            // Cut first, then escape: an escape is never cut in half.
            let text = if text.len() > 120 {
                format!(
                    "{}…",
                    &text[..text.char_indices().nth(117).map_or(text.len(), |(i, _)| i)]
                )
            } else {
                text
            };
            parts.push(format!("{k}={}", display::text(&text)));
        }
    }
    parts.join(" ")
}

pub fn repair_cmd(a: DirArgs) -> CliResult {
    within(a.dir.clone(), a, repair)
}

fn repair(a: DirArgs) -> CliResult {
    let ws = Workspace::open(&a.dir)?;
    let actions = lifecycle::repair::repair(&ws)?;
    if a.json {
        print_json(&json!({"actions": actions}));
    } else {
        // An action names paths in the workspace (a preserved worktree's edits).
        for line in &actions {
            println!("{}", display::text(line));
        }
        println!(
            "repair: {}",
            if actions.is_empty() {
                "healthy".to_string()
            } else {
                format!("{} item(s)", actions.len())
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `evolve checkout`: the commit a certified archive row records (never a tag, which
/// could have been moved) written into a new directory.
pub fn checkout_cmd(a: CheckoutArgs) -> CliResult {
    within(a.workspace.clone(), a, checkout)
}

fn checkout(a: CheckoutArgs) -> CliResult {
    let ws = Workspace::open(&a.workspace)?;
    let report = audit(&ws);
    let genid = if a.genid == "champion" {
        let champion = report.champion.as_ref().ok_or_else(|| {
            CliError::usage("the workspace has no champion yet")
                .hint("`evolve status` shows the generations; check out one by its id")
        })?;
        champion.genid.clone()
    } else {
        a.genid.clone()
    };
    let row = report
        .rows
        .iter()
        .find(|r| r.genid == genid)
        .ok_or_else(|| {
            CliError::usage(format!(
                "generation `{genid}` is not in the certified archive"
            ))
            .hint("`evolve log` lists the generations")
        })?;
    let commit = row
        .commit
        .as_deref()
        .and_then(|c| evolve_snapshot::Oid::from_str(c).ok())
        .ok_or_else(|| {
            CliError::usage(format!(
                "generation `{genid}` has no committed tree (it stopped before its snapshot)"
            ))
        })?;
    ws.store.materialize(commit, &a.dest).map_err(|e| {
        CliError::usage(format!("cannot write generation `{genid}`: {e}"))
            .at(a.dest.display().to_string())
    })?;
    if a.json {
        print_json(&json!({"genid": genid, "commit": commit.to_string(), "dir": a.dest}));
    } else {
        println!(
            "generation {} (commit {}) written to {}",
            display::text(&genid),
            &commit.to_string()[..12],
            display::text(&a.dest.display().to_string())
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn retry_cmd(a: GenArgs) -> CliResult {
    within(a.workspace.clone(), a, retry)
}

fn retry(a: GenArgs) -> CliResult {
    let ws = Workspace::open(&a.workspace)?;
    let fuel = ws.recipe.operators.values().any(|b| b.fuel.is_some());
    let sb = sandbox_for(fuel)?;
    let verbose = !a.json;
    let rt = runtime()?;
    let watch = super::progress::watch(&rt, sb.cancel_token())?;
    let outcome = rt
        .block_on(async {
            let driver = Driver::open(ws, sb, verbose).await?;
            driver.retry(&a.genid).await
        })
        .map_err(|e| {
            let again = format!(
                "evolve retry {} -w {}",
                display::shell(&a.genid),
                ws_word(&a.workspace)
            );
            stopped_error(e, watch.stopped_by(), &a.workspace, &again)
        })?;
    if a.json {
        print_json(&json!({"genid": a.genid, "outcome": outcome}));
    } else {
        println!(
            "retry gen {}: {}",
            display::text(&a.genid),
            display::text(&outcome)
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args)]
pub struct DemoArgs {
    /// Where to create (or continue) the demo workspace.
    #[arg(default_value = "evolve-demo")]
    pub dir: PathBuf,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `evolve demo`: the offline default experiment in one command (built-in `local_demo`
/// recipe: demo seed, local engine, no Docker, no network, no API key). Creates the
/// workspace on first use and runs (or resumes) it.
pub fn demo_cmd(a: DemoArgs) -> CliResult {
    let fresh = !a.dir.exists();
    if fresh {
        let args = InitArgs {
            dir: a.dir.clone(),
            recipe: "local_demo".into(),
            seed: None,
            tasks: None,
            json: a.json,
            check: false,
        };
        let done = initialize(&args)?;
        if !a.json {
            print_init(&args, &done, false)?;
        }
    }
    let code = run_cmd(RunArgs {
        dir: a.dir.clone(),
        max_generations: None,
        children_per_gen: None,
        dry_run: false,
        quiet: false,
        json: a.json,
        driver: None,
        driver_config: "{}".into(),
    })?;
    if !a.json {
        let d = display::text(&ws_word(&a.dir)).into_owned();
        println!(
            "explore it: evolve log {d} | evolve show 1 -w {d} | evolve verify {d} | evolve checkout champion best -w {d}"
        );
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_get_the_workspace_where_each_command_takes_it() {
        let dir = Path::new("my ws");
        let hint = "run `evolve repair`: then `evolve run --quiet` resumes; \
                    `evolve retry 0`, `evolve show GENID`, `evolve log`";
        assert_eq!(
            name_workspace(hint, dir),
            "run `evolve repair 'my ws'`: then `evolve run 'my ws' --quiet` resumes; \
             `evolve retry 0 -w 'my ws'`, `evolve show GENID -w 'my ws'`, `evolve log 'my ws'`"
        );
        for kept in [
            "`evolve run other`",
            "`evolve retry 3 -w other`",
            "`evolve verify --bundle B`",
            "`evolve init DIR --recipe RECIPE`",
            "evolve run outside backticks",
        ] {
            assert_eq!(name_workspace(kept, dir), kept);
        }
        assert_eq!(
            name_workspace("`evolve repair`", Path::new(".")),
            "`evolve repair`"
        );
    }
}
