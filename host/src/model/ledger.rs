//! The durable record of model calls in flight: a call's worst case is written (and
//! synced) before its request is sent, and settled after it ends. A process killed
//! mid-call leaves a reservation with no settlement; the next run charges it at its
//! reserved amount, since the provider may have served (and billed) the call.
//!
//! One JSON line per event in `<workspace>/.evolve/model-reservations.jsonl`:
//! `{"reserve": ID, "usd": WORST, "log": DIR}` and `{"settle": ID, "usd": CHARGED}`.
//! The lifecycle reads it under the run lock at open ([`unsettled`]), archives what is
//! left unsettled, and empties it ([`clear`]).

use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The ledger's file name inside the workspace's state directory.
pub const LEDGER_FILE: &str = "model-reservations.jsonl";

/// Where one run writes its reservations. Ids are unique per run (a process id and a
/// start time) and per call.
#[derive(Debug)]
pub struct SpendLedger {
    path: PathBuf,
    run: String,
    next: AtomicU64,
    file: Mutex<Option<std::fs::File>>,
}

/// A reservation the ledger holds with no settlement: a call a killed run had in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsettled {
    pub id: String,
    pub usd: f64,
    /// The directory of the stage's `model.jsonl`.
    pub log: String,
}

impl SpendLedger {
    pub fn new(path: impl Into<PathBuf>) -> SpendLedger {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        SpendLedger {
            path: path.into(),
            run: format!("{}-{started:x}", std::process::id()),
            next: AtomicU64::new(1),
            file: Mutex::new(None),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write a reservation of `usd` and sync it to disk; returns its id. Called before
    /// the request is sent: if this fails, the call must not be made.
    pub(crate) fn reserve(&self, usd: f64, log_dir: &Path) -> std::io::Result<String> {
        let id = format!("{}-{}", self.run, self.next.fetch_add(1, Ordering::Relaxed));
        let line = json!({"reserve": id, "usd": usd, "log": log_dir.display().to_string()});
        self.write(&line, true)?;
        Ok(id)
    }

    /// Settle reservation `id` at what the call was charged. Not synced: a settlement
    /// lost to a crash only makes the call count at its (higher) reserved amount.
    pub(crate) fn settle(&self, id: &str, usd: f64) {
        let _ = self.write(&json!({"settle": id, "usd": usd}), false);
    }

    fn write(&self, line: &Value, sync: bool) -> std::io::Result<()> {
        let mut text = line.to_string();
        text.push('\n');
        let mut guard = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            *guard = Some(file);
        }
        let file = guard.as_mut().expect("opened above");
        file.write_all(text.as_bytes())?;
        if sync {
            file.sync_data()?;
        }
        Ok(())
    }
}

/// The reservations in the ledger at `path` that were never settled, in order. A
/// missing file has none; a torn last line (a write cut by the kill) is skipped.
pub fn unsettled(path: &Path) -> std::io::Result<Vec<Unsettled>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut open: Vec<Unsettled> = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let usd = v
            .get("usd")
            .and_then(Value::as_f64)
            .filter(|u| u.is_finite() && *u >= 0.0)
            .unwrap_or(0.0);
        if let Some(id) = v.get("reserve").and_then(Value::as_str) {
            let log = v
                .get("log")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            open.push(Unsettled {
                id: id.to_string(),
                usd,
                log,
            });
        } else if let Some(id) = v.get("settle").and_then(Value::as_str) {
            open.retain(|u| u.id != id);
        }
    }
    Ok(open)
}

/// Empty the ledger once what it held is archived.
pub fn clear(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
