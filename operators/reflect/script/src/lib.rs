//! reflect/script: runs the Rhai script `config.source` (read by the host from the
//! workspace head) as the reflection. The script defines `fn reflect(ctx, archive,
//! playbook)` and returns playbook operations (`#{op: "add", id, text, data}`, `#{op:
//! "credit", id, delta, reason}`, `#{op: "retire", id}`). It may call the model
//! (`model_chat`): the reflect world imports `model` and nothing else. See
//! docs/scripts.md.

use evolve_operator_sdk::prelude::*;
use evolve_script::Grants;
use evolve_script::world::WorldModel;
use std::rc::Rc;

pub struct ReflectScript;

impl Operator for ReflectScript {
    const NAME: &'static str = "script";
    const SUMMARY: &'static str = "Reflect with the Rhai script config.source (fn reflect(ctx, archive, playbook)) from the workspace head.";

    fn config() -> SchemaBuilder {
        evolve_script::schema(&[])
    }
}

impl Reflect for ReflectScript {
    fn reflect(
        ctx: &Context,
        archive: &ArchiveView,
        playbook: &[PlaybookEntry],
    ) -> Result<Vec<PlaybookOp>, String> {
        let grants = Grants {
            model: Some(Rc::new(WorldModel)),
            ..Grants::default()
        };
        evolve_script::reflect(ctx, archive, playbook, grants)
    }
}

evolve_operator_sdk::export!(reflect: ReflectScript);
