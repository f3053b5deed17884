//! Where a terminal-seed evaluation's time goes, at 1, 2 and 4 trials at once (the code
//! lives in `host/src/bench/terminal.rs`).
//!
//! Run: `cargo bench -p evolve --bench terminal [-- --json]`. Needs bubblewrap, root and
//! nsenter (a contained trial reaching the gateway); results are recorded in
//! docs/benchmarks.md.

use std::process::ExitCode;

fn main() -> ExitCode {
    let json = std::env::args().any(|a| a == "--json");
    let work = match tempfile::Builder::new()
        .prefix("evolve-bench-terminal")
        .tempdir()
    {
        Ok(w) => w,
        Err(e) => {
            eprintln!("cannot create the benchmark's scratch directory: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match evolve::command::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}", e.what);
            return ExitCode::FAILURE;
        }
    };
    let split = match evolve::bench::terminal::measure(&rt, work.path()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("the terminal benchmark failed: {e}");
            eprintln!("kept for inspection: {}", work.keep().display());
            return ExitCode::FAILURE;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&split).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    if let Some(why) = &split.why {
        println!("not measured: {why}");
        return ExitCode::SUCCESS;
    }
    println!(
        "{} terminal-seed tasks, the seed's agent against a scripted model (sums over trials, s)",
        split.tasks
    );
    println!("| n_concurrent | wall | Σ trials | agent | model | verifier | framework | calls |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &split.rows {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {} |",
            r.n_concurrent,
            r.wall_s,
            r.trials_s,
            r.agent_s,
            r.model_s,
            r.verifier_s,
            r.framework_s,
            r.model_calls
        );
    }
    ExitCode::SUCCESS
}
