//! The run's fixed points: gen/0's evaluation on the primary split (with its baseline
//! verdict) and on the sealed split, the champion's sealed anchor after the last
//! generation, and `evolve retry` of a failed evaluation.

use super::evaluate::EvalRequest;
use super::{Driver, Result, RunError, fmt_score};
use evaluator_harbor::split::SplitName;
use evolve_archive::{GateBody, Row};
use evolve_snapshot::Oid;
use serde_json::Value;

impl Driver {
    /// Evaluate `gen/0` on the primary split (and give it the baseline gate verdict), then
    /// on the sealed split as a non-selectable anchor.
    pub(super) async fn ensure_genesis(&self) -> Result<()> {
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
    pub(super) async fn final_anchor(&self) -> Result<()> {
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
        // The variables the trials are passed must be set before anything is tried.
        self.ws.engine.trial_settings()?;
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
}

pub(super) fn has_complete_anchor(row: &Row) -> bool {
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

pub(super) fn anchor_attempts(row: &Row) -> Vec<u64> {
    row.anchors.iter().filter_map(attempt_of).collect()
}
