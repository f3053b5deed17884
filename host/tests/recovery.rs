//! Kill -9 during each busy stage, recover, resume, and compare with an uninterrupted
//! run of the same recipe and seed, event for event (timestamps, durations, attempt
//! numbers and repair notes aside). No corrupted state is admitted at any point.

#[path = "support/ws.rs"]
mod ws;

use evolve::selftest::compare::{first_difference, history};
use serde_json::{Value, json};
use ws::{Exp, Spec, kill9, text, wait_for};

fn uninterrupted(spec: &Spec) -> Vec<Value> {
    let e = Exp::new(spec);
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    e.run_ok(&["verify", "ws"]);
    history(&e.events())
}

/// The same comparison `evolve selftest` makes (`evolve::selftest::compare`).
fn assert_same_history(resumed: &Exp, reference: &[Value]) {
    let got = history(&resumed.events());
    if let Some(difference) = first_difference(&got, reference) {
        panic!("{difference}\nresumed:\n{got:#?}\nreference:\n{reference:#?}");
    }
    resumed.run_ok(&["verify", "ws"]);
}

#[test]
fn killed_during_mutation_repair_then_resume_matches_an_uninterrupted_run() {
    let spec = Spec {
        mutate: json!({"action": "climb", "sleep_ms": 1500}),
        ..Spec::default()
    };
    let reference = uninterrupted(&spec);
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    wait_for(60, "mutate to start", || {
        e.ws.join("runs/gen-1/mutate/input.json").exists()
    });
    kill9(child);
    e.run_ok(&["verify", "ws"]);
    // The interrupted child worktree stops the next run with an instruction.
    let refused = e.evolve(&["run", "ws"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("evolve repair"),
        "{}",
        text(&refused)
    );
    let repaired = e.run_ok(&["repair", "ws"]);
    assert!(
        text(&repaired).contains("removed clean stale worktree gen-1"),
        "{}",
        text(&repaired)
    );
    e.run_ok(&["run", "ws", "--quiet"]);
    assert_same_history(&e, &reference);
}

#[test]
fn an_edited_interrupted_worktree_is_preserved_by_repair() {
    let spec = Spec {
        mutate: json!({"action": "climb", "sleep_ms": 1500}),
        generations: 1,
        ..Spec::default()
    };
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    wait_for(60, "mutate to start", || {
        e.ws.join("runs/gen-1/mutate/input.json").exists()
    });
    kill9(child);
    std::fs::write(e.ws.join("runs/worktrees/gen-1/target/value.txt"), "0.77\n").unwrap();
    let repaired = e.run_ok(&["repair", "ws"]);
    assert!(
        text(&repaired).contains("moved edited worktree gen-1"),
        "{}",
        text(&repaired)
    );
    let kept =
        std::fs::read_to_string(e.ws.join("runs/interrupted/gen-1/target/value.txt")).unwrap();
    assert_eq!(kept, "0.77\n");
    e.run_ok(&["run", "ws", "--quiet"]);
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn killed_during_evaluation_resume_reuses_completed_trials() {
    let spec = Spec {
        tasks: 8,
        verifier_sleep: 0.4,
        generations: 1,
        ..Spec::default()
    };
    let reference = uninterrupted(&spec);
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    let trials =
        e.ws.join("runs/evaluations/candidate/gen-1/attempt-1/out/trials");
    wait_for(120, "a completed candidate trial", || {
        std::fs::read_dir(&trials)
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| t.path().join("result.json").exists())
    });
    kill9(child);
    e.run_ok(&["verify", "ws"]);
    // The generation is committed and tagged but has no certified evaluation: the
    // next run evaluates it (no repair needed: no worktree is left).
    let log = e.log();
    assert_eq!(
        log.iter()
            .find(|r| r["genid"] == "1")
            .map(|r| r["status"].clone()),
        Some(json!("committed")),
        "{log:#?}"
    );
    e.run_ok(&["run", "ws", "--quiet"]);
    let repairs: Vec<Value> = e
        .events()
        .into_iter()
        .filter(|e| e["type"] == "repair" && e["genid"] == "1")
        .collect();
    assert_eq!(repairs.len(), 1, "one recorded repair of the reused trials");
    let reused = repairs[0]["body"]["trials"].as_array().unwrap();
    assert!(!reused.is_empty());
    assert!(reused.iter().all(|t| t["from_attempt"] == 1));
    let eval = e
        .events()
        .into_iter()
        .rfind(|e| {
            e["type"] == "evaluation" && e["genid"] == "1" && e["body"]["purpose"] == "candidate"
        })
        .unwrap();
    assert_eq!(eval["body"]["attempt"], 2);
    assert_eq!(eval["body"]["source_attempts"], json!([1]));
    assert_same_history(&e, &reference);
}

#[test]
fn killed_right_after_an_evaluation_event_resumes_at_gate() {
    let spec = Spec {
        gate: (
            ws::component("slow_gate").display().to_string(),
            json!({"sleep_ms": 1500}),
        ),
        generations: 1,
        ..Spec::default()
    };
    let reference = uninterrupted(&spec);
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    wait_for(60, "the gate to start", || {
        e.ws.join("runs/gen-1/gate/input.json").exists()
    });
    kill9(child);
    let types: Vec<Value> = e
        .events()
        .iter()
        .filter(|x| x["genid"] == "1")
        .map(|x| x["type"].clone())
        .collect();
    assert_eq!(types.last(), Some(&json!("evaluation")), "{types:?}");
    let log = e.log();
    let r = log.iter().find(|r| r["genid"] == "1").unwrap();
    assert_eq!(r["status"], "pending_gate");
    assert_eq!(
        r["eligible"], false,
        "a generation pending gate is never a parent"
    );
    e.run_ok(&["run", "ws", "--quiet"]);
    let evaluations = e
        .events()
        .iter()
        .filter(|x| {
            x["genid"] == "1" && x["type"] == "evaluation" && x["body"]["purpose"] == "candidate"
        })
        .count();
    assert_eq!(evaluations, 1, "the evaluation is not redone");
    assert_same_history(&e, &reference);
}

#[test]
fn a_second_run_is_refused_while_one_holds_the_lock() {
    let spec = Spec {
        mutate: json!({"action": "climb", "sleep_ms": 1500}),
        generations: 1,
        ..Spec::default()
    };
    let e = Exp::new(&spec);
    e.init();
    let child = e.spawn_run();
    wait_for(60, "mutate to start", || {
        e.ws.join("runs/gen-1/mutate/input.json").exists()
    });
    let second = e.evolve(&["run", "ws"]).output().unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", text(&second));
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
