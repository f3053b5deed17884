//! The embedded `local` engine: no Docker; each trial phase runs in a bubblewrap jail
//! ([`super::contain`]) that shows the task's files at the paths Harbor promises.
//!
//! Trial layout on the host (`<trial>/root/` holds what the jail binds):
//! `root/app` (bound at `/app` and at `[environment].workdir`), `root/logs/{agent,verifier,artifacts}`,
//! `root/tests` (bound at `/tests`, verifier phase only), `root/solution` (`/solution`, oracle
//! only), `root/tmp` (`/tmp`); `sandbox-etc/` holds the jail's generated `/etc` files. A
//! command agent's own directory (the candidate's `target/`) is bound read-only at `/agent`.
//!
//! Phases: agent (oracle: `bash /solution/solve.sh` → `logs/agent/oracle.txt`; command agents →
//! `logs/agent/agent.txt`; WASI components → [`super::wasi`]), then the verifier
//! (`bash /tests/test.sh` → `logs/verifier/test-stdout.txt`), then the reward files are parsed.
//! An agent timeout ends the trial (status `timeout`, owner agent; the verifier is skipped);
//! so does an agent over its storage cap (`quota_exceeded`, nothing over the cap is kept).
//!
//! Under the model gateway (`TrialSettings::gateway`), a command agent's phase runs in a
//! network namespace of its own whose only listening socket is the gateway's
//! ([`super::reach`]); the gateway is opened before the phase and closed after it on every
//! path, and what it metered is recorded by [`super::metered::finish`]. WASI components
//! and the oracle get no gateway.
//!
//! Only on an explicit opt-in ([`LocalEngine::unconfined`]) does a trial run on the host, with
//! the virtual paths rewritten to the trial's folders in scripts and environment values.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::contain::{
    self, Bind, Bubblewrap, Jail, JailNet, Limits, SandboxUser, bubblewrap, unavailable,
};
use super::metered::{self, GatewaySession, Records, Timeouts};
use super::process::{Confinement, DiskQuota, PhaseOutcome, PhaseSpec, run_phase};
use super::reach::{self, AgentNetwork};
use super::rewrite::{PathMap, copy_rewritten};
use super::{BoxFuture, Engine, TrialRequest, classify_error, failed_trial};
use crate::agent::{AgentEntry, AgentSpec, Program};
use crate::error::{Error, ErrorKind};
use crate::gateway::TrialModelLog;
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
    /// Run every phase directly on the host, without a sandbox: only on the user's explicit
    /// opt-in (the recipe's `evaluator.unconfined_trials`, `--unconfined`), and recorded in
    /// each trial's isolation and in the workspace's runtime fingerprint.
    pub unconfined: bool,
    /// The code the framework ships. Where bubblewrap is missing, a trial made only of it
    /// runs without the jail (see [`FrameworkCode`]); any other trial is refused.
    pub framework: Option<Arc<FrameworkCode>>,
}

impl Default for LocalEngine {
    fn default() -> Self {
        LocalEngine {
            output_cap: DEFAULT_OUTPUT_CAP,
            always_deny_network: false,
            unconfined: false,
            framework: None,
        }
    }
}

/// The agent components and tasks the framework itself ships (the built-in seeds).
///
/// The jail exists for code the candidate can change: a command agent, and a verifier
/// that could be led to run what such an agent wrote. A trial whose agent is a shipped
/// WASI component (contained by wasmtime; it writes only through its preopens) and whose
/// task is a shipped task, byte for byte, runs no such code. So where bubblewrap is
/// missing, that trial alone may run on the host (scripts see their paths rewritten, as
/// with `unconfined`), recorded in its isolation as `unconfined:framework_code`. This is
/// what lets the offline demo run on a machine without bubblewrap.
#[derive(Debug, Clone, Default)]
pub struct FrameworkCode {
    /// `sha256:` digests of the shipped agent components' bytes.
    pub agent_components: BTreeSet<String>,
    /// Task digests ([`crate::digest::task_digest`]) of the shipped tasks.
    pub tasks: BTreeSet<String>,
}

