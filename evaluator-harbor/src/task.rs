//! The Harbor task format: `task.toml`, `instruction.md`, `environment/`, `tests/test.sh`,
//! optional `solution/solve.sh` (see docs/evaluation.md for the exact rules we apply).
//!
//! Defaults follow Harbor 0.25's code, not its docs: verifier timeout 600 s, agent timeout none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cli::EngineKind;
use crate::error::{Error, ErrorKind, Result};

/// `[task]` package metadata (optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskMeta {
    pub name: Option<String>,
    pub version: Option<String>,
    pub description: Option<String>,
    pub authors: Vec<serde_json::Value>,
    pub keywords: Vec<String>,
}

/// `[verifier]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VerifierConfig {
    pub timeout_sec: f64,
    pub env: BTreeMap<String, String>,
    pub user: Option<serde_json::Value>,
    pub environment_mode: Option<String>,
    pub network_mode: Option<NetworkMode>,
}

impl Default for VerifierConfig {
    fn default() -> Self {
        VerifierConfig {
            timeout_sec: 600.0,
            env: BTreeMap::new(),
            user: None,
            environment_mode: None,
            network_mode: None,
        }
    }
}

/// `[agent]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    /// None = no limit (Harbor's default).
    pub timeout_sec: Option<f64>,
    pub user: Option<serde_json::Value>,
    pub network_mode: Option<NetworkMode>,
}

/// Harbor's `network_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    Public,
    NoNetwork,
    Allowlist,
}

/// `[environment]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnvironmentConfig {
    pub build_timeout_sec: f64,
    pub docker_image: Option<String>,
    pub os: Option<String>,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub storage_mb: Option<u64>,
    pub gpus: Option<u32>,
    pub gpu_types: Option<Vec<String>>,
    /// Deprecated `"2G"` form, converted into `memory_mb`.
    pub memory: Option<String>,
    /// Deprecated `"10G"` form, converted into `storage_mb`.
    pub storage: Option<String>,
    pub network_mode: Option<NetworkMode>,
    pub allowed_hosts: Option<Vec<String>>,
    /// Deprecated: true = public, false = no-network.
    pub allow_internet: Option<bool>,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    pub healthcheck: Option<serde_json::Value>,
    pub mcp_servers: Vec<serde_json::Value>,
    pub skills_dir: Option<String>,
}

impl Default for EnvironmentConfig {
    fn default() -> Self {
        EnvironmentConfig {
            build_timeout_sec: 600.0,
            docker_image: None,
            os: None,
            cpus: None,
            memory_mb: None,
            storage_mb: None,
            gpus: None,
            gpu_types: None,
            memory: None,
            storage: None,
            network_mode: None,
            allowed_hosts: None,
            allow_internet: None,
            env: BTreeMap::new(),
            workdir: None,
            healthcheck: None,
            mcp_servers: Vec::new(),
            skills_dir: None,
        }
    }
}

/// `[solution]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SolutionConfig {
    pub env: BTreeMap<String, String>,
}

/// A parsed `task.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskConfig {
    #[serde(alias = "version")]
    pub schema_version: Option<String>,
    pub source: Option<String>,
    pub artifacts: Vec<serde_json::Value>,
    pub task: Option<TaskMeta>,
    pub metadata: BTreeMap<String, serde_json::Value>,
    pub verifier: VerifierConfig,
    pub agent: AgentConfig,
    pub environment: EnvironmentConfig,
    pub solution: SolutionConfig,
    /// Multi-step tasks are not supported; kept so the parser can refuse them clearly.
    pub steps: Option<Vec<serde_json::Value>>,
}

fn parse_size_mb(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].trim().to_ascii_uppercase();
            let mult = match unit.as_str() {
                "K" | "KB" => 1.0 / 1024.0,
                "M" | "MB" => 1.0,
                "G" | "GB" => 1024.0,
                "T" | "TB" => 1024.0 * 1024.0,
                _ => return None,
            };
            (&s[..i], mult)
        }
        None => (s, 1.0 / (1024.0 * 1024.0)), // bare number = bytes
    };
    let v: f64 = num.trim().parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    Some((v * mult).ceil() as u64)
}

