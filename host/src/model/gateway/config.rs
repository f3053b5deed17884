//! The recipe's `evaluator.model` block: the agent's model, reached through the gateway,
//! and the policy frozen from it into the evaluation contract.

use crate::model::config::{
    ModelConfig, ModelConfigError, ModelConfigErrors, RECIPE_KEYS, has_error, opt_string, take,
    unknown_keys,
};
use crate::model::{ModelClient, Prices};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The recipe block, and the prefix of every field an error names.
pub const BLOCK: &str = "evaluator.model";

/// The keys `evaluator.model` may carry: the `model:` block's and `allowed_models`.
pub const GATEWAY_KEYS: [&str; 8] = [
    "endpoint",
    "model",
    "allowed_models",
    "api_key_env",
    "prices",
    "timeout_s",
    "max_retries",
    "max_tokens",
];

/// Where the agent under test's calls go, as the recipe's `evaluator.model` says.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// The upstream: endpoint, default model, key variable, prices, timeout, retries and
    /// the `max_tokens` cap (its [`ModelConfig::block`] is `evaluator.model`).
    pub model: ModelConfig,
    /// The models the agent may ask for; the first is [`ModelConfig::model`], which a
    /// request naming none gets.
    pub allowed_models: Vec<String>,
}

impl GatewayConfig {
    /// The configuration from a recipe's `evaluator.model` (`Value::Null`: none, the
    /// agent gets no gateway). Nothing comes from the environment but the key, whose
    /// variable the block names: the agent's endpoint and model are written down. Every
    /// problem is reported at once, each naming its field.
    pub fn from_recipe(block: &Value) -> Result<Option<GatewayConfig>, ModelConfigErrors> {
        let map = match block {
            Value::Null => return Ok(None),
            Value::Object(map) => map,
            _ => return Err(ModelConfigError::new(BLOCK, "must be a mapping").into()),
        };
        let mut errors = unknown_keys(map, BLOCK, &GATEWAY_KEYS);
        let endpoint = take(&mut errors, opt_string(map, BLOCK, "endpoint"));
        let model = take(&mut errors, opt_string(map, BLOCK, "model"));
        for (key, value, example) in [
            ("endpoint", &endpoint, "e.g. `https://api.openai.com/v1`"),
            ("model", &model, "e.g. `gpt-4o-mini`"),
        ] {
            let field = format!("{BLOCK}.{key}");
            if value.is_none() && !has_error(&errors, &field) {
                errors.push(ModelConfigError::new(
                    field,
                    format!(
                        "is required ({example}); the agent's model has no environment fallback"
                    ),
                ));
            }
        }
        let mut config = ModelConfig::new(endpoint.unwrap_or_default(), model.unwrap_or_default());
        config.block = BLOCK;
        config.read_settings(map, &mut errors);
        let allowed = allowed_models(map, &config.model, &mut errors);
        match config.finish(errors) {
            Ok(model) => Ok(Some(GatewayConfig {
                model,
                allowed_models: allowed,
            })),
            Err(errors) => Err(errors),
        }
    }

    /// The policy the evaluation contract freezes.
    pub fn policy(&self) -> GatewayPolicy {
        GatewayPolicy {
            allowed_models: self.allowed_models.clone(),
            max_tokens: self.model.max_tokens,
            endpoint_digest: endpoint_digest(&self.model.endpoint),
            prices: self.model.prices,
        }
    }

    /// The upstream client, sharing `operators`' connection pool and spend ledger when
    /// the experiment has an operators' model, else a client of its own. The key is
    /// read from the variable `api_key_env` names.
    pub fn client(&self, operators: Option<&ModelClient>) -> Result<ModelClient, ModelConfigError> {
        match operators {
            Some(c) => c.sharing(self.model.clone()),
            None => ModelClient::new(self.model.clone()),
        }
    }
}

/// `allowed_models`, checked: a list of distinct model names that includes the default
/// (`[model]` when absent), the default first.
fn allowed_models(
    map: &Map<String, Value>,
    default: &str,
    errors: &mut Vec<ModelConfigError>,
) -> Vec<String> {
    let field = format!("{BLOCK}.allowed_models");
    let Some(value) = map.get("allowed_models").filter(|v| !v.is_null()) else {
        return vec![default.to_string()];
    };
    let names: Option<Vec<String>> = value.as_array().and_then(|items| {
        items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
            })
            .collect()
    });
    let Some(names) = names.filter(|n| !n.is_empty()) else {
        errors.push(ModelConfigError::new(
            field,
            "must be a non-empty list of model names",
        ));
        return vec![default.to_string()];
    };
    if !default.is_empty() && !names.iter().any(|n| n == default) {
        errors.push(ModelConfigError::new(
            field,
            format!(
                "must include the default model `{default}` (a request naming no model gets it)"
            ),
        ));
    }
    let mut allowed = vec![default.to_string()];
    for name in names {
        if !allowed.contains(&name) {
            allowed.push(name);
        }
    }
    allowed
}

