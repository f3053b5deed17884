//! `evolve diff GENID [--against GENID]`: what changed in `target/` and `operators/`
//! between two generations, from the commits their `gen/*` tags name. A candidate
//! rejected before its commit (surface, operator edits, validate, novelty) has no tag;
//! its diff is of the tree it proposed, kept on `refs/evolve/proposed/<genid>`, printed
//! after the stop's status and reason.

use crate::command::{CliError, CliResult, print_json};
use crate::display;
use crate::layout;
use crate::workspace::Workspace;
use clap::Args;
use evolve_archive::{Report, Row};
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
    /// Print the result as JSON on stdout.
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

/// The generation's certified archive row.
fn archived_row<'r>(ws: &Workspace, report: &'r Report, genid: &str) -> Result<&'r Row, CliError> {
    report
        .rows
        .iter()
        .find(|r| r.genid == genid)
        .ok_or_else(|| {
            CliError::usage(format!("generation `{genid}` is not in the archive"))
                .at(ws.root().display().to_string())
                .hint("`evolve log` lists the generations")
        })
}

/// The generation's parent, from the archive.
fn default_against(ws: &Workspace, row: &Row) -> Result<String, CliError> {
    row.parent.clone().ok_or_else(|| {
        CliError::usage(format!(
            "generation `{}` has no parent to compare with",
            row.genid
        ))
        .at(ws.root().display().to_string())
        .hint("pass `--against GENID` (gen 0 is the seed: it has no parent)")
    })
}

/// What is diffed: a committed generation, or a rejected candidate's kept proposal.
struct Shown {
    commit: Oid,
    /// Set for a rejected candidate: why it stopped.
    rejected: Option<Rejection>,
}

struct Rejection {
    status: String,
    stage: Option<String>,
    reason: Option<String>,
    /// The ref names the tree the certified stop recorded.
    certified: bool,
}

/// The generation's commit, or, for one stopped before its commit, the proposal kept on
/// `refs/evolve/proposed/<genid>` with the stop's verdict and reason.
fn shown_commit(ws: &Workspace, row: &Row) -> Result<Shown, CliError> {
    if let Some(commit) = ws
        .tag_commit(&row.genid)
        .and_then(|c| Oid::from_str(&c).ok())
    {
        return Ok(Shown {
            commit,
            rejected: None,
        });
    }
    let status = row.display_status();
    let why = format!(
        "{status}{}{}",
        row.failure_stage
            .as_deref()
            .map_or(String::new(), |s| format!(" ({s})")),
        row.reason
            .as_deref()
            .map_or(String::new(), |r| format!(": {r}"))
    );
    let body = crate::viewer::data::last_certified_body(&ws.paths.archive(), row, "status");
    let Some(p) = ws.proposal(&row.genid, body.as_ref()) else {
        return Err(CliError::usage(format!(
            "generation `{}` has no commit and kept no proposed tree to diff: {why}",
            row.genid
        ))
        .at(ws.root().display().to_string())
        .hint("only a candidate rejected after its tree was snapshotted (surface, validate, novelty) keeps one; `evolve show` has its logs"));
    };
    if p.archived_tree.is_some() && !p.matches_archive() {
        return Err(CliError {
            what: format!(
                "refs/evolve/proposed/{} names tree {}, but the archived stop recorded {}",
                row.genid,
                p.tree,
                p.archived_tree.as_deref().unwrap_or("-")
            ),
            place: Some(ws.root().display().to_string()),
            hint: Some(
                "the ref was moved after the run; `evolve verify` checks the archive itself".into(),
            ),
            code: 1,
            details: Vec::new(),
        });
    }
    Ok(Shown {
        commit: p.commit,
        rejected: Some(Rejection {
            status,
            stage: row.failure_stage.clone(),
            reason: row.reason.clone(),
            certified: p.matches_archive(),
        }),
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
    let report = crate::workspace::evidence::Evidence::of_workspace(&ws).audit();
    let row = archived_row(&ws, &report, &a.genid)?;
    let against = match &a.against {
        Some(g) => g.clone(),
        None => default_against(&ws, row)?,
    };
    let target = shown_commit(&ws, row)?;
    let (from, to) = (tagged_commit(&ws, &against)?, target.commit);
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
        v["proposed"] = json!(target.rejected.is_some());
        if let Some(r) = &target.rejected {
            v["status"] = json!(r.status);
            v["failure_stage"] = json!(r.stage);
            v["reason"] = json!(r.reason);
            v["ref"] = json!(format!("refs/evolve/{}", layout::proposed_ref(&a.genid)));
            v["certified"] = json!(r.certified);
        }
        if let Some(verdict) = &row.verdict {
            v["verdict"] = json!(verdict);
            v["gate_reason"] = json!(row.gate_reason);
        }
        print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    print_verdict(&a.genid, row, target.rejected.as_ref());
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

/// Why the generation was not kept, before its diff: a rejected candidate's stop (its
/// diff is of the tree it proposed), or the gate's verdict and reason.
fn print_verdict(genid: &str, row: &Row, rejected: Option<&Rejection>) {
    if let Some(r) = rejected {
        println!(
            "gen {} was rejected before its commit: {}{}",
            display::text(genid),
            display::text(&r.status),
            r.stage
                .as_deref()
                .map_or(String::new(), |s| format!(" at {}", display::text(s)))
        );
        if let Some(reason) = &r.reason {
            println!("  reason: {}", display::text(reason));
        }
        println!(
            "  the diff is of the tree it proposed (refs/evolve/{}{})",
            display::text(&layout::proposed_ref(genid)),
            if r.certified {
                ", as the archive recorded it"
            } else {
                "; the archive recorded no tree for it"
            }
        );
    } else if let Some(verdict) = &row.verdict {
        println!(
            "gate: {}{}",
            display::text(verdict),
            row.gate_reason
                .as_deref()
                .map_or(String::new(), |r| format!(": {}", display::text(r)))
        );
    }
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
