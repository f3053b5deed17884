//! The model configuration: the recipe's `model:` block, with environment fallbacks.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// The environment variable naming the endpoint when the recipe leaves it out.
pub const ENDPOINT_ENV: &str = "EVOLVE_MODEL_ENDPOINT";
/// The environment variable naming the model when the recipe leaves it out.
pub const MODEL_ENV: &str = "EVOLVE_MODEL";
/// The variable holding the API key unless `api_key_env` names another.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";
/// The keys the recipe's `model:` block may carry.
pub const RECIPE_KEYS: [&str; 7] = [
    "endpoint",
    "model",
    "api_key_env",
    "prices",
    "timeout_s",
    "max_retries",
    "max_tokens",
];
/// The keys `model.prices` may carry.
pub const PRICE_KEYS: [&str; 2] = ["input_per_mtok_usd", "output_per_mtok_usd"];

/// USD per million tokens. Zero (the default) means calls are never refused for budget.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Prices {
    pub input_per_mtok_usd: f64,
    pub output_per_mtok_usd: f64,
}

impl Prices {
    /// What `input` prompt tokens and `output` completion tokens cost.
    pub fn usd(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_per_mtok_usd + output as f64 * self.output_per_mtok_usd)
            / 1_000_000.0
    }

    pub fn is_zero(&self) -> bool {
        self.input_per_mtok_usd == 0.0 && self.output_per_mtok_usd == 0.0
    }
}

/// Where and how the host calls an OpenAI-compatible chat completions API.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The recipe block this configuration comes from (`model`, or `evaluator.model` for
    /// the agent's gateway): every error names its field under it.
    pub block: &'static str,
    /// Base URL; the host posts to `<endpoint>/chat/completions`.
    pub endpoint: String,
    /// The `model` field sent with every request.
    pub model: String,
    /// Name of the environment variable holding the API key (not the key itself).
    pub api_key_env: String,
    pub prices: Prices,
    /// Bound on one `chat` call, every retry and backoff included.
    pub timeout_s: f64,
    /// Retries after the first attempt on 429, 5xx and connection errors.
    pub max_retries: u32,
    /// Cap on `max_tokens`, and its value when the operator gives none.
    pub max_tokens: u32,
    /// The first retry's delay; each further retry doubles it. Not a recipe key.
    pub backoff_s: f64,
    /// Cap on a provider's `Retry-After`. Not a recipe key.
    pub retry_after_cap_s: f64,
}

impl ModelConfig {
    pub const DEFAULT_TIMEOUT_S: f64 = 120.0;
    pub const DEFAULT_MAX_RETRIES: u32 = 3;
    pub const DEFAULT_MAX_TOKENS: u32 = 4096;
    pub const DEFAULT_BACKOFF_S: f64 = 0.5;
    pub const DEFAULT_RETRY_AFTER_CAP_S: f64 = 30.0;

    /// A configuration with every default filled in.
    pub fn new(endpoint: impl Into<String>, model: impl Into<String>) -> Self {
        ModelConfig {
            block: "model",
            endpoint: endpoint.into(),
            model: model.into(),
            api_key_env: DEFAULT_API_KEY_ENV.into(),
            prices: Prices::default(),
            timeout_s: Self::DEFAULT_TIMEOUT_S,
            max_retries: Self::DEFAULT_MAX_RETRIES,
            max_tokens: Self::DEFAULT_MAX_TOKENS,
            backoff_s: Self::DEFAULT_BACKOFF_S,
            retry_after_cap_s: Self::DEFAULT_RETRY_AFTER_CAP_S,
        }
    }

    /// The configuration from a recipe's `model:` block (`Value::Null` when the recipe
    /// has none), falling back to `EVOLVE_MODEL_ENDPOINT` and `EVOLVE_MODEL` for the
    /// endpoint and model it leaves out.
    ///
    /// `Ok(None)` when there is no block and neither variable is set: the experiment
    /// has no model (use [`NoModel`](crate::sandbox::NoModel)). Every problem is
    /// reported at once, not only the first.
    pub fn from_recipe(block: &Value) -> Result<Option<Self>, ModelConfigErrors> {
        Self::from_recipe_with_env(block, |name| std::env::var(name).ok())
    }

