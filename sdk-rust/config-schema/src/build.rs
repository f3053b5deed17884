//! Checking a schema declaration for author mistakes, and normalizing its defaults and
//! choices so that normalization and `describe` can use them as they are.

use serde_json::Value;

use crate::SchemaError;
use crate::field::{Field, Fields, Kind};
use crate::normalize;
use crate::path;

type Errs = Vec<SchemaError>;

/// Checks every field of `fields` (recursively), normalizing defaults and choices in
/// place. `base` is the path of the enclosing object, empty at the top.
pub(crate) fn check_fields(fields: &mut Fields, base: &str, errs: &mut Errs) {
    check_names(fields, base, errs);
    for (name, field) in &mut fields.entries {
        check_field(field, &path::key(base, name), errs);
    }
}

fn check_names(fields: &Fields, base: &str, errs: &mut Errs) {
    for (i, (name, _)) in fields.entries.iter().enumerate() {
        if name.is_empty() {
            errs.push(SchemaError::new(base, "field name must not be empty"));
        } else if fields.entries[..i].iter().any(|(n, _)| n == name) {
            errs.push(SchemaError::new(
                path::key(base, name),
                "duplicate field name",
            ));
        }
    }
}

fn check_field(field: &mut Field, at: &str, errs: &mut Errs) {
    let before = errs.len();
    match &mut field.kind {
        Kind::Object(fields) => check_fields(fields, at, errs),
        Kind::Array(items) => check_items(items, &format!("{at}[]"), errs),
        _ => {}
    }
    check_modifiers(field, at, errs);
    check_bounds(field, at, errs);
    // Checking values against a broken declaration would only add confusing noise.
    if errs.len() == before {
        check_choices(field, at, errs);
        check_default(field, at, errs);
    }
}

/// Array items are always present, so `required` and a default cannot apply to them.
fn check_items(items: &mut Field, at: &str, errs: &mut Errs) {
    if items.required {
        errs.push(SchemaError::new(at, "array items cannot be required"));
    }
    if items.default.is_some() {
        errs.push(SchemaError::new(at, "array items cannot have a default"));
    }
    check_field(items, at, errs);
}

fn check_modifiers(field: &Field, at: &str, errs: &mut Errs) {
    if field.required && field.default.is_some() {
        let msg = "cannot be both required and have a default";
        errs.push(SchemaError::new(at, msg));
    }
    if field.additional_properties.is_some() && !matches!(field.kind, Kind::Object(_)) {
        let msg = "additional_properties applies only to object fields";
        errs.push(SchemaError::new(at, msg));
    }
    if field.default.as_ref().is_some_and(Value::is_null) {
        let msg = "default must not be null (null means absent; omit the default)";
        errs.push(SchemaError::new(at, msg));
    }
    if field.choices.as_ref().is_some_and(Vec::is_empty) {
        errs.push(SchemaError::new(at, "choices must not be empty"));
    }
}

fn check_bounds(field: &Field, at: &str, errs: &mut Errs) {
    let (min, max) = (field.minimum, field.maximum);
    if min.is_none() && max.is_none() {
        return;
    }
    let is_length = match field.kind {
        Kind::Integer | Kind::Number => false,
        Kind::String | Kind::Array(_) => true,
        _ => {
            let msg = "minimum/maximum apply only to integer, number, string and array fields";
            errs.push(SchemaError::new(at, msg));
            return;
        }
    };
    for (name, bound) in [("minimum", min), ("maximum", max)] {
        let Some(b) = bound else { continue };
        if !b.is_finite() {
            errs.push(SchemaError::new(at, format!("{name} must be finite")));
        } else if is_length && (b < 0.0 || b.fract() != 0.0) {
            let msg = format!("{name} is a length here and must be a non-negative integer");
            errs.push(SchemaError::new(at, msg));
        }
    }
    if let (Some(lo), Some(hi)) = (min, max)
        && lo > hi
    {
        let msg = format!(
            "minimum ({}) is greater than maximum ({})",
            path::num(lo),
            path::num(hi)
        );
        errs.push(SchemaError::new(at, msg));
    }
}

/// Every choice must satisfy the field's type and bounds; stored normalized so that
/// comparison with normalized input is exact (`1` becomes `1.0` for a number field).
fn check_choices(field: &mut Field, at: &str, errs: &mut Errs) {
    let Some(choices) = field.choices.take() else {
        return;
    };
    let bare = Field {
        choices: None,
        ..field.clone()
    };
    let mut normalized = Vec::with_capacity(choices.len());
    for c in &choices {
        // Quoted JSON here: the author needs to see exactly which literal is wrong.
        let what = format!("choice {c}");
        if let Some(n) = check_value(&bare, c, &what, at, errs) {
            normalized.push(n);
        }
    }
    field.choices = Some(normalized);
}

/// The default must satisfy the whole field, choices included; stored normalized.
fn check_default(field: &mut Field, at: &str, errs: &mut Errs) {
    let Some(d) = field.default.take() else {
        return;
    };
    field.default = check_value(field, &d, "default", at, errs);
}

/// Normalizes `v` against `field`, turning each violation into a schema error at `at`.
fn check_value(field: &Field, v: &Value, what: &str, at: &str, errs: &mut Errs) -> Option<Value> {
    let mut found = Vec::new();
    let out = normalize::value(field, v, "", &mut found);
    for viol in found {
        let msg = if viol.path.is_empty() {
            format!("{what} {}", viol.message)
        } else {
            format!("{what} is invalid at {}: {}", viol.path, viol.message)
        };
        errs.push(SchemaError::new(at, msg));
    }
    out
}
