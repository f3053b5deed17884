//! The six terminal recipes (recipes/terminal/*.yaml) end to end on the local engine: each
//! runs two generations on eight of the terminal seed's tasks, with two scripted
//! OpenAI-compatible servers on 127.0.0.1 standing in for the paid models: one for the
//! operators (`model:`), one for the agent under test (`evaluator.model`, reached through
//! the host's gateway).
//!
//! The agent's model solves a task (it answers with the task's own solution/solve.sh,
//! then submits) when the task is one of three chosen after `init`, one per split, or
//! when the conversation carries a marker the scripted mutator wrote into a prompt file;
//! otherwise it submits at once and the task scores 0. So the genesis scores 0.5 on the
//! gate split, and a child whose mutated prompt reached its trials scores 1.0: scores
//! move only when the mutation arrives. Every instruction carries a canary naming its
//! task; none of a gate or sealed task's may reach the operators' model.

use super::cmd::evolve;
use super::ws::files_under;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The tasks the experiments run: quick ones, of different kinds.
pub(super) const TASKS: [&str; 8] = [
    "csv-to-json",
    "files-release-symlink",
    "files-tar-archive",
    "json-deep-merge",
    "log-top-clients",
    "script-fizzbuzz",
    "text-dedupe-keep-order",
    "text-extract-emails",
];
pub(super) const MARKER: &str = "TERMINAL-MARKER-";
const SUBMIT: &str = "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```\n";

/// A task's canary: its name reversed (so redacting the name cannot hide it).
pub(super) fn canary(task: &str) -> String {
    format!("instr-{}-5c1a", task.chars().rev().collect::<String>())
}

fn seed_file(path: &str) -> String {
    let seed = evolve::builtin::seed("terminal").unwrap();
    let file = seed
        .target
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("the terminal seed has no {path}"));
    String::from_utf8(file.bytes.to_vec()).unwrap()
}

pub(super) type Handler = Box<dyn Fn(&Value, usize) -> String + Send + Sync>;