/// The largest timeout a task may set, in seconds (a year). Engines turn timeouts into
/// `Duration`s and deadlines, which panic past their range (`1e300` did, found with the
/// `task_toml` fuzz target); no real task needs more.
pub const MAX_TIMEOUT_SEC: f64 = 365.0 * 24.0 * 3600.0;

/// A TOML parse error of the file `name` (at `origin`): the parser's message, then the
/// offending line with carets under the span it names; located `origin:line:column`.
pub fn toml_error(name: &str, text: &str, origin: &Path, e: &toml::de::Error) -> Error {
    let message = format!("malformed {name}: {}", e.message().trim_end());
    match e.span() {
        Some(span) => {
            let (line, column) = crate::error::line_column(text, span.start);
            let width = text
                .get(span.start..span.end.min(text.len()))
                .map_or(1, |s| s.split('\n').next().unwrap_or("").chars().count());
            let shown = crate::error::excerpt(text, line, column, width);
            let message = if shown.is_empty() {
                message
            } else {
                format!("{message}\n{shown}")
            };
            Error::invalid_task(message).at(format!("{}:{line}:{column}", origin.display()))
        }
        None => Error::invalid_task(message).at_path(origin),
    }
}

impl TaskConfig {
    /// Parse and validate `task.toml` text. `origin` names the file in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<TaskConfig> {
        let mut cfg: TaskConfig = toml::from_str(text).map_err(|e| {
            toml_error("task.toml", text, origin, &e)
                .hint("see Harbor's task.toml schema in docs/evaluation.md")
        })?;
        let problems = cfg.normalize();
        if let Some(first) = problems.into_iter().next() {
            return Err(Error::invalid_task(first).at_path(origin));
        }
        Ok(cfg)
    }

    /// Apply deprecated-key conversions and return every semantic problem.
    fn normalize(&mut self) -> Vec<String> {
        let mut p = Vec::new();
        if !(self.verifier.timeout_sec > 0.0 && self.verifier.timeout_sec <= MAX_TIMEOUT_SEC) {
            p.push(format!(
                "[verifier].timeout_sec must be a positive number of seconds, at most \
                 {MAX_TIMEOUT_SEC} (a year), got {}",
                self.verifier.timeout_sec
            ));
        }
        if let Some(t) = self.agent.timeout_sec
            && !(0.0..=MAX_TIMEOUT_SEC).contains(&t)
        {
            p.push(format!(
                "[agent].timeout_sec must be a non-negative number of seconds, at most \
                 {MAX_TIMEOUT_SEC} (a year), got {t}"
            ));
        }
        if self.agent.timeout_sec == Some(0.0) {
            self.agent.timeout_sec = None; // Harbor: 0 means "not set"
        }
        if !(self.environment.build_timeout_sec > 0.0
            && self.environment.build_timeout_sec <= MAX_TIMEOUT_SEC)
        {
            p.push(format!(
                "[environment].build_timeout_sec must be a positive number of seconds, at most \
                 {MAX_TIMEOUT_SEC} (a year)"
            ));
        }
        if let Some(c) = self.environment.cpus
            && !(c.is_finite() && c > 0.0)
        {
            p.push(format!(
                "[environment].cpus must be a positive number, got {c}"
            ));
        }
        if let Some(m) = self.environment.memory.clone() {
            match parse_size_mb(&m) {
                Some(mb) if self.environment.memory_mb.is_none() => {
                    self.environment.memory_mb = Some(mb)
                }
                Some(_) => {}
                None => p.push(format!(
                    "[environment].memory must look like \"2G\" or \"512M\", got {m:?}"
                )),
            }
        }
        if let Some(s) = self.environment.storage.clone() {
            match parse_size_mb(&s) {
                Some(mb) if self.environment.storage_mb.is_none() => {
                    self.environment.storage_mb = Some(mb)
                }
                Some(_) => {}
                None => p.push(format!(
                    "[environment].storage must look like \"10G\" or \"512M\", got {s:?}"
                )),
            }
        }
        if self.environment.network_mode.is_none()
            && let Some(a) = self.environment.allow_internet
        {
            self.environment.network_mode = Some(if a {
                NetworkMode::Public
            } else {
                NetworkMode::NoNetwork
            });
        }
        if let Some(os) = &self.environment.os
            && os != "linux"
        {
            p.push(format!(
                "[environment].os = {os:?} is not supported (only \"linux\")"
            ));
        }
        if self.steps.as_ref().is_some_and(|s| !s.is_empty()) {
            p.push("multi-step tasks ([[steps]]) are not supported".into());
        }
        p
    }

    /// Whether the task explicitly allows network access. Unlike Harbor (whose default is
    /// public), evolve denies the network unless the task says `network_mode = "public"` or
    /// `allow_internet = true`.
    pub fn network_allowed(&self) -> bool {
        self.environment.network_mode == Some(NetworkMode::Public)
    }

    /// Agent phase timeout, if any.
    pub fn agent_timeout(&self) -> Option<std::time::Duration> {
        self.agent
            .timeout_sec
            .map(std::time::Duration::from_secs_f64)
    }

    /// Verifier phase timeout.
    pub fn verifier_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.verifier.timeout_sec)
    }
}

