//! The built-in `demo` seed end to end on the local engine: its task set checks and
//! freezes, the oracle scores 1, the seed's own parameters score strictly between 0 and
//! 1, and the true parameters score 1. No Docker, network or model is involved.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use evaluator_harbor::agent::{AgentManifest, AgentSpec};
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::{EvaluationPlan, NoProgress, run_evaluation};
use evaluator_harbor::result::{EvaluationResult, TrialStatus};
use evaluator_harbor::split::{FrozenTaskSet, SplitName, SplitRatios};
use evolve::builtin;

/// The seed materialized as a workspace would hold it: `target/` and `tasks/`.
struct Demo {
    dir: tempfile::TempDir,
    frozen: FrozenTaskSet,
}

impl Demo {
    fn new() -> Demo {
        let seed = builtin::seed("demo").expect("the demo seed is built in");
        let dir = tempfile::tempdir().unwrap();
        seed.write_target(&dir.path().join("target")).unwrap();
        seed.write_tasks(&dir.path().join("tasks")).unwrap();
        let all_train = SplitRatios {
            train: 1.0,
            gate: 0.0,
            sealed: 0.0,
        };
        let frozen = FrozenTaskSet::freeze(&dir.path().join("tasks"), all_train, 7, 1).unwrap();
        Demo { dir, frozen }
    }

    fn target(&self) -> PathBuf {
        self.dir.path().join("target")
    }

    async fn evaluate(&self, agent: AgentSpec, out: &str) -> EvaluationResult {
        let plan = EvaluationPlan::for_split(
            &self.frozen,
            SplitName::Train,
            &self.dir.path().join("tasks"),
            agent,
            self.dir.path().join(out),
        );
        let r = run_evaluation(Arc::new(LocalEngine::default()), &plan, &NoProgress).await;
        for t in &r.trials {
            assert_eq!(
                t.status,
                TrialStatus::BenchmarkComplete,
                "{t:#?}\nagent log: {}",
                std::fs::read_to_string(t.logs.agent_dir.join("agent.txt")).unwrap_or_default()
            );
        }
        let walls: Vec<String> = r
            .trials
            .iter()
            .map(|t| format!("{:.0}", t.wall_time_sec * 1000.0))
            .collect();
        eprintln!(
            "{out}: score {:?}, {} trials in {:.3} s, per trial (ms): {}",
            r.score,
            r.trials.len(),
            r.wall_time_sec,
            walls.join(" ")
        );
        r
    }
}

fn target_agent(dir: &Path) -> AgentSpec {
    AgentSpec::Target(AgentManifest::load(dir).unwrap())
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn the_demo_seed_is_built_in_with_its_files() {
    let seed = builtin::seed("demo").unwrap();
    assert!(builtin::SEEDS.iter().any(|s| s.name == "demo"));
    assert!(builtin::seed("no-such-seed").is_none());
    assert!(!seed.summary.is_empty());
    let target: Vec<&str> = seed.target.iter().map(|f| f.path).collect();
    assert_eq!(target, ["agent.toml", "agent.wasm", "params.json"]);
    let names = seed.task_names();
    assert_eq!(names.len(), 12);
    assert_eq!(names[0], "predict-01");
    let mut paths: Vec<&str> = seed.tasks.iter().map(|f| f.path).collect();
    let sorted = {
        let mut p = paths.clone();
        p.sort_unstable();
        p
    };
    assert_eq!(paths, sorted, "seed files are embedded in path order");
    paths.retain(|p| p.starts_with("predict-01/"));
    assert_eq!(
        paths,
        [
            "predict-01/environment/Dockerfile",
            "predict-01/instruction.md",
            "predict-01/solution/solve.sh",
            "predict-01/task.toml",
            "predict-01/tests/test.sh",
        ]
    );

    // The agent is a component (the component-model layer byte is 1, not a core module's 0).
    let wasm = seed.target.iter().find(|f| f.path == "agent.wasm").unwrap();
    assert_eq!(&wasm.bytes[..4], b"\0asm");
    assert_eq!(wasm.bytes[6..8], [1, 0], "agent.wasm must be a component");

    let d = tempfile::tempdir().unwrap();
    seed.write_target(&d.path().join("t")).unwrap();
    seed.write_tasks(&d.path().join("k")).unwrap();
    assert_eq!(mode(&d.path().join("t/params.json")), 0o644);
    assert_eq!(mode(&d.path().join("k/predict-03/tests/test.sh")), 0o755);
    assert_eq!(
        mode(&d.path().join("k/predict-03/solution/solve.sh")),
        0o755
    );
    assert_eq!(mode(&d.path().join("k/predict-03/task.toml")), 0o644);
    // Writing again over an existing tree is fine and gives the same files.
    seed.write_target(&d.path().join("t")).unwrap();
    let (tasks, problems) = evaluator_harbor::task::discover(&d.path().join("k")).unwrap();
    assert_eq!(tasks.len(), 12, "{problems:?}");
}

#[tokio::test]
async fn the_oracle_scores_one() {
    let demo = Demo::new();
    let r = demo.evaluate(AgentSpec::Oracle, "oracle").await;
    assert_eq!(r.trials.len(), 12);
    assert_eq!(r.score, Some(1.0));
}

#[tokio::test]
async fn the_seed_parameters_score_between_zero_and_one() {
    let demo = Demo::new();
    let r = demo.evaluate(target_agent(&demo.target()), "seed").await;
    let score = r.score.unwrap();
    assert!(score > 0.0 && score < 1.0, "{score}");
    // slope 1, intercept 0 against y = 2x + 3 at x = 1..12: mean of 1 / (1 + ((x+3)/5)^2),
    // each reward rounded to 6 decimals by the verifier.
    assert!((score - 0.269_610_666).abs() < 1e-6, "{score}");
    for t in &r.trials {
        assert_eq!(t.isolation.as_ref().unwrap().filesystem, "wasi_preopens");
        assert!(t.reward.unwrap() > 0.0 && t.reward.unwrap() < 1.0, "{t:#?}");
    }
    let log = std::fs::read_to_string(r.trials[0].logs.agent_dir.join("agent.txt")).unwrap();
    assert!(log.contains("slope = 1, intercept = 0"), "{log}");
}

#[tokio::test]
async fn the_true_parameters_score_one() {
    let demo = Demo::new();
    std::fs::write(
        demo.target().join("params.json"),
        "{\n  \"slope\": 2.0,\n  \"intercept\": 3.0\n}\n",
    )
    .unwrap();
    let r = demo.evaluate(target_agent(&demo.target()), "truth").await;
    assert_eq!(r.score, Some(1.0));
    // A small improvement shows: halfway to the truth scores in between.
    std::fs::write(
        demo.target().join("params.json"),
        "{\n  \"slope\": 1.5,\n  \"intercept\": 1.5\n}\n",
    )
    .unwrap();
    let half = demo.evaluate(target_agent(&demo.target()), "half").await;
    let s = half.score.unwrap();
    assert!(s > 0.3 && s < 1.0, "{s}");
}
