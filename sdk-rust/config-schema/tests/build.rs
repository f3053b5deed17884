//! Every author mistake `SchemaBuilder::build` reports, with exact errors.

use evolve_config_schema::{
    Field, Fields, Schema, SchemaError, array, boolean, integer, json, number, object, string,
};
use serde_json::json;

fn errors_of(f: Field) -> Vec<SchemaError> {
    match Schema::builder().field("x", f).build() {
        Ok(_) => Vec::new(),
        Err(e) => e,
    }
}

fn e(path: &str, message: &str) -> SchemaError {
    SchemaError::new(path, message)
}

#[test]
fn default_of_wrong_type() {
    assert_eq!(
        errors_of(integer().default(json!("a"))),
        vec![e("x", "default must be an integer")]
    );
    assert_eq!(
        errors_of(integer().default(json!(1.0))),
        vec![e("x", "default must be an integer")]
    );
    assert_eq!(
        errors_of(string().default(json!(" "))),
        vec![e("x", "default must not be empty")]
    );
    assert_eq!(
        errors_of(array(string()).default(json!(["a", 1]))),
        vec![e("x", "default is invalid at [1]: must be a string")]
    );
}

#[test]
fn default_violating_bounds() {
    assert_eq!(
        errors_of(integer().minimum(1.0).default(json!(0))),
        vec![e("x", "default must be >= 1")]
    );
    assert_eq!(
        errors_of(number().maximum(1.0).default(json!(1.5))),
        vec![e("x", "default must be <= 1")]
    );
    assert_eq!(
        errors_of(string().minimum(2.0).default(json!("a"))),
        vec![e("x", "default must be at least 2 characters")]
    );
    assert_eq!(
        errors_of(array(integer()).maximum(1.0).default(json!([1, 2]))),
        vec![e("x", "default must have at most 1 item")]
    );
}

#[test]
fn default_not_in_choices() {
    assert_eq!(
        errors_of(
            string()
                .choices([json!("a"), json!("b")])
                .default(json!("c"))
        ),
        vec![e("x", "default must be one of: a, b")]
    );
}

#[test]
fn default_of_nested_object_is_checked_field_by_field() {
    let inner = Fields::new()
        .field("a", integer().required())
        .field("b", boolean());
    assert_eq!(
        errors_of(object(inner).default(json!({"b": 1, "c": 2}))),
        vec![
            e("x", "default is invalid at a: is required"),
            e("x", "default is invalid at b: must be a boolean"),
            e("x", "default is invalid at c: unknown field"),
        ]
    );
}

#[test]
fn nested_field_default_is_checked_at_its_own_path() {
    let inner = Fields::new().field("a", integer().default(json!("s")));
    assert_eq!(
        errors_of(object(inner)),
        vec![e("x.a", "default must be an integer")]
    );
}

#[test]
fn null_default_is_rejected() {
    assert_eq!(
        errors_of(json().default(json!(null))),
        vec![e(
            "x",
            "default must not be null (null means absent; omit the default)"
        )]
    );
}

#[test]
fn required_with_default() {
    assert_eq!(
        errors_of(integer().required().default(json!(1))),
        vec![e("x", "cannot be both required and have a default")]
    );
}

#[test]
fn duplicate_and_empty_names() {
    let result = Schema::builder()
        .field("a", integer())
        .field("", integer())
        .field("a", string())
        .field(
            "o",
            object(Fields::new().field("k", json()).field("k", json())),
        )
        .build();
    assert_eq!(
        result.err(),
        Some(vec![
            e("", "field name must not be empty"),
            e("a", "duplicate field name"),
            e("o.k", "duplicate field name"),
        ])
    );
}

#[test]
fn additional_properties_on_non_object() {
    let msg = "additional_properties applies only to object fields";
    assert_eq!(
        errors_of(string().additional_properties(true)),
        vec![e("x", msg)]
    );
    assert_eq!(
        errors_of(array(integer()).additional_properties(false)),
        vec![e("x", msg)]
    );
    assert_eq!(
        errors_of(object(Fields::new()).additional_properties(true)),
        vec![]
    );
}

