//! The private key store: one signing key per experiment, outside every workspace, at
//! `$EVOLVE_KEY_DIR/<id>.key`, else `<user data dir>/evolve/keys/<id>.key`.
//!
//! Beside each key `init` writes `<id>.json`, which records the workspace the key was
//! made for (the canonical path) and when. `evolve run` (anything that opens the archive
//! as its writer) brings that record up to date when the workspace has moved, or writes
//! it for a key made before records existed. `evolve keys list` reads the records and
//! `evolve keys prune` removes the keys whose workspace is gone; a key without a record
//! is never guessed about (it is removed only when asked to explicitly).

use super::{Result, Workspace, err, now};
use evolve_archive::ExperimentKey;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The schema of a key's record.
pub const META_SCHEMA: &str = "evolve.key-record.v1";

/// The largest record read back (a path and a timestamp).
const MAX_META_BYTES: u64 = 64 << 10;

/// The directory holding the private keys.
pub fn key_dir() -> Result<PathBuf> {
    match std::env::var_os("EVOLVE_KEY_DIR") {
        Some(d) if !d.is_empty() => Ok(PathBuf::from(d)),
        _ => Ok(dirs::data_dir()
            .ok_or_else(|| {
                err("no user data directory for the experiment's signing key")
                    .hint("set EVOLVE_KEY_DIR to a private directory")
            })?
            .join("evolve")
            .join("keys")),
    }
}

/// `<id>.json` beside `<id>.key`.
pub fn meta_path(key_path: &Path) -> PathBuf {
    key_path.with_extension("json")
}

/// What `<id>.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRecord {
    pub schema: String,
    pub experiment: String,
    /// The workspace's canonical path when the record was written.
    pub workspace: PathBuf,
    /// RFC 3339 UTC: when the key was made (kept when the record is rewritten).
    pub created: String,
}

/// Write `record` beside `key_path`: to a temporary file (mode 0600, never through a
/// link) that is synced and then renamed over the old record, so a reader sees the old
/// record or the new one, never half of one.
pub fn write_record(key_path: &Path, record: &KeyRecord) -> Result<()> {
    let path = meta_path(key_path);
    let fail = |what: &str, e: std::io::Error| {
        err(format!(
            "cannot {what} the key record {}: {e}",
            path.display()
        ))
    };
    let mut bytes = serde_json::to_vec_pretty(record)
        .map_err(|e| err(format!("cannot render the key record: {e}")))?;
    bytes.push(b'\n');
    let tmp = path.with_extension(format!("json.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|_| f.sync_all()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail("write", e));
    }
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail("write", e));
    }
    if let Some(dir) = path.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// The record beside `key_path`: `Ok(None)` when there is none, an error when it is
/// unreadable or not a record of `experiment`.
pub fn read_record(
    key_path: &Path,
    experiment: &str,
) -> std::result::Result<Option<KeyRecord>, String> {
    let path = meta_path(key_path);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if !meta.file_type().is_file() || meta.len() > MAX_META_BYTES {
        return Err(format!(
            "{}: not a key record (a regular file of at most {MAX_META_BYTES} bytes expected)",
            path.display()
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let record: KeyRecord = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: not a key record: {e}", path.display()))?;
    if record.schema != META_SCHEMA || record.experiment != experiment {
        return Err(format!(
            "{}: a record of schema {:?} for experiment {:?}, expected {META_SCHEMA:?} for {experiment:?}",
            path.display(),
            record.schema,
            record.experiment
        ));
    }
    Ok(Some(record))
}

/// Record that the key at `key_path` belongs to the workspace at `root`, unless its
/// record already says so. Best effort: the record is a convenience for `evolve keys`,
/// and a run must not fail over it.
pub(crate) fn note_workspace(key_path: &Path, experiment: &str, root: &Path) {
    let created = match read_record(key_path, experiment) {
        Ok(Some(r)) if r.workspace == root => return,
        Ok(Some(r)) => r.created,
        // No record (a key made before records existed) or a damaged one: the key file's
        // time is the best estimate of when the key was made.
        _ => file_time(key_path).unwrap_or_else(now),
    };
    let _ = write_record(
        key_path,
        &KeyRecord {
            schema: META_SCHEMA.into(),
            experiment: experiment.into(),
            workspace: root.to_path_buf(),
            created,
        },
    );
}

fn file_time(path: &Path) -> Option<String> {
    let t = std::fs::symlink_metadata(path).ok()?.modified().ok()?;
    Some(humantime::format_rfc3339_millis(t).to_string())
}

/// What became of the workspace a key was made for.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyState {
    /// The workspace exists and its `gen/0` names this very key.
    InUse,
    /// Nothing exists at the recorded path any more.
    Gone,
    /// The recorded path is a workspace of another key (the old one was deleted and a
    /// new one made in its place).
    Replaced { experiment: String },
    /// Something exists at the recorded path, but it cannot be opened as a workspace:
    /// kept, since it may be a damaged workspace that still needs its key.
    Unreadable(String),
    /// The key has no record (made before records existed, or the record is damaged).
    Unknown(Option<String>),
}

impl KeyState {
    pub fn label(&self) -> &'static str {
        match self {
            KeyState::InUse => "in_use",
            KeyState::Gone => "workspace_gone",
            KeyState::Replaced { .. } => "workspace_replaced",
            KeyState::Unreadable(_) => "workspace_unreadable",
            KeyState::Unknown(_) => "unknown_workspace",
        }
    }

    /// Whether `prune` removes the key (`include_unknown` for keys without a record).
    pub fn prunable(&self, include_unknown: bool) -> bool {
        match self {
            KeyState::Gone | KeyState::Replaced { .. } => true,
            KeyState::Unknown(_) => include_unknown,
            KeyState::InUse | KeyState::Unreadable(_) => false,
        }
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            KeyState::InUse => "the workspace exists and uses this key".into(),
            KeyState::Gone => "the workspace no longer exists".into(),
            KeyState::Replaced { experiment } => {
                format!("the path now holds another workspace (experiment {experiment})")
            }
            KeyState::Unreadable(why) => {
                format!("kept: the path exists but is not readable as a workspace: {why}")
            }
            KeyState::Unknown(None) => "unknown workspace (no record beside the key)".into(),
            KeyState::Unknown(Some(why)) => format!("unknown workspace (damaged record: {why})"),
        }
    }
}

