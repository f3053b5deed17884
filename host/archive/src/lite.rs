//! Reading archive lines without building `serde_json::Value` trees.
//!
//! The writer's `open` reads every line of the archive; building a `Value` tree per line (a
//! task vector is hundreds of small maps and strings under `preserve_order`) and freeing it
//! again dominated its cost. This module reads a line in one pass with serde visitors that keep
//! only what the structural check and the fold need: the envelope's scalars, the scalar stamped
//! fields, a running summary of the task vector, and the small `annotations` /
//! `fixed_identity` objects as values.
//!
//! **Same acceptance as `Value`.** Every value is read with `deserialize_any` and every key
//! with `deserialize_str`, exactly as `serde_json::Value`'s own `Deserialize` does, and no
//! visitor here ever returns an error of its own; so a line is valid JSON here if and only if
//! `serde_json::from_slice::<Value>` accepts it (same syntax, escape, number-range and
//! nesting-depth rules, same trailing-characters check). The line's UTF-8 is checked once up
//! front (then `from_str` skips the per-string check, the only difference from `from_slice`);
//! a line that is not UTF-8 goes to the fallback.
//!
//! **Fallback.** Anything this reader does not model exactly — a key that appears twice in an
//! object it interprets (a `Value` map keeps the last one), a line that is not a well-formed
//! event, timings that are not all valid — makes [`read_line`] answer [`FastRead::Fallback`],
//! and the caller reads that line the straightforward way (`Value` + [`Event::from_json`]).
//! Lines the host writes are canonical JSON and never need the fallback.
//!
//! [`Event::from_json`]: crate::Event::from_json

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::canonical::{is_sha256_hex, unhex};
use crate::event::{StampView, TaskAcc, TaskErr, TrialFields, VectorSummary};
use crate::event::{check_event_type, check_genid, check_timestamp};

/// A JSON value seen by its shape: scalars kept (strings borrowed from the line when they
/// have no escapes), containers skipped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool(bool),
    Num(Number),
    Str(Cow<'a, str>),
    Array,
    Object,
}

impl<'a> Scalar<'a> {
    pub(crate) fn lite(&self) -> Lite<'_> {
        match self {
            Scalar::Null => Lite::Null,
            Scalar::Bool(b) => Lite::Bool(*b),
            Scalar::Num(n) => Lite::Num(n.clone()),
            Scalar::Str(s) => Lite::Str(s),
            Scalar::Array => Lite::Array,
            Scalar::Object => Lite::Object,
        }
    }
}

/// A borrowed view of a JSON value with `Value`'s accessor semantics.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lite<'b> {
    Null,
    Bool(bool),
    Num(Number),
    Str(&'b str),
    Array,
    Object,
}

impl<'b> Lite<'b> {
    pub(crate) fn of(v: &'b Value) -> Lite<'b> {
        match v {
            Value::Null => Lite::Null,
            Value::Bool(b) => Lite::Bool(*b),
            Value::Number(n) => Lite::Num(n.clone()),
            Value::String(s) => Lite::Str(s),
            Value::Array(_) => Lite::Array,
            Value::Object(_) => Lite::Object,
        }
    }
    /// `Value::as_str`.
    pub(crate) fn as_str(&self) -> Option<&'b str> {
        match self {
            Lite::Str(s) => Some(s),
            _ => None,
        }
    }
    /// `Value::as_u64`.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Lite::Num(n) => n.as_u64(),
            _ => None,
        }
    }
    /// `Value::as_f64`.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Lite::Num(n) => n.as_f64(),
            _ => None,
        }
    }
    pub(crate) fn is_number(&self) -> bool {
        matches!(self, Lite::Num(_))
    }
}

/// `v.filter(is_number).and_then(as_f64).filter(finite && ≥ 0)`.
pub(crate) fn nonneg_finite(v: Option<Lite<'_>>) -> Option<f64> {
    v.filter(Lite::is_number)
        .and_then(|x| x.as_f64())
        .filter(|x| x.is_finite() && *x >= 0.0)
}

