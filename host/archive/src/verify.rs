//! Integrity checking: the structural check shared by [`Archive::open`](crate::Archive::open)
//! and [`verify`] (lines, hash chain, sequence, receipts, signatures), and the full audit
//! (stamped fields, fixed identity, tags, champion cache).

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::canonical::{canonical_bytes, hex, unhex};
use crate::eligibility::{
    Champion, Eligibility, FixedIdentity, champion, eligibility, fixed_identity,
};
use crate::event::{Event, GENESIS_GENID, TERMINAL_STATUSES, check_stamp, genesis_anchor, types};
use crate::fold::{Row, fold};
use crate::keys::PublicKey;
use crate::lite::{FastLine, FastRead, RawReceipt, read_line, read_receipt};

/// Which file a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Archive,
    Receipts,
    Tags,
    ChampionCache,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Archive => "archive.jsonl",
            Source::Receipts => "receipts.jsonl",
            Source::Tags => "gen/* tags",
            Source::ChampionCache => "champion cache",
        }
    }
}

/// What is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A file could not be read.
    Io,
    /// A line that is not JSON, or not a well-formed event/receipt.
    Malformed,
    /// The final line is incomplete (a crash mid-append); ignored, repaired on the next append.
    TornTail,
    /// A line is not in RFC 8785 canonical form (the host writes only canonical lines).
    NotCanonical,
    /// `seq` is not the line's position (a line was dropped, inserted or moved).
    SeqMismatch,
    /// `prev` is not the hash of the previous line.
    ChainBroken,
    /// Line 1 is not a genesis event of this experiment, or a genesis event appears later.
    GenesisInvalid,
    ReceiptMissing,
    ReceiptDuplicate,
    /// A receipt names a seq that has no event (a line was dropped or the archive rolled back).
    ReceiptOrphan,
    /// Receipts are not in seq order.
    ReceiptOrder,
    /// A receipt signed by another key.
    WrongKey,
    /// The line's SHA-256 differs from the one its receipt signs (the line was edited).
    EventHashMismatch,
    SignatureInvalid,
    /// A certified evaluation's stamped fields are missing, ill-typed or inconsistent.
    StampInvalid,
    /// A gate, status or record event with an unusable body.
    InvalidEvent,
    /// An evaluation's evaluator fingerprint differs from generation zero's.
    EvaluatorMismatch,
    /// The fixed identity is missing or its sources disagree.
    IdentityMismatch,
    /// `gen/<genid>` names another commit than the certified evaluation's.
    TagMoved,
    /// `gen/<genid>` does not exist for a certified evaluation.
    TagMissing,
    /// A `gen/*` tag with no row in the archive (evidence of a rolled-back archive).
    UntrackedTag,
    /// The champion cache disagrees with the recomputed champion.
    ChampionCache,
}

/// One problem found, with the 1-based line number in its file when there is one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub source: Source,
    pub line: Option<u64>,
    pub kind: FindingKind,
    pub message: String,
}

impl Finding {
    pub fn new(
        source: Source,
        line: Option<u64>,
        kind: FindingKind,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            source,
            line,
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = serde_json::to_value(self.kind).ok();
        let kind = kind.as_ref().and_then(Value::as_str).unwrap_or("finding");
        match self.line {
            Some(l) => write!(
                f,
                "{} line {l}: {kind}: {}",
                self.source.name(),
                self.message
            ),
            None => write!(f, "{}: {kind}: {}", self.source.name(), self.message),
        }
    }
}

/// An event read from the archive, with its position and whether it is certified: its line is
/// well formed and canonical-independent of position (seq = line − 1), chained to the previous
/// line, and carries a valid receipt under the experiment's key.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedEvent {
    /// 1-based line number in `archive.jsonl`.
    pub line: u64,
    pub event: Event,
    /// Hex SHA-256 of the line's bytes (without the newline).
    pub sha256: String,
    pub certified: bool,
}

/// One line of `receipts.jsonl`: `{"event_sha256","key_id","seq","sig"}` (canonical JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    pub seq: u64,
    pub event_sha256: String,
    pub key_id: String,
    /// Hex of the 64-byte Ed25519 signature over
    /// canonical `{"event_sha256": h, "experiment": id, "seq": n}`.
    pub sig: String,
}

impl Receipt {
    pub fn to_value(&self) -> Value {
        json!({ "seq": self.seq, "event_sha256": self.event_sha256, "key_id": self.key_id, "sig": self.sig })
    }

