//! gate/rrsi: RRSI's acceptance rules (docs/rrsi.md). The child is kept only if it is
//! admissible against the incumbent (the champion by default, else the parent):
//!
//! * **floor**: `score ≥ S* − δ`, with `S*` the best certified score of a kept row of
//!   the archive view (never operator state, so it only rises);
//! * **cost rule**: if `ΔS > δ`, `ΔC ≤ β0 + β1·ΔS`; otherwise `w_s·ΔS − w_c·ΔC +
//!   w_n·novelty > 0`. `ΔC` compares the rows' `cost_usd`; a row whose cost is 0 has no
//!   cost telemetry (the SDK's rule), so `ΔC = 0` and the reason says so. A score
//!   outside [0, 1] or a negative or non-finite cost fails the gate with an error
//!   naming it;
//! * **novelty**: the structural components the child's diff touches (classified as in
//!   record/rrsi_component, with the same `layout`) that never had a kept edit.
//!
//! The reason states the incumbent, the child's components and every term, e.g.
//! `keep vs champion 3: floor ok (>= S*-δ = 0.500000); ΔS +0.100000 > δ: …`.

use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::rrsi::{self, Candidate, Component, Measured, config as rc};

pub struct Rrsi;

impl Operator for Rrsi {
    const NAME: &'static str = "rrsi";
    const SUMMARY: &'static str =
        "RRSI: keep the child only above the historical-best floor and within the cost rule.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "noise_band",
                rc::coefficient(0.0, "δ: score differences within it are noise (docs/rrsi.md: estimate it)"),
            )
            .field("beta0", rc::coefficient(0.0, "β0: cost increase (USD) allowed for any real gain"))
            .field("beta1", rc::coefficient(1.0, "β1: cost increase (USD) allowed per unit of score gain"))
            .field("w_s", rc::coefficient(1.0, "w_s: weight of ΔS when the gain is within δ"))
            .field("w_c", rc::coefficient(1.0, "w_c: weight of ΔC (USD) when the gain is within δ"))
            .field("w_n", rc::coefficient(0.01, "w_n: weight of novelty when the gain is within δ"))
            .field(
                "incumbent",
                config::string()
                    .default(json!("champion"))
                    .choices([json!("champion"), json!("parent")])
                    .description("Compare with the archive's champion (else the parent), or always the parent"),
            )
            .field("layout", rc::layout_field())
    }
}

/// The incumbent: the champion's row when configured and present, else the parent.
fn incumbent<'a>(
    ctx: &Context,
    parent: Option<&'a ArchiveRow>,
    archive: &'a ArchiveView,
) -> Option<(&'static str, &'a ArchiveRow)> {
    let champion = archive
        .champion
        .as_deref()
        .and_then(|id| archive.rows.iter().find(|r| r.generation_id == id));
    match (ctx.str("incumbent"), champion) {
        (Some("parent"), _) | (_, None) => parent.map(|p| ("parent", p)),
        (_, Some(c)) => Some(("champion", c)),
    }
}

/// The child's components and their novelty against the archive's kept edits.
fn novelty_of(ctx: &Context, input: &GateInput) -> Result<(Vec<Component>, u32), String> {
    let Some(diff) = input.diff else {
        return Ok((Vec::new(), 0));
    };
    let layout = rc::layout(ctx)?;
    let files = rrsi::classify(&diff.patch, &layout).map_err(|e| e.to_string())?;
    let components = rrsi::components_of(&files);
    let accepted = rrsi::accepted_components(input.archive).map_err(|e| e.to_string())?;
    let n = rrsi::novelty(&components, &accepted);
    Ok((components, n))
}

fn names(cs: &[Component]) -> String {
    if cs.is_empty() {
        return "none".into();
    }
    cs.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ")
}

fn discard(reason: String) -> GateDecision {
    GateDecision {
        verdict: Verdict::Discard,
        reason,
    }
}

/// The whole decision.
pub fn decide(
    ctx: &Context,
    child: &ArchiveRow,
    parent: Option<&ArchiveRow>,
    input: &GateInput,
) -> Result<GateDecision, String> {
    let Some(score) = child.score.filter(|s| s.is_finite()) else {
        return Ok(discard(format!(
            "child has no certified score (status {})",
            status_name(child.status)
        )));
    };
    let params = rc::params(ctx);
    let s_star = rrsi::best_certified(input.archive).map_err(|e| e.to_string())?;
    let (components, novelty) = novelty_of(ctx, input)?;
    let diff_note = if input.diff.is_some() {
        format!("components {}", names(&components))
    } else {
        "no diff from the host: novelty 0".into()
    };
    let Some((role, inc)) = incumbent(ctx, parent, input.archive) else {
        return Ok(discard(format!(
            "no incumbent to compare with; {diff_note}"
        )));
    };
    let Some(inc_score) = inc.score else {
        return Ok(discard(format!(
            "the {role} (generation {}) has no certified score to compare with",
            inc.generation_id
        )));
    };
    let measured = Measured {
        score: inc_score,
        // The SDK reads a cost of 0 as missing telemetry and refuses a negative or
        // non-finite one, so every caller gets the same rule.
        cost: Some(inc.cost_usd),
    };
    let cand = Candidate {
        score,
        cost: Some(child.cost_usd),
        novelty,
    };
    let choice = rrsi::choose(&params, s_star, &measured, &[cand]).map_err(|e| e.to_string())?;
    let admission = &choice.admissions[0];
    let verdict = if choice.winner == Some(0) {
        Verdict::Keep
    } else {
        Verdict::Discard
    };
    let word = if verdict == Verdict::Keep {
        "keep"
    } else {
        "discard"
    };
    Ok(GateDecision {
        verdict,
        reason: format!(
            "{word} vs {role} {}: {}; {diff_note}",
            inc.generation_id,
            admission.reason()
        ),
    })
}

impl Gate for Rrsi {
    fn decide(
        ctx: &Context,
        child: &ArchiveRow,
        parent: Option<&ArchiveRow>,
        input: &GateInput,
    ) -> Result<GateDecision, String> {
        decide(ctx, child, parent, input)
    }
}

evolve_operator_sdk::export!(gate: Rrsi);

#[cfg(test)]
mod tests;
