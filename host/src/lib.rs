//! evolve: a WebAssembly-sandboxed framework for agent-evolution research.
//!
//! Operators are WebAssembly components run by [`sandbox`]; the library operators are
//! embedded in the binary ([`builtin`]). Text the evolved code chose is printed on a
//! terminal only through [`display`].

pub mod bench;
pub mod builtin;
pub mod cli;
pub mod command;
pub mod display;
pub mod layout;
pub mod lifecycle;
pub mod model;
pub mod recipe;
pub mod safe_tree;
pub mod samples;
pub mod sandbox;
pub mod scripts;
pub mod selftest;
pub mod viewer;
pub mod workspace;
