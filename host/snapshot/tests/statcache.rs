//! Snapshots that use `materialize`'s stat records must equal snapshots that
//! read every file (a fresh store has no records), whatever an operator did to
//! the worktree in between.

use crate::common;
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use common::*;
use evolve_snapshot::{ChangeKind::*, EntryKind, Error, Limits, Oid, Snapshot, Store};
use rustix::fs::{AtFlags, CWD, Timespec, Timestamps, utimensat};

/// Files in the target, over nested directories.
const FILES: usize = 240;

/// A target of `FILES` files over nested directories, with an executable, a
/// symlink to a file and one to a directory.
fn seed_big(ws: &Path) {
    for i in 0..FILES {
        write(
            ws,
            &format!("target/d{}/s{}/f{i:03}.txt", i % 4, i % 3),
            &format!("file {i:03}\n"),
        );
    }
    write(ws, "target/run.sh", "#!/bin/sh\necho run\n");
    chmod(ws, "target/run.sh", 0o755);
    link(ws, "target/current", "d0/s0/f000.txt");
    link(ws, "target/dir", "d1");
    write(ws, "evaluator/tests/test.sh", "#!/bin/sh\nexit 0\n");
    write(ws, "recipe.yaml", "name: demo\n");
}

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    store: Store,
    c0: Oid,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().to_path_buf();
    let store = Store::init(&ws).unwrap();
    seed_big(&ws);
    let s = snap(&store, &ws, None);
    let c0 = store.commit(s.tree, None, "gen 0", true).unwrap();
    Fixture {
        _tmp: tmp,
        ws,
        store,
        c0,
    }
}

/// Materialize `c0` into a new worktree, let `edit` change it, then snapshot
/// it with the records and with a fresh store; both must agree exactly.
/// Returns the snapshot and how many files came from the records.
fn both(f: &Fixture, name: &str, edit: impl FnOnce(&Path)) -> (Snapshot, u64) {
    let wt = f.ws.join("runs/worktrees").join(name);
    f.store.materialize(f.c0, &wt).unwrap();
    edit(&wt);
    let before = f.store.stat_cache_hits();
    let with = snap(&f.store, &wt, Some(f.c0));
    let hits = f.store.stat_cache_hits() - before;
    let without = snap(&Store::open(&f.ws).unwrap(), &wt, Some(f.c0));
    assert_eq!(with, without, "{name}: with and without stat records");
    // And the tree is what the directory holds now, as a fresh store says
    // when snapshotting it with no parent at all.
    let plain = snap(&Store::open(&f.ws).unwrap(), &wt, None);
    assert_eq!(with.tree, plain.tree, "{name}");
    (with, hits)
}

/// Set `path`'s atime and mtime (not following a symlink) to `from`'s.
fn restore_times(path: &Path, from: &fs::Metadata) {
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: from.atime(),
            tv_nsec: from.atime_nsec(),
        },
        last_modification: Timespec {
            tv_sec: from.mtime(),
            tv_nsec: from.mtime_nsec(),
        },
    };
    utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// Overwrite `path` in place (same inode, same size) and restore its mtime.
fn rewrite_in_place(path: &Path, content: &[u8]) {
    let meta = fs::symlink_metadata(path).unwrap();
    assert_eq!(meta.len(), content.len() as u64);
    let mut file = fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    file.write_all(content).unwrap();
    drop(file);
    restore_times(path, &meta);
    let after = fs::symlink_metadata(path).unwrap();
    assert_eq!(
        (after.len(), after.mtime(), after.mtime_nsec(), after.ino()),
        (meta.len(), meta.mtime(), meta.mtime_nsec(), meta.ino())
    );
}

const F: &str = "target/d1/s1/f001.txt";

