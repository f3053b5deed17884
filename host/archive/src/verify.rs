//! The full audit behind `evolve verify`: the structural check ([`crate::chain`], every
//! signature, canonical form), then the stamped fields, the fixed identity, the tags and the
//! champion cache.

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::body::{Body, Line};
use crate::chain::{Mode, check_log};
use crate::eligibility::{
    Champion, Eligibility, FixedIdentity, champion, eligibility, identity_of_row0,
};
use crate::event::GENESIS_GENID;
use crate::fold::{Folded, Row, replay};
use crate::keys::PublicKey;

pub use crate::chain::{Finding, FindingKind, Receipt, Source, TornTail};
pub use crate::event::LoggedEvent;

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
    let archive = Arc::new(read_or_finding(
        archive_path,
        Source::Archive,
        &mut findings,
    ));
    let receipts = read_or_finding(receipts_path, Source::Receipts, &mut findings);
    let check = check_log(&archive, &receipts, public_key, true, Mode::Full);
    findings.extend(check.findings);
    let certified = check.events.iter().filter(|c| c.certified).count() as u64;
    for c in check.events.iter().filter(|c| c.certified) {
        semantic_findings(c.line, &c.item, &mut findings);
    }
    let (_, folded) = replay(check.events, &archive, false);
    let Folded {
        folder,
        genesis_identity,
        genesis_names_identity,
    } = folded;
    let rows = folder.into_rows();
    let genesis = genesis_names_identity.then_some(genesis_identity.as_ref());
    identity_findings(genesis, &rows, &mut findings);
    let identity = genesis_identity.or_else(|| identity_of_row0(&rows));
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
        certified,
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

/// What a certified line's body must be, besides what the fold reads from it.
fn semantic_findings(line: u64, l: &Line<'_>, findings: &mut Vec<Finding>) {
    let invalid = |message: String| {
        Finding::new(
            Source::Archive,
            Some(line),
            FindingKind::InvalidEvent,
            message,
        )
    };
    let no_genid = l.genid().is_none();
    match &l.body {
        Body::Evaluation(e) if !e.problems.is_empty() => findings.push(Finding::new(
            Source::Archive,
            Some(line),
            FindingKind::StampInvalid,
            e.problems.join("; "),
        )),
        Body::Gate(g) if no_genid || g.verdict().is_none() => findings.push(invalid(
            "a gate event needs a genid and verdict keep|discard".into(),
        )),
        Body::Status(s) if no_genid || s.terminal_status().is_none() => {
            findings.push(invalid(format!(
                "status event with unknown status {:?} or no genid",
                s.status.as_deref().unwrap_or("")
            )));
        }
        Body::Record(r) if no_genid || r.annotations.is_none() => findings.push(invalid(
            "a record event needs a genid and an `annotations` object".into(),
        )),
        _ => {}
    }
}

/// The fixed identity's sources against each other, and every evaluation's evaluator
/// against it. `genesis`: the certified genesis event's `fixed_identity` when it has the key
/// (`Some(None)`: not a valid identity).
fn identity_findings(
    genesis: Option<Option<&FixedIdentity>>,
    rows: &[Row],
    findings: &mut Vec<Finding>,
) {
    let identity = genesis
        .flatten()
        .cloned()
        .or_else(|| identity_of_row0(rows));
    let identity = identity.as_ref();
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
    if let Some(from_genesis) = genesis
        && let Some(row0) = rows.iter().find(|r| r.genid == GENESIS_GENID)
        && let Some(ev0) = row0
            .evaluation
            .as_ref()
            .filter(|e| e.purpose() == Some("genesis"))
        && let Some(from_eval) = FixedIdentity::from_evaluation(ev0)
        && from_genesis != Some(&from_eval)
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
