//! What `mutate/coder` costs per tool call, the model excluded: one generation on the
//! terminal seed with the `evolve` binary (the code lives in `host/src/bench/coder.rs`).
//!
//! Run: `cargo bench -p evolve --bench coder [-- --json]`. Needs bubblewrap (the train
//! trials `run_tasks` starts are contained); results are recorded in docs/benchmarks.md.

use std::process::ExitCode;

fn main() -> ExitCode {
    let json = std::env::args().any(|a| a == "--json");
    let work = match tempfile::Builder::new()
        .prefix("evolve-bench-coder")
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
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_evolve"));
    let cost = match evolve::bench::coder::measure(&rt, exe, work.path()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("the coder benchmark failed: {e}");
            eprintln!("kept for inspection: {}", work.keep().display());
            return ExitCode::FAILURE;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&cost).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    let ms = |s: &Option<evolve::bench::stats::Stat>| {
        s.map_or("–".to_string(), |s| {
            format!("{:.3} / {:.3}", s.median_ms, s.p95_ms)
        })
    };
    println!(
        "mutate/coder per tool call (time inside the operator, model excluded; median / P95 ms)"
    );
    println!("| tool | calls | call | tasks overhead |");
    println!("|---|---|---|---|");
    for r in &cost.tools {
        println!(
            "| {} | {} | {} | {} |",
            r.tool,
            r.calls,
            ms(&r.call_ms),
            ms(&r.overhead_ms)
        );
    }
    println!(
        "mutate call {:.1} ms, of which tools {:.1} ms; {} model calls",
        cost.mutate_ms, cost.tools_ms, cost.model_calls
    );
    ExitCode::SUCCESS
}
