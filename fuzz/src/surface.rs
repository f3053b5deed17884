//! The surface matcher: include/exclude globs, the implicit excludes, and the change
//! check (paths, symlink targets, submodules, special files).

use arbitrary::{Arbitrary, Unstructured};
use evolve_snapshot::{Change, ChangeKind, EntryKind, Surface};

#[derive(Debug, Arbitrary)]
struct Input {
    include: Vec<String>,
    exclude: Vec<String>,
    changes: Vec<(String, u8, Option<String>)>,
}

fn change((path, kind, link): (String, u8, Option<String>)) -> Change {
    let change_kind = match kind % 3 {
        0 => ChangeKind::Added,
        1 => ChangeKind::Modified,
        _ => ChangeKind::Deleted,
    };
    let entry = match (link, kind / 3 % 4) {
        (Some(target), _) => EntryKind::Symlink { target },
        (None, 0) => EntryKind::File,
        (None, 1) => EntryKind::Executable,
        (None, 2) => EntryKind::Submodule,
        (None, _) => EntryKind::Special,
    };
    Change {
        path,
        kind: change_kind,
        entry,
    }
}

/// Build a surface from arbitrary globs and check arbitrary changes against it.
/// Invariants: `includes_dir` is conservative (it never denies a directory holding an
/// allowed path: the snapshot skips walking denied directories), and `check` reports
/// every change whose path `allows` rejects.
pub fn check(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let Ok(surface) = Surface::new(&input.include, &input.exclude) else {
        return;
    };
    let changes: Vec<Change> = input.changes.into_iter().map(change).collect();
    let violations = surface.check(&changes);
    for c in &changes {
        if surface.allows(&c.path) {
            for (i, _) in c.path.match_indices('/') {
                let dir = &c.path[..i];
                assert!(
                    surface.includes_dir(dir),
                    "{:?} is allowed but its directory {dir:?} is said to hold nothing allowed",
                    c.path
                );
            }
        } else {
            assert!(
                violations.iter().any(|v| v.path == c.path),
                "{:?} is not allowed but check() reported nothing for it",
                c.path
            );
        }
    }
}
