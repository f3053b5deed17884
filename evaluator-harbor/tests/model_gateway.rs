//! A real agent under the model gateway, on the local and docker engines: a stdlib Python
//! agent (testdata/gateway-agent) reaches the test's gateway (common::gateway) through
//! OPENAI_BASE_URL with its trial's token, and nothing else on this machine; its spend is
//! metered into the result, its exchanges into gateway.jsonl, and its trajectory into
//! trajectory.json; a spent budget classifies the trial as budget-exhausted.
use crate::common;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::gateway::{
    COMPLETION_TOKENS, PROMPT_TOKENS, TestGateway, USD_PER_CALL, write_answer_script,
};
use common::*;
use evaluator_harbor::agent::{AgentManifest, AgentSpec};
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::{Engine, EvaluationPlan, NoProgress, run_evaluation};
use evaluator_harbor::gateway::{Exchange, TrialSettings};
use evaluator_harbor::result::{EvaluationResult, TrialResult, TrialStatus};
use evaluator_harbor::trajectory::{self, Source, Trajectory};
use serde_json::Value;

/// A task whose verifier checks that `/app/answer.txt` holds 42.
pub fn answer_task(root: &Path, name: &str) -> PathBuf {
    let d = write_task(
        root,
        name,
        "[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 30\n",
        None,
        Some(
            "#!/bin/bash\nif [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
        ),
    );
    std::fs::write(
        d.join("environment/Dockerfile"),
        format!("FROM {PYTHON_IMAGE}\nWORKDIR /app\n"),
    )
    .unwrap();
    std::fs::write(d.join("instruction.md"), "Write 42 to /app/answer.txt.\n").unwrap();
    d
}

/// The Python agent in `root/target`, with `env` in its agent.toml.
pub fn python_agent(root: &Path, env: &[(&str, &str)]) -> AgentSpec {
    let d = root.join("target");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::copy(
        testdata().join("gateway-agent/agent.py"),
        d.join("agent.py"),
    )
    .unwrap();
    let mut toml = "command = [\"./agent.py\"]\n[env]\n".to_string();
    for (k, v) in env {
        toml.push_str(&format!("{k} = {}\n", toml_string(v)));
    }
    std::fs::write(d.join("agent.toml"), toml).unwrap();
    AgentSpec::Target(AgentManifest::load(&d).unwrap())
}

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

pub async fn evaluate(
    engine: Arc<dyn Engine>,
    tasks: &Path,
    agent: AgentSpec,
    out: &Path,
    settings: TrialSettings,
    max_retries: u32,
) -> EvaluationResult {
    let mut plan = EvaluationPlan::for_dir(tasks, agent, out.to_path_buf()).unwrap();
    plan.settings = settings;
    plan.max_retries = max_retries;
    run_evaluation(engine, &plan, &NoProgress).await
}

fn gated(gw: &Arc<TestGateway>) -> TrialSettings {
    TrialSettings {
        gateway: Some(gw.clone()),
        ..Default::default()
    }
}

fn report(t: &TrialResult) -> Value {
    let p = t.logs.agent_dir.join("report.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}; trial {t:#?}", p.display()));
    serde_json::from_str(&text).unwrap()
}

fn trajectory_of(t: &TrialResult) -> Trajectory {
    let p = t
        .logs
        .trajectory
        .clone()
        .expect("the trial has a trajectory");
    assert_eq!(p, trajectory::path(&t.logs.trial_dir));
    let bytes = std::fs::read(&p).unwrap();
    // What the engine wrote passes the checks an agent's own file must pass.
    evaluator_harbor::trajectory::build::parse_agent(&bytes)
        .unwrap_or_else(|e| panic!("{} is not valid ATIF: {e}", p.display()))
}

fn exchanges(t: &TrialResult) -> Vec<Exchange> {
    std::fs::read_to_string(t.logs.trial_dir.join("gateway.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The host's addresses other than loopback (`ip -o addr`).
fn host_ips() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-o", "addr", "show"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter_map(|l| {
            let mut w = l
                .split_whitespace()
                .skip_while(|w| *w != "inet" && *w != "inet6");
            w.next()?;
            let ip = w.next()?.split('/').next()?.to_string();
            (ip != "127.0.0.1" && ip != "::1" && !ip.starts_with("fe80")).then_some(ip)
        })
        .collect()
}

