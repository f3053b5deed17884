//! `evolve recipe check|schema` as a user runs them: every problem at once, operator
//! configurations normalized by the operator components themselves.

use super::cmd::evolve;
use std::path::Path;
use std::process::Output;

fn recipe(mutate: &str, gate_config: &str, record: &str) -> String {
    format!(
        "experiment: {{name: demo, max_generations: 3}}
target: {{seed: demo}}
surface: {{include: ['target/**']}}
operators:
  select: {{operator: greedy}}
  rollout: {{operator: noop}}
  mutate: {{operator: {mutate}, config: {{attack: ok}}}}
  gate: {{operator: hillclimb, config: {gate_config}}}
  record: {{operator: {record}}}
  novelty: {{operator: accept_all}}
evaluator: {{dataset: demo}}
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
    let out = evolve(["recipe", "check", path.to_str().unwrap(), "--json"]).run();
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
        serde_json::json!({"strict": false, "missing_score": "zero"})
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
    let out = evolve(["recipe", "check", path.to_str().unwrap()]).run();
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
    let out = evolve(["recipe", "schema"]).run();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["type"], "object");
    assert!(
        v["properties"]["operators"]["properties"]["mutate"]["properties"]["timeout_s"].is_object()
    );
    let missing = evolve(["recipe", "check", "/nonexistent/recipe.yaml"]).run();
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("/nonexistent/recipe.yaml cannot be read")
            && err.contains("is no built-in recipe")
            && err.contains("hint: built-in recipes: local_demo,"),
        "{err}"
    );
}

/// The disk quota of a binding: defaults filled in, bounds checked with the path.
#[test]
fn bindings_carry_a_disk_quota() {
    let dir = tempfile::tempdir().unwrap();
    let component = Path::new(evolve::builtin::TEST_COMPONENTS_DIR).join("tc_hostile_mutate.wasm");
    std::fs::copy(&component, dir.path().join("mutator.wasm")).unwrap();
    let path = dir.path().join("recipe.yaml");
    std::fs::write(&path, recipe("./mutator.wasm", "{}", "notes")).unwrap();
    let out = evolve(["recipe", "check", path.to_str().unwrap(), "--json"]).run();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["recipe"]["operators"]["mutate"]["disk_mib"], 256);
    assert_eq!(v["recipe"]["operators"]["mutate"]["disk_files"], 10000);
    let text = recipe("./mutator.wasm", "{}", "notes").replace(
        "mutate: {operator: ./mutator.wasm,",
        "mutate: {operator: ./mutator.wasm, disk_mib: 0, disk_files: 0,",
    );
    std::fs::write(&path, text).unwrap();
    let out = evolve(["recipe", "check", path.to_str().unwrap()]).run();
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
        evolve(args)
            .cwd(dir.path())
            .env("EVOLVE_MODEL_ENDPOINT", secret)
            .env("EVOLVE_MODEL", "m")
            .keys(dir.path().join("keys"))
            .ok()
    };
    run(&["init", "ws", "--recipe", recipe.to_str().unwrap()]);
    run(&["checkout", "0", "gen0", "-w", "ws"]);
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

/// `evolve` run in `dir` with a scratch key directory and the given environment.
fn evolve_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    env.iter()
        .fold(evolve(args).cwd(dir).keys(dir.join("keys")), |c, (k, v)| {
            c.env(k, v)
        })
        .run()
        .output
}

/// The problems `recipe check --json` reports, as `path: message`; asserts exit 1.
fn violations(out: &Output) -> Vec<String> {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false);
    v["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            format!(
                "{}: {}",
                v["path"].as_str().unwrap(),
                v["message"].as_str().unwrap()
            )
        })
        .collect()
}

/// A target directory `agent/` (params.json, prompts/a.md) and a task set `tasks/` of
/// three tasks without environment/ (Harbor tasks without a Dockerfile are common).
fn user_files(dir: &Path) {
    std::fs::create_dir_all(dir.join("agent/prompts")).unwrap();
    std::fs::write(dir.join("agent/params.json"), "{}\n").unwrap();
    std::fs::write(dir.join("agent/prompts/a.md"), "hi\n").unwrap();
    for t in ["t1", "t2", "t3"] {
        let task = dir.join("tasks").join(t);
        std::fs::create_dir_all(task.join("tests")).unwrap();
        std::fs::write(task.join("task.toml"), "[verifier]\ntimeout_sec = 10\n").unwrap();
        std::fs::write(task.join("instruction.md"), "Do it.\n").unwrap();
        std::fs::write(
            task.join("tests/test.sh"),
            "#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n",
        )
        .unwrap();
    }
    // An empty environment/ counts as none (a workspace's git tree keeps no empty directory).
    std::fs::create_dir_all(dir.join("tasks/t1/environment")).unwrap();
}

