//! Agent-driven runs (`evolve run --driver COMPONENT`): an outer agent revises the
//! recipe between generations. The lifecycle and its boundaries stay exactly those of a
//! recipe-driven run; only which operators (and configs) the stages bind can change.
//!
//! * Before each fresh generation `N` (so after generation `N-1` completed), the driver
//!   component is called once in the sandbox — a fresh scratch directory, the metered
//!   `model`, nothing else — with the public feedback projection ([`feedback`]).
//! * Whatever it returns is checked by the host ([`revision`]) and archived as a
//!   `driver_revision` event, accepted or refused with the reason.
//! * An accepted revision becomes the active recipe: its SHA-256 is stamped on every
//!   later `select` event (the generation's certified record), its full text is in the
//!   archived event, and a stage rebound to another built-in loads that component from
//!   a host-owned frozen set, `.evolve/recipes/<sha256>/operators/<stage>.wasm`, checked
//!   against the archived digest at every load. Stages a revision leaves on gen/0's
//!   operator keep loading from their checkout as before (self-edits included).
//! * When a `--driver` session ends, one explicit sealed acceptance compares the
//!   baseline (gen/0) with the final champion on the same frozen sealed split.
//!
//! See docs/driver.md.

mod audit;
mod feedback;
mod revision;

pub use audit::{recipe_digests, verify_recipes, verify_recipes_in};

use super::evaluate::EvalRequest;
use super::stages::write_json;
use super::{Driver, Result, RunError, State, fmt_score};
use crate::builtin;
use crate::layout;
use crate::model::Bill;
use crate::recipe;
use crate::sandbox::types::{DriverFeedback, Stage};
use crate::sandbox::{
    Capabilities, Grants, Limits, LoadedOperator, NoModel, NoTasks, Sandbox, StageInput,
    StageOutput,
};
use crate::workspace::Workspace;
use evaluator_harbor::split::SplitName;
use evolve_archive::{AcceptanceBody, Archive, DriverRevisionBody, EventBody, Row};
use evolve_snapshot::Oid;
use feedback::Marks;
use revision::{Accepted, Checker, Rebinding};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The archive event of one driver call (accepted, refused, kept or failed).
pub const DRIVER_EVENT: &str = DriverRevisionBody::TYPE;
/// The archive event of the sealed acceptance at the end of a `--driver` session.
pub const ACCEPTANCE_EVENT: &str = AcceptanceBody::TYPE;

/// Longest proposal text kept verbatim in the archive (longer ones keep a digest).
const MAX_ARCHIVED_PROPOSAL: usize = 64 << 10;

/// The driver component of a session, checked and configured.
pub struct AgentDriver {
    sandbox: Arc<Sandbox>,
    op: LoadedOperator,
    /// Its `describe()` name.
    name: String,
    /// Normalized by its own `normalize-config`.
    config: Map<String, Value>,
    limits: Limits,
}

impl AgentDriver {
    /// Load `spec` — a built-in driver (`stall_swap` or `driver/stall_swap`) or a
    /// component file — check it against the driver world exactly as any operator is
    /// checked for its stage, and normalize `config` (JSON text) with its own schema.
    pub async fn load(sandbox: Arc<Sandbox>, spec: &str, config: &str) -> Result<AgentDriver> {
        let op = load_component(&sandbox, spec)?;
        let name = describe(&sandbox, &op).await?;
        let config = normalize(&sandbox, &op, spec, config).await?;
        Ok(AgentDriver {
            sandbox,
            op,
            name,
            config,
            limits: Limits::default(),
        })
    }

    fn identity(&self) -> Value {
        json!({"name": self.name, "origin": self.op.origin, "sha256": crate::sandbox::hex(&self.op.digest)})
    }
}

