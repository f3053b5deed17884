//! The framework-owned paths of an evolve workspace: what no recipe surface can open.
//!
//! One definition, read by both sides of the operator boundary: the host's surface
//! check (`evolve-snapshot`'s `Surface`, which decides what a child may change) and the
//! guest SDK's edit-block parser (`evolve-operator-sdk`'s `edits`, which refuses an
//! edit the host would refuse, before the model's answer is applied). Both depend on
//! this crate and neither on the other, so the layers stay one-way; each tests its
//! check against this list, so neither can keep a copy that drifts.
//!
//! `host/src/layout.rs` describes where each of these lives.

#![no_std]

/// Globs (`*` within a segment, `**` across segments) of the paths no include can
/// reach. An `X/**` also covers `X` itself in the host's check.
pub const IMPLICIT_EXCLUDES: &[&str] = &[
    "evaluator/**",
    "keys/**",
    "recipe.yaml",
    ".gitignore",
    ".evolve/**",
    "runs/**",
    "operators/manifest.json",
    ".git/**",
];
