//! Host-side bindings, generated from the `host-view` world: the union of every stage
//! world, so all stages share one set of Rust types. A component is never instantiated
//! as `host-view`; the sandbox looks up only the bound stage's interfaces in it (see
//! `invoke.rs`), after `contract.rs` has checked exports and imports.

wasmtime::component::bindgen!({
    world: "host-view",
    path: "../wit",
    imports: { default: async },
    exports: { default: async },
});

pub use self::evolve::operator::types;
pub use self::evolve::operator::{model, tasks};
pub use self::exports::evolve::operator as stage;
