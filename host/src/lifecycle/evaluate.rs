//! Framework-owned evaluation of one commit: a fresh checkout, the evaluator-tree check
//! against `gen/0`, the frozen task set's split run on the recipe's engine, and the
//! stamped fields of the certified evaluation event; the driver runs it with trial
//! progress, drops it when the user stops the run, and archives it.
//!
//! Exact resume: every attempt keeps its trials on disk. When an attempt was interrupted
//! (it has no certified event), the next attempt reuses its completed trials instead of
//! re-running them, and says so (`source_attempts` and a `repair` event).

use super::agent_model::AgentBudget;
use super::progress::{Channel, Event, TrialProgress};
use super::{Driver, RunError};
use crate::layout;
use crate::workspace::Workspace;
use evaluator_harbor::agent::{AgentManifest, AgentSpec};
use evaluator_harbor::engine::{Engine, EvaluationPlan, run_evaluation};
use evaluator_harbor::result::{
    EvaluationResult, ScoringPolicy, TrialResult, TrialStatus, summarize,
};
use evaluator_harbor::split::SplitName;
use evolve_archive::EventBody;
use evolve_archive::body::{EvaluationBody, EvaluationTimings};
use evolve_archive::{RepairBody, types};
use evolve_snapshot::Oid;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// One evaluation to run.
#[derive(Debug, Clone)]
pub struct EvalRequest {
    pub genid: String,
    pub parent: Option<String>,
    pub commit: Oid,
    /// `genesis`, `candidate` or `anchor`.
    pub purpose: &'static str,
    pub split: SplitName,
    /// Attempts of this genid and purpose already certified in the archive: never reused.
    pub certified_attempts: Vec<u64>,
}

/// A trial taken over from an interrupted attempt.
#[derive(Debug, Clone)]
pub struct ReusedTrial {
    pub task: String,
    pub repetition: u32,
    pub attempt: u64,
}

/// A finished evaluation, ready to be appended.
#[derive(Debug, Clone)]
pub struct Evaluated {
    /// The evaluation event's body: the stamped fields and `reason`.
    pub body: Map<String, Value>,
    pub outcome: String,
    pub score: Option<f64>,
    pub attempt: u64,
    pub reused: Vec<ReusedTrial>,
    pub dir: PathBuf,
    /// A trial found the budget spent when its agent called its model: the run stops.
    pub budget_exhausted: bool,
}

/// Why no evaluation event can be written.
#[derive(Debug, Clone)]
pub enum EvalError {
    /// The commit's `evaluator/` differs from `gen/0`'s: the candidate is rejected.
    EvaluatorChanged { found: String, expected: String },
    /// The host could not prepare the attempt (disk, repository).
    Host(String),
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::EvaluatorChanged { found, expected } => write!(
                f,
                "the evaluator tree differs from gen/0's ({found} != {expected}); the candidate cannot be evaluated"
            ),
            EvalError::Host(m) => f.write_str(m),
        }
    }
}

fn host(e: impl std::fmt::Display) -> EvalError {
    EvalError::Host(e.to_string())
}

/// Attempt numbers already on disk for `dir` (`attempt-<n>`).
fn attempts_on_disk(dir: &Path) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("attempt-")?
                .parse()
                .ok()
        })
        .collect();
    out.sort_unstable();
    out
}

/// Run `req` and build its stamped body.
pub async fn evaluate(
    ws: &Workspace,
    engine: Arc<dyn Engine>,
    req: &EvalRequest,
) -> Result<Evaluated, EvalError> {
    evaluate_with(ws, engine, req, &Channel::default(), None).await
}

