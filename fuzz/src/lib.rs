//! The checks behind each fuzz target, as plain functions so the same code runs under
//! libFuzzer (`fuzz_targets/*.rs`) and as ordinary tests over the kept inputs
//! (`tests/replay.rs`: every file under `seeds/<target>/` and `regressions/<target>/`).
//!
//! Each `check` must never panic on any input: a panic is either a bug in the code under
//! test or a broken invariant asserted here (each assertion says which).

pub mod archive;
pub mod config_schema;
#[cfg(feature = "host")]
pub mod recipe;
pub mod surface;
#[cfg(feature = "host")]
pub mod task_toml;

/// The targets, by name, for the replay test.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    #[cfg(feature = "host")]
    ("recipe", recipe::check),
    ("archive", archive::check),
    #[cfg(feature = "host")]
    ("task_toml", task_toml::check),
    ("surface", surface::check),
    ("config_schema", config_schema::check),
];
