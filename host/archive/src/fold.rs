//! Folding events into one row per genid.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::event::{
    FRAMEWORK_FIELDS, STAMPED_FIELDS, TERMINAL_STATUSES, check_genid, check_stamp, types,
};
use crate::verify::LoggedEvent;

/// Annotation keys a record event may set (besides any `x_`-prefixed key).
pub const ANNOTATION_ALLOWLIST: [&str; 3] = ["note", "predicted_fixes", "verified_fixes"];

/// Prefix of free-form annotation keys.
pub const ANNOTATION_PREFIX: &str = "x_";

/// Whether a record annotation key passes the allowlist. A stamped or framework field never
/// does, whatever the allowlist says.
pub fn annotation_allowed(key: &str) -> bool {
    let listed = ANNOTATION_ALLOWLIST.contains(&key)
        || (key.len() > ANNOTATION_PREFIX.len()
            && key.len() <= 64
            && key.starts_with(ANNOTATION_PREFIX)
            && key.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'));
    listed && !STAMPED_FIELDS.contains(&key) && !FRAMEWORK_FIELDS.contains(&key)
}

/// One certified evaluation: its stamped fields only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub seq: u64,
    /// 1-based archive line.
    pub line: u64,
    /// Exactly the [`STAMPED_FIELDS`] present in the event body.
    pub stamp: Map<String, Value>,
    /// Free-text `reason` of the event body, if any.
    pub reason: Option<String>,
    /// Problems with the stamp (see [`check_stamp`]); empty when valid.
    pub problems: Vec<String>,
}

impl Evaluation {
    fn str(&self, k: &str) -> Option<&str> {
        self.stamp.get(k).and_then(Value::as_str)
    }
    pub fn purpose(&self) -> Option<&str> {
        self.str("purpose")
    }
    pub fn outcome(&self) -> Option<&str> {
        self.str("outcome")
    }
    pub fn candidate_commit(&self) -> Option<&str> {
        self.str("candidate_commit")
    }
    /// The score, if it is a JSON number (may be non-finite only in theory: JSON has no NaN).
    pub fn score(&self) -> Option<f64> {
        self.stamp
            .get("score")
            .filter(|v| v.is_number())
            .and_then(Value::as_f64)
    }
    pub fn cost_usd(&self) -> f64 {
        self.stamp
            .get("cost_usd")
            .and_then(Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0)
            .unwrap_or(0.0)
    }
}

/// The folded state of one genid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub genid: String,
    /// Seq of the first certified event naming this genid.
    pub first_seq: u64,
    pub parent: Option<String>,
    /// `commit` of the generation event, if any.
    pub commit: Option<String>,
    /// The last certified evaluation of the row's primary purpose (`candidate` or `genesis`).
    pub evaluation: Option<Evaluation>,
    /// Sealed-split (`anchor`) evaluations: never the primary score.
    pub anchors: Vec<Evaluation>,
    /// Evaluations of another primary purpose than the row's first one.
    pub other_evaluations: Vec<Evaluation>,
    /// `keep` or `discard` once gated.
    pub verdict: Option<String>,
    pub gate_reason: Option<String>,
    /// A primary evaluation arrived and no gate event since.
    pub pending_gate: bool,
    /// Last terminal status (an evaluation sets its outcome; a status event sets its status).
    pub status: Option<String>,
    pub failure_stage: Option<String>,
    pub reason: Option<String>,
    /// Allowlisted annotations of record events (last writer wins per key).
    pub annotations: Map<String, Value>,
    /// Annotation keys refused by the allowlist.
    pub dropped_annotations: Vec<String>,
    /// A record event was appended.
    pub recorded: bool,
    /// Number of rows naming this one as parent.
    pub children: u32,
    /// Σ `cost_usd` of the row's certified events (evaluations, operator spend).
    pub cost_usd: f64,
    /// Archive lines naming this genid that are not certified (ignored by the fold).
    pub uncertified_lines: Vec<u64>,
}

impl Row {
    fn new(genid: &str, first_seq: u64) -> Row {
        Row {
            genid: genid.to_string(),
            first_seq,
            parent: None,
            commit: None,
            evaluation: None,
            anchors: Vec::new(),
            other_evaluations: Vec::new(),
            verdict: None,
            gate_reason: None,
            pending_gate: false,
            status: None,
            failure_stage: None,
            reason: None,
            annotations: Map::new(),
            dropped_annotations: Vec::new(),
            recorded: false,
            children: 0,
            cost_usd: 0.0,
            uncertified_lines: Vec::new(),
        }
    }

