//! validate/minibatch_improvement: run the mutated child on the train minibatch its
//! parent was rolled out on, and accept it only if its minibatch score clears the bar,
//! as RSIHub's `library/validate/minibatch_improvement.py` (GEPA's acceptance test) does.
//!
//! The minibatch and the bar come from this generation's rollout evidence (the parent's
//! run, which the host passes to validate): when it lists train trials
//! (rollout/train's `trials`), the child runs on exactly the tasks the parent ran, and
//! the bar is the parent's total there. Without such evidence the minibatch is `tasks`
//! when configured, otherwise rollout/train's selection recomputed from the same
//! `budget_tasks`, `sampling` and `seed` (pinned by the same tests), and the bar is
//! `baseline` (a mean score); with neither, the child is rejected with the reason.
//!
//! Scoring (RSIHub's): a trial scores its reward. A trial without a reward (whatever its
//! status), an `infrastructure-failed` or `cancelled` trial, or a task with no trial, on
//! either side, makes the comparison incomplete, and an incomplete comparison is
//! rejected with the reason. A side's total is the sum over tasks of the per-task mean
//! score; the child's total is compared with the parent's (its mean with `baseline`).
//! `require_complete: false` restores the lenient scoring: a `candidate-invalid` or
//! `timeout` trial without a reward scores 0 and the parent's unscored tasks are left
//! out of the minibatch.
//!
//! `strict` accepts child > bar, `non_decreasing` child >= bar. The RSIHub table in
//! `tests/rsihub_golden.json` pins these decisions.

use std::path::Path;

use evolve_operator_sdk::config::{array, boolean, integer, number, string};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::tasks::{self, RunRequest, TasksError, TrialReport};

pub struct MinibatchImprovement;

/// Artifacts, relative to `/scratch`.
pub const COMPARISON: &str = "comparison.json";
pub const CHILD_CASES: &str = "child-cases.json";

impl Operator for MinibatchImprovement {
    const NAME: &'static str = "minibatch_improvement";
    const SUMMARY: &'static str =
        "Run the child on its parent's rollout minibatch; accept if it beats the parent there.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "baseline",
                number().description(
                    "The bar when the rollout evidence has no train trials (e.g. rollout/noop): \
                     the minibatch score the child must beat",
                ),
            )
            .field(
                "criterion",
                string()
                    .default(json!("strict"))
                    .choices([json!("strict"), json!("non_decreasing")])
                    .description("strict: child > baseline; non_decreasing: child >= baseline"),
            )
            .field(
                "require_complete",
                boolean().default(json!(true)).description(
                    "Reject an incomplete comparison (RSIHub); false scores the child's \
                         timeouts without reward as 0 and leaves out tasks the parent has no \
                         score for",
                ),
            )
            .field(
                "tasks",
                array(string())
                    .minimum(1.0)
                    .description("Explicit train tasks; otherwise rollout/train's selection"),
            )
            .field(
                "budget_tasks",
                integer()
                    .default(json!(8))
                    .minimum(1.0)
                    .description("As rollout/train's budget_tasks"),
            )
            .field(
                "sampling",
                string()
                    .default(json!("static"))
                    .choices([json!("static"), json!("generation_shuffle")])
                    .description("As rollout/train's sampling"),
            )
            .field(
                "seed",
                integer()
                    .default(json!(0))
                    .description("As rollout/train's seed"),
            )
            .field(
                "repetitions",
                integer()
                    .default(json!(1))
                    .minimum(1.0)
                    .description("Trials per task"),
            )
            .refine(check_config)
    }
}

fn check_config(c: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let mut seen = Vec::new();
    for t in c
        .get("tasks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if seen.contains(&t) {
            return Err(vec![Violation::new("tasks", "must not name a task twice")]);
        }
        seen.push(t);
    }
    Ok(())
}

pub use evolve_operator_sdk::sampling::{
    Sampling, select_tasks, shuffle_key, trial_status_name as status_name,
};

