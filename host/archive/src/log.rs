//! The append-only, hash-chained, signed event log (`archive.jsonl` + `receipts.jsonl`).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::body::{Body, Line, read_line};
use crate::canonical::hex;
use crate::chain::{Finding, FindingKind, Mode, Receipt, TornTail, check_log, par_map};
use crate::eligibility::{FixedIdentity, identity_of_row0};
use crate::event::{
    Event, LoggedEvent, Status, TERMINAL_STATUSES, check_event_type, check_genid, check_timestamp,
    types,
};
use crate::fold::{Folded, Pending, Replayed, Row, StampSource, pending, replay};
use crate::keys::{ExperimentKey, PublicKey};

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

/// One archive event as the writer keeps it: its line's bytes (shared with the other lines
/// read at open, and with the lazily built stamps) and what the spend ledger needs.
#[derive(Debug)]
struct LineRec {
    buf: Arc<Vec<u8>>,
    meta: Replayed,
}

impl LineRec {
    fn bytes(&self) -> &[u8] {
        &self.buf[self.meta.range.clone()]
    }

    /// The event with its body as a map (the line passed the writer's check, so this cannot
    /// fail; the placeholder is only a defensive answer, never a panic).
    fn event(&self, seq: u64) -> Event {
        Event::from_line(self.bytes()).unwrap_or_else(|_| Event {
            seq,
            prev: String::new(),
            event_type: String::new(),
            genid: None,
            at: String::new(),
            body: Map::new(),
        })
    }

    fn logged(&self, i: usize) -> LoggedEvent {
        LoggedEvent {
            line: i as u64 + 1,
            event: self.event(i as u64),
            sha256: hex(&self.meta.sha256),
            certified: self.meta.certified,
        }
    }
}

/// The single writer of an experiment's archive. Hold the run lock while one exists.
pub struct Archive {
    path: PathBuf,
    receipts_path: PathBuf,
    key: ExperimentKey,
    public: PublicKey,
    file: File,
    receipts: File,
    /// One per event, in order.
    lines: Vec<LineRec>,
    /// The events as `Value`s, built on the first call of [`Archive::events`].
    events: OnceLock<Vec<LoggedEvent>>,
    /// The rows (and generation zero's identity), kept current by every append.
    state: Folded,
    last_hash: [u8; 32],
    archive_torn: Option<TornTail>,
    receipts_torn: Option<TornTail>,
    recovery: Recovery,
    poisoned: bool,
}

impl fmt::Debug for Archive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Archive")
            .field("path", &self.path)
            .field("events", &self.lines.len())
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

