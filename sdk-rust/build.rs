//! Embeds the WIT contract in the SDK's `__generate_world!` macro.
//!
//! Every stage world exports the shared `meta` interface, and wit-bindgen names its
//! export glue after the interface, so two worlds' glue cannot live in one crate. The
//! glue is therefore generated in the operator's own crate, by a macro that carries
//! the contract's text inline: the operator needs no path to `wit/` and always
//! builds against the exact contract this SDK was built with.

use std::fmt::Write as _;
use std::path::Path;

/// (stage, world, host capabilities the world imports)
const WORLDS: &[(&str, &str, &[&str])] = &[
    ("select", "select-operator", &[]),
    ("rollout", "rollout-operator", &["tasks"]),
    ("analyze", "analyze-operator", &["model"]),
    ("mutate", "mutate-operator", &["model", "tasks"]),
    ("validate", "validate-operator", &["tasks"]),
    ("novelty", "novelty-operator", &[]),
    ("gate", "gate-operator", &[]),
    ("record", "record-operator", &[]),
    ("reflect", "reflect-operator", &["model"]),
    ("driver", "driver-operator", &["model"]),
];

fn main() {
    let wit_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    println!("cargo::rerun-if-changed={}", wit_dir.display());
    let text = contract_text(&wit_dir);

    let mut out = String::from(
        "/// Generates the bindings and export glue of one stage world in the calling crate.\n\
         #[doc(hidden)]\n#[macro_export]\nmacro_rules! __generate_world {\n",
    );
    for (stage, world, imports) in WORLDS {
        let mut with =
            String::from("\"evolve:operator/types@0.1.0\": evolve_operator_sdk::types,\n");
        for import in *imports {
            writeln!(
                with,
                "\"evolve:operator/{import}@0.1.0\": evolve_operator_sdk::{import},"
            )
            .unwrap();
        }
        writeln!(
            out,
            "    ({stage}) => {{\n        $crate::__wit_bindgen::generate!({{\n            \
             world: \"{world}\",\n            inline: r####\"{text}\"####,\n            \
             runtime_path: \"evolve_operator_sdk::__wit_bindgen::rt\",\n            \
             with: {{ {with} }},\n        }});\n    }};"
        )
        .unwrap();
    }
    out.push_str("}\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("world_macros.rs");
    std::fs::write(dest, out).unwrap();
}

/// The package as one WIT document: the file declaring `package` first, then the rest,
/// in name order so the text is deterministic.
fn contract_text(dir: &Path) -> String {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("sdk-rust: cannot read ../wit")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wit"))
        .collect();
    files.sort();
    let mut texts: Vec<String> = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    texts.sort_by_key(|t| !t.lines().any(|l| l.starts_with("package ")));
    let joined = texts.join("\n");
    assert!(
        !joined.contains("\"####"),
        "wit text must not contain the raw-string delimiter"
    );
    joined
}
