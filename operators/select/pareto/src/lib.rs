//! select/pareto (GEPA): sample a parent from the per-task Pareto front.
//!
//! 1. Candidates are the eligible rows with a finite score, in archive order.
//! 2. A candidate's score on a task is the mean reward of its trials of that task,
//!    counted only if every trial is `benchmark-complete` with a reward.
//! 3. For each task the front is every candidate tied at the best score on it (exact
//!    equality).
//! 4. Dominated candidates are pruned one at a time: scanning in order of aggregate score
//!    ascending, then generation id, a candidate is dominated iff every front containing
//!    it also contains another surviving candidate; the scan restarts after each removal.
//! 5. A survivor's weight is the number of fronts it is still on; one parent is drawn
//!    with `weighted_index` over the survivors sorted by id.
//!
//! With no per-task scores at all it falls back to the best aggregate score (first in
//! archive order on ties).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use evolve_operator_sdk::prelude::*;

pub struct Pareto;

impl Operator for Pareto {
    const NAME: &'static str = "pareto";
    const SUMMARY: &'static str = "Sample a parent from the per-task Pareto front, weighted by the number of tasks it leads (GEPA).";
}

/// Task → set of generation ids.
pub type Fronts = BTreeMap<String, BTreeSet<String>>;

/// The rows a selector may return: eligible, with a finite score, in archive order.
pub fn candidates(archive: &ArchiveView) -> Vec<&ArchiveRow> {
    parent_candidates(archive)
}

/// Mean reward per task, keeping only tasks whose every trial is `benchmark-complete`
/// with a finite reward (and that have at least one trial). A task listed more than
/// once is treated as one task with all of the listed trials.
pub fn task_scores(row: &ArchiveRow) -> BTreeMap<String, f64> {
    let mut trials: BTreeMap<&str, Vec<&Trial>> = BTreeMap::new();
    for ts in &row.task_vector {
        trials
            .entry(ts.task.as_str())
            .or_default()
            .extend(&ts.trials);
    }
    let mut out = BTreeMap::new();
    for (task, trials) in trials {
        let rewards: Option<Vec<f64>> = trials
            .iter()
            .map(|t| match (t.status, t.reward) {
                (TrialStatus::BenchmarkComplete, Some(r)) if r.is_finite() => Some(r),
                _ => None,
            })
            .collect();
        if let Some(rewards) = rewards.filter(|r| !r.is_empty()) {
            out.insert(
                task.to_string(),
                rewards.iter().sum::<f64>() / rewards.len() as f64,
            );
        }
    }
    out
}

/// For each task any candidate has a score on, every candidate tied at the best score.
pub fn fronts(candidates: &[&ArchiveRow]) -> Fronts {
    let scores: Vec<(&str, BTreeMap<String, f64>)> = candidates
        .iter()
        .map(|r| (r.generation_id.as_str(), task_scores(r)))
        .collect();
    let mut best: BTreeMap<&str, f64> = BTreeMap::new();
    for (_, ts) in &scores {
        for (task, &s) in ts {
            let b = best.entry(task.as_str()).or_insert(s);
            if s > *b {
                *b = s;
            }
        }
    }
    let mut out = Fronts::new();
    for (id, ts) in &scores {
        for (task, &s) in ts {
            if s == best[task.as_str()] {
                out.entry(task.clone()).or_default().insert(id.to_string());
            }
        }
    }
    out
}

/// The candidates pruned as dominated (see the module documentation). `aggregate`
/// gives the scan order; an id missing from it sorts as score 0.0.
pub fn dominated(fronts: &Fronts, aggregate: &BTreeMap<String, f64>) -> BTreeSet<String> {
    let mut order: Vec<&String> = fronts
        .values()
        .flatten()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let agg = |id: &str| aggregate.get(id).copied().unwrap_or(0.0);
    order.sort_by(|a, b| match agg(a).total_cmp(&agg(b)) {
        Ordering::Equal => a.cmp(b),
        o => o,
    });
    let mut out = BTreeSet::new();
    loop {
        let found = order.iter().find(|c| {
            !out.contains(**c)
                && fronts
                    .values()
                    .filter(|f| f.contains(**c))
                    .all(|f| f.iter().any(|g| g != **c && !out.contains(g)))
        });
        match found {
            Some(c) => {
                out.insert((*c).clone());
            }
            None => return out,
        }
    }
}

