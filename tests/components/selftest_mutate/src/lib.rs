//! The hostile mutate operator of `evolve selftest` (embedded in the binary, never
//! listed, never bindable by name). `config.action` picks what it does; every probe
//! reports each attempt as `<attempt>: denied: <error>` or `BREACH <attempt>: <detail>`
//! (see `attacks.rs`), so the campaign can tell a refusal from an escape.
//!
//! - `climb`: write `0.<generation+1>` (capped at 0.9) into `/target/value.txt`;
//! - `write`: write `config.content` to `/target/<config.path>` (the path may leave
//!   the surface, or the preopen through `..`); an error is the operator's error;
//! - `symlink`: plant `/target/<config.path>` -> `config.content`, then try to read and
//!   append through it;
//! - `pry`: try to read the evaluator, the archive, the receipts and the anchor's
//!   results through every path, print everything it *can* read, then `climb`;
//! - `network`: TCP connect to `127.0.0.1:<config.port>`, listen, UDP, DNS; then `climb`;
//! - `spin`, `sleep`, `memory_bomb`: never return on their own;
//! - `flood`: print `config.flood_kib` KiB to stdout, then `climb`;
//! - `malformed`: `climb`, then return a result the host must refuse
//!   (`config.variant`: `dotdot_path`, `nan_usd`, `huge_note`);
//! - `disable_gate`: break `/operators/gate.wasm` (`config.variant`: `delete`,
//!   `garbage`, `wrong_world`), then `climb`;
//! - `break_operator`: in generation 1 only, break `/operators/<config.path>.wasm`
//!   (a stage name, default `select`) the same ways, then `climb`; in later
//!   generations only `climb`.
//!
//! - `agent_attacks`: turn the candidate's own agent against the host. First plant
//!   `/target/agent.toml` as a link to `config.path` (a host file that exists) and to a
//!   name beside it that does not, and run a train trial through `tasks` each time; then
//!   restore the manifest, write `config.content` as `/target/agent.sh` (a hostile
//!   command agent), run it through `tasks`, and `climb`. Each `tasks` reply is a note.
//!
//! - `fill`: write 1 GiB or 100,000 files past the disk quota (`config.variant`:
//!   `scratch_bytes`, `scratch_files`, `target_bytes`).
//!
//! `config.sleep_ms` busy-waits first, so the campaign can kill a run mid-mutation.

#[path = "../../attacks.rs"]
mod attacks;

use attacks::Report;
use evolve_operator_sdk::config::{integer, string};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::tasks;

pub struct SelftestMutate;

impl Operator for SelftestMutate {
    const NAME: &'static str = "selftest_mutate";
    const SUMMARY: &'static str = "Attacks of the evolve selftest campaign (hostile component).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field("action", string().required())
            .field("path", string())
            .field("content", string())
            .field("variant", string())
            .field("port", integer().minimum(1.0).maximum(65535.0))
            .field("flood_kib", integer().minimum(0.0))
            .field("sleep_ms", integer().minimum(0.0))
    }
}

fn busy_wait(ms: u64) {
    let start = std::time::Instant::now();
    while start.elapsed().as_millis() < ms as u128 {
        std::hint::spin_loop();
    }
}

fn proposal(changed: Vec<String>, notes: Vec<String>) -> Proposal {
    Proposal {
        changed,
        notes,
        usage: Usage {
            input_tokens: 0,
            output_tokens: 0,
            usd: 0.0,
        },
    }
}

/// The honest edit every attack that should still yield a candidate ends with.
fn climb(ctx: &Context, mut notes: Vec<String>) -> Result<Proposal, String> {
    let v = ((ctx.generation + 1) as f64 / 10.0).min(0.9);
    std::fs::write("/target/value.txt", format!("{v}\n")).map_err(|e| e.to_string())?;
    notes.push(format!("value -> {v}"));
    Ok(proposal(vec!["target/value.txt".into()], notes))
}

/// Paths to protected evidence, directly and through every preopen.
const PROTECTED: &[&str] = &[
    "/evaluator/task-set.json",
    "/target/../evaluator/task-set.json",
    "/feedback/../evaluator/task-set.json",
    "/scratch/../../../../evaluator/task-set.json",
    "/target/../.evolve/archive.jsonl",
    "/target/../.evolve/receipts.jsonl",
    "/scratch/../../../../.evolve/archive.jsonl",
    "/scratch/../../../evaluations/anchor/0/attempt-1/result.json",
    "/target/../runs/evaluations/anchor/0/attempt-1/result.json",
    "/.evolve/archive.jsonl",
];

