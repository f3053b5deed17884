//! The typed body of each archive event type, the one reader of archive lines
//! (`read_line`: the `Envelope` with the body of its type), and the rules of an
//! evaluation's stamped fields ([`check_stamp`]).
//!
//! Each body type has one struct, shared by the host that writes it ([`EventBody`]) and
//! the fold that reads it. Fields only the host writes (what a reader shows, never what
//! the fold decides by) are `skip_deserializing`: the reader passes over them as it
//! always did, so they are neither parsed nor able to make a line malformed, and they
//! read back as `None`.
//!
//! Bodies are read leniently: a field of another JSON type than the one the archive reads
//! is read as absent, so that the fold ignores it and the checks report it; it never makes
//! the line malformed. Only JSON that does not parse, a key given twice in the envelope or in
//! a body object this module reads, or a broken envelope does. A task vector is summarized
//! while it is read, never built as a `serde_json::Value` tree.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::event::{
    Envelope, Head, List, OUTCOMES, Obj, PURPOSES, STAMPED_FIELDS, Scalar, Status, VectorSummary,
    check_genid, genid_generation, json_error, present, scalars_are, scores_agree, types,
};

/// A string field; another JSON type reads as `None`.
fn opt_str<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Scalar::deserialize(d).map(Scalar::into_string)
}

/// A `cost_usd`: a finite number ≥ 0, else `None`.
fn opt_cost<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Scalar::deserialize(d).map(|s| s.nonneg_finite())
}

/// An object field (kept as a map: annotations are small and free-form); another JSON type
/// reads as `None`.
fn opt_object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Map<String, Value>>, D::Error> {
    Obj::<Map<String, Value>>::deserialize(d).map(|o| match o {
        Obj::Is(m) => Some(m),
        Obj::Not => None,
    })
}

/// The cross-generation comparability key of generation zero.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FixedIdentity {
    pub evaluator_fingerprint: String,
    pub task_set_hash: String,
    pub runtime_fingerprint: String,
}

impl FixedIdentity {
    pub const FIELDS: [&'static str; 3] = [
        "evaluator_fingerprint",
        "task_set_hash",
        "runtime_fingerprint",
    ];

    /// From an object with the three fields as non-empty strings.
    pub fn from_value(v: &Value) -> Option<FixedIdentity> {
        Self::from_stamp(v.as_object()?)
    }

    pub fn from_stamp(m: &Map<String, Value>) -> Option<FixedIdentity> {
        let s = |k: &str| {
            m.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Some(FixedIdentity {
            evaluator_fingerprint: s("evaluator_fingerprint")?,
            task_set_hash: s("task_set_hash")?,
            runtime_fingerprint: s("runtime_fingerprint")?,
        })
    }

    pub fn to_value(&self) -> Value {
        serde_json::json!({
            "evaluator_fingerprint": self.evaluator_fingerprint,
            "task_set_hash": self.task_set_hash,
            "runtime_fingerprint": self.runtime_fingerprint,
        })
    }
}

/// A genesis body's `fixed_identity` as given: `None` when it is not a valid identity
/// object (which the audit reports when an evaluation gives one).
#[derive(Debug, Clone, PartialEq)]
pub struct IdentityField(pub Option<FixedIdentity>);

impl<'de> Deserialize<'de> for IdentityField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        opt_object(d).map(|m| IdentityField(m.as_ref().and_then(FixedIdentity::from_stamp)))
    }
}

impl Serialize for IdentityField {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// Seq 0: `{"experiment": id, "fixed_identity"?: {...}, ...}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenesisBody {
    #[serde(default, deserialize_with = "opt_str")]
    pub experiment: Option<String>,
    /// `None`: the key is absent.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub fixed_identity: Option<IdentityField>,
    #[serde(
        default,
        deserialize_with = "opt_cost",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_usd: Option<f64>,
    /// The recipe's experiment name (written by `init`; not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
}

/// A candidate generation was committed and tagged: `{"parent", "commit", ...}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerationBody {
    #[serde(default, deserialize_with = "opt_str")]
    pub parent: Option<String>,
    #[serde(default, deserialize_with = "opt_str")]
    pub commit: Option<String>,
    /// The committed tree (written by the host; not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    /// What the commit changed against the parent's, path by path (not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<PathChange>>,
    /// The paths mutate claimed to change: a claim only (not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub claimed: Option<Vec<String>>,
    /// Mutate's notes, redacted and clipped (not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub notes: Option<Vec<String>>,
    /// The usage mutate reported for itself: a claim only (not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub usage_claimed: Option<UsageClaim>,
    #[serde(
        default,
        deserialize_with = "opt_cost",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_usd: Option<f64>,
    /// The model calls `cost_usd` includes (not read back here).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<Vec<String>>,
    /// The identity of each operator the attempt ran (not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub operators: Option<Value>,
}

