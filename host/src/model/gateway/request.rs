//! The agent's chat completion request, checked against the policy and made ready to
//! forward: forwarded as the agent wrote it (messages with tool calls and results,
//! `tools`, `tool_choice`, `temperature`, `response_format`, `reasoning_effort`, …)
//! except that `model` is checked (or set to the default), the token cap is applied and
//! `stream` is removed (the gateway asks upstream for one answer and streams it itself).

use super::config::GatewayPolicy;
use crate::model::budget::{TOKENS_PER_MESSAGE, estimate_tokens};
use crate::model::meter::Outgoing;
use serde_json::{Map, Value, json};

/// A request ready for the meter, with what the gateway needs to answer and log it.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub outgoing: Outgoing,
    /// The model asked for (or the default).
    pub model: String,
    /// `Some` when the agent asked for a stream: whether a usage chunk is wanted.
    pub stream: Option<StreamWanted>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StreamWanted {
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

/// Why a request is not forwarded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rejection {
    /// Not JSON, not an object, no messages, a field of the wrong type: HTTP 400.
    Invalid {
        message: String,
        param: Option<String>,
    },
    /// The model is not in the policy's list: HTTP 403.
    ModelNotAllowed { asked: String },
}

/// The fields the gateway removes: it streams itself, from one upstream answer.
const STREAM_FIELDS: [&str; 2] = ["stream", "stream_options"];
/// The token cap's two spellings (`max_completion_tokens` is the newer, and the only
/// one some reasoning models accept).
const TOKEN_FIELDS: [&str; 2] = ["max_tokens", "max_completion_tokens"];

/// Check `body` (the request's bytes) against `policy` and prepare it.
pub(crate) fn prepare(body: &[u8], policy: &GatewayPolicy) -> Result<Prepared, Rejection> {
    let value: Value = serde_json::from_slice(body).map_err(|e| Rejection::Invalid {
        message: format!("the request body is not JSON ({e})"),
        param: None,
    })?;
    let Value::Object(mut map) = value else {
        return Err(invalid("the request body must be a JSON object", None));
    };
    check_messages(&map)?;
    let model = checked_model(&map, policy)?;
    map.insert("model".into(), Value::String(model.clone()));
    let stream = stream_wanted(&map)?;
    for key in STREAM_FIELDS {
        map.remove(key);
    }
    match map.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(_) => {
            return Err(invalid(
                "n must be 1: the gateway meters and relays one choice per request",
                Some("n"),
            ));
        }
    }
    let max_tokens = cap_tokens(&mut map, policy.max_tokens)?;
    let body = Value::Object(map);
    let input_estimate = estimate_request_tokens(&body);
    Ok(Prepared {
        outgoing: Outgoing {
            body,
            max_tokens,
            input_estimate,
        },
        model,
        stream,
    })
}

fn invalid(message: &str, param: Option<&str>) -> Rejection {
    Rejection::Invalid {
        message: message.to_string(),
        param: param.map(String::from),
    }
}

fn check_messages(map: &Map<String, Value>) -> Result<(), Rejection> {
    let messages = match map.get("messages") {
        None | Some(Value::Null) => {
            return Err(invalid("messages is required", Some("messages")));
        }
        Some(Value::Array(m)) => m,
        Some(_) => return Err(invalid("messages must be a list", Some("messages"))),
    };
    if messages.is_empty() {
        return Err(invalid("messages must not be empty", Some("messages")));
    }
    for (i, m) in messages.iter().enumerate() {
        if !m.get("role").is_some_and(Value::is_string) {
            return Err(Rejection::Invalid {
                message: format!("messages[{i}] must be an object with a string `role`"),
                param: Some(format!("messages[{i}]")),
            });
        }
    }
    Ok(())
}

fn checked_model(map: &Map<String, Value>, policy: &GatewayPolicy) -> Result<String, Rejection> {
    let model = match map.get("model") {
        None | Some(Value::Null) => return Ok(policy.default_model().to_string()),
        Some(Value::String(m)) => m.trim().to_string(),
        Some(_) => return Err(invalid("model must be a string", Some("model"))),
    };
    if model.is_empty() {
        return Ok(policy.default_model().to_string());
    }
    if policy.allowed_models.contains(&model) {
        Ok(model)
    } else {
        Err(Rejection::ModelNotAllowed { asked: model })
    }
}

fn stream_wanted(map: &Map<String, Value>) -> Result<Option<StreamWanted>, Rejection> {
    let stream = match map.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(invalid("stream must be true or false", Some("stream"))),
    };
    let include_usage = match map.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(invalid(
                    "stream_options.include_usage must be true or false",
                    Some("stream_options"),
                ));
            }
        },
        Some(_) => {
            return Err(invalid(
                "stream_options must be an object",
                Some("stream_options"),
            ));
        }
    };
    Ok(stream.then_some(StreamWanted { include_usage }))
}

