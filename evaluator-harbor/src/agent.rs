//! The candidate's agent entrypoint declaration: `target/agent.toml`.
//!
//! ```toml
//! # exactly one of:
//! command = ["./run.sh"]          # a process; run with cwd = /app
//! component = "agent.wasm"       # a WASI command component (wasm32-wasip2), fully sandboxed
//!
//! [env]                          # optional literal environment for the agent
//! MODE = "fast"
//! ```
//! Relative paths (`component`, and a `command[0]` containing `/`) are resolved against the
//! directory holding `agent.toml` and must stay inside it.
//! The agent reads its instruction from stdin and from `EVOLVE_INSTRUCTION`.
//!
//! The candidate tree is evolved code, so every file of it is read here without following a
//! link ([`crate::beneath`]): a planted `agent.toml -> /etc/passwd` or a component that links
//! to a gate task is an invalid agent with one message that names only the candidate's own
//! relative path, never a host path and never whether the link's target exists.

use std::collections::BTreeMap;
use std::path::{Component as PathPart, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::beneath::{Beneath, NotRegular};
use crate::error::{Error, ErrorKind, Result};

/// Largest `agent.toml` read.
const MANIFEST_CAP: u64 = 1 << 20;
/// Largest agent component read.
const COMPONENT_CAP: u64 = 256 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    command: Option<Vec<String>>,
    component: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

/// How the agent is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEntry {
    /// argv as declared, except that a `command[0]` naming a file of the agent's directory
    /// is normalized to `./<its path relative to that directory>` (see
    /// [`AgentEntry::program`]).
    Command(Vec<String>),
    /// A WASI command component, read (without following links) when the manifest loaded.
    Component {
        /// Its path relative to the agent's directory.
        path: String,
        bytes: Arc<Vec<u8>>,
    },
}

/// A command's program: a file shipped in the agent's directory, or a name on `PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program<'a> {
    /// Relative to the agent's directory (checked to be an executable regular file).
    Shipped(&'a str),
    /// Looked up on the trial's `PATH`.
    OnPath(&'a str),
}

impl AgentEntry {
    /// What `command[0]` names (`None` for a component).
    pub fn program(&self) -> Option<Program<'_>> {
        match self {
            AgentEntry::Command(argv) => {
                let a0 = argv.first()?;
                Some(if a0.contains('/') {
                    Program::Shipped(a0.strip_prefix("./").unwrap_or(a0))
                } else {
                    Program::OnPath(a0)
                })
            }
            AgentEntry::Component { .. } => None,
        }
    }
}

/// A loaded `agent.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentManifest {
    /// The directory holding `agent.toml` (the candidate's target dir).
    pub dir: PathBuf,
    pub entry: AgentEntry,
    pub env: BTreeMap<String, String>,
}

/// An invalid-agent error located by the agent-relative `name` only.
fn invalid(msg: impl Into<String>, name: &str) -> Error {
    Error::new(ErrorKind::InvalidAgent, msg).at(format!("{name} in the agent directory"))
}

/// The one message for a candidate file that is a link, a directory, a device or missing:
/// the host never follows the link, so it cannot (and must not) say where it leads.
fn not_regular(name: &str) -> Error {
    invalid(
        format!("{name} is not a regular file of the agent directory (links are never followed)"),
        name,
    )
    .hint("the agent's files (agent.toml, the component, a shipped command) must be regular files inside the target directory")
}

/// `rel` as a normalized relative path inside the agent directory (`./a//b` → `a/b`).
fn inside(rel: &str, manifest: &str) -> Result<String> {
    let p = Path::new(rel);
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            PathPart::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            PathPart::CurDir => {}
            PathPart::RootDir | PathPart::Prefix(_) | PathPart::ParentDir => {
                return Err(invalid(
                    format!("path {rel:?} must be relative and stay inside the target directory"),
                    manifest,
                ));
            }
        }
    }
    if parts.is_empty() {
        return Err(invalid(format!("path {rel:?} names no file"), manifest));
    }
    Ok(parts.join("/"))
}

