//! One candidate transaction: fork the parent's certified commit → rollout → analyze* →
//! mutate → surface check on the actual tree diff → validate* → novelty* → commit and tag
//! `gen/<id>` → framework evaluation → gate → record → reflect*. Every early stop is a
//! typed, archived attempt.

use super::evaluate::{EvalError, EvalRequest};
use super::train::TrainTasks;
use super::view::{self, row_json, row_view};
use super::{Driver, Result, RunError, State, certified_attempts, fmt_score};
use crate::model::MeteredModel;
use crate::safe_tree::{self, TreeLimits};
use crate::sandbox::types::{self as wit, Stage};
use crate::sandbox::{Capabilities, NoModel, StageInput, StageOutput};
use crate::workspace::layout;
use evolve_archive::body::{self, GateBody, GenerationBody, PlaybookBody, RecordBody, RepairBody};
use evolve_archive::{Status, StatusBody};
use evolve_snapshot::{Change, ChangeKind, Limits as SnapshotLimits, Oid};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

fn changed_paths(changes: &[Change]) -> Vec<String> {
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
    wt: PathBuf,
    run_dir: PathBuf,
    meter: Meter,
}

/// What one child's stage calls spent through host capabilities (train trials the
/// agent reported, model calls metered by the host), charged to the generation.
#[derive(Default)]
pub(crate) struct Meter {
    tasks: std::sync::Mutex<Vec<Arc<TrainTasks>>>,
    models: std::sync::Mutex<Vec<Arc<MeteredModel>>>,
}

impl Meter {
    /// Capabilities with the model (metered against what is left of the budget) and
    /// train trials of the candidate in `checkout`.
    fn tasks(&self, d: &Driver, checkout: &Path, stage_dir: &Path) -> Capabilities {
        let t = Arc::new(TrainTasks::new(
            &d.ws,
            d.engine.clone(),
            checkout,
            stage_dir.join("train"),
        ));
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(t.clone());
        Capabilities {
            model: self.model_backend(d, stage_dir),
            tasks: t,
        }
    }

    /// Capabilities of a stage that imports only `model`.
    fn model(&self, d: &Driver, stage_dir: &Path) -> Capabilities {
        Capabilities {
            model: self.model_backend(d, stage_dir),
            tasks: Arc::new(crate::sandbox::NoTasks),
        }
    }

    fn model_backend(&self, d: &Driver, stage_dir: &Path) -> Arc<dyn crate::sandbox::ModelBackend> {
        let Some(client) = &d.model else {
            return Arc::new(NoModel);
        };
        let left = d.ws.recipe.experiment.budget_usd - d.spent() - self.spent();
        let scope = Arc::new(client.scope(left.max(0.0), stage_dir.join("model")));
        self.models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(scope.clone());
        scope
    }

    /// What the stages' train trials spent.
    fn tasks_spent(&self) -> f64 {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|t| t.spent_usd())
            .sum()
    }

    pub(crate) fn spent(&self) -> f64 {
        let tasks = self.tasks_spent();
        let models: f64 = self
            .models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|m| m.spent_usd())
            .sum();
        tasks + models
    }

    /// What the stages spent, for the archive event that charges it.
    pub(crate) fn charge(&self) -> Charge {
        let mut bill = crate::model::Bill::default();
        for m in self.models.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            bill.add(m.bill());
        }
        Charge {
            cost_usd: self.tasks_spent() + bill.usd,
            model_calls: bill.listed_calls(),
        }
    }

    /// [`Meter::charge`], unless the stages spent nothing and made no priced call.
    fn charged(&self) -> Option<Charge> {
        let charge = self.charge();
        (charge.cost_usd > 0.0 || charge.model_calls.is_some()).then_some(charge)
    }
}

/// What an archive event charges for a child's stage calls: its `cost_usd`, and the
/// ledger ids of the model calls that includes (`model::ledger`: a call the archive lists
/// is never charged again; one it does not list is charged when the next run opens).
pub(crate) struct Charge {
    pub(crate) cost_usd: f64,
    pub(crate) model_calls: Option<Vec<String>>,
}

