//! The Harbor task format: `task.toml`, `instruction.md`, `environment/`, `tests/test.sh`,
//! optional `solution/solve.sh` (see docs/evaluation.md for the exact rules we apply).
//!
//! Defaults follow Harbor 0.25's code, not its docs: verifier timeout 600 s, agent timeout none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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

impl TaskConfig {
    /// Parse and validate `task.toml` text. `origin` names the file in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<TaskConfig> {
        let mut cfg: TaskConfig = toml::from_str(text).map_err(|e| {
            Error::invalid_task(format!("malformed task.toml: {}", e.message().trim_end()))
                .at(match e.span() {
                    Some(span) => {
                        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                        format!("{}:{line}", origin.display())
                    }
                    None => origin.display().to_string(),
                })
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

impl Task {
    /// Load a task, failing on the first problem.
    pub fn load(dir: &Path) -> Result<Task> {
        let (task, mut problems) = Self::load_all(dir);
        match task {
            Some(t) if problems.is_empty() => Ok(t),
            _ => Err(problems.remove(0)),
        }
    }

    /// Load a task and collect *every* problem (for `tasks check`).
    pub fn load_all(dir: &Path) -> (Option<Task>, Vec<Error>) {
        let mut problems = Vec::new();
        let name = match dir.file_name().and_then(|n| n.to_str()) {
            Some(n) if valid_task_name(n) => n.to_string(),
            _ => {
                problems.push(
                    Error::invalid_task(
                        "task directory name must be one printable UTF-8 path component not starting with '.'",
                    )
                    .at_path(dir),
                );
                String::new()
            }
        };
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                problems.push(
                    Error::invalid_task("task path is not a directory (symlinks are not followed)")
                        .at_path(dir),
                );
                return (None, problems);
            }
            Err(e) => {
                problems.push(
                    Error::invalid_task(format!("cannot read task directory: {e}")).at_path(dir),
                );
                return (None, problems);
            }
        }
        let toml_path = dir.join("task.toml");
        let config = if !is_file_no_follow(&toml_path) {
            problems.push(
                Error::invalid_task("missing task.toml (expected a regular file)")
                    .at_path(&toml_path),
            );
            None
        } else {
            match std::fs::read_to_string(&toml_path) {
                Err(e) => {
                    problems.push(
                        Error::invalid_task(format!("cannot read task.toml: {e}"))
                            .at_path(&toml_path),
                    );
                    None
                }
                Ok(text) => match toml::from_str::<TaskConfig>(&text) {
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
                },
            }
        };
        let instr_path = dir.join("instruction.md");
        let instruction = if !is_file_no_follow(&instr_path) {
            problems.push(
                Error::invalid_task("missing instruction.md (expected a regular file)")
                    .at_path(&instr_path),
            );
            String::new()
        } else {
            match std::fs::read(&instr_path) {
                Ok(b) => match String::from_utf8(b) {
                    Ok(s) => strip_canary(&s),
                    Err(_) => {
                        problems.push(
                            Error::invalid_task("instruction.md is not valid UTF-8")
                                .at_path(&instr_path),
                        );
                        String::new()
                    }
                },
                Err(e) => {
                    problems.push(
                        Error::invalid_task(format!("cannot read instruction.md: {e}"))
                            .at_path(&instr_path),
                    );
                    String::new()
                }
            }
        };
        let test_sh = dir.join("tests").join("test.sh");
        if !is_file_no_follow(&test_sh) {
            problems.push(
                Error::invalid_task(
                    "missing tests/test.sh (the verifier entry point, a regular file)",
                )
                .at_path(&test_sh)
                .hint("tests/test.sh must write /logs/verifier/reward.txt or reward.json"),
            );
        }
        let env_dir = dir.join("environment");
        let has_env = std::fs::symlink_metadata(&env_dir).is_ok_and(|m| m.is_dir());
        if let Some(cfg) = &config
            && !has_env
            && cfg.environment.docker_image.is_none()
        {
            problems.push(
                Error::invalid_task(
                    "missing environment/ directory and no [environment].docker_image",
                )
                .at_path(&env_dir),
            );
        }
        let solution = dir.join("solution");
        if std::fs::symlink_metadata(&solution).is_ok()
            && !is_file_no_follow(&solution.join("solve.sh"))
        {
            problems.push(
                Error::invalid_task("solution/ exists but has no regular file solve.sh")
                    .at_path(&solution.join("solve.sh")),
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

/// Validate a task set and return every problem found (empty = valid).
pub fn check_task_set(dir: &Path) -> Vec<Error> {
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
        let (_, p) = Task::load_all(&t);
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
        assert_eq!(e.location.as_deref(), Some("t/task.toml:2"));
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
