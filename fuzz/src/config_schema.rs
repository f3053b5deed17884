//! The config-schema normalizer: an arbitrary schema declaration (checked by its
//! builder) normalizing arbitrary JSON text and values.

use arbitrary::{Arbitrary, Unstructured};
use evolve_config_schema::{
    Field, Fields, Schema, array, boolean, integer, json, number, object, string,
};
use serde_json::{Map, Number, Value};

/// A JSON value the fuzzer can build directly (text alone rarely reaches deep fields).
#[derive(Debug, Arbitrary)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Int(i) => Value::from(*i),
            Json::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Json::Str(s) => Value::String(s.clone()),
            Json::Arr(a) => Value::Array(a.iter().map(Json::value).collect()),
            Json::Obj(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), v.value())).collect()),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Kind {
    String,
    Integer,
    Number,
    Boolean,
    Json,
    Array(Box<Spec>),
    Object(Vec<(String, Spec)>),
}

#[derive(Debug, Arbitrary)]
enum Modifier {
    Required,
    Default(Json),
    Choices(Vec<Json>),
    Minimum(f64),
    Maximum(f64),
    AdditionalProperties(bool),
}

#[derive(Debug, Arbitrary)]
struct Spec {
    kind: Kind,
    modifiers: Vec<Modifier>,
}

#[derive(Debug, Arbitrary)]
struct Input {
    fields: Vec<(String, Spec)>,
    value: Json,
    text: String,
}

fn fields(list: &[(String, Spec)]) -> Fields {
    list.iter()
        .fold(Fields::new(), |f, (name, spec)| f.field(name, field(spec)))
}

fn field(spec: &Spec) -> Field {
    let base = match &spec.kind {
        Kind::String => string(),
        Kind::Integer => integer(),
        Kind::Number => number(),
        Kind::Boolean => boolean(),
        Kind::Json => json(),
        Kind::Array(items) => array(field(items)),
        Kind::Object(list) => object(fields(list)),
    };
    spec.modifiers.iter().fold(base, |f, m| match m {
        Modifier::Required => f.required(),
        Modifier::Default(v) => f.default(v.value()),
        Modifier::Choices(c) => f.choices(c.iter().map(Json::value)),
        Modifier::Minimum(x) => f.minimum(*x),
        Modifier::Maximum(x) => f.maximum(*x),
        Modifier::AdditionalProperties(a) => f.additional_properties(*a),
    })
}

/// Build the schema; when it is valid, normalize both inputs and describe it.
/// Invariant: normalizing is idempotent (a normalized configuration is stored and
/// normalized again when a workspace is reopened), and a rejected configuration always
/// names at least one violation.
pub fn check(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let builder = input
        .fields
        .iter()
        .fold(Schema::new(), |b, (name, spec)| b.field(name, field(spec)));
    let Ok(schema) = builder.build() else {
        return;
    };
    let _ = schema.describe();
    for result in [
        schema.normalize(&input.text),
        schema.normalize_value(&input.value.value()),
    ] {
        match result {
            Ok(map) => idempotent(&schema, map),
            Err(violations) => assert!(!violations.is_empty(), "rejected without a violation"),
        }
    }
}

fn idempotent(schema: &Schema, map: Map<String, Value>) {
    let once = Value::Object(map);
    match schema.normalize_value(&once) {
        Ok(twice) => assert_eq!(Value::Object(twice), once, "normalizing twice changed it"),
        Err(v) => panic!("a normalized configuration no longer normalizes: {v:?}"),
    }
}
