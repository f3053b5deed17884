//! What a script may reach beyond its inputs: exactly what its stage's world grants, as
//! functions the per-stage crate hands in. A select, novelty, gate or record script
//! gets none of these; validate gets `/target` reads, the `tasks` capability and
//! `/scratch` for its artifacts. Paths are checked here as well as by the sandbox's
//! preopens, so a script learns *why* a path is refused.

use crate::convert;
use crate::engine::MAX_STRING;
use evolve_operator_sdk::tasks::{RunRequest, TasksError, TrialReport};
use rhai::{Array, Dynamic, Engine, EvalAltResult, INT};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The `tasks` capability (train tasks only), as the stage's world imports it.
pub trait Tasks {
    fn train_tasks(&self) -> Vec<String>;
    fn run(&self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError>;
}

/// The grants of one call. The default grants nothing.
#[derive(Default, Clone)]
pub struct Grants {
    /// `train_tasks()` and `run_tasks(names, repetitions)`.
    pub tasks: Option<Rc<dyn Tasks>>,
    /// `target_read(path)`, `target_exists(path)`, `target_list(dir)` below this
    /// directory (`/target` in the component).
    pub target: Option<PathBuf>,
    /// `scratch_write(name, text)` below this directory (`/scratch`).
    pub scratch: Option<PathBuf>,
}

type Fallible<T> = Result<T, Box<EvalAltResult>>;

/// A relative path of plain segments (`""` is the root itself when `root_ok`).
fn clean(what: &str, path: &str, root_ok: bool) -> Result<(), String> {
    if root_ok && (path.is_empty() || path == ".") {
        return Ok(());
    }
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.chars().any(char::is_control)
        || path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..");
    if bad {
        return Err(format!(
            "{what}: {path:?} must be a relative path of plain segments (no `..`, no leading `/`)"
        ));
    }
    Ok(())
}

pub(crate) fn register(engine: &mut Engine, grants: Grants) {
    if let Some(root) = grants.target {
        register_target(engine, Rc::new(root));
    }
    if let Some(root) = grants.scratch {
        let root = Rc::new(root);
        engine.register_fn(
            "scratch_write",
            move |name: &str, text: &str| -> Fallible<()> {
                clean("scratch_write", name, false)?;
                let path = root.join(name);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        format!("scratch_write: cannot create {name}'s directory: {e}")
                    })?;
                }
                std::fs::write(&path, text)
                    .map_err(|e| format!("scratch_write: cannot write {name}: {e}").into())
            },
        );
    }
    if let Some(tasks) = grants.tasks {
        let t = tasks.clone();
        engine.register_fn("train_tasks", move || -> Array {
            t.train_tasks().into_iter().map(Dynamic::from).collect()
        });
        engine.register_fn(
            "run_tasks",
            move |names: Array, repetitions: INT| -> Fallible<Dynamic> {
                run_tasks(tasks.as_ref(), names, repetitions)
            },
        );
    }
}

fn register_target(engine: &mut Engine, root: Rc<PathBuf>) {
    let r = root.clone();
    engine.register_fn("target_read", move |path: &str| -> Fallible<String> {
        clean("target_read", path, false)?;
        read_text(&r.join(path), path).map_err(Into::into)
    });
    let r = root.clone();
    engine.register_fn("target_exists", move |path: &str| -> Fallible<bool> {
        clean("target_exists", path, false)?;
        Ok(std::fs::symlink_metadata(r.join(path)).is_ok())
    });
    engine.register_fn("target_list", move |dir: &str| -> Fallible<Array> {
        clean("target_list", dir, true)?;
        let entries = std::fs::read_dir(root.join(dir))
            .map_err(|e| format!("target_list: cannot list {dir:?}: {e}"))?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names.into_iter().map(Dynamic::from).collect())
    });
}

/// A text file, refusing anything larger than a script string may be.
fn read_text(path: &Path, shown: &str) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("target_read: {shown}: {e}"))?;
    if meta.len() > MAX_STRING as u64 {
        return Err(format!(
            "target_read: {shown} has {} bytes, more than the {MAX_STRING} a script string may hold",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("target_read: {shown}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("target_read: {shown} is not UTF-8 text"))
}

/// `#{trials: [report, …]}`, or `#{error: kind, message}` for the errors a stage may
/// handle (`budget-exhausted`, `unavailable`, `unknown-task`, `invalid-request`).
fn run_tasks(tasks: &dyn Tasks, names: Array, repetitions: INT) -> Fallible<Dynamic> {
    let names: Vec<String> = names
        .into_iter()
        .map(Dynamic::into_string)
        .collect::<Result<_, _>>()
        .map_err(|_| "run_tasks: the task list must hold task name strings".to_string())?;
    let repetitions = u32::try_from(repetitions)
        .map_err(|_| "run_tasks: repetitions must be between 0 and 4294967295".to_string())?;
    let request = RunRequest {
        tasks: names,
        repetitions,
    };
    let value = match tasks.run(&request) {
        Ok(reports) => {
            let trials: Vec<_> = reports.iter().map(convert::trial_report).collect();
            evolve_operator_sdk::serde_json::json!({ "trials": trials })
        }
        Err(e) => {
            let (kind, message) = match e {
                TasksError::UnknownTask(m) => ("unknown-task", m),
                TasksError::InvalidRequest(m) => ("invalid-request", m),
                TasksError::BudgetExhausted => ("budget-exhausted", String::new()),
                TasksError::Unavailable(m) => ("unavailable", m),
            };
            evolve_operator_sdk::serde_json::json!({"error": kind, "message": message})
        }
    };
    Ok(convert::to_dynamic(&value))
}
