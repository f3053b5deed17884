//! The lifecycle driver behind `evolve run`. This file owns the [`Driver`] itself (open,
//! the folded [`State`], appending to the archive) and the generation loop; each of the
//! driver's other roles has a file of its own:
//!
//! - `anchors.rs`: gen/0's evaluations, the final sealed anchor, `evolve retry`;
//! - `select.rs`: one select per generation, with gen/0's as the fallback;
//! - [`child`]: a fresh child's transaction, from its fork to its commit;
//! - `committed.rs`: a committed child's evaluation, gate, record and reflect;
//! - [`evaluate`]: the framework's evaluation of one commit, and archiving it;
//! - `spend.rs`: the meter of a child's stage calls, the budget, unbilled model calls;
//! - `health.rs`: the model probe and stopping early on an infrastructure failure;
//! - `checkouts.rs`: the directories stages run on, recycled; [`progress`]: progress
//!   events and cancellation; [`agent_driver`]: a driver revising the recipe.
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
mod agent_model;
mod anchors;
mod checkouts;
pub mod child;
mod committed;
pub mod evaluate;
mod health;
pub mod progress;
pub mod repair;
mod select;
mod spend;
pub mod stages;
pub mod train;
pub mod view;

pub(crate) use anchors::certified_attempts;
pub use health::MAX_INFRA_FAILURES;
pub use spend::estimate_per_child;

use crate::layout;
use crate::recipe::Recipe;
use crate::sandbox::Sandbox;
use crate::workspace::{Workspace, now};
use evaluator_harbor::engine::Engine;
use evolve_archive::{
    Archive, Champion, Eligibility, EventBody, LockError, RepairBody, Row, RunLock, Status,
    StatusBody, champion, eligibility,
};
use evolve_snapshot::Surface;
use serde_json::{Map, Value};
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
        "harbor" => Arc::new(HarborEngine::discover(Default::default()).map_err(|e| {
            let install = e
                .hint
                .clone()
                .unwrap_or_else(|| "install the harbor CLI (`pip install harbor`)".to_string());
            RunError::new(format!("the harbor engine is unavailable: {e}"))
                .hint(format!("{install}; or use evaluator.engine: local"))
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
    /// The agent under test's model, served to its trials by the gateway.
    agent_model: Option<agent_model::AgentModel>,
    /// Set when an evaluation's trials found the budget spent: the run stops after the
    /// generation, as budget-exhausted.
    agent_budget_exhausted: std::sync::atomic::AtomicBool,
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
    /// `MAX_SELECT_FAILURES` in `select.rs`).
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
        spend::reconcile_model_spend(&ws, &mut archive)?;
        let model = spend::model_client(&ws.recipe)?;
        let ledger = || crate::model::SpendLedger::new(spend::model_ledger_path(&ws));
        if let Some(client) = &model {
            client.keep_ledger(ledger());
        }
        let agent_model = agent_model::AgentModel::open(&ws, model.as_ref(), ledger)?;
        let redactor = Redactor::new(&ws.task_set);
        let recipe = agent_driver::RecipeState::restore(&ws, &archive, &stages)?;
        Ok(Driver {
            ws,
            archive: Mutex::new(archive),
            stages,
            surface,
            engine,
            model,
            agent_model,
            agent_budget_exhausted: Default::default(),
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
        // Every variable the recipe passes to its trials is set, or nothing is spent.
        self.ws.engine.trial_settings()?;
        self.probe_model().await?;
        self.ensure_genesis().await?;
        let mut status = RunStatus::Complete;
        let mut failing = health::FailureStreak::default();
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
            if self
                .agent_budget_exhausted
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                self.say(format!(
                    "gen {generation}: budget exhausted: the agent's model calls found the budget spent mid-trial"
                ));
                status = RunStatus::BudgetExhausted;
                break 'generations;
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
}

pub(crate) fn fmt_score(s: Option<f64>) -> String {
    s.map_or_else(|| "-".to_string(), |s| format!("{s:.4}"))
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
