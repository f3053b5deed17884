//! Comparing a resumed run with an uninterrupted one, event for event.
//!
//! Used by `evolve selftest` and by `host/tests/recovery.rs`: both kill a real
//! `evolve run`, resume it, and require the same run history as a run that was never
//! interrupted.

use serde_json::{Value, json};

/// Body fields that legitimately differ between an interrupted-and-resumed run and an
/// uninterrupted one: durations, attempt numbers (a killed evaluation leaves an attempt
/// behind), the experiment id and commit/tree ids (two workspaces differ in their keys/
/// and so in every tree id; within one workspace the ids follow from the parents and
/// the edits, which are compared), and where an operator was loaded from.
const VOLATILE: [&str; 10] = [
    "timings",
    "attempt",
    "source_attempts",
    "experiment",
    "commit",
    "tree",
    "candidate_commit",
    "candidate_tree",
    "proposed_tree",
    "operator_from",
];

/// Events as a comparable run history: type, genid and body without the volatile
/// fields; chain fields and timestamps left out, and `repair` events (which only a
/// resumed run has) dropped.
pub fn history(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] != "repair")
        .map(|e| {
            let mut body = e["body"].as_object().cloned().unwrap_or_default();
            for k in VOLATILE {
                body.remove(k);
            }
            json!({"type": e["type"], "genid": e["genid"], "body": body})
        })
        .collect()
}

/// `None` when the histories are equal, else a description of the first difference.
pub fn first_difference(got: &[Value], reference: &[Value]) -> Option<String> {
    for (i, (a, b)) in got.iter().zip(reference).enumerate() {
        if a != b {
            return Some(format!(
                "history entry {i} differs: resumed {a} vs uninterrupted {b}"
            ));
        }
    }
    (got.len() != reference.len()).then(|| {
        format!(
            "the resumed run has {} history entries, the uninterrupted one {}",
            got.len(),
            reference.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_fields_and_repairs_are_ignored_but_scores_are_not() {
        let a = vec![
            json!({"type": "evaluation", "genid": "1", "at": "x", "body": {"score": 0.2, "attempt": 1}}),
        ];
        let b = vec![
            json!({"type": "repair", "genid": "1", "body": {}}),
            json!({"type": "evaluation", "genid": "1", "at": "y", "body": {"score": 0.2, "attempt": 2}}),
        ];
        assert_eq!(first_difference(&history(&b), &history(&a)), None);
        let c = vec![json!({"type": "evaluation", "genid": "1", "body": {"score": 0.3}})];
        assert!(first_difference(&history(&c), &history(&a)).is_some());
        assert!(first_difference(&history(&a[..0]), &history(&a)).is_some());
    }
}
