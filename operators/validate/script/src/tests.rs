//! The shipped minibatch_improvement script against the compiled
//! validate/minibatch_improvement on the same inputs and the same (fake) train tasks:
//! same verdicts, reasons, errors and artifacts.

use super::*;
use evolve_operator_sdk::tasks::{RunRequest, TasksError, TrialReport};
use op_validate_minibatch_improvement::{MinibatchImprovement, validate_with};
use std::path::Path;

const SCRIPT: &str = include_str!("../scripts/minibatch_improvement.rhai");
const PATH: &str = "operators/validate/minibatch.rhai";

/// Train tasks whose child trials follow a fixed table, or fail as a whole.
#[derive(Clone)]
struct Fake {
    train: Vec<String>,
    error: Option<TasksError>,
}

/// The child's trial of `task`, repetition `rep`: a pure function of the names.
fn child_trial(task: &str, rep: u32) -> TrialReport {
    let (status, reward) = match (task, rep) {
        ("t-infra", _) => (TrialStatus::InfrastructureFailed, None),
        ("t-timeout", _) => (TrialStatus::Timeout, None),
        ("t-half", 0) => (TrialStatus::BenchmarkComplete, Some(1.0)),
        ("t-half", _) => (TrialStatus::BenchmarkComplete, Some(0.0)),
        (t, _) if t.ends_with("-pass") => (TrialStatus::BenchmarkComplete, Some(1.0)),
        _ => (TrialStatus::BenchmarkComplete, Some(0.25)),
    };
    TrialReport {
        task: task.into(),
        repetition: rep,
        status,
        reward,
        verifier_output: format!("out {task}#{rep}"),
        duration_ms: 7,
        cost_usd: if rep == 0 { Some(0.5) } else { None },
    }
}

impl Fake {
    fn run_request(&self, r: &RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if let Some(t) = r.tasks.iter().find(|t| !self.train.contains(t)) {
            return Err(TasksError::UnknownTask(t.clone()));
        }
        Ok(r.tasks
            .iter()
            .flat_map(|t| (0..r.repetitions).map(move |rep| child_trial(t, rep)))
            .collect())
    }
}

impl evolve_script::Tasks for Fake {
    fn train_tasks(&self) -> Vec<String> {
        self.train.clone()
    }
    fn run(&self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        self.run_request(request)
    }
}

type Outcome = (Result<(bool, String, Vec<String>), String>, Vec<Value>);

