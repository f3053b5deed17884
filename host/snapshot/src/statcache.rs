//! Checkout records: what `materialize` wrote, so a later `snapshot` of the
//! same directory can skip re-reading files an operator did not touch (git's
//! index stat cache, kept in the `Store`'s memory only).
//!
//! For every regular file and symlink it writes, `materialize` records the
//! file's `lstat` identity (size, mtime and ctime in ns, inode, device, full
//! mode) with the blob id it wrote. `snapshot` then takes a file's blob id
//! from the record, without opening or hashing it, when its `lstat` matches
//! the record exactly; any difference, and anything not recorded, is read and
//! hashed as before. Nothing is ever read from the worktree to decide this:
//! the worktree is writable by untrusted operators, so the records live only
//! in the host process.
//!
//! # Why a matching `lstat` means unchanged content
//!
//! * Every content change goes through the kernel, which sets the inode's
//!   ctime to the current time (`write`, `truncate`, `fallocate`, `chmod`,
//!   `rename` onto, and `utimensat` itself). An unprivileged process can set
//!   atime and mtime to anything (`utimensat`), but not ctime: only changing
//!   the system clock (`CAP_SYS_TIME`) or writing the block device would.
//!   So an operator that rewrites a file and restores its size and mtime
//!   still leaves a new ctime.
//! * A file replaced by another one (delete and re-create, `rename` over, a
//!   hard link, a symlink) has another inode, or, if the inode number is
//!   reused, a creation ctime from after the record.
//! * Racy records, as in git: a change made within the same timestamp granule
//!   as the recorded stat would leave ctime unchanged. So when `materialize`
//!   has written everything it sets the root directory's times
//!   (`futimens(UTIME_NOW)`) and reads back its ctime as the *fence*; a record
//!   is kept only if its ctime and mtime are strictly older than the fence.
//!   Filesystem timestamps never go backwards (with multigrain timestamps the
//!   kernel keeps a floor at the latest fine-grained time it handed out), so
//!   every later change gets a ctime at or after the fence, hence different
//!   from any kept record.
//! * Writes through a shared `mmap` only update the times when the
//!   filesystem tracks them with `page_mkwrite`. tmpfs does not: a page first
//!   faulted in by a read can then be written with no time change at all
//!   (checked on Linux 6.18). So records are only kept on filesystems known to
//!   track them (ext2/3/4, XFS, Btrfs, per `fstatfs`); elsewhere every
//!   snapshot reads every file, as without records.
//! * The record covers what happens after `materialize` returns: the
//!   lifecycle gives no operator access to a fork before that. A writer
//!   racing `materialize` itself (between a file's write and its `fstat`)
//!   would not be seen.
//!
//! A snapshot in another process (resuming an interrupted run) has no records
//! and reads everything, so it is exact too, only slower.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use git2::Oid;
use rustix::fs::Stat;

/// At most this many worktrees are remembered (least recently used go).
const MAX_WORKTREES: usize = 64;
/// At most this many file records over all worktrees (about 120 bytes each).
const MAX_RECORDS: usize = 1 << 18;

/// The part of `lstat` a record must match exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatKey {
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
    dev: u64,
    mode: u32,
}

impl StatKey {
    // `Stat`'s field types differ between targets (and backends).
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    pub fn of(st: &Stat) -> StatKey {
        StatKey {
            size: st.st_size as i64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
            ino: st.st_ino as u64,
            dev: st.st_dev as u64,
            mode: st.st_mode as u32,
        }
    }

    pub fn size(&self) -> u64 {
        u64::try_from(self.size).unwrap_or(0)
    }

    pub fn mode(&self) -> u32 {
        self.mode
    }
}

/// What reconcile uses of an `lstat`: the record key and the link count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lstat {
    pub key: StatKey,
    pub nlink: u64,
}

impl Lstat {
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    pub fn of(st: &Stat) -> Lstat {
        Lstat {
            key: StatKey::of(st),
            nlink: st.st_nlink as u64,
        }
    }
}

/// One file or symlink as `materialize` left it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    pub stat: StatKey,
    pub id: Oid,
}

