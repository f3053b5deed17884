//! The recipe's `evaluator.harbor` block and datasets named by their Harbor registry name,
//! through the real `evolve` binary: `recipe check` names the `harbor run` flag of every
//! bad field without quoting its value, `init` freezes the block (defaults resolved) and
//! the agent's model path into `evaluator/engine.json`, a run whose recipe no longer gives
//! the frozen settings is refused, `run --dry-run` shows them, and `init` fetches a
//! registry dataset with the real harbor CLI (offline here: a clear error; through a local
//! registry backed by a real git repository: the same task set as the directory).

use super::ws::{CANARY, Exp, Spec, ci};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A value that must never be echoed by a message.
const SECRET: &str = "sk-harbor-canary-91b3";

/// `Exp::new` on the harbor engine (`engine`), with `extra` added to `evaluator`.
fn experiment(engine: &str, extra: &str) -> Exp {
    let e = Exp::new(&Spec::default());
    let path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&path)
        .unwrap()
        .replacen("engine: local", &format!("engine: {engine}"), 1)
        .replacen(
            "n_concurrent: 1}",
            &format!("n_concurrent: 1, {extra}}}"),
            1,
        );
    assert!(recipe.contains(extra), "{recipe}");
    std::fs::write(&path, recipe).unwrap();
    e
}

/// `recipe check --json`'s violations as (path, message).
fn violations(e: &Exp) -> Vec<(String, String)> {
    let ran = e
        .evolve(&["recipe", "check", "recipe.yaml", "--json"])
        .run();
    assert!(!ran.stdout().contains(SECRET), "{}", ran.stdout());
    let out = ran.json();
    assert_eq!(out["valid"], false, "{out}");
    out["violations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["path"].as_str().unwrap().to_string(),
                v["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn message<'a>(found: &'a [(String, String)], path: &str) -> &'a str {
    found
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, m)| m.as_str())
        .unwrap_or_else(|| panic!("no violation at {path}: {found:?}"))
}

#[test]
fn every_bad_field_is_a_violation_naming_its_flag_and_never_its_value() {
    let block = format!(
        "harbor: {{environment: \"dock er\", environment_kwargs: {{k: [\"{SECRET}\"]}}, n_concurrent: 0, \
         max_retries: 99, timeout_multiplier: 0, agent_setup_timeout_multiplier: -1, \
         environment_build_timeout_multiplier: \"{SECRET}\", model: \" \", \
         agent_kwargs: {{\"bad key\": \"{SECRET}\"}}, extra_args: [\"--agent={SECRET}\"], colour: {SECRET}}}"
    );
    let e = experiment("harbor", &block);
    let found = violations(&e);
    for (field, flag) in [
        ("environment", "-e/--env"),
        ("environment_kwargs", "--ek/--environment-kwarg"),
        ("n_concurrent", "-n/--n-concurrent"),
        ("max_retries", "-r/--max-retries"),
        ("timeout_multiplier", "--timeout-multiplier"),
        (
            "agent_setup_timeout_multiplier",
            "--agent-setup-timeout-multiplier",
        ),
        (
            "environment_build_timeout_multiplier",
            "--environment-build-timeout-multiplier",
        ),
        ("model", "-m/--model"),
        ("agent_kwargs", "--ak/--agent-kwarg"),
        ("extra_args", "verbatim"),
    ] {
        let m = message(&found, &format!("evaluator.harbor.{field}"));
        assert!(m.contains(flag), "{field}: {m}");
        assert!(!m.contains(SECRET), "{field}: {m}");
    }
    assert!(
        message(&found, "evaluator.harbor.extra_args").contains("--agent"),
        "{found:?}"
    );
    let unknown = message(&found, "evaluator.harbor.colour");
    assert!(
        unknown.contains("unknown key") && unknown.contains("environment, environment_kwargs"),
        "{unknown}"
    );
    // The text form says the same, and quotes no value either.
    let ran = e.evolve(&["recipe", "check", "recipe.yaml"]).code(1);
    assert!(
        ran.stderr().contains("evaluator.harbor.n_concurrent"),
        "{}",
        ran.stderr()
    );
    assert!(!ran.stderr().contains(SECRET), "{}", ran.stderr());
}

