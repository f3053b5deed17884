//! Removing the key, `Authorization` values and the endpoint from text an operator or
//! a log reader could see (provider error bodies can echo any of them).

use serde_json::Value;
use std::collections::HashSet;

/// Consecutive characters of the key that make a word count as (part of) the key.
const WINDOW: usize = 8;

pub(crate) const REDACTED: &str = "[redacted]";
pub(crate) const ENDPOINT: &str = "[endpoint]";

#[derive(Clone)]
pub(crate) struct Redactor {
    key: Option<String>,
    windows: HashSet<Vec<char>>,
    /// Full URLs and the authority, longest first.
    endpoint: Vec<String>,
}

impl Redactor {
    pub fn new(key: Option<&str>, endpoint_strings: Vec<String>) -> Self {
        let key = key.filter(|k| !k.is_empty()).map(str::to_string);
        let mut windows = HashSet::new();
        if let Some(key) = &key {
            let chars: Vec<char> = key.chars().collect();
            if chars.len() >= WINDOW {
                for w in chars.windows(WINDOW) {
                    windows.insert(w.to_vec());
                }
            }
        }
        let mut endpoint: Vec<String> = endpoint_strings
            .into_iter()
            .filter(|s| s.len() >= 3)
            .collect();
        endpoint.sort_by_key(|s| std::cmp::Reverse(s.len()));
        endpoint.dedup();
        Redactor {
            key,
            windows,
            endpoint,
        }
    }

    /// `text` with the key (whole, or any word sharing [`WINDOW`] consecutive
    /// characters with it, as in "sk-abc...xyz" echoes), the word after any `Bearer`,
    /// and the endpoint's URL and host replaced.
    pub fn redact(&self, text: &str) -> String {
        self.redact_with(text, true)
    }

    /// `text` with only the secrets themselves replaced: the key (whole, or a word
    /// sharing [`WINDOW`] characters with it) and the endpoint's URL and host, except a
    /// loopback host alone (`127.0.0.1`, `localhost`: no secret, and common in answers).
    /// For a model's answers relayed to the agent, which [`redact`](Self::redact)'s
    /// word-after-`Bearer` rule would garble ("use a Bearer token" is ordinary text).
    pub fn redact_secrets(&self, text: &str) -> String {
        self.redact_with(text, false)
    }

    fn redact_with(&self, text: &str, headers: bool) -> String {
        let mut text = if headers || !self.windows.is_empty() {
            self.redact_words(text, headers)
        } else {
            text.to_string()
        };
        if let Some(key) = &self.key {
            text = text.replace(key.as_str(), REDACTED);
        }
        for s in &self.endpoint {
            if headers || !is_loopback_host(s) {
                text = text.replace(s.as_str(), ENDPOINT);
            }
        }
        text
    }

    fn redact_words(&self, text: &str, headers: bool) -> String {
        // Not `[`/`]`: a redacted "[redacted]" stays one word, so redaction is idempotent.
        let is_sep = |c: char| c.is_whitespace() || "\"'`,;(){}<>".contains(c);
        let mut out = String::with_capacity(text.len());
        let mut after_bearer = false;
        let mut rest = text;
        while !rest.is_empty() {
            let sep_len = rest.find(|c: char| !is_sep(c)).unwrap_or(rest.len());
            out.push_str(&rest[..sep_len]);
            rest = &rest[sep_len..];
            if rest.is_empty() {
                break;
            }
            let word_len = rest.find(is_sep).unwrap_or(rest.len());
            let word = &rest[..word_len];
            rest = &rest[word_len..];
            if after_bearer || self.shares_window(word) {
                out.push_str(REDACTED);
            } else {
                out.push_str(word);
            }
            after_bearer = headers
                && (word.eq_ignore_ascii_case("bearer") || word.eq_ignore_ascii_case("basic"));
        }
        out
    }

    fn shares_window(&self, word: &str) -> bool {
        if self.windows.is_empty() {
            return false;
        }
        let chars: Vec<char> = word.chars().collect();
        chars.len() >= WINDOW && chars.windows(WINDOW).any(|w| self.windows.contains(w))
    }

    /// Every string in `value` (keys included) redacted.
    pub fn redact_value(&self, value: Value) -> Value {
        self.map_strings(value, &|s| self.redact(s))
    }

    /// Every string in `value` (keys included) through [`redact_secrets`](Self::redact_secrets).
    pub fn redact_value_secrets(&self, value: Value) -> Value {
        self.map_strings(value, &|s| self.redact_secrets(s))
    }

    fn map_strings(&self, value: Value, f: &dyn Fn(&str) -> String) -> Value {
        match value {
            Value::String(s) => Value::String(f(&s)),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.map_strings(v, f)).collect())
            }
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (f(&k), self.map_strings(v, f)))
                    .collect(),
            ),
            other => other,
        }
    }
}

/// `localhost` or a loopback address, alone (with a port it is an authority, which is
/// redacted as the endpoint).
fn is_loopback_host(s: &str) -> bool {
    let host = s.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// At most `max` characters of `text`, with an ellipsis when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((i, _)) => format!("{}…", &text[..i]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_key_fragments_bearer_and_endpoint() {
        let r = Redactor::new(
            Some("sk-live-0123456789abcdef"),
            vec![
                "https://api.example.com/v1".into(),
                "api.example.com".into(),
            ],
        );
        let text = "Incorrect API key provided: sk-live-****89abcdef. \
                    header was Authorization: Bearer whatever-token at https://api.example.com/v1/chat";
        let out = r.redact(text);
        assert!(!out.contains("89abcdef"), "{out}");
        assert!(!out.contains("whatever-token"), "{out}");
        assert!(!out.contains("api.example.com"), "{out}");
        assert!(out.contains("Incorrect API key provided"), "{out}");
        assert_eq!(r.redact(&out), out, "redaction is idempotent");
        let v = r.redact_value(serde_json::json!({"k": ["x sk-live-0123456789abcdef y"]}));
        assert!(!v.to_string().contains("sk-live-0123"), "{v}");
    }

    #[test]
    fn secrets_mode_keeps_ordinary_text_and_loopback_hosts() {
        let r = Redactor::new(
            Some("sk-live-0123456789abcdef"),
            vec![
                "http://127.0.0.1:8000/v1".into(),
                "127.0.0.1:8000".into(),
                "127.0.0.1".into(),
            ],
        );
        let text = "Send a Bearer token to 127.0.0.1:9999; not sk-live-0123456789abcdef \
                    nor ...89abcdef-x nor http://127.0.0.1:8000/v1/chat";
        let out = r.redact_secrets(text);
        assert!(
            out.starts_with("Send a Bearer token to 127.0.0.1:9999;"),
            "{out}"
        );
        assert!(!out.contains("89abcdef"), "{out}");
        assert!(!out.contains("127.0.0.1:8000"), "{out}");
        // The full mode still removes the word after Bearer and the bare host.
        let full = r.redact(text);
        assert!(
            !full.contains("token") && !full.contains("127.0.0.1"),
            "{full}"
        );
        let v = r.redact_value_secrets(serde_json::json!({"a": ["x sk-live-0123456789abcdef"]}));
        assert!(!v.to_string().contains("sk-live-0123"), "{v}");
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hi", 5), "hi");
    }
}
