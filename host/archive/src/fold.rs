//! Folding events into one row per genid.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::body::{Body, Evaluated, FixedIdentity, Line, StampFacts, type_name};
use crate::chain::Checked;
use crate::event::{Event, FRAMEWORK_FIELDS, LoggedEvent, STAMPED_FIELDS, check_genid, types};

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

/// Where a stamp's map comes from when first read.
pub(crate) enum StampSource {
    /// Already a map.
    Map(Map<String, Value>),
    /// The body of an archive line (`buf[range]`, a line this crate has already checked):
    /// parsed and filtered on first access.
    Line(Arc<Vec<u8>>, Range<usize>),
}

struct StampInner {
    quick: StampFacts,
    source: StampSource,
    map: OnceLock<Map<String, Value>>,
}

/// The stamped fields of a certified evaluation: exactly the [`STAMPED_FIELDS`] present in the
/// event body, in body order.
///
/// Reads like a `Map<String, Value>` (it dereferences to one). Cloning is cheap (shared), and
/// the writer's [`Archive`](crate::Archive) keeps a reference to the archive line and builds
/// the map only when someone reads it; the fields the fold, eligibility and the champion need
/// are extracted when the stamp is created ([`Evaluation::purpose`] and friends).
#[derive(Clone)]
pub struct Stamp(Arc<StampInner>);

impl Stamp {
    fn from_parts(
        quick: StampFacts,
        source: StampSource,
        map: OnceLock<Map<String, Value>>,
    ) -> Stamp {
        Stamp(Arc::new(StampInner { quick, source, map }))
    }

    /// The stamped fields of an event body.
    pub fn from_body(body: &Map<String, Value>) -> Stamp {
        Stamp::stamped_fields(body).into()
    }

    fn stamped_fields(body: &Map<String, Value>) -> Map<String, Value> {
        body.iter()
            .filter(|(k, _)| STAMPED_FIELDS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// The map (built now if it was not yet).
    pub fn map(&self) -> &Map<String, Value> {
        self.0.map.get_or_init(|| match &self.0.source {
            StampSource::Map(m) => m.clone(),
            StampSource::Line(buf, range) => {
                // The line passed the reader already, so it reads; an empty map is only a
                // defensive answer, never a panic.
                Event::from_line(&buf[range.clone()])
                    .map(|e| Stamp::stamped_fields(&e.body))
                    .unwrap_or_default()
            }
        })
    }

    /// Whether the map has been built.
    pub fn is_materialized(&self) -> bool {
        self.0.map.get().is_some()
    }

    fn quick(&self) -> &StampFacts {
        &self.0.quick
    }
}

impl From<Map<String, Value>> for Stamp {
    fn from(map: Map<String, Value>) -> Stamp {
        let quick = Evaluated::of_map(None, &map).facts;
        Stamp::from_parts(quick, StampSource::Map(Map::new()), OnceLock::from(map))
    }
}

impl std::ops::Deref for Stamp {
    type Target = Map<String, Value>;
    fn deref(&self) -> &Map<String, Value> {
        self.map()
    }
}

impl<'a> IntoIterator for &'a Stamp {
    type Item = (&'a String, &'a Value);
    type IntoIter = serde_json::map::Iter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.map().iter()
    }
}

impl PartialEq for Stamp {
    fn eq(&self, other: &Stamp) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.map() == other.map()
    }
}

impl PartialEq<Map<String, Value>> for Stamp {
    fn eq(&self, other: &Map<String, Value>) -> bool {
        self.map() == other
    }
}

impl fmt::Debug for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.map().fmt(f)
    }
}

impl Serialize for Stamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map().serialize(s)
    }
}

/// One certified evaluation: its stamped fields only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evaluation {
    pub seq: u64,
    /// 1-based archive line.
    pub line: u64,
    /// Exactly the [`STAMPED_FIELDS`] present in the event body.
    pub stamp: Stamp,
    /// Free-text `reason` of the event body, if any.
    pub reason: Option<String>,
    /// Problems with the stamp (see [`check_stamp`](crate::body::check_stamp)); empty when valid.
    pub problems: Vec<String>,
}

