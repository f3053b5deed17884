//! RSIHub's Table 5 operations, operator invocation and whole generations: the same
//! measurements as `evolve bench` (the code lives in `host/src/bench`).
//!
//! Run: `cargo bench -p evolve --bench overhead [-- --iterations N] [-- --json]`.
//! Results are recorded in docs/benchmarks.md.

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: evolve::bench::BenchArgs,
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench` to every bench binary; the rest are `evolve bench`'s options.
    let argv = std::env::args().filter(|a| a != "--bench");
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    match evolve::bench::run(cli.args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.code)
        }
    }
}