/// One private key of the store.
#[derive(Debug, Clone)]
pub struct StoredKey {
    pub experiment: String,
    pub key_file: PathBuf,
    pub workspace: Option<PathBuf>,
    pub created: Option<String>,
    pub state: KeyState,
}

/// Every `<id>.key` of the store, sorted by experiment id; an absent store is empty.
pub fn list() -> Result<(PathBuf, Vec<StoredKey>)> {
    let dir = key_dir()?;
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((dir, Vec::new())),
        Err(e) => {
            return Err(err(format!(
                "cannot list the key store {}: {e}",
                dir.display()
            )));
        }
    };
    let mut keys = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| err(format!("cannot list the key store {}: {e}", dir.display())))?;
        let name = entry.file_name();
        let Some(experiment) = name.to_str().and_then(|n| n.strip_suffix(".key")) else {
            continue;
        };
        if experiment.is_empty() || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        keys.push(inspect(&entry.path(), experiment));
    }
    keys.sort_by(|a, b| a.experiment.cmp(&b.experiment));
    Ok((dir, keys))
}

/// What the record of one key says, and what is at the path it names.
fn inspect(key_file: &Path, experiment: &str) -> StoredKey {
    let record = read_record(key_file, experiment);
    let (workspace, created, state) = match record {
        Ok(Some(r)) => {
            let state = workspace_state(&r.workspace, key_file, experiment);
            (Some(r.workspace), Some(r.created), state)
        }
        Ok(None) => (None, file_time(key_file), KeyState::Unknown(None)),
        Err(why) => (None, file_time(key_file), KeyState::Unknown(Some(why))),
    };
    StoredKey {
        experiment: experiment.into(),
        key_file: key_file.to_path_buf(),
        workspace,
        created,
        state,
    }
}

fn workspace_state(root: &Path, key_file: &Path, experiment: &str) -> KeyState {
    match std::fs::symlink_metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return KeyState::Gone,
        Err(e) => return KeyState::Unreadable(e.to_string()),
        Ok(_) => {}
    }
    let ws = match Workspace::open(root) {
        Ok(ws) => ws,
        Err(e) => return KeyState::Unreadable(e.what),
    };
    if ws.experiment_id != experiment {
        return KeyState::Replaced {
            experiment: ws.experiment_id,
        };
    }
    // Same experiment id: the public key committed in gen/0 must be this key's half.
    match ExperimentKey::load(key_file, experiment) {
        Ok(k) if k.public().key_id() == ws.public_key.key_id() => KeyState::InUse,
        Ok(_) => KeyState::Unreadable(format!(
            "its gen/0 public key is not this key's (experiment {experiment})"
        )),
        Err(e) => KeyState::Unreadable(format!("the key file: {e}")),
    }
}

/// Remove `key`'s private key and its record. Returns an error naming the file.
pub fn remove(key: &StoredKey) -> Result<()> {
    std::fs::remove_file(&key.key_file)
        .map_err(|e| err(format!("cannot remove {}: {e}", key.key_file.display())))?;
    match std::fs::remove_file(meta_path(&key.key_file)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(err(format!(
            "removed {} but not its record: {e}",
            key.key_file.display()
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_foreign_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("exp-1.key");
        let rec = KeyRecord {
            schema: META_SCHEMA.into(),
            experiment: "exp-1".into(),
            workspace: dir.path().join("ws"),
            created: now(),
        };
        write_record(&key, &rec).unwrap();
        assert_eq!(read_record(&key, "exp-1").unwrap(), Some(rec));
        assert!(read_record(&key, "exp-2").unwrap_err().contains("exp-2"));
        assert_eq!(read_record(&dir.path().join("x.key"), "x").unwrap(), None);
    }

    #[test]
    fn only_gone_or_replaced_workspaces_are_pruned_by_default() {
        assert!(KeyState::Gone.prunable(false));
        assert!(!KeyState::InUse.prunable(true));
        assert!(!KeyState::Unreadable("x".into()).prunable(true));
        assert!(!KeyState::Unknown(None).prunable(false));
        assert!(KeyState::Unknown(None).prunable(true));
    }
}
