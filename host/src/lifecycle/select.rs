//! Select, once per generation: the champion's select chooses the parents of the
//! generation's fresh children, gen/0's when the champion's gives none, and the decision
//! is archived before any child starts (a resumed run reuses it).

use super::stages::{self, At};
use super::{Driver, Result, RunError, State, child, view};
use crate::sandbox::types::Stage;
use evolve_archive::{SelectBody, SelectFallback, Status, StatusBody};
use evolve_snapshot::Oid;

impl Driver {
    /// One select call for `generation`, or the archived decision of an interrupted run.
    /// Returns one parent per fresh genid, or `None` when select failed (archived).
    ///
    /// Select is loaded from the champion's commit. When the champion is not gen/0 and
    /// its select yields no parents (it cannot be loaded, fails, or returns no eligible
    /// parent), gen/0's select, frozen by `evolve init` and checked there, chooses
    /// instead and the `select` event records the `fallback`: otherwise one champion
    /// with a broken select would fail every later generation. When the last resort
    /// cannot even be loaded, no generation can run, and the run stops with an error.
    pub(super) async fn select(
        &self,
        generation: u32,
        fresh: &[String],
    ) -> Result<Option<Vec<String>>> {
        let state = self.state();
        if let Some(parents) = archived_selection(&state, generation) {
            return Ok(Some(assign(&parents, fresh.len())));
        }
        let genid_text = generation.to_string();
        let (checkout_commit, mut from) = match &state.champion {
            Some(c) => (
                state
                    .row(&c.genid)
                    .and_then(|r| r.evaluation.as_ref())
                    .and_then(|e| e.candidate_commit())
                    .and_then(|s| Oid::from_str(s).ok())
                    .unwrap_or(self.ws.genesis),
                format!("gen/{}", c.genid),
            ),
            None => (self.ws.genesis, "gen/0".to_string()),
        };
        let checkout = self.champion_checkout(checkout_commit)?;
        let mut run_dir = self.ws.paths.run_dir(&genid_text).join("select");
        let mut fallback = None;
        let parents = match self
            .select_call(&state, generation, fresh, &checkout, &run_dir, &from)
            .await?
        {
            Ok(p) => p,
            // A select a driver rebound is not the champion's: it would run again.
            Err(first)
                if checkout_commit != self.ws.genesis && !self.stages.is_rebound(Stage::Select) =>
            {
                self.say(format!(
                    "gen {generation}: the select of the champion ({from}) gave no parents: {}; gen/0's select chooses",
                    first.reason
                ));
                let root = self.commit_checkout(self.ws.genesis)?;
                let dir = self.ws.paths.run_dir(&genid_text).join(SELECT_FALLBACK_DIR);
                match self
                    .select_call(&state, generation, fresh, &root, &dir, "gen/0")
                    .await?
                {
                    Ok(p) => {
                        fallback = Some(SelectFallback {
                            from: from.clone(),
                            reason: child::clip(&self.redactor.redact(&first.reason), 2000),
                        });
                        from = "gen/0".into();
                        run_dir = dir;
                        p
                    }
                    Err(second) => {
                        let reason = format!(
                            "{from}'s select: {}; gen/0's select: {}",
                            first.reason, second.reason
                        );
                        return self.select_failed(fresh, reason, second.unloadable);
                    }
                }
            }
            Err(first) => return self.select_failed(fresh, first.reason, first.unloadable),
        };
        let body = SelectBody {
            generation,
            parents: parents.clone(),
            operator_from: from,
            fallback,
            operator: stages::recorded_identity(&run_dir),
            recipe_sha256: self.recipe.sha256(),
        };
        self.append(None, &body)?;
        self.select_failures
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.say(format!("gen {generation}: select → {}", parents.join(", ")));
        Ok(Some(assign(&parents, fresh.len())))
    }

