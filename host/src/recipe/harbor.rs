//! `evaluator.harbor`: the harbor engine's `harbor run` settings in a recipe, and datasets
//! named by their Harbor registry name (`terminal-bench@2.0`, `org/name@ref`).
//!
//! The block is declared as a JSON value in the schema and checked here, field by field,
//! so that every problem names the `harbor run` flag the field becomes
//! ([`HarborOptions::FLAGS`]) and the keys a block may hold, and never quotes a value (a
//! kwarg may hold a secret). `init` freezes the parsed [`HarborOptions`], with its
//! defaults resolved, into `evaluator/engine.json` (`workspace::harbor`).

use super::protocol::{MAX_MULTIPLIER, MAX_RETRIES};
use evaluator_harbor::engine::harbor::HarborOptions;
use evolve_config_schema::Violation;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Most trials one Harbor job runs at once (`-n`): cloud environments run hundreds.
pub const MAX_N_CONCURRENT: u64 = 10_000;

/// `evaluator.harbor.<field>`.
fn at(field: &str) -> String {
    format!("evaluator.harbor.{field}")
}

/// Where a field's value ends up, for a message: `harbor run -n/--n-concurrent`.
fn flag_phrase(field: &str) -> String {
    match HarborOptions::flag_of(field) {
        "(passed verbatim)" => "passed to `harbor run` verbatim".to_string(),
        flag => format!("`harbor run {flag}`"),
    }
}

fn allowed_keys() -> String {
    HarborOptions::FLAGS
        .iter()
        .map(|(f, _)| *f)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The block's problems, each at `evaluator.harbor.<field>` (or the block itself),
/// naming the flag; the parsed options when there are none. Kwarg values may be strings,
/// numbers or booleans, each passed as `key=value` with the value as YAML wrote it
/// (`true`, `3`, `0.5`); anything else (a list, a mapping, null) is refused, since Harbor
/// parses `--ak`/`--ek` values itself and a nested value has no one spelling there.
pub fn parse(block: &Value) -> Result<HarborOptions, Vec<Violation>> {
    let Some(map) = block.as_object() else {
        return Err(vec![Violation::new(
            "evaluator.harbor",
            format!(
                "must be a mapping of the harbor engine's settings (keys: {})",
                allowed_keys()
            ),
        )]);
    };
    let mut found = Vec::new();
    let mut unknown = Vec::new();
    let mut bad = |field: &str, expected: &str| {
        found.push(Violation::new(
            at(field),
            format!("must be {expected} ({})", flag_phrase(field)),
        ));
    };
    let mut o = HarborOptions::default();
    for (key, value) in map {
        // `null` is the key left out, as everywhere in a recipe.
        if value.is_null() {
            continue;
        }
        match key.as_str() {
            "environment" | "model" => match value.as_str() {
                Some(s) if key == "environment" => o.environment = Some(s.to_string()),
                Some(s) => o.model = Some(s.to_string()),
                None => bad(key, "a string"),
            },
            "environment_kwargs" | "agent_kwargs" => match kwargs(value) {
                Some(m) if key == "agent_kwargs" => o.agent_kwargs = m,
                Some(m) => o.environment_kwargs = m,
                None => bad(
                    key,
                    "a mapping of keys to strings, numbers or booleans (each passed as key=value)",
                ),
            },
            "n_concurrent" => match value.as_u64() {
                Some(n) if (1..=MAX_N_CONCURRENT).contains(&n) => o.n_concurrent = Some(n as u32),
                _ => bad(key, &format!("an integer from 1 to {MAX_N_CONCURRENT}")),
            },
            "max_retries" => match value.as_u64() {
                Some(n) if n <= u64::from(MAX_RETRIES) => o.max_retries = Some(n as u32),
                _ => bad(key, &format!("an integer from 0 to {MAX_RETRIES}")),
            },
            "timeout_multiplier"
            | "agent_setup_timeout_multiplier"
            | "environment_build_timeout_multiplier" => match value.as_f64() {
                Some(m) if m > 0.0 && m <= MAX_MULTIPLIER => {
                    let slot = match key.as_str() {
                        "timeout_multiplier" => &mut o.timeout_multiplier,
                        "agent_setup_timeout_multiplier" => &mut o.agent_setup_timeout_multiplier,
                        _ => &mut o.environment_build_timeout_multiplier,
                    };
                    *slot = Some(m);
                }
                _ => bad(
                    key,
                    &format!("a number greater than 0 and at most {MAX_MULTIPLIER}"),
                ),
            },
            "extra_args" => match value.as_array().and_then(|a| {
                a.iter()
                    .map(|v| v.as_str().map(String::from))
                    .collect::<Option<Vec<String>>>()
            }) {
                Some(args) => o.extra_args = args,
                None => bad(key, "a list of strings"),
            },
            _ => unknown.push(Violation::new(
                at(key),
                format!("unknown key; evaluator.harbor may hold: {}", allowed_keys()),
            )),
        }
    }
    found.extend(unknown);
    // What is well-typed is then checked as Harbor will take it; a field already
    // reported for its type is not reported twice.
    for p in o.problems() {
        let path = at(p.field);
        if !found.iter().any(|v| v.path == path) {
            found.push(Violation::new(
                path,
                format!("{} ({})", p.message, flag_phrase(p.field)),
            ));
        }
    }
    if found.is_empty() {
        Ok(o)
    } else {
        found.sort_by(|a, b| a.path.cmp(&b.path));
        Err(found)
    }
}

/// A kwarg mapping, each value as Harbor is given it after `key=`.
fn kwargs(value: &Value) -> Option<BTreeMap<String, String>> {
    value
        .as_object()?
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some((k.clone(), text))
        })
        .collect()
}

