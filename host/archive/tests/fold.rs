//! Folding, the annotation allowlist, parent eligibility and the champion.

use crate::common;
use common::*;
use evolve_archive::{
    Event, FRAMEWORK_FIELDS, FixedIdentity, Ineligible, LoggedEvent, Row, STAMPED_FIELDS, champion,
    eligibility, fixed_identity, fold, ineligibility, total_cost_usd, valid_parents,
};
use serde_json::{Map, Value, json};

struct B {
    events: Vec<LoggedEvent>,
}

impl B {
    fn new() -> B {
        let mut b = B { events: Vec::new() };
        b.push("genesis", None, obj(json!({"experiment": EXP, "fixed_identity": {"evaluator_fingerprint": EVAL_FP, "task_set_hash": TASKS_FP, "runtime_fingerprint": RUNTIME_FP}})));
        b
    }
    fn push(&mut self, ty: &str, genid: Option<&str>, body: Map<String, Value>) -> &mut B {
        let seq = self.events.len() as u64;
        self.events.push(LoggedEvent {
            line: seq + 1,
            sha256: "0".repeat(64),
            certified: true,
            event: Event {
                seq,
                prev: "0".repeat(64),
                event_type: ty.into(),
                genid: genid.map(Into::into),
                at: AT.into(),
                body,
            },
        });
        self
    }
    fn eval(
        &mut self,
        genid: &str,
        parent: Option<&str>,
        purpose: &str,
        rewards: &[f64],
    ) -> &mut B {
        self.push(
            "evaluation",
            Some(genid),
            stamp(genid, parent, purpose, rewards),
        )
    }
    fn gate(&mut self, genid: &str, verdict: &str) -> &mut B {
        self.push(
            "gate",
            Some(genid),
            obj(json!({"verdict": verdict, "reason": "r"})),
        )
    }
    fn kept(&mut self, genid: &str, parent: &str, rewards: &[f64]) -> &mut B {
        self.push("generation", Some(genid), obj(json!({"parent": parent})));
        self.eval(genid, Some(parent), "candidate", rewards)
            .gate(genid, "keep")
    }
    fn rows(&self) -> Vec<Row> {
        fold(&self.events)
    }
}

fn all_tags(g: &str) -> Option<String> {
    Some(commit(g))
}

fn reasons(b: &B, genid: &str) -> Vec<Ineligible> {
    let rows = b.rows();
    let id = fixed_identity(&b.events, &rows);
    let row = rows.iter().find(|r| r.genid == genid).unwrap();
    ineligibility(row, id.as_ref(), &all_tags)
}

#[test]
fn rows_fold_in_first_appearance_order_with_children_costs_and_statuses() {
    let mut b = B::new();
    b.eval("0", None, "genesis", &[0.5]).gate("0", "keep");
    b.kept("1", "0", &[1.0]);
    b.push(
        "generation",
        Some("2"),
        obj(json!({"parent": "0", "cost_usd": 0.1})),
    );
    b.push(
        "status",
        Some("2"),
        obj(json!({"status": "no_proposal", "failure_stage": "mutate", "reason": "empty diff"})),
    );
    b.push("budget", None, obj(json!({"cost_usd": 2.0})));
    let rows = b.rows();
    assert_eq!(
        rows.iter().map(|r| r.genid.as_str()).collect::<Vec<_>>(),
        ["0", "1", "2"]
    );
    assert_eq!(rows[0].children, 2);
    assert_eq!(rows[1].children, 0);
    assert_eq!(rows[2].status.as_deref(), Some("no_proposal"));
    assert_eq!(rows[2].failure_stage.as_deref(), Some("mutate"));
    assert_eq!(rows[2].reason.as_deref(), Some("empty diff"));
    assert_eq!(rows[1].status.as_deref(), Some("benchmark_complete"));
    assert!((rows[1].cost_usd - 0.25).abs() < 1e-12 && (rows[2].cost_usd - 0.1).abs() < 1e-12);
    assert!((total_cost_usd(&b.events) - (0.25 + 0.25 + 0.1 + 2.0)).abs() < 1e-12);
}

