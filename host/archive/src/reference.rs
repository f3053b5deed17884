//! The implementations before the fast path, kept verbatim (modulo names) as the oracle of
//! the equivalence tests: `check_stamp`, `summarize_task_vector`, `fold` and the `Evaluation`
//! accessors, all over `serde_json::Value`.

#![allow(clippy::all)]

use serde_json::{Map, Value};

use crate::event::{
    OUTCOMES, PURPOSES, STAMPED_FIELDS, TERMINAL_STATUSES, VectorSummary, check_genid,
    genid_generation, types,
};
use crate::fold::{Evaluation, Row, annotation_allowed};
use crate::verify::LoggedEvent;

const TRIAL_STATUSES: [&str; 5] = OUTCOMES;

/// Parse a `task_vector` stamped value.
pub fn summarize_task_vector(v: &Value) -> Result<VectorSummary, String> {
    let o = v.as_object().ok_or("task_vector must be an object")?;
    if o.get("schema_version").and_then(Value::as_u64) != Some(1) {
        return Err("task_vector.schema_version must be 1".into());
    }
    let tasks = o
        .get("tasks")
        .and_then(Value::as_object)
        .ok_or("task_vector.tasks must be an object")?;
    let mut s = VectorSummary {
        trials: 0,
        complete: 0,
        agent_timeouts: 0,
        reward_sum: 0.0,
    };
    let mut names: Vec<&String> = tasks.keys().collect();
    names.sort();
    for name in names {
        let trials = tasks[name]
            .get("trials")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("task_vector.tasks[{name:?}].trials must be an array"))?;
        for (i, t) in trials.iter().enumerate() {
            let at = || format!("task_vector.tasks[{name:?}].trials[{i}]");
            let t = t
                .as_object()
                .ok_or_else(|| format!("{} must be an object", at()))?;
            t.get("trial")
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("{}.trial must be a non-negative integer", at()))?;
            let status = t.get("status").and_then(Value::as_str).unwrap_or("");
            if !TRIAL_STATUSES.contains(&status) {
                return Err(format!("{}.status {status:?} is not a trial status", at()));
            }
            let reward =
                match t.get("reward") {
                    None | Some(Value::Null) => None,
                    Some(r) => Some(r.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
                        format!("{}.reward must be a finite number or null", at())
                    })?),
                };
            s.trials += 1;
            match (status, reward) {
                ("benchmark_complete", Some(r)) => {
                    s.complete += 1;
                    s.reward_sum += r;
                }
                ("benchmark_complete", None) => {
                    return Err(format!(
                        "{}: a benchmark_complete trial needs a reward",
                        at()
                    ));
                }
                ("timeout", _)
                    if t.get("timeout_owner").and_then(Value::as_str) == Some("agent") =>
                {
                    s.agent_timeouts += 1
                }
                _ => {}
            }
        }
    }
    Ok(s)
}

fn nonneg_finite(v: Option<&Value>) -> Option<f64> {
    v.filter(|x| x.is_number())
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite() && *x >= 0.0)
}

fn is_object_id(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str).is_some_and(|s| {
        (s.len() == 40 || s.len() == 64)
            && s.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    })
}

