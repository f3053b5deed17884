//! A mutate operator for the lifecycle tests (test component). `config.action`:
//! - `climb`: write `0.<generation+1>` (capped at 0.9) into `/target/value.txt`;
//! - `write`: write `config.content` to `/target/<config.path>` (with `config.claim:
//!   false`, without naming it in `changed`: the framework reads the tree's actual diff,
//!   so a name the result check would refuse, one with a newline, still reaches the
//!   candidate tree, as it would from a hostile operator);
//! - `symlink`: plant `/target/<config.path>` -> `config.content`;
//! - `none`: change nothing;
//! - `dump`: print every file it can read (under its grants) to stdout, then `climb`;
//! - `operators`: write `config.content` to `/operators/<config.path>`, then `climb`;
//! - `replace_operator`: copy `/target/<config.path>` over `/operators/<config.content>`
//!   (self-editing: the child's own stages load the replacement), then `climb`.
//!
//! - `descend`: write `0.<8-generation>` (a worse score each generation after the first)
//!   into `/target/value.txt` and leave an empty directory `/target/junk/empty`, which a
//!   snapshot does not store (for the checkout-recycling tests).
//!
//! `config.sleep_ms` busy-waits first (a reliably busy mutate for the kill tests).

#[path = "../../attacks.rs"]
mod attacks;

use evolve_operator_sdk::config::{boolean, integer, string};
use evolve_operator_sdk::prelude::*;

pub struct ScriptedMutate;

impl Operator for ScriptedMutate {
    const NAME: &'static str = "scripted_mutate";
    const SUMMARY: &'static str = "Scripted edits for the lifecycle tests (test component).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field("action", string().required())
            .field("path", string())
            .field("content", string())
            .field("sleep_ms", integer().minimum(0.0))
            .field("claim", boolean())
    }
}

fn busy_wait(ms: u64) {
    let start = std::time::Instant::now();
    while start.elapsed().as_millis() < ms as u128 {
        std::hint::spin_loop();
    }
}

fn dump(dir: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let path = p.display().to_string();
        match e.file_type() {
            Ok(t) if t.is_dir() => dump(&path),
            Ok(t) if t.is_file() => {
                if let Ok(text) = std::fs::read_to_string(&p) {
                    println!("== {path}\n{text}");
                }
            }
            _ => println!("== {path} (not a file)"),
        }
    }
}

fn proposal(changed: Vec<String>, note: String) -> Proposal {
    Proposal {
        changed,
        notes: vec![note],
        usage: Usage {
            input_tokens: 0,
            output_tokens: 0,
            usd: 0.0,
        },
    }
}

fn climb(ctx: &Context) -> Result<Proposal, String> {
    let v = ((ctx.generation + 1) as f64 / 10.0).min(0.9);
    std::fs::write("/target/value.txt", format!("{v}\n")).map_err(|e| e.to_string())?;
    Ok(proposal(
        vec!["target/value.txt".into()],
        format!("value -> {v}"),
    ))
}

impl Mutate for ScriptedMutate {
    fn mutate(ctx: &Context, _observation: &Observation) -> Result<Proposal, String> {
        if let Some(ms) = ctx.i64("sleep_ms") {
            busy_wait(ms as u64);
        }
        let path = ctx.str("path").unwrap_or("value.txt").to_string();
        let content = ctx.str("content").unwrap_or("").to_string();
        match ctx.str("action").unwrap_or("") {
            "climb" => climb(ctx),
            "write" => {
                let full = format!("/target/{path}");
                if let Some(dir) = std::path::Path::new(&full).parent() {
                    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
                }
                std::fs::write(&full, &content).map_err(|e| format!("{full}: {e}"))?;
                let claimed = match ctx.bool("claim") {
                    Some(false) => vec![],
                    _ => vec![format!("target/{path}")],
                };
                Ok(proposal(claimed, "wrote".into()))
            }
            "symlink" => {
                attacks::make_symlink(&content, &format!("/target/{path}"))
                    .map_err(|e| e.to_string())?;
                Ok(proposal(
                    vec![format!("target/{path}")],
                    "planted a symlink".into(),
                ))
            }
            "none" => Ok(proposal(vec![], "no change".into())),
            "descend" => {
                let v = (8 - ctx.generation.min(7) as i64) as f64 / 10.0;
                std::fs::write("/target/value.txt", format!("{v}\n")).map_err(|e| e.to_string())?;
                std::fs::create_dir_all("/target/junk/empty").map_err(|e| e.to_string())?;
                Ok(proposal(
                    vec!["target/value.txt".into()],
                    format!("value -> {v}"),
                ))
            }
            "dump" => {
                for d in ["/target", "/feedback", "/scratch", "/operators"] {
                    dump(d);
                }
                climb(ctx)
            }
            "replace_operator" => {
                let bytes = std::fs::read(format!("/target/{path}")).map_err(|e| e.to_string())?;
                std::fs::write(format!("/operators/{content}"), bytes)
                    .map_err(|e| e.to_string())?;
                climb(ctx)
            }
            "operators" => {
                std::fs::write(format!("/operators/{path}"), &content)
                    .map_err(|e| e.to_string())?;
                climb(ctx)
            }
            other => Err(format!("unknown action {other:?}")),
        }
    }
}

evolve_operator_sdk::export!(mutate: ScriptedMutate);
