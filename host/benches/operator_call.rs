//! What one operator invocation costs: cold, cached in memory, cached on disk, and a
//! `python3` subprocess. The same measurement as `evolve bench`'s (`host/src/bench/invoke.rs`).
//!
//! Run: `cargo bench -p evolve --bench operator_call`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let measured = tempfile::tempdir()
        .map_err(|e| format!("cannot create a scratch directory: {e}"))
        .and_then(|work| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the async runtime: {e}"))?;
            evolve::bench::invoke::measure(&rt, work.path(), 50)
        });
    match measured {
        Ok(inv) => {
            evolve::bench::print_invocation(&inv);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("evolve: operator_call bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}
