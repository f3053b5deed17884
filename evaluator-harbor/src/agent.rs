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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, ErrorKind, Result};

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
    /// argv; `argv[0]` already resolved to an absolute path when it was relative.
    Command(Vec<String>),
    /// Absolute path of a WASI command component.
    Component(PathBuf),
}

/// A loaded `agent.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentManifest {
    /// The directory holding `agent.toml` (the candidate's target dir).
    pub dir: PathBuf,
    pub entry: AgentEntry,
    pub env: BTreeMap<String, String>,
}

fn invalid(msg: impl Into<String>, at: &Path) -> Error {
    Error::new(ErrorKind::InvalidAgent, msg).at_path(at)
}

fn inside(dir: &Path, rel: &str, at: &Path) -> Result<PathBuf> {
    let p = Path::new(rel);
    if p.is_absolute()
        || p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(invalid(
            format!("path {rel:?} must be relative and stay inside the target directory"),
            at,
        ));
    }
    Ok(dir.join(p))
}

impl AgentManifest {
    /// Load from a target directory (reads `agent.toml`) or from the manifest file itself.
    pub fn load(path: &Path) -> Result<AgentManifest> {
        let (dir, file) = if path.is_dir() {
            (path.to_path_buf(), path.join("agent.toml"))
        } else {
            (
                path.parent().unwrap_or(Path::new(".")).to_path_buf(),
                path.to_path_buf(),
            )
        };
        let dir = std::fs::canonicalize(&dir)
            .map_err(|e| invalid(format!("cannot resolve agent directory: {e}"), &dir))?;
        let text = std::fs::read_to_string(&file).map_err(|e| {
            invalid(format!("cannot read agent manifest: {e}"), &file)
                .hint("the candidate declares its agent in target/agent.toml: command = [...] or component = \"agent.wasm\"")
        })?;
        let raw: RawManifest = toml::from_str(&text)
            .map_err(|e| invalid(format!("malformed agent.toml: {}", e.message()), &file))?;
        let entry = match (raw.command, raw.component) {
            (Some(cmd), None) => {
                let mut cmd = cmd;
                match cmd.first() {
                    None => return Err(invalid("command must not be empty", &file)),
                    Some(a0) if a0.contains('/') => {
                        let p = inside(&dir, a0, &file)?;
                        cmd[0] = p.to_string_lossy().into_owned();
                    }
                    Some(_) => {}
                }
                AgentEntry::Command(cmd)
            }
            (None, Some(c)) => {
                let p = inside(&dir, &c, &file)?;
                if !p.is_file() {
                    return Err(invalid(format!("component {c:?} does not exist"), &file));
                }
                AgentEntry::Component(p)
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
