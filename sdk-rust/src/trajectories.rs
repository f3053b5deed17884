//! The train trials' trajectories the host hands analyze and mutate in `/feedback`, read
//! as typed data; each joined to its trial's report; the step where a failed trial went
//! wrong; and bounded extracts of it.
//!
//! What the host hands over (a feedback bundle, read-only, train evidence only):
//!
//! * `rollout.json`: `{"summary": <rollout/train's summary>, "artifacts": [...]}`;
//! * `trajectories/index.json`: one [`IndexEntry`] per kept trajectory;
//! * `trajectories/run-<n>/<trial>.json`: the trajectory in ATIF (v1.4), already bounded
//!   and filtered by the host (its paths and every private task name replaced), and
//!   `<trial>.txt`, a text summary of it.
//!
//! rollout/train names each trial's files in its summary (`trials[i].trajectory.json`,
//! relative to rollout's `/scratch`, `trajectories/run-<n>/<trial>.json`); [`join`] uses
//! that name, and otherwise the index entry of the same task and repetition.
//!
//! # The step where a trial went wrong ([`culprit`])
//!
//! 1. **The verifier points at it.** The *clues* of the verifier output are its
//!    path-like and file-like words (`/app/users.json`, `report.csv`, with a path's file
//!    name as a clue of its own) and its backquoted spans ([`clues`]). An agent step
//!    matches a clue when its action (its tool calls' names and arguments, or for a step
//!    without tool calls its message) or its observation contains it. The step matching
//!    the most distinct clues wins; among those, one whose observation shows a failure
//!    ([`failure_signal`]); then the latest. Rule [`Rule::VerifierPointer`].
//! 2. **Otherwise, the last failing observation**: the latest agent step whose
//!    observation shows a failure (a non-zero `<returncode>`, `Traceback`,
//!    `command not found`, `No such file or directory`, …). Rule
//!    [`Rule::LastFailingObservation`].
//! 3. **Otherwise, the last tool call**: the latest agent step with a tool call (the last
//!    thing the agent did before it stopped). Rule [`Rule::LastToolCall`].
//!
//! A trajectory with no agent step has no culprit.
//!
//! Everything here is bounded: files are read up to [`READ_CAP`] bytes without following
//! a link, texts are clipped (head and tail kept around a visible marker, [`clip`]) and
//! extracts hold a window of steps ([`extract`]).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the host grants the feedback bundle.
pub const FEEDBACK: &str = "/feedback";
/// The bundle's trajectories directory.
pub const DIR: &str = "trajectories";
/// The list of kept trajectories in it.
pub const INDEX: &str = "index.json";
/// The largest file read from the bundle (the host bounds a trajectory to 64 Ki
/// characters; this leaves room for multi-byte text).
pub const READ_CAP: u64 = 1 << 20;
/// The most clues taken from one verifier output.
pub const MAX_CLUES: usize = 32;

// ------------------------------------------------------------------ ATIF types

// The guest side of `evaluator_harbor::trajectory`'s types (that crate is the host's and
// does not build for wasm32-wasip2): the fields operators read, unknown ones ignored.

/// One trajectory (ATIF v1.4), the fields an operator reads; others are ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    #[serde(default)]
    pub schema_version: String,
    #[serde(default)]
    pub session_id: String,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// Who a step came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    System,
    User,
    Agent,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::System => "system",
            Source::User => "user",
            Source::Agent => "agent",
        }
    }
}

/// One turn: a system prompt, a user message, or an agent's answer with its tool calls
/// and what they returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub step_id: u64,
    pub source: Source,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default)]
    pub tool_call_id: String,
    pub function_name: String,
    #[serde(default)]
    pub arguments: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    #[serde(default)]
    pub results: Vec<ObservationResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservationResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_call_id: Option<String>,
    #[serde(default)]
    pub content: Value,
}

