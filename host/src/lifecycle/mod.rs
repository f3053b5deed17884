//! The lifecycle driver behind `evolve run`: genesis and anchor evaluations, one select
//! per generation, one candidate transaction per child ([`child`]), the final anchor,
//! the budget, and recovery from any interruption.
//!
//! Recovery works from the certified archive alone (RSIHub's Table 9):
//! - a child worktree left by an interrupted run stops the run until `evolve repair`;
//! - a committed generation without a certified evaluation is evaluated (completed trials
//!   of an interrupted attempt are reused, and a `repair` event says so);
//! - a complete evaluation pending gate resumes at gate; record runs at most once;
//! - a failed evaluation stays as it is until `evolve retry GENID`.
//!
//! Every random choice comes from the experiment seed and the generation id, and each
//! generation's select decision is archived before its children start, so a resumed run
//! ends in the same state as an uninterrupted one.

pub mod agent_driver;
mod checkouts;
pub mod child;
pub mod evaluate;
pub mod progress;
pub mod repair;
pub mod stages;
pub mod train;
pub mod view;

use crate::recipe::Recipe;
use crate::sandbox::{Sandbox, StageInput, StageOutput, types::Stage};
use crate::workspace::{Workspace, layout, now};
use evaluate::{EvalError, EvalRequest, Evaluated};
use evaluator_harbor::engine::Engine;
use evaluator_harbor::split::SplitName;
use evolve_archive::{
    Archive, Champion, Eligibility, EventBody, GateBody, LockError, RepairBody, Row, RunLock,
    SelectBody, SelectFallback, Status, StatusBody, champion, eligibility, types,
};
use evolve_snapshot::{Oid, Surface};
use serde_json::{Map, Value, json};
use stages::Stages;
use std::sync::{Arc, Mutex};
use view::Redactor;

/// What `evolve run` was asked for.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub max_generations: Option<u32>,
    pub children_per_gen: Option<u32>,
    /// Print one line per step on stderr.
    pub verbose: bool,
    /// Where progress events go (the lines `verbose` prints go there too when set).
    pub progress: progress::Progress,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunSummary {
    pub status: RunStatus,
    pub generations: u32,
    pub champion: Option<String>,
    pub champion_score: Option<f64>,
    pub genesis_score: Option<f64>,
    pub anchor_before: Option<f64>,
    pub anchor_after: Option<f64>,
    pub spent_usd: f64,
    pub budget_usd: f64,
    /// The sealed acceptance of a `--driver` session (docs/driver.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<Value>,
}

/// How a run that did not stop with an error ended: serialized as `complete` or
/// `budget_exhausted`, the words `evolve run --json` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Every generation up to the limit ran (and the final anchor, if asked for).
    Complete,
    /// The budget could not pay for the next generation (archived as its children's
    /// `budget_exhausted` status).
    BudgetExhausted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Complete => "complete",
            RunStatus::BudgetExhausted => "budget_exhausted",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the word it prints as (callers written when the status was a string).
impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A problem that stops the run (the archive stays consistent: nothing half-written).
#[derive(Debug)]
pub struct RunError {
    pub what: String,
    pub hint: Option<String>,
}

