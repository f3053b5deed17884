//! The agent under test reaches its model through the host's gateway, end to end: a
//! stdlib Python agent on the local engine, the recipe's `evaluator.model` pointing at a
//! scripted OpenAI-compatible upstream on 127.0.0.1 (the test double for a paid API).
//! The real key stays in the host's environment, every call is charged to the budget and
//! listed in the archive, each trial leaves its trajectory, and a spent budget stops the
//! run as budget-exhausted.

use super::upstream::{Reply, Upstream, answer};
use super::ws::{Exp, Spec, files_under, kill9, text};
use serde_json::Value;
use std::path::Path;

const KEY_VAR: &str = "EVOLVE_TEST_AGENT_UPSTREAM_KEY";
const KEY: &str = "sk-agent-canary-4f1d0c9e77b2";
/// $1000 per million tokens both ways: a scripted answer of (10, 5) tokens costs $0.015.
const PRICE: f64 = 1000.0;

const AGENT: &str = r#"#!/usr/bin/python3
import json, os, sys, urllib.error, urllib.request
logs = os.environ.get("EVOLVE_AGENT_LOGS_DIR", "/logs/agent")
app = os.environ.get("EVOLVE_APP_DIR", "/app")
with open(os.path.join(logs, "env.json"), "w") as f:
    json.dump(dict(os.environ), f)
value = open(os.path.join(os.environ["EVOLVE_AGENT_DIR"], "value.txt")).read().strip()
task = os.environ.get("EVOLVE_INSTRUCTION", "")
body = json.dumps({"messages": [{"role": "user", "content": task + " A number near " + value}]})
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=body.encode(), headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                                 "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=30) as r:
        content = json.load(r)["choices"][0]["message"]["content"]
except urllib.error.HTTPError as e:
    with open(os.path.join(logs, "refused.txt"), "w") as f:
        f.write("%d %s" % (e.code, e.read().decode()[:2000]))
    sys.exit(3)
with open(os.path.join(app, "answer.txt"), "w") as f:
    f.write(content.strip() + "\n")
"#;

/// An experiment whose agent is [`AGENT`] and whose `evaluator.model` is `upstream`.
pub(super) fn experiment(upstream: &Upstream, spec: &Spec) -> Exp {
    let e = Exp::new(spec);
    let target = e.root().join("target");
    std::fs::write(target.join("agent.toml"), "command = [\"./agent.py\"]\n").unwrap();
    std::fs::remove_file(target.join("agent.sh")).unwrap();
    let agent = target.join("agent.py");
    std::fs::write(&agent, AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let recipe_path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&recipe_path).unwrap();
    let model = format!(
        "n_concurrent: 1, model: {{endpoint: \"{}\", model: agent-m, api_key_env: {KEY_VAR}, max_tokens: 64, prices: {{input_per_mtok_usd: {PRICE}, output_per_mtok_usd: {PRICE}}}}}}}",
        upstream.endpoint()
    );
    let recipe = recipe.replacen("n_concurrent: 1}", &model, 1);
    assert!(recipe.contains("agent-m"), "{recipe}");
    std::fs::write(&recipe_path, recipe).unwrap();
    e
}

/// `evolve args` with the upstream's key in the environment.
pub(super) fn evolve(e: &Exp, args: &[&str]) -> super::cmd::Evolve {
    e.evolve(args).env(KEY_VAR, KEY)
}

fn named(root: &Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut all = files_under(root);
    all.retain(|p| p.file_name().is_some_and(|n| n == name));
    all
}

fn evaluations(e: &Exp) -> Vec<Value> {
    e.events()
        .into_iter()
        .filter(|ev| ev["type"] == "evaluation")
        .collect()
}

