//! The crate's one error type. Every variant names the path (or object, tag,
//! pattern) involved and what was expected, because these messages end up in
//! archived attempt records and must be actionable without a debugger.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong in this crate.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A libgit2 call failed; `context` says what was being done to what.
    Git {
        context: String,
        source: git2::Error,
    },
    /// A filesystem call failed on `path`.
    Io {
        path: PathBuf,
        context: &'static str,
        source: std::io::Error,
    },
    /// `Store::init` found `<dir>/.git` already present.
    AlreadyInitialized(PathBuf),
    /// `Store::open` found no repository at `<dir>/.git`.
    NotARepository { path: PathBuf, source: git2::Error },
    /// A directory was expected (snapshot root, materialize destination) but
    /// the path is something else, e.g. a symlink.
    NotADirectory(PathBuf),
    /// `materialize` needs an absent or empty destination.
    DestinationNotEmpty(PathBuf),
    /// A tree holds a gitlink (submodule, mode 160000) entry.
    Gitlink(String),
    /// A tree entry name is not a safe single path component.
    UnsafeName { path: String, name: String },
    /// A tree entry has a mode this crate does not write out.
    UnsupportedMode { path: String, mode: i32 },
    /// A configured limit was exceeded while reading `path`.
    LimitExceeded {
        path: String,
        limit: &'static str,
        max: u64,
    },
    /// A lightweight tag of that name already exists.
    TagExists(String),
    /// Not a valid tag name (`refs/tags/<name>` must be a valid reference).
    InvalidTagName(String),
    /// An object id or tag did not name what the caller expected.
    NotFound(String),
    /// A caller-supplied path is not a clean relative '/'-separated path.
    InvalidPath(String),
    /// A path given twice, or as a file and as a directory holding others.
    PathConflict(String),
    /// `read_blob` found something other than a regular file at `path`.
    NotAFile { path: String, found: &'static str },
    /// A surface glob does not parse.
    InvalidGlob { pattern: String, message: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Git { context, source } => write!(f, "git: {context}: {}", source.message()),
            Error::Io {
                path,
                context,
                source,
            } => write!(f, "{context} {}: {source}", path.display()),
            Error::AlreadyInitialized(p) => write!(
                f,
                "{} already exists; expected a directory without a repository",
                p.display()
            ),
            Error::NotARepository { path, source } => write!(
                f,
                "{}: expected a git repository at {}/.git ({})",
                path.display(),
                path.display(),
                source.message()
            ),
            Error::NotADirectory(p) => write!(
                f,
                "{}: expected a real directory (not a symlink or file)",
                p.display()
            ),
            Error::DestinationNotEmpty(p) => write!(
                f,
                "{}: expected an absent or empty directory to materialize into",
                p.display()
            ),
            Error::Gitlink(p) => write!(
                f,
                "{p}: gitlink (submodule) entry; expected only files, symlinks and directories"
            ),
            Error::UnsafeName { path, name } => write!(
                f,
                "{path}: entry name {name:?} is not a safe single path component"
            ),
            Error::UnsupportedMode { path, mode } => {
                write!(
                    f,
                    "{path}: unsupported tree entry mode {mode:o}; expected 100644, 100755, 120000 or 40000"
                )
            }
            Error::LimitExceeded { path, limit, max } => {
                write!(f, "{path}: exceeds the {limit} limit of {max}")
            }
            Error::TagExists(t) => write!(f, "tag {t} already exists; expected a new tag name"),
            Error::InvalidTagName(t) => write!(f, "{t:?} is not a valid tag name"),
            Error::NotFound(what) => write!(f, "not found: {what}"),
            Error::PathConflict(p) => write!(
                f,
                "{p:?}: given twice, or both as a file and as a directory; expected each path once"
            ),
            Error::InvalidPath(p) => write!(
                f,
                "{p:?}: expected a relative '/'-separated path without empty, '.' or '..' components"
            ),
            Error::NotAFile { path, found } => {
                write!(f, "{path}: expected a regular file, found a {found}")
            }
            Error::InvalidGlob { pattern, message } => {
                write!(f, "surface glob {pattern:?} is invalid: {message}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Git { source, .. } | Error::NotARepository { source, .. } => Some(source),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Attach "what was being done" to a libgit2 error.
pub(crate) fn git(context: impl Into<String>) -> impl FnOnce(git2::Error) -> Error {
    let context = context.into();
    move |source| Error::Git { context, source }
}

/// Attach the path and the attempted operation to an I/O error.
pub(crate) fn io(
    path: impl Into<PathBuf>,
    context: &'static str,
) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io {
        path,
        context,
        source,
    }
}