    pub fn from_value(v: &Value) -> Result<Receipt, String> {
        let o = v.as_object().ok_or("a receipt must be a JSON object")?;
        if o.len() != 4 {
            return Err("a receipt has exactly the keys seq, event_sha256, key_id, sig".into());
        }
        let s = |k: &str| {
            o.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or(format!("`{k}` must be a string"))
        };
        Ok(Receipt {
            seq: o
                .get("seq")
                .and_then(Value::as_u64)
                .ok_or("`seq` must be a non-negative integer")?,
            event_sha256: s("event_sha256")?,
            key_id: s("key_id")?,
            sig: s("sig")?,
        })
    }

    /// The line written to `receipts.jsonl` (canonical JSON + newline).
    pub fn line(&self) -> Vec<u8> {
        let mut b = canonical_bytes(&self.to_value());
        b.push(b'\n');
        b
    }
}

/// An incomplete final line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TornTail {
    /// 1-based line number the torn bytes would have had.
    pub line: u64,
    /// Byte offset where the torn bytes start (= the length of the intact part).
    pub offset: u64,
    pub len: u64,
}

/// Split into complete lines (byte ranges, without the newline); trailing bytes without a
/// newline, or a final line that is not JSON, are the torn tail (a crash mid-append), never
/// part of the log.
pub(crate) fn split_lines(bytes: &[u8]) -> (Vec<Range<usize>>, Option<TornTail>) {
    let mut lines: Vec<Range<usize>> = Vec::new();
    let mut start = 0usize;
    while let Some(n) = find_newline(&bytes[start..]) {
        lines.push(start..start + n);
        start += n + 1;
    }
    let mut torn_from = (start < bytes.len()).then_some(start);
    if torn_from.is_none()
        && let Some(last) = lines.last()
        && serde_json::from_slice::<serde::de::IgnoredAny>(&bytes[last.clone()]).is_err()
    {
        torn_from = Some(last.start);
        lines.pop();
    }
    let torn = torn_from.map(|off| TornTail {
        line: lines.len() as u64 + 1,
        offset: off as u64,
        len: (bytes.len() - off) as u64,
    });
    (lines, torn)
}

/// The position of the first `\n`, eight bytes at a time.
fn find_newline(b: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let words = b.chunks_exact(8);
    let tail = words.remainder();
    for (k, w) in words.enumerate() {
        let w = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        let x = w ^ (LO * u64::from(b'\n'));
        // The lowest set bit marks the first zero byte of `x` (borrows only move upwards).
        let z = x.wrapping_sub(LO) & !x & HI;
        if z != 0 {
            return Some(k * 8 + (z.trailing_zeros() / 8) as usize);
        }
    }
    let base = b.len() - tail.len();
    tail.iter().position(|c| *c == b'\n').map(|p| base + p)
}

/// Worker threads for the per-line work (computed once).
fn threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8)
    })
}

/// `items.iter().enumerate().map(f).collect()`, spread over the available cores when there
/// are at least `min_per_thread` items per thread. Items are handed out in blocks by an atomic
/// counter (the calling thread works too), so a thread the scheduler delays on a busy machine
/// does not hold the others up.
pub(crate) fn par_map<T: Sync, R: Send>(
    items: &[T],
    min_per_thread: usize,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let n = threads().min(items.len() / min_per_thread.max(1)).max(1);
    if n <= 1 {
        return items.iter().enumerate().map(|(i, x)| f(i, x)).collect();
    }
    let block = (items.len() / (n * 8)).max(16);
    let blocks = items.len().div_ceil(block);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done: Vec<(usize, Vec<R>)> = Vec::new();
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            if b >= blocks {
                return done;
            }
            let start = b * block;
            let part = &items[start..(start + block).min(items.len())];
            done.push((
                b,
                part.iter()
                    .enumerate()
                    .map(|(i, x)| f(start + i, x))
                    .collect(),
            ));
        }
    };
    let mut done = std::thread::scope(|scope| {
        // A thread that cannot be started (resource limits) just leaves its blocks to the
        // others; the calling thread always takes part.
        let handles: Vec<_> = (1..n)
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok())
            .collect();
        let mut done = work();
        for h in handles {
            match h.join() {
                Ok(part) => done.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        done
    });
    done.sort_unstable_by_key(|(b, _)| *b);
    let mut out = Vec::with_capacity(items.len());
    for (_, part) in done {
        out.extend(part);
    }
    out
}

