//! Values across the interpreter boundary: JSON ↔ Rhai, the stage inputs as JSON (the
//! "native values" a script receives), and the stage results read back with a precise
//! message for every shape error.

use evolve_operator_sdk::sampling::trial_status_name;
use evolve_operator_sdk::serde_json::{self, Map, Number, Value, json};
use evolve_operator_sdk::status_name;
use evolve_operator_sdk::tasks::TrialReport;
use evolve_operator_sdk::types::*;
use rhai::{Array, Dynamic, FLOAT, INT};

/// JSON to a script value: objects become maps, arrays arrays, integers `INT`, other
/// numbers `FLOAT`, `null` the unit `()`.
pub fn to_dynamic(v: &Value) -> Dynamic {
    match v {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => (i as INT).into(),
            None => (n.as_f64().unwrap_or(f64::NAN) as FLOAT).into(),
        },
        Value::String(s) => s.clone().into(),
        Value::Array(items) => items.iter().map(to_dynamic).collect::<Array>().into(),
        Value::Object(map) => {
            let m: rhai::Map = map
                .iter()
                .map(|(k, v)| (k.as_str().into(), to_dynamic(v)))
                .collect();
            m.into()
        }
    }
}

/// A script value as JSON; `what` names it in errors (`select's result[2]`).
pub fn from_dynamic(d: &Dynamic, what: &str) -> Result<Value, String> {
    if d.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(b) = d.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Ok(i) = d.as_int() {
        return Ok(json!(i));
    }
    if let Ok(x) = d.as_float() {
        return Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| format!("{what} is {x}, not a finite number"));
    }
    if let Ok(c) = d.as_char() {
        return Ok(Value::String(c.to_string()));
    }
    if d.is_string() {
        return Ok(Value::String(d.clone().into_string().unwrap_or_default()));
    }
    if d.is_array() {
        let items = d
            .read_lock::<Array>()
            .map(|a| a.clone())
            .unwrap_or_default();
        return items
            .iter()
            .enumerate()
            .map(|(i, x)| from_dynamic(x, &format!("{what}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if d.is_map() {
        let map = d
            .read_lock::<rhai::Map>()
            .map(|m| m.clone())
            .unwrap_or_default();
        let mut out = Map::new();
        for (k, v) in &map {
            out.insert(k.to_string(), from_dynamic(v, &format!("{what}.{k}"))?);
        }
        return Ok(Value::Object(out));
    }
    Err(format!(
        "{what} is a {}, which has no JSON form",
        d.type_name()
    ))
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Keep => "keep",
        Verdict::Discard => "discard",
    }
}

/// A JSON text the host promised; kept as a string when it is not JSON after all.
fn json_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

fn finite(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// An archive row as the script sees it. A non-finite score reads as `()`, like no
/// score (which is how every compiled operator treats it).
pub fn row(r: &ArchiveRow) -> Value {
    json!({
        "generation_id": r.generation_id,
        "parent": r.parent,
        "generation": r.generation,
        "status": status_name(r.status),
        "score": r.score.map_or(Value::Null, finite),
        "eligible": r.eligible,
        "verdict": r.verdict.map(verdict_name),
        "children": r.children,
        "task_vector": r.task_vector.iter().map(|t| json!({
            "task": t.task,
            "trials": t.trials.iter().map(|x| json!({
                "repetition": x.repetition,
                "status": trial_status_name(x.status),
                "reward": x.reward.map_or(Value::Null, finite),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "cost_usd": finite(r.cost_usd),
        "annotations": json_text(&r.annotations),
    })
}

pub fn view(v: &ArchiveView) -> Value {
    json!({"rows": v.rows.iter().map(row).collect::<Vec<_>>(), "champion": v.champion})
}

/// Evidence with its summary parsed (the host guarantees a JSON object).
pub fn evidence(e: &Evidence) -> Value {
    json!({"summary": json_text(&e.summary), "artifacts": e.artifacts})
}

pub fn diff(d: &CandidateDiff) -> Value {
    json!({"changed_paths": d.changed_paths, "patch": d.patch, "recent_accepted": d.recent_accepted})
}

/// What mutate is told: `#{rollout, analysis, feedback_dir, surface: #{includes,
/// excludes}, archive}` (each optional part `()` when absent).
pub fn observation(o: &Observation) -> Value {
    json!({
        "rollout": o.rollout.as_ref().map(evidence),
        "analysis": o.analysis.as_ref().map(evidence),
        "feedback_dir": o.feedback_dir,
        "surface": {"includes": o.surface.includes, "excludes": o.surface.excludes},
        "archive": o.archive.as_ref().map(view),
    })
}

/// The playbook as `[#{id, text, data}]`, `data` parsed.
pub fn playbook(entries: &[PlaybookEntry]) -> Value {
    Value::Array(
        entries
            .iter()
            .map(|e| json!({"id": e.id, "text": e.text, "data": json_text(&e.data)}))
            .collect(),
    )
}

pub fn trial_report(t: &TrialReport) -> Value {
    json!({
        "task": t.task,
        "repetition": t.repetition,
        "status": trial_status_name(t.status),
        "reward": t.reward.map_or(Value::Null, finite),
        "verifier_output": t.verifier_output,
        "duration_ms": t.duration_ms,
        "cost_usd": t.cost_usd.map_or(Value::Null, finite),
    })
}

/// Reads a stage result, naming the stage's function in every message.
pub struct Returned<'a> {
    pub function: &'a str,
    pub value: Value,
}

impl Returned<'_> {
    fn expected(&self, what: &str) -> String {
        format!(
            "{}() returned {}; expected {what}",
            self.function,
            describe(&self.value)
        )
    }

    fn field(&self, key: &str) -> Option<&Value> {
        self.value.as_object().and_then(|m| m.get(key))
    }

    fn field_str(&self, key: &str, shape: &str) -> Result<String, String> {
        match self.field(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            _ => Err(self.expected(shape)),
        }
    }

    fn field_bool(&self, key: &str, shape: &str) -> Result<bool, String> {
        match self.field(key) {
            Some(Value::Bool(b)) => Ok(*b),
            _ => Err(self.expected(shape)),
        }
    }

    fn strings(&self, v: Option<&Value>, shape: &str) -> Result<Vec<String>, String> {
        match v {
            None | Some(Value::Null) => Ok(vec![]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.expected(shape)),
            Some(_) => Err(self.expected(shape)),
        }
    }

    /// select: an array of generation id strings, or one string.
    pub fn parents(self) -> Result<Vec<String>, String> {
        const SHAPE: &str = "an array of generation id strings";
        match &self.value {
            Value::String(s) => Ok(vec![s.clone()]),
            Value::Array(_) => self.strings(Some(&self.value), SHAPE),
            _ => Err(self.expected(SHAPE)),
        }
    }

    /// validate: `#{accept: bool, reason: string, artifacts?: [string]}`.
    pub fn validation(self) -> Result<Validation, String> {
        const SHAPE: &str =
            "#{accept: true/false, reason: \"…\", artifacts: [\"file under /scratch\", …]}";
        Ok(Validation {
            accept: self.field_bool("accept", SHAPE)?,
            reason: self.field_str("reason", SHAPE)?,
            artifacts: self.strings(self.field("artifacts"), SHAPE)?,
        })
    }

    /// assess: `#{novelty: number, accept: bool}`.
    pub fn novelty(self) -> Result<NoveltyVerdict, String> {
        const SHAPE: &str = "#{novelty: a number in [0, 1], accept: true/false}";
        let novelty = self
            .field("novelty")
            .and_then(Value::as_f64)
            .ok_or_else(|| self.expected(SHAPE))?;
        Ok(NoveltyVerdict {
            novelty,
            accept: self.field_bool("accept", SHAPE)?,
        })
    }

    /// decide: `#{verdict: "keep" | "discard", reason: string}`.
    pub fn gate(self) -> Result<GateDecision, String> {
        const SHAPE: &str = "#{verdict: \"keep\" or \"discard\", reason: \"…\"}";
        let verdict = match self.field_str("verdict", SHAPE)?.as_str() {
            "keep" => Verdict::Keep,
            "discard" => Verdict::Discard,
            _ => return Err(self.expected(SHAPE)),
        };
        Ok(GateDecision {
            verdict,
            reason: self.field_str("reason", SHAPE)?,
        })
    }

    /// rollout and analyze: `#{summary: #{…}, artifacts?: [string]}`.
    pub fn evidence(self) -> Result<Evidence, String> {
        const SHAPE: &str =
            "#{summary: #{…} (an object map), artifacts: [\"file under /scratch\", …]}";
        let summary = match self.field("summary") {
            Some(v @ Value::Object(_)) => v.to_string(),
            _ => return Err(self.expected(SHAPE)),
        };
        Ok(Evidence {
            summary,
            artifacts: self.strings(self.field("artifacts"), SHAPE)?,
        })
    }

    /// mutate: `#{changed?: [string], notes?: string or [string]}`. Without `changed`,
    /// the paths the script wrote or removed through its grants (`written`); the usage
    /// is always what the host metered for the script's `model_chat` calls.
    pub fn proposal(self, written: Vec<String>, usage: Usage) -> Result<Proposal, String> {
        const SHAPE: &str = "#{changed: [\"target/…\", …], notes: [\"…\", …]} (both optional; notes may be one string)";
        if !self.value.is_object() {
            return Err(self.expected(SHAPE));
        }
        let changed = match self.field("changed") {
            None | Some(Value::Null) => written,
            v => self.strings(v, SHAPE)?,
        };
        let notes = match self.field("notes") {
            Some(Value::String(s)) => vec![s.clone()],
            v => self.strings(v, SHAPE)?,
        };
        Ok(Proposal {
            changed,
            notes,
            usage,
        })
    }

    /// reflect: an array of `#{op: "add", id, text, data?}`, `#{op: "credit", id,
    /// delta, reason}` or `#{op: "retire", id}`.
    pub fn playbook_ops(self) -> Result<Vec<PlaybookOp>, String> {
        const SHAPE: &str = "an array of #{op: \"add\", id, text, data: #{…}}, #{op: \"credit\", id, delta, reason} or #{op: \"retire\", id}";
        let Value::Array(items) = &self.value else {
            return Err(self.expected(SHAPE));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let bad = |what: &str| {
                    format!(
                        "{}() returned an operation [{i}] {what}; expected {SHAPE}",
                        self.function
                    )
                };
                let str_of = |k: &str| {
                    item.get(k)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| bad(&format!("without a string `{k}`")))
                };
                match item.get("op").and_then(Value::as_str) {
                    Some("add") => {
                        let data = match item.get("data") {
                            None | Some(Value::Null) => "{}".to_string(),
                            Some(d @ Value::Object(_)) => d.to_string(),
                            Some(_) => return Err(bad("whose `data` is not an object map")),
                        };
                        Ok(PlaybookOp::Add(PlaybookEntry {
                            id: str_of("id")?,
                            text: str_of("text")?,
                            data,
                        }))
                    }
                    Some("credit") => Ok(PlaybookOp::Credit(PlaybookCredit {
                        id: str_of("id")?,
                        delta: item
                            .get("delta")
                            .and_then(Value::as_f64)
                            .ok_or_else(|| bad("without a number `delta`"))?,
                        reason: str_of("reason")?,
                    })),
                    Some("retire") => Ok(PlaybookOp::Retire(str_of("id")?)),
                    _ => Err(bad("whose `op` is not \"add\", \"credit\" or \"retire\"")),
                }
            })
            .collect()
    }

    /// annotate: an object map.
    pub fn annotations(self) -> Result<Map<String, Value>, String> {
        match self.value {
            Value::Object(m) => Ok(m),
            _ => Err(self.expected("an object map of annotations, e.g. #{note: \"…\"}")),
        }
    }
}

/// A short description of a value for error messages (its kind, never its content,
/// which may be large).
fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "() (nothing)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array of the wrong shape",
        Value::Object(_) => "an object map of the wrong shape",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips_through_script_values() {
        let v = json!({"a": [1, 2.5, "x", null, true], "b": {"c": -3}});
        assert_eq!(from_dynamic(&to_dynamic(&v), "v").unwrap(), v);
    }

    #[test]
    fn non_finite_numbers_and_foreign_values_are_named() {
        let nan: Dynamic = (f64::NAN as FLOAT).into();
        let arr: Dynamic = vec![Dynamic::from(1 as INT), nan].into();
        assert_eq!(
            from_dynamic(&arr, "result").unwrap_err(),
            "result[1] is NaN, not a finite number"
        );
    }

    #[test]
    fn result_shapes_are_checked() {
        let r = |v: Value| Returned {
            function: "decide",
            value: v,
        };
        assert!(r(json!({"verdict": "keep", "reason": "ok"})).gate().is_ok());
        let e = r(json!({"verdict": "maybe", "reason": "ok"}))
            .gate()
            .unwrap_err();
        assert!(
            e.starts_with("decide() returned an object map of the wrong shape; expected #{verdict"),
            "{e}"
        );
        let e = r(json!(3)).parents().unwrap_err();
        assert_eq!(
            e,
            "decide() returned a number; expected an array of generation id strings"
        );
        assert_eq!(r(json!("4")).parents().unwrap(), vec!["4"]);
    }
}
