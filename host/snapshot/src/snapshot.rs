//! Directory → tree. The walk is descriptor-relative (`openat` with
//! `O_NOFOLLOW`), so a symlink planted anywhere, including one swapped in for
//! a directory while we walk, is stored as a link or fails the open; it is
//! never read through.

use std::cell::RefCell;
use std::ffi::CStr;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use git2::{ObjectType, Odb, Oid, Repository, Tree};
use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags, openat, readlinkat, statat};

use crate::cache::BlobCache;
use crate::error::{Error, git, io};
use crate::statcache::{DirRecord, Record, Slot, StatKey, Worktree};
use crate::tree::{self, Entry, MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE};
use crate::{Change, ChangeKind, EntryKind, Limits, MAX_DEPTH, Snapshot, dir_flags, join};

pub(crate) fn snapshot(
    repo: &Repository,
    cache: &RefCell<BlobCache>,
    stats: Option<&Worktree>,
    dir: &Path,
    parent: Option<&Tree<'_>>,
    limits: &Limits,
    skip: &dyn Fn(&str) -> bool,
) -> Result<(Snapshot, u64), Error> {
    // The root itself must be a real directory: a symlinked worktree root
    // would let its target stand in for the candidate.
    let root = openat(CWD, dir, dir_flags(), Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            Error::NotADirectory(dir.to_path_buf())
        }
        e => io(dir, "opening snapshot root")(e.into()),
    })?;
    // Records describe the directory materialize wrote, not whatever
    // directory is at that path now.
    let stats = stats.filter(|w| {
        rustix::fs::fstat(&root)
            .map(|st| w.same_root(&st))
            .unwrap_or(false)
    });
    let mut w = Walker {
        root: dir,
        repo,
        cache,
        stats,
        hits: 0,
        odb: repo.odb().map_err(git("opening the object database"))?,
        limits,
        entries: 0,
        total: 0,
        buf: Vec::new(),
        extras: Vec::new(),
    };
    let tree = match w.dir(root, "", parent, 0, Some(skip))? {
        Some(id) => id,
        // Everything was empty: the root is still a (empty) tree.
        None => w.write_tree(&mut [], None)?,
    };
    let hits = w.hits;
    let mut changes = std::mem::take(&mut w.extras);
    let new_tree = tree::find_tree(repo, tree, "")?;
    tree::diff_trees(repo, parent, Some(&new_tree), "", 0, &mut changes)?;
    tree::sort_changes(&mut changes);
    Ok((Snapshot { tree, changes }, hits))
}

struct Walker<'r> {
    /// The snapshot root, only for naming paths in I/O errors.
    root: &'r Path,
    repo: &'r Repository,
    cache: &'r RefCell<BlobCache>,
    /// What materialize wrote here, if this store did.
    stats: Option<&'r Worktree>,
    /// Files taken from `stats` without reading them.
    hits: u64,
    odb: Odb<'r>,
    limits: &'r Limits,
    entries: usize,
    total: u64,
    /// Reused read buffer: one allocation for the whole walk.
    buf: Vec<u8>,
    /// Entries that are reported but never stored (special files, nested
    /// repositories, undecodable names).
    extras: Vec<Change>,
}

