//! A gate for the lifecycle tests (test component): busy-waits `config.sleep_ms`, then
//! keeps the child if its score beats the parent's. A reliably busy gate lets a test
//! kill the run right after an evaluation event was appended.

use evolve_operator_sdk::config::integer;
use evolve_operator_sdk::prelude::*;

pub struct SlowGate;

impl Operator for SlowGate {
    const NAME: &'static str = "slow_gate";
    const SUMMARY: &'static str = "Waits, then keeps improvements (test component).";

    fn config() -> SchemaBuilder {
        Schema::new().field("sleep_ms", integer().minimum(0.0))
    }
}

impl Gate for SlowGate {
    fn decide(
        ctx: &Context,
        child: &ArchiveRow,
        parent: Option<&ArchiveRow>,
        _input: &GateInput,
    ) -> Result<GateDecision, String> {
        let ms = ctx.i64("sleep_ms").unwrap_or(0) as u128;
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < ms {
            std::hint::spin_loop();
        }
        let (c, p) = (
            child.score.unwrap_or(f64::NEG_INFINITY),
            parent.and_then(|p| p.score).unwrap_or(f64::NEG_INFINITY),
        );
        Ok(GateDecision {
            verdict: if c > p {
                Verdict::Keep
            } else {
                Verdict::Discard
            },
            reason: format!("child {c} vs parent {p}"),
        })
    }
}

evolve_operator_sdk::export!(gate: SlowGate);
