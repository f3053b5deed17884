//! novelty/accept_all: every candidate is wholly novel (novelty 1.0) and accepted.

use evolve_operator_sdk::prelude::*;

pub struct AcceptAll;

impl Operator for AcceptAll {
    const NAME: &'static str = "accept_all";
    const SUMMARY: &'static str = "Accept every candidate as wholly novel (novelty 1.0).";
}

impl Novelty for AcceptAll {
    fn assess(_ctx: &Context, _diff: &CandidateDiff) -> Result<NoveltyVerdict, String> {
        Ok(NoveltyVerdict {
            novelty: 1.0,
            accept: true,
        })
    }
}

evolve_operator_sdk::export!(novelty: AcceptAll);

#[cfg(test)]
mod tests {
    use super::*;

    fn assess(diff: CandidateDiff) -> (f64, bool) {
        let v = AcceptAll::assess(&Context::for_test(json!({})), &diff).unwrap();
        (v.novelty, v.accept)
    }

    #[test]
    fn accepts_a_change() {
        let diff = CandidateDiff {
            changed_paths: vec!["target/a.py".into()],
            patch: "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n".into(),
            recent_accepted: vec!["--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n".into()],
        };
        assert_eq!(assess(diff), (1.0, true));
    }

    #[test]
    fn accepts_even_an_empty_change() {
        let diff = CandidateDiff {
            changed_paths: vec![],
            patch: String::new(),
            recent_accepted: vec![],
        };
        assert_eq!(assess(diff), (1.0, true));
    }

    #[test]
    fn schema_accepts_only_empty_config() {
        let schema = <AcceptAll as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"threshold": 0.5}"#).is_err());
    }
}
