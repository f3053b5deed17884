//! Where a terminal-seed evaluation's time goes: the built-in `terminal` seed's own agent
//! (target/agent.py) on [`TASKS`] of its tasks, contained on the local engine, reaching a
//! scripted model through the gateway, at [`CONCURRENCY`] trials at once.
//!
//! The scripted upstream answers at once (the first step lists `/app`, the second
//! submits), so its share is the floor a real model adds to; each trial's time splits into
//! agent (its phase, less the model's latency as the gateway logged it), model, verifier
//! and framework (the rest of the trial: staging, the sandbox, copies). The evaluation's
//! wall time against the sum of its trials shows what running them at once buys.

use super::gateway::{Upstream, gateway};
use evaluator_harbor::agent::AgentSpec;
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::metered::GATEWAY_LOG_FILE;
use evaluator_harbor::engine::{Engine, EvaluationPlan, NoProgress, contain, run_evaluation};
use evaluator_harbor::gateway::ModelGateway;
use evaluator_harbor::result::{EvaluationResult, TrialResult, TrialStatus};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio::runtime::Runtime;

/// Tasks each evaluation runs (the seed's first, by name).
pub const TASKS: usize = 8;
/// Trials at once, one evaluation each.
pub const CONCURRENCY: [usize; 3] = [1, 2, 4];

/// One evaluation of [`TASKS`] trials at `n_concurrent`.
#[derive(Debug, Clone, Serialize)]
pub struct SplitRow {
    pub n_concurrent: usize,
    /// The evaluation, first trial started to last result read.
    pub wall_s: f64,
    /// Σ of the trials' wall times; over `wall_s`, how much ran at once.
    pub trials_s: f64,
    /// Σ agent phases less the model's latency.
    pub agent_s: f64,
    /// Σ the gateway's latency for the agent's calls (upstream included).
    pub model_s: f64,
    pub verifier_s: f64,
    /// Σ the rest of each trial (the engine's own work).
    pub framework_s: f64,
    pub model_calls: u64,
}

/// The split at each concurrency, or why it could not be measured here.
#[derive(Debug, Clone, Serialize)]
pub struct TerminalSplit {
    pub tasks: usize,
    pub rows: Vec<SplitRow>,
    pub why: Option<String>,
}

/// The scripted model: list `/app` first, then submit.
fn answer(request: &Value) -> String {
    let turns = request["messages"].as_array().map_or(0, Vec::len);
    if turns <= 2 {
        "```bash\nls -la /app\n```".into()
    } else {
        "Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```".into()
    }
}

/// Measure in `work` (an empty directory); a machine that cannot contain a gated trial
/// (no bubblewrap, not root, no nsenter) reports why instead of a split.
pub fn measure(rt: &Runtime, work: &Path) -> Result<TerminalSplit, String> {
    let mut split = TerminalSplit {
        tasks: TASKS,
        rows: Vec::new(),
        why: None,
    };
    if let Err(why) = contain::bubblewrap() {
        split.why = Some(why.to_string());
        return Ok(split);
    }
    let seed = crate::builtin::seed("terminal").ok_or("the terminal seed is not built in")?;
    let io = |e: std::io::Error| {
        format!(
            "cannot write the terminal seed into {}: {e}",
            work.display()
        )
    };
    seed.write_target(&work.join("target")).map_err(io)?;
    seed.write_tasks(&work.join("tasks")).map_err(io)?;
    let agent = AgentSpec::parse(&work.join("target").to_string_lossy())
        .map_err(|e| format!("the terminal seed's agent: {e}"))?;
    let engine: Arc<dyn Engine> = Arc::new(LocalEngine::default());
    rt.block_on(async {
        let upstream = Upstream::answering(answer).await?;
        for n in CONCURRENCY {
            let out = work.join(format!("n{n}"));
            let mut plan = EvaluationPlan::for_dir(&work.join("tasks"), agent.clone(), out)
                .map_err(|e| format!("the terminal seed's tasks: {e}"))?;
            plan.tasks.truncate(TASKS);
            plan.n_concurrent = n;
            let gw: Arc<dyn ModelGateway> = Arc::new(gateway(&upstream)?);
            plan.settings.gateway = Some(gw);
            let started = Instant::now();
            let result = run_evaluation(engine.clone(), &plan, &NoProgress).await;
            split
                .rows
                .push(row(n, started.elapsed().as_secs_f64(), &result)?);
        }
        Ok::<_, String>(())
    })?;
    Ok(split)
}

fn row(n: usize, wall_s: f64, result: &EvaluationResult) -> Result<SplitRow, String> {
    let mut r = SplitRow {
        n_concurrent: n,
        wall_s,
        trials_s: 0.0,
        agent_s: 0.0,
        model_s: 0.0,
        verifier_s: 0.0,
        framework_s: 0.0,
        model_calls: 0,
    };
    for t in &result.trials {
        let (phases, model_s, calls) = timed(t)?;
        let verifier = phases.verifier_sec.unwrap_or(0.0);
        r.trials_s += t.wall_time_sec;
        r.model_s += model_s;
        r.agent_s += (phases.agent_sec - model_s).max(0.0);
        r.verifier_s += verifier;
        r.framework_s += (t.wall_time_sec - phases.agent_sec - verifier).max(0.0);
        r.model_calls += calls;
    }
    Ok(r)
}

/// A trial's phase times and its model time and calls (from the gateway's log); an error
/// unless it ran to a verdict, so that a broken setup fails the bench instead of
/// measuring failures.
fn timed(t: &TrialResult) -> Result<(evaluator_harbor::result::PhaseTimes, f64, u64), String> {
    if t.status != TrialStatus::BenchmarkComplete {
        let why = t.error.as_ref().map_or("", |e| e.message.as_str());
        return Err(format!(
            "terminal trial {} ended {}: {why}",
            t.trial_name,
            t.status.as_str()
        ));
    }
    let phases = t
        .phases
        .clone()
        .ok_or_else(|| format!("terminal trial {} has no phase times", t.trial_name))?;
    let log = std::fs::read_to_string(t.logs.trial_dir.join(GATEWAY_LOG_FILE)).unwrap_or_default();
    let (mut ms, mut calls) = (0.0, 0);
    for line in log.lines() {
        let ex: Value = serde_json::from_str(line).map_err(|e| {
            format!(
                "trial {}: a line of {GATEWAY_LOG_FILE} is not JSON: {e}",
                t.trial_name
            )
        })?;
        ms += ex["latency_ms"].as_f64().unwrap_or(0.0);
        calls += 1;
    }
    Ok((phases, ms / 1e3, calls))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_scripted_model_lists_then_submits() {
        let first = json!({"messages": [{"role": "system"}, {"role": "user"}]});
        assert!(answer(&first).contains("ls -la /app"));
        let later = json!({"messages": [{}, {}, {}, {}]});
        assert!(answer(&later).contains("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"));
    }
}