/// Open for reading and appending, creating (and fsyncing) it if missing; also says
/// whether it was created, so the caller syncs the directory (once for both files).
fn open_append(path: &Path) -> Result<(File, bool), ArchiveError> {
    let mut o = OpenOptions::new();
    o.read(true).append(true).mode(0o644);
    match o.clone().create_new(true).open(path) {
        Ok(f) => {
            f.sync_all().map_err(io(path))?;
            Ok((f, true))
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok((o.open(path).map_err(io(path))?, false))
        }
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
    /// Every line is checked (well formed, contiguous seq, hash chain, a receipt with the
    /// line's digest under `key`, one verified signature per chained segment); any problem is
    /// an [`ArchiveError::Integrity`] naming the line, except two crash states: a torn final
    /// line (ignored now, moved aside on the next append) and a final event without a receipt
    /// (the crash fell between the event's fsync and the receipt's: it is signed now and
    /// listed in [`Recovery::resigned`]). Canonical form is left to [`verify`](crate::verify()):
    /// the chain and the signature already authenticate each line's exact bytes (see
    /// `docs/archive.md`).
    ///
    /// Lines are read without building `serde_json::Value` trees, on all cores, and folded
    /// once: [`Archive::rows_cached`] is ready when `open` returns and every append keeps it
    /// current.
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
        let (mut file, created) = open_append(path)?;
        let (mut receipts, receipts_created) = open_append(&receipts_path)?;
        // Both live in one directory: one sync makes either new name durable.
        if created || receipts_created {
            sync_dir(path)?;
        }
        let mut abytes = Vec::new();
        file.read_to_end(&mut abytes).map_err(io(path))?;
        let abytes = Arc::new(abytes);
        let mut rbytes = Vec::new();
        receipts
            .read_to_end(&mut rbytes)
            .map_err(io(&receipts_path))?;
        let public = key.public();
        let check = check_log(&abytes, &rbytes, &public, false, Mode::Chained);
        drop(rbytes);
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
        // Every line is certified now, except perhaps a final one without a receipt, which is
        // signed below (before anyone can see the archive).
        let resign = check.events.last().is_some_and(|e| !e.certified);
        let (lines, state) = replay(check.events, &abytes, resign);
        let lines = lines
            .into_iter()
            .map(|meta| LineRec {
                buf: abytes.clone(),
                meta,
            })
            .collect();
        let mut archive = Archive {
            path: path.to_path_buf(),
            receipts_path,
            key,
            public,
            file,
            receipts,
            lines,
            events: OnceLock::new(),
            state,
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
        if resign && let Some(last) = archive.lines.last() {
            let seq = archive.lines.len() as u64 - 1;
            let sha = hex(&last.meta.sha256);
            archive.repair_receipts_tail()?;
            let receipt = archive.write_receipt(seq, &sha)?;
            debug_assert_eq!(receipt.seq, seq);
            if let Some(last) = archive.lines.last_mut() {
                last.meta.certified = true;
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

    /// The envelope's values of an event to append, and the genesis event's `experiment`
    /// (filled in when absent).
    fn prepare(
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
        if event_type == types::GENESIS && self.lines.is_empty() && !body.contains_key("experiment")
        {
            let exp = self.key.experiment_id().to_string();
            body.insert("experiment".into(), Value::String(exp));
        }
        Ok(())
    }

    /// The rules an appended event's body must meet, on the line as read back (the typed
    /// body every reader sees).
    fn validate(&self, line: &Line<'_>) -> Result<(), ArchiveError> {
        let inv = ArchiveError::InvalidEvent;
        let event_type: &str = &line.head.event_type;
        let first = self.lines.is_empty();
        let need_genid = || {
            line.genid()
                .map(|_| ())
                .ok_or_else(|| inv(format!("a {event_type} event needs a genid")))
        };
        match &line.body {
            Body::Genesis(g) if first => {
                let exp = self.key.experiment_id();
                if g.experiment.as_deref() != Some(exp) {
                    return Err(inv(format!("genesis body.experiment must be {exp:?}")));
                }
            }
            Body::Genesis(_) => return Err(inv("only seq 0 is a genesis event".into())),
            _ if first => return Err(inv("the first event must be the genesis event".into())),
            Body::Evaluation(e) => {
                need_genid()?;
                if !e.problems.is_empty() {
                    return Err(ArchiveError::InvalidStamp(e.problems.clone()));
                }
            }
            Body::Gate(g) => {
                need_genid()?;
                if g.verdict().is_none() {
                    return Err(inv("a gate event needs verdict keep|discard".into()));
                }
            }
            Body::Status(s) => {
                need_genid()?;
                if s.terminal_status().is_none() {
                    return Err(inv(format!(
                        "a status event needs a status among {:?}",
                        TERMINAL_STATUSES.map(Status::as_str)
                    )));
                }
            }
            Body::Record(r) => {
                need_genid()?;
                if r.annotations.is_none() {
                    return Err(inv("a record event needs an `annotations` object".into()));
                }
            }
            Body::Generation(_) => need_genid()?,
            Body::Other(_) => {}
        }
        Ok(())
    }

    /// Append one event: validate it (an evaluation's stamped fields must pass
    /// [`check_stamp`](crate::check_stamp())), move aside any torn tail, write exactly one
    /// line of canonical JSON + `\n` (O_APPEND) and fsync it, then write and fsync its
    /// receipt. The body is checked on the line as it will be read back, by the reader
    /// `open` and `verify` use.
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
        self.prepare(event_type, genid, &mut body, at)?;
        let seq = self.lines.len() as u64;
        let event = Event {
            seq,
            prev: hex(&self.last_hash),
            event_type: event_type.to_string(),
            genid: genid.map(str::to_string),
            at: at.to_string(),
            body,
        };
        let mut bytes = event.canonical_line();
        let n = bytes.len();
        bytes.push(b'\n');
        let buf = Arc::new(bytes);
        let line = read_line(&buf[..n]).map_err(|e| {
            ArchiveError::InvalidEvent(format!("the event does not round-trip: {e}"))
        })?;
        if line.head.seq != seq || line.head.prev != self.last_hash {
            return Err(ArchiveError::InvalidEvent(
                "the event does not round-trip".into(),
            ));
        }
        self.validate(&line)?;
        if let Some(t) = self.archive_torn.take() {
            let aside = move_aside(&self.file, &self.path, &t)?;
            self.recovery.preserved.push(aside);
        }
        self.repair_receipts_tail()?;
        let sha: [u8; 32] = Sha256::digest(&buf[..n]).into();
        let sha256 = hex(&sha);
        self.poisoned = true;
        self.file
            .write_all(&buf)
            .and_then(|_| self.file.sync_data())
            .map_err(io(&self.path))?;
        let receipt = self.write_receipt(seq, &sha256)?;
        self.poisoned = false;
        self.last_hash = sha;
        let line_no = seq + 1;
        let rec = LineRec {
            buf: buf.clone(),
            meta: Replayed {
                range: 0..n,
                sha256: sha,
                certified: true,
                event_type: crate::body::type_name(&line.head.event_type),
                cost_usd: line.body.cost_usd(),
            },
        };
        self.state
            .apply_line(line, line_no, true, || StampSource::Line(buf.clone(), 0..n));
        if let Some(events) = self.events.get_mut() {
            events.push(rec.logged(self.lines.len()));
        }
        self.lines.push(rec);
        Ok(AppendedEvent {
            seq,
            line: line_no,
            sha256,
            receipt,
        })
    }

    /// Every event, in order (all certified once open succeeded).
    ///
    /// The writer reads lines without building `serde_json::Value` trees; the first call
    /// builds them for every event (on all cores; about as long as `open` itself), later calls
    /// and appends keep them. The lifecycle needs none of this for its state: see
    /// [`Archive::rows_cached`], [`Archive::fixed_identity`], [`Archive::total_cost_usd`] and
    /// [`Archive::pending`].
    pub fn events(&self) -> &[LoggedEvent] {
        self.events
            .get_or_init(|| par_map(&self.lines, 64, |i, rec| rec.logged(i)))
    }

    /// The events of one type, in order: the lines that [`Archive::events`] would list with
    /// that `type`, read now (only those lines) unless the events are already built. For
    /// events the fold does not cover (e.g. a lifecycle's own `select` or `playbook` events)
    /// without building every event.
    pub fn events_of_type(&self, event_type: &str) -> Vec<LoggedEvent> {
        self.events_of_type_from(event_type, 0)
    }

    /// [`Archive::events_of_type`] over the lines from seq `from` on: what a reader that
    /// has taken the first `from` lines (see [`Archive::next_seq`]) has not seen yet.
    pub fn events_of_type_from(&self, event_type: &str, from: u64) -> Vec<LoggedEvent> {
        let skip = usize::try_from(from).unwrap_or(usize::MAX);
        if let Some(events) = self.events.get() {
            return events
                .iter()
                .skip(skip)
                .filter(|e| e.event.event_type == event_type)
                .cloned()
                .collect();
        }
        self.lines
            .iter()
            .enumerate()
            .skip(skip)
            .filter(|(_, rec)| rec.meta.event_type == event_type)
            .map(|(i, rec)| rec.logged(i))
            .collect()
    }

    /// The folded rows (a copy of [`Archive::rows_cached`]; stamps are shared, not copied).
    pub fn rows(&self) -> Vec<Row> {
        self.state.folder.rows().to_vec()
    }

    /// The folded rows, kept current by every append (never refolded).
    pub fn rows_cached(&self) -> &[Row] {
        self.state.folder.rows()
    }

    /// Generation zero's fixed identity: [`fixed_identity`](crate::fixed_identity()) of this
    /// archive's events and rows, without building the events.
    pub fn fixed_identity(&self) -> Option<FixedIdentity> {
        self.state
            .genesis_identity
            .clone()
            .or_else(|| identity_of_row0(self.state.folder.rows()))
    }

    /// Σ `cost_usd` over all events: [`total_cost_usd`](crate::total_cost_usd()) of
    /// [`Archive::events`], without building them.
    pub fn total_cost_usd(&self) -> f64 {
        self.lines
            .iter()
            .filter(|l| l.meta.certified)
            .filter_map(|l| l.meta.cost_usd)
            .sum()
    }

    /// What a resumed run still has to finish: [`pending`](crate::pending()) of the rows.
    pub fn pending(&self) -> Pending {
        pending(self.state.folder.rows())
    }

    /// The seq the next append gets.
    pub fn next_seq(&self) -> u64 {
        self.lines.len() as u64
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
