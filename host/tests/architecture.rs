//! docs/ARCHITECTURE.md stays true: every module of `host/src` is listed, none is longer
//! than its line budget, and every repository path that the docs and the code's comments
//! name exists.

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, relative to `base`, `/`-separated.
pub fn rust_files(dir: &Path, base: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, base, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let rel = path.strip_prefix(base).unwrap();
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// One row of the module table: `| `path` | layer | budget | role |`.
pub struct Row {
    pub module: String,
    pub layer: String,
    pub budget: usize,
}

/// docs/ARCHITECTURE.md's table of the host's modules.
pub fn module_rows() -> Vec<Row> {
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap();
    rows_of(&doc)
}

fn rows_of(doc: &str) -> Vec<Row> {
    let table = doc
        .split("## The host's modules")
        .nth(1)
        .expect("ARCHITECTURE.md has a section \"The host's modules\"");
    table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let module = cells[0].trim_matches('`').to_string();
            let budget = cells[2]
                .parse()
                .unwrap_or_else(|_| panic!("row {module}: budget {:?} is not a number", cells[2]));
            Row {
                module,
                layer: cells[1].to_string(),
                budget,
            }
        })
        .collect()
}

#[test]
fn every_host_module_is_listed_within_its_line_budget() {
    let rows = module_rows();
    let src = repo().join("host/src");
    let mut modules = Vec::new();
    rust_files(&src, &src, &mut modules);
    let listed: Vec<&str> = rows.iter().map(|r| r.module.as_str()).collect();
    let unlisted: Vec<&String> = modules
        .iter()
        .filter(|m| !listed.contains(&m.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "modules missing from docs/ARCHITECTURE.md: {unlisted:?}"
    );
    let mut problems = Vec::new();
    for Row { module, budget, .. } in &rows {
        match std::fs::read_to_string(src.join(module)) {
            Err(_) => problems.push(format!("{module}: listed, but there is no such file")),
            Ok(text) if text.lines().count() > *budget => problems.push(format!(
                "{module}: {} lines, over its budget of {budget}: split it, or raise the budget with the reason",
                text.lines().count()
            )),
            Ok(_) => {}
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The repository paths `text` names: a word starting with one of the repository's
/// top directories, as far as path characters go. A pattern (`sandbox_*.rs`) or a
/// placeholder (`gen-<id>`) is not a path and is skipped.
fn named_paths(text: &str) -> Vec<String> {
    const ROOTS: [&str; 9] = [
        "host/src/",
        "host/archive/",
        "host/snapshot/",
        "host/tests/",
        "evaluator-harbor/",
        "sdk-rust/",
        "tests/components/",
        "recipes/",
        "wit/",
    ];
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut found = Vec::new();
    for root in ROOTS {
        for (at, _) in text.match_indices(root) {
            if text[..at].chars().next_back().is_some_and(is_path_char) {
                continue; // inside a longer path: `fuzz/seeds/recipe`
            }
            let rest = &text[at..];
            let end = rest.find(|c: char| !is_path_char(c)).unwrap_or(rest.len());
            if rest[end..].starts_with(['*', '<', '{']) {
                continue;
            }
            let path = rest[..end].trim_end_matches(['.', '-', '/']);
            found.push(path.to_string());
        }
    }
    found
}

#[test]
fn every_repository_path_the_docs_and_comments_name_exists() {
    let root = repo();
    let mut sources: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    sources.push(root.join("README.md"));
    for crate_dir in ["host", "evaluator-harbor", "sdk-rust"] {
        let mut files = Vec::new();
        rust_files(&root.join(crate_dir), &root, &mut files);
        sources.extend(
            files
                .into_iter()
                .filter(|f| !f.contains("/target/"))
                .map(|f| root.join(f)),
        );
    }
    let mut missing = Vec::new();
    for source in &sources {
        let text = std::fs::read_to_string(source).unwrap();
        // In code, only comments name paths for a reader.
        let named: String = if source.extension().is_some_and(|x| x == "rs") {
            text.lines()
                .filter(|l| l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            text
        };
        for path in named_paths(&named) {
            if !root.join(&path).exists() {
                let rel = source.strip_prefix(&root).unwrap_or(source);
                missing.push(format!("{}: {path}", rel.display()));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "named but missing: {missing:#?}");
}
