//! select/greedy: the eligible generation with the highest certified score; the first
//! in archive order on ties.

use evolve_operator_sdk::prelude::*;

pub struct Greedy;

impl Operator for Greedy {
    const NAME: &'static str = "greedy";
    const SUMMARY: &'static str =
        "Pick the eligible generation with the highest score (first on ties).";
}

impl Select for Greedy {
    fn select(_ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
        let mut best: Option<(&ArchiveRow, f64)> = None;
        for row in archive.rows.iter().filter(|r| r.eligible) {
            let Some(score) = row.score.filter(|s| s.is_finite()) else {
                continue;
            };
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((row, score));
            }
        }
        best.map(|(row, _)| vec![row.generation_id.clone()])
            .ok_or_else(|| "no eligible parent with a finite score".to_string())
    }
}

evolve_operator_sdk::export!(select: Greedy);
