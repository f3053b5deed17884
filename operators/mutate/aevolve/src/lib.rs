//! mutate/aevolve: A-Evolve-style, goal-directed edits to an agent's prompt and skills
//! through the host's `model`.
//!
//! The operator reads the agent's prompt (`prompt_path`, which must exist) and every
//! regular file under `skills_dir` (which may be missing: the model can create the first
//! skill), in path order, and makes one `model.chat` call:
//!
//! * system message: the role (a meta-learning agent improving another agent's
//!   workspace), the guidelines (few focused, general edits; a skill is a directory
//!   under `skills_dir` with a `SKILL.md`; refine before adding; no answers to particular
//!   tasks; keep `{{ … }}` placeholders) and the answer format below;
//! * user message: the generation, the current prompt and skills (each in a fence longer
//!   than any backtick run inside it), the train feedback and the task.
//!
//! The prompt is always shown in full (one longer than `max_context_chars` is an error);
//! skills follow in path order while the prompt and the skills shown so far stay within
//! `max_context_chars`, and the rest are listed with their size only.
//!
//! **Feedback**, bounded by `max_feedback_chars` characters, is built exactly as in
//! mutate/reflective: a rollout/train headline, then analysis failure `groups`, else the
//! rollout's failed trials, plus any other analysis (e.g. analyze/trajectory_only) as one
//! compact JSON line; whole lines from the start, then a line counting those left out.
//!
//! **Answer format** (strict). Each changed or new file is one block:
//!
//! ```text
//! === FILE: target/skills/retry/SKILL.md ===
//! <the complete new content>
//! === END ===
//! ```
//!
//! Header and end lines must be exactly these (trailing whitespace ignored); text outside
//! blocks is the model's reasoning (kept, on one line and cut to 300 characters, as the
//! `why` note). A header that is not `=== FILE: <path> ===`, a header inside a block, an
//! `=== END ===` outside one, a block never ended, an empty block, no block at all, more
//! than `max_files` blocks, two blocks for one path, and any block whose path (with or
//! without a leading `/`) is neither `prompt_path` nor a file under `skills_dir` are
//! refused as the operator's error, naming the block, before anything is written. So are
//! a new prompt that drops a `{{ … }}` placeholder of the current one, a path that is a
//! symbolic link or a directory, and an answer whose every block equals its file's
//! current content (trailing whitespace ignored). A block identical to its file is
//! skipped; the others replace their files (new skill files and directories are
//! created), each with one final newline.
//!
//! Model errors become the operator's errors (`model: <kind>: <detail>`), which the
//! lifecycle archives as `operator_failed`.
//!
//! Proposal: `changed` = the written paths in block order; notes `<path>: new` or
//! `<path>: rewritten` per written file, `<path>: unchanged (skipped)` per skipped block,
//! and `why: <text>`; usage = the answer's tokens and metered USD.

use std::path::Path;

use evolve_operator_sdk::config::{integer, number, string};
use evolve_operator_sdk::model::{self, ChatRequest, ChatResponse, Message, ModelError, Role};
use evolve_operator_sdk::prelude::*;

pub struct AEvolve;

/// Characters kept of the model's reasoning in the `why` note.
pub const WHY_CHARS: usize = 300;
/// Most skill files read from `skills_dir`.
pub const MAX_SKILL_FILES: usize = 200;

impl Operator for AEvolve {
    const NAME: &'static str = "aevolve";
    const SUMMARY: &'static str = "Edit the agent's prompt and skills from train feedback through \
         the model, in a few whole-file blocks (A-Evolve).";

