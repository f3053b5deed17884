//! Calling a stage's operator the way the lifecycle does: loaded from the checkout the
//! stage runs on, granted only that checkout's `target/` (and `operators/` when the
//! surface includes it), a fresh scratch directory and, for mutate, the feedback bundle;
//! limited by the recipe's binding; every input, result and log kept in the run directory.

use crate::recipe::{Binding, Recipe};
use crate::sandbox::{
    Capabilities, GrantRequest, Grants, Limits, Sandbox, StageInput, StageOutput, stage_name,
    types::{CallContext, Stage},
};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

mod edits;
use crate::scripts;
pub use crate::scripts::{recorded_identities, recorded_identity};
pub use edits::{OperatorDefect, Problem as OperatorDefectProblem};

// The typed call of each stage (`rollout(..) -> Evidence`, …), built on `call` below.
mod calls;
pub use calls::At;

/// The recipe's operator bindings, ready to call.
pub struct Stages {
    sandbox: Arc<Sandbox>,
    bindings: std::collections::BTreeMap<String, Binding>,
    operators_in_surface: bool,
    experiment_seed: u64,
    /// Where stage-started/finished events go (the driver's channel).
    pub(crate) progress: super::progress::Channel,
    /// A driver's revision in force, replacing `bindings` (docs/driver.md).
    revised: std::sync::RwLock<Option<Revised>>,
}

/// The bindings of an accepted driver revision, and the stages it rebound to a
/// component frozen by the host.
struct Revised {
    bindings: std::collections::BTreeMap<String, Binding>,
    rebound: std::collections::BTreeMap<String, Rebound>,
}

/// A stage's component frozen by the host for a driver revision: loaded from `dir`
/// (laid out like a checkout) instead of the stage's checkout, and only if its SHA-256
/// is the archived one.
#[derive(Debug, Clone)]
pub struct Rebound {
    pub dir: std::path::PathBuf,
    pub sha256: String,
}

/// Why a stage produced no usable result (the text is archived as the attempt's reason).
#[derive(Debug, Clone)]
pub struct StageFailure {
    pub stage: Stage,
    pub message: String,
    /// The failure kind (`timeout`, `cancelled`, …, [`LOAD_FAILED`] when the stage's
    /// component or script could not be loaded from its checkout, or `host_error` when
    /// the call could not be set up).
    pub kind: &'static str,
}

/// The kind of a [`StageFailure`] whose operator could not be loaded from the checkout
/// (missing, not wasm, wrong world, an unreadable script). It is the operator's
/// failure, never the host's: loading the same tree again fails the same way.
pub const LOAD_FAILED: &str = "load_failed";

impl std::fmt::Display for StageFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", stage_name(self.stage), self.message)
    }
}

