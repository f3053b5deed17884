//! Disk quotas on a call's writable grants (`/scratch`, and for mutate `/target` and
//! `/operators`).
//!
//! wasmtime-wasi 48 gives the host no hook on filesystem writes (its `preopened_dir`
//! hands the guest a cap-std directory, and every write goes straight to it), so the
//! quota is enforced by measuring: a watcher thread walks the writable grants while the
//! call runs and, once one of them has grown past its quota, flags the store (the epoch
//! callback then traps the guest at its next tick) and wakes the call's `select` (which
//! drops a guest blocked in a host call). After the call the grants are measured once
//! more, so a burst the watcher missed between two walks is still caught. Either way
//! the call fails with `quota_exceeded` and every entry the call added or changed in an
//! over-quota grant is removed, without following links: nothing over the quota stays.
//!
//! Usage is counted per grant as growth over what the grant held when the call began:
//! bytes are the apparent sizes of regular files (a sparse file counts at its length,
//! so `set_len(1 TiB)` is over), files are entries of any kind (file, directory, link).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a call added to one writable grant past its quota. Bytes are apparent file
/// sizes (a sparse file counts at its length); files count every new entry (file,
/// directory, link).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaBreach {
    /// The guest path of the grant (`/scratch`, `/target`, `/operators`).
    pub grant: String,
    pub bytes: u64,
    pub files: u64,
    pub limit_bytes: u64,
    pub limit_files: u64,
    /// The walk stopped once the quota was clearly exceeded: the guest wrote more.
    pub at_least: bool,
    /// Why part of the grant could not be walked (counted as over the quota).
    pub unwalkable: Option<String>,
}

/// The trap the epoch callback raises once the watcher saw a grant over its quota.
#[derive(Debug)]
pub(crate) struct QuotaTrap;

impl std::fmt::Display for QuotaTrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped: a writable grant went over its disk quota")
    }
}

impl std::error::Error for QuotaTrap {}

/// What an entry was when the call began: a changed or new entry is the call's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
    dir: bool,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            ino: m.ino(),
            len: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
            dir: m.is_dir(),
        }
    }
}

/// One writable grant and what it held before the call.
struct Grant {
    guest: String,
    host: PathBuf,
    base_bytes: u64,
    base_files: u64,
    before: HashMap<PathBuf, Stamp>,
}

#[derive(Debug, Clone)]
struct Usage {
    bytes: u64,
    files: u64,
    /// The walk stopped early because the quota was already exceeded.
    cut: bool,
    /// A directory that exists but cannot be walked (a tree nested past `PATH_MAX`
    /// through directory handles, say): what it holds cannot be counted, so the grant
    /// counts as over its quota (fail closed).
    unwalkable: Option<String>,
}

/// Walk `root` without following links, stopping once `max_bytes` or `max_files` is
/// passed. `record` receives every entry (for the baseline).
fn measure(
    root: &Path,
    max_bytes: u64,
    max_files: u64,
    mut record: impl FnMut(&Path, &std::fs::Metadata),
) -> Usage {
    let mut usage = Usage {
        bytes: 0,
        files: 0,
        cut: false,
        unwalkable: None,
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // Removed by the guest while we walked: nothing there to count.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                usage.cut = true;
                usage.unwalkable = Some(e.to_string());
                return usage;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            // `symlink_metadata`: a link counts as one entry and is never followed.
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    usage.cut = true;
                    usage.unwalkable = Some(e.to_string());
                    return usage;
                }
            };
            usage.files += 1;
            if meta.is_file() {
                usage.bytes = usage.bytes.saturating_add(meta.len());
            }
            record(&path, &meta);
            if meta.is_dir() {
                stack.push(path);
            }
            if usage.bytes > max_bytes || usage.files > max_files {
                usage.cut = true;
                return usage;
            }
        }
    }
    usage
}

/// The quotas of one call and the state of its writable grants.
pub(crate) struct Quota {
    grants: Vec<Grant>,
    limit_bytes: u64,
    limit_files: u64,
}

impl Quota {
    /// Record what each writable grant holds now. `writable` is (guest path, host path).
    pub(crate) fn begin(
        writable: &[(String, PathBuf)],
        limit_bytes: u64,
        limit_files: u64,
    ) -> Quota {
        let grants = writable
            .iter()
            .map(|(guest, host)| {
                let mut before = HashMap::new();
                let usage = measure(host, u64::MAX, u64::MAX, |p, m| {
                    before.insert(p.to_path_buf(), Stamp::of(m));
                });
                Grant {
                    guest: guest.clone(),
                    host: host.clone(),
                    base_bytes: usage.bytes,
                    base_files: usage.files,
                    before,
                }
            })
            .collect();
        Quota {
            grants,
            limit_bytes,
            limit_files,
        }
    }

    /// The first grant over its quota now, if any.
    pub(crate) fn check(&self) -> Option<QuotaBreach> {
        self.grants.iter().find_map(|g| {
            let max_bytes = g.base_bytes.saturating_add(self.limit_bytes);
            let max_files = g.base_files.saturating_add(self.limit_files);
            let now = measure(&g.host, max_bytes, max_files, |_, _| {});
            let bytes = now.bytes.saturating_sub(g.base_bytes);
            let files = now.files.saturating_sub(g.base_files);
            let over = bytes > self.limit_bytes || files > self.limit_files;
            (over || now.unwalkable.is_some()).then(|| QuotaBreach {
                grant: g.guest.clone(),
                bytes,
                files,
                limit_bytes: self.limit_bytes,
                limit_files: self.limit_files,
                at_least: now.cut,
                unwalkable: now.unwalkable,
            })
        })
    }

