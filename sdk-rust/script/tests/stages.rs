//! The rollout, analyze, mutate and reflect stage functions natively, with fake `model`
//! and `tasks` capabilities and temporary trees: inputs arrive as plain values, results
//! convert back into the stage's type, and each grant is exactly what it names.

use evolve_operator_sdk::model::{ChatRequest, ChatResponse, ModelError, Role};
use evolve_operator_sdk::serde_json::{Value, json};
use evolve_operator_sdk::tasks::{RunRequest, TasksError, TrialReport};
use evolve_operator_sdk::testing::{row, view};
use evolve_operator_sdk::types::*;
use evolve_script::{Grants, Model, Tasks, Tree};
use std::cell::RefCell;
use std::rc::Rc;

fn ctx(path: &str, text: &str) -> evolve_operator_sdk::Context {
    evolve_script::testing::context(path, text, json!({"k": 2}), 7)
}

/// Answers every chat with the last message reversed, 10 tokens in and 3 out, $0.5;
/// or fails when `fail` is set. Keeps every request.
#[derive(Default)]
struct FakeModel {
    fail: bool,
    seen: RefCell<Vec<ChatRequest>>,
}

impl Model for FakeModel {
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        self.seen.borrow_mut().push(request.clone());
        if self.fail {
            return Err(ModelError::BudgetExhausted);
        }
        let last = request.messages.last().map_or("", |m| m.content.as_str());
        Ok(ChatResponse {
            content: last.chars().rev().collect(),
            input_tokens: 10,
            output_tokens: 3,
            usd: 0.5,
        })
    }
}

struct FakeTasks;

impl Tasks for FakeTasks {
    fn train_tasks(&self) -> Vec<String> {
        vec!["t1".into(), "t2".into()]
    }
    fn run(&self, r: &RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        if r.tasks.iter().any(|t| !t.starts_with('t')) {
            return Err(TasksError::UnknownTask("no such train task".into()));
        }
        Ok(r.tasks
            .iter()
            .map(|t| TrialReport {
                task: t.clone(),
                repetition: 0,
                status: TrialStatus::BenchmarkComplete,
                reward: Some(if t == "t1" { 1.0 } else { 0.0 }),
                verifier_output: format!("ran {t}"),
                duration_ms: 5,
                cost_usd: None,
            })
            .collect())
    }
}

fn summary(e: &Evidence) -> Value {
    evolve_operator_sdk::serde_json::from_str(&e.summary).unwrap()
}

#[test]
fn rollout_runs_train_tasks_and_returns_evidence() {
    const P: &str = "operators/rollout/r.rhai";
    let text = "fn rollout(ctx, parent) {\n  let out = run_tasks(train_tasks(), 1);\n  let passed = out.trials.filter(|t| t.reward == 1.0).map(|t| t.task);\n  scratch_write(\"log.txt\", `parent ${parent.generation_id}`);\n  #{summary: #{passed: passed, k: ctx.config.k, bad: run_tasks([\"gate-1\"], 1)}, artifacts: [\"log.txt\"]}\n}\n";
    let dir = tempfile::tempdir().unwrap();
    let grants = Grants {
        tasks: Some(Rc::new(FakeTasks)),
        scratch: Some(dir.path().to_path_buf()),
        ..Grants::default()
    };
    let parent = row("3", 1, Some(0.5), true);
    let e = evolve_script::rollout(&ctx(P, text), &parent, grants).unwrap();
    assert_eq!(
        summary(&e),
        json!({"passed": ["t1"], "k": 2, "bad": {"error": "unknown-task", "message": "no such train task"}})
    );
    assert_eq!(e.artifacts, vec!["log.txt"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("log.txt")).unwrap(),
        "parent 3"
    );
    // The summary must be an object map.
    let e = evolve_script::rollout(
        &ctx(P, "fn rollout(ctx, parent) {\n  #{summary: \"text\"}\n}\n"),
        &parent,
        Grants::default(),
    )
    .unwrap_err();
    assert!(
        e.starts_with("script operators/rollout/r.rhai: rollout() returned an object map of the wrong shape; expected #{summary: #{…}"),
        "{e}"
    );
    // No model here: the rollout world does not import it.
    let e = evolve_script::rollout(
        &ctx(P, "fn rollout(ctx, parent) {\n  model_chat(\"hi\")\n}\n"),
        &parent,
        Grants::default(),
    )
    .unwrap_err();
    assert!(
        e.starts_with("script operators/rollout/r.rhai line 2: Function not found: model_chat"),
        "{e}"
    );
}