/// How a commit changed one path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathChange {
    pub path: String,
    pub change: ChangeKind,
}

/// `added`, `modified` or `deleted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// The usage an operator reported for itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageClaim {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub usd: f64,
}

/// The gate's decision: `{"verdict": "keep"|"discard", "reason": str}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GateBody {
    #[serde(default, deserialize_with = "opt_str")]
    pub verdict: Option<String>,
    #[serde(
        default,
        deserialize_with = "opt_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub reason: Option<String>,
    /// The identity of the gate operator that decided (not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub operator: Option<Value>,
    #[serde(
        default,
        deserialize_with = "opt_cost",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_usd: Option<f64>,
}

impl GateBody {
    /// `keep` or `discard`; anything else the fold ignores and the checks refuse.
    pub fn verdict(&self) -> Option<&str> {
        self.verdict
            .as_deref()
            .filter(|v| matches!(*v, "keep" | "discard"))
    }
}

/// A terminal status: `{"status", "failure_stage"?, "reason"?, "parent"?}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusBody {
    /// As written: the audit names a status that is not terminal.
    #[serde(default, deserialize_with = "opt_str")]
    pub status: Option<String>,
    #[serde(
        default,
        deserialize_with = "opt_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub failure_stage: Option<String>,
    #[serde(
        default,
        deserialize_with = "opt_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub reason: Option<String>,
    /// An attempt that stopped before it was committed names its parent here.
    #[serde(
        default,
        deserialize_with = "opt_str",
        skip_serializing_if = "Option::is_none"
    )]
    pub parent: Option<String>,
    /// The tree a candidate rejected after its snapshot proposed, kept on
    /// `refs/evolve/proposed/<genid>` (not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub proposed_tree: Option<String>,
    #[serde(
        default,
        deserialize_with = "opt_cost",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_usd: Option<f64>,
    /// The model calls `cost_usd` includes (not read back here).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<Vec<String>>,
    /// The identity of each operator the attempt ran up to its stop (not read back).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub operators: Option<Value>,
}

impl StatusBody {
    /// A status event's body: `status`, `failure_stage` when a stage ended the attempt,
    /// the `reason`, and the `parent` of an attempt that stopped before its commit.
    pub fn new(status: Status, stage: Option<&str>, reason: &str, parent: Option<&str>) -> Self {
        StatusBody {
            status: Some(status.as_str().to_string()),
            failure_stage: stage.map(str::to_string),
            reason: Some(reason.to_string()),
            parent: parent.map(str::to_string),
            ..StatusBody::default()
        }
    }

    /// The status if it is one of [`TERMINAL_STATUSES`](crate::TERMINAL_STATUSES).
    pub fn terminal_status(&self) -> Option<Status> {
        self.status.as_deref().and_then(Status::parse)
    }
}

/// Record-stage annotations: `{"annotations": {...}}`, filtered by the allowlist when folded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordBody {
    #[serde(default, deserialize_with = "opt_object")]
    pub annotations: Option<Map<String, Value>>,
    /// Annotation keys the allowlist refused (not read back: the fold refuses them again).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<Vec<String>>,
    /// Why record produced no annotations (not read back here).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(
        default,
        deserialize_with = "opt_cost",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_usd: Option<f64>,
}

/// Any other event type (a repair, a lifecycle's own events): only its spend is folded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OtherBody {
    #[serde(
        default,
        deserialize_with = "opt_cost",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost_usd: Option<f64>,
}

/// An event body the host writes: the event type it is the body of, and the JSON object
/// it is written as.
pub trait EventBody: Serialize {
    const TYPE: &'static str;

    /// The body as the archive's `append` takes it (a struct is always an object).
    fn to_map(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        }
    }
}

impl EventBody for GenesisBody {
    const TYPE: &'static str = types::GENESIS;
}
impl EventBody for GenerationBody {
    const TYPE: &'static str = types::GENERATION;
}
impl EventBody for GateBody {
    const TYPE: &'static str = types::GATE;
}
impl EventBody for StatusBody {
    const TYPE: &'static str = types::STATUS;
}
impl EventBody for RecordBody {
    const TYPE: &'static str = types::RECORD;
}

/// A `repair` note: what the host did or charged outside the transaction's own events
/// (the fold reads only its `cost_usd`, as [`OtherBody`]). Each kind of note sets the
/// fields it has; the others are left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RepairBody {
    pub what: String,
    /// Receipts re-signed when the archive was opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resigned_seqs: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torn_archive_tail: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torn_receipts_tail: Option<bool>,
    /// A stale child worktree (`runs/worktrees/…`) and where an edited one was moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_to: Option<String>,
    /// The evaluation attempt that reused `trials` of interrupted ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trials: Option<Vec<ReusedTrial>>,
    /// The stage whose spend the note charges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Model calls of a killed run: how many were answered, how many in flight, and the
    /// logs they were written to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logs: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl EventBody for RepairBody {
    const TYPE: &'static str = types::REPAIR;
}

