//! Checking and normalizing values against field declarations.
//!
//! Every function pushes its violations onto `errs` and returns `None` when the value
//! is invalid, so that callers keep going and report every problem at once. Messages
//! are fixed texts (or text from the schema); they never contain the value checked.

use serde_json::{Map, Number, Value};

use crate::Violation;
use crate::field::{Field, Fields, Kind};
use crate::path;

type Errs = Vec<Violation>;

fn fail<T>(errs: &mut Errs, path: &str, message: &str) -> Option<T> {
    errs.push(Violation::new(path, message));
    None
}

/// Normalizes the members of `map` against `fields`: fills defaults, reports missing
/// required fields and unknown keys (unless `allow_extra`). Output order is the
/// declaration order, then the extra keys in input order.
pub(crate) fn object_value(
    fields: &Fields,
    allow_extra: bool,
    map: &Map<String, Value>,
    base: &str,
    errs: &mut Errs,
) -> Option<Map<String, Value>> {
    let before = errs.len();
    let mut out = Map::new();
    for (name, field) in &fields.entries {
        let at = path::key(base, name);
        // `null` means "not set" (YAML `key:`), exactly like a missing key.
        match map.get(name).filter(|v| !v.is_null()) {
            Some(v) => {
                if let Some(n) = value(field, v, &at, errs) {
                    out.insert(name.clone(), n);
                }
            }
            None if field.required => errs.push(Violation::new(at, "is required")),
            None => {
                if let Some(d) = &field.default {
                    out.insert(name.clone(), d.clone());
                }
            }
        }
    }
    for (k, v) in map.iter().filter(|(k, _)| !fields.contains(k)) {
        if allow_extra {
            out.insert(k.clone(), v.clone());
        } else {
            errs.push(Violation::new(path::key(base, k), "unknown field"));
        }
    }
    (errs.len() == before).then_some(out)
}

/// Normalizes one present value. With choices, only the choices are checked: the build
/// has ensured every choice satisfies the bounds, so a bound message would add nothing.
pub(crate) fn value(field: &Field, v: &Value, at: &str, errs: &mut Errs) -> Option<Value> {
    let normalized = typed(field, v, at, errs)?;
    match &field.choices {
        Some(choices) if !choices.contains(&normalized) => {
            let msg = format!("must be one of: {}", render_choices(choices));
            fail(errs, at, &msg)
        }
        _ => Some(normalized),
    }
}

/// Renders choices compactly: strings bare, everything else as compact JSON.
pub(crate) fn render_choices(choices: &[Value]) -> String {
    let shown: Vec<String> = choices
        .iter()
        .map(|c| match c {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    shown.join(", ")
}

fn typed(field: &Field, v: &Value, at: &str, errs: &mut Errs) -> Option<Value> {
    match &field.kind {
        Kind::String => string(field, v, at, errs),
        Kind::Integer => integer(field, v, at, errs),
        Kind::Number => number(field, v, at, errs),
        Kind::Boolean => match v {
            Value::Bool(b) => Some(Value::Bool(*b)),
            _ => fail(errs, at, "must be a boolean"),
        },
        Kind::Array(items) => array(field, items, v, at, errs),
        Kind::Object(fields) => match v {
            Value::Object(m) => {
                object_value(fields, field.allows_extra(), m, at, errs).map(Value::Object)
            }
            _ => fail(errs, at, "must be an object"),
        },
        Kind::Json => Some(v.clone()),
    }
}

fn string(field: &Field, v: &Value, at: &str, errs: &mut Errs) -> Option<Value> {
    let Value::String(s) = v else {
        return fail(errs, at, "must be a string");
    };
    if s.trim().is_empty() {
        return fail(errs, at, "must not be empty");
    }
    let len = s.chars().count() as f64;
    bounds(field, len, Unit::Chars, at, errs).then(|| v.clone())
}

fn integer(field: &Field, v: &Value, at: &str, errs: &mut Errs) -> Option<Value> {
    let Value::Number(n) = v else {
        return fail(errs, at, "must be an integer");
    };
    let Some(i) = n.as_i64() else {
        // A u64 above i64::MAX is still an integer, just too large to hold.
        let msg = if n.is_u64() {
            "is too large for a 64-bit integer"
        } else {
            "must be an integer"
        };
        return fail(errs, at, msg);
    };
    bounds(field, i as f64, Unit::Value, at, errs).then(|| Value::from(i))
}

fn number(field: &Field, v: &Value, at: &str, errs: &mut Errs) -> Option<Value> {
    let Some(x) = v.as_number().and_then(Number::as_f64) else {
        return fail(errs, at, "must be a number");
    };
    // JSON text cannot hold NaN or infinities, but a `Value` built in code might.
    let Some(n) = Number::from_f64(x).filter(|_| x.is_finite()) else {
        return fail(errs, at, "must be a finite number");
    };
    bounds(field, x, Unit::Value, at, errs).then_some(Value::Number(n))
}

fn array(field: &Field, items: &Field, v: &Value, at: &str, errs: &mut Errs) -> Option<Value> {
    let Value::Array(list) = v else {
        return fail(errs, at, "must be an array");
    };
    // The length and the items are independent problems: report both.
    let len_ok = bounds(field, list.len() as f64, Unit::Items, at, errs);
    // Collect every item's result first: collecting straight into `Option<Vec<_>>`
    // would stop at the first bad item and hide the others.
    let out: Vec<Option<Value>> = list
        .iter()
        .enumerate()
        .map(|(i, item)| value(items, item, &path::index(at, i), errs))
        .collect();
    let out: Option<Vec<Value>> = out.into_iter().collect();
    out.filter(|_| len_ok).map(Value::Array)
}

/// What a bound measures, for the message.
#[derive(Clone, Copy)]
enum Unit {
    Value,
    Chars,
    Items,
}

/// Checks `minimum`/`maximum` against `x`; pushes a violation and returns false when
/// one fails. Skipped for fields with choices (see [`value`]).
fn bounds(field: &Field, x: f64, unit: Unit, at: &str, errs: &mut Errs) -> bool {
    if field.choices.is_some() {
        return true;
    }
    let msg = match (field.minimum, field.maximum) {
        (Some(m), _) if x < m => bound_message(unit, true, m),
        (_, Some(m)) if x > m => bound_message(unit, false, m),
        _ => return true,
    };
    errs.push(Violation::new(at, msg));
    false
}

fn bound_message(unit: Unit, lower: bool, m: f64) -> String {
    let n = path::num(m);
    let plural = if m == 1.0 { "" } else { "s" };
    let (cmp, least) = if lower {
        (">=", "least")
    } else {
        ("<=", "most")
    };
    match unit {
        Unit::Value => format!("must be {cmp} {n}"),
        Unit::Chars => format!("must be at {least} {n} character{plural}"),
        Unit::Items => format!("must have at {least} {n} item{plural}"),
    }
}
