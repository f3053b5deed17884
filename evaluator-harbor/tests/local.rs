//! The local engine against real processes (no mocks).
use crate::common;
use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use evaluator_harbor::agent::{AgentManifest, AgentSpec};
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::{Engine, EvaluationPlan, NoProgress, run_evaluation};
use evaluator_harbor::result::{TimeoutOwner, TrialStatus};
use evaluator_harbor::split::{FrozenTaskSet, SplitName, SplitRatios};

fn local() -> Arc<dyn Engine> {
    Arc::new(LocalEngine::default())
}

#[tokio::test]
async fn oracle_solves_the_sample_set_on_local() {
    let out = tempfile::tempdir().unwrap();
    let r = run_dir(
        local(),
        &testdata().join("tasks"),
        AgentSpec::Oracle,
        out.path(),
        2,
    )
    .await;
    let v = vector_summary(&r);
    assert_eq!(
        v,
        vec![
            (
                "hello".to_string(),
                vec!["benchmark_complete:Some(1.0)".to_string()]
            ),
            (
                "json-reward".to_string(),
                vec!["benchmark_complete:Some(1.0)".to_string()]
            ),
            (
                "partial".to_string(),
                vec!["benchmark_complete:Some(0.25)".to_string()]
            ),
        ],
        "{r:#?}"
    );
    assert_eq!(r.outcome, TrialStatus::BenchmarkComplete);
    assert_eq!(r.expected_trials, 3);
    assert_eq!(r.score, Some(2.25 / 3.0));
    let json = r.trials.iter().find(|t| t.task == "json-reward").unwrap();
    assert_eq!(
        json.rewards,
        BTreeMap::from([("reward".into(), 1.0), ("style".into(), 0.5)])
    );
    let iso = json.isolation.as_ref().unwrap();
    assert_eq!(
        iso.network, "namespace",
        "tasks that do not allow the network get none: {iso:?}"
    );
    assert!(json.logs.verifier_dir.join("reward.json").is_file());
    assert!(out.path().join("evaluation.json").is_file());
    assert!(json.logs.trial_dir.join("result.json").is_file());
}

#[tokio::test]
async fn repetitions_multiply_expected_trials() {
    let out = tempfile::tempdir().unwrap();
    let mut plan = EvaluationPlan::for_dir(
        &testdata().join("tasks/hello"),
        AgentSpec::Oracle,
        out.path().into(),
    )
    .unwrap();
    plan.repetitions = 3;
    plan.n_concurrent = 3;
    let r = run_evaluation(local(), &plan, &NoProgress).await;
    assert_eq!(r.expected_trials, 3);
    assert_eq!(r.task_vector.tasks["hello"].trials.len(), 3);
    assert_eq!(r.score, Some(1.0));
}

fn agent_dir(root: &std::path::Path, script: &str) -> AgentSpec {
    let d = root.join("target");
    write_exec(&d.join("run.sh"), script);
    std::fs::write(d.join("agent.toml"), "command = [\"./run.sh\"]\n").unwrap();
    AgentSpec::Target(AgentManifest::load(&d).unwrap())
}

