//! Scripts that misbehave end as the operator's error, with the script's path and the
//! line where it happened: syntax and runtime errors, endless loops, memory bombs,
//! endless recursion, and reaching for what no script is granted.

use evolve_operator_sdk::serde_json::json;
use evolve_operator_sdk::testing::{row, view};
use evolve_operator_sdk::types::ArchiveView;

const PATH: &str = "operators/select/policy.rhai";

fn archive() -> ArchiveView {
    view(vec![row("1", 1, Some(0.5), true)])
}

fn run_with(
    text: &str,
    params: evolve_operator_sdk::serde_json::Value,
) -> Result<Vec<String>, String> {
    let ctx = evolve_script::testing::context(PATH, text, params, 0);
    evolve_script::select(&ctx, &archive())
}

fn run(text: &str) -> Result<Vec<String>, String> {
    run_with(text, json!({}))
}

fn fails_at(text: &str, line: usize, what: &str) {
    let e = run(text).unwrap_err();
    let prefix = format!("script {PATH} line {line}: ");
    assert!(
        e.starts_with(&prefix) && e.contains(what),
        "expected line {line} and {what:?}, got {e:?}"
    );
}

#[test]
fn a_plain_script_selects() {
    let text = "fn select(ctx, archive) {\n  archive.rows.map(|r| r.generation_id)\n}\n";
    assert_eq!(run(text).unwrap(), vec!["1"]);
}

#[test]
fn syntax_errors_name_the_line() {
    fails_at(
        "fn select(ctx, archive) {\n  let x = ;\n}\n",
        2,
        "syntax error",
    );
    fails_at(
        "fn select(ctx, archive) {\n  let x = 1;\n  y\n}\n",
        3,
        "syntax error",
    );
}

#[test]
fn runtime_errors_name_the_line_where_they_happen() {
    let text = "fn pick(rows) {\n  let r = rows[7];\n  r.generation_id\n}\n\nfn select(ctx, archive) {\n  [pick(archive.rows)]\n}\n";
    fails_at(text, 2, "out of bounds");
    let text = "fn select(ctx, archive) {\n  let n = 1 / 0;\n}\n";
    fails_at(text, 2, "Division by zero");
    let text = "fn select(ctx, archive) {\n\n  throw `my own ${1 + 1}`;\n}\n";
    fails_at(text, 3, "my own 2");
}

#[test]
fn an_endless_loop_is_stopped_by_the_operation_limit() {
    fails_at(
        "fn select(ctx, archive) {\n  let n = 0;\n  loop {\n    n += 1;\n  }\n}\n",
        4,
        "operation limit exceeded: more than 1000000 operations",
    );
    let e = run_with("fn select(ctx, archive) {\n  while true {}\n}\n", json!({})).unwrap_err();
    assert!(e.contains("line 2"), "{e}");
    // Top-level code counts too.
    fails_at(
        "let n = 0;\nloop {\n  n += 1;\n}\nfn select(ctx, archive) { [] }\n",
        3,
        "operation limit exceeded",
    );
}

#[test]
fn configured_operation_limit_applies() {
    let ctx = {
        let schema = evolve_script::schema(&[]).build().unwrap();
        let text = "fn select(ctx, archive) {\n  let x = 0;\n  for i in 0..5000 { x += i; }\n  [`${x}`]\n}\n";
        let cfg = schema
            .normalize_value(&json!({"source": PATH, "max_operations": 1000}))
            .unwrap();
        let mut c = evolve_script::testing::context(PATH, text, json!({}), 0);
        c.config = cfg;
        c
    };
    let e = evolve_script::select(&ctx, &archive()).unwrap_err();
    assert!(e.contains("more than 1000 operations"), "{e}");
}

#[test]
fn memory_bombs_are_stopped_with_their_line() {
    // A doubling string hits the string limit.
    fails_at(
        "fn select(ctx, archive) {\n  let s = \"xxxxxxxx\";\n  loop {\n    s += s;\n  }\n}\n",
        4,
        "exceeds the script's data limits",
    );
    // An ever-growing array hits the array limit.
    fails_at(
        "fn select(ctx, archive) {\n  let a = [];\n  loop { a.push(1); }\n}\n",
        3,
        "exceeds the script's data limits",
    );
    // Strings inside an array count towards one value's limit.
    let text = "fn big() {\n  let s = \"1234567\";\n  while s.len() < 900000 { s += s; }\n  s\n}\nfn select(ctx, archive) {\n  let keep = [];\n  loop {\n    keep.push(big());\n  }\n}\n";
    fails_at(text, 9, "exceeds the script's data limits");
}

