//! The built-in `terminal` seed from the real binary: on the local engine and on the
//! docker engine (the `evolve-terminal:1` image seeds/terminal/image/build-image.sh makes)
//! the oracle scores 1 on every task and an agent that does nothing scores 0 on every
//! task; and the
//! seed's own Python agent, reaching a scripted chat server through the model gateway,
//! solves a task (after a format error and a truncated output) and leaves its trajectory.

use super::cmd::evolve;
use super::upstream::{Upstream, answer};
use super::ws::{component, files_under};
use evolve::builtin;
use serde_json::Value;
use std::path::{Path, PathBuf};

const KEY_VAR: &str = "EVOLVE_TEST_TERMINAL_UPSTREAM_KEY";
const KEY: &str = "sk-terminal-canary-9b3e55a1";

fn seed_tasks() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds/terminal/tasks")
}

/// `evolve tasks run TASKS --agent AGENT --json` on `engine`: each trial's task and
/// reward, after checking every trial was scored.
fn rewards(engine: &str, agent: &str, out: &Path) -> Vec<(String, f64)> {
    let ran = evolve(["tasks", "run"])
        .arg(seed_tasks())
        .args([
            "--engine",
            engine,
            "--n-concurrent",
            "2",
            "--json",
            "--agent",
        ])
        .arg(agent)
        .arg("--out")
        .arg(out)
        .ok();
    let result = ran.json();
    let trials = result["trials"].as_array().expect("trials").clone();
    trials
        .iter()
        .map(|t| {
            assert_eq!(t["status"], "benchmark_complete", "{t:#}");
            let reward = t["reward"].as_f64().unwrap_or_else(|| panic!("{t:#}"));
            (t["task"].as_str().unwrap().to_string(), reward)
        })
        .collect()
}

#[test]
fn the_oracle_scores_one_and_a_do_nothing_agent_zero_on_every_task() {
    oracle_one_and_nothing_zero("local");
}

/// The same on the docker engine, in the image `.ci/run` builds from Debian's packages
/// (the script is idempotent and cached, so running it here costs a second once built).
#[test]
fn on_the_docker_engine_the_oracle_scores_one_and_a_do_nothing_agent_zero() {
    if !terminal_image() {
        return;
    }
    oracle_one_and_nothing_zero("docker");
}

/// Docker and `evolve-terminal:1` (built now when missing), or `false` with the reason
/// (a skip) outside CI; under CI=true either missing fails the test.
fn terminal_image() -> bool {
    let ci = super::ws::ci();
    let up = std::process::Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !up {
        assert!(
            !ci,
            "CI=true but `docker info` fails: the terminal seed's docker test is required in CI"
        );
        eprintln!("SKIP: Docker daemon not available");
        return false;
    }
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds/terminal/image/build-image.sh");
    let built = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    if !built.status.success() {
        let why = String::from_utf8_lossy(&built.stderr);
        assert!(!ci, "CI=true but evolve-terminal:1 cannot be built: {why}");
        eprintln!("SKIP: evolve-terminal:1 cannot be built: {why}");
        return false;
    }
    true
}

fn oracle_one_and_nothing_zero(engine: &str) {
    let seed = builtin::seed("terminal").expect("the terminal seed is built in");
    assert!(!seed.summary.is_empty());
    let names = seed.task_names();
    assert!(names.len() >= 20, "{names:?}");
    assert!(
        seed.target
            .iter()
            .any(|f| f.path == "agent.py" && f.executable),
        "agent.py ships executable"
    );
    let tmp = tempfile::tempdir().unwrap();

    let oracle = rewards(engine, "oracle", &tmp.path().join("oracle"));
    let ran: Vec<&str> = oracle.iter().map(|(t, _)| t.as_str()).collect();
    let mut sorted = ran.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, names, "every built-in task ran");
    for (task, reward) in &oracle {
        assert_eq!(*reward, 1.0, "oracle on {task} ({engine} engine)");
    }

    // `tasks run` has no built-in nop agent: a command agent that exits at once.
    let nop = tmp.path().join("nop");
    std::fs::create_dir_all(&nop).unwrap();
    std::fs::write(nop.join("agent.toml"), "command = [\"true\"]\n").unwrap();
    let nothing = rewards(engine, nop.to_str().unwrap(), &tmp.path().join("nop-out"));
    assert_eq!(nothing.len(), names.len());
    for (task, reward) in &nothing {
        assert_eq!(
            *reward, 0.0,
            "an agent doing nothing on {task} ({engine} engine)"
        );
    }
}

/// The answers that solve `files-release-symlink`: one command, then the submit marker.
const SOLVE: &str = "I will create the releases and the link in one go.\n\n```bash\n\
    for v in v1 v2 v3; do mkdir -p releases/$v && echo $v > releases/$v/VERSION; done \
    && ln -sfn releases/v3 current && cat current/VERSION\n```\n";
const SUBMIT: &str = "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```\n";
/// An answer without a command block: the agent must say so and carry on.
const CHATTER: &str = "Let me think about the layout first.";
/// A command printing more than `agent.yaml`'s 4000 characters: cut in the middle.
const LONG: &str = "First a look at a long listing.\n\n```bash\nseq 1 5000\n```\n";

