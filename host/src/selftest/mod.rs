//! `evolve selftest`: the integrity campaign as a command.
//!
//! Every scenario attacks real workspaces in a temporary directory with the running
//! `evolve` executable, the local engine and the hostile operators embedded in the
//! binary (never listed by `evolve operator list`, never bindable by name); each
//! trial checks that the workspace reaches a valid, attributable state, that no
//! unauthorized change affects an accepted result, that the champion re-evaluates to
//! its certified score, and that `evolve verify` agrees. Kill points and tampering
//! targets are drawn from a seeded random generator whose seed the report prints.
//!
//! The table: scenario, required invariant, trials, correct, median seconds. Exit 0
//! only if every trial held, 1 otherwise. See `docs/selftest.md`.

pub mod checks;
pub mod compare;
pub mod lab;
pub mod scenarios;

use crate::command::{CliError, CliResult, print_json};
use clap::Args;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct SelftestArgs {
    /// Trials per scenario.
    #[arg(long, default_value_t = 3)]
    pub trials: u32,
    /// Seed of the kill points and tampering targets (default: random, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run only these scenarios (repeatable); `--list` names them.
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,
    /// List the scenarios and their invariants, and exit.
    #[arg(long)]
    pub list: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A small deterministic generator (SplitMix64): the campaign's kill points and
/// tampering targets, reproducible from the printed seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0; 0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// The generator of one trial: independent of how many draws other trials made, so
    /// `--seed S --scenario X` repeats X's trials exactly.
    fn for_trial(seed: u64, scenario: &str, trial: u32) -> Rng {
        let mut r = Rng::new(seed);
        for b in scenario.bytes().chain(trial.to_le_bytes()) {
            r.0 ^= u64::from(b);
            r.next_u64();
        }
        r
    }
}

/// One trial's result: the invariant held (with what was checked) or broke (why).
#[derive(Debug, Clone)]
pub enum Verdict {
    Held { detail: String },
    Broken { reason: String },
}

/// One row of the report.
struct Row {
    name: &'static str,
    invariant: &'static str,
    trials: Vec<(Verdict, f64)>,
}

impl Row {
    fn correct(&self) -> usize {
        self.trials
            .iter()
            .filter(|(v, _)| matches!(v, Verdict::Held { .. }))
            .count()
    }

    fn median_seconds(&self) -> f64 {
        let mut s: Vec<f64> = self.trials.iter().map(|(_, secs)| *secs).collect();
        s.sort_by(f64::total_cmp);
        match s.len() {
            0 => 0.0,
            n if n % 2 == 1 => s[n / 2],
            n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        }
    }

    fn to_json(&self) -> Value {
        let trials: Vec<Value> = self
            .trials
            .iter()
            .enumerate()
            .map(|(i, (v, secs))| match v {
                Verdict::Held { detail } => {
                    json!({"trial": i + 1, "held": true, "seconds": secs, "detail": detail})
                }
                Verdict::Broken { reason } => {
                    json!({"trial": i + 1, "held": false, "seconds": secs, "reason": reason})
                }
            })
            .collect();
        json!({
            "scenario": self.name, "invariant": self.invariant, "trials": self.trials.len(),
            "correct": self.correct(), "median_seconds": self.median_seconds(), "results": trials,
        })
    }
}

pub fn selftest_cmd(a: SelftestArgs) -> CliResult {
    if a.list {
        for s in scenarios::SCENARIOS {
            println!("{:<24} {}", s.name, s.invariant);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let chosen = choose(&a.scenarios)?;
    if a.trials == 0 {
        return Err(CliError::usage("--trials must be at least 1"));
    }
    let seed = match a.seed {
        Some(s) => s,
        None => random_seed()?,
    };
    let lab = lab::Lab::new().map_err(CliError::usage)?;
    eprintln!(
        "selftest: {} scenario(s) x {} trial(s), seed {seed}",
        chosen.len(),
        a.trials
    );
    let rows: Vec<Row> = chosen
        .iter()
        .map(|s| run_scenario(&lab, s, seed, a.trials))
        .collect();
    let ok = rows.iter().all(|r| r.correct() == r.trials.len());
    if a.json {
        print_json(&json!({
            "ok": ok, "seed": seed, "trials": a.trials,
            "scenarios": rows.iter().map(Row::to_json).collect::<Vec<_>>(),
        }));
    } else {
        print_table(&rows, seed, ok);
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The scenarios named by `--scenario`, in campaign order; all when none is named.
fn choose(names: &[String]) -> Result<Vec<&'static scenarios::Scenario>, CliError> {
    let all = scenarios::SCENARIOS;
    if let Some(bad) = names.iter().find(|n| all.iter().all(|s| s.name != *n)) {
        let known: Vec<&str> = all.iter().map(|s| s.name).collect();
        return Err(
            CliError::usage(format!("no selftest scenario named `{bad}`"))
                .hint(format!("scenarios: {}", known.join(", "))),
        );
    }
    Ok(all
        .iter()
        .filter(|s| names.is_empty() || names.iter().any(|n| n == s.name))
        .collect())
}

fn random_seed() -> Result<u64, CliError> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)
        .map_err(|e| CliError::usage(format!("cannot draw a random seed: {e}")))?;
    // Small enough to type back in with `--seed`.
    Ok(u64::from_le_bytes(b) % 1_000_000)
}

fn run_scenario(lab: &lab::Lab, s: &scenarios::Scenario, seed: u64, trials: u32) -> Row {
    let mut row = Row {
        name: s.name,
        invariant: s.invariant,
        trials: Vec::new(),
    };
    for trial in 1..=trials {
        let mut ctx = scenarios::Ctx {
            lab,
            rng: Rng::for_trial(seed, s.name, trial),
        };
        let (start, setup) = (Instant::now(), lab.setup_time());
        let verdict = match (s.run)(&mut ctx) {
            Ok(detail) => Verdict::Held { detail },
            Err(reason) => Verdict::Broken { reason },
        };
        // A trial's time, without building the templates it was the first to need.
        let secs = start
            .elapsed()
            .saturating_sub(lab.setup_time() - setup)
            .as_secs_f64();
        lab.sweep();
        match &verdict {
            Verdict::Held { detail } => eprintln!(
                "selftest: {} {trial}/{trials} held ({secs:.1} s): {detail}",
                s.name
            ),
            Verdict::Broken { reason } => eprintln!(
                "selftest: {} {trial}/{trials} BROKEN ({secs:.1} s): {reason}",
                s.name
            ),
        }
        row.trials.push((verdict, secs));
    }
    row
}

fn print_table(rows: &[Row], seed: u64, ok: bool) {
    println!(
        "{:<24} {:<96} {:>6} {:>7} {:>8}",
        "scenario", "required invariant", "trials", "correct", "median s"
    );
    for r in rows {
        println!(
            "{:<24} {:<96} {:>6} {:>7} {:>8.2}",
            r.name,
            r.invariant,
            r.trials.len(),
            r.correct(),
            r.median_seconds()
        );
    }
    for r in rows {
        for (i, (v, _)) in r.trials.iter().enumerate() {
            if let Verdict::Broken { reason } = v {
                println!("BROKEN {} trial {}: {reason}", r.name, i + 1);
            }
        }
    }
    let (trials, correct): (usize, usize) = rows
        .iter()
        .fold((0, 0), |(t, c), r| (t + r.trials.len(), c + r.correct()));
    println!(
        "selftest: {} ({correct}/{trials} trials held; seed {seed})",
        if ok { "ok" } else { "FAIL" }
    );
}
