//! analyze/trajectory_only: summarize the rollout evidence without any model call.
//!
//! The rollout summary must be a JSON object. Trials are read from two shapes:
//!
//! * `trials`, when it is an array: flat trial records `{"task", "status", "reward"}`
//!   (the shape of the `tasks` capability's trial reports);
//! * `tasks`, when it is an array of objects: `{"task", "trials": [{"status",
//!   "reward"}, …]}` (the shape `rollout/parent_evaluation` writes).
//!
//! In both, `task` is a string, `status` an optional string (`unknown` when absent;
//! `_` is read as `-`, so `benchmark_complete` and `benchmark-complete` are one status)
//! and `reward` an optional number or `null`. A record that breaks its shape is an error
//! naming its path. Any other value of those keys (a count, a list of names) is not
//! trial data and is only listed among the keys.
//!
//! The analysis (the evidence summary; no artifacts):
//!
//! * `trials`, `trials_by_status` (status → count, sorted), `trials_without_reward`;
//! * `mean_reward`: the mean over all trials, a trial without a reward counting 0
//!   (`null` when there is no trial);
//! * `failing_tasks`: sorted train task names whose trials' mean reward (missing
//!   rewards 0) is below `fail_below`, together with the names the rollout itself listed
//!   in a `failed` array of strings. Opaque keys of non-train tasks (`private-<n>`,
//!   `private-unknown`) are never names: they are only counted, in `failing_private`;
//! * `rollout_keys`: the rollout summary's top-level keys, sorted;
//! * `trajectories`, only when a flat trial record carries a `trajectory` object (what
//!   rollout/train reads from the host's trajectory line): `kept` and `skipped` (records
//!   with a `text` file, and with a `skipped` reason), Σ `steps`, `tool_calls`,
//!   `prompt_tokens`, `completion_tokens` and `cost_usd` (`null` when none has one), and
//!   `failing`: the `text` files of the failing tasks' trials, in record order (at most
//!   `max_tasks`; `failing_total` counts them all), for mutate to read first.
//!
//! `failing_tasks` and `rollout_keys` hold at most `max_tasks` entries each;
//! `failing_tasks_total` and `rollout_keys_total` count them all.

use std::collections::{BTreeMap, BTreeSet};

use evolve_operator_sdk::prelude::*;

pub struct TrajectoryOnly;

const MAX_TASKS: i64 = 20;
const FAIL_BELOW: f64 = 1.0;

impl Operator for TrajectoryOnly {
    const NAME: &'static str = "trajectory_only";
    const SUMMARY: &'static str = "Summarize rollout trials without a model: counts by status, mean reward, failing train tasks, the rollout's keys.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "max_tasks",
                config::integer()
                    .default(json!(MAX_TASKS))
                    .minimum(1.0)
                    .description(
                        "At most this many entries in `failing_tasks` and in `rollout_keys`",
                    ),
            )
            .field(
                "fail_below",
                config::number()
                    .default(json!(FAIL_BELOW))
                    .description("A task whose mean trial reward is below this is failing"),
            )
    }
}

/// Whether `task` is an opaque key of a non-train task rather than a name.
pub fn is_private_key(task: &str) -> bool {
    match task.strip_prefix("private-") {
        Some("unknown") => true,
        Some(n) => !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

struct TrialRec<'a> {
    task: &'a str,
    status: String,
    reward: Option<f64>,
    /// The host's trajectory of the trial, as rollout/train names it (host data: a
    /// value of another shape is not a trajectory, and not an error).
    trajectory: Option<&'a Map<String, Value>>,
}

fn field_str<'a>(obj: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a str, String> {
    obj.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("rollout summary `{path}` has no string `{key}`"))
}

fn status_and_reward(
    obj: &Map<String, Value>,
    path: &str,
) -> Result<(String, Option<f64>), String> {
    let status = match obj.get("status") {
        None | Some(Value::Null) => "unknown".to_string(),
        Some(Value::String(s)) => s.replace('_', "-"),
        Some(_) => {
            return Err(format!("rollout summary `{path}.status` must be a string"));
        }
    };
    let reward = match obj.get("reward") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(_) => {
            return Err(format!(
                "rollout summary `{path}.reward` must be a number or null"
            ));
        }
    };
    Ok((status, reward))
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("rollout summary `{path}` must be an object"))
}

