//! Recipes: the YAML file that binds one operator to each lifecycle stage.
//!
//! The recipe's own shape is declared once with the same schema vocabulary operators
//! use (`evolve-config-schema`), so `evolve recipe check` reports *every* problem at
//! once with its path, `evolve recipe schema` prints a JSON Schema for editors, and the
//! normalized recipe (defaults filled in) is what a workspace freezes. Each operator's
//! `config` is then normalized by the operator component itself.

use crate::builtin;
use crate::layout::TARGET_DIR;
use crate::safe_tree::{self, EntryKind, FileRead, TreeLimits};
use crate::sandbox::{
    self, ComponentDigest, LoadedOperator, Sandbox, StageInput, StageOutput, parse_stage,
    stage_name, types::Stage,
};
use evaluator_harbor::cli::EngineKind;
use evaluator_harbor::split::TaskFiles;
use evolve_config_schema::{
    Fields, Schema, Violation, array, boolean, integer, json, number, object, string,
};
use evolve_snapshot::Surface as Globs;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod harbor;
pub mod protocol;
pub mod source;

/// A recipe shipped with evolve (`recipes/*.yaml`, embedded in the binary).
#[derive(Debug, Clone, Copy)]
pub struct BuiltinRecipe {
    pub name: &'static str,
    pub summary: &'static str,
    pub text: &'static str,
}

/// The built-in recipes, usable by name with `evolve init --recipe NAME`.
pub static BUILTIN: &[BuiltinRecipe] = &[
    BuiltinRecipe {
        name: "local_demo",
        summary: "offline default: the demo seed, perturb mutation, hill-climbing gate, local engine",
        text: include_str!("../../recipes/local_demo.yaml"),
    },
    BuiltinRecipe {
        name: "train_demo",
        summary: "offline, every stage: train rollouts, failure analysis, perturb, minibatch validation, novelty, credit",
        text: include_str!("../../recipes/train_demo.yaml"),
    },
    BuiltinRecipe {
        name: "hill_climb",
        summary: "needs a model: greedy select, train rollout, failure patterns, reflective rewrite of params.json, hill-climbing gate",
        text: include_str!("../../recipes/hill_climb.yaml"),
    },
    BuiltinRecipe {
        name: "gepa",
        summary: "needs a model: GEPA, Pareto select, reflective round-robin component rewrite, minibatch validation",
        text: include_str!("../../recipes/gepa.yaml"),
    },
    BuiltinRecipe {
        name: "aevolve",
        summary: "needs a model and an agent with prompt.md and skills/: A-Evolve prompt and skill edits, strict hill-climbing gate",
        text: include_str!("../../recipes/aevolve.yaml"),
    },
    BuiltinRecipe {
        name: "ahe",
        summary: "needs a model: AHE, newest-parent select, replayed evaluation, failure patterns, multi-turn harness edits with train trials, hill-climbing gate",
        text: include_str!("../../recipes/ahe.yaml"),
    },
    BuiltinRecipe {
        name: "hyperagents",
        summary: "needs a model: HyperAgents, score-child-prop select, replayed evaluation, edits to target/ and the operators' own policy, parent-eligible gate",
        text: include_str!("../../recipes/hyperagents.yaml"),
    },
    BuiltinRecipe {
        name: "rrsi",
        summary: "needs a model: regularized RSI, historical-best floor and cost rule gate, annealed edit budget and leak screen, component history for mutate",
        text: include_str!("../../recipes/rrsi.yaml"),
    },
];

/// Find a built-in recipe by name.
pub fn builtin(name: &str) -> Option<&'static BuiltinRecipe> {
    BUILTIN.iter().find(|r| r.name == name)
}

/// Stages a recipe must bind; the others are enabled by their key being present.
pub const REQUIRED_STAGES: [&str; 5] = ["select", "rollout", "mutate", "gate", "record"];
pub const OPTIONAL_STAGES: [&str; 4] = ["analyze", "validate", "novelty", "reflect"];

