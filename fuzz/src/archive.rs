//! The writer's open (`Archive::open`) and the audit (`verify`, the same line reader plus
//! every signature and the canonical-form check), on the same bytes.

use evolve_archive::verify::Source;
use evolve_archive::{
    Archive, ExperimentKey, canonical_bytes, genesis_anchor, receipts_path_for, sha256_hex, verify,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

const EXPERIMENT: &str = "fuzz";

fn key() -> ExperimentKey {
    ExperimentKey::from_seed(EXPERIMENT, [7u8; 32])
}

/// One scratch directory per process, in memory when `/dev/shm` exists (every input is
/// written to files, because both readers take paths).
fn scratch() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("evolve-fuzz-archive")
            .tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .expect("a scratch directory")
    })
    .path()
}

/// The complete lines of `bytes` (a final line without `\n` is torn, left out).
fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    v.pop();
    v
}

/// A receipt line for each complete archive line, as the writer would sign it: the
/// fuzzer cannot forge Ed25519, so without this nothing past the signature check runs.
fn sign_all(archive: &[u8]) -> Vec<u8> {
    let k = key();
    let mut out = Vec::new();
    for (seq, line) in lines(archive).into_iter().enumerate() {
        let sha = sha256_hex(line);
        let sig = k.sign_receipt(seq as u64, &sha);
        let receipt =
            serde_json::json!({"seq": seq, "event_sha256": sha, "key_id": k.key_id(), "sig": sig});
        out.extend(canonical_bytes(&receipt));
        out.push(b'\n');
    }
    out
}

/// Rewrite every JSON-object line with its true `seq` and `prev` (canonical form), so
/// mutations of event bodies get past the chain check to the fold and the semantics.
fn rechain(archive: &[u8]) -> Vec<u8> {
    let mut prev = genesis_anchor(EXPERIMENT);
    let mut out = Vec::new();
    let all = lines(archive);
    let tail = &archive[all.iter().map(|l| l.len() + 1).sum::<usize>()..];
    for (seq, line) in all.into_iter().enumerate() {
        let line = match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(mut o)) => {
                o.insert("seq".into(), Value::from(seq));
                o.insert("prev".into(), Value::from(prev.clone()));
                canonical_bytes(&Value::Object(o))
            }
            _ => line.to_vec(),
        };
        prev = sha256_hex(&line);
        out.extend(line);
        out.push(b'\n');
    }
    out.extend_from_slice(tail);
    out
}

/// Split the input into archive and receipts bytes. The first byte picks the mode:
/// raw (both files from the input, split at the first 0xFF, which UTF-8 never holds),
/// signed (receipts made for the archive's lines) or rechained and signed.
fn files(data: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (mode, rest) = data.split_first()?;
    Some(match mode % 3 {
        0 => match rest.iter().position(|b| *b == 0xFF) {
            Some(i) => (rest[..i].to_vec(), rest[i + 1..].to_vec()),
            None => (rest.to_vec(), Vec::new()),
        },
        1 => (rest.to_vec(), sign_all(rest)),
        _ => {
            let a = rechain(rest);
            let r = sign_all(&a);
            (a, r)
        }
    })
}

fn write(dir: &Path, archive: &[u8], receipts: &[u8]) -> PathBuf {
    // Leftovers of the previous input (torn tails moved aside) must not leak into this one.
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("scratch directory");
    let path = dir.join("archive.jsonl");
    std::fs::write(&path, archive).expect("write archive");
    std::fs::write(receipts_path_for(&path), receipts).expect("write receipts");
    path
}

/// Verify, then open as the writer. Invariant: an archive the audit finds no fault in
/// opens, and the writer folds it to exactly the audit's rows.
pub fn check(data: &[u8]) {
    let _ = audit(data);
}

/// [`check`], returning whether the audit found the archive and receipts clean (`None`
/// for an empty input).
pub fn audit(data: &[u8]) -> Option<bool> {
    let (archive, receipts) = files(data)?;
    let dir = scratch().join(format!("t{:?}", std::thread::current().id()).replace(['(', ')'], ""));
    let path = write(&dir, &archive, &receipts);
    let report = verify(
        &path,
        &receipts_path_for(&path),
        &key().public(),
        &|_| None,
        None,
    );
    let clean = report
        .findings
        .iter()
        .all(|f| !matches!(f.source, Source::Archive | Source::Receipts));
    match Archive::open(&path, EXPERIMENT, key()) {
        Ok(a) if clean => assert_eq!(a.rows(), report.rows, "open and verify fold differently"),
        Ok(_) => {}
        Err(e) => assert!(!clean, "verify found nothing wrong, yet open failed: {e}"),
    }
    Some(clean)
}

/// Seed inputs from a small archive written by the real writer (genesis, two
/// generations with evaluations, gates and a record): one per mode.
pub fn seeds() -> Result<Vec<(&'static str, Vec<u8>)>, String> {
    use serde_json::json;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("archive.jsonl");
    let mut a = Archive::open(&path, EXPERIMENT, key()).map_err(|e| e.to_string())?;
    let at = "2026-11-30T00:00:00Z";
    let body = |v: Value| match v {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    let identity = json!({"evaluator_fingerprint": "e".repeat(40), "task_set_hash": "sha256:t", "runtime_fingerprint": "sha256:r"});
    let mut events = vec![("genesis", None, json!({ "fixed_identity": identity }))];
    for (g, parent) in [("0", Value::Null), ("1", json!("0"))] {
        let commit = sha256_hex(g.as_bytes())[..40].to_string();
        let purpose = if g == "0" { "genesis" } else { "candidate" };
        let vector = json!({"schema_version": 1, "tasks": {"t": {"trials": [{"trial": 0, "status": "benchmark_complete", "reward": 0.5, "timeout_owner": null, "error_kind": null}]}}});
        let stamp = json!({
            "candidate_commit": commit, "candidate_tree": commit, "parent": parent, "generation": g.parse::<u64>().unwrap_or(0),
            "evaluator_fingerprint": "e".repeat(40), "task_set_hash": "sha256:t", "runtime_fingerprint": "sha256:r",
            "contract_id": "c", "purpose": purpose, "outcome": "benchmark_complete",
            "trials": 1, "expected_trials": 1, "scoreable_trials": 1, "task_vector": vector, "score": 0.5,
            "cost_usd": 0.0, "timings": {"wall_s": 1.0}, "attempt": 1, "source_attempts": [],
        });
        events.push((
            "generation",
            Some(g),
            json!({"parent": parent, "commit": commit}),
        ));
        events.push(("evaluation", Some(g), stamp));
        events.push(("gate", Some(g), json!({"verdict": "keep", "reason": "r"})));
    }
    events.push(("record", Some("1"), json!({"annotations": {"note": "n"}})));
    for (ty, genid, v) in events {
        a.append(ty, genid, body(v), at)
            .map_err(|e| e.to_string())?;
    }
    drop(a);
    let archive = std::fs::read(&path).map_err(|e| e.to_string())?;
    let receipts = std::fs::read(receipts_path_for(&path)).map_err(|e| e.to_string())?;
    let with_mode = |mode: u8, rest: &[u8]| [&[mode][..], rest].concat();
    let raw = [&archive[..], &[0xFF], &receipts[..]].concat();
    Ok(vec![
        ("raw.bin", with_mode(0, &raw)),
        ("signed.bin", with_mode(1, &archive)),
        ("rechained.bin", with_mode(2, &archive)),
    ])
}
