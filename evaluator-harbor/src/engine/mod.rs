//! Engines run trials; [`run_evaluation`] runs a whole evaluation over one of them.

pub mod contain;
pub mod docker;
pub mod harbor;
pub mod local;
pub mod metered;
pub mod process;
pub mod reach;
pub mod rewrite;
pub mod wasi;

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::agent::AgentSpec;
use crate::error::{Error, ErrorKind};
use crate::gateway::TrialSettings;
use crate::result::{
    EvaluationResult, ScoringPolicy, TrialError, TrialResult, TrialStatus, summarize,
};
use crate::task::Task;

/// A boxed, sendable future (the trait stays dyn-compatible).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Everything an engine needs for one trial.
#[derive(Debug, Clone)]
pub struct TrialRequest {
    /// The task, loaded from its verified snapshot.
    pub task: Arc<Task>,
    /// 0-based repetition index.
    pub repetition: u32,
    pub agent: Arc<AgentSpec>,
    /// An empty directory owned by this trial; the engine writes logs and result.json here.
    pub trial_dir: PathBuf,
    /// The evaluation's gateway, passed-through variables and timeout multipliers.
    pub settings: Arc<TrialSettings>,
}

/// A trial engine. Engines never panic on bad input: every failure is a classified
/// [`TrialResult`].
pub trait Engine: Send + Sync {
    /// `local`, `docker` or `harbor`.
    fn name(&self) -> &'static str;
    /// Run one trial to completion (or classified failure).
    fn run_trial<'a>(&'a self, req: &'a TrialRequest) -> BoxFuture<'a, TrialResult>;
    /// Run all of an evaluation's trials as one job, at most `n_concurrent` at once, with
    /// up to `max_retries` more attempts of a failed trial (the engine's own retry policy),
    /// calling `done` once per trial as its result comes back. Each result's
    /// `logs.trial_dir` is its request's `trial_dir`; `run_evaluation` writes its
    /// result.json there. `None` (the default): the engine runs trial by trial.
    fn run_job<'a>(
        &'a self,
        _reqs: &'a [TrialRequest],
        _n_concurrent: usize,
        _max_retries: u32,
        _done: &'a (dyn Fn(&TrialResult) + Send + Sync),
    ) -> Option<BoxFuture<'a, JobOutcome>> {
        None
    }
}

/// What [`Engine::run_job`] returns.
#[derive(Debug, Default)]
pub struct JobOutcome {
    pub trials: Vec<TrialResult>,
    /// Model calls metered for the job as a whole (see
    /// [`EvaluationResult::shared_usage`]).
    pub shared_usage: Option<crate::gateway::TrialUsage>,
}

/// Build a classified failure result for `req`.
pub fn failed_trial(
    req: &TrialRequest,
    engine: &str,
    status: TrialStatus,
    err: TrialError,
) -> TrialResult {
    let mut t = TrialResult::failed(&req.task.name, req.repetition, engine, status, err);
    t.logs.trial_dir = req.trial_dir.clone();
    t
}

/// Map a crate error onto a trial status + error class.
pub fn classify_error(e: &Error) -> (TrialStatus, TrialError) {
    let (status, kind) = match e.kind {
        ErrorKind::InvalidTask => (TrialStatus::InfrastructureFailed, "invalid_task"),
        ErrorKind::DigestMismatch => (TrialStatus::InfrastructureFailed, "digest_mismatch"),
        ErrorKind::Unsupported => (TrialStatus::InfrastructureFailed, "unsupported_task"),
        ErrorKind::InvalidAgent => (TrialStatus::CandidateInvalid, "invalid_agent"),
        ErrorKind::InvalidSplit | ErrorKind::Usage | ErrorKind::Infrastructure => {
            (TrialStatus::InfrastructureFailed, "engine_error")
        }
    };
    let mut msg = e.to_string();
    if let Some(h) = &e.hint {
        msg.push_str("; hint: ");
        msg.push_str(h);
    }
    (status, TrialError::new(kind, msg))
}