/// What the gateway enforces, frozen at init into the evaluation contract: a candidate
/// cannot switch to a pricier model, raise its token cap, or move the endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayPolicy {
    /// The models a request may name; the first is the one a request naming none gets.
    pub allowed_models: Vec<String>,
    /// Cap on a request's `max_tokens` / `max_completion_tokens`, and its value when
    /// the request gives neither.
    pub max_tokens: u32,
    /// `sha256:` of the normalized endpoint URL ([`endpoint_digest`]): the contract
    /// records which endpoint served the agent without printing it.
    pub endpoint_digest: String,
    pub prices: Prices,
}

impl GatewayPolicy {
    /// The model a request that names none gets.
    pub fn default_model(&self) -> &str {
        self.allowed_models.first().map_or("", String::as_str)
    }

    /// Whether `client` is the upstream this policy was frozen for: same endpoint,
    /// default model, prices and token cap. The first difference, naming its field.
    pub fn check_client(&self, client: &ModelClient) -> Result<(), ModelConfigError> {
        let c = client.config();
        let field = |key: &str| format!("{}.{key}", c.block);
        let differs = |what: &str| {
            format!("differs from the gateway policy frozen in the evaluation contract ({what})")
        };
        if endpoint_digest(&c.endpoint) != self.endpoint_digest {
            return Err(ModelConfigError::new(
                field("endpoint"),
                differs("endpoint digest"),
            ));
        }
        if self.default_model() != c.model {
            return Err(ModelConfigError::new(
                field("model"),
                differs(&format!("default model `{}`", self.default_model())),
            ));
        }
        if self.prices != c.prices {
            return Err(ModelConfigError::new(field("prices"), differs("prices")));
        }
        if self.max_tokens != c.max_tokens {
            return Err(ModelConfigError::new(
                field("max_tokens"),
                differs(&format!("max_tokens {}", self.max_tokens)),
            ));
        }
        Ok(())
    }
}

