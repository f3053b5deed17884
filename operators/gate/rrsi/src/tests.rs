use super::*;
use evolve_operator_sdk::testing::row;

fn ctx(config: Value) -> Context {
    let schema = <Rrsi as Operator>::config().build().unwrap();
    Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()))
}

fn pending(id: &str, parent: &str, score: Option<f64>, cost: f64) -> ArchiveRow {
    ArchiveRow {
        parent: Some(parent.into()),
        status: GenerationStatus::PendingGate,
        verdict: None,
        cost_usd: cost,
        ..row(id, 9, score, false)
    }
}

fn archive(rows: Vec<ArchiveRow>, champion: &str) -> ArchiveView {
    ArchiveView {
        rows,
        champion: Some(champion.into()),
    }
}

fn diff(path: &str, body: &str) -> CandidateDiff {
    CandidateDiff {
        changed_paths: vec![path.into()],
        patch: format!("diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{body}"),
        recent_accepted: vec![],
    }
}

fn run(
    config: Value,
    child: &ArchiveRow,
    parent: Option<&ArchiveRow>,
    a: &ArchiveView,
    d: Option<&CandidateDiff>,
) -> (bool, String) {
    let input = GateInput {
        archive: a,
        diff: d,
    };
    let g = Rrsi::decide(&ctx(config), child, parent, &input).unwrap();
    (g.verdict == Verdict::Keep, g.reason)
}

#[test]
fn keeps_an_improvement_and_records_missing_telemetry() {
    let a = archive(vec![row("0", 0, Some(0.3), true)], "0");
    let child = pending("1", "0", Some(0.5), 0.0);
    let (keep, reason) = run(json!({}), &child, a.rows.first(), &a, None);
    assert!(keep);
    assert_eq!(
        reason,
        "keep vs champion 0: floor ok (>= S*-δ = 0.300000); ΔS +0.200000 > δ: ΔC +0.000000 <= \
         β0+β1·ΔS = 0.200000; cost telemetry missing, ΔC taken as 0; no diff from the host: novelty 0"
    );
}

#[test]
fn the_floor_discards_a_child_that_beats_only_its_parent() {
    // Parent 0.4, but generation 1 once reached 0.8: the floor is 0.8 − 0.1.
    let rows = vec![
        row("0", 0, Some(0.3), true),
        row("1", 1, Some(0.8), true),
        row("2", 2, Some(0.4), true),
    ];
    let a = archive(rows.clone(), "1");
    let child = pending("3", "2", Some(0.6), 0.0);
    let config = json!({"incumbent": "parent", "noise_band": 0.1});
    let (keep, reason) = run(config.clone(), &child, Some(&rows[2]), &a, None);
    assert!(!keep);
    assert!(
        reason.starts_with("discard vs parent 2: below the floor S*-δ = 0.700000;"),
        "{reason}"
    );
    // Within δ of S* it is kept.
    let child = pending("3", "2", Some(0.75), 0.0);
    assert!(run(config, &child, Some(&rows[2]), &a, None).0);
}

#[test]
fn an_expensive_improvement_is_discarded() {
    let a = archive(vec![row("0", 0, Some(0.3), true)], "0");
    let mut inc = a.rows[0].clone();
    inc.cost_usd = 1.0;
    let a = archive(vec![inc.clone()], "0");
    // ΔS 0.1 allows ΔC <= 0.05 + 0.5·0.1 = 0.1; the child costs 0.5 more.
    let config = json!({"beta0": 0.05, "beta1": 0.5});
    let (keep, reason) = run(
        config.clone(),
        &pending("1", "0", Some(0.4), 1.5),
        Some(&inc),
        &a,
        None,
    );
    assert!(!keep, "{reason}");
    assert!(
        reason.contains("ΔC +0.500000 > β0+β1·ΔS = 0.100000"),
        "{reason}"
    );
    assert!(
        run(
            config,
            &pending("1", "0", Some(0.4), 1.05),
            Some(&inc),
            &a,
            None
        )
        .0
    );
}

