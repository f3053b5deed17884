//! Candidate agents under the real `harbor run` (Harbor's own `-e docker`, through the
//! Docker Compose plugin): a Harbor agent class of the candidate tree, a `command` agent
//! through evolve's shipped adapter reaching the model gateway from Harbor's container, and
//! a built-in agent's flags as Harbor's own job config.json records them. The command
//! lines are built here from `agents::job_agent` and `access::open`, the two halves the
//! harbor job runner appends; agent.toml's harbor forms and their errors are checked
//! without Docker.
use crate::common;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::gateway::{TestGateway, write_answer_script};
use common::*;
use evaluator_harbor::agent::{AgentEntry, AgentManifest, AgentSpec, HarborAgent};
use evaluator_harbor::engine::harbor::access;
use evaluator_harbor::engine::harbor::agents::job_agent;
use evaluator_harbor::engine::harbor::job_agent::{JobAgent, JobModelAccess, ModelPath};
use evaluator_harbor::engine::harbor::{CI_HARBOR_BIN, HarborOptions, parse_trial_result};
use evaluator_harbor::error::ErrorKind;
use evaluator_harbor::gateway::TrialSettings;
use evaluator_harbor::result::TrialStatus;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    testdata().join("harbor-agents").join(name)
}

/// A copy of the fixture `name` as a candidate's target dir under `root`.
fn candidate(root: &Path, name: &str) -> PathBuf {
    let d = root.join("target");
    copy_dir(&fixture(name), &d);
    d
}

/// A task whose verifier checks that /app/answer.txt holds 42. Harbor's docker environment
/// cannot enforce no-network on this machine, so the task asks for the network.
fn answer_task(root: &Path, image: &str) -> PathBuf {
    let d = write_task(
        root,
        "answer",
        "[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 30\n[environment]\nnetwork_mode = \"public\"\n",
        None,
        Some(
            "#!/bin/bash\nif [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
        ),
    );
    std::fs::write(
        d.join("environment/Dockerfile"),
        format!("FROM {image}\nWORKDIR /app\n"),
    )
    .unwrap();
    std::fs::write(d.join("instruction.md"), "Write 42 to /app/answer.txt.\n").unwrap();
    d
}

/// The harbor CLI with Docker, Compose and the test images, or None (skip, with the reason)
/// outside CI; with CI=true anything missing fails the test.
async fn harbor() -> Option<PathBuf> {
    let bin = std::env::var_os("EVOLVE_HARBOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(CI_HARBOR_BIN));
    if !bin.is_file() {
        assert!(
            !ci(),
            "CI=true but the harbor CLI is missing at {}",
            bin.display()
        );
        eprintln!("SKIP: the harbor CLI is missing at {}", bin.display());
        return None;
    }
    docker().await?;
    let compose = std::process::Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !compose {
        assert!(!ci(), "CI=true but `docker compose version` fails");
        eprintln!("SKIP: the Docker Compose v2 plugin is missing (`docker compose version`)");
        return None;
    }
    Some(bin)
}

/// `harbor run` on one task with the job's agent and model halves, as the job runner
/// would build it; returns Harbor's combined output.
async fn harbor_run(
    bin: &Path,
    task: &Path,
    agent: &JobAgent,
    model: &JobModelAccess,
    jobs: &Path,
    job: &str,
) -> String {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("run")
        .arg("-p")
        .arg(task)
        .args(&agent.args)
        .args(&model.args)
        .args([
            "--job-name",
            job,
            "-n",
            "1",
            "-k",
            "1",
            "-y",
            "-q",
            "-e",
            "docker",
            "-o",
        ])
        .arg(jobs)
        .env("HARBOR_TELEMETRY", "0")
        // LiteLLM (imported by Harbor) otherwise fetches its price list from the network.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .envs(agent.env.iter().cloned())
        .envs(model.env.iter().cloned())
        .stdin(std::process::Stdio::null());
    if !agent.pythonpath.is_empty() {
        cmd.env(
            "PYTHONPATH",
            std::env::join_paths(&agent.pythonpath).unwrap(),
        );
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(600), cmd.output())
        .await
        .expect("harbor run finishes within 10 minutes")
        .expect("harbor runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "harbor run failed: {text}");
    text
}

/// The one trial's result.json of a job.
fn trial_json(jobs: &Path, job: &str) -> PathBuf {
    let dir = jobs.join(job);
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("result.json"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no trial result.json in {}", dir.display()))
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let bytes = std::fs::read(e.path()).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    out.push(e.path());
                }
            }
        }
    }
    out
}