/// A framework-run evaluation as the host writes it: the [`STAMPED_FIELDS`], then what
/// goes with them. `V` is the task vector's type (the engine's, which this crate does not
/// know); the fold reads the same line back through [`check_stamp`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvaluationBody<V: Serialize> {
    pub candidate_commit: String,
    pub candidate_tree: String,
    pub parent: Option<String>,
    pub generation: u64,
    pub evaluator_fingerprint: String,
    pub task_set_hash: String,
    pub runtime_fingerprint: String,
    pub contract_id: String,
    pub purpose: String,
    pub outcome: String,
    pub trials: usize,
    pub expected_trials: u32,
    pub scoreable_trials: u32,
    pub task_vector: V,
    pub score: Option<f64>,
    pub cost_usd: f64,
    pub timings: EvaluationTimings,
    pub attempt: u64,
    /// The interrupted attempts whose completed trials this one reused.
    pub source_attempts: Vec<u64>,
    /// The tasks the evaluation ran when the protocol samples its split
    /// (`evaluator.tasks_per_round`), sorted by name; absent when it ran the whole split.
    /// Signed with the line, outside the folded stamp: `evolve verify` recomputes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<String>>,
    /// The ledger ids of the agent's model calls the evaluation's trials made through the
    /// host's gateway, already in `cost_usd` (the model ledger's key: a call listed by a
    /// certified event is never charged again). Absent when the agent made none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<Vec<String>>,
    pub reason: String,
}

impl<V: Serialize> EventBody for EvaluationBody<V> {
    const TYPE: &'static str = types::EVALUATION;
}

/// How long an evaluation took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvaluationTimings {
    pub wall_s: f64,
}

/// A trial an evaluation attempt took over from an interrupted one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReusedTrial {
    pub task: String,
    pub repetition: u32,
    pub from_attempt: u64,
}

/// One generation's select decision, archived before its children start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SelectBody {
    pub generation: u32,
    pub parents: Vec<String>,
    /// `gen/<id>`: the commit whose select chose.
    pub operator_from: String,
    /// Why the champion's select did not choose, when gen/0's did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<SelectFallback>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<Value>,
    /// The recipe the generation runs under.
    pub recipe_sha256: String,
}

impl EventBody for SelectBody {
    const TYPE: &'static str = types::SELECT;
}

/// The select that gave no parents, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectFallback {
    pub from: String,
    pub reason: String,
}

/// Reflect's playbook operations, and what its model calls cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PlaybookBody {
    pub ops: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<Vec<String>>,
}

impl EventBody for PlaybookBody {
    const TYPE: &'static str = types::PLAYBOOK;
}

/// An agent driver's call after a generation, whatever came of it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DriverRevisionBody {
    pub after_generation: u32,
    pub driver: Value,
    pub previous_recipe_sha256: String,
    pub cost_usd: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<Vec<String>>,
    /// `accepted`, `refused`, `kept` or `failed`.
    pub outcome: String,
    pub accepted: bool,
    /// The host's reasons for a refusal, or why the call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The reason the driver gave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed: Option<Vec<String>>,
    /// The recipe in force after the call.
    pub recipe_sha256: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipe: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebound: Option<Value>,
}

impl EventBody for DriverRevisionBody {
    const TYPE: &'static str = types::DRIVER_REVISION;
}

/// A driver session's sealed acceptance: gen/0 and the final champion on the sealed split.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AcceptanceBody {
    pub split: String,
    pub baseline: Value,
    pub champion: Value,
    /// The champion's score minus the baseline's, or `null`.
    pub delta: Value,
    pub recipe_sha256: String,
}

impl EventBody for AcceptanceBody {
    const TYPE: &'static str = types::ACCEPTANCE;
}

/// One trial of a task vector (`None`: the key is absent).
#[derive(Deserialize)]
struct Trial<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    trial: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    status: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    reward: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    timeout_owner: Option<Scalar<'a>>,
}

#[derive(Deserialize)]
struct Task<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    trials: Option<List<Obj<Trial<'a>>>>,
}

#[derive(Deserialize)]
struct TaskVector<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    schema_version: Option<Scalar<'a>>,
    /// By name, in key order (a name given twice: the last one, as a JSON map keeps it).
    #[serde(borrow, default, deserialize_with = "present")]
    tasks: Option<Obj<BTreeMap<String, Obj<Task<'a>>>>>,
}

/// `timings`: whether it is an object of finite numbers ≥ 0 (seconds).
struct Timings(bool);