/// One name `materialize` wrote in a directory.
#[derive(Debug)]
pub(crate) enum Slot {
    /// A file or symlink, with its record unless it could not be taken or
    /// was racy.
    Leaf { link: bool, rec: Option<Record> },
    /// A subdirectory, with its tree shortcut (see [`DirRecord::tree`]).
    Dir(Option<Oid>),
}

/// One directory as `materialize` left it.
#[derive(Debug, Default)]
pub(crate) struct DirRecord {
    /// The directory's own `lstat` once all its entries were written. Names
    /// are only added, removed or renamed through the directory, which sets
    /// its ctime, so while this matches, `slots` names exactly its entries.
    /// `None` when racy or not taken.
    pub stat: Option<StatKey>,
    /// The tree a snapshot builds when every entry is unchanged (every leaf
    /// matches its record, every subdirectory yields its own `tree`): hashed
    /// by `materialize` from the entries as a snapshot would store them, and
    /// kept only when equal to the tree it wrote (so the object exists).
    pub tree: Option<Oid>,
    /// Every name written here.
    pub slots: HashMap<Box<[u8]>, Slot>,
}

impl DirRecord {
    /// The record of a file or symlink named `name`.
    pub fn leaf(&self, name: &[u8]) -> Option<&Record> {
        match self.slots.get(name) {
            Some(Slot::Leaf { rec, .. }) => rec.as_ref(),
            _ => None,
        }
    }
}

/// Everything recorded for one materialized directory tree.
#[derive(Debug, Default)]
pub(crate) struct Worktree {
    /// The root directory's device and inode: a snapshot of another directory
    /// at the same path uses nothing.
    root: (u64, u64),
    /// Directory (relative, '/'-separated, "" for the root) → its record.
    dirs: HashMap<String, DirRecord>,
    records: usize,
    last_used: u64,
}

impl Worktree {
    /// The record of one directory, if any.
    pub fn dir(&self, rel: &str) -> Option<&DirRecord> {
        self.dirs.get(rel)
    }

    /// Whether `root` (the snapshot root's `fstat`) is the recorded root.
    pub fn same_root(&self, root: &Stat) -> bool {
        let k = StatKey::of(root);
        (k.dev, k.ino) == self.root
    }
}

/// Collects records while `materialize` writes; turned into a [`Worktree`]
/// once it has finished and the fence is known.
#[derive(Default)]
pub(crate) struct Recorder {
    dirs: HashMap<String, DirRecord>,
    records: usize,
    /// Set when the tree is too large to record (the records are dropped).
    overflow: bool,
}

impl Recorder {
    fn slot(&mut self, rel_dir: &str, name: &[u8], slot: Slot) {
        if self.overflow {
            return;
        }
        if self.records >= MAX_RECORDS {
            self.overflow = true;
            self.dirs.clear();
            return;
        }
        self.records += 1;
        // Looked up by `&str` first: a directory's name is copied once, not
        // once per entry.
        if !self.dirs.contains_key(rel_dir) {
            self.dirs.insert(rel_dir.to_string(), DirRecord::default());
        }
        if let Some(d) = self.dirs.get_mut(rel_dir) {
            d.slots.insert(name.into(), slot);
        }
    }

    /// A file or symlink written at `rel_dir/name` with blob `id`; `st` is
    /// its `lstat` after the write, if taken.
    pub fn leaf(&mut self, rel_dir: &str, name: &[u8], link: bool, st: Option<StatKey>, id: Oid) {
        let rec = st.map(|stat| Record { stat, id });
        self.slot(rel_dir, name, Slot::Leaf { link, rec });
    }

    /// A subdirectory written at `rel_dir/name`, with its tree shortcut.
    pub fn subdir(&mut self, rel_dir: &str, name: &[u8], tree: Option<Oid>) {
        self.slot(rel_dir, name, Slot::Dir(tree));
    }

