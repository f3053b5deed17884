//! Golden tests of the RRSI rules: every rule, its boundaries, and every invalid input.

use super::*;
use crate::testing::{row, view};
use crate::types::{ArchiveRow, GenerationStatus, Verdict};

fn p() -> Params {
    Params::default()
}

fn inc(score: f64, cost: Option<f64>) -> Measured {
    Measured { score, cost }
}

fn cand(score: f64, cost: Option<f64>, novelty: u32) -> Candidate {
    Candidate {
        score,
        cost,
        novelty,
    }
}

fn discarded(id: &str, generation: u32, score: f64) -> ArchiveRow {
    ArchiveRow {
        verdict: Some(Verdict::Discard),
        ..row(id, generation, Some(score), false)
    }
}

fn tagged(
    id: &str,
    parent: &str,
    generation: u32,
    score: f64,
    keep: bool,
    tags: &[&str],
) -> ArchiveRow {
    ArchiveRow {
        parent: Some(parent.into()),
        verdict: Some(if keep {
            Verdict::Keep
        } else {
            Verdict::Discard
        }),
        annotations: serde_json::json!({ANNOTATION: tags}).to_string(),
        ..row(id, generation, Some(score), keep)
    }
}

// ---- the floor ------------------------------------------------------------------

#[test]
fn s_star_is_the_best_kept_certified_score() {
    let mut v = view(vec![
        row("0", 0, Some(0.3), true),
        row("1", 1, Some(0.5), true),
    ]);
    assert_eq!(best_certified(&v), Ok(Some(0.5)));
    // A discarded or undecided child never raises it.
    v.rows.push(discarded("2", 2, 0.9));
    v.rows.push(ArchiveRow {
        verdict: None,
        status: GenerationStatus::PendingGate,
        ..row("3", 3, Some(0.95), false)
    });
    assert_eq!(best_certified(&v), Ok(Some(0.5)));
    // Monotone: appending a lower kept row does not lower it.
    v.rows.push(row("4", 4, Some(0.4), true));
    assert_eq!(best_certified(&v), Ok(Some(0.5)));
    assert_eq!(best_certified_until(&v, Some(0)), Ok(Some(0.3)));
    assert_eq!(best_certified(&view(vec![])), Ok(None));
}

#[test]
fn s_star_refuses_a_non_finite_score() {
    let v = view(vec![row("0", 0, Some(f64::NAN), true)]);
    assert_eq!(
        best_certified(&v).unwrap_err().to_string(),
        "score of generation 0 must be a finite number"
    );
}

#[test]
fn floor_admits_at_and_above_s_star_minus_delta_only() {
    let params = Params {
        noise_band: 0.05,
        ..p()
    };
    // Incumbent 0.6, S* 0.7: 0.65 is exactly on the floor, 0.64 below it.
    let on = admit(&params, Some(0.7), &inc(0.6, None), &cand(0.65, None, 0)).unwrap();
    assert!(on.floor_ok && on.admissible);
    assert_eq!(on.floor, Some(0.7 - 0.05));
    let below = admit(&params, Some(0.7), &inc(0.6, None), &cand(0.64, None, 0)).unwrap();
    assert!(!below.floor_ok && !below.admissible);
    // Below the floor even though the cost rule alone would accept it.
    assert!(below.cost_ok);
    // No certified best yet: no floor.
    let none = admit(&p(), None, &inc(0.6, None), &cand(0.7, None, 0)).unwrap();
    assert!(none.floor_ok && none.floor.is_none());
}

// ---- the cost rule --------------------------------------------------------------

#[test]
fn improvement_branch_bounds_the_cost_increase() {
    let params = Params {
        beta0: 0.01,
        beta1: 0.5,
        ..p()
    };
    // ΔS = 0.2 > δ = 0: ΔC must be <= 0.01 + 0.5·0.2 = 0.11.
    let ok = admit(
        &params,
        Some(0.5),
        &inc(0.5, Some(1.0)),
        &cand(0.7, Some(1.1), 0),
    )
    .unwrap();
    assert!(matches!(ok.branch, Branch::Improvement { limit } if (limit - 0.11).abs() < 1e-12));
    assert!(ok.cost_ok && ok.admissible && !ok.cost_missing);
    let dear = admit(
        &params,
        Some(0.5),
        &inc(0.5, Some(1.0)),
        &cand(0.7, Some(1.2), 0),
    )
    .unwrap();
    assert!(!dear.cost_ok && !dear.admissible);
    assert_eq!(
        dear.reason(),
        "floor ok (>= S*-δ = 0.500000); ΔS +0.200000 > δ: ΔC +0.200000 > β0+β1·ΔS = 0.110000"
    );
}

