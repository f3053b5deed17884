//! The `harbor` engine: shells out to the real `harbor` CLI (PyPI `harbor`, Python ≥ 3.12),
//! one Harbor job per evaluation (see [`job`]), and reads every trial's `result.json` back
//! ([`results`]): reward files with this project's own parser, so the same files give the
//! same status on every engine; `exception_info` classified into evolve's statuses; the
//! agent's self-reported usage; its ATIF trajectory.
//!
//! A job is `harbor run -p <dataset> --include-task-name <task>... -n N -k <repetitions>
//! -r <retries> --job-name job -o <dir> -y -q -e <environment> [--ek k=v]... <agent>
//! <model access> <timeout multipliers> [extra args]` with `HARBOR_TELEMETRY=0`; the
//! recipe's `evaluator.harbor` block ([`HarborOptions`]) sets the environment
//! (`docker`, the default, needs the Docker Compose v2 plugin; `daytona`, `modal`, `e2b`,
//! ... run elsewhere) and the rest.
//! The network: Harbor enforces a task's `[environment].network_mode` or refuses the job at
//! preflight; a task that names none (evolve's default: no network; Harbor's: public) runs
//! from a copy whose task.toml says `no-network` (see [`harbor_task_dir`]); tasks of each
//! policy run as their own job, and `isolation.network` records `harbor:<mode>`.
//! Cancellation (the evaluation future dropped) stops harbor with SIGINT, kills it after a
//! grace period, and removes every container, network and image of the job's trials
//! ([`cleanup`]).

pub mod access;
pub mod agents;
pub mod cleanup;
pub mod job;
pub mod job_agent;
pub mod options;
pub mod results;

use std::path::{Path, PathBuf};

use super::{BoxFuture, Engine, TrialRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::result::{TrialError, TrialResult, TrialStatus};
use crate::task::{NetworkMode, Task, TaskConfig};
pub use job_agent::{JobAgent, JobModelAccess};
pub use options::HarborOptions;
pub use results::{find_trial_result, parse_trial_result};

/// Where ci-setup.sh installs the harbor CLI.
pub const CI_HARBOR_BIN: &str = "/var/cache/evolve-ci/harbor-venv/bin/harbor";

/// The harbor CLI engine.
#[derive(Debug, Clone)]
pub struct HarborEngine {
    pub harbor_bin: PathBuf,
    /// The recipe's `evaluator.harbor` block (frozen in the contract).
    pub options: HarborOptions,
    /// Fixed `--ae` flags and the values behind them, passed to every job (for example a
    /// cloud environment's own credentials). Each job adds the evaluation's model access
    /// to them ([`access::open`]: the gateway, or `evaluator.agent_env`).
    pub model_access: JobModelAccess,
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

/// Where the `harbor` CLI is, and what said so: `$EVOLVE_HARBOR_BIN` (as given, even if
/// missing, so that a wrong setting is reported rather than passed over), then
/// ci-setup.sh's venv, then `harbor` on PATH. `None` when none names one.
pub fn locate_cli() -> Option<(PathBuf, &'static str)> {
    std::env::var_os("EVOLVE_HARBOR_BIN")
        .map(|b| (PathBuf::from(b), "EVOLVE_HARBOR_BIN"))
        .or_else(|| {
            Some(PathBuf::from(CI_HARBOR_BIN))
                .filter(|p| p.is_file())
                .map(|p| (p, "ci-setup.sh's venv"))
        })
        .or_else(|| on_path("harbor").map(|p| (p, "PATH")))
}

impl HarborEngine {
    /// Find the CLI ([`locate_cli`]); fail (before any trial) unless it exists, is
    /// executable and answers `--version`.
    pub fn discover(options: HarborOptions) -> Result<HarborEngine> {
        let (bin, origin) = locate_cli()
            .ok_or_else(|| {
                Error::infra("the `harbor` CLI was not found (EVOLVE_HARBOR_BIN is unset and no `harbor` is on PATH)")
                    .hint(INSTALL_HINT)
            })?;
        check_runnable(&bin, origin)?;
        if let Some(p) = options.problems().into_iter().next() {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("evaluator.harbor.{} ({}) {}", p.field, p.flag, p.message),
            )
            .hint("the environment is `evaluator.harbor.environment` (`--harbor-env` on `evolve tasks run`)"));
        }
        Ok(HarborEngine {
            harbor_bin: bin,
            options,
            model_access: JobModelAccess::default(),
        })
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

impl Engine for HarborEngine {
    fn name(&self) -> &'static str {
        "harbor"
    }
    /// One trial alone is a job of one trial; evaluations use [`Engine::run_job`].
    fn run_trial<'a>(&'a self, req: &'a TrialRequest) -> BoxFuture<'a, TrialResult> {
        Box::pin(async move {
            let job = job::run(self, std::slice::from_ref(req), 1, 0, &|_| {}).await;
            let mut trials = job.trials;
            let mut r = trials.pop().unwrap_or_else(|| {
                super::failed_trial(
                    req,
                    "harbor",
                    TrialStatus::InfrastructureFailed,
                    TrialError::new("engine_error", "the harbor job returned no trial"),
                )
            });
            // A job of one trial: the job's model calls are that trial's.
            if let Some(u) = job.shared_usage {
                r.cost_usd = Some(u.usd).filter(|c| c.is_finite() && *c >= 0.0);
                r.usage = Some(u);
            }
            r
        })
    }
    fn run_job<'a>(
        &'a self,
        reqs: &'a [TrialRequest],
        n_concurrent: usize,
        max_retries: u32,
        done: &'a (dyn Fn(&TrialResult) + Send + Sync),
    ) -> Option<BoxFuture<'a, super::JobOutcome>> {
        Some(Box::pin(job::run(
            self,
            reqs,
            n_concurrent,
            max_retries,
            done,
        )))
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
