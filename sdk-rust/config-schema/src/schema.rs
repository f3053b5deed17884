//! The schema, its builder and the top-level entry points.

use serde_json::{Map, Value};

use crate::field::{Field, Fields};
use crate::{SchemaError, Violation, build, describe, normalize, path};

/// A cross-field check: sees the normalized configuration (read-only, so it cannot
/// change it) and returns the violations it finds. Paths may name fields.
pub type Refine = fn(&Map<String, Value>) -> Result<(), Vec<Violation>>;

/// A checked configuration schema. Declare one with [`Schema::new`] (or its alias
/// [`Schema::builder`]), add fields, then call [`SchemaBuilder::build`].
#[derive(Debug, Clone)]
pub struct Schema {
    fields: Fields,
    refines: Vec<Refine>,
}

/// Collects the top-level fields and refine hooks of a [`Schema`].
#[derive(Debug, Clone, Default)]
pub struct SchemaBuilder {
    fields: Fields,
    refines: Vec<Refine>,
}

impl SchemaBuilder {
    /// An empty builder; the same as [`Schema::new`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a top-level field. Declaration order is kept.
    pub fn field(mut self, name: &str, f: Field) -> Self {
        self.fields = self.fields.field(name, f);
        self
    }

    /// Adds a validation-only cross-field hook. It runs only when every field is
    /// individually valid, on the normalized object, and cannot change it. Several
    /// hooks may be added; all run, in order, and their violations are merged and
    /// sorted by path. A hook returning `Err` with no violations is reported as a
    /// violation of the whole configuration, so a failure is never silently dropped.
    /// Hook messages are shown as written: do not put configuration values in them.
    pub fn refine(mut self, f: Refine) -> Self {
        self.refines.push(f);
        self
    }

    /// Checks the declaration: defaults satisfy their field (type, choices, bounds,
    /// nested objects) and are stored normalized; `required` with a default, duplicate
    /// or empty field names, `additional_properties` on a non-object, bounds on a type
    /// without them, non-finite bounds, non-integral length bounds, `minimum >
    /// maximum`, empty choices and choices that do not satisfy the field are errors.
    /// Returns every error, sorted by path.
    pub fn build(mut self) -> Result<Schema, Vec<SchemaError>> {
        let mut errs = Vec::new();
        build::check_fields(&mut self.fields, "", &mut errs);
        if errs.is_empty() {
            return Ok(Schema {
                fields: self.fields,
                refines: self.refines,
            });
        }
        errs.sort_by(|a, b| path::compare(&a.path, &b.path));
        Err(errs)
    }
}

impl Schema {
    /// Starts a schema declaration; the same as [`Schema::builder`].
    // Returning the builder from `new` mirrors the DSL this crate is modelled on
    // (`Schema::new().field(..).build()`) and is what the operator SDK calls.
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> SchemaBuilder {
        SchemaBuilder::new()
    }

    /// Starts a schema declaration.
    pub fn builder() -> SchemaBuilder {
        SchemaBuilder::new()
    }

    /// Parses `raw` as JSON and normalizes it (see [`Schema::normalize_value`]). Text
    /// that is not JSON gives one violation at the empty path; it names the position
    /// of the error, never the text.
    pub fn normalize(&self, raw: &str) -> Result<Map<String, Value>, Vec<Violation>> {
        match serde_json::from_str::<Value>(raw) {
            Ok(v) => self.normalize_value(&v),
            Err(e) => {
                // serde_json's own message is not used: keep the contract that no part
                // of the input is ever quoted back.
                let msg = format!(
                    "is not valid JSON (line {}, column {})",
                    e.line(),
                    e.column()
                );
                Err(vec![Violation::new("", msg)])
            }
        }
    }

    /// Normalizes a configuration: the top level must be an object (`null` counts as
    /// `{}`); unknown top-level keys are always rejected; missing required fields are
    /// reported; defaults are filled in. Every violation is collected and sorted by
    /// path; the refine hooks run only if there were none. The output keeps the
    /// declaration order.
    pub fn normalize_value(&self, raw: &Value) -> Result<Map<String, Value>, Vec<Violation>> {
        let empty = Map::new();
        let map = match raw {
            Value::Null => &empty,
            Value::Object(m) => m,
            _ => return Err(vec![Violation::new("", "must be an object")]),
        };
        let mut errs = Vec::new();
        let out = normalize::object_value(&self.fields, false, map, "", &mut errs);
        match out {
            Some(out) if errs.is_empty() => self.run_refines(out),
            _ => Err(sorted(errs)),
        }
    }

    fn run_refines(&self, out: Map<String, Value>) -> Result<Map<String, Value>, Vec<Violation>> {
        let mut errs = Vec::new();
        for refine in &self.refines {
            match refine(&out) {
                Ok(()) => {}
                Err(v) if v.is_empty() => {
                    errs.push(Violation::new("", "failed a cross-field check"));
                }
                Err(v) => errs.extend(v),
            }
        }
        if errs.is_empty() {
            Ok(out)
        } else {
            Err(sorted(errs))
        }
    }

    /// A JSON-Schema-like description: `{"type": "object", "properties": {...},
    /// "required": [...], "additionalProperties": false}`. Each property lists, when
    /// set and in this order: `type` (omitted for free JSON), `default`, `enum`,
    /// `minimum`, `maximum`, `minLength`, `maxLength`, `minItems`, `maxItems`,
    /// `description`, `items`, `properties`, `required`, `additionalProperties`.
    pub fn describe(&self) -> Value {
        describe::object(&self.fields, false, &Map::new())
    }

    /// Renders violations the way the CLI prints them: one `- path: message` line each
    /// (`- (config): message` for the whole configuration), joined by newlines, with
    /// no trailing newline.
    pub fn render(violations: &[Violation]) -> String {
        let lines: Vec<String> = violations.iter().map(Violation::to_string).collect();
        lines.join("\n")
    }
}

/// Sorts by path, keeping the order of violations at the same path.
fn sorted(mut errs: Vec<Violation>) -> Vec<Violation> {
    errs.sort_by(|a, b| path::compare(&a.path, &b.path));
    errs
}
