//! Snapshot / commit / materialize / tags / diff on well-behaved trees.

use crate::common;
use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;
use evolve_snapshot::{ChangeKind::*, EntryKind, Error, Limits, Store};

fn mode(p: &std::path::Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn init_refuses_existing_repository_and_open_finds_it() {
    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    assert_eq!(store.head().unwrap(), None);
    let err = Store::init(ws.path()).unwrap_err();
    assert!(matches!(err, Error::AlreadyInitialized(_)), "{err}");
    assert!(err.to_string().contains(".git"), "{err}");
    Store::open(ws.path()).unwrap();
    let empty = tempfile::tempdir().unwrap();
    let err = Store::open(empty.path()).unwrap_err();
    assert!(matches!(err, Error::NotARepository { .. }), "{err}");
}

#[test]
fn first_snapshot_lists_every_entry_added_and_skips_framework_state() {
    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    seed(ws.path());
    let s = snap(&store, ws.path(), None);
    let link = |t: &str| EntryKind::Symlink { target: t.into() };
    assert_eq!(
        s.changes,
        vec![
            change(".gitignore", Added, EntryKind::File),
            change("evaluator/tests/test.sh", Added, EntryKind::File),
            change("recipe.yaml", Added, EntryKind::File),
            change("target/agent.py", Added, EntryKind::File),
            change("target/bin/run.sh", Added, EntryKind::Executable),
            change("target/current", Added, link("agent.py")),
            change("target/tools", Added, link("bin")),
        ]
    );
}

#[test]
fn round_trip_preserves_tree_modes_and_symlinks() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    assert_eq!(store.head().unwrap(), Some(c0));

    let dest = ws.path().join("runs/worktrees/gen-1");
    store.materialize(c0, &dest).unwrap();
    assert_eq!(mode(&dest.join("target/agent.py")), 0o644);
    assert_eq!(mode(&dest.join("target/bin/run.sh")), 0o755);
    assert_eq!(
        fs::read_link(dest.join("target/tools")).unwrap(),
        std::path::Path::new("bin")
    );
    assert!(
        fs::symlink_metadata(dest.join("target/current"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        fs::read_to_string(dest.join("recipe.yaml")).unwrap(),
        "name: demo\n"
    );
    assert!(!dest.join(".evolve").exists() && !dest.join("target/empty").exists());

    let again = snap(&store, &dest, Some(c0));
    assert_eq!(again.tree, store.tree_of(c0).unwrap());
    assert!(again.changes.is_empty(), "{:?}", again.changes);
    assert!(store.diff(c0, c0).unwrap().is_empty());
}

#[test]
fn change_list_is_exact_and_matches_diff() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    let child = ws.path().join("runs/worktrees/gen-1");
    store.materialize(c0, &child).unwrap();
    let d = child.as_path();
    write(d, "target/agent.py", "print('better')\n"); // modified
    fs::remove_file(d.join("target/bin/run.sh")).unwrap(); // deleted (bin/ vanishes)
    write(d, "target/notes/new.md", "new\n"); // added
    chmod(d, "recipe.yaml", 0o755); // exec flip
    fs::remove_file(d.join("target/current")).unwrap();
    link(d, "target/current", "notes/new.md"); // retargeted link
    fs::remove_file(d.join("target/tools")).unwrap();
    write(d, "target/tools/x", "file now\n"); // link replaced by directory

    let s = snap(&store, d, Some(c0));
    let link = |t: &str| EntryKind::Symlink { target: t.into() };
    let expected = vec![
        change("recipe.yaml", Modified, EntryKind::Executable),
        change("target/agent.py", Modified, EntryKind::File),
        change("target/bin/run.sh", Deleted, EntryKind::Executable),
        change("target/current", Modified, link("notes/new.md")),
        change("target/notes/new.md", Added, EntryKind::File),
        change("target/tools", Deleted, link("bin")),
        change("target/tools/x", Added, EntryKind::File),
    ];
    assert_eq!(s.changes, expected);

    let c1 = store.commit(s.tree, Some(c0), "gen 1", false).unwrap();
    assert_eq!(store.head().unwrap(), Some(c0), "children never move HEAD");
    assert_eq!(store.diff(c0, c1).unwrap(), expected);
    // The evaluator was untouched, so its subtree id is shared.
    assert_eq!(
        store.subtree(c0, "evaluator").unwrap(),
        store.subtree(c1, "evaluator").unwrap()
    );
    assert_ne!(
        store.subtree(c0, "target").unwrap(),
        store.subtree(c1, "target").unwrap()
    );

    let text = store
        .unified_diff(
            store.tree_of(c0).unwrap(),
            s.tree,
            &|p| p.starts_with("target/"),
            1 << 20,
        )
        .unwrap();
    assert!(text.contains("+print('better')"), "{text}");
    assert!(text.contains("+new"), "{text}");
    assert!(!text.contains("recipe.yaml"), "{text}");
    let cut = store
        .unified_diff(store.tree_of(c0).unwrap(), s.tree, &|_| true, 60)
        .unwrap();
    assert!(cut.len() <= 60 && cut.ends_with("]\n"), "{cut:?}");
}

/// Line counts come from libgit2 per file, keyed by the change list's own paths, so names
/// git has to quote in a patch header (a space, a quote, a newline, a carriage return, a
/// bidi override) and content lines that start with `++` or `--` are counted right.
#[test]
fn line_counts_are_exact_for_odd_names_and_odd_lines() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    let child = ws.path().join("runs/worktrees/gen-1");
    store.materialize(c0, &child).unwrap();
    let d = child.as_path();
    let odd = "target/a b \"q\"\nmodified evaluator/x\r\u{202E}fdp.exe";
    write(d, odd, "one\n++ two\n-- three\n");
    write(d, "target/agent.py", "-- replaced\n++ added\nmore\n");
    let s = snap(&store, d, Some(c0));
    let c1 = store.commit(s.tree, Some(c0), "gen 1", false).unwrap();
    let (t0, t1) = (store.tree_of(c0).unwrap(), store.tree_of(c1).unwrap());
    let counts = store
        .line_counts(t0, t1, &|p| p.starts_with("target/"))
        .unwrap();
    let paths: Vec<String> = store
        .diff(c0, c1)
        .unwrap()
        .into_iter()
        .map(|c| c.path)
        .collect();
    assert!(
        paths.iter().all(|p| counts.contains_key(p)),
        "{paths:?} vs {counts:?}"
    );
    assert_eq!(counts[odd], (3, 0));
    // agent.py had one line; it now has three.
    assert_eq!(counts["target/agent.py"], (3, 1));
    assert!(
        !counts.contains_key("recipe.yaml"),
        "only what `keep` accepts"
    );
    // The patch text, which the old count was read from, quotes the odd name.
    let text = store.unified_diff(t0, t1, &|_| true, 1 << 20).unwrap();
    assert!(
        text.contains("diff --git \"a/target/a b \\\"q\\\"\\n"),
        "{text}"
    );
}