impl Driver {
    /// Archive an early stop and discard the child's worktree.
    /// Archive an early stop (with what the attempt spent) and discard its worktree.
    fn stop(&self, a: &Attempt, status: Status, stage: &str, reason: &str) -> Result<()> {
        self.stop_with(a, status, stage, reason, None)
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
        parent_commit: Oid,
        tree: Oid,
    ) -> Result<()> {
        let message = format!(
            "evolve: proposed gen {} (parent {}), {status} at {stage}",
            a.genid, a.parent
        );
        let store = &self.ws.store;
        // Best effort: losing the proposal to look at must not lose the stop itself.
        let kept = store
            .commit(tree, Some(parent_commit), &message, false)
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
    ) -> Result<()> {
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
        self.append(Some(&a.genid), &body)?;
        self.retire(&a.wt);
        let _ = std::fs::remove_file(a.run_dir.join(super::repair::FORK_MARKER));
        self.say(format!("gen {}: {status} ({stage}): {reason}", a.genid));
        Ok(())
    }

    /// Call a stage on the child's fork. `None` means it failed and the attempt was
    /// closed as `operator_failed`.
    async fn fork_stage(
        &self,
        a: &Attempt,
        stage: Stage,
        feedback: Option<&Path>,
        input: StageInput,
        record: Value,
    ) -> Result<Option<StageOutput>> {
        let name = crate::sandbox::stage_name(stage);
        let dir = a.run_dir.join(name);
        let caps = match stage {
            Stage::Analyze => a.meter.model(self, &dir),
            Stage::Rollout | Stage::Mutate | Stage::Validate => a.meter.tasks(self, &a.wt, &dir),
            _ => Capabilities::default(),
        };
        match self
            .stages
            .call(stage, &a.wt, &dir, feedback, caps, input, record)
            .await
        {
            Ok(out) => Ok(Some(out)),
            Err(_) if self.cancel().is_cancelled() => {
                self.stop(a, Status::Cancelled, name, "interrupted by the user")?;
                Err(super::progress::interrupted(&format!(
                    "{name} of gen {} ended `cancelled`",
                    a.genid
                )))
            }
            Err(f) => self
                .stop(a, Status::OperatorFailed, name, &f.message)
                .map(|_| None),
        }
    }

    fn parent_view(&self, state: &State, parent: &str) -> Option<wit::ArchiveRow> {
        state
            .row(parent)
            .map(|r| row_view(r, state.eligible(parent), &self.redactor))
    }

    /// Fork the parent's certified commit into the child's worktree.
    fn fork(&self, genid: &str, parent: &str, state: &State) -> Result<(Attempt, Oid)> {
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
        Ok((a, parent_commit))
    }