/// Listeners the agent must not reach: one on the host's 127.0.0.1, one on every
/// interface; each is checked to be reachable from the test itself, so a failed attempt
/// from the agent means something.
struct Bait {
    loopback: TcpListener,
    everywhere: TcpListener,
    targets: Vec<(String, u16)>,
}

impl Bait {
    fn new() -> Bait {
        let loopback = TcpListener::bind("127.0.0.1:0").unwrap();
        let everywhere = TcpListener::bind("0.0.0.0:0").unwrap();
        let (lp, ep) = (
            loopback.local_addr().unwrap().port(),
            everywhere.local_addr().unwrap().port(),
        );
        let mut targets = vec![("127.0.0.1".to_string(), lp), ("127.0.0.1".to_string(), ep)];
        let ips = host_ips();
        assert!(
            ips.iter().any(|i| !i.contains(':')),
            "this machine should have a non-loopback IPv4 address: {ips:?}"
        );
        for ip in ips.iter().filter(|i| !i.contains(':')) {
            targets.push((ip.clone(), ep));
        }
        for (h, p) in &targets {
            assert!(
                std::net::TcpStream::connect((h.as_str(), *p)).is_ok(),
                "the test itself cannot reach {h}:{p}"
            );
        }
        for l in [&loopback, &everywhere] {
            l.set_nonblocking(true).unwrap();
            while l.accept().is_ok() {} // the test's own connections
        }
        Bait {
            loopback,
            everywhere,
            targets,
        }
    }

    fn env(&self) -> String {
        serde_json::to_string(&self.targets).unwrap()
    }

    fn untouched(&self) {
        for l in [&self.loopback, &self.everywhere] {
            assert!(
                l.accept().is_err(),
                "the agent connected to the test's listener {:?}",
                l.local_addr()
            );
        }
    }
}

/// The agent got its answer, every probe failed, and the bait saw nothing.
fn check_reach_only_the_gateway(t: &TrialResult, bait: &Bait, gw: &TestGateway) {
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(
        t.reward,
        Some(1.0),
        "the gateway's answer was written: {t:#?}"
    );
    let r = report(t);
    let (trial, port) = gw.opened.lock().unwrap()[0].clone();
    assert_eq!(trial, t.trial_name);
    assert_eq!(r["base_url"], format!("http://127.0.0.1:{port}/v1"));
    assert_eq!(r["api_base_matches"], true);
    let probes = r["probes"].as_array().expect("the agent probed");
    assert!(probes.len() >= bait.targets.len() + 20, "{probes:?}");
    for p in probes {
        assert_ne!(p["result"], "connected", "the agent reached {p}");
    }
    bait.untouched();
    assert_eq!(gw.open_now(), 0, "the gateway still serves the trial");
}

fn check_metered(t: &TrialResult, calls: u64) {
    let u = t.usage.as_ref().expect("metered usage");
    assert_eq!(u.calls, calls);
    assert_eq!(u.prompt_tokens, PROMPT_TOKENS * calls);
    assert_eq!(u.completion_tokens, COMPLETION_TOKENS * calls);
    assert_eq!(t.cost_usd, Some(USD_PER_CALL * calls as f64));
    assert_eq!(exchanges(t).len() as u64, calls);
}

