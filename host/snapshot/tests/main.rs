//! evolve-snapshot's integration tests against real git repositories.
//!
//! One binary, so wasmtime and the host are linked once: a module per topic, and the
//! support modules shared by all of them, declared here once.

mod common;

mod first_commit;
mod hostile;
mod reconcile;
mod statcache;
mod store;
