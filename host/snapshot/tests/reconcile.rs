//! `Store::reconcile` must leave a directory exactly as `materialize` would
//! write the commit into an empty one, whatever was done to it before: the
//! oracle is a byte-for-byte listing of a fresh checkout (every name, kind,
//! permission, content and link target, empty directories included).

use crate::common;
use std::collections::BTreeMap;
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use common::*;
use evolve_snapshot::{Error, Oid, Store};
use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, utimensat};

/// Every path under `root` with what a reader of the checkout can observe.
fn listing(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let rel = rel.join(e.file_name());
            let p = root.join(&rel);
            let m = fs::symlink_metadata(&p).unwrap();
            let perm = m.permissions().mode() & 0o7777;
            let what = if m.file_type().is_symlink() {
                format!("link -> {}", fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                todo.push(rel.clone());
                format!("dir {perm:o}")
            } else if m.is_file() {
                format!(
                    "file {perm:o} nlink {} {:?}",
                    m.nlink(),
                    String::from_utf8_lossy(&fs::read(&p).unwrap())
                )
            } else {
                format!("special {:o}", m.mode())
            };
            out.insert(rel.to_string_lossy().into_owned(), what);
        }
    }
    out
}

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    store: Store,
    /// Regular files in gen 0.
    files: u64,
    /// gen 0 and a child with one file edited, one added, one removed, a
    /// mode flipped and a directory replaced by a file.
    c0: Oid,
    c1: Oid,
}

/// Files in the small fixture's target and in the large one's.
const SMALL: usize = 60;
const LARGE: usize = 300;

/// Both fixtures: every test runs on each.
fn fixtures() -> [Fixture; 2] {
    [fixture(SMALL), fixture(LARGE)]
}

fn fixture(n: usize) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().to_path_buf();
    let store = Store::init(&ws).unwrap();
    for i in 0..n {
        write(
            &ws,
            &format!("target/d{}/s{}/f{i:03}.txt", i % 4, i % 3),
            &format!("file {i:03}\n"),
        );
    }
    write(&ws, "target/run.sh", "#!/bin/sh\necho run\n");
    chmod(&ws, "target/run.sh", 0o755);
    link(&ws, "target/current", "d0/s0/f000.txt");
    write(&ws, "target/gone/x.txt", "x\n");
    write(&ws, "evaluator/tests/test.sh", "#!/bin/sh\nexit 0\n");
    let c0 = store
        .commit(snap(&store, &ws, None).tree, None, "gen 0", true)
        .unwrap();
    let wt = ws.join("runs/child");
    store.materialize(c0, &wt).unwrap();
    write(&wt, "target/d0/s0/f000.txt", "edited\n");
    write(&wt, "target/new/deep/n.txt", "new\n");
    fs::remove_file(wt.join("target/d1/s1/f001.txt")).unwrap();
    chmod(&wt, "target/run.sh", 0o644);
    fs::remove_dir_all(wt.join("target/gone")).unwrap();
    write(&wt, "target/gone", "now a file\n");
    let c1 = store
        .commit(snap(&store, &wt, Some(c0)).tree, Some(c0), "gen 1", false)
        .unwrap();
    fs::remove_dir_all(&wt).unwrap();
    Fixture {
        _tmp: tmp,
        ws,
        store,
        // Plus run.sh, gone/x.txt and the evaluator's test.sh.
        files: n as u64 + 3,
        c0,
        c1,
    }
}

/// A fresh checkout of `commit`, listed: what reconcile must produce.
fn expected(f: &Fixture, commit: Oid) -> BTreeMap<String, String> {
    let dir = f.ws.join(format!("runs/fresh-{commit}"));
    if !dir.exists() {
        Store::open(&f.ws)
            .unwrap()
            .materialize(commit, &dir)
            .unwrap();
    }
    listing(&dir)
}

/// Materialize `from` into a directory, let `edit` do its worst, reconcile
/// to `to` and compare with a fresh checkout; then a snapshot with a fresh
/// store must give `to`'s tree, and the store's new records must agree with
/// reading everything.
fn check(f: &Fixture, name: &str, from: Oid, to: Oid, edit: impl FnOnce(&Path)) -> u64 {
    let dir = f.ws.join("runs").join(name);
    f.store.materialize(from, &dir).unwrap();
    edit(&dir);
    let done = f.store.reconcile(to, &dir).unwrap();
    assert_eq!(listing(&dir), expected(f, to), "{name}");
    let tree = f.store.tree_of(to).unwrap();
    let fresh = Store::open(&f.ws).unwrap();
    assert_eq!(snap(&fresh, &dir, Some(to)).tree, tree, "{name}");
    let with_records = snap(&f.store, &dir, Some(to));
    assert_eq!(with_records.tree, tree, "{name}");
    assert!(with_records.changes.is_empty(), "{name}");
    done.kept
}

