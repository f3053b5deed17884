//! select/score_child_prop (HyperAgents): sample an eligible generation with weight
//!
//! ```text
//! w = sigmoid(sharpness · (score − midpoint)) · exp(−(children / child_scale)³)
//! ```
//!
//! where `midpoint` is the mean of the top three candidate scores (of all of them when
//! there are fewer than three) and `children` counts every generation naming the
//! candidate as its parent. Defaults: sharpness 10, child_scale 8. When every weight
//! underflows to 0 the draw is uniform.

use evolve_operator_sdk::prelude::*;

pub struct ScoreChildProp;

const SHARPNESS: f64 = 10.0;
const CHILD_SCALE: f64 = 8.0;

impl Operator for ScoreChildProp {
    const NAME: &'static str = "score_child_prop";
    const SUMMARY: &'static str = "Sample a parent by sigmoid score above the top-3 mean, damped by its child count (HyperAgents).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "sharpness",
                config::number()
                    .default(json!(SHARPNESS))
                    .minimum(0.0)
                    .description("Slope of the score sigmoid (> 0)"),
            )
            .field(
                "child_scale",
                config::number()
                    .default(json!(CHILD_SCALE))
                    .minimum(0.0)
                    .description("Child count at which the damping factor is exp(-1) (> 0)"),
            )
            .refine(positive)
    }
}