impl<'de> Deserialize<'de> for Timings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Timings;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Timings, A::Error> {
                // A key given twice counts once, with its last value (as a JSON map keeps it).
                let mut ok = BTreeMap::new();
                while let Some((k, v)) = map.next_entry::<String, Scalar<'_>>()? {
                    ok.insert(k, v.nonneg_finite().is_some());
                }
                Ok(Timings(ok.into_values().all(|ok| ok)))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> Result<Timings, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Timings(false))
            }
            scalars_are!(Timings, Timings(false));
        }
        d.deserialize_any(V)
    }
}

/// A certified evaluation's body as read: the [`STAMPED_FIELDS`] (`None`: absent; the task
/// vector summarized) and the free `reason`.
#[derive(Deserialize)]
struct StampBody<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    candidate_commit: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    candidate_tree: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    parent: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    generation: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    evaluator_fingerprint: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    task_set_hash: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    runtime_fingerprint: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    contract_id: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    purpose: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    outcome: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    trials: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    expected_trials: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    scoreable_trials: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    task_vector: Option<Obj<TaskVector<'a>>>,
    #[serde(borrow, default, deserialize_with = "present")]
    score: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    cost_usd: Option<Scalar<'a>>,
    #[serde(default, deserialize_with = "present")]
    timings: Option<Timings>,
    #[serde(borrow, default, deserialize_with = "present")]
    attempt: Option<Scalar<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    source_attempts: Option<List<Scalar<'a>>>,
    #[serde(default, deserialize_with = "opt_str")]
    reason: Option<String>,
}

impl StampBody<'_> {
    fn has(&self, field: &str) -> bool {
        match field {
            "candidate_commit" => self.candidate_commit.is_some(),
            "candidate_tree" => self.candidate_tree.is_some(),
            "parent" => self.parent.is_some(),
            "generation" => self.generation.is_some(),
            "evaluator_fingerprint" => self.evaluator_fingerprint.is_some(),
            "task_set_hash" => self.task_set_hash.is_some(),
            "runtime_fingerprint" => self.runtime_fingerprint.is_some(),
            "contract_id" => self.contract_id.is_some(),
            "purpose" => self.purpose.is_some(),
            "outcome" => self.outcome.is_some(),
            "trials" => self.trials.is_some(),
            "expected_trials" => self.expected_trials.is_some(),
            "scoreable_trials" => self.scoreable_trials.is_some(),
            "task_vector" => self.task_vector.is_some(),
            "score" => self.score.is_some(),
            "cost_usd" => self.cost_usd.is_some(),
            "timings" => self.timings.is_some(),
            "attempt" => self.attempt.is_some(),
            "source_attempts" => self.source_attempts.is_some(),
            _ => false,
        }
    }
}

/// Why one trial is not usable.
enum TrialErr {
    NotObject,
    Index,
    Status(String),
    Reward,
    NoReward,
}

enum TrialEffect {
    Complete(f64),
    AgentTimeout,
    Other,
}

/// What one trial contributes.
fn trial_effect(t: &Obj<Trial<'_>>) -> Result<TrialEffect, TrialErr> {
    let Obj::Is(t) = t else {
        return Err(TrialErr::NotObject);
    };
    t.trial
        .as_ref()
        .and_then(Scalar::as_u64)
        .ok_or(TrialErr::Index)?;
    let status = t.status.as_ref().and_then(Scalar::as_str).unwrap_or("");
    if !OUTCOMES.contains(&status) {
        return Err(TrialErr::Status(status.to_string()));
    }
    let reward = match &t.reward {
        None | Some(Scalar::Null) => None,
        Some(r) => Some(
            r.as_f64()
                .filter(|x| x.is_finite())
                .ok_or(TrialErr::Reward)?,
        ),
    };
    Ok(match (status, reward) {
        ("benchmark_complete", Some(r)) => TrialEffect::Complete(r),
        ("benchmark_complete", None) => return Err(TrialErr::NoReward),
        ("timeout", _) if t.timeout_owner.as_ref().and_then(Scalar::as_str) == Some("agent") => {
            TrialEffect::AgentTimeout
        }
        _ => TrialEffect::Other,
    })
}

