//! The append-only, hash-chained, signed event log (`archive.jsonl` + `receipts.jsonl`).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::canonical::sha256_hex;
use crate::event::{
    Event, TERMINAL_STATUSES, check_event_type, check_genid, check_stamp, check_timestamp, types,
};
use crate::fold::{Row, fold};
use crate::keys::{ExperimentKey, PublicKey};
use crate::verify::{Finding, FindingKind, LoggedEvent, Mode, Receipt, TornTail, check_log};

/// The archive's file name in the workspace.
pub const ARCHIVE_FILE: &str = "archive.jsonl";
/// The receipts' file name, next to the archive.
pub const RECEIPTS_FILE: &str = "receipts.jsonl";

/// The receipts file that belongs to `archive_path`: `receipts.jsonl` in the same directory.
pub fn receipts_path_for(archive_path: &Path) -> PathBuf {
    archive_path.with_file_name(RECEIPTS_FILE)
}

/// Errors of the archive writer.
#[derive(Debug)]
pub enum ArchiveError {
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The archive or its receipts fail the structural check (malformed line, broken chain,
    /// bad receipt…). The first finding names the line.
    Integrity { findings: Vec<Finding> },
    /// The key is for another experiment.
    WrongExperiment { archive: String, key: String },
    /// The event to append is not valid (type, genid, timestamp, body).
    InvalidEvent(String),
    /// An evaluation event's stamped fields are not valid; nothing was written.
    InvalidStamp(Vec<String>),
    /// An earlier append failed midway; reopen the archive (which repairs it) to go on.
    Poisoned,
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ArchiveError::Integrity { findings } => {
                write!(f, "archive integrity error")?;
                if let Some(first) = findings.first() {
                    write!(f, ": {first}")?;
                }
                if findings.len() > 1 {
                    write!(f, " (and {} more; run `evolve verify`)", findings.len() - 1)?;
                }
                Ok(())
            }
            ArchiveError::WrongExperiment { archive, key } => write!(
                f,
                "the signing key is for experiment {key:?}, not {archive:?}"
            ),
            ArchiveError::InvalidEvent(m) => write!(f, "invalid event: {m}"),
            ArchiveError::InvalidStamp(p) => write!(f, "invalid stamped fields: {}", p.join("; ")),
            ArchiveError::Poisoned => {
                write!(f, "an earlier append failed midway; reopen the archive")
            }
        }
    }
}

impl std::error::Error for ArchiveError {}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What [`Archive::open`] found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Recovery {
    /// A torn final archive line found at open (ignored; moved aside on the next append).
    pub archive_torn: Option<TornTail>,
    /// A torn final receipt line found at open.
    pub receipts_torn: Option<TornTail>,
    /// Seqs whose missing receipt was signed at open (a crash between event and receipt).
    /// The lifecycle should record this in a `repair` event.
    pub resigned: Vec<u64>,
    /// Files where torn bytes were preserved (`<file>.torn-<n>`), in order.
    pub preserved: Vec<PathBuf>,
}

/// The result of an append.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendedEvent {
    pub seq: u64,
    /// 1-based line number in `archive.jsonl`.
    pub line: u64,
    /// Hex SHA-256 of the line (without newline): the next event's `prev`.
    pub sha256: String,
    pub receipt: Receipt,
}

/// The single writer of an experiment's archive. Hold the run lock while one exists.
pub struct Archive {
    path: PathBuf,
    receipts_path: PathBuf,
    key: ExperimentKey,
    public: PublicKey,
    file: File,
    receipts: File,
    events: Vec<LoggedEvent>,
    last_hash: String,
    archive_torn: Option<TornTail>,
    receipts_torn: Option<TornTail>,
    recovery: Recovery,
    poisoned: bool,
}

impl fmt::Debug for Archive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Archive")
            .field("path", &self.path)
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