#[test]
fn unchanged_worktree_comes_from_the_records() {
    let f = fixture();
    let (s, hits) = both(&f, "same", |_| {});
    assert!(s.changes.is_empty(), "{:?}", s.changes);
    assert_eq!(s.tree, f.store.tree_of(f.c0).unwrap());
    if records_kept(&f.ws) {
        // All FILES + 6 leaves but those written in the fence's timestamp granule
        // (none or a few with multigrain timestamps; up to a clock tick's
        // worth on older kernels).
        assert!(hits > 0, "{hits}");
    } else {
        assert_eq!(hits, 0, "no records on this filesystem (tmpfs)");
    }
    // Snapshotting again changes nothing.
    let wt = f.ws.join("runs/worktrees/same");
    assert_eq!(snap(&f.store, &wt, Some(f.c0)), s);
}

#[test]
fn same_size_rewrite_with_restored_mtime_is_detected() {
    let f = fixture();
    let (s, hits) = both(&f, "rewrite", |wt| {
        rewrite_in_place(&wt.join(F), b"FILE 001\n")
    });
    assert_eq!(s.changes, vec![change(F, Modified, EntryKind::File)]);
    if records_kept(&f.ws) {
        assert!(hits > 0, "{hits}");
    }
}

#[test]
fn rewrite_immediately_after_materialize_is_detected() {
    // Within the same timestamp granule as the writes (racy records).
    let f = fixture();
    let (s, _) = both(&f, "racy", |wt| {
        fs::write(wt.join(F), "file 00X\n").unwrap();
        fs::write(wt.join("target/run.sh"), "#!/bin/sh\necho RUN\n").unwrap();
    });
    assert_eq!(
        s.changes,
        vec![
            change(F, Modified, EntryKind::File),
            change("target/run.sh", Modified, EntryKind::Executable),
        ]
    );
}

#[test]
fn mode_changes_are_detected() {
    let f = fixture();
    let (s, _) = both(&f, "chmod", |wt| {
        chmod(wt, F, 0o755);
        chmod(wt, "target/run.sh", 0o644);
        // Not a change git records, but the stat differs: read, same blob.
        chmod(wt, "target/d0/s0/f000.txt", 0o600);
    });
    assert_eq!(
        s.changes,
        vec![
            change(F, Modified, EntryKind::Executable),
            change("target/run.sh", Modified, EntryKind::File),
        ]
    );
}

#[test]
fn file_replaced_by_symlink_and_symlink_by_file() {
    let f = fixture();
    let (s, _) = both(&f, "types", |wt| {
        let meta = fs::symlink_metadata(wt.join(F)).unwrap();
        fs::remove_file(wt.join(F)).unwrap();
        // Same length as the file's content ("file 001\n").
        symlink("f00X.txtx", wt.join(F)).unwrap();
        restore_times(&wt.join(F), &meta);
        fs::remove_file(wt.join("target/current")).unwrap();
        fs::write(wt.join("target/current"), "d0/s0/f000.txt").unwrap();
    });
    assert_eq!(
        s.changes,
        vec![
            change("target/current", Modified, EntryKind::File),
            change(
                F,
                Modified,
                EntryKind::Symlink {
                    target: "f00X.txtx".into()
                }
            ),
        ]
    );
}

#[test]
fn deletes_adds_and_renames_are_detected() {
    let f = fixture();
    let (s, _) = both(&f, "names", |wt| {
        fs::remove_file(wt.join("target/d0/s0/f000.txt")).unwrap();
        write(wt, "target/d2/s2/new.txt", "new\n");
        fs::rename(wt.join(F), wt.join("target/d1/s1/moved.txt")).unwrap();
        fs::rename(
            wt.join("target/d2/s0/f006.txt"),
            wt.join("target/d3/s0/f006.txt"),
        )
        .unwrap();
        // A whole directory gone, another emptied, one added.
        fs::remove_dir_all(wt.join("target/d3/s1")).unwrap();
        for e in fs::read_dir(wt.join("target/d0/s1")).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
        write(wt, "target/d0/s1/deeper/x.txt", "x\n");
    });
    let kinds: Vec<(&str, _)> = s.changes.iter().map(|c| (&c.path[..], c.kind)).collect();
    assert!(kinds.contains(&("target/d0/s0/f000.txt", Deleted)));
    assert!(kinds.contains(&("target/d2/s2/new.txt", Added)));
    assert!(kinds.contains(&(F, Deleted)));
    assert!(kinds.contains(&("target/d1/s1/moved.txt", Added)));
    assert!(kinds.contains(&("target/d2/s0/f006.txt", Deleted)));
    assert!(kinds.contains(&("target/d3/s0/f006.txt", Added)));
    assert!(kinds.contains(&("target/d0/s1/deeper/x.txt", Added)));
    assert!(kinds.contains(&("target/d3/s1/f007.txt", Deleted)));
}

