//! novelty/diff_similarity: reject a candidate whose change repeats a recently accepted
//! one, comparing the lines the two unified diffs add and remove.
//!
//! 1. A diff's *changed lines* are the lines inside its hunks that start with `+` or
//!    `-`, each kept as a (sign, text after the sign) pair. Hunks are delimited by their
//!    `@@ -a,b +c,d @@` headers and the line counts they declare, so file headers
//!    (`diff --git`, `index`, `--- a/…`, `+++ b/…`, `Binary files … differ`, the host's
//!    `[diff truncated …]` marker) and context lines (` `) never count, while a removed
//!    line that itself starts with `--` does. A line that cannot belong to the current
//!    hunk (an unknown prefix, or more `+`/`-` lines than the header declares) ends it.
//!    A `\ No newline at end of file` line is ignored.
//! 2. The similarity of two diffs is the Jaccard similarity of their changed lines as
//!    multisets: Σ min(count_a, count_b) / Σ max(count_a, count_b) over all
//!    (sign, text) pairs. Identical changes score 1; changes with no line in common 0.
//!    File names do not take part: the same line added to two files matches.
//! 3. The candidate is compared with the first `window` entries of `recent_accepted`
//!    (newest first; the host sends at most five). `novelty = 1 − max similarity`
//!    (1.0 when there is nothing to compare), and the candidate is accepted iff the max
//!    similarity is below `threshold`.
//! 4. A candidate diff with no changed line at all (empty, or only binary, mode or
//!    rename changes) gets novelty 0 and is rejected.
//!
//! The verdict has no reason field, so the operator explains each verdict in one line on
//! stderr, which the host keeps in the stage's log.

use std::collections::BTreeMap;

use evolve_operator_sdk::prelude::*;

pub struct DiffSimilarity;

const WINDOW: i64 = 5;
const THRESHOLD: f64 = 0.9;

impl Operator for DiffSimilarity {
    const NAME: &'static str = "diff_similarity";
    const SUMMARY: &'static str = "Reject a change whose added/removed lines repeat a recently accepted diff (multiset Jaccard >= threshold) or that changes no line.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "window",
                config::integer()
                    .default(json!(WINDOW))
                    .minimum(1.0)
                    .maximum(100.0)
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
                        "Reject when the similarity to any compared diff reaches this value (0 < threshold <= 1)",
                    ),
            )
            .refine(positive_threshold)
    }
}

