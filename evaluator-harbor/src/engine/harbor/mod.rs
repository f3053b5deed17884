//! The `harbor` engine: shells out to the real `harbor` CLI (PyPI `harbor`, Python ≥ 3.12)
//! and parses its trial `result.json` for timeouts and errors; the reward files Harbor copied
//! into the trial's `verifier/` dir are read with this project's own parser, so the same files
//! give the same status on every engine.
//!
//! One trial = one `harbor run -p <task snapshot> -a oracle --job-name <trial> -o <trial>/jobs
//! -n 1 -k 1 -y -q [extra args]` with `HARBOR_TELEMETRY=0`. Extra args are passed through
//! verbatim, so Harbor's environments (`-e daytona|modal|e2b|...`, `--ek k=v`,
//! `--override-cpus`, ...) serve users who outgrow one machine. The default environment is
//! `-e docker`, which needs the Docker Compose v2 plugin (`docker compose`).
//! The network: Harbor enforces a task's `[environment].network_mode`; a task that names none
//! (evolve's default: no network; Harbor's: public) runs from a copy whose task.toml says
//! `no-network` (see [`harbor_task_dir`]); `isolation.network` records `harbor:<mode>`.
//! Only the oracle agent is supported here (Harbor's own agents are Python classes; pass
//! `-a module:Class` through the extra args at your own risk; it replaces the oracle).

pub mod access;
pub mod agents;
pub mod job_agent;
pub mod options;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::local::finish_with_reward;
use super::{BoxFuture, Engine, TrialRequest, classify_error, failed_trial};
use crate::agent::AgentSpec;
use crate::error::{Error, ErrorKind, Result};
use crate::result::{Isolation, TimeoutOwner, TrialError, TrialLogs, TrialResult, TrialStatus};
use crate::task::{NetworkMode, Task, TaskConfig};
pub use options::HarborOptions;

/// Where ci-setup.sh installs the harbor CLI.
pub const CI_HARBOR_BIN: &str = "/var/cache/evolve-ci/harbor-venv/bin/harbor";

/// The harbor CLI engine.
#[derive(Debug, Clone)]
pub struct HarborEngine {
    pub harbor_bin: PathBuf,
    /// Extra `harbor run` arguments (default: `-e docker`).
    pub extra_args: Vec<String>,
}

/// How to get a working harbor CLI.
const INSTALL_HINT: &str = "install it with Python ≥ 3.12 (`pip install harbor`), or run evaluator-harbor/ci-setup.sh, and set EVOLVE_HARBOR_BIN to its `harbor` binary if it is not on PATH";

/// Fail unless `bin` (found through `origin`) is an executable file that answers `--version`:
/// a missing or broken CLI would otherwise fail every trial as an engine error, one by one.
fn check_runnable(bin: &Path, origin: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let shown = format!("{origin}: {}", bin.display());
    let unusable =
        |why: String| Error::infra(format!("the harbor CLI ({shown}) {why}")).hint(INSTALL_HINT);
    let meta = std::fs::metadata(bin).map_err(|e| unusable(format!("cannot be used: {e}")))?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(unusable("is not an executable file".into()));
    }
    let out = std::process::Command::new(bin)
        .arg("--version")
        .env("HARBOR_TELEMETRY", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| unusable(format!("cannot be run: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").trim();
        return Err(unusable(format!(
            "does not run: `--version` exited with {}: {last}",
            out.status
        )));
    }
    Ok(())
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|c| c.is_file())
    })
}

impl HarborEngine {
    /// Find the CLI: `$EVOLVE_HARBOR_BIN`, then ci-setup.sh's venv, then `harbor` on PATH;
    /// fail (before any trial) unless it exists, is executable and answers `--version`.
    pub fn discover(options: HarborOptions) -> Result<HarborEngine> {
        let (bin, origin) = std::env::var_os("EVOLVE_HARBOR_BIN")
            .map(|b| (PathBuf::from(b), "EVOLVE_HARBOR_BIN"))
            .or_else(|| {
                Some(PathBuf::from(CI_HARBOR_BIN))
                    .filter(|p| p.is_file())
                    .map(|p| (p, "ci-setup.sh's venv"))
            })
            .or_else(|| on_path("harbor").map(|p| (p, "PATH")))
            .ok_or_else(|| {
                Error::infra("the `harbor` CLI was not found (EVOLVE_HARBOR_BIN is unset and no `harbor` is on PATH)")
                    .hint(INSTALL_HINT)
            })?;
        check_runnable(&bin, origin)?;
        let mut extra_args = vec!["-e".to_string(), options.environment().to_string()];
        extra_args.extend(options.extra_args);
        Ok(HarborEngine {
            harbor_bin: bin,
            extra_args,
        })
    }

