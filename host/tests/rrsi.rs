//! The rrsi operators in a real run: the demo seed evolved by `perturb`, parents picked
//! at random among kept generations (so a child's parent is often below the historical
//! best), validate/rrsi_screen, gate/rrsi against the parent, record/rrsi_component.
//! Every gate decision is checked against the floor recomputed from the archive.

use super::cmd::evolve;
use crate::chat;
use serde_json::Value;
use std::path::Path;

const RECIPE: &str = "\
experiment: {name: rrsi-test, max_generations: 10, children_per_gen: 1, seed: 11}
target: {seed: demo}
surface: {include: [\"target/params.json\"]}
operators:
  select: {operator: random}
  rollout: {operator: noop}
  mutate:
    operator: perturb
    config: {files: [{path: target/params.json, fields: [slope, intercept]}], step: 2.0}
  validate: {operator: rrsi_screen, config: {b_min: 1, b_max: 2, horizon: 10}}
  gate: {operator: rrsi, config: {incumbent: parent}}
  record: {operator: rrsi_component}
evaluator:
  engine: local
  dataset: demo
  splits: {train: 0.5, gate: 0.25, sealed: 0.25, seed: 0}
  anchor: {final: false}
";

/// The archive's events, in order.
fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("ws/.evolve/archive.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_rrsi_gate_keeps_and_discards_by_the_historical_best_floor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("recipe.yaml"), RECIPE).unwrap();
    evolve(["init", "ws", "--recipe", "recipe.yaml"])
        .keys(dir.join("keys"))
        .cwd(dir)
        .ok();
    evolve(["run", "ws", "--quiet"])
        .keys(dir.join("keys"))
        .cwd(dir)
        .ok();
    evolve(["verify", "ws"])
        .keys(dir.join("keys"))
        .cwd(dir)
        .ok();

    // Replay the archive: S* is the best score of a kept evaluation so far.
    let mut s_star = f64::NEG_INFINITY;
    let mut scores = std::collections::BTreeMap::new();
    let (mut gated, mut kept, mut floor_discards, mut beat_parent_below_floor, mut records) =
        (0, 0, 0, 0, 0);
    for e in events(dir) {
        let genid = e["genid"].as_str().unwrap_or("").to_string();
        let body = &e["body"];
        match e["type"].as_str() {
            Some("evaluation") if body["purpose"] != "anchor" => {
                if let Some(s) = body["score"].as_f64() {
                    scores.insert(genid.clone(), s);
                }
                if genid == "0" {
                    s_star = body["score"].as_f64().unwrap();
                }
            }
            Some("gate") if genid != "0" => {
                gated += 1;
                let score = scores[&genid];
                let reason = body["reason"].as_str().unwrap();
                if score < s_star {
                    assert_eq!(
                        body["verdict"], "discard",
                        "gen {genid} ({score} < S* {s_star}): {reason}"
                    );
                    assert!(reason.contains("below the floor"), "{reason}");
                    floor_discards += 1;
                } else {
                    assert!(reason.contains("floor ok"), "{reason}");
                }
                assert!(
                    reason.contains("cost telemetry missing"),
                    "the demo reports no cost: {reason}"
                );
                if body["verdict"] == "keep" {
                    kept += 1;
                    s_star = s_star.max(score);
                }
                if reason.contains("below the floor") && reason.contains("ΔS +") {
                    beat_parent_below_floor += 1;
                }
            }
            // Record tagged every gated child: perturb edits numbers only, so `other`.
            Some("record") if genid != "0" => {
                let tags = &body["annotations"]["x_rrsi_components"];
                assert_eq!(tags, &serde_json::json!(["other"]), "gen {genid}: {body}");
                records += 1;
            }
            _ => {}
        }
    }
    assert!(
        kept >= 1 && floor_discards >= 1,
        "kept {kept}, floor discards {floor_discards}"
    );
    assert!(
        beat_parent_below_floor >= 1,
        "no child beat its parent and still fell below the floor"
    );
    assert_eq!(records, gated, "record runs once after every gate");
}

/// The shipped `rrsi` recipe as a user runs it (`init --recipe rrsi`), with the model
/// a scripted stand-in on 127.0.0.1 that answers with one edit block writing the true
/// parameters: the screen admits the one-file edit, the gate keeps the child above the
/// floor, record tags it, and the model call is metered.
#[test]
fn the_shipped_rrsi_recipe_runs_against_a_chat_server() {
    let (url, calls) = chat::chat_server(
        "The line is too flat; the skill's parameters change.\n\n\
<<<<<<< WRITE target/params.json\n{\"slope\": 2.0, \"intercept\": 3.0}\n>>>>>>> END\n",
    );
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| chat::evolve_with_model(tmp.path(), &url, args);
    run(&["init", "ws", "--recipe", "rrsi"]);
    run(&["run", "ws", "--max-generations", "1", "--quiet"]);
    run(&["verify", "ws"]);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let events = events(tmp.path());
    let of = |t: &str| {
        events
            .iter()
            .find(|e| e["type"] == t && e["genid"] == "1")
            .unwrap_or_else(|| panic!("gen 1 has no {t} event"))
    };
    assert_eq!(of("evaluation")["body"]["score"], 1.0);
    let gate = &of("gate")["body"];
    assert_eq!(gate["verdict"], "keep", "{gate}");
    let generation = &of("generation")["body"];
    assert!(
        generation["cost_usd"].as_f64().is_some_and(|c| c > 0.0),
        "the model call was metered: {generation}"
    );
    let record = &of("record")["body"];
    assert!(
        record.to_string().contains("x_rrsi_components"),
        "record tagged the child: {record}"
    );
}
