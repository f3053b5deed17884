//! Presence, defaults, choices, bounds, nesting, ordering, refine and the top level.

use evolve_config_schema::{
    Field, Fields, Schema, Violation, array, boolean, integer, json, number, object, string,
};
use serde_json::{Map, Value, json};

fn one(f: Field) -> Schema {
    Schema::builder()
        .field("x", f)
        .build()
        .expect("valid schema")
}

fn run(s: &Schema, input: Value) -> Result<Value, Vec<Violation>> {
    s.normalize_value(&input).map(Value::Object)
}

fn v(path: &str, message: &str) -> Violation {
    Violation::new(path, message)
}

// ---- presence and defaults ----

#[test]
fn required_missing_and_null_are_reported() {
    let s = one(string().required());
    assert_eq!(run(&s, json!({})), Err(vec![v("x", "is required")]));
    assert_eq!(
        run(&s, json!({"x": null})),
        Err(vec![v("x", "is required")])
    );
    assert_eq!(run(&s, json!({"x": "a"})), Ok(json!({"x": "a"})));
}

#[test]
fn default_filled_when_missing_or_null_but_not_when_given() {
    let s = one(integer().default(json!(5)));
    assert_eq!(run(&s, json!({})), Ok(json!({"x": 5})));
    assert_eq!(run(&s, json!({"x": null})), Ok(json!({"x": 5})));
    assert_eq!(run(&s, json!({"x": 6})), Ok(json!({"x": 6})));
}

#[test]
fn number_default_is_normalized_to_float() {
    let s = one(number().default(json!(1)));
    let out = run(&s, json!({})).expect("valid");
    assert_eq!(out, json!({"x": 1.0}));
    assert!(out["x"].is_f64());
}

#[test]
fn optional_without_default_is_absent() {
    let s = one(string());
    assert_eq!(run(&s, json!({})), Ok(json!({})));
    assert_eq!(run(&s, json!({"x": null})), Ok(json!({})));
}

#[test]
fn object_default_gets_nested_defaults_filled() {
    let inner = Fields::new()
        .field("a", integer().default(json!(1)))
        .field("b", string());
    let s = one(object(inner).default(json!({})));
    assert_eq!(run(&s, json!({})), Ok(json!({"x": {"a": 1}})));
    assert_eq!(
        run(&s, json!({"x": {"b": "y"}})),
        Ok(json!({"x": {"a": 1, "b": "y"}}))
    );
}

// ---- choices ----

#[test]
fn choices_accept_members_and_reject_others() {
    let s = one(string().choices([json!("a"), json!("b"), json!("c")]));
    assert_eq!(run(&s, json!({"x": "b"})), Ok(json!({"x": "b"})));
    assert_eq!(
        run(&s, json!({"x": "d"})),
        Err(vec![v("x", "must be one of: a, b, c")])
    );
    // The type is checked before the choices.
    assert_eq!(
        run(&s, json!({"x": 1})),
        Err(vec![v("x", "must be a string")])
    );
}

#[test]
fn choices_compare_after_normalization() {
    let s = one(number().choices([json!(1), json!(2.5)]));
    assert_eq!(run(&s, json!({"x": 1})), Ok(json!({"x": 1.0})));
    assert_eq!(run(&s, json!({"x": 1.0})), Ok(json!({"x": 1.0})));
    assert_eq!(
        run(&s, json!({"x": 2})),
        Err(vec![v("x", "must be one of: 1.0, 2.5")])
    );
    let s = one(integer().choices([json!(1), json!(2)]));
    assert_eq!(run(&s, json!({"x": 2})), Ok(json!({"x": 2})));
    assert_eq!(
        run(&s, json!({"x": 3})),
        Err(vec![v("x", "must be one of: 1, 2")])
    );
}

