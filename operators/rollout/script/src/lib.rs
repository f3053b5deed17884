//! rollout/script: runs the Rhai script `config.source` (read by the host from the
//! parent fork, so an edit to it by mutate is used by the edit's descendants) as the
//! rollout. The script defines `fn rollout(ctx, parent)` and returns `#{summary: #{…},
//! artifacts}`. It may run train tasks (`train_tasks`, `run_tasks`) and write artifacts
//! (`scratch_write`): the rollout world imports `tasks` and nothing else. See
//! docs/scripts.md.

use evolve_operator_sdk::prelude::*;
use evolve_script::Grants;
use evolve_script::world::WorldTasks;
use std::rc::Rc;

pub struct RolloutScript;

impl Operator for RolloutScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Roll out with the Rhai script config.source (fn rollout(ctx, parent)) from the parent fork.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(&[])
    }
}

impl Rollout for RolloutScript {
    fn rollout(ctx: &Context, parent: &ArchiveRow) -> Result<Evidence, String> {
        let grants = Grants {
            tasks: Some(Rc::new(WorldTasks)),
            scratch: Some("/scratch".into()),
            ..Grants::default()
        };
        evolve_script::rollout(ctx, parent, grants)
    }
}

evolve_operator_sdk::export!(rollout: RolloutScript);
