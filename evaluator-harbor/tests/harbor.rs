//! The harbor engine: result parsing (always) and the real CLI with the oracle agent and
//! Harbor's Docker environment (when it can run here; see the skip messages).
use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::*;
use evaluator_harbor::agent::AgentSpec;
use evaluator_harbor::engine::harbor::{HarborEngine, parse_trial_result};
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::result::{EvaluationResult, TimeoutOwner, TrialStatus};

/// A Harbor trial directory in `root` holding `fixture` as its result.json and, when given,
/// `reward_file` (name, contents) in its verifier/ dir.
fn harbor_trial(root: &Path, fixture: &str, reward_file: Option<(&str, &str)>) -> PathBuf {
    let trial = root.join(fixture.trim_end_matches(".json"));
    std::fs::create_dir_all(trial.join("verifier")).unwrap();
    std::fs::copy(
        testdata().join("harbor-results").join(fixture),
        trial.join("result.json"),
    )
    .unwrap();
    if let Some((name, body)) = reward_file {
        std::fs::write(trial.join("verifier").join(name), body).unwrap();
    }
    trial.join("result.json")
}

#[test]
fn harbor_trial_results_are_classified() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let ok_json = harbor_trial(
        d,
        "ok.json",
        Some(("reward.json", r#"{"correctness": 1, "style": 0.5}"#)),
    );
    let ok = parse_trial_result(&ok_json, "echo-json", 0).unwrap();
    assert_eq!(ok.status, TrialStatus::BenchmarkComplete);
    assert_eq!(
        ok.reward,
        Some(0.75),
        "no `reward` key: the mean of the keys"
    );
    let to_json = harbor_trial(d, "agent-timeout.json", Some(("reward.txt", "1")));
    let to = parse_trial_result(&to_json, "slow", 0).unwrap();
    assert_eq!(to.status, TrialStatus::Timeout);
    assert_eq!(to.timeout_owner, Some(TimeoutOwner::Agent));
    assert_eq!(
        to.reward, None,
        "a post-timeout verifier reward is never used"
    );
    let nr = parse_trial_result(&harbor_trial(d, "no-reward.json", None), "silent", 0).unwrap();
    assert_eq!(nr.status, TrialStatus::InfrastructureFailed);
    assert_eq!(nr.error.unwrap().kind, "reward_missing");
}

/// Harbor's own verdict on the reward files is not trusted: this project's parser reads them,
/// so a result.json whose rewards Harbor accepted still fails on a file over the 1 MiB cap,
/// and one Harbor rejected as unparsable is `reward_non_finite` when it holds `inf`.
#[test]
fn harbor_reward_files_are_read_by_our_parser() {
    let tmp = tempfile::tempdir().unwrap();
    let huge = format!("1{}", " ".repeat(2 << 20));
    let big = parse_trial_result(
        &harbor_trial(tmp.path(), "ok.json", Some(("reward.txt", &huge))),
        "big",
        0,
    )
    .unwrap();
    assert_eq!(big.status, TrialStatus::InfrastructureFailed);
    assert_eq!(big.reward, None);
    assert_eq!(big.error.unwrap().kind, "reward_invalid");
    let inf = parse_trial_result(
        &harbor_trial(tmp.path(), "no-reward.json", Some(("reward.txt", "inf"))),
        "inf",
        0,
    )
    .unwrap();
    assert_eq!(inf.error.unwrap().kind, "reward_non_finite");
    let gone = tmp.path().join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    std::fs::copy(
        testdata().join("harbor-results/ok.json"),
        gone.join("result.json"),
    )
    .unwrap();
    let gone = parse_trial_result(&gone.join("result.json"), "gone", 0).unwrap();
    let e = gone.error.unwrap();
    assert_eq!(e.kind, "reward_missing", "{e:?}");
    assert!(e.message.contains("harbor reported rewards"), "{e:?}");
}

/// The real-CLI tests run one at a time: each harbor job builds images and runs containers,
/// and the machines that run these tests have two cores.
static HARBOR_JOBS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The real harbor CLI driving Docker (and the test base image built), or None (skip, with
/// the reason) outside CI; with CI=true a missing daemon or CLI fails the test instead.
fn real_harbor() -> Option<HarborEngine> {
    if !Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(!ci(), "CI=true but Docker is unavailable");
        eprintln!("SKIP: Docker daemon not available");
        return None;
    }
    // Harbor's built-in docker environment shells out to the Compose v2 plugin; where it is
    // missing (Debian bookworm ships only docker-compose v1, and no other registry is
    // reachable) the real CLI drives Docker through a small plain-`docker` environment plugin
    // shipped in testdata/harbor-env (passed with --env module:Class, as Harbor documents).
    let compose = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    let extra: Vec<String> = if compose {
        vec![]
    } else {
        eprintln!(
            "note: `docker compose` is unavailable; using harbor --env evolve_docker_cli_env:DockerCliEnvironment"
        );
        static PYTHONPATH: std::sync::Once = std::sync::Once::new();
        // SAFETY: set once, to the same value for every harbor test; the only readers are the
        // harbor child processes, which these tests start one at a time (see HARBOR_JOBS).
        PYTHONPATH.call_once(|| unsafe {
            std::env::set_var("PYTHONPATH", testdata().join("harbor-env"))
        });
        vec![
            "--env".into(),
            "evolve_docker_cli_env:DockerCliEnvironment".into(),
        ]
    };
    let engine = match HarborEngine::discover(extra) {
        Ok(e) => e,
        Err(e) => {
            assert!(
                !ci(),
                "CI=true but the harbor CLI is missing ({e}); evaluator-harbor/ci-setup.sh installs it"
            );
            eprintln!("SKIP: {e}");
            return None;
        }
    };
    let v = Command::new(&engine.harbor_bin)
        .arg("--version")
        .output()
        .expect("harbor runs");
    assert!(v.status.success(), "harbor --version failed");
    let st = Command::new("bash")
        .arg(testdata().join("build-base-image.sh"))
        .status()
        .unwrap();
    assert!(st.success());
    Some(engine)
}

#[tokio::test]
async fn real_harbor_cli_with_oracle_and_docker_matches_local() {
    let _one_at_a_time = HARBOR_JOBS.lock().await;
    let Some(engine) = real_harbor() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let set = testdata().join("tasks");
    let h = run_dir(
        Arc::new(engine),
        &set,
        AgentSpec::Oracle,
        &tmp.path().join("harbor"),
        2,
    )
    .await;
    let l = run_dir(
        Arc::new(LocalEngine::default()),
        &set,
        AgentSpec::Oracle,
        &tmp.path().join("local"),
        1,
    )
    .await;
    assert_eq!(h.outcome, TrialStatus::BenchmarkComplete, "{h:#?}");
    assert_eq!(vector_summary(&h), vector_summary(&l), "{h:#?}");
    let t = h.trials.iter().find(|t| t.task == "json-reward").unwrap();
    assert_eq!(t.rewards.get("style"), Some(&0.5));
    assert!(
        t.logs.verifier_dir.join("reward.json").is_file(),
        "{:?}",
        t.logs
    );
}

/// Hostile reward files give the same status and error kind on the harbor engine (the real
/// CLI) as on the local engine: a 50 MB reward.txt that Harbor itself would score 1.0, and
/// non-finite rewards that Harbor reports as parse errors.
#[tokio::test]
async fn real_harbor_cli_parses_hostile_rewards_like_local() {
    let _one_at_a_time = HARBOR_JOBS.lock().await;
    let Some(engine) = real_harbor() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("tasks");
    let toml = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 120\n";
    let verifiers = [
        (
            "huge-txt",
            "printf 1 > /logs/verifier/reward.txt\nhead -c 50000000 /dev/zero | tr '\\0' ' ' >> /logs/verifier/reward.txt",
        ),
        ("inf-txt", "echo inf > /logs/verifier/reward.txt"),
        (
            "nan-json",
            "echo '{\"reward\": NaN}' > /logs/verifier/reward.json",
        ),
        ("empty-txt", ": > /logs/verifier/reward.txt"),
    ];
    for (name, body) in verifiers {
        write_task(
            &set,
            name,
            toml,
            Some("#!/bin/bash\ntrue\n"),
            Some(&format!("#!/bin/bash\n{body}\n")),
        );
    }
    let h = run_dir(
        Arc::new(engine),
        &set,
        AgentSpec::Oracle,
        &tmp.path().join("harbor"),
        2,
    )
    .await;
    let l = run_dir(
        Arc::new(LocalEngine::default()),
        &set,
        AgentSpec::Oracle,
        &tmp.path().join("local"),
        2,
    )
    .await;
    let verdicts = |r: &EvaluationResult| -> Vec<(String, String, Option<String>)> {
        let mut v: Vec<_> = r
            .trials
            .iter()
            .map(|t| {
                (
                    t.task.clone(),
                    t.status.as_str().to_string(),
                    t.error.as_ref().map(|e| e.kind.clone()),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(verdicts(&h), verdicts(&l), "harbor: {h:#?}");
    let huge = h.trials.iter().find(|t| t.task == "huge-txt").unwrap();
    assert_eq!(
        huge.error.as_ref().map(|e| e.kind.as_str()),
        Some("reward_invalid"),
        "{huge:#?}"
    );
    let inf = h.trials.iter().find(|t| t.task == "inf-txt").unwrap();
    assert_eq!(
        inf.error.as_ref().map(|e| e.kind.as_str()),
        Some("reward_non_finite"),
        "{inf:#?}"
    );
}

/// A test.sh that lists the network interfaces of its network namespace (/proc/net/dev) and
/// rewards 1 when they are only loopback (`want_only_loopback`) or more than loopback (not).
fn network_probe(want_only_loopback: bool) -> String {
    let (only_lo, more) = if want_only_loopback { (1, 0) } else { (0, 1) };
    format!(
        "#!/bin/bash\nnets=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\necho \"interfaces: $nets\"\n\
         if [ \"$nets\" = \"lo \" ]; then echo {only_lo}; else echo {more}; fi > /logs/verifier/reward.txt\n"
    )
}

/// Harbor is told the task's network policy: a task that names none (public to Harbor,
/// denied by evolve) runs without network, as on the local engine, and one that says
/// `public` keeps it; each trial records which was in force. The frozen task is not edited.
#[tokio::test]
async fn real_harbor_cli_runs_a_task_without_network_mode_offline() {
    let _one_at_a_time = HARBOR_JOBS.lock().await;
    let Some(engine) = real_harbor() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("tasks");
    let timeouts = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n";
    let offline = write_task(
        &set,
        "offline",
        timeouts,
        Some("#!/bin/bash\ntrue\n"),
        Some(&network_probe(true)),
    );
    write_task(
        &set,
        "online",
        &format!("{timeouts}[environment]\nnetwork_mode = \"public\"\n"),
        Some("#!/bin/bash\ntrue\n"),
        Some(&network_probe(false)),
    );
    let toml_before = std::fs::read_to_string(offline.join("task.toml")).unwrap();
    let h = run_dir(
        Arc::new(engine),
        &set,
        AgentSpec::Oracle,
        &tmp.path().join("harbor"),
        2,
    )
    .await;
    let trial = |name: &str| h.trials.iter().find(|t| t.task == name).unwrap();
    let network = |name: &str| trial(name).isolation.as_ref().unwrap().network.clone();
    assert_eq!(trial("offline").reward, Some(1.0), "{h:#?}");
    assert_eq!(network("offline"), "harbor:no-network");
    assert_eq!(trial("online").reward, Some(1.0), "{h:#?}");
    assert_eq!(network("online"), "harbor:public");
    assert_eq!(
        std::fs::read_to_string(offline.join("task.toml")).unwrap(),
        toml_before
    );
    let l = run_dir(
        Arc::new(LocalEngine::default()),
        &set,
        AgentSpec::Oracle,
        &tmp.path().join("local"),
        1,
    )
    .await;
    let local_offline = l.trials.iter().find(|t| t.task == "offline").unwrap();
    assert_eq!(local_offline.reward, Some(1.0), "{l:#?}");
}

/// A task.toml the engine cannot add `network_mode` to (an inline `environment` table) is
/// refused as unsupported, naming the task, instead of running with Harbor's public default.
/// Refused before Harbor starts, so no harbor CLI is needed.
#[tokio::test]
async fn a_task_harbor_cannot_be_told_to_run_offline_is_unsupported() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("tasks");
    write_task(
        &set,
        "inline-env",
        "environment = { cpus = 1 }\n[verifier]\ntimeout_sec = 10\n",
        Some("#!/bin/bash\ntrue\n"),
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    let engine = HarborEngine {
        harbor_bin: "/nonexistent/harbor-never-started".into(),
        extra_args: vec![],
    };
    let r = run_dir(
        Arc::new(engine),
        &set,
        AgentSpec::Oracle,
        &tmp.path().join("out"),
        1,
    )
    .await;
    let e = r.trials[0].error.clone().unwrap();
    assert_eq!(e.kind, "unsupported_task", "{e:?}");
    assert!(e.message.contains("inline-env"), "{e:?}");
    assert!(e.message.contains("network_mode"), "{e:?}");
}