#[test]
fn an_untouched_directory_keeps_every_file_and_switches_commits_cheaply() {
    for f in fixtures() {
        let kept = check(&f, "same", f.c0, f.c0, |_| {});
        let files = f.files;
        if records_kept(&f.ws) {
            assert_eq!(kept, files, "every regular file is reused");
        }
        // Only the root is listed (the fence touched it after its record was
        // taken); every other directory's names are vouched for by its record.
        let dir = f.ws.join("runs/unlisted");
        f.store.materialize(f.c0, &dir).unwrap();
        let done = f.store.reconcile(f.c0, &dir).unwrap();
        if records_kept(&f.ws) {
            assert_eq!(done.listed, 1, "{done:?}");
        }
        // A name planted in a directory changes its lstat: that one is listed
        // and the name removed (the other removal is the symlink, always
        // rewritten).
        write(&dir, "target/d2/s2/planted.txt", "planted\n");
        let done = f.store.reconcile(f.c0, &dir).unwrap();
        assert_eq!(listing(&dir), expected(&f, f.c0));
        if records_kept(&f.ws) {
            assert_eq!((done.listed, done.removed), (2, 2), "{done:?}");
        }
        // To the child: only what differs is written.
        let dir = f.ws.join("runs/switch");
        f.store.materialize(f.c0, &dir).unwrap();
        let done = f.store.reconcile(f.c1, &dir).unwrap();
        assert_eq!(listing(&dir), expected(&f, f.c1));
        if records_kept(&f.ws) {
            // f000 edited, run.sh's mode, f001 gone, gone/x.txt gone.
            assert_eq!(done.kept, files - 4, "{done:?}");
            assert!(done.written <= 6, "{done:?}");
        }
        // And back.
        f.store.reconcile(f.c0, &dir).unwrap();
        assert_eq!(listing(&dir), expected(&f, f.c0));
    }
}