/// A loaded, validated task directory.
#[derive(Debug, Clone)]
pub struct Task {
    /// Task identity: the directory name.
    pub name: String,
    pub dir: PathBuf,
    pub config: TaskConfig,
    /// `instruction.md` with leading canary lines stripped.
    pub instruction: String,
}

/// Whether `name` is a usable task name (one path component, printable, not hidden).
pub fn valid_task_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 200
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_control)
}

/// Strip Harbor's leading canary lines (and the blank lines after them).
pub fn strip_canary(text: &str) -> String {
    let mut lines = text.split_inclusive('\n').peekable();
    let mut stripped = false;
    while let Some(l) = lines.peek() {
        let t = l.trim();
        let lower = t.to_ascii_lowercase();
        let canary = lower.contains("canary")
            && ((t.starts_with("<!--") && t.ends_with("-->")) || t.starts_with('#'));
        if canary || (stripped && t.is_empty()) {
            stripped |= canary;
            lines.next();
        } else {
            break;
        }
    }
    lines.collect()
}

fn is_file_no_follow(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

/// Where a task's files are read from: its directory on disk, or files held in memory
/// (`evolve init` checks and freezes the task set it is about to commit, before any of
/// it is on disk). Paths are relative to the task, `/`-separated.
trait TaskSource {
    /// The path that names `rel` in messages.
    fn at(&self, rel: &str) -> PathBuf;
    /// Whether `rel` is a regular file (a symlink is not followed).
    fn is_file(&self, rel: &str) -> bool;
    /// Whether `rel` is a directory (a symlink is not followed).
    fn is_dir(&self, rel: &str) -> bool;
    /// Whether anything is at `rel`.
    fn exists(&self, rel: &str) -> bool;
    fn read(&self, rel: &str) -> std::io::Result<Vec<u8>>;
}

struct OnDisk<'a>(&'a Path);

impl TaskSource for OnDisk<'_> {
    fn at(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
    fn is_file(&self, rel: &str) -> bool {
        is_file_no_follow(&self.0.join(rel))
    }
    fn is_dir(&self, rel: &str) -> bool {
        std::fs::symlink_metadata(self.0.join(rel)).is_ok_and(|m| m.is_dir())
    }
    fn exists(&self, rel: &str) -> bool {
        std::fs::symlink_metadata(self.0.join(rel)).is_ok()
    }
    fn read(&self, rel: &str) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.0.join(rel))
    }
}

/// A task's regular files by task-relative path: (executable, bytes).
pub(crate) type FileMap<'a> = BTreeMap<&'a str, (bool, &'a [u8])>;

/// A task's regular files held in memory. Directories are those that hold a file (as
/// in a git tree).
pub(crate) struct InMemory<'a> {
    pub dir: PathBuf,
    pub files: FileMap<'a>,
}

impl TaskSource for InMemory<'_> {
    fn at(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
    fn is_file(&self, rel: &str) -> bool {
        self.files.contains_key(rel)
    }
    fn is_dir(&self, rel: &str) -> bool {
        let prefix = format!("{rel}/");
        self.files
            .range(prefix.as_str()..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(&prefix))
    }
    fn exists(&self, rel: &str) -> bool {
        self.is_file(rel) || self.is_dir(rel)
    }
    fn read(&self, rel: &str) -> std::io::Result<Vec<u8>> {
        self.files
            .get(rel)
            .map(|(_, bytes)| bytes.to_vec())
            .ok_or_else(|| std::io::ErrorKind::NotFound.into())
    }
}