impl RunError {
    pub fn new(what: impl Into<String>) -> RunError {
        RunError {
            what: what.into(),
            hint: None,
        }
    }
    pub fn hint(mut self, h: impl Into<String>) -> RunError {
        self.hint = Some(h.into());
        self
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl From<crate::workspace::WorkspaceError> for RunError {
    fn from(e: crate::workspace::WorkspaceError) -> RunError {
        RunError {
            what: e.what,
            hint: e.hint,
        }
    }
}

pub type Result<T> = std::result::Result<T, RunError>;

/// Format a generation id: `N` with one child per generation, `N-i` with several.
pub fn genid(generation: u32, child: u32, children: u32) -> String {
    if children <= 1 {
        generation.to_string()
    } else {
        format!("{generation}-{child}")
    }
}

/// The folded archive with eligibility and champion, plus the few facts the driver
/// reads from non-row events (spend, archived select decisions, the playbook).
pub struct State {
    pub rows: Vec<Row>,
    pub eligibility: Vec<Eligibility>,
    pub champion: Option<Champion>,
    /// Σ cost of every certified event: the spend ledger.
    pub spent: f64,
    /// Archived select decisions: generation → parents.
    pub selections: std::collections::BTreeMap<u64, Vec<String>>,
    /// `ops` of every certified `playbook` event, in order.
    pub playbook: Vec<Value>,
}

impl State {
    pub fn row(&self, genid: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.genid == genid)
    }
    pub fn eligible(&self, genid: &str) -> bool {
        self.eligibility
            .iter()
            .any(|e| e.genid == genid && e.eligible)
    }
    pub fn spent(&self) -> f64 {
        self.spent
    }
}

/// Compute the state of the archive against the workspace's tags.
pub fn state_of(ws: &Workspace, archive: &Archive) -> State {
    state_from(archive, &|g: &str| ws.tag_commit(g))
}

/// Compute the state of `archive`; `tag_lookup(genid)` is the commit `gen/<genid>` names.
/// Uses the writer's incrementally folded rows and reads only the few non-row events.
pub fn state_from(archive: &Archive, tag_lookup: &dyn Fn(&str) -> Option<String>) -> State {
    let mut notes = Notes::default();
    notes.read(archive);
    state_with(archive, &notes, tag_lookup)
}

/// The state of `archive` with its non-row events already read into `notes`. Eligibility
/// is recomputed every time: it checks every row's tag, and a moved tag must count at once.
fn state_with(
    archive: &Archive,
    notes: &Notes,
    tag_lookup: &dyn Fn(&str) -> Option<String>,
) -> State {
    let rows = archive.rows();
    let identity = archive.fixed_identity();
    let eligibility = eligibility(&rows, identity.as_ref(), tag_lookup);
    let champion = champion(&rows, &eligibility);
    State {
        spent: archive.total_cost_usd(),
        rows,
        eligibility,
        champion,
        selections: notes.selections.clone(),
        playbook: notes.playbook.clone(),
    }
}

/// What the driver reads from the events the fold does not cover (archived select
/// decisions and the playbook), read as lines arrive: each `state()` reads only the lines
/// appended since the last, not the whole archive again.
#[derive(Debug, Default)]
struct Notes {
    /// Lines read so far (the archive's `next_seq` when last read).
    read_to: u64,
    selections: std::collections::BTreeMap<u64, Vec<String>>,
    playbook: Vec<Value>,
}

impl Notes {
    /// Take in the lines of `archive` not read yet. An archive's lines are only ever
    /// appended (never rewritten while it is open), so what was read stays true.
    fn read(&mut self, archive: &Archive) {
        let from = self.read_to;
        for e in archive
            .events_of_type_from("select", from)
            .iter()
            .filter(|e| e.certified)
        {
            let generation = e.event.body.get("generation").and_then(Value::as_u64);
            let parents: Vec<String> = e
                .event
                .body
                .get("parents")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            if let (Some(g), false) = (generation, parents.is_empty()) {
                self.selections.insert(g, parents);
            }
        }
        let ops = archive
            .events_of_type_from("playbook", from)
            .into_iter()
            .filter(|e| e.certified)
            .flat_map(|e| match e.event.body.get("ops") {
                Some(Value::Array(ops)) => ops.clone(),
                _ => Vec::new(),
            });
        self.playbook.extend(ops);
        self.read_to = archive.next_seq();
    }
}

/// Make the engine the workspace's frozen configuration names. A local engine that cannot
/// contain its trials (and was not told to run them unconfined) fails here, before any
/// generation spends budget.
pub async fn make_engine(
    config: &crate::workspace::EngineConfig,
    recipe: &Recipe,
) -> Result<Arc<dyn Engine>> {
    use evaluator_harbor::engine::{
        docker::DockerEngine, harbor::HarborEngine, local::LocalEngine,
    };
    Ok(match config.engine.as_str() {
        "local" => {
            config
                .refuse_uncontainable(recipe)
                .map_err(|e| RunError::new(e.message).hint(e.hint.unwrap_or_default()))?;
            Arc::new(LocalEngine {
                unconfined: config.unconfined_trials,
                framework: Some(crate::builtin::framework_code()),
                ..LocalEngine::default()
            })
        }
        "docker" => Arc::new(DockerEngine::connect().await.map_err(|e| {
            RunError::new(format!("the docker engine is unavailable: {e}"))
                .hint("start the Docker daemon, or use evaluator.engine: local")
        })?),
        "harbor" => Arc::new(HarborEngine::discover(Vec::new()).map_err(|e| {
            RunError::new(format!("the harbor engine is unavailable: {e}"))
                .hint("install the harbor CLI (pip install harbor) or use evaluator.engine: local")
        })?),
        other => {
            return Err(RunError::new(format!(
                "unknown evaluation engine `{other}`"
            )));
        }
    })
}

/// The driver of one `evolve run`.
pub struct Driver {
    pub ws: Workspace,
    archive: Mutex<Archive>,
    stages: Stages,
    surface: Surface,
    engine: Arc<dyn Engine>,
    /// The experiment's model client, when the recipe (or the environment) names one.
    model: Option<crate::model::ModelClient>,
    redactor: Redactor,
    verbose: bool,
    /// The sandbox's cancellation token: set when the user stops the run.
    cancel: crate::sandbox::Cancel,
    progress: progress::Channel,
    /// The active recipe (gen/0's, or a driver's accepted revision) and the session's
    /// agent driver, if any (docs/driver.md).
    recipe: agent_driver::RecipeState,
    agent: Option<agent_driver::AgentDriver>,
    /// Directories this run wrote, kept for reuse (`checkouts.rs`).
    recycling: checkouts::Recycling,
    /// The archive's non-row events read so far (see [`Notes`]).
    notes: Mutex<Notes>,
    /// Wall time spent in evaluations so far (checkout, engine, summary), for
    /// `evolve bench` to tell the framework's own time from the evaluator's.
    evaluation_time: Mutex<std::time::Duration>,
    /// Consecutive generations of this run whose select gave no parents (see
    /// [`MAX_SELECT_FAILURES`]).
    select_failures: std::sync::atomic::AtomicU32,
    _lock: RunLock,
}

impl Driver {
    /// Take the run lock, open the archive, and refuse to start over an interrupted child.
    pub async fn open(ws: Workspace, sandbox: Arc<Sandbox>, verbose: bool) -> Result<Driver> {
        let lock = RunLock::acquire(ws.root()).map_err(|e| {
            let hint = match &e {
                LockError::Io { source, .. } if evaluator_harbor::error::disk_full(source) => {
                    evaluator_harbor::error::DISK_FULL_HINT
                }
                LockError::Io { .. } => "the workspace's .evolve/ directory must be writable",
                LockError::Held { .. } => "one run per workspace: wait for it or stop it first",
            };
            RunError::new(e.to_string()).hint(hint)
        })?;
        active_worktrees(&ws)?;
        checkouts::clear_stale_spares(&ws.paths.runs());
        let mut archive = ws.archive_writer()?;
        let recovery = archive.recovery().clone();
        if !recovery.resigned.is_empty()
            || recovery.archive_torn.is_some()
            || recovery.receipts_torn.is_some()
        {
            let body = RepairBody {
                what: "archive recovery at open".into(),
                resigned_seqs: Some(recovery.resigned.clone()),
                torn_archive_tail: Some(recovery.archive_torn.is_some()),
                torn_receipts_tail: Some(recovery.receipts_torn.is_some()),
                ..RepairBody::default()
            };
            archive
                .append(RepairBody::TYPE, None, body.to_map(), &now())
                .map_err(|e| RunError::new(format!("archive: {e}")))?;
        }
        pack_once(&ws);
        let surface = surface_of(&ws.recipe)?;
        let cancel = sandbox.cancel_token();
        let progress = progress::Channel::default();
        let mut stages = Stages::new(
            sandbox,
            &ws.recipe,
            surface.includes_dir(layout::OPERATORS_DIR),
        );
        stages.progress = progress.clone();
        let engine = make_engine(&ws.engine, &ws.recipe).await?;
        reconcile_model_spend(&ws, &mut archive)?;
        let model = model_client(&ws.recipe)?;
        if let Some(client) = &model {
            client.keep_ledger(crate::model::SpendLedger::new(model_ledger_path(&ws)));
        }
        let redactor = Redactor::new(&ws.task_set);
        let recipe = agent_driver::RecipeState::restore(&ws, &archive, &stages)?;
        Ok(Driver {
            ws,
            archive: Mutex::new(archive),
            stages,
            surface,
            engine,
            model,
            redactor,
            verbose,
            cancel,
            progress,
            recipe,
            agent: None,
            recycling: checkouts::Recycling::default(),
            notes: Mutex::default(),
            evaluation_time: Mutex::default(),
            select_failures: Default::default(),
            _lock: lock,
        })
    }

