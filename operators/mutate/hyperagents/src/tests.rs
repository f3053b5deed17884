use super::*;

fn normalized(config: Value) -> Result<Map<String, Value>, Vec<Violation>> {
    <HyperAgents as Operator>::config()
        .build()
        .unwrap()
        .normalize_value(&config)
}

fn ctx(config: Value) -> Context {
    let mut c = Context::for_test(Value::Object(normalized(config).unwrap()));
    c.generation_id = "4".into();
    c.generation = 4;
    c.parent = Some("1".into());
    c
}

fn surface(includes: &[&str]) -> Surface {
    Surface {
        includes: includes.iter().map(|s| s.to_string()).collect(),
        excludes: vec![],
    }
}

fn observation(includes: &[&str]) -> Observation {
    Observation {
        rollout: Some(Evidence {
            summary: r#"{"failed":[]}"#.into(),
            artifacts: vec![],
        }),
        analysis: None,
        feedback_dir: Some("/feedback".into()),
        archive: None,
        surface: surface(includes),
    }
}

/// A guest file system: target/ with params, operators/ with components (when asked).
fn root(operators: bool) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for dir in ["target", "scratch", "feedback"] {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    std::fs::write(d.path().join("target/params.json"), "{\"slope\": 1.0}\n").unwrap();
    std::fs::write(d.path().join("feedback/parent.json"), "{\"score\": 0.5}\n").unwrap();
    if operators {
        std::fs::create_dir_all(d.path().join("operators")).unwrap();
        std::fs::write(d.path().join("operators/mutate.wasm"), [0u8, 97, 115, 109]).unwrap();
        std::fs::write(d.path().join("operators/manifest.json"), "{}\n").unwrap();
    }
    d
}

fn answer(content: &str) -> Result<ChatResponse, ModelError> {
    Ok(ChatResponse {
        content: content.into(),
        input_tokens: 120,
        output_tokens: 40,
        usd: 0.002,
    })
}

const ANSWER: &str = "Raise the slope; record the lesson for later proposals.\n\
<<<<<<< SEARCH target/params.json\n{\"slope\": 1.0}\n=======\n{\"slope\": 2.0}\n>>>>>>> REPLACE\n\
<<<<<<< WRITE operators/policy.md\nPrefer parameter changes backed by failing tasks.\n>>>>>>> END\n\
<<<<<<< WRITE operators/mutate.wasm\nnot a component\n>>>>>>> END\n\
<<<<<<< WRITE operators/manifest.json\n{}\n>>>>>>> END\n";

