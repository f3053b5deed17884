//! Script operators end to end (docs/scripts.md), with the real binary, the real script
//! components and the local engine: a mutate that rewrites the select script changes how
//! the next generation selects, and the archive records the script digest of every call;
//! each stage's script is loaded from the stage's checkout (the loading rules); and a
//! hostile script can neither reach what its stage is not granted nor run away.

use crate::chat;
use crate::ws;
use serde_json::{Value, json};
use ws::{Exp, Spec};

fn sha256(text: &str) -> String {
    evolve_archive::sha256_hex(text.as_bytes())
}

fn events_of<'a>(events: &'a [Value], kind: &str, genid: Option<&str>) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind && genid.is_none_or(|g| e["genid"] == g))
        .collect()
}

fn script_binding(source: &str, builtin: Option<&str>) -> Value {
    match builtin {
        Some(b) => json!({"source": source, "builtin": b}),
        None => json!({"source": source}),
    }
}

/// The experiment's recipe with select bound to `config` as a script operator.
fn select_script(e: &Exp, config: &Value) {
    let path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&path).unwrap();
    let recipe = recipe.replace(
        "select: {operator: greedy}",
        &format!("select: {{operator: script, config: {config}}}"),
    );
    std::fs::write(path, recipe).unwrap();
}

