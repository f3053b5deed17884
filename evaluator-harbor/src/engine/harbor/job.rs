//! One `harbor run` for all trials of an evaluation (one per network policy, see [`run`]),
//! read back into evolve's own trial directories.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cleanup;
use super::job_agent::{JobAgent, JobModelAccess, ModelPath};
use super::results::{parse_trial_result, trials_in};
use super::{HarborEngine, HarborOptions, harbor_task_dir};
use crate::engine::{JobOutcome, TrialRequest, classify_error, failed_trial};
use crate::error::{Error, Result};
use crate::gateway::{TrialModelLog, TrialUsage};
use crate::result::{TrialError, TrialResult, TrialStatus};
use crate::task::Task;

/// How long harbor gets, after SIGINT, to stop its trials and remove their environments
/// itself before it is killed.
const GRACE: Duration = Duration::from_secs(20);

/// The tasks of one job: all of an evaluation's tasks under one network policy.
struct Group {
    /// `harbor:<mode>`, recorded as each trial's `isolation.network`.
    network: &'static str,
    /// Task name → its requests, in repetition order.
    tasks: BTreeMap<String, Vec<TrialRequest>>,
}

/// Run every request as Harbor jobs and report each result through `done` as it is read
/// back. Tasks that run under different network policies run as separate jobs, one after the
/// other, so that an environment refusing one policy does not sink the tasks of another.
pub async fn run(
    engine: &HarborEngine,
    reqs: &[TrialRequest],
    n_concurrent: usize,
    max_retries: u32,
    done: &(dyn Fn(&TrialResult) + Send + Sync),
) -> JobOutcome {
    let mut shared: Option<TrialUsage> = None;
    let trials = run_groups(engine, reqs, n_concurrent, max_retries, done, &mut shared).await;
    JobOutcome {
        trials,
        shared_usage: shared,
    }
}

async fn run_groups(
    engine: &HarborEngine,
    reqs: &[TrialRequest],
    n_concurrent: usize,
    max_retries: u32,
    done: &(dyn Fn(&TrialResult) + Send + Sync),
    shared: &mut Option<TrialUsage>,
) -> Vec<TrialResult> {
    let mut out = Vec::new();
    let Some(first) = reqs.first() else {
        return out;
    };
    let fail_all = |reqs: &[TrialRequest], e: &Error, out: &mut Vec<TrialResult>| {
        let (status, err) = classify_error(e);
        for req in reqs {
            let r = failed_trial(req, "harbor", status, err.clone());
            done(&r);
            out.push(r);
        }
    };
    // trials/<task>__r<k> → the evaluation's output dir, which also holds Harbor's side.
    let root = first
        .trial_dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("."))
        .join("harbor");
    let agent = match super::agents::job_agent(&first.agent, &engine.options, &root.join("agent")) {
        Ok(a) => a,
        Err(e) => {
            fail_all(reqs, &e, &mut out);
            return out;
        }
    };
    let mut groups: Vec<Group> = Vec::new();
    let mut by_task: BTreeMap<String, Vec<TrialRequest>> = BTreeMap::new();
    for r in reqs {
        by_task
            .entry(r.task.name.clone())
            .or_default()
            .push(r.clone());
    }
    for (name, mut task_reqs) in by_task {
        task_reqs.sort_by_key(|r| r.repetition);
        let task = task_reqs[0].task.clone();
        let prepared = (|| -> Result<&'static str> {
            let (dir, network) = harbor_task_dir(&task, &root.join("copies"))?;
            let dataset = root.join(dataset_name(network)).join("tasks");
            copy_into(&dir, &dataset.join(&name))?;
            Ok(network)
        })();
        match prepared {
            Ok(network) => match groups.iter_mut().find(|g| g.network == network) {
                Some(g) => {
                    g.tasks.insert(name, task_reqs);
                }
                None => groups.push(Group {
                    network,
                    tasks: BTreeMap::from([(name, task_reqs)]),
                }),
            },
            Err(e) => fail_all(&task_reqs, &e, &mut out),
        }
    }
    for g in groups {
        let dataset = root.join(dataset_name(g.network));
        let results = run_group(
            engine,
            &agent,
            &g,
            &dataset,
            n_concurrent,
            max_retries,
            done,
            shared,
        )
        .await;
        out.extend(results);
    }
    out
}

