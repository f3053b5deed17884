//! rollout/noop: gather no evidence; the summary only names the parent.

use evolve_operator_sdk::prelude::*;

pub struct Noop;

impl Operator for Noop {
    const NAME: &'static str = "noop";
    const SUMMARY: &'static str = "Gather no evidence; the summary only names the parent.";
}

impl Rollout for Noop {
    fn rollout(_ctx: &Context, parent: &ArchiveRow) -> Result<Evidence, String> {
        Ok(Evidence {
            summary: json!({"rollout": "noop", "parent": parent.generation_id}).to_string(),
            artifacts: vec![],
        })
    }
}

evolve_operator_sdk::export!(rollout: Noop);

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> ArchiveRow {
        ArchiveRow {
            generation_id: id.into(),
            parent: Some("0".into()),
            generation: 3,
            status: GenerationStatus::Complete,
            score: Some(0.5),
            eligible: true,
            verdict: Some(Verdict::Keep),
            children: 2,
            task_vector: vec![],
            cost_usd: 1.5,
            annotations: "{}".into(),
        }
    }

    #[test]
    fn summary_names_the_parent_and_no_artifacts() {
        let e = Noop::rollout(&Context::for_test(json!({})), &row("3-1")).unwrap();
        assert_eq!(e.summary, r#"{"rollout":"noop","parent":"3-1"}"#);
        assert!(e.artifacts.is_empty());
    }

    #[test]
    fn parent_id_is_json_escaped() {
        let e = Noop::rollout(&Context::for_test(json!({})), &row("a\"b")).unwrap();
        let v: Value = evolve_operator_sdk::serde_json::from_str(&e.summary).unwrap();
        assert_eq!(v, json!({"rollout": "noop", "parent": "a\"b"}));
    }

    #[test]
    fn schema_accepts_only_empty_config() {
        let schema = <Noop as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"tasks": 1}"#).is_err());
    }
}
