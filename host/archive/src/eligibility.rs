//! Parent eligibility and the champion.

use std::fmt;

use serde::Serialize;
use serde_json::{Value, json};

use crate::event::{GENESIS_GENID, LoggedEvent, types};
use crate::fold::{Evaluation, Row};

pub use crate::body::FixedIdentity;

impl FixedIdentity {
    fn get(&self, field: &str) -> &str {
        match field {
            "evaluator_fingerprint" => &self.evaluator_fingerprint,
            "task_set_hash" => &self.task_set_hash,
            _ => &self.runtime_fingerprint,
        }
    }

    /// From a certified evaluation's stamp (the three fields as non-empty strings).
    pub fn from_evaluation(ev: &Evaluation) -> Option<FixedIdentity> {
        let s = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(str::to_string);
        Some(FixedIdentity {
            evaluator_fingerprint: s(ev.evaluator_fingerprint())?,
            task_set_hash: s(ev.task_set_hash())?,
            runtime_fingerprint: s(ev.runtime_fingerprint())?,
        })
    }
}

/// Generation zero's fixed identity: the certified genesis event's `fixed_identity` object if
/// present, else the stamp of row `0`'s certified genesis evaluation.
pub fn fixed_identity(events: &[LoggedEvent], rows: &[Row]) -> Option<FixedIdentity> {
    let from_genesis = events
        .first()
        .filter(|e| e.certified && e.event.seq == 0 && e.event.event_type == types::GENESIS)
        .and_then(|e| e.event.body.get("fixed_identity"))
        .and_then(FixedIdentity::from_value);
    from_genesis.or_else(|| identity_of_row0(rows))
}

/// The identity stamped by row `0`'s certified genesis evaluation.
pub(crate) fn identity_of_row0(rows: &[Row]) -> Option<FixedIdentity> {
    let row0 = rows.iter().find(|r| r.genid == GENESIS_GENID)?;
    let ev = row0
        .evaluation
        .as_ref()
        .filter(|e| e.purpose() == Some("genesis"))?;
    FixedIdentity::from_evaluation(ev)
}

/// Why a row is not an eligible parent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Ineligible {
    /// Lines naming the row failed verification (forged, edited, moved or unsigned).
    UncertifiedLines {
        lines: Vec<u64>,
    },
    /// No certified evaluation of purpose candidate or genesis.
    NoEvaluation,
    InvalidStamp {
        problems: Vec<String>,
    },
    Incomplete {
        outcome: Option<String>,
    },
    Purpose {
        purpose: Option<String>,
    },
    PendingGate,
    NotKept {
        verdict: Option<String>,
    },
    NoFixedIdentity,
    IdentityMismatch {
        field: String,
        expected: String,
        found: Option<String>,
    },
    NonFiniteScore,
    TagMissing,
    TagMoved {
        recorded: String,
        found: String,
    },
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ineligible::UncertifiedLines { lines } => {
                write!(f, "archive lines {lines:?} naming it failed verification")
            }
            Ineligible::NoEvaluation => write!(f, "no certified candidate or genesis evaluation"),
            Ineligible::InvalidStamp { problems } => {
                write!(f, "invalid stamped fields: {}", problems.join("; "))
            }
            Ineligible::Incomplete { outcome } => write!(
                f,
                "evaluation outcome is {}, not benchmark_complete",
                outcome.as_deref().unwrap_or("missing")
            ),
            Ineligible::Purpose { purpose } => write!(
                f,
                "evaluation purpose is {}, not candidate or genesis",
                purpose.as_deref().unwrap_or("missing")
            ),
            Ineligible::PendingGate => write!(f, "pending gate"),
            Ineligible::NotKept { verdict } => write!(
                f,
                "gate verdict is {}, not keep",
                verdict.as_deref().unwrap_or("missing")
            ),
            Ineligible::NoFixedIdentity => write!(f, "generation zero's fixed identity is unknown"),
            Ineligible::IdentityMismatch {
                field,
                expected,
                found,
            } => {
                write!(
                    f,
                    "{field} is {} but generation zero's is {expected}",
                    found.as_deref().unwrap_or("missing")
                )
            }
            Ineligible::NonFiniteScore => write!(f, "score is not a finite number"),
            Ineligible::TagMissing => write!(f, "its gen/<genid> tag does not exist"),
            Ineligible::TagMoved { recorded, found } => write!(
                f,
                "its tag names {found}, not the certified commit {recorded}"
            ),
        }
    }
}

