//! Trajectory-driven analysis end to end on the terminal seed: analyze is bound to
//! `analyze/trace_browser`, `analyze/reflective_dataset` or `analyze/trajectory_judge`, with
//! the scripted chat servers of `terminal_recipes.rs` playing the agent's model and the
//! operators' (the mutator's, and the judge's).
//!
//! The boundary under test: analyze's `/feedback` (`runs/gen-1/analyze-feedback/`) holds
//! the train trials' trajectories only, and no gate or sealed task's name or canary reaches
//! the bundle, analyze's run directory (its result and artifacts), or the operators' model,
//! although the gate evaluation of the same run did leave gate trials' trajectories in the
//! workspace. And the operators produce their evidence from the trajectories.

use super::terminal_recipes::{
    Chat, Handler, canary, init_terminal, mutator, recipe, terminal_run,
};
use super::ws::files_under;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What the scripted judge answers.
const VERDICT: &str = "Each failed trial submitted without running a command. Lesson: check first.";

/// The operators' model: the judge's prompt (its system message) gets [`VERDICT`];
/// anything else is the hill-climb mutator's.
fn operators_model() -> Handler {
    let mutate = mutator("hill_climb");
    Box::new(move |request: &Value, n: usize| {
        let system = request["messages"][0]["content"].as_str().unwrap_or("");
        if system.starts_with("You review the trajectories of a command-line AI agent") {
            return VERDICT.into();
        }
        mutate(request, n)
    })
}

/// One generation of the terminal hill-climb recipe with `analyze` bound as given.
struct Ran {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    split: evaluator_harbor::split::Split,
    operators: Chat,
}

fn run_with_analyze(binding: &str) -> Ran {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let operators = Chat::start(operators_model());
    let (_agent, split) = init_terminal(&root, &operators.url, |operators, agent| {
        let mut doc: serde_yaml::Value =
            serde_yaml::from_str(&recipe("hill_climb", operators, agent)).unwrap();
        doc["experiment"]["max_generations"] = serde_yaml::from_str("1").unwrap();
        doc["operators"]["analyze"] = serde_yaml::from_str(binding).unwrap();
        serde_yaml::to_string(&doc).unwrap()
    });
    let summary = terminal_run(&root, &["run", "ws", "--json"]).ok().json();
    assert_eq!(summary["status"], "complete", "{summary:#}");
    terminal_run(&root, &["verify", "ws"]).ok();
    Ran {
        _tmp: tmp,
        ws: root.join("ws"),
        split,
        operators,
    }
}

fn read(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

impl Ran {
    fn gen1(&self) -> PathBuf {
        self.ws.join("runs/gen-1")
    }

    fn private(&self) -> impl Iterator<Item = &String> {
        self.split.gate.iter().chain(&self.split.sealed)
    }

    /// No private task's name or canary in `text` (named `what`).
    fn assert_public(&self, what: &str, text: &str) {
        for private in self.private() {
            assert!(!text.contains(private.as_str()), "{what} names {private}");
            assert!(
                !text.contains(&canary(private)),
                "{what} holds {private}'s instruction"
            );
        }
    }

    /// The boundary: what analyze was granted and what it produced hold train trials
    /// only, and so does everything the operators' model was sent.
    fn check_boundary(&self) -> Value {
        let bundle = self.gen1().join("analyze-feedback");
        let input = json(&self.gen1().join("analyze/input.json"));
        assert_eq!(input["feedback"], "analyze-feedback/", "{input:#}");
        let index = json(&bundle.join("trajectories/index.json"));
        let listed: Vec<&str> = index
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["task"].as_str().unwrap())
            .collect();
        assert!(!listed.is_empty(), "no train trajectory reached analyze");
        for task in &listed {
            assert!(
                self.split.train.iter().any(|t| t == task),
                "{task} is not a train task"
            );
        }
        let files = files_under(&bundle);
        for path in files
            .iter()
            .chain(&files_under(&self.gen1().join("analyze")))
        {
            self.assert_public(&format!("{path:?}"), &read(path));
        }
        // A train task's canary did reach the bundle: the checks above can fail.
        let all: String = files.iter().map(|p| read(p)).collect();
        assert!(
            self.split.train.iter().any(|t| all.contains(&canary(t))),
            "no train trajectory in the bundle holds its instruction"
        );
        // And a gate trial's trajectory exists in the workspace, outside analyze's reach.
        let gate_trajectory = files_under(&self.ws)
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "trajectory.json"))
            .any(|p| {
                self.split
                    .gate
                    .iter()
                    .any(|g| read(&p).contains(&canary(g)))
            });
        assert!(
            gate_trajectory,
            "the gate evaluation left no trajectory to keep out"
        );

        let sent: String = self.operators.seen().iter().map(Value::to_string).collect();
        assert!(!sent.is_empty(), "the operators' model was never called");
        self.assert_public("a request to the operators' model", &sent);

        let result = json(&self.gen1().join("analyze/result.json"));
        let summary = result["ok"]["summary"].clone();
        assert!(summary.is_object(), "analyze did not succeed: {result:#}");
        summary
    }

    fn scratch(&self, name: &str) -> Value {
        json(&self.gen1().join("analyze/scratch").join(name))
    }
}

