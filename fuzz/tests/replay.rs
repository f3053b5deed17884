//! Every kept input (hand-written seeds and minimized crashes) through its target's
//! check, as an ordinary test: `cargo test` in `fuzz/` needs no nightly flags and no
//! libFuzzer. Each crash also has a unit test in the crate where it was fixed.

use std::path::Path;

#[test]
fn kept_inputs_pass_their_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut ran = 0;
    for (name, check) in evolve_fuzz::TARGETS {
        for kind in ["seeds", "regressions"] {
            let dir = root.join(kind).join(name);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.expect("readable directory entry").path();
                let data = std::fs::read(&path).expect("readable input");
                eprintln!("{}", path.display());
                check(&data);
                ran += 1;
            }
        }
    }
    assert!(ran > 0, "no kept inputs found under seeds/ or regressions/");
}

/// A clean archive from the real writer passes both readers in every mode (the raw mode
/// keeps its real receipts), so the target's invariants hold on valid input.
#[test]
fn a_real_archive_passes_in_every_mode() {
    for (name, data) in evolve_fuzz::archive::seeds().expect("an archive from the writer") {
        eprintln!("{name}");
        assert_eq!(evolve_fuzz::archive::audit(&data), Some(true), "{name}");
    }
}
