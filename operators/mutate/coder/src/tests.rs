use std::collections::VecDeque;

use super::*;
use evolve_operator_sdk::model::ToolCall as WitCall;
use evolve_operator_sdk::model::Turn;
use evolve_operator_sdk::serde_json;

/// Scripted capabilities: answers in order, every request recorded.
#[derive(Default)]
struct Fake {
    answers: VecDeque<Result<Completion, ModelError>>,
    requests: Vec<CompletionRequest>,
    train: Vec<String>,
    runs: Vec<RunRequest>,
}

impl Host for Fake {
    fn complete(&mut self, request: &CompletionRequest) -> Result<Completion, ModelError> {
        self.requests.push(request.clone());
        self.answers
            .pop_front()
            .unwrap_or_else(|| Ok(text("out of script")))
    }
    fn train_tasks(&mut self) -> Vec<String> {
        self.train.clone()
    }
    fn run(&mut self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        self.runs.push(request.clone());
        Ok(request
            .tasks
            .iter()
            .map(|t| TrialReport {
                task: t.clone(),
                repetition: 0,
                status: TrialStatus::BenchmarkComplete,
                reward: Some(1.0),
                verifier_output: format!(
                    "[trajectory] {{\"text\": \"/scratch/trajectories/run-1/{t}__r0.txt\"}}\nall checks passed"
                ),
                duration_ms: 12,
                cost_usd: None,
            })
            .collect())
    }
}

fn text(content: &str) -> Completion {
    Completion {
        content: Some(content.into()),
        tool_calls: vec![],
        finish_reason: "stop".into(),
        input_tokens: 100,
        output_tokens: 10,
        usd: 0.01,
    }
}

