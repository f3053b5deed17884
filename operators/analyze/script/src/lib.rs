//! analyze/script: runs the Rhai script `config.source` (read by the host from the
//! parent fork, so an edit to it by mutate is used by the edit's descendants) as the
//! analysis. The script defines `fn analyze(ctx, rollout)` and returns `#{summary:
//! #{…}, artifacts}`. It may call the model (`model_chat`), read the train feedback
//! bundle (`feedback_read`/`_exists`/`_list`: rollout's evidence and the train trials'
//! trajectories, when the host granted one) and write artifacts (`scratch_write`): the
//! analyze world imports `model` and nothing else. See docs/scripts.md.

use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::trajectories::FEEDBACK;
use evolve_script::world::WorldModel;
use evolve_script::{Grants, Tree};
use std::path::Path;
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
        // `/feedback` only when the host preopened it (a lifecycle call, not a sample run).
        let feedback = Path::new(FEEDBACK)
            .is_dir()
            .then(|| Tree::read_only(FEEDBACK));
        let grants = Grants {
            model: Some(Rc::new(WorldModel)),
            feedback,
            scratch: Some("/scratch".into()),
            ..Grants::default()
        };
        evolve_script::analyze(ctx, rollout, grants)
    }
}

evolve_operator_sdk::export!(analyze: AnalyzeScript);
