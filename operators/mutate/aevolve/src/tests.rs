use super::*;

fn normalized(config: Value) -> Result<Map<String, Value>, Vec<Violation>> {
    <AEvolve as Operator>::config()
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
        input_tokens: 900,
        output_tokens: 200,
        usd: 0.004,
    }
}

const PROMPT: &str = "You solve tasks.\n{{ instruction }}\n";
const SKILL: &str = "# Check units\nConvert units before answering.\n";

fn workspace() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("target/skills/units")).unwrap();
    std::fs::write(d.path().join("target/prompt.md"), PROMPT).unwrap();
    std::fs::write(d.path().join("target/skills/units/SKILL.md"), SKILL).unwrap();
    d
}

fn read(d: &tempfile::TempDir, p: &str) -> Option<String> {
    std::fs::read_to_string(d.path().join(p)).ok()
}

fn train_rollout() -> Value {
    json!({
        "sampling": "static",
        "tasks": ["t1", "t2"],
        "trials": [
            {"task": "t1", "repetition": 0, "status": "benchmark-complete",
             "reward": 1.0, "passed": true},
            {"task": "t2", "repetition": 0, "status": "candidate-invalid",
             "reward": null, "passed": false, "verifier_output": "no answer file"}
        ],
        "mean_reward": 1.0,
        "failed": ["t2"]
    })
}

type Seen = std::rc::Rc<std::cell::RefCell<Vec<ChatRequest>>>;

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
fn edits_the_prompt_and_adds_a_skill_with_a_pinned_prompt() {
    let d = workspace();
    let c = ctx(json!({}), 2);
    let (seen, mut chat) = fake(Ok(answer(
        "The agent gives up without writing an answer file.\n\
         === FILE: target/prompt.md ===\n\
         You solve tasks. Always write your answer file, even when unsure.\n\
         {{ instruction }}\n\
         === END ===\n\
         \n\
         === FILE: /target/skills/answer-file/SKILL.md ===\n\
         # Always write the answer file\n\
         Write a best guess before finishing.\n\
         === END ===\n",
    )));
    let trajectory = json!({"trials": 2, "failing_tasks": ["t2"]});
    let p = evolve(
        &c,
        &observation(Some(train_rollout()), Some(trajectory)),
        d.path(),
        &mut chat,
    )
    .unwrap();
    assert_eq!(
        p.changed,
        vec!["target/prompt.md", "target/skills/answer-file/SKILL.md"]
    );
    assert_eq!(
        p.notes,
        vec![
            "target/prompt.md: rewritten",
            "target/skills/answer-file/SKILL.md: new",
            "why: The agent gives up without writing an answer file."
        ]
    );
    assert_eq!(
        (p.usage.input_tokens, p.usage.output_tokens, p.usage.usd),
        (900, 200, 0.004)
    );
    assert_eq!(
        read(&d, "target/prompt.md").unwrap(),
        "You solve tasks. Always write your answer file, even when unsure.\n{{ instruction }}\n"
    );
    assert_eq!(
        read(&d, "target/skills/answer-file/SKILL.md").unwrap(),
        "# Always write the answer file\nWrite a best guess before finishing.\n"
    );
    assert_eq!(read(&d, "target/skills/units/SKILL.md").unwrap(), SKILL);

    let seen = seen.borrow();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!((r.max_tokens, r.temperature), (Some(4096), Some(0.7)));
    assert!(matches!(r.messages[0].role, Role::System));
    assert_eq!(
        r.messages[0].content,
        system_prompt("target/prompt.md", "target/skills", 3)
    );
    assert!(r.messages[0].content.contains(
        "Answer format: for each file you change or create, write one block\n\
         === FILE: <path> ===\n<the complete new content of the file>\n=== END ===\n\
         where <path> is target/prompt.md or a file under target/skills/."
    ));
    assert!(
        r.messages[0]
            .content
            .contains("Keep template placeholders such as {{ instruction }} that")
    );
    assert!(matches!(r.messages[1].role, Role::User));
    assert_eq!(
        r.messages[1].content,
        "Evolution cycle: generation 2.\n\n\
         ## Current prompt: target/prompt.md\n```\nYou solve tasks.\n{{ instruction }}\n```\n\n\
         ## Current skills under target/skills/ (1 files)\n\
         ### target/skills/units/SKILL.md\n```\n# Check units\nConvert units before answering.\n```\n\n\
         ## Feedback from the train tasks\n\
         Train rollout: 2 trials, 1 failed, mean reward 1.0000.\n\
         Failed trials:\n\
         - t2#0: candidate-invalid, reward none: no answer file\n\
         Analysis: {\"trials\":2,\"failing_tasks\":[\"t2\"]}\n\n\
         ## Task\n\
         Edit the prompt and/or the skills so that the agent avoids these failures. Answer \
         with at most 3 FILE blocks, each holding the complete new content of one file."
    );
}

