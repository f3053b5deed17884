use super::*;

fn ctx(config: Value, generation: u32) -> Context {
    let schema = <RrsiScreen as Operator>::config().build().unwrap();
    let mut c = Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()));
    c.generation = generation;
    c
}

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let full = dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }
    dir
}

fn train() -> Vec<String> {
    vec!["predict-01".into(), "predict-05".into()]
}

fn paths(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("target/f{i}.txt")).collect()
}

#[test]
fn the_budget_anneals_with_the_generation() {
    // b_min 1, b_max 4, T 10: b_0 = 4, b_5 = 3 (2.5 → 3), b_10 = 1.
    let dir = tree(&[]);
    let config = json!({"b_min": 1, "b_max": 4, "horizon": 10});
    let check = |g: u32, n: usize| {
        screen_with(&ctx(config.clone(), g), &paths(n), dir.path(), train).unwrap()
    };
    assert!(check(0, 4).accept);
    assert!(check(5, 3).accept);
    let over = check(5, 4);
    assert!(!over.accept);
    assert_eq!(
        over.reason,
        "over the edit budget: 4 changed file(s) > b_t = 3 at generation 5 (b_min 1, b_max 4, horizon 10)"
    );
    assert!(!check(10, 2).accept);
    assert!(!check(40, 2).accept); // t is clamped to T
}

#[test]
fn a_degenerate_horizon_keeps_b_max() {
    let dir = tree(&[]);
    let config = json!({"b_min": 1, "b_max": 2, "horizon": 0});
    assert!(
        screen_with(&ctx(config.clone(), 50), &paths(2), dir.path(), train)
            .unwrap()
            .accept
    );
    assert!(
        !screen_with(&ctx(config, 50), &paths(3), dir.path(), train)
            .unwrap()
            .accept
    );
}

#[test]
fn leaked_answers_and_task_names_are_rejected_without_echoing_answers() {
    let dir = tree(&[
        ("target/params.json", "{\"slope\": 2,\n \"cheat\": 13}\n"),
        (
            "target/prompt.md",
            "If the task is predict-05, answer directly.\n",
        ),
    ]);
    let changed = vec![
        "target/params.json".to_string(),
        "target/prompt.md".to_string(),
    ];
    let v = screen_with(
        &ctx(json!({"protected": ["13"]}), 1),
        &changed,
        dir.path(),
        train,
    )
    .unwrap();
    assert!(!v.accept);
    assert_eq!(
        v.reason,
        "leaks 2 protected string occurrence(s): target/params.json line 2: protected[0]; \
         target/prompt.md line 1: train task name predict-05"
    );
    // Without the task-name check, and with 113 (not the token 13), it passes.
    let dir = tree(&[("target/params.json", "{\"slope\": 113}\n")]);
    let config = json!({"protected": ["13"], "protect_train_task_names": false});
    let v = screen_with(&ctx(config, 1), &changed[..1], dir.path(), || {
        panic!("not asked")
    })
    .unwrap();
    assert!(v.accept, "{}", v.reason);
    assert_eq!(
        v.reason,
        "within the edit budget (1 of b_t = 4 at generation 1); no protected string in 1 screened file(s) (1 protected)"
    );
}

#[test]
fn deleted_unreadable_and_ungranted_paths_are_skipped() {
    let dir = tree(&[("target/ok.txt", "fine\n"), ("recipe.yaml", "predict-01\n")]);
    #[cfg(unix)]
    std::os::unix::fs::symlink(
        dir.path().join("recipe.yaml"),
        dir.path().join("target/link"),
    )
    .unwrap();
    let changed: Vec<String> = [
        "target/ok.txt",
        "target/gone.txt",
        "recipe.yaml",
        "target/link",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let v = screen_with(&ctx(json!({}), 0), &changed, dir.path(), train).unwrap();
    assert!(v.accept, "{}", v.reason);
    assert!(v.reason.contains("in 1 screened file(s)"), "{}", v.reason);
}

#[test]
fn only_the_first_max_file_bytes_are_screened() {
    let dir = tree(&[("target/big.txt", "0123456789 predict-01\n")]);
    let changed = vec!["target/big.txt".to_string()];
    assert!(
        screen_with(
            &ctx(json!({"max_file_bytes": 10}), 0),
            &changed,
            dir.path(),
            train
        )
        .unwrap()
        .accept
    );
    assert!(
        !screen_with(&ctx(json!({}), 0), &changed, dir.path(), train)
            .unwrap()
            .accept
    );
}

#[test]
fn config_rejects_bad_bounds_and_blank_strings() {
    let schema = <RrsiScreen as Operator>::config().build().unwrap();
    let msgs = |raw: &str| -> Vec<String> {
        schema
            .normalize(raw)
            .unwrap_err()
            .iter()
            .map(|v| format!("{}: {}", v.path, v.message))
            .collect()
    };
    assert_eq!(msgs(r#"{"b_min": 0}"#), ["b_min: must be a number > 0"]);
    assert_eq!(
        msgs(r#"{"b_min": 5, "b_max": 2}"#),
        ["b_min: must be <= b_max (the bounds are inverted)"]
    );
    assert_eq!(msgs(r#"{"b_max": -1, "b_min": -2}"#).len(), 2);
    // Issue 31: non-integer bounds, and bounds too large to represent, are refused.
    assert_eq!(
        msgs(r#"{"b_min": 1.5}"#),
        ["b_min: must be an integer in 1..=2^53 (9007199254740992)"]
    );
    assert_eq!(
        msgs(r#"{"b_max": 1e20}"#),
        ["b_max: must be an integer in 1..=2^53 (9007199254740992)"]
    );
    assert!(schema.normalize(r#"{"b_min": 2, "b_max": 2.0}"#).is_ok());
    assert!(schema.normalize(r#"{"protected": [""]}"#).is_err());
    assert!(schema.normalize(r#"{"protected": ["  "]}"#).is_err());
    // A configuration that bypassed the schema is still refused at call time.
    let c = Context::for_test(json!({"protected": ["  "], "b_min": 1, "b_max": 2, "horizon": 3}));
    assert_eq!(
        screen_with(&c, &[], Path::new("/nonexistent"), train).unwrap_err(),
        "config.protected string 0 must be a string with a non-blank character"
    );
}
