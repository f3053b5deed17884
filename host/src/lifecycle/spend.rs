//! What a run spends: each child's meter of its stage calls, the budget check before a
//! generation, and the model calls a killed run left unbilled, charged when the next
//! run opens.

use super::train::TrainTasks;
use super::{Driver, Result, RunError, State};
use crate::layout;
use crate::model::MeteredModel;
use crate::recipe::Recipe;
use crate::sandbox::{Capabilities, NoModel};
use crate::workspace::{Workspace, now};
use evaluator_harbor::gateway::TrialSettings;
use evolve_archive::{Archive, EventBody, RepairBody, Row};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// What one child's stage calls spent through host capabilities (train trials the
/// agent reported, model calls metered by the host), charged to the generation.
#[derive(Default)]
pub(crate) struct Meter {
    tasks: std::sync::Mutex<Vec<Arc<TrainTasks>>>,
    models: std::sync::Mutex<Vec<Arc<MeteredModel>>>,
}

impl Meter {
    /// Capabilities with the model (metered against what is left of the budget) and
    /// train trials of the candidate in `checkout`.
    pub(super) fn tasks(&self, d: &Driver, checkout: &Path, stage_dir: &Path) -> Capabilities {
        let t = Arc::new(
            TrainTasks::new(
                &d.ws,
                d.engine.clone(),
                checkout,
                stage_dir,
                d.redactor.clone(),
            )
            .with_settings(self.train_settings(d, stage_dir)),
        );
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(t.clone());
        Capabilities {
            model: self.model_backend(d, stage_dir),
            tasks: t,
        }
    }

    /// Capabilities of a stage that imports only `model`.
    pub(super) fn model(&self, d: &Driver, stage_dir: &Path) -> Capabilities {
        Capabilities {
            model: self.model_backend(d, stage_dir),
            tasks: Arc::new(crate::sandbox::NoTasks),
        }
    }

    /// The protocol's trial settings for a stage's train trials, with a gateway to the
    /// agent's model drawing on what is left of the budget once the generation's other
    /// calls are counted; its calls are logged under `<stage_dir>/train/model/`.
    fn train_settings(&self, d: &Driver, stage_dir: &Path) -> TrialSettings {
        // `run` checked the passed variables before generation 1; one unset since is
        // missing from the trials, which then fail on their own and say so.
        let mut settings = d.ws.engine.trial_settings().unwrap_or_default();
        if let Some(agent) = &d.agent_model {
            let left = d.budget_left() - self.spent();
            match agent.gateway(left.max(0.0), stage_dir.join("train").join("model")) {
                Ok(gateway) => settings.gateway = Some(gateway),
                Err(e) => d.say(format!("warning: train trials get no model gateway: {e}")),
            }
        }
        settings
    }

    fn model_backend(&self, d: &Driver, stage_dir: &Path) -> Arc<dyn crate::sandbox::ModelBackend> {
        let Some(client) = &d.model else {
            return Arc::new(NoModel);
        };
        let left = d.budget_left() - self.spent();
        let scope = Arc::new(client.scope(left.max(0.0), stage_dir.join("model")));
        self.models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(scope.clone());
        scope
    }

    /// What the stages' train trials spent.
    fn tasks_spent(&self) -> f64 {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|t| t.spent_usd())
            .sum()
    }

    pub(crate) fn spent(&self) -> f64 {
        let tasks = self.tasks_spent();
        let models: f64 = self
            .models
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|m| m.spent_usd())
            .sum();
        tasks + models
    }

    /// What the stages spent, for the archive event that charges it.
    pub(crate) fn charge(&self) -> Charge {
        let mut bill = crate::model::Bill::default();
        for m in self.models.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            bill.add(m.bill());
        }
        let mut model_calls = bill.listed_calls().unwrap_or_default();
        for t in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            model_calls.extend(t.model_calls());
        }
        Charge {
            cost_usd: self.tasks_spent() + bill.usd,
            model_calls: (!model_calls.is_empty()).then_some(model_calls),
        }
    }

    /// [`Meter::charge`], unless the stages spent nothing and made no priced call.
    pub(super) fn charged(&self) -> Option<Charge> {
        let charge = self.charge();
        (charge.cost_usd > 0.0 || charge.model_calls.is_some()).then_some(charge)
    }
}