/// Containers Docker still has for a compose project of this job's trials.
fn leftover_containers(job_dir: &Path) -> Vec<String> {
    let trials: Vec<String> = std::fs::read_dir(job_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().to_lowercase())
        .collect();
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-a",
            "--format",
            "{{.Label \"com.docker.compose.project\"}}",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|p| trials.iter().any(|t| p.starts_with(t.as_str())))
        .map(str::to_string)
        .collect()
}

fn load(dir: &Path) -> AgentSpec {
    AgentSpec::Target(AgentManifest::load(dir).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_harbor_agent_class_of_the_candidate_tree_is_evaluated() {
    let Some(bin) = harbor().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let task = answer_task(&tmp.path().join("tasks"), "evolve-harbor-test-base:1");
    let spec = load(&candidate(tmp.path(), "class-agent"));
    let options = HarborOptions::default();
    let agent = job_agent(&spec, &options, &tmp.path().join("staging")).unwrap();
    let (model, gw) = access::open(&TrialSettings::default(), &options, "class")
        .await
        .unwrap();
    assert!(gw.is_none() && model.path == ModelPath::None);
    let jobs = tmp.path().join("jobs");
    let log = harbor_run(&bin, &task, &agent, &model, &jobs, "class").await;
    let r = parse_trial_result(&trial_json(&jobs, "class"), "answer", 0).unwrap();
    assert_eq!(r.status, TrialStatus::BenchmarkComplete, "{r:#?}\n{log}");
    assert_eq!(r.reward, Some(1.0), "{r:#?}");
    assert_eq!(
        r.cost_usd,
        Some(0.125),
        "the class's own usage is read back"
    );
    let v: Value =
        serde_json::from_slice(&std::fs::read(trial_json(&jobs, "class")).unwrap()).unwrap();
    assert_eq!(v["agent_info"]["name"], "evolve-test-answer-agent");
    assert_eq!(v["agent_result"]["n_input_tokens"], 5);
    assert!(leftover_containers(&jobs.join("class")).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_agent_reaches_the_gateway_from_harbors_container() {
    let Some(bin) = harbor().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let task = answer_task(&tmp.path().join("tasks"), PYTHON_IMAGE);
    let target = candidate(tmp.path(), "command-agent");
    std::fs::copy(
        testdata().join("gateway-agent/agent.py"),
        target.join("agent.py"),
    )
    .unwrap();
    let spec = load(&target);
    let options = HarborOptions::default();
    let staging = tmp.path().join("staging");
    let agent = job_agent(&spec, &options, &staging).unwrap();
    let gateway = TestGateway::new(write_answer_script("42"), None);
    let settings = TrialSettings {
        gateway: Some(gateway.clone()),
        ..TrialSettings::default()
    };
    let (model, gw) = access::open(&settings, &options, "cmd").await.unwrap();
    let gw = gw.expect("a local docker environment goes through the gateway");
    assert_eq!(model.path, ModelPath::Gateway);
    let token = model
        .env
        .iter()
        .find(|(k, _)| k == "OPENAI_API_KEY")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(
        !model.args.concat().contains(&token),
        "the token is never a flag"
    );
    let jobs = tmp.path().join("jobs");
    let log = harbor_run(&bin, &task, &agent, &model, &jobs, "cmd").await;
    let host = gw.host;
    let port = gw.port();
    let calls = gw.close().await;
    let r = parse_trial_result(&trial_json(&jobs, "cmd"), "answer", 0).unwrap();
    assert_eq!(r.status, TrialStatus::BenchmarkComplete, "{r:#?}\n{log}");
    assert_eq!(r.reward, Some(1.0), "{r:#?}");
    assert_eq!(r.agent_exit_code, Some(0));
    assert_eq!(
        r.cost_usd,
        Some(0.5),
        "cost.json is read back by the adapter"
    );
    // The agent called the gateway on the bridge, from inside Harbor's container.
    let report: Value =
        serde_json::from_slice(&std::fs::read(r.logs.agent_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["base_url"], format!("http://{host}:{port}/v1"));
    assert_eq!(report["api_base_matches"], true);
    assert_eq!(calls.usage.calls, 2, "{calls:#?}");
    assert_eq!(calls.exchanges[0].model, "test-model");
    assert_eq!(
        calls.exchanges[0].messages[1]["content"], "Write 42 to /app/answer.txt.\n",
        "the instruction reached the agent on stdin"
    );
    let seen: Value =
        serde_json::from_slice(&std::fs::read(r.logs.agent_dir.join("seen.json")).unwrap())
            .unwrap();
    assert_eq!(seen["pwd"], "/app");
    assert_eq!(seen["app_dir"], "/app");
    assert_eq!(seen["mode"], "test mode", "agent.toml's [env]");
    assert_eq!(seen["instruction_env"], "yes");
    let resolved: Value = serde_json::from_slice(
        &std::fs::read(r.logs.agent_dir.join("evolve-adapter.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(resolved["timeout_sec"], 120.0, "the task's agent timeout");
    let job = jobs.join("cmd");
    assert_eq!(
        files_containing(&job, &token),
        Vec::<PathBuf>::new(),
        "the token is in no file of the job dir"
    );
    assert!(!log.contains(&token));
    let config = std::fs::read_to_string(job.join("config.json")).unwrap();
    assert!(
        config.contains("${OPENAI_API_KEY}"),
        "Harbor records the template: {config}"
    );
    assert!(leftover_containers(&job).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_built_in_agents_model_and_kwargs_reach_harbors_config() {
    let Some(bin) = harbor().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let task = answer_task(&tmp.path().join("tasks"), "evolve-harbor-test-base:1");
    let target = candidate(tmp.path(), "builtin-agent");
    let spec = load(&target);
    let mut options = HarborOptions {
        model: Some("openai/test-model".into()),
        ..HarborOptions::default()
    };
    // The recipe's kwarg wins over the candidate's for the same key.
    options.agent_kwargs.insert("cost_limit".into(), "1".into());
    let agent = job_agent(&spec, &options, &tmp.path().join("staging")).unwrap();
    // mini-swe-agent checks for a key before it starts; the scripted gateway is enough.
    let gateway = TestGateway::new(write_answer_script("42"), None);
    let settings = TrialSettings {
        gateway: Some(gateway.clone()),
        ..TrialSettings::default()
    };
    let (model, gw) = access::open(&settings, &options, "builtin").await.unwrap();
    let jobs = tmp.path().join("jobs");
    // mini-swe-agent cannot install itself in the offline busybox image: the trial fails
    // quickly, after Harbor has written its config.
    harbor_run(&bin, &task, &agent, &model, &jobs, "builtin").await;
    gw.unwrap().close().await;
    let config: Value =
        serde_json::from_slice(&std::fs::read(jobs.join("builtin/config.json")).unwrap()).unwrap();
    let a = &config["agents"][0];
    assert_eq!(a["name"], "mini-swe-agent");
    assert_eq!(a["model_name"], "openai/test-model");
    let real = std::fs::canonicalize(&target).unwrap();
    assert_eq!(
        a["kwargs"]["config_file"],
        real.join("mini.yaml").to_string_lossy().as_ref(),
        "a ./ kwarg is the candidate file's absolute path"
    );
    assert_eq!(a["kwargs"]["cost_limit"], 1, "the recipe's kwarg wins");
    assert_eq!(a["env"]["OPENAI_API_KEY"], "${OPENAI_API_KEY}");
    assert!(leftover_containers(&jobs.join("builtin")).is_empty());
}

/// A cloud environment cannot reach the gateway: without a key in agent_env it is refused,
/// naming what to set; with one, its names go to Harbor as templates.
#[tokio::test]
async fn a_cloud_environment_needs_agent_env() {
    let gateway = TestGateway::new(write_answer_script("42"), None);
    let cloud = HarborOptions {
        environment: Some("modal".into()),
        ..HarborOptions::default()
    };
    let mut settings = TrialSettings {
        gateway: Some(gateway.clone()),
        agent_env: vec![("OPENAI_BASE_URL".into(), "https://api.example".into())],
        ..TrialSettings::default()
    };
    let e = access::open(&settings, &cloud, "j").await.unwrap_err();
    assert_eq!(e.location.as_deref(), Some("evaluator.agent_env"));
    assert!(e.message.contains("modal"), "{e:?}");
    assert!(e.hint.unwrap().contains("OPENAI_API_KEY"));
    settings
        .agent_env
        .push(("OPENAI_API_KEY".into(), "sk-value".into()));
    let (a, gw) = access::open(&settings, &cloud, "j").await.unwrap();
    assert!(gw.is_none());
    assert_eq!(gateway.open_now(), 0, "the gateway is not opened");
    assert_eq!(a.path, ModelPath::AgentEnv);
    assert_eq!(
        a.args,
        [
            "--ae",
            "OPENAI_BASE_URL=${OPENAI_BASE_URL}",
            "--ae",
            "OPENAI_API_KEY=${OPENAI_API_KEY}"
        ]
    );
    assert!(!a.args.concat().contains("sk-value"));
}

fn manifest_error(toml: &str, files: &[(&str, &str)]) -> evaluator_harbor::error::Error {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("agent.toml"), toml).unwrap();
    for (name, body) in files {
        let p = d.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    AgentManifest::load(d.path()).unwrap_err()
}

#[test]
fn harbor_agent_manifests_are_checked() {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&fixture("builtin-agent"), d.path());
    let m = AgentManifest::load(d.path()).unwrap();
    let AgentEntry::Harbor { agent, kwargs } = &m.entry else {
        panic!("{m:?}")
    };
    assert_eq!(agent, &HarborAgent::BuiltIn("mini-swe-agent".into()));
    assert_eq!(
        kwargs["config_file"],
        m.dir.join("mini.yaml").to_string_lossy()
    );
    assert_eq!(kwargs["cost_limit"], "3");

    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            "harbor_agent = \"a:B\"\ncommand = [\"x\"]\n",
            &[],
            "exactly one of `command`, `component` or `harbor_agent`",
        ),
        ("harbor_agent = \"\"\n", &[], "built-in Harbor agent name"),
        (
            "harbor_agent = \"bad name\"\n",
            &[],
            "built-in Harbor agent name",
        ),
        ("harbor_agent = \"agent:\"\n", &[], "module:Class"),
        ("harbor_agent = \"../x:Y\"\n", &[], "module:Class"),
        (
            "harbor_agent = \"missing:Agent\"\n",
            &[],
            "missing.py is not a regular file",
        ),
        (
            "command = [\"x\"]\n[harbor_agent_kwargs]\nk = \"v\"\n",
            &[],
            "only for a `harbor_agent` agent",
        ),
        (
            "harbor_agent = \"nop\"\n[harbor_agent_kwargs]\n\"bad key\" = \"v\"\n",
            &[],
            "key \"bad key\" must be an identifier",
        ),
        (
            "harbor_agent = \"nop\"\n[harbor_agent_kwargs]\nf = \"./nope.yaml\"\n",
            &[],
            "nope.yaml is not a regular file",
        ),
        (
            "harbor_agent = \"nop\"\n[harbor_agent_kwargs]\nf = \"./../x\"\n",
            &[],
            "must be relative and stay inside",
        ),
        (
            "harbor_agent = \"nop\"\n[harbor_agent_kwargs]\nf = \"./sub\"\n",
            &[("sub/a", "")],
            "sub is not a regular file",
        ),
        (
            "harbor_agent = \"nop\"\n[harbor_agent_kwargs]\nn = 3\n",
            &[],
            "[harbor_agent_kwargs] n must be a string",
        ),
    ];
    for (toml, files, want) in cases {
        let e = manifest_error(toml, files);
        assert_eq!(e.kind, ErrorKind::InvalidAgent, "{toml}: {e:?}");
        let text = format!("{} {:?} {:?}", e.message, e.location, e.hint);
        assert!(text.contains(want), "{toml}: want {want:?} in {text}");
    }

    // A module or a kwarg file that is a link is refused, wherever it leads.
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("real.py"), "").unwrap();
    std::os::unix::fs::symlink(d.path().join("real.py"), d.path().join("agent.py")).unwrap();
    std::fs::write(d.path().join("agent.toml"), "harbor_agent = \"agent:A\"\n").unwrap();
    let e = AgentManifest::load(d.path()).unwrap_err();
    assert!(e.message.contains("links are never followed"), "{e:?}");
    std::fs::write(
        d.path().join("agent.toml"),
        "harbor_agent = \"nop\"\n[harbor_agent_kwargs]\nf = \"./agent.py\"\n",
    )
    .unwrap();
    let e = AgentManifest::load(d.path()).unwrap_err();
    assert!(e.message.contains("links are never followed"), "{e:?}");
    // A package module is found through its __init__.py.
    std::fs::create_dir_all(d.path().join("pkg/sub")).unwrap();
    std::fs::write(d.path().join("pkg/sub/__init__.py"), "").unwrap();
    std::fs::write(
        d.path().join("agent.toml"),
        "harbor_agent = \"pkg.sub:A\"\n",
    )
    .unwrap();
    let m = AgentManifest::load(d.path()).unwrap();
    assert!(matches!(
        m.entry,
        AgentEntry::Harbor { agent: HarborAgent::Class { ref module, .. }, .. } if module == "pkg.sub"
    ));
}

/// The local and docker engines refuse a harbor_agent manifest with a clear error.
#[tokio::test]
async fn the_local_engine_refuses_a_harbor_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    write_task(
        &tasks,
        "t",
        "[agent]\ntimeout_sec = 10\n",
        None,
        Some("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    );
    let spec = load(&candidate(tmp.path(), "class-agent"));
    let engine = Arc::new(evaluator_harbor::engine::local::LocalEngine::default());
    let r = run_dir(engine, &tasks, spec, &tmp.path().join("out"), 1).await;
    let err = r.trials[0].error.as_ref().expect("an error");
    assert_eq!(err.kind, "invalid_agent");
    assert!(
        err.message.contains("runs only on the harbor engine"),
        "{err:?}"
    );
}

/// A command agent that outlives the task's agent timeout is a timeout (the verifier's
/// post-timeout reward is never used), and no container of the trial survives.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_agent_past_its_timeout_times_out() {
    let Some(bin) = harbor().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let task = answer_task(&tmp.path().join("tasks"), "evolve-harbor-test-base:1");
    let toml = task.join("task.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("timeout_sec = 120", "timeout_sec = 3")).unwrap();
    let target = tmp.path().join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("agent.toml"), "command = [\"sleep\", \"60\"]\n").unwrap();
    let spec = load(&target);
    let options = HarborOptions::default();
    let agent = job_agent(&spec, &options, &tmp.path().join("staging")).unwrap();
    let (model, _) = access::open(&TrialSettings::default(), &options, "slow")
        .await
        .unwrap();
    let jobs = tmp.path().join("jobs");
    let started = std::time::Instant::now();
    let log = harbor_run(&bin, &task, &agent, &model, &jobs, "slow").await;
    let r = parse_trial_result(&trial_json(&jobs, "slow"), "answer", 0).unwrap();
    assert_eq!(r.status, TrialStatus::Timeout, "{r:#?}\n{log}");
    assert_eq!(r.reward, None);
    assert!(
        started.elapsed().as_secs() < 55,
        "the sleep did not hold the job"
    );
    assert!(leftover_containers(&jobs.join("slow")).is_empty());
}