    /// The directory `rel` is complete: its `lstat` and tree shortcut.
    pub fn dir_done(&mut self, rel: &str, st: Option<&Stat>, tree: Option<Oid>) {
        if self.overflow {
            return;
        }
        let d = self.dirs.entry(rel.to_string()).or_default();
        d.stat = st.map(StatKey::of);
        d.tree = tree;
    }

    /// Drop every record not strictly older than `fence` (the root's ctime
    /// after the last write; see the module docs); `root` is the root
    /// directory's `fstat`.
    pub fn finish(mut self, root: &Stat, fence: &Stat) -> Option<Worktree> {
        if self.overflow {
            return None;
        }
        let fence = StatKey::of(fence).ctime;
        let settled = |k: &StatKey| k.ctime < fence && k.mtime < fence;
        for d in self.dirs.values_mut() {
            d.stat = d.stat.filter(settled);
            for slot in d.slots.values_mut() {
                if let Slot::Leaf { rec, .. } = slot {
                    *rec = rec.filter(|r| settled(&r.stat));
                }
            }
        }
        let k = StatKey::of(root);
        Some(Worktree {
            root: (k.dev, k.ino),
            dirs: self.dirs,
            records: self.records,
            last_used: 0,
        })
    }
}

/// Worktree records by the path `materialize` was given.
#[derive(Default)]
pub(crate) struct StatCache {
    trees: HashMap<PathBuf, Worktree>,
    records: usize,
    clock: u64,
}

impl StatCache {
    pub fn insert(&mut self, dir: &Path, mut wt: Worktree) {
        self.remove(dir);
        if wt.records > MAX_RECORDS {
            return;
        }
        while !self.trees.is_empty()
            && (self.trees.len() >= MAX_WORKTREES || self.records + wt.records > MAX_RECORDS)
        {
            let oldest = self
                .trees
                .iter()
                .min_by_key(|(_, w)| w.last_used)
                .map(|(p, _)| p.clone());
            if let Some(p) = oldest {
                self.remove(&p);
            }
        }
        self.clock += 1;
        wt.last_used = self.clock;
        self.records += wt.records;
        self.trees.insert(dir.to_path_buf(), wt);
    }

    pub fn remove(&mut self, dir: &Path) {
        self.take(dir);
    }

    /// Remove and return the records for `dir`.
    pub fn take(&mut self, dir: &Path) -> Option<Worktree> {
        let w = self.trees.remove(dir)?;
        self.records -= w.records;
        Some(w)
    }

    /// The records for `dir`, marked as recently used.
    pub fn get(&mut self, dir: &Path) -> Option<&Worktree> {
        self.clock += 1;
        let clock = self.clock;
        self.trees.get_mut(dir).map(|w| {
            w.last_used = clock;
            &*w
        })
    }
}

