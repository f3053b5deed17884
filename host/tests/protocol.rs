//! The evaluation protocol's recipe keys, end to end through `init`, `run` and `verify`:
//! which split candidates are evaluated on, how many of its tasks a round runs and how
//! they are drawn (recorded as `members`), and the host variables passed to the agent and
//! the verifier by name (their values reach the trials and are stored nowhere).

use super::ws::{Exp, Spec, files_under, text, write_exec};
use serde_json::Value;
use std::collections::BTreeSet;

/// `Exp::new(spec)` with `extra` added to the recipe's `evaluator` block.
fn experiment(spec: &Spec, extra: &str) -> Exp {
    let e = Exp::new(spec);
    let path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&path).unwrap();
    let recipe = recipe.replacen(
        "n_concurrent: 1}",
        &format!("n_concurrent: 1, {extra}}}"),
        1,
    );
    std::fs::write(&path, recipe).unwrap();
    e
}

fn evaluations(e: &Exp, purpose: &str) -> Vec<Value> {
    e.events()
        .into_iter()
        .filter(|ev| ev["type"] == "evaluation" && ev["body"]["purpose"] == purpose)
        .collect()
}

fn scored_tasks(ev: &Value) -> BTreeSet<String> {
    ev["body"]["task_vector"]["tasks"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

fn members(ev: &Value) -> BTreeSet<String> {
    ev["body"]["members"]
        .as_array()
        .unwrap_or_else(|| panic!("no members: {ev}"))
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_static_sample_is_frozen_at_init_and_every_candidate_runs_exactly_it() {
    let spec = Spec {
        tasks: 8,
        generations: 2,
        ..Spec::default()
    };
    let e = experiment(&spec, "tasks_per_round: 2");
    e.init();
    let engine: Value = serde_json::from_str(&e.gen0_file("evaluator/engine.json")).unwrap();
    let frozen: BTreeSet<String> = engine["task_sample"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    assert_eq!(frozen.len(), 2, "{engine}");
    let dry = e.json(&["run", "ws", "--dry-run", "--json"]);
    assert_eq!(dry["tasks_per_evaluation"], 2, "{dry}");
    e.run_ok(&["run", "ws"]);
    let evals: Vec<Value> = ["genesis", "candidate"]
        .iter()
        .flat_map(|p| evaluations(&e, p))
        .collect();
    assert_eq!(evals.len(), 3, "gen 0, 1 and 2");
    for ev in &evals {
        assert_eq!(members(ev), frozen, "{ev}");
        assert_eq!(scored_tasks(ev), frozen, "{ev}");
        assert_eq!(ev["body"]["trials"], 2);
    }
    // One fixed identity: every evaluation's task_set_hash is the same.
    let hashes: BTreeSet<&str> = evals
        .iter()
        .map(|ev| ev["body"]["task_set_hash"].as_str().unwrap())
        .collect();
    assert_eq!(hashes.len(), 1);
    // The sealed anchors still score the whole sealed split.
    for anchor in evaluations(&e, "anchor") {
        assert!(anchor["body"].get("members").is_none(), "{anchor}");
    }
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn a_generation_shuffle_draws_a_seeded_sample_per_generation_that_verify_recomputes() {
    let spec = Spec {
        tasks: 12,
        generations: 3,
        ..Spec::default()
    };
    let e = experiment(
        &spec,
        "tasks_per_round: 2, task_sampling: generation_shuffle",
    );
    e.init();
    e.run_ok(&["run", "ws"]);
    let evals: Vec<Value> = ["genesis", "candidate"]
        .iter()
        .flat_map(|p| evaluations(&e, p))
        .collect();
    assert_eq!(evals.len(), 4);
    let mut samples = BTreeSet::new();
    for ev in &evals {
        let m = members(ev);
        assert_eq!(m.len(), 2, "{ev}");
        assert_eq!(scored_tasks(ev), m, "{ev}");
        samples.insert(m.into_iter().collect::<Vec<_>>());
    }
    assert!(
        samples.len() > 1,
        "the sample changes between generations: {samples:?}"
    );
    e.run_ok(&["verify", "ws"]);
    // The same recipe gives the same samples: they are seeded, not random.
    let again = experiment(
        &spec,
        "tasks_per_round: 2, task_sampling: generation_shuffle",
    );
    again.init();
    again.run_ok(&["run", "ws"]);
    let first: Vec<BTreeSet<String>> = evals.iter().map(members).collect();
    let second: Vec<BTreeSet<String>> = ["genesis", "candidate"]
        .iter()
        .flat_map(|p| evaluations(&again, p))
        .map(|ev| members(&ev))
        .collect();
    assert_eq!(first, second);
}

#[test]
fn the_train_split_can_be_the_evaluation_split_and_sealed_cannot() {
    let spec = Spec {
        tasks: 8,
        generations: 1,
        ..Spec::default()
    };
    let e = experiment(&spec, "evaluation_split: train");
    e.init();
    e.run_ok(&["run", "ws"]);
    let ws = evolve::workspace::Workspace::open(&e.ws).unwrap();
    let train: BTreeSet<String> = ws.task_set.split.train.iter().cloned().collect();
    for ev in evaluations(&e, "genesis")
        .iter()
        .chain(&evaluations(&e, "candidate"))
    {
        assert_eq!(scored_tasks(ev), train, "{ev}");
    }
    e.run_ok(&["verify", "ws"]);

    let sealed = experiment(&spec, "evaluation_split: sealed");
    let out = sealed.evolve(&["recipe", "check", "recipe.yaml"]).run();
    assert_ne!(out.output.status.code(), Some(0));
    assert!(
        out.stdout().contains("evaluator.evaluation_split")
            || out.stderr().contains("evaluator.evaluation_split"),
        "{}",
        text(&out.output)
    );
}

#[test]
fn passed_variables_reach_their_phase_by_name_and_are_stored_nowhere() {
    const AGENT_VALUE: &str = "agent-value-5c1f0e";
    const VERIFIER_VALUE: &str = "verifier-value-a93b27";
    let sha = |v: &str| {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(v.as_bytes());
        h.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let spec = Spec {
        generations: 1,
        ..Spec::default()
    };
    let e = experiment(
        &spec,
        "agent_env: [PASSED_TO_AGENT], verifier_env: [PASSED_TO_VERIFIER]",
    );
    // The agent answers its number only when it was given the variable (compared by
    // digest: the value itself is written nowhere, not even in the test's files), and
    // never sees the verifier's; the verifier likewise.
    write_exec(
        &e.root().join("target/agent.sh"),
        &format!(
            "#!/bin/sh\n[ \"$(printf %s \"$PASSED_TO_AGENT\" | sha256sum | cut -d' ' -f1)\" = {} ] || exit 7\n[ -z \"$PASSED_TO_VERIFIER\" ] || exit 8\ncat \"$EVOLVE_AGENT_DIR/value.txt\" > \"$EVOLVE_APP_DIR/answer.txt\"\n",
            sha(AGENT_VALUE)
        ),
    );
    for entry in std::fs::read_dir(e.root().join("tasks")).unwrap().flatten() {
        write_exec(
            &entry.path().join("tests/test.sh"),
            &format!(
                "#!/bin/sh\nif [ \"$(printf %s \"$PASSED_TO_VERIFIER\" | sha256sum | cut -d' ' -f1)\" = {} ] && [ -z \"$PASSED_TO_AGENT\" ]; then cat /app/answer.txt > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
                sha(VERIFIER_VALUE)
            ),
        );
    }
    e.init();
    // Unset, the run stops before anything is evaluated, naming the variable.
    let out = e.evolve(&["run", "ws"]).run();
    assert_ne!(out.output.status.code(), Some(0));
    assert!(out.stderr().contains("PASSED_TO_AGENT"), "{}", out.stderr());
    assert!(evaluations(&e, "genesis").is_empty());

    let run = e
        .evolve(&["run", "ws", "--json"])
        .env("PASSED_TO_AGENT", AGENT_VALUE)
        .env("PASSED_TO_VERIFIER", VERIFIER_VALUE)
        .ok();
    assert_eq!(run.json()["genesis_score"], 0.1, "{}", run.stdout());
    for path in files_under(e.root()) {
        let bytes = std::fs::read(&path).unwrap();
        for value in [AGENT_VALUE, VERIFIER_VALUE] {
            assert!(
                !bytes.windows(value.len()).any(|w| w == value.as_bytes()),
                "{value} is in {path:?}"
            );
        }
    }
    e.run_ok(&["verify", "ws"]);
}

#[test]
fn bad_protocol_keys_are_recipe_errors_naming_each_field() {
    let e = experiment(
        &Spec::default(),
        "max_retries: 11, agent_timeout_multiplier: 0, agent_env: [OPENAI_API_KEY, \"not a name\"], tasks_per_round: 99",
    );
    let out = e.evolve(&["recipe", "check", "recipe.yaml"]).run();
    assert_ne!(out.output.status.code(), Some(0));
    let said = format!("{}{}", out.stdout(), out.stderr());
    for field in [
        "evaluator.max_retries",
        "evaluator.agent_timeout_multiplier",
        "evaluator.agent_env",
        "evaluator.tasks_per_round",
    ] {
        assert!(said.contains(field), "{field}: {said}");
    }
    assert!(said.contains("OPENAI_API_KEY"), "{said}");
}
