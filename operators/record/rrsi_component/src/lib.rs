//! record/rrsi_component: tag a decided child with the components its change touched,
//! so that RRSI's per-edit history (novelty, yields, prune targets) can be derived from
//! the archive alone.
//!
//! The host passes the child's diff against its parent; every changed file is
//! classified with `rrsi::classify` (a `layout` claim is kept only when the diff carries
//! a signal for it; literal- or comment-only diffs are prompt edits). Annotations:
//! `x_rrsi_components` (the distinct components, in a fixed order) and `x_rrsi_files`
//! (`[{path, component}]`, at most `max_files`). Without a diff the call fails, so the
//! record event says why and the child stays untagged (history ignores it).

use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::rrsi::{self, config as rc};

pub struct RrsiComponent;

impl Operator for RrsiComponent {
    const NAME: &'static str = "rrsi_component";
    const SUMMARY: &'static str = "RRSI: annotate the child with the components (client_tool, skill, memory, subagent, prompt, other) its diff touched.";

    fn config() -> SchemaBuilder {
        Schema::new().field("layout", rc::layout_field()).field(
            "max_files",
            config::integer()
                .default(json!(50))
                .minimum(0.0)
                .maximum(1000.0)
                .description("Most files listed in x_rrsi_files"),
        )
    }
}

/// The annotations for a child whose change is `diff`.
pub fn annotate(
    ctx: &Context,
    child: &ArchiveRow,
    diff: Option<&CandidateDiff>,
) -> Result<Map<String, Value>, String> {
    let diff = diff.ok_or_else(|| {
        format!(
            "the host sent no diff for generation {}, so its components cannot be classified",
            child.generation_id
        )
    })?;
    let layout = rc::layout(ctx)?;
    let files = rrsi::classify(&diff.patch, &layout).map_err(|e| e.to_string())?;
    let max = usize::try_from(ctx.i64("max_files").unwrap_or(50)).unwrap_or(0);
    let components: Vec<&str> = rrsi::components_of(&files)
        .iter()
        .map(|c| c.name())
        .collect();
    let listed: Vec<Value> = files
        .iter()
        .take(max)
        .map(|(path, c)| json!({"path": path, "component": c.name()}))
        .collect();
    let mut out = Map::new();
    out.insert(rrsi::ANNOTATION.into(), json!(components));
    out.insert("x_rrsi_files".into(), Value::Array(listed));
    Ok(out)
}

impl Record for RrsiComponent {
    fn annotate(
        ctx: &Context,
        child: &ArchiveRow,
        diff: Option<&CandidateDiff>,
    ) -> Result<Map<String, Value>, String> {
        annotate(ctx, child, diff)
    }
}

evolve_operator_sdk::export!(record: RrsiComponent);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::row;

    fn ctx(config: Value) -> Context {
        let schema = <RrsiComponent as Operator>::config().build().unwrap();
        Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()))
    }

    fn diff(patch: &str) -> CandidateDiff {
        CandidateDiff {
            changed_paths: vec![],
            patch: patch.into(),
            recent_accepted: vec![],
        }
    }

    const TWO_FILES: &str = "diff --git a/target/skills/a/SKILL.md b/target/skills/a/SKILL.md\n\
        --- a/target/skills/a/SKILL.md\n+++ b/target/skills/a/SKILL.md\n@@ -1 +1 @@\n-Old step.\n+New step.\n\
        diff --git a/target/params.json b/target/params.json\n\
        --- a/target/params.json\n+++ b/target/params.json\n@@ -1 +1 @@\n-  \"note\": \"a\",\n+  \"note\": \"b\",\n";

    #[test]
    fn tags_each_file_and_the_distinct_components() {
        let out = annotate(
            &ctx(json!({})),
            &row("3", 3, Some(0.5), true),
            Some(&diff(TWO_FILES)),
        )
        .unwrap();
        assert_eq!(
            Value::Object(out),
            json!({
                "x_rrsi_components": ["skill", "prompt"],
                "x_rrsi_files": [
                    {"path": "target/skills/a/SKILL.md", "component": "skill"},
                    {"path": "target/params.json", "component": "prompt"},
                ],
            })
        );
    }

    #[test]
    fn max_files_bounds_the_listing_only() {
        let out = annotate(
            &ctx(json!({"max_files": 1})),
            &row("3", 3, None, false),
            Some(&diff(TWO_FILES)),
        )
        .unwrap();
        assert_eq!(out["x_rrsi_files"].as_array().unwrap().len(), 1);
        assert_eq!(out["x_rrsi_components"], json!(["skill", "prompt"]));
    }

    #[test]
    fn without_a_diff_or_with_a_broken_one_it_fails() {
        let child = row("3", 3, Some(0.5), true);
        assert_eq!(
            annotate(&ctx(json!({})), &child, None).unwrap_err(),
            "the host sent no diff for generation 3, so its components cannot be classified"
        );
        let broken = diff("--- a/f\n+++ b/f\n@@ -1 +x @@\n+a\n");
        assert_eq!(
            annotate(&ctx(json!({})), &child, Some(&broken)).unwrap_err(),
            "patch line 3: expected a hunk header `@@ -a[,b] +c[,d] @@`"
        );
    }

    #[test]
    fn annotation_keys_pass_the_free_form_prefix() {
        // The host's allowlist admits `x_` keys of [A-Za-z0-9_], at most 64 bytes.
        for k in [rrsi::ANNOTATION, "x_rrsi_files"] {
            assert!(k.starts_with("x_") && k.len() <= 64);
            assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        }
    }
}