/// A regular file of a task as text, or the problem with it.
fn read_text(src: &dyn TaskSource, rel: &str) -> std::result::Result<String, Error> {
    if !src.is_file(rel) {
        return Err(
            Error::invalid_task(format!("missing {rel} (expected a regular file)"))
                .at_path(&src.at(rel)),
        );
    }
    let bytes = src.read(rel).map_err(|e| {
        Error::invalid_task(format!("cannot read {rel}: {e}")).at_path(&src.at(rel))
    })?;
    String::from_utf8(bytes)
        .map_err(|_| Error::invalid_task(format!("{rel} is not valid UTF-8")).at_path(&src.at(rel)))
}

impl Task {
    /// Load a task, failing on the first problem.
    pub fn load(dir: &Path) -> Result<Task> {
        let (task, mut problems) = Self::load_all(dir);
        match task {
            Some(t) if problems.is_empty() => Ok(t),
            _ => Err(problems.remove(0)),
        }
    }

    /// Load a task and collect *every* problem.
    pub fn load_all(dir: &Path) -> (Option<Task>, Vec<Error>) {
        Self::check_dir(dir, None)
    }

    /// [`Task::load_all`], also checking what `engine` needs of the task's environment
    /// (for `tasks check`).
    fn check_dir(dir: &Path, engine: Option<EngineKind>) -> (Option<Task>, Vec<Error>) {
        let name = dir.file_name().and_then(|n| n.to_str());
        let unusable = match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => return Self::check(name, dir, &OnDisk(dir), engine),
            Ok(_) => {
                Error::invalid_task("task path is not a directory (symlinks are not followed)")
            }
            Err(e) => Error::invalid_task(format!("cannot read task directory: {e}")),
        };
        let mut problems = Self::name_problems(name, dir);
        problems.push(unusable.at_path(dir));
        (None, problems)
    }

    /// Load a task whose files are held in memory (see [`InMemory`]).
    pub(crate) fn load_in_memory(name: &str, files: &InMemory<'_>) -> Result<Task> {
        let (task, mut problems) = Self::check(Some(name), &files.dir, files, None);
        match task {
            Some(t) if problems.is_empty() => Ok(t),
            _ => Err(problems.remove(0)),
        }
    }

    /// Every problem of a task held in memory, including what `engine` needs of its
    /// environment (for `recipe check` and `init`, which hold the task set in memory).
    pub(crate) fn check_in_memory(
        name: &str,
        files: &InMemory<'_>,
        engine: EngineKind,
    ) -> Vec<Error> {
        Self::check(Some(name), &files.dir, files, Some(engine)).1
    }

    fn name_problems(name: Option<&str>, dir: &Path) -> Vec<Error> {
        match name {
            Some(n) if valid_task_name(n) => Vec::new(),
            _ => vec![
                Error::invalid_task(
                    "task directory name must be one printable UTF-8 path component not starting with '.'",
                )
                .at_path(dir),
            ],
        }
    }

    /// Check the task `name` at `dir` whose files `src` holds; every problem is collected.
    /// With an `engine`, also whether that engine can provide the task's environment
    /// ([`environment_problem`]); without one, that is left to the engine's trial.
    fn check(
        name: Option<&str>,
        dir: &Path,
        src: &dyn TaskSource,
        engine: Option<EngineKind>,
    ) -> (Option<Task>, Vec<Error>) {
        let mut problems = Self::name_problems(name, dir);
        let name = name.unwrap_or_default().to_string();
        let config = match read_text(src, "task.toml") {
            Err(e) => {
                problems.push(e);
                None
            }
            Ok(text) => {
                let toml_path = src.at("task.toml");
                match toml::from_str::<TaskConfig>(&text) {
                    Err(_) => {
                        // Re-run through parse() for the located message.
                        problems.push(TaskConfig::parse(&text, &toml_path).unwrap_err());
                        None
                    }
                    Ok(mut cfg) => {
                        for msg in cfg.normalize() {
                            problems.push(Error::invalid_task(msg).at_path(&toml_path));
                        }
                        Some(cfg)
                    }
                }
            }
        };
        let instruction = match read_text(src, "instruction.md") {
            Ok(text) => strip_canary(&text),
            Err(e) => {
                problems.push(e);
                String::new()
            }
        };
        if !src.is_file("tests/test.sh") {
            problems.push(
                Error::invalid_task(
                    "missing tests/test.sh (the verifier entry point, a regular file)",
                )
                .at_path(&src.at("tests/test.sh"))
                .hint("tests/test.sh must write /logs/verifier/reward.txt or reward.json"),
            );
        }
        if let (Some(cfg), Some(engine)) = (&config, engine) {
            problems.extend(environment_problem(&name, src, cfg, engine));
        }
        if src.exists("solution") && !src.is_file("solution/solve.sh") {
            problems.push(
                Error::invalid_task("solution/ exists but has no regular file solve.sh")
                    .at_path(&src.at("solution/solve.sh")),
            );
        }
        match config {
            Some(config) if problems.is_empty() => (
                Some(Task {
                    name,
                    dir: dir.to_path_buf(),
                    config,
                    instruction,
                }),
                problems,
            ),
            _ => (None, problems),
        }
    }

    /// Whether the task ships `solution/solve.sh` (needed by the oracle agent).
    pub fn has_solution(&self) -> bool {
        is_file_no_follow(&self.dir.join("solution").join("solve.sh"))
    }
}

