//! The `tasks` capability of a stage call: trials of the stage's candidate on **train**
//! tasks only, run by the experiment's frozen engine on the frozen (digest-checked) task
//! snapshot. The sandbox already refuses any name outside `train_tasks()`; this backend
//! additionally builds its plan from the train split alone, so a gate or sealed task can
//! never be run or named through it.
//!
//! Each train trial's trajectory is handed on bounded: written into the calling stage's
//! `/scratch/trajectories/` and named by the first line of the trial's report
//! (`train/trajectories.rs`).

use crate::layout;
use crate::lifecycle::view::Redactor;
use crate::sandbox::tasks::{RunRequest, TasksError, TrialReport};
use crate::sandbox::types::TrialStatus as WitStatus;
use crate::sandbox::{BoxFuture, TaskBackend};
use crate::workspace::Workspace;
use evaluator_harbor::agent::{AgentManifest, AgentSpec};
use evaluator_harbor::engine::{Engine, EvaluationPlan, NoProgress, run_evaluation};
use evaluator_harbor::gateway::TrialSettings;
use evaluator_harbor::result::{ScoringPolicy, TrialResult, TrialStatus};
use evaluator_harbor::split::{FrozenTaskSet, SplitName};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

pub mod trajectories;

/// Most trials one `run` call may ask for.
pub const MAX_TRIALS_PER_CALL: usize = 200;
/// Bytes of verifier output returned per trial.
const VERIFIER_TAIL: usize = 2000;

/// Train trials of one checkout's candidate.
pub struct TrainTasks {
    engine: Arc<dyn Engine>,
    task_set: FrozenTaskSet,
    checkout: PathBuf,
    out_root: PathBuf,
    policy: ScoringPolicy,
    n_concurrent: usize,
    calls: AtomicU32,
    /// Σ of the cost of every trial run through this backend (metered by the gateway,
    /// else as the agent reported it).
    spent: Mutex<f64>,
    /// The ledger ids of the agent's model calls those trials made through the gateway.
    model_calls: Mutex<Vec<String>>,
    /// The evaluation protocol's trial settings, and the gateway to the agent's model.
    settings: TrialSettings,
    trajectories: trajectories::Keeper,
}

impl TrainTasks {
    /// Trials of the candidate in `checkout` (its `target/` is the agent, its
    /// `evaluator/tasks` the snapshot, verified against the frozen digests) for the stage
    /// call whose run directory is `stage_dir`: trial directories go under
    /// `<stage_dir>/train/run-<n>/`, and their trajectories into `<stage_dir>/scratch`
    /// (the call's `/scratch`, as `stages.rs` grants it), redacted by `redactor`.
    pub fn new(
        ws: &Workspace,
        engine: Arc<dyn Engine>,
        checkout: &Path,
        stage_dir: &Path,
        redactor: Redactor,
    ) -> TrainTasks {
        let out_root = stage_dir.join("train");
        TrainTasks {
            trajectories: trajectories::Keeper::new(stage_dir.join("scratch"), &out_root, redactor),
            engine,
            task_set: ws.task_set.clone(),
            checkout: checkout.to_path_buf(),
            out_root,
            policy: ScoringPolicy {
                coverage_floor: ws.engine.coverage_floor,
                agent_timeout_is_zero: ws.engine.agent_timeout_is_zero,
            },
            n_concurrent: ws.engine.n_concurrent.max(1) as usize,
            calls: AtomicU32::new(0),
            spent: Mutex::new(0.0),
            model_calls: Mutex::default(),
            settings: TrialSettings::default(),
        }
    }

