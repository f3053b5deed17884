//! One chat completion relayed as OpenAI's server-sent events: the gateway asks
//! upstream for a single (non-streaming) answer, meters it, and streams it to an agent
//! that asked for `stream: true`, so the meter always sees the provider's usage.
//!
//! Per choice: a chunk with the role, then one each for `reasoning_content`, `content`
//! and `refusal` when present, one per tool call (its id, name and whole arguments),
//! and a chunk with `finish_reason`; then, when `stream_options.include_usage` was
//! asked, a chunk with no choices and the usage; then `data: [DONE]`.

use serde_json::{Map, Value, json};

/// The whole event stream for `completion`. `usage` is the metered (prompt, completion)
/// tokens, sent when the provider's answer carries no usage of its own.
pub(crate) fn events(completion: &Value, include_usage: bool, usage: (u64, u64)) -> String {
    let head = Head::of(completion);
    let mut out = String::new();
    let choices = completion["choices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, choice) in choices.iter().enumerate() {
        let index = choice
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(i as u64);
        for delta in deltas(&choice["message"]) {
            push(
                &mut out,
                &head.chunk(json!([{"index": index, "delta": delta, "finish_reason": null}])),
            );
        }
        let finish = choice
            .get("finish_reason")
            .filter(|f| f.is_string())
            .cloned()
            .unwrap_or_else(|| json!("stop"));
        push(
            &mut out,
            &head.chunk(json!([{"index": index, "delta": {}, "finish_reason": finish}])),
        );
    }
    if include_usage {
        let usage = completion
            .get("usage")
            .filter(|u| u.is_object())
            .cloned()
            .unwrap_or_else(|| {
                json!({"prompt_tokens": usage.0, "completion_tokens": usage.1,
                       "total_tokens": usage.0 + usage.1})
            });
        let mut chunk = head.chunk(json!([]));
        chunk["usage"] = usage;
        push(&mut out, &chunk);
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// What every chunk repeats: the completion's id, time, model and fingerprint.
struct Head(Map<String, Value>);

impl Head {
    fn of(completion: &Value) -> Head {
        let mut head = Map::new();
        let id = completion.get("id").filter(|v| v.is_string()).cloned();
        head.insert("id".into(), id.unwrap_or_else(|| json!("chatcmpl-gateway")));
        head.insert("object".into(), json!("chat.completion.chunk"));
        let created = completion.get("created").filter(|v| v.is_u64()).cloned();
        head.insert("created".into(), created.unwrap_or_else(|| json!(now_s())));
        for key in ["model", "system_fingerprint"] {
            if let Some(v) = completion.get(key).filter(|v| !v.is_null()) {
                head.insert(key.into(), v.clone());
            }
        }
        Head(head)
    }

    fn chunk(&self, choices: Value) -> Value {
        let mut chunk = self.0.clone();
        chunk.insert("choices".into(), choices);
        Value::Object(chunk)
    }
}

/// The deltas that rebuild `message`, in the order a streaming provider sends them.
fn deltas(message: &Value) -> Vec<Value> {
    let role = message.get("role").filter(|r| r.is_string()).cloned();
    let mut out = vec![json!({"role": role.unwrap_or_else(|| json!("assistant")), "content": ""})];
    for key in ["reasoning_content", "content", "refusal"] {
        if let Some(text) = message
            .get(key)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            out.push(json!({ key: text }));
        }
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for (i, call) in calls.into_iter().flatten().enumerate() {
        let mut call = call.clone();
        if let Some(c) = call.as_object_mut() {
            c.insert("index".into(), json!(i));
        }
        out.push(json!({"tool_calls": [call]}));
    }
    out
}

fn push(out: &mut String, chunk: &Value) {
    out.push_str("data: ");
    out.push_str(&chunk.to_string());
    out.push_str("\n\n");
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `data:` payloads of a stream, `[DONE]` as a string.
    fn chunks(stream: &str) -> Vec<Value> {
        assert!(stream.ends_with("data: [DONE]\n\n"), "{stream}");
        stream
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e
                    .strip_prefix("data: ")
                    .expect("every event is one data line");
                serde_json::from_str(data).unwrap_or_else(|_| json!(data))
            })
            .collect()
    }

    #[test]
    fn content_streams_as_role_content_finish_usage_done() {
        let c = json!({"id": "chatcmpl-1", "created": 7, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}});
        let got = chunks(&events(&c, true, (0, 0)));
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!(
            got[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        assert_eq!(got[1]["choices"][0]["delta"], json!({"content": "hi"}));
        assert_eq!(got[2]["choices"][0]["finish_reason"], "stop");
        assert_eq!(got[3]["choices"], json!([]));
        assert_eq!(got[3]["usage"]["total_tokens"], 4);
        assert_eq!(got[4], json!("[DONE]"));
        for chunk in &got[..4] {
            assert_eq!(
                (&chunk["id"], &chunk["object"]),
                (&json!("chatcmpl-1"), &json!("chat.completion.chunk"))
            );
            assert_eq!(
                (&chunk["created"], &chunk["model"]),
                (&json!(7), &json!("m"))
            );
        }
        // No usage asked: none sent.
        assert_eq!(chunks(&events(&c, false, (0, 0))).len(), 4);
    }

    #[test]
    fn tool_calls_stream_with_their_index_and_metered_usage_fills_in() {
        let call = |id: &str| {
            json!({"id": id, "type": "function",
            "function": {"name": "run", "arguments": "{\"cmd\":\"ls\"}"}})
        };
        let c = json!({"choices": [{"message": {"role": "assistant", "content": null,
            "reasoning_content": "think", "tool_calls": [call("a"), call("b")]},
            "finish_reason": "tool_calls"}]});
        let got = chunks(&events(&c, true, (10, 2)));
        let deltas: Vec<&Value> = got.iter().map(|c| &c["choices"][0]["delta"]).collect();
        assert_eq!(deltas[1], &json!({"reasoning_content": "think"}));
        assert_eq!(deltas[2]["tool_calls"][0]["index"], 0);
        assert_eq!(deltas[3]["tool_calls"][0]["index"], 1);
        assert_eq!(deltas[3]["tool_calls"][0]["id"], "b");
        assert_eq!(
            deltas[3]["tool_calls"][0]["function"]["arguments"],
            "{\"cmd\":\"ls\"}"
        );
        assert_eq!(got[4]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            got[5]["usage"],
            json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12})
        );
        assert!(got[0]["id"].is_string() && got[0]["created"].is_u64());
    }
}
