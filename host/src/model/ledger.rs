//! The durable record of priced model calls: a call's worst case is written (and synced)
//! before its request is sent, and settled at what it was charged after it ends.
//!
//! A call's charge reaches the archive with the event that closes its stage (a
//! generation, a stop, a playbook, a driver call), and that event lists the call's id
//! under [`MODEL_CALLS_KEY`]. A run killed before that event was appended leaves calls in
//! the ledger that no archive event lists: the next run charges each of them, at its
//! settlement if it was answered, at its reservation if it was still in flight (the
//! provider may have served and billed it). The id list is part of the event itself, so
//! there is no moment at which a call is archived but not known to be: nothing is lost
//! and nothing charged twice.
//!
//! One JSON line per record in `<workspace>/.evolve/model-reservations.jsonl`:
//! `{"reserve": ID, "usd": WORST, "log": DIR}` and `{"settle": ID, "usd": CHARGED}`.
//! The lifecycle reads it under the run lock at open ([`calls`], [`unbilled`]),
//! archives what no event billed, and empties it ([`clear`]).

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The ledger's file name inside the workspace's state directory.
pub const LEDGER_FILE: &str = "model-reservations.jsonl";

/// The archive body key listing the ledger ids of the calls whose charge the event's
/// `cost_usd` includes.
pub const MODEL_CALLS_KEY: &str = "model_calls";

/// Where one run writes its reservations. Ids are unique per run (a process id and a
/// start time) and per call.
#[derive(Debug)]
pub struct SpendLedger {
    path: PathBuf,
    run: String,
    next: AtomicU64,
    file: Mutex<Option<std::fs::File>>,
}

/// One line of the ledger file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    Reserve {
        reserve: String,
        usd: f64,
        /// The directory of the stage's `model.jsonl`.
        #[serde(default)]
        log: String,
        /// The recipe's named model the call used (`models:`); absent for `model:`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    Settle {
        settle: String,
        usd: f64,
    },
}

/// A call the ledger holds: reserved, and settled if it ended before the run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    /// The worst case reserved before the request was sent.
    pub reserved_usd: f64,
    /// What the call was charged when it ended; `None`: it was in flight at the kill.
    pub settled_usd: Option<f64>,
    /// The directory of the stage's `model.jsonl`.
    pub log: String,
    /// The named model the call used (`models:`), `None` for the `model:` block.
    pub model: Option<String>,
}

impl Call {
    /// What the call costs when no archive event billed it: its settlement, or its
    /// reserved worst case if it never ended.
    pub fn charge(&self) -> f64 {
        self.settled_usd.unwrap_or(self.reserved_usd)
    }
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
    /// `model` is the recipe's named model the call uses (`models:`), if any.
    pub(crate) fn reserve(
        &self,
        usd: f64,
        log_dir: &Path,
        model: Option<&str>,
    ) -> std::io::Result<String> {
        let id = format!("{}-{}", self.run, self.next.fetch_add(1, Ordering::Relaxed));
        let line = Line::Reserve {
            reserve: id.clone(),
            usd,
            log: log_dir.display().to_string(),
            model: model.map(str::to_string),
        };
        self.write(&line, true)?;
        Ok(id)
    }

    /// Settle reservation `id` at what the call was charged. Not synced: a settlement
    /// lost to a power cut only makes an unbilled call count at its (higher) reserved
    /// amount.
    pub(crate) fn settle(&self, id: &str, usd: f64) {
        let line = Line::Settle {
            settle: id.to_string(),
            usd,
        };
        let _ = self.write(&line, false);
    }

