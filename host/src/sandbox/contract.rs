//! Does a component fit the world of the stage it is bound to?
//!
//! Checked before anything of the component runs: it must be a component (not a core
//! module), export `meta` and the stage's interface of this contract version, and
//! import nothing but WASI, the contract's types and the capabilities the stage's world
//! grants (its row of `worlds.rs`). Every refusal names what is wrong in terms an
//! operator author can act on.

use super::bindings::types::Stage;
use super::worlds::{self, Capability, WORLDS};
use std::fmt;
use wasmtime::Engine;
use wasmtime::component::Component;

pub const PACKAGE: &str = "evolve:operator";
pub const VERSION: &str = "0.1.0";

/// Why a file cannot serve as a stage's operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContractError {
    NotWasm,
    CoreModule,
    Invalid(String),
    OtherVersion { found: String },
    WrongWorld { exported: Vec<String> },
    MissingExport(String),
    ForbiddenImport { import: String, stage: Stage },
    UnknownImport(String),
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContractError::NotWasm => write!(f, "is not a WebAssembly file (no `\\0asm` header)"),
            ContractError::CoreModule => write!(
                f,
                "is a core WebAssembly module, not a component; build it for the \
                 wasm32-wasip2 target (`evolve operator build`)"
            ),
            ContractError::Invalid(e) => write!(f, "is not a valid component: {e}"),
            ContractError::OtherVersion { found } => write!(
                f,
                "was built against contract {found}; this host speaks {PACKAGE}@{VERSION}"
            ),
            ContractError::WrongWorld { exported } if exported.is_empty() => write!(
                f,
                "exports no {PACKAGE} stage interface; export one with evolve_operator_sdk::export!"
            ),
            ContractError::WrongWorld { exported } => {
                write!(
                    f,
                    "exports the {} world, not this stage's",
                    exported.join(" and ")
                )
            }
            ContractError::MissingExport(name) => write!(f, "does not export `{name}`"),
            ContractError::ForbiddenImport { import, stage } => write!(
                f,
                "imports `{import}`, which the {} world does not grant",
                stage_name(*stage)
            ),
            ContractError::UnknownImport(name) => {
                write!(
                    f,
                    "imports `{name}`, which is neither WASI nor part of {PACKAGE}"
                )
            }
        }
    }
}

pub fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Select => "select",
        Stage::Rollout => "rollout",
        Stage::Analyze => "analyze",
        Stage::Mutate => "mutate",
        Stage::Validate => "validate",
        Stage::Novelty => "novelty",
        Stage::Gate => "gate",
        Stage::Record => "record",
        Stage::Reflect => "reflect",
        Stage::Driver => "driver",
    }
}

/// The lifecycle stages a recipe binds, in lifecycle order: every world but the driver.
pub const ALL_STAGES: [Stage; 9] = {
    let mut stages = [Stage::Select; 9];
    let mut i = 0;
    while i < stages.len() {
        stages[i] = ALL_WORLDS[i];
        i += 1;
    }
    stages
};

pub fn parse_stage(name: &str) -> Option<Stage> {
    ALL_STAGES.into_iter().find(|s| stage_name(*s) == name)
}

/// Every world a component may export, in the order of [`WORLDS`]: the lifecycle
/// stages plus, last (so that [`ALL_STAGES`] is its prefix), the agent driver, which no
/// recipe binds (`evolve run --driver`, docs/driver.md).
pub const ALL_WORLDS: [Stage; WORLDS.len()] = {
    let mut stages = [Stage::Select; WORLDS.len()];
    let mut i = 0;
    while i < stages.len() {
        stages[i] = WORLDS[i].stage;
        i += 1;
    }
    stages
};

const _: () = assert!(matches!(ALL_WORLDS[ALL_WORLDS.len() - 1], Stage::Driver));

/// A lifecycle stage or `driver`, by name (for author tooling).
pub fn parse_world(name: &str) -> Option<Stage> {
    ALL_WORLDS.into_iter().find(|s| stage_name(*s) == name)
}

/// Check the header before handing bytes to the compiler, so a core module gets the
/// helpful message rather than a parser error. Layout per the WebAssembly and
/// component-model binary formats: magic, then a 16-bit version and 16-bit layer
/// (layer 0 = core module, layer 1 = component).
pub fn check_header(bytes: &[u8]) -> Result<(), ContractError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(ContractError::NotWasm);
    }
    let layer = u16::from_le_bytes([bytes[6], bytes[7]]);
    if layer == 0 {
        return Err(ContractError::CoreModule);
    }
    Ok(())
}

fn interface(name: &str) -> String {
    format!("{PACKAGE}/{name}@{VERSION}")
}

/// Check a compiled component's exports and imports against `stage`'s world.
pub fn check_world(
    engine: &Engine,
    component: &Component,
    stage: Stage,
) -> Result<(), ContractError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    check_exports(&exports, stage)?;
    for (name, _) in ty.imports(engine) {
        check_import(name, stage)?;
    }
    Ok(())
}