#[test]
fn paths_outside_prompt_and_skills_are_refused_before_any_write() {
    let refused = |path: &str| {
        let d = workspace();
        let (_, mut chat) = fake(Ok(answer(&format!(
            "=== FILE: target/skills/units/SKILL.md ===\nnew\n=== END ===\n\
             === FILE: {path} ===\nx\n=== END ==="
        ))));
        let e = evolve(
            &ctx(json!({}), 1),
            &observation(None, None),
            d.path(),
            &mut chat,
        )
        .unwrap_err();
        // Nothing was written, not even the allowed first block.
        assert_eq!(read(&d, "target/skills/units/SKILL.md").unwrap(), SKILL);
        e
    };
    for path in [
        "target/params.json",
        "evaluator/tasks.json",
        "target/skills",
        "target/skills/../params.json",
        "target/skillsX/a.md",
        "operators/mutate.wasm",
        "target/prompt.md/x",
    ] {
        assert_eq!(
            refused(path),
            format!(
                "the model's block 2 names {path}, which is neither target/prompt.md nor a file \
                 under target/skills/: refused"
            )
        );
    }
}

#[test]
fn answers_are_parsed_strictly() {
    let ok = parse_edits(
        "thinking\n=== FILE: a ===\nline 1\n\nline 3\n\n=== END ===  \nbye\n=== FILE: b ===\nx\n=== END ===",
    )
    .unwrap();
    assert_eq!(
        ok,
        Edits {
            edits: vec![
                Edit {
                    path: "a".into(),
                    content: "line 1\n\nline 3\n".into()
                },
                Edit {
                    path: "b".into(),
                    content: "x\n".into()
                },
            ],
            why: "thinking bye".into()
        }
    );
    let err = |s: &str| parse_edits(s).unwrap_err();
    assert_eq!(
        err("no blocks here"),
        "the model's answer has no `=== FILE: <path> ===` block"
    );
    assert_eq!(
        err("=== FILE: a\nx\n=== END ==="),
        "line 1 of the model's answer is not a header `=== FILE: <path> ===`"
    );
    assert_eq!(
        err("=== FILE:  ===\nx\n=== END ==="),
        "line 1 of the model's answer is not a header `=== FILE: <path> ===`"
    );
    assert_eq!(
        err("hi\n=== END ==="),
        "line 2 of the model's answer ends a block that was never opened"
    );
    assert_eq!(
        err("=== FILE: a ===\nx\n=== FILE: b ===\ny\n=== END ==="),
        "line 3 of the model's answer opens a block inside the block for a (missing `=== END ===`)"
    );
    assert_eq!(
        err("x\n=== FILE: a ===\ny"),
        "the model's block for a (line 2) has no `=== END ===`"
    );
    assert_eq!(
        err("=== FILE: a ===\n \n=== END ==="),
        "the model's block for a is empty"
    );
}

