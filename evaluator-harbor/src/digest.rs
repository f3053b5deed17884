//! Content digests: RFC 8785 canonical JSON + SHA-256, never following symlinks.
//!
//! A task digest covers, for every entry under the task directory (sorted by relative path,
//! `/`-separated): the path, the type (`file`, `dir`, `symlink`), a git-style mode
//! (`100644`, `100755`, `040000`, `120000`; only the executable bit of a file counts, so the
//! digest survives umask differences and git checkouts) and the SHA-256 of the bytes (file
//! contents, or the symlink target). Symlinks that point outside the task, absolute symlinks,
//! and special files (fifos, sockets, devices) are errors.

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind, Result};

/// `sha256:<64 hex>`.
pub fn sha256_prefixed(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// RFC 8785 canonical JSON bytes of a serializable value.
pub fn canonical_json<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json_canonicalizer::to_vec(value)
        .map_err(|e| Error::infra(format!("cannot canonicalize JSON: {e}")))
}

/// `sha256:` digest of the canonical JSON of `value`.
pub fn canonical_digest<T: Serialize>(value: &T) -> Result<String> {
    Ok(sha256_prefixed(&canonical_json(value)?))
}

/// One entry of a task's content listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub path: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub mode: &'static str,
    pub sha256: Option<String>,
}

/// List a task directory's entries (sorted, no symlink following).
pub fn task_entries(dir: &Path) -> Result<Vec<Entry>> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| Error::io("cannot read task", dir, e))?;
    if !meta.is_dir() {
        return Err(
            Error::invalid_task("task must be a real directory, not a symlink or file")
                .at_path(dir),
        );
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    Ok(out)
}

fn rel_str(root: &Path, p: &Path) -> Result<String> {
    let rel = p.strip_prefix(root).unwrap_or(p);
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(s) => {
                parts.push(s.to_str().ok_or_else(|| {
                    Error::invalid_task("file name is not valid UTF-8").at_path(p)
                })?)
            }
            _ => return Err(Error::invalid_task("unexpected path component").at_path(p)),
        }
    }
    Ok(parts.join("/"))
}

/// Whether a relative symlink target stays inside the task when resolved from `link_rel_dir`.
pub(crate) fn symlink_stays_inside(link_rel_parent: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth: i64 = link_rel_parent
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count() as i64;
    for c in target.components() {
        match c {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            _ => return false,
        }
    }
    true
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Entry>) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io("cannot list", dir, e))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io("cannot list", dir, e))?;
        let p = ent.path();
        let meta = std::fs::symlink_metadata(&p).map_err(|e| Error::io("cannot stat", &p, e))?;
        let rel = rel_str(root, &p)?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target =
                std::fs::read_link(&p).map_err(|e| Error::io("cannot read symlink", &p, e))?;
            let parent = Path::new(&rel).parent().unwrap_or(Path::new(""));
            if !symlink_stays_inside(parent, &target) {
                return Err(Error::invalid_task(format!(
                    "symlink points outside the task: {}",
                    target.display()
                ))
                .at_path(&p));
            }
            let t = target.to_str().ok_or_else(|| {
                Error::invalid_task("symlink target is not valid UTF-8").at_path(&p)
            })?;
            out.push(Entry {
                path: rel,
                kind: "symlink",
                mode: "120000",
                sha256: Some(hex(&Sha256::digest(t.as_bytes()))),
            });
        } else if ft.is_dir() {
            out.push(Entry {
                path: rel,
                kind: "dir",
                mode: "040000",
                sha256: None,
            });
            walk(root, &p, out)?;
        } else if ft.is_file() {
            let bytes = std::fs::read(&p).map_err(|e| Error::io("cannot read", &p, e))?;
            let exec = meta.permissions().mode() & 0o111 != 0;
            out.push(Entry {
                path: rel,
                kind: "file",
                mode: if exec { "100755" } else { "100644" },
                sha256: Some(hex(&Sha256::digest(&bytes))),
            });
        } else {
            return Err(Error::invalid_task(
                "special file (fifo, socket or device) is not allowed in a task",
            )
            .at_path(&p));
        }
    }
    Ok(())
}

/// The content digest of one task directory: `sha256:` of the canonical JSON
/// `{"schema":"evolve.task-digest.v1","entries":[...]}`.
pub fn task_digest(dir: &Path) -> Result<String> {
    entries_digest(&task_entries(dir)?)
}

