//! The event schema: the host-stamped envelope, the stamped fields of certified evaluation
//! events, and their validation.

use serde_json::{Map, Value, json};

use crate::canonical::{canonical_bytes, canonical_sha256};
use crate::lite::{Lite, nonneg_finite};

/// The fields of a certified evaluation event's body that only the host writes and that no
/// annotation can ever replace. This is the one definition; everything else refers to it.
///
/// | field | type |
/// |---|---|
/// | `candidate_commit` | git object id (40 or 64 hex) of the evaluated commit |
/// | `candidate_tree` | git object id of that commit's tree |
/// | `parent` | genid of the parent, or `null` (genesis and anchor evaluations) |
/// | `generation` | generation number (non-negative integer; the genid's leading number) |
/// | `evaluator_fingerprint` | git tree hash of `evaluator/` in the evaluated commit |
/// | `task_set_hash` | digest of the evaluated task set |
/// | `runtime_fingerprint` | digest of the evaluation runtime (engine configuration) |
/// | `contract_id` | the evaluation contract's id |
/// | `purpose` | `candidate`, `genesis` or `anchor` |
/// | `outcome` | one of [`OUTCOMES`] |
/// | `trials` | number of trials in `task_vector` |
/// | `expected_trials` | tasks × repetitions |
/// | `scoreable_trials` | trials that contribute to the score |
/// | `task_vector` | `{"schema_version":1,"tasks":{name:{"trials":[{"trial","status","reward",…}]}}}` |
/// | `score` | Σ scoreable rewards / `expected_trials` when `benchmark_complete`, else `null` |
/// | `cost_usd` | evaluation cost (finite, ≥ 0) |
/// | `timings` | object of named durations in seconds (finite, ≥ 0) |
/// | `attempt` | 1-based evaluation attempt of this genid and purpose |
/// | `source_attempts` | earlier attempts whose completed trials were reused (each < `attempt`) |
pub const STAMPED_FIELDS: [&str; 19] = [
    "candidate_commit",
    "candidate_tree",
    "parent",
    "generation",
    "evaluator_fingerprint",
    "task_set_hash",
    "runtime_fingerprint",
    "contract_id",
    "purpose",
    "outcome",
    "trials",
    "expected_trials",
    "scoreable_trials",
    "task_vector",
    "score",
    "cost_usd",
    "timings",
    "attempt",
    "source_attempts",
];

/// The keys of an event line (the envelope). Every line has exactly these.
pub const ENVELOPE_FIELDS: [&str; 6] = ["seq", "prev", "type", "genid", "at", "body"];

/// Fields of a folded row that the framework owns (besides [`STAMPED_FIELDS`]); an annotation
/// can never set one of these either.
pub const FRAMEWORK_FIELDS: [&str; 22] = [
    "seq",
    "prev",
    "type",
    "genid",
    "at",
    "body",
    "experiment",
    "tag",
    "status",
    "verdict",
    "gate_reason",
    "pending_gate",
    "failure_stage",
    "reason",
    "children",
    "certified",
    "annotations",
    "anchors",
    "evaluation",
    "recorded",
    "fixed_identity",
    "kind",
];

/// Evaluation outcomes (the `outcome` stamped field).
pub const OUTCOMES: [&str; 5] = [
    "benchmark_complete",
    "candidate_invalid",
    "infrastructure_failed",
    "timeout",
    "cancelled",
];

/// Evaluation purposes. `anchor` evaluations (sealed split) are never selectable.
pub const PURPOSES: [&str; 3] = ["candidate", "genesis", "anchor"];

/// Statuses a `status` event may set (terminal attempt statuses).
pub const TERMINAL_STATUSES: [&str; 11] = [
    "no_proposal",
    "invalid_proposal",
    "rejected_validation",
    "rejected_duplicate",
    "operator_failed",
    "benchmark_complete",
    "candidate_invalid",
    "infrastructure_failed",
    "timeout",
    "cancelled",
    "budget_exhausted",
];

/// Well-known event types. Other `[a-z_]` types may be appended; folding ignores them except
/// for their `cost_usd`.
pub mod types {
    /// Seq 0 only: `{"experiment": id, "fixed_identity"?: {...}, ...}`.
    pub const GENESIS: &str = "genesis";
    /// A candidate generation was committed and tagged: `{"parent", "commit", ...}`.
    pub const GENERATION: &str = "generation";
    /// A certified evaluation: the [`STAMPED_FIELDS`](crate::STAMPED_FIELDS) (+ free `reason`).
    pub const EVALUATION: &str = "evaluation";
    /// The gate's decision: `{"verdict": "keep"|"discard", "reason": str}`.
    pub const GATE: &str = "gate";
    /// Record-stage annotations: `{"annotations": {...}}`, filtered by the allowlist.
    pub const RECORD: &str = "record";
    /// A terminal status: `{"status", "failure_stage"?, "reason"?}`.
    pub const STATUS: &str = "status";
    /// A recorded repair (e.g. trials reused from an interrupted attempt).
    pub const REPAIR: &str = "repair";
}