/// A trial's score, or `None` when it cannot be scored. As in RSIHub, a trial scores its
/// (finite) reward, and a trial without one, or an `infrastructure-failed` or `cancelled`
/// trial, cannot be scored. With `require_complete: false` a `candidate-invalid` or
/// `timeout` trial without a reward scores 0 instead (the child's own failure).
pub fn trial_score(t: &TrialReport, require_complete: bool) -> Option<f64> {
    let reward = t.reward.filter(|r| r.is_finite());
    match t.status {
        TrialStatus::InfrastructureFailed | TrialStatus::Cancelled => None,
        TrialStatus::BenchmarkComplete => reward,
        TrialStatus::CandidateInvalid | TrialStatus::Timeout if require_complete => reward,
        TrialStatus::CandidateInvalid | TrialStatus::Timeout => Some(reward.unwrap_or(0.0)),
    }
}

/// One side's minibatch result.
#[derive(Debug, Clone, PartialEq)]
pub struct Minibatch {
    /// Per-task mean score, in minibatch order; `None` for a task with no scorable trial.
    pub task_scores: Vec<(String, Option<f64>)>,
    /// `task#repetition (status)` of every trial that cannot be scored, and
    /// `task (no trial)` for a task the host returned nothing for.
    pub unscorable: Vec<String>,
    /// Sum of the task scores (RSIHub's `total`), when every task has one.
    pub total: Option<f64>,
    /// Mean of the task scores, when every task has one.
    pub mean: Option<f64>,
}

/// Score trials on `tasks`.
pub fn score(tasks: &[String], reports: &[TrialReport], require_complete: bool) -> Minibatch {
    let mut task_scores = Vec::new();
    let mut unscorable = Vec::new();
    for task in tasks {
        let mut trials: Vec<&TrialReport> = reports.iter().filter(|t| &t.task == task).collect();
        trials.sort_by_key(|t| t.repetition);
        if trials.is_empty() {
            unscorable.push(format!("{task} (no trial)"));
        }
        let mut scores = Vec::new();
        for t in trials {
            match trial_score(t, require_complete) {
                Some(s) => scores.push(s),
                None => unscorable.push(format!(
                    "{task}#{} ({})",
                    t.repetition,
                    status_name(t.status)
                )),
            }
        }
        let mean = (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64);
        task_scores.push((task.clone(), mean));
    }
    let complete = unscorable.is_empty() && !tasks.is_empty();
    let total = complete.then(|| task_scores.iter().filter_map(|(_, s)| *s).sum::<f64>());
    Minibatch {
        mean: total.map(|t| t / task_scores.len() as f64),
        task_scores,
        unscorable,
        total,
    }
}

/// What the child is compared with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bar {
    /// The parent's total on the same tasks (RSIHub: Σ per-task means, child vs parent).
    ParentTotal(f64),
    /// `config.baseline`, a minibatch mean score.
    Baseline(f64),
}

/// Accept or reject a scored minibatch against the bar.
pub fn judge(m: &Minibatch, bar: Bar, strict: bool) -> (bool, String) {
    let (Some(total), Some(mean)) = (m.total, m.mean) else {
        return (
            false,
            format!(
                "minibatch comparison is incomplete (infrastructure failure or missing reward): {}",
                m.unscorable.join(", ")
            ),
        );
    };
    let (value, bar, what, against) = match bar {
        Bar::ParentTotal(p) => (total, p, "total", "parent total"),
        Bar::Baseline(b) => (mean, b, "mean", "baseline"),
    };
    let accept = if strict { value > bar } else { value >= bar };
    let op = match (strict, accept) {
        (true, true) => ">",
        (true, false) => "<=",
        (false, true) => ">=",
        (false, false) => "<",
    };
    let verdict = if accept {
        "improved"
    } else {
        "did not improve"
    };
    (
        accept,
        format!(
            "minibatch {verdict}: child {what} {value:.6} {op} {against} {bar:.6} (delta {:+.6})",
            value - bar
        ),
    )
}

