//! What an operator sees of its call: identity, seed, deadline and parsed configuration.

use crate::types::CallContext;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The call context with the configuration already parsed.
///
/// Operators are deterministic functions of their inputs and of [`Context::rng`]: the
/// host derives the seed from the experiment seed, the stage and the generation id, so a
/// resumed run repeats every choice an uninterrupted run would make.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub generation_id: String,
    pub parent: Option<String>,
    pub generation: u32,
    pub seed: u64,
    pub deadline_ms: u64,
    /// The normalized configuration (the output of this operator's own schema).
    pub config: Map<String, Value>,
    /// The operator script the host read for a script operator (docs/scripts.md);
    /// `None` for compiled operators.
    pub script: Option<Script>,
}

/// An operator script as the host read it from the checkout the component was loaded
/// from (`call-context.script`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// Workspace-relative path, e.g. `operators/select/policy.rhai`.
    pub path: String,
    pub text: String,
    /// Hex SHA-256 of `text`.
    pub sha256: String,
}

impl Context {
    /// A context for unit tests and local experiments: generation 1, seed 0, no parent.
    pub fn for_test(config: Value) -> Self {
        Context {
            generation_id: "1".into(),
            parent: None,
            generation: 1,
            seed: 0,
            deadline_ms: 60_000,
            config: match config {
                Value::Object(map) => map,
                _ => Map::new(),
            },
            script: None,
        }
    }

    /// Convert what the host sent. The host always sends a JSON object; anything else
    /// is a host bug reported as the operator's error rather than a panic.
    pub(crate) fn from_wit(ctx: CallContext) -> Result<Self, String> {
        let config = match serde_json::from_str::<Value>(&ctx.config) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err("host sent a configuration that is not a JSON object".into()),
            Err(e) => return Err(format!("host sent a configuration that is not JSON: {e}")),
        };
        Ok(Context {
            generation_id: ctx.generation_id,
            parent: ctx.parent,
            generation: ctx.generation,
            seed: ctx.seed,
            deadline_ms: ctx.deadline_ms,
            config,
            script: ctx.script.map(|s| Script {
                path: s.path,
                text: s.text,
                sha256: s.sha256,
            }),
        })
    }

    /// Deserialize the configuration into the author's own type.
    pub fn config_as<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_value(Value::Object(self.config.clone()))
            .map_err(|e| format!("configuration does not fit the operator's type: {e}"))
    }

    /// A configured string, if present.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.config.get(key).and_then(Value::as_str)
    }

    /// A configured number (integers included), if present.
    pub fn f64(&self, key: &str) -> Option<f64> {
        self.config.get(key).and_then(Value::as_f64)
    }

    /// A configured integer, if present.
    pub fn i64(&self, key: &str) -> Option<i64> {
        self.config.get(key).and_then(Value::as_i64)
    }

    /// A configured boolean, if present.
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.config.get(key).and_then(Value::as_bool)
    }

    /// The call's deterministic random number generator.
    pub fn rng(&self) -> Rng {
        Rng::new(self.seed)
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny, well-studied generator whose
/// output is fully specified by its seed, so documents and tests can state exact
/// expected choices. Not for cryptography.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in [0, n); `None` when n is 0. Rejection sampling, no modulo bias.
    pub fn below(&mut self, n: u64) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.next_u64();
            if x < zone {
                return Some(x % n);
            }
        }
    }

    /// An index drawn with probability proportional to `weights`. `None` when the
    /// weights are empty, any is negative or non-finite, or all are zero.
    pub fn weighted_index(&mut self, weights: &[f64]) -> Option<usize> {
        if weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
            return None;
        }
        let total: f64 = weights.iter().sum();
        if !(total > 0.0 && total.is_finite()) {
            return None;
        }
        let target = self.next_f64() * total;
        let mut acc = 0.0;
        for (i, w) in weights.iter().enumerate() {
            acc += w;
            if target < acc {
                return Some(i);
            }
        }
        // Rounding can leave `target` a hair above the last cumulative sum.
        weights.iter().rposition(|w| *w > 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_reference_values() {
        // Reference outputs of SplitMix64 seeded with 0 (as published with the algorithm).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn below_and_weights_stay_in_range() {
        let mut r = Rng::new(42);
        for _ in 0..1000 {
            assert!(r.below(7).unwrap() < 7);
            let i = r.weighted_index(&[0.0, 2.0, 0.0, 1.0]).unwrap();
            assert!(i == 1 || i == 3);
        }
        assert_eq!(r.below(0), None);
        assert_eq!(r.weighted_index(&[]), None);
        assert_eq!(r.weighted_index(&[0.0, 0.0]), None);
        assert_eq!(r.weighted_index(&[1.0, f64::NAN]), None);
        assert_eq!(r.weighted_index(&[1.0, -1.0]), None);
    }

    #[test]
    fn context_parses_config_and_rejects_non_objects() {
        let ok = Context::from_wit(CallContext {
            generation_id: "2".into(),
            parent: Some("1".into()),
            generation: 2,
            seed: 9,
            config: r#"{"k":3,"name":"x"}"#.into(),
            deadline_ms: 5,
            script: None,
        })
        .unwrap();
        assert_eq!(ok.i64("k"), Some(3));
        assert_eq!(ok.str("name"), Some("x"));
        let bad = Context::from_wit(CallContext {
            generation_id: "2".into(),
            parent: None,
            generation: 2,
            seed: 9,
            config: "[1]".into(),
            deadline_ms: 5,
            script: None,
        });
        assert!(bad.unwrap_err().contains("not a JSON object"));
    }
}
