//! The per-experiment Ed25519 signing key (kept outside the workspace, mode 0600) and its
//! public half (committed in the workspace).

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde_json::{Value, json};

use crate::canonical::{canonical_bytes, hex, sha256_hex, unhex};

/// Errors about key files.
#[derive(Debug)]
pub enum KeyError {
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The secret key file is readable or writable by group or others.
    InsecurePermissions { path: PathBuf, mode: u32 },
    /// Refusing to overwrite an existing key.
    Exists(PathBuf),
    /// The file is not a key file of this crate, or not for this experiment.
    Invalid { path: PathBuf, message: String },
    /// The OS random generator failed.
    Random(String),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            KeyError::InsecurePermissions { path, mode } => write!(
                f,
                "refusing to use signing key {}: its mode is {mode:04o}, which lets group or others access it; \
                 run `chmod 600 {}` if you trust its contents, or treat the key as compromised",
                path.display(),
                path.display()
            ),
            KeyError::Exists(p) => write!(
                f,
                "a key already exists at {}; refusing to overwrite it",
                p.display()
            ),
            KeyError::Invalid { path, message } => write!(f, "{}: {message}", path.display()),
            KeyError::Random(m) => write!(f, "cannot generate a key: {m}"),
        }
    }
}

impl std::error::Error for KeyError {}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn invalid(path: &Path, message: impl Into<String>) -> KeyError {
    KeyError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The key id: hex SHA-256 of the 32 raw public key bytes.
pub fn key_id_of(public: &VerifyingKey) -> String {
    sha256_hex(public.as_bytes())
}

/// The canonical bytes a receipt signs: `{"event_sha256": h, "experiment": id, "seq": n}`.
pub fn receipt_message(experiment_id: &str, seq: u64, event_sha256: &str) -> Vec<u8> {
    canonical_bytes(
        &json!({ "experiment": experiment_id, "seq": seq, "event_sha256": event_sha256 }),
    )
}

/// An experiment's signing key. Only the host process holds it. (`evolve init` clones it
/// once: one copy is saved while the archive signs its genesis events with the other.)
#[derive(Clone)]
pub struct ExperimentKey {
    experiment_id: String,
    signing: SigningKey,
    key_id: String,
}

impl fmt::Debug for ExperimentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExperimentKey")
            .field("experiment_id", &self.experiment_id)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl ExperimentKey {
    /// A fresh key from the OS CSPRNG (not saved).
    pub fn generate(experiment_id: &str) -> Result<ExperimentKey, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(Self::from_seed(experiment_id, seed))
    }

    /// A key from a 32-byte seed (deterministic; for tests and benchmarks).
    pub fn from_seed(experiment_id: &str, seed: [u8; 32]) -> ExperimentKey {
        let signing = SigningKey::from_bytes(&seed);
        let key_id = key_id_of(&signing.verifying_key());
        ExperimentKey {
            experiment_id: experiment_id.to_string(),
            signing,
            key_id,
        }
    }

    /// Generate a key and save it at `key_path` (a path outside the workspace, e.g.
    /// `<user data dir>/evolve/keys/<experiment_id>.key`). Missing parent directories are
    /// created with mode 0700; the file is created exclusively with mode 0600 and fsynced.
    pub fn create(key_path: &Path, experiment_id: &str) -> Result<ExperimentKey, KeyError> {
        let key = Self::generate(experiment_id)?;
        key.save(key_path)?;
        Ok(key)
    }

    /// Save this key at `key_path`, as [`ExperimentKey::create`] does: missing parent
    /// directories created with mode 0700, the file created exclusively (an existing
    /// one is an error, never overwritten) with mode 0600, file and directory fsynced.
    pub fn save(&self, key_path: &Path) -> Result<(), KeyError> {
        let experiment_id = &self.experiment_id;
        if let Some(dir) = key_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(key_path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    KeyError::Exists(key_path.to_path_buf())
                } else {
                    io(key_path)(e)
                }
            })?;
        // The umask can only remove bits; make the mode exact anyway.
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(io(key_path))?;
        let doc = json!({
            "algorithm": "ed25519",
            "experiment": experiment_id,
            "secret_key": hex(self.signing.as_bytes()),
            "key_id": self.key_id,
        });
        let mut bytes = canonical_bytes(&doc);
        bytes.push(b'\n');
        f.write_all(&bytes)
            .and_then(|_| f.sync_all())
            .map_err(io(key_path))?;
        if let Some(dir) = key_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io(dir))?;
        }
        Ok(())
    }

    /// Load the key at `key_path`. Refuses a symlink, a non-regular file, a file with any
    /// group/other permission bit, a malformed file, or a key of another experiment.
    pub fn load(key_path: &Path, experiment_id: &str) -> Result<ExperimentKey, KeyError> {
        let meta = fs::symlink_metadata(key_path).map_err(io(key_path))?;
        if !meta.file_type().is_file() {
            return Err(invalid(
                key_path,
                "the signing key must be a regular file (not a symlink)",
            ));
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::InsecurePermissions {
                path: key_path.to_path_buf(),
                mode,
            });
        }
        if meta.len() > 4096 {
            return Err(invalid(key_path, "not a key file (too large)"));
        }
        let bytes = fs::read(key_path).map_err(io(key_path))?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(key_path, format!("not a key file: {e}")))?;
        if v.get("algorithm").and_then(Value::as_str) != Some("ed25519") {
            return Err(invalid(key_path, "not an ed25519 key file"));
        }
        let exp = v.get("experiment").and_then(Value::as_str).unwrap_or("");
        if exp != experiment_id {
            return Err(invalid(
                key_path,
                format!("the key belongs to experiment {exp:?}, not {experiment_id:?}"),
            ));
        }
        let seed = v
            .get("secret_key")
            .and_then(Value::as_str)
            .and_then(unhex::<32>)
            .ok_or_else(|| invalid(key_path, "`secret_key` must be 64 hex digits"))?;
        let key = Self::from_seed(experiment_id, seed);
        if v.get("key_id").and_then(Value::as_str) != Some(key.key_id.as_str()) {
            return Err(invalid(key_path, "`key_id` does not match the secret key"));
        }
        Ok(key)
    }

    pub fn experiment_id(&self) -> &str {
        &self.experiment_id
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey {
            experiment_id: self.experiment_id.clone(),
            key: self.signing.verifying_key(),
            key_id: self.key_id.clone(),
        }
    }

    /// Hex Ed25519 signature over [`receipt_message`].
    pub fn sign_receipt(&self, seq: u64, event_sha256: &str) -> String {
        hex(&self
            .signing
            .sign(&receipt_message(&self.experiment_id, seq, event_sha256))
            .to_bytes())
    }
}