impl Evaluation {
    pub fn purpose(&self) -> Option<&str> {
        self.stamp.quick().purpose.as_deref()
    }
    pub fn outcome(&self) -> Option<&str> {
        self.stamp.quick().outcome.as_deref()
    }
    pub fn candidate_commit(&self) -> Option<&str> {
        self.stamp.quick().candidate_commit.as_deref()
    }
    pub fn evaluator_fingerprint(&self) -> Option<&str> {
        self.stamp.quick().evaluator_fingerprint.as_deref()
    }
    pub fn task_set_hash(&self) -> Option<&str> {
        self.stamp.quick().task_set_hash.as_deref()
    }
    pub fn runtime_fingerprint(&self) -> Option<&str> {
        self.stamp.quick().runtime_fingerprint.as_deref()
    }
    /// A fixed-identity field (`evaluator_fingerprint`, `task_set_hash`,
    /// `runtime_fingerprint`) as a string, if it is one.
    pub fn identity_field(&self, field: &str) -> Option<&str> {
        match field {
            "evaluator_fingerprint" => self.evaluator_fingerprint(),
            "task_set_hash" => self.task_set_hash(),
            "runtime_fingerprint" => self.runtime_fingerprint(),
            _ => self.stamp.get(field).and_then(Value::as_str),
        }
    }
    /// The score, if it is a JSON number (may be non-finite only in theory: JSON has no NaN).
    pub fn score(&self) -> Option<f64> {
        self.stamp.quick().score
    }
    pub fn cost_usd(&self) -> f64 {
        self.stamp
            .quick()
            .cost_usd
            .filter(|c| c.is_finite() && *c >= 0.0)
            .unwrap_or(0.0)
    }
}

/// The folded state of one genid.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub genid: String,
    /// Seq of the first event naming this genid.
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
    /// A certified generation event was appended.
    pub generated: bool,
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
            generated: false,
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

    /// The status a reader is shown: the archived status, except `pending_gate` for an
    /// evaluated row the gate has not decided yet, `committed` for a committed row with
    /// neither, and `pending` before that.
    pub fn display_status(&self) -> String {
        if self.pending_gate && self.status.as_deref() == Some("benchmark_complete") {
            return "pending_gate".into();
        }
        match (
            self.status.as_deref(),
            self.evaluation.is_some(),
            self.commit.is_some(),
        ) {
            (Some(s), _, _) => s.to_string(),
            (None, false, true) => "committed".into(),
            _ => "pending".into(),
        }
    }

    /// A `cancelled` status says only that the user stopped the run during a stage of this
    /// attempt; the attempt's next certified step (its resume) supersedes it, and the row
    /// reads as it did before the cancellation.
    pub(crate) fn supersede_cancelled(&mut self) {
        if self.status.as_deref() != Some(CANCELLED) {
            return;
        }
        self.status = self
            .evaluation
            .as_ref()
            .and_then(Evaluation::outcome)
            .map(str::to_string);
        self.reason = self.evaluation.as_ref().and_then(|e| e.reason.clone());
        self.failure_stage = None;
    }
}

/// The status of a stage the user stopped; resumable (see [`Row::supersede_cancelled`]).
pub const CANCELLED: &str = "cancelled";

/// Where an event comes from, as the fold needs it besides its body.
pub(crate) struct At<'a> {
    pub(crate) seq: u64,
    /// 1-based archive line.
    pub(crate) line: u64,
    pub(crate) certified: bool,
    pub(crate) event_type: &'a str,
    pub(crate) genid: Option<&'a str>,
}

/// The fold, one event at a time: the rows so far, kept current by [`Folder::apply`] (the
/// writer's [`Archive`](crate::Archive) keeps one, so that its rows never need refolding).
#[derive(Debug, Clone, Default)]
pub(crate) struct Folder {
    rows: Vec<Row>,
    index: HashMap<String, usize>,
    /// Rows naming a parent that has no row yet, by that parent's genid.
    waiting_children: HashMap<String, u32>,
}

impl Folder {
    pub(crate) fn rows(&self) -> &[Row] {
        &self.rows
    }

    pub(crate) fn into_rows(self) -> Vec<Row> {
        self.rows
    }

