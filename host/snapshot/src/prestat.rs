//! The `lstat`s a walk of a recorded directory will ask for, taken ahead of
//! it on every core.
//!
//! A snapshot or a reconcile of a 1,000-file checkout is, above all, one
//! `lstat` per file compared with its record (`statcache.rs`), and on a
//! machine where a system call costs a microsecond or more that is most of
//! its time. The walk itself must stay serial (it builds trees in order and,
//! when reconciling, edits the directory as it goes), but the stats it will
//! need are known before it starts: the records name every file this store
//! wrote. So [`Prestat::take`] first opens the recorded directories (serially,
//! each `O_NOFOLLOW | O_DIRECTORY` from its parent's descriptor, exactly as
//! the walk opens them), then stats every recorded leaf on all cores at once.
//!
//! The walk then uses a prefetched directory's descriptor *as* its own, and
//! a prefetched stat only for a name in that very descriptor: a [`Prestat`]
//! is a tree that mirrors the chain of descriptors, handed down one
//! directory at a time ([`Prestat::take_dir`]). So a stat taken here is what
//! the walk's own `lstat` of the same name would have returned a moment
//! later. Nothing the walk itself does in between can turn a stat that
//! lets it keep a file stale: a snapshot changes nothing, and a reconcile
//! never writes into an existing file (it creates with `O_EXCL`) and keeps
//! only a file with a single link, so removing some other name cannot touch
//! it. The other way round, a stale stat can only make the walk rewrite or
//! re-read a file it could have kept, which is always exact.
//!
//! Descriptors held at once are capped ([`MAX_DIRS`]), so a tree with many
//! directories cannot exhaust the process's file table: past the cap, the
//! walk opens and stats as before.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, openat, statat};
use rustix::io::Errno;

use crate::statcache::{Lstat, Slot, Worktree};
use crate::{dir_flags, join};

/// A tree of fewer records than this is stat'ed by the walk itself: a
/// thread costs more than it saves on a small tree.
const MIN_RECORDS: usize = 128;
/// Directories held open at most.
const MAX_DIRS: usize = 128;
/// Threads at most, the caller's included.
const MAX_THREADS: usize = 4;

/// One prefetched directory: the `lstat` of each recorded leaf name in it,
/// and its recorded subdirectories, each opened from this directory's
/// descriptor. (The maps keep std's keyed hash: the names come from trees
/// an operator wrote, and must not be able to collide on purpose.)
#[derive(Default)]
pub(crate) struct Prestat<'w> {
    names: Vec<&'w [u8]>,
    stats: HashMap<&'w [u8], Result<Lstat, Errno>>,
    dirs: HashMap<&'w [u8], (OwnedFd, Prestat<'w>)>,
    /// At the root: how many stats were taken, over the whole tree.
    taken: usize,
}

