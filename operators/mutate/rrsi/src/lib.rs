//! mutate/rrsi: one model call edits the candidate under `target/` through the SDK's
//! edit blocks (the format of mutate/harness), steered by RRSI's per-edit history.
//!
//! The prompt carries the edit budget `b_t` (the same cosine schedule as
//! validate/rrsi_screen; blocks that would change more than `b_t` files are refused),
//! the history derived from the observation's archive view (`rrsi::history`: yield per
//! component over `window` generations (the largest ΔS), prune targets, untried
//! components (prompt and other included), the latest unmeasured attempts and, when
//! progress stalled, how many edits must explore an untried component), the train
//! feedback and the files under `/target`. Blocks are applied with `edits::apply`;
//! refusals are listed in the notes. Model errors are the operator's errors.

use std::path::Path;

use evolve_operator_sdk::edits::{self, Policy};
use evolve_operator_sdk::feedback;
use evolve_operator_sdk::model::{self, ChatRequest, ChatResponse, Message, ModelError, Role};
use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::rrsi::{self, config as rc};

pub struct RrsiMutate;

/// Most files listed in the prompt.
const MAX_LISTED_FILES: usize = 500;

impl Operator for RrsiMutate {
    const NAME: &'static str = "rrsi";
    const SUMMARY: &'static str = "RRSI: the model edits target/ within the annealed edit budget, told each component's yield, prune targets and what to explore.";

    fn config() -> SchemaBuilder {
        let int = |d: i64, lo: f64, hi: f64, what: &str| {
            config::integer()
                .default(json!(d))
                .minimum(lo)
                .maximum(hi)
                .description(what)
        };
        rc::schedule_fields(Schema::new())
            .field(
                "window",
                int(
                    3,
                    1.0,
                    1000.0,
                    "w (n_prune): an edit's ΔS counts in the yield while t − t_i <= w; also the stall test's w",
                ),
            )
            .field(
                "noise_band",
                rc::coefficient(0.0, "δ of the stall test S_t − S_{t−w} <= δ"),
            )
            .field(
                "exploration_slots",
                int(
                    1,
                    0.0,
                    6.0,
                    "Edits reserved for untried components (any of the six) when stalled",
                ),
            )
            .field(
                "max_tokens",
                int(4096, 1.0, 1e9, "max-tokens of the model call"),
            )
            .field(
                "temperature",
                config::number()
                    .default(json!(0.2))
                    .minimum(0.0)
                    .maximum(2.0)
                    .description("Sampling temperature"),
            )
            .field(
                "context_chars",
                int(24000, 0.0, 1e9, "Characters of target/ file contents shown"),
            )
            .field(
                "evidence_chars",
                int(8000, 200.0, 1e9, "Characters of train feedback shown"),
            )
            .refine(rc::check_schedule)
    }
}

fn system_prompt() -> String {
    format!(
        "You improve an AI agent (the files under target/) by small, targeted edits. It is \
scored on tasks you never see; the feedback comes from train tasks only, so make changes \
that generalize and never special-case a task or hard-code an answer (such edits are \
rejected before evaluation).\n\nEvery edit changes one component: client_tool (tool \
definitions the agent calls), skill (reusable procedures), memory (what the agent keeps \
between steps), subagent (delegated agents), or the prompt (wording only). You are told \
how each component's past edits paid off: do not edit pruned components; when told to \
explore, edit an untried component.\n\nBegin with one short paragraph: the failure you \
target, the component you change, the effect you expect. Then the edit blocks.\n\n{}",
        edits::FORMAT
    )
}

fn usize_of(ctx: &Context, key: &str, default: i64) -> usize {
    usize::try_from(ctx.i64(key).unwrap_or(default)).unwrap_or(0)
}

/// The history section, or why there is none.
fn history_text(
    ctx: &Context,
    obs: &Observation,
) -> Result<(String, Option<rrsi::History>), String> {
    let Some(archive) = &obs.archive else {
        return Ok(("(the host sent no archive view: no history)\n".into(), None));
    };
    let window = u32::try_from(ctx.i64("window").unwrap_or(3)).unwrap_or(0);
    let slots = u32::try_from(ctx.i64("exploration_slots").unwrap_or(1)).unwrap_or(0);
    let delta = ctx.f64("noise_band").unwrap_or(0.0);
    let h = rrsi::history(archive, window, delta, slots).map_err(|e| format!("history: {e}"))?;
    Ok((h.render(), Some(h)))
}