/// A recipe over `agent/` and `tasks/` with `surface.include` set to `include` (YAML),
/// and `extra` appended to the `experiment` and `evaluator` mappings.
fn user_recipe(include: &str, experiment: &str, evaluator: &str) -> String {
    format!(
        "experiment: {{name: mine{experiment}}}
target: {{path: ./agent}}
surface: {{include: {include}}}
operators:
  select: {{operator: greedy}}
  rollout: {{operator: noop}}
  mutate: {{operator: perturb, config: {{files: [{{path: target/params.json, fields: [a]}}]}}}}
  gate: {{operator: hillclimb}}
  record: {{operator: notes}}
evaluator: {{dataset: ./tasks, unconfined_trials: true, splits: {{train: 0, gate: 1, sealed: 0}}{evaluator}}}
"
    )
}

/// Issue 23: `surface.include: ["evaluator/**"]` was accepted, then every generation was
/// rejected. An include that names a framework-owned path, or that matches nothing a
/// candidate may change, is a recipe error of `recipe check` and of `init`.
#[test]
fn an_include_that_can_allow_no_change_is_a_recipe_error() {
    let dir = tempfile::tempdir().unwrap();
    user_files(dir.path());
    let include = "['evaluator/**', 'target/**', 'targte/**', 'target/skills/**', '.evolve/x', recipe.yaml, target, 'operators/**', './target/x']";
    std::fs::write(dir.path().join("recipe.yaml"), user_recipe(include, "", "")).unwrap();
    let out = evolve_in(
        dir.path(),
        &["recipe", "check", "recipe.yaml", "--json"],
        &[],
    );
    let found = violations(&out);
    let framework = "names framework-owned paths (evaluator/**, keys/**, recipe.yaml, .gitignore, .evolve/**, runs/**, operators/manifest.json, .git/**), which no candidate may change; a candidate changes target/ (and operators/)";
    let nothing = "matches no file of the target (or of operators/) and no path inside one of its directories, so it allows no change; patterns are relative to the workspace root (target/** is the whole target)";
    assert_eq!(
        found,
        [
            format!("surface.include[0]: `evaluator/**` {framework}"),
            format!("surface.include[2]: `targte/**` {nothing}"),
            format!("surface.include[4]: `.evolve/x` {framework}"),
            format!("surface.include[5]: `recipe.yaml` {framework}"),
            format!("surface.include[6]: `target` {nothing}"),
            "surface.include[8]: `./target/x` must be relative to the workspace root, without `.` or `..` (for example target/**)".to_string(),
        ]
    );
    // init refuses it the same way, creating nothing.
    let out = evolve_in(dir.path(), &["init", "ws", "--recipe", "recipe.yaml"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("surface.include[0]: `evaluator/**` names framework-owned paths")
            && err.contains("surface.include[2]: `targte/**` matches no file"),
        "{err}"
    );
    assert!(!dir.path().join("ws").exists());
    // Alone, `target/skills/**` is fine: a candidate may create the first skill.
    std::fs::write(
        dir.path().join("recipe.yaml"),
        user_recipe("['target/skills/**']", "", ""),
    )
    .unwrap();
    let out = evolve_in(dir.path(), &["recipe", "check", "recipe.yaml"], &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 23: a wrong type in `experiment` hid the operators' config problems, and the
/// target and the task set were not looked at. Every problem is reported at once, by
/// `recipe check` and by `init` (before it creates anything), each missing path with its
/// key and the path it resolved to.
#[test]
fn every_problem_is_reported_at_once_paths_included() {
    let dir = tempfile::tempdir().unwrap();
    let text = user_recipe("['target/**']", ", children_per_gen: many", "")
        .replace(
            "gate: {operator: hillclimb}",
            "gate: {operator: hillclimb, config: {strict: sometimes}}",
        )
        .replace(
            "  record: {operator: notes}\n",
            "  record: {operator: notes}\n  frobnicate: {}\n",
        );
    std::fs::write(dir.path().join("recipe.yaml"), &text).unwrap();
    let out = evolve_in(
        dir.path(),
        &["recipe", "check", "recipe.yaml", "--json"],
        &[],
    );
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let expected = [
        format!(
            "evaluator.dataset: {} does not exist; it should be a directory of Harbor tasks (or a built-in task set: demo, terminal)",
            root.join("tasks").display()
        ),
        "experiment.children_per_gen: must be an integer".to_string(),
        "operators.frobnicate: unknown field".to_string(),
        "operators.gate.config.strict: must be a boolean".to_string(),
        format!(
            "target.path: {} does not exist; it should be a directory holding the target",
            root.join("agent").display()
        ),
    ];
    assert_eq!(violations(&out), expected);
    let out = evolve_in(dir.path(), &["init", "ws", "--recipe", "recipe.yaml"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // One problem per line, as a list, not one line with `\n` in it.
    let listed: Vec<&str> = err.lines().filter_map(|l| l.strip_prefix("  - ")).collect();
    for line in &expected {
        assert!(
            listed.contains(&line.as_str()),
            "{line} not listed in {err}"
        );
    }
    assert!(!err.contains("\\n"), "{err}");
    assert!(!dir.path().join("ws").exists());
    assert!(!dir.path().join("keys").exists());
}

/// Issue 23: `recipe check gepa` failed on the built-in name `init --recipe gepa` takes.
#[test]
fn recipe_check_takes_a_built_in_name_as_init_does() {
    let dir = tempfile::tempdir().unwrap();
    let model = [
        ("EVOLVE_MODEL_ENDPOINT", "http://127.0.0.1:9/v1"),
        ("EVOLVE_MODEL", "m"),
    ];
    for name in ["gepa", "local_demo"] {
        let out = evolve_in(dir.path(), &["recipe", "check", name], &model);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = evolve_in(dir.path(), &["recipe", "check", "gepx"], &model);
    assert_eq!(out.status.code(), Some(2));
    // A file of that name wins, as with init.
    std::fs::write(dir.path().join("gepa"), "experiment: [\n").unwrap();
    let out = evolve_in(dir.path(), &["recipe", "check", "gepa"], &model);
    assert_eq!(out.status.code(), Some(1));
}

/// Issue 23: YAML errors gave only a position. They show the line, a caret under the
/// column.
#[test]
fn a_yaml_error_shows_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("recipe.yaml"),
        "experiment: {name: demo}\ntarget: {seed: demo\nsurface: x\n",
    )
    .unwrap();
    let out = evolve_in(dir.path(), &["recipe", "check", "recipe.yaml"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert!(
        lines[1].starts_with("- is not valid YAML: ") && lines[1].contains("at line 3 column 8"),
        "{err}"
    );
    assert_eq!(lines[2], "  3 | surface: x");
    assert_eq!(lines[3], "    |        ^");
}

/// Issue 23: a task set without environment/ passed `tasks check` and `recipe check`,
/// then `init` refused it. The local engine needs none (its trials run in the
/// framework's jail, which never reads environment/); docker and harbor need
/// environment/Dockerfile or [environment].docker_image. All three commands agree.
#[test]
fn tasks_check_recipe_check_and_init_agree_on_environment() {
    let dir = tempfile::tempdir().unwrap();
    user_files(dir.path());
    let local = user_recipe("['target/**']", "", "");
    std::fs::write(dir.path().join("local.yaml"), &local).unwrap();
    std::fs::write(
        dir.path().join("docker.yaml"),
        user_recipe("['target/**']", "", ", engine: docker"),
    )
    .unwrap();
    let ok = |out: &Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(&evolve_in(dir.path(), &["tasks", "check", "tasks"], &[]));
    ok(&evolve_in(
        dir.path(),
        &["recipe", "check", "local.yaml"],
        &[],
    ));
    ok(&evolve_in(
        dir.path(),
        &["init", "ws", "--recipe", "local.yaml"],
        &[],
    ));

    let root = std::fs::canonicalize(dir.path()).unwrap();
    let message = |task: &str, at: &Path| {
        format!(
            "task {task}: the docker engine needs environment/Dockerfile or [environment].docker_image ({})",
            at.join(task).join("environment/Dockerfile").display()
        )
    };
    let out = evolve_in(
        dir.path(),
        &["tasks", "check", "tasks", "--engine", "docker"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for t in ["t1", "t2", "t3"] {
        assert!(err.contains(&message(t, Path::new("tasks"))), "{err}");
    }
    let expected: Vec<String> = ["t1", "t2", "t3"]
        .iter()
        .map(|t| format!("evaluator.dataset: {}", message(t, &root.join("tasks"))))
        .collect();
    let out = evolve_in(
        dir.path(),
        &["recipe", "check", "docker.yaml", "--json"],
        &[],
    );
    assert_eq!(violations(&out), expected);
    let out = evolve_in(dir.path(), &["init", "ws2", "--recipe", "docker.yaml"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for line in &expected {
        assert!(err.contains(line.as_str()), "{err}");
    }
    assert!(!dir.path().join("ws2").exists());
    // A Dockerfile (or a docker_image) is what the docker engine needs.
    for t in ["t1", "t2", "t3"] {
        std::fs::create_dir_all(dir.path().join("tasks").join(t).join("environment")).unwrap();
        std::fs::write(
            dir.path()
                .join("tasks")
                .join(t)
                .join("environment/Dockerfile"),
            "FROM ubuntu:24.04\n",
        )
        .unwrap();
    }
    ok(&evolve_in(
        dir.path(),
        &["tasks", "check", "tasks", "--engine", "docker"],
        &[],
    ));
    ok(&evolve_in(
        dir.path(),
        &["recipe", "check", "docker.yaml"],
        &[],
    ));
}
