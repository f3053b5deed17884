//! gate/hillclimb: keep a child only if it beats its parent's score (strictly by
//! default; `strict: false` also keeps ties). A child with no parent is kept when it has
//! a finite score; a child without a score is discarded.

use evolve_operator_sdk::prelude::*;

pub struct Hillclimb;

impl Operator for Hillclimb {
    const NAME: &'static str = "hillclimb";
    const SUMMARY: &'static str =
        "Keep the child only if its score beats the parent's (ties too with strict: false).";

    fn config() -> SchemaBuilder {
        Schema::new().field(
            "strict",
            config::boolean()
                .default(json!(true))
                .description("Require child > parent; false accepts child >= parent"),
        )
    }
}

fn finite(row: &ArchiveRow) -> Option<f64> {
    row.score.filter(|s| s.is_finite())
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

/// The decision for a child against its (optional) parent.
pub fn decide(child: &ArchiveRow, parent: Option<&ArchiveRow>, strict: bool) -> GateDecision {
    let (verdict, reason) = match (finite(child), parent) {
        (None, None) => (
            Verdict::Discard,
            "child has no score; no parent".to_string(),
        ),
        (None, Some(p)) => (
            Verdict::Discard,
            match finite(p) {
                Some(ps) => format!("child has no score; parent score {}", shown(ps)),
                None => "child has no score; parent has no score".to_string(),
            },
        ),
        (Some(cs), None) => (
            Verdict::Keep,
            format!("child score {}; no parent to compare with", shown(cs)),
        ),
        (Some(cs), Some(p)) => match finite(p) {
            None => (
                Verdict::Discard,
                format!(
                    "child score {}; parent has no score to compare with",
                    shown(cs)
                ),
            ),
            Some(ps) => {
                let keep = if strict { cs > ps } else { cs >= ps };
                let op = match (strict, keep) {
                    (true, true) => ">",
                    (true, false) => "<=",
                    (false, true) => ">=",
                    (false, false) => "<",
                };
                let verdict = if keep {
                    Verdict::Keep
                } else {
                    Verdict::Discard
                };
                let (c, p) = shown_pair(cs, ps);
                (verdict, format!("child score {c} {op} parent score {p}"))
            }
        },
    };
    GateDecision { verdict, reason }
}

impl Gate for Hillclimb {
    fn decide(
        ctx: &Context,
        child: &ArchiveRow,
        parent: Option<&ArchiveRow>,
        _input: &GateInput,
    ) -> Result<GateDecision, String> {
        Ok(decide(child, parent, ctx.bool("strict").unwrap_or(true)))
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

    #[test]
    fn strict_by_default() {
        let c = json!({});
        assert_eq!(
            run(c.clone(), Some(0.5), Some(Some(0.4))),
            keep("child score 0.5000 > parent score 0.4000")
        );
        assert_eq!(
            run(c.clone(), Some(0.4), Some(Some(0.4))),
            discard("child score 0.4000 <= parent score 0.4000")
        );
        assert_eq!(
            run(c, Some(0.3), Some(Some(0.4))),
            discard("child score 0.3000 <= parent score 0.4000")
        );
    }

    #[test]
    fn scores_show_four_decimals_or_enough_to_differ() {
        assert_eq!(
            run(
                json!({}),
                Some(0.3126966666666667),
                Some(Some(0.3398403333333333))
            ),
            discard("child score 0.3127 <= parent score 0.3398")
        );
        assert_eq!(
            run(json!({}), Some(0.31271), Some(Some(0.31269))),
            keep("child score 0.31271 > parent score 0.31269")
        );
        assert_eq!(
            run(json!({}), Some(0.1 + 0.2), Some(Some(0.3))),
            keep("child score 0.30000000000000004 > parent score 0.3")
        );
    }

    #[test]
    fn non_strict_keeps_ties() {
        let c = json!({"strict": false});
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
    fn no_parent_keeps_a_scored_child() {
        assert_eq!(
            run(json!({}), Some(0.0), None),
            keep("child score 0.0000; no parent to compare with")
        );
        assert_eq!(
            run(json!({}), None, None),
            discard("child has no score; no parent")
        );
    }

    #[test]
    fn child_without_score_is_discarded() {
        assert_eq!(
            run(json!({}), None, Some(Some(0.4))),
            discard("child has no score; parent score 0.4000")
        );
        assert_eq!(
            run(json!({"strict": false}), None, Some(None)),
            discard("child has no score; parent has no score")
        );
        assert_eq!(
            run(json!({}), Some(f64::NAN), Some(Some(0.4))),
            discard("child has no score; parent score 0.4000")
        );
    }

    #[test]
    fn parent_without_score_discards() {
        assert_eq!(
            run(json!({}), Some(0.9), Some(None)),
            discard("child score 0.9000; parent has no score to compare with")
        );
    }

    #[test]
    fn schema_default_and_types() {
        let schema = <Hillclimb as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"strict": true})
        );
        assert!(schema.normalize(r#"{"strict": "yes"}"#).is_err());
        assert!(schema.normalize(r#"{"margin": 0.1}"#).is_err());
    }
}
