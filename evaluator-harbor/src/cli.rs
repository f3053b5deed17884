//! `evolve tasks run|check`, mounted by the `evolve` binary.
//!
//! Exit codes: 0 = success (the evaluation's outcome is benchmark_complete / no problems
//! found); 1 = the evaluation finished with another outcome, or check found problems;
//! 2 = usage error (bad directory, agent, engine option); 130 = interrupted.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Subcommand, ValueEnum};

use crate::agent::AgentSpec;
use crate::engine::{ConsoleProgress, Engine, EvaluationPlan, run_evaluation};
use crate::error::Error;
use crate::result::{EvaluationResult, TrialStatus};
use crate::signals::StopSignals;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EngineKind {
    Local,
    Docker,
    Harbor,
}

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Run a Harbor task (or a directory of tasks) directly, outside any workspace.
    #[command(
        after_help = "Examples:\n  evolve tasks run ./tasks --agent oracle\n  evolve tasks run ./tasks --engine docker --repetitions 3 --json"
    )]
    Run {
        /// A task directory, or a directory of task directories.
        dir: PathBuf,
        /// Where the trials run: local (a bubblewrap jail per phase), docker (a container
        /// per trial) or harbor (the harbor CLI).
        #[arg(long, value_enum, default_value = "local")]
        engine: EngineKind,
        /// `oracle` (runs solution/solve.sh) or a target dir holding agent.toml.
        #[arg(long, default_value = "oracle")]
        agent: String,
        /// Trials per task.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repetitions: u32,
        /// Trials run at once (1 to 64).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        n_concurrent: u32,
        /// Minimum fraction of scoreable trials for a benchmark_complete outcome.
        #[arg(long, default_value_t = 1.0)]
        coverage_floor: f64,
        /// Where trial logs go (default: a new directory under the system temp dir).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Run --engine local trials directly on the host, without the bubblewrap sandbox
        /// (the agent then sees the host); recorded in each trial's isolation.
        #[arg(long)]
        unconfined: bool,
        /// Extra `harbor run` arguments for --engine harbor (repeatable), e.g.
        /// `--harbor-arg=--override-cpus=2`; the flags the engine sets itself are refused.
        #[arg(long = "harbor-arg", allow_hyphen_values = true)]
        harbor_args: Vec<String>,
        /// Harbor's environment for --engine harbor (`harbor run -e`): docker (the default),
        /// daytona, modal, e2b, runloop, ... or a module:Class import path.
        #[arg(long = "harbor-env")]
        harbor_env: Option<String>,
        /// Print the evaluation result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Validate a task set and report every problem at once.
    #[command(
        after_help = "Examples:\n  evolve tasks check ./tasks\n  evolve tasks check ./tasks --engine docker --json"
    )]
    Check {
        /// A task directory, or a directory of task directories.
        dir: PathBuf,
        /// The engine the tasks are for: docker and harbor need each task's
        /// environment/Dockerfile (or [environment].docker_image); local needs neither.
        #[arg(long, value_enum, default_value = "local")]
        engine: EngineKind,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Print an error as `evolve: <what> (<where>)` plus its hint.
pub fn report(e: &Error) {
    eprintln!("evolve: {e}");
    if let Some(h) = &e.hint {
        eprintln!("  hint: {h}");
    }
}

impl TasksCommand {
    pub fn execute(self) -> i32 {
        match self {
            TasksCommand::Check { dir, engine, json } => {
                let problems = crate::task::check_task_set(&dir, engine);
                if json {
                    let v: Vec<_> = problems
                        .iter()
                        .map(|p| serde_json::json!({"kind": p.kind, "message": p.message, "location": p.location, "hint": p.hint}))
                        .collect();
                    println!(
                        "{}",
                        serde_json::to_string_pretty(
                            &serde_json::json!({"ok": problems.is_empty(), "problems": v})
                        )
                        .unwrap_or_default()
                    );
                } else {
                    for p in &problems {
                        report(p);
                    }
                    if problems.is_empty() {
                        println!("ok: {} is a valid task set", dir.display());
                    } else {
                        eprintln!("{} problem(s) found", problems.len());
                    }
                }
                i32::from(!problems.is_empty())
            }
            TasksCommand::Run {
                dir,
                engine,
                agent,
                repetitions,
                n_concurrent,
                coverage_floor,
                out,
                unconfined,
                harbor_args,
                harbor_env,
                json,
            } => {
                if !(coverage_floor > 0.0 && coverage_floor <= 1.0) {
                    report(&Error::new(
                        crate::ErrorKind::Usage,
                        format!("--coverage-floor must be in (0, 1], got {coverage_floor}"),
                    ));
                    return 2;
                }
                let agent = match AgentSpec::parse(&agent) {
                    Ok(a) => a,
                    Err(e) => {
                        report(&e);
                        return 2;
                    }
                };
                let out = match out {
                    Some(o) => o,
                    None => match tempfile::Builder::new()
                        .prefix("evolve-tasks-run-")
                        .tempdir()
                    {
                        Ok(d) => d.keep(),
                        Err(e) => {
                            report(&Error::infra(format!(
                                "cannot create an output directory: {e}"
                            )));
                            return 2;
                        }
                    },
                };
                let mut plan = match EvaluationPlan::for_dir(&dir, agent, out.clone()) {
                    Ok(p) => p,
                    Err(e) => {
                        report(&e);
                        return 2;
                    }
                };
                plan.repetitions = repetitions;
                plan.n_concurrent = n_concurrent as usize;
                plan.policy.coverage_floor = coverage_floor;
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        report(&Error::infra(format!(
                            "cannot start the async runtime: {e}"
                        )));
                        return 2;
                    }
                };
                let result = rt.block_on(async move {
                    // Before any trial starts: SIGTERM or SIGHUP must not end the process
                    // with its trials (or their containers) left running.
                    let mut stop = StopSignals::install()
                        .map_err(|e| Error::infra(format!("cannot handle signals: {e}")))?;
                    let engine: Arc<dyn Engine> = match engine {
                        EngineKind::Local => Arc::new(crate::engine::local::LocalEngine {
                            unconfined,
                            ..Default::default()
                        }),
                        EngineKind::Docker => {
                            match crate::engine::docker::DockerEngine::connect().await {
                                Ok(d) => Arc::new(d),
                                Err(e) => return Err(e),
                            }
                        }
                        EngineKind::Harbor => {
                            match crate::engine::harbor::HarborEngine::discover(
                                crate::engine::harbor::HarborOptions {
                                    environment: harbor_env,
                                    extra_args: harbor_args,
                                    ..Default::default()
                                },
                            ) {
                                Ok(h) => Arc::new(h),
                                Err(e) => return Err(e),
                            }
                        }
                    };
                    let progress = ConsoleProgress::default();
                    tokio::select! {
                        r = run_evaluation(engine, &plan, &progress) => Ok(Ok(r)),
                        s = stop.next() => Ok(Err(s)),
                    }
                });
                let r = match result {
                    Ok(Ok(r)) => r,
                    Ok(Err(stop)) => {
                        eprintln!(
                            "evolve: stopped by {}; running trials were stopped and their containers removed",
                            stop.name()
                        );
                        return i32::from(stop.exit_code());
                    }
                    Err(e) => {
                        report(&e);
                        return 2;
                    }
                };
                if json {
                    println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
                } else {
                    print_human(&r, &out);
                }
                i32::from(r.outcome != TrialStatus::BenchmarkComplete)
            }
        }
    }
}