/// The stages whose interface a component exports (normally exactly one).
pub fn exported_stages(engine: &Engine, component: &Component) -> Vec<Stage> {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    ALL_WORLDS
        .into_iter()
        .filter(|s| exports.contains(&interface(stage_name(*s))))
        .collect()
}

fn check_exports(exports: &[String], stage: Stage) -> Result<(), ContractError> {
    if let Some(other) = exports
        .iter()
        .find(|e| e.starts_with(&format!("{PACKAGE}/")) && !e.ends_with(&format!("@{VERSION}")))
    {
        let found = other.split('/').next().unwrap_or(PACKAGE).to_string()
            + other
                .rsplit_once('@')
                .map(|(_, v)| format!("@{v}"))
                .as_deref()
                .unwrap_or("");
        return Err(ContractError::OtherVersion { found });
    }
    let wanted = interface(stage_name(stage));
    if !exports.contains(&wanted) {
        let exported: Vec<String> = ALL_WORLDS
            .iter()
            .filter(|s| exports.contains(&interface(stage_name(**s))))
            .map(|s| format!("`{}`", stage_name(*s)))
            .collect();
        return Err(ContractError::WrongWorld { exported });
    }
    let meta = interface("meta");
    if !exports.contains(&meta) {
        return Err(ContractError::MissingExport(meta));
    }
    Ok(())
}

fn check_import(name: &str, stage: Stage) -> Result<(), ContractError> {
    if name.starts_with("wasi:") {
        return Ok(());
    }
    let Some(rest) = name.strip_prefix(&format!("{PACKAGE}/")) else {
        return Err(ContractError::UnknownImport(name.to_string()));
    };
    let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
    if version != VERSION {
        return Err(ContractError::OtherVersion {
            found: format!("{PACKAGE}@{version}"),
        });
    }
    if iface == "types" {
        return Ok(());
    }
    match Capability::from_name(iface) {
        Some(cap) if worlds::of(stage).imports.contains(&cap) => Ok(()),
        Some(_) => Err(ContractError::ForbiddenImport {
            import: name.to_string(),
            stage,
        }),
        None => Err(ContractError::UnknownImport(name.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_tells_core_modules_from_components() {
        assert_eq!(
            check_header(b"\0asm\x01\0\0\0"),
            Err(ContractError::CoreModule)
        );
        assert_eq!(check_header(b"\0asm\x0d\0\x01\0"), Ok(()));
        assert_eq!(check_header(b"#!/bin/sh\n"), Err(ContractError::NotWasm));
        assert_eq!(check_header(b""), Err(ContractError::NotWasm));
    }

    #[test]
    fn exports_must_match_the_bound_stage() {
        let ex = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mutate = ex(&["evolve:operator/meta@0.1.0", "evolve:operator/mutate@0.1.0"]);
        assert_eq!(check_exports(&mutate, Stage::Mutate), Ok(()));
        let err = check_exports(&mutate, Stage::Select).unwrap_err();
        assert_eq!(
            err.to_string(),
            "exports the `mutate` world, not this stage's"
        );
        let no_meta = ex(&["evolve:operator/select@0.1.0"]);
        assert_eq!(
            check_exports(&no_meta, Stage::Select),
            Err(ContractError::MissingExport(
                "evolve:operator/meta@0.1.0".into()
            ))
        );
        let newer = ex(&["evolve:operator/meta@0.2.0", "evolve:operator/select@0.2.0"]);
        assert_eq!(
            check_exports(&newer, Stage::Select)
                .unwrap_err()
                .to_string(),
            "was built against contract evolve:operator@0.2.0; this host speaks evolve:operator@0.1.0"
        );
    }

    #[test]
    fn imports_are_limited_to_the_world() {
        assert_eq!(check_import("wasi:cli/stdout@0.2.6", Stage::Select), Ok(()));
        assert_eq!(
            check_import("evolve:operator/types@0.1.0", Stage::Select),
            Ok(())
        );
        assert_eq!(
            check_import("evolve:operator/model@0.1.0", Stage::Mutate),
            Ok(())
        );
        assert_eq!(
            check_import("evolve:operator/model@0.1.0", Stage::Select)
                .unwrap_err()
                .to_string(),
            "imports `evolve:operator/model@0.1.0`, which the select world does not grant"
        );
        // Every capability of every world: allowed exactly when its row imports it.
        for world in &WORLDS {
            for cap in Capability::ALL {
                let name = format!("{PACKAGE}/{}@{VERSION}", cap.name());
                let verdict = check_import(&name, world.stage);
                if world.imports.contains(&cap) {
                    assert_eq!(verdict, Ok(()), "{name} for {}", world.wit_name);
                } else {
                    assert!(
                        matches!(verdict, Err(ContractError::ForbiddenImport { .. })),
                        "{name} for {}: {verdict:?}",
                        world.wit_name
                    );
                }
            }
        }
        assert_eq!(
            check_import("evil:net/raw@1.0.0", Stage::Gate)
                .unwrap_err()
                .to_string(),
            "imports `evil:net/raw@1.0.0`, which is neither WASI nor part of evolve:operator"
        );
    }
}