#[test]
fn the_block_is_refused_unless_the_engine_is_harbor() {
    let e = experiment("docker", "harbor: {n_concurrent: 2}");
    let found = violations(&e);
    let m = message(&found, "evaluator.harbor");
    assert!(m.contains("evaluator.engine: harbor"), "{m}");
    // The engine left at its default (local) is refused the same way.
    let e = Exp::new(&Spec::default());
    let path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&path).unwrap().replacen(
        "engine: local, ",
        "harbor: {environment: docker}, ",
        1,
    );
    std::fs::write(&path, recipe).unwrap();
    assert!(message(&violations(&e), "evaluator.harbor").contains("harbor engine only"));
}

#[test]
fn a_cloud_environment_with_a_gateway_model_and_no_agent_env_is_refused() {
    let model = "model: {endpoint: \"http://127.0.0.1:9/v1\", model: m, api_key_env: EVOLVE_TEST_HARBOR_KEY}";
    let e = experiment(
        "harbor",
        &format!("harbor: {{environment: daytona}}, {model}"),
    );
    let found = violations(&e);
    let m = message(&found, "evaluator.harbor.environment");
    assert!(
        m.contains("evaluator.agent_env") && m.contains("gateway"),
        "{m}"
    );
    // Refused by init too, before anything is made.
    let ran = e.evolve(&["init", "ws", "--recipe", "recipe.yaml"]).run();
    assert_ne!(ran.output.status.code(), Some(0));
    assert!(
        ran.stderr().contains("evaluator.agent_env"),
        "{}",
        ran.stderr()
    );
    assert!(!e.ws.join(".git").exists());
}

fn engine_json(e: &Exp) -> Value {
    serde_json::from_str(&e.gen0_file("evaluator/engine.json")).unwrap()
}

#[test]
fn the_block_is_frozen_with_its_defaults_and_a_changed_one_is_refused() {
    let e = experiment(
        "harbor",
        &format!(
            "max_retries: 2, agent_env: [EVOLVE_TEST_HARBOR_KEY_X], harbor: {{environment: modal, \
             timeout_multiplier: 1.5, agent_kwargs: {{temperature: 0.5, token: \"{SECRET}\", on: true}}, \
             environment_kwargs: {{region: eu}}}}"
        )
        .replace("EVOLVE_TEST_HARBOR_KEY_X", "HARBOR_TEST_KEY"),
    );
    e.init();
    let engine = engine_json(&e);
    let h = &engine["harbor"];
    assert_eq!(h["model_path"], "agent_env", "{engine}");
    let o = &h["options"];
    assert_eq!(o["environment"], "modal");
    // The protocol's keys are the defaults of the block's.
    assert_eq!(o["max_retries"], 2);
    assert_eq!(o["n_concurrent"], 1);
    assert_eq!(o["timeout_multiplier"], 1.5);
    assert_eq!(o["agent_kwargs"]["temperature"], "0.5");
    assert_eq!(o["agent_kwargs"]["on"], "true");
    assert_eq!(o["environment_kwargs"]["region"], "eu");

    // The dry run shows the settings and the model path, a kwarg by its key only.
    let dry = e.evolve(&["run", "ws", "--dry-run"]).ok();
    let said = dry.stdout();
    assert!(said.contains("model path: agent_env"), "{said}");
    assert!(said.contains("environment (-e/--env): modal"), "{said}");
    assert!(
        said.contains("agent_kwargs (--ak/--agent-kwarg): keys on, temperature, token"),
        "{said}"
    );
    assert!(!said.contains(SECRET), "{said}");
    let dry = e.evolve(&["run", "ws", "--dry-run", "--json"]).run().json();
    assert_eq!(dry["harbor"]["model_path"], "agent_env", "{dry}");
    assert_eq!(dry["harbor"]["options"]["timeout_multiplier"], 1.5, "{dry}");
    assert!(!dry.to_string().contains(SECRET), "{dry}");

    // gen/0 rewritten so that its recipe's block says otherwise than engine.json: the
    // run is refused, naming the field, before the engine is looked for.
    rewrite_gen0_recipe(&e.ws, "timeout_multiplier: 1.5", "timeout_multiplier: 3");
    let ran = e
        .evolve(&["run", "ws"])
        .env("HARBOR_TEST_KEY", "x")
        .env("EVOLVE_HARBOR_BIN", "/nonexistent/harbor")
        .run();
    assert_ne!(ran.output.status.code(), Some(0));
    let err = ran.stderr();
    assert!(
        err.contains("differ from the ones frozen")
            && err.contains("evaluator.harbor.timeout_multiplier"),
        "{}",
        ran.report("a refusal naming the changed field")
    );
}

