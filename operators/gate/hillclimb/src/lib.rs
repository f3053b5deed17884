//! gate/hillclimb: keep a child whose score is at least its parent's, as RSIHub's
//! `library/gate/hillclimb.py` does: ties are kept by default, `strict: true` requires a
//! strict improvement. A child with no parent row, or whose parent has no score, is
//! discarded (there is nothing to climb from). A child without a score counts as 0.0, as
//! in RSIHub (so against a parent at 0.0 it is kept unless `strict`);
//! `missing_score: discard` discards it instead. The RSIHub table in
//! `tests/rsihub_golden.json` pins these decisions.

use evolve_operator_sdk::prelude::*;

pub struct Hillclimb;

impl Operator for Hillclimb {
    const NAME: &'static str = "hillclimb";
    const SUMMARY: &'static str =
        "Keep the child if its score is at least the parent's (strictly above with strict: true).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "strict",
                config::boolean()
                    .default(json!(false))
                    .description("Require child > parent; false (RSIHub's default) keeps child >= parent"),
            )
            .field(
                "missing_score",
                config::string()
                    .default(json!("zero"))
                    .choices([json!("zero"), json!("discard")])
                    .description(
                        "A child without a score: zero counts it as 0.0 (RSIHub), discard discards it",
                    ),
            )
    }
}

/// What to do with a child that has no score.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingScore {
    /// Count it as 0.0, as RSIHub's `float(child.get("score") or 0.0)` does.
    Zero,
    /// Discard the child: an unscored child never climbs.
    Discard,
}

/// A score as `evolve log` shows it: four decimals.
fn shown(s: f64) -> String {
    format!("{s:.4}")
}

/// Two scores compared in a reason: four decimals, or as many more as it takes to show
/// two different scores as different (the full value when even 16 do not).
fn shown_pair(a: f64, b: f64) -> (String, String) {
    for digits in 4..17usize {
        let (x, y) = (format!("{a:.digits$}"), format!("{b:.digits$}"));
        if x != y || a == b {
            return (x, y);
        }
    }
    (a.to_string(), b.to_string())
}

fn discard(reason: String) -> GateDecision {
    GateDecision {
        verdict: Verdict::Discard,
        reason,
    }
}

/// A score that can be compared. Archive scores are finite; a non-finite one (which
/// JSON cannot carry, so only a test can build it) counts as no score, where RSIHub's
/// Python would compare the float.
fn finite(row: &ArchiveRow) -> Option<f64> {
    row.score.filter(|s| s.is_finite())
}

/// The decision for a child against its (optional) parent. Scores compare exactly, as
/// IEEE doubles like RSIHub's Python floats (0.1 + 0.2 > 0.3).
pub fn decide(
    child: &ArchiveRow,
    parent: Option<&ArchiveRow>,
    strict: bool,
    missing: MissingScore,
) -> GateDecision {
    let Some(ps) = parent.and_then(finite) else {
        let why = if parent.is_none() {
            "no parent row"
        } else {
            "the parent has no score"
        };
        return discard(format!(
            "{why} to compare with; child score {}",
            match finite(child) {
                Some(cs) => shown(cs),
                None => "none".to_string(),
            }
        ));
    };
    let (cs, note) = match (finite(child), missing) {
        (Some(cs), _) => (cs, ""),
        (None, MissingScore::Zero) => (0.0, " (child has no score, counted as 0)"),
        (None, MissingScore::Discard) => {
            return discard(format!("child has no score; parent score {}", shown(ps)));
        }
    };
    let keep = if strict { cs > ps } else { cs >= ps };
    let op = match (strict, keep) {
        (true, true) => ">",
        (true, false) => "<=",
        (false, true) => ">=",
        (false, false) => "<",
    };
    let (c, p) = shown_pair(cs, ps);
    GateDecision {
        verdict: if keep {
            Verdict::Keep
        } else {
            Verdict::Discard
        },
        reason: format!("child score {c} {op} parent score {p}{note}"),
    }
}

impl Gate for Hillclimb {
    fn decide(
        ctx: &Context,
        child: &ArchiveRow,
        parent: Option<&ArchiveRow>,
        _input: &GateInput,
    ) -> Result<GateDecision, String> {
        let missing = match ctx.str("missing_score").unwrap_or("zero") {
            "zero" => MissingScore::Zero,
            "discard" => MissingScore::Discard,
            other => {
                return Err(format!(
                    "config.missing_score must be zero or discard, not {other:?}"
                ));
            }
        };
        Ok(decide(
            child,
            parent,
            ctx.bool("strict").unwrap_or(false),
            missing,
        ))
    }
}

