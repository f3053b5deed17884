//! The coder's tools: their definitions (what the model is told) and the checked calls
//! (what the operator does). Every path the model writes is relative to the guest's root
//! and starts with a granted root; see [`Toolbox::resolve`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use evolve_operator_sdk::conversation::{Tool, ToolCall};
use evolve_operator_sdk::edits::{self, Block, Edit, Policy};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::serde_json;
use evolve_operator_sdk::tasks::{RunRequest, TrialReport};
use serde::Deserialize;

use crate::{Host, Settings};

/// Most entries one `list_dir` shows.
pub const MAX_LIST: usize = 400;
/// Most files one `search` reads, and the largest it reads.
pub const SEARCH_FILES: usize = 5000;
pub const SEARCH_FILE_BYTES: u64 = 1 << 20;
/// Most matches one `search` returns.
pub const MAX_MATCHES: usize = 200;
/// Characters of a trial's verifier output, and of its trajectory summary, `run_tasks` shows.
pub const TRIAL_OUTPUT_CHARS: usize = 600;
pub const TRIAL_TRAJECTORY_CHARS: usize = 2000;
/// The largest file `read_file` reads.
pub const READ_BYTES: u64 = 4 << 20;
/// How the host's report line for a kept trajectory starts (host/src/lifecycle/train/trajectories.rs).
pub const TRAJECTORY_LINE: &str = "[trajectory] ";

/// What a tool call gave the model back.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub tool: String,
    pub content: String,
    /// The call was refused or failed; `content` says why.
    pub error: bool,
    /// How long carrying it out took (the tool's own time, no model time): for the
    /// per-tool-call figures of `cargo bench -p evolve --bench coder`.
    pub elapsed_us: u64,
    /// For `run_tasks`: the trials' own durations, summed, so the bench can tell the
    /// `tasks` capability's overhead from the trials.
    pub trials_ms: Option<u64>,
}

/// The tools and the state they share over one mutate call.
pub struct Toolbox {
    root: PathBuf,
    policy: Policy,
    /// Roots the model may read: `target`, and `operators` / `feedback` when granted.
    readable: Vec<String>,
    train: Vec<String>,
    settings: Settings,
    task_runs: u32,
    changed: Vec<String>,
    finished: Option<String>,
    calls: u32,
    refused: u32,
    /// The last `run_tasks` call's trials' summed durations.
    trials_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    start_line: Option<usize>,
    end_line: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    pattern: String,
    path: Option<String>,
    max_results: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    search: String,
    replace: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    tasks: Option<Vec<String>>,
    count: Option<usize>,
    repetitions: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrajectoryArgs {
    task: String,
    repetition: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishArgs {
    notes: String,
}

fn schema(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required,
           "additionalProperties": false})
}

impl Toolbox {
    pub fn new(root: &Path, obs: &Observation, settings: &Settings, train: Vec<String>) -> Toolbox {
        let granted =
            |dir: &str| std::fs::symlink_metadata(root.join(dir)).is_ok_and(|m| m.is_dir());
        let mut roots = vec!["target".to_string()];
        if granted("operators") {
            roots.push("operators".into());
        }
        let mut readable = roots.clone();
        if obs.feedback_dir.is_some() && granted("feedback") {
            readable.push("feedback".into());
        }
        Toolbox {
            root: root.to_path_buf(),
            policy: Policy {
                roots,
                includes: obs.surface.includes.clone(),
                excludes: obs.surface.excludes.clone(),
                max_files: None,
            },
            readable,
            train,
            settings: settings.clone(),
            task_runs: 0,
            changed: Vec::new(),
            finished: None,
            calls: 0,
            refused: 0,
            trials_ms: None,
        }
    }

    /// The roots the model may read, e.g. `["target", "feedback"]`.
    pub fn readable(&self) -> &[String] {
        &self.readable
    }

    /// The train task names, in the frozen split order.
    pub fn train(&self) -> &[String] {
        &self.train
    }

    /// The edited paths, in first-change order.
    pub fn changed(&self) -> &[String] {
        &self.changed
    }

    /// The notes `finish` was called with, once it was.
    pub fn finished(&self) -> Option<&str> {
        self.finished.as_deref()
    }

    /// One line each for the proposal's notes.
    pub fn summary_notes(&self, turns: u32) -> Vec<String> {
        vec![format!(
            "{turns} model call(s), {} tool call(s) ({} refused or failed), {} train run(s), {} file(s) changed",
            self.calls,
            self.refused,
            self.task_runs,
            self.changed.len()
        )]
    }

