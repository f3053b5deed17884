//! `evolve operator new` and the cargo invocation behind `evolve operator build`.

use crate::command::CliError;
use crate::sandbox::parse_world;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// This repository's root, as compiled in. Used to find the SDK for scaffolds and the
/// operator crates for `evolve operator build` without arguments.
fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn is_repository(dir: &Path) -> bool {
    dir.join("sdk-rust").is_dir() && dir.join("operators").is_dir() && dir.join("wit").is_dir()
}

pub fn new_operator(
    stage_text: &str,
    name: &str,
    dir: Option<PathBuf>,
    json_out: bool,
) -> Result<ExitCode, CliError> {
    parse_world(stage_text).ok_or_else(|| {
        CliError::usage(format!("unknown stage `{stage_text}`")).hint(
            "stages: select, rollout, analyze, mutate, validate, novelty, gate, record, reflect (and driver)",
        )
    })?;
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !valid_name {
        return Err(CliError::usage(format!(
            "operator name `{name}` must be 1-64 characters of [a-z0-9_]"
        )));
    }
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::usage(format!("no current directory: {e}")))?;
    let in_repo = is_repository(&cwd);
    let dir = dir.unwrap_or_else(|| {
        if in_repo {
            cwd.join("operators").join(stage_text).join(name)
        } else {
            cwd.join(name)
        }
    });
    if dir.exists() {
        return Err(
            CliError::usage("the directory already exists; nothing was written")
                .at(dir.display().to_string())
                .hint("choose another name or --dir"),
        );
    }
    let inside_workspace = in_repo && dir.starts_with(cwd.join("operators"));
    let manifest = manifest(stage_text, name, inside_workspace);
    let source = template(stage_text, name);
    let write = |path: PathBuf, text: String| {
        std::fs::write(&path, text).map_err(|e| {
            CliError::usage(format!("cannot write: {e}")).at(path.display().to_string())
        })
    };
    std::fs::create_dir_all(dir.join("src")).map_err(|e| {
        CliError::usage(format!("cannot create: {e}")).at(dir.display().to_string())
    })?;
    write(dir.join("Cargo.toml"), manifest)?;
    write(dir.join("src/lib.rs"), source)?;
    if json_out {
        crate::command::print_json(&serde_json::json!({
            "created": dir, "files": ["Cargo.toml", "src/lib.rs"],
            "next": [
                format!("cargo test --manifest-path {}/Cargo.toml", dir.display()),
                format!("evolve operator build {}", dir.display()),
            ],
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("created {}", dir.display());
    println!("next:");
    println!("  cargo test --manifest-path {}/Cargo.toml", dir.display());
    println!("  evolve operator build {}", dir.display());
    Ok(ExitCode::SUCCESS)
}

fn manifest(stage: &str, name: &str, inside_workspace: bool) -> String {
    let package = format!("op-{stage}-{}", name.replace('_', "-"));
    if inside_workspace {
        return format!(
            "[package]\nname = \"{package}\"\nversion.workspace = true\nedition.workspace = true\n\
             rust-version.workspace = true\nlicense.workspace = true\npublish = false\n\n\
             [lib]\ncrate-type = [\"cdylib\", \"rlib\"]\n\n\
             [dependencies]\nevolve-operator-sdk.workspace = true\n"
        );
    }
    let sdk = source_root().join("sdk-rust");
    format!(
        "[package]\nname = \"{package}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n\
         [lib]\ncrate-type = [\"cdylib\", \"rlib\"]\n\n\
         [dependencies]\nevolve-operator-sdk = {{ path = {sdk:?} }}\n\n\
         # A standalone crate, not part of any enclosing workspace.\n[workspace]\n\n\
         [profile.release]\nopt-level = \"s\"\nstrip = true\n",
        sdk = sdk.display().to_string()
    )
}

fn template(stage: &str, name: &str) -> String {
    let ty: String = name
        .split('_')
        .filter(|s| !s.is_empty())
        .map(|s| s[..1].to_uppercase() + &s[1..])
        .collect::<String>();
    let ty = if ty.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        format!("Op{ty}")
    } else {
        ty
    };
    let (trait_name, body, test) = stage_body(stage);
    format!(
        "//! {stage}/{name}: TODO one line on what this operator does.\n\n\
         use evolve_operator_sdk::prelude::*;\n\n\
         pub struct {ty};\n\n\
         impl Operator for {ty} {{\n    const NAME: &'static str = \"{name}\";\n    \
         const SUMMARY: &'static str = \"TODO: one line for `evolve operator list`.\";\n\n    \
         fn config() -> SchemaBuilder {{\n        // Declare every configuration field; unknown keys are rejected.\n        \
         Schema::new().field(\"seed\", config::integer().default(json!(0)).description(\"Unused example field\"))\n    }}\n}}\n\n\
         impl {trait_name} for {ty} {{\n{body}}}\n\n\
         evolve_operator_sdk::export!({stage}: {ty});\n\n\
         #[cfg(test)]\nmod tests {{\n    use super::*;\n\n    #[test]\n    fn answers_the_sample() {{\n        \
         let ctx = Context::for_test(json!({{\"seed\": 0}}));\n{test}    }}\n}}\n",
        test = test.replace("TYPE", &ty)
    )
}

/// (trait, method body, test body) for each stage's template.
fn stage_body(stage: &str) -> (&'static str, &'static str, &'static str) {
    match stage {
        "select" => (
            "Select",
            "    fn select(_ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {\n        \
             // Return eligible generation ids only.\n        \
             let first = *parent_candidates(archive).first().ok_or(\"no eligible parent\")?;\n        \
             Ok(vec![first.generation_id.clone()])\n    }\n",
            "        let view = ArchiveView { rows: vec![], champion: None };\n        \
             assert!(TYPE::select(&ctx, &view).is_err());\n",
        ),
        "rollout" => (
            "Rollout",
            "    fn rollout(_ctx: &Context, parent: &ArchiveRow) -> Result<Evidence, String> {\n        \
             let summary = json!({\"parent\": parent.generation_id, \"score\": parent.score});\n        \
             Ok(Evidence { summary: summary.to_string(), artifacts: vec![] })\n    }\n",
            "        let _ = &ctx;\n",
        ),
        "analyze" => (
            "Analyze",
            "    fn analyze(_ctx: &Context, rollout: &Evidence) -> Result<Evidence, String> {\n        \
             Ok(Evidence { summary: rollout.summary.clone(), artifacts: vec![] })\n    }\n",
            "        let ev = Evidence { summary: \"{}\".into(), artifacts: vec![] };\n        \
             assert_eq!(TYPE::analyze(&ctx, &ev).unwrap().summary, \"{}\");\n",
        ),
        "mutate" => (
            "Mutate",
            "    fn mutate(_ctx: &Context, _observation: &Observation) -> Result<Proposal, String> {\n        \
             // Edit files under /target here (the host diffs the tree itself).\n        \
             Ok(Proposal { changed: vec![], notes: vec![\"no change yet\".into()], usage: Usage { input_tokens: 0, output_tokens: 0, usd: 0.0 } })\n    }\n",
            "        let _ = &ctx;\n",
        ),
        "validate" => (
            "Validate",
            "    fn validate(_ctx: &Context, changed: &[String], _rollout: Option<&Evidence>) -> Result<Validation, String> {\n        \
             Ok(Validation { accept: !changed.is_empty(), reason: format!(\"{} paths changed\", changed.len()), artifacts: vec![] })\n    }\n",
            "        assert!(!TYPE::validate(&ctx, &[], None).unwrap().accept);\n",
        ),
        "novelty" => (
            "Novelty",
            "    fn assess(_ctx: &Context, diff: &CandidateDiff) -> Result<NoveltyVerdict, String> {\n        \
             let novel = !diff.recent_accepted.contains(&diff.patch);\n        \
             Ok(NoveltyVerdict { novelty: if novel { 1.0 } else { 0.0 }, accept: novel })\n    }\n",
            "        let d = CandidateDiff { changed_paths: vec![], patch: \"x\".into(), recent_accepted: vec![\"x\".into()] };\n        \
             assert!(!TYPE::assess(&ctx, &d).unwrap().accept);\n",
        ),
        "gate" => (
            "Gate",
            "    fn decide(_ctx: &Context, child: &ArchiveRow, parent: Option<&ArchiveRow>, _input: &GateInput) -> Result<GateDecision, String> {\n        \
             let keep = match (child.score, parent.and_then(|p| p.score)) {\n            \
             (Some(c), Some(p)) => c >= p,\n            (Some(_), None) => true,\n            _ => false,\n        };\n        \
             let verdict = if keep { Verdict::Keep } else { Verdict::Discard };\n        \
             Ok(GateDecision { verdict, reason: \"child score against parent score\".into() })\n    }\n",
            "        let _ = &ctx;\n",
        ),
        "record" => (
            "Record",
            "    fn annotate(_ctx: &Context, child: &ArchiveRow, _diff: Option<&CandidateDiff>) -> Result<Map<String, Value>, String> {\n        \
             let mut notes = Map::new();\n        \
             notes.insert(\"note\".into(), json!(format!(\"generation {}\", child.generation_id)));\n        \
             Ok(notes)\n    }\n",
            "        let _ = &ctx;\n",
        ),
        "driver" => (
            "Driver",
            "    fn revise(_ctx: &Context, feedback: &DriverFeedback) -> Result<Option<Revision>, String> {\n        \
             // Called before each generation after the first (`evolve run --driver`): return a\n        \
             // revision of `operators` (docs/driver.md) to rebind stages, or None to keep the recipe.\n        \
             if feedback.champion.is_some() {\n            return Ok(None);\n        }\n        \
             let recipe = json!({\"operators\": {\"select\": {\"operator\": \"greedy\"}}});\n        \
             Ok(Some(Revision { recipe: recipe.to_string(), reason: \"no champion yet: select greedily\".into() }))\n    }\n",
            "        let feedback = DriverFeedback { generation: 1, generations: vec![], champion: Some(\"0\".into()), active_bindings: \"{}\".into(), active_recipe_sha256: String::new() };\n        \
             assert!(TYPE::revise(&ctx, &feedback).unwrap().is_none());\n",
        ),
        _ => (
            "Reflect",
            "    fn reflect(_ctx: &Context, _archive: &ArchiveView, _playbook: &[PlaybookEntry]) -> Result<Vec<PlaybookOp>, String> {\n        \
             Ok(vec![])\n    }\n",
            "        let view = ArchiveView { rows: vec![], champion: None };\n        \
             assert!(TYPE::reflect(&ctx, &view, &[]).unwrap().is_empty());\n",
        ),
    }
}

/// The operator crates of this repository, for `evolve operator build` without a path.
pub fn repository_operator_manifests() -> Result<Vec<PathBuf>, CliError> {
    let root = source_root();
    let mut out = Vec::new();
    let stages = std::fs::read_dir(root.join("operators")).map_err(|e| {
        CliError::usage(format!("cannot list operators: {e}")).at(root.display().to_string())
    })?;
    for stage in stages.flatten() {
        for op in std::fs::read_dir(stage.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let manifest = op.path().join("Cargo.toml");
            if manifest.is_file() {
                out.push(manifest);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Build one crate for wasm32-wasip2 and return the component file cargo reports.
pub fn cargo_build_component(manifest: &Path) -> Result<PathBuf, CliError> {
    if !manifest.is_file() {
        return Err(CliError::usage("no Cargo.toml here").at(manifest.display().to_string()));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .arg("--manifest-path")
        .arg(manifest)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| CliError::usage(format!("cannot run cargo: {e}")))?;
    if !output.status.success() {
        return Err(CliError {
            code: 1,
            ..CliError::usage("the build failed (errors above)")
        }
        .at(manifest.display().to_string())
        .hint("if the target is missing: rustup target add wasm32-wasip2"));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let wanted = std::fs::canonicalize(manifest).unwrap_or_else(|_| manifest.to_path_buf());
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let is_ours =
            msg["manifest_path"].as_str().map(PathBuf::from).as_deref() == Some(wanted.as_path());
        if msg["reason"] == "compiler-artifact" && is_ours {
            let wasm = msg["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"));
            if let Some(w) = wasm {
                return Ok(PathBuf::from(w));
            }
        }
    }
    Err(CliError {
        code: 1,
        ..CliError::usage("cargo built no .wasm component")
    }
    .at(manifest.display().to_string())
    .hint("the crate needs `[lib] crate-type = [\"cdylib\"]`"))
}
