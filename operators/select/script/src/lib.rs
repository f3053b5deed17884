//! select/script: runs the Rhai script `config.source` (read by the host from the
//! checkout select is loaded from: the champion's commit) as the selector. The script
//! defines `fn select(ctx, archive)` and returns generation ids. See docs/scripts.md.

use evolve_operator_sdk::prelude::*;

pub struct SelectScript;

/// Shipped scripts `evolve init` can install (`config.builtin`).
pub const BUILTINS: &[&str] = &["score_child_prop"];

impl Operator for SelectScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Select with the Rhai script config.source (fn select(ctx, archive)) from the stage's checkout.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(BUILTINS)
    }
}

impl Select for SelectScript {
    fn select(ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
        evolve_script::select(ctx, archive)
    }
}

evolve_operator_sdk::export!(select: SelectScript);

#[cfg(test)]
mod tests;
