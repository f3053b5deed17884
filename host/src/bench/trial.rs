//! What containing a local trial costs: the same trivial trial (oracle `solve.sh`, a
//! one-line verifier) on the local engine, run on the host and in its bubblewrap jail, the
//! two alternated so that the machine's drift touches both alike.

use super::stats::Stat;
use evaluator_harbor::agent::AgentSpec;
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::{Engine, EvaluationPlan, NoProgress, contain, run_evaluation};
use evaluator_harbor::result::TrialStatus;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// At most this many milliseconds added per trial by the jail (median).
pub const GOAL_ADDED_MS: f64 = 20.0;

/// Median wall time of one trial, each way.
#[derive(Debug, Clone, Serialize)]
pub struct TrialStartup {
    pub unconfined: Stat,
    /// `None` when this machine cannot start bubblewrap (`why` says why).
    pub contained: Option<Stat>,
    pub added_ms: Option<f64>,
    pub why: Option<String>,
}

fn write_task(dir: &Path) -> Result<(), String> {
    let io = |e: std::io::Error| format!("cannot write the benchmark task: {e}");
    let t = dir.join("tiny");
    std::fs::create_dir_all(t.join("solution")).map_err(io)?;
    std::fs::create_dir_all(t.join("tests")).map_err(io)?;
    std::fs::create_dir_all(t.join("environment")).map_err(io)?;
    std::fs::write(
        t.join("environment/Dockerfile"),
        "FROM scratch\nWORKDIR /app\n",
    )
    .map_err(io)?;
    std::fs::write(
        t.join("task.toml"),
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n",
    )
    .map_err(io)?;
    std::fs::write(t.join("instruction.md"), "Write 1 to /app/answer.txt.\n").map_err(io)?;
    std::fs::write(
        t.join("solution/solve.sh"),
        "#!/bin/bash\necho 1 > /app/answer.txt\n",
    )
    .map_err(io)?;
    std::fs::write(
        t.join("tests/test.sh"),
        "#!/bin/bash\ncat /app/answer.txt > /logs/verifier/reward.txt\n",
    )
    .map_err(io)?;
    Ok(())
}

/// One trial's wall time on `engine`, which must score it 1.
async fn one(engine: Arc<dyn Engine>, tasks: &Path, out: &Path) -> Result<Duration, String> {
    let plan = EvaluationPlan::for_dir(tasks, AgentSpec::Oracle, out.to_path_buf())
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    let r = run_evaluation(engine, &plan, &NoProgress).await;
    let took = started.elapsed();
    let t = r
        .trials
        .first()
        .ok_or("the benchmark evaluation ran no trial")?;
    if t.status != TrialStatus::BenchmarkComplete || t.reward != Some(1.0) {
        return Err(format!(
            "the benchmark trial failed: {:?} {:?}",
            t.status, t.error
        ));
    }
    let _ = std::fs::remove_dir_all(out);
    Ok(took)
}

/// `n` trials each way, alternated.
pub fn measure(
    rt: &tokio::runtime::Runtime,
    work: &Path,
    n: usize,
) -> Result<TrialStartup, String> {
    let tasks = work.join("tasks");
    write_task(&tasks)?;
    let unconfined: Arc<dyn Engine> = Arc::new(LocalEngine {
        unconfined: true,
        ..LocalEngine::default()
    });
    let contained: Arc<dyn Engine> = Arc::new(LocalEngine::default());
    let can_contain = contain::bubblewrap().map(|_| ()).map_err(str::to_string);
    let (mut host, mut jail) = (Vec::new(), Vec::new());
    for i in 0..n.max(1) {
        let out = work.join(format!("out-{i}"));
        host.push(rt.block_on(one(unconfined.clone(), &tasks, &out))?);
        if can_contain.is_ok() {
            jail.push(rt.block_on(one(contained.clone(), &tasks, &out))?);
        }
    }
    let unconfined = Stat::of(host).ok_or("no samples")?;
    let contained = Stat::of(jail);
    Ok(TrialStartup {
        added_ms: contained.map(|c| c.median_ms - unconfined.median_ms),
        unconfined,
        contained,
        why: can_contain.err(),
    })
}