    fn config() -> SchemaBuilder {
        Schema::new()
            .field(
                "prompt_path",
                string()
                    .default(json!("target/prompt.md"))
                    .description("The agent's prompt file, under target/; it must exist"),
            )
            .field(
                "skills_dir",
                string().default(json!("target/skills/")).description(
                    "Directory of the agent's skills, under target/; the model may edit and \
                     create files below it",
                ),
            )
            .field(
                "max_files",
                integer()
                    .default(json!(3))
                    .minimum(1.0)
                    .maximum(50.0)
                    .description("Most files one answer may change or create"),
            )
            .field(
                "max_feedback_chars",
                integer().default(json!(4000)).minimum(200.0).description(
                    "Longest train-failure feedback put into the prompt, in characters",
                ),
            )
            .field(
                "max_context_chars",
                integer().default(json!(24000)).minimum(1000.0).description(
                    "Most characters of the current prompt and skills shown to the model; skills \
                     past it are listed by name",
                ),
            )
            .field(
                "max_tokens",
                integer()
                    .default(json!(4096))
                    .minimum(1.0)
                    .description("Upper bound on the model's answer, in tokens"),
            )
            .field(
                "temperature",
                number()
                    .default(json!(0.7))
                    .minimum(0.0)
                    .maximum(2.0)
                    .description("Sampling temperature of the model call"),
            )
            .refine(check_config)
    }
}

fn check_config(c: &Map<String, Value>) -> Result<(), Vec<Violation>> {
    let mut v = Vec::new();
    let prompt = c.get("prompt_path").and_then(Value::as_str).map(target_rel);
    let skills = c.get("skills_dir").and_then(Value::as_str).map(target_rel);
    if let Some(Err(_)) = prompt {
        v.push(Violation::new(
            "prompt_path",
            "must be a file path under target/, e.g. target/prompt.md",
        ));
    }
    if let Some(Err(_)) = skills {
        v.push(Violation::new(
            "skills_dir",
            "must be a directory under target/, e.g. target/skills/",
        ));
    }
    if let (Some(Ok(p)), Some(Ok(s))) = (prompt, skills)
        && (p == s || p.starts_with(&format!("{s}/")))
    {
        v.push(Violation::new(
            "prompt_path",
            "must not be inside skills_dir",
        ));
    }
    if v.is_empty() { Ok(()) } else { Err(v) }
}

/// `target/a/b`, `/target/a/b` or `target/a/b/` → `target/a/b`; anything else
/// (outside `target/`, `.`/`..`/empty segments, backslashes) is refused.
pub fn target_rel(path: &str) -> Result<String, String> {
    let rel = path.strip_prefix('/').unwrap_or(path);
    let rel = rel.strip_suffix('/').unwrap_or(rel);
    let mut parts = rel.split('/');
    let ok = parts.next() == Some("target")
        && rel.len() > "target/".len()
        && parts.all(|p| !p.is_empty() && p != "." && p != ".." && !p.contains('\\'));
    if ok {
        Ok(rel.to_string())
    } else {
        Err(format!("{path:?} is not a path under target/"))
    }
}

// Feedback: evolve_operator_sdk::feedback (shared with mutate/reflective).
pub use evolve_operator_sdk::feedback::*;

// ---------------------------------------------------------------------------------
// The workspace and the prompt

/// What the operator read of the agent: its prompt and its skill files.
#[derive(Debug, Clone, PartialEq)]
pub struct Workspace {
    pub prompt_path: String,
    pub prompt: String,
    pub skills_dir: String,
    /// Workspace-relative path and content (`None` for a file that is not UTF-8), in
    /// path order.
    pub skills: Vec<(String, Option<String>)>,
}

/// Read the prompt and the skill files, with `/` of the guest file system at `root`.
pub fn read_workspace(
    root: &Path,
    prompt_path: &str,
    skills_dir: &str,
) -> Result<Workspace, String> {
    let prompt = std::fs::read_to_string(root.join(prompt_path)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "{prompt_path} does not exist: mutate/aevolve evolves an agent's prompt and skills \
             (set prompt_path to the agent's prompt file)"
        ),
        _ => format!("cannot read {prompt_path}: {e}"),
    })?;
    let mut skills = Vec::new();
    let mut stack = vec![skills_dir.to_string()];
    let mut files = Vec::new();
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(root.join(&dir)) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot list {dir}: {e}")),
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = format!("{dir}/{name}");
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(rel),
                Ok(t) if t.is_file() => files.push(rel),
                _ => {}
            }
        }
    }
    files.sort();
    for rel in files.into_iter().take(MAX_SKILL_FILES) {
        let bytes =
            std::fs::read(root.join(&rel)).map_err(|e| format!("cannot read {rel}: {e}"))?;
        skills.push((rel, String::from_utf8(bytes).ok()));
    }
    Ok(Workspace {
        prompt_path: prompt_path.to_string(),
        prompt,
        skills_dir: skills_dir.to_string(),
        skills,
    })
}

