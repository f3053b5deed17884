//! A mutate operator built against the contract as it stood before `model.complete` was
//! added (`wit/` here is `evolve:operator@0.1.0` at commit d3fb36a, frozen: its `model`
//! interface has `chat` only). The host's `model` now also offers `complete`; a component
//! built against the older interface must still load and call `chat` (docs/model.md,
//! "Versioning"). It writes the model's answer into `/target/value.txt`, like
//! `model_mutate`, without the SDK, so nothing of today's bindings leaks into it.

wit_bindgen::generate!({
    world: "mutate-operator",
    path: "wit",
});

use evolve::operator::model::{self, ChatRequest, Message, Role};
use evolve::operator::types::{CallContext, ConfigViolation, Observation, Proposal, Stage, Usage};
use exports::evolve::operator::meta::{Description, Guest as Meta};
use exports::evolve::operator::mutate::Guest as Mutate;

struct Legacy;

impl Meta for Legacy {
    fn describe() -> Description {
        Description {
            stage: Stage::Mutate,
            name: "legacy_chat_mutate".into(),
            summary: "Writes the model's answer into target/value.txt, built against the chat-only model interface (test component).".into(),
            config_schema: r#"{"type":"object","properties":{},"additionalProperties":false}"#.into(),
        }
    }

    fn normalize_config(raw: String) -> Result<String, Vec<ConfigViolation>> {
        match raw.trim() {
            "{}" | "" => Ok("{}".into()),
            _ => Err(vec![ConfigViolation {
                path: String::new(),
                message: "takes no configuration (expected {})".into(),
            }]),
        }
    }
}

impl Mutate for Legacy {
    fn mutate(ctx: CallContext, _observation: Observation) -> Result<Proposal, String> {
        let current = std::fs::read_to_string("/target/value.txt").map_err(|e| e.to_string())?;
        let answer = model::chat(&ChatRequest {
            messages: vec![Message {
                role: Role::User,
                content: format!("Generation {}: improve {}", ctx.generation, current.trim()),
            }],
            max_tokens: Some(16),
            temperature: None,
        })
        .map_err(|e| format!("model: {e:?}"))?;
        std::fs::write("/target/value.txt", format!("{}\n", answer.content.trim()))
            .map_err(|e| e.to_string())?;
        Ok(Proposal {
            changed: vec!["target/value.txt".into()],
            notes: vec![format!("legacy model answered {}", answer.content.trim())],
            usage: Usage {
                input_tokens: answer.input_tokens,
                output_tokens: answer.output_tokens,
                usd: answer.usd,
            },
        })
    }
}

export!(Legacy);
