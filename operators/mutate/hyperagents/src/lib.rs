//! mutate/hyperagents: self-referential mutation (HyperAgents). One model call proposes
//! edits to the task agent under `target/` and, when the experiment lets mutate edit its
//! own machinery, to text policy files under `operators/`.
//!
//! Editable roots: the configured `roots` (default `target`, `operators`), where
//! `operators` counts only when some surface include reaches below `operators/` (e.g.
//! `operators/**`) and `/operators` is granted; a configured root that is not
//! available is reported in a note. `operators/` holds the stage components
//! (`<stage>.wasm`, binary: a block naming one is refused with a note) and any text
//! files the model writes there. This operator reads one of them,
//! [`POLICY_FILE`] (`operators/policy.md`), as its standing policy: the model sees it
//! first in every later generation whose parent carries it, so rewriting it steers how
//! later proposals are made (the self-improvement loop without recompiling anything).
//! The stages bound as script operators (`operator: script`, docs/scripts.md) run Rhai
//! scripts that live under `operators/` too: the system prompt lists them (from
//! `operators/manifest.json`), with the function each defines and when an edit to it
//! takes effect (validate and novelty: this very proposal; gate and record: this
//! generation's own; select: once a descendant is the champion; rollout, analyze and
//! mutate: the edit's descendants; reflect: the workspace head, not this tree).
//!
//! The prompt holds the generation, the editable roots and the surface, the standing
//! policy (at most [`POLICY_CHARS`] characters), the train evidence (analysis summary,
//! rollout summary, the feedback bundle's `parent.json`, sharing `evidence_chars`) and
//! the files under each editable root (contents within `context_chars`, shared). The
//! answer's blocks (format in [`edits`]) are applied in order; a block is refused, with
//! a note, outside the editable roots or the surface (`*` within a segment, `**` across;
//! `X/**` excludes `X`), for a framework-owned, `.wasm`, binary or symlinked path, or when
//! it would make the proposal change more than `max_files` files.
//!
//! The proposal lists the changed paths (first-change order); notes: a count line with
//! the first line of the model's rationale, every refusal and format error, and the
//! manifest's name; usage is the call's. `/scratch/changes.json` records the blocks and
//! their outcomes. Every `model` error is the operator's error.

pub use evolve_operator_sdk::edits;

use std::path::Path;

use evolve_operator_sdk::config::{array, integer, number, string};
use evolve_operator_sdk::model::{self, ChatRequest, ChatResponse, Message, ModelError, Role};
use evolve_operator_sdk::prelude::*;

use edits::{Outcome, Policy};

pub struct HyperAgents;

/// The change manifest, relative to `/scratch`.
pub const MANIFEST: &str = "changes.json";
/// The standing policy this operator reads from its own checkout.
pub const POLICY_FILE: &str = "operators/policy.md";
/// Characters of the standing policy shown.
pub const POLICY_CHARS: usize = 4000;
/// Most files listed per root.
pub const MAX_LISTED_FILES: usize = 500;

impl Operator for HyperAgents {
    const NAME: &'static str = "hyperagents";
    const SUMMARY: &'static str = "HyperAgents: the model edits target/ and, when the surface allows, its own policy under operators/.";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "roots",
                array(string().choices([json!("target"), json!("operators")]))
                    .default(json!(["target", "operators"]))
                    .minimum(1.0)
                    .description(
                        "Top-level directories the model may edit; operators counts only when the \
                     surface includes paths under operators/ and /operators is granted",
                    ),
            )
            .field(
                "max_files",
                integer()
                    .default(json!(8))
                    .minimum(1.0)
                    .maximum(100.0)
                    .description(
                        "Most distinct files one proposal may change; later blocks are refused",
                    ),
            )
            .field(
                "max_tokens",
                integer().default(json!(4096)).minimum(1.0).description(
                    "max-tokens of the model call (the recipe's model.max_tokens caps it)",
                ),
            )
            .field(
                "temperature",
                number()
                    .default(json!(0.7))
                    .minimum(0.0)
                    .maximum(2.0)
                    .description("Sampling temperature of the model call"),
            )
            .field(
                "context_chars",
                integer().default(json!(24000)).minimum(0.0).description(
                    "Characters of file contents (all editable roots) shown to the model",
                ),
            )
            .field(
                "evidence_chars",
                integer().default(json!(8000)).minimum(0.0).description(
                    "Characters of evidence (analysis, rollout, parent) shown to the model",
                ),
            )
    }
}

