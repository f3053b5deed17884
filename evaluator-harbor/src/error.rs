//! One classified error type for everything the crate reports to a user.
//!
//! Every error names *what* went wrong, *where* (a path, a task, a key) and, when there is one,
//! a hint. The CLI prints it as `evolve: <what> (<where>)` plus `hint: ...`.

use std::fmt;
use std::path::Path;

/// What kind of problem an [`Error`] is; used to classify trials and exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The task directory or `task.toml` is malformed or incomplete.
    InvalidTask,
    /// A frozen task's files no longer match its digest.
    DigestMismatch,
    /// The split configuration or a frozen manifest is invalid.
    InvalidSplit,
    /// The candidate's agent declaration (`agent.toml`, component) is unusable.
    InvalidAgent,
    /// The engine cannot run this task (e.g. it needs Docker on the local engine).
    Unsupported,
    /// Docker, the harbor CLI, the file system or another piece of infrastructure failed.
    Infrastructure,
    /// A user-supplied argument is wrong.
    Usage,
}

/// A classified error: `message (location)` with an optional hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub location: Option<String>,
    pub hint: Option<String>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            location: None,
            hint: None,
        }
    }
    pub fn at(mut self, location: impl Into<String>) -> Self {
        self.location = Some(location.into());
        self
    }
    pub fn at_path(self, path: &Path) -> Self {
        self.at(path.display().to_string())
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    pub fn invalid_task(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidTask, message)
    }
    pub fn infra(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Infrastructure, message)
    }
    /// An I/O error while doing `what` on `path`.
    pub fn io(what: &str, path: &Path, err: std::io::Error) -> Self {
        Self::infra(format!("{what}: {err}")).at_path(path)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(loc) = &self.location {
            write!(f, " ({loc})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
