//! Tree objects: serialization (we write trees ourselves rather than through
//! `TreeBuilder`, whose strict mode looks every entry up in the object
//! database), entry kinds, the leaf diff shared by `snapshot` and `diff` (so
//! both report identical change lists), the unified diff text and its line
//! counts.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::io::Write as _;

use git2::{DiffOptions, Oid, Repository, Tree, TreeEntry};

use crate::error::{Error, git};
use crate::{Change, ChangeKind, EntryKind, MAX_DEPTH, join};

pub(crate) const MODE_TREE: i32 = 0o040000;
pub(crate) const MODE_FILE: i32 = 0o100644;
pub(crate) const MODE_EXEC: i32 = 0o100755;
pub(crate) const MODE_LINK: i32 = 0o120000;
pub(crate) const MODE_GITLINK: i32 = 0o160000;

/// Regular-file modes (libgit2 normalizes legacy ones like 100664 for us, but
/// accept any regular mode).
pub(crate) fn is_regular(mode: i32) -> bool {
    mode & 0o170000 == 0o100000
}

/// One entry of a tree being built.
pub(crate) struct Entry {
    pub name: Vec<u8>,
    pub mode: i32,
    pub id: Oid,
}

/// Git's tree order: names compared bytewise as if directories ended in '/'.
fn git_order(a: &Entry, b: &Entry) -> Ordering {
    let slash = |e: &Entry| {
        if e.mode == MODE_TREE {
            &b"/"[..]
        } else {
            &b""[..]
        }
    };
    a.name
        .iter()
        .chain(slash(a))
        .cmp(b.name.iter().chain(slash(b)))
}

/// Whether `entries` are exactly `tree`'s, in strict git order: then they
/// serialize to `tree` itself and its id needs no hashing. (Order is checked
/// too: a tree object written out of order would hash differently.)
pub(crate) fn are_entries_of(entries: &[Entry], tree: &Tree<'_>) -> bool {
    entries.len() == tree.len()
        && entries
            .iter()
            .zip(tree.iter())
            .all(|(a, e)| a.mode == e.filemode() && a.id == e.id() && a.name == e.name_bytes())
        && entries
            .windows(2)
            .all(|w| git_order(&w[0], &w[1]) == Ordering::Less)
}

/// The canonical tree object body for `entries` (sorted in place).
pub(crate) fn serialize(entries: &mut [Entry]) -> Vec<u8> {
    entries.sort_by(git_order);
    let mut out = Vec::with_capacity(entries.len() * 48);
    for e in entries.iter() {
        // Git writes modes in octal without leading zeros ("40000" for trees).
        // (`write!` into the buffer: no string allocated per entry.)
        let _ = write!(out, "{:o} ", e.mode);
        out.extend_from_slice(&e.name);
        out.push(0);
        out.extend_from_slice(e.id.as_bytes());
    }
    out
}

/// What a (non-tree) entry is; symlink targets are read from their blob.
pub(crate) fn kind_of(
    repo: &Repository,
    mode: i32,
    id: Oid,
    path: &str,
) -> Result<EntryKind, Error> {
    Ok(match mode {
        MODE_LINK => {
            let blob = repo
                .find_blob(id)
                .map_err(git(format!("reading symlink target of {path}")))?;
            EntryKind::Symlink {
                target: String::from_utf8_lossy(blob.content()).into_owned(),
            }
        }
        MODE_GITLINK => EntryKind::Submodule,
        m if is_regular(m) && m & 0o100 != 0 => EntryKind::Executable,
        m if is_regular(m) => EntryKind::File,
        _ => EntryKind::Special,
    })
}