#[test]
fn tags_are_lightweight_unique_and_listed() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    store.tag("gen/0", c0).unwrap();
    let err = store.tag("gen/0", c0).unwrap_err();
    assert!(
        matches!(err, Error::TagExists(ref t) if t == "gen/0"),
        "{err}"
    );
    assert_eq!(store.tag_target("gen/0").unwrap(), Some(c0));
    assert_eq!(store.tag_target("gen/1").unwrap(), None);

    let s = snap(&store, ws.path(), Some(c0));
    let c1 = store.commit(s.tree, Some(c0), "gen 1", false).unwrap();
    store.tag("gen/1", c1).unwrap();
    store.tag("other", c1).unwrap();
    assert_eq!(
        store.tags("gen/").unwrap(),
        vec![("gen/0".to_string(), c0), ("gen/1".to_string(), c1)]
    );
    assert!(matches!(
        store.tag("bad..name", c0),
        Err(Error::InvalidTagName(_))
    ));
    assert!(matches!(
        store.tag("gen/2", store.tree_of(c0).unwrap()),
        Err(Error::NotFound(_))
    ));
    // Reopening sees the same refs.
    let reopened = Store::open(ws.path()).unwrap();
    assert_eq!(reopened.tag_target("gen/1").unwrap(), Some(c1));
}

#[test]
fn subtree_and_read_blob() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    let eval = store.subtree(c0, "evaluator").unwrap().unwrap();
    let tests = store.subtree(c0, "evaluator/tests").unwrap().unwrap();
    assert_ne!(eval, tests);
    assert_eq!(
        store.subtree(c0, "").unwrap(),
        Some(store.tree_of(c0).unwrap())
    );
    assert_eq!(store.subtree(c0, "recipe.yaml").unwrap(), None);
    assert_eq!(store.subtree(c0, "nope").unwrap(), None);
    assert!(matches!(
        store.subtree(c0, "../x"),
        Err(Error::InvalidPath(_))
    ));

    assert_eq!(
        store.read_blob(c0, "recipe.yaml", 100).unwrap().as_deref(),
        Some(&b"name: demo\n"[..])
    );
    assert_eq!(store.read_blob(c0, "missing.yaml", 100).unwrap(), None);
    assert!(matches!(
        store.read_blob(c0, "target", 100),
        Err(Error::NotAFile { .. })
    ));
    assert!(matches!(
        store.read_blob(c0, "target/current", 100),
        Err(Error::NotAFile {
            found: "symlink",
            ..
        })
    ));
    let err = store.read_blob(c0, "recipe.yaml", 3).unwrap_err();
    assert!(err.to_string().contains("recipe.yaml"), "{err}");
}