// ---------------------------------------------------------------------------------------------
// Primitive visitors. None of them ever fails on its own: errors come from the parser only.

/// Skips any value (validating it exactly as `Value` would).
struct Skip;

impl<'de> DeserializeSeed<'de> for Skip {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        Skip.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Skip)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Key)?.is_some() {
            map.next_value_seed(Skip)?;
        }
        Ok(())
    }
}

/// An object key (read with `deserialize_str`, as `Value` reads keys).
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(s))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(s))
    }
}

/// A scalar (containers skipped).
struct ScalarSeed;

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = Scalar<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Scalar<'de>, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Num(i.into()))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Self::Value, E> {
        Ok(Scalar::Num(u.into()))
    }
    fn visit_f64<E>(self, x: f64) -> Result<Self::Value, E> {
        // As `Value`: a non-finite float becomes null.
        Ok(Number::from_f64(x).map_or(Scalar::Null, Scalar::Num))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(s)))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        ScalarSeed.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        SkipVisitor.visit_seq(seq).map(|_| Scalar::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        SkipVisitor.visit_map(map).map(|_| Scalar::Object)
    }
}

/// A full `Value` (for the small objects the fold keeps: annotations, fixed identity).
struct ValueSeed;

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        serde::Deserialize::deserialize(d)
    }
}

/// Implements the non-container half of a visitor whose non-matching inputs are skipped and
/// answered with `$other`.
macro_rules! other_scalars {
    ($other:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($other)
        }
    };
}

macro_rules! other_seq {
    ($other:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            SkipVisitor.visit_seq(seq).map(|_| $other)
        }
    };
}

macro_rules! other_map {
    ($other:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            SkipVisitor.visit_map(map).map(|_| $other)
        }
    };
}

/// Store `v` in `slot`; a second occurrence of the key asks for the fallback.
fn set<T>(slot: &mut Option<T>, v: T, fallback: &Cell<bool>) {
    if slot.is_some() {
        fallback.set(true);
    }
    *slot = Some(v);
}

// ---------------------------------------------------------------------------------------------
// The task vector, summarized while it is read.

/// `task_vector`: `Ok(summary)`, or the same error [`crate::event::summarize_task_vector`]
/// gives.
struct TaskVectorSeed<'f> {
    fallback: &'f Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for TaskVectorSeed<'_> {
    type Value = Result<VectorSummary, String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TaskVectorSeed<'_> {
    type Value = Result<VectorSummary, String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a task vector")
    }
    other_scalars!(Err("task_vector must be an object".into()));
    other_seq!(Err("task_vector must be an object".into()));
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut schema: Option<Scalar<'de>> = None;
        let mut tasks: Option<Tasks<'de>> = None;
        while let Some(k) = map.next_key_seed(Key)? {
            match k.as_ref() {
                "schema_version" => {
                    set(&mut schema, map.next_value_seed(ScalarSeed)?, self.fallback)
                }
                "tasks" => set(
                    &mut tasks,
                    map.next_value_seed(TasksSeed {
                        fallback: self.fallback,
                    })?,
                    self.fallback,
                ),
                _ => map.next_value_seed(Skip)?,
            }
        }
        if schema.as_ref().and_then(|s| s.lite().as_u64()) != Some(1) {
            return Ok(Err("task_vector.schema_version must be 1".into()));
        }
        let Some(Some((mut tasks, rewards))) = tasks else {
            return Ok(Err("task_vector.tasks must be an object".into()));
        };
        tasks.sort_by(|a, b| a.0.cmp(&b.0));
        if tasks.windows(2).any(|w| w[0].0 == w[1].0) {
            // A duplicate task name: `Value` keeps the last; let the fallback decide.
            self.fallback.set(true);
        }
        Ok(crate::event::aggregate_tasks(
            tasks.iter().map(|(n, t)| (n.as_ref(), t)),
            &rewards,
        ))
    }
}

