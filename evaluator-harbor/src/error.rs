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
        let e = Self::infra(format!("{what}: {err}")).at_path(path);
        match disk_full(&err) {
            true => e.hint(DISK_FULL_HINT),
            false => e,
        }
    }
}

/// Whether an I/O error says the file system is full (ENOSPC) or a disk quota is spent
/// (EDQUOT): the user must free space, and no retry or repair helps before they do.
pub fn disk_full(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// The hint for [`disk_full`] errors, wherever they happen.
pub const DISK_FULL_HINT: &str = "the disk is full (ENOSPC, no space left on device): free space on the file system that holds this path, then run the command again; `evolve gc` removes a workspace's reproducible run data";

impl fmt::Display for Error {
    /// `message (location)`; a message of several lines (an [`excerpt`] under its first)
    /// has the location at the end of its first line, where the reader looks for it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (first, rest) = match self.message.split_once('\n') {
            Some((first, rest)) => (first, Some(rest)),
            None => (self.message.as_str(), None),
        };
        f.write_str(first)?;
        if let Some(loc) = &self.location {
            write!(f, " ({loc})")?;
        }
        if let Some(rest) = rest {
            write!(f, "\n{rest}")?;
        }
        Ok(())
    }
}

/// The longest line an [`excerpt`] shows; a longer one is cut around the column.
const EXCERPT_WIDTH: usize = 100;

/// Line `line` of `text` (1-based) with carets under `width` characters from `column`
/// (1-based), for an error that points into a file the user wrote:
///
/// ```text
///     2 | timeout_sec = "soon"
///       |               ^^^^^^
/// ```
///
/// Tabs before the column are kept in the caret line, so the carets line up however
/// the terminal sets its tab stops. Empty when `text` has no such line.
pub fn excerpt(text: &str, line: usize, column: usize, width: usize) -> String {
    let Some(source) = text.split('\n').nth(line.saturating_sub(1)) else {
        return String::new();
    };
    let chars: Vec<char> = source.trim_end_matches('\r').chars().collect();
    let column = column.max(1).min(chars.len() + 1);
    // A long line (minified YAML, one-line TOML) is shown from a little before the column.
    let start = column.saturating_sub(EXCERPT_WIDTH / 2).min(chars.len());
    let end = (start + EXCERPT_WIDTH).min(chars.len());
    let shown: String = chars[start..end]
        .iter()
        .map(|&c| if c.is_control() && c != '\t' { ' ' } else { c })
        .collect();
    let pad: String = chars[start..column - 1]
        .iter()
        .map(|&c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    let carets = "^".repeat(width.clamp(1, EXCERPT_WIDTH));
    let number = line.to_string();
    let gutter = " ".repeat(number.len());
    format!("  {number} | {shown}\n  {gutter} | {pad}{carets}")
}

/// The 1-based line and column (in characters) of byte offset `at` of `text`.
pub fn line_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_shows_the_line_and_carets_under_the_column() {
        let text = "a = 1\n\tb = \"x\"\n";
        assert_eq!(excerpt(text, 2, 6, 3), "  2 | \tb = \"x\"\n    | \t    ^^^");
        // A position past the text (an error at the end of the input) shows nothing.
        assert_eq!(excerpt(text, 9, 1, 1), "");
        // A column past the line's end points just after it.
        assert_eq!(excerpt("ab", 1, 80, 1), "  1 | ab\n    |   ^");
        // A long line is shown from a little before the column, at most 100 characters.
        let long = "x".repeat(300);
        let shown = excerpt(&long, 1, 200, 1);
        let first = shown.lines().next().unwrap();
        assert_eq!(first.len(), "  1 | ".len() + EXCERPT_WIDTH);
        assert!(shown.ends_with(&format!("{}^", " ".repeat(EXCERPT_WIDTH / 2 - 1))));
        assert_eq!(line_column("ab\ncé\nd", 5), (2, 2));
        assert_eq!(line_column("ab", 99), (1, 3));
    }

    #[test]
    fn a_multi_line_message_has_its_location_on_the_first_line() {
        let e = Error::invalid_task("bad value\n  2 | x = y\n    |     ^").at("t.toml:2:5");
        assert_eq!(
            e.to_string(),
            "bad value (t.toml:2:5)\n  2 | x = y\n    |     ^"
        );
    }
}
