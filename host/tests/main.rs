//! The host's (the `evolve` binary's) integration tests.
//!
//! One binary, so wasmtime and the host are linked once: a module per topic, and the
//! support modules shared by all of them, declared here once. Every test runs the binary
//! through `support/cmd.rs`, which reports a failed command with its command line,
//! directory, status, stdout and stderr.

#[path = "support/chat.rs"]
mod chat;
#[path = "support/cmd.rs"]
mod cmd;
#[path = "support/common.rs"]
mod common;
#[path = "support/upstream.rs"]
mod upstream;
#[path = "support/ws.rs"]
mod ws;

mod agent_model;
mod analyze_trajectories;
mod architecture;
mod cli_bench;
mod cli_operator;
mod cli_recipe;
mod cli_ux;
mod coder;
mod config_normalization;
mod driver;
mod gateway;
mod harbor_recipe;
mod integrity;
mod layers;
mod lifecycle;
mod model_http;
mod model_tools;
mod protocol;
mod recovery;
mod rrsi;
mod sandbox_escape;
mod sandbox_limits;
mod sandbox_loading;
mod scripts;
mod seed_demo;
mod seed_source;
mod seed_terminal;
mod selftest;
mod terminal_recipes;
mod third_party_agent;
mod viewer;
