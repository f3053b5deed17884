//! novelty/diff_similarity: reject a candidate whose change repeats a recently accepted
//! one, as RSIHub's `library/novelty/diff_similarity.py` does.
//!
//! The candidate's unified diff (the host's, of the mutable surface against the parent)
//! is compared with the diffs of the first `history_k` entries of `recent_accepted`
//! (newest first; the host sends at most [`HISTORY_MAX`]). `novelty = 1 − max
//! similarity` (the max starts at 0, so 1.0 when there is nothing to compare), and the
//! candidate is accepted iff the max similarity is below `threshold`. Two measures:
//!
//! - `measure: sequence_ratio` (the default, RSIHub's): the similarity is
//!   `difflib.SequenceMatcher(None, candidate, past).ratio()` over the whole diff texts,
//!   file headers included, character by character ([`sequence_matcher`]). A candidate
//!   diff that is empty or only whitespace gets novelty 0 and is rejected; a past diff
//!   that is is skipped. Defaults: `threshold` 0.98, `history_k` 8.
//! - `measure: line_overlap` (this project's earlier measure, kept as an option; it was
//!   used with `threshold: 0.9, history_k: 5`):
//!   1. A diff's *changed lines* are the lines inside its hunks that start with `+` or
//!      `-`, each kept as a (sign, text after the sign) pair. Hunks are delimited by
//!      their `@@ -a,b +c,d @@` headers and the line counts they declare, so file
//!      headers (`diff --git`, `index`, `--- a/…`, `+++ b/…`, `Binary files … differ`,
//!      the host's `[diff truncated …]` marker) and context lines (` `) never count,
//!      while a removed line that itself starts with `--` does. A line that cannot
//!      belong to the current hunk (an unknown prefix, or more `+`/`-` lines than the
//!      header declares) ends it. A `\ No newline at end of file` line is ignored.
//!   2. The similarity of two diffs is the Jaccard similarity of their changed lines as
//!      multisets: Σ min(count_a, count_b) / Σ max(count_a, count_b) over all
//!      (sign, text) pairs. File names do not take part: the same line added to two
//!      files matches.
//!   3. A candidate diff with no changed line at all (empty, or only binary, mode or
//!      rename changes) gets novelty 0 and is rejected.
//!
//! The verdict has no reason field, so the operator explains each verdict in one line on
//! stderr, which the host keeps in the stage's log. The RSIHub table in
//! `tests/rsihub_golden.json` pins the default measure's numbers.

use std::collections::BTreeMap;

use evolve_operator_sdk::prelude::*;

pub mod sequence_matcher;

pub struct DiffSimilarity;

/// RSIHub's defaults.
const HISTORY_K: i64 = 8;
const THRESHOLD: f64 = 0.98;
/// The most recent accepted diffs the host sends (host/src/lifecycle/child.rs), so the
/// largest `history_k` that means what it says.
pub const HISTORY_MAX: i64 = 16;

/// How two diffs are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// difflib's ratio over the whole diff texts (RSIHub).
    SequenceRatio,
    /// Multiset Jaccard of the changed lines.
    LineOverlap,
}

impl Operator for DiffSimilarity {
    const NAME: &'static str = "diff_similarity";
    const SUMMARY: &'static str = "Reject a change whose diff near-duplicates a recently accepted one (difflib ratio >= threshold, as RSIHub; or changed-line overlap).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "measure",
                config::string()
                    .default(json!("sequence_ratio"))
                    .choices([json!("sequence_ratio"), json!("line_overlap")])
                    .description(
                        "sequence_ratio: difflib's ratio over the whole diff texts (RSIHub); \
                         line_overlap: multiset Jaccard of the added/removed lines",
                    ),
            )
            .field(
                "history_k",
                config::integer()
                    .default(json!(HISTORY_K))
                    .minimum(1.0)
                    .maximum(HISTORY_MAX as f64)
                    .description(
                        "How many of the most recently accepted diffs (newest first) to compare with",
                    ),
            )
            .field(
                "threshold",
                config::number()
                    .default(json!(THRESHOLD))
                    .minimum(0.0)
                    .maximum(1.0)
                    .description(
                        "Reject when the similarity to any compared diff reaches this value",
                    ),
            )
    }
}