/// A `model` error as the operator's error message.
pub fn model_error(e: &ModelError) -> String {
    match e {
        ModelError::BudgetExhausted => "model: the experiment's budget is exhausted".into(),
        ModelError::Unavailable(m) => format!("model: unavailable: {m}"),
        ModelError::Refused(m) => format!("model: the provider refused the request: {m}"),
        ModelError::Failed(m) => format!("model: the call failed: {m}"),
        ModelError::Timeout => "model: the call timed out".into(),
        ModelError::InvalidRequest(m) => format!("model: invalid request: {m}"),
    }
}

/// The normalized configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub roots: Vec<String>,
    pub max_files: usize,
    pub max_tokens: u32,
    pub temperature: f64,
    pub context_chars: usize,
    pub evidence_chars: usize,
}

impl Settings {
    pub fn from_ctx(ctx: &Context) -> Result<Settings, String> {
        let int = |k: &str, d: i64| ctx.i64(k).unwrap_or(d);
        let usize_of = |k: &str, d: i64| {
            usize::try_from(int(k, d)).map_err(|_| format!("config.{k} must be an integer >= 0"))
        };
        let roots: Vec<String> = match ctx.config.get("roots") {
            None => vec!["target".into(), "operators".into()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| match v.as_str() {
                    Some(s @ ("target" | "operators")) => Ok(s.to_string()),
                    _ => Err("config.roots may name only target and operators".to_string()),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("config.roots must be an array".into()),
        };
        if roots.is_empty() {
            return Err("config.roots must name at least one root".into());
        }
        let max_files = usize_of("max_files", 8)?;
        if max_files == 0 {
            return Err("config.max_files must be an integer >= 1".into());
        }
        let max_tokens = u32::try_from(int("max_tokens", 4096))
            .ok()
            .filter(|n| *n >= 1)
            .ok_or("config.max_tokens must be an integer >= 1")?;
        let temperature = ctx.f64("temperature").unwrap_or(0.7);
        if !(0.0..=2.0).contains(&temperature) {
            return Err("config.temperature must be a number in 0..=2".into());
        }
        Ok(Settings {
            roots,
            max_files,
            max_tokens,
            temperature,
            context_chars: usize_of("context_chars", 24000)?,
            evidence_chars: usize_of("evidence_chars", 8000)?,
        })
    }
}

/// The roots this call may edit, and a note for each configured root it may not.
pub fn editable_roots(
    configured: &[String],
    surface: &Surface,
    operators_granted: bool,
) -> (Vec<String>, Vec<String>) {
    let mut roots = Vec::new();
    let mut notes = Vec::new();
    for r in configured {
        if roots.contains(r) {
            continue;
        }
        if r == "operators" {
            if !edits::includes_under(&surface.includes, "operators") {
                notes.push(
                    "operators/ is not editable: the surface includes nothing under it".into(),
                );
                continue;
            }
            if !operators_granted {
                notes.push("operators/ is not editable: /operators is not granted".into());
                continue;
            }
        }
        roots.push(r.clone());
    }
    (roots, notes)
}

/// The operator scripts of this checkout, `(stage, path)`, in lifecycle order, from
/// `operators/manifest.json` (what `evolve init` installed for `operator: script`
/// bindings). Unreadable or absent: none.
pub fn operator_scripts(root: &Path) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(root.join("operators/manifest.json")) else {
        return vec![];
    };
    let manifest: Value = evolve_operator_sdk::serde_json::from_str(&text).unwrap_or_default();
    const ORDER: [&str; 9] = [
        "select", "rollout", "analyze", "mutate", "validate", "novelty", "gate", "record",
        "reflect",
    ];
    ORDER
        .iter()
        .filter_map(|stage| {
            let file = manifest["components"][stage]["script"]["file"].as_str()?;
            Some((stage.to_string(), file.to_string()))
        })
        .collect()
}

/// What a stage's script defines, and when an edit to it takes effect (the stage's
/// loading rule, docs/lifecycle.md).
fn script_contract(stage: &str) -> (&'static str, &'static str) {
    match stage {
        "select" => (
            "fn select(ctx, archive) -> [generation ids]",
            "loaded from the champion's commit: steers parent choice once a descendant of this edit is the champion",
        ),
        "rollout" => (
            "fn rollout(ctx, parent) -> #{summary: #{…}, artifacts}",
            "loaded from the parent fork: gathers evidence in generations that descend from this edit",
        ),
        "analyze" => (
            "fn analyze(ctx, rollout) -> #{summary: #{…}, artifacts}",
            "loaded from the parent fork: condenses evidence in generations that descend from this edit",
        ),
        "mutate" => (
            "fn mutate(ctx, observation) -> #{changed, notes}",
            "loaded from the parent fork: makes the proposals of generations that descend from this edit, never this one",
        ),
        "validate" => (
            "fn validate(ctx, changed, rollout) -> #{accept, reason, artifacts}",
            "loaded from the tree you are editing: judges this very proposal",
        ),
        "novelty" => (
            "fn assess(ctx, diff) -> #{novelty, accept}",
            "loaded from the tree you are editing: judges this very proposal",
        ),
        "gate" => (
            "fn decide(ctx, child, parent) -> #{verdict: \"keep\" or \"discard\", reason}",
            "loaded from the committed child: decides this generation too",
        ),
        "record" => (
            "fn annotate(ctx, child) -> #{note, …}",
            "loaded from the committed child: annotates this generation too",
        ),
        "reflect" => (
            "fn reflect(ctx, archive, playbook) -> [#{op: \"add\", id, text, data}, …]",
            "loaded from the workspace head (docs/lifecycle.md), not from the tree you are editing",
        ),
        _ => (
            "the stage's function",
            "loaded from the stage's checkout (docs/lifecycle.md)",
        ),
    }
}

/// The system message's section on operator scripts (empty without any).
fn scripts_section(scripts: &[(String, String)]) -> String {
    if scripts.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "These stages run Rhai scripts under operators/ that you may improve (each file documents itself; ctx.config holds the recipe's parameters, which you cannot change):
",
    );
    for (stage, path) in scripts {
        let (function, rule) = script_contract(stage);
        s.push_str(&format!(
            "- {stage}: {path}, `{function}`; {rule}.
"
        ));
    }
    s.push_str(
        "A script that does not parse, throws, or runs past its operation or memory limits fails its stage in every generation that loads it, so keep edits small and correct.

",
    );
    s
}

