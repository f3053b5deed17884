#![allow(dead_code)]
//! Shared test fixtures: a key, a workspace and a small archive.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use evolve_archive::{Archive, ExperimentKey, PublicKey, receipts_path_for};
use serde_json::{Map, Value, json};

pub const EXP: &str = "exp-1";
pub const AT: &str = "2026-01-31T12:00:00Z";
pub const EVAL_FP: &str = "e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0";
pub const TASKS_FP: &str = "sha256:tasks";
pub const RUNTIME_FP: &str = "sha256:runtime";

pub fn key() -> ExperimentKey {
    ExperimentKey::from_seed(EXP, [7u8; 32])
}

pub fn public() -> PublicKey {
    key().public()
}

pub fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A deterministic fake commit id for a genid.
pub fn commit(genid: &str) -> String {
    evolve_archive::sha256_hex(genid.as_bytes())[..40].to_string()
}

/// A valid stamped evaluation body: one task per reward, one trial each, all complete.
pub fn stamp(
    genid: &str,
    parent: Option<&str>,
    purpose: &str,
    rewards: &[f64],
) -> Map<String, Value> {
    let mut tasks = Map::new();
    for (i, r) in rewards.iter().enumerate() {
        tasks.insert(format!("t{i}"), json!({"trials": [{"trial": 0, "status": "benchmark_complete", "reward": r, "timeout_owner": null, "error_kind": null}]}));
    }
    let n = rewards.len() as u64;
    let score = rewards.iter().sum::<f64>() / n as f64;
    let generation: u64 = genid
        .split('-')
        .next()
        .and_then(|g| g.parse().ok())
        .unwrap_or(0);
    obj(json!({
        "candidate_commit": commit(genid),
        "candidate_tree": commit(&format!("tree-{genid}")),
        "parent": parent,
        "generation": generation,
        "evaluator_fingerprint": EVAL_FP,
        "task_set_hash": if purpose == "anchor" { "sha256:sealed" } else { TASKS_FP },
        "runtime_fingerprint": RUNTIME_FP,
        "contract_id": "harbor-v1",
        "purpose": purpose,
        "outcome": "benchmark_complete",
        "trials": n,
        "expected_trials": n,
        "scoreable_trials": n,
        "task_vector": {"schema_version": 1, "tasks": tasks},
        "score": score,
        "cost_usd": 0.25,
        "timings": {"wall_s": 1.5},
        "attempt": 1,
        "source_attempts": [],
        "reason": "all expected trials are scoreable",
    }))
}

pub struct Ws {
    pub dir: tempfile::TempDir,
}

impl Ws {
    pub fn new() -> Ws {
        Ws {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    pub fn archive_path(&self) -> PathBuf {
        self.dir.path().join("archive.jsonl")
    }
    pub fn receipts_path(&self) -> PathBuf {
        receipts_path_for(&self.archive_path())
    }
    pub fn open(&self) -> Archive {
        Archive::open(&self.archive_path(), EXP, key()).unwrap()
    }
    pub fn lines(&self) -> Vec<String> {
        read_lines(&self.archive_path())
    }
    pub fn receipts(&self) -> Vec<String> {
        read_lines(&self.receipts_path())
    }
    pub fn write_lines(&self, lines: &[String]) {
        write_lines(&self.archive_path(), lines)
    }
    pub fn write_receipts(&self, lines: &[String]) {
        write_lines(&self.receipts_path(), lines)
    }
}

pub fn read_lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

pub fn write_lines(p: &Path, lines: &[String]) {
    let mut s = lines.join("\n");
    if !lines.is_empty() {
        s.push('\n');
    }
    std::fs::write(p, s).unwrap();
}

pub fn genesis(a: &mut Archive) {
    let body = obj(
        json!({"fixed_identity": {"evaluator_fingerprint": EVAL_FP, "task_set_hash": TASKS_FP, "runtime_fingerprint": RUNTIME_FP}}),
    );
    a.append("genesis", None, body, AT).unwrap();
}

/// Generation and evaluation (and gate, if `verdict`) of one candidate.
pub fn candidate(
    a: &mut Archive,
    genid: &str,
    parent: &str,
    rewards: &[f64],
    verdict: Option<&str>,
) {
    a.append(
        "generation",
        Some(genid),
        obj(json!({"parent": parent, "commit": commit(genid)})),
        AT,
    )
    .unwrap();
    a.append(
        "evaluation",
        Some(genid),
        stamp(genid, Some(parent), "candidate", rewards),
        AT,
    )
    .unwrap();
    if let Some(v) = verdict {
        a.append(
            "gate",
            Some(genid),
            obj(json!({"verdict": v, "reason": "test"})),
            AT,
        )
        .unwrap();
    }
}

/// Genesis, gen 0 (genesis eval score 0.5, anchor, keep), gen 1 (0.75 keep), gen 2 (0.25 keep).
pub fn standard(ws: &Ws) -> Archive {
    let mut a = ws.open();
    genesis(&mut a);
    a.append(
        "evaluation",
        Some("0"),
        stamp("0", None, "genesis", &[1.0, 0.0]),
        AT,
    )
    .unwrap();
    a.append(
        "evaluation",
        Some("0"),
        stamp("0", None, "anchor", &[1.0, 1.0]),
        AT,
    )
    .unwrap();
    a.append(
        "gate",
        Some("0"),
        obj(json!({"verdict": "keep", "reason": "genesis"})),
        AT,
    )
    .unwrap();
    candidate(&mut a, "1", "0", &[1.0, 0.5], Some("keep"));
    candidate(&mut a, "2", "1", &[0.5, 0.0], Some("keep"));
    a
}

/// Tags as they are after `standard` (every genid's tag names its commit).
pub fn tags(genids: &[&str]) -> HashMap<String, String> {
    genids.iter().map(|g| (g.to_string(), commit(g))).collect()
}

pub fn lookup(t: &HashMap<String, String>) -> impl Fn(&str) -> Option<String> + '_ {
    move |g: &str| t.get(g).cloned()
}

/// Line index (0-based) of the first event matching a type and genid.
pub fn find_line(lines: &[String], ty: &str, genid: &str) -> usize {
    lines
        .iter()
        .position(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["type"] == ty && v["genid"] == genid
        })
        .unwrap()
}
