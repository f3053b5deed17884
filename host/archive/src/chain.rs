//! The structural check of an archive and its receipts, shared by
//! [`Archive::open`](crate::Archive::open) and [`verify`](crate::verify()): lines (read by
//! the one reader, `body::read_line`), hash chain, sequence, receipts, signatures.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::body::{Body, Line, is_canonical, read_line};
use crate::canonical::{canonical_bytes, hex, unhex};
use crate::event::{genesis_anchor, types};
use crate::keys::PublicKey;

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

/// One line of `receipts.jsonl`: `{"event_sha256","key_id","seq","sig"}` (canonical JSON),
/// each key exactly once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
        Receipt::deserialize(v).map_err(|e| e.to_string())
    }

    /// One line of `receipts.jsonl` (without the newline).
    pub fn from_line(bytes: &[u8]) -> Result<Receipt, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
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

/// A line that is a well-formed event, after the structural check.
#[derive(Debug)]
pub(crate) struct Checked<'a> {
    /// 1-based line number.
    pub line: u64,
    /// The line's bytes in the archive (without the newline).
    pub range: Range<usize>,
    pub sha256: [u8; 32],
    pub certified: bool,
    pub item: Line<'a>,
}

/// Result of the structural check.
#[derive(Debug)]
pub(crate) struct LogCheck<'a> {
    pub events: Vec<Checked<'a>>,
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

/// A line read, or why it is malformed.
type ReadResult<'a> = Result<(Shape, Line<'a>), String>;

/// What the structural check reads of a line besides its envelope.
struct Shape {
    is_genesis: bool,
    /// `body.experiment` is the experiment id.
    experiment_ok: bool,
    /// The line is RFC 8785 canonical JSON (`true` when not checked).
    canonical: bool,
}

/// The structural check of an archive and its receipts against `public`; with
/// `check_canonical`, every line must also be in canonical form (the audit; the writer's open
/// leaves it out, see `docs/archive.md`).
pub(crate) fn check_log<'a>(
    archive: &'a [u8],
    receipts: &[u8],
    public: &PublicKey,
    check_canonical: bool,
    mode: Mode,
) -> LogCheck<'a> {
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
    let experiment = public.experiment_id();
    let read: Vec<([u8; 32], ReadResult<'a>)> = par_map(&lines, 256, |_, r| {
        let bytes = &archive[r.clone()];
        let read = read_line(bytes).map(|l| {
            let shape = Shape {
                is_genesis: l.head.event_type == types::GENESIS,
                experiment_ok: matches!(&l.body, Body::Genesis(g) if g.experiment.as_deref() == Some(experiment)),
                canonical: !check_canonical || is_canonical(bytes),
            };
            (shape, l)
        });
        (Sha256::digest(bytes).into(), read)
    });
    let hashes: Vec<[u8; 32]> = read.iter().map(|(h, _)| *h).collect();
    // (header, payload, structurally ok) per line.
    let mut parsed: Vec<Option<(Shape, Line<'a>, bool)>> = Vec::with_capacity(lines.len());
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
        if out.head.seq != i as u64 {
            ok = false;
            findings.push(Finding::new(a, Some(line), FindingKind::SeqMismatch, format!(
                "seq is {} but the line is at position {i}: a line was dropped, inserted or moved",
                out.head.seq
            )));
        }
        let expected_prev = if i == 0 { &anchor } else { &hashes[i - 1] };
        links[i] = out.head.prev == *expected_prev;
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
    let recs: Vec<Result<Receipt, String>> = par_map(&rlines, 512, |_, range| {
        Receipt::from_line(&receipts[range.clone()])
    });
    let mut claimed = SeqMap::new(lines.len());
    for (_, l, _) in parsed.iter().flatten() {
        claimed.insert(l.head.seq, ());
    }
    let mut by_seq: SeqMap<(u64, Receipt)> = SeqMap::new(lines.len());
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
    let cand: Vec<Option<&Receipt>> = parsed
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (_, l, _) = p.as_ref()?;
            let (_, rec) = by_seq.get(l.head.seq)?;
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
        let Some((_, item, ok)) = p else { continue };
        let receipt_ok = match by_seq.get(item.head.seq) {
            None => {
                findings.push(Finding::new(
                    a,
                    Some(line),
                    FindingKind::ReceiptMissing,
                    format!("seq {} has no receipt: unsigned line", item.head.seq),
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
