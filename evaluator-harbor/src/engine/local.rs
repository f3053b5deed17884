//! The embedded `local` engine: no Docker; per-trial folders stand in for the container paths.
//!
//! Trial layout (`<trial>/root/` is the "container"):
//! `root/app` (= `/app` and `[environment].workdir`), `root/logs/{agent,verifier,artifacts}`,
//! `root/tests` (verifier phase only), `root/solution` (oracle agent only), `root/tmp`,
//! `root/home`. Scripts and environment values are rewritten from the virtual paths to these.
//!
//! Phases: agent (oracle: `bash solution/solve.sh` → `logs/agent/oracle.txt`; command agents →
//! `logs/agent/agent.txt`; WASI components → [`super::wasi`]), then the verifier
//! (`bash tests/test.sh` → `logs/verifier/test-stdout.txt`), then the reward files are parsed.
//! An agent timeout ends the trial (status `timeout`, owner agent; the verifier is skipped).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::process::{PhaseSpec, SandboxLevel, run_phase, sandbox_level};
use super::rewrite::{PathMap, copy_rewritten};
use super::{BoxFuture, Engine, TrialRequest, classify_error, failed_trial};
use crate::agent::{AgentEntry, AgentSpec};
use crate::error::{Error, ErrorKind};
use crate::result::{
    Isolation, TimeoutOwner, TrialError, TrialLogs, TrialResult, TrialStatus, parse_reward_dir,
    reward_from_map,
};
use crate::task::Task;

/// Default cap on each phase's captured output.
pub const DEFAULT_OUTPUT_CAP: u64 = 1 << 20;

/// The local engine.
#[derive(Debug, Clone)]
pub struct LocalEngine {
    /// Cap on each phase's log.
    pub output_cap: u64,
    /// Deny the network even to tasks that allow it.
    pub always_deny_network: bool,
}

impl Default for LocalEngine {
    fn default() -> Self {
        LocalEngine {
            output_cap: DEFAULT_OUTPUT_CAP,
            always_deny_network: false,
        }
    }
}

/// Dockerfile instructions the local engine can honour without building an image.
const TRIVIAL_INSTRUCTIONS: &[&str] = &[
    "FROM",
    "WORKDIR",
    "ENV",
    "ARG",
    "LABEL",
    "CMD",
    "EXPOSE",
    "MAINTAINER",
    "SHELL",
    "STOPSIGNAL",
    "USER",
];

/// Why `task` needs Docker, or `None` if the local engine can run it.
///
/// A task needs Docker when: `[environment].docker_image` is set; `environment/` has a
/// docker-compose file; `[environment].gpus` > 0; or `environment/Dockerfile` has any
/// instruction other than FROM, WORKDIR, ENV, ARG, LABEL, CMD, EXPOSE, MAINTAINER, SHELL,
/// STOPSIGNAL, USER (i.e. it RUNs, COPYs/ADDs files into the image, sets an ENTRYPOINT,
/// a HEALTHCHECK, VOLUME or ONBUILD). The base image named by FROM is assumed to be
/// satisfied by the host's tools (bash, coreutils).
pub fn needs_docker(task: &Task) -> Option<String> {
    let env = &task.config.environment;
    if let Some(img) = &env.docker_image {
        return Some(format!(
            "it names a prebuilt image ([environment].docker_image = {img:?})"
        ));
    }
    if env.gpus.is_some_and(|g| g > 0) {
        return Some("it requests GPUs".into());
    }
    let dir = task.dir.join("environment");
    for f in [
        "docker-compose.yaml",
        "docker-compose.yml",
        "compose.yaml",
        "compose.yml",
    ] {
        if dir.join(f).exists() {
            return Some(format!("it ships environment/{f} (sidecar services)"));
        }
    }
    let df = dir.join("Dockerfile");
    if let Ok(text) = std::fs::read_to_string(&df) {
        let joined = text.replace("\\\n", " ");
        for line in joined.lines() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let instr = l
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_ascii_uppercase();
            if !TRIVIAL_INSTRUCTIONS.contains(&instr.as_str()) {
                return Some(format!(
                    "environment/Dockerfile uses {instr}, which needs an image build"
                ));
            }
        }
    } else if df.exists() {
        return Some("environment/Dockerfile is unreadable".into());
    }
    None
}