/// A JSON value as text: a string as itself, anything else as compact JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl ToolCall {
    /// `name: arguments`, with a lone string argument (`{"command": "ls"}`) shown bare.
    pub fn text(&self) -> String {
        let args = match &self.arguments {
            Value::Object(m) if m.len() == 1 => {
                value_text(m.values().next().unwrap_or(&Value::Null))
            }
            other => value_text(other),
        };
        format!("{}: {args}", self.function_name)
    }
}

impl Step {
    /// What the agent did: its tool calls, one a line, or (none) its message.
    pub fn action(&self) -> String {
        if self.tool_calls.is_empty() {
            return self.message.clone();
        }
        let calls: Vec<String> = self.tool_calls.iter().map(ToolCall::text).collect();
        calls.join("\n")
    }

    /// What its tool calls returned, joined.
    pub fn observed(&self) -> String {
        let Some(o) = &self.observation else {
            return String::new();
        };
        let texts: Vec<String> = o.results.iter().map(|r| value_text(&r.content)).collect();
        texts.join("\n")
    }
}

impl Trajectory {
    /// The task as the agent got it: the first user step's message.
    pub fn instruction(&self) -> Option<&str> {
        self.steps
            .iter()
            .find(|s| s.source == Source::User)
            .map(|s| s.message.as_str())
    }
}

// ------------------------------------------------------------------ the bundle

/// One kept trajectory, as the host's `trajectories/index.json` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub task: String,
    pub repetition: u64,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub reward: Option<f64>,
    /// Relative to the trajectories directory: `run-<n>/<trial>.json`.
    pub json: String,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub steps: u64,
    #[serde(default)]
    pub tool_calls: u64,
    #[serde(default)]
    pub truncated: bool,
}

/// The files a rollout/train summary names for one trial (relative to rollout's
/// `/scratch`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryRef {
    #[serde(default)]
    pub json: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub skipped: Option<String>,
}

/// One trial as rollout/train's summary reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub task: String,
    #[serde(default)]
    pub repetition: Option<u64>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub reward: Option<f64>,
    #[serde(default)]
    pub passed: Option<bool>,
    #[serde(default)]
    pub verifier_output: String,
    #[serde(default)]
    pub trajectory: Option<TrajectoryRef>,
}

impl Trial {
    /// Failed: `passed` is false; without `passed`, not `benchmark-complete` or a reward
    /// below 1 (rollout/train's own rule at its default threshold).
    pub fn failed(&self) -> bool {
        match self.passed {
            Some(p) => !p,
            None => {
                self.status.as_deref() != Some("benchmark-complete")
                    || !self.reward.is_some_and(|r| r >= 1.0)
            }
        }
    }

    /// `task#repetition`.
    pub fn key(&self) -> String {
        match self.repetition {
            Some(r) => format!("{}#{r}", self.task),
            None => self.task.clone(),
        }
    }
}

/// The trials of a rollout/train summary, in its order. A summary with no `trials` but a
/// `failed` list of task names (the CLI's sample evidence) gives one failed trial per name.
pub fn trials(summary: &Value) -> Result<Vec<Trial>, String> {
    let Some(list) = summary.get("trials") else {
        let failed = summary.get("failed").and_then(Value::as_array).ok_or(
            "the rollout summary has neither `trials` nor `failed`: these operators read \
             rollout/train's",
        )?;
        let names = failed.iter().filter_map(Value::as_str);
        return Ok(names
            .map(|task| Trial {
                task: task.to_string(),
                passed: Some(false),
                ..Trial::default()
            })
            .collect());
    };
    let list = list
        .as_array()
        .ok_or("the rollout summary's `trials` is not a list")?;
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::from_value(t.clone())
                .map_err(|e| format!("the rollout summary's trials[{i}] is not a trial: {e}"))
        })
        .collect()
}

/// A feedback bundle on disk (`/feedback`, or a test's directory).
#[derive(Debug, Clone)]
pub struct Bundle {
    root: PathBuf,
}

