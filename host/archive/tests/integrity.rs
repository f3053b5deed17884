//! `verify` against tampering: every tampered archive is detected, and tampered rows are never
//! eligible parents.

use crate::common;
use common::*;
use evolve_archive::{
    Archive, ExperimentKey, FindingKind, Ineligible, Report, canonical_bytes, sha256_hex, verify,
};
use serde_json::{Value, json};

// Lines of `standard` (0-based): 0 genesis, 1 eval 0 (genesis, 0.5), 2 eval 0 (anchor, 1.0),
// 3 gate 0, 4 generation 1, 5 eval 1 (0.75), 6 gate 1, 7 generation 2, 8 eval 2 (0.25), 9 gate 2.

fn run(ws: &Ws, tags_for: &[&str], cache: Option<&Value>) -> Report {
    let t = tags(tags_for);
    verify(
        &ws.archive_path(),
        &ws.receipts_path(),
        &public(),
        &lookup(&t),
        cache,
    )
}

fn kinds(r: &Report) -> Vec<(Option<u64>, FindingKind)> {
    r.findings.iter().map(|f| (f.line, f.kind)).collect()
}

fn eligible(r: &Report, genid: &str) -> bool {
    r.eligibility
        .iter()
        .find(|e| e.genid == genid)
        .is_some_and(|e| e.eligible)
}

fn champion(r: &Report) -> Option<(String, f64)> {
    r.champion.as_ref().map(|c| (c.genid.clone(), c.score))
}

/// Re-chain `lines` from `from` on (what a forger who knows the format can do), without receipts.
fn rechain(lines: &mut [String], from: usize) {
    for i in from..lines.len() {
        let mut v: Value = serde_json::from_str(&lines[i]).unwrap();
        v["seq"] = json!(i);
        v["prev"] = json!(if i == 0 {
            evolve_archive::genesis_anchor(EXP)
        } else {
            sha256_hex(lines[i - 1].as_bytes())
        });
        lines[i] = String::from_utf8(canonical_bytes(&v)).unwrap();
    }
}

#[test]
fn clean_archive_verifies() {
    let ws = Ws::new();
    drop(standard(&ws));
    let r = run(
        &ws,
        &["0", "1", "2"],
        Some(&json!({"genid": "1", "score": 0.75})),
    );
    assert!(r.ok(), "{:?}", r.findings);
    assert_eq!(r.verdict(), "ok");
    assert_eq!((r.lines, r.certified), (10, 10));
    assert_eq!(champion(&r), Some(("1".into(), 0.75)));
    assert!(eligible(&r, "0") && eligible(&r, "1") && eligible(&r, "2"));
    // gen 0's anchor (score 1.0) is never its primary score.
    assert_eq!(r.rows[0].score(), Some(0.5));
    assert_eq!(r.rows[0].anchors.len(), 1);
}

#[test]
fn forged_unsigned_lines_are_detected_and_never_parents() {
    let ws = Ws::new();
    drop(standard(&ws));
    let mut lines = ws.lines();
    // A forged, correctly chained candidate 3 with a perfect score, kept by a forged gate.
    let mk = |ty: &str, body: serde_json::Map<String, Value>| {
        String::from_utf8(canonical_bytes(&json!({"seq": 0, "prev": "0".repeat(64), "type": ty, "genid": "3", "at": AT, "body": body}))).unwrap()
    };
    lines.push(mk("generation", obj(json!({"parent": "1"}))));
    lines.push(mk(
        "evaluation",
        stamp("3", Some("1"), "candidate", &[1.0, 1.0]),
    ));
    lines.push(mk("gate", obj(json!({"verdict": "keep"}))));
    rechain(&mut lines, 10);
    ws.write_lines(&lines);
    let r = run(&ws, &["0", "1", "2", "3"], None);
    assert_eq!(
        kinds(&r),
        vec![
            (Some(11), FindingKind::ReceiptMissing),
            (Some(12), FindingKind::ReceiptMissing),
            (Some(13), FindingKind::ReceiptMissing)
        ]
    );
    assert!(!eligible(&r, "3"));
    assert_eq!(champion(&r), Some(("1".into(), 0.75)));
    // The writer refuses it (more than the one trailing unsigned line a crash can leave).
    assert!(Archive::open(&ws.archive_path(), EXP, key()).is_err());

    // A forged line inserted in the middle.
    let mut lines = ws.lines()[..10].to_vec();
    lines.insert(
        6,
        mk("gate", obj(json!({"verdict": "keep"}))).replace("\"genid\":\"3\"", "\"genid\":\"2\""),
    );
    ws.write_lines(&lines);
    let r = run(&ws, &["0", "1", "2"], None);
    assert!(
        kinds(&r).iter().any(|(l, k)| *l == Some(7)
            && matches!(
                k,
                FindingKind::ReceiptMissing | FindingKind::EventHashMismatch
            )),
        "{:?}",
        r.findings
    );
    assert!(kinds(&r).contains(&(Some(7), FindingKind::SeqMismatch)));
    assert!(!r.ok());
    assert!(!eligible(&r, "2") && !eligible(&r, "1"));
}

