//! Trees an operator could leave behind on purpose, and the surface check.

use crate::common;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;

use common::*;
use evolve_snapshot::{Change, ChangeKind::*, EntryKind, Error, Oid, Store, Surface};

fn surface(include: &[&str], exclude: &[&str]) -> Surface {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    Surface::new(&v(include), &v(exclude)).unwrap()
}

/// Materialize a seeded parent, let `mutate` loose on the child, snapshot it.
fn mutated(mutate: impl FnOnce(&std::path::Path)) -> (tempfile::TempDir, Store, Oid, Vec<Change>) {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    let child = ws.path().join("runs/worktrees/gen-1");
    store.materialize(c0, &child).unwrap();
    mutate(&child);
    let s = snap(&store, &child, Some(c0));
    let c1 = store.commit(s.tree, Some(c0), "child", false).unwrap();
    (ws, store, c1, s.changes)
}

fn reasons(s: &Surface, changes: &[Change]) -> Vec<(String, String)> {
    s.check(changes)
        .into_iter()
        .map(|v| (v.path, v.reason))
        .collect()
}

#[test]
fn symlinks_leaving_the_surface_are_violations() {
    let (_ws, _store, _c, changes) = mutated(|d| {
        link(d, "target/x", "../evaluator/tests/test.sh");
        link(d, "target/abs", "/etc/passwd");
        link(d, "target/up", "../../outside");
        link(d, "target/root", "..");
        link(d, "target/sneaky", "bin/../../evaluator");
        link(d, "target/fine", "bin/run.sh");
        link(d, "target/manifest", "../operators");
    });
    let s = surface(&["**"], &[]);
    let v = reasons(&s, &changes);
    let paths: Vec<&str> = v.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "target/abs",
            "target/manifest",
            "target/root",
            "target/sneaky",
            "target/up",
            "target/x"
        ],
        "{v:#?}"
    );
    let reason = |p: &str| &v.iter().find(|(q, _)| q == p).unwrap().1;
    assert!(
        reason("target/x").contains("evaluator/tests/test.sh"),
        "{v:?}"
    );
    assert!(reason("target/abs").contains("absolute"), "{v:?}");
    assert!(reason("target/up").contains("escapes"), "{v:?}");
    assert!(reason("target/root").contains("root"), "{v:?}");
    assert!(
        reason("target/manifest").contains("operators/manifest.json"),
        "{v:?}"
    );
}

#[test]
fn symlinked_directory_is_stored_as_a_link_and_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.txt", "do not read");
    let (_ws, store, c1, changes) = mutated(|d| {
        link(d, "target/peek", outside.path().to_str().unwrap());
    });
    let target = outside.path().to_string_lossy().into_owned();
    assert_eq!(
        changes,
        vec![change("target/peek", Added, EntryKind::Symlink { target })]
    );
    assert!(
        store
            .read_blob(c1, "target/peek/secret.txt", 100)
            .unwrap()
            .is_none()
    );

    // A snapshot root that is itself a symlink is refused outright.
    let ws2 = tempfile::tempdir().unwrap();
    link(ws2.path(), "root", outside.path().to_str().unwrap());
    let err = store
        .snapshot(&ws2.path().join("root"), None, &Default::default(), &skip)
        .unwrap_err();
    assert!(matches!(err, Error::NotADirectory(_)), "{err}");
}

#[test]
fn nested_repositories_are_reported_as_submodules_and_not_stored() {
    let (_ws, store, c1, changes) = mutated(|d| {
        write(d, "target/vendor/.git/config", "[core]\n");
        write(d, "target/vendor/lib.py", "x = 1\n");
        write(d, "target/other/.git", "gitdir: ../../.git\n");
        write(d, "target/shout/.GIT/HEAD", "ref: refs/heads/main\n");
    });
    assert_eq!(
        changes,
        vec![
            change("target/other/.git", Added, EntryKind::Submodule),
            change("target/shout/.GIT", Added, EntryKind::Submodule),
            change("target/vendor/.git", Added, EntryKind::Submodule),
            change("target/vendor/lib.py", Added, EntryKind::File),
        ]
    );
    assert_eq!(
        store.subtree(c1, "target/other").unwrap(),
        None,
        "nothing stored"
    );
    let v = surface(&["**"], &[]).check(&changes);
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(v.iter().all(|v| v.reason.contains("submodule")), "{v:?}");
}

