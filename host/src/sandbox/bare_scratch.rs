//! Scratch directories for bare calls ([`Sandbox::call_bare`](super::Sandbox::call_bare)),
//! which are given nothing but `/scratch` and see no candidate: `describe`,
//! `normalize-config`, and the recipe check's run of a script operator on sample input.
//!
//! Each call gets an empty directory that no other call can have changed. A directory a
//! call left exactly as it found it is kept for the next bare call: still empty, and
//! with the same `lstat` (inode, size, link count, mode, access, change and
//! modification times) as before the call, so nothing a guest could observe of it
//! through WASI differs from what the previous guest saw, and nothing that guest did
//! (a file made, even one made and removed again) carries over. Anything else is
//! removed after the call. Making and removing a directory for each call costs more
//! than the call on a journaling file system, and `evolve init` makes one bare call
//! per operator.
//!
//! The directories live under one private directory (mode 0700, in the system's
//! temporary directory) that the sandbox creates on its first bare call and removes
//! when it is dropped.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use tempfile::TempDir;

/// Where a sandbox makes its bare calls' scratch directories.
#[derive(Debug, Default)]
pub(crate) struct BareScratch {
    root: OnceLock<TempDir>,
    next: AtomicU64,
    /// Directories returned untouched, with their state then.
    kept: Mutex<Vec<(PathBuf, DirState)>>,
}

/// What a guest can observe of a directory's own metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DirState {
    dev: u64,
    ino: u64,
    nlink: u64,
    size: u64,
    mode: u32,
    atime: (i64, i64),
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl DirState {
    fn of(path: &Path) -> Option<DirState> {
        let m = std::fs::symlink_metadata(path).ok()?;
        m.is_dir().then(|| DirState {
            dev: m.dev(),
            ino: m.ino(),
            nlink: m.nlink(),
            size: m.size(),
            mode: m.mode(),
            atime: (m.atime(), m.atime_nsec()),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// One call's scratch directory, given back (kept or removed) when dropped.
#[derive(Debug)]
pub(crate) enum ScratchDir<'a> {
    /// Under the sandbox's private directory, with its state when handed out.
    Shared {
        from: &'a BareScratch,
        path: PathBuf,
        state: DirState,
    },
    /// A temporary directory of its own: the private one could not be used.
    Own(TempDir),
}

impl BareScratch {
    /// An empty directory for one call, no other call's doing.
    pub(crate) fn make(&self) -> std::io::Result<ScratchDir<'_>> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner()).pop();
        if let Some((path, state)) = kept {
            return Ok(ScratchDir::Shared {
                from: self,
                path,
                state,
            });
        }
        if let Some(root) = self.root() {
            let path = root.join(self.next.fetch_add(1, Ordering::Relaxed).to_string());
            // `create_dir`, not `create_dir_all`: a name that exists is never reused.
            if std::fs::create_dir(&path).is_ok()
                && let Some(state) = DirState::of(&path)
            {
                return Ok(ScratchDir::Shared {
                    from: self,
                    path,
                    state,
                });
            }
        }
        // The private directory could not be made, or was removed under us.
        tempfile::tempdir().map(ScratchDir::Own)
    }

    fn root(&self) -> Option<&Path> {
        if let Some(root) = self.root.get() {
            return Some(root.path());
        }
        let made = tempfile::Builder::new()
            .prefix("evolve-scratch-")
            .tempdir()
            .ok()?;
        // Two first calls at once: one directory is kept, the other removed on drop.
        let _ = self.root.set(made);
        self.root.get().map(TempDir::path)
    }

    /// Keep `path` for another call if it is as it was handed out (`state`) and still
    /// empty; else remove it.
    fn give_back(&self, path: &Path, state: &DirState) {
        let untouched = DirState::of(path).as_ref() == Some(state)
            && std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none());
        // Listing it may have set its access time (relatime): the state to compare with
        // next time is the one after that.
        if untouched && let Some(now) = DirState::of(path) {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            kept.push((path.to_path_buf(), now));
            return;
        }
        // Never following a link the operator left.
        if std::fs::remove_dir(path).is_err() {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

impl ScratchDir<'_> {
    pub(crate) fn path(&self) -> &Path {
        match self {
            ScratchDir::Shared { path, .. } => path,
            ScratchDir::Own(dir) => dir.path(),
        }
    }
}

impl Drop for ScratchDir<'_> {
    fn drop(&mut self) {
        if let ScratchDir::Shared { from, path, state } = self {
            from.give_back(path, state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(dir: &ScratchDir<'_>) -> bool {
        matches!(dir, ScratchDir::Shared { .. })
    }

    #[test]
    fn calls_at_once_get_different_empty_directories() {
        let scratch = BareScratch::default();
        let first = scratch.make().unwrap();
        let second = scratch.make().unwrap();
        assert_ne!(first.path(), second.path());
        for dir in [&first, &second] {
            assert!(shared(dir));
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn an_untouched_directory_is_kept_and_a_touched_one_removed() {
        let scratch = BareScratch::default();
        let untouched = scratch.make().unwrap();
        let kept = untouched.path().to_path_buf();
        drop(untouched);
        let again = scratch.make().unwrap();
        assert_eq!(again.path(), kept, "left as found: handed out again");
        // A file made and removed again: empty, but not as it was.
        std::fs::write(again.path().join("f"), "x").unwrap();
        std::fs::remove_file(again.path().join("f")).unwrap();
        drop(again);
        assert!(!kept.exists());
        let fresh = scratch.make().unwrap();
        assert_ne!(fresh.path(), kept);
        assert_eq!(std::fs::read_dir(fresh.path()).unwrap().count(), 0);
        // Its times set back to what they were (WASI's set-times can): the change time
        // still moved.
        let timed = fresh.path().to_path_buf();
        let before = std::fs::metadata(&timed).unwrap();
        std::fs::File::open(&timed)
            .unwrap()
            .set_times(
                std::fs::FileTimes::new()
                    .set_accessed(before.accessed().unwrap())
                    .set_modified(before.modified().unwrap()),
            )
            .unwrap();
        drop(fresh);
        assert!(!timed.exists());
    }

    #[test]
    fn what_an_operator_leaves_goes_with_its_directory_and_never_through_a_link() {
        let scratch = BareScratch::default();
        let dir = scratch.make().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), "x").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/left"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
        assert!(outside.path().join("keep").exists());
        let root = scratch.root.get().unwrap().path().to_path_buf();
        drop(scratch);
        assert!(
            !root.exists(),
            "the private directory goes with the sandbox"
        );
    }

    #[test]
    fn a_private_directory_removed_under_the_sandbox_is_not_an_error() {
        let scratch = BareScratch::default();
        std::fs::write(scratch.make().unwrap().path().join("f"), "x").unwrap();
        let root = scratch.root.get().unwrap().path().to_path_buf();
        std::fs::remove_dir_all(&root).unwrap();
        let dir = scratch.make().unwrap();
        assert!(!shared(&dir));
        assert!(dir.path().is_dir());
    }
}