/// The parent's side of the comparison, from this generation's rollout evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Parent {
    /// The tasks the child runs on, in first-seen order.
    pub tasks: Vec<String>,
    /// Σ of the parent's per-task means over `tasks` (over the scored ones when the
    /// comparison is incomplete, for the record).
    pub total: f64,
    /// The parent's trials that cannot be scored (empty with `require_complete: false`,
    /// where unscored tasks are left out of `tasks` instead).
    pub unscorable: Vec<String>,
}

/// The parent's minibatch from rollout evidence in rollout/train's shape
/// (`{"trials": [{"task", "repetition", "status", "reward"}, …]}`), scored like the
/// child's. As in RSIHub the minibatch is every task the parent ran, and any parent trial
/// that cannot be scored makes the comparison incomplete; with `require_complete: false`
/// the minibatch is the tasks the parent has a score for. `None` when the evidence has no
/// train trials (or, lenient, none with a score).
pub fn parent_minibatch(rollout: Option<&Evidence>, require_complete: bool) -> Option<Parent> {
    let summary: Value = evolve_operator_sdk::serde_json::from_str(&rollout?.summary).ok()?;
    let mut reports = Vec::new();
    for t in summary.get("trials")?.as_array()? {
        let status = match t.get("status")?.as_str()? {
            "benchmark-complete" | "benchmark_complete" => TrialStatus::BenchmarkComplete,
            "candidate-invalid" | "candidate_invalid" => TrialStatus::CandidateInvalid,
            "timeout" => TrialStatus::Timeout,
            "cancelled" => TrialStatus::Cancelled,
            _ => TrialStatus::InfrastructureFailed,
        };
        reports.push(TrialReport {
            task: t.get("task")?.as_str()?.to_string(),
            repetition: t.get("repetition").and_then(Value::as_u64).unwrap_or(0) as u32,
            status,
            reward: t.get("reward").and_then(Value::as_f64),
            verifier_output: String::new(),
            duration_ms: 0,
            cost_usd: None,
        });
    }
    let mut tasks: Vec<String> = Vec::new();
    for r in &reports {
        if !tasks.contains(&r.task) {
            tasks.push(r.task.clone());
        }
    }
    let scored = score(&tasks, &reports, require_complete);
    let total = scored
        .task_scores
        .iter()
        .filter_map(|(_, s)| *s)
        .sum::<f64>();
    if require_complete {
        return (!tasks.is_empty()).then_some(Parent {
            tasks,
            total,
            unscorable: scored.unscorable,
        });
    }
    let kept: Vec<String> = scored
        .task_scores
        .into_iter()
        .filter_map(|(t, s)| s.map(|_| t))
        .collect();
    (!kept.is_empty()).then_some(Parent {
        tasks: kept,
        total,
        unscorable: vec![],
    })
}