    async fn trial(&self, req: &TrialRequest) -> Result<TrialResult> {
        let task = &req.task;
        if !matches!(req.agent.as_ref(), AgentSpec::Oracle) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "the harbor engine runs the oracle agent only",
            )
            .hint("use --engine local or docker for agent.toml agents"));
        }
        let started = Instant::now();
        let jobs = req.trial_dir.join("jobs");
        let job = crate::result::trial_name(&task.name, req.repetition);
        let log_path = req.trial_dir.join("harbor.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| Error::io("cannot create", &log_path, e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| Error::io("cannot create", &log_path, e))?;
        let (task_dir, network) = harbor_task_dir(task, &req.trial_dir)?;
        let mut cmd = tokio::process::Command::new(&self.harbor_bin);
        cmd.arg("run")
            .arg("-p")
            .arg(&task_dir)
            .args([
                "-a",
                "oracle",
                "--job-name",
                &job,
                "-n",
                "1",
                "-k",
                "1",
                "-y",
                "-q",
                "-o",
            ])
            .arg(&jobs)
            .args(&self.extra_args)
            .env("HARBOR_TELEMETRY", "0")
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .kill_on_drop(true);
        let budget = task.config.environment.build_timeout_sec
            + task.config.agent.timeout_sec.unwrap_or(3600.0)
            + task.config.verifier.timeout_sec
            + 300.0;
        let mut child = cmd.spawn().map_err(|e| {
            Error::infra(format!("cannot start {}: {e}", self.harbor_bin.display()))
        })?;
        let pgid = child.id();
        let status = match tokio::time::timeout(Duration::from_secs_f64(budget), child.wait()).await
        {
            Ok(s) => s.map_err(|e| Error::infra(format!("harbor: {e}")))?,
            Err(_) => {
                if let Some(p) = pgid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                    let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
                }
                return Err(
                    Error::infra(format!("harbor run did not finish within {budget} s"))
                        .at_path(&log_path),
                );
            }
        };
        let job_dir = jobs.join(&job);
        let trial_json = find_trial_result(&job_dir);
        let Some(trial_json) = trial_json else {
            let tail = tail_of(&log_path, 800);
            return Err(Error::infra(format!(
                "harbor run exited with {status} and wrote no trial result.json; log tail: {tail}"
            ))
            .at_path(&log_path));
        };
        let mut r = parse_trial_result(&trial_json, &task.name, req.repetition)?;
        if let Some(iso) = r.isolation.as_mut() {
            iso.network = network.into();
        }
        r.wall_time_sec = started.elapsed().as_secs_f64();
        Ok(r)
    }
}

/// The `network_mode` line that puts a task without one under evolve's default (no network)
/// instead of Harbor's (public).
const NO_NETWORK_LINE: &str = "network_mode = \"no-network\"\n";

/// The task directory to give Harbor, and the network policy in force there (recorded as the
/// trial's `isolation.network`). Harbor 0.25.0 enforces a task's `[environment].network_mode`
/// itself (and refuses to start a task whose environment cannot enforce it), so a task that
/// names a mode runs as it is. A task that names none is public to Harbor but denied the
/// network by evolve: it runs from a copy in the trial dir whose task.toml says `no-network`.
fn harbor_task_dir(task: &Task, trial_dir: &Path) -> Result<(PathBuf, &'static str)> {
    match task.config.environment.network_mode {
        Some(NetworkMode::Public) => Ok((task.dir.clone(), "harbor:public")),
        Some(NetworkMode::NoNetwork) => Ok((task.dir.clone(), "harbor:no-network")),
        Some(NetworkMode::Allowlist) => Ok((task.dir.clone(), "harbor:allowlist")),
        None => Ok((no_network_copy(task, trial_dir)?, "harbor:no-network")),
    }
}

/// Copy `task` under `trial_dir/harbor-task/` (keeping its directory name, which Harbor uses
/// as the task name) with `network_mode = "no-network"` added to its `[environment]`, and
/// check with this project's own parser that the copy says exactly that.
fn no_network_copy(task: &Task, trial_dir: &Path) -> Result<PathBuf> {
    let name = task.dir.file_name().unwrap_or(task.name.as_ref());
    let copy = trial_dir.join("harbor-task").join(name);
    std::fs::create_dir_all(&copy).map_err(|e| Error::io("cannot create", &copy, e))?;
    crate::digest::copy_task(&task.dir, &copy)?;
    let toml_path = copy.join("task.toml");
    let text =
        std::fs::read_to_string(&toml_path).map_err(|e| Error::io("cannot read", &toml_path, e))?;
    let denied = with_no_network(&text);
    let parsed = TaskConfig::parse(&denied, &toml_path).ok();
    if parsed.and_then(|c| c.environment.network_mode) != Some(NetworkMode::NoNetwork) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "task {}: cannot tell Harbor to run it without network (its task.toml has no \
                 `[environment]` table header this engine can add `network_mode` under)",
                task.name
            ),
        )
        .at_path(&task.dir.join("task.toml"))
        .hint("give the task `[environment]` with `network_mode = \"no-network\"` (or \"public\" if it needs the network), or use --engine local or docker"));
    }
    std::fs::write(&toml_path, denied).map_err(|e| Error::io("cannot write", &toml_path, e))?;
    Ok(copy)
}

