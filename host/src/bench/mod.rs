//! `evolve bench`: the framework's own overhead, measured through its real code paths.
//!
//! The same code backs `cargo bench -p evolve --bench overhead` and `--bench
//! operator_call`. It measures:
//!
//! * RSIHub's Table 5 operations, with its names, each with median and P95 beside
//!   RSIHub's published median ([`table5`]);
//! * one operator invocation: cold, cached in memory, cached on disk, against a
//!   `python3` subprocess ([`invoke`]);
//! * whole generations through the driver with the cheapest built-in operators and a
//!   no-op evaluation engine, split into operator, evaluation and framework time
//!   ([`generation`]);
//! * one trivial local trial run on the host and in its bubblewrap jail, alternated: what
//!   containing the agent costs per trial ([`trial`]);
//! * a chat call straight to a scripted upstream on 127.0.0.1 and through the model
//!   gateway, alternated, and 200 concurrent calls through the gateway whose charges
//!   must add up to the budget pool's spend ([`gateway`]).
//!
//! Numbers are printed, never asserted: timing depends on the machine and its load.

pub mod coder;
pub mod fixture;
pub mod gateway;
pub mod generation;
pub mod invoke;
pub mod machine;
pub mod stats;
pub mod table5;
pub mod terminal;
pub mod trial;

use crate::command::{CliError, CliResult, print_json};
use crate::sandbox::{Sandbox, SandboxConfig};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

/// Every Table 5 operation at least this many times below RSIHub's median: a guard now,
/// not a target to push past (docs/benchmarks.md, "Goals").
pub const GOAL_RATIO: f64 = 10.0;
/// A cached operator invocation costs at most this (median, ms).
pub const GOAL_CACHED_MS: f64 = 0.5;
/// The framework's own time per generation, excluding operators and evaluation (median,
/// ms): a guard, like [`GOAL_RATIO`].
pub const GOAL_FRAMEWORK_MS: f64 = 50.0;

#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  evolve bench\n  evolve bench --json --iterations 5\n\n\
    Build with --release (`cargo run --release -- bench`): a debug build is many times slower."
)]
pub struct BenchArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Samples per measurement (cached invocations take 10×; generations run this many).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub iterations: u32,
    /// Where the scratch workspaces go (a temporary directory inside it, removed at the
    /// end); the system temporary directory by default. Put it on the disk you will run on.
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

/// A goal and whether this run met it.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    pub goal: String,
    pub met: bool,
    pub measured: String,
}

/// Everything one `evolve bench` measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub machine: machine::Machine,
    pub iterations: u32,
    pub table5: Vec<table5::Row>,
    /// Creating the target's 1,000 files (in 40 directories) in a new directory on the
    /// work disk with plain writes, right before the candidate worktree row: the floor
    /// under any operation that writes the target out (as that row does), which on ext4
    /// depends on how many files were deleted nearby in the last minutes.
    pub file_creation_floor: stats::Stat,
    pub operator_invocation: invoke::Invocation,
    pub generation: generation::Generations,
    pub trial_startup: trial::TrialStartup,
    pub model_gateway: gateway::GatewayOverhead,
    pub goals: Vec<Goal>,
}

