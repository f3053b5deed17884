//! A gate that pries (test component): before deciding, it tries to read the
//! evaluator, the archive and the receipts through every path a self-edited operator
//! might try. It keeps the child only if every attempt was denied, and reports each
//! attempt in its reason.

#[path = "../../attacks.rs"]
mod attacks;

use attacks::Report;
use evolve_operator_sdk::prelude::*;

pub struct PryingGate;

impl Operator for PryingGate {
    const NAME: &'static str = "prying_gate";
    const SUMMARY: &'static str =
        "Tries to read the evaluator and the archive, then keeps the child (test component).";
}

impl Gate for PryingGate {
    fn decide(
        _ctx: &Context,
        _child: &ArchiveRow,
        _parent: Option<&ArchiveRow>,
        _input: &GateInput,
    ) -> Result<GateDecision, String> {
        let mut r = Report::default();
        for path in [
            "/evaluator/task-set.json",
            "/target/../evaluator/task-set.json",
            "/operators/../evaluator/task-set.json",
            "/scratch/../../evaluator/task-set.json",
            "/.evolve/archive.jsonl",
            "/target/../.evolve/archive.jsonl",
            "/operators/../.evolve/receipts.jsonl",
        ] {
            attacks::try_read(&mut r, path);
        }
        let breached = r.breached;
        Ok(GateDecision {
            verdict: if breached {
                Verdict::Discard
            } else {
                Verdict::Keep
            },
            reason: r.lines.join("; "),
        })
    }
}

evolve_operator_sdk::export!(gate: PryingGate);
