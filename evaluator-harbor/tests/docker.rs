//! The docker engine against the real daemon with a locally built base image (no registry).
//! Skips (with the reason) when Docker is unavailable; with CI=true it fails instead.
use crate::common;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use evaluator_harbor::agent::{AgentManifest, AgentSpec};
use evaluator_harbor::engine::docker::{TRIAL_LABEL, extract_safely};
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::{Engine, EvaluationPlan, NoProgress, run_evaluation};
use evaluator_harbor::result::{TimeoutOwner, TrialStatus};

fn containers_labelled(trial: &str) -> Vec<String> {
    let o = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label={TRIAL_LABEL}={trial}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn oracle_gives_the_same_task_vector_on_local_and_docker() {
    let Some(d) = docker().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let set = testdata().join("tasks");
    let local = run_dir(
        Arc::new(LocalEngine::default()),
        &set,
        AgentSpec::Oracle,
        &tmp.path().join("local"),
        2,
    )
    .await;
    let dock = run_dir(d, &set, AgentSpec::Oracle, &tmp.path().join("docker"), 2).await;
    assert_eq!(dock.outcome, TrialStatus::BenchmarkComplete, "{dock:#?}");
    assert_eq!(vector_summary(&local), vector_summary(&dock));
    assert_eq!(local.score, dock.score);
    let t = dock
        .trials
        .iter()
        .find(|t| t.task == "json-reward")
        .unwrap();
    assert_eq!(t.rewards.get("style"), Some(&0.5));
    assert!(t.logs.agent_dir.join("oracle.txt").is_file());
    assert!(t.logs.verifier_dir.join("reward.json").is_file());
    assert_eq!(t.isolation.as_ref().unwrap().network, "container_none");
    for t in &dock.trials {
        assert!(
            containers_labelled(&t.trial_name).is_empty(),
            "container left for {}",
            t.trial_name
        );
    }
}

#[tokio::test]
async fn docker_timeouts_and_bad_rewards_are_classified_and_containers_removed() {
    let Some(d) = docker().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    let tok = token();
    let a = format!("d-agent-timeout-{tok}");
    let v = format!("d-nan-{tok}");
    let vt = format!("d-verifier-timeout-{tok}");
    write_task(
        &tasks,
        &a,
        "[agent]\ntimeout_sec = 1\n[verifier]\ntimeout_sec = 10\n",
        Some("#!/bin/bash\nsetsid sleep 300 &\nsleep 300\n"),
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    write_task(
        &tasks,
        &v,
        "[agent]\ntimeout_sec = 10\n[verifier]\ntimeout_sec = 10\n",
        Some("#!/bin/bash\ntrue\n"),
        Some("#!/bin/bash\necho nan > /logs/verifier/reward.txt\n"),
    );
    write_task(
        &tasks,
        &vt,
        "[agent]\ntimeout_sec = 10\n[verifier]\ntimeout_sec = 1\n",
        Some("#!/bin/bash\ntrue\n"),
        Some("#!/bin/bash\nsleep 300\n"),
    );
    let r = run_dir(d, &tasks, AgentSpec::Oracle, &tmp.path().join("out"), 2).await;
    let by = |n: &str| r.trials.iter().find(|t| t.task == n).unwrap();
    assert_eq!(by(&a).status, TrialStatus::Timeout, "{:#?}", by(&a));
    assert_eq!(by(&a).timeout_owner, Some(TimeoutOwner::Agent));
    assert!(by(&a).wall_time_sec < 60.0);
    assert_eq!(by(&v).status, TrialStatus::InfrastructureFailed);
    assert_eq!(by(&v).error.as_ref().unwrap().kind, "reward_non_finite");
    assert_eq!(by(&vt).status, TrialStatus::Timeout);
    assert_eq!(by(&vt).timeout_owner, Some(TimeoutOwner::Verifier));
    for t in &r.trials {
        assert!(
            containers_labelled(&t.trial_name).is_empty(),
            "container left for {}",
            t.trial_name
        );
    }
}

#[tokio::test]
async fn a_cancelled_trial_still_removes_its_container() {
    let Some(d) = docker().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    let name = format!("d-cancel-{}", token());
    write_task(
        &tasks,
        &name,
        "[agent]\ntimeout_sec = 300\n",
        Some("#!/bin/bash\nsleep 300\n"),
        Some("#!/bin/bash\n"),
    );
    let mut plan =
        EvaluationPlan::for_dir(&tasks, AgentSpec::Oracle, tmp.path().join("out")).unwrap();
    plan.n_concurrent = 1;
    let engine: Arc<dyn Engine> = d;
    let h = tokio::spawn(async move { run_evaluation(engine, &plan, &NoProgress).await });
    let trial = format!("{name}__r0");
    let mut seen = false;
    for _ in 0..300 {
        if !containers_labelled(&trial).is_empty() {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "the trial's container never appeared");
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.abort(); // what Ctrl-C does to the evaluation future
    let _ = h.await;
    let mut gone = false;
    for _ in 0..100 {
        if containers_labelled(&trial).is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "container survived cancellation");
}

#[tokio::test]
async fn command_agents_run_in_the_container() {
    let Some(d) = docker().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    write_exec(
        &target.join("run.sh"),
        "#!/bin/bash\nread -r line\n[ -e /tests ] && echo SAW-TESTS\necho \"Hello, world!\" > /app/hello.txt\n",
    );
    std::fs::write(target.join("agent.toml"), "command = [\"./run.sh\"]\n").unwrap();
    let agent = AgentSpec::Target(AgentManifest::load(&target).unwrap());
    let r = run_dir(
        d,
        &testdata().join("tasks/hello"),
        agent,
        &tmp.path().join("out"),
        1,
    )
    .await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(t.reward, Some(1.0));
    let log = std::fs::read_to_string(t.logs.agent_dir.join("agent.txt")).unwrap_or_default();
    assert!(!log.contains("SAW-TESTS"), "the agent saw /tests");
}

#[test]
fn hostile_tar_entries_are_refused_on_copy_out() {
    fn raw_entry(
        b: &mut tar::Builder<Vec<u8>>,
        name: &str,
        kind: tar::EntryType,
        link: Option<&str>,
        data: &[u8],
    ) {
        let mut h = tar::Header::new_gnu();
        {
            let n = &mut h.as_gnu_mut().unwrap().name;
            n[..name.len()].copy_from_slice(name.as_bytes());
        }
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        if let Some(l) = link {
            h.set_link_name(l).unwrap();
        }
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    let mut b = tar::Builder::new(Vec::new());
    raw_entry(&mut b, "verifier/", tar::EntryType::Directory, None, b"");
    raw_entry(
        &mut b,
        "verifier/reward.txt",
        tar::EntryType::Regular,
        None,
        b"1\n",
    );
    raw_entry(
        &mut b,
        "verifier/../../escape.txt",
        tar::EntryType::Regular,
        None,
        b"x",
    );
    raw_entry(&mut b, "/etc/evil", tar::EntryType::Regular, None, b"x");
    raw_entry(
        &mut b,
        "verifier/link",
        tar::EntryType::Symlink,
        Some("/etc"),
        b"",
    );
    raw_entry(
        &mut b,
        "verifier/link/passwd",
        tar::EntryType::Regular,
        None,
        b"x",
    );
    let bytes = b.into_inner().unwrap();
    let d = tempfile::tempdir().unwrap();
    let dest = d.path().join("out/verifier");
    std::fs::create_dir_all(&dest).unwrap();
    let warnings = extract_safely(&bytes, &dest).unwrap();
    assert_eq!(
        std::fs::read_to_string(dest.join("reward.txt")).unwrap(),
        "1\n"
    );
    assert!(!d.path().join("escape.txt").exists() && !d.path().join("out/escape.txt").exists());
    assert!(
        std::fs::symlink_metadata(dest.join("link"))
            .map(|m| !m.file_type().is_symlink())
            .unwrap_or(true)
    );
    assert!(warnings.len() >= 3, "{warnings:?}");
}