/// The digest [`task_digest`] gives a directory holding exactly these regular files
/// (task-relative paths, executable bit, bytes) and the directories they are in.
pub fn files_digest<'a>(
    files: impl IntoIterator<Item = (&'a str, bool, &'a [u8])>,
) -> Result<String> {
    let mut dirs = std::collections::BTreeSet::new();
    let mut entries = Vec::new();
    for (path, executable, bytes) in files {
        let mut at = 0;
        while let Some(slash) = path[at..].find('/') {
            dirs.insert(&path[..at + slash]);
            at += slash + 1;
        }
        entries.push(Entry {
            path: path.to_string(),
            kind: "file",
            mode: if executable { "100755" } else { "100644" },
            sha256: Some(hex(&Sha256::digest(bytes))),
        });
    }
    entries.extend(dirs.into_iter().map(|d| Entry {
        path: d.to_string(),
        kind: "dir",
        mode: "040000",
        sha256: None,
    }));
    entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    entries_digest(&entries)
}

fn entries_digest(entries: &[Entry]) -> Result<String> {
    #[derive(Serialize)]
    struct Doc<'a> {
        schema: &'static str,
        entries: &'a [Entry],
    }
    canonical_digest(&Doc {
        schema: "evolve.task-digest.v1",
        entries,
    })
}

/// Verify `dir` against `expected`, with a clear message naming the task on mismatch.
pub fn verify_task(name: &str, dir: &Path, expected: &str) -> Result<()> {
    let actual = task_digest(dir)?;
    if actual != expected {
        return Err(Error::new(
            ErrorKind::DigestMismatch,
            format!(
                "task {name:?} changed since the task set was frozen: digest {actual} != frozen {expected}"
            ),
        )
        .at_path(dir)
        .hint("tasks are frozen at workspace init; restore the task or re-initialize the workspace"));
    }
    Ok(())
}

/// Copy a task directory without following symlinks (in-task relative symlinks are copied as
/// symlinks; anything else that could escape is refused).
pub fn copy_task(src: &Path, dst: &Path) -> Result<()> {
    for e in task_entries(src)? {
        let from = src.join(&e.path);
        let to: PathBuf = dst.join(&e.path);
        match e.kind {
            "dir" => {
                std::fs::create_dir_all(&to).map_err(|er| Error::io("cannot create", &to, er))?
            }
            "symlink" => {
                let t = std::fs::read_link(&from)
                    .map_err(|er| Error::io("cannot read symlink", &from, er))?;
                std::os::unix::fs::symlink(&t, &to)
                    .map_err(|er| Error::io("cannot create symlink", &to, er))?;
            }
            _ => {
                // Named by the copy's destination: that is where a full disk or a
                // read-only directory is; a missing source names itself in the message.
                std::fs::copy(&from, &to)
                    .map_err(|er| Error::io(&format!("cannot copy {}", from.display()), &to, er))?;
            }
        }
    }
    Ok(())
}

/// Copy a frozen task into `dst` and verify the copy against its frozen digest.
pub fn snapshot_verified(name: &str, src: &Path, dst: &Path, expected: &str) -> Result<()> {
    std::fs::create_dir_all(dst).map_err(|e| Error::io("cannot create snapshot dir", dst, e))?;
    copy_task(src, dst)?;
    verify_task(name, dst, expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jcs_orders_keys_and_numbers() {
        let v = serde_json::json!({"b": 1.0, "a": [true, null, 1e21], "é": "x"});
        let s = String::from_utf8(canonical_json(&v).unwrap()).unwrap();
        assert_eq!(s, r#"{"a":[true,null,1e+21],"b":1,"é":"x"}"#);
    }

    #[test]
    fn symlink_escape_detection() {
        assert!(symlink_stays_inside(Path::new("a"), Path::new("../b")));
        assert!(!symlink_stays_inside(Path::new("a"), Path::new("../../b")));
        assert!(!symlink_stays_inside(
            Path::new(""),
            Path::new("/etc/passwd")
        ));
    }

    #[test]
    fn digest_covers_bytes_modes_and_names() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("t");
        std::fs::create_dir_all(t.join("tests")).unwrap();
        std::fs::write(t.join("tests/test.sh"), "echo 1\n").unwrap();
        let a = task_digest(&t).unwrap();
        assert_eq!(a, task_digest(&t).unwrap());
        std::fs::set_permissions(
            t.join("tests/test.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let b = task_digest(&t).unwrap();
        assert_ne!(a, b);
        std::fs::write(t.join("tests/test.sh"), "echo 2\n").unwrap();
        assert_ne!(b, task_digest(&t).unwrap());
        std::os::unix::fs::symlink("/etc/passwd", t.join("evil")).unwrap();
        assert!(task_digest(&t).unwrap_err().message.contains("outside"));
    }
}
