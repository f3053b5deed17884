//! The archive's one reader seen through its two entrances: lines read from bytes
//! ([`read_line`], what `open`, `append` and `verify` use) and events given as maps
//! ([`Event::from_line`] + [`fold`], what [`Archive::events`] lists and callers fold); and the
//! writer's open against the audit on the same files, forged and odd lines included.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::body::read_line;
use crate::canonical::sha256_hex;
use crate::chain::{FindingKind, Mode, Receipt, check_log};
use crate::eligibility::{champion, eligibility, fixed_identity, identity_of_row0};
use crate::event::{Event, LoggedEvent, genesis_anchor};
use crate::fold::{Folded, Row, StampSource, fold, pending, replay, total_cost_usd};
use crate::keys::ExperimentKey;
use crate::log::Archive;
use crate::verify::verify;

const EXP: &str = "equiv";
const AT: &str = "2026-01-31T12:00:00Z";

fn key() -> ExperimentKey {
    ExperimentKey::from_seed(EXP, [9u8; 32])
}

fn commit(g: &str) -> String {
    sha256_hex(g.as_bytes())[..40].to_string()
}

/// A deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A valid stamp over `tasks` tasks with a few agent timeouts and null rewards.
fn stamp(genid: &str, parent: Option<&str>, purpose: &str, salt: u64, tasks: u64) -> Value {
    let mut t = Map::new();
    let mut sum = 0.0;
    let mut complete = 0;
    let mut timeouts = 0;
    for i in 0..tasks {
        let trial = if (i + salt) % 7 == 3 {
            timeouts += 1;
            json!({"trial": 0, "status": "timeout", "reward": null, "timeout_owner": "agent", "error_kind": null})
        } else {
            let r = ((i * 7 + salt * 13) % 10) as f64 / 10.0;
            sum += r;
            complete += 1;
            json!({"trial": 0, "status": "benchmark_complete", "reward": r, "timeout_owner": null, "error_kind": null})
        };
        t.insert(format!("task-{i:02}"), json!({ "trials": [trial] }));
    }
    let generation: u64 = genid
        .split('-')
        .next()
        .and_then(|g| g.parse().ok())
        .unwrap_or(0);
    json!({
        "candidate_commit": commit(genid), "candidate_tree": commit(&format!("t{genid}")),
        "parent": parent, "generation": generation,
        "evaluator_fingerprint": "e".repeat(40), "task_set_hash": "sha256:tasks",
        "runtime_fingerprint": "sha256:rt", "contract_id": "harbor-v1", "purpose": purpose,
        "outcome": "benchmark_complete", "trials": tasks, "expected_trials": tasks,
        "scoreable_trials": complete + timeouts,
        "task_vector": {"schema_version": 1, "tasks": t}, "score": sum / tasks as f64,
        "cost_usd": 0.01, "timings": {"wall_s": 3.2}, "attempt": 2, "source_attempts": [1],
        "reason": "complete",
    })
}

// ---------------------------------------------------------------------------------------------
// JSON text with the things canonical lines never have: duplicate keys, escapes, whitespace.