#[test]
fn last_certified_evaluation_wins_and_anchors_stay_separate() {
    let mut b = B::new();
    b.eval("0", None, "genesis", &[0.5])
        .eval("0", None, "anchor", &[1.0])
        .gate("0", "keep");
    b.kept("1", "0", &[1.0]);
    let mut retry = stamp("1", Some("0"), "candidate", &[0.0]);
    retry.insert("attempt".into(), json!(2));
    retry.insert("source_attempts".into(), json!([1]));
    b.push("evaluation", Some("1"), retry);
    let rows = b.rows();
    assert_eq!(rows[0].score(), Some(0.5));
    assert_eq!(rows[0].anchors.len(), 1);
    assert_eq!(rows[1].score(), Some(0.0));
    assert!(rows[1].pending_gate, "a new evaluation must be gated again");
    assert_eq!(rows[1].verdict, None);
    // An uncertified evaluation changes nothing.
    let mut b2 = B::new();
    b2.eval("0", None, "genesis", &[0.5]).gate("0", "keep");
    b2.eval("0", None, "genesis", &[1.0]);
    b2.events.last_mut().unwrap().certified = false;
    let rows = b2.rows();
    assert_eq!(rows[0].score(), Some(0.5));
    assert!(!rows[0].pending_gate);
    assert_eq!(rows[0].uncertified_lines, vec![4]);
}

#[test]
fn annotations_never_replace_stamped_or_framework_fields() {
    let mut b = B::new();
    b.eval("0", None, "genesis", &[0.5]).gate("0", "keep");
    let mut ann = Map::new();
    for f in STAMPED_FIELDS.iter().chain(FRAMEWORK_FIELDS.iter()) {
        ann.insert(f.to_string(), json!("forged"));
    }
    ann.insert("note".into(), json!("looks good"));
    ann.insert("predicted_fixes".into(), json!(["t1"]));
    ann.insert("verified_fixes".into(), json!([]));
    ann.insert("x_gepa".into(), json!({"pareto": [1]}));
    ann.insert("x_".into(), json!(1));
    ann.insert("free".into(), json!(1));
    b.push("record", Some("0"), obj(json!({"annotations": ann})));
    let before = B::new().events.len();
    assert_eq!(before, 1);
    let rows = b.rows();
    let r = &rows[0];
    assert_eq!(
        r.annotations.keys().collect::<Vec<_>>(),
        ["note", "predicted_fixes", "verified_fixes", "x_gepa"]
    );
    for f in STAMPED_FIELDS {
        assert!(
            r.dropped_annotations.contains(&f.to_string()),
            "{f} not dropped"
        );
        assert_ne!(
            r.evaluation.as_ref().unwrap().stamp[f],
            json!("forged"),
            "{f} replaced"
        );
    }
    for f in FRAMEWORK_FIELDS {
        assert!(
            r.dropped_annotations.contains(&f.to_string()),
            "{f} not dropped"
        );
    }
    assert!(
        r.dropped_annotations.contains(&"free".to_string())
            && r.dropped_annotations.contains(&"x_".to_string())
    );
    assert_eq!(r.score(), Some(0.5));
    assert_eq!(r.verdict.as_deref(), Some("keep"));
    assert!(r.recorded);
    assert!(reasons(&b, "0").is_empty());
}

