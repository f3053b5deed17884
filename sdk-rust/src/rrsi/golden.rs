//! The golden vectors of `sdk-rust/testdata/rrsi/vectors.json`, computed by an oracle
//! written from the specification's text (`testdata/rrsi/oracle.py`), run against the
//! real functions. Every vector must match; a mismatch names the vector.

use super::*;
use crate::types::{ArchiveRow, ArchiveView, GenerationStatus, Verdict};
use serde_json::Value;

const VECTORS: &str = include_str!("../../testdata/rrsi/vectors.json");

fn vectors(kind: &str) -> Vec<Value> {
    let all: Value = serde_json::from_str(VECTORS).expect("vectors.json is JSON");
    all[kind].as_array().expect("a list of vectors").clone()
}

/// A number, or one of the strings the oracle writes for what JSON cannot hold.
fn num(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        // A computed number as shortest round-trip text: `str::parse` is exact.
        Value::String(s) => s.parse().unwrap_or_else(|_| panic!("not a number: {s}")),
        v => v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")),
    }
}

fn opt_num(v: &Value) -> Option<f64> {
    (!v.is_null()).then(|| num(v))
}

#[test]
fn schedule_vectors_match_the_oracle() {
    let vs = vectors("schedule");
    assert!(vs.len() > 600, "{} schedule vectors", vs.len());
    for v in &vs {
        let s = Schedule {
            b_min: num(&v["b_min"]),
            b_max: num(&v["b_max"]),
            horizon: v["T"].as_i64().unwrap(),
        };
        let got = edit_budget(v["t"].as_i64().unwrap(), &s);
        match v.get("error").and_then(Value::as_str) {
            None => assert_eq!(got, Ok(v["expect"].as_u64().unwrap()), "{v}"),
            Some(what) => {
                let e = got.expect_err(&v.to_string()).to_string();
                let named = if what == "inverted" { "inverted" } else { what };
                assert!(e.contains(named), "{v}: {e}");
            }
        }
    }
}

#[test]
fn selection_vectors_match_the_oracle() {
    for v in &vectors("selection") {
        let p = &v["params"];
        let params = Params {
            noise_band: num(&p["noise_band"]),
            beta0: num(&p["beta0"]),
            beta1: num(&p["beta1"]),
            w_s: num(&p["w_s"]),
            w_c: num(&p["w_c"]),
            w_n: num(&p["w_n"]),
        };
        let inc = Measured {
            score: num(&v["incumbent"]["score"]),
            cost: opt_num(&v["incumbent"]["cost"]),
        };
        let cands: Vec<Candidate> = v["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| Candidate {
                score: num(&c["score"]),
                cost: opt_num(&c["cost"]),
                novelty: c["novelty"].as_u64().unwrap() as u32,
            })
            .collect();
        let got = choose(&params, opt_num(&v["s_star"]), &inc, &cands);
        if let Some(what) = v.get("error").and_then(Value::as_str) {
            let e = got.expect_err(&v.to_string()).to_string();
            let i = v["candidate"].as_u64().unwrap();
            assert!(e.starts_with(&format!("candidate {i}: ")), "{v}: {e}");
            assert!(e.contains(what), "{v}: {e}");
            continue;
        }
        let got = got.unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(got.winner, v["winner"].as_u64().map(|w| w as usize), "{v}");
        let adm: Vec<bool> = got.admissions.iter().map(|a| a.admissible).collect();
        let missing: Vec<bool> = got.admissions.iter().map(|a| a.cost_missing).collect();
        assert_eq!(serde_json::json!(adm), v["admissible"], "{v}");
        assert_eq!(serde_json::json!(missing), v["cost_missing"], "{v}");
    }
}

fn status(name: &str) -> GenerationStatus {
    use GenerationStatus::*;
    [
        Complete,
        PendingGate,
        NoProposal,
        InvalidProposal,
        RejectedValidation,
        RejectedDuplicate,
        OperatorFailed,
        CandidateInvalid,
        InfrastructureFailed,
        Timeout,
        Cancelled,
        BudgetExhausted,
    ]
    .into_iter()
    .find(|s| crate::status_name(*s) == name)
    .unwrap_or_else(|| panic!("unknown status {name}"))
}

fn archive(rows: &Value) -> ArchiveView {
    let rows = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut annotations = serde_json::Map::new();
            if !r["components"].is_null() {
                annotations.insert(ANNOTATION.into(), r["components"].clone());
            }
            ArchiveRow {
                generation_id: r["id"].as_str().unwrap().into(),
                parent: r["parent"].as_str().map(Into::into),
                generation: r["generation"].as_u64().unwrap() as u32,
                status: status(r["status"].as_str().unwrap()),
                score: opt_num(&r["score"]),
                eligible: r["verdict"] == "keep",
                verdict: match r["verdict"].as_str() {
                    Some("keep") => Some(Verdict::Keep),
                    Some("discard") => Some(Verdict::Discard),
                    _ => None,
                },
                children: 0,
                task_vector: vec![],
                cost_usd: 0.0,
                annotations: Value::Object(annotations).to_string(),
            }
        })
        .collect();
    ArchiveView {
        rows,
        champion: None,
    }
}

fn names(cs: &[Component]) -> Value {
    serde_json::json!(cs.iter().map(|c| c.name()).collect::<Vec<_>>())
}

#[test]
fn history_vectors_match_the_oracle() {
    for v in &vectors("history") {
        let got = history(
            &archive(&v["rows"]),
            v["window"].as_u64().unwrap() as u32,
            num(&v["noise_band"]),
            v["slots"].as_u64().unwrap() as u32,
        );
        if let Some(what) = v.get("error").and_then(Value::as_str) {
            let e = got.expect_err(&v.to_string()).to_string();
            assert!(e.contains(what), "{v}: {e}");
            continue;
        }
        let h = got.unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(u64::from(h.now), v["now"].as_u64().unwrap(), "{v}");
        let want = v["yields"].as_object().unwrap();
        assert_eq!(h.yields.len(), want.len(), "{v}: {:?}", h.yields);
        for (c, y) in &h.yields {
            let w = num(&want[c.name()]);
            // The oracle does the same IEEE subtraction and max: the results are equal.
            assert!(*y == w, "{v}: yield of {} is {y}, not {w}", c.name());
        }
        assert_eq!(names(&h.prune), v["prune"], "{v}");
        assert_eq!(names(&h.untried), v["untried"], "{v}");
        assert_eq!(Value::Bool(h.stalled), v["stalled"], "{v}");
        assert_eq!(
            u64::from(h.exploration_slots),
            v["exploration_slots"].as_u64().unwrap(),
            "{v}"
        );
        let attempts: serde_json::Map<String, Value> = h
            .attempts
            .iter()
            .map(|(c, n)| (c.name().to_string(), Value::from(*n)))
            .collect();
        assert_eq!(Value::Object(attempts), v["attempts"], "{v}");
        assert_eq!(
            u64::from(h.total_attempts),
            v["total_attempts"].as_u64().unwrap(),
            "{v}"
        );
        let unmeasured: Vec<&str> = h
            .unmeasured
            .iter()
            .map(|r| r.generation_id.as_str())
            .collect();
        assert_eq!(serde_json::json!(unmeasured), v["unmeasured"], "{v}");
    }
}