/// A backtick fence longer than any backtick run in `text` (at least three).
pub fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

fn fenced(text: &str) -> String {
    let fence = fence_for(text);
    let body = text.strip_suffix('\n').unwrap_or(text);
    format!("{fence}\n{body}\n{fence}")
}

/// The system message.
pub fn system_prompt(prompt_path: &str, skills_dir: &str, max_files: usize) -> String {
    format!(
        "You are a meta-learning agent. You improve another AI agent by editing its workspace: \
         its prompt ({prompt_path}) and its skills (files under {skills_dir}/). You are shown \
         the current files and evidence of how the agent did on training tasks.\n\n\
         Guidelines:\n\
         - Make a few focused edits that address the failures; quality over quantity.\n\
         - A skill is a directory under {skills_dir}/ whose SKILL.md says when the skill \
         applies and how to apply it. Prefer refining an existing skill to adding a \
         near-duplicate.\n\
         - Write general, transferable lessons. Never write answers to particular tasks.\n\
         - Keep template placeholders such as {{{{ instruction }}}} that the prompt contains.\n\n\
         Answer format: for each file you change or create, write one block\n\
         === FILE: <path> ===\n\
         <the complete new content of the file>\n\
         === END ===\n\
         where <path> is {prompt_path} or a file under {skills_dir}/. Each block replaces the \
         whole file, so write the file in full, without code fences around it. At most \
         {max_files} blocks. Text outside the blocks is read as your reasoning."
    )
}

/// The user message: the generation, the current files within `max_context_chars`, the
/// feedback and the task.
pub fn user_prompt(
    generation: u32,
    ws: &Workspace,
    feedback: &str,
    max_files: usize,
    max_context_chars: usize,
) -> String {
    let mut used = ws.prompt.chars().count();
    let mut out = format!(
        "Evolution cycle: generation {generation}.\n\n\
         ## Current prompt: {}\n{}\n\n",
        ws.prompt_path,
        fenced(&ws.prompt)
    );
    if ws.skills.is_empty() {
        out.push_str(&format!(
            "## Current skills under {}/\n(none yet)\n\n",
            ws.skills_dir
        ));
    } else {
        out.push_str(&format!(
            "## Current skills under {}/ ({} files)\n",
            ws.skills_dir,
            ws.skills.len()
        ));
        for (path, text) in &ws.skills {
            match text {
                None => out.push_str(&format!("### {path}\n(not UTF-8 text; left out)\n")),
                Some(t) if used + t.chars().count() <= max_context_chars => {
                    used += t.chars().count();
                    out.push_str(&format!("### {path}\n{}\n", fenced(t)));
                }
                Some(t) => out.push_str(&format!(
                    "### {path}\n({} characters; left out to fit max_context_chars)\n",
                    t.chars().count()
                )),
            }
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "## Feedback from the train tasks\n{feedback}\n\n\
         ## Task\n\
         Edit the prompt and/or the skills so that the agent avoids these failures. Answer \
         with at most {max_files} FILE blocks, each holding the complete new content of one \
         file."
    ));
    out
}

/// The chat request.
pub fn build_request(
    system: String,
    user: String,
    max_tokens: u32,
    temperature: f64,
) -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: system,
            },
            Message {
                role: Role::User,
                content: user,
            },
        ],
        max_tokens: Some(max_tokens),
        temperature: Some(temperature),
    }
}

// ---------------------------------------------------------------------------------
// The answer

/// One whole-file edit, as the model wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    /// The path as written in the header.
    pub path: String,
    /// The new content, with one final newline.
    pub content: String,
}