#[test]
fn tradeoff_branch_weighs_score_cost_and_novelty() {
    // A tie (ΔS = 0 <= δ) that saves money is admitted.
    let cheaper = admit(
        &p(),
        Some(0.5),
        &inc(0.5, Some(1.0)),
        &cand(0.5, Some(0.9), 0),
    )
    .unwrap();
    assert!(matches!(cheaper.branch, Branch::Tradeoff { value } if (value - 0.1).abs() < 1e-12));
    assert!(cheaper.admissible);
    // A tie at the same cost and without novelty is not (the value must be > 0).
    let same = admit(
        &p(),
        Some(0.5),
        &inc(0.5, Some(1.0)),
        &cand(0.5, Some(1.0), 0),
    )
    .unwrap();
    assert_eq!(same.branch, Branch::Tradeoff { value: 0.0 });
    assert!(!same.admissible);
    // The same tie touching a never-accepted component is: 0.01·1 > 0.
    let novel = admit(
        &p(),
        Some(0.5),
        &inc(0.5, Some(1.0)),
        &cand(0.5, Some(1.0), 1),
    )
    .unwrap();
    assert!(novel.admissible);
    assert_eq!(
        novel.reason(),
        "floor ok (>= S*-δ = 0.500000); ΔS +0.000000 <= δ: w_s·ΔS − w_c·ΔC + w_n·novelty = +0.010000 > 0 (ΔC +0.000000, novelty 1)"
    );
}

#[test]
fn a_gain_inside_the_noise_band_takes_the_tradeoff_branch() {
    let params = Params {
        noise_band: 0.1,
        ..p()
    };
    // ΔS = 0.1 = δ: not an improvement, so the tradeoff decides (0.1 − 0.2 < 0).
    let a = admit(
        &params,
        Some(0.5),
        &inc(0.5, Some(0.1)),
        &cand(0.6, Some(0.3), 0),
    )
    .unwrap();
    assert!(matches!(a.branch, Branch::Tradeoff { .. }) && !a.admissible);
}

#[test]
fn missing_cost_telemetry_counts_as_zero_and_is_recorded() {
    // A cost of 0 is missing telemetry too ("dC = 0 if either side is falsy").
    for (ci, cc) in [
        (None, Some(5.0)),
        (Some(5.0), None),
        (None, None),
        (Some(0.0), Some(5.0)),
        (Some(5.0), Some(0.0)),
        (Some(0.0), Some(0.0)),
    ] {
        let a = admit(&p(), Some(0.5), &inc(0.5, ci), &cand(0.6, cc, 0)).unwrap();
        assert!(a.cost_missing && a.delta_c == 0.0 && a.admissible);
        assert!(
            a.reason()
                .ends_with("; cost telemetry missing, ΔC taken as 0")
        );
    }
}

// ---- choose ---------------------------------------------------------------------

#[test]
fn choose_takes_the_best_admissible_and_the_first_on_ties() {
    let c = [
        cand(0.6, None, 0),
        cand(0.8, None, 0),
        cand(0.8, None, 0),
        cand(0.9, Some(9.0), 0), // best score, but too expensive
    ];
    let got = choose(&p(), Some(0.5), &inc(0.5, Some(1.0)), &c).unwrap();
    assert_eq!(got.winner, Some(1));
    assert_eq!(got.admissions.len(), 4);
    assert!(!got.admissions[3].admissible);
}

#[test]
fn choose_keeps_the_incumbent_when_nothing_is_admissible() {
    let c = [cand(0.4, None, 0), cand(0.5, None, 0)];
    let got = choose(&p(), Some(0.5), &inc(0.5, None), &c).unwrap();
    assert_eq!(got.winner, None);
    assert!(got.admissions.iter().all(|a| !a.admissible));
    assert_eq!(
        choose(&p(), Some(0.5), &inc(0.5, None), &[])
            .unwrap()
            .winner,
        None
    );
}

#[test]
fn choose_names_the_invalid_candidate() {
    let c = [cand(0.6, None, 0), cand(0.7, Some(-1.0), 0)];
    assert_eq!(
        choose(&p(), None, &inc(0.5, None), &c)
            .unwrap_err()
            .to_string(),
        "candidate 1: candidate cost must be >= 0"
    );
}

// ---- invalid inputs of the rules ------------------------------------------------

fn admit_err(params: Params, s_star: Option<f64>, i: Measured, c: Candidate) -> String {
    admit(&params, s_star, &i, &c).unwrap_err().to_string()
}

