//! reflect/credit: record each generation's outcome in the playbook, and credit earlier
//! entries with what their generation's descendants went on to score.
//!
//! Each call works for the generation `ctx.generation_id` (the newest child, *N*), which
//! must be in the archive view. Deterministic; only `add` and `credit` operations, never
//! `retire`, and at most `max_ops` of them per call (the rest are dropped and a note
//! goes to stderr).
//!
//! 1. **Outcome entry.** When *N* has a parent and the playbook has no entry `gen-<N>`
//!    yet, add it. Text: `gen 4 (parent 2): kept, score 0.61 (+0.05)`; the outcome is
//!    `kept`/`discarded` once the gate decided, else the generation status (`timeout`,
//!    …); the score and the change from the parent's score are rounded to 4 decimals
//!    (the change is left out when the parent has no score; `no score` when *N* has
//!    none). Data: `{"genid", "parent", "status", "verdict", "score", "parent_score",
//!    "delta"}` with the exact values (`null` when unknown).
//! 2. **Credit.** An entry whose data names a generation (`"genid": "<id>"`, as the
//!    outcome entries do; other entries are left alone) earns credit from the scores of
//!    that generation's descendants, so that *the credits an entry receives over the
//!    run add up to (best descendant score − its generation's score)*. Each call credits
//!    only *N*'s contribution, so nothing is counted twice: for every entry whose
//!    generation *g* is a proper ancestor of *N* (following `parent` links), with *N* and
//!    *g* both scored, let *B* be the best score among *g*'s descendants that come before
//!    *N* in archive order. With no such descendant the credit is `score(N) − score(g)`
//!    (negative when the first descendant did worse); otherwise it is
//!    `score(N) − B` when *N* beats *B*. A zero credit is not emitted. One credit per
//!    entry per call, in playbook order, after the outcome entry.
//!
//! Credit from generations whose reflect call failed or was cut by `max_ops` is lost
//! (it is never recomputed), and a repeated call for the same generation repeats its
//! credits: the host calls reflect once per generation.

use std::collections::{BTreeMap, BTreeSet};

use evolve_operator_sdk::prelude::*;

pub struct Credit;

const MAX_OPS: i64 = 20;

impl Operator for Credit {
    const NAME: &'static str = "credit";
    const SUMMARY: &'static str = "Add an outcome entry per generation and credit earlier entries with their descendants' score gains (append-only).";

    fn config() -> SchemaBuilder {
        Schema::new().field(
            "max_ops",
            config::integer()
                .default(json!(MAX_OPS))
                .minimum(1.0)
                .maximum(1000.0)
                .description(
                    "At most this many playbook operations per call; the rest are dropped",
                ),
        )
    }
}