    /// [`from_recipe`](Self::from_recipe) reading the environment through `env`.
    pub fn from_recipe_with_env(
        block: &Value,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ModelConfigErrors> {
        let empty = Map::new();
        let map = match block {
            Value::Null => &empty,
            Value::Object(map) => map,
            _ => return Err(ModelConfigError::new("model", "must be a mapping").into()),
        };
        let mut errors = unknown_keys(map, "model", &RECIPE_KEYS);
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let endpoint_given = take(&mut errors, opt_string(map, "model", "endpoint"));
        let model_given = take(&mut errors, opt_string(map, "model", "model"));
        let endpoint = endpoint_given.or_else(|| env(ENDPOINT_ENV));
        let model = model_given.or_else(|| env(MODEL_ENV));
        if block.is_null() && endpoint.is_none() && model.is_none() {
            return Ok(None);
        }
        let not_set = |field: &str, var: &str| ModelConfigError {
            unset: true,
            ..ModelConfigError::new(field, format!("not set: give it in the recipe or in {var}"))
        };
        // A key present but malformed already has its error; only absence is "not set".
        if endpoint.is_none() && !has_error(&errors, "model.endpoint") {
            errors.push(not_set("model.endpoint", ENDPOINT_ENV));
        }
        if model.is_none() && !has_error(&errors, "model.model") {
            errors.push(not_set("model.model", MODEL_ENV));
        }
        let mut config = ModelConfig::new(endpoint.unwrap_or_default(), model.unwrap_or_default());
        config.read_settings(map, &mut errors);
        config.finish(errors).map(Some)
    }

    /// Read the block's settings other than `endpoint` and `model` into `self`, adding
    /// each malformed one's error to `errors`.
    pub(crate) fn read_settings(
        &mut self,
        map: &Map<String, Value>,
        errors: &mut Vec<ModelConfigError>,
    ) {
        let block = self.block;
        let field = |key: &str| format!("{block}.{key}");
        if let Some(name) = take(errors, opt_string(map, block, "api_key_env")) {
            self.api_key_env = name;
        }
        if let Some(prices) = map.get("prices") {
            match parse_prices(prices, block) {
                Ok(p) => self.prices = p,
                Err(e) => errors.extend(e),
            }
        }
        if let Some(v) = map.get("timeout_s") {
            match v.as_f64().filter(|t| t.is_finite() && *t > 0.0) {
                Some(t) => self.timeout_s = t,
                None => errors.push(ModelConfigError::new(
                    field("timeout_s"),
                    "must be a number of seconds above 0",
                )),
            }
        }
        if let Some(v) = map.get("max_retries") {
            match v.as_u64().filter(|n| *n <= 10) {
                Some(n) => self.max_retries = n as u32,
                None => errors.push(ModelConfigError::new(
                    field("max_retries"),
                    "must be an integer from 0 to 10",
                )),
            }
        }
        if let Some(v) = map.get("max_tokens") {
            match v.as_u64().filter(|n| (1..=1_000_000).contains(n)) {
                Some(n) => self.max_tokens = n as u32,
                None => errors.push(ModelConfigError::new(
                    field("max_tokens"),
                    "must be an integer from 1 to 1000000",
                )),
            }
        }
    }

    /// `self`, unless `errors` or [`problems`](Self::problems) found any: then all of
    /// them (the fields above cannot catch the endpoint's shape or the key's name; a
    /// field that already has its error is not reported twice).
    pub(crate) fn finish(
        self,
        mut errors: Vec<ModelConfigError>,
    ) -> Result<Self, ModelConfigErrors> {
        for e in self.problems() {
            if !has_error(&errors, &e.field) {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(self)
        } else {
            Err(ModelConfigErrors(errors))
        }
    }

    /// Check every field; the first problem, naming its recipe field.
    pub fn validate(&self) -> Result<(), ModelConfigError> {
        match self.problems().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Every field's problem, each naming its recipe field.
    pub fn problems(&self) -> Vec<ModelConfigError> {
        let mut found = Vec::new();
        let field = |key: &str| format!("{}.{key}", self.block);
        if let Err(e) = endpoint_parts(&self.endpoint, self.block) {
            found.push(e);
        }
        if self.model.trim().is_empty() {
            found.push(ModelConfigError::new(field("model"), "must not be empty"));
        }
        let name_ok = !self.api_key_env.is_empty()
            && self
                .api_key_env
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            found.push(ModelConfigError::new(
                field("api_key_env"),
                "must be the name of an environment variable (letters, digits, `_`), not a key",
            ));
        }
        for (key, price) in PRICE_KEYS.iter().zip([
            self.prices.input_per_mtok_usd,
            self.prices.output_per_mtok_usd,
        ]) {
            if !(price.is_finite() && price >= 0.0) {
                found.push(ModelConfigError::new(
                    field(&format!("prices.{key}")),
                    "must be a number of USD at least 0",
                ));
            }
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.timeout_s) {
            found.push(ModelConfigError::new(
                field("timeout_s"),
                "must be a number of seconds above 0",
            ));
        }
        if self.max_tokens == 0 {
            found.push(ModelConfigError::new(
                field("max_tokens"),
                "must be at least 1",
            ));
        }
        if !(self.backoff_s.is_finite() && self.backoff_s >= 0.0) {
            found.push(ModelConfigError::new(
                field("backoff_s"),
                "must be at least 0",
            ));
        }
        if !(self.retry_after_cap_s.is_finite() && self.retry_after_cap_s >= 0.0) {
            found.push(ModelConfigError::new(
                field("retry_after_cap_s"),
                "must be at least 0",
            ));
        }
        found
    }

    /// The URL requests are posted to.
    pub fn completions_url(&self) -> String {
        format!("{}/chat/completions", self.endpoint.trim_end_matches('/'))
    }
}

/// The scheme and host of an endpoint, checked.
pub(crate) struct EndpointParts {
    pub https: bool,
    pub host: String,
    pub authority: String,
}

impl EndpointParts {
    /// `localhost`, `127.0.0.0/8` or `::1`.
    pub fn is_loopback(&self) -> bool {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

/// `block` names the recipe block the endpoint is from, for the error's field.
pub(crate) fn endpoint_parts(
    endpoint: &str,
    block: &str,
) -> Result<EndpointParts, ModelConfigError> {
    let bad = |why: &str| ModelConfigError::new(format!("{block}.endpoint"), why.to_string());
    let url = format!("{}/chat/completions", endpoint.trim_end_matches('/'));
    let uri: hyper::Uri = url.parse().map_err(|_| {
        bad("is not a URL (expected e.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1`)")
    })?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(bad("must start with `https://` or `http://`")),
    };
    let authority = uri.authority().ok_or_else(|| bad("has no host"))?;
    if authority.as_str().contains('@') {
        return Err(bad(
            "must not carry credentials (the key comes from `api_key_env`)",
        ));
    }
    if uri.query().is_some() || endpoint.contains('#') {
        return Err(bad("must not have a query or a fragment"));
    }
    Ok(EndpointParts {
        https,
        host: authority.host().to_string(),
        authority: authority.as_str().to_string(),
    })
}

/// An "unknown key" error for every key of `map` that is not in `known`.
pub(crate) fn unknown_keys(
    map: &Map<String, Value>,
    block: &str,
    known: &[&str],
) -> Vec<ModelConfigError> {
    map.keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|bad| {
            ModelConfigError::new(
                format!("{block}.{bad}"),
                format!("unknown key (expected one of: {})", known.join(", ")),
            )
        })
        .collect()
}

/// The value of `r`, or `None` with its error added to `errors`.
pub(crate) fn take<T>(
    errors: &mut Vec<ModelConfigError>,
    r: Result<Option<T>, ModelConfigError>,
) -> Option<T> {
    r.unwrap_or_else(|e| {
        errors.push(e);
        None
    })
}

pub(crate) fn has_error(errors: &[ModelConfigError], field: &str) -> bool {
    errors.iter().any(|e| e.field == field)
}

pub(crate) fn opt_string(
    map: &Map<String, Value>,
    block: &str,
    key: &str,
) -> Result<Option<String>, ModelConfigError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
        Some(_) => Err(ModelConfigError::new(
            format!("{block}.{key}"),
            "must be a non-empty string",
        )),
    }
}

