//! gate/parent_eligible: keep every child whose evaluation completed with a certified
//! (finite) score, regardless of how it compares with its parent.

use evolve_operator_sdk::prelude::*;

pub struct ParentEligible;

impl Operator for ParentEligible {
    const NAME: &'static str = "parent_eligible";
    const SUMMARY: &'static str =
        "Keep every child with a certified score from a complete evaluation.";
}

/// The decision for a child.
pub fn decide(child: &ArchiveRow) -> GateDecision {
    match child.score.filter(|s| s.is_finite()) {
        Some(s) => GateDecision {
            verdict: Verdict::Keep,
            // Four decimals, as `evolve log` shows a score.
            reason: format!("evaluation is complete with certified score {s:.4}: parent-eligible"),
        },
        None => GateDecision {
            verdict: Verdict::Discard,
            reason: format!(
                "evaluation has no certified score (status {}): not parent-eligible",
                status_name(child.status)
            ),
        },
    }
}

impl Gate for ParentEligible {
    fn decide(
        _ctx: &Context,
        child: &ArchiveRow,
        _parent: Option<&ArchiveRow>,
        _input: &GateInput,
    ) -> Result<GateDecision, String> {
        Ok(decide(child))
    }
}

evolve_operator_sdk::export!(gate: ParentEligible);

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

    fn run(child: &ArchiveRow, parent: Option<&ArchiveRow>) -> (bool, String) {
        let archive = evolve_operator_sdk::testing::view(vec![]);
        let input = GateInput {
            archive: &archive,
            diff: None,
        };
        let ctx = Context::for_test(json!({}));
        let d = ParentEligible::decide(&ctx, child, parent, &input).unwrap();
        (matches!(d.verdict, Verdict::Keep), d.reason)
    }

    #[test]
    fn keeps_a_scored_child_whatever_the_parent() {
        let parent = row("1", Some(0.9));
        let expected = (
            true,
            "evaluation is complete with certified score 0.1000: parent-eligible".to_string(),
        );
        assert_eq!(run(&row("2", Some(0.1)), Some(&parent)), expected);
        assert_eq!(run(&row("2", Some(0.1)), None), expected);
        assert_eq!(
            run(&row("2", Some(0.0)), None),
            (
                true,
                "evaluation is complete with certified score 0.0000: parent-eligible".to_string()
            )
        );
    }

    #[test]
    fn discards_a_child_without_a_score() {
        let mut child = row("2", None);
        child.status = GenerationStatus::Timeout;
        assert_eq!(
            run(&child, Some(&row("1", Some(0.5)))),
            (
                false,
                "evaluation has no certified score (status timeout): not parent-eligible"
                    .to_string()
            )
        );
        let child = row("3", Some(f64::INFINITY));
        assert_eq!(
            run(&child, None),
            (
                false,
                "evaluation has no certified score (status pending-gate): not parent-eligible"
                    .to_string()
            )
        );
    }

    #[test]
    fn schema_accepts_only_empty_config() {
        let schema = <ParentEligible as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"strict": true}"#).is_err());
    }
}
