//! Component files already hashed, remembered by their `lstat`.
//!
//! Every stage call loads its operator from the checkout it runs on, so a generation
//! reads and hashes the same few 200 KB components again and again, although a kept
//! file in a recycled checkout is the very inode that was hashed before. A file's
//! content changes only through a write (which sets a new ctime, something no
//! unprivileged process can choose) or by a new file taking its name (a new inode, and
//! a rename sets the ctime too); either way its `lstat` changes and the remembered
//! digest is not used.
//!
//! Racy entries, as in git's index: a write within the same timestamp tick as the read
//! could leave the ctime unchanged. So a digest is only remembered for a file whose
//! ctime was already [`SETTLED`] in the past when it was read, and whose `lstat` was
//! the same before and after the read: every later change gets a ctime at or after
//! that read, so a different one.

use super::cache::ComponentDigest;
use cap_std::fs::{Metadata, MetadataExt};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How old a file's ctime must be for its digest to be remembered: far more than any
/// filesystem's timestamp tick.
const SETTLED: Duration = Duration::from_millis(100);

/// At most this many files are remembered (a bound, not a working-set guess).
const MAX_FILES: usize = 4096;

/// The part of a file's `lstat` that must be unchanged for its digest to stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    pub fn of(meta: &Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the ctime lies at least [`SETTLED`] before now.
    fn settled(&self) -> bool {
        evolve_snapshot::ctime_settled(self.ctime, SETTLED)
    }
}

#[derive(Debug, Default)]
pub(crate) struct FileDigests {
    files: Mutex<HashMap<(u64, u64), (FileStamp, ComponentDigest)>>,
}

impl FileDigests {
    /// The digest of the file whose `lstat` is exactly `stamp`, if it was read so.
    pub fn get(&self, stamp: &FileStamp) -> Option<ComponentDigest> {
        self.lock()
            .get(&(stamp.dev, stamp.ino))
            .filter(|(s, _)| s == stamp)
            .map(|(_, d)| *d)
    }

    /// Remember `digest` for a file read between two `lstat`s, `before` and `after`:
    /// only when they agree and the file was settled (see the module docs).
    pub fn insert(&self, before: &FileStamp, after: &FileStamp, digest: ComponentDigest) {
        let mut files = self.lock();
        if before != after || !before.settled() {
            files.remove(&(before.dev, before.ino));
            return;
        }
        if files.len() >= MAX_FILES {
            files.clear();
        }
        files.insert((before.dev, before.ino), (*before, digest));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, u64), (FileStamp, ComponentDigest)>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp_of(dir: &cap_std::fs::Dir, name: &str) -> FileStamp {
        FileStamp::of(&dir.symlink_metadata(name).unwrap())
    }

    /// Wait out the racy window, so the files written so far are settled.
    fn settle() {
        std::thread::sleep(SETTLED + Duration::from_millis(20));
    }

    #[test]
    fn a_digest_stands_only_while_the_file_is_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let dir =
            cap_std::fs::Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        dir.write("op.wasm", b"first").unwrap();
        let digests = FileDigests::default();
        // A file written just now is racy: not remembered.
        let fresh = stamp_of(&dir, "op.wasm");
        digests.insert(&fresh, &fresh, [1; 32]);
        assert_eq!(digests.get(&fresh), None);
        settle();
        let s = stamp_of(&dir, "op.wasm");
        digests.insert(&s, &s, [1; 32]);
        assert_eq!(digests.get(&s), Some([1; 32]));
        // Rewritten in place (same size): a new ctime, so no digest.
        dir.write("op.wasm", b"other").unwrap();
        assert_eq!(digests.get(&stamp_of(&dir, "op.wasm")), None);
        // Replaced by another file under the name: another inode or ctime.
        settle();
        dir.write("new.wasm", b"first").unwrap();
        dir.rename("new.wasm", &dir, "op.wasm").unwrap();
        assert_eq!(digests.get(&stamp_of(&dir, "op.wasm")), None);
    }

    #[test]
    fn a_file_that_changed_during_the_read_is_not_remembered() {
        let tmp = tempfile::tempdir().unwrap();
        let dir =
            cap_std::fs::Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        dir.write("op.wasm", b"first").unwrap();
        settle();
        let before = stamp_of(&dir, "op.wasm");
        dir.write("op.wasm", b"second").unwrap();
        let after = stamp_of(&dir, "op.wasm");
        let digests = FileDigests::default();
        digests.insert(&before, &after, [2; 32]);
        assert_eq!(digests.get(&before), None);
        assert_eq!(digests.get(&after), None);
    }
}
