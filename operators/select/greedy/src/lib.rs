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
        for row in parent_candidates(archive) {
            let score = row.score.unwrap_or(f64::NEG_INFINITY);
            if best.is_none_or(|(_, b)| score > b) {
                best = Some((row, score));
            }
        }
        best.map(|(row, _)| vec![row.generation_id.clone()])
            .ok_or_else(|| "no eligible parent with a finite score".to_string())
    }
}

evolve_operator_sdk::export!(select: Greedy);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::{row, view};

    fn pick(archive: &ArchiveView) -> Result<Vec<String>, String> {
        Greedy::select(&Context::for_test(json!({})), archive)
    }

    #[test]
    fn picks_the_highest_score() {
        let archive = view(vec![
            row("0", 0, Some(0.2), true),
            row("1", 1, Some(0.9), true),
            row("2", 2, Some(0.5), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["1"]);
    }

    #[test]
    fn ties_go_to_the_first_in_archive_order() {
        let archive = view(vec![
            row("0", 0, Some(0.1), true),
            row("2", 2, Some(0.7), true),
            row("1", 1, Some(0.7), true),
            row("3", 3, Some(0.7), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["2"]);
    }

    #[test]
    fn negative_scores_still_count() {
        let archive = view(vec![
            row("0", 0, Some(-0.5), true),
            row("1", 1, Some(-0.2), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["1"]);
    }

    #[test]
    fn skips_ineligible_and_unscored_rows() {
        let archive = view(vec![
            row("0", 0, Some(0.3), true),
            row("1", 1, Some(0.9), false),
            row("2", 2, None, true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["0"]);
    }

    #[test]
    fn no_candidate_is_an_error() {
        assert_eq!(
            pick(&view(vec![])).unwrap_err(),
            "no eligible parent with a finite score"
        );
        let archive = view(vec![row("1", 1, None, true), row("2", 2, Some(1.0), false)]);
        assert_eq!(
            pick(&archive).unwrap_err(),
            "no eligible parent with a finite score"
        );
    }

    #[test]
    fn schema_accepts_only_empty_config() {
        let schema = <Greedy as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"k": 1}"#).is_err());
    }
}
