//! A gate operator whose configuration schema uses every feature of the vocabulary, so
//! the host's tests can drive `normalize-config` through a real component.

use evolve_operator_sdk::config::{Fields, array, boolean, integer, json, number, object, string};
use evolve_operator_sdk::prelude::*;

pub struct Vocabulary;

fn window_fits(cfg: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let window = cfg.get("window").and_then(Value::as_i64).unwrap_or(0);
    let history = cfg.get("history").and_then(Value::as_i64).unwrap_or(0);
    if window > history {
        return Err(vec![Violation::new("window", "must not exceed history")]);
    }
    Ok(())
}

/// With `extras.probe_scratch` set, normalization lists `/scratch`, leaves a file there,
/// and reports both as a violation (the only text normalize-config sends back besides the
/// configuration): the host's tests check that no later bare call sees the file.
fn probe_scratch(cfg: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let probe = cfg
        .get("extras")
        .and_then(|extras| extras.get("probe_scratch"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !probe {
        return Ok(());
    }
    let mut seen: Vec<String> = match std::fs::read_dir("/scratch") {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => vec![format!("cannot list: {e}")],
    };
    seen.sort();
    let left =
        std::fs::write("/scratch/left-behind", "from an earlier call").map_err(|e| e.to_string());
    Err(vec![Violation::new(
        "extras.probe_scratch",
        format!("saw {seen:?}; left a file: {left:?}"),
    )])
}

impl Operator for Vocabulary {
    const NAME: &'static str = "config_vocabulary";
    const SUMMARY: &'static str = "Test fixture exercising every configuration-schema feature.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "mode",
                string()
                    .required()
                    .choices([json!("strict"), json!("lenient")])
                    .description("How to compare"),
            )
            .field(
                "history",
                integer().default(json!(8)).minimum(1.0).maximum(100.0),
            )
            .field("window", integer().default(json!(4)).minimum(1.0))
            .field(
                "threshold",
                number().default(json!(0)).minimum(0.0).maximum(1.0),
            )
            .field("verbose", boolean().default(json!(false)))
            .field("components", array(string()).minimum(1.0))
            .field(
                "model",
                object(
                    Fields::new()
                        .field("name", string().required())
                        .field("temperature", number().default(json!(1))),
                ),
            )
            .field("extras", object(Fields::new()).additional_properties(true))
            .field("anything", json())
            .refine(window_fits)
            .refine(probe_scratch)
    }
}

impl Gate for Vocabulary {
    fn decide(
        ctx: &Context,
        _child: &ArchiveRow,
        _parent: Option<&ArchiveRow>,
        _input: &GateInput,
    ) -> Result<GateDecision, String> {
        // Echo the configuration it received, so tests can see what reached the guest.
        Ok(GateDecision {
            verdict: Verdict::Keep,
            reason: Value::Object(ctx.config.clone()).to_string(),
        })
    }
}

evolve_operator_sdk::export!(gate: Vocabulary);
