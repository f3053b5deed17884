//! A hostile validate operator: its artifacts mix one valid file with a planted
//! symbolic link, a directory, a path through `..` and a missing file. The host must
//! refuse each bad one by name and keep the valid one (issue 22: a link was dropped
//! silently, and one bad artifact dropped the valid ones with it).

#[path = "../../attacks.rs"]
mod attacks;

use evolve_operator_sdk::config::string;
use evolve_operator_sdk::prelude::*;

pub struct HostileValidate;

impl Operator for HostileValidate {
    const NAME: &'static str = "hostile_validate";
    const SUMMARY: &'static str = "Names bad artifacts beside a good one (test component).";

    fn config() -> SchemaBuilder {
        Schema::new().field(
            "attack",
            string().required().description("Which attack to run"),
        )
    }
}

impl Validate for HostileValidate {
    fn validate(
        ctx: &Context,
        _changed: &[String],
        _rollout: Option<&Evidence>,
    ) -> Result<Validation, String> {
        match ctx.str("attack").ok_or("config.attack is missing")? {
            "bad_artifacts" => {
                std::fs::write("/scratch/good.txt", "good").map_err(|e| e.to_string())?;
                std::fs::create_dir_all("/scratch/dir").map_err(|e| e.to_string())?;
                attacks::make_symlink("good.txt", "/scratch/link.txt")
                    .map_err(|e| format!("symlink: {e}"))?;
                Ok(Validation {
                    accept: true,
                    reason: "artifacts".into(),
                    artifacts: ["link.txt", "good.txt", "../x", "dir", "missing.txt"]
                        .map(String::from)
                        .to_vec(),
                })
            }
            other => Err(format!("unknown attack {other:?}")),
        }
    }
}

evolve_operator_sdk::export!(validate: HostileValidate);