#[test]
fn limits_duplicates_and_unchanged_files() {
    let blocks = |paths: &[&str]| -> Vec<Edit> {
        paths
            .iter()
            .map(|p| Edit {
                path: p.to_string(),
                content: "x\n".into(),
            })
            .collect()
    };
    let ok = check_edits(
        &blocks(&["/target/prompt.md", "target/skills/a/SKILL.md"]),
        "target/prompt.md",
        "target/skills",
        3,
    )
    .unwrap();
    assert_eq!(ok, vec!["target/prompt.md", "target/skills/a/SKILL.md"]);
    assert_eq!(
        check_edits(
            &blocks(&[
                "target/skills/a",
                "target/skills/b",
                "target/skills/c",
                "target/skills/d"
            ]),
            "target/prompt.md",
            "target/skills",
            3
        )
        .unwrap_err(),
        "the model's answer edits 4 files, more than max_files (3)"
    );
    assert_eq!(
        check_edits(
            &blocks(&["target/prompt.md", "/target/prompt.md"]),
            "target/prompt.md",
            "target/skills",
            3
        )
        .unwrap_err(),
        "the model's answer has two blocks for target/prompt.md"
    );

    // An unchanged block is skipped; all unchanged is an error.
    let d = workspace();
    let (_, mut chat) = fake(Ok(answer(&format!(
        "=== FILE: target/prompt.md ===\n{PROMPT}=== END ===\n\
         === FILE: target/skills/units/SKILL.md ===\n# Check units\nAlways convert.\n=== END ==="
    ))));
    let p = evolve(
        &ctx(json!({}), 1),
        &observation(None, None),
        d.path(),
        &mut chat,
    )
    .unwrap();
    assert_eq!(p.changed, vec!["target/skills/units/SKILL.md"]);
    assert_eq!(
        p.notes,
        vec![
            "target/prompt.md: unchanged (skipped)",
            "target/skills/units/SKILL.md: rewritten",
            "why: (the model gave no reasoning)"
        ]
    );
    let d = workspace();
    let (_, mut chat) = fake(Ok(answer(&format!(
        "=== FILE: target/prompt.md ===\n{PROMPT}\n\n=== END ==="
    ))));
    assert_eq!(
        evolve(
            &ctx(json!({}), 1),
            &observation(None, None),
            d.path(),
            &mut chat
        )
        .unwrap_err(),
        "the model's edits leave every file unchanged"
    );
}

#[test]
fn placeholders_must_survive_and_links_are_refused() {
    assert_eq!(
        placeholders("a {{ instruction }} b {{x}} {{ instruction }} {{ broken\n}}"),
        vec!["{{ instruction }}", "{{x}}"]
    );
    let d = workspace();
    let (_, mut chat) = fake(Ok(answer(
        "=== FILE: target/prompt.md ===\nYou solve tasks well.\n=== END ===",
    )));
    assert_eq!(
        evolve(
            &ctx(json!({}), 1),
            &observation(None, None),
            d.path(),
            &mut chat
        )
        .unwrap_err(),
        "the model's new target/prompt.md drops the placeholder {{ instruction }}"
    );
    assert_eq!(read(&d, "target/prompt.md").unwrap(), PROMPT);

    #[cfg(unix)]
    {
        let d = workspace();
        std::os::unix::fs::symlink("../prompt.md", d.path().join("target/skills/link.md")).unwrap();
        let (_, mut chat) = fake(Ok(answer(
            "=== FILE: target/skills/link.md ===\nx\n=== END ===",
        )));
        assert_eq!(
            evolve(
                &ctx(json!({}), 1),
                &observation(None, None),
                d.path(),
                &mut chat
            )
            .unwrap_err(),
            "target/skills/link.md is a symbolic link: refused"
        );
        assert_eq!(read(&d, "target/prompt.md").unwrap(), PROMPT);
    }
    let d = workspace();
    let (_, mut chat) = fake(Ok(answer(
        "=== FILE: target/skills/units ===\nx\n=== END ===",
    )));
    assert_eq!(
        evolve(
            &ctx(json!({}), 1),
            &observation(None, None),
            d.path(),
            &mut chat
        )
        .unwrap_err(),
        "target/skills/units is a directory: refused"
    );
}

