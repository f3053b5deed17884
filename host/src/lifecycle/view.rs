//! What operators may know of the archive: folded rows reduced to the WIT `archive-row`,
//! with every task outside the train split renamed to an opaque `private-<n>` key.
//!
//! This is the only place archive rows become operator input, so the redaction rule
//! lives here once: a gate or sealed task name never leaves the host through a row.

use crate::sandbox::types::{
    ArchiveRow, ArchiveView, GenerationStatus, TaskScore, Trial, TrialStatus, Verdict,
};
use evaluator_harbor::split::FrozenTaskSet;
use evolve_archive::{Champion, Eligibility, Row, canonical_bytes};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Maps task names to what operators may see.
#[derive(Debug, Clone)]
pub struct Redactor {
    train: std::collections::BTreeSet<String>,
    private: BTreeMap<String, String>,
}

impl Redactor {
    /// Train tasks keep their names; every other task of the set gets `private-<n>`, numbered
    /// from 1 in name order (stable for the whole experiment).
    pub fn new(task_set: &FrozenTaskSet) -> Redactor {
        let train: std::collections::BTreeSet<String> =
            task_set.split.train.iter().cloned().collect();
        let private = task_set
            .task_digests
            .keys()
            .filter(|n| !train.contains(*n))
            .enumerate()
            .map(|(i, n)| (n.clone(), format!("private-{}", i + 1)))
            .collect();
        Redactor { train, private }
    }

    /// The name an operator may see for `task`.
    pub fn key(&self, task: &str) -> String {
        if self.train.contains(task) {
            return task.to_string();
        }
        self.private
            .get(task)
            .cloned()
            .unwrap_or_else(|| "private-unknown".to_string())
    }

    /// Replace every private task name in `text` by its key (longest names first, so a
    /// name that contains another is replaced whole).
    pub fn redact(&self, text: &str) -> String {
        let mut names: Vec<(&String, &String)> = self.private.iter().collect();
        names.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
        let mut out = text.to_string();
        for (name, key) in names {
            if !name.is_empty() && out.contains(name.as_str()) {
                out = out.replace(name.as_str(), key);
            }
        }
        out
    }

    /// The private task names (for tests and audits).
    pub fn private_names(&self) -> impl Iterator<Item = &String> {
        self.private.keys()
    }
}

fn trial_status(s: &str) -> TrialStatus {
    match s {
        "benchmark_complete" => TrialStatus::BenchmarkComplete,
        "candidate_invalid" => TrialStatus::CandidateInvalid,
        "timeout" => TrialStatus::Timeout,
        "cancelled" => TrialStatus::Cancelled,
        _ => TrialStatus::InfrastructureFailed,
    }
}

fn generation_status(row: &Row) -> GenerationStatus {
    if row.pending_gate && row.status.as_deref() == Some("benchmark_complete") {
        return GenerationStatus::PendingGate;
    }
    match row.status.as_deref() {
        Some("benchmark_complete") => GenerationStatus::Complete,
        Some("no_proposal") => GenerationStatus::NoProposal,
        Some("invalid_proposal") => GenerationStatus::InvalidProposal,
        Some("rejected_validation") => GenerationStatus::RejectedValidation,
        Some("rejected_duplicate") => GenerationStatus::RejectedDuplicate,
        Some("operator_failed") => GenerationStatus::OperatorFailed,
        Some("candidate_invalid") => GenerationStatus::CandidateInvalid,
        Some("timeout") => GenerationStatus::Timeout,
        Some("cancelled") => GenerationStatus::Cancelled,
        Some("budget_exhausted") => GenerationStatus::BudgetExhausted,
        // Committed but not evaluated yet, or an infrastructure failure.
        _ => GenerationStatus::InfrastructureFailed,
    }
}

/// The per-task results of a row's primary evaluation, redacted.
fn task_vector(row: &Row, redactor: &Redactor) -> Vec<TaskScore> {
    let Some(tasks) = row
        .evaluation
        .as_ref()
        .and_then(|e| e.stamp.get("task_vector"))
        .and_then(|v| v.get("tasks"))
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    let mut out: Vec<TaskScore> = tasks
        .iter()
        .map(|(name, t)| TaskScore {
            task: redactor.key(name),
            trials: t
                .get("trials")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|tr| Trial {
                    repetition: tr.get("trial").and_then(Value::as_u64).unwrap_or(0) as u32,
                    status: trial_status(tr.get("status").and_then(Value::as_str).unwrap_or("")),
                    reward: tr
                        .get("reward")
                        .and_then(Value::as_f64)
                        .filter(|r| r.is_finite()),
                })
                .collect(),
        })
        .collect();
    out.sort_by(|a, b| a.task.cmp(&b.task));
    out
}

/// One folded row as an operator sees it.
pub fn row_view(row: &Row, eligible: bool, redactor: &Redactor) -> ArchiveRow {
    let complete = row.status.as_deref() == Some("benchmark_complete");
    ArchiveRow {
        generation_id: row.genid.clone(),
        parent: row.parent.clone(),
        generation: evolve_archive::event::genid_generation(&row.genid).unwrap_or(0) as u32,
        status: generation_status(row),
        score: row.score().filter(|s| complete && s.is_finite()),
        eligible,
        verdict: row.verdict.as_deref().map(|v| {
            if v == "keep" {
                Verdict::Keep
            } else {
                Verdict::Discard
            }
        }),
        children: row.children,
        task_vector: task_vector(row, redactor),
        cost_usd: if row.cost_usd.is_finite() {
            row.cost_usd
        } else {
            0.0
        },
        annotations: String::from_utf8(canonical_bytes(&Value::Object(row.annotations.clone())))
            .unwrap_or_else(|_| "{}".into()),
    }
}

/// The archive as select and reflect see it.
pub fn archive_view(
    rows: &[Row],
    eligibility: &[Eligibility],
    champion: Option<&Champion>,
    redactor: &Redactor,
) -> ArchiveView {
    ArchiveView {
        rows: rows
            .iter()
            .map(|r| {
                let ok = eligibility.iter().any(|e| e.genid == r.genid && e.eligible);
                row_view(r, ok, redactor)
            })
            .collect(),
        champion: champion.map(|c| c.genid.clone()),
    }
}

/// A row view as JSON (stage input records, feedback bundles).
pub fn row_json(r: &ArchiveRow) -> Value {
    let mut m = Map::new();
    m.insert("generation_id".into(), r.generation_id.clone().into());
    m.insert(
        "parent".into(),
        r.parent.clone().map_or(Value::Null, Value::from),
    );
    m.insert("generation".into(), r.generation.into());
    m.insert("status".into(), format!("{:?}", r.status).into());
    m.insert("score".into(), r.score.map_or(Value::Null, Value::from));
    m.insert("eligible".into(), r.eligible.into());
    m.insert(
        "verdict".into(),
        r.verdict
            .map_or(Value::Null, |v| format!("{v:?}").to_lowercase().into()),
    );
    m.insert("children".into(), r.children.into());
    m.insert(
        "task_vector".into(),
        r.task_vector
            .iter()
            .map(|t| {
                serde_json::json!({"task": t.task, "trials": t.trials.iter().map(|tr| serde_json::json!({
                    "repetition": tr.repetition, "status": format!("{:?}", tr.status), "reward": tr.reward,
                })).collect::<Vec<_>>()})
            })
            .collect(),
    );
    m.insert("cost_usd".into(), r.cost_usd.into());
    m.insert(
        "annotations".into(),
        serde_json::from_str(&r.annotations).unwrap_or(Value::Null),
    );
    Value::Object(m)
}