/// What the structural check needs from a line that is a well-formed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub seq: u64,
    pub prev: [u8; 32],
    pub is_genesis: bool,
    /// `body.experiment` is the experiment id.
    pub experiment_ok: bool,
    /// The line is RFC 8785 canonical JSON (always `true` when not checked).
    pub canonical: bool,
}

/// Reads one archive line into a [`Header`] and a payload, or a `malformed` message.
pub(crate) trait LineReader<'a>: Sync {
    type Out: Send;
    fn read(&self, line: &'a [u8]) -> Result<(Header, Self::Out), String>;
}

/// The straightforward reader: a `serde_json::Value` and [`Event::from_json`]; `verify` uses
/// it with the canonical-form check.
pub(crate) struct ValueReader<'e> {
    pub experiment: &'e str,
    pub check_canonical: bool,
}

impl<'a> LineReader<'a> for ValueReader<'_> {
    type Out = Event;
    fn read(&self, bytes: &'a [u8]) -> Result<(Header, Event), String> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
        let canonical = !self.check_canonical || canonical_bytes(&value) == bytes;
        let event = Event::from_json(value).map_err(|e| format!("not a well-formed event: {e}"))?;
        let header = Header {
            seq: event.seq,
            // `from_json` admits only 64 lower-case hex digits.
            prev: unhex::<32>(&event.prev).unwrap_or([0; 32]),
            is_genesis: event.event_type == types::GENESIS,
            experiment_ok: event.body.get("experiment").and_then(Value::as_str)
                == Some(self.experiment),
            canonical,
        };
        Ok((header, event))
    }
}

/// A line read by the writer's open: without `Value` trees when possible.
#[derive(Debug)]
pub(crate) enum ReadLine<'a> {
    Fast(Box<FastLine<'a>>),
    /// Read the straightforward way (see [`crate::lite`] on the fallback).
    Slow(Event),
}

/// The writer's reader ([`crate::lite::read_line`], falling back to [`ValueReader`]); it does
/// not check canonical form (see `docs/archive.md`).
pub(crate) struct FastReader<'e> {
    pub experiment: &'e str,
}

impl<'a> LineReader<'a> for FastReader<'_> {
    type Out = ReadLine<'a>;
    fn read(&self, bytes: &'a [u8]) -> Result<(Header, ReadLine<'a>), String> {
        match read_line(bytes) {
            FastRead::Event(l) => {
                let header = Header {
                    seq: l.seq,
                    prev: l.prev,
                    is_genesis: l.event_type == types::GENESIS,
                    experiment_ok: l.body.str("experiment") == Some(self.experiment),
                    canonical: true,
                };
                Ok((header, ReadLine::Fast(l)))
            }
            FastRead::Fallback => ValueReader {
                experiment: self.experiment,
                check_canonical: false,
            }
            .read(bytes)
            .map(|(h, e)| (h, ReadLine::Slow(e))),
        }
    }
}

/// A line that is a well-formed event, after the structural check.
#[derive(Debug)]
pub(crate) struct Checked<T> {
    /// 1-based line number.
    pub line: u64,
    /// The line's bytes in the archive (without the newline).
    pub range: Range<usize>,
    pub sha256: [u8; 32],
    pub certified: bool,
    pub item: T,
}

/// Result of the structural check.
#[derive(Debug)]
pub(crate) struct LogCheck<T> {
    pub events: Vec<Checked<T>>,
    pub findings: Vec<Finding>,
    pub archive_torn: Option<TornTail>,
    pub receipts_torn: Option<TornTail>,
    /// Number of complete archive lines (well formed or not).
    pub lines: u64,
    /// Hash of the last complete line (the anchor when there is none).
    pub last_hash: [u8; 32],
}

/// A map keyed by seq: a table for the seqs of an intact archive (`0..dense`), a hash map
/// for the others.
struct SeqMap<T> {
    dense: Vec<Option<T>>,
    sparse: HashMap<u64, T>,
}

impl<T> SeqMap<T> {
    fn new(dense: usize) -> SeqMap<T> {
        SeqMap {
            dense: std::iter::repeat_with(|| None).take(dense).collect(),
            sparse: HashMap::new(),
        }
    }

