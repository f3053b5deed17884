//! `evolve recipe check|schema` as a user runs them: every problem at once, operator
//! configurations normalized by the operator components themselves.

use std::path::Path;
use std::process::{Command, Output};

fn evolve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_evolve"))
        .args(args)
        .env(
            "EVOLVE_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("evolve-cache"),
        )
        .output()
        .expect("the evolve binary runs")
}

fn recipe(mutate: &str, gate_config: &str, record: &str) -> String {
    format!(
        "experiment: {{name: demo, max_generations: 3}}
target: {{seed: params}}
surface: {{include: ['target/**']}}
operators:
  select: {{operator: greedy}}
  rollout: {{operator: noop}}
  mutate: {{operator: {mutate}, config: {{attack: ok}}}}
  gate: {{operator: hillclimb, config: {gate_config}}}
  record: {{operator: {record}}}
  novelty: {{operator: accept_all}}
evaluator: {{dataset: builtin}}
"
    )
}

#[test]
fn a_valid_recipe_is_normalized_by_its_operators() {
    let dir = tempfile::tempdir().unwrap();
    // A mutate component given by path, relative to the recipe's directory.
    let component = Path::new(evolve::builtin::TEST_COMPONENTS_DIR).join("tc_hostile_mutate.wasm");
    std::fs::copy(&component, dir.path().join("mutator.wasm")).unwrap();
    let path = dir.path().join("recipe.yaml");
    std::fs::write(&path, recipe("./mutator.wasm", "{}", "notes")).unwrap();
    let out = evolve(&["recipe", "check", path.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    // hillclimb's own default, filled in by the component.
    assert_eq!(
        v["recipe"]["operators"]["gate"]["config"],
        serde_json::json!({"strict": true})
    );
    assert_eq!(v["recipe"]["operators"]["novelty"]["timeout_s"], 600.0);
}

#[test]
fn operator_problems_are_reported_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recipe.yaml");
    std::fs::write(
        &path,
        recipe("missing.wasm", "{strict: sometimes, extra: 1}", "nope"),
    )
    .unwrap();
    let out = evolve(&["recipe", "check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let lines: Vec<&str> = err.lines().skip(1).collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert_eq!(lines[0], "- operators.gate.config.extra: unknown field");
    assert_eq!(
        lines[1],
        "- operators.gate.config.strict: must be a boolean"
    );
    assert!(
        lines[2].starts_with("- operators.mutate.operator: cannot read component"),
        "{err}"
    );
    assert_eq!(
        lines[3],
        "- operators.record.operator: unknown record operator `nope`; built-in: notes, rrsi_component, script"
    );
}

#[test]
fn schema_is_json_schema() {
    let out = evolve(&["recipe", "schema"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["type"], "object");
    assert!(
        v["properties"]["operators"]["properties"]["mutate"]["properties"]["timeout_s"].is_object()
    );
    let missing = evolve(&["recipe", "check", "/nonexistent/recipe.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
}

/// The disk quota of a binding: defaults filled in, bounds checked with the path.
#[test]
fn bindings_carry_a_disk_quota() {
    let dir = tempfile::tempdir().unwrap();
    let component = Path::new(evolve::builtin::TEST_COMPONENTS_DIR).join("tc_hostile_mutate.wasm");
    std::fs::copy(&component, dir.path().join("mutator.wasm")).unwrap();
    let path = dir.path().join("recipe.yaml");
    std::fs::write(&path, recipe("./mutator.wasm", "{}", "notes")).unwrap();
    let out = evolve(&["recipe", "check", path.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["recipe"]["operators"]["mutate"]["disk_mib"], 256);
    assert_eq!(v["recipe"]["operators"]["mutate"]["disk_files"], 10000);
    let text = recipe("./mutator.wasm", "{}", "notes").replace(
        "mutate: {operator: ./mutator.wasm,",
        "mutate: {operator: ./mutator.wasm, disk_mib: 0, disk_files: 0,",
    );
    std::fs::write(&path, text).unwrap();
    let out = evolve(&["recipe", "check", path.to_str().unwrap()]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("operators.mutate.disk_mib"), "{all}");
    assert!(all.contains("operators.mutate.disk_files"), "{all}");
}

/// Issue 22: an endpoint given in `EVOLVE_MODEL_ENDPOINT` (which may carry credentials)
/// must not reach gen/0's committed files.
#[test]
fn the_model_endpoint_from_the_environment_is_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("../recipes/gepa.yaml");
    let secret = "http://user:s3cret-token@model.example.invalid/v1";
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_evolve"))
            .args(args)
            .current_dir(dir.path())
            .env("EVOLVE_MODEL_ENDPOINT", secret)
            .env("EVOLVE_MODEL", "m")
            .env("EVOLVE_KEY_DIR", dir.path().join("keys"))
            .env(
                "EVOLVE_CACHE_DIR",
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("evolve-cache"),
            )
            .output()
            .unwrap()
    };
    let out = run(&["init", "ws", "--recipe", recipe.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["checkout", "0", "gen0", "-w", "ws"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut stack = vec![dir.path().join("gen0")];
    let mut files = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(text) = std::fs::read(&p) {
                files += 1;
                assert!(
                    !String::from_utf8_lossy(&text).contains("s3cret-token"),
                    "{} holds the endpoint",
                    p.display()
                );
            }
        }
    }
    assert!(files > 0);
}
