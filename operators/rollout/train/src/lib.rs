//! rollout/train: run the parent on a sample of train tasks through the host's `tasks`
//! capability and summarize the trials.
//!
//! Task selection (shared, to the letter, with validate/minibatch_improvement):
//! `static` takes the first `budget_tasks` train tasks in the frozen split order;
//! `generation_shuffle` first orders the train tasks by the hex SHA-256 of
//! `"<seed>:<generation_id>\0<name>"` (ties, which need a collision, by name), so that a
//! generation always draws the same tasks and different generations draw different ones.
//! `seed` is the configured integer, not the call's `ctx.seed`: the host derives
//! `ctx.seed` per stage, and validate must be able to reproduce this stage's choice.
//!
//! One `tasks::run` call runs every selected task `repetitions` times. A trial *fails*
//! when its status is not `benchmark-complete`, it has no reward, or its reward is below
//! `pass_threshold`. The summary lists every trial with `passed` (failed ones with the tail of their
//! verifier output, at most `output_chars` characters), the mean reward over the trials
//! that have one, and the tasks with at least one failed trial; `cases.json` in
//! `/scratch` holds the full trial reports.
//!
//! When a trial left a trajectory, the host wrote it (bounded, as ATIF JSON and as a text
//! summary) into this call's `/scratch/trajectories/` and named both on the first line of
//! the report's verifier output (`[trajectory] {"json": …, "text": …, "steps": …}`). That
//! line becomes the trial's `trajectory` entry in the summary (paths relative to
//! `/scratch`, and the counts), is left out of the summary's `verifier_output` tail, and
//! both files become artifacts of the evidence, so they are copied on with it.

use std::path::Path;

use evolve_operator_sdk::config::{integer, number, string};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::tasks::{self, RunRequest, TasksError, TrialReport};

pub struct Train;

/// The artifact this operator writes, relative to `/scratch`.
pub const CASES: &str = "cases.json";

impl Operator for Train {
    const NAME: &'static str = "train";
    const SUMMARY: &'static str =
        "Run the parent on a sample of train tasks (static or per-generation shuffle).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "budget_tasks",
                integer()
                    .default(json!(8))
                    .minimum(1.0)
                    .description("How many train tasks to run (fewer if the split is smaller)"),
            )
            .field(
                "repetitions",
                integer()
                    .default(json!(1))
                    .minimum(1.0)
                    .description("Trials per task"),
            )
            .field(
                "sampling",
                string()
                    .default(json!("static"))
                    .choices([json!("static"), json!("generation_shuffle")])
                    .description(
                        "static: the first budget_tasks train tasks in frozen order; \
                         generation_shuffle: ordered by sha256(\"<seed>:<generation id>\\0<name>\") first",
                    ),
            )
            .field(
                "seed",
                integer()
                    .default(json!(0))
                    .description("Key of the generation_shuffle order (not ctx.seed, so validate can repeat it)"),
            )
            .field(
                "pass_threshold",
                number()
                    .default(json!(1.0))
                    .description("A trial passes when it completed with reward >= this"),
            )
            .field(
                "output_chars",
                integer().default(json!(300)).minimum(0.0).description(
                    "Characters of verifier output (the tail) kept per failed trial in the summary",
                ),
            )
    }
}

pub use evolve_operator_sdk::sampling::{
    Sampling, select_tasks, shuffle_key, trial_status_name as status_name,
};

pub use evolve_operator_sdk::feedback::tasks_error;

/// How the host's `tasks` capability starts the verifier output of a trial whose
/// trajectory it kept (or could not keep).
pub const TRAJECTORY_LINE: &str = "[trajectory] ";
/// Where the host writes trajectories, relative to `/scratch`.
pub const TRAJECTORIES_DIR: &str = "trajectories/";

/// The host's trajectory line of a report (its first line), as JSON, with the file
/// paths made relative to `/scratch`; `None` when the report has none. Paths outside
/// `/scratch/trajectories/` are dropped: only the host's files are named.
pub fn trajectory_of(t: &TrialReport) -> Option<Value> {
    let first = t.verifier_output.lines().next()?;
    let rest = first.strip_prefix(TRAJECTORY_LINE)?;
    let Ok(Value::Object(mut v)) = evolve_operator_sdk::serde_json::from_str::<Value>(rest) else {
        return None;
    };
    for key in ["json", "text"] {
        let rel = v
            .get(key)
            .and_then(Value::as_str)
            .and_then(|p| p.strip_prefix("/scratch/"))
            .filter(|p| p.starts_with(TRAJECTORIES_DIR) && !p.split('/').any(|s| s == ".."))
            .map(str::to_string);
        match rel {
            Some(rel) => v.insert(key.into(), Value::String(rel)),
            None => v.remove(key),
        };
    }
    Some(Value::Object(v))
}

