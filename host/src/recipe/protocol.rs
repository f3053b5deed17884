//! The evaluation protocol's recipe keys (RSIHub's knobs): which split candidates are
//! evaluated on, how many of its tasks each round runs and how they are drawn, retries of
//! infrastructure failures, the timeout multipliers, whether an agent timeout scores 0,
//! and the host variables passed to the agent and the verifier. Declared here, checked
//! here (every problem with its path), frozen by `init` into `evaluator/engine.json`
//! (`workspace::protocol`), which makes each of them part of the runtime fingerprint.

use evaluator_harbor::gateway::{API_BASE_ENV, API_KEY_ENV, BASE_URL_ENV};
use evaluator_harbor::split::{SplitName, SplitRatios, split_sizes};
use evolve_config_schema::{Fields, Violation, array, boolean, integer, number, string};
use serde_json::{Map, Value};

/// Splits a candidate may be evaluated and selected on. `sealed` is never one: it scores
/// only the anchors (gen/0's and the champion's), so that one split stays unseen by every
/// decision a run makes.
pub const EVALUATION_SPLITS: [&str; 2] = ["train", "gate"];
/// How the `tasks_per_round` sample is drawn.
pub const SAMPLINGS: [&str; 2] = ["static", "generation_shuffle"];
/// Largest `max_retries`.
pub const MAX_RETRIES: u32 = 10;
/// Largest timeout multiplier.
pub const MAX_MULTIPLIER: f64 = 100.0;
/// Most variables one of `agent_env` / `verifier_env` may name.
pub const MAX_ENV_NAMES: usize = 64;
/// Longest variable name.
const MAX_NAME_CHARS: usize = 128;

/// The protocol's fields of the recipe's `evaluator` block, added to `fields`.
pub fn fields(fields: Fields) -> Fields {
    let names = || {
        array(string().maximum(MAX_NAME_CHARS as f64))
            .default(Value::Array(Vec::new()))
            .maximum(MAX_ENV_NAMES as f64)
    };
    fields
        .field(
            "evaluation_split",
            string().default(json_str("gate")).description(
                "The split candidates are evaluated and selected on: gate (default) or train; never sealed, which scores only the anchors",
            ),
        )
        .field(
            "tasks_per_round",
            integer().minimum(1.0).maximum(1_000_000.0).description(
                "Evaluate each candidate on this many tasks of the evaluation split (default: all of them)",
            ),
        )
        .field(
            "task_sampling",
            string()
                .default(json_str("static"))
                .choices(SAMPLINGS.map(json_str))
                .description(
                    "static: one seeded sample chosen at init; generation_shuffle: a new seeded sample each generation, shared by its candidates",
                ),
        )
        .field(
            "max_retries",
            integer()
                .default(Value::from(0))
                .minimum(0.0)
                .maximum(f64::from(MAX_RETRIES))
                .description("How many more times an infrastructure-failed trial is run (every attempt is kept)"),
        )
        .field("agent_timeout_multiplier", multiplier("[agent].timeout_sec"))
        .field("verifier_timeout_multiplier", multiplier("[verifier].timeout_sec"))
        .field(
            "agent_timeout_is_zero",
            boolean().default(Value::Bool(true)).description(
                "An agent timeout scores 0 (true, default); false: it is not scoreable, like a verifier timeout",
            ),
        )
        .field(
            "agent_env",
            names().description(
                "Names of host environment variables passed to the agent; values are read when an evaluation runs and never stored",
            ),
        )
        .field(
            "verifier_env",
            names().description(
                "Names of host environment variables passed to the verifier; values are read when an evaluation runs and never stored",
            ),
        )
}

fn json_str(s: &str) -> Value {
    Value::String(s.to_string())
}

fn multiplier(of: &str) -> evolve_config_schema::Field {
    number()
        .default(Value::from(1.0))
        .minimum(0.0)
        .maximum(MAX_MULTIPLIER)
        .description(&format!(
            "Multiplies every task's {of} (greater than 0, at most 100; default 1)"
        ))
}

