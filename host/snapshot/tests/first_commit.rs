//! `Store::commit_first`: a first commit written from memory as one pack, checked
//! against what libgit2 and the git command line make of the same files.

use crate::common;
use std::borrow::Cow;
use std::path::Path;
use std::process::Command;

use common::*;
use evolve_snapshot::{Error, NewFile, Store};

fn file(path: &str, executable: bool, bytes: impl Into<Vec<u8>>) -> NewFile<'static> {
    NewFile {
        path: path.into(),
        executable,
        bytes: Cow::Owned(bytes.into()),
        id: None,
    }
}

/// Files whose names exercise git's tree order (a directory sorts as if its name
/// ended in '/': `a.b` < `a/` < `a0`), duplicate contents, an empty file, an
/// executable, and blobs at and past a stored deflate block's 65,535 bytes and past
/// the entry header's first size bytes.
fn sample() -> Vec<NewFile<'static>> {
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    vec![
        file("a.b", false, "dot\n"),
        file("a/x.txt", false, "in a\n"),
        file("a0", false, "zero\n"),
        file("a-b/deep/er/file.txt", false, "deep\n"),
        file("same1.txt", false, "same\n"),
        file("same2.txt", false, "same\n"),
        file("empty", false, ""),
        file("bin/run.sh", true, "#!/bin/sh\necho run\n"),
        file("big.bin", false, big),
        file("mid.bin", false, vec![0u8; 70_000]),
        file("block.bin", false, vec![1u8; 0xffff]),
        file("block1.bin", false, vec![2u8; 0x10000]),
    ]
}