/// The genid of generation zero.
pub const GENESIS_GENID: &str = "0";

/// One archive event (one line of `archive.jsonl`).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// 0-based, contiguous.
    pub seq: u64,
    /// Hex SHA-256 of the previous line (for seq 0: of `{"experiment": id}`, canonical).
    pub prev: String,
    /// The event type (`[a-z_]{1,32}`); the `type` key on the line.
    pub event_type: String,
    pub genid: Option<String>,
    /// RFC 3339 UTC timestamp, `YYYY-MM-DDTHH:MM:SS[.fraction]Z`.
    pub at: String,
    pub body: Map<String, Value>,
}

impl Event {
    /// The event as a JSON object (envelope keys; `genid` is `null` when absent).
    pub fn to_value(&self) -> Value {
        json!({
            "seq": self.seq,
            "prev": self.prev,
            "type": self.event_type,
            "genid": self.genid,
            "at": self.at,
            "body": Value::Object(self.body.clone()),
        })
    }

    /// The canonical bytes of the event: exactly the line written, without its newline.
    pub fn canonical_line(&self) -> Vec<u8> {
        canonical_bytes(&self.to_value())
    }

    /// Parse a line's JSON value strictly: exactly the envelope keys, each well typed.
    pub fn from_value(v: &Value) -> Result<Event, String> {
        Self::from_json(v.clone())
    }

    /// [`Event::from_value`], taking the value (no copy of the body).
    pub fn from_json(v: Value) -> Result<Event, String> {
        let Value::Object(mut o) = v else {
            return Err("an event line must be a JSON object".into());
        };
        for k in o.keys() {
            if !ENVELOPE_FIELDS.contains(&k.as_str()) {
                return Err(format!("unknown envelope key {k:?}"));
            }
        }
        let seq = o
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or("`seq` must be a non-negative integer")?;
        let prev = o
            .get("prev")
            .and_then(Value::as_str)
            .ok_or("`prev` must be a string")?;
        if !crate::canonical::is_sha256_hex(prev) {
            return Err("`prev` must be 64 lower-case hex digits".into());
        }
        let ty = o
            .get("type")
            .and_then(Value::as_str)
            .ok_or("`type` must be a string")?;
        check_event_type(ty)?;
        let genid = match o.get("genid") {
            Some(Value::Null) => None,
            Some(Value::String(g)) => {
                check_genid(g)?;
                Some(g.clone())
            }
            _ => return Err("`genid` must be a string or null".into()),
        };
        let at = o
            .get("at")
            .and_then(Value::as_str)
            .ok_or("`at` must be a string")?;
        check_timestamp(at)?;
        let (prev, ty, at) = (prev.to_string(), ty.to_string(), at.to_string());
        let Some(Value::Object(body)) = o.remove("body") else {
            return Err("`body` must be an object".into());
        };
        Ok(Event {
            seq,
            prev,
            event_type: ty,
            genid,
            at,
            body,
        })
    }
}

/// `prev` of seq 0: the hex SHA-256 of the canonical JSON of `{"experiment": experiment_id}`.
pub fn genesis_anchor(experiment_id: &str) -> String {
    canonical_sha256(&json!({ "experiment": experiment_id }))
}

/// An event type is 1–32 characters of `[a-z_]`.
pub fn check_event_type(t: &str) -> Result<(), String> {
    if t.is_empty() || t.len() > 32 || !t.bytes().all(|c| c.is_ascii_lowercase() || c == b'_') {
        return Err(format!(
            "event type {t:?} must be 1-32 characters of [a-z_]"
        ));
    }
    Ok(())
}

/// A genid is 1–64 characters of `[A-Za-z0-9._-]`, starting with an alphanumeric (so that
/// `gen/<genid>` is a valid git tag name).
pub fn check_genid(g: &str) -> Result<(), String> {
    let ok = !g.is_empty()
        && g.len() <= 64
        && g.as_bytes()[0].is_ascii_alphanumeric()
        && g.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        && !g.contains("..")
        && !g.ends_with(".lock");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "genid {g:?} must be 1-64 characters of [A-Za-z0-9._-], starting alphanumeric"
        ))
    }
}