fn load_component(sandbox: &Sandbox, spec: &str) -> Result<LoadedOperator> {
    let builtin_name = spec.strip_prefix("driver/").unwrap_or(spec);
    let looks_like_path =
        spec.ends_with(".wasm") || (spec.contains('/') && !spec.starts_with("driver/"));
    if !looks_like_path && let Some(found) = builtin::find("driver", builtin_name) {
        return sandbox
            .load_bytes(
                Stage::Driver,
                found.bytes,
                format!("builtin:driver/{builtin_name}"),
            )
            .map_err(|e| RunError::new(format!("--driver: {e}")));
    }
    let path = Path::new(spec);
    if !path.is_file() {
        let known: Vec<&str> = builtin::EMBEDDED
            .iter()
            .filter(|o| o.stage == "driver")
            .map(|o| o.name)
            .collect();
        return Err(RunError::new(format!(
            "--driver `{spec}` is neither a built-in driver nor a component file"
        ))
        .hint(format!("built-in drivers: {}", known.join(", "))));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| RunError::new(format!("--driver: cannot read {}: {e}", path.display())))?;
    sandbox
        .load_bytes(Stage::Driver, &bytes, path.display().to_string())
        .map_err(|e| {
            RunError::new(format!("--driver: {e}"))
                .hint("a driver exports the driver-operator world (evolve_operator_sdk::export!(driver: T))")
        })
}

async fn meta_call(
    sandbox: &Sandbox,
    op: &LoadedOperator,
    input: StageInput,
) -> Result<StageOutput> {
    let report = sandbox
        .call_bare(op, input, std::time::Duration::from_secs(10))
        .await
        .map_err(|e| RunError::new(format!("cannot create a scratch directory: {e}")))?;
    report
        .outcome
        .map_err(|f| RunError::new(format!("--driver {}: {f} ({})", op.origin, f.kind())))
}

async fn describe(sandbox: &Sandbox, op: &LoadedOperator) -> Result<String> {
    match meta_call(sandbox, op, StageInput::Describe).await? {
        StageOutput::Description(d) => Ok(d.name),
        _ => Err(RunError::new(
            "--driver: describe() returned something else",
        )),
    }
}

async fn normalize(
    sandbox: &Sandbox,
    op: &LoadedOperator,
    spec: &str,
    raw: &str,
) -> Result<Map<String, Value>> {
    match meta_call(sandbox, op, StageInput::NormalizeConfig(raw.to_string())).await? {
        StageOutput::NormalizedConfig(Ok(map)) => Ok(map),
        StageOutput::NormalizedConfig(Err(found)) => {
            let lines: Vec<String> = found
                .iter()
                .map(|v| {
                    let path = if v.path.is_empty() {
                        "(config)"
                    } else {
                        &v.path
                    };
                    format!("{path}: {}", v.message)
                })
                .collect();
            // One line (the CLI prints an error as one escaped line): the messages come
            // from the driver component.
            Err(RunError::new(format!(
                "--driver-config does not fit {spec}: {}",
                lines.join("; ")
            ))
            .hint(format!(
                "`evolve operator describe {spec}` shows its configuration"
            )))
        }
        _ => Err(RunError::new(
            "--driver: normalize-config returned something else",
        )),
    }
}

/// One recipe in the history of a session.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The first generation that runs under it.
    pub from_generation: u32,
    pub sha256: String,
    /// The complete normalized recipe.
    pub recipe: Value,
    pub rebound: BTreeMap<String, Rebinding>,
}

/// gen/0's recipe and every accepted revision, oldest first (never empty).
#[derive(Debug, Clone)]
pub(crate) struct RecipeHistory {
    entries: Vec<Entry>,
}

impl RecipeHistory {
    pub fn active(&self) -> &Entry {
        self.entries
            .last()
            .unwrap_or_else(|| unreachable!("a history starts with gen/0's recipe"))
    }

    fn genesis(&self) -> &Entry {
        &self.entries[0]
    }

    /// The recipe generation `g` ran (or runs) under.
    pub fn in_force(&self, g: u32) -> &Entry {
        self.entries
            .iter()
            .rev()
            .find(|e| e.from_generation <= g)
            .unwrap_or_else(|| self.genesis())
    }
}

/// The active recipe of a run: read from gen/0 and the certified archive at open,
/// changed only by accepted revisions.
pub struct RecipeState {
    history: Mutex<RecipeHistory>,
}

