//! Reading what an operator left behind, as hostile input.
//!
//! A read-write guest can plant symlinks that point outside its grants (it cannot follow
//! them itself, but a careless host would), write huge files, and use odd names. Every
//! host-side read of an operator-written tree goes through this module:
//!
//! * all access is through a cap-std directory handle (a file is opened by one checked
//!   name relative to its directory's handle), so no path can resolve outside the tree,
//!   and symlinks are reported, never followed;
//! * sizes and entry counts are bounded, and a bound that is hit is an error naming it;
//! * names that are not UTF-8 or contain control characters are reported as such.

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Bounds on one walk or copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    pub max_entries: usize,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
    pub max_depth: usize,
}

impl Default for TreeLimits {
    fn default() -> Self {
        TreeLimits {
            max_entries: 100_000,
            max_file_bytes: 64 << 20,
            max_total_bytes: 1 << 30,
            max_depth: 64,
        }
    }
}

/// One entry of an operator-written tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the tree root, `/`-separated.
    pub path: String,
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    File {
        len: u64,
        executable: bool,
    },
    Dir,
    /// A symlink and its target text (never resolved).
    Symlink {
        target: String,
    },
    /// Sockets, FIFOs, devices.
    Special,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeError {
    Io { path: String, message: String },
    OddName { parent: String },
    TooMany { limit: usize },
    TooBig { path: String, len: u64, limit: u64 },
    TotalTooBig { limit: u64 },
    TooDeep { path: String },
    NotAFile { path: String, found: &'static str },
    BadPath { path: String },
}

impl fmt::Display for TreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeError::Io { path, message } => write!(f, "{path}: {message}"),
            TreeError::OddName { parent } => {
                write!(
                    f,
                    "{parent}: holds a name that is not UTF-8 or contains control characters"
                )
            }
            TreeError::TooMany { limit } => write!(f, "more than {limit} entries"),
            TreeError::TooBig { path, len, limit } => {
                write!(f, "{path}: {len} bytes is over the {limit}-byte limit")
            }
            TreeError::TotalTooBig { limit } => write!(f, "more than {limit} bytes in all"),
            TreeError::TooDeep { path } => write!(f, "{path}: nested too deeply"),
            TreeError::NotAFile { path, found } => {
                write!(f, "{path}: is a {found}, not a regular file")
            }
            TreeError::BadPath { path } => {
                write!(
                    f,
                    "{}: not a relative path inside the tree",
                    crate::display::path(path)
                )
            }
        }
    }
}

impl std::error::Error for TreeError {}

fn io_err(path: &str, e: std::io::Error) -> TreeError {
    TreeError::Io {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.to_string()
        },
        message: e.to_string(),
    }
}

/// Open `root` as a capability handle.
pub fn open(root: &Path) -> Result<Dir, TreeError> {
    Dir::open_ambient_dir(root, ambient_authority())
        .map_err(|e| io_err(&root.display().to_string(), e))
}

/// List every entry under `root`, depth first in name order, without following links.
pub fn walk(root: &Path, limits: TreeLimits) -> Result<Vec<Entry>, TreeError> {
    let dir = open(root)?;
    let mut out = Vec::new();
    walk_dir(
        &dir,
        "",
        0,
        limits,
        Stat::Lstat,
        &mut out,
        &mut |_, _, _, _| Ok(true),
    )?;
    Ok(out)
}

/// A regular file's contents, as [`read_tree`] read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRead {
    /// Path relative to the tree root, `/`-separated.
    pub path: String,
    pub executable: bool,
    pub bytes: Vec<u8>,
}

