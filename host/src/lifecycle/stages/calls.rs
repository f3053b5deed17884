//! One typed method per stage: the stage's input built from host types, the record its
//! run directory keeps as the input (the host's view of it), and a result of the stage's
//! own kind. A result of another kind is the operator's failure, made here once for
//! every stage, so each caller handles one [`StageFailure`] whatever went wrong.

use super::{StageFailure, Stages};
use crate::lifecycle::view::row_json;
use crate::sandbox::types::{
    ArchiveRow, ArchiveView, CandidateDiff, Evidence, GateDecision, NoveltyVerdict, Observation,
    PlaybookEntry, PlaybookOp, Proposal, Stage, Validation,
};
use crate::sandbox::{Capabilities, StageInput, StageOutput};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// Where one stage call runs, and what it is granted besides its checkout and scratch.
pub struct At<'a> {
    /// The generation the call is for (select's: the generation number), and its parent.
    pub genid: &'a str,
    pub parent: Option<&'a str>,
    /// The checkout the operator is loaded from and granted as `/target`.
    pub checkout: &'a Path,
    /// Where the call's input, result and logs are kept (made fresh for the call).
    pub run_dir: PathBuf,
    pub capabilities: Capabilities,
}

/// The failure of a call whose operator returned a result of another kind than its
/// stage's. `message` is the reason archived for it (each stage's words, kept as they
/// were when every caller wrote its own).
fn other_kind(stage: Stage, message: String) -> StageFailure {
    StageFailure {
        stage,
        message,
        kind: "malformed_result",
    }
}

/// The words for a result of another kind on a child's fork (rollout to novelty).
fn another_stages_kind(stage: Stage) -> StageFailure {
    let name = crate::sandbox::stage_name(stage);
    other_kind(
        stage,
        format!("{name} returned a result of another stage's kind"),
    )
}

impl Stages {
    /// Select: parent genids from the archive as operators see it; `from` names the
    /// commit whose select this is (`gen/<id>`), for the run directory's record.
    pub async fn select(
        &self,
        at: At<'_>,
        archive: ArchiveView,
        from: &str,
    ) -> Result<Vec<String>, StageFailure> {
        let rows: Vec<Value> = archive.rows.iter().map(row_json).collect();
        let record = json!({"operator_from": from, "archive": rows, "champion": archive.champion});
        let ctx = self.context(Stage::Select, at.genid, at.parent);
        let input = StageInput::Select { ctx, archive };
        match self.call(Stage::Select, at, None, input, record).await? {
            StageOutput::Parents(p) => Ok(p),
            _ => Err(other_kind(
                Stage::Select,
                "the operator returned something other than parents".into(),
            )),
        }
    }

    /// Rollout: train evidence of the parent, run on the child's fork.
    pub async fn rollout(&self, at: At<'_>, parent: ArchiveRow) -> Result<Evidence, StageFailure> {
        let record = json!({"parent": row_json(&parent)});
        let ctx = self.context(Stage::Rollout, at.genid, at.parent);
        let input = StageInput::Rollout { ctx, parent };
        match self.call(Stage::Rollout, at, None, input, record).await? {
            StageOutput::Evidence(e) => Ok(e),
            _ => Err(another_stages_kind(Stage::Rollout)),
        }
    }

    /// Analyze: evidence drawn from rollout's, granted the train feedback bundle at
    /// `feedback` (rollout's evidence and train trajectories) read-only.
    pub async fn analyze(
        &self,
        at: At<'_>,
        rollout: &Evidence,
        feedback: &Path,
    ) -> Result<Evidence, StageFailure> {
        let record = json!({
            "rollout": {"summary": rollout.summary, "artifacts": rollout.artifacts},
            // The bundle's directory in the run directory (`analyze-feedback/`).
            "feedback": format!("{}/", feedback.file_name().unwrap_or_default().to_string_lossy()),
        });
        let ctx = self.context(Stage::Analyze, at.genid, at.parent);
        let input = StageInput::Analyze {
            ctx,
            rollout: rollout.clone(),
        };
        match self
            .call(Stage::Analyze, at, Some(feedback), input, record)
            .await?
        {
            StageOutput::Evidence(e) => Ok(e),
            _ => Err(another_stages_kind(Stage::Analyze)),
        }
    }

