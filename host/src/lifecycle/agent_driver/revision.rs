//! The host's checks on a driver's revision. Only the `operators` section may change;
//! every changed binding must name an operator the host can load for its stage without
//! reading anything the driver names (gen/0's frozen component for the stage, or a
//! built-in), and its config must pass that operator's own `normalize-config`. Target,
//! surface, evaluator (splits included), experiment (budget included) and model are
//! fixed for the experiment: a revision that changes any of them is refused whole.

use crate::builtin;
use crate::recipe::{self, Recipe};
use crate::sandbox::{LoadedOperator, Sandbox, parse_stage};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The recipe keys a driver can never change.
pub(crate) const FIXED_KEYS: [&str; 5] = ["experiment", "target", "surface", "evaluator", "model"];

/// A stage bound to a built-in other than gen/0's frozen component: the component the
/// host froze for it, by SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rebinding {
    pub operator: String,
    pub sha256: String,
}

/// A revision the host accepted: the new active recipe.
#[derive(Debug)]
pub(crate) struct Accepted {
    /// The complete normalized recipe (configs normalized by their operators).
    pub recipe: Value,
    pub sha256: String,
    /// Stages whose binding changed (added, replaced or removed), in name order.
    pub changed: Vec<String>,
    /// Every stage the new recipe binds to a built-in away from gen/0's component.
    pub rebound: BTreeMap<String, Rebinding>,
}

/// What a revision is checked against.
pub(crate) struct Checker<'a> {
    pub sandbox: &'a Sandbox,
    /// The active recipe and its rebound stages.
    pub active: &'a Value,
    pub active_rebound: &'a BTreeMap<String, Rebinding>,
    /// gen/0's recipe, and its frozen components (`operators/<stage>.wasm`) by stage.
    pub genesis: &'a Value,
    pub genesis_components: &'a BTreeMap<String, Vec<u8>>,
}