    fn get(&self, seq: u64) -> Option<&T> {
        match usize::try_from(seq).ok().and_then(|i| self.dense.get(i)) {
            Some(slot) => slot.as_ref(),
            None => self.sparse.get(&seq),
        }
    }

    fn insert(&mut self, seq: u64, v: T) {
        match usize::try_from(seq)
            .ok()
            .and_then(|i| self.dense.get_mut(i))
        {
            Some(slot) => *slot = Some(v),
            None => {
                self.sparse.insert(seq, v);
            }
        }
    }
}

/// `s` is exactly the lower-case hex of `raw`.
pub(crate) fn hex_is(s: &str, raw: &[u8; 32]) -> bool {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let b = s.as_bytes();
    b.len() == 64
        && raw.iter().enumerate().all(|(i, x)| {
            b[2 * i] == DIGITS[(x >> 4) as usize] && b[2 * i + 1] == DIGITS[(x & 15) as usize]
        })
}

/// Verify `(seq, event_sha256, sig)` triples, spread over the available cores.
fn verify_signatures(public: &PublicKey, items: &[(u64, &str, &str)]) -> Vec<bool> {
    par_map(items, 32, |_, (s, h, sig)| {
        public.verify_receipt(*s, h, sig)
    })
}

/// How many signatures the structural check verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every receipt's signature (the audit of [`verify`]).
    Full,
    /// One signature per hash-chained segment (the writer's open): every event is still
    /// authenticated, but a garbled signature on a receipt whose line is authenticated by the
    /// chain is not reported.
    Chained,
}