impl FrameworkCode {
    /// Whether every program of this trial is shipped framework code.
    fn runs_only(&self, req: &TrialRequest) -> bool {
        let agent = match req.agent.as_ref() {
            // The oracle runs the task's own solution: shipped when the task is.
            AgentSpec::Oracle => true,
            AgentSpec::Target(m) => match &m.entry {
                AgentEntry::Component { bytes, .. } => self
                    .agent_components
                    .contains(&crate::digest::sha256_prefixed(bytes)),
                AgentEntry::Command(_) | AgentEntry::Harbor { .. } => false,
            },
        };
        agent && crate::digest::task_digest(&req.task.dir).is_ok_and(|d| self.tasks.contains(&d))
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
    artifacts: PathBuf,
    tests: PathBuf,
    solution: PathBuf,
    tmp: PathBuf,
    home: PathBuf,
    /// The generated `/etc` files of a jail (never writable inside it).
    etc: PathBuf,
}

impl Layout {
    fn new(trial_dir: &Path) -> Layout {
        let root = trial_dir.join("root");
        Layout {
            app: root.join("app"),
            logs: root.join("logs"),
            agent_logs: root.join("logs/agent"),
            verifier_logs: root.join("logs/verifier"),
            artifacts: root.join("logs/artifacts"),
            tests: root.join("tests"),
            solution: root.join("solution"),
            tmp: root.join("tmp"),
            home: root.join("home"),
            etc: trial_dir.join("sandbox-etc"),
            root,
        }
    }
    fn create(&self) -> std::io::Result<()> {
        for d in [
            &self.app,
            &self.agent_logs,
            &self.verifier_logs,
            &self.artifacts,
            &self.tmp,
            &self.home,
        ] {
            std::fs::create_dir_all(d)?;
        }
        Ok(())
    }
    /// The virtual → host map of an unconfined trial, whose scripts see host paths.
    fn path_map(&self, workdir: Option<&str>) -> PathMap {
        let mut pairs = vec![
            ("/app".to_string(), self.app.clone()),
            ("/logs".to_string(), self.logs.clone()),
            ("/logs/agent".to_string(), self.agent_logs.clone()),
            ("/logs/verifier".to_string(), self.verifier_logs.clone()),
            ("/logs/artifacts".to_string(), self.artifacts.clone()),
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

/// Paths an unconfined trial's host directories may use: they are substituted into task
/// scripts as they are, so a quote, `<`, `$`, a space or a newline would change the script.
fn substitutable(p: &Path) -> bool {
    p.to_str().is_some_and(|s| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,@%:=".contains(&b))
    })
}

/// Where a task's files appear in a contained phase. The paths are Harbor's own, so no
/// script is rewritten: `/app/answer.txt` in an instruction is `/app/answer.txt` on disk.
fn workdir_of(workdir: Option<&str>, task: &str) -> Result<String, Error> {
    let w = workdir.unwrap_or("/app").trim_end_matches('/');
    let reserved = [
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/etc",
        "/proc",
        "/dev",
        "/tmp",
        "/logs",
        "/tests",
        "/solution",
        "/agent",
    ];
    let ok = w.starts_with('/')
        && !w.is_empty()
        && Path::new(w).components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        })
        && !reserved
            .iter()
            .any(|r| w == *r || w.starts_with(&format!("{r}/")));
    if ok {
        Ok(w.to_string())
    } else {
        Err(Error::invalid_task(format!(
            "task {task:?}: [environment].workdir {w:?} must be an absolute path outside the system and trial directories (e.g. /app)"
        )))
    }
}

/// Every phase's `PATH`: the host's system directories, which a jail shows read-only.
const TRIAL_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// The environment every phase starts from.
fn base_env(l: &Layout, contained: bool, workdir: &str) -> Vec<(String, String)> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let path = TRIAL_PATH.join(":");
    if contained {
        return vec![
            ("PATH".into(), path),
            ("HOME".into(), "/tmp".into()),
            ("USER".into(), "agent".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("TMPDIR".into(), "/tmp".into()),
            ("HARBOR_WORKDIR".into(), workdir.into()),
            ("HARBOR_LOGS_DIR".into(), "/logs".into()),
        ];
    }
    vec![
        ("PATH".into(), path),
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

/// Remove everything under `dir` (never following a link), keeping `dir` itself.
fn empty_dir(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for ent in rd.flatten() {
            let p = ent.path();
            match ent.file_type() {
                Ok(t) if t.is_dir() => {
                    let _ = std::fs::remove_dir_all(&p);
                }
                _ => {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
    }
}

/// Default `memory_mb` of a command agent when the task sets none (Harbor's documented
/// default).
pub const DEFAULT_MEMORY_MB: u64 = 2048;
/// Default `storage_mb` of a trial when the task sets none (Harbor's documented default).
pub const DEFAULT_STORAGE_MB: u64 = 10240;
/// Most files and directories a trial may create.
pub const MAX_TRIAL_FILES: u64 = 100_000;
/// Most processes one phase may run at once.
pub const MAX_PHASE_PROCESSES: u64 = 1024;

/// How a trial's phases run: in a jail of their own, or on the host by explicit opt-in.
enum Mode {
    Contained {
        bwrap: &'static Bubblewrap,
        user: SandboxUser,
    },
    /// On the host: by the user's opt-in, or (`framework_only`) a trial made only of
    /// shipped code where bubblewrap is missing ([`FrameworkCode`]).
    Unconfined { framework_only: bool },
}

/// The per-trial facts every phase shares.
struct Trial<'a> {
    task: &'a Task,
    l: Layout,
    mode: Mode,
    workdir: String,
    deny_net: bool,
    marker: String,
    output_cap: u64,
    /// The host's `/etc` directories a jail binds (see [`contain::write_etc`]).
    etc_dirs: Vec<String>,
}

/// One phase of a trial.
struct Phase {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    stdin: Option<Vec<u8>>,
    timeout: Option<std::time::Duration>,
    log: PathBuf,
    binds: Vec<Bind>,
    /// The directories it may write (counted against the storage cap).
    writes: Vec<PathBuf>,
    /// The network namespace to run in (the model gateway's), instead of a fresh one.
    netns: Option<PathBuf>,
}

impl Trial<'_> {
    fn contained(&self) -> bool {
        matches!(self.mode, Mode::Contained { .. })
    }

    fn storage_bytes(&self) -> u64 {
        self.task
            .config
            .environment
            .storage_mb
            .unwrap_or(DEFAULT_STORAGE_MB)
            .saturating_mul(1 << 20)
    }

    /// The storage cap over the folders a phase may write.
    fn quota(&self, dirs: Vec<PathBuf>) -> DiskQuota {
        DiskQuota {
            dirs,
            bytes: self.storage_bytes(),
            files: MAX_TRIAL_FILES,
        }
    }

    fn limits(&self, timeout: Option<std::time::Duration>, user: &SandboxUser) -> Limits {
        let env = &self.task.config.environment;
        let cpus = env.cpus.unwrap_or(1.0).max(1.0);
        Limits {
            memory_bytes: env
                .memory_mb
                .unwrap_or(DEFAULT_MEMORY_MB)
                .saturating_mul(1 << 20),
            processes: user.process_limit(MAX_PHASE_PROCESSES),
            file_bytes: self.storage_bytes(),
            // A backstop behind the wall-clock timeout: no process may burn more CPU than
            // the phase's time on all of its CPUs.
            cpu_seconds: timeout.map(|t| (t.as_secs_f64() * cpus).ceil() as u64 + 1),
        }
    }

    /// The trial's `/app` bound at `/app` and, when the task names another workdir, there
    /// too.
    fn app_binds(&self) -> Vec<Bind> {
        let mut v = vec![Bind {
            host: self.l.app.clone(),
            at: "/app".into(),
            writable: true,
        }];
        if self.workdir != "/app" {
            v.push(Bind {
                host: self.l.app.clone(),
                at: self.workdir.clone(),
                writable: true,
            });
        }
        v.push(Bind {
            host: self.l.tmp.clone(),
            at: "/tmp".into(),
            writable: true,
        });
        v
    }

    async fn run(&self, p: Phase) -> Result<PhaseOutcome, std::io::Error> {
        let confinement = match &self.mode {
            Mode::Contained { bwrap, user } => Confinement::Contained {
                jail: Box::new(Jail {
                    binds: p.binds,
                    workdir: self.workdir.clone(),
                    network: match (self.deny_net, p.netns) {
                        (false, _) => JailNet::Host,
                        (true, None) => JailNet::Own,
                        (true, Some(ns)) => JailNet::Enter(ns),
                    },
                    etc: self.l.etc.clone(),
                    etc_dirs: self.etc_dirs.clone(),
                    uid: user.uid,
                    gid: user.gid,
                    limits: self.limits(p.timeout, user),
                }),
                bwrap,
            },
            Mode::Unconfined { .. } => Confinement::Unconfined,
        };
        let spec = PhaseSpec {
            argv: p.argv,
            cwd: self.l.app.clone(),
            env: p.env,
            stdin: p.stdin,
            timeout: p.timeout,
            log: p.log,
            log_cap: self.output_cap,
            confinement,
            quota: Some(self.quota(p.writes)),
            marker: self.marker.clone(),
        };
        run_phase(&spec).await
    }

    /// A path of the phase as its program sees it: Harbor's own path in a jail, the
    /// trial's host folder when unconfined.
    fn seen(&self, virtual_path: &str, host: &Path) -> String {
        if self.contained() {
            virtual_path.to_string()
        } else {
            host.to_string_lossy().into_owned()
        }
    }
}

impl LocalEngine {
    fn isolation(&self, mode: &Mode, deny_net: bool, filesystem: &str, gateway: bool) -> Isolation {
        match mode {
            Mode::Contained { user, bwrap } => Isolation {
                network: match (deny_net, gateway) {
                    (true, true) => "namespace:gateway_only",
                    (true, false) => "namespace",
                    (false, _) => "host",
                }
                .into(),
                processes: "pid_namespace".into(),
                filesystem: filesystem.into(),
                user: if bwrap.privileged() {
                    format!("dedicated_uid:{}", user.uid)
                } else {
                    "user_namespace".into()
                },
            },
            Mode::Unconfined { framework_only } => Isolation {
                network: "host".into(),
                processes: "process_group+proc_scan".into(),
                filesystem: if *framework_only {
                    "unconfined:framework_code"
                } else {
                    "unconfined"
                }
                .into(),
                user: "host".into(),
            },
        }
    }

    fn mode(&self, req: &TrialRequest) -> Result<Mode, Error> {
        if self.unconfined {
            return Ok(Mode::Unconfined {
                framework_only: false,
            });
        }
        match bubblewrap() {
            Ok(bwrap) => {
                let user = SandboxUser::lease(bwrap.privileged())?;
                Ok(Mode::Contained { bwrap, user })
            }
            Err(_) if self.framework.as_ref().is_some_and(|f| f.runs_only(req)) => {
                Ok(Mode::Unconfined {
                    framework_only: true,
                })
            }
            Err(why) => Err(unavailable(why)),
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
        let timeouts = Timeouts::of(task, &req.settings)?;
        let mode = self.mode(req)?;
        let gated = req.settings.gateway.is_some()
            && matches!(req.agent.as_ref(), AgentSpec::Target(m) if matches!(m.entry, AgentEntry::Command(_)));
        if gated
            && deny_net
            && let Mode::Contained { bwrap, .. } = &mode
            && let Some(why) = bwrap.cannot_enter_netns()
        {
            return Err(Error::infra(format!(
                "this trial's agent reaches its model through the gateway, which the local engine serves inside the agent's own network namespace (the only address it can reach), and {why}"
            ))
            .hint("run evolve as root with util-linux's nsenter installed, or use the docker engine; unconfined trials (an explicit opt-in) reach the gateway on the host's 127.0.0.1"));
        }
        // Absolute: the jail's binds (and an unconfined trial's rewritten scripts) name
        // these folders from another working directory (`tasks run --out out`).
        let trial_dir = std::path::absolute(&req.trial_dir)
            .map_err(|e| Error::io("cannot resolve the trial directory", &req.trial_dir, e))?;
        let l = Layout::new(&trial_dir);
        l.create()
            .map_err(|e| Error::io("cannot create trial layout", &l.root, e))?;
        let (df_env, df_workdir) = dockerfile_env(task);
        let workdir = task.config.environment.workdir.clone().or(df_workdir);
        let contained = matches!(mode, Mode::Contained { .. });
        let paths = if contained {
            PathMap::new(Vec::new())
        } else {
            if !substitutable(&l.root) {
                return Err(Error::invalid_task(format!(
                    "task {:?}: an unconfined trial's directory is substituted into the task's scripts, and {} holds a character a shell would read (quote, <, $, space, ...)",
                    task.name,
                    l.root.display()
                ))
                .hint("run trials contained (the default), where the scripts see /app and /tests as they are"));
            }
            l.path_map(workdir.as_deref())
        };
        let workdir = if contained {
            workdir_of(workdir.as_deref(), &task.name)?
        } else {
            l.app.to_string_lossy().into_owned()
        };
        let mut etc_dirs = Vec::new();
        if let Mode::Contained { user, .. } = &mode {
            etc_dirs = contain::write_etc(&l.etc, user.uid, user.gid, !deny_net)
                .map_err(|e| Error::io("cannot write the sandbox's /etc", &l.etc, e))?;
            for d in [
                &l.app,
                &l.agent_logs,
                &l.verifier_logs,
                &l.artifacts,
                &l.tmp,
                &l.home,
            ] {
                user.own(d).map_err(|e| {
                    Error::io("cannot hand the trial directory to its sandbox user", d, e)
                })?;
            }
        }
        let mut env = base_env(&l, contained, &workdir);
        for (k, v) in df_env {
            set_env(&mut env, &k, paths.map_value(&v));
        }
        for (k, v) in resolve_env(&task.config.environment.env, &paths, "[environment].env")? {
            set_env(&mut env, &k, v);
        }
        let trial = Trial {
            task,
            l,
            mode,
            workdir,
            deny_net,
            marker: marker(),
            output_cap: self.output_cap,
            etc_dirs,
        };
        let l = &trial.l;
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
                trajectory: None,
            },
            isolation: None,
            usage: None,
            agent_usage: None,
            phases: None,
            attempts: Vec::new(),
        };

        // ---- agent phase
        let mut fs_iso = if contained {
            "bubblewrap"
        } else {
            "unconfined"
        };
        let session_name = metered::attempt_name(&trial_dir, &result.trial_name);
        let mut metered: Option<TrialModelLog> = None;
        let agent_writes = vec![l.app.clone(), l.agent_logs.clone(), l.tmp.clone()];
        let mut agent_binds = trial.app_binds();
        agent_binds.push(Bind {
            host: l.agent_logs.clone(),
            at: "/logs/agent".into(),
            writable: true,
        });
        let agent_started = Instant::now();
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
                for (k, v) in &req.settings.agent_env {
                    set_env(&mut e, k, v.clone());
                }
                agent_binds.push(Bind {
                    host: l.solution.clone(),
                    at: "/solution".into(),
                    writable: false,
                });
                let o = trial
                    .run(Phase {
                        argv: vec![
                            "bash".into(),
                            format!("{}/solve.sh", trial.seen("/solution", &l.solution)),
                        ],
                        env: e,
                        stdin: None,
                        timeout: timeouts.agent,
                        log: l.agent_logs.join("oracle.txt"),
                        binds: agent_binds,
                        writes: agent_writes,
                        netns: None,
                    })
                    .await
                    .map_err(|e| Error::infra(format!("cannot run solve.sh: {e}")))?;
                (o.exit_code, o.timed_out, o.over_quota)
            }
            AgentSpec::Target(m) => match &m.entry {
                AgentEntry::Harbor { .. } => return Err(crate::agent::harbor_only()),
                AgentEntry::Command(argv) => {
                    let mut argv = argv.clone();
                    match m.entry.program() {
                        Some(Program::Shipped(rel)) => {
                            argv[0] = if contained {
                                format!("/agent/{rel}")
                            } else {
                                m.dir.join(rel).to_string_lossy().into_owned()
                            };
                        }
                        Some(Program::OnPath(name)) => check_on_path(name)?,
                        None => {}
                    }
                    let mut e = env.clone();
                    for (k, v) in &m.env {
                        set_env(&mut e, k, paths.map_value(v));
                    }
                    set_env(&mut e, "EVOLVE_AGENT_DIR", trial.seen("/agent", &m.dir));
                    set_env(&mut e, "EVOLVE_APP_DIR", trial.seen("/app", &l.app));
                    set_env(
                        &mut e,
                        "EVOLVE_AGENT_LOGS_DIR",
                        trial.seen("/logs/agent", &l.agent_logs),
                    );
                    if task.instruction.len() <= 100_000 {
                        set_env(&mut e, "EVOLVE_INSTRUCTION", task.instruction.clone());
                    }
                    // The recipe's passed-through variables, then the gateway's: neither is
                    // the candidate's to override.
                    for (k, v) in &req.settings.agent_env {
                        set_env(&mut e, k, v.clone());
                    }
                    agent_binds.push(Bind {
                        host: m.dir.clone(),
                        at: "/agent".into(),
                        writable: false,
                    });
                    let (session, net) = match &req.settings.gateway {
                        Some(gw) => {
                            let (net, listener) = gateway_listener(&trial)?;
                            let s = GatewaySession::open(gw, &session_name, listener)?;
                            for (k, v) in s.env() {
                                set_env(&mut e, &k, v);
                            }
                            (Some(s), net)
                        }
                        None => (None, None),
                    };
                    let program = argv[0].clone();
                    let ran = trial
                        .run(Phase {
                            argv,
                            env: e,
                            stdin: Some(task.instruction.clone().into_bytes()),
                            timeout: timeouts.agent,
                            log: l.agent_logs.join("agent.txt"),
                            binds: agent_binds,
                            writes: agent_writes,
                            netns: net.as_ref().map(AgentNetwork::path),
                        })
                        .await;
                    // Every process of the phase is gone: nothing can call the gateway now.
                    if let Some(s) = session {
                        metered = Some(s.close().await);
                    }
                    drop(net);
                    let o = ran.map_err(|e| {
                        Error::new(
                            ErrorKind::InvalidAgent,
                            format!("cannot start agent command {program:?}: {e}"),
                        )
                    })?;
                    (o.exit_code, o.timed_out, o.over_quota)
                }
                AgentEntry::Component { path, bytes } => {
                    fs_iso = "wasi_preopens";
                    let mut component_env = m.env.clone();
                    component_env.extend(req.settings.agent_env.iter().cloned());
                    let o = super::wasi::run_component(
                        super::wasi::ComponentAgent {
                            name: path,
                            bytes: bytes.clone(),
                            env: &component_env,
                            agent_dir: &m.dir,
                            memory_bytes: task
                                .config
                                .environment
                                .memory_mb
                                .map_or(super::wasi::DEFAULT_MEMORY_BYTES, |mb| {
                                    mb.saturating_mul(1 << 20)
                                }),
                        },
                        &task.instruction,
                        &l.app,
                        &l.agent_logs,
                        timeouts.agent,
                        self.output_cap,
                    )
                    .await?;
                    // A component writes only through its preopens: count them once it is done.
                    let over = trial.quota(agent_writes).exceeded();
                    (o.exit_code, o.timed_out, over)
                }
            },
        };
        result.phases = Some(crate::result::PhaseTimes {
            agent_sec: agent_started.elapsed().as_secs_f64(),
            verifier_sec: None,
        });
        result.isolation = Some(self.isolation(&trial.mode, deny_net, fs_iso, metered.is_some()));
        result.agent_exit_code = agent_out.0;
        if let Some(c) = agent_out.0
            && c != 0
        {
            let _ = crate::beneath::write_new(
                &l.agent_logs,
                "exit-code.txt",
                format!("{c}\n").as_bytes(),
            );
        }
        let budget_out = metered.as_ref().is_some_and(|m| m.budget_exhausted);
        let after = self
            .after_agent(
                &trial,
                req,
                &mut result,
                agent_out,
                budget_out,
                &timeouts,
                &paths,
                &env,
            )
            .await;
        Ok(metered::finish(
            result,
            after,
            started,
            Records {
                trial_dir: &trial_dir,
                agent_logs: &l.agent_logs,
                session: &session_name,
                agent: &req.agent,
                instruction: &task.instruction,
            },
            metered.as_ref(),
        ))
    }

