//! The evaluation protocol's knobs in the engines: timeout multipliers, host variables
//! passed to the agent and the verifier (whose values no file may hold), and retries of
//! infrastructure failures, every attempt kept.
use crate::common;
use crate::model_gateway::{answer_task, evaluate, python_agent};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use common::gateway::{TestGateway, write_answer_script};
use common::*;
use evaluator_harbor::agent::{AgentManifest, AgentSpec};
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::{BoxFuture, Engine, TrialRequest, failed_trial};
use evaluator_harbor::gateway::TrialSettings;
use evaluator_harbor::result::{TimeoutOwner, TrialError, TrialResult, TrialStatus};

fn local() -> Arc<dyn Engine> {
    Arc::new(LocalEngine::default())
}

fn bash_agent(root: &Path, script: &str) -> AgentSpec {
    let d = root.join("target");
    write_exec(&d.join("run.sh"), script);
    std::fs::write(d.join("agent.toml"), "command = [\"./run.sh\"]\n").unwrap();
    AgentSpec::Target(AgentManifest::load(&d).unwrap())
}

fn multipliers(agent: f64, verifier: f64) -> TrialSettings {
    TrialSettings {
        agent_timeout_multiplier: agent,
        verifier_timeout_multiplier: verifier,
        ..Default::default()
    }
}

#[tokio::test]
async fn timeout_multipliers_scale_the_tasks_timeouts() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    // The agent needs 2 s of its 1.5, the verifier 1.5 s of its 1.
    write_task(
        &tasks,
        "slow",
        "[agent]\ntimeout_sec = 1.5\n[verifier]\ntimeout_sec = 1\n",
        None,
        Some("#!/bin/bash\nsleep 1.5\ncat /app/done > /logs/verifier/reward.txt\n"),
    );
    let agent = bash_agent(tmp.path(), "#!/bin/bash\nsleep 2\necho 1 > /app/done\n");
    let run = |a: f64, v: f64, out: &str| {
        let (tasks, agent, out) = (tasks.clone(), agent.clone(), tmp.path().join(out));
        async move { evaluate(local(), &tasks, agent, &out, multipliers(a, v), 0).await }
    };
    let plain = run(1.0, 1.0, "plain").await;
    let t = &plain.trials[0];
    assert_eq!(t.status, TrialStatus::Timeout, "{t:#?}");
    assert_eq!(t.timeout_owner, Some(TimeoutOwner::Agent));
    let msg = &t.error.as_ref().unwrap().message;
    assert!(msg.contains("[agent].timeout_sec = 1.5 s and"), "{msg}");

    let longer = run(3.0, 3.0, "longer").await;
    let t = &longer.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(t.reward, Some(1.0));

    let verifier_short = run(3.0, 1.0, "verifier-short").await;
    let t = &verifier_short.trials[0];
    assert_eq!(t.timeout_owner, Some(TimeoutOwner::Verifier), "{t:#?}");

    let agent_shorter = run(0.5, 3.0, "agent-shorter").await;
    let t = &agent_shorter.trials[0];
    let msg = &t.error.as_ref().unwrap().message;
    assert!(
        msg.contains("[agent].timeout_sec = 1.5 s × agent_timeout_multiplier 0.5 = 0.75 s"),
        "{msg}"
    );

    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let r = run(bad, 1.0, "bad").await;
        let t = &r.trials[0];
        assert_eq!(t.status, TrialStatus::InfrastructureFailed, "{t:#?}");
        let msg = &t.error.as_ref().unwrap().message;
        assert!(
            msg.contains("agent_timeout_multiplier must be a finite number > 0"),
            "{msg}"
        );
    }
}

/// Every regular file under `dir` (links not followed) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file()
                && std::fs::read(e.path())
                    .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                hits.push(e.path().display().to_string());
            }
        }
    }
    hits
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn passed_variables_reach_their_phase_only_and_no_file_on_local() {
    check_passed_variables(local()).await;
}

#[tokio::test]
async fn passed_variables_reach_their_phase_only_and_no_file_on_docker() {
    let Some(d) = docker().await else { return };
    check_passed_variables(d).await;
}

async fn check_passed_variables(engine: Arc<dyn Engine>) {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    let agent_secret = format!("agent-secret-{}", token());
    let verifier_secret = format!("verifier-secret-{}", token());
    let d = answer_task(&tasks, &format!("env-{}", token()));
    // The verifier sees its own variable (checked by hash) and not the agent's.
    write_exec(
        &d.join("tests/test.sh"),
        &format!(
            "#!/bin/bash\nh=$(printf %s \"$EVOLVE_TEST_VERIFIER_SECRET\" | sha256sum | cut -d' ' -f1)\nif [ \"$h\" = {} ] && [ -z \"${{EVOLVE_TEST_AGENT_SECRET+x}}\" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
            sha256_hex(&verifier_secret)
        ),
    );
    let agent = python_agent(tmp.path(), &[]);
    let gw = TestGateway::new(write_answer_script("42"), None);
    let settings = TrialSettings {
        gateway: Some(gw.clone()),
        agent_env: vec![("EVOLVE_TEST_AGENT_SECRET".into(), agent_secret.clone())],
        verifier_env: vec![(
            "EVOLVE_TEST_VERIFIER_SECRET".into(),
            verifier_secret.clone(),
        )],
        ..Default::default()
    };
    let out = tmp.path().join("out");
    let r = evaluate(engine, &tasks, agent, &out, settings.clone(), 0).await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(
        t.reward,
        Some(1.0),
        "the verifier saw only its own variable"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.logs.agent_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["agent_secret_sha256"], sha256_hex(&agent_secret));
    assert_eq!(report["sees_verifier_secret"], false);
    for secret in [&agent_secret, &verifier_secret] {
        let hits = files_containing(tmp.path(), secret);
        assert!(hits.is_empty(), "{secret} was written to {hits:?}");
    }
    // Nor does a settings dump show them.
    let shown = format!("{settings:?}");
    assert!(!shown.contains(&agent_secret) && !shown.contains(&verifier_secret));
}