/// The structural check of an archive and its receipts against `public`, reading lines with
/// `reader`.
pub(crate) fn check_log<'a, R: LineReader<'a>>(
    archive: &'a [u8],
    receipts: &[u8],
    public: &PublicKey,
    reader: &R,
    mode: Mode,
) -> LogCheck<R::Out> {
    let mut findings = Vec::new();
    let a = Source::Archive;
    let (lines, archive_torn) = split_lines(archive);
    if let Some(t) = &archive_torn {
        findings.push(Finding::new(a, Some(t.line), FindingKind::TornTail, format!(
            "the final {} bytes are an incomplete line (a crash mid-append); they are ignored and will be moved aside on the next append",
            t.len
        )));
    }
    let anchor_hex = genesis_anchor(public.experiment_id());
    let anchor = unhex::<32>(&anchor_hex).unwrap_or([0; 32]);
    // Per line, on all cores: its hash, and its header and payload (or why it is malformed).
    type Read<T> = ([u8; 32], Result<(Header, T), String>);
    let read: Vec<Read<R::Out>> = par_map(&lines, 256, |_, r| {
        let bytes = &archive[r.clone()];
        (Sha256::digest(bytes).into(), reader.read(bytes))
    });
    let hashes: Vec<[u8; 32]> = read.iter().map(|(h, _)| *h).collect();
    // (header, payload, structurally ok) per line.
    let mut parsed: Vec<Option<(Header, R::Out, bool)>> = Vec::with_capacity(lines.len());
    // links[i]: line i parsed and its `prev` is the hash of line i-1 (the anchor for i = 0).
    let mut links = vec![false; lines.len()];
    for (i, (_, result)) in read.into_iter().enumerate() {
        let line = i as u64 + 1;
        let (h, out) = match result {
            Ok(x) => x,
            Err(message) => {
                findings.push(Finding::new(a, Some(line), FindingKind::Malformed, message));
                parsed.push(None);
                continue;
            }
        };
        let mut ok = true;
        if !h.canonical {
            findings.push(Finding::new(
                a,
                Some(line),
                FindingKind::NotCanonical,
                "the line is not RFC 8785 canonical JSON (the host writes only canonical lines)",
            ));
        }
        if h.seq != i as u64 {
            ok = false;
            findings.push(Finding::new(a, Some(line), FindingKind::SeqMismatch, format!(
                "seq is {} but the line is at position {i}: a line was dropped, inserted or moved",
                h.seq
            )));
        }
        let expected_prev = if i == 0 { &anchor } else { &hashes[i - 1] };
        links[i] = h.prev == *expected_prev;
        if !links[i] {
            ok = false;
            let msg = if i == 0 {
                format!(
                    "prev is not the anchor of experiment {:?} (an archive of another experiment, or line 1 was replaced)",
                    public.experiment_id()
                )
            } else {
                format!("prev does not match the SHA-256 of line {i}: the chain is broken here")
            };
            findings.push(Finding::new(a, Some(line), FindingKind::ChainBroken, msg));
        }
        if i == 0 && (!h.is_genesis || !h.experiment_ok) {
            ok = false;
            findings.push(Finding::new(
                a,
                Some(line),
                FindingKind::GenesisInvalid,
                format!(
                    "line 1 must be a genesis event with body.experiment = {:?}",
                    public.experiment_id()
                ),
            ));
        } else if i > 0 && h.is_genesis {
            ok = false;
            findings.push(Finding::new(
                a,
                Some(line),
                FindingKind::GenesisInvalid,
                "a genesis event after line 1",
            ));
        }
        parsed.push(Some((h, out, ok)));
    }

    // Receipts.
    let r = Source::Receipts;
    let (rlines, receipts_torn) = split_lines(receipts);
    if let Some(t) = &receipts_torn {
        findings.push(Finding::new(r, Some(t.line), FindingKind::TornTail, format!(
            "the final {} bytes are an incomplete receipt line; ignored, moved aside on the next append",
            t.len
        )));
    }
    let recs: Vec<Result<RawReceipt<'_>, String>> = par_map(&rlines, 512, |_, range| {
        let bytes = &receipts[range.clone()];
        read_receipt(bytes).map(Ok).unwrap_or_else(|| {
            serde_json::from_slice::<Value>(bytes)
                .map_err(|e| e.to_string())
                .and_then(|v| Receipt::from_value(&v))
                .map(RawReceipt::from)
        })
    });
    let mut claimed = SeqMap::new(lines.len());
    for (h, _, _) in parsed.iter().flatten() {
        claimed.insert(h.seq, ());
    }
    let mut by_seq: SeqMap<(u64, RawReceipt<'_>)> = SeqMap::new(lines.len());
    let mut order_reported = false;
    for (j, rec) in recs.into_iter().enumerate() {
        let rline = j as u64 + 1;
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                findings.push(Finding::new(
                    r,
                    Some(rline),
                    FindingKind::Malformed,
                    format!("not a receipt: {e}"),
                ));
                continue;
            }
        };
        if rec.seq != j as u64 && !order_reported {
            order_reported = true;
            findings.push(Finding::new(r, Some(rline), FindingKind::ReceiptOrder, format!(
                "receipt for seq {} at position {j}: receipts were dropped, inserted or reordered",
                rec.seq
            )));
        }
        if claimed.get(rec.seq).is_none() {
            let msg = if rec.seq >= lines.len() as u64 {
                format!(
                    "receipt for seq {} but the archive has only {} complete lines: lines were dropped (or rolled back)",
                    rec.seq,
                    lines.len()
                )
            } else {
                format!(
                    "receipt for seq {} but no archive line has that seq: a line was dropped",
                    rec.seq
                )
            };
            findings.push(Finding::new(
                r,
                Some(rline),
                FindingKind::ReceiptOrphan,
                msg,
            ));
        }
        if let Some((first, _)) = by_seq.get(rec.seq) {
            findings.push(Finding::new(
                r,
                Some(rline),
                FindingKind::ReceiptDuplicate,
                format!(
                    "a second receipt for seq {} (first at receipts line {first})",
                    rec.seq
                ),
            ));
            continue;
        }
        by_seq.insert(rec.seq, (rline, rec));
    }

    // Signatures, for receipts that match their line's hash and key: `cand[i]`.
    let cand: Vec<Option<&RawReceipt<'_>>> = parsed
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (h, _, _) = p.as_ref()?;
            let (_, rec) = by_seq.get(h.seq)?;
            (rec.key_id == public.key_id() && hex_is(&rec.event_sha256, &hashes[i])).then_some(rec)
        })
        .collect();
    let mut valid = vec![false; parsed.len()];
    let verify_lines = |idx: &[usize], valid: &mut Vec<bool>| {
        let items: Vec<(u64, &str, &str)> = idx
            .iter()
            .filter_map(|&i| cand[i].map(|r| (r.seq, r.event_sha256.as_ref(), r.sig.as_ref())))
            .collect();
        let results = verify_signatures(public, &items);
        for (&i, ok) in idx.iter().filter(|&&i| cand[i].is_some()).zip(results) {
            valid[i] = ok;
        }
    };
    match mode {
        Mode::Full => verify_lines(&(0..parsed.len()).collect::<Vec<_>>(), &mut valid),
        Mode::Chained => {
            // Segments of lines each linked to its predecessor by `prev`. A valid signature
            // on a segment's last signed line authenticates every line before it in the
            // segment (each line's hash is committed by its successor's `prev`); if it does
            // not verify, every line of the segment is checked on its own.
            let mut segments: Vec<Range<usize>> = Vec::new();
            for (i, linked) in links.iter().enumerate() {
                if i == 0 || !linked {
                    segments.push(i..i + 1);
                } else if let Some(last) = segments.last_mut() {
                    last.end = i + 1;
                }
            }
            let anchors: Vec<usize> = segments
                .iter()
                .filter_map(|seg| seg.clone().rev().find(|&i| cand[i].is_some()))
                .collect();
            verify_lines(&anchors, &mut valid);
            let mut retry = Vec::new();
            for seg in &segments {
                let Some(anchor) = seg.clone().rev().find(|&i| cand[i].is_some()) else {
                    continue;
                };
                if valid[anchor] {
                    for i in seg.start..anchor {
                        valid[i] = cand[i].is_some();
                    }
                } else {
                    retry.extend(seg.start..anchor);
                }
            }
            verify_lines(&retry, &mut valid);
        }
    }

    let mut events = Vec::with_capacity(parsed.len());
    for (i, p) in parsed.into_iter().enumerate() {
        let line = i as u64 + 1;
        let Some((h, item, ok)) = p else { continue };
        let receipt_ok = match by_seq.get(h.seq) {
            None => {
                findings.push(Finding::new(
                    a,
                    Some(line),
                    FindingKind::ReceiptMissing,
                    format!("seq {} has no receipt: unsigned line", h.seq),
                ));
                false
            }
            Some((rl, rec)) if rec.key_id != public.key_id() => {
                findings.push(Finding::new(a, Some(line), FindingKind::WrongKey, format!(
                    "the receipt (receipts line {rl}) names key {} but the experiment key is {}",
                    rec.key_id,
                    public.key_id()
                )));
                false
            }
            Some((rl, rec)) if !hex_is(&rec.event_sha256, &hashes[i]) => {
                findings.push(Finding::new(a, Some(line), FindingKind::EventHashMismatch, format!(
                    "the line's SHA-256 {} differs from the one its receipt (receipts line {rl}) signs: the line was edited after signing",
                    hex(&hashes[i])
                )));
                false
            }
            Some((rl, _)) if !valid[i] => {
                findings.push(Finding::new(a, Some(line), FindingKind::SignatureInvalid, format!(
                    "the signature of its receipt (receipts line {rl}) does not verify under the experiment key: forged or copied"
                )));
                false
            }
            Some(_) => true,
        };
        events.push(Checked {
            line,
            range: lines[i].clone(),
            sha256: hashes[i],
            certified: ok && receipt_ok,
            item,
        });
    }
    // Archive findings by line, then receipts, tags, cache (stable within a line).
    findings.sort_by_key(|f| (f.source as u8, f.line.unwrap_or(u64::MAX)));
    let last_hash = hashes.last().copied().unwrap_or(anchor);
    LogCheck {
        events,
        findings,
        archive_torn,
        receipts_torn,
        lines: lines.len() as u64,
        last_hash,
    }
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// Complete lines in the archive.
    pub lines: u64,
    /// Lines that are certified (well formed, in place, chained and signed).
    pub certified: u64,
    pub fixed_identity: Option<FixedIdentity>,
    /// Rows folded from certified events only.
    pub rows: Vec<Row>,
    pub eligibility: Vec<Eligibility>,
    pub champion: Option<Champion>,
}

