//! Shared fixtures for the sandbox integration tests: the hostile test components, a
//! fake workspace with files that must stay out of reach, and snapshots proving that
//! nothing outside an operator's grants changed.

#![allow(dead_code)]

use evolve::sandbox::tasks::{RunRequest, TasksError, TrialReport};
use evolve::sandbox::types::{ArchiveView, CallContext, Observation, Surface, TrialStatus};
use evolve::sandbox::{
    BoxFuture, CallReport, GrantRequest, Grants, LoadedOperator, OperatorFailure, Sandbox,
    SandboxConfig, StageInput, StageOutput, TaskBackend,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

pub use evolve::sandbox::types::Stage;

/// Content of `evaluator/secret.txt`: must never appear in anything an operator returns.
pub const SECRET: &str = "SECRET-EVALUATOR-DATA-7f3a9c";
/// Content of `archive.jsonl`.
pub const ARCHIVE: &str = "{\"generation\":\"0\",\"sealed_task\":\"SEALED-TASK-NAME-b41d\"}\n";
/// Content of `target/file.txt`.
pub const TARGET_FILE: &str = "original target content\n";

/// Path of a test component built by `host/build.rs`.
pub fn component_path(name: &str) -> PathBuf {
    Path::new(evolve::builtin::TEST_COMPONENTS_DIR).join(format!("tc_{name}.wasm"))
}

/// Bytes of a test component (`hostile_select`, `hostile_mutate`, ...).
pub fn component(name: &str) -> Vec<u8> {
    let path = component_path(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("test component {}: {e}", path.display()))
}

/// One sandbox per test binary (memory cache only), so each component compiles once.
pub fn sandbox() -> Arc<Sandbox> {
    static SANDBOX: OnceLock<Arc<Sandbox>> = OnceLock::new();
    SANDBOX
        .get_or_init(|| Sandbox::new(SandboxConfig::default()).expect("sandbox"))
        .clone()
}

/// Load a test component for `stage` in the shared sandbox.
pub fn load(name: &str, stage: Stage) -> LoadedOperator {
    sandbox()
        .load_bytes(stage, &component(name), format!("test:{name}"))
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// A temporary directory laid out like a workspace around one candidate checkout:
///
/// ```text
/// root/
///   checkout/target/{file.txt, sub/keep.txt}       granted as /target
///   checkout/operators/select/mine/src/lib.rs      granted as /operators (if in surface)
///   checkout/evaluator/secret.txt                  never granted
///   checkout/archive.jsonl                         never granted
///   scratch/                                       granted as /scratch
///   feedback/train.json                            granted as /feedback (mutate)
///   outside.txt                                    never granted
/// ```
pub struct Fixture {
    pub root: tempfile::TempDir,
    pub checkout: PathBuf,
    pub scratch: PathBuf,
    pub feedback: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        let checkout = r.join("checkout");
        let files: [(&str, &str); 7] = [
            ("checkout/target/file.txt", TARGET_FILE),
            ("checkout/target/sub/keep.txt", "keep\n"),
            (
                "checkout/operators/select/mine/src/lib.rs",
                "// operator source\n",
            ),
            ("checkout/evaluator/secret.txt", SECRET),
            ("checkout/archive.jsonl", ARCHIVE),
            ("feedback/train.json", "{\"train-1\":0.5}\n"),
            ("outside.txt", SECRET),
        ];
        for (rel, content) in files {
            let p = r.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
        }
        std::fs::create_dir_all(r.join("scratch")).unwrap();
        Fixture {
            scratch: r.join("scratch"),
            feedback: r.join("feedback"),
            checkout,
            root,
        }
    }

    pub fn target(&self) -> PathBuf {
        self.checkout.join("target")
    }

    /// Symlinks a previous (hostile) mutate could have left in the candidate: out of the
    /// tree relatively and absolutely, to a directory outside, from a subdirectory, and
    /// one harmless link inside the tree as a positive control.
    pub fn plant_read_links(&self) {
        let t = self.target();
        let links = [
            ("../evaluator/secret.txt", t.join("link_rel")),
            ("/etc/passwd", t.join("link_abs")),
            ("../evaluator", t.join("link_dir")),
            ("../../evaluator/secret.txt", t.join("sub/link_up2")),
            ("file.txt", t.join("link_inner")),
        ];
        for (dest, link) in links {
            std::os::unix::fs::symlink(dest, &link).unwrap();
        }
    }

    /// The contract's grants for `stage` on this fixture.
    pub fn grants(&self, stage: Stage, operators_in_surface: bool) -> Grants {
        Grants::for_stage(
            stage,
            &GrantRequest {
                checkout: &self.checkout,
                operators_in_surface,
                scratch: &self.scratch,
                feedback: Some(&self.feedback),
            },
        )
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot::of(self.root.path())
    }
}

/// Everything observable about a tree: kind, content, mode and mtime of every entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir {
        mode: u32,
        mtime_ns: i128,
    },
    File {
        mode: u32,
        mtime_ns: i128,
        content: Vec<u8>,
    },
    Symlink {
        target: PathBuf,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot(pub BTreeMap<PathBuf, Node>);

impl Snapshot {
    pub fn of(root: &Path) -> Snapshot {
        let mut map = BTreeMap::new();
        walk(root, root, &mut map);
        Snapshot(map)
    }

    /// Paths (relative to the root) that were added, removed or changed in `after`.
    pub fn changes(&self, after: &Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        for (p, n) in &self.0 {
            match after.0.get(p) {
                None => out.push(format!("removed {}", p.display())),
                Some(m) if m != n => out.push(format!("changed {}", p.display())),
                _ => {}
            }
        }
        for p in after.0.keys().filter(|p| !self.0.contains_key(*p)) {
            out.push(format!("added {}", p.display()));
        }
        out
    }

    /// Changes outside the directories listed in `granted` (root-relative prefixes).
    /// A granted directory's own entry (its mtime) may change too.
    pub fn changes_outside(&self, after: &Snapshot, granted: &[&str]) -> Vec<String> {
        self.changes(after)
            .into_iter()
            .filter(|c| {
                let path = c.split_once(' ').unwrap().1;
                !granted
                    .iter()
                    .any(|g| path == *g || path.starts_with(&format!("{g}/")))
            })
            .collect()
    }
}

fn walk(root: &Path, dir: &Path, map: &mut BTreeMap<PathBuf, Node>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let rel = path.strip_prefix(root).unwrap().to_path_buf();
        let mode = meta.permissions().mode();
        let mtime_ns = meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128;
        if meta.file_type().is_symlink() {
            map.insert(
                rel,
                Node::Symlink {
                    target: std::fs::read_link(&path).unwrap(),
                },
            );
        } else if meta.is_dir() {
            map.insert(rel, Node::Dir { mode, mtime_ns });
            walk(root, &path, map);
        } else {
            let content = std::fs::read(&path).unwrap();
            map.insert(
                rel,
                Node::File {
                    mode,
                    mtime_ns,
                    content,
                },
            );
        }
    }
}