#[test]
fn non_finite_inputs_are_refused() {
    let i = inc(0.5, None);
    assert_eq!(
        admit_err(p(), None, i, cand(f64::NAN, None, 0)),
        "candidate score must be a finite number"
    );
    assert_eq!(
        admit_err(p(), None, inc(f64::INFINITY, None), cand(0.5, None, 0)),
        "incumbent score must be a finite number"
    );
    assert_eq!(
        admit_err(p(), Some(f64::NAN), i, cand(0.5, None, 0)),
        "S* (best certified score) must be a finite number"
    );
    assert_eq!(
        admit_err(p(), None, i, cand(0.5, Some(f64::INFINITY), 0)),
        "candidate cost must be a finite number"
    );
    assert_eq!(
        admit_err(p(), None, inc(0.5, Some(f64::NAN)), cand(0.5, None, 0)),
        "incumbent cost must be a finite number"
    );
    let nan_beta = Params {
        beta1: f64::NAN,
        ..p()
    };
    assert_eq!(
        admit_err(nan_beta, None, i, cand(0.5, None, 0)),
        "beta1 must be a finite number"
    );
}

#[test]
fn negative_and_out_of_range_inputs_are_refused() {
    let i = inc(0.5, None);
    assert_eq!(
        admit_err(p(), None, i, cand(0.5, Some(-0.01), 0)),
        "candidate cost must be >= 0"
    );
    assert_eq!(
        admit_err(p(), None, inc(0.5, Some(-2.0)), cand(0.5, None, 0)),
        "incumbent cost must be >= 0"
    );
    for (name, params) in [
        (
            "noise_band",
            Params {
                noise_band: -0.1,
                ..p()
            },
        ),
        ("beta0", Params { beta0: -1.0, ..p() }),
        ("w_c", Params { w_c: -1.0, ..p() }),
    ] {
        assert_eq!(
            admit_err(params, None, i, cand(0.5, None, 0)),
            format!("{name} must be >= 0")
        );
    }
    assert_eq!(
        admit_err(p(), None, i, cand(0.5, None, 5)),
        "novelty must be an integer in 0..=4 (the structural components)"
    );
}

#[test]
fn overflowing_arithmetic_is_refused() {
    let huge = Params {
        beta0: f64::MAX,
        beta1: f64::MAX,
        ..p()
    };
    assert_eq!(
        admit_err(huge, None, inc(0.0, None), cand(1.0, None, 0)),
        "β0 + β1·ΔS overflows (the inputs are too large)"
    );
    let heavy = Params {
        w_c: f64::MAX,
        ..p()
    };
    assert_eq!(
        admit_err(heavy, None, inc(0.0, Some(1.0)), cand(0.0, Some(10.0), 0)),
        "w_c·ΔC overflows (the inputs are too large)"
    );
}

#[test]
fn scores_outside_the_unit_interval_are_refused() {
    // Issue 31's vectors: a candidate at 1.2, an incumbent at −0.1.
    assert_eq!(
        admit_err(p(), None, inc(0.5, None), cand(1.2, None, 0)),
        "candidate score must be a score in [0, 1], not 1.2"
    );
    assert_eq!(
        admit_err(p(), None, inc(-0.1, None), cand(0.5, None, 0)),
        "incumbent score must be a score in [0, 1], not -0.1"
    );
    assert_eq!(
        admit_err(p(), Some(1.5), inc(0.5, None), cand(0.5, None, 0)),
        "S* (best certified score) must be a score in [0, 1], not 1.5"
    );
    // The bounds themselves are scores.
    assert!(admit(&p(), Some(1.0), &inc(0.0, None), &cand(1.0, None, 0)).is_ok());
}

// ---- the edit budget ------------------------------------------------------------

fn sched(b_min: f64, b_max: f64, horizon: i64) -> Schedule {
    Schedule {
        b_min,
        b_max,
        horizon,
    }
}

#[test]
fn schedule_endpoints_and_clamping() {
    let s = sched(1.0, 8.0, 10);
    assert_eq!(edit_budget(0, &s), Ok(8));
    assert_eq!(edit_budget(10, &s), Ok(1));
    assert_eq!(edit_budget(-3, &s), Ok(8));
    assert_eq!(edit_budget(99, &s), Ok(1));
    assert_eq!(edit_budget(5, &s), Ok(5)); // 1 + 7·½ = 4.5 → 5
    assert_eq!(edit_budget(0, &sched(2.0, 3.0, 4)), Ok(3));
    assert_eq!(edit_budget(4, &sched(2.0, 3.0, 4)), Ok(2));
}