fn artifacts(dir: &Path) -> Vec<Value> {
    ["comparison.json", "child-cases.json"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
        .map(|t| {
            assert!(t.ends_with('\n'));
            evolve_operator_sdk::serde_json::from_str(&t).unwrap()
        })
        .collect()
}

fn compiled(params: &Value, rollout: Option<&Evidence>, fake: &Fake) -> Outcome {
    let schema = <MinibatchImprovement as Operator>::config()
        .build()
        .unwrap();
    let mut ctx = Context::for_test(Value::Object(schema.normalize_value(params).unwrap()));
    ctx.generation_id = "3".into();
    let dir = tempfile::tempdir().unwrap();
    let out = validate_with(
        &ctx,
        rollout,
        || fake.train.clone(),
        |r| fake.run_request(r),
        dir.path(),
    );
    (
        out.map(|v| (v.accept, v.reason, v.artifacts)),
        artifacts(dir.path()),
    )
}

fn scripted(params: &Value, rollout: Option<&Evidence>, fake: &Fake) -> Outcome {
    let mut ctx = evolve_script::testing::context(PATH, SCRIPT, params.clone(), 0);
    ctx.generation_id = "3".into();
    let dir = tempfile::tempdir().unwrap();
    let grants = Grants {
        tasks: Some(Rc::new(fake.clone())),
        scratch: Some(dir.path().to_path_buf()),
        ..Grants::default()
    };
    let out = evolve_script::validate(&ctx, &[], rollout, grants);
    (
        out.map(|v| (v.accept, v.reason, v.artifacts)),
        artifacts(dir.path()),
    )
}

fn same(params: Value, rollout: Option<Evidence>, fake: &Fake) {
    let c = compiled(&params, rollout.as_ref(), fake);
    let s = scripted(&params, rollout.as_ref(), fake);
    match (&c.0, &s.0) {
        (Err(ce), Err(se)) => assert!(
            se.starts_with(&format!("script {PATH} line ")) && se.ends_with(&format!(": {ce}")),
            "compiled error {ce:?}, script error {se:?}"
        ),
        _ => assert_eq!(s.0, c.0, "params {params}"),
    }
    assert_eq!(s.1, c.1, "artifacts, params {params}");
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn fake() -> Fake {
    Fake {
        train: names(&[
            "a-pass",
            "b-pass",
            "c",
            "t-half",
            "t-timeout",
            "t-infra",
            "d",
            "e",
            "f",
            "g",
        ]),
        error: None,
    }
}

/// rollout/train-shaped evidence (as canonical JSON: a reward of 1.0 is written `1`).
fn rollout(trials: Value) -> Evidence {
    Evidence {
        summary: json!({"sampling": "static", "trials": trials}).to_string(),
        artifacts: vec![],
    }
}

#[test]
fn parent_rollouts_set_the_minibatch_and_the_bar() {
    let r = rollout(json!([
        {"task": "a-pass", "repetition": 0, "status": "benchmark-complete", "reward": 1},
        {"task": "c", "repetition": 0, "status": "benchmark-complete", "reward": 0},
        {"task": "t-half", "repetition": 1, "status": "timeout", "reward": null},
        {"task": "t-half", "repetition": 0, "status": "candidate_invalid"},
        {"task": "d", "repetition": 0, "status": "infrastructure-failed", "reward": null},
        {"task": "e", "status": "weird", "reward": 1.0},
    ]));
    for params in [
        json!({}),
        json!({"criterion": "non_decreasing"}),
        json!({"repetitions": 2}),
        json!({"require_complete": false}),
        json!({"require_complete": false, "criterion": "non_decreasing"}),
        json!({"require_complete": false, "repetitions": 2}),
    ] {
        same(params, Some(r.clone()), &fake());
    }
    // A complete parent side: the child runs, and its timeouts decide.
    let complete = rollout(json!([
        {"task": "a-pass", "repetition": 0, "status": "benchmark-complete", "reward": 0},
        {"task": "c", "repetition": 0, "status": "benchmark-complete", "reward": 0},
        {"task": "t-half", "repetition": 0, "status": "timeout", "reward": 0.5},
    ]));
    let timing_out = rollout(json!([
        {"task": "c", "repetition": 0, "status": "benchmark-complete", "reward": 0},
        {"task": "t-timeout", "repetition": 0, "status": "benchmark-complete", "reward": 0},
    ]));
    for params in [json!({}), json!({"require_complete": false})] {
        same(params, Some(timing_out.clone()), &fake());
    }
    for params in [
        json!({}),
        json!({"require_complete": false}),
        json!({"repetitions": 2}),
    ] {
        same(params, Some(complete.clone()), &fake());
    }
    // A tie: strict rejects, non_decreasing accepts.
    let tie = rollout(
        json!([{"task": "c", "repetition": 0, "status": "benchmark-complete", "reward": 0.25}]),
    );
    same(json!({}), Some(tie.clone()), &fake());
    same(json!({"criterion": "non_decreasing"}), Some(tie), &fake());
}

#[test]
fn without_rollout_trials_the_config_sets_them() {
    let noop = Evidence {
        summary: "{}".into(),
        artifacts: vec![],
    };
    for params in [
        json!({"baseline": 0.5, "tasks": ["a-pass", "c"]}),
        json!({"baseline": 0.5, "tasks": ["t-infra", "c"]}),
        json!({"baseline": 0.1, "tasks": ["t-timeout", "c"]}),
        json!({"baseline": 0.1, "tasks": ["t-timeout", "c"], "require_complete": false}),
        json!({"baseline": 1, "tasks": ["a-pass"], "criterion": "non_decreasing"}),
        json!({"baseline": 0.2, "budget_tasks": 3}),
        json!({"baseline": 0.2, "budget_tasks": 4, "sampling": "generation_shuffle", "seed": 5}),
        json!({}),
        json!({"tasks": ["a-pass"]}),
    ] {
        same(params.clone(), Some(noop.clone()), &fake());
        same(params, None, &fake());
    }
}

#[test]
fn task_errors_reject_or_fail_like_the_compiled_operator() {
    let params = json!({"baseline": 0.1, "tasks": ["a-pass"]});
    for error in [
        TasksError::BudgetExhausted,
        TasksError::Unavailable("no engine".into()),
        TasksError::InvalidRequest("duplicates".into()),
    ] {
        same(
            params.clone(),
            None,
            &Fake {
                error: Some(error),
                ..fake()
            },
        );
    }
    same(
        json!({"baseline": 0.1, "tasks": ["gate-secret"]}),
        None,
        &fake(),
    );
    same(
        json!({"baseline": 0.1}),
        None,
        &Fake {
            train: vec![],
            error: None,
        },
    );
}

#[test]
fn a_validate_script_reads_the_target_it_is_granted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("params.json"), "{\"k\": 2}").unwrap();
    let text = "fn validate(ctx, changed, rollout) {\n\
                  let p = parse_json(target_read(\"params.json\"));\n\
                  #{accept: p.k == 2 && target_exists(\"params.json\"), reason: `files ${target_list(\"\")}`}\n}\n";
    let ctx = evolve_script::testing::context(PATH, text, json!({}), 0);
    let grants = Grants {
        target: Some(evolve_script::Tree::read_only(dir.path())),
        ..Grants::default()
    };
    let v = evolve_script::validate(&ctx, &[], None, grants).unwrap();
    assert!(v.accept, "{}", v.reason);
    assert_eq!(v.reason, "files [\"params.json\"]");
    let escape =
        "fn validate(ctx, changed, rollout) {\n  target_read(\"../evaluator/tasks.json\")\n}\n";
    let ctx = evolve_script::testing::context(PATH, escape, json!({}), 0);
    let grants = Grants {
        target: Some(evolve_script::Tree::read_only(dir.path())),
        ..Grants::default()
    };
    let e = evolve_script::validate(&ctx, &[], None, grants).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "script {PATH} line 2: target_read: \"../evaluator/tasks.json\" must be a relative path"
        )),
        "{e}"
    );
}
