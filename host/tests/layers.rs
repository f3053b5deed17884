//! The host's modules import one way. Each module of `host/src` has a layer in
//! docs/ARCHITECTURE.md's table; a module may name (`crate::…`, `super::…`) only modules
//! of its own layer or lower ones, and the modules that name each other never form a loop.
//! A loop is looked for between siblings: `cli::bundle → cli::verify → cli::bundle` is
//! one, while a module naming its own parent or children is not (a `mod.rs` and its files
//! are one unit). This reads the source text, so a loop cannot come back unnoticed.

use super::architecture::{module_rows, repo, rust_files};
use std::collections::{BTreeMap, BTreeSet};

/// The layers, lowest first.
const LAYERS: &[&str] = &[
    "base",
    "sandbox",
    "inputs",
    "recipe",
    "model",
    "workspace",
    "lifecycle",
    "commands",
    "cli",
];

/// A module's path (`cli::verify`) from its file (`cli/verify.rs`, `cli/mod.rs` → `cli`).
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs").trim_end_matches("/mod");
    stem.split('/').map(str::to_string).collect()
}

/// The file's code as it counts: comment lines and the `#[cfg(test)]` module at its end
/// left out (doc links are no dependency; a test may reach anywhere).
fn code_of(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].starts_with("mod tests"))
        .unwrap_or(lines.len());
    lines[..end]
        .iter()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(n, l)| (n + 1, *l))
        .collect()
}

/// The paths a use tree names: `a::{b, c::d}` → `a::b`, `a::c::d`.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![segments(tree)];
    };
    let prefix = segments(&tree[..open]);
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| {
            expand(p).into_iter().map(|rest| {
                let mut path = prefix.clone();
                path.extend(rest);
                path
            })
        })
        .collect()
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
        .filter(|s| !s.is_empty() && s != "self" && s != "*")
        .collect()
}

/// Every `crate::…` and `super::…` path on a line, with its braces expanded. The path runs
/// as far as path characters and balanced braces go.
fn paths_on(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for prefix in ["crate::", "super::"] {
        for (at, _) in line.match_indices(prefix) {
            if line[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            {
                continue; // `super::super::x` is read from its first `super`
            }
            let rest = &line[at..];
            let mut depth = 0i32;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth < 0
                        || (depth == 0 && !(c.is_ascii_alphanumeric() || "_:{}*".contains(c)))
                        || (depth > 0 && !(c.is_ascii_alphanumeric() || "_:{}*, ".contains(c)))
                })
                .map_or(rest.len(), |(i, _)| i);
            out.extend(expand(&rest[..end]));
        }
    }
    out
}