/// The user message.
pub fn user_prompt(
    ctx: &Context,
    obs: &Observation,
    root: &Path,
    policy: &Policy,
    budget: u64,
    history: &str,
) -> String {
    let summary = |e: &Option<Evidence>| e.as_ref().map(feedback::summary_json);
    let evidence = feedback::render_feedback(
        summary(&obs.rollout).as_ref(),
        summary(&obs.analysis).as_ref(),
        usize_of(ctx, "evidence_chars", 8000).max(200),
    );
    let files = edits::files_context(
        &edits::list_files(root, "target", MAX_LISTED_FILES),
        policy,
        usize_of(ctx, "context_chars", 24000),
    );
    format!(
        "# Generation {} (parent {})\n\nEdit budget: change at most {budget} file(s).\n\n\
## Component history\n{history}\n## Train feedback\n{evidence}\n\n## The candidate (files under target/)\n{files}",
        ctx.generation_id,
        ctx.parent.as_deref().unwrap_or("none"),
    )
}

/// The whole operator, with the guest's `/` at `root` and the model behind `chat`.
pub fn mutate_with(
    ctx: &Context,
    obs: &Observation,
    root: &Path,
    chat: &mut dyn FnMut(&ChatRequest) -> Result<ChatResponse, ModelError>,
) -> Result<Proposal, String> {
    let budget = rrsi::edit_budget(i64::from(ctx.generation), &rc::schedule(ctx))
        .map_err(|e| format!("edit budget: {e}"))?;
    let policy = Policy {
        roots: vec!["target".into()],
        includes: obs.surface.includes.clone(),
        excludes: obs.surface.excludes.clone(),
        max_files: Some(usize::try_from(budget).unwrap_or(usize::MAX)),
    };
    let (history, h) = history_text(ctx, obs)?;
    let request = ChatRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: system_prompt(),
            },
            Message {
                role: Role::User,
                content: user_prompt(ctx, obs, root, &policy, budget, &history),
            },
        ],
        max_tokens: Some(u32::try_from(ctx.i64("max_tokens").unwrap_or(4096)).unwrap_or(u32::MAX)),
        temperature: Some(ctx.f64("temperature").unwrap_or(0.2)),
    };
    let answer = chat(&request).map_err(|e| feedback::model_error(&e))?;
    let parsed = edits::parse(&answer.content);
    let mut changed = Vec::new();
    let outcomes = edits::apply(&parsed.blocks, root, &policy, &mut changed);
    let mut notes = vec![format!(
        "edit budget b_t = {budget} at generation {}",
        ctx.generation
    )];
    if let Some(h) = h {
        let names =
            |v: &[rrsi::Component]| v.iter().map(|c| c.name()).collect::<Vec<_>>().join(", ");
        notes.push(format!(
            "history: prune [{}], untried [{}], stalled {}, exploration slots {}, attempts {} ({} unmeasured)",
            names(&h.prune),
            names(&h.untried),
            h.stalled,
            h.exploration_slots,
            h.total_attempts,
            h.unmeasured.len()
        ));
    }
    notes.extend(outcomes.iter().map(|o| o.line()));
    notes.extend(parsed.errors.iter().map(|e| format!("format error: {e}")));
    let why = edits::cut(
        parsed
            .commentary
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim(),
        300,
    );
    if !why.is_empty() {
        notes.push(format!("why: {why}"));
    }
    Ok(Proposal {
        changed,
        notes,
        usage: Usage::from(&answer),
    })
}

impl Mutate for RrsiMutate {
    fn mutate(ctx: &Context, observation: &Observation) -> Result<Proposal, String> {
        mutate_with(ctx, observation, Path::new("/"), &mut |r| model::chat(r))
    }
}

evolve_operator_sdk::export!(mutate: RrsiMutate);

#[cfg(test)]
mod tests;
