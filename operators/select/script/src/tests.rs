//! The shipped score_child_prop script against the compiled select/score_child_prop on
//! the same inputs: same picks for every seed, same errors.

use super::*;
use evolve_operator_sdk::testing::{row, view};
use op_select_score_child_prop::ScoreChildProp;

const SCRIPT: &str = include_str!("../scripts/score_child_prop.rhai");
const PATH: &str = "operators/select/policy.rhai";

fn compiled(params: Value, seed: u64, archive: &ArchiveView) -> Result<Vec<String>, String> {
    let schema = <ScoreChildProp as Operator>::config().build().unwrap();
    let mut ctx = Context::for_test(Value::Object(schema.normalize_value(&params).unwrap()));
    ctx.seed = seed;
    ScoreChildProp::select(&ctx, archive)
}

fn scripted(params: Value, seed: u64, archive: &ArchiveView) -> Result<Vec<String>, String> {
    let ctx = evolve_script::testing::context(PATH, SCRIPT, params, seed);
    SelectScript::select(&ctx, archive)
}

fn kids(r: ArchiveRow, children: u32) -> ArchiveRow {
    ArchiveRow { children, ..r }
}

fn archives() -> Vec<ArchiveView> {
    vec![
        view(vec![
            row("1", 1, Some(0.2), true),
            kids(row("3", 3, Some(0.8), true), 9),
        ]),
        view(vec![
            row("a", 1, Some(0.1), true),
            kids(row("b", 2, Some(0.9), true), 2),
            row("c", 3, Some(0.8), true),
            kids(row("d", 4, Some(0.7), true), 5),
            row("e", 5, Some(0.95), false),
            row("f", 6, None, true),
            row("g", 7, Some(f64::NAN), true),
        ]),
        // Every weight underflows: the uniform fallback.
        view(vec![
            kids(row("x", 1, Some(0.5), true), 1000),
            kids(row("y", 2, Some(0.5), true), 1000),
        ]),
        view(vec![row("0", 0, Some(0.0), true)]),
    ]
}

#[test]
fn picks_equal_the_compiled_operator() {
    let configs = [
        json!({}),
        json!({"sharpness": 1.0, "child_scale": 100.0}),
        json!({"sharpness": 3, "child_scale": 2}),
    ];
    for archive in archives() {
        for params in &configs {
            for seed in 0..40u64 {
                assert_eq!(
                    scripted(params.clone(), seed, &archive),
                    compiled(params.clone(), seed, &archive),
                    "seed {seed}, params {params}"
                );
            }
        }
    }
}

#[test]
fn no_candidate_is_the_same_error_with_the_line() {
    assert_eq!(
        compiled(json!({}), 0, &view(vec![])).unwrap_err(),
        "no eligible parent"
    );
    let e = scripted(json!({}), 0, &view(vec![row("1", 1, None, true)])).unwrap_err();
    let line = SCRIPT
        .lines()
        .position(|l| l.contains("throw \"no eligible parent\""))
        .unwrap()
        + 1;
    assert_eq!(e, format!("script {PATH} line {line}: no eligible parent"));
}

#[test]
fn bad_params_are_named() {
    let archive = &archives()[0];
    let e = scripted(json!({"sharpness": 0}), 0, archive).unwrap_err();
    assert!(
        e.ends_with(": config.sharpness must be a number > 0"),
        "{e}"
    );
    let e = scripted(json!({"child_scale": "big"}), 0, archive).unwrap_err();
    assert!(
        e.ends_with(": config.child_scale must be a number > 0"),
        "{e}"
    );
}

#[test]
fn schema_takes_a_builtin_and_params_only() {
    let schema = <SelectScript as Operator>::config().build().unwrap();
    assert!(
        schema
            .normalize(
                r#"{"source": "operators/select/policy.rhai", "builtin": "score_child_prop"}"#
            )
            .is_ok()
    );
    assert!(
        schema
            .normalize(r#"{"source": "operators/select/policy.rhai", "builtin": "greedy"}"#)
            .is_err()
    );
    assert!(
        schema
            .normalize(r#"{"builtin": "score_child_prop"}"#)
            .is_err()
    );
}
