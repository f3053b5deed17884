//! The coder's conversation as an ATIF (v1.4) trajectory: the system and first user
//! message, then one agent step per model call with its tool calls, what each returned,
//! and the call's metered tokens and cost. Rewritten whole after every turn, so a call
//! that is killed mid-way still leaves every finished turn behind.

use std::path::Path;

use evolve_operator_sdk::conversation::{Conversation, Reply};
use evolve_operator_sdk::model::Turn;
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::serde_json;

use crate::tools::Outcome;

pub const SCHEMA_VERSION: &str = "ATIF-v1.4";

pub struct Log {
    steps: Vec<Value>,
    model: Option<String>,
    notes: Option<String>,
}

impl Log {
    /// A log that starts with the conversation's opening turns.
    pub fn new(chat: &Conversation, model: Option<&str>) -> Log {
        let mut log = Log {
            steps: Vec::new(),
            model: model.map(str::to_string),
            notes: None,
        };
        for turn in &chat.turns {
            let (source, message) = match turn {
                Turn::System(m) => ("system", m),
                Turn::User(m) => ("user", m),
                _ => continue,
            };
            log.push(json!({"source": source, "message": message}));
        }
        log
    }

    fn push(&mut self, mut step: Value) {
        step["step_id"] = json!(self.steps.len() as u64 + 1);
        self.steps.push(step);
    }

    /// One model call and the results of its tool calls.
    pub fn turn(&mut self, reply: &Reply, results: &[(String, Outcome)]) {
        let calls: Vec<Value> = reply
            .tool_calls
            .iter()
            .map(|c| {
                let arguments = serde_json::from_str::<Value>(&c.arguments)
                    .unwrap_or_else(|_| Value::String(c.arguments.clone()));
                json!({"tool_call_id": c.id, "function_name": c.name, "arguments": arguments})
            })
            .collect();
        let mut step = json!({
            "source": "agent",
            "message": reply.content.clone().unwrap_or_default(),
            "tool_calls": calls,
            "metrics": {
                "prompt_tokens": reply.usage.input_tokens,
                "completion_tokens": reply.usage.output_tokens,
                "cost_usd": reply.usage.usd,
            },
            "extra": {"finish_reason": reply.finish_reason},
        });
        if !results.is_empty() {
            step["observation"] = json!({"results": results.iter().map(|(id, o)| json!({
                "source_call_id": id, "content": o.content,
                "extra": {"tool": o.tool, "error": o.error, "elapsed_us": o.elapsed_us, "trials_ms": o.trials_ms}
            })).collect::<Vec<_>>()});
        }
        if let Some(model) = &self.model {
            step["model_name"] = json!(model);
        }
        self.push(step);
    }

    /// Why the session ended.
    pub fn end(&mut self, note: &str) {
        self.notes = Some(note.to_string());
    }

    /// The trajectory as JSON.
    pub fn to_json(&self, chat: &Conversation) -> Value {
        let spent = chat.spent();
        let mut doc = json!({
            "schema_version": SCHEMA_VERSION,
            "session_id": "mutate-coder",
            "agent": {"name": "evolve-mutate-coder", "version": env!("CARGO_PKG_VERSION")},
            "steps": self.steps,
            "final_metrics": {
                "total_prompt_tokens": spent.input_tokens,
                "total_completion_tokens": spent.output_tokens,
                "total_cost_usd": spent.usd,
                "total_steps": self.steps.len(),
            },
        });
        if let Some(model) = &self.model {
            doc["agent"]["model_name"] = json!(model);
        }
        if let Some(notes) = &self.notes {
            doc["notes"] = json!(notes);
        }
        doc
    }

    /// Write it to `/scratch/<file>` (best effort: a full scratch quota must not cost the
    /// edits already made).
    pub fn write(&self, root: &Path, file: &str, chat: &Conversation) {
        let text = serde_json::to_string_pretty(&self.to_json(chat)).unwrap_or_default();
        let _ = std::fs::write(root.join("scratch").join(file), text);
    }
}
