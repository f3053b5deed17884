//! `cargo fuzz run config_schema`: see docs/fuzzing.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| evolve_fuzz::config_schema::check(data));