#[test]
fn edited_score_with_copied_signature_is_detected_and_never_a_parent() {
    let ws = Ws::new();
    drop(standard(&ws));
    let orig = ws.lines();
    // Edit gen 2's evaluation to a (self-consistent) perfect score.
    let mut lines = orig.clone();
    let mut v: Value = serde_json::from_str(&lines[8]).unwrap();
    v["body"] = Value::Object(stamp("2", Some("1"), "candidate", &[1.0, 1.0]));
    lines[8] = String::from_utf8(canonical_bytes(&v)).unwrap();
    ws.write_lines(&lines);

    // (a) the receipt left as it was.
    let r = run(&ws, &["0", "1", "2"], None);
    assert_eq!(
        kinds(&r),
        vec![
            (Some(9), FindingKind::EventHashMismatch),
            (Some(10), FindingKind::ChainBroken)
        ]
    );
    assert!(!eligible(&r, "2"));
    assert_eq!(champion(&r), Some(("1".into(), 0.75)));
    let e2 = r.eligibility.iter().find(|e| e.genid == "2").unwrap();
    assert!(
        matches!(&e2.reasons[0], Ineligible::UncertifiedLines { lines } if lines == &vec![9, 10]),
        "{:?}",
        e2.reasons
    );

    // (b) the receipt's digest updated to the edited line, the signature copied.
    let mut receipts = ws.receipts();
    let mut rv: Value = serde_json::from_str(&receipts[8]).unwrap();
    rv["event_sha256"] = json!(sha256_hex(lines[8].as_bytes()));
    receipts[8] = String::from_utf8(canonical_bytes(&rv)).unwrap();
    ws.write_receipts(&receipts);
    let r = run(&ws, &["0", "1", "2"], None);
    assert!(
        kinds(&r).contains(&(Some(9), FindingKind::SignatureInvalid)),
        "{:?}",
        r.findings
    );
    assert!(!eligible(&r, "2"));

    // (c) the signature of another receipt copied too (and the rest of the chain re-linked).
    let good: Value = serde_json::from_str(&ws.receipts()[5]).unwrap();
    rv["sig"] = good["sig"].clone();
    receipts[8] = String::from_utf8(canonical_bytes(&rv)).unwrap();
    ws.write_receipts(&receipts);
    rechain(&mut lines, 9);
    ws.write_lines(&lines);
    let r = run(&ws, &["0", "1", "2"], None);
    assert!(
        kinds(&r).contains(&(Some(9), FindingKind::SignatureInvalid)),
        "{:?}",
        r.findings
    );
    assert!(
        kinds(&r).contains(&(Some(10), FindingKind::EventHashMismatch)),
        "{:?}",
        r.findings
    );
    assert!(!eligible(&r, "2"));
    assert_eq!(champion(&r), Some(("1".into(), 0.75)));

    // (d) every receipt re-signed by an attacker's own key.
    let evil = ExperimentKey::from_seed(EXP, [9u8; 32]);
    let forged: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let h = sha256_hex(l.as_bytes());
            String::from_utf8(canonical_bytes(&json!({"seq": i, "event_sha256": h, "key_id": evil.key_id(), "sig": evil.sign_receipt(i as u64, &h)}))).unwrap()
        })
        .collect();
    ws.write_receipts(&forged);
    let r = run(&ws, &["0", "1", "2"], None);
    assert_eq!(
        r.findings
            .iter()
            .filter(|f| f.kind == FindingKind::WrongKey)
            .count(),
        10
    );
    assert_eq!(r.champion, None);
    // ... or claiming the real key id.
    let forged: Vec<String> = forged
        .iter()
        .map(|l| l.replace(evil.key_id(), key().key_id()))
        .collect();
    ws.write_receipts(&forged);
    let r = run(&ws, &["0", "1", "2"], None);
    assert_eq!(
        r.findings
            .iter()
            .filter(|f| f.kind == FindingKind::SignatureInvalid)
            .count(),
        10
    );
    assert_eq!(r.champion, None);
}

