//! What `evolve verify`, `log` and `show` read of agent-driven runs: the recipe digest
//! each generation ran under, and every archived revision checked against its digest,
//! the fixed recipe keys and its frozen components.

use super::revision::{FIXED_KEYS, first_difference};
use super::{DRIVER_EVENT, frozen_root, genesis_recipe, genesis_recipe_in};
use crate::layout;
use crate::workspace::Workspace;
use evolve_archive::{DriverRevisionBody, Event, SelectBody, types};
use evolve_snapshot::{Oid, Store};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The recipe SHA-256 each generation ran under: gen/0's recipe for generation 0, and
/// the digest stamped on each generation's `select` event.
pub fn recipe_digests(ws: &Workspace, events: &[Event]) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    if let Ok(genesis) = genesis_recipe(ws) {
        out.insert(0, evolve_archive::canonical_sha256(&genesis));
    }
    for e in events.iter().filter(|e| e.event_type == types::SELECT) {
        if let Ok(select) = typed::<SelectBody>(e) {
            out.insert(u64::from(select.generation), select.recipe_sha256);
        }
    }
    out
}

/// An event's body as the struct its writer used.
fn typed<B: DeserializeOwned>(e: &Event) -> Result<B, String> {
    serde_json::from_value(Value::Object(e.body.clone())).map_err(|why| why.to_string())
}

/// Findings about the recipe digests in `events` (archive lines, in order): each
/// `select` stamps the recipe active at that point, each accepted revision's recipe
/// hashes to its digest and keeps gen/0's fixed keys, and its frozen components (when
/// present) have the archived digests.
pub fn verify_recipes(ws: &Workspace, events: &[Event]) -> Vec<String> {
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
    events: &[Event],
) -> Vec<String> {
    let genesis = match genesis_recipe_in(store, genesis) {
        Ok(g) => g,
        Err(e) => return vec![e.what],
    };
    let mut active = evolve_archive::canonical_sha256(&genesis);
    let mut findings = Vec::new();
    for e in events {
        let line = e.seq + 1;
        let malformed = |why: String| {
            format!(
                "archive line {line}: a {} body the host did not write: {why}",
                e.event_type
            )
        };
        if e.event_type == types::SELECT {
            match typed::<SelectBody>(e) {
                Ok(select) if select.recipe_sha256 != active => findings.push(format!(
                    "archive line {line}: generation {} stamps recipe {}, but the active recipe was {active}",
                    select.generation, select.recipe_sha256
                )),
                Ok(_) => {}
                Err(why) => findings.push(malformed(why)),
            }
        } else if e.event_type == DRIVER_EVENT {
            let revision = match typed::<DriverRevisionBody>(e) {
                Ok(r) => r,
                Err(why) => {
                    findings.push(malformed(why));
                    continue;
                }
            };
            if revision.previous_recipe_sha256 != active {
                findings.push(format!(
                    "archive line {line}: the driver revision names previous recipe {}, but the active recipe was {active}",
                    revision.previous_recipe_sha256
                ));
            }
            if revision.accepted {
                findings.extend(check_accepted(frozen, &genesis, &revision, line));
                active = revision.recipe_sha256.clone();
            } else if revision.recipe_sha256 != active {
                findings.push(format!(
                    "archive line {line}: a revision that was not accepted changes the recipe digest"
                ));
            }
        }
    }
    findings
}

fn check_accepted(
    frozen: Option<&Path>,
    genesis: &Value,
    revision: &DriverRevisionBody,
    line: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    let sha = revision.recipe_sha256.as_str();
    let recipe = revision.recipe.clone().unwrap_or(Value::Null);
    let recomputed = evolve_archive::canonical_sha256(&recipe);
    if recomputed != sha {
        out.push(format!(
            "archive line {line}: the revised recipe hashes to {recomputed}, not its recipe_sha256 {sha}"
        ));
    }
    for key in FIXED_KEYS {
        if let Some(at) = first_difference(&genesis[key], &recipe[key], key) {
            out.push(format!(
                "archive line {line}: the accepted revision changes `{at}`, which is fixed"
            ));
        }
    }
    let Some(dir) = frozen.map(|f| f.join(sha)) else {
        return out;
    };
    let rebound = revision.rebound.as_ref().and_then(Value::as_object);
    for (stage, r) in rebound.into_iter().flatten() {
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