impl<'r> Walker<'r> {
    /// Snapshot one directory; `None` when it ends up empty. `skip` is only
    /// given at the root.
    fn dir(
        &mut self,
        fd: OwnedFd,
        rel: &str,
        parent: Option<&Tree<'_>>,
        depth: usize,
        skip: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Option<Oid>, Error> {
        if depth > MAX_DEPTH {
            return Err(self.limit(rel.to_string(), "directory depth", MAX_DEPTH as u64));
        }
        let recorded = self.stats.and_then(|w| w.dir(rel));
        // Below the root (which has skipped names and the parent's entries
        // for them), a directory whose own lstat is as materialize left it
        // still holds exactly the names it wrote: no need to list it.
        if depth > 0
            && let Some(r) = recorded
            && let Some(dir_stat) = r.stat
            && self.entries + r.slots.len() <= self.limits.max_entries
            && rustix::fs::fstat(&fd).is_ok_and(|st| StatKey::of(&st) == dir_stat)
        {
            return self.recorded_dir(fd.as_fd(), rel, parent, depth, r);
        }
        // Read all names first; the directory stream owns `fd`, which stays
        // open as the base for the `openat`s below.
        let mut stream = Dir::new(fd).map_err(|e| self.io(rel, "reading directory", e.into()))?;
        let mut names: Vec<(Vec<u8>, FileType)> = Vec::new();
        while let Some(ent) = stream.read() {
            let ent = ent.map_err(|e| self.io(rel, "reading directory", e.into()))?;
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                let path = join(rel, &String::from_utf8_lossy(name));
                return Err(self.limit(path, "entry count", self.limits.max_entries as u64));
            }
            names.push((name.to_vec(), ent.file_type()));
        }
        let dfd = stream
            .fd()
            .map_err(|e| self.io(rel, "reading directory", e.into()))?;

        let mut entries = Vec::with_capacity(names.len());
        for (name, ftype) in names {
            let Ok(name_str) = std::str::from_utf8(&name) else {
                let path = join(rel, &String::from_utf8_lossy(&name));
                self.extra(path, EntryKind::Special);
                continue;
            };
            if skip.is_some_and(|s| s(name_str)) {
                continue;
            }
            // Any case of ".git": a nested repository (or a gitdir file) is how
            // a submodule gets in; report it, never store or enter it.
            if name_str.eq_ignore_ascii_case(".git") {
                self.extra(join(rel, name_str), EntryKind::Submodule);
                continue;
            }
            if ftype != FileType::Directory
                && let Some(rec) = recorded.and_then(|r| r.leaf(&name))
                && let Some((mode, id)) = self.unchanged(dfd, &name, rel, rec)?
            {
                entries.push(Entry { name, mode, id });
                continue;
            }
            let path = join(rel, name_str);
            if let Some(e) = self.entry(dfd, name, ftype, &path, parent, depth)? {
                entries.push(e);
            }
        }
        // The caller's skipped names are framework state: keep the parent's
        // entries for them so a snapshot never drops or alters them.
        if let (Some(skip), Some(p)) = (skip, parent) {
            for e in p.iter() {
                if e.name().is_some_and(skip) {
                    entries.push(Entry {
                        name: e.name_bytes().to_vec(),
                        mode: e.filemode(),
                        id: e.id(),
                    });
                }
            }
        }
        if entries.is_empty() && depth > 0 {
            return Ok(None);
        }
        self.write_tree(&mut entries, parent.map(|p| p.id()))
            .map(Some)
    }

    /// A directory (not the root) whose names are those materialize wrote:
    /// walk the recorded names instead of listing it. When every entry is
    /// unchanged the tree is the recorded one, with nothing to hash.
    fn recorded_dir(
        &mut self,
        dfd: BorrowedFd<'_>,
        rel: &str,
        parent: Option<&Tree<'_>>,
        depth: usize,
        r: &DirRecord,
    ) -> Result<Option<Oid>, Error> {
        self.entries += r.slots.len();
        let mut unchanged = r.tree.is_some();
        let mut entries = Vec::with_capacity(r.slots.len());
        for (name, slot) in &r.slots {
            let (ftype, sub_tree) = match slot {
                Slot::Leaf { rec, link } => {
                    if let Some(rec) = rec
                        && let Some((mode, id)) = self.unchanged(dfd, name, rel, rec)?
                    {
                        entries.push(Entry {
                            name: name.to_vec(),
                            mode,
                            id,
                        });
                        continue;
                    }
                    let t = if *link {
                        FileType::Symlink
                    } else {
                        FileType::RegularFile
                    };
                    (t, None)
                }
                Slot::Dir(tree) => (FileType::Directory, *tree),
            };
            // Recorded names are UTF-8 (materialize writes no other).
            let path = join(rel, &String::from_utf8_lossy(name));
            let e = self.entry(dfd, name.to_vec(), ftype, &path, parent, depth)?;
            unchanged &= sub_tree.is_some() && e.as_ref().map(|e| e.id) == sub_tree;
            entries.extend(e);
        }
        if unchanged {
            return Ok(r.tree);
        }
        if entries.is_empty() {
            return Ok(None);
        }
        self.write_tree(&mut entries, parent.map(|p| p.id()))
            .map(Some)
    }