/// A workspace-to-be: the seed's target, four copies of one seed task, and a recipe
/// whose `evaluator.model` is `upstream`, run for its genesis evaluation only.
fn experiment(upstream: &Upstream) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let seed = builtin::seed("terminal").unwrap();
    seed.write_tasks(&root.join("all")).unwrap();
    for i in 0..4 {
        copy_tree(
            &root.join("all/files-release-symlink"),
            &root.join(format!("tasks/symlink-{i}")),
        );
    }
    let recipe = format!(
        "experiment: {{name: terminal, max_generations: 0, children_per_gen: 1, seed: 3, budget_usd: 0}}\n\
         target: {{seed: terminal}}\n\
         surface: {{include: [\"target/prompts/system.md\"]}}\n\
         operators:\n  select: {{operator: greedy}}\n  rollout: {{operator: noop}}\n\
         \x20 mutate: {{operator: {mutate}, timeout_s: 60, config: {{action: climb}}}}\n\
         \x20 gate: {{operator: hillclimb, config: {{strict: true}}}}\n  record: {{operator: notes}}\n\
         evaluator: {{engine: local, dataset: tasks, splits: {{train: 0.25, gate: 0.5, sealed: 0.25, seed: 0}}, \
         n_concurrent: 1, model: {{endpoint: \"{endpoint}\", model: terminal-m, api_key_env: {KEY_VAR}}}}}\n",
        mutate = component("scripted_mutate").display(),
        endpoint = upstream.endpoint(),
    );
    std::fs::write(root.join("recipe.yaml"), recipe).unwrap();
    tmp
}

fn copy_tree(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for path in files_under(from) {
        let dest = to.join(path.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&path, &dest).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// The chat requests that carried a task (not the run's probe of the endpoint).
fn task_calls(upstream: &Upstream) -> Vec<Value> {
    upstream
        .seen()
        .into_iter()
        .filter(|s| s.path.ends_with("/chat/completions"))
        .map(|s| s.body)
        .filter(|b| b["messages"][0]["role"] == "system")
        .collect()
}

#[test]
fn the_terminal_agent_solves_a_task_through_the_gateway_and_leaves_its_trajectory() {
    // The first trial meets a format error and a long output before solving; every later
    // one solves at once.
    let mut script = vec![answer(CHATTER, (20, 5)), answer(LONG, (20, 5))];
    for _ in 0..12 {
        script.push(answer(SOLVE, (30, 20)));
        script.push(answer(SUBMIT, (40, 5)));
    }
    let upstream = Upstream::start(script);
    let exp = experiment(&upstream);
    let run_evolve = |args: &[&str]| {
        evolve(args)
            .cwd(exp.path())
            .keys(exp.path().join("keys"))
            .env(KEY_VAR, KEY)
    };
    run_evolve(&["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let summary = run_evolve(&["run", "ws", "--json"]).ok().json();
    assert_eq!(summary["status"], "complete", "{summary}");
    assert_eq!(summary["genesis_score"], 1.0, "{summary}");

    // The agent's conversation: system prompt with the skills appended, the task in the
    // instance prompt, the format error fed back, then each command's output.
    let calls = task_calls(&upstream);
    assert!(calls.len() >= 4, "{calls:#?}");
    let first = &calls[0]["messages"];
    let system = first[0]["content"].as_str().unwrap();
    assert!(system.contains("Skill: checking your output"), "{system}");
    let task = first[1]["content"].as_str().unwrap();
    assert!(
        task.contains("<task>") && task.contains("releases/v3"),
        "{task}"
    );
    assert_eq!(calls[0]["temperature"], 0.0);
    let second = calls[1]["messages"].as_array().unwrap();
    assert!(
        second[3]["content"]
            .as_str()
            .unwrap()
            .starts_with("Format error: your answer had no ```bash block"),
        "{second:#?}"
    );
    let third = calls[2]["messages"].as_array().unwrap();
    let long = third.last().unwrap()["content"].as_str().unwrap();
    assert!(
        long.contains("\n1\n2\n3\n") && long.contains("\n4999\n5000\n"),
        "{long}"
    );
    assert!(
        long.contains("characters elided") && long.len() < 4300,
        "{long}"
    );
    let fourth = calls[3]["messages"].as_array().unwrap();
    let observed = fourth.last().unwrap()["content"].as_str().unwrap();
    assert!(
        observed.starts_with("<returncode>0</returncode>") && observed.contains("v3"),
        "{observed}"
    );
    // Each trial left the agent's own ATIF file, and the trial's trajectory (the gateway's
    // log merged with it) shows the command the agent ran and what it printed.
    let files = files_under(&exp.path().join("ws/runs/evaluations"));
    let own: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.ends_with("root/logs/agent/trajectory.json"))
        .collect();
    let merged: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            p.file_name().is_some_and(|n| n == "trajectory.json")
                && p.parent().and_then(Path::parent).and_then(Path::file_name)
                    == Some("trials".as_ref())
        })
        .collect();
    assert!(!own.is_empty(), "the agent wrote its trajectories");
    assert_eq!(own.len(), merged.len(), "{files:#?}");
    for path in &own {
        let doc: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(doc["schema_version"], "ATIF-v1.4", "{doc:#}");
        assert_eq!(doc["agent"]["name"], "evolve-terminal", "{doc:#}");
        assert!(
            doc["notes"]
                .as_str()
                .unwrap()
                .starts_with("submitted after"),
            "{doc:#}"
        );
    }
    for path in &merged {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(
            text.contains("ln -sfn releases/v3 current")
                && text.contains("<returncode>0</returncode>"),
            "{path:?}: {text}"
        );
    }
    // A trial ends at the submit marker: two calls each, and two more in the first.
    assert_eq!(calls.len(), 2 * own.len() + 2, "{calls:#?}");
    run_evolve(&["verify", "ws"]).ok();
}