impl RecipeState {
    /// gen/0's recipe plus every accepted revision in the archive; the latest is applied
    /// to `stages` (a resumed run keeps the revised recipe, with or without `--driver`).
    pub fn restore(
        ws: &Workspace,
        archive: &Archive,
        stages: &super::stages::Stages,
    ) -> Result<RecipeState> {
        let genesis = genesis_recipe(ws)?;
        let mut entries = vec![Entry {
            from_generation: 0,
            sha256: evolve_archive::canonical_sha256(&genesis),
            recipe: genesis,
            rebound: BTreeMap::new(),
        }];
        for e in archive
            .events_of_type(DRIVER_EVENT)
            .iter()
            .filter(|e| e.certified)
        {
            if let Some(entry) = accepted_entry(&e.event.body)? {
                entries.push(entry);
            }
        }
        let history = RecipeHistory { entries };
        if history.entries.len() > 1 {
            apply(ws, stages, history.active())?;
        }
        Ok(RecipeState {
            history: Mutex::new(history),
        })
    }

    fn history(&self) -> RecipeHistory {
        self.history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// SHA-256 of the active recipe (stamped on each generation's `select` event).
    pub fn sha256(&self) -> String {
        self.history().active().sha256.clone()
    }

    fn push(&self, entry: Entry) {
        self.history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .push(entry);
    }
}

/// gen/0's normalized recipe, read from its commit (never the working tree).
pub(crate) fn genesis_recipe(ws: &Workspace) -> Result<Value> {
    genesis_recipe_in(&ws.store, ws.genesis)
}

/// gen/0's recipe, normalized and canonical, from the commit `genesis` in `store` (a
/// workspace's repository or an evidence bundle's).
pub(crate) fn genesis_recipe_in(
    store: &evolve_snapshot::Store,
    genesis: evolve_snapshot::Oid,
) -> Result<Value> {
    let bytes = store
        .read_blob(genesis, layout::RECIPE_FILE, 1 << 20)
        .map_err(|e| RunError::new(format!("cannot read gen/0's recipe: {e}")))?
        .ok_or_else(|| RunError::new("gen/0 has no recipe.yaml"))?;
    let checked = recipe::check_shape(&String::from_utf8_lossy(&bytes));
    checked
        .normalized
        .map(|r| canonical(&r))
        .ok_or_else(|| RunError::new("gen/0's recipe.yaml is invalid"))
}

/// `v` as it reads back from canonical JSON (the archive's form): numbers compare and
/// hash alike whichever way they were written (`0` and `0.0`).
pub(crate) fn canonical(v: &Value) -> Value {
    serde_json::from_slice(&evolve_archive::canonical_bytes(v)).unwrap_or_else(|_| v.clone())
}

/// The recipe an accepted `driver_revision` event made active, checked against its
/// archived digest; `None` for any other outcome.
fn accepted_entry(body: &Map<String, Value>) -> Result<Option<Entry>> {
    if body.get("accepted") != Some(&json!(true)) {
        return Ok(None);
    }
    let bad = |what: &str| {
        RunError::new(format!("archived driver revision: {what}")).hint("run `evolve verify`")
    };
    let recipe = body
        .get("recipe")
        .cloned()
        .ok_or_else(|| bad("no recipe"))?;
    let sha256 = body
        .get("recipe_sha256")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no recipe_sha256"))?;
    if evolve_archive::canonical_sha256(&recipe) != sha256 {
        return Err(bad("the recipe does not match its recipe_sha256"));
    }
    let after = body
        .get("after_generation")
        .and_then(Value::as_u64)
        .and_then(|g| u32::try_from(g).ok())
        .ok_or_else(|| bad("no after_generation"))?;
    Ok(Some(Entry {
        from_generation: after + 1,
        sha256: sha256.to_string(),
        recipe,
        rebound: rebound_of(body.get("rebound")),
    }))
}

fn rebound_of(v: Option<&Value>) -> BTreeMap<String, Rebinding> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(stage, r)| {
            Some((
                stage.clone(),
                Rebinding {
                    operator: r.get("operator")?.as_str()?.to_string(),
                    sha256: r.get("component_sha256")?.as_str()?.to_string(),
                },
            ))
        })
        .collect()
}