/// A deterministic per-call seed: the experiment seed, the stage and the generation id.
/// Never time or process state, so a resumed run makes the same random choices.
pub fn stage_seed(experiment_seed: u64, stage: Stage, genid: &str) -> u64 {
    let bytes = evolve_archive::canonical_bytes(&json!([
        "evolve.stage-seed.v1",
        experiment_seed,
        stage_name(stage),
        genid
    ]));
    let d = <sha2::Sha256 as sha2::Digest>::digest(&bytes);
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

impl Stages {
    /// The sandbox every stage's operator runs in.
    pub(crate) fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    pub fn new(sandbox: Arc<Sandbox>, recipe: &Recipe, operators_in_surface: bool) -> Stages {
        Stages {
            sandbox,
            bindings: recipe.operators.clone(),
            operators_in_surface,
            experiment_seed: recipe.experiment.seed,
            progress: Default::default(),
            revised: Default::default(),
        }
    }

    /// Whether the recipe binds `stage` (optional stages are enabled by their key).
    pub fn enabled(&self, stage: Stage) -> bool {
        self.binding(stage).is_some()
    }

    /// Make a driver's accepted revision the bindings of every later call.
    pub fn revise(
        &self,
        bindings: std::collections::BTreeMap<String, Binding>,
        rebound: std::collections::BTreeMap<String, Rebound>,
    ) {
        *self.revised.write().unwrap_or_else(|p| p.into_inner()) =
            Some(Revised { bindings, rebound });
    }

    fn binding(&self, stage: Stage) -> Option<Binding> {
        let revised = self.revised.read().unwrap_or_else(|p| p.into_inner());
        let bindings = revised.as_ref().map_or(&self.bindings, |r| &r.bindings);
        bindings.get(stage_name(stage)).cloned()
    }

    /// Whether a driver revision rebound `stage` to a host-frozen component, which is
    /// loaded instead of the checkout's.
    pub(crate) fn is_rebound(&self, stage: Stage) -> bool {
        self.rebound(stage).is_some()
    }

    fn rebound(&self, stage: Stage) -> Option<Rebound> {
        let revised = self.revised.read().unwrap_or_else(|p| p.into_inner());
        revised.as_ref()?.rebound.get(stage_name(stage)).cloned()
    }

    /// The context of one call.
    pub fn context(&self, stage: Stage, genid: &str, parent: Option<&str>) -> CallContext {
        let binding = self.binding(stage);
        let binding = binding.as_ref();
        let config = binding
            .map(|b| Value::Object(b.config.clone()))
            .unwrap_or_else(|| json!({}));
        CallContext {
            generation_id: genid.to_string(),
            parent: parent.map(str::to_string),
            generation: evolve_archive::event::genid_generation(genid).unwrap_or(0) as u32,
            seed: stage_seed(self.experiment_seed, stage, genid),
            config: String::from_utf8(evolve_archive::canonical_bytes(&config))
                .unwrap_or_else(|_| "{}".into()),
            deadline_ms: binding.map_or(600_000, |b| (b.timeout_s * 1000.0).round() as u64),
            // A script operator's script is read in `call`, from the checkout it loads.
            script: None,
        }
    }

    fn limits(&self, stage: Stage) -> Limits {
        self.binding(stage)
            .map_or_else(Limits::default, |b| b.limits())
    }

    /// Call `stage`'s operator from `at.checkout` (each stage's typed method in
    /// `calls.rs` calls this). `record` is what the run directory keeps as the call's
    /// input (the host's view of it). `at.run_dir` is created fresh; an earlier,
    /// interrupted call's directory is kept beside it as `<name>.interrupted-<n>`.
    async fn call(
        &self,
        stage: Stage,
        at: At<'_>,
        feedback: Option<&Path>,
        input: StageInput,
        record: Value,
    ) -> Result<StageOutput, StageFailure> {
        use super::progress::Event;
        let genid = super::progress::genid_of(&input).to_string();
        self.progress.emit(Event::StageStarted {
            genid: genid.clone(),
            stage: stage_name(stage).to_string(),
        });
        let result = self
            .call_inner(
                stage,
                at.checkout,
                &at.run_dir,
                feedback,
                at.capabilities,
                input,
                record,
            )
            .await;
        self.progress.emit(Event::StageFinished {
            genid,
            stage: stage_name(stage).to_string(),
            outcome: match &result {
                Ok(_) => "ok".to_string(),
                Err(f) => f.kind.to_string(),
            },
        });
        result
    }

    // One argument per thing a call is granted or recorded with.
    #[allow(clippy::too_many_arguments)]
    async fn call_inner(
        &self,
        stage: Stage,
        checkout: &Path,
        run_dir: &Path,
        feedback: Option<&Path>,
        capabilities: Capabilities,
        mut input: StageInput,
        record: Value,
    ) -> Result<StageOutput, StageFailure> {
        let fail = |message: String| StageFailure {
            stage,
            message,
            kind: "host_error",
        };
        let unloadable = |message: String| StageFailure {
            stage,
            message: format!("{message} ({LOAD_FAILED})"),
            kind: LOAD_FAILED,
        };
        set_aside(run_dir)
            .map_err(|e| fail(format!("cannot prepare {}: {e}", run_dir.display())))?;
        let scratch = run_dir.join("scratch");
        std::fs::create_dir_all(&scratch)
            .map_err(|e| fail(format!("cannot create {}: {e}", scratch.display())))?;
        write_json(&run_dir.join("input.json"), &record);
        let rel = crate::layout::component_path(stage_name(stage));
        // A stage a driver rebound loads the host-frozen component instead (docs/driver.md).
        let rebound = self.rebound(stage);
        let from = rebound.as_ref().map_or(checkout, |r| r.dir.as_path());
        let op = self
            .sandbox
            .load_from_checkout(stage, from, &rel)
            .map_err(|e| unloadable(format!("cannot load {rel}: {e}")))?;
        if let Some(r) = &rebound
            && evolve_archive::canonical::hex(&op.digest) != r.sha256
        {
            return Err(fail(format!(
                "{} is not the component the driver revision froze (SHA-256 {})",
                from.join(&rel).display(),
                r.sha256
            )));
        }
        // The script comes from the stage's own checkout, like its component would.
        let script = self
            .binding(stage)
            .map_or(Ok(None), |b| {
                scripts::read(&b.operator, &b.config, checkout)
            })
            .map_err(unloadable)?;
        scripts::attach(&mut input, script.clone());
        let grants = Grants::for_stage(
            stage,
            &GrantRequest {
                checkout,
                operators_in_surface: self.operators_in_surface,
                scratch: &scratch,
                feedback,
            },
        );
        let report = self
            .sandbox
            .call(&op, &grants, &self.limits(stage), capabilities, input)
            .await;
        let _ = report.write_logs(run_dir, "operator");
        let mut result = match &report.outcome {
            Ok(out) => {
                json!({"ok": out.to_json(), "component_sha256": evolve_archive::canonical::hex(&op.digest), "elapsed_ms": report.elapsed.as_millis() as u64})
            }
            Err(f) => {
                json!({"error": {"kind": f.kind(), "message": f.to_string()}, "component_sha256": evolve_archive::canonical::hex(&op.digest), "elapsed_ms": report.elapsed.as_millis() as u64})
            }
        };
        scripts::identity_fields(script.as_ref(), &mut result);
        write_json(&run_dir.join("result.json"), &result);
        report.outcome.map_err(|f| StageFailure {
            stage,
            message: format!("{} ({})", f, f.kind()),
            kind: f.kind(),
        })
    }
}

/// Move an existing `dir` aside (it is an interrupted call's record) so `dir` starts empty.
fn set_aside(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("stage");
        for n in 1.. {
            let aside = dir.with_file_name(format!("{name}.interrupted-{n}"));
            if !aside.exists() {
                std::fs::rename(dir, &aside)?;
                break;
            }
        }
    }
    std::fs::create_dir_all(dir)
}

pub(crate) fn write_json(path: &Path, value: &Value) {
    if let Some(p) = path.parent() {
        let _ = std::fs::create_dir_all(p);
    }
    let _ = std::fs::write(path, serde_json::to_vec_pretty(value).unwrap_or_default());
}
