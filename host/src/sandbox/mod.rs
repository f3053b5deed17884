//! The sandboxed component runtime: loads an operator component for a stage and runs
//! one call with exactly the grants and limits the contract gives that stage.
//!
//! * `contract` — does a component fit the stage's world?
//! * `cache` — compile cache keyed by the SHA-256 of the component bytes.
//! * `policy` — grants (WASI preopens) and limits of a call.
//! * `state` — the per-call store: WASI context, capabilities, memory limiter.
//! * `worlds` — the one table of what each world imports and is granted.
//! * `capabilities` — the `model` and `tasks` host interfaces.
//! * `io`, `results` — stage inputs/outputs and the host's checks on outputs.
//! * `failure` — typed failures.
//!
//! A fresh store and instance serve each call, so nothing survives between calls.

mod bare_scratch;
mod bindings;
mod cache;
mod cancel;
mod capabilities;
mod contract;
mod failure;
mod file_digests;
mod io;
mod output;
mod policy;
mod quota;
mod results;
mod state;
mod worlds;

pub use bindings::stage::meta::Description;
pub use bindings::{model, tasks, types};
pub use cache::{CacheSource, ComponentDigest, default_cache_dir, hex};
pub use cancel::Cancel;
pub use capabilities::{BoxFuture, Capabilities, ModelBackend, NoModel, NoTasks, TaskBackend};
pub use contract::{ALL_STAGES, ALL_WORLDS, ContractError, parse_stage, parse_world, stage_name};
pub use failure::{LoadError, LoadErrorKind, OperatorFailure, panic_message};
pub use io::{StageInput, StageOutput};
pub use output::CapturedOutput;
pub use policy::{
    DEFAULT_DISK_FILES, DEFAULT_DISK_MIB, GrantRequest, Grants, Limits, MAX_CHILDREN_PER_GEN,
};
pub use quota::QuotaBreach;
pub use results::{
    MAX_ANNOTATION_BYTES, MAX_PLAYBOOK_BYTES, MAX_PLAYBOOK_OP_BYTES, check_playbook_size,
    relative_path,
};
pub use worlds::{Capability, granted_capabilities};

use bindings::stage;
use cache::CompileCache;
use state::CallState;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use types::{Evidence, Stage, Validation};
use wasmtime::component::{InstancePre, Linker};
use wasmtime::{Config, Engine};

/// How often the epoch ticks; deadlines are rounded up to it.
const TICK: Duration = Duration::from_millis(10);

/// Settings of a [`Sandbox`].
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    /// Persist compiled components here (host-owned, never inside a workspace).
    pub cache_dir: Option<std::path::PathBuf>,
    /// Compile with fuel metering so [`Limits::fuel`] can be enforced.
    pub fuel: bool,
}

/// Operator calls made through one sandbox and the time spent in them.
#[derive(Debug, Default)]
struct CallTally {
    calls: std::sync::atomic::AtomicU64,
    nanos: std::sync::atomic::AtomicU64,
}

impl CallTally {
    fn add(&self, d: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        self.calls.fetch_add(1, Relaxed);
        self.nanos
            .fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Relaxed);
    }

    fn get(&self) -> (u64, Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.calls.load(Relaxed),
            Duration::from_nanos(self.nanos.load(Relaxed)),
        )
    }
}

/// One engine, its linkers and its compile cache, shared by every call.
pub struct Sandbox {
    engine: Engine,
    cache: CompileCache,
    fuel: bool,
    linkers: [OnceLock<Result<Linker<CallState>, String>>; contract::ALL_WORLDS.len()],
    /// Set when the user stops the run: every call in flight ends as cancelled.
    cancel: Cancel,
    tally: CallTally,
    /// Component files already hashed (see `file_digests.rs`).
    file_digests: file_digests::FileDigests,
    /// Components already checked against a stage's world and linked, by digest and
    /// stage: loading one again costs a lookup.
    linked: std::sync::Mutex<Linked>,
    /// Where [`Sandbox::call_bare`] gets each call's scratch directory.
    bare_scratch: bare_scratch::BareScratch,
}

/// Linked components by digest and stage (the stage's index among the worlds).
type Linked = std::collections::HashMap<(ComponentDigest, usize), InstancePre<CallState>>;