impl Report {
    /// True when there are no findings at all.
    pub fn ok(&self) -> bool {
        self.findings.is_empty()
    }

    /// `"ok"` or `"FAIL"`.
    pub fn verdict(&self) -> &'static str {
        if self.ok() { "ok" } else { "FAIL" }
    }
}

fn read_or_finding(path: &Path, source: Source, findings: &mut Vec<Finding>) -> Vec<u8> {
    match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            findings.push(Finding::new(
                source,
                None,
                FindingKind::Io,
                format!("cannot read {}: {e}", path.display()),
            ));
            Vec::new()
        }
    }
}

/// Audit an archive from the evidence alone: the structural check (lines, chain, sequence,
/// receipts, signatures), the stamped fields of every certified evaluation (score recomputed
/// from the task vector), the fixed identity of generation zero (the evaluator fingerprint of
/// every evaluation must equal it), `gen/<genid>` tags against the certified commits (through
/// `tag_lookup`, which returns the commit a tag names, or `None` if it does not exist), and the
/// champion cache (`{"genid":…, "score":…}` or `null`) against the recomputed champion.
///
/// Rows, eligibility and champion are computed from certified events only, so a forged,
/// edited, dropped or reordered line never makes a row an eligible parent.
pub fn verify(
    archive_path: &Path,
    receipts_path: &Path,
    public_key: &PublicKey,
    tag_lookup: &dyn Fn(&str) -> Option<String>,
    champion_cache: Option<&Value>,
) -> Report {
    let mut findings = Vec::new();
    let archive = read_or_finding(archive_path, Source::Archive, &mut findings);
    let receipts = read_or_finding(receipts_path, Source::Receipts, &mut findings);
    let reader = ValueReader {
        experiment: public_key.experiment_id(),
        check_canonical: true,
    };
    let check = check_log(&archive, &receipts, public_key, &reader, Mode::Full);
    findings.extend(check.findings);
    let events: Vec<LoggedEvent> = check
        .events
        .into_iter()
        .map(|c| LoggedEvent {
            line: c.line,
            event: c.item,
            sha256: hex(&c.sha256),
            certified: c.certified,
        })
        .collect();
    let certified: Vec<&LoggedEvent> = events.iter().filter(|e| e.certified).collect();
    semantic_findings(&certified, &mut findings);
    let rows = fold(&events);
    let identity = fixed_identity(&events, &rows);
    identity_findings(&events, &rows, identity.as_ref(), &mut findings);
    let elig = eligibility(&rows, identity.as_ref(), tag_lookup);
    for row in &rows {
        let Some(ev) = &row.evaluation else { continue };
        let Some(commit) = ev.candidate_commit() else {
            continue;
        };
        match tag_lookup(&row.genid) {
            None => findings.push(Finding::new(Source::Tags, Some(ev.line), FindingKind::TagMissing, format!(
                "gen/{} does not exist but archive line {} certifies commit {commit}",
                row.genid, ev.line
            ))),
            Some(c) if c != commit => findings.push(Finding::new(Source::Tags, Some(ev.line), FindingKind::TagMoved, format!(
                "gen/{} names {c} but archive line {} certifies commit {commit}: the tag was moved",
                row.genid, ev.line
            ))),
            Some(_) => {}
        }
    }
    let champ = champion(&rows, &elig);
    if let Some(cache) = champion_cache {
        champion_cache_findings(cache, champ.as_ref(), &mut findings);
    }
    findings.sort_by_key(|f| (f.source as u8, f.line.unwrap_or(u64::MAX)));
    Report {
        findings,
        lines: check.lines,
        certified: certified.len() as u64,
        fixed_identity: identity,
        rows,
        eligibility: elig,
        champion: champ,
    }
}