/// `ENV` and `WORKDIR` of a trivial Dockerfile (last WORKDIR wins).
fn dockerfile_env(task: &Task) -> (Vec<(String, String)>, Option<String>) {
    let mut env = Vec::new();
    let mut workdir = None;
    let Ok(text) = std::fs::read_to_string(task.dir.join("environment/Dockerfile")) else {
        return (env, workdir);
    };
    for line in text.lines() {
        let l = line.trim();
        let mut it = l.splitn(2, char::is_whitespace);
        let instr = it.next().unwrap_or("").to_ascii_uppercase();
        let rest = it.next().unwrap_or("").trim();
        match instr.as_str() {
            "WORKDIR" if rest.starts_with('/') => workdir = Some(rest.to_string()),
            "ENV" => {
                if let Some((k, v)) = rest.split_once('=') {
                    if !k.contains(' ') {
                        env.push((k.to_string(), v.trim_matches('"').to_string()));
                    }
                } else if let Some((k, v)) = rest.split_once(' ') {
                    env.push((k.to_string(), v.trim().trim_matches('"').to_string()));
                }
            }
            _ => {}
        }
    }
    (env, workdir)
}

/// Resolve Harbor's `${VAR}` / `${VAR:-default}` templates from the host environment.
pub fn resolve_template(value: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("unterminated ${{ in {value:?}"));
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match (std::env::var(name), default) {
            (Ok(v), _) => out.push_str(&v),
            (Err(_), Some(d)) => out.push_str(d),
            (Err(_), None) => {
                return Err(format!(
                    "environment variable {name} is not set on the host"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

static TRIAL_SEQ: AtomicU64 = AtomicU64::new(0);

fn marker() -> String {
    let n = TRIAL_SEQ.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}-{t:x}-{n}", std::process::id())
}

struct Layout {
    root: PathBuf,
    app: PathBuf,
    logs: PathBuf,
    agent_logs: PathBuf,
    verifier_logs: PathBuf,
    tests: PathBuf,
    solution: PathBuf,
    tmp: PathBuf,
    home: PathBuf,
}

impl Layout {
    fn new(trial_dir: &Path) -> Layout {
        let root = trial_dir.join("root");
        Layout {
            app: root.join("app"),
            logs: root.join("logs"),
            agent_logs: root.join("logs/agent"),
            verifier_logs: root.join("logs/verifier"),
            tests: root.join("tests"),
            solution: root.join("solution"),
            tmp: root.join("tmp"),
            home: root.join("home"),
            root,
        }
    }
    fn create(&self) -> std::io::Result<()> {
        for d in [
            &self.app,
            &self.agent_logs,
            &self.verifier_logs,
            &self.logs.join("artifacts"),
            &self.tmp,
            &self.home,
        ] {
            std::fs::create_dir_all(d)?;
        }
        Ok(())
    }
    fn path_map(&self, workdir: Option<&str>) -> PathMap {
        let mut pairs = vec![
            ("/app".to_string(), self.app.clone()),
            ("/logs".to_string(), self.logs.clone()),
            ("/logs/agent".to_string(), self.agent_logs.clone()),
            ("/logs/verifier".to_string(), self.verifier_logs.clone()),
            ("/logs/artifacts".to_string(), self.logs.join("artifacts")),
            ("/tests".to_string(), self.tests.clone()),
            ("/solution".to_string(), self.solution.clone()),
        ];
        if let Some(w) = workdir
            && w != "/"
            && !pairs.iter().any(|(v, _)| v == w)
        {
            pairs.push((w.trim_end_matches('/').to_string(), self.app.clone()));
        }
        PathMap::new(pairs)
    }
}

fn base_env(l: &Layout) -> Vec<(String, String)> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("HOME".into(), s(&l.home)),
        ("LANG".into(), "C.UTF-8".into()),
        ("TMPDIR".into(), s(&l.tmp)),
        ("EVOLVE_LOCAL_ROOT".into(), s(&l.root)),
        ("HARBOR_WORKDIR".into(), s(&l.app)),
        ("HARBOR_LOGS_DIR".into(), s(&l.logs)),
    ]
}

fn set_env(env: &mut Vec<(String, String)>, k: &str, v: String) {
    env.retain(|(ek, _)| ek != k);
    env.push((k.to_string(), v));
}

fn resolve_env(
    map: &BTreeMap<String, String>,
    paths: &PathMap,
    what: &str,
) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    for (k, v) in map {
        let r = resolve_template(v).map_err(|m| Error::invalid_task(format!("{what}.{k}: {m}")))?;
        out.push((k.clone(), paths.map_value(&r)));
    }
    Ok(out)
}

