//! A hostile record operator: annotations far over the host's 64 KiB cap (issue 22:
//! 7 MiB per generation were accepted, and after 22 generations the archive was
//! 161 MB). `config.attack`: `huge` (one 7 MiB annotation), `just_over` (one byte over
//! the cap in canonical JSON), `at_cap` (exactly the cap: the positive control).

use evolve_operator_sdk::config::string;
use evolve_operator_sdk::prelude::*;

pub struct HostileRecord;

impl Operator for HostileRecord {
    const NAME: &'static str = "hostile_record";
    const SUMMARY: &'static str = "Returns oversized annotations (test component).";

    fn config() -> SchemaBuilder {
        Schema::new().field(
            "attack",
            string().required().description("Which attack to run"),
        )
    }
}

/// `{"x_blob":"<n x>"}` is n + 13 bytes of canonical JSON.
fn blob(n: usize) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("x_blob".into(), Value::String("x".repeat(n)));
    m
}

impl Record for HostileRecord {
    fn annotate(
        ctx: &Context,
        _child: &ArchiveRow,
        _diff: Option<&CandidateDiff>,
    ) -> Result<Map<String, Value>, String> {
        match ctx.str("attack").ok_or("config.attack is missing")? {
            "huge" => Ok(blob(7 << 20)),
            "just_over" => Ok(blob((64 << 10) - 13 + 1)),
            "at_cap" => Ok(blob((64 << 10) - 13)),
            other => Err(format!("unknown attack {other:?}")),
        }
    }
}

evolve_operator_sdk::export!(record: HostileRecord);
