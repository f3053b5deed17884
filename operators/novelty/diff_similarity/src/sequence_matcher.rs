//! The similarity ratio of Python's `difflib.SequenceMatcher(None, a, b).ratio()`,
//! written from its documented algorithm (Ratcliff/Obershelp "gestalt pattern
//! matching"), so that novelty numbers equal RSIHub's, which calls it on two diff texts.
//!
//! - Items are Unicode scalar values, as a Python `str` is a sequence of code points.
//! - No junk function (`isjunk=None`), and the *autojunk* heuristic on, as by default:
//!   when `b` has at least 200 items, an item occurring more than `len(b) / 100 + 1`
//!   times in `b` is *popular* and cannot start a match. A match found from other items
//!   is still extended over equal neighbours, popular or not, once to each side.
//! - The matching blocks: the longest common block of `a[alo..ahi]` and `b[blo..bhi]`
//!   (earliest in `a`, then earliest in `b`, among the longest), then the same on the
//!   two sides left of it and right of it, recursively.
//! - `ratio = 2·M / (len(a) + len(b))` with M the matched items, and 1.0 for two empty
//!   sequences.

use std::collections::HashMap;

/// Where each item of `b` occurs, without the popular items (see the module docs).
struct Index {
    positions: HashMap<char, Vec<usize>>,
}

impl Index {
    fn new(b: &[char]) -> Index {
        let mut positions: HashMap<char, Vec<usize>> = HashMap::new();
        for (j, &c) in b.iter().enumerate() {
            positions.entry(c).or_default().push(j);
        }
        if b.len() >= 200 {
            let limit = b.len() / 100 + 1;
            positions.retain(|_, js| js.len() <= limit);
        }
        Index { positions }
    }
}

/// The longest matching block of `a[alo..ahi]` and `b[blo..bhi]`: `(i, j, size)`.
fn longest_match(
    a: &[char],
    b: &[char],
    index: &Index,
    (alo, ahi, blo, bhi): (usize, usize, usize, usize),
) -> (usize, usize, usize) {
    let (mut besti, mut bestj, mut size) = (alo, blo, 0usize);
    // run[j] = length of the match ending at a[i - 1] and b[j] (for the previous i).
    let mut run: HashMap<usize, usize> = HashMap::new();
    for (i, c) in a.iter().enumerate().take(ahi).skip(alo) {
        let mut next: HashMap<usize, usize> = HashMap::new();
        for &j in index.positions.get(c).map(Vec::as_slice).unwrap_or(&[]) {
            if j < blo {
                continue;
            }
            if j >= bhi {
                break;
            }
            let k = j
                .checked_sub(1)
                .and_then(|p| run.get(&p))
                .copied()
                .unwrap_or(0)
                + 1;
            next.insert(j, k);
            if k > size {
                (besti, bestj, size) = (i + 1 - k, j + 1 - k, k);
            }
        }
        run = next;
    }
    // Extend over equal neighbours the index left out (popular items), even when no
    // match was found at all (size 0 at (alo, blo)).
    while besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1] {
        besti -= 1;
        bestj -= 1;
        size += 1;
    }
    while besti + size < ahi && bestj + size < bhi && a[besti + size] == b[bestj + size] {
        size += 1;
    }
    (besti, bestj, size)
}

/// The number of items in the matching blocks of `a` and `b`.
pub fn matches(a: &[char], b: &[char]) -> usize {
    let index = Index::new(b);
    let mut total = 0;
    let mut pending = vec![(0, a.len(), 0, b.len())];
    while let Some(range) = pending.pop() {
        let (alo, ahi, blo, bhi) = range;
        let (i, j, k) = longest_match(a, b, &index, range);
        if k == 0 {
            continue;
        }
        total += k;
        if alo < i && blo < j {
            pending.push((alo, i, blo, j));
        }
        if i + k < ahi && j + k < bhi {
            pending.push((i + k, ahi, j + k, bhi));
        }
    }
    total
}

/// `difflib.SequenceMatcher(None, a, b).ratio()`.
pub fn ratio(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let length = a.len() + b.len();
    if length == 0 {
        return 1.0;
    }
    2.0 * matches(&a, &b) as f64 / length as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use evolve_operator_sdk::serde_json::{self, Value};

    /// Every pair of the `sequence_matcher` table, computed with Python's difflib by
    /// tests/rsihub_golden.py: short strings, strings around and past the 200-item
    /// autojunk length over small alphabets (so popular items exist and matches must
    /// extend across them), Unicode, and the diff texts of the novelty table.
    #[test]
    fn equals_python_difflib() {
        let table: Value =
            serde_json::from_str(include_str!("../tests/rsihub_golden.json")).unwrap();
        let rows = table["sequence_matcher"].as_array().unwrap();
        assert!(rows.len() >= 20);
        let mut autojunked = 0;
        for r in rows {
            let (a, b) = (r["a"].as_str().unwrap(), r["b"].as_str().unwrap());
            let (ca, cb): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
            assert_eq!(
                matches(&ca, &cb) as u64,
                r["matches"].as_u64().unwrap(),
                "a {a:?} b {b:?}"
            );
            let expected = r["ratio"].as_f64().unwrap();
            assert!((ratio(a, b) - expected).abs() < 1e-15, "a {a:?} b {b:?}");
            autojunked += usize::from(cb.len() >= 200);
        }
        assert!(autojunked >= 8, "the table must exercise autojunk");
    }

    #[test]
    fn documented_examples() {
        // difflib's documentation: ratio of "abcd" and "bcde" is 0.75.
        assert_eq!(ratio("abcd", "bcde"), 0.75);
        assert_eq!(ratio("", ""), 1.0);
        assert_eq!(ratio("", "abc"), 0.0);
        assert_eq!(ratio("abc", "abc"), 1.0);
    }

    #[test]
    fn popular_items_only_extend_matches() {
        // 300 'x' in b: 'x' is popular (> 4 occurrences), so no match can start on it;
        // with no other item in common, the only match is the extension from (0, 0).
        let a = "x".repeat(250);
        let b = "x".repeat(300);
        assert_eq!(ratio(&a, &b), 2.0 * 250.0 / 550.0);
        // A leading 'y' in a: the extension from (0, 0) fails at once, and the trailing
        // 'y' of b matches only itself.
        let a = format!("y{}", "x".repeat(250));
        let b = format!("{}y", "x".repeat(300));
        assert_eq!(ratio(&a, &b), 2.0 / 552.0);
        // Under 200 items there is no autojunk: the x-run matches.
        let b = format!("{}y", "x".repeat(150));
        assert_eq!(ratio(&a, &b), 2.0 * 150.0 / (251.0 + 151.0));
    }
}