fn rebound_json(rebound: &BTreeMap<String, Rebinding>) -> Value {
    Value::Object(
        rebound
            .iter()
            .map(|(s, r)| {
                (
                    s.clone(),
                    json!({"operator": r.operator, "component_sha256": r.sha256}),
                )
            })
            .collect(),
    )
}

/// Where a recipe's rebound components are frozen (host-only, like the archive).
pub(crate) fn frozen_dir(ws: &Workspace, sha256: &str) -> PathBuf {
    frozen_root(ws).join(sha256)
}

/// Where the components of every accepted revision's rebound stages are frozen, one
/// directory per recipe digest.
pub(crate) fn frozen_root(ws: &Workspace) -> PathBuf {
    ws.paths.state().join("recipes")
}

/// Make `entry` the recipe `stages` run: its bindings, and its rebound components frozen
/// (from the built-ins, each checked against its archived digest).
fn apply(ws: &Workspace, stages: &super::stages::Stages, entry: &Entry) -> Result<()> {
    let parsed: crate::recipe::Recipe = serde_json::from_value(entry.recipe.clone())
        .map_err(|e| RunError::new(format!("the active recipe has an unexpected shape: {e}")))?;
    let dir = frozen_dir(ws, &entry.sha256);
    let mut rebound = BTreeMap::new();
    for (stage, r) in &entry.rebound {
        freeze(&dir, stage, r)?;
        rebound.insert(
            stage.clone(),
            super::stages::Rebound {
                dir: dir.clone(),
                sha256: r.sha256.clone(),
            },
        );
    }
    write_json(&dir.join("recipe.json"), &entry.recipe);
    stages.revise(parsed.operators, rebound);
    Ok(())
}

/// Write the built-in `r` names as `<dir>/operators/<stage>.wasm` unless it is there.
fn freeze(dir: &Path, stage: &str, r: &Rebinding) -> Result<()> {
    let path = dir.join(layout::component_path(stage));
    if std::fs::read(&path).is_ok_and(|b| evolve_archive::sha256_hex(&b) == r.sha256) {
        return Ok(());
    }
    let found = builtin::find(stage, &r.operator).ok_or_else(|| {
        RunError::new(format!(
            "the active recipe binds {stage}/{}, which this evolve has no built-in for",
            r.operator
        ))
    })?;
    if evolve_archive::sha256_hex(found.bytes) != r.sha256 {
        return Err(RunError::new(format!(
            "the built-in {stage}/{} differs from the component the archived revision froze ({})",
            r.operator, r.sha256
        ))
        .hint("resume with the evolve build that made the revision"));
    }
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)
            .map_err(|e| RunError::new(format!("cannot create {}: {e}", p.display())))?;
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, found.bytes)
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|e| RunError::new(format!("cannot freeze {}: {e}", path.display())))
}

/// How one driver call ended.
enum Outcome {
    Accepted(Box<Accepted>, String),
    Refused(Vec<String>, String),
    Kept,
    Failed(String),
}

impl Driver {
    /// Attach the session's agent driver (`evolve run --driver`).
    pub fn set_agent(&mut self, agent: AgentDriver) {
        self.agent = Some(agent);
    }

    /// Before fresh generation `generation`: call the driver with the feedback after
    /// generation `generation - 1`, check and archive what it returns, and apply an
    /// accepted revision. Once per generation: an archived call is not repeated.
    pub(crate) async fn drive(&self, generation: u32) -> Result<()> {
        let Some(agent) = &self.agent else {
            return Ok(());
        };
        let after = generation.saturating_sub(1);
        let state = self.state();
        // A generation whose select is archived already runs under the recipe it stamped.
        if self.driven_after(after) || state.selections.contains_key(&u64::from(generation)) {
            return Ok(());
        }
        let history = self.recipe.history();
        let fb = feedback::project(&state, &history, &self.marks(), &self.redactor, after);
        let dir = self
            .ws
            .paths
            .runs()
            .join("driver")
            .join(format!("after-gen-{after}"));
        let (outcome, spent) = self.call_driver(agent, &history, fb, &dir, after).await?;
        self.archive_outcome(agent, &history, after, outcome, spent)
    }