/// Linked components kept at most (a bound, not a working-set guess).
const MAX_LINKED: usize = 256;

/// A component checked against a stage's world and ready to instantiate.
pub struct LoadedOperator {
    pub stage: Stage,
    /// Where it came from (a path relative to its checkout, or `builtin:stage/name`).
    pub origin: String,
    /// SHA-256 of the component bytes: the operator's identity for this call.
    pub digest: ComponentDigest,
    pub cache: CacheSource,
    pre: InstancePre<CallState>,
}

impl LoadedOperator {
    /// The host capabilities the component actually imports: a subset of what its
    /// world grants (a mutate that never calls a model imports no `model`).
    /// `evolve recipe check` and `init` use it to say a model is needed.
    pub fn imported_capabilities(&self) -> Vec<Capability> {
        let component = self.pre.component();
        let names: Vec<String> = component
            .component_type()
            .imports(component.engine())
            .map(|(name, _)| name.to_string())
            .collect();
        granted_capabilities(self.stage)
            .iter()
            .copied()
            .filter(|cap| {
                let prefix = format!("{}/{}@", contract::PACKAGE, cap.name());
                names.iter().any(|n| n.starts_with(&prefix))
            })
            .collect()
    }
}

/// What one call produced: the outcome plus everything the operator printed.
#[derive(Debug)]
pub struct CallReport {
    pub outcome: Result<StageOutput, OperatorFailure>,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
    pub elapsed: Duration,
    pub fuel_consumed: Option<u64>,
    /// One line per artifact the result named that the host refused (a bad path, a
    /// link, a directory, a missing file); the valid ones stay in the result.
    pub refused_artifacts: Vec<String>,
}

impl Sandbox {
    pub fn new(config: SandboxConfig) -> wasmtime::Result<Arc<Sandbox>> {
        let mut cfg = Config::new();
        cfg.epoch_interruption(true);
        cfg.consume_fuel(config.fuel);
        cfg.max_wasm_stack(512 << 10);
        let engine = Engine::new(&cfg)?;
        start_epoch_ticker(&engine);
        let cache = match &config.cache_dir {
            Some(dir) => CompileCache::with_disk(&engine, dir).map_err(|e| {
                wasmtime::format_err!("cannot use compile cache {}: {e}", dir.display())
            })?,
            None => CompileCache::memory_only(),
        };
        Ok(Arc::new(Sandbox {
            engine,
            cache,
            fuel: config.fuel,
            linkers: Default::default(),
            cancel: Cancel::default(),
            tally: CallTally::default(),
            file_digests: Default::default(),
            linked: Default::default(),
            bare_scratch: Default::default(),
        }))
    }