    fn set_parent(&mut self, i: usize, parent: &str) {
        if self.rows[i].parent.as_deref() == Some(parent) {
            return;
        }
        if let Some(old) = self.rows[i].parent.take() {
            match self.index.get(&old) {
                Some(&o) => self.rows[o].children -= 1,
                None => {
                    if let Some(n) = self.waiting_children.get_mut(&old) {
                        *n -= 1;
                        if *n == 0 {
                            self.waiting_children.remove(&old);
                        }
                    }
                }
            }
        }
        match self.index.get(parent) {
            Some(&p) => self.rows[p].children += 1,
            None => *self.waiting_children.entry(parent.to_string()).or_default() += 1,
        }
        self.rows[i].parent = Some(parent.to_string());
    }

    /// Set the parent a body names, if it is a genid.
    fn set_named_parent(&mut self, i: usize, parent: Option<&str>) {
        if let Some(p) = parent.filter(|p| check_genid(p).is_ok()) {
            self.set_parent(i, p);
        }
    }

    /// The index of the genid's row, made now if it has none.
    fn row_index(&mut self, genid: &str, seq: u64) -> usize {
        if let Some(&i) = self.index.get(genid) {
            return i;
        }
        let mut row = Row::new(genid, seq);
        row.children = self.waiting_children.remove(genid).unwrap_or(0);
        self.rows.push(row);
        self.index.insert(genid.to_string(), self.rows.len() - 1);
        self.rows.len() - 1
    }

    /// Fold one event in (events must come in archive order). `stamp` says where an
    /// evaluation's stamp map is read from when someone asks for it.
    pub(crate) fn apply(&mut self, at: At<'_>, body: Body, stamp: impl FnOnce() -> StampSource) {
        let Some(genid) = at.genid else {
            return;
        };
        let i = self.row_index(genid, at.seq);
        if !at.certified {
            self.rows[i].uncertified_lines.push(at.line);
            return;
        }
        if at.event_type != types::EVALUATION
            && let Some(c) = body.cost_usd()
        {
            self.rows[i].cost_usd += c;
        }
        if matches!(
            at.event_type,
            types::GENERATION | types::EVALUATION | types::GATE | types::RECORD
        ) {
            self.rows[i].supersede_cancelled();
        }
        match body {
            Body::Generation(g) => {
                self.rows[i].generated = true;
                self.set_named_parent(i, g.parent.as_deref());
                if let Some(c) = g.commit {
                    self.rows[i].commit = Some(c);
                }
            }
            Body::Evaluation(e) => self.apply_evaluation(i, &at, *e, stamp()),
            Body::Gate(g) => {
                if let Some(v) = g.verdict() {
                    let row = &mut self.rows[i];
                    row.verdict = Some(v.to_string());
                    row.gate_reason = g.reason;
                    row.pending_gate = false;
                }
            }
            Body::Status(s) => {
                if let Some(status) = s.terminal_status() {
                    let row = &mut self.rows[i];
                    row.status = Some(status.to_string());
                    row.failure_stage = s.failure_stage;
                    row.reason = s.reason;
                    // An attempt that stopped before it was committed names its parent here.
                    if row.parent.is_none() {
                        self.set_named_parent(i, s.parent.as_deref());
                    }
                }
            }
            Body::Record(r) => {
                let row = &mut self.rows[i];
                row.recorded = true;
                for (k, v) in r.annotations.into_iter().flatten() {
                    if annotation_allowed(&k) {
                        row.annotations.insert(k, v);
                    } else if !row.dropped_annotations.contains(&k) {
                        row.dropped_annotations.push(k);
                    }
                }
            }
            Body::Genesis(_) | Body::Other(_) => {}
        }
    }