/// The verifier output without the host's trajectory line.
pub fn output_of(t: &TrialReport) -> &str {
    match t.verifier_output.strip_prefix(TRAJECTORY_LINE) {
        Some(rest) => rest.split_once('\n').map_or("", |(_, after)| after),
        None => &t.verifier_output,
    }
}

/// The trajectory files named by `reports` that are regular files in `scratch`, in
/// report order: the evidence's artifacts after `cases.json`.
pub fn trajectory_artifacts(reports: &[TrialReport], scratch: &Path) -> Vec<String> {
    reports
        .iter()
        .filter_map(trajectory_of)
        .flat_map(|v| {
            ["json", "text"].map(|k| v.get(k).and_then(Value::as_str).map(str::to_string))
        })
        .flatten()
        .filter(|rel| std::fs::symlink_metadata(scratch.join(rel)).is_ok_and(|m| m.is_file()))
        .collect()
}

/// Whether a trial passed: completed, with a reward of at least `threshold`.
pub fn passed(t: &TrialReport, threshold: f64) -> bool {
    t.status == TrialStatus::BenchmarkComplete && t.reward.is_some_and(|r| r >= threshold)
}

/// The last `n` characters of `s`.
pub fn tail(s: &str, n: usize) -> &str {
    let count = s.chars().count();
    if count <= n {
        return s;
    }
    let start = s.char_indices().nth(count - n).map_or(s.len(), |(i, _)| i);
    &s[start..]
}

/// Reports in selection order (then repetition); any report for a task that was not
/// selected (the host never sends one) goes last, by name.
pub fn ordered(mut reports: Vec<TrialReport>, selected: &[String]) -> Vec<TrialReport> {
    let pos = |t: &str| selected.iter().position(|s| s == t).unwrap_or(usize::MAX);
    reports.sort_by(|a, b| {
        (pos(&a.task), &a.task, a.repetition).cmp(&(pos(&b.task), &b.task, b.repetition))
    });
    reports
}

/// What rollout/train reports: the summary object and the `cases.json` array.
pub fn summarize(
    sampling: Sampling,
    selected: &[String],
    reports: &[TrialReport],
    pass_threshold: f64,
    output_chars: usize,
) -> (Value, Value) {
    let mut trials = Vec::new();
    let mut failed: Vec<&str> = Vec::new();
    let mut rewards = Vec::new();
    for t in reports {
        let ok = passed(t, pass_threshold);
        let mut entry = json!({
            "task": t.task,
            "repetition": t.repetition,
            "status": status_name(t.status),
            "reward": t.reward,
            "passed": ok,
        });
        if let Some(r) = t.reward.filter(|r| r.is_finite()) {
            rewards.push(r);
        }
        if let Some(trajectory) = trajectory_of(t) {
            entry["trajectory"] = trajectory;
        }
        if !ok {
            if output_chars > 0 {
                entry["verifier_output"] = json!(tail(output_of(t), output_chars));
            }
            if !failed.contains(&t.task.as_str()) {
                failed.push(&t.task);
            }
        }
        trials.push(entry);
    }
    let mean = if rewards.is_empty() {
        None
    } else {
        Some(rewards.iter().sum::<f64>() / rewards.len() as f64)
    };
    let summary = json!({
        "sampling": sampling.name(),
        "tasks": selected,
        "trials": trials,
        "mean_reward": mean,
        "failed": failed,
    });
    let cases: Vec<Value> = reports
        .iter()
        .map(|t| {
            json!({
                "task": t.task,
                "repetition": t.repetition,
                "status": status_name(t.status),
                "reward": t.reward,
                "passed": passed(t, pass_threshold),
                "verifier_output": t.verifier_output,
                "duration_ms": t.duration_ms,
                "cost_usd": t.cost_usd,
            })
        })
        .collect();
    (summary, Value::Array(cases))
}

