//! The operator library, embedded in the binary by `build.rs`.

/// A library operator's component.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedOperator {
    pub stage: &'static str,
    pub name: &'static str,
    pub bytes: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/embedded_operators.rs"));

/// Find a library operator by `stage/name`.
pub fn find(stage: &str, name: &str) -> Option<&'static EmbeddedOperator> {
    EMBEDDED
        .iter()
        .find(|op| op.stage == stage && op.name == name)
}

/// Directory of the test components built alongside the library (for tests and benchmarks).
pub const TEST_COMPONENTS_DIR: &str = env!("EVOLVE_TEST_COMPONENTS_DIR");
