//! `model.complete`: tool calling, pass-through settings and named models, against the
//! scripted chat server on 127.0.0.1 (`support/chat.rs`, a test double for the paid API).

use crate::chat::{Answer, ScriptedChat, scripted_chat};
use evolve::model::{ModelClient, ModelConfig, Prices, named_models_with_env};
use evolve::sandbox::ModelBackend;
use evolve::sandbox::model::{
    AssistantTurn, CompletionRequest, ModelError, Tool, ToolCall, ToolChoice, ToolResult, Turn,
};
use serde_json::{Value, json};
use std::path::Path;

fn config(url: &str) -> ModelConfig {
    let mut c = ModelConfig::new(url, "default-model");
    c.prices = Prices {
        input_per_mtok_usd: 1.0,
        output_per_mtok_usd: 1.0,
    };
    c.max_retries = 0;
    c.timeout_s = 10.0;
    c
}

/// A client for `chat` with a named model `judge` at $10/$20 per million tokens.
fn client(chat: &ScriptedChat) -> ModelClient {
    let base = json!({"endpoint": chat.url, "model": "default-model"});
    let models = json!({"judge": {"model": "judge-model",
        "prices": {"input_per_mtok_usd": 10, "output_per_mtok_usd": 20}}});
    let named = named_models_with_env(&models, &base, |_| None).unwrap();
    ModelClient::with_api_key(config(&chat.url), None)
        .unwrap()
        .with_models(named)
        .unwrap()
}

fn read_tool() -> Tool {
    Tool {
        name: "read_file".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}})
            .to_string(),
    }
}

fn request(turns: Vec<Turn>) -> CompletionRequest {
    CompletionRequest {
        model: None,
        turns,
        tools: vec![read_tool()],
        tool_choice: None,
        max_tokens: Some(100),
        temperature: None,
        reasoning_effort: None,
        response_format: None,
    }
}

