//! How `evolve run` shows a run's progress on stderr, and how Ctrl-C stops it.
//!
//! On a terminal: one status line, rewritten in place (generation and stage, trials
//! done/total, best score so far, elapsed time, budget), with the run's narrative lines
//! printed above it. Otherwise (a pipe, a log file, CI): plain lines, one per event,
//! each stamped with the elapsed time.
//!
//! Events carry text operators chose (a gate's reason in a note, a stage's outcome, a
//! genid), so every line is escaped ([`display::text`]) before it is written: a newline
//! or a carriage return in a reason cannot print a line of its own or overwrite the
//! status line.

use crate::display;
use crate::lifecycle::fmt_score;
use crate::lifecycle::progress::{Event, ProgressSink};
use crate::sandbox::Cancel;
use evaluator_harbor::signals::{Stop, StopSignals};
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What the status line shows.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Status {
    pub generation: Option<(u32, u32)>,
    /// `gen 3 mutate`, `gen 3 evaluate (candidate)`.
    pub activity: Option<String>,
    pub trials: Option<(usize, usize)>,
    pub best: Option<(String, f64)>,
    pub spent_usd: f64,
    pub budget_usd: f64,
}

impl Status {
    /// Fold one event in; returns the plain line it deserves, if any.
    pub fn apply(&mut self, e: &Event) -> Option<String> {
        match e {
            Event::GenerationStarted { generation, of } => {
                self.generation = Some((*generation, *of));
                self.trials = None;
                Some(format!(
                    "generation {generation}/{of} (best {}; {})",
                    self.best_text(),
                    self.budget_text()
                ))
            }
            Event::StageStarted { genid, stage } => {
                self.activity = Some(format!("gen {genid} {stage}"));
                self.trials = None;
                Some(format!("gen {genid}: {stage}"))
            }
            Event::StageFinished {
                genid,
                stage,
                outcome,
            } => (outcome != "ok").then(|| format!("gen {genid}: {stage} ended {outcome}")),
            Event::EvaluationStarted { genid, purpose } => {
                self.activity = Some(format!("gen {genid} evaluate ({purpose})"));
                self.trials = None;
                Some(format!("gen {genid}: evaluating ({purpose})"))
            }
            Event::TrialFinished {
                genid, done, total, ..
            } => {
                self.trials = Some((*done, *total));
                Some(format!("gen {genid}: trial {done}/{total}"))
            }
            Event::EvaluationFinished { .. } => {
                self.trials = None;
                None
            }
            Event::Champion { genid, score } => {
                let changed = self.best.as_ref() != Some(&(genid.clone(), *score));
                self.best = Some((genid.clone(), *score));
                changed.then(|| format!("best so far: {} (gen {genid})", fmt_score(Some(*score))))
            }
            Event::BudgetSpent {
                spent_usd,
                budget_usd,
            } => {
                self.spent_usd = *spent_usd;
                self.budget_usd = *budget_usd;
                None
            }
            Event::Note(line) => Some(line.clone()),
        }
    }

    fn best_text(&self) -> String {
        match &self.best {
            Some((g, s)) => format!("{} gen {g}", fmt_score(Some(*s))),
            None => "-".into(),
        }
    }

    fn budget_text(&self) -> String {
        // An empty float sum is -0.0: never show "$-0.0000".
        let spent = self.spent_usd + 0.0;
        if self.budget_usd > 0.0 {
            format!("${spent:.4} of ${:.4}", self.budget_usd)
        } else {
            format!("${spent:.4} spent, no budget")
        }
    }

    /// The one-line summary shown on a terminal.
    pub fn line(&self, elapsed: Duration) -> String {
        let mut parts = Vec::new();
        if let Some((g, of)) = self.generation {
            parts.push(format!("gen {g}/{of}"));
        }
        if let Some(a) = &self.activity {
            parts.push(a.clone());
        }
        if let Some((d, t)) = self.trials {
            parts.push(format!("trials {d}/{t}"));
        }
        parts.push(format!("best {}", self.best_text()));
        parts.push(clock(elapsed));
        parts.push(self.budget_text());
        parts.join(" · ")
    }
}

/// `1h02m03s`, `2m05s`, `7s`.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s / 60) % 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, sec) => format!("{h}h{m:02}m{sec:02}s"),
    }
}

/// Renders events on stderr.
pub struct Renderer {
    tty: bool,
    started: Instant,
    state: Mutex<(Status, bool)>,
}

impl Renderer {
    pub fn new() -> Renderer {
        Renderer {
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            state: Mutex::new((Status::default(), false)),
        }
    }

    /// Clear the status line (before the summary, or an error, is printed).
    pub fn finish(&self) {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if guard.1 {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            guard.1 = false;
        }
    }
}

