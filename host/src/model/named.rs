//! The recipe's `models:` map: several named models (`proposer`, `judge`, ...) an
//! operator picks with `completion-request.model`.
//!
//! Each entry takes the keys of the `model:` block. `model` and `prices` must be given
//! (a different model has different prices; inheriting the default's would misprice the
//! budget silently); every other key (`endpoint`, `api_key_env`, `timeout_s`,
//! `max_retries`, `max_tokens`) is inherited from the `model:` block, environment
//! fallbacks included, when the entry leaves it out. See docs/model.md.

use super::client::ModelClient;
use super::config::{ModelConfig, ModelConfigError, ModelConfigErrors};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Whether `name` is a valid model name: `[a-z][a-z0-9_]*`, at most 64 characters.
pub fn valid_model_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The named models of a recipe's `models:` map (`Value::Null`: none), each merged over
/// the `model:` block `base` (`Value::Null` when the recipe has none). Every problem is
/// reported at once, each naming `models.<name>.<field>`.
pub fn named_models(
    models: &Value,
    base: &Value,
) -> Result<BTreeMap<String, ModelConfig>, ModelConfigErrors> {
    named_models_with_env(models, base, |name| std::env::var(name).ok())
}

/// [`named_models`] reading the environment through `env`.
pub fn named_models_with_env(
    models: &Value,
    base: &Value,
    env: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, ModelConfig>, ModelConfigErrors> {
    let map = match models {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Object(map) => map,
        _ => {
            return Err(ModelConfigError::new(
                "models",
                "must be a mapping of model names to `model:`-like blocks",
            )
            .into());
        }
    };
    let empty = Map::new();
    let base_map = base.as_object().unwrap_or(&empty);
    let mut errors = Vec::new();
    let mut found = BTreeMap::new();
    for (name, entry) in map {
        let at = format!("models.{name}");
        if !valid_model_name(name) {
            errors.push(ModelConfigError::new(
                at.clone(),
                "is not a model name (expected `[a-z][a-z0-9_]*`, at most 64 characters)",
            ));
        }
        let Some(entry) = entry.as_object() else {
            errors.push(ModelConfigError::new(at, "must be a mapping"));
            continue;
        };
        let mut missing = false;
        for key in ["model", "prices"] {
            if !entry.contains_key(key) {
                missing = true;
                errors.push(ModelConfigError::new(
                    format!("{at}.{key}"),
                    "is required: a named model gives its own `model` and `prices` (the other keys \
                     default to the `model:` block's)",
                ));
            }
        }
        let mut merged = base_map.clone();
        merged.extend(entry.iter().map(|(k, v)| (k.clone(), v.clone())));
        match ModelConfig::from_recipe_with_env(&Value::Object(merged), &env) {
            Ok(Some(config)) if !missing => {
                found.insert(name.clone(), config);
            }
            Ok(_) => {}
            Err(e) => {
                for mut e in e.0 {
                    let key = e.field.strip_prefix("model.").unwrap_or("").to_string();
                    let top = key.split('.').next().unwrap_or("");
                    // A key the entry inherited is the `model:` block's error, reported
                    // there; only an unset one (no endpoint anywhere) is this entry's too.
                    if entry.contains_key(top) || e.unset || top.is_empty() {
                        e.field = if key.is_empty() {
                            at.clone()
                        } else {
                            format!("{at}.{key}")
                        };
                        errors.push(e);
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(found)
    } else {
        Err(ModelConfigErrors(errors))
    }
}

impl ModelClient {
    /// This client with the recipe's named models (`models:`, checked by
    /// `super::named`), each sharing its connection pool and spend ledger. An error
    /// names the field under `models.<name>`.
    pub fn with_models(
        mut self,
        configs: BTreeMap<String, ModelConfig>,
    ) -> Result<Self, ModelConfigError> {
        let mut named = BTreeMap::new();
        for (name, config) in configs {
            let client = self.sharing(config).map_err(|mut e| {
                e.field = e.field.replacen("model", &format!("models.{name}"), 1);
                e
            })?;
            named.insert(name, client);
        }
        self.named = Arc::new(named);
        Ok(self)
    }

    /// The named model `name`, if the recipe has one.
    pub fn named(&self, name: &str) -> Option<&ModelClient> {
        self.named.get(name)
    }

    /// The recipe's model names, sorted.
    pub fn model_names(&self) -> Vec<&str> {
        self.named.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn entries_inherit_the_model_block_but_give_their_own_model_and_prices() {
        let base = json!({"endpoint": "http://127.0.0.1:9/v1", "model": "m", "timeout_s": 7});
        let models = json!({"judge": {"model": "big", "prices": {"input_per_mtok_usd": 3}}});
        let named = named_models_with_env(&models, &base, no_env).unwrap();
        let judge = &named["judge"];
        assert_eq!(judge.model, "big");
        assert_eq!(judge.endpoint, "http://127.0.0.1:9/v1");
        assert_eq!(judge.timeout_s, 7.0);
        assert_eq!(judge.prices.input_per_mtok_usd, 3.0);
    }

    #[test]
    fn every_problem_names_its_field_under_models() {
        let base = json!({"endpoint": "http://127.0.0.1:9/v1", "model": "m"});
        let models = json!({
            "Judge": {"model": "x", "prices": {}},
            "cheap": {"model": "x"},
            "bad": {"model": "x", "prices": {}, "timeout_s": -1, "colour": 1},
            "odd": 3,
        });
        let err = named_models_with_env(&models, &base, no_env).unwrap_err();
        let fields = err.fields();
        for f in [
            "models.Judge",
            "models.cheap.prices",
            "models.bad.timeout_s",
            "models.bad.colour",
            "models.odd",
        ] {
            assert!(fields.contains(&f), "{f} missing from {fields:?}");
        }
        assert!(named_models_with_env(&json!([1]), &base, no_env).is_err());
        assert!(
            named_models_with_env(&Value::Null, &base, no_env)
                .unwrap()
                .is_empty()
        );
    }
}