/// The system message; `operators` says whether `operators/` is editable, `scripts`
/// lists the operator scripts there ([`operator_scripts`]).
pub fn system_prompt(operators: bool, max_files: usize, scripts: &[(String, String)]) -> String {
    let mut s = String::from(
        "You improve a self-improving agent system. The task agent lives under target/; the \
benchmark scores only target/, on tasks you never see (your evidence comes from train tasks), \
so make changes that generalize and never special-case a task.\n\n",
    );
    if operators {
        s.push_str(&format!(
            "operators/ is editable too: it holds the evolution's stage components \
(<stage>.wasm, compiled and binary, so they cannot be edited) and text files. This mutation \
step reads {POLICY_FILE} as its standing policy in every later generation: rewrite it when \
the evidence shows that changing how proposals are made pays off more than a direct change, \
and say how later proposals will benefit; an edit to it takes effect in later generations, \
never for the one being made. Still prefer a substantive target/ improvement in every \
proposal, and do not make cosmetic target/ edits just to have one.\n\n"
        ));
        s.push_str(&scripts_section(scripts));
    }
    s.push_str(&format!(
        "You answer once. Begin with a short rationale (the evidence, the change, the expected \
effect), then make one coherent change with edit blocks, touching at most {max_files} \
file(s). Never try to change the evaluator, the archive, keys, budgets or limits.\n\n{}",
        edits::FORMAT
    ));
    s
}

/// The evidence section: analysis summary, rollout summary, then the parent as the
/// feedback bundle describes it, sharing `budget` characters in that order.
pub fn evidence_text(obs: &Observation, parent_json: Option<&str>, budget: usize) -> String {
    let mut parts: Vec<(&str, String)> = Vec::new();
    if let Some(a) = &obs.analysis {
        parts.push(("Analysis of the parent's results", a.summary.clone()));
    }
    if let Some(r) = &obs.rollout {
        parts.push(("Rollout of the parent", r.summary.clone()));
    }
    if let Some(p) = parent_json {
        parts.push(("The parent generation", p.trim().to_string()));
    }
    if parts.is_empty() {
        return "(no evidence was gathered for this generation)\n".into();
    }
    let mut left = budget;
    let mut out = String::new();
    for (title, text) in parts {
        out.push_str(&format!("### {title}\n{}\n\n", edits::cut(&text, left)));
        left = left.saturating_sub(text.chars().count().min(left));
    }
    out
}

/// The user message.
pub fn user_prompt(
    ctx: &Context,
    obs: &Observation,
    roots: &[String],
    policy_text: Option<&str>,
    evidence: &str,
    files: &str,
) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.join(", ")
        }
    };
    let roots: Vec<String> = roots.iter().map(|r| format!("{r}/")).collect();
    let mut s = format!(
        "# Generation {} (parent {})\n\nEditable roots: {}\n\n## Mutable surface\ninclude: {}\nexclude: {}\n\n",
        ctx.generation_id,
        ctx.parent.as_deref().unwrap_or("none"),
        roots.join(", "),
        list(&obs.surface.includes),
        list(&obs.surface.excludes)
    );
    if roots.iter().any(|r| r == "operators/") {
        match policy_text {
            Some(p) => s.push_str(&format!(
                "## Standing policy ({POLICY_FILE}, written by earlier generations)\n{}\n\n",
                edits::cut(p.trim(), POLICY_CHARS)
            )),
            None => s.push_str(&format!(
                "## Standing policy\n{POLICY_FILE} does not exist yet.\n\n"
            )),
        }
    }
    s.push_str(&format!(
        "## Evidence\n{evidence}## Files\n{files}\nMake one coherent change with edit blocks."
    ));
    s
}

