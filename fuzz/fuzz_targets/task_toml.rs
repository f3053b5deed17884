//! `cargo fuzz run task_toml`: see docs/fuzzing.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| evolve_fuzz::task_toml::check(data));
