//! Configuration normalization through a real component: every vocabulary feature and
//! its error paths, as the host sees them over the WIT boundary.

use evolve::sandbox::types::{ConfigViolation, Stage};
use evolve::sandbox::{
    CallReport, Capabilities, Grants, Limits, LoadedOperator, Sandbox, SandboxConfig, StageInput,
    StageOutput,
};
use serde_json::{Value, json};
use std::path::Path;

fn load() -> (std::sync::Arc<Sandbox>, LoadedOperator) {
    let sb = Sandbox::new(SandboxConfig::default()).unwrap();
    let path = Path::new(evolve::builtin::TEST_COMPONENTS_DIR).join("tc_config_vocabulary.wasm");
    let bytes = std::fs::read(&path).unwrap();
    let op = sb
        .load_bytes(Stage::Gate, &bytes, "config_vocabulary".into())
        .unwrap();
    (sb, op)
}

async fn normalize(
    sb: &Sandbox,
    op: &LoadedOperator,
    raw: &str,
) -> Result<Value, Vec<(String, String)>> {
    let scratch = tempfile::tempdir().unwrap();
    let report = sb
        .call(
            op,
            &Grants::scratch_only(scratch.path()),
            &Limits::default(),
            Capabilities::default(),
            StageInput::NormalizeConfig(raw.into()),
        )
        .await;
    normalized(report)
}

/// A normalize-config call's configuration, or its violations as (path, message).
fn normalized(report: CallReport) -> Result<Value, Vec<(String, String)>> {
    match report
        .outcome
        .expect("normalize-config does not fail as a call")
    {
        StageOutput::NormalizedConfig(Ok(map)) => Ok(Value::Object(map)),
        StageOutput::NormalizedConfig(Err(v)) => Err(v
            .into_iter()
            .map(|ConfigViolation { path, message }| (path, message))
            .collect()),
        other => panic!("unexpected output {other:?}"),
    }
}

fn v(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(p, m)| (p.to_string(), m.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_are_filled_and_numbers_normalized() {
    let (sb, op) = load();
    let got = normalize(&sb, &op, r#"{"mode": "strict", "model": {"name": "m"}, "extras": {"k": 1}, "anything": [1, {"x": null}]}"#).await;
    assert_eq!(
        got.unwrap(),
        json!({
            "mode": "strict", "history": 8, "window": 4, "threshold": 0.0, "verbose": false,
            "model": {"name": "m", "temperature": 1.0}, "extras": {"k": 1}, "anything": [1, {"x": null}]
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_violation_is_reported_sorted_by_path_without_values() {
    let (sb, op) = load();
    let raw = r#"{
        "mode": "sk-SECRET-1", "history": 0, "threshold": "sk-SECRET-2", "verbose": 1,
        "components": [], "model": {"temperature": true, "sk-SECRET-KEY": 1}, "unknown": "sk-SECRET-3"
    }"#;
    let got = normalize(&sb, &op, raw).await.unwrap_err();
    assert_eq!(
        got,
        v(&[
            ("components", "must have at least 1 item"),
            ("history", "must be >= 1"),
            ("mode", "must be one of: strict, lenient"),
            ("model.name", "is required"),
            ("model.sk-SECRET-KEY", "unknown field"),
            ("model.temperature", "must be a number"),
            ("threshold", "must be a number"),
            ("unknown", "unknown field"),
            ("verbose", "must be a boolean"),
        ])
    );
    for (_, message) in &got {
        assert!(
            !message.contains("sk-SECRET"),
            "a message echoes a value: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refine_runs_once_fields_are_valid() {
    let (sb, op) = load();
    let got = normalize(
        &sb,
        &op,
        r#"{"mode": "lenient", "history": 2, "window": 3}"#,
    )
    .await;
    assert_eq!(
        got.unwrap_err(),
        v(&[("window", "must not exceed history")])
    );
    let got = normalize(
        &sb,
        &op,
        r#"{"mode": "lenient", "history": 0, "window": 3}"#,
    )
    .await;
    assert_eq!(
        got.unwrap_err(),
        v(&[("history", "must be >= 1")]),
        "refine must not run on invalid fields"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_is_a_violation_not_a_failure() {
    let (sb, op) = load();
    assert_eq!(normalize(&sb, &op, "{not json").await.unwrap_err().len(), 1);
    assert_eq!(
        normalize(&sb, &op, "[1, 2]").await.unwrap_err(),
        v(&[("", "must be an object")])
    );
}

/// A bare call's `/scratch` (describe, normalize-config) may be one an earlier bare call
/// left exactly as it found it, never one it wrote in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_call_never_sees_what_an_earlier_one_left_in_scratch() {
    let (sb, op) = load();
    let bare = |raw: &'static str| {
        let (sb, op) = (&sb, &op);
        async move {
            let report = sb
                .call_bare(
                    op,
                    StageInput::NormalizeConfig(raw.into()),
                    std::time::Duration::from_secs(10),
                )
                .await
                .unwrap();
            normalized(report)
        }
    };
    let plain = r#"{"mode": "strict"}"#;
    let probe = r#"{"mode": "strict", "extras": {"probe_scratch": true}}"#;
    let clean = v(&[("extras.probe_scratch", "saw []; left a file: Ok(())")]);
    // An untouched directory is handed out again: still empty for the probe, which
    // writes in it; so the probes after it get another, empty again.
    assert!(bare(plain).await.is_ok());
    for _ in 0..3 {
        assert_eq!(bare(probe).await, Err(clean.clone()));
        assert!(bare(plain).await.is_ok());
    }
}
