//! The append-only log: round trip, canonical bytes, torn tails, malformed lines, receipts.

use crate::common;
use common::*;
use evolve_archive::{
    Archive, ArchiveError, Event, FindingKind, canonical_bytes, genesis_anchor, sha256_hex, verify,
};
use serde_json::{Value, json};

#[test]
fn append_then_reopen_round_trip() {
    let ws = Ws::new();
    let a = standard(&ws);
    let before: Vec<_> = a.events().to_vec();
    assert_eq!(a.next_seq(), 10);
    drop(a);
    let lines = ws.lines();
    assert_eq!(lines.len(), 10);
    assert_eq!(ws.receipts().len(), 10);
    // Every line is canonical JSON and chained to the previous one.
    let mut prev = genesis_anchor(EXP);
    for (i, l) in lines.iter().enumerate() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(canonical_bytes(&v), l.as_bytes());
        assert_eq!(v["seq"], json!(i));
        assert_eq!(v["prev"], json!(prev));
        prev = sha256_hex(l.as_bytes());
    }
    let b = ws.open();
    assert_eq!(b.events(), &before[..]);
    assert!(b.events().iter().all(|e| e.certified));
    assert_eq!(b.recovery(), &Default::default());
    let mut b = b;
    let r = b
        .append(
            "status",
            Some("3"),
            obj(json!({"status": "no_proposal", "failure_stage": "mutate"})),
            AT,
        )
        .unwrap();
    assert_eq!((r.seq, r.line), (10, 11));
    assert_eq!(r.sha256, sha256_hex(ws.lines()[10].as_bytes()));
    assert!(b.public_key().verify_receipt(10, &r.sha256, &r.receipt.sig));
}

