//! Evidence bundles: `evolve export OUT` writes one, `evolve verify --bundle OUT` checks
//! it with the public key alone (no workspace, no private key).
//!
//! ```text
//! OUT/
//!   manifest.json       schema, experiment, gen/* tags → commits, SHA-256 and size of each file
//!   archive.jsonl       the certified event log
//!   receipts.jsonl      one signed receipt per event
//!   archive.pub         the experiment's public key (also committed in gen/0 as keys/archive.pub)
//!   champion.json       the champion cache (compared, never trusted), when the workspace has one
//!   generations.bundle  a git bundle (v2) of every gen/* tag: `git clone` reads it
//!   README.md           what this is and how to check it
//! ```
//!
//! The git bundle is written here rather than by `git bundle create`: libgit2 has no
//! bundle writer, the format is a short header of refs followed by one pack (which
//! libgit2 builds and indexes), and so neither export nor verify needs `git` installed.

use crate::command::CliError;
use crate::layout;
use crate::workspace::evidence::{Evidence, events_at, read_json};
use crate::workspace::{Workspace, now};
use evolve_archive::PublicKey;
use evolve_snapshot::{Oid, Store};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const MANIFEST: &str = "manifest.json";
pub const SCHEMA: &str = "evolve.bundle.v1";
const ARCHIVE: &str = "archive.jsonl";
const RECEIPTS: &str = "receipts.jsonl";
const PUBLIC_KEY: &str = "archive.pub";
const CHAMPION: &str = "champion.json";
const GIT_BUNDLE: &str = "generations.bundle";
const README: &str = "README.md";
const BUNDLE_HEADER: &[u8] = b"# v2 git bundle\n";

/// What `export` wrote.
pub struct Exported {
    pub dir: PathBuf,
    pub tags: usize,
    pub files: Vec<String>,
}