#[test]
fn schedule_anneals_monotonically() {
    let s = sched(2.0, 40.0, 25);
    let b: Vec<u64> = (0..=25).map(|t| edit_budget(t, &s).unwrap()).collect();
    assert!(b.windows(2).all(|w| w[0] >= w[1]), "{b:?}");
    assert_eq!((b[0], b[25]), (40, 2));
}

#[test]
fn schedule_rounds_to_nine_decimals_before_the_ceiling() {
    // 1 + 4·½(1 + cos(2π/3)) is 2.0000000000000004 in floating point: 2, not 3.
    assert_eq!(edit_budget(2, &sched(1.0, 5.0, 3)), Ok(2));
    // Issue 31's huge-bound vectors: `(v·1e9).round()/1e9` gave one too many at
    // T = 40, t = 1, and one below v at T = 31, t = 12 (v = 673652626422411.1).
    let big = 1e15 + 1.0;
    assert_eq!(
        edit_budget(1, &sched(1.0, big, 40)),
        Ok(998_458_666_866_565)
    );
    assert_eq!(
        edit_budget(12, &sched(1.0, big, 31)),
        Ok(673_652_626_422_412)
    );
}

#[test]
fn the_guard_rounds_half_to_even_at_nine_places() {
    // Exact ties at the 10th decimal: 1/1024 = 0.0009765625 and 3/1024 = 0.0029296875
    // are exact in binary; half to even keeps the 2 and lifts the 7 (Python's round).
    assert_eq!(round9(1.0 / 1024.0).unwrap(), 0.000976562);
    assert_eq!(round9(3.0 / 1024.0).unwrap(), 0.002929688);
    assert_eq!(round9(2.5).unwrap(), 2.5);
    // 1.0000000005 is 1.00000000050000004… in binary: not a tie, so up.
    assert_eq!(round9(1.0000000005).unwrap(), 1.000000001);
    assert_eq!(round9(2.0000000000000004).unwrap(), 2.0);
    assert_eq!(round9(MAX_BOUND).unwrap(), MAX_BOUND);
}

#[test]
fn degenerate_horizon_gives_b_max() {
    for horizon in [0, -5] {
        assert_eq!(edit_budget(7, &sched(1.0, 7.0, horizon)), Ok(7));
    }
}

#[test]
fn schedule_rejects_bad_bounds() {
    let err = |s: Schedule| edit_budget(1, &s).unwrap_err().to_string();
    assert_eq!(err(sched(0.0, 3.0, 5)), "b_min must be > 0");
    assert_eq!(err(sched(1.0, -3.0, 5)), "b_max must be > 0");
    assert_eq!(
        err(sched(f64::NAN, 3.0, 5)),
        "b_min must be a finite number"
    );
    assert_eq!(
        err(sched(1.0, f64::INFINITY, 5)),
        "b_max must be a finite number"
    );
    assert_eq!(
        err(sched(4.0, 3.0, 5)),
        "edit budget bounds are inverted: b_min 4 must be <= b_max 3"
    );
    // Issue 31: non-integer bounds are refused, and so are bounds too large to be
    // represented exactly (10^20 used to overflow).
    assert_eq!(
        err(sched(1.5, 3.0, 5)),
        "b_min must be an integer in 1..=2^53 (9007199254740992), not 1.5"
    );
    assert_eq!(
        err(sched(1.0, 4.5, 5)),
        "b_max must be an integer in 1..=2^53 (9007199254740992), not 4.5"
    );
    for b_max in [1e20, 1e300, MAX_BOUND + 2.0] {
        for horizon in [0, 5] {
            assert_eq!(
                err(sched(1.0, b_max, horizon)),
                format!("b_max must be an integer in 1..=2^53 (9007199254740992), not {b_max}")
            );
        }
    }
    assert_eq!(
        edit_budget(0, &sched(1.0, MAX_BOUND, 5)),
        Ok(9_007_199_254_740_992)
    );
}

// ---- the leak screen ------------------------------------------------------------