impl LocalEngine {
    fn isolation(&self, deny_net: bool, filesystem: &str) -> Isolation {
        let level = sandbox_level();
        Isolation {
            network: match (deny_net, level) {
                (false, _) => "host".into(),
                (true, SandboxLevel::None) => "none".into(),
                (true, _) => "namespace".into(),
            },
            processes: if level == SandboxLevel::None {
                "process_group+proc_scan".into()
            } else {
                "pid_namespace".into()
            },
            filesystem: if level == SandboxLevel::None {
                "staging".into()
            } else {
                filesystem.into()
            },
        }
    }

    async fn trial(&self, req: &TrialRequest) -> Result<TrialResult, Error> {
        let task = &req.task;
        let started = Instant::now();
        if let Some(why) = needs_docker(task) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("task {:?} needs Docker: {why}", task.name),
            )
            .hint("run it with --engine docker or --engine harbor"));
        }
        let deny_net = self.always_deny_network || !task.config.network_allowed();
        if deny_net && sandbox_level() == SandboxLevel::None {
            return Err(Error::new(ErrorKind::Unsupported, format!("task {:?} denies the network, but this machine cannot create a network namespace (unshare failed)", task.name))
                .hint("run as root, enable unprivileged user namespaces, or use --engine docker"));
        }
        let l = Layout::new(&req.trial_dir);
        l.create()
            .map_err(|e| Error::io("cannot create trial layout", &l.root, e))?;
        let (df_env, df_workdir) = dockerfile_env(task);
        let workdir = task.config.environment.workdir.clone().or(df_workdir);
        let paths = l.path_map(workdir.as_deref());
        let mut env = base_env(&l);
        for (k, v) in df_env {
            set_env(&mut env, &k, paths.map_value(&v));
        }
        for (k, v) in resolve_env(&task.config.environment.env, &paths, "[environment].env")? {
            set_env(&mut env, &k, v);
        }
        let mark = marker();
        let mut result = TrialResult {
            task: task.name.clone(),
            repetition: req.repetition,
            trial_name: crate::result::trial_name(&task.name, req.repetition),
            engine: "local".into(),
            status: TrialStatus::InfrastructureFailed,
            timeout_owner: None,
            reward: None,
            rewards: BTreeMap::new(),
            cost_usd: None,
            error: None,
            agent_exit_code: None,
            wall_time_sec: 0.0,
            logs: TrialLogs {
                trial_dir: req.trial_dir.clone(),
                agent_dir: l.agent_logs.clone(),
                verifier_dir: l.verifier_logs.clone(),
            },
            isolation: None,
        };

        // ---- agent phase
        let mut fs_iso = "mount_namespace";
        let agent_out = match req.agent.as_ref() {
            AgentSpec::Oracle => {
                if !task.has_solution() {
                    return Err(Error::invalid_task(format!(
                        "task {:?} has no solution/solve.sh; the oracle agent needs it",
                        task.name
                    )));
                }
                copy_rewritten(&task.dir.join("solution"), &l.solution, &paths)
                    .map_err(|e| Error::infra(format!("cannot stage solution/: {e}")))?;
                let mut e = env.clone();
                set_env(&mut e, "DEBIAN_FRONTEND", "noninteractive".into());
                for (k, v) in resolve_env(&task.config.solution.env, &paths, "[solution].env")? {
                    set_env(&mut e, &k, v);
                }
                let spec = PhaseSpec {
                    argv: vec![
                        "bash".into(),
                        l.solution.join("solve.sh").to_string_lossy().into_owned(),
                    ],
                    cwd: l.app.clone(),
                    env: e,
                    stdin: None,
                    timeout: task.config.agent_timeout(),
                    log: l.agent_logs.join("oracle.txt"),
                    log_cap: self.output_cap,
                    deny_network: deny_net,
                    hide: req.hidden_paths.clone(),
                    marker: mark.clone(),
                };
                let o = run_phase(&spec)
                    .await
                    .map_err(|e| Error::infra(format!("cannot run solve.sh: {e}")))?;
                (o.exit_code, o.timed_out)
            }
            AgentSpec::Target(m) => match &m.entry {
                AgentEntry::Command(argv) => {
                    check_program(&argv[0], &m.dir)?;
                    let mut e = env.clone();
                    for (k, v) in &m.env {
                        set_env(&mut e, k, paths.map_value(v));
                    }
                    set_env(
                        &mut e,
                        "EVOLVE_AGENT_DIR",
                        m.dir.to_string_lossy().into_owned(),
                    );
                    set_env(
                        &mut e,
                        "EVOLVE_APP_DIR",
                        l.app.to_string_lossy().into_owned(),
                    );
                    set_env(
                        &mut e,
                        "EVOLVE_AGENT_LOGS_DIR",
                        l.agent_logs.to_string_lossy().into_owned(),
                    );
                    if task.instruction.len() <= 100_000 {
                        set_env(&mut e, "EVOLVE_INSTRUCTION", task.instruction.clone());
                    }
                    let spec = PhaseSpec {
                        argv: argv.clone(),
                        cwd: l.app.clone(),
                        env: e,
                        stdin: Some(task.instruction.clone().into_bytes()),
                        timeout: task.config.agent_timeout(),
                        log: l.agent_logs.join("agent.txt"),
                        log_cap: self.output_cap,
                        deny_network: deny_net,
                        hide: req.hidden_paths.clone(),
                        marker: mark.clone(),
                    };
                    let o = run_phase(&spec).await.map_err(|e| {
                        Error::new(
                            ErrorKind::InvalidAgent,
                            format!("cannot start agent command {:?}: {e}", argv[0]),
                        )
                        .at_path(&m.dir)
                    })?;
                    (o.exit_code, o.timed_out)
                }
                AgentEntry::Component(path) => {
                    fs_iso = "wasi_preopens";
                    let o = super::wasi::run_component(
                        path,
                        &task.instruction,
                        &m.env,
                        &m.dir,
                        &l.app,
                        &l.agent_logs,
                        task.config.agent_timeout(),
                        self.output_cap,
                    )
                    .await?;
                    (o.exit_code, o.timed_out)
                }
            },
        };
        result.isolation = Some(self.isolation(deny_net, fs_iso));
        result.agent_exit_code = agent_out.0;
        if let Some(c) = agent_out.0
            && c != 0
        {
            let _ = std::fs::write(l.agent_logs.join("exit-code.txt"), format!("{c}\n"));
        }
        if agent_out.1 {
            result.status = TrialStatus::Timeout;
            result.timeout_owner = Some(TimeoutOwner::Agent);
            result.error = Some(TrialError::new(
                "agent_timeout",
                format!(
                    "agent ran past [agent].timeout_sec = {:?} s and was killed",
                    task.config.agent.timeout_sec.unwrap_or(0.0)
                ),
            ));
            result.wall_time_sec = started.elapsed().as_secs_f64();
            result.cost_usd = crate::result::read_agent_cost(&l.agent_logs);
            return Ok(result);
        }

        // ---- verifier phase: tests/ appears only now.
        let _ = std::fs::remove_dir_all(&l.solution);
        let _ = std::fs::remove_file(l.verifier_logs.join("reward.txt"));
        let _ = std::fs::remove_file(l.verifier_logs.join("reward.json"));
        copy_rewritten(&task.dir.join("tests"), &l.tests, &paths)
            .map_err(|e| Error::infra(format!("cannot stage tests/: {e}")))?;
        let mut e = env.clone();
        for (k, v) in resolve_env(&task.config.verifier.env, &paths, "[verifier].env")? {
            set_env(&mut e, &k, v);
        }
        let spec = PhaseSpec {
            argv: vec![
                "bash".into(),
                l.tests.join("test.sh").to_string_lossy().into_owned(),
            ],
            cwd: l.app.clone(),
            env: e,
            stdin: None,
            timeout: Some(task.config.verifier_timeout()),
            log: l.verifier_logs.join("test-stdout.txt"),
            log_cap: self.output_cap,
            deny_network: deny_net,
            hide: req.hidden_paths.clone(),
            marker: mark,
        };
        let o = run_phase(&spec)
            .await
            .map_err(|e| Error::infra(format!("cannot run tests/test.sh: {e}")))?;
        result.wall_time_sec = started.elapsed().as_secs_f64();
        result.cost_usd = crate::result::read_agent_cost(&l.agent_logs);
        if o.timed_out {
            result.status = TrialStatus::Timeout;
            result.timeout_owner = Some(TimeoutOwner::Verifier);
            result.error = Some(TrialError::new(
                "verifier_timeout",
                format!(
                    "tests/test.sh ran past [verifier].timeout_sec = {} s and was killed",
                    task.config.verifier.timeout_sec
                ),
            ));
            return Ok(result);
        }
        finish_with_reward(&mut result, &l.verifier_logs);
        Ok(result)
    }
}