/// A trial with the trajectory it left, when there is one (or why it cannot be read).
#[derive(Debug, Clone)]
pub struct Joined {
    pub trial: Trial,
    /// The trajectory file, relative to the bundle's `trajectories/`.
    pub file: Option<String>,
    pub trajectory: Result<Trajectory, String>,
}

/// A relative path of normal components only (no `..`, no root, not empty).
fn safe_rel(rel: &str) -> Option<&Path> {
    let p = Path::new(rel);
    let normal = p.components().all(|c| matches!(c, Component::Normal(_)));
    (normal && !rel.is_empty()).then_some(p)
}

impl Bundle {
    /// The bundle at `root`; `None` when no bundle was granted (no such directory).
    pub fn open(root: &Path) -> Option<Bundle> {
        std::fs::symlink_metadata(root)
            .is_ok_and(|m| m.is_dir())
            .then(|| Bundle {
                root: root.to_path_buf(),
            })
    }

    /// The bundle the host granted at [`FEEDBACK`], if any.
    pub fn granted() -> Option<Bundle> {
        Bundle::open(Path::new(FEEDBACK))
    }

    /// A regular file of the bundle, read up to [`READ_CAP`] bytes; a link, a directory
    /// or a larger file is refused.
    pub fn read(&self, rel: &str) -> Result<String, String> {
        let path = safe_rel(rel).ok_or(format!("`{rel}` is not a plain relative path"))?;
        let full = self.root.join(path);
        let meta = std::fs::symlink_metadata(&full).map_err(|e| format!("{rel}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{rel} is not a regular file"));
        }
        if meta.len() > READ_CAP {
            return Err(format!("{rel} is larger than {READ_CAP} bytes"));
        }
        std::fs::read_to_string(&full).map_err(|e| format!("{rel}: {e}"))
    }

    /// `trajectories/index.json`; empty when the host kept no trajectory.
    pub fn index(&self) -> Result<Vec<IndexEntry>, String> {
        let rel = format!("{DIR}/{INDEX}");
        if std::fs::symlink_metadata(self.root.join(&rel)).is_err() {
            return Ok(Vec::new());
        }
        serde_json::from_str(&self.read(&rel)?)
            .map_err(|e| format!("{rel} is not the host's trajectory index: {e}"))
    }

    /// The trajectory at `rel`, relative to `trajectories/`.
    pub fn trajectory(&self, rel: &str) -> Result<Trajectory, String> {
        let text = self.read(&format!("{DIR}/{rel}"))?;
        serde_json::from_str(&text).map_err(|e| format!("{DIR}/{rel} is not ATIF: {e}"))
    }

    /// Each trial joined to its trajectory (see [`join_file`]).
    pub fn join(&self, trials: &[Trial]) -> Result<Vec<Joined>, String> {
        let index = self.index()?;
        Ok(trials
            .iter()
            .map(|t| {
                let file = join_file(t, &index);
                let trajectory =
                    match (&file, t.trajectory.as_ref().and_then(|r| r.skipped.clone())) {
                        (Some(f), _) => self.trajectory(f),
                        (None, Some(why)) => Err(format!("the host did not keep it: {why}")),
                        (None, None) => Err("the trial left no trajectory".into()),
                    };
                Joined {
                    trial: t.clone(),
                    file,
                    trajectory,
                }
            })
            .collect())
    }
}

/// The trajectory file of `trial`, relative to the bundle's `trajectories/`: the one its
/// summary entry names (`trajectories/run-<n>/<trial>.json`), else the first index entry
/// of the same task and repetition. Names with `..` or a root are ignored.
pub fn join_file(trial: &Trial, index: &[IndexEntry]) -> Option<String> {
    let named = trial
        .trajectory
        .as_ref()
        .and_then(|r| r.json.as_deref())
        .and_then(|p| p.strip_prefix(&format!("{DIR}/")))
        .filter(|p| safe_rel(p).is_some());
    if let Some(p) = named {
        return Some(p.to_string());
    }
    index
        .iter()
        .find(|e| e.task == trial.task && trial.repetition.is_none_or(|r| r == e.repetition))
        .map(|e| e.json.clone())
        .filter(|p| safe_rel(p).is_some())
}

