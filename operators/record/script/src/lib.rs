//! record/script: runs the Rhai script `config.source` (read by the host from the
//! committed child) to annotate it. The script defines `fn annotate(ctx, child)` (or
//! `fn annotate(ctx, child, diff)`) and returns an object map; the host's allowlist still filters it. See docs/scripts.md.

use evolve_operator_sdk::prelude::*;

pub struct RecordScript;

/// Shipped scripts `evolve init` can install (`config.builtin`).
pub const BUILTINS: &[&str] = &["notes"];

impl Operator for RecordScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Annotate with the Rhai script config.source (fn annotate(ctx, child)) from the child's commit.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(BUILTINS)
    }
}

impl Record for RecordScript {
    fn annotate(
        ctx: &Context,
        child: &ArchiveRow,
        diff: Option<&CandidateDiff>,
    ) -> Result<Map<String, Value>, String> {
        evolve_script::annotate(ctx, child, diff)
    }
}

evolve_operator_sdk::export!(record: RecordScript);

#[cfg(test)]
mod tests;