fn dataset_name(network: &str) -> String {
    network.replace(':', "-")
}

/// Copy a task directory to `to`, replacing what was there (a rerun of the evaluation).
fn copy_into(from: &Path, to: &Path) -> Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| Error::io("cannot clear", to, e))?;
    }
    std::fs::create_dir_all(to).map_err(|e| Error::io("cannot create", to, e))?;
    crate::digest::copy_task(from, to)
}

/// `--include-task-name` takes a glob: a task name is matched literally by putting each glob
/// character in brackets.
fn literal_glob(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '*' | '?' | '[' | ']' => format!("[{c}]"),
            c => c.to_string(),
        })
        .collect()
}

/// The `harbor run` arguments of one job (everything after `run`).
#[allow(clippy::too_many_arguments)]
pub fn job_args(
    options: &HarborOptions,
    agent: &JobAgent,
    access: &JobModelAccess,
    dataset: &Path,
    task_names: &[&str],
    repetitions: u32,
    n_concurrent: usize,
    max_retries: u32,
    job_name: &str,
    jobs_dir: &Path,
    settings: &crate::gateway::TrialSettings,
) -> Vec<String> {
    let mut a: Vec<String> = vec!["-p".into(), dataset.display().to_string()];
    for t in task_names {
        a.push("--include-task-name".into());
        a.push(literal_glob(t));
    }
    let n = options
        .n_concurrent
        .map(|n| n as usize)
        .unwrap_or(n_concurrent)
        .max(1);
    let retries = options.max_retries.unwrap_or(max_retries);
    a.extend([
        "-n".into(),
        n.to_string(),
        "-k".into(),
        repetitions.max(1).to_string(),
        "-r".into(),
        retries.to_string(),
        "--job-name".into(),
        job_name.into(),
        "-o".into(),
        jobs_dir.display().to_string(),
        "-y".into(),
        "-q".into(),
        "-e".into(),
        options.environment().into(),
    ]);
    for (k, v) in &options.environment_kwargs {
        a.push("--ek".into());
        a.push(format!("{k}={v}"));
    }
    a.extend(agent.args.iter().cloned());
    a.extend(access.args.iter().cloned());
    a.extend([
        "--agent-timeout-multiplier".into(),
        settings.agent_timeout_multiplier.to_string(),
        "--verifier-timeout-multiplier".into(),
        settings.verifier_timeout_multiplier.to_string(),
    ]);
    for (flag, m) in [
        ("--timeout-multiplier", options.timeout_multiplier),
        (
            "--agent-setup-timeout-multiplier",
            options.agent_setup_timeout_multiplier,
        ),
        (
            "--environment-build-timeout-multiplier",
            options.environment_build_timeout_multiplier,
        ),
    ] {
        if let Some(m) = m {
            a.push(flag.into());
            a.push(m.to_string());
        }
    }
    a.extend(options.extra_args.iter().cloned());
    a
}

/// A running `harbor run`. Dropped before [`JobGuard::finished`] (the evaluation was
/// cancelled: Ctrl-C, SIGTERM, a lifecycle stop), it stops harbor so that it cleans up after
/// itself, waits at most [`GRACE`], kills what is left of its process group, and removes
/// every Compose project of the job's trials. Synchronous on purpose: a drop cannot await.
struct JobGuard {
    child: Option<tokio::process::Child>,
    pgid: Option<i32>,
    job_dir: PathBuf,
}

impl JobGuard {
    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(p) = self.pgid.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process_group(p, sig);
        }
    }

    /// Harbor exited on its own: remove whatever its trials left behind (a failed `down`).
    fn finished(mut self) {
        // Compose processes harbor started may outlive it; nothing of the job should.
        self.signal(rustix::process::Signal::KILL);
        self.child = None;
        cleanup::remove_projects(&cleanup::job_projects(&self.job_dir));
    }
}

