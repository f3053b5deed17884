//! Recipes: the YAML file that binds one operator to each lifecycle stage.
//!
//! The recipe's own shape is declared once with the same schema vocabulary operators
//! use (`evolve-config-schema`), so `evolve recipe check` reports *every* problem at
//! once with its path, `evolve recipe schema` prints a JSON Schema for editors, and the
//! normalized recipe (defaults filled in) is what a workspace freezes. Each operator's
//! `config` is then normalized by the operator component itself.

use crate::builtin;
use crate::sandbox::{
    self, ComponentDigest, LoadedOperator, Sandbox, StageInput, StageOutput, parse_stage,
    stage_name, types::Stage,
};
use evolve_config_schema::{
    Fields, Schema, Violation, array, boolean, integer, json, number, object, string,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
                        string().description("A directory holding the target"),
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
            object(
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
                            .description("A built-in task set or a directory of Harbor tasks"),
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
                    ),
            )
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
                        object(
                            Fields::new()
                                .field("input_per_mtok_usd", number().minimum(0.0).description("USD per million prompt tokens"))
                                .field("output_per_mtok_usd", number().minimum(0.0).description("USD per million completion tokens")),
                        ),
                    )
                    .field("timeout_s", number().minimum(0.001).description("Bound on one chat call, retries included (default 120)"))
                    .field("max_retries", integer().minimum(0.0).maximum(10.0).description("Retries on 429, 5xx and connection errors (default 3)"))
                    .field("max_tokens", integer().minimum(1.0).description("Cap on an operator's max-tokens (default 4096)")),
            ),
        )
        .refine(cross_checks)
        .build()
        .expect("the recipe schema is valid")
}

fn cross_checks(recipe: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let mut found = Vec::new();
    let target = recipe.get("target").and_then(Value::as_object);
    let has = |k: &str| target.is_some_and(|t| t.contains_key(k));
    if has("seed") == has("path") {
        found.push(Violation::new(
            "target",
            "name exactly one of `seed` or `path`",
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
        if !b.get("config").is_some_and(Value::is_object) {
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
    let total: f64 = ["train", "gate", "sealed"]
        .iter()
        .filter_map(|k| splits.and_then(|s| s.get(*k)).and_then(Value::as_f64))
        .sum();
    if (total - 1.0).abs() > 1e-9 {
        found.push(Violation::new(
            "evaluator.splits",
            "train, gate and sealed must add up to 1",
        ));
    }
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
}

/// A component [`check_operators`] read from a file.
#[derive(Debug, Clone)]
pub struct ComponentFile {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
    pub sha256: ComponentDigest,
}

/// Parse and check a recipe's text, without running any operator.
pub fn check_shape(text: &str) -> Checked {
    let value: Value = match serde_yaml::from_str::<serde_yaml::Value>(text) {
        Ok(v) => match serde_json::to_value(v) {
            Ok(j) => j,
            Err(e) => {
                return failed(Violation::new(
                    "",
                    format!("cannot be represented as JSON: {e}"),
                ));
            }
        },
        Err(e) => {
            let at = e
                .location()
                .map(|l| format!(" (line {}, column {})", l.line(), l.column()))
                .unwrap_or_default();
            return failed(Violation::new("", format!("is not valid YAML{at}")));
        }
    };
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
        Err(violations) => Checked {
            violations,
            ..Checked::default()
        },
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

/// Check a recipe completely: its shape, then every binding's operator and config
/// (normalized by the operator component). Returns the recipe with normalized configs.
pub async fn check(sb: &Sandbox, text: &str, base: &Path) -> Checked {
    check_operators(sb, check_shape(text), base).await
}

/// The second half of [`check`]: have each bound operator normalize its `config` (and
/// compile a script binding's script), given what [`check_shape`] found.
pub async fn check_operators(sb: &Sandbox, mut checked: Checked, base: &Path) -> Checked {
    let (Some(recipe), Some(normalized)) = (checked.recipe.as_mut(), checked.normalized.as_mut())
    else {
        return checked;
    };
    let mut violations = Vec::new();
    for (stage_text, binding) in recipe.operators.iter_mut() {
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
                if binding.operator == crate::lifecycle::stages::SCRIPT_OPERATOR
                    && let Err(message) = check_script(sb, &op, stage_text, &map, base).await
                {
                    violations.push(Violation::new(at("config.source"), message));
                }
                normalized["operators"][stage_text.as_str()]["config"] = Value::Object(map.clone());
                binding.config = map;
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
    violations.sort_by(|a, b| a.path.cmp(&b.path));
    if !violations.is_empty() {
        checked.recipe = None;
        checked.normalized = None;
    }
    checked.violations = violations;
    checked
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
    use crate::lifecycle::stages;
    let source = config.get("source").and_then(Value::as_str).unwrap_or("");
    let script = match config.get("builtin").and_then(Value::as_str) {
        Some(name) => match crate::workspace::init::builtin_script(stage, name) {
            Some(text) => stages::script_source(source, text.to_string()),
            // normalize-config has reported the unknown name.
            None => return Ok(()),
        },
        None => stages::script_from_file(base, source).map_err(|e| {
            format!(
                "{e}; the {stage} script must be at config.source next to the recipe, or config.builtin must name a shipped script"
            )
        })?,
    };
    let config = Value::Object(config.clone()).to_string();
    let mut input = crate::cli::samples::input(op.stage, &config);
    stages::attach_script(&mut input, Some(script));
    let report = sb
        .call_bare(op, input, Duration::from_secs(10))
        .await
        .map_err(|e| format!("no scratch directory: {e}"))?;
    match report.outcome {
        Err(sandbox::OperatorFailure::Reported(m)) if stages::is_script_defect(&m) => Err(m),
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
        assert_eq!(
            got,
            [
                "- evaluator.engine: must be one of: local, docker, harbor",
                "- experiment.children_per_gen: must be >= 1",
                "- experiment.colour: unknown field",
                "- operators.frobnicate: unknown field",
                "- operators.gate.timeout_s: must be >= 0.001",
                "- surface.include: must have at least 1 item",
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
                "- target: name exactly one of `seed` or `path`",
            ]
        );
    }

    #[test]
    fn yaml_errors_say_where() {
        let c = check_shape("experiment: {name: [unclosed\n");
        assert_eq!(c.violations.len(), 1);
        assert!(
            c.violations[0]
                .message
                .starts_with("is not valid YAML (line"),
            "{}",
            c.violations[0]
        );
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
