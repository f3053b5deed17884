//! What a script may reach beyond its inputs: exactly what its stage's world grants, as
//! functions the per-stage crate hands in. A select, novelty, gate or record script
//! gets none of these; validate gets `/target` reads, the `tasks` capability and
//! `/scratch` for its artifacts; rollout gets `tasks` and `/scratch`; analyze and
//! reflect the `model` (and analyze `/scratch` and its read-only `/feedback` bundle);
//! mutate gets `model`, `tasks`,
//! read-write `/target` and `/operators` (when granted), the read-only `/feedback`
//! bundle and `/scratch`. Paths are checked here as well as by the sandbox's preopens,
//! so a script learns *why* a path is refused.

use crate::convert;
use crate::engine::MAX_STRING;
use evolve_operator_sdk::model::{ChatRequest, ChatResponse, Message, ModelError, Role};
use evolve_operator_sdk::tasks::{RunRequest, TasksError, TrialReport};
use evolve_operator_sdk::types::Usage;
use rhai::{Array, Dynamic, Engine, EvalAltResult, FLOAT, INT};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The `tasks` capability (train tasks only), as the stage's world imports it.
pub trait Tasks {
    fn train_tasks(&self) -> Vec<String>;
    fn run(&self, request: &RunRequest) -> Result<Vec<TrialReport>, TasksError>;
}

/// The `model` capability (chat through the host, metered), as the stage's world
/// imports it.
pub trait Model {
    fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ModelError>;
}

/// A directory the script may read (`<name>_read`, `<name>_exists`, `<name>_list`) and,
/// when `writable`, change (`<name>_write`, `<name>_remove`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    pub root: PathBuf,
    pub writable: bool,
}

impl Tree {
    pub fn read_only(root: impl Into<PathBuf>) -> Tree {
        Tree {
            root: root.into(),
            writable: false,
        }
    }

    pub fn read_write(root: impl Into<PathBuf>) -> Tree {
        Tree {
            root: root.into(),
            writable: true,
        }
    }
}

/// The grants of one call. The default grants nothing.
#[derive(Default, Clone)]
pub struct Grants {
    /// `train_tasks()` and `run_tasks(names, repetitions)`.
    pub tasks: Option<Rc<dyn Tasks>>,
    /// `model_chat(messages)` and `model_chat(messages, options)`.
    pub model: Option<Rc<dyn Model>>,
    /// `target_read(path)`, `target_exists(path)`, `target_list(dir)` below this
    /// directory (`/target` in the component); `target_write(path, text)` and
    /// `target_remove(path)` when writable (mutate).
    pub target: Option<Tree>,
    /// The same functions, named `operators_…`, for `/operators` (mutate, when the
    /// surface includes `operators/**`).
    pub operators: Option<Tree>,
    /// `feedback_read`, `feedback_exists`, `feedback_list` (analyze's or mutate's
    /// read-only bundle).
    pub feedback: Option<Tree>,
    /// `scratch_write(name, text)` below this directory (`/scratch`).
    pub scratch: Option<PathBuf>,
}

/// What a call did through its grants, for the stage result: the workspace paths it
/// wrote or removed (`target/…`, `operators/…`, first-change order) and the model
/// usage the host metered.
#[derive(Clone)]
pub(crate) struct Tracked {
    pub changed: Rc<RefCell<Vec<String>>>,
    pub usage: Rc<RefCell<Usage>>,
}