    /// Run a fresh child of `parent` as `genid`.
    pub(crate) async fn run_child(&self, genid: &str, parent: String) -> Result<()> {
        let state = self.state();
        let parent_view = self
            .parent_view(&state, &parent)
            .ok_or_else(|| RunError::new(format!("parent {parent} has no archive row")))?;
        let (a, parent_commit) = self.fork(genid, &parent, &state)?;
        self.say(format!(
            "gen {genid}: forked gen/{parent} (score {})",
            fmt_score(parent_view.score)
        ));
        let p = Some(parent.as_str());
        let wrong = |stage: &str| format!("{stage} returned a result of another stage's kind");

        // Rollout and analyze run the parent's operators on the fork.
        let input = StageInput::Rollout {
            ctx: self.stages.context(Stage::Rollout, genid, p),
            parent: parent_view.clone(),
        };
        let record = json!({"parent": row_json(&parent_view)});
        let rollout = match self
            .fork_stage(&a, Stage::Rollout, None, input, record)
            .await?
        {
            None => return Ok(()),
            Some(StageOutput::Evidence(e)) => e,
            Some(_) => return self.stop(&a, Status::OperatorFailed, "rollout", &wrong("rollout")),
        };
        let analysis = if self.stages.enabled(Stage::Analyze) {
            let input = StageInput::Analyze {
                ctx: self.stages.context(Stage::Analyze, genid, p),
                rollout: rollout.clone(),
            };
            let record =
                json!({"rollout": {"summary": rollout.summary, "artifacts": rollout.artifacts}});
            match self
                .fork_stage(&a, Stage::Analyze, None, input, record)
                .await?
            {
                None => return Ok(()),
                Some(StageOutput::Evidence(e)) => Some(e),
                Some(_) => {
                    return self.stop(&a, Status::OperatorFailed, "analyze", &wrong("analyze"));
                }
            }
        } else {
            None
        };

        // Mutate edits the fork, with a train-only feedback bundle.
        let feedback =
            self.feedback_bundle(&a.run_dir, &parent_view, &rollout, analysis.as_ref())?;
        let surface = &self.ws.recipe.surface;
        let observation = wit::Observation {
            rollout: Some(rollout.clone()),
            analysis: analysis.clone(),
            feedback_dir: Some("/feedback".into()),
            surface: wit::Surface {
                includes: surface.include.clone(),
                excludes: surface.exclude.clone(),
            },
            archive: Some(self.operator_archive(&state)),
        };
        let input = StageInput::Mutate {
            ctx: self.stages.context(Stage::Mutate, genid, p),
            observation,
        };
        let record = json!({"feedback": "feedback/", "surface": {"include": surface.include, "exclude": surface.exclude}});
        let proposal = match self
            .fork_stage(&a, Stage::Mutate, Some(&feedback), input, record)
            .await?
        {
            None => return Ok(()),
            Some(StageOutput::Proposal(p)) => p,
            Some(_) => return self.stop(&a, Status::OperatorFailed, "mutate", &wrong("mutate")),
        };

        // The surface check uses the actual tree, never the operator's claim.
        let snap = match self.ws.store.snapshot(
            &a.wt,
            Some(parent_commit),
            &SnapshotLimits::default(),
            &layout::skip_top_level,
        ) {
            Ok(s) => s,
            Err(e) => {
                let why = format!("the mutated tree cannot be snapshotted: {e}");
                return self.stop(&a, Status::InvalidProposal, "mutate", &why);
            }
        };
        if snap.changes.is_empty() {
            return self.stop(&a, Status::NoProposal, "mutate", "no changes to commit");
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
            return self.stop_proposed(
                &a,
                (Status::InvalidProposal, "surface", why.as_str()),
                parent_commit,
                snap.tree,
            );
        }
        // An edited operator must still serve its stage before the tree can become a
        // parent: one that does not would fail every generation descending from it
        // (`stages/edits.rs`).
        let defects = self.stages.check_operator_edits(&a.wt, &snap.changes).await;
        if self.cancel().is_cancelled() {
            self.stop(&a, Status::Cancelled, "surface", "interrupted by the user")?;
            return Err(super::progress::interrupted(&format!(
                "the operator check of gen {genid} ended `cancelled`"
            )));
        }
        if !defects.is_empty() {
            let list: Vec<String> = defects.iter().take(20).map(ToString::to_string).collect();
            let why = format!(
                "{} edited operator(s) cannot serve their stage: {}",
                defects.len(),
                list.join("; ")
            );
            return self.stop_proposed(
                &a,
                (Status::InvalidProposal, "surface", why.as_str()),
                parent_commit,
                snap.tree,
            );
        }
        let changed = changed_paths(&snap.changes);

        // Validate and novelty run the parent's operators on the mutated tree.
        if self.stages.enabled(Stage::Validate) {
            let input = StageInput::Validate {
                ctx: self.stages.context(Stage::Validate, genid, p),
                changed: changed.clone(),
                rollout: Some(rollout.clone()),
            };
            match self
                .fork_stage(
                    &a,
                    Stage::Validate,
                    None,
                    input,
                    json!({"changed": changed}),
                )
                .await?
            {
                None => return Ok(()),
                Some(StageOutput::Validation(v)) if v.accept => {}
                Some(StageOutput::Validation(v)) => {
                    let why = format!("candidate validation rejected: {}", v.reason);
                    return self.stop_proposed(
                        &a,
                        (Status::RejectedValidation, "validate", why.as_str()),
                        parent_commit,
                        snap.tree,
                    );
                }
                Some(_) => {
                    return self.stop(&a, Status::OperatorFailed, "validate", &wrong("validate"));
                }
            }
        }
        if self.stages.enabled(Stage::Novelty) {
            let diff = self.candidate_diff(&state, parent_commit, snap.tree, &changed)?;
            let input = StageInput::Novelty {
                ctx: self.stages.context(Stage::Novelty, genid, p),
                diff,
            };
            match self
                .fork_stage(&a, Stage::Novelty, None, input, json!({"changed": changed}))
                .await?
            {
                None => return Ok(()),
                Some(StageOutput::Novelty(n)) if n.accept => {}
                Some(StageOutput::Novelty(n)) => {
                    let why = format!(
                        "novelty {:.3}: a near-duplicate of an accepted edit, or no edit",
                        n.novelty
                    );
                    return self.stop_proposed(
                        &a,
                        (Status::RejectedDuplicate, "novelty", why.as_str()),
                        parent_commit,
                        snap.tree,
                    );
                }
                Some(_) => {
                    return self.stop(&a, Status::OperatorFailed, "novelty", &wrong("novelty"));
                }
            }
        }

        // Commit the reviewed tree, archive it, then tag it (a tag never precedes its row).
        let commit = self
            .ws
            .store
            .commit(
                snap.tree,
                Some(parent_commit),
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
            parent: Some(parent.clone()),
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
            "gen {genid}: committed {} change(s) as gen/{genid}{}",
            changed.len(),
            if notes.is_empty() {
                String::new()
            } else {
                format!(" ({notes})")
            }
        ));
        self.finish(genid, Some(parent), commit).await
    }

    /// What novelty sees: the child's changed paths and surface diff, and the diffs of
    /// the most recently kept children.
    fn candidate_diff(
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
            recent_accepted: self.recent_accepted_diffs(state, 5),
        })
    }

    /// The certified archive as operators see it (select, reflect, gate, mutate).
    fn operator_archive(&self, state: &State) -> wit::ArchiveView {
        view::archive_view(
            &state.rows,
            &state.eligibility,
            state.champion.as_ref(),
            &self.redactor,
        )
    }

    /// A committed child's change against its parent's certified commit, as novelty
    /// sees it (gate and record get it); `None` when either commit cannot be read.
    fn committed_diff(
        &self,
        state: &State,
        parent: Option<&str>,
        commit: Oid,
    ) -> Option<wit::CandidateDiff> {
        let parent_commit = state
            .row(parent?)?
            .evaluation
            .as_ref()?
            .candidate_commit()?;
        let parent_commit = Oid::from_str(parent_commit).ok()?;
        let changes = self.ws.store.diff(parent_commit, commit).ok()?;
        let tree = self.ws.store.tree_of(commit).ok()?;
        self.candidate_diff(state, parent_commit, tree, &changed_paths(&changes))
            .ok()
    }

    /// Create `gen/<genid>` if it does not exist yet.
    fn ensure_tag(&self, genid: &str, commit: Oid) -> Result<()> {
        let name = layout::tag_name(genid);
        match self.ws.store.tag_target(&name) {
            Ok(Some(_)) => Ok(()),
            _ => self
                .ws
                .store
                .tag(&name, commit)
                .map_err(|e| RunError::new(format!("cannot tag {name}: {e}"))),
        }
    }

    /// Resume an interrupted transaction.
    pub(crate) async fn resume(&self, genid: &str, step: Step) -> Result<()> {
        self.say(format!("gen {genid}: resuming at {step}"));
        match step {
            Step::Evaluate { commit, parent } => {
                self.ensure_tag(genid, commit)?;
                self.finish(genid, parent, commit).await
            }
            Step::Gate { commit, parent } => {
                self.gate_record_reflect(genid, parent.as_deref(), commit)
                    .await
            }
            Step::Record { commit, parent } => {
                self.record(genid, parent.as_deref(), commit).await?;
                self.reflect(genid, parent.as_deref()).await
            }
        }
    }

    /// Evaluate a committed child, then gate, record and reflect.
    pub(crate) async fn finish(
        &self,
        genid: &str,
        parent: Option<String>,
        commit: Oid,
    ) -> Result<()> {
        let state = self.state();
        let attempts = state
            .row(genid)
            .map(|r| certified_attempts(r, "candidate"))
            .unwrap_or_default();
        let req = EvalRequest {
            genid: genid.to_string(),
            parent: parent.clone(),
            commit,
            purpose: "candidate",
            split: self.ws.primary_split(),
            certified_attempts: attempts,
        };
        let ev = match self.evaluate_observed(&req).await? {
            Ok(ev) => ev,
            Err(e @ EvalError::EvaluatorChanged { .. }) => {
                let reason = e.to_string();
                let body = StatusBody::new(
                    Status::InvalidProposal,
                    Some("evaluate"),
                    &reason,
                    parent.as_deref(),
                );
                self.append(Some(genid), &body)?;
                self.say(format!("gen {genid}: invalid_proposal: {reason}"));
                return Ok(());
            }
            Err(EvalError::Host(m)) => {
                return Err(RunError::new(format!(
                    "evaluation of gen/{genid} failed in the host: {m}"
                )));
            }
        };
        self.append_evaluation(genid, &ev)?;
        self.say(format!(
            "gen {genid}: evaluated: {} score {}",
            ev.outcome,
            fmt_score(ev.score)
        ));
        if ev.outcome != "benchmark_complete" {
            return Ok(());
        }
        self.gate_record_reflect(genid, parent.as_deref(), commit)
            .await
    }

    async fn gate_record_reflect(
        &self,
        genid: &str,
        parent: Option<&str>,
        commit: Oid,
    ) -> Result<()> {
        if self.gate(genid, parent, commit).await? {
            self.record(genid, parent, commit).await?;
            self.reflect(genid, parent).await?;
        }
        // Gate and record were the last readers of a discarded child's checkout; a kept
        // one stays for select (loaded from the champion's commit).
        if self.state().row(genid).and_then(|r| r.verdict.as_deref()) == Some("discard") {
            self.drop_commit_checkout(commit);
        }
        Ok(())
    }

    /// The gate, loaded from the child's own commit. Returns whether it decided.
    async fn gate(&self, genid: &str, parent: Option<&str>, commit: Oid) -> Result<bool> {
        let state = self.state();
        let child = state
            .row(genid)
            .map(|r| row_view(r, false, &self.redactor))
            .ok_or_else(|| RunError::new(format!("gen {genid} has no archive row")))?;
        let parent_view = parent.and_then(|p| self.parent_view(&state, p));
        let checkout = self.commit_checkout(commit)?;
        let ctx = self.stages.context(Stage::Gate, genid, parent);
        let record =
            json!({"child": row_json(&child), "parent": parent_view.as_ref().map(row_json)});
        let out = self
            .stages
            .call(
                Stage::Gate,
                &checkout,
                &self.ws.paths.run_dir(genid).join("gate"),
                None,
                Default::default(),
                StageInput::Gate {
                    ctx,
                    child,
                    parent: parent_view,
                    archive: self.operator_archive(&state),
                    diff: self.committed_diff(&state, parent, commit),
                },
                record,
            )
            .await;
        match out {
            Ok(StageOutput::Gate(d)) => {
                let verdict = if d.verdict == wit::Verdict::Keep {
                    "keep"
                } else {
                    "discard"
                };
                let gate_dir = self.ws.paths.run_dir(genid).join("gate");
                let body = GateBody {
                    verdict: Some(verdict.to_string()),
                    reason: Some(clip(&self.redactor.redact(&d.reason), 2000)),
                    operator: super::stages::recorded_identity(&gate_dir),
                    cost_usd: None,
                };
                self.append(Some(genid), &body)?;
                self.say(format!("gen {genid}: gate {verdict}: {}", d.reason));
                Ok(true)
            }
            Ok(_) => {
                let body = StatusBody::new(
                    Status::OperatorFailed,
                    Some("gate"),
                    "gate returned something other than a decision",
                    parent,
                );
                self.append(Some(genid), &body)?;
                Ok(false)
            }
            Err(_) if self.cancel().is_cancelled() => {
                Err(self.cancelled(&[genid.to_string()], "gate", parent))
            }
            Err(f) => {
                let reason = clip(&self.redactor.redact(&f.message), 4000);
                let body = StatusBody::new(Status::OperatorFailed, Some("gate"), &reason, parent);
                self.append(Some(genid), &body)?;
                self.say(format!("gen {genid}: gate failed: {reason}"));
                Ok(false)
            }
        }
    }

    /// Record, loaded from the child's commit; its annotations pass the allowlist. It
    /// runs at most once: success or failure, exactly one `record` event is written.
    async fn record(&self, genid: &str, parent: Option<&str>, commit: Oid) -> Result<()> {
        let state = self.state();
        let Some(row) = state.row(genid) else {
            return Ok(());
        };
        if row.recorded {
            return Ok(());
        }
        let child = row_view(row, state.eligible(genid), &self.redactor);
        let checkout = self.commit_checkout(commit)?;
        let ctx = self.stages.context(Stage::Record, genid, parent);
        let out = self
            .stages
            .call(
                Stage::Record,
                &checkout,
                &self.ws.paths.run_dir(genid).join("record"),
                None,
                Default::default(),
                StageInput::Record {
                    ctx,
                    child: child.clone(),
                    diff: self.committed_diff(&state, parent, commit),
                },
                json!({"child": row_json(&child)}),
            )
            .await;
        if out.is_err() && self.cancel().is_cancelled() {
            // No record event: record still runs (once) when the run resumes.
            return Err(self.cancelled(&[genid.to_string()], "record", parent));
        }
        let failed = |error: String| RecordBody {
            annotations: Some(Map::new()),
            error: Some(error),
            ..RecordBody::default()
        };
        let body = match out {
            Ok(StageOutput::Annotations(map)) => {
                let (kept, dropped): (Vec<_>, Vec<_>) = map
                    .into_iter()
                    .partition(|(k, _)| evolve_archive::annotation_allowed(k));
                RecordBody {
                    annotations: Some(kept.into_iter().collect()),
                    dropped: (!dropped.is_empty())
                        .then(|| dropped.into_iter().map(|(k, _)| k).collect()),
                    ..RecordBody::default()
                }
            }
            Ok(_) => failed("record returned something other than annotations".into()),
            Err(f) => failed(clip(&self.redactor.redact(&f.message), 2000)),
        };
        self.append(Some(genid), &body)
    }

    /// Archive what a stage that ends with no event of its own spent, as a `repair`
    /// note, unless it spent nothing.
    fn archive_spend(&self, genid: &str, stage: &str, meter: &Meter) -> Result<()> {
        let Some(charge) = meter.charged() else {
            return Ok(());
        };
        let body = RepairBody {
            what: format!("what {stage} spent"),
            stage: Some(stage.to_string()),
            cost_usd: Some(charge.cost_usd),
            model_calls: charge.model_calls,
            ..RepairBody::default()
        };
        self.append(Some(genid), &body)
    }

    /// Reflect, loaded from the workspace head (`gen/0`'s commit: the branch never moves
    /// for children) in its shared read-only checkout; best effort (a failure is logged
    /// only).
    async fn reflect(&self, genid: &str, parent: Option<&str>) -> Result<()> {
        if !self.stages.enabled(Stage::Reflect) {
            return Ok(());
        }
        let state = self.state();
        let archive = view::archive_view(
            &state.rows,
            &state.eligibility,
            state.champion.as_ref(),
            &self.redactor,
        );
        let playbook = playbook_entries(&state);
        // Entries archived before the caps existed could add up past what reflect may be
        // handed: skip the call rather than hand it an oversized playbook.
        if let Err(why) = crate::sandbox::check_playbook_size(&playbook) {
            self.say(format!("gen {genid}: reflect skipped: {why}"));
            return Ok(());
        }
        let ctx = self.stages.context(Stage::Reflect, genid, parent);
        let root = self.commit_checkout(self.ws.genesis)?;
        let meter = Meter::default();
        let reflect_dir = self.ws.paths.run_dir(genid).join("reflect");
        let out = self
            .stages
            .call(
                Stage::Reflect,
                &root,
                &reflect_dir,
                None,
                meter.model(self, &reflect_dir),
                StageInput::Reflect {
                    ctx,
                    archive,
                    playbook,
                },
                json!({"playbook_entries": state.playbook.len()}),
            )
            .await;
        if !matches!(out, Ok(StageOutput::Playbook(_))) {
            // No playbook event to carry what reflect's model calls cost.
            self.archive_spend(genid, "reflect", &meter)?;
        }
        match out {
            Ok(out @ StageOutput::Playbook(_)) => {
                let charge = meter.charged();
                let body = PlaybookBody {
                    ops: out.to_json(),
                    cost_usd: charge.as_ref().map(|c| c.cost_usd),
                    model_calls: charge.and_then(|c| c.model_calls),
                };
                self.append(Some(genid), &body)
            }
            Ok(_) => Ok(()),
            // Reflect is best effort and not retried: nothing to archive.
            Err(_) if self.cancel().is_cancelled() => Err(super::progress::interrupted(&format!(
                "reflect of gen {genid} was cancelled (best effort: it is not retried)"
            ))),
            Err(f) => {
                self.say(format!(
                    "gen {genid}: reflect failed (ignored): {}",
                    f.message
                ));
                Ok(())
            }
        }
    }

    /// Assemble mutate's read-only feedback bundle: the parent as operators see it and
    /// this generation's rollout and analysis evidence (their artifacts copied without
    /// following links). Train evidence only: nothing here names a gate or sealed task.
    fn feedback_bundle(
        &self,
        run_dir: &Path,
        parent: &wit::ArchiveRow,
        rollout: &wit::Evidence,
        analysis: Option<&wit::Evidence>,
    ) -> Result<PathBuf> {
        let dir = run_dir.join("feedback");
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

/// The playbook reflect maintains: every `add` of earlier playbook events, in order.
fn playbook_entries(state: &State) -> Vec<wit::PlaybookEntry> {
    state
        .playbook
        .iter()
        .filter(|op| op.get("op").and_then(Value::as_str) == Some("add"))
        .map(|op| wit::PlaybookEntry {
            id: op
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            text: op
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            data: op
                .get("data")
                .map(|d| d.to_string())
                .unwrap_or_else(|| "{}".into()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use evolve_archive::{EventBody, RepairBody, StatusBody};

    #[test]
    fn bodies_list_model_calls_under_the_ledgers_key() {
        // The ledger finds what the archive charged by this key, whatever the event.
        let key = crate::model::ledger::MODEL_CALLS_KEY;
        let calls = Some(vec!["call-1".to_string()]);
        let repair = RepairBody {
            model_calls: calls.clone(),
            ..RepairBody::default()
        };
        let status = StatusBody {
            model_calls: calls,
            ..StatusBody::default()
        };
        assert!(repair.to_map().contains_key(key));
        assert!(status.to_map().contains_key(key));
    }
}