/// [`walk`] `root` and read every regular file, within `limits` for each file and for
/// all of them. Entries whose name `skip` accepts are neither listed nor entered.
///
/// The walk takes each entry's type from its directory's listing and stats no file: each
/// file is opened through the walk's own handle on its directory with `O_NOFOLLOW` and
/// `O_NONBLOCK`, and its size and mode are those of the open descriptor. So a file
/// swapped for a link after it was listed fails to open, one swapped for a directory or
/// a FIFO is refused without blocking, and the size checked is the size of what is read.
/// Files are read on every core: the walk keeps a handle on each directory that holds
/// files (up to [`MAX_HELD_DIRS`]; files in further directories are read during the
/// walk). The listed entries of files carry the size and mode found when reading.
pub fn read_tree(
    root: &Path,
    limits: TreeLimits,
    skip: &dyn Fn(&str) -> bool,
) -> Result<(Vec<Entry>, Vec<FileRead>), TreeError> {
    let dir = open(root)?;
    let mut entries = Vec::new();
    let mut held: std::collections::HashMap<String, std::sync::Arc<Dir>> = Default::default();
    let mut pending: Vec<Pending> = Vec::new();
    let mut read_now = Vec::new();
    let budget = Budget::new(limits);
    walk_dir(
        &dir,
        "",
        0,
        limits,
        Stat::OnOpen,
        &mut entries,
        &mut |dir, name, entry, at| {
            if skip(name) {
                return Ok(false);
            }
            if !matches!(entry.kind, EntryKind::File { .. }) {
                return Ok(true);
            }
            let parent = entry.path.rsplit_once('/').map_or("", |(p, _)| p);
            let handle = match held.get(parent) {
                Some(h) => Some(h.clone()),
                None if held.len() < MAX_HELD_DIRS => {
                    let h = std::sync::Arc::new(dir.try_clone().map_err(|e| io_err(parent, e))?);
                    held.insert(parent.to_string(), h.clone());
                    Some(h)
                }
                None => None,
            };
            match handle {
                Some(h) => pending.push((h, name.to_string(), entry.path.clone(), at)),
                None => read_now.push((open_read(dir, name, &entry.path, &budget)?, at)),
            }
            Ok(true)
        },
    )?;
    let mut read = read_pending(pending, &budget)?;
    read.extend(read_now);
    let mut files = Vec::with_capacity(read.len());
    for (file, at) in read {
        entries[at].kind = EntryKind::File {
            len: file.bytes.len() as u64,
            executable: file.executable,
        };
        files.push(file);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((entries, files))
}

/// Directory handles [`read_tree`] keeps open at most (each is a file descriptor).
pub const MAX_HELD_DIRS: usize = 512;

/// A file [`read_tree`] listed, to read: its directory's handle, its name there, its
/// path in the tree, and the index of its entry.
type Pending = (std::sync::Arc<Dir>, String, String, usize);

/// The byte limits of one [`read_tree`], shared by its reading threads: each file is
/// charged its size before it is read, so a tree over the total stops at the first file
/// past it rather than after reading everything.
struct Budget {
    max_file_bytes: u64,
    max_total_bytes: u64,
    spent: std::sync::atomic::AtomicU64,
}

impl Budget {
    fn new(limits: TreeLimits) -> Self {
        Budget {
            max_file_bytes: limits.max_file_bytes,
            max_total_bytes: limits.max_total_bytes,
            spent: 0.into(),
        }
    }

    fn charge(&self, path: &str, len: u64) -> Result<(), TreeError> {
        if len > self.max_file_bytes {
            return Err(TreeError::TooBig {
                path: path.to_string(),
                len,
                limit: self.max_file_bytes,
            });
        }
        let before = self
            .spent
            .fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        if before.saturating_add(len) > self.max_total_bytes {
            return Err(TreeError::TotalTooBig {
                limit: self.max_total_bytes,
            });
        }
        Ok(())
    }
}

/// Read the listed files on every core (this thread included), in contiguous slices.
/// Returns each file with its entry's index.
fn read_pending(
    pending: Vec<Pending>,
    budget: &Budget,
) -> Result<Vec<(FileRead, usize)>, TreeError> {
    let read_one = |(dir, name, path, at): Pending| {
        open_read(&dir, &name, &path, budget).map(|file| (file, at))
    };
    let read_all = |slice: Vec<Pending>| {
        slice
            .into_iter()
            .map(read_one)
            .collect::<Result<Vec<_>, _>>()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads < 2 || pending.len() < 64 {
        return read_all(pending);
    }
    let per = pending.len().div_ceil(threads);
    let mut slices = Vec::with_capacity(threads);
    let mut rest = pending;
    while rest.len() > per {
        let tail = rest.split_off(per);
        slices.push(rest);
        rest = tail;
    }
    std::thread::scope(|s| {
        let workers: Vec<_> = slices
            .into_iter()
            .map(|slice| s.spawn(move || read_all(slice)))
            .collect();
        // The last slice is read here while the others are read on their threads.
        let mine = read_all(rest);
        let mut files = Vec::new();
        for w in workers {
            // A worker's panic is re-raised here, as if read on this thread.
            files.extend(w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?);
        }
        files.extend(mine?);
        Ok(files)
    })
}

/// How [`walk_dir`] learns a regular file's size and mode.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stat {
    /// `lstat` each file as it is listed.
    Lstat,
    /// Not at all: the caller opens each file and takes them from the descriptor. Files
    /// are listed as `File { len: 0, executable: false }` for the caller to fill in.
    OnOpen,
}

/// What [`walk_dir`] asks of each entry before listing it: given the entry's directory
/// handle, its name and the index it will have in the listing, `Ok(false)` leaves it out
/// (and does not enter it).
type Visit<'a> = dyn FnMut(&Dir, &str, &Entry, usize) -> Result<bool, TreeError> + 'a;

fn walk_dir(
    dir: &Dir,
    prefix: &str,
    depth: usize,
    limits: TreeLimits,
    stat: Stat,
    out: &mut Vec<Entry>,
    visit: &mut Visit<'_>,
) -> Result<(), TreeError> {
    if depth > limits.max_depth {
        return Err(TreeError::TooDeep {
            path: prefix.to_string(),
        });
    }
    let mut names = Vec::new();
    for entry in dir.entries().map_err(|e| io_err(prefix, e))? {
        let entry = entry.map_err(|e| io_err(prefix, e))?;
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| TreeError::OddName {
                parent: display(prefix),
            })?;
        if name.chars().any(char::is_control) {
            return Err(TreeError::OddName {
                parent: display(prefix),
            });
        }
        // The type the listing gives (`d_type`); unknown on some file systems.
        let listed = entry.file_type().ok();
        names.push((name, listed));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, listed) in names {
        if out.len() >= limits.max_entries {
            return Err(TreeError::TooMany {
                limit: limits.max_entries,
            });
        }
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let kind = match listed {
            Some(ft) if ft.is_file() && stat == Stat::OnOpen => EntryKind::File {
                len: 0,
                executable: false,
            },
            Some(ft) if ft.is_dir() => EntryKind::Dir,
            Some(ft) if ft.is_symlink() => symlink_kind(dir, &name, &path)?,
            Some(ft) if is_special(ft) => EntryKind::Special,
            _ => lstat_kind(dir, &name, &path)?,
        };
        let is_dir = kind == EntryKind::Dir;
        let entry = Entry {
            path: path.clone(),
            kind,
        };
        if !visit(dir, &name, &entry, out.len())? {
            continue;
        }
        out.push(entry);
        if is_dir {
            // `open_dir` refuses a link: a directory swapped for one since it was listed
            // is an error, not a way out.
            let sub = dir.open_dir(&name).map_err(|e| io_err(&path, e))?;
            walk_dir(&sub, &path, depth + 1, limits, stat, out, visit)?;
        }
    }
    Ok(())
}