/// A command agent's program must exist and be executable (absolute, or on the scrubbed PATH).
fn check_program(program: &str, agent_dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        exec(Path::new(program))
    } else {
        [
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ]
        .iter()
        .any(|d| exec(&Path::new(d).join(program)))
    };
    if found {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::InvalidAgent, format!("agent command {program:?} is not an executable file (or not on PATH)"))
            .at_path(&agent_dir.join("agent.toml"))
            .hint("command[0] is resolved against the target directory when it contains a '/'; make it executable"))
    }
}

/// Parse the reward files in `verifier_dir` into `result` (status and reward).
pub fn finish_with_reward(result: &mut TrialResult, verifier_dir: &Path) {
    match parse_reward_dir(verifier_dir) {
        Ok(m) => {
            result.reward = reward_from_map(&m);
            result.rewards = m;
            result.status = TrialStatus::BenchmarkComplete;
        }
        Err(e) => {
            result.status = TrialStatus::InfrastructureFailed;
            result.error = Some(e);
        }
    }
}

impl Engine for LocalEngine {
    fn name(&self) -> &'static str {
        "local"
    }
    fn run_trial<'a>(&'a self, req: &'a TrialRequest) -> BoxFuture<'a, TrialResult> {
        Box::pin(async move {
            match self.trial(req).await {
                Ok(r) => r,
                Err(e) => {
                    let (status, err) = classify_error(&e);
                    failed_trial(req, "local", status, err)
                }
            }
        })
    }
}