/// A call context carrying `config`.
pub fn ctx(config: Value) -> CallContext {
    CallContext {
        generation_id: "1".into(),
        parent: Some("0".into()),
        generation: 1,
        seed: 7,
        config: config.to_string(),
        deadline_ms: 60_000,
        script: None,
    }
}

pub fn select_input(attack: &str) -> StageInput {
    select_input_with(serde_json::json!({ "attack": attack }))
}

pub fn select_input_with(config: Value) -> StageInput {
    let mut c = ctx(config);
    c.parent = None;
    StageInput::Select {
        ctx: c,
        archive: ArchiveView {
            rows: Vec::new(),
            champion: None,
        },
    }
}

pub fn mutate_input(attack: &str) -> StageInput {
    StageInput::Mutate {
        ctx: ctx(serde_json::json!({ "attack": attack })),
        observation: Observation {
            rollout: None,
            analysis: None,
            feedback_dir: Some("/feedback".into()),
            archive: None,
            surface: Surface {
                includes: vec!["target/**".into()],
                excludes: Vec::new(),
            },
        },
    }
}

/// The error text an operator reported; panics with the whole outcome otherwise.
pub fn reported(report: &CallReport) -> &str {
    match &report.outcome {
        Err(OperatorFailure::Reported(msg)) => msg,
        other => panic!(
            "expected a reported error, got {}\nstderr: {}",
            brief(other),
            stderr(report)
        ),
    }
}