/// Whether a listed type is a FIFO, socket or device. (A file system may also list an
/// entry's type as unknown, which only a stat resolves.)
fn is_special(ft: cap_std::fs::FileType) -> bool {
    use cap_std::fs::FileTypeExt;
    ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device()
}

fn symlink_kind(dir: &Dir, name: &str, path: &str) -> Result<EntryKind, TreeError> {
    let target = dir.read_link_contents(name).map_err(|e| io_err(path, e))?;
    Ok(EntryKind::Symlink {
        target: target.to_string_lossy().to_string(),
    })
}

/// An entry's kind by `lstat`, with a file's size and mode.
fn lstat_kind(dir: &Dir, name: &str, path: &str) -> Result<EntryKind, TreeError> {
    let meta = dir.symlink_metadata(name).map_err(|e| io_err(path, e))?;
    let ft = meta.file_type();
    Ok(if ft.is_symlink() {
        symlink_kind(dir, name, path)?
    } else if ft.is_dir() {
        EntryKind::Dir
    } else if ft.is_file() {
        use cap_std::fs::PermissionsExt;
        EntryKind::File {
            len: meta.len(),
            executable: meta.permissions().mode() & 0o111 != 0,
        }
    } else {
        EntryKind::Special
    })
}

fn display(prefix: &str) -> String {
    if prefix.is_empty() {
        ".".into()
    } else {
        prefix.to_string()
    }
}

/// Read one regular file at `relative` under `root`, refusing symlinks (at any
/// component), special files and files over `max_bytes`.
pub fn read_file(root: &Path, relative: &str, max_bytes: u64) -> Result<Vec<u8>, TreeError> {
    let dir = open(root)?;
    read_in(&dir, relative, max_bytes)
}