/// The block's cross-field rules, on the recipe as normalized or as written: its fields
/// ([`parse`]), that it is for the harbor engine, and that a cloud environment has a way
/// to reach the agent's model.
pub fn cross_checks(recipe: &Map<String, Value>, found: &mut Vec<Violation>) {
    let Some(evaluator) = recipe.get("evaluator").and_then(Value::as_object) else {
        return;
    };
    let Some(block) = evaluator.get("harbor").filter(|b| !b.is_null()) else {
        return;
    };
    let engine = evaluator
        .get("engine")
        .and_then(Value::as_str)
        .unwrap_or("local");
    if engine != "harbor" {
        found.push(Violation::new(
            "evaluator.harbor",
            "configures the harbor engine only; set evaluator.engine: harbor, or remove the block",
        ));
    }
    let options = match parse(block) {
        Ok(o) => o,
        Err(v) => {
            found.extend(v);
            return;
        }
    };
    if let Some(why) = model_reach_problem(&options, evaluator) {
        found.push(Violation::new(at("environment"), why));
    }
}

/// A cloud environment runs the agent where the host's model gateway cannot reach it:
/// with an `evaluator.model` (served through the gateway) it must name the host variables
/// that give the agent its model instead (`evaluator.agent_env`, passed with `--ae`).
fn model_reach_problem(options: &HarborOptions, evaluator: &Map<String, Value>) -> Option<String> {
    let has_model = evaluator.get("model").is_some_and(|m| !m.is_null());
    let has_env = evaluator
        .get("agent_env")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    (!options.is_local_docker() && has_model && !has_env).then(|| {
        "is a cloud environment, where the host's model gateway (evaluator.model) cannot reach the agent; name the host variables that give the agent its model (its key, its base URL) in evaluator.agent_env, passed with `harbor run --ae`".to_string()
    })
}

/// Whether `dataset` names a Harbor registry dataset rather than a directory: `NAME@VERSION`
/// (the legacy registry, no `/`) or `org/name@ref` (a package dataset), without spaces
/// and not an existing path (a directory named `x@1` stays a directory).
pub fn is_registry_name(dataset: &str, base: &Path) -> bool {
    let Some((name, version)) = dataset.rsplit_once('@') else {
        return false;
    };
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && !s.starts_with('.')
    };
    let name_ok = match name.split_once('/') {
        None => plain(name),
        Some((org, rest)) => plain(org) && plain(rest),
    };
    name_ok && plain(version) && !super::resolve(base, dataset).exists()
}

/// The environment variable naming a registry to resolve names from instead of Harbor's
/// default one: a `registry.json` path (`--registry-path`) or an http(s) URL
/// (`--registry-url`). For a mirror, or an offline machine with a local registry.
pub const REGISTRY_ENV: &str = "EVOLVE_HARBOR_REGISTRY";

/// The `harbor` CLI, found as the harbor engine finds it
/// ([`evaluator_harbor::engine::harbor::locate_cli`]).
pub fn harbor_bin() -> Option<PathBuf> {
    evaluator_harbor::engine::harbor::locate_cli().map(|(bin, _)| bin)
}

