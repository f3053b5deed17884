//! Each field type, accepting and rejecting, with exact outputs.

use evolve_config_schema::{
    Field, Fields, Schema, Violation, array, boolean, integer, json, number, object, string,
};
use serde_json::{Value, json};

fn one(f: Field) -> Schema {
    Schema::builder()
        .field("x", f)
        .build()
        .expect("valid schema")
}

/// Normalizes `{"x": input}` and returns the normalized `x` or the violations.
fn norm(f: Field, input: Value) -> Result<Value, Vec<Violation>> {
    let out = one(f).normalize_value(&json!({ "x": input }))?;
    Ok(Value::Object(out))
}

fn ok(input: Value) -> Result<Value, Vec<Violation>> {
    Ok(json!({ "x": input }))
}

fn err(message: &str) -> Result<Value, Vec<Violation>> {
    Err(vec![Violation::new("x", message)])
}

#[test]
fn string_accepts_and_keeps_as_given() {
    assert_eq!(norm(string(), json!("abc")), ok(json!("abc")));
    assert_eq!(norm(string(), json!("  padded ")), ok(json!("  padded ")));
}

#[test]
fn string_rejects_other_types_and_blank() {
    for bad in [json!(1), json!(1.5), json!(true), json!([]), json!({})] {
        assert_eq!(norm(string(), bad), err("must be a string"));
    }
    assert_eq!(norm(string(), json!("")), err("must not be empty"));
    assert_eq!(norm(string(), json!(" \t\n")), err("must not be empty"));
}

#[test]
fn integer_accepts_i64_range() {
    assert_eq!(norm(integer(), json!(3)), ok(json!(3)));
    assert_eq!(norm(integer(), json!(-7)), ok(json!(-7)));
    assert_eq!(norm(integer(), json!(i64::MAX)), ok(json!(i64::MAX)));
    assert_eq!(norm(integer(), json!(i64::MIN)), ok(json!(i64::MIN)));
}

#[test]
fn integer_rejects_bool_float_and_overflow() {
    assert_eq!(norm(integer(), json!(true)), err("must be an integer"));
    assert_eq!(norm(integer(), json!(3.0)), err("must be an integer"));
    assert_eq!(norm(integer(), json!(3.5)), err("must be an integer"));
    assert_eq!(norm(integer(), json!("3")), err("must be an integer"));
    assert_eq!(
        norm(integer(), json!(u64::MAX)),
        err("is too large for a 64-bit integer")
    );
}

#[test]
fn integer_text_3_0_is_not_an_integer() {
    let s = one(integer());
    assert_eq!(
        s.normalize(r#"{"x": 3.0}"#),
        Err(vec![Violation::new("x", "must be an integer")])
    );
    let expected = json!({"x": 3});
    assert_eq!(s.normalize(r#"{"x": 3}"#).map(Value::Object), Ok(expected));
}

#[test]
fn number_normalizes_to_float() {
    let out = norm(number(), json!(3)).expect("valid");
    assert_eq!(out, json!({"x": 3.0}));
    assert!(out["x"].is_f64());
    assert_eq!(
        serde_json::to_string(&out).ok(),
        Some(r#"{"x":3.0}"#.into())
    );
    assert_eq!(norm(number(), json!(-0.25)), ok(json!(-0.25)));
}

#[test]
fn number_rejects_non_numbers() {
    for bad in [json!(true), json!("1"), json!([1]), json!({})] {
        assert_eq!(norm(number(), bad), err("must be a number"));
    }
}

#[test]
fn number_accepts_extremes_and_non_finite_cannot_arrive() {
    assert_eq!(norm(number(), json!(f64::MAX)), ok(json!(f64::MAX)));
    assert_eq!(norm(number(), json!(i64::MIN)), ok(json!(i64::MIN as f64)));
    // serde_json stores NaN/infinity as null, which counts as absent.
    let s = one(number().required());
    assert_eq!(
        s.normalize_value(&json!({ "x": f64::NAN })),
        Err(vec![Violation::new("x", "is required")])
    );
}

#[test]
fn boolean_accepts_and_rejects() {
    assert_eq!(norm(boolean(), json!(true)), ok(json!(true)));
    assert_eq!(norm(boolean(), json!(false)), ok(json!(false)));
    for bad in [json!(0), json!(1), json!("true"), json!([])] {
        assert_eq!(norm(boolean(), bad), err("must be a boolean"));
    }
}

#[test]
fn array_validates_each_item() {
    assert_eq!(norm(array(integer()), json!([])), ok(json!([])));
    assert_eq!(norm(array(integer()), json!([1, 2])), ok(json!([1, 2])));
    assert_eq!(
        norm(array(number()), json!([1, 2.5])),
        ok(json!([1.0, 2.5]))
    );
    assert_eq!(
        norm(array(integer()), json!({"0": 1})),
        err("must be an array")
    );
    assert_eq!(
        norm(array(integer()), json!([1, "a", 2, true, null])),
        Err(vec![
            Violation::new("x[1]", "must be an integer"),
            Violation::new("x[3]", "must be an integer"),
            Violation::new("x[4]", "must be an integer"),
        ])
    );
}

#[test]
fn array_of_arrays_paths() {
    assert_eq!(
        norm(array(array(string())), json!([["a"], ["b", 1]])),
        Err(vec![Violation::new("x[1][1]", "must be a string")])
    );
}

#[test]
fn object_accepts_and_rejects() {
    let f = || object(Fields::new().field("a", integer()));
    assert_eq!(norm(f(), json!({"a": 1})), ok(json!({"a": 1})));
    assert_eq!(norm(f(), json!({})), ok(json!({})));
    assert_eq!(norm(f(), json!([])), err("must be an object"));
    assert_eq!(norm(f(), json!("{}")), err("must be an object"));
}

#[test]
fn json_accepts_anything_and_keeps_it() {
    for v in [
        json!(1),
        json!("s"),
        json!([1, {"a": null}]),
        json!({"k": [true]}),
    ] {
        assert_eq!(norm(json(), v.clone()), ok(v));
    }
    assert_eq!(norm(array(json()), json!([null, 1])), ok(json!([null, 1])));
}

#[test]
fn json_required_must_be_present() {
    let s = one(json().required());
    assert_eq!(
        s.normalize_value(&json!({})),
        Err(vec![Violation::new("x", "is required")])
    );
    assert_eq!(
        s.normalize_value(&json!({"x": null})),
        Err(vec![Violation::new("x", "is required")])
    );
}
