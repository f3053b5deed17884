//! mutate/perturb: random-walk numeric parameters, offline and without a model.
//!
//! For every configured file (a JSON object under the candidate's `target/`) and every
//! named top-level numeric field, add `(2u - 1) × m` where `u` is drawn uniformly from
//! [0, 1) with the call's deterministic generator and `m = step × anneal^(generation − 1)`,
//! so the steps shrink as the run goes on. The result is clamped to `min`/`max` when they
//! are set, rounded to 6 decimals, and the file is written back pretty-printed with its
//! other fields and key order kept. Files and fields are processed in configuration order,
//! one draw per field, so a seed pins the whole proposal.

use std::path::{Path, PathBuf};

use evolve_operator_sdk::config::{array, number, object, string};
use evolve_operator_sdk::prelude::*;

pub struct Perturb;

impl Operator for Perturb {
    const NAME: &'static str = "perturb";
    const SUMMARY: &'static str =
        "Add a random, annealed step to numeric fields of JSON files under target/ (no model).";

    fn config() -> SchemaBuilder {
        let file = object(
            config::Fields::new()
                .field(
                    "path",
                    string().required().description(
                        "JSON file to edit, relative to the workspace and under target/, \
                         e.g. target/params.json",
                    ),
                )
                .field(
                    "fields",
                    array(string())
                        .required()
                        .minimum(1.0)
                        .description("Names of numeric top-level fields of that file to perturb"),
                ),
        );
        Schema::new()
            .field(
                "files",
                array(file)
                    .required()
                    .minimum(1.0)
                    .description("The files to edit and the fields of each"),
            )
            .field(
                "step",
                number()
                    .default(json!(1.0))
                    .description("Largest change of a field in generation 1; must be > 0"),
            )
            .field(
                "anneal",
                number().default(json!(0.85)).maximum(1.0).description(
                    "Factor in (0, 1] applied to the step per generation: \
                     step x anneal^(generation - 1)",
                ),
            )
            .field(
                "min",
                number().description("Lower clamp for every perturbed value (optional)"),
            )
            .field(
                "max",
                number().description("Upper clamp for every perturbed value (optional)"),
            )
            .refine(check_config)
    }
}

fn check_config(c: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let mut v = Vec::new();
    let num = |k: &str| c.get(k).and_then(Value::as_f64);
    if num("step").is_some_and(|s| s <= 0.0) {
        v.push(Violation::new("step", "must be > 0"));
    }
    if num("anneal").is_some_and(|a| a <= 0.0) {
        v.push(Violation::new("anneal", "must be > 0"));
    }
    if let (Some(lo), Some(hi)) = (num("min"), num("max"))
        && lo > hi
    {
        v.push(Violation::new("min", "must be <= max"));
    }
    let files = c.get("files").and_then(Value::as_array);
    for (i, f) in files.into_iter().flatten().enumerate() {
        if let Some(p) = f.get("path").and_then(Value::as_str)
            && guest_path(p).is_err()
        {
            v.push(Violation::new(
                format!("files[{i}].path"),
                "must be a relative path under target/, e.g. target/params.json",
            ));
        }
    }
    if v.is_empty() { Ok(()) } else { Err(v) }
}

/// `target/a/b.json` (or `/target/a/b.json`) → the guest path `/target/a/b.json`.
fn guest_path(path: &str) -> Result<String, String> {
    let rel = path.strip_prefix('/').unwrap_or(path);
    let mut parts = rel.split('/');
    let ok = parts.next() == Some("target")
        && rel.len() > "target/".len()
        && parts.all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\\'));
    if ok {
        Ok(format!("/{rel}"))
    } else {
        Err(format!(
            "path {path:?} is not under target/: perturb edits only the candidate's files, \
             e.g. target/params.json"
        ))
    }
}