fn emit_str(s: &str, rng: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if rng.chance(3) && (c as u32) < 0x10000 => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn ws(rng: &mut Rng, out: &mut String) {
    if rng.chance(5) {
        let w: &&str = rng.pick(&[" ", "\n", "\t ", "\r\n"]);
        out.push_str(w);
    }
}

fn emit(v: &Value, rng: &mut Rng, out: &mut String) {
    ws(rng, out);
    match v {
        Value::Object(m) => {
            out.push('{');
            let mut first = true;
            for (k, v) in m {
                let copies = if rng.chance(3) { 2 } else { 1 };
                for copy in 0..copies {
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    emit_str(k, rng, out);
                    ws(rng, out);
                    out.push(':');
                    if copy + 1 < copies {
                        emit(&random_value(rng, 1), rng, out);
                    } else {
                        emit(v, rng, out);
                    }
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                emit(v, rng, out);
            }
            out.push(']');
        }
        Value::String(s) => emit_str(s, rng, out),
        other => out.push_str(&other.to_string()),
    }
    ws(rng, out);
}

fn random_value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth > 2 { 9 } else { 11 }) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 => json!(rng.below(5)),
        3 => json!(-(rng.below(5) as i64)),
        4 => json!(rng.below(10) as f64 / 4.0),
        5 => json!(u64::MAX),
        6 => json!(rng.pick(&[
            "",
            "agent",
            "timeout",
            "benchmark_complete",
            "candidate",
            "genesis",
            "anchor",
            "keep",
            "discard",
            "no_proposal",
            "x\"y",
            "é",
            "3",
            "0",
            "eeee",
        ])),
        7 => json!(commit("x")),
        8 => json!(-0.0),
        9 => Value::Array(
            (0..rng.below(3))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = Map::new();
            for _ in 0..rng.below(3) {
                let k = rng
                    .pick(&[
                        "trial",
                        "status",
                        "reward",
                        "timeout_owner",
                        "trials",
                        "schema_version",
                        "tasks",
                        "note",
                        "x_a",
                        "score",
                    ])
                    .to_string();
                m.insert(k, random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
    }
}

/// A value near `v`: the boundaries the stamp rules care about.
fn tweak(v: &Value, rng: &mut Rng) -> Value {
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            match rng.below(7) {
                0 => json!(x + 1.0),
                1 => json!(x - 1.0),
                2 => json!(n.as_u64().map_or(0, |u| u.wrapping_add(1))),
                3 => json!(n.as_u64().map_or(0, |u| u.saturating_sub(1))),
                4 => json!(-x),
                5 => json!(x * (1.0 + 1e-10)),
                _ => json!(0),
            }
        }
        Value::Array(a) => {
            let mut a = a.clone();
            match rng.below(3) {
                0 => a.push(json!(rng.below(4))),
                1 if !a.is_empty() => {
                    a.pop();
                }
                _ => a.push(a.first().cloned().unwrap_or(json!(1))),
            }
            Value::Array(a)
        }
        Value::String(_) => json!(rng.pick(&[
            "benchmark_complete",
            "timeout",
            "cancelled",
            "agent",
            "candidate",
            "genesis",
            "anchor",
            "3",
            "3-1",
            "0",
            "-1",
            "e",
            "",
        ])),
        Value::Bool(b) => json!(!b),
        Value::Null => json!(rng.below(3)),
        Value::Object(_) => random_value(rng, 2),
    }
}

/// Mutate a random place of `v` (possibly deep).
fn mutate(v: &mut Value, rng: &mut Rng, depth: u32) {
    if rng.chance(40) && !matches!(v, Value::Object(_) | Value::Array(_)) {
        *v = tweak(v, rng);
        return;
    }
    let descend = depth < 6 && rng.chance(65);
    match v {
        Value::Object(m) if !m.is_empty() && descend => {
            let i = rng.below(m.len());
            if let Some((_, child)) = m.iter_mut().nth(i) {
                mutate(child, rng, depth + 1);
            }
        }
        Value::Array(a) if !a.is_empty() && descend => {
            let i = rng.below(a.len());
            mutate(&mut a[i], rng, depth + 1);
        }
        Value::Array(_) if rng.chance(50) => *v = tweak(v, rng),
        Value::Object(m) => match rng.below(4) {
            0 if !m.is_empty() => {
                let i = rng.below(m.len());
                let k = m.keys().nth(i).cloned().unwrap_or_default();
                m.shift_remove(&k);
            }
            1 => {
                let k = rng
                    .pick(&[
                        "reason",
                        "verdict",
                        "status",
                        "annotations",
                        "x",
                        "experiment",
                    ])
                    .to_string();
                m.insert(k, random_value(rng, depth));
            }
            _ => *v = random_value(rng, depth),
        },
        _ => *v = random_value(rng, depth),
    }
}

fn line_text(rng: &mut Rng, seq: Value, ty: &str, genid: Value, body: &Value) -> String {
    let mut env = Map::new();
    env.insert("at".into(), json!(AT));
    env.insert("body".into(), body.clone());
    env.insert("genid".into(), genid);
    env.insert("prev".into(), json!(genesis_anchor(EXP)));
    env.insert("seq".into(), seq);
    env.insert("type".into(), json!(ty));
    let mut env = Value::Object(env);
    if rng.chance(4) {
        mutate(&mut env, rng, 5);
    }
    let mut out = String::new();
    if rng.chance(50) {
        out = serde_json::to_string(&env).unwrap_or_default();
    } else {
        emit(&env, rng, &mut out);
    }
    out
}