#[tokio::test]
async fn agent_cannot_read_tests_or_solution() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    let tok = token();
    let task = write_task(
        &tasks,
        "secret",
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 20\n",
        Some(&format!(
            "#!/bin/bash\necho SOLUTION-SECRET-{tok} > /app/x\n"
        )),
        Some(&format!(
            "#!/bin/bash\n# TESTS-SECRET-{tok}\n[ -e /app/probed ] && echo 1 > /logs/verifier/reward.txt\n"
        )),
    );
    let out = tmp.path().join("out");
    // Every way in we can think of: virtual paths, host paths of the source and the snapshot,
    // relative paths from /app.
    let src = task.display().to_string();
    let snap = out.join("tasks/secret").display().to_string();
    // The whole test tree (sources, snapshot, trial dirs) and the files directly in /tmp;
    // not all of /tmp, whose size on a shared machine would make the scan itself time out.
    let root = tmp.path().display().to_string();
    let script = format!(
        r#"#!/bin/bash
for p in /tests/test.sh /solution/solve.sh {src}/tests/test.sh {src}/solution/solve.sh {snap}/tests/test.sh {snap}/solution/solve.sh ../tests/test.sh ../solution/solve.sh; do
  if cat "$p" 2>/dev/null | grep -q "SEC""RET-{tok}"; then echo "$p" >> "$EVOLVE_APP_DIR/leaks"; fi
done
grep -rl "SEC""RET-{tok}" {root} 2>/dev/null >> "$EVOLVE_APP_DIR/leaks"
grep -l "SEC""RET-{tok}" /tmp/* 2>/dev/null >> "$EVOLVE_APP_DIR/leaks"
touch "$EVOLVE_APP_DIR/probed"
"#
    );
    // Sanity: the files the agent probes do exist on the host.
    assert!(
        std::fs::read_to_string(task.join("tests/test.sh"))
            .unwrap()
            .contains(&format!("SECRET-{tok}"))
    );
    let agent = agent_dir(tmp.path(), &script);
    let r = run_dir(local(), &tasks, agent, &out, 1).await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(t.reward, Some(1.0));
    let app = t.logs.trial_dir.join("root/app");
    assert!(app.join("probed").exists());
    let leaks = std::fs::read_to_string(app.join("leaks")).unwrap_or_default();
    assert!(leaks.is_empty(), "agent read protected files: {leaks}");
    assert_eq!(t.isolation.as_ref().unwrap().filesystem, "bubblewrap");
}

#[tokio::test]
async fn daemonized_children_do_not_survive_the_agent_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    write_task(
        &tasks,
        "t",
        "[agent]\ntimeout_sec = 1.0\n[verifier]\ntimeout_sec = 10\n",
        None,
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    let tok = token();
    // A classic double-fork daemon (setsid, new session, scrubbed env), then hang.
    let script = format!(
        r#"#!/bin/bash
setsid bash -c 'exec -a evolve-daemon-{tok}-a sleep 300' </dev/null >/dev/null 2>&1 &
( setsid env -i bash -c '(exec -a evolve-daemon-{tok}-b sleep 300) &' & ) </dev/null >/dev/null 2>&1
nohup bash -c 'exec -a evolve-daemon-{tok}-c sleep 300' >/dev/null 2>&1 &
sleep 0.3
echo started > "$EVOLVE_APP_DIR/started"
sleep 100
"#
    );
    let agent = agent_dir(tmp.path(), &script);
    let out = tmp.path().join("out");
    let r = run_dir(local(), &tasks, agent, &out, 1).await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::Timeout, "{t:#?}");
    assert_eq!(t.timeout_owner, Some(TimeoutOwner::Agent));
    assert!(
        t.logs.trial_dir.join("root/app/started").exists(),
        "the daemons were started"
    );
    assert!(t.wall_time_sec < 10.0);
    let left = procs_with_cmdline(&format!("evolve-daemon-{tok}"));
    assert!(left.is_empty(), "processes left behind: {left:?}");
    // The timeout counts as a scoreable 0 under the default policy.
    assert_eq!(r.score, Some(0.0));
}

#[tokio::test]
async fn daemons_left_by_a_finished_agent_are_reaped() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    write_task(
        &tasks,
        "t",
        "[agent]\ntimeout_sec = 20\n[verifier]\ntimeout_sec = 10\n",
        None,
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    let tok = token();
    let script = format!(
        "#!/bin/bash\nsetsid env -i bash -c 'exec -a evolve-daemon-{tok} sleep 300' </dev/null >/dev/null 2>&1 &\nsleep 0.2\nexit 3\n"
    );
    let agent = agent_dir(tmp.path(), &script);
    let r = run_dir(local(), &tasks, agent, &tmp.path().join("out"), 1).await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(t.agent_exit_code, Some(3));
    assert_eq!(
        std::fs::read_to_string(t.logs.agent_dir.join("exit-code.txt"))
            .unwrap()
            .trim(),
        "3"
    );
    assert!(procs_with_cmdline(&format!("evolve-daemon-{tok}")).is_empty());
}

#[tokio::test]
async fn environment_is_scrubbed_and_output_capped() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    write_task(
        &tasks,
        "t",
        "[agent]\ntimeout_sec = 20\n[verifier]\ntimeout_sec = 10\n[environment.env]\nGREETING = \"hi\"\n",
        None,
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    // SAFETY: set before any engine thread reads the environment of this process.
    unsafe {
        std::env::set_var("OPENAI_API_KEY", "sk-canary");
        std::env::set_var("HTTPS_PROXY", "http://proxy.canary:1");
    }
    let script =
        "#!/bin/bash\nenv > \"$EVOLVE_APP_DIR/env.txt\"\nhead -c 3000000 /dev/zero | tr '\\0' x\n";
    let agent = agent_dir(tmp.path(), script);
    let engine = LocalEngine {
        output_cap: 10_000,
        ..Default::default()
    };
    let r = run_dir(Arc::new(engine), &tasks, agent, &tmp.path().join("out"), 1).await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    let env = std::fs::read_to_string(t.logs.trial_dir.join("root/app/env.txt")).unwrap();
    assert!(!env.contains("canary"), "{env}");
    assert!(env.contains("GREETING=hi"));
    let log = std::fs::read(t.logs.agent_dir.join("agent.txt")).unwrap();
    assert!(log.len() < 11_000, "log is {} bytes", log.len());
    assert!(String::from_utf8_lossy(&log).contains("output capped"));
}

#[tokio::test]
async fn verifier_failures_are_classified() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    let toml = "[agent]\ntimeout_sec = 10\n[verifier]\ntimeout_sec = 1\n";
    let solve = Some("#!/bin/bash\ntrue\n");
    write_task(
        &tasks,
        "v-timeout",
        toml,
        solve,
        Some("#!/bin/bash\nsleep 30\necho 1 > /logs/verifier/reward.txt\n"),
    );
    write_task(
        &tasks,
        "v-nan",
        toml,
        solve,
        Some("#!/bin/bash\necho NaN > /logs/verifier/reward.txt\n"),
    );
    write_task(
        &tasks,
        "v-nothing",
        toml,
        solve,
        Some("#!/bin/bash\necho hello\n"),
    );
    write_task(
        &tasks,
        "v-garbage",
        toml,
        solve,
        Some("#!/bin/bash\necho 'all tests passed!' > /logs/verifier/reward.txt\n"),
    );
    write_task(
        &tasks,
        "v-json-garbage",
        toml,
        solve,
        Some("#!/bin/bash\necho '{\"reward\": \"1\"' > /logs/verifier/reward.json\n"),
    );
    write_task(
        &tasks,
        "v-json-inf",
        toml,
        solve,
        Some("#!/bin/bash\necho '{\"reward\": 1e999}' > /logs/verifier/reward.json\n"),
    );
    // Broken tasks are classified per trial too, never a crash of the run.
    write_task(
        &tasks,
        "x-bad-toml",
        "[verifier\ntimeout_sec = 1",
        solve,
        Some("#!/bin/bash\n"),
    );
    write_task(&tasks, "x-no-test", toml, solve, None);
    let r = run_dir(
        local(),
        &tasks,
        AgentSpec::Oracle,
        &tmp.path().join("out"),
        2,
    )
    .await;
    let by: BTreeMap<&str, _> = r.trials.iter().map(|t| (t.task.as_str(), t)).collect();
    let kind = |n: &str| {
        by[n]
            .error
            .as_ref()
            .map(|e| e.kind.clone())
            .unwrap_or_default()
    };
    assert_eq!(by["v-timeout"].status, TrialStatus::Timeout);
    assert_eq!(by["v-timeout"].timeout_owner, Some(TimeoutOwner::Verifier));
    for (n, k) in [
        ("v-nan", "reward_non_finite"),
        ("v-nothing", "reward_missing"),
        ("v-garbage", "reward_invalid"),
        ("v-json-garbage", "reward_invalid"),
        ("v-json-inf", "reward_invalid"),
        ("x-bad-toml", "invalid_task"),
        ("x-no-test", "invalid_task"),
    ] {
        assert_eq!(
            by[n].status,
            TrialStatus::InfrastructureFailed,
            "{n}: {:#?}",
            by[n]
        );
        assert_eq!(kind(n), k, "{n}");
    }
    assert!(
        by["x-bad-toml"]
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("task.toml")
    );
    assert!(
        by["x-no-test"]
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("tests/test.sh")
    );
    assert_eq!(r.outcome, TrialStatus::InfrastructureFailed);
    assert_eq!(r.score, None);
    assert_eq!(r.expected_trials, 8);
}

#[tokio::test]
async fn a_task_edited_after_freezing_is_refused_by_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    copy_dir(&testdata().join("tasks"), &tasks);
    let ratios = SplitRatios {
        train: 0.0,
        gate: 1.0,
        sealed: 0.0,
    };
    let frozen = FrozenTaskSet::freeze(&tasks, ratios, 7, 1).unwrap();
    let round_trip = FrozenTaskSet::from_json(&frozen.to_json()).unwrap();
    assert_eq!(round_trip, frozen);
    // Edit one task after init: the verifier now always passes.
    std::fs::write(
        tasks.join("partial/tests/test.sh"),
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let plan = EvaluationPlan::for_split(
        &frozen,
        SplitName::Gate,
        &tasks,
        AgentSpec::Oracle,
        tmp.path().join("out"),
    );
    let r = run_evaluation(local(), &plan, &NoProgress).await;
    let partial = r.trials.iter().find(|t| t.task == "partial").unwrap();
    assert_eq!(partial.status, TrialStatus::InfrastructureFailed);
    let e = partial.error.as_ref().unwrap();
    assert_eq!(e.kind, "digest_mismatch");
    assert!(
        e.message
            .contains("\"partial\" changed since the task set was frozen"),
        "{}",
        e.message
    );
    assert_eq!(partial.reward, None, "never silently scored");
    let hello = r.trials.iter().find(|t| t.task == "hello").unwrap();
    assert_eq!(hello.status, TrialStatus::BenchmarkComplete);
    assert_eq!(r.outcome, TrialStatus::InfrastructureFailed);
}

#[tokio::test]
async fn tasks_that_need_docker_are_refused_locally() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    let d = write_task(
        &tasks,
        "needs-run",
        "",
        Some("#!/bin/bash\n"),
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    std::fs::write(
        d.join("environment/Dockerfile"),
        "FROM ubuntu:24.04\nRUN apt-get update\n",
    )
    .unwrap();
    write_task(
        &tasks,
        "prebuilt",
        "[environment]\ndocker_image = \"alexgshaw/x:1\"\n",
        Some("#!/bin/bash\n"),
        Some("#!/bin/bash\n"),
    );
    let r = run_dir(
        local(),
        &tasks,
        AgentSpec::Oracle,
        &tmp.path().join("out"),
        1,
    )
    .await;
    for t in &r.trials {
        assert_eq!(t.status, TrialStatus::InfrastructureFailed);
        let e = t.error.as_ref().unwrap();
        assert_eq!(e.kind, "unsupported_task", "{e:?}");
        assert!(e.message.contains("needs Docker"), "{}", e.message);
    }
}

#[tokio::test]
async fn invalid_agent_is_candidate_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("target");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("agent.toml"), "command = []\n").unwrap();
    assert_eq!(
        AgentManifest::load(&d).unwrap_err().kind,
        evaluator_harbor::ErrorKind::InvalidAgent
    );
    // Malformed TOML is located, and its line shown with carets under the value.
    std::fs::write(d.join("agent.toml"), "# mine\ncommand = \"./agent.sh\"\n").unwrap();
    let e = AgentManifest::load(&d).unwrap_err();
    assert_eq!(e.kind, evaluator_harbor::ErrorKind::InvalidAgent);
    assert!(
        e.to_string().starts_with("malformed agent.toml: ")
            && e.to_string().ends_with(
                "(agent.toml:2:11 in the agent directory)\n  2 | command = \"./agent.sh\"\n    |           ^^^^^^^^^^^^"
            ),
        "{e}"
    );
    // A shipped program that is missing is refused when the manifest loads.
    std::fs::write(d.join("agent.toml"), "command = [\"./does-not-exist\"]\n").unwrap();
    assert_eq!(
        AgentManifest::load(&d).unwrap_err().kind,
        evaluator_harbor::ErrorKind::InvalidAgent
    );
    // A program looked up on PATH is checked when the trial starts.
    std::fs::write(
        d.join("agent.toml"),
        "command = [\"no-such-program-anywhere\"]\n",
    )
    .unwrap();
    let agent = AgentSpec::Target(AgentManifest::load(&d).unwrap());
    let r = run_dir(
        local(),
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
    assert_eq!(r.outcome, TrialStatus::CandidateInvalid);
}

/// A command agent that tries every way out of its trial we know of. Each attempt must fail,
/// and the trial must still be scored: the verifier pays 1 for having run the whole probe.
#[tokio::test]
async fn a_hostile_command_agent_reaches_nothing_outside_its_trial() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = token();
    // Stand-ins for what the host holds: a key directory, a workspace with an archive and
    // another generation's checkout, a task set, and a loopback listener.
    let keys = tmp.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("exp.key"), format!("KEY-CANARY-{tok}")).unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join(".evolve")).unwrap();
    std::fs::create_dir_all(ws.join("runs/gen-3/checkout")).unwrap();
    std::fs::write(ws.join(".evolve/archive.jsonl"), "{\"seq\":0}\n").unwrap();
    std::fs::write(ws.join("runs/gen-3/checkout/x"), format!("OTHER-GEN-{tok}")).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let home_keys = dirs_home().join(".local/share/evolve/keys");
    let tasks = tmp.path().join("tasks");
    for name in ["probe", "neighbour"] {
        write_task(
            &tasks,
            name,
            "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 20\n",
            None,
            Some(&format!(
                "#!/bin/bash\n# TESTS-{name}-{tok}\nsleep 1\n[ -e /app/probed ] && echo 1 > /logs/verifier/reward.txt\n"
            )),
        );
    }
    let (keys_s, ws_s, tasks_s, home_keys_s) = (
        keys.display().to_string(),
        ws.display().to_string(),
        tasks.display().to_string(),
        home_keys.display().to_string(),
    );
    let me = std::process::id();
    let script = format!(
        r#"#!/bin/bash
leak() {{ echo "$1" >> /app/leaks; }}
# the key directory, ours and the real one
cat {keys_s}/exp.key 2>/dev/null && leak "read the key"
ls {home_keys_s} 2>/dev/null && leak "listed the real key directory"
ls /root 2>/dev/null | grep -q . && leak "listed /root"
ls /home 2>/dev/null | grep -q . && leak "listed /home"
# the workspace
ls {ws_s} 2>/dev/null && leak "listed the workspace"
cat {ws_s}/.evolve/archive.jsonl 2>/dev/null && leak "read the archive"
echo forged >> {ws_s}/.evolve/archive.jsonl 2>/dev/null && leak "wrote the archive"
cat {ws_s}/runs/gen-3/checkout/x 2>/dev/null && leak "read another generation"
# the task set, and the tests of the trial running beside this one
grep -rl "TESTS-" {tasks_s} 2>/dev/null && leak "read the task set"
grep -rl "TESTS-neighbour-{tok}" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=dev 2>/dev/null && leak "read a neighbour's tests"
# the Docker socket, host processes
[ -e /var/run/docker.sock ] && leak "sees the docker socket"
[ -e /run/docker.sock ] && leak "sees the docker socket"
[ -e /proc/{me} ] && leak "sees the host test process"
ls /proc | grep -qx 1 || leak "expected a pid namespace of its own"
# writes outside /app and /logs/agent
for p in /x /usr/x /etc/x /logs/x /logs/verifier/reward.txt /agent/x /proc/x; do
  ( echo 1 > "$p" ) 2>/dev/null && leak "wrote $p"
done
# privileges
[ "$(id -u)" = 0 ] && leak "runs as uid 0"
grep -q '^CapEff:[[:space:]]*0*$' /proc/self/status || leak "has capabilities"
grep -q '^NoNewPrivs:[[:space:]]*1' /proc/self/status || leak "no_new_privs is off"
mount -t tmpfs x /tmp 2>/dev/null && leak "mounted a file system"
su -c true 2>/dev/null && leak "su worked"
grep -q shadow /etc/passwd && leak "odd passwd"
[ -e /etc/shadow ] && leak "sees /etc/shadow"
# a loopback listener of the host
( exec 3<>/dev/tcp/127.0.0.1/{port} ) 2>/dev/null && leak "connected to the host loopback"
# a planted link the host might write through after the phase
ln -s {keys_s}/exp.key /logs/agent/exit-code.txt
ln -s {keys_s}/exp.key /logs/agent/cost.json
touch /app/probed
# a bounded fork bomb: the process cap stops it, the trial goes on
python3 -c '
import os, time
n = 0
for i in range(1500):
    try:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["evolve-bomb-{tok}", "30"])
        n += 1
    except OSError:
        break
open("/app/forks", "w").write(str(n))
'
exit 7
"#
    );
    let agent = agent_dir(tmp.path(), &script);
    let out = tmp.path().join("out");
    let r = run_dir(local(), &tasks, agent, &out, 2).await;
    for t in &r.trials {
        assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
        assert_eq!(t.reward, Some(1.0), "{t:#?}");
        let app = t.logs.trial_dir.join("root/app");
        let leaks = std::fs::read_to_string(app.join("leaks")).unwrap_or_default();
        assert!(leaks.is_empty(), "{}: {leaks}", t.task);
        let iso = t.isolation.as_ref().unwrap();
        assert_eq!(iso.filesystem, "bubblewrap");
        assert_eq!(iso.processes, "pid_namespace");
        assert_eq!(iso.network, "namespace");
        assert_ne!(iso.user, "host");
        let forks: u64 = std::fs::read_to_string(app.join("forks"))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            forks > 10 && forks < 1500,
            "{forks} forks: the process cap did not hold"
        );
    }
    // The planted links were replaced, not written through; the key is as it was.
    assert_eq!(
        std::fs::read_to_string(keys.join("exp.key")).unwrap(),
        format!("KEY-CANARY-{tok}")
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".evolve/archive.jsonl")).unwrap(),
        "{\"seq\":0}\n"
    );
    assert!(listener.accept().is_err(), "the agent reached the listener");
    let left = procs_with_cmdline(&format!("evolve-bomb-{tok}"));
    assert!(
        left.is_empty(),
        "the fork bomb outlived its trial: {left:?}"
    );
}

/// A trial over its storage cap is killed and classified, and nothing over the cap is kept.
#[tokio::test]
async fn an_agent_that_fills_the_disk_is_stopped_at_its_storage_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    write_task(
        &tasks,
        "fill",
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 20\n[environment]\nstorage_mb = 8\n",
        None,
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    // Many files of 1 MiB each: no single one trips the file-size limit, the sum does.
    let script = "#!/bin/bash\nfor i in $(seq 200); do head -c 1048576 /dev/zero > /app/f$i; done\nsleep 30\n";
    let agent = agent_dir(tmp.path(), script);
    let r = run_dir(local(), &tasks, agent, &tmp.path().join("out"), 1).await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::CandidateInvalid, "{t:#?}");
    assert_eq!(t.error.as_ref().unwrap().kind, "quota_exceeded", "{t:#?}");
    assert!(t.wall_time_sec < 20.0, "{t:#?}");
    let kept = std::fs::read_dir(t.logs.trial_dir.join("root/app"))
        .unwrap()
        .count();
    assert_eq!(kept, 0, "files over the quota were kept");
}

/// The agent writes `/app/answer.txt` as an instruction says, at Harbor's own path.
#[tokio::test]
async fn agents_see_the_paths_harbor_promises() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    // A name a shell would misread if it were substituted into a script unquoted.
    write_task(
        &tasks,
        "odd \"name\" <x> $y",
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 20\n",
        None,
        Some(
            "#!/bin/bash\n[ \"$(cat /app/answer.txt)\" = 42 ] && [ -f /logs/agent/agent.txt ] && echo 1 > /logs/verifier/reward.txt\n",
        ),
    );
    let script = "#!/bin/bash\necho 42 > /app/answer.txt\n[ \"$PWD\" = /app ] || echo wrong-cwd > /app/answer.txt\n";
    let agent = agent_dir(tmp.path(), script);
    let r = run_dir(local(), &tasks, agent, &tmp.path().join("out"), 1).await;
    let t = &r.trials[0];
    assert_eq!(t.status, TrialStatus::BenchmarkComplete, "{t:#?}");
    assert_eq!(t.reward, Some(1.0), "{t:#?}");
}

fn dirs_home() -> std::path::PathBuf {
    std::env::var_os("HOME")
        .map(Into::into)
        .unwrap_or_else(|| "/root".into())
}