/// The model's edit blocks and its reasoning (the text outside them, on one line and
/// cut to [`WHY_CHARS`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Edits {
    pub edits: Vec<Edit>,
    pub why: String,
}

const HEADER: &str = "=== FILE:";
const END: &str = "=== END ===";

/// Parse the answer's `=== FILE: <path> ===` … `=== END ===` blocks, strictly.
pub fn parse_edits(answer: &str) -> Result<Edits, String> {
    let mut edits = Vec::new();
    let mut outside = Vec::new();
    let mut open: Option<(String, usize, Vec<&str>)> = None;
    for (i, raw) in answer.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end();
        let is_header = line.starts_with("=== FILE");
        match open.as_mut() {
            None if is_header => {
                let path = line
                    .strip_prefix(HEADER)
                    .and_then(|r| r.strip_suffix(" ==="))
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .ok_or(format!(
                        "line {n} of the model's answer is not a header `=== FILE: <path> ===`"
                    ))?;
                open = Some((path.to_string(), n, Vec::new()));
            }
            None if line == END => {
                return Err(format!(
                    "line {n} of the model's answer ends a block that was never opened"
                ));
            }
            None => outside.push(raw),
            Some((path, _, _)) if is_header => {
                return Err(format!(
                    "line {n} of the model's answer opens a block inside the block for {path} \
                     (missing `=== END ===`)"
                ));
            }
            Some(_) if line == END => {
                let (path, _, body) = open.take().expect("an open block");
                let content = body.join("\n");
                if content.trim().is_empty() {
                    return Err(format!("the model's block for {path} is empty"));
                }
                edits.push(Edit {
                    path,
                    content: format!("{}\n", content.trim_end_matches(['\n', '\r'])),
                });
            }
            Some((_, _, body)) => body.push(raw),
        }
    }
    if let Some((path, n, _)) = open {
        return Err(format!(
            "the model's block for {path} (line {n}) has no `=== END ===`"
        ));
    }
    if edits.is_empty() {
        return Err("the model's answer has no `=== FILE: <path> ===` block".into());
    }
    let why = outside
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Edits {
        edits,
        why: head(&why, WHY_CHARS),
    })
}

/// The `{{ … }}` placeholders of `text` (at most 80 characters each, on one line), in
/// order of first appearance.
pub fn placeholders(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) if end <= 80 && !after[..end].contains('\n') => {
                let p = format!("{{{{{}}}}}", &after[..end]);
                if !out.contains(&p) {
                    out.push(p);
                }
                rest = &after[end + 2..];
            }
            _ => rest = after,
        }
    }
    out
}

/// Check the edits against the allowed paths and the limits; returns the normalized
/// workspace-relative path of each edit, in order.
pub fn check_edits(
    edits: &[Edit],
    prompt_path: &str,
    skills_dir: &str,
    max_files: usize,
) -> Result<Vec<String>, String> {
    if edits.len() > max_files {
        return Err(format!(
            "the model's answer edits {} files, more than max_files ({max_files})",
            edits.len()
        ));
    }
    let mut paths: Vec<String> = Vec::new();
    for (i, e) in edits.iter().enumerate() {
        let allowed = target_rel(&e.path)
            .ok()
            .filter(|p| p == prompt_path || p.starts_with(&format!("{skills_dir}/")));
        let Some(p) = allowed else {
            return Err(format!(
                "the model's block {} names {}, which is neither {prompt_path} nor a file under \
                 {skills_dir}/: refused",
                i + 1,
                e.path
            ));
        };
        if paths.contains(&p) {
            return Err(format!("the model's answer has two blocks for {p}"));
        }
        paths.push(p);
    }
    Ok(paths)
}

// ---------------------------------------------------------------------------------
// The operator

fn config_usize(ctx: &Context, key: &str, default: usize) -> usize {
    ctx.i64(key)
        .and_then(|v| usize::try_from(v).ok())
        .unwrap_or(default)
}