/// Every evaluation's accessors (read with the line) equal its stamp map's fields (built
/// lazily from the line's bytes).
fn assert_same_accessors(rows: &[Row]) {
    for r in rows {
        for e in r
            .evaluation
            .iter()
            .chain(&r.anchors)
            .chain(&r.other_evaluations)
        {
            let s = |k: &str| e.stamp.get(k).and_then(Value::as_str);
            assert_eq!(e.purpose(), s("purpose"), "{e:?}");
            assert_eq!(e.outcome(), s("outcome"), "{e:?}");
            assert_eq!(e.candidate_commit(), s("candidate_commit"), "{e:?}");
            for f in crate::body::FixedIdentity::FIELDS {
                assert_eq!(e.identity_field(f), s(f), "{e:?}");
            }
            let score = e
                .stamp
                .get("score")
                .filter(|v| v.is_number())
                .and_then(Value::as_f64);
            assert_eq!(e.score(), score, "{e:?}");
            let cost = e
                .stamp
                .get("cost_usd")
                .filter(|v| v.is_number())
                .and_then(Value::as_f64);
            assert_eq!(
                e.cost_usd(),
                cost.filter(|c| c.is_finite() && *c >= 0.0).unwrap_or(0.0)
            );
        }
    }
}

/// Line by line: whenever a line reads from its bytes, it reads as an event with a map body
/// too, and both give the same envelope, rows, stamp problems, spend and identity.
#[test]
fn bytes_and_maps_read_the_same_line_by_line() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let bodies: Vec<(&str, Option<&str>, Value)> = vec![
        (
            "evaluation",
            Some("3"),
            stamp("3", Some("1"), "candidate", 3, 5),
        ),
        ("evaluation", Some("0"), stamp("0", None, "genesis", 1, 3)),
        (
            "evaluation",
            Some("4-1"),
            stamp("4-1", Some("2"), "anchor", 2, 4),
        ),
        (
            "generation",
            Some("5"),
            json!({"parent": "2", "commit": commit("5"), "cost_usd": 0.5}),
        ),
        (
            "gate",
            Some("5"),
            json!({"verdict": "keep", "reason": "better"}),
        ),
        (
            "status",
            Some("6"),
            json!({"status": "operator_failed", "failure_stage": "mutate", "reason": "x"}),
        ),
        (
            "record",
            Some("5"),
            json!({"annotations": {"note": "n", "x_k": [1, 2], "score": 1.0}}),
        ),
        (
            "genesis",
            None,
            json!({"experiment": EXP, "fixed_identity": {"evaluator_fingerprint": "e", "task_set_hash": "t", "runtime_fingerprint": "r"}}),
        ),
        (
            "repair",
            None,
            json!({"cost_usd": 1.25, "what": [1, {"a": null}]}),
        ),
    ];
    let (mut read, mut total) = (0, 0);
    for round in 0..12_000u32 {
        let (ty, genid, body) = &bodies[round as usize % bodies.len()];
        let mut body = body.clone();
        for _ in 0..rng.below(4) {
            mutate(&mut body, &mut rng, 0);
        }
        let genid = genid.map_or(Value::Null, |g| json!(g));
        let mut bytes = line_text(&mut rng, json!(round % 7), ty, genid, &body).into_bytes();
        if rng.chance(3) {
            // Byte-level damage (invalid UTF-8 included): most of it is not JSON any more.
            let i = rng.below(bytes.len().max(1));
            match rng.below(3) {
                0 => {
                    bytes.remove(i.min(bytes.len().saturating_sub(1)));
                }
                1 => bytes.insert(i, *rng.pick(&b"\"{}[],:0\\\xff\xc3"[..])),
                _ => bytes.truncate(i),
            }
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let bytes = &bytes[..];
        total += 1;
        let as_map = Event::from_line(bytes);
        let Ok(l) = read_line(bytes) else { continue };
        read += 1;
        let e = as_map.unwrap_or_else(|err| {
            panic!("a line reads from its bytes but not as a map ({err}): {text}")
        });
        assert_eq!(
            (
                l.head.seq,
                crate::canonical::hex(&l.head.prev),
                l.head.event_type.as_ref(),
                l.head.genid.as_deref()
            ),
            (
                e.seq,
                e.prev.clone(),
                e.event_type.as_str(),
                e.genid.as_deref()
            ),
            "{text}"
        );
        let le = LoggedEvent {
            line: 1,
            event: e.clone(),
            sha256: String::new(),
            certified: true,
        };
        assert_eq!(
            l.body.cost_usd().map(f64::to_bits),
            Some(total_cost_usd(std::slice::from_ref(&le)).to_bits())
                .filter(|_| l.body.cost_usd().is_some()),
            "{text}"
        );
        if let crate::body::Body::Evaluation(ev) = &l.body {
            assert_eq!(
                ev.problems,
                crate::body::check_stamp(e.genid.as_deref(), &e.body),
                "{text}"
            );
        }
        let buf = Arc::new(bytes.to_vec());
        let mut folded = Folded::default();
        folded.apply_line(l, 1, true, || StampSource::Line(buf.clone(), 0..buf.len()));
        let rows = fold(std::slice::from_ref(&le));
        assert_eq!(folded.folder.rows(), &rows[..], "{text}");
        assert_same_accessors(&rows);
        assert_same_accessors(folded.folder.rows());
        assert_eq!(
            folded
                .genesis_identity
                .clone()
                .or_else(|| identity_of_row0(&rows)),
            fixed_identity(std::slice::from_ref(&le), &rows),
            "{text}"
        );
    }
    // Both outcomes are exercised: lines that read, and lines that do not.
    println!("{read} of {total} lines read");
    assert!(read > total / 4 && read < total, "{read} of {total}");
}