impl Drop for JobGuard {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(None)) {
            self.signal(rustix::process::Signal::INT);
            let until = Instant::now() + GRACE;
            while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.signal(rustix::process::Signal::KILL);
        let _ = child.start_kill();
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        cleanup::remove_projects(&cleanup::job_projects(&self.job_dir));
    }
}

/// What Harbor prints when its environment cannot enforce a task's `network_mode`.
fn network_refused(log: &str) -> bool {
    log.contains("network_mode") && log.contains("not supported")
}

fn tail_of(p: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].trim().replace('\n', " | ")
}

/// Run one group as one Harbor job and read its trials back. The job's model calls, which
/// all go through one gateway listener, are added to `shared`.
#[allow(clippy::too_many_arguments)]
async fn run_group(
    engine: &HarborEngine,
    agent: &JobAgent,
    g: &Group,
    dataset: &Path,
    n_concurrent: usize,
    max_retries: u32,
    done: &(dyn Fn(&TrialResult) + Send + Sync),
    shared: &mut Option<TrialUsage>,
) -> Vec<TrialResult> {
    let started = Instant::now();
    let all: Vec<&TrialRequest> = g.tasks.values().flatten().collect();
    let settings = all[0].settings.clone();
    let label = format!("harbor-{}", dataset_name(g.network));
    let (access, gateway) = match super::access::open(&settings, &engine.options, &label).await {
        Ok((extra, gw)) => (with_fixed(&engine.model_access, extra), gw),
        Err(e) => {
            let (status, err) = classify_error(&e);
            return all
                .iter()
                .map(|req| {
                    let r = failed_trial(req, "harbor", status, err.clone());
                    done(&r);
                    r
                })
                .collect();
        }
    };
    let reps = all.iter().map(|r| r.repetition + 1).max().unwrap_or(1);
    let jobs_dir = dataset.join("jobs");
    let job_name = "job";
    let job_dir = jobs_dir.join(job_name);
    let log_path = dataset.join("harbor.log");
    let names: Vec<&str> = g.tasks.keys().map(String::as_str).collect();
    let outcome = start_and_wait(
        engine,
        agent,
        &access,
        &dataset.join("tasks"),
        &names,
        reps,
        n_concurrent,
        max_retries,
        &jobs_dir,
        job_name,
        &log_path,
        &settings,
        g,
    )
    .await;
    let metered = match gateway {
        Some(gw) => Some(gw.close().await),
        None => None,
    };
    if let Some(log) = &metered {
        // The job's exchanges, beside its log.
        crate::engine::metered::write_exchanges(dataset, log);
        add_usage(shared, &log.usage);
    }
    let found = trials_in(&job_dir);
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut by_task: BTreeMap<&str, Vec<&super::results::HarborTrial>> = BTreeMap::new();
    for t in &found {
        by_task.entry(t.task_name.as_str()).or_default().push(t);
    }
    let wall = started.elapsed().as_secs_f64() / all.len().max(1) as f64;
    let mut out = Vec::new();
    for (name, task_reqs) in &g.tasks {
        let harbor_trials = by_task.get(name.as_str()).cloned().unwrap_or_default();
        for (k, req) in task_reqs.iter().enumerate() {
            let r = match (harbor_trials.get(k), &outcome) {
                (Some(ht), _) => read_back(req, ht, g.network, &access, wall),
                (None, Err(e)) => {
                    let (status, err) = classify_error(e);
                    failed_trial(req, "harbor", status, err)
                }
                (None, Ok(_)) if found.is_empty() && network_refused(&log) => {
                    refused_network(req, g.network, &log_path)
                }
                (None, Ok(status)) => {
                    let why = if found.is_empty() {
                        format!(
                            "harbor run exited with {status} and wrote no trial result (log tail: {})",
                            tail_of(&log_path, 600)
                        )
                    } else {
                        format!(
                            "harbor produced {} trial(s) of task {name}, not repetition {}",
                            harbor_trials.len(),
                            req.repetition
                        )
                    };
                    failed_trial(
                        req,
                        "harbor",
                        TrialStatus::InfrastructureFailed,
                        TrialError::new(
                            "engine_error",
                            format!("{why}; see the job log {}", log_path.display()),
                        ),
                    )
                }
            };
            let mut r = r;
            if let Some(log) = metered.as_ref().filter(|l| l.budget_exhausted) {
                budget_ran_out(&mut r, log);
            }
            r.logs.trial_dir = req.trial_dir.clone();
            let _ = std::fs::create_dir_all(&req.trial_dir);
            done(&r);
            out.push(r);
        }
    }
    out
}