fn read_regular(dir: &Beneath, name: &str, cap: u64) -> Result<Vec<u8>> {
    match dir.read(name, cap) {
        Ok(bytes) => Ok(bytes),
        Err(NotRegular::Refused) => Err(not_regular(name)),
        Err(NotRegular::TooLarge) => Err(invalid(
            format!("{name} is larger than {} MiB", cap >> 20),
            name,
        )),
        Err(NotRegular::Io(e)) => Err(invalid(format!("cannot read {name}: {e}"), name)),
    }
}

impl AgentManifest {
    /// Load from a target directory (reads `agent.toml`) or from the manifest file itself.
    pub fn load(path: &Path) -> Result<AgentManifest> {
        let (dir, file) = match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => (path.to_path_buf(), "agent.toml".to_string()),
            _ => (
                path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                path.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "agent.toml".into()),
            ),
        };
        let dir = std::fs::canonicalize(&dir).map_err(|e| {
            Error::new(
                ErrorKind::InvalidAgent,
                format!("cannot resolve agent directory: {e}"),
            )
            .at_path(&dir)
        })?;
        let root = Beneath::open(&dir).map_err(|_| not_regular("the agent directory"))?;
        let text = read_regular(&root, &file, MANIFEST_CAP).map_err(|e| {
            e.hint("the candidate declares its agent in target/agent.toml: command = [...] or component = \"agent.wasm\"")
        })?;
        let text = String::from_utf8(text)
            .map_err(|_| invalid(format!("{file} is not UTF-8 text"), &file))?;
        let raw: RawManifest = toml::from_str(&text).map_err(|e| {
            // The line and column, and the line with carets under what is wrong.
            let located = crate::task::toml_error(&file, &text, Path::new(&file), &e);
            Error {
                kind: ErrorKind::InvalidAgent,
                location: located
                    .location
                    .map(|l| format!("{l} in the agent directory")),
                ..located
            }
        })?;
        let entry = match (raw.command, raw.component) {
            (Some(mut cmd), None) => {
                match cmd.first() {
                    None => return Err(invalid("command must not be empty", &file)),
                    Some(a0) if a0.contains('/') => {
                        let rel = inside(a0, &file)?;
                        match root.executable(&rel) {
                            Ok(true) => {}
                            Ok(false) => {
                                return Err(invalid(
                                    format!("agent command {rel:?} is not executable"),
                                    &rel,
                                )
                                .hint("make it executable (chmod +x) in the target directory"));
                            }
                            Err(_) => return Err(not_regular(&rel)),
                        }
                        // `./` keeps the `/` that marks a shipped program.
                        cmd[0] = format!("./{rel}");
                    }
                    Some(_) => {}
                }
                AgentEntry::Command(cmd)
            }
            (None, Some(c)) => {
                let rel = inside(&c, &file)?;
                let bytes = read_regular(&root, &rel, COMPONENT_CAP)?;
                AgentEntry::Component {
                    path: rel,
                    bytes: Arc::new(bytes),
                }
            }
            _ => {
                return Err(invalid(
                    "agent.toml must set exactly one of `command` or `component`",
                    &file,
                ));
            }
        };
        for k in raw.env.keys() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(invalid(
                    format!("invalid environment variable name {k:?}"),
                    &file,
                ));
            }
        }
        Ok(AgentManifest {
            dir,
            entry,
            env: raw.env,
        })
    }
}

/// Which agent runs in a trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentSpec {
    /// Harbor's oracle: runs the task's `solution/solve.sh`.
    Oracle,
    /// The candidate's declared entrypoint.
    Target(AgentManifest),
}

impl AgentSpec {
    /// `oracle` or a path to a target dir / agent.toml.
    pub fn parse(arg: &str) -> Result<AgentSpec> {
        if arg == "oracle" {
            return Ok(AgentSpec::Oracle);
        }
        AgentManifest::load(Path::new(arg)).map(AgentSpec::Target)
    }
    pub fn label(&self) -> String {
        match self {
            AgentSpec::Oracle => "oracle".into(),
            AgentSpec::Target(m) => m.dir.display().to_string(),
        }
    }
}