impl<'w> Prestat<'w> {
    /// Prefetch the stats a walk of `root` (the directory `w` records, opened)
    /// will ask for; `None` when the tree is too small to gain from it or
    /// only one core is available.
    pub fn take(root: BorrowedFd<'_>, w: &'w Worktree) -> Option<Prestat<'w>> {
        let threads = threads();
        if threads < 2 || w.records() < MIN_RECORDS {
            return None;
        }
        let mut budget = MAX_DIRS;
        let mut tree = Prestat::open(root, w, "", &mut budget);
        let results = {
            let mut jobs = Vec::with_capacity(w.records());
            tree.jobs(root, &mut jobs);
            stat_all(&jobs, threads)
        };
        tree.taken = results.len();
        tree.fill(&mut results.into_iter());
        Some(tree)
    }

    /// How many stats [`Prestat::take`] took.
    pub fn taken(&self) -> usize {
        self.taken
    }

    /// The `lstat` of `name` in the directory `dfd`: the one prefetched
    /// there when `pre` (the stats prefetched in `dfd`) holds it, else taken
    /// now. What both walks call instead of `lstat`.
    pub fn lstat_in(
        pre: Option<&Prestat<'_>>,
        dfd: BorrowedFd<'_>,
        name: &[u8],
    ) -> Result<Lstat, Errno> {
        match pre.and_then(|p| p.stats.get(name)) {
            Some(st) => *st,
            None => statat(dfd, name, AtFlags::SYMLINK_NOFOLLOW).map(|st| Lstat::of(&st)),
        }
    }

    /// The subdirectory `name`, opened, with its prefetched stats.
    pub fn take_dir(&mut self, name: &[u8]) -> Option<(OwnedFd, Prestat<'w>)> {
        self.dirs.remove(name)
    }

    /// Open the recorded subdirectories of `rel` (whose descriptor is `fd`)
    /// while `budget` lasts, and list the leaf names to stat.
    fn open(fd: BorrowedFd<'_>, w: &'w Worktree, rel: &str, budget: &mut usize) -> Prestat<'w> {
        let mut pre = Prestat::default();
        let Some(r) = w.dir(rel) else {
            return pre;
        };
        for (name, slot) in &r.slots {
            match slot {
                Slot::Leaf { .. } => pre.names.push(name),
                Slot::Dir(_) => {
                    // Recorded names are UTF-8 (materialize writes no other).
                    let Ok(name_str) = std::str::from_utf8(name) else {
                        continue;
                    };
                    let sub_rel = join(rel, name_str);
                    if *budget == 0 || w.dir(&sub_rel).is_none() {
                        continue;
                    }
                    let Ok(sub) = openat(fd, &name[..], dir_flags(), Mode::empty()) else {
                        continue;
                    };
                    *budget -= 1;
                    let inner = Prestat::open(sub.as_fd(), w, &sub_rel, budget);
                    pre.dirs.insert(name, (sub, inner));
                }
            }
        }
        pre
    }

    /// Every (directory, name) to stat, in a fixed order ([`Prestat::fill`]
    /// walks the same one).
    fn jobs<'a>(&'a self, fd: BorrowedFd<'a>, out: &mut Vec<(BorrowedFd<'a>, &'w [u8])>) {
        out.extend(self.names.iter().map(|n| (fd, *n)));
        for (sub, inner) in self.dirs.values() {
            inner.jobs(sub.as_fd(), out);
        }
    }

    /// Take the results of [`Prestat::jobs`]' order.
    fn fill(&mut self, results: &mut impl Iterator<Item = Result<Lstat, Errno>>) {
        self.stats = std::mem::take(&mut self.names)
            .into_iter()
            .zip(results.by_ref())
            .collect();
        for (_, inner) in self.dirs.values_mut() {
            inner.fill(results);
        }
    }
}

/// The cores to use, looked up once (it reads cgroup files).
fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
    })
}

/// `lstat` every job, in order, on `threads` threads (the caller's included);
/// a thread that cannot be started leaves its share to the caller.
fn stat_all(jobs: &[(BorrowedFd<'_>, &[u8])], threads: usize) -> Vec<Result<Lstat, Errno>> {
    let lstat = |(fd, name): &(BorrowedFd<'_>, &[u8])| {
        statat(*fd, *name, AtFlags::SYMLINK_NOFOLLOW).map(|st| Lstat::of(&st))
    };
    let per = jobs.len().div_ceil(threads.max(1)).max(1);
    let mut chunks = jobs.chunks(per);
    let mine = chunks.next().unwrap_or_default();
    std::thread::scope(|s| {
        let others: Vec<_> = chunks
            .map(|c| {
                let h = std::thread::Builder::new()
                    .spawn_scoped(s, move || c.iter().map(lstat).collect::<Vec<_>>());
                (c, h)
            })
            .collect();
        let mut out: Vec<_> = mine.iter().map(lstat).collect();
        for (c, h) in others {
            match h.map(|h| h.join()) {
                Ok(Ok(v)) => out.extend(v),
                // A panic in a worker is re-raised here, as if stat'ed on this thread.
                Ok(Err(p)) => std::panic::resume_unwind(p),
                Err(_) => out.extend(c.iter().map(lstat)),
            }
        }
        out
    })
}