/// The protocol's cross-field rules, on the recipe as normalized or as written (a key of
/// the wrong type is reported by its field, and skipped here).
pub fn cross_checks(recipe: &Map<String, Value>, found: &mut Vec<Violation>) {
    let Some(evaluator) = recipe.get("evaluator").and_then(Value::as_object) else {
        return;
    };
    let at = |k: &str| format!("evaluator.{k}");
    if let Some(split) = evaluator.get("evaluation_split").and_then(Value::as_str)
        && !EVALUATION_SPLITS.contains(&split)
    {
        let why = if split == "sealed" {
            "must be train or gate: the sealed split is never evaluated per generation, it scores only the anchors (docs/evaluation.md)"
        } else {
            "must be train or gate"
        };
        found.push(Violation::new(at("evaluation_split"), why));
    }
    for key in ["agent_timeout_multiplier", "verifier_timeout_multiplier"] {
        if evaluator
            .get(key)
            .and_then(Value::as_f64)
            .is_some_and(|m| m <= 0.0)
        {
            found.push(Violation::new(at(key), "must be greater than 0"));
        }
    }
    let sampling = evaluator.get("task_sampling").and_then(Value::as_str);
    let per_round = evaluator.get("tasks_per_round").filter(|v| !v.is_null());
    if sampling == Some("generation_shuffle") && per_round.is_none() {
        found.push(Violation::new(
            at("task_sampling"),
            "generation_shuffle draws evaluator.tasks_per_round tasks each generation; set tasks_per_round",
        ));
    }
    let owned = owned_names(recipe);
    for key in ["agent_env", "verifier_env"] {
        let Some(list) = evaluator.get(key).and_then(Value::as_array) else {
            continue;
        };
        let mut seen = std::collections::BTreeSet::new();
        for (i, name) in list.iter().enumerate() {
            let Some(name) = name.as_str() else { continue };
            let problem = name_problem(name, &owned)
                .or_else(|| (!seen.insert(name)).then(|| format!("`{name}` is named twice")));
            if let Some(why) = problem {
                found.push(Violation::new(format!("evaluator.{key}[{i}]"), why));
            }
        }
    }
}