/// Write the evidence bundle of `ws` to `out` (which must not exist, or be empty). It is
/// assembled beside `out` and moved into place, so a failed export leaves nothing behind.
pub fn export(ws: &Workspace, out: &Path) -> Result<Exported, CliError> {
    if out.exists() && std::fs::read_dir(out).map_or(true, |mut d| d.next().is_some()) {
        return Err(CliError::usage("the export directory is not empty")
            .at(out.display().to_string())
            .hint("choose a new directory; an export never overwrites anything"));
    }
    // The run lock keeps a running `evolve run` from appending while the files are copied.
    let _lock = evolve_archive::RunLock::acquire(ws.root()).map_err(|e| {
        CliError::usage(e.to_string())
            .at(ws.root().display().to_string())
            .hint("a run holds the workspace: wait for it (or stop it), then export")
    })?;
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("bundle");
    let tmp = out.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let written = write_parts(ws, &tmp);
    let result = written.and_then(|(tags, files)| {
        let _ = std::fs::remove_dir(out);
        std::fs::rename(&tmp, out)
            .map_err(|e| io_error("cannot move the bundle into place", out, e))?;
        Ok(Exported {
            dir: out.to_path_buf(),
            tags,
            files,
        })
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

fn io_error(what: &str, path: &Path, e: impl std::fmt::Display) -> CliError {
    CliError::usage(format!("{what}: {e}")).at(path.display().to_string())
}

/// Write every file of the bundle into `dir`; returns the tag count and the file names.
fn write_parts(ws: &Workspace, dir: &Path) -> Result<(usize, Vec<String>), CliError> {
    std::fs::create_dir_all(dir).map_err(|e| io_error("cannot create", dir, e))?;
    let copy = |from: &Path, name: &str| {
        std::fs::copy(from, dir.join(name))
            .map(|_| ())
            .map_err(|e| io_error("cannot copy", from, e))
    };
    copy(&ws.paths.archive(), ARCHIVE)?;
    copy(&ws.paths.receipts(), RECEIPTS)?;
    let mut files = vec![ARCHIVE.to_string(), RECEIPTS.to_string()];
    let key = serde_json::to_vec_pretty(&ws.public_key.to_value()).unwrap_or_default();
    write_file(&dir.join(PUBLIC_KEY), &key)?;
    files.push(PUBLIC_KEY.into());
    if ws.paths.champion_cache().is_file() {
        copy(&ws.paths.champion_cache(), CHAMPION)?;
        files.push(CHAMPION.into());
    }
    let tags = ws
        .store
        .tags("gen/")
        .map_err(|e| CliError::usage(format!("cannot list the gen/* tags: {e}")))?;
    let repo = git2::Repository::open(ws.root()).map_err(|e| {
        CliError::usage(format!("cannot open the workspace repository: {e}"))
            .at(ws.root().display().to_string())
    })?;
    let bundle = write_git_bundle(&repo, &tags)?;
    write_file(&dir.join(GIT_BUNDLE), &bundle)?;
    files.push(GIT_BUNDLE.into());
    write_file(&dir.join(README), readme(ws).as_bytes())?;
    files.push(README.into());
    let manifest = manifest(ws, dir, &tags, &files)?;
    write_file(
        &dir.join(MANIFEST),
        &serde_json::to_vec_pretty(&manifest).unwrap_or_default(),
    )?;
    Ok((tags.len(), files))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let mut f = std::fs::File::create(path).map_err(|e| io_error("cannot create", path, e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| io_error("cannot write", path, e))
}

fn sha256_file(path: &Path) -> std::io::Result<(String, u64)> {
    let bytes = std::fs::read(path)?;
    Ok((hex(&Sha256::digest(&bytes)), bytes.len() as u64))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn manifest(
    ws: &Workspace,
    dir: &Path,
    tags: &[(String, Oid)],
    files: &[String],
) -> Result<Value, CliError> {
    let mut digests = Map::new();
    for name in files {
        let (sha, bytes) = sha256_file(&dir.join(name))
            .map_err(|e| io_error("cannot read", &dir.join(name), e))?;
        digests.insert(name.clone(), json!({"sha256": sha, "bytes": bytes}));
    }
    let tag_map: Map<String, Value> = tags
        .iter()
        .map(|(n, o)| (n.clone(), json!(o.to_string())))
        .collect();
    Ok(json!({
        "schema": SCHEMA,
        "experiment": ws.experiment_id,
        "created": now(),
        "evolve_version": env!("CARGO_PKG_VERSION"),
        "tags": tag_map,
        "files": digests,
    }))
}

fn readme(ws: &Workspace) -> String {
    format!(
        "# Evidence bundle of experiment {}\n\n\
         Exported by `evolve export` ({}). Check it, without the workspace or the private key:\n\n\
         ```sh\nevolve verify --bundle <this directory>\n```\n\n\
         `generations.bundle` holds every `gen/*` tag; `git clone generations.bundle repo` \
         reads it. `manifest.json` lists the SHA-256 of every file.\n",
        ws.experiment_id,
        now()
    )
}

/// A git bundle (v2) of `tags`: the header names each tag, the pack holds every commit
/// reachable from them with its trees and blobs (no prerequisites).
pub fn write_git_bundle(
    repo: &git2::Repository,
    tags: &[(String, Oid)],
) -> Result<Vec<u8>, CliError> {
    let git = |what: &str| {
        let what = what.to_string();
        move |e: git2::Error| CliError::usage(format!("cannot build the git bundle: {what}: {e}"))
    };
    let mut out = BUNDLE_HEADER.to_vec();
    let mut walk = repo.revwalk().map_err(git("revwalk"))?;
    for (name, oid) in tags {
        out.extend_from_slice(format!("{oid} refs/tags/{name}\n").as_bytes());
        walk.push(*oid).map_err(git(name))?;
    }
    out.push(b'\n');
    let mut pack = repo.packbuilder().map_err(git("packbuilder"))?;
    pack.insert_walk(&mut walk)
        .map_err(git("collecting objects"))?;
    let mut buf = git2::Buf::new();
    pack.write_buf(&mut buf).map_err(git("writing the pack"))?;
    out.extend_from_slice(&buf);
    Ok(out)
}

/// Read a git bundle (v2, no prerequisites) into `repo`: index its pack and create its
/// refs. Returns the refs (name without `refs/tags/`, commit).
pub fn read_git_bundle(
    repo: &git2::Repository,
    bytes: &[u8],
) -> Result<Vec<(String, Oid)>, String> {
    let rest = bytes
        .strip_prefix(BUNDLE_HEADER)
        .ok_or("not a v2 git bundle (the first line is not `# v2 git bundle`)")?;
    let mut refs = Vec::new();
    let mut at = 0;
    loop {
        let end = rest[at..]
            .iter()
            .position(|b| *b == b'\n')
            .ok_or("the bundle header never ends")?;
        let line = std::str::from_utf8(&rest[at..at + end])
            .map_err(|_| "the bundle header is not UTF-8")?;
        at += end + 1;
        if line.is_empty() {
            break;
        }
        if line.starts_with('-') {
            return Err(format!(
                "the bundle has a prerequisite ({line}): it is not self-contained"
            ));
        }
        let (oid, name) = line
            .split_once(' ')
            .ok_or_else(|| format!("bad bundle header line `{line}`"))?;
        let oid = Oid::from_str(oid).map_err(|e| format!("bad object id in `{line}`: {e}"))?;
        let tag = name
            .strip_prefix("refs/tags/")
            .ok_or_else(|| format!("the bundle names `{name}`, not a tag"))?;
        refs.push((tag.to_string(), oid));
    }
    let odb = repo.odb().map_err(|e| e.to_string())?;
    let mut writer = odb.packwriter().map_err(|e| e.to_string())?;
    writer
        .write_all(&rest[at..])
        .map_err(|e| format!("the bundle's pack is unreadable: {e}"))?;
    writer
        .commit()
        .map_err(|e| format!("the bundle's pack is invalid: {e}"))?;
    for (tag, oid) in &refs {
        repo.reference(
            &format!("refs/tags/{tag}"),
            *oid,
            false,
            "evolve verify --bundle",
        )
        .map_err(|e| format!("cannot create tag {tag}: {e}"))?;
    }
    Ok(refs)
}

/// An exported bundle opened for verification: its files, a scratch repository holding
/// the bundled commits, and what is wrong with the bundle itself (beyond the archive).
pub struct Opened {
    dir: PathBuf,
    _repo_dir: tempfile::TempDir,
    store: Store,
    public_key: PublicKey,
    evaluator_tree: Oid,
    pub findings: Vec<String>,
}

impl Opened {
    pub fn open(dir: &Path) -> Result<Opened, CliError> {
        let at = || dir.display().to_string();
        let manifest = read_json(&dir.join(MANIFEST)).ok_or_else(|| {
            CliError::usage(format!("no readable {MANIFEST}: not an evidence bundle"))
                .at(at())
                .hint("`evolve export OUT -w WORKSPACE` writes one")
        })?;
        if manifest.get("schema").and_then(Value::as_str) != Some(SCHEMA) {
            return Err(CliError::usage(format!(
                "{MANIFEST} has schema {}, expected `{SCHEMA}`",
                manifest.get("schema").unwrap_or(&Value::Null)
            ))
            .at(at()));
        }
        let mut findings = check_files(dir, &manifest);
        let public_key = read_json(&dir.join(PUBLIC_KEY))
            .ok_or_else(|| CliError::usage(format!("{PUBLIC_KEY} is missing or not JSON")).at(at()))
            .and_then(|v| {
                PublicKey::from_value(&v)
                    .map_err(|e| CliError::usage(format!("{PUBLIC_KEY}: {e}")).at(at()))
            })?;
        let repo_dir = tempfile::tempdir()
            .map_err(|e| CliError::usage(format!("cannot create a scratch directory: {e}")))?;
        let repo = git2::Repository::init(repo_dir.path())
            .map_err(|e| CliError::usage(format!("cannot create a scratch repository: {e}")))?;
        let bytes = std::fs::read(dir.join(GIT_BUNDLE))
            .map_err(|e| io_error("cannot read", &dir.join(GIT_BUNDLE), e))?;
        let refs = read_git_bundle(&repo, &bytes).map_err(|e| {
            CliError {
                code: 1,
                ..CliError::usage(e)
            }
            .at(dir.join(GIT_BUNDLE).display().to_string())
        })?;
        findings.extend(check_tags(&manifest, &refs));
        drop(repo);
        let store = Store::open(repo_dir.path())
            .map_err(|e| CliError::usage(format!("cannot open the scratch repository: {e}")))?;
        let genesis = store
            .tag_target(&layout::tag_name("0"))
            .ok()
            .flatten()
            .ok_or_else(|| {
                CliError {
                    code: 1,
                    ..CliError::usage("the git bundle has no gen/0 tag")
                }
                .at(dir.join(GIT_BUNDLE).display().to_string())
            })?;
        let evaluator_tree = store
            .subtree(genesis, layout::EVALUATOR_DIR)
            .ok()
            .flatten()
            .ok_or_else(|| {
                CliError {
                    code: 1,
                    ..CliError::usage("gen/0 in the git bundle has no evaluator/ tree")
                }
                .at(at())
            })?;
        findings.extend(check_public_key(&store, genesis, &public_key));
        Ok(Opened {
            dir: dir.to_path_buf(),
            _repo_dir: repo_dir,
            store,
            public_key,
            evaluator_tree,
            findings,
        })
    }

    /// The agent driver's recipe audit (see `verify_recipes`), without the frozen
    /// components, which a bundle does not carry.
    pub(crate) fn recipe_findings(&self) -> Vec<String> {
        let Some(genesis) = self.store.tag_target(&layout::tag_name("0")).ok().flatten() else {
            return vec!["the repository has no gen/0 tag".into()];
        };
        let events = events_at(&self.dir.join(ARCHIVE));
        crate::lifecycle::agent_driver::verify_recipes_in(&self.store, genesis, None, &events)
    }

    pub(crate) fn evidence(&self) -> Evidence<'_> {
        Evidence {
            archive: self.dir.join(ARCHIVE),
            receipts: self.dir.join(RECEIPTS),
            public_key: &self.public_key,
            store: &self.store,
            evaluator_tree: self.evaluator_tree,
            champion_cache: read_json(&self.dir.join(CHAMPION)),
        }
    }
}

/// Every file the manifest lists must be there with its digest; nothing else may be.
fn check_files(dir: &Path, manifest: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let listed = manifest
        .get("files")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for required in [ARCHIVE, RECEIPTS, PUBLIC_KEY, GIT_BUNDLE] {
        if !listed.contains_key(required) {
            out.push(format!("{MANIFEST} does not list {required}"));
        }
    }
    for (name, want) in &listed {
        let expected = want.get("sha256").and_then(Value::as_str).unwrap_or("");
        match sha256_file(&dir.join(name)) {
            Ok((sha, _)) if sha == expected => {}
            Ok((sha, _)) => out.push(format!(
                "{name}: SHA-256 {sha} differs from the manifest's {expected} (the file was changed after export)"
            )),
            Err(e) => out.push(format!("{name}: listed in {MANIFEST} but unreadable: {e}")),
        }
    }
    out
}

/// The bundle's refs must be exactly the manifest's tags.
fn check_tags(manifest: &Value, refs: &[(String, Oid)]) -> Vec<String> {
    let listed: Map<String, Value> = manifest
        .get("tags")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for (tag, oid) in refs {
        match listed.get(tag).and_then(Value::as_str) {
            Some(c) if c == oid.to_string() => {}
            Some(c) => out.push(format!(
                "{tag}: the git bundle names {oid}, the manifest {c}"
            )),
            None => out.push(format!("{tag}: in the git bundle but not in {MANIFEST}")),
        }
    }
    for tag in listed.keys() {
        if !refs.iter().any(|(t, _)| t == tag) {
            out.push(format!("{tag}: in {MANIFEST} but not in the git bundle"));
        }
    }
    out
}

/// The bundle's public key must be the one gen/0 committed.
fn check_public_key(store: &Store, genesis: Oid, key: &PublicKey) -> Vec<String> {
    let committed = store
        .read_blob(genesis, layout::PUBLIC_KEY_FILE, 1 << 20)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| PublicKey::from_value(&v).ok());
    match committed {
        Some(k) if k.to_value() == key.to_value() => Vec::new(),
        Some(_) => vec![format!(
            "{PUBLIC_KEY} differs from the key gen/0 committed as {}",
            layout::PUBLIC_KEY_FILE
        )],
        None => vec![format!(
            "gen/0 has no readable {}: the public key cannot be tied to the experiment",
            layout::PUBLIC_KEY_FILE
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(repo: &git2::Repository, file: &str, text: &str, parent: Option<Oid>) -> Oid {
        let blob = repo.blob(text.as_bytes()).unwrap();
        let mut tb = repo.treebuilder(None).unwrap();
        tb.insert(file, blob, 0o100644).unwrap();
        let tree = repo.find_tree(tb.write().unwrap()).unwrap();
        let sig = git2::Signature::new("t", "t@example.invalid", &git2::Time::new(0, 0)).unwrap();
        let parents: Vec<git2::Commit> = parent
            .map(|p| repo.find_commit(p).unwrap())
            .into_iter()
            .collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        repo.commit(None, &sig, &sig, "m", &tree, &refs).unwrap()
    }

    #[test]
    fn a_written_bundle_reads_back_with_its_tags_and_history() {
        let src_dir = tempfile::tempdir().unwrap();
        let src = git2::Repository::init(src_dir.path()).unwrap();
        let c0 = commit(&src, "a.txt", "zero\n", None);
        let c1 = commit(&src, "a.txt", "one\n", Some(c0));
        let tags = vec![("gen/0".to_string(), c0), ("gen/1".to_string(), c1)];
        let bytes = write_git_bundle(&src, &tags).unwrap();
        assert!(bytes.starts_with(BUNDLE_HEADER));

        let dst_dir = tempfile::tempdir().unwrap();
        let dst = git2::Repository::init(dst_dir.path()).unwrap();
        assert_eq!(read_git_bundle(&dst, &bytes).unwrap(), tags);
        let got = dst.find_commit(c1).unwrap();
        assert_eq!(got.parent_id(0).unwrap(), c0);
        let blob = got.tree().unwrap().get_name("a.txt").unwrap().id();
        assert_eq!(dst.find_blob(blob).unwrap().content(), b"one\n");
        assert_eq!(
            dst.refname_to_id("refs/tags/gen/1").unwrap(),
            c1,
            "the tag names the commit"
        );

        // git itself reads it, when it is installed.
        let path = src_dir.path().join("x.bundle");
        std::fs::write(&path, &bytes).unwrap();
        match std::process::Command::new("git")
            .args(["bundle", "verify"])
            .arg(&path)
            .current_dir(src_dir.path())
            .output()
        {
            Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => eprintln!("git not runnable ({e}): skipped `git bundle verify`"),
        }
    }

    #[test]
    fn a_damaged_bundle_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        assert!(
            read_git_bundle(&repo, b"PK\x03\x04")
                .unwrap_err()
                .contains("not a v2 git bundle")
        );
        let c = "0".repeat(40);
        let prereq = format!("# v2 git bundle\n-{c} x\n\n");
        assert!(
            read_git_bundle(&repo, prereq.as_bytes())
                .unwrap_err()
                .contains("prerequisite")
        );
        let bad_pack = format!("# v2 git bundle\n{c} refs/tags/gen/0\n\nPACKjunk");
        assert!(
            read_git_bundle(&repo, bad_pack.as_bytes())
                .unwrap_err()
                .contains("pack")
        );
    }
}