    /// Remove every entry of every grant that the call added or changed (a new or
    /// rewritten file, a new directory with everything in it, a new link), never
    /// following a link. A candidate tree (`/target`, `/operators`) is discarded by the
    /// lifecycle after any failure anyway; removing the writes here keeps them from
    /// sitting on disk until then, and makes `/scratch` as empty as it began.
    pub(crate) fn remove_writes(&self) {
        for g in &self.grants {
            let mut stack = vec![g.host.clone()];
            while let Some(dir) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for entry in entries.flatten() {
                    let path = entry.path();
                    let Ok(meta) = std::fs::symlink_metadata(&path) else {
                        continue;
                    };
                    match g.before.get(&path) {
                        // An old directory stays; what is new inside it goes.
                        Some(old) if old.dir && meta.is_dir() => stack.push(path),
                        Some(old) if *old == Stamp::of(&meta) => {}
                        _ if meta.is_dir() => {
                            let _ = std::fs::remove_dir_all(&path);
                        }
                        _ => {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
            }
        }
    }
}

/// Watches a call's grants from its own thread until stopped.
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    found: Arc<Mutex<Option<QuotaBreach>>>,
}

/// Pause between two walks: at least this, and four times the last walk's duration so
/// that walking a large tree never takes more than a fifth of a core.
const MIN_INTERVAL: Duration = Duration::from_millis(50);
const MAX_INTERVAL: Duration = Duration::from_secs(1);

impl Watcher {
    /// Start watching. `over` is set, and `wake` notified, when a grant goes over.
    pub(crate) fn start(
        quota: Arc<Quota>,
        over: Arc<AtomicBool>,
        wake: Arc<tokio::sync::Notify>,
    ) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let found = Arc::new(Mutex::new(None));
        let (stop2, found2) = (stop.clone(), found.clone());
        let thread = std::thread::Builder::new()
            .name("evolve-quota".into())
            .spawn(move || {
                let mut interval = MIN_INTERVAL;
                loop {
                    std::thread::park_timeout(interval);
                    if stop2.load(Ordering::Acquire) {
                        return;
                    }
                    let started = Instant::now();
                    if let Some(breach) = quota.check() {
                        *found2.lock().unwrap_or_else(|e| e.into_inner()) = Some(breach);
                        over.store(true, Ordering::Release);
                        wake.notify_one();
                        return;
                    }
                    interval = (started.elapsed() * 4).clamp(MIN_INTERVAL, MAX_INTERVAL);
                }
            })
            .ok();
        Watcher {
            stop,
            thread,
            found,
        }
    }

    /// Stop the thread and return what it found, if anything.
    pub(crate) fn finish(mut self) -> Option<QuotaBreach> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        self.found.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_past_the_quota_is_found_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("g");
        std::fs::create_dir_all(root.join("old")).unwrap();
        std::fs::write(root.join("old/keep.txt"), b"0123456789").unwrap();
        let q = Quota::begin(&[("/scratch".into(), root.clone())], 100, 3);
        assert_eq!(q.check(), None);
        std::fs::write(root.join("old/new.bin"), vec![0u8; 101]).unwrap();
        let b = q.check().expect("101 bytes over a 100-byte quota");
        assert_eq!((b.grant.as_str(), b.bytes, b.files), ("/scratch", 101, 1));
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        q.remove_writes();
        let mut left: Vec<_> = walkdir(&root);
        left.sort();
        assert_eq!(left, ["old", "old/keep.txt"]);
        assert!(std::path::Path::new("/etc/passwd").exists());
    }

    #[test]
    fn files_count_as_well_as_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let q = Quota::begin(&[("/scratch".into(), dir.path().to_path_buf())], 1 << 20, 2);
        for n in 0..3 {
            std::fs::write(dir.path().join(n.to_string()), b"").unwrap();
        }
        let b = q.check().expect("3 files over a 2-file quota");
        assert_eq!((b.bytes, b.files, b.at_least), (0, 3, true));
    }

    /// A tree nested deeper than `PATH_MAX`, built through directory handles as a guest
    /// can: the host cannot walk it by path, so it counts as over the quota (fail
    /// closed), and it is removed.
    #[test]
    fn a_tree_too_deep_to_walk_is_over_the_quota_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let q = Quota::begin(
            &[("/scratch".into(), dir.path().to_path_buf())],
            1 << 30,
            1 << 20,
        );
        let name = "d".repeat(200);
        let mut at =
            cap_std::fs::Dir::open_ambient_dir(dir.path(), cap_std::ambient_authority()).unwrap();
        for _ in 0..30 {
            at.create_dir(&name).unwrap();
            at = at.open_dir(&name).unwrap();
        }
        at.write("hidden.bin", vec![0u8; 4096]).unwrap();
        let b = q.check().expect("an unwalkable tree is over the quota");
        assert!(b.unwalkable.is_some(), "{b:?}");
        q.remove_writes();
        assert_eq!(walkdir(dir.path()), Vec::<String>::new());
    }

    fn walkdir(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        measure(root, u64::MAX, u64::MAX, |p, _| {
            out.push(p.strip_prefix(root).unwrap().display().to_string())
        });
        out
    }
}
