//! The table of `worlds.rs` against the two texts that restate it: the WIT contract
//! (`wit/operator.wit`, parsed with wit-parser as a guest's bindings generator would)
//! and the grant table of `docs/security.md`; and `Grants::for_stage` against both.

use super::*;
use crate::sandbox::{GrantRequest, Grants, stage_name};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

/// (guest path, writable), as a `Grants:` line or a doc table row states it.
type StatedGrants = Vec<(String, bool)>;

/// `read-only` / `read-write`, the words the WIT and the docs use.
fn access(text: &str) -> Result<bool, String> {
    match text.trim() {
        "read-only" => Ok(false),
        "read-write" => Ok(true),
        other => Err(format!("`{other}` is neither `read-only` nor `read-write`")),
    }
}

fn stated(world: &World) -> StatedGrants {
    world
        .grants
        .iter()
        .map(|g| (g.dir.guest().to_string(), g.writable))
        .collect()
}

/// `Grants::for_stage` for a call that has every optional directory, or none of them.
fn granted(stage: Stage, everything: bool) -> StatedGrants {
    let req = GrantRequest {
        checkout: Path::new("/w/c"),
        operators_in_surface: everything,
        scratch: Path::new("/w/s"),
        feedback: everything.then_some(Path::new("/w/fb")),
    };
    Grants::for_stage(stage, &req)
        .describe()
        .into_iter()
        .map(|(guest, _, writable)| (guest, writable))
        .collect()
}

/// The world's `Grants: `/a` read-only, `/b` read-write.` doc line.
fn wit_grants(world: &str, docs: Option<&str>) -> Result<StatedGrants, String> {
    let line = docs
        .unwrap_or("")
        .lines()
        .find_map(|l| l.trim().strip_prefix("Grants:"))
        .ok_or_else(|| format!("world {world} has no `Grants:` line in its doc comment"))?;
    let line = line
        .trim()
        .strip_suffix('.')
        .ok_or_else(|| format!("world {world}: the `Grants:` line must end with a full stop"))?;
    line.split(", ")
        .map(|item| {
            let (dir, how) = item
                .trim()
                .split_once(' ')
                .ok_or_else(|| format!("world {world}: `{item}` is not `/dir access`"))?;
            let dir = dir.trim_matches('`').to_string();
            Ok((dir, access(how).map_err(|e| format!("world {world}: {e}"))?))
        })
        .collect()
}

/// Interface names of one side of a world (imports or exports).
fn interface_names(
    resolve: &wit_parser::Resolve,
    items: &wit_parser::IndexMap<wit_parser::WorldKey, wit_parser::WorldItem>,
) -> BTreeSet<String> {
    items
        .keys()
        .map(|key| match key {
            wit_parser::WorldKey::Interface(id) => resolve.interfaces[*id]
                .name
                .clone()
                .unwrap_or_else(|| "<anonymous>".into()),
            wit_parser::WorldKey::Name(name) => name.clone(),
        })
        .collect()
}

#[test]
fn every_wit_world_imports_and_is_granted_what_the_table_says() {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve
        .push_dir(repo_file("wit"))
        .expect("wit/ parses as one WIT package");
    let declared: BTreeSet<&str> = resolve.packages[package]
        .worlds
        .keys()
        .map(String::as_str)
        .collect();
    let tabled: BTreeSet<&str> = WORLDS.iter().map(|w| w.wit_name).collect();
    assert_eq!(
        declared, tabled,
        "the worlds of wit/ and of WORLDS differ (host-view belongs in host/src/sandbox/host-view.wit)"
    );
    for row in &WORLDS {
        let id = resolve.packages[package].worlds[row.wit_name];
        let world = &resolve.worlds[id];
        // Elaboration adds `types`, which every stage interface uses: always allowed.
        let mut imports = interface_names(&resolve, &world.imports);
        imports.remove("types");
        let expected: BTreeSet<String> = row.imports.iter().map(|c| c.name().into()).collect();
        assert_eq!(imports, expected, "imports of world {}", row.wit_name);
        let exports = interface_names(&resolve, &world.exports);
        let expected: BTreeSet<String> = ["meta", stage_name(row.stage)].map(String::from).into();
        assert_eq!(exports, expected, "exports of world {}", row.wit_name);
        let from_wit = wit_grants(row.wit_name, world.docs.contents.as_deref()).unwrap();
        assert_eq!(from_wit, stated(row), "`Grants:` of world {}", row.wit_name);
        assert_eq!(
            granted(row.stage, true),
            from_wit,
            "Grants::for_stage({}) with every optional directory",
            stage_name(row.stage)
        );
        // Without them, exactly the conditional ones drop out.
        let unconditional: StatedGrants = from_wit
            .into_iter()
            .filter(|(dir, _)| dir != "/operators" && dir != "/feedback")
            .collect();
        assert_eq!(
            granted(row.stage, false),
            unconditional,
            "Grants::for_stage({}) without /operators or feedback",
            stage_name(row.stage)
        );
    }
}

