use super::*;

fn normalized(config: Value) -> Result<Map<String, Value>, Vec<Violation>> {
    <Reflective as Operator>::config()
        .build()
        .unwrap()
        .normalize_value(&config)
}

fn ctx(config: Value, generation: u32) -> Context {
    let mut c = Context::for_test(Value::Object(normalized(config).unwrap()));
    c.generation = generation;
    c.generation_id = generation.to_string();
    c
}

fn evidence(v: Value) -> Evidence {
    Evidence {
        summary: v.to_string(),
        artifacts: vec![],
    }
}

fn observation(rollout: Option<Value>, analysis: Option<Value>) -> Observation {
    Observation {
        rollout: rollout.map(evidence),
        analysis: analysis.map(evidence),
        feedback_dir: Some("/feedback".into()),
        archive: None,
        surface: Surface {
            includes: vec!["target/**".into()],
            excludes: vec![],
        },
    }
}

fn answer(content: &str) -> ChatResponse {
    ChatResponse {
        content: content.into(),
        input_tokens: 120,
        output_tokens: 30,
        usd: 0.0025,
    }
}

const PARAMS: &str = "{\n  \"slope\": 1.0,\n  \"intercept\": 0.0\n}\n";

fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("target")).unwrap();
    std::fs::write(d.path().join("target/params.json"), PARAMS).unwrap();
    std::fs::write(
        d.path().join("target/prompt.md"),
        "Answer the task.\n{{ instruction }}\n",
    )
    .unwrap();
    d
}

fn train_rollout() -> Value {
    json!({
        "sampling": "static",
        "tasks": ["predict-01", "predict-02"],
        "trials": [
            {"task": "predict-01", "repetition": 0, "status": "benchmark-complete",
             "reward": 1.0, "passed": true},
            {"task": "predict-02", "repetition": 0, "status": "benchmark-complete",
             "reward": 0.25, "passed": false,
             "verifier_output": "expected 5\ngot 3.5\n"}
        ],
        "mean_reward": 0.625,
        "failed": ["predict-02"]
    })
}

fn patterns() -> Value {
    json!({
        "failed_trials": 3,
        "groups": [
            {"pattern": "benchmark-complete: got #.#", "count": 2,
             "tasks": ["predict-02", "predict-05"],
             "examples": [
                {"task": "predict-02", "repetition": 0, "reward": 0.25,
                 "verifier_output": "expected 5\ngot 3.5"},
                {"task": "predict-05", "repetition": 0, "reward": 0.0,
                 "verifier_output": "got 1.5"}
             ]},
            {"pattern": "timeout", "count": 1, "tasks": ["predict-07"], "examples": []}
        ],
        "truncated": false
    })
}

type Seen = std::rc::Rc<std::cell::RefCell<Vec<ChatRequest>>>;

/// A chat stand-in that records every request and answers `reply`.
fn fake(
    reply: Result<ChatResponse, ModelError>,
) -> (
    Seen,
    impl FnMut(&ChatRequest) -> Result<ChatResponse, ModelError>,
) {
    let seen: Seen = Default::default();
    let log = seen.clone();
    let f = move |r: &ChatRequest| {
        log.borrow_mut().push(r.clone());
        reply.clone()
    };
    (seen, f)
}

#[test]
fn rewrites_the_component_and_pins_the_prompt() {
    let d = workspace();
    let c = ctx(json!({"components": ["target/params.json"]}), 1);
    let (seen, mut chat) = fake(Ok(answer(
        "The intercept is too low for every failing task.\n\
         ```json\n{\n  \"slope\": 1.0,\n  \"intercept\": 1.5\n}\n```\n",
    )));
    let p = reflect(
        &c,
        &observation(Some(train_rollout()), None),
        d.path(),
        &mut chat,
    )
    .unwrap();
    assert_eq!(p.changed, vec!["target/params.json"]);
    assert_eq!(
        p.notes,
        vec![
            "component: target/params.json (1 of 1, round-robin)",
            "why: The intercept is too low for every failing task."
        ]
    );
    assert_eq!(
        (p.usage.input_tokens, p.usage.output_tokens, p.usage.usd),
        (120, 30, 0.0025)
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
        "{\n  \"slope\": 1.0,\n  \"intercept\": 1.5\n}\n"
    );

    let seen = seen.borrow();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!(r.max_tokens, Some(2048));
    assert_eq!(r.temperature, Some(0.7));
    assert_eq!(r.messages.len(), 2);
    assert!(matches!(r.messages[0].role, Role::System));
    assert_eq!(r.messages[0].content, SYSTEM_PROMPT);
    assert!(matches!(r.messages[1].role, Role::User));
    assert_eq!(
        r.messages[1].content,
        "Generation 1. Component to revise: target/params.json (component 1 of 1).\n\n\
         Current content of target/params.json:\n```\n{\n  \"slope\": 1.0,\n  \"intercept\": 0.0\n}\n```\n\n\
         Feedback from the train tasks:\n\
         Train rollout: 2 trials, 1 failed, mean reward 0.6250.\n\
         Failed trials:\n\
         - predict-02#0: benchmark-complete, reward 0.25: expected 5 | got 3.5\n\n\
         Revise target/params.json to address these failures. Answer with a short \
         explanation, then the complete new content of target/params.json in a single \
         fenced code block."
    );
}

