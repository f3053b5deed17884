//! The recipe parser: YAML text → shape check → normalized recipe.

use evolve::recipe::check_shape;

/// Parse `data` as a recipe. Invariant: a recipe that checks clean normalizes to a
/// fixed point, because a workspace freezes the normalized form and re-checks it on
/// every later command (`workspace::open`).
pub fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let checked = check_shape(text);
    let Some(normalized) = checked.normalized else {
        assert!(
            !checked.violations.is_empty(),
            "a recipe without a normalized form must have a violation"
        );
        return;
    };
    // JSON is YAML, so the normalized value re-checks as text.
    let frozen = serde_json::to_string(&normalized).expect("a JSON value serializes");
    let again = check_shape(&frozen);
    assert!(
        again.violations.is_empty(),
        "the normalized recipe {frozen} no longer checks: {:?}",
        again.violations
    );
    assert_eq!(
        again.normalized.as_ref(),
        Some(&normalized),
        "normalizing twice changed the recipe"
    );
}
