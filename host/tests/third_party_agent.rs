//! A third-party agent, unchanged: mini-swe-agent from PyPI is the agent under test on
//! the local engine (bubblewrap-contained trials), reaching its model through the host's
//! gateway. The candidate tree is `examples/mini-swe-agent/`: `agent.toml` and mini's own
//! `mini.yaml`, nothing else. `mutate/reflective` rewrites `mini.yaml` for two
//! generations; one scripted chat server on 127.0.0.1 plays both the mutator's model and
//! the agent's. The agent's model solves a task only once the evolved system template asks
//! it to verify its work, so the score moves from 0 to 1, and the mutated text is seen in
//! the next generations' agent requests.
//!
//! The venv comes from `host/tests/mini-swe-agent-setup.sh` (`.ci/run` runs it). Under
//! CI=true a missing venv fails the test; elsewhere the test says how to install it and
//! passes without running.

use super::cmd::evolve;
use super::ws::{ci, files_under};
use evolve::builtin;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const VENV: &str = "/usr/local/lib/evolve-ci/mini-swe-agent";
const KEY_VAR: &str = "EVOLVE_TEST_MSWEA_UPSTREAM_KEY";
const KEY: &str = "sk-mswea-canary-51c0e7d2";
/// The terminal-seed tasks the experiment runs (one per split at least).
const TASKS: [&str; 4] = [
    "files-release-symlink",
    "script-fizzbuzz",
    "text-dedupe-keep-order",
    "csv-region-totals",
];
/// The line of `mini.yaml` the mutator rewrites.
const SEED_LINE: &str = "You are a helpful assistant that can interact with a computer shell.";
/// What the evolved system template says; the scripted agent model solves a task only
/// when its system message has it.
const VERIFY: &str = "Verify your result before you submit";

fn candidate() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/mini-swe-agent")
}

/// Whether mini-swe-agent is installed (else the reason the test does not run).
fn installed() -> bool {
    if Path::new(VENV).join("bin/mini").is_file() {
        return true;
    }
    let how = format!(
        "mini-swe-agent is not installed in {VENV}: run `bash host/tests/mini-swe-agent-setup.sh`"
    );
    assert!(!ci(), "{how} (CI=true requires it)");
    eprintln!("skipped: {how}");
    false
}

/// One request the scripted server received.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    body: Value,
}

/// A scripted OpenAI-compatible server whose answer depends on the request (who asks,
/// for which task, at which step), so the trials' order does not matter.
struct Scripted {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    fn start(solutions: Vec<(String, String)>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (log, solutions) = (seen.clone(), Arc::new(solutions));
        let mutations = Arc::new(Mutex::new(0u32));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (log, solutions, mutations) =
                    (log.clone(), solutions.clone(), mutations.clone());
                std::thread::spawn(move || serve(stream, &log, &solutions, &mutations));
            }
        });
        Scripted { port, seen }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn chats(&self) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path.ends_with("/chat/completions"))
            .map(|s| s.body.clone())
            .collect()
    }
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        // litellm may send content as a list of parts.
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The scripted answer to one chat request.
fn reply(body: &Value, solutions: &[(String, String)], mutations: &Mutex<u32>) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let all: String = messages.iter().map(text_of).collect::<Vec<_>>().join("\n");
    if all.contains("target/mini.yaml") {
        // The mutator: the whole file back, with the system template's first line made
        // to ask for verification (and the generation, so each rewrite differs).
        let mut n = mutations.lock().unwrap();
        *n += 1;
        let base = std::fs::read_to_string(candidate().join("mini.yaml")).unwrap();
        let line = format!("You are a careful shell assistant. {VERIFY} (revision {n}).");
        let new = base.replacen(SEED_LINE, &line, 1);
        return format!(
            "The agent submits without checking anything; ask it to verify.\n\n````yaml\n{new}````\n"
        );
    }
    let system = messages.first().map(text_of).unwrap_or_default();
    let answered = messages.iter().any(|m| m["role"] == "assistant");
    if answered {
        return "THOUGHT: The work is done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```\n".into();
    }
    let task = messages.get(1).map(text_of).unwrap_or_default();
    let solve = solutions
        .iter()
        .find(|(instruction, _)| task.contains(instruction.as_str()));
    match solve {
        Some((_, script)) if system.contains(VERIFY) => format!(
            "THOUGHT: I will do the task and check it.\n\n```mswea_bash_command\nbash <<'EOF_SOLVE'\n{script}\nEOF_SOLVE\n```\n"
        ),
        // The seed's prompt: the model only looks around before it submits.
        _ => "THOUGHT: Let me look at the directory first.\n\n```mswea_bash_command\nls -la\n```\n"
            .into(),
    }
}

fn serve(
    stream: TcpStream,
    log: &Mutex<Vec<Seen>>,
    solutions: &[(String, String)],
    n: &Mutex<u32>,
) {
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(30)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.trim_end().split_once(':')
                && k.trim().eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut raw = vec![0; len];
        if reader.read_exact(&mut raw).is_err() {
            return;
        }
        let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        log.lock().unwrap().push(Seen {
            path: path.clone(),
            body: body.clone(),
        });
        let out = if method == "POST" {
            json!({
                "id": "chatcmpl-scripted", "object": "chat.completion", "created": 1700000000,
                "model": body["model"].clone(),
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": reply(&body, solutions, n)}}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70},
            })
        } else {
            json!({"object": "list", "data": []})
        };
        let text = out.to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            text.len()
        );
        let mut w = &stream;
        if w.write_all(head.as_bytes()).is_err() || w.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// The experiment: the candidate tree copied as it ships, four terminal-seed tasks, and a