/// Whether writes to files on the filesystem holding `fd` always update
/// their ctime, shared-`mmap` writes included (see the module docs).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn tracks_all_writes(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    const EXT4: u64 = 0xEF53; // also ext2 and ext3
    const XFS: u64 = 0x5846_5342;
    const BTRFS: u64 = 0x9123_683E;
    let Ok(fs) = rustix::fs::fstatfs(fd) else {
        return false;
    };
    // `f_type`'s width and signedness differ between targets.
    #[allow(clippy::unnecessary_cast)]
    let magic = (fs.f_type as u64) & 0xFFFF_FFFF;
    matches!(magic, EXT4 | XFS | BTRFS)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn tracks_all_writes(_fd: std::os::fd::BorrowedFd<'_>) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, fstat, utimensat};

    use super::*;
    use crate::{ChangeKind, Limits, Store};

    fn skip(name: &str) -> bool {
        name == "runs"
    }

    #[test]
    fn records_in_the_fence_granule_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "x").unwrap();
        let st = rustix::fs::stat(&p).unwrap();
        let root = rustix::fs::stat(dir.path()).unwrap();
        let mut r = Recorder::default();
        r.leaf("", b"f", false, Some(StatKey::of(&st)), Oid::zero());
        r.dir_done("", Some(&st), None);
        // A fence equal to the file's own ctime: racy, dropped.
        let w = r.finish(&root, &st).unwrap();
        assert!(w.dir("").unwrap().leaf(b"f").is_none());
        assert!(w.dir("").unwrap().stat.is_none());
        assert!(w.same_root(&root));

        // A fence from a later change: kept.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let q = dir.path().join("g");
        std::fs::write(&q, "y").unwrap();
        let later = rustix::fs::stat(&q).unwrap();
        let mut r = Recorder::default();
        r.leaf("", b"f", false, Some(StatKey::of(&st)), Oid::zero());
        let w = r.finish(&root, &later).unwrap();
        assert_eq!(
            w.dir("").unwrap().leaf(b"f").unwrap().stat,
            StatKey::of(&st)
        );
        assert!(!w.same_root(&st));
    }

    #[test]
    fn the_cache_keeps_the_most_recently_used_worktrees() {
        let mut c = StatCache::default();
        for i in 0..MAX_WORKTREES + 6 {
            c.insert(Path::new(&format!("/w/{i}")), Worktree::default());
            // Keep the first one in use.
            assert!(c.get(Path::new("/w/0")).is_some());
        }
        assert_eq!(c.trees.len(), MAX_WORKTREES);
        assert!(c.get(Path::new("/w/1")).is_none());
        assert!(
            c.get(Path::new(&format!("/w/{}", MAX_WORKTREES + 5)))
                .is_some()
        );
        c.remove(Path::new("/w/0"));
        assert!(c.get(Path::new("/w/0")).is_none());
    }

    /// An operator rewrites a file in place with content of the same size and
    /// puts its mtime back: everything `lstat` shows is as recorded but the
    /// ctime, and that is enough for the snapshot to read it.
    #[test]
    fn rewrite_with_restored_mtime_is_caught_by_ctime() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        let store = Store::init(ws).unwrap();
        for i in 0..50 {
            let p = ws.join(format!("target/f{i:02}.txt"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("file {i:02}\n")).unwrap();
        }
        let s = store.snapshot(ws, None, &Limits::default(), &skip).unwrap();
        let c0 = store.commit(s.tree, None, "gen 0", true).unwrap();
        let root = std::fs::File::open(ws).unwrap();
        if !tracks_all_writes(root.as_fd()) {
            eprintln!("no stat records on this filesystem; nothing to check");
            return;
        }
        // The file must have a (non-racy) record for the check to mean
        // anything; the first file written almost always has one.
        for attempt in 0..20 {
            let wt = ws.join(format!("runs/wt{attempt}"));
            store.materialize(c0, &wt).unwrap();
            let rec = store
                .stats
                .borrow_mut()
                .get(&wt)
                .and_then(|w| w.dir("target")?.leaf(b"f00.txt").copied());
            let Some(rec) = rec else {
                continue;
            };
            let path = wt.join("target/f00.txt");
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all(b"FILE 00\n").unwrap();
            drop(f);
            let times = Timestamps {
                last_access: Timespec {
                    tv_sec: meta.atime(),
                    tv_nsec: meta.atime_nsec(),
                },
                last_modification: Timespec {
                    tv_sec: meta.mtime(),
                    tv_nsec: meta.mtime_nsec(),
                },
            };
            utimensat(CWD, &path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
            let now = StatKey::of(&fstat(std::fs::File::open(&path).unwrap()).unwrap());
            assert_ne!(now, rec.stat);
            assert_ne!(now.ctime, rec.stat.ctime);
            let only_ctime = StatKey {
                ctime: rec.stat.ctime,
                ..now
            };
            assert_eq!(only_ctime, rec.stat, "all but ctime restored");

            let hits = store.stat_cache_hits();
            let s = store
                .snapshot(&wt, Some(c0), &Limits::default(), &skip)
                .unwrap();
            assert!(store.stat_cache_hits() > hits, "records were used");
            assert_eq!(s.changes.len(), 1, "{:?}", s.changes);
            assert_eq!(s.changes[0].path, "target/f00.txt");
            assert_eq!(s.changes[0].kind, ChangeKind::Modified);
            return;
        }
        panic!("target/f00.txt never got a record");
    }
}
