//! rollout/parent_evaluation: reuse the parent's certified evaluation as evidence
//! instead of running anything.
//!
//! The summary is built from the parent archive row alone:
//!
//! ```json
//! {"rollout": "parent_evaluation", "parent": "2", "score": 0.5,
//!  "tasks": [{"task": "train-1", "mean_reward": 1.0,
//!             "trials": [{"repetition": 0, "status": "benchmark-complete", "reward": 1.0}]}],
//!  "tasks_total": 3, "failed": ["private-2"], "failed_total": 1}
//! ```
//!
//! * `tasks` follows the row's task vector order. Train tasks carry their real names;
//!   every other task appears under the opaque `private-<n>` key the host gave it, kept
//!   as it is. A key listed twice is merged into its first position.
//! * A task's `mean_reward` is the mean over all of its trials, a trial without a reward
//!   counting 0 (as the canonical score counts it); `null` for a task with no trial.
//!   Trial statuses use the WIT names (`benchmark-complete`, `timeout`, …).
//! * `failed` lists, in the same order, the tasks whose mean reward is below
//!   `fail_below` (a task with no trial counts as failed).
//! * `tasks` and `failed` each hold at most `max_tasks` entries; `tasks_total` and
//!   `failed_total` count them all.
//!
//! No artifacts. The parent must carry a certified evaluation (a non-empty task vector);
//! the call fails otherwise, and when the row is not the parent the context names.

use evolve_operator_sdk::prelude::*;

pub struct ParentEvaluation;

const FAIL_BELOW: f64 = 1.0;
const MAX_TASKS: i64 = 50;

impl Operator for ParentEvaluation {
    const NAME: &'static str = "parent_evaluation";
    const SUMMARY: &'static str = "Reuse the parent's certified per-task results as evidence (no new runs): per-task mean rewards and the failing tasks.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "fail_below",
                config::number()
                    .default(json!(FAIL_BELOW))
                    .description("A task whose mean reward is below this is listed as failed"),
            )
            .field(
                "max_tasks",
                config::integer()
                    .default(json!(MAX_TASKS))
                    .minimum(1.0)
                    .description("At most this many entries in `tasks` and in `failed`"),
            )
    }
}

/// The WIT name of a trial status.
pub fn trial_status_name(s: TrialStatus) -> &'static str {
    match s {
        TrialStatus::BenchmarkComplete => "benchmark-complete",
        TrialStatus::CandidateInvalid => "candidate-invalid",
        TrialStatus::InfrastructureFailed => "infrastructure-failed",
        TrialStatus::Timeout => "timeout",
        TrialStatus::Cancelled => "cancelled",
    }
}

/// The evidence summary for `parent` (see the module documentation).
pub fn summary(parent: &ArchiveRow, fail_below: f64, max_tasks: usize) -> Result<Value, String> {
    let id = &parent.generation_id;
    if parent.task_vector.is_empty() {
        return Err(format!(
            "parent generation {id} has no certified per-task results to reuse"
        ));
    }
    // Merge repeated keys into their first position.
    let mut tasks: Vec<(&str, Vec<&Trial>)> = Vec::new();
    for ts in &parent.task_vector {
        match tasks.iter_mut().find(|(t, _)| *t == ts.task) {
            Some((_, trials)) => trials.extend(&ts.trials),
            None => tasks.push((ts.task.as_str(), ts.trials.iter().collect())),
        }
    }
    let mut listed = Vec::new();
    let mut failed = Vec::new();
    let mut failed_total = 0usize;
    for (task, trials) in &tasks {
        let mut sum = 0.0;
        let mut out = Vec::with_capacity(trials.len());
        for t in trials {
            if let Some(r) = t.reward {
                if !r.is_finite() {
                    return Err(format!(
                        "parent generation {id}: task {task} repetition {} has a non-finite reward",
                        t.repetition
                    ));
                }
                sum += r;
            }
            out.push(json!({
                "repetition": t.repetition,
                "status": trial_status_name(t.status),
                "reward": t.reward,
            }));
        }
        let mean = (!trials.is_empty()).then(|| sum / trials.len() as f64);
        if mean.is_none_or(|m| m < fail_below) {
            failed_total += 1;
            if failed.len() < max_tasks {
                failed.push(json!(task));
            }
        }
        if listed.len() < max_tasks {
            listed.push(json!({"task": task, "mean_reward": mean, "trials": out}));
        }
    }
    Ok(json!({
        "rollout": "parent_evaluation",
        "parent": id,
        "score": parent.score.filter(|s| s.is_finite()),
        "tasks": listed,
        "tasks_total": tasks.len(),
        "failed": failed,
        "failed_total": failed_total,
    }))
}

impl Rollout for ParentEvaluation {
    fn rollout(ctx: &Context, parent: &ArchiveRow) -> Result<Evidence, String> {
        if let Some(p) = &ctx.parent
            && *p != parent.generation_id
        {
            return Err(format!(
                "the parent row is generation {} but the call context names parent {p}",
                parent.generation_id
            ));
        }
        let fail_below = ctx.f64("fail_below").unwrap_or(FAIL_BELOW);
        let max_tasks = ctx.i64("max_tasks").unwrap_or(MAX_TASKS).max(1) as usize;
        Ok(Evidence {
            summary: summary(parent, fail_below, max_tasks)?.to_string(),
            artifacts: vec![],
        })
    }
}