fn canon(v: &Value) -> String {
    String::from_utf8(crate::canonical::canonical_bytes(v)).unwrap_or_default()
}

/// Writes archive lines and receipts directly (any bytes, signed or not).
struct RawArchive {
    key: ExperimentKey,
    lines: Vec<Vec<u8>>,
    receipts: Vec<Vec<u8>>,
}

impl RawArchive {
    fn new() -> RawArchive {
        RawArchive {
            key: key(),
            lines: Vec::new(),
            receipts: Vec::new(),
        }
    }

    fn prev(&self) -> String {
        self.lines
            .last()
            .map_or_else(|| genesis_anchor(EXP), |l| sha256_hex(l))
    }

    /// The envelope around `body_text` (any JSON text), chained and in place.
    fn line(&self, ty: &str, genid: Option<&str>, body_text: &str) -> Vec<u8> {
        let genid = genid.map_or("null".to_string(), |g| format!("{g:?}"));
        format!(
            r#"{{"at":"{AT}","body":{body_text},"genid":{genid},"prev":"{}","seq":{},"type":"{ty}"}}"#,
            self.prev(),
            self.lines.len()
        )
        .into_bytes()
    }

    fn push_raw(&mut self, line: Vec<u8>, sign: bool) {
        if sign {
            let seq = self.lines.len() as u64;
            let h = sha256_hex(&line);
            self.receipts.push(
                Receipt {
                    seq,
                    event_sha256: h.clone(),
                    key_id: self.key.key_id().into(),
                    sig: self.key.sign_receipt(seq, &h),
                }
                .line(),
            );
        }
        self.lines.push(line);
    }

    fn push(&mut self, ty: &str, genid: Option<&str>, body: Value) {
        let line = self.line(ty, genid, &canon(&body));
        self.push_raw(line, true);
    }

    fn bytes(&self) -> (Vec<u8>, Vec<u8>) {
        let mut a = Vec::new();
        for l in &self.lines {
            a.extend_from_slice(l);
            a.push(b'\n');
        }
        (a, self.receipts.concat())
    }
}

