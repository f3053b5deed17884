//! Experiment fixtures for the lifecycle tests: a tiny target whose agent answers the
//! number in `target/value.txt`, a task set whose verifier rewards exactly that number,
//! recipes binding test components, and helpers to run the real `evolve` binary.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

pub const CANARY: &str = "zq-canary";

/// Path of a test component built by `host/build.rs`.
pub use super::common::component_path as component;

pub fn write_exec(p: &Path, body: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// One experiment: a temporary directory with `target/`, `tasks/`, `recipe.yaml`, a
/// private key directory, and the workspace `ws/` (created by [`Exp::init`]).
pub struct Exp {
    pub tmp: tempfile::TempDir,
    pub ws: PathBuf,
    pub keys: PathBuf,
}

pub struct Spec {
    pub tasks: usize,
    /// Seconds each verifier sleeps (for the kill-during-evaluation test).
    pub verifier_sleep: f64,
    pub mutate: Value,
    pub gate: (String, Value),
    pub surface: Vec<String>,
    pub generations: u32,
    pub extra_operators: String,
    pub budget_usd: f64,
    /// A `model:` block (YAML flow mapping), if any.
    pub model: Option<String>,
    /// What the agent reports it spent per trial (`cost.json`).
    pub agent_cost: Option<f64>,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            tasks: 4,
            verifier_sleep: 0.0,
            mutate: json!({"action": "climb"}),
            gate: ("hillclimb".into(), json!({"strict": true})),
            surface: vec!["target/value.txt".into()],
            generations: 2,
            extra_operators: String::new(),
            budget_usd: 0.0,
            model: None,
            agent_cost: None,
        }
    }
}

impl Exp {
    pub fn new(spec: &Spec) -> Exp {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path();
        std::fs::create_dir_all(r.join("target")).unwrap();
        std::fs::write(r.join("target/agent.toml"), "command = [\"./agent.sh\"]\n").unwrap();
        write_exec(
            &r.join("target/agent.sh"),
            &format!(
                "#!/bin/sh\ncat \"$EVOLVE_AGENT_DIR/value.txt\" > \"$EVOLVE_APP_DIR/answer.txt\"\n{}",
                spec.agent_cost.map_or(String::new(), |c| format!(
                    "echo '{{\"cost_usd\": {c}}}' > \"$EVOLVE_AGENT_LOGS_DIR/cost.json\"\n"
                ))
            ),
        );
        std::fs::write(r.join("target/value.txt"), "0.1\n").unwrap();
        for i in 0..spec.tasks {
            let d = r.join(format!("tasks/{CANARY}-{i}"));
            std::fs::create_dir_all(d.join("environment")).unwrap();
            std::fs::write(
                d.join("environment/Dockerfile"),
                "FROM scratch\nWORKDIR /app\n",
            )
            .unwrap();
            std::fs::write(
                d.join("task.toml"),
                "version = \"1.0\"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n",
            )
            .unwrap();
            std::fs::write(
                d.join("instruction.md"),
                "Write your number to /app/answer.txt.\n",
            )
            .unwrap();
            let sleep = if spec.verifier_sleep > 0.0 {
                format!("sleep {}\n", spec.verifier_sleep)
            } else {
                String::new()
            };
            write_exec(
                &d.join("tests/test.sh"),
                &format!("#!/bin/sh\n{sleep}cat /app/answer.txt > /logs/verifier/reward.txt\n"),
            );
            write_exec(
                &d.join("solution/solve.sh"),
                "#!/bin/sh\necho 1 > /app/answer.txt\n",
            );
        }
        let surface: Vec<String> = spec.surface.iter().map(|s| format!("\"{s}\"")).collect();
        let recipe = format!(
            "experiment: {{name: test, max_generations: {gens}, children_per_gen: 1, seed: 3, budget_usd: {budget}}}\n\
             target: {{path: target}}\n\
             surface: {{include: [{surface}]}}\n\
             operators:\n  select: {{operator: greedy}}\n  rollout: {{operator: noop}}\n\
             \x20 mutate: {{operator: {mutate_op}, timeout_s: 60, config: {mutate}}}\n\
             \x20 gate: {{operator: {gate_op}, timeout_s: 60, config: {gate_cfg}}}\n\
             \x20 record: {{operator: notes}}\n{extra}\
             evaluator: {{engine: local, dataset: tasks, splits: {{train: 0.25, gate: 0.5, sealed: 0.25, seed: 0}}, n_concurrent: 1}}\n{model}",
            gens = spec.generations,
            budget = spec.budget_usd,
            surface = surface.join(", "),
            mutate_op = component("scripted_mutate").display(),
            mutate = spec.mutate,
            gate_op = spec.gate.0,
            gate_cfg = spec.gate.1,
            extra = spec.extra_operators,
            model = spec
                .model
                .as_ref()
                .map_or(String::new(), |m| format!("model: {m}\n")),
        );
        std::fs::write(r.join("recipe.yaml"), recipe).unwrap();
        let keys = r.join("keys");
        Exp {
            ws: r.join("ws"),
            keys,
            tmp,
        }
    }