/// The sampling weights: each surviving candidate with the number of fronts it is on,
/// sorted by generation id. Empty when no candidate has a per-task score.
pub fn pareto_weights(candidates: &[&ArchiveRow]) -> Vec<(String, u32)> {
    let fronts = fronts(candidates);
    let aggregate: BTreeMap<String, f64> = candidates
        .iter()
        .filter_map(|r| r.score.map(|s| (r.generation_id.clone(), s)))
        .collect();
    let dominated = dominated(&fronts, &aggregate);
    let mut weights: BTreeMap<String, u32> = BTreeMap::new();
    for front in fronts.values() {
        for id in front.difference(&dominated) {
            *weights.entry(id.clone()).or_default() += 1;
        }
    }
    weights.into_iter().collect()
}

impl Select for Pareto {
    fn select(ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
        let cands = candidates(archive);
        if cands.is_empty() {
            return Err("no eligible parent".into());
        }
        let weights = pareto_weights(&cands);
        if weights.is_empty() {
            // No per-task scores: the best aggregate score, first on ties.
            let mut best = cands[0];
            for r in &cands[1..] {
                if r.score > best.score {
                    best = r;
                }
            }
            return Ok(vec![best.generation_id.clone()]);
        }
        let w: Vec<f64> = weights.iter().map(|(_, n)| f64::from(*n)).collect();
        let i = ctx
            .rng()
            .weighted_index(&w)
            .ok_or("pareto weights are not positive")?;
        Ok(vec![weights[i].0.clone()])
    }
}