/// Perturb what `ctx.config` names, with `/` of the guest file system at `root`.
pub fn perturb(ctx: &Context, root: &Path) -> Result<Proposal, String> {
    let step = ctx.f64("step").unwrap_or(1.0);
    let anneal = ctx.f64("anneal").unwrap_or(0.85);
    let (lo, hi) = (ctx.f64("min"), ctx.f64("max"));
    if !(step.is_finite() && step > 0.0) {
        return Err("config.step must be a number > 0".into());
    }
    if !(anneal.is_finite() && anneal > 0.0 && anneal <= 1.0) {
        return Err("config.anneal must be a number in (0, 1]".into());
    }
    let magnitude =
        step * anneal.powi(ctx.generation.saturating_sub(1).min(i32::MAX as u32) as i32);
    let files = ctx
        .config
        .get("files")
        .and_then(Value::as_array)
        .filter(|f| !f.is_empty())
        .ok_or("config.files must list at least one file")?;

    let mut rng = ctx.rng();
    let mut changed: Vec<String> = Vec::new();
    let mut notes = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let path = file
            .get("path")
            .and_then(Value::as_str)
            .ok_or(format!("config.files[{i}].path must be a string"))?;
        let fields: Vec<&str> = file
            .get("fields")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if fields.is_empty() {
            return Err(format!(
                "config.files[{i}].fields must name at least one field"
            ));
        }
        let guest = guest_path(path)?;
        let rel = guest.trim_start_matches('/').to_string();
        let host: PathBuf = root.join(&rel);
        let text = std::fs::read_to_string(&host).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{rel} does not exist"),
            _ => format!("cannot read {rel}: {e}"),
        })?;
        let mut doc: Value =
            serde_json_from_str(&text).map_err(|e| format!("{rel} is not valid JSON: {e}"))?;
        let obj = doc
            .as_object_mut()
            .ok_or(format!("{rel} must hold a JSON object"))?;
        for field in fields {
            let old = match obj.get(field) {
                None => return Err(format!("{rel} has no field `{field}`")),
                Some(Value::Number(n)) => n
                    .as_f64()
                    .filter(|v| v.is_finite())
                    .ok_or(format!("{rel}: field `{field}` is not a finite number"))?,
                Some(other) => {
                    return Err(format!(
                        "{rel}: field `{field}` is {}, not a number",
                        kind(other)
                    ));
                }
            };
            let delta = (2.0 * rng.next_f64() - 1.0) * magnitude;
            let mut new = old + delta;
            if let Some(lo) = lo {
                new = new.max(lo);
            }
            if let Some(hi) = hi {
                new = new.min(hi);
            }
            new = (new * 1e6).round() / 1e6;
            if !new.is_finite() {
                return Err(format!("{rel}: field `{field}` would become non-finite"));
            }
            obj.insert(field.to_string(), json!(new));
            let prefix = if files.len() > 1 {
                format!("{rel}: ")
            } else {
                String::new()
            };
            notes.push(format!("{prefix}{field}: {old:.3} -> {new:.3}"));
        }
        let mut out = evolve_operator_sdk::serde_json::to_string_pretty(&doc)
            .map_err(|e| format!("cannot serialize {rel}: {e}"))?;
        out.push('\n');
        std::fs::write(&host, out).map_err(|e| format!("cannot write {rel}: {e}"))?;
        if !changed.contains(&rel) {
            changed.push(rel);
        }
    }
    Ok(Proposal {
        changed,
        notes,
        usage: Usage {
            input_tokens: 0,
            output_tokens: 0,
            usd: 0.0,
        },
    })
}

