//! # evolve-script: operators as Rhai scripts
//!
//! The trusted interpreter behind `operator: script`. A model can write source text but
//! not a WebAssembly binary, so the operators an experiment may evolve are scripts: the
//! host reads the script its binding names (`config.source`) from the checkout the
//! stage's component is loaded from and passes it in `call-context.script`; a thin
//! per-stage component (`operators/<stage>/script`) calls this crate, which runs the
//! script's stage function on the stage's typed input converted to plain values, and
//! reads its result back into the stage's type (which the host then checks exactly as a
//! compiled operator's). See `docs/scripts.md` for the language, the functions each
//! stage's script defines and the limits.
//!
//! Every failure (a syntax error, a thrown value, an exceeded limit, a result of the
//! wrong shape) is the operator's error, with the script's path and line:
//! `script operators/select/policy.rhai line 7: no eligible parent`.

mod config;
mod convert;
mod engine;
mod error;
mod grants;
mod meter;
pub mod world;

pub use config::{
    DEFAULT_MAX_MEMORY_MIB, DEFAULT_MAX_OPERATIONS, Limits, schema, source_path_problem,
};
pub use grants::{Grants, Model, Tasks, Tree};
pub use meter::{MeteredAlloc, live_bytes};

use convert::to_dynamic;
use engine::Session;
use evolve_operator_sdk::Context;
use evolve_operator_sdk::serde_json::{Map, Value, json};
use evolve_operator_sdk::types::*;
use rhai::Dynamic;

/// Hex SHA-256, the digest the host records for a script.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `ctx` as the script sees it: the call's identity, its seed (as a signed 64-bit
/// integer with the same bits), `config` = the binding's `params`, and the script's own
/// path and digest.
fn ctx_value(ctx: &Context) -> Dynamic {
    let script = ctx
        .script
        .as_ref()
        .map(|s| json!({"path": s.path, "sha256": s.sha256}));
    to_dynamic(&json!({
        "generation_id": ctx.generation_id,
        "parent": ctx.parent,
        "generation": ctx.generation,
        "seed": ctx.seed as i64,
        "deadline_ms": ctx.deadline_ms,
        "config": ctx.config.get("params").cloned().unwrap_or_else(|| json!({})),
        "script": script,
    }))
}

fn opt(v: Option<Value>) -> Dynamic {
    v.map_or(Dynamic::UNIT, |v| to_dynamic(&v))
}

/// Prefix a result-shape message with the script's path.
fn shaped<T>(s: &Session, r: Result<T, String>) -> Result<T, String> {
    r.map_err(|e| error::at(s.path(), rhai::Position::NONE, &e))
}

/// select: `fn select(ctx, archive)` returns generation ids (an array, or one string).
pub fn select(ctx: &Context, archive: &ArchiveView) -> Result<Vec<String>, String> {
    let s = Session::open(ctx, Grants::default())?;
    let args = vec![ctx_value(ctx), to_dynamic(&convert::view(archive))];
    let out = s.call("select", "ctx, archive", args)?;
    shaped(&s, out.parents())
}

/// rollout: `fn rollout(ctx, parent)` returns `#{summary: #{…}, artifacts}`.
pub fn rollout(ctx: &Context, parent: &ArchiveRow, grants: Grants) -> Result<Evidence, String> {
    let s = Session::open(ctx, grants)?;
    let args = vec![ctx_value(ctx), to_dynamic(&convert::row(parent))];
    let out = s.call("rollout", "ctx, parent", args)?;
    shaped(&s, out.evidence())
}

/// analyze: `fn analyze(ctx, rollout)` returns `#{summary: #{…}, artifacts}`.
pub fn analyze(ctx: &Context, rollout: &Evidence, grants: Grants) -> Result<Evidence, String> {
    let s = Session::open(ctx, grants)?;
    let args = vec![ctx_value(ctx), to_dynamic(&convert::evidence(rollout))];
    let out = s.call("analyze", "ctx, rollout", args)?;
    shaped(&s, out.evidence())
}

/// mutate: `fn mutate(ctx, observation)` edits the candidate through its grants and
/// returns `#{changed, notes}` (`changed` defaults to the paths it wrote; the usage is
/// the host-metered usage of its `model_chat` calls).
pub fn mutate(
    ctx: &Context,
    observation: &Observation,
    grants: Grants,
) -> Result<Proposal, String> {
    let s = Session::open(ctx, grants)?;
    let args = vec![
        ctx_value(ctx),
        to_dynamic(&convert::observation(observation)),
    ];
    let out = s.call("mutate", "ctx, observation", args)?;
    let written = s.tracked.changed.borrow().clone();
    let usage = *s.tracked.usage.borrow();
    shaped(&s, out.proposal(written, usage))
}

