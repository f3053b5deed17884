//! One candidate transaction up to its commit: fork the parent's certified commit →
//! rollout → analyze* → mutate → surface check on the actual tree diff → validate* →
//! novelty* → commit and tag `gen/<id>`; `committed.rs` takes the commit on (evaluation,
//! gate, record, reflect*). Every early stop is a typed, archived attempt. Also what a
//! genid still needs ([`next_step`]), read from the archive.

use super::spend::Meter;
use super::stages::{At, StageFailure};
use super::view::{self, row_json, row_view};
use super::{Driver, Result, RunError, State, fmt_score};
use crate::layout;
use crate::safe_tree::{self, TreeLimits};
use crate::sandbox::Capabilities;
use crate::sandbox::types::{self as wit, Stage};
use evolve_archive::body::{self, GenerationBody};
use evolve_archive::{Status, StatusBody};
use evolve_snapshot::{Change, ChangeKind, Limits as SnapshotLimits, Oid, Snapshot};
use serde_json::{Value, json};
use std::future::Future;
use std::path::{Path, PathBuf};

/// What a genid still needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Terminal: nothing left to do.
    Done,
    /// Not started (or interrupted before anything was archived): run from select on.
    Fresh,
    Resume(Step),
}

/// Where an interrupted transaction resumes.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Committed (maybe not yet tagged) but no certified evaluation.
    Evaluate { commit: Oid, parent: Option<String> },
    /// Evaluated completely; the gate has not decided.
    Gate { commit: Oid, parent: Option<String> },
    /// Gated; record has not run.
    Record { commit: Oid, parent: Option<String> },
}

/// For the run's narrative: `the gate of commit 830bc1d2e4f5 (parent gen 7)`.
impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (stage, commit, parent) = match self {
            Step::Evaluate { commit, parent } => ("the evaluation", commit, parent),
            Step::Gate { commit, parent } => ("the gate", commit, parent),
            Step::Record { commit, parent } => ("record", commit, parent),
        };
        let commit = commit.to_string();
        write!(f, "{stage} of commit {}", &commit[..commit.len().min(12)])?;
        match parent {
            Some(p) => write!(f, " (parent gen {p})"),
            None => Ok(()),
        }
    }
}

/// Statuses that end an attempt before or without an evaluation.
const EARLY_STOPS: [Status; 6] = [
    Status::NoProposal,
    Status::InvalidProposal,
    Status::RejectedValidation,
    Status::RejectedDuplicate,
    Status::OperatorFailed,
    Status::BudgetExhausted,
];

/// Decide from the archive what `genid` still needs.
pub fn next_step(state: &State, genid: &str) -> Next {
    let Some(row) = state.row(genid) else {
        return Next::Fresh;
    };
    if row
        .status
        .as_deref()
        .and_then(Status::parse)
        .is_some_and(|s| EARLY_STOPS.contains(&s))
    {
        return Next::Done;
    }
    let Some(commit) = row.commit.as_deref().and_then(|c| Oid::from_str(c).ok()) else {
        // Only bookkeeping events (e.g. a repair note) name it: nothing was committed.
        return if row.evaluation.is_none() {
            Next::Fresh
        } else {
            Next::Done
        };
    };
    let parent = row.parent.clone();
    match &row.evaluation {
        None => Next::Resume(Step::Evaluate { commit, parent }),
        Some(e) if e.outcome() != Some("benchmark_complete") => Next::Done,
        Some(_) if row.pending_gate => Next::Resume(Step::Gate { commit, parent }),
        Some(_) if !row.recorded && row.verdict.is_some() => {
            Next::Resume(Step::Record { commit, parent })
        }
        Some(_) => Next::Done,
    }
}

pub(super) fn changed_paths(changes: &[Change]) -> Vec<String> {
    changes.iter().map(|c| c.path.clone()).collect()
}

fn path_change(c: &Change) -> body::PathChange {
    let change = match c.kind {
        ChangeKind::Added => body::ChangeKind::Added,
        ChangeKind::Modified => body::ChangeKind::Modified,
        ChangeKind::Deleted => body::ChangeKind::Deleted,
    };
    body::PathChange {
        path: c.path.clone(),
        change,
    }
}

/// Keep a text short enough for an archive line.
pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &s[..end], s.len() - end)
}