/// `x` rounded to 4 decimals, without trailing zeros (`0.61`, `1`, `-0.05`).
pub fn num(x: f64) -> String {
    let s = format!("{x:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

fn finite(row: &ArchiveRow) -> Option<f64> {
    row.score.filter(|s| s.is_finite())
}

fn verdict_name(v: Option<Verdict>) -> Option<&'static str> {
    v.map(|v| match v {
        Verdict::Keep => "keep",
        Verdict::Discard => "discard",
    })
}

/// The outcome entry for `row`, whose parent is `parent`.
pub fn outcome_entry(
    row: &ArchiveRow,
    parent: &str,
    parent_row: Option<&ArchiveRow>,
) -> PlaybookEntry {
    let id = &row.generation_id;
    let outcome = match row.verdict {
        Some(Verdict::Keep) => "kept",
        Some(Verdict::Discard) => "discarded",
        None => status_name(row.status),
    };
    let score = finite(row);
    let parent_score = parent_row.and_then(finite);
    let delta = score.zip(parent_score).map(|(s, p)| s - p);
    let mut text = format!("gen {id} (parent {parent}): {outcome}");
    match (score, delta) {
        (None, _) => text.push_str(", no score"),
        (Some(s), None) => text.push_str(&format!(", score {}", num(s))),
        (Some(s), Some(d)) => {
            let d = num(d);
            let sign = if d.starts_with('-') { "" } else { "+" };
            text.push_str(&format!(", score {} ({sign}{d})", num(s)));
        }
    }
    let data = json!({
        "genid": id,
        "parent": parent,
        "status": status_name(row.status),
        "verdict": verdict_name(row.verdict),
        "score": score,
        "parent_score": parent_score,
        "delta": delta,
    });
    PlaybookEntry {
        id: format!("gen-{id}"),
        text,
        data: data.to_string(),
    }
}

/// The generation an entry's data names, if any.
fn entry_genid(entry: &PlaybookEntry) -> Option<String> {
    match evolve_operator_sdk::serde_json::from_str::<Value>(&entry.data) {
        Ok(Value::Object(m)) => m.get("genid").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// The proper ancestors of `start` (its parent, grandparent, …), stopping at a missing
/// row or a cycle.
fn ancestors<'a>(index: &BTreeMap<&str, &'a ArchiveRow>, start: &'a ArchiveRow) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut cur = start.parent.as_deref();
    while let Some(p) = cur {
        if p == start.generation_id || !seen.insert(p) {
            break;
        }
        let Some(row) = index.get(p) else {
            out.push(p);
            break;
        };
        out.push(row.generation_id.as_str());
        cur = row.parent.as_deref();
    }
    out
}

/// The operations for generation `genid` (see the module documentation), before the
/// `max_ops` cap.
pub fn plan(
    genid: &str,
    archive: &ArchiveView,
    playbook: &[PlaybookEntry],
) -> Result<Vec<PlaybookOp>, String> {
    let pos = archive
        .rows
        .iter()
        .position(|r| r.generation_id == genid)
        .ok_or_else(|| {
            format!(
                "generation {genid} is not in the archive view (reflect runs after it is archived)"
            )
        })?;
    let mut index: BTreeMap<&str, &ArchiveRow> = BTreeMap::new();
    for r in &archive.rows {
        index.entry(r.generation_id.as_str()).or_insert(r);
    }
    let newest = &archive.rows[pos];
    let mut ops = Vec::new();

    if let Some(parent) = newest.parent.as_deref() {
        let entry = outcome_entry(newest, parent, index.get(parent).copied());
        if !playbook.iter().any(|e| e.id == entry.id) {
            ops.push(PlaybookOp::Add(entry));
        }
    }

    let Some(score) = finite(newest) else {
        return Ok(ops);
    };
    let lineage: BTreeSet<&str> = ancestors(&index, newest).into_iter().collect();
    // Best score among each ancestor's descendants that precede the newest row.
    let mut best_before: BTreeMap<&str, f64> = BTreeMap::new();
    for r in &archive.rows[..pos] {
        let Some(s) = finite(r) else { continue };
        for a in ancestors(&index, r) {
            if lineage.contains(a) {
                let b = best_before.entry(a).or_insert(s);
                if s > *b {
                    *b = s;
                }
            }
        }
    }
    for entry in playbook {
        let Some(g) = entry_genid(entry) else {
            continue;
        };
        if !lineage.contains(g.as_str()) {
            continue;
        }
        let Some(gscore) = index.get(g.as_str()).and_then(|r| finite(r)) else {
            continue;
        };
        let (delta, reason) = match best_before.get(g.as_str()) {
            None => (
                score - gscore,
                format!(
                    "gen {genid} is the first scored descendant of gen {g}: {} vs {}",
                    num(score),
                    num(gscore)
                ),
            ),
            Some(&b) if score > b => (
                score - b,
                format!(
                    "gen {genid} is the best descendant of gen {g} so far: {} (was {})",
                    num(score),
                    num(b)
                ),
            ),
            Some(_) => continue,
        };
        if delta != 0.0 {
            ops.push(PlaybookOp::Credit(PlaybookCredit {
                id: entry.id.clone(),
                delta,
                reason,
            }));
        }
    }
    Ok(ops)
}

impl Reflect for Credit {
    fn reflect(
        ctx: &Context,
        archive: &ArchiveView,
        playbook: &[PlaybookEntry],
    ) -> Result<Vec<PlaybookOp>, String> {
        let max_ops = ctx.i64("max_ops").unwrap_or(MAX_OPS).max(1) as usize;
        let mut ops = plan(&ctx.generation_id, archive, playbook)?;
        if ops.len() > max_ops {
            eprintln!(
                "credit: {} of {} operations dropped (max_ops {max_ops})",
                ops.len() - max_ops,
                ops.len()
            );
            ops.truncate(max_ops);
        }
        Ok(ops)
    }
}

evolve_operator_sdk::export!(reflect: Credit);

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::testing::{row, view};

    fn child(id: &str, parent: &str, generation: u32, score: Option<f64>) -> ArchiveRow {
        ArchiveRow {
            parent: Some(parent.into()),
            ..row(id, generation, score, true)
        }
    }

    fn run(
        config: Value,
        genid: &str,
        rows: Vec<ArchiveRow>,
        playbook: &[PlaybookEntry],
    ) -> Result<Vec<PlaybookOp>, String> {
        let schema = <Credit as Operator>::config().build().unwrap();
        let mut ctx = Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()));
        ctx.generation_id = genid.into();
        Credit::reflect(&ctx, &view(rows), playbook)
    }

    /// Operations as comparable tuples: (op, id, text or reason, data or delta).
    fn show(ops: &[PlaybookOp]) -> Vec<(String, String, String, Value)> {
        ops.iter()
            .map(|op| match op {
                PlaybookOp::Add(e) => (
                    "add".into(),
                    e.id.clone(),
                    e.text.clone(),
                    evolve_operator_sdk::serde_json::from_str(&e.data).unwrap(),
                ),
                PlaybookOp::Credit(c) => (
                    "credit".into(),
                    c.id.clone(),
                    c.reason.clone(),
                    json!(c.delta),
                ),
                PlaybookOp::Retire(id) => ("retire".into(), id.clone(), String::new(), Value::Null),
            })
            .collect()
    }

    fn entry(id: &str, genid: &str) -> PlaybookEntry {
        PlaybookEntry {
            id: id.into(),
            text: format!("about {genid}"),
            data: json!({"genid": genid}).to_string(),
        }
    }

    #[test]
    fn outcome_entry_text_and_data() {
        let rows = vec![row("0", 0, Some(0.5), true), child("1", "0", 1, Some(0.75))];
        let ops = run(json!({}), "1", rows, &[]).unwrap();
        assert_eq!(
            show(&ops),
            vec![(
                "add".to_string(),
                "gen-1".to_string(),
                "gen 1 (parent 0): kept, score 0.75 (+0.25)".to_string(),
                json!({"genid": "1", "parent": "0", "status": "complete", "verdict": "keep",
                       "score": 0.75, "parent_score": 0.5, "delta": 0.25}),
            )]
        );
    }

    #[test]
    fn outcome_entry_rounds_and_names_other_outcomes() {
        let p = row("2", 2, Some(0.61), true);
        let worse = ArchiveRow {
            verdict: Some(Verdict::Discard),
            ..child("4", "2", 4, Some(0.56))
        };
        assert_eq!(
            outcome_entry(&worse, "2", Some(&p)).text,
            "gen 4 (parent 2): discarded, score 0.56 (-0.05)"
        );
        let same = child("4", "2", 4, Some(0.61));
        assert_eq!(
            outcome_entry(&same, "2", Some(&p)).text,
            "gen 4 (parent 2): kept, score 0.61 (+0)"
        );
        let timeout = ArchiveRow {
            status: GenerationStatus::Timeout,
            verdict: None,
            ..child("5", "2", 5, None)
        };
        let e = outcome_entry(&timeout, "2", Some(&p));
        assert_eq!(e.text, "gen 5 (parent 2): timeout, no score");
        assert_eq!(
            evolve_operator_sdk::serde_json::from_str::<Value>(&e.data).unwrap(),
            json!({"genid": "5", "parent": "2", "status": "timeout", "verdict": null,
                   "score": null, "parent_score": 0.61, "delta": null})
        );
        let orphan = child("6", "9", 6, Some(1.0));
        assert_eq!(
            outcome_entry(&orphan, "9", None).text,
            "gen 6 (parent 9): kept, score 1"
        );
    }

    #[test]
    fn first_descendant_gets_signed_credit_and_later_only_improvements() {
        // 0 (0.5) → 1 (0.25) → 2 (0.75) → 3 (0.625); entries for 0 and 1.
        let rows = vec![
            row("0", 0, Some(0.5), true),
            child("1", "0", 1, Some(0.25)),
            child("2", "1", 2, Some(0.75)),
            child("3", "2", 3, Some(0.625)),
        ];
        let playbook = [entry("gen-1", "1"), entry("note", "0")];
        // Reflecting 1: first descendant of 0, 0.25 − 0.5.
        let ops = run(json!({}), "1", rows[..2].to_vec(), &[entry("note", "0")]).unwrap();
        assert_eq!(
            show(&ops)[1..],
            [(
                "credit".to_string(),
                "note".to_string(),
                "gen 1 is the first scored descendant of gen 0: 0.25 vs 0.5".to_string(),
                json!(-0.25)
            )]
        );
        // Reflecting 2: first descendant of 1 (+0.5); beats 0's best so far 0.25 (+0.5).
        let ops = run(json!({}), "2", rows[..3].to_vec(), &playbook).unwrap();
        assert_eq!(
            show(&ops)[1..],
            [
                (
                    "credit".to_string(),
                    "gen-1".to_string(),
                    "gen 2 is the first scored descendant of gen 1: 0.75 vs 0.25".to_string(),
                    json!(0.5)
                ),
                (
                    "credit".to_string(),
                    "note".to_string(),
                    "gen 2 is the best descendant of gen 0 so far: 0.75 (was 0.25)".to_string(),
                    json!(0.5)
                ),
            ]
        );
        // Reflecting 3: no improvement for anyone; only its outcome entry.
        let ops = run(json!({}), "3", rows.clone(), &playbook).unwrap();
        assert_eq!(show(&ops).len(), 1);
        assert_eq!(show(&ops)[0].1, "gen-3");
        // Over the run, entry "note" (gen 0) got −0.25 + 0.5 = 0.75 − 0.5.
    }

    #[test]
    fn siblings_and_other_lines_do_not_count() {
        // 1 and 2 are both children of 0; 2's credit to 0 is measured against 1.
        let rows = vec![
            row("0", 0, Some(0.5), true),
            child("1", "0", 1, Some(0.75)),
            child("2", "0", 2, Some(1.0)),
        ];
        let playbook = [entry("gen-1", "1"), entry("e0", "0")];
        let ops = run(json!({}), "2", rows, &playbook).unwrap();
        assert_eq!(
            show(&ops)[1..],
            [(
                "credit".to_string(),
                "e0".to_string(),
                "gen 2 is the best descendant of gen 0 so far: 1 (was 0.75)".to_string(),
                json!(0.25)
            )]
        );
    }

    #[test]
    fn unscored_rows_give_and_get_no_credit() {
        let rows = vec![
            row("0", 0, None, true),
            child("1", "0", 1, Some(0.5)),
            child("2", "1", 2, None),
            child("3", "1", 3, Some(0.5)),
        ];
        let playbook = [entry("e0", "0"), entry("e1", "1")];
        // 2 has no score: only its outcome entry.
        let ops = run(json!({}), "2", rows[..3].to_vec(), &playbook).unwrap();
        assert_eq!(show(&ops).len(), 1);
        // 3 ties 1: zero credit is not emitted; 0 has no score.
        let ops = run(json!({}), "3", rows, &playbook).unwrap();
        assert_eq!(show(&ops).len(), 1);
    }

    #[test]
    fn existing_outcome_entries_are_not_added_twice() {
        let rows = vec![row("0", 0, Some(0.5), true), child("1", "0", 1, Some(0.5))];
        let ops = run(json!({}), "1", rows, &[entry("gen-1", "1")]).unwrap();
        assert!(ops.is_empty());
    }

    #[test]
    fn entries_without_a_generation_are_left_alone() {
        let rows = vec![row("0", 0, Some(0.5), true), child("1", "0", 1, Some(1.0))];
        let playbook = [
            PlaybookEntry {
                id: "p1".into(),
                text: "free text".into(),
                data: "{}".into(),
            },
            PlaybookEntry {
                id: "p2".into(),
                text: "not json".into(),
                data: "x".into(),
            },
            PlaybookEntry {
                id: "p3".into(),
                text: "numeric genid".into(),
                data: r#"{"genid": 0}"#.into(),
            },
        ];
        let ops = run(json!({}), "1", rows, &playbook).unwrap();
        assert_eq!(show(&ops).len(), 1);
    }

    #[test]
    fn max_ops_keeps_the_first_operations() {
        let rows = vec![row("0", 0, Some(0.5), true), child("1", "0", 1, Some(1.0))];
        let playbook = [entry("a", "0"), entry("b", "0"), entry("c", "0")];
        let ops = run(json!({"max_ops": 2}), "1", rows.clone(), &playbook).unwrap();
        let ids: Vec<String> = show(&ops).into_iter().map(|o| o.1).collect();
        assert_eq!(ids, ["gen-1", "a"]);
        let ops = run(json!({}), "1", rows, &playbook).unwrap();
        assert_eq!(ops.len(), 4);
    }

    #[test]
    fn generation_zero_and_cycles_are_harmless() {
        let ops = run(json!({}), "0", vec![row("0", 0, Some(0.5), true)], &[]).unwrap();
        assert!(ops.is_empty());
        let rows = vec![child("a", "b", 1, Some(0.5)), child("b", "a", 2, Some(1.0))];
        let ops = run(json!({}), "b", rows, &[entry("ea", "a")]).unwrap();
        assert_eq!(
            show(&ops)[1..],
            [(
                "credit".to_string(),
                "ea".to_string(),
                "gen b is the first scored descendant of gen a: 1 vs 0.5".to_string(),
                json!(0.5)
            )]
        );
    }

    #[test]
    fn the_generation_must_be_archived() {
        assert_eq!(
            run(json!({}), "4", vec![row("0", 0, Some(0.5), true)], &[]).unwrap_err(),
            "generation 4 is not in the archive view (reflect runs after it is archived)"
        );
    }

    #[test]
    fn numbers_are_rounded_to_four_decimals() {
        assert_eq!(num(0.6100000000000001), "0.61");
        assert_eq!(num(0.05000000000000004), "0.05");
        assert_eq!(num(-0.00001), "0");
        assert_eq!(num(1.0), "1");
        assert_eq!(num(0.33333), "0.3333");
    }

    #[test]
    fn schema_defaults_and_bounds() {
        let schema = <Credit as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"max_ops": 20})
        );
        assert!(schema.normalize(r#"{"max_ops": 0}"#).is_err());
        assert!(schema.normalize(r#"{"model": "x"}"#).is_err());
    }
}
