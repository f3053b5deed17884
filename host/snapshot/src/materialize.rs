//! Tree → plain directory. Creation is descriptor-relative and exclusive
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`, `mkdirat`), so a malformed tree with a
//! duplicate name can never write through a link it created a moment before.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use git2::{ObjectType, Odb, Repository, Tree};
use rustix::fs::{
    AtFlags, CWD, Dir, FileType, Mode, OFlags, Timespec, Timestamps, UTIME_NOW, chmodat, fchmod,
    fstat, futimens, mkdirat, openat, statat, symlinkat, unlinkat,
};

use crate::cache::BlobCache;
use crate::error::{Error, git, io};
use crate::statcache::{self, Lstat, Recorder, StatKey, Worktree};
use crate::tree::{
    self, Entry, MODE_EXEC, MODE_FILE, MODE_GITLINK, MODE_LINK, MODE_TREE, is_regular,
};
use crate::{MAX_DEPTH, dir_flags, join};

pub(crate) fn materialize(
    repo: &Repository,
    cache: &RefCell<BlobCache>,
    tree: &Tree<'_>,
    dest: &Path,
) -> Result<Option<Worktree>, Error> {
    match dest.symlink_metadata() {
        Ok(m) if !m.is_dir() => return Err(Error::NotADirectory(dest.to_path_buf())),
        Ok(_) => {
            let mut it = std::fs::read_dir(dest).map_err(io(dest, "listing"))?;
            if it.next().is_some() {
                return Err(Error::DestinationNotEmpty(dest.to_path_buf()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dest).map_err(io(dest, "creating"))?;
        }
        Err(e) => return Err(io(dest, "inspecting")(e)),
    }
    let root = open_root(dest)?;
    let w = Writer::new(repo, cache, dest, root.as_fd(), None)?;
    w.tree(tree, root.as_fd(), "", 0)?;
    Ok(w.finish(root.as_fd()))
}

/// What [`reconcile`] did, for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Files left in place: their `lstat` proved them unchanged since this
    /// store wrote them with the wanted content and mode.
    pub kept: u64,
    /// Entries written (a written directory counts once).
    pub written: u64,
    /// Names removed (a removed directory counts once).
    pub removed: u64,
    /// Directories listed: those whose names the records could not vouch for.
    pub listed: u64,
}

/// Turn the existing directory `dest` into exactly `tree`, as `materialize`
/// would write it, reusing the regular files that `old` (this store's
/// records of `dest`) proves unchanged and rewriting or removing everything
/// else. Returns the new records and what was done.
pub(crate) fn reconcile(
    repo: &Repository,
    cache: &RefCell<BlobCache>,
    old: Option<Worktree>,
    tree: &Tree<'_>,
    dest: &Path,
) -> Result<(Option<Worktree>, Reconciled), Error> {
    let root = open_root(dest)?;
    // Records describe the directory they were taken of, not whatever
    // directory is at that path now.
    let old = old.filter(|w| fstat(&root).is_ok_and(|st| w.same_root(&st)));
    let w = Writer::new(repo, cache, dest, root.as_fd(), old.as_ref())?;
    w.sync(tree, root.as_fd(), "", 0)?;
    let done = w.done.get();
    Ok((w.finish(root.as_fd()), done))
}

/// Open `dest` as a real directory (never through a symlink).
fn open_root(dest: &Path) -> Result<rustix::fd::OwnedFd, Error> {
    openat(CWD, dest, dir_flags(), Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            Error::NotADirectory(dest.to_path_buf())
        }
        e => io(dest, "opening")(e.into()),
    })
}

/// Touch the root directory's times and read back its ctime: every file
/// written before has a ctime at or before it, every later change one at or
/// after it (see `statcache`). Touched twice: with multigrain timestamps
/// (Linux 6.13+) a change gets a fine-grained time only when the coarse
/// clock would not show it, i.e. when the inode already has a queried ctime
/// in the current tick. The first touch (then `fstat`) makes that so, and
/// the second then stamps a time past every coarse ctime written in this
/// tick, so files written in the last tick are not all racy. `None` when
/// the root's times cannot be set.
fn fence(root: BorrowedFd<'_>) -> Option<(rustix::fs::Stat, rustix::fs::Stat)> {
    let before = fstat(root).ok()?;
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: UTIME_NOW,
    };
    let times = Timestamps {
        last_access: now,
        last_modification: now,
    };
    futimens(root, &times).ok()?;
    fstat(root).ok()?;
    futimens(root, &times).ok()?;
    let after = fstat(root).ok()?;
    Some((before, after))
}

struct Writer<'r> {
    repo: &'r Repository,
    odb: Odb<'r>,
    dest: &'r Path,
    /// The process umask if known; `None` means "fix every mode".
    umask: Option<u32>,
    cache: &'r RefCell<BlobCache>,
    /// Stat records of what was written, when the filesystem is one whose
    /// ctimes can be trusted.
    recorder: RefCell<Option<Recorder>>,
    /// When reconciling: the records of the directory's previous content.
    old: Option<&'r Worktree>,
    done: Cell<Reconciled>,
}

impl<'r> Writer<'r> {
    fn new(
        repo: &'r Repository,
        cache: &'r RefCell<BlobCache>,
        dest: &'r Path,
        root: BorrowedFd<'_>,
        old: Option<&'r Worktree>,
    ) -> Result<Writer<'r>, Error> {
        Ok(Writer {
            repo,
            odb: repo.odb().map_err(git("opening the object database"))?,
            dest,
            umask: current_umask(),
            cache,
            recorder: RefCell::new(statcache::tracks_all_writes(root).then(Recorder::default)),
            old,
            done: Cell::default(),
        })
    }

    /// The records of everything written, once the fence is set (`None`
    /// when not recording or when the root's times cannot be set).
    fn finish(self, root: BorrowedFd<'_>) -> Option<Worktree> {
        let recorder = self.recorder.into_inner()?;
        fence(root).and_then(|(root_st, fence_st)| recorder.finish(&root_st, &fence_st))
    }

    /// Write `tree` into `dfd`. When recording, returns the id a snapshot
    /// of the directory would compute if nothing changed (`None`: it would
    /// be empty and omitted).
    fn tree(
        &self,
        tree: &Tree<'_>,
        dfd: BorrowedFd<'_>,
        rel: &str,
        depth: usize,
    ) -> Result<Option<git2::Oid>, Error> {
        check_depth(depth, rel)?;
        let recording = self.recorder.borrow().is_some();
        // The entries as a snapshot would store them, when recording.
        let mut stored = Vec::new();
        for e in tree.iter() {
            let name = checked_name(&e, rel)?;
            stored.extend(self.write_entry(&e, name, dfd, rel, depth)?);
        }
        self.dir_written(tree, dfd, rel, recording, stored)
    }

    /// Create the entry `e` (named `name`, absent from `dfd`). Returns the
    /// entry a snapshot would store for it when recording (`None`: not
    /// stored, or not recording).
    fn write_entry(
        &self,
        e: &git2::TreeEntry<'_>,
        name: &str,
        dfd: BorrowedFd<'_>,
        rel: &str,
        depth: usize,
    ) -> Result<Option<Entry>, Error> {
        let recording = self.recorder.borrow().is_some();
        let path = join(rel, name);
        let mode = e.filemode();
        let stored_mode = match mode {
            MODE_TREE => {
                let err = |e: rustix::io::Errno| self.io(&path, "creating directory", e);
                mkdirat(dfd, name, Mode::from_raw_mode(0o755)).map_err(err)?;
                let sub = openat(dfd, name, dir_flags(), Mode::empty()).map_err(err)?;
                if self.masked(0o755) {
                    fchmod(&sub, Mode::from_raw_mode(0o755)).map_err(err)?;
                }
                let t = tree::find_tree(self.repo, e.id(), &path)?;
                let sub_id = self.tree(&t, sub.as_fd(), &path, depth + 1)?;
                return Ok(self.subdir_written(e, name, rel, sub_id));
            }
            MODE_LINK => {
                let mut utf8 = false;
                self.with_blob(e.id(), &path, |target| {
                    utf8 = std::str::from_utf8(target).is_ok();
                    symlinkat(target, dfd, name).map_err(|e| self.io(&path, "creating symlink", e))
                })?;
                self.record(dfd, rel, name, e.id(), None, true);
                // A snapshot does not store a non-UTF-8 target (it reports
                // it as special).
                if !utf8 {
                    return Ok(None);
                }
                MODE_LINK
            }
            MODE_GITLINK => return Err(Error::Gitlink(path)),
            m if is_regular(m) => {
                let perm = file_perm(m);
                let err = |e: std::io::Error| io(self.dest.join(&path), "writing file")(e);
                let flags = OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC;
                let fd = openat(dfd, name, flags, Mode::from_raw_mode(perm))
                    .map_err(|e| err(e.into()))?;
                if self.masked(perm) {
                    fchmod(&fd, Mode::from_raw_mode(perm)).map_err(|e| err(e.into()))?;
                }
                let mut file = std::fs::File::from(fd);
                self.with_blob(e.id(), &path, |data| file.write_all(data).map_err(err))?;
                self.record(dfd, rel, name, e.id(), Some(file.as_fd()), false);
                if perm == 0o755 { MODE_EXEC } else { MODE_FILE }
            }
            mode => return Err(Error::UnsupportedMode { path, mode }),
        };
        Ok(recording.then(|| Entry {
            name: name.as_bytes().to_vec(),
            mode: stored_mode,
            id: e.id(),
        }))
    }

    /// Record a finished subdirectory `e` of `rel` whose snapshot tree is
    /// `sub_id`; returns its stored entry (none when empty or not recording).
    fn subdir_written(
        &self,
        e: &git2::TreeEntry<'_>,
        name: &str,
        rel: &str,
        sub_id: Option<git2::Oid>,
    ) -> Option<Entry> {
        let mut recorder = self.recorder.borrow_mut();
        let r = recorder.as_mut()?;
        // The shortcut holds only if the snapshot's tree is the one written
        // (so the object exists).
        r.subdir(rel, name.as_bytes(), sub_id.filter(|id| *id == e.id()));
        sub_id.map(|id| Entry {
            name: name.as_bytes().to_vec(),
            mode: MODE_TREE,
            id,
        })
    }

    /// Every entry of `tree` is in `dfd` now: record the directory and
    /// return the id a snapshot of it would compute (see [`Writer::tree`]).
    fn dir_written(
        &self,
        tree: &Tree<'_>,
        dfd: BorrowedFd<'_>,
        rel: &str,
        recording: bool,
        mut stored: Vec<Entry>,
    ) -> Result<Option<git2::Oid>, Error> {
        if !recording || stored.is_empty() {
            return Ok(None);
        }
        let id = if tree::are_entries_of(&stored, tree) {
            tree.id()
        } else {
            let body = tree::serialize(&mut stored);
            git2::Oid::hash_object(ObjectType::Tree, &body).map_err(git("hashing a tree"))?
        };
        // The directory's own lstat, now that every name in it is written.
        let st = fstat(dfd).ok();
        if let Some(r) = self.recorder.borrow_mut().as_mut() {
            r.dir_done(rel, st.as_ref(), (id == tree.id()).then_some(id));
        }
        Ok(Some(id))
    }

    /// Turn the existing directory `dfd` into `tree`: remove every name the
    /// tree does not hold, keep the files the old records prove right,
    /// descend into directories that stay directories, and write the rest as
    /// [`Writer::tree`] would. Returns what `tree` returns.
    fn sync(
        &self,
        tree: &Tree<'_>,
        dfd: BorrowedFd<'_>,
        rel: &str,
        depth: usize,
    ) -> Result<Option<git2::Oid>, Error> {
        check_depth(depth, rel)?;
        let err = |ctx: &'static str| move |e: rustix::io::Errno| self.io(rel, ctx, e);
        // Git holds no directory modes; materialize writes 0755.
        let st = fstat(dfd).map_err(err("inspecting"))?;
        let old = self.old.and_then(|w| w.dir(rel));
        let wanted = |name: &[u8]| safe_name(name).is_some() && tree.get_name_bytes(name).is_some();
        // A directory whose own lstat is as recorded still holds exactly the
        // recorded names (see `DirRecord::stat`), so it needs no listing: it
        // holds a name the tree does not want only when fewer of the tree's
        // names turn out present than were recorded (checked after the loop).
        let known = old.filter(|r| r.stat == Some(StatKey::of(&st)));
        if known.is_none() {
            self.count(|d| d.listed += 1);
            let mut names = list(dfd).map_err(err("listing"))?;
            names.retain(|n| !wanted(n));
            for name in names {
                self.remove(dfd, &name, rel, depth)?;
            }
        }
        if st.st_mode & 0o7777 != 0o755 {
            fchmod(dfd, Mode::from_raw_mode(0o755)).map_err(err("setting the mode of"))?;
        }
        let recording = self.recorder.borrow().is_some();
        let mut stored = Vec::new();
        let mut present = 0;
        for e in tree.iter() {
            let name = checked_name(&e, rel)?;
            let path = join(rel, name);
            let st = match statat(dfd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => Some(Lstat::of(&st)),
                Err(rustix::io::Errno::NOENT) => None,
                Err(e) => return Err(self.io(&path, "inspecting", e)),
            };
            if let Some(st) = st {
                present += 1;
                let is_dir = FileType::from_raw_mode(st.key.mode()) == FileType::Directory;
                if is_dir && e.filemode() == MODE_TREE {
                    let sub = open_dir(dfd, name).map_err(|e| self.io(&path, "opening", e))?;
                    stored.extend(self.sync_subdir(&e, name, rel, &sub, depth)?);
                    continue;
                }
                if let Some(entry) = self.keep(old, &e, name, rel, &st) {
                    stored.extend(recording.then_some(entry));
                    continue;
                }
                self.remove(dfd, name.as_bytes(), rel, depth)?;
            }
            self.count(|d| d.written += 1);
            stored.extend(self.write_entry(&e, name, dfd, rel, depth)?);
        }
        if let Some(r) = known
            && present < r.slots.len()
        {
            let unwanted: Vec<&[u8]> = r
                .slots
                .keys()
                .map(|n| &n[..])
                .filter(|n| !wanted(n))
                .collect();
            for name in unwanted {
                self.remove(dfd, name, rel, depth)?;
            }
        }
        self.dir_written(tree, dfd, rel, recording, stored)
    }

    /// Sync the existing subdirectory `e` (named `name`, opened as `sub`) of
    /// `rel`; returns its stored entry, as [`Writer::subdir_written`].
    fn sync_subdir(
        &self,
        e: &git2::TreeEntry<'_>,
        name: &str,
        rel: &str,
        sub: &rustix::fd::OwnedFd,
        depth: usize,
    ) -> Result<Option<Entry>, Error> {
        let path = join(rel, name);
        let t = tree::find_tree(self.repo, e.id(), &path)?;
        let sub_id = self.sync(&t, sub.as_fd(), &path, depth + 1)?;
        Ok(self.subdir_written(e, name, rel, sub_id))
    }

    /// Whether the file `name` (with `lstat` `st`) can stay as the tree
    /// entry `e`: a regular file, not hard-linked elsewhere, whose `lstat` is
    /// exactly what this store recorded when it wrote `e`'s blob, with `e`'s
    /// permissions. (Symlinks are always rewritten: they are rare and cheap.)
    /// Returns its stored entry, recorded again.
    fn keep(
        &self,
        old: Option<&statcache::DirRecord>,
        e: &git2::TreeEntry<'_>,
        name: &str,
        rel: &str,
        st: &Lstat,
    ) -> Option<Entry> {
        let mode = e.filemode();
        let rec = old?.leaf(name.as_bytes())?;
        let same = is_regular(mode)
            && FileType::from_raw_mode(st.key.mode()) == FileType::RegularFile
            && st.nlink == 1
            && st.key.mode() & 0o7777 == file_perm(mode)
            && rec.id == e.id()
            && rec.stat == st.key;
        if !same {
            return None;
        }
        if let Some(r) = self.recorder.borrow_mut().as_mut() {
            r.leaf(rel, name.as_bytes(), false, Some(st.key), e.id());
        }
        self.count(|d| d.kept += 1);
        let mode = if file_perm(mode) == 0o755 {
            MODE_EXEC
        } else {
            MODE_FILE
        };
        Some(Entry {
            name: name.as_bytes().to_vec(),
            mode,
            id: e.id(),
        })
    }

    /// Remove the name `name` in `dfd` (in `rel`), a whole directory tree
    /// included, and count it.
    fn remove(
        &self,
        dfd: BorrowedFd<'_>,
        name: &[u8],
        rel: &str,
        depth: usize,
    ) -> Result<(), Error> {
        self.unlink(dfd, name, &join(rel, &String::from_utf8_lossy(name)), depth)?;
        self.count(|d| d.removed += 1);
        Ok(())
    }

    /// Unlink `name` (at `path`) from `dfd`; a directory is emptied first,
    /// never following a link. Permissions that would stop it are widened
    /// (a previous user of the directory may have set them).
    fn unlink(
        &self,
        dfd: BorrowedFd<'_>,
        name: &[u8],
        path: &str,
        depth: usize,
    ) -> Result<(), Error> {
        match unlinkat(dfd, name, AtFlags::empty()) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::ISDIR) => {}
            Err(e) => return Err(self.io(path, "removing", e)),
        }
        check_depth(depth + 1, path)?;
        let err = |ctx: &'static str| move |e: rustix::io::Errno| self.io(path, ctx, e);
        let sub = open_dir(dfd, name).map_err(err("opening"))?;
        if fstat(&sub).map_err(err("inspecting"))?.st_mode & 0o700 != 0o700 {
            fchmod(&sub, Mode::from_raw_mode(0o700)).map_err(err("setting the mode of"))?;
        }
        for child in list(sub.as_fd()).map_err(err("listing"))? {
            let child_path = join(path, &String::from_utf8_lossy(&child));
            self.unlink(sub.as_fd(), &child, &child_path, depth + 1)?;
        }
        unlinkat(dfd, name, AtFlags::REMOVEDIR).map_err(err("removing"))
    }

    fn count(&self, f: impl FnOnce(&mut Reconciled)) {
        let mut d = self.done.get();
        f(&mut d);
        self.done.set(d);
    }

    /// Record what was just written at `rel/name` (its open `file`, or the
    /// symlink by name). A failed `stat` leaves it without a record (a
    /// snapshot then reads it).
    fn record(
        &self,
        dfd: BorrowedFd<'_>,
        rel: &str,
        name: &str,
        id: git2::Oid,
        file: Option<BorrowedFd<'_>>,
        link: bool,
    ) {
        let mut recorder = self.recorder.borrow_mut();
        let Some(r) = recorder.as_mut() else {
            return;
        };
        let st = match file {
            Some(fd) => fstat(fd),
            None => statat(dfd, name, AtFlags::SYMLINK_NOFOLLOW),
        };
        r.leaf(
            rel,
            name.as_bytes(),
            link,
            st.ok().map(|s| StatKey::of(&s)),
            id,
        );
    }

    /// Whether creating with `perm` loses bits to the umask, so the mode must
    /// be set explicitly (the tree says 0644/0755 whatever the umask is).
    /// With the usual 022 it does not, which saves a system call per file.
    fn masked(&self, perm: u32) -> bool {
        self.umask.is_none_or(|m| perm & m != 0)
    }

    /// Run `f` on a blob's content, from the cache or the object database.
    fn with_blob(
        &self,
        id: git2::Oid,
        path: &str,
        f: impl FnOnce(&[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if let Some(data) = self.cache.borrow().get(&id) {
            return f(data);
        }
        let obj = self
            .odb
            .read(id)
            .map_err(|e| git(format!("reading blob {id} for {path}"))(e))?;
        if obj.kind() != ObjectType::Blob {
            return Err(Error::NotFound(format!("blob {id} for {path}")));
        }
        self.cache.borrow_mut().insert(id, obj.data());
        f(obj.data())
    }

    fn io(&self, rel: &str, context: &'static str, e: rustix::io::Errno) -> Error {
        io(self.dest.join(rel), context)(e.into())
    }
}

/// The umask from `/proc/self/status` (Linux 4.7+), read without changing
/// it (`umask(2)` can only be read by setting it, which races other threads).
fn current_umask() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

/// `e`'s name, which must be a single safe path component (see [`safe_name`]).
fn checked_name<'t>(e: &'t git2::TreeEntry<'_>, rel: &str) -> Result<&'t str, Error> {
    safe_name(e.name_bytes()).ok_or_else(|| Error::UnsafeName {
        name: String::from_utf8_lossy(e.name_bytes()).into_owned(),
        path: join(rel, &String::from_utf8_lossy(e.name_bytes())),
    })
}

/// Refuse to go deeper than [`MAX_DEPTH`] (a hostile tree must not exhaust the stack).
fn check_depth(depth: usize, path: &str) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::LimitExceeded {
            path: path.to_string(),
            limit: "directory depth",
            max: MAX_DEPTH as u64,
        });
    }
    Ok(())
}

/// Every name in the directory `dfd` but `.` and `..`.
fn list(dfd: BorrowedFd<'_>) -> rustix::io::Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    let mut dir = Dir::read_from(dfd)?;
    while let Some(ent) = dir.read() {
        let name = ent?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    Ok(names)
}

/// Open the subdirectory `name` of `dfd` (never through a link); when its
/// permissions refuse, make it the owner's (0700) and try once more.
fn open_dir<P: rustix::path::Arg + Copy>(
    dfd: BorrowedFd<'_>,
    name: P,
) -> rustix::io::Result<rustix::fd::OwnedFd> {
    match openat(dfd, name, dir_flags(), Mode::empty()) {
        Err(rustix::io::Errno::ACCESS) => {
            chmodat(dfd, name, Mode::from_raw_mode(0o700), AtFlags::empty())?;
            openat(dfd, name, dir_flags(), Mode::empty())
        }
        r => r,
    }
}

/// The permissions a regular file of tree mode `mode` is written with.
fn file_perm(mode: i32) -> u32 {
    if mode & 0o100 != 0 { 0o755 } else { 0o644 }
}

/// The name as a single safe path component: UTF-8, not empty, `.` or `..`,
/// no `/` or NUL, and no case of `.git` (a checked-out `.git` would turn the
/// directory into a nested repository).
fn safe_name(name: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(name).ok()?;
    let ok = !s.is_empty()
        && s != "."
        && s != ".."
        && !s.contains(['/', '\0'])
        && !s.eq_ignore_ascii_case(".git");
    ok.then_some(s)
}
