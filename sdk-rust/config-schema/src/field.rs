//! Field declarations: the typed constructors and their builder-style modifiers.

use serde_json::Value;

/// The type of a field.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    String,
    Integer,
    Number,
    Boolean,
    Array(Box<Field>),
    Object(Fields),
    Json,
}

impl Kind {
    /// The JSON Schema `type` name; `None` for free JSON, which accepts any type.
    pub(crate) fn type_name(&self) -> Option<&'static str> {
        match self {
            Kind::String => Some("string"),
            Kind::Integer => Some("integer"),
            Kind::Number => Some("number"),
            Kind::Boolean => Some("boolean"),
            Kind::Array(_) => Some("array"),
            Kind::Object(_) => Some("object"),
            Kind::Json => None,
        }
    }
}

/// A typed configuration field with its modifiers.
///
/// Create one with [`string()`], [`integer()`], [`number()`], [`boolean()`], [`array()`],
/// [`object()`] or [`json()`], then chain modifiers. Modifiers only record what was
/// asked; [`SchemaBuilder::build`](crate::SchemaBuilder::build) checks that the
/// combination makes sense.
#[derive(Debug, Clone)]
pub struct Field {
    pub(crate) kind: Kind,
    pub(crate) required: bool,
    pub(crate) default: Option<Value>,
    pub(crate) choices: Option<Vec<Value>>,
    pub(crate) minimum: Option<f64>,
    pub(crate) maximum: Option<f64>,
    pub(crate) description: Option<String>,
    /// `None` when never set, so that the build can tell "set on a non-object" apart.
    pub(crate) additional_properties: Option<bool>,
}

impl Field {
    fn of(kind: Kind) -> Self {
        Self {
            kind,
            required: false,
            default: None,
            choices: None,
            minimum: None,
            maximum: None,
            description: None,
            additional_properties: None,
        }
    }

    /// The field must be present (and not `null`). Cannot be combined with a default.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// The value used when the field is absent or `null`. It is checked against the
    /// field at build time and stored normalized.
    pub fn default(mut self, v: Value) -> Self {
        self.default = Some(v);
        self
    }

    /// The value must equal one of `c` after normalization. Described as `enum`.
    pub fn choices<I: IntoIterator<Item = Value>>(mut self, c: I) -> Self {
        self.choices = Some(c.into_iter().collect());
        self
    }

    /// Lower bound: the value for `integer`/`number`, the length for `string`
    /// (characters) and `array` (items). Inclusive.
    pub fn minimum(mut self, m: f64) -> Self {
        self.minimum = Some(m);
        self
    }

    /// Upper bound, inclusive; see [`Field::minimum`].
    pub fn maximum(mut self, m: f64) -> Self {
        self.maximum = Some(m);
        self
    }

    /// Human-readable description, included in [`Schema::describe`](crate::Schema::describe).
    pub fn description(mut self, d: &str) -> Self {
        self.description = Some(d.to_owned());
        self
    }

    /// For [`object()`] fields only: `true` keeps unknown keys as they are, `false` (the
    /// default) rejects them. Top-level unknown keys are always rejected.
    pub fn additional_properties(mut self, allow: bool) -> Self {
        self.additional_properties = Some(allow);
        self
    }

    /// Whether unknown keys are kept (objects only; false otherwise).
    pub(crate) fn allows_extra(&self) -> bool {
        self.additional_properties.unwrap_or(false)
    }
}

/// A string, non-empty after trimming whitespace. Kept exactly as given.
pub fn string() -> Field {
    Field::of(Kind::String)
}

/// A JSON integer that fits in an `i64`. Booleans and floats (even `3.0`) are rejected.
pub fn integer() -> Field {
    Field::of(Kind::Integer)
}

/// A finite JSON number, integer or float, normalized to a float (`3` becomes `3.0`).
pub fn number() -> Field {
    Field::of(Kind::Number)
}

/// `true` or `false`.
pub fn boolean() -> Field {
    Field::of(Kind::Boolean)
}

/// An array whose every item must satisfy `items`. Violations name the item, e.g.
/// `components[2]`. `items` may not be `required` or have a default.
pub fn array(items: Field) -> Field {
    Field::of(Kind::Array(Box::new(items)))
}

/// A nested object with its own fields. Unknown keys are rejected unless
/// [`Field::additional_properties`] is set to `true`.
pub fn object(fields: Fields) -> Field {
    Field::of(Kind::Object(fields))
}

/// Free JSON: any value is accepted and kept as is.
pub fn json() -> Field {
    Field::of(Kind::Json)
}

/// An ordered list of named fields; declaration order is kept in the normalized output
/// and in [`Schema::describe`](crate::Schema::describe).
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub(crate) entries: Vec<(String, Field)>,
}

impl Fields {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a field. Duplicate names are reported by the build, not here.
    pub fn field(mut self, name: &str, f: Field) -> Self {
        self.entries.push((name.to_owned(), f));
        self
    }

    /// Whether a field of this name is declared.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.entries.iter().any(|(n, _)| n == name)
    }
}
