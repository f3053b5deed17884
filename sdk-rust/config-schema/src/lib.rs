//! Declarative configuration schemas for evolve operators.
//!
//! An operator declares the shape of its configuration once, as a [`Schema`]. The same
//! declaration then serves three purposes:
//!
//! * [`Schema::normalize`] checks a raw JSON configuration and returns it normalized
//!   (defaults filled in, numbers as declared) or *every* [`Violation`], sorted by path;
//! * [`Schema::describe`] renders a JSON-Schema-like description for `evolve operator list`
//!   and for documentation;
//! * [`SchemaBuilder::build`] checks the declaration itself and reports every author
//!   mistake as a [`SchemaError`] (for example a default that violates its own bounds).
//!
//! The crate is pure computation (no I/O, no threads), so it runs unchanged inside
//! WebAssembly guests and on the host.
//!
//! # Example
//!
//! ```
//! use evolve_config_schema::{Schema, Violation, array, integer, number, string};
//! use serde_json::{Map, Value, json};
//!
//! // A cross-field check, run only once every field is individually valid.
//! fn top_k_fits(cfg: &Map<String, Value>) -> Result<(), Vec<Violation>> {
//!     let k = cfg.get("top_k").and_then(Value::as_i64).unwrap_or(0);
//!     let n = cfg.get("pool").and_then(Value::as_array).map_or(0, Vec::len);
//!     if k as usize > n {
//!         return Err(vec![Violation::new("top_k", "must not exceed the size of pool")]);
//!     }
//!     Ok(())
//! }
//!
//! let schema = Schema::new()
//!     .field("model", string().required().description("Model name"))
//!     .field("temperature", number().default(json!(1)).minimum(0.0).maximum(2.0))
//!     .field("top_k", integer().default(json!(1)).minimum(1.0))
//!     .field("pool", array(string()).minimum(1.0))
//!     .refine(top_k_fits)
//!     .build()
//!     .expect("the schema is valid");
//!
//! // Defaults are filled in; `number` fields are normalized to floats.
//! let cfg = schema.normalize(r#"{"model": "m1", "pool": ["a", "b"]}"#).unwrap();
//! assert_eq!(
//!     Value::Object(cfg),
//!     json!({"model": "m1", "temperature": 1.0, "top_k": 1, "pool": ["a", "b"]})
//! );
//!
//! // Every violation is reported, sorted by path; values are never echoed.
//! let errs = schema.normalize(r#"{"temperature": "hot", "pool": [7], "extra": 1}"#).unwrap_err();
//! assert_eq!(
//!     Schema::render(&errs),
//!     "- extra: unknown field\n\
//!      - model: is required\n\
//!      - pool[0]: must be a string\n\
//!      - temperature: must be a number"
//! );
//!
//! // The refine hook runs last, on the normalized configuration.
//! let errs = schema.normalize(r#"{"model": "m1", "pool": ["a"], "top_k": 2}"#).unwrap_err();
//! assert_eq!(errs, vec![Violation::new("top_k", "must not exceed the size of pool")]);
//! ```
//!
//! # Semantics worth knowing
//!
//! * A `null` value counts as *absent*: a required field given `null` is reported as
//!   missing and an optional one gets its default. A top-level `null` is treated as `{}`.
//!   (YAML recipes write `key:` for "not set", which arrives as `null`.) Inside arrays,
//!   `null` is an ordinary value, accepted only by [`json()`] items.
//! * Strings are kept exactly as given; "non-empty" is judged after trimming whitespace.
//!   Lengths count Unicode scalar values.
//! * A field with [`Field::choices`] is checked only against its choices (the build
//!   guarantees every choice satisfies the field's bounds), so at most one violation is
//!   reported per scalar value.
//! * Defaults and choices are stored normalized: a `number` default of `1` becomes `1.0`,
//!   and an `object` default of `{}` gets its nested defaults filled in at build time.
//! * Paths are sorted segment by segment, with array indices compared as numbers, so
//!   `a[2]` comes before `a[10]`. Violations at the same path keep their order.
//! * Messages never contain the offending value, so a secret pasted into the wrong field
//!   is not repeated. Unknown *keys* do appear in paths. Messages returned by a
//!   [`SchemaBuilder::refine`] hook are the hook author's responsibility.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod build;
mod describe;
mod field;
mod normalize;
mod path;
mod schema;

pub use field::{Field, Fields, array, boolean, integer, json, number, object, string};
pub use schema::{Refine, Schema, SchemaBuilder};

use std::fmt;

/// One field-level problem with a configuration.
///
/// `message` never echoes the offending value, so a secret pasted into the wrong field
/// is not repeated in logs or on screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Path to the field, e.g. `sampling.size` or `components[2].name`; empty for the
    /// configuration as a whole.
    pub path: String,
    /// What was expected, e.g. `must be >= 1`.
    pub message: String,
}

impl Violation {
    /// A violation at `path` (empty for the whole configuration).
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    /// Renders `- path: message`, or `- (config): message` for the whole configuration.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(config)"
        } else {
            &self.path
        };
        write!(f, "- {path}: {}", self.message)
    }
}

/// A mistake in the schema itself (an author error), found by [`SchemaBuilder::build`].
///
/// `path` names the field declaration: `a.b` for a nested field, `tags[]` for the items
/// of an array field, empty for the schema as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// The field declaration at fault.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl SchemaError {
    /// A schema error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for SchemaError {
    /// Renders `path: message`, or `(schema): message` for the schema as a whole.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(schema)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

impl std::error::Error for SchemaError {}
