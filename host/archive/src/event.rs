//! The event schema: the host-stamped envelope (one typed reader for every line), the names
//! of the stamped fields of certified evaluation events, and the value checks.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use crate::canonical::{canonical_bytes, canonical_sha256, hex, is_sha256_hex, unhex};

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

/// The terminal status of an attempt: what a `status` event sets, or an evaluation's
/// outcome. It is written to the archive as its name ([`Status::as_str`]), the one
/// spelling of each status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    NoProposal,
    InvalidProposal,
    RejectedValidation,
    RejectedDuplicate,
    OperatorFailed,
    BenchmarkComplete,
    CandidateInvalid,
    InfrastructureFailed,
    Timeout,
    Cancelled,
    BudgetExhausted,
}

impl Status {
    /// The name the archive holds.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::NoProposal => "no_proposal",
            Status::InvalidProposal => "invalid_proposal",
            Status::RejectedValidation => "rejected_validation",
            Status::RejectedDuplicate => "rejected_duplicate",
            Status::OperatorFailed => "operator_failed",
            Status::BenchmarkComplete => "benchmark_complete",
            Status::CandidateInvalid => "candidate_invalid",
            Status::InfrastructureFailed => "infrastructure_failed",
            Status::Timeout => "timeout",
            Status::Cancelled => "cancelled",
            Status::BudgetExhausted => "budget_exhausted",
        }
    }

    /// The status a name spells, if it spells one.
    pub fn parse(name: &str) -> Option<Status> {
        TERMINAL_STATUSES.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Statuses a `status` event may set (terminal attempt statuses).
pub const TERMINAL_STATUSES: [Status; 11] = [
    Status::NoProposal,
    Status::InvalidProposal,
    Status::RejectedValidation,
    Status::RejectedDuplicate,
    Status::OperatorFailed,
    Status::BenchmarkComplete,
    Status::CandidateInvalid,
    Status::InfrastructureFailed,
    Status::Timeout,
    Status::Cancelled,
    Status::BudgetExhausted,
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
    /// A generation's select decision: `{"generation", "parents", ...}`.
    pub const SELECT: &str = "select";
    /// Reflect's playbook operations: `{"ops": [...]}`.
    pub const PLAYBOOK: &str = "playbook";
    /// An agent driver's call between generations (docs/driver.md).
    pub const DRIVER_REVISION: &str = "driver_revision";
    /// A driver session's sealed acceptance.
    pub const ACCEPTANCE: &str = "acceptance";
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

    /// [`Event::from_value`], taking the value: the same `Envelope` rules as every archive
    /// line, with the body kept as a map.
    pub fn from_json(v: Value) -> Result<Event, String> {
        let envelope = Envelope::<Map<String, Value>>::deserialize(v).map_err(|e| e.to_string())?;
        envelope.into_event()
    }

    /// One archive line's bytes (without the newline) as an event: the `Envelope` read
    /// straight from the bytes, the body as a map. What [`Archive::events`] lists; the fold
    /// and the checks read lines through the typed bodies instead (`crate::body`).
    ///
    /// [`Archive::events`]: crate::Archive::events
    pub fn from_line(bytes: &[u8]) -> Result<Event, String> {
        let envelope: Envelope<'_, Map<String, Value>> =
            serde_json::from_slice(bytes).map_err(|e| json_error(&e))?;
        envelope.into_event()
    }
}

/// A serde error on an archive line, worded by what is wrong: the JSON itself, or its shape.
pub(crate) fn json_error(e: &serde_json::Error) -> String {
    match e.classify() {
        serde_json::error::Category::Data => format!("not a well-formed event: {e}"),
        _ => format!("not valid JSON: {e}"),
    }
}

/// A JSON value as the archive's checks see it: scalars kept (strings borrowed from the line
/// when they have no escapes), containers only by their shape (their contents are skipped,
/// never built). Reading one never fails on its own: errors come from the JSON parser only.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar<'a> {
    Null,
    Bool(bool),
    /// A JSON integer ≥ 0 (what `Value::as_u64` answers for).
    U64(u64),
    /// A negative JSON integer.
    I64(i64),
    /// A JSON number with a fraction or exponent.
    F64(f64),
    Str(Cow<'a, str>),
    Array,
    Object,
}

impl<'a> Scalar<'a> {
    /// `Value::as_str`.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
    /// `Value::as_u64`.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Scalar::U64(n) => Some(*n),
            _ => None,
        }
    }
    /// `Value::as_f64`.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Scalar::U64(n) => Some(*n as f64),
            Scalar::I64(n) => Some(*n as f64),
            Scalar::F64(x) => Some(*x),
            _ => None,
        }
    }
    pub(crate) fn is_number(&self) -> bool {
        matches!(self, Scalar::U64(_) | Scalar::I64(_) | Scalar::F64(_))
    }
    /// The number if it is finite and ≥ 0 (costs and durations).
    pub(crate) fn nonneg_finite(&self) -> Option<f64> {
        self.as_f64().filter(|x| x.is_finite() && *x >= 0.0)
    }
    /// The string, owned.
    pub(crate) fn into_string(self) -> Option<String> {
        match self {
            Scalar::Str(s) => Some(s.into_owned()),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Scalar<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Null)
            }
            fn visit_none<E>(self) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Scalar<'a>, D::Error> {
                Scalar::deserialize(d)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Bool(b))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Scalar<'a>, E> {
                Ok(Scalar::U64(n))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Scalar<'a>, E> {
                // serde_json hands non-negative integers to `visit_u64`; be exact anyway.
                Ok(u64::try_from(n).map_or(Scalar::I64(n), Scalar::U64))
            }
            fn visit_f64<E>(self, x: f64) -> Result<Scalar<'a>, E> {
                Ok(Scalar::F64(x))
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Str(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Str(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar<'a>, E> {
                Ok(Scalar::Str(Cow::Owned(s)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'a>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Array)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'a>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Object)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The `Visitor` methods of every JSON scalar (`null` included), each answering `$value`: for
/// a reader that only cares that a value is not a container of its shape.
macro_rules! scalars_are {
    ($ty:ty, $value:expr) => {
        fn visit_unit<E>(self) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_none<E>(self) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_bool<E>(self, _: bool) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<$ty, E> {
            Ok($value)
        }
        fn visit_str<E>(self, _: &str) -> Result<$ty, E> {
            Ok($value)
        }
    };
}
pub(crate) use scalars_are;

/// A value read as `T` if it is a JSON object, else only noted as not one (`Not`, its
/// contents skipped). Errors inside the object (a key given twice) are the parser's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Obj<T> {
    Is(T),
    Not,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj::Is)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Obj<T>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Obj::Not)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Obj<T>, D::Error> {
                Obj::deserialize(d)
            }
            scalars_are!(Obj<T>, Obj::Not);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A value read as a list of `T` if it is a JSON array, else only noted as not one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum List<T> {
    Is(Vec<T>),
    Not,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<List<T>, A::Error> {
                Vec::<T>::deserialize(SeqAccessDeserializer::new(seq)).map(List::Is)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<List<T>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(List::Not)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<List<T>, D::Error> {
                List::deserialize(d)
            }
            scalars_are!(List<T>, List::Not);
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A present field, whatever its value (`null` included): `Some`, and `None` only when the
/// key is absent (with `#[serde(default)]`). Serde's own `Option` reads `null` as absent.
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The envelope of every archive line, with the body read as `B`: exactly the keys
/// [`ENVELOPE_FIELDS`] (each once), then [`Envelope::check`] for their values. The one
/// definition of a well-formed event line: [`Event::from_line`] reads the body as a map, the
/// fold and the checks as a typed body (`crate::body`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Envelope<'a, B> {
    #[serde(borrow)]
    seq: Scalar<'a>,
    #[serde(borrow)]
    prev: Scalar<'a>,
    #[serde(rename = "type", borrow)]
    event_type: Scalar<'a>,
    #[serde(borrow)]
    genid: Scalar<'a>,
    #[serde(borrow)]
    at: Scalar<'a>,
    body: Obj<B>,
}

/// The envelope's values, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Head<'a> {
    pub(crate) seq: u64,
    pub(crate) prev: [u8; 32],
    pub(crate) event_type: Cow<'a, str>,
    pub(crate) genid: Option<Cow<'a, str>>,
    pub(crate) at: Cow<'a, str>,
}

impl<'a, B> Envelope<'a, B> {
    /// Each envelope value well typed and valid, or why not.
    pub(crate) fn check(self) -> Result<(Head<'a>, B), String> {
        let seq = self
            .seq
            .as_u64()
            .ok_or("`seq` must be a non-negative integer")?;
        let Scalar::Str(prev) = self.prev else {
            return Err("`prev` must be a string".into());
        };
        let prev = is_sha256_hex(&prev)
            .then(|| unhex::<32>(&prev))
            .flatten()
            .ok_or("`prev` must be 64 lower-case hex digits")?;
        let Scalar::Str(event_type) = self.event_type else {
            return Err("`type` must be a string".into());
        };
        check_event_type(&event_type)?;
        let genid = match self.genid {
            Scalar::Null => None,
            Scalar::Str(g) => {
                check_genid(&g)?;
                Some(g)
            }
            _ => return Err("`genid` must be a string or null".into()),
        };
        let Scalar::Str(at) = self.at else {
            return Err("`at` must be a string".into());
        };
        check_timestamp(&at)?;
        let Obj::Is(body) = self.body else {
            return Err("`body` must be an object".into());
        };
        let head = Head {
            seq,
            prev,
            event_type,
            genid,
            at,
        };
        Ok((head, body))
    }
}

impl Envelope<'_, Map<String, Value>> {
    fn into_event(self) -> Result<Event, String> {
        let (h, body) = self.check()?;
        Ok(Event {
            seq: h.seq,
            prev: hex(&h.prev),
            event_type: h.event_type.into_owned(),
            genid: h.genid.map(Cow::into_owned),
            at: h.at.into_owned(),
            body,
        })
    }
}

/// An event read from the archive, with its position and whether it is certified: its line is
/// well formed, in place (seq = line − 1), chained to the previous line, and carries a valid
/// receipt under the experiment's key.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    /// 1-based line number in `archive.jsonl`.
    pub line: u64,
    pub event: Event,
    /// Hex SHA-256 of the line's bytes (without the newline).
    pub sha256: String,
    pub certified: bool,
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
#[derive(Debug, Clone, Copy, PartialEq, Default)]
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

/// Scores agree if they differ by at most 1e-9 relative (summation order may differ).
pub fn scores_agree(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
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
