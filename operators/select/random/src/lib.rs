//! select/random: an eligible generation drawn uniformly at random.

use evolve_operator_sdk::prelude::*;

pub struct Random;

impl Operator for Random {
    const NAME: &'static str = "random";
    const SUMMARY: &'static str = "Pick an eligible generation uniformly at random.";
}

impl Select for Random {
    fn select(ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
        let cands = parent_candidates(archive);
        let i = ctx
            .rng()
            .below(cands.len() as u64)
            .ok_or("no eligible parent")?;
        Ok(vec![cands[i as usize].generation_id.clone()])
    }
}

evolve_operator_sdk::export!(select: Random);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::{row, view};
    use std::collections::BTreeMap;

    fn pick(seed: u64, archive: &ArchiveView) -> Result<String, String> {
        let mut ctx = Context::for_test(json!({}));
        ctx.seed = seed;
        Random::select(&ctx, archive).map(|v| {
            assert_eq!(v.len(), 1);
            v[0].clone()
        })
    }

    fn three() -> ArchiveView {
        view(vec![
            row("0", 0, Some(0.1), true),
            row("1", 1, Some(0.9), false),
            row("2", 2, Some(0.5), true),
            row("3", 3, None, true),
            row("4", 4, Some(0.0), true),
        ])
    }

    #[test]
    fn fixed_seed_picks_are_pinned() {
        // Seed 0: first draw 0xE220A8397B1DCDAF % 3 = 1 → the second candidate, "2".
        let picks: Vec<String> = (0..8).map(|s| pick(s, &three()).unwrap()).collect();
        assert_eq!(picks, vec!["2", "4", "2", "0", "2", "4", "4", "0"]);
    }

    #[test]
    fn same_seed_same_pick() {
        for seed in [1u64, 42, 0xDEAD_BEEF] {
            assert_eq!(pick(seed, &three()), pick(seed, &three()));
        }
    }

    #[test]
    fn only_candidates_are_picked_roughly_uniformly() {
        let archive = three();
        let mut counts = BTreeMap::<String, u32>::new();
        for seed in 0..10_000u64 {
            *counts.entry(pick(seed, &archive).unwrap()).or_default() += 1;
        }
        assert_eq!(counts.keys().collect::<Vec<_>>(), vec!["0", "2", "4"]);
        for (id, n) in &counts {
            assert!((3000..=3700).contains(n), "{id} picked {n} times");
        }
    }

    #[test]
    fn single_candidate_is_always_picked() {
        let archive = view(vec![row("7", 7, Some(0.3), true), row("8", 8, None, true)]);
        for seed in 0..50 {
            assert_eq!(pick(seed, &archive).unwrap(), "7");
        }
    }

    #[test]
    fn no_candidate_is_an_error() {
        assert_eq!(pick(0, &view(vec![])).unwrap_err(), "no eligible parent");
        let archive = view(vec![row("1", 1, None, true), row("2", 2, Some(1.0), false)]);
        assert_eq!(pick(0, &archive).unwrap_err(), "no eligible parent");
    }

    #[test]
    fn schema_accepts_only_empty_config() {
        let schema = <Random as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"k": 1}"#).is_err());
    }
}
