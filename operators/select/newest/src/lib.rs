//! select/newest: the eligible generation with the highest generation number; the first
//! in archive order on ties.

use evolve_operator_sdk::prelude::*;

pub struct Newest;

impl Operator for Newest {
    const NAME: &'static str = "newest";
    const SUMMARY: &'static str =
        "Pick the eligible generation with the highest generation number (first on ties).";
}

impl Select for Newest {
    fn select(_ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
        let mut best: Option<&ArchiveRow> = None;
        for row in parent_candidates(archive) {
            if best.is_none_or(|b| row.generation > b.generation) {
                best = Some(row);
            }
        }
        best.map(|row| vec![row.generation_id.clone()])
            .ok_or_else(|| "no eligible parent".to_string())
    }
}

evolve_operator_sdk::export!(select: Newest);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::{row, view};

    fn pick(archive: &ArchiveView) -> Result<Vec<String>, String> {
        Newest::select(&Context::for_test(json!({})), archive)
    }

    #[test]
    fn picks_the_highest_generation() {
        let archive = view(vec![
            row("0", 0, Some(0.9), true),
            row("2", 2, Some(0.1), true),
            row("1", 1, Some(0.5), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["2"]);
    }

    #[test]
    fn ties_go_to_the_first_in_archive_order() {
        let archive = view(vec![
            row("0", 0, Some(0.9), true),
            row("3-1", 3, Some(0.2), true),
            row("3-0", 3, Some(0.8), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["3-1"]);
    }

    #[test]
    fn skips_ineligible_and_unscored_rows() {
        let archive = view(vec![
            row("0", 0, Some(0.1), true),
            row("1", 1, Some(0.5), true),
            row("2", 2, Some(0.9), false),
            row("3", 3, None, true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["1"]);
    }

    #[test]
    fn no_candidate_is_an_error() {
        assert_eq!(pick(&view(vec![])).unwrap_err(), "no eligible parent");
        let archive = view(vec![row("1", 1, None, true), row("2", 2, Some(1.0), false)]);
        assert_eq!(pick(&archive).unwrap_err(), "no eligible parent");
    }

    #[test]
    fn schema_accepts_only_empty_config() {
        let schema = <Newest as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"k": 1}"#).is_err());
    }
}