/// `minimum` is inclusive; a threshold of 0 would reject everything.
fn positive_threshold(cfg: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    match cfg.get("threshold").and_then(Value::as_f64) {
        Some(t) if t <= 0.0 => Err(vec![Violation::new("threshold", "must be > 0")]),
        _ => Ok(()),
    }
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
    window: usize,
    threshold: f64,
) -> Result<(NoveltyVerdict, String), String> {
    let mine = changed_lines("patch", &diff.patch)?;
    if mine.is_empty() {
        return Ok((
            NoveltyVerdict {
                novelty: 0.0,
                accept: false,
            },
            "rejected: the diff adds or removes no line (empty, or only binary, mode or rename changes)"
                .to_string(),
        ));
    }
    let mut best: Option<(usize, f64)> = None;
    for (i, past) in diff.recent_accepted.iter().take(window).enumerate() {
        let theirs = changed_lines(&format!("recent_accepted[{i}]"), past)?;
        let s = similarity(&mine, &theirs);
        if best.is_none_or(|(_, b)| s > b) {
            best = Some((i, s));
        }
    }
    let Some((i, max)) = best else {
        return Ok((
            NoveltyVerdict {
                novelty: 1.0,
                accept: true,
            },
            "accepted: no recently accepted diff to compare with".to_string(),
        ));
    };
    let accept = max < threshold;
    let reason = format!(
        "{}: max similarity {max} (recent_accepted[{i}]) {} threshold {threshold}",
        if accept { "accepted" } else { "rejected" },
        if accept { "<" } else { ">=" },
    );
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
        let window = ctx.i64("window").unwrap_or(WINDOW).max(1) as usize;
        let threshold = ctx.f64("threshold").unwrap_or(THRESHOLD);
        let (verdict, reason) = assess(diff, window, threshold)?;
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
            run(json!({}), &d).unwrap_err(),
            "patch line 3: malformed hunk header"
        );
        let d = diff(&patch("@@ -1 +1 @@\n-a\n+b\n"), &["ok\n", "@@ -1 +1\n"]);
        assert_eq!(
            run(json!({}), &d).unwrap_err(),
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
        assert_eq!(run(json!({}), &d), Ok((1.0, true)));
    }

    #[test]
    fn an_exact_repeat_is_rejected() {
        let p = patch("@@ -1 +1 @@\n-a\n+b\n");
        // The same lines in another file and hunk position still match.
        let other = "--- a/q\n+++ b/q\n@@ -9 +9 @@\n-a\n+b\n";
        let d = diff(&p, &["@@ -1 +1 @@\n-c\n+d\n", other]);
        assert_eq!(run(json!({}), &d), Ok((0.0, false)));
    }

    #[test]
    fn max_similarity_decides_against_threshold() {
        // Candidate {-a, +b, +c, +d}; recent {-a, +b, +c} → 3/4; {-a} → 1/4.
        let p = patch("@@ -1 +1,3 @@\n-a\n+b\n+c\n+d\n");
        let d = diff(&p, &["@@ -1 +1 @@\n-a\n", "@@ -1 +1,2 @@\n-a\n+b\n+c\n"]);
        assert_eq!(run(json!({}), &d), Ok((0.25, true)));
        assert_eq!(run(json!({"threshold": 0.75}), &d), Ok((0.25, false)));
        assert_eq!(run(json!({"threshold": 0.7}), &d), Ok((0.25, false)));
        assert_eq!(run(json!({"threshold": 0.8}), &d), Ok((0.25, true)));
    }

    #[test]
    fn only_the_window_is_compared() {
        let p = patch("@@ -1 +1 @@\n-a\n+b\n");
        let d = diff(&p, &["@@ -1 +1 @@\n-x\n+y\n", &p]);
        assert_eq!(run(json!({"window": 1}), &d), Ok((1.0, true)));
        assert_eq!(run(json!({"window": 2}), &d), Ok((0.0, false)));
    }

    #[test]
    fn an_empty_diff_is_rejected_with_novelty_zero() {
        for p in [
            String::new(),
            "diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n".to_string(),
            patch("@@ -1,2 +1,2 @@\n a\n b\n"),
        ] {
            let d = diff(&p, &[]);
            assert_eq!(run(json!({}), &d), Ok((0.0, false)));
        }
        let (_, reason) = assess(&diff("", &[]), 5, 0.9).unwrap();
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
            assess(&d, 5, 0.5).unwrap().1,
            "rejected: max similarity 0.75 (recent_accepted[0]) >= threshold 0.5"
        );
        assert_eq!(
            assess(&d, 5, 0.9).unwrap().1,
            "accepted: max similarity 0.75 (recent_accepted[0]) < threshold 0.9"
        );
    }

    #[test]
    fn schema_defaults_and_bounds() {
        let schema = <DiffSimilarity as Operator>::config().build().unwrap();
        assert_eq!(
            Value::Object(schema.normalize("{}").unwrap()),
            json!({"window": 5, "threshold": 0.9})
        );
        assert_eq!(
            Value::Object(schema.normalize(r#"{"threshold": 1}"#).unwrap()),
            json!({"window": 5, "threshold": 1.0})
        );
        let bad = |raw: &str| {
            schema
                .normalize(raw)
                .unwrap_err()
                .into_iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(bad(r#"{"threshold": 0}"#), ["- threshold: must be > 0"]);
        assert_eq!(bad(r#"{"threshold": 1.5}"#).len(), 1);
        assert_eq!(bad(r#"{"window": 0}"#).len(), 1);
        assert_eq!(bad(r#"{"history_k": 8}"#).len(), 1);
    }
}
