//! The JSON-Schema-like description of a schema. Key order is fixed by the order of
//! insertion (serde_json keeps it), so the output is deterministic.

use serde_json::{Map, Number, Value};

use crate::field::{Field, Fields, Kind};

/// Describes an object: `type`, then the keys of `head` (a field's `default`,
/// `enum`, `description`; re-inserting `type` keeps its first position), then
/// `properties`, `required` and `additionalProperties`.
pub(crate) fn object(fields: &Fields, allow_extra: bool, head: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), "object".into());
    out.extend(head.clone());
    let properties: Map<String, Value> = fields
        .entries
        .iter()
        .map(|(name, f)| (name.clone(), field(f)))
        .collect();
    let required: Vec<Value> = fields
        .entries
        .iter()
        .filter(|(_, f)| f.required)
        .map(|(name, _)| Value::from(name.as_str()))
        .collect();
    out.insert("properties".into(), Value::Object(properties));
    out.insert("required".into(), Value::Array(required));
    out.insert("additionalProperties".into(), Value::Bool(allow_extra));
    Value::Object(out)
}

fn field(f: &Field) -> Value {
    let mut out = Map::new();
    if let Some(t) = f.kind.type_name() {
        out.insert("type".into(), t.into());
    }
    if let Some(d) = &f.default {
        out.insert("default".into(), d.clone());
    }
    if let Some(c) = &f.choices {
        out.insert("enum".into(), Value::Array(c.clone()));
    }
    bounds(f, &mut out);
    if let Some(d) = &f.description {
        out.insert("description".into(), d.as_str().into());
    }
    match &f.kind {
        Kind::Array(items) => {
            out.insert("items".into(), field(items));
        }
        // The keys gathered so far become the head of the object description, which
        // appends `properties`, `required` and `additionalProperties` after them.
        Kind::Object(fields) => return object(fields, f.allows_extra(), &out),
        _ => {}
    }
    Value::Object(out)
}

/// `minimum`/`maximum` for numbers, `minLength`/`maxLength` for strings,
/// `minItems`/`maxItems` for arrays.
fn bounds(f: &Field, out: &mut Map<String, Value>) {
    let (lo, hi) = match f.kind {
        Kind::Integer | Kind::Number => ("minimum", "maximum"),
        Kind::String => ("minLength", "maxLength"),
        Kind::Array(_) => ("minItems", "maxItems"),
        _ => return,
    };
    // Lengths are integers (the build checks), and so are integral integer bounds.
    let as_int = !matches!(f.kind, Kind::Number);
    for (name, bound) in [(lo, f.minimum), (hi, f.maximum)] {
        if let Some(b) = bound {
            out.insert(name.into(), bound_value(b, as_int));
        }
    }
}

fn bound_value(b: f64, as_int: bool) -> Value {
    let integral = b.fract() == 0.0 && b.abs() < 9.0e15;
    if as_int && integral {
        Value::from(b as i64)
    } else {
        Number::from_f64(b).map_or(Value::Null, Value::Number)
    }
}