/// [`evaluate`], reporting each finished trial to `progress`; with `agent`, the trials
/// reach the agent's model through a gateway drawing on what is left of the budget.
pub(crate) async fn evaluate_with(
    ws: &Workspace,
    engine: Arc<dyn Engine>,
    req: &EvalRequest,
    progress: &Channel,
    agent: Option<AgentBudget<'_>>,
) -> Result<Evaluated, EvalError> {
    let started = Instant::now();
    // The passed variables are read first: an unset one stops the evaluation before it
    // makes anything.
    let mut settings = ws.engine.trial_settings().map_err(|e| host(&e.what))?;
    let generation = evolve_archive::event::genid_generation(&req.genid).unwrap_or(0);
    let selection = ws.engine.selection(&ws.task_set, req.split, generation);
    let base = ws.paths.evaluations(req.purpose, &req.genid);
    let earlier = attempts_on_disk(&base);
    let attempt = earlier
        .last()
        .copied()
        .unwrap_or(0)
        .max(req.certified_attempts.iter().copied().max().unwrap_or(0))
        + 1;
    let dir = base.join(format!("attempt-{attempt}"));
    std::fs::create_dir_all(&dir).map_err(host)?;
    if let Some(a) = agent {
        // Each trial's model calls are logged under the attempt (`model/<trial>-<n>/`),
        // where the spend ledger's reconciliation finds their generation.
        settings.gateway = Some(
            a.model
                .gateway(a.left_usd, dir.join("model"))
                .map_err(host)?,
        );
    }
    let task_set_hash = ws
        .engine
        .task_set_hash(&ws.task_set, req.split)
        .map_err(|e| host(&e.what))?;
    let mut identity = json!({
        "candidate_commit": req.commit.to_string(),
        "task_set_hash": task_set_hash,
        "split": req.split.as_str(),
    });
    // A sampled evaluation's members are part of what it is (and so of the trials it
    // may reuse); the whole split's are implied, as they always were.
    if selection.sampled {
        identity["members"] = json!(selection.members);
    }
    crate::lifecycle::stages::write_json(&dir.join("attempt.json"), &identity);

    let checkout = dir.join("checkout");
    ws.store.materialize(req.commit, &checkout).map_err(host)?;
    let evaluator = ws
        .store
        .subtree(req.commit, layout::EVALUATOR_DIR)
        .map_err(host)?
        .map(|o| o.to_string())
        .unwrap_or_else(|| "(none)".into());
    if evaluator != ws.evaluator_tree.to_string() {
        return Err(EvalError::EvaluatorChanged {
            found: evaluator,
            expected: ws.evaluator_tree.to_string(),
        });
    }
    let candidate_tree = ws.store.tree_of(req.commit).map_err(host)?.to_string();
    let policy = ScoringPolicy {
        coverage_floor: ws.engine.coverage_floor,
        agent_timeout_is_zero: ws.engine.agent_timeout_is_zero,
    };
    let members: Vec<String> = selection.members.clone();
    let reps = ws.task_set.repetitions.max(1);

    let (reused, reused_trials) = reusable_trials(
        &base,
        &earlier,
        &req.certified_attempts,
        &identity,
        &members,
        reps,
    );
    let result = match AgentManifest::load(&checkout.join(layout::TARGET_DIR)) {
        Err(e) => invalid_agent(engine.name(), &members, reps, policy, &e.to_string()),
        Ok(manifest) => {
            let mut plan = EvaluationPlan::for_split(
                &ws.task_set,
                req.split,
                &checkout.join(layout::TASKS_DIR),
                AgentSpec::Target(manifest),
                dir.join("out"),
            );
            plan.n_concurrent = ws.engine.n_concurrent.max(1) as usize;
            plan.policy = policy;
            plan.settings = settings;
            plan.max_retries = ws.engine.max_retries;
            let done: std::collections::BTreeSet<&str> =
                reused.iter().map(|r| r.task.as_str()).collect();
            plan.tasks
                .retain(|t| members.contains(&t.name) && !done.contains(t.name.as_str()));
            let (fresh, shared_usage) = if plan.tasks.is_empty() {
                (Vec::new(), None)
            } else {
                let trials = TrialProgress {
                    channel: progress,
                    genid: &req.genid,
                    purpose: req.purpose,
                    reused: reused_trials.len(),
                };
                let r = run_evaluation(engine.clone(), &plan, &trials).await;
                (r.trials, r.shared_usage)
            };
            let mut all = reused_trials;
            all.extend(fresh);
            let mut result = summarize(
                engine.name(),
                "target",
                members.clone(),
                reps,
                all,
                policy,
                started.elapsed().as_secs_f64(),
            );
            // Calls metered for the fresh trials' job as a whole (the harbor engine).
            result.charge_shared(shared_usage);
            result
        }
    };
    let _ = std::fs::write(
        dir.join("evaluation.json"),
        serde_json::to_vec_pretty(&result).unwrap_or_default(),
    );

    let runtime_fingerprint = ws.engine.runtime_fingerprint();
    let evaluator_fingerprint = ws.evaluator_tree.to_string();
    let mut contract = json!({
        "schema": "evolve.contract.v1",
        "evaluator_fingerprint": evaluator_fingerprint,
        "task_set_hash": task_set_hash,
        "runtime_fingerprint": runtime_fingerprint,
        "purpose": req.purpose,
        "split": req.split.as_str(),
    });
    if selection.sampled {
        contract["members"] = json!(selection.members);
    }
    let contract_id = evolve_archive::canonical_sha256(&contract);
    let trials: usize = result
        .task_vector
        .tasks
        .values()
        .map(|t| t.trials.len())
        .sum();
    let mut source_attempts: Vec<u64> = reused.iter().map(|r| r.attempt).collect();
    source_attempts.sort_unstable();
    source_attempts.dedup();
    let body = EvaluationBody {
        candidate_commit: req.commit.to_string(),
        candidate_tree,
        parent: req.parent.clone(),
        generation,
        evaluator_fingerprint,
        task_set_hash,
        runtime_fingerprint,
        contract_id,
        purpose: req.purpose.to_string(),
        outcome: result.outcome.as_str().to_string(),
        trials,
        expected_trials: result.expected_trials,
        scoreable_trials: result.scoreable_trials,
        task_vector: &result.task_vector,
        score: result.score,
        cost_usd: result.cost_usd,
        timings: EvaluationTimings {
            wall_s: started.elapsed().as_secs_f64(),
        },
        attempt,
        source_attempts,
        members: selection.sampled.then(|| selection.members.clone()),
        model_calls: Some(model_call_ids(&result)).filter(|ids| !ids.is_empty()),
        reason: result.reason.clone(),
    }
    .to_map();
    Ok(Evaluated {
        outcome: result.outcome.as_str().to_string(),
        score: result.score,
        body,
        attempt,
        reused,
        dir,
        budget_exhausted: result.budget_exhausted,
    })
}

