//! Its own test binary: the umask is process-wide, so changing it must not
//! race with other tests creating files.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;
use rustix::fs::Mode;

fn mode(p: &std::path::Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn materialize_enforces_modes_regardless_of_umask() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    let dest = ws.path().join("runs/worktrees/gen-1");
    // A restrictive umask must not leak into the materialized modes.
    let old = rustix::process::umask(Mode::from_raw_mode(0o077));
    let r = store.materialize(c0, &dest);
    rustix::process::umask(old);
    r.unwrap();
    assert_eq!(mode(&dest.join("target/agent.py")), 0o644);
    assert_eq!(mode(&dest.join("target/bin/run.sh")), 0o755);
    assert_eq!(mode(&dest.join("target/bin")), 0o755);
}
