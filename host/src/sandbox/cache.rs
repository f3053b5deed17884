//! The compile cache: components keyed by the SHA-256 of their bytes.
//!
//! In memory for the life of the process, and on disk in a host-owned directory (never
//! inside a workspace, and never granted to an operator). A self-edited operator has
//! new bytes, hence a new key, so it is always recompiled and a stale entry can never
//! be used. Loading a precompiled `.cwasm` runs native code without validation, so an
//! entry is loaded only if it carries a MAC made with this cache's own key: a file the
//! host did not write (or one that was altered) is ignored and recompiled.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use wasmtime::Engine;
use wasmtime::component::Component;

pub type ComponentDigest = [u8; 32];

pub fn digest(bytes: &[u8]) -> ComponentDigest {
    Sha256::digest(bytes).into()
}

pub fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a component came from on this load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheSource {
    Memory,
    Disk,
    Compiled,
}

pub struct CompileCache {
    memory: Mutex<HashMap<ComponentDigest, Component>>,
    disk: Option<DiskCache>,
}

struct DiskCache {
    dir: PathBuf,
    key: [u8; 32],
    /// Distinguishes entries compiled under other engine settings or versions.
    engine_tag: String,
}

impl CompileCache {
    pub fn memory_only() -> Self {
        CompileCache {
            memory: Mutex::new(HashMap::new()),
            disk: None,
        }
    }

    /// A cache that also persists to `dir` (created with mode 0700 if missing).
    pub fn with_disk(engine: &Engine, dir: &Path) -> std::io::Result<Self> {
        create_private_dir(dir)?;
        let key = load_or_create_key(&dir.join("cache.key"))?;
        let engine_tag = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut h);
            format!("{:016x}", h.finish())
        };
        Ok(CompileCache {
            memory: Mutex::new(HashMap::new()),
            disk: Some(DiskCache {
                dir: dir.to_path_buf(),
                key,
                engine_tag,
            }),
        })
    }

    /// The compiled component for `bytes`, from memory, disk or a fresh compile.
    pub fn get_or_compile(
        &self,
        engine: &Engine,
        digest: &ComponentDigest,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CacheSource)> {
        if let Some(c) = self.lock().get(digest) {
            return Ok((c.clone(), CacheSource::Memory));
        }
        if let Some(c) = self.disk.as_ref().and_then(|d| d.load(engine, digest)) {
            self.lock().insert(*digest, c.clone());
            return Ok((c, CacheSource::Disk));
        }
        let component = Component::new(engine, bytes)?;
        if let Some(disk) = &self.disk {
            // A cache that cannot be written only costs a recompile next time.
            let _ = disk.store(digest, &component);
        }
        self.lock().insert(*digest, component.clone());
        Ok((component, CacheSource::Compiled))
    }

    /// Forget the in-memory entries (benchmarks use it to measure disk hits).
    pub fn clear_memory(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ComponentDigest, Component>> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl DiskCache {
    fn paths(&self, digest: &ComponentDigest) -> (PathBuf, PathBuf) {
        let stem = format!("{}-{}", hex(digest), self.engine_tag);
        (
            self.dir.join(format!("{stem}.cwasm")),
            self.dir.join(format!("{stem}.mac")),
        )
    }

    /// The MAC binds the compiled bytes to the component digest and engine they were
    /// compiled for, so one valid entry cannot be passed off as another component's.
    fn mac(&self, digest: &ComponentDigest, data: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(digest);
        mac.update(self.engine_tag.as_bytes());
        mac.update(data);
        mac
    }

    fn load(&self, engine: &Engine, digest: &ComponentDigest) -> Option<Component> {
        let (cwasm_path, mac_path) = self.paths(digest);
        let cwasm = fs::read(&cwasm_path).ok()?;
        let tag = fs::read(&mac_path).ok()?;
        self.mac(digest, &cwasm).verify_slice(&tag).ok()?;
        // SAFETY: the bytes are exactly what this host serialized (MAC verified with a
        // key only this host holds), and wasmtime checks engine compatibility itself.
        unsafe { Component::deserialize(engine, &cwasm) }.ok()
    }

    fn store(&self, digest: &ComponentDigest, component: &Component) -> std::io::Result<()> {
        let (cwasm_path, mac_path) = self.paths(digest);
        let cwasm = component.serialize().map_err(std::io::Error::other)?;
        let tag = self.mac(digest, &cwasm).finalize().into_bytes();
        write_atomic(&cwasm_path, &cwasm)?;
        write_atomic(&mac_path, &tag)
    }
}

fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

fn load_or_create_key(path: &Path) -> std::io::Result<[u8; 32]> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Ok(existing) = fs::read(path)
        && let Ok(key) = <[u8; 32]>::try_from(existing.as_slice())
    {
        return Ok(key);
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(&key)?;
    f.sync_all()?;
    Ok(key)
}

/// The default cache directory: `$EVOLVE_CACHE_DIR`, else `<user cache dir>/evolve/components`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("EVOLVE_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    dirs::cache_dir().map(|d| d.join("evolve").join("components"))
}