    /// What follows the agent phase: its quota and timeout, then (unless the budget ran out,
    /// which makes the trial unscored anyway) the verifier.
    #[allow(clippy::too_many_arguments)]
    async fn after_agent(
        &self,
        trial: &Trial<'_>,
        req: &TrialRequest,
        result: &mut TrialResult,
        agent_out: (Option<i32>, bool, Option<String>),
        budget_out: bool,
        timeouts: &Timeouts,
        paths: &PathMap,
        env: &[(String, String)],
    ) -> Result<(), Error> {
        let (task, l) = (trial.task, &trial.l);
        if let Some(why) = agent_out.2 {
            // Nothing over the quota is kept.
            empty_dir(&l.app);
            empty_dir(&l.tmp);
            result.status = TrialStatus::CandidateInvalid;
            result.error = Some(TrialError::new(
                "quota_exceeded",
                format!("the agent {why} and was killed"),
            ));
            return Ok(());
        }
        if agent_out.1 {
            result.status = TrialStatus::Timeout;
            result.timeout_owner = Some(TimeoutOwner::Agent);
            result.error = Some(TrialError::new(
                "agent_timeout",
                format!(
                    "agent ran past {} and was killed",
                    timeouts.agent_text(task)
                ),
            ));
            return Ok(());
        }
        if budget_out {
            return Ok(());
        }

        // ---- verifier phase: tests/ appears only now.
        let _ = std::fs::remove_dir_all(&l.solution);
        let _ = std::fs::remove_file(l.verifier_logs.join("reward.txt"));
        let _ = std::fs::remove_file(l.verifier_logs.join("reward.json"));
        copy_rewritten(&task.dir.join("tests"), &l.tests, paths)
            .map_err(|e| Error::infra(format!("cannot stage tests/: {e}")))?;
        if let Mode::Contained { user, .. } = &trial.mode {
            user.own(&l.tests)
                .map_err(|e| Error::io("cannot hand tests/ to the sandbox user", &l.tests, e))?;
        }
        let mut e = env.to_vec();
        for (k, v) in resolve_env(&task.config.verifier.env, paths, "[verifier].env")? {
            set_env(&mut e, &k, v);
        }
        for (k, v) in &req.settings.verifier_env {
            set_env(&mut e, k, v.clone());
        }
        let mut binds = trial.app_binds();
        binds.extend([
            Bind {
                host: l.tests.clone(),
                at: "/tests".into(),
                writable: true,
            },
            Bind {
                host: l.verifier_logs.clone(),
                at: "/logs/verifier".into(),
                writable: true,
            },
            Bind {
                host: l.agent_logs.clone(),
                at: "/logs/agent".into(),
                writable: false,
            },
        ]);
        let verifier_started = Instant::now();
        let o = trial
            .run(Phase {
                argv: vec![
                    "bash".into(),
                    format!("{}/test.sh", trial.seen("/tests", &l.tests)),
                ],
                env: e,
                stdin: None,
                timeout: timeouts.verifier,
                log: l.verifier_logs.join("test-stdout.txt"),
                binds,
                writes: vec![
                    l.app.clone(),
                    l.tests.clone(),
                    l.verifier_logs.clone(),
                    l.tmp.clone(),
                ],
                netns: None,
            })
            .await
            .map_err(|e| Error::infra(format!("cannot run tests/test.sh: {e}")))?;
        if let Some(p) = result.phases.as_mut() {
            p.verifier_sec = Some(verifier_started.elapsed().as_secs_f64());
        }
        if let Some(why) = o.over_quota {
            empty_dir(&l.app);
            empty_dir(&l.tmp);
            result.status = TrialStatus::InfrastructureFailed;
            result.error = Some(TrialError::new(
                "quota_exceeded",
                format!("tests/test.sh {why} and was killed"),
            ));
            return Ok(());
        }
        if o.timed_out {
            result.status = TrialStatus::Timeout;
            result.timeout_owner = Some(TimeoutOwner::Verifier);
            result.error = Some(TrialError::new(
                "verifier_timeout",
                format!(
                    "tests/test.sh ran past {} and was killed",
                    timeouts.verifier_text(task)
                ),
            ));
            return Ok(());
        }
        finish_with_reward(result, &l.verifier_logs);
        Ok(())
    }
}