#[test]
fn swapped_and_hard_linked_files_with_restored_times_are_detected() {
    let f = fixture();
    let a = "target/d0/s0/f000.txt";
    let b = "target/d1/s1/f001.txt";
    let c = "target/d2/s2/f002.txt";
    let (s, _) = both(&f, "swap", |wt| {
        let (ma, mb) = (
            fs::symlink_metadata(wt.join(a)).unwrap(),
            fs::symlink_metadata(wt.join(b)).unwrap(),
        );
        fs::rename(wt.join(a), wt.join("tmp")).unwrap();
        fs::rename(wt.join(b), wt.join(a)).unwrap();
        fs::rename(wt.join("tmp"), wt.join(b)).unwrap();
        restore_times(&wt.join(a), &ma);
        restore_times(&wt.join(b), &mb);
        // `c` becomes a hard link to `a`'s (new) content.
        let mc = fs::symlink_metadata(wt.join(c)).unwrap();
        fs::remove_file(wt.join(c)).unwrap();
        fs::hard_link(wt.join(a), wt.join(c)).unwrap();
        restore_times(&wt.join(c), &mc);
    });
    assert_eq!(
        s.changes,
        vec![
            change(a, Modified, EntryKind::File),
            change(b, Modified, EntryKind::File),
            change(c, Modified, EntryKind::File),
        ]
    );
}

#[test]
fn delete_and_recreate_with_same_content_is_no_change() {
    let f = fixture();
    let (s, _) = both(&f, "recreate", |wt| {
        let content = fs::read(wt.join(F)).unwrap();
        fs::remove_file(wt.join(F)).unwrap();
        fs::write(wt.join(F), content).unwrap();
    });
    assert!(s.changes.is_empty(), "{:?}", s.changes);
}