fn parse_prices(value: &Value, block: &str) -> Result<Prices, Vec<ModelConfigError>> {
    let map = value.as_object().ok_or_else(|| {
        vec![ModelConfigError::new(
            format!("{block}.prices"),
            "must be a mapping",
        )]
    })?;
    let mut errors: Vec<ModelConfigError> = map
        .keys()
        .filter(|k| !PRICE_KEYS.contains(&k.as_str()))
        .map(|bad| {
            ModelConfigError::new(
                format!("{block}.prices.{bad}"),
                format!("unknown key (expected {})", PRICE_KEYS.join(" or ")),
            )
        })
        .collect();
    let mut get = |key: &str| -> f64 {
        match map.get(key) {
            None => 0.0,
            Some(v) => match v.as_f64().filter(|p| p.is_finite() && *p >= 0.0) {
                Some(p) => p,
                None => {
                    errors.push(ModelConfigError::new(
                        format!("{block}.prices.{key}"),
                        "must be a number of USD per million tokens, at least 0",
                    ));
                    0.0
                }
            },
        }
    };
    let prices = Prices {
        input_per_mtok_usd: get(PRICE_KEYS[0]),
        output_per_mtok_usd: get(PRICE_KEYS[1]),
    };
    if errors.is_empty() {
        Ok(prices)
    } else {
        Err(errors)
    }
}

/// A configuration problem, naming the recipe field (`model.endpoint`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfigError {
    pub field: String,
    pub message: String,
    /// The setting is only absent, which the environment of a later `evolve run` may
    /// supply (`EVOLVE_MODEL_ENDPOINT`); every other problem is wrong as written.
    pub unset: bool,
}

impl ModelConfigError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ModelConfigError {
            field: field.into(),
            message: message.into(),
            unset: false,
        }
    }
}

impl fmt::Display for ModelConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for ModelConfigError {}

/// Every problem of a `model:` block, reported together (a user fixing one should not
/// discover the next only on the following try).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfigErrors(pub Vec<ModelConfigError>);

impl ModelConfigErrors {
    /// The fields named, in order.
    pub fn fields(&self) -> Vec<&str> {
        self.0.iter().map(|e| e.field.as_str()).collect()
    }
}

impl From<ModelConfigError> for ModelConfigErrors {
    fn from(e: ModelConfigError) -> Self {
        ModelConfigErrors(vec![e])
    }
}

impl fmt::Display for ModelConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ModelConfigErrors {}