/// Terminal width for the status line (`COLUMNS`, else 100).
fn width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|w: &usize| *w >= 20)
        .unwrap_or(100)
}

fn clip(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_string();
    }
    let mut s: String = line.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

impl ProgressSink for Renderer {
    fn event(&self, e: &Event) {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (status, shown) = &mut *guard;
        let plain = status.apply(e);
        let elapsed = self.started.elapsed();
        let mut err = std::io::stderr().lock();
        if !self.tty {
            if let Some(line) = plain {
                let _ = writeln!(err, "[{}] {}", clock(elapsed), display::text(&line));
            }
            return;
        }
        // Narrative lines scroll above the status line; progress only redraws it.
        if let Event::Note(line) = e {
            let _ = writeln!(err, "\r\x1b[2K{}", display::text(line));
        }
        let line = display::text(&status.line(elapsed)).into_owned();
        let _ = write!(err, "\r\x1b[2K{}", clip(&line, width() - 1));
        let _ = err.flush();
        *shown = true;
    }
}

/// Watches for the stop signals while a run works; aborted when dropped.
pub struct Watch {
    task: tokio::task::JoinHandle<()>,
    stopped_by: Arc<OnceLock<Stop>>,
}

impl Watch {
    /// The signal that stopped the run, if one did.
    pub fn stopped_by(&self) -> Option<Stop> {
        self.stopped_by.get().copied()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Install the handlers for SIGINT, SIGTERM and SIGHUP now (inside the runtime `rt`), and
/// watch for them until the returned guard drops: the first sets `cancel` (the stage in
/// flight ends as `cancelled`, and the run returns); the second exits at once, as a crash
/// would (the next `evolve run` recovers, exactly as after `kill -9`). A run left to the
/// signals' default action would die with its trials' containers still running.
pub fn watch(
    rt: &tokio::runtime::Runtime,
    cancel: Cancel,
) -> Result<Watch, crate::command::CliError> {
    let _in = rt.enter();
    let mut signals = StopSignals::install()
        .map_err(|e| crate::command::CliError::usage(format!("cannot handle signals: {e}")))?;
    let stopped_by = Arc::new(OnceLock::new());
    let record = stopped_by.clone();
    let task = tokio::spawn(async move {
        let stop = signals.next().await;
        let _ = record.set(stop);
        cancel.cancel();
        eprintln!(
            "\nevolve: stopping ({}): the current stage ends as `cancelled` (Ctrl-C again exits at once)",
            stop.name()
        );
        let again = signals.next().await;
        eprintln!("\nevolve: exiting at once; the next `evolve run` recovers");
        std::process::exit(i32::from(again.exit_code()));
    });
    Ok(Watch { task, stopped_by })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_has_generation_stage_trials_best_time_and_budget() {
        let mut s = Status::default();
        s.apply(&Event::BudgetSpent {
            spent_usd: 0.25,
            budget_usd: 2.0,
        });
        s.apply(&Event::GenerationStarted {
            generation: 3,
            of: 8,
        });
        assert_eq!(
            s.apply(&Event::Champion {
                genid: "2".into(),
                score: 0.5
            }),
            Some("best so far: 0.5000 (gen 2)".into())
        );
        assert_eq!(
            s.apply(&Event::Champion {
                genid: "2".into(),
                score: 0.5
            }),
            None,
            "an unchanged champion is not repeated"
        );
        s.apply(&Event::EvaluationStarted {
            genid: "3".into(),
            purpose: "candidate".into(),
        });
        let plain = s.apply(&Event::TrialFinished {
            genid: "3".into(),
            purpose: "candidate".into(),
            done: 4,
            total: 10,
        });
        assert_eq!(plain.as_deref(), Some("gen 3: trial 4/10"));
        assert_eq!(
            s.line(Duration::from_secs(125)),
            "gen 3/8 · gen 3 evaluate (candidate) · trials 4/10 · best 0.5000 gen 2 · 2m05s · $0.2500 of $2.0000"
        );
        assert_eq!(
            s.apply(&Event::StageFinished {
                genid: "3".into(),
                stage: "gate".into(),
                outcome: "cancelled".into()
            }),
            Some("gen 3: gate ended cancelled".into())
        );
    }

    #[test]
    fn a_negative_zero_spend_reads_as_zero() {
        let mut s = Status::default();
        s.apply(&Event::BudgetSpent {
            spent_usd: -0.0,
            budget_usd: 0.0,
        });
        assert!(s.line(Duration::ZERO).ends_with("$0.0000 spent, no budget"));
    }

    #[test]
    fn clock_and_clip() {
        assert_eq!(clock(Duration::from_secs(7)), "7s");
        assert_eq!(clock(Duration::from_secs(3723)), "1h02m03s");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("abc", 4), "abc");
    }
}
