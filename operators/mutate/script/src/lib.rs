//! mutate/script: runs the Rhai script `config.source` (read by the host from the
//! parent fork before the call, so an edit the script makes, even to itself, is used by
//! the edit's descendants, never by the generation making it) as the mutation. The
//! script defines `fn mutate(ctx, observation)` and returns `#{changed, notes}` (both
//! optional: `changed` defaults to the paths it wrote). It may read and write the
//! candidate (`target_read`/`_exists`/`_list`/`_write`/`_remove`, and `operators_…`
//! the same way when `/operators` is granted), read the feedback bundle
//! (`feedback_read`/`_exists`/`_list`), call the model (`model_chat`), run train tasks
//! (`train_tasks`, `run_tasks`) and write to `/scratch` (`scratch_write`): what the
//! mutate world and its preopens grant. See docs/scripts.md.

use evolve_operator_sdk::prelude::*;
use evolve_script::world::{WorldModel, WorldTasks};
use evolve_script::{Grants, Tree};
use std::path::Path;
use std::rc::Rc;

pub struct MutateScript;

impl Operator for MutateScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Mutate with the Rhai script config.source (fn mutate(ctx, observation)) from the parent fork.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(&[])
    }
}

/// The grants of a call whose guest `/` is `root`: `/operators` and `/feedback` only
/// when the host preopened them (the surface includes `operators/**`; a feedback bundle
/// was assembled).
pub fn grants(root: &Path, observation: &Observation) -> Grants {
    let operators = root.join("operators");
    let feedback = observation
        .feedback_dir
        .as_deref()
        .map(|d| root.join(d.trim_start_matches('/')))
        .filter(|d| d.is_dir());
    Grants {
        tasks: Some(Rc::new(WorldTasks)),
        model: Some(Rc::new(WorldModel)),
        target: Some(Tree::read_write(root.join("target"))),
        operators: operators.is_dir().then(|| Tree::read_write(operators)),
        feedback: feedback.map(Tree::read_only),
        scratch: Some(root.join("scratch")),
    }
}

impl Mutate for MutateScript {
    fn mutate(ctx: &Context, observation: &Observation) -> Result<Proposal, String> {
        evolve_script::mutate(ctx, observation, grants(Path::new("/"), observation))
    }
}

evolve_operator_sdk::export!(mutate: MutateScript);
