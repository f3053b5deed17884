//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use evolve_snapshot::{Change, ChangeKind, EntryKind, Limits, Oid, Snapshot, Store};

/// What the lifecycle driver skips at the top level.
pub fn skip(name: &str) -> bool {
    matches!(name, ".git" | ".evolve" | "runs")
}

pub fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(&p, content).unwrap();
}

pub fn chmod(root: &Path, rel: &str, mode: u32) {
    fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).unwrap();
}

pub fn link(root: &Path, rel: &str, target: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    symlink(target, p).unwrap();
}

pub fn change(path: &str, kind: ChangeKind, entry: EntryKind) -> Change {
    Change {
        path: path.into(),
        kind,
        entry,
    }
}

pub fn snap(store: &Store, dir: &Path, parent: Option<Oid>) -> Snapshot {
    store
        .snapshot(dir, parent, &Limits::default(), &skip)
        .unwrap()
}

/// A small workspace-like tree: target with a script, a link and a
/// symlinked directory, the evaluator, the recipe, framework state.
pub fn seed(root: &Path) {
    write(root, "target/agent.py", "print('hi')\n");
    write(root, "target/bin/run.sh", "#!/bin/sh\necho run\n");
    chmod(root, "target/bin/run.sh", 0o755);
    link(root, "target/current", "agent.py");
    link(root, "target/tools", "bin");
    fs::create_dir_all(root.join("target/empty")).unwrap();
    write(root, "evaluator/tests/test.sh", "#!/bin/sh\nexit 0\n");
    write(root, "recipe.yaml", "name: demo\n");
    write(root, ".gitignore", ".evolve/\nruns/\n");
    write(root, ".evolve/state.json", "{}");
    write(root, "runs/gen-1/log", "x");
}

/// A fresh store in `ws` holding `seed` as its first commit (on HEAD).
pub fn seeded_store(ws: &Path) -> (Store, Oid) {
    let store = Store::init(ws).unwrap();
    seed(ws);
    let s = snap(&store, ws, None);
    let c = store.commit(s.tree, None, "gen 0", true).unwrap();
    (store, c)
}

/// Whether `dir`'s filesystem is one where `materialize` keeps records
/// (ext2/3/4, XFS, Btrfs); elsewhere (tmpfs) every file is read and only
/// the equality checks below mean anything.
pub fn records_kept(dir: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        let fs = rustix::fs::statfs(dir).unwrap();
        #[allow(clippy::unnecessary_cast)]
        let magic = (fs.f_type as u64) & 0xFFFF_FFFF;
        matches!(magic, 0xEF53 | 0x5846_5342 | 0x9123_683E)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        false
    }
}
