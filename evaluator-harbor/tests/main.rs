//! evaluator-harbor's integration tests: the engines against real processes, Docker and the harbor CLI.
//!
//! One binary, so wasmtime and the host are linked once: a module per topic, and the
//! support modules shared by all of them, declared here once.

mod common;

mod docker;
mod harbor;
mod harbor_agents;
mod local;
mod model_gateway;
mod protocol;
mod splits;
mod wasi;