/// `fixed` (the engine's own `--ae` flags) followed by the evaluation's model access.
fn with_fixed(fixed: &JobModelAccess, extra: JobModelAccess) -> JobModelAccess {
    let mut a = fixed.clone();
    a.args.extend(extra.args);
    a.env.extend(extra.env);
    if extra.path != ModelPath::None {
        a.path = extra.path;
    }
    a
}

fn add_usage(shared: &mut Option<TrialUsage>, u: &TrialUsage) {
    let s = shared.get_or_insert_with(TrialUsage::default);
    s.calls += u.calls;
    s.prompt_tokens += u.prompt_tokens;
    s.completion_tokens += u.completion_tokens;
    s.usd += u.usd;
    s.refused_by_budget += u.refused_by_budget;
    s.ledger_ids.extend(u.ledger_ids.iter().cloned());
}

/// The budget ran out while the job's agents were working. Which trial's call was refused
/// cannot be told (they share one listener), so no trial of the job is scored: the
/// lifecycle stops the run, as it does when one trial of another engine hits the budget.
fn budget_ran_out(r: &mut TrialResult, log: &TrialModelLog) {
    r.status = TrialStatus::InfrastructureFailed;
    r.timeout_owner = None;
    r.error = Some(TrialError::new(
        crate::result::BUDGET_EXHAUSTED,
        format!(
            "the experiment's budget ran out while the job's agents were working: the model gateway refused {} of the job's {} model call(s) with 429; this is not a failure of the candidate, and no trial of the job is scored",
            log.usage.refused_by_budget, log.usage.calls
        ),
    ));
}

/// A trial whose job Harbor refused at preflight because its environment cannot enforce the
/// task's network policy.
fn refused_network(req: &TrialRequest, network: &str, log: &Path) -> TrialResult {
    let mode = network.trim_start_matches("harbor:");
    let mut r = failed_trial(
        req,
        "harbor",
        TrialStatus::InfrastructureFailed,
        TrialError::new(
            "unsupported_task",
            format!(
                "task {}: Harbor's environment cannot enforce the task's network policy \
                 (network_mode = \"{mode}\"), so harbor refused to run it (see {}); hint: set \
                 `network_mode = \"public\"` under `[environment]` in the task's task.toml if \
                 it may use the network, or use an environment that enforces no-network \
                 (--engine docker or local, or a Harbor environment that supports it)",
                req.task.name,
                log.display()
            ),
        ),
    );
    r.isolation = None;
    r
}

/// One Harbor trial as evolve's result: classified from its result.json, with evolve's
/// trial dir holding a `harbor-trial` link to Harbor's.
fn read_back(
    req: &TrialRequest,
    ht: &super::results::HarborTrial,
    network: &str,
    access: &JobModelAccess,
    wall: f64,
) -> TrialResult {
    let mut r = match parse_trial_result(&ht.result_json, &req.task.name, req.repetition) {
        Ok(r) => r,
        Err(e) => {
            let (status, err) = classify_error(&e);
            return failed_trial(req, "harbor", status, err);
        }
    };
    if let Some(iso) = r.isolation.as_mut() {
        iso.network = network.into();
    }
    if access.path == ModelPath::Gateway {
        // The gateway metered the trial; what the agent says it spent is not a meter reading.
        r.agent_usage = None;
    }
    r.wall_time_sec = wall;
    let _ = std::fs::create_dir_all(&req.trial_dir);
    let link = req.trial_dir.join("harbor-trial");
    let _ = std::fs::remove_file(&link);
    if let Some(dir) = ht.result_json.parent() {
        let _ = std::os::unix::fs::symlink(dir, &link);
    }
    r
}