/// One A-Evolve mutation with `/` of the guest file system at `root` and `chat` standing
/// in for the host's `model.chat`.
pub fn evolve(
    ctx: &Context,
    observation: &Observation,
    root: &Path,
    chat: &mut dyn FnMut(&ChatRequest) -> Result<ChatResponse, ModelError>,
) -> Result<Proposal, String> {
    let prompt_path = target_rel(ctx.str("prompt_path").unwrap_or("target/prompt.md"))
        .map_err(|e| format!("config.prompt_path: {e}"))?;
    let skills_dir = target_rel(ctx.str("skills_dir").unwrap_or("target/skills/"))
        .map_err(|e| format!("config.skills_dir: {e}"))?;
    let max_files = config_usize(ctx, "max_files", 3).max(1);
    let max_feedback = config_usize(ctx, "max_feedback_chars", 4000);
    let max_context = config_usize(ctx, "max_context_chars", 24000);
    let max_tokens = ctx
        .i64("max_tokens")
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(4096);
    let temperature = ctx.f64("temperature").unwrap_or(0.7);

    let ws = read_workspace(root, &prompt_path, &skills_dir)?;
    let prompt_chars = ws.prompt.chars().count();
    if prompt_chars > max_context {
        return Err(format!(
            "{prompt_path} has {prompt_chars} characters, more than max_context_chars ({max_context})"
        ));
    }
    let rollout = observation.rollout.as_ref().map(summary_json);
    let analysis = observation.analysis.as_ref().map(summary_json);
    let feedback = render_feedback(rollout.as_ref(), analysis.as_ref(), max_feedback);
    let request = build_request(
        system_prompt(&prompt_path, &skills_dir, max_files),
        user_prompt(ctx.generation, &ws, &feedback, max_files, max_context),
        max_tokens,
        temperature,
    );
    let response = chat(&request).map_err(|e| model_error(&e))?;
    let parsed = parse_edits(&response.content)?;
    let paths = check_edits(&parsed.edits, &prompt_path, &skills_dir, max_files)?;

    // Every check before the first write.
    let mut plan: Vec<(String, &str, bool)> = Vec::new(); // (path, content, new)
    let mut notes = Vec::new();
    for (path, edit) in paths.iter().zip(&parsed.edits) {
        let file = root.join(path);
        let current = match std::fs::symlink_metadata(&file) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!("{path} is a symbolic link: refused"));
            }
            Ok(m) if m.is_dir() => return Err(format!("{path} is a directory: refused")),
            Ok(_) => Some(
                std::fs::read_to_string(&file).map_err(|e| format!("cannot read {path}: {e}"))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot inspect {path}: {e}")),
        };
        if *path == prompt_path {
            let missing: Vec<String> = placeholders(&ws.prompt)
                .into_iter()
                .filter(|p| !edit.content.contains(p.as_str()))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "the model's new {path} drops the placeholder {}",
                    missing.join(", ")
                ));
            }
        }
        match current {
            Some(c) if c.trim_end() == edit.content.trim_end() => {
                notes.push(format!("{path}: unchanged (skipped)"));
            }
            current => plan.push((path.clone(), &edit.content, current.is_none())),
        }
    }
    if plan.is_empty() {
        return Err("the model's edits leave every file unchanged".into());
    }
    let mut changed = Vec::new();
    for (path, content, new) in plan {
        let file = root.join(&path);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create the directory of {path}: {e}"))?;
        }
        std::fs::write(&file, content).map_err(|e| format!("cannot write {path}: {e}"))?;
        notes.push(format!("{path}: {}", if new { "new" } else { "rewritten" }));
        changed.push(path);
    }
    let why = if parsed.why.is_empty() {
        "(the model gave no reasoning)".to_string()
    } else {
        parsed.why
    };
    notes.push(format!("why: {why}"));
    Ok(Proposal {
        changed,
        notes,
        usage: Usage::from(&response),
    })
}

impl Mutate for AEvolve {
    fn mutate(ctx: &Context, observation: &Observation) -> Result<Proposal, String> {
        evolve(ctx, observation, Path::new("/"), &mut |r| model::chat(r))
    }
}

evolve_operator_sdk::export!(mutate: AEvolve);

#[cfg(test)]
mod tests;
