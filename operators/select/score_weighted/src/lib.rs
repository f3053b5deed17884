//! select/score_weighted: an eligible generation drawn with probability proportional to
//! its score (negative scores count as 0); uniformly when every weight is 0.

use evolve_operator_sdk::prelude::*;

pub struct ScoreWeighted;

impl Operator for ScoreWeighted {
    const NAME: &'static str = "score_weighted";
    const SUMMARY: &'static str = "Pick an eligible generation with probability proportional to max(score, 0) (uniform if all are 0).";
}

/// The sampling weight of each candidate: `max(score, 0)`.
pub fn weights(candidates: &[&ArchiveRow]) -> Vec<f64> {
    candidates
        .iter()
        .map(|r| r.score.unwrap_or(0.0).max(0.0))
        .collect()
}

impl Select for ScoreWeighted {
    fn select(ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
        let cands = parent_candidates(archive);
        if cands.is_empty() {
            return Err("no eligible parent".into());
        }
        let w = weights(&cands);
        let mut rng = ctx.rng();
        let i = if w.iter().all(|x| *x == 0.0) {
            rng.below(cands.len() as u64).map(|i| i as usize)
        } else {
            rng.weighted_index(&w)
        }
        .ok_or("score weights are not usable")?;
        Ok(vec![cands[i].generation_id.clone()])
    }
}

evolve_operator_sdk::export!(select: ScoreWeighted);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::{row, view};
    use std::collections::BTreeMap;

    fn pick(seed: u64, archive: &ArchiveView) -> Result<String, String> {
        let mut ctx = Context::for_test(json!({}));
        ctx.seed = seed;
        ScoreWeighted::select(&ctx, archive).map(|v| {
            assert_eq!(v.len(), 1);
            v[0].clone()
        })
    }

    fn mixed() -> ArchiveView {
        view(vec![
            row("0", 0, Some(0.25), true),
            row("1", 1, Some(-0.5), true),
            row("2", 2, Some(0.75), true),
            row("3", 3, Some(5.0), false),
            row("4", 4, None, true),
        ])
    }

    #[test]
    fn weights_clamp_negative_scores_to_zero() {
        let archive = mixed();
        let cands: Vec<&ArchiveRow> = archive.rows[..3].iter().collect();
        assert_eq!(weights(&cands), vec![0.25, 0.0, 0.75]);
    }

    #[test]
    fn fixed_seed_picks_are_pinned() {
        // Seed 0: first draw 0.883 x 1.0 = 0.883 >= 0.25 → "2".
        let picks: Vec<String> = (0..8).map(|s| pick(s, &mixed()).unwrap()).collect();
        assert_eq!(picks, vec!["2", "2", "2", "0", "2", "2", "2", "2"]);
    }

    #[test]
    fn all_zero_weights_fall_back_to_uniform() {
        let archive = view(vec![
            row("a", 1, Some(0.0), true),
            row("b", 2, Some(-1.0), true),
            row("c", 3, Some(0.0), true),
        ]);
        // Seed 0 with `below(3)`: 0xE220A8397B1DCDAF % 3 = 1 → "b".
        let picks: Vec<String> = (0..8).map(|s| pick(s, &archive).unwrap()).collect();
        assert_eq!(picks, vec!["b", "c", "b", "a", "b", "c", "c", "a"]);
        let mut counts = BTreeMap::<String, u32>::new();
        for seed in 0..9_000u64 {
            *counts.entry(pick(seed, &archive).unwrap()).or_default() += 1;
        }
        for (id, n) in &counts {
            assert!((2700..=3300).contains(n), "{id} picked {n} times");
        }
        assert_eq!(counts.len(), 3);
    }

    #[test]
    fn same_seed_same_pick() {
        for seed in [1u64, 42, 0xDEAD_BEEF] {
            assert_eq!(pick(seed, &mixed()), pick(seed, &mixed()));
        }
    }

    #[test]
    fn picks_follow_the_scores() {
        let archive = mixed();
        let mut counts = BTreeMap::<String, u32>::new();
        for seed in 0..10_000u64 {
            *counts.entry(pick(seed, &archive).unwrap()).or_default() += 1;
        }
        // Expected 2500 / 0 / 7500; ineligible and unscored rows never.
        assert_eq!(counts.keys().collect::<Vec<_>>(), vec!["0", "2"]);
        assert!((2200..=2800).contains(&counts["0"]), "{counts:?}");
    }

    #[test]
    fn no_candidate_is_an_error() {
        assert_eq!(pick(0, &view(vec![])).unwrap_err(), "no eligible parent");
        let archive = view(vec![row("1", 1, None, true), row("2", 2, Some(1.0), false)]);
        assert_eq!(pick(0, &archive).unwrap_err(), "no eligible parent");
    }

    #[test]
    fn schema_accepts_only_empty_config() {
        let schema = <ScoreWeighted as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"k": 1}"#).is_err());
    }
}