evolve_operator_sdk::export!(rollout: ParentEvaluation);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::row;

    fn trial(repetition: u32, status: TrialStatus, reward: Option<f64>) -> Trial {
        Trial {
            repetition,
            status,
            reward,
        }
    }

    fn ok(repetition: u32, reward: f64) -> Trial {
        trial(repetition, TrialStatus::BenchmarkComplete, Some(reward))
    }

    fn parent(tasks: Vec<(&str, Vec<Trial>)>) -> ArchiveRow {
        ArchiveRow {
            parent: Some("1".into()),
            task_vector: tasks
                .into_iter()
                .map(|(t, trials)| TaskScore {
                    task: t.into(),
                    trials,
                })
                .collect(),
            ..row("2", 2, Some(0.5), true)
        }
    }

    fn run(config: Value, ctx_parent: Option<&str>, p: &ArchiveRow) -> Result<Value, String> {
        let schema = <ParentEvaluation as Operator>::config().build().unwrap();
        let mut ctx = Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()));
        ctx.parent = ctx_parent.map(str::to_string);
        let e = ParentEvaluation::rollout(&ctx, p)?;
        assert!(e.artifacts.is_empty());
        Ok(evolve_operator_sdk::serde_json::from_str(&e.summary).unwrap())
    }

    fn sample() -> ArchiveRow {
        parent(vec![
            ("train-a", vec![ok(0, 1.0), ok(1, 1.0)]),
            ("private-1", vec![ok(0, 1.0), ok(1, 0.0)]),
            (
                "train-b",
                vec![ok(0, 1.0), trial(1, TrialStatus::Timeout, None)],
            ),
            ("private-2", vec![ok(0, 1.0)]),
        ])
    }

    #[test]
    fn summary_lists_tasks_means_and_failures() {
        let s = run(json!({}), Some("2"), &sample()).unwrap();
        assert_eq!(
            s,
            json!({
                "rollout": "parent_evaluation",
                "parent": "2",
                "score": 0.5,
                "tasks": [
                    {"task": "train-a", "mean_reward": 1.0, "trials": [
                        {"repetition": 0, "status": "benchmark-complete", "reward": 1.0},
                        {"repetition": 1, "status": "benchmark-complete", "reward": 1.0}]},
                    {"task": "private-1", "mean_reward": 0.5, "trials": [
                        {"repetition": 0, "status": "benchmark-complete", "reward": 1.0},
                        {"repetition": 1, "status": "benchmark-complete", "reward": 0.0}]},
                    {"task": "train-b", "mean_reward": 0.5, "trials": [
                        {"repetition": 0, "status": "benchmark-complete", "reward": 1.0},
                        {"repetition": 1, "status": "timeout", "reward": null}]},
                    {"task": "private-2", "mean_reward": 1.0, "trials": [
                        {"repetition": 0, "status": "benchmark-complete", "reward": 1.0}]},
                ],
                "tasks_total": 4,
                "failed": ["private-1", "train-b"],
                "failed_total": 2,
            })
        );
    }

    #[test]
    fn fail_below_and_max_tasks() {
        let s = run(json!({"fail_below": 0.5}), None, &sample()).unwrap();
        assert_eq!(s["failed"], json!([]));
        assert_eq!(s["failed_total"], json!(0));
        let s = run(json!({"fail_below": 1.5, "max_tasks": 1}), None, &sample()).unwrap();
        assert_eq!(s["tasks"].as_array().unwrap().len(), 1);
        assert_eq!(s["tasks"][0]["task"], json!("train-a"));
        assert_eq!(s["tasks_total"], json!(4));
        assert_eq!(s["failed"], json!(["train-a"]));
        assert_eq!(s["failed_total"], json!(4));
    }

    #[test]
    fn repeated_keys_merge_and_empty_tasks_fail() {
        let p = parent(vec![
            ("t", vec![ok(0, 1.0)]),
            ("u", vec![]),
            ("t", vec![ok(1, 0.0)]),
        ]);
        let s = run(json!({}), None, &p).unwrap();
        assert_eq!(s["tasks"][0]["task"], json!("t"));
        assert_eq!(s["tasks"][0]["mean_reward"], json!(0.5));
        assert_eq!(s["tasks"][0]["trials"].as_array().unwrap().len(), 2);
        assert_eq!(
            s["tasks"][1],
            json!({"task": "u", "mean_reward": null, "trials": []})
        );
        assert_eq!(s["tasks_total"], json!(2));
        assert_eq!(s["failed"], json!(["t", "u"]));
    }

    #[test]
    fn unscored_parent_has_null_score() {
        let mut p = sample();
        p.score = None;
        assert_eq!(run(json!({}), None, &p).unwrap()["score"], Value::Null);
    }

    #[test]
    fn contract_violations_are_errors() {
        assert_eq!(
            run(json!({}), None, &parent(vec![])).unwrap_err(),
            "parent generation 2 has no certified per-task results to reuse"
        );
        assert_eq!(
            run(json!({}), Some("1"), &sample()).unwrap_err(),
            "the parent row is generation 2 but the call context names parent 1"
        );
        let p = parent(vec![("t", vec![ok(3, f64::NAN)])]);
        assert_eq!(
            run(json!({}), None, &p).unwrap_err(),
            "parent generation 2: task t repetition 3 has a non-finite reward"
        );
    }

    #[test]
    fn schema_defaults_and_types() {
        let schema = <ParentEvaluation as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"fail_below": 1.0, "max_tasks": 50})
        );
        assert!(schema.normalize(r#"{"max_tasks": 0}"#).is_err());
        assert!(schema.normalize(r#"{"fail_below": "1"}"#).is_err());
        assert!(schema.normalize(r#"{"field_limit": 2000}"#).is_err());
    }
}