fn read_in(dir: &Dir, relative: &str, max_bytes: u64) -> Result<Vec<u8>, TreeError> {
    let (parent, name) = split_checked(relative)?;
    let parent_dir = open_parents(dir, &parent, relative)?;
    let meta = parent_dir
        .symlink_metadata(&name)
        .map_err(|e| io_err(relative, e))?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let found = if ft.is_symlink() {
            "symlink"
        } else if ft.is_dir() {
            "directory"
        } else {
            "special file"
        };
        return Err(TreeError::NotAFile {
            path: relative.to_string(),
            found,
        });
    }
    let budget = Budget {
        max_file_bytes: max_bytes,
        max_total_bytes: u64::MAX,
        spent: 0.into(),
    };
    open_read(&parent_dir, &name, relative, &budget).map(|f| f.bytes)
}

/// Open `name` in `parent_dir` as a regular file, never following a link or blocking on
/// a FIFO, charge its size to `budget` and read it (`relative` is its path in the tree).
/// The size and mode are the open descriptor's: whatever the entry was when it was
/// listed, what is read is what was checked, and no more than that size is read.
///
/// `name` is one name, never `.`, `..` or a path, so a plain `openat` with `O_NOFOLLOW`
/// stays in `parent_dir` exactly as `openat2`'s `RESOLVE_BENEATH` (cap-std's open)
/// would, for less per file: a target has a thousand of them.
fn open_read(
    parent_dir: &Dir,
    name: &str,
    relative: &str,
    budget: &Budget,
) -> Result<FileRead, TreeError> {
    use rustix::fs::{FileType, Mode, OFlags};
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(TreeError::BadPath {
            path: relative.to_string(),
        });
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(parent_dir, name, flags, Mode::empty())
        .map_err(|e| io_err(relative, e.into()))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| io_err(relative, e.into()))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        other => {
            return Err(TreeError::NotAFile {
                path: relative.to_string(),
                found: if other == FileType::Directory {
                    "directory"
                } else {
                    "special file"
                },
            });
        }
    }
    let len = u64::try_from(stat.st_size).unwrap_or(0);
    budget.charge(relative, len)?;
    // The file as it was when opened: no more than its size then (so one read, and no
    // second to find the end), even if it grows meanwhile.
    let mut buf = Vec::with_capacity(len as usize);
    std::fs::File::from(fd)
        .take(len)
        .read_to_end(&mut buf)
        .map_err(|e| io_err(relative, e))?;
    Ok(FileRead {
        path: relative.to_string(),
        executable: stat.st_mode & 0o111 != 0,
        bytes: buf,
    })
}

/// Open each parent directory, refusing any that is a symlink. (The operator has
/// finished when the host reads its tree, so the check cannot race with it.)
fn open_parents(dir: &Dir, parents: &[String], whole: &str) -> Result<Dir, TreeError> {
    let mut current = dir.try_clone().map_err(|e| io_err(whole, e))?;
    for seg in parents {
        let meta = current
            .symlink_metadata(seg)
            .map_err(|e| io_err(whole, e))?;
        if !meta.file_type().is_dir() {
            let found = if meta.file_type().is_symlink() {
                "symlink"
            } else {
                "file"
            };
            return Err(TreeError::NotAFile {
                path: whole.to_string(),
                found,
            });
        }
        current = current.open_dir(seg).map_err(|e| io_err(whole, e))?;
    }
    Ok(current)
}

fn split_checked(relative: &str) -> Result<(Vec<String>, String), TreeError> {
    crate::sandbox::relative_path("tree", relative).map_err(|_| TreeError::BadPath {
        path: relative.to_string(),
    })?;
    let mut segs: Vec<String> = relative.split('/').map(str::to_string).collect();
    let name = segs.pop().unwrap_or_default();
    Ok((segs, name))
}

/// What [`copy_files`] did: the files it copied, and each named file it refused.
#[derive(Debug, Default)]
pub struct Copied {
    pub copied: Vec<PathBuf>,
    /// One error per refused path (a link, a directory, a bad path, too big, ...).
    pub refused: Vec<TreeError>,
}