/// The ledger ids of the agent's model calls that an evaluation (or a stage's train
/// trials) made through the gateway: each trial's, then those metered for the evaluation
/// as a whole (a harbor job's trials share one listener).
pub(crate) fn model_call_ids(result: &EvaluationResult) -> Vec<String> {
    result
        .trials
        .iter()
        .filter_map(|t| t.usage.as_ref())
        .chain(result.shared_usage.as_ref())
        .flat_map(|u| u.ledger_ids.iter().cloned())
        .collect()
}

impl Driver {
    /// What an evaluation starting now may spend on the agent's model, if it has one.
    fn agent_budget(&self) -> Option<AgentBudget<'_>> {
        let model = self.agent_model.as_ref()?;
        Some(AgentBudget {
            model,
            left_usd: self.budget_left(),
        })
    }

    /// Run an evaluation; a changed evaluator is returned as an error for the caller to
    /// archive, a host failure stops the run.
    pub(crate) async fn evaluate(&self, req: &EvalRequest) -> super::Result<Evaluated> {
        self.evaluate_observed(req).await?.map_err(|e| match e {
            EvalError::Host(m) => RunError::new(format!(
                "evaluation of gen/{} failed in the host: {m}",
                req.genid
            )),
            other => RunError::new(other.to_string()),
        })
    }

    /// Append a `repair` event for reused trials, then the evaluation itself.
    pub(crate) fn append_evaluation(&self, genid: &str, ev: &Evaluated) -> super::Result<()> {
        if !ev.reused.is_empty() {
            let trials = ev.reused.iter().map(|r| evolve_archive::ReusedTrial {
                task: self.redactor.key(&r.task),
                repetition: r.repetition,
                from_attempt: r.attempt,
            });
            let body = RepairBody {
                what: "completed trials of an interrupted evaluation reused".into(),
                attempt: Some(ev.attempt),
                trials: Some(trials.collect()),
                ..RepairBody::default()
            };
            self.append(Some(genid), &body)?;
        }
        self.append_map(types::EVALUATION, Some(genid), ev.body.clone())
    }

    /// Run an evaluation with trial progress, stopped (and archived as `cancelled`)
    /// when the user interrupts the run. Completed trials stay on disk for the resume.
    pub(crate) async fn evaluate_observed(
        &self,
        req: &EvalRequest,
    ) -> super::Result<Result<Evaluated, EvalError>> {
        self.check_cancelled(&format!("evaluating gen {}", req.genid))?;
        self.progress.emit(Event::EvaluationStarted {
            genid: req.genid.clone(),
            purpose: req.purpose.to_string(),
        });
        let started = std::time::Instant::now();
        let result = tokio::select! {
            biased;
            () = self.cancel.cancelled() => None,
            r = super::evaluate::evaluate_with(&self.ws, self.engine.clone(), req, &self.progress, self.agent_budget()) => Some(r),
        };
        if let Ok(mut t) = self.evaluation_time.lock() {
            *t += started.elapsed();
        }
        let Some(result) = result else {
            let parent = req.parent.as_deref();
            return Err(self.cancelled(std::slice::from_ref(&req.genid), "evaluate", parent));
        };
        if let Ok(ev) = &result {
            if ev.budget_exhausted {
                self.agent_budget_exhausted
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
            self.progress.emit(Event::EvaluationFinished {
                genid: req.genid.clone(),
                purpose: req.purpose.to_string(),
                outcome: ev.outcome.clone(),
                score: ev.score,
            });
        }
        Ok(result)
    }
}