/// The whole operator with the host capability and `/scratch` passed in.
pub fn rollout_with(
    ctx: &Context,
    train: Vec<String>,
    run: impl FnOnce(&RunRequest) -> Result<Vec<TrialReport>, TasksError>,
    scratch: &Path,
) -> Result<Evidence, String> {
    let budget = ctx.i64("budget_tasks").unwrap_or(8);
    let repetitions = ctx.i64("repetitions").unwrap_or(1);
    if budget < 1 {
        return Err("config.budget_tasks must be an integer >= 1".into());
    }
    let repetitions = u32::try_from(repetitions)
        .ok()
        .filter(|r| *r >= 1)
        .ok_or("config.repetitions must be an integer >= 1")?;
    let sampling = Sampling::parse(ctx.str("sampling").unwrap_or("static"))?;
    let seed = ctx.i64("seed").unwrap_or(0);
    let threshold = ctx.f64("pass_threshold").unwrap_or(1.0);
    let output_chars =
        usize::try_from(ctx.i64("output_chars").unwrap_or(300).max(0)).unwrap_or(usize::MAX);
    if train.is_empty() {
        return Err("this experiment has no train tasks".into());
    }
    let selected = select_tasks(
        &train,
        usize::try_from(budget).unwrap_or(usize::MAX),
        sampling,
        seed,
        &ctx.generation_id,
    );
    let request = RunRequest {
        tasks: selected.clone(),
        repetitions,
    };
    let reports = ordered(run(&request).map_err(|e| tasks_error(&e))?, &selected);
    let (summary, cases) = summarize(sampling, &selected, &reports, threshold, output_chars);
    let mut text = cases.to_string();
    text.push('\n');
    std::fs::write(scratch.join(CASES), text).map_err(|e| format!("cannot write {CASES}: {e}"))?;
    let mut artifacts = vec![CASES.to_string()];
    artifacts.extend(trajectory_artifacts(&reports, scratch));
    Ok(Evidence {
        summary: summary.to_string(),
        artifacts,
    })
}

impl Rollout for Train {
    fn rollout(ctx: &Context, _parent: &ArchiveRow) -> Result<Evidence, String> {
        rollout_with(ctx, tasks::train_tasks(), tasks::run, Path::new("/scratch"))
    }
}