    /// `text` without the host's absolute paths: an operator learns nothing of where the
    /// workspace, its checkouts or its trials live.
    fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (root, label) in [
            (&self.out_root, "<trials>"),
            (&self.checkout, "<candidate>"),
        ] {
            for form in [Some(root.clone()), std::fs::canonicalize(root).ok()]
                .into_iter()
                .flatten()
            {
                let s = form.to_string_lossy();
                if !s.is_empty() {
                    out = out.replace(&*s, label);
                }
            }
        }
        out
    }

    /// Run the trials with `settings` (the protocol's passed variables and timeout
    /// multipliers, and the gateway its agent reaches its model through).
    pub fn with_settings(mut self, settings: TrialSettings) -> TrainTasks {
        self.settings = settings;
        self
    }

    /// The ledger ids of the model calls the trials run so far made.
    pub fn model_calls(&self) -> Vec<String> {
        self.model_calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What the trials run so far reported spending.
    pub fn spent_usd(&self) -> f64 {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn run_trials(&self, request: RunRequest) -> Result<Vec<TrialReport>, TasksError> {
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = request.tasks.iter().find(|t| !seen.insert(t.as_str())) {
            return Err(TasksError::InvalidRequest(format!(
                "`{dup}` is named twice"
            )));
        }
        // The sandbox refuses these already; refuse again so this backend is safe on its own.
        if let Some(bad) = request
            .tasks
            .iter()
            .find(|t| !self.task_set.split.train.contains(*t))
        {
            return Err(TasksError::UnknownTask(format!(
                "`{bad}` is not a train task"
            )));
        }
        let total = request
            .tasks
            .len()
            .saturating_mul(request.repetitions as usize);
        if total > MAX_TRIALS_PER_CALL {
            return Err(TasksError::InvalidRequest(format!(
                "{total} trials requested; at most {MAX_TRIALS_PER_CALL} per call"
            )));
        }
        let manifest =
            AgentManifest::load(&self.checkout.join(layout::TARGET_DIR)).map_err(|e| {
                TasksError::Unavailable(
                    self.scrub(&format!("the candidate's agent is unusable: {e}")),
                )
            })?;
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let mut plan = EvaluationPlan::for_split(
            &self.task_set,
            SplitName::Train,
            &self.checkout.join(layout::TASKS_DIR),
            AgentSpec::Target(manifest),
            self.out_root.join(format!("run-{n}")),
        );
        plan.tasks.retain(|t| request.tasks.contains(&t.name));
        plan.repetitions = request.repetitions;
        plan.policy = self.policy;
        plan.n_concurrent = self.n_concurrent;
        plan.settings = self.settings.clone();
        let result = run_evaluation(self.engine.clone(), &plan, &NoProgress).await;
        // Earlier attempts and calls metered for the evaluation as a whole included.
        *self.spent.lock().unwrap_or_else(|p| p.into_inner()) += result.cost_usd;
        self.model_calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(super::evaluate::model_call_ids(&result));
        // In report order, so which trials' trajectories fit the budget is deterministic.
        let mut trials: Vec<&TrialResult> = result.trials.iter().collect();
        trials.sort_by(|a, b| a.task.cmp(&b.task).then(a.repetition.cmp(&b.repetition)));
        let lines = self
            .trajectories
            .keep(n, &trials, &|text: &str| self.scrub(text));
        let reports = trials
            .iter()
            .zip(lines)
            .map(|(t, line)| {
                let mut r = report(t);
                r.verifier_output = self.scrub(&r.verifier_output);
                // First, not last: operators read a failure from the output's last line.
                if let Some(line) = line {
                    r.verifier_output = format!("{line}\n{}", r.verifier_output);
                }
                r
            })
            .collect();
        Ok(reports)
    }
}

fn wit_status(s: TrialStatus) -> WitStatus {
    match s {
        TrialStatus::BenchmarkComplete => WitStatus::BenchmarkComplete,
        TrialStatus::CandidateInvalid => WitStatus::CandidateInvalid,
        TrialStatus::InfrastructureFailed => WitStatus::InfrastructureFailed,
        TrialStatus::Timeout => WitStatus::Timeout,
    }
}

fn report(t: &TrialResult) -> TrialReport {
    // The verifier runs agent-written code in a directory it can write: never follow a
    // link planted where its log was.
    let out =
        evaluator_harbor::beneath::read_regular(&t.logs.verifier_dir, "test-stdout.txt", 16 << 20)
            .unwrap_or_default();
    let start = out.len().saturating_sub(VERIFIER_TAIL);
    let mut verifier_output = String::from_utf8_lossy(&out[start..]).into_owned();
    if let Some(e) = &t.error {
        verifier_output.push_str(&format!("\n[{}] {}", e.kind, e.message));
    }
    TrialReport {
        task: t.task.clone(),
        repetition: t.repetition,
        status: wit_status(t.status),
        reward: t.reward.filter(|r| r.is_finite()),
        verifier_output,
        duration_ms: (t.wall_time_sec.max(0.0) * 1000.0) as u64,
        cost_usd: t.cost_usd,
    }
}

impl TaskBackend for TrainTasks {
    fn train_tasks(&self) -> Vec<String> {
        self.task_set.split.train.clone()
    }
    fn run(&self, request: RunRequest) -> BoxFuture<'_, Result<Vec<TrialReport>, TasksError>> {
        Box::pin(self.run_trials(request))
    }
}