    fn driven_after(&self, after: u32) -> bool {
        let a = self.archive.lock().unwrap_or_else(|p| p.into_inner());
        a.events_of_type(DRIVER_EVENT).iter().any(|e| {
            e.certified
                && e.event.body.get("after_generation").and_then(Value::as_u64)
                    == Some(after as u64)
        })
    }

    fn marks(&self) -> Marks {
        let a = self.archive.lock().unwrap_or_else(|p| p.into_inner());
        let genids = |t: &str, pick: &dyn Fn(&Map<String, Value>) -> bool| {
            a.events_of_type(t)
                .iter()
                .filter(|e| e.certified && pick(&e.event.body))
                .filter_map(|e| e.event.genid.clone())
                .collect()
        };
        Marks {
            record_failed: genids("record", &|b| b.contains_key("error")),
            reflected: genids("playbook", &|_| true),
        }
    }

    /// One sandboxed call: scratch only, the metered model. Returns the checked outcome
    /// and what the call's model calls were charged.
    async fn call_driver(
        &self,
        agent: &AgentDriver,
        history: &RecipeHistory,
        fb: DriverFeedback,
        dir: &Path,
        after: u32,
    ) -> Result<(Outcome, Bill)> {
        let _ = std::fs::remove_dir_all(dir);
        let scratch = dir.join("scratch");
        std::fs::create_dir_all(&scratch)
            .map_err(|e| RunError::new(format!("cannot create {}: {e}", scratch.display())))?;
        write_json(&dir.join("input.json"), &feedback::to_json(&fb));
        let meter = self.model.as_ref().map(|client| {
            let left = self.budget_left();
            Arc::new(client.scope(left.max(0.0), dir.join("model")))
        });
        let capabilities = Capabilities {
            model: match &meter {
                Some(m) => m.clone(),
                None => Arc::new(NoModel),
            },
            tasks: Arc::new(NoTasks),
        };
        let mut ctx = self.stages.context(Stage::Driver, &after.to_string(), None);
        ctx.config = feedback::canonical_text(&Value::Object(agent.config.clone()));
        ctx.deadline_ms = agent.limits.timeout.as_millis() as u64;
        let report = agent
            .sandbox
            .call(
                &agent.op,
                &Grants::scratch_only(&scratch),
                &agent.limits,
                capabilities,
                StageInput::Driver { ctx, feedback: fb },
            )
            .await;
        let _ = report.write_logs(dir, "operator");
        let spent = meter.map(|m| m.bill()).unwrap_or_default();
        let outcome = match report.outcome {
            Ok(StageOutput::Revision(None)) => Outcome::Kept,
            Ok(StageOutput::Revision(Some(r))) => {
                self.check(agent, history, &r.recipe, r.reason).await
            }
            Ok(_) => Outcome::Failed("the driver returned something other than a revision".into()),
            Err(f) => Outcome::Failed(format!("{f} ({})", f.kind())),
        };
        write_json(&dir.join("result.json"), &outcome_json(&outcome));
        Ok((outcome, spent))
    }