/// What an archive event charges for a child's stage calls: its `cost_usd`, and the
/// ledger ids of the model calls that includes (`model::ledger`: a call the archive lists
/// is never charged again; one it does not list is charged when the next run opens).
pub(crate) struct Charge {
    pub(crate) cost_usd: f64,
    pub(crate) model_calls: Option<Vec<String>>,
}

impl Driver {
    /// Why a generation of `n` children cannot be paid for, if it cannot. The estimate
    /// is the measured cost of the genesis evaluation per child plus the mean operator
    /// spend per generation so far.
    pub(super) fn budget_refusal(&self, state: &State, n: usize) -> Option<String> {
        let budget = self.ws.recipe.experiment.budget_usd;
        let spent = state.spent();
        let per_child = estimate_per_child(state);
        let needed = per_child * n as f64;
        if needed <= 0.0 && spent <= budget {
            return None;
        }
        (spent + needed > budget + 1e-12).then(|| {
            format!("spent ${spent:.4} of ${budget:.4}; the next generation is estimated at ${needed:.4}")
        })
    }
}

/// Estimated cost of one more child: the genesis evaluation's measured cost (a child's
/// evaluation runs the same split) plus the mean non-evaluation spend per committed child.
pub fn estimate_per_child(state: &State) -> f64 {
    let eval = state
        .row("0")
        .and_then(|r| r.evaluation.as_ref())
        .map_or(0.0, |e| e.cost_usd());
    let children: Vec<&Row> = state.rows.iter().filter(|r| r.genid != "0").collect();
    let operator_spend: f64 = children
        .iter()
        .map(|r| {
            r.cost_usd
                - r.evaluation.as_ref().map_or(0.0, |e| e.cost_usd())
                - r.anchors.iter().map(|a| a.cost_usd()).sum::<f64>()
        })
        .sum();
    let mean_ops = if children.is_empty() {
        0.0
    } else {
        operator_spend / children.len() as f64
    };
    eval + mean_ops.max(0.0)
}

/// The experiment's model client (made inside the runtime that uses its connection
/// pool), or `None` when no model is configured.
pub(super) fn model_client(recipe: &Recipe) -> Result<Option<crate::model::ModelClient>> {
    let block = recipe.model.clone().unwrap_or(Value::Null);
    let config = crate::model::ModelConfig::from_recipe(&block)
        .map_err(|e| RunError::new(format!("recipe {e}")))?;
    let models = recipe.models.clone().unwrap_or(Value::Null);
    let named = crate::model::named_models(&models, &block)
        .map_err(|e| RunError::new(format!("recipe {e}")))?;
    if config.is_none() && !named.is_empty() {
        return Err(RunError::new(
            "recipe models: named models inherit from the `model:` block, and none is configured",
        ));
    }
    config
        .map(|c| {
            crate::model::ModelClient::new(c)
                .and_then(|client| client.with_models(named))
                .map_err(|e| RunError::new(format!("recipe {e}")))
        })
        .transpose()
}

/// Where the run keeps its model calls' reservations (`crate::model::ledger`).
pub(super) fn model_ledger_path(ws: &Workspace) -> std::path::PathBuf {
    ws.paths.state().join(crate::model::ledger::LEDGER_FILE)
}

/// Charge the model calls a killed run made that no archive event billed (the events
/// closing their stages list the calls they charged, `model::ledger`): an answered call
/// at what it was charged, a call in flight at its reserved worst case. They are
/// archived in `repair` events that list them in turn (so a second open after a crash
/// here does not charge them twice), and the ledger is emptied. Runs under the run
/// lock, before any call of this run.
pub(super) fn reconcile_model_spend(ws: &Workspace, archive: &mut Archive) -> Result<()> {
    use crate::model::ledger;
    let path = model_ledger_path(ws);
    let calls = ledger::calls(&path).map_err(|e| {
        RunError::new(format!(
            "cannot read the model spend ledger {}: {e}",
            path.display()
        ))
    })?;
    if calls.is_empty() {
        return ledger::clear(&path).map_err(|e| ledger_error(&path, e));
    }
    let left = ledger::unbilled(calls, &billed_model_calls(archive));
    // One event per generation the calls were made for, so the row's spend (what
    // `evolve status` adds up) includes them; calls of no generation get none.
    let mut by_genid: std::collections::BTreeMap<Option<String>, Vec<&ledger::Call>> =
        Default::default();
    for call in &left {
        by_genid
            .entry(genid_of_log(&call.log))
            .or_default()
            .push(call);
    }
    for (genid, calls) in by_genid {
        archive
            .append(
                RepairBody::TYPE,
                genid.as_deref(),
                unbilled_body(&calls).to_map(),
                &now(),
            )
            .map_err(|e| RunError::new(format!("archive: {e}")))?;
    }
    ledger::clear(&path).map_err(|e| ledger_error(&path, e))
}

