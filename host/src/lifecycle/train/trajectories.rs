//! The trajectories of the train trials the `tasks` capability ran, handed on bounded.
//!
//! For each train trial, its `trajectory.json` (`evaluator_harbor::trajectory`) is read
//! without following a link, filtered (the host's paths and every private task name
//! replaced) and bounded twice: as ATIF JSON (`<trial>.json`) and as a text summary
//! (`<trial>.txt`). Both go into the calling stage's `/scratch/trajectories/run-<n>/`,
//! where the operator reads them, and into a host-only copy under the stage's trial
//! directory (`train/trajectories/`, never granted), from which mutate's feedback bundle
//! is assembled. The trial's report starts with one `[trajectory] {…}` line naming them
//! (see [`line`]). A missing trajectory adds nothing; an unreadable one (a link, too large,
//! not ATIF) adds a line saying why, and the trial is reported as usual.
//!
//! Only this backend writes trajectories for operators, and it runs train trials only:
//! a gate or sealed trial's trajectory never reaches an operator through it.

use crate::lifecycle::view::Redactor;
use evaluator_harbor::result::TrialResult;
use evaluator_harbor::trajectory::summary::{self, Bounds, Counts};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The directory trajectories go to, in `/scratch` and in the host-only copy.
pub const DIR: &str = "trajectories";
/// The list of every trajectory kept so far by one stage call, in the same directory.
pub const INDEX: &str = "index.json";
/// How each report's line starts.
pub const LINE_PREFIX: &str = "[trajectory] ";
/// The largest `trajectory.json` read; a larger one is skipped with a note.
pub const READ_CAP: u64 = 32 << 20;
/// The ATIF copy: 64 Ki characters at most.
pub const JSON_BOUNDS: Bounds = Bounds {
    field_chars: 4000,
    max_steps: 200,
    max_items: 100,
    total_chars: 64 * 1024,
};
/// The text summary: 16 Ki characters at most.
pub const TEXT_BOUNDS: Bounds = Bounds {
    field_chars: 1000,
    max_steps: 200,
    max_items: 20,
    total_chars: 16 * 1024,
};
/// The most bytes of trajectory files one stage call's `/scratch` receives; they count
/// toward its disk quota like the operator's own files. Past it a trial's report says
/// its trajectory was not kept.
pub const SCRATCH_BUDGET: u64 = 8 << 20;

/// One kept trajectory, as `index.json` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub task: String,
    pub repetition: u32,
    pub status: &'static str,
    pub reward: Option<f64>,
    /// Relative to the trajectories directory: `run-<n>/<task>__r<k>.json` and `.txt`.
    pub json: String,
    pub text: String,
    #[serde(flatten)]
    pub counts: Counts,
    /// Whether bounding cut anything from the ATIF copy (the text summary, smaller,
    /// may be cut when this is false; its markers say where).
    pub truncated: bool,
}

/// Where one stage call's trajectories go, and what it has kept.
pub struct Keeper {
    /// The stage's `/scratch` (the operator's).
    scratch: PathBuf,
    /// The host-only copy: `<stage>/train/trajectories`.
    copy: PathBuf,
    redactor: Redactor,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    bytes: u64,
    entries: Vec<Entry>,
}

impl Keeper {
    pub fn new(scratch: PathBuf, trials_root: &Path, redactor: Redactor) -> Keeper {
        Keeper {
            scratch,
            copy: trials_root.join(DIR),
            redactor,
            kept: Mutex::new(Kept::default()),
        }
    }

    /// Keep the trajectories of `trials`, run by call `run` of this backend; `scrub`
    /// removes the host's paths. Returns, per trial in order, the line its report starts
    /// with (`None`: the trial left no trajectory).
    pub fn keep(
        &self,
        run: u32,
        trials: &[&TrialResult],
        scrub: &dyn Fn(&str) -> String,
    ) -> Vec<Option<String>> {
        let filter = |s: &str| self.redactor.redact(&scrub(s));
        let lines = trials
            .iter()
            .map(|t| self.keep_one(run, t, &filter))
            .collect();
        self.write_index();
        lines
    }