#[test]
fn the_workspace_and_context_budget() {
    // No skills directory yet: the model may create the first skill.
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("target")).unwrap();
    std::fs::write(d.path().join("target/prompt.md"), PROMPT).unwrap();
    let ws = read_workspace(d.path(), "target/prompt.md", "target/skills").unwrap();
    assert!(ws.skills.is_empty());
    let user = user_prompt(1, &ws, "fb", 3, 24000);
    assert!(
        user.contains("## Current skills under target/skills/\n(none yet)\n\n"),
        "{user}"
    );

    // Skills in path order; past the budget, only their size.
    let d = workspace();
    std::fs::create_dir_all(d.path().join("target/skills/big")).unwrap();
    std::fs::write(
        d.path().join("target/skills/big/SKILL.md"),
        "b".repeat(2000),
    )
    .unwrap();
    std::fs::write(d.path().join("target/skills/z.bin"), [0xff, 0xfe]).unwrap();
    let ws = read_workspace(d.path(), "target/prompt.md", "target/skills").unwrap();
    let names: Vec<&str> = ws.skills.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        names,
        [
            "target/skills/big/SKILL.md",
            "target/skills/units/SKILL.md",
            "target/skills/z.bin"
        ]
    );
    let user = user_prompt(1, &ws, "fb", 3, 1000);
    assert!(user.contains(
        "## Current skills under target/skills/ (3 files)\n\
         ### target/skills/big/SKILL.md\n(2000 characters; left out to fit max_context_chars)\n\
         ### target/skills/units/SKILL.md\n```\n# Check units\nConvert units before answering.\n```\n\
         ### target/skills/z.bin\n(not UTF-8 text; left out)\n\n"
    ), "{user}");

    // A missing prompt or one longer than the budget fails before the model is called.
    let (seen, mut chat) = fake(Ok(answer("x")));
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(
        evolve(
            &ctx(json!({}), 1),
            &observation(None, None),
            empty.path(),
            &mut chat
        )
        .unwrap_err(),
        "target/prompt.md does not exist: mutate/aevolve evolves an agent's prompt and skills \
         (set prompt_path to the agent's prompt file)"
    );
    std::fs::write(d.path().join("target/prompt.md"), "p".repeat(1001)).unwrap();
    assert_eq!(
        evolve(
            &ctx(json!({"max_context_chars": 1000}), 1),
            &observation(None, None),
            d.path(),
            &mut chat
        )
        .unwrap_err(),
        "target/prompt.md has 1001 characters, more than max_context_chars (1000)"
    );
    assert!(seen.borrow().is_empty());
}

#[test]
fn feedback_is_bounded_and_uses_failure_groups() {
    let analysis = json!({"failed_trials": 1, "groups": [
        {"pattern": "candidate-invalid: no answer file", "count": 1, "tasks": ["t2"],
         "examples": [{"task": "t2", "repetition": 0, "reward": null,
                       "verifier_output": "no answer file"}]}
    ]});
    assert_eq!(
        render_feedback(Some(&train_rollout()), Some(&analysis), 4000),
        "Train rollout: 2 trials, 1 failed, mean reward 1.0000.\n\
         Failure patterns (1 failed trials):\n\
         - candidate-invalid: no answer file (1 trials; tasks: t2)\n\
         \x20 - t2#0 (reward none): no answer file"
    );
    let many = json!({"trials": (0..40).map(|i| json!({
        "task": format!("task-{i:02}"), "status": "timeout", "reward": null
    })).collect::<Vec<_>>()});
    let text = render_feedback(Some(&many), None, 300);
    assert!(text.chars().count() <= 300);
    assert_eq!(
        text,
        "Train rollout: 40 trials, 40 failed, mean reward none.\n\
         Failed trials:\n\
         - task-00: timeout, reward none\n\
         - task-01: timeout, reward none\n\
         - task-02: timeout, reward none\n\
         - task-03: timeout, reward none\n\
         - task-04: timeout, reward none\n\
         [35 more lines left out to fit max_feedback_chars]"
    );
}