#[test]
fn special_files_and_undecodable_names_are_reported_not_stored() {
    let (_ws, _store, _c, changes) = mutated(|d| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("target/pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(d.join("target/sock")).unwrap();
        fs::write(
            d.join("target").join(OsStr::from_bytes(b"bad\xffname")),
            "x",
        )
        .unwrap();
    });
    assert_eq!(
        changes,
        vec![
            change("target/bad\u{fffd}name", Added, EntryKind::Special),
            change("target/pipe", Added, EntryKind::Special),
            change("target/sock", Added, EntryKind::Special),
        ]
    );
    let v = surface(&["target/**"], &[]).check(&changes);
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(v.iter().all(|v| v.reason.contains("special")), "{v:?}");
}

#[test]
fn implicit_excludes_cannot_be_overridden() {
    let (_ws, _store, _c, changes) = mutated(|d| {
        write(d, "evaluator/tests/test.sh", "exit 0 # always pass\n");
        write(d, "recipe.yaml", "name: pwned\n");
        write(d, "operators/manifest.json", "{}");
        write(d, "keys/signing.key", "k");
        write(d, "target/agent.py", "print('ok')\n");
    });
    let s = surface(&["**"], &[]);
    let v = reasons(&s, &changes);
    let paths: Vec<&str> = v.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "evaluator/tests/test.sh",
            "keys/signing.key",
            "operators/manifest.json",
            "recipe.yaml"
        ]
    );
    assert!(v[0].1.contains("evaluator/**"), "{v:?}");
    // A file planted where the evaluator directory was is still framework-owned.
    assert!(!s.allows("evaluator"));
    assert!(!s.allows("runs/gen-3/out") && !s.allows(".evolve/x") && !s.allows(".gitignore"));
    assert!(!s.allows("target/.git/config") && !s.allows("target/../evaluator"));
    assert!(s.allows("target/agent.py") && s.allows("operators/mutate/x/src/lib.rs"));
}

#[test]
fn paths_outside_an_explicit_surface_are_violations() {
    let (_ws, _store, _c, changes) = mutated(|d| {
        write(d, "target/agent.py", "print('ok')\n");
        write(d, "target/data/big.json", "{}");
        write(d, "README.md", "hi\n");
        fs::remove_file(d.join("target/bin/run.sh")).unwrap();
    });
    let s = surface(&["target/**"], &["target/data/**", "target/bin/*.sh"]);
    let v = reasons(&s, &changes);
    assert_eq!(
        v,
        vec![
            (
                "README.md".into(),
                "outside the surface (matched by no include pattern)".into()
            ),
            (
                "target/bin/run.sh".into(),
                "outside the surface (exclude target/bin/*.sh)".into()
            ),
            (
                "target/data/big.json".into(),
                "outside the surface (exclude target/data/**)".into()
            ),
        ]
    );
    // `*` stays within one segment.
    let one = surface(&["target/*"], &[]);
    assert!(one.allows("target/a.py") && !one.allows("target/sub/a.py"));
}

#[test]
fn includes_dir_answers_whether_a_directory_is_writable_at_all() {
    let t = surface(&["target/**"], &[]);
    assert!(t.includes_dir("target/") && t.includes_dir("target/sub"));
    assert!(!t.includes_dir("operators/"));
    let all = surface(&["**"], &["operators/select/**"]);
    assert!(all.includes_dir("operators/") && all.includes_dir("operators/mutate"));
    assert!(
        !all.includes_dir("evaluator/") && !all.includes_dir("runs") && !all.includes_dir(".git")
    );
    assert!(!all.includes_dir("operators/select") && !all.includes_dir("operators/select/x"));
    let deep = surface(&["operators/*/my_*/src/**"], &[]);
    assert!(deep.includes_dir("operators/") && deep.includes_dir("operators/mutate/my_op"));
    assert!(!deep.includes_dir("operators/mutate/other") && !deep.includes_dir("target"));
    let flat = surface(&["target/*.py"], &[]);
    assert!(flat.includes_dir("target") && !flat.includes_dir("target/sub"));
    assert!(!surface(&[], &[]).includes_dir("target"));
}