    /// Call select from `checkout` (the commit `from` names). `Err` says why it yielded
    /// no eligible parents; a cancelled call stops the run.
    async fn select_call(
        &self,
        state: &State,
        generation: u32,
        fresh: &[String],
        checkout: &std::path::Path,
        run_dir: &std::path::Path,
        from: &str,
    ) -> Result<std::result::Result<Vec<String>, NoParents>> {
        let genid_text = generation.to_string();
        let archive_view = view::archive_view(
            &state.rows,
            &state.eligibility,
            state.champion.as_ref(),
            &self.redactor,
        );
        let at = At {
            genid: &genid_text,
            parent: None,
            checkout,
            run_dir: run_dir.to_path_buf(),
            capabilities: Default::default(),
        };
        let out = self.stages.select(at, archive_view, from).await;
        let no = |reason: String| Ok(Err(NoParents::new(reason)));
        let parents = match out {
            Ok(p) => p,
            Err(_) if self.cancel().is_cancelled() => {
                return Err(self.cancelled(fresh, "select", None));
            }
            Err(f) => {
                return Ok(Err(NoParents {
                    unloadable: f.kind == stages::LOAD_FAILED,
                    reason: f.message,
                }));
            }
        };
        if let Some(bad) = parents.iter().find(|p| !state.eligible(p)) {
            return no(format!(
                "select returned `{bad}`, which is not an eligible parent"
            ));
        }
        if parents.is_empty() {
            return no("select returned no parent".into());
        }
        // One parent per child, or one for all: anything longer would only be archived.
        if parents.len() > fresh.len().max(1) {
            return no(format!(
                "malformed_result: select returned {} parent ids for {} children; give at most one per child",
                parents.len(),
                fresh.len()
            ));
        }
        Ok(Ok(parents))
    }

    /// Archive a select that gave no parents as the fresh children's `operator_failed`.
    /// When the last resort (gen/0's select, or a driver's rebound one) could not even be
    /// loaded, every later generation would fail the same way, so the run stops.
    fn select_failed(
        &self,
        fresh: &[String],
        reason: String,
        unloadable: bool,
    ) -> Result<Option<Vec<String>>> {
        self.fail_all(fresh, "select", reason.clone())?;
        if unloadable {
            return Err(RunError::new(format!(
                "no generation can choose a parent: select cannot be loaded ({reason})"
            ))
            .hint("the last resort is gen/0's select (or a driver revision's), frozen by the host: run `evolve verify` on the workspace, then start a new one from the recipe"));
        }
        let failures = 1 + self
            .select_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if failures >= MAX_SELECT_FAILURES {
            return Err(RunError::new(format!(
                "select gave no parents in {failures} consecutive generations; the last: {reason}"
            ))
            .hint("each failure is archived (`evolve log`, `evolve show GENID`); `evolve run` tries again"));
        }
        Ok(None)
    }

    fn fail_all(&self, genids: &[String], stage: &str, reason: String) -> Result<()> {
        self.say(format!("{stage} failed: {reason}"));
        for g in genids {
            let body = StatusBody::new(Status::OperatorFailed, Some(stage), &reason, None);
            self.append(Some(g), &body)?;
        }
        Ok(())
    }
}

/// A run stops once select, with its fallback, gave no parents in this many consecutive
/// generations: a failure that persists would otherwise fail every remaining generation
/// and end the run as `complete`. One or two in a row (a timeout on a loaded machine)
/// only cost their generations.
const MAX_SELECT_FAILURES: u32 = 3;

/// Where the run directory keeps gen/0's select call when the champion's gave no
/// parents (`runs/gen-<n>/select-gen0`).
const SELECT_FALLBACK_DIR: &str = "select-gen0";

/// Why a select call yielded no parents.
struct NoParents {
    reason: String,
    /// Its component or script could not be loaded (not a fault of this generation's
    /// archive: it recurs for as long as the same checkout is loaded).
    unloadable: bool,
}

impl NoParents {
    fn new(reason: String) -> NoParents {
        NoParents {
            reason,
            unloadable: false,
        }
    }
}

/// Parents for `n` children: one parent serves them all; several are used in order,
/// cycling when select returned fewer than there are children.
fn assign(parents: &[String], n: usize) -> Vec<String> {
    (0..n).map(|i| parents[i % parents.len()].clone()).collect()
}

/// The parents an earlier run's select chose for `generation`.
fn archived_selection(state: &State, generation: u32) -> Option<Vec<String>> {
    state.selections.get(&(generation as u64)).cloned()
}