/// Python's `str.strip()` whitespace: Unicode White_Space plus the four information
/// separators U+001C..U+001F, which Python also counts.
fn blank(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

/// The changed lines of a unified diff: (sign, text) → count.
pub type ChangedLines<'a> = BTreeMap<(char, &'a str), u32>;

/// Parse `@@ -a[,b] +c[,d] @@…` into the declared old and new line counts.
fn hunk_counts(line: &str) -> Option<(u64, u64)> {
    let rest = line.strip_prefix("@@ ")?;
    let mut parts = rest.splitn(3, ' ');
    let old = parts.next()?.strip_prefix('-')?;
    let new = parts.next()?.strip_prefix('+')?;
    let tail = parts.next()?;
    if !(tail == "@@" || tail.starts_with("@@ ")) {
        return None;
    }
    let count = |range: &str| -> Option<u64> {
        let (start, len) = match range.split_once(',') {
            Some((s, l)) => (s, Some(l)),
            None => (range, None),
        };
        start.parse::<u64>().ok()?;
        match len {
            Some(l) => l.parse().ok(),
            None => Some(1),
        }
    };
    Some((count(old)?, count(new)?))
}

/// The changed lines of `patch` (see the module documentation). `what` names the diff
/// in the error for a malformed hunk header.
pub fn changed_lines<'a>(what: &str, patch: &'a str) -> Result<ChangedLines<'a>, String> {
    let mut out = ChangedLines::new();
    // Lines still expected in the current hunk: (old, new); (0, 0) outside hunks.
    let (mut old, mut new) = (0u64, 0u64);
    for (i, line) in patch.split('\n').enumerate() {
        if old > 0 || new > 0 {
            let first = line.chars().next();
            match first {
                Some('+') if new > 0 => {
                    new -= 1;
                    *out.entry(('+', &line[1..])).or_default() += 1;
                    continue;
                }
                Some('-') if old > 0 => {
                    old -= 1;
                    *out.entry(('-', &line[1..])).or_default() += 1;
                    continue;
                }
                // Context; an empty line is context whose single space was stripped.
                Some(' ') | None if old > 0 && new > 0 => {
                    old -= 1;
                    new -= 1;
                    continue;
                }
                Some('\\') => continue,
                // Does not fit the hunk: the hunk ended early (e.g. a truncated diff).
                _ => {
                    old = 0;
                    new = 0;
                }
            }
        }
        if line.starts_with("@@ ") {
            let (o, n) = hunk_counts(line)
                .ok_or_else(|| format!("{what} line {}: malformed hunk header", i + 1))?;
            old = o;
            new = n;
        }
    }
    Ok(out)
}

/// Multiset Jaccard similarity; 0 when both are empty.
pub fn similarity(a: &ChangedLines<'_>, b: &ChangedLines<'_>) -> f64 {
    let (mut inter, mut union) = (0u64, 0u64);
    for (k, &ca) in a {
        let cb = b.get(k).copied().unwrap_or(0);
        inter += u64::from(ca.min(cb));
        union += u64::from(ca.max(cb));
    }
    for (k, &cb) in b {
        if !a.contains_key(k) {
            union += u64::from(cb);
        }
    }
    if union == 0 {
        0.0
    } else {
        inter as f64 / union as f64
    }
}

