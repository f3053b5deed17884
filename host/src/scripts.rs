//! Script operators (`operator: script`, docs/scripts.md): the host reads the script a
//! binding names from the checkout the stage's component is loaded from, so the loading
//! rule of the stage is the script's too, and the component never opens the file. The
//! script's path and SHA-256 join the component's digest as the call's operator
//! identity, in the call's `result.json` and in the archive. The shipped scripts
//! (`config.builtin`) are here too.

use crate::sandbox::StageInput;
use crate::sandbox::types::ScriptSource;
use serde_json::{Map, Value, json};
use std::path::Path;

/// The binding name that makes a stage a script operator.
pub const SCRIPT_OPERATOR: &str = "script";
/// A script larger than this is refused (a script is source text a model edits).
pub const MAX_SCRIPT_BYTES: u64 = 1 << 20;

/// The script a binding of `operator` with `config` names, read from `checkout`; `None`
/// for a compiled operator.
pub fn read(
    operator: &str,
    config: &Map<String, Value>,
    checkout: &Path,
) -> Result<Option<ScriptSource>, String> {
    if operator != SCRIPT_OPERATOR {
        return Ok(None);
    }
    let path = config
        .get("source")
        .and_then(Value::as_str)
        .ok_or("a script operator needs config.source, the script's path under operators/")?;
    check_path(path)?;
    let bytes =
        read_plain_file(checkout, path).map_err(|e| format!("cannot read script {path}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("script {path} is not UTF-8 text"))?;
    Ok(Some(source(path, text)))
}

/// The script `text` at workspace path `path`, as a call receives it.
pub fn source(path: &str, text: String) -> ScriptSource {
    ScriptSource {
        path: path.to_string(),
        sha256: evolve_archive::sha256_hex(text.as_bytes()),
        text,
    }
}

/// The script a binding names, read from a file outside any workspace: `path` below
/// `base` (the recipe's directory for `recipe check`, where `evolve init` reads it too;
/// the current directory for `operator run`), at most [`MAX_SCRIPT_BYTES`], UTF-8.
pub fn from_file(base: &Path, path: &str) -> Result<ScriptSource, String> {
    check_path(path)?;
    let file = base.join(path);
    let shown = file.display();
    let meta = std::fs::metadata(&file).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a file"));
    }
    if meta.len() > MAX_SCRIPT_BYTES {
        return Err(format!(
            "{shown} has {} bytes, over the {MAX_SCRIPT_BYTES}-byte limit of a script",
            meta.len()
        ));
    }
    let bytes = std::fs::read(&file).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    Ok(source(path, text))
}

/// Whether a script operator's error says its script cannot run at all, whatever the
/// input: it does not compile, or does not define the stage's function. These are the
/// two messages of `evolve-script` that come before any of the script runs
/// (`script P line N: syntax error: …`, `script P: defines no function `f(…)`, …`).
pub fn is_script_defect(message: &str) -> bool {
    message.starts_with("script ")
        && (message.contains(": syntax error: ") || message.contains(": defines no function `"))
}

/// A workspace path under `operators/`, of plain segments, ending in `.rhai`.
pub fn check_path(path: &str) -> Result<(), String> {
    crate::sandbox::relative_path("script", path)?;
    if !path.starts_with("operators/") || !path.ends_with(".rhai") {
        return Err(format!(
            "script path `{path}` must be a .rhai file under operators/"
        ));
    }
    Ok(())
}

/// Read `rel` below `root` without following any symlink on the way (every segment is
/// checked), and only if it is a regular file of at most [`MAX_SCRIPT_BYTES`].
fn read_plain_file(root: &Path, rel: &str) -> Result<Vec<u8>, String> {
    let dir = cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority())
        .map_err(|e| format!("cannot open checkout {}: {e}", root.display()))?;
    let segments: Vec<&str> = rel.split('/').collect();
    for i in 1..segments.len() {
        let prefix = segments[..i].join("/");
        let meta = dir
            .symlink_metadata(&prefix)
            .map_err(|e| format!("{prefix}: {e}"))?;
        if !meta.is_dir() {
            return Err(format!(
                "{prefix} is not a directory (symlinks are not followed)"
            ));
        }
    }
    let meta = dir.symlink_metadata(rel).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file (symlinks are not followed)".into());
    }
    if meta.len() > MAX_SCRIPT_BYTES {
        return Err(format!(
            "{} bytes is over the {MAX_SCRIPT_BYTES}-byte limit",
            meta.len()
        ));
    }
    dir.read(rel).map_err(|e| e.to_string())
}