#[test]
fn components_rotate_by_generation() {
    assert_eq!(component_index(1, 2), 0);
    assert_eq!(component_index(2, 2), 1);
    assert_eq!(component_index(3, 2), 0);
    assert_eq!(component_index(7, 3), 0);
    assert_eq!(component_index(0, 3), 0);

    // Generation 2 of [params, prompt] rewrites the prompt (component 2 of 2).
    let d = workspace();
    let c = ctx(
        json!({"components": ["target/params.json", "/target/prompt.md"],
               "max_tokens": 500, "temperature": 0.2}),
        2,
    );
    let (seen, mut chat) = fake(Ok(answer(
        "```markdown\nAnswer the task with one number.\n{{ instruction }}\n```",
    )));
    let p = reflect(&c, &observation(None, None), d.path(), &mut chat).unwrap();
    assert_eq!(p.changed, vec!["target/prompt.md"]);
    assert_eq!(
        p.notes,
        vec![
            "component: target/prompt.md (2 of 2, round-robin)",
            "why: (the model gave no explanation)"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("target/prompt.md")).unwrap(),
        "Answer the task with one number.\n{{ instruction }}\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
        PARAMS
    );
    let r = &seen.borrow()[0];
    assert_eq!((r.max_tokens, r.temperature), (Some(500), Some(0.2)));
    assert!(
        r.messages[1].content.starts_with(
            "Generation 2. Component to revise: target/prompt.md (component 2 of 2).\n"
        )
    );
    assert!(r.messages[1].content.contains(
        "Feedback from the train tasks:\nNo train evidence is available for this generation.\n"
    ));
}

#[test]
fn feedback_prefers_analysis_groups() {
    let text = render_feedback(Some(&train_rollout()), Some(&patterns()), 4000);
    assert_eq!(
        text,
        "Train rollout: 2 trials, 1 failed, mean reward 0.6250.\n\
         Failure patterns (3 failed trials):\n\
         - benchmark-complete: got #.# (2 trials; tasks: predict-02, predict-05)\n\
         \x20 - predict-02#0 (reward 0.25): expected 5 | got 3.5\n\
         \x20 - predict-05#0 (reward 0): got 1.5\n\
         - timeout (1 trials; tasks: predict-07)"
    );
}

#[test]
fn feedback_from_trials_and_other_analyses() {
    // Without `passed`: a completed trial below reward 1, or any other status, failed.
    let rollout = json!({"trials": [
        {"task": "a", "status": "benchmark-complete", "reward": 1.0},
        {"task": "b", "status": "benchmark-complete", "reward": 0.5},
        {"task": "c", "repetition": 1, "status": "timeout", "reward": null}
    ]});
    let analysis = json!({"failing_tasks": ["b", "c"], "mean_reward": 0.5});
    assert_eq!(
        render_feedback(Some(&rollout), Some(&analysis), 4000),
        "Train rollout: 3 trials, 2 failed, mean reward none.\n\
         Failed trials:\n\
         - b: benchmark-complete, reward 0.5\n\
         - c#1: timeout, reward none\n\
         Analysis: {\"failing_tasks\":[\"b\",\"c\"],\"mean_reward\":0.5}"
    );
    let all_pass = json!({"trials": [{"task": "a", "passed": true, "reward": 1.0}],
                          "mean_reward": 1.0});
    assert_eq!(
        render_feedback(Some(&all_pass), None, 4000),
        "Train rollout: 1 trials, 0 failed, mean reward 1.0000.\nNo train trial failed."
    );
    // rollout/noop's summary: shown as it is.
    assert_eq!(
        render_feedback(Some(&json!({"variant": "noop"})), None, 4000),
        "Rollout: {\"variant\":\"noop\"}"
    );
    assert_eq!(
        render_feedback(None, None, 4000),
        "No train evidence is available for this generation."
    );
    // Long verifier output keeps its last 300 characters, on one line.
    let long = format!("{}\nlast line", "x".repeat(400));
    let r = json!({"trials": [{"task": "a", "status": "timeout", "verifier_output": long}]});
    let lines = feedback_lines(Some(&r), None);
    let expected_tail = format!("{} | last line", "x".repeat(300 - " | last line".len()));
    assert_eq!(
        lines[2],
        format!("- a: timeout, reward none: {expected_tail}")
    );
}