#[test]
fn leaks_are_whole_tokens_named_by_index() {
    let protected = vec![
        "13".to_string(),
        "predict-05".to_string(),
        "absent".to_string(),
    ];
    let text = "{\"slope\": 2,\n \"answers\": {\"predict-05\": 13}}\n";
    assert_eq!(
        find_leaks("target/params.json", text, &protected),
        vec![
            Leak {
                path: "target/params.json".into(),
                which: 0,
                line: 2
            },
            Leak {
                path: "target/params.json".into(),
                which: 1,
                line: 2
            },
        ]
    );
    // Not a token of its own: 13 inside 113 or 13.5 with a letter suffix.
    assert!(!contains_token("x = 113", "13"));
    assert!(!contains_token("x = 13a", "13"));
    assert!(contains_token("x = 1.13", "13")); // `.` is a boundary
    assert!(find_leaks("f", "nothing here", &protected).is_empty());
}

#[test]
fn blank_protected_strings_are_refused() {
    assert_eq!(
        check_protected(&["ok".into(), "  ".into()])
            .unwrap_err()
            .to_string(),
        "protected string 1 must be a string with a non-blank character"
    );
    assert_eq!(check_protected(&[]), Ok(()));
}

// ---- component classification ---------------------------------------------------

fn patch(path: &str, body: &str) -> String {
    format!("diff --git a/{path} b/{path}\nindex 1..2 100644\n--- a/{path}\n+++ b/{path}\n{body}")
}

fn layout(entries: &[(&str, Component)]) -> Vec<(String, Component)> {
    entries.iter().map(|(g, c)| (g.to_string(), *c)).collect()
}

#[test]
fn a_literal_only_diff_is_a_prompt_edit_whatever_its_tag() {
    let p = patch(
        "target/tools/search.json",
        "@@ -1,3 +1,3 @@\n {\n-  \"description\": \"Search the web\",\n+  \"description\": \"Search the web carefully\",\n }\n",
    );
    let claimed = layout(&[("target/tools/**", Component::ClientTool)]);
    assert_eq!(
        classify(&p, &claimed),
        Ok(vec![("target/tools/search.json".into(), Component::Prompt)])
    );
    let comments = patch(
        "target/agent.py",
        "@@ -1 +1,2 @@\n # plan first\n+# then act; use the memory tool\n",
    );
    assert_eq!(classify(&comments, &[]).unwrap()[0].1, Component::Prompt);
}

#[test]
fn a_claim_is_kept_only_with_a_signal() {
    let claimed = layout(&[("target/config.py", Component::Memory)]);
    let signal = patch(
        "target/config.py",
        "@@ -1 +1 @@\n-MEMORY_SLOTS = 4\n+MEMORY_SLOTS = 8\n",
    );
    assert_eq!(classify(&signal, &claimed).unwrap()[0].1, Component::Memory);
    // No memory signal: reclassified by its lines (a tool) or, without any, Other.
    let tool = patch(
        "target/config.py",
        "@@ -1 +1 @@\n-use_tool = False\n+use_tool = True\n",
    );
    assert_eq!(
        classify(&tool, &claimed).unwrap()[0].1,
        Component::ClientTool
    );
    let plain = patch("target/config.py", "@@ -1 +1 @@\n-slope = 1\n+slope = 2\n");
    assert_eq!(classify(&plain, &claimed).unwrap()[0].1, Component::Other);
}

#[test]
fn unclaimed_files_are_classified_by_path_then_lines() {
    let skill = patch(
        "target/skills/retry/SKILL.md",
        "@@ -1 +1,2 @@\n # Retry\n+Wait before the second attempt.\n",
    );
    assert_eq!(classify(&skill, &[]).unwrap()[0].1, Component::Skill);
    let sub = patch(
        "target/agent.toml",
        "@@ -1 +1,2 @@\n component = 1\n+subagents = [\"planner\"]\n",
    );
    assert_eq!(classify(&sub, &[]).unwrap()[0].1, Component::Subagent);
    let prose = patch(
        "target/prompt.md",
        "@@ -1 +1 @@\n-Be brief.\n+Be brief and exact.\n",
    );
    assert_eq!(classify(&prose, &[]).unwrap()[0].1, Component::Prompt);
    let numbers = patch(
        "target/params.json",
        "@@ -1,4 +1,4 @@\n {\n-  \"slope\": 1.0,\n+  \"slope\": 1.5,\n   \"intercept\": 0.0\n }\n",
    );
    assert_eq!(classify(&numbers, &[]).unwrap()[0].1, Component::Other);
}