    /// The primary score, if any.
    pub fn score(&self) -> Option<f64> {
        self.evaluation.as_ref().and_then(Evaluation::score)
    }
}

fn str_field(body: &Map<String, Value>, k: &str) -> Option<String> {
    body.get(k).and_then(Value::as_str).map(str::to_string)
}

/// Fold events into rows, one per genid in first-appearance order. Only certified events
/// change a row; an uncertified line naming a genid is listed in its `uncertified_lines`
/// (which makes the row ineligible as a parent).
pub fn fold(events: &[LoggedEvent]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for le in events {
        let ev = &le.event;
        let Some(genid) = ev.genid.as_deref() else {
            continue;
        };
        let i = *index.entry(genid.to_string()).or_insert_with(|| {
            rows.push(Row::new(genid, ev.seq));
            rows.len() - 1
        });
        let row = &mut rows[i];
        if !le.certified {
            row.uncertified_lines.push(le.line);
            continue;
        }
        let body = &ev.body;
        if ev.event_type != types::EVALUATION
            && let Some(c) = body
                .get("cost_usd")
                .filter(|v| v.is_number())
                .and_then(Value::as_f64)
                .filter(|c| c.is_finite() && *c >= 0.0)
        {
            row.cost_usd += c;
        }
        match ev.event_type.as_str() {
            types::GENERATION => {
                if let Some(p) = str_field(body, "parent").filter(|p| check_genid(p).is_ok()) {
                    row.parent = Some(p);
                }
                if let Some(c) = str_field(body, "commit") {
                    row.commit = Some(c);
                }
            }
            types::EVALUATION => {
                let stamp: Map<String, Value> = body
                    .iter()
                    .filter(|(k, _)| STAMPED_FIELDS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let evaluation = Evaluation {
                    seq: ev.seq,
                    line: le.line,
                    problems: check_stamp(Some(genid), body),
                    reason: str_field(body, "reason"),
                    stamp,
                };
                row.cost_usd += evaluation.cost_usd();
                let purpose = evaluation.purpose().unwrap_or("");
                let primary = row
                    .evaluation
                    .as_ref()
                    .and_then(|e| e.purpose().map(str::to_string));
                if purpose == "anchor" {
                    row.anchors.push(evaluation);
                } else if matches!(purpose, "candidate" | "genesis")
                    && primary.as_deref().is_none_or(|p| p == purpose)
                {
                    if let Some(p) = str_field(body, "parent").filter(|p| check_genid(p).is_ok()) {
                        row.parent = Some(p);
                    }
                    row.status = evaluation.outcome().map(str::to_string);
                    row.reason = evaluation.reason.clone();
                    row.failure_stage = None;
                    row.verdict = None;
                    row.gate_reason = None;
                    row.pending_gate = true;
                    row.evaluation = Some(evaluation);
                } else {
                    row.other_evaluations.push(evaluation);
                }
            }
            types::GATE => {
                if let Some(v) =
                    str_field(body, "verdict").filter(|v| v == "keep" || v == "discard")
                {
                    row.verdict = Some(v);
                    row.gate_reason = str_field(body, "reason");
                    row.pending_gate = false;
                }
            }
            types::STATUS => {
                if let Some(s) =
                    str_field(body, "status").filter(|s| TERMINAL_STATUSES.contains(&s.as_str()))
                {
                    row.status = Some(s);
                    row.failure_stage = str_field(body, "failure_stage");
                    row.reason = str_field(body, "reason");
                }
            }
            types::RECORD => {
                row.recorded = true;
                if let Some(ann) = body.get("annotations").and_then(Value::as_object) {
                    for (k, v) in ann {
                        if annotation_allowed(k) {
                            row.annotations.insert(k.clone(), v.clone());
                        } else if !row.dropped_annotations.contains(k) {
                            row.dropped_annotations.push(k.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let parents: Vec<Option<usize>> = rows
        .iter()
        .map(|r| r.parent.as_ref().and_then(|p| index.get(p).copied()))
        .collect();
    for p in parents.into_iter().flatten() {
        rows[p].children += 1;
    }
    rows
}

/// Σ `cost_usd` over all certified events (rows and events without a genid): the spend ledger.
pub fn total_cost_usd(events: &[LoggedEvent]) -> f64 {
    events
        .iter()
        .filter(|e| e.certified)
        .filter_map(|e| {
            e.event
                .body
                .get("cost_usd")
                .filter(|v| v.is_number())
                .and_then(Value::as_f64)
        })
        .filter(|c| c.is_finite() && *c >= 0.0)
        .sum()
}