    fn keep_one(
        &self,
        run: u32,
        t: &TrialResult,
        filter: &dyn Fn(&str) -> String,
    ) -> Option<String> {
        let trajectory = match summary::load(&t.logs.trial_dir, READ_CAP) {
            Ok(tr) => tr,
            Err(summary::Unreadable::Missing) => return None,
            Err(why) => return Some(skipped(&why.to_string())),
        };
        let bounded = summary::bound(&trajectory, &JSON_BOUNDS, filter);
        let text = summary::render(&trajectory, &TEXT_BOUNDS, filter);
        let name = t.trial_name.clone();
        let json_rel = format!("run-{run}/{name}.json");
        let text_rel = format!("run-{run}/{name}.txt");
        let size = (bounded.json.len() + text.len()) as u64;
        {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            if kept.bytes + size > SCRATCH_BUDGET {
                return Some(skipped(&format!(
                    "not kept: this stage call's {SCRATCH_BUDGET} bytes for trajectories are spent"
                )));
            }
            kept.bytes += size;
        }
        let files = [
            (&json_rel, bounded.json.as_bytes()),
            (&text_rel, text.as_bytes()),
        ];
        if let Err(e) = self.write_both(&files) {
            return Some(skipped(&format!("not kept: {e}")));
        }
        let entry = Entry {
            task: t.task.clone(),
            repetition: t.repetition,
            status: t.status.as_str(),
            reward: t.reward.filter(|r| r.is_finite()),
            json: json_rel,
            text: text_rel,
            counts: summary::counts(&trajectory),
            truncated: bounded.cut.any(),
        };
        let out = line(&entry);
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .push(entry);
        Some(out)
    }

    /// Write each file into `/scratch` and into the host-only copy.
    fn write_both(&self, files: &[(&String, &[u8])]) -> Result<(), String> {
        for (rel, bytes) in files {
            write_in_scratch(&self.scratch, &format!("{DIR}/{rel}"), bytes)?;
            write_host(&self.copy.join(rel), bytes)?;
        }
        Ok(())
    }

    /// `index.json` in both places, listing every trajectory kept so far.
    fn write_index(&self) {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.entries.is_empty() {
            return;
        }
        let mut text = serde_json::to_string_pretty(&kept.entries).unwrap_or_default();
        text.push('\n');
        let _ = write_in_scratch(&self.scratch, &format!("{DIR}/{INDEX}"), text.as_bytes());
        let _ = write_host(&self.copy.join(INDEX), text.as_bytes());
    }
}

/// The line a report starts with for a kept trajectory: the prefix and one JSON object,
/// `{"json": "/scratch/trajectories/run-1/t__r0.json", "text": "….txt", "steps", "tool_calls",
/// "prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd", "truncated"}`.
pub fn line(e: &Entry) -> String {
    let v = serde_json::json!({
        "json": format!("/scratch/{DIR}/{}", e.json),
        "text": format!("/scratch/{DIR}/{}", e.text),
        "steps": e.counts.steps,
        "tool_calls": e.counts.tool_calls,
        "prompt_tokens": e.counts.prompt_tokens,
        "completion_tokens": e.counts.completion_tokens,
        "cached_tokens": e.counts.cached_tokens,
        "cost_usd": e.counts.cost_usd,
        "truncated": e.truncated,
    });
    format!("{LINE_PREFIX}{v}")
}

/// The line for a trajectory that was not kept, and why.
fn skipped(why: &str) -> String {
    format!("{LINE_PREFIX}{}", serde_json::json!({ "skipped": why }))
}

/// Write `rel` (`a/b/c`) in the stage's `/scratch`, which its operator can write too: every
/// path is resolved inside the directory's handle (a link the operator planted cannot lead
/// out of it), and the file itself is unlinked and created anew, never written through.
fn write_in_scratch(scratch: &Path, rel: &str, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let dir = cap_std::fs::Dir::open_ambient_dir(scratch, cap_std::ambient_authority())
        .map_err(|e| format!("/scratch cannot be opened: {e}"))?;
    let path = Path::new(rel);
    if let Some(parent) = path.parent() {
        dir.create_dir_all(parent)
            .map_err(|e| format!("/scratch/{}: {e}", parent.display()))?;
    }
    match dir.remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("/scratch/{rel}: {e}")),
    }
    let mut options = cap_std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    dir.open_with(path, &options)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| format!("/scratch/{rel}: {e}"))
}

/// Write a file of the host-only copy (a directory no operator or agent is granted).
fn write_host(path: &Path, bytes: &[u8]) -> Result<(), String> {
    path.parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, bytes))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