fn sync_dir(path: &Path) -> Result<(), ArchiveError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Open for reading and appending, creating (and fsyncing the directory) if missing.
fn open_append(path: &Path) -> Result<File, ArchiveError> {
    let mut o = OpenOptions::new();
    o.read(true).append(true).mode(0o644);
    match o.clone().create_new(true).open(path) {
        Ok(f) => {
            f.sync_all().map_err(io(path))?;
            sync_dir(path)?;
            Ok(f)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => o.open(path).map_err(io(path)),
        Err(e) => Err(io(path)(e)),
    }
}

/// Copy the torn bytes to `<file>.torn-<n>` (first free n ≥ 1), then truncate the file to its
/// intact part; everything fsynced.
fn move_aside(file: &File, path: &Path, torn: &TornTail) -> Result<PathBuf, ArchiveError> {
    let mut bytes = vec![0u8; usize::try_from(torn.len).unwrap_or(0)];
    file.read_exact_at(&mut bytes, torn.offset)
        .map_err(io(path))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(ARCHIVE_FILE)
        .to_string();
    let mut n = 1u32;
    let (aside, mut out) = loop {
        let candidate = path.with_file_name(format!("{name}.torn-{n}"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&candidate)
        {
            Ok(f) => break (candidate, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100_000 => n += 1,
            Err(e) => return Err(io(&candidate)(e)),
        }
    };
    out.write_all(&bytes)
        .and_then(|_| out.sync_all())
        .map_err(io(&aside))?;
    file.set_len(torn.offset)
        .and_then(|_| file.sync_all())
        .map_err(io(path))?;
    sync_dir(path)?;
    Ok(aside)
}

impl Archive {
    /// Open (or create) the archive at `path` with its receipts next to it
    /// ([`receipts_path_for`]), as the experiment's single writer.
    ///
    /// Every line is checked (well formed, canonical, contiguous seq, hash chain, a valid
    /// receipt under `key`); any problem is an [`ArchiveError::Integrity`] naming the line,
    /// except two crash states: a torn final line (ignored now, moved aside on the next
    /// append) and a final event without a receipt (the crash fell between the event's fsync
    /// and the receipt's: it is signed now and listed in [`Recovery::resigned`]).
    pub fn open(
        path: &Path,
        experiment_id: &str,
        key: ExperimentKey,
    ) -> Result<Archive, ArchiveError> {
        if key.experiment_id() != experiment_id {
            return Err(ArchiveError::WrongExperiment {
                archive: experiment_id.to_string(),
                key: key.experiment_id().to_string(),
            });
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let receipts_path = receipts_path_for(path);
        let mut file = open_append(path)?;
        let mut receipts = open_append(&receipts_path)?;
        let mut abytes = Vec::new();
        file.read_to_end(&mut abytes).map_err(io(path))?;
        let mut rbytes = Vec::new();
        receipts
            .read_to_end(&mut rbytes)
            .map_err(io(&receipts_path))?;
        let public = key.public();
        let check = check_log(&abytes, &rbytes, &public, Mode::Chained);
        let last_line = check.lines;
        let fatal: Vec<Finding> = check
            .findings
            .iter()
            .filter(|f| {
                !(f.kind == FindingKind::TornTail
                    || (f.kind == FindingKind::ReceiptMissing && f.line == Some(last_line)))
            })
            .cloned()
            .collect();
        if !fatal.is_empty() {
            return Err(ArchiveError::Integrity { findings: fatal });
        }
        let mut archive = Archive {
            path: path.to_path_buf(),
            receipts_path,
            key,
            public,
            file,
            receipts,
            events: check.events,
            last_hash: check.last_hash,
            archive_torn: check.archive_torn.clone(),
            receipts_torn: check.receipts_torn.clone(),
            recovery: Recovery {
                archive_torn: check.archive_torn,
                receipts_torn: check.receipts_torn,
                ..Recovery::default()
            },
            poisoned: false,
        };
        // A final event without a receipt: sign it now.
        if let Some(last) = archive.events.last()
            && !last.certified
        {
            let (seq, sha) = (last.event.seq, last.sha256.clone());
            archive.repair_receipts_tail()?;
            let receipt = archive.write_receipt(seq, &sha)?;
            debug_assert_eq!(receipt.seq, seq);
            if let Some(last) = archive.events.last_mut() {
                last.certified = true;
            }
            archive.recovery.resigned.push(seq);
        }
        Ok(archive)
    }

    fn repair_receipts_tail(&mut self) -> Result<(), ArchiveError> {
        if let Some(t) = self.receipts_torn.take() {
            let aside = move_aside(&self.receipts, &self.receipts_path, &t)?;
            self.recovery.preserved.push(aside);
        }
        Ok(())
    }

    fn write_receipt(&mut self, seq: u64, sha: &str) -> Result<Receipt, ArchiveError> {
        let receipt = Receipt {
            seq,
            event_sha256: sha.to_string(),
            key_id: self.key.key_id().to_string(),
            sig: self.key.sign_receipt(seq, sha),
        };
        self.receipts
            .write_all(&receipt.line())
            .and_then(|_| self.receipts.sync_data())
            .map_err(io(&self.receipts_path))?;
        Ok(receipt)
    }

    fn validate(
        &self,
        event_type: &str,
        genid: Option<&str>,
        body: &mut Map<String, Value>,
        at: &str,
    ) -> Result<(), ArchiveError> {
        let inv = ArchiveError::InvalidEvent;
        check_event_type(event_type).map_err(inv)?;
        if let Some(g) = genid {
            check_genid(g).map_err(inv)?;
        }
        check_timestamp(at).map_err(inv)?;
        let first = self.events.is_empty();
        let need_genid = || {
            genid
                .map(|_| ())
                .ok_or_else(|| inv(format!("a {event_type} event needs a genid")))
        };
        match event_type {
            types::GENESIS if first => {
                let exp = self.key.experiment_id();
                match body.get("experiment") {
                    None => {
                        body.insert("experiment".into(), Value::String(exp.to_string()));
                    }
                    Some(Value::String(s)) if s == exp => {}
                    Some(_) => return Err(inv(format!("genesis body.experiment must be {exp:?}"))),
                }
            }
            types::GENESIS => return Err(inv("only seq 0 is a genesis event".into())),
            _ if first => return Err(inv("the first event must be the genesis event".into())),
            types::EVALUATION => {
                need_genid()?;
                let problems = check_stamp(genid, body);
                if !problems.is_empty() {
                    return Err(ArchiveError::InvalidStamp(problems));
                }
            }
            types::GATE => {
                need_genid()?;
                if !matches!(
                    body.get("verdict").and_then(Value::as_str),
                    Some("keep" | "discard")
                ) {
                    return Err(inv("a gate event needs verdict keep|discard".into()));
                }
            }
            types::STATUS => {
                need_genid()?;
                if !body
                    .get("status")
                    .and_then(Value::as_str)
                    .is_some_and(|s| TERMINAL_STATUSES.contains(&s))
                {
                    return Err(inv(format!(
                        "a status event needs a status among {TERMINAL_STATUSES:?}"
                    )));
                }
            }
            types::RECORD | types::GENERATION => {
                need_genid()?;
                if event_type == types::RECORD
                    && !body.get("annotations").is_some_and(Value::is_object)
                {
                    return Err(inv("a record event needs an `annotations` object".into()));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Append one event: validate it (an evaluation's stamped fields must pass
    /// [`check_stamp`]), move aside any torn tail, write exactly one line of canonical JSON +
    /// `\n` (O_APPEND) and fsync it, then write and fsync its receipt.
    pub fn append(
        &mut self,
        event_type: &str,
        genid: Option<&str>,
        body: Map<String, Value>,
        at: &str,
    ) -> Result<AppendedEvent, ArchiveError> {
        if self.poisoned {
            return Err(ArchiveError::Poisoned);
        }
        let mut body = body;
        self.validate(event_type, genid, &mut body, at)?;
        if let Some(t) = self.archive_torn.take() {
            let aside = move_aside(&self.file, &self.path, &t)?;
            self.recovery.preserved.push(aside);
        }
        self.repair_receipts_tail()?;
        let seq = self.events.len() as u64;
        let event = Event {
            seq,
            prev: self.last_hash.clone(),
            event_type: event_type.to_string(),
            genid: genid.map(str::to_string),
            at: at.to_string(),
            body,
        };
        let mut line = event.canonical_line();
        // What is kept in memory is exactly what a reader of the file will see.
        let stored = serde_json::from_slice::<Value>(&line)
            .map_err(|e| e.to_string())
            .and_then(Event::from_json)
            .map_err(|e| {
                ArchiveError::InvalidEvent(format!("the event does not round-trip: {e}"))
            })?;
        let sha256 = sha256_hex(&line);
        line.push(b'\n');
        self.poisoned = true;
        self.file
            .write_all(&line)
            .and_then(|_| self.file.sync_data())
            .map_err(io(&self.path))?;
        let receipt = self.write_receipt(seq, &sha256)?;
        self.poisoned = false;
        self.last_hash = sha256.clone();
        self.events.push(LoggedEvent {
            line: seq + 1,
            event: stored,
            sha256: sha256.clone(),
            certified: true,
        });
        Ok(AppendedEvent {
            seq,
            line: seq + 1,
            sha256,
            receipt,
        })
    }

    /// Every event, in order (all certified once open succeeded).
    pub fn events(&self) -> &[LoggedEvent] {
        &self.events
    }

    /// The folded rows.
    pub fn rows(&self) -> Vec<Row> {
        fold(&self.events)
    }

    /// The seq the next append gets.
    pub fn next_seq(&self) -> u64 {
        self.events.len() as u64
    }

    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn receipts_path(&self) -> &Path {
        &self.receipts_path
    }

    pub fn experiment_id(&self) -> &str {
        self.key.experiment_id()
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }
}