#[test]
fn eligibility_clause_by_clause() {
    let base = || {
        let mut b = B::new();
        b.eval("0", None, "genesis", &[0.5]).gate("0", "keep");
        b
    };
    // Eligible.
    let mut b = base();
    b.kept("1", "0", &[1.0]);
    assert_eq!(reasons(&b, "1"), vec![]);
    assert_eq!(reasons(&b, "0"), vec![]);
    // No evaluation.
    let mut b = base();
    b.push("generation", Some("1"), obj(json!({"parent": "0"})));
    assert_eq!(reasons(&b, "1"), vec![Ineligible::NoEvaluation]);
    // An anchor evaluation alone is not an evaluation of the row.
    let mut b = base();
    b.eval("1", Some("0"), "anchor", &[1.0]).gate("1", "keep");
    assert_eq!(reasons(&b, "1"), vec![Ineligible::NoEvaluation]);
    // Incomplete outcome (score null).
    let mut b = base();
    let mut s = stamp("1", Some("0"), "candidate", &[1.0]);
    s.insert("outcome".into(), json!("infrastructure_failed"));
    s.insert("score".into(), Value::Null);
    b.push("evaluation", Some("1"), s).gate("1", "keep");
    assert_eq!(
        reasons(&b, "1"),
        vec![
            Ineligible::Incomplete {
                outcome: Some("infrastructure_failed".into())
            },
            Ineligible::NonFiniteScore
        ]
    );
    // Complete but no score: an invalid stamp and a non-finite score.
    let mut b = base();
    let mut s = stamp("1", Some("0"), "candidate", &[1.0]);
    s.insert("score".into(), Value::Null);
    b.push("evaluation", Some("1"), s).gate("1", "keep");
    let r = reasons(&b, "1");
    assert!(
        matches!(&r[0], Ineligible::InvalidStamp { .. }) && r[1] == Ineligible::NonFiniteScore,
        "{r:?}"
    );
    // Pending gate, then discarded.
    let mut b = base();
    b.eval("1", Some("0"), "candidate", &[1.0]);
    assert_eq!(reasons(&b, "1"), vec![Ineligible::PendingGate]);
    b.gate("1", "discard");
    assert_eq!(
        reasons(&b, "1"),
        vec![Ineligible::NotKept {
            verdict: Some("discard".into())
        }]
    );
    // Another task set or runtime.
    let mut b = base();
    let mut s = stamp("1", Some("0"), "candidate", &[1.0]);
    s.insert("task_set_hash".into(), json!("sha256:other"));
    s.insert("runtime_fingerprint".into(), json!("sha256:rt2"));
    b.push("evaluation", Some("1"), s).gate("1", "keep");
    let r = reasons(&b, "1");
    assert_eq!(r.len(), 2);
    assert!(
        matches!(&r[0], Ineligible::IdentityMismatch { field, found: Some(f), .. } if field == "task_set_hash" && f == "sha256:other")
    );
    assert!(
        matches!(&r[1], Ineligible::IdentityMismatch { field, .. } if field == "runtime_fingerprint")
    );
    // Tags: missing, moved.
    let mut b = base();
    b.kept("1", "0", &[1.0]);
    let rows = b.rows();
    let id = fixed_identity(&b.events, &rows);
    assert_eq!(
        ineligibility(&rows[1], id.as_ref(), &|_: &str| None),
        vec![Ineligible::TagMissing]
    );
    let moved = ineligibility(&rows[1], id.as_ref(), &|_: &str| Some(commit("x")));
    assert_eq!(
        moved,
        vec![Ineligible::TagMoved {
            recorded: commit("1"),
            found: commit("x")
        }]
    );
    // An uncertified line naming the row.
    let mut b = base();
    b.kept("1", "0", &[1.0]);
    b.push("record", Some("1"), obj(json!({"annotations": {}})));
    b.events.last_mut().unwrap().certified = false;
    assert_eq!(
        reasons(&b, "1"),
        vec![Ineligible::UncertifiedLines { lines: vec![7] }]
    );
    // No fixed identity anywhere.
    let mut b = B { events: Vec::new() };
    b.push("genesis", None, obj(json!({"experiment": EXP})));
    b.kept("1", "0", &[1.0]);
    assert_eq!(reasons(&b, "1"), vec![Ineligible::NoFixedIdentity]);
    // ... unless row 0 has a genesis evaluation.
    b.eval("0", None, "genesis", &[0.5]).gate("0", "keep");
    assert_eq!(reasons(&b, "1"), vec![]);
    assert_eq!(
        fixed_identity(&b.events, &b.rows()),
        Some(FixedIdentity {
            evaluator_fingerprint: EVAL_FP.into(),
            task_set_hash: TASKS_FP.into(),
            runtime_fingerprint: RUNTIME_FP.into()
        })
    );
    // Display says why, for `evolve show`.
    assert_eq!(Ineligible::PendingGate.to_string(), "pending gate");
}

#[test]
fn champion_is_the_highest_eligible_score_and_the_first_on_a_tie() {
    let mut b = B::new();
    b.eval("0", None, "genesis", &[0.5]).gate("0", "keep");
    b.kept("1", "0", &[1.0, 0.5]);
    b.kept("2", "0", &[0.5, 1.0]);
    b.kept("3", "1", &[0.75, 0.75]);
    b.eval("4", Some("1"), "candidate", &[1.0, 1.0])
        .gate("4", "discard");
    b.eval("5", Some("1"), "candidate", &[1.0, 1.0]);
    let rows = b.rows();
    let id = fixed_identity(&b.events, &rows);
    let e = eligibility(&rows, id.as_ref(), &all_tags);
    let c = champion(&rows, &e).unwrap();
    assert_eq!((c.genid.as_str(), c.score), ("1", 0.75));
    assert_eq!(
        valid_parents(&rows, &e)
            .iter()
            .map(|r| r.genid.as_str())
            .collect::<Vec<_>>(),
        ["0", "1", "2", "3"]
    );
    assert_eq!(champion(&rows[..1], &e[..1]).unwrap().genid, "0");
    assert_eq!(champion(&[], &[]), None);
}
