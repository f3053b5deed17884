//! An experiment workspace: a git repository holding the target, the frozen operators,
//! the frozen evaluator and the public key, plus host-only state (archive, receipts,
//! run lock) that no operator is ever granted. See [`crate::layout`] for the file map.
//!
//! Everything the framework trusts is read from `gen/0`'s commit, never from the working
//! tree: a hand edit of `recipe.yaml` or `evaluator/` in the working tree changes nothing.

pub mod evidence;
pub mod harbor;
pub mod init;
pub mod keys;
pub mod protocol;

use crate::layout::{self, Paths};
use crate::recipe::{self, Recipe};
use evaluator_harbor::split::{FrozenTaskSet, SplitName};
use evolve_archive::{Archive, ExperimentKey, PublicKey};
use evolve_snapshot::{Oid, Store};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::fmt;
use std::path::{Path, PathBuf};

/// The frozen engine configuration (`evaluator/engine.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Always `"evolve.engine.v1"`.
    pub schema: String,
    /// `local`, `docker` or `harbor`.
    pub engine: String,
    pub n_concurrent: u32,
    pub coverage_floor: f64,
    pub agent_timeout_is_zero: bool,
    /// The split candidates are evaluated (and selected) on.
    pub primary_split: String,
    /// Local trials run without their sandbox (the recipe's explicit opt-in). Absent when
    /// false, so a contained workspace's fingerprint is what it always was, and an
    /// unconfined one's differs: a reader of the archive sees the weaker isolation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconfined_trials: bool,
    /// The rest of the evaluation protocol ([`protocol`], docs/evaluation.md). Each is
    /// absent at its default, so a workspace whose recipe sets none has the engine file,
    /// and so the runtime fingerprint, it always had; one that sets any differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_sample: Option<protocol::TaskSample>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_retries: u32,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub agent_timeout_multiplier: f64,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub verifier_timeout_multiplier: f64,
    /// Names of the host variables passed to the agent and to the verifier; their values
    /// are read when an evaluation runs ([`EngineConfig::trial_settings`]), never stored.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_env: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier_env: Vec<String>,
    /// What the model gateway enforces for the agent under test (`evaluator.model`): the
    /// allowed models, the token cap, the prices and the endpoint's digest. Frozen here,
    /// so it is part of the runtime fingerprint, and so of every evaluation's contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_model: Option<crate::model::GatewayPolicy>,
    /// The harbor engine's `harbor run` settings (`evaluator.harbor`, defaults resolved)
    /// and the agent's model path ([`harbor::HarborContract`]); absent for the other
    /// engines, so their fingerprints are what they always were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harbor: Option<harbor::HarborContract>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
fn one() -> f64 {
    1.0
}
fn is_one(x: &f64) -> bool {
    *x == 1.0
}

impl EngineConfig {
    /// A local engine that cannot contain its trials can run only a recipe whose trials
    /// are all built-in code (`builtin::framework_code`: the built-in seeds' agent
    /// components and tasks); any other is refused before anything is made or spent.
    /// bubblewrap is probed once per process.
    pub fn refuse_uncontainable(
        &self,
        recipe: &crate::recipe::Recipe,
    ) -> std::result::Result<(), evaluator_harbor::Error> {
        use evaluator_harbor::engine::contain;
        if self.engine != "local" || self.unconfined_trials {
            return Ok(());
        }
        let built_in = crate::builtin::recipe_ships_its_trials(
            recipe.target.seed.as_deref(),
            &recipe.evaluator.dataset,
        );
        match contain::bubblewrap() {
            Ok(_) => Ok(()),
            Err(_) if built_in => Ok(()),
            Err(why) => Err(contain::unavailable(why)),
        }
    }
}

pub const ENGINE_SCHEMA: &str = "evolve.engine.v1";

impl EngineConfig {
    /// The engine configuration a recipe gives; a `static` task sample is chosen once the
    /// task set is frozen ([`EngineConfig::freeze_sample`]).
    pub fn from_recipe(r: &Recipe) -> EngineConfig {
        let mut config = EngineConfig {
            schema: ENGINE_SCHEMA.into(),
            engine: r.evaluator.engine.clone(),
            n_concurrent: r.evaluator.n_concurrent,
            coverage_floor: r.evaluator.coverage_floor,
            agent_timeout_is_zero: true,
            primary_split: "gate".into(),
            unconfined_trials: r.evaluator.unconfined_trials,
            task_sample: None,
            max_retries: 0,
            agent_timeout_multiplier: 1.0,
            verifier_timeout_multiplier: 1.0,
            agent_env: Vec::new(),
            verifier_env: Vec::new(),
            agent_model: None,
            harbor: None,
        };
        config.protocol_from(r);
        config
    }

