//! Benchmarks of the archive's framework operations in RSIHub's overhead table:
//! "evaluation stamp + archive update", "state verification + champion recomputation" and
//! "recovery replay" (on a 1,000-generation archive). Prints medians beside RSIHub's.
//!
//! `cargo bench -p evolve-archive --bench archive_ops`

use std::collections::HashMap;
use std::time::{Duration, Instant};

use evolve_archive::{
    Archive, Event, ExperimentKey, Receipt, canonical::hex, champion, eligibility, genesis_anchor,
    sha256_hex, verify,
};
use serde_json::{Map, Value, json};

const EXP: &str = "bench";
const AT: &str = "2026-01-31T12:00:00Z";

fn key() -> ExperimentKey {
    ExperimentKey::from_seed(EXP, [42u8; 32])
}

fn commit(g: &str) -> String {
    sha256_hex(g.as_bytes())[..40].to_string()
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A stamped evaluation over 20 tasks × 1 trial.
fn stamp(genid: &str, parent: Option<&str>, purpose: &str, salt: u64) -> Map<String, Value> {
    let mut tasks = Map::new();
    let mut sum = 0.0;
    for t in 0..20u64 {
        let r = ((t * 7 + salt * 13) % 10) as f64 / 10.0;
        sum += r;
        tasks.insert(format!("task-{t:02}"), json!({"trials": [{"trial": 0, "status": "benchmark_complete", "reward": r, "timeout_owner": null, "error_kind": null}]}));
    }
    obj(json!({
        "candidate_commit": commit(genid), "candidate_tree": commit(&format!("t{genid}")), "parent": parent,
        "generation": genid.parse::<u64>().unwrap_or(0),
        "evaluator_fingerprint": "e".repeat(40), "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt",
        "contract_id": "harbor-v1", "purpose": purpose, "outcome": "benchmark_complete",
        "trials": 20, "expected_trials": 20, "scoreable_trials": 20,
        "task_vector": {"schema_version": 1, "tasks": tasks}, "score": sum / 20.0,
        "cost_usd": 0.01, "timings": {"wall_s": 3.2, "queue_s": 0.1}, "attempt": 1, "source_attempts": [],
    }))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn report(name: &str, d: Duration, rsihub_ms: f64) {
    let ms = d.as_secs_f64() * 1e3;
    println!(
        "{name:<52} median {ms:>9.3} ms   RSIHub {rsihub_ms:>6.0} ms   ({:.0}x lower)",
        rsihub_ms / ms
    );
}

/// Write a 1,000-generation archive directly (signing each event), without per-line fsyncs.
fn build_archive(dir: &std::path::Path, generations: u64) -> HashMap<String, String> {
    build(dir, generations, false)
}

/// [`build_archive`], optionally as a crash left it: the last generation's gate is missing
/// (pending gate), one more generation was committed but not evaluated, and its evaluation
/// line is torn (half written, no newline).
fn build(dir: &std::path::Path, generations: u64, crashed: bool) -> HashMap<String, String> {
    let k = key();
    let mut lines = Vec::new();
    let mut receipts = Vec::new();
    let mut prev = genesis_anchor(EXP);
    let mut next = 0u64;
    let mut push = |ty: &str, genid: Option<&str>, body: Map<String, Value>| {
        let seq = next;
        next += 1;
        let ev = Event {
            seq,
            prev: prev.clone(),
            event_type: ty.into(),
            genid: genid.map(Into::into),
            at: AT.into(),
            body,
        };
        let line = ev.canonical_line();
        let h = sha256_hex(&line);
        receipts.extend(
            Receipt {
                seq,
                event_sha256: h.clone(),
                key_id: k.key_id().into(),
                sig: k.sign_receipt(seq, &h),
            }
            .line(),
        );
        lines.extend(line);
        lines.push(b'\n');
        prev = h;
    };
    push(
        "genesis",
        None,
        obj(
            json!({"experiment": EXP, "fixed_identity": {"evaluator_fingerprint": "e".repeat(40), "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt"}}),
        ),
    );
    push("evaluation", Some("0"), stamp("0", None, "genesis", 0));
    push(
        "gate",
        Some("0"),
        obj(json!({"verdict": "keep", "reason": "genesis"})),
    );
    let mut tags = HashMap::from([("0".to_string(), commit("0"))]);
    for g in 1..=generations {
        let id = g.to_string();
        let parent = ((g - 1) / 2).to_string();
        push(
            "generation",
            Some(&id),
            obj(json!({"parent": parent, "commit": commit(&id), "cost_usd": 0.002})),
        );
        push(
            "evaluation",
            Some(&id),
            stamp(&id, Some(&parent), "candidate", g),
        );
        if crashed && g == generations {
            tags.insert(id.clone(), commit(&id));
            break;
        }
        push(
            "gate",
            Some(&id),
            obj(json!({"verdict": if g % 3 == 0 { "discard" } else { "keep" }, "reason": "delta"})),
        );
        push(
            "record",
            Some(&id),
            obj(
                json!({"annotations": {"note": format!("gen {g}"), "x_insight": hex(&g.to_le_bytes())}}),
            ),
        );
        tags.insert(id.clone(), commit(&id));
    }
    if crashed {
        let id = (generations + 1).to_string();
        let parent = (generations / 2).to_string();
        push(
            "generation",
            Some(&id),
            obj(json!({"parent": parent, "commit": commit(&id), "cost_usd": 0.002})),
        );
        let torn = Event {
            seq: next,
            prev: prev.clone(),
            event_type: "evaluation".into(),
            genid: Some(id.clone()),
            at: AT.into(),
            body: stamp(&id, Some(&parent), "candidate", 7),
        }
        .canonical_line();
        lines.extend_from_slice(&torn[..torn.len() / 2]);
        tags.insert(id.clone(), commit(&id));
    }
    std::fs::write(dir.join("archive.jsonl"), lines).unwrap();
    std::fs::write(dir.join("receipts.jsonl"), receipts).unwrap();
    tags
}

fn main() {
    println!("evolve-archive benchmarks (medians; RSIHub Table 5 medians beside)");

    // 1. Evaluation stamp + archive update: validate the stamp, append the event and its
    //    receipt, each fsynced, on an archive of 1,000 generations.
    let dir = tempfile::tempdir().unwrap();
    build_archive(dir.path(), 1000);
    let mut a = Archive::open(&dir.path().join("archive.jsonl"), EXP, key()).unwrap();
    let mut times = Vec::new();
    for i in 0..200u64 {
        let id = (1001 + i).to_string();
        let body = stamp(&id, Some("1"), "candidate", i);
        let t = Instant::now();
        a.append("evaluation", Some(&id), body, AT).unwrap();
        times.push(t.elapsed());
    }
    report("evaluation stamp + archive update", median(times), 32.0);
    drop(a);

    // 2. State verification + champion recomputation on a 1,000-generation archive, as the
    //    lifecycle does it on every start/resume: open the archive as its writer (read both
    //    files; parse every line; check seq, hash chain, receipt digests and key ids; verify one
    //    signature per chained segment), fold, fixed identity, eligibility (tags), champion.
    let dir = tempfile::tempdir().unwrap();
    let tags = build_archive(dir.path(), 1000);
    let lookup = |g: &str| tags.get(g).cloned();
    let (ap, rp) = (
        dir.path().join("archive.jsonl"),
        dir.path().join("receipts.jsonl"),
    );
    let public = key().public();
    let first = verify(&ap, &rp, &public, &lookup, None);
    assert!(first.ok(), "{:?}", first.findings.first());
    println!(
        "  ({} lines, {} rows, champion {:?})",
        first.lines,
        first.rows.len(),
        first.champion.as_ref().map(|c| (&c.genid, c.score))
    );
    let mut times = Vec::new();
    for _ in 0..31 {
        let t = Instant::now();
        let a = Archive::open(&ap, EXP, key()).unwrap();
        let rows = a.rows();
        let id = a.fixed_identity();
        let e = eligibility(&rows, id.as_ref(), &lookup);
        let c = champion(&rows, &e);
        times.push(t.elapsed());
        assert_eq!(c, first.champion);
        assert_eq!(e, first.eligibility);
    }
    report(
        "state verification + champion recomputation",
        median(times),
        653.0,
    );

    // 3. Recovery replay: what a resumed run does first, on the archive a crash left: open it
    //    (all of the above, and the torn final line detected and set aside for the next
    //    append), fold, fixed identity, eligibility, champion, and the generations to finish
    //    (pending gate, committed but not evaluated, last genid).
    let crashed = tempfile::tempdir().unwrap();
    let ctags = build(crashed.path(), 1000, true);
    let clookup = |g: &str| ctags.get(g).cloned();
    let cp = crashed.path().join("archive.jsonl");
    let mut times = Vec::new();
    for _ in 0..31 {
        let t = Instant::now();
        let a = Archive::open(&cp, EXP, key()).unwrap();
        let torn = a.recovery().archive_torn.clone();
        let rows = a.rows();
        let id = a.fixed_identity();
        let e = eligibility(&rows, id.as_ref(), &clookup);
        let c = champion(&rows, &e);
        let p = evolve_archive::pending(&rows);
        times.push(t.elapsed());
        assert!(torn.is_some() && c.is_some());
        assert_eq!(p.pending_gate, ["1000"]);
        assert_eq!(p.unevaluated, ["1001"]);
        assert_eq!(p.last_genid.as_deref(), Some("1001"));
    }
    report("recovery replay", median(times), 1007.0);

    // For reference: the first `Archive::events()` call builds a `serde_json::Value` tree per
    //    event (the state above never needs them).
    let mut times = Vec::new();
    for _ in 0..9 {
        let a = Archive::open(&ap, EXP, key()).unwrap();
        let t = Instant::now();
        let n = a.events().len();
        times.push(t.elapsed());
        assert_eq!(n as u64, first.lines);
    }
    let ms = median(times).as_secs_f64() * 1e3;
    println!(
        "{:<52} median {ms:>9.3} ms   (not part of the operations above)",
        "first `Archive::events()` (4,003 `Value` trees)"
    );

    // The full audit of `evolve verify`: every signature, canonical form, stamps with scores
    //    recomputed, identity, tags, champion cache.
    let cache = evolve_archive::Champion::cache_value(first.champion.as_ref());
    let mut times = Vec::new();
    for _ in 0..9 {
        let t = Instant::now();
        let r = verify(&ap, &rp, &public, &lookup, Some(&cache));
        times.push(t.elapsed());
        assert!(r.ok() && r.champion.is_some());
    }
    let ms = median(times).as_secs_f64() * 1e3;
    println!(
        "{:<52} median {ms:>9.3} ms   (RSIHub's `evolve verify` checks no signatures)",
        "full audit (`evolve verify`, 4,003 signatures)"
    );
}
