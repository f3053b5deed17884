//! What `mutate/coder` costs per tool call, the model excluded: one real generation on the
//! built-in `terminal` seed (the `evolve` binary, local engine, contained trials), the
//! coder's model a scripted upstream that answers with batches of tool calls at once, the
//! agent under test's model another that submits at once.
//!
//! The coder times each call it carries out and keeps the figure in its trajectory
//! (`extra.elapsed_us` of each observation result; for `run_tasks` also the trials' own
//! summed durations, `extra.trials_ms`). This reads them back: per tool, the median and
//! P95 of the calls' time, and for `run_tasks` the `tasks` capability's overhead (the
//! call's time less its trial's). The whole mutate call's time less the tools' is the
//! model's round trips and the coder's own work.

use super::gateway::Upstream;
use super::stats::Stat;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tokio::runtime::Runtime;

/// Calls of each file tool in the script.
pub const CALLS_PER_TOOL: usize = 5;
/// `run_tasks` calls in the script, one train task each.
pub const TASK_RUNS: usize = 2;

/// One tool's calls.
#[derive(Debug, Clone, Serialize)]
pub struct ToolRow {
    pub tool: String,
    pub calls: usize,
    /// The call's time inside the operator (WASI and host calls included), ms.
    pub call_ms: Option<Stat>,
    /// `run_tasks` only: the call's time less its trial's own duration, ms.
    pub overhead_ms: Option<Stat>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CoderCost {
    pub tools: Vec<ToolRow>,
    /// The whole mutate call (instantiate to result), ms.
    pub mutate_ms: f64,
    /// Σ every tool call's time, ms.
    pub tools_ms: f64,
    pub model_calls: u64,
}

/// The coder's script: batches of tool calls by turn, then `finish`.
fn script(turn: usize) -> Vec<(String, Value)> {
    let n = CALLS_PER_TOOL;
    let each = |name: &str, f: &dyn Fn(usize) -> Value| {
        (0..n).map(|i| (name.to_string(), f(i))).collect::<Vec<_>>()
    };
    match turn {
        0 => each("list_dir", &|_| json!({"path": "target"})),
        1 => each("read_file", &|_| json!({"path": "target/agent.py"})),
        2 => each("search", &|_| json!({"pattern": "step_limit|submit"})),
        3 => each(
            "write_file",
            &|i| json!({"path": format!("target/skills/bench-{i}.md"), "content": "A bench skill.\n"}),
        ),
        4 => each(
            "edit",
            &|i| json!({"path": format!("target/skills/bench-{i}.md"), "search": "A bench", "replace": "An edited"}),
        ),
        5 => (0..TASK_RUNS)
            .map(|_| ("run_tasks".to_string(), json!({"count": 1})))
            .collect(),
        6 => (0..n)
            .map(|_| ("list_dir".to_string(), json!({"path": "target/skills"})))
            .collect(),
        _ => vec![("finish".into(), json!({"notes": "bench"}))],
    }
}

/// The upstream's assistant message: the batch for the request's turn (its assistant
/// messages so far).
fn answer(request: &Value) -> Value {
    let turn = request["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
    let calls: Vec<Value> = script(turn)
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"id": format!("t{turn}-{i}"), "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

const SUBMIT: &str = "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```\n";

fn recipe(coder: &str, agent: &str) -> String {
    format!(
        "experiment: {{name: coder-bench, max_generations: 1, children_per_gen: 1, budget_usd: 5, seed: 1}}
target: {{seed: terminal}}
surface: {{include: [\"target/**\"], exclude: [\"target/agent.toml\"]}}
operators:
  select: {{operator: ahe_latest}}
  rollout: {{operator: parent_evaluation}}
  mutate: {{operator: coder, timeout_s: 600, config: {{max_turns: 12, max_task_runs: {TASK_RUNS}}}}}
  gate: {{operator: hillclimb}}
  record: {{operator: notes}}
evaluator:
  engine: local
  dataset: tasks
  splits: {{train: 0.5, gate: 0.25, sealed: 0.25, seed: 0}}
  repetitions: 1
  anchor: {{final: false}}
  model: {{endpoint: \"{agent}\", model: agent-m, api_key_env: EVOLVE_BENCH_NO_KEY, max_tokens: 256, prices: {{input_per_mtok_usd: 0, output_per_mtok_usd: 0}}}}
model: {{endpoint: \"{coder}\", model: coder-m, api_key_env: EVOLVE_BENCH_NO_KEY, prices: {{input_per_mtok_usd: 0, output_per_mtok_usd: 0}}, timeout_s: 60}}
"
    )
}

/// The seed's first four tasks, by name, under `dir/tasks`.
fn tasks(dir: &Path) -> Result<(), String> {
    let seed = crate::builtin::seed("terminal").ok_or("the terminal seed is not built in")?;
    let all = dir.join("all");
    seed.write_tasks(&all)
        .map_err(|e| format!("writing the seed's tasks: {e}"))?;
    let mut names: Vec<String> = std::fs::read_dir(&all)
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    std::fs::create_dir_all(dir.join("tasks")).map_err(|e| e.to_string())?;
    for name in names.iter().take(4) {
        std::fs::rename(all.join(name), dir.join("tasks").join(name)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn evolve(exe: &Path, dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env("EVOLVE_KEY_DIR", dir.join("keys"))
        .env_remove("EVOLVE_MODEL_ENDPOINT")
        .env_remove("EVOLVE_MODEL")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "evolve {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Run the generation with the `evolve` binary `exe` in `dir` and read the figures back.
pub fn measure(rt: &Runtime, exe: &Path, dir: &Path) -> Result<CoderCost, String> {
    let _guard = rt.enter();
    let coder = rt.block_on(Upstream::answering_messages(answer))?;
    let agent = rt.block_on(Upstream::answering(|_| SUBMIT.into()))?;
    tasks(dir)?;
    std::fs::write(
        dir.join("recipe.yaml"),
        recipe(&coder.endpoint(), &agent.endpoint()),
    )
    .map_err(|e| e.to_string())?;
    evolve(exe, dir, &["init", "ws", "--recipe", "recipe.yaml"])?;
    evolve(exe, dir, &["run", "ws"])?;
    let mutate = dir.join("ws/runs/gen-1/mutate");
    let read = |p: &Path| -> Result<Value, String> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    };
    let trajectory = read(&mutate.join("scratch/trajectory.json"))?;
    let result = read(&mutate.join("result.json"))?;
    let mut per_tool: BTreeMap<String, (Vec<Duration>, Vec<Duration>)> = BTreeMap::new();
    let results = trajectory["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| {
            s["observation"]["results"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        });
    for r in results {
        let extra = &r["extra"];
        let tool = extra["tool"].as_str().unwrap_or("?").to_string();
        let took = Duration::from_micros(extra["elapsed_us"].as_u64().unwrap_or(0));
        let entry = per_tool.entry(tool).or_default();
        entry.0.push(took);
        if let Some(trials) = extra["trials_ms"].as_u64() {
            entry
                .1
                .push(took.saturating_sub(Duration::from_millis(trials)));
        }
    }
    let tools_ms = per_tool
        .values()
        .flat_map(|v| v.0.iter())
        .map(|d| d.as_secs_f64() * 1e3)
        .sum();
    Ok(CoderCost {
        tools: per_tool
            .into_iter()
            .map(|(tool, (calls, overhead))| ToolRow {
                tool,
                calls: calls.len(),
                call_ms: Stat::of(calls),
                overhead_ms: Stat::of(overhead),
            })
            .collect(),
        mutate_ms: result["elapsed_ms"].as_f64().unwrap_or(f64::NAN),
        tools_ms,
        model_calls: coder.requests(),
    })
}
