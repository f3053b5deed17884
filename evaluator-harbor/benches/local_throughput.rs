//! Trials per second on the local engine for trivial tasks (oracle agent), at n_concurrent 1
//! and 2. Run: `cargo bench -p evaluator-harbor --bench local_throughput`.
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use evaluator_harbor::agent::AgentSpec;
use evaluator_harbor::engine::contain;
use evaluator_harbor::engine::local::LocalEngine;
use evaluator_harbor::engine::{EvaluationPlan, NoProgress, run_evaluation};

fn main() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let tasks = tmp.path().join("tasks");
    let n_tasks = 20;
    for i in 0..n_tasks {
        let d = tasks.join(format!("trivial-{i:02}"));
        std::fs::create_dir_all(d.join("environment")).unwrap();
        std::fs::create_dir_all(d.join("tests")).unwrap();
        std::fs::create_dir_all(d.join("solution")).unwrap();
        std::fs::write(
            d.join("task.toml"),
            "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n",
        )
        .unwrap();
        std::fs::write(d.join("instruction.md"), "Write 1 to /app/x.\n").unwrap();
        std::fs::write(
            d.join("environment/Dockerfile"),
            "FROM scratch\nWORKDIR /app\n",
        )
        .unwrap();
        std::fs::write(
            d.join("solution/solve.sh"),
            "#!/bin/bash\necho 1 > /app/x\n",
        )
        .unwrap();
        std::fs::write(
            d.join("tests/test.sh"),
            "#!/bin/bash\ncp /app/x /logs/verifier/reward.txt\n",
        )
        .unwrap();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "local engine, oracle agent, {n_tasks} trivial tasks, bubblewrap: {}",
        match contain::bubblewrap() {
            Ok(b) if b.privileged() => "as root, dedicated uids".to_string(),
            Ok(_) => "in a user namespace".to_string(),
            Err(why) => format!("unavailable ({why})"),
        }
    );
    for n in [1usize, 2] {
        let out = tmp.path().join(format!("out-{n}"));
        let mut plan = EvaluationPlan::for_dir(&tasks, AgentSpec::Oracle, out).unwrap();
        plan.n_concurrent = n;
        let engine = Arc::new(LocalEngine::default());
        // Warm-up trial (probe, page cache).
        let _ = rt.block_on(run_evaluation(engine.clone(), &warm(&plan), &NoProgress));
        let start = Instant::now();
        let r = rt.block_on(run_evaluation(engine, &plan, &NoProgress));
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(r.scoreable_trials as usize, n_tasks, "{:?}", r.reason);
        println!(
            "n_concurrent {n}: {n_tasks} trials in {secs:.2} s = {:.1} trials/s ({:.0} ms/trial)",
            n_tasks as f64 / secs,
            secs * 1000.0 / n_tasks as f64
        );
    }
    let _ = Path::new(".");
}

fn warm(plan: &EvaluationPlan) -> EvaluationPlan {
    let mut p = plan.clone();
    p.tasks.truncate(1);
    p.out_dir = p.out_dir.with_extension("warm");
    p
}