/// A chat server whose answer is `handler(request body, n)`, `n` counting its chat
/// requests from 1; every body is kept. Answers the endpoint probe (a GET) with an
/// empty model list.
pub(super) struct Chat {
    pub(super) url: String,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Chat {
    pub(super) fn start(handler: Handler) -> Chat {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let handler = Arc::new(handler);
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (handler, log) = (handler.clone(), log.clone());
                std::thread::spawn(move || serve(stream, &handler, &log));
            }
        });
        Chat { url, seen }
    }

    pub(super) fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(mut stream: std::net::TcpStream, handler: &Handler, log: &Mutex<Vec<Value>>) {
    let Some(req) = super::chat::read_request(&mut stream) else {
        return;
    };
    let body = if req.is_post() {
        let request: Value = serde_json::from_slice(&req.body).unwrap();
        let n = {
            let mut log = log.lock().unwrap();
            log.push(request.clone());
            log.len()
        };
        let content = handler(&request, n);
        json!({
            "id": format!("scripted-{n}"),
            "object": "chat.completion",
            "model": request["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 50, "total_tokens": 250},
        })
        .to_string()
    } else {
        json!({"object": "list", "data": []}).to_string()
    };
    let _ = write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

pub(super) fn messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The agent's model: solve a task when it is in `solved` or a marker reached the
/// conversation, else submit at once; submit after the first command.
pub(super) fn agent_model(tasks: PathBuf, solved: Arc<Mutex<BTreeSet<String>>>) -> Handler {
    Box::new(move |request: &Value, _: usize| {
        let messages = messages(request);
        if messages.iter().any(|(role, _)| role == "assistant") {
            return SUBMIT.into();
        }
        let text: String = messages.iter().map(|(_, c)| c.as_str()).collect();
        let Some(task) = TASKS.iter().find(|t| text.contains(&canary(t))) else {
            return SUBMIT.into();
        };
        if !text.contains(MARKER) && !solved.lock().unwrap().contains(*task) {
            return SUBMIT.into();
        }
        let solve = std::fs::read_to_string(tasks.join(task).join("solution/solve.sh")).unwrap();
        format!("I will run the whole fix at once.\n\n```bash\n{solve}\n```\n")
    })
}

/// The operators' model, in the answer format of the recipe's mutate operator; the
/// `n`-th call writes marker `n` into a prompt file.
pub(super) fn mutator(recipe: &'static str) -> Handler {
    Box::new(move |request: &Value, n: usize| {
        let messages = messages(request);
        let marker =
            format!("{MARKER}{n}: before you submit, run one command that checks the result.");
        let system = format!("{}\n{marker}\n", seed_file("prompts/system.md").trim_end());
        match recipe {
            "hill_climb" | "gepa" => {
                let user = &messages.last().unwrap().1;
                let path = user
                    .split("Component to revise: ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .unwrap_or_else(|| panic!("no component named in {user}"));
                let content = match path {
                    "target/prompts/system.md" => system,
                    "target/prompts/instance.md" => {
                        format!(
                            "{}\n{marker}\n",
                            seed_file("prompts/instance.md").trim_end()
                        )
                    }
                    "target/agent.yaml" => format!(
                        "{}\n# {marker}\n",
                        seed_file("agent.yaml").replace("step_limit: 20", "step_limit: 16")
                    ),
                    other => panic!("unexpected component {other}"),
                };
                format!("The agent submits without checking.\n\n`````\n{content}`````\n")
            }
            "aevolve" => format!(
                "The agent never checks its work.\n\n=== FILE: target/prompts/system.md ===\n{system}=== END ===\n"
            ),
            // The edit-block operators. AHE's later turns end the conversation.
            _ if messages.iter().any(|(role, _)| role == "assistant") => "DONE".into(),
            "ahe" => format!(
                "Check before submitting, and fewer wasted steps.\n\n\
                 <<<<<<< WRITE target/prompts/system.md\n{system}>>>>>>> END\n\n\
                 <<<<<<< SEARCH target/agent.yaml\nstep_limit: 20            # model calls before the agent gives up\n\
                 =======\nstep_limit: 16            # model calls before the agent gives up\n>>>>>>> REPLACE\n"
            ),
            "hyperagents" => format!(
                "Check before submitting; keep the policy short.\n\n\
                 <<<<<<< WRITE target/prompts/system.md\n{system}>>>>>>> END\n\n\
                 <<<<<<< WRITE operators/policy.md\nPrefer small, general prompt edits.\n>>>>>>> END\n"
            ),
            "rrsi" => format!(
                "Component: prompt. Expect fewer unchecked submissions.\n\n\
                 <<<<<<< WRITE target/prompts/system.md\n{system}>>>>>>> END\n"
            ),
            other => panic!("no mutation script for {other}"),
        }
    })
}

/// The shipped recipe, narrowed for a test: two generations, the eight tasks under
/// `tasks/`, both models the scripted servers, small train batches.
pub(super) fn recipe(name: &str, operators: &str, agent: &str) -> String {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../recipes/terminal/{name}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let set = |doc: &mut serde_yaml::Value, keys: &[&str], value: serde_yaml::Value| {
        let mut at = doc;
        for key in &keys[..keys.len() - 1] {
            at = at
                .get_mut(*key)
                .unwrap_or_else(|| panic!("{name}: no {keys:?}"));
        }
        at[keys[keys.len() - 1]] = value;
    };
    let yaml = |s: &str| serde_yaml::from_str::<serde_yaml::Value>(s).unwrap();
    set(&mut doc, &["experiment", "max_generations"], yaml("2"));
    set(&mut doc, &["experiment", "budget_usd"], yaml("5"));
    set(&mut doc, &["evaluator", "dataset"], yaml("tasks"));
    set(
        &mut doc,
        &["evaluator", "splits"],
        yaml("{train: 0.5, gate: 0.25, sealed: 0.25, seed: 0}"),
    );
    set(
        &mut doc,
        &["evaluator", "model"],
        yaml(&format!(
            "{{endpoint: \"{agent}\", model: terminal-agent-m, api_key_env: EVOLVE_TEST_NO_KEY, max_tokens: 1024, prices: {{input_per_mtok_usd: 1, output_per_mtok_usd: 1}}}}"
        )),
    );
    set(
        &mut doc,
        &["model"],
        yaml(&format!(
            "{{endpoint: \"{operators}\", model: terminal-op-m, api_key_env: EVOLVE_TEST_NO_KEY, prices: {{input_per_mtok_usd: 1, output_per_mtok_usd: 1}}, timeout_s: 60}}"
        )),
    );
    if doc["operators"]["rollout"]["config"]
        .get("budget_tasks")
        .is_some()
    {
        set(
            &mut doc,
            &["operators", "rollout", "config", "budget_tasks"],
            yaml("2"),
        );
    }
    if name == "ahe" {
        set(
            &mut doc,
            &["operators", "mutate", "config", "trial_tasks"],
            yaml("1"),
        );
    }
    serde_yaml::to_string(&doc).unwrap()
}

fn copy_tree(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for path in files_under(from) {
        let dest = to.join(path.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&path, &dest).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// Run recipe `name` for two generations and check what every terminal recipe must show.
fn two_generations(name: &'static str) {
    let started = std::time::Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let operators = Chat::start(mutator(name));
    let (agent, split) = init_terminal(root, &operators.url, |operators, agent| {
        recipe(name, operators, agent)
    });
    let summary = terminal_run(root, &["run", "ws", "--json"]).ok().json();
    assert_eq!(summary["status"], "complete", "{name}: {summary:#}");
    assert_eq!(summary["genesis_score"], 0.5, "{name}: {summary:#}");

    // Both generations ran; a child whose mutated prompt reached its trials is the
    // champion, at 1.0 on the gate split and on the sealed one (the genesis: 0.5 on each).
    assert_eq!(summary["generations"], 2, "{name}: {summary:#}");
    let marked = agent
        .seen()
        .iter()
        .filter(|r| messages(r).iter().any(|(_, c)| c.contains(MARKER)))
        .count();
    assert!(
        marked > 0,
        "{name}: no trial request carried a mutated prompt's marker"
    );
    assert_eq!(summary["champion_score"], 1.0, "{name}: {summary:#}");
    assert_ne!(summary["champion"], "0", "{name}: {summary:#}");
    assert_eq!(summary["anchor_before"], 0.5, "{name}: {summary:#}");
    assert_eq!(summary["anchor_after"], 1.0, "{name}: {summary:#}");

    // Gate and sealed canaries never reach the operators' model; a train one can.
    let operator_text: String = operators.seen().iter().map(Value::to_string).collect();
    assert!(
        !operators.seen().is_empty(),
        "{name}: the mutator was never called"
    );
    for private in split.gate.iter().chain(&split.sealed) {
        assert!(
            !operator_text.contains(&canary(private)),
            "{name}: the operators' model saw {private}'s instruction"
        );
        assert!(
            !operator_text.contains(private.as_str()),
            "{name}: the operators' model saw the name {private}"
        );
    }
    // The train feedback does reach it, naming the train tasks: the checks above can fail.
    if doc_has_train_rollout(name) {
        assert!(
            split
                .train
                .iter()
                .any(|t| operator_text.contains(&canary(t)) || operator_text.contains(t.as_str())),
            "{name}: no train trial reached the operators' model"
        );
    }
    terminal_run(root, &["verify", "ws"]).ok();
    eprintln!(
        "{name}: two generations in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// `evolve ARGS` in `root`, with the test's keys and no model from the environment.
pub(super) fn terminal_run(root: &Path, args: &[&str]) -> super::cmd::Evolve {
    evolve(args)
        .cwd(root)
        .keys(root.join("keys"))
        .env_remove("EVOLVE_MODEL_ENDPOINT")
        .env_remove("EVOLVE_MODEL")
}

/// The eight tasks (each instruction with its canary) under `root/tasks`, the agent's
/// scripted model, and workspace `root/ws` initialized from the recipe `recipe(operators'
/// url, agent's url)` gives; then one solved task per split, so the genesis scores 0.5 on
/// the two gate tasks. Returns the agent's server and the frozen split.
pub(super) fn init_terminal(
    root: &Path,
    operators: &str,
    recipe: impl FnOnce(&str, &str) -> String,
) -> (Chat, evaluator_harbor::split::Split) {
    let seed = evolve::builtin::seed("terminal").unwrap();
    seed.write_tasks(&root.join("all")).unwrap();
    for task in TASKS {
        copy_tree(&root.join("all").join(task), &root.join("tasks").join(task));
        let instruction = root.join("tasks").join(task).join("instruction.md");
        let text = std::fs::read_to_string(&instruction).unwrap();
        std::fs::write(
            &instruction,
            format!("{}\n\nNote: {}\n", text.trim_end(), canary(task)),
        )
        .unwrap();
    }
    let solved: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let agent = Chat::start(agent_model(root.join("tasks"), solved.clone()));
    std::fs::write(root.join("recipe.yaml"), recipe(operators, &agent.url)).unwrap();
    terminal_run(root, &["init", "ws", "--recipe", "recipe.yaml"]).ok();
    let split = evolve::workspace::Workspace::open(&root.join("ws"))
        .unwrap()
        .task_set
        .split
        .clone();
    for part in [&split.train, &split.gate, &split.sealed] {
        solved.lock().unwrap().insert(part[0].clone());
    }
    (agent, split)
}

fn doc_has_train_rollout(name: &str) -> bool {
    matches!(name, "hill_climb" | "gepa" | "aevolve" | "rrsi")
}

#[test]
fn hill_climb_on_the_terminal_seed() {
    two_generations("hill_climb");
}

#[test]
fn gepa_on_the_terminal_seed() {
    two_generations("gepa");
}

#[test]
fn aevolve_on_the_terminal_seed() {
    two_generations("aevolve");
}

#[test]
fn ahe_on_the_terminal_seed() {
    two_generations("ahe");
}

#[test]
fn hyperagents_on_the_terminal_seed() {
    two_generations("hyperagents");
}

#[test]
fn rrsi_on_the_terminal_seed() {
    two_generations("rrsi");
}