#[test]
fn analyze_calls_the_model_and_sees_errors_as_values() {
    const P: &str = "operators/analyze/a.rhai";
    let text = "fn analyze(ctx, rollout) {\n  let r = model_chat([#{role: \"system\", content: \"be brief\"}, #{role: \"user\", content: `${rollout.summary.failed[0]}`}], #{max_tokens: 9, temperature: 0});\n  #{summary: #{said: r.content, usd: r.usd, error: r.error}}\n}\n";
    let model = Rc::new(FakeModel::default());
    let rollout = Evidence {
        summary: r#"{"failed": ["abc"]}"#.into(),
        artifacts: vec![],
    };
    let grants = Grants {
        model: Some(model.clone()),
        ..Grants::default()
    };
    let e = evolve_script::analyze(&ctx(P, text), &rollout, grants).unwrap();
    assert_eq!(
        summary(&e),
        json!({"said": "cba", "usd": 0.5, "error": null})
    );
    let seen = model.seen.borrow();
    assert_eq!(seen[0].messages.len(), 2);
    assert!(matches!(seen[0].messages[0].role, Role::System));
    assert_eq!(
        (seen[0].max_tokens, seen[0].temperature),
        (Some(9), Some(0.0))
    );

    let failing = Rc::new(FakeModel {
        fail: true,
        ..FakeModel::default()
    });
    let grants = Grants {
        model: Some(failing),
        ..Grants::default()
    };
    let e = evolve_script::analyze(&ctx(P, text), &rollout, grants).unwrap();
    assert_eq!(
        summary(&e),
        json!({"said": null, "usd": null, "error": "budget-exhausted"})
    );

    for (bad, what) in [
        (
            "model_chat([#{role: \"robot\", content: \"x\"}])",
            "messages must be",
        ),
        ("model_chat(\"x\", #{top_p: 1})", "unknown option \"top_p\""),
        ("model_chat(\"x\", #{max_tokens: 0})", "options.max_tokens"),
        ("run_tasks([\"t1\"], 1)", "Function not found: run_tasks"),
        ("target_read(\"a\")", "Function not found: target_read"),
    ] {
        let text = format!("fn analyze(ctx, rollout) {{\n  {bad}\n}}\n");
        let grants = Grants {
            model: Some(Rc::new(FakeModel::default())),
            ..Grants::default()
        };
        let e = evolve_script::analyze(&ctx(P, &text), &rollout, grants).unwrap_err();
        assert!(
            e.starts_with("script operators/analyze/a.rhai line 2: ") && e.contains(what),
            "{bad}: {e}"
        );
    }
}

fn observation(feedback: Option<&str>) -> Observation {
    Observation {
        rollout: None,
        analysis: Some(Evidence {
            summary: r#"{"hint": "raise it"}"#.into(),
            artifacts: vec![],
        }),
        feedback_dir: feedback.map(str::to_string),
        surface: Surface {
            includes: vec!["target/**".into(), "operators/**".into()],
            excludes: vec![],
        },
        archive: Some(view(vec![row("0", 0, Some(0.1), true)])),
    }
}

