//! Whole generations through the real driver (`evolve run`'s code) with the cheapest
//! built-in operators and a no-op evaluation engine, split into the time spent inside
//! operator calls and the framework's own time.

use super::stats::Stat;
use crate::lifecycle::{Driver, RunOptions};
use crate::sandbox::Sandbox;
use crate::workspace::Workspace;
use evaluator_harbor::engine::{BoxFuture, Engine, TrialRequest};
use evaluator_harbor::result::{TrialLogs, TrialResult, TrialStatus, trial_name};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;

/// An engine whose every trial completes at once with reward 1: evaluation costs nothing,
/// so what a generation costs is the framework's and its operators'.
pub struct NoopEngine;

impl Engine for NoopEngine {
    fn name(&self) -> &'static str {
        "noop"
    }

    fn run_trial<'a>(&'a self, req: &'a TrialRequest) -> BoxFuture<'a, TrialResult> {
        Box::pin(async move {
            TrialResult {
                task: req.task.name.clone(),
                repetition: req.repetition,
                trial_name: trial_name(&req.task.name, req.repetition),
                engine: "noop".into(),
                status: TrialStatus::BenchmarkComplete,
                timeout_owner: None,
                reward: Some(1.0),
                rewards: BTreeMap::from([("reward".to_string(), 1.0)]),
                cost_usd: None,
                error: None,
                agent_exit_code: Some(0),
                wall_time_sec: 0.0,
                logs: TrialLogs {
                    trial_dir: req.trial_dir.clone(),
                    ..TrialLogs::default()
                },
                isolation: None,
                usage: None,
                agent_usage: None,
                phases: None,
                attempts: Vec::new(),
            }
        })
    }
}

/// Generations run one at a time, each timed as a whole and split.
#[derive(Debug, Clone, Serialize)]
pub struct Generations {
    pub generations: u32,
    /// Each generation end to end (one `Driver::run` step: select, mutate, snapshot,
    /// surface check, evaluation with the no-op engine, gate, record, archive).
    pub total: Stat,
    /// Operator calls per generation and their median total time (instantiate + run).
    pub operator_calls_per_generation: f64,
    pub operators: Stat,
    /// Inside the evaluation (a fresh checkout of the candidate for the evaluated
    /// agent, the no-op engine, the summary); its stamping and archiving are the
    /// framework's.
    pub evaluation: Stat,
    /// The rest: the framework's own overhead per generation.
    pub framework: Stat,
    pub generations_per_second: f64,
    /// Archive events appended per generation; each costs two `fdatasync`s (the line,
    /// then its receipt), which the framework time includes.
    pub archive_events_per_generation: f64,
    /// One small append + `fdatasync` on the work directory's disk: what each of those
    /// syncs waits for.
    pub fdatasync: Stat,
}

/// Run `count` generations in the workspace at `ws` (already initialized, genesis not
/// yet evaluated). The genesis evaluation runs first and is not counted.
pub fn measure(
    rt: &Runtime,
    sb: &Arc<Sandbox>,
    ws: &Path,
    count: u32,
) -> Result<Generations, String> {
    let workspace =
        Workspace::open(ws).map_err(|e| format!("cannot open {}: {}", ws.display(), e.what))?;
    let driver = rt
        .block_on(Driver::open(workspace, sb.clone(), false))
        .map_err(|e| format!("cannot start the run: {e}"))?
        .with_engine(Arc::new(NoopEngine));
    let run_to = |g: u32| {
        let opts = RunOptions {
            max_generations: Some(g),
            ..RunOptions::default()
        };
        rt.block_on(driver.run(&opts))
            .map_err(|e| format!("generation {g} failed: {e}"))
    };
    run_to(0)?;
    let archive = ws.join(".evolve").join("archive.jsonl");
    let lines_before = count_lines(&archive);
    let (mut total, mut ops, mut evals, mut rest) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let calls_before = sb.call_tally().0;
    let started = Instant::now();
    for g in 1..=count.max(1) {
        let (_, op_before) = sb.call_tally();
        let eval_before = driver.evaluation_time();
        let t = Instant::now();
        run_to(g)?;
        let whole = t.elapsed();
        let in_ops = sb.call_tally().1.saturating_sub(op_before);
        let in_eval = driver.evaluation_time().saturating_sub(eval_before);
        total.push(whole);
        ops.push(in_ops);
        evals.push(in_eval);
        rest.push(whole.saturating_sub(in_ops).saturating_sub(in_eval));
    }
    let elapsed = started.elapsed();
    let n = count.max(1);
    let appended = count_lines(&archive).saturating_sub(lines_before);
    let stat = |v: Vec<Duration>| Stat::of(v).ok_or("no generation was measured");
    Ok(Generations {
        generations: n,
        total: stat(total)?,
        operator_calls_per_generation: (sb.call_tally().0 - calls_before) as f64 / f64::from(n),
        operators: stat(ops)?,
        evaluation: stat(evals)?,
        framework: stat(rest)?,
        generations_per_second: f64::from(n) / elapsed.as_secs_f64().max(1e-9),
        archive_events_per_generation: appended as f64 / f64::from(n),
        fdatasync: fdatasync_latency(ws, 30)?,
    })
}

fn count_lines(path: &Path) -> usize {
    std::fs::read(path).map_or(0, |b| b.iter().filter(|c| **c == b'\n').count())
}

/// `n` appends of one archive-sized line, each followed by `fdatasync`, in a file beside
/// the workspace (so on the same disk).
fn fdatasync_latency(ws: &Path, n: usize) -> Result<Stat, String> {
    use std::io::Write;
    let path = ws.with_extension("sync-probe");
    let mut f = std::fs::File::create(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let line = [b'x'; 511];
    let stat = super::stats::time(n, |_| {
        f.write_all(&line)
            .and_then(|_| f.write_all(b"\n"))
            .and_then(|_| f.sync_data())
    })
    .map_err(|e| format!("cannot sync {}: {e}", path.display()));
    let _ = std::fs::remove_file(&path);
    stat
}