/// The summary of a task vector: tasks in key order, trials in list order; the first unusable
/// trial is the error.
fn summarize(v: &Obj<TaskVector<'_>>) -> Result<VectorSummary, String> {
    let Obj::Is(v) = v else {
        return Err("task_vector must be an object".into());
    };
    if v.schema_version.as_ref().and_then(Scalar::as_u64) != Some(1) {
        return Err("task_vector.schema_version must be 1".into());
    }
    let Some(Obj::Is(tasks)) = &v.tasks else {
        return Err("task_vector.tasks must be an object".into());
    };
    let mut s = VectorSummary::default();
    for (name, task) in tasks {
        let Obj::Is(Task {
            trials: Some(List::Is(trials)),
        }) = task
        else {
            return Err(format!(
                "task_vector.tasks[{name:?}].trials must be an array"
            ));
        };
        for (i, t) in trials.iter().enumerate() {
            let at = format!("task_vector.tasks[{name:?}].trials[{i}]");
            match trial_effect(t) {
                Ok(TrialEffect::Complete(r)) => {
                    s.complete += 1;
                    s.reward_sum += r;
                }
                Ok(TrialEffect::AgentTimeout) => s.agent_timeouts += 1,
                Ok(TrialEffect::Other) => {}
                Err(TrialErr::NotObject) => return Err(format!("{at} must be an object")),
                Err(TrialErr::Index) => {
                    return Err(format!("{at}.trial must be a non-negative integer"));
                }
                Err(TrialErr::Status(st)) => {
                    return Err(format!("{at}.status {st:?} is not a trial status"));
                }
                Err(TrialErr::Reward) => {
                    return Err(format!("{at}.reward must be a finite number or null"));
                }
                Err(TrialErr::NoReward) => {
                    return Err(format!("{at}: a benchmark_complete trial needs a reward"));
                }
            }
            s.trials += 1;
        }
    }
    Ok(s)
}

/// Parse a `task_vector` stamped value.
pub fn summarize_task_vector(v: &Value) -> Result<VectorSummary, String> {
    Obj::<TaskVector<'_>>::deserialize(v)
        .map_err(|e| e.to_string())
        .and_then(|tv| summarize(&tv))
}

fn is_object_id(v: Option<&str>) -> bool {
    v.is_some_and(|s| {
        (s.len() == 40 || s.len() == 64)
            && s.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    })
}

/// Every problem with the stamped fields of an evaluation event body (empty when valid):
/// presence, types, allowed values, and the score recomputed from the task vector.
pub fn check_stamp(genid: Option<&str>, body: &Map<String, Value>) -> Vec<String> {
    match StampBody::deserialize(body.into_deserializer()) {
        Ok(stamp) => stamp_problems(genid, &stamp),
        Err(e) => vec![format!("the body cannot be read: {e}")],
    }
}

fn stamp_problems(genid: Option<&str>, b: &StampBody<'_>) -> Vec<String> {
    let mut p = Vec::new();
    let Some(genid) = genid else {
        p.push("an evaluation event needs a genid".into());
        return p;
    };
    for f in STAMPED_FIELDS {
        if !b.has(f) {
            p.push(format!("stamped field `{f}` is missing"));
        }
    }
    if !p.is_empty() {
        return p;
    }
    let s = |v: &Option<Scalar<'_>>| v.as_ref().and_then(Scalar::as_str).map(str::to_string);
    let u = |v: &Option<Scalar<'_>>| v.as_ref().and_then(Scalar::as_u64);
    for (k, v) in [
        ("candidate_commit", &b.candidate_commit),
        ("candidate_tree", &b.candidate_tree),
    ] {
        if !is_object_id(s(v).as_deref()) {
            p.push(format!(
                "`{k}` must be a git object id (40 or 64 lower-case hex)"
            ));
        }
    }
    match &b.parent {
        Some(Scalar::Null) => {}
        Some(Scalar::Str(g)) if check_genid(g).is_ok() => {}
        _ => p.push("`parent` must be a genid or null".into()),
    }
    match u(&b.generation) {
        None => p.push("`generation` must be a non-negative integer".into()),
        Some(n) => {
            if let Some(g) = genid_generation(genid).filter(|g| *g != n) {
                p.push(format!(
                    "`generation` is {n} but genid {genid:?} names generation {g}"
                ));
            }
        }
    }
    for (k, v) in [
        ("evaluator_fingerprint", &b.evaluator_fingerprint),
        ("task_set_hash", &b.task_set_hash),
        ("runtime_fingerprint", &b.runtime_fingerprint),
        ("contract_id", &b.contract_id),
    ] {
        if !s(v).is_some_and(|v| !v.is_empty() && v.len() <= 256) {
            p.push(format!("`{k}` must be a non-empty string"));
        }
    }
    if !s(&b.purpose).is_some_and(|v| PURPOSES.contains(&v.as_str())) {
        p.push(format!("`purpose` must be one of {PURPOSES:?}"));
    }
    let outcome = s(&b.outcome).filter(|v| OUTCOMES.contains(&v.as_str()));
    if outcome.is_none() {
        p.push(format!("`outcome` must be one of {OUTCOMES:?}"));
    }
    let (trials, expected, scoreable) =
        (u(&b.trials), u(&b.expected_trials), u(&b.scoreable_trials));
    for (k, v) in [
        ("trials", trials),
        ("expected_trials", expected),
        ("scoreable_trials", scoreable),
    ] {
        if v.is_none() {
            p.push(format!("`{k}` must be a non-negative integer"));
        }
    }
    let vector = b.task_vector.as_ref().map(summarize);
    if let Some(Err(e)) = &vector {
        p.push(e.clone());
    }
    let complete = outcome.as_deref() == Some("benchmark_complete");
    let score = b.score.as_ref();
    if let (Some(trials), Some(expected), Some(scoreable), Some(Ok(vs))) =
        (trials, expected, scoreable, &vector)
    {
        count_problems(&mut p, (trials, expected, scoreable), vs, complete, score);
    }
    if !complete && outcome.is_some() && !matches!(score, Some(Scalar::Null)) {
        p.push("`score` must be null unless the outcome is benchmark_complete".into());
    }
    if b.cost_usd
        .as_ref()
        .and_then(Scalar::nonneg_finite)
        .is_none()
    {
        p.push("`cost_usd` must be a finite number ≥ 0".into());
    }
    if !b.timings.as_ref().is_some_and(|t| t.0) {
        p.push("`timings` must be an object of finite numbers ≥ 0 (seconds)".into());
    }
    match u(&b.attempt).filter(|a| *a >= 1) {
        None => p.push("`attempt` must be an integer ≥ 1".into()),
        Some(a) => {
            let earlier = |x: &Scalar<'_>| x.as_u64().is_some_and(|x| x >= 1 && x < a);
            if !matches!(&b.source_attempts, Some(List::Is(v)) if v.iter().all(earlier)) {
                p.push("`source_attempts` must be a list of earlier attempt numbers".into());
            }
        }
    }
    p
}

