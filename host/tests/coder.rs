//! `mutate/coder` end to end on the terminal seed (issue 28): a coding agent inside the
//! mutate sandbox, its model played by the scripted chat server (`support/chat.rs`),
//! which answers with tool calls; the agent under test's model is a second scripted
//! server behind the host's gateway. The first test's script reads a prompt, edits it,
//! runs two train tasks and finishes; the second's asks the tools for the archive, a gate
//! task and a `.wasm` write, and each is refused before anything reaches the host.

use crate::chat::{Answer, ScriptedChat, scripted_chat};
use crate::cmd::evolve;
use crate::ws::files_under;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The tasks: quick ones, so two train trials and the evaluations stay short.
const TASKS: [&str; 4] = [
    "csv-to-json",
    "json-deep-merge",
    "script-fizzbuzz",
    "text-extract-emails",
];
const MARKER: &str = "CODER-MARKER-7: before you submit, run one command that checks the result.";
const SUBMIT: &str = "Done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```\n";

/// A task's canary, written into its instruction: its name reversed.
fn canary(task: &str) -> String {
    format!("instr-{}-c0de", task.chars().rev().collect::<String>())
}

fn system_prompt() -> String {
    let seed = evolve::builtin::seed("terminal").unwrap();
    let file = seed
        .target
        .iter()
        .find(|f| f.path == "prompts/system.md")
        .unwrap();
    String::from_utf8(file.bytes.to_vec()).unwrap()
}

/// The agent under test's model: submits at once, always (scores do not matter here).
fn agent_model() -> ScriptedChat {
    scripted_chat(vec![Answer::text(SUBMIT).tokens(100, 20)])
}

struct Lab {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Lab {
    /// The four tasks (each instruction with its canary), and a recipe: the terminal
    /// `ahe` recipe with `mutate/coder` bound, one generation, both models scripted.
    fn new(operators: &ScriptedChat, agent: &ScriptedChat) -> Lab {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let seed = evolve::builtin::seed("terminal").unwrap();
        seed.write_tasks(&root.join("all")).unwrap();
        for task in TASKS {
            let from = root.join("all").join(task);
            for path in files_under(&from) {
                let dest = root
                    .join("tasks")
                    .join(task)
                    .join(path.strip_prefix(&from).unwrap());
                std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
                std::fs::copy(&path, &dest).unwrap();
            }
            let instruction = root.join("tasks").join(task).join("instruction.md");
            let text = std::fs::read_to_string(&instruction).unwrap();
            std::fs::write(&instruction, format!("{text}\nNote: {}\n", canary(task))).unwrap();
        }
        std::fs::write(root.join("recipe.yaml"), recipe(&operators.url, &agent.url)).unwrap();
        Lab { _tmp: tmp, root }
    }

    fn evolve(&self, args: &[&str]) -> crate::cmd::Evolve {
        evolve(args)
            .cwd(&self.root)
            .keys(self.root.join("keys"))
            .env_remove("EVOLVE_MODEL_ENDPOINT")
            .env_remove("EVOLVE_MODEL")
    }

    fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    /// `init`, then the (train, gate, sealed) split it froze.
    fn init(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        self.evolve(&["init", "ws", "--recipe", "recipe.yaml"]).ok();
        let split = evolve::workspace::Workspace::open(&self.ws())
            .unwrap()
            .task_set
            .split
            .clone();
        (split.train, split.gate, split.sealed)
    }
}

fn recipe(operators: &str, agent: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../recipes/terminal/ahe.yaml");
    let mut doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let yaml = |s: &str| serde_yaml::from_str::<serde_yaml::Value>(s).unwrap();
    doc["experiment"]["max_generations"] = yaml("1");
    doc["experiment"]["budget_usd"] = yaml("5");
    doc["evaluator"]["dataset"] = yaml("tasks");
    doc["evaluator"]["splits"] = yaml("{train: 0.5, gate: 0.25, sealed: 0.25, seed: 0}");
    doc["evaluator"]["anchor"] = yaml("{final: false}");
    doc["evaluator"]["model"] = yaml(&format!(
        "{{endpoint: \"{agent}\", model: agent-m, api_key_env: EVOLVE_TEST_NO_KEY, max_tokens: 512, prices: {{input_per_mtok_usd: 1, output_per_mtok_usd: 1}}}}"
    ));
    doc["model"] = yaml(&format!(
        "{{endpoint: \"{operators}\", model: coder-m, api_key_env: EVOLVE_TEST_NO_KEY, prices: {{input_per_mtok_usd: 1, output_per_mtok_usd: 1}}, timeout_s: 60}}"
    ));
    doc["operators"]["mutate"] =
        yaml("{operator: coder, timeout_s: 600, config: {max_turns: 8, max_task_runs: 2}}");
    serde_yaml::to_string(&doc).unwrap()
}

/// The tool results the model got back in `request` (role `tool`), in order.
fn tool_results(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The changed paths of the child `genid` against gen/0, and their new contents.
fn child_changes(ws: &Path, genid: &str) -> Vec<(String, String)> {
    let out = std::process::Command::new("git")
        .args(["diff", "--name-only", "gen/0", &format!("gen/{genid}")])
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|path| {
            let show = std::process::Command::new("git")
                .args(["show", &format!("gen/{genid}:{path}")])
                .current_dir(ws)
                .output()
                .unwrap();
            (
                path.to_string(),
                String::from_utf8_lossy(&show.stdout).into_owned(),
            )
        })
        .collect()
}

#[test]
fn coder_reads_edits_runs_train_tasks_and_finishes_with_exactly_its_edit() {
    let first_line = system_prompt().lines().next().unwrap().to_string();
    let operators = scripted_chat(vec![
        Answer::call(
            "c1",
            "read_file",
            json!({"path": "target/prompts/system.md"}),
        ),
        Answer::call(
            "c2",
            "edit",
            json!({"path": "target/prompts/system.md", "search": first_line,
                   "replace": format!("{first_line}\n{MARKER}")}),
        ),
        Answer::call("c3", "run_tasks", json!({"count": 2})),
        Answer::call(
            "c4",
            "finish",
            json!({"notes": "the agent now checks before submitting"}),
        )
        .tokens(300, 40),
    ]);
    let agent = agent_model();
    let lab = Lab::new(&operators, &agent);
    let (train, gate, sealed) = lab.init();
    let summary = lab.evolve(&["run", "ws", "--json"]).ok().json();
    assert_eq!(summary["status"], "complete", "{summary:#}");

    // The child's diff is exactly the edit.
    let changes = child_changes(&lab.ws(), "1");
    let expected = system_prompt().replacen(&first_line, &format!("{first_line}\n{MARKER}"), 1);
    assert_eq!(
        changes,
        vec![("target/prompts/system.md".to_string(), expected)],
        "the child changed more or less than the edit"
    );

    // Four model calls, each with the tools; each result went back to the next.
    let requests = operators.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    let tools: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"run_tasks") && tools.contains(&"edit"),
        "{tools:?}"
    );
    let results = tool_results(&requests[3]);
    assert!(results[0].contains(&first_line), "{}", results[0]);
    assert!(results[1].contains("replaced 1 line(s)"), "{}", results[1]);
    assert!(results[2].contains("2 trial(s)"), "{}", results[2]);
    for task in &train[..2] {
        assert!(
            results[2].contains(&format!("## {task}#0")),
            "{}",
            results[2]
        );
    }
    // The two train trials ran the edited candidate: its prompt reached the agent's model.
    assert!(
        agent
            .requests()
            .iter()
            .any(|r| r.to_string().contains("CODER-MARKER-7")),
        "the train run did not run the edited prompt"
    );

    // Spend is metered: three calls at 1,500 tokens and one at 340, $1 per million.
    let events: Vec<Value> = std::fs::read_to_string(lab.ws().join(".evolve/archive.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let gen1 = events
        .iter()
        .find(|e| e["type"] == "generation" && e["genid"] == "1")
        .expect("generation 1 archived");
    let operator_usd = 3.0 * 0.0015 + 0.00034;
    let cost = gen1["body"]["cost_usd"].as_f64().unwrap();
    assert!(
        cost >= operator_usd - 1e-9,
        "cost {cost} < the coder's {operator_usd}: {gen1:#}"
    );

    // The conversation is the mutate stage's trajectory in the run directory.
    let traj: Value = serde_json::from_str(
        &std::fs::read_to_string(lab.ws().join("runs/gen-1/mutate/scratch/trajectory.json"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(traj["schema_version"], "ATIF-v1.4");
    assert_eq!(traj["steps"].as_array().unwrap().len(), 6, "{traj:#}");
    assert_eq!(traj["steps"][5]["tool_calls"][0]["function_name"], "finish");
    // The viewer shows it: the generation's mutate row says so, and the stage's
    // trajectory endpoint serves it (the same functions `evolve view` answers with).
    let ws = evolve::workspace::Workspace::open(&lab.ws()).unwrap();
    let audit = evolve::viewer::data::audit(&ws);
    let generation = evolve::viewer::data::generation(&ws, &audit, "1").unwrap();
    let mutate = generation["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["stage"] == "mutate")
        .unwrap();
    assert_eq!(mutate["trajectory"], true, "{mutate:#}");
    let shown = evolve::viewer::data::stage_trajectory(&ws, &audit, "1", "mutate").unwrap();
    assert_eq!(shown["available"], true, "{shown:#}");
    assert_eq!(shown["counts"]["tool_calls"], 4, "{shown:#}");
    let none = evolve::viewer::data::stage_trajectory(&ws, &audit, "1", "gate").unwrap();
    assert_eq!(none["available"], false, "{none:#}");
    assert!(evolve::viewer::data::stage_trajectory(&ws, &audit, "1", "../scratch").is_err());

    // No gate or sealed task reached the operators' model; train ones did.
    let seen: String = requests.iter().map(Value::to_string).collect();
    for private in gate.iter().chain(&sealed) {
        assert!(
            !seen.contains(private.as_str()),
            "the coder's model saw {private}"
        );
        assert!(
            !seen.contains(&canary(private)),
            "the coder's model saw {private}'s instruction"
        );
    }
    assert!(seen.contains(train[0].as_str()));
    lab.evolve(&["verify", "ws"]).ok();
}

#[test]
fn hostile_tool_calls_are_refused_and_never_reach_the_host() {
    let operators = scripted_chat(vec![]);
    let agent = agent_model();
    let lab = Lab::new(&operators, &agent);
    let (_, gate, sealed) = lab.init();
    let archive_before = std::fs::read(lab.ws().join(".evolve/archive.jsonl")).unwrap();
    operators.push(vec![
        Answer::call(
            "h1",
            "read_file",
            json!({"path": "../.evolve/archive.jsonl"}),
        )
        .and_call("h2", "read_file", json!({"path": ".evolve/archive.jsonl"}))
        .and_call("h3", "run_tasks", json!({"tasks": [gate[0]]}))
        .and_call("h4", "read_trajectory", json!({"task": sealed[0]}))
        .and_call(
            "h5",
            "write_file",
            json!({"path": "target/agent.wasm", "content": "\0asm"}),
        )
        .and_call("h6", "list_dir", json!({"path": "/evaluator"})),
        Answer::call("h7", "finish", json!({"notes": "nothing allowed"})),
    ]);
    let out = lab.evolve(&["run", "ws", "--json"]).output().unwrap();
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(summary["status"], "complete", "{}", crate::ws::text(&out));

    let requests = operators.requests();
    let results = tool_results(&requests[1]);
    assert_eq!(results.len(), 6, "{results:#?}");
    for result in &results {
        assert!(result.starts_with("error: "), "{result}");
    }
    assert!(
        results[0].contains("not a clean relative path"),
        "{}",
        results[0]
    );
    assert!(results[1].contains("framework state"), "{}", results[1]);
    assert!(results[2].contains("not a train task"), "{}", results[2]);
    assert!(results[3].contains("not a train task"), "{}", results[3]);
    assert!(results[4].contains(".wasm"), "{}", results[4]);
    assert!(
        results[5].contains("outside what you can read"),
        "{}",
        results[5]
    );
    // The refusal names the train tasks only; nothing of the archive came back.
    let seen: String = requests.iter().map(Value::to_string).collect();
    assert!(
        !seen.contains("\"type\":\"evaluation\""),
        "archive content reached the model"
    );

    // Nothing reached the host: no train trial ran in mutate, the child proposed nothing,
    // and the archive only grew (its first lines are untouched).
    let mutate = lab.ws().join("runs/gen-1/mutate");
    let ran: Vec<PathBuf> = files_under(&mutate)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/train/"))
        .collect();
    assert!(ran.is_empty(), "mutate ran trials: {ran:?}");
    let log = lab.evolve(&["log", "ws", "--json"]).ok().json();
    let gen1 = log
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["genid"] == "1")
        .unwrap();
    assert_eq!(gen1["status"], "no_proposal", "{gen1:#}");
    let archive_after = std::fs::read(lab.ws().join(".evolve/archive.jsonl")).unwrap();
    assert!(archive_after.starts_with(&archive_before));
    lab.evolve(&["verify", "ws"]).ok();
}

/// The four terminal recipes that say how to bind `mutate/coder` (a commented block) check
/// with it bound exactly as the comment says: the comment stays true.
#[test]
fn each_terminal_recipe_binds_the_coder_as_its_comment_says() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["ahe", "gepa", "aevolve", "hyperagents"] {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../recipes/terminal/{name}.yaml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.trim() == "#   mutate:")
            .unwrap_or_else(|| panic!("{name}: no commented coder binding"));
        let block: Vec<String> = lines[start..]
            .iter()
            .take_while(|l| l.starts_with("  #   "))
            .map(|l| format!("  {}", &l["  #   ".len()..]))
            .collect();
        assert!(
            block.iter().any(|l| l.contains("operator: coder")),
            "{name}: {block:?}"
        );
        // The shipped binding (from `  mutate:` to the comment) is replaced by the block.
        let binding = lines.iter().position(|l| *l == "  mutate:").unwrap();
        let mut out: Vec<String> = lines[..binding].iter().map(|l| l.to_string()).collect();
        out.extend(block);
        out.extend(
            lines[start..]
                .iter()
                .skip_while(|l| l.starts_with("  #"))
                .map(|l| l.to_string()),
        );
        let recipe = tmp.path().join(format!("{name}.yaml"));
        std::fs::write(&recipe, out.join("\n")).unwrap();
        assert!(
            !out.iter()
                .any(|l| l.contains("operator: harness") || l.contains("operator: reflective"))
        );
        assert!(out.join("\n").contains("    operator: coder"));
        evolve(["recipe", "check"])
            .arg(&recipe)
            .env("EVOLVE_MODEL_ENDPOINT", "http://127.0.0.1:9/v1")
            .env("EVOLVE_MODEL", "m")
            .ok();
    }
}
