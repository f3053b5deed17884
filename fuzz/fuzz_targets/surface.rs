//! `cargo fuzz run surface`: see docs/fuzzing.md.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| evolve_fuzz::surface::check(data));
