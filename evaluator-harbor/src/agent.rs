//! The candidate's agent entrypoint declaration: `target/agent.toml`.
//!
//! ```toml
//! # exactly one of:
//! command = ["./run.sh"]          # a process; run with cwd = /app
//! component = "agent.wasm"       # a WASI command component (wasm32-wasip2), fully sandboxed
//! harbor_agent = "agent:MyAgent"  # a Harbor agent class of this tree (harbor engine only),
//! harbor_agent = "terminus-2"     # or a built-in Harbor agent by name (harbor engine only)
//!
//! [env]                          # optional literal environment for the agent
//! MODE = "fast"
//!
//! [harbor_agent_kwargs]          # only with harbor_agent: `--ak key=value` for Harbor;
//! prompt_template = "./prompt.j2" # a value starting with `./` names a file of this tree and
//!                                 # is passed as its absolute path, so it evolves with the tree
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
    harbor_agent: Option<String>,
    #[serde(default)]
    harbor_agent_kwargs: Option<BTreeMap<String, toml::Value>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

/// Largest file a `./` kwarg of `[harbor_agent_kwargs]` may name (a prompt or a config).
const KWARG_FILE_CAP: u64 = 16 << 20;

/// A Harbor agent, run only by the harbor engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HarborAgent {
    /// A `BaseAgent` subclass in the candidate tree: `module` (dotted) is importable from
    /// the agent directory, checked to be a regular file of it.
    Class { module: String, class: String },
    /// A Harbor built-in agent (`terminus-2`, `mini-swe-agent`, `nop`, ...).
    BuiltIn(String),
}

impl HarborAgent {
    /// What `harbor run -a` is given.
    pub fn flag_value(&self) -> String {
        match self {
            HarborAgent::Class { module, class } => format!("{module}:{class}"),
            HarborAgent::BuiltIn(name) => name.clone(),
        }
    }
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
    /// A Harbor agent (`harbor_agent`), with its `[harbor_agent_kwargs]`: each value as
    /// declared, except that a `./file` value is the file's absolute path in the agent
    /// directory (checked to be a regular file inside it).
    Harbor {
        agent: HarborAgent,
        kwargs: BTreeMap<String, String>,
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
            AgentEntry::Component { .. } | AgentEntry::Harbor { .. } => None,
        }
    }
}

/// The error the local and docker engines give a `harbor_agent` manifest.
pub fn harbor_only() -> Error {
    Error::new(
        ErrorKind::InvalidAgent,
        "a `harbor_agent` agent runs only on the harbor engine",
    )
    .at("agent.toml in the agent directory")
    .hint("use --engine harbor (or `engine: harbor` in the recipe), or declare `command = [...]` for the local and docker engines")
}

fn is_identifier(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `harbor_agent`'s value, checked: `module:Class` (the module a regular file of the agent
/// directory) or a built-in name.
fn harbor_agent(value: &str, root: &Beneath, file: &str) -> Result<HarborAgent> {
    let Some((module, class)) = value.split_once(':') else {
        let ok = !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !ok {
            return Err(invalid(
                format!(
                    "harbor_agent {value:?} must be a built-in Harbor agent name (terminus-2, mini-swe-agent, ...: letters, digits, `-`, `_`, `.`) or module:Class"
                ),
                file,
            ));
        }
        return Ok(HarborAgent::BuiltIn(value.to_string()));
    };
    if !module.split('.').all(is_identifier) || !is_identifier(class) {
        return Err(invalid(
            format!(
                "harbor_agent {value:?} must be module:Class, a dotted Python module of the agent directory and a class name (for example agent:MyAgent or pkg.agent:MyAgent)"
            ),
            file,
        ));
    }
    let rel = module.replace('.', "/");
    let as_file = format!("{rel}.py");
    let as_package = format!("{rel}/__init__.py");
    if root.read(&as_file, MANIFEST_CAP << 4).is_err()
        && root.read(&as_package, MANIFEST_CAP << 4).is_err()
    {
        return Err(not_regular(&as_file).hint(format!(
            "harbor_agent {value:?} names module {module}: {as_file} (or {as_package}) must be a regular file of the target directory, at most 16 MiB"
        )));
    }
    Ok(HarborAgent::Class {
        module: module.to_string(),
        class: class.to_string(),
    })
}

/// `[harbor_agent_kwargs]`, checked, with each `./file` value resolved in `dir`.
fn harbor_kwargs(
    raw: BTreeMap<String, toml::Value>,
    dir: &Path,
    root: &Beneath,
    file: &str,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (k, v) in raw {
        let toml::Value::String(v) = v else {
            return Err(invalid(
                format!(
                    "[harbor_agent_kwargs] {k} must be a string (Harbor reads a number, a boolean or JSON from it: write {k} = \"3\")"
                ),
                file,
            ));
        };
        let key_ok = !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if !key_ok {
            return Err(invalid(
                format!(
                    "[harbor_agent_kwargs] key {k:?} must be an identifier (letters, digits, `_`, `.`): it is passed as --ak key=value"
                ),
                file,
            ));
        }
        let v = if v.starts_with("./") {
            let rel = inside(&v, file)?;
            match root.read(&rel, KWARG_FILE_CAP) {
                Ok(_) => dir.join(&rel).to_string_lossy().into_owned(),
                Err(NotRegular::TooLarge) => {
                    return Err(invalid(
                        format!("[harbor_agent_kwargs] {k}: {rel} is larger than 16 MiB"),
                        &rel,
                    ));
                }
                Err(_) => {
                    return Err(not_regular(&rel).hint(format!(
                        "[harbor_agent_kwargs] {k} = {v:?} names a file of the target directory (a value starting with ./): it must be a regular file inside it"
                    )));
                }
            }
        } else {
            v
        };
        out.insert(k, v);
    }
    Ok(out)
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
        if raw.harbor_agent_kwargs.is_some() && raw.harbor_agent.is_none() {
            return Err(invalid(
                "[harbor_agent_kwargs] is only for a `harbor_agent` agent",
                &file,
            )
            .hint("set harbor_agent = \"module:Class\" or a built-in Harbor agent name, or remove [harbor_agent_kwargs]"));
        }
        let entry = match (raw.command, raw.component, raw.harbor_agent) {
            (None, None, Some(h)) => AgentEntry::Harbor {
                agent: harbor_agent(&h, &root, &file)?,
                kwargs: harbor_kwargs(
                    raw.harbor_agent_kwargs.unwrap_or_default(),
                    &dir,
                    &root,
                    &file,
                )?,
            },
            (Some(mut cmd), None, None) => {
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
            (None, Some(c), None) => {
                let rel = inside(&c, &file)?;
                let bytes = read_regular(&root, &rel, COMPONENT_CAP)?;
                AgentEntry::Component {
                    path: rel,
                    bytes: Arc::new(bytes),
                }
            }
            _ => {
                return Err(invalid(
                    "agent.toml must set exactly one of `command`, `component` or `harbor_agent`",
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
