//! What every command shares, below all of them: the error a command reports
//! ([`CliError`]: what, where, what to do), JSON on stdout, and the async runtime of
//! commands that call operators. `cli`, `bench`, `selftest` and `viewer` import it; it
//! imports nothing of theirs (the layering is in docs/ARCHITECTURE.md).

use std::fmt;
use std::process::ExitCode;

/// An error for the user: what went wrong, where, and what to do about it.
#[derive(Debug)]
pub struct CliError {
    pub what: String,
    pub place: Option<String>,
    pub hint: Option<String>,
    pub code: u8,
    /// Lines listed under `what` (every problem of a recipe). Each is escaped on its own:
    /// a newline inside one is shown, never obeyed, so no text can fake a line.
    pub details: Vec<String>,
}

impl CliError {
    pub fn usage(what: impl Into<String>) -> Self {
        CliError {
            what: what.into(),
            place: None,
            hint: None,
            code: 2,
            details: Vec::new(),
        }
    }
    pub fn at(mut self, place: impl Into<String>) -> Self {
        self.place = Some(place.into());
        self
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// On a terminal each part is one escaped line: an error can quote what an operator
/// returned, a path in a candidate tree or a line of the archive.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "evolve: {}", crate::display::text(&self.what))?;
        if let Some(place) = &self.place {
            write!(f, " ({})", crate::display::text(place))?;
        }
        for line in &self.details {
            write!(f, "\n  {}", crate::display::text(line))?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {}", crate::display::text(hint))?;
        }
        Ok(())
    }
}

pub type CliResult = Result<ExitCode, CliError>;

/// The async runtime (multi-thread, two workers) of the commands that call operators.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::usage(format!("cannot start the async runtime: {e}")))
}

/// Print a JSON value, pretty.
pub fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}