/// The gateway's listener for `trial`'s agent: inside a namespace of its own when the jail
/// denies the network; on the host's loopback when the agent shares the host's network
/// anyway (an unconfined trial, a task that allows the network).
fn gateway_listener(
    trial: &Trial<'_>,
) -> Result<(Option<AgentNetwork>, std::net::TcpListener), Error> {
    if trial.contained() && trial.deny_net {
        let (net, listener) = reach::isolated().map_err(|e| {
            Error::infra(format!(
                "cannot make the agent's network namespace for the model gateway: {e}"
            ))
        })?;
        return Ok((Some(net), listener));
    }
    let listener = reach::host_loopback().map_err(|e| {
        Error::infra(format!(
            "cannot listen on 127.0.0.1 for the model gateway: {e}"
        ))
    })?;
    Ok((None, listener))
}

/// A command agent's program named without a `/` must be an executable on the trial's
/// `PATH` (the host's system directories, which a jail shows read-only).
fn check_on_path(program: &str) -> Result<(), Error> {
    if contain::find_executable(program, TRIAL_PATH).is_some() {
        Ok(())
    } else {
        Err(Error::new(ErrorKind::InvalidAgent, format!("agent command {program:?} is not an executable on PATH"))
            .at("agent.toml in the agent directory")
            .hint("command[0] is resolved against the target directory when it contains a '/' (e.g. \"./run.sh\"); make it executable"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::AgentManifest;

    fn request(task: &Path, agent: AgentSpec) -> TrialRequest {
        TrialRequest {
            task: Arc::new(Task::load(task).unwrap()),
            repetition: 0,
            agent: Arc::new(agent),
            trial_dir: task.join("unused"),
            settings: Default::default(),
        }
    }

    fn component_agent(dir: &Path, bytes: &[u8]) -> AgentSpec {
        AgentSpec::Target(AgentManifest {
            dir: dir.to_path_buf(),
            entry: AgentEntry::Component {
                path: "agent.wasm".into(),
                bytes: Arc::new(bytes.to_vec()),
            },
            env: BTreeMap::new(),
        })
    }

    /// Without bubblewrap only a trial made wholly of shipped code may run: a changed
    /// agent component, a command agent or an edited task is not.
    #[test]
    fn framework_code_is_recognised_byte_for_byte() {
        let tmp = tempfile::tempdir().unwrap();
        let task = tmp.path().join("t");
        std::fs::create_dir_all(task.join("tests")).unwrap();
        std::fs::write(task.join("task.toml"), "version = \"1.0\"\n").unwrap();
        std::fs::write(task.join("instruction.md"), "Answer.\n").unwrap();
        std::fs::write(task.join("tests/test.sh"), "#!/bin/sh\n").unwrap();
        let shipped = b"\0asm shipped agent";
        let code = FrameworkCode {
            agent_components: [crate::digest::sha256_prefixed(shipped)].into(),
            tasks: [crate::digest::task_digest(&task).unwrap()].into(),
        };
        let agent_dir = tmp.path().join("agent");
        assert!(code.runs_only(&request(&task, component_agent(&agent_dir, shipped))));
        assert!(code.runs_only(&request(&task, AgentSpec::Oracle)));
        let evolved = component_agent(&agent_dir, b"\0asm evolved agent");
        assert!(!code.runs_only(&request(&task, evolved)));
        let command = AgentSpec::Target(AgentManifest {
            dir: agent_dir.clone(),
            entry: AgentEntry::Command(vec!["./agent.sh".into()]),
            env: BTreeMap::new(),
        });
        assert!(!code.runs_only(&request(&task, command)));
        std::fs::write(
            task.join("tests/test.sh"),
            "#!/bin/sh\nrun-what-the-agent-wrote\n",
        )
        .unwrap();
        assert!(!code.runs_only(&request(&task, AgentSpec::Oracle)));
    }
}
