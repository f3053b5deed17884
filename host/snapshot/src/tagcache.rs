//! Tags already read, remembered by the `lstat` of their loose file.
//!
//! The driver checks every row's `gen/<id>` tag each time it recomputes
//! eligibility (a moved tag makes a row ineligible), several times a
//! generation, so a 1,000-generation archive would read a thousand tag files
//! each time. A tag file is only ever replaced (libgit2 and git write a lock
//! file and rename it, which gives a new inode) or rewritten in place (which
//! sets a new ctime, something no unprivileged process can choose); either
//! way its `lstat` changes, and the cached answer is dropped.
//!
//! Racy entries, as in git's index: a rewrite within the same timestamp tick
//! as the read could leave the ctime unchanged. So an answer is only kept for
//! a file whose ctime was already [`SETTLED`] in the past when it was read:
//! every later change gets a ctime at or after that read, so a different one.
//! Packed tags (no loose file) are never cached; they are read every time.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use git2::Oid;

/// How old a tag file's ctime must be for its answer to be kept: far more than
/// any filesystem's timestamp tick.
const SETTLED: Duration = Duration::from_millis(100);

/// At most this many tags are remembered (a bound, not a working-set guess:
/// one entry per generation of a long run).
const MAX_TAGS: usize = 1 << 16;

/// The part of a tag file's `lstat` that must be unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TagStat {
    ino: u64,
    dev: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl TagStat {
    /// The loose tag file's stat, if it is a regular file.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    pub fn of(path: &Path) -> Option<TagStat> {
        let st = rustix::fs::lstat(path).ok()?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return None;
        }
        Some(TagStat {
            ino: st.st_ino as u64,
            dev: st.st_dev as u64,
            size: st.st_size as i64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        })
    }

    /// Whether the ctime lies at least [`SETTLED`] before now.
    fn settled(&self) -> bool {
        ctime_settled(self.ctime, SETTLED)
    }
}

/// Whether a ctime of `(seconds, nanoseconds)` lies at least `window` before now: a
/// file changed after it was read will show another ctime (the racy-entry rule of git's
/// index, which every cache keyed by `lstat` here follows).
pub fn ctime_settled(ctime: (i64, i64), window: Duration) -> bool {
    let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
        return false;
    };
    let (Ok(s), Ok(ns)) = (u64::try_from(ctime.0), u32::try_from(ctime.1)) else {
        return false;
    };
    Duration::new(s, ns) + window < now
}

#[derive(Debug, Default)]
pub(crate) struct TagCache {
    tags: HashMap<String, (TagStat, Oid)>,
}

impl TagCache {
    /// The commit `refname` named when its file had exactly `stat`.
    pub fn get(&self, refname: &str, stat: &TagStat) -> Option<Oid> {
        self.tags
            .get(refname)
            .filter(|(s, _)| s == stat)
            .map(|(_, id)| *id)
    }

    /// Remember `id` for `refname` read with `stat`, if the file was settled.
    pub fn insert(&mut self, refname: String, stat: TagStat, id: Oid) {
        if !stat.settled() {
            self.tags.remove(&refname);
            return;
        }
        if self.tags.len() >= MAX_TAGS {
            self.tags.clear();
        }
        self.tags.insert(refname, (stat, id));
    }
}