fn ledger_error(path: &std::path::Path, e: std::io::Error) -> RunError {
    RunError::new(format!(
        "cannot empty the model spend ledger {}: {e}",
        path.display()
    ))
}

/// The ledger ids every certified archive event lists as calls its `cost_usd` includes.
/// Every event is read, whatever its type: the rule is the key, not the event.
fn billed_model_calls(archive: &Archive) -> std::collections::HashSet<String> {
    archive
        .events()
        .iter()
        .filter(|e| e.certified)
        .filter_map(|e| e.event.body.get(crate::model::ledger::MODEL_CALLS_KEY))
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// The `repair` event body that charges `calls` of one generation.
fn unbilled_body(calls: &[&crate::model::ledger::Call]) -> RepairBody {
    let answered = calls.iter().filter(|c| c.settled_usd.is_some()).count();
    let logs: std::collections::BTreeSet<&str> = calls.iter().map(|c| c.log.as_str()).collect();
    RepairBody {
        what: "model calls of a killed run that no event charged: answered ones at their charge, ones in flight at their reserved worst case".into(),
        model_calls: Some(calls.iter().map(|c| c.id.clone()).collect()),
        answered: Some(answered as u64),
        in_flight: Some((calls.len() - answered) as u64),
        logs: Some(logs.into_iter().map(str::to_string).collect()),
        cost_usd: Some(calls.iter().map(|c| c.charge()).sum::<f64>()),
        ..RepairBody::default()
    }
}

/// The generation whose stage wrote into `log` (`…/runs/gen-<genid>/…`), if any. Read
/// from the path's own components: the killed run may have named the workspace by
/// another (relative) path than this one does.
fn genid_of_log(log: &str) -> Option<String> {
    let parts: Vec<&str> = std::path::Path::new(log)
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .collect();
    // `runs/gen-<id>/…` (a stage call's log) or `runs/evaluations/<purpose>/gen-<id>/…`
    // (a trial's calls through the agent's gateway).
    let runs = parts.iter().rposition(|p| *p == layout::RUNS_DIR)?;
    let rest = &parts[runs + 1..];
    let at = match rest.first() {
        Some(&"evaluations") => 2,
        _ => 0,
    };
    rest.get(at)
        .and_then(|p| p.strip_prefix("gen-"))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use evolve_archive::{EventBody, RepairBody, StatusBody};

    #[test]
    fn a_log_names_its_generation_for_stage_calls_and_evaluations() {
        let of = |p: &str| super::genid_of_log(p);
        assert_eq!(
            of("/w/ws/runs/gen-3/mutate/model/model.jsonl").as_deref(),
            Some("3")
        );
        assert_eq!(
            of("ws/runs/evaluations/candidate/gen-1.2/attempt-1/model/t__r0-1/model.jsonl")
                .as_deref(),
            Some("1.2")
        );
        assert_eq!(
            of("/runs/ws/runs/evaluations/genesis/gen-0/attempt-2/model/x/m").as_deref(),
            Some("0")
        );
        assert_eq!(of("ws/runs/evaluations/gen-1/model.jsonl"), None);
        assert_eq!(of("ws/other/gen-1/model.jsonl"), None);
    }

    #[test]
    fn bodies_list_model_calls_under_the_ledgers_key() {
        // The ledger finds what the archive charged by this key, whatever the event.
        let key = crate::model::ledger::MODEL_CALLS_KEY;
        let calls = Some(vec!["call-1".to_string()]);
        let repair = RepairBody {
            model_calls: calls.clone(),
            ..RepairBody::default()
        };
        let status = StatusBody {
            model_calls: calls,
            ..StatusBody::default()
        };
        assert!(repair.to_map().contains_key(key));
        assert!(status.to_map().contains_key(key));
    }
}
