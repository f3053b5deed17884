//! `model.complete`: an operator's [`CompletionRequest`] checked and written as an
//! OpenAI chat completions body (turns as `messages`, `tools`, `tool_choice`, the
//! pass-through settings), and the answer's text, tool calls and finish reason read
//! back. The metering is `chat`'s (`super::meter`).

use super::client::Completion as Answered;
use super::gateway::request::estimate_request_tokens;
use super::meter::{LogLine, MeteredModel, Outgoing, capped_max_tokens};
use crate::sandbox::model::{
    Completion, CompletionRequest, ModelError, Tool, ToolCall, ToolChoice, Turn,
};
use serde_json::{Map, Value, json};
use std::collections::HashSet;

impl MeteredModel {
    /// The `complete` path: the request checked (its named model known), written as
    /// OpenAI's body and sent through the same [`run`](Self::run) as `chat`.
    pub(super) async fn call_complete(
        &self,
        request: CompletionRequest,
    ) -> Result<Completion, ModelError> {
        let call = self.next_call();
        let named = request.model.as_deref();
        let (client, problem) = match named {
            None => (&self.client, None),
            Some(name) => match self.client.named(name) {
                Some(c) => (c, None),
                None => {
                    let known = self.client.model_names();
                    let known = if known.is_empty() {
                        "the recipe names none (`models:`)".to_string()
                    } else {
                        format!("known: {}", known.join(", "))
                    };
                    let why = format!(
                        "model `{}` is not one of the recipe's models ({known})",
                        name.escape_debug()
                    );
                    (&self.client, Some(why))
                }
            },
        };
        let config = client.config();
        let mut body = body(&config.model, &request);
        if let Some(why) = problem.or_else(|| check(&request).err()) {
            let line = LogLine {
                call,
                max_tokens: None,
                body: &body,
                client,
                named,
            };
            return Err(self.refuse(&line, why));
        }
        let max_tokens = capped_max_tokens(request.max_tokens, config);
        body["max_tokens"] = json!(max_tokens);
        let input_estimate = estimate_request_tokens(&body);
        let out = Outgoing {
            body,
            max_tokens,
            input_estimate,
        };
        let answer = self.run(call, out, client, named).await?;
        let (content, tool_calls, finish_reason) =
            read_answer(&answer.completion).map_err(ModelError::Failed)?;
        Ok(Completion {
            content,
            tool_calls,
            finish_reason,
            input_tokens: answer.input_tokens,
            output_tokens: answer.output_tokens,
            usd: answer.usd,
        })
    }
}

/// Whether `name` fits OpenAI's function names: `[a-zA-Z0-9_-]{1,64}`.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A JSON object text, parsed; the error names `what`.
fn json_object(text: &str, what: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(format!(
            "{what} must be a JSON object text, not another JSON value"
        )),
        Err(e) => Err(format!("{what} is not JSON ({e})")),
    }
}