/// `tasks`: `None` if not an object, else each task's accumulated trials (file order) and the
/// rewards they index.
struct TasksSeed<'f> {
    fallback: &'f Cell<bool>,
}

type Tasks<'de> = Option<(Vec<(Cow<'de, str>, TaskAcc)>, Vec<f64>)>;

impl<'de> DeserializeSeed<'de> for TasksSeed<'_> {
    type Value = Tasks<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TasksSeed<'_> {
    type Value = Tasks<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the tasks of a task vector")
    }
    other_scalars!(None);
    other_seq!(None);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut tasks = Vec::new();
        let mut rewards = Vec::new();
        while let Some(name) = map.next_key_seed(Key)? {
            let acc = map.next_value_seed(TaskSeed {
                fallback: self.fallback,
                rewards: &mut rewards,
            })?;
            tasks.push((name, acc));
        }
        Ok(Some((tasks, rewards)))
    }
}

/// One task: `{"trials": [...]}`.
struct TaskSeed<'f, 'r> {
    fallback: &'f Cell<bool>,
    rewards: &'r mut Vec<f64>,
}

impl<'de> DeserializeSeed<'de> for TaskSeed<'_, '_> {
    type Value = TaskAcc;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<TaskAcc, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TaskSeed<'_, '_> {
    type Value = TaskAcc;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a task")
    }
    other_scalars!(TaskAcc::failed(TaskErr::TrialsNotArray));
    other_seq!(TaskAcc::failed(TaskErr::TrialsNotArray));
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TaskAcc, A::Error> {
        let mut trials: Option<TaskAcc> = None;
        while let Some(k) = map.next_key_seed(Key)? {
            if k == "trials" {
                let acc = map.next_value_seed(TrialsSeed {
                    fallback: self.fallback,
                    rewards: &mut *self.rewards,
                })?;
                set(&mut trials, acc, self.fallback);
            } else {
                map.next_value_seed(Skip)?;
            }
        }
        Ok(trials.unwrap_or(TaskAcc::failed(TaskErr::TrialsNotArray)))
    }
}

/// A task's `trials` array, accumulated trial by trial (the first failing trial ends it).
struct TrialsSeed<'f, 'r> {
    fallback: &'f Cell<bool>,
    rewards: &'r mut Vec<f64>,
}

impl<'de> DeserializeSeed<'de> for TrialsSeed<'_, '_> {
    type Value = TaskAcc;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<TaskAcc, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TrialsSeed<'_, '_> {
    type Value = TaskAcc;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trials array")
    }
    other_scalars!(TaskAcc::failed(TaskErr::TrialsNotArray));
    other_map!(TaskAcc::failed(TaskErr::TrialsNotArray));
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TaskAcc, A::Error> {
        let mut acc = TaskAcc::starting_at(self.rewards.len());
        let mut i = 0usize;
        loop {
            if acc.err.is_some() {
                if seq.next_element_seed(Skip)?.is_none() {
                    break;
                }
                continue;
            }
            let Some(trial) = seq.next_element_seed(TrialSeed {
                fallback: self.fallback,
            })?
            else {
                break;
            };
            acc.add(i, trial.as_ref().map(Trial::fields), self.rewards);
            i += 1;
        }
        Ok(acc)
    }
}

/// One trial object's fields the summary reads.
struct Trial<'de> {
    trial: Option<Scalar<'de>>,
    status: Option<Scalar<'de>>,
    reward: Option<Scalar<'de>>,
    timeout_owner: Option<Scalar<'de>>,
}

impl Trial<'_> {
    fn fields(&self) -> TrialFields<'_> {
        TrialFields {
            trial: self.trial.as_ref().map(Scalar::lite),
            status: self.status.as_ref().map(Scalar::lite),
            reward: self.reward.as_ref().map(Scalar::lite),
            timeout_owner: self.timeout_owner.as_ref().map(Scalar::lite),
        }
    }
}

