//! validate/script: runs the Rhai script `config.source` (read by the host from the
//! mutated child tree, so an edit to it judges its own generation) as the validator.
//! The script defines `fn validate(ctx, changed, rollout)` and returns `#{accept,
//! reason, artifacts}`. It may read `/target` (`target_read`, `target_exists`,
//! `target_list`), run train tasks (`train_tasks`, `run_tasks`) and write artifacts
//! (`scratch_write`): exactly what the validate world grants. See docs/scripts.md.

use evolve_operator_sdk::prelude::*;
use evolve_script::Grants;
use evolve_script::world::WorldTasks;
use std::rc::Rc;

pub struct ValidateScript;

/// Shipped scripts `evolve init` can install (`config.builtin`).
pub const BUILTINS: &[&str] = &["minibatch_improvement"];

impl Operator for ValidateScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Validate with the Rhai script config.source (fn validate(ctx, changed, rollout)) from the child tree.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(BUILTINS)
    }
}

impl Validate for ValidateScript {
    fn validate(
        ctx: &Context,
        changed: &[String],
        rollout: Option<&Evidence>,
    ) -> Result<Validation, String> {
        let grants = Grants {
            tasks: Some(Rc::new(WorldTasks)),
            target: Some(evolve_script::Tree::read_only("/target")),
            scratch: Some("/scratch".into()),
            ..Grants::default()
        };
        evolve_script::validate(ctx, changed, rollout, grants)
    }
}

evolve_operator_sdk::export!(validate: ValidateScript);

#[cfg(test)]
mod tests;
