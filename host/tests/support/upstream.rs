//! A scripted OpenAI-compatible upstream on 127.0.0.1 (the test double for a paid API)
//! that the model gateway's tests forward to: each request takes the next scripted
//! reply (once the script runs out, a plain answer), and every request is recorded.
//! Replies can carry tool calls, fail with any status, send garbage or a huge body,
//! answer slowly, or wait until the test opens a gate.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One scripted reply.
#[derive(Clone)]
pub enum Reply {
    /// 200 with a chat completion: `content`, optional tool calls, optional usage as
    /// (prompt, completion) tokens.
    Ok {
        content: Option<String>,
        tool_calls: Option<Value>,
        usage: Option<(u64, u64)>,
    },
    /// Any status with a JSON body.
    Status(u16, Value),
    /// 200 whose body is not JSON.
    Garbage,
    /// 200 with a body of this many bytes (above the client's limit: "too large").
    Huge(usize),
    /// Wait this long, then answer with the inner reply (or never, when the client left).
    Slow(Duration, Box<Reply>),
    /// Wait until [`Upstream::open_gate`], then answer with the inner reply.
    Gated(Box<Reply>),
    /// An error whose message repeats the `Authorization` header it received.
    EchoAuth(u16),
}

pub fn answer(content: &str, usage: (u64, u64)) -> Reply {
    Reply::Ok {
        content: Some(content.into()),
        tool_calls: None,
        usage: Some(usage),
    }
}

pub fn status(code: u16) -> Reply {
    Reply::Status(
        code,
        json!({"error": {"message": format!("scripted {code}"), "type": "scripted"}}),
    )
}

/// One request as the upstream received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

pub struct Upstream {
    pub port: u16,
    script: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Upstream {
    pub fn start(script: Vec<Reply>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Upstream {
            port,
            script: Arc::new(Mutex::new(VecDeque::from(script))),
            seen: Arc::default(),
            gate: Arc::new((Mutex::new(false), Condvar::new())),
        };
        let (script, seen, gate) = (up.script.clone(), up.seen.clone(), up.gate.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (script, seen, gate) = (script.clone(), seen.clone(), gate.clone());
                std::thread::spawn(move || serve(stream, &script, &seen, &gate));
            }
        });
        up
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Add replies to the script.
    pub fn push(&self, replies: Vec<Reply>) {
        self.script.lock().unwrap().extend(replies);
    }

    /// Let every [`Reply::Gated`] reply go, now and later.
    pub fn open_gate(&self) {
        let (open, cv) = &*self.gate;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }

    /// Wait until `n` requests arrived (at most 10 s).
    pub fn wait_for(&self, n: usize) {
        let start = Instant::now();
        while self.seen.lock().unwrap().len() < n {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the upstream got {} requests, not {n}",
                self.seen.lock().unwrap().len()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn serve(
    stream: TcpStream,
    script: &Mutex<VecDeque<Reply>>,
    seen: &Mutex<Vec<Seen>>,
    gate: &(Mutex<bool>, Condvar),
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    // One request per connection is enough for hyper's pool (`connection: close`), but
    // keep-alive is served too, so the pool's reuse is measured as in production.
    loop {
        let Some(request) = read_request(&mut reader) else {
            return;
        };
        let auth = request.header("authorization").unwrap_or("").to_string();
        let is_chat = request.method == "POST";
        seen.lock().unwrap().push(request);
        let reply = if is_chat {
            script.lock().unwrap().pop_front()
        } else {
            Some(Reply::Status(200, json!({"object": "list", "data": []})))
        };
        let reply = reply.unwrap_or_else(|| answer("default answer", (10, 2)));
        let Some((code, body)) = render(reply, &auth, gate) else {
            return;
        };
        let mut out = &stream;
        let head = format!(
            "HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(&body).is_err() {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Seen> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

/// The status and body of `reply`; `None`: send nothing, close.
fn render(reply: Reply, auth: &str, gate: &(Mutex<bool>, Condvar)) -> Option<(u16, Vec<u8>)> {
    match reply {
        Reply::Ok {
            content,
            tool_calls,
            usage,
        } => {
            let finish = if tool_calls.is_some() { "tool_calls" } else { "stop" };
            let mut message = json!({"role": "assistant", "content": content});
            if let Some(calls) = tool_calls {
                message["tool_calls"] = calls;
            }
            let mut body = json!({
                "id": "chatcmpl-scripted", "object": "chat.completion", "created": 1700000000,
                "model": "upstream-model",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            });
            if let Some((p, c)) = usage {
                body["usage"] =
                    json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c});
            }
            Some((200, body.to_string().into_bytes()))
        }
        Reply::Status(code, body) => Some((code, body.to_string().into_bytes())),
        Reply::Garbage => Some((200, b"{\"choices\": [ this is not json".to_vec())),
        Reply::Huge(n) => Some((200, vec![b' '; n])),
        Reply::Slow(d, inner) => {
            std::thread::sleep(d);
            render(*inner, auth, gate)
        }
        Reply::Gated(inner) => {
            let (open, cv) = gate;
            let mut is_open = open.lock().unwrap();
            while !*is_open {
                is_open = cv.wait(is_open).unwrap();
            }
            drop(is_open);
            render(*inner, auth, gate)
        }
        Reply::EchoAuth(code) => Some((
            code,
            json!({"error": {"message": format!("Incorrect API key provided. You sent `Authorization: {auth}`")}})
                .to_string()
                .into_bytes(),
        )),
    }
}
