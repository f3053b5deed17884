//! Train-task selection shared by `rollout/train` and `validate/minibatch_improvement`
//! (one definition, so a validator re-running "the rollout's tasks" picks exactly the
//! same ones), and the WIT names of trial statuses.

use crate::types::TrialStatus;
use sha2::{Digest, Sha256};

/// How the tasks are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    Static,
    GenerationShuffle,
}

impl Sampling {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "static" => Ok(Sampling::Static),
            "generation_shuffle" => Ok(Sampling::GenerationShuffle),
            other => Err(format!(
                "config.sampling must be static or generation_shuffle, not {other:?}"
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Sampling::Static => "static",
            Sampling::GenerationShuffle => "generation_shuffle",
        }
    }
}

/// The hex SHA-256 of `"<seed>:<generation_id>\0<name>"`: a task's place in the
/// generation_shuffle order.
pub fn shuffle_key(seed: i64, generation_id: &str, name: &str) -> String {
    let digest = Sha256::digest(format!("{seed}:{generation_id}\0{name}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The tasks to run: at most `budget` of `train`, chosen as `sampling` says.
pub fn select_tasks(
    train: &[String],
    budget: usize,
    sampling: Sampling,
    seed: i64,
    generation_id: &str,
) -> Vec<String> {
    let mut order: Vec<&String> = train.iter().collect();
    if sampling == Sampling::GenerationShuffle {
        let mut keyed: Vec<(String, &String)> = order
            .into_iter()
            .map(|t| (shuffle_key(seed, generation_id, t), t))
            .collect();
        keyed.sort();
        order = keyed.into_iter().map(|(_, t)| t).collect();
    }
    order.into_iter().take(budget).cloned().collect()
}

/// The WIT name of a trial status.
pub fn trial_status_name(s: TrialStatus) -> &'static str {
    match s {
        TrialStatus::BenchmarkComplete => "benchmark-complete",
        TrialStatus::CandidateInvalid => "candidate-invalid",
        TrialStatus::InfrastructureFailed => "infrastructure-failed",
        TrialStatus::Timeout => "timeout",
        TrialStatus::Cancelled => "cancelled",
    }
}