/// How to point the recipe at a local copy instead, for an error message.
fn local_copy_hint(name: &str) -> String {
    format!(
        "on a machine with network access run `harbor download {name} --export -o DIR`, copy DIR here, and set evaluator.dataset: DIR (or evolve init --tasks DIR)"
    )
}

/// Fetch the registry dataset `name` with `harbor download NAME --export -o DIR` into a
/// new directory under `into`, returning the directory that holds the exported layout.
/// Every failure names the dataset, quotes the last line harbor printed, and says how to
/// use a local copy instead.
pub fn download(name: &str, into: &Path) -> Result<PathBuf, String> {
    let fail = |why: String| format!("{why}; {}", local_copy_hint(name));
    let bin = harbor_bin().ok_or_else(|| {
        fail(format!(
            "cannot fetch the Harbor dataset `{name}`: the `harbor` CLI was not found (EVOLVE_HARBOR_BIN is unset and no `harbor` is on PATH)"
        ))
    })?;
    let out = into.join("download");
    let mut cmd = std::process::Command::new(&bin);
    cmd.arg("download")
        .arg(name)
        .arg("--export")
        .arg("-o")
        .arg(&out)
        .env("HARBOR_TELEMETRY", "0")
        .stdin(std::process::Stdio::null());
    if let Some(registry) = std::env::var_os(REGISTRY_ENV).filter(|r| !r.is_empty()) {
        let text = registry.to_string_lossy();
        let flag = if text.starts_with("http://") || text.starts_with("https://") {
            "--registry-url"
        } else {
            "--registry-path"
        };
        cmd.arg(flag).arg(&registry);
    }
    let ran = cmd.output().map_err(|e| {
        fail(format!(
            "cannot fetch the Harbor dataset `{name}`: cannot run {}: {e}",
            bin.display()
        ))
    })?;
    if !ran.status.success() {
        let said = last_line(&ran.stderr)
            .or_else(|| last_line(&ran.stdout))
            .unwrap_or_else(|| format!("it exited with {}", ran.status));
        return Err(fail(format!(
            "cannot fetch the Harbor dataset `{name}` with `harbor download` (is this machine offline?): {said}"
        )));
    }
    Ok(out)
}

/// The last line of a command's output that says something, without terminal escapes
/// and progress-bar glyphs (harbor's rich console draws both), from `Error:` on when it
/// says so, and bounded.
fn last_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let clean = strip_escapes(&text);
    let line = clean
        .split(['\n', '\r'])
        .map(str::trim)
        .rfind(|l| l.chars().any(char::is_alphanumeric))?;
    let line = line.find("Error:").map_or(line, |i| &line[i..]);
    let mut shown: String = line.chars().filter(|c| !c.is_control()).take(400).collect();
    if line.chars().count() > 400 {
        shown.push('…');
    }
    Some(shown)
}

/// `text` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn registry_names_are_told_from_directories() {
        let base = Path::new("/nonexistent-base");
        for name in ["terminal-bench@2.0", "org/name@ref", "a_b@1.2.3"] {
            assert!(is_registry_name(name, base), "{name}");
        }
        for name in ["tasks", "./x@1", "a/b/c@1", "@1", "x@", "x y@1", "/abs@1"] {
            assert!(!is_registry_name(name, base), "{name}");
        }
    }

    #[test]
    fn kwargs_are_stringified_and_nested_values_refused() {
        let o = parse(&json!({"agent_kwargs": {"a": 1, "b": true, "c": "x", "d": 0.5}})).unwrap();
        let got: Vec<_> = o.agent_kwargs.values().cloned().collect();
        assert_eq!(got, ["1", "true", "x", "0.5"]);
        let e = parse(&json!({"environment_kwargs": {"a": [1]}})).unwrap_err();
        assert_eq!(e[0].path, "evaluator.harbor.environment_kwargs");
        assert!(e[0].message.contains("--ek/--environment-kwarg"), "{:?}", e);
    }

    #[test]
    fn the_last_line_skips_escapes_and_progress() {
        let out = b"Downloading\n\x1b[2K\xe2\xa0\x8b 0/? Downloading tasks... \xe2\x94\x81 0:00:00  Error: Dataset 'x' not found\n\n";
        assert_eq!(last_line(out).unwrap(), "Error: Dataset 'x' not found");
        assert_eq!(last_line(b"  \n"), None);
    }
}