#[test]
fn feedback_is_bounded_by_whole_lines() {
    let lines: Vec<String> = (0..50)
        .map(|i| format!("line {i:02} {}", "y".repeat(20)))
        .collect();
    // Each line is 28 characters; 29 with its newline.
    let text = bound_lines(&lines, 200);
    assert!(text.chars().count() <= 200, "{text}");
    // Budget 200 − 64 = 136: lines of 28 + 4 × 29 = 144 > 136, so 4 lines fit (28 + 3 × 29 = 115).
    assert_eq!(
        text,
        format!(
            "{}\n[46 more lines left out to fit max_feedback_chars]",
            lines[..4].join("\n")
        )
    );
    // Short enough: unchanged.
    assert_eq!(bound_lines(&lines[..2], 200), lines[..2].join("\n"));
    // A first line longer than the budget is cut.
    let huge = vec!["z".repeat(1000), "next".to_string()];
    let text = bound_lines(&huge, 200);
    assert_eq!(
        text,
        format!(
            "{}…\n[1 more lines left out to fit max_feedback_chars]",
            "z".repeat(135)
        )
    );
}

#[test]
fn answers_are_parsed_strictly() {
    let ok = parse_answer("Why: tighter.\n\n```json\n{\"a\": 1}\n```\nDone.").unwrap();
    assert_eq!(
        ok,
        Answer {
            content: "{\"a\": 1}\n".into(),
            why: "Why: tighter. Done.".into()
        }
    );
    // A longer fence may contain shorter ones.
    let nested = parse_answer("````md\nUse:\n```\ncode\n```\n````").unwrap();
    assert_eq!(nested.content, "Use:\n```\ncode\n```\n");
    assert_eq!(nested.why, "");
    assert_eq!(
        parse_answer("just prose").unwrap_err(),
        "the model's answer has no fenced block with the new content"
    );
    assert_eq!(
        parse_answer("```\na\n```\n```\nb\n```").unwrap_err(),
        "the model's answer has 2 fenced blocks; expected exactly one with the complete file"
    );
    assert_eq!(
        parse_answer("x\n```\na\n").unwrap_err(),
        "the model's answer has a fenced block opened on line 2 that is never closed"
    );
    assert_eq!(
        parse_answer("```\n  \n```").unwrap_err(),
        "the model's fenced block is empty"
    );
    let why = parse_answer(&format!("{}\n```\na\n```", "w".repeat(400)))
        .unwrap()
        .why;
    assert_eq!(why, format!("{}…", "w".repeat(299)));
}

#[test]
fn content_checks_and_nothing_written_on_error() {
    assert_eq!(
        check_new_content("target/p.md", "a\n", "a\n\n").unwrap_err(),
        "the model's answer leaves target/p.md unchanged"
    );
    assert!(
        check_new_content("target/p.json", "{}", "{\"a\": }\n")
            .unwrap_err()
            .starts_with("the model's new target/p.json is not valid JSON: ")
    );
    assert!(check_new_content("target/p.md", "a", "b\n").is_ok());

    let run = |reply: &str| {
        let d = workspace();
        let c = ctx(json!({"components": ["target/params.json"]}), 1);
        let (_, mut chat) = fake(Ok(answer(reply)));
        let e = reflect(&c, &observation(None, None), d.path(), &mut chat).unwrap_err();
        assert_eq!(
            std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
            PARAMS
        );
        e
    };
    assert_eq!(
        run(&format!("```\n{PARAMS}```")),
        "the model's answer leaves target/params.json unchanged"
    );
    assert!(run("```\nslope = 2\n```").contains("is not valid JSON"));
    assert_eq!(
        run("no block"),
        "the model's answer has no fenced block with the new content"
    );
}

