//! The directories a generation's stages run on, and how they are recycled.
//!
//! Writing a 1,000-file target costs a thousand inode allocations, and removing one
//! a thousand more; a generation used to do that three times. Instead, a directory
//! this run wrote is never deleted on the hot path: it becomes a *spare*
//! (`runs/spare/<pid>-<n>`), and the next directory the run needs is made from a
//! spare by [`Store::reconcile`](evolve_snapshot::Store::reconcile), which rewrites
//! only what differs from the commit wanted and proves the rest unchanged from the
//! store's stat records (ctime and inode, which no operator can restore). A spare
//! is therefore never trusted for what it holds, only reused for what it provably
//! still holds.
//!
//! Which directories go round:
//! - the child's worktree, after its commit, is reconciled to that commit and
//!   renamed to `runs/checkouts/<commit>` for gate and record (instead of being
//!   removed and the commit written out again);
//! - a discarded child's checkout, a stopped child's worktree, and the previous
//!   champion's checkout once select has moved on, become spares;
//! - the next fork takes a spare and reconciles it to its parent's commit.
//!
//! Evaluation checkouts never go round: an evaluated agent is a native process,
//! so its checkout is written fresh for it and left as evidence.
//!
//! Spares are only taken by the process that made them (the store's records are in
//! its memory); leftovers of an earlier process are removed when a run opens.

use super::{Driver, Result, RunError};
use evolve_snapshot::Oid;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Spares kept at most; more are removed (a run rarely has more than a few children
/// in flight).
const MAX_SPARES: usize = 4;

/// What this process knows about its recyclable directories.
#[derive(Debug, Default)]
pub(crate) struct Recycling {
    /// Spare directories, each with the store's records.
    spares: Mutex<Vec<PathBuf>>,
    /// Spares named so far (for unique names).
    made: Mutex<u64>,
    /// The commit whose checkout select read last (the champion's).
    champion: Mutex<Option<Oid>>,
}

impl Recycling {
    fn take(&self) -> Option<PathBuf> {
        self.spares.lock().ok()?.pop()
    }

    fn next_name(&self, root: &Path) -> PathBuf {
        let n = self.made.lock().map_or(0, |mut m| {
            *m += 1;
            *m
        });
        root.join(format!("{}-{n}", std::process::id()))
    }
}

/// Remove what an earlier process left in `runs/spare` (its records died with it).
pub(crate) fn clear_stale_spares(runs: &Path) {
    let _ = std::fs::remove_dir_all(runs.join("spare"));
}

impl Driver {
    fn spare_root(&self) -> PathBuf {
        self.ws.paths.runs().join("spare")
    }

    fn checkout_dir(&self, commit: Oid) -> PathBuf {
        self.ws.paths.checkouts().join(commit.to_string())
    }

    /// Write `commit` into `dest` (absent): from a spare when there is one, else from
    /// scratch.
    pub(crate) fn check_out(&self, commit: Oid, dest: &Path) -> Result<()> {
        let store = &self.ws.store;
        if let Some(spare) = self.recycling.take() {
            let reused = store
                .move_worktree(&spare, dest)
                .and_then(|_| store.reconcile(commit, dest));
            match reused {
                Ok(_) => return Ok(()),
                Err(_) => {
                    // A spare that cannot be converted is dropped, never used half-done.
                    store.forget_worktree(dest);
                    let _ = std::fs::remove_dir_all(&spare);
                    let _ = std::fs::remove_dir_all(dest);
                }
            }
        }
        store
            .materialize(commit, dest)
            .map_err(|e| RunError::new(format!("cannot check out {commit}: {e}")))
    }

    /// Done with `dir`, a directory this run wrote: keep it as a spare, or remove it
    /// when there are enough.
    pub(crate) fn retire(&self, dir: &Path) {
        let store = &self.ws.store;
        let full = self
            .recycling
            .spares
            .lock()
            .map_or(true, |d| d.len() >= MAX_SPARES);
        if !full {
            let root = self.spare_root();
            let spare = self.recycling.next_name(&root);
            let moved =
                std::fs::create_dir_all(&root).is_ok() && store.move_worktree(dir, &spare).is_ok();
            if moved {
                if let Ok(mut d) = self.recycling.spares.lock() {
                    d.push(spare);
                }
                return;
            }
        }
        store.forget_worktree(dir);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The committed child's worktree `wt` becomes gate and record's checkout of
    /// `commit`: reconciled to exactly the commit (whatever the stages after the
    /// snapshot did to it) and renamed into place. Falls back to retiring it.
    pub(crate) fn keep_as_checkout(&self, wt: &Path, commit: Oid) {
        let dir = self.checkout_dir(commit);
        let store = &self.ws.store;
        let placed = !dir.exists()
            && dir
                .parent()
                .is_some_and(|p| std::fs::create_dir_all(p).is_ok())
            && store.reconcile(commit, wt).is_ok()
            && store.move_worktree(wt, &dir).is_ok();
        if !placed {
            self.retire(wt);
        }
    }

    /// A discarded commit's checkout will not be read again: it becomes a spare.
    pub(crate) fn drop_commit_checkout(&self, commit: Oid) {
        let dir = self.checkout_dir(commit);
        if dir.is_dir() {
            self.retire(&dir);
        }
    }

    /// Select's checkout of the champion's `commit`. When the champion has changed, the
    /// previous champion's checkout is read by no stage any more (forks are written from
    /// commits, and gate and record read each child's own): it becomes a spare.
    pub(crate) fn champion_checkout(&self, commit: Oid) -> Result<PathBuf> {
        let previous = self
            .recycling
            .champion
            .lock()
            .ok()
            .and_then(|mut s| s.replace(commit));
        if let Some(p) = previous.filter(|p| *p != commit) {
            self.drop_commit_checkout(p);
        }
        self.commit_checkout(commit)
    }

    /// A read-only checkout of `commit` shared by the stages that only read it (select,
    /// gate, record): `runs/checkouts/<commit>`, written once, atomically (at a
    /// temporary name, then renamed).
    pub(crate) fn commit_checkout(&self, commit: Oid) -> Result<PathBuf> {
        let dir = self.checkout_dir(commit);
        if dir.is_dir() {
            return Ok(dir);
        }
        let tmp = self
            .ws
            .paths
            .checkouts()
            .join(format!(".tmp-{commit}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        if let Some(p) = tmp.parent() {
            std::fs::create_dir_all(p)
                .map_err(|e| RunError::new(format!("cannot create {}: {e}", p.display())))?;
        }
        self.check_out(commit, &tmp)?;
        self.ws
            .store
            .move_worktree(&tmp, &dir)
            .map_err(|e| RunError::new(format!("cannot move {} into place: {e}", tmp.display())))?;
        Ok(dir)
    }
}