/// Start harbor and wait for it (or for the job's time budget); the exit status, or why
/// harbor could not run.
#[allow(clippy::too_many_arguments)]
async fn start_and_wait(
    engine: &HarborEngine,
    agent: &JobAgent,
    access: &JobModelAccess,
    dataset: &Path,
    names: &[&str],
    reps: u32,
    n_concurrent: usize,
    max_retries: u32,
    jobs_dir: &Path,
    job_name: &str,
    log_path: &Path,
    settings: &Arc<crate::gateway::TrialSettings>,
    g: &Group,
) -> Result<std::process::ExitStatus> {
    let job_dir = jobs_dir.join(job_name);
    if job_dir.exists() {
        // A rerun of the evaluation: harbor would resume the old job instead.
        std::fs::remove_dir_all(&job_dir).map_err(|e| Error::io("cannot clear", &job_dir, e))?;
    }
    let log =
        std::fs::File::create(log_path).map_err(|e| Error::io("cannot create", log_path, e))?;
    let log2 = log
        .try_clone()
        .map_err(|e| Error::io("cannot create", log_path, e))?;
    let args = job_args(
        &engine.options,
        agent,
        access,
        dataset,
        names,
        reps,
        n_concurrent,
        max_retries,
        job_name,
        jobs_dir,
        settings,
    );
    let mut cmd = tokio::process::Command::new(&engine.harbor_bin);
    cmd.arg("run")
        .args(&args)
        .env("HARBOR_TELEMETRY", "0")
        .envs(agent.env.iter().map(|(k, v)| (k, v)))
        .envs(access.env.iter().map(|(k, v)| (k, v)))
        // LiteLLM (inside harbor and its agents) otherwise spends seconds failing to
        // fetch its model price list from the network at import.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0);
    if !agent.pythonpath.is_empty() {
        let mut paths = agent.pythonpath.clone();
        if let Some(old) = std::env::var_os("PYTHONPATH") {
            paths.extend(std::env::split_paths(&old));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            cmd.env("PYTHONPATH", joined);
        }
    }
    let child = cmd
        .spawn()
        .map_err(|e| Error::infra(format!("cannot start {}: {e}", engine.harbor_bin.display())))?;
    let pgid = child.id().map(|p| p as i32);
    let mut guard = JobGuard {
        child: Some(child),
        pgid,
        job_dir: job_dir.clone(),
    };
    let n = engine
        .options
        .n_concurrent
        .map(|n| n as usize)
        .unwrap_or(n_concurrent);
    let budget = job_budget(g, n, settings);
    let waited = match guard.child.as_mut() {
        Some(c) => tokio::time::timeout(budget, c.wait()).await,
        None => return Err(Error::infra("harbor: lost its process")),
    };
    match waited {
        Ok(s) => {
            guard.finished();
            s.map_err(|e| Error::infra(format!("harbor: {e}")))
        }
        Err(_) => {
            // Over budget: the guard stops harbor and cleans up as on cancellation.
            drop(guard);
            Err(Error::infra(format!(
                "harbor run did not finish within {} s",
                budget.as_secs()
            ))
            .at_path(log_path))
        }
    }
}

/// The longest a job may take: every task's build, agent and verifier time, run `n` at a
/// time, with Harbor's own start-up on top.
fn job_budget(
    g: &Group,
    n_concurrent: usize,
    settings: &crate::gateway::TrialSettings,
) -> Duration {
    let per_trial = |t: &Task| {
        t.config.environment.build_timeout_sec
            + t.config.agent.timeout_sec.unwrap_or(3600.0) * settings.agent_timeout_multiplier
            + t.config.verifier.timeout_sec * settings.verifier_timeout_multiplier
            + 300.0
    };
    let total: f64 = g.tasks.values().flatten().map(|r| per_trial(&r.task)).sum();
    let secs = total / n_concurrent.max(1) as f64 + 300.0;
    Duration::from_secs_f64(secs.clamp(60.0, 30.0 * 86400.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_are_matched_literally() {
        assert_eq!(literal_glob("a*b?[c]"), "a[*]b[?][[]c[]]");
        assert_eq!(literal_glob("plain-name"), "plain-name");
    }
}