/// `sha256:<hex>` of `endpoint` normalized: trimmed, the scheme and host lowercased, a
/// default port (`:443` for https, `:80` for http) and trailing `/` dropped. So
/// `HTTPS://API.OpenAI.com:443/v1/` and `https://api.openai.com/v1` have one digest.
pub fn endpoint_digest(endpoint: &str) -> String {
    let digest = Sha256::digest(normalize_endpoint(endpoint).as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn normalize_endpoint(endpoint: &str) -> String {
    let trimmed = endpoint.trim().trim_end_matches('/');
    let Ok(uri) = trimmed.parse::<hyper::Uri>() else {
        return trimmed.to_string();
    };
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return trimmed.to_string();
    };
    let scheme = scheme.to_ascii_lowercase();
    let host = authority.host().to_ascii_lowercase();
    let port = match (scheme.as_str(), authority.port_u16()) {
        ("https", Some(443)) | ("http", Some(80)) | (_, None) => String::new(),
        (_, Some(p)) => format!(":{p}"),
    };
    let path = uri.path().trim_end_matches('/');
    format!("{scheme}://{host}{port}{path}")
}

// The model block's own keys are a subset: a key added there must be added here.
const _: () = assert!(RECIPE_KEYS.len() + 1 == GATEWAY_KEYS.len());

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_block_parses_with_defaults_and_no_environment_fallback() {
        let c = GatewayConfig::from_recipe(&json!({
            "endpoint": "https://api.openai.com/v1", "model": "gpt-4o-mini",
            "allowed_models": ["gpt-4o", "gpt-4o-mini"],
            "prices": {"input_per_mtok_usd": 0.15, "output_per_mtok_usd": 0.6},
            "max_tokens": 2048, "timeout_s": 60, "max_retries": 2,
        }))
        .unwrap()
        .unwrap();
        assert_eq!(
            c.allowed_models,
            ["gpt-4o-mini", "gpt-4o"],
            "the default first"
        );
        assert_eq!(c.model.block, BLOCK);
        assert_eq!(c.model.api_key_env, "OPENAI_API_KEY");
        assert_eq!(
            (c.model.max_tokens, c.model.max_retries, c.model.timeout_s),
            (2048, 2, 60.0)
        );
        let p = c.policy();
        assert_eq!(p.default_model(), "gpt-4o-mini");
        assert!(p.endpoint_digest.starts_with("sha256:") && p.endpoint_digest.len() == 71);
        assert!(!serde_json::to_string(&p).unwrap().contains("openai.com"));
        let minimal = json!({"endpoint": "http://127.0.0.1:11434/v1", "model": "qwen"});
        let c = GatewayConfig::from_recipe(&minimal).unwrap().unwrap();
        assert_eq!(c.allowed_models, ["qwen"]);
        assert_eq!(GatewayConfig::from_recipe(&Value::Null), Ok(None));
    }

    #[test]
    fn every_problem_is_reported_at_once_under_evaluator_model() {
        let err = GatewayConfig::from_recipe(&json!({})).unwrap_err();
        assert_eq!(
            err.fields(),
            ["evaluator.model.endpoint", "evaluator.model.model"],
            "{err}"
        );
        assert!(err.to_string().contains("no environment fallback"), "{err}");
        let err = GatewayConfig::from_recipe(&json!({
            "endpoint": "ftp://x/v1", "model": "m", "allowed_models": ["other"],
            "max_tokens": 0, "prices": {"input": 1}, "api_key_env": "sk-123", "colour": 1,
        }))
        .unwrap_err();
        let mut fields = err.fields();
        fields.sort();
        assert_eq!(
            fields,
            [
                "evaluator.model.allowed_models",
                "evaluator.model.api_key_env",
                "evaluator.model.colour",
                "evaluator.model.endpoint",
                "evaluator.model.max_tokens",
                "evaluator.model.prices.input",
            ],
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("must include the default model `m`"),
            "{err}"
        );
        let err = GatewayConfig::from_recipe(&json!({"endpoint": "https://x/v1", "model": "m",
            "allowed_models": []}))
        .unwrap_err();
        assert_eq!(err.fields(), ["evaluator.model.allowed_models"]);
        let err = GatewayConfig::from_recipe(&json!("https://x")).unwrap_err();
        assert_eq!(err.fields(), ["evaluator.model"]);
    }

    /// A recipe whose evaluator has `model` as its `evaluator.model`.
    fn recipe(model: &str) -> String {
        format!(
            "experiment: {{name: demo}}\ntarget: {{seed: params}}\nsurface: {{include: ['target/**']}}\n\
             operators:\n  select: {{operator: greedy}}\n  rollout: {{operator: noop}}\n  \
             mutate: {{operator: perturb}}\n  gate: {{operator: hillclimb}}\n  record: {{operator: notes}}\n\
             evaluator: {{dataset: builtin, model: {model}}}\n"
        )
    }

    #[test]
    fn the_recipe_schema_carries_the_block_to_the_config() {
        let c = crate::recipe::check_shape(&recipe(
            "{endpoint: 'http://127.0.0.1:8000/v1', model: m, allowed_models: [m, n], max_tokens: 64}",
        ));
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        let block = c.recipe.unwrap().evaluator.model.unwrap();
        let g = GatewayConfig::from_recipe(&block).unwrap().unwrap();
        assert_eq!((g.allowed_models.len(), g.model.max_tokens), (2, 64));
        // The schema's own checks name the field under evaluator.model.
        let c = crate::recipe::check_shape(&recipe("{model: m, max_tokens: 0, colour: 1}"));
        let paths: Vec<String> = c.violations.iter().map(|v| v.to_string()).collect();
        let text = paths.join("\n");
        for field in [
            "evaluator.model.endpoint",
            "evaluator.model.max_tokens",
            "evaluator.model.colour",
        ] {
            assert!(text.contains(field), "{field} missing in:\n{text}");
        }
        // No block: no gateway.
        let c = crate::recipe::check_shape(&recipe("null"));
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert_eq!(c.recipe.unwrap().evaluator.model, None);
    }

    #[test]
    fn the_digest_ignores_spelling_but_not_the_endpoint() {
        let d = endpoint_digest("https://api.openai.com/v1");
        assert_eq!(endpoint_digest(" HTTPS://API.OpenAI.com:443/v1/ "), d);
        assert_ne!(endpoint_digest("https://api.openai.com/v2"), d);
        assert_ne!(endpoint_digest("https://api.openai.com:8443/v1"), d);
        assert_eq!(
            endpoint_digest("http://127.0.0.1:80/v1"),
            endpoint_digest("http://127.0.0.1/v1")
        );
    }

    #[test]
    fn a_client_must_match_the_frozen_policy() {
        let c = GatewayConfig::from_recipe(&json!({"endpoint": "http://127.0.0.1:9/v1",
            "model": "m", "api_key_env": "EVOLVE_TEST_UNSET_KEY"}))
        .unwrap()
        .unwrap();
        let policy = c.policy();
        let client = c.client(None).unwrap();
        policy.check_client(&client).unwrap();
        let mut moved = c.model.clone();
        moved.endpoint = "http://127.0.0.1:10/v1".into();
        let other = ModelClient::with_api_key(moved, None).unwrap();
        let err = policy.check_client(&other).unwrap_err();
        assert_eq!(err.field, "evaluator.model.endpoint");
        let mut pricier = c.model.clone();
        pricier.prices.output_per_mtok_usd = 9.0;
        let other = ModelClient::with_api_key(pricier, None).unwrap();
        assert_eq!(
            policy.check_client(&other).unwrap_err().field,
            "evaluator.model.prices"
        );
    }
}