#[test]
fn trace_browser_reads_train_trajectories_only_and_finds_where_each_failed() {
    let ran = run_with_analyze("{operator: trace_browser}");
    let summary = ran.check_boundary();
    let traces = summary["traces"].as_array().unwrap();
    assert!(!traces.is_empty(), "a train trial failed: {summary:#}");
    for t in traces {
        // The scripted agent submits at once: its one command is where it went wrong.
        let file = t["trajectory"].as_str().unwrap_or_else(|| panic!("{t:#}"));
        assert!(ran.gen1().join("analyze-feedback").join(file).is_file());
        assert!(t["culprit"]["step_id"].as_u64().is_some(), "{t:#}");
        let extract = t["extract"].as_array().unwrap();
        assert!(extract.iter().any(|s| s["culprit"] == true), "{t:#}");
        assert!(
            extract.iter().any(|s| s["tool_calls"]
                .to_string()
                .contains("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")),
            "{t:#}"
        );
    }
    let full = ran.scratch("trace_browser.json");
    assert_eq!(full["traces"].as_array().unwrap().len(), traces.len());
}

#[test]
fn reflective_dataset_builds_gepa_records_from_train_trajectories() {
    let ran = run_with_analyze(
        "{operator: reflective_dataset, config: {components: [target/prompts/system.md]}}",
    );
    let summary = ran.check_boundary();
    assert_eq!(
        summary["components"],
        serde_json::json!(["target/prompts/system.md"])
    );
    let dataset = ran.scratch("reflective_dataset.json");
    let records = dataset["target/prompts/system.md"].as_array().unwrap();
    assert_eq!(records.len() as u64, summary["records"].as_u64().unwrap());
    // Each record's input is its train task's instruction, read from its trajectory.
    for r in records {
        let task = r["Inputs"]["task_id"]
            .as_str()
            .unwrap()
            .split('#')
            .next()
            .unwrap();
        let instruction = r["Inputs"]["instruction"].as_str().unwrap_or("");
        assert!(instruction.contains(&canary(task)), "{r:#}");
    }
    assert!(
        records.iter().any(|r| r["Feedback"]["outcome"] == "failed"
            && r["Feedback"]["natural_language_feedback"]
                .as_str()
                .unwrap()
                .contains("It went wrong at step")),
        "{records:#?}"
    );
}

#[test]
fn trajectory_judge_is_one_metered_call_over_train_trajectories() {
    let ran = run_with_analyze("{operator: trajectory_judge, config: {max_tokens: 200}}");
    let summary = ran.check_boundary();
    assert_eq!(summary["verdict"], VERDICT, "{summary:#}");
    assert!(summary["usd"].as_f64().unwrap() > 0.0, "{summary:#}");
    let judged: Vec<Value> = ran
        .operators
        .seen()
        .into_iter()
        .filter(|r| r.to_string().contains("You review the trajectories"))
        .collect();
    assert_eq!(judged.len(), 1, "one judge call");
    let prompt = judged[0]["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("<- went wrong"), "{prompt}");
    // Metered: the analyze stage's model log has the call.
    let log = read(&ran.gen1().join("analyze/model/model.jsonl"));
    assert_eq!(log.lines().count(), 1, "{log}");
    let judgement = ran.scratch("trajectory_judge.json");
    assert_eq!(judgement["response"]["content"], VERDICT);
}
