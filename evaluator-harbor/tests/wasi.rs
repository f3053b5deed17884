//! The WASI-component agent form on the local engine.
use crate::common;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::*;
use evaluator_harbor::agent::{AgentManifest, AgentSpec};
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::result::{TimeoutOwner, TrialStatus};

fn build_component(out: &Path) -> PathBuf {
    let wasm = out.join("agent.wasm");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let st = std::process::Command::new(rustc)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "--edition",
            "2021",
            "--target",
            "wasm32-wasip2",
            "-O",
            "-C",
            "strip=symbols",
            "-C",
            "debuginfo=0",
            "-C",
            "panic=abort",
            "-o",
        ])
        .arg(&wasm)
        .arg(testdata().join("wasi-agent/agent.rs"))
        .status()
        .expect("rustc runs");
    assert!(
        st.success(),
        "building the test component needs the wasm32-wasip2 target (rust-toolchain.toml lists it)"
    );
    wasm
}

fn target(dir: &Path, extra: &str) -> AgentSpec {
    std::fs::create_dir_all(dir).unwrap();
    build_component(dir);
    std::fs::write(
        dir.join("agent.toml"),
        format!("component = \"agent.wasm\"\n{extra}"),
    )
    .unwrap();
    AgentSpec::Target(AgentManifest::load(dir).unwrap())
}

/// One trial of the test component, with `env` as its `[env]`, on a task of its own.
async fn one_trial(
    tmp: &Path,
    task_toml: &str,
    test_sh: &str,
    env: &str,
) -> evaluator_harbor::result::TrialResult {
    let tasks = tmp.join("tasks");
    write_task(&tasks, "t", task_toml, None, Some(test_sh));
    let agent = target(&tmp.join("target"), &format!("[env]\n{env}"));
    let r = run_dir(
        Arc::new(LocalEngine::default()),
        &tasks,
        agent,
        &tmp.join("out"),
        1,
    )
    .await;
    r.trials.into_iter().next().expect("one trial")
}

#[tokio::test]
async fn a_wasi_component_agent_solves_hello_and_sees_only_its_preopens() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = target(&tmp.path().join("target"), "");
    let r = run_dir(
        Arc::new(LocalEngine::default()),
        &testdata().join("tasks/hello"),
        agent,
        &tmp.path().join("out"),
        1,
    )
    .await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(t.reward, Some(1.0));
    let log = std::fs::read_to_string(t.logs.agent_dir.join("agent.txt")).unwrap();
    assert!(log.contains("escapes: 0"), "{log}");
    assert!(log.contains("instruction: Create /app/hello.txt"), "{log}");
    assert_eq!(t.isolation.as_ref().unwrap().filesystem, "wasi_preopens");
    assert!(t.logs.agent_dir.join("notes.txt").is_file());
}

#[tokio::test]
async fn a_spinning_component_times_out() {
    let tmp = tempfile::tempdir().unwrap();
    let t = one_trial(
        tmp.path(),
        "[agent]\ntimeout_sec = 1\n",
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "MODE = \"spin\"\n",
    )
    .await;
    assert_eq!(t.status, TrialStatus::Timeout, "{t:#?}");
    assert_eq!(t.timeout_owner, Some(TimeoutOwner::Agent));
    assert!(t.wall_time_sec < 10.0);
}

#[tokio::test]
async fn a_non_component_is_candidate_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("target");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("agent.wasm"), b"not wasm").unwrap();
    std::fs::write(dir.join("agent.toml"), "component = \"agent.wasm\"\n").unwrap();
    let agent = AgentSpec::Target(AgentManifest::load(&dir).unwrap());
    let r = run_dir(
        Arc::new(LocalEngine::default()),
        &testdata().join("tasks/hello"),
        agent,
        &tmp.path().join("out"),
        1,
    )
    .await;
    assert_eq!(
        r.trials[0].status,
        TrialStatus::CandidateInvalid,
        "{:#?}",
        r.trials[0]
    );
}

/// The hostile probes of the command-agent test, from a component: host paths, `..`
/// through every preopen, writes outside its grants, a loopback listener, and a link
/// planted where the host writes the agent's log.
#[tokio::test]
async fn a_hostile_component_agent_reaches_nothing_outside_its_preopens() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = tmp.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("exp.key"), "KEY-CANARY").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let host_paths = format!(
        "{}:{}/exp.key:/etc/passwd:{}",
        keys.display(),
        keys.display(),
        tmp.path().join("tasks").display()
    );
    let t = &one_trial(
        tmp.path(),
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 20\n",
        "#!/bin/bash\n[ -e /app/probed ] && echo 1 > /logs/verifier/reward.txt\n",
        &format!("MODE = \"hostile\"\nHOST_PATHS = \"{host_paths}\"\nPORT = \"{port}\"\n"),
    )
    .await;
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(t.reward, Some(1.0));
    // The host replaced the planted link with the real log instead of writing through it.
    let log_path = t.logs.agent_dir.join("agent.txt");
    assert!(std::fs::symlink_metadata(&log_path).unwrap().is_file());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("hostile probe done"), "{log}");
    assert!(
        log.contains("planted agent.txt link: true"),
        "the probe should plant the link: {log}"
    );
    assert!(!log.contains("BREACH"), "{log}");
    assert_eq!(
        std::fs::read_to_string(keys.join("exp.key")).unwrap(),
        "KEY-CANARY"
    );
    assert!(
        listener.accept().is_err(),
        "the component reached the listener"
    );
}

/// A component that allocates past its task's `memory_mb` is stopped at the cap, and the
/// trial is classified (the verifier still scores what it left).
#[tokio::test]
async fn a_component_agent_is_held_to_its_tasks_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let t = &one_trial(
        tmp.path(),
        "[agent]\ntimeout_sec = 60\n[environment]\nmemory_mb = 64\n",
        "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
        "MODE = \"hog\"\n",
    )
    .await;
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(t.agent_exit_code, Some(128), "{t:#?}");
    let log = std::fs::read_to_string(t.logs.agent_dir.join("agent.txt")).unwrap();
    let held: Vec<u64> = log
        .lines()
        .filter_map(|l| {
            l.strip_prefix("holding ")?
                .strip_suffix(" MiB")?
                .parse()
                .ok()
        })
        .collect();
    assert!(!held.is_empty(), "{log}");
    assert!(held.iter().all(|mib| *mib <= 64), "grew past 64 MiB: {log}");
    assert!(t.logs.agent_dir.join("trap.txt").is_file());
}
