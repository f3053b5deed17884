//! Reading what an operator left behind, as hostile input.
//!
//! A read-write guest can plant symlinks that point outside its grants (it cannot follow
//! them itself, but a careless host would), write huge files, and use odd names. Every
//! host-side read of an operator-written tree goes through this module:
//!
//! * all access is through a cap-std directory handle, so no path can resolve outside
//!   the tree, and symlinks are reported, never followed;
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
                write!(f, "{path:?}: not a relative path inside the tree")
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
    walk_dir(&dir, "", 0, limits, &mut out, &mut |_, _, _| Ok(true))?;
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

/// [`walk`] `root` and read every regular file, each through the walk's own handle on
/// its directory with `O_NOFOLLOW` (a file swapped for a link after it was listed fails
/// to open), within `limits` for each file and for all of them. Entries whose name
/// `skip` accepts are neither listed nor entered. Files are read on every core: the walk
/// keeps a handle on each directory that holds files (up to [`MAX_HELD_DIRS`]; files in
/// further directories are read during the walk).
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
    let mut total = 0u64;
    walk_dir(
        &dir,
        "",
        0,
        limits,
        &mut entries,
        &mut |dir, name, entry| {
            if skip(name) {
                return Ok(false);
            }
            let EntryKind::File { executable, len } = entry.kind else {
                return Ok(true);
            };
            if len > limits.max_file_bytes {
                return Err(TreeError::TooBig {
                    path: entry.path.clone(),
                    len,
                    limit: limits.max_file_bytes,
                });
            }
            total += len;
            if total > limits.max_total_bytes {
                return Err(TreeError::TotalTooBig {
                    limit: limits.max_total_bytes,
                });
            }
            let file = FileRead {
                path: entry.path.clone(),
                executable,
                bytes: Vec::new(),
            };
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
                Some(h) => pending.push((h, name.to_string(), len, file)),
                None => {
                    let bytes = open_read(dir, name, &file.path, len, limits.max_file_bytes)?;
                    read_now.push(FileRead { bytes, ..file });
                }
            }
            Ok(true)
        },
    )?;
    let mut files = read_pending(pending, limits.max_file_bytes)?;
    files.extend(read_now);
    // Sizes were checked as listed; a file that grew since is bounded by its own read,
    // and the sum is checked again as read.
    let read: u64 = files.iter().map(|f| f.bytes.len() as u64).sum();
    if read > limits.max_total_bytes {
        return Err(TreeError::TotalTooBig {
            limit: limits.max_total_bytes,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((entries, files))
}

/// Directory handles [`read_tree`] keeps open at most (each is a file descriptor).
pub const MAX_HELD_DIRS: usize = 512;

/// A file [`read_tree`] listed, to read: its directory's handle, its name there, its
/// size as listed, and the file (contents still empty).
type Pending = (std::sync::Arc<Dir>, String, u64, FileRead);

/// Read the listed files on every core, in contiguous slices.
fn read_pending(pending: Vec<Pending>, max_file_bytes: u64) -> Result<Vec<FileRead>, TreeError> {
    let read_one = |(dir, name, len, file): Pending| {
        open_read(&dir, &name, &file.path, len, max_file_bytes)
            .map(|bytes| FileRead { bytes, ..file })
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads < 2 || pending.len() < 64 {
        return pending.into_iter().map(read_one).collect();
    }
    let per = pending.len().div_ceil(threads);
    let mut slices = Vec::with_capacity(threads);
    let mut rest = pending;
    while rest.len() > per {
        let tail = rest.split_off(per);
        slices.push(rest);
        rest = tail;
    }
    slices.push(rest);
    std::thread::scope(|s| {
        let workers: Vec<_> = slices
            .into_iter()
            .map(|slice| {
                s.spawn(move || {
                    slice
                        .into_iter()
                        .map(read_one)
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut files = Vec::new();
        for w in workers {
            // A worker's panic is re-raised here, as if read on this thread.
            files.extend(w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?);
        }
        Ok(files)
    })
}

/// What [`walk_dir`] asks of each entry before listing it: given the entry's directory
/// handle and name, `Ok(false)` leaves it out (and does not enter it).
type Visit<'a> = dyn FnMut(&Dir, &str, &Entry) -> Result<bool, TreeError> + 'a;

fn walk_dir(
    dir: &Dir,
    prefix: &str,
    depth: usize,
    limits: TreeLimits,
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
        names.push(name);
    }
    names.sort();
    for name in names {
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
        let meta = dir.symlink_metadata(&name).map_err(|e| io_err(&path, e))?;
        let ft = meta.file_type();
        let kind = if ft.is_symlink() {
            let target = dir
                .read_link_contents(&name)
                .map_err(|e| io_err(&path, e))?;
            EntryKind::Symlink {
                target: target.to_string_lossy().to_string(),
            }
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
        };
        let is_dir = kind == EntryKind::Dir;
        let entry = Entry {
            path: path.clone(),
            kind,
        };
        if !visit(dir, &name, &entry)? {
            continue;
        }
        out.push(entry);
        if is_dir {
            let sub = dir.open_dir(&name).map_err(|e| io_err(&path, e))?;
            walk_dir(&sub, &path, depth + 1, limits, out, visit)?;
        }
    }
    Ok(())
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
    if meta.len() > max_bytes {
        return Err(TreeError::TooBig {
            path: relative.to_string(),
            len: meta.len(),
            limit: max_bytes,
        });
    }
    open_read(&parent_dir, &name, relative, meta.len(), max_bytes)
}

/// Open `name` in `parent_dir` without following a link and read at most `max_bytes`
/// of it (`relative` names it in errors; `listed` is its size when it was listed).
fn open_read(
    parent_dir: &Dir,
    name: &str,
    relative: &str,
    listed: u64,
    max_bytes: u64,
) -> Result<Vec<u8>, TreeError> {
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.read(true);
    {
        use cap_std::fs::OpenOptionsExt;
        // O_NOFOLLOW: the entry was a regular file a moment ago; if it was swapped for
        // a link since, the open fails instead of following it.
        opts.custom_flags(libc_o_nofollow());
    }
    let file = parent_dir
        .open_with(name, &opts)
        .map_err(|e| io_err(relative, e))?;
    // Room for the listed size and one byte more, so a file that did not change is
    // read in one call (and the end found by a second).
    let mut buf = Vec::with_capacity(listed.min(max_bytes) as usize + 1);
    file.take(max_bytes + 1)
        .read_to_end(&mut buf)
        .map_err(|e| io_err(relative, e))?;
    if buf.len() as u64 > max_bytes {
        return Err(TreeError::TooBig {
            path: relative.to_string(),
            len: buf.len() as u64,
            limit: max_bytes,
        });
    }
    Ok(buf)
}

const fn libc_o_nofollow() -> i32 {
    // O_NOFOLLOW on Linux (all architectures this project builds for).
    0o400000
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

/// Copy the named regular files from `src_root` into `dest` (same relative paths),
/// within `limits`. Returns the copied paths. Used for the artifacts a stage names.
pub fn copy_files(
    src_root: &Path,
    paths: &[String],
    dest: &Path,
    limits: TreeLimits,
) -> Result<Vec<PathBuf>, TreeError> {
    if paths.len() > limits.max_entries {
        return Err(TreeError::TooMany {
            limit: limits.max_entries,
        });
    }
    let dir = open(src_root)?;
    let mut total = 0u64;
    let mut copied = Vec::new();
    for rel in paths {
        let bytes = read_in(&dir, rel, limits.max_file_bytes)?;
        total += bytes.len() as u64;
        if total > limits.max_total_bytes {
            return Err(TreeError::TotalTooBig {
                limit: limits.max_total_bytes,
            });
        }
        let target = dest.join(rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_err(rel, e))?;
        }
        std::fs::write(&target, bytes).map_err(|e| io_err(rel, e))?;
        copied.push(target);
    }
    Ok(copied)
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
        let copied =
            copy_files(&root, &["sub/b.txt".into()], &dest, TreeLimits::default()).unwrap();
        assert_eq!(std::fs::read(&copied[0]).unwrap(), b"world");
        let err = copy_files(&root, &["planted".into()], &dest, TreeLimits::default()).unwrap_err();
        assert_eq!(
            err,
            TreeError::NotAFile {
                path: "planted".into(),
                found: "symlink"
            }
        );
        assert!(!dest.join("planted").exists());
    }
}
