//! `evolve repair`: make an interrupted workspace runnable again without losing work.
//!
//! - A child worktree whose tree still equals the commit it was forked from is removed.
//! - A child worktree with edits is moved to `runs/interrupted/` (never deleted) and
//!   the move is archived; the next run redoes that child from select's archived choice.
//! - Archive crash states (torn tail, unsigned final line) are repaired by opening the
//!   archive as its writer, and the repair is archived.

use super::{Result, RunError};
use crate::layout;
use crate::workspace::{Workspace, now};
use evolve_archive::{EventBody, RepairBody, RunLock};
use evolve_snapshot::{Limits as SnapshotLimits, Oid};
use serde_json::Value;
use std::path::Path;

/// The fork marker a child's run directory holds while its worktree exists.
pub const FORK_MARKER: &str = "fork.json";

/// Repair `ws`; returns one line per action taken.
pub fn repair(ws: &Workspace) -> Result<Vec<String>> {
    let _lock = RunLock::acquire(ws.root())
        .map_err(|e| RunError::new(e.to_string()).hint("stop the running `evolve run` first"))?;
    let mut archive = ws.archive_writer()?;
    let mut actions = Vec::new();
    let rec = archive.recovery().clone();
    if !rec.resigned.is_empty() || rec.archive_torn.is_some() || rec.receipts_torn.is_some() {
        actions.push(crash_state_text(
            rec.archive_torn.is_some(),
            rec.receipts_torn.is_some(),
            &rec.resigned,
        ));
        let body = RepairBody {
            what: "archive recovery at open".into(),
            resigned_seqs: Some(rec.resigned.clone()),
            ..RepairBody::default()
        };
        archive
            .append(RepairBody::TYPE, None, body.to_map(), &now())
            .map_err(|e| RunError::new(format!("archive: {e}")))?;
    }
    let entries: Vec<_> = std::fs::read_dir(ws.paths.worktrees())
        .into_iter()
        .flatten()
        .flatten()
        .collect();
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let genid = name.strip_prefix("gen-").unwrap_or(&name).to_string();
        let dir = entry.path();
        let fork = fork_commit(&ws.paths.run_dir(&genid));
        let clean = fork.is_some_and(|c| {
            ws.store
                .snapshot(
                    &dir,
                    Some(c),
                    &SnapshotLimits::default(),
                    &layout::skip_top_level,
                )
                .is_ok_and(|s| s.changes.is_empty())
        });
        let mut body = RepairBody {
            worktree: Some(format!("runs/worktrees/{name}")),
            ..RepairBody::default()
        };
        if clean {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| RunError::new(format!("cannot remove {}: {e}", dir.display())))?;
            actions.push(format!("removed clean stale worktree {name}"));
            body.what = "removed a clean stale child worktree".into();
        } else {
            let dest = free_name(&ws.paths.runs().join("interrupted"), &name);
            if let Some(p) = dest.parent() {
                std::fs::create_dir_all(p)
                    .map_err(|e| RunError::new(format!("cannot create {}: {e}", p.display())))?;
            }
            std::fs::rename(&dir, &dest)
                .map_err(|e| RunError::new(format!("cannot move {}: {e}", dir.display())))?;
            let rel = dest
                .strip_prefix(ws.root())
                .unwrap_or(&dest)
                .display()
                .to_string();
            actions.push(format!(
                "moved edited worktree {name} to {rel} (its edits are preserved)"
            ));
            body.what = "moved an edited child worktree aside".into();
            body.moved_to = Some(rel);
        }
        let _ = std::fs::remove_file(ws.paths.run_dir(&genid).join(FORK_MARKER));
        archive
            .append(RepairBody::TYPE, Some(&genid), body.to_map(), &now())
            .map_err(|e| RunError::new(format!("archive: {e}")))?;
    }
    for tmp in std::fs::read_dir(ws.paths.checkouts())
        .into_iter()
        .flatten()
        .flatten()
    {
        if tmp.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = std::fs::remove_dir_all(tmp.path());
            actions.push(format!(
                "removed a partial checkout {}",
                tmp.file_name().to_string_lossy()
            ));
        }
    }
    Ok(actions)
}

/// What the archive's recovery at open repaired, in words: `archive: repaired crash
/// state: a torn archive tail, re-signed events 7, 8`.
fn crash_state_text(archive_torn: bool, receipts_torn: bool, resigned: &[u64]) -> String {
    let mut parts = Vec::new();
    if archive_torn {
        parts.push("a torn archive tail".to_string());
    }
    if receipts_torn {
        parts.push("a torn receipts tail".to_string());
    }
    if !resigned.is_empty() {
        let seqs: Vec<String> = resigned.iter().map(u64::to_string).collect();
        parts.push(format!("re-signed event(s) {}", seqs.join(", ")));
    }
    format!("archive: repaired crash state: {}", parts.join("; "))
}

fn fork_commit(run_dir: &Path) -> Option<Oid> {
    let v: Value = serde_json::from_slice(&std::fs::read(run_dir.join(FORK_MARKER)).ok()?).ok()?;
    Oid::from_str(v.get("commit")?.as_str()?).ok()
}

fn free_name(dir: &Path, name: &str) -> std::path::PathBuf {
    let first = dir.join(name);
    if !first.exists() {
        return first;
    }
    (1..)
        .map(|n| dir.join(format!("{name}-{n}")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repaired_crash_state_reads_as_words() {
        assert_eq!(
            crash_state_text(true, false, &[7, 8]),
            "archive: repaired crash state: a torn archive tail; re-signed event(s) 7, 8"
        );
        assert_eq!(
            crash_state_text(false, true, &[]),
            "archive: repaired crash state: a torn receipts tail"
        );
    }
}