/// `minimum` is inclusive; both fields must be strictly positive.
fn positive(cfg: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let bad: Vec<Violation> = ["child_scale", "sharpness"]
        .into_iter()
        .filter(|k| {
            cfg.get(*k)
                .and_then(Value::as_f64)
                .is_some_and(|x| x <= 0.0)
        })
        .map(|k| Violation::new(k, "must be > 0"))
        .collect();
    if bad.is_empty() { Ok(()) } else { Err(bad) }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// The sampling weight of each candidate, in the given order.
pub fn weights(candidates: &[&ArchiveRow], sharpness: f64, child_scale: f64) -> Vec<f64> {
    let scores: Vec<f64> = candidates.iter().map(|r| r.score.unwrap_or(0.0)).collect();
    let mut top = scores.clone();
    top.sort_by(|a, b| b.total_cmp(a));
    top.truncate(3);
    let midpoint = if top.is_empty() {
        0.0
    } else {
        top.iter().sum::<f64>() / top.len() as f64
    };
    candidates
        .iter()
        .zip(&scores)
        .map(|(r, s)| {
            sigmoid(sharpness * (s - midpoint))
                * (-(f64::from(r.children) / child_scale).powi(3)).exp()
        })
        .collect()
}

impl Select for ScoreChildProp {
    fn select(ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
        let cands = parent_candidates(archive);
        if cands.is_empty() {
            return Err("no eligible parent".into());
        }
        let sharpness = ctx.f64("sharpness").unwrap_or(SHARPNESS);
        let child_scale = ctx.f64("child_scale").unwrap_or(CHILD_SCALE);
        let w = weights(&cands, sharpness, child_scale);
        let mut rng = ctx.rng();
        let i = if w.iter().all(|x| *x == 0.0) {
            rng.below(cands.len() as u64).map(|i| i as usize)
        } else {
            rng.weighted_index(&w)
        }
        .ok_or("score/child weights are not usable")?;
        Ok(vec![cands[i].generation_id.clone()])
    }
}

evolve_operator_sdk::export!(select: ScoreChildProp);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::{row, view};
    use std::collections::BTreeMap;

    fn with_children(mut r: ArchiveRow, children: u32) -> ArchiveRow {
        r.children = children;
        r
    }

    fn pick_with(config: Value, seed: u64, archive: &ArchiveView) -> Result<String, String> {
        let schema = <ScoreChildProp as Operator>::config().build().unwrap();
        let normalized = schema.normalize_value(&config).unwrap();
        let mut ctx = Context::for_test(Value::Object(normalized));
        ctx.seed = seed;
        ScoreChildProp::select(&ctx, archive).map(|v| {
            assert_eq!(v.len(), 1);
            v[0].clone()
        })
    }

    fn pick(seed: u64, archive: &ArchiveView) -> Result<String, String> {
        pick_with(json!({}), seed, archive)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// The reference oracle: scores 0.2 and 0.8, "3" has 9 children.
    fn oracle() -> ArchiveView {
        view(vec![
            row("1", 1, Some(0.2), true),
            with_children(row("3", 3, Some(0.8), true), 9),
        ])
    }

    #[test]
    fn oracle_weights() {
        let archive = oracle();
        let cands: Vec<&ArchiveRow> = archive.rows.iter().collect();
        let w = weights(&cands, 10.0, 8.0);
        // midpoint 0.5: w1 = σ(−3), w3 = σ(3)·exp(−(9/8)³).
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        assert!(close(w[0], s(-3.0)), "{w:?}");
        assert!(close(w[1], s(3.0) * (-(1.125f64).powi(3)).exp()), "{w:?}");
        assert!(close(w[0], 0.04742587317756678), "{w:?}");
        assert!(close(w[1], 0.2293707757770468), "{w:?}");
    }

    #[test]
    fn midpoint_is_the_mean_of_the_top_three() {
        // Top three 0.9, 0.8, 0.7 → midpoint 0.8: the 0.8 candidate gets σ(0) = 0.5.
        let archive = view(vec![
            row("a", 1, Some(0.1), true),
            row("b", 2, Some(0.9), true),
            row("c", 3, Some(0.8), true),
            row("d", 4, Some(0.7), true),
        ]);
        let cands: Vec<&ArchiveRow> = archive.rows.iter().collect();
        let w = weights(&cands, 10.0, 8.0);
        assert!(close(w[2], 0.5), "{w:?}");
        assert!(close(w[0], 1.0 / (1.0 + 7f64.exp())), "{w:?}");
        // Equal scores: every weight is σ(0) = 0.5.
        let tied = view(vec![
            row("x", 1, Some(0.4), true),
            row("y", 2, Some(0.4), true),
        ]);
        let cands: Vec<&ArchiveRow> = tied.rows.iter().collect();
        assert_eq!(weights(&cands, 10.0, 8.0), vec![0.5, 0.5]);
    }

    #[test]
    fn configured_constants_change_the_weights() {
        let archive = oracle();
        let cands: Vec<&ArchiveRow> = archive.rows.iter().collect();
        let w = weights(&cands, 1.0, 9.0);
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        assert!(close(w[0], s(-0.3)), "{w:?}");
        assert!(close(w[1], s(0.3) * (-1f64).exp()), "{w:?}");
    }

    #[test]
    fn fixed_seed_picks_are_pinned() {
        // Seed 0: 0.883 x (0.0474 + 0.2294) = 0.244 >= 0.0474 → "3".
        let picks: Vec<String> = (0..8).map(|s| pick(s, &oracle()).unwrap()).collect();
        assert_eq!(picks, vec!["3", "3", "3", "1", "3", "3", "3", "3"]);
        let picks: Vec<String> = (0..8)
            .map(|s| {
                pick_with(
                    json!({"sharpness": 1.0, "child_scale": 100.0}),
                    s,
                    &oracle(),
                )
                .unwrap()
            })
            .collect();
        // Flatter weights (σ(−0.3) = 0.43 vs σ(0.3)·≈1 = 0.57): "1" comes up more often.
        assert_eq!(picks, vec!["3", "3", "3", "1", "3", "1", "3", "1"]);
    }

    #[test]
    fn same_seed_same_pick() {
        for seed in [1u64, 42, 0xDEAD_BEEF] {
            assert_eq!(pick(seed, &oracle()), pick(seed, &oracle()));
        }
    }

    #[test]
    fn distribution_follows_the_weights() {
        let archive = oracle();
        let mut counts = BTreeMap::<String, u32>::new();
        for seed in 0..10_000u64 {
            *counts.entry(pick(seed, &archive).unwrap()).or_default() += 1;
        }
        // P("1") = 0.0474 / (0.0474 + 0.2294) = 0.171.
        assert!((1400..=2000).contains(&counts["1"]), "{counts:?}");
        assert_eq!(counts["1"] + counts["3"], 10_000);
    }

    #[test]
    fn underflowed_weights_fall_back_to_uniform() {
        // exp(−(1000/8)³) underflows to 0 for both.
        let archive = view(vec![
            with_children(row("a", 1, Some(0.5), true), 1000),
            with_children(row("b", 2, Some(0.5), true), 1000),
        ]);
        let cands: Vec<&ArchiveRow> = archive.rows.iter().collect();
        assert_eq!(weights(&cands, 10.0, 8.0), vec![0.0, 0.0]);
        // Seed 0: below(2) → 0xE220A8397B1DCDAF % 2 = 1 → "b".
        assert_eq!(pick(0, &archive).unwrap(), "b");
        let mut counts = BTreeMap::<String, u32>::new();
        for seed in 0..10_000u64 {
            *counts.entry(pick(seed, &archive).unwrap()).or_default() += 1;
        }
        assert!((4600..=5400).contains(&counts["a"]), "{counts:?}");
    }

    #[test]
    fn skips_ineligible_and_unscored_rows() {
        let archive = view(vec![
            row("1", 1, Some(0.9), false),
            row("2", 2, None, true),
            row("3", 3, Some(0.1), true),
        ]);
        for seed in 0..20 {
            assert_eq!(pick(seed, &archive).unwrap(), "3");
        }
    }

    #[test]
    fn no_candidate_is_an_error() {
        assert_eq!(pick(0, &view(vec![])).unwrap_err(), "no eligible parent");
    }

    #[test]
    fn schema_defaults_and_bounds() {
        let schema = <ScoreChildProp as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"sharpness": 10.0, "child_scale": 8.0})
        );
        let errs = schema
            .normalize(r#"{"sharpness": 0, "child_scale": 0}"#)
            .unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(paths, vec!["child_scale", "sharpness"]);
        assert!(schema.normalize(r#"{"sharpness": -1}"#).is_err());
        assert!(schema.normalize(r#"{"temperature": 1}"#).is_err());
    }
}
