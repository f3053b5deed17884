//! gate/script: runs the Rhai script `config.source` (read by the host from the
//! committed child) as the gate. The script defines `fn decide(ctx, child, parent)` (or
//! `fn decide(ctx, child, parent, archive, diff)`) and returns `#{verdict: "keep" |
//! "discard", reason}`. See docs/scripts.md.

use evolve_operator_sdk::prelude::*;

pub struct GateScript;

/// Shipped scripts `evolve init` can install (`config.builtin`).
pub const BUILTINS: &[&str] = &["hillclimb", "parent_eligible"];

impl Operator for GateScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Gate with the Rhai script config.source (fn decide(ctx, child, parent)) from the child's commit.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(BUILTINS)
    }
}

impl Gate for GateScript {
    fn decide(
        ctx: &Context,
        child: &ArchiveRow,
        parent: Option<&ArchiveRow>,
        input: &GateInput,
    ) -> Result<GateDecision, String> {
        evolve_script::decide(ctx, child, parent, input.archive, input.diff)
    }
}

evolve_operator_sdk::export!(gate: GateScript);

#[cfg(test)]
mod tests;
