//! `Schema::describe`: exact JSON, including key order and integer/float numbers.

use evolve_config_schema::{Fields, Schema, array, boolean, integer, json, number, object, string};
use serde_json::{Value, json};

/// Compares values and their serializations: `Value` equality ignores key order and
/// the text shows whether a number is `1` or `1.0`.
fn assert_exact(actual: &Value, expected: &Value) {
    assert_eq!(actual, expected);
    assert_eq!(
        serde_json::to_string_pretty(actual).ok(),
        serde_json::to_string_pretty(expected).ok()
    );
}

fn everything() -> Schema {
    let sampling = Fields::new()
        .field("name", string().required())
        .field("k", integer().default(json!(2)));
    Schema::builder()
        .field(
            "model",
            string()
                .required()
                .minimum(1.0)
                .maximum(64.0)
                .description("Model name"),
        )
        .field(
            "mode",
            string()
                .choices([json!("fast"), json!("slow")])
                .default(json!("fast")),
        )
        .field(
            "size",
            integer().minimum(1.0).maximum(10.0).default(json!(3)),
        )
        .field("ratio", integer().minimum(0.5))
        .field(
            "temperature",
            number().minimum(0.0).maximum(2.0).default(json!(1)),
        )
        .field("levels", number().choices([json!(1), json!(2.5)]))
        .field("verbose", boolean().default(json!(false)))
        .field(
            "tags",
            array(string().maximum(8.0)).minimum(1.0).maximum(4.0),
        )
        .field(
            "sampling",
            object(sampling)
                .default(json!({"name": "n"}))
                .description("How to sample"),
        )
        .field("extra", object(Fields::new()).additional_properties(true))
        .field("blob", json().description("Anything"))
        .field("items", array(json()))
        .build()
        .expect("valid schema")
}

#[test]
fn describes_every_feature() {
    let expected = json!({
        "type": "object",
        "properties": {
            "model": {
                "type": "string",
                "minLength": 1,
                "maxLength": 64,
                "description": "Model name"
            },
            "mode": {
                "type": "string",
                "default": "fast",
                "enum": ["fast", "slow"]
            },
            "size": {
                "type": "integer",
                "default": 3,
                "minimum": 1,
                "maximum": 10
            },
            "ratio": {
                "type": "integer",
                "minimum": 0.5
            },
            "temperature": {
                "type": "number",
                "default": 1.0,
                "minimum": 0.0,
                "maximum": 2.0
            },
            "levels": {
                "type": "number",
                "enum": [1.0, 2.5]
            },
            "verbose": {
                "type": "boolean",
                "default": false
            },
            "tags": {
                "type": "array",
                "minItems": 1,
                "maxItems": 4,
                "items": {"type": "string", "maxLength": 8}
            },
            "sampling": {
                "type": "object",
                "default": {"name": "n", "k": 2},
                "description": "How to sample",
                "properties": {
                    "name": {"type": "string"},
                    "k": {"type": "integer", "default": 2}
                },
                "required": ["name"],
                "additionalProperties": false
            },
            "extra": {
                "type": "object",
                "properties": {},
                "required": [],
                "additionalProperties": true
            },
            "blob": {"description": "Anything"},
            "items": {"type": "array", "items": {}}
        },
        "required": ["model"],
        "additionalProperties": false
    });
    assert_exact(&everything().describe(), &expected);
}

#[test]
fn describe_is_deterministic() {
    let a = serde_json::to_string(&everything().describe()).ok();
    let b = serde_json::to_string(&everything().describe()).ok();
    assert_eq!(a, b);
}

#[test]
fn describes_empty_schema() {
    let s = Schema::builder().build().expect("valid schema");
    assert_exact(
        &s.describe(),
        &json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false}),
    );
}

#[test]
fn describes_array_of_objects() {
    let item = object(Fields::new().field("w", number().default(json!(2))));
    let s = Schema::builder()
        .field("list", array(item).required())
        .build()
        .expect("valid schema");
    assert_exact(
        &s.describe(),
        &json!({
            "type": "object",
            "properties": {
                "list": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"w": {"type": "number", "default": 2.0}},
                        "required": [],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["list"],
            "additionalProperties": false
        }),
    );
}