/// The verdict and the sentence explaining it.
pub fn assess(
    diff: &CandidateDiff,
    measure: Measure,
    history_k: usize,
    threshold: f64,
) -> Result<(NoveltyVerdict, String), String> {
    let reject = |why: &str| {
        (
            NoveltyVerdict {
                novelty: 0.0,
                accept: false,
            },
            format!("rejected: {why}"),
        )
    };
    let recent = diff.recent_accepted.iter().take(history_k).enumerate();
    let mut best: Option<(usize, f64)> = None;
    let mut consider = |i: usize, s: f64| {
        if best.is_none_or(|(_, b)| s > b) {
            best = Some((i, s));
        }
    };
    match measure {
        Measure::SequenceRatio => {
            if blank(&diff.patch) {
                return Ok(reject("the diff is empty"));
            }
            for (i, past) in recent.filter(|(_, p)| !blank(p)) {
                consider(i, sequence_matcher::ratio(&diff.patch, past));
            }
        }
        Measure::LineOverlap => {
            let mine = changed_lines("patch", &diff.patch)?;
            if mine.is_empty() {
                return Ok(reject(
                    "the diff adds or removes no line (empty, or only binary, mode or rename changes)",
                ));
            }
            for (i, past) in recent {
                let theirs = changed_lines(&format!("recent_accepted[{i}]"), past)?;
                consider(i, similarity(&mine, &theirs));
            }
        }
    }
    let max = best.map_or(0.0, |(_, s)| s);
    let accept = max < threshold;
    let verdict = if accept { "accepted" } else { "rejected" };
    let op = if accept { "<" } else { ">=" };
    let reason = match best {
        Some((i, _)) => format!(
            "{verdict}: max similarity {max} (recent_accepted[{i}]) {op} threshold {threshold}"
        ),
        None => format!(
            "{verdict}: no recently accepted diff to compare with (similarity 0 {op} threshold {threshold})"
        ),
    };
    Ok((
        NoveltyVerdict {
            novelty: 1.0 - max,
            accept,
        },
        reason,
    ))
}

impl Novelty for DiffSimilarity {
    fn assess(ctx: &Context, diff: &CandidateDiff) -> Result<NoveltyVerdict, String> {
        let measure = match ctx.str("measure").unwrap_or("sequence_ratio") {
            "sequence_ratio" => Measure::SequenceRatio,
            "line_overlap" => Measure::LineOverlap,
            other => {
                return Err(format!(
                    "config.measure must be sequence_ratio or line_overlap, not {other:?}"
                ));
            }
        };
        let history_k = ctx.i64("history_k").unwrap_or(HISTORY_K).max(1) as usize;
        let threshold = ctx.f64("threshold").unwrap_or(THRESHOLD);
        let (verdict, reason) = assess(diff, measure, history_k, threshold)?;
        eprintln!("diff_similarity: {reason}");
        Ok(verdict)
    }
}

