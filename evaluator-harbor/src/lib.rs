//! Framework-owned evaluation for evolve: the Harbor task format, deterministic splits and
//! digests, results and scoring, and the `local`, `docker` and `harbor` engines.
//!
//! The lifecycle calls [`engine::run_evaluation`] with an [`engine::EvaluationPlan`] (usually
//! built by [`engine::EvaluationPlan::for_split`] from a [`split::FrozenTaskSet`]) and an
//! [`engine::Engine`]. See docs/evaluation.md.

pub mod agent;
pub mod beneath;
pub mod cli;
pub mod digest;
pub mod engine;
pub mod error;
pub mod gateway;
pub mod result;
pub mod signals;
pub mod split;
pub mod task;
pub mod trajectory;

pub use error::{Error, ErrorKind, Result};