#[test]
fn bad_globs_and_odd_change_paths_are_handled() {
    let err = Surface::new(&["target/[".into()], &[]).unwrap_err();
    assert!(
        matches!(err, Error::InvalidGlob { ref pattern, .. } if pattern == "target/["),
        "{err}"
    );
    assert!(err.to_string().contains("target/["), "{err}");
    let s = surface(&["**"], &[]);
    let odd = ["", "/abs", "a//b", "./a", "a/../b", "x/.git/y", "a/\0"];
    let changes: Vec<Change> = odd
        .iter()
        .map(|p| change(p, Added, EntryKind::File))
        .chain([change(
            "target/l",
            Added,
            EntryKind::Symlink {
                target: String::new(),
            },
        )])
        .collect();
    assert_eq!(s.check(&changes).len(), changes.len());
}

#[test]
fn materialize_refuses_gitlinks_and_unsafe_names() {
    let ws = tempfile::tempdir().unwrap();
    let (store, c0) = seeded_store(ws.path());
    let repo = git2::Repository::open(ws.path()).unwrap();

    let mut b = repo.treebuilder(None).unwrap();
    b.insert("ok.txt", repo.blob(b"fine").unwrap(), 0o100644)
        .unwrap();
    b.insert("sub", c0, 0o160000).unwrap();
    let gitlink = store
        .commit(b.write().unwrap(), None, "gitlink", false)
        .unwrap();
    let err = store
        .materialize(gitlink, &ws.path().join("runs/m1"))
        .unwrap_err();
    assert!(matches!(err, Error::Gitlink(ref p) if p == "sub"), "{err}");
    assert_eq!(
        store
            .diff(c0, gitlink)
            .unwrap()
            .iter()
            .find(|c| c.path == "sub")
            .unwrap()
            .entry,
        EntryKind::Submodule
    );

    // libgit2's TreeBuilder refuses these names, so write the raw tree object.
    let blob = repo.blob(b"x").unwrap();
    for name in [&b".git"[..], b".GiT", b"..", b"a/b"] {
        let mut body = b"100644 ".to_vec();
        body.extend_from_slice(name);
        body.push(0);
        body.extend_from_slice(blob.as_bytes());
        let tree = repo
            .odb()
            .unwrap()
            .write(git2::ObjectType::Tree, &body)
            .unwrap();
        let c = store.commit(tree, None, "unsafe", false).unwrap();
        let dest = tempfile::tempdir().unwrap();
        let err = store.materialize(c, dest.path()).unwrap_err();
        assert!(matches!(err, Error::UnsafeName { .. }), "{err}");
        assert!(fs::read_dir(dest.path()).unwrap().next().is_none());
    }
}

#[test]
fn absurdly_deep_trees_are_refused_without_exhausting_the_stack() {
    let src = tempfile::tempdir().unwrap();
    let deep: String = (0..evolve_snapshot::MAX_DEPTH + 5).map(|_| "d/").collect();
    write(src.path(), &format!("{deep}leaf"), "x");
    let ws = tempfile::tempdir().unwrap();
    let store = Store::init(ws.path()).unwrap();
    // A 2 MiB stack, like a tokio worker thread's (the store is Send).
    let root = src.path().to_path_buf();
    let err = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || store.snapshot(&root, None, &Default::default(), &skip))
        .unwrap()
        .join()
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                limit: "directory depth",
                ..
            }
        ),
        "{err}"
    );
}
