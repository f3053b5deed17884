//! `evolve keys list|prune`: the private signing keys `evolve init` leaves outside the
//! workspaces (`workspace::keys`), and removing those whose workspace is gone.

use crate::command::{CliResult, print_json};
use crate::display;
use crate::workspace::keys::{self, StoredKey};
use clap::{Args, Subcommand};
use serde_json::{Value, json};
use std::path::Path;
use std::process::ExitCode;

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Every private key: its experiment, the workspace it was made for, whether that still uses it.
    #[command(
        after_help = "Keys live in $EVOLVE_KEY_DIR, else <user data dir>/evolve/keys (~/.local/share/evolve/keys on Linux).\n\nExamples:\n  evolve keys list\n  evolve keys list --json"
    )]
    List(ListArgs),
    /// Remove the private keys of workspaces that no longer exist.
    #[command(
        after_help = "A key whose workspace exists, or whose path exists but cannot be read as a\nworkspace, is never removed. Keys without a record of their workspace (made by an\nolder evolve) are removed only with --include-unknown.\n\nExamples:\n  evolve keys prune --dry-run\n  evolve keys prune\n  evolve keys prune --include-unknown --json"
    )]
    Prune(PruneArgs),
}

#[derive(Args)]
pub struct ListArgs {
    /// Print the keys as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct PruneArgs {
    /// Print what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also remove keys that record no workspace (`unknown workspace` in `evolve keys list`).
    #[arg(long)]
    pub include_unknown: bool,
    /// Print what was removed and kept as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: KeysCommand) -> CliResult {
    match cmd {
        KeysCommand::List(a) => list_cmd(a),
        KeysCommand::Prune(a) => prune_cmd(a),
    }
}

fn key_json(k: &StoredKey) -> Value {
    json!({
        "experiment": k.experiment,
        "key_file": k.key_file,
        "workspace": k.workspace,
        "state": k.state.label(),
        "detail": k.state.describe(),
        "created": k.created,
    })
}

fn list_cmd(a: ListArgs) -> CliResult {
    let (dir, found) = keys::list()?;
    if a.json {
        print_json(&json!({
            "key_dir": dir,
            "keys": found.iter().map(key_json).collect::<Vec<_>>(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} private key(s) in {}",
        found.len(),
        display::text(&dir.display().to_string())
    );
    for k in &found {
        print_key(k);
    }
    let prunable = found.iter().filter(|k| k.state.prunable(false)).count();
    if prunable > 0 {
        println!(
            "{prunable} of them belong to deleted workspaces: `evolve keys prune` removes them"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Two lines per key; every value from the store is escaped for the terminal.
fn print_key(k: &StoredKey) {
    let workspace = k.workspace.as_deref().map_or_else(
        || "unknown workspace".to_string(),
        |w| display::text(&w.display().to_string()).into_owned(),
    );
    println!(
        "  {}  created {}",
        display::text(&k.experiment),
        display::text(k.created.as_deref().unwrap_or("-"))
    );
    println!("      {workspace}: {}", display::text(&k.state.describe()));
}

fn prune_cmd(a: PruneArgs) -> CliResult {
    let (dir, found) = keys::list()?;
    let (doomed, kept): (Vec<&StoredKey>, Vec<&StoredKey>) = found
        .iter()
        .partition(|k| k.state.prunable(a.include_unknown));
    let mut removed = Vec::new();
    let mut failed = Vec::new();
    for k in &doomed {
        if a.dry_run {
            removed.push(*k);
            continue;
        }
        match keys::remove(k) {
            Ok(()) => removed.push(*k),
            Err(e) => failed.push((*k, e.what)),
        }
    }
    let unknown = kept
        .iter()
        .filter(|k| matches!(k.state, keys::KeyState::Unknown(_)))
        .count();
    if a.json {
        print_json(&json!({
            "ok": failed.is_empty(),
            "key_dir": dir,
            "dry_run": a.dry_run,
            "removed": removed.iter().map(|k| key_json(k)).collect::<Vec<_>>(),
            "kept": kept.iter().map(|k| key_json(k)).collect::<Vec<_>>(),
            "failed": failed.iter().map(|(k, why)| json!({"key": key_json(k), "error": why})).collect::<Vec<_>>(),
        }));
    } else {
        print_prune(&dir, a.dry_run, &removed, &failed, kept.len(), unknown);
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_prune(
    dir: &Path,
    dry_run: bool,
    removed: &[&StoredKey],
    failed: &[(&StoredKey, String)],
    kept: usize,
    unknown: usize,
) {
    let verb = if dry_run { "would remove" } else { "removed" };
    for k in removed {
        println!(
            "{verb} {} ({})",
            display::text(&k.key_file.display().to_string()),
            display::text(&k.state.describe())
        );
    }
    for (k, why) in failed {
        eprintln!(
            "evolve: could not remove {}: {}",
            display::text(&k.key_file.display().to_string()),
            display::text(why)
        );
    }
    println!(
        "{verb} {} key(s), kept {kept} in {}",
        removed.len(),
        display::text(&dir.display().to_string())
    );
    if unknown > 0 {
        println!(
            "{unknown} key(s) record no workspace; `evolve keys list` shows them, `--include-unknown` removes them"
        );
    }
}
