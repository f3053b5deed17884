//! What a run reports while it works, and how it stops when the user asks it to.
//!
//! Progress: the driver sends [`Event`]s to the [`ProgressSink`] given in
//! [`RunOptions::progress`](super::RunOptions): a generation started, an operator stage
//! started or finished, a trial of an evaluation finished (done/total), an evaluation
//! finished (its score), the champion changed, the budget spent. The CLI renders them
//! (a status line on a terminal, plain lines otherwise); the lifecycle never prints
//! progress itself once a sink is installed.
//!
//! Cancellation: the sandbox's [`Cancel`] token (set on Ctrl-C). An operator call in flight
//! ends as `cancelled`; an evaluation in flight is dropped (`evaluate.rs`; its completed
//! trials stay on disk and are reused on resume). Either way a `status` event `cancelled` names the stage
//! that was stopped, and the run returns an error; the next `evolve run` resumes from the
//! archive (a `cancelled` status is superseded by the attempt's next event, see
//! docs/archive.md).

use super::{Driver, Result, RunError};
use crate::sandbox::Cancel;
use evolve_archive::{Status, StatusBody};
use std::sync::{Arc, RwLock};

/// One thing that happened during a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The run is about to work on `generation` (1-based) of `of`.
    GenerationStarted { generation: u32, of: u32 },
    /// An operator call started (`stage` is `select`, `mutate`, `gate`, …).
    StageStarted { genid: String, stage: String },
    /// An operator call ended: `ok`, or its failure kind (`timeout`, `cancelled`, …).
    StageFinished {
        genid: String,
        stage: String,
        outcome: String,
    },
    /// A framework evaluation started (`purpose`: genesis, candidate or anchor).
    EvaluationStarted { genid: String, purpose: String },
    /// One more trial of the evaluation in progress finished.
    TrialFinished {
        genid: String,
        purpose: String,
        done: usize,
        total: usize,
    },
    /// An evaluation was certified.
    EvaluationFinished {
        genid: String,
        purpose: String,
        outcome: String,
        score: Option<f64>,
    },
    /// The champion (the best eligible score so far).
    Champion { genid: String, score: f64 },
    /// What the experiment has spent, of its budget (0 allows no spend).
    BudgetSpent { spent_usd: f64, budget_usd: f64 },
    /// A line of the run's narrative (what `say` prints without a sink).
    Note(String),
}

/// Receives a run's events. Called from the run's tasks: keep it quick.
pub trait ProgressSink: Send + Sync {
    fn event(&self, event: &Event);
}

/// The sink a run reports to (none by default).
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<dyn ProgressSink>>);

impl Progress {
    pub fn new(sink: Arc<dyn ProgressSink>) -> Progress {
        Progress(Some(sink))
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(sink)"
        } else {
            "Progress(none)"
        })
    }
}

/// The driver's (and its stages') handle on the installed sink.
#[derive(Clone, Default)]
pub(crate) struct Channel(Arc<RwLock<Progress>>);

impl Channel {
    pub(crate) fn install(&self, p: &Progress) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = p.clone();
    }

    /// Send `event`; `false` when no sink is installed.
    pub(crate) fn emit(&self, event: Event) -> bool {
        let guard = self.0.read().unwrap_or_else(|e| e.into_inner());
        match &guard.0 {
            Some(sink) => {
                sink.event(&event);
                true
            }
            None => false,
        }
    }
}

/// Forwards an evaluation's trial progress as [`Event::TrialFinished`], counting trials
/// reused from an interrupted attempt as already done.
pub(crate) struct TrialProgress<'a> {
    pub channel: &'a Channel,
    pub genid: &'a str,
    pub purpose: &'a str,
    pub reused: usize,
}

impl evaluator_harbor::engine::Progress for TrialProgress<'_> {
    fn trial_done(&self, done: usize, total: usize, _: &evaluator_harbor::result::TrialResult) {
        self.channel.emit(Event::TrialFinished {
            genid: self.genid.to_string(),
            purpose: self.purpose.to_string(),
            done: done + self.reused,
            total: total + self.reused,
        });
    }
}

/// The error a cancelled run returns (the CLI adds how to resume).
pub fn interrupted(what: &str) -> RunError {
    RunError::new(format!("the run was interrupted: {what}"))
        .hint("nothing is half-written; `evolve run` resumes where it stopped")
}

impl Driver {
    pub(crate) fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Stop here if the user asked to (between stages: nothing to archive).
    pub(crate) fn check_cancelled(&self, before: &str) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(interrupted(&format!("stopped before {before}")));
        }
        Ok(())
    }

    /// Archive that `stage` of each genid ended `cancelled`, and return the run's error.
    pub(crate) fn cancelled(
        &self,
        genids: &[String],
        stage: &str,
        parent: Option<&str>,
    ) -> RunError {
        for g in genids {
            let body = StatusBody::new(
                Status::Cancelled,
                Some(stage),
                "interrupted by the user",
                parent,
            );
            if let Err(e) = self.append(Some(g), &body) {
                return e;
            }
        }
        self.say(format!("{} {stage}: cancelled", genids.join(", ")));
        interrupted(&format!(
            "{stage} of gen {} ended `cancelled`",
            genids.join(", ")
        ))
    }

    /// Report the budget and the champion (after the archive changed).
    pub(crate) fn report_state(&self, state: &super::State) {
        if let Some(c) = &state.champion {
            self.progress.emit(Event::Champion {
                genid: c.genid.clone(),
                score: c.score,
            });
        }
        self.progress.emit(Event::BudgetSpent {
            spent_usd: state.spent(),
            budget_usd: self.ws.recipe.experiment.budget_usd,
        });
    }
}

/// The genid of a stage call's input (for stage events).
pub(crate) fn genid_of(input: &crate::sandbox::StageInput) -> &str {
    use crate::sandbox::StageInput as I;
    match input {
        I::Select { ctx, .. }
        | I::Rollout { ctx, .. }
        | I::Analyze { ctx, .. }
        | I::Mutate { ctx, .. }
        | I::Validate { ctx, .. }
        | I::Novelty { ctx, .. }
        | I::Gate { ctx, .. }
        | I::Record { ctx, .. }
        | I::Reflect { ctx, .. } => &ctx.generation_id,
        // The meta calls (and calls outside the lifecycle's stages) name no generation.
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Collect(Mutex<Vec<Event>>);
    impl ProgressSink for Collect {
        fn event(&self, e: &Event) {
            self.0.lock().unwrap().push(e.clone());
        }
    }

    #[test]
    fn trial_progress_counts_reused_trials_as_done() {
        let sink = Arc::new(Collect(Mutex::new(Vec::new())));
        let channel = Channel::default();
        assert!(!channel.emit(Event::Note("before".into())));
        channel.install(&Progress::new(sink.clone()));
        let p = TrialProgress {
            channel: &channel,
            genid: "3",
            purpose: "candidate",
            reused: 2,
        };
        let t = evaluator_harbor::result::TrialResult::failed(
            "t",
            0,
            "local",
            evaluator_harbor::result::TrialStatus::InfrastructureFailed,
            evaluator_harbor::result::TrialError::new("x", "y"),
        );
        evaluator_harbor::engine::Progress::trial_done(&p, 1, 4, &t);
        assert_eq!(
            sink.0.lock().unwrap().as_slice(),
            &[Event::TrialFinished {
                genid: "3".into(),
                purpose: "candidate".into(),
                done: 3,
                total: 6
            }]
        );
    }
}