/// `evolve bench`. Call it from `main` before any other thread starts: it points
/// `EVOLVE_KEY_DIR` at its scratch directory so the benchmark's signing keys never land
/// in the user's key directory.
pub fn run(args: BenchArgs) -> CliResult {
    let scratch = match &args.work_dir {
        Some(dir) => tempfile::Builder::new()
            .prefix("evolve-bench")
            .tempdir_in(dir),
        None => tempfile::Builder::new().prefix("evolve-bench").tempdir(),
    }
    .map_err(|e| {
        let at = args.work_dir.as_ref().map(|d| d.display().to_string());
        let err = CliError::usage(format!(
            "cannot create the benchmark's scratch directory: {e}"
        ));
        match at {
            Some(d) => err.at(d).hint("--work-dir must be a writable directory"),
            None => err,
        }
    })?;
    // SAFETY: called from `main` before any other thread exists (see above), so nothing
    // reads the environment concurrently.
    unsafe { std::env::set_var("EVOLVE_KEY_DIR", scratch.path().join("keys")) };
    if !args.json {
        eprintln!(
            "evolve bench: measuring in {} ...",
            scratch.path().display()
        );
    }
    let report = match measure(scratch.path(), args.iterations as usize) {
        Ok(r) => r,
        Err(e) => {
            // Keep what failed for inspection: the workspaces hold every log.
            let kept = scratch.keep();
            return Err(CliError {
                what: format!("the benchmark failed: {e}"),
                place: Some(kept.display().to_string()),
                hint: Some(
                    "the scratch directory is kept for inspection; remove it when done".into(),
                ),
                code: 1,
                details: Vec::new(),
            });
        }
    };
    if args.json {
        print_json(&serde_json::to_value(&report).unwrap_or_default());
    } else {
        print_report(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Run every measurement in `work` (an empty directory), `n` samples each.
pub fn measure(work: &std::path::Path, n: usize) -> Result<Report, String> {
    let rt = crate::command::runtime().map_err(|e| e.what)?;
    let sb = Sandbox::new(SandboxConfig::default())
        .map_err(|e| format!("cannot start the sandbox: {e}"))?;
    let recipe_dir = work.join("experiment");
    fixture::experiment(&recipe_dir, table5::TARGET_FILES)?;
    let (rows, file_creation_floor) = table5::measure(&rt, &sb, work, &recipe_dir, n)?;
    let run_ws = table5::init_workspace(&rt, &sb, &recipe_dir, &work.join("ws-run"))?;
    let generation = generation::measure(&rt, &sb, &run_ws, u32::try_from(n).unwrap_or(u32::MAX))?;
    let invocation_dir = work.join("invoke");
    let operator_invocation = invoke::measure(&rt, &invocation_dir, n)?;
    let trial_startup = trial::measure(&rt, &work.join("trial"), n)?;
    // Cheap calls: ten times the samples, as for cached invocations.
    let model_gateway = gateway::measure(&rt, 10 * n)?;
    let mut goals = goals(&rows, &operator_invocation, &generation);
    goals.push(Goal {
        goal: format!(
            "a contained local trial at most {:.0} ms slower than an unconfined one (median)",
            trial::GOAL_ADDED_MS
        ),
        met: trial_startup
            .added_ms
            .is_some_and(|a| a <= trial::GOAL_ADDED_MS),
        measured: match (trial_startup.added_ms, &trial_startup.why) {
            (Some(a), _) => format!("{a:.2} ms added"),
            (None, why) => format!("not measured: {}", why.as_deref().unwrap_or("no sandbox")),
        },
    });
    Ok(Report {
        machine: machine::Machine::read(),
        iterations: u32::try_from(n).unwrap_or(u32::MAX),
        table5: rows,
        file_creation_floor,
        operator_invocation,
        generation,
        trial_startup,
        model_gateway,
        goals,
    })
}

fn goals(rows: &[table5::Row], inv: &invoke::Invocation, g: &generation::Generations) -> Vec<Goal> {
    let short: Vec<String> = rows
        .iter()
        .filter(|r| r.ratio < GOAL_RATIO)
        .map(|r| format!("{} {}", r.operation, ratio(r.ratio)))
        .collect();
    let met = rows.len() - short.len();
    vec![
        Goal {
            goal: format!(
                "every Table 5 operation at least {GOAL_RATIO:.0}× below RSIHub's median"
            ),
            met: short.is_empty(),
            measured: match short.is_empty() {
                true => format!("{met} of {}", rows.len()),
                false => format!("{met} of {}; short: {}", rows.len(), short.join(", ")),
            },
        },
        Goal {
            goal: format!("cached operator invocation at most {GOAL_CACHED_MS} ms (median)"),
            met: inv.cached.median_ms <= GOAL_CACHED_MS,
            measured: format!("{:.3} ms", inv.cached.median_ms),
        },
        Goal {
            goal: format!(
                "framework overhead per generation, excluding operators and evaluation, at most {GOAL_FRAMEWORK_MS:.0} ms (median)"
            ),
            met: g.framework.median_ms <= GOAL_FRAMEWORK_MS,
            measured: format!(
                "{:.2} ms, of which about {:.2} ms waits for {:.0} fdatasyncs",
                g.framework.median_ms,
                g.framework.median_ms - framework_less_syncs(g),
                g.archive_events_per_generation * 2.0
            ),
        },
    ]
}

/// The framework's median time per generation less its estimated wait for durable
/// writes (events × 2 × the disk's median fdatasync): the part the code controls, given
/// that every event is synced before the next step.
pub fn framework_less_syncs(g: &generation::Generations) -> f64 {
    (g.framework.median_ms - g.archive_events_per_generation * 2.0 * g.fdatasync.median_ms).max(0.0)
}

fn ratio(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.1}×")
    } else {
        format!("{x:.0}×")
    }
}

fn ms(v: f64) -> String {
    if v < 1.0 {
        format!("{v:.3} ms")
    } else {
        format!("{v:.2} ms")
    }
}

/// The Table 5 rows as a text table.
pub fn print_table5(rows: &[table5::Row]) {
    println!(
        "{:<46} {:>11} {:>11} {:>14} {:>8}",
        "RSIHub Table 5 operation", "median", "P95", "RSIHub median", "ratio"
    );
    for r in rows {
        println!(
            "{:<46} {:>11} {:>11} {:>11.0} ms {:>8}",
            r.operation,
            ms(r.stat.median_ms),
            ms(r.stat.p95_ms),
            r.rsihub_median_ms,
            ratio(r.ratio)
        );
    }
}

/// The operator invocation costs as a text table.
pub fn print_invocation(inv: &invoke::Invocation) {
    println!("operator invocation ({}):", inv.operator);
    let line = |name: &str, s: &stats::Stat| {
        println!(
            "  {name:<50} {:>11} {:>11}  (n={})",
            ms(s.median_ms),
            ms(s.p95_ms),
            s.samples
        )
    };
    println!("  {:<50} {:>11} {:>11}", "", "median", "P95");
    line("cold: compile + instantiate + call", &inv.cold);
    line("cached in memory: instantiate + call", &inv.cached);
    line(
        "on-disk cache: load .cwasm + instantiate + call",
        &inv.disk_cache,
    );
    match (&inv.python_subprocess, inv.cached_vs_python) {
        (Some(p), Some(x)) => {
            line("python3 -c pass (a subprocess doing nothing)", p);
            println!("  a cached call is {x:.0}× cheaper than starting python3");
        }
        _ => println!(
            "  {:<50} {:>11}",
            "python3 -c pass (a subprocess doing nothing)", "n/a"
        ),
    }
}

fn print_generation(g: &generation::Generations) {
    println!(
        "whole generation ({} generations, 1,000-file target, cheapest built-in operators, no-op evaluator):",
        g.generations
    );
    println!("  {:<50} {:>11} {:>11}", "", "median", "P95");
    let line = |name: &str, s: &stats::Stat| {
        println!("  {name:<50} {:>11} {:>11}", ms(s.median_ms), ms(s.p95_ms))
    };
    line("end to end", &g.total);
    line(
        &format!(
            "inside operator calls ({:.1} per generation)",
            g.operator_calls_per_generation
        ),
        &g.operators,
    );
    line(
        "inside the evaluation (fresh checkout for the agent, no-op engine)",
        &g.evaluation,
    );
    line("framework (the rest)", &g.framework);
    println!("  generations per second: {:.1}", g.generations_per_second);
    println!(
        "  durable writes: {:.1} archive events per generation, 2 fdatasyncs each; one fdatasync here: {} median, {} P95",
        g.archive_events_per_generation,
        ms(g.fdatasync.median_ms),
        ms(g.fdatasync.p95_ms)
    );
    println!(
        "  framework less its fdatasync waits (estimate): {}",
        ms(framework_less_syncs(g))
    );
}

fn print_trial_startup(t: &trial::TrialStartup) {
    println!("one trivial local trial (oracle solve.sh + one-line verifier), alternated:");
    println!("  {:<50} {:>11} {:>11}", "", "median", "P95");
    let line = |name: &str, s: &stats::Stat| {
        println!("  {name:<50} {:>11} {:>11}", ms(s.median_ms), ms(s.p95_ms))
    };
    line("unconfined (on the host, process group)", &t.unconfined);
    match (&t.contained, t.added_ms) {
        (Some(c), Some(a)) => {
            line("contained (bubblewrap jail, dedicated uid)", c);
            println!("  added per trial by the jail: {}", ms(a));
        }
        _ => println!(
            "  contained: not measured ({})",
            t.why.as_deref().unwrap_or("no sandbox")
        ),
    }
}

fn print_gateway(g: &gateway::GatewayOverhead) {
    println!(
        "model gateway (non-streaming chat call, scripted upstream on 127.0.0.1), alternated:"
    );
    println!("  {:<50} {:>11} {:>11}", "", "median", "P95");
    let line = |name: &str, s: &stats::Stat| {
        println!(
            "  {name:<50} {:>11} {:>11}  (n={})",
            ms(s.median_ms),
            ms(s.p95_ms),
            s.samples
        )
    };
    line("straight to the upstream", &g.direct);
    line("through the gateway", &g.through_gateway);
    println!(
        "  added by the gateway: {} median, {} P95",
        ms(g.added_p50_ms),
        ms(g.added_p95_ms)
    );
    let c = &g.concurrent;
    println!(
        "  {} concurrent calls over {} trials sharing one budget pool: {} in all, {} of {} succeeded",
        c.calls,
        c.trials,
        ms(c.wall_ms),
        c.succeeded,
        c.calls
    );
    println!(
        "  budget pool spent ${:.9}; the calls were charged ${:.9}",
        c.spent_usd, c.charged_usd
    );
}

fn print_report(r: &Report) {
    println!("evolve bench: {} samples per measurement", r.iterations);
    println!("machine: {}\n", r.machine.describe());
    print_table5(&r.table5);
    println!(
        "  (the file-creation floor of this disk, under any operation that writes the target out: creating its {} files with plain writes takes {} median, {} P95)",
        table5::TARGET_FILES,
        ms(r.file_creation_floor.median_ms),
        ms(r.file_creation_floor.p95_ms)
    );
    println!();
    print_invocation(&r.operator_invocation);
    println!();
    print_generation(&r.generation);
    println!();
    print_trial_startup(&r.trial_startup);
    println!();
    print_gateway(&r.model_gateway);
    println!("\ngoals:");
    for g in &r.goals {
        let mark = if g.met { "met    " } else { "NOT MET" };
        println!("  [{mark}] {}: {}", g.goal, g.measured);
    }
}