fn serde_json_from_str(text: &str) -> Result<Value, evolve_operator_sdk::serde_json::Error> {
    evolve_operator_sdk::serde_json::from_str(text)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Mutate for Perturb {
    fn mutate(ctx: &Context, _observation: &Observation) -> Result<Proposal, String> {
        perturb(ctx, Path::new("/"))
    }
}

evolve_operator_sdk::export!(mutate: Perturb);

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(config: Value) -> Result<Map<String, Value>, Vec<Violation>> {
        <Perturb as Operator>::config()
            .build()
            .unwrap()
            .normalize_value(&config)
    }

    fn ctx(config: Value, generation: u32, seed: u64) -> Context {
        let mut c = Context::for_test(Value::Object(normalized(config).unwrap()));
        c.generation = generation;
        c.seed = seed;
        c
    }

    fn params_dir(body: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("target")).unwrap();
        std::fs::write(d.path().join("target/params.json"), body).unwrap();
        d
    }

    const SEED_PARAMS: &str = "{\n  \"slope\": 1.0,\n  \"intercept\": 0.0\n}\n";

    fn demo_config() -> Value {
        json!({"files": [{"path": "target/params.json", "fields": ["slope", "intercept"]}]})
    }

    #[test]
    fn fixed_seed_gives_pinned_values() {
        // Seed 0: the first draws are 0.883311 and 0.431528 (SplitMix64), so with m = 1
        // the deltas are +0.766622 and -0.136944.
        let d = params_dir(SEED_PARAMS);
        let p = perturb(&ctx(demo_config(), 1, 0), d.path()).unwrap();
        assert_eq!(p.changed, vec!["target/params.json"]);
        assert_eq!(
            p.notes,
            vec!["slope: 1.000 -> 1.767", "intercept: 0.000 -> -0.137"]
        );
        assert_eq!(
            std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
            "{\n  \"slope\": 1.766622,\n  \"intercept\": -0.136944\n}\n"
        );
        assert_eq!(p.usage.usd, 0.0);
    }

    #[test]
    fn the_step_anneals_with_the_generation() {
        // Same draws as above, generation 3: m = 0.85^2 = 0.7225.
        let d = params_dir(SEED_PARAMS);
        let p = perturb(&ctx(demo_config(), 3, 0), d.path()).unwrap();
        assert_eq!(
            p.notes,
            vec!["slope: 1.000 -> 1.554", "intercept: 0.000 -> -0.099"]
        );
        assert_eq!(
            std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
            "{\n  \"slope\": 1.553884,\n  \"intercept\": -0.098942\n}\n"
        );
    }

    #[test]
    fn same_seed_same_proposal_and_other_seeds_differ() {
        let run = |seed| {
            let d = params_dir(SEED_PARAMS);
            perturb(&ctx(demo_config(), 2, seed), d.path())
                .unwrap()
                .notes
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn unrelated_fields_and_key_order_are_kept() {
        let d = params_dir("{\"name\": \"demo\", \"slope\": 2, \"nested\": {\"a\": [1, 2]}}");
        let c = json!({"files": [{"path": "target/params.json", "fields": ["slope"]}],
                       "step": 0.5, "min": 0.0, "max": 2.1});
        let p = perturb(&ctx(c, 1, 0), d.path()).unwrap();
        // delta = (2 × 0.883... − 1) × 0.5 = +0.383..., clamped to max = 2.1.
        assert_eq!(p.notes, vec!["slope: 2.000 -> 2.100"]);
        assert_eq!(
            std::fs::read_to_string(d.path().join("target/params.json")).unwrap(),
            "{\n  \"name\": \"demo\",\n  \"slope\": 2.1,\n  \"nested\": {\n    \"a\": [\n      1,\n      2\n    ]\n  }\n}\n"
        );
    }

    #[test]
    fn several_files_prefix_their_notes() {
        let d = params_dir(SEED_PARAMS);
        std::fs::create_dir_all(d.path().join("target/sub")).unwrap();
        std::fs::write(d.path().join("target/sub/b.json"), "{\"w\": 10}").unwrap();
        let c = json!({"files": [
            {"path": "target/params.json", "fields": ["intercept"]},
            {"path": "/target/sub/b.json", "fields": ["w"]}
        ]});
        let p = perturb(&ctx(c, 1, 0), d.path()).unwrap();
        assert_eq!(p.changed, vec!["target/params.json", "target/sub/b.json"]);
        assert_eq!(
            p.notes,
            vec![
                "target/params.json: intercept: 0.000 -> 0.767",
                "target/sub/b.json: w: 10.000 -> 9.863"
            ]
        );
    }

    #[test]
    fn errors_are_precise() {
        let err = |body: Option<&str>, fields: Value| {
            let d = params_dir(body.unwrap_or("{}"));
            if body.is_none() {
                std::fs::remove_file(d.path().join("target/params.json")).unwrap();
            }
            let c = json!({"files": [{"path": "target/params.json", "fields": fields}]});
            perturb(&ctx(c, 1, 0), d.path()).unwrap_err()
        };
        assert_eq!(
            err(None, json!(["slope"])),
            "target/params.json does not exist"
        );
        assert_eq!(
            err(Some("{\"slope\": 1}"), json!(["bias"])),
            "target/params.json has no field `bias`"
        );
        assert_eq!(
            err(Some("{\"slope\": \"1\"}"), json!(["slope"])),
            "target/params.json: field `slope` is a string, not a number"
        );
        assert_eq!(
            err(Some("[1, 2]"), json!(["slope"])),
            "target/params.json must hold a JSON object"
        );
        assert!(
            err(Some("{\"slope\": "), json!(["slope"]))
                .starts_with("target/params.json is not valid JSON: EOF")
        );

        // A path outside target/ is refused by the schema and, if it got through, by
        // the operator itself.
        let d = params_dir(SEED_PARAMS);
        let mut c = Context::for_test(
            json!({"files": [{"path": "evaluator/secret.json", "fields": ["x"]}],
                   "step": 1.0, "anneal": 0.85}),
        );
        c.generation = 1;
        assert_eq!(
            perturb(&c, d.path()).unwrap_err(),
            "path \"evaluator/secret.json\" is not under target/: perturb edits only the \
             candidate's files, e.g. target/params.json"
        );
    }

    #[test]
    fn paths_must_stay_under_target() {
        assert_eq!(
            guest_path("target/params.json").unwrap(),
            "/target/params.json"
        );
        assert_eq!(guest_path("/target/a/b.json").unwrap(), "/target/a/b.json");
        for bad in [
            "params.json",
            "target",
            "target/",
            "target/../evaluator/x.json",
            "target//x.json",
            "./target/x.json",
            "targets/x.json",
            "/etc/passwd",
        ] {
            assert!(guest_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn schema_defaults_and_violations() {
        assert_eq!(
            Value::Object(normalized(demo_config()).unwrap()),
            json!({"files": [{"path": "target/params.json", "fields": ["slope", "intercept"]}],
                   "step": 1.0, "anneal": 0.85})
        );
        let paths = |c: Value| -> Vec<String> {
            normalized(c)
                .unwrap_err()
                .into_iter()
                .map(|v| format!("{}: {}", v.path, v.message))
                .collect()
        };
        assert_eq!(paths(json!({})), vec!["files: is required"]);
        let v = paths(json!({"files": []}));
        assert_eq!(v.len(), 1);
        assert!(v[0].starts_with("files: "), "{v:?}");
        assert_eq!(
            paths(
                json!({"files": [{"path": "target/p.json", "fields": ["a"]}],
                         "step": 0, "anneal": 0, "min": 2, "max": 1})
            ),
            vec![
                "anneal: must be > 0",
                "min: must be <= max",
                "step: must be > 0"
            ]
        );
        assert_eq!(
            paths(json!({"files": [{"path": "src/p.json", "fields": ["a"]}]})),
            vec!["files[0].path: must be a relative path under target/, e.g. target/params.json"]
        );
        assert!(normalized(json!({"files": [{"path": "target/p.json", "fields": []}]})).is_err());
        assert!(
            normalized(
                json!({"files": [{"path": "target/p.json", "fields": ["a"]}],
                                  "anneal": 1.5})
            )
            .is_err()
        );
    }
}