#[test]
fn canonical_bytes_of_a_fixed_event_are_stable() {
    let ev = Event {
        seq: 3,
        prev: genesis_anchor("golden"),
        event_type: "gate".into(),
        genid: Some("2".into()),
        at: "2026-01-31T12:00:00Z".into(),
        body: obj(json!({"verdict": "keep", "reason": "Δ score 0.1", "z": 1.0, "a": [1e21, -0.0]})),
    };
    let line = String::from_utf8(ev.canonical_line()).unwrap();
    assert_eq!(
        genesis_anchor("golden"),
        sha256_hex(br#"{"experiment":"golden"}"#)
    );
    assert_eq!(
        line,
        format!(
            r#"{{"at":"2026-01-31T12:00:00Z","body":{{"a":[1e+21,0],"reason":"Δ score 0.1","verdict":"keep","z":1}},"genid":"2","prev":"{}","seq":3,"type":"gate"}}"#,
            genesis_anchor("golden")
        )
    );
    assert_eq!(sha256_hex(line.as_bytes()), GOLDEN);
}

const GOLDEN: &str = "f6b66a5a017e28f318bbfbe104e497444fb500fb9117cd66e7f820ec0b6f7b13";

#[test]
fn torn_final_line_is_ignored_then_repaired_and_preserved() {
    let ws = Ws::new();
    drop(standard(&ws));
    let intact = std::fs::read(ws.archive_path()).unwrap();
    // A crash mid-append: half a line, no newline.
    let torn = br#"{"at":"2026-01-31T12:00:00Z","body":{"verdi"#;
    let mut bytes = intact.clone();
    bytes.extend_from_slice(torn);
    std::fs::write(ws.archive_path(), &bytes).unwrap();

    // Reading ignores it (and verify reports it as a torn tail, nothing else).
    let report = verify(
        &ws.archive_path(),
        &ws.receipts_path(),
        &public(),
        &lookup(&tags(&["0", "1", "2"])),
        None,
    );
    assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
    assert_eq!(report.findings[0].kind, FindingKind::TornTail);
    assert_eq!(report.findings[0].line, Some(11));
    assert_eq!(report.certified, 10);

    let mut a = ws.open();
    assert_eq!(a.events().len(), 10);
    assert_eq!(
        a.recovery()
            .archive_torn
            .as_ref()
            .map(|t| (t.line, t.offset, t.len)),
        Some((11, intact.len() as u64, torn.len() as u64))
    );
    // Not repaired until the next append.
    assert_eq!(std::fs::read(ws.archive_path()).unwrap(), bytes);
    a.append(
        "gate",
        Some("2"),
        obj(json!({"verdict": "discard", "reason": "x"})),
        AT,
    )
    .unwrap();
    let aside = ws.dir.path().join("archive.jsonl.torn-1");
    assert_eq!(a.recovery().preserved, vec![aside.clone()]);
    assert_eq!(std::fs::read(&aside).unwrap(), torn);
    let now = std::fs::read(ws.archive_path()).unwrap();
    assert_eq!(&now[..intact.len()], &intact[..]);
    assert_eq!(ws.lines().len(), 11);
    drop(a);
    let report = verify(
        &ws.archive_path(),
        &ws.receipts_path(),
        &public(),
        &lookup(&tags(&["0", "1", "2"])),
        None,
    );
    assert!(report.ok(), "{:?}", report.findings);
}

#[test]
fn unparsable_final_line_with_newline_is_torn_too() {
    let ws = Ws::new();
    drop(standard(&ws));
    let mut bytes = std::fs::read(ws.archive_path()).unwrap();
    bytes.extend_from_slice(b"\0\0\0\0\n");
    std::fs::write(ws.archive_path(), &bytes).unwrap();
    let mut a = ws.open();
    assert_eq!(a.recovery().archive_torn.as_ref().map(|t| t.len), Some(5));
    a.append("gate", Some("2"), obj(json!({"verdict": "keep"})), AT)
        .unwrap();
    assert_eq!(
        std::fs::read(ws.dir.path().join("archive.jsonl.torn-1")).unwrap(),
        b"\0\0\0\0\n"
    );
    assert_eq!(ws.lines().len(), 11);
}

#[test]
fn torn_receipt_tail_is_preserved_and_repaired() {
    let ws = Ws::new();
    drop(standard(&ws));
    let mut r = std::fs::read(ws.receipts_path()).unwrap();
    r.extend_from_slice(b"{\"seq\":10,");
    std::fs::write(ws.receipts_path(), &r).unwrap();
    let mut a = ws.open();
    a.append("gate", Some("2"), obj(json!({"verdict": "keep"})), AT)
        .unwrap();
    assert_eq!(
        std::fs::read(ws.dir.path().join("receipts.jsonl.torn-1")).unwrap(),
        b"{\"seq\":10,"
    );
    drop(a);
    assert!(
        verify(
            &ws.archive_path(),
            &ws.receipts_path(),
            &public(),
            &lookup(&tags(&["0", "1", "2"])),
            None
        )
        .ok()
    );
}

#[test]
fn malformed_middle_line_is_an_integrity_error_with_its_line_number() {
    let ws = Ws::new();
    drop(standard(&ws));
    let mut lines = ws.lines();
    lines[4] = "{not json".into();
    ws.write_lines(&lines);
    let err = Archive::open(&ws.archive_path(), EXP, key()).unwrap_err();
    let ArchiveError::Integrity { findings } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (findings[0].line, findings[0].kind),
        (Some(5), FindingKind::Malformed)
    );
    assert!(
        err.to_string().contains("archive.jsonl line 5: malformed"),
        "{err}"
    );
    let report = verify(
        &ws.archive_path(),
        &ws.receipts_path(),
        &public(),
        &lookup(&tags(&["0", "1", "2"])),
        None,
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.line == Some(5) && f.kind == FindingKind::Malformed)
    );
    assert!(!report.ok());
    // An empty line in the middle is malformed too.
    let mut lines = ws.lines();
    lines[4] = String::new();
    ws.write_lines(&lines);
    let err = Archive::open(&ws.archive_path(), EXP, key()).unwrap_err();
    assert!(err.to_string().contains("line 5"), "{err}");
}

#[test]
fn missing_receipt_for_last_line_is_resigned_at_open() {
    let ws = Ws::new();
    drop(standard(&ws));
    let mut receipts = ws.receipts();
    let dropped = receipts.pop().unwrap();
    ws.write_receipts(&receipts);
    // Without repair, verify reports it.
    let report = verify(
        &ws.archive_path(),
        &ws.receipts_path(),
        &public(),
        &lookup(&tags(&["0", "1", "2"])),
        None,
    );
    assert_eq!(
        report
            .findings
            .iter()
            .map(|f| (f.line, f.kind))
            .collect::<Vec<_>>(),
        vec![(Some(10), FindingKind::ReceiptMissing)]
    );
    // The gate of row 2 is the unsigned line: row 2 is pending gate in the verified view.
    let r2 = report.rows.iter().find(|r| r.genid == "2").unwrap();
    assert_eq!(r2.uncertified_lines, vec![10]);
    assert!(
        !report
            .eligibility
            .iter()
            .find(|e| e.genid == "2")
            .unwrap()
            .eligible
    );
    // Opening with the key re-signs it (Ed25519 is deterministic: the same receipt).
    let a = ws.open();
    assert_eq!(a.recovery().resigned, vec![9]);
    assert!(a.events().iter().all(|e| e.certified));
    assert_eq!(ws.receipts().last().unwrap(), &dropped);
    drop(a);
    assert!(
        verify(
            &ws.archive_path(),
            &ws.receipts_path(),
            &public(),
            &lookup(&tags(&["0", "1", "2"])),
            None
        )
        .ok()
    );
}