/// A trial: `None` if not an object.
struct TrialSeed<'f> {
    fallback: &'f Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for TrialSeed<'_> {
    type Value = Option<Trial<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TrialSeed<'_> {
    type Value = Option<Trial<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trial")
    }
    other_scalars!(None);
    other_seq!(None);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut t = Trial {
            trial: None,
            status: None,
            reward: None,
            timeout_owner: None,
        };
        while let Some(k) = map.next_key_seed(Key)? {
            let slot = match k.as_ref() {
                "trial" => &mut t.trial,
                "status" => &mut t.status,
                "reward" => &mut t.reward,
                "timeout_owner" => &mut t.timeout_owner,
                _ => {
                    map.next_value_seed(Skip)?;
                    continue;
                }
            };
            set(slot, map.next_value_seed(ScalarSeed)?, self.fallback);
        }
        Ok(Some(t))
    }
}

// ---------------------------------------------------------------------------------------------
// Timings and source attempts.

/// `timings`: `Some(all values are finite numbers ≥ 0)` for an object, `None` otherwise.
/// Anything but "all valid" asks for the fallback (a duplicate key could hide a valid value).
struct TimingsSeed<'f> {
    fallback: &'f Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for TimingsSeed<'_> {
    type Value = Option<bool>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TimingsSeed<'_> {
    type Value = Option<bool>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("timings")
    }
    other_scalars!(None);
    other_seq!(None);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut ok = true;
        while map.next_key_seed(Key)?.is_some() {
            let v = map.next_value_seed(ScalarSeed)?;
            ok &= nonneg_finite(Some(v.lite())).is_some();
        }
        if !ok {
            self.fallback.set(true);
        }
        Ok(Some(ok))
    }
}

/// `source_attempts`: for an array, whether every element is a non-negative integer, and
/// their minimum and maximum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Attempts {
    all_u64: bool,
    min: u64,
    max: u64,
}

impl Attempts {
    /// Every element is an integer ≥ 1 and < `attempt`.
    fn all_earlier_than(&self, attempt: u64) -> bool {
        self.all_u64 && (self.min > self.max || (self.min >= 1 && self.max < attempt))
    }
}

struct AttemptsSeed;

impl<'de> DeserializeSeed<'de> for AttemptsSeed {
    type Value = Option<Attempts>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AttemptsSeed {
    type Value = Option<Attempts>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("source attempts")
    }
    other_scalars!(None);
    other_map!(None);
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut a = Attempts {
            all_u64: true,
            min: u64::MAX,
            max: 0,
        };
        while let Some(v) = seq.next_element_seed(ScalarSeed)? {
            match v.lite().as_u64() {
                Some(x) => {
                    a.min = a.min.min(x);
                    a.max = a.max.max(x);
                }
                None => a.all_u64 = false,
            }
        }
        Ok(Some(a))
    }
}

// ---------------------------------------------------------------------------------------------
// Event bodies and lines.

/// Body keys kept as scalars: the scalar stamped fields and the fold's other fields.
const SCALAR_KEYS: [&str; 22] = [
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
    "score",
    "cost_usd",
    "attempt",
    "reason",
    "verdict",
    "status",
    "failure_stage",
    "commit",
    "experiment",
];

fn scalar_index(k: &str) -> Option<usize> {
    // `SCALAR_KEYS.iter().position(..)`, as a `match` (a test checks they agree).
    Some(match k {
        "candidate_commit" => 0,
        "candidate_tree" => 1,
        "parent" => 2,
        "generation" => 3,
        "evaluator_fingerprint" => 4,
        "task_set_hash" => 5,
        "runtime_fingerprint" => 6,
        "contract_id" => 7,
        "purpose" => 8,
        "outcome" => 9,
        "trials" => 10,
        "expected_trials" => 11,
        "scoreable_trials" => 12,
        "score" => 13,
        "cost_usd" => 14,
        "attempt" => 15,
        "reason" => 16,
        "verdict" => 17,
        "status" => 18,
        "failure_stage" => 19,
        "commit" => 20,
        "experiment" => 21,
        _ => return None,
    })
}