/// reflect: `fn reflect(ctx, archive, playbook)` returns playbook operations.
pub fn reflect(
    ctx: &Context,
    archive: &ArchiveView,
    playbook: &[PlaybookEntry],
    grants: Grants,
) -> Result<Vec<PlaybookOp>, String> {
    let s = Session::open(ctx, grants)?;
    let args = vec![
        ctx_value(ctx),
        to_dynamic(&convert::view(archive)),
        to_dynamic(&convert::playbook(playbook)),
    ];
    let out = s.call("reflect", "ctx, archive, playbook", args)?;
    shaped(&s, out.playbook_ops())
}

/// validate: `fn validate(ctx, changed, rollout)` returns `#{accept, reason, artifacts}`.
pub fn validate(
    ctx: &Context,
    changed: &[String],
    rollout: Option<&Evidence>,
    grants: Grants,
) -> Result<Validation, String> {
    let s = Session::open(ctx, grants)?;
    let args = vec![
        ctx_value(ctx),
        to_dynamic(&json!(changed)),
        opt(rollout.map(convert::evidence)),
    ];
    let out = s.call("validate", "ctx, changed, rollout", args)?;
    shaped(&s, out.validation())
}

/// novelty: `fn assess(ctx, diff)` returns `#{novelty, accept}`.
pub fn assess(ctx: &Context, diff: &CandidateDiff) -> Result<NoveltyVerdict, String> {
    let s = Session::open(ctx, Grants::default())?;
    let args = vec![ctx_value(ctx), to_dynamic(&convert::diff(diff))];
    let out = s.call("assess", "ctx, diff", args)?;
    shaped(&s, out.novelty())
}

/// gate: `fn decide(ctx, child, parent)`, or `fn decide(ctx, child, parent, archive,
/// diff)` for a gate that compares with the archive or reads the change; returns
/// `#{verdict, reason}`. `parent` and `diff` are `()` when there is none.
pub fn decide(
    ctx: &Context,
    child: &ArchiveRow,
    parent: Option<&ArchiveRow>,
    archive: &ArchiveView,
    diff: Option<&CandidateDiff>,
) -> Result<GateDecision, String> {
    let s = Session::open(ctx, Grants::default())?;
    let mut args = vec![
        ctx_value(ctx),
        to_dynamic(&convert::row(child)),
        opt(parent.map(convert::row)),
    ];
    let params = if s.defines("decide", 5) {
        args.push(to_dynamic(&convert::view(archive)));
        args.push(opt(diff.map(convert::diff)));
        "ctx, child, parent, archive, diff"
    } else {
        "ctx, child, parent"
    };
    let out = s.call("decide", params, args)?;
    shaped(&s, out.gate())
}

/// record: `fn annotate(ctx, child)`, or `fn annotate(ctx, child, diff)`; returns an
/// object map of annotations.
pub fn annotate(
    ctx: &Context,
    child: &ArchiveRow,
    diff: Option<&CandidateDiff>,
) -> Result<Map<String, Value>, String> {
    let s = Session::open(ctx, Grants::default())?;
    let mut args = vec![ctx_value(ctx), to_dynamic(&convert::row(child))];
    let params = if s.defines("annotate", 3) {
        args.push(opt(diff.map(convert::diff)));
        "ctx, child, diff"
    } else {
        "ctx, child"
    };
    let out = s.call("annotate", params, args)?;
    shaped(&s, out.annotations())
}

/// Building script calls in native tests (the equivalence tests of the shipped
/// scripts, and scripts of your own).
pub mod testing {
    use evolve_operator_sdk::serde_json::{Value, json};
    use evolve_operator_sdk::{Context, Script};

    /// A generation-1 context (seed `seed`) for the script `text` at `path`, with
    /// `params` normalized through the shared script schema.
    pub fn context(path: &str, text: &str, params: Value, seed: u64) -> Context {
        let schema = crate::schema(&[])
            .build()
            .expect("the script schema builds");
        let config = schema
            .normalize_value(&json!({"source": path, "params": params}))
            .unwrap_or_else(|v| panic!("test params do not normalize: {v:?}"));
        let mut ctx = Context::for_test(Value::Object(config));
        ctx.seed = seed;
        ctx.script = Some(Script {
            path: path.into(),
            text: text.into(),
            sha256: crate::sha256_hex(text.as_bytes()),
        });
        ctx
    }
}
