//! `evolve diff GENID [--against GENID]`: what changed in `target/` and `operators/`
//! between two generations, from the commits their `gen/*` tags name.

use super::{CliError, CliResult, print_json};
use crate::display;
use crate::workspace::{Workspace, layout};
use clap::Args;
use evolve_snapshot::{Change, ChangeKind, Oid};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
#[command(
    after_help = "Examples:\n  evolve diff 3 -w ws                  # gen 3 against its parent\n  evolve diff 5 --against 0 -w ws      # everything evolution changed since the seed\n  evolve diff 3 -w ws --stat --json"
)]
pub struct DiffArgs {
    /// The generation to show, e.g. `3` or `3-1`.
    pub genid: String,
    /// The generation to compare with (default: GENID's parent).
    #[arg(long, value_name = "GENID")]
    pub against: Option<String>,
    /// The workspace (default: the current directory).
    #[arg(long, short, default_value = ".")]
    pub workspace: PathBuf,
    /// Only the changed files with their added and removed line counts.
    #[arg(long)]
    pub stat: bool,
    #[arg(long)]
    pub json: bool,
}

/// The largest patch printed (a longer one ends with a truncation note).
const MAX_PATCH_BYTES: usize = 16 << 20;

/// Paths a diff shows: the evolvable parts of a candidate.
fn shown(path: &str) -> bool {
    [layout::TARGET_DIR, layout::OPERATORS_DIR]
        .iter()
        .any(|d| path.strip_prefix(d).is_some_and(|r| r.starts_with('/')))
}

fn tagged_commit(ws: &Workspace, genid: &str) -> Result<Oid, CliError> {
    ws.tag_commit(genid)
        .and_then(|c| Oid::from_str(&c).ok())
        .ok_or_else(|| {
            CliError::usage(format!("generation `{genid}` has no gen/{genid} tag"))
                .at(ws.root().display().to_string())
                .hint("only committed generations have one; `evolve log` lists them")
        })
}

/// The generation's parent, from the archive.
fn default_against(ws: &Workspace, genid: &str) -> Result<String, CliError> {
    let at = || ws.root().display().to_string();
    let report = super::verify::Evidence::of_workspace(ws).audit();
    let row = report
        .rows
        .iter()
        .find(|r| r.genid == genid)
        .ok_or_else(|| {
            CliError::usage(format!("generation `{genid}` is not in the archive"))
                .at(at())
                .hint("`evolve log` lists the generations")
        })?;
    row.parent.clone().ok_or_else(|| {
        CliError::usage(format!(
            "generation `{genid}` has no parent to compare with"
        ))
        .at(at())
        .hint("pass `--against GENID` (gen 0 is the seed: it has no parent)")
    })
}

fn kind(c: &Change) -> &'static str {
    match c.kind {
        ChangeKind::Added => "added",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
    }
}

pub fn diff_cmd(a: DiffArgs) -> CliResult {
    let ws = Workspace::open(&a.workspace)?;
    let against = match &a.against {
        Some(g) => g.clone(),
        None => default_against(&ws, &a.genid)?,
    };
    let (from, to) = (tagged_commit(&ws, &against)?, tagged_commit(&ws, &a.genid)?);
    let git = |e: evolve_snapshot::Error| CliError::usage(format!("cannot diff: {e}"));
    let changes: Vec<Change> = ws
        .store
        .diff(from, to)
        .map_err(git)?
        .into_iter()
        .filter(|c| shown(&c.path))
        .collect();
    let (from_tree, to_tree) = (
        ws.store.tree_of(from).map_err(git)?,
        ws.store.tree_of(to).map_err(git)?,
    );
    let patch = ws
        .store
        .unified_diff(from_tree, to_tree, &shown, MAX_PATCH_BYTES)
        .map_err(git)?;
    // Counted per file by libgit2, not read back from `patch`: a name git quotes in a
    // header, a content line starting with `++ `, or a cut patch would miscount.
    let counts = ws
        .store
        .line_counts(from_tree, to_tree, &shown)
        .map_err(git)?;
    let files: Vec<Value> = changes
        .iter()
        .map(|c| {
            let (ins, del) = counts.get(&c.path).copied().unwrap_or((0, 0));
            json!({"path": c.path, "change": kind(c), "insertions": ins, "deletions": del})
        })
        .collect();
    if a.json {
        let mut v = json!({
            "genid": a.genid, "against": against,
            "commit": to.to_string(), "against_commit": from.to_string(), "files": files,
        });
        if !a.stat {
            v["patch"] = json!(patch);
        }
        print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    // Genids, paths and the patch come from the workspace and the candidate trees: each
    // is escaped (paths quoted as git quotes them) so none can print a line of its own.
    println!(
        "gen {} ({}) against gen {} ({}): {} file(s) changed in target/ and operators/",
        display::text(&a.genid),
        short(to),
        display::text(&against),
        short(from),
        files.len()
    );
    if a.stat {
        for (c, f) in changes.iter().zip(&files) {
            println!(
                "  {:<9} {} (+{} -{})",
                kind(c),
                display::path(&c.path),
                f["insertions"],
                f["deletions"]
            );
        }
    } else {
        print!("{}", display::patch(&patch));
    }
    Ok(ExitCode::SUCCESS)
}

fn short(o: Oid) -> String {
    o.to_string().chars().take(10).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_target_and_operators_are_shown() {
        assert!(shown("target/agent.py"));
        assert!(shown("operators/gate.wasm"));
        assert!(!shown("targets/x"));
        assert!(!shown("evaluator/tasks/a/task.toml"));
        assert!(!shown("recipe.yaml"));
    }
}