#[test]
fn a_local_docker_environment_with_a_model_is_the_gateway_path() {
    let model = "model: {endpoint: \"http://127.0.0.1:9/v1\", model: m, api_key_env: EVOLVE_TEST_HARBOR_KEY}";
    let e = experiment("harbor", model);
    e.init();
    let h = &engine_json(&e)["harbor"];
    assert_eq!(h["model_path"], "gateway", "{h}");
    assert_eq!(h["options"]["environment"], "docker", "{h}");
    // No model at all: none.
    let e = experiment("harbor", "harbor: {n_concurrent: 3}");
    e.init();
    let h = &engine_json(&e)["harbor"];
    assert_eq!(h["model_path"], "none", "{h}");
    assert_eq!(h["options"]["n_concurrent"], 3, "{h}");
    // Another engine's engine file has no harbor entry (its fingerprint is unchanged).
    let e = experiment("local", "repetitions: 1");
    e.init();
    assert!(engine_json(&e).get("harbor").is_none());
}

/// Replace `from` by `to` in gen/0's `recipe.yaml` with real git plumbing, and move the
/// `gen/0` tag to the new commit (a tampered workspace, as a hand edit would make one).
fn rewrite_gen0_recipe(ws: &Path, from: &str, to: &str) {
    let git = |args: &[&str], input: Option<&str>| -> String {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(ws).args(args);
        cmd.env("GIT_INDEX_FILE", ws.join(".git/evolve-test-index"));
        cmd.env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t");
        cmd.env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t");
        let out = if let Some(text) = input {
            use std::io::Write;
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        } else {
            cmd.output().unwrap()
        };
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let recipe = git(&["show", "gen/0:recipe.yaml"], None);
    assert!(recipe.contains(from), "{recipe}");
    let blob = git(
        &["hash-object", "-w", "--stdin"],
        Some(&(recipe.replace(from, to) + "\n")),
    );
    git(&["read-tree", "gen/0"], None);
    git(
        &[
            "update-index",
            "--cacheinfo",
            &format!("100644,{blob},recipe.yaml"),
        ],
        None,
    );
    let tree = git(&["write-tree"], None);
    let commit = git(&["commit-tree", &tree, "-m", "tampered"], None);
    git(&["tag", "-f", "gen/0", &commit], None);
}

/// The real harbor CLI, or `None` (a skip, which CI refuses).
fn harbor() -> Option<PathBuf> {
    let bin = evolve::recipe::harbor::harbor_bin().filter(|b| b.is_file());
    assert!(
        bin.is_some() || !ci(),
        "the harbor CLI is required under CI (run .ci/run's set-up)"
    );
    bin
}

#[test]
fn a_registry_dataset_offline_fails_at_init_naming_it_and_how_to_use_a_local_copy() {
    let Some(_) = harbor() else { return };
    let e = experiment("harbor", "repetitions: 1");
    let path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&path).unwrap().replacen(
        "dataset: tasks",
        "dataset: terminal-bench@2.0",
        1,
    );
    std::fs::write(&path, recipe).unwrap();
    // The check does not download; it says init will.
    let check = e.evolve(&["recipe", "check", "recipe.yaml"]).ok();
    assert!(
        check
            .stdout()
            .contains("`evolve init` fetches it with `harbor download`"),
        "{}",
        check.stdout()
    );
    let json = e
        .evolve(&["recipe", "check", "recipe.yaml", "--json"])
        .ok()
        .json();
    assert_eq!(json["dataset_fetched_at_init"], "terminal-bench@2.0");
    // This machine has no network: harbor's own error, and the way out.
    let ran = e
        .evolve(&["init", "ws", "--recipe", "recipe.yaml"])
        .env_remove("EVOLVE_HARBOR_REGISTRY")
        .run();
    assert_ne!(ran.output.status.code(), Some(0));
    let err = ran.stderr();
    for says in [
        "evaluator.dataset",
        "cannot fetch the Harbor dataset `terminal-bench@2.0`",
        "harbor download terminal-bench@2.0 --export -o DIR",
        "evaluator.dataset: DIR",
    ] {
        assert!(err.contains(says), "{}", ran.report(says));
    }
    // Harbor's last line is quoted (whatever the resolver said: not found, or no network).
    let quoted = err
        .split("(is this machine offline?): ")
        .nth(1)
        .unwrap_or_default();
    assert!(quoted.len() > 5, "{err}");
    assert!(!e.ws.join(".git").exists());
}

