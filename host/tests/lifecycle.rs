//! `evolve init` + `evolve run` end to end, with the real binary, real components and the
//! local engine; and the boundaries a candidate must not cross.

use crate::chat;
use crate::ws;
use chat::{chat_server, model_block};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use ws::{CANARY, Exp, Spec, component, text, wait_for};

fn row<'a>(log: &'a [Value], genid: &str) -> &'a Value {
    log.iter()
        .find(|r| r["genid"] == genid)
        .unwrap_or_else(|| panic!("no row {genid} in {log:#?}"))
}

#[test]
fn init_freezes_a_committed_workspace_and_refuses_to_overwrite_it() {
    let e = Exp::new(&Spec::default());
    e.init();
    for f in [
        "recipe.yaml",
        "target/value.txt",
        "operators/mutate.wasm",
        "operators/manifest.json",
        "evaluator/engine.json",
        "evaluator/task-set.json",
        "keys/archive.pub",
        ".gitignore",
    ] {
        assert!(!e.gen0_bytes(f).is_empty(), "{f} is empty");
        assert!(
            !e.ws.join(f).exists(),
            "{f}: the workspace keeps no working copy"
        );
    }
    let manifest: Value = serde_json::from_str(&e.gen0_file("operators/manifest.json")).unwrap();
    let m = &manifest["components"]["mutate"];
    // The component file is frozen byte for byte, with its SHA-256.
    let file = std::fs::read(component("scripted_mutate")).unwrap();
    assert_eq!(e.gen0_bytes("operators/mutate.wasm"), file);
    assert_eq!(
        m["sha256"].as_str().unwrap(),
        evolve_archive::sha256_hex(&file)
    );
    assert!(m["source"].as_str().unwrap().starts_with("file:"), "{m}");
    assert!(
        manifest["components"]["select"]["source"]
            .as_str()
            .unwrap()
            .starts_with("builtin:select/greedy")
    );
    // The secret key lives outside the workspace, private.
    let keys: Vec<_> = std::fs::read_dir(&e.keys)
        .unwrap()
        .flatten()
        .filter(|k| k.path().extension().is_some_and(|x| x == "key"))
        .collect();
    assert_eq!(keys.len(), 1);
    assert_eq!(
        keys[0].metadata().unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Beside it, the record of the workspace it is for (what `evolve keys prune` reads).
    let record: Value =
        serde_json::from_slice(&std::fs::read(keys[0].path().with_extension("json")).unwrap())
            .unwrap();
    assert_eq!(
        record["workspace"].as_str().unwrap(),
        std::fs::canonicalize(&e.ws).unwrap().to_str().unwrap()
    );
    // gen/0 is tagged; the archive holds the genesis and generation-zero events.
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    assert!(store.tag_target("gen/0").unwrap().is_some());
    let types: Vec<Value> = e.events().iter().map(|e| e["type"].clone()).collect();
    assert_eq!(types, [json!("genesis"), json!("generation")]);
    // A second init over it, or into any non-empty directory, is refused.
    e.usage_error(
        &["init", "ws", "--recipe", "recipe.yaml"],
        "already a workspace",
    );
    let into_target = e
        .evolve(&["init", "target", "--recipe", "recipe.yaml"])
        .output()
        .unwrap();
    assert_eq!(into_target.status.code(), Some(2));
    assert!(
        text(&into_target).contains("not empty"),
        "{}",
        text(&into_target)
    );
    // A bad recipe is reported with its path, nothing is created.
    std::fs::write(
        e.root().join("bad.yaml"),
        "experiment: {name: x, colour: red}\n",
    )
    .unwrap();
    let bad = e
        .evolve(&["init", "ws2", "--recipe", "bad.yaml"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).contains("experiment.colour"), "{}", text(&bad));
    assert!(!e.root().join("ws2").exists());
}

/// A target is read as regular files: a symlink in it is refused before anything is
/// created, a nested repository is left out, and a failure after the workspace was
/// created (here the key directory is a file) removes what init made.
#[test]
fn init_reads_targets_as_plain_files_and_leaves_nothing_when_it_fails() {
    let e = Exp::new(&Spec::default());
    std::os::unix::fs::symlink("/etc/passwd", e.root().join("target/passwd")).unwrap();
    e.usage_error(
        &["init", "ws", "--recipe", "recipe.yaml"],
        "target/passwd is a symlink (to /etc/passwd)",
    );
    assert!(
        !e.ws.exists(),
        "nothing is created for an unreadable target"
    );
    std::fs::remove_file(e.root().join("target/passwd")).unwrap();

    std::fs::create_dir_all(e.root().join("target/.git/objects")).unwrap();
    std::fs::write(e.root().join("target/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(e.root().join("target/sub")).unwrap();
    std::fs::write(e.root().join("target/sub/.GIT"), "gitdir: /elsewhere\n").unwrap();
    let keys_file = e.root().join("keys-file");
    std::fs::write(&keys_file, "not a directory").unwrap();
    let out = e
        .evolve(&["init", "ws", "--recipe", "recipe.yaml"])
        .env("EVOLVE_KEY_DIR", &keys_file)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("signing key"), "{}", text(&out));
    assert!(
        !e.ws.exists(),
        "a failed init removes the workspace it created"
    );

    e.init();
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    for left_out in ["target/.git/HEAD", "target/sub/.GIT"] {
        assert_eq!(
            store.read_blob(gen0, left_out, 1 << 10).unwrap(),
            None,
            "{left_out}"
        );
    }
    assert_eq!(e.gen0_file("target/value.txt"), "0.1\n");
}

#[test]
fn a_run_improves_the_champion_and_verifies() {
    let e = Exp::new(&Spec {
        generations: 3,
        ..Spec::default()
    });
    e.init();
    let dry = e.json(&["run", "ws", "--dry-run", "--json"]);
    assert_eq!(dry["candidate_trials"], json!(3 * 2));
    let out = e.run_ok(&["run", "ws", "--json"]);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["status"], "complete");
    let g0 = summary["genesis_score"].as_f64().unwrap();
    let best = summary["champion_score"].as_f64().unwrap();
    assert!((g0 - 0.1).abs() < 1e-9, "{summary}");
    assert!((best - 0.4).abs() < 1e-9, "{summary}");
    assert!(
        summary["anchor_before"].is_number() && summary["anchor_after"].is_number(),
        "{summary}"
    );
    let log = e.log();
    assert_eq!(log.len(), 4, "{log:#?}");
    for g in ["1", "2", "3"] {
        let r = row(&log, g);
        assert_eq!(r["status"], "benchmark_complete");
        assert_eq!(r["verdict"], "keep");
        assert_eq!(r["changed_paths"], 1);
    }
    assert_eq!(row(&log, "3")["champion"], true);
    assert_eq!(row(&log, "2")["parent"], "1");
    e.run_ok(&["verify", "ws"]);
    let status = e.json(&["status", "ws", "--json"]);
    assert_eq!(status["champion"]["genid"], "3");
    assert_eq!(status["integrity"], "ok");
    let show = e.json(&["show", "2", "-w", "ws", "--json"]);
    assert_eq!(show["eligible"], true);
    assert!(
        show["stages"]["mutate"]["result"]["ok"]["notes"][0]
            .as_str()
            .unwrap()
            .contains("value -> 0.3"),
        "{show:#}"
    );
    // Running again is a no-op: everything is terminal.
    let before = e.events().len();
    e.run_ok(&["run", "ws", "--quiet"]);
    assert_eq!(e.events().len(), before);
}

fn one_generation(mutate: Value, surface: &[&str]) -> Exp {
    let e = Exp::new(&Spec {
        generations: 1,
        mutate,
        surface: surface.iter().map(|s| s.to_string()).collect(),
        ..Spec::default()
    });
    e.init();
    e
}

fn assert_rejected(e: &Exp, status: &str, reason_has: &str) {
    let log = e.log();
    let r = row(&log, "1");
    assert_eq!(r["status"], status, "{log:#?}");
    assert_eq!(r["parent"], "0", "an early stop still names its parent");
    assert_eq!(r["eligible"], false);
    let show = e.json(&["show", "1", "-w", "ws", "--json"]);
    let reason = show["row"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains(reason_has),
        "reason {reason:?} should mention {reason_has:?}"
    );
    assert!(
        e.evolve(&["verify", "ws"])
            .output()
            .unwrap()
            .status
            .success()
    );
    assert!(!e.ws.join("runs/worktrees/gen-1").exists());
}

#[test]
fn a_write_outside_the_surface_is_an_invalid_proposal() {
    let e = one_generation(
        json!({"action": "write", "path": "other.txt", "content": "0.9"}),
        &["target/value.txt"],
    );
    e.run_ok(&["run", "ws"]);
    assert_rejected(&e, "invalid_proposal", "target/other.txt");
}

/// A rejected candidate's proposal stays visible: its tree is kept on
/// `refs/evolve/proposed/<id>` (never a tag, so select never picks it and verify does not
/// count it), the stop archives that tree id, and `evolve diff` prints the verdict, the
/// reason and the proposed diff, also after `evolve gc` and in an export that verifies.
#[test]
fn a_rejected_proposal_is_kept_unselectable_and_diff_shows_it_with_its_reason() {
    let e = Exp::new(&Spec {
        generations: 2,
        mutate: json!({"action": "write", "path": "other.txt", "content": "0.9"}),
        ..Spec::default()
    });
    e.init();
    e.run_ok(&["run", "ws"]);
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    assert!(store.tag_target("gen/1").unwrap().is_none(), "never tagged");
    let kept = store
        .evolve_ref_target("proposed/1")
        .unwrap()
        .expect("refs/evolve/proposed/1");
    let stop = e
        .events()
        .into_iter()
        .find(|x| x["type"] == "status" && x["genid"] == "1")
        .unwrap();
    assert_eq!(
        stop["body"]["proposed_tree"].as_str().unwrap(),
        store.tree_of(kept).unwrap().to_string()
    );
    // Select never picked the proposal: gen 2 forks gen 0 again.
    let log = e.log();
    assert_eq!(row(&log, "2")["parent"], "0", "{log:#?}");
    assert_eq!(row(&log, "1")["eligible"], false);
    e.run_ok(&["verify", "ws"]);

    let check = |e: &Exp| {
        let out = e.run_ok(&["diff", "1", "-w", "ws"]);
        let said = text(&out);
        assert!(
            said.contains("gen 1 was rejected before its commit: invalid_proposal at surface"),
            "{said}"
        );
        assert!(
            said.contains("reason: 1 change(s) outside the mutable surface: target/other.txt"),
            "{said}"
        );
        assert!(
            said.contains("refs/evolve/proposed/1, as the archive recorded it"),
            "{said}"
        );
        assert!(said.contains("+++ b/target/other.txt"), "{said}");
        assert!(said.contains("+0.9"), "{said}");
        let v = e.json(&["diff", "1", "-w", "ws", "--json"]);
        assert_eq!(v["proposed"], true);
        assert_eq!(v["certified"], true);
        assert_eq!(v["status"], "invalid_proposal");
        assert_eq!(v["against"], "0");
        assert_eq!(v["files"][0]["path"], "target/other.txt");
    };
    check(&e);
    e.run_ok(&["gc", "ws"]);
    check(&e);
    e.run_ok(&["verify", "ws"]);
    e.run_ok(&["export", "evidence", "-w", "ws"]);
    e.run_ok(&["verify", "--bundle", "evidence"]);

    // A ref moved after the run is caught against the archived tree.
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    store.set_evolve_ref("proposed/1", gen0).unwrap();
    let out = e.evolve(&["diff", "1", "-w", "ws"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("the archived stop recorded"),
        "{}",
        text(&out)
    );
    // A stop without a proposal says why there is nothing to diff.
    let e = one_generation(json!({"action": "none"}), &["target/value.txt"]);
    e.run_ok(&["run", "ws"]);
    e.usage_error(
        &["diff", "1", "-w", "ws"],
        "kept no proposed tree to diff: no_proposal",
    );
}

#[test]
fn a_planted_symlink_to_the_evaluator_is_an_invalid_proposal() {
    let e = one_generation(
        json!({"action": "symlink", "path": "answer", "content": format!("../evaluator/tasks/{CANARY}-0/tests/test.sh")}),
        &["target/**"],
    );
    e.run_ok(&["run", "ws"]);
    assert_rejected(&e, "invalid_proposal", "target/answer");
}

#[test]
fn no_change_is_no_proposal() {
    let e = one_generation(json!({"action": "none"}), &["target/**"]);
    e.run_ok(&["run", "ws"]);
    assert_rejected(&e, "no_proposal", "no changes");
}

#[test]
fn an_evaluator_edit_in_the_child_tree_is_rejected_by_the_surface_check() {
    // Mutate is busy; meanwhile something else (not the operator: it has no handle on
    // evaluator/) edits the child's evaluator copy. The actual tree diff catches it.
    // (An include of `evaluator/**` is a recipe error, so init refuses it: cli_recipe.rs.)
    let e = one_generation(json!({"action": "climb", "sleep_ms": 1500}), &["target/**"]);
    let child = e.spawn_run();
    let victim = e.ws.join(format!(
        "runs/worktrees/gen-1/evaluator/tasks/{CANARY}-0/tests/test.sh"
    ));
    wait_for(60, "the child worktree", || {
        e.ws.join("runs/gen-1/mutate/input.json").exists()
    });
    std::fs::write(&victim, "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // The implicit exclude catches it, whatever the include.
    assert_rejected(&e, "invalid_proposal", "evaluator/tasks");
}

#[test]
fn private_task_names_never_reach_an_operator() {
    let e = one_generation(json!({"action": "dump"}), &["target/**"]);
    e.run_ok(&["run", "ws"]);
    let frozen: Value = serde_json::from_str(&e.gen0_file("evaluator/task-set.json")).unwrap();
    let private: Vec<String> = ["gate", "sealed"]
        .iter()
        .flat_map(|s| {
            frozen["split"][s]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(private.len(), 3, "{frozen}");
    // Everything operators were given or produced: stage inputs and results, their logs
    // (the dump prints every file mutate could read), scratch, feedback; and the rows.
    let mut seen = 0;
    for entry in walk(&e.ws.join("runs/gen-1"))
        .into_iter()
        .chain(walk(&e.ws.join("runs/gen-2")))
    {
        let text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        seen += 1;
        for name in &private {
            assert!(
                !text.contains(name.as_str()),
                "{name} leaked into {}",
                entry.display()
            );
        }
    }
    assert!(seen >= 5, "expected stage files, found {seen}");
    let dump = std::fs::read_to_string(e.ws.join("runs/gen-1/mutate/operator.stdout.log")).unwrap();
    assert!(dump.contains("== /feedback/parent.json"), "{dump}");
    assert!(
        dump.contains("private-"),
        "rows name private tasks by key: {dump}"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(walk(&p));
        } else if t.is_file() {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_failing_operator_is_an_archived_operator_failure() {
    let e = one_generation(
        json!({"action": "write", "path": "../../escape", "content": "x"}),
        &["target/**"],
    );
    e.run_ok(&["run", "ws"]);
    let log = e.log();
    let r = row(&log, "1");
    assert_eq!(r["status"], "operator_failed", "{log:#?}");
    let show = e.json(&["show", "1", "-w", "ws", "--json"]);
    assert_eq!(show["row"]["failure_stage"], "mutate");
}

#[test]
fn children_of_one_generation_run_concurrently_and_resume_the_archived_selection() {
    let e = Exp::new(&Spec {
        generations: 2,
        ..Spec::default()
    });
    e.init();
    e.run_ok(&["run", "ws", "--children-per-gen", "2", "--quiet"]);
    let log = e.log();
    let ids: Vec<&str> = log.iter().map(|r| r["genid"].as_str().unwrap()).collect();
    for g in ["1-0", "1-1", "2-0", "2-1"] {
        assert!(ids.contains(&g), "{ids:?}");
    }
    assert_eq!(row(&log, "1-0")["parent"], "0");
    assert_eq!(row(&log, "1-1")["parent"], "0");
    let selects: Vec<Value> = e
        .events()
        .into_iter()
        .filter(|x| x["type"] == "select")
        .collect();
    assert_eq!(selects.len(), 2, "one select per generation");
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn the_budget_stops_the_run_before_a_generation_it_cannot_pay_for() {
    // Every trial reports $0.01: genesis (2 gate + 1 sealed trials) costs $0.03 and each
    // child's evaluation $0.02, so a $0.05 budget pays for exactly one generation.
    let e = Exp::new(&Spec {
        generations: 3,
        budget_usd: 0.05,
        agent_cost: Some(0.01),
        ..Spec::default()
    });
    e.init();
    let dry = e.json(&["run", "ws", "--dry-run", "--json"]);
    assert!(
        dry["cost_per_trial_usd"].is_null(),
        "not measured before gen/0 ran: {dry}"
    );
    let out = e.evolve(&["run", "ws", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["status"], "budget_exhausted");
    assert!(
        (summary["spent_usd"].as_f64().unwrap() - 0.05).abs() < 1e-9,
        "{summary}"
    );
    let log = e.log();
    assert_eq!(row(&log, "1")["status"], "benchmark_complete");
    assert_eq!(row(&log, "2")["status"], "budget_exhausted");
    assert!(log.iter().all(|r| r["genid"] != "3"));
    let dry = e.json(&["run", "ws", "--dry-run", "--json"]);
    assert!(
        (dry["cost_per_trial_usd"].as_f64().unwrap() - 0.01).abs() < 1e-9,
        "{dry}"
    );
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn a_failed_evaluation_is_retried_only_by_evolve_retry() {
    let e = one_generation(
        json!({"action": "write", "path": "agent.toml", "content": "command = 42\n"}),
        &["target/**"],
    );
    e.run_ok(&["run", "ws", "--quiet"]);
    assert_eq!(row(&e.log(), "1")["status"], "candidate_invalid");
    let before = e.events().len();
    e.run_ok(&["run", "ws", "--quiet"]);
    assert_eq!(
        e.events().len(),
        before,
        "run does not retry a failed evaluation"
    );
    let out = e.run_ok(&["retry", "1", "-w", "ws", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "candidate_invalid");
    let attempts: Vec<Value> = e
        .events()
        .into_iter()
        .filter(|x| x["type"] == "evaluation" && x["genid"] == "1")
        .map(|x| x["body"]["attempt"].clone())
        .collect();
    assert_eq!(
        attempts,
        [json!(1), json!(2)],
        "both attempts stay auditable"
    );
    assert_eq!(row(&e.log(), "1")["eligible"], false);
    let refused = e.evolve(&["retry", "0", "-w", "ws"]).output().unwrap();
    assert_eq!(
        refused.status.code(),
        Some(2),
        "gen 0 completed: nothing to retry"
    );
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn a_self_edited_gate_judges_its_own_child() {
    // The surface includes operators/**: mutate replaces operators/gate.wasm with another
    // component, and the child's gate (loaded from the child's commit) is the new one.
    let e = Exp::new(&Spec {
        generations: 1,
        mutate: json!({"action": "replace_operator", "path": "alt_gate.wasm", "content": "gate.wasm"}),
        surface: vec!["target/value.txt".into(), "operators/**".into()],
        ..Spec::default()
    });
    std::fs::copy(
        ws::component("slow_gate"),
        e.root().join("target/alt_gate.wasm"),
    )
    .unwrap();
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let show = e.json(&["show", "1", "-w", "ws", "--json"]);
    let reason = show["row"]["gate_reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("child 0.2 vs parent 0.1"),
        "the replaced gate decided: {reason:?}"
    );
    assert_eq!(show["row"]["verdict"], "keep");
    // gen/0's gate component is untouched: the next child of gen/0 would use hillclimb.
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    let gen1 = store.tag_target("gen/1").unwrap().unwrap();
    let g0 = store
        .read_blob(gen0, "operators/gate.wasm", 64 << 20)
        .unwrap()
        .unwrap();
    let g1 = store
        .read_blob(gen1, "operators/gate.wasm", 64 << 20)
        .unwrap()
        .unwrap();
    assert_ne!(g0, g1);
    assert_eq!(g1, std::fs::read(ws::component("slow_gate")).unwrap());
    e.run_ok(&["verify", "ws"]);
}

/// A three-generation run whose mutate is `selftest_mutate`'s `break_operator`: the
/// child of generation 1 breaks `operators/<stage>.wasm` (as `variant` says) while it
/// raises the score; later children only raise it.
fn breaking(stage: &str, variant: &str) -> Exp {
    let e = Exp::new(&Spec {
        generations: 3,
        mutate: json!({"action": "break_operator", "path": stage, "variant": variant}),
        surface: vec!["target/value.txt".into(), "operators/**".into()],
        ..Spec::default()
    });
    let recipe = e.root().join("recipe.yaml");
    let text = std::fs::read_to_string(&recipe).unwrap();
    let scripted = ws::component("scripted_mutate").display().to_string();
    let selftest = ws::component("selftest_mutate").display().to_string();
    assert!(text.contains(&scripted));
    std::fs::write(&recipe, text.replace(&scripted, &selftest)).unwrap();
    e.init();
    e
}

#[test]
fn a_child_that_breaks_a_stage_component_is_never_committed_and_the_run_goes_on() {
    // Before the guardrail, gen 1 (score 0.2 > 0.1) was kept with a broken
    // operators/select.wasm, became the champion, and every later select failed.
    for (stage, variant, problem) in [
        ("select", "garbage", "is not a valid component"),
        (
            "select",
            "wrong_world",
            "exports the `mutate` world, not this stage's",
        ),
        ("select", "delete", "was deleted; the select stage loads it"),
        (
            "mutate",
            "wrong_world",
            "exports the `select` world, not this stage's",
        ),
        ("gate", "garbage", "is not a valid component"),
    ] {
        let e = breaking(stage, variant);
        e.run_ok(&["run", "ws", "--quiet"]);
        let case = format!("{stage}/{variant}");
        let log = e.log();
        let r = row(&log, "1");
        assert_eq!(r["status"], "invalid_proposal", "{case}: {log:#?}");
        assert_eq!(r["eligible"], false, "{case}");
        let show = e.json(&["show", "1", "-w", "ws", "--json"]);
        assert_eq!(show["row"]["failure_stage"], "surface", "{case}");
        let reason = show["row"]["reason"].as_str().unwrap_or("");
        let names = format!("operators/{stage}.wasm (the {stage} stage's component) {problem}");
        assert!(
            reason.contains(&names),
            "{case}: {reason:?} should say {names:?}"
        );
        // Never committed, tagged or evaluated.
        let events = e.events();
        let of_1 = |t: &str| events.iter().any(|x| x["type"] == t && x["genid"] == "1");
        assert!(
            !of_1("generation") && !of_1("evaluation"),
            "{case}: {events:#?}"
        );
        let store = evolve_snapshot::Store::open(&e.ws).unwrap();
        assert!(store.tag_target("gen/1").unwrap().is_none(), "{case}");
        assert!(
            !e.ws.join("runs/evaluations/candidate/gen-1").exists(),
            "{case}"
        );
        // The next generations run normally from gen 0's intact operators.
        for (genid, parent, score) in [("2", "0", 0.3), ("3", "2", 0.4)] {
            let r = row(&log, genid);
            assert_eq!(r["parent"], parent, "{case}: {log:#?}");
            assert_eq!(r["verdict"], "keep", "{case}: {log:#?}");
            assert!(
                (r["score"].as_f64().unwrap() - score).abs() < 1e-9,
                "{case}"
            );
        }
        assert_eq!(row(&log, "3")["champion"], true, "{case}");
        e.run_ok(&["verify", "ws"]);
    }
}

/// Write `commit` as the run's shared read-only checkout of it (`runs/checkouts/<commit>`,
/// which select reads) with garbage for its select component. A run reads an existing
/// checkout as it is, so this stands for a champion whose select no longer loads: one
/// kept before the guardrail existed, or a damaged workspace.
fn with_broken_select(e: &Exp, commit: evolve_snapshot::Oid) {
    let dir = e.ws.join("runs/checkouts").join(commit.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    store.materialize(commit, &dir).unwrap();
    let select = dir.join("operators/select.wasm");
    std::fs::set_permissions(&select, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&select, b"not a component").unwrap();
}

#[test]
fn a_champion_whose_select_no_longer_loads_falls_back_to_gen0s_select() {
    let e = Exp::new(&Spec {
        generations: 3,
        ..Spec::default()
    });
    e.init();
    e.run_ok(&["run", "ws", "--quiet", "--max-generations", "1"]);
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    let tag = |g: &str| store.tag_target(&format!("gen/{g}")).unwrap().unwrap();
    assert_eq!(row(&e.log(), "1")["champion"], true);
    with_broken_select(&e, tag("1"));
    // Before the fallback, this and every later generation ended `operator_failed` at
    // select, with no way out.
    e.run_ok(&["run", "ws", "--quiet", "--max-generations", "2"]);
    let events = e.events();
    let select = events
        .iter()
        .find(|x| x["type"] == "select" && x["body"]["generation"] == 2)
        .unwrap_or_else(|| panic!("no select event for gen 2: {events:#?}"));
    assert_eq!(select["body"]["operator_from"], "gen/0", "{select}");
    assert_eq!(select["body"]["fallback"]["from"], "gen/1", "{select}");
    let reason = select["body"]["fallback"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("cannot load operators/select.wasm") && reason.ends_with("(load_failed)"),
        "{reason}"
    );
    let gen0_select = e.gen0_bytes("operators/select.wasm");
    assert_eq!(
        select["body"]["operator"]["component_sha256"],
        evolve_archive::sha256_hex(&gen0_select)
    );
    assert!(e.ws.join("runs/gen-2/select-gen0/result.json").is_file());
    let log = e.log();
    assert_eq!(row(&log, "2")["parent"], "1", "{log:#?}");
    assert_eq!(row(&log, "2")["verdict"], "keep", "{log:#?}");
    e.run_ok(&["verify", "ws"]);

    // With gen/0's select broken too, no generation can choose a parent: the run stops
    // with the error instead of failing every generation.
    with_broken_select(&e, tag("2"));
    with_broken_select(&e, tag("0"));
    let out = e
        .evolve(&["run", "ws", "--max-generations", "3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no generation can choose a parent: select cannot be loaded (gen/2's select: cannot load operators/select.wasm")
            && err.contains("gen/0's select: cannot load operators/select.wasm"),
        "{err}"
    );
    let show = e.json(&["show", "3", "-w", "ws", "--json"]);
    assert_eq!(show["row"]["status"], "operator_failed", "{show:#}");
    assert_eq!(show["row"]["failure_stage"], "select", "{show:#}");
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn a_select_that_keeps_failing_stops_the_run_after_three_generations() {
    // gen/0's own select (hostile_select) reports an error on every call: there is no
    // fallback, and without the limit all five generations would fail and the run end
    // `complete` with exit 0.
    let e = Exp::new(&Spec {
        generations: 5,
        ..Spec::default()
    });
    let recipe = e.root().join("recipe.yaml");
    let yaml = std::fs::read_to_string(&recipe).unwrap();
    let hostile = format!(
        "select: {{operator: {}, config: {{attack: read_passwd}}}}",
        ws::component("hostile_select").display()
    );
    assert!(yaml.contains("select: {operator: greedy}"));
    std::fs::write(
        &recipe,
        yaml.replace("select: {operator: greedy}", &hostile),
    )
    .unwrap();
    e.init();
    let out = e.evolve(&["run", "ws"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("select gave no parents in 3 consecutive generations; the last: "),
        "{err}"
    );
    let log = e.log();
    for genid in ["1", "2", "3"] {
        let show = e.json(&["show", genid, "-w", "ws", "--json"]);
        assert_eq!(show["row"]["status"], "operator_failed", "{show:#}");
        assert_eq!(show["row"]["failure_stage"], "select", "{show:#}");
    }
    assert!(
        !log.iter().any(|r| r["genid"] == "4"),
        "the run stopped: {log:#?}"
    );
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn the_default_demo_improves_reports_the_anchor_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let summary = crate::cmd::evolve(["demo", "demo-ws", "--json"])
        .keys(tmp.path().join("keys"))
        .cwd(tmp.path())
        .ok()
        .json();
    let (g0, best) = (
        summary["genesis_score"].as_f64().unwrap(),
        summary["champion_score"].as_f64().unwrap(),
    );
    assert!(best > g0, "the champion beats gen 0: {summary}");
    assert!(
        summary["anchor_before"].is_number() && summary["anchor_after"].is_number(),
        "{summary}"
    );
    crate::cmd::evolve(["verify", "demo-ws"])
        .cwd(tmp.path())
        .ok();
}

#[test]
fn the_tasks_capability_runs_train_tasks_only() {
    use evolve::sandbox::TaskBackend;
    use evolve::sandbox::tasks::{RunRequest, TasksError};
    let e = Exp::new(&Spec::default());
    e.init();
    let ws = evolve::workspace::Workspace::open(&e.ws).unwrap();
    let checkout = e.root().join("gen0");
    ws.store.materialize(ws.genesis, &checkout).unwrap();
    let engine: std::sync::Arc<dyn evaluator_harbor::engine::Engine> =
        std::sync::Arc::new(evaluator_harbor::engine::local::LocalEngine::default());
    let backend = evolve::lifecycle::train::TrainTasks::new(
        &ws,
        engine,
        &checkout,
        &e.root().join("train-stage"),
        evolve::lifecycle::view::Redactor::new(&ws.task_set),
    );
    let train = backend.train_tasks();
    assert_eq!(train, ws.task_set.split.train);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reports = rt
        .block_on(backend.run(RunRequest {
            tasks: train.clone(),
            repetitions: 2,
        }))
        .unwrap();
    assert_eq!(reports.len(), train.len() * 2);
    assert!(reports.iter().all(|r| r.reward == Some(0.1)), "{reports:?}");
    let gate = ws.task_set.split.gate[0].clone();
    match rt.block_on(backend.run(RunRequest {
        tasks: vec![gate.clone()],
        repetitions: 1,
    })) {
        Err(TasksError::UnknownTask(m)) => assert!(m.contains("not a train task")),
        other => panic!("a gate task must be refused: {other:?}"),
    }
}

#[test]
fn an_evaluation_refuses_a_commit_whose_evaluator_differs_from_gen0() {
    use evolve::lifecycle::evaluate::{EvalError, EvalRequest, evaluate};
    let e = Exp::new(&Spec::default());
    e.init();
    let ws = evolve::workspace::Workspace::open(&e.ws).unwrap();
    // A commit that edits a verifier, built directly in the repository (as a hostile
    // process with write access to it could).
    let tampered = e.root().join("tampered");
    ws.store.materialize(ws.genesis, &tampered).unwrap();
    std::fs::write(
        tampered.join(format!("evaluator/tasks/{CANARY}-0/tests/test.sh")),
        "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let snap = ws
        .store
        .snapshot(&tampered, Some(ws.genesis), &Default::default(), &|_| false)
        .unwrap();
    let commit = ws
        .store
        .commit(snap.tree, Some(ws.genesis), "tampered", false)
        .unwrap();
    let engine: std::sync::Arc<dyn evaluator_harbor::engine::Engine> =
        std::sync::Arc::new(evaluator_harbor::engine::local::LocalEngine::default());
    let req = EvalRequest {
        genid: "1".into(),
        parent: Some("0".into()),
        commit,
        purpose: "candidate",
        split: evaluator_harbor::split::SplitName::Gate,
        certified_attempts: vec![],
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match rt.block_on(evaluate(&ws, engine, &req)) {
        Err(EvalError::EvaluatorChanged { .. }) => {}
        other => panic!(
            "expected the evaluator-tree check to refuse: {:?}",
            other.map(|e| e.outcome)
        ),
    }
}

#[test]
fn every_shipped_recipe_checks() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../recipes");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().and_then(|x| x.to_str()) != Some("yaml") {
            continue;
        }
        n += 1;
        crate::cmd::evolve(["recipe", "check"]).arg(&path).ok();
    }
    assert!(n >= 1);
    for r in evolve::recipe::BUILTIN {
        assert!(
            dir.join(format!("{}.yaml", r.name)).is_file(),
            "built-in recipe {} ships as a file",
            r.name
        );
    }
}

#[test]
fn the_offline_pipeline_with_every_stage_runs_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let recipe =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../recipes/train_demo.yaml");
    let run = |args: &[&str]| {
        crate::cmd::evolve(args)
            .keys(tmp.path().join("keys"))
            .cwd(tmp.path())
            .ok()
    };
    run(&["init", "ws", "--recipe", recipe.to_str().unwrap()]);
    run(&["run", "ws", "--max-generations", "2", "--quiet"]);
    run(&["verify", "ws"]);
    let g1 = tmp.path().join("ws/runs/gen-1");
    for stage in ["rollout", "analyze", "mutate"] {
        let result: Value =
            serde_json::from_slice(&std::fs::read(g1.join(stage).join("result.json")).unwrap())
                .unwrap();
        assert!(result.get("ok").is_some(), "{stage}: {result}");
    }
    assert!(
        g1.join("rollout/train/run-1").is_dir(),
        "rollout ran train trials through the host"
    );
    let feedback = std::fs::read_to_string(g1.join("feedback/analyze.json")).unwrap();
    assert!(
        feedback.contains("groups") || feedback.contains("failed_trials"),
        "{feedback}"
    );
}

#[test]
fn model_calls_go_through_the_host_metered_logged_and_within_budget() {
    let (url, calls) = chat_server("0.6");
    // $1 per million tokens each way: one call costs $0.0015; the budget pays for two.
    let e = Exp::new(&Spec {
        generations: 3,
        budget_usd: 0.0035,
        mutate: json!({}),
        model: Some(model_block(&url)),
        ..Spec::default()
    });
    let recipe = std::fs::read_to_string(e.root().join("recipe.yaml")).unwrap();
    let recipe = recipe.replace(
        &ws::component("scripted_mutate").display().to_string(),
        &ws::component("model_mutate").display().to_string(),
    );
    std::fs::write(e.root().join("recipe.yaml"), recipe).unwrap();
    e.init();
    let out = e.evolve(&["run", "ws", "--json"]).output().unwrap();
    let summary: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)));
    let log = e.log();
    assert_eq!(row(&log, "1")["status"], "benchmark_complete", "{log:#?}");
    assert!((row(&log, "1")["score"].as_f64().unwrap() - 0.6).abs() < 1e-9);
    // The spend is metered by the host and archived with the generation.
    let gen1 = e
        .events()
        .into_iter()
        .find(|x| x["type"] == "generation" && x["genid"] == "1")
        .unwrap();
    assert!(
        (gen1["body"]["cost_usd"].as_f64().unwrap() - 0.0015).abs() < 1e-12,
        "{gen1}"
    );
    let logged = std::fs::read_to_string(e.ws.join("runs/gen-1/mutate/model/model.jsonl")).unwrap();
    assert!(
        logged.contains("test-model") && !logged.contains(&url),
        "the log has the call, not the endpoint"
    );
    // Two calls fit; the third generation cannot be paid for.
    assert_eq!(
        summary["status"],
        "budget_exhausted",
        "{summary} {log:#?} {}",
        e.events()
            .iter()
            .filter(|x| x["type"] == "status")
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        summary["spent_usd"].as_f64().unwrap() <= 0.0035 + 1e-12,
        "{summary}"
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn the_gepa_recipe_runs_a_generation_end_to_end_against_a_chat_server() {
    // The model (a scripted stand-in on 127.0.0.1) proposes the true parameters.
    let (url, calls) = chat_server(
        "The failures say the line is too flat.\n```json\n{\"slope\": 2.0, \"intercept\": 3.0}\n```\n",
    );
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| chat::evolve_with_model(tmp.path(), &url, args);
    run(&["init", "ws", "--recipe", "gepa"]);
    run(&["run", "ws", "--max-generations", "1", "--quiet"]);
    run(&["verify", "ws"]);
    let e = std::fs::read_to_string(tmp.path().join("ws/.evolve/archive.jsonl")).unwrap();
    let events: Vec<Value> = e
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let eval = events
        .iter()
        .find(|x| x["type"] == "evaluation" && x["genid"] == "1")
        .expect("gen 1 was evaluated");
    assert_eq!(eval["body"]["score"], 1.0, "the true parameters score 1");
    let gen1 = events
        .iter()
        .find(|x| x["type"] == "generation" && x["genid"] == "1")
        .unwrap();
    assert!(
        gen1["body"]["cost_usd"].as_f64().unwrap() > 0.0,
        "the model call was metered: {gen1}"
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let validate: Value = serde_json::from_slice(
        &std::fs::read(tmp.path().join("ws/runs/gen-1/validate/result.json")).unwrap(),
    )
    .unwrap();
    assert!(
        validate["ok"]["reason"]
            .as_str()
            .unwrap()
            .contains("> parent"),
        "{validate}"
    );
}

#[test]
fn a_self_edited_operator_still_cannot_reach_the_evaluator_or_the_archive() {
    // Mutate installs a gate that tries every path to the evaluator, the archive and the
    // receipts; the child's own stages load it, and every attempt is denied.
    let e = Exp::new(&Spec {
        generations: 1,
        mutate: json!({"action": "replace_operator", "path": "alt_gate.wasm", "content": "gate.wasm"}),
        surface: vec!["target/value.txt".into(), "operators/**".into()],
        ..Spec::default()
    });
    std::fs::copy(
        ws::component("prying_gate"),
        e.root().join("target/alt_gate.wasm"),
    )
    .unwrap();
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let show = e.json(&["show", "1", "-w", "ws", "--json"]);
    let reason = show["row"]["gate_reason"].as_str().unwrap_or("");
    assert_eq!(
        reason.matches(": denied:").count(),
        7,
        "every attempt was made and denied: {reason}"
    );
    assert!(!reason.contains("BREACH"), "{reason}");
    assert_eq!(show["row"]["verdict"], "keep");
}

/// Every name under `root` with its kind, permissions and content: what a stage reading
/// a checkout can observe.
fn listing(root: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![std::path::PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for entry in std::fs::read_dir(root.join(&rel)).unwrap() {
            let rel = rel.join(entry.unwrap().file_name());
            let p = root.join(&rel);
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.is_dir() {
                todo.push(rel.clone());
                format!("dir {:o}", m.permissions().mode() & 0o7777)
            } else if m.is_file() {
                format!(
                    "file {:o} {:?}",
                    m.permissions().mode() & 0o7777,
                    std::fs::read(&p).unwrap()
                )
            } else {
                format!("other {:?}", m.file_type())
            };
            out.insert(rel.display().to_string(), what);
        }
    }
    out
}

/// Directories are recycled between stages and generations (the committed worktree
/// becomes gate's checkout, a discarded checkout the next fork): each must still be
/// exactly its commit. Mutate leaves an empty directory a snapshot does not store, so a
/// recycled directory that kept it would show.
#[test]
fn recycled_checkouts_hold_exactly_their_commit() {
    let e = Exp::new(&Spec {
        generations: 4,
        mutate: json!({"action": "descend"}),
        ..Spec::default()
    });
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    e.run_ok(&["verify", "ws"]);
    let log = e.log();
    let verdicts: Vec<Value> = log.iter().map(|r| r["verdict"].clone()).collect();
    assert_eq!(
        verdicts,
        [
            json!("keep"),
            json!("keep"),
            json!("discard"),
            json!("discard"),
            json!("discard")
        ],
        "{log:#?}"
    );
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    let fresh = e.root().join("fresh");
    for g in 1..=4 {
        let commit = store.tag_target(&format!("gen/{g}")).unwrap().unwrap();
        // Each child changed only its own value, from its parent gen/1 (gen/0 for gen 1).
        let parent = store
            .tag_target(if g == 1 { "gen/0" } else { "gen/1" })
            .unwrap()
            .unwrap();
        let changes: Vec<String> = store
            .diff(parent, commit)
            .unwrap()
            .iter()
            .map(|c| c.path.clone())
            .collect();
        assert_eq!(changes, ["target/value.txt"], "gen {g}");
        let dir = fresh.join(g.to_string());
        store.materialize(commit, &dir).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("target/value.txt")).unwrap(),
            format!("0.{}\n", 8 - g),
            "gen {g}"
        );
    }
    // The kept child's checkout (select reads it) is its commit and nothing more.
    let gen1 = store.tag_target("gen/1").unwrap().unwrap();
    let kept = e.ws.join("runs/checkouts").join(gen1.to_string());
    assert!(!kept.join("target/junk").exists());
    assert_eq!(listing(&kept), listing(&fresh.join("1")));
    // gen/0's checkout went round once gen 1 became the champion, and so did the
    // discarded ones: each fork took the spare left before it, so one is left, not four.
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    assert!(!e.ws.join("runs/checkouts").join(gen0.to_string()).exists());
    let spares = std::fs::read_dir(e.ws.join("runs/spare")).unwrap().count();
    assert_eq!(spares, 1);
}

// ---------------------------------------------------------------------------------
// A model that is missing, dead, or goes away (issue 23).

/// Bind mutate to the test component that asks the model for its proposal.
fn with_model_mutate(e: &Exp) {
    let path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&path).unwrap().replace(
        &component("scripted_mutate").display().to_string(),
        &component("model_mutate").display().to_string(),
    );
    std::fs::write(path, recipe).unwrap();
}

/// A `model:` block for `url` with one attempt per call (no retries) and a price.
fn quick_model(url: &str) -> String {
    format!(
        "{{endpoint: \"{url}\", model: test-model, api_key_env: EVOLVE_TEST_NO_KEY, max_retries: 0, timeout_s: 5, prices: {{input_per_mtok_usd: 1, output_per_mtok_usd: 1}}}}"
    )
}

#[test]
fn a_dead_model_endpoint_stops_run_recipe_check_and_init_before_anything_is_spent() {
    let dead = chat::dead_endpoint();
    let e = Exp::new(&Spec {
        mutate: json!({}),
        model: Some(quick_model(&dead)),
        ..Spec::default()
    });
    with_model_mutate(&e);
    // `recipe check --check` and `init --check` probe the endpoint.
    let check = e
        .evolve(&["recipe", "check", "recipe.yaml", "--check"])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(1), "{}", text(&check));
    assert!(
        text(&check).contains("model.endpoint") && text(&check).contains(&dead),
        "{}",
        text(&check)
    );
    assert!(
        text(&check).contains("connection refused"),
        "{}",
        text(&check)
    );
    let init = e
        .evolve(&["init", "ws", "--recipe", "recipe.yaml", "--check"])
        .output()
        .unwrap();
    assert_eq!(init.status.code(), Some(1), "{}", text(&init));
    assert!(text(&init).contains("unreachable"), "{}", text(&init));
    assert!(!e.ws.exists(), "nothing was created");
    // Without --check init goes ahead; the run probes once and stops before gen 0.
    e.init();
    let run = e.evolve(&["run", "ws"]).output().unwrap();
    assert!(!run.status.success(), "{}", text(&run));
    let t = text(&run);
    assert!(
        t.contains("model.endpoint") && t.contains(&dead) && t.contains("unreachable"),
        "{t}"
    );
    assert!(
        t.contains("no generation was run") && !t.contains("run complete"),
        "{t}"
    );
    let types: Vec<Value> = e.events().iter().map(|e| e["type"].clone()).collect();
    assert_eq!(
        types,
        [json!("genesis"), json!("generation")],
        "nothing was evaluated"
    );
}

#[test]
fn a_dead_endpoint_no_operator_calls_does_not_stop_the_run() {
    // EVOLVE_MODEL_ENDPOINT set for other work, or a model block kept in a recipe whose
    // mutate no longer calls a model: the probe fails, and the run says so and goes on.
    let dead = chat::dead_endpoint();
    let e = Exp::new(&Spec {
        model: Some(quick_model(&dead)),
        generations: 1,
        ..Spec::default()
    });
    e.init();
    let run = e.run_ok(&["run", "ws"]);
    let t = text(&run);
    assert!(
        t.contains("no operator of this recipe calls the model"),
        "{t}"
    );
    assert!(t.contains("run complete"), "{t}");
}

#[test]
fn a_model_the_operators_call_but_nobody_configured_is_mentioned() {
    // The scripted mutate never imports `model`: nothing to say.
    let plain = Exp::new(&Spec::default());
    let plain = plain.run_ok(&["recipe", "check", "recipe.yaml"]);
    assert!(!text(&plain).contains("model"), "{}", text(&plain));
    let e = Exp::new(&Spec {
        mutate: json!({}),
        ..Spec::default()
    });
    with_model_mutate(&e);
    let noted = e.run_ok(&["recipe", "check", "recipe.yaml"]);
    let says = "operators.mutate";
    assert!(
        text(&noted).contains(says) && text(&noted).contains("none is configured"),
        "{}",
        text(&noted)
    );
    let strict = e
        .evolve(&["recipe", "check", "recipe.yaml", "--check"])
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(1), "{}", text(&strict));
    assert!(
        text(&strict).contains("none is configured"),
        "{}",
        text(&strict)
    );
    let init = e.run_ok(&["init", "ws", "--recipe", "recipe.yaml"]);
    assert!(
        text(&init).contains("none is configured"),
        "{}",
        text(&init)
    );
    let dry = e.run_ok(&["run", "ws", "--dry-run"]);
    assert!(text(&dry).contains("none is configured"), "{}", text(&dry));
    // An empty block: both missing settings in one report.
    let recipe = std::fs::read_to_string(e.root().join("recipe.yaml")).unwrap();
    std::fs::write(
        e.root().join("empty.yaml"),
        format!("{recipe}model: {{}}\n"),
    )
    .unwrap();
    // Absent settings may come from the run's environment: notes, unless `--check`
    // asks about this machine now.
    let empty = e.run_ok(&["recipe", "check", "empty.yaml"]);
    assert!(
        text(&empty).contains("note: model.endpoint: not set")
            && text(&empty).contains("note: model.model: not set"),
        "{}",
        text(&empty)
    );
    let empty = e
        .evolve(&["recipe", "check", "empty.yaml", "--check"])
        .output()
        .unwrap();
    assert_eq!(empty.status.code(), Some(1), "{}", text(&empty));
    assert!(
        text(&empty).contains("model.endpoint: not set")
            && text(&empty).contains("model.model: not set"),
        "{}",
        text(&empty)
    );
}

#[test]
fn a_provider_that_goes_away_mid_run_stops_it_after_three_failed_generations() {
    let url = chat::server_gone_after_probe();
    let e = Exp::new(&Spec {
        generations: 6,
        budget_usd: 1.0,
        mutate: json!({}),
        model: Some(quick_model(&url)),
        ..Spec::default()
    });
    with_model_mutate(&e);
    e.init();
    let run = e.evolve(&["run", "ws"]).output().unwrap();
    let t = text(&run);
    assert!(!run.status.success(), "{t}");
    assert!(
        t.contains("stopped early: the last 3 generations all failed the same way"),
        "{t}"
    );
    assert!(t.contains("could not connect to the provider"), "{t}");
    assert!(t.contains(&url), "names the endpoint: {t}");
    let log = e.log();
    for g in ["1", "2", "3"] {
        assert_eq!(row(&log, g)["status"], "operator_failed", "{log:#?}");
    }
    assert!(
        !log.iter().any(|r| r["genid"] == "4"),
        "generation 4 was not spent: {log:#?}"
    );
}

#[test]
fn a_reservation_a_killed_run_left_in_flight_counts_as_spent_after_resume() {
    let e = Exp::new(&Spec {
        generations: 1,
        budget_usd: 1.0,
        ..Spec::default()
    });
    e.init();
    // What `kill -9` during a model call of gen 1's mutate leaves: its reservation,
    // synced before the request, and no settlement; beside it a call that was answered
    // but whose stage's event (which would have listed it) was never appended.
    let ws = std::fs::canonicalize(&e.ws).unwrap();
    let log = ws.join("runs/gen-1/mutate/model").display().to_string();
    let ledger = ws.join(".evolve/model-reservations.jsonl");
    std::fs::write(
        &ledger,
        format!(
            "{}\n{}\n{}\n",
            json!({"reserve": "9-a-1", "usd": 0.01, "log": log}),
            json!({"settle": "9-a-1", "usd": 0.005}),
            json!({"reserve": "9-a-2", "usd": 0.25, "log": log}),
        ),
    )
    .unwrap();
    e.run_ok(&["run", "ws", "--quiet"]);
    let status = e.json(&["status", "ws", "--json"]);
    let spent = status["spent_usd"].as_f64().unwrap();
    assert!((spent - 0.255).abs() < 1e-9, "{status}");
    let repairs: Vec<Value> = e
        .events()
        .into_iter()
        .filter(|x| x["type"] == "repair" && x["body"]["model_calls"].is_array())
        .collect();
    assert_eq!(repairs.len(), 1, "{repairs:#?}");
    assert_eq!(repairs[0]["genid"], "1");
    assert_eq!(repairs[0]["body"]["model_calls"], json!(["9-a-1", "9-a-2"]));
    assert!(!ledger.exists(), "the ledger is emptied once archived");
    // Charged once: a later run adds nothing.
    e.run_ok(&["run", "ws", "--quiet", "--max-generations", "2"]);
    let again: Vec<Value> = e
        .events()
        .into_iter()
        .filter(|x| x["type"] == "repair" && x["body"]["model_calls"].is_array())
        .collect();
    assert_eq!(again.len(), 1);
    e.run_ok(&["verify", "ws"]);
}

/// A mutate script that makes two priced model calls, then edits the target.
const TWO_CALLS: &str = r#"
fn mutate(ctx, observation) {
    for n in ["first", "second"] {
        let r = model_chat("the " + n + " call", #{max_tokens: 1000});
        if r.error != () { throw r.error }
    }
    target_write("value.txt", "0.9\n");
    #{notes: ["asked twice"]}
}
"#;

/// The ledger's lines (`model::ledger`).
fn ledger_lines(e: &Exp) -> Vec<Value> {
    std::fs::read_to_string(e.ws.join(".evolve/model-reservations.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_run_killed_between_two_model_calls_of_mutate_is_charged_both_once_on_resume() {
    let (url, calls) = chat::chat_server_holding("0.9", 2);
    let e = Exp::new(&Spec {
        generations: 1,
        budget_usd: 1.0,
        mutate: json!({}),
        model: Some(format!(
            "{{endpoint: \"{url}\", model: test-model, api_key_env: EVOLVE_TEST_NO_KEY, max_retries: 0, timeout_s: 120, prices: {{input_per_mtok_usd: 1, output_per_mtok_usd: 1}}}}"
        )),
        ..Spec::default()
    });
    let path = e.root().join("recipe.yaml");
    let binding = format!(
        "{{operator: {}, timeout_s: 60, config: {{}}}}",
        component("scripted_mutate").display()
    );
    let recipe = std::fs::read_to_string(&path).unwrap().replace(
        &binding,
        "{operator: script, timeout_s: 180, config: {source: operators/mutate/two_calls.rhai}}",
    );
    std::fs::write(&path, recipe).unwrap();
    std::fs::create_dir_all(e.root().join("operators/mutate")).unwrap();
    std::fs::write(e.root().join("operators/mutate/two_calls.rhai"), TWO_CALLS).unwrap();
    e.init();

    // The first call is answered ($0.0015) and settled; the server holds the second.
    let child = e.spawn_run();
    wait_for(240, "mutate's second model call", || {
        calls.load(std::sync::atomic::Ordering::SeqCst) >= 2
    });
    ws::kill9(child);
    let lines = ledger_lines(&e);
    assert_eq!(lines.len(), 3, "reserve, settle, reserve: {lines:#?}");
    let (first, second) = (&lines[0]["reserve"], &lines[2]["reserve"]);
    assert_eq!(lines[1]["settle"], *first, "{lines:#?}");
    let answered = lines[1]["usd"].as_f64().unwrap();
    assert!((answered - 0.0015).abs() < 1e-12, "{lines:#?}");
    let worst = lines[2]["usd"].as_f64().unwrap();
    assert!(worst > 0.001, "the second call's worst case: {lines:#?}");
    assert!(
        !e.events()
            .iter()
            .any(|x| x["genid"] == "1" && x["body"]["cost_usd"].is_number()),
        "killed before gen 1's stage archived its cost"
    );

    // Resume (after `evolve repair` removes the killed child's worktree): both calls are
    // charged, the answered one at its charge, the one in flight at its worst case; gen
    // 1 runs again and its two new calls go with its event.
    e.run_ok(&["repair", "ws"]);
    e.run_ok(&["run", "ws", "--quiet"]);
    let events = e.events();
    let repairs: Vec<&Value> = events
        .iter()
        .filter(|x| x["type"] == "repair" && x["body"]["model_calls"].is_array())
        .collect();
    assert_eq!(repairs.len(), 1, "{repairs:#?}");
    let repair = &repairs[0];
    assert_eq!(repair["genid"], "1");
    assert_eq!(repair["body"]["model_calls"], json!([first, second]));
    assert_eq!(repair["body"]["answered"], 1);
    assert_eq!(repair["body"]["in_flight"], 1);
    let charged = repair["body"]["cost_usd"].as_f64().unwrap();
    assert!((charged - (answered + worst)).abs() < 1e-12, "{repair:#}");
    let generation = events
        .iter()
        .find(|x| x["type"] == "generation" && x["genid"] == "1")
        .expect("gen 1 committed on resume");
    assert_eq!(
        generation["body"]["model_calls"].as_array().unwrap().len(),
        2
    );
    let rerun = generation["body"]["cost_usd"].as_f64().unwrap();
    assert!((rerun - 0.003).abs() < 1e-12, "{generation:#}");
    let spent = || {
        e.json(&["status", "ws", "--json"])["spent_usd"]
            .as_f64()
            .unwrap()
    };
    let after_resume = spent();
    assert!(
        (after_resume - (answered + worst + rerun)).abs() < 1e-9,
        "{after_resume} = {answered} + {worst} + {rerun}"
    );

    // A second resume charges nothing again: not the repaired calls, and not the
    // resumed run's calls, which its generation event listed.
    e.run_ok(&["run", "ws", "--quiet"]);
    assert!((spent() - after_resume).abs() < 1e-12);
    let again = e
        .events()
        .into_iter()
        .filter(|x| x["type"] == "repair" && x["body"]["model_calls"].is_array())
        .count();
    assert_eq!(again, 1);
    assert!(ledger_lines(&e).is_empty(), "the ledger is emptied at open");
    e.run_ok(&["verify", "ws"]);
}

/// A reflect script that asks the model for a lesson, and fails in generation 2.
const ASKING_REFLECT: &str = r#"
fn reflect(ctx, archive, playbook) {
    let r = model_chat("a lesson?");
    if r.error != () { throw r.error }
    if ctx.generation == 2 { throw "no lesson this time" }
    [#{op: "add", id: "lesson-" + ctx.generation_id, text: r.content}]
}
"#;

#[test]
fn what_reflect_spends_on_the_model_is_archived_whether_it_succeeds_or_fails() {
    let (url, _) = chat_server("0.9");
    let e = Exp::new(&Spec {
        generations: 2,
        budget_usd: 1.0,
        model: Some(model_block(&url)),
        extra_operators: "  reflect: {operator: script, timeout_s: 60, config: {source: operators/reflect/ask.rhai}}\n".into(),
        ..Spec::default()
    });
    std::fs::create_dir_all(e.root().join("operators/reflect")).unwrap();
    std::fs::write(e.root().join("operators/reflect/ask.rhai"), ASKING_REFLECT).unwrap();
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    let events = e.events();
    let charged = |x: &Value| {
        let calls = x["body"]["model_calls"].as_array().map_or(0, Vec::len);
        (x["body"]["cost_usd"].as_f64().unwrap_or(0.0), calls)
    };
    // Generation 1's reflect succeeded: its playbook event carries the call.
    let playbook = events
        .iter()
        .find(|x| x["type"] == "playbook" && x["genid"] == "1")
        .expect("gen 1's playbook");
    let (usd, calls) = charged(playbook);
    assert!((usd - 0.0015).abs() < 1e-12 && calls == 1, "{playbook:#}");
    // Generation 2's failed: a repair note carries it.
    let note = events
        .iter()
        .find(|x| x["type"] == "repair" && x["genid"] == "2")
        .expect("gen 2's reflect spend");
    assert_eq!(note["body"]["stage"], "reflect", "{note:#}");
    let (usd, calls) = charged(note);
    assert!((usd - 0.0015).abs() < 1e-12 && calls == 1, "{note:#}");
    let spent = || {
        e.json(&["status", "ws", "--json"])["spent_usd"]
            .as_f64()
            .unwrap()
    };
    assert!((spent() - 0.003).abs() < 1e-12, "{}", spent());
    // The next open finds both calls billed: nothing is charged again.
    e.run_ok(&["run", "ws", "--quiet"]);
    assert!((spent() - 0.003).abs() < 1e-12, "{}", spent());
}