    /// Evaluate with `engine` instead of the one the workspace names: `evolve bench` runs
    /// generations with a no-op engine to measure the framework alone.
    pub fn with_engine(mut self, engine: Arc<dyn Engine>) -> Driver {
        self.engine = engine;
        self
    }

    /// Wall time this driver has spent in evaluations (fresh checkout, engine,
    /// summary), stamping and archiving them excluded.
    pub fn evaluation_time(&self) -> std::time::Duration {
        self.evaluation_time
            .lock()
            .map_or_else(|_| Default::default(), |t| *t)
    }

    /// One line of the run's narrative: to the progress sink, else to stderr, escaped
    /// there (a line quotes operators' reasons and notes; the sink escapes its own).
    pub(crate) fn say(&self, line: impl AsRef<str>) {
        let line = line.as_ref();
        if self.verbose && !self.progress.emit(progress::Event::Note(line.to_string())) {
            eprintln!("{}", crate::display::text(line));
        }
    }

    /// The current folded state.
    pub fn state(&self) -> State {
        let a = self.archive.lock().unwrap_or_else(|p| p.into_inner());
        let mut notes = self.notes.lock().unwrap_or_else(|p| p.into_inner());
        notes.read(&a);
        state_with(&a, &notes, &|g: &str| self.ws.tag_commit(g))
    }

    /// What the experiment has spent so far (the archive's ledger).
    pub fn spent(&self) -> f64 {
        self.archive
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .total_cost_usd()
    }

    /// Append one event; an archive failure stops the run.
    pub(crate) fn append<B: EventBody>(&self, genid: Option<&str>, body: &B) -> Result<()> {
        self.append_map(B::TYPE, genid, body.to_map())
    }

    /// Append an event whose body is already a map (an evaluation's stamped fields).
    fn append_map(
        &self,
        event_type: &str,
        genid: Option<&str>,
        body: Map<String, Value>,
    ) -> Result<()> {
        let mut a = self.archive.lock().unwrap_or_else(|p| p.into_inner());
        a.append(event_type, genid, body, &now())
            .map(|_| ())
            .map_err(|e| RunError::new(format!("cannot append to the archive: {e}")).hint("the archive is unchanged: nothing was half-written (a full disk is a common cause)"))
    }

    /// Write the champion cache (`evolve verify` compares it; nothing trusts it).
    fn write_champion_cache(&self, state: &State) {
        self.report_state(state);
        let v = Champion::cache_value(state.champion.as_ref());
        let _ = std::fs::write(
            self.ws.paths.champion_cache(),
            serde_json::to_vec(&v).unwrap_or_default(),
        );
    }

    /// Run the experiment to `max_generations` (resuming whatever an earlier run left).
    pub async fn run(&self, opts: &RunOptions) -> Result<RunSummary> {
        let recipe = &self.ws.recipe;
        let max_gen = opts
            .max_generations
            .unwrap_or(recipe.experiment.max_generations);
        let children = opts
            .children_per_gen
            .unwrap_or(recipe.experiment.children_per_gen)
            .max(1);
        self.progress.install(&opts.progress);
        self.report_state(&self.state());
        self.note_framework_only_trials();
        self.probe_model().await?;
        self.ensure_genesis().await?;
        let mut status = RunStatus::Complete;
        let mut failing = FailureStreak::default();
        // The state while nothing changes it: a resumed run passes its finished
        // generations without recomputing it for each.
        let mut unchanged: Option<State> = None;
        'generations: for generation in 1..=max_gen {
            self.check_cancelled(&format!("generation {generation}"))?;
            let genids: Vec<String> = (0..children)
                .map(|i| genid(generation, i, children))
                .collect();
            let state = unchanged.take().unwrap_or_else(|| self.state());
            let mut fresh = Vec::new();
            let mut resumes = Vec::new();
            for g in &genids {
                match child::next_step(&state, g) {
                    child::Next::Done => {}
                    child::Next::Fresh => fresh.push(g.clone()),
                    child::Next::Resume(step) => resumes.push((g.clone(), step)),
                }
            }
            if fresh.is_empty() && resumes.is_empty() {
                unchanged = Some(state);
                continue; // finished by an earlier run: nothing to show or do
            }
            self.progress.emit(progress::Event::GenerationStarted {
                generation,
                of: max_gen,
            });
            for (g, step) in resumes {
                self.resume(&g, step).await?;
            }
            if fresh.is_empty() {
                continue;
            }
            self.drive(generation).await?;
            if let Some(why) = self.budget_refusal(&self.state(), fresh.len()) {
                for g in &fresh {
                    let body = StatusBody::new(Status::BudgetExhausted, None, &why, None);
                    self.append(Some(g), &body)?;
                }
                self.say(format!("gen {generation}: budget exhausted: {why}"));
                status = RunStatus::BudgetExhausted;
                break 'generations;
            }
            let parents = match self.select(generation, &fresh).await? {
                Some(p) => p,
                None => continue,
            };
            let health = self.model.as_ref().map(|m| m.health());
            let jobs = fresh.iter().zip(parents).map(|(g, p)| self.run_child(g, p));
            for r in futures_util::future::join_all(jobs).await {
                r?;
            }
            let state = self.state();
            self.write_champion_cache(&state);
            let failure = self.infrastructure_failure(&state, &fresh, health.as_ref());
            if let Some(err) = failing.push(failure) {
                self.say(format!("gen {generation}: {}", err.what));
                return Err(err);
            }
        }
        if status == RunStatus::Complete {
            self.check_cancelled("the final anchor")?;
            self.final_anchor().await?;
            self.sealed_acceptance().await?;
        }
        let state = self.state();
        self.write_champion_cache(&state);
        Ok(self.summary(&state, status, max_gen))
    }

