#![allow(dead_code)]
pub mod gateway;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use evaluator_harbor::agent::AgentSpec;
use evaluator_harbor::engine::docker::DockerEngine;
use evaluator_harbor::engine::{Engine, EvaluationPlan, NoProgress, run_evaluation};
use evaluator_harbor::result::EvaluationResult;

pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

pub fn write_exec(p: &Path, body: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Write a minimal task `name` under `root`.
pub fn write_task(
    root: &Path,
    name: &str,
    toml: &str,
    solve: Option<&str>,
    test: Option<&str>,
) -> PathBuf {
    let d = root.join(name);
    std::fs::create_dir_all(d.join("environment")).unwrap();
    std::fs::write(
        d.join("environment/Dockerfile"),
        "FROM evolve-harbor-test-base:1\nWORKDIR /app\n",
    )
    .unwrap();
    std::fs::write(d.join("task.toml"), toml).unwrap();
    std::fs::write(d.join("instruction.md"), format!("Task {name}.\n")).unwrap();
    if let Some(s) = solve {
        write_exec(&d.join("solution/solve.sh"), s);
    }
    if let Some(t) = test {
        write_exec(&d.join("tests/test.sh"), t);
    }
    d
}

pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

pub async fn run_dir(
    engine: Arc<dyn Engine>,
    dir: &Path,
    agent: AgentSpec,
    out: &Path,
    n_concurrent: usize,
) -> EvaluationResult {
    let mut plan = EvaluationPlan::for_dir(dir, agent, out.to_path_buf()).unwrap();
    plan.n_concurrent = n_concurrent;
    run_evaluation(engine, &plan, &NoProgress).await
}

/// Processes whose command line contains `needle`.
pub fn procs_with_cmdline(needle: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'));
            if !zombie && String::from_utf8_lossy(&c).contains(needle) {
                v.push(pid);
            }
        }
    }
    v
}

/// Whether the test must not skip (CI=true).
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// A unique-ish token for process names.
pub fn token() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}x{t:x}", std::process::id())
}

/// Rewards of a task vector as `task -> [reward or status]`.
pub fn vector_summary(r: &EvaluationResult) -> Vec<(String, Vec<String>)> {
    r.task_vector
        .tasks
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.trials
                    .iter()
                    .map(|t| format!("{}:{:?}", t.status.as_str(), t.reward))
                    .collect(),
            )
        })
        .collect()
}

/// The image the Python test agents run in on the docker engine (testdata/build-python-image.sh).
pub const PYTHON_IMAGE: &str = "evolve-harbor-test-python:1";

/// Docker with the test images, or None (skip, with the reason) outside CI; with CI=true a
/// missing daemon or image fails the test instead.
pub async fn docker() -> Option<Arc<DockerEngine>> {
    let ok = std::process::Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !ci(),
            "CI=true but `docker info` fails: the Docker tests are required in CI"
        );
        eprintln!("SKIP: Docker daemon not available (`docker info` failed)");
        return None;
    }
    for script in ["build-base-image.sh", "build-python-image.sh"] {
        let st = std::process::Command::new("bash")
            .arg(testdata().join(script))
            .status()
            .unwrap();
        if !st.success() {
            assert!(!ci(), "CI=true but {script} could not build its image");
            eprintln!("SKIP: {script} cannot build its image (see its output)");
            return None;
        }
    }
    Some(Arc::new(
        DockerEngine::connect().await.expect("daemon answers"),
    ))
}