#[test]
fn the_agent_calls_its_model_through_the_gateway_metered_listed_and_without_the_key() {
    let upstream = Upstream::start((0..40).map(|_| answer("0.6", (10, 5))).collect());
    let e = experiment(
        &upstream,
        &Spec {
            budget_usd: 10.0,
            ..Spec::default()
        },
    );
    evolve(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let dry = evolve(&e, &["run", "ws", "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(dry["agent_model"]["models"][0], "agent-m", "{dry}");
    assert_eq!(dry["agent_model"]["max_tokens"], 64, "{dry}");

    assert_evolved_through_the_gateway(&e, &upstream);
}

/// Each evaluation lists one ledger id per trial and is charged $0.015 a trial; the number
/// of ids listed in all.
fn assert_each_evaluation_charged(evals: &[Value]) -> usize {
    let mut listed = 0;
    for ev in evals {
        let n = ev["body"]["trials"].as_u64().unwrap();
        let ids = ev["body"]["model_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(ids.len() as u64, n, "{ev}");
        listed += ids.len();
        let cost = ev["body"]["cost_usd"].as_f64().unwrap();
        assert!((cost - 0.015 * n as f64).abs() < 1e-9, "{ev}");
    }
    listed
}

/// A run of [`experiment`] to the end: every answer was the model's, each trial made one
/// call that reached the upstream with the host's key and the default model, every
/// evaluation lists and is charged its calls, each trial left its trajectory and exchange
/// log, the agent saw only the gateway and a trial token, and the key is written nowhere.
fn assert_evolved_through_the_gateway(e: &Exp, upstream: &Upstream) {
    let run = evolve(e, &["run", "ws", "--json"]).ok();
    let summary = run.json();
    assert_eq!(summary["status"], "complete", "{summary}");
    // Every answer was the model's: the agent wrote what the gateway relayed.
    assert_eq!(summary["genesis_score"], 0.6, "{summary}");

    // Each trial made one call; the upstream saw the host's real key and the default
    // model, never the trial's token.
    let seen = upstream.seen();
    let calls: Vec<_> = seen
        .iter()
        .filter(|s| s.path.ends_with("/chat/completions"))
        .collect();
    let evals = evaluations(e);
    let trials: u64 = evals
        .iter()
        .map(|ev| ev["body"]["trials"].as_u64().unwrap())
        .sum();
    assert_eq!(calls.len() as u64, trials, "one call per trial");
    for call in &calls {
        assert_eq!(
            call.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(call.body["model"], "agent-m");
    }

    // Charged: every evaluation lists its calls' ledger ids and costs $0.015 a trial.
    assert_eq!(assert_each_evaluation_charged(&evals), calls.len());
    let spent = summary["spent_usd"].as_f64().unwrap();
    assert!(
        (spent - 0.015 * calls.len() as f64).abs() < 1e-9,
        "{summary}"
    );
    let status = evolve(e, &["status", "ws", "--json"]).ok().json();
    assert!(status.to_string().contains(&format!("{spent}")), "{status}");

    // Each trial left its trajectory and the gateway's exchange log.
    let runs = e.ws.join("runs/evaluations");
    assert_eq!(named(&runs, "trajectory.json").len() as u64, trials);
    assert_eq!(named(&runs, "gateway.jsonl").len() as u64, trials);

    // The agent saw the gateway's address and a trial token, never the key or its
    // variable; and the key is written nowhere.
    let envs = named(&runs, "env.json");
    assert!(!envs.is_empty());
    for path in envs {
        let env: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert!(
            env["OPENAI_API_KEY"]
                .as_str()
                .unwrap()
                .starts_with("evolve-trial-")
        );
        assert!(
            env["OPENAI_BASE_URL"]
                .as_str()
                .unwrap()
                .starts_with("http://127.0.0.1:")
        );
        assert!(env.get(KEY_VAR).is_none(), "{path:?}");
    }
    for path in files_under(e.root()) {
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the key is in {path:?}"
        );
    }
    assert!(!run.stdout().contains(KEY) && !run.stderr().contains(KEY));
    e.evolve(&["verify", "ws"]).ok();
}

#[test]
fn a_budget_spent_mid_trial_is_a_typed_429_and_stops_the_run_as_budget_exhausted() {
    // Each call reserves its worst case (its prompt plus 64 completion tokens, about
    // $0.09) and is charged $0.015: genesis and the first child fit in $0.15, and the
    // second child's trials find less left than a call may cost.
    let upstream = Upstream::start((0..40).map(|_| answer("0.6", (10, 5))).collect());
    let e = experiment(
        &upstream,
        &Spec {
            budget_usd: 0.15,
            generations: 5,
            ..Spec::default()
        },
    );
    evolve(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let run = evolve(&e, &["run", "ws", "--json"]).run();
    assert_eq!(run.output.status.code(), Some(1), "{}", text(&run.output));
    let summary = run.json();
    assert_eq!(summary["status"], "budget_exhausted", "{summary}");
    assert!(
        summary["spent_usd"].as_f64().unwrap() <= 0.15 + 1e-9,
        "{summary}"
    );

    let runs = e.ws.join("runs/evaluations");
    let refused = named(&runs, "refused.txt");
    assert!(!refused.is_empty(), "an agent was refused");
    for path in &refused {
        let said = std::fs::read_to_string(path).unwrap();
        assert!(said.starts_with("429 "), "{said}");
        assert!(said.contains("budget"), "{said}");
    }
    let exhausted = named(&runs, "result.json").into_iter().any(|p| {
        let r: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        r["error"]["kind"] == "budget_exhausted"
    });
    assert!(exhausted, "a trial is classified budget_exhausted");
    // Nothing after the generation that ran out was started.
    let log = e.log();
    assert!(
        log.iter().all(|r| r["genid"] != "4" && r["genid"] != "5"),
        "{log:#?}"
    );
    e.evolve(&["verify", "ws"]).ok();
}

#[test]
fn a_run_killed_while_its_agent_waits_on_the_model_charges_that_call_once_at_its_worst_case() {
    let mut script = vec![Reply::Gated(Box::new(answer("0.6", (10, 5))))];
    script.extend((0..40).map(|_| answer("0.6", (10, 5))));
    let upstream = Upstream::start(script);
    let e = experiment(
        &upstream,
        &Spec {
            budget_usd: 10.0,
            generations: 1,
            ..Spec::default()
        },
    );
    evolve(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let child = evolve(&e, &["run", "ws"])
        .command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The probe, then genesis's first trial's call, held by the upstream.
    upstream.wait_for(2);
    kill9(child);
    upstream.open_gate();

    let run = evolve(&e, &["run", "ws", "--json"]).ok();
    assert_eq!(run.json()["status"], "complete", "{}", run.stdout());
    let events = e.events();
    let repairs: Vec<&Value> = events
        .iter()
        .filter(|ev| ev["type"] == "repair" && ev["body"]["model_calls"].is_array())
        .collect();
    assert_eq!(repairs.len(), 1, "{repairs:#?}");
    let repair = &repairs[0]["body"];
    assert_eq!(
        repairs[0]["genid"], "0",
        "charged to the generation it was made for"
    );
    assert_eq!(repair["model_calls"].as_array().unwrap().len(), 1);
    assert_eq!(
        (repair["answered"].as_u64(), repair["in_flight"].as_u64()),
        (Some(0), Some(1))
    );
    let worst = repair["cost_usd"].as_f64().unwrap();
    assert!(
        worst > 0.015,
        "the worst case, not the answer's price: {repair}"
    );
    // Listed once: no evaluation lists the killed call again.
    let killed = &repair["model_calls"][0];
    for ev in evaluations(&e) {
        let ids = ev["body"]["model_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(!ids.contains(killed), "{ev}");
    }
    let spent: f64 = evaluations(&e)
        .iter()
        .map(|ev| ev["body"]["cost_usd"].as_f64().unwrap())
        .sum::<f64>()
        + worst;
    let summary = run.json();
    assert!(
        (summary["spent_usd"].as_f64().unwrap() - spent).abs() < 1e-9,
        "{summary}"
    );
    e.evolve(&["verify", "ws"]).ok();
}

#[test]
fn train_trajectories_reach_rollout_and_mutate_bounded_and_no_gate_or_sealed_one_does() {
    let upstream = Upstream::start((0..40).map(|_| answer("0.6", (10, 5))).collect());
    let e = experiment(
        &upstream,
        &Spec {
            budget_usd: 10.0,
            generations: 1,
            ..Spec::default()
        },
    );
    let recipe_path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&recipe_path).unwrap().replacen(
        "rollout: {operator: noop}",
        "rollout: {operator: train}",
        1,
    );
    std::fs::write(&recipe_path, recipe).unwrap();
    // Every task's instruction carries a canary naming it; the agent sends it to its model,
    // so each trial's trajectory holds its task's canary.
    // (The task's name reversed: redaction of private task names cannot hide it.)
    let canary = |task: &str| format!("instr-{}-7d3e", task.chars().rev().collect::<String>());
    for entry in std::fs::read_dir(e.root().join("tasks")).unwrap().flatten() {
        let task = entry.file_name().to_string_lossy().to_string();
        let instruction = entry.path().join("instruction.md");
        let text = std::fs::read_to_string(&instruction).unwrap();
        std::fs::write(&instruction, format!("{text}Note: {}\n", canary(&task))).unwrap();
    }
    evolve(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    evolve(&e, &["run", "ws"]).ok();

    let ws = evolve::workspace::Workspace::open(&e.ws).unwrap();
    let split = &ws.task_set.split;
    let gen1 = e.ws.join("runs/gen-1");
    let kept = files_under(&gen1);
    let trajectories: Vec<&std::path::PathBuf> = kept
        .iter()
        .filter(|p| p.components().any(|c| c.as_os_str() == "trajectories"))
        .collect();
    // rollout's /scratch copy, the host-only copy and mutate's feedback bundle.
    let under = |part: &str| {
        trajectories
            .iter()
            .filter(|p| p.to_string_lossy().contains(part))
            .count()
    };
    assert!(
        under("rollout/scratch/trajectories/") >= 2,
        "{trajectories:#?}"
    );
    assert!(under("feedback/trajectories/") >= 2, "{trajectories:#?}");
    for path in &trajectories {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.len() <= 64 * 1024 + 4096, "{path:?} is bounded");
        for private in split.gate.iter().chain(&split.sealed) {
            assert!(!text.contains(private.as_str()), "{path:?} names {private}");
            assert!(
                !text.contains(&canary(private)),
                "{path:?} holds {private}'s trajectory"
            );
            assert!(
                !path.to_string_lossy().contains(private.as_str()),
                "{path:?} is a gate or sealed trial's"
            );
        }
    }
    // The train trial's own canary did reach them: the check above can fail.
    let train_canary = canary(&split.train[0]);
    assert!(
        trajectories
            .iter()
            .any(|p| std::fs::read_to_string(p).unwrap().contains(&train_canary)),
        "no trajectory holds {train_canary}"
    );
    // The train trial's model answer is in its summary.
    let texts: Vec<_> = trajectories
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    assert!(!texts.is_empty());
    assert!(
        texts
            .iter()
            .any(|p| std::fs::read_to_string(p).unwrap().contains("0.6")),
        "{texts:?}"
    );
}

/// Docker with the Python test image, or `false` (skip, with the reason) outside CI; with
/// CI=true a missing daemon or image fails the test.
fn docker_with_python() -> bool {
    let ci = super::ws::ci();
    let up = std::process::Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !up {
        assert!(
            !ci,
            "CI=true but `docker info` fails: the Docker tests are required in CI"
        );
        eprintln!("SKIP: Docker daemon not available");
        return false;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../evaluator-harbor/testdata/build-python-image.sh");
    let built = std::process::Command::new("bash")
        .arg(script)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        built || !ci,
        "CI=true but the Python test image cannot be built"
    );
    built
}

#[test]
fn on_the_docker_engine_the_agent_reaches_only_the_gateway_and_is_metered_the_same() {
    if !docker_with_python() {
        return;
    }
    let upstream = Upstream::start((0..40).map(|_| answer("0.6", (10, 5))).collect());
    let e = experiment(
        &upstream,
        &Spec {
            budget_usd: 10.0,
            ..Spec::default()
        },
    );
    for entry in std::fs::read_dir(e.root().join("tasks")).unwrap().flatten() {
        let toml = entry.path().join("task.toml");
        let text = std::fs::read_to_string(&toml).unwrap();
        std::fs::write(
            &toml,
            format!("{text}[environment]\ndocker_image = \"evolve-harbor-test-python:1\"\n"),
        )
        .unwrap();
        std::fs::remove_dir_all(entry.path().join("environment")).unwrap();
    }
    let recipe_path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&recipe_path).unwrap();
    std::fs::write(
        &recipe_path,
        recipe.replacen("engine: local", "engine: docker", 1),
    )
    .unwrap();

    evolve(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    assert_evolved_through_the_gateway(&e, &upstream);
}

#[test]
fn priced_agent_calls_with_no_budget_stop_the_run_before_anything_is_evaluated() {
    let upstream = Upstream::start(Vec::new());
    let e = experiment(&upstream, &Spec::default()); // budget_usd: 0
    evolve(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let run = evolve(&e, &["run", "ws"]).run();
    assert_ne!(run.output.status.code(), Some(0), "{}", text(&run.output));
    assert!(
        run.stderr().contains("evaluator.model.prices") && run.stderr().contains("budget"),
        "{}",
        run.stderr()
    );
    assert!(evaluations(&e).is_empty());
    assert!(upstream.seen().iter().all(|s| s.method != "POST"));
}

#[test]
fn a_dead_agent_endpoint_stops_the_run_before_anything_is_evaluated() {
    let upstream = Upstream::start(Vec::new());
    let e = experiment(
        &upstream,
        &Spec {
            budget_usd: 10.0,
            ..Spec::default()
        },
    );
    // Point evaluator.model at a port nothing listens on (init does not probe it).
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&path).unwrap();
    let recipe = recipe.replace(&upstream.endpoint(), &format!("http://127.0.0.1:{port}/v1"));
    std::fs::write(&path, recipe).unwrap();
    evolve(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let run = evolve(&e, &["run", "ws"]).run();
    assert_ne!(run.output.status.code(), Some(0), "{}", text(&run.output));
    assert!(run.stderr().contains("evaluator.model"), "{}", run.stderr());
    assert!(
        run.stderr().contains("no generation was run"),
        "{}",
        run.stderr()
    );
    assert!(evaluations(&e).is_empty());
}

/// The harbor CLI and Docker Compose v2 (what Harbor's docker environment drives), or
/// `false` (skip, with the reason) outside CI; with CI=true either missing fails the test.
fn harbor_with_compose() -> bool {
    let ci = super::ws::ci();
    let harbor = Path::new("/var/cache/evolve-ci/harbor-venv/bin/harbor");
    let compose = std::process::Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !harbor.is_file() || !compose {
        assert!(
            !ci,
            "CI=true but the harbor CLI or `docker compose` is missing; evaluator-harbor/ci-setup.sh installs both"
        );
        eprintln!("SKIP: the harbor CLI or docker compose is missing");
        return false;
    }
    true
}

/// Issue 26's end-to-end run: a workspace on `engine: harbor` evolves a command agent for
/// two generations. Every evaluation is one `harbor run` job on Harbor's own docker
/// environment; the shipped adapter runs the candidate's agent in Harbor's container,
/// which reaches the host's gateway on Docker's bridge with a job token. Every call is
/// charged to the budget and listed, the key is written nowhere, no container is left.
#[test]
fn on_the_harbor_engine_a_command_agent_evolves_through_the_gateway() {
    if !docker_with_python() || !harbor_with_compose() {
        return;
    }
    let upstream = Upstream::start((0..60).map(|_| answer("0.6", (10, 5))).collect());
    let e = experiment(
        &upstream,
        &Spec {
            budget_usd: 10.0,
            ..Spec::default()
        },
    );
    let mut tasks = Vec::new();
    for entry in std::fs::read_dir(e.root().join("tasks")).unwrap().flatten() {
        let toml = entry.path().join("task.toml");
        let text = std::fs::read_to_string(&toml).unwrap();
        // Public: Harbor's docker environment cannot enforce no-network on a machine
        // without a registry, and the agent reaches the gateway over the bridge.
        std::fs::write(
            &toml,
            format!(
                "{text}[environment]\ndocker_image = \"evolve-harbor-test-python:1\"\nnetwork_mode = \"public\"\n"
            ),
        )
        .unwrap();
        std::fs::remove_dir_all(entry.path().join("environment")).unwrap();
        tasks.push(entry.file_name().to_string_lossy().into_owned());
    }
    let recipe_path = e.root().join("recipe.yaml");
    let recipe = std::fs::read_to_string(&recipe_path).unwrap();
    std::fs::write(
        &recipe_path,
        recipe.replacen("engine: local", "engine: harbor", 1),
    )
    .unwrap();
    evolve(&e, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let engine: Value = serde_json::from_str(&e.gen0_file("evaluator/engine.json")).unwrap();
    assert_eq!(engine["harbor"]["model_path"], "gateway", "{engine}");

    let run = evolve(&e, &["run", "ws", "--json"]).ok();
    let summary = run.json();
    assert_eq!(summary["status"], "complete", "{summary}");
    assert_eq!(summary["genesis_score"], 0.6, "{summary}");

    // Each trial made one call, with the host's key upstream; each evaluation lists its
    // calls and is charged them (metered for the job as a whole).
    let calls: Vec<_> = upstream
        .seen()
        .into_iter()
        .filter(|s| s.path.ends_with("/chat/completions"))
        .collect();
    let evals = evaluations(&e);
    assert!(evals.len() >= 3, "genesis and two children: {evals:?}");
    let trials: u64 = evals
        .iter()
        .map(|ev| ev["body"]["trials"].as_u64().unwrap())
        .sum();
    assert_eq!(calls.len() as u64, trials, "one call per trial");
    for call in &calls {
        assert_eq!(
            call.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    assert_each_evaluation_charged(&evals);
    let spent = summary["spent_usd"].as_f64().unwrap();
    assert!(
        (spent - 0.015 * calls.len() as f64).abs() < 1e-9,
        "{summary}"
    );

    // One harbor job per evaluation (all its tasks in one job dir), and the agent saw the
    // gateway on Docker's bridge with a token, never the key.
    let runs = e.ws.join("runs/evaluations");
    let job_configs: Vec<_> = named(&runs, "config.json")
        .into_iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("jobs/job")))
        .collect();
    assert!(!job_configs.is_empty());
    let envs = named(&runs, "env.json");
    assert_eq!(envs.len() as u64, trials, "one env.json per trial");
    for path in envs {
        let env: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let url = env["OPENAI_BASE_URL"].as_str().unwrap();
        assert!(
            url.starts_with("http://") && !url.contains("127.0.0.1"),
            "{url}"
        );
        assert!(env.get(KEY_VAR).is_none(), "{path:?}");
    }
    for path in files_under(e.root()) {
        let bytes = std::fs::read(&path).unwrap_or_default();
        assert!(
            !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "the key is in {path:?}"
        );
    }
    assert!(!run.stdout().contains(KEY) && !run.stderr().contains(KEY));

    // No container of any trial is left behind.
    let ps = std::process::Command::new("docker")
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    let ps = String::from_utf8_lossy(&ps.stdout);
    for t in &tasks {
        let short: String = t.chars().take(20).collect::<String>().to_lowercase();
        assert!(!ps.contains(&short), "a container of {t} is left: {ps}");
    }
    e.evolve(&["verify", "ws"]).ok();
}