/// One child being built: where it lives and what its stages spent.
pub(crate) struct Attempt {
    genid: String,
    parent: String,
    /// The parent's certified commit, which the fork checked out.
    parent_commit: Oid,
    wt: PathBuf,
    run_dir: PathBuf,
    meter: Meter,
}

/// How a transaction ends short of its commit.
enum Halt {
    /// The attempt stopped early and its `status` event is archived: the run goes on.
    Stopped,
    /// The run stops: the user interrupted it, or the host failed.
    Run(RunError),
}

impl From<RunError> for Halt {
    fn from(e: RunError) -> Halt {
        Halt::Run(e)
    }
}

/// What a step of the transaction gives the next one, unless the transaction halts.
type Flow<T> = std::result::Result<T, Halt>;

impl Driver {
    /// Run a fresh child of `parent` as `genid`: fork, the transaction up to its commit,
    /// then the committed child's evaluation, gate, record and reflect (`committed.rs`).
    pub(crate) async fn run_child(&self, genid: &str, parent: String) -> Result<()> {
        let state = self.state();
        let parent_view = self
            .parent_view(&state, &parent)
            .ok_or_else(|| RunError::new(format!("parent {parent} has no archive row")))?;
        let a = self.fork(genid, &parent, &state)?;
        self.say(format!(
            "gen {genid}: forked gen/{parent} (score {})",
            fmt_score(parent_view.score)
        ));
        match self.transaction(&a, &state, &parent_view).await {
            Ok(commit) => self.finish(genid, Some(parent), commit).await,
            Err(Halt::Stopped) => Ok(()),
            Err(Halt::Run(e)) => Err(e),
        }
    }

    /// The transaction on the fork, up to the commit of the reviewed tree
    /// (docs/lifecycle.md, "One candidate transaction", steps 3 to 6).
    async fn transaction(&self, a: &Attempt, state: &State, parent: &wit::ArchiveRow) -> Flow<Oid> {
        // Rollout, analyze and mutate run the parent's operators on the fork.
        let rollout = self
            .on_fork(a, Stage::Rollout, |at| {
                self.stages.rollout(at, parent.clone())
            })
            .await?;
        let analysis = if self.stages.enabled(Stage::Analyze) {
            // Analyze reads rollout's train trajectories in a train-only bundle of its own.
            let bundle = (ANALYZE_FEEDBACK, parent, &rollout, None);
            let feedback = self.feedback_bundle(&a.run_dir, bundle)?;
            let call = |at| self.stages.analyze(at, &rollout, &feedback);
            Some(self.on_fork(a, Stage::Analyze, call).await?)
        } else {
            None
        };
        // Mutate edits the fork, with a train-only feedback bundle.
        let bundle = (MUTATE_FEEDBACK, parent, &rollout, analysis.as_ref());
        let feedback = self.feedback_bundle(&a.run_dir, bundle)?;
        let observation = self.observation(state, &rollout, analysis);
        let proposal = self
            .on_fork(a, Stage::Mutate, |at| {
                self.stages.mutate(at, &feedback, observation)
            })
            .await?;

        let snap = self.review(a).await?;
        let changed = changed_paths(&snap.changes);

        // Validate and novelty run the parent's operators on the mutated tree.
        if self.stages.enabled(Stage::Validate) {
            let call = |at| self.stages.validate(at, &changed, &rollout);
            let v = self.on_fork(a, Stage::Validate, call).await?;
            if !v.accept {
                let why = format!("candidate validation rejected: {}", v.reason);
                let stop = (Status::RejectedValidation, "validate", why.as_str());
                return Err(self.stop_proposed(a, stop, snap.tree));
            }
        }
        if self.stages.enabled(Stage::Novelty) {
            let diff = self.candidate_diff(state, a.parent_commit, snap.tree, &changed)?;
            let n = self
                .on_fork(a, Stage::Novelty, |at| self.stages.novelty(at, diff))
                .await?;
            if !n.accept {
                let why = format!(
                    "novelty {:.3}: a near-duplicate of an accepted edit, or no edit",
                    n.novelty
                );
                let stop = (Status::RejectedDuplicate, "novelty", why.as_str());
                return Err(self.stop_proposed(a, stop, snap.tree));
            }
        }
        self.commit(a, &snap, &proposal, changed.len())
    }