/// The module a path names from module `own`: the longest prefix that is a module.
fn resolve(
    own: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut full: Vec<String> = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("super") => {
            full = own.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                full.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    full.extend(rest.iter().cloned());
    (1..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|m| modules.contains(m))
}

struct Reference {
    from: Vec<String>,
    to: Vec<String>,
    at: String,
}

fn references() -> (BTreeMap<Vec<String>, String>, Vec<Reference>) {
    let src = repo().join("host/src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    files.retain(|f| f != "lib.rs" && f != "main.rs");
    let layer_of_file: BTreeMap<String, String> = module_rows()
        .into_iter()
        .map(|r| (r.module, r.layer))
        .collect();
    let mut layers = BTreeMap::new();
    for f in &files {
        let layer = layer_of_file
            .get(f)
            .unwrap_or_else(|| panic!("host/src/{f} has no row in docs/ARCHITECTURE.md"));
        assert!(
            LAYERS.contains(&layer.as_str()),
            "docs/ARCHITECTURE.md gives host/src/{f} the layer {layer:?}, which is none of {LAYERS:?}"
        );
        layers.insert(module_of(f), layer.clone());
    }
    let modules: BTreeSet<Vec<String>> = layers.keys().cloned().collect();
    let mut refs = Vec::new();
    for f in &files {
        let own = module_of(f);
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        for (n, line) in code_of(&text) {
            for path in paths_on(line) {
                let Some(to) = resolve(&own, &path, &modules) else {
                    continue;
                };
                // Oneself, one's parent and one's children are one unit.
                if to.starts_with(&own) || own.starts_with(&to) {
                    continue;
                }
                refs.push(Reference {
                    from: own.clone(),
                    to,
                    at: format!("host/src/{f}:{n}"),
                });
            }
        }
    }
    (layers, refs)
}

fn rank(layer: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| *l == layer)
        .unwrap_or(usize::MAX)
}

#[test]
fn modules_name_only_their_own_layer_or_lower() {
    let (layers, refs) = references();
    let mut wrong: Vec<String> = refs
        .iter()
        .filter(|r| rank(&layers[&r.to]) > rank(&layers[&r.from]))
        .map(|r| {
            format!(
                "{}: {} ({}) names {} ({}), a higher layer",
                r.at,
                r.from.join("::"),
                layers[&r.from],
                r.to.join("::"),
                layers[&r.to]
            )
        })
        .collect();
    wrong.sort();
    wrong.dedup();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The two siblings under the modules' common parent that `from → to` connects.
fn siblings(from: &[String], to: &[String]) -> (Vec<String>, Vec<String>) {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    (from[..=common].to_vec(), to[..=common].to_vec())
}

#[test]
fn no_modules_name_each_other_in_a_loop() {
    let (_, refs) = references();
    let mut edges: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    for r in &refs {
        let (a, b) = siblings(&r.from, &r.to);
        edges.entry(a).or_default().entry(b).or_insert(r.at.clone());
    }
    let loops = find_loops(&edges);
    let shown: Vec<String> = loops
        .iter()
        .map(|cycle| {
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    format!(
                        "{} → {} ({})",
                        w[0].join("::"),
                        w[1].join("::"),
                        edges[&w[0]][&w[1]]
                    )
                })
                .collect();
            steps.join("\n  ")
        })
        .collect();
    assert!(
        shown.is_empty(),
        "import loops:\n  {}",
        shown.join("\n\n  ")
    );
}

/// One cycle (first node repeated at the end) through each loop of `edges`.
fn find_loops<N: Ord + Clone>(edges: &BTreeMap<N, BTreeMap<N, String>>) -> Vec<Vec<N>> {
    let mut loops = Vec::new();
    let mut done = BTreeSet::new();
    for start in edges.keys() {
        if done.contains(start) {
            continue;
        }
        // Depth-first from `start`, looking for a way back to it.
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        let mut seen = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in edges.get(&node).into_iter().flat_map(|m| m.keys()) {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(start.clone());
                    done.extend(cycle.iter().cloned());
                    loops.push(cycle);
                    stack.clear();
                    break;
                }
                if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    loops
}

#[test]
fn the_reader_sees_every_kind_of_reference() {
    let modules: BTreeSet<Vec<String>> = [
        "cli",
        "cli::verify",
        "cli::bundle",
        "workspace",
        "workspace::evidence",
    ]
    .iter()
    .map(|m| m.split("::").map(str::to_string).collect())
    .collect();
    let own: Vec<String> = vec!["cli".into(), "verify".into()];
    let line = concat!(
        "use super::{bundle::Opened, CliResult}; let e = crate",
        "::workspace::evidence::Evidence::of(x);"
    );
    let resolved: Vec<String> = paths_on(line)
        .iter()
        .filter_map(|p| resolve(&own, p, &modules))
        .map(|m| m.join("::"))
        .collect();
    assert_eq!(resolved, ["workspace::evidence", "cli::bundle", "cli"]);
    let text = "use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\n  use crate::c;\n}\n";
    let counted: Vec<usize> = code_of(text).iter().map(|(n, _)| *n).collect();
    assert_eq!(counted, [1]);
    let mut edges = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges
            .entry(a)
            .or_insert_with(BTreeMap::new)
            .insert(b, String::new());
    }
    assert_eq!(find_loops(&edges), vec![vec!["a", "b", "c", "a"]]);
}
