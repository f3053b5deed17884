//! Tampering with the evidence: each change is found by `evolve verify` (exit 1), and no
//! tampered generation is ever an eligible parent.

use crate::ws;
use serde_json::Value;
use ws::{Exp, Spec, text};

/// A finished experiment, copied for each tampering.
fn finished() -> Exp {
    let e = Exp::new(&Spec::default());
    e.init();
    e.run_ok(&["run", "ws", "--quiet"]);
    e.run_ok(&["verify", "ws"]);
    e
}

fn archive_lines(e: &Exp) -> Vec<String> {
    std::fs::read_to_string(e.ws.join(".evolve/archive.jsonl"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(e: &Exp, lines: &[String]) {
    std::fs::write(e.ws.join(".evolve/archive.jsonl"), lines.join("\n") + "\n").unwrap();
}

fn verify_fails(e: &Exp, kind: &str) {
    let out = e.evolve(&["verify", "ws", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        kinds.iter().any(|k| k == kind),
        "expected a {kind} finding, got {kinds:?}"
    );
}

fn eligible(e: &Exp, genid: &str) -> bool {
    e.log()
        .iter()
        .any(|r| r["genid"] == genid && r["eligible"] == true)
}

fn index_of_evaluation(lines: &[String], genid: &str) -> usize {
    lines
        .iter()
        .rposition(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["type"] == "evaluation" && v["genid"] == genid && v["body"]["purpose"] == "candidate"
        })
        .unwrap()
}

#[test]
fn an_edited_score_with_its_signature_kept_is_detected() {
    let e = finished();
    let mut lines = archive_lines(&e);
    let i = index_of_evaluation(&lines, "1");
    lines[i] = lines[i].replace("\"score\":0.2", "\"score\":0.99");
    assert!(lines[i].contains("0.99"));
    write_lines(&e, &lines);
    verify_fails(&e, "event_hash_mismatch");
    assert!(!eligible(&e, "1"));
    // The writer refuses to continue on a tampered archive.
    let run = e
        .evolve(&["run", "ws", "--max-generations", "3"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
}

#[test]
fn an_unsigned_forged_line_is_detected() {
    let e = finished();
    let mut lines = archive_lines(&e);
    let i = index_of_evaluation(&lines, "2");
    let forged = lines[i].replace("\"score\":0.3", "\"score\":1.0");
    lines.insert(i, forged);
    write_lines(&e, &lines);
    let out = e.evolve(&["verify", "ws"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(!eligible(&e, "2") || e.log().iter().all(|r| r["score"] != 1.0));
}

#[test]
fn a_dropped_line_is_detected() {
    let e = finished();
    let mut lines = archive_lines(&e);
    let i = index_of_evaluation(&lines, "1");
    lines.remove(i);
    write_lines(&e, &lines);
    verify_fails(&e, "seq_mismatch");
    assert!(
        !eligible(&e, "2"),
        "rows after a dropped line are not certified"
    );
}

#[test]
fn reordered_lines_are_detected() {
    let e = finished();
    let mut lines = archive_lines(&e);
    let n = lines.len();
    lines.swap(n - 2, n - 3);
    write_lines(&e, &lines);
    verify_fails(&e, "seq_mismatch");
}

#[test]
fn a_moved_tag_is_detected_and_the_row_is_not_a_parent() {
    let e = finished();
    assert!(eligible(&e, "1"));
    let store = evolve_snapshot::Store::open(&e.ws).unwrap();
    let gen0 = store.tag_target("gen/0").unwrap().unwrap();
    let out = std::process::Command::new("git")
        .args(["tag", "-f", "gen/1", &gen0.to_string()])
        .current_dir(&e.ws)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    verify_fails(&e, "tag_moved");
    assert!(!eligible(&e, "1"));
}

#[test]
fn an_edited_champion_cache_is_detected() {
    let e = finished();
    std::fs::write(
        e.ws.join(".evolve/champion.json"),
        "{\"genid\":\"1\",\"score\":0.99}",
    )
    .unwrap();
    verify_fails(&e, "champion_cache");
}