#[test]
fn patch_parsing_follows_hunk_counts_and_files() {
    let text = format!(
        "{}{}{}",
        patch(
            "a.txt",
            "@@ -1,2 +1,2 @@\n--- x\n-keep\n+++ y\n+keep\n\\ No newline at end of file\n"
        ),
        "diff --git a/b.bin b/b.bin\nindex 1..2 100644\nBinary files a/b.bin and b/b.bin differ\n",
        "[diff truncated after 10 bytes]\n"
    );
    let files = parse_patch(&text).unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].removed, vec!["-- x", "keep"]);
    assert_eq!(files[0].added, vec!["++ y", "keep"]);
    assert_eq!(
        (files[1].path.as_str(), files[1].removed.len()),
        ("b.bin", 0)
    );
    assert_eq!(
        classify_file(&files[1], Some(Component::Skill)),
        Component::Other
    );
    assert_eq!(
        parse_patch("--- a/f\n+++ b/f\n@@ -x +1 @@\n+a\n")
            .unwrap_err()
            .to_string(),
        "patch line 3: expected a hunk header `@@ -a[,b] +c[,d] @@`"
    );
}

#[test]
fn literal_and_comment_lines() {
    for yes in [
        "\"a b\",",
        "'x'",
        "key: \"v\"",
        "\"k\": \"v \\\" q\",",
        "name = 'n';",
        "// c",
        "# c",
        "<!-- c -->",
    ] {
        assert!(is_literal_or_comment(yes), "{yes}");
    }
    for no in [
        "",
        "x = 1",
        "\"a\" + b",
        "\"k\": 2",
        "call(\"x\")",
        "\"unterminated",
    ] {
        assert!(!is_literal_or_comment(no), "{no}");
    }
}

// ---- novelty and history --------------------------------------------------------

#[test]
fn novelty_counts_structural_components_never_accepted() {
    let v = view(vec![
        row("0", 0, Some(0.1), true),
        tagged("1", "0", 1, 0.2, true, &["skill", "prompt"]),
        tagged("2", "1", 2, 0.1, false, &["memory"]),
    ]);
    let accepted = accepted_components(&v).unwrap();
    assert_eq!(accepted, vec![Component::Skill]);
    let c = [
        Component::Skill,
        Component::Memory,
        Component::ClientTool,
        Component::Prompt,
    ];
    assert_eq!(novelty(&c, &accepted), 2);
    assert_eq!(novelty(&[Component::Prompt, Component::Other], &[]), 0);
}

#[test]
fn malformed_annotations_are_refused() {
    let mut r = tagged("1", "0", 1, 0.2, true, &[]);
    r.annotations = serde_json::json!({ANNOTATION: ["skill", "gadget"]}).to_string();
    assert_eq!(
        accepted_components(&view(vec![r.clone()]))
            .unwrap_err()
            .to_string(),
        "annotation x_rrsi_components of generation 1: expected client_tool, skill, memory, subagent, prompt or other"
    );
    r.annotations = serde_json::json!({ANNOTATION: "skill"}).to_string();
    assert!(row_components(&r).is_err());
}

fn history_view() -> ArchiveView {
    view(vec![
        row("0", 0, Some(0.30), true),
        tagged("1", "0", 1, 0.40, true, &["skill"]), // +0.10
        tagged("2", "1", 2, 0.35, false, &["memory"]), // −0.05
        tagged("3", "1", 3, 0.40, false, &["prompt"]), //  0.00
        tagged("4", "1", 4, 0.38, false, &["skill"]), // −0.02
        tagged("5", "1", 5, 0.40, false, &["prompt"]), //  0.00
    ])
}

#[test]
fn history_yields_prune_targets_and_untried() {
    let h = history(&history_view(), 2, 0.0, 2).unwrap();
    assert_eq!(h.now, 5);
    // t − t_i ≤ 2: generations 3..=5. Memory's only edit (gen 2) is outside it: −∞.
    assert_eq!(
        h.yields,
        vec![
            (Component::Skill, -0.020000000000000018),
            (Component::Memory, f64::NEG_INFINITY),
            (Component::Prompt, 0.0),
        ]
    );
    assert_eq!(
        h.prune,
        vec![Component::Skill, Component::Memory, Component::Prompt]
    );
    // U_t = K ∖ T_t: `other` is untried too.
    assert_eq!(
        h.untried,
        vec![Component::ClientTool, Component::Subagent, Component::Other]
    );
    // S_5 − S_3 = 0.40 − 0.40 <= 0: stalled, two slots (three untried components).
    assert!(h.stalled);
    assert_eq!(h.exploration_slots, 2);
    assert!(h.render().contains("Progress has stalled: 2 of your edits"));
    assert!(
        h.render()
            .contains("Untried components: client_tool, subagent, other\n")
    );
}