    async fn check(
        &self,
        agent: &AgentDriver,
        history: &RecipeHistory,
        text: &str,
        why: String,
    ) -> Outcome {
        let proposal = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            _ => {
                return Outcome::Refused(
                    vec!["the revision's recipe is not a JSON object".into()],
                    why,
                );
            }
        };
        let active = history.active();
        let genesis_components = self.genesis_components(history);
        let checker = Checker {
            sandbox: &agent.sandbox,
            active: &active.recipe,
            active_rebound: &active.rebound,
            genesis: &history.genesis().recipe,
            genesis_components: &genesis_components,
        };
        match checker.check(&proposal).await {
            Ok(a) if a.sha256 == active.sha256 => Outcome::Kept,
            Ok(a) => Outcome::Accepted(Box::new(a), why),
            Err(reasons) => Outcome::Refused(reasons, why),
        }
    }

    /// gen/0's frozen component of every stage its recipe binds, read from its commit.
    fn genesis_components(&self, history: &RecipeHistory) -> BTreeMap<String, Vec<u8>> {
        let stages = history.genesis().recipe["operators"]
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        stages
            .into_iter()
            .filter_map(|stage| {
                let rel = layout::component_path(&stage);
                let bytes = self
                    .ws
                    .store
                    .read_blob(self.ws.genesis, &rel, 64 << 20)
                    .ok()??;
                Some((stage, bytes))
            })
            .collect()
    }

    /// Archive the call (every outcome), then make an accepted recipe active.
    fn archive_outcome(
        &self,
        agent: &AgentDriver,
        history: &RecipeHistory,
        after: u32,
        outcome: Outcome,
        spent: Bill,
    ) -> Result<()> {
        let previous = history.active().sha256.clone();
        let mut body = DriverRevisionBody {
            after_generation: after,
            driver: agent.identity(),
            previous_recipe_sha256: previous.clone(),
            cost_usd: spent.usd,
            model_calls: spent.listed_calls(),
            recipe_sha256: previous.clone(),
            ..DriverRevisionBody::default()
        };
        let line = match &outcome {
            Outcome::Accepted(a, why) => {
                body.outcome = "accepted".into();
                body.accepted = true;
                body.driver_reason = Some(clip(why));
                body.changed = Some(a.changed.clone());
                body.recipe_sha256 = a.sha256.clone();
                body.recipe = Some(a.recipe.clone());
                body.rebound = Some(rebound_json(&a.rebound));
                format!(
                    "accepted ({} changed): recipe {}",
                    a.changed.join(", "),
                    short(&a.sha256)
                )
            }
            Outcome::Refused(reasons, why) => {
                body.outcome = "refused".into();
                body.reason = Some(reasons.join("; "));
                body.driver_reason = Some(clip(why));
                format!("refused: {}", reasons.join("; "))
            }
            Outcome::Kept => {
                body.outcome = "kept".into();
                "kept the active recipe".to_string()
            }
            Outcome::Failed(why) => {
                body.outcome = "failed".into();
                body.reason = Some(clip(&self.redactor.redact(why)));
                format!("failed (the recipe stays): {why}")
            }
        };
        self.append(None, &body)?;
        self.say(format!("driver after gen {after}: {line}"));
        if let Outcome::Accepted(a, _) = outcome {
            let entry = Entry {
                from_generation: after + 1,
                sha256: a.sha256,
                recipe: a.recipe,
                rebound: a.rebound,
            };
            apply(&self.ws, &self.stages, &entry)?;
            self.recipe.push(entry);
        }
        Ok(())
    }

    /// After a `--driver` session: the baseline (gen/0) and the final champion, each on
    /// the frozen sealed split (evaluated now unless a complete anchor exists), compared
    /// in one archived `acceptance` event.
    pub(crate) async fn sealed_acceptance(&self) -> Result<()> {
        if self.agent.is_none() || self.ws.task_set.split.sealed.is_empty() {
            return Ok(());
        }
        let Some(champion) = self.state().champion.map(|c| c.genid) else {
            return Ok(());
        };
        let baseline = self.sealed_anchor("0").await?;
        let final_ = self.sealed_anchor(&champion).await?;
        let (Some(b), Some(c)) = (baseline, final_) else {
            self.say(
                "sealed acceptance: an anchor evaluation did not complete; nothing to compare",
            );
            return Ok(());
        };
        if b["task_set_hash"] != c["task_set_hash"] {
            return Err(RunError::new(
                "the baseline and champion anchors were evaluated on different task sets",
            ));
        }
        let recipe = self.recipe.sha256();
        if self.accepted_already(&champion, &recipe) {
            return Ok(());
        }
        let delta = match (b["score"].as_f64(), c["score"].as_f64()) {
            (Some(x), Some(y)) => json!(y - x),
            _ => Value::Null,
        };
        let body = AcceptanceBody {
            split: "sealed".into(),
            baseline: b.clone(),
            champion: c.clone(),
            delta,
            recipe_sha256: recipe,
        };
        self.append(None, &body)?;
        self.say(format!(
            "sealed acceptance: gen 0 {} -> gen {champion} {}",
            fmt_score(b["score"].as_f64()),
            fmt_score(c["score"].as_f64())
        ));
        Ok(())
    }

    /// The last sealed acceptance archived, if any (for the run summary).
    pub(crate) fn acceptance(&self) -> Option<Value> {
        let a = self.archive.lock().unwrap_or_else(|p| p.into_inner());
        a.events_of_type(ACCEPTANCE_EVENT)
            .into_iter()
            .rev()
            .find(|e| e.certified)
            .map(|e| Value::Object(e.event.body))
    }

    fn accepted_already(&self, champion: &str, recipe: &str) -> bool {
        let a = self.archive.lock().unwrap_or_else(|p| p.into_inner());
        a.events_of_type(ACCEPTANCE_EVENT).iter().any(|e| {
            e.certified
                && e.event.body["champion"]["genid"] == json!(champion)
                && e.event.body["recipe_sha256"] == json!(recipe)
        })
    }

    /// `genid`'s complete sealed anchor (evaluated now if it has none): its genid,
    /// score, task-set hash and archive line. `None` when the evaluation did not complete.
    async fn sealed_anchor(&self, genid: &str) -> Result<Option<Value>> {
        let state = self.state();
        let row = state
            .row(genid)
            .ok_or_else(|| RunError::new(format!("gen {genid} is not in the archive")))?;
        if !super::anchors::has_complete_anchor(row) {
            let commit = certified_commit(row, genid, self.ws.genesis)?;
            self.say(format!("gen {genid}: sealed acceptance evaluation"));
            let ev = self
                .evaluate(&EvalRequest {
                    genid: genid.to_string(),
                    parent: row.parent.clone(),
                    commit,
                    purpose: "anchor",
                    split: SplitName::Sealed,
                    certified_attempts: super::anchors::anchor_attempts(row),
                })
                .await?;
            self.append_evaluation(genid, &ev)?;
        }
        Ok(anchor_summary(&self.state(), genid))
    }
}