impl Checker<'_> {
    /// Check `proposal` (a JSON object). `Err` lists every reason it is refused.
    pub async fn check(&self, proposal: &Map<String, Value>) -> Result<Accepted, Vec<String>> {
        let merged = self.merge(proposal)?;
        let checked = recipe::check_shape(&merged.to_string());
        let Some(normalized) = checked.normalized else {
            return Err(checked
                .violations
                .iter()
                .map(|v| format!("the revised recipe is invalid at {v}"))
                .collect());
        };
        // Compare and archive in canonical form, as the active recipe is held.
        let mut normalized = super::canonical(&normalized);
        self.fixed_unchanged(&normalized)?;
        let (changed, rebound) = self.check_bindings(&mut normalized).await?;
        let normalized = super::canonical(&normalized);
        // The stages will run it: it must read back as a recipe.
        serde_json::from_value::<Recipe>(normalized.clone())
            .map_err(|e| vec![format!("the revised recipe has an unexpected shape: {e}")])?;
        Ok(Accepted {
            sha256: evolve_archive::canonical_sha256(&normalized),
            recipe: normalized,
            changed,
            rebound,
        })
    }

    /// The active recipe with the proposal applied: `operators` patched stage by stage
    /// (`null` unbinds), every other key replaced whole (and checked against the fixed
    /// keys once normalized).
    fn merge(&self, proposal: &Map<String, Value>) -> Result<Value, Vec<String>> {
        let mut merged = self.active.clone();
        for (key, value) in proposal {
            if key != "operators" {
                merged[key.as_str()] = value.clone();
                continue;
            }
            let Some(stages) = value.as_object() else {
                return Err(vec![
                    "`operators` must be an object mapping stages to bindings (or null)".into(),
                ]);
            };
            let ops = merged["operators"].as_object_mut();
            let Some(ops) = ops else {
                return Err(vec!["the active recipe has no operators section".into()]);
            };
            for (stage, binding) in stages {
                if binding.is_null() {
                    ops.remove(stage);
                } else {
                    ops.insert(stage.clone(), binding.clone());
                }
            }
        }
        Ok(merged)
    }

    /// Refuse any change to the fixed keys, naming the first differing field of each.
    fn fixed_unchanged(&self, normalized: &Value) -> Result<(), Vec<String>> {
        let reasons: Vec<String> = FIXED_KEYS
            .iter()
            .filter_map(|k| {
                let at = first_difference(&self.active[*k], &normalized[*k], k)?;
                Some(format!(
                    "the revision changes `{at}`: `{k}` is fixed for the experiment \
                     (a driver may change only `operators`)"
                ))
            })
            .collect();
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons)
        }
    }

    /// Check every binding that differs from the active one and normalize its config in
    /// place. Returns the changed stages and the rebound set of the new recipe.
    async fn check_bindings(
        &self,
        normalized: &mut Value,
    ) -> Result<(Vec<String>, BTreeMap<String, Rebinding>), Vec<String>> {
        let empty = Map::new();
        let old = self.active["operators"].as_object().unwrap_or(&empty);
        let new = normalized["operators"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut changed: Vec<String> = old
            .keys()
            .filter(|s| !new.contains_key(*s))
            .cloned()
            .collect();
        let mut rebound = BTreeMap::new();
        let mut reasons = Vec::new();
        for (stage, binding) in &new {
            if old.get(stage) == Some(binding) {
                if let Some(r) = self.active_rebound.get(stage) {
                    rebound.insert(stage.clone(), r.clone());
                }
                continue;
            }
            changed.push(stage.clone());
            match self.check_binding(stage, binding).await {
                Ok((config, rebinding)) => {
                    normalized["operators"][stage.as_str()]["config"] = Value::Object(config);
                    if let Some(r) = rebinding {
                        rebound.insert(stage.clone(), r);
                    }
                }
                Err(found) => reasons.extend(found),
            }
        }
        changed.sort();
        if reasons.is_empty() {
            Ok((changed, rebound))
        } else {
            Err(reasons)
        }
    }

    /// One changed binding: its component (gen/0's for the same operator, else a
    /// built-in) and its normalized config.
    async fn check_binding(
        &self,
        stage_text: &str,
        binding: &Value,
    ) -> Result<(Map<String, Value>, Option<Rebinding>), Vec<String>> {
        let at = |field: &str| format!("operators.{stage_text}.{field}");
        let operator = binding["operator"].as_str().unwrap_or("");
        if binding.get("fuel").is_some_and(|f| !f.is_null()) && !self.genesis_meters_fuel() {
            return Err(vec![format!(
                "{}: fuel metering is fixed when the run starts, and this experiment's recipe sets none",
                at("fuel")
            )]);
        }
        let same_as_genesis =
            self.genesis["operators"][stage_text]["operator"].as_str() == Some(operator);
        let (op, rebinding) = if same_as_genesis {
            (self.genesis_operator(stage_text)?, None)
        } else {
            self.builtin_operator(stage_text, operator)?
        };
        let raw = Value::Object(binding["config"].as_object().cloned().unwrap_or_default());
        let config = recipe::normalize_with(self.sandbox, &op, &raw)
            .await
            .map_err(|found| {
                found
                    .into_iter()
                    .map(|v| {
                        let path = if v.path.is_empty() {
                            at("config")
                        } else {
                            format!("{}.{}", at("config"), v.path)
                        };
                        format!("{path}: {}", v.message)
                    })
                    .collect::<Vec<_>>()
            })?;
        Ok((config, rebinding))
    }

    fn genesis_meters_fuel(&self) -> bool {
        self.genesis["operators"].as_object().is_some_and(|o| {
            o.values()
                .any(|b| b.get("fuel").is_some_and(|f| !f.is_null()))
        })
    }

    /// gen/0's frozen component for `stage`.
    fn genesis_operator(&self, stage: &str) -> Result<LoadedOperator, Vec<String>> {
        let rel = crate::layout::component_path(stage);
        let bytes = self
            .genesis_components
            .get(stage)
            .ok_or_else(|| vec![format!("gen/0 has no {rel} to normalize the config with")])?;
        let st = parse_stage(stage).ok_or_else(|| vec![format!("unknown stage `{stage}`")])?;
        self.sandbox
            .load_bytes(st, bytes, format!("gen/0:{rel}"))
            .map_err(|e| vec![e.to_string()])
    }

    /// A built-in operator by name; a path or an unknown name is refused (the host never
    /// reads a file a driver names).
    fn builtin_operator(
        &self,
        stage: &str,
        name: &str,
    ) -> Result<(LoadedOperator, Option<Rebinding>), Vec<String>> {
        let st = parse_stage(stage).ok_or_else(|| vec![format!("unknown stage `{stage}`")])?;
        let Some(found) = builtin::find(stage, name) else {
            let known: Vec<&str> = builtin::EMBEDDED
                .iter()
                .filter(|o| o.stage == stage)
                .map(|o| o.name)
                .collect();
            return Err(vec![format!(
                "operators.{stage}.operator: `{name}` is not a built-in {stage} operator \
                 (a driver may bind gen/0's operator or a built-in one: {})",
                known.join(", ")
            )]);
        };
        let op = self
            .sandbox
            .load_bytes(st, found.bytes, format!("builtin:{stage}/{name}"))
            .map_err(|e| vec![e.to_string()])?;
        let sha256 = evolve_archive::sha256_hex(found.bytes);
        Ok((
            op,
            Some(Rebinding {
                operator: name.to_string(),
                sha256,
            }),
        ))
    }
}

/// The dotted path of the first difference between `a` and `b` under `path`, if any.
pub(crate) fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                first_difference(va, vb, &format!("{path}.{k}"))
            })
        }
        _ if a == b => None,
        _ => Some(path.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn first_difference_names_the_leaf() {
        let a = json!({"splits": {"train": 0.5, "gate": 0.3}, "engine": "local"});
        let b = json!({"splits": {"train": 0.6, "gate": 0.3}, "engine": "local"});
        assert_eq!(
            first_difference(&a, &b, "evaluator").as_deref(),
            Some("evaluator.splits.train")
        );
        assert_eq!(first_difference(&a, &a, "evaluator"), None);
        let c = json!({"splits": {"train": 0.5, "gate": 0.3}, "engine": "local", "x": 1});
        assert_eq!(first_difference(&a, &c, "e").as_deref(), Some("e.x"));
    }
}