/// A checked recipe, every default filled in.
#[derive(Debug, Clone, Deserialize)]
pub struct Recipe {
    pub experiment: Experiment,
    pub target: Target,
    pub surface: Surface,
    pub operators: std::collections::BTreeMap<String, Binding>,
    pub evaluator: Evaluator,
    #[serde(default)]
    pub model: Option<Value>,
    /// Named models (`models: {judge: {...}}`), checked by `crate::model::named_models`.
    #[serde(default)]
    pub models: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Experiment {
    pub name: String,
    pub max_generations: u32,
    pub children_per_gen: u32,
    pub budget_usd: f64,
    pub seed: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Target {
    pub seed: Option<String>,
    pub path: Option<String>,
    /// A git repository (`target: {git: URL, rev: REV}`), cloned at init.
    #[serde(default)]
    pub git: Option<String>,
    /// The revision of `git` (a branch, tag or commit; default `HEAD`); the normalized
    /// recipe in gen/0 holds the commit it resolved to.
    #[serde(default)]
    pub rev: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Surface {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Binding {
    pub operator: String,
    pub timeout_s: f64,
    pub memory_mib: u32,
    pub fuel: Option<u64>,
    /// Disk quota of each writable grant per call (absent in recipes normalized before
    /// the field existed: the sandbox's default then).
    #[serde(default = "default_disk_mib")]
    pub disk_mib: u64,
    #[serde(default = "default_disk_files")]
    pub disk_files: u64,
    pub config: Map<String, Value>,
}

fn default_disk_mib() -> u64 {
    crate::sandbox::DEFAULT_DISK_MIB
}

fn default_disk_files() -> u64 {
    crate::sandbox::DEFAULT_DISK_FILES
}

impl Binding {
    /// The sandbox limits this binding sets: timeout, memory, fuel and disk quota.
    pub fn limits(&self) -> crate::sandbox::Limits {
        crate::sandbox::Limits {
            timeout: Duration::from_secs_f64(self.timeout_s.max(0.001)),
            memory_bytes: (self.memory_mib as usize) << 20,
            fuel: self.fuel,
            disk_bytes: self.disk_mib << 20,
            disk_files: self.disk_files,
            ..crate::sandbox::Limits::default()
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Evaluator {
    pub engine: String,
    pub dataset: String,
    pub splits: Splits,
    pub repetitions: u32,
    pub n_concurrent: u32,
    pub coverage_floor: f64,
    /// Run local trials without the bubblewrap sandbox (explicit opt-in, recorded in the
    /// workspace's runtime fingerprint).
    #[serde(default)]
    pub unconfined_trials: bool,
    pub anchor: Anchor,
    /// The evaluation protocol ([`protocol`]): every field defaults to today's behaviour.
    #[serde(default = "default_split")]
    pub evaluation_split: String,
    #[serde(default)]
    pub tasks_per_round: Option<u32>,
    #[serde(default = "default_sampling")]
    pub task_sampling: String,
    #[serde(default)]
    pub max_retries: u32,
    #[serde(default = "one")]
    pub agent_timeout_multiplier: f64,
    #[serde(default = "one")]
    pub verifier_timeout_multiplier: f64,
    #[serde(default = "yes")]
    pub agent_timeout_is_zero: bool,
    /// Names of host variables passed to the agent / the verifier (never their values).
    #[serde(default)]
    pub agent_env: Vec<String>,
    #[serde(default)]
    pub verifier_env: Vec<String>,
    /// The agent's model behind the host's gateway (`crate::model::GatewayConfig`).
    #[serde(default)]
    pub model: Option<Value>,
    /// The harbor engine's `harbor run` settings ([`harbor::parse`]), as written.
    #[serde(default)]
    pub harbor: Option<Value>,
}

fn default_split() -> String {
    "gate".into()
}
fn default_sampling() -> String {
    "static".into()
}
fn one() -> f64 {
    1.0
}
fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
pub struct Splits {
    pub train: f64,
    pub gate: f64,
    pub sealed: f64,
    pub seed: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Anchor {
    #[serde(rename = "final")]
    pub final_: bool,
}

fn binding() -> evolve_config_schema::Field {
    object(
        Fields::new()
            .field(
                "operator",
                string().required().description(
                    "A built-in operator name for this stage (see `evolve operator list`), or a path to a component file",
                ),
            )
            .field(
                "timeout_s",
                number().default(json!(600)).minimum(0.001).description("Wall-clock deadline per call"),
            )
            .field(
                "memory_mib",
                integer().default(json!(256)).minimum(16.0).maximum(4096.0).description("Memory cap per call"),
            )
            .field("fuel", integer().minimum(1.0).description("Optional instruction budget per call"))
            .field(
                "disk_mib",
                integer().default(json!(256)).minimum(1.0).maximum(65536.0)
                    .description("Disk quota per call of each writable grant (/scratch; /target and /operators for mutate), in MiB"),
            )
            .field(
                "disk_files",
                integer().default(json!(10000)).minimum(1.0).maximum(10_000_000.0)
                    .description("Files (entries of any kind) a call may add to each writable grant"),
            )
            .field("config", json().default(json!({})).description("The operator's own configuration")),
    )
}

/// The recipe's shape.
pub fn schema() -> Schema {
    let mut operators = Fields::new();
    for stage in sandbox::ALL_STAGES {
        operators = operators.field(stage_name(stage), binding());
    }
    Schema::new()
        .field(
            "experiment",
            object(
                Fields::new()
                    .field("name", string().required().description("Experiment name"))
                    .field("max_generations", integer().default(json!(5)).minimum(0.0))
                    .field(
                        "children_per_gen",
                        integer().default(json!(1)).minimum(1.0).maximum(64.0),
                    )
                    .field(
                        "budget_usd",
                        number()
                            .default(json!(0))
                            .minimum(0.0)
                            .description("0 means no model or agent spend is allowed"),
                    )
                    .field("seed", integer().default(json!(0)).minimum(0.0)),
            )
            .required(),
        )
        .field(
            "target",
            object(
                Fields::new()
                    .field("seed", string().description("A built-in seed target"))
                    .field(
                        "path",
                        string().description("A directory holding the target, or a seed (seed.toml, target/, tasks/)"),
                    )
                    .field(
                        "git",
                        string().description("A git repository URL holding a seed (or a target at its root), cloned at init"),
                    )
                    .field(
                        "rev",
                        string().description("The revision of `git` (branch, tag or commit; default HEAD), pinned to its commit at init"),
                    ),
            )
            .required(),
        )
        .field(
            "surface",
            object(
                Fields::new()
                    .field("include", array(string()).required().minimum(1.0))
                    .field("exclude", array(string()).default(json!([]))),
            )
            .required(),
        )
        .field("operators", object(operators).required())
        .field(
            "evaluator",
            object(protocol::fields(
                Fields::new()
                    .field(
                        "engine",
                        string().default(json!("local")).choices([
                            json!("local"),
                            json!("docker"),
                            json!("harbor"),
                        ]),
                    )
                    .field(
                        "dataset",
                        string()
                            .required()
                            .description("A built-in task set, a directory of Harbor tasks, or a Harbor registry dataset (NAME@VERSION or org/name@ref) that `evolve init` fetches with `harbor download`"),
                    )
                    .field(
                        "splits",
                        object(
                            Fields::new()
                                .field(
                                    "train",
                                    number().default(json!(0.5)).minimum(0.0).maximum(1.0),
                                )
                                .field(
                                    "gate",
                                    number().default(json!(0.3)).minimum(0.0).maximum(1.0),
                                )
                                .field(
                                    "sealed",
                                    number().default(json!(0.2)).minimum(0.0).maximum(1.0),
                                )
                                .field("seed", integer().default(json!(0)).minimum(0.0)),
                        )
                        .default(json!({})),
                    )
                    .field(
                        "repetitions",
                        integer().default(json!(1)).minimum(1.0).maximum(100.0),
                    )
                    .field(
                        "n_concurrent",
                        integer().default(json!(1)).minimum(1.0).maximum(64.0),
                    )
                    .field(
                        "coverage_floor",
                        number().default(json!(1)).minimum(0.0).maximum(1.0),
                    )
                    .field(
                        "unconfined_trials",
                        boolean().default(json!(false)).description(
                            "Run the local engine's trials directly on the host, without the bubblewrap sandbox: the candidate's agent then sees the host (keys and workspace included). Only for machines that cannot run bubblewrap; recorded in every evaluation's runtime fingerprint",
                        ),
                    )
                    .field(
                        "anchor",
                        object(Fields::new().field("final", boolean().default(json!(true))))
                            .default(json!({})),
                    )
                    .field("model", agent_model())
                    .field(
                        "harbor",
                        json().description(
                            "The harbor engine's `harbor run` settings (engine: harbor only): environment (-e), environment_kwargs (--ek), n_concurrent (-n), max_retries (-r), timeout_multiplier, agent_setup_timeout_multiplier, environment_build_timeout_multiplier, model (-m), agent_kwargs (--ak), extra_args; see docs/recipes.md",
                        ),
                    ),
            ))
            .required(),
        )
        .field(
            "model",
            object(
                Fields::new()
                    .field(
                        "endpoint",
                        string().description("OpenAI-compatible base URL (default: $EVOLVE_MODEL_ENDPOINT)"),
                    )
                    .field("model", string().description("Model name (default: $EVOLVE_MODEL)"))
                    .field(
                        "api_key_env",
                        string().description("Name of the environment variable holding the key (default OPENAI_API_KEY)"),
                    )
                    .field(
                        "prices",
                        prices(),
                    )
                    .field("timeout_s", number().minimum(0.001).description("Bound on one chat call, retries included (default 120)"))
                    .field("max_retries", integer().minimum(0.0).maximum(10.0).description("Retries on 429, 5xx and connection errors (default 3)"))
                    .field("max_tokens", integer().minimum(1.0).description("Cap on an operator's max-tokens (default 4096)")),
            ),
        )
        .field(
            "models",
            json().description("Named models for `model.complete` (`{judge: {model: M, prices: {...}}}`): each entry takes the `model:` block's keys, gives its own `model` and `prices` and inherits the rest; see docs/model.md"),
        )
        .refine(cross_checks)
        .build()
        .expect("the recipe schema is valid")
}

/// A model block's `prices` (the operators' and the agent's).
fn prices() -> evolve_config_schema::Field {
    object(
        Fields::new()
            .field(
                "input_per_mtok_usd",
                number()
                    .minimum(0.0)
                    .description("USD per million prompt tokens"),
            )
            .field(
                "output_per_mtok_usd",
                number()
                    .minimum(0.0)
                    .description("USD per million completion tokens"),
            ),
    )
}

/// `evaluator.model`: the agent under test's model, served to it by the host's model
/// gateway (`crate::model::gateway`; docs/model.md). No environment fallbacks.
fn agent_model() -> evolve_config_schema::Field {
    object(
        Fields::new()
            .field("endpoint", string().required().description("The agent's OpenAI-compatible upstream base URL (kept on the host; the agent gets the gateway's)"))
            .field("model", string().required().description("The model a request naming none gets"))
            .field("allowed_models", array(string()).minimum(1.0).description("The models the agent may ask for (default: [model])"))
            .field("api_key_env", string().description("Name of the host variable holding the upstream key (default OPENAI_API_KEY)"))
            .field(
                "prices",
                prices(),
            )
            .field("timeout_s", number().minimum(0.001).description("Bound on one agent call, retries included (default 120)"))
            .field("max_retries", integer().minimum(0.0).maximum(10.0).description("Retries on 429, 5xx, connection errors and garbled answers (default 3)"))
            .field("max_tokens", integer().minimum(1.0).description("Cap on a request's max_tokens / max_completion_tokens, and its value when it gives none (default 4096)")),
    )
}

fn cross_checks(recipe: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let mut found = Vec::new();
    let target = recipe.get("target").and_then(Value::as_object);
    let has = |k: &str| target.is_some_and(|t| t.contains_key(k));
    if ["seed", "path", "git"].iter().filter(|k| has(k)).count() != 1 {
        found.push(Violation::new(
            "target",
            "name exactly one of `seed`, `path` or `git`",
        ));
    }
    if has("rev") && !has("git") {
        found.push(Violation::new(
            "target.rev",
            "is the revision of a `git` target; name `git` too, or leave `rev` out",
        ));
    }
    let operators = recipe.get("operators").and_then(Value::as_object);
    for stage in REQUIRED_STAGES {
        if !operators.is_some_and(|o| o.contains_key(stage)) {
            found.push(Violation::new(
                format!("operators.{stage}"),
                "is required (a recipe must bind select, rollout, mutate, gate and record)",
            ));
        }
    }
    for (stage, b) in operators.into_iter().flatten() {
        // Absent or null is the default `{}` (on a recipe that failed its field checks,
        // which this also runs on, defaults are not filled in).
        if !b.get("config").is_none_or(|c| c.is_object() || c.is_null()) {
            found.push(Violation::new(
                format!("operators.{stage}.config"),
                "must be an object",
            ));
        }
    }
    let splits = recipe
        .get("evaluator")
        .and_then(|e| e.get("splits"))
        .and_then(Value::as_object);
    // A ratio left out is its default; one that is not a number is reported by its field.
    let ratios: Option<Vec<f64>> = [("train", 0.5), ("gate", 0.3), ("sealed", 0.2)]
        .iter()
        .map(|(k, default)| match splits.and_then(|s| s.get(*k)) {
            None | Some(Value::Null) => Some(*default),
            Some(v) => v.as_f64(),
        })
        .collect();
    let total: f64 = ratios.iter().flatten().sum();
    if ratios.is_some() && (total - 1.0).abs() > 1e-9 {
        found.push(Violation::new(
            "evaluator.splits",
            "train, gate and sealed must add up to 1",
        ));
    }
    protocol::cross_checks(recipe, &mut found);
    harbor::cross_checks(recipe, &mut found);
    if found.is_empty() { Ok(()) } else { Err(found) }
}

/// The problems found in a recipe, each with a path; empty when it is valid.
#[derive(Debug, Default)]
pub struct Checked {
    pub recipe: Option<Recipe>,
    pub normalized: Option<Value>,
    pub violations: Vec<Violation>,
    /// The component files [`check_operators`] read (bindings that name a `.wasm` path),
    /// by stage: the very bytes it checked, which `init` freezes, so a file replaced after
    /// the check cannot get into generation 0 unchecked.
    pub component_files: std::collections::BTreeMap<String, ComponentFile>,
    /// The recipe as written, kept when its shape is wrong: the later checks still look
    /// at what is well-typed in it (each binding, the target, the task set), so that one
    /// check reports every problem.
    pub raw: Option<Value>,
}

/// A component [`check_operators`] read from a file.
#[derive(Debug, Clone)]
pub struct ComponentFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    pub sha256: ComponentDigest,
}

/// Parse a recipe's YAML. A syntax error is one violation giving the line and column,
/// then the line itself with a caret under the column.
pub fn parse(text: &str) -> Result<Value, Violation> {
    match serde_yaml::from_str::<serde_yaml::Value>(text) {
        Ok(v) => serde_json::to_value(v)
            .map_err(|e| Violation::new("", format!("cannot be represented as JSON: {e}"))),
        Err(e) => Err(Violation::new("", yaml_error(text, &e))),
    }
}

/// `is not valid YAML: WHAT at line L column C`, then the line and a caret.
fn yaml_error(text: &str, e: &serde_yaml::Error) -> String {
    let what = e.to_string();
    let Some(at) = e.location() else {
        return format!("is not valid YAML: {what}");
    };
    let (line, column) = (at.line(), at.column());
    let position = format!("line {line} column {column}");
    let located = if what.contains(&position) {
        what
    } else {
        format!("{what} at {position}")
    };
    match evaluator_harbor::error::excerpt(text, line, column, 1) {
        shown if shown.is_empty() => format!("is not valid YAML: {located}"),
        shown => format!("is not valid YAML: {located}\n{shown}"),
    }
}

/// Parse and check a recipe's text, without running any operator.
pub fn check_shape(text: &str) -> Checked {
    match parse(text) {
        Ok(value) => check_value(value),
        Err(v) => failed(v),
    }
}

/// Check a parsed recipe's shape. A recipe with field problems also gets the cross-field
/// rules run on what it says (they otherwise run on the normalized recipe only), so that
/// a wrong type does not hide, say, a missing stage.
pub fn check_value(value: Value) -> Checked {
    match schema().normalize_value(&value) {
        Ok(map) => {
            let normalized = Value::Object(map);
            match serde_json::from_value::<Recipe>(normalized.clone()) {
                Ok(recipe) => Checked {
                    recipe: Some(recipe),
                    normalized: Some(normalized),
                    ..Checked::default()
                },
                Err(e) => failed(Violation::new("", format!("has an unexpected shape: {e}"))),
            }
        }
        Err(mut violations) => {
            if let Some(Err(more)) = value.as_object().map(cross_checks) {
                for v in more {
                    if !violations.contains(&v) {
                        violations.push(v);
                    }
                }
                violations.sort_by(|a, b| a.path.cmp(&b.path));
            }
            Checked {
                violations,
                raw: Some(value),
                ..Checked::default()
            }
        }
    }
}

fn failed(v: Violation) -> Checked {
    Checked {
        violations: vec![v],
        ..Checked::default()
    }
}

/// Resolve a binding to a loaded component: a built-in name, or a component path
/// (relative paths are taken from `base`, the recipe's directory).
pub fn resolve_operator(
    sb: &Sandbox,
    stage: Stage,
    name: &str,
    base: &Path,
) -> Result<LoadedOperator, String> {
    resolve_operator_file(sb, stage, name, base).map(|(op, _)| op)
}

/// [`resolve_operator`], also returning the component file it read, if it read one.
fn resolve_operator_file(
    sb: &Sandbox,
    stage: Stage,
    name: &str,
    base: &Path,
) -> Result<(LoadedOperator, Option<ComponentFile>), String> {
    if name.ends_with(".wasm") || name.contains('/') {
        let path = if Path::new(name).is_absolute() {
            PathBuf::from(name)
        } else {
            base.join(name)
        };
        let bytes = std::fs::read(&path)
            .map_err(|e| format!("cannot read component {}: {e}", path.display()))?;
        let op = sb
            .load_bytes(stage, &bytes, path.display().to_string())
            .map_err(|e| e.to_string())?;
        let sha256 = op.digest;
        return Ok((
            op,
            Some(ComponentFile {
                path,
                bytes,
                sha256,
            }),
        ));
    }
    let stage_text = stage_name(stage);
    match builtin::find(stage_text, name) {
        Some(op) => sb
            .load_builtin(stage, op, format!("builtin:{stage_text}/{name}"))
            .map(|op| (op, None))
            .map_err(|e| e.to_string()),
        None => {
            let known: Vec<&str> = builtin::EMBEDDED
                .iter()
                .filter(|o| o.stage == stage_text)
                .map(|o| o.name)
                .collect();
            let list = if known.is_empty() {
                "none yet".to_string()
            } else {
                known.join(", ")
            };
            Err(format!(
                "unknown {stage_text} operator `{name}`; built-in: {list}"
            ))
        }
    }
}

/// Check a recipe completely ([`check_new`]). Returns the recipe with normalized configs.
pub async fn check(sb: &Sandbox, text: &str, base: &Path) -> Checked {
    check_new(sb, check_shape(text), base, None).await.0
}

/// One stage's binding as far as the operator check needs it.
struct BindingRef {
    stage: String,
    operator: String,
    config: Map<String, Value>,
}

/// The bindings to check: the recipe's, or, when its shape is wrong, each well-typed
/// binding of a known stage in what it says (a badly typed one is reported already).
fn bindings(checked: &Checked) -> Vec<BindingRef> {
    if let Some(recipe) = &checked.recipe {
        return recipe
            .operators
            .iter()
            .map(|(stage, b)| BindingRef {
                stage: stage.clone(),
                operator: b.operator.clone(),
                config: b.config.clone(),
            })
            .collect();
    }
    let operators = checked
        .raw
        .as_ref()
        .and_then(|r| r.get("operators"))
        .and_then(Value::as_object);
    let mut found = Vec::new();
    for (stage, b) in operators.into_iter().flatten() {
        let Some(operator) = b.get("operator").and_then(Value::as_str) else {
            continue;
        };
        let config = match b.get("config") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(c)) => c.clone(),
            Some(_) => continue,
        };
        if parse_stage(stage).is_some() {
            found.push(BindingRef {
                stage: stage.clone(),
                operator: operator.to_string(),
                config,
            });
        }
    }
    found
}

/// The second half of [`check`]: have each bound operator normalize its `config` (and
/// compile a script binding's script), given what [`check_shape`] found. Each binding
/// is checked even when the recipe's shape is wrong, so every problem shows at once.
pub async fn check_operators(sb: &Sandbox, mut checked: Checked, base: &Path) -> Checked {
    let mut violations = Vec::new();
    for binding in bindings(&checked) {
        let stage_text = &binding.stage;
        let Some(stage) = parse_stage(stage_text) else {
            continue;
        };
        let at = |field: &str| format!("operators.{stage_text}.{field}");
        let op = match resolve_operator_file(sb, stage, &binding.operator, base) {
            Ok((op, file)) => {
                if let Some(file) = file {
                    checked.component_files.insert(stage_text.clone(), file);
                }
                op
            }
            Err(msg) => {
                violations.push(Violation::new(at("operator"), msg));
                continue;
            }
        };
        match normalize_with(sb, &op, &Value::Object(binding.config.clone())).await {
            Ok(map) => {
                if binding.operator == crate::scripts::SCRIPT_OPERATOR
                    && let Err(message) = check_script(sb, &op, stage_text, &map, base).await
                {
                    violations.push(Violation::new(at("config.source"), message));
                }
                if let (Some(recipe), Some(normalized)) =
                    (checked.recipe.as_mut(), checked.normalized.as_mut())
                {
                    normalized["operators"][stage_text.as_str()]["config"] =
                        Value::Object(map.clone());
                    if let Some(b) = recipe.operators.get_mut(stage_text) {
                        b.config = map;
                    }
                }
            }
            Err(found) => violations.extend(found.into_iter().map(|v| {
                let path = if v.path.is_empty() {
                    at("config")
                } else {
                    format!("{}.{}", at("config"), v.path)
                };
                Violation::new(path, v.message)
            })),
        }
    }
    add_violations(&mut checked, violations);
    checked
}

/// Add `more` to what `checked` found, in path order; a recipe with any problem has no
/// normalized form.
fn add_violations(checked: &mut Checked, more: Vec<Violation>) {
    if more.is_empty() {
        return;
    }
    checked.violations.extend(more);
    // Stable: problems at one path keep the order they were found in.
    checked.violations.sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(normalized) = checked.normalized.take() {
        checked.raw.get_or_insert(normalized);
    }
    checked.recipe = None;
}

/// A script binding's script (normalized `config`) must exist and be a script the
/// stage can call: the shipped `builtin`, else the file at `source` next to the recipe
/// (where `evolve init` reads it), compiled and checked for the stage's function by the
/// stage's own script component on the sample input. Only a defect of the script
/// itself is reported (a syntax error with its line, or no such function); what the
/// script does with the sample input is not the recipe's concern.
///
/// The component does the compiling, rather than the host, so that the check uses the
/// very interpreter and settings the run will, and the host does not link a second
/// copy of it.
async fn check_script(
    sb: &Sandbox,
    op: &LoadedOperator,
    stage: &str,
    config: &Map<String, Value>,
    base: &Path,
) -> Result<(), String> {
    use crate::scripts;
    let source = config.get("source").and_then(Value::as_str).unwrap_or("");
    let script = match config.get("builtin").and_then(Value::as_str) {
        Some(name) => match scripts::builtin(stage, name) {
            Some(text) => scripts::source(source, text.to_string()),
            // normalize-config has reported the unknown name.
            None => return Ok(()),
        },
        None => scripts::from_file(base, source).map_err(|e| {
            format!(
                "{e}; the {stage} script must be at config.source next to the recipe, or config.builtin must name a shipped script"
            )
        })?,
    };
    let config = Value::Object(config.clone()).to_string();
    let mut input = crate::samples::input(op.stage, &config);
    scripts::attach(&mut input, Some(script));
    let report = sb
        .call_bare(op, input, Duration::from_secs(10))
        .await
        .map_err(|e| format!("no scratch directory: {e}"))?;
    match report.outcome {
        Err(sandbox::OperatorFailure::Reported(m)) if scripts::is_script_defect(&m) => Err(m),
        _ => Ok(()),
    }
}

pub(crate) async fn normalize_with(
    sb: &Sandbox,
    op: &LoadedOperator,
    config: &Value,
) -> Result<Map<String, Value>, Vec<Violation>> {
    let input = StageInput::NormalizeConfig(config.to_string());
    let report = sb
        .call_bare(op, input, Duration::from_secs(10))
        .await
        .map_err(|e| vec![Violation::new("", format!("no scratch directory: {e}"))])?;
    match report.outcome {
        Ok(StageOutput::NormalizedConfig(Ok(map))) => Ok(map),
        Ok(StageOutput::NormalizedConfig(Err(found))) => Err(found
            .into_iter()
            .map(|v| Violation::new(v.path, v.message))
            .collect()),
        Ok(_) => Err(vec![Violation::new(
            "",
            "the operator answered normalize-config with something else",
        )]),
        Err(failure) => Err(vec![Violation::new(
            "",
            format!("normalize-config failed: {failure}"),
        )]),
    }
}

/// What a recipe names outside itself, read from what it says (well-typed parts only):
/// its target, its task set and the engine they are for.
#[derive(Debug, Clone)]
pub struct Named {
    /// `target.seed`, or `target.path` (exactly one, else the shape check reported it).
    pub target: Option<Target>,
    pub dataset: Option<String>,
    pub engine: EngineKind,
}

impl Default for Named {
    fn default() -> Self {
        Named {
            target: None,
            dataset: None,
            engine: EngineKind::Local,
        }
    }
}

impl Checked {
    /// What the recipe names: from the checked recipe, else from what it says.
    pub fn named(&self) -> Named {
        let Some(value) = self.normalized.as_ref().or(self.raw.as_ref()) else {
            return Named::default();
        };
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(String::from);
        let target = value.get("target").map(|t| Target {
            seed: text(t, "seed"),
            path: text(t, "path"),
            git: text(t, "git"),
            rev: text(t, "rev"),
        });
        let evaluator = value.get("evaluator").unwrap_or(&Value::Null);
        Named {
            target: target.filter(|t| {
                [&t.seed, &t.path, &t.git]
                    .iter()
                    .filter(|k| k.is_some())
                    .count()
                    == 1
            }),
            dataset: text(evaluator, "dataset"),
            engine: text(evaluator, "engine")
                .and_then(|e| <EngineKind as clap::ValueEnum>::from_str(&e, false).ok())
                .unwrap_or(EngineKind::Local),
        }
    }
}

/// The user's files a recipe names, read as `init` puts them into generation 0, and
/// what was wrong with them.
#[derive(Default)]
pub struct Sources {
    /// The target's files, by their path under `target/`.
    pub target: Option<Vec<FileRead>>,
    /// Where the task set came from (`builtin:NAME`, `harbor:NAME@VERSION` or its
    /// directory) and its files.
    pub tasks: Option<(PathBuf, Vec<FileRead>)>,
    /// The commit a `target.git` revision resolved to (gen/0 records it as `target.rev`).
    pub target_commit: Option<String>,
    /// A git dataset as pinned: `URL@COMMIT` (gen/0 records it as `evaluator.dataset`).
    pub dataset_pinned: Option<String>,
    /// The Harbor registry dataset `init` will fetch, when the check did not.
    pub fetched_at_init: Option<String>,
    pub violations: Vec<Violation>,
}

/// Read what `named` names (relative paths taken from `base`, the recipe's directory),
/// and check the task set for the engine. Every problem is a violation naming the
/// recipe key and the resolved path.
/// A registry dataset is fetched under `fetch_into` ([`check_new`]).
pub fn read_sources(named: &Named, base: &Path, fetch_into: Option<&Path>) -> Sources {
    let mut out = Sources::default();
    match named.target.as_ref().map(|t| read_target(t, base)) {
        Some(Ok((files, commit))) => {
            out.target = Some(files);
            out.target_commit = commit;
        }
        Some(Err(v)) => out.violations.push(v),
        None => {}
    }
    let dataset = named.dataset.as_ref();
    if let Some(name) = dataset.filter(|d| harbor::is_registry_name(d, base))
        && fetch_into.is_none()
    {
        out.fetched_at_init = Some(name.clone());
        return out;
    }
    match dataset.map(|d| read_tasks(d, base, fetch_into)) {
        Some(Ok((origin, files, pinned))) => {
            out.dataset_pinned = pinned;
            let set = TaskFiles {
                dir: origin.clone(),
                name: TASK_SET_NAME,
                files: files
                    .iter()
                    .map(|f| (f.path.as_str(), f.executable, f.bytes.as_slice()))
                    .collect(),
            };
            let problems = set.check(named.engine);
            out.violations.extend(
                problems
                    .iter()
                    .map(|e| Violation::new("evaluator.dataset", e.to_string())),
            );
            if problems.is_empty() {
                out.tasks = Some((origin, files));
            }
        }
        Some(Err(v)) => out.violations.push(v),
        None => {}
    }
    out
}

/// The name of the task set's directory in a workspace (`evaluator/tasks`).
pub const TASK_SET_NAME: &str = "tasks";

/// The target's files, by their path under `target/`, and the commit a git target's
/// revision resolved to.
fn read_target(target: &Target, base: &Path) -> Result<(Vec<FileRead>, Option<String>), Violation> {
    if let Some(name) = &target.seed {
        let seed = builtin::seed(name).ok_or_else(|| {
            let known: Vec<&str> = builtin::SEEDS.iter().map(|s| s.name).collect();
            Violation::new(
                "target.seed",
                format!("no built-in seed `{name}`; built-in: {}", known.join(", ")),
            )
        })?;
        return Ok((builtin_files(seed.target), None));
    }
    if let Some(url) = &target.git {
        let src = source::GitSource {
            url: url.clone(),
            rev: target.rev.clone(),
        };
        let key = if target.rev.is_some() {
            "target.rev"
        } else {
            "target.git"
        };
        let co = source::checkout(&src).map_err(|e| Violation::new(key, e))?;
        let dir = source::git_target(&src, &co).map_err(|e| Violation::new("target.git", e))?;
        let files = read_user_tree(&dir, "target.git", "the seed's target directory")?;
        return Ok((files, Some(co.commit.clone())));
    }
    let path = resolve(base, target.path.as_deref().unwrap_or_default());
    // A seed (seed.toml, target/, tasks/): its target/.
    let dir = source::seed_layout(&path).map_or(path, |l| l.target);
    let files = read_user_tree(&dir, "target.path", "a directory holding the target")?;
    Ok((files, None))
}

/// A task set read: where it came from, its files, and a git dataset as pinned
/// (`URL@COMMIT`).
type TasksRead = (PathBuf, Vec<FileRead>, Option<String>);

/// The task set `evaluator.dataset` names (a built-in one, a git seed's `tasks/`, else a
/// directory or a seed's `tasks/`, or a Harbor registry name fetched under
/// `fetch_into`), with where it came from.
fn read_tasks(
    dataset: &str,
    base: &Path,
    fetch_into: Option<&Path>,
) -> Result<TasksRead, Violation> {
    if source::is_git_url(dataset) {
        let src = source::parse_git(dataset);
        let problem = |e| Violation::new("evaluator.dataset", e);
        let co = source::checkout(&src).map_err(problem)?;
        let dir = source::git_tasks(&src, &co).map_err(problem)?;
        let files = read_user_tree(&dir, "evaluator.dataset", "the seed's tasks directory")?;
        let pinned = format!("{}@{}", src.url, co.commit);
        return Ok((PathBuf::from(format!("git:{pinned}")), files, Some(pinned)));
    }
    if let Some(into) = fetch_into.filter(|_| harbor::is_registry_name(dataset, base)) {
        let problem = |m: String| Violation::new("evaluator.dataset", m);
        let dir = harbor::download(dataset, into).map_err(problem)?;
        let what = format!("the tasks `harbor download {dataset} --export` wrote");
        let files = read_user_tree(&dir, "evaluator.dataset", &what)?;
        let (_, files) = exported_layout(&dir, files);
        if protocol::task_count(files.iter().map(|f| f.path.as_str())) == 0 {
            return Err(problem(format!(
                "`harbor download {dataset}` wrote no task (no task.toml in {what})"
            )));
        }
        return Ok((PathBuf::from(format!("harbor:{dataset}")), files, None));
    }
    match builtin::seed(dataset) {
        Some(seed) if !seed.tasks.is_empty() => Ok((
            PathBuf::from(format!("builtin:{dataset}")),
            builtin_files(seed.tasks),
            None,
        )),
        _ => {
            let dir = resolve(base, dataset);
            // A seed directory: its tasks/.
            let dir = match source::seed_layout(&dir) {
                Some(source::Layout { tasks: Some(t), .. }) => t,
                _ => dir,
            };
            let dir = std::path::absolute(&dir).unwrap_or(dir);
            let known: Vec<&str> = builtin::SEEDS
                .iter()
                .filter(|s| !s.tasks.is_empty())
                .map(|s| s.name)
                .collect();
            let what = format!(
                "a directory of Harbor tasks (or a built-in task set: {})",
                known.join(", ")
            );
            let tasks = read_user_tree(&dir, "evaluator.dataset", &what)?;
            let (dir, tasks) = exported_layout(&dir, tasks);
            Ok((dir, tasks, None))
        }
    }
}

/// A directory `harbor download NAME --export -o DIR` wrote holds the tasks one level
/// down (`DIR/<dataset>/<task>/`): when `dir` holds no task itself and exactly one
/// directory that does, the task set is that directory, so `DIR` can be named as is.
fn exported_layout(dir: &Path, files: Vec<FileRead>) -> (PathBuf, Vec<FileRead>) {
    if protocol::task_count(files.iter().map(|f| f.path.as_str())) > 0 {
        return (dir.to_path_buf(), files);
    }
    let tops: std::collections::BTreeSet<&str> = files
        .iter()
        .filter_map(|f| f.path.split_once('/').map(|(top, _)| top))
        .filter(|top| !top.starts_with('.'))
        .collect();
    let [top] = tops.into_iter().collect::<Vec<_>>()[..] else {
        return (dir.to_path_buf(), files);
    };
    let top = top.to_string();
    let prefix = format!("{top}/");
    let inner: Vec<FileRead> = files
        .iter()
        .filter_map(|f| {
            f.path.strip_prefix(&prefix).map(|p| FileRead {
                path: p.to_string(),
                executable: f.executable,
                bytes: f.bytes.clone(),
            })
        })
        .collect();
    if protocol::task_count(inner.iter().map(|f| f.path.as_str())) == 0 {
        return (dir.to_path_buf(), files);
    }
    (dir.join(top), inner)
}

fn builtin_files(files: &[builtin::SeedFile]) -> Vec<FileRead> {
    files
        .iter()
        .map(|f| FileRead {
            path: f.path.to_string(),
            executable: f.executable,
            bytes: f.bytes.to_vec(),
        })
        .collect()
}

/// `p`, taken from `base` when relative.
pub fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Read a user directory for generation 0: regular files only, never following or
/// copying a symlink (a target must not smuggle a link into the repository). A nested
/// repository (`.git`, any case) is left out: git cannot store one. `key` is the
/// recipe key that named it, `what` what it should be.
fn read_user_tree(src: &Path, key: &str, what: &str) -> Result<Vec<FileRead>, Violation> {
    let problem = |message: String| Violation::new(key, message);
    // Named as resolved: a relative path is taken from the recipe's directory, which the
    // user may not have in mind.
    let src = &std::path::absolute(src).unwrap_or_else(|_| src.to_path_buf());
    match std::fs::metadata(src) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(problem(format!(
                "{} does not exist; it should be {what}",
                src.display()
            )));
        }
        Err(e) => return Err(problem(format!("cannot read {}: {e}", src.display()))),
        Ok(m) if !m.is_dir() => {
            return Err(problem(format!(
                "{} is not a directory; it should be {what}",
                src.display()
            )));
        }
        Ok(_) => {}
    }
    let (entries, files) = safe_tree::read_tree(src, TreeLimits::default(), &|name| {
        name.eq_ignore_ascii_case(".git")
    })
    .map_err(|e| problem(format!("{}: {e}", src.display())))?;
    for entry in entries {
        match entry.kind {
            EntryKind::Dir | EntryKind::File { .. } => {}
            EntryKind::Symlink { target } => {
                return Err(problem(format!(
                    "{} is a symlink (to {target}); copy regular files only",
                    src.join(&entry.path).display()
                )));
            }
            EntryKind::Special => {
                return Err(problem(format!(
                    "{} is not a regular file or directory",
                    src.join(&entry.path).display()
                )));
            }
        }
    }
    Ok(files)
}

/// The surface's patterns, on their own: each must be a glob, relative to the workspace
/// root, and an include must not name a framework-owned path (the evaluator, `.evolve/`,
/// the keys, the recipe: `Surface::IMPLICIT_EXCLUDES`), where it could never allow a
/// change, so every generation would be rejected.
fn check_surface_patterns(value: &Value) -> Vec<Violation> {
    let surface = value.get("surface").unwrap_or(&Value::Null);
    let anything = Globs::new(&["**".to_string()], &[]).expect("`**` is a glob");
    let mut found = Vec::new();
    for key in ["include", "exclude"] {
        let patterns = surface.get(key).and_then(Value::as_array);
        for (i, pattern) in patterns.into_iter().flatten().enumerate() {
            let Some(pattern) = pattern.as_str() else {
                continue;
            };
            let at = format!("surface.{key}[{i}]");
            if let Err(e) = Globs::new(&[pattern.to_string()], &[]) {
                found.push(Violation::new(at, e.to_string()));
                continue;
            }
            let prefix = literal_prefix(pattern);
            if pattern.starts_with('/') || prefix.iter().any(|s| matches!(*s, "" | "." | "..")) {
                found.push(Violation::new(
                    at,
                    format!(
                        "`{pattern}` must be relative to the workspace root, without `.` or `..` (for example target/**)"
                    ),
                ));
            } else if key == "include" && !prefix.is_empty() && !anything.allows(&prefix.join("/"))
            {
                found.push(Violation::new(
                    at,
                    format!(
                        "`{pattern}` names framework-owned paths ({}), which no candidate may change; a candidate changes target/ (and operators/)",
                        Globs::IMPLICIT_EXCLUDES.join(", ")
                    ),
                ));
            }
        }
    }
    found
}

/// The problems of `recipe`'s surface patterns on their own ([`check_surface_patterns`]):
/// `init` refuses them, and a run of a workspace made before it did stops on them rather
/// than rejecting every generation.
pub fn surface_problems(recipe: &Recipe) -> Vec<Violation> {
    check_surface_patterns(&json!({"surface": {
        "include": recipe.surface.include,
        "exclude": recipe.surface.exclude,
    }}))
}

/// The leading segments of a glob that hold no glob syntax.
fn literal_prefix(pattern: &str) -> Vec<&str> {
    pattern
        .split('/')
        .take_while(|s| !s.contains(['*', '?', '[', ']', '{', '}', '\\']))
        .collect()
}

/// Each include pattern must be able to allow a change: match a file of generation 0
/// that a candidate may change (the target's files, the operator components and
/// scripts), or name a path below a directory of it that a candidate writes in (so
/// `target/skills/**` is fine before the first skill exists). `target_files` are the
/// target's, by their path under `target/`.
fn check_surface_tree(checked: &Checked, target_files: &[FileRead]) -> Vec<Violation> {
    let Some(value) = checked.normalized.as_ref().or(checked.raw.as_ref()) else {
        return Vec::new();
    };
    let files = changeable_files(checked, target_files);
    let dirs = directories_of(&files);
    let exclude = surface_strings(value, "exclude");
    let mut found = Vec::new();
    for (i, pattern) in surface_strings(value, "include").iter().enumerate() {
        if !can_allow_a_change(pattern, &exclude, &files, &dirs) {
            found.push(Violation::new(
                format!("surface.include[{i}]"),
                format!(
                    "`{pattern}` matches no file of the target (or of operators/) and no path inside one of its directories, so it allows no change; patterns are relative to the workspace root (target/** is the whole target)"
                ),
            ));
        }
    }
    found
}

/// The strings of `surface.<key>` (a pattern of another type is reported by the shape).
fn surface_strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get("surface")
        .and_then(|s| s.get(key))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str().map(String::from))
        .collect()
}

/// The files of generation 0 a candidate may change, by workspace path: the target's,
/// each bound stage's component and each script binding's script.
fn changeable_files(checked: &Checked, target_files: &[FileRead]) -> Vec<String> {
    let mut files: Vec<String> = target_files
        .iter()
        .map(|f| format!("{TARGET_DIR}/{}", f.path))
        .collect();
    for b in bindings(checked) {
        files.push(crate::layout::component_path(&b.stage));
        if let Some(source) = b.config.get("source").and_then(Value::as_str) {
            files.push(source.to_string());
        }
    }
    files
}

/// The directories a candidate writes in: `target/`, `operators/` and every directory
/// holding one of `files` (git keeps no empty one).
fn directories_of(files: &[String]) -> std::collections::BTreeSet<String> {
    let mut dirs: std::collections::BTreeSet<String> = [TARGET_DIR, crate::layout::OPERATORS_DIR]
        .map(String::from)
        .into();
    for f in files {
        let mut at = f.as_str();
        while let Some((parent, _)) = at.rsplit_once('/') {
            dirs.insert(parent.to_string());
            at = parent;
        }
    }
    dirs
}

/// Whether the include `pattern` (with the recipe's `exclude`) allows one of `files`,
/// or names a path below one of `dirs`, which a candidate could create.
fn can_allow_a_change(
    pattern: &str,
    exclude: &[String],
    files: &[String],
    dirs: &std::collections::BTreeSet<String>,
) -> bool {
    let Ok(surface) = Globs::new(&[pattern.to_string()], exclude) else {
        return true; // not a glob: check_surface_patterns reports it
    };
    if files.iter().any(|f| surface.allows(f)) {
        return true;
    }
    // The deepest directory the pattern names literally, and whether it goes below it.
    let segments: Vec<&str> = pattern.split('/').collect();
    (1..=literal_prefix(pattern).len())
        .rev()
        .find(|n| dirs.contains(&segments[..*n].join("/")))
        .is_some_and(|n| segments.len() > n)
}

/// Check a new recipe completely, as `recipe check` and `init` do: its shape, every
/// binding's operator and config, its surface's patterns, and what it names outside
/// itself (the target and the task set, read meanwhile on a thread of their own), each
/// problem reported at once. Returns the files read, for `init` to freeze.
///
/// A task set named by its Harbor registry name is fetched into a new directory under
/// `fetch_into` when one is given (`init`), and is otherwise left unread (`recipe check`
/// never downloads: [`Sources::fetched_at_init`] says so).
pub async fn check_new(
    sb: &Sandbox,
    shape: Checked,
    base: &Path,
    fetch_into: Option<&Path>,
) -> (Checked, Sources) {
    let named = shape.named();
    let dir = base.to_path_buf();
    let fetch = fetch_into.map(Path::to_path_buf);
    let reading = std::thread::spawn(move || read_sources(&named, &dir, fetch.as_deref()));
    let mut checked = check_operators(sb, shape, base).await;
    let sources = reading
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
    // Everything a git source held is read into memory now: its clone can go.
    source::forget_clones();
    let mut more = sources.violations.clone();
    if let Some(value) = checked.normalized.as_ref().or(checked.raw.as_ref()) {
        more.extend(check_surface_patterns(value));
        if let (Some(recipe), Some((_, tasks))) = (value.as_object(), &sources.tasks) {
            let count = protocol::task_count(tasks.iter().map(|f| f.path.as_str()));
            more.extend(protocol::split_size_problem(recipe, count));
        }
    }
    if let Some(target) = &sources.target {
        // A pattern already found wrong on its own is not reported twice.
        let reported: Vec<String> = more.iter().map(|v| v.path.clone()).collect();
        more.extend(
            check_surface_tree(&checked, target)
                .into_iter()
                .filter(|v| !reported.contains(&v.path)),
        );
    }
    add_violations(&mut checked, more);
    (checked, sources)
}

/// A violation as one line of text for a terminal (plus the excerpt lines of a YAML
/// error): `- path: message`, or `- message` for the recipe as a whole.
pub fn render(v: &Violation) -> String {
    if v.path.is_empty() {
        format!("- {}", v.message)
    } else {
        v.to_string()
    }
}

/// The JSON Schema editors can use for recipe files.
pub fn json_schema() -> Value {
    let mut s = schema().describe();
    if let Value::Object(map) = &mut s {
        map.insert(
            "$schema".into(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
        map.insert("title".into(), json!("evolve recipe"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "
experiment: {name: demo}
target: {seed: params}
surface: {include: ['target/**']}
operators:
  select: {operator: greedy}
  rollout: {operator: noop}
  mutate: {operator: perturb}
  gate: {operator: hillclimb, config: {strict: false}}
  record: {operator: notes}
evaluator: {dataset: builtin}
";

    #[test]
    fn defaults_are_filled_in() {
        let c = check_shape(MINIMAL);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        let r = c.recipe.unwrap();
        assert_eq!(
            (
                r.experiment.max_generations,
                r.experiment.children_per_gen,
                r.experiment.seed
            ),
            (5, 1, 0)
        );
        assert_eq!(r.operators["select"].timeout_s, 600.0);
        assert_eq!(r.operators["select"].memory_mib, 256);
        assert_eq!(r.evaluator.engine, "local");
        assert_eq!(
            (
                r.evaluator.splits.train,
                r.evaluator.splits.gate,
                r.evaluator.splits.sealed
            ),
            (0.5, 0.3, 0.2)
        );
        assert!(r.evaluator.anchor.final_);
        assert!(
            !r.operators.contains_key("analyze"),
            "optional stages stay absent"
        );
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_path() {
        let text = "
experiment: {name: demo, children_per_gen: 0, colour: blue}
target: {seed: a, path: b}
surface: {include: []}
operators:
  select: {operator: greedy, config: [1]}
  gate: {operator: hillclimb, timeout_s: 0}
  frobnicate: {operator: x}
evaluator: {dataset: d, engine: podman, splits: {train: 0.9}}
";
        let got: Vec<String> = check_shape(text)
            .violations
            .iter()
            .map(|v| v.to_string())
            .collect();
        // The cross-field rules run too, on what the recipe says (issue 23: a wrong type
        // hid them until it was fixed).
        assert_eq!(
            got,
            [
                "- evaluator.engine: must be one of: local, docker, harbor",
                "- evaluator.splits: train, gate and sealed must add up to 1",
                "- experiment.children_per_gen: must be >= 1",
                "- experiment.colour: unknown field",
                "- operators.frobnicate: unknown field",
                "- operators.gate.timeout_s: must be >= 0.001",
                "- operators.mutate: is required (a recipe must bind select, rollout, mutate, gate and record)",
                "- operators.record: is required (a recipe must bind select, rollout, mutate, gate and record)",
                "- operators.rollout: is required (a recipe must bind select, rollout, mutate, gate and record)",
                "- operators.select.config: must be an object",
                "- surface.include: must have at least 1 item",
                "- target: name exactly one of `seed`, `path` or `git`",
            ]
        );
    }

    #[test]
    fn cross_field_rules_run_on_a_well_typed_recipe() {
        let text = MINIMAL
            .replace(
                "target: {seed: params}",
                "target: {seed: params, path: ./t}",
            )
            .replace("  record: {operator: notes}\n", "")
            .replace(
                "evaluator: {dataset: builtin}",
                "evaluator: {dataset: builtin, splits: {train: 0.9}}",
            );
        let got: Vec<String> = check_shape(&text)
            .violations
            .iter()
            .map(|v| v.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "- evaluator.splits: train, gate and sealed must add up to 1",
                "- operators.record: is required (a recipe must bind select, rollout, mutate, gate and record)",
                "- target: name exactly one of `seed`, `path` or `git`",
            ]
        );
    }

    #[test]
    fn yaml_errors_show_the_line_and_a_caret() {
        let c = check_shape("experiment: {name: demo}\ntarget:\n\tseed: demo\n");
        assert_eq!(c.violations.len(), 1);
        let message = &c.violations[0].message;
        let (first, excerpt) = message.split_once('\n').unwrap();
        assert!(
            first.starts_with("is not valid YAML: ") && first.contains("at line 3 column 1"),
            "{message}"
        );
        assert_eq!(excerpt, "  3 | \tseed: demo\n    | ^");
    }

    /// The frozen recipe of a workspace is read with `check_shape`, which leaves the
    /// surface's authoring rules (and the files the recipe names) to `check_new`: a
    /// workspace made before a rule existed still opens.
    #[test]
    fn authoring_rules_are_not_shape_rules() {
        let text = MINIMAL.replace("'target/**'", "'evaluator/**'");
        let c = check_shape(&text);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        let found = check_surface_patterns(c.normalized.as_ref().unwrap());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, "surface.include[0]");
        // What a run of such a workspace stops on.
        assert_eq!(surface_problems(c.recipe.as_ref().unwrap()), found);
    }

    #[test]
    fn the_json_schema_names_every_stage() {
        let s = json_schema();
        for stage in sandbox::ALL_STAGES {
            assert!(s["properties"]["operators"]["properties"][stage_name(stage)].is_object());
        }
        assert_eq!(s["additionalProperties"], json!(false));
    }
}