#[test]
fn the_yield_is_the_largest_gain_in_the_window_not_the_sum() {
    // Issue 31: +0.10 then −0.20 is 0.10 (not pruned); two gains of +0.05 are 0.05.
    let a = view(vec![
        row("0", 0, Some(0.30), true),
        tagged("1", "0", 1, 0.40, true, &["skill"]),
        tagged("2", "1", 2, 0.20, false, &["skill"]),
    ]);
    let h = history(&a, 3, 0.0, 1).unwrap();
    assert_eq!(h.yields, vec![(Component::Skill, 0.10000000000000003)]);
    assert!(h.prune.is_empty());
    let b = view(vec![
        row("0", 0, Some(0.30), true),
        tagged("1", "0", 1, 0.35, false, &["memory"]),
        tagged("2", "0", 2, 0.35, false, &["memory"]),
    ]);
    let h = history(&b, 3, 0.0, 1).unwrap();
    assert_eq!(h.yields, vec![(Component::Memory, 0.04999999999999999)]);
}

#[test]
fn the_prune_window_keeps_t_minus_t_i_up_to_n_prune() {
    // Issue 31: a skill edit of +0.2 at t_i = 7 with t = 10, n = 3 is in the window.
    let at = |t_i: u32| {
        view(vec![
            row("0", 0, Some(0.5), true),
            tagged("a", "0", t_i, 0.7, false, &["skill"]),
            discarded("b", 10, 0.5),
        ])
    };
    let h = history(&at(7), 3, 0.0, 1).unwrap();
    assert_eq!(h.yields, vec![(Component::Skill, 0.19999999999999996)]);
    assert!(h.prune.is_empty());
    // t − t_i = 4 > 3: out of the window, −∞, pruned.
    let h = history(&at(6), 3, 0.0, 1).unwrap();
    assert_eq!(h.yields, vec![(Component::Skill, f64::NEG_INFINITY)]);
    assert_eq!(h.prune, vec![Component::Skill]);
}

#[test]
fn prompt_and_other_are_explored_once_the_structural_components_are_tried() {
    // Issue 31: all four structural components tried, progress stalled: the untried
    // `prompt` and `other` still get exploration slots.
    let mut rows = vec![row("0", 0, Some(0.4), true)];
    for (i, c) in ["client_tool", "skill", "memory", "subagent"]
        .into_iter()
        .enumerate()
    {
        let g = i as u32 + 1;
        rows.push(tagged(&g.to_string(), "0", g, 0.4, false, &[c]));
    }
    let h = history(&view(rows), 2, 0.0, 3).unwrap();
    assert_eq!(h.untried, vec![Component::Prompt, Component::Other]);
    assert!(h.stalled);
    // min(slots, untried): three slots, two untried components.
    assert_eq!(h.exploration_slots, 2);
    assert!(h.render().contains("Progress has stalled: 2 of your edits"));
}

#[test]
fn exploration_takes_every_slot_when_enough_components_are_untried() {
    let a = view(vec![
        row("0", 0, Some(0.4), true),
        discarded("1", 1, 0.4),
        discarded("2", 2, 0.4),
    ]);
    let h = history(&a, 2, 0.0, 4).unwrap();
    assert_eq!(h.untried.len(), 6);
    assert_eq!(h.exploration_slots, 4);
}

fn unmeasured_row(
    id: &str,
    generation: u32,
    score: Option<f64>,
    tags: Option<&[&str]>,
    status: GenerationStatus,
) -> ArchiveRow {
    ArchiveRow {
        parent: Some("0".into()),
        status,
        verdict: None,
        annotations: match tags {
            Some(t) => serde_json::json!({ANNOTATION: t}).to_string(),
            None => "{}".into(),
        },
        ..row(id, generation, score, false)
    }
}

#[test]
fn unmeasured_records_are_attempts_outside_the_tried_set_and_the_yield() {
    let a = view(vec![
        row("0", 0, Some(0.30), true),
        // Smoke-failed: the evaluation produced no score.
        unmeasured_row(
            "1",
            1,
            None,
            Some(&["skill"]),
            GenerationStatus::CandidateInvalid,
        ),
        // Critic-rejected before evaluation: untagged, its components unknown.
        unmeasured_row("2", 2, None, None, GenerationStatus::RejectedValidation),
        tagged("3", "0", 3, 0.25, false, &["memory"]),
    ]);
    let h = history(&a, 3, 0.0, 1).unwrap();
    assert_eq!(h.yields, vec![(Component::Memory, -0.04999999999999999)]);
    assert!(h.untried.contains(&Component::Skill));
    assert_eq!(h.attempted(), vec![Component::Skill, Component::Memory]);
    assert_eq!(
        h.attempts,
        vec![(Component::Skill, 1), (Component::Memory, 1)]
    );
    assert_eq!(h.total_attempts, 3);
    let ids: Vec<&str> = h
        .unmeasured
        .iter()
        .map(|r| r.generation_id.as_str())
        .collect();
    assert_eq!(ids, ["1", "2"]);
    assert!(h.unmeasured.iter().all(|r| !r.measured()));
}