/// Find the task directories of `dir`: `dir` itself if it holds `task.toml`, else its
/// immediate non-hidden subdirectories, sorted by name. Subdirectories without `task.toml`
/// are returned in the second list so `tasks check` can report them.
pub fn discover(dir: &Path) -> Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| {
        Error::new(ErrorKind::Usage, format!("cannot read task directory: {e}")).at_path(dir)
    })?;
    if !meta.is_dir() {
        return Err(Error::new(ErrorKind::Usage, "not a directory").at_path(dir));
    }
    if dir.join("task.toml").exists() {
        return Ok((vec![dir.to_path_buf()], vec![]));
    }
    let mut tasks = Vec::new();
    let mut others = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io("cannot list task set", dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io("cannot list task set", dir, e))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let ft = entry
            .file_type()
            .map_err(|e| Error::io("cannot stat", &entry.path(), e))?;
        if !ft.is_dir() {
            continue;
        }
        if entry.path().join("task.toml").exists() {
            tasks.push(entry.path());
        } else {
            others.push(entry.path());
        }
    }
    tasks.sort();
    others.sort();
    Ok((tasks, others))
}

/// What `engine` needs of a task's environment, or `None` when it has it. The local
/// engine needs nothing: its trials run in the framework's own jail on the host, which
/// never reads `environment/` (a Dockerfile that needs an image build is refused when a
/// trial starts, `engine::local`). The docker and harbor engines start the task in a
/// container: they build `environment/Dockerfile`, or run `[environment].docker_image`.
/// `tasks check`, `recipe check` and `init` all ask this, so they agree.
fn environment_problem(
    name: &str,
    src: &dyn TaskSource,
    cfg: &TaskConfig,
    engine: EngineKind,
) -> Option<Error> {
    let engine = match engine {
        EngineKind::Local => return None,
        EngineKind::Docker => "docker",
        EngineKind::Harbor => "harbor",
    };
    if src.is_file("environment/Dockerfile") || cfg.environment.docker_image.is_some() {
        return None;
    }
    Some(
        Error::invalid_task(format!(
            "task {name}: the {engine} engine needs environment/Dockerfile or [environment].docker_image"
        ))
        .at_path(&src.at("environment/Dockerfile"))
        .hint("add environment/Dockerfile (e.g. `FROM ubuntu:24.04`), set [environment].docker_image in task.toml, or use the local engine, which needs neither"),
    )
}

