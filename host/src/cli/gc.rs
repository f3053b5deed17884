//! `evolve gc WS`: drop the run data a finished generation no longer needs.
//!
//! What `verify` and `export` read is never touched: `.git/` (commits, `gen/*` tags and
//! `refs/evolve/proposed/*`, the evaluator tree), `.evolve/` (archive, receipts, champion
//! cache) and everything committed. Under `runs/` only data that is reproducible from
//! those, or only ever a record of work that is over, is removed:
//!
//! - `runs/checkouts/` and `runs/spare/`: checkouts of commits and recycled directories,
//!   written again from the commits when a stage needs them;
//! - `runs/gen-<id>/` (stage inputs, results, logs, scratch, train trials, model logs)
//!   and `runs/evaluations/<purpose>/gen-<id>/` (evaluation checkouts and trials) of
//!   every generation the archive shows finished, except the champion's and gen 0's.
//!
//! Kept: the champion's and the seed's records, every generation that a run would still resume (its
//! trials are reused), anything under `runs/` the archive does not know, and
//! `runs/worktrees/` (`evolve repair` decides about those). The run lock is held
//! throughout, so no run can start meanwhile, and gc refuses while one holds it, or
//! when the workspace does not verify.

use crate::command::{CliError, CliResult, print_json};
use crate::display;
use crate::lifecycle::State;
use crate::lifecycle::child::{Next, next_step};
use crate::workspace::Workspace;
use clap::Args;
use evolve_archive::{LockError, RunLock};
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
#[command(
    after_help = "Removes runs/checkouts, runs/spare, and the runs/gen-<id> and\nruns/evaluations/*/gen-<id> records of finished generations other than the\nchampion and gen 0. Keeps .git (commits, tags, refs/evolve/proposed), .evolve\n(archive, receipts) and everything else `evolve verify` and `evolve export` read.\nRefuses while a run holds the workspace. See docs/cli.md, \"Disk space\".\n\nExamples:\n  evolve gc ws --dry-run     # what would go, and how many bytes\n  evolve gc ws\n  evolve gc ws --json"
)]
pub struct GcArgs {
    /// The workspace (default: the current directory).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// List what would be removed and the bytes it holds; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print what was removed and the bytes freed as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// One directory gc removes, and why.
struct Doomed {
    path: PathBuf,
    why: &'static str,
    bytes: u64,
}

pub fn gc_cmd(a: GcArgs) -> CliResult {
    let ws = Workspace::open(&a.dir)?;
    let _lock = RunLock::acquire(ws.root()).map_err(|e| lock_error(&ws, e))?;
    let doomed = plan(&ws)?;
    let mut freed = 0u64;
    let mut failed = Vec::new();
    for d in &doomed {
        if a.dry_run {
            continue;
        }
        match remove_tree(&d.path) {
            Ok(()) => freed += d.bytes,
            Err(e) => failed.push(format!("{}: {e}", d.path.display())),
        }
    }
    let total: u64 = doomed.iter().map(|d| d.bytes).sum();
    let rel = |p: &Path| p.strip_prefix(ws.root()).unwrap_or(p).display().to_string();
    if a.json {
        print_json(&json!({
            "ok": failed.is_empty(),
            "workspace": ws.root(),
            "dry_run": a.dry_run,
            "bytes_freed": if a.dry_run { 0 } else { freed },
            "bytes_removable": total,
            "removed": doomed.iter().map(|d| json!({"path": rel(&d.path), "why": d.why, "bytes": d.bytes})).collect::<Vec<_>>(),
            "failed": failed,
        }));
    } else {
        let verb = if a.dry_run { "would remove" } else { "removed" };
        for d in &doomed {
            println!(
                "{verb} {} ({}, {})",
                display::text(&rel(&d.path)),
                d.why,
                human(d.bytes)
            );
        }
        for f in &failed {
            eprintln!("evolve: could not remove {}", display::text(f));
        }
        if a.dry_run {
            println!(
                "would free {} ({total} bytes); nothing removed",
                human(total)
            );
        } else {
            println!("freed {} ({freed} bytes)", human(freed));
        }
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn lock_error(ws: &Workspace, e: LockError) -> CliError {
    let at = ws.root().display().to_string();
    match e {
        LockError::Held { .. } => {
            CliError::usage(format!("{e}; gc refuses while a run holds the workspace"))
                .at(at)
                .hint("wait for the run to finish (or stop it), then run `evolve gc` again")
        }
        other => CliError::usage(format!("cannot take the run lock: {other}")).at(at),
    }
}

/// What gc removes, from the archive's certified rows.
fn plan(ws: &Workspace) -> Result<Vec<Doomed>, CliError> {
    let (report, repository) = crate::workspace::evidence::Evidence::of_workspace(ws).verify();
    // A workspace that does not verify (a crash's torn tail, tampering) keeps every
    // record: which generations are finished is not known for sure, and the run data
    // may be what explains the findings.
    let findings = report.findings.len() + repository.len();
    if findings > 0 {
        return Err(CliError::usage(format!(
            "the workspace does not verify ({findings} finding(s)); gc removes nothing from it"
        ))
        .at(ws.root().display().to_string())
        .hint("`evolve verify` lists the findings; after a crash, `evolve repair` first"));
    }
    let champion = report.champion.as_ref().map(|c| c.genid.clone());
    let state = State {
        rows: report.rows,
        eligibility: report.eligibility,
        champion: report.champion,
        spent: 0.0,
        selections: Default::default(),
        playbook: Vec::new(),
    };
    // Finished, and neither the champion nor the seed (gen 0's records are the baseline
    // every child is compared with): a run never reads their records again.
    let droppable = |genid: &str| {
        genid != evolve_archive::GENESIS_GENID
            && state.row(genid).is_some()
            && champion.as_deref() != Some(genid)
            && next_step(&state, genid) == Next::Done
    };
    let runs = ws.paths.runs();
    let mut doomed = Vec::new();
    for (dir, why) in [
        (
            ws.paths.checkouts(),
            "checkouts of commits, written again when needed",
        ),
        (runs.join("spare"), "recycled directories"),
    ] {
        if is_real_dir(&dir) {
            doomed.push(measured(dir, why)?);
        }
    }
    for dir in generation_dirs(&runs)? {
        if droppable(&dir.1) {
            doomed.push(measured(dir.0, "stage records of a finished generation")?);
        }
    }
    for purpose in subdirs(&runs.join("evaluations"))? {
        for dir in generation_dirs(&purpose)? {
            if droppable(&dir.1) {
                doomed.push(measured(
                    dir.0,
                    "evaluation checkouts and trials of a finished generation",
                )?);
            }
        }
    }
    Ok(doomed)
}

/// `<dir>/gen-<id>` directories with their genid.
fn generation_dirs(dir: &Path) -> Result<Vec<(PathBuf, String)>, CliError> {
    Ok(subdirs(dir)?
        .into_iter()
        .filter_map(|p| {
            let genid = p.file_name()?.to_str()?.strip_prefix("gen-")?.to_string();
            Some((p, genid))
        })
        .collect())
}

/// The real directories (not links) directly in `dir`; none when it is absent.
fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(CliError::usage(format!(
                "cannot list {}: {e}",
                dir.display()
            )));
        }
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    Ok(out)
}

fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn measured(path: PathBuf, why: &'static str) -> Result<Doomed, CliError> {
    Ok(Doomed {
        bytes: disk_usage(&path),
        path,
        why,
    })
}

/// The disk space `path` takes (allocated blocks), never following a link.
fn disk_usage(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for e in std::fs::read_dir(path).into_iter().flatten().flatten() {
            total += disk_usage(&e.path());
        }
    }
    total
}

/// Remove `path` and everything in it, never through a link. A trial or an operator
/// may have left a directory without write permission: it is made writable (it is
/// about to go) and the removal tried again.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            make_dirs_writable(path);
            std::fs::remove_dir_all(path)
        }
        other => other,
    }
}

fn make_dirs_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
    for e in std::fs::read_dir(path).into_iter().flatten().flatten() {
        make_dirs_writable(&e.path());
    }
}

/// `1.6 MB`-style sizes (powers of 1000, as `du --si`).
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_du_si_does() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1_600_000), "1.6 MB");
        assert_eq!(human(240_000_000), "240.0 MB");
    }
}