/// Findings for `gen/*` tags (as listed by the caller, without the `gen/` prefix) that have no
/// row at all. The lifecycle appends a row's first event before creating its tag, so a tag
/// without a row means the archive lost lines: a whole-file rollback that the chain and the
/// receipts alone cannot see.
pub fn untracked_tags(rows: &[Row], tagged_genids: &[String]) -> Vec<Finding> {
    tagged_genids
        .iter()
        .filter(|g| !rows.iter().any(|r| &r.genid == *g))
        .map(|g| Finding::new(Source::Tags, None, FindingKind::UntrackedTag, format!(
            "gen/{g} exists but the archive has no row {g}: the archive was rolled back or truncated"
        )))
        .collect()
}

fn semantic_findings(certified: &[&LoggedEvent], findings: &mut Vec<Finding>) {
    let a = Source::Archive;
    for e in certified {
        let ev = &e.event;
        let body: &Map<String, Value> = &ev.body;
        match ev.event_type.as_str() {
            types::EVALUATION => {
                let problems = check_stamp(ev.genid.as_deref(), body);
                if !problems.is_empty() {
                    findings.push(Finding::new(
                        a,
                        Some(e.line),
                        FindingKind::StampInvalid,
                        problems.join("; "),
                    ));
                }
            }
            types::GATE => {
                let v = body.get("verdict").and_then(Value::as_str);
                if ev.genid.is_none() || !matches!(v, Some("keep" | "discard")) {
                    findings.push(Finding::new(
                        a,
                        Some(e.line),
                        FindingKind::InvalidEvent,
                        "a gate event needs a genid and verdict keep|discard",
                    ));
                }
            }
            types::STATUS => {
                let s = body.get("status").and_then(Value::as_str).unwrap_or("");
                if ev.genid.is_none() || !TERMINAL_STATUSES.contains(&s) {
                    findings.push(Finding::new(
                        a,
                        Some(e.line),
                        FindingKind::InvalidEvent,
                        format!("status event with unknown status {s:?} or no genid"),
                    ));
                }
            }
            types::RECORD
                if ev.genid.is_none() || !body.get("annotations").is_some_and(Value::is_object) =>
            {
                findings.push(Finding::new(
                    a,
                    Some(e.line),
                    FindingKind::InvalidEvent,
                    "a record event needs a genid and an `annotations` object",
                ));
            }
            _ => {}
        }
    }
}