/// Leaf changes from `old` to `new` under `prefix`, appended unsorted. Equal
/// subtree ids are skipped without being read, which keeps a one-file change
/// in a large tree cheap.
pub(crate) fn diff_trees(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: Option<&Tree<'_>>,
    prefix: &str,
    depth: usize,
    out: &mut Vec<Change>,
) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::LimitExceeded {
            path: prefix.to_string(),
            limit: "directory depth",
            max: MAX_DEPTH as u64,
        });
    }
    if let (Some(o), Some(n)) = (old, new)
        && o.id() == n.id()
    {
        return Ok(());
    }
    for o in old.iter().flat_map(|t| t.iter()) {
        let path = join(prefix, &String::from_utf8_lossy(o.name_bytes()));
        let Some(n) = new.and_then(|t| t.get_name_bytes(o.name_bytes())) else {
            emit(repo, &o, ChangeKind::Deleted, &path, depth, out)?;
            continue;
        };
        let (om, nm) = (o.filemode(), n.filemode());
        if om == nm && o.id() == n.id() {
            continue;
        }
        match (om == MODE_TREE, nm == MODE_TREE) {
            (true, true) => {
                let (ot, nt) = (
                    find_tree(repo, o.id(), &path)?,
                    find_tree(repo, n.id(), &path)?,
                );
                diff_trees(repo, Some(&ot), Some(&nt), &path, depth + 1, out)?;
            }
            // A file replaced by a directory (or back) is a delete plus adds,
            // as in git without typechange-trees.
            (true, false) | (false, true) => {
                emit(repo, &o, ChangeKind::Deleted, &path, depth, out)?;
                emit(repo, &n, ChangeKind::Added, &path, depth, out)?;
            }
            (false, false) => out.push(Change {
                entry: kind_of(repo, nm, n.id(), &path)?,
                path,
                kind: ChangeKind::Modified,
            }),
        }
    }
    for n in new.iter().flat_map(|t| t.iter()) {
        if old.and_then(|t| t.get_name_bytes(n.name_bytes())).is_none() {
            let path = join(prefix, &String::from_utf8_lossy(n.name_bytes()));
            emit(repo, &n, ChangeKind::Added, &path, depth, out)?;
        }
    }
    Ok(())
}

/// Report one entry (every leaf below it, for a tree) as added or deleted.
fn emit(
    repo: &Repository,
    e: &TreeEntry<'_>,
    kind: ChangeKind,
    path: &str,
    depth: usize,
    out: &mut Vec<Change>,
) -> Result<(), Error> {
    if e.filemode() == MODE_TREE {
        let t = find_tree(repo, e.id(), path)?;
        let (old, new) = match kind {
            ChangeKind::Deleted => (Some(&t), None),
            _ => (None, Some(&t)),
        };
        return diff_trees(repo, old, new, path, depth + 1, out);
    }
    out.push(Change {
        path: path.to_string(),
        kind,
        entry: kind_of(repo, e.filemode(), e.id(), path)?,
    });
    Ok(())
}

pub(crate) fn find_tree<'r>(repo: &'r Repository, id: Oid, path: &str) -> Result<Tree<'r>, Error> {
    // The context is formatted only on failure: this runs once per directory
    // of every walk.
    repo.find_tree(id)
        .map_err(|e| git(format!("reading tree {id} at {path:?}"))(e))
}

/// Sort by path; at one path a deletion comes before an addition.
pub(crate) fn sort_changes(changes: &mut [Change]) {
    let rank = |k: ChangeKind| match k {
        ChangeKind::Deleted => 0,
        ChangeKind::Modified => 1,
        ChangeKind::Added => 2,
    };
    changes.sort_by(|a, b| a.path.cmp(&b.path).then(rank(a.kind).cmp(&rank(b.kind))));
}

/// libgit2's diff of two trees, as both the patch text and the line counts
/// see it.
fn tree_diff(repo: &Repository, from_tree: Oid, to_tree: Oid) -> Result<git2::Diff<'_>, Error> {
    let from = find_tree(repo, from_tree, "")?;
    let to = find_tree(repo, to_tree, "")?;
    let mut opts = DiffOptions::new();
    // Files above this are reported as binary: bounds the work for huge
    // blobs whose patch could never fit a feedback budget anyway.
    opts.include_typechange(true).max_size(8 << 20);
    repo.diff_tree_to_tree(Some(&from), Some(&to), Some(&mut opts))
        .map_err(git(format!("diffing tree {from_tree} to {to_tree}")))
}