    fn write(&self, line: &Line, sync: bool) -> std::io::Result<()> {
        let mut text = serde_json::to_string(line).map_err(std::io::Error::other)?;
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

/// Every call in the ledger at `path`, in the order reserved. A missing file has none;
/// a line that is not a record (a write torn by the kill) is skipped, and so is a
/// settlement of no reservation. An amount that is not a finite number ≥ 0 counts as 0.
pub fn calls(path: &Path) -> std::io::Result<Vec<Call>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let amount = |usd: f64| {
        if usd.is_finite() && usd >= 0.0 {
            usd
        } else {
            0.0
        }
    };
    let mut calls: Vec<Call> = Vec::new();
    for line in text.lines() {
        match serde_json::from_str::<Line>(line) {
            Ok(Line::Reserve {
                reserve,
                usd,
                log,
                model,
            }) => calls.push(Call {
                id: reserve,
                reserved_usd: amount(usd),
                settled_usd: None,
                log,
                model,
            }),
            Ok(Line::Settle { settle, usd }) => {
                if let Some(call) = calls.iter_mut().rev().find(|c| c.id == settle) {
                    call.settled_usd = Some(amount(usd));
                }
            }
            Err(_) => {}
        }
    }
    Ok(calls)
}

/// The calls no archive event billed: those whose id is not in `billed` (the
/// [`MODEL_CALLS_KEY`] lists of the certified archive). Each is owed [`Call::charge`].
pub fn unbilled(calls: Vec<Call>, billed: &HashSet<String>) -> Vec<Call> {
    calls
        .into_iter()
        .filter(|c| !billed.contains(&c.id))
        .collect()
}

/// Empty the ledger once what it held is archived.
pub fn clear(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(calls: &[Call]) -> Vec<&str> {
        calls.iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn a_call_no_event_billed_is_owed_its_settlement_or_its_reservation() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = SpendLedger::new(dir.path().join(LEDGER_FILE));
        let log = dir.path().join("runs/gen-1/mutate/model");
        let archived = ledger.reserve(0.5, &log, None).unwrap();
        ledger.settle(&archived, 0.25);
        let answered = ledger.reserve(0.01, &log, None).unwrap();
        ledger.settle(&answered, 0.004);
        let in_flight = ledger.reserve(0.02, &log, None).unwrap();
        let calls = calls(ledger.path()).unwrap();
        assert_eq!(ids(&calls), [&archived, &answered, &in_flight]);
        assert_eq!(calls[2].log, log.display().to_string());

        // The event of the first call's stage listed it: only the other two are owed.
        let billed = HashSet::from([archived.clone()]);
        let owed = unbilled(calls.clone(), &billed);
        assert_eq!(ids(&owed), [&answered, &in_flight]);
        assert_eq!(owed[0].charge(), 0.004, "answered: its settlement");
        assert_eq!(owed[1].charge(), 0.02, "in flight: its worst case");
        // Once all are billed (a repair event lists the two), nothing is owed again.
        let all: HashSet<String> = calls.iter().map(|c| c.id.clone()).collect();
        assert!(unbilled(calls, &all).is_empty());
    }

    #[test]
    fn the_ledger_reads_the_first_format_and_skips_torn_and_stray_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LEDGER_FILE);
        std::fs::write(
            &path,
            concat!(
                "{\"reserve\":\"9-a-1\",\"usd\":0.01,\"log\":\"/w/runs/gen-1/mutate/model\"}\n",
                "{\"settle\":\"9-a-1\",\"usd\":0.005}\n",
                "{\"settle\":\"9-a-7\",\"usd\":3}\n",
                "{\"reserve\":\"9-a-2\",\"usd\":-1,\"log\":\"/w/runs/gen-1/mutate/model\"}\n",
                "{\"reserve\":\"9-a-3\",\"usd\":0.2",
            ),
        )
        .unwrap();
        let calls = calls(&path).unwrap();
        assert_eq!(ids(&calls), ["9-a-1", "9-a-2"], "torn tail skipped");
        assert_eq!(calls[0].settled_usd, Some(0.005));
        assert_eq!(
            calls[1].charge(),
            0.0,
            "a negative amount counts as nothing"
        );
        assert!(super::calls(&dir.path().join("none")).unwrap().is_empty());
    }
}