#[test]
fn mutate_edits_its_trees_and_reports_what_changed_and_spent() {
    const P: &str = "operators/mutate/m.rhai";
    let d = tempfile::tempdir().unwrap();
    let (target, operators, feedback) = (
        d.path().join("target"),
        d.path().join("operators"),
        d.path().join("feedback"),
    );
    for dir in [&target, &operators, &feedback] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(target.join("value.txt"), "0.1\n").unwrap();
    std::fs::write(target.join("old.txt"), "x").unwrap();
    std::fs::write(feedback.join("parent.json"), "{\"score\": 0.1}").unwrap();
    let text = "fn mutate(ctx, obs) {\n  let v = target_read(\"value.txt\");\n  v.trim();\n  v = parse_float(v) + 0.25;\n  target_write(\"value.txt\", fmt(v) + \"\\n\");\n  target_write(\"sub/new.md\", model_chat(obs.analysis.summary.hint).content);\n  target_remove(\"old.txt\");\n  operators_write(\"select/p.rhai\", \"fn select(c, a) { [] }\");\n  let fb = parse_json(feedback_read(\"parent.json\"));\n  #{notes: `parent scored ${fb.score}; ${obs.surface.includes}; rows ${obs.archive.rows.len()}`}\n}\n";
    let grants = Grants {
        model: Some(Rc::new(FakeModel::default())),
        target: Some(Tree::read_write(&target)),
        operators: Some(Tree::read_write(&operators)),
        feedback: Some(Tree::read_only(&feedback)),
        ..Grants::default()
    };
    let p = evolve_script::mutate(&ctx(P, text), &observation(Some("/feedback")), grants).unwrap();
    assert_eq!(
        p.changed,
        vec![
            "target/value.txt",
            "target/sub/new.md",
            "target/old.txt",
            "operators/select/p.rhai"
        ]
    );
    assert_eq!(
        p.notes,
        vec!["parent scored 0.1; [\"target/**\", \"operators/**\"]; rows 1"]
    );
    assert_eq!(
        (p.usage.input_tokens, p.usage.output_tokens, p.usage.usd),
        (10, 3, 0.5)
    );
    assert_eq!(
        std::fs::read_to_string(target.join("value.txt")).unwrap(),
        "0.35\n"
    );
    assert_eq!(
        std::fs::read_to_string(target.join("sub/new.md")).unwrap(),
        "ti esiar"
    );
    assert!(!target.join("old.txt").exists());
    assert!(operators.join("select/p.rhai").is_file());

    // `changed` given by the script wins; the usage is still the metered one.
    let text = "fn mutate(ctx, obs) {\n  target_write(\"a.txt\", \"1\");\n  #{changed: [\"target/claimed.txt\"], notes: [\"a\", \"b\"]}\n}\n";
    let grants = Grants {
        target: Some(Tree::read_write(&target)),
        ..Grants::default()
    };
    let p = evolve_script::mutate(&ctx(P, text), &observation(None), grants).unwrap();
    assert_eq!(p.changed, vec!["target/claimed.txt"]);
    assert_eq!(p.notes, vec!["a", "b"]);
    assert_eq!(p.usage.usd, 0.0);
}

