//! Tree → plain directory. Creation is descriptor-relative and exclusive
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`, `mkdirat`), so a malformed tree with a
//! duplicate name can never write through a link it created a moment before.

use std::cell::RefCell;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use git2::{ObjectType, Odb, Repository, Tree};
use rustix::fs::{
    AtFlags, CWD, Mode, OFlags, Timespec, Timestamps, UTIME_NOW, fchmod, fstat, futimens, mkdirat,
    openat, statat, symlinkat,
};

use crate::cache::BlobCache;
use crate::error::{Error, git, io};
use crate::statcache::{self, Recorder, Worktree};
use crate::tree::{
    self, Entry, MODE_EXEC, MODE_FILE, MODE_GITLINK, MODE_LINK, MODE_TREE, is_regular,
};
use crate::{MAX_DEPTH, join};

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
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root = openat(CWD, dest, flags, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
            Error::NotADirectory(dest.to_path_buf())
        }
        e => io(dest, "opening")(e.into()),
    })?;
    let w = Writer {
        repo,
        odb: repo.odb().map_err(git("opening the object database"))?,
        dest,
        umask: current_umask(),
        cache,
        recorder: RefCell::new(statcache::tracks_all_writes(root.as_fd()).then(Recorder::default)),
    };
    w.tree(tree, root.as_fd(), "", 0)?;
    let Some(recorder) = w.recorder.into_inner() else {
        return Ok(None);
    };
    Ok(fence(root.as_fd()).and_then(|(root_st, fence_st)| recorder.finish(&root_st, &fence_st)))
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
}

impl Writer<'_> {
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
        if depth > MAX_DEPTH {
            return Err(Error::LimitExceeded {
                path: rel.to_string(),
                limit: "directory depth",
                max: MAX_DEPTH as u64,
            });
        }
        let recording = self.recorder.borrow().is_some();
        // The entries as a snapshot would store them, when recording.
        let mut stored = Vec::new();
        for e in tree.iter() {
            let name = e.name_bytes();
            let path = join(rel, &String::from_utf8_lossy(name));
            let Some(name) = safe_name(name) else {
                return Err(Error::UnsafeName {
                    name: String::from_utf8_lossy(e.name_bytes()).into_owned(),
                    path,
                });
            };
            let mode = e.filemode();
            let stored_mode = match mode {
                MODE_TREE => {
                    let err = |e: rustix::io::Errno| self.io(&path, "creating directory", e);
                    mkdirat(dfd, name, Mode::from_raw_mode(0o755)).map_err(err)?;
                    let flags =
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                    let sub = openat(dfd, name, flags, Mode::empty()).map_err(err)?;
                    if self.masked(0o755) {
                        fchmod(&sub, Mode::from_raw_mode(0o755)).map_err(err)?;
                    }
                    let t = tree::find_tree(self.repo, e.id(), &path)?;
                    let sub_id = self.tree(&t, sub.as_fd(), &path, depth + 1)?;
                    if recording {
                        // The shortcut holds only if the snapshot's tree is
                        // the one written (so the object exists).
                        let shortcut = sub_id.filter(|id| *id == e.id());
                        if let Some(r) = self.recorder.borrow_mut().as_mut() {
                            r.subdir(rel, name.as_bytes(), shortcut);
                        }
                        if let Some(id) = sub_id {
                            stored.push(Entry {
                                name: name.as_bytes().to_vec(),
                                mode: MODE_TREE,
                                id,
                            });
                        }
                    }
                    continue;
                }
                MODE_LINK => {
                    let mut utf8 = false;
                    self.with_blob(e.id(), &path, |target| {
                        utf8 = std::str::from_utf8(target).is_ok();
                        symlinkat(target, dfd, name)
                            .map_err(|e| self.io(&path, "creating symlink", e))
                    })?;
                    self.record(dfd, rel, name, e.id(), None, true);
                    // A snapshot does not store a non-UTF-8 target (it
                    // reports it as special).
                    if !utf8 {
                        continue;
                    }
                    MODE_LINK
                }
                MODE_GITLINK => return Err(Error::Gitlink(path)),
                m if is_regular(m) => {
                    let perm = if m & 0o100 != 0 { 0o755 } else { 0o644 };
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
            if recording {
                stored.push(Entry {
                    name: name.as_bytes().to_vec(),
                    mode: stored_mode,
                    id: e.id(),
                });
            }
        }
        if !recording || stored.is_empty() {
            return Ok(None);
        }
        let body = tree::serialize(&mut stored);
        let id = git2::Oid::hash_object(ObjectType::Tree, &body).map_err(git("hashing a tree"))?;
        // The directory's own lstat, now that every name in it is written.
        let st = fstat(dfd).ok();
        if let Some(r) = self.recorder.borrow_mut().as_mut() {
            r.dir_done(rel, st.as_ref(), (id == tree.id()).then_some(id));
        }
        Ok(Some(id))
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
        r.leaf(rel, name.as_bytes(), link, st.ok().as_ref(), id);
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