/// The public key of an experiment, as committed in the workspace (e.g. `keys/archive.pub`).
///
/// File format (one line of canonical JSON):
/// `{"algorithm":"ed25519","experiment":<id>,"key_id":<hex sha256 of the raw key>,"public_key":<64 hex>}`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    experiment_id: String,
    key: VerifyingKey,
    key_id: String,
}

impl PublicKey {
    pub fn experiment_id(&self) -> &str {
        &self.experiment_id
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Hex of the 32 raw public key bytes.
    pub fn hex(&self) -> String {
        hex(self.key.as_bytes())
    }

    /// The JSON document of the public key file.
    pub fn to_value(&self) -> Value {
        json!({ "algorithm": "ed25519", "experiment": self.experiment_id, "public_key": self.hex(), "key_id": self.key_id })
    }

    /// The bytes of the public key file: canonical JSON and a newline.
    pub fn file_bytes(&self) -> Vec<u8> {
        let mut bytes = canonical_bytes(&self.to_value());
        bytes.push(b'\n');
        bytes
    }

    /// Write the public key file ([`PublicKey::file_bytes`]), creating parent directories,
    /// via a temporary file and rename, fsynced.
    pub fn write(&self, path: &Path) -> Result<(), KeyError> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(io(dir))?;
        let bytes = self.file_bytes();
        let tmp = dir.join(format!(
            ".{}.tmp",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("archive.pub")
        ));
        let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&bytes)
            .and_then(|_| f.sync_all())
            .map_err(io(&tmp))?;
        fs::rename(&tmp, path).map_err(io(path))?;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io(dir))?;
        Ok(())
    }

    /// Parse a public key document; `key_id` must match the key.
    pub fn from_value(v: &Value) -> Result<PublicKey, String> {
        if v.get("algorithm").and_then(Value::as_str) != Some("ed25519") {
            return Err("not an ed25519 public key file".into());
        }
        let experiment_id = v
            .get("experiment")
            .and_then(Value::as_str)
            .ok_or("`experiment` must be a string")?;
        let raw = v
            .get("public_key")
            .and_then(Value::as_str)
            .and_then(unhex::<32>)
            .ok_or("`public_key` must be 64 hex digits")?;
        let key = VerifyingKey::from_bytes(&raw)
            .map_err(|_| "`public_key` is not a valid Ed25519 point")?;
        let key_id = key_id_of(&key);
        if v.get("key_id").and_then(Value::as_str) != Some(key_id.as_str()) {
            return Err("`key_id` does not match the public key".into());
        }
        Ok(PublicKey {
            experiment_id: experiment_id.to_string(),
            key,
            key_id,
        })
    }

    /// Read a public key file.
    pub fn load(path: &Path) -> Result<PublicKey, KeyError> {
        let meta = fs::metadata(path).map_err(io(path))?;
        if meta.len() > 4096 {
            return Err(invalid(path, "not a public key file (too large)"));
        }
        let bytes = fs::read(path).map_err(io(path))?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| invalid(path, format!("not a public key file: {e}")))?;
        Self::from_value(&v).map_err(|m| invalid(path, m))
    }

    /// Verify a receipt signature (hex) for `(seq, event_sha256)` under this key
    /// (strict verification: rejects malleable and small-order encodings).
    pub fn verify_receipt(&self, seq: u64, event_sha256: &str, sig_hex: &str) -> bool {
        let Some(raw) = unhex::<64>(sig_hex) else {
            return false;
        };
        let sig = Signature::from_bytes(&raw);
        let msg = receipt_message(&self.experiment_id, seq, event_sha256);
        self.key.verify_strict(&msg, &sig).is_ok()
    }
}