    /// The token that cancels this sandbox's calls (in flight and future ones).
    pub fn cancel_token(&self) -> Cancel {
        self.cancel.clone()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Forget compiled components held in memory (the disk cache stays).
    pub fn clear_memory_cache(&self) {
        self.cache.clear_memory();
        self.linked_map().clear();
    }

    /// Load the operator at `relative` inside `checkout` for `stage`. The path must stay
    /// inside the checkout: `..`, absolute paths and symlinks leading out are refused.
    pub fn load_from_checkout(
        &self,
        stage: Stage,
        checkout: &Path,
        relative: &str,
    ) -> Result<LoadedOperator, LoadError> {
        let origin = relative.to_string();
        let unreadable = |why: String| LoadError {
            origin: origin.clone(),
            kind: LoadErrorKind::Unreadable(why),
        };
        relative_path("operator", relative).map_err(unreadable)?;
        let dir = cap_std::fs::Dir::open_ambient_dir(checkout, cap_std::ambient_authority())
            .map_err(|e| unreadable(format!("cannot open checkout {}: {e}", checkout.display())))?;
        let meta = dir
            .symlink_metadata(relative)
            .map_err(|e| unreadable(e.to_string()))?;
        if !meta.is_file() {
            return Err(unreadable(
                "not a regular file (symlinks are not followed)".into(),
            ));
        }
        if meta.len() > MAX_COMPONENT_BYTES {
            return Err(unreadable(format!(
                "{} bytes is over the {} MiB limit",
                meta.len(),
                MAX_COMPONENT_BYTES >> 20
            )));
        }
        // A file read before and unchanged since needs neither reading nor hashing when
        // its component is already linked for this stage.
        let stamp = file_digests::FileStamp::of(&meta);
        if let Some(digest) = self.file_digests.get(&stamp)
            && let Some(op) = self.linked_operator(stage, digest, &origin)
        {
            return Ok(op);
        }
        let bytes = dir.read(relative).map_err(|e| unreadable(e.to_string()))?;
        let digest = cache::digest(&bytes);
        if let Ok(after) = dir.symlink_metadata(relative) {
            self.file_digests
                .insert(&stamp, &file_digests::FileStamp::of(&after), digest);
        }
        self.load_digested(stage, &bytes, digest, origin)
    }

    /// The operator `digest` already checked and linked for `stage`, if it was.
    fn linked_operator(
        &self,
        stage: Stage,
        digest: ComponentDigest,
        origin: &str,
    ) -> Option<LoadedOperator> {
        let pre = self.linked_map().get(&(digest, stage as usize))?.clone();
        Some(LoadedOperator {
            stage,
            origin: origin.to_string(),
            digest,
            cache: CacheSource::Memory,
            pre,
        })
    }

    fn linked_map(&self) -> std::sync::MutexGuard<'_, Linked> {
        self.linked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Load a component from bytes (e.g. a file's).
    pub fn load_bytes(
        &self,
        stage: Stage,
        bytes: &[u8],
        origin: String,
    ) -> Result<LoadedOperator, LoadError> {
        self.load_digested(stage, bytes, cache::digest(bytes), origin)
    }

    /// Load an embedded library operator, whose digest was computed at build time.
    pub fn load_builtin(
        &self,
        stage: Stage,
        op: &crate::builtin::EmbeddedOperator,
        origin: String,
    ) -> Result<LoadedOperator, LoadError> {
        self.load_digested(stage, op.bytes, op.sha256, origin)
    }

    /// Load `bytes`, whose SHA-256 (the compile cache's key) is `digest`.
    fn load_digested(
        &self,
        stage: Stage,
        bytes: &[u8],
        digest: ComponentDigest,
        origin: String,
    ) -> Result<LoadedOperator, LoadError> {
        if let Some(op) = self.linked_operator(stage, digest, &origin) {
            return Ok(op);
        }
        let fail = |kind| LoadError {
            origin: origin.clone(),
            kind,
        };
        contract::check_header(bytes).map_err(|e| fail(LoadErrorKind::Contract(e)))?;
        let (component, source) = self
            .cache
            .get_or_compile(&self.engine, &digest, bytes)
            .map_err(|e| {
                fail(LoadErrorKind::Contract(ContractError::Invalid(format!(
                    "{e:#}"
                ))))
            })?;
        contract::check_world(&self.engine, &component, stage)
            .map_err(|e| fail(LoadErrorKind::Contract(e)))?;
        let linker = self
            .linker(stage)
            .map_err(|e| fail(LoadErrorKind::Unreadable(e)))?;
        let pre = linker.instantiate_pre(&component).map_err(|e| {
            fail(LoadErrorKind::Contract(ContractError::Invalid(format!(
                "{e:#}"
            ))))
        })?;
        let mut linked = self.linked_map();
        if linked.len() >= MAX_LINKED {
            linked.clear();
        }
        linked.insert((digest, stage as usize), pre.clone());
        drop(linked);
        Ok(LoadedOperator {
            stage,
            origin,
            digest,
            cache: source,
            pre,
        })
    }

    /// Load a component file for whichever stage it exports (for author tooling).
    pub fn load_file_any_stage(&self, path: &Path) -> Result<LoadedOperator, LoadError> {
        let origin = path.display().to_string();
        let fail = |kind| LoadError {
            origin: origin.clone(),
            kind,
        };
        let bytes =
            std::fs::read(path).map_err(|e| fail(LoadErrorKind::Unreadable(e.to_string())))?;
        contract::check_header(&bytes).map_err(|e| fail(LoadErrorKind::Contract(e)))?;
        let digest = cache::digest(&bytes);
        let (component, _) = self
            .cache
            .get_or_compile(&self.engine, &digest, &bytes)
            .map_err(|e| {
                fail(LoadErrorKind::Contract(ContractError::Invalid(format!(
                    "{e:#}"
                ))))
            })?;
        let stages = contract::exported_stages(&self.engine, &component);
        let stage = match stages.as_slice() {
            [one] => *one,
            _ => {
                let exported = stages
                    .iter()
                    .map(|s| format!("`{}`", stage_name(*s)))
                    .collect();
                return Err(fail(LoadErrorKind::Contract(ContractError::WrongWorld {
                    exported,
                })));
            }
        };
        self.load_bytes(stage, &bytes, origin)
    }

    /// One short call with nothing granted but an empty scratch directory no other call
    /// has changed (see `bare_scratch.rs`) and no host capability: for meta calls and
    /// checks, which must not depend on any candidate. The default limits, with a
    /// `timeout` deadline.
    pub async fn call_bare(
        &self,
        op: &LoadedOperator,
        input: StageInput,
        timeout: Duration,
    ) -> std::io::Result<CallReport> {
        let scratch = self.bare_scratch.make()?;
        let limits = Limits {
            timeout,
            ..Limits::default()
        };
        let grants = Grants::scratch_only(scratch.path());
        Ok(self
            .call(op, &grants, &limits, Capabilities::default(), input)
            .await)
    }

    /// Run one call. Never panics on anything the operator does.
    pub async fn call(
        &self,
        op: &LoadedOperator,
        grants: &Grants,
        limits: &Limits,
        capabilities: Capabilities,
        mut input: StageInput,
    ) -> CallReport {
        let started = Instant::now();
        if let Some(stage) = input.stage().filter(|s| *s != op.stage) {
            let msg = format!(
                "a {} input was sent to a {} operator",
                stage_name(stage),
                stage_name(op.stage)
            );
            return CallReport::failed(OperatorFailure::Host(msg), started);
        }
        if self.cancel.is_cancelled() {
            return CallReport::failed(OperatorFailure::Cancelled, started);
        }
        // The deadline the guest is told is the one enforced here, whoever built the
        // context (`evolve operator run --timeout 5` used to say 30 000 ms).
        if let Some(ctx) = input.ctx_mut() {
            ctx.deadline_ms = u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX);
        }
        let ticks = limits.timeout.as_millis().div_ceil(TICK.as_millis()).max(1) as u64 + 1;
        let quota = std::sync::Arc::new(quota::Quota::begin(
            &grants.writable(),
            limits.disk_bytes,
            limits.disk_files,
        ));
        let quota_over = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let quota_wake = std::sync::Arc::new(tokio::sync::Notify::new());
        let watcher = quota::Watcher::start(quota.clone(), quota_over.clone(), quota_wake.clone());
        let (mut store, streams) = match state::new_store(
            &self.engine,
            grants,
            limits,
            capabilities,
            ticks,
            self.cancel.clone(),
            quota_over,
        ) {
            Ok(s) => s,
            Err(e) => return CallReport::failed(OperatorFailure::Host(e.to_string()), started),
        };
        let fut = invoke(op, &mut store, input, limits.max_parents);
        // A guest in wasm code is trapped by the epoch callback; one blocked in a host
        // call is dropped here when the token is set (or the quota watcher fires).
        let timed = tokio::select! {
            biased;
            () = self.cancel.cancelled() => None,
            () = quota_wake.notified() => None,
            r = tokio::time::timeout(limits.timeout + TICK * 2, fut) => Some(r),
        };
        // The watcher's finding, else one last walk: a burst of writes between two of
        // its walks, or just before the call returned, is caught here.
        let breach = watcher.finish().or_else(|| quota.check());
        if breach.is_some() {
            quota.remove_writes();
        }
        let stderr = streams.stderr.take();
        let outcome = match timed {
            _ if self.cancel.is_cancelled() => Err(OperatorFailure::Cancelled),
            _ if breach.is_some() => Err(OperatorFailure::QuotaExceeded(
                breach.clone().expect("checked"),
            )),
            None => Err(OperatorFailure::Cancelled),
            Some(Err(_)) => Err(OperatorFailure::Timeout {
                limit: limits.timeout,
                in_host_call: true,
            }),
            Some(Ok(Ok(Ok(out)))) => check_size(out, limits.result_bytes),
            // The size cap covers a reported error's text as well as a result.
            Some(Ok(Ok(Err(OperatorFailure::Reported(msg)))))
                if msg.len() > limits.result_bytes =>
            {
                Err(OperatorFailure::MalformedResult(format!(
                    "the reported error is {} bytes; the limit is {}",
                    msg.len(),
                    limits.result_bytes
                )))
            }
            Some(Ok(Ok(Err(contract_msg)))) => Err(contract_msg),
            Some(Ok(Err(err))) if err.downcast_ref::<cancel::CancelledTrap>().is_some() => {
                Err(OperatorFailure::Cancelled)
            }
            Some(Ok(Err(err))) => Err(failure::classify(
                &err,
                store.data().limiter.refused,
                limits,
                &stderr.bytes,
            )),
        };
        let mut refused_artifacts = Vec::new();
        let mut outcome = outcome;
        if let Ok(StageOutput::Evidence(Evidence { artifacts, .. }))
        | Ok(StageOutput::Validation(Validation { artifacts, .. })) = &mut outcome
        {
            refused_artifacts = results::vet_artifacts(grants.host_dir("/scratch"), artifacts);
        }
        let fuel_consumed = match (self.fuel, limits.fuel) {
            (true, Some(initial)) => store
                .get_fuel()
                .ok()
                .map(|left| initial.saturating_sub(left)),
            _ => None,
        };
        let elapsed = started.elapsed();
        self.tally.add(elapsed);
        CallReport {
            outcome,
            stdout: streams.stdout.take(),
            stderr,
            elapsed,
            fuel_consumed,
            refused_artifacts,
        }
    }

    /// Calls completed so far (past the input check) and the time spent in them:
    /// `evolve bench` splits a generation's time into operators and framework with it.
    pub fn call_tally(&self) -> (u64, Duration) {
        self.tally.get()
    }

    fn linker(&self, stage: Stage) -> Result<&Linker<CallState>, String> {
        let slot = &self.linkers[stage as usize];
        slot.get_or_init(|| build_linker(&self.engine, stage).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Largest component file accepted from a checkout.
const MAX_COMPONENT_BYTES: u64 = 64 << 20;

impl CallReport {
    fn failed(f: OperatorFailure, started: Instant) -> CallReport {
        CallReport {
            outcome: Err(f),
            stdout: CapturedOutput::default(),
            stderr: CapturedOutput::default(),
            elapsed: started.elapsed(),
            fuel_consumed: None,
            refused_artifacts: Vec::new(),
        }
    }

    /// Write stdout/stderr to `<dir>/<stem>.stdout.log` and `.stderr.log`, noting
    /// truncation at the end of each file.
    pub fn write_logs(&self, dir: &Path, stem: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for (ext, out) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let mut bytes = out.bytes.clone();
            if out.dropped > 0 {
                bytes.extend_from_slice(
                    format!("\n[evolve: {} more bytes dropped]\n", out.dropped).as_bytes(),
                );
            }
            if ext == "stderr" {
                for line in &self.refused_artifacts {
                    bytes.extend_from_slice(format!("\n[evolve: refused {line}]\n").as_bytes());
                }
            }
            std::fs::write(dir.join(format!("{stem}.{ext}.log")), bytes)?;
        }
        Ok(())
    }
}

fn check_size(out: StageOutput, cap: usize) -> Result<StageOutput, OperatorFailure> {
    let n = results::size(&out);
    if n > cap {
        return Err(OperatorFailure::MalformedResult(format!(
            "the result is {n} bytes; the limit is {cap}"
        )));
    }
    Ok(out)
}

/// WASI plus exactly the capabilities the stage's world imports.
fn build_linker(engine: &Engine, stage: Stage) -> wasmtime::Result<Linker<CallState>> {
    let mut linker: Linker<CallState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    struct Caps;
    impl wasmtime::component::HasData for Caps {
        type Data<'a> = &'a mut Capabilities;
    }
    for cap in granted_capabilities(stage) {
        match cap {
            Capability::Model => {
                model::add_to_linker::<_, Caps>(&mut linker, |s| &mut s.capabilities)?
            }
            Capability::Tasks => {
                tasks::add_to_linker::<_, Caps>(&mut linker, |s| &mut s.capabilities)?
            }
        }
    }
    Ok(linker)
}

/// One global ticker per engine advances the epoch; it stops when the engine is dropped.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("evolve-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(TICK);
            }
        })
        .expect("spawning the epoch ticker thread");
}