/// The generation number a genid names: its leading decimal digits (`"3"` and `"3-1"` → 3).
pub fn genid_generation(g: &str) -> Option<u64> {
    let digits: &str = &g[..g.bytes().take_while(u8::is_ascii_digit).count()];
    let rest = &g[digits.len()..];
    if digits.is_empty() || !(rest.is_empty() || rest.starts_with('-')) {
        return None;
    }
    digits.parse().ok()
}

/// `YYYY-MM-DDTHH:MM:SS[.1-9 digits]Z` with plausible field ranges.
pub fn check_timestamp(s: &str) -> Result<(), String> {
    let err = || format!("timestamp {s:?} must be RFC 3339 UTC, e.g. 2026-01-31T12:00:00Z");
    let b = s.as_bytes();
    if b.len() < 20 || b.len() > 30 || b[b.len() - 1] != b'Z' {
        return Err(err());
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = &b[r];
        if part.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(part).ok()?.parse().ok()
        } else {
            None
        }
    };
    let seps = b[4] == b'-' && b[7] == b'-' && b[10] == b'T' && b[13] == b':' && b[16] == b':';
    let fields = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    );
    let (Some(_y), Some(mo), Some(d), Some(h), Some(mi), Some(sec)) = fields else {
        return Err(err());
    };
    if !seps || !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return Err(err());
    }
    let frac = &b[19..b.len() - 1];
    if !frac.is_empty()
        && (frac[0] != b'.'
            || frac.len() < 2
            || frac.len() > 10
            || !frac[1..].iter().all(u8::is_ascii_digit))
    {
        return Err(err());
    }
    Ok(())
}

/// What a task vector says about scoring.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VectorSummary {
    /// Number of trial entries.
    pub trials: u64,
    /// Trials with status `benchmark_complete` and a finite reward.
    pub complete: u64,
    /// Trials with status `timeout` owned by the agent (scoreable as 0 under the default policy).
    pub agent_timeouts: u64,
    /// Σ rewards of the complete trials (tasks in key order, trials in list order).
    pub reward_sum: f64,
}

const TRIAL_STATUSES: [&str; 5] = OUTCOMES;

/// One trial object's fields as `Value` accessors see them (`None`: key absent).
pub(crate) struct TrialFields<'b> {
    pub(crate) trial: Option<Lite<'b>>,
    pub(crate) status: Option<Lite<'b>>,
    pub(crate) reward: Option<Lite<'b>>,
    pub(crate) timeout_owner: Option<Lite<'b>>,
}

/// Why a trial is not usable.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TrialErr {
    NotObject,
    Index,
    Status(String),
    Reward,
    NoReward,
}

/// Why a task is not usable.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TaskErr {
    TrialsNotArray,
    Trial(usize, TrialErr),
}

/// One task's trials, accumulated in list order up to the first unusable trial. Its complete
/// trials' rewards are `rewards` of a buffer shared by the tasks of one vector.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskAcc {
    trials: u64,
    complete: u64,
    agent_timeouts: u64,
    rewards: std::ops::Range<usize>,
    pub(crate) err: Option<TaskErr>,
}

impl TaskAcc {
    pub(crate) fn starting_at(start: usize) -> TaskAcc {
        TaskAcc {
            trials: 0,
            complete: 0,
            agent_timeouts: 0,
            rewards: start..start,
            err: None,
        }
    }

    pub(crate) fn failed(err: TaskErr) -> TaskAcc {
        TaskAcc {
            err: Some(err),
            ..TaskAcc::starting_at(0)
        }
    }

    /// Add trial `i` of the task (`None`: it is not an object).
    pub(crate) fn add(&mut self, i: usize, t: Option<TrialFields<'_>>, rewards: &mut Vec<f64>) {
        match trial_effect(t) {
            Err(e) => self.err = Some(TaskErr::Trial(i, e)),
            Ok(effect) => {
                self.trials += 1;
                match effect {
                    TrialEffect::Complete(r) => {
                        self.complete += 1;
                        rewards.push(r);
                        self.rewards.end = rewards.len();
                    }
                    TrialEffect::AgentTimeout => self.agent_timeouts += 1,
                    TrialEffect::Other => {}
                }
            }
        }
    }
}

enum TrialEffect {
    Complete(f64),
    AgentTimeout,
    Other,
}