/// recipe whose mutator and agent both talk to `server`.
fn experiment(server: &Scripted, root: &Path) {
    let seed = builtin::seed("terminal").unwrap();
    seed.write_tasks(&root.join("all")).unwrap();
    std::fs::create_dir_all(root.join("tasks")).unwrap();
    for task in TASKS {
        std::fs::rename(root.join("all").join(task), root.join("tasks").join(task)).unwrap();
    }
    std::fs::create_dir_all(root.join("agent")).unwrap();
    for name in ["agent.toml", "mini.yaml"] {
        std::fs::copy(candidate().join(name), root.join("agent").join(name)).unwrap();
    }
    let recipe = format!(
        "experiment: {{name: mini-swe-agent, max_generations: 2, children_per_gen: 1, seed: 3, budget_usd: 0}}\n\
         target: {{path: agent}}\n\
         surface: {{include: [\"target/mini.yaml\"]}}\n\
         model: {{endpoint: \"{endpoint}\", model: mutator-m, api_key_env: {KEY_VAR}}}\n\
         operators:\n  select: {{operator: greedy}}\n  rollout: {{operator: noop}}\n\
         \x20 mutate: {{operator: reflective, timeout_s: 120, config: {{components: [target/mini.yaml]}}}}\n\
         \x20 gate: {{operator: hillclimb, config: {{strict: true}}}}\n  record: {{operator: notes}}\n\
         evaluator: {{engine: local, dataset: tasks, splits: {{train: 0.25, gate: 0.5, sealed: 0.25, seed: 0}}, \
         n_concurrent: 2, model: {{endpoint: \"{endpoint}\", model: terminal-m, api_key_env: {KEY_VAR}}}}}\n",
        endpoint = server.endpoint(),
    );
    std::fs::write(root.join("recipe.yaml"), recipe).unwrap();
}

#[test]
fn mini_swe_agent_runs_unchanged_and_its_config_evolves_for_two_generations() {
    if !installed() {
        return;
    }
    let seed = builtin::seed("terminal").unwrap();
    let solutions: Vec<(String, String)> = TASKS
        .iter()
        .map(|task| {
            let file = |name: &str| {
                let path = format!("{task}/{name}");
                let f = seed.tasks.iter().find(|f| f.path == path).unwrap();
                String::from_utf8(f.bytes.to_vec()).unwrap()
            };
            // The instruction's first line names the task in mini's instance prompt.
            let instruction = file("instruction.md");
            let first = instruction.lines().find(|l| !l.trim().is_empty()).unwrap();
            (first.trim().to_string(), file("solution/solve.sh"))
        })
        .collect();
    let server = Scripted::start(solutions);
    let tmp = tempfile::tempdir().unwrap();
    experiment(&server, tmp.path());
    let run_evolve = |args: &[&str]| {
        evolve(args)
            .cwd(tmp.path())
            .keys(tmp.path().join("keys"))
            .env(KEY_VAR, KEY)
    };
    run_evolve(&["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let summary = run_evolve(&["run", "ws", "--json"]).ok().json();
    assert_eq!(summary["status"], "complete", "{summary:#}");
    // The seed's config: the model only looks and submits, so nothing is solved; the
    // first rewrite asks for verification and every task is.
    assert_eq!(summary["genesis_score"], 0.0, "{summary:#}");
    assert_eq!(summary["champion_score"], 1.0, "{summary:#}");
    run_evolve(&["verify", "ws"]).ok();

    // The agent's requests: mini's own system template, then the evolved one.
    let chats = server.chats();
    let agent: Vec<&Value> = chats
        .iter()
        .filter(|b| b["model"] == "terminal-m")
        .collect();
    let system = |b: &Value| text_of(&b["messages"][0]);
    assert!(
        agent.iter().any(|b| system(b).starts_with(SEED_LINE)),
        "{agent:#?}"
    );
    for revision in [1, 2] {
        let evolved = format!("{VERIFY} (revision {revision}).");
        assert!(
            agent.iter().any(|b| system(b).contains(&evolved)),
            "generation {revision}'s agent requests carry its mini.yaml: {agent:#?}"
        );
    }
    // Mini's instance template and observation format, unchanged code reading our config.
    assert!(
        agent
            .iter()
            .any(|b| text_of(&b["messages"][1])
                .starts_with("Solve this task in the current directory:")),
        "{agent:#?}"
    );
    assert!(
        agent.iter().any(|b| b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| text_of(m).starts_with("<returncode>0</returncode>"))),
        "{agent:#?}"
    );
    let mutator = chats.iter().filter(|b| b["model"] == "mutator-m").count();
    assert_eq!(mutator, 2, "one rewrite per generation");

    // Each trial left mini's own trajectory in the agent's log directory.
    let files = files_under(&tmp.path().join("ws/runs/evaluations"));
    let trajectories = files
        .iter()
        .filter(|p| p.ends_with("logs/agent/mini.traj.json"))
        .count();
    assert!(trajectories >= TASKS.len(), "{files:#?}");
}