/// A row's eligibility as a parent: eligible iff `reasons` is empty.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Eligibility {
    pub genid: String,
    pub eligible: bool,
    pub reasons: Vec<Ineligible>,
}

/// Every reason `row` is not an eligible parent (empty: eligible). The predicate: certified
/// lines only; a certified evaluation of purpose candidate or genesis with valid stamps and
/// outcome benchmark_complete; gated `keep` and not pending gate; the fixed identity of
/// generation zero (evaluator fingerprint, task-set hash, runtime fingerprint); a finite
/// score; and `tag_lookup(genid)` (the commit `gen/<genid>` names) equal to the certified
/// candidate commit.
pub fn ineligibility(
    row: &Row,
    identity: Option<&FixedIdentity>,
    tag_lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<Ineligible> {
    let mut r = Vec::new();
    if !row.uncertified_lines.is_empty() {
        r.push(Ineligible::UncertifiedLines {
            lines: row.uncertified_lines.clone(),
        });
    }
    let Some(ev) = &row.evaluation else {
        r.push(Ineligible::NoEvaluation);
        return r;
    };
    if !ev.problems.is_empty() {
        r.push(Ineligible::InvalidStamp {
            problems: ev.problems.clone(),
        });
    }
    if ev.outcome() != Some("benchmark_complete") {
        r.push(Ineligible::Incomplete {
            outcome: ev.outcome().map(str::to_string),
        });
    }
    if !matches!(ev.purpose(), Some("candidate" | "genesis")) {
        r.push(Ineligible::Purpose {
            purpose: ev.purpose().map(str::to_string),
        });
    }
    if row.pending_gate {
        r.push(Ineligible::PendingGate);
    } else if row.verdict.as_deref() != Some("keep") {
        r.push(Ineligible::NotKept {
            verdict: row.verdict.clone(),
        });
    }
    match identity {
        None => r.push(Ineligible::NoFixedIdentity),
        Some(id) => {
            for field in FixedIdentity::FIELDS {
                let found = ev.identity_field(field);
                if found != Some(id.get(field)) {
                    r.push(Ineligible::IdentityMismatch {
                        field: field.to_string(),
                        expected: id.get(field).to_string(),
                        found: found.map(str::to_string),
                    });
                }
            }
        }
    }
    if !ev.score().is_some_and(f64::is_finite) {
        r.push(Ineligible::NonFiniteScore);
    }
    match (ev.candidate_commit(), tag_lookup(&row.genid)) {
        (_, None) => r.push(Ineligible::TagMissing),
        (Some(c), Some(t)) if c == t => {}
        (c, Some(t)) => r.push(Ineligible::TagMoved {
            recorded: c.unwrap_or("").to_string(),
            found: t,
        }),
    }
    r
}

/// Eligibility of every row, in row order.
pub fn eligibility(
    rows: &[Row],
    identity: Option<&FixedIdentity>,
    tag_lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<Eligibility> {
    rows.iter()
        .map(|row| {
            let reasons = ineligibility(row, identity, tag_lookup);
            Eligibility {
                genid: row.genid.clone(),
                eligible: reasons.is_empty(),
                reasons,
            }
        })
        .collect()
}

/// The rows that are eligible parents, in archive order.
pub fn valid_parents<'a>(rows: &'a [Row], eligibility: &[Eligibility]) -> Vec<&'a Row> {
    if rows.len() == eligibility.len() {
        return rows
            .iter()
            .zip(eligibility)
            .filter(|(r, e)| e.eligible && e.genid == r.genid)
            .map(|(r, _)| r)
            .collect();
    }
    rows.iter()
        .filter(|r| eligibility.iter().any(|e| e.eligible && e.genid == r.genid))
        .collect()
}

/// The champion: the eligible row with the highest score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Champion {
    pub genid: String,
    pub score: f64,
}

impl Champion {
    /// The champion cache document: `{"genid": …, "score": …}`; `null` for no champion.
    pub fn cache_value(champion: Option<&Champion>) -> Value {
        champion.map_or(
            Value::Null,
            |c| json!({ "genid": c.genid, "score": c.score }),
        )
    }
}

/// The highest eligible score; on a tie, the first row in archive order.
pub fn champion(rows: &[Row], eligibility: &[Eligibility]) -> Option<Champion> {
    let mut best: Option<Champion> = None;
    for row in valid_parents(rows, eligibility) {
        let Some(score) = row.score().filter(|s| s.is_finite()) else {
            continue;
        };
        if best.as_ref().is_none_or(|b| score > b.score) {
            best = Some(Champion {
                genid: row.genid.clone(),
                score,
            });
        }
    }
    best
}