fn pry(ctx: &Context) -> Result<Proposal, String> {
    let mut r = Report::default();
    for path in PROTECTED {
        attacks::try_read(&mut r, path);
    }
    for dir in ["/target/..", "/scratch/../..", "/evaluator"] {
        match attacks::list(dir) {
            Ok(names) => r.breach(&format!("list {dir}"), format!("{names:?}")),
            Err(e) => r.denied(&format!("list {dir}"), e),
        }
    }
    // Everything it *may* read goes to stdout: the campaign scans the run's records for
    // private task names, so a leak through the grants themselves would show up too.
    for dir in ["/target", "/feedback", "/scratch"] {
        dump(dir);
    }
    climb(ctx, r.lines)
}

fn dump(dir: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => dump(&p.display().to_string()),
            Ok(t) if t.is_file() => {
                if let Ok(text) = std::fs::read_to_string(&p) {
                    println!("== {}\n{text}", p.display());
                }
            }
            _ => println!("== {} (not a file)", p.display()),
        }
    }
}

fn symlink(ctx: &Context) -> Result<Proposal, String> {
    let path = ctx
        .str("path")
        .ok_or("config.path is required for symlink")?;
    let dest = ctx
        .str("content")
        .ok_or("config.content is required for symlink")?;
    let link = format!("/target/{path}");
    attacks::make_symlink(dest, &link).map_err(|e| format!("symlink {link}: {e}"))?;
    let mut r = Report::default();
    attacks::try_read(&mut r, &link);
    let what = format!("append through {link}");
    match std::fs::OpenOptions::new().append(true).open(&link) {
        Ok(_) => r.breach(&what, "opened for append"),
        Err(e) => r.denied(&what, e),
    }
    Ok(proposal(vec![format!("target/{path}")], r.lines))
}

fn write(ctx: &Context) -> Result<Proposal, String> {
    let path = ctx.str("path").ok_or("config.path is required for write")?;
    let full = format!("/target/{path}");
    if let Some(dir) = std::path::Path::new(&full).parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&full, ctx.str("content").unwrap_or("")).map_err(|e| format!("{full}: {e}"))?;
    Ok(proposal(
        vec![format!("target/{path}")],
        vec!["wrote".into()],
    ))
}

fn malformed(ctx: &Context) -> Result<Proposal, String> {
    let mut p = climb(ctx, Vec::new())?;
    match ctx.str("variant").unwrap_or("") {
        "dotdot_path" => p.changed = vec!["target/../evaluator/task-set.json".into()],
        "nan_usd" => p.usage.usd = f64::NAN,
        "huge_note" => p.notes = vec!["x".repeat(9 << 20)],
        other => return Err(format!("unknown malformed variant {other:?}")),
    }
    Ok(p)
}

fn disable_gate(ctx: &Context) -> Result<Proposal, String> {
    break_component(ctx, "gate")
}

/// Break `/operators/<stage>.wasm` as `config.variant` says, then `climb`.
fn break_component(ctx: &Context, stage: &str) -> Result<Proposal, String> {
    let file = format!("/operators/{stage}.wasm");
    let done = match ctx.str("variant").unwrap_or("") {
        "delete" => std::fs::remove_file(&file),
        "garbage" => std::fs::write(&file, format!("\0asm {stage} disabled")),
        // A valid component of another world: mutate's own, or select's when mutate's
        // is the one broken.
        "wrong_world" if stage == "mutate" => {
            std::fs::copy("/operators/select.wasm", &file).map(|_| ())
        }
        "wrong_world" => std::fs::copy("/operators/mutate.wasm", &file).map(|_| ()),
        other => return Err(format!("unknown variant {other:?}")),
    };
    done.map_err(|e| format!("{file}: {e}"))?;
    let mut p = climb(ctx, vec![format!("{stage} broken")])?;
    p.changed.push(format!("operators/{stage}.wasm"));
    Ok(p)
}

