use super::*;
use evolve_operator_sdk::trajectories::cases;
use evolve_operator_sdk::trajectories::testing::{TrialSpec, bundle, trajectory};

fn ctx(config: Value) -> Context {
    let schema = <TrajectoryJudge as Operator>::config().build().unwrap();
    Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()))
}

fn parse(s: &str) -> Value {
    evolve_operator_sdk::serde_json::from_str(s).unwrap()
}

fn fixture(root: &Path, failed: bool) -> Evidence {
    let summary = bundle(
        root,
        &[
            TrialSpec {
                task: "csv",
                reward: if failed { 0.0 } else { 1.0 },
                verifier_output: "error: No such file or directory: '/app/out.json'",
                trajectory: Some(trajectory(
                    "csv",
                    "python3 conv.py > /app/out.json",
                    "can't open file 'conv.py'",
                    2,
                )),
            },
            TrialSpec {
                task: "grep",
                reward: if failed { 0.5 } else { 1.0 },
                verifier_output: "FAIL 1 of 2",
                trajectory: None,
            },
        ],
    );
    Evidence {
        summary: summary.to_string(),
        artifacts: vec![],
    }
}

fn answer(content: &str) -> ChatResponse {
    ChatResponse {
        content: content.into(),
        input_tokens: 900,
        output_tokens: 40,
        usd: 0.0012,
    }
}

#[test]
fn one_metered_call_judges_the_failed_trials() {
    let dir = tempfile::tempdir().unwrap();
    let (feedback, scratch) = (dir.path().join("feedback"), dir.path().join("scratch"));
    std::fs::create_dir_all(&scratch).unwrap();
    let rollout = fixture(&feedback, true);
    let b = Bundle::open(&feedback);
    let mut seen: Vec<ChatRequest> = Vec::new();
    let ev = judge_with(
        &ctx(json!({"max_tokens": 300})),
        &rollout,
        b.as_ref(),
        &scratch,
        &mut |r| {
            seen.push(r.clone());
            Ok(answer(
                "  csv#0 went wrong at step 4: conv.py does not exist.  ",
            ))
        },
    )
    .unwrap();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!((r.max_tokens, r.temperature), (Some(300), Some(0.0)));
    assert_eq!(r.messages[0].content, SYSTEM);
    let user = &r.messages[1].content;
    assert!(
        user.contains("## Trial csv#0 (benchmark-complete, reward 0)"),
        "{user}"
    );
    assert!(
        user.contains("Where it went wrong (by rule verifier_pointer): step 4"),
        "{user}"
    );
    assert!(user.contains("[step 4 agent]  <- went wrong\n"), "{user}");
    assert!(
        user.contains("  call: bash: python3 conv.py > /app/out.json\n"),
        "{user}"
    );
    assert!(
        user.contains("## Trial grep#0 (benchmark-complete, reward 0.5)"),
        "{user}"
    );
    assert!(
        user.contains("No trajectory: the trial left no trajectory"),
        "{user}"
    );
    assert!(
        !user.contains("Solve csv in /app."),
        "the instruction is not repeated"
    );

    let s = parse(&ev.summary);
    assert_eq!(
        s,
        json!({"judged": ["csv#0", "grep#0"], "left_out": 0,
               "culprits": [{"task": "csv#0", "step_id": 4, "rule": "verifier_pointer"}],
               "verdict": "csv#0 went wrong at step 4: conv.py does not exist.",
               "usd": 0.0012, "input_tokens": 900, "output_tokens": 40})
    );
    assert_eq!(ev.artifacts, [JUDGEMENT]);
    let kept = parse(&std::fs::read_to_string(scratch.join(JUDGEMENT)).unwrap());
    assert_eq!(kept["request"]["user"], json!(user));
    assert_eq!(kept["response"]["usd"], 0.0012);
}