    /// The tools, as the model is told them.
    pub fn definitions(&self) -> Vec<Tool> {
        let roots = self.readable.join("/, ");
        let mut tools = vec![
            Tool::new(
                "list_dir",
                &format!(
                    "List a directory (one of {roots}/ or below): each entry's name, kind and size."
                ),
                schema(
                    json!({"path": {"type": "string", "description": "e.g. target or target/prompts"}}),
                    &["path"],
                ),
            ),
            Tool::new(
                "read_file",
                "Read a text file, with line numbers; optionally only lines start_line..=end_line (1-based).",
                schema(
                    json!({"path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 1},
                              "end_line": {"type": "integer", "minimum": 1}}),
                    &["path"],
                ),
            ),
            Tool::new(
                "search",
                "Search text files for a regular expression (Rust regex syntax), line by line; `path` narrows it to a file or directory.",
                schema(
                    json!({"pattern": {"type": "string"}, "path": {"type": "string"},
                              "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_MATCHES}}),
                    &["pattern"],
                ),
            ),
            Tool::new(
                "write_file",
                "Create or replace a whole text file (inside the editable surface).",
                schema(
                    json!({"path": {"type": "string"}, "content": {"type": "string"}}),
                    &["path", "content"],
                ),
            ),
            Tool::new(
                "edit",
                "Replace the one occurrence of `search` in a file with `replace` (search must match exactly once, whitespace included).",
                schema(
                    json!({"path": {"type": "string"}, "search": {"type": "string"}, "replace": {"type": "string"}}),
                    &["path", "search", "replace"],
                ),
            ),
        ];
        if self.settings.max_task_runs > 0 {
            tools.push(Tool::new(
                "run_tasks",
                "Run the edited candidate on train tasks: name them, or give `count` to take the first ones. Each trial's reward, verifier output and trajectory summary come back.",
                schema(json!({"tasks": {"type": "array", "items": {"type": "string"}},
                              "count": {"type": "integer", "minimum": 1},
                              "repetitions": {"type": "integer", "minimum": 1, "maximum": 3}}), &[]),
            ));
        }
        tools.push(Tool::new(
            "read_trajectory",
            "Read the trajectory summary of a train trial: the newest of your own runs, else the parent's rollout in feedback/.",
            schema(json!({"task": {"type": "string"}, "repetition": {"type": "integer", "minimum": 0}}), &["task"]),
        ));
        tools.push(Tool::new(
            "finish",
            "End the session; `notes` say what you changed and why.",
            schema(json!({"notes": {"type": "string"}}), &["notes"]),
        ));
        tools
    }

    /// Carry out one call. Never fails: a refusal is an error text for the model.
    pub fn call(&mut self, call: &ToolCall, host: &mut dyn Host) -> Outcome {
        let started = std::time::Instant::now();
        self.calls += 1;
        self.trials_ms = None;
        let result = match call.name.as_str() {
            "list_dir" => call.args().and_then(|a: PathArgs| self.list_dir(&a.path)),
            "read_file" => call.args().and_then(|a: ReadArgs| self.read_file(&a)),
            "search" => call.args().and_then(|a: SearchArgs| self.search(&a)),
            "write_file" => call
                .args()
                .and_then(|a: WriteArgs| self.apply(&a.path, Edit::Write { content: a.content })),
            "edit" => call.args().and_then(|a: EditArgs| {
                self.apply(
                    &a.path,
                    Edit::Replace {
                        search: a.search,
                        replace: a.replace,
                    },
                )
            }),
            "run_tasks" if self.settings.max_task_runs > 0 => {
                call.args().and_then(|a: RunArgs| self.run_tasks(&a, host))
            }
            "read_trajectory" => call
                .args()
                .and_then(|a: TrajectoryArgs| self.read_trajectory(&a)),
            "finish" => call.args().map(|a: FinishArgs| {
                self.finished = Some(a.notes);
                "Session finished.".to_string()
            }),
            other => Err(format!(
                "unknown tool {:?}; the tools are: {}",
                evolve_operator_sdk::feedback::head(other, 64),
                self.definitions()
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        let cap = self.settings.tool_output_chars;
        let (content, error) = match result {
            Ok(text) => (edits::cut(&text, cap), false),
            Err(why) => {
                self.refused += 1;
                (edits::cut(&format!("error: {why}"), cap), true)
            }
        };
        Outcome {
            tool: call.name.clone(),
            content,
            error,
            elapsed_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            trials_ms: self.trials_ms,
        }
    }

    /// Resolve a path the model gave for reading: clean, relative, under a readable
    /// root, and through no symbolic link (a link an earlier generation planted could
    /// otherwise point anywhere the grants reach).
    pub fn resolve(&self, path: &str) -> Result<(String, PathBuf), String> {
        let rel = path.trim().trim_start_matches("./").trim_end_matches('/');
        let rel = rel.strip_prefix('/').unwrap_or(rel);
        let segs: Vec<&str> = rel.split('/').collect();
        if rel.is_empty()
            || segs
                .iter()
                .any(|s| s.is_empty() || *s == "." || *s == ".." || s.contains(['\\', '\0']))
        {
            return Err(format!(
                "{path:?} is not a clean relative path (no `..`, `.` or empty segments)"
            ));
        }
        if segs.iter().any(|s| *s == ".git" || *s == ".evolve") {
            return Err(format!(
                "{path:?} is framework state, not part of the candidate"
            ));
        }
        if !self.readable.iter().any(|r| r == segs[0]) {
            return Err(format!(
                "{path:?} is outside what you can read ({})",
                self.readable
                    .iter()
                    .map(|r| format!("{r}/"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let mut full = self.root.clone();
        for s in &segs {
            full.push(s);
            if std::fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(format!("{path:?} goes through a symbolic link"));
            }
        }
        Ok((segs.join("/"), full))
    }

    fn list_dir(&self, path: &str) -> Result<String, String> {
        let (rel, full) = self.resolve(path)?;
        let rd = std::fs::read_dir(&full).map_err(|e| format!("cannot list {rel}: {e}"))?;
        let mut entries: Vec<(String, String)> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let meta = std::fs::symlink_metadata(e.path()).ok()?;
                let kind = if meta.file_type().is_symlink() {
                    "link (not followed)".to_string()
                } else if meta.is_dir() {
                    "dir".to_string()
                } else {
                    format!("file, {} bytes", meta.len())
                };
                Some((name, kind))
            })
            .filter(|(name, _)| name != ".git")
            .collect();
        entries.sort();
        let total = entries.len();
        let mut out: Vec<String> = entries
            .iter()
            .take(MAX_LIST)
            .map(|(n, k)| format!("{rel}/{n} ({k})"))
            .collect();
        if total > MAX_LIST {
            out.push(format!("[{} more entries not shown]", total - MAX_LIST));
        }
        if out.is_empty() {
            out.push(format!("{rel}/ is empty"));
        }
        Ok(out.join("\n"))
    }

    fn read_text(&self, rel: &str, full: &Path) -> Result<String, String> {
        if rel.ends_with(".wasm") {
            return Err(format!("{rel} is a WebAssembly component, not text"));
        }
        let meta =
            std::fs::symlink_metadata(full).map_err(|e| format!("cannot read {rel}: {e}"))?;
        if meta.is_dir() {
            return Err(format!("{rel} is a directory (use list_dir)"));
        }
        if meta.len() > READ_BYTES {
            return Err(format!(
                "{rel} is {} bytes, more than {READ_BYTES} this tool reads",
                meta.len()
            ));
        }
        let bytes = std::fs::read(full).map_err(|e| format!("cannot read {rel}: {e}"))?;
        match String::from_utf8(bytes) {
            Ok(s) if !s.contains('\0') => Ok(s),
            _ => Err(format!("{rel} is a binary file")),
        }
    }

    fn read_file(&self, a: &ReadArgs) -> Result<String, String> {
        let (rel, full) = self.resolve(&a.path)?;
        let text = self.read_text(&rel, &full)?;
        let lines: Vec<&str> = text.lines().collect();
        let start = a.start_line.unwrap_or(1).max(1);
        let end = a.end_line.unwrap_or(lines.len()).min(lines.len());
        if start > end && !lines.is_empty() {
            return Err(format!(
                "{rel} has {} lines; lines {start}..={end} are empty",
                lines.len()
            ));
        }
        let body: Vec<String> = lines
            .iter()
            .enumerate()
            .skip(start - 1)
            .take(end.saturating_sub(start - 1))
            .map(|(i, l)| format!("{:>5}  {l}", i + 1))
            .collect();
        Ok(format!(
            "{rel} (lines {start}-{end} of {}):\n{}",
            lines.len(),
            body.join("\n")
        ))
    }

    fn search(&self, a: &SearchArgs) -> Result<String, String> {
        let re = regex_lite::RegexBuilder::new(&a.pattern)
            .size_limit(1 << 20)
            .nest_limit(64)
            .build()
            .map_err(|e| format!("the pattern is not a valid regular expression: {e}"))?;
        let limit = a.max_results.unwrap_or(50).clamp(1, MAX_MATCHES);
        let starts: Vec<String> = match &a.path {
            Some(p) => vec![self.resolve(p)?.0],
            None => self.readable.clone(),
        };
        let mut files = Vec::new();
        for start in &starts {
            self.collect_files(start, &mut files);
        }
        let mut hits = Vec::new();
        let mut more = false;
        'files: for rel in &files {
            let Ok(text) = self.read_text(rel, &self.root.join(rel)) else {
                continue;
            };
            for (i, line) in text.lines().enumerate() {
                if re.is_match(line) {
                    if hits.len() == limit {
                        more = true;
                        break 'files;
                    }
                    hits.push(format!(
                        "{rel}:{}: {}",
                        i + 1,
                        edits::cut(line.trim_end(), 200)
                    ));
                }
            }
        }
        if hits.is_empty() {
            return Ok(format!("no match in {} file(s)", files.len()));
        }
        if more {
            hits.push(format!("[stopped at {limit} matches]"));
        }
        Ok(hits.join("\n"))
    }

    /// Regular text-candidate files under `rel` (a file or a directory), without following
    /// links, at most [`SEARCH_FILES`].
    fn collect_files(&self, rel: &str, out: &mut Vec<String>) {
        if out.len() >= SEARCH_FILES {
            return;
        }
        let Ok(meta) = std::fs::symlink_metadata(self.root.join(rel)) else {
            return;
        };
        if meta.is_file() && meta.len() <= SEARCH_FILE_BYTES {
            out.push(rel.to_string());
        } else if meta.is_dir() {
            let Ok(rd) = std::fs::read_dir(self.root.join(rel)) else {
                return;
            };
            let mut names: Vec<String> = rd
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n != ".git")
                .collect();
            names.sort();
            for n in names {
                self.collect_files(&format!("{rel}/{n}"), out);
            }
        }
    }

    fn apply(&mut self, path: &str, edit: Edit) -> Result<String, String> {
        if path.trim_start_matches('/').starts_with("feedback/") {
            return Err(format!("{path:?} is read-only feedback"));
        }
        let block = Block {
            path: path.to_string(),
            edit,
            line: 0,
        };
        let outcome = edits::apply(&[block], &self.root, &self.policy, &mut self.changed)
            .pop()
            .ok_or("the edit produced no outcome")?;
        if outcome.applied {
            Ok(format!("{}: {}", outcome.path, outcome.message))
        } else {
            Err(format!("{}: {}", outcome.path, outcome.message))
        }
    }

    fn run_tasks(&mut self, a: &RunArgs, host: &mut dyn Host) -> Result<String, String> {
        if self.task_runs >= self.settings.max_task_runs {
            return Err(format!(
                "the train-run limit is spent ({} run(s), max_task_runs)",
                self.settings.max_task_runs
            ));
        }
        let names = self.choose_tasks(a)?;
        let repetitions = a.repetitions.unwrap_or(1);
        if !(1..=3).contains(&repetitions) {
            return Err("repetitions must be 1, 2 or 3".into());
        }
        self.task_runs += 1;
        let reports = host
            .run(&RunRequest {
                tasks: names,
                repetitions,
            })
            .map_err(|e| evolve_operator_sdk::feedback::tasks_error(&e))?;
        self.trials_ms = Some(reports.iter().map(|r| r.duration_ms).sum());
        Ok(self.report_text(&reports))
    }

    /// The tasks a `run_tasks` call names, each a train task listed once.
    fn choose_tasks(&self, a: &RunArgs) -> Result<Vec<String>, String> {
        let max = self.settings.max_tasks_per_run;
        let names = match (&a.tasks, a.count) {
            (Some(_), Some(_)) => return Err("give `tasks` or `count`, not both".into()),
            (Some(t), None) => t.clone(),
            (None, count) => self
                .train
                .iter()
                .take(count.unwrap_or(2))
                .cloned()
                .collect(),
        };
        if names.is_empty() {
            return Err(if self.train.is_empty() {
                "this experiment has no train tasks".into()
            } else {
                "name at least one task".into()
            });
        }
        if names.len() > max {
            return Err(format!("at most {max} tasks per run (max_tasks_per_run)"));
        }
        let mut seen = BTreeSet::new();
        for n in &names {
            if !self.train.contains(n) {
                return Err(format!(
                    "{:?} is not a train task; the train tasks are: {}",
                    evolve_operator_sdk::feedback::head(n, 80),
                    self.train.join(", ")
                ));
            }
            if !seen.insert(n) {
                return Err(format!("{n} is named twice"));
            }
        }
        Ok(names)
    }

    fn report_text(&self, reports: &[TrialReport]) -> String {
        let passed = reports
            .iter()
            .filter(|r| r.reward.is_some_and(|x| x >= 1.0))
            .count();
        let mut out = vec![format!("{passed}/{} trial(s) passed", reports.len())];
        for r in reports {
            let reward = r.reward.map_or("none".to_string(), |x| format!("{x}"));
            out.push(format!(
                "## {}#{}: {} reward={reward} ({} ms)",
                r.task,
                r.repetition,
                status_text(r.status),
                r.duration_ms
            ));
            let (trajectory, output) = split_trajectory_line(&r.verifier_output);
            let output = evolve_operator_sdk::feedback::tail(output.trim(), TRIAL_OUTPUT_CHARS);
            if !output.is_empty() {
                out.push(format!("verifier output (tail):\n{output}"));
            }
            if let Some(summary) = trajectory.and_then(|t| self.scratch_text(&t)) {
                out.push(format!(
                    "trajectory summary:\n{}",
                    edits::cut(&summary, TRIAL_TRAJECTORY_CHARS)
                ));
            }
        }
        out.join("\n")
    }

    /// A `/scratch/trajectories/…` text file the host wrote, read without following links.
    fn scratch_text(&self, guest: &str) -> Option<String> {
        let rel = guest.strip_prefix("/scratch/trajectories/")?;
        if rel
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return None;
        }
        let full = self.root.join("scratch/trajectories").join(rel);
        let meta = std::fs::symlink_metadata(&full).ok()?;
        (meta.is_file() && meta.len() <= READ_BYTES).then(|| std::fs::read_to_string(&full).ok())?
    }

    fn read_trajectory(&self, a: &TrajectoryArgs) -> Result<String, String> {
        if !self.train.contains(&a.task) {
            return Err(format!(
                "{:?} is not a train task; only train trials have trajectories here",
                evolve_operator_sdk::feedback::head(&a.task, 80)
            ));
        }
        let file = format!("{}__r{}.txt", a.task, a.repetition.unwrap_or(0));
        let mut places = vec![(
            self.root.join("scratch/trajectories"),
            "your run".to_string(),
        )];
        if self.readable.iter().any(|r| r == "feedback") {
            places.push((
                self.root.join("feedback/trajectories"),
                "the parent's rollout".into(),
            ));
        }
        for (dir, what) in places {
            if let Some((run, text)) = newest_run_file(&dir, &file) {
                return Ok(format!("{} ({what}, {run}):\n{text}", a.task));
            }
        }
        Err(format!(
            "no trajectory of {}#{} was kept (run it with run_tasks first)",
            a.task,
            a.repetition.unwrap_or(0)
        ))
    }
}

/// `file` in the newest `run-<n>/` under `dir` that has it, read without following links.
fn newest_run_file(dir: &Path, file: &str) -> Option<(String, String)> {
    if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    let mut runs: Vec<(u64, String)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix("run-")?.parse().ok()?;
            std::fs::symlink_metadata(e.path())
                .ok()?
                .is_dir()
                .then_some((n, name))
        })
        .collect();
    runs.sort();
    runs.into_iter().rev().find_map(|(_, run)| {
        let path = dir.join(&run).join(file);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > READ_BYTES {
            return None;
        }
        Some((run, std::fs::read_to_string(&path).ok()?))
    })
}

/// The trajectory text path the host's `[trajectory] {…}` first line names, and the rest.
fn split_trajectory_line(output: &str) -> (Option<String>, &str) {
    let Some(rest) = output.strip_prefix(TRAJECTORY_LINE) else {
        return (None, output);
    };
    let (line, tail) = rest.split_once('\n').unwrap_or((rest, ""));
    let text = serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v.get("text").and_then(Value::as_str).map(str::to_string));
    (text, tail)
}

pub fn status_text(s: TrialStatus) -> &'static str {
    match s {
        TrialStatus::BenchmarkComplete => "complete",
        TrialStatus::CandidateInvalid => "candidate-invalid",
        TrialStatus::InfrastructureFailed => "infrastructure-failed",
        TrialStatus::Timeout => "timeout",
        TrialStatus::Cancelled => "cancelled",
    }
}