/// One train trial through the `tasks` capability, as a note: its status, reward and
/// verifier output, or the error.
fn train_trial(label: &str) -> String {
    let first = tasks::train_tasks().into_iter().next();
    let Some(task) = first else {
        return format!("{label}: no train task");
    };
    match tasks::run(&tasks::RunRequest {
        tasks: vec![task],
        repetitions: 1,
    }) {
        Ok(reports) => reports
            .iter()
            .map(|t| {
                format!(
                    "{label}: {:?} reward {:?} output {:?}",
                    t.status, t.reward, t.verifier_output
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => format!("{label}: error {e:?}"),
    }
}

fn agent_attacks(ctx: &Context) -> Result<Proposal, String> {
    let host_file = ctx
        .str("path")
        .ok_or("config.path is required for agent_attacks")?;
    let script = ctx
        .str("content")
        .ok_or("config.content is required for agent_attacks")?;
    let manifest = "/target/agent.toml";
    let honest = std::fs::read(manifest).map_err(|e| format!("{manifest}: {e}"))?;
    let mut notes = Vec::new();
    for (label, dest) in [
        ("link to an existing file", host_file.to_string()),
        ("link to a missing file", format!("{host_file}.missing")),
    ] {
        std::fs::remove_file(manifest).map_err(|e| format!("{manifest}: {e}"))?;
        attacks::make_symlink(&dest, manifest).map_err(|e| format!("symlink {manifest}: {e}"))?;
        notes.push(train_trial(label));
    }
    std::fs::remove_file(manifest).map_err(|e| format!("{manifest}: {e}"))?;
    std::fs::write(manifest, honest).map_err(|e| format!("{manifest}: {e}"))?;
    std::fs::write("/target/agent.sh", script).map_err(|e| format!("agent.sh: {e}"))?;
    notes.push(train_trial("hostile agent"));
    let mut p = climb(ctx, notes)?;
    p.changed.push("target/agent.sh".into());
    Ok(p)
}

/// Write far past the default disk quota (256 MiB, 10,000 files per writable grant):
/// `config.variant` `scratch_bytes` (1 GiB into /scratch), `scratch_files` (100,000
/// files into /scratch) or `target_bytes` (1 GiB into /target). The sandbox must stop
/// it; if it ever returns, it climbs, and the campaign sees the write kept.
fn fill(ctx: &Context) -> Result<Proposal, String> {
    let note = match ctx.str("variant").unwrap_or("scratch_bytes") {
        "scratch_bytes" => attacks::fill_file("/scratch/fill.bin", 1 << 30)?,
        "scratch_files" => attacks::many_files("/scratch", 100_000)?,
        "target_bytes" => attacks::fill_file("/target/fill.bin", 1 << 30)?,
        other => return Err(format!("unknown fill variant {other:?}")),
    };
    climb(ctx, vec![format!("BREACH wrote {note} past the quota")])
}

impl Mutate for SelftestMutate {
    fn mutate(ctx: &Context, _observation: &Observation) -> Result<Proposal, String> {
        if let Some(ms) = ctx.i64("sleep_ms") {
            busy_wait(ms as u64);
        }
        match ctx.str("action").unwrap_or("") {
            "climb" => climb(ctx, Vec::new()),
            "write" => write(ctx),
            "symlink" => symlink(ctx),
            "pry" => pry(ctx),
            "network" => {
                let port = ctx.i64("port").ok_or("config.port is required")?;
                let mut r = Report::default();
                attacks::sockets(&mut r, port as u16);
                climb(ctx, r.lines)
            }
            "spin" => attacks::spin(),
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(3600));
                Err("woke up after an hour".into())
            }
            "memory_bomb" => Err(format!("allocated {} chunks", attacks::memory_bomb())),
            "flood" => {
                let kib = ctx.i64("flood_kib").unwrap_or(4096) as usize;
                attacks::flood_stdout(kib)?;
                climb(ctx, vec![format!("printed {kib} KiB")])
            }
            "malformed" => malformed(ctx),
            "disable_gate" => disable_gate(ctx),
            // Only the first generation's child breaks its operator: the run's later
            // generations show whether it goes on normally.
            "break_operator" if ctx.generation == 1 => {
                break_component(ctx, ctx.str("path").unwrap_or("select"))
            }
            "break_operator" => climb(ctx, vec![]),
            "agent_attacks" => agent_attacks(ctx),
            "fill" => fill(ctx),
            other => Err(format!("unknown action {other:?}")),
        }
    }
}

evolve_operator_sdk::export!(mutate: SelftestMutate);