#[test]
fn limits_name_the_offending_path() {
    let src = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    write(src.path(), "a/big.bin", &"x".repeat(64));
    write(src.path(), "a/small.txt", "tiny");
    let run = |l: Limits| store.snapshot(src.path(), None, &l, &skip).unwrap_err();

    let err = run(Limits {
        max_file_bytes: 32,
        ..Limits::default()
    });
    assert!(
        matches!(err, Error::LimitExceeded { ref path, .. } if path == "a/big.bin"),
        "{err}"
    );
    let err = run(Limits {
        max_total_bytes: 66,
        ..Limits::default()
    });
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                limit: "total size",
                ..
            }
        ),
        "{err}"
    );
    let err = run(Limits {
        max_entries: 2,
        ..Limits::default()
    });
    assert!(
        matches!(err, Error::LimitExceeded { limit: "entry count", ref path, .. } if path.starts_with("a/")),
        "{err}"
    );
    assert!(err.to_string().contains("entry count"), "{err}");
    store
        .snapshot(src.path(), None, &Limits::default(), &skip)
        .unwrap();
}

#[test]
fn materialize_refuses_occupied_destinations() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    let dest = tempfile::tempdir().unwrap();
    write(dest.path(), "leftover", "x");
    let err = store.materialize(c0, dest.path()).unwrap_err();
    assert!(matches!(err, Error::DestinationNotEmpty(_)), "{err}");
    let err = store
        .materialize(c0, &dest.path().join("leftover"))
        .unwrap_err();
    assert!(matches!(err, Error::NotADirectory(_)), "{err}");
    link(dest.path(), "to-dir", ".");
    let err = store
        .materialize(c0, &dest.path().join("to-dir"))
        .unwrap_err();
    assert!(matches!(err, Error::NotADirectory(_)), "{err}");
    let empty = dest.path().join("empty");
    fs::create_dir(&empty).unwrap();
    store.materialize(c0, &empty).unwrap();
}

#[test]
fn same_size_edits_are_seen_and_packing_keeps_every_object() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    // The genesis objects move into a pack; everything still reads back.
    assert!(store.pack_objects().unwrap() > 0);
    assert_eq!(store.pack_objects().unwrap(), 0, "nothing loose is left");
    let fresh = Store::open(ws.path()).unwrap();
    let child = ws.path().join("runs/worktrees/gen-1");
    fresh.materialize(c0, &child).unwrap();
    assert_eq!(
        fs::read_to_string(child.join("recipe.yaml")).unwrap(),
        "name: demo\n"
    );

    // Same length, different bytes: the cached parent content must not mask it.
    write(&child, "target/agent.py", "print('HI')\n");
    let s = snap(&fresh, &child, Some(c0));
    assert_eq!(
        s.changes,
        vec![change("target/agent.py", Modified, EntryKind::File)]
    );
    let c1 = fresh.commit(s.tree, Some(c0), "gen 1", false).unwrap();
    assert_eq!(
        fresh
            .read_blob(c1, "target/agent.py", 100)
            .unwrap()
            .as_deref(),
        Some(&b"print('HI')\n"[..])
    );
    // Another store (empty cache) materializes the child from the odb.
    let again = ws.path().join("runs/worktrees/check");
    Store::open(ws.path())
        .unwrap()
        .materialize(c1, &again)
        .unwrap();
    assert_eq!(
        fs::read_to_string(again.join("target/agent.py")).unwrap(),
        "print('HI')\n"
    );
}

/// Tag answers are cached by the tag file's `lstat`: a tag moved afterwards, by a
/// rename or by rewriting the file in place with its mtime put back, is seen.
#[test]
fn a_tag_moved_after_it_was_read_is_seen() {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(tmp.path());
    common::write(tmp.path(), "target/agent.py", "print('moved')\n");
    let c1 = store
        .commit(
            snap(&store, tmp.path(), Some(c0)).tree,
            Some(c0),
            "1",
            false,
        )
        .unwrap();
    store.tag("gen/1", c0).unwrap();
    // Old enough to be cached.
    std::thread::sleep(std::time::Duration::from_millis(250));
    assert_eq!(store.tag_target("gen/1").unwrap(), Some(c0));
    assert_eq!(store.tag_target("gen/1").unwrap(), Some(c0));

    // Rewritten in place, same size, mtime restored.
    let file = tmp.path().join(".git/refs/tags/gen/1");
    let meta = fs::metadata(&file).unwrap();
    let mut f = fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.write_all(format!("{c1}\n").as_bytes()).unwrap();
    drop(f);
    let t = |s, ns| rustix::fs::Timespec {
        tv_sec: s,
        tv_nsec: ns,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        &file,
        &rustix::fs::Timestamps {
            last_access: t(meta.atime(), meta.atime_nsec()),
            last_modification: t(meta.mtime(), meta.mtime_nsec()),
        },
        rustix::fs::AtFlags::empty(),
    )
    .unwrap();
    assert_eq!(store.tag_target("gen/1").unwrap(), Some(c1));

    // Replaced by a new file (what git does), after being cached again.
    std::thread::sleep(std::time::Duration::from_millis(250));
    assert_eq!(store.tag_target("gen/1").unwrap(), Some(c1));
    let tmpfile = tmp.path().join(".git/refs/tags/gen/1.new");
    fs::write(&tmpfile, format!("{c0}\n")).unwrap();
    fs::rename(&tmpfile, &file).unwrap();
    assert_eq!(store.tag_target("gen/1").unwrap(), Some(c0));
    // And deleted.
    fs::remove_file(&file).unwrap();
    assert_eq!(store.tag_target("gen/1").unwrap(), None);
}