/// Instantiate and call. The outer `Result` carries wasmtime errors (traps); the inner
/// one a contract violation found in the returned value.
async fn invoke(
    op: &LoadedOperator,
    store: &mut wasmtime::Store<CallState>,
    input: StageInput,
    max_parents: usize,
) -> wasmtime::Result<Result<StageOutput, OperatorFailure>> {
    let instance = op.pre.instantiate_async(&mut *store).await?;
    let malformed = |r: Result<StageOutput, String>| r.map_err(OperatorFailure::MalformedResult);
    let reported = |r: Result<Result<StageOutput, String>, String>| match r {
        Ok(checked) => malformed(checked),
        Err(msg) => Err(OperatorFailure::Reported(msg)),
    };
    macro_rules! stage_guest {
        ($iface:ident) => {
            stage::$iface::GuestIndices::new(&op.pre)?.load(&mut *store, &instance)?
        };
    }
    Ok(match input {
        StageInput::Describe => {
            let meta = stage_guest!(meta);
            let d = meta.call_describe(&mut *store).await?;
            results::check_description(d, op.stage).map_err(OperatorFailure::ContractMismatch)
        }
        StageInput::NormalizeConfig(raw) => {
            let meta = stage_guest!(meta);
            malformed(results::check_normalized(
                meta.call_normalize_config(&mut *store, &raw).await?,
            ))
        }
        StageInput::Select { ctx, archive } => {
            let g = stage_guest!(select);
            reported(
                g.call_select(&mut *store, &ctx, &archive)
                    .await?
                    .map(|p| results::check_parents(p, max_parents)),
            )
        }
        StageInput::Rollout { ctx, parent } => {
            let g = stage_guest!(rollout);
            reported(
                g.call_rollout(&mut *store, &ctx, &parent)
                    .await?
                    .map(results::check_evidence),
            )
        }
        StageInput::Analyze { ctx, rollout } => {
            let g = stage_guest!(analyze);
            reported(
                g.call_analyze(&mut *store, &ctx, &rollout)
                    .await?
                    .map(results::check_evidence),
            )
        }
        StageInput::Mutate { ctx, observation } => {
            let g = stage_guest!(mutate);
            reported(
                g.call_mutate(&mut *store, &ctx, &observation)
                    .await?
                    .map(results::check_proposal),
            )
        }
        StageInput::Validate {
            ctx,
            changed,
            rollout,
        } => {
            let g = stage_guest!(validate);
            reported(
                g.call_validate(&mut *store, &ctx, &changed, rollout.as_ref())
                    .await?
                    .map(results::check_validation),
            )
        }
        StageInput::Novelty { ctx, diff } => {
            let g = stage_guest!(novelty);
            reported(
                g.call_assess(&mut *store, &ctx, &diff)
                    .await?
                    .map(results::check_novelty),
            )
        }
        StageInput::Gate {
            ctx,
            child,
            parent,
            archive,
            diff,
        } => {
            let g = stage_guest!(gate);
            reported(
                g.call_decide(
                    &mut *store,
                    &ctx,
                    &child,
                    parent.as_ref(),
                    &archive,
                    diff.as_ref(),
                )
                .await?
                .map(results::check_gate),
            )
        }
        StageInput::Record { ctx, child, diff } => {
            let g = stage_guest!(record);
            reported(
                g.call_annotate(&mut *store, &ctx, &child, diff.as_ref())
                    .await?
                    .map(results::check_annotations),
            )
        }
        StageInput::Reflect {
            ctx,
            archive,
            playbook,
        } => {
            let g = stage_guest!(reflect);
            reported(
                g.call_reflect(&mut *store, &ctx, &archive, &playbook)
                    .await?
                    .map(|ops| results::check_playbook(ops, &playbook)),
            )
        }
        StageInput::Driver { ctx, feedback } => {
            let g = stage_guest!(driver);
            reported(
                g.call_revise(&mut *store, &ctx, &feedback)
                    .await?
                    .map(results::check_revision),
            )
        }
    })
}