#[test]
fn missing_receipt_in_the_middle_is_not_repaired() {
    let ws = Ws::new();
    drop(standard(&ws));
    let mut receipts = ws.receipts();
    receipts.remove(3);
    ws.write_receipts(&receipts);
    let err = Archive::open(&ws.archive_path(), EXP, key()).unwrap_err();
    assert!(matches!(err, ArchiveError::Integrity { .. }), "{err}");
}

#[test]
fn appends_are_validated_before_anything_is_written() {
    let ws = Ws::new();
    let mut a = ws.open();
    let e = a
        .append("gate", Some("1"), obj(json!({"verdict": "keep"})), AT)
        .unwrap_err();
    assert!(e.to_string().contains("genesis"), "{e}");
    genesis(&mut a);
    assert!(a.append("genesis", None, obj(json!({})), AT).is_err());
    assert!(
        a.append("gate", Some("1"), obj(json!({"verdict": "maybe"})), AT)
            .is_err()
    );
    assert!(
        a.append(
            "gate",
            Some("1"),
            obj(json!({"verdict": "keep"})),
            "yesterday"
        )
        .is_err()
    );
    assert!(
        a.append("gate", Some("../x"), obj(json!({"verdict": "keep"})), AT)
            .is_err()
    );
    assert!(a.append("Bad-Type", Some("1"), obj(json!({})), AT).is_err());
    assert!(
        a.append("status", Some("1"), obj(json!({"status": "fine"})), AT)
            .is_err()
    );
    let mut s = stamp("1", Some("0"), "candidate", &[1.0, 0.0]);
    s.insert("score".into(), json!(0.9));
    let e = a.append("evaluation", Some("1"), s, AT).unwrap_err();
    assert!(
        matches!(&e, ArchiveError::InvalidStamp(p) if p.iter().any(|p| p.contains("Σ scoreable rewards"))),
        "{e}"
    );
    let mut s = stamp("1", Some("0"), "candidate", &[1.0]);
    s.remove("task_set_hash");
    assert!(matches!(
        a.append("evaluation", Some("1"), s, AT),
        Err(ArchiveError::InvalidStamp(_))
    ));
    assert_eq!(ws.lines().len(), 1);
    assert_eq!(a.next_seq(), 1);
}

#[test]
fn archive_of_another_experiment_is_refused() {
    let ws = Ws::new();
    drop(standard(&ws));
    let other = evolve_archive::ExperimentKey::from_seed("exp-2", [7u8; 32]);
    assert!(matches!(
        Archive::open(&ws.archive_path(), "exp-1", other),
        Err(ArchiveError::WrongExperiment { .. })
    ));
    let other = evolve_archive::ExperimentKey::from_seed("exp-2", [7u8; 32]);
    let err = Archive::open(&ws.archive_path(), "exp-2", other).unwrap_err();
    assert!(err.to_string().contains("line 1"), "{err}");
}

#[test]
fn hostile_bytes_never_panic() {
    let ws = Ws::new();
    drop(standard(&ws));
    let samples: Vec<Vec<u8>> = vec![
        vec![0xff, 0xfe, b'\n', b'{', b'\n'],
        b"[]\n{}\n".to_vec(),
        b"{\"seq\":-1,\"prev\":\"x\",\"type\":\"genesis\",\"genid\":null,\"at\":\"\",\"body\":{}}\n".to_vec(),
        b"{\"seq\":18446744073709551616}\n".to_vec(),
        "\n\n\n".into(),
        b"1e999\n".to_vec(),
    ];
    for s in samples {
        std::fs::write(ws.archive_path(), &s).unwrap();
        std::fs::write(ws.receipts_path(), &s).unwrap();
        let report = verify(
            &ws.archive_path(),
            &ws.receipts_path(),
            &public(),
            &|_: &str| None,
            Some(&json!([1])),
        );
        assert!(!report.ok());
        assert!(
            Archive::open(&ws.archive_path(), EXP, key()).is_err() || s.iter().all(|b| *b == b'\n')
        );
    }
    // Missing files are findings, not panics.
    let report = verify(
        &ws.dir.path().join("nope"),
        &ws.dir.path().join("nope2"),
        &public(),
        &|_: &str| None,
        None,
    );
    assert!(report.findings.iter().any(|f| f.kind == FindingKind::Io));
}