/// What one trial contributes: the one definition, shared by both readers.
fn trial_effect(t: Option<TrialFields<'_>>) -> Result<TrialEffect, TrialErr> {
    let t = t.ok_or(TrialErr::NotObject)?;
    t.trial.and_then(|x| x.as_u64()).ok_or(TrialErr::Index)?;
    let status = t.status.and_then(|s| s.as_str()).unwrap_or("");
    if !TRIAL_STATUSES.contains(&status) {
        return Err(TrialErr::Status(status.to_string()));
    }
    let reward = match t.reward {
        None | Some(Lite::Null) => None,
        Some(r) => Some(
            r.as_f64()
                .filter(|x| x.is_finite())
                .ok_or(TrialErr::Reward)?,
        ),
    };
    Ok(match (status, reward) {
        ("benchmark_complete", Some(r)) => TrialEffect::Complete(r),
        ("benchmark_complete", None) => return Err(TrialErr::NoReward),
        ("timeout", _) if t.timeout_owner.and_then(|o| o.as_str()) == Some("agent") => {
            TrialEffect::AgentTimeout
        }
        _ => TrialEffect::Other,
    })
}

/// Sum tasks given in key order: the first unusable task's error, else the summary (rewards
/// added task by task, trial by trial).
pub(crate) fn aggregate_tasks<'t>(
    tasks: impl Iterator<Item = (&'t str, &'t TaskAcc)>,
    rewards: &[f64],
) -> Result<VectorSummary, String> {
    let mut s = VectorSummary {
        trials: 0,
        complete: 0,
        agent_timeouts: 0,
        reward_sum: 0.0,
    };
    for (name, t) in tasks {
        if let Some(e) = &t.err {
            let at = |i: &usize| format!("task_vector.tasks[{name:?}].trials[{i}]");
            return Err(match e {
                TaskErr::TrialsNotArray => {
                    format!("task_vector.tasks[{name:?}].trials must be an array")
                }
                TaskErr::Trial(i, TrialErr::NotObject) => format!("{} must be an object", at(i)),
                TaskErr::Trial(i, TrialErr::Index) => {
                    format!("{}.trial must be a non-negative integer", at(i))
                }
                TaskErr::Trial(i, TrialErr::Status(st)) => {
                    format!("{}.status {st:?} is not a trial status", at(i))
                }
                TaskErr::Trial(i, TrialErr::Reward) => {
                    format!("{}.reward must be a finite number or null", at(i))
                }
                TaskErr::Trial(i, TrialErr::NoReward) => {
                    format!("{}: a benchmark_complete trial needs a reward", at(i))
                }
            });
        }
        s.trials += t.trials;
        s.complete += t.complete;
        s.agent_timeouts += t.agent_timeouts;
        for r in &rewards[t.rewards.clone()] {
            s.reward_sum += r;
        }
    }
    Ok(s)
}

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
    let mut names: Vec<&String> = tasks.keys().collect();
    names.sort();
    let mut rewards = Vec::new();
    let mut accs = Vec::with_capacity(names.len());
    for name in names {
        let mut acc = TaskAcc::starting_at(rewards.len());
        match tasks[name].get("trials").and_then(Value::as_array) {
            None => acc.err = Some(TaskErr::TrialsNotArray),
            Some(trials) => {
                for (i, t) in trials.iter().enumerate() {
                    let fields = t.as_object().map(|t| TrialFields {
                        trial: t.get("trial").map(Lite::of),
                        status: t.get("status").map(Lite::of),
                        reward: t.get("reward").map(Lite::of),
                        timeout_owner: t.get("timeout_owner").map(Lite::of),
                    });
                    acc.add(i, fields, &mut rewards);
                    if acc.err.is_some() {
                        break;
                    }
                }
            }
        }
        accs.push((name.as_str(), acc));
    }
    aggregate_tasks(accs.iter().map(|(n, a)| (*n, a)), &rewards)
}

/// Read access to an evaluation body's stamped fields, with `serde_json::Value` accessor
/// semantics. Implemented by the body map itself and by the allocation-light reader
/// ([`crate::lite::FastBody`]), so that [`check_stamp`]'s rules exist once.
pub(crate) trait StampView {
    /// The key is present.
    fn has(&self, k: &str) -> bool;
    /// The value at a key (containers by their shape only).
    fn lite(&self, k: &str) -> Option<Lite<'_>>;
    /// [`summarize_task_vector`] of `task_vector`, `None` if absent.
    fn task_vector(&self) -> Option<Result<VectorSummary, String>>;
    /// `timings` is an object of finite numbers ≥ 0.
    fn timings_ok(&self) -> bool;
    /// `source_attempts` is an array of integers each ≥ 1 and < `attempt`.
    fn source_attempts_ok(&self, attempt: u64) -> bool;
}

