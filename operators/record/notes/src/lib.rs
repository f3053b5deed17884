//! record/notes: annotate a decided child with a note (the configured `note`, or a
//! sentence naming the generation and its score) and an empty `predicted_fixes` list.

use evolve_operator_sdk::prelude::*;

pub struct Notes;

impl Operator for Notes {
    const NAME: &'static str = "notes";
    const SUMMARY: &'static str =
        "Annotate the child with a note (configured, or naming its generation and score).";

    fn config() -> SchemaBuilder {
        Schema::new().field(
            "note",
            config::string()
                .minimum(1.0)
                .description("Note to record; default: a sentence naming the generation and score"),
        )
    }
}

/// The default note for a child.
pub fn default_note(child: &ArchiveRow) -> String {
    match child.score.filter(|s| s.is_finite()) {
        Some(s) => format!("generation {} scored {s}", child.generation_id),
        None => format!(
            "generation {} has no score (status {})",
            child.generation_id,
            status_name(child.status)
        ),
    }
}

impl Record for Notes {
    fn annotate(
        ctx: &Context,
        child: &ArchiveRow,
        _diff: Option<&CandidateDiff>,
    ) -> Result<Map<String, Value>, String> {
        let note = ctx
            .str("note")
            .map(str::to_string)
            .unwrap_or_else(|| default_note(child));
        let mut out = Map::new();
        out.insert("note".into(), Value::String(note));
        out.insert("predicted_fixes".into(), json!([]));
        Ok(out)
    }
}

evolve_operator_sdk::export!(record: Notes);

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, score: Option<f64>, status: GenerationStatus) -> ArchiveRow {
        ArchiveRow {
            generation_id: id.into(),
            parent: Some("0".into()),
            generation: 4,
            status,
            score,
            eligible: false,
            verdict: None,
            children: 0,
            task_vector: vec![],
            cost_usd: 0.0,
            annotations: "{}".into(),
        }
    }

    fn annotate(config: Value, child: &ArchiveRow) -> Value {
        let schema = <Notes as Operator>::config().build().unwrap();
        let ctx = Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()));
        Value::Object(Notes::annotate(&ctx, child, None).unwrap())
    }

    #[test]
    fn default_note_names_generation_and_score() {
        let child = row("4-1", Some(0.625), GenerationStatus::Complete);
        assert_eq!(
            annotate(json!({}), &child),
            json!({"note": "generation 4-1 scored 0.625", "predicted_fixes": []})
        );
    }

    #[test]
    fn default_note_without_score_names_the_status() {
        let child = row("5", None, GenerationStatus::Timeout);
        assert_eq!(
            annotate(json!({}), &child),
            json!({"note": "generation 5 has no score (status timeout)", "predicted_fixes": []})
        );
    }

    #[test]
    fn configured_note_wins() {
        let child = row("4", Some(0.1), GenerationStatus::Complete);
        assert_eq!(
            annotate(json!({"note": "tried a cache"}), &child),
            json!({"note": "tried a cache", "predicted_fixes": []})
        );
    }

    #[test]
    fn schema_note_is_optional_non_empty_string() {
        let schema = <Notes as Operator>::config().build().unwrap();
        assert!(schema.normalize("{}").unwrap().is_empty());
        assert!(schema.normalize(r#"{"note": ""}"#).is_err());
        assert!(schema.normalize(r#"{"note": 3}"#).is_err());
        assert!(schema.normalize(r#"{"other": "x"}"#).is_err());
    }
}