/// Set `path`'s atime and mtime (not following a symlink) to `from`'s.
fn restore_times(path: &Path, from: &fs::Metadata) {
    let ts = |s, ns| Timespec {
        tv_sec: s,
        tv_nsec: ns,
    };
    let times = Timestamps {
        last_access: ts(from.atime(), from.atime_nsec()),
        last_modification: ts(from.mtime(), from.mtime_nsec()),
    };
    utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

#[test]
fn a_same_size_rewrite_with_restored_mtime_is_undone() {
    for f in fixtures() {
        check(&f, "rewrite", f.c0, f.c0, |d| {
            let p = d.join("target/d2/s2/f002.txt");
            let meta = fs::symlink_metadata(&p).unwrap();
            let mut file = fs::OpenOptions::new().write(true).open(&p).unwrap();
            file.seek(SeekFrom::Start(0)).unwrap();
            file.write_all(b"FILE 002\n").unwrap();
            drop(file);
            restore_times(&p, &meta);
        });
    }
}

#[test]
fn links_planted_for_files_and_directories_are_removed_not_followed() {
    for f in fixtures() {
        let outside = f.ws.join("outside");
        write(&outside, "secret.txt", "secret\n");
        write(&outside, "d/keep.txt", "keep\n");
        let before = listing(&outside);
        check(&f, "links", f.c0, f.c1, |d| {
            // A file and a whole directory of the tree swapped for links out.
            fs::remove_file(d.join("target/d3/s0/f003.txt")).unwrap();
            symlink(outside.join("secret.txt"), d.join("target/d3/s0/f003.txt")).unwrap();
            fs::remove_dir_all(d.join("target/d1")).unwrap();
            symlink(outside.join("d"), d.join("target/d1")).unwrap();
            // A name the tree does not hold, linking out.
            symlink(&outside, d.join("target/escape")).unwrap();
        });
        assert_eq!(listing(&outside), before, "nothing outside was touched");
    }
}

#[test]
fn hard_links_are_broken_and_the_other_name_is_left_alone() {
    for f in fixtures() {
        let outside = f.ws.join("outside-hard");
        fs::create_dir_all(&outside).unwrap();
        check(&f, "hard", f.c0, f.c0, |d| {
            // A hard link made now changes the file's ctime; one way or the
            // other the checkout must not share an inode with anything.
            fs::hard_link(d.join("target/d0/s1/f004.txt"), outside.join("h")).unwrap();
        });
        // The outside name still has the old content, and is the only link left.
        let m = fs::metadata(outside.join("h")).unwrap();
        assert_eq!(m.nlink(), 1);
        assert_eq!(fs::read_to_string(outside.join("h")).unwrap(), "file 004\n");
    }
}

#[test]
fn modes_extra_names_and_special_files_are_put_right() {
    for f in fixtures() {
        check(&f, "junk", f.c0, f.c1, |d| {
            chmod(d, "target/d0/s0/f000.txt", 0o4777);
            chmod(d, "target/run.sh", 0o600);
            chmod(d, "target/d2", 0o500);
            write(d, "target/__pycache__/x.pyc", "junk");
            fs::create_dir_all(d.join("target/empty/deeper")).unwrap();
            write(d, "target/locked/inner/x", "x");
            chmod(d, "target/locked/inner", 0o000);
            chmod(d, "target/locked", 0o000);
            write(d, ".git/config", "[core]\n");
            rustix::fs::mknodat(
                CWD,
                d.join("target/fifo"),
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap();
            let odd = std::ffi::OsStr::from_bytes_for_test(b"target/odd-\xff");
            fs::write(d.join(odd), "x").unwrap();
            // A file where the tree has a directory, a directory where it has a file.
            fs::remove_dir_all(d.join("target/d3")).unwrap();
            write(d, "target/d3", "not a dir\n");
            fs::remove_file(d.join("target/run.sh")).unwrap();
            write(d, "target/run.sh/inside", "not a file\n");
        });
    }
}

#[test]
fn renamed_and_swapped_files_are_rewritten() {
    for f in fixtures() {
        check(&f, "swap", f.c0, f.c0, |d| {
            let a = d.join("target/d0/s0/f000.txt");
            let b = d.join("target/d1/s1/f001.txt");
            let t = d.join("target/tmp");
            fs::rename(&a, &t).unwrap();
            fs::rename(&b, &a).unwrap();
            fs::rename(&t, &b).unwrap();
        });
    }
}

#[test]
fn a_directory_of_another_process_is_rewritten_whole() {
    for f in fixtures() {
        let dir = f.ws.join("runs/foreign");
        Store::open(&f.ws).unwrap().materialize(f.c0, &dir).unwrap();
        let done = f.store.reconcile(f.c1, &dir).unwrap();
        assert_eq!(done.kept, 0, "no records, nothing trusted");
        assert_eq!(listing(&dir), expected(&f, f.c1));
        // A directory swapped in at the same path is not the recorded one either.
        let moved = f.ws.join("runs/moved-away");
        fs::rename(&dir, &moved).unwrap();
        Store::open(&f.ws).unwrap().materialize(f.c1, &dir).unwrap();
        let done = f.store.reconcile(f.c1, &dir).unwrap();
        assert_eq!(done.kept, 0);
    }
}

#[test]
fn records_follow_a_moved_worktree() {
    for f in fixtures() {
        let a = f.ws.join("runs/a");
        let b = f.ws.join("runs/b");
        f.store.materialize(f.c0, &a).unwrap();
        f.store.move_worktree(&a, &b).unwrap();
        assert!(!a.exists());
        let done = f.store.reconcile(f.c1, &b).unwrap();
        if records_kept(&f.ws) {
            assert!(done.kept > 50, "{done:?}");
        }
        assert_eq!(listing(&b), expected(&f, f.c1));
        // Onto an existing path: refused, nothing moved.
        f.store.materialize(f.c0, &a).unwrap();
        assert!(matches!(
            f.store.move_worktree(&a, &b),
            Err(Error::DestinationNotEmpty(_))
        ));
        assert!(a.is_dir());
    }
}

#[test]
fn a_root_that_is_a_link_and_a_too_deep_tree_are_errors() {
    for f in fixtures() {
        let real = f.ws.join("runs/real");
        f.store.materialize(f.c0, &real).unwrap();
        let alias = f.ws.join("runs/alias");
        symlink(&real, &alias).unwrap();
        assert!(matches!(
            f.store.reconcile(f.c1, &alias),
            Err(Error::NotADirectory(_))
        ));
        let mut deep = real.join("target/pit");
        for _ in 0..300 {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        assert!(matches!(
            f.store.reconcile(f.c1, &real),
            Err(Error::LimitExceeded { .. })
        ));
    }
}

/// `OsStr` from raw bytes (Unix).
trait FromBytes {
    fn from_bytes_for_test(b: &[u8]) -> &std::ffi::OsStr;
}

impl FromBytes for std::ffi::OsStr {
    fn from_bytes_for_test(b: &[u8]) -> &std::ffi::OsStr {
        std::os::unix::ffi::OsStrExt::from_bytes(b)
    }
}

#[test]
fn trees_of_hundreds_of_directories_snapshot_and_reconcile_exactly() {
    // 300 directories of one file each: the walks open each as they go.
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let store = Store::init(ws).unwrap();
    for i in 0..300 {
        write(ws, &format!("target/d{i:03}/f.txt"), &format!("{i}\n"));
    }
    let c0 = store
        .commit(snap(&store, ws, None).tree, None, "gen 0", true)
        .unwrap();
    let dir = ws.join("runs/many");
    store.materialize(c0, &dir).unwrap();
    write(&dir, "target/d000/f.txt", "edited\n");
    write(&dir, "target/d299/f.txt", "edited\n");
    let fresh = Store::open(ws).unwrap();
    let with = snap(&store, &dir, Some(c0));
    assert_eq!(with, snap(&fresh, &dir, Some(c0)));
    assert_eq!(with.changes.len(), 2, "{:?}", with.changes);
    let done = store.reconcile(c0, &dir).unwrap();
    let oracle = ws.join("runs/oracle");
    fresh.materialize(c0, &oracle).unwrap();
    assert_eq!(listing(&dir), listing(&oracle));
    if records_kept(ws) {
        assert_eq!(done.kept, 298, "{done:?}");
    }
}