/// The straightforward view and the writer's fast one of the same files agree on everything
/// the lifecycle reads, forged and uncertified lines included.
fn assert_same_view(arch: &[u8], rec: &[u8], tags: &HashMap<String, String>) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (ap, rp) = (
        dir.path().join("archive.jsonl"),
        dir.path().join("receipts.jsonl"),
    );
    std::fs::write(&ap, arch).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&rp, rec).unwrap_or_else(|e| panic!("{e}"));
    let lookup = |g: &str| tags.get(g).cloned();
    let public = key().public();
    let report = verify(&ap, &rp, &public, &lookup, None);

    // The writer's reading (no canonical-form check), with every signature checked like
    // `verify` does; and the same lines as maps, folded.
    let buf = Arc::new(arch.to_vec());
    let check = check_log(&buf, rec, &public, false, Mode::Full);
    let value_events: Vec<LoggedEvent> = check
        .events
        .iter()
        .map(|c| LoggedEvent {
            line: c.line,
            event: Event::from_line(&buf[c.range.clone()]).unwrap_or_else(|e| panic!("{e}")),
            sha256: crate::canonical::hex(&c.sha256),
            certified: c.certified,
        })
        .collect();
    assert_eq!(fold(&value_events), report.rows);
    let non_canonical = |f: &&crate::chain::Finding| f.kind != FindingKind::NotCanonical;
    let report_structural: Vec<_> = report
        .findings
        .iter()
        .filter(non_canonical)
        .filter(|f| {
            !matches!(
                f.kind,
                FindingKind::StampInvalid
                    | FindingKind::InvalidEvent
                    | FindingKind::EvaluatorMismatch
                    | FindingKind::IdentityMismatch
                    | FindingKind::TagMissing
                    | FindingKind::TagMoved
            )
        })
        .cloned()
        .collect();
    assert_eq!(check.findings, report_structural);
    let (_, replayed) = replay(check.events, &buf, false);
    let rows = replayed.folder.rows();
    assert_eq!(rows, &report.rows[..]);
    assert_same_accessors(rows);
    let identity = replayed
        .genesis_identity
        .clone()
        .or_else(|| identity_of_row0(rows));
    assert_eq!(identity, report.fixed_identity);
    let elig = eligibility(rows, identity.as_ref(), &lookup);
    assert_eq!(elig, report.eligibility);
    assert_eq!(champion(rows, &elig), report.champion);
    assert_eq!(pending(rows), pending(&report.rows));
}

fn realistic(generations: u64) -> (RawArchive, HashMap<String, String>) {
    let mut a = RawArchive::new();
    let mut tags = HashMap::new();
    a.push(
        "genesis",
        None,
        json!({"experiment": EXP, "fixed_identity": {"evaluator_fingerprint": "e".repeat(40), "task_set_hash": "sha256:tasks", "runtime_fingerprint": "sha256:rt"}}),
    );
    a.push("evaluation", Some("0"), stamp("0", None, "genesis", 0, 6));
    a.push(
        "gate",
        Some("0"),
        json!({"verdict": "keep", "reason": "genesis"}),
    );
    tags.insert("0".to_string(), commit("0"));
    for g in 1..=generations {
        let id = g.to_string();
        let parent = ((g - 1) / 2).to_string();
        a.push(
            "generation",
            Some(&id),
            json!({"parent": parent, "commit": commit(&id), "cost_usd": 0.002}),
        );
        if g % 11 == 5 {
            a.push(
                "status",
                Some(&id),
                json!({"status": "operator_failed", "failure_stage": "mutate"}),
            );
            continue;
        }
        a.push(
            "evaluation",
            Some(&id),
            stamp(&id, Some(&parent), "candidate", g, 6),
        );
        if g % 13 == 4 {
            // A retried evaluation and a sealed-split anchor.
            a.push(
                "evaluation",
                Some(&id),
                stamp(&id, Some(&parent), "candidate", g + 1, 6),
            );
            a.push("evaluation", Some(&id), stamp(&id, None, "anchor", g, 3));
        }
        if g % 17 != 16 {
            a.push(
                "gate",
                Some(&id),
                json!({"verdict": if g % 3 == 0 { "discard" } else { "keep" }, "reason": "delta"}),
            );
        }
        a.push(
            "record",
            Some(&id),
            json!({"annotations": {"note": format!("gen {g}"), "x_insight": g, "score": 9.9}}),
        );
        tags.insert(id.clone(), commit(&id));
    }
    // Parents named before their row exists, changed by a later evaluation, or never created;
    // a row naming itself.
    let n = generations;
    let g = |k: u64| (n + k).to_string();
    a.push(
        "generation",
        Some(&g(1)),
        json!({"parent": g(2), "commit": commit(&g(1))}),
    );
    a.push("generation", Some(&g(3)), json!({"parent": g(2)}));
    a.push(
        "generation",
        Some(&g(2)),
        json!({"parent": "0", "commit": commit(&g(2))}),
    );
    a.push(
        "evaluation",
        Some(&g(3)),
        stamp(&g(3), Some("1"), "candidate", 3, 4),
    );
    a.push("generation", Some(&g(4)), json!({"parent": g(9)}));
    a.push("generation", Some(&g(5)), json!({"parent": g(5)}));
    a.push(
        "repair",
        None,
        json!({"cost_usd": 0.5, "what": "reused trials"}),
    );
    (a, tags)
}