/// A trial with its trajectory (or why it has none) and the step where it went wrong.
#[derive(Debug, Clone)]
pub struct Case {
    pub trial: Trial,
    /// The trajectory file, relative to the bundle's `trajectories/`.
    pub file: Option<String>,
    pub trajectory: Option<Trajectory>,
    /// Why there is no trajectory.
    pub note: Option<String>,
    /// For a failed trial with a trajectory: the step where it went wrong.
    pub culprit: Option<Culprit>,
}

/// The trials of a rollout/train `summary`, joined to their trajectories in `bundle`
/// (`None`: no bundle was granted), each failed one with its [`culprit`].
pub fn cases(summary: &Value, bundle: Option<&Bundle>) -> Result<Vec<Case>, String> {
    let trials = trials(summary)?;
    let joined = match bundle {
        Some(b) => b.join(&trials)?,
        None => trials
            .into_iter()
            .map(|trial| Joined {
                trial,
                file: None,
                trajectory: Err("no feedback bundle was granted to this call".into()),
            })
            .collect(),
    };
    Ok(joined
        .into_iter()
        .map(|j| {
            let (trajectory, note) = match j.trajectory {
                Ok(t) => (Some(t), None),
                Err(why) => (None, Some(why)),
            };
            let culprit = trajectory
                .as_ref()
                .filter(|_| j.trial.failed())
                .and_then(|t| culprit(t, verifier_text(&j.trial.verifier_output)));
            Case {
                trial: j.trial,
                file: j.file,
                trajectory,
                note,
                culprit,
            }
        })
        .collect())
}

/// [`cases`] of a rollout evidence summary as the host hands it (JSON text).
pub fn cases_of(rollout_summary: &str, bundle: Option<&Bundle>) -> Result<Vec<Case>, String> {
    let summary: Value = serde_json::from_str(rollout_summary)
        .map_err(|e| format!("the rollout summary is not JSON: {e}"))?;
    cases(&summary, bundle)
}

impl Case {
    /// The steps around the culprit (else the last ones), clipped.
    pub fn extract(&self, w: Window) -> Vec<StepExtract> {
        match &self.trajectory {
            Some(t) => extract(t, self.culprit.as_ref().map(|c| c.index), w),
            None => Vec::new(),
        }
    }

    /// The step where it went wrong, if found.
    pub fn culprit_step(&self) -> Option<&Step> {
        let c = self.culprit.as_ref()?;
        self.trajectory.as_ref()?.steps.get(c.index)
    }

    /// The case as evidence: the trial, its verifier output's last `output_chars`
    /// characters, its trajectory file (relative to the bundle), the culprit and the
    /// extract around it.
    pub fn evidence(&self, w: Window, output_chars: usize) -> Value {
        let t = &self.trial;
        serde_json::json!({
            "task": t.task,
            "repetition": t.repetition,
            "status": t.status,
            "reward": t.reward,
            "passed": !t.failed(),
            "verifier_output": tail(verifier_text(&t.verifier_output), output_chars),
            "trajectory": self.file.as_ref().map(|f| format!("{DIR}/{f}")),
            "note": self.note,
            "steps": self.trajectory.as_ref().map(|t| t.steps.len()),
            "culprit": self.culprit,
            "extract": self.extract(w),
        })
    }
}

// ------------------------------------------------------------------ the culprit step

/// Which rule found the step where a trial went wrong (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    VerifierPointer,
    LastFailingObservation,
    LastToolCall,
}

