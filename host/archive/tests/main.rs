//! evolve-archive's integration tests: folding, integrity, keys and the run lock, the log.
//!
//! One binary, so wasmtime and the host are linked once: a module per topic, and the
//! support modules shared by all of them, declared here once.

mod common;

mod fold;
mod integrity;
mod keys_lock;
mod log;