/// One task of an evaluation plan.
#[derive(Debug, Clone)]
pub struct PlannedTask {
    pub name: String,
    /// Where the (frozen) task lives; it is copied, never run in place.
    pub source_dir: PathBuf,
    /// The frozen digest; `None` for direct execution (`evolve tasks run`), where the digest
    /// is only recorded.
    pub expected_digest: Option<String>,
}

/// An evaluation to run.
#[derive(Debug, Clone)]
pub struct EvaluationPlan {
    pub tasks: Vec<PlannedTask>,
    pub repetitions: u32,
    pub agent: AgentSpec,
    /// Output root: `tasks/<name>` (verified snapshots) and `trials/<task>__r<k>/`.
    pub out_dir: PathBuf,
    pub n_concurrent: usize,
    pub policy: ScoringPolicy,
    /// Shared by every trial.
    pub settings: TrialSettings,
    /// How many more times an infrastructure-failed trial is run (each attempt is kept).
    pub max_retries: u32,
}

impl EvaluationPlan {
    /// Plan direct execution of every task found in `dir` (see [`crate::task::discover`]).
    pub fn for_dir(
        dir: &Path,
        agent: AgentSpec,
        out_dir: PathBuf,
    ) -> crate::Result<EvaluationPlan> {
        let dir = std::fs::canonicalize(dir).map_err(|e| {
            Error::new(
                ErrorKind::Usage,
                format!("cannot resolve task directory: {e}"),
            )
            .at_path(dir)
        })?;
        let (tasks, _) = crate::task::discover(&dir)?;
        if tasks.is_empty() {
            return Err(Error::new(ErrorKind::Usage, "no tasks found")
                .at_path(&dir)
                .hint("a task directory holds task.toml; a task set holds task directories"));
        }
        let planned = tasks
            .iter()
            .map(|t| PlannedTask {
                name: t
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                source_dir: t.clone(),
                expected_digest: None,
            })
            .collect();
        Ok(EvaluationPlan {
            tasks: planned,
            repetitions: 1,
            agent,
            out_dir,
            n_concurrent: 1,
            policy: ScoringPolicy::default(),
            settings: TrialSettings::default(),
            max_retries: 0,
        })
    }

    /// Plan an evaluation of `split` of a frozen task set whose tasks live in `tasks_root`.
    pub fn for_split(
        frozen: &crate::split::FrozenTaskSet,
        split: crate::split::SplitName,
        tasks_root: &Path,
        agent: AgentSpec,
        out_dir: PathBuf,
    ) -> EvaluationPlan {
        let tasks = frozen
            .split
            .members(split)
            .iter()
            .map(|n| PlannedTask {
                name: n.clone(),
                source_dir: tasks_root.join(n),
                expected_digest: frozen.task_digests.get(n).cloned(),
            })
            .collect();
        EvaluationPlan {
            tasks,
            repetitions: frozen.repetitions,
            agent,
            out_dir,
            n_concurrent: 1,
            policy: ScoringPolicy::default(),
            settings: TrialSettings::default(),
            max_retries: 0,
        }
    }
}

/// Receives progress as trials finish.
pub trait Progress: Send + Sync {
    fn trial_done(&self, done: usize, total: usize, trial: &TrialResult);
    fn finished(&self) {}
}

/// No progress output.
pub struct NoProgress;
impl Progress for NoProgress {
    fn trial_done(&self, _: usize, _: usize, _: &TrialResult) {}
}

/// Progress on stderr: one rewritten `\r` line on a terminal, plain lines otherwise.
pub struct ConsoleProgress {
    tty: bool,
    started: Instant,
    lock: Mutex<()>,
}

impl Default for ConsoleProgress {
    fn default() -> Self {
        ConsoleProgress {
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            lock: Mutex::new(()),
        }
    }
}