/// The failure of a call; panics if it succeeded.
pub fn failure(report: &CallReport) -> &OperatorFailure {
    match &report.outcome {
        Err(f) => f,
        Ok(out) => panic!("expected a failure, got {}", brief(&out.to_json())),
    }
}

/// Assert the exact failure, without dumping megabytes if a hostile result got through.
pub fn assert_failure(report: &CallReport, expected: &OperatorFailure) {
    let got = failure(report);
    assert!(
        got == expected,
        "expected {expected:?}\n     got {}\n  stderr: {}",
        brief(got),
        brief(&stderr(report))
    );
}

/// `Debug` text cut to 2000 characters.
pub fn brief(value: &dyn std::fmt::Debug) -> String {
    let text = format!("{value:?}");
    match text.char_indices().nth(2000) {
        Some((i, _)) => format!("{}... ({} bytes)", &text[..i], text.len()),
        None => text,
    }
}

/// The parents a select call returned; panics otherwise.
pub fn parents(report: &CallReport) -> &[String] {
    match &report.outcome {
        Ok(StageOutput::Parents(p)) => p,
        other => panic!(
            "expected parents, got {}\nstderr: {}",
            brief(other),
            stderr(report)
        ),
    }
}

/// The notes of a mutate proposal; panics otherwise.
pub fn notes(report: &CallReport) -> &[String] {
    match &report.outcome {
        Ok(StageOutput::Proposal(p)) => &p.notes,
        other => panic!(
            "expected a proposal, got {}\nstderr: {}",
            brief(other),
            stderr(report)
        ),
    }
}

pub fn stderr(report: &CallReport) -> String {
    String::from_utf8_lossy(&report.stderr.bytes).into_owned()
}

/// Check a denial report: exactly the `expected` attempts, in order, each denied, and
/// no secret in the text.
pub fn assert_all_denied(msg: &str, expected: &[&str]) {
    let lines: Vec<&str> = msg.lines().collect();
    let attempts: Vec<&str> = lines
        .iter()
        .map(|l| l.split(": denied: ").next().unwrap())
        .collect();
    assert_eq!(attempts, expected, "attempts differ; full report:\n{msg}");
    for line in &lines {
        assert!(
            line.contains(": denied: "),
            "not denied: {line}\nfull report:\n{msg}"
        );
    }
    assert_no_secret(msg);
}

pub fn assert_no_secret(text: &str) {
    for secret in [SECRET, "SEALED-TASK-NAME", "root:x:", "BREACH"] {
        assert!(!text.contains(secret), "{secret:?} leaked into: {text}");
    }
}

/// A task backend whose only train task is `train-1`, recording every run it is asked
/// for (the sandbox must filter non-train names before it gets here).
#[derive(Default)]
pub struct RecordingTasks {
    pub runs: Mutex<Vec<Vec<String>>>,
}

impl TaskBackend for RecordingTasks {
    fn train_tasks(&self) -> Vec<String> {
        vec!["train-1".into()]
    }
    fn run(&self, request: RunRequest) -> BoxFuture<'_, Result<Vec<TrialReport>, TasksError>> {
        self.runs.lock().unwrap().push(request.tasks.clone());
        Box::pin(async move {
            Ok(request
                .tasks
                .iter()
                .flat_map(|t| {
                    (0..request.repetitions).map(move |r| TrialReport {
                        task: t.clone(),
                        repetition: r,
                        status: TrialStatus::BenchmarkComplete,
                        reward: Some(0.5),
                        verifier_output: String::new(),
                        duration_ms: 1,
                        cost_usd: None,
                    })
                })
                .collect())
        })
    }
}
