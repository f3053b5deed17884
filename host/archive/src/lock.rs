//! One run per workspace: an OS file lock (flock) on `<workspace>/.evolve/run.lock`.
//!
//! The kernel releases a flock when its holder dies, so a lock file left by a dead process
//! never blocks. The holder's pid is written into the file for the error message only.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's path inside a workspace.
pub fn lock_path(workspace_dir: &Path) -> PathBuf {
    workspace_dir.join(".evolve").join("run.lock")
}

#[derive(Debug)]
pub enum LockError {
    /// Another open lock (another process, or another handle in this one) holds it.
    Held { path: PathBuf, pid: Option<u32> },
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::Held {
                path,
                pid: Some(pid),
            } => write!(
                f,
                "another run holds the workspace lock {} (pid {pid})",
                path.display()
            ),
            LockError::Held { path, pid: None } => {
                write!(f, "another run holds the workspace lock {}", path.display())
            }
            LockError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for LockError {}

/// A held run lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
    _file: File,
}

impl RunLock {
    /// Take the workspace's run lock without waiting.
    pub fn acquire(workspace_dir: &Path) -> Result<RunLock, LockError> {
        let path = lock_path(workspace_dir);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut s = String::new();
                let _ = Read::by_ref(&mut file).take(64).read_to_string(&mut s);
                return Err(LockError::Held {
                    pid: s.trim().parse().ok(),
                    path,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id())
            .and_then(|_| file.sync_data())
            .map_err(io)?;
        Ok(RunLock { path, _file: file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