fn collect_trials(summary: &Map<String, Value>) -> Result<Vec<TrialRec<'_>>, String> {
    let mut out = Vec::new();
    if let Some(Value::Array(trials)) = summary.get("trials") {
        for (i, t) in trials.iter().enumerate() {
            let path = format!("trials[{i}]");
            let obj = object(t, &path)?;
            let task = field_str(obj, "task", &path)?;
            let (status, reward) = status_and_reward(obj, &path)?;
            out.push(TrialRec {
                task,
                status,
                reward,
                trajectory: obj.get("trajectory").and_then(Value::as_object),
            });
        }
    }
    if let Some(Value::Array(tasks)) = summary.get("tasks")
        && tasks.iter().all(Value::is_object)
    {
        for (i, t) in tasks.iter().enumerate() {
            let path = format!("tasks[{i}]");
            let obj = object(t, &path)?;
            let task = field_str(obj, "task", &path)?;
            let Some(Value::Array(trials)) = obj.get("trials") else {
                return Err(format!("rollout summary `{path}` has no array `trials`"));
            };
            for (j, tr) in trials.iter().enumerate() {
                let path = format!("tasks[{i}].trials[{j}]");
                let (status, reward) = status_and_reward(object(tr, &path)?, &path)?;
                out.push(TrialRec {
                    task,
                    status,
                    reward,
                    trajectory: None,
                });
            }
        }
    }
    Ok(out)
}

/// The analysis of a rollout summary (see the module documentation).
pub fn analyze(summary_text: &str, max_tasks: usize, fail_below: f64) -> Result<Value, String> {
    let summary = match serde_json_from_str(summary_text)? {
        Value::Object(map) => map,
        _ => return Err("rollout summary must be a JSON object".into()),
    };
    let trials = collect_trials(&summary)?;

    let mut by_status: BTreeMap<&str, u64> = BTreeMap::new();
    let mut per_task: BTreeMap<&str, (f64, u64)> = BTreeMap::new();
    let (mut sum, mut without) = (0.0, 0u64);
    for t in &trials {
        *by_status.entry(t.status.as_str()).or_default() += 1;
        let r = t.reward.unwrap_or(0.0);
        if t.reward.is_none() {
            without += 1;
        }
        sum += r;
        let e = per_task.entry(t.task).or_default();
        e.0 += r;
        e.1 += 1;
    }
    let mean = (!trials.is_empty()).then(|| sum / trials.len() as f64);

    let mut failing: BTreeSet<&str> = per_task
        .iter()
        .filter(|(_, (s, n))| s / (*n as f64) < fail_below)
        .map(|(t, _)| *t)
        .collect();
    if let Some(Value::Array(listed)) = summary.get("failed") {
        for (i, v) in listed.iter().enumerate() {
            let name = v
                .as_str()
                .ok_or_else(|| format!("rollout summary `failed[{i}]` must be a string"))?;
            failing.insert(name);
        }
    }
    let (private, names): (Vec<&str>, Vec<&str>) =
        failing.into_iter().partition(|t| is_private_key(t));
    let keys: Vec<&String> = summary
        .keys()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();

    let mut out = json!({
        "analyze": "trajectory_only",
        "trials": trials.len(),
        "trials_by_status": by_status,
        "trials_without_reward": without,
        "mean_reward": mean,
        "failing_tasks": names.iter().take(max_tasks).collect::<Vec<_>>(),
        "failing_tasks_total": names.len(),
        "failing_private": private.len(),
        "rollout_keys": keys.iter().take(max_tasks).collect::<Vec<_>>(),
        "rollout_keys_total": keys.len(),
    });
    if let Some(t) = trajectories(&trials, &names, max_tasks) {
        out["trajectories"] = t;
    }
    Ok(out)
}