/// Every check a request must pass before anything is sent; the first problem found.
pub(crate) fn check(request: &CompletionRequest) -> Result<(), String> {
    if request.turns.is_empty() {
        return Err("turns must not be empty".into());
    }
    if request.max_tokens == Some(0) {
        return Err("max-tokens must be at least 1".into());
    }
    if let Some(t) = request.temperature
        && !(t.is_finite() && (0.0..=2.0).contains(&t))
    {
        return Err("temperature must be between 0 and 2".into());
    }
    let mut names = HashSet::new();
    for (i, tool) in request.tools.iter().enumerate() {
        if !valid_tool_name(&tool.name) {
            return Err(format!(
                "tools[{i}].name `{}` is not a tool name (expected [a-zA-Z0-9_-], 1 to 64 characters)",
                tool.name.escape_debug()
            ));
        }
        if !names.insert(tool.name.as_str()) {
            return Err(format!("tools[{i}].name `{}` is given twice", tool.name));
        }
        json_object(
            &tool.parameters,
            &format!("tools[{i}].parameters (`{}`)", tool.name),
        )?;
    }
    match &request.tool_choice {
        Some(ToolChoice::Named(name)) if !names.contains(name.as_str()) => {
            return Err(format!(
                "tool-choice names `{}`, which is not one of the request's tools",
                name.escape_debug()
            ));
        }
        Some(ToolChoice::Required) if request.tools.is_empty() => {
            return Err("tool-choice `required` needs at least one tool".into());
        }
        _ => {}
    }
    let mut calls = HashSet::new();
    for (i, turn) in request.turns.iter().enumerate() {
        match turn {
            Turn::Assistant(a) => {
                if a.content.is_none() && a.tool_calls.is_empty() {
                    return Err(format!(
                        "turns[{i}]: an assistant turn needs content or tool calls"
                    ));
                }
                for call in &a.tool_calls {
                    if call.id.is_empty() {
                        return Err(format!("turns[{i}]: a tool call has an empty id"));
                    }
                    calls.insert(call.id.as_str());
                }
            }
            Turn::Tool(result) if !calls.contains(result.call_id.as_str()) => {
                return Err(format!(
                    "turns[{i}]: the tool result's call-id `{}` matches no tool call of an earlier assistant turn",
                    result.call_id.escape_debug()
                ));
            }
            _ => {}
        }
    }
    if let Some(effort) = &request.reasoning_effort {
        let ok = (1..=32).contains(&effort.len())
            && effort
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            return Err(format!(
                "reasoning-effort `{}` is not a setting (expected a word such as low, medium, high)",
                effort.escape_debug()
            ));
        }
    }
    if let Some(format) = &request.response_format {
        json_object(format, "response-format")?;
    }
    Ok(())
}

/// The request body for `model`, without `max_tokens` (the meter sets it). Fields the
/// checks reject are written as they are: the body of a refused request is only logged.
pub(crate) fn body(model: &str, request: &CompletionRequest) -> Value {
    let messages: Vec<Value> = request.turns.iter().map(message).collect();
    let mut body = json!({"model": model, "messages": messages});
    if !request.tools.is_empty() {
        body["tools"] = request.tools.iter().map(tool).collect();
    }
    if let Some(choice) = &request.tool_choice {
        body["tool_choice"] = match choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
        };
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(effort) = &request.reasoning_effort {
        body["reasoning_effort"] = json!(effort);
    }
    if let Some(format) = &request.response_format {
        body["response_format"] = serde_json::from_str(format).unwrap_or(json!(format));
    }
    body
}

fn message(turn: &Turn) -> Value {
    match turn {
        Turn::System(text) => json!({"role": "system", "content": text}),
        Turn::User(text) => json!({"role": "user", "content": text}),
        Turn::Assistant(a) => {
            let mut m = json!({"role": "assistant", "content": a.content});
            if !a.tool_calls.is_empty() {
                m["tool_calls"] = a
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect();
            }
            m
        }
        Turn::Tool(r) => json!({"role": "tool", "tool_call_id": r.call_id, "content": r.content}),
    }
}

fn tool(t: &Tool) -> Value {
    let parameters: Value = serde_json::from_str(&t.parameters).unwrap_or(json!({}));
    json!({"type": "function", "function": {
        "name": t.name, "description": t.description, "parameters": parameters}})
}

/// What the answer said: its text (`None` when null, absent or empty), its tool calls
/// and its finish reason (`unknown` when it gave none). A tool call without a name is
/// not one the operator could act on: the answer is refused as malformed.
pub(crate) fn read_answer(
    answer: &Answered,
) -> Result<(Option<String>, Vec<ToolCall>, String), String> {
    let message = answer.message();
    let content = match message.get("content") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    let mut calls = Vec::new();
    for (i, c) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let function = c.get("function");
        let name = function.and_then(|f| f.get("name")).and_then(Value::as_str);
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Err(format!(
                "the provider's answer has a tool call ({i}) without a function name"
            ));
        };
        // Some servers send the arguments as an object rather than its text.
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => "{}".into(),
            Some(other) => other.to_string(),
        };
        let id = match c.get("id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => id.to_string(),
            // An id the operator can echo back, unique in this answer.
            _ => format!("call_{i}"),
        };
        calls.push(ToolCall {
            id,
            name: name.to_string(),
            arguments,
        });
    }
    let finish = answer.json["choices"][0]["finish_reason"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string();
    Ok((content, calls, finish))
}
