//! A committed child to its end: the framework's evaluation, then gate and record
//! (loaded from the child's commit) and reflect (from the workspace head); and resuming a
//! transaction that an interrupted run left after its commit.

use super::child::{Step, changed_paths, clip};
use super::evaluate::{EvalError, EvalRequest};
use super::spend::Meter;
use super::stages::At;
use super::view::{self, row_view};
use super::{Driver, Result, RunError, State, certified_attempts, fmt_score};
use crate::layout;
use crate::sandbox::StageOutput;
use crate::sandbox::types::{self as wit, Stage};
use evolve_archive::body::{GateBody, PlaybookBody, RecordBody, RepairBody};
use evolve_archive::{Status, StatusBody};
use evolve_snapshot::Oid;
use serde_json::{Map, Value};
use std::path::Path;

impl Driver {
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
    pub(super) fn ensure_tag(&self, genid: &str, commit: Oid) -> Result<()> {
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

    /// Where a stage of the committed child runs: on `checkout`, with its run directory
    /// under the generation's, granted no host capability unless the caller adds one.
    fn on_commit<'a>(
        &self,
        genid: &'a str,
        parent: Option<&'a str>,
        checkout: &'a Path,
        stage: &str,
    ) -> At<'a> {
        At {
            genid,
            parent,
            checkout,
            run_dir: self.ws.paths.run_dir(genid).join(stage),
            capabilities: Default::default(),
        }
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
        let at = self.on_commit(genid, parent, &checkout, "gate");
        let (archive, diff) = (
            self.operator_archive(&state),
            self.committed_diff(&state, parent, commit),
        );
        let out = self
            .stages
            .gate(at, child, parent_view, archive, diff)
            .await;
        match out {
            Ok(d) => {
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
        let at = self.on_commit(genid, parent, &checkout, "record");
        let diff = self.committed_diff(&state, parent, commit);
        let out = self.stages.record(at, child, diff).await;
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
            Ok(map) => {
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
        let root = self.commit_checkout(self.ws.genesis)?;
        let meter = Meter::default();
        let mut at = self.on_commit(genid, parent, &root, "reflect");
        at.capabilities = meter.model(self, &at.run_dir);
        let out = self
            .stages
            .reflect(at, archive, playbook, state.playbook.len())
            .await;
        if out.is_err() {
            // No playbook event to carry what reflect's model calls cost.
            self.archive_spend(genid, "reflect", &meter)?;
        }
        match out {
            Ok(ops) => {
                let charge = meter.charged();
                let body = PlaybookBody {
                    ops: StageOutput::Playbook(ops).to_json(),
                    cost_usd: charge.as_ref().map(|c| c.cost_usd),
                    model_calls: charge.and_then(|c| c.model_calls),
                };
                self.append(Some(genid), &body)
            }
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