#[test]
fn model_errors_become_operator_errors() {
    let cases = [
        (
            ModelError::BudgetExhausted,
            "model: budget-exhausted: the experiment's budget cannot pay for this call",
        ),
        (
            ModelError::Refused("the provider refused the request (HTTP 400: bad)".into()),
            "model: refused: the provider refused the request (HTTP 400: bad)",
        ),
        (
            ModelError::Failed("the provider kept failing after 4 attempts".into()),
            "model: failed: the provider kept failing after 4 attempts",
        ),
        (
            ModelError::Timeout,
            "model: timeout: the call ran past its per-call timeout",
        ),
        (
            ModelError::Unavailable("no model is configured".into()),
            "model: unavailable: no model is configured",
        ),
        (
            ModelError::InvalidRequest("max-tokens is 0".into()),
            "model: invalid-request: max-tokens is 0",
        ),
    ];
    for (err, msg) in cases {
        let d = workspace();
        let c = ctx(json!({"components": ["target/params.json"]}), 1);
        let (_, mut chat) = fake(Err(err));
        assert_eq!(
            reflect(&c, &observation(None, None), d.path(), &mut chat).unwrap_err(),
            msg
        );
        assert_eq!(
            std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
            PARAMS
        );
    }
}

#[test]
fn missing_and_oversized_components_fail_before_the_model() {
    let d = workspace();
    let (seen, mut chat) = fake(Ok(answer("```\nx\n```")));
    let c = ctx(json!({"components": ["target/skills/a.md"]}), 1);
    assert_eq!(
        reflect(&c, &observation(None, None), d.path(), &mut chat).unwrap_err(),
        "component target/skills/a.md does not exist"
    );
    let c = ctx(
        json!({"components": ["target/params.json"], "max_component_chars": 10}),
        1,
    );
    assert_eq!(
        reflect(&c, &observation(None, None), d.path(), &mut chat).unwrap_err(),
        "component target/params.json has 39 characters, more than max_component_chars (10)"
    );
    // A configuration that bypassed the schema is still refused.
    let mut c = Context::for_test(json!({"components": ["evaluator/tasks.json"]}));
    c.generation = 1;
    assert_eq!(
        reflect(&c, &observation(None, None), d.path(), &mut chat).unwrap_err(),
        "component \"evaluator/tasks.json\" is not a file under target/ (e.g. target/prompt.md)"
    );
    assert!(seen.borrow().is_empty());
}

#[test]
fn the_fence_outgrows_backticks_in_the_content() {
    assert_eq!(fence_for("plain"), "```");
    assert_eq!(fence_for("a ``` b"), "````");
    assert_eq!(fence_for("`````"), "``````");
    let user = user_prompt("target/p.md", 0, 1, 3, "x\n```\ny\n", "fb");
    assert!(user.contains("\n````\nx\n```\ny\n````\n"), "{user}");
}

#[test]
fn schema_defaults_and_violations() {
    assert_eq!(
        Value::Object(normalized(json!({"components": ["target/params.json"]})).unwrap()),
        json!({"components": ["target/params.json"], "max_feedback_chars": 4000,
               "max_component_chars": 20000, "max_tokens": 2048, "temperature": 0.7})
    );
    let paths = |c: Value| -> Vec<String> {
        normalized(c)
            .unwrap_err()
            .into_iter()
            .map(|v| format!("{}: {}", v.path, v.message))
            .collect()
    };
    assert_eq!(paths(json!({})), vec!["components: is required"]);
    assert_eq!(paths(json!({"components": []})).len(), 1);
    assert_eq!(
        paths(json!({"components": ["src/a.md", "target/p.md", "/target/p.md", "target/../x"]})),
        vec![
            "components[0]: must be a file path under target/, e.g. target/prompt.md",
            "components[2]: repeats an earlier component",
            "components[3]: must be a file path under target/, e.g. target/prompt.md",
        ]
    );
    assert!(normalized(json!({"components": ["target/p.md"], "temperature": 2.5})).is_err());
    assert!(normalized(json!({"components": ["target/p.md"], "max_tokens": 0})).is_err());
    assert!(normalized(json!({"components": ["target/p.md"], "max_feedback_chars": 100})).is_err());
    for bad in [
        "target",
        "target/",
        "targets/x",
        "./target/x",
        "target//x",
        "target/a\\b",
    ] {
        assert!(target_rel(bad).is_err(), "{bad}");
    }
    assert_eq!(target_rel("/target/a/b.md").unwrap(), "target/a/b.md");
}
