//! # The evolve operator SDK
//!
//! Write an operator for one lifecycle stage in one small file: implement [`Operator`]
//! (name, one-line summary, configuration schema) and the stage's trait, then export it
//! with [`export!`]. Build it with `evolve operator build PATH` (or
//! `cargo build --target wasm32-wasip2 --profile operator`): the result is a
//! WebAssembly component exporting the stage's world from `wit/`.
//!
//! ```ignore
//! use evolve_operator_sdk::prelude::*;
//!
//! struct Greedy;
//!
//! impl Operator for Greedy {
//!     const NAME: &'static str = "greedy";
//!     const SUMMARY: &'static str = "Pick the eligible generation with the highest score.";
//! }
//!
//! impl Select for Greedy {
//!     fn select(_ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
//!         let best = archive.rows.iter().filter(|r| r.eligible)
//!             .fold(None::<&ArchiveRow>, |best, r| match best {
//!                 Some(b) if b.score >= r.score => Some(b),
//!                 _ => Some(r),
//!             });
//!         best.map(|r| vec![r.generation_id.clone()]).ok_or("no eligible parent".into())
//!     }
//! }
//!
//! evolve_operator_sdk::export!(select: Greedy);
//! ```
//!
//! What the host guarantees and checks is documented in `wit/` and `docs/security.md`.
//! Operators run with no network, empty environment and arguments, a memory cap, and a
//! deadline; a panic becomes a trap whose message the host reports.

mod context;
pub mod conversation;
pub mod edits;
mod export;
pub mod feedback;
mod helpers;
pub mod rrsi;
pub mod sampling;
pub mod trajectories;
mod generated {
    // The contract's shared types and host capabilities, generated once here so that
    // every stage world (generated in the operator's crate) uses the same Rust types.
    // `pub_export_macro` makes wit-bindgen strip the exports from this crate's
    // embedded world, so linking the SDK adds no export to a component.
    wit_bindgen::generate!({
        world: "mutate-operator",
        path: "../wit",
        pub_export_macro: true,
        default_bindings_module: "evolve_operator_sdk::generated",
        export_macro_name: "__unused_export",
    });
}

pub use context::{Context, Rng, Script};
pub use evolve_config_schema as config;
pub use generated::evolve::operator::{model, tasks, types};
pub use helpers::{parent_candidates, status_name, testing};
pub use serde_json;

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

include!(concat!(env!("OUT_DIR"), "/world_macros.rs"));

#[doc(hidden)]
pub mod __private {
    pub use crate::export::*;
}

/// Everything an operator file usually needs.
pub mod prelude {
    pub use crate::config::{self, Schema, SchemaBuilder, Violation};
    pub use crate::types::*;
    pub use crate::{
        Analyze, Context, Driver, Gate, GateInput, Mutate, Novelty, Operator, Record, Reflect, Rng,
        Rollout, Select, Validate, parent_candidates, status_name,
    };
    pub use serde_json::{Map, Value, json};
}

use serde_json::{Map, Value};
use types::*;

/// What every operator declares, whatever its stage.
pub trait Operator {
    /// Short name, `[a-z0-9_]+`; with the stage it names the operator (`select/greedy`).
    const NAME: &'static str;
    /// One line for `evolve operator list`.
    const SUMMARY: &'static str;

    /// The configuration schema. The default accepts only `{}`.
    fn config() -> config::SchemaBuilder {
        config::Schema::new()
    }
}

/// Choose parents: a non-empty list of eligible generation ids.
pub trait Select: Operator {
    fn select(ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String>;
}

/// Gather evidence about the parent before mutation.
pub trait Rollout: Operator {
    fn rollout(ctx: &Context, parent: &ArchiveRow) -> Result<Evidence, String>;
}

/// Condense rollout evidence for mutate.
pub trait Analyze: Operator {
    fn analyze(ctx: &Context, rollout: &Evidence) -> Result<Evidence, String>;
}

/// Edit the candidate under `/target` (and `/operators` when the surface allows it).
pub trait Mutate: Operator {
    fn mutate(ctx: &Context, observation: &Observation) -> Result<Proposal, String>;
}

/// Accept or reject the mutated, uncommitted candidate.
pub trait Validate: Operator {
    /// `rollout`: this generation's rollout evidence (the parent's run), when there is one.
    fn validate(
        ctx: &Context,
        changed: &[String],
        rollout: Option<&Evidence>,
    ) -> Result<Validation, String>;
}

/// Judge whether the candidate's change is new enough to evaluate.
pub trait Novelty: Operator {
    fn assess(ctx: &Context, diff: &CandidateDiff) -> Result<NoveltyVerdict, String>;
}

/// What a gate sees besides the child and its parent.
pub struct GateInput<'a> {
    /// The certified archive as select sees it (the child's row included, pending gate).
    pub archive: &'a ArchiveView,
    /// The child's change against its parent, when the host could rebuild it.
    pub diff: Option<&'a CandidateDiff>,
}

/// Decide whether an evaluated child may become a parent.
pub trait Gate: Operator {
    fn decide(
        ctx: &Context,
        child: &ArchiveRow,
        parent: Option<&ArchiveRow>,
        input: &GateInput,
    ) -> Result<GateDecision, String>;
}

/// Annotate a decided child. `diff`: its change against its parent, when the host
/// could rebuild it.
pub trait Record: Operator {
    fn annotate(
        ctx: &Context,
        child: &ArchiveRow,
        diff: Option<&CandidateDiff>,
    ) -> Result<Map<String, Value>, String>;
}

/// Append to the playbook.
pub trait Reflect: Operator {
    fn reflect(
        ctx: &Context,
        archive: &ArchiveView,
        playbook: &[PlaybookEntry],
    ) -> Result<Vec<PlaybookOp>, String>;
}

/// Revise the recipe between generations (`evolve run --driver`; not a lifecycle stage).
/// The host checks every revision: only `operators` bindings may change.
pub trait Driver: Operator {
    /// `Ok(None)` keeps the active recipe.
    fn revise(ctx: &Context, feedback: &DriverFeedback) -> Result<Option<Revision>, String>;
}
