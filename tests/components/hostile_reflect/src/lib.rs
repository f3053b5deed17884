//! A hostile reflect operator against the playbook caps. `config.attack`: `huge_op`
//! (one `add` of 100 KiB, over the 64 KiB per operation), `grow` (adds of 60 KiB each
//! until the playbook it was handed plus its adds pass 1 MiB), `many_credits` (20,000
//! credits, each small, together over 1 MiB), `ok` (one small `add`).

use evolve_operator_sdk::config::string;
use evolve_operator_sdk::prelude::*;

pub struct HostileReflect;

impl Operator for HostileReflect {
    const NAME: &'static str = "hostile_reflect";
    const SUMMARY: &'static str = "Grows the playbook past its caps (test component).";

    fn config() -> SchemaBuilder {
        Schema::new().field(
            "attack",
            string().required().description("Which attack to run"),
        )
    }
}

fn add(id: String, text_len: usize) -> PlaybookOp {
    PlaybookOp::Add(PlaybookEntry {
        id,
        text: "t".repeat(text_len),
        data: "{}".into(),
    })
}

impl Reflect for HostileReflect {
    fn reflect(
        ctx: &Context,
        _archive: &ArchiveView,
        playbook: &[PlaybookEntry],
    ) -> Result<Vec<PlaybookOp>, String> {
        match ctx.str("attack").ok_or("config.attack is missing")? {
            "huge_op" => Ok(vec![add("huge".into(), 100 << 10)]),
            "grow" => {
                let handed: usize = playbook
                    .iter()
                    .map(|e| e.id.len() + e.text.len() + e.data.len())
                    .sum();
                let n = ((1 << 20) - handed.min(1 << 20)) / (60 << 10) + 1;
                Ok((0..n).map(|i| add(format!("g{i}"), 60 << 10)).collect())
            }
            "many_credits" => Ok((0..20_000)
                .map(|i| {
                    PlaybookOp::Credit(PlaybookCredit {
                        id: format!("e{i}"),
                        delta: 0.001,
                        reason: "r".repeat(60),
                    })
                })
                .collect()),
            "ok" => Ok(vec![add("fine".into(), 100)]),
            other => Err(format!("unknown attack {other:?}")),
        }
    }
}

evolve_operator_sdk::export!(reflect: HostileReflect);