impl Progress for ConsoleProgress {
    fn trial_done(&self, done: usize, total: usize, t: &TrialResult) {
        let _g = self.lock.lock();
        let reward = t
            .reward
            .map(|r| format!("{r}"))
            .unwrap_or_else(|| "-".into());
        let line = format!(
            "[{done}/{total}] {:.1}s {} {} reward={reward}",
            self.started.elapsed().as_secs_f64(),
            t.trial_name,
            t.status.as_str()
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }
    fn finished(&self) {
        if self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// Copy and verify every task, then run `tasks × repetitions` trials on `engine` with at most
/// `n_concurrent` at once, and score them. Never fails: problems become classified trials.
pub async fn run_evaluation(
    engine: Arc<dyn Engine>,
    plan: &EvaluationPlan,
    progress: &dyn Progress,
) -> EvaluationResult {
    let started = Instant::now();
    let reps = plan.repetitions.max(1);
    let snap_root = plan.out_dir.join("tasks");
    let mut jobs: Vec<TrialRequest> = Vec::new();
    let mut results: Vec<TrialResult> = Vec::new();
    let agent = Arc::new(plan.agent.clone());
    let settings = Arc::new(plan.settings.clone());
    for pt in &plan.tasks {
        let snap = snap_root.join(&pt.name);
        let loaded = prepare_task(pt, &snap);
        for rep in 0..reps {
            let trial_dir = plan
                .out_dir
                .join("trials")
                .join(crate::result::trial_name(&pt.name, rep));
            match &loaded {
                Ok(task) => {
                    jobs.push(TrialRequest {
                        task: task.clone(),
                        repetition: rep,
                        agent: agent.clone(),
                        trial_dir,
                        settings: settings.clone(),
                    });
                }
                Err(e) => {
                    let (status, err) = classify_error(e);
                    let mut t = TrialResult::failed(&pt.name, rep, engine.name(), status, err);
                    t.logs.trial_dir = trial_dir;
                    results.push(t);
                }
            }
        }
    }
    let total = jobs.len() + results.len();
    for (i, t) in results.iter().enumerate() {
        progress.trial_done(i + 1, total, t);
    }
    let done = results.len();
    let counter = std::sync::atomic::AtomicUsize::new(done);
    let report = |t: &TrialResult| {
        if std::fs::create_dir_all(&t.logs.trial_dir).is_ok() {
            write_result(&t.logs.trial_dir, t);
        }
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        progress.trial_done(n, total, t);
    };
    let job = engine.run_job(&jobs, plan.n_concurrent.max(1), plan.max_retries, &report);
    let mut shared_usage = None;
    if let Some(job) = job {
        let outcome = job.await;
        results.extend(outcome.trials);
        shared_usage = outcome.shared_usage;
    } else {
        let sem = Arc::new(tokio::sync::Semaphore::new(plan.n_concurrent.max(1)));
        let mut set = tokio::task::JoinSet::new();
        for req in jobs.iter().cloned() {
            let engine = engine.clone();
            let sem = sem.clone();
            let retries = plan.max_retries;
            set.spawn(async move {
                let _permit = sem.acquire_owned().await;
                run_attempts(engine.as_ref(), req, retries).await
            });
        }
        while let Some(j) = set.join_next().await {
            let r = match j {
                Ok(r) => r,
                Err(e) => {
                    // A panicking engine is a bug; still never crash the evaluation.
                    TrialResult::failed(
                        "<unknown>",
                        0,
                        engine.name(),
                        TrialStatus::InfrastructureFailed,
                        TrialError::new("engine_error", format!("trial task failed: {e}")),
                    )
                }
            };
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            progress.trial_done(n, total, &r);
            results.push(r);
        }
    }
    progress.finished();
    let names = plan.tasks.iter().map(|t| t.name.clone()).collect();
    let mut r = summarize(
        engine.name(),
        &plan.agent.label(),
        names,
        reps,
        results,
        plan.policy,
        started.elapsed().as_secs_f64(),
    );
    r.trials
        .sort_by(|a, b| a.task.cmp(&b.task).then(a.repetition.cmp(&b.repetition)));
    r.charge_shared(shared_usage);
    if let Ok(json) = serde_json::to_vec_pretty(&r) {
        let _ = std::fs::create_dir_all(&plan.out_dir);
        let _ = std::fs::write(plan.out_dir.join("evaluation.json"), json);
    }
    r
}

/// Error kinds of infrastructure failures that running the trial again cannot change: the
/// task itself is wrong, or the budget is gone.
const NOT_RETRIED: &[&str] = &[
    crate::result::BUDGET_EXHAUSTED,
    "invalid_task",
    "digest_mismatch",
    "unsupported_task",
];

/// Whether `t` failed for a reason outside the candidate that another attempt may not meet.
pub fn retryable(t: &TrialResult) -> bool {
    t.status == TrialStatus::InfrastructureFailed
        && !t
            .error
            .as_ref()
            .is_some_and(|e| NOT_RETRIED.contains(&e.kind.as_str()))
}

/// Where attempt `k` (from 1) of the trial first run in `first` goes: `<name>.retry-<k>`
/// beside it, so every attempt stays on disk.
pub fn retry_dir(first: &Path, k: u32) -> PathBuf {
    let name = first
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    first.with_file_name(format!("{name}.retry-{k}"))
}

/// Run one trial, and again (up to `max_retries` more times) while it fails in a way
/// [`retryable`] allows; the last attempt's result lists the earlier ones.
async fn run_attempts(engine: &dyn Engine, first: TrialRequest, max_retries: u32) -> TrialResult {
    let mut earlier = Vec::new();
    let mut k = 0;
    loop {
        let mut req = first.clone();
        if k > 0 {
            req.trial_dir = retry_dir(&first.trial_dir, k);
        }
        let mut r = run_attempt(engine, &req).await;
        if k < max_retries && retryable(&r) {
            earlier.push(crate::result::Attempt::of(&r));
            k += 1;
            continue;
        }
        if !earlier.is_empty() {
            r.attempts = earlier;
            write_result(&req.trial_dir, &r);
        }
        return r;
    }
}

async fn run_attempt(engine: &dyn Engine, req: &TrialRequest) -> TrialResult {
    if let Err(e) = std::fs::create_dir_all(&req.trial_dir) {
        return failed_trial(
            req,
            engine.name(),
            TrialStatus::InfrastructureFailed,
            TrialError::new(
                "engine_error",
                format!("cannot create trial dir {}: {e}", req.trial_dir.display()),
            ),
        );
    }
    let r = engine.run_trial(req).await;
    write_result(&req.trial_dir, &r);
    r
}

/// Write `result.json` through a rename, so that a process killed mid-write leaves the
/// old file or none, never a truncated one: a resume reuses trials whose result parses.
pub(crate) fn write_result(trial_dir: &Path, r: &TrialResult) {
    if let Ok(json) = serde_json::to_vec_pretty(r) {
        let tmp = trial_dir.join(".result.json.tmp");
        if std::fs::write(&tmp, json).is_ok() {
            let _ = std::fs::rename(&tmp, trial_dir.join("result.json"));
        }
    }
}

fn prepare_task(pt: &PlannedTask, snap: &Path) -> crate::Result<Arc<Task>> {
    if snap.exists() {
        std::fs::remove_dir_all(snap).map_err(|e| Error::io("cannot clear snapshot", snap, e))?;
    }
    match &pt.expected_digest {
        Some(d) => crate::digest::snapshot_verified(&pt.name, &pt.source_dir, snap, d)?,
        None => {
            std::fs::create_dir_all(snap)
                .map_err(|e| Error::io("cannot create snapshot", snap, e))?;
            crate::digest::copy_task(&pt.source_dir, snap)?;
        }
    }
    let mut t = Task::load(snap)?;
    t.name = pt.name.clone();
    Ok(Arc::new(t))
}