fn print_human(r: &EvaluationResult, out: &std::path::Path) {
    println!("trials ({} engine, agent {}):", r.engine, r.agent);
    for t in &r.trials {
        let reward = t
            .reward
            .map(|x| format!("{x}"))
            .unwrap_or_else(|| "-".into());
        let owner = t
            .timeout_owner
            .map(|o| format!(" ({o:?} timeout)").to_lowercase())
            .unwrap_or_default();
        println!(
            "  {:<32} {:<22} reward={reward:<6} {:>7.2}s{owner}",
            t.trial_name,
            t.status.as_str(),
            t.wall_time_sec
        );
        if let Some(e) = &t.error {
            println!("      {}: {}", e.kind, e.message);
        }
        if let Some(iso) = &t.isolation {
            println!(
                "      isolation: network={} processes={} filesystem={}",
                iso.network, iso.processes, iso.filesystem
            );
        }
    }
    println!("task vector:");
    for (task, v) in &r.task_vector.tasks {
        let cells: Vec<String> = v
            .trials
            .iter()
            .map(|t| match t.reward {
                Some(x) => format!("{x}"),
                None => t.status.as_str().to_string(),
            })
            .collect();
        println!("  {task}: [{}]", cells.join(", "));
    }
    println!(
        "outcome: {} ({}); scoreable {}/{} (coverage {:.3}, floor {})",
        r.outcome.as_str(),
        r.reason,
        r.scoreable_trials,
        r.expected_trials,
        r.coverage,
        r.policy.coverage_floor
    );
    match r.score {
        Some(s) => println!("score: {s}"),
        None => println!("score: none (outcome is not benchmark_complete)"),
    }
    println!("logs: {}", out.display());
}