/// One row of the per-world table in docs/security.md: the world's stage name, its
/// imports, and its directories.
fn doc_row(cells: &[&str]) -> Result<(String, BTreeSet<String>, StatedGrants), String> {
    let [world, imports, dirs @ ..] = cells else {
        return Err(format!("row {cells:?} has too few cells"));
    };
    let imports = match imports.trim() {
        "—" => BTreeSet::new(),
        list => list
            .split(',')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect(),
    };
    let mut grants = Vec::new();
    for (dir, cell) in ["/target", "/operators", "/scratch", "/feedback"]
        .iter()
        .zip(dirs)
    {
        if cell.trim() != "—" {
            grants.push((dir.to_string(), access(cell)?));
        }
    }
    Ok((world.trim().trim_matches('`').to_string(), imports, grants))
}

#[test]
fn the_grant_table_of_security_md_is_the_code_s() {
    let path = repo_file("docs/security.md");
    let text = std::fs::read_to_string(&path).expect("docs/security.md is readable");
    let header = "| world | imports | `/target` | `/operators` | `/scratch` | `/feedback` |";
    let start = text
        .lines()
        .position(|l| l.trim() == header)
        .unwrap_or_else(|| panic!("docs/security.md has no table headed {header}"));
    let rows: Vec<_> = text
        .lines()
        .skip(start + 2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim().trim_matches('|').split('|').collect();
            doc_row(&cells).unwrap_or_else(|e| panic!("docs/security.md: {e}"))
        })
        .collect();
    let expected: Vec<_> = WORLDS
        .iter()
        .map(|w| {
            let imports = w.imports.iter().map(|c| c.name().to_string()).collect();
            (stage_name(w.stage).to_string(), imports, stated(w))
        })
        .collect();
    let names = |rows: &[(String, _, _)]| rows.iter().map(|r| r.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&rows),
        names(&expected),
        "docs/security.md's grant table: its worlds"
    );
    for (doc, code) in rows.iter().zip(&expected) {
        assert_eq!(
            doc, code,
            "docs/security.md's grant table: the {} row",
            code.0
        );
    }
}

/// The guest SDK generates each world's bindings from its own list (its build script
/// cannot depend on the host): each row must be there, with the same imports, or an
/// operator of that world would get its own copies of the capability types.
#[test]
fn the_sdk_generates_each_world_with_the_table_s_imports() {
    let script = std::fs::read_to_string(repo_file("sdk-rust/build.rs"))
        .expect("sdk-rust/build.rs is readable");
    for row in &WORLDS {
        let imports: Vec<String> = row
            .imports
            .iter()
            .map(|c| format!("\"{}\"", c.name()))
            .collect();
        let entry = format!(
            "(\"{}\", \"{}\", &[{}])",
            stage_name(row.stage),
            row.wit_name,
            imports.join(", ")
        );
        assert!(
            script.contains(&entry),
            "sdk-rust/build.rs's WORLDS has no `{entry}`"
        );
    }
}

#[test]
fn capability_names_are_their_wit_interfaces() {
    for cap in Capability::ALL {
        assert_eq!(Capability::from_name(cap.name()), Some(cap));
    }
    assert_eq!(Capability::from_name("types"), None);
}
