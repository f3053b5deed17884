//! Typed helpers for `model.complete`: a [`Conversation`] that keeps the turns, the tools
//! and the settings, sends itself, records the assistant's answer, and adds up what the
//! calls cost; [`Tool`] definitions with JSON-Schema parameters; [`ToolCall`]s whose
//! arguments decode into the operator's own types.
//!
//! ```ignore
//! use evolve_operator_sdk::conversation::{Conversation, Tool};
//!
//! let mut chat = Conversation::new("You fix prompts.")
//!     .named_model("proposer")
//!     .tool(Tool::new("read_file", "Read a file", json!({
//!         "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})));
//! chat.user("Improve target/prompt.md");
//! let reply = chat.send()?;                       // model.complete through the host
//! for call in &reply.tool_calls {
//!     let args: ReadArgs = call.args()?;
//!     chat.tool_result(&call.id, read(&args.path));
//! }
//! ```
//!
//! The host meters every call (`usd` in each answer); [`Conversation::spent`] only adds
//! those figures up for the operator's own limits and its proposal's `usage`.

use crate::model::{
    self, AssistantTurn, Completion, CompletionRequest, ModelError, ToolChoice, ToolResult, Turn,
};
use crate::types::Usage;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A tool the model may call: a name (`[a-zA-Z0-9_-]{1,64}`), what it does, and the JSON
/// Schema of its arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

impl Tool {
    pub fn new(name: &str, description: &str, parameters: Value) -> Tool {
        Tool {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }

    fn to_wit(&self) -> model::Tool {
        model::Tool {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.to_string(),
        }
    }
}

/// One call the model asked for, with its arguments still as the model wrote them.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    /// The arguments decoded into `T`; the error names the tool and says what was wrong,
    /// in words a model can act on.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, String> {
        let text = if self.arguments.trim().is_empty() {
            "{}"
        } else {
            &self.arguments
        };
        serde_json::from_str(text)
            .map_err(|e| format!("the arguments of {} are not valid: {e}", self.name))
    }
}

/// What one call answered.
#[derive(Debug, Clone)]
pub struct Reply {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// The provider's `finish_reason` (`stop`, `tool_calls`, `length`, …).
    pub finish_reason: String,
    pub usage: Usage,
}

/// A conversation with tools: what the next `complete` request carries, and what the
/// calls so far cost.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub turns: Vec<Turn>,
    pub tools: Vec<Tool>,
    /// One of the recipe's named `models`, or `None` for the `model:` block.
    pub model: Option<String>,
    pub tool_choice: Option<ToolChoice>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub reasoning_effort: Option<String>,
    pub response_format: Option<Value>,
    spent: Usage,
    calls: u32,
}

impl Conversation {
    /// A conversation that starts with `system`.
    pub fn new(system: impl Into<String>) -> Conversation {
        Conversation {
            turns: vec![Turn::System(system.into())],
            tools: Vec::new(),
            model: None,
            tool_choice: None,
            max_tokens: None,
            temperature: None,
            reasoning_effort: None,
            response_format: None,
            spent: Usage {
                input_tokens: 0,
                output_tokens: 0,
                usd: 0.0,
            },
            calls: 0,
        }
    }

    pub fn tool(mut self, tool: Tool) -> Conversation {
        self.tools.push(tool);
        self
    }

    pub fn named_model(mut self, name: impl Into<String>) -> Conversation {
        self.model = Some(name.into());
        self
    }

    pub fn max_tokens(mut self, n: u32) -> Conversation {
        self.max_tokens = Some(n);
        self
    }

    pub fn temperature(mut self, t: f64) -> Conversation {
        self.temperature = Some(t);
        self
    }

    pub fn reasoning_effort(mut self, effort: impl Into<String>) -> Conversation {
        self.reasoning_effort = Some(effort.into());
        self
    }

    /// Add a user turn.
    pub fn user(&mut self, text: impl Into<String>) {
        self.turns.push(Turn::User(text.into()));
    }

    /// Answer the tool call `call_id`.
    pub fn tool_result(&mut self, call_id: &str, content: impl Into<String>) {
        self.turns.push(Turn::Tool(ToolResult {
            call_id: call_id.into(),
            content: content.into(),
        }));
    }

    /// The request the next call sends.
    pub fn request(&self) -> CompletionRequest {
        CompletionRequest {
            model: self.model.clone(),
            turns: self.turns.clone(),
            tools: self.tools.iter().map(Tool::to_wit).collect(),
            tool_choice: self.tool_choice.clone(),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            reasoning_effort: self.reasoning_effort.clone(),
            response_format: self.response_format.as_ref().map(Value::to_string),
        }
    }