fn calls(list: &[(&str, Value)]) -> Result<Completion, ModelError> {
    Ok(Completion {
        content: None,
        tool_calls: list
            .iter()
            .enumerate()
            .map(|(i, (name, args))| WitCall {
                id: format!("c{i}-{name}"),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect(),
        finish_reason: "tool_calls".into(),
        input_tokens: 100,
        output_tokens: 10,
        usd: 0.01,
    })
}

fn ctx(config: Value) -> Context {
    let normalized = <Coder as Operator>::config()
        .build()
        .unwrap()
        .normalize_value(&config)
        .unwrap();
    let mut c = Context::for_test(Value::Object(normalized));
    c.generation_id = "2".into();
    c.generation = 2;
    c
}

fn observation(includes: &[&str], excludes: &[&str]) -> Observation {
    Observation {
        rollout: None,
        analysis: None,
        feedback_dir: Some("/feedback".into()),
        archive: None,
        surface: Surface {
            includes: includes.iter().map(|s| s.to_string()).collect(),
            excludes: excludes.iter().map(|s| s.to_string()).collect(),
        },
    }
}

fn root() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for dir in [
        "target/prompts",
        "scratch/trajectories/run-1",
        "feedback/trajectories/run-1",
    ] {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    std::fs::write(
        d.path().join("target/prompts/system.md"),
        "Be brief.\nSubmit.\n",
    )
    .unwrap();
    std::fs::write(d.path().join("target/agent.toml"), "command = \"x\"\n").unwrap();
    std::fs::write(
        d.path().join("scratch/trajectories/run-1/t1__r0.txt"),
        "step 1: ls\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("feedback/trajectories/run-1/t2__r0.txt"),
        "step 1: cat\n",
    )
    .unwrap();
    d
}

fn fake(answers: Vec<Result<Completion, ModelError>>) -> Fake {
    Fake {
        answers: answers.into(),
        train: vec!["t1".into(), "t2".into()],
        ..Fake::default()
    }
}

fn tool_results(req: &CompletionRequest) -> Vec<String> {
    req.turns
        .iter()
        .filter_map(|t| match t {
            Turn::Tool(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn reads_edits_runs_and_finishes_with_exactly_the_edit() {
    let dir = root();
    let mut host = fake(vec![
        calls(&[(
            "read_file",
            json!({"path": "target/prompts/system.md", "start_line": 2}),
        )]),
        calls(&[(
            "edit",
            json!({"path": "target/prompts/system.md", "search": "Submit.", "replace": "Check, then submit."}),
        )]),
        calls(&[("run_tasks", json!({"tasks": ["t1"]}))]),
        calls(&[("finish", json!({"notes": "the agent now checks"}))]),
    ]);
    let p = coder_with(
        &ctx(json!({})),
        &observation(&["target/**"], &["target/agent.toml"]),
        dir.path(),
        &mut host,
    )
    .unwrap();
    assert_eq!(p.changed, vec!["target/prompts/system.md"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target/prompts/system.md")).unwrap(),
        "Be brief.\nCheck, then submit.\n"
    );
    assert_eq!(p.notes[0], "finished: the agent now checks");
    assert_eq!(host.requests.len(), 4);
    assert!((p.usage.usd - 0.04).abs() < 1e-12);
    assert_eq!(p.usage.input_tokens, 400);
    // Each result went back: the read (line numbers), the edit, the run with its
    // trajectory summary read from /scratch.
    let results = tool_results(&host.requests[3]);
    assert!(results[0].contains("    2  Submit."), "{}", results[0]);
    assert!(!results[0].contains("Be brief"), "{}", results[0]);
    assert!(results[1].contains("replaced 1 line(s)"), "{}", results[1]);
    assert!(
        results[2].contains("1/1 trial(s) passed") && results[2].contains("step 1: ls"),
        "{}",
        results[2]
    );
    assert_eq!(host.runs[0].tasks, vec!["t1"]);
    // The tools and settings reached the request.
    let names: Vec<&str> = host.requests[0]
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "list_dir",
            "read_file",
            "search",
            "write_file",
            "edit",
            "run_tasks",
            "read_trajectory",
            "finish"
        ]
    );
    assert_eq!(host.requests[0].max_tokens, Some(4096));
    // The trajectory holds every turn.
    let traj: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("scratch/trajectory.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(traj["schema_version"], "ATIF-v1.4");
    assert_eq!(traj["steps"].as_array().unwrap().len(), 6);
    assert_eq!(traj["steps"][3]["tool_calls"][0]["function_name"], "edit");
    assert_eq!(traj["final_metrics"]["total_prompt_tokens"], 400);
}

#[test]
fn hostile_calls_are_refused_in_the_guest_and_never_reach_the_host() {
    let dir = root();
    std::fs::create_dir_all(dir.path().join("secret")).unwrap();
    std::fs::write(dir.path().join("secret/key"), "KEY-CANARY").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join("target/link")).unwrap();
    let hostile = [
        ("read_file", json!({"path": "../.evolve/archive.jsonl"})),
        ("read_file", json!({"path": "/target/../secret/key"})),
        ("read_file", json!({"path": "secret/key"})),
        ("read_file", json!({"path": "target/link/key"})),
        ("list_dir", json!({"path": "target/link"})),
        ("search", json!({"pattern": "KEY", "path": "target/link"})),
        (
            "write_file",
            json!({"path": "target/op.wasm", "content": "x"}),
        ),
        (
            "write_file",
            json!({"path": "target/agent.toml", "content": "command = \"evil\""}),
        ),
        (
            "write_file",
            json!({"path": "feedback/parent.json", "content": "{}"}),
        ),
        (
            "write_file",
            json!({"path": "target/link/key", "content": "x"}),
        ),
        (
            "write_file",
            json!({"path": "target/.git/config", "content": "x"}),
        ),
        ("run_tasks", json!({"tasks": ["gate-task-7"]})),
        ("read_trajectory", json!({"task": "sealed-task"})),
        ("run_tasks", json!({"tasks": ["t1", "t1"]})),
        ("shell", json!({"cmd": "cat /etc/passwd"})),
        ("read_file", json!("not an object")),
    ];
    let mut host = fake(vec![
        calls(&hostile),
        calls(&[("finish", json!({"notes": "gave up"}))]),
    ]);
    let p = coder_with(
        &ctx(json!({})),
        &observation(&["target/**"], &["target/agent.toml"]),
        dir.path(),
        &mut host,
    )
    .unwrap();
    assert!(p.changed.is_empty(), "{:?}", p.changed);
    assert!(host.runs.is_empty(), "a refused run reached the host");
    let results = tool_results(&host.requests[1]);
    assert_eq!(results.len(), hostile.len());
    for ((name, args), result) in hostile.iter().zip(&results) {
        assert!(result.starts_with("error: "), "{name} {args}: {result}");
        assert!(!result.contains("KEY-CANARY"), "{name} {args}: {result}");
    }
    assert!(results[6].contains(".wasm"), "{}", results[6]);
    assert!(
        results[7].contains("excluded by `target/agent.toml`"),
        "{}",
        results[7]
    );
    assert!(results[11].contains("not a train task"), "{}", results[11]);
    assert!(results[14].contains("unknown tool"), "{}", results[14]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("target/agent.toml")).unwrap(),
        "command = \"x\"\n"
    );
    assert!(!dir.path().join("target/op.wasm").exists());
    assert!(p.notes[1].contains("16 refused or failed"), "{:?}", p.notes);
}

#[test]
fn limits_stop_the_loop_and_keep_the_edits() {
    let dir = root();
    let write = |i: usize| {
        calls(&[(
            "write_file",
            json!({"path": format!("target/n{i}.md"), "content": "x"}),
        )])
    };
    // Turns.
    let mut host = fake((0..10).map(write).collect());
    let p = coder_with(
        &ctx(json!({"max_turns": 3})),
        &observation(&["target/**"], &[]),
        dir.path(),
        &mut host,
    )
    .unwrap();
    assert_eq!(host.requests.len(), 3);
    assert_eq!(p.changed.len(), 3);
    assert_eq!(p.notes[0], "stopped at a limit: max_turns (3)");
    // Dollars: each call costs 0.01.
    let mut host = fake((10..20).map(write).collect());
    let p = coder_with(
        &ctx(json!({"max_usd": 0.025})),
        &observation(&["target/**"], &[]),
        dir.path(),
        &mut host,
    )
    .unwrap();
    assert_eq!(host.requests.len(), 3);
    assert!(
        p.notes[0].starts_with("stopped at a limit: max_usd"),
        "{:?}",
        p.notes
    );
    // Tokens: each call is 110.
    let mut host = fake((20..40).map(write).collect());
    let p = coder_with(
        &ctx(json!({"max_total_tokens": 1000})),
        &observation(&["target/**"], &[]),
        dir.path(),
        &mut host,
    )
    .unwrap();
    assert_eq!(host.requests.len(), 10);
    assert!(
        p.notes[0].starts_with("stopped at a limit: max_total_tokens"),
        "{:?}",
        p.notes
    );
    // Train runs.
    let run = || calls(&[("run_tasks", json!({"count": 1}))]);
    let mut host = fake(vec![run(), run(), run()]);
    coder_with(
        &ctx(json!({"max_task_runs": 2, "max_turns": 4})),
        &observation(&["target/**"], &[]),
        dir.path(),
        &mut host,
    )
    .unwrap();
    assert_eq!(host.runs.len(), 2);
    assert!(tool_results(&host.requests[3])[2].contains("train-run limit"));
}

#[test]
fn an_answer_without_tool_calls_ends_and_model_errors_are_the_operators() {
    let dir = root();
    let mut host = fake(vec![Ok(text("I have nothing to change."))]);
    let p = coder_with(
        &ctx(json!({})),
        &observation(&["target/**"], &[]),
        dir.path(),
        &mut host,
    )
    .unwrap();
    assert!(p.changed.is_empty());
    assert_eq!(
        p.notes[0],
        "ended: the model answered without calling a tool"
    );

    let mut host = fake(vec![Err(ModelError::BudgetExhausted)]);
    let err = coder_with(
        &ctx(json!({})),
        &observation(&["target/**"], &[]),
        dir.path(),
        &mut host,
    )
    .unwrap_err();
    assert!(err.starts_with("model: budget-exhausted"), "{err}");
}

#[test]
fn search_list_and_trajectories() {
    let dir = root();
    let mut host = fake(vec![
        calls(&[
            ("search", json!({"pattern": "^Sub(mit)?\\.$"})),
            ("search", json!({"pattern": "(unclosed"})),
            ("list_dir", json!({"path": "target"})),
            ("read_trajectory", json!({"task": "t2"})),
            ("read_trajectory", json!({"task": "t1"})),
        ]),
        calls(&[("finish", json!({"notes": "n"}))]),
    ]);
    coder_with(
        &ctx(json!({"model": "proposer", "reasoning_effort": "high"})),
        &observation(&["target/**"], &[]),
        dir.path(),
        &mut host,
    )
    .unwrap();
    let r = tool_results(&host.requests[1]);
    assert_eq!(r[0], "target/prompts/system.md:2: Submit.");
    assert!(
        r[1].starts_with("error: the pattern is not a valid regular expression"),
        "{}",
        r[1]
    );
    assert!(
        r[2].contains("target/prompts (dir)")
            && r[2].contains("target/agent.toml (file, 14 bytes)"),
        "{}",
        r[2]
    );
    assert!(
        r[3].contains("the parent's rollout") && r[3].contains("step 1: cat"),
        "{}",
        r[3]
    );
    assert!(
        r[4].contains("your run") && r[4].contains("step 1: ls"),
        "{}",
        r[4]
    );
    assert_eq!(host.requests[0].model.as_deref(), Some("proposer"));
    assert_eq!(host.requests[0].reasoning_effort.as_deref(), Some("high"));
}

#[test]
fn config_is_bounded() {
    let schema = <Coder as Operator>::config().build().unwrap();
    for bad in [
        json!({"max_turns": 0}),
        json!({"max_usd": 0}),
        json!({"reasoning_effort": "extreme"}),
        json!({"max_tasks_per_run": 0}),
        json!({"unknown": 1}),
    ] {
        assert!(schema.normalize_value(&bad).is_err(), "{bad}");
    }
    let ok = schema.normalize_value(&json!({})).unwrap();
    assert_eq!(ok["max_turns"], 24);
}
