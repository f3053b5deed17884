//! The shipped accept_all script against the compiled novelty/accept_all.

use super::*;
use op_novelty_accept_all::AcceptAll;

const SCRIPT: &str = include_str!("../scripts/accept_all.rhai");
const PATH: &str = "operators/novelty/accept_all.rhai";

fn diff(patch: &str, recent: &[&str]) -> CandidateDiff {
    CandidateDiff {
        changed_paths: vec!["target/a.py".into()],
        patch: patch.into(),
        recent_accepted: recent.iter().map(|s| s.to_string()).collect(),
    }
}

#[test]
fn verdicts_equal_the_compiled_novelty() {
    let patch = "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n";
    for d in [diff(patch, &[]), diff(patch, &[patch]), diff("", &[])] {
        let c = AcceptAll::assess(&Context::for_test(json!({})), &d).unwrap();
        let ctx = evolve_script::testing::context(PATH, SCRIPT, json!({}), 0);
        let s = NoveltyScript::assess(&ctx, &d).unwrap();
        assert_eq!((s.novelty, s.accept), (c.novelty, c.accept));
    }
}

#[test]
fn a_script_reads_the_diff() {
    let text = "fn assess(ctx, diff) {\n  let dup = diff.recent_accepted.contains(diff.patch);\n  #{novelty: if dup { 0.0 } else { 1 }, accept: !dup}\n}\n";
    let ctx = evolve_script::testing::context(PATH, text, json!({}), 0);
    let v = NoveltyScript::assess(&ctx, &diff("p", &["p"])).unwrap();
    assert_eq!((v.novelty, v.accept), (0.0, false));
    let v = NoveltyScript::assess(&ctx, &diff("p", &["q"])).unwrap();
    assert_eq!((v.novelty, v.accept), (1.0, true));
}