#[test]
fn choices_on_booleans_and_json() {
    let s = one(boolean().choices([json!(true)]));
    assert_eq!(
        run(&s, json!({"x": false})),
        Err(vec![v("x", "must be one of: true")])
    );
    let s = one(json().choices([json!({"k": 1}), json!([1, "a"])]));
    assert_eq!(run(&s, json!({"x": [1, "a"]})), Ok(json!({"x": [1, "a"]})));
    assert_eq!(
        run(&s, json!({"x": 2})),
        Err(vec![v("x", r#"must be one of: {"k":1}, [1,"a"]"#)])
    );
}

#[test]
fn choices_replace_bound_messages() {
    // 7 is above the maximum too, but the choices say more.
    let s = one(integer().maximum(5.0).choices([json!(1), json!(5)]));
    assert_eq!(
        run(&s, json!({"x": 7})),
        Err(vec![v("x", "must be one of: 1, 5")])
    );
}

// ---- bounds ----

#[test]
fn integer_bounds() {
    let s = one(integer().minimum(1.0).maximum(10.0));
    assert_eq!(run(&s, json!({"x": 1})), Ok(json!({"x": 1})));
    assert_eq!(run(&s, json!({"x": 10})), Ok(json!({"x": 10})));
    assert_eq!(run(&s, json!({"x": 0})), Err(vec![v("x", "must be >= 1")]));
    assert_eq!(
        run(&s, json!({"x": 11})),
        Err(vec![v("x", "must be <= 10")])
    );
}

#[test]
fn integer_bounds_compare_as_f64() {
    let s = one(integer().minimum(1.5));
    assert_eq!(
        run(&s, json!({"x": 1})),
        Err(vec![v("x", "must be >= 1.5")])
    );
    assert_eq!(run(&s, json!({"x": 2})), Ok(json!({"x": 2})));
}

#[test]
fn number_bounds() {
    let s = one(number().minimum(0.0).maximum(0.5));
    assert_eq!(run(&s, json!({"x": 0})), Ok(json!({"x": 0.0})));
    assert_eq!(run(&s, json!({"x": 0.5})), Ok(json!({"x": 0.5})));
    assert_eq!(
        run(&s, json!({"x": -0.1})),
        Err(vec![v("x", "must be >= 0")])
    );
    assert_eq!(
        run(&s, json!({"x": 0.51})),
        Err(vec![v("x", "must be <= 0.5")])
    );
}

#[test]
fn string_length_bounds_count_characters() {
    let s = one(string().minimum(3.0).maximum(4.0));
    assert_eq!(run(&s, json!({"x": "abc"})), Ok(json!({"x": "abc"})));
    assert_eq!(run(&s, json!({"x": "éàüö"})), Ok(json!({"x": "éàüö"})));
    assert_eq!(
        run(&s, json!({"x": "ab"})),
        Err(vec![v("x", "must be at least 3 characters")])
    );
    assert_eq!(
        run(&s, json!({"x": "abcde"})),
        Err(vec![v("x", "must be at most 4 characters")])
    );
    let s = one(string().maximum(1.0));
    assert_eq!(
        run(&s, json!({"x": "ab"})),
        Err(vec![v("x", "must be at most 1 character")])
    );
}

#[test]
fn array_length_bounds() {
    let s = one(array(integer()).minimum(2.0).maximum(3.0));
    assert_eq!(run(&s, json!({"x": [1, 2]})), Ok(json!({"x": [1, 2]})));
    assert_eq!(
        run(&s, json!({"x": [1]})),
        Err(vec![v("x", "must have at least 2 items")])
    );
    assert_eq!(
        run(&s, json!({"x": [1, 2, 3, 4]})),
        Err(vec![v("x", "must have at most 3 items")])
    );
    let s = one(array(integer()).minimum(1.0));
    assert_eq!(
        run(&s, json!({"x": []})),
        Err(vec![v("x", "must have at least 1 item")])
    );
}

#[test]
fn array_length_and_item_problems_are_both_reported() {
    let s = one(array(integer()).minimum(3.0));
    assert_eq!(
        run(&s, json!({"x": ["a"]})),
        Err(vec![
            v("x", "must have at least 3 items"),
            v("x[0]", "must be an integer"),
        ])
    );
}

// ---- nesting ----

fn nested(allow_extra: bool) -> Schema {
    let inner = Fields::new()
        .field("name", string().required())
        .field("size", integer().minimum(1.0));
    Schema::builder()
        .field("sampling", object(inner).additional_properties(allow_extra))
        .build()
        .expect("valid schema")
}

#[test]
fn nested_object_rejects_unknown_keys_by_default() {
    let s = nested(false);
    assert_eq!(
        run(
            &s,
            json!({"sampling": {"name": "n", "size": 0, "extra": 1}})
        ),
        Err(vec![
            v("sampling.extra", "unknown field"),
            v("sampling.size", "must be >= 1"),
        ])
    );
    assert_eq!(
        run(&s, json!({"sampling": {}})),
        Err(vec![v("sampling.name", "is required")])
    );
    assert_eq!(
        run(&s, json!({"sampling": {"size": 2, "name": "n"}})),
        Ok(json!({"sampling": {"name": "n", "size": 2}}))
    );
}

#[test]
fn default_additional_properties_is_false() {
    let s = one(object(Fields::new()));
    assert_eq!(
        run(&s, json!({"x": {"k": 1}})),
        Err(vec![v("x.k", "unknown field")])
    );
}

#[test]
fn nested_object_keeps_extras_after_declared_fields_in_input_order() {
    let s = nested(true);
    let out = s
        .normalize(r#"{"sampling": {"z": 1, "size": 2, "a": [null], "name": "n"}}"#)
        .expect("valid");
    let keys: Vec<&str> = out["sampling"]
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["name", "size", "z", "a"]);
    assert_eq!(
        Value::Object(out),
        json!({"sampling": {"name": "n", "size": 2, "z": 1, "a": [null]}})
    );
}

#[test]
fn unknown_top_level_key_rejected_even_when_nested_allows_extras() {
    let s = nested(true);
    assert_eq!(
        run(&s, json!({"sampling": {"name": "n", "x": 1}, "other": 2})),
        Err(vec![v("other", "unknown field")])
    );
}

#[test]
fn unknown_key_with_null_value_is_still_unknown() {
    let s = one(string());
    assert_eq!(
        run(&s, json!({"y": null})),
        Err(vec![v("y", "unknown field")])
    );
}

#[test]
fn array_of_objects_paths() {
    let item = object(
        Fields::new()
            .field("name", string().required())
            .field("weight", number().default(json!(1))),
    );
    let s = one(array(item));
    assert_eq!(
        run(
            &s,
            json!({"x": [{"name": "a"}, {"name": "b", "weight": 2}]})
        ),
        Ok(json!({"x": [{"name": "a", "weight": 1.0}, {"name": "b", "weight": 2.0}]}))
    );
    assert_eq!(
        run(
            &s,
            json!({"x": [{"name": "a"}, {}, {"name": 3, "w": 0}, 4, {"weight": "h"}]})
        ),
        Err(vec![
            v("x[1].name", "is required"),
            v("x[2].name", "must be a string"),
            v("x[2].w", "unknown field"),
            v("x[3]", "must be an object"),
            v("x[4].name", "is required"),
            v("x[4].weight", "must be a number"),
        ])
    );
}

#[test]
fn indices_sort_numerically() {
    let s = one(array(integer()));
    let input: Vec<Value> = (0..12)
        .map(|i| if i % 5 == 0 { json!("s") } else { json!(i) })
        .collect();
    assert_eq!(
        run(&s, json!({ "x": input })),
        Err(vec![
            v("x[0]", "must be an integer"),
            v("x[5]", "must be an integer"),
            v("x[10]", "must be an integer"),
        ])
    );
}

// ---- collection and order ----

fn wide() -> Schema {
    Schema::builder()
        .field("zeta", string().required())
        .field("alpha", integer().minimum(0.0))
        .field(
            "mid",
            object(Fields::new().field("b", boolean()).field("a", boolean())),
        )
        .field("list", array(string()))
        .build()
        .expect("valid schema")
}

#[test]
fn violations_from_all_fields_are_collected_and_sorted_by_path() {
    let s = wide();
    assert_eq!(
        run(
            &s,
            json!({"mid": {"b": 1, "a": 2, "c": 3}, "alpha": -1, "list": ["", 2], "aaa": 0})
        ),
        Err(vec![
            v("aaa", "unknown field"),
            v("alpha", "must be >= 0"),
            v("list[0]", "must not be empty"),
            v("list[1]", "must be a string"),
            v("mid.a", "must be a boolean"),
            v("mid.b", "must be a boolean"),
            v("mid.c", "unknown field"),
            v("zeta", "is required"),
        ])
    );
}

#[test]
fn output_keeps_declaration_order() {
    let s = wide();
    let out = s
        .normalize(r#"{"list": ["a"], "mid": {"a": true, "b": false}, "alpha": 1, "zeta": "z"}"#)
        .expect("valid");
    let keys: Vec<&String> = out.keys().collect();
    assert_eq!(keys, ["zeta", "alpha", "mid", "list"]);
    let mid: Vec<&String> = out["mid"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(mid, ["b", "a"]);
}

// ---- refine ----

fn lo_below_hi(cfg: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let lo = cfg.get("lo").and_then(Value::as_i64);
    let hi = cfg.get("hi").and_then(Value::as_i64);
    match (lo, hi) {
        (Some(lo), Some(hi)) if lo >= hi => Err(vec![
            v("lo", "must be less than hi"),
            v("", "bounds are inverted"),
        ]),
        _ => Ok(()),
    }
}

fn always_fails_silently(_: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    Err(Vec::new())
}

fn second_check(cfg: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    match cfg.get("hi").and_then(Value::as_i64) {
        Some(hi) if hi > 100 => Err(vec![v("hi", "must leave room")]),
        _ => Ok(()),
    }
}

fn refined() -> Schema {
    Schema::builder()
        .field("lo", integer().default(json!(0)))
        .field("hi", integer().required())
        .refine(lo_below_hi)
        .refine(second_check)
        .build()
        .expect("valid schema")
}

#[test]
fn refine_reports_its_violations_sorted() {
    let s = refined();
    assert_eq!(
        run(&s, json!({"lo": 5, "hi": 5})),
        Err(vec![
            v("", "bounds are inverted"),
            v("lo", "must be less than hi")
        ])
    );
}

#[test]
fn refine_sees_normalized_config_with_defaults() {
    // lo defaults to 0, so hi = 0 is inverted only because the default was filled.
    let s = refined();
    assert_eq!(
        run(&s, json!({"hi": 0})),
        Err(vec![
            v("", "bounds are inverted"),
            v("lo", "must be less than hi")
        ])
    );
}

#[test]
fn all_refine_hooks_run_and_merge() {
    let s = refined();
    assert_eq!(
        run(&s, json!({"lo": 200, "hi": 101})),
        Err(vec![
            v("", "bounds are inverted"),
            v("hi", "must leave room"),
            v("lo", "must be less than hi"),
        ])
    );
}

#[test]
fn refine_runs_only_when_fields_are_valid() {
    // lo >= hi would trip the hook, but the field problem is all that is reported.
    let s = refined();
    assert_eq!(
        run(&s, json!({"lo": 5, "hi": 5, "x": 1})),
        Err(vec![v("x", "unknown field")])
    );
    assert_eq!(
        run(&s, json!({"lo": "5"})),
        Err(vec![v("hi", "is required"), v("lo", "must be an integer")])
    );
}

#[test]
fn refine_passing_leaves_output_unchanged() {
    let s = refined();
    assert_eq!(run(&s, json!({"hi": 3})), Ok(json!({"lo": 0, "hi": 3})));
}

#[test]
fn refine_returning_empty_error_still_fails() {
    let s = Schema::builder()
        .field("a", integer())
        .refine(always_fails_silently)
        .build()
        .expect("valid schema");
    assert_eq!(
        run(&s, json!({})),
        Err(vec![v("", "failed a cross-field check")])
    );
}

// ---- top level and text ----

#[test]
fn invalid_json_text_is_one_violation_without_the_text() {
    let s = one(string());
    assert_eq!(
        s.normalize(r#"{"x": "abc",}"#),
        Err(vec![v("", "is not valid JSON (line 1, column 13)")])
    );
    assert_eq!(
        s.normalize(""),
        Err(vec![v("", "is not valid JSON (line 1, column 0)")])
    );
    assert_eq!(
        s.normalize("{\n  \"x\": sk-SECRET-123\n}"),
        Err(vec![v("", "is not valid JSON (line 2, column 8)")])
    );
}

#[test]
fn top_level_must_be_an_object() {
    let s = one(string());
    for raw in ["[]", "1", "\"s\"", "true"] {
        assert_eq!(
            s.normalize(raw),
            Err(vec![v("", "must be an object")]),
            "{raw}"
        );
    }
}

#[test]
fn null_top_level_means_defaults() {
    let s = Schema::builder()
        .field("a", integer().default(json!(2)))
        .field("b", string())
        .build()
        .expect("valid schema");
    assert_eq!(s.normalize("null").map(Value::Object), Ok(json!({"a": 2})));
    assert_eq!(
        s.normalize_value(&Value::Null).map(Value::Object),
        Ok(json!({"a": 2}))
    );
    let s = one(string().required());
    assert_eq!(s.normalize("null"), Err(vec![v("x", "is required")]));
}

#[test]
fn empty_schema_accepts_only_empty_object() {
    let s = Schema::builder().build().expect("valid schema");
    assert_eq!(s.normalize("{}"), Ok(Map::new()));
    assert_eq!(
        s.normalize(r#"{"a": 1}"#),
        Err(vec![v("a", "unknown field")])
    );
}

// ---- rendering ----

#[test]
fn render_prints_one_line_per_violation() {
    let errs = vec![v("", "must be an object"), v("a[2].name", "is required")];
    assert_eq!(
        Schema::render(&errs),
        "- (config): must be an object\n- a[2].name: is required"
    );
    assert_eq!(Schema::render(&[]), "");
    assert_eq!(v("x", "m").to_string(), "- x: m");
}