/// What the fold and the stamp check need from an event body.
#[derive(Debug)]
pub(crate) struct FastBody<'a> {
    scalars: [Option<Scalar<'a>>; SCALAR_KEYS.len()],
    task_vector: Option<Result<VectorSummary, String>>,
    timings: Option<Option<bool>>,
    source_attempts: Option<Option<Attempts>>,
    pub(crate) annotations: Option<Value>,
    pub(crate) fixed_identity: Option<Value>,
}

impl<'a> FastBody<'a> {
    /// The body's value at a scalar key, as `body.get(k)` would see it (containers as shapes).
    pub(crate) fn get(&self, k: &str) -> Option<Lite<'_>> {
        match k {
            "annotations" => self.annotations.as_ref().map(Lite::of),
            "fixed_identity" => self.fixed_identity.as_ref().map(Lite::of),
            _ => self.scalars[scalar_index(k)?].as_ref().map(Scalar::lite),
        }
    }

    pub(crate) fn str(&self, k: &str) -> Option<&str> {
        self.get(k).and_then(|v| v.as_str())
    }

    pub(crate) fn annotations_object(&self) -> Option<&Map<String, Value>> {
        self.annotations.as_ref().and_then(Value::as_object)
    }
}

impl StampView for FastBody<'_> {
    fn has(&self, k: &str) -> bool {
        match k {
            "task_vector" => self.task_vector.is_some(),
            "timings" => self.timings.is_some(),
            "source_attempts" => self.source_attempts.is_some(),
            _ => self.get(k).is_some(),
        }
    }
    fn lite(&self, k: &str) -> Option<Lite<'_>> {
        self.get(k)
    }
    fn task_vector(&self) -> Option<Result<VectorSummary, String>> {
        self.task_vector.clone()
    }
    fn timings_ok(&self) -> bool {
        self.timings == Some(Some(true))
    }
    fn source_attempts_ok(&self, attempt: u64) -> bool {
        matches!(self.source_attempts, Some(Some(a)) if a.all_earlier_than(attempt))
    }
}

/// A body: `None` if not an object.
struct BodySeed<'f> {
    fallback: &'f Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for BodySeed<'_> {
    type Value = Option<Box<FastBody<'de>>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_> {
    type Value = Option<Box<FastBody<'de>>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event body")
    }
    other_scalars!(None);
    other_seq!(None);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let fb = self.fallback;
        let mut b = Box::new(FastBody {
            scalars: Default::default(),
            task_vector: None,
            timings: None,
            source_attempts: None,
            annotations: None,
            fixed_identity: None,
        });
        while let Some(k) = map.next_key_seed(Key)? {
            match k.as_ref() {
                "task_vector" => set(
                    &mut b.task_vector,
                    map.next_value_seed(TaskVectorSeed { fallback: fb })?,
                    fb,
                ),
                "timings" => set(
                    &mut b.timings,
                    map.next_value_seed(TimingsSeed { fallback: fb })?,
                    fb,
                ),
                "source_attempts" => set(
                    &mut b.source_attempts,
                    map.next_value_seed(AttemptsSeed)?,
                    fb,
                ),
                "annotations" => set(&mut b.annotations, map.next_value_seed(ValueSeed)?, fb),
                "fixed_identity" => set(&mut b.fixed_identity, map.next_value_seed(ValueSeed)?, fb),
                key => match scalar_index(key) {
                    Some(i) => set(&mut b.scalars[i], map.next_value_seed(ScalarSeed)?, fb),
                    None => map.next_value_seed(Skip)?,
                },
            }
        }
        Ok(Some(b))
    }
}

/// The raw envelope slots of a line.
struct RawLine<'a> {
    seq: Option<Scalar<'a>>,
    prev: Option<Scalar<'a>>,
    ty: Option<Scalar<'a>>,
    genid: Option<Scalar<'a>>,
    at: Option<Scalar<'a>>,
    body: Option<Option<Box<FastBody<'a>>>>,
}