evolve_operator_sdk::export!(rollout: Train);

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("predict-{i:02}")).collect()
    }

    fn ctx(config: Value) -> Context {
        let schema = <Train as Operator>::config().build().unwrap();
        Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()))
    }

    fn report(
        task: &str,
        rep: u32,
        status: TrialStatus,
        reward: Option<f64>,
        out: &str,
    ) -> TrialReport {
        TrialReport {
            task: task.into(),
            repetition: rep,
            status,
            reward,
            verifier_output: out.into(),
            duration_ms: 10,
            cost_usd: None,
        }
    }

    #[test]
    fn shuffle_key_is_sha256_of_seed_generation_and_name() {
        // sha256("0:1\0predict-01"), computed independently.
        assert_eq!(
            shuffle_key(0, "1", "predict-01"),
            "bc549849a344e297f53bf68a40515b5ef676828c138a66654f35399b01ef30f3"
        );
    }

    #[test]
    fn static_takes_the_head_in_frozen_order() {
        let train = names(12);
        assert_eq!(
            select_tasks(&train, 3, Sampling::Static, 5, "7"),
            ["predict-01", "predict-02", "predict-03"]
        );
        assert_eq!(select_tasks(&train, 50, Sampling::Static, 0, "1"), train);
    }

    #[test]
    fn generation_shuffle_is_pinned_and_depends_on_generation_and_seed() {
        let train = names(12);
        let pick = |seed, g| select_tasks(&train, 4, Sampling::GenerationShuffle, seed, g);
        assert_eq!(
            pick(0, "1"),
            ["predict-09", "predict-05", "predict-07", "predict-12"]
        );
        assert_eq!(
            pick(0, "2"),
            ["predict-09", "predict-10", "predict-06", "predict-02"]
        );
        assert_eq!(
            pick(1, "1"),
            ["predict-03", "predict-08", "predict-10", "predict-05"]
        );
        assert_eq!(pick(0, "1"), pick(0, "1"));
        // The full order is a permutation of the split.
        let mut all = select_tasks(&train, 99, Sampling::GenerationShuffle, 0, "1");
        all.sort();
        assert_eq!(all, train);
    }

    #[test]
    fn tail_counts_characters() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("ab", 3), "ab");
        assert_eq!(tail("xé€z", 2), "€z");
        assert_eq!(tail("abc", 0), "");
    }

    #[test]
    fn rollout_runs_the_selection_and_summarizes() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(
            json!({"budget_tasks": 3, "repetitions": 2, "pass_threshold": 0.9,
                           "output_chars": 4}),
        );
        let mut seen = None;
        let ev = rollout_with(
            &c,
            names(12),
            |req| {
                seen = Some((req.tasks.clone(), req.repetitions));
                // The host answers sorted by name; the summary follows the selection.
                Ok(vec![
                    report(
                        "predict-01",
                        0,
                        TrialStatus::BenchmarkComplete,
                        Some(1.0),
                        "",
                    ),
                    report(
                        "predict-01",
                        1,
                        TrialStatus::BenchmarkComplete,
                        Some(0.5),
                        "wrong answer",
                    ),
                    report(
                        "predict-02",
                        0,
                        TrialStatus::Timeout,
                        None,
                        "x\n[timeout] agent ran 30s",
                    ),
                    report(
                        "predict-02",
                        1,
                        TrialStatus::BenchmarkComplete,
                        Some(0.25),
                        "",
                    ),
                    report(
                        "predict-03",
                        1,
                        TrialStatus::BenchmarkComplete,
                        Some(1.0),
                        "ok",
                    ),
                    report(
                        "predict-03",
                        0,
                        TrialStatus::BenchmarkComplete,
                        Some(0.75),
                        "close",
                    ),
                ])
            },
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            seen,
            Some((names(3), 2)),
            "one run call with the selected tasks"
        );
        assert_eq!(ev.artifacts, ["cases.json"]);
        let summary: Value = evolve_operator_sdk::serde_json::from_str(&ev.summary).unwrap();
        assert_eq!(
            summary,
            json!({
                "sampling": "static",
                "tasks": ["predict-01", "predict-02", "predict-03"],
                "trials": [
                    {"task": "predict-01", "repetition": 0, "status": "benchmark-complete", "reward": 1.0,
                     "passed": true},
                    {"task": "predict-01", "repetition": 1, "status": "benchmark-complete", "reward": 0.5,
                     "passed": false, "verifier_output": "swer"},
                    {"task": "predict-02", "repetition": 0, "status": "timeout", "reward": null,
                     "passed": false, "verifier_output": " 30s"},
                    {"task": "predict-02", "repetition": 1, "status": "benchmark-complete", "reward": 0.25,
                     "passed": false, "verifier_output": ""},
                    {"task": "predict-03", "repetition": 0, "status": "benchmark-complete", "reward": 0.75,
                     "passed": false, "verifier_output": "lose"},
                    {"task": "predict-03", "repetition": 1, "status": "benchmark-complete", "reward": 1.0,
                     "passed": true},
                ],
                "mean_reward": 0.7,
                "failed": ["predict-01", "predict-02", "predict-03"],
            })
        );
        let cases: Value = evolve_operator_sdk::serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("cases.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(cases.as_array().unwrap().len(), 6);
        assert_eq!(
            cases[2],
            json!({"task": "predict-02", "repetition": 0, "status": "timeout", "reward": null,
                   "passed": false, "verifier_output": "x\n[timeout] agent ran 30s",
                   "duration_ms": 10, "cost_usd": null})
        );
    }

    #[test]
    fn shuffled_rollout_names_its_sampling_and_an_all_pass_run_has_no_failures() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = ctx(json!({"budget_tasks": 2, "sampling": "generation_shuffle"}));
        c.generation_id = "2".into();
        let ev = rollout_with(
            &c,
            names(12),
            |req| {
                Ok(req
                    .tasks
                    .iter()
                    .map(|t| report(t, 0, TrialStatus::BenchmarkComplete, Some(1.0), "fine"))
                    .collect())
            },
            dir.path(),
        )
        .unwrap();
        let summary: Value = evolve_operator_sdk::serde_json::from_str(&ev.summary).unwrap();
        assert_eq!(summary["sampling"], "generation_shuffle");
        assert_eq!(summary["tasks"], json!(["predict-09", "predict-10"]));
        assert_eq!(summary["mean_reward"], json!(1.0));
        assert_eq!(summary["failed"], json!([]));
    }

    #[test]
    fn the_hosts_trajectory_lines_become_entries_and_artifacts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("trajectories/run-1")).unwrap();
        for f in ["predict-01__r0.json", "predict-01__r0.txt"] {
            std::fs::write(dir.path().join("trajectories/run-1").join(f), "{}").unwrap();
        }
        let kept = r#"[trajectory] {"json":"/scratch/trajectories/run-1/predict-01__r0.json","text":"/scratch/trajectories/run-1/predict-01__r0.txt","steps":3,"tool_calls":1,"prompt_tokens":10,"completion_tokens":2,"cached_tokens":0,"cost_usd":null,"truncated":false}"#;
        let c = ctx(json!({"budget_tasks": 3, "output_chars": 100}));
        let ev = rollout_with(
            &c,
            names(3),
            |_| {
                Ok(vec![
                    report(
                        "predict-01",
                        0,
                        TrialStatus::BenchmarkComplete,
                        Some(0.0),
                        &format!("{kept}\nwrong answer"),
                    ),
                    // A link planted outside the host's directory is not named.
                    report(
                        "predict-02",
                        0,
                        TrialStatus::BenchmarkComplete,
                        Some(1.0),
                        r#"[trajectory] {"json":"/scratch/cases.json","text":"/etc/passwd"}"#,
                    ),
                    report(
                        "predict-03",
                        0,
                        TrialStatus::Timeout,
                        None,
                        "[trajectory] {\"skipped\":\"trajectory.json is a link or not a regular file: not followed, not read\"}\n[agent_timeout] ran out",
                    ),
                ])
            },
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            ev.artifacts,
            [
                "cases.json",
                "trajectories/run-1/predict-01__r0.json",
                "trajectories/run-1/predict-01__r0.txt"
            ]
        );
        let summary: Value = evolve_operator_sdk::serde_json::from_str(&ev.summary).unwrap();
        let t = &summary["trials"];
        assert_eq!(
            t[0]["trajectory"]["text"],
            "trajectories/run-1/predict-01__r0.txt"
        );
        assert_eq!(t[0]["trajectory"]["steps"], 3);
        // The line is not part of the failure's output, which operators read from its end.
        assert_eq!(t[0]["verifier_output"], "wrong answer");
        assert_eq!(t[1]["trajectory"], json!({}));
        assert!(
            t[2]["trajectory"]["skipped"]
                .as_str()
                .unwrap()
                .contains("not followed")
        );
        assert_eq!(t[2]["verifier_output"], "[agent_timeout] ran out");
        // A report without the line is unchanged.
        let plain = report("x", 0, TrialStatus::Timeout, None, "a\nb");
        assert_eq!((trajectory_of(&plain), output_of(&plain)), (None, "a\nb"));
    }

    #[test]
    fn no_rewards_gives_a_null_mean() {
        let (s, _) = summarize(
            Sampling::Static,
            &names(1),
            &[report(
                "predict-01",
                0,
                TrialStatus::InfrastructureFailed,
                None,
                "[docker] down",
            )],
            1.0,
            300,
        );
        assert_eq!(s["mean_reward"], Value::Null);
        assert_eq!(s["failed"], json!(["predict-01"]));
        assert_eq!(s["trials"][0]["status"], "infrastructure-failed");
        assert_eq!(s["trials"][0]["verifier_output"], "[docker] down");
    }

    #[test]
    fn output_chars_zero_omits_verifier_output() {
        let (s, _) = summarize(
            Sampling::Static,
            &names(1),
            &[report(
                "predict-01",
                0,
                TrialStatus::BenchmarkComplete,
                Some(0.0),
                "boom",
            )],
            1.0,
            0,
        );
        assert_eq!(
            s["trials"][0],
            json!({"task": "predict-01", "repetition": 0, "status": "benchmark-complete", "reward": 0.0,
                   "passed": false})
        );
    }

    #[test]
    fn tasks_errors_become_operator_errors() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(json!({}));
        let err = |e: TasksError| rollout_with(&c, names(2), |_| Err(e), dir.path()).unwrap_err();
        assert_eq!(
            err(TasksError::BudgetExhausted),
            "tasks: the experiment's budget is exhausted"
        );
        assert_eq!(
            err(TasksError::Unavailable("no engine".into())),
            "tasks: unavailable: no engine"
        );
        assert_eq!(
            err(TasksError::UnknownTask("x".into())),
            "tasks: \"x\" is not a train task"
        );
        assert_eq!(
            err(TasksError::InvalidRequest("dup".into())),
            "tasks: invalid request: dup"
        );
        assert_eq!(
            rollout_with(&c, vec![], |_| unreachable!(), dir.path()).unwrap_err(),
            "this experiment has no train tasks"
        );
        assert!(!dir.path().join("cases.json").exists());
    }

    #[test]
    fn schema_defaults_and_bounds() {
        let schema = <Train as Operator>::config().build().unwrap();
        let n = schema.normalize("{}").unwrap();
        assert_eq!(
            Value::Object(n),
            json!({"budget_tasks": 8, "repetitions": 1, "sampling": "static", "seed": 0,
                   "pass_threshold": 1.0, "output_chars": 300})
        );
        assert!(schema.normalize(r#"{"budget_tasks": 0}"#).is_err());
        assert!(schema.normalize(r#"{"repetitions": 0}"#).is_err());
        assert!(schema.normalize(r#"{"sampling": "head"}"#).is_err());
        assert!(schema.normalize(r#"{"tasks": ["a"]}"#).is_err());
    }
}