#[test]
fn memory_held_in_separate_variables_is_metered() {
    // Each string is under every per-value limit; together they pass 4 MiB.
    let mut text = String::from("fn select(ctx, archive) {\n");
    for i in 0..8 {
        text.push_str(&format!(
            "  let v{i} = \"1234567\";\n  while v{i}.len() < 900000 {{ v{i} += v{i}; }}\n"
        ));
    }
    text.push_str("  [\"1\"]\n}\n");
    let ok = run_with(&text, json!({}));
    assert_eq!(ok.unwrap(), vec!["1"]);
    let schema = evolve_script::schema(&[]).build().unwrap();
    let mut ctx = evolve_script::testing::context(PATH, &text, json!({}), 0);
    ctx.config = schema
        .normalize_value(&json!({"source": PATH, "max_memory_mib": 4}))
        .unwrap();
    let e = evolve_script::select(&ctx, &archive()).unwrap_err();
    assert!(
        e.contains("memory limit exceeded: the script holds more than 4 MiB"),
        "{e}"
    );
    assert!(e.starts_with(&format!("script {PATH} line ")), "{e}");
}

#[test]
fn endless_recursion_is_stopped() {
    fails_at(
        "fn f(n) {\n  f(n + 1)\n}\nfn select(ctx, archive) {\n  f(0)\n}\n",
        2,
        "call depth limit exceeded",
    );
}

#[test]
fn nothing_outside_the_inputs_is_reachable() {
    // No module loading (and so no file access through it), no eval, no clock, and the
    // grants of other stages are not registered for select.
    for (text, what) in [
        (
            "import \"/target/x\" as x;\nfn select(ctx, archive) { [] }\n",
            "syntax error",
        ),
        (
            "fn select(ctx, archive) {\n  eval(\"1\")\n}\n",
            "syntax error",
        ),
        (
            "fn select(ctx, archive) {\n  timestamp()\n}\n",
            "Function not found",
        ),
        (
            "fn select(ctx, archive) {\n  target_read(\"x\")\n}\n",
            "Function not found",
        ),
        (
            "fn select(ctx, archive) {\n  run_tasks([\"x\"], 1)\n}\n",
            "Function not found",
        ),
        (
            "fn select(ctx, archive) {\n  scratch_write(\"x\", \"y\")\n}\n",
            "Function not found",
        ),
    ] {
        let e = run(text).unwrap_err();
        assert!(e.contains(what), "{text}: {e}");
    }
}

#[test]
fn contract_problems_are_clear() {
    let e = run("fn choose(ctx, archive) { [] }\n").unwrap_err();
    assert_eq!(
        e,
        format!(
            "script {PATH}: defines no function `select(ctx, archive)`, which this stage calls"
        )
    );
    let e = run("fn select(ctx, archive) { [sqrt(-1.0)] }\n").unwrap_err();
    assert_eq!(
        e,
        format!("script {PATH}: select()'s result[0] is NaN, not a finite number")
    );
    let e = run("fn select(ctx, archive) { #{a: 1} }\n").unwrap_err();
    assert!(
        e.contains("select() returned an object map of the wrong shape; expected an array"),
        "{e}"
    );
    // `exit(value)` ends the script with that value as its result.
    assert_eq!(
        run("fn select(ctx, archive) { exit([\"1\"]); [] }\n").unwrap(),
        vec!["1"]
    );
}

#[test]
fn the_script_must_be_the_one_configured_and_intact() {
    let mut ctx =
        evolve_script::testing::context(PATH, "fn select(ctx, archive) { [] }", json!({}), 0);
    ctx.script.as_mut().unwrap().text.push(' ');
    let e = evolve_script::select(&ctx, &archive()).unwrap_err();
    assert!(e.contains("does not match its SHA-256"), "{e}");
    ctx.script = None;
    let e = evolve_script::select(&ctx, &archive()).unwrap_err();
    assert!(e.starts_with("no script was passed"), "{e}");
    let mut ctx =
        evolve_script::testing::context(PATH, "fn select(ctx, archive) { [] }", json!({}), 0);
    ctx.script.as_mut().unwrap().path = "operators/other.rhai".into();
    let e = evolve_script::select(&ctx, &archive()).unwrap_err();
    assert!(
        e.contains("config.source is operators/select/policy.rhai"),
        "{e}"
    );
}

#[test]
fn the_script_sees_its_context() {
    let text = "fn select(ctx, archive) {\n  [`${ctx.generation_id}/${ctx.config.k}/${ctx.script.path}/${ctx.script.sha256.len()}/${rng().below(1000)}`]\n}\n";
    let got = run_with(text, json!({"k": [1, 2]})).unwrap();
    let first = evolve_operator_sdk::Rng::new(0).below(1000).unwrap();
    assert_eq!(got, vec![format!("1/[1, 2]/{PATH}/64/{first}")]);
}