/// The whole operator with the rollout evidence, the host capability and `/scratch`
/// passed in.
pub fn validate_with(
    ctx: &Context,
    rollout: Option<&Evidence>,
    train: impl FnOnce() -> Vec<String>,
    run: impl FnOnce(&RunRequest) -> Result<Vec<TrialReport>, TasksError>,
    scratch: &Path,
) -> Result<Validation, String> {
    let require_complete = ctx.bool("require_complete").unwrap_or(true);
    let parent = parent_minibatch(rollout, require_complete);
    let bar = match (&parent, ctx.f64("baseline")) {
        (Some(p), _) => Bar::ParentTotal(p.total),
        (None, Some(b)) if b.is_finite() => Bar::Baseline(b),
        (None, Some(_)) => return Err("config.baseline must be a finite number".into()),
        (None, None) => {
            return Ok(reject(
                "no bar to compare with: the rollout evidence has no train trials (bind \
                 rollout/train) and config.baseline is not set",
            ));
        }
    };
    let strict = match ctx.str("criterion").unwrap_or("strict") {
        "strict" => true,
        "non_decreasing" => false,
        other => {
            return Err(format!(
                "config.criterion must be strict or non_decreasing, not {other:?}"
            ));
        }
    };
    let repetitions = u32::try_from(ctx.i64("repetitions").unwrap_or(1))
        .ok()
        .filter(|r| *r >= 1)
        .ok_or("config.repetitions must be an integer >= 1")?;
    // An incomplete parent side cannot become complete: reject before spending the
    // child's trials on it (RSIHub runs the child first, then rejects the same way).
    if let Some(p) = parent.as_ref().filter(|p| !p.unscorable.is_empty()) {
        return Ok(reject(&format!(
            "minibatch comparison is incomplete (infrastructure failure or missing reward in \
             the parent's rollout): {}",
            p.unscorable.join(", ")
        )));
    }
    let minibatch: Vec<String> = match (&parent, ctx.config.get("tasks").and_then(Value::as_array))
    {
        (Some(p), _) => p.tasks.clone(),
        (None, Some(list)) => list
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or("config.tasks must list task names")?,
        (None, None) => {
            let budget = ctx.i64("budget_tasks").unwrap_or(8);
            if budget < 1 {
                return Err("config.budget_tasks must be an integer >= 1".into());
            }
            let sampling = Sampling::parse(ctx.str("sampling").unwrap_or("static"))?;
            let train = train();
            if train.is_empty() {
                return Ok(reject(
                    "minibatch comparison is incomplete: this experiment has no train tasks",
                ));
            }
            select_tasks(
                &train,
                usize::try_from(budget).unwrap_or(usize::MAX),
                sampling,
                ctx.i64("seed").unwrap_or(0),
                &ctx.generation_id,
            )
        }
    };
    if minibatch.is_empty() {
        return Err("config.tasks must name at least one task".into());
    }
    let request = RunRequest {
        tasks: minibatch.clone(),
        repetitions,
    };
    let reports = match run(&request) {
        Ok(r) => r,
        Err(TasksError::UnknownTask(name)) => {
            return Err(format!("tasks: {name:?} is not a train task"));
        }
        Err(TasksError::InvalidRequest(msg)) => {
            return Err(format!("tasks: invalid request: {msg}"));
        }
        Err(TasksError::BudgetExhausted) => {
            return Ok(reject(
                "minibatch comparison is incomplete: the experiment's budget is exhausted",
            ));
        }
        Err(TasksError::Unavailable(msg)) => {
            return Ok(reject(&format!(
                "minibatch comparison is incomplete: tasks unavailable: {msg}"
            )));
        }
    };
    let m = score(&minibatch, &reports, require_complete);
    let (accept, reason) = judge(&m, bar, strict);
    let (bar_value, bar_from, child_value) = match bar {
        Bar::ParentTotal(p) => (p, "parent rollout total", m.total),
        Bar::Baseline(b) => (b, "config.baseline mean", m.mean),
    };
    let comparison = json!({
        "criterion": if strict { "strict" } else { "non_decreasing" },
        "require_complete": require_complete,
        "bar": bar_value,
        "bar_from": bar_from,
        "tasks": minibatch,
        "child_scores": Value::Object(
            m.task_scores.iter().map(|(t, s)| (t.clone(), json!(s))).collect()
        ),
        "child_total": m.total,
        "child_mean": m.mean,
        "delta": child_value.map(|x| x - bar_value),
        "complete": m.total.is_some(),
        "unscorable": m.unscorable,
        "accepted": accept,
    });
    let cases: Vec<Value> = reports
        .iter()
        .map(|t| {
            json!({
                "task": t.task,
                "repetition": t.repetition,
                "status": status_name(t.status),
                "reward": t.reward,
                "verifier_output": t.verifier_output,
                "duration_ms": t.duration_ms,
                "cost_usd": t.cost_usd,
            })
        })
        .collect();
    for (name, value) in [(COMPARISON, comparison), (CHILD_CASES, Value::Array(cases))] {
        let mut text = value.to_string();
        text.push('\n');
        std::fs::write(scratch.join(name), text)
            .map_err(|e| format!("cannot write {name}: {e}"))?;
    }
    Ok(Validation {
        accept,
        reason,
        artifacts: vec![COMPARISON.into(), CHILD_CASES.into()],
    })
}

fn reject(reason: &str) -> Validation {
    Validation {
        accept: false,
        reason: reason.into(),
        artifacts: vec![],
    }
}