    /// The runtime fingerprint stamped on every evaluation: the engine configuration and
    /// the evaluator's version.
    pub fn runtime_fingerprint(&self) -> String {
        evolve_archive::canonical_sha256(&json!({
            "engine": self,
            "evaluator_harbor": env!("CARGO_PKG_VERSION"),
        }))
    }
}

/// A workspace problem, for the user.
#[derive(Debug)]
pub struct WorkspaceError {
    pub what: String,
    pub hint: Option<String>,
    /// Lines listed under `what` (every problem of a recipe), each shown on its own.
    pub details: Vec<String>,
}

impl WorkspaceError {
    pub fn new(what: impl Into<String>) -> Self {
        WorkspaceError {
            what: what.into(),
            hint: None,
            details: Vec::new(),
        }
    }
    pub fn hint(mut self, h: impl Into<String>) -> Self {
        self.hint = Some(h.into());
        self
    }
    pub fn details(mut self, lines: Vec<String>) -> Self {
        self.details = lines;
        self
    }
}

impl fmt::Display for WorkspaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)?;
        for line in &self.details {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for WorkspaceError {}

pub type Result<T> = std::result::Result<T, WorkspaceError>;

pub(crate) fn err(what: impl Into<String>) -> WorkspaceError {
    WorkspaceError::new(what)
}

/// An opened workspace: its frozen inputs, read from `gen/0`.
pub struct Workspace {
    pub paths: Paths,
    pub store: Store,
    pub recipe: Recipe,
    pub experiment_id: String,
    pub public_key: PublicKey,
    pub task_set: FrozenTaskSet,
    pub engine: EngineConfig,
    /// `gen/0`'s commit.
    pub genesis: Oid,
    /// `gen/0`'s `evaluator/` tree: every evaluation's must equal it.
    pub evaluator_tree: Oid,
}

/// Largest frozen file the host reads back from a commit.
const MAX_FROZEN_FILE: usize = 64 << 20;

impl Workspace {
    /// Open the workspace at `dir`.
    pub fn open(dir: &Path) -> Result<Workspace> {
        let root = std::fs::canonicalize(dir).map_err(|e| {
            err(format!("cannot open workspace {}: {e}", dir.display()))
                .hint("create one with `evolve init DIR --recipe RECIPE`")
        })?;
        let not_ws = || {
            err(format!("{} is not an evolve workspace", root.display()))
                .hint("create one with `evolve init DIR --recipe RECIPE`")
        };
        if !root.join(".git").exists() {
            return Err(not_ws());
        }
        let store = Store::open(&root)
            .map_err(|e| err(format!("cannot open the workspace repository: {e}")))?;
        let genesis = store
            .tag_target(&layout::tag_name("0"))
            .map_err(|e| err(e.to_string()))?
            .ok_or_else(not_ws)?;
        let read = |path: &str| -> Result<String> {
            let bytes = store
                .read_blob(genesis, path, MAX_FROZEN_FILE)
                .map_err(|e| err(format!("cannot read {path} from gen/0: {e}")))?
                .ok_or_else(|| err(format!("gen/0 has no {path}: the workspace is incomplete")))?;
            String::from_utf8(bytes).map_err(|_| err(format!("{path} in gen/0 is not UTF-8")))
        };
        let checked = recipe::check_shape(&read(layout::RECIPE_FILE)?);
        let recipe = checked.recipe.ok_or_else(|| {
            let problems: Vec<String> = checked.violations.iter().map(|v| v.to_string()).collect();
            err(format!(
                "gen/0's recipe.yaml is invalid: {}",
                problems.join("; ")
            ))
        })?;
        let public_key = PublicKey::from_value(
            &serde_json::from_str(&read(layout::PUBLIC_KEY_FILE)?)
                .map_err(|e| err(format!("{} is not JSON: {e}", layout::PUBLIC_KEY_FILE)))?,
        )
        .map_err(|e| err(format!("{}: {e}", layout::PUBLIC_KEY_FILE)))?;
        let engine: EngineConfig = serde_json::from_str(&read(layout::ENGINE_FILE)?)
            .map_err(|e| err(format!("{}: {e}", layout::ENGINE_FILE)))?;
        if engine.schema != ENGINE_SCHEMA {
            return Err(err(format!(
                "{}: unknown schema `{}`, expected `{ENGINE_SCHEMA}`",
                layout::ENGINE_FILE,
                engine.schema
            )));
        }
        let task_set = FrozenTaskSet::from_json(&read(layout::TASK_SET_FILE)?)
            .map_err(|e| err(format!("{}: {e}", layout::TASK_SET_FILE)))?;
        engine.check_protocol(&task_set)?;
        let evaluator_tree = store
            .subtree(genesis, layout::EVALUATOR_DIR)
            .map_err(|e| err(e.to_string()))?
            .ok_or_else(|| err("gen/0 has no evaluator/ tree"))?;
        Ok(Workspace {
            experiment_id: public_key.experiment_id().to_string(),
            paths: Paths::new(&root),
            store,
            recipe,
            public_key,
            task_set,
            engine,
            genesis,
            evaluator_tree,
        })
    }

    pub fn root(&self) -> &Path {
        &self.paths.root
    }

    /// The split candidates are evaluated on.
    pub fn primary_split(&self) -> SplitName {
        self.engine.split()
    }

    /// How many tasks one evaluation of the primary split runs.
    pub fn tasks_per_evaluation(&self) -> usize {
        let all = self.task_set.split.members(self.primary_split()).len();
        self.engine
            .task_sample
            .as_ref()
            .map_or(all, |s| (s.tasks_per_round as usize).min(all))
    }

    /// Open the archive as its single writer (the caller holds the run lock).
    pub fn archive_writer(&self) -> Result<Archive> {
        let key_path = key_path(&self.experiment_id)?;
        let key = ExperimentKey::load(&key_path, &self.experiment_id).map_err(|e| {
            err(format!("cannot load the experiment's signing key: {e}")).hint(format!(
                "the key is created by `evolve init` at {}; set EVOLVE_KEY_DIR if it lives elsewhere",
                key_path.display()
            ))
        })?;
        // The key's record follows the workspace (a moved one, or a key made before
        // records existed), so `evolve keys prune` never takes it for a deleted one.
        keys::note_workspace(&key_path, &self.experiment_id, self.root());
        Archive::open(&self.paths.archive(), &self.experiment_id, key).map_err(|e| {
            err(format!("archive: {e}")).hint("run `evolve verify` to see every finding")
        })
    }

    /// The commit a `gen/<genid>` tag names, as hex.
    pub fn tag_commit(&self, genid: &str) -> Option<String> {
        self.store
            .tag_target(&layout::tag_name(genid))
            .ok()
            .flatten()
            .map(|o| o.to_string())
    }
}

/// A rejected candidate's proposal, kept on `refs/evolve/proposed/<genid>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The commit the ref names (its parent is the parent's certified commit).
    pub commit: Oid,
    /// That commit's tree.
    pub tree: Oid,
    /// The tree id the archived stop recorded (`proposed_tree`), if it recorded one.
    pub archived_tree: Option<String>,
}