/// A line: `None` if not an object.
struct LineSeed<'f> {
    fallback: &'f Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for LineSeed<'_> {
    type Value = Option<RawLine<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LineSeed<'_> {
    type Value = Option<RawLine<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an event line")
    }
    other_scalars!(None);
    other_seq!(None);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let fb = self.fallback;
        let mut l = RawLine {
            seq: None,
            prev: None,
            ty: None,
            genid: None,
            at: None,
            body: None,
        };
        while let Some(k) = map.next_key_seed(Key)? {
            let slot = match k.as_ref() {
                "seq" => &mut l.seq,
                "prev" => &mut l.prev,
                "type" => &mut l.ty,
                "genid" => &mut l.genid,
                "at" => &mut l.at,
                "body" => {
                    set(
                        &mut l.body,
                        map.next_value_seed(BodySeed { fallback: fb })?,
                        fb,
                    );
                    continue;
                }
                _ => {
                    // An unknown envelope key: the line is not a well-formed event.
                    fb.set(true);
                    map.next_value_seed(Skip)?;
                    continue;
                }
            };
            set(slot, map.next_value_seed(ScalarSeed)?, fb);
        }
        Ok(Some(l))
    }
}

/// A line read without `Value` trees: a well-formed event's envelope and body.
pub(crate) struct FastLine<'a> {
    pub(crate) seq: u64,
    pub(crate) prev: [u8; 32],
    pub(crate) event_type: Cow<'a, str>,
    pub(crate) genid: Option<Cow<'a, str>>,
    pub(crate) body: Box<FastBody<'a>>,
    /// For an evaluation event: its stamp's fields and problems, prepared by the reader.
    pub(crate) prep: Cell<Option<crate::fold::EvalPrep>>,
}

impl fmt::Debug for FastLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FastLine")
            .field("seq", &self.seq)
            .field("event_type", &self.event_type)
            .field("genid", &self.genid)
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

/// The result of [`read_line`].
#[derive(Debug)]
pub(crate) enum FastRead<'a> {
    /// A well-formed event whose every interpreted field was read exactly.
    Event(Box<FastLine<'a>>),
    /// Read this line the straightforward way (`Value` + `Event::from_json`): it is not valid
    /// JSON, not a well-formed event, or uses something this reader does not model (e.g. a
    /// duplicate key).
    Fallback,
}

fn take_str(s: Option<Scalar<'_>>) -> Option<Cow<'_, str>> {
    match s {
        Some(Scalar::Str(s)) => Some(s),
        _ => None,
    }
}

/// Read one line (without its newline). The envelope checks are those of
/// [`Event::from_json`](crate::Event::from_json); anything they would refuse is a fallback,
/// so that the error message comes from the straightforward path.
pub(crate) fn read_line(bytes: &[u8]) -> FastRead<'_> {
    // Validating the whole line's UTF-8 at once is much cheaper than string by string; for
    // valid UTF-8, `from_str` accepts exactly what `from_slice` accepts (it only skips the
    // per-string UTF-8 check). Invalid UTF-8 is left to the straightforward path.
    let Ok(text) = std::str::from_utf8(bytes) else {
        return FastRead::Fallback;
    };
    let fallback = Cell::new(false);
    let mut de = serde_json::Deserializer::from_str(text);
    let seed = LineSeed {
        fallback: &fallback,
    };
    let raw = match seed.deserialize(&mut de).and_then(|r| de.end().map(|_| r)) {
        Ok(Some(raw)) if !fallback.get() => raw,
        _ => return FastRead::Fallback,
    };
    let header = (|| {
        let seq = raw.seq.as_ref()?.lite().as_u64()?;
        let prev = take_str(raw.prev).filter(|p| is_sha256_hex(p))?;
        let prev = unhex::<32>(&prev)?;
        let ty = take_str(raw.ty).filter(|t| check_event_type(t).is_ok())?;
        let genid = match raw.genid? {
            Scalar::Null => None,
            Scalar::Str(g) if check_genid(&g).is_ok() => Some(g),
            _ => return None,
        };
        take_str(raw.at).filter(|a| check_timestamp(a).is_ok())?;
        let body = raw.body??;
        let mut line = Box::new(FastLine {
            seq,
            prev,
            event_type: ty,
            genid,
            body,
            prep: Cell::new(None),
        });
        if line.event_type == crate::event::types::EVALUATION {
            *line.prep.get_mut() = Some(crate::fold::EvalPrep::of(&line));
        }
        Some(line)
    })();
    match header {
        Some(line) if !fallback.get() => FastRead::Event(line),
        _ => FastRead::Fallback,
    }
}