#[test]
fn open_and_verify_read_the_same_on_a_realistic_archive_with_forgeries() {
    let (mut a, mut tags) = realistic(60);
    // An intact archive first.
    let (arch, rec) = a.bytes();
    assert_same_view(&arch, &rec, &tags);

    // Signed but unusual lines: a key given twice (malformed), escapes and whitespace, an
    // invalid stamp, a non-canonical but valid one.
    let mut odd = stamp("61", Some("2"), "candidate", 5, 4);
    odd["score"] = json!(0.123);
    let odd_text = serde_json::to_string_pretty(&odd)
        .unwrap_or_default()
        .replace('\n', " ");
    let l = a.line("evaluation", Some("61"), &odd_text);
    a.push_raw(l, true);
    let dup = r#"{"verdict":"discard","verdict":"keep","reason":"dup"}"#;
    let l = a.line("gate", Some("61"), dup);
    a.push_raw(l, true);
    let esc = canon(&stamp("62", Some("1"), "candidate", 8, 4)).replace(
        "\"purpose\":\"candidate\"",
        "\"purpose\":\"cand\\u0069date\"",
    );
    let l = a.line("evaluation", Some("62"), &esc);
    a.push_raw(l, true);
    a.push(
        "gate",
        Some("62"),
        json!({"verdict": "keep", "reason": "esc"}),
    );
    tags.insert("61".into(), commit("61"));
    tags.insert("62".into(), commit("62"));

    // Forgeries: an unsigned evaluation with a better score for row 7, a line signed by another
    // key, an edited gate, a malformed line, a line with a wrong seq.
    let mut forged = stamp("7", Some("3"), "candidate", 7, 6);
    forged["score"] = json!(1.0);
    let l = a.line("evaluation", Some("7"), &canon(&forged));
    a.push_raw(l, false);
    let l = a.line("gate", Some("8"), r#"{"verdict":"keep","reason":"forged"}"#);
    let seq = a.lines.len() as u64;
    let h = sha256_hex(&l);
    let other = ExperimentKey::from_seed(EXP, [1u8; 32]);
    a.receipts.push(
        Receipt {
            seq,
            event_sha256: h.clone(),
            key_id: a.key.key_id().into(),
            sig: other.sign_receipt(seq, &h),
        }
        .line(),
    );
    a.lines.push(l);
    a.push(
        "gate",
        Some("9"),
        json!({"verdict": "discard", "reason": "r"}),
    );
    let last = a.lines.len() - 1;
    a.lines[last] = String::from_utf8_lossy(&a.lines[last])
        .replace("discard", "keep")
        .into_bytes();
    a.push_raw(b"{not json".to_vec(), true);
    a.push(
        "gate",
        Some("10"),
        json!({"verdict": "keep", "reason": "r"}),
    );
    let l = a.line("gate", Some("12"), r#"{"verdict":"keep","reason":"r"}"#);
    let l = String::from_utf8_lossy(&l)
        .replace(&format!("\"seq\":{}", a.lines.len()), "\"seq\":3")
        .into_bytes();
    a.push_raw(l, true);
    a.push(
        "gate",
        Some("14"),
        json!({"verdict": "keep", "reason": "r"}),
    );
    // A moved tag.
    tags.insert("4".into(), commit("elsewhere"));
    let (arch, rec) = a.bytes();
    assert_same_view(&arch, &rec, &tags);
    // Plus a torn tail, and a dropped receipt in the middle.
    let mut torn = arch.clone();
    torn.extend_from_slice(br#"{"at":"2026-01-31T12:00:00Z","body":{"verd"#);
    assert_same_view(&torn, &rec, &tags);
    let rec_lines: Vec<&[u8]> = rec.split_inclusive(|b| *b == b'\n').collect();
    let mut fewer = Vec::new();
    for (i, r) in rec_lines.iter().enumerate() {
        if i != 20 {
            fewer.extend_from_slice(r);
        }
    }
    assert_same_view(&arch, &fewer, &tags);
}

#[test]
fn writer_state_matches_a_refold_after_open_and_appends() {
    let (mut a, _) = realistic(40);
    // A last line without its receipt (resigned at open) and a torn tail.
    a.push(
        "gate",
        Some("40"),
        json!({"verdict": "keep", "reason": "late"}),
    );
    a.receipts.pop();
    let (mut arch, rec) = a.bytes();
    arch.extend_from_slice(b"{\"at\":\"2026");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ap = dir.path().join("archive.jsonl");
    std::fs::write(&ap, &arch).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("receipts.jsonl"), &rec).unwrap_or_else(|e| panic!("{e}"));
    let check = |w: &Archive| {
        let events = w.events();
        let rows = fold(events);
        assert_same_accessors(w.rows_cached());
        assert_eq!(w.rows_cached(), &rows[..]);
        assert_eq!(w.rows(), rows);
        assert_eq!(w.fixed_identity(), fixed_identity(events, &rows));
        assert_eq!(
            w.total_cost_usd().to_bits(),
            total_cost_usd(events).to_bits()
        );
        assert_eq!(w.pending(), pending(&rows));
        for ty in ["evaluation", "gate", "repair", "select", "genesis"] {
            let of_type: Vec<LoggedEvent> = events
                .iter()
                .filter(|e| e.event.event_type == ty)
                .cloned()
                .collect();
            assert_eq!(w.events_of_type(ty), of_type, "{ty}");
            // Lines from seq `from` on are those numbered past it (lines count from 1).
            for from in [1, events.len() as u64 / 2, events.len() as u64, u64::MAX] {
                let later: Vec<LoggedEvent> =
                    of_type.iter().filter(|e| e.line > from).cloned().collect();
                assert_eq!(w.events_of_type_from(ty, from), later, "{ty} from {from}");
            }
        }
    };
    let mut w = Archive::open(&ap, EXP, key()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.recovery().resigned, vec![a.lines.len() as u64 - 1]);
    assert!(w.recovery().archive_torn.is_some());
    // Rows and events of a type before anyone built the events, then the same after.
    w.append(
        "select",
        None,
        obj(json!({"generation": 41, "parents": ["0"]})),
        AT,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let early = w.rows();
    let early_gates = w.events_of_type("gate");
    let early_selects = w.events_of_type("select");
    assert_eq!(early_selects.len(), 1);
    // From a seq on, before the events are built: the select is the last line.
    let last = w.next_seq() - 1;
    assert_eq!(w.events_of_type_from("select", last), early_selects);
    assert!(w.events_of_type_from("select", last + 1).is_empty());
    assert_eq!(early_gates, w.events_of_type("gate"));
    check(&w);
    assert_eq!(early, w.rows());
    assert_eq!(early_gates, w.events_of_type("gate"));
    assert_eq!(early_selects, w.events_of_type("select"));
    let pend = w.pending();
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(pend.pending_gate, strings(&["33", "43"]), "{pend:?}");
    assert_eq!(pend.unevaluated, strings(&["41", "42", "44", "45"]));
    assert_eq!(pend.last_genid.as_deref(), Some("45"));
    // Appends with the events built, and (after reopening) without.
    for round in 0..2 {
        for g in 41..45u64 {
            let id = format!("{g}-{round}");
            w.append(
                "generation",
                Some(&id),
                obj(json!({"parent": "41-0", "commit": commit(&id)})),
                AT,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            w.append(
                "evaluation",
                Some(&id),
                obj(stamp(&id, Some("41-0"), "candidate", g, 4)),
                AT,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            if g % 2 == 0 {
                w.append("gate", Some(&id), obj(json!({"verdict": "keep"})), AT)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        if round == 0 {
            check(&w);
            drop(w);
            w = Archive::open(&ap, EXP, key()).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let rows = w.rows();
    check(&w);
    assert_eq!(rows, w.rows());
    let r41 = rows.iter().find(|r| r.genid == "41-0");
    assert_eq!(r41.map(|r| r.children), Some(8));
    assert_eq!(w.pending().unevaluated, strings(&["41", "42", "44", "45"]));
    assert_eq!(w.pending().last_genid.as_deref(), Some("44-1"));
}