impl StampView for Map<String, Value> {
    fn has(&self, k: &str) -> bool {
        self.contains_key(k)
    }
    fn lite(&self, k: &str) -> Option<Lite<'_>> {
        self.get(k).map(Lite::of)
    }
    fn task_vector(&self) -> Option<Result<VectorSummary, String>> {
        self.get("task_vector").map(summarize_task_vector)
    }
    fn timings_ok(&self) -> bool {
        self.get("timings")
            .and_then(Value::as_object)
            .is_some_and(|t| {
                t.values()
                    .all(|v| nonneg_finite(Some(Lite::of(v))).is_some())
            })
    }
    fn source_attempts_ok(&self, a: u64) -> bool {
        self.get("source_attempts")
            .and_then(Value::as_array)
            .is_some_and(|src| {
                src.iter()
                    .all(|x| x.as_u64().is_some_and(|x| x >= 1 && x < a))
            })
    }
}

fn is_object_id(v: Option<&str>) -> bool {
    v.is_some_and(|s| {
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
    check_stamp_view(genid, body)
}

/// [`check_stamp`] over any [`StampView`].
pub(crate) fn check_stamp_view<V: StampView + ?Sized>(
    genid: Option<&str>,
    body: &V,
) -> Vec<String> {
    let mut p = Vec::new();
    let Some(genid) = genid else {
        p.push("an evaluation event needs a genid".into());
        return p;
    };
    for f in STAMPED_FIELDS {
        if !body.has(f) {
            p.push(format!("stamped field `{f}` is missing"));
        }
    }
    if !p.is_empty() {
        return p;
    }
    let s = |k: &str| body.lite(k).and_then(|v| v.as_str());
    let u = |k: &str| body.lite(k).and_then(|v| v.as_u64());
    for k in ["candidate_commit", "candidate_tree"] {
        if !is_object_id(s(k)) {
            p.push(format!(
                "`{k}` must be a git object id (40 or 64 lower-case hex)"
            ));
        }
    }
    match body.lite("parent") {
        Some(Lite::Null) => {}
        Some(Lite::Str(g)) if check_genid(g).is_ok() => {}
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
    let vector = body.task_vector();
    if let Some(Err(e)) = &vector {
        p.push(e.clone());
    }
    let complete = outcome == Some("benchmark_complete");
    let score = body.lite("score");
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
                match score
                    .as_ref()
                    .filter(|x| x.is_number())
                    .and_then(|x| x.as_f64())
                {
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
    if !complete && outcome.is_some() && !matches!(score, Some(Lite::Null)) {
        p.push("`score` must be null unless the outcome is benchmark_complete".into());
    }
    if nonneg_finite(body.lite("cost_usd")).is_none() {
        p.push("`cost_usd` must be a finite number ≥ 0".into());
    }
    if !body.timings_ok() {
        p.push("`timings` must be an object of finite numbers ≥ 0 (seconds)".into());
    }
    match u("attempt").filter(|a| *a >= 1) {
        None => p.push("`attempt` must be an integer ≥ 1".into()),
        Some(a) => {
            if !body.source_attempts_ok(a) {
                p.push("`source_attempts` must be a list of earlier attempt numbers".into());
            }
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        for ok in ["2026-01-31T12:00:00Z", "2026-01-31T12:00:00.123456789Z"] {
            assert!(check_timestamp(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "2026-01-31 12:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-31T12:00:00+01:00",
            "2026-01-31T12:00:00.Z",
            "２026-01-31T12:00:00Z",
        ] {
            assert!(check_timestamp(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn genids() {
        for ok in ["0", "12", "3-1", "a.b_c"] {
            assert!(check_genid(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-1", ".x", "a/b", "a..b", "x.lock", "é"] {
            assert!(check_genid(bad).is_err(), "{bad}");
        }
        assert_eq!(genid_generation("3-1"), Some(3));
        assert_eq!(genid_generation("12"), Some(12));
        assert_eq!(genid_generation("x"), None);
        assert_eq!(genid_generation("3x"), None);
    }

    #[test]
    fn stamped_fields_have_no_duplicates_and_are_not_framework_fields() {
        let mut v = STAMPED_FIELDS.to_vec();
        v.sort();
        v.dedup();
        assert_eq!(v.len(), STAMPED_FIELDS.len());
        assert!(STAMPED_FIELDS.iter().all(|f| !FRAMEWORK_FIELDS.contains(f)));
    }
}