    /// Where bubblewrap is missing, a local run goes ahead only when its trials are all
    /// built-in code (`EngineConfig::refuse_uncontainable`): say that they run on the host.
    fn note_framework_only_trials(&self) {
        let engine = &self.ws.engine;
        if engine.engine == "local"
            && !engine.unconfined_trials
            && evaluator_harbor::engine::contain::bubblewrap().is_err()
        {
            self.say(
                "note: bubblewrap is not installed, and this recipe's trials are the built-in seed's agent component and tasks (framework code only), so they run without the sandbox; an agent of your own needs it (Debian/Ubuntu: apt-get install bubblewrap)",
            );
        }
    }

    /// Ask the model provider once, before generation 1 spends anything, whether it is
    /// there (no model configured: nothing to ask).
    async fn probe_model(&self) -> Result<()> {
        let Some(client) = &self.model else {
            return Ok(());
        };
        self.say("checking the model endpoint");
        let Err(e) = client.probe().await else {
            return Ok(());
        };
        // A model configured only by the environment (EVOLVE_MODEL_ENDPOINT set for other
        // work) must not stop a recipe whose operators never call one.
        let callers = crate::model::stages_calling_model(
            self.stages.sandbox(),
            &self.ws.recipe,
            self.ws.root(),
        );
        if callers.is_empty() {
            self.say(format!(
                "note: {e}; no operator of this recipe calls the model, so the run goes on"
            ));
            return Ok(());
        }
        Err(RunError::new(format!(
            "{e}; {} call(s) it; no generation was run",
            callers.join(", ")
        ))
        .hint(
            "fix model.endpoint in the recipe (or EVOLVE_MODEL_ENDPOINT), start the server, or set the key; `evolve recipe check --check RECIPE` probes without running",
        ))
    }

    /// The infrastructure failure every fresh child of a generation ended with, if they
    /// all ended with one: every evaluation `infrastructure_failed`, or every child
    /// `operator_failed` while every model call of the generation failed at the provider
    /// (`before` is the client's health when the generation started).
    fn infrastructure_failure(
        &self,
        state: &State,
        fresh: &[String],
        before: Option<&crate::model::Health>,
    ) -> Option<InfraFailure> {
        let rows: Vec<&Row> = fresh.iter().filter_map(|g| state.row(g)).collect();
        if rows.len() != fresh.len() || rows.is_empty() {
            return None;
        }
        let all = |status: &str| rows.iter().all(|r| r.status.as_deref() == Some(status));
        if all("infrastructure_failed") {
            let last = rows
                .last()
                .and_then(|r| r.reason.clone())
                .unwrap_or_default();
            return Some(InfraFailure {
                kind: "evaluation".into(),
                what: format!("every evaluation ended `infrastructure_failed` (the last: {last})"),
            });
        }
        let (Some(client), Some(before)) = (&self.model, before) else {
            return None;
        };
        let now = client.health();
        let failed_calls = now.provider_failures - before.provider_failures;
        if all("operator_failed") && now.answered == before.answered && failed_calls > 0 {
            let why = now.last_failure.unwrap_or_default();
            return Some(InfraFailure {
                kind: format!("model: {why}"),
                what: format!(
                    "every model call failed at the provider: {why} (model.endpoint `{}`)",
                    client.config().endpoint
                ),
            });
        }
        None
    }

    fn summary(&self, state: &State, status: RunStatus, generations: u32) -> RunSummary {
        let anchor = |genid: &str| {
            state.row(genid).and_then(|r| {
                r.anchors
                    .iter()
                    .rev()
                    .find(|a| a.outcome() == Some("benchmark_complete"))
                    .and_then(|a| a.score())
            })
        };
        RunSummary {
            status,
            generations,
            champion: state.champion.as_ref().map(|c| c.genid.clone()),
            champion_score: state.champion.as_ref().map(|c| c.score),
            genesis_score: state.row("0").and_then(Row::score),
            anchor_before: anchor("0"),
            anchor_after: state.champion.as_ref().and_then(|c| anchor(&c.genid)),
            spent_usd: state.spent(),
            budget_usd: self.ws.recipe.experiment.budget_usd,
            acceptance: self.acceptance(),
        }
    }

    /// Why a generation of `n` children cannot be paid for, if it cannot. The estimate
    /// is the measured cost of the genesis evaluation per child plus the mean operator
    /// spend per generation so far.
    fn budget_refusal(&self, state: &State, n: usize) -> Option<String> {
        let budget = self.ws.recipe.experiment.budget_usd;
        let spent = state.spent();
        let per_child = estimate_per_child(state);
        let needed = per_child * n as f64;
        if needed <= 0.0 && spent <= budget {
            return None;
        }
        (spent + needed > budget + 1e-12).then(|| {
            format!("spent ${spent:.4} of ${budget:.4}; the next generation is estimated at ${needed:.4}")
        })
    }