/// The counts against the task vector, and the score recomputed from it.
fn count_problems(
    p: &mut Vec<String>,
    (trials, expected, scoreable): (u64, u64, u64),
    vs: &VectorSummary,
    complete: bool,
    score: Option<&Scalar<'_>>,
) {
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
    if !complete {
        return;
    }
    if expected == 0 || trials > expected || scoreable == 0 {
        p.push(format!(
            "a benchmark_complete evaluation needs 0 < scoreable ≤ trials ≤ expected (got {scoreable}, {trials}, {expected})"
        ));
        return;
    }
    let recomputed = vs.reward_sum / expected as f64;
    match score.filter(|x| x.is_number()).and_then(Scalar::as_f64) {
        Some(x) if x.is_finite() && scores_agree(x, recomputed) => {}
        Some(x) if x.is_finite() => p.push(format!(
            "`score` is {x} but Σ scoreable rewards / expected_trials = {recomputed}"
        )),
        _ => p.push("`score` must be a finite number for a benchmark_complete evaluation".into()),
    }
}

/// The fields the fold, eligibility and the champion read from a stamp, extracted once.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct StampFacts {
    pub(crate) purpose: Option<Box<str>>,
    pub(crate) outcome: Option<Box<str>>,
    pub(crate) candidate_commit: Option<Box<str>>,
    pub(crate) evaluator_fingerprint: Option<Box<str>>,
    pub(crate) task_set_hash: Option<Box<str>>,
    pub(crate) runtime_fingerprint: Option<Box<str>>,
    /// `score` if it is a JSON number.
    pub(crate) score: Option<f64>,
    /// `cost_usd` as a number (unfiltered).
    pub(crate) cost_usd: Option<f64>,
}

/// An evaluation body as the fold needs it: the stamp's facts and problems ([`check_stamp`]),
/// the stamp's `parent` and the free `reason`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Evaluated {
    pub(crate) facts: StampFacts,
    pub(crate) problems: Vec<String>,
    pub(crate) parent: Option<String>,
    pub(crate) reason: Option<String>,
}

impl Evaluated {
    fn of(genid: Option<&str>, b: StampBody<'_>) -> Evaluated {
        let s = |v: &Option<Scalar<'_>>| v.as_ref().and_then(Scalar::as_str).map(Box::from);
        let facts = StampFacts {
            purpose: s(&b.purpose),
            outcome: s(&b.outcome),
            candidate_commit: s(&b.candidate_commit),
            evaluator_fingerprint: s(&b.evaluator_fingerprint),
            task_set_hash: s(&b.task_set_hash),
            runtime_fingerprint: s(&b.runtime_fingerprint),
            score: b
                .score
                .as_ref()
                .filter(|x| x.is_number())
                .and_then(Scalar::as_f64),
            cost_usd: b.cost_usd.as_ref().and_then(Scalar::as_f64),
        };
        Evaluated {
            facts,
            problems: stamp_problems(genid, &b),
            parent: b.parent.and_then(Scalar::into_string),
            reason: b.reason,
        }
    }