fn certified_commit(row: &Row, genid: &str, genesis: Oid) -> Result<Oid> {
    if genid == "0" {
        return Ok(genesis);
    }
    row.evaluation
        .as_ref()
        .and_then(|e| e.candidate_commit())
        .and_then(|c| Oid::from_str(c).ok())
        .ok_or_else(|| RunError::new(format!("gen {genid} has no certified commit")))
}

fn anchor_summary(state: &State, genid: &str) -> Option<Value> {
    let a = state
        .row(genid)?
        .anchors
        .iter()
        .rev()
        .find(|a| a.outcome() == Some("benchmark_complete"))?;
    Some(json!({
        "genid": genid,
        "score": a.score(),
        "task_set_hash": a.task_set_hash(),
        "evaluator_fingerprint": a.evaluator_fingerprint(),
        "line": a.line,
    }))
}

fn outcome_json(o: &Outcome) -> Value {
    match o {
        Outcome::Accepted(a, why) => {
            json!({"outcome": "accepted", "recipe_sha256": a.sha256, "changed": a.changed, "driver_reason": why})
        }
        Outcome::Refused(r, why) => {
            json!({"outcome": "refused", "reasons": r, "driver_reason": why})
        }
        Outcome::Kept => json!({"outcome": "kept"}),
        Outcome::Failed(why) => json!({"outcome": "failed", "reason": why}),
    }
}

fn clip(s: &str) -> String {
    if s.len() <= MAX_ARCHIVED_PROPOSAL {
        return s.to_string();
    }
    let mut end = MAX_ARCHIVED_PROPOSAL;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} more bytes]", &s[..end], s.len() - end)
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}