/// Fails its first `failures` trials with `status` (leaving a file in the trial's
/// directory), then runs them on the local engine.
struct Flaky {
    inner: LocalEngine,
    failures: u32,
    status: TrialStatus,
    calls: AtomicU32,
}

impl Engine for Flaky {
    fn name(&self) -> &'static str {
        "local"
    }
    fn run_trial<'a>(&'a self, req: &'a TrialRequest) -> BoxFuture<'a, TrialResult> {
        Box::pin(async move {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                std::fs::write(req.trial_dir.join("flaky.txt"), format!("attempt {n}\n")).unwrap();
                let kind = if self.status == TrialStatus::CandidateInvalid {
                    "invalid_agent"
                } else {
                    "engine_error"
                };
                return failed_trial(
                    req,
                    "local",
                    self.status,
                    TrialError::new(kind, format!("flaky failure {n}")),
                );
            }
            self.inner.run_trial(req).await
        })
    }
}

fn flaky(failures: u32, status: TrialStatus) -> Arc<Flaky> {
    Arc::new(Flaky {
        inner: LocalEngine::default(),
        failures,
        status,
        calls: AtomicU32::new(0),
    })
}

#[tokio::test]
async fn infrastructure_failures_are_retried_and_every_attempt_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let hello = testdata().join("tasks/hello");
    let run = |engine: Arc<Flaky>, retries: u32, out: &str| {
        let (hello, out) = (hello.clone(), tmp.path().join(out));
        async move {
            let r = evaluate(
                engine,
                &hello,
                AgentSpec::Oracle,
                &out,
                Default::default(),
                retries,
            )
            .await;
            (r, out.join("trials"))
        }
    };

    // One failure, two retries allowed: the second attempt succeeds.
    let e = flaky(1, TrialStatus::InfrastructureFailed);
    let (r, trials) = run(e.clone(), 2, "recovers").await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(r.score, Some(1.0));
    assert_eq!(e.calls.load(Ordering::SeqCst), 2);
    assert_eq!(t.logs.trial_dir, trials.join("hello__r0.retry-1"));
    assert_eq!(t.attempts.len(), 1);
    let first = &t.attempts[0];
    assert_eq!(first.trial_dir, trials.join("hello__r0"));
    assert_eq!(first.status, TrialStatus::InfrastructureFailed);
    assert_eq!(first.error.as_ref().unwrap().message, "flaky failure 0");
    // The first attempt's directory is as it was left, its own result included.
    assert!(trials.join("hello__r0/flaky.txt").is_file());
    let kept: TrialResult =
        serde_json::from_slice(&std::fs::read(trials.join("hello__r0/result.json")).unwrap())
            .unwrap();
    assert_eq!(kept.status, TrialStatus::InfrastructureFailed);
    let last: TrialResult = serde_json::from_slice(
        &std::fs::read(trials.join("hello__r0.retry-1/result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(last.attempts, t.attempts);

    // Three failures, one retry: two attempts, both kept, the last one's failure stands.
    let e = flaky(3, TrialStatus::InfrastructureFailed);
    let (r, trials) = run(e.clone(), 1, "gives-up").await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::InfrastructureFailed);
    assert_eq!(e.calls.load(Ordering::SeqCst), 2);
    assert_eq!(t.attempts.len(), 1);
    assert!(trials.join("hello__r0/flaky.txt").is_file());
    assert!(trials.join("hello__r0.retry-1/flaky.txt").is_file());
    assert!(!trials.join("hello__r0.retry-2").exists());

    // A candidate's failure is its own: never retried.
    let e = flaky(1, TrialStatus::CandidateInvalid);
    let (r, trials) = run(e.clone(), 3, "candidate").await;
    assert_eq!(r.trials[0].status, TrialStatus::CandidateInvalid);
    assert_eq!(e.calls.load(Ordering::SeqCst), 1);
    assert!(r.trials[0].attempts.is_empty());
    assert!(!trials.join("hello__r0.retry-1").exists());

    // No retries allowed: one attempt.
    let e = flaky(1, TrialStatus::InfrastructureFailed);
    let (r, _) = run(e.clone(), 0, "none").await;
    assert_eq!(r.trials[0].status, TrialStatus::InfrastructureFailed);
    assert_eq!(e.calls.load(Ordering::SeqCst), 1);
}
