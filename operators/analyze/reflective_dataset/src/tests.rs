use super::*;
use evolve_operator_sdk::trajectories::cases;
use evolve_operator_sdk::trajectories::testing::{TrialSpec, bundle, trajectory};

fn ctx(config: Value) -> Context {
    let schema = <ReflectiveDataset as Operator>::config().build().unwrap();
    Context::for_test(Value::Object(schema.normalize_value(&config).unwrap()))
}

fn parse(s: &str) -> Value {
    evolve_operator_sdk::serde_json::from_str(s).unwrap()
}

const COMPONENTS: &str = r#"{"components": ["target/prompts/system.md", "target/agent.yaml"]}"#;

fn fixture(root: &Path) -> Evidence {
    let summary = bundle(
        root,
        &[
            TrialSpec {
                task: "ok",
                reward: 1.0,
                verifier_output: "",
                trajectory: Some(trajectory("ok", "sort -u input.txt > /app/out.txt", "", 0)),
            },
            TrialSpec {
                task: "csv",
                reward: 0.0,
                verifier_output: "PASS header\nerror in rows: No such file or directory: '/app/out.json'\nFAIL rows",
                trajectory: Some(trajectory(
                    "csv",
                    "python3 conv.py > /app/out.json",
                    "can't open file 'conv.py'",
                    2,
                )),
            },
            TrialSpec {
                task: "lost",
                reward: 0.5,
                verifier_output: "FAIL 1 of 2",
                trajectory: None,
            },
        ],
    );
    Evidence {
        summary: summary.to_string(),
        artifacts: vec![],
    }
}

#[test]
fn builds_gepa_records_for_every_component() {
    let dir = tempfile::tempdir().unwrap();
    let (feedback, scratch) = (dir.path().join("feedback"), dir.path().join("scratch"));
    std::fs::create_dir_all(&scratch).unwrap();
    let rollout = fixture(&feedback);
    let b = Bundle::open(&feedback);
    let ev = analyze_with(&ctx(parse(COMPONENTS)), &rollout, b.as_ref(), &scratch).unwrap();
    assert_eq!(ev.artifacts, [DATASET]);
    let dataset = parse(&std::fs::read_to_string(scratch.join(DATASET)).unwrap());
    let keys: Vec<&String> = dataset.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["target/prompts/system.md", "target/agent.yaml"]);
    assert_eq!(
        dataset["target/prompts/system.md"],
        dataset["target/agent.yaml"]
    );
    let records = dataset["target/agent.yaml"].as_array().unwrap();
    assert_eq!(records.len(), 3, "GEPA keeps every trial by default");

    let csv = &records[1];
    assert_eq!(
        csv["Inputs"],
        json!({"task_id": "csv#0", "instruction": "Solve csv in /app."})
    );
    assert_eq!(
        csv["Generated Outputs"]["tool_calls"],
        json!(["bash: ls /app", "bash: python3 conv.py > /app/out.json"]),
        "the steps up to the one where it went wrong"
    );
    assert_eq!(csv["Feedback"]["outcome"], "failed");
    assert_eq!(csv["Feedback"]["culprit"]["step_id"], 4);
    assert_eq!(
        csv["Feedback"]["natural_language_feedback"],
        "Failed (benchmark-complete, reward 0). The verifier says: FAIL rows. It went wrong at \
         step 4 (`bash: python3 conv.py > /app/out.json`), whose output shows returncode 2; the \
         verifier points there (/app/out.json, out.json)."
    );
    assert_eq!(csv["Scores (Higher is Better)"]["reward"], 0.0);
    assert_eq!(
        records[0]["Feedback"]["natural_language_feedback"],
        "Passed (benchmark-complete, reward 1)."
    );
    assert_eq!(
        records[2]["Feedback"]["natural_language_feedback"],
        "Failed (benchmark-complete, reward 0.5). The verifier says: FAIL 1 of 2. No \
         trajectory: the trial left no trajectory."
    );
    assert_eq!(records[2]["Inputs"]["instruction"], Value::Null);

    let s = parse(&ev.summary);
    assert_eq!(s["records"], 3);
    assert_eq!(s["outcomes"], json!({"passed": 1, "failed": 2}));
    let order: Vec<&str> = s["feedback"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["task"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["csv#0", "lost#0", "ok#0"], "failed trials first");
    assert_eq!(s["truncated"], false);
}

#[test]
fn only_failed_max_records_and_the_summary_budget() {
    let dir = tempfile::tempdir().unwrap();
    let rollout = fixture(dir.path());
    let b = Bundle::open(dir.path());
    let config = json!({"components": ["target/a.md"], "only_failed": true, "max_records": 1});
    let ev = analyze_with(&ctx(config), &rollout, b.as_ref(), dir.path()).unwrap();
    let dataset = parse(&std::fs::read_to_string(dir.path().join(DATASET)).unwrap());
    let records = dataset["target/a.md"].as_array().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["Inputs"]["task_id"], "csv#0");
    assert_eq!(
        parse(&ev.summary)["outcomes"],
        json!({"passed": 0, "failed": 1})
    );

    let summary = parse(&rollout.summary);
    let all = cases(&summary, b.as_ref()).unwrap();
    let cfg: Config = ctx(json!({"components": ["target/a.md"], "max_chars": 1000}))
        .config_as()
        .unwrap();
    let mut many = Vec::new();
    for _ in 0..20 {
        many.extend(all.iter());
    }
    let s = bounded_summary(&many, &cfg);
    assert!(s.to_string().chars().count() <= 1000);
    assert_eq!(s["truncated"], true);
    assert_eq!(s["records"], 60);
}

#[test]
fn schema_defaults_and_bounds() {
    let schema = <ReflectiveDataset as Operator>::config().build().unwrap();
    assert_eq!(
        Value::Object(
            schema
                .normalize(r#"{"components": ["target/p.md"]}"#)
                .unwrap()
        ),
        json!({"components": ["target/p.md"], "max_records": 32, "only_failed": false,
               "steps_per_record": 6, "field_chars": 1000, "max_chars": 6000})
    );
    for bad in [
        "{}",
        r#"{"components": []}"#,
        r#"{"components": ["/etc/passwd"]}"#,
        r#"{"components": ["target/../x"]}"#,
        r#"{"components": ["target/p.md"], "max_records": 0}"#,
        r#"{"components": ["target/p.md"], "max_records": 257}"#,
        r#"{"components": ["target/p.md"], "steps_per_record": 51}"#,
        r#"{"components": ["target/p.md"], "field_chars": 79}"#,
        r#"{"components": ["target/p.md"], "max_chars": 999}"#,
    ] {
        assert!(schema.normalize(bad).is_err(), "{bad} was accepted");
    }
    let err = schema
        .normalize(r#"{"components": ["target/./x"]}"#)
        .unwrap_err();
    assert_eq!(err[0].path, "components[0]");
}