/// Lower each token field the request gives to `cap` (set `max_tokens` to it when it
/// gives neither); the most the answer may use.
fn cap_tokens(map: &mut Map<String, Value>, cap: u32) -> Result<u32, Rejection> {
    let mut most = None;
    for key in TOKEN_FIELDS {
        match map.get(key) {
            None => {}
            Some(Value::Null) => {
                map.remove(key);
            }
            Some(v) => {
                let asked = v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                    invalid(
                        &format!("{key} must be an integer of at least 1"),
                        Some(key),
                    )
                })?;
                let capped = asked.min(u64::from(cap)) as u32;
                map.insert(key.into(), json!(capped));
                most = Some(most.map_or(capped, |m: u32| m.max(capped)));
            }
        }
    }
    Ok(most.unwrap_or_else(|| {
        map.insert("max_tokens".into(), json!(cap));
        cap
    }))
}

/// The prompt's tokens, estimated as the typed path does: ⌈characters / 4⌉ of each
/// message's text (its JSON when it is not plain text: parts, tool calls) plus
/// [`TOKENS_PER_MESSAGE`], and of the `tools` definitions' JSON.
pub(crate) fn estimate_request_tokens(body: &Value) -> u64 {
    let text_tokens = |v: &Value| match v {
        Value::Null => 0,
        Value::String(s) => estimate_tokens(s),
        other => estimate_tokens(&other.to_string()),
    };
    let messages: u64 = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let extra: u64 = ["tool_calls", "name", "tool_call_id"]
                .iter()
                .filter_map(|k| m.get(*k))
                .map(text_tokens)
                .sum();
            text_tokens(m.get("content").unwrap_or(&Value::Null)) + extra + TOKENS_PER_MESSAGE
        })
        .sum();
    messages + body.get("tools").map_or(0, text_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Prices;

    fn policy() -> GatewayPolicy {
        GatewayPolicy {
            allowed_models: vec!["small".into(), "big".into()],
            max_tokens: 100,
            endpoint_digest: "sha256:0".into(),
            prices: Prices::default(),
        }
    }

    fn prep(body: Value) -> Result<Prepared, Rejection> {
        prepare(body.to_string().as_bytes(), &policy())
    }

    fn msgs() -> Value {
        json!([{"role": "user", "content": "abcdefgh"}])
    }

    #[test]
    fn the_body_is_forwarded_as_written_but_for_model_cap_and_stream() {
        let tools = json!([{"type": "function", "function": {"name": "ls", "parameters": {}}}]);
        let p = prep(
            json!({"messages": msgs(), "tools": tools, "tool_choice": "auto",
            "temperature": 0.3, "reasoning_effort": "low", "stream": true,
            "stream_options": {"include_usage": true}, "max_tokens": 5000}),
        )
        .unwrap();
        let b = &p.outgoing.body;
        assert_eq!(b["model"], "small", "the default");
        assert_eq!(b["max_tokens"], 100, "lowered to the cap");
        assert_eq!(p.outgoing.max_tokens, 100);
        assert_eq!((&b["tools"], &b["tool_choice"]), (&tools, &json!("auto")));
        assert_eq!(
            (&b["temperature"], &b["reasoning_effort"]),
            (&json!(0.3), &json!("low"))
        );
        assert!(b.get("stream").is_none() && b.get("stream_options").is_none());
        assert_eq!(
            p.stream,
            Some(StreamWanted {
                include_usage: true
            })
        );
        // 2 + 4 for the message, and the tools' JSON.
        assert_eq!(
            p.outgoing.input_estimate,
            6 + estimate_tokens(&tools.to_string())
        );

        let p = prep(json!({"model": "big", "messages": msgs()})).unwrap();
        assert_eq!((p.model.as_str(), p.stream), ("big", None));
        assert_eq!(p.outgoing.body["max_tokens"], 100, "set when absent");
        let p = prep(json!({"messages": msgs(), "max_completion_tokens": 7})).unwrap();
        assert_eq!(p.outgoing.max_tokens, 7);
        assert!(
            p.outgoing.body.get("max_tokens").is_none(),
            "not added beside it"
        );
    }

    #[test]
    fn bad_requests_are_rejected_with_what_was_expected() {
        let message = |r: Result<Prepared, Rejection>| match r.unwrap_err() {
            Rejection::Invalid { message, .. } => message,
            other => panic!("{other:?}"),
        };
        assert!(message(prepare(b"{not json", &policy())).contains("not JSON"));
        assert!(message(prep(json!([1]))).contains("JSON object"));
        assert!(message(prep(json!({}))).contains("messages is required"));
        assert!(message(prep(json!({"messages": []}))).contains("must not be empty"));
        assert!(message(prep(json!({"messages": [3]}))).contains("messages[0]"));
        assert!(message(prep(json!({"messages": msgs(), "max_tokens": 0}))).contains("at least 1"));
        assert!(message(prep(json!({"messages": msgs(), "n": 2}))).contains("n must be 1"));
        assert!(message(prep(json!({"messages": msgs(), "stream": "yes"}))).contains("stream"));
        assert_eq!(
            prep(json!({"model": "huge", "messages": msgs()})).unwrap_err(),
            Rejection::ModelNotAllowed {
                asked: "huge".into()
            }
        );
    }
}
