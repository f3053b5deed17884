//! Small pieces most operators of a stage need, so each operator file stays about its
//! own algorithm.

use crate::types::{ArchiveRow, ArchiveView, GenerationStatus};

/// The rows a selector may return: eligible (the host's parent predicate) and with a
/// finite score, in archive order.
pub fn parent_candidates(archive: &ArchiveView) -> Vec<&ArchiveRow> {
    archive
        .rows
        .iter()
        .filter(|r| r.eligible && r.score.is_some_and(f64::is_finite))
        .collect()
}

/// The WIT name of a generation status.
pub fn status_name(s: GenerationStatus) -> &'static str {
    match s {
        GenerationStatus::Complete => "complete",
        GenerationStatus::PendingGate => "pending-gate",
        GenerationStatus::NoProposal => "no-proposal",
        GenerationStatus::InvalidProposal => "invalid-proposal",
        GenerationStatus::RejectedValidation => "rejected-validation",
        GenerationStatus::RejectedDuplicate => "rejected-duplicate",
        GenerationStatus::OperatorFailed => "operator-failed",
        GenerationStatus::CandidateInvalid => "candidate-invalid",
        GenerationStatus::InfrastructureFailed => "infrastructure-failed",
        GenerationStatus::Timeout => "timeout",
        GenerationStatus::Cancelled => "cancelled",
        GenerationStatus::BudgetExhausted => "budget-exhausted",
    }
}

/// Builders for operator unit tests.
pub mod testing {
    use crate::types::{ArchiveRow, ArchiveView, GenerationStatus, Verdict};

    /// A complete, kept row with no parent, children, task vector, cost or annotations.
    /// Adjust other fields with struct update syntax:
    /// `ArchiveRow { children: 3, ..row("2", 2, Some(0.5), true) }`.
    pub fn row(id: &str, generation: u32, score: Option<f64>, eligible: bool) -> ArchiveRow {
        ArchiveRow {
            generation_id: id.into(),
            parent: None,
            generation,
            status: GenerationStatus::Complete,
            score,
            eligible,
            verdict: Some(Verdict::Keep),
            children: 0,
            task_vector: vec![],
            cost_usd: 0.0,
            annotations: "{}".into(),
        }
    }

    /// An archive view of `rows` with no champion named.
    pub fn view(rows: Vec<ArchiveRow>) -> ArchiveView {
        ArchiveView {
            rows,
            champion: None,
        }
    }
}

/// A proposal's usage is what its model calls cost, as the host metered them.
impl From<&crate::model::ChatResponse> for crate::types::Usage {
    fn from(r: &crate::model::ChatResponse) -> Self {
        crate::types::Usage {
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            usd: r.usd,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{row, view};
    use super::*;

    #[test]
    fn candidates_are_eligible_rows_with_finite_scores_in_order() {
        let v = view(vec![
            row("0", 0, Some(0.5), true),
            row("1", 1, Some(0.9), false),
            row("2", 2, None, true),
            row("3", 3, Some(f64::NAN), true),
            row("4", 4, Some(0.1), true),
        ]);
        let ids: Vec<&str> = parent_candidates(&v)
            .iter()
            .map(|r| r.generation_id.as_str())
            .collect();
        assert_eq!(ids, ["0", "4"]);
    }
}