impl Rule {
    /// The rule's name as its JSON has it (`verifier_pointer`, …).
    pub fn name(self) -> &'static str {
        match self {
            Rule::VerifierPointer => "verifier_pointer",
            Rule::LastFailingObservation => "last_failing_observation",
            Rule::LastToolCall => "last_tool_call",
        }
    }
}

/// The step where a trial went wrong, and why that one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprit {
    pub step_id: u64,
    /// Its position in `steps`.
    #[serde(skip)]
    pub index: usize,
    pub rule: Rule,
    /// The verifier's clues the step matched (rule `verifier_pointer` only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clues: Vec<String>,
    /// The failure its observation shows, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// Words that look like a file or path: `a/b`, `/app/x`, `name.ext` (a stem of at least
/// two characters with a letter, an extension of 1–6 alphanumerics with a letter).
fn path_like(word: &str) -> bool {
    let has_letter = |s: &str| s.chars().any(|c| c.is_ascii_alphabetic());
    if word.len() < 3 || word.len() > 200 || !has_letter(word) {
        return false;
    }
    if word.contains('/') {
        return word.split('/').any(|seg| seg.len() >= 2 && has_letter(seg));
    }
    match word.rsplit_once('.') {
        Some((stem, ext)) => {
            stem.chars().count() >= 2
                && has_letter(stem)
                && (1..=6).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && has_letter(ext)
        }
        None => false,
    }
}

/// The clues of a verifier output (see the module documentation), in first-seen order,
/// at most [`MAX_CLUES`].
pub fn clues(verifier_output: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |c: &str| {
        let c = c.trim_matches(|ch: char| ch == '.' || ch == ',' || ch == ':');
        if c.chars().count() >= 3 && !out.iter().any(|o| o == c) && out.len() < MAX_CLUES {
            out.push(c.to_string());
        }
    };
    for (i, span) in verifier_output.split('`').enumerate() {
        // Odd pieces are inside backquotes.
        if i % 2 == 1 && !span.contains('\n') && span.len() <= 200 {
            push(span.trim());
        }
    }
    let word_char = |c: char| c.is_alphanumeric() || "/._-~".contains(c);
    for word in verifier_output.split(|c: char| !word_char(c)) {
        let word = word.trim_end_matches('.');
        if path_like(word) {
            push(word);
            if let Some((_, name)) = word.rsplit_once('/')
                && path_like(name)
            {
                push(name);
            }
        }
    }
    out
}

/// The failure an observation shows, if any: a non-zero or `timeout` `<returncode>`, an
/// `exit code N`, or one of a few error texts; the first found, as a short phrase.
pub fn failure_signal(observed: &str) -> Option<String> {
    if let Some(rest) = observed.split("<returncode>").nth(1) {
        let code = rest.split("</returncode>").next().unwrap_or("").trim();
        if code != "0" && !code.is_empty() {
            return Some(format!("returncode {code}"));
        }
    }
    let lower = observed.to_lowercase();
    for prefix in ["exit code ", "exit status ", "exited with "] {
        if let Some(rest) = lower.split(prefix).nth(1) {
            let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if !code.is_empty() && code != "0" {
                return Some(format!("exit code {code}"));
            }
        }
    }
    const SIGNS: [&str; 8] = [
        "traceback (most recent call last)",
        "command not found",
        "no such file or directory",
        "permission denied",
        "syntax error",
        "timed out",
        "was killed after",
        "error:",
    ];
    SIGNS
        .iter()
        .find(|s| lower.contains(*s))
        .map(|s| s.trim_end_matches(':').to_string())
}

