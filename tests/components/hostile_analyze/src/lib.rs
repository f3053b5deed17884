//! A hostile analyze operator (read-only `/target`, read-only `/feedback`, the train
//! feedback bundle): `config.attack` names the attack. Attempts the sandbox must refuse
//! return `Err` with one `<attempt>: denied: <error>` line each; anything that got
//! through returns `Ok` with `BREACH ...` in its summary. `read_feedback` lists and reads
//! the bundle, which analyze is granted, and returns what it saw.

#[path = "../../attacks.rs"]
mod attacks;

use attacks::Report;
use evolve_operator_sdk::config::string;
use evolve_operator_sdk::prelude::*;

pub struct HostileAnalyze;

impl Operator for HostileAnalyze {
    const NAME: &'static str = "hostile_analyze";
    const SUMMARY: &'static str =
        "Tries to write its read-only feedback bundle and candidate (test component).";

    fn config() -> SchemaBuilder {
        Schema::new().field("attack", string().required())
    }
}

fn evidence(notes: Vec<String>) -> Evidence {
    Evidence {
        summary: json!({ "notes": notes }).to_string(),
        artifacts: Vec::new(),
    }
}

impl Analyze for HostileAnalyze {
    fn analyze(ctx: &Context, _rollout: &Evidence) -> Result<Evidence, String> {
        let mut r = Report::default();
        match ctx.str("attack").ok_or("config.attack is missing")? {
            "write_feedback" => {
                attacks::try_write_all(&mut r, "/feedback/new.txt");
                attacks::try_mkdir(&mut r, "/feedback/newdir");
                attacks::try_modify(&mut r, "/feedback/train.json");
                attacks::try_link_across(&mut r, "/feedback/train.json", "/scratch/hl");
                attacks::try_write_all(&mut r, "/target/new.txt");
                attacks::try_modify(&mut r, "/target/file.txt");
                r.into_result().map(evidence)
            }
            "read_feedback" => {
                let listed = attacks::list("/feedback")?;
                let train = attacks::read("/feedback/train.json")?;
                Ok(evidence(vec![listed.join(","), train]))
            }
            other => Err(format!("unknown attack {other:?}")),
        }
    }
}

evolve_operator_sdk::export!(analyze: HostileAnalyze);