fn first_line(s: &str, n: usize) -> String {
    edits::cut(
        s.lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim(),
        n,
    )
}

/// The whole operator, with the guest's `/` at `root` and the model behind `chat`.
pub fn hyperagents_with(
    ctx: &Context,
    obs: &Observation,
    root: &Path,
    chat: &mut dyn FnMut(&ChatRequest) -> Result<ChatResponse, ModelError>,
) -> Result<Proposal, String> {
    let settings = Settings::from_ctx(ctx)?;
    if obs.surface.includes.is_empty() {
        return Err("the surface includes nothing, so there is nothing to edit".into());
    }
    let (roots, mut notes) = editable_roots(
        &settings.roots,
        &obs.surface,
        root.join("operators").is_dir(),
    );
    if roots.is_empty() {
        return Err(format!(
            "no configured root is editable ({})",
            notes.join("; ")
        ));
    }
    let policy = Policy {
        roots: roots.clone(),
        includes: obs.surface.includes.clone(),
        excludes: obs.surface.excludes.clone(),
        max_files: Some(settings.max_files),
    };
    let operators = roots.iter().any(|r| r == "operators");
    let policy_text = operators
        .then(|| std::fs::read_to_string(root.join(POLICY_FILE)).ok())
        .flatten();
    let parent_json = obs.feedback_dir.as_deref().and_then(|d| {
        std::fs::read_to_string(root.join(d.trim_start_matches('/')).join("parent.json")).ok()
    });
    let evidence = evidence_text(obs, parent_json.as_deref(), settings.evidence_chars);
    let mut listing = Vec::new();
    for r in &roots {
        listing.extend(edits::list_files(root, r, MAX_LISTED_FILES));
    }
    let files = edits::files_context(&listing, &policy, settings.context_chars);
    let scripts = if operators {
        operator_scripts(root)
    } else {
        vec![]
    };
    let request = ChatRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: system_prompt(operators, settings.max_files, &scripts),
            },
            Message {
                role: Role::User,
                content: user_prompt(ctx, obs, &roots, policy_text.as_deref(), &evidence, &files),
            },
        ],
        max_tokens: Some(settings.max_tokens),
        temperature: Some(settings.temperature),
    };
    let answer = chat(&request).map_err(|e| model_error(&e))?;
    let parsed = edits::parse(&answer.content);
    let mut changed = Vec::new();
    let outcomes = edits::apply(&parsed.blocks, root, &policy, &mut changed);
    let ok = outcomes.iter().filter(|o| o.applied).count();
    let mut summary = format!(
        "{ok} edit(s) applied, {} refused, {} format error(s)",
        outcomes.len() - ok,
        parsed.errors.len()
    );
    let said = first_line(&parsed.commentary, 160);
    if !said.is_empty() {
        summary.push_str(&format!("; {said}"));
    }
    notes.insert(0, summary);
    notes.extend(outcomes.iter().filter(|o| !o.applied).map(Outcome::line));
    notes.extend(parsed.errors.iter().map(|e| format!("format error: {e}")));
    let manifest = json!({
        "operator": "mutate/hyperagents",
        "generation_id": ctx.generation_id,
        "parent": ctx.parent,
        "roots": roots,
        "files": changed,
        "blocks": outcomes.iter().map(Outcome::to_json).collect::<Vec<_>>(),
        "format_errors": parsed.errors,
        "rationale": edits::cut(&parsed.commentary, 4000),
        "usage": {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens,
                  "usd": answer.usd},
    });
    let mut text = evolve_operator_sdk::serde_json::to_string_pretty(&manifest)
        .map_err(|e| format!("cannot serialize {MANIFEST}: {e}"))?;
    text.push('\n');
    std::fs::write(root.join("scratch").join(MANIFEST), text)
        .map_err(|e| format!("cannot write /scratch/{MANIFEST}: {e}"))?;
    notes.push(format!("change manifest: /scratch/{MANIFEST}"));
    Ok(Proposal {
        changed,
        notes,
        usage: Usage::from(&answer),
    })
}

impl Mutate for HyperAgents {
    fn mutate(ctx: &Context, observation: &Observation) -> Result<Proposal, String> {
        hyperagents_with(ctx, observation, Path::new("/"), &mut |r| model::chat(r))
    }
}

evolve_operator_sdk::export!(mutate: HyperAgents);

#[cfg(test)]
mod tests;