/// `text` with [`NO_NETWORK_LINE`] under its `[environment]` header, or a new
/// `[environment]` table at its end when it has none.
fn with_no_network(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 40);
    let mut added = false;
    for line in text.split_inclusive('\n') {
        out.push_str(line);
        let code = line.split('#').next().unwrap_or("").trim();
        if !added && code == "[environment]" {
            if !line.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(NO_NETWORK_LINE);
            added = true;
        }
    }
    if !added {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("\n[environment]\n");
        out.push_str(NO_NETWORK_LINE);
    }
    out
}

fn tail_of(p: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let start = s.len().saturating_sub(n);
    s.get(start..).unwrap_or("").replace('\n', " | ")
}

/// The first `<job>/<trial>/result.json` that has `task_name` and `trial_name`.
pub fn find_trial_result(job_dir: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(job_dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.into_iter().map(|d| d.join("result.json")).find(|p| {
        std::fs::read(p)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| {
                v.get("task_name").is_some_and(|x| x.is_string())
                    && v.get("trial_name").is_some_and(|x| x.is_string())
            })
    })
}

/// Map a Harbor TrialResult file onto our classification.
pub fn parse_trial_result(path: &Path, task: &str, repetition: u32) -> Result<TrialResult> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("cannot read", path, e))?;
    let v: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::infra(format!("harbor result.json is not JSON: {e}")).at_path(path))?;
    let trial_dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut r = TrialResult::failed(
        task,
        repetition,
        "harbor",
        TrialStatus::InfrastructureFailed,
        TrialError::new("engine_error", ""),
    );
    r.error = None;
    r.logs = TrialLogs {
        agent_dir: trial_dir.join("agent"),
        verifier_dir: trial_dir.join("verifier"),
        trial_dir,
        trajectory: None,
    };
    r.isolation = Some(Isolation {
        network: "harbor".into(),
        processes: "harbor".into(),
        filesystem: "harbor".into(),
        user: "harbor".into(),
    });
    if let Ok(code) = std::fs::read_to_string(r.logs.agent_dir.join("exit-code.txt")) {
        r.agent_exit_code = code.trim().parse().ok();
    } else {
        r.agent_exit_code = Some(0);
    }
    r.cost_usd = v
        .pointer("/agent_result/cost_usd")
        .and_then(|x| x.as_f64())
        .filter(|c| c.is_finite() && *c >= 0.0);
    let exc_type = v
        .pointer("/exception_info/exception_type")
        .and_then(|x| x.as_str())
        .unwrap_or("");
    let exc_msg = v
        .pointer("/exception_info/exception_message")
        .and_then(|x| x.as_str())
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    match exc_type {
        "AgentTimeoutError" => {
            r.status = TrialStatus::Timeout;
            r.timeout_owner = Some(TimeoutOwner::Agent);
            r.error = Some(TrialError::new("agent_timeout", exc_msg));
        }
        "VerifierTimeoutError" => {
            r.status = TrialStatus::Timeout;
            r.timeout_owner = Some(TimeoutOwner::Verifier);
            r.error = Some(TrialError::new("verifier_timeout", exc_msg));
        }
        // The verifier finished: its reward files decide, read by this project's own parser
        // (the same caps and error kinds as the local and docker engines), not Harbor's
        // parse of them (Harbor reads any size and reports non-finite values as parse errors).
        "" | "RewardFileNotFoundError" | "RewardFileEmptyError" | "VerifierOutputParseError" => {
            let harbor_rewards = v
                .pointer("/verifier_result/rewards")
                .and_then(|x| x.as_object())
                .is_some_and(|o| !o.is_empty());
            let verifier_dir = r.logs.verifier_dir.clone();
            finish_with_reward(&mut r, &verifier_dir);
            if harbor_rewards
                && let Some(e) = r.error.as_mut().filter(|e| e.kind == "reward_missing")
            {
                e.message = format!(
                    "harbor reported rewards but left no reward.json or reward.txt in {}",
                    verifier_dir.display()
                );
            }
        }
        other => {
            r.error = Some(TrialError::new(
                "engine_error",
                format!("{other}: {exc_msg}"),
            ))
        }
    }
    Ok(r)
}

impl Engine for HarborEngine {
    fn name(&self) -> &'static str {
        "harbor"
    }
    fn run_trial<'a>(&'a self, req: &'a TrialRequest) -> BoxFuture<'a, TrialResult> {
        Box::pin(async move {
            match self.trial(req).await {
                Ok(r) => r,
                Err(e) => {
                    let (status, err) = classify_error(&e);
                    failed_trial(req, "harbor", status, err)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network_mode_of(text: &str) -> Option<NetworkMode> {
        TaskConfig::parse(text, Path::new("task.toml"))
            .unwrap()
            .environment
            .network_mode
    }

    #[test]
    fn a_task_without_network_mode_is_told_no_network() {
        for text in [
            "",
            "[verifier]\ntimeout_sec = 5.0",
            "[environment] # limits\ncpus = 1\n[verifier]\ntimeout_sec = 5.0\n",
            "[environment.env]\nA = \"b\"\n",
        ] {
            let denied = with_no_network(text);
            assert_eq!(
                network_mode_of(&denied),
                Some(NetworkMode::NoNetwork),
                "{denied}"
            );
        }
    }
}
