//! The shipped notes script against the compiled record/notes on the same inputs.

use super::*;
use evolve_operator_sdk::testing::row;
use op_record_notes::Notes;

const SCRIPT: &str = include_str!("../scripts/notes.rhai");
const PATH: &str = "operators/record/notes.rhai";

fn compiled(params: &Value, child: &ArchiveRow) -> Map<String, Value> {
    let schema = <Notes as Operator>::config().build().unwrap();
    let ctx = Context::for_test(Value::Object(schema.normalize_value(params).unwrap()));
    Notes::annotate(&ctx, child, None).unwrap()
}

fn scripted(params: &Value, child: &ArchiveRow) -> Result<Map<String, Value>, String> {
    let ctx = evolve_script::testing::context(PATH, SCRIPT, params.clone(), 0);
    RecordScript::annotate(&ctx, child, None)
}

#[test]
fn annotations_equal_the_compiled_record() {
    let children = [
        row("4-1", 4, Some(0.625), false),
        row("5", 5, Some(1.0), false),
        row("6", 6, Some(0.0), false),
        ArchiveRow {
            status: GenerationStatus::Timeout,
            ..row("7", 7, None, false)
        },
        row("8", 8, Some(f64::NAN), false),
    ];
    for params in [json!({}), json!({"note": "tried a cache"})] {
        for child in &children {
            assert_eq!(
                scripted(&params, child).unwrap(),
                compiled(&params, child),
                "{params}"
            );
        }
    }
}

#[test]
fn an_empty_note_is_refused_with_its_line() {
    let e = scripted(&json!({"note": ""}), &row("1", 1, None, false)).unwrap_err();
    let line = SCRIPT.lines().position(|l| l.contains("throw")).unwrap() + 1;
    assert_eq!(
        e,
        format!("script {PATH} line {line}: config.note must be a non-empty string")
    );
}