#[tokio::test]
async fn a_local_agent_reaches_the_gateway_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    answer_task(&tasks, "answer");
    let bait = Bait::new();
    let agent = python_agent(tmp.path(), &[("PROBE_TARGETS", &bait.env())]);
    let gw = TestGateway::new(write_answer_script("42"), None);
    let r = evaluate(
        Arc::new(LocalEngine::default()),
        &tasks,
        agent,
        &tmp.path().join("out"),
        gated(&gw),
        0,
    )
    .await;
    let t = &r.trials[0];
    check_reach_only_the_gateway(t, &bait, &gw);
    check_metered(t, 2);
    assert_eq!(r.cost_usd, 2.0 * USD_PER_CALL);
    assert!(!r.budget_exhausted);
    let iso = t.isolation.as_ref().unwrap();
    assert_eq!(iso.network, "namespace:gateway_only", "{iso:?}");
    // The trajectory is the gateway's: system, user, the tool call with its result, the end.
    let tr = trajectory_of(t);
    let kinds: Vec<Source> = tr.steps.iter().map(|s| s.source).collect();
    assert_eq!(
        kinds,
        [Source::System, Source::User, Source::Agent, Source::Agent],
        "{tr:#?}"
    );
    assert_eq!(tr.session_id, t.trial_name);
    let call = &tr.steps[2];
    assert_eq!(call.tool_calls[0].function_name, "write_file");
    assert_eq!(call.tool_calls[0].arguments["content"], "42");
    let obs = &call.observation.as_ref().unwrap().results[0];
    assert_eq!(obs.source_call_id.as_deref(), Some("call-write-1"));
    assert_eq!(obs.content, "wrote 2 bytes to /app/answer.txt");
    assert_eq!(call.metrics.as_ref().unwrap().cost_usd, Some(USD_PER_CALL));
    assert_eq!(
        tr.steps[3].reasoning_content.as_deref(),
        Some("the tool succeeded")
    );
    let fm = tr.final_metrics.as_ref().unwrap();
    assert_eq!(fm.total_cost_usd, Some(2.0 * USD_PER_CALL));
    assert_eq!(fm.total_prompt_tokens, Some(2 * PROMPT_TOKENS));
    assert_eq!(fm.total_steps, Some(4));
    // The result on disk says the same.
    let on_disk: TrialResult =
        serde_json::from_slice(&std::fs::read(t.logs.trial_dir.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(on_disk.usage, t.usage);
    assert_eq!(on_disk.logs.trajectory, t.logs.trajectory);
}

/// The control: the same probes from an agent on the host's network (an unconfined trial,
/// an explicit opt-in) do reach the bait, so the failures above are the jail's doing.
#[tokio::test]
async fn the_probes_do_reach_the_bait_from_the_hosts_network() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    answer_task(&tasks, "control");
    let bait = Bait::new();
    let agent = python_agent(tmp.path(), &[("PROBE_TARGETS", &bait.env())]);
    // No tool call: an unconfined agent must not write to the host's /app.
    let say_done: common::gateway::Script =
        Arc::new(|_| serde_json::json!({"role": "assistant", "content": "nothing to do"}));
    let gw = TestGateway::new(say_done, None);
    let engine = LocalEngine {
        unconfined: true,
        ..LocalEngine::default()
    };
    let r = evaluate(
        Arc::new(engine),
        &tasks,
        agent,
        &tmp.path().join("out"),
        gated(&gw),
        0,
    )
    .await;
    let t = &r.trials[0];
    let rep = report(t);
    assert_eq!(rep["final"], "nothing to do", "{t:#?}");
    let probes = rep["probes"].as_array().unwrap();
    for (h, p) in &bait.targets {
        let hit = probes
            .iter()
            .find(|x| x["host"] == h.as_str() && x["port"] == *p)
            .unwrap();
        assert_eq!(hit["result"], "connected", "{hit}");
    }
    assert_eq!(t.isolation.as_ref().unwrap().network, "host");
    check_metered(t, 1);
}

#[tokio::test]
async fn a_docker_agent_reaches_the_gateway_and_nothing_else() {
    let Some(d) = docker().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    answer_task(&tasks, &format!("d-answer-{}", token()));
    let bait = Bait::new();
    let agent = python_agent(tmp.path(), &[("PROBE_TARGETS", &bait.env())]);
    let gw = TestGateway::new(write_answer_script("42"), None);
    let r = evaluate(d, &tasks, agent, &tmp.path().join("out"), gated(&gw), 0).await;
    let t = &r.trials[0];
    check_reach_only_the_gateway(t, &bait, &gw);
    check_metered(t, 2);
    assert_eq!(
        t.isolation.as_ref().unwrap().network,
        "container_none:gateway_only"
    );
    assert_eq!(trajectory_of(t).steps.len(), 4);
}