/// A copy of the experiment's task set laid out as `harbor download --export` writes it:
/// `<dir>/<dataset>/<task>/`.
fn export_layout(e: &Exp, dir: &Path, dataset: &str) {
    copy_dir(&e.root().join("tasks"), &dir.join(dataset));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

fn task_set(e: &Exp) -> Value {
    serde_json::from_str(&e.gen0_file("evaluator/task-set.json")).unwrap()
}

#[test]
fn an_exported_layout_given_as_a_directory_is_the_same_task_set() {
    let plain = experiment("harbor", "repetitions: 1");
    plain.init();
    let e = experiment("harbor", "repetitions: 1");
    export_layout(&e, &e.root().join("exported"), "mini");
    let path = e.root().join("recipe.yaml");
    let recipe =
        std::fs::read_to_string(&path)
            .unwrap()
            .replacen("dataset: tasks", "dataset: exported", 1);
    std::fs::write(&path, recipe).unwrap();
    e.init();
    let (a, b) = (task_set(&plain), task_set(&e));
    assert_eq!(a["task_digests"], b["task_digests"]);
    assert_eq!(a["task_set_digest"], b["task_set_digest"]);
    assert!(
        !e.gen0_file(&format!("evaluator/tasks/{CANARY}-0/task.toml"))
            .is_empty()
    );
}

#[test]
fn a_registry_dataset_is_fetched_at_init_through_a_local_registry_backed_by_git() {
    let Some(_) = harbor() else { return };
    let plain = experiment("harbor", "repetitions: 1");
    plain.init();
    let e = experiment("harbor", "repetitions: 1");
    // A real git repository holding the tasks, and a registry.json naming each by a
    // file:// git_url at its commit: `harbor download` clones them as it would GitHub's.
    let repo = e.root().join("repo");
    copy_dir(&e.root().join("tasks"), &repo.join("tasks"));
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "tasks"]);
    let commit = git(&["rev-parse", "HEAD"]);
    let tasks: Vec<Value> = (0..Spec::default().tasks)
        .map(|i| {
            serde_json::json!({
                "name": format!("{CANARY}-{i}"),
                "git_url": format!("file://{}", repo.display()),
                "git_commit_id": commit,
                "path": format!("tasks/{CANARY}-{i}"),
            })
        })
        .collect();
    let registry = e.root().join("registry.json");
    let entry = serde_json::json!([{
        "name": "mini", "version": "1.0", "description": "test tasks",
        "tasks": tasks, "metrics": [],
    }]);
    std::fs::write(&registry, entry.to_string()).unwrap();
    let path = e.root().join("recipe.yaml");
    let recipe =
        std::fs::read_to_string(&path)
            .unwrap()
            .replacen("dataset: tasks", "dataset: mini@1.0", 1);
    std::fs::write(&path, recipe).unwrap();
    e.evolve(&["init", "ws", "--recipe", "recipe.yaml"])
        .env("EVOLVE_HARBOR_REGISTRY", &registry)
        .ok();
    // Digested exactly like the directory it came from.
    let (a, b) = (task_set(&plain), task_set(&e));
    assert_eq!(a["task_digests"], b["task_digests"], "{b}");
    assert_eq!(a["task_set_digest"], b["task_set_digest"]);
    let test_sh = e.gen0_file(&format!("evaluator/tasks/{CANARY}-1/tests/test.sh"));
    assert!(test_sh.contains("reward.txt"), "{test_sh}");
}