/// Rule 1: the agent step the verifier's `clues` point at, if any.
fn pointed(agent: &[(usize, &Step)], clues: &[String]) -> Option<Culprit> {
    // (clues matched, failing, position): the greatest wins.
    let mut best: Option<((usize, bool, usize), Culprit)> = None;
    for &(i, s) in agent {
        let (action, observed) = (s.action(), s.observed());
        let matched: Vec<String> = clues
            .iter()
            .filter(|c| action.contains(c.as_str()) || observed.contains(c.as_str()))
            .cloned()
            .collect();
        if matched.is_empty() {
            continue;
        }
        let failure = failure_signal(&observed);
        let key = (matched.len(), failure.is_some(), i);
        if best.as_ref().is_none_or(|(k, _)| key >= *k) {
            let c = Culprit {
                step_id: s.step_id,
                index: i,
                rule: Rule::VerifierPointer,
                clues: matched,
                failure,
            };
            best = Some((key, c));
        }
    }
    best.map(|(_, c)| c)
}

/// The step where the trial went wrong (rules in the module documentation).
pub fn culprit(t: &Trajectory, verifier_output: &str) -> Option<Culprit> {
    let agent: Vec<(usize, &Step)> = t
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.source == Source::Agent)
        .collect();
    if let Some(c) = pointed(&agent, &clues(verifier_output)) {
        return Some(c);
    }
    let failing = agent
        .iter()
        .rev()
        .find_map(|&(i, s)| failure_signal(&s.observed()).map(|f| (i, f)));
    if let Some((i, f)) = failing {
        return Some(Culprit {
            step_id: t.steps[i].step_id,
            index: i,
            rule: Rule::LastFailingObservation,
            clues: Vec::new(),
            failure: Some(f),
        });
    }
    agent
        .iter()
        .rev()
        .find(|(_, s)| !s.tool_calls.is_empty())
        .map(|&(i, s)| Culprit {
            step_id: s.step_id,
            index: i,
            rule: Rule::LastToolCall,
            clues: Vec::new(),
            failure: None,
        })
}

// ------------------------------------------------------------------ bounded extracts

/// The marker that replaces `cut` characters of a clipped text.
pub fn marker(cut: usize) -> String {
    format!("[… {cut} more characters cut]")
}

/// `text` in at most about `max` characters: unchanged when it fits, else its head (two
/// thirds) and its tail (where a command's error usually is) around a [`marker`].
pub fn clip(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let head = max * 2 / 3;
    let tail = max - head;
    let cut = n - head - tail;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(n - tail).collect();
    format!("{start}{}{end}", marker(cut))
}

/// One step of an extract, every text clipped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepExtract {
    pub step_id: u64,
    pub source: &'static str,
    /// The step's message (for an agent step with tool calls, its reasoning text).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Its tool calls, `name: arguments`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub observation: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Whether this is the step where the trial went wrong.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub culprit: bool,
}

/// How much of a trajectory an extract keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Steps kept before the focus step, and after it.
    pub before: usize,
    pub after: usize,
    /// Characters kept of each text.
    pub field_chars: usize,
}

/// The steps around `focus` (a position in `steps`; `None`: the last step), the system
/// and first user step excepted (the instruction is reported on its own), clipped.
pub fn extract(t: &Trajectory, focus: Option<usize>, w: Window) -> Vec<StepExtract> {
    if t.steps.is_empty() {
        return Vec::new();
    }
    let marked = focus;
    let focus = focus.unwrap_or(t.steps.len() - 1).min(t.steps.len() - 1);
    let first_user = t.steps.iter().position(|s| s.source == Source::User);
    let from = focus.saturating_sub(w.before);
    let to = focus.saturating_add(w.after).min(t.steps.len() - 1);
    (from..=to)
        .filter(|&i| t.steps[i].source != Source::System && Some(i) != first_user)
        .map(|i| {
            let s = &t.steps[i];
            let observed = s.observed();
            StepExtract {
                step_id: s.step_id,
                source: s.source.name(),
                message: clip(&s.message, w.field_chars),
                tool_calls: s
                    .tool_calls
                    .iter()
                    .map(|c| clip(&c.text(), w.field_chars))
                    .collect(),
                failure: failure_signal(&observed),
                observation: clip(&observed, w.field_chars),
                culprit: marked == Some(i),
            }
        })
        .collect()
}