#[test]
fn dropped_lines_are_detected() {
    let ws = Ws::new();
    drop(standard(&ws));
    let orig = ws.lines();
    // Drop gen 2's evaluation (line 9) from the middle.
    let mut lines = orig.clone();
    lines.remove(8);
    ws.write_lines(&lines);
    let r = run(&ws, &["0", "1", "2"], None);
    let k = kinds(&r);
    assert!(k.contains(&(Some(9), FindingKind::SeqMismatch)), "{k:?}");
    assert!(k.contains(&(Some(9), FindingKind::ChainBroken)), "{k:?}");
    assert!(
        k.iter()
            .any(|(_, kind)| *kind == FindingKind::ReceiptOrphan),
        "{k:?}"
    );
    assert!(!eligible(&r, "2"));
    // Drop gen 1's gate: row 1 is no longer kept.
    let mut lines = orig.clone();
    lines.remove(6);
    ws.write_lines(&lines);
    let r = run(&ws, &["0", "1", "2"], None);
    assert!(!r.ok());
    assert!(!eligible(&r, "1") && !eligible(&r, "2"));
    assert_eq!(champion(&r), Some(("0".into(), 0.5)));
    // Drop the final line: its receipt is an orphan.
    let mut lines = orig.clone();
    lines.pop();
    ws.write_lines(&lines);
    let r = run(&ws, &["0", "1", "2"], None);
    assert_eq!(
        r.findings
            .iter()
            .map(|f| (f.source, f.kind))
            .collect::<Vec<_>>(),
        vec![(evolve_archive::Source::Receipts, FindingKind::ReceiptOrphan)]
    );
    assert_eq!(r.findings[0].line, Some(10));
    assert!(!eligible(&r, "2"), "row 2 lost its gate: pending");
    assert!(Archive::open(&ws.archive_path(), EXP, key()).is_err());
}

#[test]
fn reordered_lines_are_detected() {
    let ws = Ws::new();
    drop(standard(&ws));
    let mut lines = ws.lines();
    lines.swap(6, 9); // gate 1 <-> gate 2
    ws.write_lines(&lines);
    let r = run(&ws, &["0", "1", "2"], None);
    let k = kinds(&r);
    assert!(
        k.contains(&(Some(7), FindingKind::SeqMismatch))
            && k.contains(&(Some(10), FindingKind::SeqMismatch)),
        "{k:?}"
    );
    assert!(k.contains(&(Some(7), FindingKind::ChainBroken)), "{k:?}");
    assert!(!eligible(&r, "1") && !eligible(&r, "2"));
    assert_eq!(champion(&r), Some(("0".into(), 0.5)));
    assert!(Archive::open(&ws.archive_path(), EXP, key()).is_err());
    // Receipts reordered (events intact): reported, events still certified.
    let ws = Ws::new();
    drop(standard(&ws));
    let mut receipts = ws.receipts();
    receipts.swap(2, 3);
    ws.write_receipts(&receipts);
    let r = run(&ws, &["0", "1", "2"], None);
    assert_eq!(kinds(&r), vec![(Some(3), FindingKind::ReceiptOrder)]);
}

#[test]
fn moved_tag_is_a_finding_and_makes_the_row_ineligible() {
    let ws = Ws::new();
    drop(standard(&ws));
    let mut t = tags(&["0", "1", "2"]);
    t.insert("1".into(), commit("evil"));
    let r = verify(
        &ws.archive_path(),
        &ws.receipts_path(),
        &public(),
        &lookup(&t),
        None,
    );
    assert_eq!(kinds(&r), vec![(Some(6), FindingKind::TagMoved)]);
    assert!(r.findings[0].message.contains("gen/1"), "{}", r.findings[0]);
    assert!(!eligible(&r, "1"));
    assert_eq!(champion(&r), Some(("0".into(), 0.5)));
    // A deleted tag too.
    t.remove("2");
    let r = verify(
        &ws.archive_path(),
        &ws.receipts_path(),
        &public(),
        &lookup(&t),
        None,
    );
    assert!(kinds(&r).contains(&(Some(9), FindingKind::TagMissing)));
    assert!(!eligible(&r, "2"));
}