impl Default for Tracked {
    fn default() -> Tracked {
        Tracked {
            changed: Rc::default(),
            usage: Rc::new(RefCell::new(Usage {
                input_tokens: 0,
                output_tokens: 0,
                usd: 0.0,
            })),
        }
    }
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

pub(crate) fn register(engine: &mut Engine, grants: Grants, tracked: &Tracked) {
    if let Some(tree) = grants.target {
        register_tree(engine, "target", tree, tracked);
    }
    if let Some(tree) = grants.operators {
        register_tree(engine, "operators", tree, tracked);
    }
    if let Some(tree) = grants.feedback {
        register_tree(engine, "feedback", Tree::read_only(tree.root), tracked);
    }
    if let Some(root) = grants.scratch {
        let root = Rc::new(root);
        engine.register_fn(
            "scratch_write",
            move |name: &str, text: &str| -> Fallible<()> {
                clean("scratch_write", name, false)?;
                write_text(&root.join(name), "scratch_write", name, text).map_err(Into::into)
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
    if let Some(model) = grants.model {
        let (m, usage) = (model.clone(), tracked.usage.clone());
        engine.register_fn(
            "model_chat",
            move |messages: Dynamic| -> Fallible<Dynamic> {
                model_chat(m.as_ref(), &usage, messages, rhai::Map::new())
            },
        );
        let usage = tracked.usage.clone();
        engine.register_fn(
            "model_chat",
            move |messages: Dynamic, options: rhai::Map| -> Fallible<Dynamic> {
                model_chat(model.as_ref(), &usage, messages, options)
            },
        );
    }
}

/// `<name>_read(path)`, `<name>_exists(path)`, `<name>_list(dir)` below `tree.root`, and
/// when it is writable `<name>_write(path, text)` and `<name>_remove(path)`, which
/// record `<name>/<path>` as changed.
fn register_tree(engine: &mut Engine, name: &'static str, tree: Tree, tracked: &Tracked) {
    let root = Rc::new(tree.root);
    let (f, r) = (format!("{name}_read"), root.clone());
    engine.register_fn(&f, move |path: &str| -> Fallible<String> {
        let what = format!("{name}_read");
        clean(&what, path, false)?;
        read_text(&r.join(path), &what, path).map_err(Into::into)
    });
    let (f, r) = (format!("{name}_exists"), root.clone());
    engine.register_fn(&f, move |path: &str| -> Fallible<bool> {
        clean(&format!("{name}_exists"), path, false)?;
        Ok(std::fs::symlink_metadata(r.join(path)).is_ok())
    });
    let (f, r) = (format!("{name}_list"), root.clone());
    engine.register_fn(&f, move |dir: &str| -> Fallible<Array> {
        let what = format!("{name}_list");
        clean(&what, dir, true)?;
        let entries = std::fs::read_dir(r.join(dir))
            .map_err(|e| format!("{what}: cannot list {dir:?}: {e}"))?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names.into_iter().map(Dynamic::from).collect())
    });
    if !tree.writable {
        return;
    }
    let (f, r, changed) = (
        format!("{name}_write"),
        root.clone(),
        tracked.changed.clone(),
    );
    engine.register_fn(&f, move |path: &str, text: &str| -> Fallible<()> {
        let what = format!("{name}_write");
        clean(&what, path, false)?;
        refuse_component(&what, name, path)?;
        write_text(&r.join(path), &what, path, text)?;
        note_change(&changed, name, path);
        Ok(())
    });
    let (f, changed) = (format!("{name}_remove"), tracked.changed.clone());
    engine.register_fn(&f, move |path: &str| -> Fallible<bool> {
        let what = format!("{name}_remove");
        clean(&what, path, false)?;
        refuse_component(&what, name, path)?;
        let full = root.join(path);
        match std::fs::symlink_metadata(&full) {
            Err(_) => Ok(false),
            Ok(m) if m.is_dir() => {
                Err(format!("{what}: {path:?} is a directory; remove its files one by one").into())
            }
            Ok(_) => {
                std::fs::remove_file(&full)
                    .map_err(|e| format!("{what}: cannot remove {path:?}: {e}"))?;
                note_change(&changed, name, path);
                Ok(true)
            }
        }
    });
}

/// A stage component under `/operators` (`<stage>.wasm`) is binary: a script edits text.
fn refuse_component(what: &str, tree: &str, path: &str) -> Result<(), String> {
    if tree == "operators" && path.ends_with(".wasm") {
        return Err(format!(
            "{what}: {path:?} is a compiled component; a script edits text files only"
        ));
    }
    Ok(())
}

fn note_change(changed: &RefCell<Vec<String>>, tree: &str, path: &str) {
    let full = format!("{tree}/{path}");
    let mut changed = changed.borrow_mut();
    if !changed.contains(&full) {
        changed.push(full);
    }
}

/// Write `text` at `path`, creating its directory.
fn write_text(path: &Path, what: &str, shown: &str, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("{what}: cannot create {shown}'s directory: {e}"))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{what}: cannot write {shown}: {e}"))
}

/// `model_chat(messages[, options])`: `messages` is an array of `#{role, content}`
/// (role `"system"`, `"user"` or `"assistant"`) or one string (a single user message);
/// `options` may set `max_tokens` and `temperature`. Returns `#{content,
/// input_tokens, output_tokens, usd}`, or `#{error: kind, message}` for a failure the
/// script may handle; a malformed request is the script's error.
fn model_chat(
    model: &dyn Model,
    usage: &RefCell<Usage>,
    messages: Dynamic,
    options: rhai::Map,
) -> Fallible<Dynamic> {
    let request = chat_request(messages, &options)?;
    let value = match model.chat(&request) {
        Ok(r) => {
            let mut u = usage.borrow_mut();
            u.input_tokens = u.input_tokens.saturating_add(r.input_tokens);
            u.output_tokens = u.output_tokens.saturating_add(r.output_tokens);
            u.usd += r.usd;
            evolve_operator_sdk::serde_json::json!({
                "content": r.content,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "usd": r.usd,
            })
        }
        Err(e) => {
            let (kind, message) = match e {
                ModelError::BudgetExhausted => ("budget-exhausted", String::new()),
                ModelError::Unavailable(m) => ("unavailable", m),
                ModelError::Refused(m) => ("refused", m),
                ModelError::Failed(m) => ("failed", m),
                ModelError::Timeout => ("timeout", String::new()),
                ModelError::InvalidRequest(m) => ("invalid-request", m),
            };
            evolve_operator_sdk::serde_json::json!({"error": kind, "message": message})
        }
    };
    Ok(convert::to_dynamic(&value))
}

fn chat_request(messages: Dynamic, options: &rhai::Map) -> Result<ChatRequest, String> {
    const SHAPE: &str = "model_chat: messages must be a string or an array of #{role: \"system\"/\"user\"/\"assistant\", content: \"…\"}";
    let messages = if messages.is_string() {
        vec![Message {
            role: Role::User,
            content: messages.into_string().unwrap_or_default(),
        }]
    } else {
        let items = messages.try_cast::<Array>().ok_or(SHAPE)?;
        items
            .into_iter()
            .map(|m| {
                let m = m.try_cast::<rhai::Map>().ok_or(SHAPE)?;
                let text = |k: &str| {
                    m.get(k)
                        .and_then(|v| v.clone().into_string().ok())
                        .ok_or(SHAPE)
                };
                let role = match text("role")?.as_str() {
                    "system" => Role::System,
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    _ => return Err(SHAPE),
                };
                Ok(Message {
                    role,
                    content: text("content")?,
                })
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    let mut request = ChatRequest {
        messages,
        max_tokens: None,
        temperature: None,
    };
    for (key, value) in options {
        match key.as_str() {
            "max_tokens" => {
                let n = value
                    .as_int()
                    .ok()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n >= 1)
                    .ok_or(
                        "model_chat: options.max_tokens must be an integer from 1 to 4294967295",
                    )?;
                request.max_tokens = Some(n);
            }
            "temperature" => {
                let t = value
                    .as_float()
                    .or_else(|_| value.as_int().map(|i| i as FLOAT))
                    .ok()
                    .filter(|t| t.is_finite() && *t >= 0.0)
                    .ok_or("model_chat: options.temperature must be a number >= 0")?;
                request.temperature = Some(t);
            }
            other => {
                return Err(format!(
                    "model_chat: unknown option {other:?} (max_tokens and temperature are known)"
                ));
            }
        }
    }
    Ok(request)
}

/// A text file, refusing anything larger than a script string may be.
fn read_text(path: &Path, what: &str, shown: &str) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{what}: {shown}: {e}"))?;
    if meta.len() > MAX_STRING as u64 {
        return Err(format!(
            "{what}: {shown} has {} bytes, more than the {MAX_STRING} a script string may hold",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{what}: {shown}: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{what}: {shown} is not UTF-8 text"))
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