/// Hand the script to the call: every stage input's context carries it.
pub fn attach(input: &mut StageInput, script: Option<ScriptSource>) {
    if let Some(ctx) = input.ctx_mut() {
        ctx.script = script;
    }
}

/// The identity fields a call's `result.json` carries besides the component digest.
pub fn identity_fields(script: Option<&ScriptSource>, result: &mut Value) {
    if let (Some(s), Some(obj)) = (script, result.as_object_mut()) {
        obj.insert("script_path".into(), json!(s.path));
        obj.insert("script_sha256".into(), json!(s.sha256));
    }
}

/// The operator identity one call recorded in `stage_dir/result.json`:
/// `{component_sha256, script_path?, script_sha256?}` (`None` when it made no call).
/// The host wrote the file itself; operators cannot write outside `scratch/`.
pub fn recorded_identity(stage_dir: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(stage_dir.join("result.json")).ok()?;
    let result: Value = serde_json::from_str(&text).ok()?;
    let mut out = Map::new();
    for key in ["component_sha256", "script_path", "script_sha256"] {
        if let Some(v) = result.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// `{<stage>: identity}` for the stages of one child that ran in lifecycle order up to
/// and including `upto` (the stage that stopped it, or novelty for a committed child),
/// from its run directory. Stages after `upto` are left out: their directories can only
/// be an interrupted earlier attempt's.
pub fn recorded_identities(run_dir: &Path, upto: crate::sandbox::types::Stage) -> Value {
    let mut out = Map::new();
    for stage in crate::sandbox::ALL_STAGES {
        let name = crate::sandbox::stage_name(stage);
        if let Some(id) = recorded_identity(&run_dir.join(name)) {
            out.insert(name.into(), id);
        }
        if stage == upto {
            break;
        }
    }
    Value::Object(out)
}

/// Shipped operator scripts, `(stage, name, text)`: what `config.builtin` of an
/// `operator: script` binding names (docs/scripts.md).
const BUILTIN_SCRIPTS: &[(&str, &str, &str)] = &[
    (
        "select",
        "score_child_prop",
        include_str!("../../operators/select/script/scripts/score_child_prop.rhai"),
    ),
    (
        "validate",
        "minibatch_improvement",
        include_str!("../../operators/validate/script/scripts/minibatch_improvement.rhai"),
    ),
    (
        "novelty",
        "accept_all",
        include_str!("../../operators/novelty/script/scripts/accept_all.rhai"),
    ),
    (
        "gate",
        "hillclimb",
        include_str!("../../operators/gate/script/scripts/hillclimb.rhai"),
    ),
    (
        "gate",
        "parent_eligible",
        include_str!("../../operators/gate/script/scripts/parent_eligible.rhai"),
    ),
    (
        "record",
        "notes",
        include_str!("../../operators/record/script/scripts/notes.rhai"),
    ),
];

/// The text of a shipped script.
pub fn builtin(stage: &str, name: &str) -> Option<&'static str> {
    BUILTIN_SCRIPTS
        .iter()
        .find(|(s, n, _)| *s == stage && *n == name)
        .map(|(_, _, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_scripts_under_operators() {
        assert!(check_path("operators/select/policy.rhai").is_ok());
        for bad in [
            "target/x.rhai",
            "operators/../evaluator/x.rhai",
            "/operators/x.rhai",
            "operators/x.txt",
            "operators//x.rhai",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reads_only_plain_files_inside_the_checkout() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("operators/select")).unwrap();
        std::fs::write(
            root.join("operators/select/p.rhai"),
            "fn select(c, a) { [] }",
        )
        .unwrap();
        assert_eq!(
            read_plain_file(root, "operators/select/p.rhai").unwrap(),
            b"fn select(c, a) { [] }"
        );
        std::fs::create_dir_all(root.join("evaluator")).unwrap();
        std::fs::write(root.join("evaluator/secret.rhai"), "x").unwrap();
        std::os::unix::fs::symlink("../evaluator/secret.rhai", root.join("operators/link.rhai"))
            .unwrap();
        std::os::unix::fs::symlink("../evaluator", root.join("operators/dir")).unwrap();
        let e = read_plain_file(root, "operators/link.rhai").unwrap_err();
        assert!(e.contains("symlinks are not followed"), "{e}");
        let e = read_plain_file(root, "operators/dir/secret.rhai").unwrap_err();
        assert!(e.contains("operators/dir is not a directory"), "{e}");
        std::fs::write(
            root.join("operators/big.rhai"),
            vec![b' '; MAX_SCRIPT_BYTES as usize + 1],
        )
        .unwrap();
        assert!(
            read_plain_file(root, "operators/big.rhai")
                .unwrap_err()
                .contains("limit")
        );
    }
}
