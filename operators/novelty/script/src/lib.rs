//! novelty/script: runs the Rhai script `config.source` (read by the host from the
//! mutated child tree, so an edit to it judges its own generation) as the novelty
//! check. The script defines `fn assess(ctx, diff)` and returns `#{novelty, accept}`.
//! See docs/scripts.md.

use evolve_operator_sdk::prelude::*;

pub struct NoveltyScript;

/// Shipped scripts `evolve init` can install (`config.builtin`).
pub const BUILTINS: &[&str] = &["accept_all"];

impl Operator for NoveltyScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Judge novelty with the Rhai script config.source (fn assess(ctx, diff)) from the child tree.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(BUILTINS)
    }
}

impl Novelty for NoveltyScript {
    fn assess(ctx: &Context, diff: &CandidateDiff) -> Result<NoveltyVerdict, String> {
        evolve_script::assess(ctx, diff)
    }
}

evolve_operator_sdk::export!(novelty: NoveltyScript);

#[cfg(test)]
mod tests;