    /// The stamp's facts of a body given as a map (see [`crate::Stamp`]).
    pub(crate) fn of_map(genid: Option<&str>, body: &Map<String, Value>) -> Evaluated {
        match StampBody::deserialize(body.into_deserializer()) {
            Ok(b) => Evaluated::of(genid, b),
            Err(e) => Evaluated {
                facts: StampFacts::default(),
                problems: vec![format!("the body cannot be read: {e}")],
                parent: None,
                reason: None,
            },
        }
    }

    /// `cost_usd` if it is a finite number ≥ 0.
    pub(crate) fn cost_usd(&self) -> Option<f64> {
        self.facts.cost_usd.filter(|c| c.is_finite() && *c >= 0.0)
    }
}

/// An event's body, read as the type of its event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Body {
    Genesis(GenesisBody),
    Generation(GenerationBody),
    Evaluation(Box<Evaluated>),
    Gate(GateBody),
    Status(StatusBody),
    Record(RecordBody),
    Other(OtherBody),
}

impl Body {
    /// The body's `cost_usd` if it is a finite number ≥ 0.
    pub(crate) fn cost_usd(&self) -> Option<f64> {
        match self {
            Body::Genesis(b) => b.cost_usd,
            Body::Generation(b) => b.cost_usd,
            Body::Evaluation(e) => e.cost_usd(),
            Body::Gate(b) => b.cost_usd,
            Body::Status(b) => b.cost_usd,
            Body::Record(b) => b.cost_usd,
            Body::Other(b) => b.cost_usd,
        }
    }

    /// The body of an event given as a map (an [`Event`](crate::Event) built in memory): the
    /// same typed bodies as [`read_line`].
    pub(crate) fn of_map(event_type: &str, genid: Option<&str>, body: &Map<String, Value>) -> Body {
        fn typed<'a, T: Deserialize<'a> + Default>(body: &'a Map<String, Value>) -> T {
            // A map has no repeated key, and every field reads leniently: this cannot fail.
            T::deserialize(body.into_deserializer()).unwrap_or_default()
        }
        match event_type {
            types::GENESIS => Body::Genesis(typed(body)),
            types::GENERATION => Body::Generation(typed(body)),
            types::EVALUATION => Body::Evaluation(Box::new(Evaluated::of_map(genid, body))),
            types::GATE => Body::Gate(typed(body)),
            types::STATUS => Body::Status(typed(body)),
            types::RECORD => Body::Record(typed(body)),
            _ => Body::Other(typed(body)),
        }
    }
}

/// One archive line read: the checked envelope and the typed body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line<'a> {
    pub(crate) head: Head<'a>,
    pub(crate) body: Body,
}

impl Line<'_> {
    pub(crate) fn genid(&self) -> Option<&str> {
        self.head.genid.as_deref()
    }
}

/// Read one archive line (its bytes without the newline): the one reader of the archive,
/// used by [`Archive::open`](crate::Archive::open), every append (the line is read back
/// before it is written) and [`verify`](crate::verify()).
///
/// The envelope is read first with the body skipped (its type names the body's struct), then
/// again with the body of that type; neither pass builds a `Value` tree.
pub(crate) fn read_line(bytes: &[u8]) -> Result<Line<'_>, String> {
    let (head, IgnoredAny) = serde_json::from_slice::<Envelope<'_, IgnoredAny>>(bytes)
        .map_err(|e| json_error(&e))?
        .check()?;
    fn typed<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
        let envelope: Envelope<'a, T> =
            serde_json::from_slice(bytes).map_err(|e| json_error(&e))?;
        envelope.check().map(|(_, body)| body)
    }
    let body = match head.event_type.as_ref() {
        types::GENESIS => Body::Genesis(typed(bytes)?),
        types::GENERATION => Body::Generation(typed(bytes)?),
        types::EVALUATION => {
            let stamp: StampBody<'_> = typed(bytes)?;
            Body::Evaluation(Box::new(Evaluated::of(head.genid.as_deref(), stamp)))
        }
        types::GATE => Body::Gate(typed(bytes)?),
        types::STATUS => Body::Status(typed(bytes)?),
        types::RECORD => Body::Record(typed(bytes)?),
        _ => Body::Other(typed(bytes)?),
    };
    Ok(Line { head, body })
}

/// Canonical form as the audit checks it: the line is exactly the RFC 8785 bytes of its JSON
/// value. The only place lines are read as `serde_json::Value` trees: the canonical bytes
/// must match what was signed.
pub(crate) fn is_canonical(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes)
        .is_ok_and(|v| crate::canonical::canonical_bytes(&v) == bytes)
}