#[tokio::test]
async fn the_agents_own_trajectory_is_merged_with_the_metered_one() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    answer_task(&tasks, "merge");
    let agent = python_agent(tmp.path(), &[("WRITE_TRAJECTORY", "1")]);
    let gw = TestGateway::new(write_answer_script("42"), None);
    let r = evaluate(
        Arc::new(LocalEngine::default()),
        &tasks,
        agent,
        &tmp.path().join("out"),
        gated(&gw),
        0,
    )
    .await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    let tr = trajectory_of(t);
    // The agent's account (its name, its steps, its tool call and output) ...
    assert_eq!(tr.agent.name, "py-test-agent");
    assert_eq!(tr.session_id, t.trial_name);
    assert_eq!(tr.extra["agent_session_id"], "py-agent-session");
    let kinds: Vec<Source> = tr.steps.iter().map(|s| s.source).collect();
    assert_eq!(
        kinds,
        [Source::User, Source::Agent, Source::Agent],
        "{tr:#?}"
    );
    let call = &tr.steps[1];
    assert_eq!(
        call.observation.as_ref().unwrap().results[0].content,
        "wrote 2 bytes to /app/answer.txt"
    );
    // ... with the host's numbers: the agent claimed 1 token and $0 per step.
    for s in &tr.steps[1..] {
        let m = s.metrics.as_ref().unwrap();
        assert_eq!(m.prompt_tokens, Some(PROMPT_TOKENS), "{s:#?}");
        assert_eq!(m.cost_usd, Some(USD_PER_CALL));
        assert_eq!(s.extra["agent_reported_metrics"]["prompt_tokens"], 1);
        assert_eq!(s.model_name.as_deref(), Some("test-model"));
    }
    let fm = tr.final_metrics.as_ref().unwrap();
    assert_eq!(fm.total_cost_usd, Some(2.0 * USD_PER_CALL));
    assert_eq!(
        tr.extra["agent_reported_final_metrics"]["total_cost_usd"],
        0.0
    );
    assert!(tr.notes.is_none(), "{:?}", tr.notes);
    check_metered(t, 2);

    // A malformed file is named in the notes; the metered trajectory stands.
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    answer_task(&tasks, "bad");
    let agent = python_agent(tmp.path(), &[("WRITE_TRAJECTORY", "bad")]);
    let r = evaluate(
        Arc::new(LocalEngine::default()),
        &tasks,
        agent,
        &tmp.path().join("out"),
        gated(&gw),
        0,
    )
    .await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    let tr = trajectory_of(t);
    let notes = tr.notes.clone().unwrap_or_default();
    assert!(
        notes.contains("/logs/agent/trajectory.json was not used: it is not JSON"),
        "{notes}"
    );
    assert_eq!(tr.steps.len(), 4);
}

#[tokio::test]
async fn a_spent_budget_makes_the_trial_budget_exhausted_not_a_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    answer_task(&tasks, "broke");
    let agent = python_agent(tmp.path(), &[]);
    // One call is paid for; the agent writes the answer, and its second call gets a 429.
    let gw = TestGateway::new(write_answer_script("42"), Some(1));
    let r = evaluate(
        Arc::new(LocalEngine::default()),
        &tasks,
        agent,
        &tmp.path().join("out"),
        gated(&gw),
        2,
    )
    .await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::InfrastructureFailed, "{t:#?}");
    let e = t.error.as_ref().unwrap();
    assert_eq!(e.kind, "budget_exhausted");
    assert!(e.message.contains("budget ran out"), "{}", e.message);
    assert!(e.message.contains("not a failure of the candidate"));
    assert!(r.budget_exhausted);
    assert!(t.attempts.is_empty(), "a spent budget is never retried");
    assert_eq!(gw.opened.lock().unwrap().len(), 1);
    assert_eq!(r.score, None);
    assert_eq!(report(t)["http_error"], 429);
    let u = t.usage.as_ref().unwrap();
    assert_eq!((u.calls, u.refused_by_budget), (2, 1));
    assert_eq!(t.cost_usd, Some(USD_PER_CALL));
    // The verifier was skipped: an unscored trial needs no reward.
    assert!(!t.logs.verifier_dir.join("reward.txt").exists());
    let tr = trajectory_of(t);
    assert_eq!(
        tr.extra["unanswered_requests"][0]["outcome"],
        "budget_exhausted"
    );
    assert_eq!(exchanges(t)[1].outcome, "budget_exhausted");
}

