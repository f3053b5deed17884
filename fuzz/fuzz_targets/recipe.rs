//! `cargo fuzz run recipe`: see docs/fuzzing.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| evolve_fuzz::recipe::check(data));