impl Validate for MinibatchImprovement {
    fn validate(
        ctx: &Context,
        _changed: &[String],
        rollout: Option<&Evidence>,
    ) -> Result<Validation, String> {
        validate_with(
            ctx,
            rollout,
            tasks::train_tasks,
            tasks::run,
            Path::new("/scratch"),
        )
    }
}

evolve_operator_sdk::export!(validate: MinibatchImprovement);

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("predict-{i:02}")).collect()
    }

    fn ctx(config: Value) -> Context {
        let schema = <MinibatchImprovement as Operator>::config()
            .build()
            .unwrap();
        Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()))
    }

    fn report(task: &str, rep: u32, status: TrialStatus, reward: Option<f64>) -> TrialReport {
        TrialReport {
            task: task.into(),
            repetition: rep,
            status,
            reward,
            verifier_output: String::new(),
            duration_ms: 5,
            cost_usd: None,
        }
    }

    fn done(task: &str, rep: u32, reward: f64) -> TrialReport {
        report(task, rep, TrialStatus::BenchmarkComplete, Some(reward))
    }

    #[test]
    fn selection_matches_rollout_train() {
        // The same pins as rollout/train's tests: the two copies must not drift.
        assert_eq!(
            shuffle_key(0, "1", "predict-01"),
            "bc549849a344e297f53bf68a40515b5ef676828c138a66654f35399b01ef30f3"
        );
        let train = names(12);
        assert_eq!(
            select_tasks(&train, 3, Sampling::Static, 5, "7"),
            ["predict-01", "predict-02", "predict-03"]
        );
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
    }

    #[test]
    fn scores_are_per_task_means_summed_over_tasks() {
        let reports = [
            done("predict-02", 1, 0.5),
            done("predict-01", 0, 1.0),
            done("predict-02", 0, 0.0),
            report("predict-01", 1, TrialStatus::Timeout, None),
        ];
        // RSIHub's scoring: the timeout without a reward makes it incomplete.
        let m = score(&names(2), &reports, true);
        assert_eq!(m.unscorable, ["predict-01#1 (timeout)"]);
        assert_eq!((m.total, m.mean), (None, None));
        // Lenient: it scores 0.
        let m = score(&names(2), &reports, false);
        assert_eq!(
            m.task_scores,
            vec![
                ("predict-01".to_string(), Some(0.5)),
                ("predict-02".to_string(), Some(0.25))
            ]
        );
        assert!(m.unscorable.is_empty());
        assert_eq!((m.total, m.mean), (Some(0.75), Some(0.375)));
    }

    #[test]
    fn infrastructure_and_missing_results_make_it_incomplete() {
        let m = score(
            &names(3),
            &[
                report("predict-01", 0, TrialStatus::InfrastructureFailed, None),
                report("predict-02", 0, TrialStatus::BenchmarkComplete, None),
                report("predict-02", 1, TrialStatus::Cancelled, Some(1.0)),
                report("predict-09", 0, TrialStatus::BenchmarkComplete, Some(1.0)),
            ],
            false,
        );
        assert_eq!(
            m.unscorable,
            [
                "predict-01#0 (infrastructure-failed)",
                "predict-02#0 (benchmark-complete)",
                "predict-02#1 (cancelled)",
                "predict-03 (no trial)"
            ]
        );
        assert_eq!(m.mean, None);
        assert_eq!(
            judge(&m, Bar::Baseline(0.1), true),
            (
                false,
                "minibatch comparison is incomplete (infrastructure failure or missing reward): \
                 predict-01#0 (infrastructure-failed), predict-02#0 (benchmark-complete), \
                 predict-02#1 (cancelled), predict-03 (no trial)"
                    .to_string()
            )
        );
    }

    #[test]
    fn strict_and_non_decreasing_criteria() {
        let m = score(&names(1), &[done("predict-01", 0, 0.5)], true);
        assert_eq!(
            judge(&m, Bar::Baseline(0.5), true),
            (
                false,
                "minibatch did not improve: child mean 0.500000 <= baseline 0.500000 (delta +0.000000)"
                    .to_string()
            )
        );
        assert_eq!(
            judge(&m, Bar::Baseline(0.5), false),
            (
                true,
                "minibatch improved: child mean 0.500000 >= baseline 0.500000 (delta +0.000000)"
                    .to_string()
            )
        );
        assert_eq!(
            judge(&m, Bar::Baseline(0.25), true),
            (
                true,
                "minibatch improved: child mean 0.500000 > baseline 0.250000 (delta +0.250000)"
                    .to_string()
            )
        );
        assert_eq!(
            judge(&m, Bar::Baseline(0.75), false),
            (
                false,
                "minibatch did not improve: child mean 0.500000 < baseline 0.750000 (delta -0.250000)"
                    .to_string()
            )
        );
    }

    #[test]
    fn validate_runs_rollouts_selection_and_writes_the_comparison() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = ctx(
            json!({"baseline": 0.5, "budget_tasks": 2, "sampling": "generation_shuffle",
                               "repetitions": 2, "require_complete": false}),
        );
        c.generation_id = "2".into();
        let mut seen = None;
        let v = validate_with(
            &c,
            None,
            || names(12),
            |req| {
                seen = Some((req.tasks.clone(), req.repetitions));
                Ok(vec![
                    done("predict-09", 0, 1.0),
                    done("predict-09", 1, 0.5),
                    done("predict-10", 0, 0.25),
                    report("predict-10", 1, TrialStatus::CandidateInvalid, None),
                ])
            },
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            seen,
            Some((vec!["predict-09".to_string(), "predict-10".to_string()], 2))
        );
        // predict-10's candidate-invalid trial scores 0: (0.75 + 0.125) / 2.
        assert!(!v.accept);
        assert_eq!(
            v.reason,
            "minibatch did not improve: child mean 0.437500 <= baseline 0.500000 (delta -0.062500)"
        );
        assert_eq!(v.artifacts, ["comparison.json", "child-cases.json"]);
        let comparison: Value = evolve_operator_sdk::serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("comparison.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            comparison,
            json!({"criterion": "strict", "require_complete": false, "bar": 0.5,
                   "bar_from": "config.baseline mean", "tasks": ["predict-09", "predict-10"],
                   "child_scores": {"predict-09": 0.75, "predict-10": 0.125},
                   "child_total": 0.875, "child_mean": 0.4375, "delta": -0.0625,
                   "complete": true, "unscorable": [], "accepted": false})
        );
        let cases = std::fs::read_to_string(dir.path().join("child-cases.json")).unwrap();
        assert_eq!(cases.matches("\"task\"").count(), 4);
    }

    #[test]
    fn explicit_tasks_skip_the_selection() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(json!({"baseline": 0.9, "criterion": "non_decreasing",
                           "tasks": ["predict-07", "predict-03"]}));
        let v = validate_with(
            &c,
            None,
            || unreachable!("explicit tasks need no train list"),
            |req| {
                assert_eq!(req.tasks, ["predict-07", "predict-03"]);
                Ok(vec![done("predict-03", 0, 0.9), done("predict-07", 0, 0.9)])
            },
            dir.path(),
        )
        .unwrap();
        assert!(v.accept);
        assert_eq!(
            v.reason,
            "minibatch improved: child mean 0.900000 >= baseline 0.900000 (delta +0.000000)"
        );
    }

    #[test]
    fn infrastructure_rejects_and_misconfiguration_errors() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(json!({"baseline": 0.0}));
        let run = |e: TasksError| validate_with(&c, None, || names(3), |_| Err(e), dir.path());
        let v = run(TasksError::BudgetExhausted).unwrap();
        assert!(!v.accept);
        assert_eq!(
            v.reason,
            "minibatch comparison is incomplete: the experiment's budget is exhausted"
        );
        let v = run(TasksError::Unavailable("no engine".into())).unwrap();
        assert_eq!(
            (v.accept, v.reason.as_str()),
            (
                false,
                "minibatch comparison is incomplete: tasks unavailable: no engine"
            )
        );
        assert_eq!(
            run(TasksError::UnknownTask("x".into())).unwrap_err(),
            "tasks: \"x\" is not a train task"
        );
        assert_eq!(
            run(TasksError::InvalidRequest("dup".into())).unwrap_err(),
            "tasks: invalid request: dup"
        );
        let v = validate_with(&c, None, Vec::new, |_| unreachable!(), dir.path()).unwrap();
        assert_eq!(
            (v.accept, v.reason.as_str()),
            (
                false,
                "minibatch comparison is incomplete: this experiment has no train tasks"
            )
        );
        // An infrastructure-failed trial rejects, with the artifacts written.
        let v = validate_with(
            &c,
            None,
            || names(1),
            |_| {
                Ok(vec![report(
                    "predict-01",
                    0,
                    TrialStatus::InfrastructureFailed,
                    None,
                )])
            },
            dir.path(),
        )
        .unwrap();
        assert!(!v.accept);
        assert!(v.reason.ends_with("predict-01#0 (infrastructure-failed)"));
        assert_eq!(v.artifacts.len(), 2);
    }

    #[test]
    fn schema_takes_an_optional_baseline_and_unique_tasks() {
        let schema = <MinibatchImprovement as Operator>::config()
            .build()
            .unwrap();
        assert!(schema.normalize("{}").is_ok());
        assert_eq!(
            Value::Object(schema.normalize(r#"{"baseline": 1}"#).unwrap()),
            json!({"baseline": 1.0, "criterion": "strict", "require_complete": true,
                   "budget_tasks": 8, "sampling": "static", "seed": 0, "repetitions": 1})
        );
        assert!(schema.normalize(r#"{"baseline": 0, "tasks": []}"#).is_err());
        assert!(
            schema
                .normalize(r#"{"baseline": 0, "tasks": ["a", "a"]}"#)
                .is_err()
        );
        assert!(
            schema
                .normalize(r#"{"baseline": 0, "criterion": "loose"}"#)
                .is_err()
        );
    }

    fn rollout(trials: Value) -> Evidence {
        Evidence {
            summary: json!({"sampling": "static", "trials": trials}).to_string(),
            artifacts: vec![],
        }
    }

    #[test]
    fn the_parent_rollout_sets_the_minibatch_and_the_bar() {
        let dir = tempfile::tempdir().unwrap();
        // The parent scored 0.5 on predict-03 and 0.25 on predict-07; predict-05 was an
        // infrastructure failure.
        let parent = rollout(json!([
            {"task": "predict-03", "repetition": 0, "status": "benchmark-complete", "reward": 0.5},
            {"task": "predict-07", "repetition": 0, "status": "benchmark-complete", "reward": 0.25},
            {"task": "predict-05", "repetition": 0, "status": "infrastructure-failed", "reward": null},
        ]));
        let three = ["predict-03", "predict-07", "predict-05"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            parent_minibatch(Some(&parent), true),
            Some(Parent {
                tasks: three,
                total: 0.75,
                unscorable: vec!["predict-05#0 (infrastructure-failed)".into()],
            })
        );
        // By default that makes the comparison incomplete, without running the child.
        let c = ctx(json!({"criterion": "strict", "baseline": 0.99}));
        let v = validate_with(
            &c,
            Some(&parent),
            || unreachable!(),
            |_| unreachable!("an incomplete parent side runs no child trial"),
            dir.path(),
        )
        .unwrap();
        assert!(!v.accept);
        assert_eq!(
            v.reason,
            "minibatch comparison is incomplete (infrastructure failure or missing reward in the \
             parent's rollout): predict-05#0 (infrastructure-failed)"
        );
        // Lenient: predict-05 is left out of the comparison.
        let two = vec!["predict-03".to_string(), "predict-07".to_string()];
        assert_eq!(
            parent_minibatch(Some(&parent), false),
            Some(Parent {
                tasks: two.clone(),
                total: 0.75,
                unscorable: vec![],
            })
        );
        let c = ctx(json!({"criterion": "strict", "baseline": 0.99, "require_complete": false}));
        let mut asked = None;
        let v = validate_with(
            &c,
            Some(&parent),
            || unreachable!("the parent's tasks are used, not a fresh selection"),
            |req| {
                asked = Some(req.tasks.clone());
                Ok(vec![done("predict-03", 0, 0.5), done("predict-07", 0, 0.5)])
            },
            dir.path(),
        )
        .unwrap();
        assert_eq!(asked, Some(two));
        assert!(v.accept);
        assert_eq!(
            v.reason,
            "minibatch improved: child total 1.000000 > parent total 0.750000 (delta +0.250000)"
        );
    }

    fn trial_json(t: &Value) -> Value {
        json!({"task": t["task"], "repetition": t["repetition"], "status": t["status"],
               "reward": t["reward"]})
    }

    fn trial_report(t: &Value) -> TrialReport {
        let status = match t["status"].as_str().unwrap() {
            "benchmark-complete" => TrialStatus::BenchmarkComplete,
            "candidate-invalid" => TrialStatus::CandidateInvalid,
            "timeout" => TrialStatus::Timeout,
            "cancelled" => TrialStatus::Cancelled,
            "infrastructure-failed" => TrialStatus::InfrastructureFailed,
            other => panic!("unknown status {other}"),
        };
        report(
            t["task"].as_str().unwrap(),
            t["repetition"].as_u64().unwrap() as u32,
            status,
            t["reward"].as_f64(),
        )
    }

    /// Every row of the table RSIHub's own `library/validate/minibatch_improvement.py`
    /// produced (tests/rsihub_golden.py, which maps each trial to the case RSIHub's
    /// Harbor evidence records for it): same config, same verdict, same totals.
    #[test]
    fn matches_rsihub_golden_table() {
        let table: Value =
            evolve_operator_sdk::serde_json::from_str(include_str!("../tests/rsihub_golden.json"))
                .unwrap();
        assert_eq!(
            table["operator"],
            "library/validate/minibatch_improvement.py"
        );
        let rows = table["rows"].as_array().unwrap();
        assert!(rows.len() >= 15);
        for r in rows {
            let dir = tempfile::tempdir().unwrap();
            let parent = rollout(Value::Array(
                r["parent_trials"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(trial_json)
                    .collect(),
            ));
            let child: Vec<TrialReport> = r["child_trials"]
                .as_array()
                .unwrap()
                .iter()
                .map(trial_report)
                .collect();
            let mut ran = false;
            let v = validate_with(
                &ctx(r["config"].clone()),
                Some(&parent),
                || unreachable!(),
                |_| {
                    ran = true;
                    Ok(child.clone())
                },
                dir.path(),
            )
            .unwrap();
            let name = &r["name"];
            assert_eq!(
                v.accept,
                r["accept"].as_bool().unwrap(),
                "row {name}: RSIHub said {:?}, we said {:?}",
                r["rsihub_reason"],
                v.reason
            );
            let complete = r["complete"].as_bool().unwrap();
            assert_eq!(
                v.reason.contains("incomplete"),
                !complete,
                "row {name}: {}",
                v.reason
            );
            if complete {
                let comparison: Value = evolve_operator_sdk::serde_json::from_str(
                    &std::fs::read_to_string(dir.path().join(COMPARISON)).unwrap(),
                )
                .unwrap();
                assert_eq!(comparison["child_total"], r["child_total"], "row {name}");
                assert_eq!(comparison["bar"], r["parent_total"], "row {name}");
            }
            // Only an incomplete parent side spares the child's trials.
            assert_eq!(ran, !v.reason.contains("parent's rollout"), "row {name}");
        }
    }

    #[test]
    fn without_rollout_trials_or_baseline_the_child_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let noop = Evidence {
            summary: json!({"rollout": "noop"}).to_string(),
            artifacts: vec![],
        };
        let v = validate_with(
            &ctx(json!({})),
            Some(&noop),
            Vec::new,
            |_| unreachable!(),
            dir.path(),
        )
        .unwrap();
        assert!(!v.accept);
        assert!(
            v.reason.starts_with("no bar to compare with"),
            "{}",
            v.reason
        );
    }
}
