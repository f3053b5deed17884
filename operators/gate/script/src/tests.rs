//! The shipped hillclimb and parent_eligible scripts against the compiled gates of the
//! same names, on the same inputs.

use super::*;
use evolve_operator_sdk::testing::{row, view};
use op_gate_hillclimb::Hillclimb;

const SCRIPT: &str = include_str!("../scripts/hillclimb.rhai");
const PATH: &str = "operators/gate/policy.rhai";

fn input_archive() -> ArchiveView {
    view(vec![row("0", 0, Some(0.4), true)])
}

fn compiled(params: &Value, child: &ArchiveRow, parent: Option<&ArchiveRow>) -> (Verdict, String) {
    let schema = <Hillclimb as Operator>::config().build().unwrap();
    let ctx = Context::for_test(Value::Object(schema.normalize_value(params).unwrap()));
    let archive = input_archive();
    let input = GateInput {
        archive: &archive,
        diff: None,
    };
    let d = Hillclimb::decide(&ctx, child, parent, &input).unwrap();
    (d.verdict, d.reason)
}

fn scripted(
    params: &Value,
    child: &ArchiveRow,
    parent: Option<&ArchiveRow>,
) -> Result<(Verdict, String), String> {
    let ctx = evolve_script::testing::context(PATH, SCRIPT, params.clone(), 0);
    let archive = input_archive();
    let input = GateInput {
        archive: &archive,
        diff: None,
    };
    GateScript::decide(&ctx, child, parent, &input).map(|d| (d.verdict, d.reason))
}

#[test]
fn decisions_equal_the_compiled_gate() {
    let scores = [
        None,
        Some(0.0),
        Some(0.3),
        Some(0.4),
        Some(0.1 + 0.2),
        Some(0.30000000000000004),
        Some(1.0),
        Some(f64::NAN),
    ];
    for params in [
        json!({}),
        json!({"strict": true}),
        json!({"strict": false}),
        json!({"missing_score": "discard"}),
        json!({"strict": true, "missing_score": "discard"}),
    ] {
        for cs in scores {
            let child = row("2", 2, cs, false);
            assert_eq!(
                scripted(&params, &child, None).unwrap(),
                compiled(&params, &child, None)
            );
            for ps in scores {
                let parent = row("1", 1, ps, true);
                assert_eq!(
                    scripted(&params, &child, Some(&parent)).unwrap(),
                    compiled(&params, &child, Some(&parent)),
                    "{params} child {cs:?} parent {ps:?}"
                );
            }
        }
    }
}

#[test]
fn near_ties_compare_exactly() {
    // 0.1 + 0.2 > 0.3 in IEEE arithmetic; an epsilon comparison would call it a tie.
    let child = row("2", 2, Some(0.1 + 0.2), false);
    let parent = row("1", 1, Some(0.3), true);
    let (v, reason) = scripted(&json!({}), &child, Some(&parent)).unwrap();
    assert_eq!(v, Verdict::Keep, "{reason}");
}

#[test]
fn a_five_parameter_gate_sees_the_archive() {
    let text = "fn decide(ctx, child, parent, archive, diff) {\n\
                  #{verdict: \"keep\", reason: `rows ${archive.rows.len()} diff ${diff == ()}`}\n}\n";
    let ctx = evolve_script::testing::context(PATH, text, json!({}), 0);
    let archive = input_archive();
    let d = GateScript::decide(
        &ctx,
        &row("2", 2, None, false),
        None,
        &GateInput {
            archive: &archive,
            diff: None,
        },
    )
    .unwrap();
    assert_eq!(d.reason, "rows 1 diff true");
}

#[test]
fn bad_verdicts_are_the_scripts_error() {
    let text = "fn decide(ctx, child, parent) {\n  #{verdict: \"maybe\", reason: \"\"}\n}\n";
    let ctx = evolve_script::testing::context(PATH, text, json!({}), 0);
    let archive = input_archive();
    let e = GateScript::decide(
        &ctx,
        &row("2", 2, None, false),
        None,
        &GateInput {
            archive: &archive,
            diff: None,
        },
    )
    .unwrap_err();
    assert!(
        e.starts_with(&format!(
            "script {PATH}: decide() returned an object map of the wrong shape; expected #{{verdict"
        )),
        "{e}"
    );
}

#[test]
fn parent_eligible_equals_the_compiled_gate() {
    const TEXT: &str = include_str!("../scripts/parent_eligible.rhai");
    let archive = input_archive();
    let input = GateInput {
        archive: &archive,
        diff: None,
    };
    let statuses = [
        GenerationStatus::PendingGate,
        GenerationStatus::Timeout,
        GenerationStatus::CandidateInvalid,
    ];
    for score in [None, Some(0.0), Some(0.5), Some(1.0), Some(f64::NAN)] {
        for status in statuses {
            let child = ArchiveRow {
                status,
                ..row("2", 2, score, false)
            };
            let c = op_gate_parent_eligible::decide(&child);
            let ctx = evolve_script::testing::context(PATH, TEXT, json!({}), 0);
            let s = GateScript::decide(&ctx, &child, None, &input).unwrap();
            assert_eq!((s.verdict, s.reason), (c.verdict, c.reason));
        }
    }
}