    fn apply_evaluation(&mut self, i: usize, at: &At<'_>, e: Evaluated, source: StampSource) {
        let evaluation = Evaluation {
            seq: at.seq,
            line: at.line,
            problems: e.problems,
            reason: e.reason,
            stamp: match source {
                StampSource::Map(m) => {
                    Stamp::from_parts(e.facts, StampSource::Map(Map::new()), OnceLock::from(m))
                }
                line => Stamp::from_parts(e.facts, line, OnceLock::new()),
            },
        };
        self.rows[i].cost_usd += evaluation.cost_usd();
        let purpose = evaluation.purpose().unwrap_or("");
        let primary = self.rows[i].evaluation.as_ref().and_then(|e| e.purpose());
        if purpose == "anchor" {
            self.rows[i].anchors.push(evaluation);
        } else if matches!(purpose, "candidate" | "genesis") && primary.is_none_or(|p| p == purpose)
        {
            self.set_named_parent(i, e.parent.as_deref());
            let row = &mut self.rows[i];
            row.status = evaluation.outcome().map(str::to_string);
            row.reason = evaluation.reason.clone();
            row.failure_stage = None;
            row.verdict = None;
            row.gate_reason = None;
            row.pending_gate = true;
            row.evaluation = Some(evaluation);
        } else {
            self.rows[i].other_evaluations.push(evaluation);
        }
    }

    /// Fold a logged event in (its body read through the same typed bodies as a line).
    pub(crate) fn apply_event(&mut self, le: &LoggedEvent) {
        let ev = &le.event;
        let genid = ev.genid.as_deref();
        let body = Body::of_map(&ev.event_type, genid, &ev.body);
        let at = At {
            seq: ev.seq,
            line: le.line,
            certified: le.certified,
            event_type: &ev.event_type,
            genid,
        };
        self.apply(at, body, || {
            StampSource::Map(Stamp::stamped_fields(&ev.body))
        });
    }
}

/// One line the writer keeps, as folded by [`replay`].
#[derive(Debug)]
pub(crate) struct Replayed {
    pub(crate) range: Range<usize>,
    pub(crate) sha256: [u8; 32],
    pub(crate) certified: bool,
    pub(crate) event_type: std::borrow::Cow<'static, str>,
    /// The body's `cost_usd` if it is a finite number ≥ 0.
    pub(crate) cost_usd: Option<f64>,
}

/// The folded state of an archive.
#[derive(Debug, Default)]
pub(crate) struct Folded {
    pub(crate) folder: Folder,
    /// The certified genesis event's `fixed_identity`, if any.
    pub(crate) genesis_identity: Option<FixedIdentity>,
    /// Line 1 is a certified genesis event with a `fixed_identity` key.
    pub(crate) genesis_names_identity: bool,
}

/// Fold checked lines (read from `buf`) into rows, and say what each line was. With
/// `certify_last`, the final line counts as certified (the writer signs it before anyone
/// sees the rows).
pub(crate) fn replay(
    checked: Vec<Checked<'_>>,
    buf: &Arc<Vec<u8>>,
    certify_last: bool,
) -> (Vec<Replayed>, Folded) {
    let mut r = Folded::default();
    let mut lines = Vec::with_capacity(checked.len());
    let last = checked.len().saturating_sub(1);
    for (i, c) in checked.into_iter().enumerate() {
        let certified = c.certified || (certify_last && i == last);
        lines.push(Replayed {
            range: c.range.clone(),
            sha256: c.sha256,
            certified: c.certified,
            event_type: type_name(&c.item.head.event_type),
            cost_usd: c.item.body.cost_usd(),
        });
        r.apply_line(c.item, c.line, certified, || {
            StampSource::Line(buf.clone(), c.range.clone())
        });
    }
    (lines, r)
}

impl Folded {
    /// Fold one more line in (`line_no` is 1-based).
    pub(crate) fn apply_line(
        &mut self,
        l: Line<'_>,
        line_no: u64,
        certified: bool,
        stamp: impl FnOnce() -> StampSource,
    ) {
        if l.head.seq == 0
            && certified
            && let Body::Genesis(g) = &l.body
            && let Some(id) = &g.fixed_identity
        {
            self.genesis_names_identity = true;
            self.genesis_identity = id.0.clone();
        }
        let at = At {
            seq: l.head.seq,
            line: line_no,
            certified,
            event_type: &l.head.event_type,
            genid: l.head.genid.as_deref(),
        };
        self.folder.apply(at, l.body, stamp);
    }
}

