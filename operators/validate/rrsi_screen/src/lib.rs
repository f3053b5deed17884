//! validate/rrsi_screen: RRSI's deterministic screen before evaluation.
//!
//! 1. **Edit budget.** The child may change at most `b_t` files, with `b_t` the cosine
//!    schedule `⌈b_min + (b_max − b_min)·½(1 + cos(π t/T))⌉` (9-decimal rounding) at
//!    `t = ctx.generation`, `T = horizon`. More is rejected.
//! 2. **Leak screen.** Every changed file the stage can read (`/target`, `/operators`
//!    when granted; deleted files, symlinks and directories are skipped; the first
//!    `max_file_bytes` bytes of each) must not contain a protected string as a whole
//!    token: the configured `protected` strings (e.g. train answers the recipe author
//!    copied from the task set, which no operator can read) and, with
//!    `protect_train_task_names`, the train task names from `tasks.train-tasks` (a
//!    task-specific special case names its task). A reason names a configured string
//!    only by its index, so an answer is never echoed into the archive.
//!
//! A rejected candidate is archived `rejected_validation` and never evaluated: it gets
//! no score.

use std::io::Read;
use std::path::Path;

use evolve_operator_sdk::prelude::*;
use evolve_operator_sdk::rrsi::{self, config as rc};
use evolve_operator_sdk::tasks;

pub struct RrsiScreen;

impl Operator for RrsiScreen {
    const NAME: &'static str = "rrsi_screen";
    const SUMMARY: &'static str = "RRSI: reject over-budget edits (cosine-annealed) and edits that leak protected strings, before evaluation.";

    fn config() -> SchemaBuilder {
        rc::schedule_fields(Schema::new())
            .field(
                "protected",
                config::array(config::string().minimum(1.0))
                    .default(json!([]))
                    .description(
                        "Strings the candidate must not contain (e.g. train task answers)",
                    ),
            )
            .field(
                "protect_train_task_names",
                config::boolean()
                    .default(json!(true))
                    .description("Also reject a changed file naming a train task"),
            )
            .field(
                "max_file_bytes",
                config::integer()
                    .default(json!(1_048_576))
                    .minimum(1.0)
                    .description("Bytes screened per changed file"),
            )
            .refine(rc::check_schedule)
    }
}

/// One protected string and how a reason may name it.
struct Protected {
    text: String,
    label: String,
}

fn protected_list(
    ctx: &Context,
    train: impl FnOnce() -> Vec<String>,
) -> Result<Vec<Protected>, String> {
    let configured: Vec<String> = ctx
        .config
        .get("protected")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    rrsi::check_protected(&configured).map_err(|e| format!("config.{e}"))?;
    let mut out: Vec<Protected> = configured
        .into_iter()
        .enumerate()
        .map(|(i, text)| Protected {
            text,
            label: format!("protected[{i}]"),
        })
        .collect();
    if ctx.bool("protect_train_task_names").unwrap_or(true) {
        let names = train().into_iter().filter(|n| !n.trim().is_empty());
        out.extend(names.map(|n| Protected {
            label: format!("train task name {n}"),
            text: n,
        }));
    }
    Ok(out)
}

/// The first `max` bytes of a regular file under a granted root; `None` for anything
/// else (outside the grants, deleted, a symlink or a directory).
fn read_changed(root: &Path, path: &str, max: u64) -> Option<String> {
    if !(path.starts_with("target/") || path.starts_with("operators/")) {
        return None;
    }
    let full = root.join(path);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::open(&full)
        .ok()?
        .take(max)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

fn reject(reason: String) -> Validation {
    Validation {
        accept: false,
        reason,
        artifacts: vec![],
    }
}

/// The whole screen, with the guest's `/` at `root` and the train task names from `train`.
pub fn screen_with(
    ctx: &Context,
    changed: &[String],
    root: &Path,
    train: impl FnOnce() -> Vec<String>,
) -> Result<Validation, String> {
    let schedule = rc::schedule(ctx);
    let t = i64::from(ctx.generation);
    let budget = rrsi::edit_budget(t, &schedule).map_err(|e| format!("edit budget: {e}"))?;
    let n = changed.len() as u64;
    if n > budget {
        return Ok(reject(format!(
            "over the edit budget: {n} changed file(s) > b_t = {budget} at generation {t} \
             (b_min {}, b_max {}, horizon {})",
            schedule.b_min, schedule.b_max, schedule.horizon
        )));
    }
    let protected = protected_list(ctx, train)?;
    let max = u64::try_from(ctx.i64("max_file_bytes").unwrap_or(1_048_576))
        .unwrap_or(1)
        .max(1);
    let texts: Vec<String> = protected.iter().map(|p| p.text.clone()).collect();
    let mut screened = 0;
    let mut leaks = Vec::new();
    for path in changed {
        let Some(text) = read_changed(root, path, max) else {
            continue;
        };
        screened += 1;
        leaks.extend(rrsi::find_leaks(path, &text, &texts));
    }
    if !leaks.is_empty() {
        let list: Vec<String> = leaks
            .iter()
            .take(20)
            .map(|l| format!("{} line {}: {}", l.path, l.line, protected[l.which].label))
            .collect();
        return Ok(reject(format!(
            "leaks {} protected string occurrence(s): {}",
            leaks.len(),
            list.join("; ")
        )));
    }
    Ok(Validation {
        accept: true,
        reason: format!(
            "within the edit budget ({n} of b_t = {budget} at generation {t}); no protected string \
             in {screened} screened file(s) ({} protected)",
            protected.len()
        ),
        artifacts: vec![],
    })
}

impl Validate for RrsiScreen {
    fn validate(
        ctx: &Context,
        changed: &[String],
        _rollout: Option<&Evidence>,
    ) -> Result<Validation, String> {
        screen_with(ctx, changed, Path::new("/"), tasks::train_tasks)
    }
}

evolve_operator_sdk::export!(validate: RrsiScreen);

#[cfg(test)]
mod tests;