    /// Snapshot one directory entry (a name that is neither skipped nor a
    /// `.git`, listed as `ftype`); `None` for what is not stored.
    fn entry(
        &mut self,
        dfd: BorrowedFd<'_>,
        name: Vec<u8>,
        ftype: FileType,
        path: &str,
        parent: Option<&Tree<'_>>,
        depth: usize,
    ) -> Result<Option<Entry>, Error> {
        let prev = parent.and_then(|t| t.get_name_bytes(&name));
        let ftype = match ftype {
            FileType::Unknown => {
                let st = statat(dfd, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| self.io(path, "inspecting", e.into()))?;
                FileType::from_raw_mode(st.st_mode)
            }
            t => t,
        };
        let stored = match ftype {
            FileType::Directory => {
                let sub = openat(dfd, name.as_slice(), dir_flags(), Mode::empty())
                    .map_err(|e| self.io(path, "opening directory", e.into()))?;
                let prev_tree = match &prev {
                    Some(p) if p.filemode() == MODE_TREE => {
                        Some(tree::find_tree(self.repo, p.id(), path)?)
                    }
                    _ => None,
                };
                self.dir(sub, path, prev_tree.as_ref(), depth + 1, None)?
                    .map(|id| (MODE_TREE, id))
            }
            FileType::Symlink => self.symlink(dfd, &name, path, prev.map(|p| p.id()))?,
            FileType::RegularFile => self.file(dfd, &name, path, prev.map(|p| p.id()))?,
            _ => {
                self.extra(path.to_string(), EntryKind::Special);
                None
            }
        };
        Ok(stored.map(|(mode, id)| Entry { name, mode, id }))
    }

    /// Hash a tree body; write it only when it is not the parent's.
    fn write_tree(&self, entries: &mut [Entry], prev: Option<Oid>) -> Result<Oid, Error> {
        let body = tree::serialize(entries);
        let id = Oid::hash_object(ObjectType::Tree, &body).map_err(git("hashing a tree"))?;
        if prev != Some(id) {
            self.odb
                .write(ObjectType::Tree, &body)
                .map_err(git("writing a tree"))?;
        }
        Ok(id)
    }

    /// Hash a blob; write it only when it differs from the parent's entry.
    fn write_blob(&self, data: &[u8], prev: Option<Oid>, path: &str) -> Result<Oid, Error> {
        // Unchanged since the checkout that cached the parent's content: equal
        // bytes have equal ids, and comparing is far cheaper than hashing.
        if let Some(p) = prev
            && self.cache.borrow().get(&p) == Some(data)
        {
            return Ok(p);
        }
        let id = Oid::hash_object(ObjectType::Blob, data)
            .map_err(|e| git(format!("hashing {path}"))(e))?;
        if prev != Some(id) {
            self.odb
                .write(ObjectType::Blob, data)
                .map_err(|e| git(format!("writing {path}"))(e))?;
        }
        // Its evaluation checkout (and the next child's) will want it back.
        self.cache.borrow_mut().insert(id, data);
        Ok(id)
    }

    fn symlink(
        &mut self,
        dfd: BorrowedFd<'_>,
        name: &[u8],
        path: &str,
        prev: Option<Oid>,
    ) -> Result<Option<(i32, Oid)>, Error> {
        let target = readlinkat(dfd, name, Vec::new())
            .map_err(|e| self.io(path, "reading symlink", e.into()))?;
        let target: &CStr = &target;
        let bytes = target.to_bytes();
        self.account(bytes.len() as u64, || path.to_string())?;
        if std::str::from_utf8(bytes).is_err() {
            // A target we cannot show or check lexically is not stored.
            self.extra(path.to_string(), EntryKind::Special);
            return Ok(None);
        }
        Ok(Some((MODE_LINK, self.write_blob(bytes, prev, path)?)))
    }

