//! Host-side bindings, generated from the host-only `host-view` world
//! (`host-view.wit`, next to this file): the union of every stage world of `wit/`, so
//! all stages share one set of Rust types. A component is never instantiated as
//! `host-view`; the sandbox looks up only the bound stage's interfaces in it (see
//! `invoke` in `mod.rs`), after `contract.rs` has checked exports and imports.

wasmtime::component::bindgen!({
    world: "evolve:host/host-view",
    path: ["../wit", "src/sandbox/host-view.wit"],
    imports: { default: async },
    exports: { default: async },
});

pub use self::evolve::operator::types;
pub use self::evolve::operator::{model, tasks};
pub use self::exports::evolve::operator as stage;
