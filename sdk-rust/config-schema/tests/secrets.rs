//! A secret pasted into the wrong place must never be repeated by a violation message.
//! Unknown *keys* may appear in paths; values never appear anywhere.

use evolve_config_schema::{
    Fields, Schema, Violation, array, boolean, integer, number, object, string,
};
use serde_json::{Value, json};

const SECRET: &str = "sk-SECRET-123";

fn schema() -> Schema {
    Schema::builder()
        .field("count", integer().minimum(1.0))
        .field("ratio", number())
        .field("flag", boolean())
        .field("mode", string().choices([json!("a"), json!("b")]))
        .field("name", string().maximum(3.0))
        .field("list", array(integer()).maximum(1.0))
        .field("nested", object(Fields::new().field("inner", integer())))
        .field("open", object(Fields::new()).additional_properties(true))
        .build()
        .expect("valid schema")
}

fn assert_not_echoed(errs: &[Violation]) {
    assert!(!errs.is_empty());
    for v in errs {
        assert!(
            !v.message.contains(SECRET),
            "message echoes the secret: {v}"
        );
        assert!(!v.path.contains(SECRET), "path echoes the secret: {v}");
    }
    assert!(!Schema::render(errs).contains(SECRET));
}

#[test]
fn secret_in_wrong_typed_fields_is_not_echoed() {
    let input = json!({
        "count": SECRET,
        "ratio": SECRET,
        "flag": SECRET,
        "mode": SECRET,
        "name": SECRET,
        "list": [SECRET, SECRET],
        "nested": {"inner": SECRET, "stray": SECRET},
        "open": SECRET,
        "unknown": SECRET
    });
    let errs = schema().normalize_value(&input).err().unwrap_or_default();
    assert_not_echoed(&errs);
    assert_eq!(
        errs,
        vec![
            Violation::new("count", "must be an integer"),
            Violation::new("flag", "must be a boolean"),
            Violation::new("list", "must have at most 1 item"),
            Violation::new("list[0]", "must be an integer"),
            Violation::new("list[1]", "must be an integer"),
            Violation::new("mode", "must be one of: a, b"),
            Violation::new("name", "must be at most 3 characters"),
            Violation::new("nested.inner", "must be an integer"),
            Violation::new("nested.stray", "unknown field"),
            Violation::new("open", "must be an object"),
            Violation::new("ratio", "must be a number"),
            Violation::new("unknown", "unknown field"),
        ]
    );
}

#[test]
fn secret_as_nested_container_value_is_not_echoed() {
    let input = json!({
        "count": {"key": SECRET},
        "nested": [SECRET],
        "deep": {"deeper": [SECRET]}
    });
    let errs = schema().normalize_value(&input).err().unwrap_or_default();
    assert_not_echoed(&errs);
    assert_eq!(
        errs,
        vec![
            Violation::new("count", "must be an integer"),
            Violation::new("deep", "unknown field"),
            Violation::new("nested", "must be an object"),
        ]
    );
}

#[test]
fn unknown_key_is_named_but_its_value_is_not() {
    let errs = schema()
        .normalize(&format!(r#"{{"api_key": "{SECRET}"}}"#))
        .err()
        .unwrap_or_default();
    assert_not_echoed(&errs);
    assert_eq!(errs, vec![Violation::new("api_key", "unknown field")]);
}

#[test]
fn secret_in_broken_json_text_is_not_echoed() {
    for raw in [
        format!(r#"{{"count": {SECRET}}}"#),
        format!(r#"{{"count": "{SECRET}"#),
        format!(r#"{{"count": "{SECRET}\q"}}"#),
        SECRET.to_string(),
    ] {
        let errs = schema().normalize(&raw).err().unwrap_or_default();
        assert_not_echoed(&errs);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "");
        assert!(
            errs[0]
                .message
                .starts_with("is not valid JSON (line 1, column ")
        );
    }
}

#[test]
fn secret_in_valid_top_level_non_object_is_not_echoed() {
    let errs = schema()
        .normalize_value(&Value::String(SECRET.into()))
        .err()
        .unwrap_or_default();
    assert_not_echoed(&errs);
    assert_eq!(errs, vec![Violation::new("", "must be an object")]);
}