/// Fold events into rows, one per genid in first-appearance order. Only certified events
/// change a row; an uncertified line naming a genid is listed in its `uncertified_lines`
/// (which makes the row ineligible as a parent).
pub fn fold(events: &[LoggedEvent]) -> Vec<Row> {
    let mut folder = Folder::default();
    for le in events {
        folder.apply_event(le);
    }
    folder.into_rows()
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

/// What a resumed run still has to do, from the rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pending {
    /// Rows whose primary evaluation has not been gated yet (run the gate).
    pub pending_gate: Vec<String>,
    /// Rows with a certified generation event but no evaluation of any purpose and no terminal
    /// status other than `cancelled` (evaluate them, or record why not).
    pub unevaluated: Vec<String>,
    /// The genid of the last row (the most recently started generation), if any.
    pub last_genid: Option<String>,
}

/// The generations a resumed run has to finish (see [`Pending`]).
pub fn pending(rows: &[Row]) -> Pending {
    Pending {
        pending_gate: rows
            .iter()
            .filter(|r| r.pending_gate)
            .map(|r| r.genid.clone())
            .collect(),
        unevaluated: rows
            .iter()
            .filter(|r| {
                r.generated
                    && r.evaluation.is_none()
                    && r.anchors.is_empty()
                    && r.other_evaluations.is_empty()
                    && r.status.as_deref().is_none_or(|s| s == CANCELLED)
            })
            .map(|r| r.genid.clone())
            .collect(),
        last_genid: rows.last().map(|r| r.genid.clone()),
    }
}

#[cfg(test)]
mod cancelled_tests {
    use super::*;
    use crate::event::Event;
    use serde_json::json;

    fn logged(seq: u64, event_type: &str, body: Value) -> LoggedEvent {
        LoggedEvent {
            line: seq + 1,
            event: Event {
                seq,
                prev: String::new(),
                event_type: event_type.into(),
                genid: Some("1".into()),
                at: "2026-01-01T00:00:00Z".into(),
                body: body.as_object().cloned().unwrap_or_default(),
            },
            sha256: String::new(),
            certified: true,
        }
    }

    fn cancelled(seq: u64, stage: &str) -> LoggedEvent {
        let body = json!({"status": "cancelled", "failure_stage": stage, "reason": "interrupted by the user", "parent": "0"});
        logged(seq, types::STATUS, body)
    }

    /// The folded row's `status` and `failure_stage`.
    fn status_after(events: &[LoggedEvent]) -> (Option<String>, Option<String>) {
        let rows = fold(events);
        (rows[0].status.clone(), rows[0].failure_stage.clone())
    }

    #[test]
    fn a_cancelled_stage_is_superseded_by_the_attempts_resume() {
        let generation = logged(1, types::GENERATION, json!({"parent": "0", "commit": "c"}));
        let evaluation = logged(
            2,
            types::EVALUATION,
            json!({"purpose": "candidate", "outcome": "benchmark_complete", "score": 0.5, "reason": "ok"}),
        );
        let gate = logged(
            4,
            types::GATE,
            json!({"verdict": "keep", "reason": "better"}),
        );

        // Cancelled before the commit: the re-run's generation event clears it.
        let mut evs = vec![cancelled(0, "mutate")];
        assert_eq!(
            status_after(&evs),
            (Some("cancelled".into()), Some("mutate".into()))
        );
        evs.push(generation.clone());
        assert_eq!(status_after(&evs), (None, None));

        // Cancelled at the gate: the gate event restores the evaluation's outcome.
        let mut evs = vec![generation, evaluation, cancelled(3, "gate")];
        assert_eq!(status_after(&evs).0.as_deref(), Some("cancelled"));
        evs.push(gate);
        assert_eq!(
            status_after(&evs),
            (Some("benchmark_complete".into()), None)
        );
        let rows = fold(&evs);
        assert_eq!(rows[0].reason.as_deref(), Some("ok"));
        assert_eq!(rows[0].verdict.as_deref(), Some("keep"));
    }

    #[test]
    fn other_terminal_statuses_are_not_superseded() {
        let evs = vec![
            logged(
                0,
                types::STATUS,
                json!({"status": "operator_failed", "failure_stage": "gate"}),
            ),
            logged(1, types::RECORD, json!({"annotations": {}})),
        ];
        assert_eq!(
            status_after(&evs),
            (Some("operator_failed".into()), Some("gate".into()))
        );
    }
}
