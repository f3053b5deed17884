//! The crate's modules form layers that depend one way only:
//! `canonical → {keys, lock} → event → body → chain → fold → eligibility → {verify, log}`.
//! A module may name (`crate::m::…`) only modules of lower layers; modules of one layer do not
//! name each other. This test reads `src/*.rs` and fails on any other reference, so that an
//! import loop cannot come back.

use std::collections::BTreeMap;
use std::path::Path;

/// The layers, lowest first. Test-only modules sit on top.
const LAYERS: &[&[&str]] = &[
    &["canonical"],
    &["keys", "lock"],
    &["event"],
    &["body"],
    &["chain"],
    &["fold"],
    &["eligibility"],
    &["verify", "log"],
    &["readers_tests", "layers"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// Every module a file's code names, as `crate::m` or `super::m` (comment lines left out:
/// doc links are not dependencies), with the line where it first does.
fn references(text: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for prefix in ["crate::", "super::"] {
            for (at, _) in line.match_indices(prefix) {
                let rest = &line[at + prefix.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                // `super::*` (a file's own tests) and a string that only names the prefix.
                if !name.is_empty() {
                    out.entry(name).or_insert(n + 1);
                }
            }
        }
    }
    out
}

fn modules() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_string();
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            Some((name, text))
        })
        .filter(|(name, _)| name != "lib")
        .collect();
    files.sort();
    files
}

#[test]
fn every_module_has_a_layer() {
    let files = modules();
    for (name, _) in &files {
        assert!(
            layer_of(name).is_some(),
            "src/{name}.rs is in no layer: add it to LAYERS in src/layers.rs"
        );
    }
    for module in LAYERS.iter().flat_map(|l| l.iter()) {
        assert!(
            files.iter().any(|(n, _)| n == module),
            "LAYERS names {module}, which has no src/{module}.rs"
        );
    }
}

#[test]
fn modules_name_only_lower_layers() {
    let mut wrong = Vec::new();
    for (name, text) in modules() {
        let Some(own) = layer_of(&name) else { continue };
        for (target, line) in references(&text) {
            if target == name {
                continue;
            }
            match layer_of(&target) {
                Some(l) if l < own => {}
                Some(_) => wrong.push(format!(
                    "src/{name}.rs:{line} names `{target}`, which is not in a lower layer"
                )),
                None => wrong.push(format!(
                    "src/{name}.rs:{line} names `crate::{target}` (a re-export of the crate root): name its module instead"
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_check_sees_a_loop() {
    // What the test reads: a reference upwards, one in a comment (ignored), one through the
    // crate root.
    // (Split so that this file's own scan does not see them.)
    let text = concat!(
        "use crate",
        "::log::Archive;\n",
        "/// [`x`](crate",
        "::verify)\n",
        "let _ = crate",
        "::Row;"
    );
    let refs = references(text);
    assert_eq!(refs.get("log"), Some(&1));
    assert!(!refs.contains_key("verify"));
    assert_eq!(refs.get("Row"), Some(&3));
    assert!(layer_of("log") > layer_of("fold"));
    assert_eq!(layer_of("verify"), layer_of("log"));
}
