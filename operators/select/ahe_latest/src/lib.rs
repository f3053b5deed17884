//! select/ahe_latest (Agentic Harness Engineering): the newest eligible generation,
//! regardless of score. Highest generation number; ties go to the larger generation id
//! (compared as strings).

use evolve_operator_sdk::prelude::*;

pub struct AheLatest;

impl Operator for AheLatest {
    const NAME: &'static str = "ahe_latest";
    const SUMMARY: &'static str =
        "Pick the newest eligible generation regardless of score (larger id on ties).";
}

impl Select for AheLatest {
    fn select(_ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
        parent_candidates(archive)
            .into_iter()
            .max_by(|a, b| (a.generation, &a.generation_id).cmp(&(b.generation, &b.generation_id)))
            .map(|row| vec![row.generation_id.clone()])
            .ok_or_else(|| "no eligible parent".to_string())
    }
}

evolve_operator_sdk::export!(select: AheLatest);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::{row, view};

    fn pick(archive: &ArchiveView) -> Result<Vec<String>, String> {
        AheLatest::select(&Context::for_test(json!({})), archive)
    }

    #[test]
    fn picks_the_newest_ignoring_score() {
        let archive = view(vec![
            row("0", 0, Some(0.9), true),
            row("2", 2, Some(0.0), true),
            row("1", 1, Some(0.5), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["2"]);
    }

    #[test]
    fn ties_go_to_the_larger_id_string() {
        let archive = view(vec![
            row("3-0", 3, Some(0.9), true),
            row("3-2", 3, Some(0.1), true),
            row("3-1", 3, Some(0.5), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["3-2"]);
        // String order, not numeric: "3-9" > "3-10".
        let archive = view(vec![
            row("3-10", 3, Some(0.5), true),
            row("3-9", 3, Some(0.5), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["3-9"]);
    }

    #[test]
    fn generation_number_beats_id_string() {
        // Generation 10 is newer than 9 even though "9" > "10" as strings.
        let archive = view(vec![
            row("10", 10, Some(0.1), true),
            row("9", 9, Some(0.9), true),
        ]);
        assert_eq!(pick(&archive).unwrap(), vec!["10"]);
    }

    #[test]
    fn skips_ineligible_and_unscored_rows() {
        let archive = view(vec![
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
        let schema = <AheLatest as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"k": 1}"#).is_err());
    }
}