impl Proposal {
    /// The ref names the very tree the certified stop recorded.
    pub fn matches_archive(&self) -> bool {
        self.archived_tree.as_deref() == Some(self.tree.to_string().as_str())
    }
}

impl Workspace {
    /// The proposal `genid` made before it was rejected, if one was kept. `status_body`
    /// is the body of the generation's last certified `status` event (which names the
    /// tree it kept).
    pub fn proposal(
        &self,
        genid: &str,
        status_body: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Option<Proposal> {
        let commit = self
            .store
            .evolve_ref_target(&layout::proposed_ref(genid))
            .ok()
            .flatten()?;
        let tree = self.store.tree_of(commit).ok()?;
        Some(Proposal {
            commit,
            tree,
            archived_tree: status_body
                .and_then(|b| b.get("proposed_tree"))
                .and_then(serde_json::Value::as_str)
                .map(str::to_string),
        })
    }
}

pub fn split_named(s: &str) -> Option<SplitName> {
    match s {
        "train" => Some(SplitName::Train),
        "gate" => Some(SplitName::Gate),
        "sealed" => Some(SplitName::Sealed),
        _ => None,
    }
}

/// Where an experiment's secret key lives: `$EVOLVE_KEY_DIR/<id>.key`, else
/// `<user data dir>/evolve/keys/<id>.key`. Never inside a workspace.
/// Beside it, `<id>.json` records the workspace it was made for ([`keys`]).
pub fn key_path(experiment_id: &str) -> Result<PathBuf> {
    Ok(keys::key_dir()?.join(format!("{experiment_id}.key")))
}

/// The current time as RFC 3339 UTC with milliseconds (archive timestamps).
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
