//! The configuration every script operator shares, and the limits read from it.

use evolve_operator_sdk::config::{
    Fields, Schema, SchemaBuilder, Violation, integer, object, string,
};
use evolve_operator_sdk::serde_json::{Map, Value, json};

/// Default operation budget: a few milliseconds of interpretation per thousand; far
/// more than any shipped script needs, and an endless loop ends in well under a second.
pub const DEFAULT_MAX_OPERATIONS: i64 = 1_000_000;
/// Default memory a script may hold, in MiB (the binding's `memory_mib` is the wall
/// around the whole component).
pub const DEFAULT_MAX_MEMORY_MIB: i64 = 32;

/// The interpreter limits of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_operations: u64,
    pub max_memory_bytes: usize,
}

impl Limits {
    /// From a normalized configuration (defaults where a value is missing).
    pub fn from_config(config: &Map<String, Value>) -> Limits {
        let get = |k: &str, d: i64| config.get(k).and_then(Value::as_i64).unwrap_or(d).max(1);
        Limits {
            max_operations: get("max_operations", DEFAULT_MAX_OPERATIONS) as u64,
            max_memory_bytes: (get("max_memory_mib", DEFAULT_MAX_MEMORY_MIB) as usize) << 20,
        }
    }
}

/// The schema of a script operator: `source` (the script, under `operators/`),
/// `builtin` (one of `builtins`, which `evolve init` installs at `source`), the
/// interpreter limits, and `params`, free JSON the script reads as `ctx.config`.
pub fn schema(builtins: &[&str]) -> SchemaBuilder {
    let mut s = Schema::new().field(
        "source",
        string().required().description(
            "The script, a workspace path under operators/ ending in .rhai, read from the \
             checkout the stage's operator is loaded from",
        ),
    );
    if !builtins.is_empty() {
        s = s.field(
            "builtin",
            string()
                .choices(builtins.iter().map(|b| json!(b)))
                .description("A shipped script evolve init installs at `source` in gen/0"),
        );
    }
    s.field(
        "max_operations",
        integer()
            .default(json!(DEFAULT_MAX_OPERATIONS))
            .minimum(1_000.0)
            .maximum(1e10)
            .description("Interpreter operations per call before the script is stopped"),
    )
    .field(
        "max_memory_mib",
        integer()
            .default(json!(DEFAULT_MAX_MEMORY_MIB))
            .minimum(1.0)
            .maximum(1024.0)
            .description("Memory the script may hold before it is stopped"),
    )
    .field(
        "params",
        object(Fields::new())
            .additional_properties(true)
            .default(json!({}))
            .description("The script's own parameters, passed as ctx.config"),
    )
    .refine(check_source)
}

fn check_source(cfg: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let source = cfg.get("source").and_then(Value::as_str).unwrap_or("");
    source_path_problem(source).map_or(Ok(()), |m| Err(vec![Violation::new("source", m)]))
}

/// Why `source` cannot name a script, if it cannot. Shared with the host's own check.
pub fn source_path_problem(source: &str) -> Option<&'static str> {
    let clean = !source.starts_with('/')
        && !source.chars().any(char::is_control)
        && source
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..");
    if !clean {
        Some("must be a relative path of plain segments (no `..`, no leading `/`)")
    } else if !source.starts_with("operators/") {
        Some("must be under operators/ (a script is part of the evolvable operators)")
    } else if !source.ends_with(".rhai") {
        Some("must end in .rhai")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_source_rules() {
        let s = schema(&["hillclimb"]).build().unwrap();
        let n = s
            .normalize(r#"{"source": "operators/gate/policy.rhai"}"#)
            .unwrap();
        assert_eq!(
            Value::Object(n.clone()),
            json!({"source": "operators/gate/policy.rhai", "max_operations": 1_000_000,
                   "max_memory_mib": 32, "params": {}})
        );
        assert_eq!(
            Limits::from_config(&n),
            Limits {
                max_operations: 1_000_000,
                max_memory_bytes: 32 << 20
            }
        );
        for bad in [
            "target/x.rhai",
            "operators/../evaluator/x.rhai",
            "/operators/x.rhai",
            "operators/x.py",
        ] {
            let errs = s
                .normalize(&json!({"source": bad}).to_string())
                .unwrap_err();
            assert_eq!(errs[0].path, "source", "{bad}");
        }
        assert!(
            s.normalize(r#"{"source": "operators/a.rhai", "builtin": "nope"}"#)
                .is_err()
        );
        assert!(
            s.normalize(r#"{"source": "operators/a.rhai", "params": {"k": [1]}}"#)
                .is_ok()
        );
        assert!(
            s.normalize(r#"{"source": "operators/a.rhai", "sharpness": 2}"#)
                .is_err()
        );
    }
}