#[test]
fn a_veto_with_a_measurement_attached_stays_rejected() {
    let a = view(vec![
        row("0", 0, Some(0.30), true),
        unmeasured_row(
            "1",
            1,
            Some(0.9),
            Some(&["skill"]),
            GenerationStatus::RejectedValidation,
        ),
        unmeasured_row(
            "2",
            2,
            Some(0.9),
            Some(&["memory"]),
            GenerationStatus::RejectedDuplicate,
        ),
    ]);
    let h = history(&a, 3, 0.0, 1).unwrap();
    assert!(h.yields.is_empty(), "{:?}", h.yields);
    assert_eq!(h.untried.len(), 6);
    assert_eq!(h.total_attempts, 2);
    assert_eq!(h.unmeasured.len(), 2);
    assert_eq!(h.unmeasured[0].gain, None);
}

#[test]
fn render_lists_the_latest_unmeasured_records() {
    let mut rows = vec![row("0", 0, Some(0.30), true)];
    for g in 1..=5u32 {
        rows.push(unmeasured_row(
            &g.to_string(),
            g,
            None,
            Some(&["skill"]),
            GenerationStatus::Timeout,
        ));
    }
    rows.push(unmeasured_row(
        "6",
        6,
        None,
        None,
        GenerationStatus::RejectedValidation,
    ));
    let text = history(&view(rows), 3, 0.0, 1).unwrap().render();
    assert!(
        text.contains(
            "Unmeasured attempts (3 of 6, latest first; not in the yields):\n\
             - generation 6 (rejected-validation): components unknown\n\
             - generation 5 (timeout): skill\n\
             - generation 4 (timeout): skill\n"
        ),
        "{text}"
    );
    assert!(!text.contains("generation 3 "), "{text}");
}

#[test]
fn a_bundle_fans_out_to_every_component() {
    let a = view(vec![
        row("0", 0, Some(0.30), true),
        tagged("1", "0", 1, 0.45, true, &["skill", "memory", "skill"]),
    ]);
    let h = history(&a, 3, 0.0, 1).unwrap();
    assert_eq!(
        h.yields,
        vec![
            (Component::Skill, 0.15000000000000002),
            (Component::Memory, 0.15000000000000002)
        ]
    );
    // One attempt each: the duplicate tag is one edit.
    assert_eq!(
        h.attempts,
        vec![(Component::Skill, 1), (Component::Memory, 1)]
    );
    assert_eq!(h.total_attempts, 1);
}

#[test]
fn a_non_finite_gain_is_refused() {
    for (base, score) in [(-f64::MAX, f64::MAX), (0.3, f64::NAN), (f64::INFINITY, 0.3)] {
        let a = view(vec![
            row("0", 0, Some(base), true),
            tagged("1", "0", 1, score, false, &["skill"]),
        ]);
        let e = history(&a, 3, 0.0, 1).unwrap_err().to_string();
        assert!(e.contains("ΔS (score gain) of generation 1"), "{e}");
    }
}

#[test]
fn history_is_not_stalled_while_improving_or_too_young() {
    let v = history_view();
    // Window 5 (t − w = 0): S_5 − S_0 = 0.10 > 0.
    let h = history(&v, 5, 0.0, 2).unwrap();
    assert!(!h.stalled && h.exploration_slots == 0);
    assert_eq!(h.yields[0], (Component::Skill, 0.10000000000000003));
    // A noise band as wide as the gain makes it a stall.
    assert!(history(&v, 5, 0.11, 1).unwrap().stalled);
    // Fewer generations than the window: never stalled.
    assert!(!history(&v, 6, 0.0, 2).unwrap().stalled);
}

#[test]
fn history_rejects_bad_parameters() {
    let v = history_view();
    assert_eq!(
        history(&v, 0, 0.0, 1).unwrap_err().to_string(),
        "window must be an integer >= 1"
    );
    assert_eq!(
        history(&v, 2, -0.1, 1).unwrap_err().to_string(),
        "noise_band must be >= 0"
    );
    assert_eq!(
        history(&v, 2, f64::NAN, 1).unwrap_err().to_string(),
        "noise_band must be a finite number"
    );
}