/// The path a delta is reported under (lossy UTF-8, '/'-separated, as
/// [`Change::path`] spells it).
fn delta_path(delta: &git2::DiffDelta<'_>) -> String {
    delta
        .new_file()
        .path()
        .or(delta.old_file().path())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Patch text for the deltas `keep` accepts, cut to `max_bytes`.
pub(crate) fn unified_diff(
    repo: &Repository,
    from_tree: Oid,
    to_tree: Oid,
    keep: &dyn Fn(&str) -> bool,
    max_bytes: usize,
) -> Result<String, Error> {
    let diff = tree_diff(repo, from_tree, to_tree)?;
    let mut text = String::new();
    let mut cut = false;
    for (idx, delta) in diff.deltas().enumerate() {
        let path = delta_path(&delta);
        if !keep(&path) {
            continue;
        }
        // Patches are built one delta at a time so filtered-out files cost
        // nothing and generation stops as soon as the budget is spent.
        let Some(mut patch) = git2::Patch::from_diff(&diff, idx)
            .map_err(git(format!("building the patch for {path}")))?
        else {
            continue;
        };
        let buf = patch
            .to_buf()
            .map_err(git(format!("printing the patch for {path}")))?;
        text.push_str(&String::from_utf8_lossy(&buf));
        if text.len() > max_bytes {
            cut = true;
            break;
        }
    }
    if cut {
        truncate_with_marker(&mut text, max_bytes);
    }
    Ok(text)
}

/// Added and removed lines per changed file, for the paths `keep` accepts,
/// counted by libgit2 from each file's own patch (so, unlike counting `+` and
/// `-` lines in the patch text, neither an odd file name in a header nor a
/// content line that starts with `++` or `--`, nor a patch cut short, can
/// change them). A binary file counts 0 and 0.
pub(crate) fn line_counts(
    repo: &Repository,
    from_tree: Oid,
    to_tree: Oid,
    keep: &dyn Fn(&str) -> bool,
) -> Result<BTreeMap<String, (usize, usize)>, Error> {
    let diff = tree_diff(repo, from_tree, to_tree)?;
    let mut out = BTreeMap::new();
    for (idx, delta) in diff.deltas().enumerate() {
        let path = delta_path(&delta);
        if !keep(&path) {
            continue;
        }
        let Some(patch) = git2::Patch::from_diff(&diff, idx)
            .map_err(git(format!("building the patch for {path}")))?
        else {
            continue;
        };
        let (_, added, removed) = patch
            .line_stats()
            .map_err(git(format!("counting the lines of {path}")))?;
        let entry = out.entry(path).or_insert((0, 0));
        entry.0 += added;
        entry.1 += removed;
    }
    Ok(out)
}

/// Cut `text` to at most `max_bytes` (on a char boundary), ending it with a
/// marker line when the budget has room for one.
fn truncate_with_marker(text: &mut String, max_bytes: usize) {
    let total = text.len();
    let marker = |shown: usize| format!("\n[diff truncated after {shown} bytes]\n");
    // The marker for `max_bytes` is at least as long as any smaller one.
    let room = max_bytes.checked_sub(marker(max_bytes).len());
    let mut end = room.unwrap_or(max_bytes).min(total);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    if room.is_some() {
        text.push_str(&marker(end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use git2::ObjectType;

    #[test]
    fn serialized_trees_match_libgit2() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let blob = repo.blob(b"x").unwrap();
        let sub = repo.treebuilder(None).unwrap().write().unwrap();
        // "foo" as a directory sorts as "foo/", after "foo-bar" and "foo.c".
        let spec = [
            ("foo.c", MODE_FILE, blob),
            ("foo", MODE_TREE, sub),
            ("foo-bar", MODE_EXEC, blob),
            ("fo", MODE_LINK, blob),
            ("foo0", MODE_FILE, blob),
        ];
        let mut tb = repo.treebuilder(None).unwrap();
        let mut ours = Vec::new();
        for (name, mode, id) in spec {
            tb.insert(name, id, mode).unwrap();
            ours.push(Entry {
                name: name.into(),
                mode,
                id,
            });
        }
        let theirs = tb.write().unwrap();
        let body = serialize(&mut ours);
        assert_eq!(Oid::hash_object(ObjectType::Tree, &body).unwrap(), theirs);
    }

    #[test]
    fn truncation_respects_the_budget_and_char_boundaries() {
        let mut t = "é".repeat(100);
        truncate_with_marker(&mut t, 64);
        assert!(t.len() <= 64 && t.ends_with("bytes]\n"), "{t:?}");
        let mut t = "é".repeat(100);
        truncate_with_marker(&mut t, 5);
        assert_eq!(t, "éé");
    }
}
