//! A scripted OpenAI-compatible chat server on 127.0.0.1 (a test double for a paid API).
//!
//! [`chat_server`]: every answer is `content` with 1,000 prompt and 500 completion tokens.
//! [`scripted_chat`]: a sequence of [`Answer`]s (text and/or tool calls, token counts of
//! their own), with every request body kept for the test to read:
//!
//! ```ignore
//! let chat = scripted_chat(vec![
//!     Answer::call("c1", "read_file", json!({"path": "prompt.md"})),
//!     Answer::text("done").tokens(200, 10),
//! ]);
//! // ... point `model.endpoint` at chat.url, run ...
//! assert_eq!(chat.requests()[1]["messages"][2]["role"], "tool");
//! ```

#![allow(dead_code)]

use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One HTTP/1.1 request as it arrived: its head (request line and headers) and its body.
pub struct Request {
    pub head: String,
    pub body: Vec<u8>,
}

impl Request {
    pub fn is_post(&self) -> bool {
        self.head.starts_with("POST")
    }
}

/// Read one request from `stream` (its head, then `content-length` bytes of body); `None`
/// when the client goes before it is complete.
pub fn read_request(stream: &mut std::net::TcpStream) -> Option<Request> {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut fill = |buf: &mut Vec<u8>| -> Option<()> {
        let n = stream.read(&mut chunk).unwrap_or(0);
        buf.extend_from_slice(&chunk[..n]);
        (n > 0).then_some(())
    };
    let (head_end, len) = loop {
        fill(&mut buf)?;
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            break (end + 4, len);
        }
    };
    while buf.len() < head_end + len {
        fill(&mut buf)?;
    }
    Some(Request {
        head: String::from_utf8_lossy(&buf[..head_end]).into_owned(),
        body: buf[head_end..head_end + len].to_vec(),
    })
}

/// The server's base URL and the number of requests it answered.
pub fn chat_server(content: &'static str) -> (String, Arc<AtomicUsize>) {
    serve(content, None)
}

/// [`chat_server`], except that it never answers the `hold`-th chat completion (counted
/// from 1): it keeps that connection open, a call in flight until its client goes. The
/// count includes the held request once it has arrived.
pub fn chat_server_holding(content: &'static str, hold: usize) -> (String, Arc<AtomicUsize>) {
    serve(content, Some(hold))
}

fn serve(content: &'static str, hold: Option<usize>) -> (String, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut stream in listener.incoming().flatten() {
            let Some(request) = read_request(&mut stream) else {
                continue;
            };
            // Count chat completions only, not the endpoint probe (`GET /models`).
            if request.is_post() {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                if hold == Some(n) {
                    held.push(stream);
                    continue;
                }
            }
            respond(&mut stream, &Answer::text(content).json());
        }
    });
    (url, calls)
}

/// Write `body` as a 200 JSON answer and close.
fn respond(stream: &mut std::net::TcpStream, body: &Value) {
    use std::io::Write;
    let body = body.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// One scripted chat completion: text and/or tool calls, and the usage it reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub content: Option<String>,
    /// (id, function name, arguments as JSON text).
    pub tool_calls: Vec<(String, String, String)>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Answer {
    /// A text answer, with 1,000 prompt and 500 completion tokens.
    pub fn text(content: &str) -> Answer {
        Answer {
            content: Some(content.to_string()),
            tool_calls: Vec::new(),
            prompt_tokens: 1000,
            completion_tokens: 500,
        }
    }

    /// An answer that is one tool call and no text (`finish_reason: tool_calls`).
    pub fn call(id: &str, name: &str, arguments: Value) -> Answer {
        Answer {
            content: None,
            ..Answer::text("")
        }
        .and_call(id, name, arguments)
    }

    /// This answer with one more tool call.
    pub fn and_call(mut self, id: &str, name: &str, arguments: Value) -> Answer {
        self.tool_calls
            .push((id.into(), name.into(), arguments.to_string()));
        self
    }

    /// This answer reporting other token counts.
    pub fn tokens(mut self, prompt: u64, completion: u64) -> Answer {
        (self.prompt_tokens, self.completion_tokens) = (prompt, completion);
        self
    }

    /// The chat completion body, as OpenAI sends it.
    pub fn json(&self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.tool_calls.is_empty() {
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .map(|(id, name, args)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
                })
                .collect();
        }
        let finish = if self.tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        json!({
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
        })
    }
}

/// A running [`scripted_chat`] server.
pub struct ScriptedChat {
    /// The base URL (`http://127.0.0.1:PORT/v1`), for `model.endpoint`.
    pub url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    script: Arc<Mutex<std::collections::VecDeque<Answer>>>,
}

impl ScriptedChat {
    /// The body of every chat completion request so far, in order (a body that is not
    /// JSON is kept as a string).
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// How many chat completion requests arrived.
    pub fn calls(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    /// Add answers to the script, for a test that learns what to say only after the
    /// server started (e.g. a task name `init` chose).
    pub fn push(&self, answers: Vec<Answer>) {
        self.script.lock().unwrap().extend(answers);
    }
}

/// A server answering its chat completions with `answers` in order; once they run out,
/// the last one again (an empty text if there were none). The endpoint probe
/// (`GET /models`) is answered and not counted.
pub fn scripted_chat(answers: Vec<Answer>) -> ScriptedChat {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    let script = Arc::new(Mutex::new(std::collections::VecDeque::from(answers)));
    let queue = script.clone();
    std::thread::spawn(move || {
        let mut last = Answer::text("");
        for mut stream in listener.incoming().flatten() {
            let Some(request) = read_request(&mut stream) else {
                continue;
            };
            if !request.is_post() {
                respond(&mut stream, &json!({"data": []}));
                continue;
            }
            let body = serde_json::from_slice(&request.body).unwrap_or_else(|_| {
                Value::String(String::from_utf8_lossy(&request.body).into_owned())
            });
            seen.lock().unwrap().push(body);
            if let Some(next) = queue.lock().unwrap().pop_front() {
                last = next;
            }
            respond(&mut stream, &last.json());
        }
    });
    ScriptedChat {
        url,
        requests,
        script,
    }
}

/// A server that answers the endpoint probe (its first request) and then stops
/// listening: a provider that goes away after `evolve run` started. Returns its base URL.
pub fn server_gone_after_probe() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut chunk = [0u8; 4096];
            let _ = stream.read(&mut chunk);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{\"data\":[]}",
            );
        }
        // The listener drops here: every later connection is refused.
    });
    url
}

/// A base URL on 127.0.0.1 where nothing listens (a dead or mistyped endpoint).
pub fn dead_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

/// A recipe `model:` block (YAML flow mapping) for the server at `url`, at $1 per
/// million tokens each way (one answer costs $0.0015).
pub fn model_block(url: &str) -> String {
    format!(
        "{{endpoint: \"{url}\", model: test-model, api_key_env: EVOLVE_TEST_NO_KEY, prices: {{input_per_mtok_usd: 1, output_per_mtok_usd: 1}}}}"
    )
}

/// Run `evolve args` in `dir` (keys under `dir/keys`, the shared component cache) with
/// the model taken from the environment: the server at `url`, no API key. Panics
/// unless it succeeds.
pub fn evolve_with_model(dir: &Path, url: &str, args: &[&str]) -> Output {
    super::cmd::evolve(args)
        .keys(dir.join("keys"))
        .env("EVOLVE_MODEL_ENDPOINT", url)
        .env("EVOLVE_MODEL", "stand-in")
        .env_remove("OPENAI_API_KEY")
        .cwd(dir)
        .ok()
        .output
}