    /// Call `stage` on the child's fork, with the capabilities its world grants metered
    /// by the attempt. Whatever makes the call fail (the operator, loading it, a result
    /// of another stage's kind) ends the attempt here as `operator_failed`; a call the
    /// user stopped ends it as `cancelled`, and the run stops.
    async fn on_fork<'a, T, F, Fut>(&self, a: &'a Attempt, stage: Stage, call: F) -> Flow<T>
    where
        F: FnOnce(At<'a>) -> Fut,
        Fut: Future<Output = std::result::Result<T, StageFailure>>,
    {
        let name = crate::sandbox::stage_name(stage);
        let dir = a.run_dir.join(name);
        let capabilities = match stage {
            Stage::Analyze => a.meter.model(self, &dir),
            Stage::Rollout | Stage::Mutate | Stage::Validate => a.meter.tasks(self, &a.wt, &dir),
            _ => Capabilities::default(),
        };
        let at = At {
            genid: &a.genid,
            parent: Some(&a.parent),
            checkout: &a.wt,
            run_dir: dir,
            capabilities,
        };
        match call(at).await {
            Ok(out) => Ok(out),
            Err(_) if self.cancel().is_cancelled() => {
                let what = format!("{name} of gen {} ended `cancelled`", a.genid);
                Err(self.interrupt(a, name, &what))
            }
            Err(f) => Err(self.stop(a, Status::OperatorFailed, name, &f.message)),
        }
    }

    /// What mutate observes: this generation's train evidence, the surface it may
    /// change, and the archive as operators see it.
    fn observation(
        &self,
        state: &State,
        rollout: &wit::Evidence,
        analysis: Option<wit::Evidence>,
    ) -> wit::Observation {
        let surface = &self.ws.recipe.surface;
        wit::Observation {
            rollout: Some(rollout.clone()),
            analysis,
            feedback_dir: Some("/feedback".into()),
            surface: wit::Surface {
                includes: surface.include.clone(),
                excludes: surface.exclude.clone(),
            },
            archive: Some(self.operator_archive(state)),
        }
    }

    /// Step 4: the surface check on the actual tree (never the operator's claim), then
    /// the check that every edited operator still serves its stage. Returns the
    /// snapshot of the reviewed tree.
    async fn review(&self, a: &Attempt) -> Flow<Snapshot> {
        let snap = match self.ws.store.snapshot(
            &a.wt,
            Some(a.parent_commit),
            &SnapshotLimits::default(),
            &layout::skip_top_level,
        ) {
            Ok(s) => s,
            Err(e) => {
                let why = format!("the mutated tree cannot be snapshotted: {e}");
                return Err(self.stop(a, Status::InvalidProposal, "mutate", &why));
            }
        };
        if snap.changes.is_empty() {
            return Err(self.stop(a, Status::NoProposal, "mutate", "no changes to commit"));
        }
        let violations = self.surface.check(&snap.changes);
        if !violations.is_empty() {
            let list: Vec<String> = violations
                .iter()
                .take(20)
                .map(|v| format!("{} ({})", v.path, v.reason))
                .collect();
            let why = format!(
                "{} change(s) outside the mutable surface: {}",
                violations.len(),
                list.join("; ")
            );
            let stop = (Status::InvalidProposal, "surface", why.as_str());
            return Err(self.stop_proposed(a, stop, snap.tree));
        }
        // An edited operator must still serve its stage before the tree can become a
        // parent: one that does not would fail every generation descending from it
        // (`stages/edits.rs`).
        let defects = self.stages.check_operator_edits(&a.wt, &snap.changes).await;
        if self.cancel().is_cancelled() {
            let what = format!("the operator check of gen {} ended `cancelled`", a.genid);
            return Err(self.interrupt(a, "surface", &what));
        }
        if !defects.is_empty() {
            let list: Vec<String> = defects.iter().take(20).map(ToString::to_string).collect();
            let why = format!(
                "{} edited operator(s) cannot serve their stage: {}",
                defects.len(),
                list.join("; ")
            );
            let stop = (Status::InvalidProposal, "surface", why.as_str());
            return Err(self.stop_proposed(a, stop, snap.tree));
        }
        Ok(snap)
    }

    /// Step 6: commit the reviewed tree, archive the `generation` event, then tag it (a
    /// tag never precedes its row). The worktree becomes the commit's checkout.
    fn commit(
        &self,
        a: &Attempt,
        snap: &Snapshot,
        proposal: &wit::Proposal,
        changed: usize,
    ) -> Flow<Oid> {
        let (genid, parent) = (a.genid.as_str(), a.parent.as_str());
        let commit = self
            .ws
            .store
            .commit(
                snap.tree,
                Some(a.parent_commit),
                &format!("evolve: generation {genid} (parent {parent})"),
                false,
            )
            .map_err(|e| RunError::new(format!("cannot commit gen {genid}: {e}")))?;
        let usd = if proposal.usage.usd.is_finite() {
            proposal.usage.usd
        } else {
            0.0
        };
        // Metered spend of this generation's stage calls (the host meters model calls and
        // train trials; an operator's own usage figure is kept only as a claim).
        let charge = a.meter.charge();
        let body = GenerationBody {
            parent: Some(parent.to_string()),
            commit: Some(commit.to_string()),
            tree: Some(snap.tree.to_string()),
            changes: Some(snap.changes.iter().map(path_change).collect()),
            claimed: Some(proposal.changed.iter().take(200).cloned().collect()),
            notes: Some(
                proposal
                    .notes
                    .iter()
                    .take(20)
                    .map(|n| clip(&self.redactor.redact(n), 500))
                    .collect(),
            ),
            usage_claimed: Some(body::UsageClaim {
                input_tokens: proposal.usage.input_tokens,
                output_tokens: proposal.usage.output_tokens,
                usd,
            }),
            cost_usd: Some(charge.cost_usd),
            model_calls: charge.model_calls,
            // The operator identity (component and script digests) of every call it made.
            operators: Some(super::stages::recorded_identities(
                &a.run_dir,
                Stage::Novelty,
            )),
        };
        self.append(Some(genid), &body)?;
        self.ensure_tag(genid, commit)?;
        self.keep_as_checkout(&a.wt, commit);
        let _ = std::fs::remove_file(a.run_dir.join(super::repair::FORK_MARKER));
        let notes = proposal
            .notes
            .iter()
            .take(3)
            .map(|n| clip(n, 80))
            .collect::<Vec<_>>()
            .join("; ");
        self.say(format!(
            "gen {genid}: committed {changed} change(s) as gen/{genid}{}",
            if notes.is_empty() {
                String::new()
            } else {
                format!(" ({notes})")
            }
        ));
        Ok(commit)
    }

    /// Archive an early stop (with what the attempt spent) and discard its worktree.
    fn stop(&self, a: &Attempt, status: Status, stage: &str, reason: &str) -> Halt {
        self.stop_with(a, status, stage, reason, None)
    }

    /// Archive that the user stopped the attempt during `stage`, and stop the run.
    fn interrupt(&self, a: &Attempt, stage: &str, what: &str) -> Halt {
        match self.stop(a, Status::Cancelled, stage, "interrupted by the user") {
            Halt::Stopped => Halt::Run(super::progress::interrupted(what)),
            archive_failed => archive_failed,
        }
    }

    /// Archive the early stop of a candidate whose tree was snapshotted and then rejected
    /// (surface, operator edits, validate, novelty). The proposed tree is kept first, as a
    /// commit on `refs/evolve/proposed/<genid>` (never a tag: nothing selects, evaluates
    /// or verifies it), and the stop archives its tree id, so `evolve diff` and the viewer
    /// can show what was proposed beside why it was rejected.
    fn stop_proposed(
        &self,
        a: &Attempt,
        (status, stage, reason): (Status, &str, &str),
        tree: Oid,
    ) -> Halt {
        let message = format!(
            "evolve: proposed gen {} (parent {}), {status} at {stage}",
            a.genid, a.parent
        );
        let store = &self.ws.store;
        // Best effort: losing the proposal to look at must not lose the stop itself.
        let kept = store
            .commit(tree, Some(a.parent_commit), &message, false)
            .and_then(|c| store.set_evolve_ref(&layout::proposed_ref(&a.genid), c));
        let proposed = kept.is_ok().then(|| tree.to_string());
        self.stop_with(a, status, stage, reason, proposed)
    }

    fn stop_with(
        &self,
        a: &Attempt,
        status: Status,
        stage: &str,
        reason: &str,
        proposed_tree: Option<String>,
    ) -> Halt {
        let reason = clip(&self.redactor.redact(reason), 4000);
        // What the attempt's stages spent is charged even though it stopped early.
        let charge = a.meter.charge();
        // The operators (and scripts) that ran, up to the stage that stopped the child.
        let upto = crate::sandbox::parse_stage(stage).unwrap_or(Stage::Mutate);
        let body = StatusBody {
            proposed_tree,
            cost_usd: Some(charge.cost_usd),
            model_calls: charge.model_calls,
            operators: Some(super::stages::recorded_identities(&a.run_dir, upto)),
            ..StatusBody::new(status, Some(stage), &reason, Some(&a.parent))
        };
        if let Err(e) = self.append(Some(&a.genid), &body) {
            return Halt::Run(e);
        }
        self.retire(&a.wt);
        let _ = std::fs::remove_file(a.run_dir.join(super::repair::FORK_MARKER));
        self.say(format!("gen {}: {status} ({stage}): {reason}", a.genid));
        Halt::Stopped
    }

    pub(super) fn parent_view(&self, state: &State, parent: &str) -> Option<wit::ArchiveRow> {
        state
            .row(parent)
            .map(|r| row_view(r, state.eligible(parent), &self.redactor))
    }

    /// Fork the parent's certified commit into the child's worktree.
    fn fork(&self, genid: &str, parent: &str, state: &State) -> Result<Attempt> {
        let parent_commit = state
            .row(parent)
            .and_then(|r| r.evaluation.as_ref())
            .and_then(|e| e.candidate_commit())
            .and_then(|c| Oid::from_str(c).ok())
            .ok_or_else(|| RunError::new(format!("parent {parent} has no certified commit")))?;
        let a = Attempt {
            genid: genid.to_string(),
            parent: parent.to_string(),
            wt: self.ws.paths.worktree(genid),
            run_dir: self.ws.paths.run_dir(genid),
            parent_commit,
            meter: Meter::default(),
        };
        if let Some(p) = a.wt.parent() {
            std::fs::create_dir_all(p)
                .map_err(|e| RunError::new(format!("cannot create {}: {e}", p.display())))?;
        }
        self.check_out(parent_commit, &a.wt).map_err(|e| {
            RunError::new(format!(
                "cannot fork gen/{parent} into {}: {e}",
                a.wt.display()
            ))
        })?;
        super::stages::write_json(
            &a.run_dir.join(super::repair::FORK_MARKER),
            &json!({"parent": parent, "commit": parent_commit.to_string()}),
        );
        Ok(a)
    }

    /// What novelty sees: the child's changed paths and surface diff, and the diffs of
    /// the most recently kept children.
    pub(super) fn candidate_diff(
        &self,
        state: &State,
        parent_commit: Oid,
        tree: Oid,
        changed: &[String],
    ) -> Result<wit::CandidateDiff> {
        let parent_tree = self
            .ws
            .store
            .tree_of(parent_commit)
            .map_err(|e| RunError::new(e.to_string()))?;
        let surface = &self.surface;
        let patch = self
            .ws
            .store
            .unified_diff(
                parent_tree,
                tree,
                &|path: &str| surface.allows(path),
                256 << 10,
            )
            .unwrap_or_default();
        Ok(wit::CandidateDiff {
            changed_paths: changed.to_vec(),
            patch,
            // novelty/diff_similarity compares with up to 16 (its history_k maximum).
            recent_accepted: self.recent_accepted_diffs(state, 16),
        })
    }

    /// The certified archive as operators see it (select, reflect, gate, mutate).
    pub(super) fn operator_archive(&self, state: &State) -> wit::ArchiveView {
        view::archive_view(
            &state.rows,
            &state.eligibility,
            state.champion.as_ref(),
            &self.redactor,
        )
    }

    /// Assemble a read-only feedback bundle, `run_dir/<name>` (analyze's, without an
    /// analysis, or mutate's): the parent as operators see it, this generation's rollout
    /// and analysis evidence (their artifacts copied without following links) and the
    /// trajectories of the train trials rollout ran (`trajectories/`, see
    /// [`copy_trajectories`]). Train evidence only: nothing here names a gate or sealed
    /// task, nor holds a gate or sealed trial's trajectory.
    fn feedback_bundle(&self, run_dir: &Path, bundle: Bundle<'_>) -> Result<PathBuf> {
        let (name, parent, rollout, analysis) = bundle;
        let dir = run_dir.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| RunError::new(format!("cannot create {}: {e}", dir.display())))?;
        let write = |name: &str, v: &Value| {
            let text = self
                .redactor
                .redact(&serde_json::to_string_pretty(v).unwrap_or_default());
            std::fs::write(dir.join(name), text)
        };
        let mut ok = write("parent.json", &row_json(parent)).is_ok();
        for (stage, ev) in [("rollout", Some(rollout)), ("analyze", analysis)] {
            let Some(ev) = ev else { continue };
            let summary: Value = serde_json::from_str(&ev.summary).unwrap_or(Value::Null);
            ok &= write(
                &format!("{stage}.json"),
                &json!({"summary": summary, "artifacts": ev.artifacts}),
            )
            .is_ok();
            let _ = safe_tree::copy_files(
                &run_dir.join(stage).join("scratch"),
                &ev.artifacts,
                &dir.join(stage),
                TreeLimits::default(),
            );
        }
        copy_trajectories(&run_dir.join("rollout"), &dir);
        if !ok {
            return Err(RunError::new(format!(
                "cannot write the feedback bundle in {}",
                dir.display()
            )));
        }
        Ok(dir)
    }

    /// Unified diffs of the most recently kept children, newest first.
    fn recent_accepted_diffs(&self, state: &State, n: usize) -> Vec<String> {
        let surface = &self.surface;
        state
            .rows
            .iter()
            .rev()
            .filter(|r| r.genid != "0" && r.verdict.as_deref() == Some("keep"))
            .filter_map(|r| {
                let commit = Oid::from_str(r.commit.as_deref()?).ok()?;
                let parent = state
                    .row(r.parent.as_deref()?)?
                    .evaluation
                    .as_ref()?
                    .candidate_commit()?;
                let parent = Oid::from_str(parent).ok()?;
                let (a, b) = (
                    self.ws.store.tree_of(parent).ok()?,
                    self.ws.store.tree_of(commit).ok()?,
                );
                self.ws
                    .store
                    .unified_diff(a, b, &|p: &str| surface.allows(p), 64 << 10)
                    .ok()
            })
            .take(n)
            .collect()
    }
}