/// The oracle runs the task's own solution, which calls no model: no gateway is opened for
/// it, and nothing is metered.
#[tokio::test]
async fn only_command_agents_are_given_the_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = TestGateway::new(write_answer_script("42"), None);
    let r = evaluate(
        Arc::new(LocalEngine::default()),
        &testdata().join("tasks/hello"),
        AgentSpec::Oracle,
        &tmp.path().join("out"),
        gated(&gw),
        0,
    )
    .await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert!(gw.opened.lock().unwrap().is_empty());
    assert_eq!((t.usage.as_ref(), t.logs.trajectory.as_ref()), (None, None));
    assert_eq!(t.isolation.as_ref().unwrap().network, "namespace");
}

/// A command agent that only leaves a mark that it ran.
fn marking_agent(root: &Path) -> AgentSpec {
    let d = root.join("marker-agent");
    write_exec(
        &d.join("run.sh"),
        "#!/bin/sh\ntouch \"$EVOLVE_AGENT_LOGS_DIR/ran\"\n",
    );
    std::fs::write(d.join("agent.toml"), "command = [\"./run.sh\"]\n").unwrap();
    AgentSpec::Target(AgentManifest::load(&d).unwrap())
}

/// Drop `CAP_SYS_ADMIN` from the calling thread's effective set. Capabilities are per
/// thread and inherited by the threads it starts, so the trial run from this thread (and
/// the thread that would make its namespace) lacks it, as a root evolve in a container
/// that withholds it does; other tests' threads keep it, and programs the trial execs (bwrap)
/// get root's full set again.
fn drop_sys_admin() {
    use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
    let mut caps = capabilities(None).unwrap();
    caps.effective.remove(CapabilitySet::SYS_ADMIN);
    set_capabilities(None, caps).unwrap();
    assert!(
        !capabilities(None)
            .unwrap()
            .effective
            .contains(CapabilitySet::SYS_ADMIN)
    );
}

/// Under the gateway, a contained agent may reach nothing but the gateway's listener in a
/// network namespace of its own. When that namespace cannot be made, the local engine must
/// refuse the trial before the agent starts, naming what is missing, and never fall back to
/// the host's network: not root (checked up front) or, for a root evolve, `CAP_SYS_ADMIN`
/// (dropped here from the trial's threads).
#[test]
fn a_gateway_trial_without_a_network_namespace_is_refused_naming_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    answer_task(&tasks, "answer");
    let agent = marking_agent(tmp.path());
    let gw = TestGateway::new(write_answer_script("42"), None);
    let out = tmp.path().join("out");
    let root = rustix::process::geteuid().is_root();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            if root {
                drop_sys_admin();
            }
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(evaluate(
                    Arc::new(LocalEngine::default()),
                    &tasks,
                    agent,
                    &out,
                    gated(&gw),
                    0,
                ))
        })
        .join()
        .unwrap()
    });
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::InfrastructureFailed, "{t:#?}");
    let err = t.error.as_ref().expect("the refusal is the trial's error");
    assert_eq!(err.kind, "engine_error", "{err:?}");
    let missing = if root { "CAP_SYS_ADMIN" } else { "not root" };
    assert!(
        err.message.contains("network namespace") && err.message.contains(missing),
        "the refusal names {missing:?}: {}",
        err.message
    );
    assert!(
        gw.opened.lock().unwrap().is_empty(),
        "the gateway served a trial it refused"
    );
    assert!(
        !t.logs.agent_dir.join("ran").exists(),
        "the agent ran although its namespace could not be made"
    );
}
