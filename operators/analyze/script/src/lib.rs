//! analyze/script: runs the Rhai script `config.source` (read by the host from the
//! parent fork, so an edit to it by mutate is used by the edit's descendants) as the
//! analysis. The script defines `fn analyze(ctx, rollout)` and returns `#{summary:
//! #{…}, artifacts}`. It may call the model (`model_chat`) and write artifacts
//! (`scratch_write`): the analyze world imports `model` and nothing else. See
//! docs/scripts.md.

use evolve_operator_sdk::prelude::*;
use evolve_script::Grants;
use evolve_script::world::WorldModel;
use std::rc::Rc;

pub struct AnalyzeScript;

impl Operator for AnalyzeScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Analyze with the Rhai script config.source (fn analyze(ctx, rollout)) from the parent fork.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(&[])
    }
}

impl Analyze for AnalyzeScript {
    fn analyze(ctx: &Context, rollout: &Evidence) -> Result<Evidence, String> {
        let grants = Grants {
            model: Some(Rc::new(WorldModel)),
            scratch: Some("/scratch".into()),
            ..Grants::default()
        };
        evolve_script::analyze(ctx, rollout, grants)
    }
}

evolve_operator_sdk::export!(analyze: AnalyzeScript);