    pub fn root(&self) -> &Path {
        self.tmp.path()
    }

    /// `evolve args` in the environment's directory, with its own key store.
    pub fn evolve(&self, args: &[&str]) -> super::cmd::Evolve {
        super::cmd::evolve(args).keys(&self.keys).cwd(self.root())
    }

    pub fn run_ok(&self, args: &[&str]) -> Output {
        self.evolve(args).ok().output
    }

    /// Run `evolve args`, which must fail as a usage error (exit 2) whose message on
    /// stderr says `says`.
    pub fn usage_error(&self, args: &[&str], says: &str) -> Output {
        let ran = self.evolve(args).code(2);
        assert!(
            ran.stderr().contains(says),
            "{}",
            ran.report(&format!("to say {says:?}"))
        );
        ran.output
    }

    pub fn init(&self) {
        self.run_ok(&["init", "ws", "--recipe", "recipe.yaml"]);
    }

    pub fn spawn_run(&self) -> Child {
        self.evolve(&["run", "ws"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub fn json(&self, args: &[&str]) -> Value {
        self.evolve(args).run().json()
    }

    /// A file of generation 0 as committed (the workspace holds no working copy).
    pub fn gen0_bytes(&self, path: &str) -> Vec<u8> {
        let store = evolve_snapshot::Store::open(&self.ws).unwrap();
        let gen0 = store.tag_target("gen/0").unwrap().expect("a gen/0 tag");
        store
            .read_blob(gen0, path, 64 << 20)
            .unwrap()
            .unwrap_or_else(|| panic!("gen/0 has no {path}"))
    }

    /// [`Exp::gen0_bytes`] as text.
    pub fn gen0_file(&self, path: &str) -> String {
        String::from_utf8(self.gen0_bytes(path))
            .unwrap_or_else(|_| panic!("gen/0's {path} is not UTF-8"))
    }

    /// The archive's events.
    pub fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.ws.join(".evolve/archive.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Events as a comparable run history (`evolve selftest`'s own comparison): chain
    /// fields, timestamps, durations, attempt numbers, commit and tree ids and repair
    /// notes left out.
    pub fn history(&self) -> Vec<Value> {
        evolve::selftest::compare::history(&self.events())
    }

    pub fn log(&self) -> Vec<Value> {
        self.json(&["log", "ws", "--json"])
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// One compile cache for every process of the test run.
pub fn cache_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("evolve-test-cache");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Wait until `cond` holds (or panic after `secs`).
pub fn wait_for(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a test must not skip for a missing tool (`CI=true`): in CI it fails instead.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Kill -9 a run and reap it.
pub fn kill9(mut child: Child) {
    child.kill().unwrap();
    let _ = child.wait();
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every regular file under `root`, recursively, without following links (for tests that
/// grep a whole experiment for a secret).
pub fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(k) if k.is_dir() => dirs.push(entry.path()),
                Ok(k) if k.is_file() => out.push(entry.path()),
                _ => {}
            }
        }
    }
    out
}