pub use crate::feedback::tail;

/// Write `value` as one line of JSON to `scratch/name` (an evidence artifact).
pub fn write_artifact(scratch: &Path, name: &str, value: &Value) -> Result<(), String> {
    std::fs::write(scratch.join(name), format!("{value}\n"))
        .map_err(|e| format!("cannot write {name}: {e}"))
}

/// A trial's verifier output without the host's `[trajectory] {…}` first line.
pub fn verifier_text(output: &str) -> &str {
    match output.strip_prefix("[trajectory] ") {
        Some(rest) => rest.split_once('\n').map_or("", |(_, after)| after),
        None => output,
    }
}

/// Fixtures for operators' unit tests: a terminal-agent-like trajectory, and a feedback
/// bundle on disk with the rollout/train summary that names it.
pub mod testing {
    use super::*;
    use serde_json::json;

    /// System prompt, the task, a first command that works (`ls /app`), `command` with
    /// `output` and exit `code`, then the submission.
    pub fn trajectory(task: &str, command: &str, output: &str, code: i32) -> Trajectory {
        let step = |id: u64, command: &str, output: &str, code: i32| {
            json!({"step_id": id, "source": "agent", "message": format!("Step {id}."),
                   "tool_calls": [{"tool_call_id": format!("c{id}"), "function_name": "bash",
                                   "arguments": {"command": command}}],
                   "observation": {"results": [{"source_call_id": format!("c{id}"),
                       "content": format!("<returncode>{code}</returncode>\n<output>\n{output}\n</output>")}]}})
        };
        serde_json::from_value(json!({
            "schema_version": "ATIF-v1.4",
            "session_id": format!("{task}-session"),
            "steps": [
                {"step_id": 1, "source": "system", "message": "You are a shell agent."},
                {"step_id": 2, "source": "user", "message": format!("Solve {task} in /app.")},
                step(3, "ls /app", "input.txt", 0),
                step(4, command, output, code),
                step(5, "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", 0),
            ],
        }))
        .unwrap_or_default()
    }

    /// One trial of a fixture bundle (repetition 0).
    pub struct TrialSpec<'a> {
        pub task: &'a str,
        pub reward: f64,
        pub verifier_output: &'a str,
        pub trajectory: Option<Trajectory>,
    }

    /// Write the trials' trajectories and `trajectories/index.json` under `root` as the
    /// host does, and return the rollout/train summary naming them (a trial passes at
    /// reward 1).
    pub fn bundle(root: &Path, trials: &[TrialSpec<'_>]) -> Value {
        let mut index = Vec::new();
        let mut listed = Vec::new();
        for t in trials {
            let passed = t.reward >= 1.0;
            let mut entry = json!({"task": t.task, "repetition": 0, "status": "benchmark-complete",
                                   "reward": t.reward, "passed": passed});
            if !passed {
                entry["verifier_output"] = json!(t.verifier_output);
            }
            if let Some(tr) = &t.trajectory {
                let rel = format!("run-1/{}__r0.json", t.task);
                let path = root.join(DIR).join(&rel);
                let _ = std::fs::create_dir_all(path.parent().unwrap_or(root));
                let _ = std::fs::write(&path, serde_json::to_string(tr).unwrap_or_default());
                index.push(json!({"task": t.task, "repetition": 0, "status": "benchmark-complete",
                                  "reward": t.reward, "json": rel, "text": rel.replace(".json", ".txt"),
                                  "steps": tr.steps.len()}));
                entry["trajectory"] =
                    json!({"json": format!("{DIR}/{rel}"), "steps": tr.steps.len()});
            }
            listed.push(entry);
        }
        let _ = std::fs::create_dir_all(root.join(DIR));
        let _ = std::fs::write(root.join(DIR).join(INDEX), Value::Array(index).to_string());
        json!({"sampling": "static", "trials": listed})
    }
}

#[cfg(test)]
mod tests;