fn identity_findings(
    events: &[LoggedEvent],
    rows: &[Row],
    identity: Option<&FixedIdentity>,
    findings: &mut Vec<Finding>,
) {
    let a = Source::Archive;
    let any_eval = rows.iter().any(|r| {
        r.evaluation.is_some() || !r.anchors.is_empty() || !r.other_evaluations.is_empty()
    });
    let Some(id) = identity else {
        if any_eval {
            findings.push(Finding::new(a, None, FindingKind::IdentityMismatch, format!(
                "no fixed identity: neither the genesis event's `fixed_identity` nor a certified genesis evaluation of row {GENESIS_GENID}"
            )));
        }
        return;
    };
    // Both sources present and disagreeing.
    if let Some(g) = events
        .first()
        .filter(|e| e.certified)
        .and_then(|e| e.event.body.get("fixed_identity"))
        && let Some(row0) = rows.iter().find(|r| r.genid == GENESIS_GENID)
        && let Some(ev0) = row0
            .evaluation
            .as_ref()
            .filter(|e| e.purpose() == Some("genesis"))
        && let Some(from_eval) = FixedIdentity::from_evaluation(ev0)
        && FixedIdentity::from_value(g).as_ref() != Some(&from_eval)
    {
        findings.push(Finding::new(
            a,
            Some(ev0.line),
            FindingKind::IdentityMismatch,
            "the genesis evaluation's identity differs from the genesis event's `fixed_identity`",
        ));
    }
    for row in rows {
        for ev in row
            .evaluation
            .iter()
            .chain(&row.anchors)
            .chain(&row.other_evaluations)
        {
            let fp = ev.evaluator_fingerprint();
            if fp.is_some_and(|fp| fp != id.evaluator_fingerprint) {
                findings.push(Finding::new(
                    a,
                    Some(ev.line),
                    FindingKind::EvaluatorMismatch,
                    format!(
                        "row {}: evaluator fingerprint {} differs from generation zero's {}",
                        row.genid,
                        fp.unwrap_or(""),
                        id.evaluator_fingerprint
                    ),
                ));
            }
        }
    }
}

fn champion_cache_findings(cache: &Value, champ: Option<&Champion>, findings: &mut Vec<Finding>) {
    let c = Source::ChampionCache;
    let recomputed = champ.map_or("none".to_string(), |ch| {
        format!("{} (score {})", ch.genid, ch.score)
    });
    match (cache, champ) {
        (Value::Null, None) => {}
        (Value::Object(o), Some(ch)) => {
            let g = o.get("genid").and_then(Value::as_str);
            let s = o
                .get("score")
                .filter(|x| x.is_number())
                .and_then(Value::as_f64);
            if g != Some(ch.genid.as_str()) || s != Some(ch.score) {
                findings.push(Finding::new(
                    c,
                    None,
                    FindingKind::ChampionCache,
                    format!(
                        "the cache says {} (score {}) but the recomputed champion is {recomputed}",
                        g.unwrap_or("?"),
                        s.map_or("?".into(), |s| s.to_string())
                    ),
                ));
            }
        }
        _ => findings.push(Finding::new(
            c,
            None,
            FindingKind::ChampionCache,
            format!(
                "the cache holds {} but the recomputed champion is {recomputed}",
                crate::canonical::canonical_bytes(cache).escape_ascii()
            ),
        )),
    }
}