/// `Cow` of a known event type without an allocation.
pub(crate) fn type_name(t: &str) -> Cow<'static, str> {
    const KNOWN: [&str; 7] = [
        types::GENESIS,
        types::GENERATION,
        types::EVALUATION,
        types::GATE,
        types::RECORD,
        types::STATUS,
        types::REPAIR,
    ];
    match KNOWN.iter().find(|k| **k == t) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(t.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(body: Value, ty: &str) -> Vec<u8> {
        let v = json!({"seq": 0, "prev": "0".repeat(64), "type": ty, "genid": "1",
            "at": "2026-01-31T12:00:00Z", "body": body});
        crate::canonical::canonical_bytes(&v)
    }

    #[test]
    fn a_field_of_another_type_reads_as_absent_not_malformed() {
        let bytes = line(json!({"verdict": 5, "reason": ["x"]}), "gate");
        let l = read_line(&bytes).unwrap();
        assert_eq!(l.body, Body::Gate(GateBody::default()));
    }

    #[test]
    fn a_key_given_twice_in_a_read_body_is_malformed() {
        let bytes = br#"{"at":"2026-01-31T12:00:00Z","body":{"verdict":"keep","verdict":"discard"},"genid":"1","prev":"0000000000000000000000000000000000000000000000000000000000000000","seq":1,"type":"gate"}"#;
        let e = read_line(bytes).unwrap_err();
        assert!(e.contains("duplicate field `verdict`"), "{e}");
    }

    #[test]
    fn the_envelope_names_what_is_wrong() {
        let mut v: Value = serde_json::from_slice(&line(json!({}), "gate")).unwrap();
        v["genid"] = json!(3);
        let e = read_line(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert_eq!(e, "`genid` must be a string or null");
        v["genid"] = json!(null);
        v["extra"] = json!(1);
        let e = read_line(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(
            e.starts_with("not a well-formed event: unknown field `extra`"),
            "{e}"
        );
        assert!(read_line(b"{").unwrap_err().starts_with("not valid JSON"));
    }

    #[test]
    fn bodies_round_trip_through_their_structs() {
        let gate = GateBody {
            verdict: Some("keep".into()),
            reason: Some("better".into()),
            ..GateBody::default()
        };
        let v = serde_json::to_value(&gate).unwrap();
        assert_eq!(v, json!({"verdict": "keep", "reason": "better"}));
        let back = Body::of_map(types::GATE, Some("1"), v.as_object().unwrap());
        assert_eq!(back, Body::Gate(gate));
    }

    #[test]
    fn a_status_reads_as_its_enum_and_another_name_as_none() {
        let bytes = line(json!({"status": "rejected_validation"}), "status");
        let Body::Status(s) = read_line(&bytes).unwrap().body else {
            panic!("a status body reads as one");
        };
        assert_eq!(s.terminal_status(), Some(Status::RejectedValidation));
        assert_eq!(
            serde_json::to_value(&s).unwrap()["status"],
            json!("rejected_validation")
        );
        // Not a terminal status: none, as when statuses were strings filtered by the list,
        // and kept as written for the audit to name.
        let bytes = line(json!({"status": "rejected"}), "status");
        let Body::Status(s) = read_line(&bytes).unwrap().body else {
            panic!("a status body reads as one");
        };
        assert_eq!(s.terminal_status(), None);
        assert_eq!(s.status.as_deref(), Some("rejected"));
    }

    #[test]
    fn what_only_the_host_writes_is_written_and_passed_over_when_read() {
        let status = StatusBody {
            proposed_tree: Some("ab".repeat(20)),
            cost_usd: Some(0.25),
            model_calls: Some(vec!["c1".into()]),
            ..StatusBody::new(
                Status::RejectedValidation,
                Some("validate"),
                "no",
                Some("3"),
            )
        };
        let map = status.to_map();
        assert_eq!(
            Value::Object(map.clone()),
            json!({"status": "rejected_validation", "failure_stage": "validate", "reason": "no",
                "parent": "3", "proposed_tree": "ab".repeat(20), "cost_usd": 0.25,
                "model_calls": ["c1"]})
        );
        let Body::Status(back) = Body::of_map(types::STATUS, Some("4"), &map) else {
            panic!("a status body reads as one");
        };
        assert_eq!(back.terminal_status(), Some(Status::RejectedValidation));
        assert_eq!((back.proposed_tree, back.model_calls), (None, None));
        assert_eq!(back.cost_usd, Some(0.25));
    }

    #[test]
    fn a_key_only_the_host_writes_may_repeat_as_before() {
        // The reader passes over writer-only fields, so their duplicates stay as harmless
        // as any unknown key's (verify's canonical-form check reports them).
        let bytes = br#"{"at":"2026-01-31T12:00:00Z","body":{"tree":"a","tree":"b","verdict":"keep"},"genid":"1","prev":"0000000000000000000000000000000000000000000000000000000000000000","seq":1,"type":"generation"}"#;
        assert!(read_line(bytes).is_ok());
    }
}
