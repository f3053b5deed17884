//! What goes into a stage call and what comes out, in host types.

use super::bindings::stage::meta::Description;
use super::bindings::types::*;
use serde_json::{Map, Value};

/// One call into an operator. `Describe` and `NormalizeConfig` work for every stage;
/// the others must match the stage the operator was loaded for.
#[derive(Debug, Clone)]
pub enum StageInput {
    Describe,
    NormalizeConfig(String),
    Select {
        ctx: CallContext,
        archive: ArchiveView,
    },
    Rollout {
        ctx: CallContext,
        parent: ArchiveRow,
    },
    Analyze {
        ctx: CallContext,
        rollout: Evidence,
    },
    Mutate {
        ctx: CallContext,
        observation: Observation,
    },
    Validate {
        ctx: CallContext,
        changed: Vec<String>,
        rollout: Option<Evidence>,
    },
    Novelty {
        ctx: CallContext,
        diff: CandidateDiff,
    },
    Gate {
        ctx: CallContext,
        child: ArchiveRow,
        parent: Option<ArchiveRow>,
        archive: ArchiveView,
        diff: Option<CandidateDiff>,
    },
    Record {
        ctx: CallContext,
        child: ArchiveRow,
        diff: Option<CandidateDiff>,
    },
    Reflect {
        ctx: CallContext,
        archive: ArchiveView,
        playbook: Vec<PlaybookEntry>,
    },
    /// The agent driver, after a completed generation (not a lifecycle stage).
    Driver {
        ctx: CallContext,
        feedback: DriverFeedback,
    },
}

impl StageInput {
    /// The stage this input belongs to, or `None` for the `meta` calls.
    pub fn stage(&self) -> Option<Stage> {
        Some(match self {
            StageInput::Describe | StageInput::NormalizeConfig(_) => return None,
            StageInput::Select { .. } => Stage::Select,
            StageInput::Rollout { .. } => Stage::Rollout,
            StageInput::Analyze { .. } => Stage::Analyze,
            StageInput::Mutate { .. } => Stage::Mutate,
            StageInput::Validate { .. } => Stage::Validate,
            StageInput::Novelty { .. } => Stage::Novelty,
            StageInput::Gate { .. } => Stage::Gate,
            StageInput::Record { .. } => Stage::Record,
            StageInput::Reflect { .. } => Stage::Reflect,
            StageInput::Driver { .. } => Stage::Driver,
        })
    }
}

impl StageInput {
    /// The call context, for every input that carries one.
    pub(crate) fn ctx_mut(&mut self) -> Option<&mut CallContext> {
        match self {
            StageInput::Describe | StageInput::NormalizeConfig(_) => None,
            StageInput::Select { ctx, .. }
            | StageInput::Rollout { ctx, .. }
            | StageInput::Analyze { ctx, .. }
            | StageInput::Mutate { ctx, .. }
            | StageInput::Validate { ctx, .. }
            | StageInput::Novelty { ctx, .. }
            | StageInput::Gate { ctx, .. }
            | StageInput::Record { ctx, .. }
            | StageInput::Reflect { ctx, .. }
            | StageInput::Driver { ctx, .. } => Some(ctx),
        }
    }
}

/// A validated result.
#[derive(Debug, Clone)]
pub enum StageOutput {
    Description(Description),
    /// The normalized configuration, or the violations the operator found.
    NormalizedConfig(Result<Map<String, Value>, Vec<ConfigViolation>>),
    Parents(Vec<String>),
    Evidence(Evidence),
    Proposal(Proposal),
    Validation(Validation),
    Novelty(NoveltyVerdict),
    Gate(GateDecision),
    Annotations(Map<String, Value>),
    Playbook(Vec<PlaybookOp>),
    /// The driver's proposed revision; `None` keeps the active recipe. The recipe text is
    /// a JSON object (checked), not yet checked against anything else.
    Revision(Option<Revision>),
}

impl StageOutput {
    /// The result as JSON, for the CLI and for run directories.
    pub fn to_json(&self) -> Value {
        use serde_json::json;
        let evidence =
            |e: &Evidence| json!({"summary": parse_or_text(&e.summary), "artifacts": e.artifacts});
        match self {
            StageOutput::Description(d) => json!({
                "stage": super::contract::stage_name(d.stage),
                "name": d.name,
                "summary": d.summary,
                "config_schema": parse_or_text(&d.config_schema),
            }),
            StageOutput::NormalizedConfig(Ok(c)) => json!({"config": c}),
            StageOutput::NormalizedConfig(Err(v)) => json!({"violations": v.iter()
                .map(|v| json!({"path": v.path, "message": v.message})).collect::<Vec<_>>()}),
            StageOutput::Parents(p) => json!({"parents": p}),
            StageOutput::Evidence(e) => evidence(e),
            StageOutput::Proposal(p) => json!({
                "changed": p.changed, "notes": p.notes,
                "usage": {"input_tokens": p.usage.input_tokens, "output_tokens": p.usage.output_tokens, "usd": p.usage.usd},
            }),
            StageOutput::Validation(v) => {
                json!({"accept": v.accept, "reason": v.reason, "artifacts": v.artifacts})
            }
            StageOutput::Novelty(n) => json!({"novelty": n.novelty, "accept": n.accept}),
            StageOutput::Gate(g) => json!({
                "verdict": match g.verdict { Verdict::Keep => "keep", Verdict::Discard => "discard" },
                "reason": g.reason,
            }),
            StageOutput::Annotations(a) => Value::Object(a.clone()),
            StageOutput::Playbook(ops) => Value::Array(ops.iter().map(playbook_op_json).collect()),
            StageOutput::Revision(r) => json!({"revision": r.as_ref().map(|r| json!({
                "recipe": parse_or_text(&r.recipe), "reason": r.reason,
            }))}),
        }
    }
}

fn playbook_op_json(op: &PlaybookOp) -> Value {
    use serde_json::json;
    match op {
        PlaybookOp::Add(e) => {
            json!({"op": "add", "id": e.id, "text": e.text, "data": parse_or_text(&e.data)})
        }
        PlaybookOp::Credit(c) => {
            json!({"op": "credit", "id": c.id, "delta": c.delta, "reason": c.reason})
        }
        PlaybookOp::Retire(id) => json!({"op": "retire", "id": id}),
    }
}

fn parse_or_text(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
}