#[test]
fn model_errors_become_operator_errors() {
    for (err, msg) in [
        (
            ModelError::BudgetExhausted,
            "model: budget-exhausted: the experiment's budget cannot pay for this call",
        ),
        (
            ModelError::Refused("HTTP 401".into()),
            "model: refused: HTTP 401",
        ),
        (
            ModelError::Failed("HTTP 503".into()),
            "model: failed: HTTP 503",
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
            ModelError::InvalidRequest("no messages".into()),
            "model: invalid-request: no messages",
        ),
    ] {
        let d = workspace();
        let (_, mut chat) = fake(Err(err));
        assert_eq!(
            evolve(
                &ctx(json!({}), 1),
                &observation(None, None),
                d.path(),
                &mut chat
            )
            .unwrap_err(),
            msg
        );
        assert_eq!(read(&d, "target/prompt.md").unwrap(), PROMPT);
    }
}

#[test]
fn custom_paths_and_schema() {
    // Custom locations: prompt under prompts/, skills elsewhere, max_files 1.
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("target/prompts")).unwrap();
    std::fs::write(d.path().join("target/prompts/system.md"), "Be brief.\n").unwrap();
    let c = ctx(
        json!({"prompt_path": "/target/prompts/system.md", "skills_dir": "target/kb",
               "max_files": 1, "max_tokens": 1000, "temperature": 0.0}),
        5,
    );
    let (seen, mut chat) = fake(Ok(answer(
        "=== FILE: target/kb/retry/SKILL.md ===\nRetry once.\n=== END ===",
    )));
    let p = evolve(&c, &observation(None, None), d.path(), &mut chat).unwrap();
    assert_eq!(p.changed, vec!["target/kb/retry/SKILL.md"]);
    assert_eq!(
        read(&d, "target/kb/retry/SKILL.md").unwrap(),
        "Retry once.\n"
    );
    let r = &seen.borrow()[0];
    assert_eq!((r.max_tokens, r.temperature), (Some(1000), Some(0.0)));
    assert_eq!(
        r.messages[0].content,
        system_prompt("target/prompts/system.md", "target/kb", 1)
    );

    assert_eq!(
        Value::Object(normalized(json!({})).unwrap()),
        json!({"prompt_path": "target/prompt.md", "skills_dir": "target/skills/",
               "max_files": 3, "max_feedback_chars": 4000, "max_context_chars": 24000,
               "max_tokens": 4096, "temperature": 0.7})
    );
    let paths = |c: Value| -> Vec<String> {
        normalized(c)
            .unwrap_err()
            .into_iter()
            .map(|v| format!("{}: {}", v.path, v.message))
            .collect()
    };
    assert_eq!(
        paths(json!({"prompt_path": "prompt.md", "skills_dir": "target/../x"})),
        vec![
            "prompt_path: must be a file path under target/, e.g. target/prompt.md",
            "skills_dir: must be a directory under target/, e.g. target/skills/",
        ]
    );
    assert_eq!(
        paths(json!({"prompt_path": "target/skills/p.md"})),
        vec!["prompt_path: must not be inside skills_dir"]
    );
    assert!(normalized(json!({"max_files": 0})).is_err());
    assert!(normalized(json!({"temperature": -0.1})).is_err());
    assert!(normalized(json!({"max_context_chars": 10})).is_err());
    assert!(normalized(json!({"extra": 1})).is_err());
}