#[test]
fn edited_champion_cache_is_a_finding() {
    let ws = Ws::new();
    drop(standard(&ws));
    for cache in [
        json!({"genid": "2", "score": 0.75}),
        json!({"genid": "1", "score": 0.99}),
        Value::Null,
        json!("1"),
    ] {
        let r = run(&ws, &["0", "1", "2"], Some(&cache));
        assert_eq!(
            kinds(&r),
            vec![(None, FindingKind::ChampionCache)],
            "{cache}"
        );
    }
    let r = run(
        &ws,
        &["0", "1", "2"],
        Some(&evolve_archive::Champion::cache_value(Some(
            &evolve_archive::Champion {
                genid: "1".into(),
                score: 0.75,
            },
        ))),
    );
    assert!(r.ok());
}

#[test]
fn evaluator_fingerprint_mismatch_is_a_finding_and_ineligible() {
    let ws = Ws::new();
    let mut a = standard(&ws);
    a.append("generation", Some("3"), obj(json!({"parent": "1"})), AT)
        .unwrap();
    let mut s = stamp("3", Some("1"), "candidate", &[1.0, 1.0]);
    s.insert(
        "evaluator_fingerprint".into(),
        json!("ffffffffffffffffffffffffffffffffffffffff"),
    );
    a.append("evaluation", Some("3"), s, AT).unwrap();
    a.append("gate", Some("3"), obj(json!({"verdict": "keep"})), AT)
        .unwrap();
    drop(a);
    let r = run(&ws, &["0", "1", "2", "3"], None);
    assert_eq!(kinds(&r), vec![(Some(12), FindingKind::EvaluatorMismatch)]);
    let e3 = r.eligibility.iter().find(|e| e.genid == "3").unwrap();
    assert!(
        matches!(&e3.reasons[..], [Ineligible::IdentityMismatch { field, .. }] if field == "evaluator_fingerprint"),
        "{:?}",
        e3.reasons
    );
    assert_eq!(champion(&r), Some(("1".into(), 0.75)));
}

#[test]
fn tags_without_rows_reveal_a_rollback() {
    let ws = Ws::new();
    drop(standard(&ws));
    // Roll both files back by three lines consistently: the chain and receipts look fine...
    let lines = ws.lines();
    ws.write_lines(&lines[..7]);
    let receipts = ws.receipts();
    ws.write_receipts(&receipts[..7]);
    let r = run(&ws, &["0", "1"], None);
    assert!(r.ok(), "{:?}", r.findings);
    // ... but the gen/2 tag has no row.
    let f = evolve_archive::untracked_tags(&r.rows, &["0".into(), "1".into(), "2".into()]);
    assert_eq!(
        f.iter().map(|f| f.kind).collect::<Vec<_>>(),
        vec![FindingKind::UntrackedTag]
    );
    assert!(f[0].message.contains("gen/2"));
}

#[test]
fn writer_open_rejects_a_rechained_forgery_with_updated_digests() {
    // The writer's open verifies one signature per chained segment; a forger without the key
    // who edits a line, re-links the chain and updates every receipt digest still fails.
    let ws = Ws::new();
    drop(standard(&ws));
    let mut lines = ws.lines();
    let mut v: Value = serde_json::from_str(&lines[5]).unwrap();
    v["body"] = Value::Object(stamp("1", Some("0"), "candidate", &[1.0, 1.0]));
    lines[5] = String::from_utf8(canonical_bytes(&v)).unwrap();
    rechain(&mut lines, 6);
    ws.write_lines(&lines);
    let receipts: Vec<String> = ws
        .receipts()
        .iter()
        .zip(&lines)
        .map(|(r, l)| {
            let mut rv: Value = serde_json::from_str(r).unwrap();
            rv["event_sha256"] = json!(sha256_hex(l.as_bytes()));
            String::from_utf8(canonical_bytes(&rv)).unwrap()
        })
        .collect();
    ws.write_receipts(&receipts);
    let err = Archive::open(&ws.archive_path(), EXP, key()).unwrap_err();
    let evolve_archive::ArchiveError::Integrity { findings } = &err else {
        panic!("{err}")
    };
    assert!(
        findings
            .iter()
            .all(|f| f.kind == FindingKind::SignatureInvalid),
        "{findings:?}"
    );
    assert_eq!(findings.first().and_then(|f| f.line), Some(6));
    let r = run(&ws, &["0", "1", "2"], None);
    assert_eq!(r.findings.len(), 5, "{:?}", r.findings);
    assert_eq!(champion(&r), Some(("0".into(), 0.5)));
}