/// Completed trials of interrupted attempts with the same commit and task selection, by
/// whole task (every repetition complete), latest attempt first.
fn reusable_trials(
    base: &Path,
    earlier: &[u64],
    certified: &[u64],
    identity: &Value,
    members: &[String],
    reps: u32,
) -> (Vec<ReusedTrial>, Vec<TrialResult>) {
    let mut reused = Vec::new();
    let mut trials = Vec::new();
    let mut covered = std::collections::BTreeSet::new();
    for &attempt in earlier.iter().rev() {
        if certified.contains(&attempt) {
            continue;
        }
        let dir = base.join(format!("attempt-{attempt}"));
        let same = std::fs::read(dir.join("attempt.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| &v == identity);
        if !same {
            continue;
        }
        for task in members {
            if covered.contains(task) {
                continue;
            }
            let found: Vec<TrialResult> = (0..reps)
                .filter_map(|rep| {
                    let path = dir
                        .join("out/trials")
                        .join(evaluator_harbor::result::trial_name(task, rep))
                        .join("result.json");
                    let mut t: TrialResult =
                        serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
                    // Its metered model calls were never billed by a certified event, so
                    // the open of this run charged them (`spend::reconcile_model_spend`):
                    // counted again here, they would be paid twice.
                    if t.usage.is_some() {
                        t.cost_usd = Some(0.0);
                    }
                    (t.status == TrialStatus::BenchmarkComplete
                        && t.task == *task
                        && t.repetition == rep)
                        .then_some(t)
                })
                .collect();
            if found.len() == reps as usize {
                covered.insert(task.clone());
                for t in found {
                    reused.push(ReusedTrial {
                        task: t.task.clone(),
                        repetition: t.repetition,
                        attempt,
                    });
                    trials.push(t);
                }
            }
        }
    }
    (reused, trials)
}

/// The evaluation of a candidate whose agent manifest is unusable: every trial is
/// `candidate_invalid` without running.
fn invalid_agent(
    engine: &str,
    members: &[String],
    reps: u32,
    policy: ScoringPolicy,
    why: &str,
) -> EvaluationResult {
    let trials = members
        .iter()
        .flat_map(|t| {
            (0..reps).map(move |rep| {
                TrialResult::failed(
                    t,
                    rep,
                    engine,
                    TrialStatus::CandidateInvalid,
                    evaluator_harbor::result::TrialError::new("invalid_agent", why.to_string()),
                )
            })
        })
        .collect();
    summarize(
        engine,
        "target",
        members.to_vec(),
        reps,
        trials,
        policy,
        0.0,
    )
}
