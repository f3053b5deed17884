//! A select-world component written without the SDK, so it can break the rules the
//! SDK enforces: `describe` claims the mutate stage, `normalize-config` answers with
//! non-objects or an empty violation list, and `select` can return a blank id. The
//! host's own checks must catch every one.
//!
//! `normalize-config(raw)` behaviour, chosen by `raw`:
//! * `"empty-violations"` -> `Err([])`
//! * `"not-json"` -> `Ok("not json")`
//! * `"array"` -> `Ok("[1]")`
//! * anything else -> `Ok("{}")`

wit_bindgen::generate!({
    world: "select-operator",
    path: "../../../wit",
});

use evolve::operator::types::{ArchiveView, CallContext, ConfigViolation, Stage};
use exports::evolve::operator::meta::{Description, Guest as Meta};
use exports::evolve::operator::select::Guest as SelectGuest;

struct Lying;

impl Meta for Lying {
    fn describe() -> Description {
        Description {
            stage: Stage::Mutate,
            name: "lying_raw".into(),
            summary: "Claims to be a mutate operator (test component).".into(),
            config_schema: "{\"type\":\"object\"}".into(),
        }
    }

    fn normalize_config(raw: String) -> Result<String, Vec<ConfigViolation>> {
        match raw.as_str() {
            "empty-violations" => Err(Vec::new()),
            "not-json" => Ok("not json".into()),
            "array" => Ok("[1]".into()),
            _ => Ok("{}".into()),
        }
    }
}

impl SelectGuest for Lying {
    fn select(ctx: CallContext, _archive: ArchiveView) -> Result<Vec<String>, String> {
        Ok(vec![if ctx.config.contains("blank") {
            " ".into()
        } else {
            "1".into()
        }])
    }
}

export!(Lying);