    fn file(
        &mut self,
        dfd: BorrowedFd<'_>,
        name: &[u8],
        path: &str,
        prev: Option<Oid>,
    ) -> Result<Option<(i32, Oid)>, Error> {
        // NOFOLLOW: fails on a symlink swapped in since readdir. NONBLOCK: a
        // fifo swapped in cannot hang us; fstat below then rejects it.
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = openat(dfd, name, flags, Mode::empty())
            .map_err(|e| self.io(path, "opening file", e.into()))?;
        let st = rustix::fs::fstat(fd.as_fd())
            .map_err(|e| self.io(path, "inspecting file", e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            self.extra(path.to_string(), EntryKind::Special);
            return Ok(None);
        }
        // Charge the size before reading: an over-limit file is never read.
        let size = u64::try_from(st.st_size).unwrap_or(0);
        self.account(size, || path.to_string())?;
        let max = self.limits.max_file_bytes;
        let mut buf = std::mem::take(&mut self.buf);
        read_file(std::fs::File::from(fd), size, max, &mut buf)
            .map_err(|e| self.io(path, "reading file", e))?;
        if buf.len() as u64 > max {
            // It grew past the limit after fstat.
            return Err(self.limit(path.to_string(), "file size", max));
        }
        let mode = if st.st_mode & 0o100 != 0 {
            MODE_EXEC
        } else {
            MODE_FILE
        };
        let id = self.write_blob(&buf, prev, path);
        self.buf = buf;
        Ok(Some((mode, id?)))
    }

    /// The entry for the file or symlink `name` in `dfd` (the directory
    /// `rel`) when its `lstat` still matches what materialize recorded (so
    /// its content is the recorded blob), charged against the limits as
    /// reading it would be; `None` to read it.
    fn unchanged(
        &mut self,
        dfd: BorrowedFd<'_>,
        name: &[u8],
        rel: &str,
        rec: &Record,
    ) -> Result<Option<(i32, Oid)>, Error> {
        let Ok(st) = statat(dfd, name, AtFlags::SYMLINK_NOFOLLOW) else {
            return Ok(None);
        };
        let stat = StatKey::of(&st);
        if stat != rec.stat {
            return Ok(None);
        }
        let mode = match FileType::from_raw_mode(stat.mode()) {
            FileType::Symlink => MODE_LINK,
            FileType::RegularFile if stat.mode() & 0o100 != 0 => MODE_EXEC,
            FileType::RegularFile => MODE_FILE,
            _ => return Ok(None),
        };
        // The path is only spelled out for an error: this runs for every file.
        self.account(stat.size(), || join(rel, &String::from_utf8_lossy(name)))?;
        self.hits += 1;
        Ok(Some((mode, rec.id)))
    }

    /// Charge `bytes` (of the file at `path()`) against the per-file and
    /// total limits.
    fn account(&mut self, bytes: u64, path: impl FnOnce() -> String) -> Result<(), Error> {
        if bytes > self.limits.max_file_bytes {
            return Err(self.limit(path(), "file size", self.limits.max_file_bytes));
        }
        self.total = self.total.saturating_add(bytes);
        if self.total > self.limits.max_total_bytes {
            return Err(self.limit(path(), "total size", self.limits.max_total_bytes));
        }
        Ok(())
    }

    fn io(&self, rel: &str, context: &'static str, source: std::io::Error) -> Error {
        io(self.root.join(rel), context)(source)
    }

    fn limit(&self, path: String, limit: &'static str, max: u64) -> Error {
        Error::LimitExceeded { path, limit, max }
    }

    fn extra(&mut self, path: String, entry: EntryKind) {
        self.extras.push(Change {
            path,
            kind: ChangeKind::Added,
            entry,
        });
    }
}

/// Read a regular file of `size` bytes (per fstat) into `buf`, at most
/// `max + 1` bytes. One `read` of `size + 1` bytes that returns exactly `size`
/// has reached the end, which saves the usual extra zero-length read; if the
/// file turns out longer (it grew since fstat), keep reading up to the limit.
fn read_file(mut f: std::fs::File, size: u64, max: u64, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let cap = size.min(max).saturating_add(1);
    buf.clear();
    buf.resize(usize::try_from(cap).unwrap_or(usize::MAX), 0);
    let mut filled = 0;
    loop {
        let n = match f.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        filled += n;
        if n == 0 || filled as u64 == size {
            break;
        }
        if filled == buf.len() {
            if filled as u64 > max {
                break;
            }
            let grown = (buf.len() as u64)
                .saturating_mul(2)
                .min(max.saturating_add(1));
            buf.resize(usize::try_from(grown).unwrap_or(usize::MAX), 0);
        }
    }
    buf.truncate(filled);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::read_file;

    fn read(content: &[u8], claimed: u64, max: u64) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, content).unwrap();
        let mut buf = vec![7; 3];
        read_file(std::fs::File::open(&p).unwrap(), claimed, max, &mut buf).unwrap();
        buf
    }

    #[test]
    fn reads_whole_files_even_when_fstat_was_stale() {
        assert_eq!(read(b"hello", 5, 100), b"hello");
        assert_eq!(read(b"", 0, 100), b"");
        // Grew since fstat: keep reading.
        assert_eq!(read(&[1; 5000], 10, 10_000), vec![1; 5000]);
        // Grew past the limit: stop one byte past it, for the caller to refuse.
        assert_eq!(read(&[1; 5000], 10, 100).len(), 101);
        // Shrank since fstat.
        assert_eq!(read(b"abc", 10, 100), b"abc");
    }
}