#[test]
fn the_prompt_and_the_verdict_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture(dir.path(), true);
    let summary = parse(&rollout.summary);
    let all = cases(&summary, Bundle::open(dir.path()).as_ref()).unwrap();
    let failed: Vec<&Case> = all.iter().collect();
    let cfg: Config = ctx(json!({"max_trials": 1})).config_as().unwrap();
    let (_, shown) = user_prompt(&failed, &cfg);
    assert_eq!(shown, 1);
    // Room for the first trial only: the second is left out.
    let long = |n: usize| {
        let mut c = failed[1].clone();
        c.note = Some("n".repeat(n));
        c
    };
    let (a, b) = (long(1200), long(1200));
    let cfg: Config = ctx(json!({"max_prompt_chars": 2000})).config_as().unwrap();
    let (text, shown) = user_prompt(&[&a, &b], &cfg);
    assert_eq!(shown, 1);
    assert!(text.chars().count() <= 2000);
    // A first trial longer than the whole budget is clipped to it.
    let huge = long(50_000);
    let (text, shown) = user_prompt(&[&huge, &a], &cfg);
    assert_eq!(shown, 1);
    assert!(
        text.chars().count() <= 2000 + 40,
        "{}",
        text.chars().count()
    );
    assert!(text.contains("more characters cut]"));

    let ev = judge_with(
        &ctx(json!({"max_answer_chars": 200})),
        &rollout,
        Bundle::open(dir.path()).as_ref(),
        dir.path(),
        &mut |_| Ok(answer(&"lesson ".repeat(200))),
    )
    .unwrap();
    let verdict = parse(&ev.summary)["verdict"].as_str().unwrap().to_string();
    assert!(verdict.chars().count() <= 200 + 40);
    assert!(verdict.contains("more characters cut]"));
}

#[test]
fn nothing_failed_means_no_call_and_a_model_error_is_the_operators_error() {
    let dir = tempfile::tempdir().unwrap();
    let b = Bundle::open(dir.path());
    let passed = fixture(dir.path(), false);
    let ev = judge_with(
        &ctx(json!({})),
        &passed,
        b.as_ref(),
        dir.path(),
        &mut |_| panic!("the model must not be called"),
    )
    .unwrap();
    let s = parse(&ev.summary);
    assert_eq!(s["judged"], json!([]));
    assert_eq!(
        s["note"],
        "no failed train trial to judge: the model was not called"
    );

    let failed = fixture(dir.path(), true);
    for (error, text) in [
        (
            ModelError::BudgetExhausted,
            "analyze/trajectory_judge: model: budget-exhausted: the experiment's budget cannot pay for this call",
        ),
        (
            ModelError::Timeout,
            "analyze/trajectory_judge: model: timeout: the call ran past its per-call timeout",
        ),
        (
            ModelError::Unavailable("no model is configured".into()),
            "analyze/trajectory_judge: model: unavailable: no model is configured",
        ),
    ] {
        let err = judge_with(
            &ctx(json!({})),
            &failed,
            b.as_ref(),
            dir.path(),
            &mut |_| Err(error.clone()),
        )
        .unwrap_err();
        assert_eq!(err, text);
    }
}

#[test]
fn schema_defaults_and_bounds() {
    let schema = <TrajectoryJudge as Operator>::config().build().unwrap();
    assert_eq!(
        Value::Object(schema.normalize("{}").unwrap()),
        json!({"max_trials": 4, "steps_before": 3, "steps_after": 1, "field_chars": 400,
               "max_prompt_chars": 16000, "max_tokens": 600, "temperature": 0.0,
               "max_answer_chars": 4000})
    );
    for bad in [
        r#"{"max_trials": 0}"#,
        r#"{"max_trials": 33}"#,
        r#"{"max_prompt_chars": 1999}"#,
        r#"{"max_tokens": 8193}"#,
        r#"{"temperature": 2.5}"#,
        r#"{"max_answer_chars": 100}"#,
        r#"{"endpoint": "http://x"}"#,
    ] {
        assert!(schema.normalize(bad).is_err(), "{bad} was accepted");
    }
}