/// Copy the named regular files from `src_root` into `dest` (same relative paths),
/// within `limits`. Used for the artifacts a stage names. A file that cannot be copied
/// safely (a link is never followed) is refused on its own: the others are still
/// copied. Only a list over `max_entries`, an unreadable `src_root` or a total past
/// `max_total_bytes` (the files after it are refused) stop the whole copy.
pub fn copy_files(
    src_root: &Path,
    paths: &[String],
    dest: &Path,
    limits: TreeLimits,
) -> Result<Copied, TreeError> {
    if paths.len() > limits.max_entries {
        return Err(TreeError::TooMany {
            limit: limits.max_entries,
        });
    }
    let dir = open(src_root)?;
    let mut total = 0u64;
    let mut out = Copied::default();
    for rel in paths {
        let bytes = match read_in(&dir, rel, limits.max_file_bytes) {
            Ok(b) => b,
            Err(e) => {
                out.refused.push(e);
                continue;
            }
        };
        total += bytes.len() as u64;
        if total > limits.max_total_bytes {
            out.refused.push(TreeError::TotalTooBig {
                limit: limits.max_total_bytes,
            });
            break;
        }
        let target = dest.join(rel);
        let written = target
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&target, bytes));
        match written {
            Ok(()) => out.copied.push(target),
            Err(e) => out.refused.push(io_err(rel, e)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join("target");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(base.path().join("evaluator")).unwrap();
        std::fs::write(base.path().join("evaluator/secret.txt"), "SECRET").unwrap();
        std::fs::write(root.join("a.txt"), "hello").unwrap();
        std::fs::write(root.join("sub/b.txt"), "world").unwrap();
        symlink("../evaluator/secret.txt", root.join("planted")).unwrap();
        symlink("../../evaluator", root.join("sub/escape_dir")).unwrap();
        symlink("/etc/passwd", root.join("abs")).unwrap();
        (base, root)
    }

    /// What [`tree`] holds, in walk order.
    const FIXTURE_PATHS: [&str; 6] = [
        "a.txt",
        "abs",
        "planted",
        "sub",
        "sub/b.txt",
        "sub/escape_dir",
    ];

    fn paths_of(entries: &[Entry]) -> Vec<&str> {
        entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn walk_reports_links_without_following_them() {
        let (_base, root) = tree();
        let entries = walk(&root, TreeLimits::default()).unwrap();
        assert_eq!(paths_of(&entries), FIXTURE_PATHS);
        assert_eq!(
            entries[2].kind,
            EntryKind::Symlink {
                target: "../evaluator/secret.txt".into()
            }
        );
        assert_eq!(
            entries[5].kind,
            EntryKind::Symlink {
                target: "../../evaluator".into()
            }
        );
    }

    #[test]
    fn read_tree_reads_files_lists_links_unfollowed_and_skips_names() {
        let (_base, root) = tree();
        std::fs::create_dir_all(root.join("sub/.git")).unwrap();
        std::fs::write(root.join("sub/.git/config"), "x").unwrap();
        let skip_git = |n: &str| n == ".git";
        let (entries, files) = read_tree(&root, TreeLimits::default(), &skip_git).unwrap();
        assert_eq!(paths_of(&entries), FIXTURE_PATHS);
        let read: Vec<(&str, &[u8])> = files
            .iter()
            .map(|f| (f.path.as_str(), f.bytes.as_slice()))
            .collect();
        assert_eq!(read, [("a.txt", &b"hello"[..]), ("sub/b.txt", b"world")]);
        let small = TreeLimits {
            max_total_bytes: 7,
            ..TreeLimits::default()
        };
        assert_eq!(
            read_tree(&root, small, &skip_git),
            Err(TreeError::TotalTooBig { limit: 7 })
        );
        let tiny = TreeLimits {
            max_file_bytes: 4,
            ..TreeLimits::default()
        };
        assert!(matches!(
            read_tree(&root, tiny, &skip_git),
            Err(TreeError::TooBig { .. })
        ));
    }

    #[test]
    fn read_tree_reads_many_directories_on_every_core_and_past_the_held_handles() {
        let base = tempfile::tempdir().unwrap();
        let n = MAX_HELD_DIRS + 88;
        for i in 0..n {
            let d = base.path().join(format!("d{i:04}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("f"), format!("file {i}")).unwrap();
        }
        let (entries, files) = read_tree(base.path(), TreeLimits::default(), &|_| false).unwrap();
        assert_eq!(entries.len(), 2 * n);
        assert_eq!(files.len(), n);
        for (i, f) in files.iter().enumerate() {
            assert_eq!(f.path, format!("d{i:04}/f"));
            assert_eq!(f.bytes, format!("file {i}").into_bytes());
        }
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    #[test]
    fn read_tree_lists_types_from_the_directory_and_sizes_from_the_descriptor() {
        use std::os::unix::fs::PermissionsExt;
        let (_base, root) = tree();
        std::fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        mkfifo(&root.join("sub/pipe"));
        // A FIFO is listed as special and never opened (opening one blocks).
        let (entries, files) = read_tree(&root, TreeLimits::default(), &|_| false).unwrap();
        let kind = |p: &str| entries.iter().find(|e| e.path == p).unwrap().kind.clone();
        assert_eq!(kind("sub/pipe"), EntryKind::Special);
        assert_eq!(
            kind("run.sh"),
            EntryKind::File {
                len: 10,
                executable: true
            }
        );
        assert_eq!(
            kind("sub/b.txt"),
            EntryKind::File {
                len: 5,
                executable: false
            }
        );
        assert_eq!(files.len(), 3);
        assert!(files.iter().any(|f| f.path == "run.sh" && f.executable));
    }

    #[test]
    fn an_entry_swapped_after_listing_is_refused_by_its_descriptor() {
        // What the walk listed as a regular file may be anything by the time it is
        // opened: a FIFO must not block the read, a directory must not be read.
        let base = tempfile::tempdir().unwrap();
        mkfifo(&base.path().join("was_a_file"));
        std::fs::create_dir(base.path().join("was_a_file_too")).unwrap();
        symlink("/etc/passwd", base.path().join("now_a_link")).unwrap();
        let dir = open(base.path()).unwrap();
        let budget = Budget::new(TreeLimits::default());
        for (name, found) in [
            ("was_a_file", "special file"),
            ("was_a_file_too", "directory"),
        ] {
            assert_eq!(
                open_read(&dir, name, name, &budget),
                Err(TreeError::NotAFile {
                    path: name.into(),
                    found
                })
            );
        }
        assert!(matches!(
            open_read(&dir, "now_a_link", "now_a_link", &budget),
            Err(TreeError::Io { .. })
        ));
        // It opens one name with a plain openat: anything that could leave the
        // directory is refused before the call.
        std::fs::create_dir(base.path().join("sub")).unwrap();
        std::fs::write(base.path().join("sub/f"), "x").unwrap();
        for name in ["..", ".", "", "sub/f", "../etc/passwd", "/etc/passwd"] {
            assert_eq!(
                open_read(&dir, name, name, &budget),
                Err(TreeError::BadPath { path: name.into() }),
                "{name:?}"
            );
        }
        assert_eq!(budget.spent.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[test]
    fn reads_refuse_links_escapes_and_big_files() {
        let (_base, root) = tree();
        assert_eq!(read_file(&root, "sub/b.txt", 100).unwrap(), b"world");
        for (path, found) in [
            ("planted", "symlink"),
            ("abs", "symlink"),
            ("sub", "directory"),
        ] {
            assert_eq!(
                read_file(&root, path, 100),
                Err(TreeError::NotAFile {
                    path: path.into(),
                    found
                })
            );
        }
        assert_eq!(
            read_file(&root, "sub/escape_dir/secret.txt", 100),
            Err(TreeError::NotAFile {
                path: "sub/escape_dir/secret.txt".into(),
                found: "symlink"
            })
        );
        assert!(matches!(
            read_file(&root, "../evaluator/secret.txt", 100),
            Err(TreeError::BadPath { .. })
        ));
        assert_eq!(
            read_file(&root, "a.txt", 3),
            Err(TreeError::TooBig {
                path: "a.txt".into(),
                len: 5,
                limit: 3
            })
        );
    }

    #[test]
    fn odd_names_and_limits_are_errors() {
        let base = tempfile::tempdir().unwrap();
        std::fs::write(base.path().join("line\nbreak"), "x").unwrap();
        assert!(matches!(
            walk(base.path(), TreeLimits::default()),
            Err(TreeError::OddName { .. })
        ));
        let base = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(base.path().join(format!("f{i}")), "x").unwrap();
        }
        let limits = TreeLimits {
            max_entries: 3,
            ..TreeLimits::default()
        };
        assert_eq!(
            walk(base.path(), limits),
            Err(TreeError::TooMany { limit: 3 })
        );
    }

    #[test]
    fn copy_takes_only_regular_files() {
        let (base, root) = tree();
        let dest = base.path().join("out");
        // One bad name among good ones is refused alone (issue 22: it took the valid
        // ones with it).
        let names = ["planted".into(), "sub/b.txt".into(), "a.txt".into()];
        let out = copy_files(&root, &names, &dest, TreeLimits::default()).unwrap();
        assert_eq!(std::fs::read(&out.copied[0]).unwrap(), b"world");
        assert_eq!(std::fs::read(&out.copied[1]).unwrap(), b"hello");
        assert_eq!(
            out.refused,
            [TreeError::NotAFile {
                path: "planted".into(),
                found: "symlink"
            }]
        );
        assert!(!dest.join("planted").exists());
    }
}
