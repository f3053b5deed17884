use std::collections::VecDeque;

use super::*;

/// Scripted capabilities: answers in order, every request recorded.
#[derive(Default)]
struct Fake {
    answers: VecDeque<Result<ChatResponse, ModelError>>,
    requests: Vec<ChatRequest>,
    train: Vec<String>,
    runs: Vec<RunRequest>,
    run_result: Option<Result<Vec<TrialReport>, TasksError>>,
}

impl Host for Fake {
    fn chat(&mut self, request: &ChatRequest) -> Result<ChatResponse, ModelError> {
        self.requests.push(request.clone());
        self.answers.pop_front().expect("an answer is scripted")
    }
    fn train_tasks(&mut self) -> Vec<String> {
        self.train.clone()
    }
    fn run(&mut self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        self.runs.push(request.clone());
        self.run_result.clone().expect("a run result is scripted")
    }
}

fn answer(content: &str, input: u64, output: u64, usd: f64) -> Result<ChatResponse, ModelError> {
    Ok(ChatResponse {
        content: content.into(),
        input_tokens: input,
        output_tokens: output,
        usd,
    })
}

fn normalized(config: Value) -> Result<Map<String, Value>, Vec<Violation>> {
    <Harness as Operator>::config()
        .build()
        .unwrap()
        .normalize_value(&config)
}

fn ctx(config: Value) -> Context {
    let mut c = Context::for_test(Value::Object(normalized(config).unwrap()));
    c.generation_id = "3".into();
    c.generation = 3;
    c.parent = Some("2".into());
    c
}

fn observation(includes: &[&str]) -> Observation {
    Observation {
        rollout: Some(Evidence {
            summary: r#"{"failed":["predict-02"]}"#.into(),
            artifacts: vec![],
        }),
        analysis: Some(Evidence {
            summary: r#"{"groups":[]}"#.into(),
            artifacts: vec![],
        }),
        feedback_dir: Some("/feedback".into()),
        archive: None,
        surface: Surface {
            includes: includes.iter().map(|s| s.to_string()).collect(),
            excludes: vec![],
        },
    }
}

fn root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for dir in ["target", "scratch", "feedback"] {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    std::fs::write(
        d.path().join("target/params.json"),
        "{\n  \"slope\": 1.0,\n  \"intercept\": 0.0\n}\n",
    )
    .unwrap();
    std::fs::write(d.path().join("target/agent.wasm"), [0u8, 97, 115, 109]).unwrap();
    std::fs::write(d.path().join("feedback/parent.json"), "{\"score\": 0.25}").unwrap();
    d
}

fn report(task: &str, status: TrialStatus, reward: Option<f64>, out: &str) -> TrialReport {
    TrialReport {
        task: task.into(),
        repetition: 0,
        status,
        reward,
        verifier_output: out.into(),
        duration_ms: 5,
        cost_usd: None,
    }
}

const TURN1: &str = "The slope is too flat: predict-02 answers too low.\n\
<<<<<<< SEARCH target/params.json\n  \"slope\": 1.0,\n=======\n  \"slope\": 2.0,\n>>>>>>> REPLACE\n\
<<<<<<< WRITE evaluator/x.txt\nx\n>>>>>>> END\n";
const TURN2: &str = "Also raise the intercept.\n\
<<<<<<< SEARCH target/params.json\n  \"intercept\": 0.0\n=======\n  \"intercept\": 0.5\n>>>>>>> REPLACE\nDONE\n";

