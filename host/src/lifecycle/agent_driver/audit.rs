//! What `evolve verify`, `log` and `show` read of agent-driven runs: the recipe digest
//! each generation ran under, and every archived revision checked against its digest,
//! the fixed recipe keys and its frozen components.

use super::revision::{FIXED_KEYS, first_difference};
use super::{DRIVER_EVENT, frozen_root, genesis_recipe, genesis_recipe_in};
use crate::layout;
use crate::workspace::Workspace;
use evolve_snapshot::{Oid, Store};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The recipe SHA-256 each generation ran under: gen/0's recipe for generation 0, and
/// the digest stamped on each generation's `select` event. `events` are archive lines.
pub fn recipe_digests(ws: &Workspace, events: &[Value]) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    if let Ok(genesis) = genesis_recipe(ws) {
        out.insert(0, evolve_archive::canonical_sha256(&genesis));
    }
    for e in events.iter().filter(|e| e["type"] == "select") {
        if let (Some(g), Some(sha)) = (
            e["body"]["generation"].as_u64(),
            e["body"]["recipe_sha256"].as_str(),
        ) {
            out.insert(g, sha.to_string());
        }
    }
    out
}

/// Findings about the recipe digests in `events` (archive lines, in order): each
/// `select` stamps the recipe active at that point, each accepted revision's recipe
/// hashes to its digest and keeps gen/0's fixed keys, and its frozen components (when
/// present) have the archived digests.
pub fn verify_recipes(ws: &Workspace, events: &[Value]) -> Vec<String> {
    let frozen = frozen_root(ws);
    verify_recipes_in(&ws.store, ws.genesis, Some(&frozen), events)
}

/// [`verify_recipes`] on any evidence: the repository `store` holding gen/0's commit
/// `genesis`, and the directory of frozen rebound components when there is one (an
/// evidence bundle has none; the digests it archives are then checked no further).
pub fn verify_recipes_in(
    store: &Store,
    genesis: Oid,
    frozen: Option<&Path>,
    events: &[Value],
) -> Vec<String> {
    let genesis = match genesis_recipe_in(store, genesis) {
        Ok(g) => g,
        Err(e) => return vec![e.what],
    };
    let mut active = evolve_archive::canonical_sha256(&genesis);
    let mut findings = Vec::new();
    for e in events {
        let body = &e["body"];
        let line = e["seq"].as_u64().map_or(0, |s| s + 1);
        match e["type"].as_str() {
            Some("select") => {
                if let Some(sha) = body["recipe_sha256"].as_str()
                    && sha != active
                {
                    findings.push(format!(
                        "archive line {line}: generation {} stamps recipe {sha}, but the active recipe was {active}",
                        body["generation"]
                    ));
                }
            }
            Some(DRIVER_EVENT) => {
                if body["previous_recipe_sha256"].as_str() != Some(active.as_str()) {
                    findings.push(format!(
                        "archive line {line}: the driver revision names previous recipe {}, but the active recipe was {active}",
                        body["previous_recipe_sha256"]
                    ));
                }
                if body["accepted"] == Value::Bool(true) {
                    findings.extend(check_accepted(frozen, &genesis, body, line));
                    if let Some(sha) = body["recipe_sha256"].as_str() {
                        active = sha.to_string();
                    }
                } else if body["recipe_sha256"].as_str() != Some(active.as_str()) {
                    findings.push(format!(
                        "archive line {line}: a revision that was not accepted changes the recipe digest"
                    ));
                }
            }
            _ => {}
        }
    }
    findings
}

fn check_accepted(frozen: Option<&Path>, genesis: &Value, body: &Value, line: u64) -> Vec<String> {
    let mut out = Vec::new();
    let sha = body["recipe_sha256"].as_str().unwrap_or("");
    let recomputed = evolve_archive::canonical_sha256(&body["recipe"]);
    if recomputed != sha {
        out.push(format!(
            "archive line {line}: the revised recipe hashes to {recomputed}, not its recipe_sha256 {sha}"
        ));
    }
    for key in FIXED_KEYS {
        if let Some(at) = first_difference(&genesis[key], &body["recipe"][key], key) {
            out.push(format!(
                "archive line {line}: the accepted revision changes `{at}`, which is fixed"
            ));
        }
    }
    let Some(dir) = frozen.map(|f| f.join(sha)) else {
        return out;
    };
    for (stage, r) in body["rebound"].as_object().into_iter().flatten() {
        let path = dir.join(layout::component_path(stage));
        let Ok(bytes) = std::fs::read(&path) else {
            continue; // re-frozen from the built-in (and checked) when a run resumes
        };
        let want = r["component_sha256"].as_str().unwrap_or("");
        let got = evolve_archive::sha256_hex(&bytes);
        if got != want {
            out.push(format!(
                "{}: SHA-256 {got}, but archive line {line} froze {want}",
                path.display()
            ));
        }
    }
    out
}