#[test]
fn a_tie_is_kept_only_for_a_novel_structural_edit() {
    let mut tagged = row("1", 1, Some(0.5), true);
    tagged.parent = Some("0".into());
    tagged.annotations = json!({"x_rrsi_components": ["memory"]}).to_string();
    let a = archive(vec![row("0", 0, Some(0.4), true), tagged.clone()], "1");
    let child = pending("2", "1", Some(0.5), 0.0);
    let skill = diff(
        "target/skills/plan/SKILL.md",
        "@@ -1 +1,2 @@\n # Plan\n+List the steps first.\n",
    );
    let (keep, reason) = run(json!({}), &child, Some(&tagged), &a, Some(&skill));
    assert!(keep, "{reason}");
    assert!(
        reason.ends_with("novelty 1); cost telemetry missing, ΔC taken as 0; components skill"),
        "{reason}"
    );
    // Memory already had a kept edit; a prompt edit is never novel.
    let memory = diff(
        "target/memory.py",
        "@@ -1 +1 @@\n-MEMORY = 2\n+MEMORY = 3\n",
    );
    assert!(!run(json!({}), &child, Some(&tagged), &a, Some(&memory)).0);
    let prompt = diff("target/prompt.md", "@@ -1 +1 @@\n-Be brief.\n+Be exact.\n");
    assert!(!run(json!({}), &child, Some(&tagged), &a, Some(&prompt)).0);
}

#[test]
fn a_layout_claim_needs_a_signal() {
    let a = archive(vec![row("0", 0, Some(0.4), true)], "0");
    let child = pending("1", "0", Some(0.4), 0.0);
    let claimed = json!({"layout": [{"glob": "target/params.json", "component": "skill"}]});
    // Numbers only: no skill signal, so the claim is dropped (Other, not novel).
    let numbers = diff(
        "target/params.json",
        "@@ -1 +1 @@\n-{\"slope\": 1}\n+{\"slope\": 2}\n",
    );
    let (keep, reason) = run(claimed.clone(), &child, a.rows.first(), &a, Some(&numbers));
    assert!(!keep && reason.ends_with("components other"), "{reason}");
    let signal = diff(
        "target/params.json",
        "@@ -1 +1 @@\n-{\"skill\": 1}\n+{\"skill\": 2}\n",
    );
    assert!(run(claimed, &child, a.rows.first(), &a, Some(&signal)).0);
}

#[test]
fn children_without_a_score_or_incumbent_are_discarded() {
    let a = archive(vec![row("0", 0, Some(0.4), true)], "0");
    let mut child = pending("1", "0", None, 0.0);
    child.status = GenerationStatus::Timeout;
    assert_eq!(
        run(json!({}), &child, a.rows.first(), &a, None),
        (
            false,
            "child has no certified score (status timeout)".into()
        )
    );
    let empty = ArchiveView {
        rows: vec![],
        champion: None,
    };
    let (keep, reason) = run(
        json!({}),
        &pending("1", "0", Some(0.9), 0.0),
        None,
        &empty,
        None,
    );
    assert!(
        !keep && reason.starts_with("no incumbent to compare with"),
        "{reason}"
    );
}

#[test]
fn config_is_checked() {
    let schema = <Rrsi as Operator>::config().build().unwrap();
    let normalized = schema.normalize("{}").unwrap();
    assert_eq!(normalized["noise_band"], json!(0.0));
    assert_eq!(normalized["incumbent"], json!("champion"));
    assert!(schema.normalize(r#"{"noise_band": -0.1}"#).is_err());
    assert!(schema.normalize(r#"{"incumbent": "best"}"#).is_err());
    assert!(
        schema
            .normalize(r#"{"layout": [{"glob": "x", "component": "gadget"}]}"#)
            .is_err()
    );
}

#[test]
fn bad_costs_and_scores_fail_the_gate_with_an_error_naming_them() {
    let a = archive(vec![row("0", 0, Some(0.3), true)], "0");
    let decide = |child: &ArchiveRow| {
        let input = GateInput {
            archive: &a,
            diff: None,
        };
        Rrsi::decide(&ctx(json!({})), child, a.rows.first(), &input).unwrap_err()
    };
    assert_eq!(
        decide(&pending("1", "0", Some(0.5), -1.0)),
        "candidate 0: candidate cost must be >= 0"
    );
    assert_eq!(
        decide(&pending("1", "0", Some(0.5), f64::NAN)),
        "candidate 0: candidate cost must be a finite number"
    );
    assert_eq!(
        decide(&pending("1", "0", Some(1.2), 0.0)),
        "candidate 0: candidate score must be a score in [0, 1], not 1.2"
    );
}