#[test]
fn minimum_greater_than_maximum() {
    assert_eq!(
        errors_of(integer().minimum(5.0).maximum(1.0)),
        vec![e("x", "minimum (5) is greater than maximum (1)")]
    );
    assert_eq!(
        errors_of(number().minimum(0.5).maximum(0.25)),
        vec![e("x", "minimum (0.5) is greater than maximum (0.25)")]
    );
    assert_eq!(errors_of(integer().minimum(2.0).maximum(2.0)), vec![]);
}

#[test]
fn bounds_on_types_without_them() {
    let msg = "minimum/maximum apply only to integer, number, string and array fields";
    assert_eq!(errors_of(boolean().minimum(1.0)), vec![e("x", msg)]);
    assert_eq!(errors_of(json().maximum(1.0)), vec![e("x", msg)]);
    assert_eq!(
        errors_of(object(Fields::new()).minimum(1.0)),
        vec![e("x", msg)]
    );
}

#[test]
fn bad_bound_values() {
    assert_eq!(
        errors_of(number().minimum(f64::NAN).maximum(f64::INFINITY)),
        vec![
            e("x", "minimum must be finite"),
            e("x", "maximum must be finite"),
        ]
    );
    assert_eq!(
        errors_of(string().minimum(1.5).maximum(-1.0)),
        vec![
            e(
                "x",
                "minimum is a length here and must be a non-negative integer"
            ),
            e(
                "x",
                "maximum is a length here and must be a non-negative integer"
            ),
            e("x", "minimum (1.5) is greater than maximum (-1)"),
        ]
    );
}

#[test]
fn choices_must_satisfy_the_field() {
    assert_eq!(
        errors_of(integer().choices([json!(1), json!("two"), json!(true)])),
        vec![
            e("x", r#"choice "two" must be an integer"#),
            e("x", "choice true must be an integer"),
        ]
    );
    assert_eq!(
        errors_of(integer().minimum(1.0).choices([json!(0), json!(1)])),
        vec![e("x", "choice 0 must be >= 1")]
    );
    assert_eq!(
        errors_of(string().choices([json!("")])),
        vec![e("x", r#"choice "" must not be empty"#)]
    );
    assert_eq!(
        errors_of(string().choices([])),
        vec![e("x", "choices must not be empty")]
    );
}

#[test]
fn array_items_cannot_be_required_or_defaulted() {
    assert_eq!(
        errors_of(array(string().required())),
        vec![e("x[]", "array items cannot be required")]
    );
    assert_eq!(
        errors_of(array(string().default(json!("a")))),
        vec![e("x[]", "array items cannot have a default")]
    );
    assert_eq!(
        errors_of(array(integer().minimum(3.0).maximum(1.0))),
        vec![e("x[]", "minimum (3) is greater than maximum (1)")]
    );
}

#[test]
fn value_checks_are_skipped_on_a_broken_declaration() {
    // The default would also fail the bounds, but the bounds themselves are the problem.
    assert_eq!(
        errors_of(integer().minimum(5.0).maximum(1.0).default(json!(3))),
        vec![e("x", "minimum (5) is greater than maximum (1)")]
    );
}

#[test]
fn all_errors_are_collected_and_sorted_by_path() {
    let result = Schema::builder()
        .field("zeta", integer().required().default(json!(1)))
        .field("list", array(integer().minimum(2.0).maximum(1.0)))
        .field(
            "obj",
            object(Fields::new().field("b", string().default(json!(1)))),
        )
        .field("alpha", boolean().additional_properties(true))
        .build();
    assert_eq!(
        result.err(),
        Some(vec![
            e(
                "alpha",
                "additional_properties applies only to object fields"
            ),
            e("list[]", "minimum (2) is greater than maximum (1)"),
            e("obj.b", "default must be a string"),
            e("zeta", "cannot be both required and have a default"),
        ])
    );
}

#[test]
fn schema_error_display() {
    assert_eq!(
        e("a.b", "duplicate field name").to_string(),
        "a.b: duplicate field name"
    );
    assert_eq!(e("", "m").to_string(), "(schema): m");
    let boxed: Box<dyn std::error::Error> = Box::new(e("a", "m"));
    assert_eq!(boxed.to_string(), "a: m");
}
