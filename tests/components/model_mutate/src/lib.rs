//! A mutate operator that asks the host's `model` for the new content of
//! `/target/value.txt` (test component for the model capability end to end).

use evolve_operator_sdk::model;
use evolve_operator_sdk::prelude::*;

pub struct ModelMutate;

impl Operator for ModelMutate {
    const NAME: &'static str = "model_mutate";
    const SUMMARY: &'static str =
        "Writes the model's answer into target/value.txt (test component).";
}

impl Mutate for ModelMutate {
    fn mutate(ctx: &Context, _observation: &Observation) -> Result<Proposal, String> {
        let current = std::fs::read_to_string("/target/value.txt").map_err(|e| e.to_string())?;
        let request = model::ChatRequest {
            messages: vec![
                model::Message {
                    role: model::Role::System,
                    content: "Answer with one number.".into(),
                },
                model::Message {
                    role: model::Role::User,
                    content: format!("Generation {}: improve {}", ctx.generation, current.trim()),
                },
            ],
            max_tokens: Some(16),
            temperature: None,
        };
        let answer = model::chat(&request).map_err(|e| format!("model: {e:?}"))?;
        std::fs::write("/target/value.txt", format!("{}\n", answer.content.trim()))
            .map_err(|e| e.to_string())?;
        Ok(Proposal {
            changed: vec!["target/value.txt".into()],
            notes: vec![format!("model answered {}", answer.content.trim())],
            usage: Usage {
                input_tokens: answer.input_tokens,
                output_tokens: answer.output_tokens,
                usd: answer.usd,
            },
        })
    }
}

evolve_operator_sdk::export!(mutate: ModelMutate);