#[test]
fn edits_target_and_operator_policy_and_refuses_components() {
    let d = root(true);
    let mut requests = Vec::new();
    let mut chat = |r: &ChatRequest| {
        requests.push(r.clone());
        answer(ANSWER)
    };
    let obs = observation(&["target/**", "operators/**"]);
    let p = hyperagents_with(&ctx(json!({})), &obs, d.path(), &mut chat).unwrap();
    assert_eq!(p.changed, vec!["target/params.json", "operators/policy.md"]);
    assert_eq!(
        p.notes,
        vec![
            "2 edit(s) applied, 2 refused, 0 format error(s); Raise the slope; record the lesson for later proposals.",
            "refused (write) operators/mutate.wasm: a WebAssembly component (.wasm) is binary and cannot be edited as text",
            "refused (write) operators/manifest.json: framework-owned (`operators/manifest.json`)",
            "change manifest: /scratch/changes.json",
        ]
    );
    assert_eq!(
        (p.usage.input_tokens, p.usage.output_tokens, p.usage.usd),
        (120, 40, 0.002)
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
        "{\"slope\": 2.0}\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("operators/policy.md")).unwrap(),
        "Prefer parameter changes backed by failing tasks.\n"
    );
    assert_eq!(
        std::fs::read(d.path().join("operators/mutate.wasm")).unwrap(),
        [0u8, 97, 115, 109]
    );

    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!((r.max_tokens, r.temperature), (Some(4096), Some(0.7)));
    assert_eq!(r.messages[0].content, system_prompt(true, 8, &[]));
    assert_eq!(
        r.messages[1].content,
        "# Generation 4 (parent 1)\n\nEditable roots: target/, operators/\n\n\
## Mutable surface\ninclude: target/**, operators/**\nexclude: (none)\n\n\
## Standing policy\noperators/policy.md does not exist yet.\n\n\
## Evidence\n### Rollout of the parent\n{\"failed\":[]}\n\n\
### The parent generation\n{\"score\": 0.5}\n\n\
## Files\n\
--- file: target/params.json (editable) ---\n{\"slope\": 1.0}\n--- end of target/params.json ---\n\
--- file: operators/manifest.json (read-only) ---\n{}\n--- end of operators/manifest.json ---\n\
--- file: operators/mutate.wasm (4 bytes, binary; not editable as text) ---\n\
\nMake one coherent change with edit blocks."
    );

    let manifest: Value = evolve_operator_sdk::serde_json::from_str(
        &std::fs::read_to_string(d.path().join("scratch/changes.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["roots"], json!(["target", "operators"]));
    assert_eq!(
        manifest["files"],
        json!(["target/params.json", "operators/policy.md"])
    );
    assert_eq!(manifest["blocks"].as_array().unwrap().len(), 4);
}

#[test]
fn the_standing_policy_leads_the_next_generations_prompt() {
    let d = root(true);
    std::fs::write(
        d.path().join("operators/policy.md"),
        "Change one parameter at a time.\n",
    )
    .unwrap();
    let mut seen = String::new();
    let mut chat = |r: &ChatRequest| {
        seen = r.messages[1].content.clone();
        answer("No change today.")
    };
    let obs = observation(&["target/**", "operators/**"]);
    let p = hyperagents_with(&ctx(json!({})), &obs, d.path(), &mut chat).unwrap();
    assert!(p.changed.is_empty());
    assert!(
        seen.contains(
            "## Standing policy (operators/policy.md, written by earlier generations)\n\
             Change one parameter at a time.\n\n## Evidence\n"
        ),
        "{seen}"
    );
}

#[test]
fn operators_are_editable_only_when_the_surface_and_the_grant_allow() {
    let s = |inc: &[&str]| surface(inc);
    let both = vec!["target".to_string(), "operators".to_string()];
    assert_eq!(
        editable_roots(&both, &s(&["target/**", "operators/**"]), true),
        (both.clone(), vec![])
    );
    assert_eq!(
        editable_roots(&both, &s(&["target/**"]), true),
        (
            vec!["target".to_string()],
            vec!["operators/ is not editable: the surface includes nothing under it".to_string()]
        )
    );
    assert_eq!(
        editable_roots(&both, &s(&["**"]), false),
        (
            vec!["target".to_string()],
            vec!["operators/ is not editable: /operators is not granted".to_string()]
        )
    );

    // Without operators, the prompt says nothing of them and operator edits are refused.
    let d = root(false);
    let mut sys = String::new();
    let mut chat = |r: &ChatRequest| {
        sys = r.messages[0].content.clone();
        answer(ANSWER)
    };
    let p = hyperagents_with(
        &ctx(json!({})),
        &observation(&["target/**"]),
        d.path(),
        &mut chat,
    )
    .unwrap();
    assert_eq!(sys, system_prompt(false, 8, &[]));
    assert!(!sys.contains("operators/"));
    assert_eq!(p.changed, vec!["target/params.json"]);
    assert_eq!(
        p.notes[..3],
        [
            "1 edit(s) applied, 3 refused, 0 format error(s); Raise the slope; record the lesson for later proposals.",
            "operators/ is not editable: the surface includes nothing under it",
            "refused (write) operators/policy.md: outside the editable roots (target/)",
        ]
    );

    // Only operators configured, but not available: nothing is editable.
    let err = hyperagents_with(
        &ctx(json!({"roots": ["operators"]})),
        &observation(&["target/**"]),
        d.path(),
        &mut |_| panic!("no call"),
    )
    .unwrap_err();
    assert_eq!(
        err,
        "no configured root is editable (operators/ is not editable: the surface includes nothing under it)"
    );
}

#[test]
fn max_files_caps_the_proposal() {
    let d = root(false);
    let many = "<<<<<<< WRITE target/a.txt\na\n>>>>>>> END\n<<<<<<< WRITE target/b.txt\nb\n>>>>>>> END\n<<<<<<< WRITE target/a.txt\naa\n>>>>>>> END\n";
    let p = hyperagents_with(
        &ctx(json!({"max_files": 1, "roots": ["target"]})),
        &observation(&["target/**"]),
        d.path(),
        &mut |_| answer(many),
    )
    .unwrap();
    assert_eq!(p.changed, vec!["target/a.txt"]);
    assert_eq!(
        p.notes[1],
        "refused (write) target/b.txt: this proposal already changes 1 files (max_files)"
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("target/a.txt")).unwrap(),
        "aa\n"
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
            ModelError::Refused("HTTP 401".into()),
            "model: the provider refused the request: HTTP 401",
        ),
        (
            ModelError::Failed("HTTP 503".into()),
            "model: the call failed: HTTP 503",
        ),
        (ModelError::Timeout, "model: the call timed out"),
        (
            ModelError::InvalidRequest("bad".into()),
            "model: invalid request: bad",
        ),
    ];
    for (e, want) in cases {
        let d = root(false);
        let err = hyperagents_with(
            &ctx(json!({})),
            &observation(&["target/**"]),
            d.path(),
            &mut |_| Err(e.clone()),
        )
        .unwrap_err();
        assert_eq!(err, want);
        assert!(!d.path().join("scratch/changes.json").exists());
    }
}

#[test]
fn format_errors_become_notes() {
    let d = root(false);
    let p = hyperagents_with(
        &ctx(json!({})),
        &observation(&["target/**"]),
        d.path(),
        &mut |_| answer("<<<<<<< WRITE target/x.txt\nunclosed\n"),
    )
    .unwrap();
    assert!(p.changed.is_empty());
    assert_eq!(
        p.notes,
        vec![
            "0 edit(s) applied, 0 refused, 1 format error(s)",
            "operators/ is not editable: the surface includes nothing under it",
            "format error: line 1: this block is never closed",
            "change manifest: /scratch/changes.json",
        ]
    );
}

#[test]
fn schema_defaults_and_violations() {
    assert_eq!(
        Value::Object(normalized(json!({})).unwrap()),
        json!({"roots": ["target", "operators"], "max_files": 8, "max_tokens": 4096,
               "temperature": 0.7, "context_chars": 24000, "evidence_chars": 8000})
    );
    let paths = |c: Value| -> Vec<String> {
        normalized(c)
            .unwrap_err()
            .into_iter()
            .map(|v| v.path)
            .collect()
    };
    assert_eq!(
        paths(json!({"roots": ["evaluator"], "max_files": 0, "temperature": -1})),
        vec!["max_files", "roots[0]", "temperature"]
    );
    assert_eq!(paths(json!({"roots": []})), vec!["roots"]);
}

#[test]
fn the_operator_scripts_and_their_loading_rules_are_in_the_system_prompt() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("operators")).unwrap();
    std::fs::write(
        d.path().join("operators/manifest.json"),
        json!({"schema": "evolve.components.v1", "components": {
            "gate": {"file": "operators/gate.wasm", "script": {"file": "operators/gate/policy.rhai"}},
            "select": {"file": "operators/select.wasm", "script": {"file": "operators/select/policy.rhai"}},
            "mutate": {"file": "operators/mutate.wasm"},
        }})
        .to_string(),
    )
    .unwrap();
    let scripts = operator_scripts(d.path());
    assert_eq!(
        scripts,
        vec![
            (
                "select".to_string(),
                "operators/select/policy.rhai".to_string()
            ),
            ("gate".to_string(), "operators/gate/policy.rhai".to_string()),
        ]
    );
    let sys = system_prompt(true, 8, &scripts);
    assert!(sys.contains("- select: operators/select/policy.rhai, `fn select(ctx, archive) -> [generation ids]`; loaded from the champion's commit"), "{sys}");
    assert!(
        sys.contains("- gate: operators/gate/policy.rhai, `fn decide(ctx, child, parent)"),
        "{sys}"
    );
    assert!(
        sys.contains("loaded from the committed child: decides this generation too"),
        "{sys}"
    );
    let sys = system_prompt(
        true,
        8,
        &[(
            "rollout".to_string(),
            "operators/rollout/r.rhai".to_string(),
        )],
    );
    assert!(
        sys.contains("- rollout: operators/rollout/r.rhai, `fn rollout(ctx, parent) -> #{summary: #{…}, artifacts}`; loaded from the parent fork: gathers evidence in generations that descend from this edit."),
        "{sys}"
    );
    // Without operators/ editable there is nothing about scripts.
    assert!(!system_prompt(false, 8, &scripts).contains("Rhai"));
    assert!(operator_scripts(&d.path().join("missing")).is_empty());
}