/// The experiment's recipe with `stage` bound to the script operator `config` (the
/// stage's line replaced, or added for an optional stage).
fn bind_script(e: &Exp, stage: &str, config: &Value) {
    let path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&path).unwrap();
    let line = format!("  {stage}: {{operator: script, timeout_s: 60, config: {config}}}");
    let prefix = format!("  {stage}:");
    let mut lines: Vec<String> = recipe.lines().map(str::to_string).collect();
    match lines.iter().position(|l| l.starts_with(&prefix)) {
        Some(i) => lines[i] = line,
        None => {
            let end = lines
                .iter()
                .position(|l| l.starts_with("evaluator:"))
                .unwrap();
            lines.insert(end, line);
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// A script the test supplies next to the recipe (installed by `evolve init`).
fn supply(e: &Exp, source: &str, text: &str) {
    let p = e.root().join(source);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn result_json(e: &Exp, genid: &str, stage: &str) -> Value {
    let p = e.ws.join(format!("runs/gen-{genid}/{stage}/result.json"));
    serde_json::from_str(
        &std::fs::read_to_string(&p).unwrap_or_else(|err| panic!("{}: {err}", p.display())),
    )
    .unwrap()
}

/// A select policy no shipped script has: every eligible generation, oldest first.
/// The oldest eligible generation: one id for the one child (the contract allows one id
/// for all children or one per child, no more).
const OLDEST_ELIGIBLE: &str = "// The oldest eligible generation.\n\
fn select(ctx, archive) {\n\
    let ids = archive.rows.filter(|r| r.eligible).map(|r| r.generation_id);\n\
    [ids[0]]\n\
}\n";

#[test]
fn a_mutated_select_script_steers_the_next_generation_and_is_archived() {
    let e = Exp::new(&Spec {
        generations: 2,
        mutate: json!({"action": "operators", "path": "select/policy.rhai", "content": OLDEST_ELIGIBLE}),
        surface: vec!["target/value.txt".into(), "operators/**".into()],
        ..Spec::default()
    });
    select_script(
        &e,
        &script_binding("operators/select/policy.rhai", Some("score_child_prop")),
    );
    e.init();
    let builtin = evolve::scripts::builtin("select", "score_child_prop").unwrap();
    assert_eq!(e.gen0_file("operators/select/policy.rhai"), builtin);
    let manifest: Value = serde_json::from_str(&e.gen0_file("operators/manifest.json")).unwrap();
    assert_eq!(
        manifest["components"]["select"]["script"],
        json!({"file": "operators/select/policy.rhai", "sha256": sha256(builtin), "source": "builtin:select/score_child_prop"})
    );
    e.run_ok(&["run", "ws", "--quiet"]);

    let events = e.events();
    let selects = events_of(&events, "select", None);
    assert_eq!(selects.len(), 2, "{selects:#?}");
    // Generation 1 selected with the shipped policy, from gen/0: one parent.
    assert_eq!(selects[0]["body"]["parents"], json!(["0"]));
    assert_eq!(
        selects[0]["body"]["operator"]["script_path"],
        "operators/select/policy.rhai"
    );
    assert_eq!(
        selects[0]["body"]["operator"]["script_sha256"],
        sha256(builtin)
    );
    // Gen 1 beat gen 0, so generation 2 selected from the champion gen/1, whose select
    // script is mutate's: the oldest eligible generation.
    assert_eq!(selects[1]["body"]["operator_from"], "gen/1");
    assert_eq!(selects[1]["body"]["parents"], json!(["0"]));
    assert_eq!(
        selects[1]["body"]["operator"]["script_sha256"],
        sha256(OLDEST_ELIGIBLE)
    );
    assert_eq!(
        selects[0]["body"]["operator"]["component_sha256"],
        selects[1]["body"]["operator"]["component_sha256"],
        "the component is the same; only the script changed"
    );
    // The generation event archives the identity of every call it made.
    let generation = events_of(&events, "generation", Some("1"));
    let ops = &generation[0]["body"]["operators"];
    for stage in ["rollout", "mutate"] {
        assert_eq!(
            ops[stage]["component_sha256"].as_str().map(str::len),
            Some(64),
            "{ops}"
        );
        assert!(ops[stage].get("script_sha256").is_none(), "{ops}");
    }
    assert_eq!(
        result_json(&e, "2", "select")["script_sha256"],
        sha256(OLDEST_ELIGIBLE)
    );
    e.run_ok(&["verify", "ws"]);
}

/// An experiment whose mutate writes `text` to `operators/<path>` (and climbs).
fn self_editing(path: &str, text: &str, extra: &str, gate: (&str, Value)) -> Exp {
    Exp::new(&Spec {
        generations: 1,
        mutate: json!({"action": "operators", "path": path, "content": text}),
        surface: vec!["target/value.txt".into(), "operators/**".into()],
        extra_operators: extra.into(),
        gate: (gate.0.into(), gate.1),
        ..Spec::default()
    })
}

const ACCEPT: &str =
    "fn validate(ctx, changed, rollout) {\n  #{accept: true, reason: \"as shipped\"}\n}\n";
const EDITED_VALIDATE: &str = "fn validate(ctx, changed, rollout) {\n  #{accept: true, reason: `edited validate saw ${changed}`}\n}\n";
const NOVEL: &str = "fn assess(ctx, diff) {\n  #{novelty: 1.0, accept: true}\n}\n";
const EDITED_NOVELTY: &str = "fn assess(ctx, diff) {\n  #{novelty: 0.125, accept: false}\n}\n";

#[test]
fn validate_and_novelty_scripts_edited_by_mutate_judge_the_same_generation() {
    let extra = format!(
        "  validate: {{operator: script, config: {}}}\n  novelty: {{operator: script, config: {}}}\n",
        script_binding("operators/validate/check.rhai", None),
        script_binding("operators/novelty/check.rhai", None),
    );
    let e = self_editing(
        "novelty/check.rhai",
        EDITED_NOVELTY,
        &extra,
        ("hillclimb", json!({"strict": true})),
    );
    supply(&e, "operators/validate/check.rhai", ACCEPT);
    supply(&e, "operators/novelty/check.rhai", NOVEL);
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let events = e.events();
    let status = events_of(&events, "status", Some("1"));
    assert_eq!(status.len(), 1, "{events:#?}");
    let body = &status[0]["body"];
    assert_eq!(body["status"], "rejected_duplicate", "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .starts_with("novelty 0.125"),
        "{body}"
    );
    assert_eq!(
        body["operators"]["novelty"]["script_sha256"],
        sha256(EDITED_NOVELTY),
        "{body}"
    );
    assert_eq!(
        body["operators"]["validate"]["script_sha256"],
        sha256(ACCEPT),
        "{body}"
    );

    // The same with validate: its edit is what validates the very child that made it.
    let extra = format!(
        "  validate: {{operator: script, config: {}}}\n",
        script_binding("operators/validate/check.rhai", None)
    );
    let e = self_editing(
        "validate/check.rhai",
        EDITED_VALIDATE,
        &extra,
        ("hillclimb", json!({"strict": true})),
    );
    supply(&e, "operators/validate/check.rhai", ACCEPT);
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let validate = result_json(&e, "1", "validate");
    assert_eq!(validate["script_sha256"], sha256(EDITED_VALIDATE));
    let reason = validate["ok"]["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("edited validate saw ["), "{validate}");
    assert!(
        reason.contains("\"operators/validate/check.rhai\"")
            && reason.contains("\"target/value.txt\""),
        "{reason}"
    );
    let events = e.events();
    let generation = events_of(&events, "generation", Some("1"));
    assert_eq!(
        generation[0]["body"]["operators"]["validate"]["script_sha256"],
        sha256(EDITED_VALIDATE)
    );
}

#[test]
fn a_script_edit_that_cannot_run_is_an_invalid_proposal_never_committed() {
    // Before the guardrail the child was committed and evaluated, and only its own gate
    // failed; a select script broken the same way would have failed every generation
    // after the child was kept.
    for (text, problem) in [
        (
            "fn decide(ctx, child, parent) {\n  #{verdict: \"keep\"\n",
            "syntax error",
        ),
        (
            "fn judge(ctx, child, parent) { 1 }\n",
            "defines no function",
        ),
    ] {
        let e = self_editing(
            "gate/policy.rhai",
            text,
            "",
            (
                "script",
                script_binding("operators/gate/policy.rhai", Some("hillclimb")),
            ),
        );
        e.init();
        e.run_ok(&["run", "ws", "--quiet"]);
        let events = e.events();
        let status = events_of(&events, "status", Some("1"));
        assert_eq!(status.len(), 1, "{events:#?}");
        let body = &status[0]["body"];
        assert_eq!(body["status"], "invalid_proposal", "{body}");
        assert_eq!(body["failure_stage"], "surface", "{body}");
        let reason = body["reason"].as_str().unwrap();
        assert!(
            reason.contains("operators/gate/policy.rhai (the gate stage's script) cannot run: ")
                && reason.contains(problem),
            "{reason}"
        );
        for kind in ["generation", "evaluation", "gate"] {
            assert!(
                events_of(&events, kind, Some("1")).is_empty(),
                "{kind}: {events:#?}"
            );
        }
        e.run_ok(&["verify", "ws"]);
    }
}

const EDITED_GATE: &str = "fn decide(ctx, child, parent) {\n  #{verdict: \"discard\", reason: `edited gate: ${fmt(child.score)}`}\n}\n";
const EDITED_RECORD: &str = "fn annotate(ctx, child) {\n  #{note: \"edited record\"}\n}\n";

#[test]
fn gate_and_record_scripts_load_from_the_committed_child() {
    let e = self_editing(
        "gate/policy.rhai",
        EDITED_GATE,
        "",
        (
            "script",
            script_binding("operators/gate/policy.rhai", Some("hillclimb")),
        ),
    );
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let events = e.events();
    let gate = events_of(&events, "gate", Some("1"));
    assert_eq!(gate[0]["body"]["verdict"], "discard", "{gate:#?}");
    assert_eq!(gate[0]["body"]["reason"], "edited gate: 0.2");
    assert_eq!(
        gate[0]["body"]["operator"]["script_sha256"],
        sha256(EDITED_GATE)
    );
    // gen/0's own gate (the genesis baseline is the host's) is still the shipped script.
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    let shipped = store
        .read_blob(gen0, "operators/gate/policy.rhai", 1 << 20)
        .unwrap()
        .unwrap();
    assert_eq!(
        shipped,
        evolve::scripts::builtin("gate", "hillclimb")
            .unwrap()
            .as_bytes()
    );

    let e = self_editing(
        "record/notes.rhai",
        EDITED_RECORD,
        "",
        ("hillclimb", json!({"strict": true})),
    );
    let recipe = std::fs::read_to_string(e.root().join("recipe.yaml"))
        .unwrap()
        .replace(
            "record: {operator: notes}",
            &format!(
                "record: {{operator: script, config: {}}}",
                script_binding("operators/record/notes.rhai", Some("notes"))
            ),
        );
    std::fs::write(e.root().join("recipe.yaml"), recipe).unwrap();
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let events = e.events();
    let record = events_of(&events, "record", Some("1"));
    assert_eq!(
        record[0]["body"]["annotations"]["note"], "edited record",
        "{record:#?}"
    );
    assert_eq!(
        result_json(&e, "1", "record")["script_sha256"],
        sha256(EDITED_RECORD)
    );
}

const ROLLOUT_V1: &str = "fn rollout(ctx, parent) {\n  let version = 1;\n  #{summary: #{version: version, parent: parent.generation_id}}\n}\n";
const ANALYZE_V1: &str = "fn analyze(ctx, rollout) {\n  let version = 1;\n  let r = model_chat(`rollout v${rollout.summary.version}`);\n  #{summary: #{version: version, said: r.content, bundle: feedback_exists(\"rollout.json\")}}\n}\n";
/// Climbs, and bumps the version line of the rollout, analyze and mutate scripts
/// (itself included) in the child it makes.
const MUTATE_V1: &str = "fn mutate(ctx, obs) {\n  let version = 1;\n  for path in [\"rollout/r.rhai\", \"analyze/a.rhai\", \"mutate/m.rhai\"] {\n    let text = operators_read(path);\n    text.replace(`let version = ${version};`, `let version = ${version + 1};`);\n    operators_write(path, text);\n  }\n  target_write(\"value.txt\", fmt(to_float(ctx.generation + 1) / 10.0) + \"\\n\");\n  #{notes: `mutate v${version} saw rollout v${obs.rollout.summary.version}, analysis v${obs.analysis.summary.version}: ${obs.analysis.summary.said}`}\n}\n";

fn bumped(text: &str) -> String {
    text.replace("let version = 1;", "let version = 2;")
}

#[test]
fn rollout_analyze_and_mutate_scripts_edited_by_mutate_are_used_by_its_descendants() {
    let (url, calls) = chat::chat_server("model says hi");
    let e = Exp::new(&Spec {
        generations: 2,
        surface: vec!["target/value.txt".into(), "operators/**".into()],
        budget_usd: 1.0,
        model: Some(chat::model_block(&url)),
        ..Spec::default()
    });
    for (stage, source, text) in [
        ("rollout", "operators/rollout/r.rhai", ROLLOUT_V1),
        ("analyze", "operators/analyze/a.rhai", ANALYZE_V1),
        ("mutate", "operators/mutate/m.rhai", MUTATE_V1),
    ] {
        bind_script(&e, stage, &script_binding(source, None));
        supply(&e, source, text);
    }
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);

    // Generation 1 (parent gen/0) ran the scripts gen/0 holds, although its own mutate
    // rewrote all three (itself included) in the child it made.
    for (stage, text) in [
        ("rollout", ROLLOUT_V1),
        ("analyze", ANALYZE_V1),
        ("mutate", MUTATE_V1),
    ] {
        assert_eq!(
            result_json(&e, "1", stage)["script_sha256"],
            sha256(text),
            "gen 1 {stage}"
        );
    }
    let mutate1 = result_json(&e, "1", "mutate");
    assert_eq!(
        mutate1["ok"]["notes"],
        json!(["mutate v1 saw rollout v1, analysis v1: model says hi"]),
        "{mutate1}"
    );
    assert_eq!(
        mutate1["ok"]["changed"],
        json!([
            "operators/rollout/r.rhai",
            "operators/analyze/a.rhai",
            "operators/mutate/m.rhai",
            "target/value.txt"
        ])
    );
    // The host metered the analyze script's model call.
    assert_eq!(
        result_json(&e, "1", "analyze")["ok"]["summary"],
        json!({"version": 1, "said": "model says hi", "bundle": true}),
        "the analyze script reads its /feedback bundle"
    );
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    let gen1 = store.tag_target("gen/1").unwrap().unwrap();
    for (path, text) in [
        ("operators/rollout/r.rhai", ROLLOUT_V1),
        ("operators/mutate/m.rhai", MUTATE_V1),
    ] {
        let committed = store.read_blob(gen1, path, 1 << 20).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(committed).unwrap(),
            bumped(text),
            "{path}"
        );
    }

    // Generation 2 descends from gen/1 (it climbed, so greedy picked it) and loads all
    // three from that parent: the edited versions.
    let events = e.events();
    let selects = events_of(&events, "select", None);
    assert_eq!(selects[1]["body"]["parents"], json!(["1"]), "{selects:#?}");
    for (stage, text) in [
        ("rollout", ROLLOUT_V1),
        ("analyze", ANALYZE_V1),
        ("mutate", MUTATE_V1),
    ] {
        assert_eq!(
            result_json(&e, "2", stage)["script_sha256"],
            sha256(&bumped(text)),
            "gen 2 {stage}"
        );
    }
    assert_eq!(
        result_json(&e, "2", "rollout")["ok"]["summary"],
        json!({"version": 2, "parent": "1"})
    );
    assert_eq!(
        result_json(&e, "2", "mutate")["ok"]["notes"],
        json!(["mutate v2 saw rollout v2, analysis v2: model says hi"])
    );
    let generation = events_of(&events, "generation", Some("2"));
    assert_eq!(
        generation[0]["body"]["operators"]["mutate"]["script_sha256"],
        sha256(&bumped(MUTATE_V1))
    );
    // One model call per analyze: mutate's script made none.
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    e.run_ok(&["verify", "ws"]);
}

/// The names of the gate and sealed tasks of a workspace.
fn private_tasks(e: &Exp) -> Vec<String> {
    let set: Value = serde_json::from_str(&e.gen0_file("evaluator/task-set.json")).unwrap();
    let mut names = Vec::new();
    for split in ["gate", "sealed"] {
        for n in set["split"][split].as_array().unwrap_or(&vec![]) {
            names.push(n.as_str().unwrap().to_string());
        }
    }
    assert!(!names.is_empty(), "{set}");
    names
}

/// Dumps everything it is given into its reason: the inputs are all a script learns.
const DUMP_GATE: &str = "fn decide(ctx, child, parent, archive, diff) {\n  #{verdict: \"keep\", reason: to_json([ctx, child, parent, archive, diff])}\n}\n";
const PRYING_VALIDATE: &str = "fn validate(ctx, changed, rollout) {\n  let seen = target_list(\"\");\n  target_read(\"../evaluator/task-set.json\")\n}\n";

/// What a mutate script (the widest grants of any stage) tries, through every function
/// it has, to reach the archive or the evaluator.
const PRYING_CALLS: [&str; 15] = [
    r#"target_read("../.evolve/archive.jsonl")"#,
    r#"target_read("/.evolve/archive.jsonl")"#,
    r#"target_read(".evolve/archive.jsonl")"#,
    r#"target_list("..")"#,
    r#"target_exists("../.evolve/archive.jsonl")"#,
    r#"target_write("../.evolve/archive.jsonl", "forged")"#,
    r#"target_remove("../.evolve/archive.jsonl")"#,
    r#"operators_read("../.evolve/archive.jsonl")"#,
    r#"operators_list("../.evolve")"#,
    r#"operators_write("../.evolve/archive.jsonl", "forged")"#,
    r#"operators_read("../evaluator/task-set.json")"#,
    r#"feedback_read("../.evolve/archive.jsonl")"#,
    r#"feedback_list("..")"#,
    r#"scratch_write("../../../.evolve/archive.jsonl", "forged")"#,
    r#"read_file(".evolve/archive.jsonl")"#,
];

/// A mutate script that makes each of [`PRYING_CALLS`] and notes what it got (`GOT …`)
/// or why it was refused, then climbs.
fn prying_mutate() -> String {
    let mut s = String::from("fn mutate(ctx, obs) {\n  let got = [];\n");
    for call in PRYING_CALLS {
        s.push_str(&format!(
            "  try {{ got.push(`GOT ${{to_json({call})}}`); }} catch (e) {{ got.push(`refused: ${{e}}`); }}\n"
        ));
    }
    s.push_str("  target_write(\"value.txt\", \"0.2\\n\");\n  #{notes: got}\n}\n");
    s
}

#[test]
fn hostile_scripts_cannot_reach_the_evaluator_or_learn_a_private_task_name() {
    let extra = format!(
        "  validate: {{operator: script, config: {}}}\n",
        script_binding("operators/validate/pry.rhai", None)
    );
    let e = self_editing(
        "unused.txt",
        "x",
        &extra,
        ("hillclimb", json!({"strict": true})),
    );
    supply(&e, "operators/validate/pry.rhai", PRYING_VALIDATE);
    bind_script(
        &e,
        "mutate",
        &script_binding("operators/mutate/pry.rhai", None),
    );
    supply(&e, "operators/mutate/pry.rhai", &prying_mutate());
    e.init();
    let archive_before = std::fs::read_to_string(e.ws.join(".evolve/archive.jsonl")).unwrap();
    e.run_ok(&["run", "ws", "--quiet"]);
    // Mutate's every reach for the archive was refused, and the archive is intact.
    let mutate = result_json(&e, "1", "mutate");
    let notes: Vec<&str> = mutate["ok"]["notes"]
        .as_array()
        .unwrap_or_else(|| panic!("{mutate}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(notes.len(), PRYING_CALLS.len(), "{notes:#?}");
    for note in &notes {
        assert!(note.starts_with("refused: "), "{notes:#?}");
    }
    for (i, what) in [
        (
            0,
            "target_read: \"../.evolve/archive.jsonl\" must be a relative path of plain segments",
        ),
        (
            1,
            "target_read: \"/.evolve/archive.jsonl\" must be a relative path",
        ),
        (2, "target_read: .evolve/archive.jsonl: "),
        (3, "target_list: \"..\" must be a relative path"),
        (
            5,
            "target_write: \"../.evolve/archive.jsonl\" must be a relative path",
        ),
        (
            9,
            "operators_write: \"../.evolve/archive.jsonl\" must be a relative path",
        ),
        (
            13,
            "scratch_write: \"../../../.evolve/archive.jsonl\" must be a relative path",
        ),
        (14, "Function not found: read_file"),
    ] {
        assert!(notes[i].contains(what), "{i}: {}", notes[i]);
    }
    let archive_after = std::fs::read_to_string(e.ws.join(".evolve/archive.jsonl")).unwrap();
    assert!(archive_after.starts_with(&archive_before));
    assert!(!archive_after.contains("forged"));
    let events = e.events();
    let status = events_of(&events, "status", Some("1"));
    let reason = status[0]["body"]["reason"].as_str().unwrap();
    assert_eq!(status[0]["body"]["status"], "operator_failed");
    assert!(
        reason.contains("script operators/validate/pry.rhai line 3: target_read: \"../evaluator/task-set.json\" must be a relative path"),
        "{reason}"
    );

    // A gate script that dumps all it is given never sees a gate or sealed task name.
    let e = self_editing(
        "unused.txt",
        "x",
        "",
        ("script", script_binding("operators/gate/dump.rhai", None)),
    );
    supply(&e, "operators/gate/dump.rhai", DUMP_GATE);
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let raw = std::fs::read_to_string(e.ws.join("runs/gen-1/gate/result.json")).unwrap();
    assert!(
        raw.contains("private-"),
        "the dump holds the opaque keys: {raw}"
    );
    for name in private_tasks(&e) {
        assert!(!raw.contains(&name), "{name} reached the script: {raw}");
    }
}

#[test]
fn runaway_scripts_end_as_typed_failures_with_their_line() {
    let looping = "fn decide(ctx, child, parent) {\n  let n = 0;\n  loop {\n    n += 1;\n  }\n}\n";
    let e = self_editing(
        "unused.txt",
        "x",
        "",
        ("script", script_binding("operators/gate/loop.rhai", None)),
    );
    supply(&e, "operators/gate/loop.rhai", looping);
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let events = e.events();
    let status = events_of(&events, "status", Some("1"));
    let body = &status.last().unwrap()["body"];
    assert_eq!(body["status"], "operator_failed", "{body}");
    assert_eq!(body["failure_stage"], "gate", "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(
        reason.contains("script operators/gate/loop.rhai line 4: operation limit exceeded"),
        "{reason}"
    );

    let bomb =
        "fn annotate(ctx, child) {\n  let s = \"xxxxxxxx\";\n  loop {\n    s += s;\n  }\n}\n";
    let e = self_editing(
        "unused.txt",
        "x",
        "",
        ("hillclimb", json!({"strict": true})),
    );
    supply(&e, "operators/record/bomb.rhai", bomb);
    let recipe = std::fs::read_to_string(e.root().join("recipe.yaml"))
        .unwrap()
        .replace(
            "record: {operator: notes}",
            &format!(
                "record: {{operator: script, config: {}}}",
                script_binding("operators/record/bomb.rhai", None)
            ),
        );
    std::fs::write(e.root().join("recipe.yaml"), recipe).unwrap();
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let events = e.events();
    let record = events_of(&events, "record", Some("1"));
    let error = record[0]["body"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("script operators/record/bomb.rhai line 4: Length of string exceeds the script's data limits"), "{error}");
}

#[test]
fn the_hyperagents_recipe_installs_its_operator_scripts() {
    let tmp = tempfile::tempdir().unwrap();
    let recipe =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../recipes/hyperagents.yaml");
    crate::cmd::evolve(["init", "ws", "--recipe", recipe.to_str().unwrap()])
        .keys(tmp.path().join("keys"))
        .cwd(tmp.path())
        .ok();
    // The scripts are part of gen/0's commit, so mutate can evolve them like any file.
    let store = evolve_snapshot::Store::open(&tmp.path().join("ws")).unwrap();
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    let read = |path: &str| {
        String::from_utf8(store.read_blob(gen0, path, 1 << 20).unwrap().unwrap()).unwrap()
    };
    let manifest: Value = serde_json::from_str(&read("operators/manifest.json")).unwrap();
    for (stage, path, builtin) in [
        ("select", "operators/select/policy.rhai", "score_child_prop"),
        ("gate", "operators/gate/policy.rhai", "parent_eligible"),
        ("record", "operators/record/notes.rhai", "notes"),
    ] {
        let text = evolve::scripts::builtin(stage, builtin).unwrap();
        assert_eq!(read(path), text, "{stage}");
        assert_eq!(manifest["components"][stage]["operator"], "script");
        assert_eq!(
            manifest["components"][stage]["script"]["sha256"],
            sha256(text)
        );
    }
}

#[test]
fn a_script_binding_without_its_script_is_an_init_error() {
    let e = Exp::new(&Spec::default());
    select_script(&e, &script_binding("operators/select/mine.rhai", None));
    let out = e
        .evolve(&["init", "ws", "--recipe", "recipe.yaml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = ws::text(&out);
    assert!(
        said.contains("operators.select.config.source: cannot read"),
        "{said}"
    );
    assert!(said.contains("operators/select/mine.rhai"), "{said}");
}

#[test]
fn recipe_check_reports_a_missing_or_broken_script_with_its_stage_and_path() {
    let e = Exp::new(&Spec::default());
    select_script(
        &e,
        &script_binding("operators/select/policy.rhai", Some("score_child_prop")),
    );
    bind_script(
        &e,
        "rollout",
        &script_binding("operators/rollout/missing.rhai", None),
    );
    bind_script(
        &e,
        "analyze",
        &script_binding("operators/analyze/bad.rhai", None),
    );
    bind_script(
        &e,
        "mutate",
        &script_binding("operators/mutate/typo.rhai", None),
    );
    // Compiles and defines its function, but throws on any input: not the recipe's
    // problem.
    bind_script(
        &e,
        "reflect",
        &script_binding("operators/reflect/throws.rhai", None),
    );
    supply(
        &e,
        "operators/analyze/bad.rhai",
        "fn analyze(ctx, rollout) {\n  let x = ;\n}\n",
    );
    supply(
        &e,
        "operators/mutate/typo.rhai",
        "fn mutat(ctx, observation) {\n  #{}\n}\n",
    );
    supply(
        &e,
        "operators/reflect/throws.rhai",
        "fn reflect(ctx, archive, playbook) {\n  throw \"only at run time\";\n}\n",
    );
    let out = e
        .evolve(&["recipe", "check", "recipe.yaml", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", ws::text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let found: Vec<(String, String)> = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["path"].as_str().unwrap().to_string(),
                v["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(found[0].0, "operators.analyze.config.source");
    assert!(
        found[0]
            .1
            .starts_with("script operators/analyze/bad.rhai line 2: syntax error: "),
        "{found:#?}"
    );
    assert_eq!(found[1].0, "operators.mutate.config.source");
    assert_eq!(
        found[1].1,
        "script operators/mutate/typo.rhai: defines no function `mutate(ctx, observation)`, which this stage calls"
    );
    assert_eq!(found[2].0, "operators.rollout.config.source");
    assert!(
        found[2].1.starts_with("cannot read ")
            && found[2].1.contains("operators/rollout/missing.rhai")
            && found[2]
                .1
                .contains("the rollout script must be at config.source next to the recipe"),
        "{found:#?}"
    );

    // Fixed, the recipe checks clean.
    supply(
        &e,
        "operators/rollout/missing.rhai",
        "fn rollout(ctx, parent) {\n  #{summary: #{}}\n}\n",
    );
    supply(
        &e,
        "operators/analyze/bad.rhai",
        "fn analyze(ctx, rollout) {\n  rollout\n}\n",
    );
    supply(
        &e,
        "operators/mutate/typo.rhai",
        "fn mutate(ctx, observation) {\n  #{}\n}\n",
    );
    e.run_ok(&["recipe", "check", "recipe.yaml"]);
}

#[test]
fn operator_run_reads_the_script_its_config_names() {
    let e = Exp::new(&Spec::default());
    let out = e
        .evolve(&["operator", "run", "rollout/script"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", ws::text(&out));
    let said = ws::text(&out);
    assert!(
        said.contains("rollout/script runs the Rhai script its configuration names")
            && said.contains(r#"--config '{"source": "operators/rollout/my.rhai"}'"#),
        "{said}"
    );

    let config = r#"{"source": "operators/rollout/r.rhai", "params": {"k": 3}}"#;
    let out = e
        .evolve(&["operator", "run", "rollout/script", "--config", config])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", ws::text(&out));
    let said = ws::text(&out);
    assert!(
        said.contains(
            "cannot read the script config.source names: cannot read ./operators/rollout/r.rhai"
        ) && said.contains("relative to the current directory"),
        "{said}"
    );

    supply(
        &e,
        "operators/rollout/r.rhai",
        "fn rollout(ctx, parent) {\n  #{summary: #{k: ctx.config.k, parent: parent.generation_id, tasks: train_tasks()}}\n}\n",
    );
    let out = e
        .evolve(&[
            "operator",
            "run",
            "rollout/script",
            "--config",
            config,
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", ws::text(&out));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        result["result"]["summary"],
        json!({"k": 3, "parent": "1", "tasks": []}),
        "{result}"
    );
}

/// Reflect's script: one lesson per generation naming the archive's best score so far,
/// and a credit to the previous lesson when there is one.
const LESSONS: &str = "\
fn reflect(ctx, archive, playbook) {\n\
  let best = ();\n\
  for row in archive.rows {\n\
    if row.score != () && (best == () || row.score > best) { best = row.score; }\n\
  }\n\
  let ops = [#{op: \"add\", id: `lesson-${ctx.generation_id}`, text: `best so far ${best}`, data: #{seen: playbook.len()}}];\n\
  if playbook.len() > 0 {\n\
    ops.push(#{op: \"credit\", id: playbook[playbook.len() - 1].id, delta: 1.0, reason: \"still useful\"});\n\
  }\n\
  ops\n\
}\n";

#[test]
fn a_reflect_script_keeps_the_playbook_across_generations() {
    let e = Exp::new(&Spec {
        generations: 2,
        mutate: json!({"action": "climb"}),
        ..Spec::default()
    });
    let source = "operators/reflect/lessons.rhai";
    supply(&e, source, LESSONS);
    bind_script(&e, "reflect", &script_binding(source, None));
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);

    let events = e.events();
    let playbook = events_of(&events, "playbook", None);
    assert_eq!(playbook.len(), 2, "{playbook:#?}");
    let first = &playbook[0]["body"]["ops"];
    assert_eq!(first.as_array().map(Vec::len), Some(1), "{first}");
    assert_eq!(first[0]["op"], "add", "{first}");
    assert_eq!(first[0]["id"], "lesson-1", "{first}");
    assert_eq!(first[0]["data"], json!({"seen": 0}), "{first}");
    assert!(
        first[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("best so far ")),
        "{first}"
    );
    // Generation 2's script saw generation 1's lesson and credited it.
    let second = &playbook[1]["body"]["ops"];
    assert_eq!(second[0]["id"], "lesson-2", "{second}");
    assert_eq!(second[0]["data"], json!({"seen": 1}), "{second}");
    assert_eq!(second[1]["op"], "credit", "{second}");
    assert_eq!(second[1]["id"], "lesson-1", "{second}");
    assert_eq!(
        result_json(&e, "2", "reflect")["script_sha256"],
        sha256(LESSONS)
    );
    e.run_ok(&["verify", "ws"]);
}