#[test]
fn turns_apply_edits_report_results_and_run_trials() {
    let d = root();
    let mut host = Fake {
        answers: VecDeque::from([answer(TURN1, 100, 20, 0.5), answer(TURN2, 300, 10, 0.25)]),
        train: vec![
            "predict-01".into(),
            "predict-02".into(),
            "predict-03".into(),
        ],
        run_result: Some(Ok(vec![
            report(
                "predict-01",
                TrialStatus::BenchmarkComplete,
                Some(1.0),
                "ok",
            ),
            report(
                "predict-02",
                TrialStatus::BenchmarkComplete,
                Some(0.5),
                "expected 4, got 3",
            ),
        ])),
        ..Fake::default()
    };
    let c = ctx(json!({"trial_tasks": 2}));
    let p = harness_with(&c, &observation(&["target/**"]), d.path(), &mut host).unwrap();

    assert_eq!(p.changed, vec!["target/params.json"]);
    assert_eq!(
        p.notes,
        vec![
            "turn 1: 1 edit(s) applied, 1 refused, 0 format error(s); The slope is too flat: predict-02 answers too low.",
            "trial after turn 1: 1 of 2 trial(s) passed; mean reward 0.750.",
            "turn 2: 1 edit(s) applied, 0 refused, 0 format error(s); Also raise the intercept.",
            "change manifest: /scratch/changes.json",
        ]
    );
    assert_eq!((p.usage.input_tokens, p.usage.output_tokens), (400, 30));
    assert_eq!(p.usage.usd, 0.75);
    assert_eq!(
        std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
        "{\n  \"slope\": 2.0,\n  \"intercept\": 0.5\n}\n"
    );
    assert!(!d.path().join("evaluator").exists());

    // The trial ran the first two train tasks once, on the edited candidate.
    assert_eq!(host.runs.len(), 1);
    assert_eq!(host.runs[0].tasks, vec!["predict-01", "predict-02"]);
    assert_eq!(host.runs[0].repetitions, 1);

    // Turn 1: system + first prompt; turn 2 adds the answer and the report.
    assert_eq!(host.requests.len(), 2);
    let first = &host.requests[0];
    assert_eq!(first.max_tokens, Some(4096));
    assert_eq!(first.temperature, Some(0.2));
    assert_eq!(first.messages.len(), 2);
    assert_eq!(first.messages[0].content, system_prompt());
    let user = &first.messages[1].content;
    assert!(user.starts_with("# Generation 3 (parent 2)\n\nYou have up to 3 turn(s).\n\n## Mutable surface\ninclude: target/**\nexclude: (none)\n\n## Evidence\n### Analysis of the parent's results\n{\"groups\":[]}\n\n### Rollout of the parent\n{\"failed\":[\"predict-02\"]}\n\n### The parent generation\n{\"score\": 0.25}\n\n"), "{user}");
    assert!(user.contains("--- file: target/agent.wasm (4 bytes, binary; not editable as text) ---\n--- file: target/params.json (editable) ---\n{\n  \"slope\": 1.0,"), "{user}");
    let second = &host.requests[1].messages;
    assert_eq!(second.len(), 4);
    assert_eq!(second[2].content, TURN1);
    assert_eq!(
        second[3].content,
        "## Results of turn 1\n\
- applied (replace) target/params.json: replaced 1 line(s) at line 2 with 1 line(s)\n\
- refused (write) evaluator/x.txt: outside the editable roots (target/)\n\
\n## Train trial of the edited candidate\n\
1 of 2 trial(s) passed; mean reward 0.750.\n\
- predict-01: benchmark-complete, reward 1.000\n\
- predict-02: benchmark-complete, reward 0.500; verifier output (tail): expected 4, got 3\n\
\n2 turn(s) left. Repair refused edits or refine the change with more blocks (files now hold your applied edits), or answer DONE if the change is complete."
    );

    let manifest: Value = evolve_operator_sdk::serde_json::from_str(
        &std::fs::read_to_string(d.path().join("scratch/changes.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["files"], json!(["target/params.json"]));
    assert_eq!(manifest["blocks_applied"], json!(2));
    assert_eq!(manifest["blocks_refused"], json!(1));
    assert_eq!(manifest["generation_id"], json!("3"));
    assert_eq!(manifest["turns"].as_array().unwrap().len(), 2);
    assert_eq!(manifest["turns"][0]["trial"]["passed"], json!(1));
    assert_eq!(manifest["turns"][1]["trial"], Value::Null);
    assert_eq!(manifest["turns"][1]["done"], json!(true));
    assert_eq!(
        manifest["turns"][0]["blocks"][1],
        json!({"path": "evaluator/x.txt", "kind": "write", "applied": false,
               "message": "outside the editable roots (target/)"})
    );
}

#[test]
fn an_answer_without_blocks_ends_the_loop_and_no_trial_runs_without_edits() {
    let d = root();
    let mut host = Fake {
        answers: VecDeque::from([answer("Nothing to change.", 1, 1, 0.0)]),
        ..Fake::default()
    };
    let c = ctx(json!({"trial_tasks": 3, "max_turns": 5}));
    let p = harness_with(&c, &observation(&["target/**"]), d.path(), &mut host).unwrap();
    assert!(p.changed.is_empty());
    assert_eq!(host.requests.len(), 1);
    assert!(host.runs.is_empty());
    assert_eq!(
        p.notes[0],
        "turn 1: 0 edit(s) applied, 0 refused, 0 format error(s); Nothing to change."
    );
}

#[test]
fn format_errors_get_another_turn_and_the_last_turn_gets_no_trial() {
    let d = root();
    let broken = "<<<<<<< SEARCH target/params.json\n  \"slope\": 1.0,\n>>>>>>> REPLACE\n";
    let fixed = "<<<<<<< SEARCH target/params.json\n  \"slope\": 1.0,\n=======\n  \"slope\": 3.0,\n>>>>>>> REPLACE\n";
    let mut host = Fake {
        answers: VecDeque::from([answer(broken, 1, 1, 0.0), answer(fixed, 1, 1, 0.0)]),
        train: vec!["predict-01".into()],
        run_result: Some(Ok(vec![])),
        ..Fake::default()
    };
    let c = ctx(json!({"trial_tasks": 1, "max_turns": 2}));
    let p = harness_with(
        &c,
        &observation(&["target/params.json"]),
        d.path(),
        &mut host,
    )
    .unwrap();
    assert_eq!(p.changed, vec!["target/params.json"]);
    assert!(
        host.runs.is_empty(),
        "no turn follows the edit, so no trial"
    );
    assert_eq!(
        host.requests[1].messages[3].content,
        "## Results of turn 1\n\
- format error: line 3: the SEARCH block opened at line 1 has no `=======` line before this marker\n\
\n1 turn(s) left. Repair refused edits or refine the change with more blocks (files now hold your applied edits), or answer DONE if the change is complete."
    );
}

#[test]
fn model_errors_are_the_operators_errors() {
    let cases = [
        (
            ModelError::BudgetExhausted,
            "model: the experiment's budget is exhausted",
        ),
        (
            ModelError::Unavailable("no model is configured".into()),
            "model: unavailable: no model is configured",
        ),
        (
            ModelError::Refused("HTTP 400: bad".into()),
            "model: the provider refused the request: HTTP 400: bad",
        ),
        (
            ModelError::Failed("HTTP 503".into()),
            "model: the call failed: HTTP 503",
        ),
        (ModelError::Timeout, "model: the call timed out"),
        (
            ModelError::InvalidRequest("no messages".into()),
            "model: invalid request: no messages",
        ),
    ];
    for (e, want) in cases {
        let d = root();
        let mut host = Fake {
            answers: VecDeque::from([Err(e)]),
            ..Fake::default()
        };
        let err = harness_with(
            &ctx(json!({})),
            &observation(&["target/**"]),
            d.path(),
            &mut host,
        )
        .unwrap_err();
        assert_eq!(err, want);
    }
    // A failure in a later turn fails the call too.
    let d = root();
    let mut host = Fake {
        answers: VecDeque::from([answer(TURN1, 1, 1, 0.0), Err(ModelError::Timeout)]),
        ..Fake::default()
    };
    let err = harness_with(
        &ctx(json!({})),
        &observation(&["target/**"]),
        d.path(),
        &mut host,
    )
    .unwrap_err();
    assert_eq!(err, "model: the call timed out");
}

#[test]
fn a_trial_the_budget_refuses_is_reported_and_ends_trials() {
    let d = root();
    let turn = |v: &str| format!("<<<<<<< WRITE target/note.txt\n{v}\n>>>>>>> END\n");
    let mut host = Fake {
        answers: VecDeque::from([
            answer(&turn("a"), 1, 1, 0.0),
            answer(&turn("b"), 1, 1, 0.0),
            answer("DONE", 1, 1, 0.0),
        ]),
        train: vec!["predict-01".into()],
        run_result: Some(Err(TasksError::BudgetExhausted)),
        ..Fake::default()
    };
    let p = harness_with(
        &ctx(json!({"trial_tasks": 1})),
        &observation(&["target/**"]),
        d.path(),
        &mut host,
    )
    .unwrap();
    assert_eq!(host.runs.len(), 1, "no trial after the budget refused one");
    assert_eq!(
        p.notes[1],
        "trial after turn 1: the trial could not run (tasks: the experiment's budget is exhausted); no further trials"
    );
    assert_eq!(p.changed, vec!["target/note.txt"]);

    // A request the host calls malformed is the operator's error.
    let d = root();
    let mut host = Fake {
        answers: VecDeque::from([answer(&turn("a"), 1, 1, 0.0)]),
        train: vec!["predict-01".into()],
        run_result: Some(Err(TasksError::UnknownTask("predict-01".into()))),
        ..Fake::default()
    };
    let err = harness_with(
        &ctx(json!({"trial_tasks": 1})),
        &observation(&["target/**"]),
        d.path(),
        &mut host,
    )
    .unwrap_err();
    assert_eq!(err, "tasks: \"predict-01\" is not a train task");
}

#[test]
fn evidence_shares_one_budget_in_order() {
    let obs = observation(&["target/**"]);
    assert_eq!(
        evidence_text(&obs, Some("{\"score\": 1}"), 16),
        "### Analysis of the parent's results\n{\"groups\":[]}\n\n\
### Rollout of the parent\n{\"f [... 22 more characters]\n\n\
### The parent generation\n [... 12 more characters]\n\n"
    );
    let none = Observation {
        rollout: None,
        analysis: None,
        feedback_dir: None,
        archive: None,
        surface: obs.surface.clone(),
    };
    assert_eq!(
        evidence_text(&none, None, 100),
        "(no evidence was gathered for this generation)\n"
    );
}

#[test]
fn trial_text_counts_passes_and_shows_failed_output() {
    let (text, value) = trial_text(&[
        report("a", TrialStatus::BenchmarkComplete, Some(1.0), "fine"),
        report(
            "b",
            TrialStatus::Timeout,
            None,
            "x\n[timeout] agent ran 30s\n",
        ),
    ]);
    assert_eq!(
        text,
        "1 of 2 trial(s) passed; mean reward 1.000.\n\
- a: benchmark-complete, reward 1.000\n\
- b: timeout, no reward; verifier output (tail): x\n[timeout] agent ran 30s"
    );
    assert_eq!(value["passed"], json!(1));
    assert_eq!(value["mean_reward"], json!(1.0));
    assert_eq!(
        trial_text(&[]).0,
        "0 of 0 trial(s) passed; mean reward n/a."
    );
}

#[test]
fn an_empty_surface_is_an_error() {
    let d = root();
    let mut host = Fake::default();
    assert_eq!(
        harness_with(&ctx(json!({})), &observation(&[]), d.path(), &mut host).unwrap_err(),
        "the surface includes nothing, so there is nothing to edit"
    );
    assert!(host.requests.is_empty());
}

#[test]
fn schema_defaults_and_violations() {
    assert_eq!(
        Value::Object(normalized(json!({})).unwrap()),
        json!({"max_turns": 3, "trial_tasks": 0, "max_tokens": 4096, "temperature": 0.2,
               "context_chars": 24000, "evidence_chars": 8000})
    );
    let paths = |c: Value| -> Vec<String> {
        normalized(c)
            .unwrap_err()
            .into_iter()
            .map(|v| v.path)
            .collect()
    };
    assert_eq!(
        paths(
            json!({"max_turns": 0, "trial_tasks": -1, "max_tokens": 0, "temperature": 3,
                     "extra": 1})
        ),
        vec![
            "extra",
            "max_tokens",
            "max_turns",
            "temperature",
            "trial_tasks"
        ]
    );
    assert_eq!(paths(json!({"max_turns": 11})), vec!["max_turns"]);
}