/// Validate a task set for `engine` and return every problem found (empty = valid).
pub fn check_task_set(dir: &Path, engine: EngineKind) -> Vec<Error> {
    let (tasks, others) = match discover(dir) {
        Ok(x) => x,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    if tasks.is_empty() {
        problems.push(
            Error::invalid_task(
                "no tasks found (expected task.toml here or in immediate subdirectories)",
            )
            .at_path(dir),
        );
    }
    for o in others {
        problems
            .push(Error::invalid_task("subdirectory is not a task: missing task.toml").at_path(&o));
    }
    for t in tasks {
        let (_, p) = Task::check_dir(&t, Some(engine));
        problems.extend(p);
        if let Err(e) = crate::digest::task_digest(&t) {
            problems.push(e);
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tb2_style_task_toml() {
        let t = r#"
version = "1.0"
[metadata]
difficulty = "medium"
tags = ["a"]
[verifier]
timeout_sec = 900.0
[agent]
timeout_sec = 900.0
[environment]
docker_image = "x/y:1"
cpus = 1
memory = "2G"
storage = "10G"
allow_internet = false
"#;
        let c = TaskConfig::parse(t, Path::new("task.toml")).unwrap();
        assert_eq!(c.schema_version.as_deref(), Some("1.0"));
        assert_eq!(c.environment.memory_mb, Some(2048));
        assert_eq!(c.environment.storage_mb, Some(10240));
        assert_eq!(c.environment.network_mode, Some(NetworkMode::NoNetwork));
        assert_eq!(c.agent.timeout_sec, Some(900.0));
        assert!(!c.network_allowed());
    }

    #[test]
    fn defaults_follow_harbor_code() {
        let c = TaskConfig::parse("", Path::new("task.toml")).unwrap();
        assert_eq!(c.verifier.timeout_sec, 600.0);
        assert_eq!(c.agent.timeout_sec, None);
        assert_eq!(c.environment.build_timeout_sec, 600.0);
    }

    #[test]
    fn malformed_toml_is_located() {
        let e = TaskConfig::parse(
            "[verifier]\ntimeout_sec = \"soon\"\n",
            Path::new("t/task.toml"),
        )
        .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidTask);
        assert!(e.message.contains("malformed task.toml"), "{e}");
        assert_eq!(e.location.as_deref(), Some("t/task.toml:2:15"));
        // The offending line, with carets under the value.
        assert!(
            e.to_string().ends_with(
                "(t/task.toml:2:15)\n  2 | timeout_sec = \"soon\"\n    |               ^^^^^^"
            ),
            "{e}"
        );
        let e = TaskConfig::parse("[verifier]\ntimeout_sec = -1\n", Path::new("t")).unwrap_err();
        assert!(e.message.contains("positive number of seconds"), "{e}");
    }

    /// Found by the `task_toml` fuzz target (fuzz/regressions/task_toml/huge-timeouts.toml):
    /// a finite but huge timeout was accepted and `verifier_timeout()` then panicked in
    /// `Duration::from_secs_f64`.
    #[test]
    fn huge_timeouts_are_rejected_not_panicked_on() {
        for (text, key) in [
            (
                "[verifier]\ntimeout_sec = 1e300\n",
                "[verifier].timeout_sec",
            ),
            ("[agent]\ntimeout_sec = 1e20\n", "[agent].timeout_sec"),
            (
                "[environment]\nbuild_timeout_sec = 1e300\n",
                "[environment].build_timeout_sec",
            ),
            ("[verifier]\ntimeout_sec = nan\n", "[verifier].timeout_sec"),
            ("[agent]\ntimeout_sec = inf\n", "[agent].timeout_sec"),
        ] {
            let e = TaskConfig::parse(text, Path::new("t/task.toml")).unwrap_err();
            assert!(
                e.message.starts_with(key) && e.message.contains("at most"),
                "{text}: {e}"
            );
        }
        let c = TaskConfig::parse(
            "[verifier]\ntimeout_sec = 31536000\n[agent]\ntimeout_sec = 31536000\n",
            Path::new("t"),
        )
        .unwrap();
        assert_eq!(c.verifier_timeout().as_secs(), 31_536_000);
        assert_eq!(c.agent_timeout().map(|d| d.as_secs()), Some(31_536_000));
    }

    #[test]
    fn canary_is_stripped() {
        let s = strip_canary("<!-- BENCHMARK DATA canary GUID x -->\n\n# Task\nDo it\n");
        assert_eq!(s, "# Task\nDo it\n");
    }
}