#[test]
fn mutate_paths_are_checked_and_ungranted_trees_have_no_functions() {
    const P: &str = "operators/mutate/m.rhai";
    let d = tempfile::tempdir().unwrap();
    let target = d.path().join("target");
    let operators = d.path().join("operators");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::create_dir_all(&operators).unwrap();
    let grants = || Grants {
        target: Some(Tree::read_write(&target)),
        operators: Some(Tree::read_write(&operators)),
        feedback: Some(Tree::read_only(d.path())),
        ..Grants::default()
    };
    for (call, what) in [
        (
            "target_write(\"../evaluator/x\", \"1\")",
            "target_write: \"../evaluator/x\" must be a relative path of plain segments",
        ),
        (
            "target_read(\"/etc/passwd\")",
            "target_read: \"/etc/passwd\" must be a relative path",
        ),
        (
            "operators_read(\"../.evolve/archive.jsonl\")",
            "operators_read: \"../.evolve/archive.jsonl\" must be a relative path",
        ),
        (
            "operators_write(\"gate.wasm\", \"x\")",
            "operators_write: \"gate.wasm\" is a compiled component",
        ),
        (
            "feedback_write(\"x\", \"y\")",
            "Function not found: feedback_write",
        ),
        ("run_tasks([\"t1\"], 1)", "Function not found: run_tasks"),
        ("model_chat(\"x\")", "Function not found: model_chat"),
        ("target_remove(\"\")", "must be a relative path"),
    ] {
        let text = format!("fn mutate(ctx, obs) {{\n  {call}\n}}\n");
        let e = evolve_script::mutate(&ctx(P, &text), &observation(None), grants()).unwrap_err();
        assert!(
            e.starts_with("script operators/mutate/m.rhai line 2: ") && e.contains(what),
            "{call}: {e}"
        );
    }
    assert!(
        std::fs::read_dir(&target).unwrap().next().is_none(),
        "nothing was written"
    );
    // A result that is no map names the expected shape.
    let e = evolve_script::mutate(
        &ctx(P, "fn mutate(ctx, obs) {\n  [\"target/a\"]\n}\n"),
        &observation(None),
        grants(),
    )
    .unwrap_err();
    assert!(
        e.starts_with("script operators/mutate/m.rhai: mutate() returned an array of the wrong shape; expected #{changed:"),
        "{e}"
    );
}

#[test]
fn reflect_returns_playbook_operations() {
    const P: &str = "operators/reflect/r.rhai";
    let archive = view(vec![
        row("0", 0, Some(0.1), true),
        row("1", 1, Some(0.4), true),
    ]);
    let playbook = vec![PlaybookEntry {
        id: "p1".into(),
        text: "t".into(),
        data: r#"{"genid": "0"}"#.into(),
    }];
    let text = "fn reflect(ctx, archive, playbook) {\n  [#{op: \"add\", id: `gen-${ctx.generation_id}`, text: \"note\", data: #{rows: archive.rows.len()}},\n   #{op: \"credit\", id: playbook[0].id, delta: 0.3, reason: `from ${playbook[0].data.genid}`},\n   #{op: \"retire\", id: \"p0\"}]\n}\n";
    let ops =
        evolve_script::reflect(&ctx(P, text), &archive, &playbook, Grants::default()).unwrap();
    assert_eq!(ops.len(), 3);
    match &ops[0] {
        PlaybookOp::Add(e) => {
            assert_eq!((e.id.as_str(), e.text.as_str()), ("gen-1", "note"));
            assert_eq!(e.data, r#"{"rows":2}"#);
        }
        other => panic!("{other:?}"),
    }
    match &ops[1] {
        PlaybookOp::Credit(c) => {
            assert_eq!(
                (c.id.as_str(), c.delta, c.reason.as_str()),
                ("p1", 0.3, "from 0")
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&ops[2], PlaybookOp::Retire(id) if id == "p0"));
    let e = evolve_script::reflect(
        &ctx(
            P,
            "fn reflect(ctx, archive, playbook) {\n  [#{op: \"edit\", id: \"p1\"}]\n}\n",
        ),
        &archive,
        &playbook,
        Grants::default(),
    )
    .unwrap_err();
    assert!(
        e.starts_with(
            "script operators/reflect/r.rhai: reflect() returned an operation [0] whose `op` is not"
        ),
        "{e}"
    );
    let e = evolve_script::reflect(
        &ctx(P, "fn reflect(ctx, archive) {\n  []\n}\n"),
        &archive,
        &playbook,
        Grants::default(),
    )
    .unwrap_err();
    assert_eq!(
        e,
        "script operators/reflect/r.rhai: defines no function `reflect(ctx, archive, playbook)`, which this stage calls"
    );
}