fn write_all(root: &Path, files: &[NewFile<'_>]) {
    use std::os::unix::fs::PermissionsExt;
    for f in files {
        let p = root.join(&f.path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &f.bytes).unwrap();
        let mode = if f.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("the git command line (tests compare against it)");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn pack_files(ws: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(ws.join(".git/objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn the_tree_is_the_one_a_snapshot_of_the_same_files_makes() {
    let files = sample();
    let on_disk = tempfile::tempdir().unwrap();
    write_all(on_disk.path(), &files);
    let loose = Store::init(on_disk.path()).unwrap();
    let expected = snap(&loose, on_disk.path(), None).tree;

    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    let (tree, commit) = store.commit_first(&files, "gen 0").unwrap();
    assert_eq!(tree, expected);
    assert_eq!(
        store.head().unwrap(),
        Some(commit),
        "HEAD's branch names it"
    );
    assert_eq!(store.tree_of(commit).unwrap(), tree);
    assert!(
        std::fs::read_dir(ws.path()).unwrap().count() == 1,
        "nothing but .git is written in the workspace"
    );
    // Every blob reads back through a fresh store, modes included.
    let out = ws.path().join("out");
    Store::open(ws.path())
        .unwrap()
        .materialize(commit, &out)
        .unwrap();
    for f in &files {
        assert_eq!(
            std::fs::read(out.join(&f.path)).unwrap(),
            f.bytes.as_ref(),
            "{}",
            f.path
        );
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(out.join("bin/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
}

#[test]
fn blob_ids_the_caller_knows_are_taken_and_give_the_same_tree() {
    let other = tempfile::tempdir().unwrap();
    let hashed = Store::init(other.path()).unwrap();
    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    let mut files = sample();
    let (expected, _) = hashed.commit_first(&files, "gen 0").unwrap();
    for f in files.iter_mut().filter(|f| f.bytes.len() > 1000) {
        f.id = Some(git2::Oid::hash_object(git2::ObjectType::Blob, &f.bytes).unwrap());
    }
    let (tree, _) = store.commit_first(&files, "gen 0").unwrap();
    assert_eq!(tree, expected);
    git(ws.path(), &["fsck", "--full", "--strict"]);
}

#[test]
fn git_itself_verifies_the_pack_and_its_index() {
    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    let (tree, _) = store.commit_first(&sample(), "gen 0").unwrap();
    let names = pack_files(ws.path());
    assert_eq!(names.len(), 4, "two packs and their indexes: {names:?}");
    // 12 files with one duplicate content: 11 blobs; trees: root, a, a-b, deep, er, bin;
    // the commit. The three blobs of 64 KiB or more (big, mid, block1: 65,536 bytes;
    // block: 65,535 is under) are in a pack of their own. verify-pack lists each object
    // on a line that starts with its id.
    let mut counts = Vec::new();
    for idx in names.iter().filter(|n| n.ends_with(".idx")) {
        let idx = ws.path().join(".git/objects/pack").join(idx);
        let verified = git(ws.path(), &["verify-pack", "-v", idx.to_str().unwrap()]);
        let objects = verified
            .lines()
            .filter(|l| l.split(' ').next().is_some_and(|id| id.len() == 40))
            .count();
        assert!(
            verified.contains(&format!("non delta: {objects} objects")),
            "{verified}"
        );
        counts.push(objects);
    }
    counts.sort();
    assert_eq!(counts, [3, 15], "blobs of 64 KiB or more, then the rest");
    git(ws.path(), &["fsck", "--full", "--strict"]);
    assert_eq!(
        git(ws.path(), &["rev-parse", "HEAD^{tree}"]).trim(),
        tree.to_string()
    );
    assert_eq!(
        git(ws.path(), &["show", "HEAD:a-b/deep/er/file.txt"]),
        "deep\n"
    );
}

#[test]
fn a_prepared_first_commit_knows_every_id_before_anything_is_written() {
    let files = sample();
    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    let first = Store::prepare_first(&files, "gen 0").unwrap();
    assert!(pack_files(ws.path()).is_empty(), "preparing writes nothing");
    assert_eq!(store.head().unwrap(), None);
    let (tree, commit) = (first.tree(), first.commit());
    let (a, run) = (first.entry("a").unwrap(), first.entry("a.b").unwrap());
    assert_eq!(first.entry("nothing"), None);
    store.write_first(&first).unwrap();
    assert_eq!(store.head().unwrap(), Some(commit));
    let fresh = Store::open(ws.path()).unwrap();
    assert_eq!(fresh.tree_of(commit).unwrap(), tree);
    assert_eq!(fresh.subtree(commit, "a").unwrap(), Some(a));
    assert_eq!(
        git(ws.path(), &["rev-parse", "HEAD:a.b"]).trim(),
        run.to_string()
    );
    // The commit is in git's own format: git reads its author, subject and tree back.
    assert_eq!(
        git(ws.path(), &["log", "-1", "--format=%an <%ae>|%cn|%s|%T"]).trim(),
        format!("evolve <evolve@localhost>|evolve|gen 0|{tree}")
    );
    git(ws.path(), &["fsck", "--full", "--strict"]);
}

#[test]
fn later_writes_land_beside_the_pack() {
    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    let (_, c0) = store.commit_first(&sample(), "gen 0").unwrap();
    let wt = ws.path().join("runs/wt");
    store.materialize(c0, &wt).unwrap();
    write(&wt, "a/x.txt", "changed\n");
    let child = snap(&store, &wt, Some(c0));
    let c1 = store.commit(child.tree, Some(c0), "gen 1", false).unwrap();
    let fresh = Store::open(ws.path()).unwrap();
    assert_eq!(fresh.diff(c0, c1).unwrap().len(), 1);
    git(ws.path(), &["fsck", "--full", "--strict"]);
}

#[test]
fn bad_paths_are_refused_before_anything_is_written() {
    let cases: Vec<(Vec<NewFile<'static>>, &str)> = vec![
        (
            vec![file("a", false, "1"), file("a", false, "2")],
            "given twice",
        ),
        (
            vec![file("a", false, "1"), file("a/b", false, "2")],
            "given twice",
        ),
        (
            vec![file("a/b", false, "1"), file("a", false, "2")],
            "given twice",
        ),
        (vec![file("x/.GIT/config", false, "")], ".GIT"),
        (vec![file("../out", false, "")], "relative"),
        (vec![file("a//b", false, "")], "relative"),
        (vec![file("/abs", false, "")], "relative"),
        (vec![file("", false, "")], "relative"),
    ];
    for (files, says) in cases {
        let ws = tempfile::tempdir().unwrap();
        let store = Store::init(ws.path()).unwrap();
        let err = store.commit_first(&files, "gen 0").unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
        assert!(
            matches!(
                err,
                Error::PathConflict(_) | Error::UnsafeName { .. } | Error::InvalidPath(_)
            ),
            "{err:?}"
        );
        assert!(
            pack_files(ws.path()).is_empty(),
            "{:?}",
            pack_files(ws.path())
        );
        assert_eq!(store.head().unwrap(), None);
    }
}