/// A receipt line's fields (strings borrowed from the line when possible).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawReceipt<'a> {
    pub(crate) seq: u64,
    pub(crate) event_sha256: Cow<'a, str>,
    pub(crate) key_id: Cow<'a, str>,
    pub(crate) sig: Cow<'a, str>,
}

impl From<crate::verify::Receipt> for RawReceipt<'_> {
    fn from(r: crate::verify::Receipt) -> Self {
        RawReceipt {
            seq: r.seq,
            event_sha256: Cow::Owned(r.event_sha256),
            key_id: Cow::Owned(r.key_id),
            sig: Cow::Owned(r.sig),
        }
    }
}

/// A receipt line read without a `Value` tree, exactly as
/// [`Receipt::from_value`](crate::Receipt::from_value) would accept it; `None` asks for the
/// fallback (anything unusual, including every line `from_value` refuses).
pub(crate) fn read_receipt(bytes: &[u8]) -> Option<RawReceipt<'_>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let fallback = Cell::new(false);
    let mut de = serde_json::Deserializer::from_str(text);
    let seed = ReceiptSeed {
        fallback: &fallback,
    };
    let [seq, sha, key, sig] = seed
        .deserialize(&mut de)
        .and_then(|r| de.end().map(|_| r))
        .ok()??;
    if fallback.get() {
        return None;
    }
    Some(RawReceipt {
        seq: seq.as_ref()?.lite().as_u64()?,
        event_sha256: take_str(sha)?,
        key_id: take_str(key)?,
        sig: take_str(sig)?,
    })
}

struct ReceiptSeed<'f> {
    fallback: &'f Cell<bool>,
}

impl<'de> DeserializeSeed<'de> for ReceiptSeed<'_> {
    type Value = Option<[Option<Scalar<'de>>; 4]>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ReceiptSeed<'_> {
    type Value = Option<[Option<Scalar<'de>>; 4]>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a receipt")
    }
    other_scalars!(None);
    other_seq!(None);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut r: [Option<Scalar<'de>>; 4] = Default::default();
        while let Some(k) = map.next_key_seed(Key)? {
            let i = match k.as_ref() {
                "seq" => 0,
                "event_sha256" => 1,
                "key_id" => 2,
                "sig" => 3,
                _ => {
                    self.fallback.set(true);
                    map.next_value_seed(Skip)?;
                    continue;
                }
            };
            set(&mut r[i], map.next_value_seed(ScalarSeed)?, self.fallback);
        }
        Ok(Some(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_index_matches_the_key_list() {
        for (i, k) in SCALAR_KEYS.iter().enumerate() {
            assert_eq!(scalar_index(k), Some(i), "{k}");
        }
        for k in [
            "task_vector",
            "timings",
            "source_attempts",
            "annotations",
            "x",
            "",
        ] {
            assert_eq!(scalar_index(k), None);
        }
        // Every stamped field is either a scalar slot or one of the three summarized ones.
        for f in crate::STAMPED_FIELDS {
            assert!(
                scalar_index(f).is_some()
                    || matches!(f, "task_vector" | "timings" | "source_attempts"),
                "{f}"
            );
        }
    }
}