/// Variables whose values are keys the framework holds: the operators' model key and the
/// agent's model key (`model.api_key_env`, `evaluator.model.api_key_env`), with the block
/// that names each.
fn owned_names(recipe: &Map<String, Value>) -> Vec<(String, &'static str)> {
    let key_env = |block: Option<&Value>| {
        block
            .and_then(|b| b.get("api_key_env"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let evaluator = recipe.get("evaluator");
    [
        (key_env(recipe.get("model")), "model.api_key_env"),
        (
            key_env(evaluator.and_then(|e| e.get("model"))),
            "evaluator.model.api_key_env",
        ),
    ]
    .into_iter()
    .filter_map(|(name, key)| Some((name?, key)))
    .collect()
}

/// Why `name` cannot be passed to a trial, if it cannot.
fn name_problem(name: &str, owned: &[(String, &'static str)]) -> Option<String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Some(
            "must be the name of an environment variable (a letter or `_`, then letters, digits and `_`), not its value".into(),
        );
    }
    if [API_KEY_ENV, BASE_URL_ENV, API_BASE_ENV].contains(&name) {
        return Some(format!(
            "`{name}` is set by the framework for every trial (the model gateway's address and per-trial key); it cannot be passed from the host"
        ));
    }
    if name.starts_with("EVOLVE_") {
        return Some(format!(
            "`{name}`: EVOLVE_* variables belong to the framework and are never passed to a trial"
        ));
    }
    owned.iter().find(|(n, _)| n == name).map(|(_, key)| {
        format!(
            "`{name}` holds a model key ({key}); a key the framework holds must never reach the code under evaluation"
        )
    })
}

/// `tasks_per_round` against the evaluation split's size, given the number of tasks the
/// task set holds (`init` and `recipe check` know it before anything is frozen).
pub fn split_size_problem(recipe: &Map<String, Value>, tasks: usize) -> Option<Violation> {
    let evaluator = recipe.get("evaluator")?;
    let per_round = evaluator.get("tasks_per_round")?.as_u64()?;
    // A split that cannot be evaluated on is reported by itself.
    let split: SplitName = evaluator
        .get("evaluation_split")
        .and_then(Value::as_str)
        .unwrap_or("gate")
        .parse()
        .ok()
        .filter(|s: &SplitName| EVALUATION_SPLITS.contains(&s.as_str()))?;
    let splits = evaluator.get("splits");
    let ratio = |k: &str, default: f64| {
        splits
            .and_then(|s| s.get(k))
            .and_then(Value::as_f64)
            .unwrap_or(default)
    };
    let ratios = SplitRatios {
        train: ratio("train", 0.5),
        gate: ratio("gate", 0.3),
        sealed: ratio("sealed", 0.2),
    };
    let sizes = split_sizes(tasks, &ratios).ok()?;
    let size = sizes[SplitName::ALL.iter().position(|s| *s == split)?];
    (per_round > size as u64).then(|| {
        Violation::new(
            "evaluator.tasks_per_round",
            format!(
                "is {per_round}, but the {} split has {size} task{} ({tasks} in the task set); at most {size}",
                split.as_str(),
                if size == 1 { "" } else { "s" },
            ),
        )
    })
}

/// The tasks of a task set's files (paths relative to the set), counted as
/// `task::discover` finds them: the root when it holds `task.toml`, else each non-hidden
/// top-level directory holding one.
pub fn task_count<'a>(paths: impl Iterator<Item = &'a str>) -> usize {
    let mut tops = std::collections::BTreeSet::new();
    for path in paths {
        if path == "task.toml" {
            return 1;
        }
        if let Some((top, "task.toml")) = path.split_once('/')
            && !top.starts_with('.')
        {
            tops.insert(top.to_string());
        }
    }
    tops.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_framework_names_refused() {
        let owned = vec![("MY_KEY".to_string(), "model.api_key_env")];
        assert_eq!(name_problem("HF_TOKEN", &owned), None);
        assert_eq!(name_problem("_x1", &owned), None);
        for bad in ["", "1X", "A-B", "A=B", "sk-abc", "Ä"] {
            assert!(
                name_problem(bad, &owned)
                    .unwrap()
                    .starts_with("must be the name"),
                "{bad}"
            );
        }
        for gateway in ["OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE"] {
            assert!(
                name_problem(gateway, &owned)
                    .unwrap()
                    .contains("model gateway")
            );
        }
        assert!(
            name_problem("EVOLVE_KEY_DIR", &owned)
                .unwrap()
                .contains("EVOLVE_*")
        );
        assert!(
            name_problem("MY_KEY", &owned)
                .unwrap()
                .contains("model.api_key_env")
        );
    }

    #[test]
    fn tasks_are_counted_as_discover_finds_them() {
        let set = [
            "a/task.toml",
            "a/tests/test.sh",
            "b/task.toml",
            ".h/task.toml",
            "c/x",
        ];
        assert_eq!(task_count(set.into_iter()), 2);
        assert_eq!(task_count(["task.toml", "a/task.toml"].into_iter()), 1);
        assert_eq!(task_count(std::iter::empty()), 0);
    }

    #[test]
    fn tasks_per_round_is_bounded_by_its_split() {
        let recipe = |per_round: u64, split: &str| {
            serde_json::json!({"evaluator": {
                "tasks_per_round": per_round, "evaluation_split": split,
                "splits": {"train": 0.5, "gate": 0.25, "sealed": 0.25},
            }})
            .as_object()
            .cloned()
            .unwrap()
        };
        assert!(split_size_problem(&recipe(3, "gate"), 12).is_none());
        let v = split_size_problem(&recipe(4, "gate"), 12).unwrap();
        assert_eq!(
            v.message,
            "is 4, but the gate split has 3 tasks (12 in the task set); at most 3"
        );
        assert!(split_size_problem(&recipe(6, "train"), 12).is_none());
        assert!(split_size_problem(&recipe(7, "train"), 12).is_some());
        assert!(split_size_problem(&recipe(9, "sealed"), 12).is_none());
    }
}