    /// Evaluate `gen/0` on the primary split (and give it the baseline gate verdict), then
    /// on the sealed split as a non-selectable anchor.
    async fn ensure_genesis(&self) -> Result<()> {
        let state = self.state();
        let row0 = state
            .row("0")
            .ok_or_else(|| RunError::new("the archive has no generation 0 row"))?;
        let commit = self.ws.genesis;
        match row0.evaluation.as_ref().and_then(|e| e.outcome()) {
            Some("benchmark_complete") => {}
            Some(other) => {
                return Err(
                    RunError::new(format!("the genesis evaluation ended `{other}`"))
                        .hint("fix the seed or the infrastructure, then `evolve retry 0`"),
                );
            }
            None => {
                self.say("gen 0: evaluating the seed on the primary split");
                let ev = self
                    .evaluate(&EvalRequest {
                        genid: "0".into(),
                        parent: None,
                        commit,
                        purpose: "genesis",
                        split: self.ws.primary_split(),
                        certified_attempts: certified_attempts(row0, "genesis"),
                    })
                    .await?;
                self.append_evaluation("0", &ev)?;
                if ev.outcome != "benchmark_complete" {
                    return Err(RunError::new(format!(
                        "the genesis evaluation ended `{}`: {}",
                        ev.outcome,
                        ev.body.get("reason").and_then(Value::as_str).unwrap_or("")
                    ))
                    .hint("fix the seed or the infrastructure, then `evolve retry 0`"));
                }
                self.say(format!("gen 0: score {}", fmt_score(ev.score)));
            }
        }
        let state = self.state();
        let row0 = state
            .row("0")
            .ok_or_else(|| RunError::new("the archive has no generation 0 row"))?;
        if row0.pending_gate {
            let body = GateBody {
                verdict: Some("keep".into()),
                reason: Some("generation 0 is the baseline".into()),
                ..GateBody::default()
            };
            self.append(Some("0"), &body)?;
        }
        if !self.ws.task_set.split.sealed.is_empty() && !has_complete_anchor(row0) {
            self.say("gen 0: evaluating the seed on the sealed split (anchor, never selectable)");
            let ev = self
                .evaluate(&EvalRequest {
                    genid: "0".into(),
                    parent: None,
                    commit,
                    purpose: "anchor",
                    split: SplitName::Sealed,
                    certified_attempts: anchor_attempts(row0),
                })
                .await?;
            self.append_evaluation("0", &ev)?;
            self.say(format!("gen 0: sealed anchor {}", fmt_score(ev.score)));
        }
        self.write_champion_cache(&self.state());
        Ok(())
    }

    /// After the last generation: evaluate the champion on the sealed split.
    async fn final_anchor(&self) -> Result<()> {
        if !self.ws.recipe.evaluator.anchor.final_ || self.ws.task_set.split.sealed.is_empty() {
            return Ok(());
        }
        let state = self.state();
        let Some(champ) = state.champion.clone() else {
            return Ok(());
        };
        let Some(row) = state.row(&champ.genid) else {
            return Ok(());
        };
        if has_complete_anchor(row) {
            return Ok(());
        }
        let Some(commit) = row
            .evaluation
            .as_ref()
            .and_then(|e| e.candidate_commit())
            .and_then(|c| Oid::from_str(c).ok())
        else {
            return Ok(());
        };
        self.say(format!(
            "gen {}: champion on the sealed split (anchor.final)",
            champ.genid
        ));
        let ev = self
            .evaluate(&EvalRequest {
                genid: champ.genid.clone(),
                parent: row.parent.clone(),
                commit,
                purpose: "anchor",
                split: SplitName::Sealed,
                certified_attempts: anchor_attempts(row),
            })
            .await?;
        self.append_evaluation(&champ.genid, &ev)?;
        self.say(format!(
            "gen {}: sealed anchor {}",
            champ.genid,
            fmt_score(ev.score)
        ));
        Ok(())
    }

    /// `evolve retry GENID`: a new evaluation attempt of a generation whose evaluation
    /// failed (then gate, record and reflect if it completes). Returns the new outcome.
    pub async fn retry(&self, genid: &str) -> Result<String> {
        let state = self.state();
        let row = state
            .row(genid)
            .ok_or_else(|| RunError::new(format!("generation `{genid}` is not in the archive")))?;
        let outcome = row
            .evaluation
            .as_ref()
            .and_then(|e| e.outcome())
            .map(str::to_string);
        match outcome.as_deref() {
            Some("benchmark_complete") => {
                return Err(RunError::new(format!(
                    "gen {genid}'s evaluation is complete; there is nothing to retry"
                )));
            }
            None => {
                return Err(RunError::new(format!(
                    "gen {genid} has no evaluation to retry (status {})",
                    row.status.as_deref().unwrap_or("none")
                ))
                .hint(
                    "`evolve run` resumes interrupted generations; retry is for failed evaluations",
                ));
            }
            Some(_) => {}
        }
        if genid == "0" {
            let ev = self
                .evaluate(&EvalRequest {
                    genid: "0".into(),
                    parent: None,
                    commit: self.ws.genesis,
                    purpose: "genesis",
                    split: self.ws.primary_split(),
                    certified_attempts: certified_attempts(row, "genesis"),
                })
                .await?;
            self.append_evaluation("0", &ev)?;
            if ev.outcome == "benchmark_complete" {
                self.ensure_genesis().await?;
            }
            return Ok(ev.outcome);
        }
        let commit = row
            .commit
            .as_deref()
            .and_then(|c| Oid::from_str(c).ok())
            .ok_or_else(|| RunError::new(format!("gen {genid} has no committed tree")))?;
        self.finish(genid, row.parent.clone(), commit).await?;
        let state = self.state();
        Ok(state
            .row(genid)
            .and_then(|r| r.status.clone())
            .unwrap_or_else(|| "unknown".into()))
    }

    /// Run an evaluation; a changed evaluator is returned as an error for the caller to
    /// archive, a host failure stops the run.
    pub(crate) async fn evaluate(&self, req: &EvalRequest) -> Result<Evaluated> {
        self.evaluate_observed(req).await?.map_err(|e| match e {
            EvalError::Host(m) => RunError::new(format!(
                "evaluation of gen/{} failed in the host: {m}",
                req.genid
            )),
            other => RunError::new(other.to_string()),
        })
    }