evolve_operator_sdk::export!(novelty: DiffSimilarity);

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(body: &str) -> String {
        format!(
            "diff --git a/target/p.py b/target/p.py\nindex 1..2 100644\n--- a/target/p.py\n+++ b/target/p.py\n{body}"
        )
    }

    fn diff(p: &str, recent: &[&str]) -> CandidateDiff {
        CandidateDiff {
            changed_paths: vec!["target/p.py".into()],
            patch: p.to_string(),
            recent_accepted: recent.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn run(config: Value, d: &CandidateDiff) -> Result<(f64, bool), String> {
        let schema = <DiffSimilarity as Operator>::config().build().unwrap();
        let ctx = Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()));
        DiffSimilarity::assess(&ctx, d).map(|v| (v.novelty, v.accept))
    }

    /// The line-overlap measure with the settings it had as the default.
    fn lo(extra: Value) -> Value {
        let mut c = json!({"measure": "line_overlap", "threshold": 0.9, "history_k": 5});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    /// Every row of the table RSIHub's own `library/novelty/diff_similarity.py` produced
    /// (tests/rsihub_golden.py): same config, same diffs, same verdict and novelty.
    #[test]
    fn matches_rsihub_golden_table() {
        let table: Value =
            evolve_operator_sdk::serde_json::from_str(include_str!("../tests/rsihub_golden.json"))
                .unwrap();
        assert_eq!(table["operator"], "library/novelty/diff_similarity.py");
        let rows = table["rows"].as_array().unwrap();
        assert!(rows.len() >= 15);
        for r in rows {
            let recent: Vec<&str> = r["recent_accepted"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap())
                .collect();
            let d = diff(r["patch"].as_str().unwrap(), &recent);
            let (novelty, accept) = run(r["config"].clone(), &d).unwrap();
            let name = &r["name"];
            assert_eq!(accept, r["accept"].as_bool().unwrap(), "row {name}");
            let expected = r["novelty"].as_f64().unwrap();
            assert!(
                (novelty - expected).abs() < 1e-15,
                "row {name}: novelty {novelty}, RSIHub {expected}"
            );
        }
    }

    #[test]
    fn the_measures_differ_on_the_same_change_in_another_file() {
        let body = "@@ -1 +1 @@\n-a = 1\n+a = 2\n";
        let d = diff(&patch(body), &[&patch(body).replace("p.py", "q.py")]);
        // Line overlap ignores file names: a duplicate.
        assert_eq!(run(lo(json!({})), &d), Ok((0.0, false)));
        // The diff texts differ only in the file's name, one character written four
        // times in the headers: every other character matches.
        let (novelty, _) = run(json!({}), &d).unwrap();
        let (a, b) = (
            d.patch.chars().count(),
            d.recent_accepted[0].chars().count(),
        );
        assert_eq!(novelty, 1.0 - 2.0 * (a - 4) as f64 / (a + b) as f64);
    }

    fn lines(p: &str) -> Vec<(char, String, u32)> {
        changed_lines("patch", p)
            .unwrap()
            .into_iter()
            .map(|((s, t), n)| (s, t.to_string(), n))
            .collect()
    }

    #[test]
    fn headers_and_context_are_ignored() {
        let p = patch("@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n");
        assert_eq!(
            lines(&p),
            vec![('+', "c".to_string(), 1), ('-', "b".to_string(), 1)]
        );
    }

    #[test]
    fn removed_lines_that_look_like_headers_count() {
        // Removing "-- x" prints "--- x"; adding "++ y" prints "+++ y".
        let p = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n--- x\n-keep\n+++ y\n+keep\n";
        assert_eq!(
            lines(p),
            vec![
                ('+', "++ y".to_string(), 1),
                ('+', "keep".to_string(), 1),
                ('-', "-- x".to_string(), 1),
                ('-', "keep".to_string(), 1),
            ]
        );
    }

    #[test]
    fn several_hunks_and_files_counts_and_no_newline_marker() {
        let p = "--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n-x\n+x\n+x\n\\ No newline at end of file\n\
                 diff --git a/g b/g\n--- a/g\n+++ b/g\n@@ -5,2 +5 @@\n \n-y\n";
        assert_eq!(
            lines(p),
            vec![
                ('+', "x".to_string(), 2),
                ('-', "x".to_string(), 1),
                ('-', "y".to_string(), 1)
            ]
        );
    }

    #[test]
    fn a_truncated_diff_keeps_what_it_shows() {
        let p = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n-a\n+b\n+partial li\n[diff truncated after 40 bytes]\n";
        assert_eq!(
            lines(p),
            vec![
                ('+', "b".to_string(), 1),
                ('+', "partial li".to_string(), 1),
                ('-', "a".to_string(), 1)
            ]
        );
    }

    #[test]
    fn malformed_hunk_headers_are_errors() {
        let d = diff("--- a/f\n+++ b/f\n@@ -x +1 @@\n+a\n", &[]);
        assert_eq!(
            run(lo(json!({})), &d).unwrap_err(),
            "patch line 3: malformed hunk header"
        );
        let d = diff(&patch("@@ -1 +1 @@\n-a\n+b\n"), &["ok\n", "@@ -1 +1\n"]);
        assert_eq!(
            run(lo(json!({})), &d).unwrap_err(),
            "recent_accepted[1] line 1: malformed hunk header"
        );
    }

    #[test]
    fn multiset_jaccard_is_exact() {
        let a = changed_lines("a", "@@ -1,2 +1,2 @@\n-x\n-y\n+z\n+z\n").unwrap();
        let b = changed_lines("b", "@@ -1 +1,3 @@\n-x\n+z\n+w\n+w\n").unwrap();
        // a = {-x, -y, +z×2}, b = {-x, +z, +w×2}: min sum 2 (-x, +z), max sum 6.
        assert_eq!(similarity(&a, &b), 2.0 / 6.0);
        assert_eq!(similarity(&a, &a), 1.0);
        assert_eq!(similarity(&a, &ChangedLines::new()), 0.0);
        assert_eq!(similarity(&ChangedLines::new(), &ChangedLines::new()), 0.0);
    }

    #[test]
    fn nothing_to_compare_is_wholly_novel() {
        let d = diff(&patch("@@ -1 +1 @@\n-a\n+b\n"), &[]);
        assert_eq!(run(lo(json!({})), &d), Ok((1.0, true)));
    }

    #[test]
    fn an_exact_repeat_is_rejected() {
        let p = patch("@@ -1 +1 @@\n-a\n+b\n");
        // The same lines in another file and hunk position still match.
        let other = "--- a/q\n+++ b/q\n@@ -9 +9 @@\n-a\n+b\n";
        let d = diff(&p, &["@@ -1 +1 @@\n-c\n+d\n", other]);
        assert_eq!(run(lo(json!({})), &d), Ok((0.0, false)));
    }

    #[test]
    fn max_similarity_decides_against_threshold() {
        // Candidate {-a, +b, +c, +d}; recent {-a, +b, +c} → 3/4; {-a} → 1/4.
        let p = patch("@@ -1 +1,3 @@\n-a\n+b\n+c\n+d\n");
        let d = diff(&p, &["@@ -1 +1 @@\n-a\n", "@@ -1 +1,2 @@\n-a\n+b\n+c\n"]);
        assert_eq!(run(lo(json!({})), &d), Ok((0.25, true)));
        assert_eq!(run(lo(json!({"threshold": 0.75})), &d), Ok((0.25, false)));
        assert_eq!(run(lo(json!({"threshold": 0.7})), &d), Ok((0.25, false)));
        assert_eq!(run(lo(json!({"threshold": 0.8})), &d), Ok((0.25, true)));
    }

    #[test]
    fn only_the_window_is_compared() {
        let p = patch("@@ -1 +1 @@\n-a\n+b\n");
        let d = diff(&p, &["@@ -1 +1 @@\n-x\n+y\n", &p]);
        assert_eq!(run(lo(json!({"history_k": 1})), &d), Ok((1.0, true)));
        assert_eq!(run(lo(json!({"history_k": 2})), &d), Ok((0.0, false)));
    }

    #[test]
    fn an_empty_diff_is_rejected_with_novelty_zero() {
        for p in [
            String::new(),
            "diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n".to_string(),
            patch("@@ -1,2 +1,2 @@\n a\n b\n"),
        ] {
            let d = diff(&p, &[]);
            assert_eq!(run(lo(json!({})), &d), Ok((0.0, false)));
        }
        let (_, reason) = assess(&diff("", &[]), Measure::LineOverlap, 5, 0.9).unwrap();
        assert_eq!(
            reason,
            "rejected: the diff adds or removes no line (empty, or only binary, mode or rename changes)"
        );
    }

    #[test]
    fn reasons_name_the_closest_diff() {
        let p = patch("@@ -1 +1,3 @@\n-a\n+b\n+c\n+d\n");
        let d = diff(&p, &["@@ -1 +1,2 @@\n-a\n+b\n+c\n"]);
        assert_eq!(
            assess(&d, Measure::LineOverlap, 5, 0.5).unwrap().1,
            "rejected: max similarity 0.75 (recent_accepted[0]) >= threshold 0.5"
        );
        assert_eq!(
            assess(&d, Measure::LineOverlap, 5, 0.9).unwrap().1,
            "accepted: max similarity 0.75 (recent_accepted[0]) < threshold 0.9"
        );
    }

    #[test]
    fn schema_defaults_and_bounds() {
        let schema = <DiffSimilarity as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"measure": "sequence_ratio", "history_k": 8, "threshold": 0.98})
        );
        assert_eq!(
            Value::Object(schema.normalize(r#"{"threshold": 0}"#).unwrap()),
            json!({"measure": "sequence_ratio", "history_k": 8, "threshold": 0.0})
        );
        let bad = |raw: &str| schema.normalize(raw).unwrap_err().len();
        assert_eq!(bad(r#"{"threshold": 1.5}"#), 1);
        assert_eq!(bad(r#"{"history_k": 0}"#), 1);
        assert_eq!(bad(r#"{"history_k": 17}"#), 1);
        assert_eq!(bad(r#"{"measure": "jaccard"}"#), 1);
        assert_eq!(bad(r#"{"window": 5}"#), 1);
    }
}