evolve_operator_sdk::export!(select: Pareto);

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(repetition: u32, status: TrialStatus, reward: Option<f64>) -> Trial {
        Trial {
            repetition,
            status,
            reward,
        }
    }

    fn ok(reward: f64) -> Trial {
        trial(0, TrialStatus::BenchmarkComplete, Some(reward))
    }

    fn row(id: &str, score: Option<f64>, tasks: &[(&str, Vec<Trial>)]) -> ArchiveRow {
        ArchiveRow {
            generation_id: id.into(),
            parent: None,
            generation: 0,
            status: GenerationStatus::Complete,
            score,
            eligible: true,
            verdict: Some(Verdict::Keep),
            children: 0,
            task_vector: tasks
                .iter()
                .map(|(t, trials)| TaskScore {
                    task: t.to_string(),
                    trials: trials.clone(),
                })
                .collect(),
            cost_usd: 0.0,
            annotations: "{}".into(),
        }
    }

    fn simple(id: &str, score: f64, tasks: &[(&str, f64)]) -> ArchiveRow {
        let tasks: Vec<(&str, Vec<Trial>)> =
            tasks.iter().map(|(t, r)| (*t, vec![ok(*r)])).collect();
        row(id, Some(score), &tasks)
    }

    fn view(rows: Vec<ArchiveRow>) -> ArchiveView {
        ArchiveView {
            rows,
            champion: None,
        }
    }

    fn pick(seed: u64, archive: &ArchiveView) -> Result<String, String> {
        let mut ctx = Context::for_test(json!({}));
        ctx.seed = seed;
        Pareto::select(&ctx, archive).map(|v| {
            assert_eq!(v.len(), 1);
            v[0].clone()
        })
    }

    fn oracle() -> ArchiveView {
        view(vec![
            simple("a", 0.7, &[("t1", 1.0), ("t2", 1.0), ("t3", 0.0)]),
            simple("b", 0.4, &[("t1", 1.0)]),
            simple("c", 0.3, &[("t3", 1.0)]),
        ])
    }

    fn set(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn gepa_oracle_weights() {
        let archive = oracle();
        let cands = candidates(&archive);
        assert_eq!(
            pareto_weights(&cands),
            vec![("a".to_string(), 2), ("c".to_string(), 1)]
        );
    }

    #[test]
    fn gepa_oracle_fronts_and_pruning() {
        let archive = oracle();
        let cands = candidates(&archive);
        let f = fronts(&cands);
        let expected: Fronts = [
            ("t1".to_string(), set(&["a", "b"])),
            ("t2".to_string(), set(&["a"])),
            ("t3".to_string(), set(&["c"])),
        ]
        .into_iter()
        .collect();
        assert_eq!(f, expected);
        let agg = [("a", 0.7), ("b", 0.4), ("c", 0.3)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        assert_eq!(dominated(&f, &agg), set(&["b"]));
    }

    #[test]
    fn gepa_oracle_picks_only_survivors() {
        let archive = oracle();
        let mut counts = BTreeMap::<String, u32>::new();
        for seed in 0..10_000u64 {
            *counts.entry(pick(seed, &archive).unwrap()).or_default() += 1;
        }
        assert_eq!(counts.get("b"), None);
        let a = counts["a"];
        let c = counts["c"];
        assert_eq!(a + c, 10_000);
        // Expected 2/3 and 1/3.
        assert!((6300..=7000).contains(&a), "a picked {a} times");
    }

    #[test]
    fn fixed_seed_picks_are_pinned_and_deterministic() {
        let archive = oracle();
        // Seed 0: the first draw is 0xE220A8397B1DCDAF / 2^64 = 0.883; x 3 = 2.65 >= 2,
        // past a's cumulative weight, so "c".
        let picks: Vec<String> = (0..8).map(|s| pick(s, &archive).unwrap()).collect();
        assert_eq!(picks, vec!["c", "a", "a", "a", "a", "a", "c", "a"]);
        assert_eq!(pick(12345, &archive), pick(12345, &archive));
    }

    #[test]
    fn task_scores_need_every_trial_complete_with_reward() {
        let r = row(
            "x",
            Some(0.5),
            &[
                (
                    "mean",
                    vec![ok(1.0), trial(1, TrialStatus::BenchmarkComplete, Some(0.0))],
                ),
                (
                    "timeout",
                    vec![ok(1.0), trial(1, TrialStatus::Timeout, Some(0.0))],
                ),
                (
                    "no_reward",
                    vec![trial(0, TrialStatus::BenchmarkComplete, None)],
                ),
                ("empty", vec![]),
                ("dup", vec![ok(1.0)]),
                ("dup", vec![ok(0.5)]),
            ],
        );
        let ts = task_scores(&r);
        assert_eq!(
            ts.into_iter().collect::<Vec<_>>(),
            vec![("dup".to_string(), 0.75), ("mean".to_string(), 0.5)]
        );
    }

    #[test]
    fn exact_ties_share_a_front_and_the_lower_scored_is_pruned() {
        // x and y tie on every task: scanning ascending, the lower aggregate (y) goes.
        let archive = view(vec![
            simple("x", 0.9, &[("t1", 0.5), ("t2", 1.0)]),
            simple("y", 0.2, &[("t1", 0.5), ("t2", 1.0)]),
        ]);
        assert_eq!(
            pareto_weights(&candidates(&archive)),
            vec![("x".to_string(), 2)]
        );
        assert_eq!(pick(7, &archive).unwrap(), "x");
    }

    #[test]
    fn equal_aggregates_scan_by_id_string() {
        // Same aggregate score: "10" sorts before "9" as a string, so "10" is pruned.
        let archive = view(vec![
            simple("9", 0.5, &[("t", 1.0)]),
            simple("10", 0.5, &[("t", 1.0)]),
        ]);
        assert_eq!(
            pareto_weights(&candidates(&archive)),
            vec![("9".to_string(), 1)]
        );
    }

    #[test]
    fn weights_are_sorted_by_id_string() {
        let archive = view(vec![
            simple("9", 0.1, &[("t1", 1.0)]),
            simple("10", 0.1, &[("t2", 1.0)]),
            simple("2", 0.1, &[("t3", 1.0), ("t4", 1.0)]),
        ]);
        assert_eq!(
            pareto_weights(&candidates(&archive)),
            vec![
                ("10".to_string(), 1),
                ("2".to_string(), 2),
                ("9".to_string(), 1)
            ]
        );
    }

    #[test]
    fn ineligible_and_unscored_rows_are_not_candidates() {
        let mut ineligible = simple("z", 1.0, &[("t1", 1.0), ("t2", 1.0)]);
        ineligible.eligible = false;
        let unscored = row("u", None, &[("t1", vec![ok(1.0)])]);
        let archive = view(vec![ineligible, unscored, simple("a", 0.2, &[("t1", 0.5)])]);
        assert_eq!(
            pareto_weights(&candidates(&archive)),
            vec![("a".to_string(), 1)]
        );
        assert_eq!(pick(0, &archive).unwrap(), "a");
    }

    #[test]
    fn fallback_without_task_scores_is_best_aggregate_first_on_ties() {
        let archive = view(vec![
            row("1", Some(0.3), &[]),
            row(
                "2",
                Some(0.8),
                &[("t", vec![trial(0, TrialStatus::Timeout, None)])],
            ),
            row("3", Some(0.8), &[]),
        ]);
        assert!(pareto_weights(&candidates(&archive)).is_empty());
        assert_eq!(pick(0, &archive).unwrap(), "2");
        assert_eq!(pick(99, &archive).unwrap(), "2");
    }

    #[test]
    fn empty_archive_is_an_error() {
        assert_eq!(pick(0, &view(vec![])).unwrap_err(), "no eligible parent");
        let mut r = simple("a", 0.5, &[("t", 1.0)]);
        r.eligible = false;
        assert_eq!(pick(0, &view(vec![r])).unwrap_err(), "no eligible parent");
    }

    #[test]
    fn schema_accepts_only_empty_config() {
        let schema = <Pareto as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"k": 1}"#).is_err());
    }
}