/// The directory of analyze's feedback bundle in a generation's run directory.
const ANALYZE_FEEDBACK: &str = "analyze-feedback";
/// The directory of mutate's feedback bundle in a generation's run directory.
const MUTATE_FEEDBACK: &str = "feedback";

/// What a feedback bundle is made of: its directory's name, the parent, the rollout
/// evidence and (mutate's only) the analysis.
type Bundle<'a> = (
    &'static str,
    &'a wit::ArchiveRow,
    &'a wit::Evidence,
    Option<&'a wit::Evidence>,
);

/// Copy the trajectories the `tasks` capability kept for the stage call in `stage_dir`
/// (its host-only copy, `train/trajectories/`: bounded, filtered, train trials only) into
/// the bundle's `trajectories/`, without following a link and within the budget the
/// backend wrote them under. Best effort: a bundle without them is still a bundle.
fn copy_trajectories(stage_dir: &Path, bundle: &Path) {
    use super::train::trajectories::{DIR, SCRATCH_BUDGET};
    let from = stage_dir.join("train").join(DIR);
    if !std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_dir()) {
        return;
    }
    let limits = TreeLimits {
        max_entries: 20_000,
        max_file_bytes: SCRATCH_BUDGET,
        max_total_bytes: 2 * SCRATCH_BUDGET,
        max_depth: 4,
    };
    let Ok(entries) = safe_tree::walk(&from, limits) else {
        return;
    };
    let files: Vec<String> = entries
        .into_iter()
        .filter(|e| matches!(e.kind, safe_tree::EntryKind::File { .. }))
        .map(|e| e.path)
        .collect();
    let _ = safe_tree::copy_files(&from, &files, &bundle.join(DIR), limits);
}