fn log_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("model.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[tokio::test]
async fn tools_and_settings_reach_the_provider_and_tool_calls_come_back_parsed() {
    let chat = scripted_chat(vec![
        Answer::call("call_7", "read_file", json!({"path": "prompt.md"})).tokens(300, 40),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let scope = client(&chat).scope(1.0, dir.path().to_path_buf());
    let mut req = request(vec![
        Turn::System("be brief".into()),
        Turn::User("read prompt.md".into()),
    ]);
    req.tool_choice = Some(ToolChoice::Named("read_file".into()));
    req.reasoning_effort = Some("high".into());
    req.response_format = Some(r#"{"type":"json_object"}"#.into());
    let done = scope.complete(req).await.unwrap();
    assert_eq!(done.content, None);
    let calls: Vec<(&str, &str, &str)> = done
        .tool_calls
        .iter()
        .map(|c: &ToolCall| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(calls, [("call_7", "read_file", r#"{"path":"prompt.md"}"#)]);
    assert_eq!(done.finish_reason, "tool_calls");
    assert_eq!((done.input_tokens, done.output_tokens), (300, 40));
    assert!(close(done.usd, 340.0 / 1e6), "{}", done.usd);

    let body = &chat.requests()[0];
    assert_eq!(body["model"], "default-model");
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "read_file"}})
    );
    assert_eq!(body["reasoning_effort"], "high");
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(body["max_tokens"], 100);

    let log = log_lines(dir.path());
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["outcome"], "ok");
    assert_eq!(log[0]["tools"][0]["function"]["name"], "read_file");
    assert_eq!(log[0]["tool_calls"][0]["id"], "call_7");
    assert_eq!(log[0]["reasoning_effort"], "high");
    assert!(log[0].get("named_model").is_none());
}

#[tokio::test]
async fn a_tool_result_goes_back_in_openai_format() {
    let chat = scripted_chat(vec![
        Answer::call("c1", "read_file", json!({"path": "a.md"})),
        Answer::text("the file says hi").tokens(50, 5),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let scope = client(&chat).scope(1.0, dir.path().to_path_buf());
    let mut turns = vec![Turn::User("what does a.md say?".into())];
    let first = scope.complete(request(turns.clone())).await.unwrap();
    turns.push(Turn::Assistant(AssistantTurn {
        content: first.content.clone(),
        tool_calls: first.tool_calls.clone(),
    }));
    turns.push(Turn::Tool(ToolResult {
        call_id: first.tool_calls[0].id.clone(),
        content: "hi".into(),
    }));
    let second = scope.complete(request(turns)).await.unwrap();
    assert_eq!(second.content.as_deref(), Some("the file says hi"));
    assert!(second.tool_calls.is_empty());
    assert_eq!(second.finish_reason, "stop");

    let messages = &chat.requests()[1]["messages"];
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": r#"{"path":"a.md"}"#}}]})
    );
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "c1", "content": "hi"})
    );
    assert_eq!(scope.usage().calls, 2);
    assert!(close(scope.spent_usd(), (1500.0 + 55.0) / 1e6));
}

#[tokio::test]
async fn a_named_model_is_sent_charged_at_its_prices_and_logged() {
    let chat = scripted_chat(vec![Answer::text("verdict: good").tokens(1000, 100)]);
    let dir = tempfile::tempdir().unwrap();
    let scope = client(&chat).scope(1.0, dir.path().to_path_buf());
    let mut req = request(vec![Turn::User("judge this".into())]);
    req.model = Some("judge".into());
    req.tools.clear();
    let done = scope.complete(req).await.unwrap();
    // $10 per million prompt tokens and $20 per million completion tokens.
    assert!(close(done.usd, (10_000.0 + 2_000.0) / 1e6), "{}", done.usd);
    assert!(close(scope.spent_usd(), done.usd));
    assert_eq!(chat.requests()[0]["model"], "judge-model");
    assert!(chat.requests()[0].get("tools").is_none());
    let log = log_lines(dir.path());
    assert_eq!(log[0]["named_model"], "judge");
    assert_eq!(log[0]["model"], "judge-model");
}

#[tokio::test]
async fn malformed_requests_and_unknown_models_never_reach_the_provider() {
    let chat = scripted_chat(vec![]);
    let dir = tempfile::tempdir().unwrap();
    let scope = client(&chat).scope(1.0, dir.path().to_path_buf());
    let user = || vec![Turn::User("hi".into())];
    let cases: Vec<(CompletionRequest, &str)> = vec![
        (request(vec![]), "turns must not be empty"),
        (
            CompletionRequest {
                model: Some("jduge".into()),
                ..request(user())
            },
            "known: judge",
        ),
        (
            CompletionRequest {
                tools: vec![Tool {
                    name: "read file".into(),
                    ..read_tool()
                }],
                ..request(user())
            },
            "is not a tool name",
        ),
        (
            CompletionRequest {
                tools: vec![read_tool(), read_tool()],
                ..request(user())
            },
            "given twice",
        ),
        (
            CompletionRequest {
                tools: vec![Tool {
                    parameters: "[1, 2]".into(),
                    ..read_tool()
                }],
                ..request(user())
            },
            "must be a JSON object text",
        ),
        (
            CompletionRequest {
                tools: vec![Tool {
                    parameters: "{oops".into(),
                    ..read_tool()
                }],
                ..request(user())
            },
            "is not JSON",
        ),
        (
            request(vec![
                Turn::User("hi".into()),
                Turn::Tool(ToolResult {
                    call_id: "nowhere".into(),
                    content: "x".into(),
                }),
            ]),
            "matches no tool call",
        ),
        (
            CompletionRequest {
                tool_choice: Some(ToolChoice::Named("write_file".into())),
                ..request(user())
            },
            "not one of the request's tools",
        ),
        (
            CompletionRequest {
                response_format: Some("\"json\"".into()),
                ..request(user())
            },
            "response-format must be a JSON object text",
        ),
        (
            CompletionRequest {
                reasoning_effort: Some("very high".into()),
                ..request(user())
            },
            "reasoning-effort",
        ),
        (
            request(vec![Turn::Assistant(AssistantTurn {
                content: None,
                tool_calls: vec![],
            })]),
            "needs content or tool calls",
        ),
    ];
    for (req, expected) in cases {
        match scope.complete(req).await {
            Err(ModelError::InvalidRequest(why)) => {
                assert!(why.contains(expected), "{why:?} lacks {expected:?}")
            }
            other => panic!("expected invalid-request ({expected}), got {other:?}"),
        }
    }
    assert_eq!(chat.calls(), 0);
    let log = log_lines(dir.path());
    assert_eq!(log.len(), 11);
    assert!(log.iter().all(|l| l["outcome"] == "invalid_request"));
    assert_eq!(scope.spent_usd(), 0.0);
}

#[tokio::test]
async fn the_budget_applies_to_complete() {
    let chat = scripted_chat(vec![Answer::text("x")]);
    let dir = tempfile::tempdir().unwrap();
    // The judge's worst case for 100 completion tokens is above $0.001 by itself.
    let scope = client(&chat).scope(0.001, dir.path().to_path_buf());
    let mut req = request(vec![Turn::User("judge".into())]);
    req.model = Some("judge".into());
    let err = scope.complete(req).await.unwrap_err();
    assert!(matches!(err, ModelError::BudgetExhausted), "{err:?}");
    assert_eq!(chat.calls(), 0);
    assert_eq!(scope.usage().refused_by_budget, 1);
    let log = log_lines(dir.path());
    assert_eq!(log[0]["outcome"], "budget_exhausted");
    assert_eq!(log[0]["named_model"], "judge");
}

/// A component built against the contract before `complete` existed (its `model` has
/// `chat` only; `tests/components/legacy_chat_mutate`) still loads as a mutate operator,
/// calls `chat` through the host, is metered, and its generation evaluates.
#[test]
fn a_component_built_against_the_chat_only_model_interface_still_runs() {
    use crate::ws::{Exp, Spec, component};
    let (url, calls) = crate::chat::chat_server("0.6");
    let e = Exp::new(&Spec {
        generations: 1,
        budget_usd: 1.0,
        mutate: json!({}),
        model: Some(crate::chat::model_block(&url)),
        ..Spec::default()
    });
    let recipe = std::fs::read_to_string(e.root().join("recipe.yaml")).unwrap();
    std::fs::write(
        e.root().join("recipe.yaml"),
        recipe.replace(
            &component("scripted_mutate").display().to_string(),
            &component("legacy_chat_mutate").display().to_string(),
        ),
    )
    .unwrap();
    e.init();
    e.run_ok(&["run", "ws"]);
    let gen1 = e
        .log()
        .into_iter()
        .find(|r| r["genid"] == "1")
        .expect("generation 1 in the log");
    assert_eq!(gen1["status"], "benchmark_complete", "{gen1:#}");
    assert!(
        (gen1["score"].as_f64().unwrap() - 0.6).abs() < 1e-9,
        "{gen1:#}"
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}