    /// Send the conversation through the host's `model.complete`.
    pub fn send(&mut self) -> Result<Reply, ModelError> {
        self.send_with(model::complete)
    }

    /// Send the conversation through `complete` (the host's, or a test's), and keep the
    /// answer as the next assistant turn.
    pub fn send_with(
        &mut self,
        complete: impl FnOnce(&CompletionRequest) -> Result<Completion, ModelError>,
    ) -> Result<Reply, ModelError> {
        let answer = complete(&self.request())?;
        Ok(self.record(answer))
    }

    fn record(&mut self, answer: Completion) -> Reply {
        self.calls += 1;
        self.spent.input_tokens += answer.input_tokens;
        self.spent.output_tokens += answer.output_tokens;
        self.spent.usd += answer.usd;
        self.turns.push(Turn::Assistant(AssistantTurn {
            content: answer.content.clone(),
            tool_calls: answer.tool_calls.clone(),
        }));
        Reply {
            content: answer.content,
            tool_calls: answer
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            finish_reason: answer.finish_reason,
            usage: Usage {
                input_tokens: answer.input_tokens,
                output_tokens: answer.output_tokens,
                usd: answer.usd,
            },
        }
    }

    /// What the calls so far cost, as the host metered each.
    pub fn spent(&self) -> Usage {
        self.spent
    }

    /// How many calls were answered.
    pub fn calls(&self) -> u32 {
        self.calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(content: Option<&str>, calls: &[(&str, &str, &str)], usd: f64) -> Completion {
        Completion {
            content: content.map(str::to_string),
            tool_calls: calls
                .iter()
                .map(|(id, name, args)| model::ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments: args.to_string(),
                })
                .collect(),
            finish_reason: if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .into(),
            input_tokens: 100,
            output_tokens: 10,
            usd,
        }
    }

    #[test]
    fn a_round_trip_keeps_the_turns_in_order_and_adds_up_the_spend() {
        let mut chat = Conversation::new("sys")
            .named_model("proposer")
            .max_tokens(64)
            .reasoning_effort("high")
            .tool(Tool::new("read_file", "Read", json!({"type": "object"})));
        chat.user("go");
        let reply = chat
            .send_with(|req| {
                assert_eq!(req.model.as_deref(), Some("proposer"));
                assert_eq!(req.tools[0].name, "read_file");
                assert_eq!(req.tools[0].parameters, r#"{"type":"object"}"#);
                assert_eq!(req.reasoning_effort.as_deref(), Some("high"));
                Ok(answer(None, &[("c1", "read_file", r#"{"path":"a"}"#)], 0.5))
            })
            .unwrap();
        #[derive(serde::Deserialize)]
        struct Args {
            path: String,
        }
        let args: Args = reply.tool_calls[0].args().unwrap();
        assert_eq!(args.path, "a");
        chat.tool_result("c1", "content");
        let reply = chat
            .send_with(|req| {
                assert_eq!(req.turns.len(), 4);
                assert!(matches!(&req.turns[2], Turn::Assistant(a) if a.tool_calls.len() == 1));
                assert!(matches!(&req.turns[3], Turn::Tool(t) if t.call_id == "c1"));
                Ok(answer(Some("done"), &[], 0.25))
            })
            .unwrap();
        assert_eq!(reply.content.as_deref(), Some("done"));
        assert_eq!(chat.calls(), 2);
        assert_eq!(chat.spent().usd, 0.75);
        assert_eq!(chat.spent().input_tokens, 200);
    }

    #[test]
    fn bad_arguments_name_the_tool_and_an_error_leaves_the_turns_alone() {
        let call = ToolCall {
            id: "c".into(),
            name: "edit".into(),
            arguments: "{not json".into(),
        };
        let err = call.args::<Value>().unwrap_err();
        assert!(
            err.starts_with("the arguments of edit are not valid"),
            "{err}"
        );
        let empty = ToolCall {
            arguments: String::new(),
            ..call
        };
        assert_eq!(empty.args::<Value>().unwrap(), json!({}));

        let mut chat = Conversation::new("sys");
        chat.user("go");
        let err = chat
            .send_with(|_| Err(ModelError::BudgetExhausted))
            .unwrap_err();
        assert!(crate::feedback::model_error(&err).starts_with("model: budget-exhausted"));
        assert_eq!(chat.turns.len(), 2);
        assert_eq!(chat.calls(), 0);
    }
}