/// The totals of the trials' trajectories and the text files of the failing tasks'
/// trials; `None` when no trial has one.
fn trajectories(trials: &[TrialRec<'_>], failing: &[&str], max_tasks: usize) -> Option<Value> {
    let with: Vec<(&TrialRec<'_>, &Map<String, Value>)> = trials
        .iter()
        .filter_map(|t| t.trajectory.map(|j| (t, j)))
        .collect();
    if with.is_empty() {
        return None;
    }
    let count = |k: &str| {
        with.iter()
            .filter_map(|(_, j)| j.get(k).and_then(Value::as_u64))
            .fold(0u64, u64::saturating_add)
    };
    let costs: Vec<f64> = with
        .iter()
        .filter_map(|(_, j)| j.get("cost_usd").and_then(Value::as_f64))
        .filter(|c| c.is_finite() && *c >= 0.0)
        .collect();
    let text = |j: &Map<String, Value>| j.get("text").and_then(Value::as_str).map(str::to_string);
    let failing_files: Vec<String> = with
        .iter()
        .filter(|(t, _)| failing.contains(&t.task))
        .filter_map(|(_, j)| text(j))
        .collect();
    Some(json!({
        "kept": with.iter().filter(|(_, j)| text(j).is_some()).count(),
        "skipped": with.iter().filter(|(_, j)| j.get("skipped").is_some_and(Value::is_string)).count(),
        "steps": count("steps"),
        "tool_calls": count("tool_calls"),
        "prompt_tokens": count("prompt_tokens"),
        "completion_tokens": count("completion_tokens"),
        "cost_usd": (!costs.is_empty()).then(|| costs.iter().sum::<f64>()),
        "failing": failing_files.iter().take(max_tasks).collect::<Vec<_>>(),
        "failing_total": failing_files.len(),
    }))
}

fn serde_json_from_str(text: &str) -> Result<Value, String> {
    evolve_operator_sdk::serde_json::from_str(text).map_err(|e| {
        format!(
            "rollout summary is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })
}

impl Analyze for TrajectoryOnly {
    fn analyze(ctx: &Context, rollout: &Evidence) -> Result<Evidence, String> {
        let max_tasks = ctx.i64("max_tasks").unwrap_or(MAX_TASKS).max(1) as usize;
        let fail_below = ctx.f64("fail_below").unwrap_or(FAIL_BELOW);
        Ok(Evidence {
            summary: analyze(&rollout.summary, max_tasks, fail_below)?.to_string(),
            artifacts: vec![],
        })
    }
}

evolve_operator_sdk::export!(analyze: TrajectoryOnly);

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: Value, summary: Value) -> Result<Value, String> {
        run_text(config, &summary.to_string())
    }

    fn run_text(config: Value, summary: &str) -> Result<Value, String> {
        let schema = <TrajectoryOnly as Operator>::config().build().unwrap();
        let ctx = Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()));
        let rollout = Evidence {
            summary: summary.to_string(),
            artifacts: vec!["rollout/x.json".into()],
        };
        let e = TrajectoryOnly::analyze(&ctx, &rollout)?;
        assert!(e.artifacts.is_empty());
        Ok(evolve_operator_sdk::serde_json::from_str(&e.summary).unwrap())
    }

    #[test]
    fn flat_trials_are_counted_and_averaged() {
        let s = run(
            json!({}),
            json!({"trials": [
                {"task": "train-1", "repetition": 0, "status": "benchmark-complete", "reward": 1.0},
                {"task": "train-1", "repetition": 1, "status": "benchmark_complete", "reward": 0.5},
                {"task": "train-2", "status": "timeout", "reward": null},
                {"task": "train-3", "status": "benchmark-complete", "reward": 1.0},
            ], "budget": 4}),
        )
        .unwrap();
        assert_eq!(
            s,
            json!({
                "analyze": "trajectory_only",
                "trials": 4,
                "trials_by_status": {"benchmark-complete": 3, "timeout": 1},
                "trials_without_reward": 1,
                "mean_reward": 0.625,
                "failing_tasks": ["train-1", "train-2"],
                "failing_tasks_total": 2,
                "failing_private": 0,
                "rollout_keys": ["budget", "trials"],
                "rollout_keys_total": 2,
            })
        );
    }

    #[test]
    fn trajectories_are_totalled_and_the_failing_ones_listed() {
        let tr = |text: &str, steps: u64, cost: Value| {
            json!({"text": text, "json": text.replace(".txt", ".json"), "steps": steps,
                   "tool_calls": steps / 2, "prompt_tokens": 100, "completion_tokens": 10,
                   "cost_usd": cost})
        };
        let s = run(
            json!({}),
            json!({"trials": [
                {"task": "a", "status": "benchmark-complete", "reward": 1.0,
                 "trajectory": tr("trajectories/run-1/a__r0.txt", 4, json!(0.5))},
                {"task": "b", "status": "timeout", "reward": null,
                 "trajectory": tr("trajectories/run-1/b__r0.txt", 6, json!(null))},
                {"task": "c", "status": "timeout", "reward": null,
                 "trajectory": {"skipped": "trajectory.json is a link or not a regular file"}},
                {"task": "d", "status": "timeout", "reward": null, "trajectory": "odd"},
            ]}),
        )
        .unwrap();
        assert_eq!(
            s["trajectories"],
            json!({"kept": 2, "skipped": 1, "steps": 10, "tool_calls": 5, "prompt_tokens": 200,
                   "completion_tokens": 20, "cost_usd": 0.5,
                   "failing": ["trajectories/run-1/b__r0.txt"], "failing_total": 1})
        );
        assert_eq!(s["trials"], 4);
    }

    #[test]
    fn parent_evaluation_shape_and_private_keys() {
        let s = run(
            json!({}),
            json!({
                "rollout": "parent_evaluation", "parent": "2", "score": 0.5,
                "tasks": [
                    {"task": "train-a", "mean_reward": 1.0, "trials": [
                        {"repetition": 0, "status": "benchmark-complete", "reward": 1.0}]},
                    {"task": "private-1", "mean_reward": 0.0, "trials": [
                        {"repetition": 0, "status": "benchmark-complete", "reward": 0.0}]},
                    {"task": "private-unknown", "mean_reward": null, "trials": []},
                    {"task": "train-b", "mean_reward": 0.0, "trials": [
                        {"repetition": 0, "status": "candidate-invalid"}]},
                ],
                "failed": ["private-1", "private-unknown", "train-b"],
            }),
        )
        .unwrap();
        assert_eq!(
            s,
            json!({
                "analyze": "trajectory_only",
                "trials": 3,
                "trials_by_status": {"benchmark-complete": 2, "candidate-invalid": 1},
                "trials_without_reward": 1,
                "mean_reward": 1.0 / 3.0,
                "failing_tasks": ["train-b"],
                "failing_tasks_total": 1,
                "failing_private": 2,
                "rollout_keys": ["failed", "parent", "rollout", "score", "tasks"],
                "rollout_keys_total": 5,
            })
        );
    }

    #[test]
    fn listed_failures_without_trials() {
        // The shape of `evolve operator run`'s sample rollout evidence.
        let s = run(
            json!({}),
            json!({"failed": ["train-3"], "passed": ["train-1", "train-2"]}),
        )
        .unwrap();
        assert_eq!(s["trials"], json!(0));
        assert_eq!(s["trials_by_status"], json!({}));
        assert_eq!(s["mean_reward"], Value::Null);
        assert_eq!(s["failing_tasks"], json!(["train-3"]));
        assert_eq!(s["rollout_keys"], json!(["failed", "passed"]));
    }

    #[test]
    fn non_trial_values_of_the_keys_are_ignored() {
        let s = run(
            json!({}),
            json!({"trials": 12, "tasks": ["train-1"], "failed": 3}),
        )
        .unwrap();
        assert_eq!(s["trials"], json!(0));
        assert_eq!(s["failing_tasks"], json!([]));
        assert_eq!(s["rollout_keys_total"], json!(3));
    }

    #[test]
    fn fail_below_and_max_tasks_bound_the_lists() {
        let trials: Vec<Value> = ["t3", "t1", "t2", "private-9"]
            .iter()
            .map(|t| json!({"task": t, "status": "benchmark-complete", "reward": 0.5}))
            .collect();
        let summary = json!({"trials": trials, "a": 1, "b": 2});
        let s = run(json!({"max_tasks": 2}), summary.clone()).unwrap();
        assert_eq!(s["failing_tasks"], json!(["t1", "t2"]));
        assert_eq!(s["failing_tasks_total"], json!(3));
        assert_eq!(s["failing_private"], json!(1));
        assert_eq!(s["rollout_keys"], json!(["a", "b"]));
        assert_eq!(s["rollout_keys_total"], json!(3));
        let s = run(json!({"fail_below": 0.5}), summary).unwrap();
        assert_eq!(s["failing_tasks"], json!([]));
        assert_eq!(s["failing_private"], json!(0));
    }

    #[test]
    fn broken_summaries_are_errors_with_paths() {
        let err = |v: Value| run(json!({}), v).unwrap_err();
        assert_eq!(
            run_text(json!({}), "{\"a\":").unwrap_err(),
            "rollout summary is not valid JSON (line 1, column 5)"
        );
        assert_eq!(err(json!([1])), "rollout summary must be a JSON object");
        assert_eq!(
            err(json!({"trials": [{"status": "timeout"}]})),
            "rollout summary `trials[0]` has no string `task`"
        );
        assert_eq!(
            err(json!({"trials": [{"task": "t"}, 3]})),
            "rollout summary `trials[1]` must be an object"
        );
        assert_eq!(
            err(json!({"trials": [{"task": "t", "reward": "1"}]})),
            "rollout summary `trials[0].reward` must be a number or null"
        );
        assert_eq!(
            err(json!({"tasks": [{"task": "t", "trials": [{"status": 1}]}]})),
            "rollout summary `tasks[0].trials[0].status` must be a string"
        );
        assert_eq!(
            err(json!({"tasks": [{"task": "t"}]})),
            "rollout summary `tasks[0]` has no array `trials`"
        );
        assert_eq!(
            err(json!({"failed": ["a", 2]})),
            "rollout summary `failed[1]` must be a string"
        );
    }

    #[test]
    fn private_keys_are_recognized_exactly() {
        assert!(is_private_key("private-1"));
        assert!(is_private_key("private-42"));
        assert!(is_private_key("private-unknown"));
        assert!(!is_private_key("private-"));
        assert!(!is_private_key("private-x1"));
        assert!(!is_private_key("train-private-1"));
    }

    #[test]
    fn schema_defaults_and_types() {
        let schema = <TrajectoryOnly as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"max_tasks": 20, "fail_below": 1.0})
        );
        assert!(schema.normalize(r#"{"max_tasks": 0}"#).is_err());
        assert!(schema.normalize(r#"{"judge_model": "x"}"#).is_err());
    }
}