#[test]
fn special_files_and_nested_repositories_in_recorded_directories() {
    let f = fixture();
    let (s, _) = both(&f, "special", |wt| {
        rustix::fs::mknodat(
            CWD,
            wt.join("target/d1/fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        write(wt, "target/d2/.git/config", "[core]\n");
    });
    assert_eq!(
        s.changes,
        vec![
            change("target/d1/fifo", Added, EntryKind::Special),
            change("target/d2/.git", Added, EntryKind::Submodule),
        ]
    );
}

#[test]
fn a_directory_replaced_at_the_same_path_uses_no_records() {
    let f = fixture();
    let wt = f.ws.join("runs/worktrees/replaced");
    f.store.materialize(f.c0, &wt).unwrap();
    // Copy the tree elsewhere with one same-size edit and every mtime
    // preserved, then put the copy where the worktree was.
    let copy = f.ws.join("runs/copy");
    let files: Vec<_> = (0..FILES)
        .map(|i| format!("target/d{}/s{}/f{i:03}.txt", i % 4, i % 3))
        .collect();
    for rel in &files {
        let meta = fs::symlink_metadata(wt.join(rel)).unwrap();
        let content = if rel == F {
            b"FILE 001\n".to_vec()
        } else {
            fs::read(wt.join(rel)).unwrap()
        };
        write(&copy, rel, std::str::from_utf8(&content).unwrap());
        restore_times(&copy.join(rel), &meta);
    }
    fs::remove_dir_all(&wt).unwrap();
    fs::rename(&copy, &wt).unwrap();
    let before = f.store.stat_cache_hits();
    let with = snap(&f.store, &wt, Some(f.c0));
    assert_eq!(f.store.stat_cache_hits(), before, "no record may be used");
    let without = snap(&Store::open(&f.ws).unwrap(), &wt, Some(f.c0));
    assert_eq!(with, without);
    assert!(with.changes.contains(&change(F, Modified, EntryKind::File)));
}

#[test]
fn limits_apply_the_same_with_records() {
    let f = fixture();
    let wt = f.ws.join("runs/worktrees/limits");
    f.store.materialize(f.c0, &wt).unwrap();
    let fresh = Store::open(&f.ws).unwrap();
    let cases = [
        (
            Limits {
                max_file_bytes: 12,
                ..Limits::default()
            },
            "file size",
        ),
        (
            Limits {
                max_total_bytes: 500,
                ..Limits::default()
            },
            "total size",
        ),
        (
            Limits {
                max_entries: 100,
                ..Limits::default()
            },
            "entry count",
        ),
    ];
    for (limits, which) in cases {
        for store in [&f.store, &fresh] {
            let err = store.snapshot(&wt, Some(f.c0), &limits, &skip).unwrap_err();
            assert!(
                matches!(err, Error::LimitExceeded { limit, .. } if limit == which),
                "{which}: {err}"
            );
        }
    }
    // Within the limits: equal results.
    let exact = Limits {
        max_total_bytes: 4000,
        ..Limits::default()
    };
    assert_eq!(
        f.store.snapshot(&wt, Some(f.c0), &exact, &skip).unwrap(),
        fresh.snapshot(&wt, Some(f.c0), &exact, &skip).unwrap()
    );
}

#[test]
fn many_edits_against_another_parent_agree() {
    // Snapshot against a parent other than the materialized commit, after
    // edits of every kind at once.
    let f = fixture();
    let wt0 = f.ws.join("runs/worktrees/other");
    f.store.materialize(f.c0, &wt0).unwrap();
    write(&wt0, "target/d0/extra.txt", "extra\n");
    fs::remove_file(wt0.join("target/d3/s0/f003.txt")).unwrap();
    let s1 = snap(&f.store, &wt0, Some(f.c0));
    let c1 = f.store.commit(s1.tree, Some(f.c0), "gen 1", false).unwrap();

    let wt = f.ws.join("runs/worktrees/many");
    f.store.materialize(f.c0, &wt).unwrap();
    rewrite_in_place(&wt.join(F), b"FILE 001\n");
    chmod(&wt, "target/d2/s2/f002.txt", 0o755);
    fs::remove_file(wt.join("target/dir")).unwrap();
    symlink("d2", wt.join("target/dir")).unwrap();
    write(&wt, "target/d3/new/n.txt", "n\n");
    fs::remove_file(wt.join("target/d0/s0/f000.txt")).unwrap();
    let with = snap(&f.store, &wt, Some(c1));
    let without = snap(&Store::open(&f.ws).unwrap(), &wt, Some(c1));
    assert_eq!(with, without);
    assert_eq!(with.changes.len(), 7, "{:?}", with.changes);
}

#[test]
fn forget_worktree_drops_the_records() {
    let f = fixture();
    let wt = f.ws.join("runs/worktrees/forget");
    f.store.materialize(f.c0, &wt).unwrap();
    f.store.forget_worktree(&wt);
    let before = f.store.stat_cache_hits();
    let s = snap(&f.store, &wt, Some(f.c0));
    assert_eq!(f.store.stat_cache_hits(), before);
    assert!(s.changes.is_empty());
    // Executable bits survive either way.
    assert_eq!(
        fs::metadata(wt.join("target/run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o111,
        0o111
    );
}

#[test]
fn directory_swapped_for_a_symlink_is_stored_as_a_link() {
    let f = fixture();
    let outside = f.ws.join("runs/outside");
    let (s, _) = both(&f, "swapdir", |wt| {
        fs::rename(wt.join("target/d1/s1"), &outside).unwrap();
        symlink(&outside, wt.join("target/d1/s1")).unwrap();
    });
    let target = outside.to_str().unwrap().to_string();
    assert!(s.changes.contains(&change(
        "target/d1/s1",
        Added,
        EntryKind::Symlink { target }
    )));
    assert!(s.changes.contains(&change(F, Deleted, EntryKind::File)));
    assert!(s.changes.iter().all(|c| c.path.starts_with("target/d1/s1")));
}
