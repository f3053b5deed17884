//! Exports the select world but also calls the `model` capability, which only the
//! analyze, mutate and reflect worlds import. The SDK generates the `model` bindings
//! once for every operator, so calling them from a select component adds the import
//! `evolve:operator/model@0.1.0`; the host must refuse the component at load time.

use evolve_operator_sdk::model;
use evolve_operator_sdk::prelude::*;

pub struct WrongImports;

impl Operator for WrongImports {
    const NAME: &'static str = "wrong_imports";
    const SUMMARY: &'static str =
        "A select operator that imports the model capability (test component).";
}

impl Select for WrongImports {
    fn select(_ctx: &Context, _archive: &ArchiveView) -> Result<Vec<String>, String> {
        let req = model::ChatRequest {
            messages: vec![model::Message {
                role: model::Role::User,
                content: "which parent?".into(),
            }],
            max_tokens: None,
            temperature: None,
        };
        match model::chat(&req) {
            Ok(resp) => Ok(vec![resp.content]),
            Err(e) => Err(format!("{e:?}")),
        }
    }
}

evolve_operator_sdk::export!(select: WrongImports);