/// Scores agree if they differ by at most 1e-9 relative (summation order may differ).
pub fn scores_agree(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Every problem with the stamped fields of an evaluation event body (empty when valid):
/// presence, types, allowed values, and the score recomputed from the task vector.
pub fn check_stamp(genid: Option<&str>, body: &Map<String, Value>) -> Vec<String> {
    let mut p = Vec::new();
    let Some(genid) = genid else {
        p.push("an evaluation event needs a genid".into());
        return p;
    };
    for f in STAMPED_FIELDS {
        if !body.contains_key(f) {
            p.push(format!("stamped field `{f}` is missing"));
        }
    }
    if !p.is_empty() {
        return p;
    }
    let s = |k: &str| body.get(k).and_then(Value::as_str);
    let u = |k: &str| body.get(k).and_then(Value::as_u64);
    for k in ["candidate_commit", "candidate_tree"] {
        if !is_object_id(body.get(k)) {
            p.push(format!(
                "`{k}` must be a git object id (40 or 64 lower-case hex)"
            ));
        }
    }
    match body.get("parent") {
        Some(Value::Null) => {}
        Some(Value::String(g)) if check_genid(g).is_ok() => {}
        _ => p.push("`parent` must be a genid or null".into()),
    }
    match u("generation") {
        None => p.push("`generation` must be a non-negative integer".into()),
        Some(n) => {
            if let Some(g) = genid_generation(genid).filter(|g| *g != n) {
                p.push(format!(
                    "`generation` is {n} but genid {genid:?} names generation {g}"
                ));
            }
        }
    }
    for k in [
        "evaluator_fingerprint",
        "task_set_hash",
        "runtime_fingerprint",
        "contract_id",
    ] {
        if !s(k).is_some_and(|v| !v.is_empty() && v.len() <= 256) {
            p.push(format!("`{k}` must be a non-empty string"));
        }
    }
    if !s("purpose").is_some_and(|v| PURPOSES.contains(&v)) {
        p.push(format!("`purpose` must be one of {PURPOSES:?}"));
    }
    let outcome = s("outcome").filter(|v| OUTCOMES.contains(v));
    if outcome.is_none() {
        p.push(format!("`outcome` must be one of {OUTCOMES:?}"));
    }
    let (trials, expected, scoreable) = (u("trials"), u("expected_trials"), u("scoreable_trials"));
    for (k, v) in [
        ("trials", trials),
        ("expected_trials", expected),
        ("scoreable_trials", scoreable),
    ] {
        if v.is_none() {
            p.push(format!("`{k}` must be a non-negative integer"));
        }
    }
    let vector = body.get("task_vector").map(summarize_task_vector);
    if let Some(Err(e)) = &vector {
        p.push(e.clone());
    }
    let complete = outcome == Some("benchmark_complete");
    let score = body.get("score");
    if let (Some(trials), Some(expected), Some(scoreable), Some(Ok(vs))) =
        (trials, expected, scoreable, &vector)
    {
        if vs.trials != trials {
            p.push(format!(
                "`trials` is {trials} but the task vector holds {} trials",
                vs.trials
            ));
        }
        if scoreable > trials {
            p.push(format!(
                "`scoreable_trials` ({scoreable}) exceeds `trials` ({trials})"
            ));
        }
        if scoreable < vs.complete || scoreable > vs.complete + vs.agent_timeouts {
            p.push(format!(
                "`scoreable_trials` is {scoreable} but the task vector has {} complete trials and {} agent timeouts",
                vs.complete, vs.agent_timeouts
            ));
        }
        if complete {
            if expected == 0 || trials > expected || scoreable == 0 {
                p.push(format!(
                    "a benchmark_complete evaluation needs 0 < scoreable ≤ trials ≤ expected (got {scoreable}, {trials}, {expected})"
                ));
            } else {
                let recomputed = vs.reward_sum / expected as f64;
                match score.filter(|x| x.is_number()).and_then(Value::as_f64) {
                    Some(x) if x.is_finite() && scores_agree(x, recomputed) => {}
                    Some(x) if x.is_finite() => p.push(format!(
                        "`score` is {x} but Σ scoreable rewards / expected_trials = {recomputed}"
                    )),
                    _ => p.push(
                        "`score` must be a finite number for a benchmark_complete evaluation"
                            .into(),
                    ),
                }
            }
        }
    }
    if !complete && outcome.is_some() && !matches!(score, Some(Value::Null)) {
        p.push("`score` must be null unless the outcome is benchmark_complete".into());
    }
    if nonneg_finite(body.get("cost_usd")).is_none() {
        p.push("`cost_usd` must be a finite number ≥ 0".into());
    }
    match body.get("timings").and_then(Value::as_object) {
        Some(t) if t.values().all(|v| nonneg_finite(Some(v)).is_some()) => {}
        _ => p.push("`timings` must be an object of finite numbers ≥ 0 (seconds)".into()),
    }
    match u("attempt").filter(|a| *a >= 1) {
        None => p.push("`attempt` must be an integer ≥ 1".into()),
        Some(a) => match body.get("source_attempts").and_then(Value::as_array) {
            Some(src)
                if src
                    .iter()
                    .all(|x| x.as_u64().is_some_and(|x| x >= 1 && x < a)) => {}
            _ => p.push("`source_attempts` must be a list of earlier attempt numbers".into()),
        },
    }
    p
}

/// The old `Evaluation`, its stamp a plain map, with its accessors.
pub struct OldEvaluation {
    pub seq: u64,
    pub line: u64,
    pub stamp: Map<String, Value>,
    pub reason: Option<String>,
    pub problems: Vec<String>,
}

impl OldEvaluation {
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
    pub fn into_new(self) -> Evaluation {
        Evaluation {
            seq: self.seq,
            line: self.line,
            stamp: self.stamp.into(),
            reason: self.reason,
            problems: self.problems,
        }
    }
}

/// An evaluation's accessors, as the old code computed them from its stamp map.
pub type Accessors = (
    (Option<String>, Option<String>, Option<String>),
    (Option<String>, Option<String>, Option<String>),
    (Option<u64>, u64),
);

pub fn old_accessors(e: &Evaluation) -> Accessors {
    let m: &Map<String, Value> = &e.stamp;
    let old = OldEvaluation {
        seq: e.seq,
        line: e.line,
        stamp: m.clone(),
        reason: None,
        problems: Vec::new(),
    };
    let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
    (
        (
            old.purpose().map(str::to_string),
            old.outcome().map(str::to_string),
            old.candidate_commit().map(str::to_string),
        ),
        (
            s("evaluator_fingerprint"),
            s("task_set_hash"),
            s("runtime_fingerprint"),
        ),
        (old.score().map(f64::to_bits), old.cost_usd().to_bits()),
    )
}

/// The same accessors of the new `Evaluation`.
pub fn new_accessors(e: &Evaluation) -> Accessors {
    let s = |v: Option<&str>| v.map(str::to_string);
    (
        (s(e.purpose()), s(e.outcome()), s(e.candidate_commit())),
        (
            s(e.evaluator_fingerprint()),
            s(e.task_set_hash()),
            s(e.runtime_fingerprint()),
        ),
        (e.score().map(f64::to_bits), e.cost_usd().to_bits()),
    )
}

fn str_field(body: &Map<String, Value>, k: &str) -> Option<String> {
    body.get(k).and_then(Value::as_str).map(str::to_string)
}

fn new_row(genid: &str, first_seq: u64) -> Row {
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

/// The old `fold` (plus the new `generated` flag).
pub fn fold(events: &[LoggedEvent]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for le in events {
        let ev = &le.event;
        let Some(genid) = ev.genid.as_deref() else {
            continue;
        };
        let i = *index.entry(genid.to_string()).or_insert_with(|| {
            rows.push(new_row(genid, ev.seq));
            rows.len() - 1
        });
        let row = &mut rows[i];
        if !le.certified {
            row.uncertified_lines.push(le.line);
            continue;
        }
        let body = &ev.body;
        if matches!(
            ev.event_type.as_str(),
            types::GENERATION | types::EVALUATION | types::GATE | types::RECORD
        ) && row.status.as_deref() == Some("cancelled")
        {
            row.status = row
                .evaluation
                .as_ref()
                .and_then(|e| e.stamp.get("outcome"))
                .and_then(Value::as_str)
                .map(str::to_string);
            row.reason = row.evaluation.as_ref().and_then(|e| e.reason.clone());
            row.failure_stage = None;
        }
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
                row.generated = true;
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
                let evaluation = OldEvaluation {
                    seq: ev.seq,
                    line: le.line,
                    problems: check_stamp(Some(genid), body),
                    reason: str_field(body, "reason"),
                    stamp,
                };
                row.cost_usd += evaluation.cost_usd();
                let purpose = evaluation.purpose().unwrap_or("").to_string();
                let primary = row.evaluation.as_ref().and_then(|e| {
                    e.stamp
                        .get("purpose")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                });
                if purpose == "anchor" {
                    row.anchors.push(evaluation.into_new());
                } else if matches!(purpose.as_str(), "candidate" | "genesis")
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
                    row.evaluation = Some(evaluation.into_new());
                } else {
                    row.other_evaluations.push(evaluation.into_new());
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
                    if row.parent.is_none()
                        && let Some(p) =
                            str_field(body, "parent").filter(|p| check_genid(p).is_ok())
                    {
                        row.parent = Some(p);
                    }
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