    /// Mutate: edits the fork, granted the feedback bundle at `feedback` read-only.
    pub async fn mutate(
        &self,
        at: At<'_>,
        feedback: &Path,
        observation: Observation,
    ) -> Result<Proposal, StageFailure> {
        let surface = &observation.surface;
        let record = json!({"feedback": "feedback/", "surface": {"include": surface.includes, "exclude": surface.excludes}});
        let ctx = self.context(Stage::Mutate, at.genid, at.parent);
        let input = StageInput::Mutate { ctx, observation };
        match self
            .call(Stage::Mutate, at, Some(feedback), input, record)
            .await?
        {
            StageOutput::Proposal(p) => Ok(p),
            _ => Err(another_stages_kind(Stage::Mutate)),
        }
    }

    /// Validate: accepts or rejects the mutated tree, given the paths that changed.
    pub async fn validate(
        &self,
        at: At<'_>,
        changed: &[String],
        rollout: &Evidence,
    ) -> Result<Validation, StageFailure> {
        let record = json!({"changed": changed});
        let ctx = self.context(Stage::Validate, at.genid, at.parent);
        let input = StageInput::Validate {
            ctx,
            changed: changed.to_vec(),
            rollout: Some(rollout.clone()),
        };
        match self.call(Stage::Validate, at, None, input, record).await? {
            StageOutput::Validation(v) => Ok(v),
            _ => Err(another_stages_kind(Stage::Validate)),
        }
    }

    /// Novelty: how new the child's diff is against recently kept ones.
    pub async fn novelty(
        &self,
        at: At<'_>,
        diff: CandidateDiff,
    ) -> Result<NoveltyVerdict, StageFailure> {
        let record = json!({"changed": diff.changed_paths});
        let ctx = self.context(Stage::Novelty, at.genid, at.parent);
        let input = StageInput::Novelty { ctx, diff };
        match self.call(Stage::Novelty, at, None, input, record).await? {
            StageOutput::Novelty(n) => Ok(n),
            _ => Err(another_stages_kind(Stage::Novelty)),
        }
    }

    /// Gate: keep or discard the evaluated child.
    pub async fn gate(
        &self,
        at: At<'_>,
        child: ArchiveRow,
        parent: Option<ArchiveRow>,
        archive: ArchiveView,
        diff: Option<CandidateDiff>,
    ) -> Result<GateDecision, StageFailure> {
        let record = json!({"child": row_json(&child), "parent": parent.as_ref().map(row_json)});
        let ctx = self.context(Stage::Gate, at.genid, at.parent);
        let input = StageInput::Gate {
            ctx,
            child,
            parent,
            archive,
            diff,
        };
        match self.call(Stage::Gate, at, None, input, record).await? {
            StageOutput::Gate(d) => Ok(d),
            _ => Err(other_kind(
                Stage::Gate,
                "gate returned something other than a decision".into(),
            )),
        }
    }

    /// Record: annotations of the gated child (the caller applies the allowlist).
    pub async fn record(
        &self,
        at: At<'_>,
        child: ArchiveRow,
        diff: Option<CandidateDiff>,
    ) -> Result<Map<String, Value>, StageFailure> {
        let record = json!({"child": row_json(&child)});
        let ctx = self.context(Stage::Record, at.genid, at.parent);
        let input = StageInput::Record { ctx, child, diff };
        match self.call(Stage::Record, at, None, input, record).await? {
            StageOutput::Annotations(a) => Ok(a),
            _ => Err(other_kind(
                Stage::Record,
                "record returned something other than annotations".into(),
            )),
        }
    }

    /// Reflect: operations on the playbook. `archived_ops` is how many playbook
    /// operations the archive holds (the run directory's record of the input).
    pub async fn reflect(
        &self,
        at: At<'_>,
        archive: ArchiveView,
        playbook: Vec<PlaybookEntry>,
        archived_ops: usize,
    ) -> Result<Vec<PlaybookOp>, StageFailure> {
        let record = json!({"playbook_entries": archived_ops});
        let ctx = self.context(Stage::Reflect, at.genid, at.parent);
        let input = StageInput::Reflect {
            ctx,
            archive,
            playbook,
        };
        match self.call(Stage::Reflect, at, None, input, record).await? {
            StageOutput::Playbook(ops) => Ok(ops),
            _ => Err(other_kind(
                Stage::Reflect,
                "reflect returned something other than playbook operations".into(),
            )),
        }
    }
}