evolve_operator_sdk::export!(gate: Hillclimb);

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, score: Option<f64>) -> ArchiveRow {
        ArchiveRow {
            generation_id: id.into(),
            parent: None,
            generation: 1,
            status: GenerationStatus::PendingGate,
            score,
            eligible: false,
            verdict: None,
            children: 0,
            task_vector: vec![],
            cost_usd: 0.0,
            annotations: "{}".into(),
        }
    }

    fn run(config: Value, child: Option<f64>, parent: Option<Option<f64>>) -> (bool, String) {
        let schema = <Hillclimb as Operator>::config().build().unwrap();
        let ctx = Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()));
        let parent = parent.map(|s| row("1", s));
        let archive = evolve_operator_sdk::testing::view(vec![]);
        let input = GateInput {
            archive: &archive,
            diff: None,
        };
        let d = Hillclimb::decide(&ctx, &row("2", child), parent.as_ref(), &input).unwrap();
        (matches!(d.verdict, Verdict::Keep), d.reason)
    }

    fn keep(reason: &str) -> (bool, String) {
        (true, reason.to_string())
    }

    fn discard(reason: &str) -> (bool, String) {
        (false, reason.to_string())
    }

    /// Every row of the table RSIHub's own `library/gate/hillclimb.py` produced
    /// (tests/rsihub_golden.py): same config, same decision.
    #[test]
    fn matches_rsihub_golden_table() {
        let table: Value =
            evolve_operator_sdk::serde_json::from_str(include_str!("../tests/rsihub_golden.json"))
                .unwrap();
        assert_eq!(table["operator"], "library/gate/hillclimb.py");
        let rows = table["rows"].as_array().unwrap();
        assert!(rows.len() >= 20);
        for r in rows {
            let parent = match &r["parent"] {
                Value::Null => None,
                p => Some(p["score"].as_f64()),
            };
            let (kept, reason) = run(r["config"].clone(), r["child_score"].as_f64(), parent);
            assert_eq!(
                kept,
                r["keep"].as_bool().unwrap(),
                "row {:?}: RSIHub said {:?}, we said {reason:?}",
                r["name"],
                r["rsihub_reason"]
            );
        }
    }

    #[test]
    fn non_strict_by_default() {
        let c = json!({});
        assert_eq!(
            run(c.clone(), Some(0.5), Some(Some(0.4))),
            keep("child score 0.5000 >= parent score 0.4000")
        );
        assert_eq!(
            run(c.clone(), Some(0.4), Some(Some(0.4))),
            keep("child score 0.4000 >= parent score 0.4000")
        );
        assert_eq!(
            run(c, Some(0.3), Some(Some(0.4))),
            discard("child score 0.3000 < parent score 0.4000")
        );
    }

    #[test]
    fn scores_show_four_decimals_or_enough_to_differ() {
        let c = json!({"strict": true});
        assert_eq!(
            run(
                c.clone(),
                Some(0.3126966666666667),
                Some(Some(0.3398403333333333))
            ),
            discard("child score 0.3127 <= parent score 0.3398")
        );
        assert_eq!(
            run(c.clone(), Some(0.31271), Some(Some(0.31269))),
            keep("child score 0.31271 > parent score 0.31269")
        );
        assert_eq!(
            run(c, Some(0.1 + 0.2), Some(Some(0.3))),
            keep("child score 0.30000000000000004 > parent score 0.3")
        );
    }

    #[test]
    fn strict_discards_ties() {
        let c = json!({"strict": true});
        assert_eq!(
            run(c.clone(), Some(0.5), Some(Some(0.4))),
            keep("child score 0.5000 > parent score 0.4000")
        );
        assert_eq!(
            run(c.clone(), Some(0.4), Some(Some(0.4))),
            discard("child score 0.4000 <= parent score 0.4000")
        );
    }

    #[test]
    fn no_parent_or_unscored_parent_discards() {
        assert_eq!(
            run(json!({}), Some(0.7), None),
            discard("no parent row to compare with; child score 0.7000")
        );
        assert_eq!(
            run(json!({}), None, None),
            discard("no parent row to compare with; child score none")
        );
        assert_eq!(
            run(json!({}), Some(0.9), Some(None)),
            discard("the parent has no score to compare with; child score 0.9000")
        );
    }

    #[test]
    fn unscored_child_counts_as_zero_unless_configured() {
        assert_eq!(
            run(json!({}), None, Some(Some(0.0))),
            keep("child score 0.0000 >= parent score 0.0000 (child has no score, counted as 0)")
        );
        assert_eq!(
            run(json!({}), None, Some(Some(0.4))),
            discard("child score 0.0000 < parent score 0.4000 (child has no score, counted as 0)")
        );
        let d = json!({"missing_score": "discard"});
        assert_eq!(
            run(d.clone(), None, Some(Some(0.0))),
            discard("child has no score; parent score 0.0000")
        );
        assert_eq!(
            run(d, Some(0.0), Some(Some(0.0))),
            keep("child score 0.0000 >= parent score 0.0000")
        );
        // A non-finite score is no score.
        assert_eq!(
            run(json!({}), Some(f64::NAN), Some(Some(0.0))),
            keep("child score 0.0000 >= parent score 0.0000 (child has no score, counted as 0)")
        );
    }

    #[test]
    fn schema_default_and_types() {
        let schema = <Hillclimb as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"strict": false, "missing_score": "zero"})
        );
        assert!(schema.normalize(r#"{"strict": "yes"}"#).is_err());
        assert!(schema.normalize(r#"{"missing_score": "skip"}"#).is_err());
        assert!(schema.normalize(r#"{"margin": 0.1}"#).is_err());
    }
}
