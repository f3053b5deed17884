//! Building, ordering and rendering of field paths, and number rendering for messages.

use std::cmp::Ordering;

/// `base.key`, or just `key` at the top.
pub(crate) fn key(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_owned()
    } else {
        format!("{base}.{key}")
    }
}

/// `base[i]`.
pub(crate) fn index(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

/// One step of a path, for ordering. Indices sort before keys only to make the order
/// total; both cannot occur under the same parent.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Seg<'a> {
    Index(u64),
    Key(&'a str),
}

/// Splits `a.b[2].c` into `a`, `b`, 2, `c`. Anything that does not parse as an index
/// (e.g. the `[]` of schema paths) is kept as a key, so the order stays total.
fn segments(path: &str) -> Vec<Seg<'_>> {
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').map_or(after.len(), |e| e + 1);
            let (inside, tail) = after.split_at(end);
            let inside = inside.strip_suffix(']').unwrap_or(inside);
            out.push(inside.parse().map_or(Seg::Key(inside), Seg::Index));
            rest = tail;
        } else {
            let rest_no_dot = rest.strip_prefix('.').unwrap_or(rest);
            let end = rest_no_dot.find(['.', '[']).unwrap_or(rest_no_dot.len());
            let (name, tail) = rest_no_dot.split_at(end);
            out.push(Seg::Key(name));
            rest = tail;
        }
    }
    out
}

/// Path order: segment by segment, indices numerically, so `a[2]` < `a[10]` and a
/// field comes right before its own children.
pub(crate) fn compare(a: &str, b: &str) -> Ordering {
    segments(a).cmp(&segments(b))
}

/// Renders a bound for a message: `1` rather than `1.0`, `0.5` as is.
pub(crate) fn num(x: f64) -> String {
    // Integral values within the exactly-representable range print without a fraction.
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<&str>) -> Vec<&str> {
        v.sort_by(|a, b| compare(a, b));
        v
    }

    #[test]
    fn builds_paths() {
        assert_eq!(key("", "a"), "a");
        assert_eq!(key("a", "b"), "a.b");
        assert_eq!(index("a", 2), "a[2]");
        assert_eq!(key(&index("a", 2), "name"), "a[2].name");
        assert_eq!(index("", 0), "[0]");
    }

    #[test]
    fn splits_segments() {
        assert_eq!(
            segments("a.b[2].c"),
            vec![Seg::Key("a"), Seg::Key("b"), Seg::Index(2), Seg::Key("c")]
        );
        assert_eq!(segments(""), vec![]);
        assert_eq!(segments("[0][1]"), vec![Seg::Index(0), Seg::Index(1)]);
        assert_eq!(segments("tags[]"), vec![Seg::Key("tags"), Seg::Key("")]);
        assert_eq!(segments("a[x"), vec![Seg::Key("a"), Seg::Key("x")]);
    }

    #[test]
    fn orders_indices_numerically_and_parents_first() {
        assert_eq!(
            sorted(vec!["a[10]", "b", "a[2].x", "a", "", "a[2]", "a.z", "ab"]),
            vec!["", "a", "a[2]", "a[2].x", "a[10]", "a.z", "ab", "b"]
        );
    }

    #[test]
    fn renders_numbers() {
        assert_eq!(num(1.0), "1");
        assert_eq!(num(-3.0), "-3");
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num(1e20), "100000000000000000000");
    }
}
