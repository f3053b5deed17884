//! An agent driver for the driver tests (test component). It prints everything it
//! receives to stdout (so a test can search the log for what must never reach a
//! driver), then, when `feedback.generation == config.at`, does `config.action`:
//! - `keep`: propose nothing;
//! - `rebind`: bind `config.stage` to `config.operator` with `config.config`;
//! - `evaluator`: propose a different evaluator split (must be refused);
//! - `surface`: widen the surface to everything (must be refused);
//! - `budget`: raise the budget (must be refused);
//! - `not_json`: return a recipe that is not JSON (refused by the host);
//! - `panic`: trap (the run goes on with the active recipe).

use evolve_operator_sdk::config::{integer, json as any_json, string};
use evolve_operator_sdk::prelude::*;

pub struct DriverScripted;

impl Operator for DriverScripted {
    const NAME: &'static str = "driver_scripted";
    const SUMMARY: &'static str =
        "Scripted recipe revisions for the driver tests (test component).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field("action", string().default(json!("keep")))
            .field("at", integer().default(json!(1)).minimum(0.0))
            .field("stage", string().default(json!("select")))
            .field("operator", string().default(json!("greedy")))
            .field("config", any_json().default(json!({})))
    }
}

fn revision(recipe: Value, reason: &str) -> Option<Revision> {
    Some(Revision {
        recipe: recipe.to_string(),
        reason: reason.into(),
    })
}

impl Driver for DriverScripted {
    fn revise(ctx: &Context, feedback: &DriverFeedback) -> Result<Option<Revision>, String> {
        println!("{feedback:#?}");
        let at = ctx.i64("at").unwrap_or(1);
        if i64::from(feedback.generation) != at {
            return Ok(None);
        }
        let text = |k: &str| ctx.str(k).unwrap_or("").to_string();
        Ok(match ctx.str("action").unwrap_or("keep") {
            "rebind" => {
                let binding =
                    json!({"operator": text("operator"), "config": ctx.config.get("config")});
                revision(
                    json!({"operators": {text("stage"): binding}}),
                    "scripted rebind",
                )
            }
            "evaluator" => revision(
                json!({"evaluator": {"dataset": "tasks", "splits": {"train": 0.0, "gate": 1.0, "sealed": 0.0}}}),
                "score on every task",
            ),
            "surface" => revision(json!({"surface": {"include": ["**"]}}), "edit anything"),
            "budget" => revision(
                json!({"experiment": {"name": "test", "budget_usd": 1000}}),
                "more money",
            ),
            "not_json" => Some(Revision {
                recipe: "{not json".into(),
                reason: "garbage".into(),
            }),
            "panic" => panic!("scripted driver panic"),
            _ => None,
        })
    }
}

evolve_operator_sdk::export!(driver: DriverScripted);