    /// Append a `repair` event for reused trials, then the evaluation itself.
    pub(crate) fn append_evaluation(&self, genid: &str, ev: &Evaluated) -> Result<()> {
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

    /// One select call for `generation`, or the archived decision of an interrupted run.
    /// Returns one parent per fresh genid, or `None` when select failed (archived).
    ///
    /// Select is loaded from the champion's commit. When the champion is not gen/0 and
    /// its select yields no parents (it cannot be loaded, fails, or returns no eligible
    /// parent), gen/0's select, frozen by `evolve init` and checked there, chooses
    /// instead and the `select` event records the `fallback`: otherwise one champion
    /// with a broken select would fail every later generation. When the last resort
    /// cannot even be loaded, no generation can run, and the run stops with an error.
    async fn select(&self, generation: u32, fresh: &[String]) -> Result<Option<Vec<String>>> {
        let state = self.state();
        if let Some(parents) = archived_selection(&state, generation) {
            return Ok(Some(assign(&parents, fresh.len())));
        }
        let genid_text = generation.to_string();
        let (checkout_commit, mut from) = match &state.champion {
            Some(c) => (
                state
                    .row(&c.genid)
                    .and_then(|r| r.evaluation.as_ref())
                    .and_then(|e| e.candidate_commit())
                    .and_then(|s| Oid::from_str(s).ok())
                    .unwrap_or(self.ws.genesis),
                format!("gen/{}", c.genid),
            ),
            None => (self.ws.genesis, "gen/0".to_string()),
        };
        let checkout = self.champion_checkout(checkout_commit)?;
        let mut run_dir = self.ws.paths.run_dir(&genid_text).join("select");
        let mut fallback = None;
        let parents = match self
            .select_call(&state, generation, fresh, &checkout, &run_dir, &from)
            .await?
        {
            Ok(p) => p,
            // A select a driver rebound is not the champion's: it would run again.
            Err(first)
                if checkout_commit != self.ws.genesis && !self.stages.is_rebound(Stage::Select) =>
            {
                self.say(format!(
                    "gen {generation}: the select of the champion ({from}) gave no parents: {}; gen/0's select chooses",
                    first.reason
                ));
                let root = self.commit_checkout(self.ws.genesis)?;
                let dir = self.ws.paths.run_dir(&genid_text).join(SELECT_FALLBACK_DIR);
                match self
                    .select_call(&state, generation, fresh, &root, &dir, "gen/0")
                    .await?
                {
                    Ok(p) => {
                        fallback = Some(SelectFallback {
                            from: from.clone(),
                            reason: child::clip(&self.redactor.redact(&first.reason), 2000),
                        });
                        from = "gen/0".into();
                        run_dir = dir;
                        p
                    }
                    Err(second) => {
                        let reason = format!(
                            "{from}'s select: {}; gen/0's select: {}",
                            first.reason, second.reason
                        );
                        return self.select_failed(fresh, reason, second.unloadable);
                    }
                }
            }
            Err(first) => return self.select_failed(fresh, first.reason, first.unloadable),
        };
        let body = SelectBody {
            generation,
            parents: parents.clone(),
            operator_from: from,
            fallback,
            operator: stages::recorded_identity(&run_dir),
            recipe_sha256: self.recipe.sha256(),
        };
        self.append(None, &body)?;
        self.select_failures
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.say(format!("gen {generation}: select → {}", parents.join(", ")));
        Ok(Some(assign(&parents, fresh.len())))
    }

    /// Call select from `checkout` (the commit `from` names). `Err` says why it yielded
    /// no eligible parents; a cancelled call stops the run.
    async fn select_call(
        &self,
        state: &State,
        generation: u32,
        fresh: &[String],
        checkout: &std::path::Path,
        run_dir: &std::path::Path,
        from: &str,
    ) -> Result<std::result::Result<Vec<String>, NoParents>> {
        let genid_text = generation.to_string();
        let archive_view = view::archive_view(
            &state.rows,
            &state.eligibility,
            state.champion.as_ref(),
            &self.redactor,
        );
        let record = json!({"operator_from": from, "archive": archive_view.rows.iter().map(view::row_json).collect::<Vec<_>>(), "champion": archive_view.champion});
        let ctx = self.stages.context(Stage::Select, &genid_text, None);
        let out = self
            .stages
            .call(
                Stage::Select,
                checkout,
                run_dir,
                None,
                Default::default(),
                StageInput::Select {
                    ctx,
                    archive: archive_view,
                },
                record,
            )
            .await;
        let no = |reason: String| Ok(Err(NoParents::new(reason)));
        let parents = match out {
            Ok(StageOutput::Parents(p)) => p,
            Ok(_) => return no("the operator returned something other than parents".into()),
            Err(_) if self.cancel().is_cancelled() => {
                return Err(self.cancelled(fresh, "select", None));
            }
            Err(f) => {
                return Ok(Err(NoParents {
                    unloadable: f.kind == stages::LOAD_FAILED,
                    reason: f.message,
                }));
            }
        };
        if let Some(bad) = parents.iter().find(|p| !state.eligible(p)) {
            return no(format!(
                "select returned `{bad}`, which is not an eligible parent"
            ));
        }
        if parents.is_empty() {
            return no("select returned no parent".into());
        }
        // One parent per child, or one for all: anything longer would only be archived.
        if parents.len() > fresh.len().max(1) {
            return no(format!(
                "malformed_result: select returned {} parent ids for {} children; give at most one per child",
                parents.len(),
                fresh.len()
            ));
        }
        Ok(Ok(parents))
    }

    /// Archive a select that gave no parents as the fresh children's `operator_failed`.
    /// When the last resort (gen/0's select, or a driver's rebound one) could not even be
    /// loaded, every later generation would fail the same way, so the run stops.
    fn select_failed(
        &self,
        fresh: &[String],
        reason: String,
        unloadable: bool,
    ) -> Result<Option<Vec<String>>> {
        self.fail_all(fresh, "select", reason.clone())?;
        if unloadable {
            return Err(RunError::new(format!(
                "no generation can choose a parent: select cannot be loaded ({reason})"
            ))
            .hint("the last resort is gen/0's select (or a driver revision's), frozen by the host: run `evolve verify` on the workspace, then start a new one from the recipe"));
        }
        let failures = 1 + self
            .select_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if failures >= MAX_SELECT_FAILURES {
            return Err(RunError::new(format!(
                "select gave no parents in {failures} consecutive generations; the last: {reason}"
            ))
            .hint("each failure is archived (`evolve log`, `evolve show GENID`); `evolve run` tries again"));
        }
        Ok(None)
    }

    fn fail_all(&self, genids: &[String], stage: &str, reason: String) -> Result<()> {
        self.say(format!("{stage} failed: {reason}"));
        for g in genids {
            let body = StatusBody::new(Status::OperatorFailed, Some(stage), &reason, None);
            self.append(Some(g), &body)?;
        }
        Ok(())
    }
}

/// A run stops once this many consecutive generations had every child end with the same
/// infrastructure failure (docs/lifecycle.md, "Stopping early"): the cause is outside
/// the search, so every remaining generation would fail alike and spend its budget.
pub const MAX_INFRA_FAILURES: u32 = 3;

/// An infrastructure failure that ended every child of a generation.
#[derive(Debug, Clone, PartialEq)]
struct InfraFailure {
    /// What two generations must share to count as the same failure.
    kind: String,
    /// The line the user reads.
    what: String,
}

/// Consecutive generations of this run that failed with the same [`InfraFailure`].
#[derive(Debug, Default)]
struct FailureStreak {
    last: Option<InfraFailure>,
    count: u32,
}

impl FailureStreak {
    /// Count one generation's failure (`None`: it did not fail so); the run's error
    /// once [`MAX_INFRA_FAILURES`] in a row failed the same way.
    fn push(&mut self, failure: Option<InfraFailure>) -> Option<RunError> {
        let Some(failure) = failure else {
            *self = FailureStreak::default();
            return None;
        };
        let same = self.last.as_ref().is_some_and(|l| l.kind == failure.kind);
        self.count = if same { self.count + 1 } else { 1 };
        let err = (self.count >= MAX_INFRA_FAILURES).then(|| {
            RunError::new(format!(
                "stopped early: the last {} generations all failed the same way: {}",
                self.count, failure.what
            ))
            .hint("every failure is archived (`evolve log`); fix the cause, then `evolve run` goes on from here")
        });
        self.last = Some(failure);
        err
    }
}

/// A run stops once select, with its fallback, gave no parents in this many consecutive
/// generations: a failure that persists would otherwise fail every remaining generation
/// and end the run as `complete`. One or two in a row (a timeout on a loaded machine)
/// only cost their generations.
const MAX_SELECT_FAILURES: u32 = 3;

/// Where the run directory keeps gen/0's select call when the champion's gave no
/// parents (`runs/gen-<n>/select-gen0`).
const SELECT_FALLBACK_DIR: &str = "select-gen0";

/// Why a select call yielded no parents.
struct NoParents {
    reason: String,
    /// Its component or script could not be loaded (not a fault of this generation's
    /// archive: it recurs for as long as the same checkout is loaded).
    unloadable: bool,
}

impl NoParents {
    fn new(reason: String) -> NoParents {
        NoParents {
            reason,
            unloadable: false,
        }
    }
}

/// Parents for `n` children: one parent serves them all; several are used in order,
/// cycling when select returned fewer than there are children.
fn assign(parents: &[String], n: usize) -> Vec<String> {
    (0..n).map(|i| parents[i % parents.len()].clone()).collect()
}

/// The parents an earlier run's select chose for `generation`.
fn archived_selection(state: &State, generation: u32) -> Option<Vec<String>> {
    state.selections.get(&(generation as u64)).cloned()
}

pub(crate) fn fmt_score(s: Option<f64>) -> String {
    s.map_or_else(|| "-".to_string(), |s| format!("{s:.4}"))
}

fn has_complete_anchor(row: &Row) -> bool {
    row.anchors
        .iter()
        .any(|a| a.outcome() == Some("benchmark_complete"))
}

fn attempt_of(e: &evolve_archive::Evaluation) -> Option<u64> {
    e.stamp.get("attempt").and_then(Value::as_u64)
}

pub(crate) fn certified_attempts(row: &Row, purpose: &str) -> Vec<u64> {
    row.evaluation
        .iter()
        .chain(&row.other_evaluations)
        .filter(|e| e.purpose() == Some(purpose))
        .filter_map(attempt_of)
        .collect()
}

fn anchor_attempts(row: &Row) -> Vec<u64> {
    row.anchors.iter().filter_map(attempt_of).collect()
}

/// Estimated cost of one more child: the genesis evaluation's measured cost (a child's
/// evaluation runs the same split) plus the mean non-evaluation spend per committed child.
pub fn estimate_per_child(state: &State) -> f64 {
    let eval = state
        .row("0")
        .and_then(|r| r.evaluation.as_ref())
        .map_or(0.0, |e| e.cost_usd());
    let children: Vec<&Row> = state.rows.iter().filter(|r| r.genid != "0").collect();
    let operator_spend: f64 = children
        .iter()
        .map(|r| {
            r.cost_usd
                - r.evaluation.as_ref().map_or(0.0, |e| e.cost_usd())
                - r.anchors.iter().map(|a| a.cost_usd()).sum::<f64>()
        })
        .sum();
    let mean_ops = if children.is_empty() {
        0.0
    } else {
        operator_spend / children.len() as f64
    };
    eval + mean_ops.max(0.0)
}

/// The experiment's model client (made inside the runtime that uses its connection
/// pool), or `None` when no model is configured.
fn model_client(recipe: &Recipe) -> Result<Option<crate::model::ModelClient>> {
    let block = recipe.model.clone().unwrap_or(Value::Null);
    let config = crate::model::ModelConfig::from_recipe(&block)
        .map_err(|e| RunError::new(format!("recipe {e}")))?;
    config
        .map(|c| {
            crate::model::ModelClient::new(c).map_err(|e| RunError::new(format!("recipe {e}")))
        })
        .transpose()
}

/// Where the run keeps its model calls' reservations (`crate::model::ledger`).
fn model_ledger_path(ws: &Workspace) -> std::path::PathBuf {
    ws.paths.state().join(crate::model::ledger::LEDGER_FILE)
}

/// Charge the model calls a killed run made that no archive event billed (the events
/// closing their stages list the calls they charged, `model::ledger`): an answered call
/// at what it was charged, a call in flight at its reserved worst case. They are
/// archived in `repair` events that list them in turn (so a second open after a crash
/// here does not charge them twice), and the ledger is emptied. Runs under the run
/// lock, before any call of this run.
fn reconcile_model_spend(ws: &Workspace, archive: &mut Archive) -> Result<()> {
    use crate::model::ledger;
    let path = model_ledger_path(ws);
    let calls = ledger::calls(&path).map_err(|e| {
        RunError::new(format!(
            "cannot read the model spend ledger {}: {e}",
            path.display()
        ))
    })?;
    if calls.is_empty() {
        return ledger::clear(&path).map_err(|e| ledger_error(&path, e));
    }
    let left = ledger::unbilled(calls, &billed_model_calls(archive));
    // One event per generation the calls were made for, so the row's spend (what
    // `evolve status` adds up) includes them; calls of no generation get none.
    let mut by_genid: std::collections::BTreeMap<Option<String>, Vec<&ledger::Call>> =
        Default::default();
    for call in &left {
        by_genid
            .entry(genid_of_log(&call.log))
            .or_default()
            .push(call);
    }
    for (genid, calls) in by_genid {
        archive
            .append(
                RepairBody::TYPE,
                genid.as_deref(),
                unbilled_body(&calls).to_map(),
                &now(),
            )
            .map_err(|e| RunError::new(format!("archive: {e}")))?;
    }
    ledger::clear(&path).map_err(|e| ledger_error(&path, e))
}

fn ledger_error(path: &std::path::Path, e: std::io::Error) -> RunError {
    RunError::new(format!(
        "cannot empty the model spend ledger {}: {e}",
        path.display()
    ))
}

/// The ledger ids every certified archive event lists as calls its `cost_usd` includes.
/// Every event is read, whatever its type: the rule is the key, not the event.
fn billed_model_calls(archive: &Archive) -> std::collections::HashSet<String> {
    archive
        .events()
        .iter()
        .filter(|e| e.certified)
        .filter_map(|e| e.event.body.get(crate::model::ledger::MODEL_CALLS_KEY))
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// The `repair` event body that charges `calls` of one generation.
fn unbilled_body(calls: &[&crate::model::ledger::Call]) -> RepairBody {
    let answered = calls.iter().filter(|c| c.settled_usd.is_some()).count();
    let logs: std::collections::BTreeSet<&str> = calls.iter().map(|c| c.log.as_str()).collect();
    RepairBody {
        what: "model calls of a killed run that no event charged: answered ones at their charge, ones in flight at their reserved worst case".into(),
        model_calls: Some(calls.iter().map(|c| c.id.clone()).collect()),
        answered: Some(answered as u64),
        in_flight: Some((calls.len() - answered) as u64),
        logs: Some(logs.into_iter().map(str::to_string).collect()),
        cost_usd: Some(calls.iter().map(|c| c.charge()).sum::<f64>()),
        ..RepairBody::default()
    }
}

/// The generation whose stage wrote into `log` (`…/runs/gen-<genid>/…`), if any. Read
/// from the path's own components: the killed run may have named the workspace by
/// another (relative) path than this one does.
fn genid_of_log(log: &str) -> Option<String> {
    let parts: Vec<&str> = std::path::Path::new(log)
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .collect();
    parts
        .windows(2)
        .rev()
        .find(|w| w[0] == layout::RUNS_DIR && w[1].starts_with("gen-"))
        .map(|w| w[1]["gen-".len()..].to_string())
}

/// The surface of a recipe.
pub fn surface_of(recipe: &Recipe) -> Result<Surface> {
    // `init` refuses an include that could allow no change; a workspace made before it
    // did would reject every generation, so the run stops on it instead.
    if let Some(v) = crate::recipe::surface_problems(recipe).first() {
        return Err(RunError::new(format!("gen/0's recipe: {v}"))
            .hint("this workspace's surface can allow no change: make a new one from a corrected recipe (`evolve recipe check`)"));
    }
    Surface::new(&recipe.surface.include, &recipe.surface.exclude)
        .map_err(|e| RunError::new(format!("surface: {e}")))
}

/// Pack the repository's loose objects once per workspace (before the first run) and
/// then every 200 generations: checkouts read one pack instead of thousands of files.
fn pack_once(ws: &Workspace) {
    let marker = ws.paths.state().join("packed-at");
    let generations = ws.store.tags("gen/").map(|t| t.len()).unwrap_or(0);
    let last: usize = std::fs::read_to_string(&marker)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if (!marker.exists() || generations >= last + 200) && ws.store.pack_objects().is_ok() {
        let _ = std::fs::write(&marker, format!("{generations}\n"));
    }
}

/// Refuse to start while a child worktree is left from an interrupted run.
fn active_worktrees(ws: &Workspace) -> Result<()> {
    let names: Vec<String> = std::fs::read_dir(ws.paths.worktrees())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    Err(RunError::new(format!(
        "an interrupted run left child worktree(s) {} under {}",
        names.join(", "),
        ws.paths.worktrees().display()
    ))
    .hint("run `evolve repair`: it removes clean ones and moves edited ones to runs/interrupted/, then `evolve run` resumes"))
}
