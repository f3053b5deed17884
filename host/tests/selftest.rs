//! `evolve selftest --trials 3 --json`, the real binary: every scenario of the
//! integrity campaign is present and every trial holds.

use super::cmd::evolve;
use serde_json::Value;

#[test]
fn the_campaign_holds_for_three_trials_of_every_scenario() {
    let out = evolve(["selftest", "--trials", "3", "--json"]).run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stderr}"));
    let rows = report["scenarios"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["scenario"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = evolve::selftest::scenarios::SCENARIOS
        .iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, expected, "every scenario runs, in order");
    for name in [
        "kill_during_mutation",
        "kill_during_evaluation",
        "kill_after_stamp",
        "evaluator_edit",
        "outside_surface",
        "protected_evidence",
        "forged_outcome",
        "escape_dotdot",
        "escape_symlink",
        "network",
        "runaway_cpu",
        "memory_bomb",
        "blocking_sleep",
        "stdout_flood",
        "malformed_result",
        "self_edited_gate",
        "bricking_self_edit",
        "forged_signature",
        "dropped_reordered_lines",
        "moved_tag",
        "agent_takes_key",
        "quota",
        "oversized_select_and_record",
    ] {
        assert!(names.contains(&name), "{name} is missing: {names:?}");
    }
    for r in rows {
        assert_eq!(r["trials"], 3, "{r:#}");
        assert_eq!(r["correct"], 3, "a trial broke:\n{r:#}\n{stderr}");
        assert!(!r["invariant"].as_str().unwrap().is_empty());
        assert!(r["median_seconds"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(report["ok"], true);
    assert!(out.status.success(), "{stderr}");
}

#[test]
fn bad_arguments_are_usage_errors() {
    let out = evolve(["selftest", "--scenario", "no_such_thing"]).run();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no selftest scenario named `no_such_thing`"),
        "{err}"
    );
    assert!(
        err.contains("kill_during_mutation"),
        "the hint lists them: {err}"
    );
    let out = evolve(["selftest", "--trials", "0"]).run();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_hostile_components_are_not_library_operators() {
    let out = evolve(["operator", "list"]).run();
    assert!(out.status.success());
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(
        !list.contains("selftest_mutate") && !list.contains("slow_gate"),
        "{list}"
    );
}
