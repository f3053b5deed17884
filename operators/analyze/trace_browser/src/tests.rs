use super::*;
use evolve_operator_sdk::trajectories::cases;
use evolve_operator_sdk::trajectories::testing::{TrialSpec, bundle, trajectory};

fn ctx(config: Value) -> Context {
    let schema = <TraceBrowser as Operator>::config().build().unwrap();
    Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()))
}

fn parse(s: &str) -> Value {
    evolve_operator_sdk::serde_json::from_str(s).unwrap()
}

/// Three failed trials (two with trajectories) and a passed one.
fn fixture(root: &Path) -> Evidence {
    let summary = bundle(
        root,
        &[
            TrialSpec {
                task: "csv",
                reward: 0.0,
                verifier_output: "error in rows: [Errno 2] No such file or directory: '/app/out.json'",
                trajectory: Some(trajectory(
                    "csv",
                    "python3 conv.py > /app/out.json",
                    "can't open file 'conv.py'",
                    2,
                )),
            },
            TrialSpec {
                task: "ok",
                reward: 1.0,
                verifier_output: "",
                trajectory: Some(trajectory("ok", "true", "", 0)),
            },
            TrialSpec {
                task: "grep",
                reward: 0.25,
                verifier_output: "FAIL 3 of 4 checks",
                trajectory: Some(trajectory(
                    "grep",
                    "grep -c x input.txt",
                    "bash: grepx: command not found",
                    127,
                )),
            },
            TrialSpec {
                task: "lost",
                reward: 0.0,
                verifier_output: "FAIL",
                trajectory: None,
            },
        ],
    );
    Evidence {
        summary: summary.to_string(),
        artifacts: vec!["cases.json".into()],
    }
}

#[test]
fn traces_the_failed_trials_to_the_step_where_each_went_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let (feedback, scratch) = (dir.path().join("feedback"), dir.path().join("scratch"));
    std::fs::create_dir_all(&scratch).unwrap();
    let rollout = fixture(&feedback);
    let bundle = Bundle::open(&feedback).unwrap();
    let ev = analyze_with(&ctx(json!({})), &rollout, Some(&bundle), &scratch).unwrap();
    assert_eq!(ev.artifacts, [TRACES]);
    let s = parse(&ev.summary);
    assert_eq!(
        (
            &s["trials"],
            &s["failed"],
            &s["with_trajectory"],
            &s["truncated"]
        ),
        (&json!(4), &json!(3), &json!(3), &json!(false))
    );
    let traces = s["traces"].as_array().unwrap();
    let tasks: Vec<&str> = traces.iter().map(|t| t["task"].as_str().unwrap()).collect();
    assert_eq!(tasks, ["csv", "grep", "lost"]);
    // The verifier names /app/out.json, which step 4's command wrote.
    assert_eq!(
        traces[0]["culprit"],
        json!({"step_id": 4, "rule": "verifier_pointer", "clues": ["/app/out.json", "out.json"],
               "failure": "returncode 2"})
    );
    assert_eq!(traces[0]["trajectory"], "trajectories/run-1/csv__r0.json");
    let steps: Vec<u64> = traces[0]["extract"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_id"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [3, 4, 5], "the task and system steps are left out");
    assert_eq!(traces[0]["extract"][1]["culprit"], true);
    assert_eq!(
        traces[0]["extract"][1]["tool_calls"],
        json!(["bash: python3 conv.py > /app/out.json"])
    );
    // No pointer: the last failing output.
    assert_eq!(traces[1]["culprit"]["rule"], "last_failing_observation");
    assert_eq!(traces[1]["culprit"]["failure"], "returncode 127");
    // No trajectory: said so, no culprit.
    assert_eq!(traces[2]["note"], "the trial left no trajectory");
    assert_eq!(traces[2]["culprit"], Value::Null);

    let full = parse(&std::fs::read_to_string(scratch.join(TRACES)).unwrap());
    assert_eq!(full["traces"].as_array().unwrap().len(), 3);
}

#[test]
fn the_budget_halves_fields_then_drops_traces() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture(dir.path());
    let summary = parse(&rollout.summary);
    let all = cases(&summary, Bundle::open(dir.path()).as_ref()).unwrap();
    let cfg = |max_trials, max_chars| Config {
        max_trials,
        steps_before: 3,
        steps_after: 1,
        field_chars: 4000,
        max_chars,
    };
    let s = bounded_summary(&all, &cfg(1, 100_000));
    assert_eq!(s["traces"].as_array().unwrap().len(), 1);
    assert_eq!(s["truncated"], true);
    let s = bounded_summary(&all, &cfg(8, 100_000));
    assert_eq!(s["truncated"], false);
    let wide = s.to_string().chars().count();
    // Just too small for everything: something is cut, and the summary says so.
    let s = bounded_summary(&all, &cfg(8, wide - 1));
    assert!(s.to_string().chars().count() < wide);
    assert_eq!(s["truncated"], true);
    // Small: traces go from the end.
    let s = bounded_summary(&all, &cfg(8, 1000));
    assert!(s.to_string().chars().count() <= 1000);
    assert!(s["traces"].as_array().unwrap().len() < 3);
    assert_eq!(s["failed"], 3);
}

#[test]
fn without_a_bundle_or_trials_it_still_reports_or_says_why_not() {
    let dir = tempfile::tempdir().unwrap();
    // The CLI's sample evidence, and no /feedback.
    let sample = Evidence {
        summary: r#"{"failed":["train-3"],"passed":["train-1","train-2"]}"#.into(),
        artifacts: vec![],
    };
    let ev = analyze_with(&ctx(json!({})), &sample, None, dir.path()).unwrap();
    let s = parse(&ev.summary);
    assert_eq!(s["traces"][0]["task"], "train-3");
    assert_eq!(
        s["traces"][0]["note"],
        "no feedback bundle was granted to this call"
    );
    let bad = Evidence {
        summary: "not json".into(),
        artifacts: vec![],
    };
    assert!(
        analyze_with(&ctx(json!({})), &bad, None, dir.path())
            .unwrap_err()
            .starts_with("the rollout summary is not JSON: ")
    );
    let other = Evidence {
        summary: r#"{"rollout":"noop"}"#.into(),
        artifacts: vec![],
    };
    assert!(
        analyze_with(&ctx(json!({})), &other, None, dir.path())
            .unwrap_err()
            .starts_with("the rollout summary has neither `trials` nor `failed`")
    );
}

#[test]
fn schema_defaults_and_bounds() {
    let schema = <TraceBrowser as Operator>::config().build().unwrap();
    assert_eq!(
        Value::Object(schema.normalize("{}").unwrap()),
        json!({"max_trials": 8, "steps_before": 3, "steps_after": 1, "field_chars": 500,
               "max_chars": 8000})
    );
    for bad in [
        r#"{"max_trials": 0}"#,
        r#"{"max_trials": 65}"#,
        r#"{"steps_before": 21}"#,
        r#"{"steps_after": -1}"#,
        r#"{"field_chars": 79}"#,
        r#"{"max_chars": 999}"#,
        r#"{"model": "x"}"#,
    ] {
        assert!(schema.normalize(bad).is_err(), "{bad} was accepted");
    }
}
